//! AppendLogStore: per-key chunked append lists (holistic window state) laid out over
//! the hybrid log of [`HashLogStore`].
//!
//! # Design
//! - **A layout, not a new engine.** The store owns one [`HashLogStore`] in the same
//!   directory. Its checkpoint, recovery, checksums, memory budget, compaction and I/O
//!   seam are used as they are: heads and chunks are ordinary hybrid-log records.
//! - **Namespaces.** The hashlog is opened with the user's namespaces (same order, same
//!   [`Ns`] handles) and, after them, one internal *chunk namespace* per namespace whose
//!   merge is [`MergeOp::ListAppend`], named [`chunk_namespace`]`(name)` (the name plus
//!   `"\u{1}chunks"`), in declaration order. The manifest records every name, so the
//!   mapping is checked at recovery. Non-list namespaces pass straight through.
//! - **A list** is a fixed-size *head* record at the user key in the user namespace
//!   and *chunks* `first..=last` in the chunk namespace. An append writes the element
//!   into the spare capacity of the last chunk (in place while that record is in the
//!   mutable region), or starts the next chunk, then updates the head (in place while
//!   the head is mutable, else a 40-byte copy). It never reads or copies earlier
//!   chunks, so its cost does not depend on the list's length. If the last chunk has left the mutable region (read-only or on disk), it
//!   is *sealed* where it is and the next chunk starts at the tail, unless it holds
//!   less than [`AppendLogOptions::seal_at`] bytes (default 1 KiB): then that small
//!   chunk is copied to the tail with the element. So an append copies at most
//!   `seal_at` bytes, and a list costs at most one index entry per `seal_at` bytes
//!   even when it receives one element per trip of the mutable region.
//! - **Growth.** The first chunk of a list gets [`AppendLogOptions::min_chunk`] bytes
//!   (default 64); a chunk that fills up is followed by one of twice its capacity, up
//!   to [`AppendLogOptions::max_chunk`] (default 64 KiB, and at most what a record of
//!   the log page holds). A chunk sealed early (it left the mutable region with room
//!   left) is followed by one of the size it reached (at least `min_chunk`): the
//!   capacity adapts to what a list receives while its chunk is mutable, so many lists
//!   appended round-robin under a small budget do not fill the log with reserved but
//!   unused room (the room a sealed chunk did not use stays in the log until the chunk
//!   is dropped or compacted). An element that fits no such chunk gets a chunk of its
//!   own size. The capacity is allocated when the chunk is created (the record's value
//!   capacity), so appends fill it without reallocating.
//! - **Ordering of writes.** A new chunk is written before the head that points to it;
//!   chunks dropped by `delete`, `put` or `truncate_front` are removed after the head no
//!   longer points to them. A replacement (`put`, `rmw`) writes its chunks under
//!   numbers disjoint from the old ones, so the head switches atomically from the old
//!   list to the new one. An error mid-operation therefore never leaves a head
//!   pointing at missing chunks. Non-I/O refusals (a full index) remove the chunks
//!   they wrote; after an I/O error (which poisons the store: reopening returns the
//!   last checkpoint) an orphan chunk may remain in the index, invisible to reads,
//!   until a list with that key overwrites or deletes it.
//! - **Directory.** An appendlog directory is a hashlog directory (same `STORE`
//!   marker and manifest); what tells them apart is the chunk namespaces, so opening it
//!   as a plain hashlog with the user's namespaces fails with
//!   [`Error::NamespaceMismatch`].
//! - **Values that are not lists.** A list namespace accepts any bytes from `put` and
//!   `rmw` (the contract's other stores do). A value that does not parse as framed
//!   elements is kept in one chunk with the head flag `opaque`: `get` and appends work
//!   (the bytes are the same as every other store returns), the element-wise
//!   operations (`list_len`, `iter_list`, `truncate_front`) refuse it with
//!   [`Error::Unsupported`]. Such a value is bounded by the record size like a hashlog
//!   value; a well-formed list has no size limit but [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN)
//!   for `get`.
//!
//! ## Costs
//! | operation | cost |
//! |---|---|
//! | `merge` / [`append`](AppendLogStore::append) | head lookup + one in-place chunk append (or one new chunk, or a copy of a last chunk below `seal_at`) + head update in place: O(element + `seal_at`) whatever the list's length |
//! | `get` | head + every chunk, in order: O(list) |
//! | [`iter_list`](AppendLogStore::iter_list) | as `get`, holding one chunk at a time (zero-copy from the page or disk buffer) |
//! | [`list_len`](AppendLogStore::list_len) | head only |
//! | [`truncate_front`](AppendLogStore::truncate_front)`(n)` | reads the chunks holding the first `n` elements (per-chunk counts are not stored), rewrites the head, deletes fully evicted chunks |
//! | `delete` | head + one index delete per chunk |
//! | `put` / `rmw` | O(new list) writes + one delete per old chunk; `rmw` first materializes the list |
//! | `scan_prefix` | walks the log for heads (buffering the matching keys and heads), then materializes each list |
//!
//! ## Under the memory budget
//! Chunks spill like any record: pages leaving memory are written to segment files and
//! a later `get` reads a list's chunks in chunk order, one `pread` per disk-resident
//! chunk. Chunks appended back to back lie next to each other in the log, so those
//! reads move forward through the segment; with many lists growing at once, chunks of
//! one list are interleaved with other keys' records, so the reads are forward-moving
//! but not contiguous (one read per chunk, chunks of up to 64 KiB amortise the seeks).
//! Compaction copies live chunks to the tail one by one, without their spare capacity;
//! the next append to such a last chunk starts a new chunk (or copies it, below
//! `seal_at`). Worst case for the log: lists appended round-robin with a mutable
//! region too small to hold their last chunks: each append copies a last chunk of up
//! to `seal_at` bytes (about `seal_at / 2` on average), which hashlog's compaction
//! reclaims as garbage; hashlog in the same case copies whole lists.
//! `get`, `rmw` and `scan_prefix` materialize a list in a buffer outside the budget
//! (like the caller's value buffer); `iter_list` does not.
//!
//! # FORMAT
//! Records are hashlog records (see the [hashlog FORMAT](crate::hashlog)); this layout
//! defines their keys and values. All integers little-endian unless noted.
//! ```text
//! head  (user namespace, key = user key, value 40 bytes):
//!   0  version u8 (1)       1  flags u8 (bit 0: opaque)     2  reserved u16 (0)
//!   4  element count u64    12 byte length u64 (live bytes, what `get` returns)
//!   20 first chunk u32      24 last chunk u32
//!   28 front u32: byte offset of the first live element in the first chunk
//!   32 last chunk's used bytes u32                36 last chunk's capacity u32
//! chunk (chunk namespace "<name>\u{1}chunks", key = user key ++ chunk number u32
//!        BIG-endian, so the chunks of a list sort together and in order):
//!   value = framed elements `[len u32][bytes]` exactly as crate::list encodes them,
//!   record value capacity = the chunk's capacity (spare bytes unused).
//! ```
//! The live list is chunk `first` from byte `front`, then chunks `first+1..=last`
//! whole; the last chunk's value length equals the head's used bytes, the total equals
//! the head's byte length. A missing chunk, a length that disagrees with the head, a
//! bad element frame or a head field out of range is [`Error::Corrupt`] naming the
//! namespace and key; the store never panics on it or returns a wrong value.
//! Checkpoint and recovery are hashlog's: heads and chunks are published together by
//! its fold-over checkpoint.

