//! End-to-end tests of `spillway run`, `explain` and `demo` through the binary:
//! exact results on a hand-checked stream, errors naming line and column, dead letters,
//! side output, resume after real SIGKILLs (at chosen event counts, through the hidden
//! `--halt-after`) ending byte-identical to an uninterrupted run, what a failed run leaves
//! as output, reservoir segment release and checkpoint pauses in the summary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn spillway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
}

fn run_ok(args: &[&str]) -> (String, String) {
    let out = spillway().args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "spillway {args:?} failed:\n{stderr}");
    (stdout, stderr)
}

fn run_err(args: &[&str]) -> String {
    let out = spillway().args(args).output().unwrap();
    assert!(!out.status.success(), "spillway {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const Q: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
                 MAX(amount) OVER w AS mx \
                 FROM payments \
                 WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";

#[test]
fn run_computes_exact_sliding_windows() {
    let d = tempfile::tempdir().unwrap();
    let input = write(
        d.path(),
        "payments.csv",
        "card,amount,ts\n\
         a,10,1000\n\
         b,1,2000\n\
         a,5,11000\n\
         a,7,11001\n\
         b,2,12001\n\
         a,1,22000\n",
    );
    let output = d.path().join("out.csv");
    let (_, _) = run_ok(&[
        "run",
        "--query",
        Q,
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--quiet",
    ]);
    // [t-10s, t]: at 11000 the event at 1000 is still inside (exactly 10 s); at 11001 it
    // is not; at 22000 only itself (11001 is 10.999 s before... 22000-10000 = 12000).
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "card,ts,s,n,mx\n\
         a,1000,10,1,10\n\
         b,2000,1,1,1\n\
         a,11000,15,2,10\n\
         a,11001,12,2,7\n\
         b,12001,2,1,2\n\
         a,22000,1,1,1\n"
    );
}

#[test]
fn malformed_rows_stop_with_line_and_column_or_go_to_dead_letters() {
    let d = tempfile::tempdir().unwrap();
    let input =
        write(d.path(), "payments.csv", "card,amount,ts\na,10,1000\na,oops,2000\na,3,3000\n");
    let q = "SELECT card, SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 5000 PRECEDING AND CURRENT ROW) AS s FROM payments";
    let err = run_err(&[
        "run",
        "--query",
        q,
        "--input",
        input.to_str().unwrap(),
        "--schema",
        "amount:int",
        "--quiet",
    ]);
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("amount"), "{err}");
    let output = d.path().join("out.csv");
    let dead = d.path().join("dead.txt");
    run_ok(&[
        "run",
        "--query",
        q,
        "--input",
        input.to_str().unwrap(),
        "--schema",
        "amount:int",
        "--on-error",
        "skip",
        "--dead-letter",
        dead.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--quiet",
    ]);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "card,s\na,10\na,13\n");
    assert!(std::fs::read_to_string(&dead).unwrap().contains("oops"));

    let err = run_err(&[
        "run",
        "--query",
        "SELECT card, SUM(amount) FROM payments",
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(err.contains("OVER"), "{err}");
}

#[test]
fn late_events_go_to_the_side_output() {
    let d = tempfile::tempdir().unwrap();
    let input = write(
        d.path(),
        "payments.csv",
        "card,amount,ts\na,1,10000\na,2,9000\na,4,5000\na,8,10500\n",
    );
    let output = d.path().join("out.csv");
    let (_, err) = run_ok(&[
        "run",
        "--query",
        Q,
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--allowed-lateness",
        "2s",
    ]);
    // 9000 is 1 s late: exact, inserted in time order. 5000 is 5 s late: side output.
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "card,ts,s,n,mx\na,10000,1,1,1\na,9000,2,1,2\na,10500,11,3,8\n"
    );
    let side = d.path().join("out.late.csv");
    assert_eq!(std::fs::read_to_string(side).unwrap(), "card,amount,ts\na,4,5000\n");
    assert!(err.contains("1 late beyond the allowed lateness"), "{err}");
}

#[test]
fn explain_prints_the_shared_dag() {
    let q = "SELECT card, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
             AVG(amount) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW) AS m \
             FROM p WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)";
    let (out, _) =
        run_ok(&["explain", "--query", q, "--schema", "card:int,merchant:int,amount:float,ts:int"]);
    // One window (same frame), one filter, two group-bys; SUM and COUNT share one.
    assert_eq!(out.matches("Window #").count(), 1, "{out}");
    assert_eq!(out.matches("GroupBy").count(), 2, "{out}");
    assert!(out.contains("GroupBy card"), "{out}");
    assert!(out.contains("GroupBy merchant"), "{out}");
}

