//! Shared window state (CCGrid'17, "shared state in key-value stores for window-based
//! multi-pattern analytics"): many windows over one stream keep each event once, under a
//! content reference with a reference count, and each window keeps only a list of
//! references. It owns the reference scheme and the counting; the bytes live in any
//! [`StateStore`] (the tiered store's Redis level included).
//!
//! - `append(window, event)` stores the event once under its 16-byte reference (the
//!   XXH3-128 of its bytes) and adds one to its count, then appends the reference to the
//!   window's list (a list-append merge).
//! - `read(window)` returns the window's events in append order with one `multi_get`.
//! - `purge(window)` drops one count per reference in the window's list, deletes each
//!   event whose count reaches zero (exactly once: when its last window lets go), and
//!   deletes the list.
//!
//! Collision safety: two different events with the same 128-bit hash are never merged.
//! The stored bytes are compared on every `append`; on a mismatch the reference moves to
//! the next slot of its probe sequence (the last 4 bytes incremented) until it finds the
//! same bytes or a free slot. A reference names one slot for its whole life, so lists
//! stay valid.
//!
//! # FORMAT
//! - Event namespace (point): key = reference (16 bytes: XXH3-128 little-endian, its last
//!   4 bytes + probe step, wrapping); value = `[count: u32 LE][event bytes]`.
//! - List namespace (declared with [`MergeOp::ListAppend`](crate::MergeOp)): key = the
//!   window key; value = a [`crate::list`] of 16-byte references.
//!
//! Counts and lists are ordinary store state, so they are checkpointed and recovered with
//! the store. [`redis`] keeps the same scheme natively in Redis (Lua scripts, pipelined),
//! and the copies baseline beside it. The harness's multi-pattern experiments
//! (`spillway_bench::workload::multi`) and `spillway bench shared` build on both.

pub mod redis;

pub use self::redis::{RedisLists, RedisSharedLists};

use crate::error::{Error, Result};
use crate::{Ns, Rmw, StateStore};

/// A content reference: where an event is stored in the event namespace.
pub type Ref = [u8; 16];

/// Bytes of the count in front of a stored event.
const COUNT: usize = 4;

/// Probe steps before giving up (16 distinct events sharing one 128-bit hash would be a
/// broken hash function, not bad luck).
const MAX_PROBES: u32 = 16;

/// Handles of the two namespaces shared lists live in.
#[derive(Clone, Copy, Debug)]
pub struct SharedLists {
    events: Ns,
    lists: Ns,
}

/// The reference of `event` at probe step `step`.
pub fn reference(event: &[u8], step: u32) -> Ref {
    let mut r = xxhash_rust::xxh3::xxh3_128(event).to_le_bytes();
    let tail = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes")).wrapping_add(step);
    r[12..16].copy_from_slice(&tail.to_le_bytes());
    r
}

impl SharedLists {
    /// Shared lists over `events` (a point namespace) and `lists` (a list-append
    /// namespace) of a store.
    pub fn new(events: Ns, lists: Ns) -> Self {
        SharedLists { events, lists }
    }

    /// Stores `event` once (or counts one more use of it) and appends its reference to
    /// `window`'s list. Returns the reference.
    pub fn append(&self, store: &mut dyn StateStore, window: &[u8], event: &[u8]) -> Result<Ref> {
        Ok(self.append_many(store, &[window], event)?.reference)
    }

    /// Appends `event` to every list of `windows` (a window named twice holds it twice):
    /// one read-modify-write adds `windows.len()` to its count, then one list append per
    /// window. This is how an operator that assigns an event to several windows at once
    /// (sliding windows, several patterns) pays for the event's bytes once.
    pub fn append_many(
        &self,
        store: &mut dyn StateStore,
        windows: &[&[u8]],
        event: &[u8],
    ) -> Result<Appended> {
        crate::check_value(event.len(), crate::MAX_VALUE_LEN - COUNT)?;
        let uses = u32::try_from(windows.len()).map_err(|_| Error::InvalidOption {
            option: "shared list windows",
            detail: "more than 2^32 windows for one event".into(),
        })?;
        if uses == 0 {
            return Ok(Appended { reference: reference(event, 0), stored: false });
        }
        for step in 0..MAX_PROBES {
            let r = reference(event, step);
            let mut outcome = Probe::Collision;
            store.rmw(self.events, &r, &mut |old, out| match old {
                None => {
                    out.extend_from_slice(&uses.to_le_bytes());
                    out.extend_from_slice(event);
                    outcome = Probe::Stored { new: true };
                    Rmw::Put
                }
                Some(v) if v.len() >= COUNT && &v[COUNT..] == event => {
                    let n = u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"));
                    out.extend_from_slice(&n.saturating_add(uses).to_le_bytes());
                    out.extend_from_slice(event);
                    outcome = Probe::Stored { new: false };
                    Rmw::Put
                }
                Some(_) => Rmw::Keep,
            })?;
            if let Probe::Stored { new } = outcome {
                for w in windows {
                    store.merge(self.lists, w, &r)?;
                }
                return Ok(Appended { reference: r, stored: new });
            }
        }
        Err(too_many_probes())
    }

