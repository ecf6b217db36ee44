//! [`CachedSet`]: a typed set whose members are each one store key.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{try_rmw, Kind};
use crate::collections::CachedMap;
use crate::error::Result;
use crate::{Ns, Rmw, StateStore};

/// A set of `T` kept in a namespace of a store, one store key per member
/// (`prefix | postcard(T)` -> empty value; see the [FORMAT](super#format)): a map with
/// unit values under its own kind byte.
///
/// Members are compared by their postcard encoding. Iteration follows the store's
/// order and costs a prefix scan of the namespace.
pub struct CachedSet<T> {
    map: CachedMap<T, ()>,
}

impl<T> Clone for CachedSet<T> {
    fn clone(&self) -> Self {
        CachedSet { map: self.map.clone() }
    }
}

impl<T> fmt::Debug for CachedSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CachedSet").field(&self.map).finish()
    }
}

impl<T: Serialize + DeserializeOwned> CachedSet<T> {
    /// The set `id` in namespace `ns`.
    ///
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes.
    pub fn new(ns: Ns, id: &str) -> Self {
        CachedSet { map: CachedMap::with_kind(ns, Kind::Set, id) }
    }

    /// The namespace the set lives in.
    pub fn ns(&self) -> Ns {
        self.map.ns()
    }

    /// The set's id.
    pub fn id(&self) -> &str {
        self.map.id()
    }

    /// Adds `member`; returns whether it was absent. One read-modify-write (a member
    /// already present is not rewritten).
    pub fn insert<S: StateStore + ?Sized>(&self, store: &mut S, member: &T) -> Result<bool> {
        let k = self.map_key(member)?;
        let mut added = false;
        try_rmw(store, self.ns(), &k, |old, _| {
            added = old.is_none();
            Ok(if added { Rmw::Put } else { Rmw::Keep })
        })?;
        Ok(added)
    }

    /// Whether `member` is in the set. One store read.
    pub fn contains<S: StateStore + ?Sized>(&self, store: &mut S, member: &T) -> Result<bool> {
        self.map.contains_key(store, member)
    }

    /// Removes `member`; returns whether it was present. One read-modify-write.
    pub fn remove<S: StateStore + ?Sized>(&self, store: &mut S, member: &T) -> Result<bool> {
        let k = self.map_key(member)?;
        let mut removed = false;
        try_rmw(store, self.ns(), &k, |old, _| {
            removed = old.is_some();
            Ok(if removed { Rmw::Delete } else { Rmw::Keep })
        })?;
        Ok(removed)
    }

    /// Calls `f` with every member, in the store's order, until it returns `false`.
    pub fn for_each<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        mut f: impl FnMut(T) -> bool,
    ) -> Result<()> {
        self.map.for_each(store, |m, ()| f(m))
    }

    /// Every member, in the store's order.
    pub fn members<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<T>> {
        self.map.keys(store)
    }

    /// Number of members (a prefix scan).
    pub fn len<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        self.map.len(store)
    }

    /// Whether the set has no members.
    pub fn is_empty<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<bool> {
        self.map.is_empty(store)
    }

    /// Removes every member; returns how many there were.
    pub fn clear<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        self.map.clear(store)
    }

    fn map_key(&self, member: &T) -> Result<Vec<u8>> {
        self.map.collection().item_key(member)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;
    use crate::collections::testutil;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(i16),
        Remove(i16),
        Contains(i16),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (-20i16..20).prop_map(Op::Insert),
            3 => (-20i16..20).prop_map(Op::Remove),
            4 => (-20i16..20).prop_map(Op::Contains),
            1 => Just(Op::Clear),
        ]
    }

    fn run_model<S: StateStore + ?Sized>(store: &mut S, ns: Ns, ops: &[Op]) {
        // A map with the same id shares nothing with the set.
        let decoy: CachedMap<i16, ()> = CachedMap::new(ns, "s");
        decoy.put(store, &1, &()).unwrap();
        let set: CachedSet<i16> = CachedSet::new(ns, "s");
        let mut model = HashSet::new();
        for op in ops {
            match *op {
                Op::Insert(m) => assert_eq!(set.insert(store, &m).unwrap(), model.insert(m)),
                Op::Remove(m) => assert_eq!(set.remove(store, &m).unwrap(), model.remove(&m)),
                Op::Contains(m) => assert_eq!(set.contains(store, &m).unwrap(), model.contains(&m)),
                Op::Clear => {
                    assert_eq!(set.clear(store).unwrap(), std::mem::take(&mut model).len() as u64)
                }
            }
        }
        let got: HashSet<i16> = set.members(store).unwrap().into_iter().collect();
        assert_eq!(got, model);
        assert_eq!(set.len(store).unwrap(), model.len() as u64);
        assert_eq!(set.is_empty(store).unwrap(), model.is_empty());
        assert_eq!(decoy.len(store).unwrap(), 1);
    }

    proptest! {
        #[test]
        fn set_matches_hashset_over_mem(ops in proptest::collection::vec(op(), 0..200)) {
            let (_d, mut store, ns) = testutil::mem();
            run_model(&mut store, ns, &ops);
        }
    }

    #[test]
    fn set_matches_hashset_over_hashlog() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(8));
        runner
            .run(&proptest::collection::vec(op(), 0..300), |ops| {
                let dir = tempfile::tempdir().unwrap();
                let (mut store, ns) = testutil::hashlog(dir.path());
                run_model(&mut store, ns, &ops);
                Ok(())
            })
            .unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Stray keys under the set's prefix (any suffix, a damaged member) with any
        /// value: every operation answers `Ok` or `Err`.
        #[test]
        fn hostile_set_members_are_an_error_not_a_panic(
            suffix in proptest::collection::vec(any::<u8>(), 0..12),
            value in proptest::collection::vec(any::<u8>(), 0..6),
            ds in crate::hostile::damages(),
        ) {
            let (_d, mut store, ns) = testutil::mem();
            let set: CachedSet<(i16, String)> = CachedSet::new(ns, "s");
            let member = (-7, "member".to_string());
            set.insert(&mut store, &member).unwrap();
            let key = set.map_key(&member).unwrap();
            let prefix = set.map.collection().prefix().to_vec();
            let damaged = crate::hostile::damaged(&key[prefix.len()..], &ds);
            store.put(ns, &set.map.collection().key(&damaged), &value).unwrap();
            store.put(ns, &set.map.collection().key(&suffix), &value).unwrap();
            let _ = (set.contains(&mut store, &member), set.insert(&mut store, &(1, "x".into())));
            let _ = (set.members(&mut store), set.for_each(&mut store, |_| true));
            let _ = (set.len(&mut store), set.is_empty(&mut store), set.remove(&mut store, &member));
            let _ = set.clear(&mut store);
        }
    }
}
