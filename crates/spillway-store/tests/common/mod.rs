//! Shared pieces of the conformance suite: the stores under test, their namespaces,
//! and the BTreeMap model every store is compared against.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use spillway_store::io::Fs;
use spillway_store::tiered::{L2Config, L3Kind, RedisServer, TieredOptions, TieredStore};
use spillway_store::{
    merges, AccessHint, AdaptiveOptions, AdaptiveStore, AppendLogOptions, AppendLogStore,
    CheckpointInfo, Cursor, Direction, HashLogOptions, HashLogStore, MemStore, NamespaceSpec, Ns,
    Order, Result, Rmw, RmwFn, StateStore, StateStoreExt, StoreOptions, StoreStats, TimeLogOptions,
    TimeLogStore, Visitor,
};

/// Namespace 0: plain values, merge = add_u64 (point hint). Namespace 1: list append
/// (list-append hint). Namespace 2: list append, declared ordered (range hint).
pub const KV: usize = 0;
pub const LIST: usize = 1;
pub const ORD: usize = 2;
pub const NAMESPACES: [&str; 3] = ["kv", "lists", "ordered"];

/// The Redis URL tiered kinds connect to when set (else the test binary's own server).
pub const REDIS_URL_ENV: &str = "SPILLWAY_TEST_REDIS_URL";

/// A store configuration under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mem,
    /// Hashlog with 64 KiB pages under a 1 MiB budget: state quickly outgrows memory.
    HashLogTiny,
    /// HashLogTiny whose every index snapshot is fuzzy (never written whole), copied 8
    /// buckets per operation and due almost every checkpoint: a snapshot spans hundreds
    /// of operations and several checkpoints, so kills and power cuts land inside one.
    HashLogFuzzy,
    /// Hashlog with 2 MiB pages (1 MiB values fit) under a 20 MiB budget.
    HashLogBig,
    /// Timelog with default options under a 1 MiB budget: the suite's keys spread over a
    /// few partitions (by their first byte), and large values flush memtables into
    /// segments (a value over the 512 KiB memtable share goes to disk at once).
    TimeLog,
    /// Timelog under 128 KiB with a 16 KiB memtable share, 1 KiB blocks, at most 2
    /// segments per partition and partitions of 2^32 time units: the suite's short
    /// keys share a partition per namespace (random keys over many partitions would make
    /// every checkpoint fsync a segment per partition, too slow for the crash test),
    /// keys ending in an 8-byte time spread over many. Memtables flush and partitions
    /// merge constantly.
    TimeLogTiny,
    /// Appendlog over hashlog with 64 KiB pages under a 1 MiB budget: lists outgrow
    /// memory.
    AppendLogTiny,
    /// Appendlog over hashlog with 2 MiB pages (1 MiB values) under a 20 MiB budget.
    AppendLog,
    /// HashLogTiny with direct I/O (`O_DIRECT` segment files): every read of state
    /// outside the 1 MiB budget goes through the aligned-block path. Its directory must
    /// be on a file system with `O_DIRECT` (the system temporary directory here: ext4).
    HashLogDirect,
    /// AppendLogTiny with direct I/O.
    AppendLogDirect,
    #[cfg(feature = "rocksdb")]
    Rocks,
    /// Adaptive with 2 MiB pages under 64 MiB, a forced migration about every 7
    /// operations moved 2 entries per step: migrations in every direction are always
    /// under way across checkpoints and reopens.
    Adaptive,
    /// Adaptive under 4 MiB with 64 KiB pages, forced migrations about every 5
    /// operations, one entry per step.
    AdaptiveTiny,
    /// Tiered: a 2 KiB L1 (a handful of entries: nearly every operation migrates
    /// something) over the test binary's Redis over a hashlog with 64 KiB pages.
    TieredL123,
    /// Tiered L1 (2 KiB) over hashlog, no Redis.
    TieredL13,
    /// Tiered Redis over hashlog, no L1.
    TieredL23,
    /// Tiered L1 (2 KiB) over Redis, no durable level.
    TieredL12,
    /// Tiered Redis alone.
    TieredL2,
}

impl Kind {
    pub fn all() -> Vec<Kind> {
        vec![
            Kind::Mem,
            Kind::HashLogTiny,
            Kind::HashLogFuzzy,
            Kind::HashLogBig,
            Kind::TimeLog,
            Kind::TimeLogTiny,
            Kind::AppendLogTiny,
            Kind::AppendLog,
            Kind::HashLogDirect,
            Kind::AppendLogDirect,
            #[cfg(feature = "rocksdb")]
            Kind::Rocks,
            Kind::Adaptive,
            Kind::AdaptiveTiny,
            Kind::TieredL123,
            Kind::TieredL13,
            Kind::TieredL23,
            Kind::TieredL12,
            Kind::TieredL2,
        ]
    }

