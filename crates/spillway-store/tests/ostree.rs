//! Tests of the store-kept order-statistics tree (`collections::ostree`): a differential
//! test against a `BTreeMap` oracle over random add / remove sequences (duplicates,
//! removals of absent keys, draining to empty, trees of many levels through small
//! capacities, two trees sharing a namespace) on mem and hashlog; recovery of a hashlog
//! checkpoint; and damaged headers and nodes.

use spillway_store::StateStoreExt;
use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spillway_store::collections::ostree::{
    OsTree, OsTreeError, TreeStats, DEFAULT_FANOUT, MAX_KEY_LEN,
};
use spillway_store::{NamespaceSpec, StateStore, StoreKind, StoreOptions};

const PREFIXES: [&[u8]; 2] = [b"A:", b"B:"];

fn open(kind: StoreKind, dir: &std::path::Path) -> Box<dyn StateStore> {
    let opts = StoreOptions::new(dir).memory_budget(64 << 20).namespace(NamespaceSpec::list("t"));
    kind.open(opts).expect("open store")
}

/// Keys of varying length whose byte order differs from their number's order; key 0 is
/// the empty key.
fn key_of(id: u32) -> Vec<u8> {
    if id == 0 {
        return Vec::new();
    }
    format!("{:x}", u64::from(id).wrapping_mul(2_654_435_761) % 1_000_003).into_bytes()
}

/// The oracle: a sorted multiset.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    map: BTreeMap<Vec<u8>, u64>,
}

impl Model {
    fn total(&self) -> u64 {
        self.map.values().sum()
    }
    fn add(&mut self, key: &[u8], delta: i64) -> Option<u64> {
        let cur = self.map.get(key).copied().unwrap_or(0);
        let new = cur.checked_add_signed(delta)?;
        if new == 0 {
            self.map.remove(key);
        } else {
            self.map.insert(key.to_vec(), new);
        }
        Some(new)
    }
    fn rank(&self, key: &[u8]) -> u64 {
        self.map.range::<[u8], _>((Bound::Unbounded, Bound::Excluded(key))).map(|(_, m)| m).sum()
    }
    /// Every key by rank, repeated by multiplicity.
    fn flat(&self) -> Vec<&[u8]> {
        let mut v = Vec::new();
        for (k, &m) in &self.map {
            v.extend(std::iter::repeat_n(&k[..], m as usize));
        }
        v
    }
}

fn contents(t: &mut OsTree, s: &mut dyn StateStore, p: &[u8]) -> BTreeMap<Vec<u8>, u64> {
    let mut got = BTreeMap::new();
    t.for_each(s, p, &mut |k, m| {
        got.insert(k.to_vec(), m);
        true
    })
    .expect("for_each");
    got
}

/// The cheap comparisons made after every step.
fn check_step(
    t: &mut OsTree,
    s: &mut dyn StateStore,
    p: &[u8],
    m: &Model,
    key: &[u8],
    salt: u64,
) -> Result<(), TestCaseError> {
    let total = m.total();
    prop_assert_eq!(t.total(s, p).unwrap(), total);
    prop_assert_eq!(t.distinct(s, p).unwrap(), m.map.len() as u64);
    prop_assert_eq!(t.first(s, p).unwrap(), m.map.keys().next().cloned());
    prop_assert_eq!(t.last(s, p).unwrap(), m.map.keys().next_back().cloned());
    prop_assert_eq!(t.multiplicity(s, p, key).unwrap(), m.map.get(key).copied().unwrap_or(0));
    prop_assert_eq!(t.rank(s, p, key).unwrap(), m.rank(key));
    prop_assert_eq!(t.select(s, p, total).unwrap(), None);
    if total > 0 {
        let mut ks = vec![0, total - 1, total / 2, salt % total];
        ks.dedup();
        // The oracle's answer by walking the map.
        for k in ks {
            let mut rest = k;
            let mut want = None;
            for (key, &mult) in &m.map {
                if rest < mult {
                    want = Some(key.clone());
                    break;
                }
                rest -= mult;
            }
            prop_assert_eq!(t.select(s, p, k).unwrap(), want, "select({})", k);
        }
    }
    Ok(())
}

