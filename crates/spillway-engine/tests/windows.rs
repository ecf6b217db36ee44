//! Differential tests of the window runtime against a brute-force oracle: random streams
//! (ties in time, gaps, bursts, out-of-order within and beyond the allowed lateness),
//! every aggregate, every bound option, filters and several partitionings at once. The
//! oracle recomputes each event's window from the full list of events that arrived no
//! later than it.

use proptest::prelude::*;
use spillway_engine::aggregate::AggKind;
use spillway_engine::operator::over::{Outcome, Runtime};
use spillway_engine::plan::Plan;
use spillway_engine::reservoir::{Reservoir, ReservoirOptions, ReservoirStats};
use spillway_engine::session::{Session, SessionConfig};
use spillway_engine::sql::{
    Expr, Frame, MetricSpec, QuerySpec, RangeFrame, SelectItem, WindowSpec,
};
use spillway_engine::value::{DataType, Event, Field, Schema, TimeUnit, Value};
use spillway_store::{NamespaceSpec, StoreKind, StoreOptions};

const ALL_AGGS: &[AggKind] = &[
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
    AggKind::PercentileCont(0.25),
    AggKind::FirstValue,
    AggKind::LastValue,
];

// Columns: 0 k (int, partition), 1 g (int, second partition), 2 v (int or null),
// 3 f (float or null), 4 flag (bool), 5 ts.
fn schema() -> Schema {
    let f = |n: &str, ty| Field { name: n.into(), ty };
    Schema::new(
        vec![
            f("k", DataType::Int),
            f("g", DataType::Int),
            f("v", DataType::Int),
            f("f", DataType::Float),
            f("flag", DataType::Bool),
            f("ts", DataType::Int),
        ],
        "ts",
        TimeUnit::Ms,
    )
    .unwrap()
}

#[derive(Clone, Debug)]
struct Metric {
    agg: AggKind,
    col: usize,
    filtered: bool,
    window: usize,
}

fn col(i: usize) -> Expr {
    let s = schema();
    let f = &s.fields()[i];
    Expr::Column { index: i, name: f.name.clone().into(), ty: f.ty }
}

fn in_range(fr: &RangeFrame, t: i64, x: i64) -> bool {
    let lo = match fr.start {
        None => true,
        Some(start) => {
            if fr.start_open {
                x > t - start
            } else {
                x >= t - start
            }
        }
    };
    let hi = if fr.end_open { x < t - fr.end } else { x <= t - fr.end };
    lo && hi
}

/// The window of `e` (the last of `accepted`, the events that arrived no later than it
/// and were not dropped) in the partition `part`, before the metric's FILTER: for RANGE
/// the events whose time is in the frame; for `ROWS n PRECEDING` the last `n + 1` of the
/// partition's events with time `<= e.time` in (time, arrival) order.
fn brute_window<'a>(
    frame: &Frame,
    part: &[usize],
    accepted: &'a [Event],
    e: &Event,
) -> Vec<&'a Event> {
    let same = |x: &&Event| part.iter().all(|&c| x.row[c] == e.row[c]);
    match frame {
        Frame::Range(r) => {
            accepted.iter().filter(same).filter(|x| in_range(r, e.time, x.time)).collect()
        }
        Frame::Rows { preceding } => {
            let mut xs: Vec<&Event> =
                accepted.iter().filter(same).filter(|x| x.time <= e.time).collect();
            xs.sort_by_key(|x| x.key());
            let from = xs.len().saturating_sub(*preceding as usize + 1);
            xs.split_off(from)
        }
    }
}

