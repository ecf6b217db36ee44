//! Every `spillway run` flag given to a Kafka worker is honoured or refused.
//!
//! One topic (`flags-pay`, produced without `--time-unit`: its schema says ms) holding
//! payments of which every tenth arrives 2 s late. Refusals are checked first: each
//! names the flag and what the worker does instead, and leaves no checkpoint directory
//! (those of file-job flags without asking the broker; the time flags against the
//! topic's schema, before any topic is created). Then the used flags run as concurrent
//! workers, each with its own group, result topic and directory, and the consumed
//! results equal `spillway run`'s on the file with the same flags.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{broker, consume, ok, payments, run_file, spillway, stderr, BIN};

/// FROM pay: the file is pay.csv, the workers get `--table pay`.
const QUERY: &str = "SELECT card, ts, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, \
                     MAX(amount) OVER w AS m FROM pay WINDOW w AS (PARTITION BY card ORDER BY ts \
                     RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";
const TOPIC: &str = "flags-pay";
const EVENTS: usize = 2_000;

/// Payments in time order except every tenth, which is 2 s older than the one before
/// it: within a lateness of 5 s, beyond one of 0.
fn late_payments(path: &Path) {
    payments(path, EVENTS, 60, 25);
    let text = std::fs::read_to_string(path).expect("read payments");
    let mut lines = text.lines();
    let mut s = format!("{}\n", lines.next().expect("header"));
    for (i, line) in lines.enumerate() {
        let (ts, rest) = line.split_once(',').expect("ts,...");
        let ts: i64 = ts.parse().expect("ts");
        let ts = if i % 10 == 9 { ts - 2_000 } else { ts };
        s.push_str(&format!("{ts},{rest}\n"));
    }
    std::fs::write(path, s).expect("write payments");
}