/// The full comparison: structure, every entry, every rank.
fn check_full(
    t: &mut OsTree,
    s: &mut dyn StateStore,
    p: &[u8],
    m: &Model,
) -> Result<TreeStats, TestCaseError> {
    let st = t.check(s, p).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(st.total, m.total());
    prop_assert_eq!(st.distinct, m.map.len() as u64);
    prop_assert_eq!(&contents(t, s, p), &m.map);
    let flat = m.flat();
    let mut buf = Vec::new();
    for (k, want) in flat.iter().enumerate() {
        prop_assert!(t.select_into(s, p, k as u64, &mut buf).unwrap());
        prop_assert_eq!(&buf[..], *want, "select({})", k);
    }
    Ok(st)
}

#[derive(Clone, Debug)]
enum Op {
    /// Add `delta` occurrences of key `id` to tree `tree`.
    Add { tree: usize, id: u32, delta: i64 },
    /// Remove one occurrence of the present key at position `pick % distinct`.
    RemovePresent { tree: usize, pick: u32 },
    /// Remove one more occurrence than the tree holds of key `id` (always an error).
    RemoveTooMany { tree: usize, id: u32 },
}

fn op(keys: u32) -> impl Strategy<Value = Op> {
    // Three quarters of the operations go to the first tree, so it grows larger.
    let tree = prop_oneof![3 => Just(0usize), 1 => Just(1usize)];
    prop_oneof![
        12 => (tree.clone(), 0..keys).prop_map(|(tree, id)| Op::Add { tree, id, delta: 1 }),
        1 => (tree.clone(), 0..keys, 2i64..4).prop_map(|(tree, id, delta)| Op::Add { tree, id, delta }),
        5 => (tree.clone(), any::<u32>()).prop_map(|(tree, pick)| Op::RemovePresent { tree, pick }),
        1 => (tree, 0..keys).prop_map(|(tree, id)| Op::RemoveTooMany { tree, id }),
    ]
}

fn scenario() -> impl Strategy<Value = (usize, usize, Vec<Op>, u64)> {
    let fanout = prop_oneof![Just((4usize, 4usize)), Just((5, 4)), Just((4, 7)), Just((16, 8))];
    let keys = prop_oneof![Just(40u32), Just(3000), Just(1_000_000)];
    (fanout, keys).prop_flat_map(|((leaf, branch), keys)| {
        (Just(leaf), Just(branch), prop::collection::vec(op(keys), 500..8000), any::<u64>())
    })
}

