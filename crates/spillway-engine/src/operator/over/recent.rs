//! The recent events a late event's result can need, indexed by partition.
//!
//! With allowed lateness `L > 0` every cursor remembers the events it passed in the last
//! `L` time units, and the arrival side the events that arrived in the last `L` (see the
//! runtime's module docs). A late event's result needs only those of its own partition;
//! without an index it would scan every partition's recent events, so one late event
//! would cost work proportional to all recent traffic.
//!
//! A [`RecentList`] keeps its items in the order they were added (a queue, dropped from
//! the front as they age) and threads, for each distinct `PARTITION BY` of the query,
//! a backward link from each item to the previous item in the same bucket of a
//! direct-mapped table indexed by a hash of the partition key. Adding an item costs one
//! hash of its partition key and one table write per partitioning, with no allocation
//! and no map probe; dropping one touches nothing but the queue. A late event walks its
//! bucket's chain: its own partition's items, plus about one item of other partitions
//! (the table has twice as many buckets as items) whose stored hash tells them apart;
//! every event it then uses is still checked against the exact key.

use std::collections::VecDeque;

use crate::value::Row;

/// Hash of the partition key of `row` under `cols` (`buf` is scratch): FNV-1a over the
/// key's bytes ([`crate::value::Value::encode_key`]), then murmur3's 64-bit finalizer.
pub(super) fn part_hash(cols: &[usize], row: &Row, buf: &mut Vec<u8>) -> u64 {
    super::encode_partition(cols, row, buf);
    key_hash(buf)
}

/// The hash [`part_hash`] gives an encoded partition key.
pub(super) fn key_hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Items in the order they were added, with a per-partition index (see the module docs).
#[derive(Debug)]
pub(super) struct RecentList<T> {
    items: VecDeque<T>,
    /// Per partitioning, parallel to `items`: (the partition hash's low 32 bits, the
    /// number (mod 2^32) of the previous item in the same bucket of `newest`).
    links: Vec<VecDeque<(u32, u32)>>,
    /// Per partitioning: a direct-mapped table, bucket `hash & (len - 1)` -> the
    /// number (mod 2^32) of the newest item whose partition falls in the bucket. A
    /// number that is not among the items' (see [`RecentList::slot`]) means none.
    newest: Vec<Vec<u32>>,
    /// Items dropped from the front so far: `items[i]` is item number `base + i`.
    base: u64,
}

/// Buckets of a new table.
const MIN_BUCKETS: usize = 1024;
/// Most buckets a table grows to (16 KiB of u32, which stays in the L1/L2 cache; a
/// table as large as the list costs a cache miss per event, measured as 8% of Q1's
/// time at one minute of lateness): past it a bucket's chain holds about
/// `items / MAX_BUCKETS` items of other partitions, which a late event skips by their
/// stored hash bits (about 30 at one minute of 2,000 events/s).
const MAX_BUCKETS: usize = 1 << 12;

/// The bucket of partition hash `h` (its low bits, which the links keep: a table can
/// grow without the rows).
fn bucket(h: u64, len: usize) -> usize {
    (h as u32 as usize) & (len - 1)
}

impl<T> RecentList<T> {
    /// An empty list for `specs` partitionings.
    pub(super) fn new(specs: usize) -> RecentList<T> {
        RecentList {
            items: VecDeque::new(),
            links: (0..specs).map(|_| VecDeque::new()).collect(),
            newest: (0..specs).map(|_| vec![u32::MAX; MIN_BUCKETS]).collect(),
            base: 0,
        }
    }

    /// The position in `items` of the item whose number is `n` mod 2^32, if it is there.
    fn slot(&self, n: u32) -> Option<usize> {
        let i = n.wrapping_sub(self.base as u32) as usize;
        (i < self.items.len()).then_some(i)
    }

    /// Appends `item`, the event `row`'s, under every partitioning of `specs`.
    pub(super) fn push(&mut self, specs: &[Vec<usize>], row: &Row, item: T, buf: &mut Vec<u8>) {
        self.push_hashed(|s| part_hash(&specs[s], row, buf), item);
    }

