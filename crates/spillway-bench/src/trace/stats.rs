//! Trace characterization: [`characterize`] turns a stream of records into
//! [`TraceStats`] (op mix, amplification, key-frequency KS distance, LRU stack distances
//! and miss-ratio curve, key-sequence uniqueness against a shuffled copy, working set over
//! time, key time-to-live), printable as a table or serialized as JSON.
//!
//! Every op is one access to its key (`next` ops carry the key of their `seek`), for
//! every statistic below. Positions ("op index") count records from 0.
//!
//! Memory is O(distinct keys), except the key-sequence statistic, which keeps the key id
//! of every op (4 bytes per op) plus 8 bytes per op while counting; set
//! [`CharacterizeOptions::sequence_len`] to 0 to skip it.

use std::collections::HashMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::stack::{StackDistanceTracker, StackDistances};
use super::{TraceError, TraceRecord};
use crate::workload::OpKind;

/// Options of [`characterize`].
#[derive(Clone, Debug)]
pub struct CharacterizeOptions {
    /// Longest key sequence counted (sequences of length 1..=this). Default 4; 0 skips
    /// the statistic and its O(ops) memory.
    pub sequence_len: usize,
    /// Seed of the shuffle that the key sequences are compared against. Default 0x5EED.
    pub shuffle_seed: u64,
    /// Window length, in ops, of the working-set series. Default 10 000.
    pub window_ops: u64,
    /// Key frequencies (per-key access counts, any order) of a reference, e.g. another
    /// trace ([`key_frequencies`]) or the input key sequence ([`sequence_frequencies`]),
    /// to compare against with [`ks_statistic`] on rank-frequency vectors.
    pub reference_counts: Option<Vec<u64>>,
    /// Cache sizes (in keys) of the miss-ratio curve. Default: the powers of two below the
    /// number of distinct keys, and that number (where only cold misses remain).
    pub mrc_sizes: Option<Vec<u64>>,
    /// Whether the records' input events are real: `Some(false)` for a trace without
    /// them (Gadget text, whose `input_event` is the line's sequence number, or a binary
    /// conversion of one; see [`super::open::TraceFile::input_events`]), which makes the
    /// per-event statistics not applicable. `None` (the default): real unless every
    /// record's input event is its 1-based position, the sequence numbers of a text
    /// trace carried into a binary one.
    pub input_events: Option<bool>,
}

impl Default for CharacterizeOptions {
    fn default() -> Self {
        CharacterizeOptions {
            sequence_len: 4,
            shuffle_seed: 0x5EED,
            window_ops: 10_000,
            reference_counts: None,
            mrc_sizes: None,
            input_events: None,
        }
    }
}

/// Ops per kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpCounts {
    /// get
    pub get: u64,
    /// put
    pub put: u64,
    /// merge
    pub merge: u64,
    /// delete
    pub delete: u64,
    /// scan
    pub scan: u64,
    /// seek
    pub seek: u64,
    /// next
    pub next: u64,
}

impl OpCounts {
    /// Count of `kind`.
    pub fn get_kind(&self, kind: OpKind) -> u64 {
        match kind {
            OpKind::Get => self.get,
            OpKind::Put => self.put,
            OpKind::Merge => self.merge,
            OpKind::Delete => self.delete,
            OpKind::Scan => self.scan,
            OpKind::Seek => self.seek,
            OpKind::Next => self.next,
        }
    }

    fn bump(&mut self, kind: OpKind) {
        *match kind {
            OpKind::Get => &mut self.get,
            OpKind::Put => &mut self.put,
            OpKind::Merge => &mut self.merge,
            OpKind::Delete => &mut self.delete,
            OpKind::Scan => &mut self.scan,
            OpKind::Seek => &mut self.seek,
            OpKind::Next => &mut self.next,
        } += 1;
    }

    /// Sum over kinds.
    pub fn total(&self) -> u64 {
        OpKind::ALL.iter().map(|&k| self.get_kind(k)).sum()
    }
}

