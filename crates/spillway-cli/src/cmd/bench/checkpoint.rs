//! `spillway bench checkpoint`: one checkpoint after a few updates to a large state, and
//! the recovery, from `spillway_bench::checkpoint`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use spillway_bench::units::{parse_count, parse_size};

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// Stores, comma-separated: hashlog, hashlog-full, rocksdb [default: all in this build]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<spillway_bench::checkpoint::CkptStore>>,
    /// Keys loaded first (8-byte keys and values; not measured)
    #[arg(long, default_value = "10M", value_parser = parse_count, value_name = "N")]
    keys: u64,
    /// Random updates before the measured checkpoint
    #[arg(long, default_value = "100k", value_parser = parse_count, value_name = "N")]
    updates: u64,
    /// Memory budget of every store
    #[arg(long, default_value = "1GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,
    /// Seed of the update sequence
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory in which the stores are created [default: the system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Also write the rows as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

pub fn run(a: CheckpointArgs) -> Result<()> {
    use spillway_bench::checkpoint::{self, CheckpointConfig, CkptStore};
    let cfg = CheckpointConfig {
        stores: a.stores.unwrap_or_else(CkptStore::available),
        keys: a.keys,
        updates: a.updates,
        memory_budget: a.memory_budget,
        seed: a.seed,
    };
    let rows = checkpoint::run(&cfg, a.dir.as_deref())?;
    print!("{}", checkpoint::table(&rows));
    for line in checkpoint::ratios(&rows) {
        println!("{line}");
    }
    if let Some(path) = &a.json {
        let v = serde_json::json!({
            "rows": rows,
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        });
        std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
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
        a: CheckpointArgs,
    }

    #[test]
    fn parses_bench_checkpoint_flags() {
        use spillway_bench::checkpoint::CkptStore;
        let argv = [
            "checkpoint",
            "--keys",
            "10M",
            "--updates",
            "100k",
            "--stores",
            "hashlog,hashlog-full,rocksdb",
        ];
        let a = Bench::try_parse_from(argv).unwrap().a;
        assert_eq!((a.keys, a.updates), (10_000_000, 100_000));
        assert_eq!(
            a.stores,
            Some(vec![CkptStore::HashLog, CkptStore::HashLogFull, CkptStore::Rocks])
        );
        let e = Bench::try_parse_from(["checkpoint", "--stores", "mem"]).unwrap_err().to_string();
        assert!(e.contains("hashlog-full"), "{e}");
    }
}
