//! A job: source -> runtime -> sink, with latency recording, progress, checkpoints and
//! resume. `spillway run` and `spillway demo` are thin wrappers over [`run_job`].
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
//! Stdout, FIFOs and devices (`/dev/null`; see [`is_stream`]) are always written in
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
//! lateness buffer (see [`crate::runtime::backfill`]). A rebuilt metric whose window
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

use spillway_store::StateStoreExt;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use spillway_store::{StateStore, StoreKind, StoreOptions};

use crate::error::{Error, Result};
use crate::operator::{self, Operator, OperatorOptions, OperatorSnapshot, QueryPlan};
use crate::plan::Plan;
use crate::reservoir::{Compression, Reservoir, ReservoirOptions};
use crate::runtime::backfill::{
    check_rebuildable, copy_kept_state, BackfillReport, GroupMap, NotCovered, Retention,
};
use crate::runtime::{Counters, Outcome, Runtime, RuntimeSnapshot, META_NAMESPACE};
use crate::source::{is_stream, schema_columns, Sink, Source, SourcePosition};
use crate::sql::{parse, Query};
use crate::value::{Event, Schema, Value};
use crate::window_agg::{WindowAgg, WindowStats};

/// Metadata chunk size in the store (below every backend's value limit).
const META_CHUNK: usize = 32 * 1024;
/// Events read ahead and announced to the store at a time ([`Runtime::prefetch`]).
pub const BATCH_EVENTS: usize = 64;
/// Version of the checkpoint metadata layout (2: the operator snapshot is per query
/// shape; 3: the query, output paths and reservoir retention apart from the identity;
/// 4: the checkpoint interval, at the end; version 3 is still read).
const META_VERSION: u32 = 4;
/// Events between checkpoints when [`JobConfig::checkpoint_every`] is `None` and no
/// checkpoint recorded an interval.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 1_000_000;
/// The file naming the state store's directory (see the module docs).
const LAYOUT_FILE: &str = "store.json";
/// The state store's directory until a backfill moves it.
const STATE_DIR: &str = "state";

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
    /// watermark is the largest event time seen minus this).
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
    /// A string identifying the input and its options; a resume with a different one is
    /// refused.
    pub input_identity: String,
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
    /// Keep reservoir events at least this many time units behind the frontier, for a
    /// later backfill of windows up to that long (`None`: what the checkpoint recorded
    /// on a resume, else 0, which keeps only what the query's windows need).
    pub retain: Option<i64>,
    /// The file system the state store and the reservoir go through (`None`: the real
    /// one). Tests give a `spillway_store::io::CrashFs` to cut the power inside a
    /// checkpoint. The output files and `store.json` are written with `std::fs`.
    pub fs: Option<std::sync::Arc<dyn spillway_store::io::Fs>>,
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

#[derive(serde::Serialize, serde::Deserialize)]
struct CheckpointMeta {
    version: u32,
    job: JobRecord,
    schema: Schema,
    operator: OperatorSnapshot,
    source: SourcePosition,
    output_len: u64,
    side_len: u64,
    /// The reservoir retention span (0: none) and its pseudo-cursor's index.
    retain: i64,
    retain_index: u64,
    /// Events between checkpoints of the run that wrote it, which a resume keeps unless
    /// given another (`None`: written by version 3, which did not record it). Last, so a
    /// version 3 record reads as version 4 with one byte added (see [`read_meta`]).
    checkpoint_every: Option<u64>,
}

/// What every checkpoint records of the job's arguments.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct JobRecord {
    /// (what, value) pairs a resume must match: input, lateness, store, schema.
    identity: Vec<(String, String)>,
    /// The query (a resume must match it unless it backfills).
    query: String,
    /// Absolute paths of the output (`None`: stdout or discarded) and side output.
    output: Option<String>,
    side_output: String,
}

/// The retention span and pseudo-cursor index to record in a checkpoint (an OVER
/// query's; nothing for a windowed aggregation).
fn retention_record(op: &mut dyn Operator, retention: Option<&Retention>) -> (i64, u64) {
    match (op.as_over(), retention) {
        (Some(r), Some(k)) => (k.span(), k.index(r)),
        _ => (0, 0),
    }
}

/// Refuses, before anything is opened or written, a job that would checkpoint (or
/// resume) a store that keeps nothing durable: the tiered store without an L3 level.
/// Otherwise it would run until its first checkpoint and fail there.
fn check_durable(cfg: &JobConfig) -> Result<()> {
    let durable =
        !(cfg.store == StoreKind::Tiered && cfg.tiered.l3 == spillway_store::tiered::L3Kind::None);
    let Some(dir) = cfg.checkpoint_dir.as_deref() else { return Ok(()) };
    if durable || (cfg.checkpoint_every == Some(0) && !cfg.resume) {
        return Ok(());
    }
    let asks = if cfg.resume {
        format!("--resume continues a checkpoint in {}", dir.display())
    } else {
        format!(
            "--checkpoint-dir {} makes a checkpoint every {} events",
            dir.display(),
            cfg.checkpoint_every.unwrap_or(DEFAULT_CHECKPOINT_EVERY)
        )
    };
    Err(Error::Config(format!(
        "the tiered store without a durable level (--l3 none) cannot checkpoint, but {asks}: \
         add --l3 hashlog, or run without checkpoints (--checkpoint-every 0, or no \
         --checkpoint-dir)"
    )))
}

