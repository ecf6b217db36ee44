//! The replayer: applies a stream of [`StateOp`]s to a live [`StateStore`] and measures
//! every op.
//!
//! # What an op does
//! All ops go to one namespace, [`NAMESPACE`] (`"state"`), declared as a list namespace
//! ([`namespace_spec`]) so that `merge` appends an element, as Flink's list state does.
//!
//! | op | store call |
//! |---|---|
//! | get | [`StateStore::get_into`] into one reused buffer |
//! | put | [`StateStore::put`] |
//! | merge | [`StateStore::merge`] (list append) |
//! | delete | [`StateStore::delete`] |
//! | scan | [`StateStoreExt::scan_prefix`] of the op's key; every entry is visited (and its length read) |
//! | seek, next | the iterator emulation below |
//!
//! # Seek and next
//! The replayer keeps one iterator per replayer, i.e. per operator:
//!
//! - **Ordered namespaces** ([`StateStore::is_ordered`]): `seek(k)` opens the store's
//!   [`spillway_store::Cursor`] at `k` (no upper bound, as a RocksDB iterator), which
//!   reads ahead [`ReplayConfig::seek_batch`] entries with one native seek
//!   ([`StateStoreExt::scan_ordered`]); `next` steps it, refilling from just after the
//!   last key when the read-ahead runs out. So a seek costs one native seek and a run of
//!   `n` nexts about `n / seek_batch` further seeks plus one copy per entry. The
//!   cursor's consistency is the store crate's: entries already read ahead are as they
//!   were when read; keys beyond are read when reached (see `spillway_store::cursor`).
//! - **Unordered namespaces** (hash stores): `seek(k)` calls `scan_prefix` with the first
//!   [`ReplayConfig::seek_prefix_len`] bytes of `k` (default 8: the event-key part of
//!   Gadget-style state keys), keeps the entries whose key is `>= k`, at most
//!   [`ReplayConfig::unordered_seek_limit`] of them, and sorts them; `next` moves to the
//!   next of these and never refills. A seek therefore costs a full prefix scan (on the
//!   hash stores, a pass over **every** key of the namespace) plus a sort, and the
//!   iterator ends at the end of the prefix or at the limit; it does not see keys past
//!   the prefix the way an ordered iterator would. This is the honest price of range
//!   reads on a hash store, not a faithful iterator.
//!
//! A `next` with no open cursor (the first op of a stream, or after a seek error)
//! behaves as a seek at the op's key. A `next` past the end is a no-op on an exhausted
//! cursor, counted like any other op.
//!
//! # Pacing and latency
//! - **Closed loop** ([`Pace::Closed`]): ops run back to back as fast as possible; an
//!   op's latency is the time around its store call (two clock reads per op, with
//!   `quanta`'s TSC clock as in [`crate::store_bench`]). Time spent pulling the next op
//!   from its source (decoding a trace, generating) is not in any latency but is in the
//!   wall time.
//! - **Open loop** ([`Pace::Open`]): measured op `i` has the intended start time
//!   `t0 + i / rate`, where `t0` is the start of the first measured op. The replayer waits
//!   (sleeping, then spinning) until an op's intended start, and its latency is measured
//!   from the *intended* start to its end. When the store (or the source) falls behind,
//!   ops start late and their latencies include the queueing delay; no op is skipped and
//!   the schedule never slips (coordinated-omission correct).
//! - **Warm-up**: the first [`ReplayConfig::warmup_ops`] ops are applied as fast as
//!   possible and not measured; the clock (and, open loop, the schedule) starts at the
//!   first measured op.
//! - Latencies are recorded in nanoseconds in HDR histograms (1 ns to 1 h, 3 significant
//!   digits; longer values saturate), one overall and one per [`OpKind`]; reports give
//!   microseconds.
//!
//! # Sampled latency
//! With [`ReplayConfig::latency_every`] `n > 1` (closed loop), only about one op in `n`
//! is timed: after each timed op the next one is drawn `1..2n` ops later (uniform, so
//! `n` on average) from a fixed-seed xorshift generator, so the timed ops fall on
//! every position of a periodic op pattern rather than on one phase of it. The other
//! ops run with no clock read and no histogram record; they are counted in
//! [`ReplayReport::ops`] and the per-kind op counts, and throughput is always all
//! measured ops over the wall time. The suite uses `n = 16` for the in-memory stores,
//! whose ops take tens of nanoseconds, where two clock reads and two histogram records
//! per op (about 25 ns) would be measured as a large part of the op. Open-loop replays
//! time every op (their latency is measured from each op's intended start).
//!
//! # Several operators
//! [`replay_parallel`] runs each job on its own thread with its own store (shared
//! nothing, as Flink runs one state backend per task). [`replay_shared`] runs several op
//! streams on their own threads against one store behind a [`Mutex`], taken once per op:
//! this models operators sharing one store (Gadget paper §6.4 ran several processes
//! against one RocksDB); it is slower than one thread, not a way to go faster. Each
//! stream keeps its own cursor; lock wait counts in latency.
//!
//! # Overhead
//! [`replay_null`] runs the same loop against no store at all (every op is a no-op that
//! only touches the op), so a harness can report the replayer's own cost (clock reads,
//! histogram records, pulling ops) next to a store's time.

use spillway_store::StateStoreExt;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::hint::black_box;
use std::ops::{Bound, Range};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use spillway_store::{AccessHint, NamespaceSpec, Ns, StateStore, StoreOptions};

use super::{OpKind, OpSink, StateOp};

/// The namespace every replayed op goes to.
pub const NAMESPACE: &str = "state";

/// The declaration of [`NAMESPACE`]: a list namespace (merge = list append) with the
/// default access hint (point).
pub fn namespace_spec() -> NamespaceSpec {
    NamespaceSpec::list(NAMESPACE)
}

/// Options for a store in `dir` that the replayer can drive: default budget, the one
/// namespace [`namespace_spec`].
pub fn store_options(dir: impl AsRef<Path>) -> StoreOptions {
    StoreOptions::new(dir).namespace(namespace_spec())
}

/// Like [`store_options`], declaring the namespace with `hint` (an operator's
/// [`OperatorKind::access_hint`](super::OperatorKind::access_hint)), so that a store
/// with several layouts picks the operator's.
pub fn store_options_for(dir: impl AsRef<Path>, hint: AccessHint) -> StoreOptions {
    StoreOptions::new(dir).namespace(namespace_spec().hint(hint))
}

/// An op by reference: what [`Replayer::apply_ref`] takes, and what an [`OpBatch`]
/// holds without one allocation per op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRef<'a> {
    /// What the operator does.
    pub kind: OpKind,
    /// State key.
    pub key: &'a [u8],
    /// Value written (put) or operand appended (merge).
    pub value: &'a [u8],
}

/// Ops packed back to back in one buffer (a reader thread fills it, the replay thread
/// applies it): no allocation per op, and the replay thread reads them sequentially.
#[derive(Clone, Debug, Default)]
pub struct OpBatch {
    events: Vec<u64>,
    kinds: Vec<OpKind>,
    /// End of each op's key and of its value in `bytes` (the key starts where the
    /// previous value ended).
    ends: Vec<(usize, usize)>,
    bytes: Vec<u8>,
}

impl OpBatch {
    /// Appends an op.
    pub fn push(&mut self, input_event: u64, kind: OpKind, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let k = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.events.push(input_event);
        self.kinds.push(kind);
        self.ends.push((k, self.bytes.len()));
    }

    /// Ops held.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the batch holds no op.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Removes every op, keeping the memory.
    pub fn clear(&mut self) {
        self.events.clear();
        self.kinds.clear();
        self.ends.clear();
        self.bytes.clear();
    }

    /// Op `i` and its input event.
    #[inline]
    pub fn get(&self, i: usize) -> (u64, OpRef<'_>) {
        let start = if i == 0 { 0 } else { self.ends[i - 1].1 };
        let (k, v) = self.ends[i];
        (
            self.events[i],
            OpRef { kind: self.kinds[i], key: &self.bytes[start..k], value: &self.bytes[k..v] },
        )
    }
}

