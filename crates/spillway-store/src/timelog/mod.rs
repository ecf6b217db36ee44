//! TimeLogStore: a time-ordered store for range-read state (interval-join buffers,
//! event history).
//!
//! Files of this module: `mod.rs` (the store and its `StateStore` operations),
//! [`options`] (tuning, where the time sits in a key), [`partition`], [`memtable`]
//! (and its checkpoint image), [`segment`] (file format, writer, reader, sparse index,
//! block read-ahead), [`merge`] (k-way merge), [`cache`] (block cache),
//! [`maintenance`] (flush, segment merges, expiry), [`checkpoint`] (checkpoint,
//! recovery, directory cleanup).
//!
//! # Design
//! - **Order and time.** Keys are ordered bytewise in every namespace; keys are usually
//!   `(key prefix, big-endian time)`. A record's *time* is read from its key
//!   ([`TimeLogOptions::time_suffix`], default: the last 8 bytes, big-endian; or
//!   [`TimeLogOptions::time_field`]), and the record lives in *partition*
//!   `time / partition_span`. The time is a function of the key, so a key always lives
//!   in the same partition: partitions never overlap on a key.
//! - **Partitions** ([`partition`]): each is a mutable in-memory memtable
//!   ([`memtable`], a sorted map where `None` is a tombstone) over a stack of sorted,
//!   immutable segment files ([`segment`]), newest on top. A read of a key goes to its
//!   one partition: memtable, then segments newest first.
//! - **Segments** hold ~4 KiB blocks of sorted records and a *sparse index* (first key
//!   and position of every block) that stays in memory, so a point read costs a binary
//!   search and one block read (`pread`).
//! - **Scans** ([`merge`]) are a k-way merge of every partition's memtable and
//!   segments (newest version of a key wins, tombstones hide), forward or reverse,
//!   streaming block by block: memory per scan is two blocks per segment touched, not
//!   the size of the range. Read-ahead: each `pread` of a scan fetches the block the
//!   scan needs and the next one in scan direction, which waits decoded until the scan
//!   reaches it ([`segment::SegIter`]); the reads are synchronous, so this saves one
//!   system call and seek per two blocks rather than overlapping I/O with work. Because
//!   the key order puts the prefix before the time, a prefix or range scan touches
//!   every partition whose key span overlaps the range (one block read per such
//!   segment to find out); a full-namespace time-ordered scan is what the layout makes
//!   cheap to expire, not what it makes cheap to read.
//! - **Writes** go to the memtable. `merge` and `rmw` are resolved at write time: the
//!   old value is read (memtable or one block per segment), the new one written. A
//!   delete writes a tombstone (or just drops the memtable entry when the partition
//!   has no segments). `delete_range` drops every partition whose whole key span lies
//!   inside the range and writes tombstones for the keys of the others, in batches.
//! - **Memory budget**: sparse indexes, memtables and a block cache ([`cache`]), in
//!   that order of priority. When the memtables would exceed their share
//!   ([`TimeLogOptions::memtable_fraction`] of the budget, less what the indexes use),
//!   the largest memtables are flushed into new segments until half the share is free
//!   (before the write is applied, so a failed flush leaves the write undone). The
//!   block cache of point reads gets what is left, up to
//!   [`TimeLogOptions::block_cache_fraction`]. Not counted: the transient buffers of a
//!   scan or merge in progress (two blocks per segment it reads) and values being
//!   returned. A partition with more
//!   than [`TimeLogOptions::max_segments`] segments has all of them merged into one;
//!   since a key lives in one partition and the memtable is newer than every segment,
//!   this full merge drops tombstones and superseded versions. A partition left empty
//!   is deleted. Writes fail with [`Error::BudgetTooSmall`] once the sparse indexes
//!   alone fill the budget (about 1% of the data with 4 KiB blocks and short keys).
//! - **Expiry** ([`TimeLogStore::expire_before`], or automatically with
//!   [`TimeLogOptions::retention`]): every partition whose whole time span lies below
//!   the bound is dropped, files and memtable, with no compaction pass. **This deviates
//!   from the store contract on purpose**: keys older than the bound disappear without
//!   a delete. It is opt-in: without a call or a retention, nothing expires.
//! - **Files** are opened once and kept open (one descriptor per live segment).
//!
//! # FORMAT
//! All integers little-endian. A store directory holds `STORE`, `MANIFEST-<seq>` and
//! `mem-<seq>.tlm` and `seg-<id>.tl` files (`seq` and `id` 16 decimal digits; segment
//! ids increase over the store's life).
//! ```text
//! segment : header | block* | index | footer
//! header  : magic "SWTLSEG\0" [8] | version u32 (1) | crc32c(magic, version) u32  (16 bytes)
//! block   : count u32 | record * count | crc32c(count, records) u32
//! record  : key_len u32 | value_len u32 | flags u8 (bit 0: tombstone, value empty) |
//!           key | value
//! index   : blocks u32 | (offset u64 | len u32 | first_key_len u32 | first_key) * blocks |
//!           last_key_len u32 | last_key
//! footer  : index_offset u64 | index_len u32 | crc32c(index) u32 | records u64 |
//!           crc32c(previous 24 bytes) u32 | reserved u32 (0) | magic "SWTLEND\0" [8]
//!                                                                           (40 bytes)
//! ```
//! Records in a segment are in strictly increasing key order, within and across
//! blocks; blocks are contiguous from offset 16 up to the index; a block is sealed
//! once it reaches the block size (default 4 KiB), so a block holds at least one
//! record and may be larger than the block size. Opening a segment checks the header,
//! footer and index checksums and that the index covers the data exactly; reading a
//! block checks the byte count and its checksum and that its records parse in order.
//! Any mismatch is [`Error::Corrupt`] naming the file and offset.
//!
//! `mem-<seq>.tlm` is a [block file](crate::blockfile) (magic `SWTLMEM\0`, version 2)
//! holding the memtables' entries as records `namespace u16 | key_len u32 |
//! value_len u32 | flags u8 (bit 0: tombstone) | key | value`, back to back in one
//! byte stream cut into frames of 1 MiB (the last one shorter): a record may span
//! frames, so an entry of any size the store accepts ([`MAX_VALUE_LEN`]) fits, though
//! a block-file frame holds at most 64 MiB. Version 1 images, where every record lies
//! within one frame, are still read; a version 1 reader refuses version 2 with
//! [`Error::NewerFormat`].
//!
//! The manifest (see [`crate::manifest`]) adds `memtables` (the image's file name),
//! `time_field` (`suffix:<len>` or
//! `at:<offset>:<len>`), `partition_span`, `next_segment` (the next unused segment
//! id), `max_time` (largest time written, or `none`) and `segments`: the live segments
//! as space-separated `<namespace index>:<partition>:<segment id>` triples.
//!
//! # Checkpoint protocol
//! 1. Segment files are written under their final name, without fsync, when they are
//!    created (by a flush or a merge): a segment no manifest names is garbage to
//!    recovery, so a torn one is harmless. A checkpoint fsyncs every live segment not
//!    yet synced; segments created and merged away between two checkpoints are never
//!    synced.
//! 2. The memtables are not flushed: their entries (tombstones included) are written
//!    to `mem-<seq>.tlm.tmp`, fsynced, renamed to `mem-<seq>.tlm`, and the directory
//!    fsynced (which also makes the new segments' directory entries durable). A
//!    checkpoint thus costs one fsync per segment written since the last one plus a
//!    fixed four, however many partitions have dirty memtables.
//! 3. Write `MANIFEST-<seq>.tmp`, fsync, rename, fsync the directory. The checkpoint
//!    exists from this rename on.
//! 4. Delete manifests and memtable images older than the previous checkpoint, and
//!    segment files named by neither this checkpoint nor the previous one. Between
//!    checkpoints, a segment made obsolete by a merge, an expiry or a `delete_range`
//!    is deleted at once when no checkpoint names it, else at the first checkpoint that
//!    no longer keeps it.
//!
//! Any I/O or corruption error poisons the store: it refuses further reads and writes
//! until reopened.
//!
//! # Recovery and what it assumes of the disk
//! Opening loads the newest manifest, opens its segments (verifying headers, footers
//! and indexes; the sparse indexes come back into memory), loads the memtable image
//! into the memtables, and deletes `.tmp` files, manifests and images older than the
//! previous checkpoint and every segment file named by neither of the two retained
//! checkpoints (segments written after the last checkpoint). The state is exactly the
//! checkpoint's. The previous checkpoint's manifest must read (it says which segments
//! to keep): one that exists but fails to read, damaged or through an I/O error, fails
//! the open naming it before anything is deleted; only a missing one counts as absent.
//! Layout parameters (time field, partition span) come from the manifest, so
//! reopening with other [`TimeLogOptions`] cannot misplace keys. It assumes that fsync
//! makes data durable, that rename within a directory is atomic and durable after the
//! directory fsync, and that bytes written are never changed except through
//! detectable corruption. Segment files never change after they are written, so a crash at any
//! point leaves the newest published checkpoint intact. A damaged manifest or segment
//! makes open (or the read that reaches the damaged block) fail with
//! [`Error::Corrupt`] naming the file; data is never returned from bytes whose
//! checksum does not match.

