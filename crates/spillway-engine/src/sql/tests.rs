//! Tests of the SQL front end: query translation, frames, errors and expression
//! evaluation (with a proptest against a reference evaluator).

use super::*;
use crate::value::{Field, Schema, TimeUnit, Value};

fn schema(unit: TimeUnit) -> Schema {
    let f = |name: &str, ty| Field { name: name.to_string(), ty };
    Schema::new(
        vec![
            f("card", DataType::Str),
            f("merchant", DataType::Str),
            f("ts", DataType::Int),
            f("amount", DataType::Float),
            f("country", DataType::Str),
            f("qty", DataType::Int),
            f("flag", DataType::Bool),
        ],
        "ts",
        unit,
    )
    .unwrap()
}

fn s() -> Schema {
    schema(TimeUnit::S)
}

fn ok(sql: &str) -> QuerySpec {
    match parse_query(sql, &s()) {
        Ok(q) => q,
        Err(e) => panic!("{sql}\n=> {e}"),
    }
}

fn err(sql: &str) -> String {
    match parse_query(sql, &s()) {
        Ok(q) => panic!("expected an error for {sql}, got {q:?}"),
        Err(e) => e.to_string(),
    }
}

fn metric(q: &QuerySpec, i: usize) -> &MetricSpec {
    match &q.items[i] {
        SelectItem::Metric { metric, .. } => metric,
        other => panic!("item {i} is not a metric: {other:?}"),
    }
}

const W5: &str = "RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW";

fn frame(start: i64, start_open: bool, end: i64, end_open: bool) -> Frame {
    Frame::range(start, start_open, end, end_open)
}

#[test]
fn full_example() {
    let q = ok("SELECT card, ts,
       SUM(amount) OVER w AS sum_5m,
       COUNT(*) OVER w,
       AVG(amount) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW) AS avg_m,
       COUNT(*) FILTER (WHERE amount > 100) OVER w AS big,
       PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount) OVER w AS p90
FROM payments
WHERE amount > 0 AND country IN ('PT', 'ES')
WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)");
    let names: Vec<&str> = q.items.iter().map(|i| i.name()).collect();
    assert_eq!(names, ["card", "ts", "sum_5m", "count(*)", "avg_m", "big", "p90"]);
    assert_eq!(q.items[0], SelectItem::Column { name: "card".into(), index: 0 });
    assert_eq!(q.items[1], SelectItem::Column { name: "ts".into(), index: 2 });
    let f5 = frame(300, false, 0, false);
    assert_eq!(
        q.windows,
        vec![
            WindowSpec { partition_by: vec![0], frame: f5 },
            WindowSpec { partition_by: vec![1], frame: f5 }
        ]
    );
    let m = metric(&q, 2);
    assert_eq!(m.agg, AggKind::Sum);
    assert_eq!(m.arg.as_ref().and_then(Expr::as_column), Some(3));
    assert_eq!(m.arg_type, Some(DataType::Float));
    assert_eq!((m.window, m.filter.is_none()), (0, true));
    let m = metric(&q, 3);
    assert_eq!((m.agg, m.arg.is_none(), m.arg_type, m.window), (AggKind::CountStar, true, None, 0));
    assert_eq!(metric(&q, 4).window, 1);
    let m = metric(&q, 5);
    assert_eq!(m.agg, AggKind::CountStar);
    assert_eq!(m.filter.as_ref().unwrap().to_string(), "amount > 100");
    let m = metric(&q, 6);
    assert_eq!(m.agg, AggKind::PercentileCont(0.9));
    assert_eq!(m.arg.as_ref().and_then(Expr::as_column), Some(3));
    assert_eq!(q.filter.as_ref().unwrap().to_string(), "amount > 0 AND country IN ('PT', 'ES')");
}

#[test]
fn named_and_inline_windows_dedup() {
    let q = ok(&format!(
        "SELECT SUM(qty) OVER (PARTITION BY card ORDER BY ts {W5}) AS a, COUNT(*) OVER w AS b,
                MAX(qty) OVER w2 AS c, MIN(qty) OVER (ORDER BY ts {W5}) AS d
         FROM t WINDOW w AS (PARTITION BY CARD ORDER BY TS RANGE BETWEEN 300 PRECEDING AND CURRENT ROW),
                       w2 AS w"
    ));
    assert_eq!(q.windows.len(), 2);
    assert_eq!(q.windows[1].partition_by, Vec::<usize>::new());
    let ws: Vec<usize> = (0..4).map(|i| metric(&q, i).window).collect();
    assert_eq!(ws, [0, 0, 0, 1]);
}

