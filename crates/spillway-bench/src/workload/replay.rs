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
//! | scan | [`StateStore::scan_prefix`] of the op's key; every entry is visited (and its length read) |
//! | seek, next | the iterator emulation below |
//!
//! # Seek and next: an iterator emulated on a visitor API
//! The stores offer scans with a visitor, not iterators, so the replayer keeps one
//! emulated iterator (a *cursor*) per replayer, i.e. per operator:
//!
//! - **Ordered stores** ([`Capabilities::ordered`](spillway_store::Capabilities)):
//!   `seek(k)` calls `scan_range(k.., ..)` and copies up to
//!   [`ReplayConfig::seek_batch`] entries into a buffer; the cursor then stands on the
//!   first of them (the first key `>= k`). `next` moves to the next buffered entry; when
//!   the buffer runs out and the last scan filled it completely, `next` refills it with
//!   `scan_range((last key, exclusive).., ..)`. So a seek costs one range scan plus
//!   copying up to `seek_batch` entries, and a run of `n` nexts costs about
//!   `n / seek_batch` further scans (each of which must seek again inside the store) plus
//!   one copy per entry. A real iterator would pay one seek and `n` cheap steps; the
//!   emulation reads up to `seek_batch - 1` entries that the operator may never ask for.
//! - **Unordered stores** (hash stores): `seek(k)` calls `scan_prefix` with the first
//!   [`ReplayConfig::seek_prefix_len`] bytes of `k` (default 8: the event-key part of
//!   Gadget-style state keys), keeps the entries whose key is `>= k`, at most
//!   [`ReplayConfig::unordered_seek_limit`] of them, and sorts them; `next` moves to the
//!   next of these and never refills. A seek therefore costs a full prefix scan (on the
//!   hash stores, a pass over **every** key of the namespace) plus a sort, and the
//!   iterator ends at the end of the prefix or at the limit; it does not see keys past
//!   the prefix the way an ordered iterator would. This is the honest price of range
//!   reads on a hash store, not a faithful iterator.
//!
//! The buffered entries are a snapshot taken at the scan: writes between a seek and its
//! nexts are seen only by later refills (a RocksDB iterator sees its implicit snapshot
//! throughout). A `next` with no open cursor (the first op of a stream, or after a seek
//! error) behaves as a seek at the op's key. A `next` past the end is a no-op on an
//! exhausted cursor, counted like any other op.
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
use spillway_store::{NamespaceSpec, Ns, StateStore, StoreOptions};

use super::{OpKind, OpSink, StateOp};

/// The namespace every replayed op goes to.
pub const NAMESPACE: &str = "state";

/// The declaration of [`NAMESPACE`]: a list namespace (merge = list append).
pub fn namespace_spec() -> NamespaceSpec {
    NamespaceSpec::list(NAMESPACE)
}

