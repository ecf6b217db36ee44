//! # spillway-store
//!
//! The state-store contract of Spillway ([`StateStore`]) and its backends:
//!
//! | store | module | layout | order | durable checkpoint |
//! |---|---|---|---|---|
//! | [`MemStore`] | [`mem`] | hash map per namespace (Flink's heap backend) | no | snapshot file |
//! | [`HashLogStore`] | [`hashlog`] | FASTER-class hybrid log + compact hash index | no | fold-over log + periodic fuzzy index snapshot, log tail replayed |
//! | [`AppendLogStore`] | [`appendlog`] | per-key chunked append lists over the hybrid log | no | hashlog's |
//! | [`TimeLogStore`] | [`timelog`] | time partitions of sorted segment files + memtables, sparse block index | yes | flushed segments + manifest |
//! | `RocksStore` | `rocks` (feature `rocksdb`) | RocksDB LSM, Flink-style settings | yes | RocksDB checkpoint |
//! | [`TieredStore`] | [`tiered`] | in-process W-TinyLFU cache ([`cache`]) over Redis over hashlog; any subset of levels | no | flush down + L3's checkpoint |
//! | [`AdaptiveStore`] | [`adaptive`] | per namespace: hashlog, appendlog or timelog, chosen by hint and observer, migrated in steps | every namespace (natively in timelog, by walk + sort elsewhere) | parts' checkpoints + its manifest (two-phase) |
//!
//! Shared window state over any store: [`shared::SharedLists`] keeps each event once
//! under a content reference with a count, and each window a list of references.
//!
//! Shared by the formats: [`io`] (the file seam every file operation goes through) and
//! [`bytes`] (little-endian fields at byte offsets, also used by the engine's reservoir).
//!
//! ## The contract
//! - Byte keys and byte values inside a [namespace] (one per operator state),
//!   each declaring its merge semantics ([`MergeOp`]): list append or a user function.
//! - A store instance has a single writer: every operation takes `&mut self` and no
//!   lock is taken on the hot path. Parallelism comes from one instance per task.
//! - [`StateStore`] is what a backend implements: namespace lookup and order, the
//!   single-key operations, one scan ([`StateStore::range`]: bounds, an [`Order`], a
//!   limit), `checkpoint` and `stats`, plus four provided methods it overrides where it
//!   does better (`prefetch`, `apply_batch`, `delete_range`, `scan_step`).
//!   [`StateStoreExt`] gives every store the conveniences built from those (`get`,
//!   `multi_get_with`, `multi_rmw`, `scan_prefix`, `scan_range`, `scan_ordered`,
//!   `checkpoint_seq`); a backend cannot override them, so they mean the same
//!   everywhere.
//! - Batches: [`StateStore::apply_batch`] does exactly what the single operations
//!   would, in order; [`StateStore::prefetch`] announces keys about to be used. Stores
//!   that can overlap a batch's cache misses (hashlog) do so; the others run the
//!   operations one by one.
//! - Operations a namespace cannot serve (key-ordered scans of a hash namespace)
//!   return [`Error::Unsupported`]; nothing is silently skipped.
//!   [`StateStore::is_ordered`] says which namespaces are ordered.
//! - Durability is explicit: [`StateStore::checkpoint`] atomically publishes the
//!   current state in the store's directory; opening the directory again recovers
//!   exactly the state of the last completed checkpoint, or fails with a clear error.
//!   Every store keeps its last two checkpoints.
//! - Memory is a budget in bytes given at open ([`StoreOptions::memory_budget`]); the
//!   store keeps its resident state within it, and [`StoreStats`] shows it.
//! - After an I/O or corruption error a store is poisoned and refuses further writes
//!   and reads ([`Error::Poisoned`]) until it is reopened. (Appendlog refuses writes
//!   only after a damaged list it detects itself, so other lists stay readable; its
//!   hybrid log refuses both after an I/O error.)
//! - Opening: [`StoreConfig`] names a backend with its own options; [`StoreOptions`]
//!   holds what every backend takes (directory, budget, namespaces).
//!
//! Limits shared by all stores: keys up to [`MAX_KEY_LEN`] bytes, values up to
//! [`MAX_VALUE_LEN`] bytes (hashlog also bounds a record by its page size, mem an
//! entry's key plus value by [`mem::MAX_ENTRY_LEN`], one snapshot frame; appendlog a
//! list key by 4 bytes less and a list element or a value that is not a list by its
//! page size; adaptive every value by what all of its layouts hold, see
//! [`adaptive`]). Every limit is checked when the value is written, with a typed
//! error, so that a checkpoint (or, in adaptive, a migration) never meets a value it
//! cannot write. (Adaptive can meet one left by a directory opened before with larger
//! pages: its migration is then abandoned, the store unchanged, see [`adaptive`].)

