//! LRU stack distances (reuse distances) in O(log n) per access with a Fenwick tree over
//! access positions, and the LRU miss-ratio curve they imply.
//!
//! The **stack distance** of an access to key `k` is the number of *distinct other*
//! keys accessed since the previous access to `k` (0 for an immediate re-access); a first
//! access has none (a cold miss). An LRU cache holding `c` keys hits an access exactly
//! when its stack distance is below `c` (Mattson et al., 1970), so one pass gives the
//! miss ratio for every cache size.
//!
//! Memory is O(distinct keys): the Fenwick tree marks, per key, the position of its last
//! access; when the positions run out the live marks are renumbered 0.. in order and the
//! tree is rebuilt with room for as many accesses again (amortized O(1) per access).

use std::collections::HashMap;
use std::hash::Hash;

const NONE: u32 = u32::MAX;

/// Computes stack distances of accesses to dense key ids `0..`.
#[derive(Clone, Debug)]
pub struct StackDistanceTracker {
    /// Fenwick tree over positions (1-based internally), counts of marked positions.
    tree: Vec<u32>,
    /// Key id owning each position's mark, or NONE.
    owner: Vec<u32>,
    /// Per key id: position of its last access, or NONE.
    last: Vec<u32>,
    next_pos: usize,
    live: usize,
    min_capacity: usize,
}

impl Default for StackDistanceTracker {
    fn default() -> Self {
        StackDistanceTracker::new()
    }
}

impl StackDistanceTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        StackDistanceTracker::with_capacity(1 << 16)
    }

    /// An empty tracker whose position space starts at `positions` (at least 2); useful to
    /// exercise renumbering in tests.
    pub fn with_capacity(positions: usize) -> Self {
        let cap = positions.max(2);
        StackDistanceTracker {
            tree: vec![0; cap + 1],
            owner: vec![NONE; cap],
            last: Vec::new(),
            next_pos: 0,
            live: 0,
            min_capacity: cap,
        }
    }

    fn add(&mut self, pos: usize, delta: i32) {
        let mut i = pos + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Number of marks at positions `0..=pos`.
    fn prefix(&self, pos: usize) -> u64 {
        let mut i = pos + 1;
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.tree[i]);
            i -= i & i.wrapping_neg();
        }
        s
    }

    fn renumber(&mut self) {
        let cap = (2 * self.live + 2).max(self.min_capacity);
        let mut owner = vec![NONE; cap];
        let mut n = 0;
        for &k in self.owner.iter().take(self.next_pos) {
            if k != NONE {
                owner[n] = k;
                self.last[k as usize] = n as u32;
                n += 1;
            }
        }
        // Linear Fenwick build.
        let mut tree = vec![0u32; cap + 1];
        for i in 1..=cap {
            if owner[i - 1] != NONE {
                tree[i] += 1;
            }
            let j = i + (i & i.wrapping_neg());
            if j <= cap {
                tree[j] += tree[i];
            }
        }
        self.tree = tree;
        self.owner = owner;
        self.next_pos = n;
    }

    /// Records an access to `key` (a dense id below `u32::MAX`) and returns its stack
    /// distance, or `None` for a first access.
    pub fn access(&mut self, key: u32) -> Option<u64> {
        debug_assert!(key != NONE);
        let k = key as usize;
        if k >= self.last.len() {
            self.last.resize(k + 1, NONE);
        }
        if self.next_pos == self.owner.len() {
            self.renumber();
        }
        let prev = self.last[k];
        let dist = if prev == NONE {
            self.live += 1;
            None
        } else {
            let p = prev as usize;
            // Marks strictly between p and next_pos: every position after p is below
            // next_pos, so it is prefix(end) - prefix(p).
            let d = self.prefix(self.next_pos.saturating_sub(1)) - self.prefix(p);
            self.add(p, -1);
            self.owner[p] = NONE;
            Some(d)
        };
        let pos = self.next_pos;
        self.add(pos, 1);
        self.owner[pos] = key;
        self.last[k] = pos as u32;
        self.next_pos += 1;
        dist
    }

    /// Distinct keys seen.
    pub fn distinct(&self) -> usize {
        self.live
    }
}

/// Stack distances of a key sequence (`None` = first access), for keys of any type.
pub fn stack_distances<K: Hash + Eq>(keys: impl IntoIterator<Item = K>) -> Vec<Option<u64>> {
    let mut ids: HashMap<K, u32> = HashMap::new();
    let mut t = StackDistanceTracker::new();
    keys.into_iter()
        .map(|k| {
            let n = ids.len() as u32;
            let id = *ids.entry(k).or_insert(n);
            t.access(id)
        })
        .collect()
}

