//! The conformance suite every store passes: model-based property tests against a
//! BTreeMap (put/get/multi_get/merge/delete/rmw/scans/checkpoint/reopen, values from 0
//! bytes to 1 MiB) and a long differential run with hashlog state many times larger
//! than its memory budget.

mod common;

use std::ops::Bound;

use common::{check_all, open, step, Kind, Model, Op, KV, LIST, ORD};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        20 => (0u8..3, proptest::collection::vec(0u8..4, 0..3)).prop_map(|(p, rest)| {
            let mut k = vec![b'a' + p];
            k.extend(rest);
            k
        }),
    ]
}

fn value(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        12 => proptest::collection::vec(any::<u8>(), 0..64),
        6 => (64usize..4096, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        1 => (4096usize..=max, any::<u8>()).prop_map(|(n, b)| {
            (0..n).map(|i| b.wrapping_add(i as u8)).collect()
        }),
    ]
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![
        Just(Bound::Unbounded),
        key().prop_map(Bound::Included),
        key().prop_map(Bound::Excluded),
    ]
}

fn ns() -> impl Strategy<Value = usize> {
    prop_oneof![Just(KV), Just(LIST), Just(ORD)]
}

/// A namespace for list merges: the plain one or the ordered one.
fn list_ns() -> impl Strategy<Value = usize> {
    prop_oneof![Just(LIST), Just(ORD)]
}

fn op(max: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (ns(), key(), value(max)).prop_map(|(i, k, v)| Op::Put(i, k, v)),
        10 => (ns(), key()).prop_map(|(i, k)| Op::Get(i, k)),
        2 => (ns(), proptest::collection::vec(key(), 0..5)).prop_map(|(i, ks)| Op::MultiGet(i, ks)),
        4 => (key(), any::<u64>()).prop_map(|(k, n)| Op::Merge(KV, k, n.to_le_bytes().to_vec())),
        6 => (list_ns(), key(), value(max / 4)).prop_map(|(i, k, v)| Op::Merge(i, k, v)),
        4 => (ns(), key()).prop_map(|(i, k)| Op::Delete(i, k)),
        5 => (ns(), key(), 0u64..10).prop_map(|(i, k, n)| Op::Rmw(i, k, n)),
        2 => (ns(), proptest::collection::vec(0u8..4, 0..2)).prop_map(|(i, mut p)| {
            if let Some(first) = p.first_mut() {
                *first = b'a' + *first % 3;
            }
            Op::ScanPrefix(i, p)
        }),
        2 => (ns(), bound(), bound()).prop_map(|(i, lo, hi)| Op::ScanRange(i, lo, hi)),
        3 => (ns(), bound(), bound(), any::<bool>(), prop_oneof![Just(usize::MAX), 0usize..4])
            .prop_map(|(i, lo, hi, rev, limit)| Op::ScanOrdered(i, lo, hi, rev, limit)),
        2 => (ns(), key(), key()).prop_map(|(i, a, b)| Op::DeleteRange(i, a, b)),
        3 => (ns(), proptest::collection::vec(0u8..4, 0..2), key(), any::<bool>(), 1usize..4)
            .prop_map(|(i, mut p, lower, rev, batch)| {
                if let Some(first) = p.first_mut() {
                    *first = b'a' + *first % 3;
                }
                Op::CursorWalk(i, p, lower, rev, batch)
            }),
        2 => Just(Op::Checkpoint),
        1 => Just(Op::Reopen),
    ]
}

fn run(kind: Kind, ops: &[Op]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(kind, &path).expect("open");
    let mut model = Model::default();
    for op in ops {
        let mut reopen = || open(kind, &path).unwrap_or_else(|e| panic!("{kind:?} reopen: {e}"));
        step(kind, &mut store, &mut model, op, &mut reopen);
    }
    check_all(kind, &mut store, &model.live);
    drop(store);
    let mut store = open(kind, &path).expect("final reopen");
    check_all(kind, &mut store, &model.durable);
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 128,
        max_shrink_iters: 2000,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mem_matches_model(ops in proptest::collection::vec(op(Kind::Mem.max_value()), 1..250)) {
        run(Kind::Mem, &ops);
    }

    #[test]
    fn hashlog_tiny_pages_match_model(ops in proptest::collection::vec(op(Kind::HashLogTiny.max_value()), 1..250)) {
        run(Kind::HashLogTiny, &ops);
    }

    #[test]
    fn hashlog_large_values_match_model(ops in proptest::collection::vec(op(Kind::HashLogBig.max_value()), 1..250)) {
        run(Kind::HashLogBig, &ops);
    }

    #[test]
    fn appendlog_tiny_pages_match_model(ops in proptest::collection::vec(op(Kind::AppendLogTiny.max_value()), 1..250)) {
        run(Kind::AppendLogTiny, &ops);
    }

    #[test]
    fn appendlog_large_values_match_model(ops in proptest::collection::vec(op(Kind::AppendLog.max_value()), 1..250)) {
        run(Kind::AppendLog, &ops);
    }
}

#[cfg(feature = "rocksdb")]
proptest! {
    #![proptest_config(config())]

    #[test]
    fn rocks_matches_model(ops in proptest::collection::vec(op(Kind::Rocks.max_value()), 1..250)) {
        run(Kind::Rocks, &ops);
    }
}

