//! Power-loss tests through the crash-simulating I/O seam ([`CrashFs`]): random model
//! sequences run on a store whose file system remembers what each fsync made durable;
//! the power is cut at a random call (often inside a checkpoint or a page flush), and
//! the files are turned into what a power loss could leave: unsynced writes dropped,
//! kept out of order or torn at 512 B / 4 KiB sectors, and directory entries not
//! fsynced undone. Reopening must give exactly the state of the last completed
//! checkpoint (or of the one the cut interrupted, if its manifest was already
//! durable), for every store that takes an `Fs`.
//!
//! `oracle_detects_a_store_without_fsyncs` shows the oracle is not vacuous: with the
//! seam's fsyncs suppressed, the same check fails.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{open_with_fs, Kind, Op, KV, LIST, NAMESPACES, ORD};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spillway_store::io::{create_dir_durable, CrashFs, CrashMode, Fs};
use spillway_store::tiered::{L2Config, RedisServer};
use spillway_store::{NamespaceSpec, StateStore, StateStoreExt, StoreKind, StoreOptions};

/// Empties the test binary's Redis server (one per binary; only
/// `tiered_l123_recovers_last_checkpoint_after_power_loss` uses it).
fn flush_redis() {
    let url = RedisServer::shared().expect("redis-server").url();
    let mut c = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    redis::cmd("FLUSHALL").query::<()>(&mut c).expect("FLUSHALL");
}

type State = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

/// One run between two power losses.
#[derive(Clone, Debug)]
struct Cycle {
    ops: Vec<Op>,
    /// Mutating file-system calls before the power is cut (`None`: after the last op).
    cut: Option<u64>,
    mode: CrashMode,
    seed: u64,
}

/// Everything the store holds, read through scans and gets.
fn contents(store: &mut Box<dyn StateStore>, want: &State) -> Result<State, String> {
    let mut got = State::new();
    for (i, name) in NAMESPACES.iter().enumerate() {
        let n = store.namespace(name).map_err(|e| e.to_string())?;
        store
            .scan_prefix(n, b"", &mut |k, v| {
                got.insert((i, k.to_vec()), v.to_vec());
                true
            })
            .map_err(|e| format!("scan {name}: {e}"))?;
    }
    for (i, k) in want.keys() {
        let n = store.namespace(NAMESPACES[*i]).map_err(|e| e.to_string())?;
        let v = store.get(n, k).map_err(|e| format!("get {k:?}: {e}"))?;
        if v.as_ref() != want.get(&(*i, k.clone())) {
            return Err(format!("get ns {i} key {k:?}: {v:?}"));
        }
    }
    Ok(got)
}