#[test]
fn demo_runs_and_writes_json() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("demo.json");
    run_ok(&[
        "demo",
        "--events",
        "50k",
        "--cards",
        "10k",
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(v["events"], 50_000);
    for k in ["seconds", "events_per_sec", "peak_rss_bytes", "late_events"] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    for k in ["p50", "p99", "p999", "max"] {
        assert!(v["latency_us"].get(k).is_some(), "missing latency {k}: {v}");
    }
    for k in ["count", "p50", "p99", "max"] {
        assert!(v["checkpoint_pause_us"].get(k).is_some(), "missing checkpoint pause {k}: {v}");
    }
}

/// A deterministic input with out-of-order events (some beyond the lateness).
fn big_input(path: &Path, rows: usize) {
    let mut s = String::from("card,merchant,amount,ts\n");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut t: i64 = 1_000_000;
    for _ in 0..rows {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += (x % 5) as i64;
        let back = if x.is_multiple_of(97) {
            400
        } else if x.is_multiple_of(13) {
            (x % 40) as i64
        } else {
            0
        };
        s.push_str(&format!(
            "c{},{},{}.{:02},{}\n",
            x % 500,
            (x >> 20) % 50,
            (x >> 8) % 300,
            x % 100,
            t - back
        ));
    }
    std::fs::write(path, s).unwrap();
}

/// Reservoir options that roll a segment every few hundred events, so a test stream of
/// some 10^5 events spans hundreds of segments.
const SMALL_SEGMENTS: [&str; 4] =
    ["--reservoir-chunk-events", "256", "--reservoir-segment-bytes", "16KiB"];

/// Ids of the reservoir segment files in `dir`, ascending.
fn segment_ids(dir: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.strip_prefix("segment-")?.strip_suffix(".spr")?.parse().ok()
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// Asserts that the reservoir in `dir` rolled many segments and kept only the newest few:
/// those behind every window were deleted.
fn assert_old_segments_deleted(dir: &Path, when: &str) {
    let ids = segment_ids(dir);
    let newest = *ids.last().unwrap_or_else(|| panic!("{when}: no segment in {}", dir.display()));
    assert!(newest >= 20, "{when}: only {} segments were ever written", newest + 1);
    assert!(
        ids[0] > 0 && ids.len() <= 12,
        "{when}: old segments were not deleted: live segments {ids:?}"
    );
}

/// Runs `spillway` with a halt point: waits until it has processed `events` input events
/// (and made the checkpoint on that event, if any) and flushed its files, then SIGKILLs
/// it. A run that ends before the halt point fails the test.
fn run_until_halt(args: &[String], events: u64, marker: &Path) {
    let _ = std::fs::remove_file(marker);
    let mut child = spillway()
        .args(args)
        .args(["--halt-after", &events.to_string(), "--halt-marker", marker.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The time limit only stops a hung test; when the kill happens is decided by the
    // halt point, not by the clock.
    let started = Instant::now();
    while !marker.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            panic!("the run ended ({st}) before its halt point at {events} events: {err}");
        }
        assert!(started.elapsed() < Duration::from_secs(600), "no halt at {events} events");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn resume_after_sigkill_is_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    big_input(&input, 300_000);
    let q = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, MIN(amount) OVER w AS lo, \
             COUNT(DISTINCT merchant) OVER w AS merchants, \
             AVG(amount) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 3000 PRECEDING AND CURRENT ROW) AS m_avg \
             FROM t WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 2000 PRECEDING AND CURRENT ROW)";
    let base = |out: &Path| -> Vec<String> {
        vec![
            "run".into(),
            "--query".into(),
            q.into(),
            "--input".into(),
            input.to_str().unwrap().into(),
            "--output".into(),
            out.to_str().unwrap().into(),
            "--allowed-lateness".into(),
            "50".into(),
            "--quiet".into(),
        ]
    };
    let want_out = d.path().join("straight.csv");
    run_ok(&base(&want_out).iter().map(String::as_str).collect::<Vec<_>>());
    let want = std::fs::read(&want_out).unwrap();
    let want_late = std::fs::read(d.path().join("straight.late.csv")).unwrap();
    assert!(want_late.len() > 30, "the input should have events beyond the lateness");

    let got_out = d.path().join("killed.csv");
    let ckpt = d.path().join("ckpt");
    let mut args = base(&got_out);
    args.extend(["--checkpoint-dir".into(), ckpt.to_str().unwrap().into()]);
    args.extend(["--checkpoint-events", "3000"].map(String::from));
    args.extend(SMALL_SEGMENTS.map(String::from));
    let marker = d.path().join("halted");
    // SIGKILLs before the first checkpoint (the resume starts over), between
    // checkpoints (rows past the checkpoint are on disk and must be cut off), right
    // after a checkpoint, and near the end.
    let halts = [1_000, 10_500, 60_000, 150_001, 299_999];
    for (i, &at) in halts.iter().enumerate() {
        let mut a = args.clone();
        if i > 0 {
            a.push("--resume".into());
        }
        run_until_halt(&a, at, &marker);
        if at >= 60_000 {
            assert_old_segments_deleted(&ckpt.join("reservoir"), &format!("halt at {at}"));
        }
    }
    let mut a = args.clone();
    a.push("--resume".into());
    run_ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_old_segments_deleted(&ckpt.join("reservoir"), "the end");
    let got = std::fs::read(&got_out).unwrap();
    assert_eq!(got.len(), want.len(), "output length differs after {} kills", halts.len());
    assert!(got == want, "output differs after {} kills", halts.len());
    assert_eq!(std::fs::read(d.path().join("killed.late.csv")).unwrap(), want_late);
}

/// An in-order input (each event emits one row at once), with `bad` rows malformed.
fn rows_input(path: &Path, rows: usize, bad: &[usize]) {
    let mut s = String::from("card,amount,ts\n");
    for i in 0..rows {
        if bad.contains(&i) {
            if i % 2 == 0 {
                s.push_str(&format!("c{},oops,{}\n", i % 37, 1000 + 3 * i));
            } else {
                s.push_str(&format!("c{},{}\n", i % 37, 1000 + 3 * i));
            }
        } else {
            s.push_str(&format!("c{},{}.{:02},{}\n", i % 37, i % 300, i % 100, 1000 + 3 * i));
        }
    }
    std::fs::write(path, s).unwrap();
}

const ROWS_Q: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n FROM t \
                      WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 500 PRECEDING AND CURRENT ROW)";

