//! Tests for the aggregates: a differential proptest against brute-force recomputation over
//! the window contents, edge cases, and corrupt-state handling.

use super::codec::{put_scalar_key, Scalar};
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn k(time: i64, seq: u64) -> EventKey {
    EventKey { time, seq }
}

const LOW: EventKey = EventKey { time: i64::MIN, seq: 0 };

// ---------------------------------------------------------------------------------------
// Oracle

/// Exactly rounded float sum (Shewchuk's partials, as Python's `math.fsum`), finite inputs.
fn fsum(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut partials: Vec<f64> = Vec::new();
    for mut x in xs {
        let mut i = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[i] = lo;
                i += 1;
            }
            x = hi;
        }
        partials.truncate(i);
        partials.push(x);
    }
    // Summing the non-overlapping partials from the largest is within an ulp or so.
    partials.iter().rev().fold(0.0, |a, b| a + b)
}

fn nums(vals: &[&Value]) -> Vec<f64> {
    vals.iter().filter_map(|v| v.as_f64()).collect()
}

/// Non-finite handling as IEEE addition: NaN wins, +inf and -inf together give NaN.
fn float_total(xs: &[f64]) -> f64 {
    let nan = xs.iter().any(|x| x.is_nan());
    let pinf = xs.contains(&f64::INFINITY);
    let ninf = xs.contains(&f64::NEG_INFINITY);
    if nan || (pinf && ninf) {
        f64::NAN
    } else if pinf {
        f64::INFINITY
    } else if ninf {
        f64::NEG_INFINITY
    } else {
        fsum(xs.iter().copied())
    }
}

fn cmp_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    match (a, b) {
        (Value::Int(a), Value::Int(b)) => a.cmp(b),
        (Value::Float(a), Value::Float(b)) => a.total_cmp(b),
        (Value::Str(a), Value::Str(b)) => a.cmp(b),
        (Value::Bool(a), Value::Bool(b)) => a.cmp(b),
        _ => panic!("mixed types {a:?} {b:?}"),
    }
}

fn brute(kind: AggKind, ty: Option<DataType>, window: &[&Value]) -> Value {
    let present: Vec<&Value> = window.iter().copied().filter(|v| !v.is_null()).collect();
    let n = present.len();
    match kind {
        AggKind::CountStar => Value::Int(window.len() as i64),
        AggKind::Count => Value::Int(n as i64),
        AggKind::CountDistinct => {
            let set: BTreeSet<Vec<u8>> = present
                .iter()
                .map(|v| {
                    let mut b = Vec::new();
                    v.encode_key(&mut b);
                    b
                })
                .collect();
            Value::Int(set.len() as i64)
        }
        _ if n == 0 && !matches!(kind, AggKind::FirstValue | AggKind::LastValue) => Value::Null,
        AggKind::Sum | AggKind::Avg if ty == Some(DataType::Int) => {
            let s: i128 = present.iter().map(|v| i128::from(int(v))).sum();
            if kind == AggKind::Avg {
                Value::Float(s as f64 / n as f64)
            } else {
                i64::try_from(s).map_or(Value::Float(s as f64), Value::Int)
            }
        }
        AggKind::Sum => Value::Float(float_total(&nums(&present))),
        AggKind::Avg => Value::Float(float_total(&nums(&present)) / n as f64),
        AggKind::Min => (*present.iter().min_by(|a, b| cmp_values(a, b)).unwrap()).clone(),
        AggKind::Max => {
            // The newest of equal maxima; equal values are indistinguishable anyway.
            (*present.iter().max_by(|a, b| cmp_values(a, b)).unwrap()).clone()
        }
        AggKind::VarSamp | AggKind::StddevSamp => {
            if n < 2 {
                return Value::Null;
            }
            let xs = nums(&present);
            if xs.iter().any(|x| !x.is_finite()) {
                return Value::Float(f64::NAN);
            }
            let mean = fsum(xs.iter().copied()) / n as f64;
            let var = fsum(xs.iter().map(|x| (x - mean) * (x - mean))) / (n - 1) as f64;
            Value::Float(if kind == AggKind::StddevSamp { var.sqrt() } else { var })
        }
        AggKind::Median | AggKind::PercentileCont(_) => {
            let p = if let AggKind::PercentileCont(p) = kind { p } else { 0.5 };
            let mut xs = nums(&present);
            xs.sort_by(f64::total_cmp);
            let rank = p * (n - 1) as f64;
            let (lo, hi) = (rank.floor(), rank.ceil());
            let (a, b) = (xs[lo as usize], xs[hi as usize]);
            Value::Float(if lo == hi || a == b { a } else { a + (rank - lo) * (b - a) })
        }
        AggKind::FirstValue => window.first().map_or(Value::Null, |v| (*v).clone()),
        AggKind::LastValue => window.last().map_or(Value::Null, |v| (*v).clone()),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an int: {other:?}"),
    }
}

