//! RocksStore: the RocksDB baseline backend (cargo feature `rocksdb`), configured the
//! way Flink's `EmbeddedRocksDBStateBackend` configures RocksDB, so that benchmarks
//! compare the other stores against the engine stream processors actually ship.
//!
//! The store owns one RocksDB instance in `<dir>/db/` and the checkpoints beside it.
//! Every namespace is a column family of the same name (plus RocksDB's `default`
//! family, which holds nothing unless a namespace is called `default`).
//!
//! ## Configuration (and why)
//! - **WAL disabled** on every write, as in Flink: durability comes only from
//!   checkpoints, so the write-ahead log would be pure overhead.
//! - **Merge operators** per column family: list namespaces get an associative
//!   byte-concatenation operator (list elements are framed, see [`crate::list`], so an
//!   append is a concatenation; this is Flink's string-append operator with an empty
//!   delimiter); function namespaces get a full-merge operator that folds the user
//!   function over the operands in order (no partial merge, since the function need not
//!   be associative: RocksDB then keeps the operands until it meets a base value).
//! - **Memory** (Flink's "managed memory" split): one LRU block cache of 2/3 of the
//!   budget shared by all column families, holding data, index and filter blocks;
//!   memtables of all families limited to 1/3 of the budget together
//!   (`db_write_buffer_size`, which RocksDB enforces with a write-buffer manager; the
//!   0.20 crate exposes no separate `WriteBufferManager`), each family's
//!   `write_buffer_size` being that third divided by the number of families, bounded to
//!   64 KiB..=64 MiB. Bloom filters of 10 bits per key. Index and filter blocks are
//!   cached, partitioned, with their top level pinned (Flink's
//!   `partitioned-index-filters`, its advice for state larger than memory). Two
//!   background jobs.
//! - **Direct I/O** when [`StoreOptions::direct_io`] is set: `use_direct_reads` and
//!   `use_direct_io_for_flush_and_compaction`, so that block-cache misses reach the disk
//!   rather than the OS page cache.
//! - Merges are blind writes, the point of RocksDB's merge: the length a list reaches is
//!   not checked against [`MAX_VALUE_LEN`] when the operand is written (operands are).
//!
//! ## FORMAT
//! ```text
//! <dir>/STORE                     marker, store=rocksdb, format version 1 (crate::manifest)
//! <dir>/db/                       the live RocksDB instance (garbage after a crash)
//! <dir>/ckpt-<seq:016>/           a RocksDB checkpoint (SSTs hard-linked where possible)
//! <dir>/MANIFEST-<seq:016>        publishes checkpoint <seq>: `store=rocksdb`,
//!                                 `checkpoint=ckpt-<seq:016>`, one `ns=` line per namespace
//! ```
//! RocksDB owns the internals of `db/` and of every `ckpt-*` directory. Checkpoint
//! protocol: flush every column family; let RocksDB write a checkpoint into
//! `ckpt-<seq>.tmp/`; rename it to `ckpt-<seq>/` and fsync `<dir>`; publish
//! `MANIFEST-<seq>` (temporary name, fsync, rename, fsync). The manifest is the commit
//! point: a checkpoint directory no manifest names does not exist. The last two
//! checkpoints are kept; older manifests are deleted before their directories.
//!
//! ## Recovery
//! Opening the directory validates the newest manifest (store name, namespaces and
//! merge tags must equal the declaration), deletes `db/` and rebuilds it from that
//! manifest's checkpoint (SST files, which RocksDB never modifies, are hard-linked;
//! every other file is copied, so the checkpoint stays intact). Without a manifest
//! `db/` is deleted and the store starts empty. The state after open is therefore
//! exactly the last completed checkpoint: writes after it are lost, as in every store.
//! Leftover `*.tmp` entries, manifests older than the two retained ones and checkpoint
//! directories no retained manifest names are removed.
//!
//! RocksDB does its own file I/O, so this store has no [`Fs`] test seam;
//! like the other stores it assumes a single instance per directory.

use std::collections::HashSet;
use std::ops::Bound;
use std::path::Path;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, ErrorKind,
    MergeOperands, Options, ReadOptions, WriteOptions, DB,
};

use crate::backend::StoreCore;
use crate::cursor::half_open;
use crate::error::{Error, Result};
use crate::io::{join, Fs, StdFs};
use crate::manifest::{self, Manifest};
use crate::{
    check_key, check_value, BatchKind, BatchOp, CheckpointInfo, Direction, MergeOp, MultiRmwFn, Ns,
    Order, Rmw, RmwFn, StateStore, StoreOptions, StoreStats, Visitor, MAX_VALUE_LEN,
};

const STORE_NAME: &str = "rocksdb";
const ENGINE: &str = "rocksdb";
const FORMAT_VERSION: u32 = 1;
const DB_DIR: &str = "db";
const DEFAULT_CF: &str = "default";
/// Smallest memory budget the store accepts: RocksDB needs room for a block cache and
/// at least one 64 KiB memtable per column family.
pub const MIN_BUDGET: u64 = 1 << 20;
const MIN_WRITE_BUFFER: u64 = 64 << 10;
const MAX_WRITE_BUFFER: u64 = 64 << 20;
const BLOOM_BITS_PER_KEY: f64 = 10.0;
const BACKGROUND_JOBS: i32 = 2;

/// The RocksDB-backed store. See the [module docs](self).
pub struct RocksStore {
    db: DB,
    cache: Cache,
    cf_names: Vec<String>,
    write_opts: WriteOptions,
    read_opts: ReadOptions,
    opts: StoreOptions,
    core: StoreCore,
    scratch: Vec<u8>,
}

