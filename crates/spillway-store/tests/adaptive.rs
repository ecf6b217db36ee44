//! The adaptive store's memory: one budget, and the parts that hold namespaces get it
//! (the module docs' Memory section). The model suites (`conformance.rs`, with forced
//! migrations every few operations) check that moving memory between the parts changes
//! no value.

use spillway_store::StateStoreExt;
use spillway_store::{
    merges, AdaptiveOptions, AdaptiveStore, Layout, NamespaceSpec, StateStore, StoreOptions,
};

const BUDGET: u64 = 64 << 20;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// Runs operations until the budget steps are done (each operation is followed by at
/// most one step), bounded.
fn settle(s: &mut AdaptiveStore, ns: spillway_store::Ns) -> [u64; 3] {
    for i in 0..10_000u32 {
        let (b, moving) = s.part_budgets();
        assert!(b.iter().sum::<u64>() <= BUDGET, "over the budget: {b:?}");
        if !moving {
            return b;
        }
        s.get(ns, &key(i % 100)).expect("get");
    }
    panic!("the budget steps never finished: {:?}", s.part_budgets());
}

#[test]
fn memory_follows_the_namespaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions::new(dir.path())
        .memory_budget(BUDGET)
        .namespace(NamespaceSpec::with_merge("kv", merges::add_u64()));
    let mut s = AdaptiveStore::open(opts, AdaptiveOptions::default()).expect("open");
    let ns = s.namespace("kv").expect("ns");
    for i in 0..100 {
        s.put(ns, &key(i), b"value").expect("put");
    }
    // The hash part holds the one namespace: it gets all but the others' minimum.
    let b = settle(&mut s, ns);
    assert!(b[Layout::Hash as usize] >= BUDGET / 10 * 9, "hash part: {b:?}");

    // Moved to the time layout, the namespace takes the memory with it.
    s.migrate(ns, Layout::Time).expect("migrate");
    s.finish_migration().expect("finish");
    let b = settle(&mut s, ns);
    assert!(b[Layout::Time as usize] >= BUDGET / 100 * 85, "time part: {b:?}");
    for i in 0..100 {
        assert_eq!(s.get(ns, &key(i)).expect("get").as_deref(), Some(&b"value"[..]));
    }

    // Reopened, it opens with the hints' shares and moves to the same place again.
    s.checkpoint().expect("checkpoint");
    drop(s);
    let opts = StoreOptions::new(dir.path())
        .memory_budget(BUDGET)
        .namespace(NamespaceSpec::with_merge("kv", merges::add_u64()));
    let mut s = AdaptiveStore::open(opts, AdaptiveOptions::default()).expect("reopen");
    let b = settle(&mut s, ns);
    assert!(b[Layout::Time as usize] >= BUDGET / 100 * 85, "time part after reopen: {b:?}");
    assert_eq!(s.get(ns, &key(7)).expect("get").as_deref(), Some(&b"value"[..]));
}
