//! A Kafka worker's `--metrics-addr` endpoint, scraped over HTTP while it runs: events in
//! and out, the consumer lag per partition, commit and checkpoint durations and each
//! task's state; the exposition parsed line by line.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{broker, metrics_address, ok, payments, produce, BIN};
use crate::scrape::{scrape, KillOnDrop};

const EVENTS: usize = 3_000;

#[test]
fn a_workers_metrics_show_its_progress_lag_and_commits() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("pay.csv");
    payments(&file, EVENTS, 12, 7);
    let topic = "metrics-in";
    ok(&produce(b, topic, &file, &["--key", "card", "--partitions", "2"]));
    let sql = "SELECT card, ts, SUM(amount) OVER w AS s FROM pay WINDOW w AS (PARTITION BY card \
               ORDER BY ts RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW)";
    let mut w = KillOnDrop(
        Command::new(BIN)
            .args(["run", "--query", sql, "--table", "pay"])
            .args(["--input", &format!("kafka://{b}/{topic}")])
            .args(["--output", &format!("kafka://{b}/metrics-out"), "--group", "metrics"])
            .args(["--checkpoint-dir", tmp.path().join("ckpt").to_str().expect("utf-8")])
            .args(["--commit-every", "50ms", "--checkpoint-interval", "200ms"])
            .args(["--metrics-addr", "127.0.0.1:0", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a worker"),
    );
    let (addr, drain) = metrics_address(&mut w);
    // Scrape until the worker took every event and reported both partitions read to
    // their end (lag and state are refreshed about once a second); bounded.
    let since = Instant::now();
    let lag = |p: i32| format!("spillway_consumer_lag{{topic=\"{topic}\",partition=\"{p}\"}}");
    let m = loop {
        let m = scrape(&addr);
        let done = m.get("spillway_events_in_total") == Some(&(EVENTS as f64))
            && (0..2).all(|p| m.get(&lag(p)) == Some(&0.0))
            && m.get("spillway_checkpoint_seconds_count").is_some_and(|&n| n > 0.0);
        if done {
            break m;
        }
        if let Some(st) = w.try_wait().expect("poll the worker") {
            panic!("the worker exited ({st}): {:?}", drain.join());
        }
        assert!(since.elapsed() < Duration::from_secs(120), "not done: {m:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    // SIGTERM: a clean stop after a final commit and checkpoint.
    let st = Command::new("kill").arg(w.id().to_string()).status().expect("kill -TERM");
    assert!(st.success());
    assert!(w.wait().expect("wait").success(), "{:?}", drain.join());
    assert_eq!(m["spillway_rows_out_total"], EVENTS as f64, "{m:?}");
    assert_eq!(m["spillway_malformed_total"], 0.0, "{m:?}");
    assert!(m["spillway_commit_seconds_count"] > 0.0, "{m:?}");
    for p in 0..2 {
        let keys = format!("spillway_state_keys{{store=\"{topic}-{p}\"}}");
        assert!(m.get(&keys).is_some_and(|&k| k > 0.0), "no {keys}: {m:?}");
    }
}
