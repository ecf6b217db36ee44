//! `spillway bench windows`: windowed aggregation (`TUMBLE` and `HOP` SUM and COUNT per
//! card, NEXMark q5's shape) on generated payments, the stores side by side in one
//! process, with each store's throughput against the last store's (the RocksDB-state
//! baseline by default) and against Flink's published NEXMark q5 figure per core.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::engine_bench::{run_windowed, WindowBenchConfig, WindowBenchResult};
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::duration::parse_duration;
use spillway_engine::source::PaymentOptions;
use spillway_engine::sql::TvfWindow;
use spillway_engine::value::TimeUnit;
use spillway_store::StoreKind;

/// Flink's NEXMark q5 (a `HOP` count per auction) in events per second per core, the
/// figure the issue compares against (Nexmark results published with Flink, 8 cores).
pub const FLINK_Q5_PER_CORE: f64 = 22_000.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WindowKindArg {
    /// TUMBLE(size)
    Tumble,
    /// HOP(slide, size)
    Hop,
}

/// `spillway bench windows`.
#[derive(Debug, Args)]
pub struct WindowsBenchArgs {
    /// Window functions to run, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tumble,hop")]
    kinds: Vec<WindowKindArg>,

    /// Window size
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    size: String,

    /// HOP's slide
    #[arg(long, default_value = "1m", value_name = "DURATION")]
    slide: String,

    /// Payments per run
    #[arg(long, default_value = "5M", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct cards (zipf 0.99)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    cards: u64,

    /// Mean payments per second of event time
    #[arg(long, default_value_t = 2_000.0, value_name = "RATE")]
    rate: f64,

    /// Stores, comma-separated; ratios are printed relative to the last one [default:
    /// hashlog, then rocksdb if built in]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,

    /// Memory budget of every store
    #[arg(long, default_value = "2GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Events announced to the store at a time
    #[arg(long, default_value_t = spillway_engine::driver::BATCH_EVENTS, value_name = "N")]
    batch: usize,

    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

/// Runs `spillway bench windows`.
pub fn run(a: WindowsBenchArgs) -> Result<()> {
    let stores = a.stores.clone().unwrap_or_else(|| {
        let mut v = vec![StoreKind::HashLog];
        if StoreKind::Rocks.available() {
            v.push(StoreKind::Rocks);
        }
        v
    });
    spillway_bench::store_bench::check_available(&stores)?;
    let dur = |s: &str, what: &str| -> Result<i64> {
        let v = parse_duration(s, TimeUnit::Ms).map_err(|e| anyhow!("--{what}: {e}"))?;
        if v <= 0 {
            bail!("--{what} must be positive");
        }
        Ok(v)
    };
    let (size, slide) = (dur(&a.size, "size")?, dur(&a.slide, "slide")?);
    if size % slide != 0 {
        bail!("--size must be a whole multiple of --slide (HOP's rule)");
    }
    let windows: Vec<TvfWindow> = a
        .kinds
        .iter()
        .map(|k| match k {
            WindowKindArg::Tumble => TvfWindow::Tumble { size, offset: 0 },
            WindowKindArg::Hop => TvfWindow::Hop { slide, size, offset: 0 },
        })
        .collect();
    let pb = if a.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(a.events * (windows.len() * stores.len()) as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} events {msg} ({eta})")
            .expect("template"),
    );
    let mut rows: Vec<WindowBenchResult> = Vec::new();
    for &w in &windows {
        for &s in &stores {
            pb.set_message(format!("{}, store {}", w.name(), s.name()));
            let done = pb.position();
            let cfg = WindowBenchConfig {
                payments: PaymentOptions {
                    seed: a.seed,
                    events: a.events,
                    cards: a.cards,
                    merchants: 1,
                    events_per_second: a.rate,
                    ..PaymentOptions::default()
                },
                window: w,
                memory_budget: a.memory_budget,
                pregenerate: true,
                batch: a.batch.max(1),
            };
            rows.push(run_windowed(&cfg, s, &mut |n| pb.set_position(done + n))?);
            pb.set_position(done + a.events);
        }
    }
    pb.finish_and_clear();
    println!(
        "Windowed aggregation: SUM(amount), COUNT(*) per card, size {} (HOP slide {}), {} events, {} cards (zipf 0.99), {} payments/s of event time, one thread",
        a.size, a.slide, a.events, a.cards, a.rate
    );
    println!(
        "{:<9} {:<9} {:>10} {:>8} {:>12} {:>8} {:>8} {:>9} {:>10} {:>9}",
        "window",
        "store",
        "rows",
        "seconds",
        "events/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "vs Flink q5",
        "digest ok"
    );
    for r in &rows {
        let same = rows.iter().filter(|x| x.window == r.window).all(|x| x.digest == r.digest);
        println!(
            "{:<9} {:<9} {:>10} {:>8.2} {:>12.0} {:>8.2} {:>8.2} {:>9.2} {:>10.1}x {:>9}",
            r.window,
            r.store,
            r.rows,
            r.seconds,
            r.events_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.events_per_sec / FLINK_Q5_PER_CORE,
            same
        );
    }
    let mut ratios = Vec::new();
    if stores.len() > 1 {
        for (wi, w) in windows.iter().enumerate() {
            let base = &rows[wi * stores.len() + stores.len() - 1];
            for r in &rows[wi * stores.len()..wi * stores.len() + stores.len() - 1] {
                let ratio = r.events_per_sec / base.events_per_sec;
                println!("{}: {} / {} throughput = {ratio:.1}x", w.name(), r.store, base.store);
                ratios.push(serde_json::json!({
                    "window": w.name(), "store": r.store, "baseline": base.store, "ratio": ratio
                }));
            }
        }
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "events": a.events,
            "cards": a.cards,
            "rate": a.rate,
            "size_ms": size,
            "slide_ms": slide,
            "flink_q5_per_core": FLINK_Q5_PER_CORE,
            "rows": rows,
            "ratios": ratios,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")?;
    }
    Ok(())
}
