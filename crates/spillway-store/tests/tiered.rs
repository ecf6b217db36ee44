//! The tiered store's own behaviour beyond the conformance suite (which runs it through
//! every subset of levels against the BTreeMap model, and `crash.rs`, which SIGKILLs
//! it): Redis killed mid-run or unreachable, a missing `redis-server`, the level
//! combinations it refuses, what migrates where, and an L3 that refuses writes without
//! being poisoned (a full hash index).

use std::collections::BTreeMap;

use spillway_store::tiered::{L2Config, L3Kind, RedisServer, TieredOptions, TieredStore};
use spillway_store::{
    Error, HashLogOptions, NamespaceSpec, StateStore, StateStoreExt, StoreOptions,
};

fn opts(dir: &std::path::Path) -> StoreOptions {
    StoreOptions::new(dir).memory_budget(16 << 20).namespace(NamespaceSpec::list("kv"))
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("value-{i}-{round}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

/// Redis dies (SIGKILL) under a store whose tiny L1 keeps demoting to it: the next
/// operation that needs Redis fails with an error naming the address, every later one
/// is refused (poisoned), nothing panics and no wrong value is returned; reopening over
/// a new Redis recovers exactly the last checkpoint.
#[test]
fn redis_killed_mid_run_is_a_clear_error_and_reopen_recovers_the_checkpoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let t = TieredOptions::new(4096).l2(L2Config::Url(url.clone()));
    let mut store = TieredStore::open(opts(dir.path()), t).expect("open");
    let ns = store.namespace("kv").expect("ns");
    let mut model = BTreeMap::new();
    for i in 0..500u32 {
        store.put(ns, &i.to_be_bytes(), &value(i, 0)).expect("put");
        model.insert(i, value(i, 0));
    }
    store.checkpoint().expect("checkpoint");
    let checkpointed = model.clone();
    for i in 0..200u32 {
        store.put(ns, &i.to_be_bytes(), &value(i, 1)).expect("put");
    }
    server.kill();
    let mut failure = None;
    for i in 0..500u32 {
        match store.get(ns, &i.to_be_bytes()) {
            Ok(Some(v)) => {
                let want = if i < 200 { value(i, 1) } else { value(i, 0) };
                assert_eq!(v, want, "key {i}: a wrong value after Redis died");
            }
            Ok(None) => panic!("key {i} vanished after Redis died"),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let e = failure.expect("reads that miss a 4 KiB L1 must reach the dead Redis");
    assert!(matches!(e, Error::Redis { .. }), "{e:?}");
    assert!(e.to_string().contains(&url), "the error names the address: {e}");
    let again = store.put(ns, b"k", b"v");
    assert!(matches!(again, Err(Error::Poisoned { .. })), "{again:?}");
    assert!(matches!(store.checkpoint(), Err(Error::Poisoned { .. })));
    drop(store);

    let server2 = RedisServer::start().expect("start a second redis-server");
    let t = TieredOptions::new(4096).l2(L2Config::Url(server2.url()));
    let mut store = TieredStore::open(opts(dir.path()), t).expect("reopen");
    assert_eq!(store.checkpoint_seq(), 1);
    for (i, v) in &checkpointed {
        assert_eq!(store.get(ns, &i.to_be_bytes()).expect("get").as_ref(), Some(v), "key {i}");
    }
}

#[test]
fn unreachable_redis_fails_at_open_naming_the_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Port 1 on loopback: nothing listens there.
    let t = TieredOptions::new(4096).l2(L2Config::Url("redis://127.0.0.1:1".into()));
    let e = TieredStore::open(opts(dir.path()), t).expect_err("nothing listens on port 1");
    assert!(matches!(e, Error::Redis { .. }), "{e:?}");
    assert!(e.to_string().contains("redis://127.0.0.1:1"), "{e}");
    let bad = "http://x".parse::<L2Config>().expect_err("not a redis URL");
    assert!(bad.contains("redis://HOST:PORT"), "{bad}");
}

#[test]
fn a_missing_redis_server_binary_says_how_to_install_it() {
    let e = RedisServer::start_binary(std::path::Path::new("/nonexistent/redis-server"))
        .expect_err("no such binary");
    let msg = e.to_string();
    assert!(msg.contains("apt-get install redis-server"), "{msg}");
    assert!(msg.contains("with --l2 (the tiered store)"), "{msg}");
}

#[test]
fn level_combinations_that_cannot_hold_state_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = TieredStore::open(opts(dir.path()), TieredOptions::new(4096).l3(L3Kind::None))
        .expect_err("an L1 with nothing below");
    assert!(e.to_string().contains("would lose every entry it evicts"), "{e}");
    let e = TieredStore::open(opts(dir.path()), TieredOptions::new(0).l3(L3Kind::None))
        .expect_err("no level");
    assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}");
}

