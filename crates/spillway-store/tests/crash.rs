//! Crash tests: a child process (this test binary, re-executed) writes and
//! checkpoints continuously; the parent kills it with SIGKILL at random moments. After
//! every kill, reopening must return exactly the state of the last checkpoint the
//! child completed: the last one it reported, or the next one only if the kill landed
//! inside that checkpoint (after its commit, before the report). The child reports
//! when it begins each checkpoint too, so the parent knows which kills landed during a
//! checkpoint; the loop keeps killing (up to three times as often) until some have.
//!
//! SIGKILL keeps the OS page cache, so these tests cannot see lost un-fsynced data;
//! `tests/powerloss.rs` simulates power loss through the I/O seam for that.

mod common;

use spillway_store::StateStoreExt;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{check_all, open, Kind, Model, Op, KV, LIST};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "SPILLWAY_CRASH_CHILD";
const KILLS: usize = 55;
/// Kills at most, if fewer than one of the first `KILLS` landed during a checkpoint.
const MAX_KILLS: usize = 3 * KILLS;
const OPS_PER_ROUND: usize = 300;

/// The deterministic operations of round `round` (checkpoint `round` covers rounds
/// 1..=round).
fn round_ops(round: u64) -> Vec<Op> {
    let mut rng = SmallRng::seed_from_u64(0x5eed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..OPS_PER_ROUND)
        .map(|i| {
            let k = format!("k{:05}", rng.random_range(0..8000)).into_bytes();
            match rng.random_range(0..10) {
                0..=3 => Op::Put(KV, k, vec![(round as u8) ^ (i as u8); rng.random_range(0..600)]),
                4 | 5 => Op::Merge(LIST, k, vec![i as u8; rng.random_range(0..24)]),
                6 => Op::Delete(KV, k),
                7 => Op::Delete(LIST, k),
                _ => Op::Rmw(KV, k, rng.random_range(1..6)),
            }
        })
        .collect()
}

/// The child: continue from the recovered checkpoint, one checkpoint per round,
/// reporting each on stdout. Bounded so a lost child cannot run forever.
fn child(kind: Kind, dir: &Path, report: &Path) {
    // Each report is one unbuffered append (a single write(2)), so it is on its way to
    // the parent the moment the checkpoint it reports has completed.
    let mut report =
        std::fs::OpenOptions::new().create(true).append(true).open(report).expect("report file");
    let mut store = open(kind, dir).expect("child open");
    let mut round = store.checkpoint_seq();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        round += 1;
        for op in round_ops(round) {
            common::write(&mut store, &op).expect("child write");
        }
        report.write_all(format!("begin {round}\n").as_bytes()).expect("report");
        let info = store.checkpoint().expect("child checkpoint");
        assert_eq!(info.seq, round);
        report.write_all(format!("ckpt {round}\n").as_bytes()).expect("report");
    }
}

