//! [`CachedList`]: a typed list (a deque) in chunks of elements, each chunk one store key.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{try_rmw, Collection, Kind, FORMAT_VERSION};
use crate::error::{Error, Result};
use crate::{Ns, Rmw, StateStore};

/// Elements per chunk unless [`CachedList::chunk_len`] says otherwise.
pub const DEFAULT_CHUNK_LEN: u32 = 64;

/// Tag byte after the prefix of the header key.
const HEADER_TAG: u8 = 0x00;
/// Tag byte after the prefix of a chunk key.
const CHUNK_TAG: u8 = 0x01;

/// The list's header value (see the [FORMAT](super#format)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Header {
    version: u8,
    chunk_len: u32,
    /// Position of the first element.
    head: u64,
    len: u64,
}

impl Header {
    fn end(&self) -> u64 {
        self.head + self.len
    }
}

/// A list of `T` kept in a namespace of a store: a header key (length, chunk size,
/// position of the first element) and chunks of up to `chunk_len` elements, each its
/// own store key (see the [FORMAT](super#format)). Pushing and popping at either end
/// cost two read-modify-writes (header and one chunk) whatever the length; indexing
/// costs two reads. An empty list has no keys at all.
///
/// Each push or pop rewrites one chunk (O(chunk_len) bytes copied, the other elements
/// are not re-encoded), so pick `chunk_len` so that a chunk stays a small store value.
/// If the chunk step of a push or pop fails (a store error), the header is put back as
/// it was.
pub struct CachedList<T> {
    c: Collection,
    chunk_len: u32,
    _types: PhantomData<fn() -> T>,
}

impl<T> Clone for CachedList<T> {
    fn clone(&self) -> Self {
        CachedList { c: self.c.clone(), chunk_len: self.chunk_len, _types: PhantomData }
    }
}

impl<T> fmt::Debug for CachedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedList")
            .field("ns", &self.c.ns())
            .field("id", &self.c.id())
            .field("chunk_len", &self.chunk_len)
            .finish()
    }
}

/// What the header step of an operation decided.
struct Step {
    /// The header before the operation (for the rollback).
    old: Option<Vec<u8>>,
    /// The header after it.
    new: Header,
    /// The position the operation works on.
    pos: u64,
}

impl<T: Serialize + DeserializeOwned> CachedList<T> {
    /// The list `id` in namespace `ns`, with chunks of [`DEFAULT_CHUNK_LEN`] elements.
    ///
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes.
    pub fn new(ns: Ns, id: &str) -> Self {
        CachedList {
            c: Collection::new(ns, Kind::List, id),
            chunk_len: DEFAULT_CHUNK_LEN,
            _types: PhantomData,
        }
    }

    /// Elements per chunk when this handle creates the list (default
    /// [`DEFAULT_CHUNK_LEN`]). A list that exists keeps the chunk size it was created
    /// with (it is in its header).
    ///
    /// # Panics
    /// If `n` is 0.
    #[must_use]
    pub fn chunk_len(mut self, n: u32) -> Self {
        assert!(n > 0, "a list chunk holds at least one element");
        self.chunk_len = n;
        self
    }

    /// The namespace the list lives in.
    pub fn ns(&self) -> Ns {
        self.c.ns()
    }

    /// The list's id.
    pub fn id(&self) -> &str {
        self.c.id()
    }