    /// Whether the store survives a reopen (non-durable tiered stores refuse to
    /// checkpoint and reopen empty).
    pub fn durable(self) -> bool {
        !matches!(self, Kind::TieredL12 | Kind::TieredL2)
    }

    /// The tiered levels of a tiered kind.
    pub fn tiered(self) -> Option<TieredOptions> {
        // A crash test's children use their parent's server (so that the keys a killed
        // child leaves behind are there when the parent reopens the store).
        let redis =
            || {
                L2Config::Url(std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| {
                    RedisServer::shared().unwrap_or_else(|e| panic!("{e}")).url()
                }))
            };
        let t = match self {
            Kind::TieredL123 => TieredOptions::new(2048).l2(redis()),
            Kind::TieredL13 => TieredOptions::new(2048),
            Kind::TieredL23 => TieredOptions::new(0).l2(redis()),
            Kind::TieredL12 => TieredOptions::new(2048).l2(redis()).l3(L3Kind::None),
            Kind::TieredL2 => TieredOptions::new(0).l2(redis()).l3(L3Kind::None),
            _ => return None,
        };
        Some(t.l3_hashlog(hashlog_options(Kind::HashLogTiny)))
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mem => "mem",
            Kind::HashLogTiny => "hashlog-tiny",
            Kind::HashLogFuzzy => "hashlog-fuzzy",
            Kind::HashLogBig => "hashlog-big",
            Kind::TimeLog => "timelog",
            Kind::TimeLogTiny => "timelog-tiny",
            Kind::AppendLogTiny => "appendlog-tiny",
            Kind::AppendLog => "appendlog",
            Kind::HashLogDirect => "hashlog-direct",
            Kind::AppendLogDirect => "appendlog-direct",
            #[cfg(feature = "rocksdb")]
            Kind::Rocks => "rocksdb",
            Kind::Adaptive => "adaptive",
            Kind::AdaptiveTiny => "adaptive-tiny",
            Kind::TieredL123 => "tiered-l123",
            Kind::TieredL13 => "tiered-l13",
            Kind::TieredL23 => "tiered-l23",
            Kind::TieredL12 => "tiered-l12",
            Kind::TieredL2 => "tiered-l2",
        }
    }

    pub fn from_name(name: &str) -> Kind {
        *Kind::all()
            .iter()
            .find(|k| k.name() == name)
            .unwrap_or_else(|| panic!("unknown kind {name}"))
    }

    pub fn ordered(self) -> bool {
        if matches!(self, Kind::TimeLog | Kind::TimeLogTiny) {
            return true;
        }
        #[cfg(feature = "rocksdb")]
        if self == Kind::Rocks {
            return true;
        }
        false
    }

    /// Largest value this configuration accepts in the suite.
    pub fn max_value(self) -> usize {
        match self {
            Kind::HashLogTiny
            | Kind::HashLogFuzzy
            | Kind::TimeLogTiny
            | Kind::AppendLogTiny
            | Kind::AdaptiveTiny
            | Kind::HashLogDirect
            | Kind::AppendLogDirect
            | Kind::TieredL123
            | Kind::TieredL13
            | Kind::TieredL23
            | Kind::TieredL12
            | Kind::TieredL2 => 16 << 10,
            _ => 1 << 20,
        }
    }

    /// Whether this configuration opens its store with direct I/O.
    pub fn direct_io(self) -> bool {
        matches!(self, Kind::HashLogDirect | Kind::AppendLogDirect)
    }

    pub fn budget(self) -> u64 {
        match self {
            Kind::Mem => 256 << 20,
            Kind::HashLogTiny | Kind::HashLogFuzzy | Kind::AppendLogTiny => 1 << 20,
            Kind::HashLogDirect | Kind::AppendLogDirect => 1 << 20,
            Kind::HashLogBig | Kind::AppendLog => 20 << 20,
            Kind::TimeLog => 1 << 20,
            Kind::TimeLogTiny => 128 << 10,
            #[cfg(feature = "rocksdb")]
            Kind::Rocks => 16 << 20,
            Kind::Adaptive => 64 << 20,
            Kind::AdaptiveTiny => 4 << 20,
            // L1's 2 KiB come off the top; hashlog gets the rest.
            Kind::TieredL123
            | Kind::TieredL13
            | Kind::TieredL23
            | Kind::TieredL12
            | Kind::TieredL2 => (1 << 20) + 2048,
        }
    }
}