/// A long seeded run whose state is many times the memory budget: 30k keys of 16 to
/// 400 bytes in hashlog under 1 MiB with 64 KiB pages, checked against the model
/// throughout, across checkpoints and reopens; compaction must reclaim space.
fn long_run(kind: Kind, ops: usize, keys: u64, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(kind, &path).expect("open");
    let mut model = Model::default();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut max_state = 0usize;
    let mut state_bytes = 0usize;
    for n in 0..ops {
        let k = format!("key-{:08}", rng.random_range(0..keys)).into_bytes();
        let op = match rng.random_range(0..100) {
            0..=39 => {
                let len = rng.random_range(16..400);
                Op::Put(KV, k, vec![(n % 251) as u8; len])
            }
            40..=59 => Op::Get(KV, k),
            60..=69 => Op::Rmw(KV, k, rng.random_range(1..5)),
            70..=79 => Op::Delete(KV, k),
            80..=93 => Op::Merge(LIST, k, vec![(n % 13) as u8; rng.random_range(0..40)]),
            94..=98 => Op::Get(LIST, k),
            _ => Op::Delete(LIST, k),
        };
        let mut reopen = || open(kind, &path).expect("reopen");
        step(kind, &mut store, &mut model, &op, &mut reopen);
        if n % 10_000 == 9_999 {
            step(kind, &mut store, &mut model, &Op::Checkpoint, &mut reopen);
        }
        if n % 40_000 == 19_999 {
            step(kind, &mut store, &mut model, &Op::Reopen, &mut reopen);
        }
        if n % 1000 == 0 {
            state_bytes = model.live.iter().map(|((_, k), v)| k.len() + v.len()).sum();
            max_state = max_state.max(state_bytes);
            let s = store.stats();
            assert!(
                s.bytes_in_memory <= s.memory_budget,
                "{kind:?} resident {} > budget {}",
                s.bytes_in_memory,
                s.memory_budget
            );
        }
    }
    check_all(kind, &mut store, &model.live);
    let s = store.stats();
    let budget = kind.budget() as usize;
    assert!(max_state > 3 * budget, "state {max_state} must be several times the budget {budget}");
    assert!(s.compactions > 0, "{kind:?} never compacted: {s:?}");
    assert!(s.disk_reads > 0, "{kind:?} never read from disk: {s:?}");
    // Garbage is reclaimed: the log stays within a small multiple of the live state.
    let disk = s.bytes_on_disk as usize;
    assert!(
        disk < 8 * state_bytes + (4 << 20),
        "{kind:?} disk {disk} for {state_bytes} live bytes"
    );
}

#[test]
fn hashlog_long_run_state_many_times_budget() {
    long_run(Kind::HashLogTiny, 200_000, 20_000, 7);
}

#[cfg(feature = "rocksdb")]
#[test]
fn rocks_long_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(Kind::Rocks, &path).expect("open");
    let mut model = Model::default();
    let mut rng = SmallRng::seed_from_u64(3);
    for n in 0..30_000usize {
        let k = format!("key-{:06}", rng.random_range(0..5000)).into_bytes();
        let op = match rng.random_range(0..4) {
            0 => Op::Put(KV, k, vec![n as u8; rng.random_range(0..200)]),
            1 => Op::Get(KV, k),
            2 => Op::Merge(LIST, k, vec![1; 8]),
            _ => Op::Delete(KV, k),
        };
        let mut reopen = || open(Kind::Rocks, &path).expect("reopen");
        step(Kind::Rocks, &mut store, &mut model, &op, &mut reopen);
    }
    check_all(Kind::Rocks, &mut store, &model.live);
}

/// Every store rejects what it cannot do with a typed error, never a silent no-op.
#[test]
fn limits_and_typed_errors() {
    for kind in Kind::all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = open(kind, dir.path()).expect("open");
        let n = store.namespace("kv").expect("ns");
        let big_key = vec![0u8; spillway_store::MAX_KEY_LEN + 1];
        assert!(
            matches!(store.put(n, &big_key, b"v"), Err(spillway_store::Error::KeyTooLarge { .. })),
            "{kind:?}"
        );
        assert!(
            matches!(store.namespace("nope"), Err(spillway_store::Error::UnknownNamespace { .. })),
            "{kind:?}"
        );
        if matches!(kind, Kind::HashLogTiny | Kind::AppendLogTiny) {
            let r = store.put(n, b"k", &vec![0u8; 70 << 10]);
            assert!(
                matches!(r, Err(spillway_store::Error::ValueTooLarge { .. })),
                "{kind:?}: {r:?}"
            );
            // The store is not poisoned by a rejected argument.
            store.put(n, b"k", b"ok").expect("put after rejected value");
        }
    }
}

/// Without any checkpoint, compaction alone keeps the log's disk footprint bounded:
/// segment files below the log's beginning are deleted after each pass.
#[test]
fn hashlog_disk_stays_bounded_without_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(Kind::HashLogTiny, dir.path()).expect("open");
    let n = store.namespace("kv").expect("ns");
    let mut model = std::collections::BTreeMap::new();
    let mut written = 0usize;
    for i in 0..100_000u64 {
        let k = format!("key-{:05}", i % 2000).into_bytes();
        let v = vec![i as u8; 100 + (i.wrapping_mul(7919) % 500) as usize];
        written += v.len();
        store.put(n, &k, &v).expect("put");
        model.insert((KV, k), v);
    }
    let s = store.stats();
    assert!(s.compactions > 0, "{s:?}");
    assert!(s.bytes_on_disk < 8 << 20, "{} bytes on disk after writing {written}", s.bytes_on_disk);
    check_all(Kind::HashLogTiny, &mut store, &model);
}
