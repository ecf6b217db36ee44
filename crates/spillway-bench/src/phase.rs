//! `spillway bench phase`: the phase-change experiment for adaptive layouts.
//!
//! One namespace, declared for point access ([`AccessHint::Point`]), holds the history
//! of `entities` entities: `history` records each, keyed `entity u64 BE | slot u64 BE`,
//! with `value_bytes`-byte values (loaded first, not measured). Then two phases of
//! `events` events each, measured separately:
//!
//! | phase | one event | what suits it |
//! |---|---|---|
//! | `point` | `get` and `put` of one record of a uniform entity and slot | a hash index (hashlog) |
//! | `range` | `put` of one record, then a range read of a uniform entity's whole history (seek to `entity | 0`, `next` through its slots) | time/key order (timelog) |
//!
//! Every store runs both phases on a fresh directory, one store after the other, with
//! the same seeded sequence. Ordered namespaces ([`StateStore::is_ordered`]) serve the
//! range read with a [`Cursor`]; unordered ones with a prefix scan (a walk of the
//! namespace on hash stores) and a sort. Every event is timed (one TSC read per event,
//! HDR histogram per phase). The bytes every range read returned are summed into a
//! checksum that must be the same for every store: a store that returns wrong ranges
//! fails the run.
//!
//! For `adaptive` the rows also say where the namespace lives after each phase: it
//! starts in the hash layout (its hint) and its observer must move it to the time
//! layout during the range phase. The ratios printed compare adaptive with the best
//! other store in each phase; `max_us` of adaptive's range phase includes the
//! migration's longest pause.

use spillway_store::StateStoreExt;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use spillway_store::{
    AccessHint, Cursor, Direction, NamespaceSpec, StateStore, StoreKind, StoreOptions,
};

/// Settings of the experiment. Defaults: 20k entities x 8 slots of 100 bytes (16 MB of
/// state), 300k events per phase, 256 MiB budget, seed 42.
#[derive(Clone, Debug)]
pub struct PhaseConfig {
    /// Stores to run, one after the other.
    pub stores: Vec<StoreKind>,
    /// Entities.
    pub entities: u64,
    /// Records per entity.
    pub history: u64,
    /// Value size in bytes.
    pub value_bytes: usize,
    /// Events per phase.
    pub events: u64,
    /// Memory budget of each store.
    pub memory_budget: u64,
    /// Seed of the key sequence.
    pub seed: u64,
}

impl Default for PhaseConfig {
    fn default() -> Self {
        PhaseConfig {
            stores: vec![StoreKind::Adaptive, StoreKind::HashLog],
            entities: 20_000,
            history: 8,
            value_bytes: 100,
            events: 300_000,
            memory_budget: 256 << 20,
            seed: 42,
        }
    }
}

/// One (store, phase) measurement.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseRow {
    /// Store name.
    pub store: String,
    /// `point` or `range`.
    pub phase: &'static str,
    /// Events measured.
    pub events: u64,
    /// Seconds of the phase.
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Latency percentiles of one event, microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest event latency.
    pub max_us: f64,
    /// Where the namespace lives after the phase (stores with several layouts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Sum of the bytes the range reads returned (equal for every store).
    pub checksum: u64,
}

const NAMESPACE: &str = "history";

fn key(entity: u64, slot: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&entity.to_be_bytes());
    k[8..].copy_from_slice(&slot.to_be_bytes());
    k
}

fn fill(value: &mut [u8], n: u64) {
    for (i, b) in value.iter_mut().enumerate() {
        *b = (n as u8).wrapping_add(i as u8);
    }
}

