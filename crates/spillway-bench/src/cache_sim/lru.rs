//! `lru`: least recently used, after Caffeine's simulator
//! `policy/linked/LinkedPolicy` in `LRU` mode with the `Always` admittor.
//!
//! One list in access order. A hit moves the entry to the back (most recent); a miss
//! appends the key and, if that makes `capacity + 1` entries, evicts the front.

use super::list::{key_map, KeyMap, Link, Linked, List, Slab};
use super::Policy;

#[derive(Debug)]
struct Node {
    key: u64,
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

/// Least recently used eviction over `capacity` entries.
#[derive(Debug)]
pub struct Lru {
    capacity: usize,
    map: KeyMap,
    nodes: Slab<Node>,
    order: List,
}

impl Lru {
    /// An empty cache of `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Lru {
            capacity,
            map: key_map(capacity + 1),
            nodes: Slab::with_capacity(capacity + 1),
            order: List::new(0),
        }
    }

    /// Resident entries.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing is resident.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl Policy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn access(&mut self, key: u64) -> bool {
        if let Some(&i) = self.map.get(&key) {
            self.order.move_to_back(&mut self.nodes, i);
            return true;
        }
        let i = self.nodes.alloc(Node { key, link: Link::NONE });
        self.map.insert(key, i);
        self.order.push_back(&mut self.nodes, i);
        if self.order.len() > self.capacity {
            let victim = self.order.pop_front(&mut self.nodes).expect("non-empty");
            self.map.remove(&self.nodes[victim].key);
            self.nodes.free(victim);
        }
        false
    }

    fn resident(&self) -> Option<usize> {
        Some(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_sim::tests::pattern;

    #[test]
    fn hand_computed_sequence() {
        // capacity 3; list shown front (LRU) .. back (MRU)
        // 1 miss [1]; 2 miss [1 2]; 3 miss [1 2 3]; 1 hit [2 3 1];
        // 4 miss [2 3 1 4] -> evict 2 -> [3 1 4]; 2 miss -> evict 3 -> [1 4 2];
        // 1 hit [4 2 1]; 3 miss -> evict 4 -> [2 1 3]; 4 miss -> evict 2 -> [1 3 4];
        // 1 hit [3 4 1]; 2 miss -> evict 3 -> [4 1 2]; 3 miss -> evict 4 -> [1 2 3]
        let mut p = Lru::new(3);
        let got = pattern(&mut p, &[1, 2, 3, 1, 4, 2, 1, 3, 4, 1, 2, 3]);
        assert_eq!(got, "mmmhmmhmmhmm");
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn capacity_one_keeps_only_the_last_key() {
        let mut p = Lru::new(1);
        assert_eq!(pattern(&mut p, &[7, 7, 8, 7, 7]), "mhmmh");
    }
}
