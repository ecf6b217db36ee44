//! `spillway bench store`: the state stores side by side on the store workloads
//! (`spillway_bench::store_bench`).

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use spillway_bench::disk_bench::{self, DiskProbeConfig};
use spillway_bench::store_bench::{self, Scale, StoreBenchConfig};
use spillway_bench::units::{parse_count, parse_size};
use spillway_store::StoreKind;

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Stores to compare, comma-separated (mem, hashlog, appendlog, timelog, adaptive,
    /// tiered, rocksdb); ratios are printed relative to the last one. `tiered` runs with its
    /// default levels here: an L1 of a quarter of the budget over hashlog, no Redis
    /// [default: every store in this build except tiered]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,

    /// Workloads, comma-separated: rmw-uniform, rmw-zipf, readwrite, readwrite-zipf, get;
    /// `rmw` means both rmw workloads and `all` every workload
    #[arg(long, default_value = "all", value_name = "LIST")]
    workload: String,

    /// Distinct keys, for every workload (accepts 10M, 200k) [default: per workload:
    /// rmw 1M, readwrite 10M, get 1M; --quick: 200k]
    #[arg(long, value_parser = parse_count, value_name = "N")]
    keys: Option<u64>,

    /// Measured ops, for every workload (accepts 10M, 200k) [default: rmw 10M,
    /// readwrite 10M, get 2M; --quick: 1M, 1M, 400k]
    #[arg(long, value_parser = parse_count, value_name = "N")]
    ops: Option<u64>,

    /// Value size in bytes of the get workload (rmw uses 8-byte counters, readwrite
    /// 116-byte records) [default: 8]
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    value_size: Option<u64>,

    /// Memory budget of every store, e.g. 256MiB, 1GiB, 512KiB, 1000000 [default:
    /// 256MiB; --quick: 64MiB, readwrite 32MiB]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    memory_budget: Option<u64>,

    /// Seed of the key sequences (every store sees the same sequence)
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Directory in which the stores are created (a fresh subdirectory, removed
    /// afterwards) [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Also write the results, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress bars or per-run lines on stderr
    #[arg(long, short)]
    quiet: bool,

    /// Small default sizes that finish in seconds (explicit sizes still win)
    #[arg(long)]
    quick: bool,

    /// Skip reading each store back to check its contents after its run
    #[arg(long)]
    no_verify: bool,

    /// Ops per store call, comma-separated sizes each run in turn (e.g. 1,32): 1 calls
    /// the store once per op; larger sizes use the batched operations (multi_rmw,
    /// multi_get, prefetch) that overlap the cache misses of a batch [default: 1]
    #[arg(long, value_delimiter = ',', value_name = "LIST", default_value = "1")]
    batch: Vec<usize>,

    /// Open every store with direct I/O (O_DIRECT; RocksDB's direct reads, flushes and
    /// compactions), so reads outside the memory budget reach the disk, not the OS page
    /// cache; afterwards a short disk probe (as `bench disk`, 1 GiB, 3 s) prints the
    /// disk's random-read rate beside each store's
    #[arg(long)]
    direct_io: bool,
}

pub fn run(args: StoreArgs) -> Result<()> {
    let value_size = args
        .value_size
        .map(|v| usize::try_from(v).map_err(|_| anyhow!("--value-size {v} is too large")))
        .transpose()?;
    let cfg = StoreBenchConfig {
        stores: args.stores.unwrap_or_else(store_bench::available_stores),
        workloads: store_bench::parse_workloads(&args.workload)
            .map_err(|e| anyhow!("--workload: {e}"))?,
        scale: if args.quick { Scale::Quick } else { Scale::Full },
        keys: args.keys,
        ops: args.ops,
        value_size,
        memory_budget: args.memory_budget,
        seed: args.seed,
        dir: args.dir,
        quiet: args.quiet,
        verify: !args.no_verify,
        batches: args.batch,
        direct_io: args.direct_io,
    };
    let mut report = store_bench::run(&cfg)?;
    if args.direct_io {
        let probe = DiskProbeConfig {
            dir: cfg.dir.clone(),
            file_size: 1 << 30,
            seconds: 3.0,
            ..Default::default()
        };
        report.disk_probe = Some(disk_bench::probe(&probe).context("the disk probe")?);
    }
    print!("{}", report.table());
    let ratios = report.ratios();
    if !ratios.is_empty() {
        println!();
        for line in ratios {
            println!("{line}");
        }
    }
    let disk = report.disk_comparison();
    if !disk.is_empty() {
        println!();
        for line in disk {
            println!("{line}");
        }
    }
    if let Some(path) = &args.json {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        report.write_json(path, Some(command))?;
        if !args.quiet {
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Bench {
        #[command(flatten)]
        a: StoreArgs,
    }

    fn store_args(argv: &[&str]) -> StoreArgs {
        let mut full = vec!["store"];
        full.extend_from_slice(argv);
        Bench::try_parse_from(full).unwrap().a
    }

    #[test]
    fn parses_bench_store_flags() {
        let a = store_args(&[
            "--stores",
            "hashlog,mem",
            "--workload",
            "rmw,get",
            "--keys",
            "10M",
            "--memory-budget",
            "256MiB",
            "--quick",
        ]);
        assert_eq!(a.stores, Some(vec![StoreKind::HashLog, StoreKind::Mem]));
        assert_eq!(a.keys, Some(10_000_000));
        assert_eq!(a.memory_budget, Some(256 << 20));
        assert_eq!(a.seed, 42);
        assert!(a.quick);
        assert!(!a.direct_io);
        let a = store_args(&["--workload", "readwrite,readwrite-zipf", "--direct-io"]);
        assert!(a.direct_io);
        assert_eq!(a.workload, "readwrite,readwrite-zipf");
        let a = store_args(&[]);
        assert_eq!(a.stores, None);
        assert_eq!(a.workload, "all");
    }
}
