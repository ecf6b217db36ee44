//! What the Kafka tests share: the broker, the `spillway` binary, generated payments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

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
