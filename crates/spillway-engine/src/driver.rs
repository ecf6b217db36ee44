//! The driver: the one place an [operator] is run, whatever feeds it.
//! Every front-end goes through [`Driver`]: the file job ([`crate::job::run_job`]) and the
//! benchmarks (`spillway_bench::engine_bench`) pull events through [`Driver::run`]; Python's `Stream`
//! and the Kafka workers' tasks push them through [`crate::session::Session`], a thin
//! layer over [`Driver::process`] and [`Driver::checkpoint`].
//!
//! The driver owns what is the same for all of them:
//! - opening the operator over its store and reservoir, fresh or from a checkpoint
//!   [`Record`] ([`Driver::open`]), with the reservoir retention of a resumed job;
//! - counting events (an event's sequence number is the count before it);
//! - checkpoints ([`Driver::checkpoint`]): the operator's snapshot (which syncs the
//!   reservoir), the [`Record`] with the front-end's position, the store's checkpoint;
//!   then reservoir segments behind every cursor are released;
//! - without checkpoints, releasing those segments every [`RELEASE_EVERY`] events;
//! - the pull loop ([`Driver::run`]): batches read ahead and announced to the store,
//!   latency per event, checkpoint pauses, progress reports; the front-end's side is the
//!   [`Io`] trait (where events come from, where rows go, what its position is).
//!
//! How one event travels: `Io::next_event` (a CSV/JSONL source, a generator) ->
//! [`Driver::run`] batches it and calls `Operator::prefetch` on the batch ->
//! [`Driver::process`] numbers it and calls `Operator::process` (the OVER runtime or the
//! windowed operator), which appends the rows it emits -> `Io::emit` writes them (or the
//! event, if it came too late, to the side output) -> on a checkpoint boundary
//! `Io::sync` makes the outputs durable and returns the [`Front`] position that
//! [`Driver::checkpoint`] records with the operator's snapshot.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use spillway_store::{NamespaceSpec, StateStore, StoreKind, StoreOptions, TieredOptions};

use crate::checkpoint::{self, Front, Identity, Record};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Totals};
use crate::operator::over::backfill::Retention;
use crate::operator::over::peers::Ties;
use crate::operator::over::{Counters, Outcome, Runtime};
use crate::operator::{self, Operator, OperatorOptions, OperatorSnapshot, QueryPlan};
use crate::reservoir::{Compression, ReservoirOptions};
use crate::value::{Event, Row, Schema, Value};

/// Without checkpoints, reservoir segments behind every window are released every this
/// many events.
pub const RELEASE_EVERY: u64 = 65_536;
/// Events read ahead and announced to the store at a time by [`Driver::run`].
pub const BATCH_EVENTS: usize = 64;

/// The state options every front-end gives (store, reservoir, lateness).
#[derive(Clone, Debug)]
pub struct StateConfig<'a> {
    /// State store backend.
    pub store: StoreKind,
    /// The tiered store's levels (when `store` is tiered).
    pub tiered: &'a TieredOptions,
    /// Memory budget of the store, in bytes.
    pub memory_budget: u64,
    /// Expected number of partition keys (a sizing hint).
    pub expected_keys: Option<u64>,
    /// Allowed lateness, in the time column's unit.
    pub allowed_lateness: i64,
    /// A windowed aggregation's watermark delay, in the time column's unit.
    pub watermark_delay: i64,
    /// Reservoir chunk compression.
    pub compression: Compression,
    /// Events per reservoir chunk (`None`: the reservoir's default).
    pub reservoir_chunk_events: Option<usize>,
    /// Reservoir segment size (`None`: the reservoir's default).
    pub reservoir_segment_bytes: Option<u64>,
    /// How `RANGE` frames treat rows of equal time ([`Ties`]).
    pub ties: Ties,
    /// The file system the store and the reservoir go through (`None`: the real one;
    /// tests cut the power with `spillway_store::io::CrashFs`).
    pub fs: Option<Arc<dyn spillway_store::io::Fs>>,
}