/// Why an operation failed: a RocksDB error from a read or a write, or a store error.
enum Fail {
    Read(rocksdb::Error),
    Write(rocksdb::Error),
    Store(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Store(e)
    }
}

fn backend(e: rocksdb::Error) -> Error {
    Error::Backend { engine: ENGINE, message: e.into_string() }
}

fn ckpt_name(seq: u64) -> String {
    format!("ckpt-{seq:016}")
}

/// Full and partial merge of list namespaces: byte concatenation of framed elements.
fn concat_merge(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let len = existing.map_or(0, <[u8]>::len) + operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    if let Some(v) = existing {
        out.extend_from_slice(v);
    }
    for op in operands.iter() {
        out.extend_from_slice(op);
    }
    Some(out)
}

fn no_partial_merge(
    _key: &[u8],
    _existing: Option<&[u8]>,
    _operands: &MergeOperands,
) -> Option<Vec<u8>> {
    None
}

/// Options of one column family: merge operator, shared block cache, bloom filter and
/// its share of the write buffers.
fn cf_options(merge: Option<&MergeOp>, cache: &Cache, write_buffer: usize) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
    // Flink's managed-memory setup with `state.backend.rocksdb.memory.partitioned-index-
    // filters: true`, its recommendation for state larger than memory: index and filter
    // blocks live in the block cache, partitioned, with only the small top level
    // pinned. Without partitioning, a large SST's multi-megabyte filter block is
    // evicted by data blocks and re-read whole on lookups (measured: about 1.5k ops/s
    // on `bench store --workload readwrite`).
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_pin_top_level_index_and_filter(true);
    let mut o = Options::default();
    o.set_block_based_table_factory(&table);
    o.set_write_buffer_size(write_buffer);
    match merge {
        Some(MergeOp::ListAppend) => {
            o.set_merge_operator_associative("spillway.list_append", concat_merge)
        }
        Some(MergeOp::Function { name, f }) => {
            let f = f.clone();
            let full = move |_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands| {
                let mut acc = Vec::new();
                let mut next = Vec::new();
                let mut have = existing.is_some();
                if let Some(v) = existing {
                    acc.extend_from_slice(v);
                }
                for op in operands.iter() {
                    next.clear();
                    f(have.then_some(&acc[..]), op, &mut next);
                    std::mem::swap(&mut acc, &mut next);
                    have = true;
                }
                Some(acc)
            };
            o.set_merge_operator(&format!("spillway.fn:{name}"), full, no_partial_merge);
        }
        None => {}
    }
    o
}

/// Removes a directory tree (or a file) at `path`; absent is fine.
fn remove_any(path: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

/// Rebuilds the live database directory `dst` from checkpoint directory `src`.
fn restore_checkpoint(manifest_path: &Path, src: &Path, dst: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(src) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corrupt(
                manifest_path,
                0,
                format!(
                    "the manifest names checkpoint directory {} which is missing",
                    src.display()
                ),
            ))
        }
        Err(e) => return Err(Error::io("list checkpoint directory", src, e)),
    };
    std::fs::create_dir_all(dst).map_err(|e| Error::io("create database directory", dst, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list checkpoint directory", src, e))?;
        let from = entry.path();
        let kind = entry.file_type().map_err(|e| Error::io("stat checkpoint file", &from, e))?;
        if !kind.is_file() {
            return Err(Error::corrupt(&from, 0, "a checkpoint directory holds only files"));
        }
        let to = dst.join(entry.file_name());
        // SST files are immutable: share them. Everything else (MANIFEST, CURRENT,
        // OPTIONS, WAL) is copied so RocksDB can never change the checkpoint's copy.
        let linked =
            from.extension().is_some_and(|e| e == "sst") && std::fs::hard_link(&from, &to).is_ok();
        if !linked {
            std::fs::copy(&from, &to).map_err(|e| Error::io("copy checkpoint file", &from, e))?;
        }
    }
    Ok(())
}

