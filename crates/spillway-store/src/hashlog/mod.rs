//! HashLogStore: a FASTER-class hybrid-log store for point updates.
//!
//! # Where things are
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the store's state, the lookup/upsert/remove primitives, budget and value limits, appendlog's hooks |
//! | [`options`] | [`HashLogOptions`] and what a budget sizes |
//! | [`open`] | opening a directory: fresh, or a checkpoint recovered |
//! | [`recovery`] | the index brought to the checkpoint by replaying the log |
//! | [`ops`] | the [`StateStore`] contract: point operations, batches, scans, stats |
//! | [`scan`] | walks over the log (bounded scans, resumable steps) |
//! | [`compaction`] | marks after each write, incremental compaction, dead segments |
//! | [`checkpoint`] | writing a checkpoint and removing what no retained one needs |
//! | [`snapshot`] | the index snapshot's writer (whole or fuzzy) and reader |
//! | [`index`], [`log`], [`record`] | the hash index, the hybrid log, the record layout |
//!
//! # Design
//! - **Index** ([`index`]): an in-memory hash table from (namespace, key) hash to the
//!   log address of the key's newest record. It stores no keys: 8 bytes per entry in
//!   64-byte buckets; lookups confirm a tag match by comparing the key in the record.
//! - **Hybrid log** ([`log`]): records are appended to a log of fixed-size pages. The
//!   newest pages are in memory and *mutable*: an update whose new value fits the
//!   record's value capacity is written in place, with no allocation and no checksum
//!   work. Older in-memory pages are *read-only*: an update copies the record to the
//!   tail. Pages leaving the mutable region are written to segment files with one
//!   `pwrite` per page (no fsync per operation) and are dropped from memory once the
//!   memory budget needs their frame; reads of disk-resident records use `pread`.
//!   With [`StoreOptions::direct_io`] segment files are opened with `O_DIRECT`: page
//!   writes are already whole 4 KiB blocks from page-aligned frames, and a read fetches
//!   the aligned 4 KiB blocks holding its record or page (see [`log`]). The on-disk
//!   format is the same either way.
//! - **Lists** (namespaces with [`MergeOp::ListAppend`](crate::MergeOp)): an append to a
//!   record in the mutable region writes the element after the existing ones when the
//!   capacity allows; otherwise the list is copied to the tail with its capacity
//!   doubled, so appends cost amortised O(element) while the list stays in the mutable
//!   region. Once the list's record has left it (read-only or on disk), the next append
//!   reads the whole list (from disk: one `pread` of its size) and rewrites it at the
//!   tail: O(list length) for that append, then amortised O(1) again. Holistic window
//!   state with long lists belongs in a chunked append store.
//! - **Deletes** (`delete`, [`Rmw::Delete`], and appendlog's deletes of heads and
//!   chunks, which go through them) remove the index entry and append a *tombstone*:
//!   a record with the tombstone flag, the key and an empty value, which no index entry
//!   points at. Recovery replays the log past its index snapshot and needs it to delete
//!   the key again. Deleting an absent key appends nothing.
//! - **Compaction** is lookup-based: when superseded and deleted records exceed
//!   [`HashLogOptions::garbage_ratio`] of the log, the store walks the log from its
//!   beginning in steps of at most [`HashLogOptions::compaction_step`] bytes (one step
//!   per write operation, so no operation stalls for long), copies each record the
//!   index still points to onto the tail, and advances the log's beginning. Tombstones
//!   and superseded records have no index entry and are dropped. At the end
//!   of each pass, segment files wholly below the beginning are deleted unless a
//!   retained checkpoint still needs them (those go at the next checkpoint).
//! - **Checkpoints are incremental**: a checkpoint writes the pages changed since the
//!   previous one and a manifest naming the newest complete *index snapshot* and the
//!   log address recovery replays from; index snapshots are taken only when the log to
//!   replay has grown past [`HashLogOptions::index_snapshot_ratio`] of the index, and
//!   fuzzily, a few buckets per write operation. See the checkpoint protocol below.
//! - **Memory**: index bytes + in-memory pages + read buffers stay within the budget.
//!   The number of in-memory pages is `(budget - index - reserve) / page_size`; when the
//!   index grows, pages are evicted. A budget that cannot hold the index and two pages
//!   is refused with [`Error::BudgetTooSmall`].
//!
//! - **The hot path** (all state in memory): an operation costs a hash, one index bucket
//!   (a cache line) and the record (one or two lines): with millions of keys, two cache
//!   misses, one dependent on the other. The index is sized by the keys, not by the
//!   budget: it starts at 1 MiB at most (16384 buckets) and doubles, incrementally, as
//!   keys arrive (at 4 keys per bucket on average), so a small state's index stays in
//!   the CPU caches and a large one's is as small as its keys allow (16 index bytes per
//!   key); its arrays ask for transparent huge pages (`crate::hot`), so a random bucket
//!   costs no TLB miss.
//!   Keys of 8 to 16 bytes are compared with two word loads instead of a `memcmp` call.
//! - **Batches** ([`StateStore::prefetch`],
//!   `multi_get_with`, `multi_rmw`, `apply_batch`): the batch is hashed first and the
//!   buckets of up to 32 keys are prefetched, then their tag-matching entries are read
//!   and the in-memory records prefetched, then the operations run one by one exactly
//!   as single calls would. The misses of a batch overlap (memory-level parallelism)
//!   instead of forming one dependent chain per key; disk-resident records are not
//!   prefetched (a hint must not do I/O).
//! # FORMAT
//! All integers little-endian. A store directory holds `STORE`, `MANIFEST-<seq>`,
//! `index-<n>.snap` and `log-<segment>.seg` files.
//!
//! Log addresses are byte offsets in a logical log of pages of `2^page_bits` bytes
//! (default 4 MiB); page 0 is never used, so address 0 means "none". Segment file `s`
//! holds pages `s * 2^segment_page_bits ..` back to back.
//! ```text
//! page   : crc32c(bytes 4..used) u32 | magic "SWPG" u32 | page number u64 |
//!          used u32 | version u16 (2) | reserved u16 | reserved u64      (32 bytes)
//!          records, each 8-byte aligned, up to `used`
//! record : crc32c(bytes 4..24+key_len+value_len) u32 | namespace u16 | flags u8 |
//!          reserved u8 | key_len u32 | value_len u32 | value_capacity u32 |
//!          reserved u32 | key | value | spare capacity and padding to 8 bytes
//! flags  : bit 0 = tombstone (value_len = value_capacity = 0); other bits 0
//! ```
//! Page version 2 added the tombstone flag (version 1 pages hold none and read the
//! same); a reader of version 1 refuses version 2 pages with [`Error::NewerFormat`].
//! Records never span pages; a record is at most `page_size - 40` bytes (page header plus 8 bytes of slack, so no record ends exactly at a page boundary), which bounds
//! the value size ([`Error::ValueTooLarge`] names the limit). Pages are written once,
//! rounded up to 4 KiB, when they leave the mutable region or at a checkpoint.
//!
//! `index-<n>.snap` is a [block file](crate::blockfile) (magic `SWHLIDX\0`, version 1):
//! frame 0 = `b0 u32 | bits u32 | main buckets u64 | overflow buckets u64 | entries u64`,
//! then the non-empty buckets, up to 16384 per frame, each as `bucket number u64 |
//! 8 slots u64` in increasing bucket number (main buckets are numbered from 0, overflow
//! buckets follow them); absent buckets are empty. A sparse index costs only its
//! entries. `<n>` is the number of the checkpoint that wrote it whole, or one more than
//! the last checkpoint when a fuzzy snapshot started (so a new name never equals one a
//! retained manifest names). A fuzzy snapshot is the same format; frame 0 is rewritten
//! with the final counts before the trailer.
//!
//! The manifest (see [`crate::manifest`]; block-file version 2, so that version 1
//! readers, which would not replay the log, refuse it; 3 when a namespace line holds
//! an escaped name) adds `begin`, `tail`, `page_bits`, `segment_page_bits`,
//! `garbage` (garbage bytes at the checkpoint),
//! `keys` (live keys at the checkpoint), `index` (the snapshot file recovery loads, or
//! `none` for an empty index) and `index_tail` (the log address recovery replays
//! from: the snapshot's start, 0 with `none`). Version 1 manifests have no
//! `index_tail`: their snapshot is exact at `tail`.
//!
//! # Checkpoint protocol (incremental fold-over)
//! 1. If a fuzzy snapshot is under way, copy its next step of buckets.
//! 2. Seal the tail page if it holds records; write every page below the tail; make
//!    the whole log read-only, so no byte below the checkpoint's tail changes again.
//! 3. fsync every segment written since the last checkpoint.
//! 4. If a fuzzy snapshot has copied every bucket: write its final header and trailer,
//!    fsync, rename `index-<n>.snap.tmp` to `index-<n>.snap`, fsync the directory. It
//!    becomes the snapshot this and later manifests name, with `index_tail` = its start.
//! 5. If a snapshot is due (below) and the index is at most
//!    [`HashLogOptions::inline_snapshot_bytes`] (or the ratio is 0), write the whole
//!    index now as `index-<seq>.snap` (fsync, rename, fsync the directory), exact at
//!    the tail: `index_tail` = tail.
//! 6. Write `MANIFEST-<seq>.tmp`, fsync, rename, fsync the directory. The checkpoint
//!    exists from this rename on.
//! 7. If a snapshot is due and was not written in step 5, a fuzzy snapshot starts
//!    from the tail (after an index doubling under way has finished, if one is).
//! 8. Delete manifests older than the previous checkpoint, snapshots no retained
//!    manifest names (the one being written is kept), then segment files wholly below
//!    the `begin` of every retained checkpoint.
//!
//! A snapshot is *due* when no fuzzy snapshot is under way and the log pages written
//! since the newest complete snapshot started (what recovery would replay) exceed
//! [`HashLogOptions::index_snapshot_ratio`] times the index's bytes. So the bytes a
//! checkpoint writes are the pages changed since the previous one, plus a bounded step
//! of a snapshot, plus, once per snapshot, the fsync of what the snapshot steps wrote
//! and the kernel has not flushed yet (at most the index's non-empty buckets, 72
//! bytes each); snapshots write at most about `1 / ratio` index bytes per log byte.
//!
//! **Fuzzy snapshots** (FASTER's fuzzy index checkpoint): a snapshot records `T_s`, the
//! log tail when it starts, then each write operation and each checkpoint copies
//! [`HashLogOptions::index_snapshot_step`] buckets, in bucket-number order (main, then
//! overflow), into `index-<n>.snap.tmp`, skipping empty ones. While it runs no index
//! doubling starts, so bucket numbers stay put (one under way when it is due delays
//! its start). Each bucket's copy reflects some moment between `T_s` and the copy's
//! end; the copy ends once it has caught up with the overflow array, which only
//! grows. An overflow bucket created after its predecessor was copied is in the file
//! but no chain of the file reaches it.
//!
//! **The writer's pause.** A checkpoint that does not finish a snapshot costs the
//! fold-over write of the pages changed since the previous checkpoint (the partly
//! filled tail page rounded to 4 KiB), one fsync per segment written, at most one
//! snapshot step, and the manifest (write, two fsyncs, a rename). One that finishes a
//! snapshot adds that snapshot's fsync and rename; one that writes a due snapshot
//! whole adds at most `inline_snapshot_bytes` and an fsync. Write operations pay at
//! most one snapshot step each (plus the snapshot file's buffered writes, one per
//! `page_size / 4` bytes of snapshot), never an fsync.
//!
//! Choices, and why: a complete fuzzy snapshot is fsynced and renamed by the next
//! checkpoint, not by the write that copies its last bucket, so no write operation
//! ever waits for an fsync; "log to replay" counts log pages written (what recovery
//! reads), not the address span, because every checkpoint seals its tail page and
//! would otherwise add up to a page of address space per checkpoint; a due snapshot of
//! a small index is written whole, since a fuzzy one would save little and cost a
//! replay; recovery drops the entries below `begin` and those no chain reaches
//! *before* the replay, so candidates below `begin` are never read and the entry
//! count is exact before any doubling; and it checks that count against the
//! manifest's `keys`, so a disagreement between snapshot and log fails open instead of
//! returning a wrong index.
//!
//! Any I/O error poisons the store: it refuses further reads and writes until reopened
//! (after a failed page flush its frames no longer match the log's bounds).
//!
//! # Recovery and what it assumes of the disk
//! Opening loads the newest `MANIFEST-<seq>` and its index snapshot (or an empty
//! index for `none`), sets the log to `[begin, tail)` (the tail is a page boundary),
//! and rebuilds the index of the checkpoint:
//! 1. Drop the snapshot's entries that no chain reaches and those whose address is
//!    below `begin`; an entry at or past `tail` is [`Error::Corrupt`].
//! 2. Replay the records from `max(index_tail, begin)` to `tail` in log order: a
//!    record's key loses every entry whose record has the same namespace and key
//!    (candidates come from probing with the key's hash; their records are read to
//!    compare keys) and a value record then gets an entry at its address; a tombstone
//!    leaves none. Index doublings happen as inserts need them, at once.
//! 3. The number of entries must equal the manifest's `keys`, else [`Error::Corrupt`];
//!    `garbage` comes from the manifest.
//!
//! Then it deletes leftover `.tmp` files (a fuzzy snapshot under way is lost; the next
//! checkpoint starts another when one is due), snapshots no retained manifest names,
//! and segment files past the tail or below every retained checkpoint's `begin`.
//!
//! *Why the rebuilt index is the checkpoint's.* Write `T_c` for the checkpoint's tail
//! and `B` for its `begin`. (a) Every append for a key (a new value, a tombstone, a
//! compaction copy of its live record) is that key's newest record, and the index
//! points at the newest record if it is a value and has no entry for the key otherwise;
//! in-place updates change bytes but no address. So after replaying every record of a
//! key in `[R, T_c)`, `R = max(T_s, B)`, the key has exactly the entry the live index
//! had at `T_c`. (b) A key with no record in `[T_s, T_c)` did not change its entry
//! between `T_s` and `T_c`, so the snapshot's copy of it, taken in between, is right;
//! if it is live its record is at or above `B`, because compaction copies every live
//! record it passes, so step 1 keeps it. (c) A key with records in `[T_s, T_c)` but
//! none at or above `R` has `B > T_s`, no live record (it would be at or above `B`),
//! and only entries the snapshot copied before its last record, which lie below that
//! record and so below `B`: step 1 drops them. (d) A snapshot entry for a key with
//! records in `[R, T_c)` either lies below `B` (dropped in step 1) or points at a
//! record of the same key, which its replay removes or overwrites; entries in buckets
//! no chain of the file reaches were placed after `T_s`, for keys whose newest record
//! is replayed (or lies below `B`). Several entries for one key (deleted and inserted
//! again in another slot of its chain while the snapshot ran) are all found and
//! removed, which is why the replay does not stop at the first match. (e) The bytes
//! replay reads are immutable: pages below `T_c` were written by fold-overs and are
//! never written again, and retention keeps every segment in `[B, T_c)` of a retained
//! checkpoint; records the snapshot points at below `T_s` are at or above `B` after
//! step 1, so they are readable too. (f) Index doubling does not matter to replay:
//! entries hold hash tags and addresses, and a probe finds a key wherever the table's
//! size puts it; the snapshot itself was taken between doublings.
//!
//! Recovery assumes that fsync makes data durable, that rename within a directory is
//! atomic and durable after the directory fsync, and that bytes written once are never
//! changed by the disk except through detectable corruption. Bytes below the
//! checkpoint tail are immutable after step 2, so a torn write after the checkpoint can
//! only damage pages past its tail, which recovery ignores. A damaged manifest or
//! index snapshot makes open fail with [`Error::Corrupt`] naming the file and offset
//! (the previous checkpoint is kept on disk; move the damaged manifest aside to fall
//! back to it). So does a previous checkpoint's manifest that exists but cannot be
//! read (damaged, or an I/O error such as EIO): cleanup needs its `begin` and `index`
//! to know what that checkpoint uses, and deletes nothing without them (only a
//! manifest that is gone counts as absent). A damaged log page in the replayed range
//! fails open the same way, and any other damaged record or page is reported when
//! read. Data is never returned from bytes whose checksum does not match.
//!
//! Recovery costs loading the snapshot plus reading the replayed pages and one record
//! per replayed record whose key has an entry (to compare keys): about
//! `index_snapshot_ratio` times the index's bytes of log at most, plus what was written
//! while the newest snapshot ran.
//!
//! Beyond checksums, open validates what it loads before using it: the manifest's
//! geometry field by field, the snapshot's sizes against the budget before allocating,
//! every index entry's address against the log (below the tail, after page 0, outside
//! page headers; entries below `begin` are stale and dropped by step 1), and the
//! overflow links (in range, no overflow bucket linked twice, so no probe can loop;
//! buckets no chain reaches, which a fuzzy snapshot may hold, are emptied); errors name
//! the offset of the bad field or bucket. `tests/powerloss.rs` checks recovery against
//! power loss through [`CrashFs`](crate::io::CrashFs).

