//! A job: the file front-end of the [driver](crate::driver): source -> operator -> sink,
//! with checkpoints, resume and `--backfill`. `spillway run` and `spillway demo` are thin
//! wrappers over [`run_job`], itself a composition of `open.rs` (flags, the checkpoint
//! directory, and opening fresh, resumed or backfilled), the driver's loop, and
//! `output.rs` (the outputs, how they become final, and what a failed run leaves).
//! The checkpoint record and its FORMAT are the [`crate::checkpoint`] module's.
//!
//! ## Checkpoints
//! Every `checkpoint_every` events the job makes one atomic checkpoint: it flushes and
//! fsyncs the output, side-output and dead-letter files, syncs the reservoir, writes the
//! runtime snapshot (frontier, lateness buffer, cursors), the reservoir position, the
//! input position and the output lengths into the store's `meta` namespace, and then
//! checkpoints the store, whose manifest rename makes all of it durable at once. Only
//! then are reservoir segments behind every cursor deleted. On `--resume` the store
//! recovers its last checkpoint; the job reads the metadata from it, cuts the output
//! files back to the recorded lengths, truncates the reservoir to the recorded position
//! and reads the input from the recorded offset, so the finished output is byte-identical
//! to an uninterrupted run's. The dead-letter file is left alone until then: a resume
//! learns the input's schema without opening the dead-letter file ([`OpenAt::Schema`]),
//! and the source reopened at the checkpoint cuts it back to the recorded length.
//!
//! ## When a run fails
//! Without checkpoints the output (and side output) is written to a `.partial` file
//! ([`partial_path`]) renamed to its name only when the run succeeds (a `.partial` file
//! that got no row is removed). With checkpoints a failed run cuts the files back to the
//! last checkpoint, exactly what `--resume` continues. Either way the error
//! ([`Error::Stopped`]) names the files and what they hold.
//!
//! Stdout, FIFOs and devices (`/dev/null`; see [`crate::source::is_stream`]) are always written in
//! place: renaming a finished file over them would replace the device node or the FIFO
//! with a regular file. They cannot be cut back either: a resume writes on after what
//! the run before wrote.
//!
//! ## Reservoir segments
//! Segments behind every window are deleted after each checkpoint, or every 65,536
//! events when the run makes no checkpoints (no checkpoint directory, or
//! `checkpoint_every` 0). The event just before the oldest one a window needs is kept
//! too, so the oldest live event tells a later backfill which windows are covered.
//! [`JobConfig::retain`] (`--retain`) also keeps the events up to that long behind the
//! frontier; each checkpoint records the span, and a resume keeps it unless given
//! another.
//!
//! ## Checkpoint directory
//! `<dir>/reservoir` holds the reservoir; the state store lives in the directory that
//! `<dir>/store.json` names (`state` at first, `state-1`, `state-2`, ... after
//! backfills), together with the query whose namespaces the store was created with (a
//! store opens only with the namespaces it was created with). The file is replaced
//! atomically (write, fsync, rename, fsync the directory).
//!
//! ## Backfill
//! [`JobConfig::backfill`] (`--resume --backfill`) resumes a sliding-window job's
//! checkpoint under a different query: the same input, lateness, store and schema, and
//! the same `WHERE`, with metrics added, changed or removed (new windows, `FILTER`s and
//! partitionings included). Group-by nodes the two queries share keep their state;
//! new or changed ones are rebuilt from the events still in the reservoir and the
//! lateness buffer (see [`crate::operator::over::backfill`]). A rebuilt metric whose window
//! reaches further back than the oldest event the reservoir holds is *not covered*: it
//! is rebuilt from what is there, and a warning (given to the progress callback at
//! once, and in [`JobSummary::backfill`]) names it, its window, and the event time from
//! which its results are exact. A new `UNBOUNDED PRECEDING` or `ROWS` metric needs every
//! event since the start: it is refused unless the reservoir never released any.
//!
//! The state goes to a new store directory: the kept state is copied there, the rebuilt
//! nodes replayed, and one checkpoint (the new query, the runtime's position, the input
//! position of the old checkpoint) made before any new event is read; then `store.json`
//! is switched to it, and only then the old directory removed and reservoir segments
//! released. A crash before the switch leaves the old checkpoint as it was; after it, a
//! plain `--resume` with the new query continues. `--backfill` with the query the
//! checkpoint already runs is a plain resume.
//!
//! The output has the new query's columns, so it cannot continue the old file: a
//! backfill needs an output file (not the one the checkpointed job wrote, which it
//! refuses) and starts it afresh, with the header, holding the rows of the events after
//! the checkpoint. The side output (late events) starts afresh the same way. From then
//! on `--resume` appends to these files as usual.

