//! Per-update cost of one partition's sliding-window MEDIAN state over hashlog, two ways:
//!
//! * `ostree`: the order-statistics tree of `spillway_store::collections::ostree` (O(log n)
//!   store work per update: the header and a root-to-leaf path of nodes of about 1 KiB,
//!   rewritten by `put`);
//! * `whole_value`: today's `MEDIAN` state of `AggSet` — one sorted value of the whole
//!   window (`[value f64][count u64]` per distinct value), rewritten by the store's
//!   read-modify-write on every insert and evict (O(n) bytes per update).
//!
//! For windows of n = 10^3, 10^4 and 10^5 events (10^5 events in a 7-day window is one
//! event every 6 s), each benchmark slides the window by one event per iteration: insert
//! the newest event, evict the oldest, so the window stays at n. Values are amounts in
//! cents below 10^4 (almost all distinct). `slide` is the update alone; `slide+median`
//! also reads the median (the tree: header + two rank selections; the whole value: a get
//! and a walk of the sorted entries).
//!
//! After criterion's report it prints mean ns per slide, from the same runs, and the
//! ratio whole_value / ostree.
//!
//! Run: `cargo bench -p spillway-engine --bench ostree [-- --measurement-time 2]`.

use spillway_store::StateStoreExt;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spillway_engine::aggregate::{AggKind, AggSet};
use spillway_engine::value::{DataType, EventKey, Value};
use spillway_store::collections::ostree::{decode_f64_key, f64_key, OsTree};
use spillway_store::{NamespaceSpec, Ns, Rmw, StateStore, StoreKind, StoreOptions};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// 7 days in milliseconds.
const WINDOW_MS: i64 = 7 * 24 * 3600 * 1000;

/// (n, method, variant) -> (iterations, total time) over every call criterion made.
type Record = RefCell<BTreeMap<(usize, &'static str, &'static str), (u64, Duration)>>;

/// One partition's window: events in arrival order.
struct Window {
    events: VecDeque<(EventKey, f64)>,
    seq: u64,
    step_ms: i64,
    rng: SmallRng,
}

impl Window {
    fn new(n: usize) -> Window {
        let mut w = Window {
            events: VecDeque::with_capacity(n + 1),
            seq: 0,
            step_ms: WINDOW_MS / n as i64,
            rng: SmallRng::seed_from_u64(0x5eed ^ n as u64),
        };
        for _ in 0..n {
            let e = w.next_event();
            w.events.push_back(e);
        }
        w
    }

    fn next_event(&mut self) -> (EventKey, f64) {
        let key = EventKey { time: self.seq as i64 * self.step_ms, seq: self.seq };
        self.seq += 1;
        (key, f64::from(self.rng.random_range(0..1_000_000u32)) / 100.0)
    }

    /// Appends the next event and removes the oldest: (new, old).
    fn slide(&mut self) -> ((EventKey, f64), (EventKey, f64)) {
        let new = self.next_event();
        self.events.push_back(new);
        let old = self.events.pop_front().expect("window of n >= 1 events");
        (new, old)
    }
}

fn open_store(dir: &std::path::Path) -> (Box<dyn StateStore>, Ns) {
    let opts =
        StoreOptions::new(dir).memory_budget(256 << 20).namespace(NamespaceSpec::list("median"));
    let store = StoreKind::HashLog.open(opts).expect("open hashlog");
    let ns = store.namespace("median").expect("namespace");
    (store, ns)
}

/// The partition key: `Value::encode_key` of card 42 (self-delimiting, as the tree's
/// prefixes must be).
fn partition() -> Vec<u8> {
    let mut p = Vec::new();
    Value::Int(42).encode_key(&mut p);
    p
}

// ---------------------------------------------------------------------------------------
// The tree.

struct TreeState {
    _dir: tempfile::TempDir,
    store: Box<dyn StateStore>,
    tree: OsTree,
    prefix: Vec<u8>,
    key: Vec<u8>,
    lo: Vec<u8>,
    hi: Vec<u8>,
}