/// Fraction of all ops per kind (all 0 for an empty trace; otherwise they sum to 1).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OpMix {
    /// get
    pub get: f64,
    /// put
    pub put: f64,
    /// merge
    pub merge: f64,
    /// delete
    pub delete: f64,
    /// scan
    pub scan: f64,
    /// seek
    pub seek: f64,
    /// next
    pub next: f64,
}

impl OpMix {
    fn from_counts(c: &OpCounts) -> OpMix {
        let n = c.total();
        let f = |x: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
        OpMix {
            get: f(c.get),
            put: f(c.put),
            merge: f(c.merge),
            delete: f(c.delete),
            scan: f(c.scan),
            seek: f(c.seek),
            next: f(c.next),
        }
    }

    /// Fraction of `kind`.
    pub fn get_kind(&self, kind: OpKind) -> f64 {
        match kind {
            OpKind::Get => self.get,
            OpKind::Put => self.put,
            OpKind::Merge => self.merge,
            OpKind::Delete => self.delete,
            OpKind::Scan => self.scan,
            OpKind::Seek => self.seek,
            OpKind::Next => self.next,
        }
    }
}

/// Summary of a distribution of op-index spans (HDR histogram, 3 significant digits:
/// values are exact up to 2048 and within 0.1% above).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Number of values.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest value.
    pub max: u64,
}

impl Percentiles {
    fn from_hist(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// One power-of-two bucket of the stack-distance histogram.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DistanceBucket {
    /// Smallest distance in the bucket.
    pub min: u64,
    /// Largest distance in the bucket.
    pub max: u64,
    /// Accesses with a distance in `min..=max`.
    pub count: u64,
}

/// One point of the LRU miss-ratio curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MissRatioPoint {
    /// Cache size in keys.
    pub cache_keys: u64,
    /// Misses / accesses of an LRU cache of that size (cold misses included).
    pub miss_ratio: f64,
}

/// Distinct key sequences of one length, in the trace and in a shuffled copy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SequenceCount {
    /// Sequence length `l`.
    pub len: usize,
    /// Distinct sequences of `l` consecutive keys in the trace.
    pub unique: u64,
    /// The same in the shuffled copy (same multiset of keys, order destroyed).
    pub unique_shuffled: u64,
    /// `unique / unique_shuffled` (below 1: the trace repeats key sequences more than
    /// chance, i.e. has sequential locality).
    pub ratio: f64,
}

/// Distinct keys per window of `window_ops` consecutive ops.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorkingSet {
    /// Window length in ops.
    pub window_ops: u64,
    /// Distinct keys in window 0, 1, …; the last window may be partial.
    pub series: Vec<u64>,
    /// Ops in the last window (= `window_ops` unless partial; 0 for an empty trace).
    pub last_window_ops: u64,
    /// Largest value of the series.
    pub max: u64,
    /// Mean over full windows (over the partial one if there is no full window).
    pub mean: f64,
}

