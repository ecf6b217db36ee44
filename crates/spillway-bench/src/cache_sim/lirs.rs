//! `lirs`: Low Inter-reference Recency Set (Jiang & Zhang, SIGMETRICS '02), after
//! Caffeine's simulator `policy/irr/LirsPolicy` with its defaults (`lirs.percent-hot`
//! 0.99, i.e. 1% of the capacity for resident HIR entries, and
//! `lirs.non-resident-multiplier` 2.0).
//!
//! Entries are LIR (hot, resident), resident HIR or non-resident HIR (a remembered
//! key). Stack S orders LIR and HIR entries by recency, bottom = oldest, and always has
//! a LIR entry at the bottom ("stack pruning" drops the HIR entries below the oldest
//! LIR one, forgetting non-resident keys). Queue Q holds the resident HIR entries, the
//! eviction candidates. A third list, NR, holds the non-resident HIR entries in S so
//! that at most `2 × capacity` of them are kept (oldest forgotten first).
//!
//! - LIR hit: to the top of S; prune if it was the bottom.
//! - Resident HIR hit: to the top of S. If it was in S below the top it becomes LIR,
//!   leaves Q, and the bottom LIR entry becomes resident HIR at the top of Q; prune.
//!   Otherwise it moves to the top of Q.
//! - Miss: while fewer than `floor(capacity * 0.99)` LIR entries exist the key becomes
//!   LIR; else while the cache is not full it becomes resident HIR in Q. Once full, the
//!   bottom of Q is evicted (kept in S as non-resident if there, then prune), and the
//!   key goes to the top of S: if it was still in S it becomes LIR and the bottom LIR
//!   entry is demoted to Q (prune), else it is resident HIR at the top of Q.
//!
//! Pruning walks S from the bottom, so an access is O(1) amortized: each entry is
//! pushed onto S once per access and popped at most once.

use super::list::{key_map, KeyMap, Link, Linked, List, Slab};
use super::Policy;

/// Link slots of a node.
const S: usize = 0;
const Q: usize = 1;
const NR: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Lir,
    HirResident,
    HirNonResident,
}

#[derive(Debug)]
struct Node {
    key: u64,
    status: Status,
    links: [Link; 3],
    /// Membership bits, `1 << slot`.
    member: u8,
}

impl Linked for Node {
    fn link(&self, slot: usize) -> Link {
        self.links[slot]
    }
    fn link_mut(&mut self, slot: usize) -> &mut Link {
        &mut self.links[slot]
    }
}

/// LIRS over `capacity` resident entries.
#[derive(Debug)]
pub struct Lirs {
    capacity: usize,
    max_hot: usize,
    max_non_resident: usize,
    hot: usize,
    resident: usize,
    map: KeyMap,
    nodes: Slab<Node>,
    /// S, Q and NR by link slot; front = bottom (oldest), back = top.
    lists: [List; 3],
}

