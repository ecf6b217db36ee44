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
//! ([`partial_path`]) renamed to its name only when the run succeeds. With checkpoints a
//! failed run cuts the files back to the last checkpoint, exactly what `--resume`
//! continues. Either way the error ([`Error::Stopped`]) names the files and what they
//! hold.
//!
//! ## Reservoir segments
//! Segments behind every window are deleted after each checkpoint, or every 65,536
//! events when the run makes no checkpoints (no checkpoint directory, or
//! `checkpoint_every` 0).

use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use spillway_store::{StateStore, StoreKind, StoreOptions};

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::reservoir::{Compression, Position, Reservoir, ReservoirOptions};
use crate::runtime::{Counters, Outcome, Runtime, RuntimeSnapshot, META_NAMESPACE};
use crate::source::{schema_columns, Sink, Source, SourcePosition};
use crate::sql::{parse, Query};
use crate::value::{Event, Schema, Value};
use crate::window_agg::{WindowAgg, WindowPlan, WindowSnapshot, WindowStats};

/// Metadata chunk size in the store (below every backend's value limit).
const META_CHUNK: usize = 32 * 1024;
/// Events read ahead and announced to the store at a time ([`Runtime::prefetch`]).
pub const BATCH_EVENTS: usize = 64;
/// Version of the checkpoint metadata layout (2: the operator snapshot is per query
/// shape).
const META_VERSION: u32 = 2;

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
    /// output, `<output>.late.<ext>`, or `late-events.csv` when writing to stdout).
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
    /// stay, none are released).
    pub checkpoint_every: u64,
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
}

/// What a finished job reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct JobSummary {
    /// Runtime counters (over the whole job, across resumes).
    pub counters: Counters,
    /// Malformed input rows skipped to the dead-letter file.
    pub skipped_rows: u64,
    /// Events processed by this run (after a resume: since the checkpoint).
    pub events_this_run: u64,
    /// Wall seconds of this run.
    pub seconds: f64,
    /// Events per second of this run.
    pub events_per_sec: f64,
    /// Ingest-to-emit latency percentiles of this run, in microseconds.
    pub latency_us: LatencySummary,
    /// Checkpoints written.
    pub checkpoints: u64,
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
    identity: String,
    schema: Schema,
    operator: OperatorSnapshot,
    source: SourcePosition,
    output_len: u64,
    side_len: u64,
}

/// What a checkpoint records of the query's operator.
#[derive(serde::Serialize, serde::Deserialize)]
enum OperatorSnapshot {
    /// Per-event metrics: the runtime's position and the reservoir's.
    Over { runtime: RuntimeSnapshot, reservoir: Position },
    /// A windowed aggregation.
    Windowed(WindowSnapshot),
}

impl OperatorSnapshot {
    fn events(&self) -> u64 {
        match self {
            OperatorSnapshot::Over { runtime, .. } => runtime.counters.events,
            OperatorSnapshot::Windowed(w) => w.counters().events,
        }
    }
}

/// The operator a query runs as (one per job, so the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Operator {
    /// Per-event metrics over sliding windows.
    Over(Runtime),
    /// A windowed aggregation.
    Windowed(WindowAgg),
}

impl Operator {
    fn prefetch(&mut self, events: &[Event]) {
        match self {
            Operator::Over(r) => r.prefetch(events),
            Operator::Windowed(w) => w.prefetch(events),
        }
    }

    /// Processes one event; the rows it emits are appended to `rows`.
    fn process(
        &mut self,
        event: Event,
        out: &mut Vec<Value>,
        rows: &mut Vec<Vec<Value>>,
    ) -> Result<Outcome> {
        match self {
            Operator::Over(r) => {
                let o = r.process(event, out)?;
                if o == Outcome::Emitted {
                    rows.push(std::mem::take(out));
                }
                Ok(o)
            }
            Operator::Windowed(w) => w.process(event, rows),
        }
    }

    /// End of input: a windowed aggregation fires its open windows.
    fn finish(&mut self, rows: &mut Vec<Vec<Value>>) -> Result<()> {
        match self {
            Operator::Over(_) => Ok(()),
            Operator::Windowed(w) => w.finish(rows),
        }
    }

    fn counters(&self) -> Counters {
        match self {
            Operator::Over(r) => r.counters(),
            Operator::Windowed(w) => w.counters(),
        }
    }

