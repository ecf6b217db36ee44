//! Differential tests of windowed aggregation (`TUMBLE`, `HOP`, `CUMULATE`, `SESSION`)
//! against a brute-force oracle written from Flink's rules (see the `operator::windowed` module
//! docs): random streams with ties, gaps, bursts, events out of order within and beyond
//! the allowed lateness, a watermark delay, `WHERE` and `FILTER`, over several stores; the
//! output rows must match the oracle's exactly and in order, including the late updates.
//! Also: a checkpoint taken mid-stream and restored into a reopened store gives the same
//! output as an uninterrupted run.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use spillway_engine::operator::over::Outcome;
use spillway_engine::operator::windowed::{WindowAgg, WindowPlan, WindowSnapshot};
use spillway_engine::sql::{parse, Query, TvfWindow};
use spillway_engine::value::{DataType, Event, Field, Schema, TimeUnit, Value};
use spillway_store::{StateStore, StoreKind, StoreOptions};

// Columns: 0 k (int), 1 v (int or null), 2 flag (bool), 3 ts.
fn schema() -> Schema {
    let f = |n: &str, ty| Field { name: n.into(), ty };
    Schema::new(
        vec![
            f("k", DataType::Int),
            f("v", DataType::Int),
            f("flag", DataType::Bool),
            f("ts", DataType::Int),
        ],
        "ts",
        TimeUnit::Ms,
    )
    .unwrap()
}

const AGGS: &str = "COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(v) AS hi, \
     COUNT(DISTINCT v) AS d, FIRST_VALUE(v) AS fv, LAST_VALUE(v) AS lv, AVG(v) AS a, \
     COUNT(*) FILTER (WHERE flag) AS nf, SUM(v) FILTER (WHERE v > 5) AS big, \
     MEDIAN(v) AS med, PERCENTILE_CONT(0.3) WITHIN GROUP (ORDER BY v) AS p30";

fn sql(w: TvfWindow, where_flag: bool) -> String {
    let tvf = match w {
        TvfWindow::Tumble { size, offset } => {
            format!("TUMBLE(TABLE t, DESCRIPTOR(ts), {size}{})", offset_arg(offset))
        }
        TvfWindow::Hop { slide, size, offset } => {
            format!("HOP(TABLE t, DESCRIPTOR(ts), {slide}, {size}{})", offset_arg(offset))
        }
        TvfWindow::Cumulate { step, size, offset } => {
            format!("CUMULATE(TABLE t, DESCRIPTOR(ts), {step}, {size}{})", offset_arg(offset))
        }
        TvfWindow::Session { gap } => {
            format!("SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), {gap})")
        }
    };
    format!(
        "SELECT k, window_start, window_end, {AGGS} FROM TABLE({tvf}) {} GROUP BY k, \
         window_start, window_end",
        if where_flag { "WHERE v IS NOT NULL OR flag" } else { "" }
    )
}

/// The optional offset argument: none for 0 (the default), so both forms are tested.
fn offset_arg(offset: i64) -> String {
    if offset == 0 {
        String::new()
    } else {
        format!(", {offset}")
    }
}

fn passes_where(e: &Event, where_flag: bool) -> bool {
    !where_flag || e.row[1] != Value::Null || e.row[2] == Value::Bool(true)
}

/// The aggregates of `AGGS` over `events`, brute force.
fn brute_row(k: i64, start: i64, end: i64, events: &[Event]) -> Vec<Value> {
    let mut evs: Vec<&Event> = events.iter().collect();
    evs.sort_by_key(|e| (e.time, e.seq));
    let vals: Vec<i64> = evs
        .iter()
        .filter_map(|e| match e.row[1] {
            Value::Int(v) => Some(v),
            _ => None,
        })
        .collect();
    let opt = |o: Option<i64>| o.map_or(Value::Null, Value::Int);
    let sum = if vals.is_empty() { Value::Null } else { Value::Int(vals.iter().sum()) };
    let mut distinct = vals.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let avg = if vals.is_empty() {
        Value::Null
    } else {
        Value::Float(vals.iter().sum::<i64>() as f64 / vals.len() as f64)
    };
    let big: Vec<i64> = vals.iter().copied().filter(|&v| v > 5).collect();
    // PostgreSQL's PERCENTILE_CONT: rank p (n - 1) in the sorted values, interpolated.
    let pct = |p: f64| {
        let mut xs: Vec<f64> = vals.iter().map(|&v| v as f64).collect();
        xs.sort_by(f64::total_cmp);
        if xs.is_empty() {
            return Value::Null;
        }
        let rank = p * (xs.len() - 1) as f64;
        let (lo, hi) = (xs[rank.floor() as usize], xs[rank.ceil() as usize]);
        Value::Float(if lo == hi { lo } else { lo + (rank - rank.floor()) * (hi - lo) })
    };
    vec![
        Value::Int(k),
        Value::Int(start),
        Value::Int(end),
        Value::Int(evs.len() as i64),
        sum,
        opt(vals.iter().copied().min()),
        opt(vals.iter().copied().max()),
        Value::Int(distinct.len() as i64),
        evs.first().map_or(Value::Null, |e| e.row[1].clone()),
        evs.last().map_or(Value::Null, |e| e.row[1].clone()),
        avg,
        Value::Int(evs.iter().filter(|e| e.row[2] == Value::Bool(true)).count() as i64),
        if big.is_empty() { Value::Null } else { Value::Int(big.iter().sum()) },
        pct(0.5),
        pct(0.3),
    ]
}