mod open;
mod output;

use std::path::PathBuf;

use hdrhistogram::Histogram;
use spillway_store::StoreKind;

pub use output::partial_path;

use crate::checkpoint::Input;
use crate::driver::{StateConfig, BATCH_EVENTS};
use crate::error::{Error, Result};
use crate::operator::over::Counters;
use crate::operator::windowed::{WindowAgg, WindowStats};
use crate::reservoir::Compression;
use crate::source::{Source, SourcePosition};
use crate::value::Schema;

/// Events between checkpoints when [`JobConfig::checkpoint_every`] is `None` and no
/// checkpoint recorded an interval.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 1_000_000;

/// How to run a job (everything but the source).
#[derive(Clone, Debug)]
pub struct JobConfig {
    /// The SQL text.
    pub query: String,
    /// Output file (`None`: stdout for `run`; the demo passes `None` and `discard`).
    pub output: Option<PathBuf>,
    /// Discard output rows instead of writing them (benchmarks and the demo).
    pub discard_output: bool,
    /// Side output for events later than the allowed lateness (default: next to the
    /// output, `<output>.late.<ext>`, or `late-events.csv` when writing to stdout, a
    /// FIFO or a device).
    pub side_output: Option<PathBuf>,
    /// State store backend.
    pub store: StoreKind,
    /// The levels of the tiered store (used when `store` is [`StoreKind::Tiered`]).
    pub tiered: spillway_store::TieredOptions,
    /// Memory budget of the store, in bytes.
    pub memory_budget: u64,
    /// Expected number of partition keys (a store sizing hint; hashlog presizes its
    /// index).
    pub expected_keys: Option<u64>,
    /// Allowed lateness in the time column's unit.
    pub allowed_lateness: i64,
    /// Watermark delay in the time column's unit (windowed aggregations only: the
    /// watermark is the largest event time seen minus this minus one unit, so events tied
    /// with the newest are never late).
    pub watermark_delay: i64,
    /// Checkpoint directory (`None`: a temporary directory, no checkpoints).
    pub checkpoint_dir: Option<PathBuf>,
    /// Events between checkpoints (0: none; the directory then holds only this run's
    /// state, and reservoir segments are released as the windows pass them, as in a run
    /// without a checkpoint directory; after a resume from a checkpoint, whose events must
    /// stay, none are released). `None`: the interval the checkpoint recorded on a resume
    /// or backfill, else [`DEFAULT_CHECKPOINT_EVERY`].
    pub checkpoint_every: Option<u64>,
    /// Continue from the last checkpoint in `checkpoint_dir`.
    pub resume: bool,
    /// Reservoir chunk compression.
    pub compression: Compression,
    /// The input and its options, recorded in checkpoints: a resume with another one is
    /// refused.
    pub input: Input,
    /// Events per reservoir chunk (`None`: the reservoir's default, 4096).
    pub reservoir_chunk_events: Option<usize>,
    /// Size at which reservoir segment files roll (`None`: the reservoir's default,
    /// 64 MiB).
    pub reservoir_segment_bytes: Option<u64>,
    /// Tests: a deterministic point at which the job waits to be killed.
    pub halt: Option<HaltPoint>,
    /// With `resume`: continue the checkpoint under `query` even if it differs from the
    /// checkpointed one, rebuilding new and changed metrics from the reservoir (see the
    /// module docs; sliding-window queries only).
    pub backfill: bool,
    /// The file system the state store and the reservoir go through (`None`: the real
    /// one). Tests give a `spillway_store::io::CrashFs` to cut the power inside a
    /// checkpoint. The output files and `store.json` are written with `std::fs`.
    pub fs: Option<std::sync::Arc<dyn spillway_store::io::Fs>>,
    /// How `RANGE` frames treat rows of equal time (`--ties`; default per-event).
    pub ties: crate::operator::over::peers::Ties,
    /// Where to report the job's figures (`--metrics-addr`; `None`: nowhere).
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// Keep reservoir events at least this many time units behind the frontier, for a
    /// later backfill of windows up to that long (`None`: what the checkpoint recorded
    /// on a resume, else 0, which keeps only what the query's windows need).
    pub retain: Option<i64>,
}