fn rows_args(input: &Path, output: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--query",
        ROWS_Q,
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--schema",
        "amount:float",
        "--quiet",
    ]
    .map(String::from)
    .to_vec();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn strs(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

/// `--on-error skip` with `--resume`: the resumed run keeps the dead letters of the
/// checkpointed prefix and appends the rest, so output and dead-letter file equal an
/// uninterrupted run's.
#[test]
fn resume_with_skipped_rows_keeps_the_dead_letter_file() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    let bad: Vec<usize> = (0..40_000).filter(|i| i % 997 == 5 || i % 1499 == 8).collect();
    rows_input(&input, 40_000, &bad);
    let want_out = d.path().join("straight.csv");
    let want_dead = d.path().join("straight.dead");
    fn skip(dead: &Path) -> [&str; 4] {
        ["--on-error", "skip", "--dead-letter", dead.to_str().unwrap()]
    }
    run_ok(&strs(&rows_args(&input, &want_out, &skip(&want_dead))));
    let want_dead_text = std::fs::read_to_string(&want_dead).unwrap();
    assert_eq!(want_dead_text.lines().count(), bad.len());

    let got_out = d.path().join("killed.csv");
    let got_dead = d.path().join("killed.dead");
    let ckpt = d.path().join("ckpt");
    let mut args = rows_args(&input, &got_out, &skip(&got_dead));
    args.extend(
        ["--checkpoint-dir", ckpt.to_str().unwrap(), "--checkpoint-events", "2000"]
            .map(String::from),
    );
    let marker = d.path().join("halted");
    for (i, at) in [5_500, 12_345, 30_000].into_iter().enumerate() {
        let mut a = args.clone();
        if i > 0 {
            a.push("--resume".into());
        }
        run_until_halt(&a, at, &marker);
    }
    args.push("--resume".into());
    run_ok(&strs(&args));
    assert!(
        std::fs::read(&got_out).unwrap() == std::fs::read(&want_out).unwrap(),
        "output differs"
    );
    assert_eq!(std::fs::read_to_string(&got_dead).unwrap(), want_dead_text);
}

/// Without checkpoints a run that stops on a malformed row leaves no file under the
/// output's name (an older one is left alone); the rows before the error are in
/// `<stem>.partial.<ext>`, and the error says so.
#[test]
fn failed_run_without_checkpoints_leaves_only_a_partial_file() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    rows_input(&input, 20_000, &[15_000]);
    let out = d.path().join("out.csv");
    let err = run_err(&strs(&rows_args(&input, &out, &[])));
    let partial = d.path().join("out.partial.csv");
    assert!(err.contains("line 15002"), "{err}");
    assert!(!out.exists(), "a failed run left {}", out.display());
    assert!(
        err.contains(out.to_str().unwrap()) && err.contains(partial.to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("not written"), "{err}");
    let text = std::fs::read_to_string(&partial).unwrap();
    assert!(text.lines().count() > 1000, "the partial file holds the rows before the error");

    // An older output stays as it was.
    std::fs::write(&out, "old\n").unwrap();
    let err = run_err(&strs(&rows_args(&input, &out, &[])));
    assert!(err.contains("left unchanged"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old\n");

    // A successful run renames its file: no partial file is left.
    rows_input(&input, 20_000, &[]);
    let _ = std::fs::remove_file(&partial);
    run_ok(&strs(&rows_args(&input, &out, &[])));
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 20_001);
    assert!(!partial.exists());
}

/// With checkpoints a run that stops on a malformed row cuts its output back to the last
/// checkpoint and says so; after the input is fixed, `--resume` finishes it exactly.
#[test]
fn failed_run_with_checkpoints_keeps_the_checkpointed_prefix() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    // The prefix the checkpoint at event 6000 covers: a run over the first 6000 rows.
    rows_input(&input, 6_000, &[]);
    let prefix_out = d.path().join("prefix.csv");
    run_ok(&strs(&rows_args(&input, &prefix_out, &[])));
    let prefix = std::fs::read(&prefix_out).unwrap();
    rows_input(&input, 10_000, &[]);
    let full_out = d.path().join("full.csv");
    run_ok(&strs(&rows_args(&input, &full_out, &[])));
    let full = std::fs::read(&full_out).unwrap();

    rows_input(&input, 10_000, &[7_500]);
    let args = rows_args(
        &input,
        &out,
        &["--checkpoint-dir", ckpt.to_str().unwrap(), "--checkpoint-events", "3000"],
    );
    let err = run_err(&strs(&args));
    assert!(err.contains("line 7502"), "{err}");
    assert!(err.contains(out.to_str().unwrap()) && err.contains("cut back"), "{err}");
    assert!(err.contains("first 6000 input events") && err.contains("--resume"), "{err}");
    assert!(std::fs::read(&out).unwrap() == prefix, "the output is not the checkpointed prefix");

    rows_input(&input, 10_000, &[]);
    let mut a = args.clone();
    a.push("--resume".into());
    run_ok(&strs(&a));
    assert!(std::fs::read(&out).unwrap() == full, "the resumed output differs");
}

/// `--checkpoint-events 0` with `--checkpoint-dir` makes no checkpoints and releases the
/// reservoir's segments as the windows pass them (it used to keep every one).
#[test]
fn checkpoint_every_zero_releases_reservoir_segments() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    rows_input(&input, 200_000, &[]);
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let mut args = rows_args(
        &input,
        &out,
        &["--checkpoint-dir", ckpt.to_str().unwrap(), "--checkpoint-events", "0"],
    );
    args.retain(|a| a != "--quiet");
    args.extend(SMALL_SEGMENTS.map(String::from));
    let (_, err) = run_ok(&strs(&args));
    assert!(err.contains("0 checkpoints"), "{err}");
    let deleted: u64 = err
        .split(" segments deleted")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no segment count in {err}"));
    assert!(deleted >= 100, "{deleted} segments deleted: {err}");
    assert_old_segments_deleted(&ckpt.join("reservoir"), "the end");
}