fn run(
    kind: StoreKind,
    leaf: usize,
    branch: usize,
    ops: &[Op],
    seed: u64,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(kind, dir.path());
    let s = &mut *store;
    let ns = s.namespace("t").unwrap();
    let mut t = OsTree::new(ns).with_fanout(leaf, branch).unwrap();
    let mut models = [Model::default(), Model::default()];
    let (mut max_height, mut max_distinct) = (0, 0);
    for (step, o) in ops.iter().enumerate() {
        let (tree, key) = match *o {
            Op::Add { tree, id, delta } => {
                let key = key_of(id);
                let want = models[tree].add(&key, delta).unwrap();
                prop_assert_eq!(t.add(s, PREFIXES[tree], &key, delta).unwrap(), want);
                (tree, key)
            }
            Op::RemovePresent { tree, pick } => {
                let m = &mut models[tree];
                if m.map.is_empty() {
                    let r = t.add(s, PREFIXES[tree], b"absent", -1);
                    prop_assert!(
                        matches!(r, Err(OsTreeError::NotPresent { present: 0, .. })),
                        "{:?}",
                        r
                    );
                    (tree, b"absent".to_vec())
                } else {
                    let key = m.map.keys().nth(pick as usize % m.map.len()).unwrap().clone();
                    let want = m.add(&key, -1).unwrap();
                    prop_assert_eq!(t.add(s, PREFIXES[tree], &key, -1).unwrap(), want);
                    (tree, key)
                }
            }
            Op::RemoveTooMany { tree, id } => {
                let key = key_of(id);
                let present = models[tree].map.get(&key).copied().unwrap_or(0);
                let delta = -(present as i64) - 1;
                match t.add(s, PREFIXES[tree], &key, delta) {
                    Err(OsTreeError::NotPresent { present: p, delta: d, .. }) => {
                        prop_assert_eq!((p, d), (present, delta));
                    }
                    other => prop_assert!(false, "expected NotPresent, got {:?}", other),
                }
                (tree, key)
            }
        };
        check_step(&mut t, s, PREFIXES[tree], &models[tree], &key, seed ^ step as u64)?;
        let st = t.stats(s, PREFIXES[tree]).unwrap();
        max_height = max_height.max(st.height);
        max_distinct = max_distinct.max(st.distinct);
        if step % 500 == 499 {
            for (p, m) in PREFIXES.iter().zip(&models) {
                max_height = max_height.max(check_full(&mut t, s, p, m)?.height);
            }
        }
    }
    for (p, m) in PREFIXES.iter().zip(&models) {
        max_height = max_height.max(check_full(&mut t, s, p, m)?.height);
    }
    // Drain both trees in a seeded order, then nothing is left in the store.
    let mut rng = seed | 1;
    for (tree, p) in PREFIXES.iter().enumerate() {
        let mut left: Vec<(Vec<u8>, u64)> = models[tree].map.clone().into_iter().collect();
        let mut n = 0u32;
        while !left.is_empty() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let i = (rng % left.len() as u64) as usize;
            let key = left[i].0.clone();
            left[i].1 -= 1;
            if left[i].1 == 0 {
                left.swap_remove(i);
            }
            let want = models[tree].add(&key, -1).unwrap();
            prop_assert_eq!(t.add(s, p, &key, -1).unwrap(), want);
            n += 1;
            if n.is_multiple_of(64) {
                check_step(&mut t, s, p, &models[tree], &key, rng)?;
            }
            if n.is_multiple_of(700) {
                check_full(&mut t, s, p, &models[tree])?;
            }
        }
        prop_assert_eq!(t.stats(s, p).unwrap().nodes, 0);
        prop_assert_eq!(t.first(s, p).unwrap(), None);
    }
    let mut left = 0;
    s.scan_prefix(ns, b"", &mut |_, _| {
        left += 1;
        true
    })
    .unwrap();
    prop_assert_eq!(left, 0, "values left after draining both trees");
    // Capacities of at most 16 / 8 put 300 distinct keys in at least 3 levels.
    if max_distinct >= 300 {
        prop_assert!(max_height >= 3, "{} distinct keys in {} levels", max_distinct, max_height);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn matches_btreemap_on_mem((leaf, branch, ops, seed) in scenario()) {
        run(StoreKind::Mem, leaf, branch, &ops, seed)?;
    }

    #[test]
    fn matches_btreemap_on_hashlog((leaf, branch, ops, seed) in scenario()) {
        run(StoreKind::HashLog, leaf, branch, &ops, seed)?;
    }
}

/// A deterministic tall tree: 6000 distinct keys with capacity 4 (at least 7 levels),
/// then removals in an interleaved order down to empty.
#[test]
fn tall_tree_grows_and_shrinks_to_nothing() {
    for kind in [StoreKind::Mem, StoreKind::HashLog] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(kind, dir.path());
        let s = &mut *store;
        let mut t = OsTree::new(s.namespace("t").unwrap()).with_fanout(4, 4).unwrap();
        let mut m = Model::default();
        let p = b"tall";
        for id in 1..=6000u32 {
            let key = key_of(id);
            m.add(&key, 1);
            t.add(s, p, &key, 1).unwrap();
            if id.is_multiple_of(1500) {
                check_full(&mut t, s, p, &m).unwrap();
            }
        }
        let st = t.check(s, p).unwrap();
        assert!(st.height >= 7, "{st:?}");
        assert_eq!((st.total, st.distinct), (6000, 6000));
        for id in (1..=6000u32).map(|i| (i * 7919) % 6000 + 1) {
            let key = key_of(id);
            m.add(&key, -1);
            t.add(s, p, &key, -1).unwrap();
            if m.map.len().is_multiple_of(1000) {
                check_full(&mut t, s, p, &m).unwrap();
            }
        }
        assert_eq!(t.stats(s, p).unwrap().height, 0);
    }
}