impl TreeState {
    fn new(w: &Window) -> TreeState {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, ns) = open_store(dir.path());
        let mut s = TreeState {
            _dir: dir,
            store,
            tree: OsTree::new(ns),
            prefix: partition(),
            key: Vec::new(),
            lo: Vec::new(),
            hi: Vec::new(),
        };
        for &(_, v) in &w.events {
            s.add(v, 1);
        }
        s
    }

    fn add(&mut self, v: f64, delta: i64) {
        self.key.clear();
        f64_key(v, &mut self.key);
        self.tree.add(&mut *self.store, &self.prefix, &self.key, delta).expect("tree add");
    }

    fn slide(&mut self, w: &mut Window) {
        let ((_, new), (_, old)) = w.slide();
        self.add(new, 1);
        self.add(old, -1);
    }

    fn median(&mut self) -> f64 {
        let s = &mut *self.store;
        let n = self.tree.total(s, &self.prefix).expect("total");
        let rank = 0.5 * (n - 1) as f64;
        let (lo_i, hi_i) = (rank.floor() as u64, rank.ceil() as u64);
        self.tree.select_into(s, &self.prefix, lo_i, &mut self.lo).expect("select");
        self.tree.select_into(s, &self.prefix, hi_i, &mut self.hi).expect("select");
        let a = decode_f64_key(&self.lo).expect("f64 key");
        let b = decode_f64_key(&self.hi).expect("f64 key");
        if a == b {
            a
        } else {
            a + (rank - rank.floor()) * (b - a)
        }
    }

    /// (height, nodes, bytes of all nodes and the header).
    fn shape(&mut self) -> (u32, u64, usize) {
        let st = self.tree.stats(&mut *self.store, &self.prefix).expect("stats");
        let mut bytes = 0;
        let ns = self.tree.ns();
        // Hashlog serves prefix scans by walking its index: fine outside the timing.
        let _ = self.store.scan_prefix(ns, &self.prefix, &mut |_, v| {
            bytes += v.len();
            true
        });
        (st.height, st.nodes, bytes)
    }
}

// ---------------------------------------------------------------------------------------
// The whole-value state (AggSet MEDIAN), as the runtime keeps it: one value per partition.

struct WholeState {
    _dir: tempfile::TempDir,
    store: Box<dyn StateStore>,
    ns: Ns,
    set: AggSet,
    prefix: Vec<u8>,
    buf: Vec<u8>,
    results: Vec<Value>,
}

/// The documented FORMAT of an `AggSet` of one MEDIAN: `[rows u64][len u32][n u64]` then
/// `[value f64][count u64]` per distinct value in `f64::total_cmp` order. Building it
/// directly avoids n inserts of O(n) each.
fn median_state(values: impl Iterator<Item = f64>) -> Vec<u8> {
    let mut sorted: Vec<f64> = values.collect();
    sorted.sort_by(f64::total_cmp);
    let mut entries: Vec<(f64, u64)> = Vec::new();
    for v in &sorted {
        match entries.last_mut() {
            Some((x, c)) if x.total_cmp(v).is_eq() => *c += 1,
            _ => entries.push((*v, 1)),
        }
    }
    let mut out = Vec::with_capacity(20 + 16 * entries.len());
    out.extend_from_slice(&(sorted.len() as u64).to_le_bytes());
    out.extend_from_slice(&((8 + 16 * entries.len()) as u32).to_le_bytes());
    out.extend_from_slice(&(sorted.len() as u64).to_le_bytes());
    for (v, c) in entries {
        out.extend_from_slice(&v.to_le_bytes());
        out.extend_from_slice(&c.to_le_bytes());
    }
    out
}

impl WholeState {
    fn new(w: &Window) -> WholeState {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, ns) = open_store(dir.path());
        let set = AggSet::new(&[(AggKind::Median, Some(DataType::Float))]);
        let prefix = partition();
        store.put(ns, &prefix, &median_state(w.events.iter().map(|e| e.1))).expect("put");
        WholeState { _dir: dir, store, ns, set, prefix, buf: Vec::new(), results: Vec::new() }
    }

    fn slide(&mut self, w: &mut Window) {
        let ((k_new, v_new), (k_old, v_old)) = w.slide();
        let set = &self.set;
        let (a_new, a_old) = ([Value::Float(v_new)], [Value::Float(v_old)]);
        self.store
            .rmw(self.ns, &self.prefix, &mut |old, out| {
                set.insert(old, out, k_new, &a_new, k_new);
                Rmw::Put
            })
            .expect("rmw insert");
        self.store
            .rmw(self.ns, &self.prefix, &mut |old, out| {
                let old = old.expect("state present");
                if set.evict(old, out, k_old, &a_old) {
                    Rmw::Delete
                } else {
                    Rmw::Put
                }
            })
            .expect("rmw evict");
    }

    fn median(&mut self) -> f64 {
        assert!(self.store.get_into(self.ns, &self.prefix, &mut self.buf).expect("get"));
        self.results.clear();
        self.set.results(&self.buf, &mut self.results);
        match self.results[0] {
            Value::Float(m) => m,
            ref other => panic!("median is {other:?}"),
        }
    }
}