/// The number after `key` in `text` (up to the next space or comma).
fn number_after(text: &str, key: &str) -> f64 {
    let rest =
        &text[text.find(key).unwrap_or_else(|| panic!("no {key:?} in {text}")) + key.len()..];
    let n: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    n.parse().unwrap_or_else(|_| panic!("no number after {key:?} in {text}"))
}

/// The summary reports the checkpoint pauses (count and percentiles), and the latency
/// includes them: every pause is followed by an event whose latency covers it.
#[test]
fn checkpoint_pauses_are_reported_and_counted_in_latency() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    rows_input(&input, 20_500, &[]);
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let mut args = rows_args(
        &input,
        &out,
        &["--checkpoint-dir", ckpt.to_str().unwrap(), "--checkpoint-events", "1000"],
    );
    args.retain(|a| a != "--quiet");
    let (_, err) = run_ok(&strs(&args));
    let line =
        err.lines().find(|l| l.contains("checkpoints, pauses")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.starts_with("20 checkpoints, pauses: p50 "), "{line}");
    let pause_max = number_after(line, "max ");
    assert!(number_after(line, "p50 ") <= number_after(line, "p99 "), "{line}");
    assert!(number_after(line, "p99 ") <= pause_max && pause_max > 0.0, "{line}");
    let lat = err.lines().find(|l| l.starts_with("latency")).unwrap_or_else(|| panic!("{err}"));
    let latency_max = number_after(lat, "max ");
    assert!(
        latency_max >= pause_max,
        "latency max {latency_max} us < checkpoint pause {pause_max} us"
    );
}

/// `--checkpoint-every`, the spelling before `--checkpoint-events` (kept for one
/// release), still counts a file job's input events; a worker's `--checkpoint-interval`
/// is refused for a file, a duration is not a count, and both spellings at once are
/// refused.
#[test]
fn checkpoint_every_still_counts_input_events() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    rows_input(&input, 5_500, &[]);
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let summary = |flag: &str| {
        let _ = std::fs::remove_dir_all(&ckpt);
        let mut args =
            rows_args(&input, &out, &["--checkpoint-dir", ckpt.to_str().unwrap(), flag, "1000"]);
        args.retain(|a| a != "--quiet");
        let (_, err) = run_ok(&strs(&args));
        let line =
            err.lines().find(|l| l.contains(" checkpoints")).unwrap_or_else(|| panic!("{err}"));
        line.split_once(',').map_or(line, |(n, _)| n).to_string()
    };
    assert_eq!(summary("--checkpoint-every"), "5 checkpoints");
    assert_eq!(summary("--checkpoint-events"), "5 checkpoints");
    let ck = ckpt.to_str().unwrap();
    let refused: &[(&[&str], &str)] = &[
        (&["--checkpoint-interval", "1s"], "--checkpoint-interval is for Kafka workers"),
        (&["--checkpoint-every", "1s"], "--checkpoint-every: expected a count"),
        (&["--checkpoint-every", "1000", "--checkpoint-events", "1000"], "cannot be used with"),
    ];
    for (extra, want) in refused {
        let mut a = vec!["--checkpoint-dir", ck];
        a.extend_from_slice(extra);
        let e = run_err(&strs(&rows_args(&input, &out, &a)));
        assert!(e.contains(want), "{extra:?}: {e}");
    }
}

/// `--store tiered` with an L1 of a few entries over a private Redis (`--l2 auto`)
/// over hashlog, and with L1 over hashlog alone, computes output byte-identical to
/// `--store mem`: state migrates between levels on nearly every event. The tiered
/// flags are refused for other stores and checked for bad values.
#[test]
fn tiered_store_output_is_identical_to_mem() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("payments.csv");
    big_input(&input, 30_000);
    let q = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
             MAX(amount) OVER w AS mx, COUNT(DISTINCT merchant) OVER w AS m, \
             AVG(amount) OVER v AS a \
             FROM payments \
             WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW), \
             v AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";
    let run = |name: &str, extra: &[&str]| -> (String, String) {
        let out = d.path().join(name);
        let mut args = vec![
            "run",
            "--query",
            q,
            "--input",
            input.to_str().unwrap(),
            "--allowed-lateness",
            "1m",
            "--output",
            out.to_str().unwrap(),
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let (_, stderr) = run_ok(&args);
        (std::fs::read_to_string(out).unwrap(), stderr)
    };
    let (mem, _) = run("mem.csv", &["--store", "mem"]);
    assert!(mem.lines().count() > 29_000);
    for (name, levels) in [
        ("l123.csv", ["--l1", "4KiB", "--l2", "auto", "--l3", "hashlog"]),
        ("l13.csv", ["--l1", "4KiB", "--l2", "none", "--l3", "hashlog"]),
        ("l12.csv", ["--l1", "4KiB", "--l2", "auto", "--l3", "none"]),
    ] {
        let mut extra = vec!["--store", "tiered"];
        extra.extend_from_slice(&levels);
        let (out, stderr) = run(name, &extra);
        assert!(out == mem, "{levels:?}: output differs from --store mem");
        if levels[5] == "none" {
            assert!(stderr.contains("no durable level"), "{stderr}");
        }
    }
    let e = run_err(&["run", "--query", q, "--input", input.to_str().unwrap(), "--l1", "1MiB"]);
    assert!(e.contains("add --store tiered"), "{e}");
    let e = run_err(&[
        "run",
        "--query",
        q,
        "--input",
        input.to_str().unwrap(),
        "--store",
        "tiered",
        "--l2",
        "redis:/x",
    ]);
    assert!(e.contains("redis://HOST:PORT"), "{e}");
    let e = run_err(&[
        "run",
        "--query",
        q,
        "--input",
        input.to_str().unwrap(),
        "--store",
        "tiered",
        "--l1",
        "150%",
    ]);
    assert!(e.contains("percentage"), "{e}");
}