    /// The events of `window`, in append order (empty if it has none).
    pub fn read(&self, store: &mut dyn StateStore, window: &[u8]) -> Result<Vec<Vec<u8>>> {
        let refs = self.refs(store, window)?;
        let keys: Vec<&[u8]> = refs.iter().map(|r| &r[..]).collect();
        let mut out = Vec::with_capacity(keys.len());
        let mut missing = None;
        store.multi_get_with(self.events, &keys, &mut |i, v| match v {
            Some(v) if v.len() >= COUNT => out.push(v[COUNT..].to_vec()),
            _ => {
                missing.get_or_insert(i);
            }
        })?;
        match missing {
            None => Ok(out),
            Some(i) => Err(dangling(window, &refs[i])),
        }
    }

    /// Lets `window` go: one count less for each of its references, each event deleted
    /// when its count reaches zero; then the list itself. Returns the number of events
    /// freed.
    pub fn purge(&self, store: &mut dyn StateStore, window: &[u8]) -> Result<usize> {
        self.take(store, window, &mut |_| {})
    }

    /// A window that fires and is cleared at once (a window operator with no allowed
    /// lateness): `visit` sees each event in append order, as [`read`](Self::read)
    /// returns them, while the counts drop as in [`purge`](Self::purge), in one batched
    /// pass over the events (`multi_rmw`) instead of a `multi_get` and a second pass.
    /// Returns the number of events freed.
    pub fn take(
        &self,
        store: &mut dyn StateStore,
        window: &[u8],
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        let refs = self.refs(store, window)?;
        let keys: Vec<&[u8]> = refs.iter().map(|r| &r[..]).collect();
        let mut freed = 0usize;
        let mut missing = None;
        store.multi_rmw(self.events, &keys, &mut |i, old, out| {
            if missing.is_some() {
                return Rmw::Keep;
            }
            let Some(v) = old.filter(|v| v.len() >= COUNT) else {
                missing.get_or_insert(i);
                return Rmw::Keep;
            };
            visit(&v[COUNT..]);
            let n = u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"));
            if n <= 1 {
                freed += 1;
                return Rmw::Delete;
            }
            out.extend_from_slice(&(n - 1).to_le_bytes());
            out.extend_from_slice(&v[COUNT..]);
            Rmw::Put
        })?;
        if let Some(i) = missing {
            return Err(dangling(window, &refs[i]));
        }
        store.delete(self.lists, window)?;
        Ok(freed)
    }

