//! `s3fifo`: S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction",
//! SOSP '23), after Caffeine's simulator `policy/two_queue/S3FifoPolicy` with its
//! defaults (`percent-small` 0.10, `percent-ghost` 0.90, `move-to-main-threshold` 1,
//! `maximum-frequency` 3).
//!
//! Three FIFOs: *small* (10% of the capacity, rounded down), *main* (the rest) and
//! *ghost* (keys only, 90% of the capacity). Every resident entry has a frequency that a
//! hit raises by one, capped at 3. A miss first evicts until there is room, then inserts
//! the key into main if the ghost remembers it, else into small, with frequency 0.
//! Eviction takes from small while small holds at least its share (or main is empty):
//! the oldest small entry moves to main (frequency reset to 0) if its frequency is above
//! the threshold — seen at least twice while in small — else its key goes to the ghost
//! and the eviction is done; moving to main evicts from main if main is then over its
//! share. Main is a clock: its oldest entry with frequency > 0 is moved to the back with
//! the frequency decreased, the first with 0 is evicted.
//!
//! One deviation: Caffeine evicts from small whenever `|small| >= max_small`, which
//! loops forever when small is empty and its share is 0 (capacity below 10); here an
//! empty small falls through to main. Nothing else changes.

use super::list::{key_map, KeyMap, Link, Linked, List, Slab};
use super::Policy;

/// Caffeine's `s3fifo.move-to-main-threshold`: promoted if frequency is above it.
const MOVE_TO_MAIN_THRESHOLD: u8 = 1;
/// Caffeine's `s3fifo.maximum-frequency` (a 2-bit counter).
const MAX_FREQUENCY: u8 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Queue {
    Small,
    Main,
    Ghost,
}

#[derive(Debug)]
struct Node {
    key: u64,
    freq: u8,
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

/// S3-FIFO over `capacity` resident entries.
#[derive(Debug)]
pub struct S3Fifo {
    capacity: usize,
    max_small: usize,
    max_main: usize,
    max_ghost: usize,
    map: KeyMap,
    nodes: Slab<Node>,
    /// Small, main and ghost, indexed by `Queue as usize`; front = oldest.
    lists: [List; 3],
}

impl S3Fifo {
    /// An empty cache of `capacity` entries (at least 1) with Caffeine's split:
    /// small `floor(capacity * 0.1)`, ghost `floor(capacity * 0.9)`.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self::with_split(capacity, capacity / 10, capacity * 9 / 10)
    }

    fn with_split(capacity: usize, max_small: usize, max_ghost: usize) -> Self {
        S3Fifo {
            capacity,
            max_small,
            max_main: capacity - max_small,
            max_ghost,
            map: key_map(capacity + max_ghost + 1),
            nodes: Slab::with_capacity(capacity + max_ghost + 1),
            lists: [List::new(0), List::new(0), List::new(0)],
        }
    }

    fn len(&self, q: Queue) -> usize {
        self.lists[q as usize].len()
    }

    /// Moves `i` from its queue to the back (newest end) of `to`.
    fn move_to(&mut self, i: u32, to: Queue) {
        let from = self.nodes[i].queue;
        self.lists[from as usize].remove(&mut self.nodes, i);
        self.lists[to as usize].push_back(&mut self.nodes, i);
        self.nodes[i].queue = to;
    }

    /// Unlinks `i` from its queue and forgets its key.
    fn drop_node(&mut self, i: u32) {
        let q = self.nodes[i].queue;
        self.lists[q as usize].remove(&mut self.nodes, i);
        self.map.remove(&self.nodes[i].key);
        self.nodes.free(i);
    }

    fn evict(&mut self) {
        let small_over = self.len(Queue::Small) >= self.max_small && self.len(Queue::Small) > 0;
        if small_over || self.len(Queue::Main) == 0 {
            self.evict_from_small();
        } else {
            self.evict_from_main();
        }
    }

    fn evict_from_small(&mut self) {
        while let Some(victim) = self.lists[Queue::Small as usize].front() {
            if self.nodes[victim].freq > MOVE_TO_MAIN_THRESHOLD {
                self.move_to(victim, Queue::Main);
                self.nodes[victim].freq = 0;
                if self.len(Queue::Main) > self.max_main {
                    self.evict_from_main();
                }
            } else {
                self.evict_to_ghost(victim);
                return;
            }
        }
    }

    fn evict_from_main(&mut self) {
        while let Some(victim) = self.lists[Queue::Main as usize].front() {
            if self.nodes[victim].freq > 0 {
                self.nodes[victim].freq -= 1;
                self.lists[Queue::Main as usize].move_to_back(&mut self.nodes, victim);
            } else {
                self.drop_node(victim);
                return;
            }
        }
    }

    /// Evicts small's `victim`, remembering its key in the ghost (bounded by
    /// `max_ghost`, oldest forgotten first).
    fn evict_to_ghost(&mut self, victim: u32) {
        if self.max_ghost == 0 {
            self.drop_node(victim);
            return;
        }
        while self.len(Queue::Ghost) >= self.max_ghost {
            let oldest = self.lists[Queue::Ghost as usize].front().expect("non-empty");
            self.drop_node(oldest);
        }
        self.move_to(victim, Queue::Ghost);
    }