/// Options for a store in `dir` that the replayer can drive: default budget, the one
/// namespace [`namespace_spec`].
pub fn store_options(dir: impl AsRef<Path>) -> StoreOptions {
    StoreOptions::new(dir).namespace(namespace_spec())
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

/// The emulated iterator: one buffered batch of entries in flat arenas.
#[derive(Default)]
struct Cursor {
    open: bool,
    /// Whether no refill can find more entries.
    exhausted: bool,
    keys: Vec<u8>,
    vals: Vec<u8>,
    spans: Vec<(Range<usize>, Range<usize>)>,
    /// Index of the current entry in `spans`; `>= spans.len()` means past the end.
    pos: usize,
    /// Scratch for the refill start key.
    resume: Vec<u8>,
}

impl Cursor {
    fn clear_batch(&mut self) {
        self.keys.clear();
        self.vals.clear();
        self.spans.clear();
        self.pos = 0;
    }

    fn push(keys: &mut Vec<u8>, vals: &mut Vec<u8>, spans: &mut Vec<(Range<usize>, Range<usize>)>, k: &[u8], v: &[u8]) {
        let ks = keys.len();
        keys.extend_from_slice(k);
        let vs = vals.len();
        vals.extend_from_slice(v);
        spans.push((ks..keys.len(), vs..vals.len()));
    }

    fn current(&self) -> Option<(&[u8], &[u8])> {
        let (k, v) = self.spans.get(self.pos)?;
        Some((&self.keys[k.clone()], &self.vals[v.clone()]))
    }

    fn close(&mut self) {
        self.open = false;
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
        let (name, ordered) = (store.name(), store.capabilities().ordered);
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
        let index = self.seen;
        self.seen += 1;
        if index < self.cfg.warmup_ops {
            self.apply_counted(index, input_event, op)?;
            return Ok(());
        }
        let m = index - self.cfg.warmup_ops;
        match self.cfg.pace {
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

    fn record(&mut self, kind: OpKind, ns: u64) {
        self.measured += 1;
        self.all.saturating_record(ns);
        self.per_kind[kind as usize].saturating_record(ns);
    }

    /// Applies `op`; a tolerated store error returns `Ok(false)`.
    fn apply_counted(
        &mut self,
        index: u64,
        input_event: u64,
        op: &StateOp,
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
                        key: op.key.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Applies `op`; `Err(())` if the shared store's lock is poisoned.
    fn apply_op(&mut self, op: &StateOp) -> Result<spillway_store::Result<()>, ()> {
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
                black_box((op.kind, op.key.as_slice(), op.value.as_slice()));
                Ok(Ok(()))
            }
        }
    }

    /// The report of everything measured so far.
    pub fn report(&self) -> ReplayReport {
        let seconds = match self.t0 {
            Some(t0) if self.measured > 0 => self.clock.delta(t0, self.last_end).as_secs_f64(),
            _ => 0.0,
        };
        let per_kind = OpKind::ALL
            .into_iter()
            .filter_map(|k| {
                let h = &self.per_kind[k as usize];
                (h.len() > 0).then(|| {
                    let r = KindReport {
                        ops: h.len(),
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
fn apply_to(
    store: &mut dyn StateStore,
    ns: Ns,
    ordered: bool,
    cfg: &ReplayConfig,
    op: &StateOp,
    read_buf: &mut Vec<u8>,
    cursor: &mut Cursor,
    seek_scans: &mut u64,
) -> spillway_store::Result<()> {
    match op.kind {
        OpKind::Get => {
            black_box(store.get_into(ns, &op.key, read_buf)?);
        }
        OpKind::Put => store.put(ns, &op.key, &op.value)?,
        OpKind::Merge => store.merge(ns, &op.key, &op.value)?,
        OpKind::Delete => store.delete(ns, &op.key)?,
        OpKind::Scan => {
            let mut bytes = 0usize;
            store.scan_prefix(ns, &op.key, &mut |k, v| {
                bytes += k.len() + v.len();
                true
            })?;
            black_box(bytes);
        }
        OpKind::Seek => seek(store, ns, ordered, cfg, &op.key, cursor, seek_scans)?,
        OpKind::Next => {
            if !cursor.open {
                seek(store, ns, ordered, cfg, &op.key, cursor, seek_scans)?;
            } else {
                cursor.pos = cursor.pos.saturating_add(1).min(cursor.spans.len());
                if cursor.pos == cursor.spans.len() && !cursor.exhausted {
                    let mut resume = std::mem::take(&mut cursor.resume);
                    resume.clear();
                    if let Some((k, _)) = cursor.spans.last() {
                        resume.extend_from_slice(&cursor.keys[k.clone()]);
                    }
                    let r = fill_ordered(store, ns, cfg, Bound::Excluded(&resume), cursor);
                    cursor.resume = resume;
                    *seek_scans += 1;
                    r?;
                }
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
        fill_ordered(store, ns, cfg, Bound::Included(key), cursor)?;
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
        cursor.exhausted = true;
    }
    cursor.open = true;
    black_box(cursor.current());
    Ok(())
}

/// Replaces the cursor's batch with up to `seek_batch` entries from `start` on.
fn fill_ordered(
    store: &mut dyn StateStore,
    ns: Ns,
    cfg: &ReplayConfig,
    start: Bound<&[u8]>,
    cursor: &mut Cursor,
) -> spillway_store::Result<()> {
    cursor.clear_batch();
    let batch = cfg.seek_batch;
    let Cursor { keys, vals, spans, .. } = cursor;
    store.scan_range(ns, start, Bound::Unbounded, &mut |k, v| {
        Cursor::push(keys, vals, spans, k, v);
        spans.len() < batch
    })?;
    cursor.exhausted = cursor.spans.len() < batch;
    Ok(())
}

/// Feeds every op of `ops` to `r`.
fn drive<I, E>(r: &mut Replayer<'_>, ops: I) -> Result<(), ReplayError>
where
    I: Iterator<Item = Result<(u64, StateOp), E>>,
    E: Into<BoxError>,
{
    for item in ops {
        let (input_event, op) = item
            .map_err(|e| ReplayError::Source { op_index: r.ops_seen(), source: e.into() })?;
        r.apply(input_event, &op)?;
    }
    Ok(())
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
    let (name, ordered) = (store.name(), store.capabilities().ordered);
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