/// Reopening a hashlog store recovers exactly the tree of its last checkpoint, which
/// then takes further updates.
#[test]
fn hashlog_checkpoint_recovers_the_same_tree() {
    let dir = tempfile::tempdir().unwrap();
    let p = b"card-7";
    let mut m = Model::default();
    let (at_checkpoint, stats) = {
        let mut store = open(StoreKind::HashLog, dir.path());
        let s = &mut *store;
        let mut t = OsTree::new(s.namespace("t").unwrap()).with_fanout(8, 6).unwrap();
        for i in 0..20_000u32 {
            let key = key_of(i % 7000 + 1);
            if i % 5 == 4 {
                if m.map.contains_key(&key) {
                    m.add(&key, -1);
                    t.add(s, p, &key, -1).unwrap();
                }
            } else {
                m.add(&key, 1);
                t.add(s, p, &key, 1).unwrap();
            }
        }
        let stats = check_full(&mut t, s, p, &m).unwrap();
        assert!(stats.height >= 3, "{stats:?}");
        s.checkpoint().unwrap();
        let at_checkpoint = m.clone();
        // Updates after the checkpoint are lost with the process.
        for i in 0..3000u32 {
            t.add(s, p, &key_of(i + 1), 1).unwrap();
        }
        (at_checkpoint, stats)
    };
    let mut store = open(StoreKind::HashLog, dir.path());
    let s = &mut *store;
    let mut t = OsTree::new(s.namespace("t").unwrap());
    let st = check_full(&mut t, s, p, &at_checkpoint).unwrap();
    assert_eq!(st, stats, "the capacities come from the tree's header");
    let mut m = at_checkpoint;
    for i in 0..2000u32 {
        let key = key_of(i * 3 + 1);
        m.add(&key, 1);
        t.add(s, p, &key, 1).unwrap();
    }
    check_full(&mut t, s, p, &m).unwrap();
}

/// The id of the leftmost leaf, read through the documented format.
fn leftmost_leaf(s: &mut dyn StateStore, p: &[u8]) -> (u64, usize) {
    let ns = s.namespace("t").unwrap();
    let h = s.get(ns, p).unwrap().unwrap();
    let height = h[9] as usize;
    let mut id = u64::from_le_bytes(h[16..24].try_into().unwrap());
    for _ in 1..height {
        let n = s.get(ns, &node_key(p, id)).unwrap().unwrap();
        id = u64::from_le_bytes(n[16..24].try_into().unwrap());
    }
    (id, height)
}

fn node_key(p: &[u8], id: u64) -> Vec<u8> {
    let mut k = p.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

fn reseal(v: &mut [u8]) {
    let crc = crc32c::crc32c(&v[4..]);
    v[..4].copy_from_slice(&crc.to_le_bytes());
}

fn built(dir: &std::path::Path) -> (Box<dyn StateStore>, OsTree, Model) {
    let mut store = open(StoreKind::Mem, dir);
    let mut t = OsTree::new(store.namespace("t").unwrap()).with_fanout(4, 4).unwrap();
    let mut m = Model::default();
    for id in 1..=200 {
        m.add(&key_of(id), 1);
        t.add(&mut *store, b"p", &key_of(id), 1).unwrap();
    }
    (store, t, m)
}

#[test]
fn a_flipped_byte_in_a_node_is_an_error_naming_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut t, m) = built(dir.path());
    let s = &mut *store;
    let ns = s.namespace("t").unwrap();
    let (leaf, height) = leftmost_leaf(s, b"p");
    assert!(height >= 3);
    let mut v = s.get(ns, &node_key(b"p", leaf)).unwrap().unwrap();
    let last = v.len() - 1;
    v[last] ^= 0x40;
    s.put(ns, &node_key(b"p", leaf), &v).unwrap();
    let e = t.first(s, b"p").unwrap_err();
    assert!(
        matches!(&e, OsTreeError::Corrupt { node: Some(n), prefix, .. } if *n == leaf && prefix == b"p"),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains(&format!("node {leaf} ")) && msg.contains("checksum"), "{msg}");
    // Every operation through that leaf fails; nothing panics.
    let smallest = m.map.keys().next().unwrap().clone();
    assert!(t.add(s, b"p", &smallest, 1).is_err());
    assert!(t.add(s, b"p", &smallest, -1).is_err());
    assert!(t.select(s, b"p", 0).is_err());
    assert!(t.check(s, b"p").is_err());
    assert!(t.clear(s, b"p").is_ok(), "clear reads only branches");
    assert_eq!(t.total(s, b"p").unwrap(), 0);
}