/// What a resume must match, as (what, value) pairs (the query apart: a backfill
/// changes it).
fn identity(cfg: &JobConfig, schema: &Schema) -> Vec<(String, String)> {
    [
        ("input", cfg.input_identity.clone()),
        ("allowed lateness", cfg.allowed_lateness.to_string()),
        ("watermark delay", cfg.watermark_delay.to_string()),
        ("store", cfg.store.name().to_string()),
        ("schema", format!("{schema:?}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Errors unless the checkpoint's identity equals this run's, naming what differs.
fn check_identity(
    recorded: &[(String, String)],
    now: &[(String, String)],
    base: &Path,
) -> Result<()> {
    let differ: Vec<&str> = now
        .iter()
        .filter(|(k, v)| !recorded.iter().any(|(rk, rv)| rk == k && rv == v))
        .map(|(k, _)| k.as_str())
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    let hint = if differ.contains(&"schema") {
        " (a resume infers the input's column types again: pin them with --schema)"
    } else {
        ""
    };
    Err(Error::Checkpoint(format!(
        "{} was written by a job with a different {}{hint}; resume with the same arguments",
        base.display(),
        differ.join(", ")
    )))
}

/// The error of a resume whose query differs from the checkpoint's without --backfill.
fn other_query(base: &Path) -> Error {
    Error::Checkpoint(format!(
        "{} was written by a job with a different query; resume with the same --query, or \
         add --backfill to continue it under the new one (new metrics are rebuilt from the \
         events the reservoir still holds)",
        base.display()
    ))
}

/// `path` made absolute (for comparing output paths across runs).
fn absolute(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).to_string_lossy().into_owned()
}

/// The contents of [`LAYOUT_FILE`]: which directory holds the state store, and the query
/// whose namespaces it was created with.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct StoreLayout {
    format_version: u32,
    dir: String,
    query: Option<String>,
}

impl StoreLayout {
    fn initial(query: Option<String>) -> StoreLayout {
        StoreLayout { format_version: 1, dir: STATE_DIR.into(), query }
    }

    /// The generation of a store directory name: `state` is 0, `state-N` is N.
    fn generation(name: &str) -> Option<u64> {
        if name == STATE_DIR {
            return Some(0);
        }
        let n = name.strip_prefix("state-")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    }

    /// Reads `<base>/store.json` (`None` if there is none).
    fn read(base: &Path) -> Result<Option<StoreLayout>> {
        let path = base.join(LAYOUT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::Checkpoint(format!("cannot read {}: {e}", path.display())))
            }
        };
        let l: StoreLayout = serde_json::from_str(&text).map_err(|e| {
            Error::Checkpoint(format!(
                "{}: {e} (expected {{\"format_version\": 1, \"dir\": \"state\", \"query\": \"...\"}})",
                path.display()
            ))
        })?;
        if l.format_version != 1 {
            return Err(Error::Checkpoint(format!(
                "{}: format_version {} is not supported (this build reads 1)",
                path.display(),
                l.format_version
            )));
        }
        if Self::generation(&l.dir).is_none() {
            return Err(Error::Checkpoint(format!(
                "{}: dir {:?} is not a store directory name (state or state-N)",
                path.display(),
                l.dir
            )));
        }
        Ok(Some(l))
    }

    /// Replaces `<base>/store.json` atomically.
    fn write(&self, base: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Checkpoint(format!("cannot encode {LAYOUT_FILE}: {e}")))?;
        replace_durably(base, LAYOUT_FILE, text.as_bytes())
    }

    /// The layout of the store directory a backfill creates next, for `query`.
    fn next(&self, query: &str) -> StoreLayout {
        let g = Self::generation(&self.dir).unwrap_or(0) + 1;
        StoreLayout { format_version: 1, dir: format!("state-{g}"), query: Some(query.into()) }
    }

    /// Removes the store directories in `base` other than this layout's: what an
    /// interrupted backfill left (a new directory never switched to, or the old one
    /// not yet removed).
    fn remove_leftovers(&self, base: &Path) -> Result<()> {
        let entries = match std::fs::read_dir(base) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::Config(format!("cannot list {}: {e}", base.display()))),
        };
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::Config(format!("cannot list {}: {e}", base.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != self.dir && Self::generation(&name).is_some() && entry.path().is_dir() {
                clear_dirs(&[&entry.path()])?;
            }
        }
        Ok(())
    }
}

/// Replaces `dir/name` with `bytes` atomically and durably: written to `name.tmp`,
/// fsynced, renamed over `name`, the directory fsynced.
pub(crate) fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let err = |what: &str, p: &Path, e: std::io::Error| {
        Error::Checkpoint(format!("cannot {what} {}: {e}", p.display()))
    };
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp).map_err(|e| err("create", &tmp, e))?;
        f.write_all(bytes).map_err(|e| err("write", &tmp, e))?;
        f.sync_all().map_err(|e| err("fsync", &tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| err("rename to", &path, e))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| err("fsync", dir, e))
}

/// The side output's path when `--side-output` is not given: `<output>.late.<ext>`
/// next to an output file, `late-events.csv` for stdout or an output that is not a
/// regular file (no `/dev/null.late.csv` next to a device).
fn default_side_output(output: Option<&Path>) -> PathBuf {
    match output {
        Some(p) if !is_stream(p) => {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("csv");
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("output");
            p.with_file_name(format!("{stem}.late.{ext}"))
        }
        _ => PathBuf::from("late-events.csv"),
    }
}

/// Where a run writes `path` before it is final: its [`partial_path`] when the run is
/// [`Delivery::Staged`] and `path` is a regular file or does not exist yet; `path`
/// itself with checkpoints, and for stdout, FIFOs and devices, which are written in
/// place (a rename would replace the device node or FIFO with a regular file).
fn write_path(delivery: Delivery, path: &Path) -> PathBuf {
    match delivery {
        Delivery::Staged if !is_stream(path) => partial_path(path),
        _ => path.to_path_buf(),
    }
}

fn write_meta(store: &mut dyn StateStore, meta: &CheckpointMeta) -> Result<()> {
    let bytes = postcard::to_stdvec(meta)
        .map_err(|e| Error::Checkpoint(format!("cannot encode checkpoint metadata: {e}")))?;
    write_meta_blob(store, JOB_META_KEY, &bytes)
}

fn read_meta(store: &mut dyn StateStore) -> Result<Option<CheckpointMeta>> {
    let Some(bytes) = read_meta_blob(store, JOB_META_KEY)? else { return Ok(None) };
    decode_meta(bytes).map(Some)
}

/// Decodes checkpoint metadata of version 4, or of version 3 (as version 4 without a
/// recorded interval).
fn decode_meta(mut bytes: Vec<u8>) -> Result<CheckpointMeta> {
    // Version 3 is version 4 without the trailing `checkpoint_every`; postcard writes an
    // absent Option as one 0 byte, so adding that byte reads it as `None`.
    if let Ok((3u32, _)) = postcard::take_from_bytes::<u32>(&bytes) {
        bytes.push(0);
    }
    let mut meta: CheckpointMeta = postcard::from_bytes(&bytes)
        .map_err(|e| Error::Checkpoint(format!("cannot decode checkpoint metadata: {e}")))?;
    if meta.version == 3 {
        meta.version = META_VERSION;
    }
    if meta.version != META_VERSION {
        return Err(Error::Checkpoint(format!(
            "metadata version {} is not supported (this build reads 3 and {META_VERSION})",
            meta.version
        )));
    }
    Ok(meta)
}