    /// Number of elements. One store read.
    pub fn len<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        Ok(self.header(store)?.map_or(0, |h| h.len))
    }

    /// Whether the list has no elements. One store read.
    pub fn is_empty<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<bool> {
        Ok(self.len(store)? == 0)
    }

    /// Appends `item` at the back; returns its index.
    pub fn push<S: StateStore + ?Sized>(&self, store: &mut S, item: &T) -> Result<u64> {
        let mut elem = Vec::new();
        self.c.encode_into(&self.c.prefix, item, &mut elem)?;
        let step = self.update_header(store, |h| {
            let h = h.unwrap_or(Header {
                version: FORMAT_VERSION,
                chunk_len: self.chunk_len,
                head: 0,
                len: 0,
            });
            Some((Header { len: h.len + 1, ..h }, h.end()))
        })?;
        let Some(step) = step else { unreachable!("push always updates the header") };
        let (chunk, j) = self.locate(&step.new, step.pos);
        let key = self.chunk_key(chunk);
        let r = try_rmw(store, self.c.ns(), &key, |old, out| {
            let old = old.unwrap_or(EMPTY_CHUNK);
            let ranges = self.elements(&key, old, step.new.chunk_len)?;
            if ranges.len() < j {
                return Err(self.missing(&key, j, ranges.len()));
            }
            write_chunk(out, j as u64 + 1, &[&old[span(&ranges, 0, j)], &elem]);
            Ok(Rmw::Put)
        });
        self.rollback_on_error(store, &step, r)?;
        Ok(step.pos - step.new.head)
    }

    /// Removes and returns the last element.
    pub fn pop<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Option<T>> {
        let step = self.update_header(store, |h| {
            let h = h.filter(|h| h.len > 0)?;
            let new = if h.len == 1 {
                Header { head: 0, len: 0, ..h }
            } else {
                Header { len: h.len - 1, ..h }
            };
            Some((new, h.end() - 1))
        })?;
        let Some(step) = step else { return Ok(None) };
        let (chunk, j) = self.locate(&step.new, step.pos);
        let key = self.chunk_key(chunk);
        // Live elements stay in this chunk if the list is not empty now and the popped
        // element was not the chunk's first.
        let keep_chunk = step.new.len > 0 && j > 0;
        let mut item = None;
        let r = try_rmw(store, self.c.ns(), &key, |old, out| {
            let old = old.unwrap_or(EMPTY_CHUNK);
            let ranges = self.elements(&key, old, step.new.chunk_len)?;
            let Some(range) = ranges.get(j) else {
                return Err(self.missing(&key, j + 1, ranges.len()));
            };
            item = Some(self.c.decode(&key, &old[range.clone()])?);
            if keep_chunk {
                write_chunk(out, j as u64, &[&old[span(&ranges, 0, j)]]);
                Ok(Rmw::Put)
            } else {
                Ok(Rmw::Delete)
            }
        });
        self.rollback_on_error(store, &step, r)?;
        Ok(item)
    }

    /// Removes and returns the first element.
    pub fn pop_front<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Option<T>> {
        let step = self.update_header(store, |h| {
            let h = h.filter(|h| h.len > 0)?;
            let new = if h.len == 1 {
                Header { head: 0, len: 0, ..h }
            } else {
                Header { head: h.head + 1, len: h.len - 1, ..h }
            };
            Some((new, h.head))
        })?;
        let Some(step) = step else { return Ok(None) };
        let (chunk, j) = self.locate(&step.new, step.pos);
        let key = self.chunk_key(chunk);
        // The chunk goes when its last position is popped or the list is empty now;
        // otherwise the popped element stays in it, below the head, unread.
        let last_of_chunk = (step.pos + 1) % u64::from(step.new.chunk_len) == 0;
        let drop_chunk = step.new.len == 0 || last_of_chunk;
        let mut item = None;
        let r = try_rmw(store, self.c.ns(), &key, |old, _| {
            let old = old.unwrap_or(EMPTY_CHUNK);
            let ranges = self.elements(&key, old, step.new.chunk_len)?;
            let Some(range) = ranges.get(j) else {
                return Err(self.missing(&key, j + 1, ranges.len()));
            };
            item = Some(self.c.decode(&key, &old[range.clone()])?);
            Ok(if drop_chunk { Rmw::Delete } else { Rmw::Keep })
        });
        self.rollback_on_error(store, &step, r)?;
        Ok(item)
    }

    /// The element at `index` (0 = front), if `index < len`. Two store reads.
    pub fn get<S: StateStore + ?Sized>(&self, store: &mut S, index: u64) -> Result<Option<T>> {
        let Some(h) = self.header(store)? else { return Ok(None) };
        if index >= h.len {
            return Ok(None);
        }
        let (chunk, j) = self.locate(&h, h.head + index);
        let key = self.chunk_key(chunk);
        let bytes = self.read_chunk(store, &key)?;
        let ranges = self.elements(&key, &bytes, h.chunk_len)?;
        let Some(range) = ranges.get(j) else {
            return Err(self.missing(&key, j + 1, ranges.len()));
        };
        Ok(Some(self.c.decode(&key, &bytes[range.clone()])?))
    }

    /// Replaces the element at `index` by `item` and returns the old one; `None` (and
    /// nothing written) if `index >= len`. A read and a read-modify-write.
    pub fn replace<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        index: u64,
        item: &T,
    ) -> Result<Option<T>> {
        let Some(h) = self.header(store)? else { return Ok(None) };
        if index >= h.len {
            return Ok(None);
        }
        let mut elem = Vec::new();
        self.c.encode_into(&self.c.prefix, item, &mut elem)?;
        let (chunk, j) = self.locate(&h, h.head + index);
        let key = self.chunk_key(chunk);
        let mut prev = None;
        try_rmw(store, self.c.ns(), &key, |old, out| {
            let old = old.unwrap_or(EMPTY_CHUNK);
            let ranges = self.elements(&key, old, h.chunk_len)?;
            let Some(range) = ranges.get(j) else {
                return Err(self.missing(&key, j + 1, ranges.len()));
            };
            prev = Some(self.c.decode(&key, &old[range.clone()])?);
            let (before, after) = (span(&ranges, 0, j), span(&ranges, j + 1, ranges.len()));
            write_chunk(out, ranges.len() as u64, &[&old[before], &elem, &old[after]]);
            Ok(Rmw::Put)
        })?;
        Ok(prev)
    }

    /// Calls `f(index, element)` for every element from the front, until it returns
    /// `false`. One header read and one read per chunk.
    pub fn for_each<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        mut f: impl FnMut(u64, T) -> bool,
    ) -> Result<()> {
        let Some(h) = self.header(store)? else { return Ok(()) };
        if h.len == 0 {
            return Ok(());
        }
        let cl = u64::from(h.chunk_len);
        for chunk in h.head / cl..=(h.end() - 1) / cl {
            let key = self.chunk_key(chunk);
            let bytes = self.read_chunk(store, &key)?;
            let ranges = self.elements(&key, &bytes, h.chunk_len)?;
            let first = h.head.max(chunk * cl);
            let end = h.end().min((chunk + 1).saturating_mul(cl));
            if ranges.len() < (end - chunk * cl) as usize {
                return Err(self.missing(&key, (end - chunk * cl) as usize, ranges.len()));
            }
            for pos in first..end {
                let item =
                    self.c.decode(&key, &bytes[ranges[(pos - chunk * cl) as usize].clone()])?;
                if !f(pos - h.head, item) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Every element from the front.
    pub fn to_vec<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.for_each(store, |_, item| {
            out.push(item);
            true
        })?;
        Ok(out)
    }

    /// Removes every element; returns how many there were. One delete per chunk.
    pub fn clear<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        let Some(h) = self.header(store)? else { return Ok(0) };
        if h.len > 0 {
            let cl = u64::from(h.chunk_len);
            for chunk in h.head / cl..=(h.end() - 1) / cl {
                store.delete(self.c.ns(), &self.chunk_key(chunk))?;
            }
        }
        store.delete(self.c.ns(), &self.c.key(&[HEADER_TAG]))?;
        Ok(h.len)
    }

    fn header<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Option<Header>> {
        let key = self.c.key(&[HEADER_TAG]);
        let mut buf = Vec::new();
        if !store.get_into(self.c.ns(), &key, &mut buf)? {
            return Ok(None);
        }
        self.decode_header(&key, &buf).map(Some)
    }

    fn decode_header(&self, key: &[u8], bytes: &[u8]) -> Result<Header> {
        let h: Header = self.c.decode(key, bytes)?;
        if h.version != FORMAT_VERSION {
            return Err(self.c.corrupt(
                key,
                format!(
                    "the list header has format version {}; this build reads version \
                     {FORMAT_VERSION}",
                    h.version
                ),
            ));
        }
        // A list ends below position 2^64 - 1, so that a push has a position to give.
        if h.chunk_len == 0 || h.head.checked_add(h.len).is_none_or(|end| end == u64::MAX) {
            return Err(self.c.corrupt(key, format!("the list header is inconsistent: {h:?}")));
        }
        Ok(h)
    }

    /// One read-modify-write of the header: `f` maps the current header (if any) to
    /// the new one and the position the operation works on, or `None` to change
    /// nothing. A new header with `len == 0` deletes the header key.
    fn update_header<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        mut f: impl FnMut(Option<Header>) -> Option<(Header, u64)>,
    ) -> Result<Option<Step>> {
        let key = self.c.key(&[HEADER_TAG]);
        let mut step = None;
        try_rmw(store, self.c.ns(), &key, |old, out| {
            let cur = old.map(|b| self.decode_header(&key, b)).transpose()?;
            let Some((new, pos)) = f(cur) else { return Ok(Rmw::Keep) };
            step = Some(Step { old: old.map(<[u8]>::to_vec), new, pos });
            if new.len == 0 {
                return Ok(Rmw::Delete);
            }
            self.c.encode_into(&key, &new, out)?;
            Ok(Rmw::Put)
        })?;
        Ok(step)
    }

    /// After a failed chunk step, puts the header back as it was before `step`.
    fn rollback_on_error<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        step: &Step,
        r: Result<()>,
    ) -> Result<()> {
        let Err(e) = r else { return Ok(()) };
        let key = self.c.key(&[HEADER_TAG]);
        // Best effort: the chunk's error is the one to report.
        let _ = match &step.old {
            Some(old) => store.put(self.c.ns(), &key, old),
            None => store.delete(self.c.ns(), &key),
        };
        Err(e)
    }

    /// Chunk number and index in the chunk of position `pos`.
    fn locate(&self, h: &Header, pos: u64) -> (u64, usize) {
        let cl = u64::from(h.chunk_len);
        (pos / cl, (pos % cl) as usize)
    }

    fn chunk_key(&self, chunk: u64) -> Vec<u8> {
        self.c.numbered_key(CHUNK_TAG, chunk)
    }

    fn read_chunk<S: StateStore + ?Sized>(&self, store: &mut S, key: &[u8]) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        if !store.get_into(self.c.ns(), key, &mut buf)? {
            return Err(self.c.corrupt(key, "a chunk inside the list's range is missing".into()));
        }
        Ok(buf)
    }

    /// The byte ranges of the elements of an encoded chunk (`varint count | elements`)
    /// of a list of `chunk_len` elements per chunk.
    fn elements(&self, key: &[u8], bytes: &[u8], chunk_len: u32) -> Result<Vec<Range<usize>>> {
        let bad = |what: String| self.c.corrupt(key, what);
        let (n, mut rest) = postcard::take_from_bytes::<u64>(bytes)
            .map_err(|e| bad(format!("the chunk's element count does not decode ({e})")))?;
        // Checked before the loop: an element may encode in no bytes (a unit type).
        if n > u64::from(chunk_len) {
            return Err(bad(format!(
                "the chunk counts {n} elements, more than the {chunk_len} of a chunk"
            )));
        }
        let mut ranges = Vec::with_capacity(n.min(1 << 16) as usize);
        for i in 0..n {
            let start = bytes.len() - rest.len();
            let (_, r) = postcard::take_from_bytes::<T>(rest).map_err(|e| {
                bad(format!(
                    "element {i} of the chunk does not decode ({e}): it was written with \
                     another type or is damaged"
                ))
            })?;
            rest = r;
            ranges.push(start..bytes.len() - rest.len());
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} bytes left over after the chunk's elements", rest.len())));
        }
        Ok(ranges)
    }

    fn missing(&self, key: &[u8], needed: usize, found: usize) -> Error {
        self.c.corrupt(
            key,
            format!("the chunk holds {found} elements where the list header needs {needed}"),
        )
    }
}

