//! Holistic aggregates in order-statistics trees, and late events that
//! read only their own partition's recent events.
//!
//! * The tree layout gives, event for event, the same results as the inline layout
//!   (one value per partition holding the whole window), including late events within
//!   the lateness, and keeps the partition's inline value at a constant size.
//! * A late event's result reads its own partition's events within the lateness, not
//!   every partition's.

use spillway_engine::aggregate::record;
use spillway_engine::operator::over::{Outcome, Runtime};
use spillway_engine::plan::Plan;
use spillway_engine::reservoir::{Reservoir, ReservoirOptions};
use spillway_engine::sql::parse_query;
use spillway_engine::value::{DataType, Event, Field, Schema, TimeUnit, Value};
use spillway_store::{NamespaceSpec, StateStoreExt, StoreKind, StoreOptions};

fn schema() -> Schema {
    let f = |n: &str, ty| Field { name: n.into(), ty };
    Schema::new(
        vec![
            f("card", DataType::Int),
            f("merchant", DataType::Int),
            f("amount", DataType::Float),
            f("note", DataType::Str),
            f("ts", DataType::Int),
        ],
        "ts",
        TimeUnit::Ms,
    )
    .unwrap()
}

fn runtime(plan: Plan, dir: &std::path::Path, lateness: i64, store: StoreKind) -> Runtime {
    let mut opts = StoreOptions::new(dir.join("state")).memory_budget(64 << 20);
    for ns in Runtime::namespaces(&plan) {
        opts = opts.namespace(NamespaceSpec::list(ns));
    }
    let st = store.open(opts).unwrap();
    let res = Reservoir::create(ReservoirOptions::new(dir.join("res")), &schema()).unwrap();
    Runtime::new(plan, st, res, lateness, None).unwrap()
}

/// A seeded xorshift stream.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn event(seq: u64, card: i64, merchant: i64, amount: f64, note: Value, ts: i64) -> Event {
    Event {
        time: ts,
        seq,
        row: vec![
            Value::Int(card),
            Value::Int(merchant),
            Value::Float(amount),
            note,
            Value::Int(ts),
        ],
    }
}

const QUERY: &str = "SELECT card, ts,
    COUNT(DISTINCT merchant) OVER w AS d, MEDIAN(amount) OVER w AS med,
    PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount) OVER w AS p90,
    FIRST_VALUE(note) OVER w AS fv, LAST_VALUE(amount) OVER w AS lv,
    SUM(amount) OVER w AS s, COUNT(DISTINCT merchant) OVER u AS du,
    FIRST_VALUE(amount) OVER u AS fu
  FROM payments
  WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 3000 PRECEDING AND CURRENT ROW),
         u AS (PARTITION BY card ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)";

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits() || (x - y).abs() < 1e-9,
        _ => a == b,
    }
}

