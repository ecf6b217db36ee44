//! Multi-pattern window experiments (after CCGrid'17 "Exploring shared
//! state in key-value store for window-based multi-pattern streaming analytics"): several
//! holistic window operators (patterns: different lengths, slides and partitionings)
//! over one stream, with their window contents kept either as **copies** or **shared**.
//! It owns the pattern families, the event stream, the per-event driver and the
//! bookkeeping of live state bytes and firing digests.
//!
//! - **Copies** is what Flink does for N `WindowOperator`s with a `ListState` each
//!   (`WindowOperator.processElement`: `windowState.setCurrentNamespace(window);
//!   windowState.add(element)` per assigned window; on the timer `windowState.get()`,
//!   then `clearAllState` → `windowState.clear()`): one list-append merge of the event's
//!   bytes per (pattern, window), a read and a delete when the window fires.
//! - **Shared** keeps the event once under a content reference with a count
//!   ([`spillway_store::shared`]): one `append_many` per event for all its windows of all
//!   patterns, and a `take` (read and drop one count per reference) when a window fires.
//!
//! Both run over any [`StateStore`] or natively over Redis ([`RedisSharedLists`] and its
//! copies baseline [`RedisLists`], pipelined). Windows are Flink's sliding event-time
//! windows (`SlidingEventTimeWindows.assignWindows`: starts from
//! `TimeWindow.getWindowStartWithOffset(t, 0, slide)` down while `start > t - size`);
//! the stream is in order and the watermark is the latest event time, so a window
//! `[start, end)` fires (and, with no allowed lateness, is cleared) once an event at time
//! `>= end` arrives, and every open window fires at the end of the stream.
//!
//! Each firing's contents are hashed (window key, then each event in order) into a
//! running digest: two runs produced the same window results exactly when their digests
//! and firing counts are equal.
//!
//! An experiment file declares the patterns and the stream (TOML; every key but
//! `pattern` optional, unknown keys refused):
//!
//! ```toml
//! seed = 42            # keys and payloads
//! events = 200000
//! keys = 100           # distinct event keys, uniform
//! value_bytes = 100    # bytes per event (>= 24)
//! rate = 1             # events per time unit
//! shared = true        # run only this mode (absent: copies and shared side by side)
//! [[pattern]]
//! window = 1000        # time units
//! slide = 500          # default: window (tumbling)
//! partition = "key"    # "key", "key % N" or "all"
//! ```
//!
//! `state_bytes` is the peak of the live state's bytes, keys plus values as a
//! [`StateStore`] encodes them (a list element is framed with 4 bytes; a shared event is
//! its 16-byte reference, a 4-byte count and its bytes), sampled before each batch of
//! firings (where it peaks). It is the same formula for every backend, so the modes
//! compare on what they keep, not on one store's overheads.

use spillway_store::StateStoreExt;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use spillway_store::list::FRAME;
use spillway_store::shared::{RedisLists, RedisSharedLists, SharedLists};
use spillway_store::{NamespaceSpec, Ns, StateStore, StoreKind, StoreOptions};
use xxhash_rust::xxh3::Xxh3;

/// How a pattern partitions the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partition {
    /// One window per event key (per card, per user).
    Key,
    /// One window per `key % n` (a coarser grouping: per region, per merchant class).
    Modulo(u64),
}

/// One window operator over the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Window length in time units (>= 1).
    pub window: u64,
    /// Slide in time units (`1 <= slide <= window`; `slide == window` is tumbling).
    pub slide: u64,
    /// Partitioning.
    pub partition: Partition,
}

/// A family of `n` patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Overlapping sliding windows: pattern `i` has length `base * (i + 1)` and slide half
    /// of it (each event is in two windows of each pattern); even patterns partition by
    /// key, odd ones by `key % 64`.
    Sliding,
    /// Disjoint (tumbling) windows of length `base * (i + 1)`, partitioned as above: each
    /// event is in one window per pattern, where sharing pays least.
    Tumbling,
}