impl RocksStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one.
    /// Fails with [`Error::BudgetTooSmall`] below [`MIN_BUDGET`].
    pub fn open(opts: StoreOptions) -> Result<Self> {
        opts.validate()?;
        opts.refuse_fs(STORE_NAME)?;
        if opts.memory_budget < MIN_BUDGET {
            return Err(Error::BudgetTooSmall {
                budget: opts.memory_budget,
                needed: MIN_BUDGET,
                what: "RocksDB's block cache and write buffers".into(),
            });
        }
        let fs = StdFs;
        let dir = opts.dir.clone();
        manifest::init_dir(&fs, &dir, STORE_NAME, FORMAT_VERSION)?;
        let newest = opts.checkpoint_to_recover(&manifest::list_manifests(&fs, &dir)?)?;
        let db_path = join(&dir, DB_DIR);
        let mut keep = HashSet::new();
        let seq = match newest {
            None => {
                remove_any(&db_path)?;
                0
            }
            Some(seq) => {
                let mpath = join(&dir, &manifest::manifest_name(seq));
                let m = manifest::read_manifest(&fs, &dir, seq)?;
                if m.get_str(&mpath, "store")? != STORE_NAME {
                    return Err(Error::NotAStore {
                        path: mpath,
                        reason: "manifest of another store".into(),
                    });
                }
                m.check_namespaces(&opts)?;
                let ckpt = m.get_str(&mpath, "checkpoint")?;
                if !ckpt.starts_with("ckpt-") || ckpt.contains('/') || ckpt.ends_with(".tmp") {
                    return Err(Error::corrupt(&mpath, 0, format!("bad checkpoint name {ckpt:?}")));
                }
                remove_any(&db_path)?;
                restore_checkpoint(&mpath, &join(&dir, ckpt), &db_path)?;
                keep.insert(ckpt.to_string());
                seq
            }
        };
        Self::clean_dir(&fs, &dir, seq, keep)?;

        let budget = opts.memory_budget;
        let cache = Cache::new_lru_cache((budget / 3 * 2) as usize).map_err(backend)?;
        let write_total = budget / 3;
        let n_cfs = opts.namespaces.len() as u64;
        let write_buffer = (write_total / n_cfs).clamp(MIN_WRITE_BUFFER, MAX_WRITE_BUFFER) as usize;
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(BACKGROUND_JOBS);
        db_opts.set_db_write_buffer_size(write_total as usize);
        db_opts.set_stats_dump_period_sec(0);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_max_log_file_size(25 << 20);
        if opts.direct_io {
            // Bypass the OS page cache: reads of SST blocks, flushes and compactions.
            db_opts.set_use_direct_reads(true);
            db_opts.set_use_direct_io_for_flush_and_compaction(true);
        }
        let mut cfs: Vec<ColumnFamilyDescriptor> = opts
            .namespaces
            .iter()
            .map(|n| {
                ColumnFamilyDescriptor::new(
                    &n.name,
                    cf_options(Some(&n.merge), &cache, write_buffer),
                )
            })
            .collect();
        if !opts.namespaces.iter().any(|n| n.name == DEFAULT_CF) {
            cfs.push(ColumnFamilyDescriptor::new(
                DEFAULT_CF,
                cf_options(None, &cache, MIN_WRITE_BUFFER as usize),
            ));
        }
        let db = DB::open_cf_descriptors(&db_opts, &db_path, cfs).map_err(backend)?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(true);
        Ok(RocksStore {
            db,
            cache,
            cf_names: opts.namespaces.iter().map(|n| n.name.clone()).collect(),
            write_opts,
            read_opts: ReadOptions::default(),
            core: StoreCore { seq, ..StoreCore::new(budget) },
            opts,
            scratch: Vec::new(),
        })
    }

    /// Removes `*.tmp` leftovers, manifests older than the two retained ones and
    /// checkpoint directories no retained manifest names.
    fn clean_dir(fs: &dyn Fs, dir: &Path, seq: u64, mut keep: HashSet<String>) -> Result<()> {
        let retained = |s: u64| manifest::is_retained(s, seq);
        for s in manifest::list_manifests(fs, dir)? {
            if retained(s) && s != seq {
                keep.insert(ckpt_name(s));
                if let Ok(m) = manifest::read_manifest(fs, dir, s) {
                    if let Some(c) = m.fields.get("checkpoint") {
                        keep.insert(c.clone());
                    }
                }
            }
        }
        for name in fs.list_dir(dir).map_err(|e| Error::io("list directory", dir, e))? {
            let remove = if name.ends_with(".tmp") {
                true
            } else if let Some(s) = name.strip_prefix("MANIFEST-") {
                s.parse::<u64>().is_ok_and(|s| !retained(s))
            } else {
                name.starts_with("ckpt-") && !keep.contains(&name)
            };
            if remove {
                remove_any(&join(dir, &name))?;
            }
        }
        Ok(())
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }

    fn check_writable(&self) -> Result<()> {
        self.core.writable()
    }

    fn ns_ok(&self, ns: Ns) -> Result<()> {
        if ns.index() >= self.cf_names.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        Ok(())
    }

    fn cf(&self, ns: Ns) -> Result<&ColumnFamily> {
        self.ns_ok(ns)?;
        let name = &self.cf_names[ns.index()];
        self.db.cf_handle(name).ok_or_else(|| Error::Backend {
            engine: ENGINE,
            message: format!("column family {name:?} is not open"),
        })
    }

    /// Turns a failure into the error returned, poisoning the store for any failed
    /// write and for reads that report corruption or an I/O error.
    fn finish<T>(&mut self, r: std::result::Result<T, Fail>) -> Result<T> {
        let (err, poisons) = match r {
            Ok(v) => return Ok(v),
            Err(Fail::Store(e)) => {
                let p = e.poisons();
                (e, p)
            }
            Err(Fail::Write(e)) => (backend(e), true),
            Err(Fail::Read(e)) => {
                let p = matches!(e.kind(), ErrorKind::Corruption | ErrorKind::IOError);
                (backend(e), p)
            }
        };
        if poisons && self.core.poisoned.is_none() {
            self.core.poisoned = Some(err.to_string());
        }
        Err(err)
    }

    /// Visits the keys of `ns` in `[lower, upper)` (a missing bound is open).
    /// Visits up to `limit` entries with `lower <= key < upper` in direction `dir`
    /// through one native RocksDB iterator; returns how many it visited.
    fn scan(
        &mut self,
        ns: Ns,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        dir: Direction,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.ns_ok(ns)?;
        self.core.stats.scans += 1;
        if let (Some(l), Some(u)) = (&lower, &upper) {
            if l >= u {
                return Ok(0);
            }
        }
        if limit == 0 {
            return Ok(0);
        }
        let mut n = 0usize;
        let r = {
            let cf = self.cf(ns)?;
            let mut ro = ReadOptions::default();
            if let Some(l) = &lower {
                ro.set_iterate_lower_bound(l.clone());
            }
            if let Some(u) = &upper {
                ro.set_iterate_upper_bound(u.clone());
            }
            let mut it = self.db.raw_iterator_cf_opt(cf, ro);
            match (dir, &lower, &upper) {
                (Direction::Forward, Some(l), _) => it.seek(l),
                (Direction::Forward, None, _) => it.seek_to_first(),
                // The iterate-upper-bound is exclusive: seek_for_prev(upper) could land
                // on `upper` itself, so start from the last key and let the bound trim.
                (Direction::Reverse, _, _) => it.seek_to_last(),
            }
            while let Some((k, v)) = it.item() {
                if upper.as_deref().is_some_and(|u| k >= u)
                    || lower.as_deref().is_some_and(|l| k < l)
                {
                    break;
                }
                n += 1;
                if !visit(k, v) || n >= limit {
                    break;
                }
                match dir {
                    Direction::Forward => it.next(),
                    Direction::Reverse => it.prev(),
                }
            }
            it.status().map_err(Fail::Read)
        };
        self.finish(r)?;
        Ok(n)
    }

    fn write_checkpoint(&mut self, seq: u64) -> Result<()> {
        let fs = StdFs;
        let dir = self.opts.dir.clone();
        for ns in 0..self.cf_names.len() {
            let cf = self.cf(Ns(ns as u16))?;
            self.db.flush_cf(cf).map_err(backend)?;
        }
        let name = ckpt_name(seq);
        let tmp = join(&dir, &format!("{name}.tmp"));
        let dst = join(&dir, &name);
        remove_any(&tmp)?;
        Checkpoint::new(&self.db).and_then(|c| c.create_checkpoint(&tmp)).map_err(backend)?;
        remove_any(&dst)?;
        fs.rename(&tmp, &dst).map_err(|e| Error::io("rename checkpoint into place", &dst, e))?;
        fs.sync_dir(&dir).map_err(|e| Error::io("fsync directory", &dir, e))?;
        let mut m = Manifest::new(seq, STORE_NAME, &self.opts);
        m.set("checkpoint", &name);
        manifest::write_manifest(&fs, &dir, &m)?;
        manifest::drop_older_checkpoints(&fs, &dir, seq, |old| {
            remove_any(&join(&dir, &ckpt_name(old)))
        })
    }

    /// Reads the value, calls `f`, applies its decision.
    fn rmw_steps(
        &self,
        ns: Ns,
        key: &[u8],
        f: &mut RmwFn<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        let cf = self.cf(ns)?;
        let action = {
            let old = self.db.get_pinned_cf_opt(cf, key, &self.read_opts).map_err(Fail::Read)?;
            f(old.as_deref(), out)
        };
        match action {
            Rmw::Put => {
                check_value(out.len(), MAX_VALUE_LEN)?;
                self.db.put_cf_opt(cf, key, &out[..], &self.write_opts).map_err(Fail::Write)
            }
            Rmw::Delete => self.db.delete_cf_opt(cf, key, &self.write_opts).map_err(Fail::Write),
            Rmw::Keep => Ok(()),
        }
    }

    fn prop(&self, cf: &ColumnFamily, name: &std::ffi::CStr) -> u64 {
        self.db.property_int_value_cf(cf, name).ok().flatten().unwrap_or(0)
    }
}