/// Checks the hand-built state against `AggSet` inserts on a small window.
fn check_median_state() {
    let set = AggSet::new(&[(AggKind::Median, Some(DataType::Float))]);
    let w = Window::new(50);
    let mut state: Option<Vec<u8>> = None;
    for &(k, v) in &w.events {
        let mut out = Vec::new();
        set.insert(state.as_deref(), &mut out, k, &[Value::Float(v)], k);
        state = Some(out);
    }
    assert_eq!(state.expect("state"), median_state(w.events.iter().map(|e| e.1)));
}

// ---------------------------------------------------------------------------------------

fn record(rec: &Record, key: (usize, &'static str, &'static str), iters: u64, d: Duration) {
    let mut r = rec.borrow_mut();
    let e = r.entry(key).or_default();
    e.0 += iters;
    e.1 += d;
}

fn bench_size(c: &mut Criterion, n: usize, rec: &Record) {
    let t0 = Instant::now();
    let mut tw = Window::new(n);
    let mut tree = TreeState::new(&tw);
    let mut ww = Window::new(n);
    let mut whole = WholeState::new(&ww);
    let (tm, wm) = (tree.median(), whole.median());
    assert_eq!(tm, wm, "the two states disagree on the median of the same window");
    let (height, nodes, tree_bytes) = tree.shape();
    let whole_bytes = whole.store.get(whole.ns, &whole.prefix).expect("get").map_or(0, |v| v.len());
    println!(
        "n = {n}: tree height {height}, {nodes} nodes, {tree_bytes} bytes ({} per node); \
         whole value {whole_bytes} bytes; setup {:.2?}",
        tree_bytes / nodes.max(1) as usize,
        t0.elapsed()
    );

    let mut g = c.benchmark_group(format!("median_window/n={n}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("ostree/slide", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                tree.slide(&mut tw);
            }
            let d = t.elapsed();
            record(rec, (n, "ostree", "slide"), iters, d);
            d
        });
    });
    g.bench_function("ostree/slide+median", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                tree.slide(&mut tw);
                black_box(tree.median());
            }
            let d = t.elapsed();
            record(rec, (n, "ostree", "slide+median"), iters, d);
            d
        });
    });
    g.bench_function("whole_value/slide", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                whole.slide(&mut ww);
            }
            let d = t.elapsed();
            record(rec, (n, "whole_value", "slide"), iters, d);
            d
        });
    });
    g.bench_function("whole_value/slide+median", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                whole.slide(&mut ww);
                black_box(whole.median());
            }
            let d = t.elapsed();
            record(rec, (n, "whole_value", "slide+median"), iters, d);
            d
        });
    });
    g.finish();
    // Both windows slid by different counts; each state must still match its window.
    let tree_check = tree.median();
    let mut fresh = WholeState::new(&tw);
    assert_eq!(tree_check, fresh.median(), "tree drifted from its window");
    let whole_check = whole.median();
    let mut fresh = TreeState::new(&ww);
    assert_eq!(whole_check, fresh.median(), "whole value drifted from its window");
}

fn print_table(rec: &BTreeMap<(usize, &'static str, &'static str), (u64, Duration)>) {
    let mean = |n, m, v| {
        rec.get(&(n, m, v)).filter(|(i, _)| *i > 0).map(|(i, d)| d.as_nanos() as f64 / *i as f64)
    };
    println!();
    println!("mean ns per slide (insert newest + evict oldest), hashlog, one partition:");
    println!("{:>8} {:>14} {:>14} {:>14} {:>10}", "n", "variant", "ostree", "whole_value", "ratio");
    for n in SIZES {
        for v in ["slide", "slide+median"] {
            if let (Some(t), Some(w)) = (mean(n, "ostree", v), mean(n, "whole_value", v)) {
                println!("{n:>8} {v:>14} {t:>14.0} {w:>14.0} {:>9.1}x", w / t);
            }
        }
    }
}

fn main() {
    check_median_state();
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let rec: Record = RefCell::new(BTreeMap::new());
    for n in SIZES {
        bench_size(&mut c, n, &rec);
    }
    c.final_summary();
    print_table(&rec.borrow());
}