fn crash_loop(kind: Kind) {
    let base = tempfile::tempdir().expect("tempdir");
    let dir = base.path().join("store");
    let report = base.path().join("report");
    let exe = std::env::current_exe().expect("test binary");
    let mut rng = SmallRng::seed_from_u64(kind.name().len() as u64 * 7919);
    let mut known = 0u64;
    let mut model = Model::default();
    let mut recovered_ahead = 0usize;
    let mut during_checkpoint = 0usize;
    let mut state_bytes = 0usize;
    // Kills that left a fuzzy index snapshot under way (its `.snap.tmp` file).
    let mut during_snapshot = 0usize;
    let fuzzy = kind == Kind::HashLogFuzzy;
    let mut kill = 0;
    while kill < KILLS
        || ((during_checkpoint == 0 || (fuzzy && during_snapshot == 0)) && kill < MAX_KILLS)
    {
        kill += 1;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{}:{}:{}", kind.name(), dir.display(), report.display()))
            .env(common::REDIS_URL_ENV, redis_url(kind))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        std::thread::sleep(Duration::from_millis(rng.random_range(5..120)));
        child.kill().expect("SIGKILL child"); // Child::kill sends SIGKILL on Unix.
        let status = child.wait().expect("wait child");
        let out = std::fs::read_to_string(&report).unwrap_or_default();
        let mut err = String::new();
        child.stderr.take().expect("stderr").read_to_string(&mut err).expect("read stderr");
        assert!(!status.success() || out.contains("ckpt"), "child exited early: {status:?}\n{err}");
        assert!(!err.contains("panicked"), "{kind:?} child panicked (kill {kill}):\n{err}");
        let newest = |tag: &str| {
            out.lines()
                .filter_map(|l| l.strip_prefix(tag).and_then(|n| n.trim().parse::<u64>().ok()))
                .max()
                .unwrap_or(known)
                .max(known)
        };
        let last = newest("ckpt ");
        // The child had begun checkpoint `last + 1` and not reported it done: the kill
        // landed during that checkpoint (before or after its commit).
        let in_checkpoint = newest("begin ") == last + 1;
        during_checkpoint += usize::from(in_checkpoint);
        during_snapshot += usize::from(
            std::fs::read_dir(&dir)
                .map(|d| {
                    d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".snap.tmp"))
                })
                .unwrap_or(false),
        );

        let mut store =
            open(kind, &dir).unwrap_or_else(|e| panic!("{kind:?} reopen after kill {kill}: {e}"));
        let seq = store.checkpoint_seq();
        assert!(
            seq == last || seq == last + 1,
            "{kind:?} kill {kill}: recovered checkpoint {seq}, child reported {last}"
        );
        // One past the last report only when the kill landed inside that checkpoint.
        assert!(
            seq == last || in_checkpoint,
            "{kind:?} kill {kill}: recovered checkpoint {seq}, but the child had not begun it"
        );
        recovered_ahead += usize::from(seq == last + 1);
        for round in known + 1..=seq {
            for op in round_ops(round) {
                common::apply_to_model(&mut model, &op);
            }
        }
        known = seq;
        check_all(kind, &mut store, &model.live);
        state_bytes = model.live.iter().map(|((_, k), v)| k.len() + v.len()).sum();
    }
    assert!(known > 0, "{kind:?}: no checkpoint completed in {kill} runs");
    assert!(during_checkpoint > 0, "{kind:?}: none of {kill} kills landed during a checkpoint");
    assert!(
        !fuzzy || during_snapshot > 0,
        "{kind:?}: none of {kill} kills landed during a fuzzy index snapshot"
    );
    // Hashlog's recovered state outgrows its budget, so kills land during page
    // flushes, evictions and compaction, not only in memory.
    assert!(
        state_bytes as u64 > kind.budget()
            || !matches!(
                kind,
                Kind::HashLogTiny | Kind::HashLogFuzzy | Kind::TimeLogTiny | Kind::AppendLogTiny
            ),
        "{kind:?}: state of {state_bytes} bytes never exceeded the budget"
    );
    eprintln!(
        "{kind:?}: {kill} kills, {during_checkpoint} during a checkpoint, {during_snapshot} \
         during a fuzzy snapshot, reached checkpoint {known}, {recovered_ahead} recovered one \
         past the last report"
    );
}

/// The parent's Redis for tiered kinds (children connect to it), else nothing.
fn redis_url(kind: Kind) -> String {
    if kind.tiered().is_none() {
        return String::new();
    }
    spillway_store::tiered::RedisServer::shared().expect("start redis-server").url()
}

#[test]
fn crash_child_entry() {
    // Runs only when re-executed by a crash test.
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, ':');
        let (kind, dir, report) = (
            parts.next().expect("kind"),
            parts.next().expect("dir"),
            parts.next().expect("report"),
        );
        child(Kind::from_name(kind), Path::new(dir), Path::new(report));
    }
}

#[test]
fn mem_survives_sigkill() {
    crash_loop(Kind::Mem);
}

#[test]
fn hashlog_survives_sigkill() {
    crash_loop(Kind::HashLogTiny);
}

/// Every index snapshot fuzzy: kills land while one is copied across operations and
/// checkpoints, and recovery replays the log from its start.
#[test]
fn hashlog_fuzzy_snapshots_survive_sigkill() {
    crash_loop(Kind::HashLogFuzzy);
}

#[test]
fn timelog_survives_sigkill() {
    crash_loop(Kind::TimeLogTiny);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocks_survives_sigkill() {
    crash_loop(Kind::Rocks);
}

#[test]
fn appendlog_survives_sigkill() {
    crash_loop(Kind::AppendLogTiny);
}

/// Tiered (a tiny L1 over Redis over hashlog): the child is killed while entries move
/// between levels and during the checkpoint's flush; its Redis keys (newer than the
/// checkpoint) outlive it in the parent's server, and the reopened store must ignore
/// and clear them.
#[test]
fn tiered_survives_sigkill() {
    crash_loop(Kind::TieredL123);
}

/// Tiered without Redis (a tiny L1 over hashlog): kills land while L1 evicts dirty
/// entries into L3 and while the checkpoint writes them down.
#[test]
fn tiered_l13_survives_sigkill() {
    crash_loop(Kind::TieredL13);
}

/// Adaptive with forced migrations every few operations: kills land mid-migration and
/// between the parts' checkpoints and the adaptive manifest (the two-phase commit).
#[test]
fn adaptive_survives_sigkill_mid_migration() {
    crash_loop(Kind::AdaptiveTiny);
}