impl StateStore for RocksStore {
    fn name(&self) -> &'static str {
        STORE_NAME
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn is_ordered(&self, _: Ns) -> bool {
        true
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.ns_ok(ns)?;
        self.core.stats.gets += 1;
        out.clear();
        let r = {
            let cf = self.cf(ns)?;
            match self.db.get_pinned_cf_opt(cf, key, &self.read_opts) {
                Ok(Some(v)) => {
                    out.extend_from_slice(&v);
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(e) => Err(Fail::Read(e)),
            }
        };
        self.finish(r)
    }

    /// A run of consecutive `Get`s of one namespace goes to RocksDB's own batched
    /// `MultiGet` (one call for the run, values pinned, not copied); the other
    /// operations run one by one.
    fn apply_batch(&mut self, ops: &[BatchOp<'_>], f: &mut MultiRmwFn<'_>) -> Result<()> {
        let mut unused = Vec::new();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut i = 0;
        while i < ops.len() {
            let op = ops[i];
            match op.kind {
                BatchKind::Get => {
                    let run = ops[i..]
                        .iter()
                        .take_while(|o| o.kind == BatchKind::Get && o.ns == op.ns)
                        .count();
                    keys.clear();
                    keys.extend(ops[i..i + run].iter().map(|o| o.key));
                    self.ns_ok(op.ns)?;
                    self.core.stats.gets += run as u64;
                    let r = {
                        let cf = self.cf(op.ns)?;
                        self.db
                            .batched_multi_get_cf_opt(cf, &keys, false, &self.read_opts)
                            .into_iter()
                            .enumerate()
                            .try_for_each(|(j, v)| {
                                f(i + j, v.map_err(Fail::Read)?.as_deref(), &mut unused);
                                Ok(())
                            })
                    };
                    self.finish(r)?;
                    i += run;
                    continue;
                }
                BatchKind::Put(v) => self.put(op.ns, op.key, v)?,
                BatchKind::Merge(v) => self.merge(op.ns, op.key, v)?,
                BatchKind::Delete => self.delete(op.ns, op.key)?,
                BatchKind::Rmw => self.rmw(op.ns, op.key, &mut |old, out| f(i, old, out))?,
            }
            i += 1;
        }
        Ok(())
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        check_value(value.len(), MAX_VALUE_LEN)?;
        self.core.stats.puts += 1;
        let r = {
            let cf = self.cf(ns)?;
            self.db.put_cf_opt(cf, key, value, &self.write_opts).map_err(Fail::Write)
        };
        self.finish(r)
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        let list = matches!(self.opts.namespaces[ns.index()].merge, MergeOp::ListAppend);
        let len = if list { crate::list::framed_len(operand) } else { operand.len() };
        check_value(len, MAX_VALUE_LEN)?;
        self.core.stats.merges += 1;
        let mut buf = std::mem::take(&mut self.scratch);
        let r = {
            let cf = self.cf(ns)?;
            let operand = if list {
                buf.clear();
                crate::list::push(&mut buf, operand);
                &buf[..]
            } else {
                operand
            };
            self.db.merge_cf_opt(cf, key, operand, &self.write_opts).map_err(Fail::Write)
        };
        self.scratch = buf;
        self.finish(r)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        self.core.stats.deletes += 1;
        let r = {
            let cf = self.cf(ns)?;
            self.db.delete_cf_opt(cf, key, &self.write_opts).map_err(Fail::Write)
        };
        self.finish(r)
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        self.core.stats.rmws += 1;
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let r = self.rmw_steps(ns, key, f, &mut out);
        self.scratch = out;
        self.finish(r)
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
        let (lower, upper) = half_open(start, end);
        self.scan(ns, lower, upper, order.direction(), limit, visit)
    }

    fn delete_range(&mut self, ns: Ns, start: &[u8], end: &[u8]) -> Result<u64> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        if start >= end {
            return Ok(0);
        }
        let r = {
            let cf = self.cf(ns)?;
            let mut batch = rocksdb::WriteBatch::default();
            batch.delete_range_cf(cf, start, end);
            self.db.write_opt(batch, &self.write_opts).map_err(Fail::Write)
        };
        self.finish(r)?;
        self.core.stats.deletes += 1;
        Ok(0)
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        crate::backend::checkpoint(self, |s| &mut s.core, RocksStore::write_checkpoint)
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.core.stats();
        let (mut memtables, mut readers) = (0, 0);
        for name in &self.cf_names {
            if let Some(cf) = self.db.cf_handle(name) {
                memtables += self.prop(cf, rocksdb::properties::CUR_SIZE_ALL_MEM_TABLES);
                readers += self.prop(cf, rocksdb::properties::ESTIMATE_TABLE_READERS_MEM);
            }
        }
        s.index_bytes = readers;
        s.bytes_in_memory = memtables + readers + self.cache.get_usage() as u64;
        s.bytes_on_disk = crate::io::dir_bytes(&self.opts.dir);
        s.live_keys = None;
        s
    }
}

#[cfg(test)]
mod tests {
    use crate::StateStoreExt;
    use std::collections::BTreeMap;

