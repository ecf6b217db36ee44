//! `spillway bench cache`: the DEBS'22 paper's synthetic application (§6-7) over the
//! tiered store's level configurations, side by side.
//!
//! The application's state is a set of large objects (default 102 of 4 MiB), all
//! created first (the load, timed apart), then accessed in a zipf order (default 1000
//! accesses, timed); each access is a read-modify-write that rewrites the whole object
//! (every 8-byte word is rotated and mixed with the access number: one pass reading and
//! writing the object, as the paper's application "makes changes" to a file-sized
//! object). L1 hit ratios and level hits count the access phase. The configurations:
//!
//! | config | store |
//! |---|---|
//! | `memory` | [`MemStore`]: all objects in process, no cache |
//! | `redis` | tiered, Redis only: every access reads the object from Redis and writes it back |
//! | `tiered-N` | tiered: L1 at N% of the objects' total size, L2 a private Redis, L3 hashlog |
//! | `tiered-disk` | tiered: L1 at 30%, L3 hashlog, no Redis |
//!
//! Each configuration runs in a process of its own (the CLI re-executes itself), so its
//! peak resident set is its own. Rows report seconds, the slowdown against `memory`,
//! L1's hit ratio, L2 and L3 hits and the peak RSS; Redis's own resident memory is
//! reported beside it (it is another process).
//!
//! The zipf exponent defaults to 1.8: with it, an L1 holding 10% of the objects hits
//! about 90% of accesses, as the paper reports (Fig. 4d: above 90% at 10%).

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use spillway_store::tiered::{L2Config, L3Kind, TierStats, TieredOptions, TieredStore};
use spillway_store::{MemStore, NamespaceSpec, Rmw, StateStore, StoreOptions};

/// What to run.
#[derive(Clone, Debug)]
pub struct CacheBenchConfig {
    /// Number of distinct objects (default 102).
    pub objects: u64,
    /// Bytes per object (default 4 MiB).
    pub object_size: usize,
    /// Read-modify-write accesses (default 1000).
    pub accesses: u64,
    /// Zipf exponent of the access order (default 1.8).
    pub zipf: f64,
    /// Seed of the access order (default 42).
    pub seed: u64,
}

impl Default for CacheBenchConfig {
    fn default() -> Self {
        CacheBenchConfig { objects: 102, object_size: 4 << 20, accesses: 1000, zipf: 1.8, seed: 42 }
    }
}

/// The configurations in the order they run.
pub const CONFIGS: [&str; 8] = [
    "memory",
    "redis",
    "tiered-10",
    "tiered-15",
    "tiered-20",
    "tiered-25",
    "tiered-30",
    "tiered-disk",
];

/// One configuration's result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CacheRow {
    /// Configuration name ([`CONFIGS`]).
    pub config: String,
    /// Wall time of the accesses.
    pub seconds: f64,
    /// Wall time of loading the objects before the accesses (not in `seconds`).
    pub load_seconds: f64,
    /// `seconds` over `memory`'s (filled in by the caller that ran both).
    pub slowdown: Option<f64>,
    /// L1 hits over accesses (none without an L1).
    pub l1_hit_ratio: Option<f64>,
    /// Misses answered by Redis.
    pub l2_hits: u64,
    /// Misses answered by L3.
    pub l3_hits: u64,
    /// Entries demoted into Redis.
    pub demotions_to_l2: u64,
    /// Entries written into L3.
    pub demotions_to_l3: u64,
    /// Peak resident set of the process that ran it.
    pub peak_rss_bytes: u64,
    /// Redis's resident set at the end (another process; none without Redis).
    pub redis_rss_bytes: Option<u64>,
    /// L1 capacity in bytes (none without an L1).
    pub l1_bytes: Option<u64>,
    /// Checksum of every object's final bytes: equal across configurations, or one of
    /// them lost or corrupted a write.
    pub checksum: u64,
}