mod checkpoint;
mod compaction;
mod index;
mod log;
mod open;
mod ops;
mod options;
mod record;
mod recovery;
mod scan;
mod snapshot;

pub use self::options::HashLogOptions;

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use self::compaction::Compaction;
use self::index::{HashIndex, Slot, BUCKET_BYTES};
use self::log::Log;
use self::record::{
    rec_within, record_size, write_record, write_tombstone, Rec, PAGE_HDR, REC_HDR,
};
use self::snapshot::{read_index, LogRange, SnapshotWriter};
use crate::backend::StoreCore;
use crate::error::{Error, Result};
use crate::io::{join, Fs};
use crate::manifest::{self, Manifest};
use crate::{
    check_key, BatchKind, BatchOp, CheckpointInfo, MergeOp, MultiRmwFn, Ns, Order, Rmw, RmwFn,
    StateStore, StoreOptions, StoreStats, Visitor,
};

const FORMAT_VERSION: u32 = 1;
/// Version of hashlog manifests: 2 since incremental checkpoints (`index_tail`; an
/// `index` of `none`), which a version 1 reader would misread.
const MANIFEST_VERSION: u32 = 2;
const INDEX_MAGIC: [u8; 8] = *b"SWHLIDX\0";
const BUCKETS_PER_FRAME: usize = 16384;
/// Old index buckets moved per write while the index doubles (about 1-2 us of work).
const GROW_STEP_BUCKETS: usize = 8;
/// Pages of memory held back from the page budget for buffers that can each grow to a
/// page: the scan buffer, the compaction buffer, the value scratch buffer, the
/// disk-record buffer and the buffers of a fuzzy index snapshot.
const RESERVE_PAGES: u64 = 5;