/// Runs the cycles; `Err` describes the first recovery that differs from the model.
fn power_loss(kind: Kind, cycles: &[Cycle], suppress_sync: bool) -> Result<(), String> {
    let base = tempfile::tempdir().expect("tempdir");
    let dir = base.path().join("store");
    let fs = CrashFs::new(base.path()).expect("crash fs");
    fs.suppress_sync(suppress_sync);
    let mut durable = State::new();
    let mut seq = 0u64;
    for (c, cycle) in cycles.iter().enumerate() {
        let mut store = open_with_fs(kind, &dir, Some(Arc::new(fs.clone())))
            .map_err(|e| format!("cycle {c}: open: {e}"))?;
        let mut model = common::Model { live: durable.clone(), durable: durable.clone() };
        fs.cut_after(cycle.cut);
        let mut interrupted_checkpoint = false;
        for op in &cycle.ops {
            match common::write(&mut store, op) {
                Ok(()) if matches!(op, Op::Checkpoint) => {
                    durable = model.live.clone();
                    seq = store.checkpoint_seq();
                }
                Ok(()) => common::apply_to_model(&mut model, op),
                Err(e) => {
                    assert!(fs.is_cut(), "{kind:?} cycle {c}: {op:?} failed without a cut: {e}");
                    interrupted_checkpoint = matches!(op, Op::Checkpoint);
                    break;
                }
            }
        }
        drop(store);
        fs.crash(cycle.mode, cycle.seed).expect("crash");
        if kind.tiered().is_some_and(|t| t.l2 != L2Config::None) {
            // Redis runs on the machine that lost power: it comes back empty.
            flush_redis();
        }

        let mut store = open_with_fs(kind, &dir, Some(Arc::new(fs.clone())))
            .map_err(|e| format!("cycle {c} ({:?}): reopen after the crash: {e}", cycle.mode))?;
        let got_seq = store.checkpoint_seq();
        let want = if got_seq == seq {
            durable.clone()
        } else if interrupted_checkpoint && got_seq == seq + 1 {
            model.live
        } else {
            return Err(format!(
                "cycle {c} ({:?}): recovered checkpoint {got_seq}, last completed {seq}",
                cycle.mode
            ));
        };
        let got = contents(&mut store, &want).map_err(|e| format!("cycle {c}: {e}"))?;
        if got != want {
            let missing = want.keys().filter(|k| !got.contains_key(*k)).count();
            let extra = got.keys().filter(|k| !want.contains_key(*k)).count();
            let wrong = want.iter().filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v)).count();
            return Err(format!(
                "cycle {c} ({:?}): checkpoint {got_seq} recovered with {missing} keys missing, \
                 {extra} extra, {wrong} wrong",
                cycle.mode
            ));
        }
        durable = want;
        seq = got_seq;
    }
    Ok(())
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    (0u32..300).prop_map(|k| format!("k{k:03}").into_bytes())
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..64),
        2 => (64usize..8192, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

fn write_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (key(), value()).prop_map(|(k, v)| Op::Put(KV, k, v)),
        2 => (key(), value()).prop_map(|(k, v)| Op::Put(ORD, k, v)),
        4 => (key(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(k, v)| Op::Merge(LIST, k, v)),
        2 => (key(), any::<u64>()).prop_map(|(k, n)| Op::Merge(KV, k, n.to_le_bytes().to_vec())),
        2 => key().prop_map(|k| Op::Delete(KV, k)),
        1 => key().prop_map(|k| Op::Delete(LIST, k)),
        3 => (key(), 1u64..9).prop_map(|(k, n)| Op::Rmw(KV, k, n)),
        2 => Just(Op::Checkpoint),
    ]
}

fn mode() -> impl Strategy<Value = CrashMode> {
    prop_oneof![
        Just(CrashMode::DropUnsynced),
        prop_oneof![Just(512usize), Just(4096)].prop_map(|sector| CrashMode::Scramble { sector }),
        prop_oneof![Just(512usize), Just(4096)].prop_map(|sector| CrashMode::TornPrefix { sector }),
    ]
}

fn cycle() -> impl Strategy<Value = Cycle> {
    (
        proptest::collection::vec(write_op(), 1..300),
        prop_oneof![1 => Just(None), 2 => (0u64..400).prop_map(Some)],
        mode(),
        any::<u64>(),
    )
        .prop_map(|(ops, cut, mode, seed)| Cycle { ops, cut, mode, seed })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 16,
        max_shrink_iters: 300,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    }
}

fn check(kind: Kind, cycles: &[Cycle]) -> Result<(), TestCaseError> {
    power_loss(kind, cycles, false).map_err(|e| TestCaseError::fail(format!("{kind:?}: {e}")))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mem_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::Mem, &cycles)?;
    }

    #[test]
    fn hashlog_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::HashLogTiny, &cycles)?;
    }

    /// Cuts land inside fuzzy index snapshots (written step by step across operations
    /// and checkpoints, finished by a later checkpoint's fsync and rename).
    #[test]
    fn hashlog_fuzzy_snapshots_recover_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::HashLogFuzzy, &cycles)?;
    }

    /// A tiny L1 over hashlog: the checkpoint writes L1's dirty entries down, then L3's.
    #[test]
    fn tiered_l13_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::TieredL13, &cycles)?;
    }

    /// L1 over Redis over hashlog; Redis loses everything with the power.
    #[test]
    fn tiered_l123_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::TieredL123, &cycles)?;
    }

    #[test]
    fn appendlog_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::AppendLogTiny, &cycles)?;
    }

    #[test]
    fn timelog_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::TimeLogTiny, &cycles)?;
    }

    #[test]
    fn adaptive_recovers_last_checkpoint_after_power_loss(cycles in proptest::collection::vec(cycle(), 1..3)) {
        check(Kind::AdaptiveTiny, &cycles)?;
    }
}

