//! End-to-end tests of `spillway run` at its edges: outputs that are not
//! regular files (stdout, FIFOs, devices) written in place, resume details (a missing
//! checkpoint, the kept checkpoint interval, stores that cannot checkpoint, one message
//! per error), `-q`, truthful summaries, and RFC 3339 timestamps in time columns.
//! Each test is named after the behaviour it pins.

use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::time::Duration;

fn spillway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
}

fn run(args: &[&str]) -> Output {
    spillway().args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn run_ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(o.status.success(), "spillway {args:?} failed:\n{}", stderr(&o));
    o
}

fn run_err(args: &[&str]) -> String {
    let o = run(args);
    assert!(!o.status.success(), "spillway {args:?} should fail:\n{}", stderr(&o));
    stderr(&o)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const Q: &str = "SELECT card, ts, SUM(amount) OVER w AS total FROM payments \
                 WINDOW w AS (PARTITION BY card ORDER BY ts \
                 RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";

/// `rows` payments over 7 cards, 10 ms apart.
fn payments(dir: &Path, rows: usize) -> PathBuf {
    let p = dir.join("payments.csv");
    let mut text = String::from("card,amount,ts\n");
    for i in 0..rows {
        text.push_str(&format!("c{},{},{}\n", i % 7, i % 13 + 1, 1000 + i * 10));
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// Makes a FIFO with the `mkfifo` tool.
fn mkfifo(path: &Path) {
    let st = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(st.success(), "mkfifo {} failed", path.display());
}

/// Reads a FIFO to its end on a thread; the bytes arrive on the channel.
fn read_fifo(path: &Path) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::fs::File::open(&path).unwrap().read_to_end(&mut bytes).unwrap();
        let _ = tx.send(bytes);
    });
    rx
}

fn is_fifo(path: &Path) -> bool {
    std::fs::symlink_metadata(path).unwrap().file_type().is_fifo()
}

#[test]
fn output_dash_writes_the_csv_to_stdout_and_the_summary_to_stderr() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 500);
    let file = d.path().join("out.csv");
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&file), "-q"]);
    let o = run_ok(&["run", "--query", Q, "--input", s(&input), "--output", "-"]);
    assert!(o.stdout == std::fs::read(&file).unwrap(), "stdout differs from the file run");
    assert!(stderr(&o).contains("500 events"), "no summary on stderr: {}", stderr(&o));
    assert!(!d.path().join("-").exists(), "a file named - was written");
    assert!(!Path::new("-").exists(), "a file named - was written");
}

#[test]
fn output_fifo_is_written_in_place() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 500);
    let file = d.path().join("out.csv");
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&file), "-q"]);
    let fifo = d.path().join("out.fifo");
    mkfifo(&fifo);
    let got = read_fifo(&fifo);
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&fifo), "-q"]);
    let bytes = got
        .recv_timeout(Duration::from_secs(20))
        .expect("the reader of the FIFO got no end of file: the run did not write the FIFO");
    assert!(bytes == std::fs::read(&file).unwrap(), "the FIFO's bytes differ from the file run");
    assert!(is_fifo(&fifo), "{} is no longer a FIFO", fifo.display());
    assert!(!d.path().join("out.partial.fifo").exists());
}

/// With checkpoints too (written in place, synced without fsync), and for the side
/// output and the dead-letter file.
#[test]
fn side_output_and_dead_letters_to_fifos_are_written_in_place() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("payments.csv");
    // The row at ts 50 is late (lateness 0), the row `x` is malformed.
    std::fs::write(&input, "card,amount,ts\na,1,100\nb,2,200\na,3,50\nb,x,300\na,4,400\n").unwrap();
    let side = d.path().join("late.fifo");
    let dead = d.path().join("dead.fifo");
    mkfifo(&side);
    mkfifo(&dead);
    let side_rx = read_fifo(&side);
    let dead_rx = read_fifo(&dead);
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    run_ok(&[
        "run",
        "--query",
        Q,
        "--input",
        s(&input),
        "--output",
        s(&out),
        "--side-output",
        s(&side),
        "--on-error",
        "skip",
        "--dead-letter",
        s(&dead),
        "--checkpoint-dir",
        s(&ckpt),
        "--checkpoint-events",
        "2",
        "-q",
    ]);
    let late = side_rx.recv_timeout(Duration::from_secs(20)).expect("side output FIFO unread");
    assert_eq!(String::from_utf8(late).unwrap(), "card,amount,ts\na,3,50\n");
    let dead_text = dead_rx.recv_timeout(Duration::from_secs(20)).expect("dead letters unread");
    let dead_text = String::from_utf8(dead_text).unwrap();
    assert!(dead_text.contains("\"raw\":\"b,x,300\""), "{dead_text}");
    assert!(is_fifo(&side) && is_fifo(&dead), "a FIFO was replaced by a file");
}

