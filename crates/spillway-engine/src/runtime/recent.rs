//! The per-partition index of the events a late event's result can need.
//!
//! With allowed lateness `L > 0` every cursor remembers the events it passed in the last
//! `L` time units and the lateness buffer holds the events within `L` of the frontier
//! (see the runtime's module docs). A late event's result needs only those of its own
//! partition; without an index it would scan every partition's recent events, so one
//! late event would cost work proportional to all recent traffic. [`PartIndex`] maps a
//! hash of each partition key (one map per distinct `PARTITION BY` of the query) to the
//! positions of that partition's events, so a late event reads only its partition's
//! events (plus, rarely, those of a partition whose key hash collides; every event read
//! is still checked against the exact key).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::value::Row;

/// A `Hasher` for keys that are already well-mixed 64-bit hashes.
#[derive(Default)]
pub(super) struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

type Map<V> = HashMap<u64, VecDeque<V>, BuildHasherDefault<PassThrough>>;

/// Hash of the partition key of `row` under `cols` (`buf` is scratch): FNV-1a over the
/// key's bytes ([`crate::value::Value::encode_key`]), then murmur3's 64-bit finalizer.
pub(super) fn part_hash(cols: &[usize], row: &Row, buf: &mut Vec<u8>) -> u64 {
    super::encode_partition(cols, row, buf);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in buf.iter() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// For each distinct partitioning, partition hash -> the positions (or keys) of the
/// partition's events, in the order they were added.
#[derive(Debug)]
pub(super) struct PartIndex<V> {
    maps: Vec<Map<V>>,
}

impl<V: Copy + PartialEq + std::fmt::Debug> PartIndex<V> {
    /// An index for `specs` partitionings.
    pub(super) fn new(specs: usize) -> PartIndex<V> {
        PartIndex { maps: (0..specs).map(|_| Map::default()).collect() }
    }

    /// Appends `v` for the event `row` under every partitioning.
    pub(super) fn push_back(&mut self, specs: &[Vec<usize>], row: &Row, v: V, buf: &mut Vec<u8>) {
        for (m, cols) in self.maps.iter_mut().zip(specs) {
            m.entry(part_hash(cols, row, buf)).or_default().push_back(v);
        }
    }

    /// Inserts `v` for the event `row` at the position that keeps each partition's list
    /// sorted (`v` is placed after the entries that are `<=` it).
    pub(super) fn insert_sorted(&mut self, specs: &[Vec<usize>], row: &Row, v: V, buf: &mut Vec<u8>)
    where
        V: PartialOrd,
    {
        for (m, cols) in self.maps.iter_mut().zip(specs) {
            let list = m.entry(part_hash(cols, row, buf)).or_default();
            let mut at = list.len();
            while at > 0 && list[at - 1] > v {
                at -= 1;
            }
            list.insert(at, v);
        }
    }

    /// Removes the first entry of the event `row`'s partitions, which must be `v` (the
    /// event is the oldest one added of its partition).
    pub(super) fn pop_front(&mut self, specs: &[Vec<usize>], row: &Row, v: V, buf: &mut Vec<u8>) {
        for (m, cols) in self.maps.iter_mut().zip(specs) {
            let h = part_hash(cols, row, buf);
            if let Some(list) = m.get_mut(&h) {
                let front = list.pop_front();
                debug_assert_eq!(front, Some(v), "partition index out of step");
                if list.is_empty() {
                    m.remove(&h);
                }
            } else {
                debug_assert!(false, "partition index lost a partition");
            }
        }
    }

    /// The entries of the partition with hash `h` under partitioning `spec`.
    pub(super) fn get(&self, spec: usize, h: u64) -> impl Iterator<Item = V> + '_ {
        self.maps[spec].get(&h).into_iter().flatten().copied()
    }
}
