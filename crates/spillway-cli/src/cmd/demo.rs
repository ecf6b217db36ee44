//! `spillway demo`: generated payments scored with Railgun's fraud metrics, through
//! `spillway_engine::job` with a generator as the source.

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::checkpoint::Input;
use spillway_engine::duration::parse_duration;
use spillway_engine::job::{run_job, JobConfig, OpenAt};
use spillway_engine::reservoir::Compression;
use spillway_engine::source::{PaymentGenerator, PaymentOptions, Source};
use spillway_engine::value::TimeUnit;
use spillway_store::StoreKind;

use crate::cmd::args::TierArgs;
use crate::cmd::progress::{progress_bar, progress_message};
use crate::cmd::summary::print_summary;

/// `spillway demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Payments to generate
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct cards (zipf-distributed)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    cards: u64,

    /// Distinct merchants (zipf-distributed)
    #[arg(long, default_value = "100k", value_parser = parse_count, value_name = "N")]
    merchants: u64,

    /// Window length, e.g. 5m, 1h, 7d
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    window: String,

    /// Zipf skew of cards and merchants (0 draws them uniformly)
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    zipf: f64,

    /// Mean payments per second of event time
    #[arg(long, default_value_t = 10_000.0, value_name = "RATE")]
    rate: f64,

    /// State store: hashlog, mem, adaptive, tiered (levels with --l1/--l2/--l3), rocksdb
    /// (if built in)
    #[arg(long, default_value = "hashlog", value_name = "STORE")]
    store: StoreKind,

    #[command(flatten)]
    tier_args: TierArgs,

    /// Memory budget of the state store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Also write the scored payments to FILE (CSV or JSON Lines)
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Write the summary as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress line on stderr (the banner and the final summary still show)
    #[arg(long, short)]
    quiet: bool,
}

/// The demo's query: Railgun's fraud metrics over `window_ms`.
pub fn demo_query(window_ms: i64) -> String {
    format!(
        "SELECT card, merchant, amount, ts,\n\
         \x20      SUM(amount) OVER card_w AS card_sum,\n\
         \x20      COUNT(*) OVER card_w AS card_count,\n\
         \x20      AVG(amount) OVER merchant_w AS merchant_avg\n\
         FROM payments\n\
         WINDOW card_w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW),\n\
         \x20      merchant_w AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW)\n"
    )
}

/// `spillway demo`.
pub fn demo(a: DemoArgs) -> Result<()> {
    let window = parse_duration(&a.window, TimeUnit::Ms).map_err(|e| anyhow!("--window: {e}"))?;
    let popts = PaymentOptions {
        seed: a.seed,
        events: a.events,
        cards: a.cards,
        merchants: a.merchants,
        zipf: a.zipf,
        events_per_second: a.rate,
        ..PaymentOptions::default()
    };
    let cfg = JobConfig {
        query: demo_query(window),
        output: a.output.clone(),
        discard_output: a.output.is_none(),
        side_output: None,
        store: a.store,
        tiered: a.tier_args.options(a.store, a.memory_budget)?,
        memory_budget: a.memory_budget,
        expected_keys: Some(a.cards + a.merchants),
        allowed_lateness: 0,
        watermark_delay: 0,
        checkpoint_dir: None,
        checkpoint_every: Some(0),
        resume: false,
        compression: Compression::Lz4,
        input: Input::Named(format!("the payments generator (seed {})", a.seed)),
        reservoir_chunk_events: None,
        reservoir_segment_bytes: None,
        halt: None,
        backfill: false,
        retain: None,
        metrics: None,
        ties: Default::default(),
        fs: None,
    };
    eprintln!(
        "spillway demo: {} payments over {} cards and {} merchants ({}), {} window, store {}\n{}",
        a.events,
        a.cards,
        a.merchants,
        if a.zipf > 0.0 { format!("zipf {}", a.zipf) } else { "uniform".to_string() },
        a.window,
        a.store.name(),
        cfg.query.trim_end()
    );
    let mut open = |_at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn Source>> {
        Ok(Box::new(PaymentGenerator::new(popts.clone())?))
    };
    spillway_bench::machine::reset_peak_rss();
    let pb = progress_bar(a.quiet);
    let s = run_job(&cfg, &mut open, &mut |p| pb.set_message(progress_message(p)))?;
    pb.finish_and_clear();
    let peak = spillway_bench::machine::peak_rss_bytes();
    // --quiet hides the progress line only, as for `run`.
    print_summary(&s);
    eprintln!("peak resident memory: {}", spillway_bench::units::format_bytes(peak));
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "events": s.events_this_run,
            "seconds": s.seconds,
            "events_per_sec": s.events_per_sec,
            "latency_us": {
                "p50": s.latency_us.p50,
                "p99": s.latency_us.p99,
                "p999": s.latency_us.p999,
                "max": s.latency_us.max,
            },
            "checkpoint_pause_us": s.checkpoint_pause_us,
            "reservoir_segments_deleted": s.reservoir_segments_deleted,
            "peak_rss_bytes": peak,
            "late_events": s.counters.too_late,
            "state": s.state,
            "store": s.store,
            "window": a.window,
            "cards": a.cards,
            "merchants": a.merchants,
            "zipf": a.zipf,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