/// Characterization of one trace; see [`characterize`] for the definitions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TraceStats {
    /// Records (ops).
    pub ops: u64,
    /// Whether the trace has input events (see [`CharacterizeOptions::input_events`]);
    /// without them `input_events` counts sequence numbers and the amplifications are
    /// not applicable.
    pub has_input_events: bool,
    /// Distinct input events that issued at least one op.
    pub input_events: u64,
    /// Input event of the first record (0 for an empty trace).
    pub first_input_event: u64,
    /// Input event of the last record (0 for an empty trace).
    pub last_input_event: u64,
    /// Distinct state keys.
    pub distinct_keys: u64,
    /// Mean key length in bytes.
    pub mean_key_bytes: f64,
    /// Mean value length in bytes (over all ops, empty values included).
    pub mean_value_bytes: f64,
    /// Ops per kind.
    pub op_counts: OpCounts,
    /// Fraction of ops per kind.
    pub op_mix: OpMix,
    /// `ops / input_events`: state ops per input event that issued any; `None` (JSON
    /// `null`) for a trace without input events or without records.
    pub event_amplification: Option<f64>,
    /// `distinct_keys / input_events`: distinct state keys per input event that issued
    /// any op (1 when every event gets its own state key, lower when events share
    /// keys, above 1 when one event touches several new keys, e.g. one per window);
    /// `None` as for `event_amplification`.
    pub key_space_amplification: Option<f64>,
    /// [`ks_statistic`] between this trace's rank-frequency vector and the reference's,
    /// if [`CharacterizeOptions::reference_counts`] was given.
    pub ks_vs_reference: Option<f64>,
    /// First accesses (cold misses).
    pub cold_accesses: u64,
    /// Stack-distance histogram in power-of-two buckets (`[0,0]`, `[1,1]`, `[2,3]`, …).
    pub stack_distance: Vec<DistanceBucket>,
    /// LRU miss ratio per cache size.
    pub miss_ratio_curve: Vec<MissRatioPoint>,
    /// Key-sequence uniqueness for lengths 1..=`sequence_len`.
    pub sequences: Vec<SequenceCount>,
    /// Working set over time.
    pub working_set: WorkingSet,
    /// Per key: ops between its first and last access (last index − first index).
    pub key_ttl: Percentiles,
    /// Per delete that ends a key's life: ops from the first write (put or merge) of that
    /// life (since the start or the key's previous delete) to the delete.
    pub delete_ttl: Percentiles,
    /// Deletes of keys not written since the start or their previous delete.
    pub deletes_without_write: u64,
    /// Exact stack-distance histogram (not serialized; use for any cache size).
    #[serde(skip)]
    pub stack_distances: StackDistances,
    /// Per-key access counts sorted in decreasing order (not serialized; pass to
    /// [`ks_statistic`] to compare traces).
    #[serde(skip)]
    pub rank_frequency: Vec<u64>,
}

/// Two-sample Kolmogorov–Smirnov statistic between two discrete distributions on the
/// indices `0, 1, 2, …`, given as counts (`a[i]` = weight of index `i`; missing entries
/// count 0): `max_i |A(i) − B(i)|` with `A(i) = (a[0] + … + a[i]) / Σa`. It is 0 for
/// proportional vectors and 1 when all of one distribution's mass lies before all of the
/// other's. If one side is empty (sum 0) the result is 1, or 0 if both are.
///
/// To compare **key-frequency distributions** of traces whose key identities differ,
/// pass rank-frequency vectors ([`rank_frequency`]: counts sorted in decreasing order).
/// Then `A(r)` is the share of accesses that go to the `r + 1` most popular keys, and the
/// statistic measures how differently skewed the two are, independent of key names.
pub fn ks_statistic(a: &[u64], b: &[u64]) -> f64 {
    let sa: u128 = a.iter().map(|&x| u128::from(x)).sum();
    let sb: u128 = b.iter().map(|&x| u128::from(x)).sum();
    if sa == 0 || sb == 0 {
        return if sa == sb { 0.0 } else { 1.0 };
    }
    let (mut ca, mut cb) = (0u128, 0u128);
    let mut best = 0u128; // max |ca*sb - cb*sa|, exact
    for i in 0..a.len().max(b.len()) {
        ca += u128::from(a.get(i).copied().unwrap_or(0));
        cb += u128::from(b.get(i).copied().unwrap_or(0));
        best = best.max((ca * sb).abs_diff(cb * sa));
    }
    best as f64 / (sa as f64 * sb as f64)
}

/// Counts sorted in decreasing order (the rank-frequency vector).
pub fn rank_frequency(counts: &[u64]) -> Vec<u64> {
    let mut v = counts.to_vec();
    v.sort_unstable_by(|x, y| y.cmp(x));
    v
}

/// Per-key access counts of a trace (in first-seen order).
pub fn key_frequencies(
    records: impl IntoIterator<Item = Result<TraceRecord, TraceError>>,
) -> Result<Vec<u64>, TraceError> {
    let mut ids: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut counts = Vec::new();
    for r in records {
        let r = r?;
        let n = counts.len();
        let id = *ids.entry(r.op.key).or_insert(n);
        if id == n {
            counts.push(0);
        }
        counts[id] += 1;
    }
    Ok(counts)
}