/// A progress report, given to the caller's callback about every 100 ms.
#[derive(Debug)]
pub struct Progress<'a> {
    /// Events read so far (including those of runs before a resume).
    pub events: u64,
    /// Seconds since this run started.
    pub seconds: f64,
    /// Ingest-to-emit latency of this run, in nanoseconds.
    pub latency_ns: &'a Histogram<u64>,
    /// Warnings to show the user now (given once, in a report before the first event:
    /// a backfill's metrics that are not exact from the first new event on).
    pub warnings: &'a [String],
}

/// What a finished job reports. The counters of this run and of the whole job differ
/// after a resume or backfill: the whole job's include the runs before the checkpoint
/// (for a backfill, those of the checkpointed query).
#[derive(Clone, Debug, serde::Serialize)]
pub struct JobSummary {
    /// Runtime counters (over the whole job, across resumes).
    pub counters: Counters,
    /// Runtime counters of this run alone (after a resume: since the checkpoint).
    pub counters_this_run: Counters,
    /// Malformed input rows skipped to the dead-letter file (over the whole job).
    pub skipped_rows: u64,
    /// Malformed input rows this run skipped.
    pub skipped_rows_this_run: u64,
    /// Events processed by this run (after a resume: since the checkpoint).
    pub events_this_run: u64,
    /// Wall seconds of this run.
    pub seconds: f64,
    /// Events per second of this run.
    pub events_per_sec: f64,
    /// Ingest-to-emit latency percentiles of this run, in microseconds.
    pub latency_us: LatencySummary,
    /// Checkpoints written (a backfill's checkpoint of the new query included).
    pub checkpoints: u64,
    /// Input events between checkpoints in this run (0: none were due).
    pub checkpoint_every: u64,
    /// How long this run's checkpoints paused processing, in microseconds. Each pause is
    /// also in the latency of the event read after it (see [`run_job`]).
    pub checkpoint_pause_us: PauseSummary,
    /// The side-output file, when late events were written to it.
    pub side_output: Option<PathBuf>,
    /// Store name.
    pub store: String,
    /// Aggregation state at the end: live keys (if the store counts them), bytes in the
    /// store's files, and reads the store served from disk.
    pub state: StateSummary,
    /// Reservoir bytes written (compressed) and raw.
    pub reservoir_bytes: (u64, u64),
    /// Reservoir segment files this run deleted (every window had passed their events).
    pub reservoir_segments_deleted: u64,
    /// Windowed aggregations: rows fired, late updates and session merges (over the
    /// whole job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<WindowStats>,
    /// What a `--backfill` resume did (`None` without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillSummary>,
}