/// Windows of an aligned kind holding `t`, brute force: every start the offset plus a
/// multiple of the slide (size) whose window holds `t`, ascending by end.
fn brute_windows(w: TvfWindow, t: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    match w {
        TvfWindow::Tumble { size, offset } => {
            for s in (t - 2 * size)..=t {
                if (s - offset).rem_euclid(size) == 0 && s <= t && t < s + size {
                    out.push((s, s + size));
                }
            }
        }
        TvfWindow::Hop { slide, size, offset } => {
            for s in (t - 2 * size)..=t {
                if (s - offset).rem_euclid(slide) == 0 && s <= t && t < s + size {
                    out.push((s, s + size));
                }
            }
        }
        TvfWindow::Cumulate { step, size, offset } => {
            for s in (t - 2 * size)..=t {
                if (s - offset).rem_euclid(size) != 0 {
                    continue;
                }
                let mut e = s + step;
                while e <= s + size {
                    if s <= t && t < e {
                        out.push((s, e));
                    }
                    e += step;
                }
            }
        }
        TvfWindow::Session { .. } => unreachable!(),
    }
    out.sort_by_key(|&(_, e)| e);
    out
}

#[derive(Default)]
struct Bag {
    events: Vec<Event>,
    fired: bool,
    reg: u64,
}

/// What the oracle says: per event its outcome (0 emitted, 1 filtered, 2 too late) and
/// the windows it missed, and the rows in order.
struct Oracle {
    outcomes: Vec<u8>,
    missed: Vec<Vec<(i64, i64)>>,
    rows: Vec<Vec<Value>>,
    /// Events taken although older than the newest before them.
    late_in_bounds: u64,
}