impl Lirs {
    /// An empty cache of `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        // Integer forms of Caffeine's `(int) (maximumSize * 0.99)` and `* 2.0`.
        let max_hot = capacity * 99 / 100;
        let max_non_resident = capacity * 2;
        Lirs {
            capacity,
            max_hot,
            max_non_resident,
            hot: 0,
            resident: 0,
            map: key_map(capacity + max_non_resident + 1),
            nodes: Slab::with_capacity(capacity + max_non_resident + 1),
            lists: [List::new(S), List::new(Q), List::new(NR)],
        }
    }

    fn is_in(&self, i: u32, slot: usize) -> bool {
        self.nodes[i].member & (1 << slot) != 0
    }

    /// Moves `i` to the top of list `slot`, adding it if absent.
    fn move_to_top(&mut self, i: u32, slot: usize) {
        if self.is_in(i, slot) {
            self.lists[slot].move_to_back(&mut self.nodes, i);
        } else {
            self.lists[slot].push_back(&mut self.nodes, i);
            self.nodes[i].member |= 1 << slot;
        }
    }

    fn remove_from(&mut self, i: u32, slot: usize) {
        debug_assert!(self.is_in(i, slot));
        self.lists[slot].remove(&mut self.nodes, i);
        self.nodes[i].member &= !(1 << slot);
    }

    /// Forgets a node that is in no list.
    fn forget(&mut self, i: u32) {
        debug_assert_eq!(self.nodes[i].member, 0);
        self.map.remove(&self.nodes[i].key);
        self.nodes.free(i);
    }

    /// Demotes the bottom of S (a LIR entry) to resident HIR at the top of Q.
    fn demote_bottom(&mut self) {
        let bottom = self.lists[S].front().expect("S is non-empty");
        debug_assert_eq!(self.nodes[bottom].status, Status::Lir, "the bottom of S is LIR");
        self.nodes[bottom].status = Status::HirResident;
        self.remove_from(bottom, S);
        self.move_to_top(bottom, Q);
        self.hot -= 1;
    }

    fn on_lir(&mut self, i: u32) {
        let was_bottom = self.lists[S].front() == Some(i);
        self.move_to_top(i, S);
        if was_bottom {
            self.prune();
        }
    }

    fn on_resident_hir(&mut self, i: u32) {
        let in_s = self.is_in(i, S);
        let is_top = self.lists[S].back() == Some(i);
        self.move_to_top(i, S);
        if in_s && !is_top {
            self.nodes[i].status = Status::Lir;
            self.hot += 1;
            self.remove_from(i, Q);
            self.demote_bottom();
            self.prune();
        } else {
            self.move_to_top(i, Q);
        }
    }

    fn on_non_resident_hir(&mut self, i: u32) {
        if self.hot < self.max_hot {
            self.move_to_top(i, S);
            self.nodes[i].status = Status::Lir;
            self.hot += 1;
        } else if self.resident < self.capacity {
            self.nodes[i].status = Status::HirResident;
            self.move_to_top(i, Q);
        } else {
            self.on_full_miss(i);
        }
        self.resident += 1;
    }

    fn on_full_miss(&mut self, i: u32) {
        self.nodes[i].status = Status::HirResident;
        if self.resident >= self.capacity {
            self.evict();
        }
        let in_s = self.is_in(i, S);
        self.move_to_top(i, S);
        if in_s {
            self.nodes[i].status = Status::Lir;
            self.hot += 1;
            self.demote_bottom();
            self.prune();
        } else {
            self.move_to_top(i, Q);
        }
    }

    /// Evicts the bottom of Q; it stays in S as non-resident if it is there.
    fn evict(&mut self) {
        self.resident -= 1;
        let victim = self.lists[Q].front().expect("Q is non-empty when the cache is full");
        self.remove_from(victim, Q);
        self.nodes[victim].status = Status::HirNonResident;
        if self.is_in(victim, S) {
            self.move_to_top(victim, NR);
        } else {
            self.forget(victim);
        }
        self.prune();
    }

    /// Drops HIR entries from the bottom of S until a LIR entry is there, then bounds the
    /// non-resident entries.
    fn prune(&mut self) {
        while let Some(bottom) = self.lists[S].front() {
            match self.nodes[bottom].status {
                Status::Lir => break,
                Status::HirResident => self.remove_from(bottom, S),
                Status::HirNonResident => {
                    self.remove_from(bottom, NR);
                    self.remove_from(bottom, S);
                    self.forget(bottom);
                }
            }
        }
        while self.lists[NR].len() > self.max_non_resident {
            let oldest = self.lists[NR].front().expect("non-empty");
            self.remove_from(oldest, NR);
            self.remove_from(oldest, S);
            self.forget(oldest);
        }
    }
}

