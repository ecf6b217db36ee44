//! `spillway bench checkpoint`: what one checkpoint costs after a few updates to a
//! large state, and what recovering it costs.
//!
//! Each store, on a fresh directory, one after the other:
//! 1. loads `keys` keys (8-byte big-endian key, 8-byte value), takes a first
//!    checkpoint and lets any index snapshot it starts finish and be published (a
//!    second checkpoint); not measured;
//! 2. applies `updates` updates to uniform random keys (not measured);
//! 3. takes ONE checkpoint, measured: its wall time (the writer's pause: the store
//!    serves nothing meanwhile), the bytes the process handed to the kernel for
//!    writing meanwhile (`write_bytes` of `/proc/self/io`, all threads, so RocksDB's
//!    flush counts) and the store's own `bytes_written` delta;
//! 4. drops the store and opens it again, measured: the recovery time; then reads back
//!    every updated key and a sample of the others.
//!
//! Stores: `hashlog` (incremental checkpoints, default options sized like
//! `StoreKind::HashLog` for the budget, presized for the keys), `hashlog-full` (the
//! same with `index_snapshot_ratio(0)`: a whole index snapshot in every checkpoint, the
//! behaviour before incremental checkpoints) and `rocksdb` (flush + RocksDB checkpoint,
//! needs the `rocksdb` feature).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use spillway_store::{
    merges, HashLogOptions, HashLogStore, NamespaceSpec, StateStore, StoreKind, StoreOptions,
};

/// A store configuration of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CkptStore {
    /// Hashlog with incremental checkpoints (the default options).
    HashLog,
    /// Hashlog writing a whole index snapshot in every checkpoint.
    HashLogFull,
    /// RocksDB (feature `rocksdb`).
    Rocks,
}

impl CkptStore {
    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CkptStore::HashLog => "hashlog",
            CkptStore::HashLogFull => "hashlog-full",
            CkptStore::Rocks => "rocksdb",
        }
    }

    /// The stores this build can run.
    pub fn available() -> Vec<CkptStore> {
        let mut v = vec![CkptStore::HashLog, CkptStore::HashLogFull];
        if StoreKind::Rocks.available() {
            v.push(CkptStore::Rocks);
        }
        v
    }
}

impl std::str::FromStr for CkptStore {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "hashlog" => Ok(CkptStore::HashLog),
            "hashlog-full" => Ok(CkptStore::HashLogFull),
            "rocksdb" | "rocks" => Ok(CkptStore::Rocks),
            other => {
                Err(format!("unknown store {other:?}; expected hashlog, hashlog-full or rocksdb"))
            }
        }
    }
}

/// Settings of the benchmark.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// Stores to run, one after the other.
    pub stores: Vec<CkptStore>,
    /// Keys loaded before the measured checkpoint.
    pub keys: u64,
    /// Updates between the unmeasured and the measured checkpoint.
    pub updates: u64,
    /// Memory budget of every store.
    pub memory_budget: u64,
    /// Seed of the update sequence (every store sees the same).
    pub seed: u64,
}

/// One store's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointRow {
    /// Store name.
    pub store: String,
    /// Keys loaded.
    pub keys: u64,
    /// Updates before the measured checkpoint.
    pub updates: u64,
    /// Wall time of the measured checkpoint, milliseconds.
    pub checkpoint_ms: f64,
    /// Bytes the process wrote during the checkpoint (`/proc/self/io` `write_bytes`;
    /// the store's own count where that is unavailable).
    pub checkpoint_bytes: u64,
    /// The store's `bytes_written` delta over the checkpoint (RocksDB reports none).
    pub store_bytes: u64,
    /// Time to open the store again (recovery), milliseconds.
    pub recovery_ms: f64,
    /// Hashlog: about the log bytes recovery replayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_bytes: Option<u64>,
    /// Seconds the load and the first checkpoint(s) took (not measured).
    pub setup_seconds: f64,
}

const NS: &str = "kv";

fn options(dir: &Path, cfg: &CheckpointConfig) -> StoreOptions {
    StoreOptions::new(dir)
        .memory_budget(cfg.memory_budget)
        .expected_keys(cfg.keys)
        .namespace(NamespaceSpec::with_merge(NS, merges::add_u64()))
}

