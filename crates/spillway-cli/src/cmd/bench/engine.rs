//! `spillway bench engine`: Railgun's Q1 on generated payments
//! (`spillway_bench::engine_bench`), the stores or window lengths side by side, each
//! window in a child process of its own when there are several.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::duration::parse_duration;
use spillway_engine::source::PaymentOptions;
use spillway_engine::value::TimeUnit;
use spillway_store::StoreKind;

/// `spillway bench engine`.
#[derive(Debug, Args)]
pub struct EngineBenchArgs {
    /// Payments per run
    #[arg(long, default_value = "5M", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct cards (zipf 0.99)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    cards: u64,

    /// Zipfian skew of the cards in (0, 1); 0 draws them uniformly
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    zipf: f64,

    /// Window lengths, comma-separated (e.g. 5m or 20m,7d); with several, each runs in
    /// its own child process (so peak memory is per window) and the ratios to the first
    /// are printed
    #[arg(long, default_value = "5m", value_delimiter = ',', value_name = "LIST")]
    windows: Vec<String>,

    /// Also run every --windows length in one job (one query with a SUM and a COUNT per
    /// window, one event reservoir for all), in a child process of its own, and print
    /// its peak RSS against the longest window alone: the engine's shared window state
    #[arg(long)]
    together: bool,

    /// Allowed lateness values, comma-separated (e.g. 0,5s); with several, each runs on
    /// every store and the throughput ratio to the first is printed (the generated
    /// events are in order: this is what keeping events for late results costs)
    #[arg(long, default_value = "0", value_delimiter = ',', value_name = "LIST")]
    lateness: Vec<String>,

    /// Make every N-th event late: its time moves back by half the allowed lateness, so
    /// it arrives out of order within the lateness and gets its own exact result (needs
    /// a --lateness above 0; 0 keeps the stream in order)
    #[arg(long, default_value_t = 0, value_name = "N")]
    late_every: u64,

    /// Mean payments per second of event time
    #[arg(long, default_value_t = 2_000.0, value_name = "RATE")]
    rate: f64,

    /// Stores, comma-separated; ratios are printed relative to the last one [default:
    /// hashlog, mem, adaptive and rocksdb if built in]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,

    /// Memory budget of every store
    #[arg(long, default_value = "2GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generate events on the fly inside the timed loop instead of before it (bounded
    /// memory for very long runs; generation time is then included)
    #[arg(long)]
    stream: bool,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Events read ahead and announced to the store at a time, so it can prefetch their
    /// state (the job's default); 1 processes events one at a time with no announcement
    #[arg(long, default_value_t = spillway_engine::driver::BATCH_EVENTS, value_name = "N")]
    batch: usize,

    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bar
    #[arg(long, short)]
    quiet: bool,

    /// Internal: run one (window, store) and write its result as JSON to FILE
    #[arg(long, hide = true, value_name = "FILE")]
    child_json: Option<PathBuf>,
}