pub mod adaptive;
pub mod appendlog;
pub mod bytes;
pub mod cache;
pub mod collections;
pub mod cursor;
pub mod error;
pub mod hashlog;
pub mod io;
pub mod list;
pub mod mem;
pub mod namespace;
#[cfg(feature = "rocksdb")]
pub mod rocks;
pub mod shared;
pub mod stats;
pub mod tiered;
pub mod timelog;

mod backend;
mod blockfile;
#[cfg(test)]
mod hostile;
mod hot;
mod manifest;

use std::ops::Bound;
use std::path::{Path, PathBuf};

pub use adaptive::{AdaptiveOptions, AdaptiveStore, Layout};
pub use appendlog::{AppendLogOptions, AppendLogStore};
pub use cursor::Cursor;
pub use error::{Error, Result};
pub use hashlog::{HashLogOptions, HashLogStore};
pub use mem::MemStore;
pub use namespace::{merges, AccessHint, MergeOp, NamespaceSpec, Ns};
#[cfg(feature = "rocksdb")]
pub use rocks::RocksStore;
pub use stats::{BackendStats, NamespaceLayout, StoreStats};
pub use tiered::{TieredOptions, TieredStore};
pub use timelog::{TimeLogOptions, TimeLogStore};

/// Longest key any store accepts, in bytes.
pub const MAX_KEY_LEN: usize = 32 * 1024;
/// Longest value any store accepts, in bytes (hashlog: also bounded by its page size;
/// mem: key plus value by [`mem::MAX_ENTRY_LEN`]).
pub const MAX_VALUE_LEN: usize = 256 * 1024 * 1024;

/// What a read-modify-write closure asks the store to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rmw {
    /// Store the bytes the closure wrote into `out` as the new value.
    Put,
    /// Delete the key.
    Delete,
    /// Leave the value as it was.
    Keep,
}

/// The closure of [`StateStore::rmw`]: receives the current value (if any) and an empty
/// buffer for the new one.
pub type RmwFn<'a> = dyn FnMut(Option<&[u8]>, &mut Vec<u8>) -> Rmw + 'a;

/// The closure of the batched read-modify-writes ([`StateStoreExt::multi_rmw`],
/// [`StateStore::apply_batch`]): receives the operation's position in the batch, the
/// current value (if any) and an empty buffer for the new one.
pub type MultiRmwFn<'a> = dyn FnMut(usize, Option<&[u8]>, &mut Vec<u8>) -> Rmw + 'a;

/// The visitor of [`StateStoreExt::multi_get_with`]: receives the key's position in the
/// batch and its value where the store holds it (no copy), or `None` if absent.
pub type MultiGetFn<'a> = dyn FnMut(usize, Option<&[u8]>) + 'a;

/// The batch's operations one at a time, in order (what [`StateStore::apply_batch`]
/// does once it has prefetched): for wrappers that cannot pass a batch down whole.
pub(crate) fn apply_each<S: StateStore + ?Sized>(
    s: &mut S,
    ops: &[BatchOp<'_>],
    f: &mut MultiRmwFn<'_>,
) -> Result<()> {
    let (mut buf, mut unused) = (Vec::new(), Vec::new());
    for (i, op) in ops.iter().enumerate() {
        match op.kind {
            BatchKind::Get => {
                let found = s.get_into(op.ns, op.key, &mut buf)?;
                f(i, found.then_some(&buf[..]), &mut unused);
                unused.clear();
            }
            BatchKind::Put(v) => s.put(op.ns, op.key, v)?,
            BatchKind::Merge(v) => s.merge(op.ns, op.key, v)?,
            BatchKind::Delete => s.delete(op.ns, op.key)?,
            BatchKind::Rmw => s.rmw(op.ns, op.key, &mut |old, out| f(i, old, out))?,
        }
    }
    Ok(())
}

/// What one operation of a mixed batch ([`StateStore::apply_batch`]) does to its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind<'a> {
    /// Read the value: the batch's closure sees it (its `Rmw` answer is ignored).
    Get,
    /// Set the value.
    Put(&'a [u8]),
    /// Merge an operand ([`StateStore::merge`]).
    Merge(&'a [u8]),
    /// Remove the key.
    Delete,
    /// Read-modify-write through the batch's closure ([`StateStore::rmw`]).
    Rmw,
}

/// One operation of a mixed batch: a namespace, a key and what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOp<'a> {
    /// The namespace.
    pub ns: Ns,
    /// The key.
    pub key: &'a [u8],
    /// The operation.
    pub kind: BatchKind<'a>,
}

/// The visitor of scans: receives each key and value; returns `false` to stop.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> bool + 'a;

/// Direction of a key-ordered scan ([`StateStoreExt::scan_ordered`], [`Cursor`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Increasing byte order of keys.
    #[default]
    Forward,
    /// Decreasing byte order of keys.
    Reverse,
}