    fn store_mut(&mut self) -> &mut dyn StateStore {
        match self {
            Operator::Over(r) => r.store_mut(),
            Operator::Windowed(w) => w.store_mut(),
        }
    }

    /// Syncs what must be durable besides the store and returns the snapshot.
    fn snapshot(&mut self) -> Result<OperatorSnapshot> {
        Ok(match self {
            Operator::Over(r) => {
                let reservoir = r.reservoir_mut().sync()?;
                OperatorSnapshot::Over { runtime: r.snapshot(), reservoir }
            }
            Operator::Windowed(w) => OperatorSnapshot::Windowed(w.snapshot()),
        })
    }

    fn release_reservoir(&mut self) -> Result<()> {
        match self {
            Operator::Over(r) => r.release_reservoir(),
            Operator::Windowed(_) => Ok(()),
        }
    }
}

fn identity(cfg: &JobConfig, schema: &Schema) -> String {
    format!(
        "query={:?};input={};lateness={};delay={};store={};schema={:?}",
        cfg.query,
        cfg.input_identity,
        cfg.allowed_lateness,
        cfg.watermark_delay,
        cfg.store.name(),
        schema
    )
}

fn default_side_output(output: Option<&Path>) -> PathBuf {
    match output {
        Some(p) => {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("csv");
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("output");
            p.with_file_name(format!("{stem}.late.{ext}"))
        }
        None => PathBuf::from("late-events.csv"),
    }
}

fn write_meta(store: &mut dyn StateStore, meta: &CheckpointMeta) -> Result<()> {
    let bytes = postcard::to_stdvec(meta)
        .map_err(|e| Error::Checkpoint(format!("cannot encode checkpoint metadata: {e}")))?;
    write_meta_blob(store, JOB_META_KEY, &bytes)
}

