//! [`CachedMap`]: a typed map whose entries are each one store key.

use crate::StateStoreExt;
use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{try_rmw, Collection, Kind};
use crate::error::Result;
use crate::{Ns, Rmw, StateStore};

/// A map from `K` to `V` kept in a namespace of a store, one store key per entry
/// (`prefix | postcard(K)` -> `postcard(V)`; see the [FORMAT](super#format)).
///
/// The handle holds no entries: every operation takes the store. Keys are compared by
/// their postcard encoding (so `0.0` and `-0.0` are different keys). Iteration
/// ([`for_each`](Self::for_each), [`entries`](Self::entries)) follows the store's
/// order, which on a hash store is no order at all, and costs a prefix scan of the
/// namespace.
///
/// ```
/// # use spillway_store::{MemStore, NamespaceSpec, StateStore, StoreOptions};
/// # use spillway_store::collections::CachedMap;
/// # let dir = tempfile::tempdir().unwrap();
/// let mut store = MemStore::open(StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("s")))?;
/// let counts: CachedMap<String, u64> = CachedMap::new(store.namespace("s")?, "counts");
/// counts.update(&mut store, &"rome".to_string(), |n| Some(n.unwrap_or(0) + 1))?;
/// assert_eq!(counts.get(&mut store, &"rome".to_string())?, Some(1));
/// # Ok::<(), spillway_store::Error>(())
/// ```
pub struct CachedMap<K, V> {
    c: Collection,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for CachedMap<K, V> {
    fn clone(&self) -> Self {
        CachedMap { c: self.c.clone(), _types: PhantomData }
    }
}

impl<K, V> fmt::Debug for CachedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedMap").field("ns", &self.c.ns()).field("id", &self.c.id()).finish()
    }
}

