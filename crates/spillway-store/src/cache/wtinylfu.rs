//! The adaptive W-TinyLFU cache: a single-threaded port of the eviction policy of
//! Caffeine's `BoundedLocalCache`. See the [parent module](super) for the policy.
//!
//! # Layout
//! Entries live in a slab of slots: slot `i` is a `Link` (list links, weight, region;
//! 16 bytes) in one `Vec` and an `Entry` (cached hash, key, value) in another, so list
//! surgery touches a compact array. Slots are linked by `u32` indices into three
//! intrusive doubly linked lists (Caffeine's `accessOrderWindowDeque`,
//! `accessOrderProbationDeque` and `accessOrderProtectedDeque`), each ordered from its
//! least recently used entry (the head, Caffeine's `peekFirst`) to its most recently
//! used (the tail). A `hashbrown::HashTable<u32>` maps a key to its slot: it stores only
//! the slot index, hashes by the hash cached in the slot and compares keys in the slot,
//! so keys are not duplicated. Freed slots go on a free list and are reused. A hit costs
//! one hash, one probe and a slot in the read buffer; applying it costs one sketch block
//! (and a doorkeeper block) and a relink: no allocation.
//!
//! # Where this differs from Caffeine, and why
//! - **A lossless read buffer, no locks.** Caffeine records reads and writes in buffers
//!   and replays them in a maintenance cycle under its eviction lock, dropping reads
//!   when its buffer is full. This cache has one owner (`&mut self`): writes apply
//!   their policy effect at once and end with the maintenance steps that apply to them
//!   (`evictEntries`, `climb`). Hits are recorded in a 16-slot read buffer and applied
//!   in order (each followed by `climb`) when it fills, or before any miss, write,
//!   removal or inspection, so the policy goes through exactly the steps it would
//!   have taken hit by hit (the shared traces give identical hit counts both ways).
//!   What the buffer buys is speed: a batch's sketch blocks and list neighbours are
//!   prefetched together, so their cache misses overlap (a zipf hit at 1M entries went
//!   from 163-190 ns to 122-129 ns, A/B in one session).
//! - **Misses are counted by the read.** Caffeine counts a sample miss when a new entry
//!   is added (`AddTask`), because its loading `get` adds what it missed. Here reads and
//!   writes are separate calls, so [`WTinyLfu::get`] counts the miss, and an insert does
//!   not; a read-through user (miss, then insert) feeds the climber exactly as Caffeine.
//! - **Replacing a value is not an access.** Caffeine's `put` on a present key goes
//!   through `afterRead`/`UpdateTask` and so `onAccess` (a sketch increment, a reorder,
//!   a sample hit). The tiered store reads an entry with `get` and then writes it back;
//!   counting the write too would count every read-modify-write twice. So
//!   [`WTinyLfu::insert`] on a present key and [`WTinyLfu::set_weight`] keep the node
//!   where it is, except for `UpdateTask`'s rules for an entry grown too heavy for its
//!   region: heavier than the window's maximum while in the window moves it to the
//!   window's LRU end, heavier than the whole cache while in the main space moves it to
//!   the window's LRU end (so the next eviction takes it).
//! - **Sketch sizing.** Caffeine creates the sketch when the cache is half full, sized
//!   by the maximum, or by the number of entries when a weigher is configured
//!   (`isWeighted()`); the first half's history is lost. Here the sketch starts with
//!   the first entry and grows with the entries, keeping its counts, to the same final
//!   size (see `size_sketch`). There is no weigher: the cache counts as weighted once
//!   an entry had a weight other than 1. The climber still starts sampling at half
//!   capacity, as in Caffeine.
//! - **The climber's first step grows the window, and a step into a bound reflects.**
//!   Caffeine's first step shrinks the window (from 1% it can only reach 1 entry) and
//!   a step towards a window of 1 or a protected region of 0 is a no-op that the
//!   climber repeats as long as the hit rate rises for other reasons. Both cost whole
//!   sample periods of `10 x capacity` requests; see `set_maximum_size` and
//!   `determine_adjustment` for the measured effect. The step sizes, decay, restart
//!   threshold and transfers are Caffeine's.
//! - **Hash-flooding coin.** `admit`'s 1/128 random admission draws from a splitmix64
//!   generator seeded by [`CacheConfig::seed`] instead of `ThreadLocalRandom`, so runs
//!   are reproducible.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use super::hash::SeededState;
use super::sketch::FrequencySketch;

/// The initial percent of the maximum weighted capacity dedicated to the main space
/// (Caffeine's `PERCENT_MAIN`); the default window is `1 - PERCENT_MAIN`.
pub const PERCENT_MAIN: f64 = 0.99;
/// The percent of the main space dedicated to its protected region (Caffeine's
/// `PERCENT_MAIN_PROTECTED`).
pub const PERCENT_MAIN_PROTECTED: f64 = 0.80;
/// The change in sampled hit rate that restarts the climber with a full step
/// (Caffeine's `HILL_CLIMBER_RESTART_THRESHOLD`).
pub const HILL_CLIMBER_RESTART_THRESHOLD: f64 = 0.05;
/// The step, as a share of the capacity, the climber starts or restarts with (Caffeine's
/// `HILL_CLIMBER_STEP_PERCENT`).
pub const HILL_CLIMBER_STEP_PERCENT: f64 = 0.0625;
/// The factor the step decays by after each sample without a restart (Caffeine's
/// `HILL_CLIMBER_STEP_DECAY_RATE`).
pub const HILL_CLIMBER_STEP_DECAY_RATE: f64 = 0.98;
/// A candidate at least this frequent that loses to its victim still gets a 1/128
/// chance of admission, against hash flooding (Caffeine's `ADMIT_HASHDOS_THRESHOLD`).
pub const ADMIT_HASHDOS_THRESHOLD: u8 = 6;
/// The most entries moved between regions in one step of the climber or of the
/// protected region's demotion (Caffeine's `QUEUE_TRANSFER_THRESHOLD`).
pub const QUEUE_TRANSFER_THRESHOLD: usize = 1_000;
/// The largest capacity: leaves room for one more entry of the heaviest weight before
/// eviction (Caffeine's `MAXIMUM_CAPACITY` is `Long.MAX_VALUE - Integer.MAX_VALUE`).
pub const MAXIMUM_CAPACITY: u64 = u64::MAX - u32::MAX as u64;