mod cache;
mod checkpoint;
mod maintenance;
mod memtable;
mod merge;
mod options;
mod partition;
mod segment;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use self::merge::{MergeIter, Source};
pub use self::options::TimeLogOptions;
use self::partition::Partition;
use crate::backend::StoreCore;
use crate::cursor::half_open;
use crate::error::{Error, Result};
use crate::io::Fs;
use crate::manifest;
use crate::{
    check_key, check_value, CheckpointInfo, Direction, MergeOp, Ns, Order, Rmw, RmwFn, StateStore,
    StoreOptions, StoreStats, Visitor, MAX_VALUE_LEN,
};

const FORMAT_VERSION: u32 = 1;
const STORE_NAME: &str = "timelog";
/// Keys tombstoned per scan batch of `delete_range`.
const DELETE_BATCH: usize = 1024;

/// The time-ordered store. See the [module docs](self).
pub struct TimeLogStore {
    opts: StoreOptions,
    topts: TimeLogOptions,
    fs: Arc<dyn Fs>,
    merges: Vec<MergeOp>,
    /// Per namespace: partitions by number.
    parts: Vec<BTreeMap<u64, Partition>>,
    mem_bytes: u64,
    index_bytes: u64,
    next_id: u64,
    max_time: Option<u64>,
    cache: cache::BlockCache,
    /// Segments written since the last checkpoint (no manifest names them).
    unpublished: HashSet<u64>,
    /// Segments the previous retained checkpoint names.
    prev_live: HashSet<u64>,
    core: StoreCore,
    /// A bound on values tighter than [`MAX_VALUE_LEN`] ([`Self::set_value_cap`]).
    value_cap: Option<crate::ValueCap>,
}