impl Family {
    /// Parses `sliding` or `tumbling`.
    pub fn parse(s: &str) -> Option<Family> {
        match s {
            "sliding" => Some(Family::Sliding),
            "tumbling" => Some(Family::Tumbling),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Sliding => "sliding",
            Family::Tumbling => "tumbling",
        }
    }

    /// The first `n` patterns of the family with base length `base`.
    pub fn patterns(self, n: usize, base: u64) -> Vec<Pattern> {
        (0..n as u64)
            .map(|i| {
                let window = base * (i + 1);
                let slide = match self {
                    Family::Sliding => window.div_ceil(2),
                    Family::Tumbling => window,
                };
                let partition = if i % 2 == 0 { Partition::Key } else { Partition::Modulo(64) };
                Pattern { window, slide, partition }
            })
            .collect()
    }
}

/// Where the window lists live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A [`StateStore`] (lists and events in two namespaces).
    Store(StoreKind),
    /// Natively in Redis, pipelined ([`RedisSharedLists`], [`RedisLists`]).
    Redis,
}

impl Backend {
    /// `redis` or a store name.
    pub fn parse(s: &str) -> Result<Backend, String> {
        match s {
            "redis" => Ok(Backend::Redis),
            _ => s.parse::<StoreKind>().map(Backend::Store).map_err(|e| format!("{e}, or redis")),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Store(k) => k.name(),
            Backend::Redis => "redis",
        }
    }
}

/// Copies or shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One copy of each event per window (Flink's per-operator `ListState`).
    Copies,
    /// Each event once, windows hold references.
    Shared,
}

impl Mode {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Copies => "copies",
            Mode::Shared => "shared",
        }
    }
}

/// The stream and the patterns of one experiment.
#[derive(Clone, Debug)]
pub struct MultiConfig {
    /// The window operators.
    pub patterns: Vec<Pattern>,
    /// Events in the stream.
    pub events: u64,
    /// Distinct event keys (uniform).
    pub keys: u64,
    /// Bytes of each event (>= 24: id, key and time lead).
    pub value_bytes: usize,
    /// Events per time unit (the event time of event `i` is `i / rate`).
    pub rate: u64,
    /// Seeds the keys and the payload bytes.
    pub seed: u64,
}

/// A multi-pattern experiment file (see the module docs).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiExperiment {
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_events")]
    events: u64,
    #[serde(default = "default_keys")]
    keys: u64,
    #[serde(default = "default_value_bytes")]
    value_bytes: usize,
    #[serde(default = "default_rate")]
    rate: u64,
    /// Only this mode (`true`: shared, `false`: copies); absent: both.
    pub shared: Option<bool>,
    pattern: Vec<PatternSpec>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternSpec {
    window: u64,
    slide: Option<u64>,
    #[serde(default = "default_partition")]
    partition: String,
}

fn default_seed() -> u64 {
    42
}
fn default_events() -> u64 {
    200_000
}
fn default_keys() -> u64 {
    100
}
fn default_value_bytes() -> usize {
    100
}
fn default_rate() -> u64 {
    1
}
fn default_partition() -> String {
    "key".into()
}

impl MultiExperiment {
    /// Reads and checks an experiment file; errors name the file (and, for TOML errors,
    /// the line and column).
    pub fn from_file(path: &Path) -> Result<MultiExperiment> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let exp: MultiExperiment = toml::from_str(&text)
            .with_context(|| format!("{}: not a multi-pattern experiment", path.display()))?;
        exp.config().with_context(|| path.display().to_string())?;
        Ok(exp)
    }

    /// The stream and patterns it declares.
    pub fn config(&self) -> Result<MultiConfig> {
        if self.pattern.is_empty() {
            bail!("no [[pattern]] table: declare at least one window pattern");
        }
        let patterns = self
            .pattern
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let partition = parse_partition(&p.partition)
                    .with_context(|| format!("pattern {i}: partition {:?}", p.partition))?;
                Ok(Pattern { window: p.window, slide: p.slide.unwrap_or(p.window), partition })
            })
            .collect::<Result<Vec<_>>>()?;
        let cfg = MultiConfig {
            patterns,
            events: self.events,
            keys: self.keys,
            value_bytes: self.value_bytes,
            rate: self.rate,
            seed: self.seed,
        };
        cfg.check()?;
        Ok(cfg)
    }
}