#[test]
fn trees_match_the_inline_layout_event_for_event() {
    let schema = schema();
    let spec = parse_query(QUERY, &schema).unwrap();
    let tree_plan = Plan::build(&spec, &schema).unwrap();
    assert!(tree_plan.groups.iter().any(|g| g.trees.is_some()), "holistic aggregates use trees");
    let explain = tree_plan.explain(&schema);
    assert!(explain.contains("order-statistics trees in `g0.ost`"), "{explain}");
    let inline_plan = tree_plan.clone().with_inline_holistic();
    assert!(inline_plan.groups.iter().all(|g| g.trees.is_none()));
    for store in [StoreKind::Mem, StoreKind::HashLog] {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let lateness = 40;
        let mut tree = runtime(tree_plan.clone(), d1.path(), lateness, store);
        let mut inline = runtime(inline_plan.clone(), d2.path(), lateness, store);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut ts = 0i64;
        let mut late = 0;
        for seq in 0..6000u64 {
            ts += (rng.next() % 3) as i64; // ties and gaps
            let r = rng.next();
            // Every 11th event is out of order, some beyond the lateness.
            let t = if seq % 11 == 5 { ts - (r % 60) as i64 } else { ts };
            let amount = match r % 50 {
                0 => -0.0,
                1 => f64::INFINITY,
                _ => ((r >> 8) % 500) as f64 / 4.0,
            };
            let note = if r.is_multiple_of(17) {
                Value::Null
            } else {
                Value::Str(format!("n{}", r % 97).into())
            };
            let e = event(seq, (r % 3) as i64, ((r >> 20) % 40) as i64, amount, note, t);
            let oa = tree.process(e.clone(), &mut a).unwrap();
            let ob = inline.process(e, &mut b).unwrap();
            assert_eq!(oa, ob);
            if oa != Outcome::Emitted {
                continue;
            }
            late += u64::from(t < ts);
            assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    same(x, y),
                    "{store:?} event {seq} (t {t}) column {i}: tree {x:?}, inline {y:?}"
                );
            }
        }
        assert!(late > 100, "late events within the lateness: {late}");
        // The tree layout's inline value per card stays small: the window lives in the
        // trees, not in one value rewritten per event.
        // Both windows partition by card: node g0's state is slot 0 of record `s0`.
        assert_eq!(tree_plan.groups[0].record, Some((0, 0)));
        let slot0 = |v: Vec<u8>| record::slot(&v, 2, 0).unwrap().expect("slot 0").to_vec();
        let s = tree.store_mut();
        let s0 = s.namespace("s0").unwrap();
        let ost = s.namespace("g0.ost").unwrap();
        for card in 0..3i64 {
            let mut k = Vec::new();
            Value::Int(card).encode_key(&mut k);
            let v = slot0(s.get(s0, &k).unwrap().expect("the card's state"));
            assert!(v.len() < 128, "inline value of card {card} is {} bytes", v.len());
            let inl = inline.store_mut();
            let si = inl.namespace("s0").unwrap();
            let vi = slot0(inl.get(si, &k).unwrap().unwrap());
            assert!(vi.len() > 10 * v.len(), "the inline layout holds the window: {}", vi.len());
        }
        let mut nodes = 0;
        s.scan_prefix(ost, b"", &mut |_, _| {
            nodes += 1;
            true
        })
        .unwrap();
        assert!(nodes > 3 * 5, "trees hold nodes: {nodes}");
    }
}

#[test]
fn a_late_event_reads_only_its_own_partition() {
    let schema = schema();
    let q = "SELECT card, ts, SUM(amount) OVER w AS s, MEDIAN(amount) OVER w AS m FROM payments
             WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 100 PRECEDING AND CURRENT ROW)";
    let plan = Plan::build(&parse_query(q, &schema).unwrap(), &schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Lateness 1000 ms at one event per ms over 1000 cards: about 1000 events of all
    // cards within the lateness at each boundary, one of each card.
    let mut rt = runtime(plan, dir.path(), 1000, StoreKind::Mem);
    let mut out = Vec::new();
    let mut all: Vec<Event> = Vec::new();
    for seq in 0..20_000u64 {
        let e = event(seq, (seq % 1000) as i64, 0, seq as f64, Value::Null, seq as i64);
        rt.process(e.clone(), &mut out).unwrap();
        all.push(e);
    }
    assert_eq!(rt.late_events_examined(), 0);
    // Late events of card 7, 500 ms and 950 ms behind the frontier.
    for (i, back) in [500i64, 950].into_iter().enumerate() {
        let t = 19_999 - back;
        let e = event(20_000 + i as u64, 7, 0, -1.0, Value::Null, t);
        assert_eq!(rt.process(e.clone(), &mut out).unwrap(), Outcome::Emitted);
        all.push(e.clone());
        // Brute force: card 7's events in [t - 100, t] that arrived before it (itself included).
        let xs: Vec<f64> = all
            .iter()
            .filter(|x| x.row[0] == Value::Int(7) && x.time >= t - 100 && x.time <= t)
            .map(|x| match x.row[2] {
                Value::Float(f) => f,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(out[2], Value::Float(xs.iter().sum()), "late event at {t}: {xs:?}");
    }
    // Each late event visited card 7's few events within the lateness at the two
    // boundaries (one per 1000 ms) and the few others sharing their index buckets
    // (about one each: the index has more buckets than events), not the ~2000 recent
    // events of every card at each boundary (~8000 for the two late events).
    let examined = rt.late_events_examined();
    assert!(examined <= 40, "late events visited {examined} recent events");
}
