//! Running an experiment: its event stream through its operator into a sink (a trace
//! writer, a replayer on a live store, or a counter), and the benchmark drivers of
//! `spillway bench workload` and `spillway bench suite` (with [`replay_on_stores`], the
//! per-store replay of a trace file that `bench replay` shares).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use spillway_store::{AccessHint, StoreKind};

use super::config::{Experiment, Mode};
use super::operators::{self, OperatorStats};
use super::replay::{self, Pace, ReplayConfig, ReplayReport, Replayer};
use super::source::{EventStream, StreamCounts};
use super::ycsb::YcsbConfig;
use super::{OpKind, OperatorKind, StateOp, StreamItem};
use crate::report::{ResultRow, TraceSeries};
use crate::trace::binary::{TraceReader, TraceWriter, TraceWriterOptions};
use crate::trace::stats::{characterize, CharacterizeOptions, TraceStats};

/// What generating a workload produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GenReport {
    /// Input events processed by the operator.
    pub input_events: u64,
    /// State ops issued.
    pub ops: u64,
    /// Ops per kind.
    pub op_counts: BTreeMap<String, u64>,
    /// Counts of the event stream (generated == emitted: nothing is lost).
    pub stream: StreamCounts,
    /// The operator's counters (late events dropped beyond the allowed lateness, ...).
    pub operator: OperatorStats,
    /// Wall seconds.
    pub seconds: f64,
}

/// Runs `exp`'s event stream through its operator and hands every op to `sink`
/// (stopping at the first sink error, or after `run.max_ops` ops).
pub fn generate(
    exp: &Experiment,
    sink: &mut dyn FnMut(u64, &StateOp) -> Result<()>,
) -> Result<GenReport> {
    let started = Instant::now();
    let mut stream = EventStream::new(exp).map_err(|e| anyhow!("event source: {e}"))?;
    let mut op = operators::build(&exp.operator_params()).map_err(|e| anyhow!("operator: {e}"))?;
    struct Ctx<'a> {
        counts: [u64; OpKind::ALL.len()],
        ops: u64,
        max_ops: u64,
        failed: Option<anyhow::Error>,
        sink: &'a mut dyn FnMut(u64, &StateOp) -> Result<()>,
    }
    impl Ctx<'_> {
        fn done(&self) -> bool {
            self.failed.is_some() || self.ops >= self.max_ops
        }
        fn emit(&mut self, event: u64, o: &StateOp) {
            if self.done() {
                return;
            }
            self.counts[o.kind as usize] += 1;
            self.ops += 1;
            if let Err(e) = (self.sink)(event, o) {
                self.failed = Some(e);
            }
        }
    }
    let mut cx = Ctx {
        counts: [0; OpKind::ALL.len()],
        ops: 0,
        max_ops: exp.run.max_ops.unwrap_or(u64::MAX),
        failed: None,
        sink,
    };
    let mut input_events = 0u64;
    let mut last_event = 0u64;
    while let Some(item) = stream.try_next().map_err(|e| anyhow!("event source: {e}"))? {
        if let StreamItem::Event(_) = item {
            input_events += 1;
        }
        // Ops caused by an event carry its number; ops of a watermark carry the last.
        last_event = input_events.saturating_sub(1);
        op.on_item(&item, last_event, &mut |o| cx.emit(last_event, o));
        if cx.done() {
            break;
        }
    }
    if !cx.done() {
        op.finish(last_event, &mut |o| cx.emit(last_event, o));
    }
    if let Some(e) = cx.failed.take() {
        return Err(e);
    }
    let (ops, counts) = (cx.ops, cx.counts);
    Ok(GenReport {
        input_events,
        ops,
        op_counts: OpKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), counts[*k as usize]))
            .filter(|(_, c)| *c > 0)
            .collect(),
        stream: stream.counts(),
        operator: op.stats(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Generates `exp` into a binary trace file at `out` (the experiment's TOML is stored
/// in the trace's metadata).
pub fn generate_trace_file(exp: &Experiment, out: &Path) -> Result<GenReport> {
    let f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let opts = TraceWriterOptions {
        metadata: Some(serde_json::json!({ "experiment": exp.to_toml() })),
        ..TraceWriterOptions::default()
    };
    let mut w = TraceWriter::new(f, opts)?;
    let r = generate(exp, &mut |n, op| Ok(w.write(n, op)?))?;
    w.finish()?;
    Ok(r)
}

/// One (workload, store) measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkloadResult {
    /// Workload name.
    pub workload: String,
    /// The replay report (throughput, latencies, per-kind).
    pub replay: ReplayReport,
    /// Generation counters (for streaming workloads).
    pub generated: Option<GenReport>,
}

/// Characterizes a binary trace file for the report's plots: its stack-distance
/// histogram (power-of-two buckets) and working set over time (distinct keys per
/// 10,000 ops). Key-sequence uniqueness is skipped (the costly part).
pub fn trace_series(name: &str, path: &Path) -> Result<(TraceSeries, TraceStats)> {
    let r =
        TraceReader::new(std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?))?;
    let opts = CharacterizeOptions { sequence_len: 0, ..CharacterizeOptions::default() };
    let stats = characterize(r, &opts)?;
    Ok((series_of(name, &stats), stats))
}