/// Metadata of a completed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Sequence number, increasing by one per checkpoint of a store directory.
    pub seq: u64,
    /// Wall time the checkpoint took, in microseconds.
    pub micros: u64,
}

/// The order in which a scan ([`StateStore::range`]) visits entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Order {
    /// The store's own order: key order in an ordered namespace, an unspecified one
    /// elsewhere. Every namespace serves it.
    #[default]
    Any,
    /// Increasing byte order of keys (ordered namespaces only).
    Forward,
    /// Decreasing byte order of keys (ordered namespaces only).
    Reverse,
}

impl From<Direction> for Order {
    fn from(d: Direction) -> Order {
        match d {
            Direction::Forward => Order::Forward,
            Direction::Reverse => Order::Reverse,
        }
    }
}

impl Order {
    /// The key order an ordered namespace serves this with (`Any`: forward).
    pub fn direction(self) -> Direction {
        match self {
            Order::Reverse => Direction::Reverse,
            Order::Any | Order::Forward => Direction::Forward,
        }
    }

    /// For a namespace without order: `Ok` for [`Order::Any`], otherwise
    /// [`Error::Unsupported`] from `store` with `hint`.
    pub(crate) fn unordered(self, store: &'static str, hint: &'static str) -> Result<()> {
        match self {
            Order::Any => Ok(()),
            Order::Forward | Order::Reverse => {
                Err(Error::Unsupported { store, op: "ordered range scan", hint })
            }
        }
    }
}

/// Whether `key` lies within the bounds (the filter of unordered scans).
pub(crate) fn in_bounds(key: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    (match start {
        Bound::Included(s) => key >= s,
        Bound::Excluded(s) => key > s,
        Bound::Unbounded => true,
    }) && (match end {
        Bound::Included(e) => key <= e,
        Bound::Excluded(e) => key < e,
        Bound::Unbounded => true,
    })
}

/// The state-store contract: what a backend implements. See the crate docs for the
/// rules every backend follows, and [`StateStoreExt`] for the conveniences every store
/// gets from these.
///
/// A new backend writes the required methods: its name, namespace lookup and order,
/// the five single-key operations, one scan ([`range`](Self::range)), `checkpoint` and
/// `stats`. The provided ones (`prefetch`, `apply_batch`, `delete_range`, `scan_step`)
/// are built from those and are overridden only where the backend does better (hashlog
/// overlaps a batch's cache misses; RocksDB deletes a range with one tombstone; hash
/// stores walk their log).
pub trait StateStore: Send {
    /// Short backend name ("mem", "hashlog", "rocksdb").
    fn name(&self) -> &'static str;

    /// The handle of a namespace declared at open.
    fn namespace(&self, name: &str) -> Result<Ns>;

    /// Whether `ns` is kept in key order, so that [`range`](Self::range) serves
    /// [`Order::Forward`] and [`Order::Reverse`], and [`delete_range`](Self::delete_range)
    /// and [`Cursor`] work on it.
    fn is_ordered(&self, ns: Ns) -> bool;

    /// Reads the value of `key` into `out` (cleared first); returns whether it exists.
    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;

    /// Sets the value of `key`.
    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()>;

    /// Combines `operand` with the value of `key` as the namespace's [`MergeOp`] says.
    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()>;

    /// Removes `key` (no error if absent).
    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()>;

    /// Read-modify-write: calls `f` with the current value and applies what it returns.
    /// Backends with in-place updates write the new value over the old one when it fits.
    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()>;

    /// The one scan: visits at most `limit` entries of `ns` whose keys lie within the
    /// bounds, in `order`, until `visit` returns `false`; returns how many it visited
    /// (the one that said stop included). [`Order::Any`] works on every namespace (key
    /// order where the namespace is ordered); [`Order::Forward`] and [`Order::Reverse`]
    /// on ordered ones, others answer [`Error::Unsupported`] (for `Reverse` the first
    /// entry visited is the greatest key within the bounds). A prefix scan is the range
    /// from the prefix to [`cursor::prefix_end`] ([`StateStoreExt::scan_prefix`]).
    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize>;

    /// Atomically publishes the current state in the store directory.
    fn checkpoint(&mut self) -> Result<CheckpointInfo>;

    /// Counters and resource use, and the sequence number of the checkpoint the store
    /// was recovered from or last wrote ([`StoreStats::checkpoint_seq`]).
    fn stats(&self) -> StoreStats;

