//! Cursors: seek / next / reverse over an ordered namespace of any store.
//!
//! A [`Cursor`] is a position in a namespace's key order plus a small read-ahead batch;
//! it borrows nothing from the store, so the single writer that owns the store may
//! write between two steps of a cursor (an interval join scans one side's buffer while
//! it inserts into the other). Each step that runs past the batch refills it with one
//! [`StateStoreExt::scan_ordered`] call from just after the last key returned, bounded by
//! the cursor's far bound, so a seek costs one native seek in the backend and `n`
//! steps cost about `n / batch` further seeks plus one copy per entry.
//!
//! # Consistency while the task writes
//! - Entries already in the read-ahead batch are returned as they were when the batch
//!   was read: a write or delete of such a key after the read is not seen by this
//!   cursor.
//! - Keys beyond the batch are read when the cursor reaches them, so every write made
//!   before that refill is seen (inserted keys appear, deleted ones do not).
//! - A cursor never returns a key twice and never goes backwards, whatever is written.
//! - With a batch of 1 every step sees every write made before it (one native seek per
//!   step). The default batch is [`DEFAULT_BATCH`].
//!
//! ```
//! use std::ops::Bound;
//! use spillway_store::{AccessHint, Cursor, Direction, MemStore, NamespaceSpec, StateStore, StoreOptions};
//! let dir = tempfile::tempdir().unwrap();
//! let opts = StoreOptions::new(dir.path())
//!     .namespace(NamespaceSpec::list("buf").hint(AccessHint::Range));
//! let mut s = MemStore::open(opts).unwrap();
//! let ns = s.namespace("buf").unwrap();
//! for k in [&b"a1"[..], b"a2", b"a3", b"b1"] {
//!     s.put(ns, k, b"v").unwrap();
//! }
//! let mut c = Cursor::prefix(&mut s, ns, b"a", b"2", Direction::Forward).unwrap();
//! assert_eq!(c.key(), Some(&b"a2"[..]));
//! c.next(&mut s).unwrap();
//! assert_eq!(c.key(), Some(&b"a3"[..]));
//! c.next(&mut s).unwrap();
//! assert_eq!(c.key(), None); // "b1" is outside the prefix
//! ```

use crate::StateStoreExt;
use std::ops::Bound;

use crate::{Direction, Ns, Result, StateStore};

/// Entries a cursor reads ahead per refill unless told otherwise.
pub const DEFAULT_BATCH: usize = 64;

/// A position in an ordered namespace. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Cursor {
    ns: Ns,
    dir: Direction,
    /// The bound on the far side: the end for forward cursors, the start for reverse.
    far: Bound<Vec<u8>>,
    /// Where the next refill begins (the near bound of the remaining range).
    near: Bound<Vec<u8>>,
    batch: usize,
    /// Read-ahead entries: keys and values back to back in `arena`.
    arena: Vec<u8>,
    /// (offset in arena, key length, value length) per read-ahead entry.
    entries: Vec<(usize, usize, usize)>,
    /// Index in `entries` of the current entry.
    pos: usize,
    /// The last refill returned fewer entries than asked: nothing lies beyond.
    exhausted: bool,
    /// `scan_ordered` calls made so far.
    reads: u64,
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn borrowed(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The smallest key greater than every key starting with `prefix`, or `None` when no
/// such key exists (the prefix is empty or all `0xFF`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// `key` followed by a zero byte: the immediate successor of `key` in byte order.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// The bounds as an inclusive lower and an exclusive upper key (`None`: unbounded), the
/// form native iterators take: the keys after `k` are those from `k ++ [0]` on.
pub fn half_open(start: Bound<&[u8]>, end: Bound<&[u8]>) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let lower = match start {
        Bound::Included(k) => Some(k.to_vec()),
        Bound::Excluded(k) => Some(successor(k)),
        Bound::Unbounded => None,
    };
    let upper = match end {
        Bound::Included(k) => Some(successor(k)),
        Bound::Excluded(k) => Some(k.to_vec()),
        Bound::Unbounded => None,
    };
    (lower, upper)
}

/// Visits `entries` (in key order) in direction `dir`, at most `limit` of them, until
/// `visit` returns `false`; returns how many it visited. The tail of every
/// [`StateStoreExt::scan_ordered`] served from an in-memory ordered collection.
pub(crate) fn visit_ordered<'a>(
    entries: impl DoubleEndedIterator<Item = (&'a [u8], &'a [u8])>,
    dir: Direction,
    limit: usize,
    visit: &mut crate::Visitor<'_>,
) -> usize {
    let mut n = 0;
    if limit == 0 {
        return 0;
    }
    let mut step = |(k, v): (&[u8], &[u8])| {
        n += 1;
        visit(k, v) && n < limit
    };
    match dir {
        Direction::Forward => {
            for e in entries {
                if !step(e) {
                    break;
                }
            }
        }
        Direction::Reverse => {
            for e in entries.rev() {
                if !step(e) {
                    break;
                }
            }
        }
    }
    n
}