#[test]
fn frames_in_seconds_and_ms() {
    let cases: &[(&str, Frame, Frame)] = &[
        (W5, frame(300, false, 0, false), frame(300_000, false, 0, false)),
        (
            "RANGE INTERVAL '5' MINUTE PRECEDING",
            frame(300, false, 0, false),
            frame(300_000, false, 0, false),
        ),
        (
            "RANGE BETWEEN INTERVAL '6' MINUTE PRECEDING AND INTERVAL '1' MINUTE PRECEDING",
            frame(360, false, 60, false),
            frame(360_000, false, 60_000, false),
        ),
        (
            "RANGE BETWEEN OPEN(INTERVAL '5' MINUTE) PRECEDING AND CURRENT ROW",
            frame(300, true, 0, false),
            frame(300_000, true, 0, false),
        ),
        (
            "RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND OPEN(0) PRECEDING",
            frame(300, false, 0, true),
            frame(300_000, false, 0, true),
        ),
        (
            "RANGE BETWEEN INTERVAL '6' MINUTE PRECEDING AND OPEN(INTERVAL '1' MINUTE) PRECEDING",
            frame(360, false, 60, true),
            frame(360_000, false, 60_000, true),
        ),
        (
            "RANGE BETWEEN INTERVAL '5 minutes' PRECEDING AND CURRENT ROW",
            frame(300, false, 0, false),
            frame(300_000, false, 0, false),
        ),
        (
            "RANGE BETWEEN INTERVAL '1 hour 30 minutes' PRECEDING AND CURRENT ROW",
            frame(5400, false, 0, false),
            frame(5_400_000, false, 0, false),
        ),
        (
            "RANGE BETWEEN INTERVAL '1.5' SECOND PRECEDING AND CURRENT ROW",
            frame(0, false, 0, false), // placeholder, checked below: error in seconds
            frame(1500, false, 0, false),
        ),
        (
            "RANGE BETWEEN INTERVAL '2' DAY PRECEDING AND INTERVAL '1' HOUR PRECEDING",
            frame(172_800, false, 3600, false),
            frame(172_800_000, false, 3_600_000, false),
        ),
        (
            "RANGE BETWEEN 10 PRECEDING AND CURRENT ROW",
            frame(10, false, 0, false),
            frame(10, false, 0, false),
        ),
        (
            "RANGE BETWEEN CURRENT ROW AND CURRENT ROW",
            frame(0, false, 0, false),
            frame(0, false, 0, false),
        ),
        (
            "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            Frame::unbounded(0, false),
            Frame::unbounded(0, false),
        ),
        ("RANGE UNBOUNDED PRECEDING", Frame::unbounded(0, false), Frame::unbounded(0, false)),
        (
            "RANGE BETWEEN UNBOUNDED PRECEDING AND INTERVAL '1' MINUTE PRECEDING",
            Frame::unbounded(60, false),
            Frame::unbounded(60_000, false),
        ),
        (
            "RANGE BETWEEN UNBOUNDED PRECEDING AND OPEN(0) PRECEDING",
            Frame::unbounded(0, true),
            Frame::unbounded(0, true),
        ),
        (
            "RANGE BETWEEN UNBOUNDED PRECEDING AND OPEN(INTERVAL '2' SECOND) PRECEDING",
            Frame::unbounded(2, true),
            Frame::unbounded(2000, true),
        ),
        (
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
            Frame::unbounded(0, false),
            Frame::unbounded(0, false),
        ),
        ("ROWS UNBOUNDED PRECEDING", Frame::unbounded(0, false), Frame::unbounded(0, false)),
        ("ROWS BETWEEN 5 PRECEDING AND CURRENT ROW", Frame::rows(5), Frame::rows(5)),
        ("ROWS 5 PRECEDING", Frame::rows(5), Frame::rows(5)),
        ("rows between (7) preceding and current row", Frame::rows(7), Frame::rows(7)),
        ("ROWS BETWEEN 0 PRECEDING AND CURRENT ROW", Frame::rows(0), Frame::rows(0)),
        ("ROWS BETWEEN CURRENT ROW AND CURRENT ROW", Frame::rows(0), Frame::rows(0)),
        ("ROWS CURRENT ROW", Frame::rows(0), Frame::rows(0)),
        ("ROWS 100000 PRECEDING", Frame::rows(100_000), Frame::rows(100_000)),
    ];
    for (sql_frame, in_s, in_ms) in cases {
        let sql = format!("SELECT COUNT(*) OVER (ORDER BY ts {sql_frame}) FROM t");
        let ms = parse_query(&sql, &schema(TimeUnit::Ms)).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(ms.windows[0].frame, *in_ms, "{sql} (ms)");
        if sql_frame.contains("'1.5' SECOND") {
            let e = err(&sql);
            assert!(e.contains("whole number of s"), "{e}");
        } else {
            assert_eq!(ok(&sql).windows[0].frame, *in_s, "{sql} (s)");
        }
    }
    let e = err("SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '10' MILLISECOND PRECEDING AND CURRENT ROW) FROM t");
    assert!(e.contains("whole number of s"), "{e}");
}