    /// Hint: the caller is about to operate on these keys. A store may start loading
    /// what the operations will touch (hashlog: the index buckets, then the records)
    /// so that the cache misses of a batch overlap instead of following one another.
    /// It changes no state and no result; the default does nothing.
    fn prefetch(&mut self, keys: &[(Ns, &[u8])]) {
        let _ = keys;
    }

    /// A mixed batch of operations over any namespaces, applied in order: exactly what
    /// the single operations would do one after the other (a key that appears twice
    /// sees its first update). `f(i, value, out)` serves `ops[i]` when it is a `Get`
    /// (it sees the value where the store holds it, no copy; its answer is ignored) or
    /// an `Rmw` (as in [`rmw`](Self::rmw)). On an error the operations before the
    /// failing one have been applied. The default announces the keys to
    /// [`prefetch`](Self::prefetch) and runs the operations one by one.
    fn apply_batch(&mut self, ops: &[BatchOp<'_>], f: &mut MultiRmwFn<'_>) -> Result<()> {
        if ops.len() > 1 {
            self.prefetch(&ops.iter().map(|o| (o.ns, o.key)).collect::<Vec<_>>());
        }
        apply_each(self, ops, f)
    }

    /// Deletes every key `k` of `ns` with `start <= k < end`; returns how many keys it
    /// deleted where the backend knows (RocksDB's range tombstone does not: it returns
    /// 0). Unordered namespaces return [`Error::Unsupported`]. The default scans the
    /// range in batches and deletes key by key.
    fn delete_range(&mut self, ns: Ns, start: &[u8], end: &[u8]) -> Result<u64> {
        const BATCH: usize = 1024;
        let mut deleted = 0u64;
        let mut from = start.to_vec();
        loop {
            let mut keys: Vec<Vec<u8>> = Vec::new();
            self.range(
                ns,
                Bound::Included(&from),
                Bound::Excluded(end),
                Order::Forward,
                BATCH,
                &mut |k, _| {
                    keys.push(k.to_vec());
                    true
                },
            )?;
            for k in &keys {
                self.delete(ns, k)?;
            }
            deleted += keys.len() as u64;
            match keys.pop() {
                Some(last) if keys.len() + 1 == BATCH => {
                    from = last;
                    from.push(0);
                }
                _ => return Ok(deleted),
            }
        }
    }

    /// One bounded step of a walk over every entry of `ns` in the store's own order:
    /// visits up to `limit` entries after the resume token `from` (`None`: from the
    /// beginning) and returns the token to continue from, or `None` when the walk has
    /// passed every entry. Entries that exist throughout a walk are visited exactly
    /// once; entries written or deleted during it may or may not be. The adaptive store
    /// migrates a namespace with it in bounded steps. Tokens are opaque and only valid
    /// for the store that returned them.
    ///
    /// The default serves ordered namespaces by key (the token is the last key
    /// visited); unordered backends override it or return [`Error::Unsupported`].
    fn scan_step(
        &mut self,
        ns: Ns,
        from: Option<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        if !self.is_ordered(ns) {
            return Err(Error::Unsupported {
                store: self.name(),
                op: "scan_step",
                hint: "this namespace has no order and the store has no resumable walk",
            });
        }
        let mut last: Option<Vec<u8>> = None;
        let mut stopped = false;
        let start = from.map_or(Bound::Unbounded, Bound::Excluded);
        let n = self.range(ns, start, Bound::Unbounded, Order::Forward, limit, &mut |k, v| {
            last = Some(k.to_vec());
            stopped = !visit(k, v);
            !stopped
        })?;
        Ok(if n < limit && !stopped { None } else { last })
    }
}

/// Keys a batched convenience ([`StateStoreExt::multi_get_with`],
/// [`StateStoreExt::multi_rmw`]) hands to [`StateStore::apply_batch`] at a time, from a
/// buffer on the stack.
const EXT_BATCH: usize = 32;

/// Conveniences every [`StateStore`] has, built from its required methods (a blanket
/// implementation: a backend cannot and need not write them).
pub trait StateStoreExt: StateStore {
    /// Reads the value of `key`.
    fn get(&mut self, ns: Ns, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(ns, key, &mut out)?.then_some(out))
    }

    /// Reads several keys of one namespace (see [`multi_get_with`](Self::multi_get_with),
    /// which avoids the copies).
    fn multi_get(&mut self, ns: Ns, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        self.multi_get_with(ns, keys, &mut |_, v| out.push(v.map(<[u8]>::to_vec)))?;
        Ok(out)
    }