/// Without L3 the store says it is not durable and refuses to checkpoint with a typed
/// error; its Redis keys are removed when it is dropped.
#[test]
fn without_l3_the_store_is_not_durable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::shared().expect("redis");
    let t = TieredOptions::new(0).l2(L2Config::Url(server.url())).l3(L3Kind::None);
    let mut store = TieredStore::open(opts(dir.path()), t.clone()).expect("open");
    assert!(!store.is_durable());
    let ns = store.namespace("kv").expect("ns");
    store.put(ns, b"k", b"v").expect("put");
    let e = store.checkpoint().expect_err("no durable level");
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("--l3 hashlog"), "{e}");
    drop(store);
    let mut store = TieredStore::open(opts(dir.path()), t).expect("open again");
    assert_eq!(store.get(ns, b"k").expect("get"), None, "a new open starts empty");
}

/// Migration counters: with an L1 of a few entries, writes demote to Redis, reads of
/// demoted keys promote from Redis, a checkpoint moves Redis's dirty keys into L3, and
/// after a reopen (Redis cleared) reads promote from L3.
#[test]
fn entries_move_down_on_eviction_and_up_on_a_miss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::shared().expect("redis");
    let t = TieredOptions::new(2048).l2(L2Config::Url(server.url()));
    let mut store = TieredStore::open(opts(dir.path()), t.clone()).expect("open");
    let ns = store.namespace("kv").expect("ns");
    for i in 0..100u32 {
        store.put(ns, &i.to_be_bytes(), &value(i, 0)).expect("put");
    }
    let s = store.tier_stats();
    assert!(s.demotions_to_l2 > 50, "{s:?}");
    assert_eq!(s.demotions_to_l3, 0, "{s:?}");
    for i in 0..100u32 {
        assert_eq!(store.get(ns, &i.to_be_bytes()).expect("get"), Some(value(i, 0)));
    }
    let s = store.tier_stats();
    assert!(s.promotions_from_l2 > 50, "{s:?}");
    assert!(s.l1_bytes <= 2048, "{s:?}");
    store.checkpoint().expect("checkpoint");
    let s = store.tier_stats();
    assert!(s.demotions_to_l3 >= 90, "every key reaches L3 at the checkpoint: {s:?}");
    drop(store);
    let mut store = TieredStore::open(opts(dir.path()), t).expect("reopen");
    for i in 0..100u32 {
        assert_eq!(store.get(ns, &i.to_be_bytes()).expect("get"), Some(value(i, 0)));
    }
    let s = store.tier_stats();
    assert!(s.promotions_from_l3 >= 90, "{s:?}");
    assert_eq!(s.l2_hits, 0, "Redis was cleared at open: {s:?}");
}

/// A value heavier than the whole L1 still reads back (it is demoted at once).
#[test]
fn values_heavier_than_l1_pass_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = TieredStore::open(opts(dir.path()), TieredOptions::new(1024)).expect("open");
    let ns = store.namespace("kv").expect("ns");
    let big = vec![7u8; 10_000];
    store.put(ns, b"big", &big).expect("put");
    assert_eq!(store.get(ns, b"big").expect("get"), Some(big.clone()));
    store
        .rmw(ns, b"big", &mut |old, out| {
            out.extend_from_slice(old.expect("present"));
            out.push(1);
            spillway_store::Rmw::Put
        })
        .expect("rmw");
    assert_eq!(store.get(ns, b"big").expect("get").map(|v| v.len()), Some(10_001));
}

