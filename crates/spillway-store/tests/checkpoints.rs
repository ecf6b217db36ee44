//! Hashlog's incremental checkpoints: fold-over checkpoints that name a
//! fuzzy index snapshot written in bounded steps, tombstones, and recovery that
//! replays the log from the snapshot's start.
//!
//! - A model test: random writes over few keys (deletes and re-inserts of the same
//!   keys), bursts of new keys (index doublings), compaction forced by a small garbage
//!   ratio, checkpoints and reopens at random points, with snapshots copied one bucket
//!   per operation so that each spans many operations and checkpoints; after every
//!   reopen the store must equal the model as of the last checkpoint.
//! - The bytes a checkpoint writes grow with the updates since the previous one, not
//!   with the state (measured through `StoreStats::bytes_written`, never time).
//! - Recovery while a snapshot is under way, and across deletes that happened while
//!   it ran.

mod common;

use std::path::Path;

use common::{check_all, options, step, Kind, Model, Op, KV, LIST};
use proptest::prelude::*;
use spillway_store::{
    HashLogOptions, HashLogStore, NamespaceSpec, StateStore, StateStoreExt, StoreOptions,
    StoreStats,
};

/// Kind whose checks `check_all` applies (an unordered hashlog under 1 MiB).
const KIND: Kind = Kind::HashLogTiny;

/// 64 KiB pages, small segments, compaction at 20% garbage in 4 KiB steps, an index
/// starting at 256 buckets, and fuzzy snapshots copied one bucket per operation once
/// the log to replay exceeds half the index.
fn fuzzy_options() -> HashLogOptions {
    HashLogOptions::default()
        .page_size(64 << 10)
        .segment_size(256 << 10)
        .garbage_ratio(0.2)
        .compaction_step(4 << 10)
        .expected_keys(16)
        .index_snapshot_ratio(0.5)
        .index_snapshot_step(1)
        .inline_snapshot_bytes(0)
}

fn open_fuzzy(dir: &Path) -> HashLogStore {
    HashLogStore::open(options(dir, 768 << 10), fuzzy_options()).expect("open hashlog")
}

#[derive(Clone, Debug)]
enum TestOp {
    Write(Op),
    /// Puts `n` new keys `fill-<base>-<i>` (index doublings).
    Fill(u16, u16),
    Checkpoint,
    Reopen,
}

fn small_key() -> impl Strategy<Value = Vec<u8>> {
    (0u8..24).prop_map(|k| format!("key{k}").into_bytes())
}

fn test_op() -> impl Strategy<Value = TestOp> {
    prop_oneof![
        12 => (small_key(), 0usize..300).prop_map(|(k, n)| {
            TestOp::Write(Op::Put(KV, k, vec![n as u8; n]))
        }),
        8 => small_key().prop_map(|k| TestOp::Write(Op::Delete(KV, k))),
        4 => (small_key(), 1u64..5).prop_map(|(k, n)| TestOp::Write(Op::Rmw(KV, k, n))),
        4 => (small_key(), 0usize..40).prop_map(|(k, n)| {
            TestOp::Write(Op::Merge(LIST, k, vec![n as u8; n]))
        }),
        2 => small_key().prop_map(|k| TestOp::Write(Op::Delete(LIST, k))),
        4 => small_key().prop_map(|k| TestOp::Write(Op::Get(KV, k))),
        1 => (any::<u16>(), 50u16..400).prop_map(|(b, n)| TestOp::Fill(b, n)),
        4 => Just(TestOp::Checkpoint),
        2 => Just(TestOp::Reopen),
    ]
}