mod head;

use std::fmt::Display;
use std::ops::Bound;
use std::sync::Arc;

pub(crate) use self::head::CHUNK_NO_LEN;
use self::head::{chunk_key, Head, FLAG_OPAQUE};
use crate::error::{Error, Result};
use crate::io::Fs;
use crate::list;
use crate::{
    CheckpointInfo, HashLogOptions, HashLogStore, MergeOp, NamespaceSpec, Ns, Order, Rmw, RmwFn,
    StateStore, StoreOptions, StoreStats, Visitor, MAX_KEY_LEN,
};

/// Suffix of the internal chunk namespace of a list namespace.
pub const CHUNK_NS_SUFFIX: &str = "\u{1}chunks";

/// Name of the internal namespace holding the chunks of list namespace `name`.
pub fn chunk_namespace(name: &str) -> String {
    format!("{name}{CHUNK_NS_SUFFIX}")
}

/// Tuning of an [`AppendLogStore`]. Every setter documents its default.
#[derive(Clone, Debug)]
#[must_use]
pub struct AppendLogOptions {
    hashlog: HashLogOptions,
    min_chunk: usize,
    max_chunk: usize,
    seal_at: usize,
}

impl Default for AppendLogOptions {
    fn default() -> Self {
        AppendLogOptions {
            hashlog: HashLogOptions::default(),
            min_chunk: 64,
            max_chunk: 64 << 10,
            seal_at: 1 << 10,
        }
    }
}

impl AppendLogOptions {
    /// Options of the underlying hybrid log. Default: [`HashLogOptions::default`].
    pub fn hashlog(mut self, h: HashLogOptions) -> Self {
        self.hashlog = h;
        self
    }

    /// Capacity in bytes of a list's first chunk (framing included). Default 64: a
    /// store with many short lists pays at most that much spare room per list, and a
    /// long list reaches 64 KiB chunks after 11 chunks.
    pub fn min_chunk(mut self, bytes: usize) -> Self {
        self.min_chunk = bytes;
        self
    }

    /// Largest capacity chunks grow to, in bytes. Default 64 KiB; bounded further by
    /// what one record of a log page holds.
    pub fn max_chunk(mut self, bytes: usize) -> Self {
        self.max_chunk = bytes;
        self
    }

    /// Size from which a last chunk that left the mutable region is sealed where it is
    /// (the next append starts a new chunk); a smaller one is copied to the tail with
    /// the new element. Default 1 KiB: an append copies at most this much, and a list
    /// costs at most one index entry per `seal_at` bytes.
    pub fn seal_at(mut self, bytes: usize) -> Self {
        self.seal_at = bytes;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.min_chunk < 16 || self.min_chunk > self.max_chunk || self.max_chunk > 1 << 30 {
            return Err(Error::InvalidOption {
                option: "min_chunk/max_chunk",
                detail: "need 16 <= min_chunk <= max_chunk <= 1 GiB".into(),
            });
        }
        Ok(())
    }
}

/// Counters of the list layer (beside the [`StoreStats`] every store reports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AppendLogCounters {
    /// Elements appended (`merge` and [`AppendLogStore::append`] on list namespaces).
    pub appends: u64,
    /// Appends that went into the spare capacity of the last chunk.
    pub appends_into_chunk: u64,
    /// Chunks created (by appends and by `put`/`rmw` of lists).
    pub chunks_created: u64,
    /// Appends that found the last chunk outside the mutable region with room left,
    /// and started the next chunk instead of copying it.
    pub chunks_sealed_early: u64,
    /// Appends that copied a small last chunk (below `seal_at`) outside the mutable
    /// region to the tail.
    pub chunks_copied: u64,
    /// Chunks removed (delete, replacement, truncation).
    pub chunks_dropped: u64,
    /// Chunk records read (by `get`, `iter_list`, `truncate_front`, ...).
    pub chunk_reads: u64,
    /// [`AppendLogStore::truncate_front`] calls.
    pub truncations: u64,
    /// Elements evicted by [`AppendLogStore::truncate_front`].
    pub evicted: u64,
}