/// Shared window lists (one copy per event, counted references) over a tiered store whose
/// only level is Redis, and over a 1 KiB L1 on Redis on hashlog through a checkpoint and
/// reopen: reads and counts are exact, and an event is freed with its last window.
#[test]
fn shared_lists_over_redis_levels() {
    use spillway_store::shared::{reference, SharedLists};
    let server = RedisServer::shared().expect("redis");
    let opts = |dir: &std::path::Path| {
        StoreOptions::new(dir)
            .memory_budget(16 << 20)
            .namespace(NamespaceSpec::list("events"))
            .namespace(NamespaceSpec::list("windows"))
    };
    let dir = tempfile::tempdir().expect("tempdir");
    for t in [
        TieredOptions::new(0).l2(L2Config::Url(server.url())).l3(L3Kind::None),
        TieredOptions::new(1024).l2(L2Config::Url(server.url())),
    ] {
        let durable = t.l3 == L3Kind::HashLog;
        let mut store = TieredStore::open(opts(dir.path()), t.clone()).expect("open");
        let sh = SharedLists::new(
            store.namespace("events").expect("ns"),
            store.namespace("windows").expect("ns"),
        );
        for w in 0u8..10 {
            for e in w..w + 5 {
                sh.append(&mut store, &[w], format!("event {e}").as_bytes()).expect("append");
            }
        }
        if durable {
            store.checkpoint().expect("checkpoint");
            drop(store);
            store = TieredStore::open(opts(dir.path()), t).expect("reopen");
        }
        // Event e is in windows max(0, e-4)..=min(e, 9).
        let count = |e: u8| (e.saturating_sub(4)..=e.min(9)).count() as u32;
        for e in 0u8..14 {
            let r = reference(format!("event {e}").as_bytes(), 0);
            assert_eq!(sh.count(&mut store, &r).expect("count"), count(e), "event {e}");
        }
        let want: Vec<Vec<u8>> = (3u8..8).map(|e| format!("event {e}").into_bytes()).collect();
        assert_eq!(sh.read(&mut store, &[3]).expect("read"), want);
        let mut freed = 0;
        for w in 0u8..10 {
            freed += sh.purge(&mut store, &[w]).expect("purge");
        }
        assert_eq!(freed, 14, "every event freed exactly once");
    }
}

mod native_shared_lists {
    //! The shared lists kept natively in Redis (Lua scripts, pipelined) against a model,
    //! with a planted reference collision, and the copies baseline beside them.

    use std::collections::HashMap;

    use proptest::prelude::*;
    use spillway_store::shared::{reference, RedisLists, RedisSharedLists};
    use spillway_store::tiered::RedisServer;

    fn event(e: u8) -> Vec<u8> {
        // Binary bytes (NULs, 0xff) to check the scripts keep them intact.
        let mut v = vec![0u8, 0xff, e];
        v.extend(std::iter::repeat_n(e, e as usize % 7));
        v
    }

