//! The tiered store: state in an in-process cache (L1, adaptive W-TinyLFU) over Redis
//! (L2) over a local durable store (L3, hashlog), after the DEBS'22 multi-level cache
//! (Caffeine over Redis over disk). It owns the migration between levels; the policy is
//! [`crate::cache`], the Redis launcher [`RedisServer`].
//!
//! Any subset of levels that can hold state works: L1+L2+L3, L1+L3, L1+L2, L2+L3, L2
//! alone, L3 alone. A bounded L1 with nothing below is refused (an evicted entry would
//! have nowhere to go). Without L1 nothing of the state stays in the process: every
//! write returns once Redis acknowledged it (write-through, the DEBS'22 paper's
//! Redis-based backend); with L1, demotions are written behind, by the writer thread.
//!
//! ## Migration (write-back with dirty tracking)
//! - A read that misses L1 asks the highest lower level that holds the key: the
//!   demotion buffer, then Redis (only if the key was ever written there since open:
//!   the store keeps the hashes of the keys it wrote, so a new key costs no round
//!   trip), then L3; the answer (a value, or "absent") is
//!   promoted into L1 *clean*. An absent key is cached too (a negative entry), so a
//!   key that is created later by a write costs one lower-level read, not one per access.
//! - Writes (put, delete, merge, rmw) change L1 only and mark the entry *dirty*. A
//!   delete is an L1 tombstone.
//! - When the policy evicts an entry, a clean one is dropped (the level below returns
//!   the same value on the next miss), a dirty one is demoted to the next present level:
//!   into the demotion buffer of L2 (handed every 64 entries or 1 MiB, as one pipeline
//!   of SETs, to a writer thread with its own connection, so the task does not wait for
//!   Redis to take large values; values stay readable until Redis acknowledged them,
//!   see `writer`), or straight into L3. L2 stores deletes as tombstones (a value with a
//!   trailing tag byte) because L3 may still hold an older value. With L3 below, each
//!   demoted key is also added to a Redis set of keys that are newer in Redis than in
//!   L3 (the *dirty set*, kept in Redis to keep the process small).
//! - Invariant: reading down from L1 (L1, demotion buffer, Redis, L3) the first level
//!   that has the key has its newest value. Every step above keeps it: a clean L1 entry
//!   equals what the levels below answer; a dirty one is only dropped after it is
//!   written to the next level; L2 is written with tombstones, never with a bare DEL.
//!
//! ## Durability
//! With L3, [`StateStore::checkpoint`] writes every dirty L1 entry down (through L2 when
//! present), moves the dirty set's keys from Redis into L3 (a walk with SSCAN + GET in
//! pages; a key leaves the set, by SREM, only once L3 holds its value), and checkpoints
//! L3; reopening recovers exactly L3's checkpoint, and the store clears every Redis key
//! under its prefix at open (they may be newer than that checkpoint). Without L3 the
//! store is not durable: [`TieredStore::is_durable`] says so at open and `checkpoint`
//! returns [`Error::Unsupported`].
//!
//! ## When L3 refuses a write
//! L3 can refuse a write without being poisoned: hashlog answers
//! [`Error::BudgetTooSmall`] when its hash index is full under its budget. No
//! acknowledged write is lost to it, and no operation returns it after its own effect
//! was applied:
//! - A dirty entry L1 evicts straight into L3 (no L2) and L3 refuses is *held* in the
//!   process, readable (reads ask it before L3) and dirty. The operation whose insertion
//!   evicted it is complete and succeeds. While entries are held, every write first
//!   writes them into L3 again; if L3 still refuses, puts, merges and read-modify-writes
//!   are refused unchanged with L3's error (naming L3's directory), deletes go straight
//!   to L3 (a delete needs no index room and frees the key's), and reads answer without
//!   promoting into L1 (which could evict more). So at most what one operation evicted
//!   is held ([`TierStats::held_entries`]).
//! - A flush (checkpoint, scan) writes every entry and key L3 takes; those it refuses
//!   stay dirty where they were (held, in L1, in Redis's dirty set) and the flush
//!   returns the first refusal, so a checkpoint fails rather than publish a state
//!   without them, and a later one retries them (deletes first within a page of the
//!   dirty set, since they can make room).
//!
//! Errors that poison (I/O, Redis) still poison the store.
//!
//! Redis keys are `spw:<prefix>:d:<ns u16 LE><key>` and `spw:<prefix>:dirty`, where the
//! prefix is a hash of the store directory's canonical path when L3 is present (so a
//! reopened store finds and clears its own leftovers, and several processes with
//! different directories can share one Redis) or a per-open random one without L3.
//! A Redis error (unreachable, killed, out of memory, a key gone from under the store)
//! poisons the store with [`Error::Redis`] naming the address: nothing is guessed, and
//! reopening recovers the last checkpoint.
//!
//! ## Limits (left out, on purpose)
//! - L2 has no capacity of its own: it holds what was demoted since the last checkpoint
//!   plus clean copies, within Redis's memory (`noeviction`: a full Redis refuses
//!   writes, which poisons the store rather than losing keys). Bounding it would need an
//!   in-process index of L2's keys and sizes.
//! - Scans flush every level into the lowest one and scan there; they are for
//!   maintenance, not for the hot path (the store is unordered: no `scan_range`).

mod bulk;
mod l2;
mod server;
mod writer;

use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

pub(crate) use l2::unlink_prefix;
pub use server::RedisServer;

use hashbrown::HashMap;

use crate::backend::StoreCore;
use crate::cache::{CacheConfig, WTinyLfu};
use crate::error::{Error, Result};
use crate::io::Fs;
use crate::{
    CheckpointInfo, HashLogOptions, HashLogStore, Ns, Order, Rmw, RmwFn, StateStore, StoreOptions,
    StoreStats, Visitor,
};
use l2::{Lookup, RedisLevel};

