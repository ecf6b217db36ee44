//! Windowed aggregations (window table functions in FROM) on Kafka workers, computed in
//! place in the input's tasks: the committed rows equal `spillway run`'s on the same
//! events, also when the first worker is SIGKILLed and another takes over from its
//! checkpoints. Each partition's watermark is its own, so a window fires at another
//! event than in one process: the rows are compared as sorted sets (`consume --sort`
//! orders them by the event that fired them). A stream never ends, so the events end
//! with one far-later event per card, which moves every partition's watermark past every
//! window; the windows those events open (which `spillway run` fires at the end of its
//! file) are left out of the comparison. A topic keyed by a column outside GROUP BY is
//! refused with the way out.

use std::path::Path;

use crate::common::{
    assert_no_more_rows, broker, consume_sorted, kill_once_committed, ok, payments, produce,
    run_file, start_worker, stderr,
};
use crate::scrape::KillOnDrop;

const CARDS: u32 = 12;
const EVENTS: usize = 4_000;
/// How far after the last payment the closing events come (ms).
const CLOSE_AFTER: i64 = 60_000;

fn query(tvf: &str) -> String {
    format!(
        "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s FROM \
         TABLE({tvf}) GROUP BY card, window_start, window_end"
    )
}

/// Payments in time order, then one event per card `CLOSE_AFTER` later; returns the
/// closing events' time.
fn input(path: &Path, seed: u64) -> i64 {
    payments(path, EVENTS, CARDS, seed);
    let mut s = std::fs::read_to_string(path).expect("read payments");
    let last: i64 = s
        .lines()
        .last()
        .and_then(|l| l.split(',').next())
        .and_then(|t| t.parse().ok())
        .expect("a last timestamp");
    let close = last + CLOSE_AFTER;
    for card in 0..CARDS {
        s.push_str(&format!("{close},{card},0,1.0\n"));
    }
    std::fs::write(path, s).expect("write payments");
    close
}

/// The header and the sorted rows of a CSV whose windows end by `close` (not those of
/// the closing events).
fn rows_before(csv: &str, close: i64) -> (String, Vec<String>) {
    let mut lines = csv.lines();
    let header = lines.next().expect("a header").to_string();
    let mut rows: Vec<String> = lines
        .filter(|l| {
            let end: i64 = l.split(',').nth(2).and_then(|s| s.parse().ok()).expect("window_end");
            end <= close
        })
        .map(str::to_string)
        .collect();
    rows.sort();
    (header, rows)
}

fn worker(b: &str, name: &str, sql: &str, dir: &Path, idle_exit: bool) -> std::process::Child {
    let extra: &[&str] = if idle_exit { &["--idle-exit", "3s"] } else { &[] };
    start_worker(b, &format!("win-{name}"), sql, dir, extra)
}

/// The payments into `topic`, two partitions keyed by `key`.
fn produce_keyed(b: &str, topic: &str, input: &Path, key: &str) {
    ok(&produce(b, topic, input, &["--key", key, "--partitions", "2"]));
}

/// Runs `tvf` on workers (the first killed once it committed some rows when `kill`) and
/// compares their committed rows with `spillway run`'s.
fn check(name: &str, tvf: &str, kill: bool, seed: u64) {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let file = t.join("pay.csv");
    let close = input(&file, seed);
    let sql = query(tvf);
    produce_keyed(b, &format!("win-{name}"), &file, "card");

    let want_file = t.join("want.csv");
    run_file(&sql, &file, &want_file, &[]);
    let (header, want) = rows_before(&std::fs::read_to_string(&want_file).expect("want"), close);
    assert!(want.len() > 100, "{name}: {} windows", want.len());

    let out = format!("win-{name}-out");
    if kill {
        // Killed once it committed some rows (the output topic has a few), or when an
        // assertion fails first.
        let mut first = KillOnDrop(worker(b, name, &sql, t, false));
        kill_once_committed(b, &out, 20, &mut first, name);
    }
    let last = worker(b, name, &sql, t, true);
    let o = last.wait_with_output().expect("wait for the worker");
    ok(&o);

    let got_file = t.join("got.csv");
    let err = stderr(&consume_sorted(b, &out, want.len(), &got_file));
    let (got_header, got) = rows_before(&std::fs::read_to_string(&got_file).expect("got"), close);
    assert_eq!(got_header, header, "{name}: columns");
    if got.len() != want.len() {
        let missing: Vec<&String> = want.iter().filter(|w| !got.contains(w)).take(5).collect();
        let extra: Vec<&String> = got.iter().filter(|g| !want.contains(g)).take(5).collect();
        panic!(
            "{name}: {} rows, not {} ({err}); missing {missing:?}, not in spillway run's \
             {extra:?}",
            got.len(),
            want.len()
        );
    }
    if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != w) {
        panic!("{name}: the workers' rows differ from spillway run's: got {g}, want {w}");
    }
    // Nothing more was committed: every row once, and no window of the closing events.
    assert_no_more_rows(b, &out, want.len(), name);
}

#[test]
fn tumble_on_workers_equals_spillway_run_after_a_kill() {
    check("tumble", "TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '2' SECOND)", true, 41);
}

#[test]
fn session_windows_on_workers_equal_spillway_run() {
    check(
        "session",
        "SESSION(TABLE pay PARTITION BY card, DESCRIPTOR(ts), INTERVAL '300' MILLISECOND)",
        false,
        42,
    );
}

#[test]
fn a_topic_keyed_outside_group_by_is_refused() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("pay.csv");
    input(&file, 43);
    produce_keyed(b, "win-refused", &file, "merchant");
    let sql = query("TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '2' SECOND)");
    let o = worker(b, "refused", &sql, tmp.path(), true).wait_with_output().expect("wait");
    let e = stderr(&o);
    assert!(
        !o.status.success()
            && e.contains("a windowed aggregation grouped by (card)")
            && e.contains("--key card"),
        "{e}"
    );
}