/// Key of a job's checkpoint metadata in the `meta` namespace.
pub(crate) const JOB_META_KEY: &str = "checkpoint";

/// Writes checkpoint metadata `bytes` under `key` in the store's `meta` namespace: a
/// 12-byte head `[chunk count u64][crc32c u32]` at `key`, then the bytes in chunks of
/// [`META_CHUNK`] at `key/0`, `key/1`, ... (durable with the store's next checkpoint).
pub(crate) fn write_meta_blob(store: &mut dyn StateStore, key: &str, bytes: &[u8]) -> Result<()> {
    let ns = store.namespace(META_NAMESPACE)?;
    let chunks: Vec<&[u8]> = bytes.chunks(META_CHUNK).collect();
    let mut head = Vec::with_capacity(16);
    head.extend_from_slice(&(chunks.len() as u64).to_le_bytes());
    head.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
    store.put(ns, key.as_bytes(), &head)?;
    for (i, c) in chunks.iter().enumerate() {
        store.put(ns, format!("{key}/{i}").as_bytes(), c)?;
    }
    Ok(())
}

/// Reads what [`write_meta_blob`] wrote under `key` (`None`: no checkpoint yet),
/// checking the chunk count and checksum.
pub(crate) fn read_meta_blob(store: &mut dyn StateStore, key: &str) -> Result<Option<Vec<u8>>> {
    let ns = store.namespace(META_NAMESPACE)?;
    let Some(head) = store.get(ns, key.as_bytes())? else { return Ok(None) };
    if head.len() != 12 {
        return Err(Error::Checkpoint(format!(
            "metadata header has {} bytes, expected 12",
            head.len()
        )));
    }
    let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let mut bytes = Vec::new();
    for i in 0..n {
        let c = store
            .get(ns, format!("{key}/{i}").as_bytes())?
            .ok_or_else(|| Error::Checkpoint(format!("metadata chunk {i} of {n} is missing")))?;
        bytes.extend_from_slice(&c);
    }
    if crc32c::crc32c(&bytes) != crc {
        return Err(Error::Checkpoint("metadata checksum mismatch".into()));
    }
    Ok(Some(bytes))
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

/// `<stem>.partial.<ext>` next to `path` (`<name>.partial` without an extension): where
/// a run without checkpoints writes a file before renaming it to `path` at the end (the
/// extension is kept, so the format is the same).
pub fn partial_path(path: &Path) -> PathBuf {
    let name = match (path.file_stem(), path.extension()) {
        (Some(stem), Some(ext)) => {
            format!("{}.partial.{}", stem.to_string_lossy(), ext.to_string_lossy())
        }
        _ => format!(
            "{}.partial",
            path.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy())
        ),
    };
    path.with_file_name(name)
}

/// Lengths of the output files at a checkpoint (the prefix a resume continues from).
#[derive(Clone, Copy, Debug)]
struct Cut {
    /// Input events the checkpoint covers.
    events: u64,
    output_len: u64,
    side_len: u64,
}

/// How the job's output files become final.
#[derive(Clone, Copy, Debug)]
enum Delivery {
    /// No checkpoints: the output and the side output are written to
    /// [`partial_path`]s and renamed to their names when the run succeeds, so a failed
    /// run never leaves a file that looks complete under the final name.
    Staged,
    /// Checkpoints: the files are written in place (a resume appends to them); a failed
    /// run cuts them back to the last checkpoint, so what is left is exactly the prefix
    /// `--resume` continues from (`None`: no checkpoint yet, cut to nothing).
    InPlace(Option<Cut>),
}

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

/// Runs a job to the end of its source: see [`OpenAt`] for how the source is opened.
///
/// On failure, the error ([`Error::Stopped`]) says what became of the output: without
/// checkpoints it was written to a [`partial_path`] and not renamed; with checkpoints it
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

