//! YCSB's core workloads A–F as streaming generators of [`StateOp`]s.
//!
//! | workload | mix | default request distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | zipfian |
//! | B | 95% read, 5% update | zipfian |
//! | C | 100% read | zipfian |
//! | D | 95% read, 5% insert | latest |
//! | E | 95% scan, 5% insert (scan length uniform in `1..=100`) | zipfian |
//! | F | 50% read, 50% read-modify-write | zipfian |
//!
//! A YCSB operation becomes state ops as follows: read → `get`; update → `put` of a new
//! value; insert → `put` of the next new key; scan of length `L` → `seek` at the chosen
//! key and `L` `next`s (as YCSB's RocksDB binding calls its iterator: the seek positions
//! on the first record and each `next` steps past one record); read-modify-write →
//! `get` then `put` of the same key. Every state op carries the 0-based number of its
//! YCSB operation as its input event (load: the record number). `next` ops carry the
//! key of their seek.
//!
//! Keys are YCSB's: record number `k` is named `user` followed by the decimal of
//! `|fnv1a64(k)|` (as a signed 64-bit integer, like YCSB's `Utils.hash` with its
//! default unordered inserts and no zero padding), so record 0 is
//! `user6284781860667377211`. Values are `value_size` random bytes (YCSB's default
//! record is 10 fields of 100 bytes; here it is one value, default 1000 bytes).
//!
//! Request distributions pick the record of a read, update, scan or read-modify-write
//! among the records inserted so far (load and run inserts, numbered `0..=last`):
//! - `zipfian`: [`ScrambledZipfian`] with theta 0.99 over `record_count + 2 *
//!   expected_inserts` items, as YCSB sizes it for growth; draws past the last inserted
//!   record are redrawn (after 64 redraws the draw is taken modulo the records, which
//!   only happens when the run inserts far more records than it loaded);
//! - `latest`: YCSB's skewed-latest: `last - r` with `r` zipfian (0.99) over the
//!   `last + 1` records, so the newest record is the hottest. The zipfian's `zeta` is
//!   extended incrementally as records are inserted, as YCSB's does. (YCSB draws `r`
//!   over `last` items, so it never picks record 0; here every record can be picked.)
//! - `uniform`: uniform over `0..=last`.
//!
//! Both phases are iterators that hold only the current op (and, for scans, a counter):
//! memory stays bounded whatever the op count.

use std::fmt;

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use super::{OpKind, StateOp};
use crate::zipf::{fnv1a64, ScrambledZipfian, Zipfian, YCSB_THETA};

/// A YCSB core workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// 50% read, 50% update.
    A,
    /// 95% read, 5% update.
    B,
    /// 100% read.
    C,
    /// 95% read, 5% insert, latest distribution.
    D,
    /// 95% scan, 5% insert.
    E,
    /// 50% read, 50% read-modify-write.
    F,
}

/// The share of each YCSB operation type in a workload (they sum to 1).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Proportions {
    /// Point reads.
    pub read: f64,
    /// Overwrites of an existing record.
    pub update: f64,
    /// Inserts of a new record.
    pub insert: f64,
    /// Range scans.
    pub scan: f64,
    /// Read then overwrite of one record.
    pub rmw: f64,
}

impl Workload {
    /// All six, A to F.
    pub const ALL: [Workload; 6] =
        [Workload::A, Workload::B, Workload::C, Workload::D, Workload::E, Workload::F];

