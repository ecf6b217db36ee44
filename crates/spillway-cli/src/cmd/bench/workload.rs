//! `spillway trace gen`, `spillway bench workload`, `spillway bench replay` and
//! `spillway bench suite`: argument parsing and printing around
//! `spillway_bench::workload`.

use std::io::{BufWriter, IsTerminal};
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::report::{ReportInput, ResultRow, TraceSeries};
use spillway_bench::trace::gadget::GadgetTextWriter;
use spillway_bench::trace::TraceFormat;
use spillway_bench::units::{parse_count, parse_size};
use spillway_bench::workload::config::Experiment;
use spillway_bench::workload::gadget::load_experiment;
use spillway_bench::workload::run::{
    generate, generate_trace_file, run_experiment_with_series, run_ycsb, suite_experiment,
    WorkloadResult,
};
use spillway_bench::workload::ycsb::{Workload, YcsbConfig};

fn parse_ycsb(s: &str) -> Result<Option<Workload>, String> {
    if s == "none" {
        return Ok(None);
    }
    Workload::parse(s)
        .map(Some)
        .ok_or_else(|| format!("unknown YCSB workload `{s}`; use a, b, c, d, e, f or none"))
}
use spillway_bench::workload::OperatorKind;
use spillway_store::StoreKind;

/// `spillway trace gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Experiment: a TOML file or a Gadget `key=value` config file
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Output trace file
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Trace format: bin (Spillway's checksummed binary), gadget (Gadget's text), or null
    /// (count the ops and write nothing: measures generation alone)
    #[arg(long, default_value = "bin", value_name = "FORMAT")]
    format: String,
}

fn load(path: &std::path::Path) -> Result<Experiment> {
    let imported = load_experiment(path).with_context(|| format!("{}", path.display()))?;
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    Ok(imported.experiment)
}

/// `spillway trace gen`.
pub fn gen(a: GenArgs) -> Result<()> {
    let exp = load(&a.config)?;
    if a.format != "null" {
        crate::cmd::trace::create_parent(&a.out)?;
    }
    if a.format == "null" {
        let r = generate(&exp, &mut |_, op| {
            std::hint::black_box(op);
            Ok(())
        })?;
        eprintln!(
            "{} input events -> {} state ops in {:.3} s: {:.2}M ops/s generated (null sink)",
            r.input_events,
            r.ops,
            r.seconds,
            r.ops as f64 / r.seconds.max(1e-9) / 1e6
        );
        return Ok(());
    }
    let format = TraceFormat::parse(&a.format)
        .ok_or_else(|| anyhow!("--format {}: use bin, gadget or null", a.format))?;
    let r = match format {
        TraceFormat::Binary => generate_trace_file(&exp, &a.out)
            .with_context(|| format!("writing {}", a.out.display()))?,
        TraceFormat::GadgetText => {
            let f = std::fs::File::create(&a.out)
                .with_context(|| format!("cannot create {}", a.out.display()))?;
            let f = BufWriter::with_capacity(1 << 20, f);
            let mut w = GadgetTextWriter::new(f);
            let r = generate(&exp, &mut |_, op| Ok(w.write(op)?))?;
            w.finish()?;
            r
        }
    };
    eprintln!(
        "{}: {} input events -> {} state ops ({:.2} per event) in {:.2} s ({:.2}M ops/s); ops {:?}; events generated {}, emitted {}; late beyond allowed lateness {}",
        a.out.display(),
        r.input_events,
        r.ops,
        r.ops as f64 / r.input_events.max(1) as f64,
        r.seconds,
        r.ops as f64 / r.seconds.max(1e-9) / 1e6,
        r.op_counts,
        r.stream.generated,
        r.stream.emitted,
        r.operator.late_dropped,
    );
    Ok(())
}

fn print_rows(rows: &[ResultRow]) {
    println!(
        "{:<28} {:<9} {:>11} {:>8} {:>12} {:>8} {:>8} {:>9} {:>9}",
        "workload", "store", "ops", "seconds", "ops/s", "p50 us", "p99 us", "p99.9 us", "max us"
    );
    for r in rows {
        println!(
            "{:<28} {:<9} {:>11} {:>8.2} {:>12.0} {:>8.2} {:>8.2} {:>9.2} {:>9.0}{}",
            r.workload,
            r.store,
            r.ops,
            r.seconds,
            r.ops_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            r.layout.as_deref().map(|l| format!("  layout: {l}")).unwrap_or_default()
        );
    }
}

fn write_json(
    path: &std::path::Path,
    results: &[WorkloadResult],
    traces: Vec<TraceSeries>,
    title: &str,
) -> Result<()> {
    write_json_with(path, results, traces, title, serde_json::Map::new())
}