/// The access order: object ids drawn from an exact zipf distribution (inverse CDF
/// over the ranks; rank r has probability proportional to 1 / r^s), ranks scattered
/// over ids.
pub fn access_order(cfg: &CacheBenchConfig) -> Vec<u64> {
    let n = cfg.objects.max(1);
    let weights: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-cfg.zipf)).collect();
    let total: f64 = weights.iter().sum();
    let mut cdf = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cdf.push(acc);
    }
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    // A fixed permutation so that the hottest objects are not ids 0, 1, 2...
    let mut ids: Vec<u64> = (0..n).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.random_range(0..=i));
    }
    (0..cfg.accesses)
        .map(|_| {
            let u: f64 = rng.random();
            let rank = cdf.partition_point(|&c| c < u).min(ids.len() - 1);
            ids[rank]
        })
        .collect()
}

/// The modification of one access: one pass over the object (or its creation).
fn modify(id: u64, access: u64, old: Option<&[u8]>, size: usize, out: &mut Vec<u8>) {
    out.reserve(size);
    match old {
        Some(old) => {
            let mix = access.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for w in old.chunks_exact(8) {
                let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                out.extend_from_slice(&(x.rotate_left(7) ^ mix).to_le_bytes());
            }
            out.extend_from_slice(old.chunks_exact(8).remainder());
        }
        None => {
            let mut x = id.wrapping_add(1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            for _ in 0..size / 8 {
                x ^= x >> 31;
                x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
                out.extend_from_slice(&x.to_le_bytes());
            }
            out.resize(size, 0);
        }
    }
}

fn opts(dir: &Path, budget: u64) -> StoreOptions {
    StoreOptions::new(dir).memory_budget(budget).namespace(NamespaceSpec::list("objects"))
}

/// Runs one configuration in this process, in a fresh directory under `dir`.
pub fn run_one(cfg: &CacheBenchConfig, config: &str, dir: &Path) -> Result<CacheRow> {
    let total = cfg.objects * cfg.object_size as u64;
    // An object as L1 weighs it: value, key (8 bytes + 2 of namespace) and overhead.
    let per_object = cfg.object_size as u64 + 10 + spillway_store::tiered::L1_ENTRY_OVERHEAD;
    // L3 (hashlog) pages must hold one object; its budget the few pages it needs
    // (hashlog keeps 7 pages besides its index).
    let l3_budget =
        8 * (cfg.object_size as u64 + 8192).next_power_of_two().max(1 << 16) + (4 << 20);
    let sub = dir.join(config);
    let _ = std::fs::remove_dir_all(&sub);
    let tiered = |l1: u64, l2: L2Config, l3: L3Kind| -> Result<Box<dyn StateStore>> {
        let t = TieredOptions::new(l1).l2(l2).l3(l3).max_value(cfg.object_size);
        let s = TieredStore::open(opts(&sub, l1 + l3_budget), t)
            .with_context(|| format!("open the {config} store"))?;
        Ok(Box::new(s))
    };
    // N% of the objects' total size as L1 counts it (10% of 102 objects holds 10.2).
    let pct = |p: u64| (cfg.objects * per_object * p / 100).max(per_object);
    let mut store: Box<dyn StateStore> = match config {
        "memory" => Box::new(MemStore::open(opts(&sub, total * 2 + (64 << 20)))?),
        "redis" => tiered(0, L2Config::Auto, L3Kind::None)?,
        "tiered-disk" => tiered(pct(30), L2Config::None, L3Kind::HashLog)?,
        c => match c.strip_prefix("tiered-").and_then(|p| p.parse::<u64>().ok()) {
            Some(p) if (1..=100).contains(&p) => tiered(pct(p), L2Config::Auto, L3Kind::HashLog)?,
            _ => bail!("unknown configuration {c:?}; expected one of {}", CONFIGS.join(", ")),
        },
    };
    let ns = store.namespace("objects")?;
    let order = access_order(cfg);
    let size = cfg.object_size;
    // Load: the application's state is the whole set of objects.
    let start = Instant::now();
    let mut buf = Vec::new();
    for id in 0..cfg.objects {
        buf.clear();
        modify(id, 0, None, size, &mut buf);
        store
            .put(ns, &id.to_be_bytes(), &buf)
            .with_context(|| format!("{config}: load object {id}"))?;
    }
    buf = Vec::new();
    let load_seconds = start.elapsed().as_secs_f64();
    let before = store.stats().tiers().cloned().unwrap_or_default();
    let start = Instant::now();
    for (i, &id) in order.iter().enumerate() {
        store
            .rmw(ns, &id.to_be_bytes(), &mut |old, out| {
                modify(id, i as u64, old, size, out);
                Rmw::Put
            })
            .with_context(|| format!("{config}: access {i} (object {id})"))?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let peak_rss_bytes = crate::machine::peak_rss_bytes();
    let after = store.stats().tiers().cloned();
    // Read every object back: the checksum shows no configuration lost a write.
    let mut checksum = 0u64;
    for id in 0..cfg.objects {
        if store.get_into(ns, &id.to_be_bytes(), &mut buf)? {
            checksum = checksum.rotate_left(5) ^ u64::from(crc32c::crc32c(&buf)) ^ id;
        }
    }
    // The access phase's own counts (the load's demotions are not part of them).
    let tiers = after.map(|t| TierStats {
        l1_hits: t.l1_hits - before.l1_hits,
        l1_misses: t.l1_misses - before.l1_misses,
        l2_hits: t.l2_hits - before.l2_hits,
        l3_hits: t.l3_hits - before.l3_hits,
        demotions_to_l2: t.demotions_to_l2 - before.demotions_to_l2,
        demotions_to_l3: t.demotions_to_l3 - before.demotions_to_l3,
        ..t
    });
    let redis_rss_bytes =
        tiers.filter(|_| config != "memory" && config != "tiered-disk").and_then(|_| {
            spillway_store::tiered::RedisServer::shared().ok().and_then(|s| redis_rss(&s.url()))
        });
    Ok(CacheRow {
        config: config.to_string(),
        seconds,
        load_seconds,
        slowdown: None,
        l1_hit_ratio: tiers.filter(|t| t.l1_capacity > 0).map(|t| t.l1_hit_ratio()),
        l2_hits: tiers.map_or(0, |t| t.l2_hits),
        l3_hits: tiers.map_or(0, |t| t.l3_hits),
        demotions_to_l2: tiers.map_or(0, |t| t.demotions_to_l2),
        demotions_to_l3: tiers.map_or(0, |t| t.demotions_to_l3),
        peak_rss_bytes,
        redis_rss_bytes,
        l1_bytes: tiers.filter(|t| t.l1_capacity > 0).map(|t| t.l1_capacity),
        checksum,
    })
}

/// `used_memory_rss` of the Redis at `url`.
fn redis_rss(url: &str) -> Option<u64> {
    let client = redis::Client::open(url).ok()?;
    let mut con = client.get_connection().ok()?;
    let info: String = redis::cmd("INFO").arg("memory").query(&mut con).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory_rss:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Fills in each row's slowdown against the `memory` row and checks that every
/// configuration ended with the same objects.
pub fn finish(rows: &mut [CacheRow]) -> Result<()> {
    let memory = rows.iter().find(|r| r.config == "memory").map(|r| (r.seconds, r.checksum));
    if let Some((secs, sum)) = memory {
        for r in rows.iter_mut() {
            r.slowdown = Some(r.seconds / secs);
            if r.checksum != sum {
                bail!(
                    "{} ended with other object contents than memory (checksum {:x} vs {:x}): a \
                     write was lost or corrupted",
                    r.config,
                    r.checksum,
                    sum
                );
            }
        }
    }
    Ok(())
}