fn run_fuzzy(ops: &[TestOp]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store: Box<dyn StateStore> = Box::new(open_fuzzy(&path));
    let mut model = Model::default();
    let mut reopen = || -> Box<dyn StateStore> { Box::new(open_fuzzy(&path)) };
    for op in ops {
        match op {
            TestOp::Write(w) => step(KIND, &mut store, &mut model, w, &mut reopen),
            TestOp::Fill(base, n) => {
                for i in 0..*n {
                    let k = format!("fill-{base}-{i}").into_bytes();
                    let put = Op::Put(KV, k, vec![(i % 251) as u8; 1 + usize::from(i % 32)]);
                    step(KIND, &mut store, &mut model, &put, &mut reopen);
                }
            }
            TestOp::Checkpoint => step(KIND, &mut store, &mut model, &Op::Checkpoint, &mut reopen),
            TestOp::Reopen => {
                step(KIND, &mut store, &mut model, &Op::Reopen, &mut reopen);
                check_all(KIND, &mut store, &model.live);
            }
        }
    }
    check_all(KIND, &mut store, &model.live);
    drop(store);
    let mut store = reopen();
    check_all(KIND, &mut store, &model.durable);
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 2000,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn fuzzy_snapshots_and_log_replay_match_model(
        ops in proptest::collection::vec(test_op(), 1..300)
    ) {
        run_fuzzy(&ops);
    }
}

/// A seeded long run of the model test: many snapshots, doublings and compaction
/// passes, and reopens that land while a snapshot is under way (its `.tmp` file
/// exists).
#[test]
fn fuzzy_long_run_reopens_mid_snapshot() {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store: Box<dyn StateStore> = Box::new(open_fuzzy(&path));
    let mut reopen = || -> Box<dyn StateStore> { Box::new(open_fuzzy(&path)) };
    let mut model = Model::default();
    let mut rng = SmallRng::seed_from_u64(13);
    let (mut during, mut reopens_mid_snapshot, mut max_keys) = (0usize, 0usize, 0u64);
    for n in 0..8000u32 {
        let op = match rng.random_range(0..100) {
            0..=39 => Op::Put(
                KV,
                format!("k{}", rng.random_range(0..3000)).into_bytes(),
                vec![n as u8; rng.random_range(0..200)],
            ),
            40..=64 => Op::Delete(KV, format!("k{}", rng.random_range(0..3000)).into_bytes()),
            65..=74 => Op::Merge(
                LIST,
                format!("l{}", rng.random_range(0..200)).into_bytes(),
                vec![n as u8; 8],
            ),
            75..=96 => Op::Put(KV, format!("new{n}").into_bytes(), n.to_le_bytes().to_vec()),
            97 | 98 => Op::Checkpoint,
            _ => Op::Reopen,
        };
        let mid = snap_files(&path).iter().any(|f| f.ends_with(".tmp"));
        during += usize::from(mid);
        if matches!(op, Op::Reopen) {
            reopens_mid_snapshot += usize::from(mid);
        }
        step(KIND, &mut store, &mut model, &op, &mut reopen);
        if matches!(op, Op::Reopen) {
            check_all(KIND, &mut store, &model.live);
        }
        max_keys = max_keys.max(store.stats().live_keys.unwrap_or(0));
    }
    check_all(KIND, &mut store, &model.live);
    let s = store.stats();
    assert!(during > 1000, "a snapshot was under way during only {during} operations");
    assert!(reopens_mid_snapshot > 0, "no reopen landed while a snapshot was under way");
    assert!(max_keys > 1100, "{max_keys} keys never doubled the 256-bucket index");
    assert!(s.index_bytes > 256 * 64, "the index never doubled: {s:?}");
    drop(store);
    let mut store = reopen();
    check_all(KIND, &mut store, &model.durable);
}

fn kv_store(dir: &Path, h: HashLogOptions) -> HashLogStore {
    let opts = StoreOptions::new(dir)
        .memory_budget(64 << 20)
        .namespace(NamespaceSpec::with_merge("kv", spillway_store::merges::add_u64()));
    HashLogStore::open(opts, h).expect("open")
}

fn written(s: &StoreStats) -> u64 {
    s.bytes_written
}

