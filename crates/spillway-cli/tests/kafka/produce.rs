//! `spillway kafka produce` is safe to retry; an unreachable broker fails fast.
//!
//! - A malformed row is found before anything is sent: the topic is not even created.
//! - A produce killed (SIGKILL) in the middle of a `--rate` run leaves committed chunks
//!   and an open transaction; a plain re-run is refused, `--resume` with another file
//!   is refused, and `--resume` with the same file completes the topic to exactly the
//!   file, each row once, with ids 0..N-1.
//! - `--append` adds the rows again under new ids; a different `--key` is refused.
//! - `produce`, `consume` and a worker fail within seconds against a refused port.
//!
//! Topics are prefixed `prod-` (the broker is shared by the test binary).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{broker, consume, ok, payments, produce, stderr, BIN};

/// The `N rows from T ...; D event ids seen more than once` summary of a consume.
fn rows_and_dups(err: &str) -> (u64, u64) {
    let line = err.lines().find(|l| l.contains(" rows from ")).unwrap_or_else(|| panic!("{err}"));
    let rows = line.split(' ').next().and_then(|n| n.parse().ok()).expect("row count");
    let dups = line
        .split("; ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    (rows, dups)
}

/// Every committed row of `topic` in event-id order with its id, read until `timeout`
/// (asking for one row more than `rows`, so a complete read ends at the timeout and
/// extra rows are read too). Returns the file's lines and the duplicate-id count.
fn committed_rows(
    b: &str,
    topic: &str,
    rows: usize,
    dir: &Path,
    timeout: &str,
) -> (Vec<String>, u64) {
    let out = dir.join(format!("{topic}.csv"));
    let more = (rows + 1).to_string();
    let o = consume(
        b,
        topic,
        &[
            "--count",
            &more,
            "--timeout",
            timeout,
            "--sort",
            "--with-id",
            "--output",
            out.to_str().expect("utf-8"),
            "-q",
        ],
    );
    let err = stderr(&o);
    let (n, dups) = rows_and_dups(&err);
    assert!(!o.status.success() && err.contains("timed out"), "{err}");
    let text = std::fs::read_to_string(&out).expect("consumed rows");
    let lines: Vec<String> = text.lines().skip(1).map(String::from).collect();
    assert_eq!(lines.len() as u64, n);
    (lines, dups)
}

/// `rows == want`, naming the first row that differs.
fn assert_rows(rows: &[String], want: &[String], what: &str) {
    if let Some(i) = (0..rows.len().min(want.len())).find(|&i| rows[i] != want[i]) {
        panic!("{what}: row {i} is {:?}, not {:?}", rows[i], want[i]);
    }
    assert_eq!(rows.len(), want.len(), "{what}: row count");
}

/// The payments file's data rows as `consume` writes them (`amount` a float: `327.0` for
/// `327`), each prefixed with `id,` for ids from `base`.
fn with_ids(file: &Path, base: usize) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("read input");
    text.lines()
        .skip(1)
        .enumerate()
        .map(|(i, l)| {
            let (rest, amount) = l.rsplit_once(',').expect("ts,card,merchant,amount");
            let amount: f64 = amount.parse().expect("amount");
            format!("{},{rest},{amount:?}", base + i)
        })
        .collect()
}

#[test]
fn a_bad_row_is_found_before_anything_is_sent() {
    let b = &broker().bootstrap;
    let t = tempfile::tempdir().expect("tempdir");
    let input = t.path().join("pay.csv");
    payments(&input, 6_000, 50, 61);
    let good = std::fs::read_to_string(&input).expect("read");
    // Data row 5000 (0-based 4999) is line 5001: its amount is not a number.
    let bad: Vec<String> = good
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 5_000 {
                format!("{},12.3.4", l.rsplit_once(',').unwrap().0)
            } else {
                l.into()
            }
        })
        .collect();
    std::fs::write(&input, bad.join("\n") + "\n").expect("write");
    let err = stderr(&produce(b, "prod-bad", &input, &["--key", "card", "--partitions", "2"]));
    assert!(err.contains("line 5001"), "{err}");
    assert!(err.contains("column \"amount\": expected float, found \"12.3.4\""), "{err}");
    assert!(err.contains("nothing was sent to prod-bad"), "{err}");
    // Nothing reached Kafka: the topic was not even created.
    let err = stderr(&consume(b, "prod-bad", &["--count", "1", "--timeout", "5s", "-q"]));
    assert!(err.contains("topic prod-bad does not exist"), "{err}");

    // The fixed file goes in whole, once.
    std::fs::write(&input, good).expect("write");
    let err = ok(&produce(b, "prod-bad", &input, &["--key", "card", "--partitions", "2"]));
    assert!(err.contains("6000 messages to prod-bad (2 partitions)"), "{err}");
    let (rows, dups) = committed_rows(b, "prod-bad", 6_000, t.path(), "5s");
    assert_eq!(dups, 0);
    assert_rows(&rows, &with_ids(&input, 0), "the fixed file");
}