fn brute(agg: AggKind, xs: &[&Event], col: usize) -> Value {
    let vals: Vec<&Value> = xs.iter().map(|e| &e.row[col]).collect();
    let nn: Vec<&Value> = vals.iter().copied().filter(|v| !v.is_null()).collect();
    let nums: Vec<f64> = nn.iter().filter_map(|v| v.as_f64()).collect();
    let mut sorted = nums.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| -> Value {
        if sorted.is_empty() {
            return Value::Null;
        }
        let r = p * (sorted.len() - 1) as f64;
        let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
        Value::Float(sorted[lo] + (sorted[hi] - sorted[lo]) * (r - lo as f64))
    };
    let var = || -> Option<f64> {
        if nums.len() < 2 {
            return None;
        }
        let m = nums.iter().sum::<f64>() / nums.len() as f64;
        Some(nums.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (nums.len() - 1) as f64)
    };
    match agg {
        AggKind::CountStar => Value::Int(xs.len() as i64),
        AggKind::Count => Value::Int(nn.len() as i64),
        AggKind::CountDistinct => {
            let mut keys: Vec<Vec<u8>> = nn
                .iter()
                .map(|v| {
                    let mut k = Vec::new();
                    v.encode_key(&mut k);
                    k
                })
                .collect();
            keys.sort();
            keys.dedup();
            Value::Int(keys.len() as i64)
        }
        AggKind::Sum => {
            if nn.is_empty() {
                Value::Null
            } else if nn.iter().all(|v| matches!(v, Value::Int(_))) {
                Value::Int(nn.iter().map(|v| if let Value::Int(i) = v { *i } else { 0 }).sum())
            } else {
                Value::Float(nums.iter().sum())
            }
        }
        AggKind::Avg => {
            if nums.is_empty() {
                Value::Null
            } else {
                Value::Float(nums.iter().sum::<f64>() / nums.len() as f64)
            }
        }
        AggKind::Min | AggKind::Max => {
            let best = nums.iter().copied().reduce(|a, b| {
                if (agg == AggKind::Min) == (b.total_cmp(&a).is_lt()) {
                    b
                } else {
                    a
                }
            });
            match best {
                None => Value::Null,
                Some(b) => {
                    if nn.iter().all(|v| matches!(v, Value::Int(_))) {
                        Value::Int(b as i64)
                    } else {
                        Value::Float(b)
                    }
                }
            }
        }
        AggKind::VarSamp => var().map_or(Value::Null, Value::Float),
        AggKind::StddevSamp => var().map_or(Value::Null, |v| Value::Float(v.sqrt())),
        AggKind::Median => pct(0.5),
        AggKind::PercentileCont(p) => pct(p),
        AggKind::FirstValue => {
            xs.iter().min_by_key(|e| e.key()).map_or(Value::Null, |e| e.row[col].clone())
        }
        AggKind::LastValue => {
            xs.iter().max_by_key(|e| e.key()).map_or(Value::Null, |e| e.row[col].clone())
        }
    }
}

fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => {
            (x - y).abs() <= 1e-9 * (1.0 + x.abs().max(y.abs())) || (x.is_nan() && y.is_nan())
        }
        (Value::Float(x), Value::Int(y)) | (Value::Int(y), Value::Float(x)) => {
            (x - *y as f64).abs() < 1e-9
        }
        _ => a == b,
    }
}

#[derive(Debug)]
struct Case {
    frames: Vec<(Frame, Vec<usize>)>,
    metrics: Vec<Metric>,
    lateness: i64,
    events: Vec<Event>,
    where_flag: bool,
}

fn run_case(case: &Case, store: StoreKind) {
    run_case_with(case, store, |o| o);
}