/// The report's plot series of a characterized trace.
pub fn series_of(name: &str, stats: &TraceStats) -> TraceSeries {
    let w = stats.working_set.window_ops;
    TraceSeries {
        workload: name.to_string(),
        stack_distance: stats.stack_distance.iter().map(|b| (b.max, b.count)).collect(),
        working_set: stats
            .working_set
            .series
            .iter()
            .enumerate()
            .map(|(i, &k)| ((i as u64 + 1) * w, k))
            .collect(),
    }
}

impl WorkloadResult {
    /// The report row of this result.
    pub fn row(&self) -> ResultRow {
        ResultRow {
            workload: self.workload.clone(),
            store: self.replay.store.clone(),
            ops: self.replay.ops,
            seconds: self.replay.seconds,
            ops_per_sec: self.replay.ops_per_sec,
            p50_us: self.replay.p50_us,
            p99_us: self.replay.p99_us,
            p999_us: self.replay.p999_us,
            max_us: self.replay.max_us,
            layout: self.replay.layout.clone(),
        }
    }
}

/// Closed-loop latency sampling for a store: one op in 16 timed for the in-memory
/// stores, whose ops take tens of nanoseconds (see the replay module's "Sampled
/// latency"); every op for the others, whose ops take microseconds.
pub fn latency_every(kind: StoreKind) -> u32 {
    match kind {
        StoreKind::Mem | StoreKind::HashLog | StoreKind::AppendLog | StoreKind::Adaptive => 16,
        _ => 1,
    }
}

fn replay_config(exp: &Experiment) -> ReplayConfig {
    ReplayConfig {
        pace: match exp.run.rate {
            Some(r) => Pace::Open { ops_per_sec: r },
            None => Pace::Closed,
        },
        warmup_ops: exp.run.warmup_ops,
        ..ReplayConfig::default()
    }
}

/// Where stores are created: a fresh temporary directory under `dir` (created with its
/// parents if missing) or under the system's temporary directory.
pub(crate) fn store_dir(dir: Option<&Path>) -> Result<tempfile::TempDir> {
    let b = tempfile::Builder::new().prefix("spillway-workload-").to_owned();
    Ok(match dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| {
                format!("cannot create the store directory {} (--dir)", d.display())
            })?;
            b.tempdir_in(d).with_context(|| {
                format!("cannot create a store directory in {} (--dir)", d.display())
            })?
        }
        None => {
            b.tempdir().context("cannot create a store directory in the temporary directory")?
        }
    })
}

/// Opens a fresh source of the same ops for each replay of [`replay_on_stores`].
pub type OpenFill<'a> = dyn Fn() -> Result<replay::BatchFill<'static>> + 'a;

/// Longest the unmeasured warm-up replay of [`replay_on_stores`] runs, in seconds.
const WARM_UP_SECONDS: f64 = 3.0;