#[test]
fn purge_removes_a_tree_with_a_damaged_branch() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut t, _) = built(dir.path());
    let s = &mut *store;
    let ns = s.namespace("t").unwrap();
    let h = s.get(ns, b"p").unwrap().unwrap();
    let root = u64::from_le_bytes(h[16..24].try_into().unwrap());
    s.put(ns, &node_key(b"p", root), b"garbage").unwrap();
    let e = t.clear(s, b"p").unwrap_err();
    assert!(e.to_string().contains(&format!("node {root} ")), "{e}");
    let nodes = t.stats(s, b"p").unwrap().nodes;
    assert_eq!(t.purge(s, b"p").unwrap(), nodes + 1);
    assert_eq!(t.stats(s, b"p").unwrap().height, 0);
}

#[test]
fn damaged_headers_versions_and_misplaced_nodes_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut t, _) = built(dir.path());
    let s = &mut *store;
    let ns = s.namespace("t").unwrap();
    let good = s.get(ns, b"p").unwrap().unwrap();

    // Header checksum.
    let mut h = good.clone();
    h[40] ^= 1;
    s.put(ns, b"p", &h).unwrap();
    let e = t.total(s, b"p").unwrap_err();
    assert!(matches!(e, OsTreeError::Corrupt { node: None, .. }), "{e:?}");
    assert!(e.to_string().contains("the header of the tree at prefix 0x70"), "{e}");

    // A newer header version with a valid checksum.
    let mut h = good.clone();
    h[8] = 9;
    reseal(&mut h);
    s.put(ns, b"p", &h).unwrap();
    let e = t.total(s, b"p").unwrap_err();
    assert!(matches!(e, OsTreeError::UnknownVersion { node: None, version: 9, .. }), "{e:?}");
    s.put(ns, b"p", &good).unwrap();

    // A node of a newer version.
    let (leaf, _) = leftmost_leaf(s, b"p");
    let lk = node_key(b"p", leaf);
    let good_leaf = s.get(ns, &lk).unwrap().unwrap();
    let mut v = good_leaf.clone();
    v[4] = 2;
    reseal(&mut v);
    s.put(ns, &lk, &v).unwrap();
    let e = t.first(s, b"p").unwrap_err();
    assert!(
        matches!(e, OsTreeError::UnknownVersion { node: Some(n), version: 2, .. } if n == leaf),
        "{e:?}"
    );

    // A valid node stored under another node's key.
    let (root_id, _) = {
        let h = s.get(ns, b"p").unwrap().unwrap();
        (u64::from_le_bytes(h[16..24].try_into().unwrap()), ())
    };
    let root = s.get(ns, &node_key(b"p", root_id)).unwrap().unwrap();
    s.put(ns, &lk, &root).unwrap();
    let e = t.first(s, b"p").unwrap_err();
    assert!(e.to_string().contains(&format!("carries node id {root_id}")), "{e}");

    // A leaf whose first two entries are swapped, with a valid checksum: reads go on
    // (the checksum is what guards the bytes), the full check names the node.
    let mut v = good_leaf.clone();
    let entry_end = |at: usize| at + 2 + u16::from_le_bytes([v[at], v[at + 1]]) as usize + 8;
    let (a, b) = (16, entry_end(16));
    let c = entry_end(b);
    let swapped = [&v[b..c], &v[a..b]].concat();
    v[a..c].copy_from_slice(&swapped);
    reseal(&mut v);
    s.put(ns, &lk, &v).unwrap();
    let e = t.check(s, b"p").unwrap_err();
    assert!(
        matches!(&e, OsTreeError::Corrupt { node: Some(n), .. } if *n == leaf)
            && e.to_string().contains("out of order"),
        "{e}"
    );

    // A node missing from the store.
    s.delete(ns, &lk).unwrap();
    let e = t.first(s, b"p").unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    s.put(ns, &lk, &good_leaf).unwrap();
    t.check(s, b"p").unwrap();
}

