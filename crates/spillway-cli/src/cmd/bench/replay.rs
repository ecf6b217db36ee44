//! `spillway bench replay`: an outside trace replayed against the stores, from
//! `spillway_bench::workload::trace_replay`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use spillway_bench::report::ResultRow;
use spillway_bench::units::parse_count;
use spillway_bench::workload::run::WorkloadResult;
use spillway_store::StoreKind;

use super::rows::{print_rows, write_json_with};
use crate::cmd::args::StoreRunArgs;

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
pub fn run(a: ReplayArgs) -> Result<()> {
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