/// A fixed sequence: `ops` writes with a checkpoint every 97 of them.
fn fixed_cycle(seed: u64, ops: usize, mode: CrashMode) -> Cycle {
    let mut rng = SmallRng::seed_from_u64(seed);
    let ops = (0..ops)
        .map(|n| {
            let k = format!("k{:03}", rng.random_range(0..300)).into_bytes();
            match (n % 97 == 96, rng.random_range(0..6)) {
                (true, _) => Op::Checkpoint,
                (_, 0..=2) => Op::Put(KV, k, vec![rng.random(); rng.random_range(0..3000)]),
                (_, 3) => Op::Merge(LIST, k, vec![rng.random(); rng.random_range(0..30)]),
                (_, 4) => Op::Delete(KV, k),
                _ => Op::Rmw(KV, k, rng.random_range(1..9)),
            }
        })
        .collect();
    Cycle { ops, cut: None, mode, seed }
}

/// The oracle is not vacuous: a store whose fsyncs do nothing (suppressed at the
/// seam) loses checkpointed data in a power loss, and the check above says so; with
/// the fsyncs in place the same sequences recover exactly.
#[test]
fn oracle_detects_a_store_without_fsyncs() {
    for kind in [
        Kind::Mem,
        Kind::HashLogTiny,
        Kind::TimeLogTiny,
        Kind::AppendLogTiny,
        Kind::AdaptiveTiny,
        Kind::TieredL13,
    ] {
        let mut detected = 0;
        for seed in 0..4u64 {
            let mode = match seed % 3 {
                0 => CrashMode::DropUnsynced,
                1 => CrashMode::Scramble { sector: 4096 },
                _ => CrashMode::TornPrefix { sector: 512 },
            };
            let cycles = [fixed_cycle(seed, 400, mode)];
            power_loss(kind, &cycles, false)
                .unwrap_or_else(|e| panic!("{kind:?} seed {seed} with fsyncs: {e}"));
            if let Err(e) = power_loss(kind, &cycles, true) {
                eprintln!("{kind:?} seed {seed} without fsyncs: {e}");
                detected += 1;
            }
        }
        assert!(detected > 0, "{kind:?}: suppressing every fsync went unnoticed");
    }
}

/// A directory made through the seam is an entry of its parent: unless the parent was
/// fsynced, a power loss takes it away with its files, fsynced or not. The stores create
/// their directories with `create_dir_durable`, which fsyncs each new one's parent.
#[test]
fn a_new_directory_survives_only_if_its_parent_was_fsynced() {
    for durable in [false, true] {
        let base = tempfile::tempdir().expect("tempdir");
        let fs = CrashFs::new(base.path()).expect("crash fs");
        let dir = base.path().join("a").join("b");
        if durable {
            create_dir_durable(&fs, &dir).expect("mkdir");
        } else {
            fs.create_dir_all(&dir).expect("mkdir");
        }
        let f = fs.open(&dir.join("x"), true).expect("create");
        f.write_at(b"data", 0).expect("write");
        f.sync_data().expect("fsync");
        fs.sync_dir(&dir).expect("fsync dir");
        drop(f);
        fs.crash(CrashMode::DropUnsynced, 1).expect("crash");
        assert_eq!(dir.join("x").exists(), durable, "durable parents: {durable}");
        assert_eq!(base.path().join("a").exists(), durable);
    }
}

/// A file written beside the seam (with std::fs, as a job writes its `store.json` next to
/// a store) is not the seam's to undo: a crash leaves it as it is, while a file created
/// through the seam and never made durable is gone.
#[test]
fn a_file_written_beside_the_seam_survives_a_crash() {
    let base = tempfile::tempdir().expect("tempdir");
    let fs = CrashFs::new(base.path()).expect("crash fs");
    let f = fs.open(&base.path().join("seam"), true).expect("create");
    f.write_at(b"unsynced", 0).expect("write");
    drop(f);
    std::fs::write(base.path().join("beside"), b"kept").expect("write");
    fs.crash(CrashMode::DropUnsynced, 1).expect("crash");
    assert_eq!(std::fs::read(base.path().join("beside")).expect("read"), b"kept");
    assert!(!base.path().join("seam").exists(), "an unsynced creation survived");
}