#[test]
fn bad_arguments_are_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut t, m) = built(dir.path());
    let s = &mut *store;
    let before = contents(&mut t, s, b"p");
    assert_eq!(before, m.map);
    let long = vec![7u8; MAX_KEY_LEN + 1];
    assert!(matches!(t.add(s, b"p", &long, 1), Err(OsTreeError::KeyTooLong { .. })));
    assert!(t.add(s, b"p", &vec![7u8; MAX_KEY_LEN], 1).is_ok());
    assert!(t.add(s, b"p", &vec![7u8; MAX_KEY_LEN], -1).is_ok());
    assert!(matches!(
        t.add(s, b"p", b"never added", -1),
        Err(OsTreeError::NotPresent { present: 0, delta: -1, .. })
    ));
    let k = key_of(5);
    assert!(matches!(
        t.add(s, b"p", &k, -2),
        Err(OsTreeError::NotPresent { present: 1, delta: -2, .. })
    ));
    assert!(matches!(t.add(s, b"empty", b"x", -1), Err(OsTreeError::NotPresent { .. })));
    assert_eq!(t.add(s, b"p", &k, 0).unwrap(), 1);
    // Counts stay below 2^64.
    assert_eq!(t.add(s, b"big", b"a", i64::MAX).unwrap(), i64::MAX as u64);
    assert_eq!(t.add(s, b"big", b"b", i64::MAX).unwrap(), i64::MAX as u64);
    assert!(matches!(t.add(s, b"big", b"c", 2), Err(OsTreeError::Overflow { .. })));
    assert!(matches!(t.add(s, b"big", b"a", 2), Err(OsTreeError::Overflow { .. })));
    assert_eq!(t.total(s, b"big").unwrap(), 2 * (i64::MAX as u64));
    assert_eq!(contents(&mut t, s, b"p"), before);
    t.check(s, b"p").unwrap();
    assert!(matches!(
        OsTree::new(s.namespace("t").unwrap()).with_fanout(3, DEFAULT_FANOUT),
        Err(OsTreeError::InvalidFanout { leaf: 3, .. })
    ));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The stored bytes of a small two-level tree (format version 1), as earlier builds
/// wrote them: a checkpoint written before must load, so these bytes must not change
/// without a new format version. Each pair is (key, value) in hex.
const PINNED_TREE: [(&str, &str); 4] = [
    (
        "50",
        "50b3dc804f535452010204000400000003000000000000000400000000000000070000000000000005000000000000000300000000000000",
    ),
    (
        "500000000000000001",
        "faf72bb4010002000100000000000000000001000000000000000100610200000000000000",
    ),
    (
        "500000000000000002",
        "89f571bf01000300020000000000000001006202000000000000000200636301000000000000000100640100000000000000",
    ),
    (
        "500000000000000003",
        "1c0885690101020003000000000000000100000000000000030000000000000002000000000000000000020000000000000004000000000000000300000000000000010062",
    ),
];

#[test]
fn format_v1_bytes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(StoreKind::Mem, dir.path());
    let s = &mut *store;
    let ns = s.namespace("t").unwrap();
    let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
    for (k, m) in [(&b"d"[..], 1), (b"a", 2), (b"cc", 1), (b"b", 3), (b"", 1)] {
        t.add(s, b"P", k, m).unwrap();
    }
    t.add(s, b"P", b"b", -1).unwrap();
    let mut got = Vec::new();
    s.scan_prefix(ns, b"P", &mut |k, v| {
        got.push((hex(k), hex(v)));
        true
    })
    .unwrap();
    got.sort();
    let want: Vec<(String, String)> =
        PINNED_TREE.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert_eq!(got, want, "the stored bytes of a version-1 tree changed");

    // The pinned image, written into an empty store, reads as that tree.
    let dir2 = tempfile::tempdir().unwrap();
    let mut store2 = open(StoreKind::Mem, dir2.path());
    let s2 = &mut *store2;
    for (k, v) in PINNED_TREE {
        s2.put(ns, &unhex(k), &unhex(v)).unwrap();
    }
    let mut t2 = OsTree::new(ns);
    let st = t2.check(s2, b"P").unwrap();
    assert_eq!((st.total, st.distinct, st.height, st.leaf_capacity), (7, 5, 2, 4));
    let want: BTreeMap<Vec<u8>, u64> = [(&b""[..], 1), (b"a", 2), (b"b", 2), (b"cc", 1), (b"d", 1)]
        .into_iter()
        .map(|(k, m)| (k.to_vec(), m))
        .collect();
    assert_eq!(contents(&mut t2, s2, b"P"), want);
    assert_eq!(t2.select(s2, b"P", 4).unwrap().as_deref(), Some(&b"b"[..]));
}