pub fn options(dir: &Path, budget: u64) -> StoreOptions {
    StoreOptions::new(dir)
        .memory_budget(budget)
        .namespace(NamespaceSpec::with_merge("kv", merges::add_u64()))
        .namespace(NamespaceSpec::list("lists").hint(AccessHint::ListAppend))
        .namespace(NamespaceSpec::list("ordered").hint(AccessHint::Range))
}

pub fn hashlog_options(kind: Kind) -> HashLogOptions {
    match kind {
        Kind::HashLogTiny | Kind::AppendLogTiny | Kind::HashLogDirect | Kind::AppendLogDirect => {
            HashLogOptions::default()
                .page_size(64 << 10)
                .segment_size(256 << 10)
                .compaction_step(32 << 10)
                .garbage_ratio(0.3)
        }
        Kind::HashLogFuzzy => hashlog_options(Kind::HashLogTiny)
            .inline_snapshot_bytes(0)
            .index_snapshot_step(8)
            .index_snapshot_ratio(0.05),
        _ => HashLogOptions::default().page_size(2 << 20).segment_size(8 << 20).expected_keys(1000),
    }
}

/// Opens an appendlog kind as its concrete type (for its list-specific API).
pub fn open_appendlog(kind: Kind, dir: &Path) -> Result<AppendLogStore> {
    assert!(
        matches!(kind, Kind::AppendLogTiny | Kind::AppendLog | Kind::AppendLogDirect),
        "{kind:?}"
    );
    let a = AppendLogOptions::default().hashlog(hashlog_options(kind));
    AppendLogStore::open(options(dir, kind.budget()).direct_io(kind.direct_io()), a)
}

pub fn timelog_options(kind: Kind) -> TimeLogOptions {
    match kind {
        Kind::TimeLogTiny => TimeLogOptions::default()
            .memtable_fraction(1.0 / 8.0)
            .block_size(1024)
            .max_segments(2)
            .partition_span(1 << 32),
        _ => TimeLogOptions::default(),
    }
}

pub fn adaptive_options(kind: Kind) -> AdaptiveOptions {
    match kind {
        Kind::AdaptiveTiny => {
            AdaptiveOptions::default().page_size(64 << 10).forced_migrations(5, 11).step_entries(1)
        }
        _ => AdaptiveOptions::default().page_size(2 << 20).forced_migrations(7, 3).step_entries(2),
    }
}

pub fn open(kind: Kind, dir: &Path) -> Result<Box<dyn StateStore>> {
    open_with_fs(kind, dir, None)
}

pub fn open_with_fs(
    kind: Kind,
    dir: &Path,
    fs: Option<Arc<dyn Fs>>,
) -> Result<Box<dyn StateStore>> {
    open_opts(kind, options(dir, kind.budget()).direct_io(kind.direct_io()), fs)
}

/// Opens a store of `kind` with the kind's backend settings and the given store
/// options (their own namespaces, budget and directory).
pub fn open_opts(
    kind: Kind,
    opts: StoreOptions,
    fs: Option<Arc<dyn Fs>>,
) -> Result<Box<dyn StateStore>> {
    if let Some(t) = kind.tiered() {
        return Ok(Box::new(match fs {
            None => TieredStore::open(opts, t)?,
            Some(fs) => TieredStore::open_with_fs(opts, t, fs)?,
        }));
    }
    Ok(match (kind, fs) {
        (Kind::Mem, None) => Box::new(MemStore::open(opts)?),
        (Kind::Mem, Some(fs)) => Box::new(MemStore::open_with_fs(opts, fs)?),
        (Kind::HashLogTiny | Kind::HashLogFuzzy | Kind::HashLogBig | Kind::HashLogDirect, None) => {
            Box::new(HashLogStore::open(opts, hashlog_options(kind))?)
        }
        (
            Kind::HashLogTiny | Kind::HashLogFuzzy | Kind::HashLogBig | Kind::HashLogDirect,
            Some(fs),
        ) => Box::new(HashLogStore::open_with_fs(opts, hashlog_options(kind), fs)?),
        (Kind::AppendLogTiny | Kind::AppendLog | Kind::AppendLogDirect, fs) => {
            let a = AppendLogOptions::default().hashlog(hashlog_options(kind));
            match fs {
                None => Box::new(AppendLogStore::open(opts, a)?),
                Some(fs) => Box::new(AppendLogStore::open_with_fs(opts, a, fs)?),
            }
        }
        (Kind::TimeLog | Kind::TimeLogTiny, None) => {
            Box::new(TimeLogStore::open(opts, timelog_options(kind))?)
        }
        (Kind::TimeLog | Kind::TimeLogTiny, Some(fs)) => {
            Box::new(TimeLogStore::open_with_fs(opts, timelog_options(kind), fs)?)
        }
        #[cfg(feature = "rocksdb")]
        (Kind::Rocks, None) => Box::new(spillway_store::RocksStore::open(opts)?),
        #[cfg(feature = "rocksdb")]
        (Kind::Rocks, Some(_)) => panic!("RocksStore has no I/O seam"),
        (Kind::Adaptive | Kind::AdaptiveTiny, fs) => {
            let a = adaptive_options(kind);
            match fs {
                None => Box::new(AdaptiveStore::open(opts, a)?),
                Some(fs) => Box::new(AdaptiveStore::open_with_fs(opts, a, fs)?),
            }
        }
        (k, _) => unreachable!("{k:?} is tiered"),
    })
}