/// No slot.
const NIL: u32 = u32::MAX;

/// Configuration of a [`WTinyLfu`] cache.
#[derive(Clone, Debug)]
#[must_use]
pub struct CacheConfig {
    /// Maximum total weight of the entries (a count of entries if every weight is 1);
    /// at least 1.
    pub capacity: u64,
    /// Whether the hill climber adapts the window size to the workload. Default: true.
    pub adaptive: bool,
    /// The window's share of the capacity at the start. Default: 0.01 (Caffeine's
    /// `1 - PERCENT_MAIN`).
    pub initial_window: f64,
    /// Seeds the key hash (and so the sketch) and the hash-flooding coin, so runs are
    /// deterministic. Default: 0.
    pub seed: u64,
    /// Whether a doorkeeper (a small Bloom filter) sits in front of the frequency
    /// sketch, as in the TinyLFU paper (see [`FrequencySketch`]). Default: true.
    pub doorkeeper: bool,
    /// Caffeine's exact path instead of this module's three measured departures: the
    /// sketch starts when the cache is half full, the climber's first step shrinks the
    /// window, and a step into a bound is not reflected (set with the doorkeeper off by
    /// [`CacheConfig::caffeine`]). For comparing with Caffeine's own outputs. Default:
    /// false.
    pub caffeine_exact: bool,
}

impl CacheConfig {
    /// A configuration with capacity `capacity` and the defaults: adaptive, a 1%
    /// window at the start, seed 0, doorkeeper on.
    pub fn new(capacity: u64) -> Self {
        CacheConfig {
            capacity,
            adaptive: true,
            initial_window: 1.0 - PERCENT_MAIN,
            seed: 0,
            doorkeeper: true,
            caffeine_exact: false,
        }
    }

    /// Caffeine's `BoundedLocalCache` as it is: no doorkeeper (Caffeine has none) and
    /// none of this module's departures (see [`caffeine_exact`](Self::caffeine_exact)).
    pub fn caffeine(capacity: u64) -> Self {
        CacheConfig { doorkeeper: false, caffeine_exact: true, ..CacheConfig::new(capacity) }
    }

    /// Whether the hill climber adapts the window size (default true). Off, the window
    /// keeps its initial share.
    pub fn adaptive(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }

    /// The window's share of the capacity at the start, in `0.0..=1.0` (default 0.01).
    pub fn initial_window(mut self, f: f64) -> Self {
        self.initial_window = f;
        self
    }

    /// Seeds the key hash, the sketch and the hash-flooding coin (default 0).
    pub fn seed(mut self, s: u64) -> Self {
        self.seed = s;
        self
    }

    /// Puts a doorkeeper in front of the frequency sketch (default true).
    pub fn doorkeeper(mut self, on: bool) -> Self {
        self.doorkeeper = on;
        self
    }
}

/// Counters and the current shape of a [`WTinyLfu`] cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads ([`WTinyLfu::get`], [`WTinyLfu::get_mut`]) that found their key.
    pub hits: u64,
    /// Reads that did not.
    pub misses: u64,
    /// Entries evicted by the policy (passed to the eviction listener).
    pub evictions: u64,
    /// Total weight of the evicted entries.
    pub evicted_weight: u64,
    /// The window's current maximum weight.
    pub window_capacity: u64,
    /// The protected region's current maximum weight.
    pub protected_capacity: u64,
    /// Hill-climber steps that changed the window's size.
    pub adjustments: u64,
}

/// Which list a slot is linked into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Window = 0,
    Probation = 1,
    Protected = 2,
    /// Not linked: a free slot.
    Free = 3,
}

/// A slot's policy state: its links, weight and region (16 bytes, so list surgery
/// touches a compact array apart from the keys and values).
#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
    weight: u32,
    queue: Queue,
}

/// A slot's cached key hash and its key and value.
struct Entry<K, V> {
    hash: u64,
    /// `None` only in a free slot.
    kv: Option<(K, V)>,
}

/// Ends of an intrusive list: `head` is the LRU end (Caffeine's first), `tail` the MRU
/// end (Caffeine's last).
#[derive(Clone, Copy, Debug)]
struct Deque {
    head: u32,
    tail: u32,
}

const EMPTY: Deque = Deque { head: NIL, tail: NIL };

/// An adaptive W-TinyLFU cache of weighted entries, single-threaded, with an eviction
/// listener passed to every call that may evict. See the [module docs](super).
pub struct WTinyLfu<K, V> {
    table: HashTable<u32>,
    /// Slot `i`'s policy state is `links[i]`, its entry `entries[i]`.
    links: Vec<Link>,
    entries: Vec<Entry<K, V>>,
    free: Vec<u32>,
    /// The window, probation and protected lists, indexed by `Queue as usize`.
    lists: [Deque; 3],
    hasher: SeededState,
    sketch: FrequencySketch,
    /// Some entry had a weight other than 1: the sketch is sized by the entry count.
    weighted: bool,
    /// The largest size asked of the sketch so far.
    sketch_target: u64,
    /// The cache reached half its capacity once: the sketch has its Caffeine size and
    /// the climber samples (Caffeine's `frequencySketch().isNotInitialized()` is false).
    sketch_full: bool,

    maximum: u64,
    window_maximum: u64,
    main_protected_maximum: u64,
    weighted_size: u64,
    window_weighted_size: u64,
    main_protected_weighted_size: u64,

