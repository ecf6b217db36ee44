//! Unit tests of the segment codec, the block read-ahead, expiry and range deletes.
//! The conformance suite (tests/) checks the store against the model.

use crate::StateStoreExt;
use std::ops::Bound;
use std::sync::Arc;

use super::cache::BlockCache;
use super::segment::{decode_block, SegIter, Segment, SegmentWriter, HEADER_LEN};
use super::{TimeLogOptions, TimeLogStore};
use crate::io::StdFs;
use crate::{Direction, Error, NamespaceSpec, StateStore, StoreOptions};

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A segment of `n` records (every 7th a tombstone) in blocks of about 256 bytes.
fn write_segment(dir: &std::path::Path, n: u32) -> Segment {
    let mut w = SegmentWriter::create(&StdFs, dir, 1, 256).expect("create");
    for i in 0..n {
        let v = format!("value-{i}");
        w.add(&key(i), (i % 7 != 0).then_some(v.as_bytes())).expect("add");
    }
    w.finish().expect("finish").0
}

fn scan(seg: &Segment, lo: Option<&[u8]>, hi: Option<&[u8]>, reverse: bool) -> (Vec<u32>, u64) {
    let mut it = SegIter::new(seg, lo, hi, reverse);
    let mut out = Vec::new();
    while let Some((k, v)) = it.next_entry().expect("next") {
        let i: u32 = std::str::from_utf8(&k[3..]).expect("utf8").parse().expect("num");
        assert_eq!(v.is_none(), i.is_multiple_of(7), "tombstone flag of {i}");
        if let Some(v) = v {
            assert_eq!(v, format!("value-{i}").into_bytes());
        }
        out.push(i);
    }
    (out, it.reads)
}

#[test]
fn segment_roundtrip_point_reads_and_ranges_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let written = write_segment(dir.path(), 500);
    assert!(written.blocks.len() > 10, "{} blocks", written.blocks.len());
    drop(written);
    let seg = Segment::open(&StdFs, dir.path(), 1).expect("reopen");
    let mut reads = 0;
    for i in [0u32, 1, 6, 7, 250, 499] {
        let got = seg.get(&key(i), &mut BlockCache::default(), 0, &mut reads).expect("get");
        let want = (i % 7 != 0).then(|| format!("value-{i}").into_bytes());
        assert_eq!(got, Some(want), "key {i}");
    }
    assert_eq!(seg.get(b"key", &mut BlockCache::default(), 0, &mut reads).expect("get"), None);
    assert_eq!(seg.get(b"key9", &mut BlockCache::default(), 0, &mut reads).expect("get"), None);
    assert_eq!(seg.get(&key(500), &mut BlockCache::default(), 0, &mut reads).expect("get"), None);

    let all: Vec<u32> = (0..500).collect();
    assert_eq!(scan(&seg, None, None, false).0, all);
    assert_eq!(scan(&seg, None, None, true).0, all.iter().rev().copied().collect::<Vec<_>>());
    let (lo, hi) = (key(123), key(321));
    let mid: Vec<u32> = (123..321).collect();
    assert_eq!(scan(&seg, Some(&lo), Some(&hi), false).0, mid);
    assert_eq!(
        scan(&seg, Some(&lo), Some(&hi), true).0,
        mid.iter().rev().copied().collect::<Vec<_>>()
    );
    // Bounds between keys and outside the segment.
    assert_eq!(scan(&seg, Some(b"key000123x"), Some(b"key000126"), false).0, vec![124, 125]);
    assert_eq!(scan(&seg, Some(b"key000123x"), Some(b"key000126"), true).0, vec![125, 124]);
    assert!(scan(&seg, Some(b"zzz"), None, false).0.is_empty());
    assert!(scan(&seg, None, Some(b"a"), true).0.is_empty());
}

#[test]
fn scans_read_ahead_one_block_and_not_past_the_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_segment(dir.path(), 500);
    let blocks = seg.blocks.len() as u64;
    // A full scan reads every block exactly once (in pairs), either way.
    assert_eq!(scan(&seg, None, None, false).1, blocks);
    assert_eq!(scan(&seg, None, None, true).1, blocks);
    // A range inside one block reads that block only: no read-ahead past the range.
    let b = &seg.blocks[3];
    let lo = b.first_key.to_vec();
    let mut hi = lo.clone();
    hi.push(0);
    assert_eq!(scan(&seg, Some(&lo), Some(&hi), false).1, 1);
    assert_eq!(scan(&seg, Some(&lo), Some(&hi), true).1, 1);
}