pub fn ns(store: &dyn StateStore, i: usize) -> Ns {
    store.namespace(NAMESPACES[i]).expect("namespace")
}

/// One step of a conformance test.
#[derive(Clone, Debug)]
pub enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Get(usize, Vec<u8>),
    MultiGet(usize, Vec<Vec<u8>>),
    /// Merge into `kv` (add_u64) or `lists` (append).
    Merge(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    /// rmw that adds `n` to a u64 counter; deletes the key when the sum hits 0 mod 7;
    /// keeps it unchanged when `n == 0`.
    Rmw(usize, Vec<u8>, u64),
    ScanPrefix(usize, Vec<u8>),
    ScanRange(usize, Bound<Vec<u8>>, Bound<Vec<u8>>),
    /// `scan_ordered(ns, lo, hi, reverse?, limit)`.
    ScanOrdered(usize, Bound<Vec<u8>>, Bound<Vec<u8>>, bool, usize),
    /// `range(ns, lo, hi, Order::Any, limit)`: every namespace serves it.
    RangeAny(usize, Bound<Vec<u8>>, Bound<Vec<u8>>, usize),
    /// `delete_range(ns, from, to)`.
    DeleteRange(usize, Vec<u8>, Vec<u8>),
    /// A cursor over `prefix ++ lower..` (reverse?) with read-ahead `batch`, walked to
    /// its end.
    CursorWalk(usize, Vec<u8>, Vec<u8>, bool, usize),
    /// A resumable walk (`scan_step`) in steps of `step` entries, the visitor stopping
    /// each step after `stop` entries when set; must visit every entry exactly once.
    Walk(usize, usize, Option<usize>),
    Checkpoint,
    Reopen,
    /// `multi_rmw` of counter increments (as [`Op::Rmw`]) over keys of one namespace;
    /// a key may repeat.
    MultiRmw(usize, Vec<(Vec<u8>, u64)>),
    /// `apply_batch` of mixed operations over any namespaces.
    Batch(Vec<(usize, Vec<u8>, BOp)>),
}

/// One operation of [`Op::Batch`].
#[derive(Clone, Debug)]
pub enum BOp {
    Get,
    Put(Vec<u8>),
    Delete,
    /// A counter increment as in [`Op::Rmw`].
    Rmw(u64),
}

/// The model: what every store must return.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub live: BTreeMap<(usize, Vec<u8>), Vec<u8>>,
    pub durable: BTreeMap<(usize, Vec<u8>), Vec<u8>>,
}

pub fn rmw_counter(old: Option<&[u8]>, n: u64) -> (Rmw, Option<Vec<u8>>) {
    if n == 0 {
        return (Rmw::Keep, None);
    }
    let cur = old.and_then(|v| <[u8; 8]>::try_from(v).ok()).map_or(0, u64::from_le_bytes);
    let next = cur.wrapping_add(n);
    if next.is_multiple_of(7) {
        (Rmw::Delete, None)
    } else {
        (Rmw::Put, Some(next.to_le_bytes().to_vec()))
    }
}

fn add_u64(old: Option<&[u8]>, op: &[u8]) -> Vec<u8> {
    let a = old.and_then(|v| <[u8; 8]>::try_from(v).ok()).map_or(0, u64::from_le_bytes);
    let b = <[u8; 8]>::try_from(op).map_or(0, u64::from_le_bytes);
    a.wrapping_add(b).to_le_bytes().to_vec()
}

fn framed(old: Option<&[u8]>, elem: &[u8]) -> Vec<u8> {
    let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
    v.extend_from_slice(&(elem.len() as u32).to_le_bytes());
    v.extend_from_slice(elem);
    v
}