/// Where the L2 level lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum L2Config {
    /// No Redis level.
    #[default]
    None,
    /// A private `redis-server` started for this process ([`RedisServer::shared`]).
    Auto,
    /// A running server: `redis://HOST:PORT[/DB]` or `redis+unix:///PATH`.
    Url(String),
}

impl std::str::FromStr for L2Config {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" => Ok(L2Config::None),
            "auto" => Ok(L2Config::Auto),
            u if u.starts_with("redis://")
                || u.starts_with("rediss://")
                || u.starts_with("redis+unix://")
                || u.starts_with("unix://") =>
            {
                Ok(L2Config::Url(u.to_string()))
            }
            other => Err(format!(
                "unknown L2 {other:?}: expected redis://HOST:PORT, redis+unix:///PATH, auto \
                 (a private redis-server) or none"
            )),
        }
    }
}

/// The durable level below Redis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum L3Kind {
    /// No durable level (the store cannot checkpoint).
    None,
    /// A [`HashLogStore`] in `DIR/l3`.
    #[default]
    HashLog,
}

impl std::str::FromStr for L3Kind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "none" => Ok(L3Kind::None),
            "hashlog" => Ok(L3Kind::HashLog),
            other => Err(format!("unknown L3 {other:?}: expected hashlog or none")),
        }
    }
}

/// Options of the tiered store (its levels); the common ones are in [`StoreOptions`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct TieredOptions {
    /// L1 capacity in bytes (keys + values + 48 bytes per entry); `Some(0)`: no L1.
    /// Default (`None`): a quarter of the memory budget.
    pub l1_bytes: Option<u64>,
    /// The Redis level. Default none.
    pub l2: L2Config,
    /// The durable level. Default hashlog.
    pub l3: L3Kind,
    /// Hashlog options of L3. Default: sized for the memory budget minus L1
    /// ([`HashLogOptions::for_budget`]), with pages large enough for
    /// [`max_value`](Self::max_value).
    pub l3_hashlog: Option<HashLogOptions>,
    /// Largest value the store will hold, in bytes; sizes L3's pages (a hashlog record
    /// fits in a page). Default: none (the hashlog default).
    pub max_value: Option<usize>,
    /// Redis key prefix of this instance, instead of the one derived from the directory.
    pub redis_prefix: Option<String>,
}

impl TieredOptions {
    /// L1 of `l1_bytes`, no L2, L3 hashlog.
    pub fn new(l1_bytes: u64) -> Self {
        TieredOptions { l1_bytes: Some(l1_bytes), ..TieredOptions::default() }
    }
    /// Sets the L2 level (default none).
    pub fn l2(mut self, l2: L2Config) -> Self {
        self.l2 = l2;
        self
    }
    /// Sets the L3 level (default hashlog).
    pub fn l3(mut self, l3: L3Kind) -> Self {
        self.l3 = l3;
        self
    }
    /// Sets the largest value the store will hold (default: the hashlog default).
    pub fn max_value(mut self, bytes: usize) -> Self {
        self.max_value = Some(bytes);
        self
    }
    /// Sets the Redis key prefix (default: derived from the directory).
    pub fn redis_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.redis_prefix = Some(prefix.into());
        self
    }
    /// Sets L3's hashlog options (default: sized for the budget).
    pub fn l3_hashlog(mut self, h: HashLogOptions) -> Self {
        self.l3_hashlog = Some(h);
        self
    }

    /// A one-line description ("L1 64 KiB + Redis auto + hashlog").
    pub fn describe(&self, budget: u64) -> String {
        let l1 = self.l1_capacity(budget);
        let mut parts = Vec::new();
        if l1 > 0 {
            parts.push(format!("L1 {} KiB", l1 / 1024));
        }
        match &self.l2 {
            L2Config::None => {}
            L2Config::Auto => parts.push("Redis auto".into()),
            L2Config::Url(u) => parts.push(format!("Redis {u}")),
        }
        if self.l3 == L3Kind::HashLog {
            parts.push("hashlog".into());
        }
        parts.join(" + ")
    }

    fn l1_capacity(&self, budget: u64) -> u64 {
        self.l1_bytes.unwrap_or(budget / 4)
    }
}

/// Per-level counters of a tiered store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierStats {
    /// Reads and writes served by L1.
    pub l1_hits: u64,
    /// Accesses L1 did not hold: reads that asked a lower level, and writes of keys L1
    /// did not hold (a blind write asks no lower level, so `l1_misses` can exceed the
    /// lower levels' hits plus misses).
    pub l1_misses: u64,
    /// L1 misses answered by L2 (its demotion buffer or Redis).
    pub l2_hits: u64,
    /// L1 misses L2 did not hold.
    pub l2_misses: u64,
    /// Misses answered by L3 with a value.
    pub l3_hits: u64,
    /// Misses L3 did not hold (the key exists nowhere).
    pub l3_misses: u64,
    /// Dirty entries demoted into L2.
    pub demotions_to_l2: u64,
    /// Dirty entries written into L3 (by eviction or by a checkpoint's flush).
    pub demotions_to_l3: u64,
    /// Values promoted from L2 into L1.
    pub promotions_from_l2: u64,
    /// Values promoted from L3 into L1.
    pub promotions_from_l3: u64,
    /// Entries L1 evicted (clean ones dropped, dirty ones demoted).
    pub l1_evictions: u64,
    /// Entries in L1 now.
    pub l1_entries: u64,
    /// L1's weight now (bytes, as counted against its capacity).
    pub l1_bytes: u64,
    /// L1's capacity in bytes.
    pub l1_capacity: u64,
    /// Round trips to Redis.
    pub l2_round_trips: u64,
    /// Entries promoted from Redis by a batch's prefetch (one pipeline per batch); the
    /// accesses they then serve count as L1 hits.
    pub prefetched: u64,
    /// Dirty entries L1 evicted that L3 refused (a full index), held in the process
    /// until L3 takes them (see the module docs, "When L3 refuses a write").
    pub held_entries: u64,
}

