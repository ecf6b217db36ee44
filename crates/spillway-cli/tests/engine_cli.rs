//! End-to-end tests of `spillway run`, `explain` and `demo` through the binary:
//! exact results on a hand-checked stream, errors naming line and column, dead letters,
//! side output, and resume after real SIGKILLs ending byte-identical to an uninterrupted
//! run.

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
        "in.csv",
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
    let input = write(d.path(), "in.csv", "card,amount,ts\na,10,1000\na,oops,2000\na,3,3000\n");
    let q = "SELECT card, SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 5000 PRECEDING AND CURRENT ROW) AS s FROM t";
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
        "SELECT card, SUM(amount) FROM t",
        "--input",
        input.to_str().unwrap(),
    ]);
    assert!(err.contains("OVER"), "{err}");
}

#[test]
fn late_events_go_to_the_side_output() {
    let d = tempfile::tempdir().unwrap();
    let input =
        write(d.path(), "in.csv", "card,amount,ts\na,1,10000\na,2,9000\na,4,5000\na,8,10500\n");
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

#[test]
fn resume_after_sigkill_is_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.csv");
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
    args.extend([
        "--checkpoint-dir".into(),
        ckpt.to_str().unwrap().into(),
        "--checkpoint-every".into(),
        "3000".into(),
    ]);
    let mut kills = 0;
    let mut x: u64 = 12345;
    let started = Instant::now();
    let mut resume = false;
    loop {
        assert!(started.elapsed() < Duration::from_secs(600), "resume loop did not finish");
        let mut a = args.clone();
        if resume {
            a.push("--resume".into());
        }
        let mut child =
            spillway().args(&a).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let wait = Duration::from_millis(10 + x % 150);
        let t0 = Instant::now();
        let mut done = None;
        while t0.elapsed() < wait {
            if let Some(st) = child.try_wait().unwrap() {
                done = Some(st);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        match done {
            Some(st) => {
                let mut err = String::new();
                use std::io::Read;
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                assert!(st.success(), "run failed: {err}");
                break;
            }
            None => {
                // SIGKILL.
                child.kill().unwrap();
                child.wait().unwrap();
                kills += 1;
                resume = true;
            }
        }
    }
    assert!(kills >= 3, "only {kills} kills before the run finished; make the input bigger");
    eprintln!("byte-identical after {kills} SIGKILLs");
    let got = std::fs::read(&got_out).unwrap();
    assert_eq!(got.len(), want.len(), "output length differs after {kills} kills");
    assert!(got == want, "output differs after {kills} kills");
    assert_eq!(std::fs::read(d.path().join("killed.late.csv")).unwrap(), want_late);
}

/// `--store tiered` with an L1 of a few entries over a private Redis (`--l2 auto`)
/// over hashlog, and with L1 over hashlog alone, computes output byte-identical to
/// `--store mem`: state migrates between levels on nearly every event. The tiered
/// flags are refused for other stores and checked for bad values.
#[test]
fn tiered_store_output_is_identical_to_mem() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.csv");
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