/// [`run_case`] with the reservoir's options changed by `res` (small chunks and segments
/// put the events the windows still need into sealed chunks on disk); returns the
/// reservoir's statistics at the end.
fn run_case_with(
    case: &Case,
    store: StoreKind,
    res: impl FnOnce(ReservoirOptions) -> ReservoirOptions,
) -> ReservoirStats {
    let schema = schema();
    let windows: Vec<WindowSpec> = case
        .frames
        .iter()
        .map(|(frame, p)| WindowSpec { partition_by: p.clone(), frame: *frame })
        .collect();
    let mut items = vec![SelectItem::Column { name: "ts".into(), index: 5 }];
    for (i, m) in case.metrics.iter().enumerate() {
        let arg_type = if m.col == 2 { DataType::Int } else { DataType::Float };
        items.push(SelectItem::Metric {
            name: format!("m{i}"),
            metric: MetricSpec {
                agg: m.agg,
                arg: if m.agg == AggKind::CountStar { None } else { Some(col(m.col)) },
                arg_type: if m.agg == AggKind::CountStar { None } else { Some(arg_type) },
                filter: if m.filtered { Some(col(4)) } else { None },
                window: m.window,
            },
        });
    }
    let query =
        QuerySpec { items, filter: if case.where_flag { Some(col(4)) } else { None }, windows };
    let plan = Plan::build(&query, &schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut opts = StoreOptions::new(dir.path().join("state")).memory_budget(64 << 20);
    for ns in Runtime::namespaces(&plan) {
        opts = opts.namespace(NamespaceSpec::list(ns));
    }
    let st = store.open(opts).unwrap();
    let res =
        Reservoir::create(res(ReservoirOptions::new(dir.path().join("res"))), &schema).unwrap();
    let mut rt = Runtime::new(plan, st, res, case.lateness, None).unwrap();

    let mut accepted: Vec<Event> = Vec::new();
    let mut frontier: Option<i64> = None;
    let mut out = Vec::new();
    // The events are announced to the store in batches (Runtime::prefetch), as the job
    // does; a hint that must not change any result. The batch size varies by case.
    let batch = 1 + case.events.len() % 9;
    for (i, e) in case.events.iter().enumerate() {
        if i % batch == 0 {
            rt.prefetch(&case.events[i..(i + batch).min(case.events.len())]);
        }
        let outcome = rt.process(e.clone(), &mut out).unwrap();
        let passes_where = !case.where_flag || e.row[4] == Value::Bool(true);
        if !passes_where {
            assert_eq!(outcome, Outcome::Filtered);
            continue;
        }
        if frontier.is_some_and(|f| e.time < f - case.lateness) {
            assert!(matches!(outcome, Outcome::TooLate(_)), "event {e:?} should be too late");
            continue;
        }
        assert_eq!(outcome, Outcome::Emitted);
        frontier = Some(frontier.map_or(e.time, |f| f.max(e.time)));
        accepted.push(e.clone());
        assert_eq!(out[0], e.row[5]);
        for (i, m) in case.metrics.iter().enumerate() {
            let (frame, part) = &case.frames[m.window];
            let xs: Vec<&Event> = brute_window(frame, part, &accepted, e)
                .into_iter()
                .filter(|x| !m.filtered || x.row[4] == Value::Bool(true))
                .collect();
            let want = brute(m.agg, &xs, m.col);
            assert!(
                close(&out[i + 1], &want),
                "event seq {} t {}: metric {i} {:?}({}) over {frame:?} by {part:?}: got {:?}, want {:?} (window: {:?})",
                e.seq,
                e.time,
                m.agg,
                m.col,
                out[i + 1],
                want,
                xs.iter().map(|x| (x.time, x.seq, x.row[m.col].clone())).collect::<Vec<_>>()
            );
        }
    }
    let c = rt.counters();
    assert_eq!(c.emitted + c.filtered + c.too_late, case.events.len() as u64);
    rt.reservoir_mut().stats()
}

/// Mostly bounded RANGE frames, sometimes `UNBOUNDED PRECEDING` or `ROWS`.
fn frame_strategy() -> impl Strategy<Value = Frame> {
    prop_oneof![
        8 => range_frame_strategy(),
        1 => unbounded_frame_strategy(),
        1 => rows_frame_strategy(),
    ]
}

/// `[unbounded, t]` most often, else a delayed and/or open end.
fn unbounded_frame_strategy() -> impl Strategy<Value = Frame> {
    prop_oneof![
        2 => Just(Frame::unbounded(0, false)),
        1 => (0i64..6, any::<bool>())
            .prop_map(|(end, open)| Frame::unbounded(end, open || end == 0)),
    ]
}

/// Short frames most often (rows leave the window all the time), sometimes longer than a
/// partition's whole stream.
fn rows_frame_strategy() -> impl Strategy<Value = Frame> {
    prop_oneof![4 => 0u64..6, 1 => 6u64..60].prop_map(Frame::rows)
}

fn range_frame_strategy() -> impl Strategy<Value = Frame> {
    (0i64..4, 1i64..40, any::<bool>(), any::<bool>(), 0u8..4).prop_map(
        |(end, len, so, eo, kind)| {
            // kind: 0 = [t-W, t], 1 = (t-W, t], 2 = [t-W, t), 3 = delayed/general.
            match kind {
                0 => Frame::range(len, false, 0, false),
                1 => Frame::range(len, true, 0, false),
                2 => Frame::range(len, false, 0, true),
                _ => Frame::range(end + len, so, end, eo),
            }
        },
    )
}

fn events_strategy(max_disorder: i64) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (
            0i64..4,
            0i64..3,
            0u8..6,
            prop::option::of(-50i64..50),
            any::<bool>(),
            0i64..100,
            0i64..max_disorder + 1,
        ),
        1..160,
    )
    .prop_map(|raw| {
        let mut t = 1_000i64;
        raw.into_iter()
            .enumerate()
            .map(|(i, (k, g, step, v, flag, fv, back))| {
                // Steps: ties (0), small gaps, occasional bursts of time.
                t += match step {
                    0 | 1 => 0,
                    2 | 3 => 1,
                    4 => 3,
                    _ => 17,
                };
                let time = t - back;
                let f = if fv % 7 == 0 { Value::Null } else { Value::Float(fv as f64 / 4.0 - 3.0) };
                Event {
                    time,
                    seq: i as u64,
                    row: vec![
                        Value::Int(k),
                        Value::Int(g),
                        v.map_or(Value::Null, Value::Int),
                        f,
                        Value::Bool(flag),
                        Value::Int(time),
                    ],
                }
            })
            .collect()
    })
}