    /// Lowercase letter: "a" to "f".
    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "a",
            Workload::B => "b",
            Workload::C => "c",
            Workload::D => "d",
            Workload::E => "e",
            Workload::F => "f",
        }
    }

    /// Parses "a".."f", "A".."F" or YCSB's file names "workloada".."workloadf".
    pub fn parse(s: &str) -> Option<Workload> {
        let s = s.to_ascii_lowercase();
        let letter = s.strip_prefix("workload").unwrap_or(&s);
        Workload::ALL.into_iter().find(|w| w.name() == letter)
    }

    /// The operation mix.
    pub fn proportions(self) -> Proportions {
        let p = Proportions::default();
        match self {
            Workload::A => Proportions { read: 0.5, update: 0.5, ..p },
            Workload::B => Proportions { read: 0.95, update: 0.05, ..p },
            Workload::C => Proportions { read: 1.0, ..p },
            Workload::D => Proportions { read: 0.95, insert: 0.05, ..p },
            Workload::E => Proportions { scan: 0.95, insert: 0.05, ..p },
            Workload::F => Proportions { read: 0.5, rmw: 0.5, ..p },
        }
    }

    /// YCSB's request distribution for this workload: latest for D, zipfian otherwise.
    pub fn default_distribution(self) -> Distribution {
        if self == Workload::D {
            Distribution::Latest
        } else {
            Distribution::Zipfian
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the record of a read, update, scan or read-modify-write is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Distribution {
    /// YCSB's scrambled zipfian, theta 0.99.
    Zipfian,
    /// YCSB's skewed-latest: recent inserts are hottest.
    Latest,
    /// Uniform over the records.
    Uniform,
}

impl Distribution {
    /// "zipfian", "latest" or "uniform".
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
            Distribution::Uniform => "uniform",
        }
    }

    /// Parses a name as written by [`Distribution::name`].
    pub fn parse(s: &str) -> Option<Distribution> {
        [Distribution::Zipfian, Distribution::Latest, Distribution::Uniform]
            .into_iter()
            .find(|d| d.name() == s)
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A YCSB configuration error: which setting and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YcsbError {
    /// The setting.
    pub field: &'static str,
    /// What is wrong with it.
    pub detail: String,
}

impl fmt::Display for YcsbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "YCSB setting {}: {}", self.field, self.detail)
    }
}

impl std::error::Error for YcsbError {}

/// The parameters of a YCSB run.
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbConfig {
    /// Which workload.
    pub workload: Workload,
    /// Records loaded before the run (>= 1). Default 1000 (YCSB's).
    pub record_count: u64,
    /// YCSB operations in the run phase. Default 1000 (YCSB's).
    pub op_count: u64,
    /// Bytes of each value. Default 1000.
    pub value_size: usize,
    /// Request distribution. Default: [`Workload::default_distribution`].
    pub distribution: Distribution,
    /// Seed of every random choice. Default 42.
    pub seed: u64,
    /// Longest scan (>= 1); lengths are uniform in `1..=max_scan_len`. Default 100.
    pub max_scan_len: u32,
}