fn read_meta(store: &mut dyn StateStore) -> Result<Option<CheckpointMeta>> {
    let Some(bytes) = read_meta_blob(store, JOB_META_KEY)? else { return Ok(None) };
    let meta: CheckpointMeta = postcard::from_bytes(&bytes)
        .map_err(|e| Error::Checkpoint(format!("cannot decode checkpoint metadata: {e}")))?;
    if meta.version != META_VERSION {
        return Err(Error::Checkpoint(format!(
            "metadata version {} is not supported (this build reads {META_VERSION})",
            meta.version
        )));
    }
    Ok(Some(meta))
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
    let state_dir = base.join("state");
    let res_dir = base.join("reservoir");
    if cfg.checkpoint_dir.is_some() && !cfg.resume && base.join("state").exists() {
        return Err(Error::Config(format!(
            "{} already holds a job's checkpoints; pass --resume to continue it, or choose an empty directory",
            base.display()
        )));
    }
    let checkpointing = cfg.checkpoint_every > 0 && cfg.checkpoint_dir.is_some();

    // Parse the query against the source's schema (opening the source infers it). A
    // resume only learns the schema here: opening the source for the run would create
    // the dead-letter file afresh, losing the prefix the checkpoint covers.
    let mut fresh_source = if cfg.resume { None } else { Some(open_source(OpenAt::Start)?) };
    let schema = match &fresh_source {
        Some(s) => s.schema().clone(),
        None => open_source(OpenAt::Schema)?.schema().clone(),
    };
    let plan = match parse(&cfg.query, &schema)? {
        Query::Over(q) => {
            if cfg.watermark_delay != 0 {
                return Err(Error::Config(
                    "--watermark-delay applies to windowed aggregations (a window table \
                     function in FROM); per-event metrics are emitted as each event arrives"
                        .into(),
                ));
            }
            QueryPlan::Over(Plan::build(&q, &schema)?)
        }
        Query::Windowed(q) => QueryPlan::Windowed(WindowPlan::build(&q)),
    };
    let (columns, specs) = match &plan {
        QueryPlan::Over(p) => (p.column_names(), Runtime::namespace_specs(p)),
        QueryPlan::Windowed(p) => (p.column_names(), p.namespace_specs()),
    };
    let mut store_opts =
        StoreOptions::new(&state_dir).memory_budget(cfg.memory_budget).tiered(cfg.tiered.clone());
    if let Some(k) = cfg.expected_keys {
        store_opts = store_opts.expected_keys(k);
    }
    for spec in specs {
        store_opts = store_opts.namespace(spec);
    }
    let ident = identity(cfg, &schema);
    let mut res_opts = ReservoirOptions::new(&res_dir).compression(cfg.compression);
    if let Some(n) = cfg.reservoir_chunk_events {
        res_opts = res_opts.chunk_events(n);
    }
    if let Some(n) = cfg.reservoir_segment_bytes {
        res_opts = res_opts.segment_bytes(n);
    }
    let side_path =
        cfg.side_output.clone().unwrap_or_else(|| default_side_output(cfg.output.as_deref()));

    let mut store = cfg.store.open(store_opts.clone())?;
    let meta = if cfg.resume { read_meta(store.as_mut())? } else { None };
    let resumed = meta.is_some();
    let (mut runtime, mut source, mut sink, mut side, start_events, delivery) = match meta {
        Some(meta) => {
            if meta.identity != ident {
                return Err(Error::Checkpoint(format!(
                    "{} was written by a job with other arguments (query, input, lateness, store or schema differ); resume with the same arguments",
                    base.display()
                )));
            }
            let events = meta.operator.events();
            let rt = match (plan, meta.operator) {
                (QueryPlan::Over(plan), OperatorSnapshot::Over { runtime, reservoir }) => {
                    let reservoir = Reservoir::recover(res_opts, &schema, &reservoir)?;
                    Operator::Over(Runtime::new(
                        plan,
                        store,
                        reservoir,
                        cfg.allowed_lateness,
                        Some(runtime),
                    )?)
                }
                (QueryPlan::Windowed(plan), OperatorSnapshot::Windowed(snap)) => {
                    Operator::Windowed(WindowAgg::new(
                        plan,
                        store,
                        cfg.allowed_lateness,
                        cfg.watermark_delay,
                        Some(snap),
                    )?)
                }
                _ => {
                    return Err(Error::Checkpoint(format!(
                        "{} holds the checkpoint of another kind of query",
                        base.display()
                    )))
                }
            };
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
        None => {
            if cfg.resume {
                // Killed before the first checkpoint: start over from scratch.
                drop(store);
                clear_dirs(&[&state_dir, &res_dir])?;
                store = cfg.store.open(store_opts)?;
                if side_path.exists() {
                    let _ = std::fs::remove_file(&side_path);
                }
            }
            let source = match fresh_source.take() {
                Some(s) => s,
                None => open_source(OpenAt::Start)?,
            };
            let rt = match plan {
                QueryPlan::Over(plan) => {
                    let reservoir = Reservoir::create(res_opts, &schema)?;
                    Operator::Over(Runtime::new(
                        plan,
                        store,
                        reservoir,
                        cfg.allowed_lateness,
                        None,
                    )?)
                }
                QueryPlan::Windowed(plan) => Operator::Windowed(WindowAgg::new(
                    plan,
                    store,
                    cfg.allowed_lateness,
                    cfg.watermark_delay,
                    None,
                )?),
            };
            let delivery = if checkpointing { Delivery::InPlace(None) } else { Delivery::Staged };
            // Created last: nothing above can fail and leave it behind.
            let sink = if cfg.discard_output {
                None
            } else {
                let path = match (delivery, &cfg.output) {
                    (Delivery::Staged, Some(p)) => Some(partial_path(p)),
                    (_, p) => p.clone(),
                };
                Some(Sink::create(path.as_deref(), &columns)?)
            };
            (rt, source, sink, None, 0, delivery)
        }
    };
    let side_write_path = match delivery {
        Delivery::Staged => partial_path(&side_path),
        Delivery::InPlace(_) => side_path.clone(),
    };
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
    let mut out = Vec::new();
    let mut rows: Vec<Vec<Value>> = Vec::new();
    let mut events_this_run = 0u64;
    let mut checkpoints = 0u64;
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
                let done = (start_events + events_this_run) % cfg.checkpoint_every;
                want = want.min(cfg.checkpoint_every - done);
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
                let outcome = runtime.process(event, &mut out, &mut rows)?;
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
                if checkpointing && total.is_multiple_of(cfg.checkpoint_every) {
                    checkpoint(
                        &mut runtime,
                        &mut *source,
                        &mut sink,
                        &mut side,
                        &schema,
                        &ident,
                        &mut last_cut,
                    )?;
                    checkpoints += 1;
                    let _ = pauses.record(clock.delta_as_nanos(p0, clock.raw()).max(1));
                    paused = true;
                } else if release_unchecked && events_this_run.is_multiple_of(65_536) {
                    runtime.release_reservoir()?;
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
        let sink_written = sink.is_some();
        let side_written = side.is_some();
        drop(sink);
        drop(side);
        let outputs = settle_failed_outputs(
            cfg,
            cut,
            sink_written,
            side_written.then_some(side_path.as_path()),
        );
        return Err(Error::Stopped { error: Box::new(error), outputs });
    }
    if let (Delivery::Staged, Some(p), true) = (delivery, &cfg.output, sink.is_some()) {
        publish(&partial_path(p), p)?;
    }
    if let (Delivery::Staged, true) = (delivery, side.is_some()) {
        publish(&side_write_path, &side_path)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let rstats = match &mut runtime {
        Operator::Over(r) => r.reservoir_mut().stats(),
        Operator::Windowed(_) => Default::default(),
    };
    let windows = match &runtime {
        Operator::Over(_) => None,
        Operator::Windowed(w) => Some(w.stats()),
    };
    let sstats = runtime.store_mut().stats();
    Ok(JobSummary {
        counters: runtime.counters(),
        skipped_rows: source.skipped(),
        events_this_run,
        seconds,
        events_per_sec: events_this_run as f64 / seconds.max(1e-9),
        latency_us: LatencySummary::from_hist(&hist),
        checkpoints,
        checkpoint_pause_us: PauseSummary::from_hist(&pauses),
        side_output: side.map(|_| side_path),
        store: runtime.store_mut().name().to_string(),
        state: StateSummary {
            live_keys: sstats.live_keys,
            bytes_on_disk: sstats.bytes_on_disk,
            disk_reads: sstats.disk_reads,
            tiers: sstats.tiers,
        },
        reservoir_bytes: (rstats.bytes_compressed, rstats.bytes_raw),
        reservoir_segments_deleted: rstats.segments_deleted,
        windows,
    })
}

/// The plan of either query shape.
enum QueryPlan {
    Over(Plan),
    Windowed(WindowPlan),
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
/// [`Delivery`] promises and says what became of them, naming the paths.
fn settle_failed_outputs(
    cfg: &JobConfig,
    delivery: Delivery,
    sink_written: bool,
    side: Option<&Path>,
) -> String {
    let output = match (&cfg.output, cfg.discard_output, sink_written) {
        (Some(p), false, true) => Some(p.as_path()),
        _ => None,
    };
    let mut notes = Vec::new();
    match delivery {
        Delivery::Staged => {
            for p in output.into_iter().chain(side) {
                let partial = partial_path(p);
                let kept = if p.exists() { "left unchanged" } else { "not written" };
                notes.push(format!(
                    "{} was {kept}: the rows before the error are in {} (incomplete)",
                    p.display(),
                    partial.display()
                ));
            }
            if output.is_none() && sink_written && !cfg.discard_output {
                notes.push("the rows before the error were written to stdout".into());
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
            for (p, len) in
                output.map(|p| (p, output_len)).into_iter().chain(side.map(|p| (p, side_len)))
            {
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
            if output.is_none() && sink_written && !cfg.discard_output {
                notes.push("the rows before the error were written to stdout".into());
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

/// Makes one checkpoint. `cut` is set to the output lengths it records as soon as they
/// are durable, before the store commits: if the commit fails midway, a resume finds
/// this checkpoint or the one before, and both cover at most those lengths.
fn checkpoint(
    runtime: &mut Operator,
    source: &mut dyn Source,
    sink: &mut Option<Sink>,
    side: &mut Option<Sink>,
    schema: &Schema,
    ident: &str,
    cut: &mut Option<Cut>,
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
    let meta = CheckpointMeta {
        version: META_VERSION,
        identity: ident.to_string(),
        schema: schema.clone(),
        operator,
        source: source.position(),
        output_len,
        side_len,
    };
    write_meta(runtime.store_mut(), &meta)?;
    runtime.store_mut().checkpoint()?;
    runtime.release_reservoir()?;
    Ok(())
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