const SUM_Q: &str = "SELECT card, SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 5000 PRECEDING AND CURRENT ROW) AS s FROM payments";

/// One `N/A` in the first rows made `amount` a string and the run failed
/// blaming the query (SUM of a string); now the column stays numeric and the row is
/// named (stop) or goes to the dead letters (skip).
#[test]
fn a_bad_value_in_a_numeric_column_names_the_row_not_the_query() {
    let d = tempfile::tempdir().unwrap();
    let input =
        write(d.path(), "payments.csv", "card,amount,ts\na,10,1000\na,N/A,2000\na,2.5,3000\n");
    let i = input.to_str().unwrap();
    let err = run_err(&["run", "--query", SUM_Q, "--input", i, "--quiet"]);
    assert!(
        err.contains(&format!("{i} line 3, column \"amount\": expected float, found \"N/A\"")),
        "{err}"
    );
    assert!(!err.contains("SUM") && !err.contains("sum"), "{err}");
    let output = d.path().join("out.csv");
    let dead = d.path().join("dead.jsonl");
    let (_, stderr) = run_ok(&[
        "run",
        "--query",
        SUM_Q,
        "--input",
        i,
        "--on-error",
        "skip",
        "--dead-letter",
        dead.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]);
    assert!(stderr.contains("1 malformed rows skipped"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "card,s\na,10.0\na,12.5\n");
    let letters = std::fs::read_to_string(&dead).unwrap();
    assert!(
        letters.contains("\"line\":3") && letters.contains("\"raw\":\"a,N/A,2000\""),
        "{letters}"
    );
}

/// A header-only file failed like a string column (SUM of a string); it now
/// runs and writes the header only. An empty file needs --schema for its columns.
#[test]
fn empty_inputs_give_an_empty_output() {
    let d = tempfile::tempdir().unwrap();
    let output = d.path().join("out.csv");
    let o = output.to_str().unwrap();
    let input = write(d.path(), "payments.csv", "card,amount,ts\n");
    let i = input.to_str().unwrap();
    run_ok(&["run", "--query", SUM_Q, "--input", i, "--output", o, "--quiet"]);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "card,s\n");
    let where_q = format!("{SUM_Q} WHERE card = 'x' AND amount > 1");
    run_ok(&["run", "--query", &where_q, "--input", i, "--output", o, "--quiet"]);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "card,s\n");

    let input = write(d.path(), "payments.csv", "");
    let err = run_err(&["run", "--query", SUM_Q, "--input", i, "--output", o, "--quiet"]);
    assert!(err.contains("the input is empty") && err.contains("--schema"), "{err}");
    let schema = "card:string,amount:float,ts:int";
    let i = input.to_str().unwrap();
    run_ok(&["run", "--query", SUM_Q, "--input", i, "--schema", schema, "--output", o, "-q"]);
    assert_eq!(std::fs::read_to_string(&output).unwrap(), "card,s\n");
}

/// `FROM anything` ran over the input; FROM must name the input's table
/// (the file name without its extension, or --table).
#[test]
fn from_must_name_the_input() {
    let d = tempfile::tempdir().unwrap();
    let input = write(d.path(), "payments.csv", "card,amount,ts\na,10,1000\n");
    let i = input.to_str().unwrap();
    let q = SUM_Q.replace("FROM payments", "FROM anything");
    let err = run_err(&["run", "--query", &q, "--input", i, "--quiet"]);
    assert!(
        err.contains("FROM `anything`: no such table; the input is the table `payments`")
            && err.contains("--table NAME"),
        "{err}"
    );
    let (out, _) = run_ok(&["run", "--query", &q, "--input", i, "--table", "anything", "-q"]);
    assert_eq!(out, "card,s\na,10\n");
    let err = run_err(&["run", "--query", SUM_Q, "--input", i, "--table", "anything", "-q"]);
    assert!(
        err.contains("FROM `payments`: no such table; the input is the table `anything` (--table)"),
        "{err}"
    );
    let err = run_err(&["explain", "--query", &q, "--input", i]);
    assert!(err.contains("FROM `anything`"), "{err}");
}

