//! The conformance suite every store passes: model-based property tests against a
//! BTreeMap (put/get/multi_get/merge/delete/rmw/scans/checkpoint/reopen, values from 0
//! bytes to 1 MiB) and long differential runs with hashlog and timelog state many times
//! larger than their memory budgets.

mod common;

use std::ops::Bound;

use common::{check_all, open, step, BOp, Kind, Model, Op, KV, LIST, ORD};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spillway_store::StateStoreExt;

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
        2 => (ns(), proptest::collection::vec((key(), 0u64..10), 0..40))
            .prop_map(|(i, items)| Op::MultiRmw(i, items)),
        2 => proptest::collection::vec(
            (
                ns(),
                key(),
                prop_oneof![
                    Just(BOp::Get),
                    proptest::collection::vec(any::<u8>(), 0..64).prop_map(BOp::Put),
                    Just(BOp::Delete),
                    (0u64..10).prop_map(BOp::Rmw),
                ],
            ),
            0..40,
        )
        .prop_map(Op::Batch),
        2 => (ns(), proptest::collection::vec(0u8..4, 0..2)).prop_map(|(i, mut p)| {
            if let Some(first) = p.first_mut() {
                *first = b'a' + *first % 3;
            }
            Op::ScanPrefix(i, p)
        }),
        2 => (ns(), bound(), bound()).prop_map(|(i, lo, hi)| Op::ScanRange(i, lo, hi)),
        3 => (ns(), bound(), bound(), any::<bool>(), prop_oneof![Just(usize::MAX), 0usize..4])
            .prop_map(|(i, lo, hi, rev, limit)| Op::ScanOrdered(i, lo, hi, rev, limit)),
        2 => (ns(), bound(), bound(), prop_oneof![Just(usize::MAX), 0usize..4])
            .prop_map(|(i, lo, hi, limit)| Op::RangeAny(i, lo, hi, limit)),
        2 => (ns(), key(), key()).prop_map(|(i, a, b)| Op::DeleteRange(i, a, b)),
        2 => (ns(), 1usize..5, prop_oneof![Just(None), (1usize..3).prop_map(Some)])
            .prop_map(|(i, step, stop)| Op::Walk(i, step, stop)),
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
    fn timelog_matches_model(ops in proptest::collection::vec(op(Kind::TimeLog.max_value()), 1..250)) {
        run(Kind::TimeLog, &ops);
    }

    #[test]
    fn timelog_tiny_memory_matches_model(ops in proptest::collection::vec(op(Kind::TimeLogTiny.max_value()), 1..250)) {
        run(Kind::TimeLogTiny, &ops);
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
    fn hashlog_direct_io_matches_model(ops in proptest::collection::vec(op(Kind::HashLogDirect.max_value()), 1..250)) {
        run(Kind::HashLogDirect, &ops);
    }

    #[test]
    fn appendlog_direct_io_matches_model(ops in proptest::collection::vec(op(Kind::AppendLogDirect.max_value()), 1..250)) {
        run(Kind::AppendLogDirect, &ops);
    }

    #[test]
    fn appendlog_large_values_match_model(ops in proptest::collection::vec(op(Kind::AppendLog.max_value()), 1..250)) {
        run(Kind::AppendLog, &ops);
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn adaptive_with_forced_migrations_matches_model(ops in proptest::collection::vec(op(Kind::Adaptive.max_value()), 1..250)) {
        run(Kind::Adaptive, &ops);
    }

    #[test]
    fn adaptive_tiny_with_forced_migrations_matches_model(ops in proptest::collection::vec(op(Kind::AdaptiveTiny.max_value()), 1..250)) {
        run(Kind::AdaptiveTiny, &ops);
    }
}

/// The tiered store through every subset of levels that can hold state, with a 2 KiB
/// L1 (a few entries: nearly every operation promotes or demotes something) and the
/// test binary's one Redis.
fn tiered_config() -> ProptestConfig {
    ProptestConfig { cases: 48, ..config() }
}

proptest! {
    #![proptest_config(tiered_config())]

    #[test]
    fn tiered_l1_redis_hashlog_matches_model(ops in proptest::collection::vec(op(Kind::TieredL123.max_value()), 1..250)) {
        run(Kind::TieredL123, &ops);
    }

    #[test]
    fn tiered_l1_hashlog_matches_model(ops in proptest::collection::vec(op(Kind::TieredL13.max_value()), 1..250)) {
        run(Kind::TieredL13, &ops);
    }

    #[test]
    fn tiered_redis_hashlog_matches_model(ops in proptest::collection::vec(op(Kind::TieredL23.max_value()), 1..250)) {
        run(Kind::TieredL23, &ops);
    }

    #[test]
    fn tiered_l1_redis_matches_model(ops in proptest::collection::vec(op(Kind::TieredL12.max_value()), 1..250)) {
        run(Kind::TieredL12, &ops);
    }

    #[test]
    fn tiered_redis_alone_matches_model(ops in proptest::collection::vec(op(Kind::TieredL2.max_value()), 1..250)) {
        run(Kind::TieredL2, &ops);
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

/// The long run with `O_DIRECT` segment files: page writes, record and page reads
/// (compaction, scans) all take the aligned-block path.
#[test]
fn hashlog_direct_io_long_run_state_many_times_budget() {
    long_run(Kind::HashLogDirect, 200_000, 20_000, 7);
}

/// Timelog's long run: event-history keys `"ev" | user u16 BE | time u64 BE` with time
/// advancing (and jittered) so partitions roll over, list appends, deletes, range
/// deletes, and ranges read by cursors and ordered scans both ways (some over the whole
/// namespace, larger than the memory budget), all checked against the model across
/// checkpoints and reopens, with the state many times the 128 KiB budget.
#[test]
fn timelog_long_run_ranges_many_times_budget() {
    let kind = Kind::TimeLogTiny;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(kind, &path).expect("open");
    let mut model = Model::default();
    let mut rng = SmallRng::seed_from_u64(11);
    let users = 40u16;
    let key = |user: u16, t: u64| {
        let mut k = b"ev".to_vec();
        k.extend_from_slice(&user.to_be_bytes());
        k.extend_from_slice(&t.to_be_bytes());
        k
    };
    // About 8192 operations per 2^32-unit partition.
    let now = |n: usize| (n as u64) << 19;
    let mut max_state = 0usize;
    let mut big_scans = 0;
    let ops = 80_000usize;
    for n in 0..ops {
        let user = rng.random_range(0..users);
        let recent = now(n.saturating_sub(rng.random_range(0..3000)));
        let prefix = key(user, 0)[..4].to_vec();
        let op = match rng.random_range(0..1000) {
            0..=479 => {
                let t = now(n) + rng.random_range(0..1 << 21);
                Op::Put(ORD, key(user, t), vec![(n % 251) as u8; rng.random_range(8..64)])
            }
            480..=629 => Op::Get(ORD, key(user, recent & !((1 << 19) - 1))),
            630..=729 => Op::Merge(ORD, key(user, recent), vec![(n % 7) as u8; 12]),
            730..=799 => Op::Delete(ORD, key(user, recent)),
            800..=829 => Op::CursorWalk(
                ORD,
                prefix,
                recent.to_be_bytes().to_vec(),
                rng.random_bool(0.5),
                rng.random_range(1..64),
            ),
            830..=859 => {
                let lo = key(user, recent);
                let hi = key(user, recent + (rng.random_range(1..400u64) << 19));
                Op::ScanOrdered(
                    ORD,
                    Bound::Included(lo),
                    Bound::Excluded(hi),
                    rng.random_bool(0.5),
                    rng.random_range(1..200),
                )
            }
            860..=869 => {
                let lo = key(user, recent);
                let hi = key(user, recent + (rng.random_range(1..200u64) << 19));
                Op::DeleteRange(ORD, lo, hi)
            }
            870..=871 => {
                big_scans += 1;
                Op::ScanOrdered(
                    ORD,
                    Bound::Unbounded,
                    Bound::Unbounded,
                    rng.random_bool(0.5),
                    usize::MAX,
                )
            }
            _ => Op::Get(ORD, key(user, recent)),
        };
        let mut reopen = || open(kind, &path).expect("reopen");
        step(kind, &mut store, &mut model, &op, &mut reopen);
        if n % 5_000 == 4_999 {
            step(kind, &mut store, &mut model, &Op::Checkpoint, &mut reopen);
        }
        if n % 20_000 == 12_345 {
            step(kind, &mut store, &mut model, &Op::Reopen, &mut reopen);
        }
        if n % 1000 == 0 {
            let state: usize = model.live.iter().map(|((_, k), v)| k.len() + v.len()).sum();
            max_state = max_state.max(state);
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
    assert!(max_state > 5 * budget, "state {max_state} must be several times the budget {budget}");
    assert!(big_scans > 10, "{big_scans} whole-namespace scans");
    eprintln!("{kind:?}: max state {max_state} bytes, {s:?}");
    assert!(s.compactions > 0, "{kind:?} never merged segments: {s:?}");
    assert!(s.disk_reads > 0, "{kind:?} never read from disk: {s:?}");
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
        if matches!(
            kind,
            Kind::HashLogTiny | Kind::AppendLogTiny | Kind::HashLogDirect | Kind::AppendLogDirect
        ) {
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

#[test]
fn appendlog_long_run_state_many_times_budget() {
    long_run(Kind::AppendLogTiny, 200_000, 20_000, 7);
}

/// A few lists grow to many times the memory budget (appendlog's reason to exist),
/// beside many small ones: appends, whole-list gets, deletes, checkpoints and reopens,
/// checked against the model; appends never re-copy a list, so the log stays near the
/// size of the live state.
#[test]
fn appendlog_lists_many_times_budget() {
    let kind = Kind::AppendLogTiny;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(kind, &path).expect("open");
    let mut model = Model::default();
    let mut rng = SmallRng::seed_from_u64(11);
    let budget = kind.budget() as usize;
    let mut max_list = 0usize;
    for n in 0..80_000usize {
        let hot = rng.random_range(0..100) < 70;
        let k = if hot {
            format!("hot-{}", rng.random_range(0..2)).into_bytes()
        } else {
            format!("cold-{:05}", rng.random_range(0..3000)).into_bytes()
        };
        let op = match rng.random_range(0..1000) {
            0..=969 => Op::Merge(LIST, k, vec![(n % 251) as u8; rng.random_range(0..400)]),
            970..=989 if !hot => Op::Get(LIST, k),
            970..=989 => Op::Merge(LIST, k, vec![1; 3000]),
            990..=997 if !hot => Op::Delete(LIST, k),
            _ => Op::Get(LIST, format!("hot-{}", rng.random_range(0..2)).into_bytes()),
        };
        let mut reopen = || open(kind, &path).expect("reopen");
        step(kind, &mut store, &mut model, &op, &mut reopen);
        if n % 7_000 == 6_999 {
            step(kind, &mut store, &mut model, &Op::Checkpoint, &mut reopen);
        }
        if n % 25_000 == 24_999 {
            step(kind, &mut store, &mut model, &Op::Reopen, &mut reopen);
        }
        if n % 1000 == 0 {
            max_list = max_list.max(model.live.values().map(Vec::len).max().unwrap_or(0));
            let s = store.stats();
            assert!(
                s.bytes_in_memory <= s.memory_budget,
                "resident {} > budget {}",
                s.bytes_in_memory,
                s.memory_budget
            );
        }
    }
    check_all(kind, &mut store, &model.live);
    max_list = max_list.max(model.live.values().map(Vec::len).max().unwrap_or(0));
    assert!(max_list > 4 * budget, "longest list {max_list} must be several times the budget");
    let s = store.stats();
    assert!(s.disk_reads > 0, "never read from disk: {s:?}");
    let live: usize = model.live.iter().map(|((_, k), v)| k.len() + v.len()).sum();
    let disk = s.bytes_on_disk as usize;
    assert!(disk < 4 * live + (4 << 20), "disk {disk} for {live} live bytes");
    drop(store);
    let mut store = open(kind, &path).expect("final reopen");
    check_all(kind, &mut store, &model.durable);
}

/// One step of the list-API model test.
#[derive(Clone, Debug)]
enum ListOp {
    Append(u8, Vec<u8>),
    Iter(u8, usize),
    Len(u8),
    Truncate(u8, u64),
    Delete(u8),
    Get(u8),
    Checkpoint,
    Reopen,
}

fn list_op() -> impl Strategy<Value = ListOp> {
    let elem = prop_oneof![
        10 => proptest::collection::vec(any::<u8>(), 0..40),
        4 => (40usize..700, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        1 => (700usize..20_000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ];
    let k = 0u8..4;
    prop_oneof![
        30 => (k.clone(), elem).prop_map(|(k, e)| ListOp::Append(k, e)),
        4 => (k.clone(), prop_oneof![Just(usize::MAX), 1usize..6]).prop_map(|(k, n)| ListOp::Iter(k, n)),
        3 => k.clone().prop_map(ListOp::Len),
        6 => (k.clone(), prop_oneof![0u64..4, 4u64..40, Just(u64::MAX)]).prop_map(|(k, n)| ListOp::Truncate(k, n)),
        1 => k.clone().prop_map(ListOp::Delete),
        3 => k.prop_map(ListOp::Get),
        2 => Just(ListOp::Checkpoint),
        1 => Just(ListOp::Reopen),
    ]
}

type ListModel = std::collections::BTreeMap<u8, std::collections::VecDeque<Vec<u8>>>;

fn encode(elems: &std::collections::VecDeque<Vec<u8>>) -> Vec<u8> {
    let mut v = Vec::new();
    for e in elems {
        spillway_store::list::push(&mut v, e);
    }
    v
}

/// The list-specific API (append, iter_list, list_len, truncate_front, delete) of
/// appendlog against a VecDeque per key, across checkpoints and reopens.
fn run_lists(kind: Kind, ops: &[ListOp]) {
    use spillway_store::StateStore;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = common::open_appendlog(kind, &path).expect("open");
    let mut live = ListModel::new();
    let mut durable = ListModel::new();
    let key = |k: u8| format!("list-{k}").into_bytes();
    for op in ops {
        let ns = store.namespace("lists").expect("ns");
        match op {
            ListOp::Append(k, e) => {
                store.append(ns, &key(*k), e).expect("append");
                live.entry(*k).or_default().push_back(e.clone());
            }
            ListOp::Iter(k, stop) => {
                let mut got = Vec::new();
                let n = store
                    .iter_list(ns, &key(*k), &mut |e| {
                        got.push(e.to_vec());
                        got.len() < *stop
                    })
                    .expect("iter_list");
                let want: Vec<Vec<u8>> = live
                    .get(k)
                    .map(|d| d.iter().take(*stop).cloned().collect())
                    .unwrap_or_default();
                assert_eq!(n as usize, got.len());
                assert_eq!(got, want, "iter_list {k}");
            }
            ListOp::Len(k) => {
                let n = store.list_len(ns, &key(*k)).expect("list_len");
                assert_eq!(n as usize, live.get(k).map_or(0, |d| d.len()), "list_len {k}");
            }
            ListOp::Truncate(k, n) => {
                let evicted = store.truncate_front(ns, &key(*k), *n).expect("truncate_front");
                let have = live.get(k).map_or(0, |d| d.len() as u64);
                assert_eq!(evicted, (*n).min(have), "truncate_front {k} by {n}");
                if let Some(d) = live.get_mut(k) {
                    for _ in 0..evicted {
                        d.pop_front();
                    }
                    if d.is_empty() {
                        live.remove(k);
                    }
                }
            }
            ListOp::Delete(k) => {
                store.delete(ns, &key(*k)).expect("delete");
                live.remove(k);
            }
            ListOp::Get(k) => {
                let got = store.get(ns, &key(*k)).expect("get");
                assert_eq!(got, live.get(k).map(encode), "get {k}");
            }
            ListOp::Checkpoint => {
                store.checkpoint().expect("checkpoint");
                durable = live.clone();
            }
            ListOp::Reopen => {
                drop(store);
                store = common::open_appendlog(kind, &path).expect("reopen");
                live = durable.clone();
            }
        }
    }
    let ns = store.namespace("lists").expect("ns");
    for k in 0..4u8 {
        assert_eq!(store.get(ns, &key(k)).expect("get"), live.get(&k).map(encode), "final {k}");
        assert_eq!(
            store.list_len(ns, &key(k)).expect("len"),
            live.get(&k).map_or(0, |d| d.len() as u64)
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn appendlog_list_api_matches_model(ops in proptest::collection::vec(list_op(), 1..300)) {
        run_lists(Kind::AppendLogTiny, &ops);
    }
}

/// A list whose chunks were appended, evicted and rewritten many times keeps working:
/// sliding-window use (append one, evict one) on a long-lived key, with chunk numbers
/// advancing and whole chunks dropped.
#[test]
fn appendlog_sliding_window() {
    use spillway_store::StateStore;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = common::open_appendlog(Kind::AppendLogTiny, dir.path()).expect("open");
    let ns = store.namespace("lists").expect("ns");
    let mut window = std::collections::VecDeque::new();
    for i in 0u32..50_000 {
        let e = vec![i as u8; 20 + (i % 50) as usize];
        store.append(ns, b"w", &e).expect("append");
        window.push_back(e);
        if window.len() > 500 {
            assert_eq!(store.truncate_front(ns, b"w", 1).expect("truncate"), 1);
            window.pop_front();
        }
        if i % 5000 == 0 {
            assert_eq!(store.get(ns, b"w").expect("get"), Some(encode(&window)));
            store.checkpoint().expect("checkpoint");
        }
    }
    assert_eq!(store.list_len(ns, b"w").expect("len"), 500);
    assert_eq!(store.get(ns, b"w").expect("get"), Some(encode(&window)));
    let c = store.counters().clone();
    assert!(c.chunks_dropped > 30, "{c:?}");
    assert!(c.appends_into_chunk > c.appends / 2, "{c:?}");
}

/// Regression (found by the list-append micro-benchmark): with many lists appended
/// round-robin under a small budget, each list's last chunk left the mutable region
/// before its next append, and every append copied that chunk (up to 64 KiB) to the
/// tail: gigabytes written for megabytes appended. Appends now copy at most `seal_at`
/// (1 KiB) and seal bigger chunks where they are; the index stays within the budget.
/// Appends 40-byte elements round-robin to `lists` lists, `rounds` times, through the
/// StateStore contract; returns (bytes appended, bytes written, the store).
fn round_robin(kind: Kind, dir: &std::path::Path, lists: u32, rounds: u32) -> (usize, usize) {
    let mut store = open(kind, dir).expect("open");
    let ns = store.namespace("lists").expect("ns");
    let mut appended = 0usize;
    for round in 0..rounds {
        for l in 0..lists {
            store.merge(ns, &l.to_be_bytes(), &[round as u8; 40]).expect("append");
            appended += 44;
        }
    }
    let mut want = Vec::new();
    for round in 0..rounds {
        spillway_store::list::push(&mut want, &[round as u8; 40]);
    }
    for l in [0u32, lists / 2, lists - 1] {
        assert_eq!(store.get(ns, &l.to_be_bytes()).expect("get"), Some(want.clone()), "{kind:?}");
    }
    let s = store.stats();
    let resident = s.bytes_in_memory <= s.memory_budget;
    assert!(resident, "{kind:?} resident {} > budget {}", s.bytes_in_memory, s.memory_budget);
    (appended, s.bytes_written as usize)
}

#[test]
fn appendlog_round_robin_appends_do_not_recopy_chunks() {
    let (a_dir, h_dir) = (tempfile::tempdir().expect("tmp"), tempfile::tempdir().expect("tmp"));
    let (appended, written) = round_robin(Kind::AppendLogTiny, a_dir.path(), 1000, 200);
    let (_, hashlog_written) = round_robin(Kind::HashLogTiny, h_dir.path(), 1000, 200);
    eprintln!("appended {appended}: appendlog wrote {written}, hashlog {hashlog_written}");
    // The adversarial case: no last chunk survives in the mutable region until its
    // list's next append. Each append copies at most seal_at (1 KiB, ~640 bytes on
    // average with its spare room) and a head, and compaction copies live records
    // again: about 43x the bytes appended here (hashlog: about 300x, and growing with
    // the lists' length).
    assert!(written < 64 * appended, "{written} bytes written for {appended} appended");
    assert!(written * 3 < hashlog_written, "appendlog {written}, hashlog {hashlog_written}");
}

/// Opens a store in a directory.
type Opener = Box<dyn Fn(&std::path::Path) -> Box<dyn spillway_store::StateStore>>;

/// A store configuration of [`values_at_each_limit`] with its limits for a 1-byte key:
/// the largest value, the largest list (in bytes, framing included) and the largest
/// list element (framed); and the longest key of a list.
struct Limits {
    name: &'static str,
    open: Opener,
    value: usize,
    list: usize,
    elem: usize,
    list_key: usize,
}

/// The list element sizes (framed) that make a list of exactly `list` bytes with
/// elements of at most `elem` framed bytes.
fn element_sizes(list: usize, elem: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut left = list;
    while left > 0 {
        let mut f = left.min(elem);
        if (1..4).contains(&(left - f)) {
            f -= 4;
        }
        sizes.push(f);
        left -= f;
    }
    sizes
}

/// Values exactly at each store's limit are accepted, checkpointed and read back; one
/// byte more is refused with `ValueTooLarge` when written, and the store goes on (mem
/// used to accept up to 256 MiB and then panic in its checkpoint on a frame over
/// 64 MiB; timelog accepted 256 MiB and then failed every checkpoint while the entry
/// sat in a memtable, poisoning the store; adaptive accepted what its current layout
/// took and then failed to migrate it).
#[test]
fn values_at_each_limit() {
    use spillway_store::{Error, TimeLogStore, MAX_KEY_LEN, MAX_VALUE_LEN};
    let kind_case = |kind: Kind, value: usize, list: usize, elem: usize| Limits {
        name: kind.name(),
        open: Box::new(move |dir| open(kind, dir).expect("open")),
        value,
        list,
        elem,
        // Appendlog's chunk keys add a 4-byte chunk number; adaptive keeps a list
        // namespace's keys to what its list layout holds.
        list_key: if matches!(kind, Kind::AppendLog | Kind::Adaptive) {
            MAX_KEY_LEN - 4
        } else {
            MAX_KEY_LEN
        },
    };
    // Hashlog with pages of `page` bytes: page header 32, record header 24, slack 8,
    // key 1, 8-aligned.
    let record = |page: usize| (page - 32 - 24 - 8 - 1) & !7;
    let mem = spillway_store::mem::MAX_ENTRY_LEN - 1;
    // A record of a 2 MiB page under a key 4 bytes longer (a list chunk's).
    let chunk = ((2 << 20) - 32 - 24 - 8 - 5) & !7;
    let cases = vec![
        kind_case(Kind::Mem, mem, mem, mem),
        kind_case(Kind::HashLogTiny, record(64 << 10), record(64 << 10), record(64 << 10)),
        // Under 1 MiB a large entry goes to a segment at once.
        kind_case(Kind::TimeLog, MAX_VALUE_LEN, MAX_VALUE_LEN, MAX_VALUE_LEN),
        // Under 2 GiB (an accounting number) both stay in memtables, so the checkpoint
        // writes them into its memtable image.
        Limits {
            name: "timelog-in-memtables",
            open: Box::new(|dir| {
                let opts = common::options(dir, 2 << 30);
                let t = common::timelog_options(Kind::TimeLog);
                Box::new(TimeLogStore::open(opts, t).expect("open"))
            }),
            value: MAX_VALUE_LEN,
            list: MAX_VALUE_LEN,
            elem: MAX_VALUE_LEN,
            list_key: MAX_KEY_LEN,
        },
        // Values of a plain namespace are hashlog records (2 MiB pages); a list is made
        // of chunks, each element one chunk at most (its key 4 bytes longer).
        kind_case(Kind::AppendLog, record(2 << 20), MAX_VALUE_LEN, chunk),
        // Every value must fit every layout a namespace can migrate to: a record of the
        // hash and list parts (2 MiB pages) under a key 4 bytes longer (a list chunk's).
        kind_case(Kind::Adaptive, chunk, chunk, chunk),
    ];
    for c in cases {
        let kind = c.name;
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = (c.open)(dir.path());
        let n = store.namespace("kv").expect("ns");
        let lists = store.namespace("lists").expect("ns");
        let value: Vec<u8> = (0..c.value).map(|i| i as u8).collect();
        store.put(n, b"k", &value).unwrap_or_else(|e| panic!("{kind}: value at the limit: {e}"));
        let over = store.put(n, b"j", &vec![1u8; c.value + 1]);
        assert!(matches!(over, Err(Error::ValueTooLarge { .. })), "{kind}: {over:?}");
        // A list that reaches the limit is accepted; one more (empty) element is
        // refused, the list unchanged.
        let mut crc = 0u32;
        for (i, f) in element_sizes(c.list, c.elem).into_iter().enumerate() {
            let elem = vec![i as u8; f - 4];
            store.merge(lists, b"k", &elem).unwrap_or_else(|e| panic!("{kind}: list element: {e}"));
            let mut framed = Vec::new();
            spillway_store::list::push(&mut framed, &elem);
            crc = crc32c::crc32c_append(crc, &framed);
        }
        let grown = store.merge(lists, b"k", b"");
        assert!(matches!(grown, Err(Error::ValueTooLarge { .. })), "{kind}: {grown:?}");
        let elem_over = store.merge(lists, b"e", &vec![4u8; c.elem - 3]);
        assert!(matches!(elem_over, Err(Error::ValueTooLarge { .. })), "{kind}: {elem_over:?}");
        let big_key = vec![3u8; spillway_store::MAX_KEY_LEN];
        store.put(n, &big_key, b"v").expect("key at the limit");
        let key_over = store.put(n, &[big_key.as_slice(), b"x"].concat(), b"v");
        assert!(matches!(key_over, Err(Error::KeyTooLarge { .. })), "{kind}: {key_over:?}");
        let list_key = vec![5u8; c.list_key];
        store.merge(lists, &list_key, b"x").expect("list key at the limit");
        let list_key_over = store.merge(lists, &[list_key.as_slice(), b"x"].concat(), b"x");
        assert!(
            matches!(list_key_over, Err(Error::KeyTooLarge { .. })),
            "{kind}: {list_key_over:?}"
        );
        store.checkpoint().unwrap_or_else(|e| panic!("{kind}: checkpoint at the limit: {e}"));
        drop(store);
        let mut store = (c.open)(dir.path());
        let n = store.namespace("kv").expect("ns");
        let lists = store.namespace("lists").expect("ns");
        assert!(store.get(n, b"k").expect("get") == Some(value), "{kind}: value at the limit");
        let list = store.get(lists, b"k").expect("get").expect("the list");
        assert_eq!(list.len(), c.list, "{kind}");
        assert_eq!(crc32c::crc32c(&list), crc, "{kind}: the list's bytes");
        assert_eq!(store.get(lists, b"e").expect("get"), None, "{kind}");
        assert_eq!(store.get(n, &big_key).expect("get").as_deref(), Some(&b"v"[..]), "{kind}");
        assert_eq!(store.get(n, b"j").expect("get"), None, "{kind}");
        let mut x = Vec::new();
        spillway_store::list::push(&mut x, b"x");
        assert_eq!(store.get(lists, &list_key).expect("get"), Some(x), "{kind}: list key");
    }
}

/// Open segment files stay under the documented cap of 64 however long the log: a log
/// of hundreds of one-page segments reads back correctly (before and after a
/// checkpoint and reopen) with at most 64 of them open, counted by the store and by
/// the process's file descriptors.
#[test]
fn hashlog_open_segments_stay_capped() {
    use spillway_store::{HashLogOptions, HashLogStore, StateStore};
    const CAP: usize = 64;
    let dir = tempfile::tempdir().expect("tempdir");
    let open_fds = || {
        std::fs::read_dir("/proc/self/fd")
            .map(|rd| {
                rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|p| p.starts_with(dir.path()))
                    .count()
            })
            .unwrap_or(0)
    };
    let hopts = || HashLogOptions::default().page_size(4096).segment_size(4096);
    let open =
        || HashLogStore::open(common::options(dir.path(), 1 << 20), hopts()).expect("open hashlog");
    let mut store = open();
    let n = store.namespace("kv").expect("ns");
    let value = |i: u32| vec![i as u8; 300 + (i % 7) as usize];
    let keys = 10_000u32;
    for i in 0..keys {
        store.put(n, format!("key{i:05}").as_bytes(), &value(i)).expect("put");
    }
    let segments = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".seg")))
        .count();
    assert!(segments > 4 * CAP, "only {segments} segments");
    let read_all = |store: &mut HashLogStore| {
        for i in (0..keys).rev() {
            let got = store.get(n, format!("key{i:05}").as_bytes()).expect("get");
            assert_eq!(got, Some(value(i)), "key {i}");
            assert!(store.open_segment_files() <= CAP);
        }
        assert!(open_fds() <= CAP + 1, "{} files of the store open", open_fds());
    };
    read_all(&mut store);
    store.checkpoint().expect("checkpoint");
    assert!(store.open_segment_files() <= CAP);
    drop(store);
    let mut store = open();
    read_all(&mut store);
}

/// Saved proptest failures replay: this suite's config persists them beside the source
/// (`tests/conformance.proptest-regressions`), and the configs elsewhere in the
/// workspace build on `ProptestConfig::default()`, which persists them too (proptest's
/// `std` feature; `PROPTEST_DISABLE_FAILURE_PERSISTENCE` would turn that off).
#[test]
fn proptest_failures_are_persisted_and_replayed() {
    assert!(config().failure_persistence.is_some());
    assert!(ProptestConfig::default().failure_persistence.is_some());
    assert!(ProptestConfig::with_cases(8).failure_persistence.is_some());
}

/// A merge function that adds little-endian u64s (as `merges::add_u64`) under `name`.
fn adder(name: &str) -> spillway_store::MergeOp {
    spillway_store::MergeOp::function(name, |old, op, out| {
        let a = old.and_then(|v| <[u8; 8]>::try_from(v).ok()).map_or(0, u64::from_le_bytes);
        let b = <[u8; 8]>::try_from(op).map_or(0, u64::from_le_bytes);
        out.extend_from_slice(&a.wrapping_add(b).to_le_bytes());
    })
}

/// The stores that write a manifest (every durable one this build has).
fn manifest_kinds() -> Vec<Kind> {
    vec![
        Kind::Mem,
        Kind::HashLogTiny,
        Kind::AppendLogTiny,
        Kind::TimeLogTiny,
        Kind::AdaptiveTiny,
        Kind::TieredL13,
        #[cfg(feature = "rocksdb")]
        Kind::Rocks,
    ]
}

/// Namespace and merge-function names with spaces, '=', ':', '%' and non-ASCII
/// characters survive a checkpoint and a reopen on every store that writes a manifest
/// (a function named `my fn` was written `ns=fn:my fn kv` and read back as `fn:my`
/// plus a namespace `fn kv`: a checkpoint that returned Ok did not open).
#[test]
fn names_round_trip_through_manifests() {
    use spillway_store::{AccessHint, NamespaceSpec, StoreOptions};
    let specs = |first_fn: &str| {
        vec![
            NamespaceSpec::with_merge("my ns", adder(first_fn)),
            NamespaceSpec::with_merge("a=b", adder("f=g h")),
            NamespaceSpec::with_merge("c:d", adder("fn:x:y z")),
            NamespaceSpec::with_merge("ünï ναμε", adder("ü fn ñ")),
            NamespaceSpec::with_merge("50%20off", adder("100% ")),
            NamespaceSpec::list(" lead and trail ").hint(AccessHint::ListAppend),
            NamespaceSpec::list("ord ns=1:2 ß").hint(AccessHint::Range),
        ]
    };
    let opts = |kind: Kind, dir: &std::path::Path, first_fn: &str| {
        let mut o = StoreOptions::new(dir).memory_budget(kind.budget());
        o.namespaces = specs(first_fn);
        o
    };
    let names: Vec<String> = specs("my fn").into_iter().map(|s| s.name).collect();
    let key = b"key\x00\x00\x00\x00\x00\x00\x00\x07";
    for kind in manifest_kinds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = common::open_opts(kind, opts(kind, dir.path(), "my fn"), None)
            .unwrap_or_else(|e| panic!("{kind:?}: open: {e}"));
        for (i, name) in names.iter().enumerate() {
            let n = store.namespace(name).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            if i < 5 {
                store.put(n, key, &(i as u64).to_le_bytes()).expect("put");
                store.merge(n, key, &100u64.to_le_bytes()).expect("merge");
            } else {
                store.merge(n, key, name.as_bytes()).expect("append");
            }
        }
        store.checkpoint().unwrap_or_else(|e| panic!("{kind:?}: checkpoint: {e}"));
        drop(store);
        let mut store = common::open_opts(kind, opts(kind, dir.path(), "my fn"), None)
            .unwrap_or_else(|e| panic!("{kind:?}: a checkpoint that returned Ok must open: {e}"));
        assert_eq!(store.checkpoint_seq(), 1, "{kind:?}");
        for (i, name) in names.iter().enumerate() {
            let n = store.namespace(name).expect("namespace");
            let want = if i < 5 {
                (i as u64 + 100).to_le_bytes().to_vec()
            } else {
                let mut l = Vec::new();
                spillway_store::list::push(&mut l, name.as_bytes());
                l
            };
            assert_eq!(store.get(n, key).expect("get"), Some(want), "{kind:?} {name:?}");
        }
        drop(store);
        // The names are still checked: another function name is a mismatch.
        let r = common::open_opts(kind, opts(kind, dir.path(), "my fn2"), None);
        assert!(
            matches!(r, Err(spillway_store::Error::NamespaceMismatch { .. })),
            "{kind:?}: {:?}",
            r.err()
        );
    }
}

/// A namespace or merge-function name with a control character (a newline ended the
/// manifest line: the checkpoint then failed to open as `Corrupt`) is refused when
/// the store is opened, with an error naming the namespace and the character.
#[test]
fn names_with_control_characters_are_refused_at_open() {
    use spillway_store::{Error, NamespaceSpec, StoreOptions};
    let cases = [
        (NamespaceSpec::list("bad\nname"), "U+000A"),
        (NamespaceSpec::list("nul\0"), "U+0000"),
        (NamespaceSpec::list("cr\r"), "U+000D"),
        (NamespaceSpec::with_merge("plain", adder("bad\nfn")), "U+000A"),
        (NamespaceSpec::with_merge("tab", adder("t\tb")), "U+0009"),
    ];
    for kind in manifest_kinds() {
        for (spec, code) in &cases {
            let dir = tempfile::tempdir().expect("tempdir");
            let opts = StoreOptions::new(dir.path())
                .memory_budget(kind.budget())
                .namespace(NamespaceSpec::list("fine"))
                .namespace(spec.clone());
            match common::open_opts(kind, opts, None) {
                Err(Error::InvalidOption { detail, .. }) => {
                    let name = format!("{:?}", spec.name);
                    assert!(detail.contains(&name), "{kind:?}: {detail} does not name {name}");
                    assert!(detail.contains(code), "{kind:?}: {detail} does not name {code}");
                }
                Err(e) => panic!("{kind:?} {:?}: expected InvalidOption, got {e}", spec.name),
                Ok(_) => panic!("{kind:?} {:?} {:?}: opened", spec.name, spec.merge),
            }
        }
    }
}
