//! `spillway run --metrics-addr`: the Prometheus endpoint is scraped over
//! HTTP while a job runs (halted at a checkpoint, so the figures are exact), the
//! exposition is parsed, and a bad or busy address is refused before anything runs.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[path = "support/scrape.rs"]
mod scrape;
use scrape::{get, parse, KillOnDrop};

fn spillway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
}

const Q: &str = "SELECT card, ts, SUM(amount) OVER w AS total FROM payments \
                 WINDOW w AS (PARTITION BY card ORDER BY ts \
                 RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW)";

fn payments(dir: &Path, rows: usize) -> std::path::PathBuf {
    let p = dir.join("payments.csv");
    let mut text = String::from("card,amount,ts\n");
    for i in 0..rows {
        text.push_str(&format!("c{},{},{}\n", i % 7, i % 13 + 1, 1000 + i * 10));
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// Reads the child's stderr until it names the metrics address.
fn metrics_addr(child: &mut Child) -> String {
    let err = child.stderr.take().unwrap();
    let mut lines = BufReader::new(err).lines();
    loop {
        let line = lines.next().expect("stderr ended before the metrics address").unwrap();
        if let Some(rest) = line.strip_prefix("serving metrics at http://") {
            // Keep draining stderr so the child never blocks on a full pipe.
            std::thread::spawn(move || for _ in lines {});
            return rest.trim_end_matches("/metrics").to_string();
        }
    }
}

#[test]
fn a_running_job_serves_its_figures_at_the_metrics_address() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 5000);
    let marker = d.path().join("halted");
    let mut child = KillOnDrop(
        spillway()
            .args(["run", "--query", Q, "--input", input.to_str().unwrap()])
            .args(["--output", d.path().join("out.csv").to_str().unwrap()])
            .args(["--checkpoint-dir", d.path().join("ckpt").to_str().unwrap()])
            .args(["--checkpoint-events", "1000", "--metrics-addr", "127.0.0.1:0"])
            .args(["--halt-after", "3000", "--halt-marker", marker.to_str().unwrap()])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let addr = metrics_addr(&mut child);
    // The job halts after the checkpoint at event 3000 (bounded: 10 minutes, then it
    // fails on its own).
    while !marker.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the job ended ({st}) before its halt point");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, body) = get(&addr, "/metrics");
    let (missing, _) = get(&addr, "/nothing");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(missing.contains("404"), "{missing}");
    let m = parse(&body);
    assert_eq!(m["spillway_events_in_total"], 3000.0, "{body}");
    assert_eq!(m["spillway_rows_out_total"], 3000.0, "{body}");
    assert_eq!(m["spillway_late_events_total"], 0.0, "{body}");
    assert_eq!(m["spillway_checkpoint_seconds_count"], 3.0, "{body}");
    // The 7 cards' state, and the checkpoint's metadata keys.
    assert!(m["spillway_state_keys{store=\"job\"}"] >= 7.0, "{body}");
    assert!(m["spillway_state_bytes{store=\"job\"}"] > 0.0, "{body}");
}

#[test]
fn a_bad_or_busy_metrics_address_is_refused_before_the_run() {
    let d = tempfile::tempdir().unwrap();
    let input = payments(d.path(), 100);
    let out = d.path().join("out.csv");
    let run = |addr: &str| {
        spillway()
            .args(["run", "--query", Q, "--input", input.to_str().unwrap()])
            .args(["--output", out.to_str().unwrap(), "--metrics-addr", addr])
            .output()
            .unwrap()
    };
    let o = run("not-an-address");
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--metrics-addr not-an-address: not a HOST:PORT address"), "{e}");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let o = run(&addr);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(&format!("--metrics-addr {addr}: cannot listen there")), "{e}");
    assert!(!out.exists(), "the refused run wrote its output");
}