    /// Reads several keys of one namespace, calling `f(i, value)` for `keys[i]` in
    /// order with the value where the store holds it: a batch of `Get` operations
    /// ([`StateStore::apply_batch`]).
    fn multi_get_with(&mut self, ns: Ns, keys: &[&[u8]], f: &mut MultiGetFn<'_>) -> Result<()> {
        batched(self, ns, keys, BatchKind::Get, &mut |i, v, _| {
            f(i, v);
            Rmw::Keep
        })
    }

    /// Read-modify-write of several keys of one namespace, in order, with `f(i, old,
    /// out)` deciding for `keys[i]`: a batch of `Rmw` operations
    /// ([`StateStore::apply_batch`]). On an error the operations before the failing one
    /// have been applied.
    fn multi_rmw(&mut self, ns: Ns, keys: &[&[u8]], f: &mut MultiRmwFn<'_>) -> Result<()> {
        batched(self, ns, keys, BatchKind::Rmw, f)
    }

    /// Visits every key of `ns` that starts with `prefix`, in the store's own order (key
    /// order in ordered namespaces).
    fn scan_prefix(&mut self, ns: Ns, prefix: &[u8], visit: &mut Visitor<'_>) -> Result<()> {
        let end = cursor::prefix_end(prefix);
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        self.range(ns, Bound::Included(prefix), end, Order::Any, usize::MAX, visit).map(|_| ())
    }

    /// Visits the keys of `ns` within the bounds in increasing key order. Unordered
    /// namespaces return [`Error::Unsupported`].
    fn scan_range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        visit: &mut Visitor<'_>,
    ) -> Result<()> {
        self.range(ns, start, end, Order::Forward, usize::MAX, visit).map(|_| ())
    }

    /// Visits at most `limit` entries of `ns` within the bounds in key order in
    /// direction `dir`; returns how many it visited. The primitive under [`Cursor`].
    fn scan_ordered(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        dir: Direction,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.range(ns, start, end, dir.into(), limit, visit)
    }

    /// Sequence number of the checkpoint the store was recovered from or last wrote
    /// (0 for a fresh store).
    fn checkpoint_seq(&self) -> u64 {
        self.stats().checkpoint_seq
    }
}

impl<S: StateStore + ?Sized> StateStoreExt for S {}

/// `keys` of `ns`, each with operation `kind`, through `apply_batch` in slices of
/// [`EXT_BATCH`] (no allocation), `f` seeing each key's position in `keys`.
fn batched<S: StateStore + ?Sized>(
    s: &mut S,
    ns: Ns,
    keys: &[&[u8]],
    kind: BatchKind<'_>,
    f: &mut MultiRmwFn<'_>,
) -> Result<()> {
    let mut ops = [BatchOp { ns, key: &[], kind }; EXT_BATCH];
    for (c, chunk) in keys.chunks(EXT_BATCH).enumerate() {
        for (op, key) in ops.iter_mut().zip(chunk) {
            op.key = key;
        }
        let base = c * EXT_BATCH;
        s.apply_batch(&ops[..chunk.len()], &mut |i, old, out| f(base + i, old, out))?;
    }
    Ok(())
}

/// Options every store is opened with.
#[derive(Clone, Debug)]
#[must_use]
pub struct StoreOptions {
    /// Directory owning the store's files (created if missing).
    pub dir: PathBuf,
    /// Resident memory budget in bytes. Default: 256 MiB.
    pub memory_budget: u64,
    /// Namespace declarations; their order fixes the [`Ns`] handles.
    pub namespaces: Vec<NamespaceSpec>,
    /// Expected number of keys, a sizing hint (hashlog presizes its index for them, up to
    /// a quarter of the budget, so it does not double while the first keys arrive; other
    /// stores ignore it). Default: none.
    pub expected_keys: Option<u64>,
    /// Recover exactly this checkpoint instead of the newest one, discarding newer
    /// ones (it must be one the store still retains: the newest or the one before).
    /// Stores built of several stores (`adaptive`) use it to make their checkpoint
    /// atomic across them: their own manifest names each part's checkpoint. Default:
    /// none (the newest).
    pub recover_at: Option<u64>,
    /// Bypass the OS page cache for the store's data files (`O_DIRECT` in hashlog and
    /// appendlog; RocksDB's direct reads, flushes and compactions), so that reads of
    /// state outside the memory budget really reach the disk. Stores that cannot honour
    /// it (mem, timelog, adaptive) refuse to open with [`Error::Unsupported`]; a file
    /// system without `O_DIRECT` fails the open with [`Error::DirectIoUnsupported`].
    /// Default: false.
    pub direct_io: bool,
    /// The file system every file of the store goes through ([`io::Fs`]). Default:
    /// `None`, the real one ([`io::StdFs`]). Tests pass an [`io::CrashFs`] to build the
    /// file images a power loss would leave, or an [`io::FaultFs`] to inject I/O errors;
    /// a store's `open_with_fs` takes one explicitly instead. RocksDB does its own I/O
    /// and refuses to open with one ([`Error::Unsupported`]).
    pub fs: Option<std::sync::Arc<dyn io::Fs>>,
}

