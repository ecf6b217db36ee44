//! `spillway bench workload`: one streaming-state experiment (or several at once) against
//! the stores, from `spillway_bench::workload`.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::Args;
use spillway_bench::report::ResultRow;
use spillway_bench::workload::run::{run_experiment_with_series, WorkloadResult};
use spillway_store::StoreKind;

use super::rows::{print_rows, write_json};
use crate::cmd::args::{load_experiment, StoreRunArgs};

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
pub fn run(a: WorkloadArgs) -> Result<()> {
    if a.config.len() > 1 {
        return concurrent(a);
    }
    let config = a.config[0].clone();
    let exp = load_experiment(&config)?;
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
        let e = load_experiment(c)?;
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