/// Histogram of stack distances: the exact count per distance, plus cold misses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackDistances {
    /// First accesses (misses in a cache of any size).
    pub cold: u64,
    /// `counts[d]` = accesses with stack distance `d`.
    pub counts: Vec<u64>,
}

impl StackDistances {
    /// Adds one access's distance.
    pub fn record(&mut self, d: Option<u64>) {
        match d {
            None => self.cold += 1,
            Some(d) => {
                let d = d as usize;
                if d >= self.counts.len() {
                    self.counts.resize(d + 1, 0);
                }
                self.counts[d] += 1;
            }
        }
    }

    /// Total accesses.
    pub fn accesses(&self) -> u64 {
        self.cold + self.counts.iter().sum::<u64>()
    }

    /// Misses of an LRU cache holding `cache_keys` keys: cold misses plus accesses with
    /// distance at least `cache_keys`.
    pub fn misses(&self, cache_keys: u64) -> u64 {
        let from = usize::try_from(cache_keys).unwrap_or(usize::MAX).min(self.counts.len());
        self.cold + self.counts[from..].iter().sum::<u64>()
    }

    /// Miss ratio of an LRU cache holding `cache_keys` keys (0 for no accesses).
    pub fn miss_ratio(&self, cache_keys: u64) -> f64 {
        let n = self.accesses();
        if n == 0 {
            0.0
        } else {
            self.misses(cache_keys) as f64 / n as f64
        }
    }

    /// Miss ratios at each of `sizes`, computed in one pass over the histogram.
    pub fn miss_ratio_curve(&self, sizes: &[u64]) -> Vec<(u64, f64)> {
        let n = self.accesses();
        // suffix[i] = sum of counts[i..]
        let mut suffix = vec![0u64; self.counts.len() + 1];
        for i in (0..self.counts.len()).rev() {
            suffix[i] = suffix[i + 1] + self.counts[i];
        }
        sizes
            .iter()
            .map(|&c| {
                let i = usize::try_from(c).unwrap_or(usize::MAX).min(self.counts.len());
                let m = self.cold + suffix[i];
                (c, if n == 0 { 0.0 } else { m as f64 / n as f64 })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn oracle(keys: &[u8]) -> Vec<Option<u64>> {
        (0..keys.len())
            .map(|t| {
                let p = (0..t).rev().find(|&p| keys[p] == keys[t])?;
                let mut seen: Vec<u8> = keys[p + 1..t].to_vec();
                seen.sort_unstable();
                seen.dedup();
                Some(seen.len() as u64)
            })
            .collect()
    }

    fn lru_misses(keys: &[u8], cap: usize) -> u64 {
        let mut cache: Vec<u8> = Vec::new(); // most recent last
        let mut misses = 0;
        for &k in keys {
            if let Some(i) = cache.iter().position(|&x| x == k) {
                cache.remove(i);
            } else {
                misses += 1;
                if cap > 0 && cache.len() == cap {
                    cache.remove(0);
                }
            }
            if cap > 0 {
                cache.push(k);
            }
        }
        misses
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn matches_brute_force(keys in proptest::collection::vec(0u8..20, 0..300),
                               cap in 2usize..40) {
            let want = oracle(&keys);
            prop_assert_eq!(&stack_distances(keys.iter().copied()), &want);
            // Small position space: renumbering happens many times.
            let mut t = StackDistanceTracker::with_capacity(cap);
            let got: Vec<Option<u64>> = keys.iter().map(|&k| t.access(u32::from(k))).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn miss_ratio_curve_matches_lru_simulation(
            keys in proptest::collection::vec(0u8..30, 0..400)) {
            let mut h = StackDistances::default();
            for d in stack_distances(keys.iter().copied()) {
                h.record(d);
            }
            let sizes: Vec<u64> = (0..35).collect();
            let curve = h.miss_ratio_curve(&sizes);
            for (c, ratio) in curve {
                let m = lru_misses(&keys, c as usize);
                prop_assert_eq!(h.misses(c), m, "cache {}", c);
                if !keys.is_empty() {
                    prop_assert!((ratio - m as f64 / keys.len() as f64).abs() < 1e-12);
                }
            }
        }
    }

    #[test]
    fn cyclic_pattern() {
        let keys: Vec<u32> = (0..100).map(|i| i % 10).collect();
        let d = stack_distances(keys);
        assert!(d[..10].iter().all(Option::is_none));
        assert!(d[10..].iter().all(|&x| x == Some(9)));
    }
}