/// The encoding of a chunk with no elements (count 0).
const EMPTY_CHUNK: &[u8] = &[0];

/// Writes an encoded chunk of `count` elements whose encodings, back to back, are the
/// concatenation of `parts`.
fn write_chunk(out: &mut Vec<u8>, count: u64, parts: &[&[u8]]) {
    push_varint(out, count);
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// The bytes of elements `a..b` of a chunk whose element ranges are `ranges`.
fn span(ranges: &[Range<usize>], a: usize, b: usize) -> Range<usize> {
    if a >= b {
        return 0..0;
    }
    ranges[a].start..ranges[b - 1].end
}

/// Appends `n` as postcard's varint (LEB128), the encoding of a sequence length.
fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[cfg(test)]
mod tests {
    use crate::StateStoreExt;
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;
    use crate::collections::testutil;

    #[derive(Clone, Debug)]
    enum Op {
        Push(String),
        Pop,
        PopFront,
        Get(u64),
        Replace(u64, String),
        Clear,
        Check,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => "[a-z]{0,12}".prop_map(Op::Push),
            3 => Just(Op::Pop),
            3 => Just(Op::PopFront),
            3 => (0u64..40).prop_map(Op::Get),
            2 => (0u64..40, "[a-z]{0,12}").prop_map(|(i, s)| Op::Replace(i, s)),
            1 => Just(Op::Clear),
            2 => Just(Op::Check),
        ]
    }

    fn run_model<S: StateStore + ?Sized>(store: &mut S, ns: Ns, chunk_len: u32, ops: &[Op]) {
        let list: CachedList<String> = CachedList::new(ns, "l").chunk_len(chunk_len);
        let mut model: VecDeque<String> = VecDeque::new();
        for op in ops {
            match op {
                Op::Push(s) => {
                    assert_eq!(list.push(store, s).unwrap(), model.len() as u64);
                    model.push_back(s.clone());
                }
                Op::Pop => assert_eq!(list.pop(store).unwrap(), model.pop_back()),
                Op::PopFront => assert_eq!(list.pop_front(store).unwrap(), model.pop_front()),
                Op::Get(i) => {
                    assert_eq!(list.get(store, *i).unwrap().as_ref(), model.get(*i as usize))
                }
                Op::Replace(i, s) => {
                    let prev = model.get_mut(*i as usize).map(|e| std::mem::replace(e, s.clone()));
                    assert_eq!(list.replace(store, *i, s).unwrap(), prev);
                }
                Op::Clear => {
                    assert_eq!(list.clear(store).unwrap(), std::mem::take(&mut model).len() as u64)
                }
                Op::Check => assert_eq!(list.to_vec(store).unwrap(), Vec::from(model.clone())),
            }
            assert_eq!(list.len(store).unwrap(), model.len() as u64);
        }
        assert_eq!(list.to_vec(store).unwrap(), Vec::from(model.clone()));
        // Only the live chunks and the header exist: nothing leaks.
        let mut keys = 0;
        store
            .scan_prefix(ns, list.c.prefix(), &mut |_, _| {
                keys += 1;
                true
            })
            .unwrap();
        let cl = u64::from(chunk_len);
        let chunks = if model.is_empty() { 0 } else { (model.len() as u64).div_ceil(cl) + 1 };
        assert!(
            keys <= chunks + 1 && (model.is_empty() == (keys == 0)),
            "{keys} keys for {} elements",
            model.len()
        );
    }

    proptest! {
        #[test]
        fn list_matches_vecdeque_over_mem(chunk_len in 1u32..6, ops in proptest::collection::vec(op(), 0..200)) {
            let (_d, mut store, ns) = testutil::mem();
            run_model(&mut store, ns, chunk_len, &ops);
        }
    }

    #[test]
    fn list_matches_vecdeque_over_hashlog() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(8));
        runner
            .run(&(1u32..6, proptest::collection::vec(op(), 0..300)), |(cl, ops)| {
                let dir = tempfile::tempdir().unwrap();
                let (mut store, ns) = testutil::hashlog(dir.path());
                run_model(&mut store, ns, cl, &ops);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_long_list_keeps_its_chunk_size_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let ns = crate::Ns(0);
        {
            let (mut store, _) = testutil::hashlog(dir.path());
            let list: CachedList<u64> = CachedList::new(ns, "big").chunk_len(100);
            for i in 0..10_000u64 {
                list.push(&mut store, &i).unwrap();
            }
            for _ in 0..250 {
                list.pop_front(&mut store).unwrap();
            }
            store.checkpoint().unwrap();
            list.push(&mut store, &99).unwrap();
        }
        let (mut store, _) = testutil::hashlog(dir.path());
        // Another chunk size on the handle: the header's wins.
        let list: CachedList<u64> = CachedList::new(ns, "big").chunk_len(7);
        assert_eq!(list.len(&mut store).unwrap(), 9_750);
        assert_eq!(list.get(&mut store, 0).unwrap(), Some(250));
        assert_eq!(list.get(&mut store, 9_749).unwrap(), Some(9_999));
        assert_eq!(list.to_vec(&mut store).unwrap(), (250..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_chunk_write_puts_the_header_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store =
            crate::MemStore::open(testutil::opts(dir.path()).memory_budget(64 << 10)).unwrap();
        let ns = store.namespace("c").unwrap();
        let list: CachedList<Vec<u8>> = CachedList::new(ns, "l");
        list.push(&mut store, &vec![1; 10]).unwrap();
        // More than the store's memory budget: the chunk write fails, the header stays.
        let huge = vec![7u8; 100 << 10];
        assert!(list.push(&mut store, &huge).is_err());
        assert_eq!(list.len(&mut store).unwrap(), 1);
        list.push(&mut store, &vec![2]).unwrap();
        assert_eq!(list.to_vec(&mut store).unwrap(), vec![vec![1; 10], vec![2]]);
    }

    #[test]
    fn a_damaged_chunk_is_an_error_not_a_panic() {
        let (_d, mut store, ns) = testutil::mem();
        let list: CachedList<u32> = CachedList::new(ns, "l");
        for i in 0..5 {
            list.push(&mut store, &i).unwrap();
        }
        let key = list.chunk_key(0);
        store.put(ns, &key, &[9, 1, 2]).unwrap();
        let err = list.get(&mut store, 1).unwrap_err().to_string();
        assert!(err.contains("list \"l\"") && err.contains("does not decode"), "{err}");
        assert!(list.pop(&mut store).is_err());
        assert_eq!(list.len(&mut store).unwrap(), 5, "the failed pop put the header back");
    }

    fn put_header(store: &mut crate::MemStore, ns: Ns, chunk_len: u32, head: u64, len: u64) {
        let h = Header { version: FORMAT_VERSION, chunk_len, head, len };
        let key = Collection::new(ns, Kind::List, "l").key(&[HEADER_TAG]);
        store.put(ns, &key, &postcard::to_allocvec(&h).unwrap()).unwrap();
    }

    /// A header whose list ends at position 2^64 - 1: a push has no position to give.
    #[test]
    fn a_full_list_header_is_an_error_not_an_overflow() {
        let (_d, mut store, ns) = testutil::mem();
        let list: CachedList<u32> = CachedList::new(ns, "l");
        put_header(&mut store, ns, 3, 0, u64::MAX);
        let e = list.push(&mut store, &1).unwrap_err();
        assert!(e.to_string().contains("inconsistent"), "{e}");
    }

    /// A list whose last chunk ends past position 2^64 - 1 (chunk length 6): reading it
    /// reads its element.
    #[test]
    fn a_chunk_ending_past_the_last_position_reads_without_overflow() {
        let (_d, mut store, ns) = testutil::mem();
        let list: CachedList<String> = CachedList::new(ns, "l");
        let head = u64::MAX - 3;
        put_header(&mut store, ns, 6, head, 1);
        let mut chunk = Vec::new();
        write_chunk(&mut chunk, 1, &[&postcard::to_allocvec("x").unwrap()]);
        store.put(ns, &list.chunk_key(head / 6), &chunk).unwrap();
        assert_eq!(list.to_vec(&mut store).unwrap(), vec!["x".to_string()]);
    }

    /// A chunk counting 2^64 - 1 elements of a type that encodes in no bytes: an error,
    /// not a loop over the count (which also grew a vector without bound).
    #[test]
    fn a_chunk_counting_more_than_its_chunk_len_is_an_error_not_an_endless_loop() {
        let (_d, mut store, ns) = testutil::mem();
        let list: CachedList<()> = CachedList::new(ns, "l");
        put_header(&mut store, ns, 3, 0, 1);
        let mut chunk = Vec::new();
        push_varint(&mut chunk, u64::MAX);
        store.put(ns, &list.chunk_key(0), &chunk).unwrap();
        let e = list.get(&mut store, 0).unwrap_err();
        assert!(e.to_string().contains("more than"), "{e}");
    }

    fn wide() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..20, Just(u64::MAX), Just(u64::MAX - 1), Just(1 << 63), any::<u64>()]
    }

    /// Every operation of `list`: each answers `Ok` or `Err` (`clear` only when the
    /// header's chunk range is small: it deletes the range blind).
    fn exercise<T: Serialize + DeserializeOwned + Clone>(
        store: &mut crate::MemStore,
        list: &CachedList<T>,
        item: &T,
    ) {
        let _ = (list.len(store), list.is_empty(store), list.to_vec(store));
        for i in [0, 1, 2, 5, u64::MAX - 1] {
            let _ = list.get(store, i);
        }
        let _ = list.replace(store, 1, item);
        let _ = (list.push(store, item), list.pop(store), list.pop_front(store));
        let _ = list.to_vec(store);
        if let Ok(Some(h)) = list.header(store) {
            let cl = u64::from(h.chunk_len);
            if h.len == 0 || (h.end() - 1) / cl - h.head / cl < 1000 {
                let _ = list.clear(store);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A list's header (any bytes, damaged, or well-formed with any field values)
        /// and one of its chunks (any bytes or damaged): every operation answers `Ok` or
        /// `Err`.
        #[test]
        fn hostile_list_headers_and_chunks_are_an_error_not_a_panic(
            n in 1u32..12,
            which in 0u8..4,
            raw in proptest::collection::vec(any::<u8>(), 0..24),
            fields in (any::<u32>(), wide(), wide()),
            ds in crate::hostile::damages(),
            chunk in 0u64..4,
            chunk_raw in any::<bool>(),
        ) {
            let (_d, mut store, ns) = testutil::mem();
            let list: CachedList<String> = CachedList::new(ns, "l").chunk_len(3);
            for i in 0..n {
                list.push(&mut store, &format!("e{i}")).unwrap();
            }
            let hkey = list.c.key(&[HEADER_TAG]);
            let valid = store.get(ns, &hkey).unwrap().unwrap();
            let (chunk_len, head, len) = fields;
            let header = match which {
                0 => raw.clone(),
                1 => crate::hostile::damaged(&valid, &ds),
                2 => postcard::to_allocvec(&Header { version: FORMAT_VERSION, chunk_len, head, len }).unwrap(),
                _ => valid,
            };
            store.put(ns, &hkey, &header).unwrap();
            let ckey = list.chunk_key(chunk);
            if let Some(c) = store.get(ns, &ckey).unwrap() {
                let c = if chunk_raw { raw } else { crate::hostile::damaged(&c, &ds) };
                store.put(ns, &ckey, &c).unwrap();
            }
            exercise(&mut store, &list, &"x".to_string());
        }
    }
}
