//! `arc`: the Adaptive Replacement Cache (Megiddo & Modha, FAST '03), after Caffeine's
//! simulator `policy/adaptive/ArcPolicy`.
//!
//! Resident lists T1 (seen once recently) and T2 (seen at least twice), ghost lists B1
//! and B2 (keys recently evicted from T1 and T2), and a target size `p` for T1. A miss
//! that finds the key in B1 grows `p` by `max(|B2| / |B1|, 1)` (integer division, as in
//! Caffeine); one in B2 shrinks it by `max(|B1| / |B2|, 1)`; either brings the key back
//! into T2. REPLACE moves the LRU of T1 to B1 if `|T1| > p` (or `|T1| = p` and the key
//! came from B2), else the LRU of T2 to B2. Each list is LRU-ordered, front = LRU.

use super::list::{key_map, KeyMap, Link, Linked, List, Slab};
use super::Policy;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    T1,
    T2,
    B1,
    B2,
}

#[derive(Debug)]
struct Node {
    key: u64,
    queue: Queue,
    link: Link,
}

impl Linked for Node {
    fn link(&self, _: usize) -> Link {
        self.link
    }
    fn link_mut(&mut self, _: usize) -> &mut Link {
        &mut self.link
    }
}

/// ARC over `capacity` resident entries and at most `capacity` ghost keys.
#[derive(Debug)]
pub struct Arc {
    capacity: usize,
    p: usize,
    map: KeyMap,
    nodes: Slab<Node>,
    /// T1, T2, B1, B2, indexed by `Queue as usize`.
    lists: [List; 4],
}

impl Arc {
    /// An empty cache of `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Arc {
            capacity,
            p: 0,
            map: key_map(2 * capacity + 1),
            nodes: Slab::with_capacity(2 * capacity + 1),
            lists: [List::new(0), List::new(0), List::new(0), List::new(0)],
        }
    }

    /// The current target size of T1.
    pub fn target_t1(&self) -> usize {
        self.p
    }

    fn len(&self, q: Queue) -> usize {
        self.lists[q as usize].len()
    }

    /// Moves `i` from its list to the back (MRU end) of `to`.
    fn move_to(&mut self, i: u32, to: Queue) {
        let from = self.nodes[i].queue;
        self.lists[from as usize].remove(&mut self.nodes, i);
        self.lists[to as usize].push_back(&mut self.nodes, i);
        self.nodes[i].queue = to;
    }

    /// Drops the LRU key of `q` from the cache and the directory.
    fn drop_lru(&mut self, q: Queue) {
        let victim = self.lists[q as usize].pop_front(&mut self.nodes).expect("ARC: list is empty");
        self.map.remove(&self.nodes[victim].key);
        self.nodes.free(victim);
    }

    /// REPLACE(p): demotes the LRU of T1 to B1 or the LRU of T2 to B2.
    fn replace(&mut self, candidate_in_b2: bool) {
        let t1 = self.len(Queue::T1);
        let from_t1 = t1 >= 1 && ((candidate_in_b2 && t1 == self.p) || t1 > self.p);
        let (from, to) = if from_t1 { (Queue::T1, Queue::B1) } else { (Queue::T2, Queue::B2) };
        let victim = self.lists[from as usize]
            .front()
            .expect("ARC invariant: the list REPLACE picks is non-empty");
        self.move_to(victim, to);
    }

    fn on_miss(&mut self, key: u64) {
        let c = self.capacity;
        let l1 = self.len(Queue::T1) + self.len(Queue::B1);
        let l2 = self.len(Queue::T2) + self.len(Queue::B2);
        if l1 == c {
            if self.len(Queue::T1) < c {
                self.drop_lru(Queue::B1);
                self.replace(false);
            } else {
                self.drop_lru(Queue::T1);
            }
        } else if l1 < c && l1 + l2 >= c {
            if l1 + l2 >= 2 * c {
                self.drop_lru(Queue::B2);
            }
            self.replace(false);
        }
        let i = self.nodes.alloc(Node { key, queue: Queue::T1, link: Link::NONE });
        self.map.insert(key, i);
        self.lists[Queue::T1 as usize].push_back(&mut self.nodes, i);
    }
}