fn in_range(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo_ok = match lo {
        Bound::Included(b) => k >= b.as_slice(),
        Bound::Excluded(b) => k > b.as_slice(),
        Bound::Unbounded => true,
    };
    let hi_ok = match hi {
        Bound::Included(b) => k <= b.as_slice(),
        Bound::Excluded(b) => k < b.as_slice(),
        Bound::Unbounded => true,
    };
    lo_ok && hi_ok
}

fn as_ref_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v),
        Bound::Excluded(v) => Bound::Excluded(v),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Runs one write (or a checkpoint) on the store; returns its error if it failed.
pub fn write(store: &mut Box<dyn StateStore>, op: &Op) -> Result<()> {
    let n = |s: &dyn StateStore, i| ns(s, i);
    match op {
        Op::Put(i, k, v) => store.put(n(&**store, *i), k, v),
        Op::Merge(i, k, v) => store.merge(n(&**store, *i), k, v),
        Op::Delete(i, k) => store.delete(n(&**store, *i), k),
        Op::Rmw(i, k, by) => store.rmw(n(&**store, *i), k, &mut |old, out| {
            let (r, v) = rmw_counter(old, *by);
            if let Some(v) = v {
                out.extend_from_slice(&v);
            }
            r
        }),
        Op::DeleteRange(i, a, b) => store.delete_range(n(&**store, *i), a, b).map(|_| ()),
        Op::Checkpoint => store.checkpoint().map(|_| ()),
        other => unreachable!("{other:?}"),
    }
}

/// Applies a write operation to the model alone.
pub fn apply_to_model(model: &mut Model, op: &Op) {
    match op {
        Op::Put(i, k, v) => {
            model.live.insert((*i, k.clone()), v.clone());
        }
        Op::Merge(i, k, v) => {
            let old = model.live.get(&(*i, k.clone())).map(Vec::as_slice);
            let new = if *i == KV { add_u64(old, v) } else { framed(old, v) };
            model.live.insert((*i, k.clone()), new);
        }
        Op::Delete(i, k) => {
            model.live.remove(&(*i, k.clone()));
        }
        Op::DeleteRange(i, a, b) => {
            model.live.retain(|(j, k), _| !(j == i && a <= k && k < b));
        }
        Op::Rmw(i, k, by) => {
            let key = (*i, k.clone());
            match rmw_counter(model.live.get(&key).map(Vec::as_slice), *by) {
                (Rmw::Put, Some(v)) => {
                    model.live.insert(key, v);
                }
                (Rmw::Delete, _) => {
                    model.live.remove(&key);
                }
                _ => {}
            }
        }
        other => panic!("{other:?} is not a write"),
    }
}

