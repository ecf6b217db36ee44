//! `spillway kafka status`: a running job's group as the coordinator sees it, read
//! without joining the group.
//!
//! - Two workers (`--worker-id w1`, `w2`) of a per-card job over a 2-partition topic:
//!   once their results are all committed, `status --json` lists both static members
//!   owning the two input partitions between them, each partition with a committed
//!   offset at its end (lag 0), and the table names the group, the members and the
//!   partitions. Once the workers stopped and the coordinator dropped them, the group
//!   is Empty and keeps its offsets.
//! - A group that never existed is reported as such (state Dead, nothing else).
//! - A closed port fails within seconds, naming the address; a missing flag is clap's.
//!
//! Topics and groups are prefixed `status-` (the broker is shared by the test binary).

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{broker, consume, ok, payments, spillway, stderr, BIN};
use crate::scrape::KillOnDrop;

const EVENTS: usize = 2_000;
const QUERY: &str = "SELECT card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s FROM pay \
     WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING \
     AND CURRENT ROW)";

/// `spillway kafka status --brokers B --group G` followed by `extra`.
fn status(b: &str, group: &str, extra: &[&str]) -> std::process::Output {
    let mut a = vec!["kafka", "status", "--brokers", b, "--group", group];
    a.extend_from_slice(extra);
    spillway(&a)
}

/// The parsed `--json` output of a status that must succeed.
fn status_json(b: &str, group: &str) -> Value {
    let o = status(b, group, &["--json"]);
    ok(&o);
    serde_json::from_slice(&o.stdout).expect("status --json prints JSON")
}

