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
//! - `purge(window)` deletes the window's list, then drops one count per reference it
//!   held, deleting each event whose count reaches zero (exactly once: when its last
//!   window lets go).
//!
//! Each call is several store operations, any of which can fail (a list past a
//! hashlog page, an I/O error). A call either completes or leaves the store as it was:
//! the operations are ordered so that a count is never below the number of references
//! to its event (a count is raised before the references are added, a list is deleted
//! before the counts drop), and on an error the call undoes what it did in reverse
//! (references removed before counts are lowered back, counts raised back before a
//! list is restored). So a failed call can be retried, and even if its undo fails too
//! (a store that fails every operation), no event that a list still references is ever
//! freed; at worst an event outlives its last reference.
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
use crate::StateStoreExt;
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
    /// (sliding windows, several patterns) pays for the event's bytes once. On an error
    /// (a list append the store refuses) the appends made are removed and the count is
    /// lowered back: no window holds the event and its count is as before.
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
                for (i, w) in windows.iter().enumerate() {
                    if let Err(e) = store.merge(self.lists, w, &r) {
                        self.undo_append(store, &windows[..i], &r, uses);
                        return Err(e);
                    }
                }
                return Ok(Appended { reference: r, stored: new });
            }
        }
        Err(too_many_probes())
    }

    /// Undoes an `append_many` whose list appends to `appended` succeeded and whose next
    /// one failed, after its count was raised by `uses`: removes the reference from the
    /// end of those lists (in reverse), then lowers the count by `uses` less the
    /// references it could not remove, deleting the event at zero. Best effort: a list
    /// that cannot be changed ends the removals there and the count keeps counting the
    /// references left; a count that cannot be lowered stays above them (the caller
    /// gets the append's error either way).
    fn undo_append(&self, store: &mut dyn StateStore, appended: &[&[u8]], r: &Ref, uses: u32) {
        let mut removed = 0u32;
        for w in appended.iter().rev() {
            let mut popped = false;
            let res = store.rmw(self.lists, w, &mut |old, out| {
                let Some(v) = old else { return Rmw::Keep };
                match crate::list::iter(v).last() {
                    Some(Ok(e)) if e == r.as_slice() => {
                        popped = true;
                        let rest = &v[..v.len() - crate::list::framed_len(e)];
                        if rest.is_empty() {
                            return Rmw::Delete;
                        }
                        out.extend_from_slice(rest);
                        Rmw::Put
                    }
                    _ => Rmw::Keep,
                }
            });
            if res.is_err() || !popped {
                break;
            }
            removed += 1;
        }
        let kept = appended.len() as u32 - removed;
        let lower = uses - kept;
        let _ = store.rmw(self.events, r, &mut |old, out| {
            let Some(v) = old.filter(|v| v.len() >= COUNT) else { return Rmw::Keep };
            let n = u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"));
            if n <= lower {
                return Rmw::Delete;
            }
            out.extend_from_slice(&(n - lower).to_le_bytes());
            out.extend_from_slice(&v[COUNT..]);
            Rmw::Put
        });
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

    /// Lets `window` go: its list is deleted, then each of its references drops one
    /// count, each event deleted when its count reaches zero. Returns the number of
    /// events freed. On an error nothing is purged (see [`take`](Self::take)).
    pub fn purge(&self, store: &mut dyn StateStore, window: &[u8]) -> Result<usize> {
        self.take(store, window, &mut |_| {})
    }

    /// A window that fires and is cleared at once (a window operator with no allowed
    /// lateness): `visit` sees each event in append order, as [`read`](Self::read)
    /// returns them, while the counts drop as in [`purge`](Self::purge), in one pass
    /// over the events (read-modify-writes, prefetched in batches) instead of a
    /// `multi_get` and a second pass. Returns the number of events freed.
    ///
    /// On an error (or a reference to a missing event) the counts dropped are raised
    /// back, the events freed are stored again and the list is restored: nothing is
    /// taken, and the events `visit` saw must be discarded.
    pub fn take(
        &self,
        store: &mut dyn StateStore,
        window: &[u8],
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        let Some(list) = store.get(self.lists, window)? else { return Ok(0) };
        let refs = parse_refs(window, &list)?;
        // The list goes first: from here on the counts are at or above the references
        // left, and each step below brings one down to its references.
        store.delete(self.lists, window)?;
        // Per reference done: the event's bytes if it was freed (to store it again on
        // an undo), `None` if its count dropped by one.
        let mut done: Vec<Option<Vec<u8>>> = Vec::with_capacity(refs.len());
        for batch in refs.chunks(PREFETCH) {
            let keys: Vec<(Ns, &[u8])> = batch.iter().map(|r| (self.events, &r[..])).collect();
            store.prefetch(&keys);
            for r in batch {
                let mut step = None;
                let res = store.rmw(self.events, r, &mut |old, out| {
                    let Some(v) = old.filter(|v| v.len() >= COUNT) else { return Rmw::Keep };
                    visit(&v[COUNT..]);
                    let n = u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"));
                    if n <= 1 {
                        step = Some(Some(v[COUNT..].to_vec()));
                        return Rmw::Delete;
                    }
                    out.extend_from_slice(&(n - 1).to_le_bytes());
                    out.extend_from_slice(&v[COUNT..]);
                    step = Some(None);
                    Rmw::Put
                });
                match (res, step) {
                    (Ok(()), Some(s)) => done.push(s),
                    (res, _) => {
                        self.undo_take(store, window, &list, &refs, &done);
                        res?;
                        return Err(dangling(window, &refs[done.len()]));
                    }
                }
            }
        }
        Ok(done.iter().filter(|d| d.is_some()).count())
    }

    /// Undoes a `take` of `window` (whose list was `list`, references `refs`) whose
    /// first `done.len()` count drops succeeded: raises those counts back in reverse
    /// (storing freed events again with a count of one), then restores the list. Best
    /// effort: a step that fails ends the undo (counts raised so far stay raised, so no
    /// reference is left to an event it does not count).
    fn undo_take(
        &self,
        store: &mut dyn StateStore,
        window: &[u8],
        list: &[u8],
        refs: &[Ref],
        done: &[Option<Vec<u8>>],
    ) {
        for (r, freed) in refs.iter().zip(done).rev() {
            let res = store.rmw(self.events, r, &mut |old, out| {
                match (old.filter(|v| v.len() >= COUNT), freed) {
                    (Some(v), _) => {
                        let n = u32::from_le_bytes(v[..COUNT].try_into().expect("4 bytes"));
                        out.extend_from_slice(&n.saturating_add(1).to_le_bytes());
                        out.extend_from_slice(&v[COUNT..]);
                    }
                    (None, Some(event)) => {
                        out.extend_from_slice(&1u32.to_le_bytes());
                        out.extend_from_slice(event);
                    }
                    (None, None) => return Rmw::Keep,
                }
                Rmw::Put
            });
            if res.is_err() {
                return;
            }
        }
        let _ = store.put(self.lists, window, list);
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
        parse_refs(window, &list)
    }
}