impl StateConfig<'_> {
    /// Store options for a store in `dir` with namespaces `specs`.
    pub fn store_options(&self, dir: &Path, specs: Vec<NamespaceSpec>) -> StoreOptions {
        let mut o = StoreOptions::new(dir).memory_budget(self.memory_budget);
        if let Some(k) = self.expected_keys {
            o = o.expected_keys(k);
        }
        for spec in specs {
            o = o.namespace(spec);
        }
        if let Some(fs) = &self.fs {
            o = o.fs(fs.clone());
        }
        o
    }

    /// Opens the store in `dir` with namespaces `specs`.
    pub fn open_store(&self, dir: &Path, specs: Vec<NamespaceSpec>) -> Result<Box<dyn StateStore>> {
        Ok(crate::job::store_config(self.store, self.tiered)
            .open(self.store_options(dir, specs))?)
    }

    /// Reservoir options for a reservoir in `dir`.
    pub fn reservoir_options(&self, dir: &Path) -> ReservoirOptions {
        let mut o = ReservoirOptions::new(dir).compression(self.compression);
        if let Some(n) = self.reservoir_chunk_events {
            o = o.chunk_events(n);
        }
        if let Some(n) = self.reservoir_segment_bytes {
            o = o.segment_bytes(n);
        }
        if let Some(fs) = &self.fs {
            o = o.fs(fs.clone());
        }
        o
    }
}

/// How a driver checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    /// Every this many events (counted over the whole job), in [`Driver::run`].
    Every(u64),
    /// When the caller asks ([`Driver::checkpoint`]); the reservoir is released then.
    OnDemand,
    /// Never: reservoir segments are released every [`RELEASE_EVERY`] events.
    Never,
    /// Never, and nothing is released: a resume without checkpoints (the recovered
    /// checkpoint still needs its events).
    NeverKeepAll,
}

/// A running operator with its checkpoint bookkeeping. See the module docs.
pub struct Driver {
    op: Box<dyn Operator>,
    query: String,
    identity: Identity,
    retention: Option<Retention>,
    events: u64,
    cadence: Cadence,
    /// Where to report figures, and this driver's store label there.
    metrics: Option<(Arc<Metrics>, String)>,
}