    adaptive: bool,
    /// [`CacheConfig::caffeine_exact`].
    caffeine_exact: bool,
    hits_in_sample: u64,
    misses_in_sample: u64,
    step_size: f64,
    previous_sample_hit_rate: f64,
    /// Window growth (positive) or shrinkage (negative) still to apply.
    adjustment: i64,
    rng: u64,

    /// Caffeine's read buffer: hits recorded here (slot, hash) and applied to the
    /// policy in order by [`drain_reads`](Self::drain_reads), before any write, miss,
    /// removal or inspection, so the policy sees exactly the same sequence of events
    /// (unlike Caffeine's, it never drops a read).
    read_buf: [(u32, u64); READ_BUFFER],
    read_len: usize,

    stats: CacheStats,
}

/// Hits buffered before the policy applies them. Applying a batch lets the cache misses
/// of its sketch blocks and list neighbours overlap (prefetched first) instead of
/// following one another on every hit.
const READ_BUFFER: usize = 16;

impl<K: Hash + Eq, V> WTinyLfu<K, V> {
    /// An empty cache.
    ///
    /// # Panics
    /// If `cfg.capacity` is 0 or `cfg.initial_window` is not within `0.0..=1.0`.
    pub fn new(cfg: CacheConfig) -> Self {
        assert!(cfg.capacity >= 1, "WTinyLfu: the capacity must be at least 1");
        assert!(
            (0.0..=1.0).contains(&cfg.initial_window),
            "WTinyLfu: initial_window must be within 0.0..=1.0, got {}",
            cfg.initial_window
        );
        let mut c = WTinyLfu {
            table: HashTable::new(),
            links: Vec::new(),
            entries: Vec::new(),
            free: Vec::new(),
            lists: [EMPTY; 3],
            hasher: SeededState::new(cfg.seed),
            sketch: FrequencySketch::new(cfg.doorkeeper),
            weighted: false,
            sketch_target: 0,
            sketch_full: false,
            maximum: 0,
            window_maximum: 0,
            main_protected_maximum: 0,
            weighted_size: 0,
            window_weighted_size: 0,
            main_protected_weighted_size: 0,
            adaptive: cfg.adaptive,
            caffeine_exact: cfg.caffeine_exact,
            hits_in_sample: 0,
            misses_in_sample: 0,
            step_size: 0.0,
            previous_sample_hit_rate: 0.0,
            adjustment: 0,
            rng: cfg.seed ^ 0x6a09_e667_f3bc_c909,
            read_buf: [(0, 0); READ_BUFFER],
            read_len: 0,
            stats: CacheStats::default(),
        };
        c.set_maximum_size(cfg.capacity, cfg.initial_window);
        c
    }

    /// Caffeine's `setMaximumSize`: splits the capacity into window, probation and
    /// protected and restarts the climber with a step that first shrinks the window.
    fn set_maximum_size(&mut self, maximum: u64, initial_window: f64) {
        let max = maximum.min(MAXIMUM_CAPACITY);
        // Caffeine: `max - (long) (PERCENT_MAIN * max)`; the default initial_window
        // gives exactly that.
        let percent_main =
            if initial_window == 1.0 - PERCENT_MAIN { PERCENT_MAIN } else { 1.0 - initial_window };
        let window = max - ((percent_main * max as f64) as u64).min(max);
        let main_protected = (PERCENT_MAIN_PROTECTED * (max - window) as f64) as u64;
        self.maximum = max;
        self.window_maximum = window;
        self.main_protected_maximum = main_protected;
        self.hits_in_sample = 0;
        self.misses_in_sample = 0;
        // Divergence: Caffeine starts with `-HILL_CLIMBER_STEP_PERCENT * max`, a first
        // step that shrinks the window. From the initial 1% that step can only reach the
        // 1-entry floor, so the first samples teach the climber little; growing first
        // is a real probe. On the shared traces (see the parent module) this gains 1 to
        // 4 points on the recency-biased ones (sprite, web07 at 5% and 20%) and costs
        // under 1 point on the rest, except multi3 at 1% (-2, still far above the other
        // policies).
        self.step_size = HILL_CLIMBER_STEP_PERCENT * max as f64;
        if self.caffeine_exact {
            self.step_size = -self.step_size;
        }
    }

    // ---------------------------------------------------------------------------------
    // Public operations

