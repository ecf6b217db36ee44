//! A least-recently-used cache of decoded blocks for point reads (gets, and the reads
//! behind merges and rmw). Scans stream past it so a long range read does not flush it.
//! Its capacity is what the memory budget leaves after the sparse indexes and the
//! memtables, up to [`TimeLogOptions::block_cache_fraction`](super::TimeLogOptions)
//! of the budget; it shrinks first when they grow. Segments never change and their ids
//! are never reused, so entries need no invalidation: those of a deleted segment age
//! out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::segment::Block;

/// Cached blocks by (segment id, block number), with their last use.
#[derive(Debug, Default)]
pub(crate) struct BlockCache {
    map: HashMap<(u64, u32), (Arc<Block>, u64)>,
    /// Last-use tick to key: the first entry is the least recently used.
    order: BTreeMap<u64, (u64, u32)>,
    bytes: u64,
    tick: u64,
}

impl BlockCache {
    /// Resident bytes of the cached blocks.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The cached block, marked as just used.
    pub(crate) fn get(&mut self, seg: u64, block: u32) -> Option<Arc<Block>> {
        let (b, used) = self.map.get_mut(&(seg, block))?;
        self.tick += 1;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, (seg, block));
        Some(b.clone())
    }

    /// Caches a block, then evicts down to `cap` bytes. A block larger than a quarter
    /// of `cap` is not cached.
    pub(crate) fn insert(&mut self, seg: u64, block: u32, b: Arc<Block>, cap: u64) {
        let size = b.resident_bytes();
        if size > cap / 4 || self.map.contains_key(&(seg, block)) {
            return;
        }
        self.tick += 1;
        self.map.insert((seg, block), (b, self.tick));
        self.order.insert(self.tick, (seg, block));
        self.bytes += size;
        self.trim(cap);
    }

    /// Evicts least recently used blocks until at most `cap` bytes remain.
    pub(crate) fn trim(&mut self, cap: u64) {
        while self.bytes > cap {
            let Some((_, key)) = self.order.pop_first() else { break };
            if let Some((b, _)) = self.map.remove(&key) {
                self.bytes -= b.resident_bytes();
            }
        }
    }
}
