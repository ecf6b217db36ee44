//! Spatio-temporal event detection (the DEBS'22 paper's real application) over the
//! tiered store: see `spillway_bench::event_detection` for the application.
//!
//! ```text
//! cargo run --release --example event_detection -- --l1 10%
//! cargo run --release --example event_detection -- --l1 256KiB --l2 auto --posts 1M
//! ```
//! Runs the stream once over a MemStore (the reference detections, and the peak live
//! state that `--l1 PCT` is a share of), then over the tiered store, and prints the
//! events, whether the planted bursts were found, the times, and the hit ratios and
//! migrations per level.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use spillway_bench::event_detection::{self, clock, Config, Report};
use spillway_bench::units::{format_bytes, parse_count, parse_size_or_share, SizeOrShare};
use spillway_store::tiered::{L2Config, L3Kind, TierStats, TieredOptions, TieredStore};
use spillway_store::{MemStore, StoreOptions};

const USAGE: &str =
    "usage: event_detection [--l1 PCT%|SIZE] [--l2 none|auto|redis://HOST:PORT|redis+unix:///PATH]
                       [--l3 hashlog|none] [--posts N] [--seed S] [--dir DIR]

  --l1     L1 size: a share of the peak live state (10%) or a size (256KiB). Default 10%.
  --l2     the Redis level. Default none.
  --l3     the durable level. Default hashlog.
  --posts  posts in the stream (200k, 1M). Default 200000.
  --seed   seed of the generator. Default 7.
  --dir    directory of the tiered store. Default: a temporary directory.";

struct Args {
    l1: SizeOrShare,
    l2: L2Config,
    l3: L3Kind,
    cfg: Config,
    dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        l1: SizeOrShare::Percent(10.0),
        l2: L2Config::None,
        l3: L3Kind::HashLog,
        cfg: Config::default(),
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--l1" => {
                a.l1 = parse_size_or_share(&value).with_context(|| format!("--l1 {value}"))?
            }
            "--l2" => a.l2 = value.parse().map_err(anyhow::Error::msg)?,
            "--l3" => a.l3 = value.parse().map_err(anyhow::Error::msg)?,
            "--posts" => {
                a.cfg.posts = parse_count(&value).with_context(|| format!("--posts {value}"))?
            }
            "--seed" => {
                a.cfg.seed =
                    value.parse().with_context(|| format!("--seed {value}: expected an integer"))?
            }
            "--dir" => a.dir = Some(PathBuf::from(value)),
            other => bail!("unknown flag {other}\n{USAGE}"),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<()> {
    let args = parse_args()?;
    let cfg = &args.cfg;
    let stream = event_detection::generate(cfg);

    // The reference run over a MemStore, measuring the live state as it goes.
    let mem_dir = tempfile::tempdir()?;
    let mut mem = MemStore::open(
        StoreOptions::new(mem_dir.path())
            .memory_budget(u64::MAX / 4)
            .namespace(event_detection::namespace_spec()),
    )?;
    let reference = event_detection::run_stream(
        &Config { measure_state: true, ..cfg.clone() },
        &stream,
        &mut mem,
    )?;
    drop(mem);
    let peak = reference.peak_state.unwrap_or_default();

    println!(
        "event detection: {} posts ({} in {} planted bursts) over {}, windows of {} min every {} min, \
         {} windows, {} quadtree nodes tested (at most {} in one window)",
        reference.posts,
        reference.burst_posts,
        reference.bursts.len(),
        clock(cfg.duration_ms),
        cfg.window_ms / 60_000,
        cfg.slide_ms / 60_000,
        reference.windows,
        reference.cells_tested,
        reference.max_tree_nodes,
    );
    println!(
        "peak live state: {} keys, {} of keys and values, {} as L1 counts it (+{} B per entry)",
        peak.keys,
        format_bytes(peak.bytes),
        format_bytes(peak.l1_weight()),
        event_detection::L1_ENTRY_OVERHEAD
    );
    let l1_bytes = match args.l1 {
        SizeOrShare::Percent(p) => {
            let b = ((peak.l1_weight() as f64) * p / 100.0).ceil().max(1.0) as u64;
            println!(
                "--l1 {p}% of {} = {b} bytes ({})",
                format_bytes(peak.l1_weight()),
                format_bytes(b)
            );
            b
        }
        SizeOrShare::Bytes(b) => b,
    };

    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let topts = TieredOptions::new(l1_bytes).l2(args.l2.clone()).l3(args.l3);
    let sopts = StoreOptions::new(&dir)
        .memory_budget(256 << 20)
        .namespace(event_detection::namespace_spec());
    println!("tiered store: {}", topts.describe(sopts.memory_budget));
    let mut store = TieredStore::open(sopts, topts).context("opening the tiered store")?;
    let report = event_detection::run_stream(cfg, &stream, &mut store)?;
    let tiers = store.tier_stats();

    print_events(&report);
    let same = report.events == reference.events;
    println!();
    println!("{:<8} {:>10} {:>7}", "store", "time", "events");
    println!(
        "{:<8} {:>8.3} s {:>7}",
        "mem",
        reference.elapsed.as_secs_f64(),
        reference.events.len()
    );
    println!(
        "{:<8} {:>8.3} s {:>7}   same detections as mem: {}",
        "tiered",
        report.elapsed.as_secs_f64(),
        report.events.len(),
        if same { "yes" } else { "NO" }
    );
    println!();
    print_tiers(&tiers, &args);
    if !same {
        bail!("the tiered store's detections differ from the MemStore's");
    }
    Ok(())
}