/// Bytes the checkpoint after `updates` random updates of 100k loaded keys writes.
fn checkpoint_bytes_after(h: HashLogOptions, updates: &[u64]) -> Vec<u64> {
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = kv_store(dir.path(), h);
    let ns = store.namespace("kv").expect("ns");
    for i in 0..100_000u64 {
        store.put(ns, &i.to_le_bytes(), &i.to_le_bytes()).expect("put");
    }
    store.checkpoint().expect("checkpoint");
    store.complete_index_snapshot().expect("complete snapshot");
    store.checkpoint().expect("checkpoint");
    assert!(!store.index_snapshot_running());
    let mut rng = SmallRng::seed_from_u64(5);
    let mut out = Vec::new();
    for &k in updates {
        for _ in 0..k {
            let key = rng.random_range(0..100_000u64);
            store.put(ns, &key.to_le_bytes(), &rng.random::<u64>().to_le_bytes()).expect("put");
        }
        let before = written(&store.stats());
        store.checkpoint().expect("checkpoint");
        out.push(written(&store.stats()) - before);
    }
    out
}

#[test]
fn checkpoint_bytes_grow_with_updates_not_with_state() {
    let h = HashLogOptions::default().expected_keys(100_000);
    let b = checkpoint_bytes_after(h, &[100, 10_000]);
    let (small, large) = (b[0], b[1]);
    eprintln!("checkpoint bytes: {small} after 100 updates, {large} after 10,000");
    // A 40-byte record per update, written in 4 KiB units: 100 updates need one
    // unit, 10,000 about a hundred.
    assert!(small <= 16 << 10, "100 updates cost {small} bytes");
    assert!(large >= 20 * small, "10,000 updates cost {large} bytes, 100 cost {small}");
    assert!(large <= 10_000 * 40 * 2 + (16 << 10), "10,000 updates cost {large} bytes");
    // The old behaviour, a whole snapshot in every checkpoint, costs the index.
    let full = checkpoint_bytes_after(h_full(), &[100]);
    assert!(full[0] > 50 * small, "whole-snapshot checkpoint wrote {}", full[0]);
}

fn h_full() -> HashLogOptions {
    HashLogOptions::default().expected_keys(100_000).index_snapshot_ratio(0.0)
}

fn snap_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("index-"))
        .collect();
    v.sort();
    v
}