    use super::*;
    use crate::{list, merges, NamespaceSpec};

    fn opts(dir: &Path) -> StoreOptions {
        StoreOptions::new(dir)
            .memory_budget(8 << 20)
            .namespace(NamespaceSpec::list("lists"))
            .namespace(NamespaceSpec::with_merge("counts", merges::add_u64()))
            .namespace(NamespaceSpec::list("plain"))
    }

    fn open(dir: &Path) -> RocksStore {
        RocksStore::open(opts(dir)).expect("open")
    }

    fn items(v: &[u8]) -> Vec<Vec<u8>> {
        list::iter(v).map(|e| e.expect("list frame").to_vec()).collect()
    }

    fn count(s: &mut RocksStore, ns: Ns, key: &[u8]) -> Option<u64> {
        s.get(ns, key).unwrap().map(|v| u64::from_le_bytes(v.try_into().expect("8 bytes")))
    }

    fn collect_range(
        s: &mut RocksStore,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        s.scan_range(ns, start, end, &mut |k, _| {
            keys.push(k.to_vec());
            true
        })
        .unwrap();
        keys
    }

    #[test]
    fn put_get_delete() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        assert_eq!(s.name(), "rocksdb");
        let ns = s.namespace("plain").unwrap();
        assert!(s.is_ordered(ns));
        let other = s.namespace("lists").unwrap();
        assert!(s.get(ns, b"k").unwrap().is_none());
        s.put(ns, b"k", b"v1").unwrap();
        s.put(ns, b"k", b"v2").unwrap();
        s.put(ns, b"", b"empty key").unwrap();
        assert_eq!(s.get(ns, b"k").unwrap().as_deref(), Some(&b"v2"[..]));
        assert_eq!(s.get(ns, b"").unwrap().as_deref(), Some(&b"empty key"[..]));
        assert!(s.get(other, b"k").unwrap().is_none(), "namespaces are separate");
        let got = s.multi_get(ns, &[b"k", b"missing", b""]).unwrap();
        assert_eq!(got, vec![Some(b"v2".to_vec()), None, Some(b"empty key".to_vec())]);
        s.delete(ns, b"k").unwrap();
        s.delete(ns, b"never there").unwrap();
        assert!(s.get(ns, b"k").unwrap().is_none());
        assert!(matches!(
            s.put(ns, &vec![0; crate::MAX_KEY_LEN + 1], b"v"),
            Err(Error::KeyTooLarge { .. })
        ));
        assert!(matches!(s.namespace("nope"), Err(Error::UnknownNamespace { .. })));
        assert!(matches!(s.get(Ns(99), b"k"), Err(Error::UnknownNamespace { .. })));
        let st = s.stats();
        assert_eq!((st.puts, st.deletes, st.gets), (3, 2, 8));
        assert_eq!(st.memory_budget, 8 << 20);
        assert!(st.bytes_in_memory > 0);
    }