/// What a backfill did: how the new query's group-by nodes got their state, and the
/// metrics it could not make exact from the first new event on.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct BackfillSummary {
    /// Nodes whose state the new query keeps.
    pub groups_kept: u64,
    /// Of those, nodes whose state moved to other namespace names (their index changed).
    pub groups_moved: u64,
    /// Nodes rebuilt from the reservoir.
    pub groups_rebuilt: u64,
    /// Nodes of the checkpointed query the new one dropped.
    pub groups_dropped: u64,
    /// State keys copied to the new store.
    pub keys_copied: u64,
    /// Events replayed into the rebuilt nodes.
    pub events_replayed: u64,
    /// Rebuilt metrics whose window reaches further back than the reservoir holds.
    pub not_covered: Vec<NotCoveredMetric>,
    /// The warnings the run gave (one per metric not covered).
    pub warnings: Vec<String>,
}

/// A backfilled metric that is exact only from a later event time on.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NotCoveredMetric {
    /// The output columns of its group-by node.
    pub metrics: Vec<String>,
    /// Its window, e.g. `[t-1h, t]`.
    pub window: String,
    /// Time of the oldest event the reservoir held.
    pub oldest_event_time: i64,
    /// Results of events at this time or later are exact.
    pub exact_from: i64,
}