/// `key`, `all` or `key % N` (N >= 1).
fn parse_partition(s: &str) -> Result<Partition> {
    let s = s.trim();
    if s == "key" {
        return Ok(Partition::Key);
    }
    if s == "all" {
        return Ok(Partition::Modulo(1));
    }
    if let Some(n) = s.strip_prefix("key").map(str::trim).and_then(|r| r.strip_prefix('%')) {
        let n: u64 = n.trim().parse().context("expected `key % N` with N a positive integer")?;
        if n >= 1 {
            return Ok(Partition::Modulo(n));
        }
    }
    bail!("expected \"key\", \"all\" or \"key % N\" (N >= 1)")
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiOutcome {
    /// Stream events processed per second (the same stream in both modes).
    pub events_per_sec: f64,
    /// 99th percentile of one event's processing (its appends and the firings its time
    /// triggers), microseconds.
    pub p99_us: f64,
    /// Peak live bytes of state (see the module docs).
    pub state_bytes: u64,
    /// Window firings.
    pub firings: u64,
    /// Events delivered by all firings.
    pub delivered: u64,
    /// Digest of every firing's window and contents, in firing order.
    pub digest: u128,
    /// Store operations (StateStore) or round trips (Redis).
    pub state_ops: u64,
}

impl MultiConfig {
    /// Refuses what the driver cannot run, naming the field.
    pub fn check(&self) -> Result<()> {
        if self.value_bytes < 24 {
            bail!(
                "value_bytes: events need at least 24 bytes (id, key and time), got {}",
                self.value_bytes
            );
        }
        if self.events == 0 || self.keys == 0 || self.rate == 0 {
            bail!("events, keys and rate must be at least 1");
        }
        if self.patterns.is_empty() || self.patterns.len() > 256 {
            bail!("between 1 and 256 patterns, got {}", self.patterns.len());
        }
        for (i, p) in self.patterns.iter().enumerate() {
            if p.window == 0 || p.slide == 0 || p.slide > p.window {
                bail!(
                    "pattern {i}: need 1 <= slide <= window, got window {} slide {}",
                    p.window,
                    p.slide
                );
            }
        }
        Ok(())
    }
}

/// The bytes of event `i`: its id, key and time, then seeded filler (every event's bytes
/// differ, as real events with ids do).
fn payload(out: &mut Vec<u8>, cfg: &MultiConfig, i: u64, key: u64, t: u64) {
    out.clear();
    out.extend_from_slice(&i.to_le_bytes());
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&t.to_le_bytes());
    let mut x = cfg.seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while out.len() < cfg.value_bytes {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.push((x >> 56) as u8);
    }
}

/// Window key: pattern, group, start (17 bytes, big-endian so keys of a pattern sort by
/// group and start).
const WKEY: usize = 17;

fn window_key(p: usize, group: u64, start: i64) -> [u8; WKEY] {
    let mut k = [0u8; WKEY];
    k[0] = p as u8;
    k[1..9].copy_from_slice(&group.to_be_bytes());
    k[9..].copy_from_slice(&((start as u64) ^ (1 << 63)).to_be_bytes());
    k
}