fn hashlog_options(cfg: &CheckpointConfig, full: bool) -> HashLogOptions {
    let h = HashLogOptions::for_budget(cfg.memory_budget)
        .expected_keys(cfg.keys.min(cfg.memory_budget / 64));
    if full {
        h.index_snapshot_ratio(0.0)
    } else {
        h
    }
}

/// The store under test: hashlog concretely (its snapshot is completed in set-up),
/// RocksDB through the contract.
enum Opened {
    Hash(Box<HashLogStore>),
    Other(Box<dyn StateStore>),
}

impl Opened {
    fn store(&mut self) -> &mut dyn StateStore {
        match self {
            Opened::Hash(h) => h.as_mut(),
            Opened::Other(s) => s.as_mut(),
        }
    }
}

fn open(which: CkptStore, dir: &Path, cfg: &CheckpointConfig) -> Result<Opened> {
    let opts = options(dir, cfg);
    Ok(match which {
        CkptStore::HashLog | CkptStore::HashLogFull => Opened::Hash(Box::new(HashLogStore::open(
            opts,
            hashlog_options(cfg, which == CkptStore::HashLogFull),
        )?)),
        CkptStore::Rocks => Opened::Other(StoreKind::Rocks.open(opts)?),
    })
}

/// `write_bytes` of `/proc/self/io`, if readable.
pub fn proc_write_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    s.lines().find_map(|l| l.strip_prefix("write_bytes:")).and_then(|v| v.trim().parse().ok())
}

fn value_of(k: u64, updated: &HashMap<u64, u64>) -> u64 {
    updated.get(&k).copied().unwrap_or(k)
}

fn run_store(which: CkptStore, cfg: &CheckpointConfig, dir: &Path) -> Result<CheckpointRow> {
    let setup = Instant::now();
    let mut opened = open(which, dir, cfg).with_context(|| format!("opening {}", which.name()))?;
    let store = opened.store();
    let ns = store.namespace(NS)?;
    for k in 0..cfg.keys {
        store.put(ns, &k.to_be_bytes(), &k.to_le_bytes())?;
    }
    store.checkpoint()?;
    if let Opened::Hash(h) = &mut opened {
        h.complete_index_snapshot()?;
        h.checkpoint()?;
        ensure!(!h.index_snapshot_running(), "the first snapshot did not finish");
    }
    let store = opened.store();
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut updated = HashMap::new();
    for u in 0..cfg.updates {
        let k = rng.random_range(0..cfg.keys);
        let v = cfg.keys + u;
        store.put(ns, &k.to_be_bytes(), &v.to_le_bytes())?;
        updated.insert(k, v);
    }
    let setup_seconds = setup.elapsed().as_secs_f64();

    let replay_bytes = match &opened {
        Opened::Hash(h) => Some(h.replay_bytes()),
        Opened::Other(_) => None,
    };
    let store = opened.store();
    let (io0, s0) = (proc_write_bytes(), store.stats().bytes_written);
    let t = Instant::now();
    store.checkpoint()?;
    let checkpoint_ms = t.elapsed().as_secs_f64() * 1e3;
    let (io1, s1) = (proc_write_bytes(), store.stats().bytes_written);
    let store_bytes = s1 - s0;
    let checkpoint_bytes = match (io0, io1) {
        (Some(a), Some(b)) => b - a,
        _ => store_bytes,
    };
    // The replay estimate after the checkpoint (its fold-over counted).
    let replay_bytes = match &opened {
        Opened::Hash(h) => Some(h.replay_bytes()),
        Opened::Other(_) => replay_bytes,
    };
    drop(opened);

    let t = Instant::now();
    let mut opened =
        open(which, dir, cfg).with_context(|| format!("reopening {}", which.name()))?;
    let recovery_ms = t.elapsed().as_secs_f64() * 1e3;
    let store = opened.store();
    let mut out = Vec::new();
    let mut check = |k: u64| -> Result<()> {
        ensure!(
            store.get_into(ns, &k.to_be_bytes(), &mut out)?,
            "{}: key {k} lost in recovery",
            which.name()
        );
        let want = value_of(k, &updated);
        ensure!(out == want.to_le_bytes(), "{}: key {k} has a wrong value", which.name());
        Ok(())
    };
    for &k in updated.keys() {
        check(k)?;
    }
    for _ in 0..10_000 {
        check(rng.random_range(0..cfg.keys))?;
    }
    if let Some(n) = store.stats().live_keys {
        ensure!(n == cfg.keys, "{}: {n} keys after recovery, expected {}", which.name(), cfg.keys);
    }
    Ok(CheckpointRow {
        store: which.name().to_string(),
        keys: cfg.keys,
        updates: cfg.updates,
        checkpoint_ms,
        checkpoint_bytes,
        store_bytes,
        recovery_ms,
        replay_bytes,
        setup_seconds,
    })
}