/// A character device made in a temporary directory (needs root; skipped otherwise):
/// the same check as `/dev/null` below, safe to run on a build that still renames over
/// the output.
#[test]
fn output_char_device_stays_a_device() {
    let d = tempfile::tempdir().unwrap();
    let dev = d.path().join("null");
    let made = Command::new("mknod").arg(&dev).args(["c", "1", "3"]).output().unwrap();
    if !made.status.success() {
        eprintln!("skipped: mknod needs root ({})", String::from_utf8_lossy(&made.stderr));
        return;
    }
    let input = payments(d.path(), 200);
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&dev), "-q"]);
    let ft = std::fs::symlink_metadata(&dev).unwrap().file_type();
    assert!(ft.is_char_device(), "{} was replaced by a {ft:?}", dev.display());
    assert!(!d.path().join("null.partial").exists());
    assert!(!d.path().join("null.late.csv").exists());
}

#[test]
fn output_dev_null_stays_a_char_device() {
    let null = Path::new("/dev/null");
    let before = std::fs::symlink_metadata(null).unwrap().file_type();
    assert!(before.is_char_device(), "/dev/null is not a character device before the test");
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 200);
    let o = run(&["run", "--query", Q, "--input", s(&input), "--output", "/dev/null", "-q"]);
    let after = std::fs::symlink_metadata(null).unwrap().file_type();
    if !after.is_char_device() {
        // Put the device back before failing (possible as root), so that nothing else on
        // the machine breaks; fail loudly either way.
        let _ = std::fs::remove_file(null);
        let back = Command::new("mknod").args(["-m", "666", "/dev/null", "c", "1", "3"]).status();
        panic!(
            "spillway run --output /dev/null REPLACED /dev/null with a {after:?} (restored with \
             mknod: {back:?}); check /dev/null on this machine"
        );
    }
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!Path::new("/dev/null.partial").exists(), "/dev/null.partial was left behind");
}

/// `rows` payments (as [`payments`]) with the amount of row `bad` (0-based) unparseable.
fn payments_with_bad_row(dir: &Path, rows: usize, bad: Option<usize>) -> PathBuf {
    let p = dir.join("payments.csv");
    let mut text = String::from("card,amount,ts\n");
    for i in 0..rows {
        let amount = if Some(i) == bad { "oops".to_string() } else { (i % 13 + 1).to_string() };
        text.push_str(&format!("c{},{amount},{}\n", i % 7, 1000 + i * 10));
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// A checkpoint directory holding the checkpoint at event 3000 of a run over 5000 rows
/// that stopped on a malformed row 4000; the input is then fixed. Returns the input.
fn checkpointed_then_failed(dir: &Path, out: &Path, ckpt: &Path) -> PathBuf {
    let input = payments_with_bad_row(dir, 5000, Some(4000));
    let err = run_err(&[
        "run",
        "--query",
        Q,
        "--input",
        s(&input),
        "--output",
        s(out),
        "--checkpoint-dir",
        s(ckpt),
        "--checkpoint-events",
        "1500",
    ]);
    assert!(err.contains("first 3000 input events"), "{err}");
    payments_with_bad_row(dir, 5000, None)
}

#[test]
fn a_resume_whose_output_is_gone_says_so_once() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let input = checkpointed_then_failed(d.path(), &out, &ckpt);
    std::fs::remove_file(&out).unwrap();
    let args = ["run", "--query", Q, "--input", s(&input), "--output", s(&out), "--checkpoint-dir"];
    let err = run_err(&[&args[..], &[s(&ckpt), "--resume"]].concat());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("out.csv") && err.contains("gone"), "{err}");
    let os = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
    assert!(err.matches(&os).count() <= 1, "the same error is printed twice: {err}");
}