#[test]
fn damaged_blocks_are_corrupt_not_wrong_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seg = write_segment(dir.path(), 100);
    let path = seg.path.clone();
    drop(seg);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[HEADER_LEN as usize + 20] ^= 0x04;
    std::fs::write(&path, &bytes).expect("write");
    let seg = Segment::open(&StdFs, dir.path(), 1).expect("index intact");
    let e = seg.get(&key(1), &mut BlockCache::default(), 0, &mut 0).expect_err("damaged block");
    assert!(matches!(&e, Error::Corrupt { path: p, offset: 16, .. } if *p == path), "{e}");
    // A block that fails its checksum is never decoded; a short one neither.
    assert!(decode_block(&path, 0, vec![1, 2, 3]).is_err());
    let e = SegIter::new(&seg, None, None, false).next_entry().expect_err("scan");
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}

fn opts(dir: &std::path::Path) -> StoreOptions {
    StoreOptions::new(dir)
        .memory_budget(1 << 20)
        .namespace(NamespaceSpec::list("events").hint(crate::AccessHint::Range))
}

fn event(user: u8, t: u64) -> Vec<u8> {
    let mut k = vec![user];
    k.extend_from_slice(&t.to_be_bytes());
    k
}

fn keys(s: &mut TimeLogStore) -> Vec<Vec<u8>> {
    let ns = s.namespace("events").expect("ns");
    let mut out = Vec::new();
    s.scan_ordered(
        ns,
        Bound::Unbounded,
        Bound::Unbounded,
        Direction::Forward,
        usize::MAX,
        &mut |k, _| {
            out.push(k.to_vec());
            true
        },
    )
    .expect("scan");
    out
}

#[test]
fn expire_before_drops_whole_partitions_and_their_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topts = TimeLogOptions::default().partition_span(100).memtable_fraction(0.01);
    let mut s = TimeLogStore::open(opts(dir.path()), topts.clone()).expect("open");
    let ns = s.namespace("events").expect("ns");
    for t in 0..1000u64 {
        for user in 0..3 {
            s.put(ns, &event(user, t), &[7u8; 100]).expect("put");
        }
    }
    s.checkpoint().expect("checkpoint");
    assert_eq!(s.partitions(), 10);
    let files_before = std::fs::read_dir(dir.path()).expect("ls").count();
    // 350 lies inside partition 3: partitions 0..=2 are wholly below it.
    assert_eq!(s.expire_before(350).expect("expire"), 3);
    assert_eq!(s.partitions(), 7);
    let left = keys(&mut s);
    assert_eq!(left.len(), 3 * 700);
    assert!(left.iter().all(|k| u64::from_be_bytes(k[1..9].try_into().expect("8")) >= 300));
    assert_eq!(s.get(ns, &event(1, 299)).expect("get"), None);
    assert!(s.get(ns, &event(1, 300)).expect("get").is_some());
    // The files stay while the checkpoint before the expiry is retained.
    s.checkpoint().expect("checkpoint");
    s.checkpoint().expect("checkpoint");
    let files_after = std::fs::read_dir(dir.path()).expect("ls").count();
    assert!(files_after < files_before, "{files_after} files, {files_before} before");
    drop(s);
    let mut s = TimeLogStore::open(opts(dir.path()), topts).expect("reopen");
    assert_eq!(keys(&mut s).len(), 3 * 700);
}

#[test]
fn retention_expires_relative_to_the_newest_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topts = TimeLogOptions::default().partition_span(100).retention(250);
    let mut s = TimeLogStore::open(opts(dir.path()), topts).expect("open");
    let ns = s.namespace("events").expect("ns");
    for t in 0..1000u64 {
        s.put(ns, &event(0, t), b"v").expect("put");
    }
    // Newest time 999: partitions wholly below 749 (0..=6) are gone.
    let left = keys(&mut s);
    assert_eq!(left.first().map(|k| u64::from_be_bytes(k[1..9].try_into().expect("8"))), Some(700));
    assert_eq!(left.len(), 300);
    assert_eq!(s.partitions(), 3);
}

#[test]
fn delete_range_drops_partitions_inside_and_tombstones_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Time is the first byte: user u lives in partition u.
    let topts =
        TimeLogOptions::default().time_field(0, 1).partition_span(1).memtable_fraction(0.01);
    let mut s = TimeLogStore::open(opts(dir.path()), topts.clone()).expect("open");
    let ns = s.namespace("events").expect("ns");
    for user in 0..5u8 {
        for t in 0..300u64 {
            s.put(ns, &event(user, t), &[user; 200]).expect("put");
        }
    }
    assert_eq!(s.partitions(), 5);
    // Users 1 and 2 entirely, and the first half of user 3.
    let n = s.delete_range(ns, &event(1, 0), &event(3, 150)).expect("delete_range");
    assert_eq!(n, 750);
    assert_eq!(s.partitions(), 3, "partitions 1 and 2 dropped whole");
    let left = keys(&mut s);
    assert_eq!(left.len(), 300 + 150 + 300);
    assert!(left
        .iter()
        .all(|k| k.as_slice() < &event(1, 0)[..] || k.as_slice() >= &event(3, 150)[..]));
    s.checkpoint().expect("checkpoint");
    drop(s);
    let mut s = TimeLogStore::open(opts(dir.path()), topts).expect("reopen");
    assert_eq!(keys(&mut s).len(), 750);
    // Reverse, limited.
    let mut rev = Vec::new();
    s.scan_ordered(
        ns,
        Bound::Unbounded,
        Bound::Excluded(&event(3, 152)),
        Direction::Reverse,
        3,
        &mut |k, _| {
            rev.push(k.to_vec());
            true
        },
    )
    .expect("scan");
    assert_eq!(rev, vec![event(3, 151), event(3, 150), event(0, 299)]);
}