/// Queries of up to five frames. Half of them partition every frame by the same column,
/// so their `RANGE` nodes share one state record (slots entered and left at different
/// boundaries of one value); the others give each frame its own partitioning.
fn case_strategy() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(frame_strategy(), 1..6),
        any::<bool>(),
        prop::collection::vec(
            (0usize..ALL_AGGS.len(), any::<bool>(), any::<bool>(), 0usize..8, 0u8..3),
            1..6,
        ),
        prop_oneof![Just(0i64), Just(0i64), 1i64..8, Just(25i64)],
        any::<bool>(),
        0i64..12,
    )
        .prop_flat_map(|(frames, shared, ms, lateness, where_flag, disorder)| {
            let nf = frames.len();
            let frames: Vec<(Frame, Vec<usize>)> = frames
                .into_iter()
                .enumerate()
                .map(|(i, f)| {
                    (
                        f,
                        match (shared, i % 3) {
                            (true, _) | (_, 0) => vec![0],
                            (_, 1) => vec![1, 0],
                            _ => vec![],
                        },
                    )
                })
                .collect();
            let metrics: Vec<Metric> = ms
                .into_iter()
                .map(|(a, float, filtered, w, _)| Metric {
                    agg: ALL_AGGS[a],
                    col: if float { 3 } else { 2 },
                    filtered,
                    window: w % nf,
                })
                .collect();
            events_strategy(if lateness == 0 { disorder.min(3) } else { disorder }).prop_map(
                move |events| Case {
                    frames: frames.clone(),
                    metrics: metrics.clone(),
                    lateness,
                    events,
                    where_flag,
                },
            )
        })
}