/// Flink's `BoundedOutOfOrdernessWatermarks`: the newest time minus the delay minus 1.
fn oracle(w: TvfWindow, events: &[Event], lateness: i64, delay: i64, where_flag: bool) -> Oracle {
    let mut outcomes = Vec::new();
    let mut missed = Vec::new();
    let mut late_in_bounds = 0;
    let mut rows = Vec::new();
    let mut max_t: Option<i64> = None;
    let mut counter = 0u64;
    let wm_of = |m: Option<i64>| m.map_or(i64::MIN, |m| m - delay - 1);
    match w {
        TvfWindow::Session { gap } => {
            struct S {
                start: i64,
                end: i64,
                events: Vec<Event>,
                fired_end: Option<i64>,
            }
            let mut sessions: BTreeMap<i64, Vec<S>> = BTreeMap::new();
            let mut reg: HashMap<(i64, i64), u64> = HashMap::new();
            let fire = |sessions: &mut BTreeMap<i64, Vec<S>>,
                        reg: &HashMap<(i64, i64), u64>,
                        wm: i64,
                        rows: &mut Vec<Vec<Value>>| {
                let mut due: Vec<(i64, u64, i64, usize)> = Vec::new();
                for (&k, ss) in sessions.iter() {
                    for (i, s) in ss.iter().enumerate() {
                        if s.end - 1 <= wm && s.fired_end != Some(s.end) {
                            due.push((s.end, reg[&(k, s.end)], k, i));
                        }
                    }
                }
                due.sort();
                for (_, _, k, i) in due {
                    let s = &mut sessions.get_mut(&k).unwrap()[i];
                    rows.push(brute_row(k, s.start, s.end, &s.events));
                    s.fired_end = Some(s.end);
                }
            };
            for e in events {
                let wm = wm_of(max_t);
                missed.push(Vec::new());
                if !passes_where(e, where_flag) {
                    outcomes.push(1);
                } else {
                    let Value::Int(k) = e.row[0] else { unreachable!() };
                    let ss = sessions.entry(k).or_default();
                    let (mut start, mut end) = (e.time, e.time + gap);
                    for s in ss.iter() {
                        if s.start <= e.time + gap && s.end >= e.time {
                            start = start.min(s.start);
                            end = end.max(s.end);
                        }
                    }
                    if end - 1 + lateness <= wm {
                        outcomes.push(2);
                        missed.last_mut().unwrap().push((start, end));
                    } else {
                        outcomes.push(0);
                        late_in_bounds += u64::from(max_t.is_some_and(|m| e.time < m));
                        let mut evs = vec![e.clone()];
                        ss.retain_mut(|s| {
                            if s.start <= e.time + gap && s.end >= e.time {
                                evs.append(&mut s.events);
                                false
                            } else {
                                true
                            }
                        });
                        reg.entry((k, end)).or_insert_with(|| {
                            counter += 1;
                            counter
                        });
                        let mut s = S { start, end, events: evs, fired_end: None };
                        if end - 1 <= wm {
                            rows.push(brute_row(k, start, end, &s.events));
                            s.fired_end = Some(end);
                        }
                        ss.push(s);
                        ss.sort_by_key(|s| s.start);
                    }
                }
                max_t = Some(max_t.map_or(e.time, |m| m.max(e.time)));
                let wm = wm_of(max_t);
                fire(&mut sessions, &reg, wm, &mut rows);
                for ss in sessions.values_mut() {
                    ss.retain(|s| s.end - 1 + lateness > wm);
                }
            }
            fire(&mut sessions, &reg, i64::MAX, &mut rows);
        }
        _ => {
            let mut bags: BTreeMap<(i64, i64, i64), Bag> = BTreeMap::new();
            let fire =
                |bags: &mut BTreeMap<(i64, i64, i64), Bag>, wm: i64, rows: &mut Vec<Vec<Value>>| {
                    let mut due: Vec<(i64, u64, (i64, i64, i64))> = bags
                        .iter()
                        .filter(|(&(_, _, e), b)| !b.fired && e - 1 <= wm)
                        .map(|(&key, b)| (key.2, b.reg, key))
                        .collect();
                    due.sort();
                    for (_, _, key) in due {
                        let b = bags.get_mut(&key).unwrap();
                        rows.push(brute_row(key.0, key.1, key.2, &b.events));
                        b.fired = true;
                    }
                };
            for e in events {
                let wm = wm_of(max_t);
                missed.push(Vec::new());
                if !passes_where(e, where_flag) {
                    outcomes.push(1);
                } else {
                    let Value::Int(k) = e.row[0] else { unreachable!() };
                    let mut taken = false;
                    for (s, end) in brute_windows(w, e.time) {
                        if end - 1 + lateness <= wm {
                            missed.last_mut().unwrap().push((s, end));
                            continue;
                        }
                        taken = true;
                        let b = bags.entry((k, s, end)).or_insert_with(|| {
                            counter += 1;
                            Bag { reg: counter, ..Bag::default() }
                        });
                        b.events.push(e.clone());
                        if end - 1 <= wm {
                            rows.push(brute_row(k, s, end, &b.events));
                            b.fired = true;
                        }
                    }
                    outcomes.push(if taken { 0 } else { 2 });
                    late_in_bounds += u64::from(taken && max_t.is_some_and(|m| e.time < m));
                }
                max_t = Some(max_t.map_or(e.time, |m| m.max(e.time)));
                fire(&mut bags, wm_of(max_t), &mut rows);
            }
            fire(&mut bags, i64::MAX, &mut rows);
        }
    }
    Oracle { outcomes, missed, rows, late_in_bounds }
}

fn open_store(kind: StoreKind, dir: &std::path::Path, plan: &WindowPlan) -> Box<dyn StateStore> {
    let mut opts = StoreOptions::new(dir.join("state")).memory_budget(64 << 20);
    for spec in plan.namespace_specs() {
        opts = opts.namespace(spec);
    }
    kind.open(opts).unwrap()
}

fn plan_of(w: TvfWindow, where_flag: bool) -> WindowPlan {
    match parse(&sql(w, where_flag), &schema()).unwrap() {
        Query::Windowed(q) => WindowPlan::build(&q),
        Query::Over(_) => panic!("not a windowed query"),
    }
}