/// Replays the ops that `open` gives against each store in turn, each store opened
/// fresh in its own directory under `work` (removed afterwards) with `hint`'s layout,
/// the ops decoded on a reader thread ([`replay::replay_pipelined`]). A first replay into
/// a hashlog store, not measured, warms the page cache, the allocator and the kernel's
/// huge pages so that the first store measured does not alone pay for them. One result
/// per store, named `name`.
pub fn replay_on_stores(
    name: &str,
    open: &OpenFill<'_>,
    stores: &[StoreKind],
    memory_budget: u64,
    work: &Path,
    hint: AccessHint,
    cfg: &ReplayConfig,
) -> Result<Vec<WorkloadResult>> {
    // Warm-up, not measured: a replay into a hashlog store, so that the first store
    // measured does not alone pay for the trace's page-cache misses, the allocator's
    // first page faults and the kernel's first huge pages (which made the first store of
    // a suite row measurably slower than the same store run second: a MemStore warm-up
    // touched heap pages but not the 2 MiB pages that hashlog's frames and index fault
    // in, and the first hashlog-based store after a build ran at a third of the second's
    // speed, its samples in the kernel's zeroing of fresh huge pages). It stops after
    // WARM_UP_SECONDS, so a workload hashlog is slow at (a list that outgrows a record)
    // does not double the suite's time. Errors end it early; they are not results.
    let wdir = work.join("warm-up");
    let opts = replay::store_options_for(&wdir, hint).memory_budget(memory_budget);
    if let Ok(mut store) = StoreKind::HashLog.open(opts) {
        let mut fill = open()?;
        let start = std::time::Instant::now();
        let bounded: replay::BatchFill<'_> = Box::new(move |batch| {
            if start.elapsed().as_secs_f64() > WARM_UP_SECONDS {
                return Ok(false);
            }
            fill(batch)
        });
        let _ = replay::replay_pipelined(store.as_mut(), bounded, cfg);
    }
    let _ = std::fs::remove_dir_all(&wdir);
    let mut out = Vec::new();
    for (i, &kind) in stores.iter().enumerate() {
        let sdir = work.join(format!("store-{i}"));
        let opts = replay::store_options_for(&sdir, hint).memory_budget(memory_budget);
        let mut store = kind.open(opts).with_context(|| format!("opening {}", kind.name()))?;
        let cfg = ReplayConfig { latency_every: latency_every(kind), ..cfg.clone() };
        let report = replay::replay_pipelined(store.as_mut(), open()?, &cfg)
            .with_context(|| format!("replaying {name} on {}", kind.name()))?;
        drop(store);
        let _ = std::fs::remove_dir_all(&sdir);
        out.push(WorkloadResult { workload: name.to_string(), replay: report, generated: None });
    }
    Ok(out)
}

/// Runs one experiment against each store: online (ops generated while replaying) or
/// offline (generated once into a trace file, then replayed from it for every store).
pub fn run_experiment(
    name: &str,
    exp: &Experiment,
    stores: &[StoreKind],
    memory_budget: u64,
    dir: Option<&Path>,
) -> Result<Vec<WorkloadResult>> {
    Ok(run_experiment_with_series(name, exp, stores, memory_budget, dir, false)?.0)
}

/// [`run_experiment`], and with `characterize` (offline mode only) also the trace's
/// plot series.
pub fn run_experiment_with_series(
    name: &str,
    exp: &Experiment,
    stores: &[StoreKind],
    memory_budget: u64,
    dir: Option<&Path>,
    characterize: bool,
) -> Result<(Vec<WorkloadResult>, Option<TraceSeries>)> {
    let cfg = replay_config(exp);
    let work = store_dir(dir)?;
    let hint = exp.operator.access_hint();
    if exp.run.mode == Mode::Offline {
        let p: PathBuf = work.path().join("workload.trace");
        generate_trace_file(exp, &p).with_context(|| format!("generating {name}"))?;
        let series = if characterize { Some(trace_series(name, &p)?.0) } else { None };
        let open = || -> Result<replay::BatchFill<'static>> {
            let f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&p)?);
            Ok(replay::fill_from_trace(TraceReader::new(f)?))
        };
        let out = replay_on_stores(name, &open, stores, memory_budget, work.path(), hint, &cfg)?;
        return Ok((out, series));
    }
    let mut out = Vec::new();
    for (i, &kind) in stores.iter().enumerate() {
        let sdir = work.path().join(format!("store-{i}"));
        let opts = replay::store_options_for(&sdir, hint).memory_budget(memory_budget);
        let mut store = kind.open(opts).with_context(|| format!("opening {}", kind.name()))?;
        let mut rp = Replayer::new(store.as_mut(), cfg.clone())?;
        let generated = generate(exp, &mut |n, op| Ok(rp.apply(n, op)?))?;
        let report = rp.finish();
        drop(store);
        let _ = std::fs::remove_dir_all(&sdir);
        out.push(WorkloadResult {
            workload: name.to_string(),
            replay: report,
            generated: Some(generated),
        });
    }
    Ok((out, None))
}