/// References whose count drops [`SharedLists::take`] prefetches at a time.
const PREFETCH: usize = 32;

/// The references of `window`'s list `list`.
fn parse_refs(window: &[u8], list: &[u8]) -> Result<Vec<Ref>> {
    crate::list::iter(list)
        .map(|e| {
            let e = e.map_err(|b| bad_list(window, &b.to_string()))?;
            <Ref>::try_from(e).map_err(|_| bad_list(window, "an element is not 16 bytes"))
        })
        .collect()
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
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A stored event (count and bytes) and a window's reference list damaged (a
        /// frame length or count set huge, a cut) or any bytes: every call answers `Ok`
        /// or `Err`.
        #[test]
        fn hostile_shared_values_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..40),
            ds in crate::hostile::damages(),
            which in 0u8..3,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (mut s, sh) = store(dir.path());
            let r = sh.append_many(&mut s, &[b"w", b"w2"], &event(3)).unwrap().reference;
            sh.append(&mut s, b"w", &event(4)).unwrap();
            let ev = s.get(sh.events, &r).unwrap().unwrap();
            let list = s.get(sh.lists, b"w").unwrap().unwrap();
            if which != 1 {
                let v = if which == 0 { crate::hostile::damaged(&ev, &ds) } else { raw.clone() };
                s.put(sh.events, &r, &v).unwrap();
            }
            if which != 0 {
                let v = if which == 1 { crate::hostile::damaged(&list, &ds) } else { raw };
                s.put(sh.lists, b"w", &v).unwrap();
            }
            let _ = (sh.read(&mut s, b"w"), sh.read(&mut s, b"w2"), sh.count(&mut s, &r));
            let _ = sh.append_many(&mut s, &[b"w", b"w3"], &event(3));
            let _ = sh.take(&mut s, b"w2", &mut |_| {});
            let _ = (sh.purge(&mut s, b"w"), sh.purge(&mut s, b"w3"));
        }
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

    /// A store that fails one chosen operation (counting every call that reaches it:
    /// reads, writes, and the single operations of batches, which the trait's default
    /// batch methods make) with a transient I/O error, without applying it; every other
    /// operation goes through to `inner`.
    struct Flaky<S> {
        inner: S,
        ops: u64,
        fail_at: Option<u64>,
    }

    impl<S: StateStore> Flaky<S> {
        fn new(inner: S) -> Self {
            Flaky { inner, ops: 0, fail_at: None }
        }

        /// Fails the `k`-th operation from now (1: the next one).
        fn fail_in(&mut self, k: u64) {
            self.fail_at = Some(self.ops + k);
        }

        fn tick(&mut self) -> Result<()> {
            self.ops += 1;
            if self.fail_at == Some(self.ops) {
                self.fail_at = None;
                let eio = std::io::Error::from_raw_os_error(libc::EIO);
                return Err(Error::io("injected fault", "flaky-store", eio));
            }
            Ok(())
        }
    }

    impl<S: StateStore> StateStore for Flaky<S> {
        fn name(&self) -> &'static str {
            "flaky"
        }
        fn namespace(&self, name: &str) -> Result<Ns> {
            self.inner.namespace(name)
        }
        fn is_ordered(&self, ns: Ns) -> bool {
            self.inner.is_ordered(ns)
        }
        fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
            self.tick()?;
            self.inner.get_into(ns, key, out)
        }
        fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
            self.tick()?;
            self.inner.put(ns, key, value)
        }
        fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
            self.tick()?;
            self.inner.merge(ns, key, operand)
        }
        fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
            self.tick()?;
            self.inner.delete(ns, key)
        }
        fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut crate::RmwFn<'_>) -> Result<()> {
            self.tick()?;
            self.inner.rmw(ns, key, f)
        }
        fn range(
            &mut self,
            ns: Ns,
            start: std::ops::Bound<&[u8]>,
            end: std::ops::Bound<&[u8]>,
            order: crate::Order,
            limit: usize,
            visit: &mut crate::Visitor<'_>,
        ) -> Result<usize> {
            self.tick()?;
            self.inner.range(ns, start, end, order, limit, visit)
        }
        fn checkpoint(&mut self) -> Result<crate::CheckpointInfo> {
            self.inner.checkpoint()
        }
        fn stats(&self) -> crate::StoreStats {
            self.inner.stats()
        }
    }

    /// Every stored event with its count, read straight from the event namespace.
    fn stored_events(s: &mut dyn StateStore, sh: &SharedLists) -> Vec<(Ref, u32, Vec<u8>)> {
        let mut out = Vec::new();
        s.scan_prefix(sh.events, b"", &mut |k, v| {
            let n = u32::from_le_bytes(v[..COUNT].try_into().expect("count"));
            out.push((k.try_into().expect("reference"), n, v[COUNT..].to_vec()));
            true
        })
        .expect("scan events");
        out.sort();
        out
    }

    /// The store agrees with `model` (window -> its events in order): every window's
    /// list, and every stored event's count equals the number of references to it in
    /// all lists; nothing referenced is missing, nothing unreferenced is stored.
    fn assert_agrees(
        s: &mut dyn StateStore,
        sh: &SharedLists,
        model: &HashMap<u8, Vec<u8>>,
    ) -> std::result::Result<(), TestCaseError> {
        for w in 0u8..6 {
            let want: Vec<Vec<u8>> =
                model.get(&w).map(|l| l.iter().map(|&e| event(e)).collect()).unwrap_or_default();
            prop_assert_eq!(sh.read(s, &[w]).expect("read"), want, "window {}", w);
        }
        let mut want: Vec<(Ref, u32, Vec<u8>)> = (0u8..12)
            .filter_map(|e| {
                let refs = model.values().flatten().filter(|&&x| x == e).count() as u32;
                (refs > 0).then(|| (reference(&event(e), 0), refs, event(e)))
            })
            .collect();
        want.sort();
        prop_assert_eq!(stored_events(s, sh), want);
        Ok(())
    }

    proptest! {
        /// Shared lists over a store that fails one operation of a call (the `k`-th it
        /// makes) and then works again: the failed call leaves the store exactly as it
        /// was, and its retry does the call once, so counts and lists agree with the
        /// model after every error and every retry.
        #[test]
        fn shared_lists_with_injected_failures_match_a_model(
            ops in proptest::collection::vec((op(), proptest::option::of(1u64..12)), 1..120)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (inner, sh) = store(dir.path());
            let mut s = Flaky::new(inner);
            let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
            for (op, fail) in ops {
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    if attempts == 1 {
                        if let Some(k) = fail {
                            s.fail_in(k);
                        }
                    }
                    let r: Result<()> = match &op {
                        Op::Append(w, e) => sh.append(&mut s, &[*w], &event(*e)).map(|_| ()),
                        Op::AppendMany(ws, e) => {
                            let keys: Vec<[u8; 1]> = ws.iter().map(|&w| [w]).collect();
                            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                            sh.append_many(&mut s, &keys, &event(*e)).map(|_| ())
                        }
                        Op::Read(w) => sh.read(&mut s, &[*w]).map(|_| ()),
                        Op::Purge(w) => sh.purge(&mut s, &[*w]).map(|_| ()),
                        Op::Take(w) => sh.take(&mut s, &[*w], &mut |_| {}).map(|_| ()),
                    };
                    s.fail_at = None;
                    match r {
                        Ok(()) => break,
                        Err(e) => {
                            prop_assert!(attempts == 1, "{:?} failed without a fault: {}", op, e);
                            // Nothing changed: the model is still the truth.
                            assert_agrees(&mut s, &sh, &model)?;
                        }
                    }
                }
                match op {
                    Op::Append(w, e) => model.entry(w).or_default().push(e),
                    Op::AppendMany(ws, e) => {
                        for w in ws {
                            model.entry(w).or_default().push(e);
                        }
                    }
                    Op::Read(_) => {}
                    Op::Purge(w) | Op::Take(w) => {
                        model.remove(&w);
                    }
                }
                assert_agrees(&mut s, &sh, &model)?;
            }
        }
    }

    /// A list merge refused by the store (a hashlog list past its page limit) used to
    /// leave the event's count raised for every window of the call, forever, and the
    /// windows before it holding the reference; a retry raised it again.
    #[test]
    fn a_refused_list_append_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions::new(dir.path())
            .memory_budget(4 << 20)
            .namespace(NamespaceSpec::with_merge("events", crate::merges::add_u64()))
            .namespace(NamespaceSpec::list("lists"));
        let h = crate::HashLogOptions::default().page_size(64 << 10);
        let mut s = crate::HashLogStore::open(opts, h).expect("open");
        let sh = SharedLists::new(s.namespace("events").unwrap(), s.namespace("lists").unwrap());
        // Fill window "full" up to its page limit.
        let mut i = 0u32;
        loop {
            match sh.append(&mut s, b"full", &i.to_le_bytes()) {
                Ok(_) => i += 1,
                Err(Error::ValueTooLarge { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(sh.count(&mut s, &reference(&i.to_le_bytes(), 0)).unwrap(), 0);
        let r = sh.append_many(&mut s, &[b"other", b"full"], b"shared event");
        assert!(matches!(r, Err(Error::ValueTooLarge { .. })), "{r:?}");
        assert_eq!(sh.count(&mut s, &reference(b"shared event", 0)).unwrap(), 0, "count");
        assert!(sh.read(&mut s, b"other").unwrap().is_empty(), "the other window");
        sh.append(&mut s, b"other", b"shared event").unwrap();
        assert_eq!(sh.count(&mut s, &reference(b"shared event", 0)).unwrap(), 1);
        assert_eq!(sh.purge(&mut s, b"other").unwrap(), 1);
        assert_eq!(sh.purge(&mut s, b"full").unwrap(), i as usize);
        assert!(stored_events(&mut s, &sh).is_empty(), "every event freed");
    }

    /// A purge that failed after dropping some counts used to keep them dropped, so its
    /// retry dropped them again and freed an event another window still held.
    #[test]
    fn a_failed_purge_and_its_retry_free_nothing_still_referenced() {
        let dir = tempfile::tempdir().unwrap();
        let (inner, sh) = store(dir.path());
        let mut s = Flaky::new(inner);
        sh.append_many(&mut s, &[b"a", b"b"], b"e1").unwrap();
        sh.append(&mut s, b"a", b"e2").unwrap();
        // The purge's fourth store operation fails: it has read and deleted the list
        // and dropped e1's count (the old order: dropped both counts, then failed to
        // delete the list).
        s.fail_in(4);
        let r = sh.purge(&mut s, b"a");
        assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
        assert_eq!(sh.count(&mut s, &reference(b"e1", 0)).unwrap(), 2, "e1 after the failure");
        assert_eq!(sh.purge(&mut s, b"a").unwrap(), 1, "the retry frees e2 only");
        assert_eq!(sh.read(&mut s, b"b").unwrap(), vec![b"e1".to_vec()]);
        assert_eq!(sh.count(&mut s, &reference(b"e1", 0)).unwrap(), 1);
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