/// `spillway bench engine`.
pub fn run(a: EngineBenchArgs) -> Result<()> {
    use spillway_bench::engine_bench::{run_q1, Q1Config, Q1Result};
    let stores = a.stores.clone().unwrap_or_else(spillway_bench::store_bench::available_stores);
    let lateness_ms: Vec<i64> = a
        .lateness
        .iter()
        .map(|l| parse_duration(l, TimeUnit::Ms).map_err(|e| anyhow!("--lateness: {e}")))
        .collect::<Result<_>>()?;
    if lateness_ms.len() > 1 && (a.windows.len() > 1 || a.together) {
        bail!("several --lateness values need a single window (and no --together)");
    }
    let cfg_for = |w: &str| -> Result<Q1Config> {
        Ok(Q1Config {
            payments: PaymentOptions {
                seed: a.seed,
                events: a.events,
                cards: a.cards,
                merchants: 1,
                zipf: a.zipf,
                events_per_second: a.rate,
                ..PaymentOptions::default()
            },
            window_ms: parse_duration(w, TimeUnit::Ms).map_err(|e| anyhow!("--windows: {e}"))?,
            extra_windows_ms: Vec::new(),
            allowed_lateness_ms: lateness_ms[0],
            memory_budget: a.memory_budget,
            expected_keys: Some(a.cards),
            pregenerate: !a.stream,
            batch: a.batch.max(1),
            late_every: a.late_every,
        })
    };
    if a.late_every > 0 && lateness_ms.iter().all(|&l| l < 2) {
        bail!("--late-every needs an allowed lateness of at least 2 ms (--lateness)");
    }
    let mut rows: Vec<(Q1Result, u64)> = Vec::new();
    if let Some(path) = &a.child_json {
        let (cfg, s) = match (a.windows.as_slice(), stores.as_slice(), a.together) {
            ([w], [s], false) => (cfg_for(w)?, *s),
            ([w, rest @ ..], [s], true) => {
                let mut cfg = cfg_for(w)?;
                for r in rest {
                    cfg.extra_windows_ms.push(cfg_for(r)?.window_ms);
                }
                (cfg, *s)
            }
            _ => bail!(
                "--child-json runs exactly one window (or, with --together, one job) and one store"
            ),
        };
        spillway_bench::machine::reset_peak_rss();
        let r = run_q1(&cfg, s, &mut |_| {})?;
        let peak = spillway_bench::machine::peak_rss_bytes();
        std::fs::write(path, serde_json::to_string(&(r, peak))?)?;
        return Ok(());
    }
    let pb = if !a.quiet && std::io::stderr().is_terminal() {
        ProgressBar::new(
            a.events * ((a.windows.len() + usize::from(a.together)) * stores.len()) as u64,
        )
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} events {msg} ({eta})")
            .expect("template"),
    );
    if a.together && a.windows.len() < 2 {
        bail!("--together needs at least two --windows");
    }
    let separate = a.windows.len() > 1;
    // Each window alone, then (with --together) all windows in one job per store.
    let mut runs: Vec<(String, bool, i64)> = Vec::new();
    for w in &a.windows {
        for &l in &lateness_ms {
            runs.push((w.clone(), false, l));
        }
    }
    if a.together {
        runs.push((a.windows.join(","), true, lateness_ms[0]));
    }
    for (w, together, lateness) in &runs {
        for &s in &stores {
            pb.set_message(format!("window {w}, store {}", s.name()));
            let done = pb.position();
            if separate {
                let tmp = tempfile::NamedTempFile::new()?;
                let exe = std::env::current_exe()?;
                let mut cmd = std::process::Command::new(exe);
                cmd.args(["bench", "engine", "--events", &a.events.to_string()])
                    .args(if *together { &["--together"][..] } else { &[][..] })
                    .args(["--cards", &a.cards.to_string(), "--windows", w])
                    .args(["--zipf", &a.zipf.to_string()])
                    .args(["--rate", &a.rate.to_string(), "--stores", s.name()])
                    .args(["--lateness", &format!("{lateness}ms")])
                    .args(["--late-every", &a.late_every.to_string()])
                    .args([
                        "--memory-budget",
                        &a.memory_budget.to_string(),
                        "--seed",
                        &a.seed.to_string(),
                        "--batch",
                        &a.batch.to_string(),
                    ])
                    .arg("--child-json")
                    .arg(tmp.path());
                if a.stream {
                    cmd.arg("--stream");
                }
                let st = cmd.status()?;
                if !st.success() {
                    bail!("child run for window {w} on {} failed", s.name());
                }
                rows.push(serde_json::from_str(&std::fs::read_to_string(tmp.path())?)?);
                pb.set_position(done + a.events);
            } else {
                spillway_bench::machine::reset_peak_rss();
                let cfg = Q1Config { allowed_lateness_ms: *lateness, ..cfg_for(w)? };
                let r = run_q1(&cfg, s, &mut |n| pb.set_position(done + n))?;
                rows.push((r, spillway_bench::machine::peak_rss_bytes()));
            }
        }
    }
    pb.finish_and_clear();
    println!(
        "Railgun Q1: SUM(amount), COUNT(*) per card, {} events, {} cards ({}), {} payments/s of event time{}",
        a.events,
        a.cards,
        if a.zipf > 0.0 { format!("zipf {}", a.zipf) } else { "uniform".to_string() },
        a.rate,
        if a.stream { ", generated inside the timed loop" } else { ", pre-generated in memory" }
    );
    println!(
        "{:<8} {:<9} {:>12} {:>8} {:>12} {:>8} {:>8} {:>8} {:>9} {:>10}",
        "window",
        "store",
        "in window",
        "seconds",
        "events/s",
        "p50 us",
        "p99 us",
        "p99.9us",
        "max us",
        "peak RSS"
    );
    for (r, peak) in &rows {
        println!(
            "{:<8} {:<9} {:>12} {:>8.2} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>9.0} {:>10}",
            if r.windows > 1 {
                format!("{} wins", r.windows)
            } else {
                if r.allowed_lateness_ms > 0 {
                    format!("{}ms L{}ms", r.window_ms, r.allowed_lateness_ms)
                } else {
                    format!("{}ms", r.window_ms)
                }
            },
            r.store,
            r.max_events_in_window,
            r.seconds,
            r.events_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            spillway_bench::units::format_bytes(*peak)
        );
    }
    for (r, _) in rows.iter().filter(|(r, _)| r.late_events > 0) {
        println!(
            "store {}, lateness {}ms: {} events arrived late (within the lateness) and got their own exact results, reading {:.1} recent events each",
            r.store, r.allowed_lateness_ms, r.late_events,
            r.late_examined as f64 / r.late_events as f64
        );
    }
    if stores.len() > 1 {
        let last = stores.len() - 1;
        for (wi, w) in a.windows.iter().enumerate() {
            let base = &rows[wi * stores.len() + last].0;
            for si in 0..last {
                let r = &rows[wi * stores.len() + si].0;
                println!(
                    "window {w}: {} / {} throughput = {:.1}x",
                    r.store,
                    base.store,
                    r.events_per_sec / base.events_per_sec
                );
            }
        }
    }
    for (li, l) in a.lateness.iter().enumerate().skip(1) {
        for (si, s) in stores.iter().enumerate() {
            let base = &rows[si].0;
            let r = &rows[li * stores.len() + si].0;
            println!(
                "store {}: lateness {l} vs {}: throughput ratio {:.3}",
                s.name(),
                a.lateness[0],
                r.events_per_sec / base.events_per_sec
            );
        }
    }
    if a.together {
        let longest = (0..a.windows.len())
            .max_by_key(|&wi| rows[wi * stores.len()].0.window_ms)
            .expect("at least two windows");
        for (si, s) in stores.iter().enumerate() {
            let (one, one_peak) = &rows[longest * stores.len() + si];
            let (all, all_peak) = &rows[a.windows.len() * stores.len() + si];
            println!(
                "store {}: {} windows in one job vs window {} alone: peak RSS ratio {:.3}, throughput ratio {:.3}",
                s.name(),
                a.windows.len(),
                a.windows[longest],
                *all_peak as f64 / (*one_peak).max(1) as f64,
                all.events_per_sec / one.events_per_sec
            );
        }
    }
    if a.windows.len() > 1 {
        for (si, s) in stores.iter().enumerate() {
            let (b, bpeak) = &rows[si];
            for wi in 1..a.windows.len() {
                let (r, peak) = &rows[wi * stores.len() + si];
                println!(
                    "store {}: window {} vs {}: throughput ratio {:.3}, peak RSS ratio {:.3}",
                    s.name(),
                    a.windows[wi],
                    a.windows[0],
                    r.events_per_sec / b.events_per_sec,
                    *peak as f64 / (*bpeak).max(1) as f64
                );
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
            "stream": a.stream,
            "rows": rows.iter().map(|(r, p)| serde_json::json!({"result": r, "peak_rss_bytes": p})).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")?;
    }
    Ok(())
}