/// A windowed aggregation (HOP and SESSION, lateness and a watermark delay) SIGKILLed
/// and resumed ends byte-identical to an uninterrupted run, side output included.
#[test]
fn windowed_aggregation_resumes_byte_identical_after_sigkill() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    big_input(&input, 120_000);
    let queries = [
        "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s, \
         COUNT(DISTINCT merchant) AS m FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), 500, 2000)) \
         GROUP BY card, window_start, window_end",
        "SELECT card, window_start, window_end, COUNT(*) AS n, MAX(amount) AS hi \
         FROM TABLE(SESSION(TABLE t PARTITION BY card, DESCRIPTOR(ts), 300)) \
         GROUP BY card, window_start, window_end",
    ];
    for (qi, q) in queries.iter().enumerate() {
        let base = |out: &Path| -> Vec<String> {
            [
                "run",
                "--query",
                q,
                "--input",
                input.to_str().unwrap(),
                "--output",
                out.to_str().unwrap(),
                "--allowed-lateness",
                "30",
                "--watermark-delay",
                "5",
                "--quiet",
            ]
            .map(String::from)
            .to_vec()
        };
        let want_out = d.path().join(format!("straight{qi}.csv"));
        run_ok(&strs(&base(&want_out)));
        let want = std::fs::read(&want_out).unwrap();
        // HOP's 2 s windows take every event back into some window, and the side output
        // names each cleaned-up window one missed; sessions drop the 400 ms late ones.
        let late = |name: String| std::fs::read(d.path().join(name)).unwrap_or_default();
        let want_late = late(format!("straight{qi}.late.csv"));
        assert!(want_late.len() > 30, "events beyond the lateness");
        let header = String::from_utf8_lossy(&want_late).lines().next().unwrap_or("").to_string();
        assert!(header.ends_with(",window_start,window_end"), "{header}");
        assert!(want.len() > 10_000);

        let got_out = d.path().join(format!("killed{qi}.csv"));
        let ckpt = d.path().join(format!("ckpt{qi}"));
        let mut args = base(&got_out);
        args.extend(["--checkpoint-dir".into(), ckpt.to_str().unwrap().into()]);
        args.extend(["--checkpoint-events", "2500"].map(String::from));
        let marker = d.path().join("halted");
        for (i, &at) in [700, 9_100, 40_000, 119_999].iter().enumerate() {
            let mut a = args.clone();
            if i > 0 {
                a.push("--resume".into());
            }
            run_until_halt(&a, at, &marker);
        }
        let mut a = args.clone();
        a.push("--resume".into());
        run_ok(&strs(&a));
        let got = std::fs::read(&got_out).unwrap();
        assert!(got == want, "query {qi}: output differs after kills");
        assert_eq!(late(format!("killed{qi}.late.csv")), want_late);
    }
}

#[test]
fn windowed_aggregation_explain_and_errors() {
    let d = tempfile::tempdir().unwrap();
    let input = write(d.path(), "pay.csv", "ts,card,amount\n0,a,1\n1,b,2\n7,a,3\n");
    let i = input.to_str().unwrap();
    let q = "SELECT card, window_start, window_end, COUNT(*) AS n, \
             SUM(amount) FILTER (WHERE amount > 1) AS big FROM TABLE(CUMULATE(TABLE pay, \
             DESCRIPTOR(ts), INTERVAL '2' MILLISECOND, 6)) GROUP BY card, window_start, window_end";
    let (out, _) = run_ok(&["explain", "--input", i, "--query", q]);
    assert!(out.contains("CUMULATE size 6ms step 2ms"), "{out}");
    assert!(out.contains("Filter (amount > 1)") || out.contains("Filter amount > 1"), "{out}");
    let (out, _) = run_ok(&["run", "--input", i, "--query", q]);
    assert_eq!(
        out,
        "card,window_start,window_end,n,big\na,0,2,1,\nb,0,2,1,2\na,0,4,1,\nb,0,4,1,2\n\
         a,0,6,1,\nb,0,6,1,2\na,6,8,1,3\na,6,10,1,3\na,6,12,1,3\n"
    );
    // Mistakes a user makes, each named.
    for (q, want) in [
        (
            "SELECT card, COUNT(*) FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), 5)) GROUP BY card",
            "must GROUP BY window_start and window_end",
        ),
        (
            "SELECT amount, window_start, window_end FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), 5)) GROUP BY card, window_start, window_end",
            "column `amount` is neither in GROUP BY",
        ),
        (
            "SELECT window_start, window_end, COUNT(*) FROM TABLE(HOP(TABLE pay, DESCRIPTOR(ts), 3, 5)) GROUP BY window_start, window_end",
            "whole multiple of the slide",
        ),
        (
            "SELECT window_start, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(card), 5)) GROUP BY window_start, window_end",
            "DESCRIPTOR must name the time column `ts`",
        ),
        (
            "SELECT window_start, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE other, DESCRIPTOR(ts), 5)) GROUP BY window_start, window_end",
            "FROM `other`: no such table",
        ),
        (
            "SELECT card, window_start, window_end, COUNT(*) FROM TABLE(SESSION(TABLE pay, DESCRIPTOR(ts), 5)) GROUP BY card, window_start, window_end",
            "SESSION partitioned by (none) with GROUP BY columns card",
        ),
        (
            "SELECT window_start, window_end, COUNT(*) OVER (ORDER BY ts RANGE 5 PRECEDING) FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), 5)) GROUP BY window_start, window_end",
            "in a windowed aggregation",
        ),
        (
            "SELECT window_start, window_end, COUNT(*) FROM TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), 0)) GROUP BY window_start, window_end",
            "the size of TUMBLE must be positive",
        ),
    ] {
        let err = run_err(&["run", "--input", i, "--query", q]);
        assert!(err.contains(want), "query {q}: expected `{want}` in: {err}");
    }
    let err = run_err(&[
        "run",
        "--input",
        i,
        "--query",
        "SELECT card, SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE 5 PRECEDING) FROM pay",
        "--watermark-delay",
        "5",
    ]);
    assert!(err.contains("--watermark-delay applies to windowed aggregations"), "{err}");
}