impl Policy for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn access(&mut self, key: u64) -> bool {
        let Some(&i) = self.map.get(&key) else {
            self.on_miss(key);
            return false;
        };
        match self.nodes[i].queue {
            Queue::T1 | Queue::T2 => {
                self.move_to(i, Queue::T2);
                true
            }
            Queue::B1 => {
                let step = (self.len(Queue::B2) / self.len(Queue::B1)).max(1);
                self.p = (self.p + step).min(self.capacity);
                self.replace(false);
                self.move_to(i, Queue::T2);
                false
            }
            Queue::B2 => {
                let step = (self.len(Queue::B1) / self.len(Queue::B2)).max(1);
                self.p = self.p.saturating_sub(step);
                self.replace(true);
                self.move_to(i, Queue::T2);
                false
            }
        }
    }

    fn resident(&self) -> Option<usize> {
        Some(self.len(Queue::T1) + self.len(Queue::T2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_sim::tests::pattern;

    impl Arc {
        /// The keys of T1, T2, B1, B2, each LRU..MRU.
        fn state(&self) -> [Vec<u64>; 4] {
            self.lists
                .each_ref()
                .map(|q| q.to_vec(&self.nodes).into_iter().map(|i| self.nodes[i].key).collect())
        }
    }

    #[test]
    fn hand_computed_sequence() {
        // c = 2. Lists LRU..MRU as [T1 | T2 | B1 | B2], p = 0 until said otherwise.
        // 1 miss: L1=0 -> [1 | - | - | -]
        // 2 miss: L1=1 <c, L1+L2=1 <c -> [1 2 | - | - | -]
        // 1 hit:  -> [2 | 1 | - | -]
        // 3 miss: L1=1 <c, L1+L2=2 >=c: REPLACE: |T1|=1 > p=0 -> 2 to B1
        //         -> [3 | 1 | 2 | -]
        // 2 miss (B1 hit): p = min(2, 0 + max(0/1, 1)) = 1; REPLACE: |T1|=1 > 1? no
        //         -> 1 from T2 to B2; 2 to T2 -> [3 | 2 | - | 1]
        // 1 miss (B2 hit): p = 1 - max(0/1, 1) = 0; REPLACE(in B2): |T1|=1 > 0 -> 3 to B1;
        //         1 to T2 -> [- | 2 1 | 3 | -]
        // 3 miss (B1 hit): p = min(2, 0 + 1) = 1; REPLACE: |T1|=0 -> 2 from T2 to B2;
        //         -> [- | 1 3 | - | 2]
        // 4 miss: L1=0 <c, L1+L2=3 >=c, <2c: REPLACE: |T1|=0 -> 1 to B2
        //         -> [4 | 3 | - | 2 1]
        // 3 hit -> [4 | 3 | - | 2 1]; 4 hit -> [- | 3 4 | - | 2 1]
        // 5 miss: L1=0, L1+L2=4 >= 2c: drop LRU of B2 (2); REPLACE: T1 empty -> 3 to B2
        //         -> [5 | 4 | - | 1 3]
        let mut p = Arc::new(2);
        let got = pattern(&mut p, &[1, 2, 1, 3, 2, 1, 3, 4, 3, 4, 5]);
        assert_eq!(got, "mmhmmmmmhhm");
        assert_eq!(p.state(), [vec![5], vec![4], vec![], vec![1, 3]]);
        assert_eq!(p.target_t1(), 1);
    }

    #[test]
    fn t1_full_drops_its_lru_without_a_ghost() {
        // c = 2, only new keys: L1 = |T1| = c, so the LRU of T1 is dropped, not demoted.
        let mut p = Arc::new(2);
        assert_eq!(pattern(&mut p, &[1, 2, 3, 4]), "mmmm");
        assert_eq!(p.state(), [vec![3, 4], vec![], vec![], vec![]]);
    }
}