fn ckpt_args<'a>(input: &'a Path, out: &'a Path, ckpt: &'a Path) -> Vec<&'a str> {
    vec![
        "run",
        "--query",
        Q,
        "--input",
        s(input),
        "--output",
        s(out),
        "--checkpoint-dir",
        s(ckpt),
        "--resume",
    ]
}

#[test]
fn resume_without_a_checkpoint_says_so_and_starts_from_the_beginning() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 300);
    let fresh = d.path().join("fresh.csv");
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&fresh), "-q"]);
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for ckpt in [d.path().join("missing"), empty] {
        let out = d.path().join("out.csv");
        let o = run_ok(&ckpt_args(&input, &out, &ckpt));
        let want = format!("no checkpoint in {}: starting from the beginning", ckpt.display());
        assert!(stderr(&o).contains(&want), "{}", stderr(&o));
        assert!(std::fs::read(&out).unwrap() == std::fs::read(&fresh).unwrap());
    }
}

#[test]
fn resume_and_backfill_keep_the_checkpoint_interval() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let input = checkpointed_then_failed(d.path(), &out, &ckpt);
    // From event 3000 to 5000 with the checkpoint's interval, 1500: one at 4500.
    let o = run_ok(&ckpt_args(&input, &out, &ckpt));
    let e = stderr(&o);
    assert!(e.contains("\n1 checkpoints") && e.contains("one every 1500 input events"), "{e}");

    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let input = checkpointed_then_failed(d.path(), &out, &ckpt);
    let q2 = Q.replace("AS total", "AS total, COUNT(*) OVER w AS n");
    let out2 = d.path().join("out2.csv");
    let mut args = ckpt_args(&input, &out2, &ckpt);
    args[2] = &q2;
    args.push("--backfill");
    // The backfill's own checkpoint, then the one at 4500.
    let o = run_ok(&args);
    let e = stderr(&o);
    assert!(e.contains("\n2 checkpoints") && e.contains("one every 1500 input events"), "{e}");
}

#[test]
fn a_store_that_cannot_checkpoint_is_refused_before_the_run() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 3000);
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let mut args = ckpt_args(&input, &out, &ckpt);
    args.pop();
    args.extend(["--store", "tiered", "--l3", "none", "--checkpoint-events", "1000"]);
    let err = run_err(&args);
    assert!(err.contains("--l3 none") && err.contains("cannot checkpoint"), "{err}");
    assert!(!err.contains("cut back"), "{err}");
    assert!(!out.exists() && !ckpt.exists(), "the refused run wrote files");
}

#[test]
fn quiet_hides_the_progress_but_keeps_the_summary() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 300);
    let out = d.path().join("out.csv");
    let o = run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&out), "-q"]);
    assert!(stderr(&o).contains("300 events in"), "{}", stderr(&o));
}

#[test]
fn a_resumed_runs_summary_counts_its_own_events_and_rows() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let input = checkpointed_then_failed(d.path(), &out, &ckpt);
    let o = run_ok(&ckpt_args(&input, &out, &ckpt));
    let e = stderr(&o);
    assert!(e.contains("2000 events in") && e.contains("2000 rows emitted"), "{e}");
    assert!(e.contains("5000 events, 5000 rows emitted"), "{e}");
}