impl StoreOptions {
    /// Options for a store in `dir` with the default budget (256 MiB) and no namespaces.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        StoreOptions {
            dir: dir.as_ref().to_path_buf(),
            memory_budget: 256 << 20,
            namespaces: Vec::new(),
            expected_keys: None,
            recover_at: None,
            direct_io: false,
            fs: None,
        }
    }

    /// Sends every file of the store through `fs` (default: the real file system; see
    /// [`fs`](Self::fs)).
    pub fn fs(mut self, fs: std::sync::Arc<dyn io::Fs>) -> Self {
        self.fs = Some(fs);
        self
    }

    /// The file system the store's files go through: [`fs`](Self::fs), else the real one.
    pub(crate) fn file_system(&self) -> std::sync::Arc<dyn io::Fs> {
        self.fs.clone().unwrap_or_else(|| std::sync::Arc::new(io::StdFs))
    }

    /// Fails with [`Error::Unsupported`] if a file system was given to `store`, which
    /// does its own I/O.
    #[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
    pub(crate) fn refuse_fs(&self, store: &'static str) -> Result<()> {
        if self.fs.is_some() {
            return Err(Error::Unsupported {
                store,
                op: "the fs option",
                hint: "RocksDB does its own file I/O, outside Spillway's I/O seam; open it \
                       without StoreOptions::fs",
            });
        }
        Ok(())
    }

    /// Bypasses the OS page cache for the store's data files (default false; see
    /// [`direct_io`](Self::direct_io)).
    pub fn direct_io(mut self, on: bool) -> Self {
        self.direct_io = on;
        self
    }

    /// Fails with [`Error::Unsupported`] naming the option if direct I/O was asked of
    /// `store`, which does not implement it.
    pub(crate) fn refuse_direct_io(&self, store: &'static str) -> Result<()> {
        if self.direct_io {
            return Err(Error::Unsupported {
                store,
                op: "the direct_io option",
                hint: "only hashlog, appendlog and rocksdb read and write with direct I/O; open \
                       this store with direct_io(false)",
            });
        }
        Ok(())
    }

    /// Recovers checkpoint `seq` (0: none, an empty store) instead of the newest, and
    /// discards newer ones (default: the newest).
    pub fn recover_at(mut self, seq: u64) -> Self {
        self.recover_at = Some(seq);
        self
    }

    /// The checkpoint to recover among the `retained` ones (ascending): the newest, or
    /// exactly [`recover_at`](Self::recover_at) when set (an error naming the directory
    /// when that checkpoint is gone).
    pub(crate) fn checkpoint_to_recover(&self, retained: &[u64]) -> Result<Option<u64>> {
        match self.recover_at {
            None => Ok(retained.last().copied()),
            Some(0) => Ok(None),
            Some(seq) if retained.contains(&seq) => Ok(Some(seq)),
            Some(seq) => Err(Error::NotAStore {
                path: self.dir.clone(),
                reason: format!(
                    "checkpoint {seq} was asked for but the directory retains {retained:?}"
                ),
            }),
        }
    }

    /// Sets the memory budget in bytes (default 256 MiB).
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// Sets the expected number of keys (a sizing hint; default none).
    pub fn expected_keys(mut self, keys: u64) -> Self {
        self.expected_keys = Some(keys);
        self
    }

    /// Declares a namespace.
    pub fn namespace(mut self, spec: NamespaceSpec) -> Self {
        self.namespaces.push(spec);
        self
    }

    /// Checks the options a store is opened with, among them every namespace's and
    /// merge function's name: 1..=255 bytes without a control character (a newline, a
    /// tab, NUL, ...); any other character (spaces, `=`, `:`, `%`, non-ASCII) is
    /// allowed, and manifests record names unambiguously. The one exception is the
    /// suffix of appendlog's chunk namespaces ([`appendlog::chunk_namespace`]), which
    /// the hybrid log of an appendlog directory declares.
    pub(crate) fn validate(&self) -> Result<()> {
        for ns in &self.namespaces {
            let own = ns.name.strip_suffix(appendlog::CHUNK_NS_SUFFIX).unwrap_or(&ns.name);
            if let Some(c) = own.chars().find(|c| c.is_control()) {
                return Err(control_character(format!("namespace name {:?}", ns.name), c));
            }
            if let MergeOp::Function { name, .. } = &ns.merge {
                let what = format!("merge function name {name:?} of namespace {:?}", ns.name);
                if name.is_empty() || name.len() > 255 {
                    return Err(Error::InvalidOption {
                        option: "namespaces",
                        detail: format!("{what} must be 1..=255 bytes"),
                    });
                }
                if let Some(c) = name.chars().find(|c| c.is_control()) {
                    return Err(control_character(what, c));
                }
            }
        }
        if self.namespaces.is_empty() {
            return Err(Error::InvalidOption {
                option: "namespaces",
                detail: "declare at least one namespace".into(),
            });
        }
        if self.namespaces.len() > u16::MAX as usize {
            return Err(Error::InvalidOption {
                option: "namespaces",
                detail: format!("at most {} namespaces", u16::MAX),
            });
        }
        for (i, ns) in self.namespaces.iter().enumerate() {
            if ns.name.is_empty() || ns.name.len() > 255 {
                return Err(Error::InvalidOption {
                    option: "namespaces",
                    detail: format!("namespace name {:?} must be 1..=255 bytes", ns.name),
                });
            }
            if self.namespaces[..i].iter().any(|o| o.name == ns.name) {
                return Err(Error::InvalidOption {
                    option: "namespaces",
                    detail: format!("namespace {:?} is declared twice", ns.name),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn lookup(&self, name: &str) -> Result<Ns> {
        self.namespaces
            .iter()
            .position(|n| n.name == name)
            .map(|i| Ns(i as u16))
            .ok_or_else(|| Error::UnknownNamespace { name: name.to_string() })
    }
}

/// The backends by name, for tools that pick one at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreKind {
    /// [`MemStore`].
    Mem,
    /// [`HashLogStore`].
    HashLog,
    /// `RocksStore` (needs the `rocksdb` feature).
    Rocks,
    /// [`TimeLogStore`].
    TimeLog,
    /// [`AppendLogStore`].
    AppendLog,
    /// [`AdaptiveStore`]: a layout per namespace, chosen by hint and at run time.
    Adaptive,
    /// [`TieredStore`]: L1 in process over Redis over hashlog (default levels; other
    /// levels through [`StoreConfig::Tiered`]).
    Tiered,
}

impl StoreKind {
    /// All kinds this build knows, including ones whose feature is off.
    pub const ALL: [StoreKind; 7] = [
        StoreKind::HashLog,
        StoreKind::AppendLog,
        StoreKind::Mem,
        StoreKind::TimeLog,
        StoreKind::Adaptive,
        StoreKind::Tiered,
        StoreKind::Rocks,
    ];

    /// The name used on command lines.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Mem => "mem",
            StoreKind::HashLog => "hashlog",
            StoreKind::Rocks => "rocksdb",
            StoreKind::TimeLog => "timelog",
            StoreKind::AppendLog => "appendlog",
            StoreKind::Adaptive => "adaptive",
            StoreKind::Tiered => "tiered",
        }
    }

    /// Whether this build can open this kind.
    pub fn available(self) -> bool {
        self != StoreKind::Rocks || cfg!(feature = "rocksdb")
    }

    /// Opens (or recovers) a store of this kind with its default backend options
    /// ([`StoreConfig::from`] the kind).
    pub fn open(self, opts: StoreOptions) -> Result<Box<dyn StateStore>> {
        StoreConfig::from(self).open(opts)
    }
}

/// A backend and its own options: what a tool opens when it picks a store at run time.
/// What every backend takes (directory, budget, namespaces) is in [`StoreOptions`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreConfig {
    /// [`MemStore`].
    Mem,
    /// [`HashLogStore`]; `None`: sized from the memory budget
    /// ([`HashLogOptions::for_budget`]) and [`StoreOptions::expected_keys`].
    HashLog(Option<HashLogOptions>),
    /// [`AppendLogStore`]; `None`: its hybrid log sized as hashlog's is.
    AppendLog(Option<AppendLogOptions>),
    /// [`TimeLogStore`].
    TimeLog(TimeLogOptions),
    /// `RocksStore` (needs the `rocksdb` feature).
    Rocks,
    /// [`AdaptiveStore`].
    Adaptive(AdaptiveOptions),
    /// [`TieredStore`] with its levels.
    Tiered(TieredOptions),
}