/// Compares a result with the oracle's. `scale2` bounds the squared magnitude of the data
/// seen (for the variance tolerance).
fn check(kind: AggKind, got: &Value, want: &Value, scale2: f64) -> Result<(), String> {
    let ok = match (got, want) {
        (Value::Float(g), Value::Float(w)) => {
            if w.is_nan() || g.is_nan() {
                w.is_nan() && g.is_nan()
            } else if w.is_infinite() || g.is_infinite() {
                g == w
            } else {
                match kind {
                    AggKind::VarSamp => (g - w).abs() <= 1e-9 * w.abs() + 1e-12 * scale2,
                    AggKind::StddevSamp => (g * g - w * w).abs() <= 1e-9 * (w * w) + 1e-12 * scale2,
                    AggKind::Min | AggKind::Max | AggKind::FirstValue | AggKind::LastValue => {
                        g.to_bits() == w.to_bits()
                    }
                    _ => (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                }
            }
        }
        (g, w) => g == w,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{}: got {got:?}, want {want:?}", kind.name()))
    }
}

// ---------------------------------------------------------------------------------------
// Differential model

/// Columns of the test events.
const COLS: [DataType; 5] =
    [DataType::Int, DataType::Int, DataType::Float, DataType::Str, DataType::Bool];
/// Column 1 holds huge ints: variance over them is left out (see the numerics notes).
const BIG_INT_COL: usize = 1;

fn all_kinds() -> Vec<AggKind> {
    vec![
        AggKind::CountStar,
        AggKind::Count,
        AggKind::CountDistinct,
        AggKind::Sum,
        AggKind::Avg,
        AggKind::Min,
        AggKind::Max,
        AggKind::StddevSamp,
        AggKind::VarSamp,
        AggKind::Median,
        AggKind::PercentileCont(0.0),
        AggKind::PercentileCont(1.0),
        AggKind::PercentileCont(0.3),
        AggKind::FirstValue,
        AggKind::LastValue,
    ]
}

/// Every valid (aggregate, column) pair.
fn model_set() -> (AggSet, Vec<usize>) {
    let mut aggs = vec![(AggKind::CountStar, None)];
    let mut cols = vec![0];
    for (c, &ty) in COLS.iter().enumerate() {
        for kind in all_kinds() {
            if kind == AggKind::CountStar || kind.result_type(Some(ty)).is_err() {
                continue;
            }
            if c == BIG_INT_COL && matches!(kind, AggKind::VarSamp | AggKind::StddevSamp) {
                continue;
            }
            aggs.push((kind, Some(ty)));
            cols.push(c);
        }
    }
    (AggSet::try_new(&aggs).unwrap(), cols)
}

#[derive(Clone, Debug)]
enum Op {
    /// A new event: same time as the previous one (`tie`), or a late one `late` time units
    /// before the newest.
    Insert {
        tie: bool,
        late: Option<u8>,
        vals: [u8; 5],
        nulls: u8,
    },
    Evict(u8),
    /// Moves the horizon to the key of the `n`-th newest event (or past everything).
    Horizon(u8),
    /// On a copy: remove up to `k` of the newest events (those at/after the horizon) in an
    /// order picked by `order`, check, then re-add up to `readd` evicted events, checking
    /// after each.
    Late {
        k: u8,
        order: u8,
        readd: u8,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), prop::option::weighted(0.2, 0u8..6), any::<[u8; 5]>(), any::<u8>())
            .prop_map(|(tie, late, vals, nulls)| Op::Insert { tie, late, vals, nulls }),
        3 => (1u8..4).prop_map(Op::Evict),
        1 => (0u8..8).prop_map(Op::Horizon),
        2 => (1u8..6, any::<u8>(), 0u8..4).prop_map(|(k, order, readd)| Op::Late { k, order, readd }),
    ]
}

/// The operations on a window that never evicts (`UNBOUNDED PRECEDING`): no evictions,
/// so nothing to re-add on a late-result copy either.
fn append_only_op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<bool>(), prop::option::weighted(0.2, 0u8..6), any::<[u8; 5]>(), any::<u8>())
            .prop_map(|(tie, late, vals, nulls)| Op::Insert { tie, late, vals, nulls }),
        2 => (0u8..8).prop_map(Op::Horizon),
        2 => (1u8..6, any::<u8>()).prop_map(|(k, order)| Op::Late { k, order, readd: 0 }),
    ]
}

/// Column values from random bytes: small ints (ties likely), huge ints, floats with
/// occasional specials, short strings (with a NUL sometimes), bools.
fn values(vals: [u8; 5], nulls: u8) -> Vec<Value> {
    let small = Value::Int(i64::from(vals[0] % 11) - 5);
    let big = Value::Int(match vals[1] % 4 {
        0 => i64::MAX - i64::from(vals[1]),
        1 => i64::MIN + i64::from(vals[1]),
        _ => i64::from(vals[1]) * 1_000_000_007,
    });
    let float = Value::Float(match vals[2] {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -0.0,
        4 => 0.0,
        5..=20 => 1e6 + f64::from(vals[2]) * 0.37,
        b => (f64::from(b) - 128.0) * 0.731 + 1.0 / f64::from(b),
    });
    let s = match vals[3] % 6 {
        0 => "",
        1 => "a",
        2 => "a\0b",
        3 => "b",
        4 => "ab",
        _ => "zz",
    };
    let b = Value::Bool(vals[4].is_multiple_of(2));
    let mut row = vec![small, big, float, Value::Str(s.into()), b];
    for (i, v) in row.iter_mut().enumerate() {
        if nulls & (1 << i) != 0 && nulls & 0x80 != 0 {
            *v = Value::Null;
        }
    }
    row
}

struct Model {
    set: AggSet,
    cols: Vec<usize>,
    window: BTreeMap<EventKey, Vec<Value>>,
    state: Option<Vec<u8>>,
    horizon: EventKey,
    newest_time: i64,
    seq: u64,
    last_evicted: Option<EventKey>,
    evicted: Vec<(EventKey, Vec<Value>)>,
    scale2: f64,
}

impl Model {
    fn new() -> Model {
        let (set, cols) = model_set();
        Model::with_set(set, cols)
    }

    fn with_set(set: AggSet, cols: Vec<usize>) -> Model {
        Model {
            set,
            cols,
            window: BTreeMap::new(),
            state: None,
            horizon: LOW,
            newest_time: 0,
            seq: 0,
            last_evicted: None,
            evicted: Vec::new(),
            scale2: 1.0,
        }
    }

    fn args(&self, row: &[Value]) -> Vec<Value> {
        self.cols.iter().map(|&c| row[c].clone()).collect()
    }