/// Per-key counts of an input key sequence (e.g. the event keys of a generator).
pub fn sequence_frequencies(keys: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut m: HashMap<u64, u64> = HashMap::new();
    for k in keys {
        *m.entry(k).or_insert(0) += 1;
    }
    m.into_values().collect()
}

struct KeyState {
    count: u64,
    first: u64,
    last: u64,
    /// Window index + 1 of the last access (0 = none).
    window: u64,
    /// Op index of the first write of the current life, or u64::MAX.
    write_start: u64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Distinct windows of `l` consecutive ids. Exact for l <= 2; for longer sequences the
/// windows are compared by a 64-bit fingerprint (for 10^7 windows the chance of any
/// collision is below 3 * 10^-6).
fn unique_sequences(ids: &[u32], l: usize, scratch: &mut Vec<u64>) -> u64 {
    if l == 0 || ids.len() < l {
        return 0;
    }
    scratch.clear();
    scratch.extend(ids.windows(l).map(|w| match l {
        1 => u64::from(w[0]),
        2 => (u64::from(w[0]) << 32) | u64::from(w[1]),
        _ => w.iter().fold(0u64, |h, &x| splitmix(h ^ u64::from(x))),
    }));
    scratch.sort_unstable();
    scratch.dedup();
    scratch.len() as u64
}

/// Seeded Fisher–Yates shuffle with splitmix64 (reproducible across platforms and
/// dependency versions).
fn shuffle(v: &mut [u32], seed: u64) {
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let r = splitmix(state);
        let j = ((u128::from(r) * (i as u128 + 1)) >> 64) as usize;
        v.swap(i, j);
    }
}