    /// Appends `item` whose partition hash under partitioning `s` is `hash(s)`.
    pub(super) fn push_hashed(&mut self, mut hash: impl FnMut(usize) -> u64, item: T) {
        if let Some(t) = self.newest.first() {
            if t.len() < MAX_BUCKETS && 2 * (self.items.len() + 1) > t.len() {
                self.grow();
            }
        }
        let n = (self.base + self.items.len() as u64) as u32;
        for (s, (links, newest)) in self.links.iter_mut().zip(&mut self.newest).enumerate() {
            let h = hash(s);
            let b = bucket(h, newest.len());
            links.push_back((h as u32, newest[b]));
            newest[b] = n;
        }
        self.items.push_back(item);
    }

    /// Doubles the tables and relinks every item (O(items), amortized O(1) per push).
    fn grow(&mut self) {
        for (links, newest) in self.links.iter_mut().zip(&mut self.newest) {
            let len = newest.len() * 2;
            newest.clear();
            newest.resize(len, u32::MAX);
            for (i, l) in links.iter_mut().enumerate() {
                let b = bucket(u64::from(l.0), len);
                l.1 = newest[b];
                newest[b] = (self.base + i as u64) as u32;
            }
        }
    }

    /// The oldest item.
    pub(super) fn front(&self) -> Option<&T> {
        self.items.front()
    }

    /// Drops the oldest item (the tables are not touched: a number that is no longer
    /// among the items' means none).
    pub(super) fn pop_front(&mut self) -> Option<T> {
        let item = self.items.pop_front()?;
        for links in &mut self.links {
            links.pop_front();
        }
        self.base += 1;
        Some(item)
    }

    /// All items, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.items.iter()
    }

    /// The items whose partition hash is `h` under partitioning `spec`, oldest first
    /// (the other items of its bucket are skipped by their hash's low bits), and the
    /// number of links walked to find them.
    pub(super) fn partition(&self, spec: usize, h: u64) -> (Vec<&T>, u64) {
        let mut out = Vec::new();
        let mut walked = 0;
        let newest = &self.newest[spec];
        let mut at = newest[bucket(h, newest.len())];
        let mut last = usize::MAX;
        while let Some(i) = self.slot(at) {
            // Links point to older items; a position that does not go down is a number
            // from before the items (wrapped) and ends the chain.
            if i >= last {
                break;
            }
            last = i;
            walked += 1;
            let (tag, prev) = self.links[spec][i];
            if tag == h as u32 {
                out.push(&self.items[i]);
            }
            at = prev;
        }
        out.reverse();
        (out, walked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    /// Against a brute-force scan, through table growth past its cap, wrap-free drops
    /// and partitions that collide in buckets (many partitions, few buckets).
    #[test]
    fn partition_lookup_matches_a_scan() {
        let specs = vec![vec![0], vec![1, 0]];
        let mut list: RecentList<(u64, i64, i64)> = RecentList::new(specs.len());
        let mut buf = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in 0..300_000u64 {
            let (a, b) = ((next() % 5000) as i64, (next() % 3) as i64);
            let row: Row = vec![Value::Int(a), Value::Int(b)];
            list.push(&specs, &row, (n, a, b), &mut buf);
            // A window that grows to ~150k items, then shrinks to ~1k, then grows again.
            let keep = if n < 150_000 {
                150_000
            } else if n < 200_000 {
                1_000
            } else {
                40_000
            };
            while list.items.len() > keep {
                list.pop_front();
            }
            if n % 997 == 0 {
                let (a, b) = ((next() % 5000) as i64, (next() % 3) as i64);
                let row: Row = vec![Value::Int(a), Value::Int(b)];
                for (s, want) in [
                    (0, list.iter().filter(|i| i.1 == a).collect::<Vec<_>>()),
                    (1, list.iter().filter(|i| i.1 == a && i.2 == b).collect::<Vec<_>>()),
                ] {
                    let h = part_hash(&specs[s], &row, &mut buf);
                    let got: Vec<_> = list
                        .partition(s, h)
                        .0
                        .into_iter()
                        .filter(|i| if s == 0 { i.1 == a } else { i.1 == a && i.2 == b })
                        .collect();
                    assert_eq!(got, want, "item {n}, partitioning {s}");
                }
            }
        }
    }
}