/// Cases that always hold a `ROWS` and an `UNBOUNDED PRECEDING` frame, each
/// with a metric, beside up to two frames of any kind (so RANGE frames share the query),
/// over partitions of one key, two keys and the whole stream, with lateness from none to
/// far more than the disorder (ties, bursts and events beyond the lateness come from
/// [`events_strategy`]).
fn new_frames_case_strategy() -> impl Strategy<Value = Case> {
    (
        rows_frame_strategy(),
        unbounded_frame_strategy(),
        prop::collection::vec(frame_strategy(), 0..3),
        prop::collection::vec(
            (0usize..ALL_AGGS.len(), any::<bool>(), any::<bool>(), 0usize..8),
            2..8,
        ),
        prop_oneof![Just(0i64), 1i64..8, Just(25i64), Just(200i64)],
        any::<bool>(),
        0i64..30,
        0usize..3,
    )
        .prop_flat_map(|(rows, unbounded, more, ms, lateness, where_flag, disorder, shift)| {
            let frames: Vec<(Frame, Vec<usize>)> = [rows, unbounded]
                .into_iter()
                .chain(more)
                .enumerate()
                .map(|(i, f)| {
                    let part = match (i + shift) % 3 {
                        0 => vec![0],
                        1 => vec![1, 0],
                        _ => vec![],
                    };
                    (f, part)
                })
                .collect();
            let nf = frames.len();
            let metrics: Vec<Metric> = ms
                .into_iter()
                .enumerate()
                .map(|(i, (a, float, filtered, w))| Metric {
                    agg: ALL_AGGS[a],
                    col: if float { 3 } else { 2 },
                    filtered,
                    // The first two metrics use the ROWS and the UNBOUNDED frame.
                    window: if i < 2 { i } else { w % nf },
                })
                .collect();
            events_strategy(if lateness == 0 { disorder.min(3) } else { disorder }).prop_map(
                move |events| Case {
                    frames: frames.clone(),
                    metrics: metrics.clone(),
                    lateness,
                    events,
                    where_flag,
                },
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// `ROWS` and `UNBOUNDED PRECEDING` frames against brute force.
    #[test]
    fn rows_and_unbounded_frames_match_brute_force_mem(case in new_frames_case_strategy()) {
        run_case(&case, StoreKind::Mem);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, ..ProptestConfig::default() })]

    #[test]
    fn rows_and_unbounded_frames_match_brute_force_hashlog(case in new_frames_case_strategy()) {
        run_case(&case, StoreKind::HashLog);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn runtime_matches_brute_force_mem(case in case_strategy()) {
        run_case(&case, StoreKind::Mem);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, ..ProptestConfig::default() })]

    #[test]
    fn runtime_matches_brute_force_hashlog(case in case_strategy()) {
        run_case(&case, StoreKind::HashLog);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    /// Late events within the allowed lateness while the stream spans many reservoir
    /// chunks and segments (1-8 events per chunk, segments of a few chunks): window
    /// cursors re-read sealed chunks from disk.
    #[test]
    fn late_events_with_small_reservoir_chunks_match_brute_force(
        case in case_strategy().prop_filter("late events allowed", |c| c.lateness > 0),
        chunk in 1usize..9,
        hashlog in any::<bool>(),
    ) {
        let store = if hashlog { StoreKind::HashLog } else { StoreKind::Mem };
        run_case_with(&case, store, |o| o.chunk_events(chunk).segment_bytes(256));
    }
}

/// Lateness with the reservoir's chunks on disk. A stream of 3000 events
/// (over 170 chunks of 16 events, segments of about 1 KiB) with events up to 40 ms late
/// (allowed lateness 30 ms, so some are beyond it), windows of 20 ms to 400 ms (hundreds
/// of events, many chunks behind the newest), every aggregate, on both stores, checked
/// against brute force; the window cursors must have read chunks back from disk.
#[test]
fn late_events_within_lateness_over_reservoir_chunks_on_disk() {
    let frames = vec![
        (Frame::range(400, false, 0, false), vec![0]),
        (Frame::range(20, true, 0, false), vec![]),
        (Frame::range(300, false, 100, true), vec![1, 0]),
    ];
    let metrics: Vec<Metric> = ALL_AGGS
        .iter()
        .enumerate()
        .map(|(i, &agg)| Metric {
            agg,
            col: if i % 2 == 0 { 2 } else { 3 },
            filtered: i % 4 == 1,
            window: i % 3,
        })
        .collect();
    let events: Vec<Event> = (0..3000u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17;
            // About 3 events per ms; one in 8 is late by up to 40 ms.
            let back = if x % 8 == 0 { (x >> 5) as i64 % 41 } else { 0 };
            let time = 1_000 + i as i64 / 3 - back;
            Event {
                time,
                seq: i,
                row: vec![
                    Value::Int((x % 5) as i64),
                    Value::Int((x >> 3) as i64 % 3),
                    if x % 11 == 0 { Value::Null } else { Value::Int((x >> 7) as i64 % 100 - 50) },
                    Value::Float(((x >> 9) % 64) as f64 / 8.0 - 4.0),
                    Value::Bool(x % 3 != 0),
                    Value::Int(time),
                ],
            }
        })
        .collect();
    let case = Case { frames, metrics, lateness: 30, events, where_flag: false };
    for store in [StoreKind::Mem, StoreKind::HashLog] {
        let stats = run_case_with(&case, store, |o| o.chunk_events(16).segment_bytes(1024));
        assert!(stats.chunks_sealed >= 150, "{stats:?}");
        assert!(stats.chunk_reads_from_disk > 0, "no chunk was read back from disk: {stats:?}");
    }
}

/// Every aggregate over every bound option on one fixed stream with ties at the window
/// edges (a readable regression case).
#[test]
fn bound_options_on_edge_ties() {
    let frames = vec![
        (Frame::range(10, false, 0, false), vec![0]),
        (Frame::range(10, true, 0, false), vec![0]),
        (Frame::range(10, false, 0, true), vec![0]),
        (Frame::range(15, false, 5, true), vec![0]),
    ];
    let mut metrics = Vec::new();
    for w in 0..frames.len() {
        for &agg in ALL_AGGS {
            metrics.push(Metric { agg, col: 2, filtered: false, window: w });
        }
    }
    let times = [0, 0, 5, 10, 10, 10, 15, 20, 20, 25, 30, 30, 40, 55, 55, 56];
    let events = times
        .iter()
        .enumerate()
        .map(|(i, &t)| Event {
            time: t,
            seq: i as u64,
            row: vec![
                Value::Int(0),
                Value::Int(0),
                if i % 5 == 4 { Value::Null } else { Value::Int((i as i64 * 7) % 11 - 5) },
                Value::Float(i as f64),
                Value::Bool(true),
                Value::Int(t),
            ],
        })
        .collect();
    run_case(&Case { frames, metrics, lateness: 0, events, where_flag: false }, StoreKind::Mem);
}

