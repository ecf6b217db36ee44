//! `spillway bench phase`: the phase-change experiment (`spillway_bench::phase`).

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use spillway_bench::store_bench;
use spillway_bench::units::{parse_count, parse_size};
use spillway_store::StoreKind;

#[derive(Debug, Args)]
pub struct PhaseArgs {
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

pub fn run(a: PhaseArgs) -> Result<()> {
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
