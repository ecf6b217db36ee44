//! `spillway`: the command-line tool. It parses arguments, builds a configuration for
//! the library crates, runs them and prints; all real work lives in `spillway-bench`,
//! `spillway-store` and `spillway-engine`. Errors print as `error: ...` with exit code 1.

mod cmd;

/// mimalloc: the engine allocates event rows on one thread (the reservoir's reader
/// decodes chunks) and frees them on another; glibc malloc spends ~10% of an engine run
/// on that, mimalloc's per-thread free lists do not (measured in docs/RESULTS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use spillway_bench::disk_bench::{self, DiskProbeConfig};
use spillway_bench::store_bench::{self, Scale, StoreBenchConfig};
use spillway_bench::units::{parse_count, parse_size};
use spillway_store::StoreKind;

use cmd::bench::{
    cache as cache_bench_cmd, holistic as holistic_bench_cmd, shared as shared_cmd,
    windows as windows_bench_cmd, workload as workload_run,
};
#[cfg(feature = "kafka")]
use cmd::kafka as kafka_cmd;
use cmd::run::file as engine_cmd;
use cmd::{cache as cache_cmd, trace as workload_cmd};

/// Spillway: state stores for stream processing.
#[derive(Debug, Parser)]
#[command(name = "spillway", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a SQL metrics query over an input file: one output row per event with its
    /// exact sliding-window metrics.
    Run(Box<engine_cmd::RunArgs>),
    /// Generate payments and score them with Railgun's fraud metrics (no input needed).
    Demo(engine_cmd::DemoArgs),
    /// Print the plan DAG of a query.
    Explain(engine_cmd::ExplainArgs),
    /// Streaming state-access traces: generate, characterize, convert.
    #[command(subcommand)]
    Trace(workload_cmd::TraceCommand),
    /// Render a results JSON as one self-contained HTML page with SVG plots.
    Report(workload_cmd::ReportArgs),
    /// Run benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Cache policies: simulate hit ratios on key-access traces.
    #[command(subcommand)]
    Cache(cache_cmd::CacheCommand),
    /// Kafka topics: produce a file to a topic, consume a result topic, show a group's
    /// members, offsets and lag (workers are
    /// `spillway run --input kafka://...`).
    #[cfg(feature = "kafka")]
    #[command(subcommand)]
    Kafka(kafka_cmd::KafkaCommand),
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Run the state stores side by side on the store workloads and print a table.
    ///
    /// Workloads: rmw-uniform and rmw-zipf (rmw +1 on 8-byte counters, 1M keys),
    /// readwrite (the Samza/APSys'18 ReadWrite query: get and put of a 116-byte
    /// record, 10M ids under a 256 MiB budget, so state exceeds memory), readwrite-zipf
    /// (the same with zipfian 0.99 ids) and get (point reads after a load). Each store runs each workload on a fresh store.
    Store(StoreArgs),
    /// Measure the disk's random 4 KiB read rate with O_DIRECT at queue depth 1 (the
    /// ceiling of a store whose reads miss memory): writes a file once, reads random
    /// blocks of it for a fixed time, deletes it.
    Disk(DiskArgs),
    /// Railgun's Q1 (SUM and COUNT per card over a sliding window) on generated payments,
    /// the stores side by side (RocksDB is the Flink-style baseline: a get and a put per
    /// event and per expiry), or several window lengths side by side.
    Engine(engine_cmd::EngineBenchArgs),
    /// Run one streaming-state experiment (TOML or Gadget config) against the stores:
    /// the operator's state accesses, replayed with HDR latencies.
    Workload(workload_run::WorkloadArgs),
    /// Replay an outside trace (Spillway binary or Gadget text, optionally .gz or .xz)
    /// against the stores, with the rows of `bench workload`; Gadget's trailing garbage
    /// rows and missing first op are reported as warnings, not replayed.
    Replay(workload_run::ReplayArgs),
    /// All 15 Gadget operators (Gadget's defaults) and YCSB A, D and F against the
    /// stores, one row per (workload, store).
    Suite(workload_run::SuiteArgs),
    /// The phase-change experiment: one namespace serves point updates, then range
    /// reads; the adaptive store against static layouts, per phase.
    Phase(PhaseArgs),
    /// One checkpoint after a few updates to a large state: its pause and bytes, then
    /// the recovery time (hashlog incremental, hashlog with a whole index snapshot per
    /// checkpoint, RocksDB).
    Checkpoint(CheckpointArgs),
    /// The DEBS'22 multi-level cache's synthetic application: large objects, zipf
    /// read-modify-writes, in memory, Redis only and tiered (L1 at 10-30% over Redis over
    /// hashlog, and L1 over hashlog), each in its own process; slowdowns, hit ratios and
    /// peak RSS.
    Cache(cache_bench_cmd::CacheBenchArgs),
    /// Window patterns over one stream (CCGrid'17 multi-pattern analytics): each
    /// pattern's window contents kept as per-operator copies (Flink's ListState per
    /// operator) or shared (each event once, windows hold references), per pattern count
    /// and store; peak state bytes, events/s, p99 and whether the window results are equal.
    Shared(shared_cmd::SharedBenchArgs),
    /// Windowed aggregation (TUMBLE and HOP SUM/COUNT per card, NEXMark q5's shape) on
    /// generated payments, the stores side by side (RocksDB state is the Flink-style
    /// baseline), with throughput against Flink's published q5 figure per core.
    Windows(windows_bench_cmd::WindowsBenchArgs),
    /// Holistic aggregates (COUNT(DISTINCT), MEDIAN, PERCENTILE_CONT, FIRST_VALUE,
    /// LAST_VALUE) over a full sliding window (7 days, 10^5 events per card by default):
    /// order-statistics trees in the store against the inline layout that rewrites the
    /// whole window per event, side by side, with their throughput ratio.
    Holistic(holistic_bench_cmd::HolisticBenchArgs),
}