    #[derive(Clone, Debug)]
    enum Op {
        Append(Vec<u8>, u8),
        Read(u8),
        Take(Vec<u8>),
        Purge(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (proptest::collection::vec(0u8..6, 0..4), 0u8..10).prop_map(|(w, e)| Op::Append(w, e)),
            2 => (0u8..6).prop_map(Op::Read),
            2 => proptest::collection::vec(0u8..6, 0..3).prop_map(Op::Take),
            1 => (0u8..6).prop_map(Op::Purge),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Reads and takes return each window's events in append order (the queued
        /// appends are flushed first), counts equal the references held, frees happen
        /// exactly with the last window; the copies lists return the same events.
        #[test]
        fn redis_shared_lists_match_a_model(ops in proptest::collection::vec(op(), 1..80)) {
            let server = RedisServer::shared().expect("redis");
            let mut sh = RedisSharedLists::connect(&server.url(), "model").expect("connect");
            let mut cp = RedisLists::connect(&server.url(), "model").expect("connect");
            let mut model: HashMap<u8, Vec<u8>> = HashMap::new();
            let mut freed_total = 0u64;
            for op in ops {
                match op {
                    Op::Append(ws, e) => {
                        let keys: Vec<[u8; 1]> = ws.iter().map(|&w| [w]).collect();
                        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                        sh.append_many(&keys, &event(e)).expect("append");
                        cp.append_many(&keys, &event(e)).expect("append");
                        for w in ws {
                            model.entry(w).or_default().push(e);
                        }
                    }
                    Op::Read(w) => {
                        let want: Vec<Vec<u8>> =
                            model.get(&w).map(|l| l.iter().map(|&e| event(e)).collect()).unwrap_or_default();
                        prop_assert_eq!(sh.read(&[w]).expect("read"), want);
                    }
                    Op::Take(ws) => {
                        let keys: Vec<[u8; 1]> = ws.iter().map(|&w| [w]).collect();
                        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                        let (mut got, mut got_cp) = (vec![Vec::new(); ws.len()], vec![Vec::new(); ws.len()]);
                        let freed = sh.take_many(&keys, &mut |i, e| got[i].push(e.to_vec())).expect("take");
                        cp.take_many(&keys, &mut |i, e| got_cp[i].push(e.to_vec())).expect("take");
                        let mut want = Vec::new();
                        for w in &ws {
                            want.push(model.remove(w).unwrap_or_default().iter().map(|&e| event(e)).collect::<Vec<_>>());
                        }
                        prop_assert_eq!(&got, &want);
                        prop_assert_eq!(&got_cp, &want);
                        freed_total += freed as u64;
                    }
                    Op::Purge(w) => {
                        freed_total += sh.purge(&[w]).expect("purge") as u64;
                        model.remove(&w);
                        cp.take_many(&[&[w]], &mut |_, _| {}).expect("take");
                    }
                }
                for e in 0u8..10 {
                    let refs = model.values().flatten().filter(|&&x| x == e).count() as u32;
                    prop_assert_eq!(sh.count(&reference(&event(e), 0)).expect("count"), refs);
                }
                // Stored events = new ones minus freed ones = distinct events held.
                let distinct = (0u8..10).filter(|e| model.values().flatten().any(|x| x == e)).count() as u64;
                prop_assert_eq!(sh.new_events() - freed_total, distinct);
            }
        }
    }
}

/// Another event's bytes planted under an event's reference: the append script probes to
/// the next slot (the same sequence as `shared::reference`) and never merges the two.
#[test]
fn redis_shared_lists_detect_a_planted_collision() {
    use spillway_store::shared::{reference, RedisSharedLists};
    let server = RedisServer::shared().expect("redis");
    let mut sh = RedisSharedLists::connect(&server.url(), "collision").expect("connect");
    let client = redis::Client::open(server.url()).expect("client");
    let mut con = client.get_connection().expect("con");
    let mut k = b"spw:shared:collision:e:".to_vec();
    k.extend_from_slice(&reference(b"real", 0));
    let mut planted = 7u32.to_le_bytes().to_vec();
    planted.extend_from_slice(b"impostor");
    redis::cmd("SET").arg(&k).arg(&planted).query::<()>(&mut con).expect("plant");
    // Both appends travel in one pipeline: each lands on probe slot 1 and has its list
    // elements rewritten at flush, between other events' elements.
    sh.append_many(&[b"w1"], b"before").expect("append");
    sh.append_many(&[b"w1", b"w2"], b"real").expect("append");
    sh.append_many(&[b"w1"], b"between").expect("append");
    sh.append_many(&[b"w1"], b"real").expect("append");
    let want: Vec<Vec<u8>> =
        ["before", "real", "between", "real"].map(|s| s.as_bytes().to_vec()).to_vec();
    assert_eq!(sh.read(b"w1").expect("read"), want);
    assert_eq!(sh.read(b"w2").expect("read"), vec![b"real".to_vec()]);
    assert_eq!(sh.collisions(), 2);
    assert_eq!(sh.count(&reference(b"real", 0)).expect("count"), 7, "the other event is untouched");
    assert_eq!(sh.count(&reference(b"real", 1)).expect("count"), 3);
    assert_eq!(sh.purge(b"w1").expect("purge"), 2, "before and between");
    assert_eq!(sh.purge(b"w2").expect("purge"), 1);
    assert_eq!(sh.count(&reference(b"real", 1)).expect("count"), 0);
    // A list naming a missing event is an error that changes nothing.
    let mut lk = b"spw:shared:collision:l:bad".to_vec();
    redis::cmd("RPUSH").arg(&lk).arg(&[9u8; 16][..]).query::<()>(&mut con).expect("plant");
    let e = sh.purge(b"bad").expect_err("dangling");
    assert!(e.to_string().contains("names no stored event"), "{e}");
    lk.truncate(lk.len());
    let len: u64 = redis::cmd("LLEN").arg(&lk).query(&mut con).expect("llen");
    assert_eq!(len, 1, "the damaged list is left as it was");
}

/// Windows longer than the scripts' chunk of 2000 references (MGET/MSET/DEL in chunks):
/// every event comes back in order and each is freed once, by its last window.
#[test]
fn redis_shared_lists_take_long_windows_in_chunks() {
    use spillway_store::shared::RedisSharedLists;
    let server = RedisServer::shared().expect("redis");
    let mut sh = RedisSharedLists::connect(&server.url(), "long").expect("connect");
    let events: Vec<Vec<u8>> = (0..4500u32).map(|i| format!("event {i}").into_bytes()).collect();
    for (i, e) in events.iter().enumerate() {
        let ws: &[&[u8]] = if i % 2 == 0 { &[b"a", b"b"] } else { &[b"a"] };
        sh.append_many(ws, e).expect("append");
    }
    let mut a = Vec::new();
    assert_eq!(sh.take_many(&[b"a"], &mut |_, e| a.push(e.to_vec())).expect("take"), 2250);
    assert_eq!(a, events);
    let mut b = Vec::new();
    assert_eq!(sh.take_many(&[b"b"], &mut |_, e| b.push(e.to_vec())).expect("take"), 2250);
    assert_eq!(b.len(), 2250);
    assert_eq!(sh.new_events(), 4500);
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// L3 options and the memory budget under which L3's hash index can neither double nor
/// chain an overflow bucket: 256 buckets (16 KiB) plus the seven 2 MiB pages hashlog
/// keeps beside its index (five held back, two in memory, the fewest it runs with).
/// Such an L3 refuses the first key whose bucket already holds seven with
/// [`Error::BudgetTooSmall`], an error that does not poison, and takes it once a key of
/// that bucket is deleted.
fn full_index_l3() -> (HashLogOptions, u64) {
    let page = 2usize << 20;
    (HashLogOptions::with_pages(page).expected_keys(1), 256 * 64 + 7 * page as u64)
}

/// The first of `key(0)`, `key(1)`, ... that the L3 of [`full_index_l3`] refuses, found
/// through a tiered store whose only level is such an L3 (the index hashes keys the same
/// way in every store): `key(0..n)` fit in it, `key(0..=n)` do not.
fn first_refused_key() -> usize {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, budget) = full_index_l3();
    let t = TieredOptions::new(0).l3_hashlog(h);
    let mut store = TieredStore::open(opts(dir.path()).memory_budget(budget), t).expect("open");
    let ns = store.namespace("kv").expect("ns");
    for i in 0..1792 {
        match store.put(ns, &key(i), &value(i as u32, 0)) {
            Ok(()) => {}
            Err(Error::BudgetTooSmall { .. }) => return i,
            Err(e) => panic!("put {i}: {e}"),
        }
    }
    panic!("256 buckets of 7 keys cannot take 1792 keys without one full bucket")
}

/// Opens the store again (the old instance must be gone) and checks that it holds
/// exactly `model`.
fn reopen_and_check(o: StoreOptions, t: TieredOptions, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut store = TieredStore::open(o, t).expect("reopen");
    let ns = store.namespace("kv").expect("ns");
    let missing: Vec<String> = model
        .iter()
        .filter(|(k, v)| store.get(ns, k).expect("get").as_ref() != Some(*v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(missing.is_empty(), "the checkpoint returned Ok without these writes: {missing:?}");
    let mut count = 0;
    store
        .scan_prefix(ns, b"", &mut |_, _| {
            count += 1;
            true
        })
        .expect("scan");
    assert_eq!(count, model.len(), "keys after reopen");
}

/// L1 over an L3 whose hash index is full: an entry L1 evicts is refused by L3
/// (BudgetTooSmall, which does not poison). It stays readable and dirty in the process
/// (held): the write whose insertion evicted it is complete and returns Ok, later writes
/// are refused before they change anything while L3 refuses the held entries, every
/// acknowledged write reads back, a checkpoint fails rather than publish a state without
/// them, deletes (which L3 takes) make room, and then the held entries reach L3 and the
/// next checkpoint holds every acknowledged write.
#[test]
fn entries_l3_refuses_on_eviction_stay_readable_and_dirty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, budget) = full_index_l3();
    let l1 = 2048;
    let o = || opts(dir.path()).memory_budget(budget + l1);
    let t = TieredOptions::new(l1).l3_hashlog(h);
    let mut store = TieredStore::open(o(), t.clone()).expect("open");
    let ns = store.namespace("kv").expect("ns");
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut refused = None;
    for i in 0..1792usize {
        let (k, v) = (key(i), value(i as u32, 0));
        match store.put(ns, &k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
        if i == 50 {
            store.checkpoint().expect("checkpoint while L3 has room");
        }
    }
    let (r, e) = refused.expect("L3 refuses a key once one of its 256 buckets holds 7");
    assert!(matches!(e, Error::BudgetTooSmall { .. }), "put {r}: {e:?}");
    for (k, v) in &model {
        let got =
            store.get(ns, k).unwrap_or_else(|e| panic!("get {}: {e}", String::from_utf8_lossy(k)));
        assert_eq!(
            got.as_ref(),
            Some(v),
            "{}: an acknowledged write was lost when L3 refused it",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(store.get(ns, &key(r)).expect("get"), None, "the refused put left nothing");
    let held = store.tier_stats().held_entries;
    assert!(held > 0, "L3 refused an evicted entry: {:?}", store.tier_stats());
    // The refusal names the level and the directory.
    let msg = e.to_string();
    assert!(msg.contains("L3") && msg.contains(&*dir.path().to_string_lossy()), "{msg}");
    match store.checkpoint() {
        Ok(_) => panic!("a checkpoint returned Ok while L3 refused acknowledged writes"),
        Err(e) => assert!(matches!(e, Error::BudgetTooSmall { .. }), "{e:?}"),
    }
    // Not poisoned: reads work, and deletes go through to L3 until the held entries fit
    // (then the refused write is accepted).
    let mut deleted = 0;
    loop {
        match store.put(ns, &key(r), b"accepted again") {
            Ok(()) => break,
            Err(e) => assert!(matches!(e, Error::BudgetTooSmall { .. }), "{e:?}"),
        }
        let k = model.keys().next().expect("deleting every key makes room").clone();
        store
            .delete(ns, &k)
            .unwrap_or_else(|e| panic!("delete {}: {e}", String::from_utf8_lossy(&k)));
        model.remove(&k);
        deleted += 1;
        assert_eq!(store.get(ns, &k).expect("get"), None);
    }
    assert!(deleted > 0, "the put was refused once, so L3 needed room");
    assert_eq!(store.tier_stats().held_entries, 0, "L3 took the held entries");
    model.insert(key(r), b"accepted again".to_vec());
    // L1's other dirty entries may still meet full buckets: delete until they fit.
    loop {
        match store.checkpoint() {
            Ok(_) => break,
            Err(Error::BudgetTooSmall { .. }) => {
                let k = model.keys().find(|k| **k != key(r)).expect("a key").clone();
                store.delete(ns, &k).expect("delete");
                model.remove(&k);
            }
            Err(e) => panic!("checkpoint: {e}"),
        }
    }
    for (k, v) in &model {
        assert_eq!(store.get(ns, k).expect("get").as_ref(), Some(v));
    }
    drop(store);
    reopen_and_check(o(), t, &model);
}

/// Redis over an L3 whose hash index is full: a checkpoint moves the dirty set's keys
/// into L3 and L3 refuses one (BudgetTooSmall, which does not poison). The keys that did
/// not reach L3 stay in the dirty set, so the checkpoint fails and the next one fails too
/// rather than return Ok without them (they used to leave the set before L3 had them),
/// and once a delete makes room a checkpoint holds every acknowledged write.
#[test]
fn keys_l3_refuses_stay_in_the_dirty_set() {
    let n = first_refused_key();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::shared().expect("redis");
    let (h, budget) = full_index_l3();
    let o = || opts(dir.path()).memory_budget(budget);
    let t = TieredOptions::new(0).l2(L2Config::Url(server.url())).l3_hashlog(h);
    let mut store = TieredStore::open(o(), t.clone()).expect("open");
    let ns = store.namespace("kv").expect("ns");
    let mut model = BTreeMap::new();
    for i in 0..=n {
        store.put(ns, &key(i), &value(i as u32, 0)).expect("put into Redis");
        model.insert(key(i), value(i as u32, 0));
    }
    // key(0..=n) hold one key too many for one bucket of L3.
    let e = store.checkpoint().expect_err("one key of the full bucket has no room in L3");
    assert!(matches!(e, Error::BudgetTooSmall { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("dirty set") && msg.contains(&*dir.path().to_string_lossy()), "{msg}");
    for (k, v) in &model {
        assert_eq!(store.get(ns, k).expect("get after a refused flush").as_ref(), Some(v));
    }
    match store.checkpoint() {
        Ok(_) => {
            drop(store);
            reopen_and_check(o(), t, &model);
            panic!("a checkpoint returned Ok although L3 cannot hold key(0..={n})");
        }
        Err(e) => assert!(matches!(e, Error::BudgetTooSmall { .. }), "{e:?}"),
    }
    // A delete of key(n) leaves the bucket exactly full, whichever of its keys L3 refused.
    store.delete(ns, &key(n)).expect("delete");
    model.remove(&key(n));
    let mut attempts = 0;
    while let Err(e) = store.checkpoint() {
        assert!(matches!(e, Error::BudgetTooSmall { .. }), "{e:?}");
        attempts += 1;
        assert!(attempts < 4, "the delete made room, yet checkpoints keep failing: {e}");
    }
    drop(store);
    reopen_and_check(o(), t, &model);
}