/// Runs a YCSB workload (load phase unmeasured, then the run phase) against each store.
pub fn run_ycsb(
    cfg: &YcsbConfig,
    stores: &[StoreKind],
    memory_budget: u64,
    dir: Option<&Path>,
) -> Result<Vec<WorkloadResult>> {
    let work = store_dir(dir)?;
    let mut out = Vec::new();
    for (i, &kind) in stores.iter().enumerate() {
        let sdir = work.path().join(format!("store-{i}"));
        let opts = replay::store_options(&sdir).memory_budget(memory_budget);
        let mut store = kind.open(opts)?;
        let load = cfg.load_ops().map_err(|e| anyhow!("{e}"))?;
        let mut rp = Replayer::new(store.as_mut(), ReplayConfig::default())?;
        for (n, op) in load {
            rp.apply(n, &op)?;
        }
        drop(rp);
        let run = cfg.run_ops().map_err(|e| anyhow!("{e}"))?;
        let report =
            replay::replay(store.as_mut(), replay::infallible(run), &ReplayConfig::default())?;
        drop(store);
        let _ = std::fs::remove_dir_all(&sdir);
        out.push(WorkloadResult {
            workload: format!("ycsb-{}", cfg.workload.name().to_ascii_lowercase()),
            replay: report,
            generated: None,
        });
    }
    Ok(out)
}

/// The suite's experiment for one operator: Gadget's defaults (zipf s=1 over 1M keys,
/// exponential gaps lambda=10, window 5, slide 1, 10-byte keys and values), `events`
/// events per source, values of `value_bytes`.
pub fn suite_experiment(
    kind: OperatorKind,
    events: u64,
    value_bytes: u32,
    seed: u64,
) -> Result<Experiment> {
    let text = format!(
        "seed = {seed}\n[operator]\ntype = \"{}\"\n[run]\nmode = \"offline\"\n",
        kind.name()
    );
    let mut exp = Experiment::from_toml_str(&text).map_err(|e| anyhow!("{e}"))?;
    for s in &mut exp.sources {
        if let super::config::SourceInput::Synthetic(syn) = &mut s.input {
            syn.events = events;
        }
        s.value_size = super::dist::ValueSize::Constant { bytes: value_bytes };
    }
    exp.validate().map_err(|e| anyhow!("{e}"))?;
    Ok(exp)
}

/// The harness's own cost on one workload (see [`replay_overhead`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Overhead {
    /// Ops replayed.
    pub ops: u64,
    /// Wall seconds to replay the trace against a no-op store.
    pub null_seconds: f64,
    /// Of those, seconds the replay thread waited for the trace reader.
    pub null_wait_seconds: f64,
    /// Wall seconds to replay the trace against MemStore.
    pub mem_seconds: f64,
    /// Of those, seconds the replay thread waited for the trace reader.
    pub mem_wait_seconds: f64,
}

impl Overhead {
    /// The replay thread's busy seconds with the no-op store: the harness's own cost.
    pub fn harness_seconds(&self) -> f64 {
        self.null_seconds - self.null_wait_seconds
    }

    /// MemStore's own seconds: the replay thread's busy time with MemStore less the
    /// harness's.
    pub fn store_seconds(&self) -> f64 {
        self.mem_seconds - self.mem_wait_seconds - self.harness_seconds()
    }

    /// The harness's cost as a fraction of MemStore's own time.
    pub fn fraction(&self) -> f64 {
        self.harness_seconds() / self.store_seconds().max(1e-9)
    }
}