fn layout_of(store: &dyn StateStore) -> Option<String> {
    let s = store.stats();
    let l = s.layouts().iter().find(|l| l.namespace == NAMESPACE)?;
    Some(match &l.migrating_to {
        Some(to) => format!("{} migrating to {to}", l.layout),
        None if l.migrations > 0 => format!("{} ({} migrations)", l.layout, l.migrations),
        None => l.layout.clone(),
    })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

/// Reads entity `e`'s whole history; returns the bytes read.
fn range_read(
    store: &mut dyn StateStore,
    ns: spillway_store::Ns,
    e: u64,
    expect: u64,
) -> Result<u64> {
    let prefix = e.to_be_bytes();
    let mut bytes = 0u64;
    let mut n = 0u64;
    if store.is_ordered(ns) {
        let mut c = Cursor::prefix(store, ns, &prefix, &[], Direction::Forward)?;
        while let Some((k, v)) = c.entry() {
            bytes += (k.len() + v.len()) as u64;
            n += 1;
            c.next(store)?;
        }
    } else {
        let mut all = Vec::new();
        store.scan_prefix(ns, &prefix, &mut |k, v| {
            all.push((k.to_vec(), v.len()));
            true
        })?;
        all.sort_unstable();
        for (k, vlen) in &all {
            bytes += (k.len() + vlen) as u64;
            n += 1;
        }
    }
    ensure!(n == expect, "{}: entity {e} has {n} records, expected {expect}", store.name());
    Ok(bytes)
}

fn run_store(kind: StoreKind, cfg: &PhaseConfig, dir: &Path) -> Result<Vec<PhaseRow>> {
    let opts = StoreOptions::new(dir)
        .memory_budget(cfg.memory_budget)
        .namespace(NamespaceSpec::list(NAMESPACE).hint(AccessHint::Point));
    let mut store = kind.open(opts).with_context(|| format!("opening {}", kind.name()))?;
    let store = store.as_mut();
    let ns = store.namespace(NAMESPACE)?;
    let mut value = vec![0u8; cfg.value_bytes];
    for e in 0..cfg.entities {
        for s in 0..cfg.history {
            fill(&mut value, e ^ s);
            store.put(ns, &key(e, s), &value)?;
        }
    }
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let clock = quanta::Clock::new();
    let mut rows = Vec::new();
    let mut out = Vec::new();
    for phase in ["point", "range"] {
        let mut hist = histogram();
        let mut checksum = 0u64;
        let start = clock.raw();
        let mut prev = start;
        for i in 0..cfg.events {
            let e = rng.random_range(0..cfg.entities);
            let s = rng.random_range(0..cfg.history);
            let k = key(e, s);
            fill(&mut value, i);
            if phase == "point" {
                store.get_into(ns, &k, &mut out)?;
                store.put(ns, &k, &value)?;
            } else {
                store.put(ns, &k, &value)?;
                let r = rng.random_range(0..cfg.entities);
                checksum += range_read(store, ns, r, cfg.history)?;
            }
            let now = clock.raw();
            hist.saturating_record(clock.delta(prev, now).as_nanos() as u64);
            prev = now;
        }
        let seconds = clock.delta(start, prev).as_secs_f64();
        let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
        rows.push(PhaseRow {
            store: kind.name().to_string(),
            phase,
            events: cfg.events,
            seconds,
            events_per_sec: cfg.events as f64 / seconds.max(1e-9),
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: hist.max() as f64 / 1e3,
            layout: layout_of(store),
            checksum,
        });
    }
    Ok(rows)
}

/// Runs every store through both phases; checks that every store's range reads
/// returned the same bytes.
pub fn run(cfg: &PhaseConfig, dir: Option<&Path>) -> Result<Vec<PhaseRow>> {
    ensure!(
        cfg.entities > 0 && cfg.history > 0 && cfg.events > 0,
        "entities, history and events must be > 0"
    );
    let work = match dir {
        Some(d) => tempfile::Builder::new().prefix("spillway-phase-").tempdir_in(d)?,
        None => tempfile::Builder::new().prefix("spillway-phase-").tempdir()?,
    };
    let mut rows = Vec::new();
    for (i, &kind) in cfg.stores.iter().enumerate() {
        let sdir = work.path().join(format!("store-{i}"));
        rows.extend(run_store(kind, cfg, &sdir)?);
        let _ = std::fs::remove_dir_all(&sdir);
    }
    let sums: Vec<u64> = rows.iter().filter(|r| r.phase == "range").map(|r| r.checksum).collect();
    ensure!(
        sums.windows(2).all(|w| w[0] == w[1]),
        "range reads returned different bytes on different stores: {sums:?}"
    );
    Ok(rows)
}

/// Ratio lines: adaptive against the best other store of each phase.
pub fn ratios(rows: &[PhaseRow]) -> Vec<String> {
    let mut out = Vec::new();
    for phase in ["point", "range"] {
        let of = |r: &&PhaseRow| r.phase == phase;
        let Some(a) = rows.iter().filter(of).find(|r| r.store == "adaptive") else { continue };
        let Some(best) = rows
            .iter()
            .filter(of)
            .filter(|r| r.store != "adaptive")
            .max_by(|x, y| x.events_per_sec.total_cmp(&y.events_per_sec))
        else {
            continue;
        };
        out.push(format!(
            "{phase} phase: adaptive / best other ({}) = {:.2}x; adaptive max latency {:.2} ms",
            best.store,
            a.events_per_sec / best.events_per_sec,
            a.max_us / 1e3
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{run, PhaseConfig};
    use spillway_store::StoreKind;

    #[test]
    fn every_store_reads_the_same_ranges() {
        let cfg = PhaseConfig {
            stores: vec![StoreKind::Adaptive, StoreKind::HashLog, StoreKind::Mem],
            entities: 300,
            history: 4,
            value_bytes: 16,
            events: 3000,
            memory_budget: 64 << 20,
            seed: 7,
        };
        let rows = run(&cfg, None).expect("run");
        assert_eq!(rows.len(), 6);
        assert!(rows.iter().all(|r| r.events == 3000));
        let a = rows.iter().find(|r| r.store == "adaptive" && r.phase == "range").unwrap();
        assert!(a.checksum > 0);
        // Declared for point access, the namespace starts in the hash layout and the
        // observer moves it to the time layout once range reads dominate.
        let p = rows.iter().find(|r| r.store == "adaptive" && r.phase == "point").unwrap();
        assert_eq!(p.layout.as_deref(), Some("hashlog"));
        assert!(a.layout.as_deref().is_some_and(|l| l.starts_with("timelog")), "{:?}", a.layout);
    }
}