/// Any error of an op source, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An op source that can be moved to a replay thread: `(input_event, op)` pairs.
pub type OpStream<'a> = Box<dyn Iterator<Item = Result<(u64, StateOp), BoxError>> + Send + 'a>;

/// Wraps an infallible source of `(input_event, op)` pairs (a generator) into the
/// `Result` items [`replay`] takes.
pub fn infallible<I>(ops: I) -> impl Iterator<Item = Result<(u64, StateOp), Infallible>>
where
    I: IntoIterator<Item = (u64, StateOp)>,
{
    ops.into_iter().map(Ok)
}

/// Boxes an infallible source of `(input_event, op)` pairs as an [`OpStream`].
pub fn op_stream<'a, I>(ops: I) -> OpStream<'a>
where
    I: IntoIterator<Item = (u64, StateOp)>,
    I::IntoIter: Send + 'a,
{
    Box::new(ops.into_iter().map(Ok))
}

/// How ops are paced.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Pace {
    /// As fast as possible; latency is the time of each store call.
    #[default]
    Closed,
    /// At a target rate; latency runs from each op's intended start (see module docs).
    Open {
        /// Target rate in ops per second (finite, > 0).
        ops_per_sec: f64,
    },
}

/// How a replay runs.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayConfig {
    /// Closed or open loop. Default closed.
    pub pace: Pace,
    /// Ops applied before measuring starts. Default 0.
    pub warmup_ops: u64,
    /// Ordered stores: entries one emulated-iterator scan buffers (>= 1). Default 64.
    pub seek_batch: usize,
    /// Unordered stores: bytes of a seek key used as the scan prefix. Default 8.
    pub seek_prefix_len: usize,
    /// Unordered stores: most entries one seek keeps (>= 1). Default 1024.
    pub unordered_seek_limit: usize,
    /// Store errors tolerated (counted in [`ReplayReport::errors`], op not measured)
    /// before the replay fails. Default 0: the first error fails it.
    pub max_errors: u64,
    /// Closed loop: time one op in this many on average (>= 1; default 1, every op).
    /// See the module docs, "Sampled latency".
    pub latency_every: u32,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            pace: Pace::Closed,
            warmup_ops: 0,
            seek_batch: 64,
            seek_prefix_len: 8,
            unordered_seek_limit: 1024,
            max_errors: 0,
            latency_every: 1,
        }
    }
}

impl ReplayConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ReplayError> {
        if let Pace::Open { ops_per_sec } = self.pace {
            if !(ops_per_sec.is_finite() && ops_per_sec > 0.0) {
                return Err(ReplayError::Config {
                    field: "pace.ops_per_sec",
                    detail: format!("must be a finite rate above 0, got {ops_per_sec}"),
                });
            }
        }
        if self.seek_batch == 0 {
            return Err(ReplayError::Config {
                field: "seek_batch",
                detail: "must be at least 1".into(),
            });
        }
        if self.latency_every == 0 {
            return Err(ReplayError::Config {
                field: "latency_every",
                detail: "must be at least 1".into(),
            });
        }
        if self.unordered_seek_limit == 0 {
            return Err(ReplayError::Config {
                field: "unordered_seek_limit",
                detail: "must be at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Latencies of one op kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindReport {
    /// Measured ops of this kind.
    pub ops: u64,
    /// Median latency in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_us: f64,
    /// 99.9th percentile latency in microseconds.
    pub p999_us: f64,
}

/// What one replay measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Store name ("mem", "hashlog", "rocksdb"; "null" for [`replay_null`]).
    pub store: String,
    /// Measured ops (after warm-up, without failed ops).
    pub ops: u64,
    /// Ops applied during warm-up (not measured).
    pub warmup_ops: u64,
    /// Wall seconds from the start of the first measured op (open loop: its intended
    /// start) to the end of the last.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Open loop: the target rate.
    pub target_ops_per_sec: Option<f64>,
    /// Median latency in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_us: f64,
    /// 99.9th percentile latency in microseconds.
    pub p999_us: f64,
    /// Largest latency in microseconds.
    pub max_us: f64,
    /// Per op kind (by [`OpKind::name`]), kinds that occurred only.
    pub per_kind: BTreeMap<String, KindReport>,
    /// Store calls (`scan_range`/`scan_prefix`) issued by the seek/next emulation.
    pub seek_scans: u64,
    /// Store errors tolerated under [`ReplayConfig::max_errors`].
    pub errors: u64,
    /// Stores with several layouts (adaptive): the layout serving [`NAMESPACE`] at the
    /// end, with the migrations that led there (e.g. `"timelog (1 migration)"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// One op in this many was timed into the latency histograms (1: every op).
    pub latency_every: u32,
    /// Seconds the replay thread waited for the op source (a reader thread decoding the
    /// trace, [`replay_pipelined`]); 0 when the source ran on the replay thread.
    pub source_wait_seconds: f64,
}

/// How a store with several layouts reports where [`NAMESPACE`] lives.
fn layout_of(stats: &spillway_store::StoreStats) -> Option<String> {
    let l = stats.layouts().iter().find(|l| l.namespace == NAMESPACE)?;
    let mut s = l.layout.clone();
    if let Some(to) = &l.migrating_to {
        s.push_str(&format!(" migrating to {to}"));
    }
    if l.migrations > 0 {
        let plural = if l.migrations == 1 { "" } else { "s" };
        s.push_str(&format!(
            " ({} migration{plural}, {} entries moved)",
            l.migrations, l.moved_entries
        ));
    }
    Some(s)
}

/// Why a replay failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// A setting is out of range.
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// The store lacks the replay namespace.
    Namespace {
        /// Store name.
        store: &'static str,
        /// The store's error.
        source: spillway_store::Error,
    },
    /// A store call failed (after [`ReplayConfig::max_errors`] tolerated ones).
    Store {
        /// 0-based number of the op in its stream (warm-up included).
        op_index: u64,
        /// The op's input event.
        input_event: u64,
        /// The op's kind.
        kind: OpKind,
        /// The op's key.
        key: Vec<u8>,
        /// The store's error.
        source: spillway_store::Error,
    },
    /// The op source failed.
    Source {
        /// 0-based number of the op that could not be read.
        op_index: u64,
        /// The source's error.
        source: BoxError,
    },
    /// One job of [`replay_parallel`] or [`replay_shared`] failed.
    Job {
        /// 0-based job number.
        job: usize,
        /// Its error.
        source: Box<ReplayError>,
    },
    /// A replay thread panicked.
    Panicked {
        /// 0-based job number.
        job: usize,
    },
    /// The shared store's lock was poisoned by a panicking thread.
    LockPoisoned,
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Config { field, detail } => write!(f, "replay setting {field}: {detail}"),
            ReplayError::Namespace { store, .. } => write!(
                f,
                "the {store} store has no namespace {NAMESPACE:?}; open it with \
                 replay::store_options or declare replay::namespace_spec()"
            ),
            ReplayError::Store { op_index, input_event, kind, key, .. } => write!(
                f,
                "op {op_index} ({kind} of key \"{}\", input event {input_event}) failed",
                key.escape_ascii()
            ),
            ReplayError::Source { op_index, .. } => write!(f, "reading op {op_index} failed"),
            ReplayError::Job { job, .. } => write!(f, "replay job {job} failed"),
            ReplayError::Panicked { job } => write!(f, "replay job {job} panicked"),
            ReplayError::LockPoisoned => {
                f.write_str("the shared store's lock was poisoned by a panicking replay thread")
            }
        }
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::Namespace { source, .. } | ReplayError::Store { source, .. } => {
                Some(source)
            }
            ReplayError::Source { source, .. } => Some(source.as_ref()),
            ReplayError::Job { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// Highest latency a histogram holds: one hour, in nanoseconds.
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// What the replayer applies ops to.
enum Target<'s> {
    Store { store: &'s mut dyn StateStore, ns: Ns },
    Shared { store: &'s Mutex<&'s mut dyn StateStore>, ns: Ns },
    Null,
}

/// The replayer's iterator: the store's cursor on ordered namespaces, else one sorted
/// batch of prefix-scan entries in flat arenas.
#[derive(Default)]
struct Cursor {
    open: bool,
    /// The store's cursor (ordered namespaces).
    native: Option<spillway_store::Cursor>,
    keys: Vec<u8>,
    vals: Vec<u8>,
    spans: Vec<(Range<usize>, Range<usize>)>,
    /// Index of the current entry in `spans`; `>= spans.len()` means past the end.
    pos: usize,
}

impl Cursor {
    fn clear_batch(&mut self) {
        self.keys.clear();
        self.vals.clear();
        self.spans.clear();
        self.pos = 0;
    }

    fn push(
        keys: &mut Vec<u8>,
        vals: &mut Vec<u8>,
        spans: &mut Vec<(Range<usize>, Range<usize>)>,
        k: &[u8],
        v: &[u8],
    ) {
        let ks = keys.len();
        keys.extend_from_slice(k);
        let vs = vals.len();
        vals.extend_from_slice(v);
        spans.push((ks..keys.len(), vs..vals.len()));
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        if let Some(c) = &self.native {
            return c.entry();
        }
        let (k, v) = self.spans.get(self.pos)?;
        Some((&self.keys[k.clone()], &self.vals[v.clone()]))
    }

    fn close(&mut self) {
        self.open = false;
        self.native = None;
        self.clear_batch();
    }
}

/// Number of op kinds (the length of [`OpKind::ALL`]).
const KINDS: usize = OpKind::ALL.len();

/// Applies ops to one store (or to nothing, see [`Replayer::null`]) and measures them.
/// Implements [`OpSink`], so a generator can drive it online; [`replay`] drives it from
/// an iterator. [`Replayer::finish`] gives the report.
pub struct Replayer<'s> {
    target: Target<'s>,
    store_name: &'static str,
    ordered: bool,
    cfg: ReplayConfig,
    clock: quanta::Clock,
    all: Histogram<u64>,
    per_kind: Vec<Histogram<u64>>,
    /// Ops fed so far (warm-up included).
    seen: u64,
    /// Ops measured so far.
    measured: u64,
    errors: u64,
    /// Raw clock value of the start of measurement.
    t0: Option<u64>,
    /// Raw clock value of the end of the last measured op.
    last_end: u64,
    /// Whether ops ran untimed since `last_end` was read (sampled latency).
    end_stale: bool,
    /// Measured ops per kind (the histograms hold only the timed ones).
    kind_ops: [u64; KINDS],
    /// Ops until the next timed one (sampled latency).
    sample_in: u32,
    /// State of the xorshift generator drawing the gaps between timed ops.
    sample_rng: u64,
    /// Seconds spent waiting for the op source.
    source_wait: f64,
    read_buf: Vec<u8>,
    cursor: Cursor,
    seek_scans: u64,
}

impl fmt::Debug for Replayer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replayer")
            .field("store", &self.store_name)
            .field("ordered", &self.ordered)
            .field("cfg", &self.cfg)
            .field("seen", &self.seen)
            .field("measured", &self.measured)
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

fn lookup_ns(store: &dyn StateStore) -> Result<Ns, ReplayError> {
    store
        .namespace(NAMESPACE)
        .map_err(|source| ReplayError::Namespace { store: store.name(), source })
}

impl<'s> Replayer<'s> {
    /// A replayer applying ops to `store`, whose namespace [`NAMESPACE`] must exist.
    pub fn new(store: &'s mut dyn StateStore, cfg: ReplayConfig) -> Result<Self, ReplayError> {
        cfg.validate()?;
        let ns = lookup_ns(store)?;
        let (name, ordered) = (store.name(), store.is_ordered(ns));
        Ok(Self::with_target(Target::Store { store, ns }, name, ordered, cfg))
    }