/// Characterizes a trace in one streaming pass (see the module docs for memory).
///
/// Definitions (op index = position of the record, from 0):
/// - `op_mix`: ops of each kind / all ops.
/// - `event_amplification` = ops / `input_events`, and `key_space_amplification` =
///   distinct keys / `input_events`, where `input_events` is the number of distinct
///   input-event numbers in the trace (events that issued no op are not visible in a
///   trace; a Gadget text trace has one event per op).
/// - stack distances and the LRU miss-ratio curve: see [`super::stack`].
/// - `sequences`: for each `l` in 1..=`sequence_len`, the distinct runs of `l`
///   consecutive keys, in the trace and in a seeded shuffle of it.
/// - `working_set`: distinct keys in each window of `window_ops` consecutive ops.
/// - `key_ttl`, `delete_ttl`: see [`TraceStats`].
///
/// Fails on the first read error, on a decreasing input event, or beyond 2^32 − 1
/// distinct keys.
pub fn characterize(
    records: impl IntoIterator<Item = Result<TraceRecord, TraceError>>,
    opts: &CharacterizeOptions,
) -> Result<TraceStats, TraceError> {
    let window_ops = opts.window_ops.max(1);
    let mut ids: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut keys: Vec<KeyState> = Vec::new();
    let mut tracker = StackDistanceTracker::new();
    let mut dist = StackDistances::default();
    let mut seq: Vec<u32> = Vec::new();
    let mut counts = OpCounts::default();
    let mut s = TraceStats::default();
    let (mut key_bytes, mut value_bytes) = (0u128, 0u128);
    let mut delete_h = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut series: Vec<u64> = Vec::new();
    let mut window_distinct = 0u64;
    let mut n = 0u64;
    // Every input event so far equals its record's 1-based position (text numbering).
    let mut seq_numbered = true;

    for r in records {
        let r = r?;
        if n == 0 {
            s.first_input_event = r.input_event;
            s.input_events = 1;
        } else if r.input_event < s.last_input_event {
            return Err(TraceError::InputEventDecreased {
                record: n,
                previous: s.last_input_event,
                got: r.input_event,
            });
        } else if r.input_event > s.last_input_event {
            s.input_events += 1;
        }
        s.last_input_event = r.input_event;
        seq_numbered &= r.input_event == n + 1;
        counts.bump(r.op.kind);
        key_bytes += r.op.key.len() as u128;
        value_bytes += r.op.value.len() as u128;

        let id = match ids.get(&r.op.key) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(keys.len())
                    .ok()
                    .filter(|&i| i != u32::MAX)
                    .ok_or(TraceError::TooManyKeys)?;
                ids.insert(r.op.key, id);
                keys.push(KeyState {
                    count: 0,
                    first: n,
                    last: n,
                    window: 0,
                    write_start: u64::MAX,
                });
                id
            }
        };
        dist.record(tracker.access(id));
        if opts.sequence_len > 0 {
            seq.push(id);
        }

        let w = n / window_ops;
        if w != series.len() as u64 {
            // A new window starts; `series` holds the completed ones.
            series.push(window_distinct);
            window_distinct = 0;
        }
        let k = &mut keys[id as usize];
        if k.window != w + 1 {
            k.window = w + 1;
            window_distinct += 1;
        }
        k.count += 1;
        k.last = n;
        match r.op.kind {
            OpKind::Put | OpKind::Merge if k.write_start == u64::MAX => k.write_start = n,
            OpKind::Delete => {
                if k.write_start == u64::MAX {
                    s.deletes_without_write += 1;
                } else {
                    let _ = delete_h.record(n - k.write_start);
                    k.write_start = u64::MAX;
                }
            }
            _ => {}
        }
        n += 1;
    }
    if n > 0 {
        series.push(window_distinct);
    }

    s.ops = n;
    s.distinct_keys = keys.len() as u64;
    s.has_input_events = opts.input_events.unwrap_or(!(n > 0 && seq_numbered));
    if n > 0 {
        s.mean_key_bytes = key_bytes as f64 / n as f64;
        s.mean_value_bytes = value_bytes as f64 / n as f64;
        if s.has_input_events {
            s.event_amplification = Some(n as f64 / s.input_events as f64);
            s.key_space_amplification = Some(s.distinct_keys as f64 / s.input_events as f64);
        }
    }
    s.op_mix = OpMix::from_counts(&counts);
    s.op_counts = counts;

    let mut ttl_h = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    let mut freq = Vec::with_capacity(keys.len());
    for k in &keys {
        let _ = ttl_h.record(k.last - k.first);
        freq.push(k.count);
    }
    drop(keys);
    drop(ids);
    s.key_ttl = Percentiles::from_hist(&ttl_h);
    s.delete_ttl = Percentiles::from_hist(&delete_h);
    s.rank_frequency = rank_frequency(&freq);
    drop(freq);
    s.ks_vs_reference =
        opts.reference_counts.as_ref().map(|r| ks_statistic(&s.rank_frequency, &rank_frequency(r)));

    s.cold_accesses = dist.cold;
    let mut lo = 0usize;
    while lo < dist.counts.len() {
        let hi = if lo == 0 { 0 } else { (2 * lo - 1).min(dist.counts.len() - 1) };
        let count = dist.counts[lo..=hi].iter().sum();
        s.stack_distance.push(DistanceBucket { min: lo as u64, max: hi as u64, count });
        lo = hi + 1;
    }
    let sizes = opts.mrc_sizes.clone().unwrap_or_else(|| {
        let mut v = vec![];
        let mut c = 1u64;
        while c < s.distinct_keys {
            v.push(c);
            c *= 2;
        }
        if s.distinct_keys > 0 {
            v.push(s.distinct_keys);
        }
        v
    });
    s.miss_ratio_curve = dist
        .miss_ratio_curve(&sizes)
        .into_iter()
        .map(|(cache_keys, miss_ratio)| MissRatioPoint { cache_keys, miss_ratio })
        .collect();
    s.stack_distances = dist;

    let mut scratch = Vec::new();
    let mut shuffled = seq.clone();
    shuffle(&mut shuffled, opts.shuffle_seed);
    for l in 1..=opts.sequence_len {
        let unique = unique_sequences(&seq, l, &mut scratch);
        let unique_shuffled = unique_sequences(&shuffled, l, &mut scratch);
        let ratio = if unique_shuffled == 0 { 0.0 } else { unique as f64 / unique_shuffled as f64 };
        s.sequences.push(SequenceCount { len: l, unique, unique_shuffled, ratio });
    }

    let full =
        if n.is_multiple_of(window_ops) { series.len() } else { series.len().saturating_sub(1) };
    s.working_set = WorkingSet {
        window_ops,
        max: series.iter().copied().max().unwrap_or(0),
        mean: {
            let part = if full > 0 { &series[..full] } else { &series[..] };
            if part.is_empty() {
                0.0
            } else {
                part.iter().sum::<u64>() as f64 / part.len() as f64
            }
        },
        last_window_ops: if n == 0 { 0 } else { (n - 1) % window_ops + 1 },
        series,
    };
    Ok(s)
}