impl TimeLogStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one; its
    /// files go through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions, topts: TimeLogOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, topts, fs)
    }

    /// Like [`open`](Self::open), doing all file I/O through `fs` (the test seam).
    pub fn open_with_fs(
        opts: StoreOptions,
        topts: TimeLogOptions,
        fs: Arc<dyn Fs>,
    ) -> Result<Self> {
        opts.validate()?;
        opts.refuse_direct_io("timelog")?;
        topts.validate()?;
        let dir = opts.dir.clone();
        manifest::init_dir(&*fs, &dir, STORE_NAME, FORMAT_VERSION)?;
        let seqs = manifest::list_manifests(&*fs, &dir)?;
        let mut store = TimeLogStore {
            merges: opts.namespaces.iter().map(|n| n.merge.clone()).collect(),
            parts: opts.namespaces.iter().map(|_| BTreeMap::new()).collect(),
            core: StoreCore::new(opts.memory_budget),
            opts,
            topts,
            fs,
            mem_bytes: 0,
            index_bytes: 0,
            next_id: 1,
            max_time: None,
            cache: Default::default(),
            unpublished: HashSet::new(),
            prev_live: HashSet::new(),
            value_cap: None,
        };
        if let Some(seq) = store.opts.checkpoint_to_recover(&seqs)? {
            store.recover(seq, seqs.contains(&seq.wrapping_sub(1)))?;
        }
        store.clean_dir()?;
        // The recovered checkpoint is the previous one for the next checkpoint, which
        // must keep its segments (StoreOptions::recover_at may still ask for it).
        store.prev_live = store.live_ids();
        Ok(store)
    }

    fn check_writable(&self) -> Result<()> {
        self.core.writable()
    }

    /// The smallest memory budget [`set_memory_budget`](Self::set_memory_budget) accepts
    /// now: the sparse indexes and a memtable share that holds a large entry.
    pub(crate) fn min_budget(&self) -> u64 {
        self.index_bytes + (1 << 20)
    }

    /// Changes the memory budget at run time (the adaptive store moves memory between
    /// its parts). A smaller one flushes memtables and trims the block cache down to it
    /// now; one below [`min_budget`](Self::min_budget) is refused with
    /// [`Error::BudgetTooSmall`] and changes nothing.
    pub(crate) fn set_memory_budget(&mut self, budget: u64) -> Result<()> {
        self.check_writable()?;
        if budget < self.min_budget() {
            return Err(Error::BudgetTooSmall {
                budget,
                needed: self.min_budget(),
                what: "the sparse indexes of the timelog segments and a memtable".into(),
            });
        }
        self.opts.memory_budget = budget;
        self.core.stats.memory_budget = budget;
        let limit = self.memtable_limit();
        if self.mem_bytes > limit {
            let r = self.flush_down(limit / 2);
            self.poison(r)?;
        }
        let cap = self.cache_cap();
        self.cache.trim(cap);
        Ok(())
    }

    /// Bounds every value by `cap` too (the adaptive store's parts accept the same
    /// values).
    pub(crate) fn set_value_cap(&mut self, cap: crate::ValueCap) {
        self.value_cap = Some(cap);
    }

    /// The largest value under a key of `klen` bytes.
    fn max_value(&self, klen: usize) -> usize {
        self.value_cap.map_or(MAX_VALUE_LEN, |c| c.max(klen))
    }

    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        self.core.poison_on(r)
    }

    fn ns_ok(&self, ns: Ns) -> Result<usize> {
        if ns.index() >= self.parts.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        Ok(ns.index())
    }

    fn time_of(&self, key: &[u8]) -> u64 {
        self.topts.time.time_of(key)
    }

    fn partition_of(&self, key: &[u8]) -> u64 {
        self.time_of(key) / self.topts.span
    }

    /// The live value of `key` in namespace `ns`.
    fn lookup(&mut self, ns: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let pid = self.partition_of(key);
        let cap = self.cache_cap();
        let Some(part) = self.parts[ns].get(&pid) else { return Ok(None) };
        let mut reads = 0;
        let r = part.get(key, &mut self.cache, cap, &mut reads);
        self.core.stats.disk_reads += reads;
        Ok(r?.flatten())
    }

    /// Writes `value` (`None`: delete) for `key` into its partition's memtable, then
    /// keeps the memory budget and the retention.
    fn set_entry(&mut self, ns: usize, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        // Make room first, so that a flush that fails leaves this write unapplied.
        let cost = (key.len() + value.map_or(0, <[u8]>::len)) as u64 + memtable::ENTRY_OVERHEAD;
        let limit = self.memtable_limit();
        if self.mem_bytes + cost > limit {
            self.flush_down((limit / 2).min(limit.saturating_sub(cost)))?;
        }
        let pid = self.partition_of(key);
        if value.is_some() {
            let t = self.time_of(key);
            self.max_time = Some(self.max_time.map_or(t, |m| m.max(t)));
        }
        let part = self.parts[ns].entry(pid).or_default();
        if value.is_none() && part.segs.is_empty() {
            // No older version on disk: forgetting the entry is enough.
            if let Some((k, v)) = part.mem.map.remove_entry(key) {
                let freed = (k.len() + v.map_or(0, |v| v.len())) as u64 + memtable::ENTRY_OVERHEAD;
                part.mem.bytes -= freed;
                self.mem_bytes -= freed;
            }
            if part.is_empty() {
                self.parts[ns].remove(&pid);
            }
        } else {
            let delta = part.mem.set(key, value);
            self.mem_bytes = (self.mem_bytes as i64 + delta) as u64;
        }
        // An entry larger than the memtables' share goes to disk at once.
        let limit = self.memtable_limit();
        if self.mem_bytes > limit {
            self.flush_down(limit / 2)?;
        }
        let cap = self.cache_cap();
        self.cache.trim(cap);
        self.apply_retention()
    }

    /// Bytes the block cache may hold: what the indexes and memtables leave of the
    /// budget, up to its share.
    fn cache_cap(&self) -> u64 {
        let budget = self.opts.memory_budget;
        let share = (budget as f64 * self.topts.cache_fraction) as u64;
        share.min(budget.saturating_sub(self.index_bytes + self.mem_bytes))
    }

    /// Bytes the memtables may hold before one is flushed.
    fn memtable_limit(&self) -> u64 {
        let budget = self.opts.memory_budget;
        let share = (budget as f64 * self.topts.memtable_fraction) as u64;
        share.min(budget.saturating_sub(self.index_bytes))
    }

    fn check_budget(&self) -> Result<()> {
        if self.index_bytes >= self.opts.memory_budget {
            return Err(Error::BudgetTooSmall {
                budget: self.opts.memory_budget,
                needed: self.index_bytes,
                what: "the sparse indexes of the timelog segments (expire old partitions or \
                       use larger blocks)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Partitions (over all namespaces) currently held.
    pub fn partitions(&self) -> usize {
        self.parts.iter().map(BTreeMap::len).sum()
    }

    /// Segment files currently live.
    pub fn segments(&self) -> usize {
        self.parts.iter().flat_map(|p| p.values()).map(|p| p.segs.len()).sum()
    }

    /// The store directory.
    pub fn dir(&self) -> &PathBuf {
        &self.opts.dir
    }

    /// The merged scan under every read of a range: visits live entries of `ns` in
    /// `lo..hi` (half-open) in one direction, at most `limit`.
    fn scan(
        &mut self,
        ns: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        reverse: bool,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        if limit == 0 || lo.zip(hi).is_some_and(|(l, h)| l >= h) {
            return Ok(0);
        }
        let mut sources: Vec<(u64, Source<'_>)> = Vec::new();
        for part in self.parts[ns].values() {
            part.sources(lo, hi, reverse, true, &mut sources);
        }
        let mut n = 0;
        let mut reads = 0;
        let r = (|| {
            let mut m = MergeIter::new(sources, reverse)?;
            let r = (|| {
                while n < limit {
                    let Some((k, v)) = m.next_live()? else { break };
                    n += 1;
                    if !visit(&k, &v) {
                        break;
                    }
                }
                Ok(())
            })();
            reads = m.reads();
            r
        })();
        self.core.stats.disk_reads += reads;
        r.map(|()| n)
    }
}

impl StateStore for TimeLogStore {
    fn name(&self) -> &'static str {
        STORE_NAME
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.core.readable()?;
        let ns = self.ns_ok(ns)?;
        self.core.stats.gets += 1;
        out.clear();
        let r = self.lookup(ns, key);
        match self.poison(r)? {
            Some(v) => {
                *out = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_ok(ns)?;
        check_key(key)?;
        check_value(value.len(), self.max_value(key.len()))?;
        self.check_budget()?;
        self.core.stats.puts += 1;
        let r = self.set_entry(ns, key, Some(value));
        self.poison(r)
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_ok(ns)?;
        check_key(key)?;
        self.check_budget()?;
        self.core.stats.merges += 1;
        let max = self.max_value(key.len());
        let r = (|| {
            let old = self.lookup(ns, key)?;
            let new = match &self.merges[ns] {
                MergeOp::ListAppend => {
                    let len = old.as_ref().map_or(0, Vec::len) + crate::list::framed_len(operand);
                    check_value(len, max)?;
                    let mut v = old.unwrap_or_default();
                    crate::list::push(&mut v, operand);
                    v
                }
                op => {
                    let mut v = Vec::new();
                    op.apply(old.as_deref(), operand, &mut v);
                    check_value(v.len(), max)?;
                    v
                }
            };
            self.set_entry(ns, key, Some(&new))
        })();
        self.poison(r)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_ok(ns)?;
        self.core.stats.deletes += 1;
        let r = self.set_entry(ns, key, None);
        self.poison(r)
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_ok(ns)?;
        check_key(key)?;
        self.check_budget()?;
        self.core.stats.rmws += 1;
        let max = self.max_value(key.len());
        let r = (|| {
            let old = self.lookup(ns, key)?;
            let mut out = Vec::new();
            match f(old.as_deref(), &mut out) {
                Rmw::Put => {
                    check_value(out.len(), max)?;
                    self.set_entry(ns, key, Some(&out))
                }
                Rmw::Delete if old.is_some() => self.set_entry(ns, key, None),
                Rmw::Delete | Rmw::Keep => Ok(()),
            }
        })();
        self.poison(r)
    }

    fn is_ordered(&self, _: Ns) -> bool {
        true
    }

    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.core.readable()?;
        let ns = self.ns_ok(ns)?;
        self.core.stats.scans += 1;
        let (lo, hi) = half_open(start, end);
        let reverse = order.direction() == Direction::Reverse;
        let r = self.scan(ns, lo.as_deref(), hi.as_deref(), reverse, limit, visit);
        self.poison(r)
    }

    fn delete_range(&mut self, ns: Ns, start: &[u8], end: &[u8]) -> Result<u64> {
        self.check_writable()?;
        let ns = self.ns_ok(ns)?;
        if start >= end {
            return Ok(0);
        }
        let r = (|| {
            let mut deleted = 0u64;
            // Whole partitions inside the range go at once (their live keys counted).
            let inside: Vec<u64> = self.parts[ns]
                .iter()
                .filter(|(_, p)| {
                    p.key_span().is_some_and(|(a, b)| a.as_slice() >= start && b.as_slice() < end)
                })
                .map(|(pid, _)| *pid)
                .collect();
            for pid in inside {
                let part = &self.parts[ns][&pid];
                let mut sources = Vec::new();
                part.sources(None, None, false, true, &mut sources);
                let mut m = MergeIter::new(sources, false)?;
                while m.next_live()?.is_some() {
                    deleted += 1;
                }
                let reads = m.reads();
                drop(m);
                self.core.stats.disk_reads += reads;
                self.drop_partition(ns, pid)?;
            }
            // Tombstones for the keys of the other partitions, a batch at a time.
            let mut from = start.to_vec();
            loop {
                let mut keys: Vec<Vec<u8>> = Vec::new();
                self.scan(ns, Some(&from), Some(end), false, DELETE_BATCH, &mut |k, _| {
                    keys.push(k.to_vec());
                    true
                })?;
                for k in &keys {
                    self.set_entry(ns, k, None)?;
                }
                deleted += keys.len() as u64;
                match keys.pop() {
                    Some(last) if keys.len() + 1 == DELETE_BATCH => {
                        from = crate::cursor::successor(&last);
                    }
                    _ => return Ok(deleted),
                }
            }
        })();
        if let Ok(n) = &r {
            self.core.stats.deletes += n;
        }
        self.poison(r)
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        crate::backend::checkpoint(self, |s| &mut s.core, TimeLogStore::write_checkpoint)
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.core.stats();
        s.index_bytes = self.index_bytes;
        s.bytes_in_memory = self.mem_bytes + self.index_bytes + self.cache.bytes();
        s.bytes_on_disk = crate::io::dir_bytes(&self.opts.dir);
        s.live_keys = None;
        s
    }
}