/// The chunked append-list store. See the [module docs](self) for its design and
/// format.
///
/// ```
/// use spillway_store::{AppendLogOptions, AppendLogStore, NamespaceSpec, StateStore, StateStoreExt, StoreOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("window"));
/// let mut store = AppendLogStore::open(opts, AppendLogOptions::default()).unwrap();
/// let w = store.namespace("window").unwrap();
/// for e in [&b"a"[..], b"bb", b"ccc"] {
///     store.append(w, b"key", e).unwrap();
/// }
/// assert_eq!(store.list_len(w, b"key").unwrap(), 3);
/// // `get` returns the list encoding every store uses.
/// let mut want = Vec::new();
/// for e in [&b"a"[..], b"bb", b"ccc"] {
///     spillway_store::list::push(&mut want, e);
/// }
/// assert_eq!(store.get(w, b"key").unwrap(), Some(want));
/// ```
pub struct AppendLogStore {
    inner: HashLogStore,
    names: Vec<String>,
    chunk_ns: Vec<Option<Ns>>,
    min_chunk: usize,
    max_chunk: usize,
    seal_at: usize,
    poisoned: Option<String>,
    ops: StoreStats,
    counters: AppendLogCounters,
    /// Scratch for one framed element (kept small between operations).
    buf: Vec<u8>,
    /// Scratch for chunk keys.
    ckey: Vec<u8>,
    /// A bound on values and lists tighter than the log's ([`Self::set_value_cap`]).
    value_cap: Option<crate::ValueCap>,
}

/// Visitor of a list's chunks: (chunk number, offset of the live bytes in the chunk,
/// live bytes) -> continue?, or what is wrong with the chunk.
type ChunkVisitor<'a> = dyn FnMut(u32, usize, &[u8]) -> std::result::Result<bool, String> + 'a;

/// Bytes of scratch kept between operations.
const KEEP_SCRATCH: usize = 4096;