impl<K, V> CachedMap<K, V>
where
    K: Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// The map `id` in namespace `ns`.
    ///
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes.
    pub fn new(ns: Ns, id: &str) -> Self {
        Self::with_kind(ns, Kind::Map, id)
    }

    pub(crate) fn with_kind(ns: Ns, kind: Kind, id: &str) -> Self {
        CachedMap { c: Collection::new(ns, kind, id), _types: PhantomData }
    }

    pub(crate) fn collection(&self) -> &Collection {
        &self.c
    }

    /// The namespace the map lives in.
    pub fn ns(&self) -> Ns {
        self.c.ns()
    }

    /// The map's id.
    pub fn id(&self) -> &str {
        self.c.id()
    }

    /// The value of `key`, if present. One store read.
    pub fn get<S: StateStore + ?Sized>(&self, store: &mut S, key: &K) -> Result<Option<V>> {
        let k = self.c.item_key(key)?;
        let mut buf = Vec::new();
        if store.get_into(self.c.ns(), &k, &mut buf)? {
            Ok(Some(self.c.decode(&k, &buf)?))
        } else {
            Ok(None)
        }
    }

    /// Whether `key` is present (its value is not decoded). One store read.
    pub fn contains_key<S: StateStore + ?Sized>(&self, store: &mut S, key: &K) -> Result<bool> {
        let k = self.c.item_key(key)?;
        store.get_into(self.c.ns(), &k, &mut Vec::new())
    }

    /// Sets `key` to `value` and returns the previous value. One read-modify-write; if
    /// the previous value does not decode, nothing is written and that is the error.
    pub fn insert<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        key: &K,
        value: &V,
    ) -> Result<Option<V>> {
        let k = self.c.item_key(key)?;
        let mut new = Vec::new();
        self.c.encode_into(&k, value, &mut new)?;
        let mut prev = None;
        try_rmw(store, self.c.ns(), &k, |old, out| {
            if let Some(old) = old {
                prev = Some(self.c.decode(&k, old)?);
            }
            out.extend_from_slice(&new);
            Ok(Rmw::Put)
        })?;
        Ok(prev)
    }

    /// Sets `key` to `value` without reading the previous value. One store write.
    pub fn put<S: StateStore + ?Sized>(&self, store: &mut S, key: &K, value: &V) -> Result<()> {
        let k = self.c.item_key(key)?;
        let mut new = Vec::new();
        self.c.encode_into(&k, value, &mut new)?;
        store.put(self.c.ns(), &k, &new)
    }

    /// Removes `key` and returns its value. One read-modify-write.
    pub fn remove<S: StateStore + ?Sized>(&self, store: &mut S, key: &K) -> Result<Option<V>> {
        let k = self.c.item_key(key)?;
        let mut prev = None;
        try_rmw(store, self.c.ns(), &k, |old, _| match old {
            None => Ok(Rmw::Keep),
            Some(old) => {
                prev = Some(self.c.decode(&k, old)?);
                Ok(Rmw::Delete)
            }
        })?;
        Ok(prev)
    }

    /// Removes `key` without reading its value. One store delete.
    pub fn delete<S: StateStore + ?Sized>(&self, store: &mut S, key: &K) -> Result<()> {
        let k = self.c.item_key(key)?;
        store.delete(self.c.ns(), &k)
    }

    /// Replaces the value of `key` by `f(current)`: `Some` stores it, `None` removes
    /// the key (or leaves it absent). One read-modify-write; `f` is not called if the
    /// current value does not decode.
    pub fn update<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        key: &K,
        f: impl FnOnce(Option<V>) -> Option<V>,
    ) -> Result<()> {
        let k = self.c.item_key(key)?;
        let mut f = Some(f);
        try_rmw(store, self.c.ns(), &k, |old, out| {
            let Some(f) = f.take() else { return Ok(Rmw::Keep) };
            let cur = old.map(|b| self.c.decode(&k, b)).transpose()?;
            let had = cur.is_some();
            match f(cur) {
                Some(v) => {
                    self.c.encode_into(&k, &v, out)?;
                    Ok(Rmw::Put)
                }
                None if had => Ok(Rmw::Delete),
                None => Ok(Rmw::Keep),
            }
        })
    }

    /// Calls `f` with every entry, in the store's order, until it returns `false`.
    /// One prefix scan; an entry that does not decode stops the walk with its error.
    pub fn for_each<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        mut f: impl FnMut(K, V) -> bool,
    ) -> Result<()> {
        let mut failed = None;
        store.scan_prefix(self.c.ns(), self.c.prefix(), &mut |k, v| {
            let entry = self.c.decode_key::<K>(k).and_then(|key| Ok((key, self.c.decode(k, v)?)));
            match entry {
                Ok((key, value)) => f(key, value),
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// Every entry, in the store's order.
    pub fn entries<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<(K, V)>> {
        let mut out = Vec::new();
        self.for_each(store, |k, v| {
            out.push((k, v));
            true
        })?;
        Ok(out)
    }

    /// Every key, in the store's order (values are not decoded).
    pub fn keys<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<K>> {
        let mut out = Vec::new();
        let mut failed = None;
        store.scan_prefix(self.c.ns(), self.c.prefix(), &mut |k, _| {
            match self.c.decode_key(k) {
                Ok(key) => out.push(key),
                Err(e) => failed = Some(e),
            }
            failed.is_none()
        })?;
        failed.map_or(Ok(out), Err)
    }

    /// Number of entries (a prefix scan; nothing is decoded).
    pub fn len<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        let mut n = 0u64;
        store.scan_prefix(self.c.ns(), self.c.prefix(), &mut |_, _| {
            n += 1;
            true
        })?;
        Ok(n)
    }

    /// Whether the map has no entries (a prefix scan that stops at the first).
    pub fn is_empty<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<bool> {
        let mut empty = true;
        store.scan_prefix(self.c.ns(), self.c.prefix(), &mut |_, _| {
            empty = false;
            false
        })?;
        Ok(empty)
    }

    /// Removes every entry; returns how many there were. One prefix scan, then one
    /// delete per entry.
    pub fn clear<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        store.scan_prefix(self.c.ns(), self.c.prefix(), &mut |k, _| {
            keys.push(k.to_vec());
            true
        })?;
        for k in &keys {
            store.delete(self.c.ns(), k)?;
        }
        Ok(keys.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::collections::testutil;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16, u32),
        Put(u16, u32),
        Remove(u16),
        Delete(u16),
        Add(u16, u32),
        Get(u16),
        Clear,
        Check,
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u16..40;
        prop_oneof![
            6 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Put(k, v)),
            3 => k.clone().prop_map(Op::Remove),
            2 => k.clone().prop_map(Op::Delete),
            4 => (k.clone(), 0u32..3).prop_map(|(k, d)| Op::Add(k, d)),
            4 => k.prop_map(Op::Get),
            1 => Just(Op::Clear),
            2 => Just(Op::Check),
        ]
    }

    /// Applies `ops` to two maps (ids "a" and "ab", to catch prefix leaks) and to
    /// BTreeMap models, asserting every answer.
    fn run_model<S: StateStore + ?Sized>(store: &mut S, ns: Ns, ops: &[Op]) {
        let maps: [CachedMap<u16, u32>; 2] = [CachedMap::new(ns, "a"), CachedMap::new(ns, "ab")];
        let mut models = [BTreeMap::new(), BTreeMap::new()];
        for (i, op) in ops.iter().enumerate() {
            let (m, model) = (&maps[i % 2], &mut models[i % 2]);
            match *op {
                Op::Insert(k, v) => {
                    assert_eq!(m.insert(store, &k, &v).unwrap(), model.insert(k, v))
                }
                Op::Put(k, v) => {
                    m.put(store, &k, &v).unwrap();
                    model.insert(k, v);
                }
                Op::Remove(k) => assert_eq!(m.remove(store, &k).unwrap(), model.remove(&k)),
                Op::Delete(k) => {
                    m.delete(store, &k).unwrap();
                    model.remove(&k);
                }
                Op::Add(k, d) => {
                    // d == 0 removes: exercises update's delete path.
                    let f = |v: Option<u32>| (d > 0).then(|| v.unwrap_or(0).wrapping_add(d));
                    let new = f(model.get(&k).copied());
                    m.update(store, &k, f).unwrap();
                    match new {
                        Some(v) => model.insert(k, v),
                        None => model.remove(&k),
                    };
                }
                Op::Get(k) => {
                    assert_eq!(m.get(store, &k).unwrap(), model.get(&k).copied());
                    assert_eq!(m.contains_key(store, &k).unwrap(), model.contains_key(&k));
                }
                Op::Clear => {
                    assert_eq!(m.clear(store).unwrap(), std::mem::take(model).len() as u64)
                }
                Op::Check => {}
            }
        }
        for (m, model) in maps.iter().zip(&models) {
            let mut got = m.entries(store).unwrap();
            got.sort_unstable();
            assert_eq!(got, model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
            let mut keys = m.keys(store).unwrap();
            keys.sort_unstable();
            assert_eq!(keys, model.keys().copied().collect::<Vec<_>>());
            assert_eq!(m.len(store).unwrap(), model.len() as u64);
            assert_eq!(m.is_empty(store).unwrap(), model.is_empty());
        }
    }

    proptest! {
        #[test]
        fn map_matches_btreemap_over_mem(ops in proptest::collection::vec(op(), 0..200)) {
            let (_d, mut store, ns) = testutil::mem();
            run_model(&mut store, ns, &ops);
        }
    }

    #[test]
    fn map_matches_btreemap_over_hashlog() {
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

    #[test]
    fn map_survives_checkpoint_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let m: CachedMap<String, Vec<u64>> = CachedMap::new(crate::Ns(0), "m");
        {
            let (mut store, ns) = testutil::hashlog(dir.path());
            assert_eq!(ns, m.ns());
            for i in 0..500u64 {
                m.put(&mut store, &format!("k{i}"), &vec![i; (i % 7) as usize]).unwrap();
            }
            store.checkpoint().unwrap();
            // Written after the checkpoint: gone after reopening.
            m.put(&mut store, &"late".to_string(), &vec![1]).unwrap();
            m.remove(&mut store, &"k3".to_string()).unwrap();
        }
        let (mut store, _) = testutil::hashlog(dir.path());
        assert_eq!(m.len(&mut store).unwrap(), 500);
        assert_eq!(m.get(&mut store, &"k3".to_string()).unwrap(), Some(vec![3; 3]));
        assert_eq!(m.get(&mut store, &"late".to_string()).unwrap(), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// An entry's value damaged (or any bytes), and a stray key under the map's
        /// prefix with any suffix and value: every operation answers `Ok` or `Err`.
        #[test]
        fn hostile_map_values_and_keys_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..24),
            suffix in proptest::collection::vec(any::<u8>(), 0..12),
            ds in crate::hostile::damages(),
            use_raw in any::<bool>(),
        ) {
            let (_d, mut store, ns) = testutil::mem();
            let m: CachedMap<String, Vec<(u8, String, Option<u64>)>> = CachedMap::new(ns, "m");
            let k = "k".to_string();
            m.put(&mut store, &k, &vec![(1, "é".into(), Some(u64::MAX)), (2, String::new(), None)]).unwrap();
            let key = m.c.item_key(&k).unwrap();
            let valid = store.get(ns, &key).unwrap().unwrap();
            let v = if use_raw { raw.clone() } else { crate::hostile::damaged(&valid, &ds) };
            store.put(ns, &key, &v).unwrap();
            store.put(ns, &m.c.key(&suffix), &raw).unwrap();
            let _ = (m.get(&mut store, &k), m.contains_key(&mut store, &k));
            let _ = m.update(&mut store, &k, |v| v.map(|mut v| { v.push((3, "x".into(), None)); v }));
            let _ = (m.insert(&mut store, &k, &Vec::new()), m.remove(&mut store, &k));
            let _ = (m.entries(&mut store), m.keys(&mut store), m.len(&mut store));
            let _ = (m.is_empty(&mut store), m.clear(&mut store));
        }
    }
}