impl From<StoreKind> for StoreConfig {
    /// The kind with its default options.
    fn from(kind: StoreKind) -> StoreConfig {
        match kind {
            StoreKind::Mem => StoreConfig::Mem,
            StoreKind::HashLog => StoreConfig::HashLog(None),
            StoreKind::AppendLog => StoreConfig::AppendLog(None),
            StoreKind::TimeLog => StoreConfig::TimeLog(TimeLogOptions::default()),
            StoreKind::Rocks => StoreConfig::Rocks,
            StoreKind::Adaptive => StoreConfig::Adaptive(AdaptiveOptions::default()),
            StoreKind::Tiered => StoreConfig::Tiered(TieredOptions::default()),
        }
    }
}

impl StoreConfig {
    /// The backend this opens.
    pub fn kind(&self) -> StoreKind {
        match self {
            StoreConfig::Mem => StoreKind::Mem,
            StoreConfig::HashLog(_) => StoreKind::HashLog,
            StoreConfig::AppendLog(_) => StoreKind::AppendLog,
            StoreConfig::TimeLog(_) => StoreKind::TimeLog,
            StoreConfig::Rocks => StoreKind::Rocks,
            StoreConfig::Adaptive(_) => StoreKind::Adaptive,
            StoreConfig::Tiered(_) => StoreKind::Tiered,
        }
    }