    /// A read: on a hit records the access (a sketch increment and the policy's reorder,
    /// Caffeine's `onAccess`) and returns the value. Counts a hit or a miss; both feed
    /// the hill climber and [`stats`](Self::stats).
    pub fn get<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let i = self.read(key)?;
        self.entries[i as usize].kv.as_ref().map(|(_, v)| v)
    }

    /// As [`get`](Self::get) (same policy effect and counting), returning the value
    /// mutably. If the change alters the entry's weight, tell the cache with
    /// [`set_weight`](Self::set_weight).
    pub fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let i = self.read(key)?;
        self.entries[i as usize].kv.as_mut().map(|(_, v)| v)
    }

    /// The value of `key`, with no policy effect and no counting.
    pub fn peek<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(self.hash(key), key)?;
        self.entries[i as usize].kv.as_ref().map(|(_, v)| v)
    }

    /// The value of `key` mutably, with no policy effect and no counting.
    pub fn peek_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(self.hash(key), key)?;
        self.entries[i as usize].kv.as_mut().map(|(_, v)| v)
    }

    /// Whether `key` is cached (no policy effect, no counting).
    pub fn contains<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(self.hash(key), key).is_some()
    }

    /// Inserts or replaces.
    ///
    /// Replacing keeps the node's place (see the module docs for why this is not an
    /// access, unlike Caffeine's `put`), updates its weight and returns the old value;
    /// the old value does not go to `on_evict`. A new key is recorded in the sketch and
    /// enters the admission window (at its LRU end if heavier than the window).
    /// Afterwards, while the total weight exceeds the capacity, entries are evicted by
    /// the policy and passed to `on_evict(key, value)`: the eviction listener through
    /// which the tiered store demotes entries to its next level. An entry heavier than
    /// the whole capacity is admitted and then evicted at once, as Caffeine does (the
    /// listener gets it back). An entry of weight 0 is never evicted by size.
    pub fn insert(
        &mut self,
        key: K,
        value: V,
        weight: u32,
        on_evict: &mut dyn FnMut(K, V),
    ) -> Option<V> {
        self.drain_reads();
        let hash = self.hash(&key);
        self.sketch.prefetch(hash);
        if let Some(i) = self.find(hash, &key) {
            let old = match &mut self.entries[i as usize].kv {
                Some((_, v)) => std::mem::replace(v, value),
                None => unreachable!("a slot in the table holds an entry"),
            };
            if weight != self.links[i as usize].weight {
                self.update_weight(i, weight);
                self.evict_entries(on_evict);
            }
            self.climb();
            return Some(old);
        }
        self.add(hash, key, value, weight);
        self.evict_entries(on_evict);
        self.climb();
        None
    }

    /// Changes the weight of `key`'s entry, after its value was changed through
    /// [`get_mut`](Self::get_mut) or [`peek_mut`](Self::peek_mut), and evicts as
    /// [`insert`](Self::insert) does. Does nothing if `key` is absent.
    pub fn set_weight<Q: Hash + Eq + ?Sized>(
        &mut self,
        key: &Q,
        weight: u32,
        on_evict: &mut dyn FnMut(K, V),
    ) where
        K: Borrow<Q>,
    {
        self.drain_reads();
        let Some(i) = self.find(self.hash(key), key) else { return };
        if weight != self.links[i as usize].weight {
            self.update_weight(i, weight);
            self.evict_entries(on_evict);
            self.climb();
        }
    }

    /// Removes `key`'s entry and returns its value (not passed to any listener).
    pub fn remove<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.drain_reads();
        let i = self.find(self.hash(key), key)?;
        let (_, v) = self.unlink_and_free(i);
        Some(v)
    }

    /// Visits every entry mutably, in no particular order (to flush dirty entries at a
    /// checkpoint). No policy effect. Weight changes go through
    /// [`set_weight`](Self::set_weight) afterwards.
    pub fn for_each_mut(&mut self, f: &mut dyn FnMut(&K, &mut V)) {
        for e in &mut self.entries {
            if let Some((k, v)) = &mut e.kv {
                f(k, v);
            }
        }
    }

    /// Removes every entry, passing each to `f`, in no particular order. The frequency
    /// history, the climber's state and the counters are kept (Caffeine's `clear`).
    pub fn drain(&mut self, f: &mut dyn FnMut(K, V)) {
        self.drain_reads();
        self.table.clear();
        self.free.clear();
        self.lists = [EMPTY; 3];
        self.weighted_size = 0;
        self.window_weighted_size = 0;
        self.main_protected_weighted_size = 0;
        self.links.clear();
        for e in self.entries.drain(..) {
            if let Some((k, v)) = e.kv {
                f(k, v);
            }
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.table.len() == 0
    }

    /// Total weight of the entries; at most [`capacity`](Self::capacity) between calls.
    pub fn weight(&self) -> u64 {
        self.weighted_size
    }

    /// The maximum total weight.
    pub fn capacity(&self) -> u64 {
        self.maximum
    }

    /// Counters and the current window and protected sizes.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            window_capacity: self.window_maximum,
            protected_capacity: self.main_protected_maximum,
            ..self.stats
        }
    }

    /// The frequency sketch (for inspection: estimates by key hash), after applying
    /// the buffered hits.
    pub fn sketch(&mut self) -> &FrequencySketch {
        self.drain_reads();
        &self.sketch
    }

    /// The estimated recent frequency of `key` (0 to 15), as admission sees it (after
    /// applying the buffered hits).
    pub fn frequency<Q: Hash + ?Sized>(&mut self, key: &Q) -> u8
    where
        K: Borrow<Q>,
    {
        self.drain_reads();
        self.sketch.frequency(self.hash(key))
    }

    // ---------------------------------------------------------------------------------
    // Lookup

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn find<Q: Eq + ?Sized>(&self, hash: u64, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
    {
        let entries = &self.entries;
        self.table
            .find(hash, |&i| {
                entries[i as usize].kv.as_ref().is_some_and(|(k, _)| k.borrow() == key)
            })
            .copied()
    }

    /// The read path of `get`/`get_mut`: counts, records the access, runs the climber.
    #[inline]
    fn read<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
    {
        let hash = self.hash(key);
        // The sketch's lines load while the table is probed.
        self.sketch.prefetch(hash);
        match self.find(hash, key) {
            Some(i) => {
                self.stats.hits += 1;
                self.read_buf[self.read_len] = (i, hash);
                self.read_len += 1;
                if self.read_len == READ_BUFFER {
                    self.drain_reads();
                }
                Some(i)
            }
            None => {
                self.drain_reads();
                self.stats.misses += 1;
                self.misses_in_sample += 1;
                self.climb();
                None
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Intrusive lists

    #[inline]
    fn link_last(&mut self, q: Queue, i: u32) {
        let dq = &mut self.lists[q as usize];
        let s = &mut self.links[i as usize];
        s.queue = q;
        s.next = NIL;
        s.prev = dq.tail;
        if dq.tail == NIL {
            dq.head = i;
        } else {
            self.links[dq.tail as usize].next = i;
        }
        dq.tail = i;
    }

    #[inline]
    fn link_first(&mut self, q: Queue, i: u32) {
        let dq = &mut self.lists[q as usize];
        let s = &mut self.links[i as usize];
        s.queue = q;
        s.prev = NIL;
        s.next = dq.head;
        if dq.head == NIL {
            dq.tail = i;
        } else {
            self.links[dq.head as usize].prev = i;
        }
        dq.head = i;
    }

    #[inline]
    fn unlink(&mut self, i: u32) {
        let (prev, next, q) = {
            let s = &self.links[i as usize];
            (s.prev, s.next, s.queue)
        };
        debug_assert!(q != Queue::Free, "unlink of a free slot");
        let dq = &mut self.lists[q as usize];
        if prev == NIL {
            dq.head = next;
        } else {
            self.links[prev as usize].next = next;
        }
        if next == NIL {
            dq.tail = prev;
        } else {
            self.links[next as usize].prev = prev;
        }
        let s = &mut self.links[i as usize];
        s.prev = NIL;
        s.next = NIL;
    }

    /// Moves a linked slot to the MRU end of its list (Caffeine's `moveToBack`).
    #[inline]
    fn move_to_back(&mut self, i: u32) {
        let q = self.links[i as usize].queue;
        if self.lists[q as usize].tail != i {
            self.unlink(i);
            self.link_last(q, i);
        }
    }

    /// Moves a linked slot to the LRU end of its list (Caffeine's `moveToFront`).
    fn move_to_front(&mut self, i: u32) {
        let q = self.links[i as usize].queue;
        if self.lists[q as usize].head != i {
            self.unlink(i);
            self.link_first(q, i);
        }
    }

    /// Moves slot `i` from its list to the MRU end of `to`.
    #[inline]
    fn transfer(&mut self, i: u32, to: Queue) {
        self.unlink(i);
        self.link_last(to, i);
    }

    #[inline]
    fn next_of(&self, i: u32) -> u32 {
        self.links[i as usize].next
    }

    #[inline]
    fn weight_of(&self, i: u32) -> u64 {
        u64::from(self.links[i as usize].weight)
    }

    // ---------------------------------------------------------------------------------
    // Writes

    /// Caffeine's `AddTask`: a new entry enters the window and the sketch.
    fn add(&mut self, hash: u64, key: K, value: V, weight: u32) {
        if weight != 1 {
            self.weighted = true;
        }
        let link = Link { prev: NIL, next: NIL, weight, queue: Queue::Free };
        let entry = Entry { hash, kv: Some((key, value)) };
        let i = match self.free.pop() {
            Some(i) => {
                self.links[i as usize] = link;
                self.entries[i as usize] = entry;
                i
            }
            None => {
                assert!(self.links.len() < NIL as usize, "WTinyLfu: more than 2^32 - 1 entries");
                let (links, entries) = (self.links.capacity(), self.entries.capacity());
                self.links.push(link);
                self.entries.push(entry);
                if self.links.capacity() != links || self.entries.capacity() != entries {
                    self.advise_huge_pages();
                }
                (self.links.len() - 1) as u32
            }
        };
        let entries = &self.entries;
        self.table.insert_unique(hash, i, |&j| entries[j as usize].hash);

        let w = u64::from(weight);
        self.weighted_size += w;
        self.window_weighted_size += w;
        self.size_sketch();
        self.sketch.increment(hash);

        if w > self.window_maximum {
            self.link_first(Queue::Window, i);
        } else {
            self.link_last(Queue::Window, i);
        }
    }

    /// Asks for transparent huge pages under the slab (entries are reached at random;
    /// see `crate::hot`), after it grew: the moved part and the spare capacity, which
    /// the next slots will fault in.
    fn advise_huge_pages(&mut self) {
        crate::hot::advise_huge_pages(&self.links);
        crate::hot::advise_huge_pages(self.links.spare_capacity_mut());
        crate::hot::advise_huge_pages(&self.entries);
        crate::hot::advise_huge_pages(self.entries.spare_capacity_mut());
    }

    /// Sizes the sketch for the entries (Caffeine's lazy `ensureCapacity` in `AddTask`).
    ///
    /// Caffeine starts the sketch only when the cache is half full, so the history of
    /// the entries before that is lost; it does so to spend no memory on caches that
    /// never fill. Here the sketch starts with the first entry at twice the entry count
    /// and grows with it, keeping its counts ([`FrequencySketch::ensure_capacity`]),
    /// until it reaches Caffeine's size at half capacity: the maximum, or the entry
    /// count for a weighted cache. Memory still follows the entries, and the short
    /// LIRS `gli` trace gains 2 to 4 points of hit ratio.
    #[inline]
    fn size_sketch(&mut self) {
        let len = self.table.len() as u64;
        let target = if self.weighted_size >= self.maximum >> 1 {
            self.sketch_full = true;
            if self.weighted {
                len
            } else {
                self.maximum
            }
        } else if self.caffeine_exact {
            // Caffeine: "Lazily initialize when close to the maximum size".
            return;
        } else {
            2 * len
        };
        if target > self.sketch_target {
            self.sketch_target = target;
            self.sketch.ensure_capacity(target);
        }
    }

    /// Caffeine's `UpdateTask` for a weight change, without its `onAccess` (see the
    /// module docs): the sizes follow the new weight, and an entry too heavy for its
    /// region goes to the window's LRU end.
    fn update_weight(&mut self, i: u32, weight: u32) {
        if weight != 1 {
            self.weighted = true;
        }
        let old = self.weight_of(i);
        let new = u64::from(weight);
        self.links[i as usize].weight = weight;
        match self.links[i as usize].queue {
            Queue::Window => {
                if new > self.window_maximum {
                    self.move_to_front(i);
                }
                self.window_weighted_size = self.window_weighted_size - old + new;
            }
            Queue::Probation => {
                if new > self.maximum {
                    self.unlink(i);
                    self.link_first(Queue::Window, i);
                    self.window_weighted_size += new;
                }
            }
            Queue::Protected => {
                self.main_protected_weighted_size -= old;
                if new > self.maximum {
                    self.unlink(i);
                    self.link_first(Queue::Window, i);
                    self.window_weighted_size += new;
                } else {
                    self.main_protected_weighted_size += new;
                }
            }
            Queue::Free => unreachable!("a slot in the table is linked"),
        }
        self.weighted_size = self.weighted_size - old + new;
    }

    /// Unlinks slot `i` from its list and the table, fixes the sizes, frees the slot
    /// and returns its entry (Caffeine's `makeDead` plus the unlinking of `evictEntry`
    /// and `RemovalTask`).
    fn unlink_and_free(&mut self, i: u32) -> (K, V) {
        let w = self.weight_of(i);
        match self.links[i as usize].queue {
            Queue::Window => self.window_weighted_size -= w,
            Queue::Protected => self.main_protected_weighted_size -= w,
            Queue::Probation => {}
            Queue::Free => unreachable!("a slot in the table is linked"),
        }
        self.weighted_size -= w;
        self.unlink(i);
        let hash = self.entries[i as usize].hash;
        match self.table.find_entry(hash, |&j| j == i) {
            Ok(e) => {
                e.remove();
            }
            Err(_) => unreachable!("a linked slot is in the table"),
        }
        self.links[i as usize].queue = Queue::Free;
        let entry = self.entries[i as usize].kv.take().expect("a linked slot holds an entry");
        self.free.push(i);
        entry
    }

    // ---------------------------------------------------------------------------------
    // Reads

    /// Caffeine's `onAccess`: a sketch increment, the reorder, a sample hit.
    #[inline]
    fn on_access(&mut self, i: u32, hash: u64) {
        self.sketch.increment(hash);
        match self.links[i as usize].queue {
            Queue::Window | Queue::Protected => self.move_to_back(i),
            Queue::Probation => self.reorder_probation(i),
            Queue::Free => unreachable!("a slot in the table is linked"),
        }
        self.hits_in_sample += 1;
    }

    /// Caffeine's `drainReadBuffer`: applies the buffered hits in order, each followed by
    /// `climb` as the unbuffered read path did, so the policy goes through exactly the
    /// same steps as if each hit had been applied at once (every write, miss, removal
    /// and inspection drains first). The sketch blocks and list slots of the whole
    /// batch are prefetched first, then their list neighbours, so their cache misses
    /// overlap instead of following one another.
    pub(crate) fn drain_reads(&mut self) {
        let n = self.read_len;
        if n == 0 {
            return;
        }
        for &(i, hash) in &self.read_buf[..n] {
            self.sketch.prefetch(hash);
            crate::hot::prefetch(&self.links[i as usize]);
        }
        for &(i, _) in &self.read_buf[..n] {
            let l = &self.links[i as usize];
            for j in [l.prev, l.next] {
                if j != NIL {
                    crate::hot::prefetch(&self.links[j as usize]);
                }
            }
        }
        self.read_len = 0;
        for k in 0..n {
            let (i, hash) = self.read_buf[k];
            self.on_access(i, hash);
            self.climb();
        }
    }

    /// Caffeine's `reorderProbation`: a hit in probation promotes the entry to the
    /// protected region (unless heavier than it). A protected region over its maximum is
    /// demoted later, by `climb`'s `demoteFromMainProtected`.
    #[inline]
    fn reorder_probation(&mut self, i: u32) {
        let w = self.weight_of(i);
        if w > self.main_protected_maximum {
            self.move_to_back(i);
            return;
        }
        self.main_protected_weighted_size += w;
        self.transfer(i, Queue::Protected);
    }

    // ---------------------------------------------------------------------------------
    // Eviction

    /// Caffeine's `evictEntries`.
    fn evict_entries(&mut self, on_evict: &mut dyn FnMut(K, V)) {
        let candidate = self.evict_from_window();
        self.evict_from_main(candidate, on_evict);
    }

    /// Caffeine's `evictFromWindow`: moves entries from the window's LRU end to the
    /// probation's MRU end while the window is over its maximum (entries of weight 0
    /// stay). Returns the first entry moved (the first candidate), or `NIL`.
    fn evict_from_window(&mut self) -> u32 {
        let mut first = NIL;
        let mut node = self.lists[Queue::Window as usize].head;
        while self.window_weighted_size > self.window_maximum && node != NIL {
            let next = self.next_of(node);
            let w = self.weight_of(node);
            if w != 0 {
                self.transfer(node, Queue::Probation);
                if first == NIL {
                    first = node;
                }
                self.window_weighted_size -= w;
            }
            node = next;
        }
        first
    }

    /// Caffeine's `evictFromMain`: while over capacity, evicts the less frequent of a
    /// candidate and a victim. Candidates are the entries just moved from the window,
    /// in promotion order, then the window's entries from its LRU end; victims are the
    /// probation's entries from its LRU end, then the protected region's, then the
    /// window's. When one side runs out the other is evicted without a comparison; a
    /// candidate heavier than the whole capacity is evicted at once; a tie keeps the
    /// victim.
    fn evict_from_main(&mut self, mut candidate: u32, on_evict: &mut dyn FnMut(K, V)) {
        let mut victim_queue = Queue::Probation;
        let mut candidate_queue = Queue::Probation;
        let mut victim = self.lists[Queue::Probation as usize].head;
        while self.weighted_size > self.maximum {
            // Search the admission window for additional candidates.
            if candidate == NIL && candidate_queue == Queue::Probation {
                candidate = self.lists[Queue::Window as usize].head;
                candidate_queue = Queue::Window;
            }

            // Try evicting from the protected and window queues.
            if candidate == NIL && victim == NIL {
                match victim_queue {
                    Queue::Probation => {
                        victim = self.lists[Queue::Protected as usize].head;
                        victim_queue = Queue::Protected;
                        continue;
                    }
                    Queue::Protected => {
                        victim = self.lists[Queue::Window as usize].head;
                        victim_queue = Queue::Window;
                        continue;
                    }
                    // Only entries of weight 0 are left: unreachable while over capacity.
                    _ => break,
                }
            }

            // Skip over entries with zero weight.
            if victim != NIL && self.weight_of(victim) == 0 {
                victim = self.next_of(victim);
                continue;
            } else if candidate != NIL && self.weight_of(candidate) == 0 {
                candidate = self.next_of(candidate);
                continue;
            }

            // Evict immediately if only one of the entries is present.
            if victim == NIL {
                let evict = candidate;
                candidate = self.next_of(candidate);
                self.evict_entry(evict, on_evict);
                continue;
            } else if candidate == NIL {
                let evict = victim;
                victim = self.next_of(victim);
                self.evict_entry(evict, on_evict);
                continue;
            }

            // Evict immediately if both selected the same entry.
            if candidate == victim {
                victim = self.next_of(victim);
                self.evict_entry(candidate, on_evict);
                candidate = NIL;
                continue;
            }

            // Evict immediately if the candidate's weight exceeds the maximum.
            if self.weight_of(candidate) > self.maximum {
                let evict = candidate;
                candidate = self.next_of(candidate);
                self.evict_entry(evict, on_evict);
                continue;
            }

            // Evict the entry with the lowest frequency.
            let (ch, vh) =
                (self.entries[candidate as usize].hash, self.entries[victim as usize].hash);
            if self.admit(ch, vh) {
                let evict = victim;
                victim = self.next_of(victim);
                self.evict_entry(evict, on_evict);
                candidate = self.next_of(candidate);
            } else {
                let evict = candidate;
                candidate = self.next_of(candidate);
                self.evict_entry(evict, on_evict);
            }
        }
    }

    /// Caffeine's `admit`: the candidate replaces the victim if it is more frequent. A
    /// warm candidate (at least [`ADMIT_HASHDOS_THRESHOLD`]) that is not gets a 1/128
    /// chance anyway, so an attacker who raises victims' counts by hash collisions
    /// cannot keep every newcomer out.
    fn admit(&mut self, candidate_hash: u64, victim_hash: u64) -> bool {
        let victim_freq = self.sketch.frequency(victim_hash);
        let candidate_freq = self.sketch.frequency(candidate_hash);
        if candidate_freq > victim_freq {
            true
        } else if candidate_freq >= ADMIT_HASHDOS_THRESHOLD {
            self.next_random() & 127 == 0
        } else {
            false
        }
    }

    /// Caffeine's `evictEntry` for size: removes the entry and hands it to the listener.
    fn evict_entry(&mut self, i: u32, on_evict: &mut dyn FnMut(K, V)) {
        let w = self.weight_of(i);
        let (k, v) = self.unlink_and_free(i);
        self.stats.evictions += 1;
        self.stats.evicted_weight += w;
        on_evict(k, v);
    }

    /// splitmix64: the hash-flooding coin.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    // ---------------------------------------------------------------------------------
    // Hill climbing

    /// Caffeine's `climb`: samples the hit rate, demotes an overfull protected region
    /// and moves the window/main boundary by the pending adjustment.
    #[inline]
    fn climb(&mut self) {
        if self.adaptive {
            self.determine_adjustment();
        }
        self.demote_from_main_protected();
        if self.adjustment > 0 {
            self.increase_window();
        } else if self.adjustment < 0 {
            self.decrease_window();
        }
    }

    /// Caffeine's `determineAdjustment`: once a sample of `sampleSize` requests is
    /// complete, steps in the direction that improved the hit rate, restarting with a
    /// full step after a large change and decaying the step otherwise. Samples start
    /// when the cache first reaches half its capacity (in Caffeine, when the sketch is
    /// initialized).
    #[inline]
    fn determine_adjustment(&mut self) {
        if !self.sketch_full {
            self.previous_sample_hit_rate = 0.0;
            self.misses_in_sample = 0;
            self.hits_in_sample = 0;
            return;
        }
        let request_count = self.hits_in_sample + self.misses_in_sample;
        if request_count < self.sketch.sample_size() {
            return;
        }
        let hit_rate = self.hits_in_sample as f64 / request_count as f64;
        let hit_rate_change = hit_rate - self.previous_sample_hit_rate;
        let mut amount = if hit_rate_change >= 0.0 { self.step_size } else { -self.step_size };
        // Divergence: a step towards a bound the region is already at (a window of 1, a
        // protected region of 0) is a no-op in `decreaseWindow`/`increaseWindow`, and
        // Caffeine's climber keeps stepping into it while the hit rate rises for other
        // reasons (a warming workload), learning nothing. Reflect it instead. Measured
        // with the first-step change above (see `set_maximum_size`).
        if !self.caffeine_exact
            && ((amount < 0.0 && self.window_maximum <= 1)
                || (amount > 0.0 && self.main_protected_maximum == 0))
        {
            amount = -amount;
        }
        let next_step_size = if hit_rate_change.abs() >= HILL_CLIMBER_RESTART_THRESHOLD {
            let sign = if amount >= 0.0 { 1.0 } else { -1.0 };
            HILL_CLIMBER_STEP_PERCENT * self.maximum as f64 * sign
        } else {
            HILL_CLIMBER_STEP_DECAY_RATE * amount
        };
        self.previous_sample_hit_rate = hit_rate;
        self.adjustment = amount as i64;
        self.step_size = next_step_size;
        self.misses_in_sample = 0;
        self.hits_in_sample = 0;
    }

    /// Caffeine's `increaseWindow`: grows the window by shrinking the protected region,
    /// moving entries from the probation's (else the protected region's) LRU end to the
    /// window's MRU end. What cannot be moved now stays in `adjustment`.
    fn increase_window(&mut self) {
        if self.main_protected_maximum == 0 {
            return;
        }
        let mut quota = (self.adjustment as u64).min(self.main_protected_maximum);
        let asked = quota;
        self.main_protected_maximum -= quota;
        self.window_maximum += quota;
        self.demote_from_main_protected();

        for _ in 0..QUEUE_TRANSFER_THRESHOLD {
            let mut candidate = self.lists[Queue::Probation as usize].head;
            let mut probation = true;
            if candidate == NIL || quota < self.weight_of(candidate) {
                candidate = self.lists[Queue::Protected as usize].head;
                probation = false;
            }
            if candidate == NIL {
                break;
            }
            let weight = self.weight_of(candidate);
            if quota < weight {
                break;
            }
            quota -= weight;
            if !probation {
                self.main_protected_weighted_size -= weight;
            }
            self.window_weighted_size += weight;
            self.transfer(candidate, Queue::Window);
        }

        self.main_protected_maximum += quota;
        self.window_maximum -= quota;
        self.adjustment = quota as i64;
        if quota < asked {
            self.stats.adjustments += 1;
        }
    }

    /// Caffeine's `decreaseWindow`: shrinks the window (never below 1) and grows the
    /// protected region, moving entries from the window's LRU end to the probation's
    /// MRU end. What cannot be moved now stays in `adjustment`.
    fn decrease_window(&mut self) {
        if self.window_maximum <= 1 {
            return;
        }
        let mut quota = self.adjustment.unsigned_abs().min(self.window_maximum - 1);
        let asked = quota;
        self.main_protected_maximum += quota;
        self.window_maximum -= quota;

        for _ in 0..QUEUE_TRANSFER_THRESHOLD {
            let candidate = self.lists[Queue::Window as usize].head;
            if candidate == NIL {
                break;
            }
            let weight = self.weight_of(candidate);
            if quota < weight {
                break;
            }
            quota -= weight;
            self.window_weighted_size -= weight;
            self.transfer(candidate, Queue::Probation);
        }

        self.main_protected_maximum -= quota;
        self.window_maximum += quota;
        self.adjustment = -(quota as i64);
        if quota < asked {
            self.stats.adjustments += 1;
        }
    }

    /// Caffeine's `demoteFromMainProtected`: moves entries from the protected region's
    /// LRU end to the probation's MRU end while it is over its maximum.
    #[inline]
    fn demote_from_main_protected(&mut self) {
        let maximum = self.main_protected_maximum;
        let mut size = self.main_protected_weighted_size;
        if size <= maximum {
            return;
        }
        for _ in 0..QUEUE_TRANSFER_THRESHOLD {
            if size <= maximum {
                break;
            }
            let demoted = self.lists[Queue::Protected as usize].head;
            if demoted == NIL {
                break;
            }
            size -= self.weight_of(demoted);
            self.transfer(demoted, Queue::Probation);
        }
        self.main_protected_weighted_size = size;
    }
}

impl<K, V> std::fmt::Debug for WTinyLfu<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WTinyLfu")
            .field("len", &self.table.len())
            .field("weight", &self.weighted_size)
            .field("capacity", &self.maximum)
            .field("window_maximum", &self.window_maximum)
            .field("main_protected_maximum", &self.main_protected_maximum)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
impl<K: Hash + Eq + Clone, V> WTinyLfu<K, V> {
    /// Keys of a region from its LRU end to its MRU end (tests).
    pub(crate) fn keys_of(&mut self, region: &str) -> Vec<K> {
        self.drain_reads();
        let q = match region {
            "window" => Queue::Window,
            "probation" => Queue::Probation,
            "protected" => Queue::Protected,
            other => panic!("no region {other}"),
        };
        let mut out = Vec::new();
        let mut i = self.lists[q as usize].head;
        while i != NIL {
            out.push(self.entries[i as usize].kv.as_ref().expect("live").0.clone());
            i = self.links[i as usize].next;
        }
        out
    }

    /// Records an access of `key` in the sketch only (tests; Caffeine's tests call
    /// `frequencySketch().increment`).
    pub(crate) fn record(&mut self, key: &K) {
        self.drain_reads();
        let h = self.hash(key);
        self.sketch.increment(h);
    }

    /// `admit` by keys (tests).
    pub(crate) fn admit_keys(&mut self, candidate: &K, victim: &K) -> bool {
        let (c, v) = (self.hash(candidate), self.hash(victim));
        self.admit(c, v)
    }

    /// Checks the lists, the region tags, the sizes and the table against each other
    /// (tests).
    pub(crate) fn check_invariants(&self) {
        let mut seen = 0usize;
        let mut sizes = [0u64; 3];
        for q in [Queue::Window, Queue::Probation, Queue::Protected] {
            let dq = self.lists[q as usize];
            let mut prev = NIL;
            let mut i = dq.head;
            while i != NIL {
                let s = &self.links[i as usize];
                assert_eq!(s.queue, q, "slot {i} tagged {:?} but linked in {q:?}", s.queue);
                assert_eq!(s.prev, prev, "broken prev link at slot {i}");
                let e = &self.entries[i as usize];
                let (k, _) = e.kv.as_ref().expect("linked slot holds an entry");
                assert_eq!(self.find(e.hash, k), Some(i), "linked slot {i} not in the table");
                sizes[q as usize] += u64::from(s.weight);
                seen += 1;
                prev = i;
                i = s.next;
            }
            assert_eq!(dq.tail, prev, "tail of {q:?}");
        }
        assert_eq!(seen, self.table.len(), "linked slots vs table entries");
        assert_eq!(seen + self.free.len(), self.links.len(), "linked + free vs slab");
        assert_eq!(self.links.len(), self.entries.len());
        for &f in &self.free {
            assert_eq!(self.links[f as usize].queue, Queue::Free);
            assert!(self.entries[f as usize].kv.is_none());
        }
        assert_eq!(sizes.iter().sum::<u64>(), self.weighted_size, "weighted size");
        assert_eq!(sizes[Queue::Window as usize], self.window_weighted_size, "window size");
        assert_eq!(
            sizes[Queue::Protected as usize],
            self.main_protected_weighted_size,
            "protected size"
        );
        assert!(self.weighted_size <= self.maximum, "over capacity");
        assert!(self.window_maximum + self.main_protected_maximum <= self.maximum);
    }
}