    fn compare(
        &self,
        state: Option<&[u8]>,
        window: &BTreeMap<EventKey, Vec<Value>>,
        what: &str,
    ) -> Result<(), TestCaseError> {
        let mut got = Vec::new();
        match state {
            Some(s) => self
                .set
                .try_results(s, &mut got)
                .map_err(|e| TestCaseError::fail(format!("{what}: results failed: {e}")))?,
            None => self.set.empty_results(&mut got),
        }
        prop_assert_eq!(got.len(), self.set.aggs().len());
        for (i, &(kind, ty)) in self.set.aggs().iter().enumerate() {
            let col: Vec<&Value> = window.values().map(|row| &row[self.cols[i]]).collect();
            let want = brute(kind, ty, &col);
            check(kind, &got[i], &want, self.scale2).map_err(|m| {
                TestCaseError::fail(format!(
                    "{what}: aggregate #{i} over {:?} column {}: {m}; window {:?}",
                    ty, self.cols[i], col
                ))
            })?;
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Insert { tie, late, vals, nulls } => {
                let row = values(vals, nulls);
                if let Value::Float(f) = row[2] {
                    if f.is_finite() {
                        self.scale2 = self.scale2.max(f * f);
                    }
                }
                let mut time = if tie || self.seq == 0 {
                    self.newest_time
                } else {
                    self.newest_time + 1 + i64::from(vals[0] % 3)
                };
                if let Some(d) = late {
                    time = self.newest_time - i64::from(d);
                }
                let mut key = k(time, self.seq);
                // Never behind an evicted event (evictions stay in key order).
                if self.last_evicted.is_some_and(|e| key <= e) {
                    key = k(self.newest_time, self.seq);
                }
                self.seq += 1;
                self.newest_time = self.newest_time.max(key.time);
                let args = self.args(&row);
                let mut out = Vec::new();
                self.set
                    .try_insert(self.state.as_deref(), &mut out, key, &args, self.horizon)
                    .map_err(|e| TestCaseError::fail(format!("insert: {e}")))?;
                self.state = Some(out);
                self.window.insert(key, row);
            }
            Op::Evict(n) => {
                for _ in 0..n {
                    let Some((key, row)) = self.window.pop_first() else { break };
                    let args = self.args(&row);
                    let mut out = Vec::new();
                    let old = self.state.as_deref().expect("state for a non-empty window");
                    let empty = self
                        .set
                        .try_evict(old, &mut out, key, &args)
                        .map_err(|e| TestCaseError::fail(format!("evict: {e}")))?;
                    prop_assert_eq!(empty, self.window.is_empty());
                    if empty {
                        // An emptied window leaves exactly the empty state: no drift.
                        prop_assert_eq!(&out[..], self.set.empty_state());
                    }
                    self.state = if empty { None } else { Some(out) };
                    self.last_evicted = Some(key);
                    self.evicted.push((key, row));
                    if self.evicted.len() > 8 {
                        self.evicted.remove(0);
                    }
                }
            }
            Op::Horizon(n) => {
                let cand = self
                    .window
                    .keys()
                    .rev()
                    .nth(usize::from(n))
                    .copied()
                    .unwrap_or(k(self.newest_time + 1, 0));
                self.horizon = self.horizon.max(cand);
            }
            Op::Late { k: kk, order, readd } => {
                let Some(state) = self.state.clone() else { return Ok(()) };
                let mut copy = state;
                let mut win = self.window.clone();
                let mut victims: Vec<EventKey> = win
                    .keys()
                    .rev()
                    .take_while(|&&key| key >= self.horizon)
                    .take(usize::from(kk))
                    .copied()
                    .collect();
                match order % 3 {
                    0 => {}
                    1 => victims.reverse(),
                    _ => {
                        let n = victims.len();
                        if n > 1 {
                            victims.swap(0, usize::from(order) % n);
                        }
                    }
                }
                for key in victims {
                    let row = win.remove(&key).unwrap();
                    let args = self.args(&row);
                    let mut out = Vec::new();
                    self.set
                        .try_remove_recent(&copy, &mut out, key, &args)
                        .map_err(|e| TestCaseError::fail(format!("remove_recent: {e}")))?;
                    copy = out;
                    self.compare(Some(&copy), &win, "after remove_recent")?;
                }
                // Re-add evicted events, newest first: each is older than everything.
                for (key, row) in self.evicted.iter().rev().take(usize::from(readd)) {
                    let args = self.args(row);
                    let mut out = Vec::new();
                    self.set
                        .try_insert(Some(&copy), &mut out, *key, &args, self.horizon)
                        .map_err(|e| TestCaseError::fail(format!("re-insert: {e}")))?;
                    copy = out;
                    win.insert(*key, row.clone());
                    self.compare(Some(&copy), &win, "after re-adding an evicted event")?;
                }
            }
        }
        let state = self.state.clone();
        self.compare(state.as_deref(), &self.window, &format!("after {op:?}"))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every aggregate agrees with brute force after every step of a random sliding window
    /// with ties, late events, horizon moves, late-result copies and re-added evictions.
    #[test]
    fn differential_against_brute_force(ops in prop::collection::vec(op_strategy(), 1..120)) {
        let mut m = Model::new();
        for op in &ops {
            m.apply(op)?;
        }
        // Drain: the last eviction reports an empty window.
        m.apply(&Op::Evict(255))?;
        m.apply(&Op::Evict(255))?;
        prop_assert!(m.window.is_empty() && m.state.is_none());
    }

    /// The same with a set built without evictions (an `UNBOUNDED PRECEDING` window),
    /// whose inserts drop what no result can need any more.
    #[test]
    fn append_only_differential_against_brute_force(
        ops in prop::collection::vec(append_only_op_strategy(), 1..160),
    ) {
        let (set, cols) = model_set();
        let mut m = Model::with_set(set.without_evictions(), cols);
        for op in &ops {
            m.apply(op)?;
        }
    }

    /// The borrowed key encoding used by COUNT(DISTINCT) is byte-for-byte
    /// `Value::encode_key`.
    #[test]
    fn scalar_key_matches_value_key(vals in any::<[u8; 5]>(), f in any::<f64>(), i in any::<i64>(),
                                    s in ".{0,6}") {
        let mut row = values(vals, 0);
        row.push(Value::Float(f));
        row.push(Value::Int(i));
        row.push(Value::Str(s.into()));
        for v in &row {
            let ty = v.data_type().unwrap();
            let sc = Scalar::of(v, ty, None, "t").unwrap().unwrap();
            let (mut a, mut b) = (Vec::new(), Vec::new());
            put_scalar_key(&mut a, sc);
            v.encode_key(&mut b);
            prop_assert_eq!(a, b);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Edge cases

/// Runs inserts (all under the lowest horizon) and returns the state.
fn build(set: &AggSet, rows: &[Vec<Value>]) -> Vec<u8> {
    let mut state: Option<Vec<u8>> = None;
    for (i, args) in rows.iter().enumerate() {
        let mut out = Vec::new();
        set.insert(state.as_deref(), &mut out, k(i as i64, i as u64), args, LOW);
        state = Some(out);
    }
    state.unwrap_or_else(|| set.empty_state().to_vec())
}

fn results(set: &AggSet, state: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    set.results(state, &mut out);
    out
}

fn one_col(set: &AggSet, vals: &[Value]) -> Vec<Vec<Value>> {
    vals.iter().map(|v| vec![v.clone(); set.aggs().len()]).collect()
}

#[test]
fn empty_window_results() {
    let (set, _) = model_set();
    let mut empty = Vec::new();
    set.empty_results(&mut empty);
    // The all-zero empty state gives the same results as empty_results.
    assert_eq!(results(&set, set.empty_state()), empty);
    for (v, &(kind, _)) in empty.iter().zip(set.aggs()) {
        let want = match kind {
            AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => Value::Int(0),
            _ => Value::Null,
        };
        assert_eq!(*v, want, "{}", kind.name());
    }
}

#[test]
fn all_null_window() {
    let kinds = all_kinds();
    let aggs: Vec<_> = kinds.iter().map(|&k| (k, Some(DataType::Float))).collect();
    let set = AggSet::try_new(&aggs).unwrap();
    let state = build(&set, &one_col(&set, &[Value::Null, Value::Null, Value::Null]));
    let got = results(&set, &state);
    for (v, kind) in got.iter().zip(&kinds) {
        let want = match kind {
            AggKind::CountStar => Value::Int(3),
            AggKind::Count | AggKind::CountDistinct => Value::Int(0),
            _ => Value::Null,
        };
        assert_eq!(*v, want, "{}", kind.name());
    }
}

#[test]
fn first_and_last_respect_nulls() {
    let set = AggSet::new(&[
        (AggKind::FirstValue, Some(DataType::Int)),
        (AggKind::LastValue, Some(DataType::Int)),
        (AggKind::Min, Some(DataType::Int)),
    ]);
    let state = build(&set, &one_col(&set, &[Value::Null, Value::Int(4), Value::Null]));
    assert_eq!(results(&set, &state), vec![Value::Null, Value::Null, Value::Int(4)]);
    let mut out = Vec::new();
    set.evict(&state, &mut out, k(0, 0), &[Value::Null, Value::Null, Value::Null]);
    assert_eq!(results(&set, &out), vec![Value::Int(4), Value::Null, Value::Int(4)]);
}

#[test]
fn stddev_needs_two_values() {
    let set = AggSet::new(&[
        (AggKind::StddevSamp, Some(DataType::Float)),
        (AggKind::VarSamp, Some(DataType::Int)),
    ]);
    let one = build(&set, &[vec![Value::Float(3.5), Value::Int(3)]]);
    assert_eq!(results(&set, &one), vec![Value::Null, Value::Null]);
    let two = build(
        &set,
        &[vec![Value::Float(1.0), Value::Int(1)], vec![Value::Float(3.0), Value::Int(4)]],
    );
    assert_eq!(results(&set, &two), vec![Value::Float(2f64.sqrt()), Value::Float(4.5)]);
}

#[test]
fn variance_of_large_offset_values_is_accurate() {
    // Naive Σx² - (Σx)²/n loses everything here; the shifted sums do not.
    let set = AggSet::new(&[(AggKind::VarSamp, Some(DataType::Float))]);
    let vals: Vec<Value> = [4.0, 7.0, 13.0, 16.0].iter().map(|d| Value::Float(1e9 + d)).collect();
    let state = build(&set, &one_col(&set, &vals));
    assert_eq!(results(&set, &state), vec![Value::Float(30.0)]);
}

#[test]
fn int_sum_beyond_i64_is_exact_and_invertible() {
    let set =
        AggSet::new(&[(AggKind::Sum, Some(DataType::Int)), (AggKind::Avg, Some(DataType::Int))]);
    let big = Value::Int(i64::MAX);
    let state = build(&set, &one_col(&set, &[big.clone(), big.clone(), Value::Int(2)]));
    let want = 2.0 * i64::MAX as f64 + 2.0;
    assert_eq!(results(&set, &state), vec![Value::Float(want), Value::Float(want / 3.0)]);
    let mut out = Vec::new();
    set.evict(&state, &mut out, k(0, 0), &[big.clone(), big.clone()]);
    // i64::MAX + 2 does not fit; evict the other one too.
    let mut out2 = Vec::new();
    set.evict(&out, &mut out2, k(1, 1), &[big.clone(), big]);
    assert_eq!(results(&set, &out2), vec![Value::Int(2), Value::Float(2.0)]);
    // Back into i64 range after passing through i128: exact.
    let set = AggSet::new(&[(AggKind::Sum, Some(DataType::Int))]);
    let vals = [Value::Int(i64::MAX), Value::Int(10), Value::Int(-20)];
    let state = build(&set, &one_col(&set, &vals));
    assert_eq!(results(&set, &state), vec![Value::Int(i64::MAX - 10)]);
}

#[test]
fn emptied_float_sums_reset_exactly() {
    let set = AggSet::new(&[
        (AggKind::Sum, Some(DataType::Float)),
        (AggKind::VarSamp, Some(DataType::Float)),
    ]);
    // 0.1 + 0.7 leaves rounding residue; removing both must show no drift afterwards.
    let rows = one_col(&set, &[Value::Float(0.1), Value::Float(0.7), Value::Null]);
    let mut state = build(&set, &rows);
    for (i, row) in rows.iter().enumerate().take(2) {
        let mut out = Vec::new();
        assert!(!set.evict(&state, &mut out, k(i as i64, i as u64), row));
        state = out;
    }
    assert_eq!(results(&set, &state), vec![Value::Null, Value::Null]);
    let mut out = Vec::new();
    set.insert(Some(&state), &mut out, k(9, 9), &[Value::Float(0.3), Value::Float(0.3)], LOW);
    assert_eq!(results(&set, &out)[0], Value::Float(0.3));
    let mut out2 = Vec::new();
    set.insert(Some(&out), &mut out2, k(10, 10), &[Value::Float(0.3), Value::Float(0.3)], LOW);
    assert_eq!(results(&set, &out2), vec![Value::Float(0.6), Value::Float(0.0)]);
}

#[test]
fn non_finite_floats_leave_no_trace() {
    let set = AggSet::new(&[
        (AggKind::Sum, Some(DataType::Float)),
        (AggKind::Avg, Some(DataType::Float)),
    ]);
    let vals = [Value::Float(f64::INFINITY), Value::Float(f64::NAN), Value::Float(2.5)];
    let mut state = build(&set, &one_col(&set, &vals));
    let r = results(&set, &state);
    assert!(matches!(r[0], Value::Float(x) if x.is_nan()));
    for (i, v) in vals.iter().enumerate().take(2) {
        let mut out = Vec::new();
        set.evict(&state, &mut out, k(i as i64, i as u64), &[v.clone(), v.clone()]);
        state = out;
    }
    assert_eq!(results(&set, &state), vec![Value::Float(2.5), Value::Float(2.5)]);
}

#[test]
fn percentiles_at_the_ends_and_with_ties() {
    let set = AggSet::new(&[
        (AggKind::PercentileCont(0.0), Some(DataType::Int)),
        (AggKind::PercentileCont(1.0), Some(DataType::Int)),
        (AggKind::Median, Some(DataType::Int)),
        (AggKind::PercentileCont(0.25), Some(DataType::Int)),
    ]);
    let ints = |xs: &[i64]| one_col(&set, &xs.iter().map(|&x| Value::Int(x)).collect::<Vec<_>>());
    let f = Value::Float;
    assert_eq!(
        results(&set, &build(&set, &ints(&[3, 2, 2, 1]))),
        vec![f(1.0), f(3.0), f(2.0), f(1.75)]
    );
    assert_eq!(
        results(&set, &build(&set, &ints(&[40, 10, 30, 20]))),
        vec![f(10.0), f(40.0), f(25.0), f(17.5)]
    );
    assert_eq!(results(&set, &build(&set, &ints(&[7]))), vec![f(7.0); 4]);
    assert_eq!(results(&set, &build(&set, &ints(&[5, 5, 5]))), vec![f(5.0); 4]);
}

#[test]
fn min_max_with_late_and_older_inserts() {
    let set =
        AggSet::new(&[(AggKind::Min, Some(DataType::Int)), (AggKind::Max, Some(DataType::Int))]);
    let ins = |old: Option<&[u8]>, key: EventKey, v: i64, h: EventKey| {
        let mut out = Vec::new();
        set.insert(old, &mut out, key, &[Value::Int(v), Value::Int(v)], h);
        out
    };
    // Stable inserts: 5, then 3 makes 5 useless for MIN, then 9.
    let s = ins(None, k(10, 0), 5, k(100, 0));
    let s = ins(Some(&s), k(11, 1), 3, k(100, 0));
    let s = ins(Some(&s), k(12, 2), 9, k(100, 0));
    assert_eq!(results(&set, &s), vec![Value::Int(3), Value::Int(9)]);
    // An event older than everything (re-added after eviction) with the smallest value.
    let s = ins(Some(&s), k(1, 3), 1, k(100, 0));
    assert_eq!(results(&set, &s), vec![Value::Int(1), Value::Int(9)]);
    let mut e = Vec::new();
    set.evict(&s, &mut e, k(1, 3), &[Value::Int(1), Value::Int(1)]);
    assert_eq!(results(&set, &e), vec![Value::Int(3), Value::Int(9)]);
    // Tail entries (at/after the horizon) can be removed again exactly.
    let t = ins(Some(&e), k(20, 4), 0, k(15, 0));
    let t = ins(Some(&t), k(18, 5), 100, k(15, 0));
    assert_eq!(results(&set, &t), vec![Value::Int(0), Value::Int(100)]);
    let mut r = Vec::new();
    set.remove_recent(&t, &mut r, k(20, 4), &[Value::Int(0), Value::Int(0)]);
    assert_eq!(results(&set, &r), vec![Value::Int(3), Value::Int(100)]);
    let mut r2 = Vec::new();
    set.remove_recent(&r, &mut r2, k(18, 5), &[Value::Int(100), Value::Int(100)]);
    assert_eq!(results(&set, &r2), vec![Value::Int(3), Value::Int(9)]);
}

#[test]
fn min_max_order_floats_strings_bools() {
    let set = AggSet::new(&[
        (AggKind::Min, Some(DataType::Float)),
        (AggKind::Max, Some(DataType::Float)),
        (AggKind::Min, Some(DataType::Str)),
        (AggKind::Max, Some(DataType::Str)),
        (AggKind::Min, Some(DataType::Bool)),
        (AggKind::Max, Some(DataType::Bool)),
    ]);
    let rows = vec![
        vec![
            Value::Float(1.5),
            Value::Float(1.5),
            Value::Str("b".into()),
            Value::Str("b".into()),
            Value::Bool(true),
            Value::Bool(true),
        ],
        vec![
            Value::Float(f64::NAN),
            Value::Float(f64::NAN),
            Value::Str("".into()),
            Value::Str("".into()),
            Value::Bool(false),
            Value::Bool(false),
        ],
        vec![
            Value::Int(-2),
            Value::Int(-2),
            Value::Str("ba".into()),
            Value::Str("ba".into()),
            Value::Null,
            Value::Null,
        ],
    ];
    let r = results(&set, &build(&set, &rows));
    assert_eq!(r[0], Value::Float(-2.0));
    assert!(matches!(r[1], Value::Float(x) if x.is_nan()));
    assert_eq!(
        r[2..],
        [Value::Str("".into()), Value::Str("ba".into()), Value::Bool(false), Value::Bool(true)]
    );
}

#[test]
fn count_distinct_tracks_multiplicity() {
    let set = AggSet::new(&[(AggKind::CountDistinct, Some(DataType::Float))]);
    let vals =
        [Value::Float(0.0), Value::Float(-0.0), Value::Float(1.0), Value::Null, Value::Float(1.0)];
    let mut state = build(&set, &one_col(&set, &vals));
    assert_eq!(results(&set, &state), vec![Value::Int(2)]);
    let want = [2, 1, 1, 1];
    for (i, v) in vals.iter().enumerate().take(4) {
        let mut out = Vec::new();
        set.evict(&state, &mut out, k(i as i64, i as u64), std::slice::from_ref(v));
        state = out;
        assert_eq!(results(&set, &state), vec![Value::Int(want[i])], "after evicting {i}");
    }
}

#[test]
fn evict_reports_empty_window() {
    let set = AggSet::new(&[(AggKind::CountStar, None), (AggKind::Max, Some(DataType::Str))]);
    let rows = one_col(&set, &[Value::Str("x".into()), Value::Null]);
    let s = build(&set, &rows);
    let mut a = Vec::new();
    assert!(!set.evict(&s, &mut a, k(0, 0), &rows[0]));
    let mut b = Vec::new();
    assert!(set.evict(&a, &mut b, k(1, 1), &rows[1]));
    assert_eq!(results(&set, &b), vec![Value::Int(0), Value::Null]);
}

// ---------------------------------------------------------------------------------------
// Bad input and corrupt states

#[test]
fn corrupt_states_are_errors() {
    let (set, cols) = model_set();
    let rows: Vec<Vec<Value>> = (0..6u8).map(|i| values([i * 40 + 7; 5], 0)).collect();
    let args: Vec<Vec<Value>> =
        rows.iter().map(|r| cols.iter().map(|&c| r[c].clone()).collect()).collect();
    let state = build(&set, &args);
    let mut got = Vec::new();
    set.try_results(&state, &mut got).unwrap();
    // Every strict prefix fails to decode, and nothing is appended on failure.
    for cut in 0..state.len() {
        let mut out = Vec::new();
        assert!(set.try_results(&state[..cut], &mut out).is_err(), "prefix {cut} decoded");
        assert!(out.is_empty());
        let mut o = Vec::new();
        assert!(set.try_insert(Some(&state[..cut]), &mut o, k(99, 99), &args[0], LOW).is_err());
    }
    let mut longer = state.clone();
    longer.push(0);
    assert!(matches!(
        set.try_results(&longer, &mut Vec::new()),
        Err(AggStateError::TrailingBytes { .. })
    ));
    // Flipping any byte never panics.
    for i in 0..state.len() {
        let mut bad = state.clone();
        bad[i] ^= 0xA5;
        let _ = set.try_results(&bad, &mut Vec::new());
        let _ = set.try_evict(&bad, &mut Vec::new(), k(0, 0), &args[0]);
        let _ = set.try_remove_recent(&bad, &mut Vec::new(), k(5, 5), &args[5]);
        let _ = set.try_insert(Some(&bad), &mut Vec::new(), k(99, 99), &args[0], LOW);
    }
}

#[test]
fn bad_arguments_are_errors() {
    let set =
        AggSet::new(&[(AggKind::Sum, Some(DataType::Int)), (AggKind::Min, Some(DataType::Str))]);
    let mut out = Vec::new();
    let e = set.try_insert(None, &mut out, k(0, 0), &[Value::Int(1)], LOW).unwrap_err();
    assert_eq!(e, AggStateError::ArgCount { expected: 2, found: 1 });
    let e = set
        .try_insert(None, &mut out, k(0, 0), &[Value::Float(1.0), Value::Null], LOW)
        .unwrap_err();
    assert!(matches!(e, AggStateError::ArgType { agg: Some(0), expected: DataType::Int, .. }));
    assert!(e.to_string().contains("SUM"), "{e}");
    let e =
        set.try_insert(None, &mut out, k(0, 0), &[Value::Null, Value::Int(3)], LOW).unwrap_err();
    assert!(matches!(e, AggStateError::ArgType { agg: Some(1), .. }));
    // Evicting from an empty state, or an event a holistic state never saw.
    let e = set.try_evict(set.empty_state(), &mut out, k(0, 0), &[Value::Null, Value::Null]);
    assert_eq!(e, Err(AggStateError::NoRows { key: k(0, 0) }));
    let d = AggSet::new(&[(AggKind::CountDistinct, Some(DataType::Int))]);
    let s = build(&d, &[vec![Value::Int(1)]]);
    let e = d.try_evict(&s, &mut out, k(0, 0), &[Value::Int(2)]).unwrap_err();
    assert!(matches!(e, AggStateError::Missing { agg: Some(0), .. }), "{e}");
}

#[test]
fn invalid_pairs_are_rejected() {
    assert!(AggSet::try_new(&[(AggKind::Sum, Some(DataType::Str))]).is_err());
    assert!(AggSet::try_new(&[(AggKind::PercentileCont(1.5), Some(DataType::Int))]).is_err());
    assert!(AggSet::try_new(&[(AggKind::PercentileCont(f64::NAN), Some(DataType::Int))]).is_err());
    assert!(AggSet::try_new(&[(AggKind::Min, None)]).is_err());
    let set = AggSet::new(&[(AggKind::Avg, Some(DataType::Bool))]);
    let e = set.try_insert(None, &mut Vec::new(), k(0, 0), &[Value::Bool(true)], LOW);
    assert!(matches!(e, Err(AggStateError::Invalid { agg: 0, .. })));
}

#[test]
fn kind_metadata() {
    assert_eq!(AggKind::CountStar.result_type(None), Ok(DataType::Int));
    assert_eq!(AggKind::Sum.result_type(Some(DataType::Int)), Ok(DataType::Int));
    assert_eq!(AggKind::Sum.result_type(Some(DataType::Float)), Ok(DataType::Float));
    assert_eq!(AggKind::Avg.result_type(Some(DataType::Int)), Ok(DataType::Float));
    assert_eq!(AggKind::Max.result_type(Some(DataType::Str)), Ok(DataType::Str));
    assert_eq!(AggKind::LastValue.result_type(Some(DataType::Bool)), Ok(DataType::Bool));
    assert_eq!(AggKind::CountDistinct.result_type(Some(DataType::Str)), Ok(DataType::Int));
    assert!(AggKind::StddevSamp.result_type(Some(DataType::Str)).is_err());
    assert!(AggKind::Sum.is_invertible() && AggKind::VarSamp.is_invertible());
    assert!(!AggKind::Min.is_invertible() && !AggKind::Median.is_invertible());
    assert_eq!(AggKind::PercentileCont(0.9).name(), "PERCENTILE_CONT");
}

#[test]
fn sum_count_states_are_fixed_size() {
    let set =
        AggSet::new(&[(AggKind::Sum, Some(DataType::Int)), (AggKind::Count, Some(DataType::Int))]);
    let s = build(&set, &one_col(&set, &[Value::Int(1), Value::Int(2), Value::Null]));
    assert_eq!(s.len(), 8 + 24 + 8);
    assert_eq!(set.empty_state().len(), s.len());
}

#[test]
fn variance_shift_resets_when_values_leave() {
    // The first value (1e15) becomes the shift K; once it leaves (a NULL keeps the window
    // open), K must restart at the next value or (x-K)² loses the small differences.
    let set = AggSet::new(&[(AggKind::VarSamp, Some(DataType::Float))]);
    let rows = one_col(&set, &[Value::Float(1e15), Value::Null]);
    let state = build(&set, &rows);
    let mut s = Vec::new();
    assert!(!set.evict(&state, &mut s, k(0, 0), &rows[0]));
    for (i, x) in [1.0, 2.0, 4.0].into_iter().enumerate() {
        let mut out = Vec::new();
        set.insert(Some(&s), &mut out, k(10 + i as i64, 10 + i as u64), &[Value::Float(x)], LOW);
        s = out;
    }
    let Value::Float(v) = results(&set, &s)[0] else { panic!("not a float") };
    assert!((v - 7.0 / 3.0).abs() < 1e-12, "{v}");
}

/// Without evictions MIN/MAX and FIRST_VALUE/LAST_VALUE keep O(1) entries besides those at
/// or after the horizon, however long the window: a running MIN over a rising series (the
/// monotonic deque's worst case) and FIRST/LAST over 10 000 events stay a few entries.
#[test]
fn append_only_states_stay_small() {
    let kinds = [AggKind::Min, AggKind::Max, AggKind::FirstValue, AggKind::LastValue];
    let aggs: Vec<(AggKind, Option<DataType>)> =
        kinds.iter().map(|&k| (k, Some(DataType::Int))).collect();
    let bounded = AggSet::new(&aggs).without_evictions();
    assert!(!bounded.evicts() && AggSet::new(&aggs).evicts());
    let mut state: Option<Vec<u8>> = None;
    for i in 0..10_000i64 {
        let args = vec![Value::Int(i); 4];
        let mut out = Vec::new();
        // The horizon trails the newest event by 3 time units (the allowed lateness).
        bounded.insert(state.as_deref(), &mut out, k(i, i as u64), &args, k(i - 3, 0));
        state = Some(out);
    }
    let state = state.unwrap();
    // 4 tail entries (29 bytes each) per aggregate, plus 1 (MIN, MAX) or 2 (FIRST, LAST).
    assert!(state.len() < 1024, "state of {} bytes", state.len());
    assert_eq!(
        results(&bounded, &state),
        vec![Value::Int(0), Value::Int(9_999), Value::Int(0), Value::Int(9_999)]
    );
    // A late-result copy can still take out the events at or after the horizon.
    let mut copy = state.clone();
    for i in (9_997..10_000).rev() {
        let mut out = Vec::new();
        bounded.remove_recent(&copy, &mut out, k(i, i as u64), &vec![Value::Int(i); 4]);
        copy = out;
    }
    assert_eq!(
        results(&bounded, &copy),
        vec![Value::Int(0), Value::Int(9_996), Value::Int(0), Value::Int(9_996)]
    );
    let mut out = Vec::new();
    assert_eq!(
        bounded.try_evict(&state, &mut out, k(0, 0), &vec![Value::Int(0); 4]),
        Err(AggStateError::NoEvictions { key: k(0, 0) })
    );
}

// ---------------------------------------------------------------------------------------
// Hostile state bytes: the `try_` methods report what a crash, a bit flip or another
// program left in the store as an error, never a panic.

/// One aggregate (after `COUNT(*)`) of [`model_set`], picked by `pair`, in one of the shapes
/// the engine builds (`shape`: evicting, without evictions, external holistic), or the
/// whole model set (every aggregate in one value); with the column each reads.
fn hostile_set(pair: usize, shape: u8) -> (AggSet, Vec<usize>) {
    let (all, cols) = model_set();
    if shape == 3 {
        return (all, cols);
    }
    let i = 1 + pair % (all.aggs().len() - 1);
    let mut set = AggSet::new(&[(AggKind::CountStar, None), all.aggs()[i]]);
    if shape == 1 {
        set = set.without_evictions();
    } else if shape == 2 {
        set = set.external_holistic();
    }
    (set, vec![0, cols[i]])
}

/// A change to a valid state value.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR a byte (at an offset taken modulo the length).
    Flip(usize, u8),
    /// Cut the value at an offset.
    Truncate(usize),
    /// Overwrite 4 bytes (a section, entry or string length) with a value.
    SetU32(usize, u32),
    /// Overwrite 8 bytes (a row count, a multiplicity) with a value.
    SetU64(usize, u64),
    /// Insert a byte.
    Insert(usize, u8),
    /// Remove a byte.
    Remove(usize),
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    let len32 = prop_oneof![Just(u32::MAX), Just(0x7fff_ffff), Just(0), 0u32..128, any::<u32>(),];
    let len64 = prop_oneof![Just(u64::MAX), Just(0), 0u64..8, any::<u64>()];
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), len32).prop_map(|(i, v)| Mutation::SetU32(i, v)),
        (any::<usize>(), len64).prop_map(|(i, v)| Mutation::SetU64(i, v)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Remove),
    ]
}