#[test]
fn a_killed_produce_resumes_to_exactly_the_file_once() {
    let b = &broker().bootstrap;
    let t = tempfile::tempdir().expect("tempdir");
    let input = t.path().join("pay.csv");
    let other = t.path().join("other.csv");
    const N: usize = 20_000;
    payments(&input, N, 50, 62);
    payments(&other, N, 50, 63);
    // The same file but for the amount of row 0 (committed before the kill, unlike the
    // last row committed, which this does not change).
    let edited = t.path().join("edited.csv");
    let text = std::fs::read_to_string(&input).expect("read");
    let (header, rest) = text.split_once('\n').expect("header");
    let (row0, rest) = rest.split_once('\n').expect("row 0");
    let row0 = format!("{},0.25", row0.rsplit_once(',').expect("amount").0);
    std::fs::write(&edited, format!("{header}\n{row0}\n{rest}")).expect("write");
    let topic = "prod-killed";
    // 10 s at this rate; it is killed once some chunks are committed.
    let mut child = Command::new(BIN)
        .args(["kafka", "produce", "--brokers", b, "--topic", topic, "--input"])
        .arg(&input)
        .args(["--key", "card", "--partitions", "3", "--rate", "2000", "-q"])
        .stderr(Stdio::null())
        .spawn()
        .expect("start a producer");
    let since = Instant::now();
    while !consume(b, topic, &["--count", "1", "--timeout", "5s", "-q"]).status.success() {
        assert!(since.elapsed() < Duration::from_secs(60), "nothing was ever committed");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1_000));
    child.kill().expect("SIGKILL the producer");
    child.wait().expect("reap the producer");

    // A plain re-run would double the events.
    let err = stderr(&produce(b, topic, &input, &[]));
    assert!(err.contains(&format!("topic {topic} already holds ")), "{err}");
    assert!(err.contains("committed messages") && err.contains("--resume"), "{err}");
    assert!(err.contains("--append"), "{err}");
    // Another file of the same shape is not a continuation.
    let err = stderr(&produce(b, topic, &other, &["--key", "card", "--resume"]));
    assert!(err.contains("other.csv is not the same file"), "{err}");
    // Its newest committed row matches, its earlier rows do not.
    let err = stderr(&produce(b, topic, &edited, &["--key", "card", "--resume"]));
    assert!(err.contains("edited.csv is not the same file"), "{err}");
    assert!(err.contains("as a whole differ"), "{err}");

    let err = ok(&produce(b, topic, &input, &["--key", "card", "--resume"]));
    let done: usize = err
        .split("the first ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of committed rows in: {err}"));
    assert!(done > 0 && done < N, "the kill left {done} of {N} rows committed: {err}");
    assert!(err.contains(&format!("{} messages to {topic}", N - done)), "{err}");

    let (rows, dups) = committed_rows(b, topic, N, t.path(), "5s");
    assert_eq!(dups, 0);
    assert_rows(&rows, &with_ids(&input, 0), "the topic is not exactly the file once");

    // Resuming a complete topic sends nothing.
    let err = ok(&produce(b, topic, &input, &["--key", "card", "--resume"]));
    assert!(err.contains(&format!("0 messages to {topic}")), "{err}");
    assert!(err.contains(&format!("all {N} rows were already committed")), "{err}");
}

#[test]
fn append_adds_the_rows_again_as_new_events() {
    let b = &broker().bootstrap;
    let t = tempfile::tempdir().expect("tempdir");
    let input = t.path().join("pay.csv");
    payments(&input, 300, 20, 64);
    let topic = "prod-append";
    ok(&produce(b, topic, &input, &["--partitions", "2"]));
    let err = stderr(&produce(b, topic, &input, &[]));
    assert!(err.contains(&format!("topic {topic} already holds 300 committed messages")), "{err}");
    let err = stderr(&produce(b, topic, &input, &["--append", "--key", "card"]));
    assert!(err.contains("need the same columns, types, time column and --key"), "{err}");

    let err = ok(&produce(b, topic, &input, &["--append"]));
    assert!(
        err.contains("300 messages to prod-append") && err.contains("event ids from 300"),
        "{err}"
    );
    let (rows, dups) = committed_rows(b, topic, 600, t.path(), "5s");
    assert_eq!(dups, 0, "appended rows must get new event ids");
    let mut want = with_ids(&input, 0);
    want.extend(with_ids(&input, 300));
    assert_rows(&rows, &want, "the topic is not the file twice");
}

#[test]
fn an_unreachable_broker_fails_within_seconds() {
    // Nothing listens on port 1 (and only root could): the connection is refused.
    let dead = "127.0.0.1:1";
    let t = tempfile::tempdir().expect("tempdir");
    let input = t.path().join("pay.csv");
    payments(&input, 10, 5, 65);
    let ckpt = t.path().join("ckpt");
    let url = |topic: &str| format!("kafka://{dead}/{topic}");
    let runs: [(&str, Vec<String>); 3] = [
        (
            "produce",
            ["kafka", "produce", "--brokers", dead, "--topic", "prod-dead", "--input"]
                .map(String::from)
                .into_iter()
                .chain([input.to_str().expect("utf-8").to_string()])
                .collect(),
        ),
        (
            "consume",
            ["kafka", "consume", "--brokers", dead, "--topic", "prod-dead"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "worker",
            vec![
                "run".into(),
                "--query".into(),
                "SELECT card, COUNT(*) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN \
                 INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS n FROM pay"
                    .into(),
                "--input".into(),
                url("prod-dead"),
                "--output".into(),
                url("prod-dead-out"),
                "--table".into(),
                "pay".into(),
                "--group".into(),
                "prod-dead".into(),
                "--checkpoint-dir".into(),
                ckpt.to_str().expect("utf-8").into(),
            ],
        ),
    ];
    for (what, args) in runs {
        let start = Instant::now();
        let o = Command::new(BIN).args(&args).output().expect("run spillway");
        let took = start.elapsed();
        let err = stderr(&o);
        assert!(!o.status.success(), "{what} succeeded against {dead}");
        assert!(
            err.contains("no Kafka broker answers at 127.0.0.1:1 (connection refused)"),
            "{what}: {err}"
        );
        // A refused connection is reported at once; 5 s is ten times what it needs.
        assert!(took < Duration::from_secs(5), "{what} took {took:?} to fail");
    }
}