    fn on_miss(&mut self, key: u64) {
        while self.len(Queue::Small) + self.len(Queue::Main) + 1 > self.capacity {
            self.evict();
        }
        // Looked up after evicting, as Caffeine does: the evictions may have pushed
        // this very key out of the ghost.
        if let Some(&i) = self.map.get(&key) {
            debug_assert_eq!(self.nodes[i].queue, Queue::Ghost);
            self.move_to(i, Queue::Main);
            self.nodes[i].freq = 0;
        } else {
            let i = self.nodes.alloc(Node { key, freq: 0, queue: Queue::Small, link: Link::NONE });
            self.map.insert(key, i);
            self.lists[Queue::Small as usize].push_back(&mut self.nodes, i);
        }
    }
}

impl Policy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn access(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) if self.nodes[i].queue != Queue::Ghost => {
                let n = &mut self.nodes[i];
                n.freq = (n.freq + 1).min(MAX_FREQUENCY);
                true
            }
            _ => {
                self.on_miss(key);
                false
            }
        }
    }

    fn resident(&self) -> Option<usize> {
        Some(self.len(Queue::Small) + self.len(Queue::Main))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache_sim::tests::pattern;

    impl S3Fifo {
        /// (key, frequency) of small, main and ghost, oldest first.
        fn state(&self) -> [Vec<(u64, u8)>; 3] {
            self.lists.each_ref().map(|q| {
                q.to_vec(&self.nodes)
                    .into_iter()
                    .map(|i| (self.nodes[i].key, self.nodes[i].freq))
                    .collect()
            })
        }
    }

    #[test]
    fn hand_computed_sequence_caffeine_split() {
        // capacity 10: small 1, main 9, ghost 9. Queues oldest..newest, key:freq.
        // 1..10 miss: no eviction yet, all in small [1..10], freq 0.
        // 1 hit (1:1), 1 hit (1:2), 2 hit (2:1).
        // 11 miss: 10 + 1 > 10 -> evict; |small| = 10 >= 1 -> from small:
        //   1:2 > 1 -> to main [1:0] (main 1 <= 9); 2:1 -> ghost [2], done.
        //   small [3..10, 11].
        // 2 miss: 10 resident -> evict from small: 3:0 -> ghost [2 3]; then 2 is in
        //   the ghost -> main [1 2].
        // 1 hit (main 1:1), 2 hit (2:1).
        // 3 miss: evict from small: 4:0 -> ghost [3 4]; 3 in ghost -> main [1 2 3].
        let mut p = S3Fifo::new(10);
        let keys = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 1, 2, 11, 2, 1, 2, 3];
        assert_eq!(pattern(&mut p, &keys), "mmmmmmmmmmhhhmmhhm");
        let [small, main, ghost] = p.state();
        assert_eq!(small.iter().map(|e| e.0).collect::<Vec<_>>(), vec![5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(main, vec![(1, 1), (2, 1), (3, 0)]);
        assert_eq!(ghost, vec![(4, 0)]);
    }

    #[test]
    fn hand_computed_main_clock_and_ghost_bound() {
        // capacity 3 with small 1, ghost 2 (so main 2).
        // 1 2 3 miss: small [1 2 3]. 1 1 2 2 hit: 1:2, 2:2.
        // 4 miss: evict from small: 1:2 -> main [1:0]; 2:2 -> main [1 2] (2 <= 2);
        //   3:0 -> ghost [3]; small [4].
        // 1 hit (main 1:1).
        // 5 miss: evict from small: 4:0 -> ghost [3 4]; small [5].
        // 4 miss: evict from small: 5:0 -> ghost full -> forget 3 -> ghost [4 5];
        //   4 in ghost -> main [1:1 2:0 4:0] (over its share, fixed at next eviction).
        // 6 miss: |small| 0 < 1 -> from main: 1:1 -> back as 1:0 [2 4 1]; 2:0 evicted;
        //   small [6].
        // 2 miss: evict from small: 6:0 -> ghost [5 6] (4 left it for main, so there
        //   is room); 2 is not in the ghost -> small [2].
        // 1 hit (1:1), 4 hit (4:1).
        let mut p = S3Fifo::with_split(3, 1, 2);
        let keys = [1, 2, 3, 1, 1, 2, 2, 4, 1, 5, 4, 6, 2, 1, 4];
        assert_eq!(pattern(&mut p, &keys), "mmmhhhhmhmmmmhh");
        assert_eq!(p.state(), [vec![(2, 0)], vec![(4, 1), (1, 1)], vec![(5, 0), (6, 0)]]);
    }

    #[test]
    fn a_key_pushed_out_of_the_ghost_while_evicting_goes_to_small() {
        // capacity 2: small 0, main 2, ghost 1.
        // 1 2 miss: small [1 2]. 1 1 hit (1:2).
        // 3 miss: from small: 1:2 -> main [1]; 2:0 -> ghost [2]; small [3].
        // 2 miss: from small: 3:0 -> ghost full, forget 2 -> ghost [3]. 2 is no longer
        //   in the ghost -> small [2], not main.
        let mut p = S3Fifo::new(2);
        assert_eq!(pattern(&mut p, &[1, 2, 1, 1, 3, 2]), "mmhhmm");
        assert_eq!(p.state(), [vec![(2, 0)], vec![(1, 0)], vec![(3, 0)]]);
    }

    #[test]
    fn tiny_capacity_with_empty_small_share_does_not_spin() {
        // capacity 5: small share 0. After small empties into main, eviction must
        // fall through to main (Caffeine would loop forever here).
        let mut p = S3Fifo::new(5);
        let keys = [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 7, 8];
        let got = pattern(&mut p, &keys);
        assert_eq!(got, "mhhmhhmhhmhhmhhmmm");
        assert!(p.resident().unwrap() <= 5);
    }
}