#[test]
fn rows_and_unbounded_windows_are_shared_like_any_other() {
    let q = ok("SELECT COUNT(*) OVER (ORDER BY ts ROWS 3 PRECEDING) AS a, SUM(qty) OVER w AS b,
                MAX(qty) OVER (ORDER BY ts RANGE UNBOUNDED PRECEDING) AS c,
                MIN(qty) OVER (ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS d,
                COUNT(*) FILTER (WHERE flag) OVER (PARTITION BY card ORDER BY ts ROWS 3 PRECEDING) AS e
         FROM t WINDOW w AS (ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)");
    assert_eq!(
        q.windows,
        vec![
            WindowSpec { partition_by: vec![], frame: Frame::rows(3) },
            WindowSpec { partition_by: vec![], frame: Frame::unbounded(0, false) },
            WindowSpec { partition_by: vec![0], frame: Frame::rows(3) },
        ]
    );
    let ws: Vec<usize> = (0..5).map(|i| metric(&q, i).window).collect();
    assert_eq!(ws, [0, 0, 1, 1, 2]);
    let e = err("SELECT COUNT(*) OVER (ORDER BY ts) FROM t");
    assert!(e.contains("`RANGE UNBOUNDED PRECEDING` for a running total"), "{e}");
}

#[test]
fn frame_display_and_contains() {
    assert_eq!(frame(300, false, 0, false).display(TimeUnit::S).to_string(), "[t-5m, t]");
    assert_eq!(frame(300, true, 0, false).display(TimeUnit::S).to_string(), "(t-5m, t]");
    assert_eq!(
        frame(360_000, false, 60_000, true).display(TimeUnit::Ms).to_string(),
        "[t-6m, t-1m)"
    );
    assert_eq!(frame(1500, false, 0, false).display(TimeUnit::Ms).to_string(), "[t-1500ms, t]");
    assert_eq!(frame(300, false, 0, true).to_string(), "[t-300, t)");
    assert_eq!(Frame::unbounded(0, false).display(TimeUnit::S).to_string(), "[unbounded, t]");
    assert_eq!(Frame::unbounded(60, true).display(TimeUnit::S).to_string(), "[unbounded, t-1m)");
    assert_eq!(Frame::unbounded(60, false).to_string(), "[unbounded, t-60]");
    assert_eq!(Frame::rows(9).display(TimeUnit::S).to_string(), "rows[9 preceding, current]");
    assert_eq!(Frame::rows(0).to_string(), "rows[0 preceding, current]");
    assert_eq!((Frame::rows(9).end(), Frame::unbounded(7, true).end()), (0, 7));
    let range =
        |s: Option<i64>, so, e, eo| RangeFrame { start: s, start_open: so, end: e, end_open: eo };
    let cases = [
        (range(Some(5), false, 0, false), [false, true, true, true, false]),
        (range(Some(5), true, 0, false), [false, false, true, true, false]),
        (range(Some(5), false, 0, true), [false, true, true, false, false]),
        (range(Some(5), false, 2, true), [false, true, false, false, false]),
        (range(None, false, 0, false), [true, true, true, true, false]),
        (range(None, false, 0, true), [true, true, true, false, false]),
        (range(None, false, 5, false), [true, true, false, false, false]),
    ];
    // x = t-6, t-5, t-1, t, t+1 with t = 100
    for (fr, want) in cases {
        let got: Vec<bool> = [94, 95, 99, 100, 101].iter().map(|&x| fr.contains(100, x)).collect();
        assert_eq!(got, want, "{fr:?}");
    }
    assert!(range(None, false, 0, false).contains(100, i64::MIN));
}

#[test]
fn aggregates_and_names() {
    let q = ok(&format!(
        "SELECT COUNT(qty) OVER w, COUNT(DISTINCT card) OVER w, AVG(qty) OVER w, MIN(card) OVER w,
                MAX(amount) OVER w, STDDEV_SAMP(amount) OVER w AS s1, STDDEV(qty) OVER w AS s2,
                VAR_SAMP(amount) OVER w AS v1, VARIANCE(amount) OVER w AS v2, MEDIAN(amount) OVER w,
                FIRST_VALUE(country) OVER w, LAST_VALUE(flag) OVER w, sum(qty * 2 + 1) OVER w,
                COUNT(*) FILTER (WHERE flag) OVER w, percentile_cont(1) within group (order by qty) over w
         FROM t WINDOW w AS (ORDER BY ts {W5})"
    ));
    let kinds: Vec<AggKind> = (0..q.items.len()).map(|i| metric(&q, i).agg).collect();
    assert_eq!(
        kinds,
        [
            AggKind::Count,
            AggKind::CountDistinct,
            AggKind::Avg,
            AggKind::Min,
            AggKind::Max,
            AggKind::StddevSamp,
            AggKind::StddevSamp,
            AggKind::VarSamp,
            AggKind::VarSamp,
            AggKind::Median,
            AggKind::FirstValue,
            AggKind::LastValue,
            AggKind::Sum,
            AggKind::CountStar,
            AggKind::PercentileCont(1.0),
        ]
    );
    let names: Vec<&str> = q.items.iter().map(|i| i.name()).collect();
    assert_eq!(
        names,
        [
            "count(qty)",
            "count(distinct card)",
            "avg(qty)",
            "min(card)",
            "max(amount)",
            "s1",
            "s2",
            "v1",
            "v2",
            "median(amount)",
            "first_value(country)",
            "last_value(flag)",
            "sum(qty * 2 + 1)",
            "count(*) filter (where flag)",
            "percentile_cont(1) within group (order by qty)",
        ]
    );
    assert_eq!(metric(&q, 3).arg_type, Some(DataType::Str));
    assert_eq!(metric(&q, 11).arg_type, Some(DataType::Bool));
    assert_eq!(metric(&q, 12).arg_type, Some(DataType::Int));
    assert_eq!(q.windows.len(), 1);
}

#[test]
fn aliases_and_duplicates() {
    let q = ok(&format!(
        "SELECT card AS c, t.amount, SUM(qty) OVER (ORDER BY ts {W5}) total FROM payments t"
    ));
    let names: Vec<&str> = q.items.iter().map(|i| i.name()).collect();
    assert_eq!(names, ["c", "amount", "total"]);
    let e = err(&format!("SELECT card, SUM(qty) OVER (ORDER BY ts {W5}) AS CARD FROM t"));
    assert!(e.contains("`CARD` appears twice"), "{e}");
    let e = err(&format!(
        "SELECT SUM(qty) OVER (ORDER BY ts {W5}), SUM(qty) OVER (PARTITION BY card ORDER BY ts {W5}) FROM t"
    ));
    assert!(e.contains("`sum(qty)` appears twice"), "{e}");
}

#[test]
fn unsupported_constructs_are_named() {
    let w = format!("OVER (ORDER BY ts {W5})");
    let cases: Vec<(String, &str)> = vec![
        ("SELECT SUM(qty) FROM t".into(), "without OVER"),
        (format!("SELECT ROW_NUMBER() {w} FROM t"), "window function `ROW_NUMBER`"),
        (format!("SELECT LAG(qty) {w} FROM t"), "window function `LAG`"),
        (format!("SELECT foo(qty) {w} FROM t"), "function `foo`"),
        (format!("SELECT card, COUNT(*) {w} FROM t GROUP BY card"), "GROUP BY"),
        (format!("SELECT COUNT(*) {w} FROM t HAVING COUNT(*) > 1"), "HAVING"),
        (format!("SELECT COUNT(*) {w} FROM t ORDER BY ts"), "ORDER BY ts"),
        (format!("SELECT COUNT(*) {w} FROM t LIMIT 5"), "LIMIT"),
        (format!("SELECT COUNT(*) {w} FROM t JOIN u ON t.card = u.card"), "join"),
        (format!("SELECT COUNT(*) {w} FROM t, u"), "joins"),
        (format!("SELECT COUNT(*) {w} FROM (SELECT * FROM t) x"), "subquery in FROM"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE qty IN (SELECT 1)"), "subquery"),
        ("SELECT * FROM t".into(), "`*` in the SELECT list"),
        (format!("SELECT qty + 1, COUNT(*) {w} FROM t"), "scalar expression `qty + 1`"),
        (format!("SELECT SUM(qty) {w} + 1 FROM t"), "scalar expression"),
        (format!("SELECT DISTINCT card, COUNT(*) {w} FROM t"), "DISTINCT"),
        (format!("SELECT SUM(DISTINCT qty) {w} FROM t"), "DISTINCT in"),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts GROUPS BETWEEN 5 PRECEDING AND CURRENT ROW) FROM t".into(),
            "GROUPS frame `GROUPS BETWEEN 5 PRECEDING AND CURRENT ROW`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING) FROM t".into(),
            "`5 FOLLOWING` in the RANGE frame",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 5 PRECEDING AND 1 FOLLOWING) FROM t".into(),
            "`1 FOLLOWING` in the ROWS frame `ROWS BETWEEN 5 PRECEDING AND 1 FOLLOWING` (windows cannot look ahead)",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN CURRENT ROW AND 3 FOLLOWING) FROM t".into(),
            "`3 FOLLOWING` in the ROWS frame",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) FROM t".into(),
            "`UNBOUNDED FOLLOWING` in the RANGE frame",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) FROM t".into(),
            "`UNBOUNDED FOLLOWING` in the ROWS frame",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 5 PRECEDING AND UNBOUNDED PRECEDING) FROM t".into(),
            "UNBOUNDED PRECEDING can only start a frame",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 5 PRECEDING AND 2 PRECEDING) FROM t".into(),
            "ROWS frame `ROWS BETWEEN 5 PRECEDING AND 2 PRECEDING` ending at `2 PRECEDING` (a ROWS frame ends at the current row)",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW) FROM t".into(),
            "ROWS frame offset `INTERVAL '5' MINUTE` in `ROWS BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW` (ROWS counts rows)",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN OPEN(5) PRECEDING AND CURRENT ROW) FROM t".into(),
            "ROWS frame offset `OPEN(5)`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN qty PRECEDING AND CURRENT ROW) FROM t".into(),
            "ROWS frame offset `qty`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 1 + 1 PRECEDING AND CURRENT ROW) FROM t".into(),
            "ROWS frame offset `1 + 1`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 2.5 PRECEDING AND CURRENT ROW) FROM t".into(),
            "a ROWS frame offset counts rows: a non-negative integer, found `2.5`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN -1 PRECEDING AND CURRENT ROW) FROM t".into(),
            "must be non-negative",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 100001 PRECEDING AND CURRENT ROW) FROM t".into(),
            "at most 100000 rows before the current one (`ROWS BETWEEN 100001 PRECEDING AND CURRENT ROW` asks for 100001)",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 99999999999999999999999 PRECEDING AND CURRENT ROW) FROM t".into(),
            "a non-negative integer",
        ),
        ("SELECT COUNT(*) OVER (ORDER BY ts) FROM t".into(), "no frame"),
        ("SELECT COUNT(*) OVER () FROM t".into(), "without ORDER BY"),
        (format!("SELECT COUNT(*) OVER (ORDER BY qty {W5}) FROM t"), "ORDER BY qty"),
        (format!("SELECT COUNT(*) OVER (ORDER BY ts DESC {W5}) FROM t"), "ORDER BY ts DESC"),
        (format!("SELECT COUNT(*) OVER (ORDER BY ts, qty {W5}) FROM t"), "ORDER BY ts, qty"),
        (
            format!("SELECT COUNT(*) OVER (PARTITION BY qty % 2 ORDER BY ts {W5}) FROM t"),
            "PARTITION BY expression `qty % 2`",
        ),
        (
            format!("SELECT COUNT(*) OVER (w {W5}) FROM t WINDOW w AS (PARTITION BY card ORDER BY ts {W5})"),
            "refining window `w`",
        ),
        ("SELECT COUNT(*) OVER w FROM t".into(), "unknown window `w`"),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '1' MONTH PRECEDING AND CURRENT ROW) FROM t"
                .into(),
            "interval unit MONTH",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN qty PRECEDING AND CURRENT ROW) FROM t".into(),
            "frame offset `qty`",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 1 PRECEDING AND 5 PRECEDING) FROM t".into(),
            "starts after it ends",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN OPEN(5) PRECEDING AND 5 PRECEDING) FROM t".into(),
            "empty",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 1.5 PRECEDING AND CURRENT ROW) FROM t".into(),
            "non-negative integer number of s",
        ),
        (
            "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN INTERVAL '5 fortnights' PRECEDING AND CURRENT ROW) FROM t"
                .into(),
            "cannot read `5 fortnights`",
        ),
        (format!("SELECT SUM(card) {w} FROM t"), "`sum` needs a numeric"),
        (format!("SELECT MEDIAN(flag) {w} FROM t"), "`median` needs a numeric"),
        (format!("SELECT COUNT(NULL) {w} FROM t"), "has no type"),
        (format!("SELECT PERCENTILE_CONT(1.5) WITHIN GROUP (ORDER BY qty) {w} FROM t"), "outside [0, 1]"),
        (format!("SELECT PERCENTILE_CONT(qty) WITHIN GROUP (ORDER BY qty) {w} FROM t"), "number literal"),
        (format!("SELECT PERCENTILE_CONT(0.5) {w} FROM t"), "WITHIN GROUP"),
        (format!("SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY qty DESC) {w} FROM t"), "DESC"),
        (format!("SELECT SUM(qty) WITHIN GROUP (ORDER BY qty) {w} FROM t"), "WITHIN GROUP only"),
        (format!("SELECT FIRST_VALUE(qty) IGNORE NULLS {w} FROM t"), "IGNORE NULLS"),
        (format!("SELECT SUM(nope) {w} FROM t"), "unknown column `nope`; available columns: card, merchant"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE card > 5"), "needs comparable types"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE qty + 1"), "WHERE needs a boolean"),
        (format!("SELECT COUNT(*) FILTER (WHERE qty) {w} FROM t"), "FILTER (WHERE ..) needs a boolean"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE SUM(qty) > 1"), "inside an expression"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE upper(card) = 'X'"), "function call"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE card LIKE 'x%'"), "expression `card LIKE 'x%'`"),
        (format!("SELECT COUNT(*) {w} FROM t WHERE u.qty > 1"), "`u` is not the input table"),
        (format!("SELECT COUNT(*) {w}"), "FROM <stream> is missing"),
        (format!("SELECT COUNT(*) {w} FROM t; SELECT 1 FROM t"), "found 2"),
        ("INSERT INTO t VALUES (1)".into(), "statement `INSERT ...`"),
        ("SELECT COUNT(* FROM t".into(), "SQL syntax error"),
        (
            format!("WITH x AS (SELECT 1) SELECT COUNT(*) {w} FROM t"),
            "WITH (common table expressions)",
        ),
        (
            format!("SELECT COUNT(*) {w} FROM t UNION SELECT COUNT(*) {w} FROM t"),
            "query body",
        ),
        (
            "SELECT COUNT(*) OVER a FROM t WINDOW a AS b, b AS a".into(),
            "cycle",
        ),
        (
            format!("SELECT COUNT(*) OVER a FROM t WINDOW a AS (ORDER BY ts {W5}), A AS (ORDER BY ts {W5})"),
            "defined twice",
        ),
    ];
    for (sql, want) in cases {
        let e = err(&sql);
        assert!(e.contains(want), "query: {sql}\nerror: {e}\nexpected it to mention: {want}");
    }
}