impl Driver {
    /// Opens the operator of `plan` over `store`, with its reservoir in `reservoir_dir`:
    /// fresh, or continuing from checkpoint `from`. `retain` is the reservoir retention
    /// span asked for (`None`: the checkpoint's, else none). `base` names the directory
    /// in messages.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        cfg: &StateConfig<'_>,
        plan: QueryPlan,
        store: Box<dyn StateStore>,
        identity: Identity,
        query: &str,
        reservoir_dir: &Path,
        from: Option<Record>,
        retain: Option<i64>,
        cadence: Cadence,
        base: &Path,
    ) -> Result<Driver> {
        let res = cfg.reservoir_options(reservoir_dir);
        let opts = OperatorOptions {
            allowed_lateness: cfg.allowed_lateness,
            watermark_delay: cfg.watermark_delay,
            reservoir: &res,
            ties: cfg.ties,
        };
        let (snapshot, events, recorded) = match from {
            Some(r) => (Some(r.operator), r.events, (r.retain, r.retain_index)),
            None => (None, 0, (0, 0)),
        };
        let op = operator::open(plan, store, &identity.schema, &opts, snapshot, base)?;
        let span = retain.unwrap_or(recorded.0);
        Driver::with_operator(op, query, identity, events, span, recorded, cadence)
    }

    /// A driver over an operator opened elsewhere (a backfill's rebuilt runtime), having
    /// taken `events`; the retention of `span` continues from `recorded` (span, index).
    pub fn with_operator(
        mut op: Box<dyn Operator>,
        query: &str,
        identity: Identity,
        events: u64,
        span: i64,
        recorded: (i64, u64),
        cadence: Cadence,
    ) -> Result<Driver> {
        let retention = match op.as_over() {
            Some(r) => open_retention(r, span, recorded.0, recorded.1)?,
            None => None,
        };
        Ok(Driver {
            op,
            query: query.to_string(),
            identity,
            retention,
            events,
            cadence,
            metrics: None,
        })
    }

    /// Reports this driver's figures to `metrics` from now on, its store labelled `store`
    /// (see [`crate::metrics`]): totals at each progress tick of [`Driver::run`] and at
    /// its end, and each checkpoint's duration.
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>, store: &str) {
        self.metrics = Some((metrics, store.to_string()));
    }

    /// Reports the running totals of this run (counters since `start`, and `malformed`)
    /// and the store's figures, if metrics are set.
    fn report(&mut self, start: &Counters, malformed: u64) {
        let Some((m, store)) = &self.metrics else { return };
        let c = self.op.counters().since(start);
        m.set_totals(&Totals {
            events_in: c.events,
            rows_out: c.emitted,
            late: c.too_late,
            malformed,
            upload_bytes: 0,
        });
        m.set_store(store, &self.op.store_mut().stats());
    }

    /// The identity this driver records in its checkpoints.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The input schema.
    pub fn schema(&self) -> &Schema {
        &self.identity.schema
    }

    /// Events taken so far, including those before a resume.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The operator's counters (across resumes).
    pub fn counters(&self) -> crate::operator::over::Counters {
        self.op.counters()
    }

    /// How this driver checkpoints.
    pub fn cadence(&self) -> Cadence {
        self.cadence
    }

    /// The operator (for its counters, store and statistics).
    pub fn operator(&mut self) -> &mut dyn Operator {
        self.op.as_mut()
    }

    /// Announces events about to be processed, so the store can prefetch their state.
    pub fn prefetch(&mut self, events: &[Event]) {
        self.op.prefetch(events);
    }

    /// Processes one event, appending the rows it emits to `rows`.
    pub fn process(&mut self, event: Event, rows: &mut Vec<Row>) -> Result<Outcome> {
        self.events += 1;
        self.op.process(event, rows)
    }

    /// Processes an event of per-event metrics, whose row (on [`Outcome::Emitted`]) is
    /// written into `out` (no allocation per event).
    pub fn process_row(&mut self, event: Event, out: &mut Vec<Value>) -> Result<Outcome> {
        self.events += 1;
        self.op.process_row(event, out)
    }

    /// The pushed event `(time, row)` as the next [`Event`].
    pub fn next_event(&self, time: i64, row: Row) -> Event {
        Event { time, seq: self.events, row }
    }

    /// Whether a checkpoint falls after the event just processed.
    pub fn checkpoint_due(&self) -> bool {
        matches!(self.cadence, Cadence::Every(n) if n > 0 && self.events.is_multiple_of(n))
    }

    /// Housekeeping after an event without checkpoints: releases reservoir segments every
    /// [`RELEASE_EVERY`] events. True when it did (a pause).
    pub fn release_if_due(&mut self) -> Result<bool> {
        if self.cadence == Cadence::Never && self.events.is_multiple_of(RELEASE_EVERY) {
            self.release()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// End of input: a windowed aggregation fires every window still open.
    pub fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        self.op.finish(rows)
    }

    /// Makes one checkpoint recording `front` (see the module docs), releasing nothing:
    /// the caller calls [`Driver::release`] when the checkpoint is where a resume will
    /// look (a backfill switches `store.json` first). Returns the operator's snapshot
    /// event count.
    pub fn checkpoint(&mut self, front: Front) -> Result<u64> {
        let started = Instant::now();
        let operator: OperatorSnapshot = self.op.snapshot()?;
        let (retain, retain_index) = match (self.op.as_over(), &self.retention) {
            (Some(r), Some(k)) => (k.span(), k.index(r)),
            _ => (0, 0),
        };
        let record = Record {
            version: checkpoint::VERSION,
            query: self.query.clone(),
            identity: self.identity.clone(),
            operator,
            events: self.events,
            checkpoint_every: match self.cadence {
                Cadence::Every(n) => Some(n),
                _ => None,
            },
            retain,
            retain_index,
            front,
        };
        checkpoint::write(self.op.store_mut(), &record)?;
        self.op.store_mut().checkpoint()?;
        if let Some((m, _)) = &self.metrics {
            m.observe_checkpoint(started.elapsed().as_secs_f64());
        }
        Ok(self.events)
    }

    /// Releases the reservoir segments no window (and no retention) needs.
    pub fn release(&mut self) -> Result<()> {
        self.op.release_reservoir(self.retention.as_ref())
    }

    /// Runs the pull loop until `io` has no more events (see the module docs), then
    /// fires what is still open and hands those rows to `io`. `progress` is called about
    /// every 100 ms with the events taken so far (over the whole job), the seconds and
    /// the latency histogram of this run.
    pub fn run(
        &mut self,
        io: &mut dyn Io,
        batch: usize,
        progress: &mut dyn FnMut(u64, f64, &Histogram<u64>),
    ) -> Result<RunStats> {
        let clock = quanta::Clock::new();
        let new_hist = || {
            Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
                .map_err(|e| Error::Config(format!("histogram: {e}")))
        };
        let mut stats = RunStats {
            events: 0,
            seconds: 0.0,
            latency_ns: new_hist()?,
            pauses_ns: new_hist()?,
            checkpoints: 0,
        };
        let started = Instant::now();
        let counters_at_start = self.op.counters();
        let mut next_progress = started + Duration::from_millis(100);
        let batch = batch.max(1);
        let mut rows: Vec<Row> = Vec::new();
        let mut out: Vec<Value> = Vec::new();
        let per_event = self.op.one_row_per_event();
        // Events are read in batches so the store can prefetch their state; each is then
        // processed on its own, exactly as one at a time. A batch never reads past a
        // checkpoint (the checkpoint records the input position after its last event),
        // and an input error is reported after the events read before it are processed.
        //
        // Latency: an event's latency runs from just before it was read to just after its
        // rows were handed to `io`. A pause between batches (a checkpoint, or a release
        // after a batch's last event) delays the event read next, which would have been
        // read when the pause began: its latency runs from the start of the pause, so
        // checkpoint pauses show in the percentiles. A pause inside a batch is already in
        // the latency of the batch's remaining events, read before it.
        let mut events: Vec<Event> = Vec::with_capacity(batch);
        let mut read_at: Vec<u64> = Vec::with_capacity(batch);
        let mut paused_at: Option<u64> = None;
        loop {
            let mut want = batch as u64;
            if let Cadence::Every(n) = self.cadence {
                if n > 0 {
                    want = want.min(n - self.events % n);
                }
            }
            let mut input_error = None;
            let mut end = false;
            while (events.len() as u64) < want {
                let t0 = paused_at.take().unwrap_or_else(|| clock.raw());
                match io.next_event() {
                    Ok(Some(e)) => {
                        events.push(e);
                        read_at.push(t0);
                    }
                    Ok(None) => {
                        end = true;
                        break;
                    }
                    Err(e) => {
                        input_error = Some(e);
                        break;
                    }
                }
            }
            self.op.prefetch(&events);
            let n = events.len();
            for (i, (event, t0)) in events.drain(..).zip(read_at.drain(..)).enumerate() {
                stats.events += 1;
                let outcome = if per_event {
                    // One row at most, written into a reused buffer: no allocation.
                    let o = self.process_row(event, &mut out)?;
                    if o == Outcome::Emitted {
                        rows.push(std::mem::take(&mut out));
                    }
                    o
                } else {
                    self.process(event, &mut rows)?
                };
                io.emit(&mut rows, outcome)?;
                if let Some(m) = self.op.take_missed() {
                    io.missed(&m)?;
                }
                if per_event {
                    if let Some(r) = rows.pop() {
                        out = r;
                    }
                }
                rows.clear();
                // One clock read ends this event's latency and starts a pause, if any.
                let p0 = clock.raw();
                let _ = stats.latency_ns.record(clock.delta_as_nanos(t0, p0).max(1));
                let paused = if self.checkpoint_due() {
                    let front = io.sync(self.events)?;
                    self.checkpoint(front)?;
                    self.release()?;
                    stats.checkpoints += 1;
                    self.report(&counters_at_start, io.malformed());
                    let _ = stats.pauses_ns.record(clock.delta_as_nanos(p0, clock.raw()).max(1));
                    true
                } else {
                    self.release_if_due()?
                };
                if paused && i + 1 == n {
                    paused_at = Some(p0);
                }
                io.after_event(self.events, self.op.as_mut())?;
                if stats.events.is_multiple_of(4096) {
                    let now = Instant::now();
                    if now >= next_progress {
                        next_progress = now + Duration::from_millis(100);
                        progress(self.events, started.elapsed().as_secs_f64(), &stats.latency_ns);
                        self.report(&counters_at_start, io.malformed());
                    }
                }
            }
            if let Some(e) = input_error {
                return Err(e);
            }
            if end {
                break;
            }
        }
        self.op.finish(&mut rows)?;
        io.finish(&mut rows)?;
        stats.seconds = started.elapsed().as_secs_f64();
        self.report(&counters_at_start, io.malformed());
        Ok(stats)
    }
}