impl TierStats {
    /// L1 hits over all accesses (0 without accesses).
    pub fn l1_hit_ratio(&self) -> f64 {
        let n = self.l1_hits + self.l1_misses;
        if n == 0 {
            0.0
        } else {
            self.l1_hits as f64 / n as f64
        }
    }
}

/// What [`TieredStore::load_l1`] left: the entry in L1, or its value handed back
/// because the policy rejected it (with its dirty flag).
enum Loaded {
    InL1,
    Bypass(Option<Vec<u8>>, bool),
}

/// An L1 entry: the newest value (or `None`: known absent / deleted) and whether the
/// levels below still need it.
struct Slot {
    value: Option<Vec<u8>>,
    dirty: bool,
}

/// A scratch buffer larger than this is not kept between read-modify-writes.
const SCRATCH_KEEP: usize = 1 << 20;

/// Keys one prefetch promotes at most (one Redis pipeline).
pub const PREFETCH_MAX: usize = 256;

/// Bytes counted per L1 entry besides its key and value (node, table slot, vec headers).
pub const L1_ENTRY_OVERHEAD: u64 = 48;

fn weight(k: &[u8], v: &Option<Vec<u8>>) -> u32 {
    let w = k.len() as u64 + v.as_ref().map_or(0, |v| v.len() as u64) + L1_ENTRY_OVERHEAD;
    u32::try_from(w).unwrap_or(u32::MAX)
}

/// Writes the newest value of `k` (ns + key; `None`: deleted) into L3 (`l3_ns`: L3's
/// namespace handles), counting it when L3 took it.
fn write_l3(
    l3: &mut HashLogStore,
    l3_ns: &[Ns],
    tiers: &mut TierStats,
    k: &[u8],
    v: Option<&[u8]>,
) -> Result<()> {
    let ns = l3_ns[usize::from(u16::from_le_bytes([k[0], k[1]]))];
    match v {
        Some(v) => l3.put(ns, &k[2..], v)?,
        None => l3.delete(ns, &k[2..])?,
    }
    tiers.demotions_to_l3 += 1;
    Ok(())
}

/// The multi-level store. See the module docs.
pub struct TieredStore {
    opts: StoreOptions,
    l1: Option<WTinyLfu<Box<[u8]>, Slot>>,
    l2: Option<RedisLevel>,
    l3: Option<HashLogStore>,
    /// L3's namespace handles, by our namespace index.
    l3_ns: Vec<Ns>,
    evicted: Vec<(Box<[u8]>, Slot)>,
    /// Dirty entries L1 evicted that L3 refused with an error that does not poison (no
    /// L2: with Redis below, evictions go to Redis): their newest values (`None`:
    /// deleted), read before L3 and written again before every write and flush.
    held: HashMap<Box<[u8]>, Option<Vec<u8>>>,
    kbuf: Vec<u8>,
    /// The buffer the next in-L1 read-modify-write builds its value in.
    scratch: Vec<u8>,
    tiers: TierStats,
    core: StoreCore,
}

impl std::fmt::Debug for TieredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredStore")
            .field("dir", &self.opts.dir)
            .field("l1", &self.l1.as_ref().map(WTinyLfu::capacity))
            .field("l2", &self.l2.as_ref().map(RedisLevel::addr))
            .field("l3", &self.l3.is_some())
            .finish()
    }
}

