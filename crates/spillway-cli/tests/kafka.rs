//! Kafka end to end against a real broker (scripts/kafka.sh: Kafka 4.3.1, KRaft, one
//! node on loopback), started once for this test binary and stopped by its PID when the
//! guard drops, also after a failed assertion.
//!
//! The failover test produces payments at a fixed rate into 4 partitions while 3
//! workers run; workers are SIGKILLed at seeded random moments (most restarted under the
//! same id at once, one only after a pause, so its partitions move to the others first).
//! The committed result topic must then equal the single-process `spillway run` output
//! exactly: every event's row once, none missing, none doubled.
#![cfg(feature = "kafka")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

const BIN: &str = env!("CARGO_BIN_EXE_spillway");

struct Broker {
    dir: tempfile::TempDir,
    bootstrap: String,
}

impl Broker {
    fn start() -> Broker {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new(script())
            .args(["start", dir.path().to_str().expect("utf-8")])
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/kafka.sh");
        assert!(out.status.success(), "kafka.sh start failed");
        let bootstrap = String::from_utf8(out.stdout).expect("utf-8").trim().to_string();
        assert!(bootstrap.starts_with("127.0.0.1:"), "{bootstrap}");
        Broker { dir, bootstrap }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ =
            Command::new(script()).args(["stop", self.dir.path().to_str().unwrap_or("")]).status();
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh")
}

fn spillway(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run spillway")
}

fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "spillway failed: {err}");
    err
}

/// Payments in time order: `n` events over `cards` cards.
fn payments(path: &Path, n: usize, cards: u32, seed: u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut s = String::from("ts,card,merchant,amount\n");
    let mut t = 1_700_000_000_000i64;
    for _ in 0..n {
        t += rng.random_range(0..40);
        let amount = f64::from(rng.random_range(1..100_000i32)) / 100.0;
        s.push_str(&format!(
            "{t},{},{},{amount}\n",
            rng.random_range(0..cards),
            rng.random_range(0..50)
        ));
    }
    std::fs::write(path, s).expect("write payments");
}

const QUERY: &str = "SELECT card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, \
     MAX(amount) OVER w AS mx FROM payments \
     WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '30' SECOND PRECEDING AND CURRENT ROW)";