    /// A replayer whose store does nothing: measures the replayer's own overhead.
    pub fn null(cfg: ReplayConfig) -> Result<Self, ReplayError> {
        cfg.validate()?;
        Ok(Self::with_target(Target::Null, "null", false, cfg))
    }

    fn with_target(
        target: Target<'s>,
        store_name: &'static str,
        ordered: bool,
        cfg: ReplayConfig,
    ) -> Self {
        Replayer {
            target,
            store_name,
            ordered,
            cfg,
            clock: quanta::Clock::new(),
            all: new_histogram(),
            per_kind: (0..KINDS).map(|_| new_histogram()).collect(),
            seen: 0,
            measured: 0,
            errors: 0,
            t0: None,
            last_end: 0,
            end_stale: false,
            kind_ops: [0; KINDS],
            sample_in: 1,
            sample_rng: 0x9E37_79B9_7F4A_7C15,
            source_wait: 0.0,
            read_buf: Vec::new(),
            cursor: Cursor::default(),
            seek_scans: 0,
        }
    }

    /// Replaces the clock (tests use `quanta::Clock::mock()`). Call before the first op.
    pub fn with_clock(mut self, clock: quanta::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The entry the emulated iterator stands on after the last seek or next (key,
    /// value), or `None` if it is past the end or no seek happened.
    pub fn current(&self) -> Option<(&[u8], &[u8])> {
        if self.cursor.open {
            self.cursor.current()
        } else {
            None
        }
    }

    /// Ops fed so far, warm-up included.
    pub fn ops_seen(&self) -> u64 {
        self.seen
    }

    /// Applies one op and, past the warm-up, measures it.
    pub fn apply(&mut self, input_event: u64, op: &StateOp) -> Result<(), ReplayError> {
        self.apply_ref(input_event, OpRef { kind: op.kind, key: &op.key, value: &op.value })
    }

    /// [`apply`](Self::apply) of an op given by reference (from an [`OpBatch`]).
    #[inline]
    pub fn apply_ref(&mut self, input_event: u64, op: OpRef<'_>) -> Result<(), ReplayError> {
        let index = self.seen;
        self.seen += 1;
        if index < self.cfg.warmup_ops {
            self.apply_counted(index, input_event, op)?;
            return Ok(());
        }
        let m = index - self.cfg.warmup_ops;
        match self.cfg.pace {
            Pace::Closed if self.cfg.latency_every > 1 && self.t0.is_some() => {
                self.sample_in -= 1;
                if self.sample_in == 0 {
                    self.sample_in = self.next_gap();
                    let start = self.clock.raw();
                    let ok = self.apply_counted(index, input_event, op)?;
                    let end = self.clock.raw();
                    self.last_end = end;
                    self.end_stale = false;
                    if ok {
                        self.record(op.kind, self.clock.delta_as_nanos(start, end));
                    }
                } else if self.apply_counted(index, input_event, op)? {
                    self.measured += 1;
                    self.kind_ops[op.kind as usize] += 1;
                    self.end_stale = true;
                }
            }
            Pace::Closed => {
                let start = self.clock.raw();
                self.t0.get_or_insert(start);
                let ok = self.apply_counted(index, input_event, op)?;
                let end = self.clock.raw();
                self.last_end = end;
                if ok {
                    self.record(op.kind, self.clock.delta_as_nanos(start, end));
                }
            }
            Pace::Open { ops_per_sec } => {
                let t0 = *self.t0.get_or_insert_with(|| self.clock.raw());
                // Exact to the nanosecond below 2^53 ns (104 days).
                let intended = (m as f64 * 1e9 / ops_per_sec) as u64;
                self.wait_until(t0, intended);
                let ok = self.apply_counted(index, input_event, op)?;
                let end = self.clock.raw();
                self.last_end = end;
                if ok {
                    let end_ns = self.clock.delta_as_nanos(t0, end);
                    self.record(op.kind, end_ns.saturating_sub(intended));
                }
            }
        }
        Ok(())
    }

    /// Waits until `intended` ns after raw time `t0`: sleeps while more than a
    /// millisecond away, then spins. Returns at once if that time has passed.
    fn wait_until(&self, t0: u64, intended: u64) {
        loop {
            let now = self.clock.delta_as_nanos(t0, self.clock.raw());
            if now >= intended {
                return;
            }
            let left = intended - now;
            if left > 1_000_000 {
                std::thread::sleep(Duration::from_nanos(left - 500_000));
            } else if left > 50_000 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Gap to the next timed op: uniform in `1..2n` (mean `n`), from a xorshift64*
    /// generator with a fixed seed, so the timed ops are spread over the op mix
    /// instead of falling on a fixed phase of a periodic pattern.
    fn next_gap(&mut self) -> u32 {
        let mut x = self.sample_rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.sample_rng = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
        let span = 2 * u64::from(self.cfg.latency_every) - 1;
        1 + (r % span) as u32
    }

    fn record(&mut self, kind: OpKind, ns: u64) {
        self.measured += 1;
        self.kind_ops[kind as usize] += 1;
        self.all.saturating_record(ns);
        self.per_kind[kind as usize].saturating_record(ns);
    }

    /// Applies `op`; a tolerated store error returns `Ok(false)`.
    #[inline]
    fn apply_counted(
        &mut self,
        index: u64,
        input_event: u64,
        op: OpRef<'_>,
    ) -> Result<bool, ReplayError> {
        match self.apply_op(op) {
            Ok(Ok(())) => Ok(true),
            Err(()) => Err(ReplayError::LockPoisoned),
            Ok(Err(source)) => {
                if matches!(op.kind, OpKind::Seek | OpKind::Next) {
                    self.cursor.close();
                }
                if self.errors < self.cfg.max_errors {
                    self.errors += 1;
                    Ok(false)
                } else {
                    Err(ReplayError::Store {
                        op_index: index,
                        input_event,
                        kind: op.kind,
                        key: op.key.to_vec(),
                        source,
                    })
                }
            }
        }
    }

    /// Applies `op`; `Err(())` if the shared store's lock is poisoned.
    #[inline]
    fn apply_op(&mut self, op: OpRef<'_>) -> Result<spillway_store::Result<()>, ()> {
        let Replayer { target, ordered, cfg, read_buf, cursor, seek_scans, .. } = self;
        match target {
            Target::Store { store, ns } => {
                Ok(apply_to(&mut **store, *ns, *ordered, cfg, op, read_buf, cursor, seek_scans))
            }
            Target::Shared { store, ns } => {
                // A poisoned lock means another replay thread panicked mid-op, perhaps
                // leaving the store half-updated: stop.
                let mut guard = store.lock().map_err(|_| ())?;
                Ok(apply_to(&mut **guard, *ns, *ordered, cfg, op, read_buf, cursor, seek_scans))
            }
            Target::Null => {
                black_box((op.kind, op.key, op.value));
                Ok(Ok(()))
            }
        }
    }

    /// The report of everything measured so far.
    pub fn report(&self) -> ReplayReport {
        let end = if self.end_stale { self.clock.raw() } else { self.last_end };
        let seconds = match self.t0 {
            Some(t0) if self.measured > 0 => self.clock.delta(t0, end).as_secs_f64(),
            _ => 0.0,
        };
        let per_kind = OpKind::ALL
            .into_iter()
            .filter_map(|k| {
                let h = &self.per_kind[k as usize];
                (self.kind_ops[k as usize] > 0).then(|| {
                    let r = KindReport {
                        ops: self.kind_ops[k as usize],
                        p50_us: us(h, 0.5),
                        p99_us: us(h, 0.99),
                        p999_us: us(h, 0.999),
                    };
                    (k.name().to_string(), r)
                })
            })
            .collect();
        ReplayReport {
            store: self.store_name.to_string(),
            ops: self.measured,
            warmup_ops: self.seen.min(self.cfg.warmup_ops),
            seconds,
            ops_per_sec: if seconds > 0.0 { self.measured as f64 / seconds } else { 0.0 },
            target_ops_per_sec: match self.cfg.pace {
                Pace::Closed => None,
                Pace::Open { ops_per_sec } => Some(ops_per_sec),
            },
            p50_us: us(&self.all, 0.5),
            p99_us: us(&self.all, 0.99),
            p999_us: us(&self.all, 0.999),
            max_us: self.all.max() as f64 / 1e3,
            per_kind,
            seek_scans: self.seek_scans,
            errors: self.errors,
            layout: match &self.target {
                Target::Store { store, .. } => layout_of(&store.stats()),
                Target::Shared { store, .. } => {
                    store.lock().ok().and_then(|s| layout_of(&s.stats()))
                }
                Target::Null => None,
            },
            latency_every: match self.cfg.pace {
                Pace::Closed => self.cfg.latency_every,
                Pace::Open { .. } => 1,
            },
            source_wait_seconds: self.source_wait,
        }
    }

    /// Ends the replay and gives its report.
    pub fn finish(self) -> ReplayReport {
        self.report()
    }

    /// The overall latency histogram (nanoseconds).
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.all
    }

    /// The latency histogram (nanoseconds) of one op kind.
    pub fn kind_histogram(&self, kind: OpKind) -> &Histogram<u64> {
        &self.per_kind[kind as usize]
    }
}

impl OpSink for Replayer<'_> {
    type Error = ReplayError;
    fn op(&mut self, input_event: u64, op: &StateOp) -> Result<(), ReplayError> {
        self.apply(input_event, op)
    }
}

/// One op against a store (see the module docs for the mapping).
#[allow(clippy::too_many_arguments)]
#[inline]
fn apply_to(
    store: &mut dyn StateStore,
    ns: Ns,
    ordered: bool,
    cfg: &ReplayConfig,
    op: OpRef<'_>,
    read_buf: &mut Vec<u8>,
    cursor: &mut Cursor,
    seek_scans: &mut u64,
) -> spillway_store::Result<()> {
    match op.kind {
        OpKind::Get => {
            black_box(store.get_into(ns, op.key, read_buf)?);
        }
        OpKind::Put => store.put(ns, op.key, op.value)?,
        OpKind::Merge => store.merge(ns, op.key, op.value)?,
        OpKind::Delete => store.delete(ns, op.key)?,
        OpKind::Scan => {
            let mut bytes = 0usize;
            store.scan_prefix(ns, op.key, &mut |k, v| {
                bytes += k.len() + v.len();
                true
            })?;
            black_box(bytes);
        }
        OpKind::Seek => seek(store, ns, ordered, cfg, op.key, cursor, seek_scans)?,
        OpKind::Next => {
            if !cursor.open {
                seek(store, ns, ordered, cfg, op.key, cursor, seek_scans)?;
            } else if let Some(c) = cursor.native.as_mut() {
                let before = c.reads();
                c.next(store)?;
                *seek_scans += c.reads() - before;
            } else {
                cursor.pos = cursor.pos.saturating_add(1).min(cursor.spans.len());
            }
            black_box(cursor.current());
        }
    }
    Ok(())
}

/// Positions the cursor on the first entry `>= key`.
fn seek(
    store: &mut dyn StateStore,
    ns: Ns,
    ordered: bool,
    cfg: &ReplayConfig,
    key: &[u8],
    cursor: &mut Cursor,
    seek_scans: &mut u64,
) -> spillway_store::Result<()> {
    cursor.close();
    *seek_scans += 1;
    if ordered {
        cursor.native = Some(spillway_store::Cursor::open_batched(
            store,
            ns,
            Bound::Included(key),
            Bound::Unbounded,
            spillway_store::Direction::Forward,
            cfg.seek_batch,
        )?);
    } else {
        let prefix = &key[..key.len().min(cfg.seek_prefix_len)];
        let limit = cfg.unordered_seek_limit;
        let Cursor { keys, vals, spans, .. } = cursor;
        store.scan_prefix(ns, prefix, &mut |k, v| {
            if k >= key {
                Cursor::push(keys, vals, spans, k, v);
            }
            spans.len() < limit
        })?;
        spans.sort_unstable_by(|a, b| keys[a.0.clone()].cmp(&keys[b.0.clone()]));
    }
    cursor.open = true;
    black_box(cursor.current());
    Ok(())
}

/// Feeds every op of `ops` to `r`.
fn drive<I, E>(r: &mut Replayer<'_>, ops: I) -> Result<(), ReplayError>
where
    I: Iterator<Item = Result<(u64, StateOp), E>>,
    E: Into<BoxError>,
{
    for item in ops {
        let (input_event, op) =
            item.map_err(|e| ReplayError::Source { op_index: r.ops_seen(), source: e.into() })?;
        r.apply(input_event, &op)?;
    }
    Ok(())
}

/// Ops a reader thread hands over at a time ([`replay_pipelined`]).
const PIPE_BATCH: usize = 4096;

/// What the reader thread of [`drive_pipelined`] runs: fills the (cleared) batch with
/// the next ops and says whether more may follow.
pub type BatchFill<'a> = Box<dyn FnMut(&mut OpBatch) -> Result<bool, BoxError> + Send + 'a>;

/// A [`BatchFill`] over an iterator of `(input_event, op)` pairs, [`PIPE_BATCH`] ops
/// per batch.
pub fn fill_from_iter<'a, I, E>(ops: I) -> BatchFill<'a>
where
    I: Iterator<Item = Result<(u64, StateOp), E>> + Send + 'a,
    E: Into<BoxError>,
{
    let mut ops = ops;
    Box::new(move |batch: &mut OpBatch| {
        while batch.len() < PIPE_BATCH {
            match ops.next() {
                Some(item) => {
                    let (n, op) = item.map_err(Into::into)?;
                    batch.push(n, op.kind, &op.key, &op.value);
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    })
}

/// A [`BatchFill`] decoding a binary trace block by block straight into the batches
/// ([`TraceReader::fill_batch`](crate::trace::binary::TraceReader::fill_batch)).
pub fn fill_from_trace<'a, R: std::io::Read + Send + 'a>(
    mut reader: crate::trace::binary::TraceReader<R>,
) -> BatchFill<'a> {
    Box::new(move |batch: &mut OpBatch| {
        while batch.len() < PIPE_BATCH {
            if !reader.fill_batch(batch)? {
                return Ok(false);
            }
        }
        Ok(true)
    })
}

/// Feeds every op to `r`, with the ops produced (a trace decoded) by `fill` on a reader
/// thread of its own and handed over in [`OpBatch`]es through a bounded channel;
/// replayed batches go back to the reader to be refilled, so the replay thread neither
/// decodes nor allocates. Time the replay thread waits for a batch is added to
/// [`ReplayReport::source_wait_seconds`].
fn drive_pipelined(r: &mut Replayer<'_>, fill: BatchFill<'_>) -> Result<(), ReplayError> {
    use std::sync::mpsc::{channel, sync_channel, TryRecvError};
    std::thread::scope(|scope| {
        // Created inside the scope so that an early return drops the receiver and the
        // reader's next send fails instead of blocking the scope's join.
        let (tx, rx) = sync_channel::<Result<OpBatch, BoxError>>(4);
        let (back_tx, back_rx) = channel::<OpBatch>();
        scope.spawn(move || {
            let mut fill = fill;
            loop {
                let mut batch = back_rx.try_recv().unwrap_or_default();
                batch.clear();
                let (more, failed) = match fill(&mut batch) {
                    Ok(more) => (more, None),
                    Err(e) => (false, Some(e)),
                };
                if !batch.is_empty() && tx.send(Ok(batch)).is_err() {
                    return;
                }
                if let Some(e) = failed {
                    let _ = tx.send(Err(e));
                    return;
                }
                if !more {
                    return;
                }
            }
        });
        loop {
            let item = match rx.try_recv() {
                Ok(b) => b,
                Err(TryRecvError::Disconnected) => return Ok(()),
                Err(TryRecvError::Empty) => {
                    let t = std::time::Instant::now();
                    let b = rx.recv();
                    r.source_wait += t.elapsed().as_secs_f64();
                    match b {
                        Ok(b) => b,
                        Err(_) => return Ok(()),
                    }
                }
            };
            let batch =
                item.map_err(|source| ReplayError::Source { op_index: r.ops_seen(), source })?;
            for i in 0..batch.len() {
                let (input_event, op) = batch.get(i);
                r.apply_ref(input_event, op)?;
            }
            let _ = back_tx.send(batch);
        }
    })
}

/// [`replay`] with the op source on a reader thread of its own (see
/// `drive_pipelined`): for traces, whose decoding would otherwise be timed with the
/// store on the replay thread.
pub fn replay_pipelined(
    store: &mut dyn StateStore,
    fill: BatchFill<'_>,
    cfg: &ReplayConfig,
) -> Result<ReplayReport, ReplayError> {
    let mut r = Replayer::new(store, cfg.clone())?;
    drive_pipelined(&mut r, fill)?;
    Ok(r.finish())
}

/// [`replay_null`] with the op source on a reader thread (see [`replay_pipelined`]).
pub fn replay_null_pipelined(
    fill: BatchFill<'_>,
    cfg: &ReplayConfig,
) -> Result<ReplayReport, ReplayError> {
    let mut r = Replayer::null(cfg.clone())?;
    drive_pipelined(&mut r, fill)?;
    Ok(r.finish())
}

/// Replays `ops` (`(input_event, op)` pairs) against `store` in the namespace
/// [`NAMESPACE`] and reports the measurements.
pub fn replay<I, E>(
    store: &mut dyn StateStore,
    ops: I,
    cfg: &ReplayConfig,
) -> Result<ReplayReport, ReplayError>
where
    I: Iterator<Item = Result<(u64, StateOp), E>>,
    E: Into<BoxError>,
{
    let mut r = Replayer::new(store, cfg.clone())?;
    drive(&mut r, ops)?;
    Ok(r.finish())
}

/// Runs the replay loop of [`replay`] over `ops` with a store that does nothing, to
/// measure the replayer's own overhead.
pub fn replay_null<I, E>(ops: I, cfg: &ReplayConfig) -> Result<ReplayReport, ReplayError>
where
    I: Iterator<Item = Result<(u64, StateOp), E>>,
    E: Into<BoxError>,
{
    let mut r = Replayer::null(cfg.clone())?;
    drive(&mut r, ops)?;
    Ok(r.finish())
}

/// One operator of [`replay_parallel`]: its ops and its own store.
pub struct ReplayJob<'a> {
    /// The ops.
    pub ops: OpStream<'a>,
    /// The store, used by this job only (the caller keeps it for inspection).
    pub store: &'a mut dyn StateStore,
}

impl fmt::Debug for ReplayJob<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayJob").field("store", &self.store.name()).finish_non_exhaustive()
    }
}

fn join_all<'scope>(
    handles: Vec<std::thread::ScopedJoinHandle<'scope, Result<ReplayReport, ReplayError>>>,
) -> Result<Vec<ReplayReport>, ReplayError> {
    let mut reports = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for (job, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(r)) => reports.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(ReplayError::Job { job, source: Box::new(e) });
            }
            Err(_) => {
                first_err.get_or_insert(ReplayError::Panicked { job });
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(reports),
    }
}

/// Replays each job on its own thread against its own store (shared nothing). Returns
/// the reports in job order, or the error of the first job (by number) that failed;
/// the other jobs still run to their end.
pub fn replay_parallel(
    jobs: Vec<ReplayJob<'_>>,
    cfg: &ReplayConfig,
) -> Result<Vec<ReplayReport>, ReplayError> {
    cfg.validate()?;
    std::thread::scope(|s| {
        let handles = jobs
            .into_iter()
            .map(|job| {
                s.spawn(move || {
                    let mut r = Replayer::new(job.store, cfg.clone())?;
                    drive(&mut r, job.ops)?;
                    Ok(r.finish())
                })
            })
            .collect();
        join_all(handles)
    })
}

/// Replays several op streams, each on its own thread, against one shared `store`
/// behind a mutex taken once per op. Models operators sharing one store; it is not
/// faster than one thread (the lock serializes every op, and lock wait counts in each
/// op's latency). Threads take the lock in whatever order the OS grants it: there is no
/// fairness or fixed interleaving, so the final state is deterministic only if the
/// streams touch disjoint keys. Each stream has its own seek cursor.
pub fn replay_shared(
    streams: Vec<OpStream<'_>>,
    store: &mut dyn StateStore,
    cfg: &ReplayConfig,
) -> Result<Vec<ReplayReport>, ReplayError> {
    cfg.validate()?;
    let ns = lookup_ns(store)?;
    let (name, ordered) = (store.name(), store.is_ordered(ns));
    let shared: Mutex<&mut dyn StateStore> = Mutex::new(store);
    let shared = &shared;
    std::thread::scope(|s| {
        let handles = streams
            .into_iter()
            .map(|ops| {
                s.spawn(move || {
                    let target = Target::Shared { store: shared, ns };
                    let mut r = Replayer::with_target(target, name, ordered, cfg.clone());
                    drive(&mut r, ops)?;
                    Ok(r.finish())
                })
            })
            .collect();
        join_all(handles)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use proptest::prelude::*;
    use spillway_store::{
        CheckpointInfo, HashLogOptions, HashLogStore, MemStore, Order, RmwFn, StoreStats, Visitor,
    };

    use super::*;

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;
    type OpenFn = fn(&Path) -> Box<dyn StateStore>;

    fn model_apply(m: &mut Model, op: &StateOp) {
        match op.kind {
            OpKind::Put => {
                m.insert(op.key.clone(), op.value.clone());
            }
            OpKind::Merge => {
                spillway_store::list::push(m.entry(op.key.clone()).or_default(), &op.value)
            }
            OpKind::Delete => {
                m.remove(&op.key);
            }
            OpKind::Get | OpKind::Scan | OpKind::Seek | OpKind::Next => {}
        }
    }

    fn contents(store: &mut dyn StateStore) -> Model {
        let ns = store.namespace(NAMESPACE).unwrap();
        let mut out = Model::new();
        store
            .scan_prefix(ns, b"", &mut |k, v| {
                out.insert(k.to_vec(), v.to_vec());
                true
            })
            .unwrap();
        out
    }

    fn mem(dir: &Path) -> MemStore {
        MemStore::open(store_options(dir)).unwrap()
    }

    fn hashlog(dir: &Path) -> HashLogStore {
        // A 1 MiB budget with 64 KiB pages: the state spills to disk.
        let h = HashLogOptions::default()
            .page_size(64 << 10)
            .segment_size(256 << 10)
            .compaction_step(32 << 10)
            .garbage_ratio(0.3);
        HashLogStore::open(store_options(dir).memory_budget(1 << 20), h).unwrap()
    }

    /// A MemStore that claims order (sorted scans, `scan_range` by collect and sort) and,
    /// optionally, advances a mock clock by a fixed time per op.
    struct Wrap {
        inner: MemStore,
        ordered: bool,
        tick: Option<(Arc<quanta::Mock>, u64)>,
    }

    impl Wrap {
        fn new(dir: &Path, ordered: bool) -> Self {
            Wrap { inner: mem(dir), ordered, tick: None }
        }
        fn tick(&self) {
            if let Some((m, ns)) = &self.tick {
                m.increment(*ns);
            }
        }
        fn sorted(&mut self, ns: Ns, prefix: &[u8]) -> spillway_store::Result<Model> {
            let mut all = Model::new();
            self.inner.scan_prefix(ns, prefix, &mut |k, v| {
                all.insert(k.to_vec(), v.to_vec());
                true
            })?;
            Ok(all)
        }
    }

    impl StateStore for Wrap {
        fn name(&self) -> &'static str {
            "wrap"
        }
        fn namespace(&self, name: &str) -> spillway_store::Result<Ns> {
            self.inner.namespace(name)
        }
        fn is_ordered(&self, _: Ns) -> bool {
            self.ordered
        }
        fn get_into(
            &mut self,
            ns: Ns,
            key: &[u8],
            out: &mut Vec<u8>,
        ) -> spillway_store::Result<bool> {
            self.tick();
            self.inner.get_into(ns, key, out)
        }
        fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> spillway_store::Result<()> {
            self.tick();
            self.inner.put(ns, key, value)
        }
        fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> spillway_store::Result<()> {
            self.tick();
            self.inner.merge(ns, key, operand)
        }
        fn delete(&mut self, ns: Ns, key: &[u8]) -> spillway_store::Result<()> {
            self.tick();
            self.inner.delete(ns, key)
        }
        fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> spillway_store::Result<()> {
            self.tick();
            self.inner.rmw(ns, key, f)
        }
        /// An ordered wrapper sorts what the unordered store under it holds.
        fn range(
            &mut self,
            ns: Ns,
            start: Bound<&[u8]>,
            end: Bound<&[u8]>,
            order: Order,
            limit: usize,
            visit: &mut Visitor<'_>,
        ) -> spillway_store::Result<usize> {
            self.tick();
            if !self.ordered {
                return self.inner.range(ns, start, end, order, limit, visit);
            }
            let all = self.sorted(ns, b"")?;
            let mut n = 0;
            let mut visit_one = |k: &[u8], v: &[u8]| {
                n += 1;
                visit(k, v) && n < limit
            };
            let range = all.range::<[u8], _>((start, end));
            if limit > 0 {
                if order == Order::Reverse {
                    for (k, v) in range.rev() {
                        if !visit_one(k, v) {
                            break;
                        }
                    }
                } else {
                    for (k, v) in range {
                        if !visit_one(k, v) {
                            break;
                        }
                    }
                }
            }
            Ok(n)
        }
        fn checkpoint(&mut self) -> spillway_store::Result<CheckpointInfo> {
            self.inner.checkpoint()
        }
        fn stats(&self) -> StoreStats {
            self.inner.stats()
        }
    }

    fn op(kind: OpKind, key: &[u8], value: &[u8]) -> StateOp {
        StateOp { kind, key: key.to_vec(), value: value.to_vec() }
    }

    fn ok_stream(ops: &[StateOp]) -> impl Iterator<Item = Result<(u64, StateOp), Infallible>> + '_ {
        infallible(ops.iter().cloned().enumerate().map(|(i, o)| (i as u64, o)))
    }

    /// Random op streams over a small key space (keys share prefixes, so prefix scans
    /// and seeks find several entries).
    fn arb_ops(max: usize) -> impl Strategy<Value = Vec<StateOp>> {
        let kind = prop::sample::select(OpKind::ALL.to_vec());
        let key = (0u8..3, 0u8..6).prop_map(|(a, b)| vec![b'k', b'0' + a, b'0' + b]);
        let key = prop_oneof![4 => key, 1 => (0u8..3).prop_map(|a| vec![b'k', b'0' + a])];
        let value = prop::collection::vec(any::<u8>(), 0..24);
        prop::collection::vec((kind, key, value), 0..max).prop_map(|v| {
            v.into_iter()
                .map(|(kind, key, value)| {
                    let value =
                        if matches!(kind, OpKind::Put | OpKind::Merge) { value } else { vec![] };
                    StateOp { kind, key, value }
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Model vs MemStore vs HashLogStore vs an ordered store after replaying the same
        /// random stream (warm-up and small seek batches included).
        #[test]
        fn replay_leaves_the_state_the_model_predicts(ops in arb_ops(300), warmup in 0u64..20, every in prop_oneof![Just(1u32), 2u32..20]) {
            let mut model = Model::new();
            for o in &ops {
                model_apply(&mut model, o);
            }
            let cfg = ReplayConfig { warmup_ops: warmup, seek_batch: 2, seek_prefix_len: 2, ..ReplayConfig::default() };
            let stores: [OpenFn; 3] = [
                |d| Box::new(mem(d)),
                |d| Box::new(hashlog(d)),
                |d| Box::new(Wrap::new(d, true)),
            ];
            for open in stores {
                let dir = tempfile::tempdir().unwrap();
                let mut store = open(dir.path());
                let r = replay(store.as_mut(), ok_stream(&ops), &cfg).unwrap();
                let n = ops.len() as u64;
                prop_assert_eq!(r.ops, n.saturating_sub(warmup));
                prop_assert_eq!(r.warmup_ops, n.min(warmup));
                prop_assert_eq!(r.per_kind.values().map(|k| k.ops).sum::<u64>(), r.ops);
                prop_assert_eq!(r.errors, 0);
                prop_assert_eq!(&contents(store.as_mut()), &model, "store {}", store.name());
                // The same ops through a reader thread, with sampled latency: the same
                // state, every op counted, about one in `every` timed.
                let dir = tempfile::tempdir().unwrap();
                let mut store = open(dir.path());
                let pcfg = ReplayConfig { latency_every: every, ..cfg.clone() };
                let owned: Vec<_> = ok_stream(&ops).collect();
                let r = replay_pipelined(store.as_mut(), fill_from_iter(owned.into_iter()), &pcfg).unwrap();
                prop_assert_eq!(r.ops, n.saturating_sub(warmup));
                prop_assert_eq!(r.per_kind.values().map(|k| k.ops).sum::<u64>(), r.ops);
                prop_assert_eq!(r.latency_every, every);
                prop_assert_eq!(&contents(store.as_mut()), &model, "pipelined store {}", store.name());
            }
        }

        /// The emulated iterator visits exactly the keys an ordered iterator would,
        /// across refills, on an ordered store; on a hash store it visits the keys of the
        /// seek key's prefix that are >= the seek key, in order.
        #[test]
        fn seek_next_emulation_matches_an_iterator(
            keys in prop::collection::btree_set(prop::collection::vec(b'a'..b'e', 1..5), 0..40),
            seek_key in prop::collection::vec(b'a'..b'e', 0..4),
            nexts in 0usize..50,
            batch in 1usize..6,
            prefix_len in 0usize..3,
        ) {
            for ordered in [true, false] {
                let dir = tempfile::tempdir().unwrap();
                let mut store = Wrap::new(dir.path(), ordered);
                let ns = store.namespace(NAMESPACE).unwrap();
                for k in &keys {
                    store.put(ns, k, &[k.len() as u8]).unwrap();
                }
                let cfg = ReplayConfig { seek_batch: batch, seek_prefix_len: prefix_len, ..ReplayConfig::default() };
                let prefix = &seek_key[..seek_key.len().min(prefix_len)];
                let expect: Vec<&Vec<u8>> = keys
                    .range(seek_key.clone()..)
                    .filter(|k| ordered || k.starts_with(prefix))
                    .collect();
                let mut r = Replayer::new(&mut store, cfg).unwrap();
                r.apply(0, &op(OpKind::Seek, &seek_key, b"")).unwrap();
                for step in 0..=nexts {
                    let want = expect.get(step).map(|k| (k.as_slice(), [k.len() as u8]));
                    let got = r.current().map(|(k, v)| (k, [v[0]]));
                    prop_assert_eq!(got, want, "ordered {} step {}", ordered, step);
                    r.apply(0, &op(OpKind::Next, &seek_key, b"")).unwrap();
                }
                let rep = r.finish();
                // One scan per seek; ordered: one refill each time a next steps past a
                // full batch (nexts + 1 nexts were applied).
                let refills = if ordered { (nexts + 1).min(expect.len()) / batch } else { 0 };
                prop_assert_eq!(rep.seek_scans, 1 + refills as u64);
            }
        }
    }

    #[test]
    fn next_without_seek_seeks_at_its_key_and_scan_visits_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Wrap::new(dir.path(), true);
        let ops = [op(OpKind::Put, b"a1", b"x"), op(OpKind::Put, b"a2", b"y")];
        let mut r = Replayer::new(&mut store, ReplayConfig::default()).unwrap();
        for o in &ops {
            r.apply(0, o).unwrap();
        }
        r.apply(1, &op(OpKind::Next, b"a2", b"")).unwrap();
        assert_eq!(r.current(), Some((&b"a2"[..], &b"y"[..])));
        r.apply(1, &op(OpKind::Next, b"a2", b"")).unwrap();
        assert_eq!(r.current(), None, "past the end");
        r.apply(1, &op(OpKind::Next, b"a2", b"")).unwrap();
        assert_eq!(r.current(), None, "stays past the end");
        r.apply(2, &op(OpKind::Scan, b"a", b"")).unwrap();
        r.apply(2, &op(OpKind::Get, b"a1", b"")).unwrap();
        let rep = r.finish();
        assert_eq!(rep.ops, 7);
        assert_eq!(rep.per_kind["next"].ops, 3);
        assert_eq!(rep.per_kind["put"].ops, 2);
        assert_eq!(rep.per_kind.len(), 4);
        assert_eq!(rep.seek_scans, 1);
    }

    /// A store taking 10 us per op, paced at 1 op/us: every op starts late, and each
    /// latency includes the queueing delay since its intended start (op i ends at
    /// (i+1)*10 us, was intended at i us). Closed loop, each op takes 10 us.
    #[test]
    fn open_loop_latency_counts_from_the_intended_start() {
        let n = 1000u64;
        let ops: Vec<StateOp> = (0..n).map(|i| op(OpKind::Put, &i.to_be_bytes(), b"v")).collect();
        for open in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let (clock, mock) = quanta::Clock::mock();
            let mut store = Wrap::new(dir.path(), false);
            store.tick = Some((mock, 10_000));
            let pace = if open { Pace::Open { ops_per_sec: 1e6 } } else { Pace::Closed };
            let cfg = ReplayConfig { pace, ..ReplayConfig::default() };
            let mut r = Replayer::new(&mut store, cfg).unwrap().with_clock(clock);
            for (i, o) in ops.iter().enumerate() {
                r.apply(i as u64, o).unwrap();
            }
            let h = r.histogram().clone();
            let rep = r.finish();
            assert_eq!(rep.ops, n);
            assert!((rep.seconds - n as f64 * 10e-6).abs() < 1e-9, "{}", rep.seconds);
            if open {
                // Op i: (i+1)*10 - i = 9i + 10 us.
                let want_max = 9.0 * (n - 1) as f64 + 10.0;
                assert!((rep.max_us / want_max - 1.0).abs() < 1e-3, "max {}", rep.max_us);
                let want_p50 = 9.0 * (n / 2) as f64 + 10.0;
                assert!((rep.p50_us / want_p50 - 1.0).abs() < 2e-3, "p50 {}", rep.p50_us);
                assert_eq!(h.min(), 10_000);
                assert_eq!(rep.target_ops_per_sec, Some(1e6));
            } else {
                assert_eq!(h.count_at(10_000), n, "every op took exactly 10 us");
                assert!((rep.p999_us - 10.0).abs() < 0.01, "{}", rep.p999_us);
            }
        }
    }

    /// With the real clock the schedule is a lower bound: op i cannot start before i/rate.
    #[test]
    fn open_loop_never_runs_ahead_of_the_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = mem(dir.path());
        let ops: Vec<StateOp> =
            (0..200u32).map(|i| op(OpKind::Merge, &i.to_be_bytes(), b"v")).collect();
        let cfg = ReplayConfig {
            pace: Pace::Open { ops_per_sec: 100_000.0 },
            warmup_ops: 10,
            ..ReplayConfig::default()
        };
        let rep = replay(&mut store, ok_stream(&ops), &cfg).unwrap();
        assert_eq!(rep.ops, 190);
        assert!(rep.seconds >= 189.0 / 100_000.0, "{}", rep.seconds);
        assert_eq!(contents(&mut store).len(), 200);
    }

    #[test]
    fn store_errors_fail_or_are_counted() {
        let big = vec![b'k'; spillway_store::MAX_KEY_LEN + 1];
        let ops =
            [op(OpKind::Put, b"a", b"1"), op(OpKind::Put, &big, b"2"), op(OpKind::Put, b"b", b"3")];
        let dir = tempfile::tempdir().unwrap();
        let mut store = mem(dir.path());
        let err = replay(&mut store, ok_stream(&ops), &ReplayConfig::default()).unwrap_err();
        match &err {
            ReplayError::Store { op_index: 1, input_event: 1, kind: OpKind::Put, key, .. } => {
                assert_eq!(key.len(), big.len())
            }
            e => panic!("unexpected {e:?}"),
        }
        assert!(err.to_string().starts_with("op 1 (put of key \"kkk"), "{err}");
        let cfg = ReplayConfig { max_errors: 1, ..ReplayConfig::default() };
        let rep = replay(&mut store, ok_stream(&ops), &cfg).unwrap();
        assert_eq!((rep.ops, rep.errors), (2, 1));
        // Unordered store, ordered-only call through the emulation is never made: seek
        // on a hash store works.
        let seek = [op(OpKind::Seek, b"a", b"")];
        replay(&mut store, ok_stream(&seek), &ReplayConfig::default()).unwrap();
    }

    #[test]
    fn bad_config_source_errors_and_missing_namespace_are_reported() {
        for pace in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let cfg =
                ReplayConfig { pace: Pace::Open { ops_per_sec: pace }, ..ReplayConfig::default() };
            assert!(matches!(
                cfg.validate(),
                Err(ReplayError::Config { field: "pace.ops_per_sec", .. })
            ));
        }
        let cfg = ReplayConfig { seek_batch: 0, ..ReplayConfig::default() };
        assert!(matches!(
            Replayer::null(cfg),
            Err(ReplayError::Config { field: "seek_batch", .. })
        ));

        let items: Vec<Result<(u64, StateOp), std::io::Error>> =
            vec![Ok((0, op(OpKind::Get, b"a", b""))), Err(std::io::Error::other("bad record"))];
        let err = replay_null(items.into_iter(), &ReplayConfig::default()).unwrap_err();
        assert!(matches!(err, ReplayError::Source { op_index: 1, .. }), "{err:?}");

        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("other"));
        let mut store = MemStore::open(opts).unwrap();
        let err = Replayer::new(&mut store, ReplayConfig::default()).unwrap_err();
        assert!(err.to_string().contains("no namespace \"state\""), "{err}");
    }