/// [`write_json`] with more top-level fields.
fn write_json_with(
    path: &std::path::Path,
    results: &[WorkloadResult],
    traces: Vec<TraceSeries>,
    title: &str,
    extra: serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    let rows: Vec<ResultRow> = results.iter().map(WorkloadResult::row).collect();
    let report = ReportInput {
        rows,
        traces,
        title: Some(title.to_string()),
        machine: Some(serde_json::to_value(spillway_bench::machine::MachineInfo::detect())?),
        date: Some(spillway_bench::machine::today_utc()),
    };
    let mut v = serde_json::to_value(&report)?;
    v["details"] = serde_json::to_value(results)?;
    for (k, x) in extra {
        v[k] = x;
    }
    crate::cmd::trace::create_parent(path)?;
    std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The store and output options of `bench workload` and `bench replay`.
#[derive(Debug, Args)]
pub struct StoreRunArgs {
    /// Stores, comma-separated (mem, hashlog, appendlog, timelog, adaptive, tiered,
    /// rocksdb) [default: bench workload: the experiment's `run.stores`; bench replay:
    /// hashlog]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,
    /// Memory budget of every store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,
    /// Directory for the stores, created if missing [default: the system temporary
    /// directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Write the results (rows and details) as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// `spillway bench workload`.
#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Experiment: a TOML file or a Gadget `key=value` config file. Give it several
    /// times to run several operators at once, each on its own thread
    #[arg(long, value_name = "FILE", required = true)]
    config: Vec<PathBuf>,
    /// With several --config: all operators share one store (default: one store each)
    #[arg(long)]
    shared: bool,
    #[command(flatten)]
    run: StoreRunArgs,
    /// Also measure the harness's own cost: replay the trace against a no-op store and
    /// against MemStore, and print the overhead as a fraction of MemStore's own time
    #[arg(long)]
    overhead: bool,
}

/// `spillway bench workload`.
pub fn workload(a: WorkloadArgs) -> Result<()> {
    if a.config.len() > 1 {
        return concurrent(a);
    }
    let config = a.config[0].clone();
    let exp = load(&config)?;
    let StoreRunArgs { stores, memory_budget, dir, json } = a.run;
    let stores = match stores {
        Some(s) => s,
        None => exp
            .run
            .stores
            .iter()
            .map(|s| s.parse::<StoreKind>().map_err(|e| anyhow!("run.stores: {e}")))
            .collect::<Result<Vec<_>>>()?,
    };
    let name = exp.operator.kind.name().to_string();
    let (results, series) = run_experiment_with_series(
        &name,
        &exp,
        &stores,
        memory_budget,
        dir.as_deref(),
        json.is_some(),
    )?;
    let rows: Vec<ResultRow> = results.iter().map(WorkloadResult::row).collect();
    print_rows(&rows);
    if let Some(p) = &json {
        write_json(
            p,
            &results,
            series.into_iter().collect(),
            &format!("spillway bench workload --config {}", config.display()),
        )?;
    }
    if a.overhead {
        let o =
            spillway_bench::workload::run::replay_overhead(&exp, memory_budget, dir.as_deref())?;
        println!(
            "replay overhead: {} ops, trace decoded on a reader thread; replay thread busy {:.3} s with a no-op store (waited {:.3} s for the reader), {:.3} s with MemStore (waited {:.3} s); MemStore's own time {:.3} s; harness overhead = {:.1}% of it",
            o.ops,
            o.harness_seconds(),
            o.null_wait_seconds,
            o.mem_seconds - o.mem_wait_seconds,
            o.mem_wait_seconds,
            o.store_seconds(),
            100.0 * o.fraction()
        );
    }
    Ok(())
}

/// `spillway bench workload` with several experiments at once.
fn concurrent(a: WorkloadArgs) -> Result<()> {
    let mut exps = Vec::new();
    for c in &a.config {
        let e = load(c)?;
        exps.push((format!("{} ({})", e.operator.kind.name(), c.display()), e));
    }
    let stores = a.run.stores.clone().unwrap_or_else(|| vec![StoreKind::HashLog]);
    let mut results = Vec::new();
    for kind in stores {
        results.extend(spillway_bench::workload::run::run_concurrent(
            &exps,
            kind,
            a.run.memory_budget,
            a.run.dir.as_deref(),
            a.shared,
        )?);
    }
    let rows: Vec<ResultRow> = results.iter().map(WorkloadResult::row).collect();
    print_rows(&rows);
    if let Some(p) = &a.run.json {
        write_json(p, &results, Vec::new(), "spillway bench workload (concurrent operators)")?;
    }
    Ok(())
}

/// `spillway bench replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace: Spillway binary or Gadget text, either one gzip- or xz-compressed or
    /// not (all detected from the first bytes, not the name)
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    #[command(flatten)]
    run: StoreRunArgs,
    /// Replay at this many ops per second (open loop: latency from each op's intended
    /// start) [default: closed loop, as fast as the store goes]
    #[arg(long, value_name = "OPS")]
    rate: Option<f64>,
    /// Ops replayed before measuring (not in the rows)
    #[arg(long, default_value = "0", value_parser = parse_count, value_name = "N")]
    warmup_ops: u64,
}