/// Reopening while a fuzzy snapshot is under way recovers the last checkpoint (from
/// the previous snapshot plus the log) and removes the unfinished file; a snapshot
/// that completes later is published and used, and files retained checkpoints name
/// stay.
#[test]
fn recovery_across_a_snapshot_in_progress() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path();
    let mut model = std::collections::BTreeMap::new();
    let mut store = open_fuzzy(path);
    let kv = store.namespace("kv").expect("ns");
    for i in 0..2000u32 {
        let (k, v) = (format!("a{i}").into_bytes(), vec![i as u8; 20]);
        store.put(kv, &k, &v).expect("put");
        model.insert(k, v);
    }
    store.checkpoint().expect("checkpoint 1");
    assert!(store.index_snapshot_running(), "a snapshot starts at the first checkpoint");
    for i in 0..300u32 {
        let k = format!("a{}", i * 7 % 2000).into_bytes();
        if i % 3 == 0 {
            store.delete(kv, &k).expect("delete");
            model.remove(&k);
        } else {
            let v = vec![i as u8; 30];
            store.put(kv, &k, &v).expect("put");
            model.insert(k, v);
        }
    }
    store.checkpoint().expect("checkpoint 2");
    assert!(store.index_snapshot_running(), "one bucket per op: still under way");
    assert!(snap_files(path).iter().any(|n| n.ends_with(".tmp")));
    // Unsaved writes, then a "crash" mid-snapshot.
    store.put(kv, b"lost", b"x").expect("put");
    drop(store);
    let mut store = open_fuzzy(path);
    assert!(!snap_files(path).iter().any(|n| n.ends_with(".tmp")), "{:?}", snap_files(path));
    assert_eq!(store.checkpoint_seq(), 2);
    let check = |store: &mut HashLogStore, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>| {
        let kv = store.namespace("kv").expect("ns");
        for (k, v) in model {
            assert_eq!(store.get(kv, k).expect("get").as_ref(), Some(v), "{k:?}");
        }
        let mut n = 0;
        store
            .scan_prefix(kv, b"", &mut |_, _| {
                n += 1;
                true
            })
            .expect("scan");
        assert_eq!(n, model.len());
        assert_eq!(store.stats().live_keys, Some(model.len() as u64));
    };
    check(&mut store, &model);
    assert_eq!(store.get(kv, b"lost").expect("get"), None);

    // Let a snapshot complete while keys are deleted and re-inserted, publish it, and
    // recover through it.
    store.checkpoint().expect("checkpoint 3");
    let published = |path: &Path| -> Vec<String> {
        snap_files(path).into_iter().filter(|n| !n.ends_with(".tmp")).collect()
    };
    let before = published(path);
    let mut ops = 0;
    while published(path) == before {
        let k = format!("a{}", ops % 2000).into_bytes();
        if ops % 2 == 0 {
            store.delete(kv, &k).expect("delete");
            model.remove(&k);
        } else {
            let v = vec![ops as u8; 10];
            store.put(kv, &k, &v).expect("put");
            model.insert(k, v);
        }
        ops += 1;
        if ops % 500 == 0 {
            store.checkpoint().expect("checkpoint");
        }
        assert!(ops < 100_000, "the snapshot was never published");
    }
    // Two more checkpoints without a new snapshot keep the file both retained
    // manifests name.
    store.put(kv, b"z", b"1").expect("put");
    model.insert(b"z".to_vec(), b"1".to_vec());
    store.checkpoint().expect("checkpoint");
    drop(store);
    let mut store = open_fuzzy(path);
    check(&mut store, &model);
    assert!(store.replay_bytes() > 0, "recovery replayed the log past the snapshot");
}

/// A delete after the snapshot copied the key's bucket is replayed from its tombstone;
/// a delete whose tombstone compaction dropped leaves only an entry below the log's
/// beginning, which recovery removes.
#[test]
fn deletes_survive_recovery_from_an_older_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path();
    let mut store = open_fuzzy(path);
    let kv = store.namespace("kv").expect("ns");
    for i in 0..500u32 {
        store.put(kv, format!("d{i}").as_bytes(), &[1; 16]).expect("put");
    }
    store.checkpoint().expect("checkpoint");
    store.complete_index_snapshot().expect("copy every bucket now");
    // Deleted after the copy: the snapshot still holds their entries.
    for i in 0..250u32 {
        store.delete(kv, format!("d{i}").as_bytes()).expect("delete");
    }
    // Re-inserted keys get new records; some are deleted again.
    for i in 0..50u32 {
        store.put(kv, format!("d{i}").as_bytes(), &[2; 16]).expect("put");
    }
    for i in 0..10u32 {
        store.delete(kv, format!("d{i}").as_bytes()).expect("delete");
    }
    store.checkpoint().expect("checkpoint publishing the snapshot");
    // Churn until compaction has passed the tombstones.
    let before = store.stats().compactions;
    let mut i = 0u32;
    while store.stats().compactions < before + 2 {
        store.put(kv, format!("c{}", i % 50).as_bytes(), &[i as u8; 100]).expect("put");
        store.delete(kv, format!("c{}", (i + 25) % 50).as_bytes()).expect("delete");
        i += 1;
        assert!(i < 1_000_000, "compaction never ran");
    }
    store.checkpoint().expect("checkpoint");
    drop(store);
    let mut store = open_fuzzy(path);
    let kv = store.namespace("kv").expect("ns");
    for i in 0..500u32 {
        let got = store.get(kv, format!("d{i}").as_bytes()).expect("get");
        let want = match i {
            0..=9 => None,
            10..=49 => Some(vec![2; 16]),
            50..=249 => None,
            _ => Some(vec![1; 16]),
        };
        assert_eq!(got, want, "d{i}");
    }
}