/// Runs `op` against the store and the model and panics on any difference. `reopen`
/// reopens the store in place.
pub fn step(
    kind: Kind,
    store: &mut Box<dyn StateStore>,
    model: &mut Model,
    op: &Op,
    reopen: &mut dyn FnMut() -> Box<dyn StateStore>,
) {
    let nsof = |s: &dyn StateStore, i: usize| ns(s, i);
    match op {
        Op::Put(i, k, v) => {
            let n = nsof(&**store, *i);
            store.put(n, k, v).unwrap_or_else(|e| panic!("{kind:?} put: {e}"));
            apply_to_model(model, op);
        }
        Op::Get(i, k) => {
            let n = nsof(&**store, *i);
            let got = store.get(n, k).unwrap_or_else(|e| panic!("{kind:?} get: {e}"));
            let want = model.live.get(&(*i, k.clone()));
            assert_eq!(got.as_ref(), want, "{kind:?} get ns {i} key {k:?}");
        }
        Op::MultiGet(i, keys) => {
            let n = nsof(&**store, *i);
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let got =
                store.multi_get(n, &refs).unwrap_or_else(|e| panic!("{kind:?} multi_get: {e}"));
            let want: Vec<Option<Vec<u8>>> =
                keys.iter().map(|k| model.live.get(&(*i, k.clone())).cloned()).collect();
            assert_eq!(got, want, "{kind:?} multi_get ns {i}");
        }
        Op::Merge(i, k, v) => {
            let n = nsof(&**store, *i);
            let r = store.merge(n, k, v);
            let old = model.live.get(&(*i, k.clone())).map(Vec::as_slice);
            let new = if *i == KV { add_u64(old, v) } else { framed(old, v) };
            match r {
                Ok(()) => {
                    model.live.insert((*i, k.clone()), new);
                }
                // A list grown past the store's value limit is refused, unchanged.
                Err(spillway_store::Error::ValueTooLarge { .. })
                    if new.len() > kind.max_value() => {}
                Err(e) => panic!("{kind:?} merge: {e}"),
            }
        }
        Op::Delete(i, k) => {
            let n = nsof(&**store, *i);
            store.delete(n, k).unwrap_or_else(|e| panic!("{kind:?} delete: {e}"));
            apply_to_model(model, op);
        }
        Op::MultiRmw(i, items) => {
            let n = nsof(&**store, *i);
            let keys: Vec<&[u8]> = items.iter().map(|(k, _)| k.as_slice()).collect();
            let mut seen: Vec<Option<Option<Vec<u8>>>> = vec![None; items.len()];
            store
                .multi_rmw(n, &keys, &mut |j, old, out| {
                    seen[j] = Some(old.map(<[u8]>::to_vec));
                    let (r, v) = rmw_counter(old, items[j].1);
                    if let Some(v) = v {
                        out.extend_from_slice(&v);
                    }
                    r
                })
                .unwrap_or_else(|e| panic!("{kind:?} multi_rmw: {e}"));
            for (j, (k, by)) in items.iter().enumerate() {
                assert_eq!(
                    seen[j],
                    Some(model.live.get(&(*i, k.clone())).cloned()),
                    "{kind:?} multi_rmw item {j} saw old value"
                );
                apply_to_model(model, &Op::Rmw(*i, k.clone(), *by));
            }
        }
        Op::Batch(items) => {
            let ops: Vec<spillway_store::BatchOp<'_>> = items
                .iter()
                .map(|(i, k, b)| spillway_store::BatchOp {
                    ns: nsof(&**store, *i),
                    key: k,
                    kind: match b {
                        BOp::Get => spillway_store::BatchKind::Get,
                        BOp::Put(v) => spillway_store::BatchKind::Put(v),
                        BOp::Delete => spillway_store::BatchKind::Delete,
                        BOp::Rmw(_) => spillway_store::BatchKind::Rmw,
                    },
                })
                .collect();
            let mut seen: Vec<Option<Option<Vec<u8>>>> = vec![None; items.len()];
            store
                .apply_batch(&ops, &mut |j, old, out| {
                    seen[j] = Some(old.map(<[u8]>::to_vec));
                    match items[j].2 {
                        BOp::Rmw(by) => {
                            let (r, v) = rmw_counter(old, by);
                            if let Some(v) = v {
                                out.extend_from_slice(&v);
                            }
                            r
                        }
                        _ => Rmw::Keep,
                    }
                })
                .unwrap_or_else(|e| panic!("{kind:?} apply_batch: {e}"));
            for (j, (i, k, b)) in items.iter().enumerate() {
                let want = model.live.get(&(*i, k.clone())).cloned();
                match b {
                    BOp::Get | BOp::Rmw(_) => {
                        assert_eq!(seen[j], Some(want), "{kind:?} batch item {j} ({b:?}) read");
                    }
                    _ => assert_eq!(seen[j], None, "{kind:?} batch item {j} ({b:?}) called f"),
                }
                match b {
                    BOp::Get => {}
                    BOp::Put(v) => apply_to_model(model, &Op::Put(*i, k.clone(), v.clone())),
                    BOp::Delete => apply_to_model(model, &Op::Delete(*i, k.clone())),
                    BOp::Rmw(by) => apply_to_model(model, &Op::Rmw(*i, k.clone(), *by)),
                }
            }
        }
        Op::Rmw(i, k, by) => {
            let n = nsof(&**store, *i);
            let mut seen: Option<Option<Vec<u8>>> = None;
            store
                .rmw(n, k, &mut |old, out| {
                    seen = Some(old.map(<[u8]>::to_vec));
                    let (r, v) = rmw_counter(old, *by);
                    if let Some(v) = v {
                        out.extend_from_slice(&v);
                    }
                    r
                })
                .unwrap_or_else(|e| panic!("{kind:?} rmw: {e}"));
            assert_eq!(
                seen,
                Some(model.live.get(&(*i, k.clone())).cloned()),
                "{kind:?} rmw saw old value"
            );
            apply_to_model(model, op);
        }
        Op::ScanPrefix(i, p) => {
            let n = nsof(&**store, *i);
            let mut got = Vec::new();
            store
                .scan_prefix(n, p, &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    true
                })
                .unwrap_or_else(|e| panic!("{kind:?} scan_prefix: {e}"));
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, k), _)| j == i && k.starts_with(p))
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            if !store.is_ordered(n) {
                got.sort();
            }
            assert_eq!(got, want, "{kind:?} scan_prefix ns {i} prefix {p:?}");
        }
        Op::ScanRange(i, lo, hi) => {
            let n = nsof(&**store, *i);
            let mut got = Vec::new();
            let r = store.scan_range(n, as_ref_bound(lo), as_ref_bound(hi), &mut |k, v| {
                got.push((k.to_vec(), v.to_vec()));
                true
            });
            if !store.is_ordered(n) {
                assert!(
                    matches!(r, Err(spillway_store::Error::Unsupported { .. })),
                    "{kind:?} scan_range must be Unsupported, got {r:?}"
                );
                return;
            }
            r.unwrap_or_else(|e| panic!("{kind:?} scan_range: {e}"));
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, k), _)| j == i && in_range(k, lo, hi))
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "{kind:?} scan_range ns {i} {lo:?}..{hi:?}");
        }
        Op::RangeAny(i, lo, hi, limit) => {
            let n = nsof(&**store, *i);
            let mut got = Vec::new();
            let visited = store
                .range(n, as_ref_bound(lo), as_ref_bound(hi), Order::Any, *limit, &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    true
                })
                .unwrap_or_else(|e| panic!("{kind:?} range Any: {e}"));
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, k), _)| j == i && in_range(k, lo, hi))
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            let what = format!("{kind:?} range Any ns {i} {lo:?}..{hi:?} limit {limit}");
            assert_eq!(visited, got.len(), "{what}: count");
            if store.is_ordered(n) {
                // Key order, so exactly the first `limit` entries.
                assert_eq!(got, want.iter().take(*limit).cloned().collect::<Vec<_>>(), "{what}");
            } else {
                // Any `limit` of them (all of them without a limit), each once.
                assert_eq!(got.len(), want.len().min(*limit), "{what}: how many");
                got.sort();
                got.dedup();
                assert_eq!(got.len(), want.len().min(*limit), "{what}: an entry twice");
                assert!(got.iter().all(|e| want.contains(e)), "{what}: {got:?} not in {want:?}");
            }
        }
        Op::ScanOrdered(i, lo, hi, rev, limit) => {
            let n = nsof(&**store, *i);
            let mut got = Vec::new();
            let dir = if *rev { Direction::Reverse } else { Direction::Forward };
            let r = store.scan_ordered(
                n,
                as_ref_bound(lo),
                as_ref_bound(hi),
                dir,
                *limit,
                &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    true
                },
            );
            if !store.is_ordered(n) {
                assert!(
                    matches!(r, Err(spillway_store::Error::Unsupported { .. })),
                    "{kind:?} scan_ordered must be Unsupported, got {r:?}"
                );
                return;
            }
            let visited = r.unwrap_or_else(|e| panic!("{kind:?} scan_ordered: {e}"));
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, k), _)| j == i && in_range(k, lo, hi))
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            if *rev {
                want.reverse();
            }
            want.truncate(*limit);
            assert_eq!(visited, got.len(), "{kind:?} scan_ordered count");
            assert_eq!(
                got, want,
                "{kind:?} scan_ordered ns {i} {lo:?}..{hi:?} rev {rev} limit {limit}"
            );
        }
        Op::DeleteRange(i, a, b) => {
            let n = nsof(&**store, *i);
            let r = store.delete_range(n, a, b);
            if !store.is_ordered(n) {
                assert!(
                    matches!(r, Err(spillway_store::Error::Unsupported { .. })),
                    "{kind:?} delete_range must be Unsupported, got {r:?}"
                );
                return;
            }
            r.unwrap_or_else(|e| panic!("{kind:?} delete_range: {e}"));
            apply_to_model(model, op);
        }
        Op::CursorWalk(i, prefix, lower, rev, batch) => {
            let n = nsof(&**store, *i);
            if !store.is_ordered(n) {
                return;
            }
            let dir = if *rev { Direction::Reverse } else { Direction::Forward };
            let mut from = prefix.clone();
            from.extend_from_slice(lower);
            let end = spillway_store::cursor::prefix_end(prefix);
            let end_b = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut c =
                Cursor::open_batched(&mut **store, n, Bound::Included(&from), end_b, dir, *batch)
                    .unwrap_or_else(|e| panic!("{kind:?} cursor open: {e}"));
            let mut got = Vec::new();
            while let Some((k, v)) = c.entry() {
                got.push((k.to_vec(), v.to_vec()));
                c.next(&mut **store).unwrap_or_else(|e| panic!("{kind:?} cursor next: {e}"));
            }
            let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, k), _)| j == i && k.starts_with(prefix) && k >= &from)
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            if *rev {
                want.reverse();
            }
            assert_eq!(
                got, want,
                "{kind:?} cursor ns {i} prefix {prefix:?} lower {lower:?} rev {rev}"
            );
        }
        Op::Walk(i, step_len, stop) => {
            let n = nsof(&**store, *i);
            let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut token: Option<Vec<u8>> = None;
            let mut steps = 0usize;
            loop {
                let mut in_step = 0usize;
                let r = store.scan_step(n, token.as_deref(), *step_len, &mut |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    in_step += 1;
                    stop != &Some(in_step)
                });
                match r {
                    Err(spillway_store::Error::Unsupported { .. }) if steps == 0 => return,
                    Err(e) => panic!("{kind:?} scan_step: {e}"),
                    Ok(None) => break,
                    Ok(Some(t)) => token = Some(t),
                }
                steps += 1;
                assert!(steps < 100_000, "{kind:?} walk does not end");
            }
            got.sort();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model
                .live
                .iter()
                .filter(|((j, _), _)| j == i)
                .map(|((_, k), v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(got, want, "{kind:?} walk ns {i} step {step_len} stop {stop:?}");
        }
        Op::Checkpoint if !kind.durable() => {
            let r = store.checkpoint();
            assert!(
                matches!(r, Err(spillway_store::Error::Unsupported { .. })),
                "{kind:?}: a store without a durable level must refuse to checkpoint, got {r:?}"
            );
        }
        Op::Reopen if !kind.durable() => {
            drop(std::mem::replace(store, Box::new(Closed(0))));
            *store = reopen();
            assert_eq!(store.checkpoint_seq(), 0);
            model.live.clear();
        }
        Op::Checkpoint => {
            let before = store.checkpoint_seq();
            let info = store.checkpoint().unwrap_or_else(|e| panic!("{kind:?} checkpoint: {e}"));
            assert_eq!(info.seq, before + 1);
            model.durable = model.live.clone();
        }
        Op::Reopen => {
            let seq = store.checkpoint_seq();
            // The old instance must be closed before its directory is opened again.
            drop(std::mem::replace(store, Box::new(Closed(seq))));
            *store = reopen();
            assert_eq!(store.checkpoint_seq(), seq, "{kind:?} reopened at another checkpoint");
            model.live = model.durable.clone();
        }
    }
}

