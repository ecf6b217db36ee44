//! `spillway cache ...`: argument parsing and printing around
//! `spillway_bench::cache_sim`.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::cache_sim::{self, summary, Capacity, SimConfig, POLICIES};

/// `spillway cache`.
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// Replay key-access traces through cache policies at several capacities and print
    /// each hit ratio, the mean per policy, and whether W-TinyLFU is within 1 point of
    /// the best of LRU, ARC, S3-FIFO and LIRS in every cell.
    ///
    /// A trace is text, one decimal u64 key per line, plain or gzip; each line is a read,
    /// and a miss inserts the key with weight 1.
    Sim(SimArgs),
}

/// `spillway cache sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Trace files (one key per line, plain or gzip-compressed)
    #[arg(long, required = true, num_args = 1.., value_name = "FILE")]
    trace: Vec<PathBuf>,

    /// Capacities, comma-separated: entries (5000) or percentages of each trace's
    /// distinct keys (5%)
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1%,5%,20%",
        value_parser = parse_capacity,
        value_name = "LIST"
    )]
    capacity: Vec<Capacity>,

    /// Policies, comma-separated: wtinylfu, wtinylfu-fixed (W-TinyLFU without window
    /// adaptation), lru, arc, s3fifo, lirs
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wtinylfu,lru,arc,s3fifo,lirs",
        value_parser = parse_policy,
        value_name = "LIST"
    )]
    policies: Vec<String>,

    /// Seed of W-TinyLFU's frequency sketch
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Threads running cells (at most the CPUs available)
    #[arg(long, default_value_t = 2, value_name = "N")]
    threads: usize,

    /// Also write the rows, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bar
    #[arg(long, short)]
    quiet: bool,
}

fn parse_capacity(s: &str) -> Result<Capacity, String> {
    Capacity::parse(s).map_err(|e| e.to_string())
}

fn parse_policy(s: &str) -> Result<String, String> {
    let s = s.trim();
    if POLICIES.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(cache_sim::SimError::UnknownPolicy { name: s.to_string() }.to_string())
    }
}

/// `spillway cache ...`.
pub fn run(cmd: CacheCommand) -> Result<()> {
    match cmd {
        CacheCommand::Sim(a) => sim(a),
    }
}

fn sim(a: SimArgs) -> Result<()> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = SimConfig {
        traces: a.trace,
        capacities: a.capacity,
        policies: a.policies,
        seed: a.seed,
        threads: a.threads.clamp(1, cpus),
    };
    let pb = if a.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(0);
        pb.set_style(
            ProgressStyle::with_template("{bar:30} {percent:>3}% accesses {msg} ({elapsed})")
                .expect("valid template"),
        );
        pb
    };
    let rows = cache_sim::run(&cfg, &pb);
    pb.finish_and_clear();
    let rows = rows?;
    print!("{}", summary::table(&rows));
    let lines = summary::summary_lines(&rows);
    if !lines.is_empty() {
        println!();
        for line in lines {
            println!("{line}");
        }
    }
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "results": rows,
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        if !a.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
