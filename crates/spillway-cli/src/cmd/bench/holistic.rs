//! `spillway bench holistic`: holistic aggregates (`COUNT(DISTINCT)`, `MEDIAN`,
//! `PERCENTILE_CONT`, `FIRST_VALUE`, `LAST_VALUE`) over a full sliding window per card,
//! each aggregate kept in order-statistics trees in the store (O(log n) per update) and
//! inline (one value per card rewritten per event, O(n)), side by side in one process,
//! with the per-event cost ratio between the two layouts.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::engine_bench::{run_holistic, HolisticAgg, HolisticConfig, HolisticResult};
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::duration::parse_duration;
use spillway_engine::value::TimeUnit;
use spillway_store::StoreKind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AggArg {
    /// COUNT(DISTINCT merchant)
    Distinct,
    /// MEDIAN(amount)
    Median,
    /// PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount)
    P90,
    /// FIRST_VALUE(amount)
    First,
    /// LAST_VALUE(amount)
    Last,
}

impl From<AggArg> for HolisticAgg {
    fn from(a: AggArg) -> HolisticAgg {
        match a {
            AggArg::Distinct => HolisticAgg::Distinct,
            AggArg::Median => HolisticAgg::Median,
            AggArg::P90 => HolisticAgg::P90,
            AggArg::First => HolisticAgg::First,
            AggArg::Last => HolisticAgg::Last,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutArg {
    /// Order-statistics trees in the store (the engine's layout)
    Tree,
    /// One value per card holding the whole window, rewritten per event
    Inline,
}

/// `spillway bench holistic`.
#[derive(Debug, Args)]
pub struct HolisticBenchArgs {
    /// Aggregates, each measured on its own (one query per aggregate)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "distinct,median,first")]
    aggs: Vec<AggArg>,

    /// Layouts, side by side; ratios are printed against the last
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tree,inline")]
    layouts: Vec<LayoutArg>,

    /// Window length
    #[arg(long, default_value = "7d", value_name = "DURATION")]
    window: String,

    /// Cards (drawn uniformly)
    #[arg(long, default_value = "1", value_parser = parse_count, value_name = "N")]
    keys: u64,

    /// Events per card inside the full window (the event-time rate is set from it)
    #[arg(long, default_value = "100k", value_parser = parse_count, value_name = "N")]
    per_key: u64,

    /// Events timed once the window is full (filling it is not timed)
    #[arg(long, default_value = "20k", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct merchants (COUNT(DISTINCT)'s domain)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    merchants: u64,

    /// Store
    #[arg(long, default_value = "hashlog", value_name = "STORE")]
    store: StoreKind,

    /// Memory budget of the store
    #[arg(long, default_value = "2GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `spillway bench holistic`.
pub fn run(a: HolisticBenchArgs) -> Result<()> {
    spillway_bench::store_bench::check_available(&[a.store])?;
    let window_ms =
        parse_duration(&a.window, TimeUnit::Ms).map_err(|e| anyhow!("--window: {e}"))?;
    if window_ms <= 0 {
        bail!("--window must be positive");
    }
    if a.keys == 0 || a.per_key == 0 || a.events == 0 {
        bail!("--keys, --per-key and --events must be at least 1");
    }
    if a.aggs.is_empty() || a.layouts.is_empty() {
        bail!("--aggs and --layouts need at least one value each");
    }
    let per_run = a.keys * a.per_key + a.events;
    let pb = if a.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(per_run * (a.aggs.len() * a.layouts.len()) as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} events {msg} ({eta})")
            .expect("template"),
    );
    let mut rows: Vec<HolisticResult> = Vec::new();
    for &agg in &a.aggs {
        for &layout in &a.layouts {
            pb.set_message(format!("{agg:?}, {layout:?}"));
            let done = pb.position();
            let cfg = HolisticConfig {
                keys: a.keys,
                per_key: a.per_key,
                timed_events: a.events,
                window_ms,
                merchants: a.merchants,
                aggs: vec![agg.into()],
                memory_budget: a.memory_budget,
                seed: a.seed,
                inline: layout == LayoutArg::Inline,
            };
            rows.push(run_holistic(&cfg, a.store, &mut |n| pb.set_position(done + n))?);
            pb.set_position(done + per_run);
        }
    }
    pb.finish_and_clear();
    println!(
        "Holistic aggregates over a {} sliding window per card: {} card(s), about {} events per card in the window, {} events timed after filling it, store {}, one thread",
        a.window, a.keys, a.per_key, a.events, a.store.name()
    );
    println!(
        "{:<52} {:<7} {:>10} {:>9} {:>11} {:>10} {:>9} {:>9} {:>9}",
        "aggregate",
        "layout",
        "in window",
        "fill s",
        "events/s",
        "ns/event",
        "p50 us",
        "p99 us",
        "same"
    );
    let nl = a.layouts.len();
    for (i, r) in rows.iter().enumerate() {
        let group = &rows[i / nl * nl..i / nl * nl + nl];
        let same = group.iter().all(|x| x.digest == r.digest);
        let agg: HolisticAgg = a.aggs[i / nl].into();
        println!(
            "{:<52} {:<7} {:>10} {:>9.1} {:>11.0} {:>10.0} {:>9.2} {:>9.2} {:>9}",
            agg.sql(),
            r.layout,
            r.events_in_window,
            r.fill_seconds,
            r.events_per_sec,
            r.ns_per_event,
            r.p50_us,
            r.p99_us,
            same
        );
    }
    let mut ratios = Vec::new();
    for (ai, agg) in a.aggs.iter().enumerate() {
        let group = &rows[ai * nl..ai * nl + nl];
        let base = &group[nl - 1];
        for r in &group[..nl - 1] {
            let ratio = r.events_per_sec / base.events_per_sec;
            let agg: HolisticAgg = (*agg).into();
            println!("{}: {} / {} throughput = {ratio:.1}x", agg.sql(), r.layout, base.layout);
            ratios.push(serde_json::json!({
                "aggregate": agg.sql(), "layout": r.layout, "baseline": base.layout, "ratio": ratio
            }));
        }
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "window_ms": window_ms,
            "keys": a.keys,
            "per_key": a.per_key,
            "events": a.events,
            "rows": rows,
            "ratios": ratios,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")?;
    }
    Ok(())
}