fn mutate(state: &mut Vec<u8>, m: &Mutation) {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *m {
        Mutation::Flip(i, x) if !state.is_empty() => {
            let i = at(i, state.len());
            state[i] ^= x;
        }
        Mutation::Truncate(i) => state.truncate(at(i, state.len())),
        Mutation::SetU32(i, v) if state.len() >= 4 => {
            let i = at(i, state.len() - 3);
            state[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::SetU64(i, v) if state.len() >= 8 => {
            let i = at(i, state.len() - 7);
            state[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        Mutation::Insert(i, b) => state.insert(at(i, state.len() + 1), b),
        Mutation::Remove(i) if !state.is_empty() => {
            state.remove(at(i, state.len()));
        }
        _ => {}
    }
}

/// Feeds `state` to every `try_` method of `set` with the given event; each returns `Ok` or
/// `Err` (a panic fails the test). A state an update accepted is read back too.
fn try_everything(set: &AggSet, state: &[u8], key: EventKey, args: &[Value], horizon: EventKey) {
    let mut vals = vec![Value::Int(7)];
    if set.try_results(state, &mut vals).is_err() {
        assert_eq!(vals, vec![Value::Int(7)], "a failed read appended results");
    }
    let mut out = Vec::new();
    let updates = [
        set.try_insert(Some(state), &mut out, key, args, horizon).map(|_| ()),
        set.try_evict(state, &mut Vec::new(), key, args).map(|_| ()),
        set.try_remove_recent(state, &mut Vec::new(), key, args),
    ];
    if updates[0].is_ok() {
        let _ = set.try_results(&out, &mut Vec::new());
        let _ = set.try_evict(&out, &mut Vec::new(), key, args);
        let _ = set.try_remove_recent(&out, &mut Vec::new(), key, args);
        let _ = set.try_insert(Some(&out), &mut Vec::new(), key, args, horizon);
    }
}

/// Builds a valid state from `events` (time step, horizon lag, values, NULL mask): ties,
/// and horizons that leave MIN/MAX a monotonic part and a tail. Returns the state and each
/// event's key and arguments.
fn hostile_base(
    set: &AggSet,
    cols: &[usize],
    events: &[(u8, u8, [u8; 5], u8)],
) -> (Vec<u8>, Vec<(EventKey, Vec<Value>)>) {
    let mut state = set.empty_state().to_vec();
    let mut seen = Vec::new();
    let mut t = 0i64;
    for (seq, &(step, lag, vals, nulls)) in events.iter().enumerate() {
        t += i64::from(step % 3);
        let row = values(vals, nulls);
        let args: Vec<Value> = cols.iter().map(|&c| row[c].clone()).collect();
        let key = k(t, seq as u64);
        let mut out = Vec::new();
        set.insert(Some(&state), &mut out, key, &args, k(t - i64::from(lag % 4), 0));
        state = out;
        seen.push((key, args));
    }
    (state, seen)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Valid states of every aggregate with bytes flipped, cut, inserted or removed and
    /// length fields set huge: every `try_` method returns `Ok` or `Err`, never panics.
    #[test]
    fn hostile_state_bytes_are_an_error_not_a_panic(
        pair in any::<usize>(),
        shape in 0u8..4,
        events in prop::collection::vec((any::<u8>(), any::<u8>(), any::<[u8; 5]>(), any::<u8>()), 0..24),
        mutations in prop::collection::vec(mutation_strategy(), 1..4),
        probe in (any::<u8>(), -2i64..40, any::<[u8; 5]>(), any::<u8>(), -2i64..40),
    ) {
        let (set, cols) = hostile_set(pair, shape);
        let (mut state, seen) = hostile_base(&set, &cols, &events);
        for m in &mutations {
            mutate(&mut state, m);
        }
        let (pick, time, vals, nulls, horizon) = probe;
        // An event of the window (what evictions and late removals name) or a new one.
        let (key, args) = match seen.get(usize::from(pick)) {
            Some((key, args)) => (*key, args.clone()),
            None => {
                let row = values(vals, nulls);
                (k(time, u64::from(pick)), cols.iter().map(|&c| row[c].clone()).collect())
            }
        };
        try_everything(&set, &state, key, &args, k(horizon, 0));
    }

    /// Arbitrary bytes as the state of every aggregate.
    #[test]
    fn garbage_state_bytes_are_an_error_not_a_panic(
        pair in any::<usize>(),
        shape in 0u8..4,
        bytes in prop::collection::vec(any::<u8>(), 0..160),
        probe in (-2i64..40, any::<u64>(), any::<[u8; 5]>(), any::<u8>(), -2i64..40),
    ) {
        let (set, cols) = hostile_set(pair, shape);
        let (time, seq, vals, nulls, horizon) = probe;
        let row = values(vals, nulls);
        let args: Vec<Value> = cols.iter().map(|&c| row[c].clone()).collect();
        // Also behind a plausible row count, so that the bytes reach the aggregates' readers.
        let mut state = 3u64.to_le_bytes().to_vec();
        state.extend_from_slice(&bytes);
        try_everything(&set, &bytes, k(time, seq), &args, k(horizon, 0));
        try_everything(&set, &state, k(time, seq), &args, k(horizon, 0));
    }
}

/// A MIN/MAX section whose monotonic part ends inside an entry (a string value that holds
/// the bytes of another entry): the insert walked the tail back past the end of the
/// monotonic part and sliced `bytes[mono..0]`.
#[test]
fn min_max_part_boundary_inside_an_entry_is_an_error() {
    let set = AggSet::new(&[(AggKind::Min, Some(DataType::Int))]);
    // Entry B, 29 bytes of ASCII: key (20, 0), int 5.
    let mut b = Vec::new();
    codec::put_entry(&mut b, k(20, 0), Some(Scalar::Int(5)));
    assert_eq!(b.len(), 29);
    // Entry A: key (40, 0), the string holding B.
    let mut a = Vec::new();
    codec::put_entry(&mut a, k(40, 0), Some(Scalar::Str(std::str::from_utf8(&b).unwrap())));
    // The monotonic part ends where B starts, 21 bytes into A.
    let mut sec = 21u32.to_le_bytes().to_vec();
    sec.extend_from_slice(&a);
    let mut state = 1u64.to_le_bytes().to_vec();
    state.extend_from_slice(&(sec.len() as u32).to_le_bytes());
    state.extend_from_slice(&sec);
    let e = set
        .try_insert(Some(&state), &mut Vec::new(), k(30, 1), &[Value::Int(1)], k(0, 0))
        .unwrap_err();
    assert!(matches!(e, AggStateError::Corrupt { agg: Some(0), .. }), "{e}");
}

/// A float SUM whose NaN and +inf counts add past u64::MAX: the insert overflowed adding
/// them up.
#[test]
fn float_sum_non_finite_counts_that_overflow_are_no_panic() {
    let set = AggSet::new(&[(AggKind::Sum, Some(DataType::Float))]);
    let mut state = 1u64.to_le_bytes().to_vec();
    for field in [1, 0, 0, u64::MAX, 1, 0] {
        state.extend_from_slice(&u64::to_le_bytes(field));
    }
    let mut out = Vec::new();
    set.try_insert(Some(&state), &mut out, k(0, 0), &[Value::Float(1.0)], LOW).unwrap();
    assert!(matches!(results(&set, &out)[..], [Value::Float(f)] if f.is_nan()));
}
