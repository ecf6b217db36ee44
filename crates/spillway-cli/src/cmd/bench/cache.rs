//! `spillway bench cache`: runs each configuration of the DEBS'22 synthetic application
//! ([`spillway_bench::cache_bench`]) in a child process of its own (this binary,
//! re-executed with the hidden `--child` flag) so that each reports its own peak RSS,
//! then prints the table and writes the JSON.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use spillway_bench::cache_bench::{self, CacheBenchConfig, CacheRow, CONFIGS};
use spillway_bench::units::{parse_count, parse_size};

/// `spillway bench cache`.
#[derive(Debug, Args)]
pub struct CacheBenchArgs {
    /// Configurations, comma-separated: memory, redis, tiered-N (L1 at N% of the
    /// objects' size over Redis over hashlog), tiered-disk (L1 30% over hashlog)
    /// [default: memory, redis, tiered-10 .. tiered-30, tiered-disk]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    configs: Option<Vec<String>>,

    /// Number of objects
    #[arg(long, default_value = "102", value_parser = parse_count, value_name = "N")]
    objects: u64,

    /// Size of each object
    #[arg(long, default_value = "4MiB", value_parser = parse_size, value_name = "SIZE")]
    object_size: u64,

    /// Read-modify-write accesses
    #[arg(long, default_value = "1000", value_parser = parse_count, value_name = "N")]
    accesses: u64,

    /// Zipf exponent of the access order (1.8: an L1 of 10% hits about 90%, as in the
    /// paper)
    #[arg(long, default_value_t = 1.8, value_name = "S")]
    zipf: f64,

    /// Seed of the access order
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Directory in which the stores are created [default: the system temporary
    /// directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress on stderr
    #[arg(long, short)]
    quiet: bool,

    /// Run one configuration in this process and write its row to --child-out
    #[arg(long, hide = true, requires = "child_out")]
    child: Option<String>,

    #[arg(long, hide = true)]
    child_out: Option<PathBuf>,
}

/// The JSON written by `--json`.
#[derive(serde::Serialize)]
struct Report<'a> {
    command: String,
    date: String,
    machine: spillway_bench::machine::MachineInfo,
    objects: u64,
    object_size: u64,
    accesses: u64,
    zipf: f64,
    results: &'a [CacheRow],
}

pub fn run(a: CacheBenchArgs) -> Result<()> {
    if a.objects == 0 || a.accesses == 0 || a.object_size < 8 {
        bail!("--objects and --accesses must be at least 1 and --object-size at least 8 bytes");
    }
    if !(a.zipf.is_finite() && a.zipf >= 0.0) {
        bail!("--zipf must be a non-negative number, got {}", a.zipf);
    }
    let cfg = CacheBenchConfig {
        objects: a.objects,
        object_size: usize::try_from(a.object_size).context("--object-size")?,
        accesses: a.accesses,
        zipf: a.zipf,
        seed: a.seed,
    };
    let base = a.dir.clone().unwrap_or_else(std::env::temp_dir);
    if let (Some(config), Some(out)) = (&a.child, &a.child_out) {
        let row = cache_bench::run_one(&cfg, config, &base)?;
        std::fs::write(out, serde_json::to_vec(&row)?)
            .with_context(|| format!("write {}", out.display()))?;
        return Ok(());
    }
    let configs = a.configs.clone().unwrap_or_else(|| CONFIGS.map(String::from).to_vec());
    for c in &configs {
        let known = CONFIGS.contains(&c.as_str())
            || c.strip_prefix("tiered-")
                .and_then(|p| p.parse::<u64>().ok())
                .is_some_and(|p| (1..=100).contains(&p));
        if !known {
            bail!("--configs: unknown configuration {c:?}; expected {}", CONFIGS.join(", "));
        }
    }
    let work = tempfile::Builder::new()
        .prefix("spillway-bench-cache-")
        .tempdir_in(&base)
        .with_context(|| format!("create a directory in {}", base.display()))?;
    let exe = std::env::current_exe().context("find this executable")?;
    let pb = if a.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(configs.len() as u64)
    };
    let mut rows = Vec::new();
    for c in &configs {
        pb.set_message(c.clone());
        let out = work.path().join(format!("{c}.json"));
        let status = Command::new(&exe)
            .args(["bench", "cache", "--child", c, "--child-out"])
            .arg(&out)
            .args(["--objects", &a.objects.to_string()])
            .args(["--object-size", &a.object_size.to_string()])
            .args(["--accesses", &a.accesses.to_string()])
            .args(["--zipf", &a.zipf.to_string()])
            .args(["--seed", &a.seed.to_string()])
            .arg("--dir")
            .arg(work.path())
            .status()
            .with_context(|| format!("run {}", exe.display()))?;
        if !status.success() {
            bail!("configuration {c} failed ({status}); its error is above");
        }
        let row: CacheRow = serde_json::from_slice(
            &std::fs::read(&out).with_context(|| format!("read {}", out.display()))?,
        )
        .map_err(|e| anyhow!("{c}: bad result file: {e}"))?;
        rows.push(row);
        pb.inc(1);
    }
    pb.finish_and_clear();
    cache_bench::finish(&mut rows)?;
    println!(
        "{:<12} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10}",
        "config",
        "load s",
        "seconds",
        "slowdown",
        "L1 hit",
        "L2 hits",
        "L3 hits",
        "peak RSS",
        "Redis RSS"
    );
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / f64::from(1u32 << 20));
    for r in &rows {
        println!(
            "{:<12} {:>8.3} {:>9.3} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10}",
            r.config,
            r.load_seconds,
            r.seconds,
            r.slowdown.map_or("-".into(), |s| format!("{s:.2}x")),
            r.l1_hit_ratio.map_or("-".into(), |h| format!("{:.1}%", h * 100.0)),
            r.l2_hits,
            r.l3_hits,
            mib(r.peak_rss_bytes),
            r.redis_rss_bytes.map_or("-".into(), mib),
        );
    }
    let by = |name: &str| rows.iter().find(|r| r.config == name);
    if let (Some(m), Some(t30), Some(rd)) = (by("memory"), by("tiered-30"), by("redis")) {
        println!(
            "tiered-30 is {:.2}x memory's time; redis-only is {:.1}x tiered-30's",
            t30.seconds / m.seconds,
            rd.seconds / t30.seconds
        );
    }
    if let (Some(m), Some(t10)) = (by("memory"), by("tiered-10")) {
        println!(
            "tiered-10's peak RSS is {:.2}x memory's",
            t10.peak_rss_bytes as f64 / m.peak_rss_bytes.max(1) as f64
        );
    }
    if let Some(path) = &a.json {
        let report = Report {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            date: spillway_bench::machine::today_utc(),
            machine: spillway_bench::machine::MachineInfo::detect(),
            objects: a.objects,
            object_size: a.object_size,
            accesses: a.accesses,
            zipf: a.zipf,
            results: &rows,
        };
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("write {}", path.display()))?;
        if !a.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