/// The FASTER-class hybrid-log store. See the [module docs](self) for its design,
/// on-disk format and checkpoint protocol.
pub struct HashLogStore {
    opts: StoreOptions,
    hopts: HashLogOptions,
    fs: Arc<dyn Fs>,
    index: HashIndex,
    log: Log,
    merges: Vec<MergeOp>,
    garbage: u64,
    core: StoreCore,
    scratch: Vec<u8>,
    /// Bytes of a record [`prefetch_hashes`](Self::prefetch_hashes) fetches: the recent
    /// records' mean size.
    prefetch_span: usize,
    compaction: Option<Compaction>,
    scan_buf: Vec<u8>,
    /// The on-disk page `scan_buf` holds for [`walk_step`](Self::walk_step) (on-disk
    /// pages never change, so a walk in steps reads each of them once).
    scan_buf_page: Option<u64>,
    /// Lowest `begin` of the retained checkpoints (`u64::MAX` before the first).
    checkpoint_begin: u64,
    /// Segments below this one have been deleted.
    lowest_segment: u64,
    /// A bound on the values of the namespaces below the `u16` tighter than the page's
    /// ([`set_value_cap`](Self::set_value_cap)).
    value_cap: Option<(crate::ValueCap, u16)>,
    /// The fuzzy index snapshot being written, if any.
    snapshot: Option<SnapshotWriter>,
    /// The newest complete index snapshot (file name, log address recovery replays
    /// from), which the next manifest names; `None`: replay from the log's beginning.
    index_snap: Option<(String, u64)>,
    /// A snapshot is due but waits for an index doubling to finish.
    snapshot_wanted: bool,
    /// Log bytes a recovery would replay are estimated as `replay_carry +
    /// log.bytes_written - replay_base`: pages written since the newest complete
    /// snapshot started (recovery reads those pages), plus, until a snapshot taken
    /// since open completes, the log span the recovered checkpoint replayed.
    replay_carry: u64,
    replay_base: u64,
}