impl Cursor {
    /// Opens a cursor over the keys of `ns` within `start..end` and positions it on the
    /// first of them in direction `dir` (the smallest key for forward cursors, the
    /// greatest for reverse ones). Reads ahead [`DEFAULT_BATCH`] entries.
    pub fn open<S: StateStore + ?Sized>(
        store: &mut S,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        dir: Direction,
    ) -> Result<Cursor> {
        Self::open_batched(store, ns, start, end, dir, DEFAULT_BATCH)
    }

    /// Like [`open`](Self::open), reading ahead `batch` entries per refill (at least 1).
    pub fn open_batched<S: StateStore + ?Sized>(
        store: &mut S,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        dir: Direction,
        batch: usize,
    ) -> Result<Cursor> {
        let (near, far) = match dir {
            Direction::Forward => (owned(start), owned(end)),
            Direction::Reverse => (owned(end), owned(start)),
        };
        let mut c = Cursor {
            ns,
            dir,
            far,
            near,
            batch: batch.max(1),
            arena: Vec::new(),
            entries: Vec::new(),
            pos: 0,
            exhausted: false,
            reads: 0,
        };
        c.refill(store)?;
        Ok(c)
    }

    /// A cursor over the keys that start with `prefix` and are, after the prefix, at
    /// least `lower` (forward) — Gadget's and Flink's `seek(key ++ lower bound)` within
    /// one key's entries. A reverse cursor starts at the greatest key with the prefix
    /// and stops below `prefix ++ lower`.
    pub fn prefix<S: StateStore + ?Sized>(
        store: &mut S,
        ns: Ns,
        prefix: &[u8],
        lower: &[u8],
        dir: Direction,
    ) -> Result<Cursor> {
        let mut from = prefix.to_vec();
        from.extend_from_slice(lower);
        let end = prefix_end(prefix);
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        Self::open(store, ns, Bound::Included(&from), end, dir)
    }

    /// The namespace the cursor reads.
    pub fn ns(&self) -> Ns {
        self.ns
    }

    /// The current entry, or `None` when the cursor has run past its range.
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        let &(off, kl, vl) = self.entries.get(self.pos)?;
        Some((&self.arena[off..off + kl], &self.arena[off + kl..off + kl + vl]))
    }

    /// The current key.
    pub fn key(&self) -> Option<&[u8]> {
        self.entry().map(|(k, _)| k)
    }

    /// The current value.
    pub fn value(&self) -> Option<&[u8]> {
        self.entry().map(|(_, v)| v)
    }

    /// How many reads ([`StateStoreExt::scan_ordered`] calls) the cursor has made: one per
    /// seek and one per refill of its read-ahead.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    /// Whether the cursor stands on an entry.
    pub fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }

    /// Moves to the next entry in the cursor's direction; returns whether there is one.
    /// A cursor past its range stays there.
    pub fn next<S: StateStore + ?Sized>(&mut self, store: &mut S) -> Result<bool> {
        if self.pos < self.entries.len() {
            self.pos += 1;
        }
        if self.pos >= self.entries.len() && !self.exhausted {
            if let Some(&(off, kl, _)) = self.entries.last() {
                self.near = Bound::Excluded(self.arena[off..off + kl].to_vec());
            }
            self.refill(store)?;
        }
        Ok(self.valid())
    }

    /// Repositions the cursor at `key` (the first key `>= key` forward, `<= key` in
    /// reverse) within its original far bound.
    pub fn seek<S: StateStore + ?Sized>(&mut self, store: &mut S, key: &[u8]) -> Result<bool> {
        self.near = Bound::Included(key.to_vec());
        self.exhausted = false;
        self.refill(store)?;
        Ok(self.valid())
    }

    fn refill<S: StateStore + ?Sized>(&mut self, store: &mut S) -> Result<()> {
        self.arena.clear();
        self.entries.clear();
        self.pos = 0;
        let (start, end) = match self.dir {
            Direction::Forward => (borrowed(&self.near), borrowed(&self.far)),
            Direction::Reverse => (borrowed(&self.far), borrowed(&self.near)),
        };
        let (arena, entries) = (&mut self.arena, &mut self.entries);
        let n = store.scan_ordered(self.ns, start, end, self.dir, self.batch, &mut |k, v| {
            entries.push((arena.len(), k.len(), v.len()));
            arena.extend_from_slice(k);
            arena.extend_from_slice(v);
            true
        })?;
        self.exhausted = n < self.batch;
        self.reads += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{half_open, prefix_end, successor};
    use std::ops::Bound;

    #[test]
    fn bound_helpers() {
        assert_eq!(successor(b"a"), b"a\x00".to_vec());
        assert_eq!(
            half_open(Bound::Excluded(b"a"), Bound::Included(b"b")),
            (Some(b"a\x00".to_vec()), Some(b"b\x00".to_vec()))
        );
        assert_eq!(half_open(Bound::Unbounded, Bound::Excluded(b"b")), (None, Some(b"b".to_vec())));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_end(b""), None);
    }
}
