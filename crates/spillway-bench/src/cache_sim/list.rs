//! The building blocks of the reference policies: a slab of nodes addressed by `u32`
//! indices, intrusive doubly linked lists threaded through it, and a key map with a
//! cheap hasher. After warm-up an access allocates nothing: freed slots are reused and
//! the map and slab only grow to the policy's bound.
//!
//! A list runs from its *front* (oldest: LRU end, FIFO head, LIRS stack bottom) to its
//! *back* (newest: MRU end, LIRS stack top). A node may sit in several lists at once
//! if it has one [`Link`] per list (LIRS: stack S, queue Q, non-resident queue); lists
//! that a node is in at most one of at a time (ARC's T1, T2, B1, B2) share a link.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The index that means "no node".
pub(crate) const NIL: u32 = u32::MAX;

/// A node's neighbours in one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    pub(crate) prev: u32,
    pub(crate) next: u32,
}

impl Link {
    /// Not in a list.
    pub(crate) const NONE: Link = Link { prev: NIL, next: NIL };
}

/// A node with one link per list slot it can be in.
pub(crate) trait Linked {
    /// The node's link of slot `slot`.
    fn link(&self, slot: usize) -> Link;
    /// The node's link of slot `slot`, to change.
    fn link_mut(&mut self, slot: usize) -> &mut Link;
}

/// Nodes in a `Vec`, freed slots kept for reuse.
#[derive(Debug, Default)]
pub(crate) struct Slab<N> {
    nodes: Vec<N>,
    free: Vec<u32>,
}

impl<N> Slab<N> {
    /// An empty slab with room for `n` nodes.
    pub(crate) fn with_capacity(n: usize) -> Self {
        Slab { nodes: Vec::with_capacity(n), free: Vec::new() }
    }

    /// Stores `node` and returns its index.
    pub(crate) fn alloc(&mut self, node: N) -> u32 {
        if let Some(i) = self.free.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            let i = u32::try_from(self.nodes.len()).expect("fewer than 2^32 - 1 nodes");
            assert!(i != NIL, "fewer than 2^32 - 1 nodes");
            self.nodes.push(node);
            i
        }
    }

    /// Frees slot `i` for reuse (its contents stay until then).
    pub(crate) fn free(&mut self, i: u32) {
        self.free.push(i);
    }

    /// Live nodes (allocated and not freed).
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        self.nodes.len() - self.free.len()
    }
}

impl<N> std::ops::Index<u32> for Slab<N> {
    type Output = N;
    fn index(&self, i: u32) -> &N {
        &self.nodes[i as usize]
    }
}

impl<N> std::ops::IndexMut<u32> for Slab<N> {
    fn index_mut(&mut self, i: u32) -> &mut N {
        &mut self.nodes[i as usize]
    }
}

/// An intrusive doubly linked list over a [`Slab`], using link slot `slot` of its nodes.
#[derive(Debug)]
pub(crate) struct List {
    front: u32,
    back: u32,
    len: usize,
    slot: usize,
}

impl List {
    /// An empty list over link slot `slot`.
    pub(crate) const fn new(slot: usize) -> Self {
        List { front: NIL, back: NIL, len: 0, slot }
    }

    /// Nodes in the list.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The oldest node.
    pub(crate) fn front(&self) -> Option<u32> {
        (self.front != NIL).then_some(self.front)
    }

    /// The newest node.
    pub(crate) fn back(&self) -> Option<u32> {
        (self.back != NIL).then_some(self.back)
    }

    /// Appends `i` (not in this list) at the back.
    pub(crate) fn push_back<N: Linked>(&mut self, nodes: &mut Slab<N>, i: u32) {
        let old_back = self.back;
        *nodes[i].link_mut(self.slot) = Link { prev: old_back, next: NIL };
        if old_back == NIL {
            self.front = i;
        } else {
            nodes[old_back].link_mut(self.slot).next = i;
        }
        self.back = i;
        self.len += 1;
    }

    /// Unlinks `i`, which must be in this list.
    pub(crate) fn remove<N: Linked>(&mut self, nodes: &mut Slab<N>, i: u32) {
        let Link { prev, next } = nodes[i].link(self.slot);
        if prev == NIL {
            debug_assert_eq!(self.front, i, "node is not in this list");
            self.front = next;
        } else {
            nodes[prev].link_mut(self.slot).next = next;
        }
        if next == NIL {
            debug_assert_eq!(self.back, i, "node is not in this list");
            self.back = prev;
        } else {
            nodes[next].link_mut(self.slot).prev = prev;
        }
        *nodes[i].link_mut(self.slot) = Link::NONE;
        self.len -= 1;
    }

    /// Unlinks and returns the oldest node.
    pub(crate) fn pop_front<N: Linked>(&mut self, nodes: &mut Slab<N>) -> Option<u32> {
        let i = self.front()?;
        self.remove(nodes, i);
        Some(i)
    }

    /// Moves `i` (in this list) to the back.
    pub(crate) fn move_to_back<N: Linked>(&mut self, nodes: &mut Slab<N>, i: u32) {
        if self.back != i {
            self.remove(nodes, i);
            self.push_back(nodes, i);
        }
    }

    /// The nodes front to back (for tests and invariant checks).
    #[cfg(test)]
    pub(crate) fn to_vec<N: Linked>(&self, nodes: &Slab<N>) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len);
        let mut i = self.front;
        while i != NIL {
            out.push(i);
            i = nodes[i].link(self.slot).next;
        }
        out
    }
}

/// A hasher for `u64` keys: the splitmix64 finalizer (a bijection with good avalanche),
/// far cheaper than SipHash. Trace keys are not adversarial.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Key to slab index.
pub(crate) type KeyMap = HashMap<u64, u32, BuildHasherDefault<KeyHasher>>;

/// An empty [`KeyMap`] with room for `n` keys.
pub(crate) fn key_map(n: usize) -> KeyMap {
    KeyMap::with_capacity_and_hasher(n, BuildHasherDefault::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct N(Link);
    impl Linked for N {
        fn link(&self, _: usize) -> Link {
            self.0
        }
        fn link_mut(&mut self, _: usize) -> &mut Link {
            &mut self.0
        }
    }

    #[test]
    fn list_push_remove_move_and_slot_reuse() {
        let mut slab = Slab::with_capacity(4);
        let mut l = List::new(0);
        let ids: Vec<u32> = (0..4).map(|_| slab.alloc(N(Link::NONE))).collect();
        for &i in &ids {
            l.push_back(&mut slab, i);
        }
        assert_eq!(l.to_vec(&slab), vec![0, 1, 2, 3]);
        l.move_to_back(&mut slab, 1);
        assert_eq!(l.to_vec(&slab), vec![0, 2, 3, 1]);
        l.remove(&mut slab, 3);
        assert_eq!(l.to_vec(&slab), vec![0, 2, 1]);
        assert_eq!(l.pop_front(&mut slab), Some(0));
        assert_eq!((l.front(), l.back(), l.len()), (Some(2), Some(1), 2));
        slab.free(3);
        assert_eq!(slab.alloc(N(Link::NONE)), 3, "a freed slot is reused");
        assert_eq!(slab.live(), 4);
        l.remove(&mut slab, 2);
        l.remove(&mut slab, 1);
        assert!(l.is_empty());
        assert_eq!((l.front(), l.back()), (None, None));
    }
}
