//! `--ties peers` on Kafka workers: SQL's peer rows, computed in place in the input's
//! tasks. A row is held until its time is complete in its partition, then sent keyed
//! by its own event's id with its own message's timestamp, so the committed results
//! equal `spillway run --ties peers` row for row, across a worker's clean stop and
//! another's SIGKILL (the rows held at a checkpoint, and which events they belong to,
//! are part of it). A stream never ends, so the events end with
//! one far-later event per card, which completes every partition's last time; those
//! events' own rows stay held and are left out of the comparison. A query whose peers
//! could be in different partitions, and a windowed aggregation, are refused.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::common::{
    assert_no_more_rows, broker, consume, consume_sorted, kill_once_committed, metrics_address, ok,
    payments, produce, run_file, start_worker, stderr,
};
use crate::scrape::{scrape, KillOnDrop};

const CARDS: u32 = 12;
const EVENTS: usize = 4_000;
const QUERY: &str = "SELECT card, ts, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s FROM pay \
                     WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '10' \
                     SECOND PRECEDING AND CURRENT ROW)";

/// Payments in time order, their times cut to whole seconds (about four rows of a card
/// share each second), then one event per card a minute after the last.
fn input(path: &Path, seed: u64) {
    payments(path, EVENTS, CARDS, seed);
    let text = std::fs::read_to_string(path).expect("read payments");
    let mut lines = text.lines();
    let mut s = format!("{}\n", lines.next().expect("header"));
    let mut last = 0;
    for line in lines {
        let (ts, rest) = line.split_once(',').expect("ts,...");
        let ts: i64 = ts.parse::<i64>().expect("ts") / 1000 * 1000;
        last = ts;
        s.push_str(&format!("{ts},{rest}\n"));
    }
    for card in 0..CARDS {
        s.push_str(&format!("{},{card},0,1.0\n", last + 60_000));
    }
    std::fs::write(path, s).expect("write payments");
}

/// The payments into `topic`, keyed by `key`, continuing an earlier produce of the
/// file's first rows when `resume`.
fn produce_keyed(b: &str, topic: &str, input: &Path, key: &str, partitions: &str, resume: bool) {
    let mut a = vec!["--key", key, "--partitions", partitions];
    if resume {
        a.push("--resume");
    }
    ok(&produce(b, topic, input, &a));
}

/// A `--ties peers` worker of `topic`, stopping once idle for 3 s when `idle_exit`.
fn worker(b: &str, topic: &str, dir: &Path, idle_exit: bool) -> Child {
    let idle: &[&str] = if idle_exit { &["--idle-exit", "3s"] } else { &[] };
    start_worker(b, topic, QUERY, dir, &[&["--ties", "peers"], idle].concat())
}

/// A `--ties peers` worker of `topic` serving metrics on a port of its own; returns it
/// and the address.
fn worker_with_metrics(b: &str, topic: &str, dir: &Path) -> (KillOnDrop, String) {
    let extra = ["--ties", "peers", "--metrics-addr", "127.0.0.1:0"];
    let mut w = KillOnDrop(start_worker(b, topic, QUERY, dir, &extra));
    let (addr, _stderr) = metrics_address(&mut w);
    (w, addr)
}

#[test]
fn peer_rows_on_workers_equal_spillway_run_across_a_stop_and_a_kill() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let file = t.join("pay.csv");
    input(&file, 51);
    let text = std::fs::read_to_string(&file).expect("read");
    let half = t.join("half.csv");
    let first = EVENTS / 2;
    std::fs::write(
        &half,
        text.lines().take(1 + first).map(|l| format!("{l}\n")).collect::<String>(),
    )
    .expect("write half");
    let topic = "peers-pay";
    produce_keyed(b, topic, &half, "card", "2", false);

    // spillway run's rows, in input order; the closing events' rows are its last ones.
    let want_file = t.join("want.csv");
    run_file(QUERY, &file, &want_file, &["--ties", "peers"]);
    let want_text = std::fs::read_to_string(&want_file).expect("want");
    let want: Vec<&str> = want_text.lines().take(1 + EVENTS).collect();
    // Not vacuous: per-event results differ on the tied rows.
    let per_event = t.join("per-event.csv");
    run_file(QUERY, &file, &per_event, &[]);
    assert_ne!(std::fs::read_to_string(&per_event).expect("per-event"), want_text);

    // 1. A worker takes the first half, then stops cleanly (SIGTERM: a final commit and
    //    checkpoint), holding the rows of each partition's last time.
    let (mut w, addr) = worker_with_metrics(b, topic, t);
    let since = Instant::now();
    let lag = |p: i32| format!("spillway_consumer_lag{{topic=\"{topic}\",partition=\"{p}\"}}");
    loop {
        let m = scrape(&addr);
        if m.get("spillway_events_in_total") == Some(&(first as f64))
            && (0..2).all(|p| m.get(&lag(p)) == Some(&0.0))
        {
            break;
        }
        if let Some(st) = w.try_wait().expect("poll the worker") {
            panic!("the first worker exited ({st})");
        }
        assert!(since.elapsed() < Duration::from_secs(120), "not done: {m:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = Command::new("kill").arg(w.id().to_string()).status().expect("kill -TERM");
    assert!(st.success());
    assert!(w.wait().expect("wait").success(), "the first worker failed to stop");

    // 2. The rest of the file; a second worker restores the held rows (and whose they
    //    are) from the checkpoints, and is SIGKILLed once it committed more rows.
    produce_keyed(b, topic, &file, "card", "2", true);
    let out = format!("{topic}-out");
    let mut second = KillOnDrop(worker(b, topic, t, false));
    kill_once_committed(b, &out, first + 200, &mut second, "the second worker");
    // 3. A third worker finishes the input.
    ok(&worker(b, topic, t, true).wait_with_output().expect("wait for the worker"));

    let got_file = t.join("got.csv");
    let err = stderr(&consume_sorted(b, &out, EVENTS, &got_file));
    let got_text = std::fs::read_to_string(&got_file).expect("got");
    let got: Vec<&str> = got_text.lines().collect();
    assert_eq!(got.len(), want.len(), "rows ({err})");
    if let Some((i, (g, w))) = got.iter().zip(&want).enumerate().find(|(_, (g, w))| g != w) {
        panic!("line {i}: the workers' row is {g}, spillway run's {w}");
    }
    // Nothing more was committed: every row once, the closing events' rows still held.
    assert_no_more_rows(b, &out, EVENTS, "peers");
}

#[test]
fn peers_whose_rows_could_be_in_two_partitions_are_refused() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("pay.csv");
    input(&file, 52);
    let topic = "peers-routed";
    // One partition: the workers would route the events to a topic keyed by card.
    produce_keyed(b, topic, &file, "merchant", "1", false);
    let o = worker(b, topic, tmp.path(), true).wait_with_output().expect("wait");
    let e = stderr(&o);
    assert!(
        !o.status.success()
            && e.contains("--ties peers runs in place only")
            && e.contains("(merchant)"),
        "{e}"
    );
    // A windowed aggregation groups rows by window: refused before anything is created.
    let tvf = "SELECT card, window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE pay, \
               DESCRIPTOR(ts), INTERVAL '2' SECOND)) GROUP BY card, window_start, window_end";
    let extra = ["--ties", "peers", "--idle-exit", "3s"];
    let o = start_worker(b, topic, tvf, tmp.path(), &extra).wait_with_output().expect("wait");
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("ties = peers applies to OVER"), "{e}");
    assert!(stderr(&consume(b, &format!("{topic}-out"), &["--timeout", "2s", "-q"]))
        .contains("does not exist"));
}