    #[test]
    fn list_merge_keeps_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("lists").unwrap();
        s.merge(ns, b"l", b"a").unwrap();
        s.merge(ns, b"l", b"").unwrap();
        s.merge(ns, b"l", b"bc").unwrap();
        assert_eq!(
            items(&s.get(ns, b"l").unwrap().unwrap()),
            vec![b"a".to_vec(), vec![], b"bc".to_vec()]
        );
        // Flushed base plus operands in the memtable.
        s.checkpoint().unwrap();
        s.merge(ns, b"l", b"d").unwrap();
        s.merge(ns, b"l", b"e").unwrap();
        let want: Vec<Vec<u8>> =
            [&b"a"[..], b"", b"bc", b"d", b"e"].iter().map(|e| e.to_vec()).collect();
        assert_eq!(items(&s.get(ns, b"l").unwrap().unwrap()), want);
        // A put resets the list; a delete empties it.
        let mut v = Vec::new();
        list::push(&mut v, b"x");
        s.put(ns, b"l", &v).unwrap();
        s.merge(ns, b"l", b"y").unwrap();
        assert_eq!(items(&s.get(ns, b"l").unwrap().unwrap()), vec![b"x".to_vec(), b"y".to_vec()]);
        s.delete(ns, b"l").unwrap();
        s.merge(ns, b"l", b"z").unwrap();
        assert_eq!(items(&s.get(ns, b"l").unwrap().unwrap()), vec![b"z".to_vec()]);
        // Many operands across several flushes.
        for i in 0..200u32 {
            s.merge(ns, b"many", &i.to_le_bytes()).unwrap();
            if i % 50 == 49 {
                s.checkpoint().unwrap();
            }
        }
        let got = items(&s.get(ns, b"many").unwrap().unwrap());
        assert_eq!(got, (0..200u32).map(|i| i.to_le_bytes().to_vec()).collect::<Vec<_>>());
        assert_eq!(s.stats().merges, 207);
    }

    #[test]
    fn function_merge_folds_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("counts").unwrap();
        s.merge(ns, b"c", &5u64.to_le_bytes()).unwrap();
        s.merge(ns, b"c", &7u64.to_le_bytes()).unwrap();
        assert_eq!(count(&mut s, ns, b"c"), Some(12));
        s.checkpoint().unwrap();
        s.merge(ns, b"c", &1u64.to_le_bytes()).unwrap();
        s.merge(ns, b"c", &u64::MAX.to_le_bytes()).unwrap();
        assert_eq!(count(&mut s, ns, b"c"), Some(12), "wrapping add of 1 and u64::MAX");
        s.put(ns, b"c", &100u64.to_le_bytes()).unwrap();
        s.merge(ns, b"c", &1u64.to_le_bytes()).unwrap();
        assert_eq!(count(&mut s, ns, b"c"), Some(101));
        s.delete(ns, b"c").unwrap();
        s.merge(ns, b"c", &3u64.to_le_bytes()).unwrap();
        assert_eq!(count(&mut s, ns, b"c"), Some(3));
        // Order-sensitive function: last-writer-wins concatenation of "old|op".
        let dir2 = tempfile::tempdir().unwrap();
        let f = MergeOp::function("join", |old, op, out| {
            if let Some(o) = old {
                out.extend_from_slice(o);
                out.push(b'|');
            }
            out.extend_from_slice(op);
        });
        let mut s2 = RocksStore::open(
            StoreOptions::new(dir2.path()).namespace(NamespaceSpec::with_merge("j", f)),
        )
        .unwrap();
        let j = s2.namespace("j").unwrap();
        s2.merge(j, b"k", b"1").unwrap();
        s2.checkpoint().unwrap();
        s2.merge(j, b"k", b"2").unwrap();
        s2.merge(j, b"k", b"3").unwrap();
        assert_eq!(s2.get(j, b"k").unwrap().as_deref(), Some(&b"1|2|3"[..]));
    }

    #[test]
    fn rmw_put_delete_keep() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        let mut seen = Vec::new();
        s.rmw(ns, b"k", &mut |old, out| {
            seen.push(old.map(<[u8]>::to_vec));
            out.extend_from_slice(b"one");
            Rmw::Put
        })
        .unwrap();
        s.rmw(ns, b"k", &mut |old, out| {
            seen.push(old.map(<[u8]>::to_vec));
            out.extend_from_slice(b"two");
            Rmw::Keep
        })
        .unwrap();
        assert_eq!(s.get(ns, b"k").unwrap().as_deref(), Some(&b"one"[..]));
        s.rmw(ns, b"k", &mut |old, out| {
            seen.push(old.map(<[u8]>::to_vec));
            assert!(out.is_empty());
            Rmw::Delete
        })
        .unwrap();
        assert!(s.get(ns, b"k").unwrap().is_none());
        assert_eq!(seen, vec![None, Some(b"one".to_vec()), Some(b"one".to_vec())]);
        assert_eq!(s.stats().rmws, 3);
    }

    #[test]
    fn prefix_scan_is_ordered_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        let keys: [&[u8]; 8] = [b"a", b"ab", b"abc", b"abd", b"ac", b"b", b"\xff", b"\xff\xff\x01"];
        for (i, k) in keys.iter().rev().enumerate() {
            s.put(ns, k, &[i as u8]).unwrap();
        }
        s.put(s.namespace("lists").unwrap(), b"ab-other-ns", b"x").unwrap();
        let scan = |s: &mut RocksStore, prefix: &[u8], limit: usize| {
            let mut got = Vec::new();
            s.scan_prefix(ns, prefix, &mut |k, _| {
                got.push(k.to_vec());
                got.len() < limit
            })
            .unwrap();
            got
        };
        let v = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
        assert_eq!(scan(&mut s, b"ab", 100), v(&[b"ab", b"abc", b"abd"]));
        assert_eq!(scan(&mut s, b"a", 2), v(&[b"a", b"ab"]));
        assert_eq!(scan(&mut s, b"", 100), v(&keys));
        assert_eq!(scan(&mut s, b"\xff", 100), v(&[b"\xff", b"\xff\xff\x01"]));
        assert_eq!(scan(&mut s, b"\xff\xff", 100), v(&[b"\xff\xff\x01"]));
        assert!(scan(&mut s, b"zz", 100).is_empty());
        // The same after the data moved to SST files.
        s.checkpoint().unwrap();
        assert_eq!(scan(&mut s, b"ab", 100), v(&[b"ab", b"abc", b"abd"]));
        assert_eq!(s.stats().scans, 7);
    }

    #[test]
    fn range_scan_honours_every_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        let mut model = BTreeMap::new();
        for k in [&b"a"[..], b"b", b"b\x00", b"ba", b"c", b"d", b"d\x00\x00", b"e"] {
            s.put(ns, k, k).unwrap();
            model.insert(k.to_vec(), ());
        }
        let points: [&[u8]; 7] = [b"", b"a", b"b", b"b\x00", b"bb", b"d", b"zz"];
        for round in 0..2 {
            for lo in points {
                for hi in points {
                    let starts = [Bound::Included(lo), Bound::Excluded(lo), Bound::Unbounded];
                    let ends = [Bound::Included(hi), Bound::Excluded(hi), Bound::Unbounded];
                    for start in starts {
                        for end in ends {
                            let valid = match (start, end) {
                                (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
                                (
                                    Bound::Included(a) | Bound::Excluded(a),
                                    Bound::Included(b) | Bound::Excluded(b),
                                ) => a <= b,
                                _ => true,
                            };
                            let want: Vec<Vec<u8>> = if valid {
                                let owned = |b: Bound<&[u8]>| b.map(<[u8]>::to_vec);
                                model
                                    .range((owned(start), owned(end)))
                                    .map(|(k, _)| k.clone())
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            let got = collect_range(&mut s, ns, start, end);
                            assert_eq!(got, want, "round {round} {start:?}..{end:?}");
                        }
                    }
                }
            }
            s.checkpoint().unwrap();
        }
        // Early stop.
        let mut n = 0;
        s.scan_range(ns, Bound::Unbounded, Bound::Unbounded, &mut |_, _| {
            n += 1;
            n < 3
        })
        .unwrap();
        assert_eq!(n, 3);
    }

    #[test]
    fn reopen_restores_last_checkpoint_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let (plain, lists, counts);
        {
            let mut s = open(dir.path());
            assert_eq!(s.checkpoint_seq(), 0);
            plain = s.namespace("plain").unwrap();
            lists = s.namespace("lists").unwrap();
            counts = s.namespace("counts").unwrap();
            s.put(plain, b"gone", b"x").unwrap();
            assert_eq!(s.checkpoint().unwrap().seq, 1);
            s.delete(plain, b"gone").unwrap();
            s.put(plain, b"k", b"v").unwrap();
            s.merge(lists, b"l", b"1").unwrap();
            s.merge(counts, b"c", &2u64.to_le_bytes()).unwrap();
            let info = s.checkpoint().unwrap();
            assert_eq!(info.seq, 2);
            assert_eq!(s.checkpoint_seq(), 2);
            let st = s.stats();
            assert_eq!(st.checkpoints, 2);
            assert!(st.bytes_on_disk > 0);
            // Lost at reopen.
            s.put(plain, b"k", b"after").unwrap();
            s.put(plain, b"new", b"after").unwrap();
            s.merge(lists, b"l", b"2").unwrap();
            s.merge(counts, b"c", &5u64.to_le_bytes()).unwrap();
            s.checkpoint().unwrap();
            s.merge(lists, b"l", b"3").unwrap();
        }
        // Drop the newest checkpoint's manifest: the store falls back to seq 2.
        std::fs::remove_file(dir.path().join(manifest::manifest_name(3))).unwrap();
        let mut s = open(dir.path());
        assert_eq!(s.checkpoint_seq(), 2);
        assert_eq!(s.get(plain, b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(s.get(plain, b"new").unwrap().is_none());
        assert!(s.get(plain, b"gone").unwrap().is_none());
        assert_eq!(items(&s.get(lists, b"l").unwrap().unwrap()), vec![b"1".to_vec()]);
        assert_eq!(count(&mut s, counts, b"c"), Some(2));
        assert!(!dir.path().join(ckpt_name(3)).exists(), "unpublished checkpoint removed");
        // The restored store keeps working and checkpointing.
        s.merge(lists, b"l", b"4").unwrap();
        assert_eq!(s.checkpoint().unwrap().seq, 3);
        drop(s);
        let mut s = open(dir.path());
        assert_eq!(
            items(&s.get(lists, b"l").unwrap().unwrap()),
            vec![b"1".to_vec(), b"4".to_vec()]
        );
        // Writes to a restored store never alter the checkpoint it came from.
        s.put(plain, b"k", b"changed").unwrap();
        s.merge(lists, b"l", b"5").unwrap();
        drop(s);
        let mut s = open(dir.path());
        assert_eq!(s.get(plain, b"k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(
            items(&s.get(lists, b"l").unwrap().unwrap()),
            vec![b"1".to_vec(), b"4".to_vec()]
        );
    }

    #[test]
    fn keeps_two_checkpoints_and_cleans_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        for i in 0..4u8 {
            s.put(ns, &[i], &[i]).unwrap();
            s.checkpoint().unwrap();
        }
        let names = |d: &Path| {
            let mut n: Vec<String> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        let mut want = vec![
            ckpt_name(3),
            ckpt_name(4),
            manifest::manifest_name(3),
            manifest::manifest_name(4),
            "STORE".to_string(),
            "db".to_string(),
        ];
        want.sort();
        assert_eq!(names(dir.path()), want);
        drop(s);
        std::fs::create_dir(dir.path().join("ckpt-0000000000000009.tmp")).unwrap();
        std::fs::create_dir(dir.path().join(ckpt_name(7))).unwrap();
        std::fs::write(dir.path().join("MANIFEST-0000000000000005.tmp"), b"junk").unwrap();
        let mut s = open(dir.path());
        assert_eq!(names(dir.path()), want);
        assert_eq!(s.checkpoint_seq(), 4);
        assert_eq!(s.get(ns, &[3]).unwrap().as_deref(), Some(&[3u8][..]));
    }

    #[test]
    fn reopen_without_checkpoint_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = open(dir.path());
            let ns = s.namespace("plain").unwrap();
            s.put(ns, b"k", b"v").unwrap();
        }
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        assert_eq!(s.checkpoint_seq(), 0);
        assert!(s.get(ns, b"k").unwrap().is_none());
        let mut n = 0;
        s.scan_prefix(ns, b"", &mut |_, _| {
            n += 1;
            true
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn namespace_mismatch_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut s = open(dir.path());
            s.checkpoint().unwrap();
        }
        let renamed = StoreOptions::new(dir.path())
            .namespace(NamespaceSpec::list("lists"))
            .namespace(NamespaceSpec::list("counts"))
            .namespace(NamespaceSpec::list("plain"));
        assert!(matches!(RocksStore::open(renamed), Err(Error::NamespaceMismatch { .. })));
        let fewer = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("lists"));
        assert!(matches!(RocksStore::open(fewer), Err(Error::NamespaceMismatch { .. })));
        // The checkpoint is intact after the refused opens.
        assert_eq!(open(dir.path()).checkpoint_seq(), 1);
    }

    #[test]
    fn refuses_foreign_directories_and_small_budgets() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious.txt"), b"user data").unwrap();
        assert!(matches!(RocksStore::open(opts(dir.path())), Err(Error::NotAStore { .. })));
        assert!(dir.path().join("precious.txt").exists());

        let mem_dir = tempfile::tempdir().unwrap();
        drop(crate::MemStore::open(opts(mem_dir.path())).unwrap());
        assert!(matches!(RocksStore::open(opts(mem_dir.path())), Err(Error::NotAStore { .. })));

        let small = tempfile::tempdir().unwrap();
        let r = RocksStore::open(opts(small.path()).memory_budget(MIN_BUDGET - 1));
        assert!(matches!(r, Err(Error::BudgetTooSmall { .. })));
        assert!(matches!(
            RocksStore::open(StoreOptions::new(small.path())),
            Err(Error::InvalidOption { .. })
        ));
    }

    #[test]
    fn failed_checkpoint_poisons_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open(dir.path());
        let ns = s.namespace("plain").unwrap();
        s.put(ns, b"k", b"v").unwrap();
        // A directory where the manifest's temporary file must go makes publishing fail.
        std::fs::create_dir(dir.path().join(format!("{}.tmp", manifest::manifest_name(1))))
            .unwrap();
        assert!(s.checkpoint().is_err());
        assert!(matches!(s.put(ns, b"k", b"w"), Err(Error::Poisoned { .. })));
        assert!(matches!(s.merge(ns, b"k", b"w"), Err(Error::Poisoned { .. })));
        assert!(matches!(s.delete(ns, b"k"), Err(Error::Poisoned { .. })));
        assert!(matches!(s.checkpoint(), Err(Error::Poisoned { .. })));
        assert_eq!(s.get(ns, b"k").unwrap().as_deref(), Some(&b"v"[..]), "reads still work");
        drop(s);
        // Reopening recovers the last completed checkpoint: none.
        let mut s = open(dir.path());
        assert_eq!(s.checkpoint_seq(), 0);
        assert!(s.get(ns, b"k").unwrap().is_none());
    }

    #[test]
    fn namespace_named_default_is_rocksdbs_default_family() {
        let dir = tempfile::tempdir().unwrap();
        let o = || {
            StoreOptions::new(dir.path())
                .namespace(NamespaceSpec::list("x"))
                .namespace(NamespaceSpec::list("default"))
        };
        let mut s = RocksStore::open(o()).unwrap();
        let d = s.namespace("default").unwrap();
        s.merge(d, b"k", b"a").unwrap();
        s.merge(d, b"k", b"b").unwrap();
        s.checkpoint().unwrap();
        drop(s);
        let mut s = RocksStore::open(o()).unwrap();
        assert_eq!(items(&s.get(d, b"k").unwrap().unwrap()), vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(s.get(s.namespace("x").unwrap(), b"k").unwrap().is_none());
    }
}