/// Size of the aggregation state at the end of a job.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StateSummary {
    /// Live keys, where the store counts them.
    pub live_keys: Option<u64>,
    /// Bytes in the store's files.
    pub bytes_on_disk: u64,
    /// Reads served from disk.
    pub disk_reads: u64,
    /// The tiered store's per-level hits and migrations.
    pub tiers: Option<spillway_store::tiered::TierStats>,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl LatencySummary {
    /// Percentiles of a nanosecond histogram.
    pub fn from_hist(h: &Histogram<u64>) -> Self {
        let us = |v: u64| v as f64 / 1000.0;
        LatencySummary {
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// Pause percentiles in microseconds, and how many pauses there were.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PauseSummary {
    /// Number of pauses.
    pub count: u64,
    /// Median (0 without pauses).
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl PauseSummary {
    /// Percentiles of a nanosecond histogram.
    pub fn from_hist(h: &Histogram<u64>) -> Self {
        let us = |v: u64| v as f64 / 1000.0;
        PauseSummary {
            count: h.len(),
            p50: us(h.value_at_quantile(0.5)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }
}

/// What [`run_job`] asks its source opener for.
#[derive(Clone, Copy, Debug)]
pub enum OpenAt<'a> {
    /// The input from its start, for the run.
    Start,
    /// The input from its start, only to learn its schema before the job decides whether
    /// a resume continues a checkpoint or starts over. The job drops the source without
    /// reading an event, so the opener must not create, truncate or write any file (open
    /// it without a dead-letter file: the checkpoint covers a prefix of the existing one).
    Schema,
    /// The input at a checkpoint's position, with the schema recorded there.
    Checkpoint(&'a Schema, &'a SourcePosition),
}

/// Opens the source at the place [`OpenAt`] names.
pub type OpenSource<'a> = dyn FnMut(OpenAt<'_>) -> Result<Box<dyn Source>> + 'a;

/// A crash point for tests: [`run_job`] pauses here until it is killed.
#[derive(Clone, Debug)]
pub struct HaltPoint {
    /// Halt after this many input events in total (counting runs before a resume), after
    /// the checkpoint that falls on that event, if any.
    pub events: u64,
    /// Created once the output, side-output and dead-letter files are flushed, so a test
    /// knows when to kill: the process then sleeps (up to 10 minutes, then fails).
    pub marker: PathBuf,
}

/// The backend `kind` with its own options: the tiered store's levels from `tiered`,
/// the others' defaults.
pub(crate) fn store_config(
    kind: spillway_store::StoreKind,
    tiered: &spillway_store::TieredOptions,
) -> spillway_store::StoreConfig {
    match kind {
        spillway_store::StoreKind::Tiered => spillway_store::StoreConfig::Tiered(tiered.clone()),
        other => other.into(),
    }
}

/// Runs a job to the end of its source: see [`OpenAt`] for how the source is opened.
/// It is a composition: [`open::open`] checks the flags and opens the job fresh, resumed
/// or backfilled as a [`crate::driver::Driver`] with the file side of the run
/// ([`output::FileIo`]); the driver's loop runs it; the files are published, or settled
/// as the module docs say if the run failed.
///
/// On failure, the error ([`Error::Stopped`]) says what became of the output: without
/// checkpoints it was written to a [`partial_path`] and not renamed; with checkpoints it
/// was cut back to the last checkpoint, so `--resume` continues it.
pub fn run_job(
    cfg: &JobConfig,
    open_source: &mut OpenSource<'_>,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> Result<JobSummary> {
    let mut job = open::open(cfg, open_source)?;
    if let Some(m) = &cfg.metrics {
        job.driver.set_metrics(m.clone(), "job");
    }
    let start_events = job.driver.events();
    if !job.warnings.is_empty() {
        let hist =
            Histogram::<u64>::new(3).map_err(|e| Error::Config(format!("histogram: {e}")))?;
        progress(&Progress {
            events: start_events,
            seconds: 0.0,
            latency_ns: &hist,
            warnings: &job.warnings,
        });
    }
    let counters_at_start = job.driver.operator().counters();
    let skipped_at_start = job.io.source.skipped();
    let run = job.driver.run(&mut job.io, BATCH_EVENTS, &mut |events, seconds, latency_ns| {
        progress(&Progress { events, seconds, latency_ns, warnings: &[] })
    });
    let stats = match run {
        Ok(s) => s,
        Err(e) => return Err(job.io.fail(cfg, e)),
    };
    job.io.publish()?;
    let op = job.driver.operator();
    let rstats = op.as_over().map(|r| r.reservoir_mut().stats()).unwrap_or_default();
    let windows = op.as_windowed().map(WindowAgg::stats);
    let sstats = op.store_mut().stats();
    let counters = op.counters();
    let skipped = job.io.source.skipped();
    Ok(JobSummary {
        counters_this_run: counters.since(&counters_at_start),
        counters,
        skipped_rows: skipped,
        skipped_rows_this_run: skipped.saturating_sub(skipped_at_start),
        events_this_run: stats.events,
        seconds: stats.seconds,
        events_per_sec: stats.events as f64 / stats.seconds.max(1e-9),
        latency_us: LatencySummary::from_hist(&stats.latency_ns),
        // A backfill made one checkpoint (its switch to the new query) before the run.
        checkpoints: stats.checkpoints + u64::from(job.backfill.is_some()),
        checkpoint_every: job.checkpoint_every,
        checkpoint_pause_us: PauseSummary::from_hist(&stats.pauses_ns),
        side_output: job.io.side.as_ref().map(|_| job.io.side_path.clone()),
        store: op.store_mut().name().to_string(),
        state: StateSummary {
            live_keys: sstats.live_keys,
            bytes_on_disk: sstats.bytes_on_disk,
            disk_reads: sstats.disk_reads,
            tiers: sstats.tiers().cloned(),
        },
        reservoir_bytes: (rstats.bytes_compressed, rstats.bytes_raw),
        reservoir_segments_deleted: rstats.segments_deleted,
        windows,
        backfill: job.backfill,
    })
}

impl JobConfig {
    /// The state options of the job's driver.
    pub fn state(&self) -> StateConfig<'_> {
        StateConfig {
            store: self.store,
            tiered: &self.tiered,
            memory_budget: self.memory_budget,
            expected_keys: self.expected_keys,
            allowed_lateness: self.allowed_lateness,
            watermark_delay: self.watermark_delay,
            compression: self.compression,
            reservoir_chunk_events: self.reservoir_chunk_events,
            reservoir_segment_bytes: self.reservoir_segment_bytes,
            fs: self.fs.clone(),
            ties: self.ties,
        }
    }
}