#[derive(Debug, Args)]
struct CheckpointArgs {
    /// Stores, comma-separated: hashlog, hashlog-full, rocksdb [default: all in this build]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<spillway_bench::checkpoint::CkptStore>>,
    /// Keys loaded first (8-byte keys and values; not measured)
    #[arg(long, default_value = "10M", value_parser = parse_count, value_name = "N")]
    keys: u64,
    /// Random updates before the measured checkpoint
    #[arg(long, default_value = "100k", value_parser = parse_count, value_name = "N")]
    updates: u64,
    /// Memory budget of every store
    #[arg(long, default_value = "1GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,
    /// Seed of the update sequence
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory in which the stores are created [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also write the rows as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn bench_checkpoint(a: CheckpointArgs) -> Result<()> {
    use spillway_bench::checkpoint::{self, CheckpointConfig, CkptStore};
    let cfg = CheckpointConfig {
        stores: a.stores.unwrap_or_else(CkptStore::available),
        keys: a.keys,
        updates: a.updates,
        memory_budget: a.memory_budget,
        seed: a.seed,
    };
    let rows = checkpoint::run(&cfg, a.dir.as_deref())?;
    print!("{}", checkpoint::table(&rows));
    for line in checkpoint::ratios(&rows) {
        println!("{line}");
    }
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "rows": rows,
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[derive(Debug, Args)]
struct PhaseArgs {
    /// Stores, comma-separated [default: adaptive, hashlog, timelog and rocksdb if built in]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,
    /// Entities (each with --history records)
    #[arg(long, default_value = "20k", value_parser = parse_count, value_name = "N")]
    entities: u64,
    /// Records per entity (a range read returns them all)
    #[arg(long, default_value = "8", value_parser = parse_count, value_name = "N")]
    history: u64,
    /// Value size in bytes
    #[arg(long, default_value = "100", value_parser = parse_size, value_name = "BYTES")]
    value_bytes: u64,
    /// Events per phase
    #[arg(long, default_value = "300k", value_parser = parse_count, value_name = "N")]
    events: u64,
    /// Memory budget of every store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,
    /// Seed of the key sequence (every store sees the same)
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory in which the stores are created [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also write the rows as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn bench_phase(a: PhaseArgs) -> Result<()> {
    use spillway_bench::phase;
    let stores = a.stores.unwrap_or_else(|| {
        [StoreKind::Adaptive, StoreKind::HashLog, StoreKind::TimeLog, StoreKind::Rocks]
            .into_iter()
            .filter(|k| k.available())
            .collect()
    });
    store_bench::check_available(&stores)?;
    let cfg = phase::PhaseConfig {
        stores,
        entities: a.entities,
        history: a.history,
        value_bytes: usize::try_from(a.value_bytes)
            .map_err(|_| anyhow!("--value-bytes too large"))?,
        events: a.events,
        memory_budget: a.memory_budget,
        seed: a.seed,
    };
    let rows = phase::run(&cfg, a.dir.as_deref())?;
    println!(
        "{:<10} {:<6} {:>9} {:>8} {:>12} {:>8} {:>8} {:>9} {:>9}  layout",
        "store", "phase", "events", "seconds", "events/s", "p50 us", "p99 us", "p99.9 us", "max us"
    );
    for r in &rows {
        println!(
            "{:<10} {:<6} {:>9} {:>8.2} {:>12.0} {:>8.2} {:>8.2} {:>9.2} {:>9.0}  {}",
            r.store,
            r.phase,
            r.events,
            r.seconds,
            r.events_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            r.layout.as_deref().unwrap_or("-")
        );
    }
    for line in phase::ratios(&rows) {
        println!("{line}");
    }
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "rows": rows,
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[derive(Debug, Args)]
struct StoreArgs {
    /// Stores to compare, comma-separated (mem, hashlog, appendlog, timelog, adaptive,
    /// tiered, rocksdb); ratios are printed relative to the last one. `tiered` runs with its
    /// default levels here: an L1 of a quarter of the budget over hashlog, no Redis
    /// [default: every store in this build except tiered]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,

    /// Workloads, comma-separated: rmw-uniform, rmw-zipf, readwrite, readwrite-zipf, get;
    /// `rmw` means both rmw workloads and `all` every workload
    #[arg(long, default_value = "all", value_name = "LIST")]
    workload: String,

    /// Distinct keys, for every workload (accepts 10M, 200k) [default: per workload:
    /// rmw 1M, readwrite 10M, get 1M; --quick: 200k]
    #[arg(long, value_parser = parse_count, value_name = "N")]
    keys: Option<u64>,

    /// Measured ops, for every workload (accepts 10M, 200k) [default: rmw 10M,
    /// readwrite 10M, get 2M; --quick: 1M, 1M, 400k]
    #[arg(long, value_parser = parse_count, value_name = "N")]
    ops: Option<u64>,

    /// Value size in bytes of the get workload (rmw uses 8-byte counters, readwrite
    /// 116-byte records) [default: 8]
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    value_size: Option<u64>,

    /// Memory budget of every store, e.g. 256MiB, 1GiB, 512KiB, 1000000 [default:
    /// 256MiB; --quick: 64MiB, readwrite 32MiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    memory_budget: Option<u64>,

    /// Seed of the key sequences (every store sees the same sequence)
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Directory in which the stores are created (a fresh subdirectory, removed
    /// afterwards) [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Also write the results, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bars or per-run lines on stderr
    #[arg(long, short)]
    quiet: bool,

    /// Small default sizes that finish in seconds (explicit sizes still win)
    #[arg(long)]
    quick: bool,

    /// Skip reading each store back to check its contents after its run
    #[arg(long)]
    no_verify: bool,

    /// Ops per store call, comma-separated sizes each run in turn (e.g. 1,32): 1 calls
    /// the store once per op; larger sizes use the batched operations (multi_rmw,
    /// multi_get, prefetch) that overlap the cache misses of a batch [default: 1]
    #[arg(long, value_delimiter = ',', value_name = "LIST", default_value = "1")]
    batch: Vec<usize>,

    /// Open every store with direct I/O (O_DIRECT; RocksDB's direct reads, flushes and
    /// compactions), so reads outside the memory budget reach the disk, not the OS page
    /// cache; afterwards a short disk probe (as `bench disk`, 1 GiB, 3 s) prints the
    /// disk's random-read rate beside each store's
    #[arg(long)]
    direct_io: bool,
}

#[derive(Debug, Args)]
struct DiskArgs {
    /// Directory under which the probe file is created (and removed) [default: the
    /// system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Size of the probe file, e.g. 2GiB
    #[arg(long, value_parser = parse_size, default_value = "2GiB", value_name = "SIZE")]
    file_size: u64,

    /// Seconds of random reads
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,

    /// Also write the figures, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn bench_disk(args: DiskArgs) -> Result<()> {
    let cfg = DiskProbeConfig {
        dir: args.dir,
        file_size: args.file_size,
        seconds: args.seconds,
        ..Default::default()
    };
    let r = disk_bench::probe(&cfg)?;
    println!("{}", r.summary());
    if let Some(path) = &args.json {
        r.write_json(path)?;
    }
    Ok(())
}

fn bench_store(args: StoreArgs) -> Result<()> {
    let value_size = args
        .value_size
        .map(|v| usize::try_from(v).map_err(|_| anyhow!("--value-size {v} is too large")))
        .transpose()?;
    let cfg = StoreBenchConfig {
        stores: args.stores.unwrap_or_else(store_bench::available_stores),
        workloads: store_bench::parse_workloads(&args.workload)
            .map_err(|e| anyhow!("--workload: {e}"))?,
        scale: if args.quick { Scale::Quick } else { Scale::Full },
        keys: args.keys,
        ops: args.ops,
        value_size,
        memory_budget: args.memory_budget,
        seed: args.seed,
        dir: args.dir,
        quiet: args.quiet,
        verify: !args.no_verify,
        batches: args.batch,
        direct_io: args.direct_io,
    };
    let mut report = store_bench::run(&cfg)?;
    if args.direct_io {
        let probe = DiskProbeConfig {
            dir: cfg.dir.clone(),
            file_size: 1 << 30,
            seconds: 3.0,
            ..Default::default()
        };
        report.disk_probe = Some(disk_bench::probe(&probe).context("the disk probe")?);
    }
    print!("{}", report.table());
    let ratios = report.ratios();
    if !ratios.is_empty() {
        println!();
        for line in ratios {
            println!("{line}");
        }
    }
    let disk = report.disk_comparison();
    if !disk.is_empty() {
        println!();
        for line in disk {
            println!("{line}");
        }
    }
    if let Some(path) = &args.json {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        report.write_json(path, Some(command))?;
        if !args.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version print to stdout and succeed; usage errors exit with 1 like
            // every other error.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    let result = match cli.command {
        Command::Bench(BenchCommand::Store(args)) => bench_store(args),
        Command::Bench(BenchCommand::Disk(args)) => bench_disk(args),
        Command::Bench(BenchCommand::Engine(args)) => engine_cmd::bench_engine(args),
        Command::Bench(BenchCommand::Workload(args)) => workload_run::workload(args),
        Command::Bench(BenchCommand::Replay(args)) => workload_run::replay(args),
        Command::Bench(BenchCommand::Suite(args)) => workload_run::suite(args),
        Command::Bench(BenchCommand::Phase(args)) => bench_phase(args),
        Command::Bench(BenchCommand::Checkpoint(args)) => bench_checkpoint(args),
        Command::Bench(BenchCommand::Cache(args)) => cache_bench_cmd::run(args),
        Command::Bench(BenchCommand::Shared(args)) => shared_cmd::run(&args),
        Command::Bench(BenchCommand::Windows(args)) => windows_bench_cmd::run(args),
        Command::Bench(BenchCommand::Holistic(args)) => holistic_bench_cmd::run(args),
        Command::Trace(workload_cmd::TraceCommand::Gen(args)) => workload_run::gen(args),
        Command::Trace(workload_cmd::TraceCommand::Stats(args)) => workload_cmd::stats(args),
        Command::Trace(workload_cmd::TraceCommand::Convert(args)) => {
            workload_cmd::convert_cmd(args)
        }
        Command::Report(args) => workload_cmd::report(args),
        Command::Cache(cmd) => cache_cmd::run(cmd),
        Command::Run(args) => engine_cmd::run(*args),
        #[cfg(feature = "kafka")]
        Command::Kafka(cmd) => kafka_cmd::run(cmd),
        Command::Demo(args) => engine_cmd::demo(args),
        Command::Explain(args) => engine_cmd::explain(args),
    };
    // A private Redis started for `--l2 auto` stops with the run (by PID), not at exit.
    spillway_store::tiered::RedisServer::stop_shared();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every command of the tree says what it does, and every flag has a help line, so
    /// `--help` at any level reads as documentation (hidden test hooks aside).
    #[test]
    fn every_command_and_flag_is_documented() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && cmd.get_long_about().is_none() {
                missing.push(format!("`{path}` has no about text"));
            }
            for a in cmd.get_arguments() {
                let builtin = matches!(a.get_id().as_str(), "help" | "version");
                if a.is_hide_set() || builtin {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{path}` argument `{}` has no help", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
    }

    fn store_args(argv: &[&str]) -> StoreArgs {
        let mut full = vec!["spillway", "bench", "store"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Bench(BenchCommand::Store(a)) => a,
            other => panic!("parsed {other:?}"),
        }
    }

    #[test]
    fn parses_bench_store_flags() {
        let a = store_args(&[
            "--stores",
            "hashlog,mem",
            "--workload",
            "rmw,get",
            "--keys",
            "10M",
            "--memory-budget",
            "256MiB",
            "--quick",
        ]);
        assert_eq!(a.stores, Some(vec![StoreKind::HashLog, StoreKind::Mem]));
        assert_eq!(a.keys, Some(10_000_000));
        assert_eq!(a.memory_budget, Some(256 << 20));
        assert_eq!(a.seed, 42);
        assert!(a.quick);
        assert!(!a.direct_io);
        let a = store_args(&["--workload", "readwrite,readwrite-zipf", "--direct-io"]);
        assert!(a.direct_io);
        assert_eq!(a.workload, "readwrite,readwrite-zipf");
        let a = store_args(&[]);
        assert_eq!(a.stores, None);
        assert_eq!(a.workload, "all");
    }

    #[test]
    fn parses_bench_checkpoint_flags() {
        use spillway_bench::checkpoint::CkptStore;
        let argv = [
            "spillway",
            "bench",
            "checkpoint",
            "--keys",
            "10M",
            "--updates",
            "100k",
            "--stores",
            "hashlog,hashlog-full,rocksdb",
        ];
        let a = match Cli::try_parse_from(argv).unwrap().command {
            Command::Bench(BenchCommand::Checkpoint(a)) => a,
            other => panic!("parsed {other:?}"),
        };
        assert_eq!((a.keys, a.updates), (10_000_000, 100_000));
        assert_eq!(
            a.stores,
            Some(vec![CkptStore::HashLog, CkptStore::HashLogFull, CkptStore::Rocks])
        );
        let e = Cli::try_parse_from(["spillway", "bench", "checkpoint", "--stores", "mem"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("hashlog-full"), "{e}");
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = Cli::try_parse_from(["spillway", "bench", "store", "--memory-budget", "12XB"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("256MiB"), "{e}");
        let e = Cli::try_parse_from(["spillway", "bench", "store", "--stores", "redis"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("hashlog"), "{e}");
    }
}