impl TraceStats {
    /// Compares this trace's key-frequency distribution with another's: [`ks_statistic`]
    /// on the two rank-frequency vectors.
    pub fn ks_vs(&self, other: &TraceStats) -> f64 {
        ks_statistic(&self.rank_frequency, &other.rank_frequency)
    }

    /// A human-readable multi-line table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(t, "{:<28} {}", "ops", self.ops);
        if self.has_input_events {
            let _ = writeln!(
                t,
                "{:<28} {} (events {}..={})",
                "input events with ops",
                self.input_events,
                self.first_input_event,
                self.last_input_event
            );
        } else {
            let _ = writeln!(
                t,
                "{:<28} n/a (the trace has no input-event column: Gadget text or a conversion of it)",
                "input events with ops"
            );
        }
        let _ = writeln!(t, "{:<28} {}", "distinct keys", self.distinct_keys);
        let _ = writeln!(
            t,
            "{:<28} key {:.1} B, value {:.1} B",
            "mean sizes", self.mean_key_bytes, self.mean_value_bytes
        );
        let na = |v: Option<f64>| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}"));
        let _ = writeln!(t, "{:<28} {}", "event amplification", na(self.event_amplification));
        let _ =
            writeln!(t, "{:<28} {}", "key-space amplification", na(self.key_space_amplification));
        if let Some(ks) = self.ks_vs_reference {
            let _ = writeln!(t, "{:<28} {ks:.4}", "KS vs reference");
        }
        let _ = writeln!(t, "op mix:");
        for k in OpKind::ALL {
            let _ = writeln!(
                t,
                "  {:<8} {:>12} {:>8.4}",
                k.name(),
                self.op_counts.get_kind(k),
                self.op_mix.get_kind(k)
            );
        }
        let _ = writeln!(t, "stack distance (cold {}):", self.cold_accesses);
        for b in &self.stack_distance {
            let _ = writeln!(t, "  {:>10}..={:<10} {:>12}", b.min, b.max, b.count);
        }
        let _ = writeln!(t, "LRU miss ratio:");
        for p in &self.miss_ratio_curve {
            let _ = writeln!(t, "  {:>12} keys {:>8.4}", p.cache_keys, p.miss_ratio);
        }
        if !self.sequences.is_empty() {
            let _ = writeln!(t, "unique key sequences (trace / shuffled):");
            for s in &self.sequences {
                let _ = writeln!(
                    t,
                    "  l={} {:>12} / {:<12} {:.4}",
                    s.len, s.unique, s.unique_shuffled, s.ratio
                );
            }
        }
        let w = &self.working_set;
        let _ = writeln!(
            t,
            "{:<28} {} windows of {} ops: mean {:.1}, max {}",
            "working set",
            w.series.len(),
            w.window_ops,
            w.mean,
            w.max
        );
        for (name, p) in [("key ttl (ops)", &self.key_ttl), ("put->delete (ops)", &self.delete_ttl)]
        {
            let _ = writeln!(
                t,
                "{name:<28} n {} mean {:.1} p50 {} p90 {} p99 {} p99.9 {} max {}",
                p.count, p.mean, p.p50, p.p90, p.p99, p.p999, p.max
            );
        }
        let _ = writeln!(t, "{:<28} {}", "deletes without write", self.deletes_without_write);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::StateOp;

    fn rec(e: u64, kind: OpKind, key: &str) -> Result<TraceRecord, TraceError> {
        Ok(TraceRecord { input_event: e, op: StateOp { kind, key: key.into(), value: vec![] } })
    }

    #[test]
    fn ks_known_distributions() {
        assert_eq!(ks_statistic(&[5, 3, 1], &[5, 3, 1]), 0.0);
        assert_eq!(ks_statistic(&[10, 6, 2], &[5, 3, 1]), 0.0);
        assert_eq!(ks_statistic(&[4, 4, 0, 0], &[0, 0, 1, 7]), 1.0);
        assert_eq!(ks_statistic(&[1], &[0, 1]), 1.0);
        assert_eq!(ks_statistic(&[], &[]), 0.0);
        assert_eq!(ks_statistic(&[], &[1]), 1.0);
        // Uniform over 4 vs all on index 0: max gap at index 0 is 1 - 1/4.
        assert!((ks_statistic(&[1, 1, 1, 1], &[9]) - 0.75).abs() < 1e-12);
        let s = ks_statistic(&[3, 1], &[1, 3]);
        assert!((s - 0.5).abs() < 1e-12, "{s}");
        assert_eq!(ks_statistic(&[3, 1], &[1, 3]), ks_statistic(&[1, 3], &[3, 1]));
    }

    #[test]
    fn small_trace_by_hand() {
        let recs = vec![
            rec(0, OpKind::Put, "a"),
            rec(0, OpKind::Get, "b"),
            rec(1, OpKind::Get, "a"),
            rec(1, OpKind::Merge, "c"),
            rec(3, OpKind::Delete, "a"),
            rec(3, OpKind::Delete, "b"),
        ];
        let s = characterize(
            recs,
            &CharacterizeOptions {
                window_ops: 4,
                reference_counts: Some(vec![1, 2, 3]),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.ops, 6);
        assert_eq!(s.input_events, 3);
        assert_eq!(s.distinct_keys, 3);
        assert_eq!(s.event_amplification, Some(2.0));
        assert_eq!(s.key_space_amplification, Some(1.0));
        assert_eq!(s.op_counts.get, 2);
        assert_eq!(s.op_counts.delete, 2);
        assert!(
            (OpKind::ALL.iter().map(|&k| s.op_mix.get_kind(k)).sum::<f64>() - 1.0).abs() < 1e-12
        );
        // a: 0..4, b: 1..5, c: 3..3
        assert_eq!(s.key_ttl.count, 3);
        assert_eq!(s.key_ttl.max, 4);
        assert_eq!(s.delete_ttl.count, 1);
        assert_eq!(s.delete_ttl.max, 4);
        assert_eq!(s.deletes_without_write, 1);
        assert_eq!(s.working_set.series, vec![3, 2]);
        assert_eq!(s.working_set.last_window_ops, 2);
        assert_eq!(s.rank_frequency, vec![3, 2, 1]);
        assert_eq!(s.ks_vs_reference, Some(0.0));
        // distances: a -, b -, a 1 (b), c -, a 1 (c), b 2 (a, c)
        assert_eq!(s.cold_accesses, 3);
        assert_eq!(s.stack_distances.counts, vec![0, 2, 1]);
        assert_eq!(s.sequences[0].unique, 3);
        assert_eq!(s.sequences[1].unique, 4); // ab ba ac ca (ab again)
        assert_eq!(s.sequences[1].len, 2);
        let json = serde_json::to_value(&s).unwrap();
        let mix = json["op_mix"].as_object().unwrap();
        let names: Vec<&str> = mix.keys().map(String::as_str).collect();
        for k in OpKind::ALL {
            assert!(names.contains(&k.name()));
        }
        assert!(s.table().contains("LRU miss ratio"));
    }

    #[test]
    fn amplification_is_not_applicable_without_input_events() {
        // Text numbering (input event = 1-based position) reads as no input events.
        let seq = || (1..=4u64).map(|i| rec(i, OpKind::Get, "a"));
        let s = characterize(seq(), &Default::default()).unwrap();
        assert!(!s.has_input_events);
        assert_eq!((s.event_amplification, s.key_space_amplification), (None, None));
        assert!(s.table().contains("event amplification          n/a"), "{}", s.table());
        let json = serde_json::to_value(&s).unwrap();
        assert!(json["event_amplification"].is_null() && json["key_space_amplification"].is_null());
        // Told otherwise, or numbered from 0 as generated traces are, it applies.
        let told = CharacterizeOptions { input_events: Some(true), ..Default::default() };
        assert_eq!(characterize(seq(), &told).unwrap().event_amplification, Some(1.0));
        let gen = (0..4u64).map(|i| rec(i / 2, OpKind::Get, "a"));
        assert_eq!(characterize(gen, &Default::default()).unwrap().event_amplification, Some(2.0));
        // Told there are none: n/a even for generated numbering; an empty trace has none.
        let none = CharacterizeOptions { input_events: Some(false), ..Default::default() };
        let gen = (0..4u64).map(|i| rec(i / 2, OpKind::Get, "a"));
        assert_eq!(characterize(gen, &none).unwrap().event_amplification, None);
        let empty = characterize(Vec::new(), &Default::default()).unwrap();
        assert_eq!(empty.event_amplification, None);
    }

    #[test]
    fn rejects_decreasing_events_and_propagates_errors() {
        let e = characterize(
            vec![rec(2, OpKind::Get, "a"), rec(1, OpKind::Get, "a")],
            &Default::default(),
        )
        .unwrap_err();
        assert!(matches!(e, TraceError::InputEventDecreased { record: 1, .. }));
        let e = characterize(
            vec![rec(0, OpKind::Get, "a"), Err(TraceError::NotATrace)],
            &Default::default(),
        )
        .unwrap_err();
        assert!(matches!(e, TraceError::NotATrace));
    }

    #[test]
    fn sequential_trace_has_fewer_unique_sequences_than_shuffled() {
        // A cyclic scan over 50 keys: only 50 distinct runs of each length.
        let recs = (0..5000u64).map(|i| rec(i, OpKind::Get, &format!("k{}", i % 50)));
        let s = characterize(recs, &Default::default()).unwrap();
        assert_eq!(s.sequences[0].unique, 50);
        assert_eq!(s.sequences[0].unique_shuffled, 50);
        for q in &s.sequences[1..] {
            assert_eq!(q.unique, 50);
            assert!(q.unique_shuffled > 500, "{q:?}");
        }
        let mrc = &s.miss_ratio_curve;
        // Cyclic over 50 keys: LRU below 50 keys always misses, at 50 only cold misses.
        assert!(mrc.iter().any(|p| p.cache_keys == 32 && p.miss_ratio == 1.0));
        assert!(mrc.iter().any(|p| p.cache_keys == 50 && p.miss_ratio == 0.01));
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut a: Vec<u32> = (0..1000).collect();
        let mut b = a.clone();
        shuffle(&mut a, 7);
        shuffle(&mut b, 7);
        assert_eq!(a, b);
        assert_ne!(a, (0..1000).collect::<Vec<u32>>());
        a.sort_unstable();
        assert_eq!(a, (0..1000).collect::<Vec<u32>>());
    }

    /// A million-op characterization completes (no timing assertion).
    #[test]
    fn million_ops() {
        use rand::SeedableRng;
        let z = crate::zipf::ScrambledZipfian::new(100_000, 0.99);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let recs = (0..1_000_000u64).map(|i| {
            let key = z.sample(&mut rng);
            Ok(TraceRecord {
                input_event: i / 3,
                op: StateOp {
                    kind: OpKind::ALL[(splitmix(i) % 7) as usize],
                    key: key.to_le_bytes().to_vec(),
                    value: vec![],
                },
            })
        });
        let s = characterize(recs, &Default::default()).unwrap();
        assert_eq!(s.ops, 1_000_000);
        assert_eq!(s.stack_distances.accesses(), 1_000_000);
        let sum: f64 = OpKind::ALL.iter().map(|&k| s.op_mix.get_kind(k)).sum();
        assert!((sum - 1.0).abs() < 1e-9);
        assert_eq!(s.working_set.series.len(), 100);
        let last = s.miss_ratio_curve.last().unwrap();
        assert_eq!(last.cache_keys, s.distinct_keys);
        assert!((last.miss_ratio - s.distinct_keys as f64 / 1e6).abs() < 1e-12);
    }
}