#[test]
fn unsupported_messages_say_what_is_supported() {
    let e =
        err("SELECT COUNT(*) OVER (ORDER BY ts GROUPS BETWEEN 5 PRECEDING AND CURRENT ROW) FROM t");
    assert!(e.contains("supported: RANGE BETWEEN"), "{e}");
    assert!(e.contains("ROWS BETWEEN <n> PRECEDING AND CURRENT ROW"), "{e}");
    assert!(e.starts_with("line 1, column "), "{e}");
    let e = err(
        "SELECT card,\n  COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 5 PRECEDING AND 2 PRECEDING) FROM t",
    );
    assert!(e.starts_with("line 2, column 3: ROWS frame"), "{e}");
    let e = err("SELECT ROW_NUMBER() OVER (ORDER BY ts RANGE 5 PRECEDING) FROM t");
    assert!(e.contains("supported: COUNT(*)"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Expressions

fn row(
    card: Option<&str>,
    amount: Option<f64>,
    qty: Option<i64>,
    flag: Option<bool>,
) -> Vec<Value> {
    vec![
        card.map_or(Value::Null, |c| Value::Str(c.into())),
        Value::Str("m".into()),
        Value::Int(1000),
        amount.map_or(Value::Null, Value::Float),
        Value::Str("PT".into()),
        qty.map_or(Value::Null, Value::Int),
        flag.map_or(Value::Null, Value::Bool),
    ]
}

fn ev(expr: &str, r: &[Value]) -> Value {
    parse_expr(expr, &s()).unwrap_or_else(|e| panic!("{expr}: {e}")).eval(r)
}

#[test]
fn three_valued_logic_truth_tables() {
    let vals = [Some(true), Some(false), None];
    let lit = |v: Option<bool>| match v {
        Some(true) => "TRUE",
        Some(false) => "FALSE",
        None => "NULL",
    };
    let b = |v: Option<bool>| v.map_or(Value::Null, Value::Bool);
    for l in vals {
        for r in vals {
            let and = match (l, r) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            let or = match (l, r) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            };
            let empty = [];
            assert_eq!(
                ev(&format!("{} AND {}", lit(l), lit(r)), &empty),
                b(and),
                "{l:?} AND {r:?}"
            );
            assert_eq!(ev(&format!("{} OR {}", lit(l), lit(r)), &empty), b(or), "{l:?} OR {r:?}");
            // Also through a column (flag) so it is not constant.
            let rw = row(None, None, None, l);
            assert_eq!(ev(&format!("flag AND {}", lit(r)), &rw), b(and));
            assert_eq!(ev(&format!("{} OR flag", lit(r)), &rw), b(or));
        }
        assert_eq!(ev(&format!("NOT {}", lit(l)), &[]), b(l.map(|x| !x)));
    }
    let pred = parse_expr("flag", &s()).unwrap();
    assert!(pred.eval_bool(&row(None, None, None, Some(true))));
    assert!(!pred.eval_bool(&row(None, None, None, Some(false))));
    assert!(!pred.eval_bool(&row(None, None, None, None)));
}

#[test]
fn null_handling_and_predicates() {
    let r = row(Some("abc"), None, Some(7), None);
    let cases: &[(&str, Value)] = &[
        ("amount IS NULL", Value::Bool(true)),
        ("amount IS NOT NULL", Value::Bool(false)),
        ("qty IS NULL", Value::Bool(false)),
        ("amount > 1", Value::Null),
        ("amount + 1", Value::Null),
        ("qty IN (1, 7)", Value::Bool(true)),
        ("qty IN (1, 2)", Value::Bool(false)),
        ("qty IN (1, NULL)", Value::Null),
        ("qty IN (7, NULL)", Value::Bool(true)),
        ("qty NOT IN (1, NULL)", Value::Null),
        ("qty NOT IN (1, 2)", Value::Bool(true)),
        ("amount IN (1, 2)", Value::Null),
        ("qty IN (7.0, 8)", Value::Bool(true)),
        ("card IN ('x', 'abc')", Value::Bool(true)),
        ("qty BETWEEN 7 AND 9", Value::Bool(true)),
        ("qty BETWEEN 8 AND 9", Value::Bool(false)),
        ("qty NOT BETWEEN 8 AND 9", Value::Bool(true)),
        ("qty BETWEEN NULL AND 9", Value::Null),
        ("qty BETWEEN NULL AND 6", Value::Bool(false)),
        ("qty NOT BETWEEN NULL AND 6", Value::Bool(true)),
        ("card = 'abc'", Value::Bool(true)),
        ("card < 'abd'", Value::Bool(true)),
        ("card <> 'abc'", Value::Bool(false)),
        ("card != 'abc'", Value::Bool(false)),
        ("qty = 7.0", Value::Bool(true)),
        ("qty < 7.5", Value::Bool(true)),
        ("qty >= 7.5", Value::Bool(false)),
        ("qty / 2", Value::Int(3)),
        ("-qty / 2", Value::Int(-3)),
        ("qty % 4", Value::Int(3)),
        ("-qty % 4", Value::Int(-3)),
        ("qty / 0", Value::Null),
        ("qty % 0", Value::Null),
        ("qty / 2.0", Value::Float(3.5)),
        ("qty * 1.5 - 1", Value::Float(9.5)),
        ("qty / 0.0", Value::Null),
        ("9223372036854775807 + qty", Value::Null),
        ("-9223372036854775808 - qty", Value::Null),
        ("-9223372036854775808", Value::Int(i64::MIN)),
        ("-(-9223372036854775808)", Value::Null),
        ("-9223372036854775808 / -1", Value::Null),
        ("-9223372036854775808 % -1", Value::Null),
        ("(qty + 1) * 2", Value::Int(16)),
        ("qty + 1 * 2", Value::Int(9)),
        ("CAST(qty AS DOUBLE)", Value::Float(7.0)),
        ("CAST(2.5 AS BIGINT)", Value::Int(3)),
        ("CAST(-2.5 AS INT)", Value::Int(-3)),
        ("CAST('12' AS INT) + qty", Value::Int(19)),
        ("CAST('x' AS INT)", Value::Null),
        ("CAST(qty AS VARCHAR)", Value::Str("7".into())),
        ("CAST(1e300 AS BIGINT)", Value::Null),
        ("9007199254740993 > 9007199254740992.0", Value::Bool(true)),
        ("9223372036854775807 < 9223372036854775808.0", Value::Bool(true)),
        ("TRUE = flag", Value::Null),
        ("NULL IS NULL", Value::Bool(true)),
    ];
    for (e, want) in cases {
        assert_eq!(ev(e, &r), *want, "{e}");
    }
    // Short rows read as NULL, never panic.
    assert_eq!(ev("qty IS NULL", &[]), Value::Bool(true));
}

#[test]
fn expression_type_errors_and_display() {
    for bad in [
        "card + 1",
        "card > 1",
        "qty IN ('a')",
        "qty BETWEEN 'a' AND 'b'",
        "-card",
        "NOT qty",
        "flag AND 1",
        "flag = 1",
    ] {
        match parse_expr(bad, &s()) {
            Err(SqlError::Type { .. }) => {}
            other => panic!("{bad}: expected a type error, got {other:?}"),
        }
    }
    assert!(matches!(parse_expr("qty qty", &s()), Err(SqlError::Syntax(_))));
    let shown = [
        ("(qty + 1) * 2", None),
        ("qty - (qty - 1)", None),
        ("NOT (flag OR flag) AND flag", None),
        ("qty - -3", None),
        ("-(-qty)", None),
        ("card NOT IN ('it''s', 'x')", None),
        ("amount NOT BETWEEN 1.5 AND 1e20", Some("amount NOT BETWEEN 1.5 AND 1e20")),
        ("(qty = 1) IS NOT NULL", None),
        ("CAST(qty AS int) > 2", Some("CAST(qty AS BIGINT) > 2")),
        ("QTY + 1", Some("qty + 1")),
    ];
    for (src, want) in shown {
        let e = parse_expr(src, &s()).unwrap();
        let text = e.to_string();
        assert_eq!(text, want.unwrap_or(src), "{src}");
        // The rendering parses back to the same expression.
        assert_eq!(parse_expr(&text, &s()).unwrap(), e, "{src}");
    }
    assert_eq!(parse_expr("qty + 1.5", &s()).unwrap().data_type(), Some(DataType::Float));
    assert_eq!(parse_expr("qty + NULL", &s()).unwrap().data_type(), Some(DataType::Int));
    assert_eq!(parse_expr("NULL + NULL", &s()).unwrap().data_type(), None);
    assert_eq!(parse_expr("qty IS NULL", &s()).unwrap().data_type(), Some(DataType::Bool));
}

// ---------------------------------------------------------------------------------------
// Differential test: random int/bool trees vs a reference evaluator.

mod prop {
    use super::*;
    use proptest::prelude::*;

    /// A test-side expression tree over the int columns `qty` (index 5) and `ts` (2).
    #[derive(Clone, Debug)]
    enum T {
        Lit(Option<i64>),
        Col(usize),
        Neg(Box<T>),
        Arith(&'static str, Box<T>, Box<T>),
        Cmp(&'static str, Box<T>, Box<T>),
        And(Box<T>, Box<T>),
        Or(Box<T>, Box<T>),
        Not(Box<T>),
        IsNull(Box<T>),
        /// `negated`, expr, low, high.
        Between(bool, Box<T>, Box<T>, Box<T>),
        /// `negated`, expr, list.
        In(bool, Box<T>, Vec<T>),
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum R {
        I(Option<i64>),
        B(Option<bool>),
    }

    fn int_tree() -> impl Strategy<Value = T> {
        let leaf = prop_oneof![
            prop_oneof![
                1 => Just(None),
                4 => (-4i64..5).prop_map(Some),
                1 => Just(Some(-1)),
                1 => Just(Some(i64::MAX)),
                1 => Just(Some(i64::MIN)),
            ]
            .prop_map(T::Lit),
            prop_oneof![Just(2usize), Just(5usize)].prop_map(T::Col),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|a| T::Neg(Box::new(a))),
                (
                    prop_oneof![Just("+"), Just("-"), Just("*"), Just("/"), Just("%")],
                    inner.clone(),
                    inner
                )
                    .prop_map(|(op, a, b)| T::Arith(op, Box::new(a), Box::new(b))),
            ]
        })
    }

    fn bool_tree() -> impl Strategy<Value = T> {
        let leaf = prop_oneof![
            (
                prop_oneof![Just("="), Just("<>"), Just("<"), Just("<="), Just(">"), Just(">=")],
                int_tree(),
                int_tree()
            )
                .prop_map(|(op, a, b)| T::Cmp(op, Box::new(a), Box::new(b))),
            int_tree().prop_map(|a| T::IsNull(Box::new(a))),
            (any::<bool>(), int_tree(), int_tree(), int_tree())
                .prop_map(|(n, a, b, c)| { T::Between(n, Box::new(a), Box::new(b), Box::new(c)) }),
            (any::<bool>(), int_tree(), proptest::collection::vec(int_tree(), 1..4))
                .prop_map(|(n, a, l)| T::In(n, Box::new(a), l)),
        ];
        leaf.prop_recursive(3, 16, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| T::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| T::Or(Box::new(a), Box::new(b))),
                inner.prop_map(|a| T::Not(Box::new(a))),
            ]
        })
    }

    /// Fully parenthesized SQL.
    fn sql(t: &T) -> String {
        match t {
            T::Lit(None) => "NULL".into(),
            T::Lit(Some(v)) => format!("({v})"),
            T::Col(2) => "ts".into(),
            T::Col(_) => "qty".into(),
            T::Neg(a) => format!("(-{})", sql(a)),
            T::Arith(op, a, b) | T::Cmp(op, a, b) => format!("({} {op} {})", sql(a), sql(b)),
            T::And(a, b) => format!("({} AND {})", sql(a), sql(b)),
            T::Or(a, b) => format!("({} OR {})", sql(a), sql(b)),
            T::Not(a) => format!("(NOT {})", sql(a)),
            T::IsNull(a) => format!("({} IS NULL)", sql(a)),
            T::Between(n, a, b, c) => format!(
                "({} {}BETWEEN {} AND {})",
                sql(a),
                if *n { "NOT " } else { "" },
                sql(b),
                sql(c)
            ),
            T::In(n, a, l) => format!(
                "({} {}IN ({}))",
                sql(a),
                if *n { "NOT " } else { "" },
                l.iter().map(sql).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    fn int(r: R) -> Option<i64> {
        match r {
            R::I(v) => v,
            R::B(_) => unreachable!("typed tree"),
        }
    }

    fn boolean(r: R) -> Option<bool> {
        match r {
            R::B(v) => v,
            R::I(_) => unreachable!("typed tree"),
        }
    }

    /// Reference semantics: exact math in i128, NULL when outside i64 or dividing by 0.
    fn reference(t: &T, row: &[Option<i64>; 8]) -> R {
        let fit = |v: i128| i64::try_from(v).ok();
        match t {
            T::Lit(v) => R::I(*v),
            T::Col(i) => R::I(row[*i]),
            T::Neg(a) => R::I(int(reference(a, row)).and_then(|x| fit(-i128::from(x)))),
            T::Arith(op, a, b) => {
                let (x, y) = (int(reference(a, row)), int(reference(b, row)));
                R::I(match (x, y) {
                    (Some(x), Some(y)) => {
                        let (x, y) = (i128::from(x), i128::from(y));
                        match *op {
                            "+" => fit(x + y),
                            "-" => fit(x - y),
                            "*" => fit(x * y),
                            "/" if y != 0 => fit(x / y),
                            "%" if y != 0 => fit(x / y).and_then(|_| fit(x % y)),
                            _ => None,
                        }
                    }
                    _ => None,
                })
            }
            T::Cmp(op, a, b) => {
                let (x, y) = (int(reference(a, row)), int(reference(b, row)));
                R::B(match (x, y) {
                    (Some(x), Some(y)) => Some(match *op {
                        "=" => x == y,
                        "<>" => x != y,
                        "<" => x < y,
                        "<=" => x <= y,
                        ">" => x > y,
                        _ => x >= y,
                    }),
                    _ => None,
                })
            }
            T::And(a, b) => {
                let (x, y) = (boolean(reference(a, row)), boolean(reference(b, row)));
                R::B(if x == Some(false) || y == Some(false) {
                    Some(false)
                } else if x == Some(true) && y == Some(true) {
                    Some(true)
                } else {
                    None
                })
            }
            T::Or(a, b) => {
                let (x, y) = (boolean(reference(a, row)), boolean(reference(b, row)));
                R::B(if x == Some(true) || y == Some(true) {
                    Some(true)
                } else if x == Some(false) && y == Some(false) {
                    Some(false)
                } else {
                    None
                })
            }
            T::Not(a) => R::B(boolean(reference(a, row)).map(|x| !x)),
            T::IsNull(a) => R::B(Some(int(reference(a, row)).is_none())),
            T::Between(n, a, lo, hi) => {
                let x = int(reference(a, row));
                let l = int(reference(lo, row));
                let h = int(reference(hi, row));
                let ge = x.zip(l).map(|(x, l)| x >= l);
                let le = x.zip(h).map(|(x, h)| x <= h);
                let r = match (ge, le) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                };
                R::B(r.map(|b| b != *n))
            }
            T::In(n, a, list) => {
                let x = int(reference(a, row));
                let items: Vec<Option<i64>> = list.iter().map(|e| int(reference(e, row))).collect();
                let r = match x {
                    None => None,
                    Some(x) if items.contains(&Some(x)) => Some(true),
                    Some(_) if items.contains(&None) => None,
                    Some(_) => Some(false),
                };
                R::B(r.map(|b| b != *n))
            }
        }
    }

    fn to_value(r: R) -> Value {
        match r {
            R::I(v) => v.map_or(Value::Null, Value::Int),
            R::B(v) => v.map_or(Value::Null, Value::Bool),
        }
    }

    fn make_row(ts: Option<i64>, qty: Option<i64>) -> ([Option<i64>; 8], Vec<Value>) {
        let mut refrow = [None; 8];
        refrow[2] = ts;
        refrow[5] = qty;
        let mut r = row(Some("c"), Some(1.0), qty, Some(true));
        r[2] = ts.map_or(Value::Null, Value::Int);
        (refrow, r)
    }

    fn small() -> impl Strategy<Value = Option<i64>> {
        prop_oneof![Just(None), (-5i64..6).prop_map(Some), Just(Some(i64::MIN))]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn int_trees_match_reference(t in int_tree(), ts in small(), qty in small()) {
            let (refrow, r) = make_row(ts, qty);
            let text = sql(&t);
            let e = parse_expr(&text, &s()).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            prop_assert_eq!(e.eval(&r), to_value(reference(&t, &refrow)), "{}", text);
            // The rendering means the same thing.
            let again = parse_expr(&e.to_string(), &s()).unwrap();
            prop_assert_eq!(again.eval(&r), e.eval(&r), "{} vs {}", text, e);
        }

        #[test]
        fn bool_trees_match_reference(t in bool_tree(), ts in small(), qty in small()) {
            let (refrow, r) = make_row(ts, qty);
            let text = sql(&t);
            let e = parse_expr(&text, &s()).map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            let want = reference(&t, &refrow);
            prop_assert_eq!(e.eval(&r), to_value(want), "{}", text);
            prop_assert_eq!(e.eval_bool(&r), want == R::B(Some(true)), "{}", text);
            let again = parse_expr(&e.to_string(), &s()).unwrap();
            prop_assert_eq!(again.eval(&r), e.eval(&r), "{} vs {}", text, e);
        }
    }
}

// ---------------------------------------------------------------- input name and hints

/// `FROM anything` ran over the input; the FROM name must be the input's.
#[test]
fn from_must_name_the_input_table() {
    let q = format!("SELECT card, SUM(amount) OVER (ORDER BY ts {W5}) AS s FROM payments p");
    assert_eq!(check_table(&q, "payments"), Ok(()));
    assert_eq!(check_table(&q, "PAYMENTS"), Ok(()));
    assert_eq!(check_table(&q.replace("FROM payments", "FROM db.payments"), "payments"), Ok(()));
    let e = check_table(&q.replace("FROM payments", "FROM anything"), "payments").unwrap_err();
    assert!(
        matches!(&e, SqlError::UnknownTable { name, table, .. } if name == "anything" && table == "payments")
    );
    assert!(
        e.to_string().contains("FROM `anything`: no such table; the input is the table `payments`"),
        "{e}"
    );
    assert!(e.to_string().starts_with("line 1, column "), "{e}");
    // What parse_query rejects is left to it.
    assert_eq!(check_table("SELECT COUNT(* FROM t", "payments"), Ok(()));
    assert_eq!(check_table("SELECT 1", "payments"), Ok(()));
}

#[test]
fn column_type_hints_follow_the_query() {
    let q = format!(
        "SELECT card, SUM(amount) OVER w AS s, MIN(merchant) OVER w AS m, \
         COUNT(*) FILTER (WHERE flag AND qty > 3) OVER w AS n, \
         PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY price) OVER w AS p \
         FROM t WHERE country = 'PT' AND -(fee) < 1 WINDOW w AS (PARTITION BY card ORDER BY ts {W5})"
    );
    use DataType::*;
    let hints = column_type_hints(&q);
    let want: Vec<(String, DataType)> = [
        ("amount", Float),
        ("flag", Bool),
        ("qty", Float),
        ("price", Float),
        ("country", Str),
        ("fee", Float),
    ]
    .into_iter()
    .map(|(n, t)| (n.to_string(), t))
    .collect();
    assert_eq!(hints, want);
    assert!(column_type_hints("SELECT COUNT(* FROM t").is_empty());
}

/// Hostile query text (a typo, a query pasted from another dialect, bytes from a
/// mangled file): the whole front end, parse to plan to `explain`, answers with a
/// `Result`, never a panic. The texts are valid queries of every kind with characters
/// dropped, repeated, swapped for SQL's punctuation or replaced by any character, and
/// arbitrary strings.
mod hostile_text {
    use super::s;
    use crate::operator::QueryPlan;
    use proptest::prelude::*;

    const QUERIES: &[&str] = &[
        "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n FROM t \
         WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)",
        "SELECT card, AVG(amount) OVER (PARTITION BY card ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS a FROM t WHERE amount > 2",
        "SELECT card, COUNT(*) FILTER (WHERE flag) OVER (PARTITION BY card, merchant ORDER BY ts RANGE BETWEEN 10 PRECEDING AND 5 PRECEDING) AS d FROM t",
        "SELECT card, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount) OVER (PARTITION BY card ORDER BY ts RANGE UNBOUNDED PRECEDING) AS p FROM t",
        "SELECT card, COUNT(DISTINCT merchant) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW) AS m, CASE WHEN qty > 1 THEN 'x' ELSE 'y' END AS c FROM t",
        "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '-10' SECOND)) GROUP BY card, window_start, window_end",
        "SELECT window_start, window_end, MEDIAN(amount) AS m FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), 10, 30)) GROUP BY window_start, window_end",
        "SELECT card, window_start, window_end, window_time, MAX(amount) AS hi FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), 5, 20)) WHERE country = 'NL' GROUP BY card, window_start, window_end",
        "SELECT card, window_start, window_end, COUNT(*) AS n FROM TABLE(SESSION(TABLE t PARTITION BY card, DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY card, window_start, window_end",
    ];

    /// One edit of a query: (position, kind, character).
    fn edited(q: &str, edits: &[(usize, u8, char)]) -> String {
        let mut c: Vec<char> = q.chars().collect();
        for &(at, kind, ch) in edits {
            if c.is_empty() {
                break;
            }
            let i = at % c.len();
            match kind % 4 {
                0 => {
                    c.remove(i);
                }
                1 => c.insert(i, c[i]),
                2 => c[i] = ch,
                _ => c.insert(i, ch),
            }
        }
        c.into_iter().collect()
    }

    fn front_end(sql: &str) {
        let schema = s();
        let _ = super::parse(sql, &schema);
        if let Ok(plan) = QueryPlan::build(sql, &schema, None) {
            let _ = plan.explain(&schema);
            let _ = plan.output_types(&schema);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn edited_queries_are_an_answer_not_a_panic(
            q in proptest::sample::select(QUERIES),
            edits in proptest::collection::vec(
                (any::<usize>(), any::<u8>(), prop_oneof![
                    proptest::sample::select(&['(', ')', ',', '\'', '"', '-', '*', ' ', '0', '9', '.', ';', '`'][..]),
                    any::<char>(),
                ]),
                1..6,
            ),
        ) {
            front_end(&edited(q, &edits));
        }

        #[test]
        fn any_text_is_an_answer_not_a_panic(sql in "\\PC{0,80}") {
            front_end(&sql);
        }
    }
}