#[inline]
fn hash(ns: u16, key: &[u8]) -> u64 {
    xxh3_64_with_seed(key, u64::from(ns))
}

/// Operations a batch hashes and prefetches at a time: enough to keep the memory
/// system busy, few enough that the prefetched buckets and records (two lines each)
/// are still in L1/L2 when the batch reaches them.
const BATCH: usize = 32;

/// Key equality without a `memcmp` call for the common short keys (8 to 16 bytes:
/// two overlapping word compares).
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let w = |s: &[u8], o: usize| u64::from_ne_bytes(s[o..o + 8].try_into().expect("8"));
        return w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8);
    }
    a == b
}

impl HashLogStore {
    /// Recomputes how many pages fit beside the index; fails if fewer than two do.
    fn size_frames(&mut self) -> Result<()> {
        let page = self.log.page_size as u64;
        let budget = self.opts.memory_budget;
        let fixed = self.index.bytes() + RESERVE_PAGES * page;
        let frames = budget.saturating_sub(fixed) / page;
        if frames < 2 {
            return Err(Error::BudgetTooSmall {
                budget,
                needed: fixed + 2 * page,
                what: format!(
                    "the hash index ({} bytes for {} keys) plus {} log pages of {page} bytes",
                    self.index.bytes(),
                    self.index.count,
                    2 + RESERVE_PAGES
                ),
            });
        }
        self.log.max_frames = frames as usize;
        let m = ((frames as f64) * self.hopts.mutable_fraction) as usize;
        self.log.mutable_pages = m.clamp(1, frames as usize - 1);
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        self.core.writable()
    }