    /// The reference count of `r` (0: not stored).
    pub fn count(&self, store: &mut dyn StateStore, r: &Ref) -> Result<u32> {
        Ok(store
            .get(self.events, r)?
            .filter(|v| v.len() >= COUNT)
            .map_or(0, |v| u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"))))
    }

    fn refs(&self, store: &mut dyn StateStore, window: &[u8]) -> Result<Vec<Ref>> {
        let Some(list) = store.get(self.lists, window)? else { return Ok(Vec::new()) };
        crate::list::iter(&list)
            .map(|e| {
                let e = e.map_err(|b| bad_list(window, &b.to_string()))?;
                <Ref>::try_from(e).map_err(|_| bad_list(window, "an element is not 16 bytes"))
            })
            .collect()
    }
}

/// What [`SharedLists::append_many`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    /// Where the event is stored.
    pub reference: Ref,
    /// The event was not stored before (its bytes are new state); otherwise only its
    /// count grew.
    pub stored: bool,
}

enum Probe {
    Stored { new: bool },
    Collision,
}

fn too_many_probes() -> Error {
    Error::InvalidOption {
        option: "shared list event",
        detail: format!("{MAX_PROBES} different events share one 128-bit reference"),
    }
}

fn bad_list(window: &[u8], what: &str) -> Error {
    Error::Decode {
        collection: "shared lists".into(),
        key: hex(window),
        detail: format!("the window's reference list is damaged: {what}"),
    }
}

fn dangling(window: &[u8], r: &Ref) -> Error {
    Error::Decode {
        collection: "shared lists".into(),
        key: hex(window),
        detail: format!("reference {} names no stored event", hex(r)),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::{MemStore, NamespaceSpec, StoreOptions};

    fn store(dir: &std::path::Path) -> (MemStore, SharedLists) {
        let s = MemStore::open(
            StoreOptions::new(dir)
                .namespace(NamespaceSpec::with_merge("events", crate::merges::add_u64()))
                .namespace(NamespaceSpec::list("lists")),
        )
        .expect("open");
        let sh = SharedLists::new(s.namespace("events").unwrap(), s.namespace("lists").unwrap());
        (s, sh)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Append(u8, u8),
        AppendMany(Vec<u8>, u8),
        Read(u8),
        Purge(u8),
        Take(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..6, 0u8..12).prop_map(|(w, e)| Op::Append(w, e)),
            3 => (proptest::collection::vec(0u8..6, 0..4), 0u8..12)
                .prop_map(|(ws, e)| Op::AppendMany(ws, e)),
            2 => (0u8..6).prop_map(Op::Read),
            1 => (0u8..6).prop_map(Op::Purge),
            1 => (0u8..6).prop_map(Op::Take),
        ]
    }

    fn event(e: u8) -> Vec<u8> {
        format!("event-{e}-{}", "x".repeat(e as usize)).into_bytes()
    }

    proptest! {
        /// Against a model of per-window event lists: reads return each window's events in
        /// order, and an event is stored exactly while some window holds it, with a count
        /// equal to the number of its references in all lists.
        #[test]
        fn shared_lists_match_a_model(ops in proptest::collection::vec(op(), 1..200)) {
            let dir = tempfile::tempdir().unwrap();
            let (mut s, sh) = store(dir.path());
            let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
            for op in ops {
                match op {
                    Op::Append(w, e) => {
                        sh.append(&mut s, &[w], &event(e)).unwrap();
                        model.entry(w).or_default().push(e);
                    }
                    Op::AppendMany(ws, e) => {
                        let was = sh.count(&mut s, &reference(&event(e), 0)).unwrap();
                        let keys: Vec<[u8; 1]> = ws.iter().map(|&w| [w]).collect();
                        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                        let a = sh.append_many(&mut s, &keys, &event(e)).unwrap();
                        prop_assert_eq!(a.stored, was == 0 && !ws.is_empty());
                        for w in ws {
                            model.entry(w).or_default().push(e);
                        }
                    }
                    Op::Take(w) => {
                        let mut got = Vec::new();
                        let freed = sh.take(&mut s, &[w], &mut |e| got.push(e.to_vec())).unwrap();
                        let list = model.remove(&w).unwrap_or_default();
                        let want: Vec<Vec<u8>> = list.iter().map(|&e| event(e)).collect();
                        prop_assert_eq!(got, want);
                        let mut distinct = list.clone();
                        distinct.sort_unstable();
                        distinct.dedup();
                        let gone = distinct
                            .iter()
                            .filter(|e| !model.values().flatten().any(|x| x == *e))
                            .count();
                        prop_assert_eq!(freed, gone);
                    }
                    Op::Read(w) => {
                        let got = sh.read(&mut s, &[w]).unwrap();
                        let want: Vec<Vec<u8>> =
                            model.get(&w).map(|l| l.iter().map(|&e| event(e)).collect()).unwrap_or_default();
                        prop_assert_eq!(got, want);
                    }
                    Op::Purge(w) => {
                        sh.purge(&mut s, &[w]).unwrap();
                        model.remove(&w);
                    }
                }
                for e in 0u8..12 {
                    let refs = model.values().flatten().filter(|&&x| x == e).count() as u32;
                    prop_assert_eq!(sh.count(&mut s, &reference(&event(e), 0)).unwrap(), refs);
                }
            }
        }
    }

    /// Two different events forced onto one reference are kept apart (the second moves to
    /// the next probe slot), never merged.
    #[test]
    fn a_colliding_reference_is_detected_not_merged() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, sh) = store(dir.path());
        // Plant another event's bytes under the reference of `b"real"`.
        let r = reference(b"real", 0);
        let mut planted = 7u32.to_le_bytes().to_vec();
        planted.extend_from_slice(b"impostor");
        s.put(sh.events, &r, &planted).unwrap();
        let got = sh.append(&mut s, b"w", b"real").unwrap();
        assert_eq!(got, reference(b"real", 1));
        assert_eq!(sh.read(&mut s, b"w").unwrap(), vec![b"real".to_vec()]);
        assert_eq!(sh.count(&mut s, &r).unwrap(), 7, "the other event is untouched");
        assert_eq!(sh.purge(&mut s, b"w").unwrap(), 1);
        assert_eq!(sh.count(&mut s, &got).unwrap(), 0);
    }

    /// Counts and lists survive a checkpoint and a reopen.
    #[test]
    fn counts_survive_checkpoint_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut s, sh) = store(dir.path());
            for w in 0u8..3 {
                sh.append(&mut s, &[w], b"shared").unwrap();
            }
            s.checkpoint().unwrap();
        }
        let (mut s, sh) = store(dir.path());
        assert_eq!(sh.count(&mut s, &reference(b"shared", 0)).unwrap(), 3);
        assert_eq!(sh.purge(&mut s, &[0]).unwrap(), 0);
        assert_eq!(sh.purge(&mut s, &[1]).unwrap(), 0);
        assert_eq!(sh.purge(&mut s, &[2]).unwrap(), 1, "freed by its last window");
        assert!(sh.read(&mut s, &[2]).unwrap().is_empty());
    }
}