/// Runs every store; `dir` is where the stores are created (a fresh subdirectory).
pub fn run(cfg: &CheckpointConfig, dir: Option<&Path>) -> Result<Vec<CheckpointRow>> {
    ensure!(cfg.keys > 0, "--keys must be > 0");
    for s in &cfg.stores {
        if *s == CkptStore::Rocks && !StoreKind::Rocks.available() {
            bail!(
                "the rocksdb store is not in this build; rebuild with `--features rocksdb` (e.g. \
                 `cargo build --release -p spillway-cli --features rocksdb`)"
            );
        }
    }
    let work = match dir {
        Some(d) => tempfile::Builder::new().prefix("spillway-ckpt-").tempdir_in(d)?,
        None => tempfile::Builder::new().prefix("spillway-ckpt-").tempdir()?,
    };
    let mut rows = Vec::new();
    for (i, &s) in cfg.stores.iter().enumerate() {
        let sdir = work.path().join(format!("store-{i}"));
        rows.push(run_store(s, cfg, &sdir)?);
        let _ = std::fs::remove_dir_all(&sdir);
    }
    Ok(rows)
}

/// The rows as a text table.
pub fn table(rows: &[CheckpointRow]) -> String {
    let mut s = format!(
        "{:<13} {:>10} {:>9} {:>14} {:>16} {:>14} {:>12} {:>14}\n",
        "store",
        "keys",
        "updates",
        "checkpoint ms",
        "checkpoint bytes",
        "store bytes",
        "recovery ms",
        "replay bytes"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<13} {:>10} {:>9} {:>14.1} {:>16} {:>14} {:>12.1} {:>14}\n",
            r.store,
            r.keys,
            r.updates,
            r.checkpoint_ms,
            r.checkpoint_bytes,
            r.store_bytes,
            r.recovery_ms,
            r.replay_bytes.map_or("-".to_string(), |b| b.to_string())
        ));
    }
    s
}

/// Ratio lines: incremental hashlog against each other store.
pub fn ratios(rows: &[CheckpointRow]) -> Vec<String> {
    let Some(h) = rows.iter().find(|r| r.store == "hashlog") else { return Vec::new() };
    rows.iter()
        .filter(|r| r.store != "hashlog")
        .map(|o| {
            format!(
                "hashlog vs {}: checkpoint pause {:.1}x shorter, {:.1}x fewer bytes; recovery \
                 {:.2}x the time",
                o.store,
                o.checkpoint_ms / h.checkpoint_ms.max(1e-6),
                o.checkpoint_bytes as f64 / (h.checkpoint_bytes.max(1)) as f64,
                h.recovery_ms / o.recovery_ms.max(1e-6)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_run_recovers_every_store() {
        let cfg = CheckpointConfig {
            stores: vec![CkptStore::HashLog, CkptStore::HashLogFull],
            keys: 50_000,
            updates: 1000,
            memory_budget: 64 << 20,
            seed: 3,
        };
        let rows = run(&cfg, None).expect("run");
        assert_eq!(rows.len(), 2);
        let (inc, full) = (&rows[0], &rows[1]);
        // The whole-snapshot checkpoint writes the index; the incremental one only the
        // changed log pages.
        assert!(full.store_bytes > 10 * inc.store_bytes, "{inc:?} {full:?}");
        assert!(inc.store_bytes <= 1000 * 40 * 2 + (16 << 10), "{inc:?}");
        assert!(!table(&rows).is_empty());
        assert_eq!(ratios(&rows).len(), 1);
    }
}