#[test]
fn layout_comes_from_the_checkpoint_not_the_options() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = TimeLogStore::open(opts(dir.path()), TimeLogOptions::default().partition_span(10))
        .expect("open");
    let ns = s.namespace("events").expect("ns");
    for t in 0..100u64 {
        s.put(ns, &event(0, t), b"v").expect("put");
    }
    s.checkpoint().expect("checkpoint");
    drop(s);
    let fs = Arc::new(StdFs);
    let mut s = TimeLogStore::open_with_fs(opts(dir.path()), TimeLogOptions::default(), fs)
        .expect("reopen");
    assert_eq!(s.partitions(), 10);
    assert_eq!(s.get(ns, &event(0, 42)).expect("get"), Some(b"v".to_vec()));
}

#[test]
fn point_reads_hit_the_block_cache_within_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topts = TimeLogOptions::default().memtable_fraction(0.01);
    let mut s =
        TimeLogStore::open(opts(dir.path()), topts.block_cache_fraction(0.25)).expect("open");
    let ns = s.namespace("events").expect("ns");
    for t in 0..5000u64 {
        s.put(ns, &event(1, t), &[3u8; 100]).expect("put");
    }
    assert!(s.segments() > 0);
    let before = s.stats().disk_reads;
    assert!(s.get(ns, &event(1, 10)).expect("get").is_some());
    let once = s.stats().disk_reads;
    assert!(once > before, "the first read goes to disk");
    for _ in 0..10 {
        assert!(s.get(ns, &event(1, 11)).expect("get").is_some());
    }
    assert_eq!(s.stats().disk_reads, once, "later reads of the same block hit the cache");
    // Reading everything keeps the resident total within the budget.
    for t in (0..5000u64).step_by(7) {
        assert!(s.get(ns, &event(1, t)).expect("get").is_some());
    }
    let st = s.stats();
    assert!(st.bytes_in_memory <= st.memory_budget, "{st:?}");

    // Without a cache every read of a segment block goes to disk.
    drop(s);
    let topts = TimeLogOptions::default().memtable_fraction(0.01).block_cache_fraction(0.0);
    let mut s = TimeLogStore::open(opts(dir.path()), topts).expect("reopen");
    for t in 5000..10_000u64 {
        s.put(ns, &event(1, t), &[3u8; 100]).expect("put");
    }
    let before = s.stats().disk_reads;
    for _ in 0..3 {
        assert!(s.get(ns, &event(1, 5011)).expect("get").is_some());
    }
    assert_eq!(s.stats().disk_reads, before + 3);
}

/// The adaptive store recovers its parts with `recover_at`, so the checkpoint before
/// the newest must stay whole, also when the store was reopened in between: after a
/// reopen, the recovered checkpoint is the one the next checkpoint keeps as previous.
#[test]
fn the_recovered_checkpoint_stays_whole_until_two_newer_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let topts = TimeLogOptions::default().partition_span(100).memtable_fraction(0.01);
    let mut s = TimeLogStore::open(opts(dir.path()), topts.clone()).expect("open");
    let ns = s.namespace("events").expect("ns");
    for t in 0..1000u64 {
        s.put(ns, &event(0, t), &[7u8; 100]).expect("put");
    }
    assert_eq!(s.checkpoint().expect("checkpoint").seq, 1);
    drop(s);
    // Reopened at 1, the expiry retires segments checkpoint 1 names; checkpoint 2 must
    // keep them, because checkpoint 1 is still retained.
    let mut s = TimeLogStore::open(opts(dir.path()), topts.clone()).expect("reopen");
    assert_eq!(s.expire_before(500).expect("expire"), 5);
    assert_eq!(s.checkpoint().expect("checkpoint").seq, 2);
    drop(s);
    let mut s = TimeLogStore::open(opts(dir.path()).recover_at(1), topts).expect("recover 1");
    assert_eq!(keys(&mut s).len(), 1000);
}