/// Aggregation state far larger than the hashlog budget (400k partitions under a 32 MiB
/// budget, so records are evicted to disk and read back) gives the same rows as the
/// in-memory store, which the tests above check against brute force.
#[test]
fn state_larger_than_the_budget_matches_memory() {
    let schema = schema();
    let frame = Frame::range(50_000, false, 0, false);
    let mut items = vec![SelectItem::Column { name: "ts".into(), index: 5 }];
    for (i, agg) in
        [AggKind::CountStar, AggKind::Sum, AggKind::Max, AggKind::VarSamp].into_iter().enumerate()
    {
        items.push(SelectItem::Metric {
            name: format!("m{i}"),
            metric: MetricSpec {
                agg,
                arg: (agg != AggKind::CountStar).then(|| col(2)),
                arg_type: (agg != AggKind::CountStar).then_some(DataType::Int),
                filter: None,
                window: 0,
            },
        });
    }
    let query = QuerySpec {
        items,
        filter: None,
        windows: vec![WindowSpec { partition_by: vec![0], frame }],
    };
    let events: Vec<Event> = (0..600_000u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
            let t = 1_000 + i as i64 / 4;
            Event {
                time: t,
                seq: i,
                row: vec![
                    Value::Int((x % 400_000) as i64),
                    Value::Int(0),
                    Value::Int((x % 1000) as i64 - 500),
                    Value::Null,
                    Value::Bool(true),
                    Value::Int(t),
                ],
            }
        })
        .collect();
    // Mem runs event by event; hashlog with the job's batches announced (prefetch looks
    // ahead of the exit cursor into chunks that are on disk by then).
    let run = |kind: StoreKind, budget: u64, batch: usize| -> (Vec<Vec<Value>>, u64) {
        let plan = Plan::build(&query, &schema).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut opts = StoreOptions::new(dir.path().join("state")).memory_budget(budget);
        for ns in Runtime::namespaces(&plan) {
            opts = opts.namespace(NamespaceSpec::list(ns));
        }
        let st = kind.open(opts).unwrap();
        let res =
            Reservoir::create(ReservoirOptions::new(dir.path().join("res")), &schema).unwrap();
        let mut rt = Runtime::new(plan, st, res, 0, None).unwrap();
        let mut rows = Vec::with_capacity(events.len());
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if i % batch == 0 {
                rt.prefetch(&events[i..(i + batch).min(events.len())]);
            }
            assert_eq!(rt.process(e.clone(), &mut out).unwrap(), Outcome::Emitted);
            rows.push(out.clone());
        }
        let reads = rt.store_mut().stats().disk_reads;
        (rows, reads)
    };
    let (want, _) = run(StoreKind::Mem, 1 << 30, 1);
    let (got, disk_reads) = run(StoreKind::HashLog, 32 << 20, 64);
    assert!(disk_reads > 10_000, "the state should have spilled to disk: {disk_reads} disk reads");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g.iter().zip(w).all(|(a, b)| close(a, b)), "row {i}: hashlog {g:?} vs mem {w:?}");
    }
}

fn session_schema() -> Schema {
    let f = |n: &str| Field { name: n.into(), ty: DataType::Int };
    Schema::new(vec![f("ts"), f("k"), f("v")], "ts", TimeUnit::Ms).unwrap()
}