/// A window offset moves where windows start (Flink's fourth TVF argument): the same
/// windows from a positive offset and from the negative ones a size apart, written with
/// the sign inside or outside the interval.
#[test]
fn window_offsets_move_the_windows() {
    let d = tempfile::tempdir().unwrap();
    let input = write(d.path(), "pay.csv", "ts,card,amount\n0,a,1\n1,b,2\n7,a,3\n12,a,4\n");
    let i = input.to_str().unwrap();
    let q = |w: &str| {
        format!(
            "SELECT card, window_start, window_end, COUNT(*) AS n FROM TABLE({w}) \
             GROUP BY card, window_start, window_end"
        )
    };
    let tumble = q("TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, INTERVAL '2' MILLISECOND)");
    let (out, _) = run_ok(&["explain", "--input", i, "--query", &tumble]);
    assert!(out.contains("TUMBLE size 5ms offset 2ms"), "{out}");
    let want = "card,window_start,window_end,n\na,-3,2,1\nb,-3,2,1\na,7,12,1\na,12,17,1\n";
    for w in [
        "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, INTERVAL '2' MILLISECOND)",
        "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, INTERVAL '-3' MILLISECOND)",
        "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, -INTERVAL '3' MILLISECOND)",
        "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, -3)",
    ] {
        let (out, _) = run_ok(&["run", "--input", i, "--query", &q(w)]);
        assert_eq!(out, want, "{w}");
    }
    // HOP and CUMULATE take any offset: only its remainder by the slide (size) matters.
    let (hop, _) =
        run_ok(&["run", "--input", i, "--query", &q("HOP(TABLE pay, DESCRIPTOR(ts), 5, 10, 2)")]);
    let (hop_far, _) =
        run_ok(&["run", "--input", i, "--query", &q("HOP(TABLE pay, DESCRIPTOR(ts), 5, 10, 17)")]);
    assert_eq!(hop, hop_far);
    assert!(hop.starts_with("card,window_start,window_end,n\na,-8,2,1\nb,-8,2,1\n"), "{hop}");
    let (cum, _) = run_ok(&[
        "run",
        "--input",
        i,
        "--query",
        &q("CUMULATE(TABLE pay, DESCRIPTOR(ts), 5, 10, -4)"),
    ]);
    assert!(cum.contains("a,6,11,1\na,6,16,2\n"), "{cum}");
    for (w, want) in [
        (
            "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, 5)",
            "TUMBLE needs an offset smaller than the size in absolute value",
        ),
        (
            "TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, -INTERVAL '5' MILLISECOND)",
            "TUMBLE needs an offset smaller than the size in absolute value",
        ),
        ("TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, 1, 2)", "TUMBLE takes TABLE <stream>, DESCRIPTOR(<time column>) and a size and an optional offset; found 3"),
        ("SESSION(TABLE pay PARTITION BY card, DESCRIPTOR(ts), 5, 1)", "SESSION takes TABLE <stream>, DESCRIPTOR(<time column>) and a gap; found 2"),
        ("TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, 'x')", "the offset of TUMBLE must be an INTERVAL or an integer"),
        ("TUMBLE(TABLE pay, DESCRIPTOR(ts), 5, INTERVAL '-x' SECOND)", "the offset of TUMBLE must be a whole number"),
        (
            "HOP(TABLE pay, DESCRIPTOR(ts), 5, 10, INTERVAL 'abc' SECOND)",
            "the offset of HOP must be a whole number of the time column's unit, positive or negative",
        ),
    ] {
        let err = run_err(&["run", "--input", i, "--query", &q(w)]);
        assert!(err.contains(want), "{w}: expected `{want}` in: {err}");
    }
}

/// The data rows of a CSV output (header dropped).
fn data_rows(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().skip(1).map(str::to_string).collect()
}

const BACKFILL_Q1: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
     AVG(amount) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 1000 PRECEDING AND CURRENT ROW) AS m_avg \
     FROM t WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 2000 PRECEDING AND CURRENT ROW)";

/// q1 plus a metric in q1's card group (a new state layout: the group is rebuilt), a
/// filtered metric and a window four times longer than q1's; q1's merchant group keeps
/// its state under another index.
const BACKFILL_Q2: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
     MAX(amount) OVER w AS mx, COUNT(*) FILTER (WHERE amount > 150) OVER w AS big, \
     AVG(amount) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 1000 PRECEDING AND CURRENT ROW) AS m_avg, \
     SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 8000 PRECEDING AND CURRENT ROW) AS s8 \
     FROM t WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 2000 PRECEDING AND CURRENT ROW)";

fn backfill_args(q: &str, input: &Path, out: &Path, ckpt: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--query",
        q,
        "--input",
        input.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--allowed-lateness",
        "50",
        "--checkpoint-dir",
        ckpt.to_str().unwrap(),
        "--checkpoint-events",
        "3000",
    ]
    .map(String::from)
    .to_vec();
    a.extend(SMALL_SEGMENTS.map(String::from));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// An uninterrupted run of `BACKFILL_Q2` over `input`; returns its output file.
fn straight_q2(input: &Path, dir: &Path) -> PathBuf {
    let straight = dir.join("straight.csv");
    run_ok(&[
        "run",
        "--query",
        BACKFILL_Q2,
        "--input",
        input.to_str().unwrap(),
        "--output",
        straight.to_str().unwrap(),
        "--allowed-lateness",
        "50",
        "--quiet",
    ]);
    straight
}