impl YcsbConfig {
    /// YCSB's defaults for `workload`.
    pub fn new(workload: Workload) -> Self {
        YcsbConfig {
            workload,
            record_count: 1000,
            op_count: 1000,
            value_size: 1000,
            distribution: workload.default_distribution(),
            seed: 42,
            max_scan_len: 100,
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), YcsbError> {
        let bad = |field, detail: String| Err(YcsbError { field, detail });
        if self.record_count == 0 {
            return bad("record_count", "must be at least 1 (reads need a record)".into());
        }
        if self.max_scan_len == 0 {
            return bad("max_scan_len", "must be at least 1".into());
        }
        if self.value_size > spillway_store::MAX_VALUE_LEN {
            return bad(
                "value_size",
                format!(
                    "{} bytes exceeds the stores' maximum of {}",
                    self.value_size,
                    spillway_store::MAX_VALUE_LEN
                ),
            );
        }
        let inserts = (self.op_count as f64 * self.workload.proportions().insert * 2.0) as u64;
        if self.record_count.checked_add(inserts).is_none() {
            return bad("record_count", "record_count plus expected inserts overflows".into());
        }
        Ok(())
    }

    /// The load phase: `record_count` puts of records `0..record_count`, in order.
    pub fn load_ops(&self) -> Result<LoadOps, YcsbError> {
        self.validate()?;
        Ok(LoadOps {
            rng: SmallRng::seed_from_u64(self.seed ^ LOAD_STREAM),
            next: 0,
            end: self.record_count,
            value_size: self.value_size,
        })
    }

    /// The run phase: `op_count` YCSB operations (more state ops for scans and
    /// read-modify-writes), assuming the load phase ran before.
    pub fn run_ops(&self) -> Result<RunOps, YcsbError> {
        self.validate()?;
        let p = self.workload.proportions();
        let chooser = match self.distribution {
            Distribution::Uniform => Chooser::Uniform,
            Distribution::Zipfian => {
                // YCSB: insertcount + opcount * insertproportion * 2.
                let expected = (self.op_count as f64 * p.insert * 2.0) as u64;
                Chooser::Zipfian(ScrambledZipfian::new(self.record_count + expected, YCSB_THETA))
            }
            Distribution::Latest => {
                Chooser::Latest(Zipfian::new(self.record_count.max(1), YCSB_THETA))
            }
        };
        let cumulative = [
            (p.read, Verb::Read),
            (p.read + p.update, Verb::Update),
            (p.read + p.update + p.insert, Verb::Insert),
            (p.read + p.update + p.insert + p.scan, Verb::Scan),
        ];
        Ok(RunOps {
            rng: SmallRng::seed_from_u64(self.seed ^ RUN_STREAM),
            chooser,
            cumulative,
            next_insert: self.record_count,
            done: 0,
            op_count: self.op_count,
            value_size: self.value_size,
            max_scan_len: self.max_scan_len,
            pending: Pending::None,
        })
    }
}

/// Seeds of the two phases are the config seed xor these, so they differ.
const LOAD_STREAM: u64 = 0x4c4f_4144_0000_0001;
const RUN_STREAM: u64 = 0x5255_4e00_0000_0002;

/// Writes YCSB's name of record `keynum` (`user` + decimal of its hash) into `out`
/// (cleared first).
pub fn write_key(keynum: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    let hash = (fnv1a64(keynum) as i64).wrapping_abs();
    // Writing to a Vec cannot fail.
    let _ = write!(out, "user{hash}");
}

/// YCSB's name of record `keynum`.
pub fn key(keynum: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    write_key(keynum, &mut out);
    out
}

fn random_value<R: RngCore>(rng: &mut R, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// The load phase: `(record number, put)` for every record. See [`YcsbConfig::load_ops`].
#[derive(Clone, Debug)]
pub struct LoadOps {
    rng: SmallRng,
    next: u64,
    end: u64,
    value_size: usize,
}

impl Iterator for LoadOps {
    type Item = (u64, StateOp);

    fn next(&mut self) -> Option<(u64, StateOp)> {
        if self.next >= self.end {
            return None;
        }
        let k = self.next;
        self.next += 1;
        let value = random_value(&mut self.rng, self.value_size);
        Some((k, StateOp { kind: OpKind::Put, key: key(k), value }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

/// A YCSB operation type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Read,
    Update,
    Insert,
    Scan,
    Rmw,
}

#[derive(Clone, Debug)]
enum Chooser {
    Uniform,
    Zipfian(ScrambledZipfian),
    Latest(Zipfian),
}

impl Chooser {
    /// A record number in `0..=last`.
    fn pick(&mut self, rng: &mut SmallRng, last: u64) -> u64 {
        match self {
            Chooser::Uniform => rng.random_range(0..=last),
            Chooser::Zipfian(z) => {
                for _ in 0..64 {
                    let k = z.sample(rng);
                    if k <= last {
                        return k;
                    }
                }
                z.sample(rng) % (last + 1)
            }
            Chooser::Latest(z) => {
                z.grow_to(last + 1);
                last - z.sample(rng)
            }
        }
    }
}

/// State ops still owed for the current YCSB operation.
#[derive(Clone, Debug)]
enum Pending {
    None,
    /// The put of a read-modify-write.
    Put {
        event: u64,
        key: Vec<u8>,
    },
    /// The nexts of a scan.
    Nexts {
        event: u64,
        key: Vec<u8>,
        left: u32,
    },
}

/// The run phase: `(YCSB operation number, state op)`. See [`YcsbConfig::run_ops`].
#[derive(Clone, Debug)]
pub struct RunOps {
    rng: SmallRng,
    chooser: Chooser,
    /// Upper bounds of read, update, insert, scan in `[0, 1)`; the rest is rmw.
    cumulative: [(f64, Verb); 4],
    next_insert: u64,
    done: u64,
    op_count: u64,
    value_size: usize,
    max_scan_len: u32,
    pending: Pending,
}

impl RunOps {
    /// Records inserted so far, load included (the next insert gets this number).
    pub fn records(&self) -> u64 {
        self.next_insert
    }

    fn verb(&mut self) -> Verb {
        let u: f64 = self.rng.random();
        self.cumulative.iter().find(|(bound, _)| u < *bound).map_or(Verb::Rmw, |&(_, v)| v)
    }
}

impl Iterator for RunOps {
    type Item = (u64, StateOp);

    fn next(&mut self) -> Option<(u64, StateOp)> {
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Put { event, key } => {
                let value = random_value(&mut self.rng, self.value_size);
                return Some((event, StateOp { kind: OpKind::Put, key, value }));
            }
            Pending::Nexts { event, key, left } => {
                let op = StateOp { kind: OpKind::Next, key: key.clone(), value: Vec::new() };
                if left > 1 {
                    self.pending = Pending::Nexts { event, key, left: left - 1 };
                }
                return Some((event, op));
            }
        }
        if self.done >= self.op_count {
            return None;
        }
        let event = self.done;
        self.done += 1;
        let last = self.next_insert - 1;
        let op = match self.verb() {
            Verb::Insert => {
                let k = self.next_insert;
                self.next_insert += 1;
                let value = random_value(&mut self.rng, self.value_size);
                StateOp { kind: OpKind::Put, key: key(k), value }
            }
            Verb::Read => {
                let k = self.chooser.pick(&mut self.rng, last);
                StateOp { kind: OpKind::Get, key: key(k), value: Vec::new() }
            }
            Verb::Update => {
                let k = self.chooser.pick(&mut self.rng, last);
                let value = random_value(&mut self.rng, self.value_size);
                StateOp { kind: OpKind::Put, key: key(k), value }
            }
            Verb::Rmw => {
                let k = key(self.chooser.pick(&mut self.rng, last));
                self.pending = Pending::Put { event, key: k.clone() };
                StateOp { kind: OpKind::Get, key: k, value: Vec::new() }
            }
            Verb::Scan => {
                let k = key(self.chooser.pick(&mut self.rng, last));
                let len = self.rng.random_range(1..=self.max_scan_len);
                self.pending = Pending::Nexts { event, key: k.clone(), left: len };
                StateOp { kind: OpKind::Seek, key: k, value: Vec::new() }
            }
        };
        Some((event, op))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn cfg(w: Workload, records: u64, ops: u64) -> YcsbConfig {
        YcsbConfig { record_count: records, op_count: ops, value_size: 16, ..YcsbConfig::new(w) }
    }

    /// Groups the run ops by YCSB operation, classifying each, and checks on the way
    /// that reads, updates, rmws and scans target records inserted before, and inserts
    /// come in record order. Returns counts by verb and, for each non-insert, how far
    /// its record is behind the newest one.
    fn classify(c: &YcsbConfig) -> (HashMap<&'static str, u64>, Vec<u64>, Vec<u32>) {
        let max_key = c.record_count + c.op_count;
        let names: HashMap<Vec<u8>, u64> = (0..max_key).map(|k| (key(k), k)).collect();
        let mut next_insert = c.record_count;
        let mut counts = HashMap::new();
        let mut recency = Vec::new();
        let mut scan_lens = Vec::new();
        let ops: Vec<(u64, StateOp)> = c.run_ops().unwrap().collect();
        let mut i = 0;
        let mut expected_event = 0;
        while i < ops.len() {
            let (ev, first) = &ops[i];
            assert_eq!(*ev, expected_event, "op {i}: YCSB operations are numbered in order");
            expected_event += 1;
            let group = ops[i..].iter().take_while(|(e, _)| e == ev).count();
            let k = names[&first.key];
            let verb = match (first.kind, group) {
                (OpKind::Put, 1) if k == next_insert => {
                    next_insert += 1;
                    "insert"
                }
                (OpKind::Put, 1) => "update",
                (OpKind::Get, 1) => "read",
                (OpKind::Get, 2) => {
                    let put = &ops[i + 1].1;
                    assert_eq!((put.kind, &put.key), (OpKind::Put, &first.key), "rmw = get + put");
                    assert_eq!(put.value.len(), c.value_size);
                    "rmw"
                }
                (OpKind::Seek, n) => {
                    for (_, o) in &ops[i + 1..i + n] {
                        assert_eq!((o.kind, &o.key), (OpKind::Next, &first.key));
                    }
                    scan_lens.push((n - 1) as u32);
                    "scan"
                }
                other => panic!("op {i}: unexpected group {other:?}"),
            };
            if verb != "insert" {
                assert!(k < next_insert, "op {i}: {verb} of record {k} not inserted yet");
                recency.push(next_insert - 1 - k);
            }
            if first.kind == OpKind::Put {
                assert_eq!(first.value.len(), c.value_size);
            }
            *counts.entry(verb).or_insert(0) += 1;
            i += group;
        }
        assert_eq!(expected_event, c.op_count);
        (counts, recency, scan_lens)
    }

    #[test]
    fn keys_are_ycsbs() {
        // The first key YCSB loads with its default settings.
        assert_eq!(key(0), b"user6284781860667377211");
        let mut buf = b"junk".to_vec();
        write_key(1, &mut buf);
        assert!(buf.starts_with(b"user") && buf[4..].iter().all(u8::is_ascii_digit));
        assert_ne!(buf, key(0));
    }

    #[test]
    fn mixes_match_the_workload_proportions() {
        let ops = 40_000;
        for w in Workload::ALL {
            for d in [Distribution::Zipfian, Distribution::Latest, Distribution::Uniform] {
                let c = YcsbConfig { distribution: d, ..cfg(w, 2000, ops) };
                let (counts, _, _) = classify(&c);
                let p = w.proportions();
                let want = [
                    ("read", p.read),
                    ("update", p.update),
                    ("insert", p.insert),
                    ("scan", p.scan),
                    ("rmw", p.rmw),
                ];
                for (verb, share) in want {
                    let got = counts.get(verb).copied().unwrap_or(0) as f64 / ops as f64;
                    // About 5 standard deviations at 40k draws.
                    assert!((got - share).abs() < 0.013, "{w}/{d}: {verb} {got:.4} vs {share}");
                    if share == 0.0 {
                        assert_eq!(got, 0.0, "{w}/{d}: no {verb}");
                    }
                }
            }
        }
    }

    #[test]
    fn streams_are_deterministic_per_seed() {
        for w in Workload::ALL {
            let c = cfg(w, 500, 3000);
            let a: Vec<_> = c.load_ops().unwrap().chain(c.run_ops().unwrap()).collect();
            let b: Vec<_> = c.load_ops().unwrap().chain(c.run_ops().unwrap()).collect();
            assert_eq!(a, b, "{w}");
            let other = YcsbConfig { seed: 43, ..c.clone() };
            let o: Vec<_> = other.run_ops().unwrap().collect();
            assert_ne!(o, c.run_ops().unwrap().collect::<Vec<_>>(), "{w}: seed changes the run");
        }
    }

    #[test]
    fn load_puts_every_record_once() {
        let c = cfg(Workload::A, 3000, 0);
        let load: Vec<_> = c.load_ops().unwrap().collect();
        assert_eq!(load.len(), 3000);
        assert_eq!(c.load_ops().unwrap().size_hint(), (3000, Some(3000)));
        for (i, (ev, op)) in load.iter().enumerate() {
            assert_eq!(
                (*ev, op.kind, &op.key, op.value.len()),
                (i as u64, OpKind::Put, &key(i as u64), 16)
            );
        }
        let distinct: std::collections::HashSet<_> = load.iter().map(|(_, o)| &o.key).collect();
        assert_eq!(distinct.len(), 3000);
        assert_eq!(c.run_ops().unwrap().count(), 0);
    }

    #[test]
    fn latest_favours_recent_inserts() {
        let c = cfg(Workload::D, 10_000, 40_000);
        let (counts, recency, _) = classify(&c);
        let recent = |r: &[u64]| r.iter().filter(|&&x| x < 1000).count() as f64 / r.len() as f64;
        // Zipfian 0.99 over ~11k records puts ~3/4 of the mass on the newest 1000.
        assert!(recent(&recency) > 0.6, "latest: {}", recent(&recency));
        let newest = recency.iter().filter(|&&x| x == 0).count() as f64 / recency.len() as f64;
        assert!(newest > 0.08, "the newest record is the hottest: {newest}");
        assert!(counts["insert"] > 1500);
        let u = YcsbConfig { distribution: Distribution::Uniform, ..c };
        let (_, recency_u, _) = classify(&u);
        assert!(recent(&recency_u) < 0.15, "uniform: {}", recent(&recency_u));
    }

    #[test]
    fn e_emits_seek_next_runs_of_uniform_length() {
        let c = cfg(Workload::E, 1000, 20_000);
        let (counts, _, lens) = classify(&c);
        assert_eq!(lens.len() as u64, counts["scan"]);
        assert!(lens.iter().all(|&l| (1..=100).contains(&l)));
        assert!(lens.contains(&1) && lens.contains(&100));
        let mean = lens.iter().map(|&l| f64::from(l)).sum::<f64>() / lens.len() as f64;
        assert!((mean - 50.5).abs() < 1.5, "mean scan length {mean}");
        let short = YcsbConfig { max_scan_len: 3, ..c };
        let (_, _, lens) = classify(&short);
        assert!(lens.iter().all(|&l| (1..=3).contains(&l)));
    }

    #[test]
    fn zipfian_keys_are_skewed() {
        let c = cfg(Workload::C, 1000, 50_000);
        let mut hits: HashMap<Vec<u8>, u64> = HashMap::new();
        for (_, op) in c.run_ops().unwrap() {
            *hits.entry(op.key).or_default() += 1;
        }
        let max = *hits.values().max().unwrap() as f64 / 50_000.0;
        let z = Zipfian::new(1000, YCSB_THETA);
        // The hottest record gets at least rank 0's share.
        assert!(max >= z.probability(0) * 0.9, "{max}");
        let u = YcsbConfig { distribution: Distribution::Uniform, ..c };
        let mut hits: HashMap<Vec<u8>, u64> = HashMap::new();
        for (_, op) in u.run_ops().unwrap() {
            *hits.entry(op.key).or_default() += 1;
        }
        assert!((*hits.values().max().unwrap() as f64) < 50_000.0 * 0.003);
    }

    #[test]
    fn growing_zipfian_equals_a_fixed_one() {
        let mut g = Zipfian::new(1, YCSB_THETA);
        for n in 2..=777 {
            g.grow_to(n);
        }
        let z = Zipfian::new(777, YCSB_THETA);
        let mut r1 = SmallRng::seed_from_u64(5);
        let mut r2 = SmallRng::seed_from_u64(5);
        for _ in 0..10_000 {
            assert_eq!(g.sample(&mut r1), z.sample(&mut r2));
        }
        let one = Zipfian::new(1, YCSB_THETA);
        assert!((0..100).all(|_| one.sample(&mut r1) == 0));
    }

    #[test]
    fn names_parse_and_bad_settings_are_rejected() {
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.name()), Some(w));
            assert_eq!(Workload::parse(&format!("workload{}", w.name().to_uppercase())), Some(w));
            let p = w.proportions();
            assert!((p.read + p.update + p.insert + p.scan + p.rmw - 1.0).abs() < 1e-12);
        }
        assert_eq!(Workload::parse("g"), None);
        assert_eq!(Distribution::parse("latest"), Some(Distribution::Latest));
        assert_eq!(Distribution::parse("hotspot"), None);
        let bad = [
            YcsbConfig { record_count: 0, ..YcsbConfig::new(Workload::A) },
            YcsbConfig { max_scan_len: 0, ..YcsbConfig::new(Workload::E) },
            YcsbConfig {
                value_size: spillway_store::MAX_VALUE_LEN + 1,
                ..YcsbConfig::new(Workload::A)
            },
            YcsbConfig { record_count: u64::MAX, op_count: 10, ..YcsbConfig::new(Workload::D) },
        ];
        for c in bad {
            let e = c.run_ops().unwrap_err();
            assert!(e.to_string().starts_with("YCSB setting "), "{e}");
            assert!(c.load_ops().is_err());
        }
    }

    /// Load then run each workload through the replayer into a MemStore: no errors, and
    /// the records end up with the values of their last put.
    #[test]
    fn replays_into_a_store() {
        use crate::workload::replay::{infallible, replay, store_options, ReplayConfig};
        for w in Workload::ALL {
            let c = cfg(w, 300, 2000);
            let dir = tempfile::tempdir().unwrap();
            let mut store = spillway_store::MemStore::open(store_options(dir.path())).unwrap();
            let rc = ReplayConfig::default();
            let load = replay(&mut store, infallible(c.load_ops().unwrap()), &rc).unwrap();
            assert_eq!(load.ops, 300);
            let run = replay(&mut store, infallible(c.run_ops().unwrap()), &rc).unwrap();
            let state_ops = c.run_ops().unwrap().count() as u64;
            assert_eq!(run.ops, state_ops, "{w}");
            let mut last: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
            for (_, op) in c.load_ops().unwrap().chain(c.run_ops().unwrap()) {
                if op.kind == OpKind::Put {
                    last.insert(op.key, op.value);
                }
            }
            let ns = spillway_store::StateStore::namespace(&store, "state").unwrap();
            for (k, v) in &last {
                let got = spillway_store::StateStoreExt::get(&mut store, ns, k).unwrap();
                assert_eq!(got.as_ref(), Some(v));
            }
        }
    }
}