#[test]
fn time_columns_take_rfc3339_timestamps() {
    let d = tempfile::tempdir().unwrap();
    let ints = payments(d.path(), 400);
    let int_out = d.path().join("ints.csv");
    run_ok(&["run", "--query", Q, "--input", s(&ints), "--output", s(&int_out), "-q"]);
    // The same events with their times written as timestamps (1000 ms after the epoch
    // and on), in the forms the engine accepts.
    let text = std::fs::read_to_string(&ints).unwrap();
    let mut stamped = String::from("card,amount,ts\n");
    for (i, line) in text.lines().skip(1).enumerate() {
        let (rest, ts) = line.rsplit_once(',').unwrap();
        let ms: i64 = ts.parse().unwrap();
        let (secs, frac) = (ms / 1000, ms % 1000);
        let stamp = match i % 3 {
            0 => format!("1970-01-01T00:{:02}:{:02}.{frac:03}Z", secs / 60, secs % 60),
            1 => format!("1970-01-01 00:{:02}:{:02}.{frac:03}", secs / 60, secs % 60),
            _ => format!("1970-01-01T01:{:02}:{:02}.{frac:03}+01:00", secs / 60, secs % 60),
        };
        stamped.push_str(&format!("{rest},{stamp}\n"));
    }
    let dir = d.path().join("stamped");
    std::fs::create_dir(&dir).unwrap();
    let input = dir.join("payments.csv");
    std::fs::write(&input, stamped).unwrap();
    let out = d.path().join("stamped.csv");
    run_ok(&["run", "--query", Q, "--input", s(&input), "--output", s(&out), "-q"]);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(&int_out).unwrap());

    // Anything else names the row and column and shows the expected forms.
    std::fs::write(&input, "card,amount,ts\na,1,2023-11-14T22:13:20Z\nb,2,14/11/2023\n").unwrap();
    let err = run_err(&["run", "--query", Q, "--input", s(&input), "--output", s(&out)]);
    assert!(err.contains("line 3, column \"ts\""), "{err}");
    assert!(err.contains("2023-11-14T22:13:20.663Z") && err.contains("\"14/11/2023\""), "{err}");
}

/// "The rows before the error are in X" only when rows were written there.
#[test]
fn a_failed_run_says_truly_whether_rows_were_written() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let partial = d.path().join("out.partial.csv");
    // The first row is bad: no row was written, and no header-only file is left.
    let input = payments_with_bad_row(d.path(), 100, Some(0));
    let err = run_err(&["run", "--query", Q, "--input", s(&input), "--output", s(&out)]);
    assert!(err.contains("before any row was written"), "{err}");
    assert!(!err.contains("rows before the error are in"), "{err}");
    assert!(!partial.exists() && !out.exists());
    // Row 50 is bad: the 50 rows before it are in the partial file, as it says.
    let input = payments_with_bad_row(d.path(), 100, Some(50));
    let err = run_err(&["run", "--query", Q, "--input", s(&input), "--output", s(&out)]);
    let want = format!("the 50 rows before the error are in {}", partial.display());
    assert!(err.contains(&want), "{err}");
    assert_eq!(std::fs::read_to_string(&partial).unwrap().lines().count(), 51);
}

#[test]
fn a_resume_with_other_arguments_names_each_change_with_both_values() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out.csv");
    let ckpt = d.path().join("ckpt");
    let input = checkpointed_then_failed(d.path(), &out, &ckpt);
    let mut args = ckpt_args(&input, &out, &ckpt);
    args.extend(["--allowed-lateness", "5s"]);
    let e = run_err(&args);
    assert!(e.contains("different allowed lateness (checkpoint: 0; now: 5000)"), "{e}");
    // Another store is refused by the store itself, naming both kinds.
    let mut args = ckpt_args(&input, &out, &ckpt);
    args.extend(["--store", "mem"]);
    let e = run_err(&args);
    assert!(e.contains("\"hashlog\" store, not \"mem\""), "{e}");
    // The checkpoint is untouched: the same arguments still resume it.
    run_ok(&ckpt_args(&input, &out, &ckpt));
}

#[test]
fn a_windowed_jobs_side_output_names_each_missed_window() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("pay.csv");
    // TUMBLE 10 s: 25000 fires [0, 10000); 5000 then misses it.
    std::fs::write(&input, "card,amount,ts\na,1,1000\na,2,25000\na,3,5000\n").unwrap();
    let out = d.path().join("out.csv");
    let q = "SELECT card, window_start, window_end, COUNT(*) AS n FROM \
             TABLE(TUMBLE(TABLE pay, DESCRIPTOR(ts), INTERVAL '10' SECOND)) \
             GROUP BY card, window_start, window_end";
    run_ok(&["run", "--query", q, "--input", s(&input), "--output", s(&out), "-q"]);
    let late = std::fs::read_to_string(d.path().join("out.late.csv")).unwrap();
    assert_eq!(late, "card,amount,ts,window_start,window_end\na,3,5000,0,10000\n");
}