/// A worker of the job, killed if the test fails before it stops it.
fn worker(b: &str, id: &str, dir: &std::path::Path) -> KillOnDrop {
    let child = Command::new(BIN)
        .args(["run", "--query", QUERY, "--table", "pay"])
        .args(["--input", &format!("kafka://{b}/status-pay")])
        .args(["--output", &format!("kafka://{b}/status-out"), "--group", "status-job"])
        .args(["--checkpoint-dir", dir.join("ckpt").to_str().expect("utf-8")])
        .args(["--commit-every", "50ms", "--checkpoint-interval", "200ms", "--worker-id", id, "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker");
    KillOnDrop(child)
}

/// The input partitions' rows of a status, by partition.
fn input_rows(s: &Value) -> Vec<&Value> {
    let mut rows: Vec<&Value> = s["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter(|p| p["topic"] == "status-pay")
        .collect();
    rows.sort_by_key(|p| p["partition"].as_i64());
    rows
}

/// Whether the status shows two members `w1` and `w2` owning partitions 0 and 1 of the
/// input between them (each one), and both partitions committed to their end.
fn settled(s: &Value) -> bool {
    let members = s["members"].as_array().expect("members");
    let ids: BTreeSet<&str> =
        members.iter().filter_map(|m| m["group_instance_id"].as_str()).collect();
    let mut owned = Vec::new();
    for m in members {
        for tp in m["assignment"].as_array().expect("assignment") {
            if tp["topic"] == "status-pay" {
                for p in tp["partitions"].as_array().expect("partitions") {
                    owned.push((p.as_i64().expect("a partition"), m["member_id"].clone()));
                }
            }
        }
    }
    owned.sort_by_key(|(p, _)| *p);
    let rows = input_rows(s);
    s["state"] == "Stable"
        && members.len() == 2
        && ids == BTreeSet::from(["w1", "w2"])
        && owned.iter().map(|(p, _)| *p).collect::<Vec<_>>() == [0, 1]
        && owned[0].1 != owned[1].1
        && rows.len() == 2
        && rows.iter().zip(&owned).all(|(r, (_, m))| r["owner"] == *m && r["lag"] == 0)
}

/// Event id -> partition of the `count` messages of `topic` (the id column of `kafka
/// consume --with-id` and the partition column of its latency log, both in read order).
fn partitions_by_id(
    b: &str,
    topic: &str,
    count: &str,
) -> std::collections::BTreeMap<String, String> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (rows, log) = (tmp.path().join("rows.csv"), tmp.path().join("log.csv"));
    ok(&consume(
        b,
        topic,
        &[
            "--count",
            count,
            "--timeout",
            "30s",
            "--with-id",
            "--latency",
            "--latency-log",
            log.to_str().expect("utf-8"),
            "--output",
            rows.to_str().expect("utf-8"),
            "-q",
        ],
    ));
    let (rows, log) =
        (std::fs::read_to_string(rows).unwrap(), std::fs::read_to_string(log).unwrap());
    let ids = rows.lines().skip(1).map(|l| l.split(',').next().unwrap().to_string());
    let parts = log.lines().skip(1).map(|l| l.rsplit(',').next().unwrap().to_string());
    let (ids, parts): (Vec<_>, Vec<_>) = (ids.collect(), parts.collect());
    assert_eq!(ids.len(), parts.len(), "{topic}: one log line per row");
    ids.into_iter().zip(parts).collect()
}

#[test]
fn status_shows_two_workers_owning_the_input_and_no_lag_once_done() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("pay.csv");
    payments(&file, EVENTS, 12, 91);
    ok(&spillway(&[
        "kafka",
        "produce",
        "--brokers",
        b,
        "--topic",
        "status-pay",
        "--input",
        file.to_str().expect("utf-8"),
        "--key",
        "card",
        "--partitions",
        "2",
        "-q",
    ]));
    let mut workers = [worker(b, "w1", tmp.path()), worker(b, "w2", tmp.path())];

    // Every result committed (the input offsets commit in the same transactions); the
    // workers create the result topic, so it may not exist at first.
    let n = EVENTS.to_string();
    let since = Instant::now();
    loop {
        let c = consume(b, "status-out", &["--count", &n, "--timeout", "10s", "-q"]);
        if c.status.success() {
            break;
        }
        for w in &mut workers {
            if let Some(st) = w.try_wait().expect("poll a worker") {
                panic!("a worker exited ({st})");
            }
        }
        let err = stderr(&c);
        assert!(since.elapsed() < Duration::from_secs(120), "results not all committed: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Each result is in the output partition of its event's input partition: a card's
    // results are in one partition, in order, and each output partition has one writer.
    let (ins, outs) =
        (partitions_by_id(b, "status-pay", &n), partitions_by_id(b, "status-out", &n));
    assert_eq!(outs.len(), EVENTS, "one result per event");
    for (id, p) in &outs {
        assert_eq!(
            ins.get(id),
            Some(p),
            "event {id}: result in partition {p}, event in {:?}",
            ins.get(id)
        );
    }
    assert_eq!(outs.values().collect::<BTreeSet<_>>().len(), 2, "{outs:?}");

    // Then both members own an input partition each, with nothing left to read; the
    // group may still be settling (the second worker's join), so wait for it, bounded.
    let since = Instant::now();
    let s = loop {
        let s = status_json(b, "status-job");
        if settled(&s) {
            break s;
        }
        for w in &mut workers {
            if let Some(st) = w.try_wait().expect("poll a worker") {
                panic!("a worker exited ({st}); last status {s:#}");
            }
        }
        assert!(since.elapsed() < Duration::from_secs(60), "never settled: {s:#}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(s["group"], "status-job");
    assert_eq!(s["exists"], true);
    assert_eq!(s["protocol_type"], "consumer");
    for m in s["members"].as_array().expect("members") {
        let (id, inst) =
            (m["member_id"].as_str().unwrap(), m["group_instance_id"].as_str().unwrap());
        assert!(id.starts_with(&format!("{inst}-")), "{m:#}");
        assert!(m["assignment_error"].is_null(), "{m:#}");
    }
    let rows = input_rows(&s);
    let mut events = 0;
    for r in &rows {
        let (committed, end) = (r["committed"].as_i64().unwrap(), r["end"].as_i64().unwrap());
        // `kafka produce` writes in transactions: the end is one offset past the last
        // event, its last transaction's commit marker, which no reader is given.
        assert_eq!(end - committed, 1, "{r:#}");
        assert_eq!(r["high_watermark"], r["end"], "no open transaction on the input: {r:#}");
        events += committed;
    }
    // The committed offsets cover every event (one marker per transaction among them).
    assert!(events >= EVENTS as i64, "{s:#}");

    let t = status(b, "status-job", &[]);
    let table = String::from_utf8_lossy(&t.stdout).into_owned();
    ok(&t);
    assert!(
        table.starts_with("group status-job: Stable, 2 members, protocol consumer/"),
        "{table}"
    );
    for want in ["MEMBER", "INSTANCE", " w1 ", " w2 ", "status-pay[0]", "status-pay[1]", "LAG"] {
        assert!(table.contains(want), "no {want:?} in\n{table}");
    }
    for p in ["0", "1"] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["status-pay", p]))
            .unwrap_or_else(|| panic!("no row of partition {p} in\n{table}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(["w1", "w2"].contains(&cols[2]) && cols[5] == "0", "{line}");
    }

    for w in &workers {
        let st = Command::new("kill").arg(w.id().to_string()).status().expect("kill -TERM");
        assert!(st.success());
    }
    for mut w in workers {
        // Its stderr to the end (it exits on SIGTERM), then its status.
        let mut err = String::new();
        if let Some(mut e) = w.stderr.take() {
            e.read_to_string(&mut err).expect("read a worker's stderr");
        }
        let st = w.wait().expect("wait for a worker");
        assert!(st.success(), "a worker failed: {err}");
    }
    // Static members do not leave: the coordinator drops them after the session timeout
    // (6 s), and the group is then Empty, its offsets kept (bounded wait).
    let since = Instant::now();
    let s = loop {
        let s = status_json(b, "status-job");
        if s["state"] == "Empty" {
            break s;
        }
        assert!(since.elapsed() < Duration::from_secs(60), "never empty: {s:#}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(s["members"], serde_json::json!([]), "{s:#}");
    let rows = input_rows(&s);
    assert_eq!(rows.len(), 2, "{s:#}");
    assert!(rows.iter().all(|r| r["owner"].is_null() && r["lag"] == 0), "{s:#}");
    let t = status(b, "status-job", &[]);
    ok(&t);
    let table = String::from_utf8_lossy(&t.stdout).into_owned();
    assert!(table.starts_with("group status-job: Empty, 0 members"), "{table}");
}

#[test]
fn status_of_a_group_that_never_existed() {
    let b = &broker().bootstrap;
    let s = status_json(b, "status-never-existed");
    assert_eq!(s["exists"], false, "{s:#}");
    assert_eq!(s["state"], "Dead", "{s:#}");
    assert_eq!(s["members"], serde_json::json!([]), "{s:#}");
    assert_eq!(s["partitions"], serde_json::json!([]), "{s:#}");
    let o = status(b, "status-never-existed", &[]);
    ok(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "group status-never-existed: no such group (state Dead: no members and no committed \
         offsets)\n"
    );
    // Asking did not create it.
    assert_eq!(status_json(b, "status-never-existed")["exists"], false);
}

#[test]
fn status_with_an_unreachable_broker_fails_within_seconds() {
    // A port that was just free: the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dead = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let o = status(&dead, "status-dead", &["--json"]);
    let took = start.elapsed();
    let err = stderr(&o);
    assert!(!o.status.success(), "status succeeded against {dead}");
    assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
    assert!(
        err.contains(&format!("no Kafka broker answers at {dead} (connection refused)")),
        "{err}"
    );
    // A refused connection is reported at once; 5 s is ten times what it needs.
    assert!(took < Duration::from_secs(5), "took {took:?} to fail");
}

#[test]
fn status_flags_are_checked_by_clap() {
    let o = spillway(&["kafka", "status", "--group", "g"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("--brokers <HOST:PORT,...>") && err.contains("required"), "{err}");
    let o = spillway(&["kafka", "status", "--brokers", "127.0.0.1:1", "--group", "g", "--tabel"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unexpected argument '--tabel'"), "{}", stderr(&o));
}