/// `StoreOptions::fs` sends a store opened by kind (as the engine opens it) through the
/// seam: its calls are counted, and after a crash it recovers its checkpoint without the
/// write made after it.
#[test]
fn store_options_fs_routes_a_store_through_the_seam() {
    for kind in [
        StoreKind::Mem,
        StoreKind::HashLog,
        StoreKind::AppendLog,
        StoreKind::TimeLog,
        StoreKind::Adaptive,
    ] {
        let base = tempfile::tempdir().expect("tempdir");
        let fs = CrashFs::new(base.path()).expect("crash fs");
        let dir = base.path().join("store");
        let opts =
            || StoreOptions::new(&dir).memory_budget(16 << 20).namespace(NamespaceSpec::list("kv"));
        let mut store = kind.open(opts().fs(Arc::new(fs.clone()))).expect("open");
        let ns = store.namespace("kv").expect("ns");
        store.put(ns, b"k", b"v").expect("put");
        store.checkpoint().expect("checkpoint");
        drop(store);
        let calls = fs.calls();
        assert!(calls > 3, "{kind:?}: {calls} calls through the seam");
        let mut store = kind.open(opts().fs(Arc::new(fs.clone()))).expect("reopen");
        let ns = store.namespace("kv").expect("ns");
        store.put(ns, b"k2", b"v2").expect("put");
        drop(store);
        fs.crash(CrashMode::DropUnsynced, 1).expect("crash");
        let mut store = kind.open(opts()).expect("open after the crash");
        let ns = store.namespace("kv").expect("ns");
        assert_eq!(store.get(ns, b"k").expect("get").as_deref(), Some(&b"v"[..]), "{kind:?}");
        assert_eq!(store.get(ns, b"k2").expect("get"), None, "{kind:?}");
    }
}

/// Files that existed before the seam was made are durable; a directory without any
/// store is a fresh store after a crash.
#[test]
fn crash_of_an_untouched_directory_keeps_it() {
    let base = tempfile::tempdir().expect("tempdir");
    std::fs::write(base.path().join("keep"), b"durable").expect("write");
    let fs = CrashFs::new(base.path()).expect("crash fs");
    fs.crash(CrashMode::DropUnsynced, 1).expect("crash");
    assert_eq!(std::fs::read(base.path().join("keep")).expect("read"), b"durable");
}

/// The power cut at every mutating call of a checkpoint in turn (the page flushes,
/// fsyncs, snapshot writes, renames and directory fsyncs, and the cleanup after the
/// commit), with each crash mode: recovery gives the previous checkpoint or, once the
/// new manifest is durable, the new one; never anything else.
#[test]
fn every_cut_point_of_a_checkpoint() {
    for kind in [
        Kind::Mem,
        Kind::HashLogTiny,
        Kind::HashLogFuzzy,
        Kind::TimeLogTiny,
        Kind::AppendLogTiny,
        Kind::AdaptiveTiny,
        Kind::TieredL13,
    ] {
        let mut ops = fixed_cycle(7, 250, CrashMode::DropUnsynced).ops;
        ops.push(Op::Checkpoint);
        // Count the calls before and during the last checkpoint.
        let base = tempfile::tempdir().expect("tempdir");
        let fs = CrashFs::new(base.path()).expect("crash fs");
        let mut store = open_with_fs(kind, &base.path().join("store"), Some(Arc::new(fs.clone())))
            .expect("open");
        // `cut_after` counts from after the open, as `power_loss` arms it.
        let opened = fs.calls();
        let (last, before) = ops.split_last().expect("ops");
        for op in before {
            common::write(&mut store, op).expect("write");
        }
        let start = fs.calls() - opened;
        common::write(&mut store, last).expect("checkpoint");
        let end = fs.calls() - opened;
        drop(store);
        assert!(end > start + 3, "{kind:?}: a checkpoint of {} calls", end - start);
        let step = ((end - start) / 40).max(1);
        for (i, cut) in (start..=end).step_by(step as usize).enumerate() {
            let mode = match i % 3 {
                0 => CrashMode::DropUnsynced,
                1 => CrashMode::Scramble { sector: 512 },
                _ => CrashMode::TornPrefix { sector: 4096 },
            };
            let cycle = Cycle { ops: ops.clone(), cut: Some(cut), mode, seed: cut };
            power_loss(kind, &[cycle], false)
                .unwrap_or_else(|e| panic!("{kind:?}: cut at call {cut} ({start}..{end}): {e}"));
        }
    }
}