/// By hand, through SQL: `ROWS 1 PRECEDING` with time-ties (ordered by
/// arrival), late events that fall inside and outside later windows, an event beyond the
/// lateness, `FILTER` choosing among the two rows (not the last two big rows), beside a
/// running count.
#[test]
fn rows_frame_by_hand_with_ties_and_late_events() {
    let q = "SELECT ts, SUM(v) OVER r AS s2, COUNT(*) OVER (PARTITION BY k ORDER BY ts RANGE \
             UNBOUNDED PRECEDING) AS n, SUM(v) FILTER (WHERE v > 1) OVER r AS big FROM t \
             WINDOW r AS (PARTITION BY k ORDER BY ts ROWS 1 PRECEDING)";
    let mut cfg = SessionConfig::new(q);
    cfg.allowed_lateness = 5;
    let mut s = Session::open(&cfg, session_schema()).unwrap();
    let null = Value::Null;
    // (ts, k, v) -> (s2, n, big); `None`: too late.
    type Input = (i64, i64, i64);
    type Want = (i64, i64, Value);
    let steps: [(Input, Option<Want>); 9] = [
        ((10, 1, 1), Some((1, 1, null.clone()))),
        ((10, 1, 2), Some((3, 2, Value::Int(2)))), // tie: after the first
        ((12, 1, 4), Some((6, 3, Value::Int(6)))),
        ((11, 1, 8), Some((10, 3, Value::Int(10)))), // late: rows (10, 2) and itself
        ((13, 1, 16), Some((20, 5, Value::Int(20)))), // the late 8 is no longer in the last 2
        ((12, 1, 32), Some((36, 5, Value::Int(36)))), // late tie with 4: after it
        ((14, 1, 1), Some((17, 7, Value::Int(16)))),
        ((5, 1, 100), None),                      // beyond the lateness
        ((9, 2, 3), Some((3, 1, Value::Int(3)))), // late, alone in its partition
    ];
    let mut out = Vec::new();
    for ((ts, k, v), want) in steps {
        let o = s.process(ts, vec![Value::Int(ts), Value::Int(k), Value::Int(v)], &mut out);
        match want {
            None => assert!(matches!(o.unwrap(), Outcome::TooLate(_))),
            Some((s2, n, big)) => {
                assert_eq!(o.unwrap(), Outcome::Emitted);
                assert_eq!(
                    out,
                    vec![Value::Int(ts), Value::Int(s2), Value::Int(n), big],
                    "event ({ts}, {k}, {v})"
                );
            }
        }
    }
}

/// A query whose windows are all `UNBOUNDED PRECEDING` or `ROWS` has no window cursor:
/// the reservoir keeps nothing for it, and its segments are released as they fill.
#[test]
fn unbounded_and_rows_queries_release_reservoir_segments() {
    let schema = schema();
    let mut items = vec![SelectItem::Column { name: "ts".into(), index: 5 }];
    let windows = vec![
        WindowSpec { partition_by: vec![0], frame: Frame::unbounded(0, false) },
        WindowSpec { partition_by: vec![], frame: Frame::rows(50) },
    ];
    for (i, agg) in [AggKind::Sum, AggKind::Max, AggKind::LastValue].into_iter().enumerate() {
        for w in 0..2 {
            items.push(SelectItem::Metric {
                name: format!("m{i}_{w}"),
                metric: MetricSpec {
                    agg,
                    arg: Some(col(2)),
                    arg_type: Some(DataType::Int),
                    filter: None,
                    window: w,
                },
            });
        }
    }
    let query = QuerySpec { items, filter: None, windows };
    let plan = Plan::build(&query, &schema).unwrap();
    assert!(plan.windows.iter().all(|w| w.exit.is_none()), "{:?}", plan.windows);
    assert_eq!(plan.max_start, 0);
    assert!(plan.explain(&schema).contains("0 cursor(s)"), "{}", plan.explain(&schema));
    for lateness in [0, 7] {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = StoreOptions::new(dir.path().join("state")).memory_budget(64 << 20);
        for ns in Runtime::namespaces(&plan) {
            opts = opts.namespace(NamespaceSpec::list(ns));
        }
        let st = StoreKind::HashLog.open(opts).unwrap();
        let res_opts =
            ReservoirOptions::new(dir.path().join("res")).chunk_events(64).segment_bytes(2048);
        let res = Reservoir::create(res_opts, &schema).unwrap();
        let mut rt = Runtime::new(plan.clone(), st, res, lateness, None).unwrap();
        let mut out = Vec::new();
        for i in 0..20_000u64 {
            let time = 1_000 + i as i64 / 2 - i64::from(i % 5 == 3) * 3;
            let row = vec![
                Value::Int((i % 7) as i64),
                Value::Int(0),
                Value::Int((i * 31 % 101) as i64),
                Value::Null,
                Value::Bool(true),
                Value::Int(time),
            ];
            // Without lateness the events 3 ms late are too late; all others are emitted.
            let o = rt.process(Event { time, seq: i, row }, &mut out).unwrap();
            assert!(o == Outcome::Emitted || matches!(o, Outcome::TooLate(_)), "{o:?}");
            if i % 1000 == 999 {
                rt.release_reservoir().unwrap();
                // Only the lateness buffer holds events back.
                assert!(
                    rt.events_retained() <= 2 * lateness as u64 + 2,
                    "{}",
                    rt.events_retained()
                );
            }
        }
        let stats = rt.reservoir_mut().stats();
        assert!(stats.segments_deleted > 20, "{stats:?}");
        assert!(stats.segments_live <= 2, "{stats:?}");
    }
}