/// The per-backend, per-mode state of a run.
enum Lists<'a> {
    Copies { store: &'a mut dyn StateStore, ns: Ns },
    Shared { store: &'a mut dyn StateStore, sh: SharedLists },
    RedisCopies(RedisLists),
    RedisShared(RedisSharedLists),
}

impl Lists<'_> {
    /// Appends `event` to `windows`; returns whether the event's bytes are new state
    /// (shared over a store; Redis reports new events at flush).
    fn append(&mut self, windows: &[&[u8]], event: &[u8]) -> Result<bool> {
        Ok(match self {
            Lists::Copies { store, ns } => {
                for w in windows {
                    store.merge(*ns, w, event)?;
                }
                false
            }
            Lists::Shared { store, sh } => sh.append_many(*store, windows, event)?.stored,
            Lists::RedisCopies(r) => {
                r.append_many(windows, event)?;
                false
            }
            Lists::RedisShared(r) => {
                r.append_many(windows, event)?;
                false
            }
        })
    }

    /// Fires and clears `windows`; returns the events freed (shared modes).
    fn take(&mut self, windows: &[&[u8]], visit: &mut dyn FnMut(usize, &[u8])) -> Result<u64> {
        Ok(match self {
            Lists::Copies { store, ns } => {
                for (i, w) in windows.iter().enumerate() {
                    if let Some(v) = store.get(*ns, w)? {
                        for e in spillway_store::list::iter(&v) {
                            visit(i, e.map_err(|b| anyhow::anyhow!("a damaged list: {b}"))?);
                        }
                    }
                    store.delete(*ns, w)?;
                }
                0
            }
            Lists::Shared { store, sh } => {
                let mut freed = 0;
                for (i, w) in windows.iter().enumerate() {
                    freed += sh.take(*store, w, &mut |e| visit(i, e))? as u64;
                }
                freed
            }
            Lists::RedisCopies(r) => {
                r.take_many(windows, visit)?;
                0
            }
            Lists::RedisShared(r) => r.take_many(windows, visit)? as u64,
        })
    }

    /// Events stored new so far, for Redis (which learns it at flush).
    fn redis_new_events(&mut self) -> Result<Option<u64>> {
        Ok(match self {
            Lists::RedisShared(r) => {
                r.flush()?;
                Some(r.new_events())
            }
            _ => None,
        })
    }

    fn ops(&self) -> u64 {
        match self {
            Lists::Copies { store, .. } | Lists::Shared { store, .. } => {
                let s = store.stats();
                s.gets + s.puts + s.merges + s.deletes + s.rmws
            }
            Lists::RedisCopies(r) => r.round_trips(),
            Lists::RedisShared(r) => r.round_trips(),
        }
    }
}

/// Opens what `backend` needs under `dir` (a store) or at `redis_url`, and runs.
pub fn run(
    cfg: &MultiConfig,
    mode: Mode,
    backend: Backend,
    dir: &Path,
    memory_budget: u64,
    redis_url: Option<&str>,
) -> Result<MultiOutcome> {
    cfg.check()?;
    match backend {
        Backend::Store(kind) => {
            let opts = StoreOptions::new(dir)
                .memory_budget(memory_budget)
                .namespace(NamespaceSpec::list("events"))
                .namespace(NamespaceSpec::list("windows"));
            let mut store = kind
                .open(opts)
                .with_context(|| format!("opening {} in {}", kind.name(), dir.display()))?;
            let lists = match mode {
                Mode::Copies => {
                    Lists::Copies { ns: store.namespace("windows")?, store: &mut *store }
                }
                Mode::Shared => {
                    let sh =
                        SharedLists::new(store.namespace("events")?, store.namespace("windows")?);
                    Lists::Shared { store: &mut *store, sh }
                }
            };
            drive(cfg, mode, lists)
        }
        Backend::Redis => {
            let url = redis_url.context("the redis backend needs a server address")?;
            let lists = match mode {
                Mode::Copies => Lists::RedisCopies(RedisLists::connect(url, "bench")?),
                Mode::Shared => Lists::RedisShared(RedisSharedLists::connect(url, "bench")?),
            };
            drive(cfg, mode, lists)
        }
    }
}

/// Live bytes of one list element.
fn element_bytes(mode: Mode, value_bytes: usize) -> u64 {
    (FRAME + if mode == Mode::Shared { 16 } else { value_bytes }) as u64
}

/// Bytes of one stored shared event: reference, count, bytes.
fn shared_event_bytes(value_bytes: usize) -> u64 {
    (16 + 4 + value_bytes) as u64
}

