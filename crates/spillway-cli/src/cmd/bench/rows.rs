//! The result rows of `bench workload`, `bench replay` and `bench suite`: the table they
//! print and the JSON they write (the input of `spillway report`).

use std::path::Path;

use anyhow::{Context, Result};
use spillway_bench::report::{ReportInput, ResultRow, TraceSeries};
use spillway_bench::workload::run::WorkloadResult;

use crate::cmd::args::create_parent;

pub(crate) fn print_rows(rows: &[ResultRow]) {
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

pub(crate) fn write_json(
    path: &Path,
    results: &[WorkloadResult],
    traces: Vec<TraceSeries>,
    title: &str,
) -> Result<()> {
    write_json_with(path, results, traces, title, serde_json::Map::new())
}

/// [`write_json`] with more top-level fields.
pub(crate) fn write_json_with(
    path: &Path,
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
    create_parent(path)?;
    std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))
}