fn same_rows(got: &[Vec<Value>], want: &[Vec<Value>]) -> bool {
    got.len() == want.len()
        && got.iter().zip(want).all(|(a, b)| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (Value::Float(x), Value::Float(y)) => (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                    _ => x == y,
                })
        })
}

/// Runs `events` through a WindowAgg over `kind`; with `restart_at`, checkpoints after
/// that many events, drops everything and continues from the checkpoint in a reopened
/// store.
fn run(
    w: TvfWindow,
    events: &[Event],
    lateness: i64,
    delay: i64,
    where_flag: bool,
    kind: StoreKind,
    restart_at: Option<usize>,
) -> Oracle {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan_of(w, where_flag);
    let mut agg =
        WindowAgg::new(plan.clone(), open_store(kind, dir.path(), &plan), lateness, delay, None)
            .unwrap();
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    let mut missed = Vec::new();
    let batch = 1 + events.len() % 7;
    for (i, e) in events.iter().enumerate() {
        if Some(i) == restart_at {
            let snap: WindowSnapshot = agg.snapshot();
            agg.store_mut().checkpoint().unwrap();
            drop(agg);
            agg = WindowAgg::new(
                plan.clone(),
                open_store(kind, dir.path(), &plan),
                lateness,
                delay,
                Some(snap),
            )
            .unwrap();
        }
        if i % batch == 0 {
            agg.prefetch(&events[i..(i + batch).min(events.len())]);
        }
        outcomes.push(match agg.process(e.clone(), &mut rows).unwrap() {
            Outcome::Emitted => 0,
            Outcome::Filtered => 1,
            Outcome::TooLate(x) => {
                assert_eq!(&x, e);
                2
            }
        });
        missed.push(match agg.take_missed() {
            Some(m) => {
                assert_eq!(m.row, e.row);
                assert!(!m.windows.is_empty());
                m.windows
            }
            None => Vec::new(),
        });
    }
    agg.finish(&mut rows).unwrap();
    let c = agg.counters();
    assert_eq!(c.emitted, rows.len() as u64);
    assert_eq!(c.events, events.len() as u64);
    assert_eq!(c.too_late, outcomes.iter().filter(|&&o| o == 2).count() as u64);
    // Windows missed by events taken into others, one count per window.
    let partly: usize =
        outcomes.iter().zip(&missed).filter(|(&o, _)| o == 0).map(|(_, m)| m.len()).sum();
    assert_eq!(agg.stats().missed_windows, partly as u64);
    // Everything fired at the end: no window state is left behind.
    let st = agg.store_mut().stats();
    if let Some(live) = st.live_keys {
        assert_eq!(live, 0, "window state left after the end of input");
    }
    Oracle { outcomes, missed, rows, late_in_bounds: c.late_in_bounds }
}

fn window_strategy() -> impl Strategy<Value = TvfWindow> {
    prop_oneof![
        (1i64..12)
            .prop_flat_map(|size| (Just(size), -(size - 1)..size))
            .prop_map(|(size, offset)| TvfWindow::Tumble { size, offset }),
        (1i64..6, 1i64..5, prop_oneof![Just(0i64), -20i64..20])
            .prop_map(|(slide, n, offset)| { TvfWindow::Hop { slide, size: slide * n, offset } }),
        (1i64..6, 1i64..5, prop_oneof![Just(0i64), -20i64..20])
            .prop_map(|(step, n, offset)| { TvfWindow::Cumulate { step, size: step * n, offset } }),
        (1i64..10).prop_map(|gap| TvfWindow::Session { gap }),
    ]
}