/// Reads every key of the model back and checks nothing else is there.
pub fn check_all(
    kind: Kind,
    store: &mut Box<dyn StateStore>,
    model: &BTreeMap<(usize, Vec<u8>), Vec<u8>>,
) {
    for ((i, k), v) in model {
        let n = ns(&**store, *i);
        let got = store.get(n, k).unwrap_or_else(|e| panic!("{kind:?} get: {e}"));
        assert_eq!(got.as_ref(), Some(v), "{kind:?} ns {i} key {k:?}");
    }
    for i in [KV, LIST, ORD] {
        let n = ns(&**store, i);
        let mut count = 0usize;
        store
            .scan_prefix(n, b"", &mut |k, v| {
                assert_eq!(
                    model.get(&(i, k.to_vec())).map(Vec::as_slice),
                    Some(v),
                    "{kind:?} extra or wrong key {k:?}"
                );
                count += 1;
                true
            })
            .unwrap_or_else(|e| panic!("{kind:?} scan: {e}"));
        assert_eq!(
            count,
            model.keys().filter(|(j, _)| *j == i).count(),
            "{kind:?} ns {i} key count"
        );
    }
}

/// Stands in for a store between closing and reopening it.
struct Closed(u64);

impl StateStore for Closed {
    fn name(&self) -> &'static str {
        "closed"
    }
    fn namespace(&self, _: &str) -> Result<Ns> {
        unreachable!()
    }
    fn is_ordered(&self, _: Ns) -> bool {
        unreachable!()
    }
    fn get_into(&mut self, _: Ns, _: &[u8], _: &mut Vec<u8>) -> Result<bool> {
        unreachable!()
    }
    fn put(&mut self, _: Ns, _: &[u8], _: &[u8]) -> Result<()> {
        unreachable!()
    }
    fn merge(&mut self, _: Ns, _: &[u8], _: &[u8]) -> Result<()> {
        unreachable!()
    }
    fn delete(&mut self, _: Ns, _: &[u8]) -> Result<()> {
        unreachable!()
    }
    fn rmw(&mut self, _: Ns, _: &[u8], _: &mut RmwFn<'_>) -> Result<()> {
        unreachable!()
    }
    fn range(
        &mut self,
        _: Ns,
        _: Bound<&[u8]>,
        _: Bound<&[u8]>,
        _: Order,
        _: usize,
        _: &mut Visitor<'_>,
    ) -> Result<usize> {
        unreachable!()
    }
    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        unreachable!()
    }
    /// Only the sequence number it stands in for.
    fn stats(&self) -> StoreStats {
        let mut s = StoreStats::default();
        s.checkpoint_seq = self.0;
        s
    }
}