impl TieredStore {
    /// Opens (or recovers, with L3) a tiered store in `opts.dir`; its files (L3's) go
    /// through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions, t: TieredOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, t, fs)
    }

    /// [`open`](Self::open) with every file of the store (its directory and L3's) going
    /// through `fs`, the seam the power-loss and fault-injection tests use. L2 is a Redis
    /// server, outside the seam.
    pub fn open_with_fs(opts: StoreOptions, t: TieredOptions, fs: Arc<dyn Fs>) -> Result<Self> {
        opts.validate()?;
        opts.refuse_direct_io("tiered")?;
        let l1_cap = t.l1_capacity(opts.memory_budget);
        if l1_cap > 0 && t.l2 == L2Config::None && t.l3 == L3Kind::None {
            return Err(Error::InvalidOption {
                option: "tiered levels",
                detail: "an L1 with no level below would lose every entry it evicts: add L2 \
                         (--l2 auto or a Redis URL) or L3 (--l3 hashlog)"
                    .into(),
            });
        }
        if l1_cap == 0 && t.l2 == L2Config::None && t.l3 == L3Kind::None {
            return Err(Error::InvalidOption {
                option: "tiered levels",
                detail: "no level at all: give --l1, --l2 or --l3".into(),
            });
        }
        crate::io::create_dir_durable(&*fs, &opts.dir)
            .map_err(|e| Error::io("create store directory", &opts.dir, e))?;
        let (l3, l3_ns) = match t.l3 {
            L3Kind::None => (None, Vec::new()),
            L3Kind::HashLog => {
                let budget = opts.memory_budget.saturating_sub(l1_cap).max(8 << 20);
                let mut h = match (&t.l3_hashlog, t.max_value) {
                    (Some(h), _) => h.clone(),
                    // A record (header, key, value) must fit in a page with its slack.
                    (None, Some(max)) => {
                        HashLogOptions::with_pages((max + 8192).next_power_of_two().max(1 << 16))
                    }
                    (None, None) => HashLogOptions::for_budget(budget),
                };
                if let Some(k) = opts.expected_keys {
                    h = h.expected_keys(k.min(budget / 64));
                }
                let mut o = opts.clone();
                o.dir = opts.dir.join("l3");
                o.memory_budget = budget;
                let store = HashLogStore::open_with_fs(o, h, fs)?;
                let ns = (0..opts.namespaces.len())
                    .map(|i| store.namespace(&opts.namespaces[i].name))
                    .collect::<Result<Vec<_>>>()?;
                (Some(store), ns)
            }
        };
        let seq = l3.as_ref().map_or(0, |l3| l3.stats().checkpoint_seq);
        let l2 = match &t.l2 {
            L2Config::None => None,
            cfg => {
                let base = match (&t.redis_prefix, &l3) {
                    (Some(p), _) => format!("spw:{p}:"),
                    (None, Some(_)) => {
                        let canon = std::fs::canonicalize(&opts.dir)
                            .map_err(|e| Error::io("resolve store directory", &opts.dir, e))?;
                        let h = xxhash_rust::xxh3::xxh3_64(canon.as_os_str().as_encoded_bytes());
                        format!("spw:{h:016x}:")
                    }
                    (None, None) => {
                        let nanos = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos());
                        format!("spw:{}-{nanos:x}:", std::process::id())
                    }
                };
                Some(RedisLevel::connect(cfg, base, l3.is_some())?)
            }
        };
        let l1 = (l1_cap > 0).then(|| WTinyLfu::new(CacheConfig::new(l1_cap)));
        let opts_budget = opts.memory_budget;
        let tiers = TierStats::default();
        Ok(TieredStore {
            opts,
            l1,
            l2,
            l3,
            l3_ns,
            evicted: Vec::new(),
            held: HashMap::new(),
            kbuf: Vec::new(),
            scratch: Vec::new(),
            tiers,
            core: StoreCore { seq, ..StoreCore::new(opts_budget) },
        })
    }

    /// Whether the store has a durable level (L3) and can checkpoint.
    pub fn is_durable(&self) -> bool {
        self.l3.is_some()
    }

    /// Per-level counters.
    pub fn tier_stats(&self) -> TierStats {
        let mut t = self.tiers;
        if let Some(l1) = &self.l1 {
            t.l1_entries = l1.len() as u64;
            t.l1_bytes = l1.weight();
            t.l1_capacity = l1.capacity();
        }
        if let Some(l2) = &self.l2 {
            t.l2_round_trips = l2.round_trips();
        }
        t.held_entries = self.held.len() as u64;
        t
    }

    fn check(&self) -> Result<()> {
        self.core.readable()
    }

    /// Passes `r` through, poisoning the store on an error that leaves a level's
    /// contents unknown.
    fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if e.poisons() && self.core.poisoned.is_none() {
                self.core.poisoned = Some(e.to_string());
            }
        }
        r
    }

    fn set_key(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        crate::check_key(key)?;
        if ns.index() >= self.opts.namespaces.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        self.kbuf.clear();
        self.kbuf.extend_from_slice(&ns.0.to_le_bytes());
        self.kbuf.extend_from_slice(key);
        Ok(())
    }

    /// The newest value of the key in `kbuf` (ns + key) from the levels below L1. With
    /// `promote` the caller puts the answer into L1: a value still in the demotion
    /// buffer is taken out of it and returned as dirty (L1 then holds its only copy).
    /// Without it the buffer keeps the value.
    fn fetch_lower(&mut self, promote: bool) -> Result<(Option<Vec<u8>>, bool)> {
        let k = std::mem::take(&mut self.kbuf);
        let r = self.fetch_lower_of(&k, promote);
        self.kbuf = k;
        r
    }

    fn fetch_lower_of(&mut self, k: &[u8], promote: bool) -> Result<(Option<Vec<u8>>, bool)> {
        // Held entries are newer than L3 (and exist only without L2). Reads do not
        // promote while entries are held, so the value stays here.
        if !self.held.is_empty() {
            if let Some(v) = self.held.get(k) {
                return Ok((v.clone(), false));
            }
        }
        if let Some(l2) = &mut self.l2 {
            if promote {
                if let Some(v) = l2.take_pending(k) {
                    self.tiers.l2_hits += 1;
                    self.tiers.promotions_from_l2 += 1;
                    return Ok((v, true));
                }
            }
            match l2.get(k)? {
                Lookup::Found(v) => {
                    self.tiers.l2_hits += 1;
                    self.tiers.promotions_from_l2 += 1;
                    return Ok((Some(v), false));
                }
                Lookup::Deleted => {
                    self.tiers.l2_hits += 1;
                    return Ok((None, false));
                }
                Lookup::Absent => self.tiers.l2_misses += 1,
            }
        }
        if let Some(l3) = &mut self.l3 {
            let ns = self.l3_ns[usize::from(u16::from_le_bytes([k[0], k[1]]))];
            let mut out = Vec::new();
            if l3.get_into(ns, &k[2..], &mut out)? {
                self.tiers.l3_hits += 1;
                self.tiers.promotions_from_l3 += 1;
                return Ok((Some(out), false));
            }
            self.tiers.l3_misses += 1;
        }
        Ok((None, false))
    }

    /// Writes the newest value of `k` into the next level below L1.
    fn write_lower(&mut self, k: Box<[u8]>, v: Option<Vec<u8>>) -> Result<()> {
        if let Some(l2) = &mut self.l2 {
            self.tiers.demotions_to_l2 += 1;
            l2.demote(k, v)?;
            if self.l1.is_none() {
                // Without L1 no state lives in the process: the write returns once
                // Redis has it (write-through), as a Redis-only state backend does.
                l2.settle("write")?;
            }
            return Ok(());
        }
        let l3 = self.l3.as_mut().expect("a level below L1 exists (checked at open)");
        write_l3(l3, &self.l3_ns, &mut self.tiers, &k, v.as_deref())
    }

    /// Demotes what the last L1 insertion evicted. An entry L3 refuses without
    /// poisoning (its index is full) is held, readable and dirty, instead of being
    /// lost: the operation that evicted it is complete and succeeds, and the next write
    /// is refused unless L3 takes the held entries (see [`Self::retry_held`]).
    fn drain_evicted(&mut self) -> Result<()> {
        while let Some((k, slot)) = self.evicted.pop() {
            self.tiers.l1_evictions += 1;
            if !slot.dirty {
                continue;
            }
            let r = match (&self.l2, &mut self.l3) {
                (None, Some(l3)) => {
                    match write_l3(l3, &self.l3_ns, &mut self.tiers, &k, slot.value.as_deref()) {
                        Err(e) if !e.poisons() => {
                            self.held.insert(k, slot.value);
                            Ok(())
                        }
                        r => r,
                    }
                }
                // Into Redis: its errors poison the store.
                _ => self.write_lower(k, slot.value),
            };
            if let Err(e) = r {
                self.evicted.clear();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes the held entries into L3 again. `Ok` once none is left; else the first
    /// refusal, saying what waits for L3 (an error that poisons stops at once).
    fn retry_held(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let l3 = self.l3.as_mut().expect("entries are held only for L3");
        let (l3_ns, tiers) = (&self.l3_ns, &mut self.tiers);
        let mut err: Option<Error> = None;
        self.held.retain(|k, v| {
            if err.as_ref().is_some_and(Error::poisons) {
                return true;
            }
            match write_l3(l3, l3_ns, tiers, k, v.as_deref()) {
                Ok(()) => false,
                Err(e) => {
                    if err.is_none() || e.poisons() {
                        err = Some(e);
                    }
                    true
                }
            }
        });
        match err {
            None => Ok(()),
            Some(e) if e.poisons() => Err(e),
            Some(e) => {
                let n = self.held.len();
                let (entries, them) = if n == 1 { ("entry", "it") } else { ("entries", "them") };
                Err(self.l3_refusal(
                    e,
                    &format!(
                        "which refuses {n} dirty {entries} L1 evicted, held readable in \
                         memory: writes are refused until L3 takes {them}, deletes go \
                         through to L3 to make room"
                    ),
                ))
            }
        }
    }

    /// An error of L3 that does not poison, with where it happened and what waits:
    /// L3's [`Error::BudgetTooSmall`] (a full index) names the tiered store's L3
    /// directory and `waiting`; other errors are passed as they are.
    fn l3_refusal(&self, e: Error, waiting: &str) -> Error {
        match e {
            Error::BudgetTooSmall { budget, needed, what } => Error::BudgetTooSmall {
                budget,
                needed,
                what: format!(
                    "{what} (in L3 of the tiered store, {}, {waiting})",
                    self.opts.dir.join("l3").display()
                ),
            },
            e => e,
        }
    }

    /// A delete while L3 refuses the held entries: it goes straight to L3, where it
    /// needs no index room and frees the key's, then the held entries are tried again.
    /// The copies above L3 are dropped only once L3 has the delete.
    fn delete_through(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.set_key(ns, key)?;
        let k = std::mem::take(&mut self.kbuf);
        let l3 = self.l3.as_mut().expect("entries are held only for L3");
        let r = write_l3(l3, &self.l3_ns, &mut self.tiers, &k, None);
        if r.is_ok() {
            if let Some(l1) = &mut self.l1 {
                l1.remove(&k[..]);
            }
            self.held.remove(&k[..]);
        }
        self.kbuf = k;
        r?;
        match self.retry_held() {
            // Still refused: the next write says so.
            Err(e) if !e.poisons() => Ok(()),
            r => r,
        }
    }

    /// Makes L1 hold the key in `kbuf` (promoting it on a miss); counts the hit or
    /// miss. When the policy rejects the promoted entry at once (W-TinyLFU's admission
    /// found it colder than its victim, or it outweighs L1), the value is handed back
    /// instead ([`Loaded::Bypass`]) so the operation uses it without another round trip.
    fn load_l1(&mut self) -> Result<Loaded> {
        let l1 = self.l1.as_mut().expect("load_l1 with an L1");
        if l1.get(&self.kbuf[..]).is_some() {
            self.tiers.l1_hits += 1;
            return Ok(Loaded::InL1);
        }
        self.tiers.l1_misses += 1;
        if !self.held.is_empty() {
            // L3 refuses what L1 evicts: a promotion would evict more. Answer from
            // below without caching (only reads get here: writes wait for L3).
            let (value, _) = self.fetch_lower(false)?;
            return Ok(Loaded::Bypass(value, false));
        }
        let (value, dirty) = self.fetch_lower(true)?;
        let w = weight(&self.kbuf, &value);
        let l1 = self.l1.as_mut().expect("load_l1 with an L1");
        let evicted = &mut self.evicted;
        l1.insert(self.kbuf.clone().into_boxed_slice(), Slot { value, dirty }, w, &mut |k, v| {
            evicted.push((k, v))
        });
        let own = self.evicted.iter().position(|(k, _)| **k == self.kbuf[..]);
        let bypass = own.map(|i| self.evicted.swap_remove(i).1);
        self.drain_evicted()?;
        Ok(match bypass {
            None => Loaded::InL1,
            Some(slot) => {
                self.tiers.l1_evictions += 1;
                Loaded::Bypass(slot.value, slot.dirty)
            }
        })
    }

    /// Sets the L1 entry of `kbuf` to `value` (dirty), inserting it if absent, without
    /// reading the levels below (a blind write).
    fn write_l1(&mut self, value: Option<&[u8]>) -> Result<()> {
        let l1 = self.l1.as_mut().expect("write_l1 with an L1");
        let evicted = &mut self.evicted;
        // The write is an access (get_mut records it in the policy).
        if let Some(slot) = l1.get_mut(&self.kbuf[..]) {
            let old_w = weight(&self.kbuf, &slot.value);
            match (&mut slot.value, value) {
                (Some(old), Some(v)) => {
                    old.clear();
                    old.extend_from_slice(v);
                }
                (slot_v, v) => *slot_v = v.map(<[u8]>::to_vec),
            }
            slot.dirty = true;
            let w = weight(&self.kbuf, &slot.value);
            self.tiers.l1_hits += 1;
            if w != old_w {
                l1.set_weight(&self.kbuf[..], w, &mut |k, v| evicted.push((k, v)));
            }
        } else {
            self.tiers.l1_misses += 1;
            let value = value.map(<[u8]>::to_vec);
            let w = weight(&self.kbuf, &value);
            l1.insert(
                self.kbuf.clone().into_boxed_slice(),
                Slot { value, dirty: true },
                w,
                &mut |k, v| evicted.push((k, v)),
            );
        }
        self.drain_evicted()
    }

    /// Refuses a value the lowest level could not hold (checked when written, not when
    /// demoted, so that nothing accepted can fail to move down later).
    fn check_value(&self, klen: usize, vlen: usize) -> Result<()> {
        let max = self.l3.as_ref().map_or(crate::MAX_VALUE_LEN, |l3| l3.max_value(klen));
        crate::check_value(vlen, max.min(crate::MAX_VALUE_LEN))
    }

    fn get_impl(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.set_key(ns, key)?;
        out.clear();
        let value = if self.l1.is_none() {
            self.fetch_lower(false)?.0
        } else {
            match self.load_l1()? {
                Loaded::InL1 => {
                    let l1 = self.l1.as_ref().expect("l1");
                    return Ok(match l1.peek(&self.kbuf[..]).and_then(|s| s.value.as_deref()) {
                        Some(v) => {
                            out.extend_from_slice(v);
                            true
                        }
                        None => false,
                    });
                }
                Loaded::Bypass(value, dirty) => {
                    let found = value.is_some();
                    if let Some(v) = &value {
                        out.extend_from_slice(v);
                    }
                    if dirty {
                        // It came out of the demotion buffer: put it back.
                        let k = self.kbuf.clone().into_boxed_slice();
                        self.write_lower(k, value)?;
                    }
                    return Ok(found);
                }
            }
        };
        Ok(match value {
            Some(v) => {
                out.extend_from_slice(&v);
                true
            }
            None => false,
        })
    }

    fn write_impl(&mut self, ns: Ns, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.set_key(ns, key)?;
        if let Some(v) = value {
            self.check_value(key.len(), v.len())?;
        }
        if self.l1.is_some() {
            return self.write_l1(value);
        }
        let k = self.kbuf.clone().into_boxed_slice();
        self.write_lower(k, value.map(<[u8]>::to_vec))
    }

    fn rmw_impl(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.set_key(ns, key)?;
        let max = self.l3.as_ref().map_or(crate::MAX_VALUE_LEN, |l3| l3.max_value(key.len()));
        let max = max.min(crate::MAX_VALUE_LEN);
        let mut out = Vec::new();
        // Outside L1 (no L1, or the promoted entry was rejected): apply and write down.
        let (old, dirty) = if self.l1.is_none() {
            self.fetch_lower(false)?
        } else {
            match self.load_l1()? {
                Loaded::Bypass(old, dirty) => (old, dirty),
                Loaded::InL1 => {
                    let l1 = self.l1.as_mut().expect("l1");
                    let slot = l1.peek_mut(&self.kbuf[..]).expect("load_l1 left the entry in L1");
                    let old_w = weight(&self.kbuf, &slot.value);
                    // The new value is built in the scratch buffer and swapped in; the
                    // old value's buffer becomes the scratch (no allocation per update).
                    let mut out = std::mem::take(&mut self.scratch);
                    out.clear();
                    match f(slot.value.as_deref(), &mut out) {
                        Rmw::Keep => {
                            self.scratch = out;
                            return Ok(());
                        }
                        Rmw::Put => {
                            if let Err(e) = crate::check_value(out.len(), max) {
                                self.scratch = out;
                                return Err(e);
                            }
                            self.scratch = slot.value.replace(out).unwrap_or_default();
                            if self.scratch.capacity() > SCRATCH_KEEP {
                                self.scratch = Vec::new();
                            }
                        }
                        Rmw::Delete => {
                            self.scratch = out;
                            slot.value = None;
                        }
                    }
                    slot.dirty = true;
                    let w = weight(&self.kbuf, &slot.value);
                    if w == old_w {
                        return Ok(());
                    }
                    let evicted = &mut self.evicted;
                    l1.set_weight(&self.kbuf[..], w, &mut |k, v| evicted.push((k, v)));
                    return self.drain_evicted();
                }
            }
        };
        let new = match f(old.as_deref(), &mut out) {
            // Unchanged, but a value taken out of the demotion buffer goes back.
            Rmw::Keep if dirty => old,
            Rmw::Keep => return Ok(()),
            Rmw::Put => {
                crate::check_value(out.len(), max)?;
                Some(out)
            }
            Rmw::Delete => None,
        };
        let k = self.kbuf.clone().into_boxed_slice();
        self.write_lower(k, new)
    }

    /// Writes every dirty L1 entry to the next level and sends L2's buffer; with
    /// `to_l3`, also moves L2's dirty keys into L3. Afterwards the lowest level holds
    /// the newest value of every key (L3 if present, else Redis). An entry or key L3
    /// refuses without poisoning stays dirty where it was (held, dirty in L1, in
    /// Redis's dirty set), the others are written all the same, and the first refusal
    /// is returned.
    fn flush_down(&mut self, to_l3: bool) -> Result<()> {
        self.retry_held()?;
        let mut refused: Option<(Error, &str)> = None;
        if let Some(l1) = &mut self.l1 {
            let mut err: Option<Error> = None;
            let (l2, l3, l3_ns, tiers) = (&mut self.l2, &mut self.l3, &self.l3_ns, &mut self.tiers);
            l1.for_each_mut(&mut |k, slot| {
                if !slot.dirty || err.as_ref().is_some_and(Error::poisons) {
                    return;
                }
                let r = if let Some(l2) = l2.as_mut() {
                    tiers.demotions_to_l2 += 1;
                    l2.demote(k.clone(), slot.value.clone())
                } else if let Some(l3) = l3.as_mut() {
                    write_l3(l3, l3_ns, tiers, k, slot.value.as_deref())
                } else {
                    Err(Error::InvalidOption {
                        option: "tiered levels",
                        detail: "no level below L1 to flush to".into(),
                    })
                };
                match r {
                    Ok(()) => slot.dirty = false,
                    Err(e) if err.is_none() || e.poisons() => err = Some(e),
                    Err(_) => {}
                }
            });
            match err {
                Some(e) if e.poisons() => return Err(e),
                Some(e) => {
                    refused = Some((e, "which refuses dirty entries of L1: they stay dirty there"))
                }
                None => {}
            }
        }
        if let Some(l2) = &mut self.l2 {
            l2.flush_pending()?;
            if let (true, Some(l3)) = (to_l3, &mut self.l3) {
                // Keys leave the dirty set only once L3 holds them (removed with the
                // next page's request), so a refusal or a crash loses none.
                let (mut cursor, mut clean) = (0u64, Vec::new());
                loop {
                    let (next, mut page) = l2.dirty_page(cursor, &clean, self.l3_ns.len())?;
                    clean.clear();
                    // Deletes first: a tombstone may free the index room an insert of
                    // the same page needs (the keys of a page are distinct).
                    page.sort_by_key(|(_, v)| v.is_some());
                    for (k, v) in page {
                        match write_l3(l3, &self.l3_ns, &mut self.tiers, &k, v.as_deref()) {
                            Ok(()) => clean.push(k),
                            Err(e) if e.poisons() => return Err(e),
                            Err(e) => {
                                if refused.is_none() {
                                    refused = Some((
                                        e,
                                        "which refuses keys of Redis's dirty set: they stay \
                                         in it",
                                    ));
                                }
                            }
                        }
                    }
                    if next == 0 {
                        break;
                    }
                    cursor = next;
                }
                l2.mark_clean(&clean)?;
            }
        }
        match refused {
            None => Ok(()),
            Some((e, what)) => {
                Err(self
                    .l3_refusal(e, &format!("{what}, and a checkpoint fails until L3 takes them")))
            }
        }
    }

    fn scan_impl(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.flush_down(true)?;
        if let Some(l3) = &mut self.l3 {
            return l3.range(self.l3_ns[ns.index()], start, end, Order::Any, limit, visit);
        }
        let l2 = self.l2.as_mut().expect("a level below L1 exists");
        // Redis matches a key prefix: the one every key within the bounds shares.
        let mut p = ns.0.to_le_bytes().to_vec();
        p.extend_from_slice(shared_prefix(start, end));
        let mut n = 0;
        if limit > 0 {
            l2.scan(&p, &mut |k, v| match v {
                Some(v) if crate::in_bounds(&k[2..], start, end) => {
                    n += 1;
                    visit(&k[2..], v) && n < limit
                }
                _ => true,
            })?;
        }
        Ok(n)
    }
}

/// The longest prefix every key within the bounds starts with: the prefix itself for
/// a prefix range (from `p` to [`crate::cursor::prefix_end`]`(p)`), else the common
/// prefix of the two bounds.
fn shared_prefix<'a>(start: Bound<&'a [u8]>, end: Bound<&'a [u8]>) -> &'a [u8] {
    let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (start, end)
    else {
        return &[];
    };
    if matches!(start, Bound::Included(_))
        && matches!(end, Bound::Excluded(_))
        && crate::cursor::prefix_end(s).as_deref() == Some(e)
    {
        return s;
    }
    let n = s.iter().zip(e).take_while(|(a, b)| a == b).count();
    &s[..n]
}

impl Drop for TieredStore {
    fn drop(&mut self) {
        // Without L3 the Redis keys are this open's alone: remove them (best effort).
        if self.l3.is_none() {
            if let Some(l2) = &mut self.l2 {
                let _ = l2.clear_prefix();
            }
        }
    }
}

impl StateStore for TieredStore {
    fn name(&self) -> &'static str {
        "tiered"
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn is_ordered(&self, _: Ns) -> bool {
        false
    }

    /// Promotes into L1, in one Redis pipeline, the keys of the batch that L1 lacks
    /// and Redis holds (at most [`PREFETCH_MAX`] per call). A hint: it moves entries
    /// between levels, never changes a value, and leaves an error to the operation that
    /// meets it.
    fn prefetch(&mut self, keys: &[(Ns, &[u8])]) {
        if self.core.poisoned.is_some()
            || self.l1.is_none()
            || self.l2.is_none()
            || !self.held.is_empty()
        {
            return;
        }
        let mut want: Vec<Vec<u8>> = Vec::new();
        for &(ns, key) in keys {
            if want.len() >= PREFETCH_MAX || self.set_key(ns, key).is_err() {
                continue;
            }
            let l1 = self.l1.as_ref().expect("checked");
            let l2 = self.l2.as_ref().expect("checked");
            // The cheap test first: most keys of a batch were never written to Redis.
            if l2.would_ask_redis(&self.kbuf)
                && !l1.contains(&self.kbuf[..])
                && !want.contains(&self.kbuf)
            {
                want.push(self.kbuf.clone());
            }
        }
        if want.is_empty() {
            return;
        }
        let refs: Vec<&[u8]> = want.iter().map(Vec::as_slice).collect();
        let Ok(found) = self.l2.as_mut().expect("checked").get_many(&refs) else { return };
        for (k, v) in want.into_iter().zip(found) {
            let value = match v {
                Lookup::Found(v) => Some(v),
                Lookup::Deleted => None,
                Lookup::Absent => continue,
            };
            self.tiers.l2_hits += 1;
            self.tiers.promotions_from_l2 += 1;
            self.tiers.prefetched += 1;
            let w = weight(&k, &value);
            let l1 = self.l1.as_mut().expect("checked");
            let evicted = &mut self.evicted;
            l1.insert(k.into_boxed_slice(), Slot { value, dirty: false }, w, &mut |k, v| {
                evicted.push((k, v))
            });
            if self.drain_evicted().is_err() {
                // The operations will meet the error themselves.
                return;
            }
        }
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.check()?;
        self.core.stats.gets += 1;
        let r = self.get_impl(ns, key, out);
        self.guard(r)
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.check()?;
        self.core.stats.puts += 1;
        let r = self.retry_held().and_then(|()| self.write_impl(ns, key, Some(value)));
        self.guard(r)
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.check()?;
        self.core.stats.merges += 1;
        let op = self
            .opts
            .namespaces
            .get(ns.index())
            .map(|s| s.merge.clone())
            .ok_or_else(|| Error::UnknownNamespace { name: format!("#{}", ns.index()) })?;
        let r = self.retry_held().and_then(|()| {
            self.rmw_impl(ns, key, &mut |old, out| {
                op.apply(old, operand, out);
                Rmw::Put
            })
        });
        self.guard(r)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.check()?;
        self.core.stats.deletes += 1;
        let r = match self.retry_held() {
            Ok(()) => self.write_impl(ns, key, None),
            Err(e) if !e.poisons() => self.delete_through(ns, key),
            Err(e) => Err(e),
        };
        self.guard(r)
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.check()?;
        self.core.stats.rmws += 1;
        let r = self.retry_held().and_then(|()| self.rmw_impl(ns, key, f));
        self.guard(r)
    }

    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        order.unordered(
            "tiered",
            "the tiered store is unordered: it scans in its lowest level's order (Order::Any)",
        )?;
        self.check()?;
        self.core.stats.scans += 1;
        if ns.index() >= self.opts.namespaces.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        let r = self.scan_impl(ns, start, end, limit, visit);
        self.guard(r)
    }

    fn scan_step(
        &mut self,
        ns: Ns,
        from: Option<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        self.check()?;
        if self.l3.is_none() {
            return Err(Error::Unsupported {
                store: "tiered",
                op: "scan_step without L3",
                hint: "a resumable walk needs the durable level: open it with --l3 hashlog",
            });
        }
        let r = self.flush_down(true);
        self.guard(r)?;
        let l3 = self.l3.as_mut().expect("checked");
        let r = l3.scan_step(self.l3_ns[ns.index()], from, limit, visit);
        self.guard(r)
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        self.check()?;
        if self.l3.is_none() {
            return Err(Error::Unsupported {
                store: "tiered",
                op: "checkpoint without a durable level",
                hint: "this tiered store has no L3, so nothing it holds survives the process: \
                       open it with an L3 level (--l3 hashlog) to checkpoint",
            });
        }
        let start = Instant::now();
        let r = self.flush_down(true);
        self.guard(r)?;
        let l3 = self.l3.as_mut().expect("checked");
        let r = l3.checkpoint();
        let info = self.guard(r)?;
        self.core.seq = info.seq;
        Ok(self.core.stats.checkpoint_done(info.seq, start))
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.l3.as_ref().map(StateStore::stats).unwrap_or_default();
        let own = &self.core.stats;
        s.gets = own.gets;
        s.puts = own.puts;
        s.merges = own.merges;
        s.deletes = own.deletes;
        s.rmws = own.rmws;
        s.scans = own.scans;
        s.memory_budget = own.memory_budget;
        s.checkpoints = own.checkpoints;
        s.last_checkpoint_micros = own.last_checkpoint_micros;
        s.bytes_in_memory += self.l1.as_ref().map_or(0, WTinyLfu::weight)
            + self.l2.as_ref().map_or(0, RedisLevel::memory_bytes)
            + self.held.iter().map(|(k, v)| u64::from(weight(k, v))).sum::<u64>();
        // L3 does not hold what the levels above have not flushed yet.
        s.live_keys = None;
        s.checkpoint_seq = self.core.seq;
        s.backend = crate::BackendStats::Tiered(self.tier_stats());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NamespaceSpec, StateStore, StoreOptions};

    /// Members of Redis's dirty set this store did not write (empty, shorter than a
    /// namespace number, naming an undeclared namespace), each with a tagged value: the
    /// checkpoint's flush to L3 is an error naming Redis, not an index past a slice.
    #[test]
    fn hostile_dirty_keys_in_redis_are_an_error_not_a_panic() {
        // The test binary's one server (the rule for tests that need Redis).
        let server = RedisServer::shared().expect("start redis-server");
        let mut con = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
        for (i, member) in [&b""[..], b"\x05", b"\xff\xffk"].into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let opts = StoreOptions::new(dir.path())
                .memory_budget(16 << 20)
                .namespace(NamespaceSpec::list("kv"));
            let prefix = format!("hostile{i}");
            let t = TieredOptions::new(4096).l2(L2Config::Url(server.url())).redis_prefix(&prefix);
            let mut store = TieredStore::open(opts, t).unwrap();
            let ns = store.namespace("kv").unwrap();
            store.put(ns, b"a", b"1").unwrap();
            let base = format!("spw:{prefix}:");
            let data = [format!("{base}d:").as_bytes(), member].concat();
            let _: () = redis::cmd("SET").arg(data).arg(b"v\x01").query(&mut con).unwrap();
            let _: () =
                redis::cmd("SADD").arg(format!("{base}dirty")).arg(member).query(&mut con).unwrap();
            let e = store.checkpoint().unwrap_err();
            assert!(matches!(e, Error::Redis { .. }), "{e}");
        }
    }
}