/// `spillway run` as a worker of `flags-<name>`, writing `flags-<name>-out`, with `extra`.
/// An `--output` in `extra` replaces the result topic.
fn worker_args(b: &str, dir: &Path, name: &str, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["run", "--query", QUERY, "--input", &format!("kafka://{b}/{TOPIC}")]
        .map(String::from)
        .to_vec();
    if !extra.contains(&"--output") {
        a.extend(["--output".to_string(), format!("kafka://{b}/flags-{name}-out")]);
    }
    a.extend(
        [
            "--group",
            &format!("flags-{name}"),
            "--checkpoint-dir",
            dir.join(format!("ckpt-{name}")).to_str().expect("utf-8"),
            "--table",
            "pay",
        ]
        .map(String::from),
    );
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Segment files of every task's reservoir under a worker's checkpoint directory.
fn reservoir_segments(ckpt: &Path) -> usize {
    let mut n = 0;
    for task in std::fs::read_dir(ckpt).expect("checkpoint dir") {
        let res = task.expect("entry").path().join("reservoir");
        if let Ok(files) = std::fs::read_dir(res) {
            n += files
                .filter(|f| {
                    f.as_ref()
                        .is_ok_and(|f| f.file_name().to_string_lossy().starts_with("segment-"))
                })
                .count();
        }
    }
    n
}

#[test]
fn every_run_flag_is_used_or_refused() {
    let b = &broker().bootstrap;
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let input = t.join("pay.csv");
    late_payments(&input);
    let input_s = input.to_str().expect("utf-8");
    ok(&spillway(&[
        "kafka",
        "produce",
        "--brokers",
        b,
        "--topic",
        TOPIC,
        "--input",
        input_s,
        "--key",
        "card",
        "--partitions",
        "2",
        "-q",
    ]));

    // -- Refused: (extra flags, what the message says). Each case gets its own directory,
    // which must not exist afterwards.
    let refused: &[(&[&str], &str)] = &[
        (&["--schema", "card:string"], "--schema: a Kafka worker takes the schema from the topic's schema topic (flags-pay.schema)"),
        (&["--watermark-delay", "2s"], "--watermark-delay is for windowed aggregations"),
        (&["--side-output", "late.csv"], "--side-output: a Kafka worker sends late events to the topic flags-r-out.late"),
        (&["--dead-letter", "dl.jsonl"], "--dead-letter: a Kafka worker sends malformed messages to the topic flags-r-out.dead-letter"),
        (&["--on-error", "stop"], "--on-error stop: a Kafka worker does not stop on a malformed message"),
        (&["--resume"], "--resume is implied for Kafka workers"),
        (&["--resume", "--backfill"], "--backfill works on a file input's checkpoints"),
        (&["--retain", "1h"], "--retain keeps a file job's reservoir for a later --backfill"),
        (&["--halt-after", "10", "--halt-marker", "m"], "--halt-after and --halt-marker are test hooks of file jobs"),
        (&["--checkpoint-interval", "1000"], "--checkpoint-interval 1000: a Kafka worker checkpoints by time"),
        // --checkpoint-every: the spelling before --checkpoint-interval, kept for one release.
        (&["--checkpoint-every", "1000"], "--checkpoint-every 1000: a Kafka worker checkpoints by time"),
        (&["--checkpoint-events", "1000"], "--checkpoint-events counts a file job's input events"),
        (&["--commit-every", "100"], "--commit-every 100: give a duration with its unit, e.g. 100s or 100ms"),
        (&["--commit-every", "2s"], "--commit-every (2s) must not be longer than --checkpoint-interval (1s)"),
        (&["--route-partitions", "0"], "--route-partitions: a topic needs at least 1 partition"),
        (&["--l1", "1MiB"], "--l1, --l2 and --l3 configure the tiered store: add --store tiered"),
        (&["--store", "tiered", "--l3", "none"], "the tiered store without its durable level (--l3 none) cannot"),
        (&["--output", "out.csv"], "--output out.csv: a Kafka worker writes to a topic"),
        (&["--metrics-addr", "nonsense"], "--metrics-addr nonsense: not a HOST:PORT address"),
        // Against the topic's schema (one broker round trip, nothing created).
        (&["--time-unit", "s"], "--time-unit s conflicts with topic flags-pay's schema (ms, set by kafka produce)"),
        (&["--time-column", "t"], "--time-column t conflicts with topic flags-pay's schema (time column ts, set by kafka produce)"),
    ];
    for (i, (extra, want)) in refused.iter().enumerate() {
        let dir = t.join(format!("refused{i}"));
        std::fs::create_dir(&dir).expect("mkdir");
        let o = Command::new(BIN)
            .args(worker_args(b, &dir, "r", extra))
            .output()
            .expect("run spillway");
        let e = stderr(&o);
        assert!(!o.status.success() && e.contains(want), "{extra:?}: expected `{want}`, got {e}");
        assert!(!dir.join("ckpt-r").exists(), "{extra:?} created the checkpoint directory");
    }
    // The refusals created no result topic either.
    let e = stderr(&consume(b, "flags-r-out", &["--timeout", "2s", "-q"]));
    assert!(e.contains("topic flags-r-out does not exist"), "{e}");

    // -- Used: (name, worker flags, the same flags for `spillway run` on the file). The
    // file run with the lateness gives every event its row; without it the late tenth
    // go to the side output, so the lateness visibly took effect.
    let used: &[(&str, &[&str], &[&str])] = &[
        ("late", &["--allowed-lateness", "5s"], &["--allowed-lateness", "5s"]),
        // A bare number is in the topic's unit (ms).
        ("late-ms", &["--allowed-lateness", "5000"], &["--allowed-lateness", "5s"]),
        // The time flags equal to the topic's schema are accepted.
        (
            "time",
            &["--time-unit", "ms", "--time-column", "ts", "--allowed-lateness", "5s"],
            &["--time-unit", "ms", "--time-column", "ts", "--allowed-lateness", "5s"],
        ),
        // Every task's store and reservoir: chunks of 8 events, each in its own segment.
        (
            "store",
            &[
                "--allowed-lateness",
                "5s",
                "--store",
                "mem",
                "--memory-budget",
                "64MiB",
                "--expected-keys",
                "100",
                "--compression",
                "zstd",
                "--reservoir-chunk-events",
                "8",
                "--reservoir-segment-bytes",
                "1",
                "--on-error",
                "skip",
                "--worker-id",
                "flags-w1",
                "--commit-every",
                "50ms",
                "--checkpoint-interval",
                "500ms",
            ],
            &["--allowed-lateness", "5s", "--store", "mem", "--compression", "zstd"],
        ),
    ];
    let workers: Vec<_> = used
        .iter()
        .map(|(name, extra, _)| {
            let mut a = worker_args(b, t, name, extra);
            a.extend(["--idle-exit", "3s", "-q"].map(String::from));
            Command::new(BIN)
                .args(a)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let strict = t.join("strict.csv");
    let e = run_file(QUERY, &input, &strict, &[]);
    let strict_rows = std::fs::read_to_string(&strict).expect("strict output").lines().count() - 1;
    assert!(strict_rows < EVENTS, "no event was late without a lateness: {e}");
    for (w, (name, _, file_flags)) in workers.into_iter().zip(used) {
        let o = w.wait_with_output().expect("wait for a worker");
        ok(&o);
        let want = t.join(format!("{name}.csv"));
        run_file(QUERY, &input, &want, file_flags);
        let got = t.join(format!("{name}.got.csv"));
        let topic = format!("flags-{name}-out");
        let count = EVENTS.to_string();
        ok(&consume(
            b,
            &topic,
            &[
                "--count",
                &count,
                "--sort",
                "--timeout",
                "30s",
                "-q",
                "--output",
                got.to_str().expect("utf-8"),
            ],
        ));
        let (got, want) = (
            std::fs::read_to_string(got).expect("got"),
            std::fs::read_to_string(want).expect("want"),
        );
        assert_eq!(want.lines().count() - 1, EVENTS, "{name}: the file run with the lateness");
        assert!(
            got == want,
            "{name}: the worker's results differ from spillway run {file_flags:?}"
        );
    }
    // The reservoir flags reached every task: many one-chunk segments, against one or
    // two per task by default.
    let (small, default) =
        (reservoir_segments(&t.join("ckpt-store")), reservoir_segments(&t.join("ckpt-late")));
    assert!(
        small > 20 && default <= 4,
        "segments: {small} with 8-event chunks, {default} by default"
    );
}