/// was cut back to the last checkpoint, so `--resume` continues it.
pub fn run_job(
    cfg: &JobConfig,
    open_source: &mut OpenSource<'_>,
    progress: &mut dyn FnMut(&Progress<'_>),
) -> Result<JobSummary> {
    let _tmp;
    let base: PathBuf = match &cfg.checkpoint_dir {
        Some(d) => d.clone(),
        None => {
            if cfg.resume {
                return Err(Error::Config("--resume needs --checkpoint-dir".into()));
            }
            let t = tempfile::Builder::new()
                .prefix("spillway-job-")
                .tempdir()
                .map_err(|e| Error::Config(format!("cannot create a temporary directory: {e}")))?;
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    let res_dir = base.join("reservoir");
    if cfg.backfill && !cfg.resume {
        return Err(Error::Config(
            "--backfill continues a checkpoint under a new query: it needs --resume".into(),
        ));
    }
    match cfg.retain {
        Some(r) if r < 0 => {
            return Err(Error::Config(format!("--retain must be a duration >= 0, got {r}")))
        }
        Some(r) if r > 0 && cfg.checkpoint_dir.is_none() => {
            return Err(Error::Config(
                "--retain keeps reservoir events for a later --backfill of the job's \
                 checkpoints: it needs --checkpoint-dir"
                    .into(),
            ))
        }
        _ => {}
    }
    check_durable(cfg)?;
    let layout = match &cfg.checkpoint_dir {
        Some(_) => StoreLayout::read(&base)?,
        None => None,
    };
    if cfg.checkpoint_dir.is_some()
        && !cfg.resume
        && (layout.is_some() || base.join(STATE_DIR).exists())
    {
        return Err(Error::Config(format!(
            "{} already holds a job's checkpoints; pass --resume to continue it, or choose an empty directory",
            base.display()
        )));
    }
    let had_layout = layout.is_some();
    let layout = layout.unwrap_or_else(|| StoreLayout::initial(None));
    if cfg.resume {
        layout.remove_leftovers(&base)?;
    }
    let mut state_dir = base.join(&layout.dir);

    // Parse the query against the source's schema (opening the source infers it). A
    // resume only learns the schema here: opening the source for the run would create
    // the dead-letter file afresh, losing the prefix the checkpoint covers.
    let mut fresh_source = if cfg.resume { None } else { Some(open_source(OpenAt::Start)?) };
    let schema = match &fresh_source {
        Some(s) => s.schema().clone(),
        None => open_source(OpenAt::Schema)?.schema().clone(),
    };
    let plan = QueryPlan::build(&cfg.query, &schema, None)?;
    if !plan.is_windowed() && cfg.watermark_delay != 0 {
        return Err(Error::Config(
            "--watermark-delay applies to windowed aggregations (a window table function in \
             FROM); per-event metrics are emitted as each event arrives"
                .into(),
        ));
    }
    if plan.is_windowed() && cfg.backfill {
        return Err(Error::Config(
            "--backfill rebuilds per-event sliding-window metrics (AGG(..) OVER w) from the \
             event reservoir; a windowed aggregation (a window table function in FROM) keeps \
             no reservoir to rebuild from"
                .into(),
        ));
    }
    if plan.is_windowed() && cfg.retain.is_some_and(|r| r > 0) {
        return Err(Error::Config(
            "--retain keeps events in the reservoir of per-event sliding-window metrics; a \
             windowed aggregation (a window table function in FROM) has none"
                .into(),
        ));
    }
    let (columns, specs) = (plan.column_names(), plan.namespace_specs());
    let store_options = |dir: &Path, specs: Vec<spillway_store::NamespaceSpec>| {
        let mut o = StoreOptions::new(dir).memory_budget(cfg.memory_budget);
        if let Some(k) = cfg.expected_keys {
            o = o.expected_keys(k);
        }
        for spec in specs {
            o = o.namespace(spec);
        }
        if let Some(fs) = &cfg.fs {
            o = o.fs(fs.clone());
        }
        o
    };
    let ident = identity(cfg, &schema);
    let side_path =
        cfg.side_output.clone().unwrap_or_else(|| default_side_output(cfg.output.as_deref()));
    let record = JobRecord {
        identity: ident.clone(),
        query: cfg.query.clone(),
        output: match (&cfg.output, cfg.discard_output) {
            (Some(p), false) => Some(absolute(p)),
            _ => None,
        },
        side_output: absolute(&side_path),
    };
    let mut res_opts = ReservoirOptions::new(&res_dir).compression(cfg.compression);
    if let Some(n) = cfg.reservoir_chunk_events {
        res_opts = res_opts.chunk_events(n);
    }
    if let Some(n) = cfg.reservoir_segment_bytes {
        res_opts = res_opts.segment_bytes(n);
    }
    if let Some(fs) = &cfg.fs {
        res_opts = res_opts.fs(fs.clone());
    }

    // A store opens only with the namespaces it was created with: those of the query
    // store.json names, when it is another one (its checkpoint, if any, then needs
    // --backfill; without one the run starts over with this query).
    let open_specs = match &layout.query {
        Some(q) if cfg.resume && *q != cfg.query => checkpointed_plan(q, &schema, &base)?.1,
        _ => specs.clone(),
    };
    let mut store =
        store_config(cfg.store, &cfg.tiered).open(store_options(&state_dir, open_specs))?;
    let meta = if cfg.resume { read_meta(store.as_mut())? } else { None };
    let resumed = meta.is_some();
    // The interval given, else the checkpoint's (a resume keeps it), else the default.
    let checkpoint_every = cfg
        .checkpoint_every
        .or(meta.as_ref().and_then(|m| m.checkpoint_every))
        .unwrap_or(DEFAULT_CHECKPOINT_EVERY);
    let checkpointing = checkpoint_every > 0 && cfg.checkpoint_dir.is_some();
    let mut warnings: Vec<String> = Vec::new();
    let mut backfill_summary: Option<BackfillSummary> = None;
    let mut retention: Option<Retention> = None;
    let (mut runtime, mut source, mut sink, mut side, start_events, delivery) = match meta {
        Some(meta) => {
            check_identity(&meta.job.identity, &ident, &base)?;
            let backfilling = meta.job.query != cfg.query;
            if backfilling && !cfg.backfill {
                return Err(other_query(&base));
            }
            if cfg.backfill && !backfilling {
                warnings.push(format!(
                    "{} already runs this query: --backfill continues it as --resume does",
                    base.display()
                ));
            }
            let events = meta.operator.events();
            let span = cfg.retain.unwrap_or(meta.retain);
            if backfilling {
                let (QueryPlan::Over(plan), OperatorSnapshot::Over { runtime, reservoir }) =
                    (plan, meta.operator)
                else {
                    return Err(Error::Checkpoint(format!(
                        "{} holds a windowed aggregation's checkpoint; --backfill rebuilds \
                         per-event sliding-window metrics only",
                        base.display()
                    )));
                };
                // The output restarts with the new columns: never over the old job's files.
                let out = match (&cfg.output, cfg.discard_output) {
                    (Some(p), false) => Some(p),
                    (_, true) => None,
                    (None, false) => {
                        return Err(Error::Config(
                            "--backfill needs --output FILE: the new query's rows go to a new \
                             file (its columns differ from the checkpointed query's output)"
                                .into(),
                        ))
                    }
                };
                let old_files: Vec<&str> = meta
                    .job
                    .output
                    .iter()
                    .map(String::as_str)
                    .chain([&*meta.job.side_output])
                    .collect();
                for (flag, p) in out
                    .map(|p| ("--output", p.as_path()))
                    .into_iter()
                    .chain([("the side output", side_path.as_path())])
                {
                    if old_files.contains(&absolute(p).as_str()) {
                        return Err(Error::Config(format!(
                            "--backfill starts {flag} {} afresh with the new query's columns, \
                             but the checkpointed job wrote that file; name a new one",
                            p.display()
                        )));
                    }
                }
                let reservoir = Reservoir::recover(res_opts, &schema, &reservoir)?;
                let frontier = runtime.frontier.unwrap_or(0);
                let next = layout.next(&cfg.query);
                let new_dir = base.join(&next.dir);
                let (rt, report, keys) = open_backfill(
                    cfg,
                    &base,
                    &meta.job.query,
                    store,
                    plan,
                    &schema,
                    reservoir,
                    runtime,
                    store_options(&new_dir, specs.clone()),
                )?;
                let summary = backfill_summary_of(&report, keys, frontier, schema.time_unit());
                warnings.extend(summary.warnings.iter().cloned());
                backfill_summary = Some(summary);
                let mut rt: Box<dyn Operator> = Box::new(rt);
                if let Some(r) = rt.as_over() {
                    retention = open_retention(r, span, meta.retain, meta.retain_index)?;
                }
                let mut source = open_source(OpenAt::Checkpoint(&schema, &meta.source))?;
                let mut sink = match out {
                    Some(p) => Some(Sink::create(Some(p), &columns)?),
                    None => None,
                };
                if side_path.exists() {
                    std::fs::remove_file(&side_path).map_err(|e| {
                        Error::Config(format!(
                            "cannot remove {} to start the side output afresh: {e}",
                            side_path.display()
                        ))
                    })?;
                }
                let mut side = None;
                // One checkpoint of the new store, then the switch to it.
                let mut cut = None;
                write_checkpoint(
                    rt.as_mut(),
                    &mut *source,
                    &mut sink,
                    &mut side,
                    &schema,
                    &record,
                    retention.as_ref(),
                    &mut cut,
                    checkpoint_every,
                )?;
                next.write(&base)?;
                // The old directory is a leftover now: a failure to remove it here is
                // retried by the next resume.
                let _ = std::fs::remove_dir_all(&state_dir);
                rt.release_reservoir(retention.as_ref())?;
                (rt, source, sink, side, events, Delivery::InPlace(cut))
            } else {
                let op_opts = OperatorOptions {
                    allowed_lateness: cfg.allowed_lateness,
                    watermark_delay: cfg.watermark_delay,
                    reservoir: &res_opts,
                };
                let mut rt =
                    operator::open(plan, store, &schema, &op_opts, Some(meta.operator), &base)?;
                if let Some(r) = rt.as_over() {
                    retention = open_retention(r, span, meta.retain, meta.retain_index)?;
                }
                if !had_layout {
                    // Written by a build without store.json: the store opened with this
                    // query's namespaces, so record them for a later backfill.
                    StoreLayout::initial(Some(cfg.query.clone())).write(&base)?;
                }
                let source = open_source(OpenAt::Checkpoint(&schema, &meta.source))?;
                let cut = Cut { events, output_len: meta.output_len, side_len: meta.side_len };
                let sink = match (&cfg.output, cfg.discard_output) {
                    (_, true) => None,
                    (Some(p), false) => Some(Sink::resume(p, &columns, meta.output_len)?),
                    (None, false) => {
                        return Err(Error::Config(
                            "--resume needs --output FILE (stdout cannot be cut back)".into(),
                        ))
                    }
                };
                let side = if side_path.exists() {
                    Some(Sink::resume(&side_path, &schema_columns(&schema), meta.side_len)?)
                } else {
                    None
                };
                (rt, source, sink, side, events, Delivery::InPlace(Some(cut)))
            }
        }
        None => {
            if cfg.resume {
                // No checkpoint (the directory is new or empty, or the run before was
                // killed before its first checkpoint): start over from scratch, and say so.
                warnings.push(format!(
                    "no checkpoint in {}: starting from the beginning",
                    base.display()
                ));
                drop(store);
                clear_dirs(&[&state_dir, &base.join(STATE_DIR), &res_dir])?;
                state_dir = base.join(STATE_DIR);
                store = store_config(cfg.store, &cfg.tiered)
                    .open(store_options(&state_dir, specs.clone()))?;
                if side_path.exists() {
                    let _ = std::fs::remove_file(&side_path);
                }
            }
            if cfg.checkpoint_dir.is_some() {
                StoreLayout::initial(Some(cfg.query.clone())).write(&base)?;
            }
            let source = match fresh_source.take() {
                Some(s) => s,
                None => open_source(OpenAt::Start)?,
            };
            let op_opts = OperatorOptions {
                allowed_lateness: cfg.allowed_lateness,
                watermark_delay: cfg.watermark_delay,
                reservoir: &res_opts,
            };
            let mut rt = operator::open(plan, store, &schema, &op_opts, None, &base)?;
            if let Some(r) = rt.as_over() {
                retention = open_retention(r, cfg.retain.unwrap_or(0), 0, 0)?;
            }
            let delivery = if checkpointing { Delivery::InPlace(None) } else { Delivery::Staged };
            // Created last: nothing above can fail and leave it behind.
            let sink = if cfg.discard_output {
                None
            } else {
                let path = cfg.output.as_deref().map(|p| write_path(delivery, p));
                Some(Sink::create(path.as_deref(), &columns)?)
            };
            (rt, source, sink, None, 0, delivery)
        }
    };
    let side_write_path = write_path(delivery, &side_path);
    let output_write_path = cfg.output.as_deref().map(|p| write_path(delivery, p));
    let mut last_cut = match delivery {
        Delivery::InPlace(c) => c,
        Delivery::Staged => None,
    };

    let clock = quanta::Clock::new();
    let started = std::time::Instant::now();
    let new_hist = || {
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| Error::Config(format!("histogram: {e}")))
    };
    let mut hist = new_hist()?;
    let mut pauses = new_hist()?;
    if !warnings.is_empty() {
        progress(&Progress {
            events: start_events,
            seconds: 0.0,
            latency_ns: &hist,
            warnings: &warnings,
        });
    }
    let mut out = Vec::new();
    let mut rows: Vec<Vec<Value>> = Vec::new();
    let mut events_this_run = 0u64;
    let counters_at_start = runtime.counters();
    let skipped_at_start = source.skipped();
    // A backfill made one checkpoint (its switch to the new query) before the run.
    let mut checkpoints = u64::from(backfill_summary.is_some());
    let mut next_progress = started + std::time::Duration::from_millis(100);
    // Without checkpoints nothing needs the events behind the windows after a crash, so
    // their segments are released as the windows pass them. After a resume without
    // checkpoints the recovered checkpoint still needs its events: none are released.
    let release_unchecked = !checkpointing && !resumed;
    let run = (|| -> Result<()> {
        // Events are read in batches of up to BATCH_EVENTS so the store can prefetch their
        // state (Runtime::prefetch); each is then processed on its own, exactly as one at a
        // time. A batch never reads past a checkpoint (the checkpoint records the source
        // position after its last event), and an input error is reported after the events
        // read before it are processed, as without batching.
        //
        // Latency: an event's latency runs from just before it was read to just after its
        // result was written. A pause the job takes between batches (a checkpoint, or a
        // release of reservoir segments after a batch's last event) delays the event read
        // next, which would have been read when the pause began: that event's latency
        // runs from the start of the pause, so checkpoint pauses show in the percentiles
        // (as they would for an event arriving during the checkpoint). A pause inside a
        // batch is already in the latency of the batch's remaining events, read before it.
        let mut batch: Vec<Event> = Vec::with_capacity(BATCH_EVENTS);
        let mut read_at: Vec<u64> = Vec::with_capacity(BATCH_EVENTS);
        // Start of a pause taken after the last batch's last event, charged to the next.
        let mut paused_at: Option<u64> = None;
        loop {
            let mut want = BATCH_EVENTS as u64;
            if checkpointing {
                let done = (start_events + events_this_run) % checkpoint_every;
                want = want.min(checkpoint_every - done);
            }
            let mut input_error = None;
            let mut end = false;
            while (batch.len() as u64) < want {
                let t0 = paused_at.take().unwrap_or_else(|| clock.raw());
                match source.next_event() {
                    Ok(Some(e)) => {
                        batch.push(e);
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
            runtime.prefetch(&batch);
            let n = batch.len();
            for (i, (event, t0)) in batch.drain(..).zip(read_at.drain(..)).enumerate() {
                events_this_run += 1;
                let outcome = runtime.process(event, &mut rows)?;
                if let Some(s) = sink.as_mut() {
                    for r in &rows {
                        s.write_row(r)?;
                    }
                }
                if let Some(r) = rows.pop() {
                    // Keep one row's allocation for the next event.
                    out = r;
                }
                rows.clear();
                match outcome {
                    Outcome::Emitted | Outcome::Filtered => {}
                    Outcome::TooLate(e) => {
                        if side.is_none() {
                            side = Some(Sink::create_side_output(&side_write_path, &schema)?);
                        }
                        if let Some(s) = side.as_mut() {
                            s.write_event(&e)?;
                        }
                    }
                }
                let ns = clock.delta_as_nanos(t0, clock.raw());
                let _ = hist.record(ns.max(1));
                let total = start_events + events_this_run;
                let p0 = clock.raw();
                let mut paused = false;
                if checkpointing && total.is_multiple_of(checkpoint_every) {
                    checkpoint(
                        runtime.as_mut(),
                        &mut *source,
                        &mut sink,
                        &mut side,
                        &schema,
                        &record,
                        retention.as_ref(),
                        &mut last_cut,
                        checkpoint_every,
                    )?;
                    checkpoints += 1;
                    let _ = pauses.record(clock.delta_as_nanos(p0, clock.raw()).max(1));
                    paused = true;
                } else if release_unchecked && events_this_run.is_multiple_of(65_536) {
                    runtime.release_reservoir(retention.as_ref())?;
                    paused = true;
                }
                if paused && i + 1 == n {
                    paused_at = Some(p0);
                }
                if let Some(h) = &cfg.halt {
                    if total == h.events {
                        halt(h, &mut *source, &mut sink, &mut side)?;
                    }
                }
                if events_this_run.is_multiple_of(4096) {
                    let now = std::time::Instant::now();
                    if now >= next_progress {
                        next_progress = now + std::time::Duration::from_millis(100);
                        progress(&Progress {
                            events: start_events + events_this_run,
                            seconds: started.elapsed().as_secs_f64(),
                            latency_ns: &hist,
                            warnings: &[],
                        });
                    }
                }
            }
            if let Some(e) = input_error {
                return Err(e.into());
            }
            if end {
                break;
            }
        }
        runtime.finish(&mut rows)?;
        if let Some(s) = sink.as_mut() {
            for r in rows.drain(..) {
                s.write_row(&r)?;
            }
            s.sync()?;
        }
        if let Some(s) = side.as_mut() {
            s.sync()?;
        }
        source.sync()?;
        Ok(())
    })();
    if let Err(error) = run {
        let cut = match delivery {
            Delivery::Staged => Delivery::Staged,
            Delivery::InPlace(_) => Delivery::InPlace(last_cut),
        };
        let sink_rows = sink.as_ref().map(Sink::rows);
        let side_rows = side.as_ref().map(Sink::rows);
        drop(sink);
        drop(side);
        let outputs = settle_failed_outputs(
            cfg,
            cut,
            sink_rows,
            side_rows.map(|rows| (side_path.as_path(), rows)),
        );
        return Err(Error::Stopped { error: Box::new(error), outputs });
    }
    if let (Some(from), Some(to), true) = (&output_write_path, &cfg.output, sink.is_some()) {
        if from != to {
            publish(from, to)?;
        }
    }
    if side.is_some() && side_write_path != side_path {
        publish(&side_write_path, &side_path)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let rstats = runtime.as_over().map(|r| r.reservoir_mut().stats()).unwrap_or_default();
    let windows = runtime.as_windowed().map(WindowAgg::stats);
    let sstats = runtime.store_mut().stats();
    let counters = runtime.counters();
    Ok(JobSummary {
        counters_this_run: counters.since(&counters_at_start),
        counters,
        skipped_rows: source.skipped(),
        skipped_rows_this_run: source.skipped().saturating_sub(skipped_at_start),
        events_this_run,
        seconds,
        events_per_sec: events_this_run as f64 / seconds.max(1e-9),
        latency_us: LatencySummary::from_hist(&hist),
        checkpoints,
        checkpoint_every: if checkpointing { checkpoint_every } else { 0 },
        checkpoint_pause_us: PauseSummary::from_hist(&pauses),
        side_output: side.map(|_| side_path),
        store: runtime.store_mut().name().to_string(),
        state: StateSummary {
            live_keys: sstats.live_keys,
            bytes_on_disk: sstats.bytes_on_disk,
            disk_reads: sstats.disk_reads,
            tiers: sstats.tiers().cloned(),
        },
        reservoir_bytes: (rstats.bytes_compressed, rstats.bytes_raw),
        reservoir_segments_deleted: rstats.segments_deleted,
        windows,
        backfill: backfill_summary,
    })
}

/// Renames a finished staged file to its final name.
fn publish(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(|e| {
        Error::Config(format!(
            "cannot rename the finished output {} to {}: {e} (the complete output is in {})",
            from.display(),
            to.display(),
            from.display()
        ))
    })
}

/// After a failed run (sinks dropped, so flushed): leaves the output files as
/// [`Delivery`] promises and says what became of them, naming the paths. `sink_rows`
/// is the rows the output sink wrote (`None`: no sink), `side` the side output and its
/// rows, if it was created. A staged file that got no row is removed rather than left
/// holding only a header, and the message says that no rows were written.
fn settle_failed_outputs(
    cfg: &JobConfig,
    delivery: Delivery,
    sink_rows: Option<u64>,
    side: Option<(&Path, u64)>,
) -> String {
    let output = match (&cfg.output, cfg.discard_output, sink_rows) {
        (Some(p), false, Some(rows)) => Some((p.as_path(), rows)),
        _ => None,
    };
    let mut notes = Vec::new();
    match delivery {
        Delivery::Staged => {
            for (p, rows) in output.into_iter().chain(side) {
                let written = write_path(Delivery::Staged, p);
                if written == p {
                    notes.push(if rows == 0 {
                        format!("no rows were written to {} before the error", p.display())
                    } else {
                        format!(
                            "the {rows} rows before the error were written to {} (not a \
                             regular file, so written in place)",
                            p.display()
                        )
                    });
                    continue;
                }
                let kept = if p.exists() { "left unchanged" } else { "not written" };
                if rows == 0 {
                    let _ = std::fs::remove_file(&written);
                    notes.push(format!(
                        "{} was {kept}: the error came before any row was written",
                        p.display()
                    ));
                } else {
                    notes.push(format!(
                        "{} was {kept}: the {rows} rows before the error are in {} (incomplete)",
                        p.display(),
                        written.display()
                    ));
                }
            }
            if let (None, Some(rows), false) = (&cfg.output, sink_rows, cfg.discard_output) {
                notes.push(format!("the {rows} rows before the error were written to stdout"));
            }
        }
        Delivery::InPlace(cut) => {
            let (events, output_len, side_len) =
                cut.map_or((0, 0, 0), |c| (c.events, c.output_len, c.side_len));
            let what = match cut {
                Some(_) => {
                    format!("the output of the first {events} input events (the last checkpoint)")
                }
                None => "nothing (no checkpoint was completed)".to_string(),
            };
            for (p, len) in output
                .map(|(p, _)| (p, output_len))
                .into_iter()
                .chain(side.map(|(p, _)| (p, side_len)))
            {
                if is_stream(p) {
                    notes.push(format!(
                        "the rows before the error were written to {} (not a regular file, so \
                         it cannot be cut back to the last checkpoint)",
                        p.display()
                    ));
                    continue;
                }
                let res = std::fs::OpenOptions::new()
                    .write(true)
                    .open(p)
                    .and_then(|f| f.set_len(len).and_then(|()| f.sync_all()));
                match res {
                    Ok(()) => notes.push(format!(
                        "{} was cut back to {len} bytes, {what}; fix the cause and run again \
                         with --resume to continue from there",
                        p.display()
                    )),
                    Err(e) => notes.push(format!(
                        "{} could not be cut back to the last checkpoint's {len} bytes ({e}): \
                         bytes after them are incomplete; --resume cuts them off",
                        p.display()
                    )),
                }
            }
            if let (None, Some(rows), false) = (&cfg.output, sink_rows, cfg.discard_output) {
                notes.push(format!("the {rows} rows before the error were written to stdout"));
            }
        }
    }
    if notes.is_empty() {
        "no output file was written".into()
    } else {
        notes.join("; ")
    }
}

/// The [`HaltPoint`]: flushes every output file, creates the marker and sleeps.
fn halt(
    h: &HaltPoint,
    source: &mut dyn Source,
    sink: &mut Option<Sink>,
    side: &mut Option<Sink>,
) -> Result<()> {
    if let Some(s) = sink.as_mut() {
        s.sync()?;
    }
    if let Some(s) = side.as_mut() {
        s.sync()?;
    }
    source.sync()?;
    std::fs::write(&h.marker, h.events.to_string()).map_err(|e| {
        Error::Config(format!("cannot create the halt marker {}: {e}", h.marker.display()))
    })?;
    std::thread::sleep(std::time::Duration::from_secs(600));
    Err(Error::Config(format!(
        "halted after {} events (marker {}) and was not killed within 10 minutes",
        h.events,
        h.marker.display()
    )))
}

/// Makes one checkpoint and then releases the reservoir segments no window (and no
/// retention) needs.
#[allow(clippy::too_many_arguments)]
fn checkpoint(
    runtime: &mut dyn Operator,
    source: &mut dyn Source,
    sink: &mut Option<Sink>,
    side: &mut Option<Sink>,
    schema: &Schema,
    record: &JobRecord,
    retention: Option<&Retention>,
    cut: &mut Option<Cut>,
    every: u64,
) -> Result<()> {
    write_checkpoint(runtime, source, sink, side, schema, record, retention, cut, every)?;
    runtime.release_reservoir(retention)
}

/// Makes one checkpoint (releasing nothing). `cut` is set to the output lengths it
/// records as soon as they are durable, before the store commits: if the commit fails
/// midway, a resume finds this checkpoint or the one before, and both cover at most
/// those lengths. `every` is the run's checkpoint interval, recorded for a resume.
#[allow(clippy::too_many_arguments)]
fn write_checkpoint(
    runtime: &mut dyn Operator,
    source: &mut dyn Source,
    sink: &mut Option<Sink>,
    side: &mut Option<Sink>,
    schema: &Schema,
    record: &JobRecord,
    retention: Option<&Retention>,
    cut: &mut Option<Cut>,
    every: u64,
) -> Result<()> {
    let output_len = match sink.as_mut() {
        Some(s) => s.sync()?,
        None => 0,
    };
    let side_len = match side.as_mut() {
        Some(s) => s.sync()?,
        None => 0,
    };
    source.sync()?;
    let operator = runtime.snapshot()?;
    *cut = Some(Cut { events: operator.events(), output_len, side_len });
    let (retain, retain_index) = retention_record(runtime, retention);
    let meta = CheckpointMeta {
        version: META_VERSION,
        job: record.clone(),
        schema: schema.clone(),
        operator,
        source: source.position(),
        output_len,
        side_len,
        retain,
        retain_index,
        checkpoint_every: Some(every),
    };
    write_meta(runtime.store_mut(), &meta)?;
    runtime.store_mut().checkpoint()?;
    Ok(())
}

/// The plan and store namespaces of the query a checkpoint directory recorded (`None`
/// for a windowed aggregation's plan).
fn checkpointed_plan(
    query: &str,
    schema: &Schema,
    base: &Path,
) -> Result<(Option<Plan>, Vec<spillway_store::NamespaceSpec>)> {
    let bad = |e: String| {
        Error::Checkpoint(format!(
            "the query of the checkpoint in {} no longer plans against this input: {e}",
            base.display()
        ))
    };
    match parse(query, schema).map_err(|e| bad(e.to_string()))? {
        Query::Over(q) => {
            let plan = Plan::build(&q, schema).map_err(|e| bad(e.to_string()))?;
            let specs = Runtime::namespace_specs(&plan);
            Ok((Some(plan), specs))
        }
        Query::Windowed(q) => {
            Ok((None, crate::window_agg::WindowPlan::build(&q).namespace_specs()))
        }
    }
}

/// The backfill's work on the state (see the module docs): plans the checkpointed
/// query, matches its group-by nodes with `plan`'s, copies the kept state from
/// `old_store` into a new store (`new_opts`, its directory cleared first), and opens
/// the runtime of `plan` with the rebuilt nodes replayed. Returns the runtime, what the
/// backfill did and the number of state keys copied.
#[allow(clippy::too_many_arguments)]
fn open_backfill(
    cfg: &JobConfig,
    base: &Path,
    old_query: &str,
    mut old_store: Box<dyn StateStore>,
    plan: Plan,
    schema: &Schema,
    reservoir: Reservoir,
    snapshot: RuntimeSnapshot,
    new_opts: StoreOptions,
) -> Result<(Runtime, BackfillReport, u64)> {
    let (old_plan, _) = checkpointed_plan(old_query, schema, base)?;
    let old_plan = old_plan.ok_or_else(|| {
        Error::Checkpoint(format!(
            "{} holds a windowed aggregation's checkpoint; --backfill rebuilds per-event \
             sliding-window metrics only",
            base.display()
        ))
    })?;
    let unit = schema.time_unit();
    let map = GroupMap::new(&old_plan, &plan)?;
    check_rebuildable(&plan, &map, &reservoir, unit)?;
    clear_dirs(&[new_opts.dir.as_path()])?;
    let mut new_store = store_config(cfg.store, &cfg.tiered).open(new_opts)?;
    let keys = copy_kept_state(old_store.as_mut(), &old_plan, new_store.as_mut(), &plan, &map)?;
    drop(old_store);
    let (rt, report) = Runtime::backfill(
        plan,
        new_store,
        reservoir,
        cfg.allowed_lateness,
        &old_plan,
        snapshot,
        &map,
        unit,
    )?;
    Ok((rt, report, keys))
}

/// The job summary of a backfill, with one warning per metric not covered.
fn backfill_summary_of(
    r: &BackfillReport,
    keys_copied: u64,
    frontier: i64,
    unit: crate::value::TimeUnit,
) -> BackfillSummary {
    let not_covered: Vec<NotCoveredMetric> = r
        .not_covered
        .iter()
        .map(|n: &NotCovered| NotCoveredMetric {
            metrics: n.metrics.clone(),
            window: n.frame.display(unit).to_string(),
            oldest_event_time: n.oldest,
            exact_from: n.exact_from,
        })
        .collect();
    let warnings = not_covered
        .iter()
        .map(|n| {
            let names: Vec<String> = n.metrics.iter().map(|m| format!("`{m}`")).collect();
            format!(
                "backfilled metric {} (window {}) is not covered by the reservoir: it holds no \
                 event older than time {} (older ones were released), and the window reaches \
                 further back from the checkpoint's frontier {frontier}; its results are exact \
                 for events at time {} and later (the frontier + {} {}), approximate before",
                names.join(", "),
                n.window,
                n.oldest_event_time,
                n.exact_from,
                n.exact_from.saturating_sub(frontier),
                unit.name()
            )
        })
        .collect();
    BackfillSummary {
        groups_kept: r.groups_kept as u64,
        groups_moved: r.groups_moved as u64,
        groups_rebuilt: r.groups_rebuilt as u64,
        groups_dropped: r.groups_dropped as u64,
        keys_copied,
        events_replayed: r.events_replayed,
        not_covered,
        warnings,
    }
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

/// Removes the directories that exist among `dirs` (state of a run or session that
/// never completed a checkpoint, so it starts over).
pub(crate) fn clear_dirs(dirs: &[&std::path::Path]) -> Result<()> {
    for d in dirs {
        if d.exists() {
            std::fs::remove_dir_all(d)
                .map_err(|e| Error::Config(format!("cannot clear {}: {e}", d.display())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservoir::Position;
    use crate::value::{Field, TimeUnit};

    fn meta(checkpoint_every: Option<u64>) -> CheckpointMeta {
        let fields = vec![Field { name: "ts".into(), ty: crate::value::DataType::Int }];
        CheckpointMeta {
            version: META_VERSION,
            job: JobRecord {
                identity: vec![("input".into(), "x.csv".into())],
                query: "SELECT ts FROM x".into(),
                output: Some("/o.csv".into()),
                side_output: "/o.late.csv".into(),
            },
            schema: Schema::new(fields, "ts", TimeUnit::Ms).unwrap(),
            operator: OperatorSnapshot::Over {
                runtime: RuntimeSnapshot {
                    frontier: Some(300),
                    buffer: Vec::new(),
                    cursors: vec![(2, 0, Vec::new())],
                    counters: Counters { events: 3, emitted: 3, ..Counters::default() },
                },
                reservoir: Position { events: 3, segment: 0, segment_len: 99 },
            },
            source: SourcePosition { byte_offset: 40, line: 4, next_seq: 3, ..Default::default() },
            output_len: 50,
            side_len: 0,
            retain: 0,
            retain_index: 0,
            checkpoint_every,
        }
    }

    /// A version 3 checkpoint (written before the interval was recorded) still reads,
    /// with no interval; version 4 keeps it.
    #[test]
    fn checkpoint_metadata_of_version_3_reads_without_an_interval() {
        let v4 = postcard::to_stdvec(&meta(Some(1500))).unwrap();
        let got = decode_meta(v4).unwrap();
        assert_eq!(got.checkpoint_every, Some(1500));
        // Version 3's bytes: version 3, and no trailing interval.
        let mut v3 = postcard::to_stdvec(&CheckpointMeta { version: 3, ..meta(None) }).unwrap();
        assert_eq!(v3.pop(), Some(0), "an absent Option is one 0 byte at the end");
        let got = decode_meta(v3).unwrap();
        assert_eq!((got.version, got.checkpoint_every), (META_VERSION, None));
        assert_eq!((got.output_len, got.source.byte_offset, got.operator.events()), (50, 40, 3));
        let v2 = postcard::to_stdvec(&CheckpointMeta { version: 2, ..meta(None) }).unwrap();
        let e = decode_meta(v2).err().unwrap().to_string();
        assert!(e.contains("version 2 is not supported"), "{e}");
    }
}