/// `spillway bench replay`.
pub fn replay(a: ReplayArgs) -> Result<()> {
    use spillway_bench::workload::replay::{Pace, ReplayConfig};
    use spillway_bench::workload::trace_replay::{replay_trace_file, TraceReplayConfig};
    let pace = match a.rate {
        None => Pace::Closed,
        Some(r) if r.is_finite() && r > 0.0 => Pace::Open { ops_per_sec: r },
        Some(r) => anyhow::bail!("--rate must be a number of ops per second > 0, got {r}"),
    };
    let cfg = TraceReplayConfig {
        stores: a.run.stores.clone().unwrap_or_else(|| vec![StoreKind::HashLog]),
        memory_budget: a.run.memory_budget,
        dir: a.run.dir.clone(),
        replay: ReplayConfig { pace, warmup_ops: a.warmup_ops, ..ReplayConfig::default() },
        characterize: a.run.json.is_some(),
    };
    let r = replay_trace_file(&a.trace, &cfg)?;
    for w in r.trace.warnings.messages() {
        eprintln!("warning: {}: {w}", a.trace.display());
    }
    let rows: Vec<ResultRow> = r.results.iter().map(WorkloadResult::row).collect();
    print_rows(&rows);
    if let Some(p) = &a.run.json {
        let mut extra = serde_json::Map::new();
        extra.insert("warnings".into(), serde_json::to_value(&r.trace.warnings)?);
        extra.insert("trace".into(), serde_json::to_value(&r.trace)?);
        write_json_with(
            p,
            &r.results,
            r.series.into_iter().collect(),
            &format!("spillway bench replay --trace {}", a.trace.display()),
            extra,
        )?;
    }
    Ok(())
}

/// `spillway bench suite`.
#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Stores, comma-separated [default: hashlog, mem, adaptive and rocksdb if built in]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,
    /// Input events per source of each streaming workload
    #[arg(long, default_value = "200k", value_parser = parse_count, value_name = "N")]
    events: u64,
    /// Value size of the streaming workloads, bytes (Gadget's default 10)
    #[arg(long, default_value_t = 10, value_name = "BYTES")]
    value_bytes: u32,
    /// YCSB record count and op count
    #[arg(long, default_value = "200k", value_parser = parse_count, value_name = "N")]
    ycsb_ops: u64,
    /// Streaming workloads to run, comma-separated operator names (e.g.
    /// join.interval,sliding.all.holistic) [default: all 15]
    #[arg(long, value_delimiter = ',', value_parser = parse_operator, value_name = "LIST")]
    operators: Option<Vec<OperatorKind>>,

    /// YCSB core workloads to include, comma-separated letters (a-f); `none` for none
    #[arg(long, default_value = "a,d,f", value_delimiter = ',', value_parser = parse_ycsb, value_name = "LIST")]
    ycsb: Vec<Option<Workload>>,
    /// Memory budget of every store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,
    /// Seed of every generator
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory for the stores [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Write the results as JSON to FILE (input of `spillway report`)
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn parse_operator(s: &str) -> std::result::Result<OperatorKind, String> {
    OperatorKind::parse(s).ok_or_else(|| {
        let names: Vec<&str> = OperatorKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown operator {s:?}; expected one of {}", names.join(", "))
    })
}

/// `spillway bench suite`.
pub fn suite(a: SuiteArgs) -> Result<()> {
    let stores = a.stores.clone().unwrap_or_else(spillway_bench::store_bench::available_stores);
    let operators = a.operators.clone().unwrap_or_else(|| OperatorKind::ALL.to_vec());
    let ycsb: Vec<Workload> = a.ycsb.iter().flatten().copied().collect();
    let total = (operators.len() + ycsb.len()) as u64;
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} workloads {msg} ({elapsed})")
            .expect("template"),
    );
    let mut results = Vec::new();
    let mut traces = Vec::new();
    for &kind in &operators {
        pb.set_message(kind.name());
        let exp = suite_experiment(kind, a.events, a.value_bytes, a.seed)?;
        let (r, series) = run_experiment_with_series(
            kind.name(),
            &exp,
            &stores,
            a.memory_budget,
            a.dir.as_deref(),
            a.json.is_some(),
        )?;
        results.extend(r);
        traces.extend(series);
        pb.inc(1);
    }
    for &w in &ycsb {
        pb.set_message(format!("ycsb {}", w.name()));
        let mut cfg = YcsbConfig::new(w);
        cfg.record_count = a.ycsb_ops;
        cfg.op_count = a.ycsb_ops;
        cfg.value_size = a.value_bytes as usize;
        cfg.seed = a.seed;
        results.extend(run_ycsb(&cfg, &stores, a.memory_budget, a.dir.as_deref())?);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let rows: Vec<ResultRow> = results.iter().map(WorkloadResult::row).collect();
    print_rows(&rows);
    if let Some(p) = &a.json {
        write_json(
            p,
            &results,
            traces,
            &format!(
                "spillway bench suite: {} events per source, {}-byte values, YCSB {} records/ops",
                a.events, a.value_bytes, a.ycsb_ops
            ),
        )?;
    }
    Ok(())
}