impl Policy for Lirs {
    fn name(&self) -> &'static str {
        "lirs"
    }

    fn access(&mut self, key: u64) -> bool {
        let Some(&i) = self.map.get(&key) else {
            let i = self.nodes.alloc(Node {
                key,
                status: Status::HirNonResident,
                links: [Link::NONE; 3],
                member: 0,
            });
            self.map.insert(key, i);
            self.on_non_resident_hir(i);
            return false;
        };
        match self.nodes[i].status {
            Status::Lir => {
                self.on_lir(i);
                true
            }
            Status::HirResident => {
                self.on_resident_hir(i);
                true
            }
            Status::HirNonResident => {
                self.remove_from(i, NR);
                self.on_non_resident_hir(i);
                false
            }
        }
    }

    fn resident(&self) -> Option<usize> {
        Some(self.resident)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_sim::tests::pattern;

    impl Lirs {
        fn keys(&self, slot: usize) -> Vec<u64> {
            self.lists[slot].to_vec(&self.nodes).into_iter().map(|i| self.nodes[i].key).collect()
        }
        fn status(&self, key: u64) -> Option<Status> {
            self.map.get(&key).map(|&i| self.nodes[i].status)
        }
        /// Checks the counters against the lists.
        fn check(&self) {
            let resident =
                self.map.values().filter(|&&i| self.nodes[i].status != Status::HirNonResident);
            assert_eq!(resident.count(), self.resident);
            let hot = self.map.values().filter(|&&i| self.nodes[i].status == Status::Lir).count();
            assert_eq!(hot, self.hot);
            assert!(self.hot <= self.max_hot && self.resident <= self.capacity);
            assert!(self.lists[NR].len() <= self.max_non_resident);
            if let Some(b) = self.lists[S].front() {
                assert!(self.hot == 0 || self.nodes[b].status == Status::Lir);
            }
        }
    }

    #[test]
    fn hand_computed_sequence() {
        // capacity 3: max LIR 2 (floor 2.97), 1 resident HIR. S and Q bottom..top.
        // 1 miss: LIR. S [1]          2 miss: LIR. S [1 2]
        // 3 miss: LIR full, cache not: resident HIR. Q [3] (not in S)
        // 4 miss: full: evict Q's 3 (not in S: forgotten); prune: bottom 1 is LIR.
        //   4 not in S -> HIR: S [1 2 4], Q [4]
        // 1 hit (LIR at the bottom): S [2 4 1]; prune: 2 is LIR.
        // 3 miss: evict 4 (in S -> non-resident, NR [4]); 3 not in S: S [2 4 1 3], Q [3]
        // 4 miss (non-resident in S): evict 3 (non-resident, NR [3]); 4 was in S ->
        //   LIR, S [2 1 3 4]; bottom 2 demoted: S [1 3 4], Q [2]; prune: 1 is LIR.
        // 2 hit (resident HIR, not in S): S [1 3 4 2], Q [2]
        // 2 hit (HIR at the top of S: stays HIR): unchanged
        // 1 hit (LIR at the bottom): S [3 4 2 1]; prune drops non-resident 3: S [4 2 1]
        // 3 miss (forgotten): evict 2 (in S -> non-resident, NR [2]);
        //   S [4 2 1 3], Q [3]
        let mut p = Lirs::new(3);
        let keys = [1, 2, 3, 4, 1, 3, 4, 2, 2, 1, 3];
        assert_eq!(pattern(&mut p, &keys), "mmmmhmmhhhm");
        p.check();
        assert_eq!((p.keys(S), p.keys(Q), p.keys(NR)), (vec![4, 2, 1, 3], vec![3], vec![2]));
        assert_eq!(p.status(2), Some(Status::HirNonResident));
        assert_eq!(p.status(3), Some(Status::HirResident));

        // 1 hit (LIR, not bottom): S [4 2 3 1]
        // 3 hit (resident HIR in S below the top): to the top, S [4 2 1 3]; LIR, leaves
        //   Q; bottom 4 demoted to Q [4]; S [2 1 3]; prune drops non-resident 2: S [1 3]
        assert_eq!(pattern(&mut p, &[1, 3]), "hh");
        p.check();
        assert_eq!((p.keys(S), p.keys(Q), p.keys(NR)), (vec![1, 3], vec![4], vec![]));
        assert_eq!(p.status(2), None);
        assert_eq!(p.status(4), Some(Status::HirResident));
    }

    #[test]
    fn non_resident_entries_are_bounded() {
        // capacity 1: no LIR entries at all (floor 0.99 = 0); every new key evicts the
        // last, and S never holds more than the accessed entry.
        let mut p = Lirs::new(1);
        assert_eq!(pattern(&mut p, &[1, 1, 2, 2, 1, 3, 3]), "mhmhmmh");
        p.check();
        // capacity 2 over a long loop: at most 4 non-resident keys are remembered.
        let mut p = Lirs::new(2);
        for k in 0..100 {
            p.access(k);
            p.check();
        }
        assert!(p.map.len() <= 2 + 4);
    }
}