fn worker(b: &Broker, dir: &Path, id: &str, input: &str, output: &str) -> Child {
    Command::new(BIN)
        .args([
            "run",
            "--query",
            QUERY,
            "--input",
            &format!("kafka://{}/{input}", b.bootstrap),
            "--output",
            &format!("kafka://{}/{output}", b.bootstrap),
            "--group",
            &format!("g-{output}"),
            "--checkpoint-dir",
            dir.to_str().expect("utf-8"),
            "--checkpoint-every",
            "300ms",
            "--worker-id",
            id,
            "--idle-exit",
            "8s",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker")
}

#[test]
fn kafka_end_to_end() {
    let b = Broker::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();

    // -- Errors a new user meets.
    let e = spillway(&[
        "kafka",
        "consume",
        "--brokers",
        &b.bootstrap,
        "--topic",
        "nope",
        "--timeout",
        "2s",
    ]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("topic nope does not exist"), "{e:?}");
    let e = spillway(&[
        "kafka",
        "consume",
        "--brokers",
        "127.0.0.1:1",
        "--topic",
        "x",
        "--timeout",
        "2s",
    ]);
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("127.0.0.1:1"), "{e:?}");
    let e =
        spillway(&["run", "--query", QUERY, "--input", &format!("kafka://{}/pay", b.bootstrap)]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("--output kafka://"), "{e:?}");

    // -- Exactly once under SIGKILLs, against the single-process run.
    let input = t.join("pay.csv");
    let n = 24_000;
    payments(&input, n, 400, 7);
    let single = t.join("single.csv");
    ok(&spillway(&[
        "run",
        "--query",
        QUERY,
        "--input",
        input.to_str().expect("utf-8"),
        "--output",
        single.to_str().expect("utf-8"),
        "-q",
    ]));
    let producer = Command::new(BIN)
        .args([
            "kafka",
            "produce",
            "--brokers",
            &b.bootstrap,
            "--topic",
            "pay",
            "--input",
            input.to_str().expect("utf-8"),
            "--key",
            "card",
            "--partitions",
            "4",
            "--rate",
            "3000",
            "-q",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the producer");
    let dir = t.join("ckpt");
    let ids = ["w0", "w1", "w2"];
    let mut workers: Vec<Option<Child>> =
        ids.iter().map(|id| Some(worker(&b, &dir, id, "pay", "out"))).collect();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let start = Instant::now();
    let mut kills = 0;
    let mut parked: Option<(usize, Instant)> = None;
    // Kill for the first 7 s of the 8 s the producer needs.
    while start.elapsed() < Duration::from_secs(7) {
        std::thread::sleep(Duration::from_millis(rng.random_range(400..1200)));
        let i = rng.random_range(0..ids.len());
        if let Some((p, _)) = parked {
            if p == i {
                continue;
            }
        }
        if let Some(mut c) = workers[i].take() {
            c.kill().expect("SIGKILL");
            let _ = c.wait();
            kills += 1;
        }
        if kills == 2 && parked.is_none() {
            // This one stays down long enough (> the 6 s session timeout) for the group
            // to hand its partitions to the others.
            parked = Some((i, Instant::now()));
        } else {
            workers[i] = Some(worker(&b, &dir, ids[i], "pay", "out"));
        }
        if let Some((p, since)) = parked {
            if since.elapsed() > Duration::from_secs(7) && workers[p].is_none() {
                workers[p] = Some(worker(&b, &dir, ids[p], "pay", "out"));
            }
        }
    }
    if let Some((p, _)) = parked {
        if workers[p].is_none() {
            workers[p] = Some(worker(&b, &dir, ids[p], "pay", "out"));
        }
    }
    assert!(kills >= 4, "only {kills} kills");
    let pout = producer.wait_with_output().expect("producer");
    assert!(pout.status.success(), "produce: {}", String::from_utf8_lossy(&pout.stderr));
    let mut replayed_somewhere = false;
    for c in workers.into_iter().flatten() {
        let o = c.wait_with_output().expect("worker");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "a worker failed: {err}");
        replayed_somewhere |= !err.contains("(0 replayed");
    }
    let got = t.join("kafka.csv");
    let c = ok(&spillway(&[
        "kafka",
        "consume",
        "--brokers",
        &b.bootstrap,
        "--topic",
        "out",
        "--output",
        got.to_str().expect("utf-8"),
        "--count",
        &n.to_string(),
        "--timeout",
        "60s",
        "--sort",
    ]));
    assert!(c.contains("0 event ids seen more than once"), "{c}");
    let (want, got) =
        (std::fs::read_to_string(&single).unwrap(), std::fs::read_to_string(&got).unwrap());
    assert_eq!(got.lines().count(), n + 1, "rows (with the header)");
    assert!(want == got, "the committed results differ from the single-process run");
    // Nothing more than the n results was committed.
    let extra = spillway(&[
        "kafka",
        "consume",
        "--brokers",
        &b.bootstrap,
        "--topic",
        "out",
        "--count",
        &(n + 1).to_string(),
        "--timeout",
        "5s",
        "-q",
    ]);
    assert!(
        String::from_utf8_lossy(&extra.stderr).contains(&format!("with {n} of {}", n + 1)),
        "{extra:?}"
    );
    eprintln!("{kills} kills; a restore replayed committed events: {replayed_somewhere}");

    // A metric grouped by another column than the topic's key would be wrong per
    // partition: refused before anything runs.
    let by_merchant = QUERY.replace("PARTITION BY card", "PARTITION BY merchant");
    let e = spillway(&[
        "run",
        "--query",
        &by_merchant,
        "--input",
        &format!("kafka://{}/pay", b.bootstrap),
        "--output",
        &format!("kafka://{}/out2", b.bootstrap),
        "--group",
        "g2",
        "--checkpoint-dir",
        t.join("ckpt2").to_str().expect("utf-8"),
    ]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(!e.status.success() && err.contains("--key merchant"), "{err}");
}