impl AppendLogStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one; its
    /// files go through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions, aopts: AppendLogOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, aopts, fs)
    }

    /// Like [`open`](Self::open), doing all file I/O through `fs` (the test seam).
    pub fn open_with_fs(
        opts: StoreOptions,
        aopts: AppendLogOptions,
        fs: Arc<dyn Fs>,
    ) -> Result<Self> {
        aopts.validate()?;
        opts.validate()?;
        let mut hopts = opts.clone();
        let mut chunk_ns = Vec::with_capacity(opts.namespaces.len());
        for spec in &opts.namespaces {
            if spec.name.contains('\u{1}') {
                return Err(Error::InvalidOption {
                    option: "namespaces",
                    detail: format!(
                        "namespace name {:?} contains U+0001, reserved for appendlog's chunk \
                         namespaces",
                        spec.name
                    ),
                });
            }
            if matches!(spec.merge, MergeOp::ListAppend) {
                if spec.name.len() + CHUNK_NS_SUFFIX.len() > 255 {
                    return Err(Error::InvalidOption {
                        option: "namespaces",
                        detail: format!(
                            "list namespace name {:?} must be at most {} bytes in appendlog",
                            spec.name,
                            255 - CHUNK_NS_SUFFIX.len()
                        ),
                    });
                }
                chunk_ns.push(Some(Ns(hopts.namespaces.len() as u16)));
                hopts
                    .namespaces
                    .push(NamespaceSpec::list(chunk_namespace(&spec.name)).hint(spec.hint));
            } else {
                chunk_ns.push(None);
            }
        }
        hopts.validate()?;
        let inner = HashLogStore::open_with_fs(hopts, aopts.hashlog.clone(), fs)?;
        Ok(AppendLogStore {
            inner,
            names: opts.namespaces.iter().map(|n| n.name.clone()).collect(),
            chunk_ns,
            min_chunk: aopts.min_chunk,
            max_chunk: aopts.max_chunk,
            seal_at: aopts.seal_at,
            poisoned: None,
            ops: StoreStats::default(),
            counters: AppendLogCounters::default(),
            buf: Vec::new(),
            ckey: Vec::new(),
            value_cap: None,
        })
    }

    /// Counters of the list layer.
    pub fn counters(&self) -> &AppendLogCounters {
        &self.counters
    }

    /// The hybrid log under this layout (its garbage and log size figures).
    pub fn hashlog(&self) -> &HashLogStore {
        &self.inner
    }

    /// Appends `elem` to the list at `key` (creating it): the same as `merge` on a list
    /// namespace. Costs O(`elem`) whatever the list's length.
    ///
    /// ```
    /// # use spillway_store::{AppendLogOptions, AppendLogStore, NamespaceSpec, StateStore, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("w"));
    /// let mut store = AppendLogStore::open(opts, AppendLogOptions::default()).unwrap();
    /// let w = store.namespace("w").unwrap();
    /// for i in 0u32..10_000 {
    ///     store.append(w, b"k", &i.to_le_bytes()).unwrap();
    /// }
    /// assert_eq!(store.list_len(w, b"k").unwrap(), 10_000);
    /// ```
    pub fn append(&mut self, ns: Ns, key: &[u8], elem: &[u8]) -> Result<()> {
        let cns = self.list_ns(ns, "append")?;
        self.ops.merges += 1;
        self.append_elem(ns, cns, key, elem)
    }

    /// Number of elements of the list at `key` (0 if absent). Reads only the head.
    ///
    /// ```
    /// # use spillway_store::{AppendLogOptions, AppendLogStore, NamespaceSpec, StateStore, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("w"));
    /// let mut store = AppendLogStore::open(opts, AppendLogOptions::default()).unwrap();
    /// let w = store.namespace("w").unwrap();
    /// assert_eq!(store.list_len(w, b"k").unwrap(), 0);
    /// store.append(w, b"k", b"x").unwrap();
    /// assert_eq!(store.list_len(w, b"k").unwrap(), 1);
    /// ```
    pub fn list_len(&mut self, ns: Ns, key: &[u8]) -> Result<u64> {
        self.list_ns(ns, "list_len")?;
        self.ops.gets += 1;
        match self.read_head(ns, key)? {
            None => Ok(0),
            Some(h) if h.opaque() => Err(not_a_list("list_len")),
            Some(h) => Ok(h.count),
        }
    }

    /// Visits the elements of the list at `key` from the oldest, chunk by chunk (never
    /// holding more than one chunk); `visit` returns `false` to stop. Returns the number
    /// of elements visited (0 if the list is absent).
    ///
    /// ```
    /// # use spillway_store::{AppendLogOptions, AppendLogStore, NamespaceSpec, StateStore, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("w"));
    /// let mut store = AppendLogStore::open(opts, AppendLogOptions::default()).unwrap();
    /// let w = store.namespace("w").unwrap();
    /// for i in 0u64..1000 {
    ///     store.append(w, b"k", &i.to_le_bytes()).unwrap();
    /// }
    /// let mut sum = 0;
    /// let n = store
    ///     .iter_list(w, b"k", &mut |e| {
    ///         sum += u64::from_le_bytes(e.try_into().unwrap());
    ///         true
    ///     })
    ///     .unwrap();
    /// assert_eq!((n, sum), (1000, 999 * 1000 / 2));
    /// ```
    pub fn iter_list(
        &mut self,
        ns: Ns,
        key: &[u8],
        visit: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64> {
        let cns = self.list_ns(ns, "iter_list")?;
        self.ops.gets += 1;
        let Some(h) = self.read_head(ns, key)? else { return Ok(0) };
        if h.opaque() {
            return Err(not_a_list("iter_list"));
        }
        let mut n = 0u64;
        self.for_each_chunk(ns, cns, key, &h, &mut |no, _, live| {
            for e in list::iter(live) {
                let e = e.map_err(|b| format!("chunk {no}: {b}"))?;
                n += 1;
                if !visit(e) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        Ok(n)
    }

    /// Evicts the oldest `n` elements of the list at `key` (a sliding window's
    /// eviction): chunks wholly evicted are deleted, a partly evicted first chunk keeps
    /// an offset in the head; evicting every element deletes the list. Returns the
    /// number of elements evicted.
    ///
    /// ```
    /// # use spillway_store::{AppendLogOptions, AppendLogStore, NamespaceSpec, StateStore, StateStoreExt, StoreOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("w"));
    /// let mut store = AppendLogStore::open(opts, AppendLogOptions::default()).unwrap();
    /// let w = store.namespace("w").unwrap();
    /// for i in 0u8..5 {
    ///     store.append(w, b"k", &[i]).unwrap();
    /// }
    /// assert_eq!(store.truncate_front(w, b"k", 2).unwrap(), 2);
    /// let mut left = Vec::new();
    /// store.iter_list(w, b"k", &mut |e| { left.push(e[0]); true }).unwrap();
    /// assert_eq!(left, [2, 3, 4]);
    /// assert_eq!(store.truncate_front(w, b"k", 10).unwrap(), 3);
    /// assert_eq!(store.get(w, b"k").unwrap(), None);
    /// ```
    pub fn truncate_front(&mut self, ns: Ns, key: &[u8], n: u64) -> Result<u64> {
        let cns = self.list_ns(ns, "truncate_front")?;
        self.check_writable()?;
        self.counters.truncations += 1;
        let Some(h) = self.read_head(ns, key)? else { return Ok(0) };
        if h.opaque() {
            return Err(not_a_list("truncate_front"));
        }
        if n == 0 {
            return Ok(0);
        }
        if n >= h.count {
            self.delete_list(ns, cns, key, &h)?;
            self.counters.evicted += h.count;
            return Ok(h.count);
        }
        let mut left = n;
        let mut freed = 0u64;
        let mut new_first = h.first;
        let mut new_front = h.front;
        self.for_each_chunk(ns, cns, key, &h, &mut |no, off, live| {
            let mut pos = 0usize;
            let mut it = list::iter(live);
            while left > 0 {
                match it.next() {
                    Some(Ok(e)) => {
                        pos += list::framed_len(e);
                        left -= 1;
                    }
                    Some(Err(b)) => return Err(format!("chunk {no}: {b}")),
                    None => break,
                }
            }
            freed += pos as u64;
            if left > 0 {
                return Ok(true);
            }
            if pos == live.len() && no != h.last {
                (new_first, new_front) = (no + 1, 0);
            } else {
                (new_first, new_front) = (no, (off + pos) as u32);
            }
            Ok(false)
        })?;
        if left > 0 {
            return Err(self.corrupt(
                ns,
                key,
                format!("list head counts {} elements, fewer found", h.count),
            ));
        }
        let Some(bytes) = h.bytes.checked_sub(freed) else {
            return Err(self.corrupt(
                ns,
                key,
                format!("list head byte length {} below the {freed} bytes evicted", h.bytes),
            ));
        };
        let new = Head { count: h.count - n, bytes, first: new_first, front: new_front, ..h };
        self.write_head(ns, key, &new)?;
        self.drop_chunks(cns, key, h.first..new_first)?;
        self.counters.evicted += n;
        self.finish_op();
        Ok(n)
    }

    // ----- internals -----

    /// The chunk namespace of list namespace `ns`; refuses namespaces that are not lists.
    fn list_ns(&self, ns: Ns, op: &'static str) -> Result<Ns> {
        match self.chunk_ns.get(ns.index()) {
            Some(Some(c)) => Ok(*c),
            Some(None) => Err(Error::Unsupported {
                store: "appendlog",
                op,
                hint: "list operations need a namespace declared with MergeOp::ListAppend",
            }),
            None => Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) }),
        }
    }

    /// `Some(chunk namespace)` for list namespaces, `None` for pass-through ones.
    fn route(&self, ns: Ns) -> Result<Option<Ns>> {
        self.chunk_ns
            .get(ns.index())
            .copied()
            .ok_or_else(|| Error::UnknownNamespace { name: format!("#{}", ns.index()) })
    }

    fn check_writable(&self) -> Result<()> {
        crate::error::writable(&self.poisoned)
    }

    /// A corruption error naming the namespace and key; poisons the store.
    fn corrupt(&mut self, ns: Ns, key: &[u8], what: impl Display) -> Error {
        let e = Error::corrupt(
            self.inner.dir(),
            0,
            format!(
                "appendlog namespace {:?} key \"{}\": {what}",
                self.names[ns.index()],
                key.escape_ascii()
            ),
        );
        if self.poisoned.is_none() {
            self.poisoned = Some(e.to_string());
        }
        e
    }

    fn finish_op(&mut self) {
        if self.buf.capacity() > KEEP_SCRATCH {
            self.buf = Vec::new();
        }
    }

    /// See [`HashLogStore::min_budget`].
    pub(crate) fn min_budget(&self) -> u64 {
        self.inner.min_budget()
    }

    /// See [`HashLogStore::set_memory_budget`].
    pub(crate) fn set_memory_budget(&mut self, budget: u64) -> Result<()> {
        crate::error::writable(&self.poisoned)?;
        self.inner.set_memory_budget(budget)
    }

    /// Bounds every value by `cap` too, lists included (the adaptive store's parts
    /// accept the same values).
    pub(crate) fn set_value_cap(&mut self, cap: crate::ValueCap) {
        self.value_cap = Some(cap);
        self.inner.set_value_cap(cap, self.names.len());
    }

    /// What a record of the hybrid log holds besides its key (see
    /// [`HashLogStore::max_value`]).
    pub(crate) fn record_room(&self) -> usize {
        self.inner.record_room()
    }

    /// The longest list (in bytes) under a key of `klen` bytes.
    fn max_list(&self, klen: usize) -> usize {
        self.value_cap.map_or(crate::MAX_VALUE_LEN, |c| c.max(klen))
    }

    /// Largest chunk capacity for a list key of `klen` bytes.
    fn max_cap(&self, klen: usize) -> usize {
        self.max_chunk.min(self.inner.max_record_value(klen + CHUNK_NO_LEN))
    }

    fn first_cap(&self, klen: usize) -> usize {
        self.min_chunk.min(self.max_cap(klen))
    }

    fn next_cap(&self, prev: usize, klen: usize) -> usize {
        prev.saturating_mul(2).max(self.min_chunk).min(self.max_cap(klen))
    }

    fn check_list_key(key: &[u8]) -> Result<()> {
        if key.len() > MAX_KEY_LEN - CHUNK_NO_LEN {
            return Err(Error::KeyTooLarge { len: key.len(), max: MAX_KEY_LEN - CHUNK_NO_LEN });
        }
        Ok(())
    }

    fn read_head(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Head>> {
        match self.inner.with_value(ns, key, Head::decode)? {
            None => Ok(None),
            Some(Ok(h)) => Ok(Some(h)),
            Some(Err(what)) => Err(self.corrupt(ns, key, what)),
        }
    }

    fn write_head(&mut self, ns: Ns, key: &[u8], h: &Head) -> Result<()> {
        self.inner.put(ns, key, &h.encode())
    }

    /// Calls `f(chunk number, offset of the live bytes in the chunk, live bytes)` for
    /// the chunks of `h` in order, checking them against the head; `f` returns
    /// `Ok(false)` to stop, `Err(what)` for a damaged chunk.
    fn for_each_chunk(
        &mut self,
        ns: Ns,
        cns: Ns,
        key: &[u8],
        h: &Head,
        f: &mut ChunkVisitor<'_>,
    ) -> Result<()> {
        let mut ckey = std::mem::take(&mut self.ckey);
        let mut total = 0u64;
        let mut outcome: std::result::Result<bool, String> = Ok(true);
        let mut io = Ok(());
        for no in h.first..=h.last {
            chunk_key(&mut ckey, key, no);
            self.counters.chunk_reads += 1;
            let r = self.inner.with_value(cns, &ckey, |v| {
                let start = if no == h.first { h.front as usize } else { 0 };
                if no == h.last && v.len() != h.last_used as usize {
                    return Err(format!(
                        "chunk {no} holds {} bytes, the head says {}",
                        v.len(),
                        h.last_used
                    ));
                }
                let Some(live) = v.get(start..) else {
                    return Err(format!(
                        "chunk {no} of {} bytes is shorter than the front offset {start}",
                        v.len()
                    ));
                };
                total += live.len() as u64;
                f(no, start, live)
            });
            match r {
                Err(e) => {
                    io = Err(e);
                    break;
                }
                Ok(None) => {
                    outcome = Err(format!("chunk {no} of {}..={} is missing", h.first, h.last));
                    break;
                }
                Ok(Some(Ok(true))) => {}
                Ok(Some(other)) => {
                    outcome = other;
                    break;
                }
            }
        }
        self.ckey = ckey;
        io?;
        match outcome {
            Ok(true) if total != h.bytes => Err(self.corrupt(
                ns,
                key,
                format!("chunks hold {total} live bytes, the head says {}", h.bytes),
            )),
            Ok(_) => Ok(()),
            Err(what) => Err(self.corrupt(ns, key, what)),
        }
    }

    /// Materializes the list of `h` into `out` (appending).
    fn read_list(
        &mut self,
        ns: Ns,
        cns: Ns,
        key: &[u8],
        h: &Head,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        if h.bytes > crate::MAX_VALUE_LEN as u64 {
            return Err(Error::ValueTooLarge { len: h.bytes as usize, max: crate::MAX_VALUE_LEN });
        }
        out.reserve(h.bytes as usize);
        self.for_each_chunk(ns, cns, key, h, &mut |_, _, live| {
            out.extend_from_slice(live);
            Ok(true)
        })
    }

    fn append_elem(&mut self, ns: Ns, cns: Ns, key: &[u8], elem: &[u8]) -> Result<()> {
        self.check_writable()?;
        Self::check_list_key(key)?;
        let framed = list::framed_len(elem);
        crate::check_value(framed, self.inner.max_record_value(key.len() + CHUNK_NO_LEN))?;
        let head = self.read_head(ns, key)?;
        let Some(total) = head.as_ref().map_or(0, |h| h.bytes).checked_add(framed as u64) else {
            return Err(self.corrupt(ns, key, "list head byte length leaves no room to append"));
        };
        let max = self.max_list(key.len());
        if total > max as u64 {
            return Err(Error::ValueTooLarge { len: total as usize, max });
        }
        let mut ckey = std::mem::take(&mut self.ckey);
        let r = self.append_with(ns, cns, key, elem, head, &mut ckey);
        self.ckey = ckey;
        self.finish_op();
        r
    }

    fn append_with(
        &mut self,
        ns: Ns,
        cns: Ns,
        key: &[u8],
        elem: &[u8],
        head: Option<Head>,
        ckey: &mut Vec<u8>,
    ) -> Result<()> {
        let framed = list::framed_len(elem);
        self.counters.appends += 1;
        let count_add = |h: &Head| if h.opaque() { 0 } else { 1 };
        match head {
            Some(mut h) => {
                let fits = h.last_used as usize + framed <= h.last_cap as usize;
                if fits {
                    chunk_key(ckey, key, h.last);
                    if self.inner.append_in_place(cns, ckey, elem)? {
                        self.counters.appends_into_chunk += 1;
                        h.count += count_add(&h);
                        h.bytes += framed as u64;
                        h.last_used += framed as u32;
                        return self.write_head(ns, key, &h);
                    }
                }
                // Not in place: the last chunk is full, or it left the mutable region
                // (or compaction moved it without its spare room). A small one (below
                // `seal_at`) is copied to the tail with the element, so lists appended
                // rarely do not turn into one chunk (one index entry) per element: with
                // twice the room if it was full (it is growing), a quarter more if it
                // left the mutable region before filling (it will likely not fill
                // the next time either).
                let used = h.last_used as usize + framed;
                if used <= self.seal_at {
                    let room = if fits { used + used / 4 } else { 2 * used };
                    let cap = room.max(self.min_chunk).min(self.max_cap(key.len()));
                    chunk_key(ckey, key, h.last);
                    self.inner.append_copy(cns, ckey, elem, cap)?;
                    self.counters.chunks_copied += 1;
                    h.count += count_add(&h);
                    h.bytes += framed as u64;
                    h.last_used = used as u32;
                    h.last_cap = cap.max(used) as u32;
                    return self.write_head(ns, key, &h);
                }
                // Otherwise the last chunk is full, or big enough to be sealed where it
                // is: start the next chunk. A chunk sealed early sizes the next one by
                // what it received, so lists that share a small mutable region do not
                // reserve room they will not fill; a chunk that filled up doubles.
                self.counters.chunks_sealed_early += u64::from(fits);
                let cap = if fits {
                    (h.last_used as usize).max(self.min_chunk).min(self.max_cap(key.len()))
                } else {
                    self.next_cap(h.last_cap as usize, key.len())
                }
                .max(framed);
                let no = h.last.checked_add(1).ok_or(Error::Unsupported {
                    store: "appendlog",
                    op: "append past chunk number 2^32-1",
                    hint: "rewrite the list with put (its chunks are renumbered) or delete it",
                })?;
                self.new_chunk(cns, key, no, elem, cap, ckey)?;
                h.count += count_add(&h);
                h.bytes += framed as u64;
                h.last = no;
                h.last_used = framed as u32;
                h.last_cap = cap as u32;
                self.write_head(ns, key, &h)
            }
            None => {
                let cap = self.first_cap(key.len()).max(framed);
                self.new_chunk(cns, key, 0, elem, cap, ckey)?;
                let h = Head {
                    flags: 0,
                    count: 1,
                    bytes: framed as u64,
                    first: 0,
                    last: 0,
                    front: 0,
                    last_used: framed as u32,
                    last_cap: cap as u32,
                };
                let r = self.write_head(ns, key, &h);
                if r.is_err() {
                    // The head was refused (e.g. the index is full): drop the chunk.
                    chunk_key(ckey, key, 0);
                    let _ = self.inner.delete(cns, ckey);
                }
                r
            }
        }
    }

    /// Writes chunk `no` holding the one element `elem`, with capacity `cap`.
    fn new_chunk(
        &mut self,
        cns: Ns,
        key: &[u8],
        no: u32,
        elem: &[u8],
        cap: usize,
        ckey: &mut Vec<u8>,
    ) -> Result<()> {
        self.buf.clear();
        list::push(&mut self.buf, elem);
        chunk_key(ckey, key, no);
        let buf = std::mem::take(&mut self.buf);
        let r = self.inner.put_with_capacity(cns, ckey, &buf, cap);
        self.buf = buf;
        r?;
        self.counters.chunks_created += 1;
        Ok(())
    }

    /// Deletes the chunks numbered `nos`.
    fn drop_chunks(&mut self, cns: Ns, key: &[u8], nos: impl Iterator<Item = u32>) -> Result<()> {
        let mut ckey = std::mem::take(&mut self.ckey);
        let mut r = Ok(());
        for no in nos {
            chunk_key(&mut ckey, key, no);
            r = self.inner.delete(cns, &ckey);
            if r.is_err() {
                break;
            }
            self.counters.chunks_dropped += 1;
        }
        self.ckey = ckey;
        r
    }

    /// Deletes the head, then every chunk.
    fn delete_list(&mut self, ns: Ns, cns: Ns, key: &[u8], h: &Head) -> Result<()> {
        self.inner.delete(ns, key)?;
        self.drop_chunks(cns, key, h.first..=h.last)
    }

    /// Replaces the list at `key` by `value` (any bytes).
    fn put_list(&mut self, ns: Ns, cns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        Self::check_list_key(key)?;
        crate::check_value(value.len(), self.max_list(key.len()))?;
        let max_cap = self.max_cap(key.len());
        let first_cap = self.first_cap(key.len());
        // Plan the chunks: (start, end, capacity).
        let mut plan: Vec<(usize, usize, usize)> = Vec::new();
        let mut count = 0u64;
        let well_formed = list::iter(value).all(|e| e.is_ok());
        let flags = if well_formed {
            let (mut start, mut used, mut cap) = (0usize, 0usize, first_cap);
            for e in list::iter(value) {
                let f = list::framed_len(e.expect("checked"));
                if f > self.inner.max_record_value(key.len() + CHUNK_NO_LEN) {
                    return Err(Error::ValueTooLarge {
                        len: f,
                        max: self.inner.max_record_value(key.len() + CHUNK_NO_LEN),
                    });
                }
                if used > 0 && used + f > cap {
                    plan.push((start, start + used, cap));
                    start += used;
                    used = 0;
                    cap = self.next_cap(cap, key.len());
                }
                if used == 0 && f > cap {
                    cap = f;
                }
                used += f;
                count += 1;
            }
            plan.push((start, start + used, cap));
            0
        } else {
            let max = self.inner.max_record_value(key.len() + CHUNK_NO_LEN);
            crate::check_value(value.len(), max)?;
            plan.push((0, value.len(), value.len().max(first_cap.min(max_cap))));
            FLAG_OPAQUE
        };
        let k = plan.len() as u32;
        let mut old = self.read_head(ns, key)?;
        // New chunks get numbers disjoint from the old ones, so the head switches
        // atomically: 0.. if they end below the old first chunk, else after the old last.
        let base = match old {
            None => 0,
            Some(o) if o.first >= k => 0,
            Some(o) => match o.last.checked_add(1).filter(|b| b.checked_add(k).is_some()) {
                Some(b) => b,
                None => {
                    // Chunk numbers exhausted: drop the old list first (not atomic).
                    self.delete_list(ns, cns, key, &o)?;
                    old = None;
                    0
                }
            },
        };
        let mut ckey = std::mem::take(&mut self.ckey);
        let mut r = Ok(());
        let mut written = 0u32;
        for (i, &(s, e, cap)) in plan.iter().enumerate() {
            chunk_key(&mut ckey, key, base + i as u32);
            let cap = if i + 1 == plan.len() { cap } else { e - s };
            r = self.inner.put_with_capacity(cns, &ckey, &value[s..e], cap);
            if r.is_err() {
                break;
            }
            written += 1;
            self.counters.chunks_created += 1;
        }
        if r.is_ok() {
            let &(s, e, cap) = plan.last().expect("one chunk at least");
            let h = Head {
                flags,
                count,
                bytes: value.len() as u64,
                first: base,
                last: base + k - 1,
                front: 0,
                last_used: (e - s) as u32,
                last_cap: cap as u32,
            };
            r = self.write_head(ns, key, &h);
        }
        self.ckey = ckey;
        if r.is_err() {
            // The old head still rules: remove what was written under new numbers.
            if !self.inner.is_poisoned() {
                let _ = self.drop_chunks(cns, key, base..base + written);
            }
            return r;
        }
        if let Some(o) = old {
            self.drop_chunks(cns, key, o.first..=o.last)?;
        }
        self.finish_op();
        Ok(())
    }

    fn get_list(&mut self, ns: Ns, cns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        match self.read_head(ns, key)? {
            None => Ok(false),
            Some(h) => {
                self.read_list(ns, cns, key, &h, out)?;
                Ok(true)
            }
        }
    }
}

fn not_a_list(op: &'static str) -> Error {
    Error::Unsupported {
        store: "appendlog",
        op,
        hint: "the value was written whole (put/rmw) and is not a sequence of framed list \
               elements; only get, merge, put and delete apply to it",
    }
}

impl StateStore for AppendLogStore {
    fn name(&self) -> &'static str {
        "appendlog"
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.names
            .iter()
            .position(|n| n == name)
            .map(|i| Ns(i as u16))
            .ok_or_else(|| Error::UnknownNamespace { name: name.to_string() })
    }

    fn is_ordered(&self, _: Ns) -> bool {
        false
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.ops.gets += 1;
        match self.route(ns)? {
            None => self.inner.get_into(ns, key, out),
            Some(cns) => self.get_list(ns, cns, key, out),
        }
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.ops.puts += 1;
        match self.route(ns)? {
            None => {
                self.check_writable()?;
                self.inner.put(ns, key, value)
            }
            Some(cns) => self.put_list(ns, cns, key, value),
        }
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.ops.merges += 1;
        match self.route(ns)? {
            None => {
                self.check_writable()?;
                self.inner.merge(ns, key, operand)
            }
            Some(cns) => self.append_elem(ns, cns, key, operand),
        }
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.ops.deletes += 1;
        self.check_writable()?;
        match self.route(ns)? {
            None => self.inner.delete(ns, key),
            Some(cns) => match self.read_head(ns, key)? {
                None => Ok(()),
                Some(h) => self.delete_list(ns, cns, key, &h),
            },
        }
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.ops.rmws += 1;
        self.check_writable()?;
        let Some(cns) = self.route(ns)? else { return self.inner.rmw(ns, key, f) };
        Self::check_list_key(key)?;
        let mut cur = Vec::new();
        let head = self.read_head(ns, key)?;
        if let Some(h) = &head {
            self.read_list(ns, cns, key, h, &mut cur)?;
        }
        let mut out = Vec::new();
        match f(head.is_some().then_some(cur.as_slice()), &mut out) {
            Rmw::Put => self.put_list(ns, cns, key, &out),
            Rmw::Delete => match head {
                Some(h) => self.delete_list(ns, cns, key, &h),
                None => Ok(()),
            },
            Rmw::Keep => Ok(()),
        }
    }

    /// A list namespace is scanned over its heads (hashlog's walk), each list read
    /// whole; other namespaces are hashlog's.
    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        order.unordered(
            "appendlog",
            "its heads are found through a hash index: it scans in log order (Order::Any); use \
             an ordered store for key order",
        )?;
        self.ops.scans += 1;
        let Some(cns) = self.route(ns)? else {
            return self.inner.range(ns, start, end, order, limit, visit);
        };
        let mut heads: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.inner.range(ns, start, end, Order::Any, limit, &mut |k, v| {
            heads.push((k.to_vec(), v.to_vec()));
            true
        })?;
        let mut value = Vec::new();
        let mut n = 0;
        for (k, v) in heads {
            let h = match Head::decode(&v) {
                Ok(h) => h,
                Err(what) => return Err(self.corrupt(ns, &k, what)),
            };
            value.clear();
            self.read_list(ns, cns, &k, &h, &mut value)?;
            n += 1;
            if !visit(&k, &value) {
                break;
            }
        }
        Ok(n)
    }

    /// A resumable walk: over the heads of a list namespace in hashlog's log order (the
    /// token is hashlog's), reading each list whole; other namespaces are hashlog's.
    fn scan_step(
        &mut self,
        ns: Ns,
        from: Option<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        self.ops.scans += 1;
        let Some(cns) = self.route(ns)? else {
            return self.inner.scan_step(ns, from, limit, visit);
        };
        // One head per step of the inner walk, so that a visitor that stops early
        // gets the token right after the list it stopped at.
        let mut token = from.map(<[u8]>::to_vec);
        let mut value = Vec::new();
        for _ in 0..limit {
            let mut head: Option<(Vec<u8>, Vec<u8>)> = None;
            let next = self.inner.scan_step(ns, token.as_deref(), 1, &mut |k, v| {
                head = Some((k.to_vec(), v.to_vec()));
                true
            })?;
            if let Some((k, v)) = head {
                let h = match Head::decode(&v) {
                    Ok(h) => h,
                    Err(what) => return Err(self.corrupt(ns, &k, what)),
                };
                value.clear();
                self.read_list(ns, cns, &k, &h, &mut value)?;
                if !visit(&k, &value) {
                    return Ok(next);
                }
            }
            match next {
                Some(t) => token = Some(t),
                None => return Ok(None),
            }
        }
        Ok(token)
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        self.check_writable()?;
        self.inner.checkpoint()
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.inner.stats();
        s.gets = self.ops.gets;
        s.puts = self.ops.puts;
        s.merges = self.ops.merges;
        s.deletes = self.ops.deletes;
        s.rmws = self.ops.rmws;
        s.scans = self.ops.scans;
        // The index counts heads and chunks; the number of user keys is not tracked.
        s.live_keys = None;
        s.bytes_in_memory += (self.buf.capacity() + self.ckey.capacity()) as u64;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HashLogOptions, StateStoreExt};
    use proptest::prelude::*;

    /// A fresh store in `dir` with one list namespace, and its handle.
    fn open(dir: &std::path::Path) -> (AppendLogStore, Ns) {
        let opts =
            StoreOptions::new(dir).memory_budget(1 << 20).namespace(NamespaceSpec::list("l"));
        let a = AppendLogOptions::default().hashlog(HashLogOptions::for_budget(1 << 20));
        let store = AppendLogStore::open(opts, a).unwrap();
        let ns = store.namespace("l").unwrap();
        (store, ns)
    }

    /// An operation on the store, for the hostile-head proptest.
    type Op = dyn Fn(&mut AppendLogStore) -> Result<()>;

    /// Replaces the head of the list at `key` with `bytes`, as a damaged value reads.
    fn put_head(store: &mut AppendLogStore, ns: Ns, key: &[u8], bytes: &[u8]) {
        store.inner.put(ns, key, bytes).unwrap();
    }

    /// A head whose byte length is 2^64 - 1: an append has no length to give.
    #[test]
    fn an_append_to_a_head_of_2_64_bytes_is_an_error_not_an_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, ns) = open(dir.path());
        store.append(ns, b"k", b"abcd").unwrap();
        let h = store.read_head(ns, b"k").unwrap().unwrap();
        put_head(&mut store, ns, b"k", &Head { bytes: u64::MAX, ..h }.encode());
        let e = store.append(ns, b"k", b"x").unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    }

    /// A head counting fewer live bytes than its first chunk holds before the evicted
    /// element's end.
    #[test]
    fn truncating_a_head_of_fewer_bytes_than_evicted_is_an_error_not_an_underflow() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, ns) = open(dir.path());
        store.append(ns, b"k", &[7; 100]).unwrap();
        store.append(ns, b"k", &[8; 100]).unwrap();
        let h = store.read_head(ns, b"k").unwrap().unwrap();
        let bad = Head { count: 2, bytes: 8, last: h.last + 1, last_used: 0, last_cap: 0, ..h };
        put_head(&mut store, ns, b"k", &bad.encode());
        let e = store.truncate_front(ns, b"k", 1).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The head of a list of a few chunks damaged (fields set huge, cut, flipped) or
        /// any bytes: every operation on the list answers `Ok` or `Err` (`put`,
        /// `delete` and `rmw` only when the head spans few chunks: they drop the range
        /// blind).
        #[test]
        fn hostile_list_heads_make_operations_fail_not_panic(
            n in 1usize..40,
            raw in proptest::collection::vec(any::<u8>(), 0..48),
            use_raw in any::<bool>(),
            ds in crate::hostile::damages(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let (mut store, ns) = open(dir.path());
            for i in 0..n {
                store.append(ns, b"k", &vec![i as u8; i % 7]).unwrap();
            }
            let valid = store.inner.get(ns, b"k").unwrap().unwrap();
            let head = if use_raw { raw } else { crate::hostile::damaged(&valid, &ds) };
            put_head(&mut store, ns, b"k", &head);
            let few = Head::decode(&head).map_or(true, |h| h.last - h.first < 1000);
            let mut ops: Vec<Box<Op>> = vec![
                Box::new(move |s| s.list_len(ns, b"k").map(drop)),
                Box::new(move |s| s.iter_list(ns, b"k", &mut |_| true).map(drop)),
                Box::new(move |s| s.get(ns, b"k").map(drop)),
                Box::new(move |s| s.range(ns, Bound::Unbounded, Bound::Unbounded, Order::Any, 10, &mut |_, _| true).map(drop)),
                Box::new(move |s| s.scan_step(ns, None, 10, &mut |_, _| true).map(drop)),
                Box::new(move |s| s.truncate_front(ns, b"k", 1).map(drop)),
                Box::new(move |s| s.truncate_front(ns, b"k", 3).map(drop)),
                Box::new(move |s| s.append(ns, b"k", b"tail")),
            ];
            if few {
                ops.push(Box::new(move |s| s.rmw(ns, b"k", &mut |_, _| Rmw::Keep)));
                ops.push(Box::new(move |s| s.put(ns, b"k", b"\x01\0\0\0x")));
                ops.push(Box::new(move |s| s.delete(ns, b"k")));
            }
            for op in &ops {
                // A corruption error poisons the store: each operation starts unpoisoned.
                store.poisoned = None;
                let _ = op(&mut store);
            }
        }
    }
}