    /// Opens (or recovers) the store in `opts.dir`.
    pub fn open(self, opts: StoreOptions) -> Result<Box<dyn StateStore>> {
        // Hashlog's default sizing: a hint, not a demand: presize the index (64-byte
        // buckets of about 4 keys) to at most a quarter of the budget; it doubles from
        // there.
        let sized = |opts: &StoreOptions| {
            let h = HashLogOptions::for_budget(opts.memory_budget);
            match opts.expected_keys {
                Some(k) => h.expected_keys(k.min(opts.memory_budget / 64)),
                None => h,
            }
        };
        Ok(match self {
            StoreConfig::Mem => Box::new(MemStore::open(opts)?),
            StoreConfig::TimeLog(t) => Box::new(TimeLogStore::open(opts, t)?),
            StoreConfig::AppendLog(a) => {
                let a = a.unwrap_or_else(|| AppendLogOptions::default().hashlog(sized(&opts)));
                Box::new(AppendLogStore::open(opts, a)?)
            }
            StoreConfig::HashLog(h) => {
                let h = h.unwrap_or_else(|| sized(&opts));
                Box::new(HashLogStore::open(opts, h)?)
            }
            StoreConfig::Adaptive(a) => Box::new(AdaptiveStore::open(opts, a)?),
            StoreConfig::Tiered(t) => Box::new(TieredStore::open(opts, t)?),
            #[cfg(feature = "rocksdb")]
            StoreConfig::Rocks => Box::new(RocksStore::open(opts)?),
            #[cfg(not(feature = "rocksdb"))]
            StoreConfig::Rocks => {
                return Err(Error::Unsupported {
                    store: "rocksdb",
                    op: "open",
                    hint: "this build lacks the `rocksdb` cargo feature; rebuild with \
                           --features rocksdb",
                })
            }
        })
    }
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "mem" => Ok(StoreKind::Mem),
            "hashlog" => Ok(StoreKind::HashLog),
            "rocksdb" | "rocks" => Ok(StoreKind::Rocks),
            "timelog" => Ok(StoreKind::TimeLog),
            "appendlog" => Ok(StoreKind::AppendLog),
            "adaptive" => Ok(StoreKind::Adaptive),
            "tiered" => Ok(StoreKind::Tiered),
            other => Err(format!(
                "unknown store {other:?}; expected one of {}",
                StoreKind::ALL.map(StoreKind::name).join(", ")
            )),
        }
    }
}

/// Whether a range with these bounds can hold any key (BTreeMap::range panics on an
/// inverted range; stores answer such a range with nothing).
pub(crate) fn bounds_nonempty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s <= e,
        (Bound::Included(s), Bound::Excluded(e)) | (Bound::Excluded(s), Bound::Included(e)) => {
            s < e
        }
        (Bound::Excluded(s), Bound::Excluded(e)) => s < e,
        _ => true,
    }
}

/// The error for a name (`what`, naming it and its namespace) holding character `c`.
fn control_character(what: String, c: char) -> Error {
    Error::InvalidOption {
        option: "namespaces",
        detail: format!(
            "{what} contains the control character U+{:04X} ({c:?}); names may hold any \
             character but control characters",
            c as u32
        ),
    }
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

/// A bound on values tighter than a store's own, which a store built of several
/// stores (adaptive) sets on each of them so that they all accept the same values:
/// under a key of `klen` bytes a value holds at most `(room - klen) & !7` bytes (the
/// shape of a hashlog record's bound, `room` being a page less its overheads), and
/// never more than [`MAX_VALUE_LEN`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ValueCap {
    pub(crate) room: usize,
}

impl ValueCap {
    /// The largest value under a key of `klen` bytes.
    pub(crate) fn max(self, klen: usize) -> usize {
        (self.room.saturating_sub(klen) & !7).min(MAX_VALUE_LEN)
    }
}

pub(crate) fn check_value(len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(Error::ValueTooLarge { len, max });
    }
    Ok(())
}