fn print_events(r: &Report) {
    println!("\ndetected events ({}):", r.events.len());
    for (i, e) in r.events.iter().enumerate() {
        let bursts: Vec<String> = r
            .bursts
            .iter()
            .enumerate()
            .filter(|(_, b)| e.covers(b))
            .map(|(j, _)| format!("burst {}", j + 1))
            .collect();
        let tag =
            if bursts.is_empty() { "no planted burst".to_string() } else { bursts.join(", ") };
        println!("  {:>2}. {e}  [{tag}]", i + 1);
    }
    println!("planted bursts:");
    for (j, (b, m)) in r.bursts.iter().zip(r.burst_matches()).enumerate() {
        let found = m.map_or("NOT FOUND".to_string(), |i| format!("event {}", i + 1));
        println!(
            "  {:>2}. {}-{}  at ({:.3}, {:.3})  sigma {:.3} deg  {} posts  -> {found}",
            j + 1,
            clock(b.start_ms),
            clock(b.end_ms),
            b.lon,
            b.lat,
            b.sigma_deg,
            b.posts
        );
    }
    let found = r.burst_matches().iter().filter(|m| m.is_some()).count();
    println!(
        "found {found}/{} planted bursts; {} event(s) match no planted burst",
        r.bursts.len(),
        r.unmatched_events()
    );
}

fn ratio(hits: u64, misses: u64) -> String {
    let n = hits + misses;
    if n == 0 {
        "-".into()
    } else {
        format!("{:.2}%", 100.0 * hits as f64 / n as f64)
    }
}

fn print_tiers(t: &TierStats, args: &Args) {
    println!("{:<6} {:>12} {:>12} {:>10}", "level", "hits", "misses", "hit ratio");
    println!(
        "{:<6} {:>12} {:>12} {:>10}",
        "L1",
        t.l1_hits,
        t.l1_misses,
        ratio(t.l1_hits, t.l1_misses)
    );
    if args.l2 == L2Config::None {
        println!("{:<6} {:>12}", "L2", "(none)");
    } else {
        println!(
            "{:<6} {:>12} {:>12} {:>10}",
            "L2",
            t.l2_hits,
            t.l2_misses,
            ratio(t.l2_hits, t.l2_misses)
        );
    }
    if args.l3 == L3Kind::None {
        println!("{:<6} {:>12}", "L3", "(none)");
    } else {
        println!(
            "{:<6} {:>12} {:>12} {:>10}",
            "L3",
            t.l3_hits,
            t.l3_misses,
            ratio(t.l3_hits, t.l3_misses)
        );
    }
    println!(
        "migrations: {} demotions to L2, {} to L3; {} promotions from L2, {} from L3; {} L1 evictions",
        t.demotions_to_l2, t.demotions_to_l3, t.promotions_from_l2, t.promotions_from_l3, t.l1_evictions
    );
    println!(
        "L1 now: {} entries, {} of {}; {} Redis round trips",
        t.l1_entries,
        format_bytes(t.l1_bytes),
        format_bytes(t.l1_capacity),
        t.l2_round_trips
    );
}