    #[inline(always)]
    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        self.core.poison_on(r)
    }

    fn ns_id(&self, ns: Ns) -> Result<u16> {
        if ns.index() >= self.merges.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        Ok(ns.0)
    }

    /// Largest value a record with a key of `klen` bytes can hold (bounded by the page
    /// size; stores built on hashlog check their writes against it).
    pub fn max_value(&self, klen: usize) -> usize {
        self.record_room().saturating_sub(klen) & !7
    }

    /// What a record holds besides its key, before 8-byte alignment: the page less
    /// its header, the record header and the slack.
    pub(crate) fn record_room(&self) -> usize {
        room_in_page(self.log.page_size)
    }

    /// The smallest memory budget [`set_memory_budget`](Self::set_memory_budget) accepts
    /// now: the index and the minimum of page frames.
    pub(crate) fn min_budget(&self) -> u64 {
        self.index.bytes() + (RESERVE_PAGES + 2) * self.log.page_size as u64
    }

    /// Changes the memory budget at run time (the adaptive store moves memory between
    /// its parts). A smaller one evicts the resident pages beyond it now (writing those
    /// not yet written); one below [`min_budget`](Self::min_budget) is refused with
    /// [`Error::BudgetTooSmall`] and changes nothing.
    pub(crate) fn set_memory_budget(&mut self, budget: u64) -> Result<()> {
        self.core.writable()?;
        let old = self.opts.memory_budget;
        self.opts.memory_budget = budget;
        if let Err(e) = self.size_frames() {
            // Refused before it changed anything.
            self.opts.memory_budget = old;
            return Err(e);
        }
        self.core.stats.memory_budget = budget;
        if budget >= old {
            // Growing: keep the spare frame (a new one costs its first-touch page faults,
            // ~5 ms for 4 MiB here; dropping it at every step of a growing budget put
            // that into every page the log began).
            return Ok(());
        }
        let r = self.log.shrink();
        self.poison(r)
    }

    /// Bounds the values of the first `namespaces` namespaces by `cap` too (the
    /// adaptive store's parts accept the same values; appendlog passes it on for the
    /// user's namespaces, not for its chunk namespaces).
    pub(crate) fn set_value_cap(&mut self, cap: crate::ValueCap, namespaces: usize) {
        self.value_cap = Some((cap, namespaces.min(u16::MAX as usize) as u16));
    }

    /// The largest value of namespace `nsid` under a key of `klen` bytes.
    fn limit(&self, nsid: u16, klen: usize) -> usize {
        let own = self.max_value(klen).min(crate::MAX_VALUE_LEN);
        match self.value_cap {
            Some((cap, below)) if nsid < below => own.min(cap.max(klen)),
            _ => own,
        }
    }

    fn check_sizes(&self, nsid: u16, key: &[u8], vlen: usize) -> Result<()> {
        check_key(key)?;
        crate::check_value(vlen, self.limit(nsid, key.len()))
    }

    /// Finds the record of (ns, key); on success the record is readable via `log.view`.
    #[inline]
    fn find(&mut self, ns: u16, key: &[u8], h: u64) -> Result<Option<(Slot, u64)>> {
        // Fast path: the home bucket's candidates, in memory. Anything else (a record
        // on disk, a chained bucket) takes the general walk below.
        let head = self.log.head();
        let home = self.index.home_candidates(h);
        let mut m = home.mask;
        while m != 0 {
            let (slot, addr) = home.candidate(m.trailing_zeros());
            if addr < head {
                return self.find_chain(ns, key, h);
            }
            let r = Rec(self.log.mem(addr));
            if r.ns() == ns && same_key(r.key(), key) {
                return Ok(Some((slot, addr)));
            }
            m &= m - 1;
        }
        if home.chained {
            return self.find_chain(ns, key, h);
        }
        Ok(None)
    }

    /// [`find`](Self::find) over the whole bucket chain, loading records from disk.
    #[inline(never)]
    fn find_chain(&mut self, ns: u16, key: &[u8], h: u64) -> Result<Option<(Slot, u64)>> {
        let mut p = self.index.probe(h);
        while let Some((slot, addr)) = self.index.next(&mut p) {
            self.log.load(addr)?;
            let r = self.log.view(addr);
            if r.ns() == ns && same_key(r.key(), key) {
                return Ok(Some((slot, addr)));
            }
        }
        Ok(None)
    }

    /// Starts loading the index buckets of `hashes`, then (once they arrive) the
    /// in-memory records their tag-matching entries point at: two rounds of
    /// independent cache misses for the whole batch instead of two dependent misses
    /// per key. Disk-resident records are left alone (a prefetch must not do I/O).
    fn prefetch_hashes(&self, hashes: &[u64]) {
        for &h in hashes {
            self.index.prefetch(h);
        }
        let head = self.log.head();
        for &h in hashes {
            let mut p = self.index.probe(h);
            while let Some((_, addr)) = self.index.next(&mut p) {
                if addr >= head && addr < self.log.tail {
                    let rec = self.log.mem(addr);
                    // Every cache line of a record of the usual size (the record's own
                    // size is in its header, which is what is being fetched): the key
                    // and a short value may lie in the next line, a long value in more.
                    let span = (REC_HDR + 16).max(self.prefetch_span).min(rec.len() - 1);
                    let mut off = 0;
                    while off <= span {
                        crate::hot::prefetch(&rec[off]);
                        off += 64;
                    }
                    crate::hot::prefetch(&rec[span]);
                }
            }
        }
    }

    /// Read-modify-write of one key whose hash is known (the single and the batched
    /// paths both end here).
    #[inline]
    fn rmw_hashed(&mut self, nsid: u16, key: &[u8], h: u64, f: &mut RmwFn<'_>) -> Result<()> {
        check_key(key)?;
        self.core.stats.rmws += 1;
        let max = self.limit(nsid, key.len());
        let r = (|| {
            let found = self.find(nsid, key, h)?;
            self.scratch.clear();
            let old = found.map(|(_, a)| self.log.view(a).value());
            match f(old, &mut self.scratch) {
                Rmw::Put => {
                    crate::check_value(self.scratch.len(), max)?;
                    let len = self.scratch.len();
                    self.upsert(nsid, key, h, found, ValueSrc::Scratch, len)?;
                }
                Rmw::Delete => self.remove_found(nsid, key, found)?,
                Rmw::Keep => return Ok(()),
            }
            self.maintain()
        })();
        self.poison(r)
    }

    /// Appends a record and returns its address.
    fn append(&mut self, ns: u16, key: &[u8], value: &[u8], vcap: usize) -> Result<u64> {
        let size = record_size(key.len(), vcap);
        // A moving average of the sizes appended (weight 1/16), capped at 1 KiB: how much
        // of a record `prefetch_hashes` fetches.
        self.prefetch_span = (self.prefetch_span * 15 + size.min(1024)) / 16;
        let a = self.log.alloc(size)?;
        write_record(self.log.mem_mut(a), ns, key, value, vcap);
        Ok(a)
    }

    /// Makes room in the index for one more key (hash `h`) before its record is
    /// appended, so a refusal leaves nothing behind: starts a doubling when one is due
    /// and both bucket arrays fit in the budget (evicting the pages that would not fit
    /// beside them during the move), and refuses if the key would need an overflow
    /// bucket the budget cannot hold. Returns the bytes the insert will add.
    fn reserve_index_entry(&mut self, h: u64) -> Result<u64> {
        let page = self.log.page_size as u64;
        let budget = self.opts.memory_budget;
        // No doubling starts under a fuzzy snapshot (its bucket numbers must stay put).
        if self.index.wants_grow() && self.snapshot.is_none() {
            let both = self.index.bytes() + self.index.grown_bytes();
            if both + (RESERVE_PAGES + 2) * page <= budget {
                self.log.max_frames = ((budget - both) / page - RESERVE_PAGES) as usize;
                self.log.shrink()?;
                self.index.start_grow();
                self.size_frames()?;
            }
        }
        let cost = self.index.insert_cost(h);
        let need = self.index.bytes() + cost + (RESERVE_PAGES + 2) * page;
        if cost > 0 && need > budget {
            return Err(Error::BudgetTooSmall {
                budget,
                needed: need,
                what: format!(
                    "the hash index for {} keys plus {} log pages",
                    self.index.count + 1,
                    RESERVE_PAGES + 2
                ),
            });
        }
        Ok(cost)
    }

    /// Writes `value` for a found-or-new key: in place when the record is mutable and
    /// the value fits, otherwise as a new record with capacity `vcap`.
    fn upsert(
        &mut self,
        ns: u16,
        key: &[u8],
        h: u64,
        found: Option<(Slot, u64)>,
        value_src: ValueSrc<'_>,
        vcap: usize,
    ) -> Result<()> {
        let value: &[u8] = match value_src {
            ValueSrc::Arg(v) => v,
            ValueSrc::Scratch => &[],
        };
        let vlen =
            if matches!(value_src, ValueSrc::Scratch) { self.scratch.len() } else { value.len() };
        if let Some((_, addr)) = found {
            if addr >= self.log.read_only {
                let rec = self.log.mem_mut(addr);
                let (klen, cap) = {
                    let r = Rec(rec);
                    (r.klen(), r.vcap())
                };
                if vlen <= cap {
                    let v = REC_HDR + klen;
                    match value_src {
                        ValueSrc::Arg(val) => rec[v..v + vlen].copy_from_slice(val),
                        ValueSrc::Scratch => rec[v..v + vlen].copy_from_slice(&self.scratch),
                    }
                    record::put_u32(rec, 12, vlen as u32);
                    self.core.stats.in_place_updates += 1;
                    return Ok(());
                }
            }
        }
        let old_size = found.map_or(0, |(_, a)| self.log.view(a).size());
        let index_cost = if found.is_none() { self.reserve_index_entry(h)? } else { 0 };
        let vcap = vcap.max(vlen);
        let a = match value_src {
            ValueSrc::Arg(val) => self.append(ns, key, val, vcap)?,
            ValueSrc::Scratch => {
                let scratch = std::mem::take(&mut self.scratch);
                let r = self.append(ns, key, &scratch, vcap);
                self.scratch = scratch;
                r?
            }
        };
        match found {
            Some((slot, _)) => {
                self.index.set(slot, a);
                self.garbage += old_size as u64;
            }
            None => {
                self.index.insert(h, a);
                if index_cost > 0 {
                    // The index gained an overflow bucket: give its memory back.
                    self.size_frames()?;
                    self.log.shrink()?;
                }
            }
        }
        Ok(())
    }

    /// Deletes a found key: drops its index entry and appends a tombstone, so that a
    /// recovery replaying the log past this point deletes the key too. The old record
    /// and the tombstone are both garbage from here on (no entry points at either).
    fn remove_found(&mut self, ns: u16, key: &[u8], found: Option<(Slot, u64)>) -> Result<()> {
        if let Some((slot, addr)) = found {
            self.garbage += self.log.view(addr).size() as u64;
            self.index.remove(slot);
            let size = record_size(key.len(), 0);
            let a = self.log.alloc(size)?;
            write_tombstone(self.log.mem_mut(a), ns, key);
            self.garbage += size as u64;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum ValueSrc<'a> {
    Arg(&'a [u8]),
    Scratch,
}

/// What a record on a page of `page` bytes holds besides its key, before 8-byte
/// alignment: the page less its header, the record header and the slack.
fn room_in_page(page: usize) -> usize {
    page - PAGE_HDR - REC_HDR - log::MAX_RECORD_SLACK
}

fn segment_bits(segment_bytes: u64, page_bits: u32) -> u32 {
    let pages = (segment_bytes >> page_bits).max(1);
    (63 - pages.leading_zeros()).min(20)
}

/// Crate-internal operations for layouts built on the hybrid log (`appendlog`).
impl HashLogStore {
    /// Like `put`, but a new record is given a value capacity of at least `capacity`
    /// bytes, so later appends ([`append_in_place`](Self::append_in_place)) fill it in
    /// place while it stays in the mutable region.
    pub(crate) fn put_with_capacity(
        &mut self,
        ns: Ns,
        key: &[u8],
        value: &[u8],
        capacity: usize,
    ) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_id(ns)?;
        self.check_sizes(ns, key, value.len().max(capacity))?;
        self.core.stats.puts += 1;
        let h = hash(ns, key);
        let r = (|| {
            let found = self.find(ns, key, h)?;
            self.upsert(ns, key, h, found, ValueSrc::Arg(value), capacity)?;
            self.maintain()
        })();
        self.poison(r)
    }

    /// Appends one framed element to the record of `key` in place if the record is in
    /// the mutable region and has spare capacity for it; returns whether it did. Never
    /// copies the record and never reads the disk: a record outside the mutable region
    /// (or without room) answers `false` and is left as it is.
    pub(crate) fn append_in_place(&mut self, ns: Ns, key: &[u8], elem: &[u8]) -> Result<bool> {
        self.check_writable()?;
        let nsid = self.ns_id(ns)?;
        let add = crate::list::framed_len(elem);
        let mut p = self.index.probe(hash(nsid, key));
        while let Some((_, addr)) = self.index.next(&mut p) {
            if addr < self.log.read_only {
                continue;
            }
            let rec = self.log.mem_mut(addr);
            let (klen, vlen, cap) = {
                let r = Rec(rec);
                if r.ns() != nsid || r.key() != key {
                    continue;
                }
                (r.klen(), r.vlen(), r.vcap())
            };
            if vlen + add > cap {
                return Ok(false);
            }
            crate::list::put(&mut rec[REC_HDR + klen + vlen..], elem);
            record::put_u32(rec, 12, (vlen + add) as u32);
            self.core.stats.merges += 1;
            self.core.stats.in_place_updates += 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// Appends one framed element to the list record of `key` (creating it): in place
    /// when it fits, otherwise by copying just this record, with the element, to the
    /// tail with value capacity `capacity` (the caller bounds its records' sizes; no
    /// doubling). Reads the record from disk if it is there.
    pub(crate) fn append_copy(
        &mut self,
        ns: Ns,
        key: &[u8],
        elem: &[u8],
        capacity: usize,
    ) -> Result<()> {
        self.check_writable()?;
        let nsid = self.ns_id(ns)?;
        check_key(key)?;
        self.core.stats.merges += 1;
        let h = hash(nsid, key);
        let max = self.limit(nsid, key.len());
        let r = (|| {
            let found = self.find(nsid, key, h)?;
            self.scratch.clear();
            if let Some((_, a)) = found {
                self.scratch.extend_from_slice(self.log.view(a).value());
            }
            crate::list::push(&mut self.scratch, elem);
            crate::check_value(self.scratch.len(), max)?;
            let vcap = capacity.max(self.scratch.len()).min(max);
            self.upsert(nsid, key, h, found, ValueSrc::Scratch, vcap)?;
            self.maintain()
        })();
        self.poison(r)
    }

    /// Calls `f` with the value of `key` where it lies (log page or disk buffer),
    /// without copying it; `None` if the key is absent.
    pub(crate) fn with_value<R>(
        &mut self,
        ns: Ns,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.core.readable()?;
        let ns = self.ns_id(ns)?;
        self.core.stats.gets += 1;
        let r = self.find(ns, key, hash(ns, key));
        Ok(self.poison(r)?.map(|(_, addr)| f(self.log.view(addr).value())))
    }

    /// Largest value a record with a key of `klen` bytes can hold (page-size bound).
    pub(crate) fn max_record_value(&self, klen: usize) -> usize {
        self.max_value(klen).min(crate::MAX_VALUE_LEN)
    }

    /// Whether an earlier failure poisoned the store.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.core.poisoned.is_some()
    }
}

impl HashLogStore {
    /// Bytes of superseded or deleted records still in the log.
    pub fn garbage_bytes(&self) -> u64 {
        self.garbage
    }

    /// Bytes between the log's beginning and its tail.
    pub fn log_bytes(&self) -> u64 {
        self.log.tail - self.log.begin
    }

    /// The store directory.
    pub fn dir(&self) -> &PathBuf {
        &self.opts.dir
    }

    /// Log segment files open now (at most 64, however long the log: the least
    /// recently used is closed and reopened on demand).
    pub fn open_segment_files(&self) -> usize {
        self.log.open_segments()
    }
}