/// The front-end's side of [`Driver::run`].
pub trait Io {
    /// The next event (`None`: end of input). An error ends the run after the events
    /// read before it are processed.
    fn next_event(&mut self) -> Result<Option<Event>>;
    /// The rows one event emitted (`outcome` says whether it was too late).
    fn emit(&mut self, rows: &mut Vec<Row>, outcome: Outcome) -> Result<()>;
    /// What one event of a windowed aggregation missed: the windows already cleaned up
    /// that it fell in (all of them for an event too late for every window).
    fn missed(&mut self, _missed: &crate::operator::windowed::Missed) -> Result<()> {
        Ok(())
    }
    /// Makes everything written so far durable and says where the front-end stands, for
    /// the checkpoint about to be made of the first `events` events.
    fn sync(&mut self, events: u64) -> Result<Front>;
    /// Called after each event (and its checkpoint, if one fell there) with the events
    /// taken over the whole job and the operator: a test's halt point, a benchmark's
    /// sampled figures.
    fn after_event(&mut self, _events: u64, _op: &mut dyn Operator) -> Result<()> {
        Ok(())
    }
    /// Malformed input rows this run skipped (for metrics).
    fn malformed(&self) -> u64 {
        0
    }
    /// The rows the operator fired at the end of input; then the outputs are synced.
    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()>;
}

/// What one [`Driver::run`] did.
#[derive(Debug)]
pub struct RunStats {
    /// Events this run took.
    pub events: u64,
    /// Wall seconds of the loop.
    pub seconds: f64,
    /// Per-event latency, in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Checkpoint pauses, in nanoseconds.
    pub pauses_ns: Histogram<u64>,
    /// Checkpoints made.
    pub checkpoints: u64,
}

/// The reservoir retention of `span` time units over `runtime` (`None` for 0). Its
/// pseudo-cursor continues from the index a checkpoint recorded, unless the span grew
/// (then from the oldest live event).
fn open_retention(
    runtime: &mut Runtime,
    span: i64,
    recorded_span: i64,
    recorded_index: u64,
) -> Result<Option<Retention>> {
    if span <= 0 {
        return Ok(None);
    }
    let from = if span <= recorded_span { recorded_index } else { 0 };
    Ok(Some(Retention::new(runtime, span, from)?))
}
