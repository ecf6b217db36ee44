//! What the Kafka tests share: the broker, the `spillway` binary, generated payments.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

pub const BIN: &str = env!("CARGO_BIN_EXE_spillway");

/// The binary's broker: kafka.sh's watcher stops it and removes its directory when this
/// process ends.
pub struct Broker {
    pub bootstrap: String,
}

static BROKER: OnceLock<Broker> = OnceLock::new();

/// The broker of this test binary, started on first use.
pub fn broker() -> &'static Broker {
    BROKER.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("spillway-kafka-test")
            .tempdir()
            .expect("tempdir")
            .keep();
        let out = Command::new(script())
            .args(["start", dir.to_str().expect("utf-8")])
            .args(["--owner", &std::process::id().to_string(), "--temporary"])
            .output()
            .expect("run scripts/kafka.sh");
        assert!(
            out.status.success(),
            "kafka.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bootstrap = String::from_utf8(out.stdout).expect("utf-8").trim().to_string();
        assert!(bootstrap.starts_with("127.0.0.1:"), "{bootstrap}");
        Broker { bootstrap }
    })
}

pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka.sh")
}

/// Runs `spillway ARGS` to completion.
pub fn spillway(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run spillway")
}

/// `spillway run --query SQL --input FILE --output OUT -q` followed by `extra` (the
/// single-process run a worker's results are compared with); its stderr. Fails the test
/// if the run fails.
pub fn run_file(sql: &str, input: &Path, output: &Path, extra: &[&str]) -> String {
    let mut a = vec![
        "run",
        "--query",
        sql,
        "--input",
        input.to_str().expect("utf-8"),
        "--output",
        output.to_str().expect("utf-8"),
        "-q",
    ];
    a.extend_from_slice(extra);
    ok(&spillway(&a))
}

/// `spillway kafka produce --brokers B --topic T --input FILE -q` followed by `extra`.
pub fn produce(b: &str, topic: &str, input: &Path, extra: &[&str]) -> Output {
    let mut a = vec![
        "kafka",
        "produce",
        "--brokers",
        b,
        "--topic",
        topic,
        "--input",
        input.to_str().expect("utf-8"),
        "-q",
    ];
    a.extend_from_slice(extra);
    spillway(&a)
}

/// `spillway run` as a worker of `kafka://B/TOPIC` writing `TOPIC-out`, in group
/// `TOPIC`, with its state in `dir/ckpt`, committing every 50 ms and checkpointing every
/// 200 ms, quiet, then `extra`; stdout discarded, stderr piped.
pub fn start_worker(b: &str, topic: &str, sql: &str, dir: &Path, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["run", "--query", sql, "--table", "pay"])
        .args(["--input", &format!("kafka://{b}/{topic}")])
        .args(["--output", &format!("kafka://{b}/{topic}-out"), "--group", topic])
        .args(["--checkpoint-dir", dir.join("ckpt").to_str().expect("utf-8")])
        .args(["--commit-every", "50ms", "--checkpoint-interval", "200ms", "-q"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a worker")
}

/// The first `n` committed rows of `topic` in event-id order (`consume --sort`), into
/// the CSV file `out`, waiting up to 60 s for them.
pub fn consume_sorted(b: &str, topic: &str, n: usize, out: &Path) -> Output {
    let n = n.to_string();
    let out = out.to_str().expect("utf-8");
    consume(b, topic, &["--count", &n, "--sort", "--timeout", "60s", "--output", out])
}

/// Asserts that `topic` holds no more than `n` committed rows (a read of `n + 1` ends
/// at its timeout with `n`).
pub fn assert_no_more_rows(b: &str, topic: &str, n: usize, what: &str) {
    let more = (n + 1).to_string();
    let extra = consume(b, topic, &["--count", &more, "--timeout", "3s", "-q"]);
    let e = stderr(&extra);
    assert!(e.contains(&format!("with {n} of {more}")), "{what}: more rows than {n}: {e}");
}

/// SIGKILLs `worker` once `topic` holds `rows` committed rows (bounded: 90 s); fails if
/// the worker exits first, with its stderr.
pub fn kill_once_committed(b: &str, topic: &str, rows: usize, worker: &mut Child, what: &str) {
    let since = Instant::now();
    let n = rows.to_string();
    loop {
        let c = consume(b, topic, &["--count", &n, "--timeout", "2s", "-q"]);
        if c.status.success() {
            break;
        }
        assert!(since.elapsed() < Duration::from_secs(90), "{what}: no rows: {}", stderr(&c));
        if let Some(st) = worker.try_wait().expect("poll the worker") {
            let mut e = String::new();
            if let Some(mut pipe) = worker.stderr.take() {
                let _ = pipe.read_to_string(&mut e);
            }
            panic!("{what}: the worker exited early ({st}): {e}");
        }
    }
    worker.kill().expect("SIGKILL the worker");
    worker.wait().expect("reap it");
}

/// Reads the `serving metrics at http://ADDR/metrics` line from a worker started with
/// `--metrics-addr` and a piped stderr; returns ADDR and a thread collecting the rest of
/// its stderr.
pub fn metrics_address(worker: &mut Child) -> (String, JoinHandle<Vec<String>>) {
    let mut lines = BufReader::new(worker.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("the worker named no metrics address").expect("stderr");
        if let Some(a) = line.strip_prefix("serving metrics at http://") {
            break a.trim_end_matches("/metrics").to_string();
        }
    };
    (addr, std::thread::spawn(move || lines.map_while(Result::ok).collect()))
}

/// `spillway kafka consume --brokers B --topic T` followed by `extra`.
pub fn consume(brokers: &str, topic: &str, extra: &[&str]) -> Output {
    let mut a = vec!["kafka", "consume", "--brokers", brokers, "--topic", topic];
    a.extend_from_slice(extra);
    spillway(&a)
}

/// The stderr of a run that must have succeeded.
pub fn ok(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "spillway failed: {err}");
    err
}

/// The stderr of a run.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Payments in time order: `n` events over `cards` cards.
pub fn payments(path: &Path, n: usize, cards: u32, seed: u64) {
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