    #[test]
    fn pipelined_replay_of_a_trace_and_its_errors() {
        use crate::trace::binary::{TraceReader, TraceWriter, TraceWriterOptions};
        let ops: Vec<StateOp> = (0..20_000u32)
            .map(|i| {
                op(
                    [OpKind::Put, OpKind::Merge, OpKind::Get][i as usize % 3],
                    &(i % 97).to_be_bytes(),
                    &[i as u8; 3],
                )
            })
            .collect();
        let mut w = TraceWriter::new(Vec::new(), TraceWriterOptions::default()).unwrap();
        for (i, o) in ops.iter().enumerate() {
            w.write(i as u64, o).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut model = Model::new();
        for o in &ops {
            model_apply(&mut model, o);
        }
        let cfg = ReplayConfig { latency_every: 16, ..ReplayConfig::default() };
        let dir = tempfile::tempdir().unwrap();
        let mut store = mem(dir.path());
        let reader = TraceReader::new(std::io::Cursor::new(bytes.clone())).unwrap();
        let r = replay_pipelined(&mut store, fill_from_trace(reader), &cfg).unwrap();
        assert_eq!(r.ops, 20_000);
        assert_eq!(r.per_kind["get"].ops, 6666);
        assert_eq!(contents(&mut store), model);
        // A damaged trace: the replay stops with a source error, after the good blocks.
        let mut bad = bytes;
        let n = bad.len();
        bad.truncate(n - 10);
        let reader = TraceReader::new(std::io::Cursor::new(bad)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut store = mem(dir.path());
        match replay_pipelined(&mut store, fill_from_trace(reader), &cfg) {
            Err(ReplayError::Source { op_index, .. }) => assert_eq!(op_index, 20_000),
            other => panic!("expected a source error, got {other:?}"),
        }
    }

    #[test]
    fn sampled_latency_times_about_one_op_in_n() {
        let ops: Vec<StateOp> = (0..64_000u32)
            .map(|i| op(OpKind::ALL[i as usize % 4], &i.to_be_bytes(), b"v"))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let mut store = mem(dir.path());
        let cfg = ReplayConfig { latency_every: 16, ..ReplayConfig::default() };
        let mut r = Replayer::new(&mut store, cfg).unwrap();
        for (i, o) in ops.iter().enumerate() {
            r.apply(i as u64, o).unwrap();
        }
        let timed = r.histogram().len();
        assert!((3000..5000).contains(&timed), "{timed} of 64000 ops timed");
        // Every kind gets timed ops, although the op mix has period 4 (a fixed stride
        // of 16 would time only one kind).
        for k in &OpKind::ALL[..4] {
            assert!(r.kind_histogram(*k).len() > 500, "{k:?}");
        }
        assert_eq!(r.finish().ops, 64_000);
    }

    #[test]
    fn null_replay_measures_every_op() {
        let ops: Vec<StateOp> =
            (0..100u32).map(|i| op(OpKind::ALL[i as usize % 7], &i.to_be_bytes(), b"")).collect();
        let cfg = ReplayConfig { warmup_ops: 30, ..ReplayConfig::default() };
        let rep = replay_null(ok_stream(&ops), &cfg).unwrap();
        assert_eq!((rep.store.as_str(), rep.ops, rep.warmup_ops), ("null", 70, 30));
        assert_eq!(rep.per_kind.len(), 7);
        assert_eq!(rep.seek_scans, 0);
        let json = serde_json::to_value(&rep).unwrap();
        assert_eq!(json["per_kind"]["get"]["ops"], 10);
        assert_eq!(json["errors"], 0);
    }

    fn seeded_ops(seed: u64, prefix: u8, n: usize) -> Vec<StateOp> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let kind = OpKind::ALL[rng.random_range(0..7)];
                let key = vec![prefix, rng.random_range(b'0'..b'8')];
                let value = if matches!(kind, OpKind::Put | OpKind::Merge) {
                    vec![rng.random(); 3]
                } else {
                    vec![]
                };
                StateOp { kind, key, value }
            })
            .collect()
    }

    #[test]
    fn parallel_jobs_each_leave_their_own_state() {
        let streams: Vec<Vec<StateOp>> = (0..3).map(|j| seeded_ops(j, b'a', 500)).collect();
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut stores: Vec<Box<dyn StateStore>> = dirs
            .iter()
            .enumerate()
            .map(|(j, d)| -> Box<dyn StateStore> {
                if j == 1 {
                    Box::new(hashlog(d.path()))
                } else {
                    Box::new(mem(d.path()))
                }
            })
            .collect();
        let jobs = streams
            .iter()
            .zip(stores.iter_mut())
            .map(|(ops, store)| ReplayJob {
                ops: op_stream(ops.iter().cloned().enumerate().map(|(i, o)| (i as u64, o))),
                store: store.as_mut(),
            })
            .collect();
        let reports = replay_parallel(jobs, &ReplayConfig::default()).unwrap();
        assert_eq!(reports.len(), 3);
        assert_eq!(reports[1].store, "hashlog");
        for ((ops, store), rep) in streams.iter().zip(stores.iter_mut()).zip(&reports) {
            assert_eq!(rep.ops, 500);
            let mut model = Model::new();
            ops.iter().for_each(|o| model_apply(&mut model, o));
            assert_eq!(contents(store.as_mut()), model);
        }
    }

    #[test]
    fn parallel_reports_the_failing_job() {
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let mut a = mem(dirs[0].path());
        let mut b = mem(dirs[1].path());
        let big = vec![0u8; spillway_store::MAX_KEY_LEN + 1];
        let jobs = vec![
            ReplayJob { ops: op_stream([(0, op(OpKind::Put, b"x", b"1"))]), store: &mut a },
            ReplayJob { ops: op_stream([(0, op(OpKind::Put, &big, b"1"))]), store: &mut b },
        ];
        let err = replay_parallel(jobs, &ReplayConfig::default()).unwrap_err();
        assert!(matches!(err, ReplayError::Job { job: 1, .. }), "{err:?}");
        assert_eq!(contents(&mut a).len(), 1);
    }

    /// Streams with disjoint key prefixes sharing one store: the union of their models.
    #[test]
    fn shared_store_ends_in_the_union_of_the_streams() {
        let streams: Vec<Vec<StateOp>> =
            (0..3).map(|j| seeded_ops(j + 10, b'a' + j as u8, 400)).collect();
        let dir = tempfile::tempdir().unwrap();
        let mut store = hashlog(dir.path());
        let ops = streams
            .iter()
            .map(|ops| op_stream(ops.iter().cloned().enumerate().map(|(i, o)| (i as u64, o))))
            .collect();
        let cfg = ReplayConfig { seek_prefix_len: 1, ..ReplayConfig::default() };
        let reports = replay_shared(ops, &mut store, &cfg).unwrap();
        assert_eq!(reports.iter().map(|r| r.ops).collect::<Vec<_>>(), [400, 400, 400]);
        let mut model = Model::new();
        streams.iter().flatten().for_each(|o| model_apply(&mut model, o));
        assert_eq!(contents(&mut store), model);
    }
}
