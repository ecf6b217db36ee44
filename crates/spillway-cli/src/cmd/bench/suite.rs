//! `spillway bench suite`: Gadget's 15 operators and YCSB against the stores, one row per
//! (workload, store).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::report::ResultRow;
use spillway_bench::units::{parse_count, parse_size};
use spillway_bench::workload::run::{
    run_experiment_with_series, run_ycsb, suite_experiment, WorkloadResult,
};
use spillway_bench::workload::ycsb::{Workload, YcsbConfig};
use spillway_bench::workload::OperatorKind;
use spillway_store::StoreKind;

use super::rows::{print_rows, write_json};

fn parse_ycsb(s: &str) -> Result<Option<Workload>, String> {
    if s == "none" {
        return Ok(None);
    }
    Workload::parse(s)
        .map(Some)
        .ok_or_else(|| format!("unknown YCSB workload `{s}`; use a, b, c, d, e, f or none"))
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
    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

fn parse_operator(s: &str) -> std::result::Result<OperatorKind, String> {
    OperatorKind::parse(s).ok_or_else(|| {
        let names: Vec<&str> = OperatorKind::ALL.iter().map(|k| k.name()).collect();
        format!("unknown operator {s:?}; expected one of {}", names.join(", "))
    })
}

/// `spillway bench suite`.
pub fn run(a: SuiteArgs) -> Result<()> {
    let stores = a.stores.clone().unwrap_or_else(spillway_bench::store_bench::available_stores);
    let operators = a.operators.clone().unwrap_or_else(|| OperatorKind::ALL.to_vec());
    let ycsb: Vec<Workload> = a.ycsb.iter().flatten().copied().collect();
    let total = (operators.len() + ycsb.len()) as u64;
    let pb = if !a.quiet && std::io::stderr().is_terminal() {
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
