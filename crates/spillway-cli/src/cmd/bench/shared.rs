//! `spillway bench shared`: window patterns over one stream, contents kept as copies or
//! shared ([`spillway_bench::shared_bench`]), printed as a table with the shared/copies
//! ratios and written as JSON. A private `redis-server` serves the `redis` backend unless
//! `--redis` names one.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use spillway_bench::shared_bench::{self, SharedBenchConfig, SharedRow};
use spillway_bench::units::{parse_count, parse_size};
use spillway_bench::workload::multi::{Backend, Family, Mode, MultiExperiment};
use spillway_store::tiered::RedisServer;

/// `spillway bench shared`.
#[derive(Debug, Args)]
pub struct SharedBenchArgs {
    /// Pattern counts, comma-separated (one block of rows each) [default: 1,2,5,10]
    #[arg(long, value_delimiter = ',', value_name = "LIST", conflicts_with = "config")]
    patterns: Option<Vec<usize>>,

    /// A multi-pattern experiment file (TOML: the stream and its `[[pattern]]` tables, and
    /// optionally `shared = true|false` to run one mode) instead of a pattern family; see
    /// the docs of spillway_bench::workload::multi
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,

    /// Backends, comma-separated: mem, hashlog, rocksdb (with the rocksdb feature),
    /// timelog, appendlog, adaptive, and redis (the lists natively in Redis, pipelined)
    #[arg(long, value_delimiter = ',', default_value = "mem,hashlog,redis", value_name = "LIST")]
    stores: Vec<String>,

    /// Pattern family: sliding (pattern i: window base*(i+1), slide half of it) or
    /// tumbling (disjoint windows of base*(i+1)); even patterns per key, odd per key % 64
    #[arg(long, default_value = "sliding", value_name = "FAMILY")]
    family: String,

    /// Window length of the first pattern, in time units
    #[arg(long, default_value = "1000", value_parser = parse_count, value_name = "T")]
    base_window: u64,

    /// Events in the stream
    #[arg(long, default_value = "200k", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct event keys (uniform)
    #[arg(long, default_value = "100", value_parser = parse_count, value_name = "N")]
    keys: u64,

    /// Bytes per event (at least 24)
    #[arg(long, default_value = "100", value_parser = parse_size, value_name = "SIZE")]
    value_bytes: u64,

    /// Events per time unit
    #[arg(long, default_value = "1", value_parser = parse_count, value_name = "N")]
    rate: u64,

    /// Seed of the keys and payloads
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Runs of each cell, interleaved across modes and stores; rows report the median
    /// throughput and p99
    #[arg(long, default_value = "3", value_parser = parse_count, value_name = "N")]
    repeat: u64,

    /// Memory budget of each store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Redis server for the redis backend (redis://host:port or redis+unix:///path)
    /// [default: a private redis-server, started and stopped by this command]
    #[arg(long, value_name = "URL")]
    redis: Option<String>,

    /// Directory in which the stores are created [default: the system temporary
    /// directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Write the rows, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress on stderr
    #[arg(long, short)]
    quiet: bool,
}

pub fn run(a: &SharedBenchArgs) -> Result<()> {
    let family = Family::parse(&a.family).with_context(|| {
        format!("--family: unknown family {:?}; expected sliding or tumbling", a.family)
    })?;
    let counts = a.patterns.clone().unwrap_or_else(|| vec![1, 2, 5, 10]);
    if let Some(&n) = counts.iter().find(|&&n| n == 0 || n > 256) {
        bail!("--patterns: each count must be in 1..=256, got {n}");
    }
    if a.value_bytes < 24 {
        bail!(
            "--value-bytes must be at least 24 (an event's id, key and time), got {}",
            a.value_bytes
        );
    }
    if a.events == 0 || a.keys == 0 || a.base_window == 0 || a.rate == 0 {
        bail!("--events, --keys, --base-window and --rate must be at least 1");
    }
    let backends = a
        .stores
        .iter()
        .map(|s| Backend::parse(s).map_err(|e| anyhow::anyhow!("--stores: {e}")))
        .collect::<Result<Vec<_>>>()?;
    for b in &backends {
        if let Backend::Store(k) = b {
            if !k.available() {
                bail!("--stores: {} is not built into this binary", k.name());
            }
        }
    }
    let (blocks, modes) = match &a.config {
        Some(path) => {
            let exp = MultiExperiment::from_file(path)?;
            let modes = match exp.shared {
                None => vec![Mode::Copies, Mode::Shared],
                Some(true) => vec![Mode::Shared],
                Some(false) => vec![Mode::Copies],
            };
            (vec![exp.config()?], modes)
        }
        None => (
            SharedBenchConfig::family(
                &counts,
                family,
                a.base_window,
                a.events,
                a.keys,
                usize::try_from(a.value_bytes).context("--value-bytes")?,
                a.rate,
                a.seed,
            ),
            vec![Mode::Copies, Mode::Shared],
        ),
    };
    if a.repeat == 0 || a.repeat > 100 {
        bail!("--repeat must be in 1..=100, got {}", a.repeat);
    }
    let cfg = SharedBenchConfig {
        blocks,
        modes,
        backends: backends.clone(),
        memory_budget: a.memory_budget,
        repeat: a.repeat as usize,
    };
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).with_context(|| format!("--dir: create {}", base.display()))?;
    // A private server only when a redis cell runs and none was named.
    let server = match (&a.redis, backends.contains(&Backend::Redis)) {
        (None, true) => Some(RedisServer::start()?),
        _ => None,
    };
    let url = a.redis.clone().or_else(|| server.as_ref().map(RedisServer::url));
    let cells = cfg.blocks.len() * backends.len() * cfg.modes.len() * cfg.repeat;
    let pb = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(cells as u64)
    };
    let mut started = 0;
    let rows = shared_bench::run(&cfg, &base, url.as_deref(), &mut |n, mode, b| {
        if started > 0 {
            pb.inc(1);
        }
        started += 1;
        pb.set_message(format!("{n} patterns, {}, {}", mode.name(), b.name()));
    })?;
    pb.finish_and_clear();
    drop(server);
    print_table(&rows);
    if let Some(path) = &a.json {
        let report = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "date": spillway_bench::machine::today_utc(),
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "family": if a.config.is_some() { serde_json::Value::Null } else { family.name().into() },
            "config": a.config.as_ref().map(|p| p.display().to_string()),
            "events": a.events,
            "keys": a.keys,
            "value_bytes": a.value_bytes,
            "base_window": a.base_window,
            "rate": a.rate,
            "repeat": a.repeat,
            "ops_per_sec": "stream events processed per second (the same stream in every row)",
            "results": rows,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
    }
    if rows.iter().any(|r| !r.results_equal) {
        bail!("the window results differ between rows (results_equal false above)");
    }
    Ok(())
}

fn print_table(rows: &[SharedRow]) {
    println!(
        "{:>8} {:>7} {:>8} {:>12} {:>12} {:>10} {:>9} {:>6}",
        "patterns", "mode", "store", "state_bytes", "events/s", "p99_us", "firings", "equal"
    );
    for r in rows {
        println!(
            "{:>8} {:>7} {:>8} {:>12} {:>12.0} {:>10.1} {:>9} {:>6}",
            r.patterns,
            r.mode,
            r.store,
            r.state_bytes,
            r.ops_per_sec,
            r.p99_us,
            r.firings,
            r.results_equal
        );
    }
    for (n, store, bytes, tput) in shared_bench::ratios(rows) {
        println!(
            "{n} patterns, {store}: shared/copies state bytes {bytes:.2}x, throughput {tput:.2}x"
        );
    }
}