/// Every piece of `ROWS` and `UNBOUNDED PRECEDING` state lives in the store, so a session
/// resumed from a checkpoint (with events processed after it and lost) gives exactly the
/// rows of an uninterrupted run, late events included.
#[test]
fn rows_and_unbounded_frames_resume_from_a_checkpoint() {
    let q = "SELECT ts, k, SUM(v) OVER r AS s, MAX(v) OVER r AS mx, FIRST_VALUE(v) OVER r AS fv,
                    COUNT(*) FILTER (WHERE v > 50) OVER r AS big,
                    SUM(v) OVER u AS total, MIN(v) OVER u AS lo, LAST_VALUE(v) OVER u AS lv,
                    COUNT(*) OVER (ORDER BY ts ROWS 3 PRECEDING) AS g3,
                    COUNT(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN 20 PRECEDING AND CURRENT ROW) AS c20
             FROM t
             WINDOW r AS (PARTITION BY k ORDER BY ts ROWS BETWEEN 4 PRECEDING AND CURRENT ROW),
                    u AS (PARTITION BY k ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)";
    let events: Vec<(i64, Vec<Value>)> = (0..4000u64)
        .map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20;
            let back = if x % 6 == 0 { (x >> 4) as i64 % 15 } else { 0 };
            let ts = 1_000 + i as i64 / 3 - back;
            (
                ts,
                vec![Value::Int(ts), Value::Int((x % 9) as i64), Value::Int((x >> 8) as i64 % 100)],
            )
        })
        .collect();
    let run = |s: &mut Session, from: usize, to: usize| -> Vec<Option<Vec<Value>>> {
        let mut out = Vec::new();
        events[from..to]
            .iter()
            .map(|(ts, row)| match s.process(*ts, row.clone(), &mut out).unwrap() {
                Outcome::Emitted => Some(out.clone()),
                _ => None,
            })
            .collect()
    };
    let cfg = |dir: Option<&std::path::Path>| {
        let mut c = SessionConfig::new(q);
        c.allowed_lateness = 10;
        c.memory_budget = 32 << 20;
        c.dir = dir.map(|d| d.to_path_buf());
        c
    };
    let want = run(&mut Session::open(&cfg(None), session_schema()).unwrap(), 0, events.len());
    assert!(want.iter().filter(|r| r.is_none()).count() > 10, "some events should be too late");

    let dir = tempfile::tempdir().unwrap();
    let mut got = Vec::new();
    {
        let mut s = Session::open(&cfg(Some(dir.path())), session_schema()).unwrap();
        got.extend(run(&mut s, 0, 1_500));
        s.checkpoint().unwrap();
        // Processed, never checkpointed: lost with the crash below.
        run(&mut s, 1_500, 2_200);
    }
    let mut s = Session::open(&cfg(Some(dir.path())), session_schema()).unwrap();
    assert!(s.resumed());
    assert_eq!(s.events(), 1_500);
    got.extend(run(&mut s, 1_500, events.len()));
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "event {i}");
    }
}

/// `explain` shows the new frames, the kept-rows namespace, and no cursor for them.
#[test]
fn explain_shows_rows_and_unbounded_frames() {
    let schema = session_schema();
    let q = spillway_engine::sql::parse_query(
        "SELECT SUM(v) OVER (PARTITION BY k ORDER BY ts ROWS 9 PRECEDING) AS a,
                SUM(v) OVER (ORDER BY ts RANGE UNBOUNDED PRECEDING) AS b,
                SUM(v) OVER (ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND INTERVAL '1' SECOND PRECEDING) AS c
         FROM t",
        &schema,
    )
    .unwrap();
    let plan = Plan::build(&q, &schema).unwrap();
    let text = plan.explain(&schema);
    for want in [
        "Reservoir: one tail (arrival), 1 cursor(s): t-1s (events at it included)",
        "Window #0 rows[9 preceding, current]",
        "GroupBy k -> state namespace `g0`, last 10 rows in `g0.rows`",
        "Window #1 [unbounded, t]",
        "Window #2 [unbounded, t-1s]",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert_eq!(plan.max_start, 1000);
    assert_eq!(
        Runtime::namespaces(&plan),
        ["s0", "g0", "g0.rows", "meta"].map(String::from).to_vec()
    );
    // A plan built without the parser is checked too.
    let mut q = q;
    q.windows[0].frame = Frame::rows(100_001);
    let e = Plan::build(&q, &schema).unwrap_err().to_string();
    assert!(e.contains("more than 100000 rows"), "{e}");
}