/// Generates `exp` into a trace, then replays it against a no-op store and against
/// MemStore the way the suite replays a trace (the trace decoded on a reader thread,
/// MemStore's latency sampled one op in [`latency_every`]), both from the page cache.
/// The replay thread's busy time (wall time less the time it waited for the reader)
/// with the no-op store is the harness's cost; with MemStore, less the harness's,
/// MemStore's own time.
pub fn replay_overhead(
    exp: &Experiment,
    memory_budget: u64,
    dir: Option<&Path>,
) -> Result<Overhead> {
    let work = store_dir(dir)?;
    let p = work.path().join("workload.trace");
    generate_trace_file(exp, &p)?;
    let open = || -> Result<_> {
        let r =
            TraceReader::new(std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&p)?))?;
        Ok(replay::fill_from_trace(r))
    };
    let cfg =
        ReplayConfig { latency_every: latency_every(StoreKind::Mem), ..ReplayConfig::default() };
    // Warm the page cache and the allocator once.
    let _ = replay::replay_null_pipelined(open()?, &cfg)?;
    let null = replay::replay_null_pipelined(open()?, &cfg)?;
    let opts = replay::store_options(work.path().join("mem")).memory_budget(memory_budget);
    let mut store = StoreKind::Mem.open(opts)?;
    let mem = replay::replay_pipelined(store.as_mut(), open()?, &cfg)?;
    Ok(Overhead {
        ops: null.ops,
        null_seconds: null.seconds,
        null_wait_seconds: null.source_wait_seconds,
        mem_seconds: mem.seconds,
        mem_wait_seconds: mem.source_wait_seconds,
    })
}

/// Runs several experiments at once, each operator on its own thread: with `shared`
/// false each gets its own store of `kind` (shared nothing, the dataflow model); with
/// `shared` true all take turns on one store behind a lock (to model a shared store,
/// not for speed). Each experiment is generated into a trace first, so generation is
/// not measured.
pub fn run_concurrent(
    exps: &[(String, Experiment)],
    kind: StoreKind,
    memory_budget: u64,
    dir: Option<&Path>,
    shared: bool,
) -> Result<Vec<WorkloadResult>> {
    let work = store_dir(dir)?;
    let mut traces = Vec::new();
    for (i, (name, exp)) in exps.iter().enumerate() {
        let p = work.path().join(format!("workload-{i}.trace"));
        generate_trace_file(exp, &p).with_context(|| format!("generating {name}"))?;
        traces.push(p);
    }
    let stream = |p: &Path| -> Result<replay::OpStream<'static>> {
        let r =
            TraceReader::new(std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(p)?))?;
        Ok(Box::new(r.map(|rec| rec.map(|rec| (rec.input_event, rec.op)).map_err(Into::into))))
    };
    let cfg = exps.first().map(|(_, e)| replay_config(e)).unwrap_or_default();
    let reports = if shared {
        // One store for all: the first operator's hint decides the namespace's layout.
        let hint = exps.first().map_or(AccessHint::Point, |(_, e)| e.operator.access_hint());
        let opts = replay::store_options_for(work.path().join("shared"), hint)
            .memory_budget(memory_budget);
        let mut store = kind.open(opts)?;
        let streams = traces.iter().map(|p| stream(p)).collect::<Result<Vec<_>>>()?;
        replay::replay_shared(streams, store.as_mut(), &cfg)?
    } else {
        let mut stores = Vec::new();
        for (i, (_, exp)) in exps.iter().enumerate() {
            let hint = exp.operator.access_hint();
            let opts = replay::store_options_for(work.path().join(format!("store-{i}")), hint)
                .memory_budget(memory_budget);
            stores.push(kind.open(opts)?);
        }
        let mut jobs = Vec::new();
        for (p, s) in traces.iter().zip(stores.iter_mut()) {
            jobs.push(replay::ReplayJob { ops: stream(p)?, store: s.as_mut() });
        }
        replay::replay_parallel(jobs, &cfg)?
    };
    Ok(exps
        .iter()
        .zip(reports)
        .map(|((name, _), replay)| WorkloadResult {
            workload: format!("{name}{}", if shared { " (shared store)" } else { "" }),
            replay,
            generated: None,
        })
        .collect())
}