fn drive(cfg: &MultiConfig, mode: Mode, mut lists: Lists<'_>) -> Result<MultiOutcome> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    // Open windows by end time, in the order they opened. The stream is in order, so a
    // (pattern, group) opens its windows in start order: a window is new exactly when its
    // start is past the latest one opened there (one lookup per pattern and event).
    let mut timers: BTreeMap<i64, Vec<[u8; WKEY]>> = BTreeMap::new();
    let mut latest: hashbrown::HashMap<(usize, u64), i64> = hashbrown::HashMap::new();
    let elem = element_bytes(mode, cfg.value_bytes);
    // Live bytes of lists (keys and elements) and of stored shared events (over a store;
    // Redis reports its new events at flush).
    let (mut list_bytes, mut stored_new, mut freed) = (0u64, 0u64, 0u64);
    let mut peak = 0u64;
    let (mut firings, mut delivered) = (0u64, 0u64);
    let mut digest = Xxh3::new();
    let mut event = Vec::with_capacity(cfg.value_bytes);
    let mut wkeys: Vec<[u8; WKEY]> = Vec::new();
    let rate = cfg.rate.max(1);
    let mut fire = |lists: &mut Lists<'_>,
                    timers: &mut BTreeMap<i64, Vec<[u8; WKEY]>>,
                    upto: i64,
                    list_bytes: &mut u64,
                    stored_new: u64,
                    freed: &mut u64,
                    peak: &mut u64|
     -> Result<()> {
        let due: Vec<i64> = timers.range(..=upto).map(|(&e, _)| e).collect();
        if due.is_empty() {
            return Ok(());
        }
        let stored = lists.redis_new_events()?.unwrap_or(stored_new);
        let live = *list_bytes + (stored - *freed) * shared_event_bytes(cfg.value_bytes);
        *peak = (*peak).max(live);
        for end in due {
            let ws = timers.remove(&end).expect("due");
            let keys: Vec<&[u8]> = ws.iter().map(|w| &w[..]).collect();
            let mut hashers: Vec<Xxh3> = ws
                .iter()
                .map(|w| {
                    let mut h = Xxh3::new();
                    h.update(w);
                    h
                })
                .collect();
            let mut counts = vec![0u64; ws.len()];
            *freed += lists.take(&keys, &mut |i, e| {
                hashers[i].update(&(e.len() as u32).to_le_bytes());
                hashers[i].update(e);
                counts[i] += 1;
            })?;
            for i in 0..ws.len() {
                digest.update(&hashers[i].digest128().to_le_bytes());
                firings += 1;
                delivered += counts[i];
                *list_bytes -= WKEY as u64 + counts[i] * elem;
            }
        }
        Ok(())
    };
    let started = Instant::now();
    for i in 0..cfg.events {
        let t0 = Instant::now();
        let t = (i / rate) as i64;
        let key = rng.random_range(0..cfg.keys.max(1));
        payload(&mut event, cfg, i, key, t as u64);
        wkeys.clear();
        for (p, pat) in cfg.patterns.iter().enumerate() {
            let group = match pat.partition {
                Partition::Key => key,
                Partition::Modulo(n) => key % n,
            };
            let (size, slide) = (pat.window as i64, pat.slide as i64);
            // SlidingEventTimeWindows.assignWindows (offset 0): starts may be negative.
            let mut start = t - t.rem_euclid(slide);
            let last = latest.entry((p, group)).or_insert(i64::MIN);
            let opened = *last;
            *last = (*last).max(start);
            while start > t - size {
                let w = window_key(p, group, start);
                if start > opened {
                    timers.entry(start + size).or_default().push(w);
                    list_bytes += WKEY as u64;
                }
                wkeys.push(w);
                start -= slide;
            }
        }
        let keys: Vec<&[u8]> = wkeys.iter().map(|w| &w[..]).collect();
        if lists.append(&keys, &event)? {
            stored_new += 1;
        }
        list_bytes += keys.len() as u64 * elem;
        // The watermark is now t: windows ending at or before t are complete.
        fire(&mut lists, &mut timers, t, &mut list_bytes, stored_new, &mut freed, &mut peak)?;
        hist.record(t0.elapsed().as_nanos().max(1) as u64)?;
    }
    // End of input: every open window fires.
    let t0 = Instant::now();
    fire(&mut lists, &mut timers, i64::MAX, &mut list_bytes, stored_new, &mut freed, &mut peak)?;
    hist.record(t0.elapsed().as_nanos().max(1) as u64)?;
    let secs = started.elapsed().as_secs_f64();
    let stored = lists.redis_new_events()?.unwrap_or(stored_new);
    if mode == Mode::Shared && stored != freed {
        bail!(
            "shared state leaked: {stored} events stored, {freed} freed after every window fired"
        );
    }
    if list_bytes != 0 {
        bail!("{list_bytes} bytes of window lists still live after every window fired");
    }
    Ok(MultiOutcome {
        events_per_sec: cfg.events as f64 / secs.max(1e-9),
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
        state_bytes: peak,
        firings,
        delivered,
        digest: digest.digest128(),
        state_ops: lists.ops(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// The window results by definition, not by the driver's assignment loop: every
    /// (pattern, group, start) window holding at least one event, its contents all events
    /// of its group with `start <= t < start + size` in stream order; fired by end time,
    /// ties in the order the windows first received an event (then pattern, then latest
    /// start first, as one event opens them).
    fn oracle(cfg: &MultiConfig) -> (u128, u64, u64) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
        let events: Vec<(i64, u64, Vec<u8>)> = (0..cfg.events)
            .map(|i| {
                let t = (i / cfg.rate) as i64;
                let key = rng.random_range(0..cfg.keys);
                let mut e = Vec::new();
                payload(&mut e, cfg, i, key, t as u64);
                (t, key, e)
            })
            .collect();
        let group = |p: &Pattern, key: u64| match p.partition {
            Partition::Key => key,
            Partition::Modulo(n) => key % n,
        };
        // Every window containing some event, with its sort key.
        // (firing order: end, first event, pattern, -start), pattern, group, start.
        type Window = ((i64, usize, usize, i64), usize, u64, i64);
        let mut windows: Vec<Window> = Vec::new();
        for (p, pat) in cfg.patterns.iter().enumerate() {
            let (size, slide) = (pat.window as i64, pat.slide as i64);
            let mut seen = HashSet::new();
            for (i, (t, key, _)) in events.iter().enumerate() {
                let g = group(pat, *key);
                // Candidate starts: multiples of slide in (t - size, t].
                let mut s = t.div_euclid(slide) * slide;
                while s > t - size {
                    if seen.insert((g, s)) {
                        windows.push(((s + size, i, p, -s), p, g, s));
                    }
                    s -= slide;
                }
            }
        }
        windows.sort_by_key(|w| w.0);
        let mut digest = Xxh3::new();
        let (mut firings, mut delivered) = (0, 0);
        for (_, p, g, s) in windows {
            let pat = &cfg.patterns[p];
            let mut h = Xxh3::new();
            h.update(&window_key(p, g, s));
            for (t, key, e) in &events {
                if group(pat, *key) == g && s <= *t && *t < s + pat.window as i64 {
                    h.update(&(e.len() as u32).to_le_bytes());
                    h.update(e);
                    delivered += 1;
                }
            }
            digest.update(&h.digest128().to_le_bytes());
            firings += 1;
        }
        (digest.digest128(), firings, delivered)
    }

    fn config(family: Family) -> MultiConfig {
        MultiConfig {
            patterns: family.patterns(4, 6),
            events: 400,
            keys: 7,
            value_bytes: 40,
            rate: 3,
            seed: 9,
        }
    }

    /// Copies and shared, over mem and hashlog, fire exactly the oracle's windows with
    /// exactly its contents, and free all state by the end.
    #[test]
    fn every_mode_and_store_matches_the_oracle() {
        for family in [Family::Sliding, Family::Tumbling] {
            let cfg = config(family);
            let (digest, firings, delivered) = oracle(&cfg);
            for kind in [StoreKind::Mem, StoreKind::HashLog] {
                for mode in [Mode::Copies, Mode::Shared] {
                    let dir = tempfile::tempdir().unwrap();
                    let o =
                        run(&cfg, mode, Backend::Store(kind), dir.path(), 64 << 20, None).unwrap();
                    let what = format!("{} {} {}", family.name(), kind.name(), mode.name());
                    assert_eq!((o.firings, o.delivered), (firings, delivered), "{what}");
                    assert_eq!(o.digest, digest, "{what}");
                }
            }
        }
    }

    /// Shared state is smaller once events sit in several windows, and the live-byte
    /// count follows the formula for one event in one window (a new list key, a framed
    /// element, and for shared the stored event).
    #[test]
    fn state_bytes_follow_the_encoding() {
        let cfg = MultiConfig {
            patterns: vec![Pattern { window: 10, slide: 10, partition: Partition::Key }],
            events: 1,
            keys: 1,
            value_bytes: 100,
            rate: 1,
            seed: 1,
        };
        let dir = tempfile::tempdir().unwrap();
        let mem = Backend::Store(StoreKind::Mem);
        let c = run(&cfg, Mode::Copies, mem, dir.path(), 1 << 20, None).unwrap();
        assert_eq!(c.state_bytes, (WKEY + FRAME + 100) as u64);
        let dir = tempfile::tempdir().unwrap();
        let s = run(&cfg, Mode::Shared, mem, dir.path(), 1 << 20, None).unwrap();
        assert_eq!(s.state_bytes, (WKEY + FRAME + 16 + 16 + 4 + 100) as u64);
        let mut many = config(Family::Sliding);
        many.value_bytes = 100;
        let dir = tempfile::tempdir().unwrap();
        let c = run(&many, Mode::Copies, mem, dir.path(), 64 << 20, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let s = run(&many, Mode::Shared, mem, dir.path(), 64 << 20, None).unwrap();
        assert!(s.state_bytes < c.state_bytes, "{} vs {}", s.state_bytes, c.state_bytes);
    }

    #[test]
    fn experiment_files_declare_patterns() {
        let exp: MultiExperiment = toml::from_str(
            "events = 50\nshared = false\n[[pattern]]\nwindow = 10\nslide = 5\n\
             [[pattern]]\nwindow = 20\npartition = \"key % 4\"\n[[pattern]]\nwindow = 7\npartition = \"all\"",
        )
        .unwrap();
        let cfg = exp.config().unwrap();
        assert_eq!(exp.shared, Some(false));
        assert_eq!(cfg.events, 50);
        assert_eq!(
            cfg.patterns,
            vec![
                Pattern { window: 10, slide: 5, partition: Partition::Key },
                Pattern { window: 20, slide: 20, partition: Partition::Modulo(4) },
                Pattern { window: 7, slide: 7, partition: Partition::Modulo(1) },
            ]
        );
        for (text, want) in [
            ("[[pattern]]\nwindow = 10\npartition = \"card\"", "pattern 0: partition"),
            ("[[pattern]]\nwindow = 10\nslide = 11", "pattern 0: need 1 <= slide <= window"),
            ("events = 5", "missing field `pattern`"),
            ("pattern = []", "no [[pattern]] table"),
            ("[[pattern]]\nwindow = 1\nsize = 2", "unknown field `size`"),
        ] {
            let e = toml::from_str::<MultiExperiment>(text)
                .map_err(anyhow::Error::from)
                .and_then(|x| x.config())
                .unwrap_err();
            assert!(format!("{e:#}").contains(want), "{text}: {e:#}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        let mut cfg = config(Family::Sliding);
        cfg.patterns[1].slide = cfg.patterns[1].window + 1;
        let dir = tempfile::tempdir().unwrap();
        let e = run(&cfg, Mode::Shared, Backend::Store(StoreKind::Mem), dir.path(), 1 << 20, None)
            .unwrap_err();
        assert!(e.to_string().contains("pattern 1"), "{e}");
    }
}