/// `spillway run --resume --backfill` after a SIGKILL: q1 ran with checkpoints and
/// `--retain 10s`; q2 adds metrics (one in q1's card group, a filter, a window longer
/// than q1's) and moves q1's merchant group. The new output holds q2's header and, for every event after
/// the checkpoint, exactly the row an uninterrupted q2 run gives it.
#[test]
fn backfill_after_sigkill_matches_an_uninterrupted_run() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    big_input(&input, 60_000);
    let straight = straight_q2(&input, d.path());
    let ckpt = d.path().join("ckpt");
    let out1 = d.path().join("q1.csv");
    let marker = d.path().join("halted");
    run_until_halt(
        &backfill_args(BACKFILL_Q1, &input, &out1, &ckpt, &["--retain", "10s", "--quiet"]),
        30_000,
        &marker,
    );
    // Segments were released all along (the retention keeps only the last 10 s).
    assert!(segment_ids(&ckpt.join("reservoir"))[0] > 0, "no segment was released");
    let before = data_rows(&out1).len();
    let out2 = d.path().join("q2.csv");
    let (_, err) = run_ok(&strs(&backfill_args(
        BACKFILL_Q2,
        &input,
        &out2,
        &ckpt,
        &["--resume", "--backfill"],
    )));
    assert!(!err.contains("warning"), "{err}");
    assert!(
        err.contains("backfill: 1 group-by nodes kept")
            && err.contains("1 moved")
            && err.contains("3 rebuilt")
            && err.contains("1 dropped; 0 metric groups not covered"),
        "{err}"
    );
    let want = std::fs::read_to_string(&straight).unwrap();
    let got = std::fs::read_to_string(&out2).unwrap();
    assert_eq!(got.lines().next(), want.lines().next(), "header");
    let want_rows: Vec<&str> = want.lines().skip(1 + before).collect();
    let got_rows: Vec<&str> = got.lines().skip(1).collect();
    assert_eq!(got_rows.len(), want_rows.len());
    assert!(got_rows == want_rows, "rows after the checkpoint differ");
    // The checkpoint now runs q2: a plain resume of it is accepted (nothing left to do).
    let (_, err) = run_ok(&strs(&backfill_args(BACKFILL_Q2, &input, &out2, &ckpt, &["--resume"])));
    assert!(err.contains("0 events"), "{err}");
    assert_eq!(std::fs::read_to_string(&out2).unwrap(), got);
}

/// Without `--retain` q2's 8 s window reaches past the reservoir's oldest event: the
/// run warns (even with --quiet), naming the metric, its window and the time from which
/// it is exact, and from that time on its rows equal an uninterrupted run's.
#[test]
fn backfill_warns_when_the_reservoir_does_not_cover_a_new_window() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    big_input(&input, 40_000);
    let straight = straight_q2(&input, d.path());
    let ckpt = d.path().join("ckpt");
    let out1 = d.path().join("q1.csv");
    let marker = d.path().join("halted");
    run_until_halt(
        &backfill_args(BACKFILL_Q1, &input, &out1, &ckpt, &["--quiet"]),
        21_000,
        &marker,
    );
    let before = data_rows(&out1).len();
    let out2 = d.path().join("q2.csv");
    let (_, err) = run_ok(&strs(&backfill_args(
        BACKFILL_Q2,
        &input,
        &out2,
        &ckpt,
        &["--resume", "--backfill", "--quiet"],
    )));
    let warning =
        err.lines().find(|l| l.starts_with("warning:")).unwrap_or_else(|| panic!("{err}"));
    assert!(warning.contains("`s8`") && warning.contains("[t-8s, t]"), "{warning}");
    assert_eq!(err.lines().filter(|l| l.starts_with("warning:")).count(), 1, "{err}");
    let from: i64 = warning
        .split("exact for events at time ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time in {warning}"));
    let want = data_rows(&straight);
    let got = data_rows(&out2);
    assert_eq!(got.len(), want.len() - before);
    let ts = |row: &str| -> i64 { row.split(',').nth(1).unwrap().parse().unwrap() };
    let mut after = 0;
    let mut differ_before = 0;
    for (g, w) in got.iter().zip(&want[before..]) {
        if ts(w) >= from {
            assert_eq!(g, w, "a row at or after {from}");
            after += 1;
        } else if g != w {
            differ_before += 1;
        }
    }
    assert!(after > 10_000, "{after} rows after {from}");
    assert!(differ_before > 0, "no row before {from} differs: the window was covered");
}

#[test]
fn backfill_errors_name_the_problem() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("t.csv");
    big_input(&input, 20_000);
    let ckpt = d.path().join("ckpt");
    let out = d.path().join("out.csv");
    let i = input.to_str().unwrap();

    let err = run_err(&["run", "--query", BACKFILL_Q1, "--input", i, "--backfill"]);
    assert!(err.contains("--resume"), "{err}");

    let tvf = "SELECT card, window_start, window_end, COUNT(*) AS n \
               FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), 1000)) GROUP BY card, window_start, window_end";
    let err = run_err(&strs(&backfill_args(tvf, &input, &out, &ckpt, &["--resume", "--backfill"])));
    assert!(err.contains("--backfill") && err.contains("window table function"), "{err}");

    // A checkpoint whose reservoir released segments cannot rebuild a running total.
    run_ok(&strs(&backfill_args(BACKFILL_Q1, &input, &out, &ckpt, &["--quiet"])));
    let unbounded = "SELECT card, ts, SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE \
                     BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total FROM t";
    let out2 = d.path().join("out2.csv");
    let err = run_err(&strs(&backfill_args(
        unbounded,
        &input,
        &out2,
        &ckpt,
        &["--resume", "--backfill"],
    )));
    assert!(err.contains("`total`") && err.contains("UNBOUNDED PRECEDING"), "{err}");
    // The old output cannot be the new one.
    let err = run_err(&strs(&backfill_args(
        BACKFILL_Q2,
        &input,
        &out,
        &ckpt,
        &["--resume", "--backfill"],
    )));
    assert!(err.contains("out.csv") && err.contains("name a new one"), "{err}");
    // Without --backfill another query is refused, pointing at it.
    let err = run_err(&strs(&backfill_args(BACKFILL_Q2, &input, &out2, &ckpt, &["--resume"])));
    assert!(err.contains("different query") && err.contains("--backfill"), "{err}");
    let err = run_err(&["run", "--query", BACKFILL_Q1, "--input", i, "--retain", "1h"]);
    assert!(err.contains("--retain") && err.contains("--checkpoint-dir"), "{err}");
    let err = run_err(&strs(&backfill_args(
        BACKFILL_Q1,
        &input,
        &out2,
        &d.path().join("c2"),
        &["--retain", "soon"],
    )));
    assert!(err.contains("--retain"), "{err}");
}