/// Streams with ties (step 0), bursts, gaps (big steps) and events out of order by up to
/// `max_disorder` behind the newest; times may be negative.
fn events_strategy(max_disorder: i64) -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(
        (
            prop_oneof![6 => 0i64..3, 1 => 10i64..30],
            0i64..=max_disorder,
            prop::bool::weighted(0.3),
            0i64..3,
            prop::option::weighted(0.85, 0i64..12),
            any::<bool>(),
        ),
        0..80,
    )
    .prop_map(|v| {
        let mut t = -20i64;
        v.into_iter()
            .enumerate()
            .map(|(seq, (step, dis, late, k, val, flag))| {
                t += step;
                let time = if late { t - dis } else { t };
                Event {
                    time,
                    seq: seq as u64,
                    row: vec![
                        Value::Int(k),
                        val.map_or(Value::Null, Value::Int),
                        Value::Bool(flag),
                        Value::Int(time),
                    ],
                }
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn windowed_aggregation_matches_the_oracle(
        w in window_strategy(),
        events in events_strategy(25),
        lateness in prop_oneof![Just(0i64), 0i64..15],
        delay in prop_oneof![Just(0i64), 0i64..6],
        where_flag in any::<bool>(),
        hashlog in any::<bool>(),
    ) {
        let kind = if hashlog { StoreKind::HashLog } else { StoreKind::Mem };
        let want = oracle(w, &events, lateness, delay, where_flag);
        let got = run(w, &events, lateness, delay, where_flag, kind, None);
        prop_assert_eq!(&got.outcomes, &want.outcomes);
        prop_assert_eq!(&got.missed, &want.missed);
        prop_assert_eq!(got.late_in_bounds, want.late_in_bounds);
        prop_assert!(same_rows(&got.rows, &want.rows), "{w:?} L={lateness} delay={delay}\n got {:?}\nwant {:?}", got.rows, want.rows);
    }

    #[test]
    fn a_restored_checkpoint_continues_exactly(
        w in window_strategy(),
        events in events_strategy(12),
        lateness in 0i64..8,
        cut in 0usize..80,
    ) {
        let cut = cut.min(events.len());
        let want = oracle(w, &events, lateness, 0, false);
        let got = run(w, &events, lateness, 0, false, StoreKind::HashLog, Some(cut));
        prop_assert_eq!(&got.outcomes, &want.outcomes);
        prop_assert_eq!(&got.missed, &want.missed);
        prop_assert_eq!(got.late_in_bounds, want.late_in_bounds);
        prop_assert!(same_rows(&got.rows, &want.rows), "{w:?} cut {cut}\n got {:?}\nwant {:?}", got.rows, want.rows);
    }
}

fn ev(seq: u64, time: i64, k: i64, v: i64) -> Event {
    Event {
        time,
        seq,
        row: vec![Value::Int(k), Value::Int(v), Value::Bool(true), Value::Int(time)],
    }
}

/// The documented edges, spelled out: a window fires when the watermark (the newest
/// time minus the delay minus 1) reaches `end - 1`, so with delay 0 at the first event at
/// or after `end`; a tie with the newest event is in time; an event at `end - 1` after
/// that is late, and with lateness it updates the window, which is emitted again.
/// (When the watermark was the newest time itself, the second event at t=4 below was
/// already late, as with Flink SQL's `WATERMARK FOR ts AS ts`.)
#[test]
fn firing_edges_and_late_updates() {
    let w = TvfWindow::Tumble { size: 5, offset: 0 };
    let events =
        vec![ev(0, 0, 1, 1), ev(1, 4, 1, 2), ev(2, 4, 1, 3), ev(3, 5, 1, 4), ev(4, 4, 1, 5)];
    // Lateness 0: the tie at t=4 is in time; the event at t=4 after t=5 is dropped.
    let got = run(w, &events, 0, 0, false, StoreKind::Mem, None);
    assert_eq!(got.outcomes, vec![0, 0, 0, 0, 2]);
    assert_eq!(got.missed[4], vec![(0, 5)]);
    assert_eq!(got.late_in_bounds, 0);
    assert_eq!(got.rows.len(), 2);
    let head = |r: &[Value]| r[..5].to_vec();
    let row = |start: i64, end: i64, n: i64, s: i64| {
        vec![Value::Int(1), Value::Int(start), Value::Int(end), Value::Int(n), Value::Int(s)]
    };
    assert_eq!(head(&got.rows[0]), row(0, 5, 3, 6));
    // Lateness 1: it updates [0, 5), emitted again at once with 4 events.
    let got = run(w, &events, 1, 0, false, StoreKind::Mem, None);
    assert_eq!(got.outcomes, vec![0, 0, 0, 0, 0]);
    assert_eq!(got.late_in_bounds, 1, "only the event older than the newest");
    let heads: Vec<Vec<Value>> = got.rows.iter().map(|r| head(r)).collect();
    assert_eq!(heads, vec![row(0, 5, 3, 6), row(0, 5, 4, 11), row(5, 10, 1, 4)]);
    // A watermark delay of 1: the event one behind the newest is in time.
    let got = run(w, &events, 0, 1, false, StoreKind::Mem, None);
    assert_eq!(got.outcomes, vec![0, 0, 0, 0, 0]);
    assert_eq!(got.late_in_bounds, 1);
    assert_eq!(head(&got.rows[0]), row(0, 5, 4, 11));
}

/// An event late for some of its HOP windows and in time for others enters
/// those, misses the cleaned ones, and each missed window is counted and reported with
/// the event; an event none of whose windows is open is too late (all of them missed).
#[test]
fn an_event_late_for_some_windows_reports_each_missed_one() {
    // HOP size 6 slide 2: t=5 is in [0, 6), [2, 8), [4, 10).
    let w = TvfWindow::Hop { slide: 2, size: 6, offset: 0 };
    // After t=9 the watermark is 8: [0, 6) and [2, 8) have fired (and are cleaned, L=0).
    let events = vec![ev(0, 1, 1, 1), ev(1, 9, 1, 2), ev(2, 5, 1, 3), ev(3, 1, 1, 4)];
    let got = run(w, &events, 0, 0, false, StoreKind::Mem, None);
    assert_eq!(got.outcomes, vec![0, 0, 0, 2]);
    assert_eq!(got.missed[2], vec![(0, 6), (2, 8)], "t=5 enters [4, 10) only");
    assert_eq!(got.missed[3], vec![(-4, 2), (-2, 4), (0, 6)], "t=1: all windows gone");
    assert_eq!(got.late_in_bounds, 1, "t=5: older than the newest, in time for [4, 10)");
    let want = oracle(w, &events, 0, 0, false);
    assert!(same_rows(&got.rows, &want.rows));
    // [4, 10) holds t=5 (v=3) and t=9 (v=2).
    let r = got.rows.iter().find(|r| r[1] == Value::Int(4)).unwrap();
    assert_eq!(&r[3..5], &[Value::Int(2), Value::Int(5)]);
}

/// The side output format for what events missed: the input's columns, then the window,
/// one row per missed window.
#[test]
fn missed_windows_are_written_one_row_per_window() {
    use spillway_engine::operator::windowed::Missed;
    use spillway_engine::source::Sink;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.late.csv");
    let mut side = Sink::create_window_side_output(&path, &schema()).unwrap();
    let e = ev(2, 5, 1, 3);
    side.write_missed(&Missed { row: e.row, windows: vec![(0, 6), (2, 8)] }).unwrap();
    side.sync().unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "k,v,flag,ts,window_start,window_end\n1,3,true,5,0,6\n1,3,true,5,2,8\n"
    );
}

/// The reported case: a time-sorted file with two events at 59999 under
/// `TUMBLE(.., INTERVAL '1' MINUTE)`. The second 59999 was late (the watermark was the
/// newest time); now `[0, 60000)` holds all three and nothing is late.
#[test]
fn events_tied_with_the_newest_are_never_late() {
    use spillway_engine::session::{Session, SessionConfig};
    use spillway_engine::source::{self, SourceOptions};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pay.csv");
    std::fs::write(&input, "ts,card,amount\n1000,a,1\n59999,a,2\n59999,a,3\n60000,a,4\n").unwrap();
    let mut src = source::open(&input, &SourceOptions::new("ts")).unwrap();
    let q = "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s \
             FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '1' MINUTE)) \
             GROUP BY card, window_start, window_end";
    let mut s = Session::open(&SessionConfig::new(q), src.schema().clone()).unwrap();
    let mut rows = Vec::new();
    while let Some(e) = src.next_event().unwrap() {
        assert_eq!(s.push(e.time, e.row, &mut rows).unwrap(), Outcome::Emitted);
    }
    s.finish(&mut rows).unwrap();
    let a = || Value::Str("a".into());
    assert_eq!(
        rows,
        vec![
            vec![a(), Value::Int(0), Value::Int(60_000), Value::Int(3), Value::Int(6)],
            vec![a(), Value::Int(60_000), Value::Int(120_000), Value::Int(1), Value::Int(4)],
        ]
    );
    let c = s.counters();
    assert_eq!((c.too_late, c.late_in_bounds), (0, 0));
}

/// Timer lists longer than one chunk, over RocksDB-free stores: many keys in one window.
#[test]
fn many_keys_in_one_window() {
    let w = TvfWindow::Hop { slide: 10, size: 20, offset: 0 };
    let events: Vec<Event> = (0..5000u64).map(|i| ev(i, (i / 1000) as i64, i as i64, 1)).collect();
    let got = run(w, &events, 0, 0, false, StoreKind::HashLog, None);
    let want = oracle(w, &events, 0, 0, false);
    assert!(same_rows(&got.rows, &want.rows));
    assert_eq!(got.rows.len(), 10_000);
}
