//! A time partition: the records whose time falls in one span of
//! [`TimeLogOptions::partition_span`](super::TimeLogOptions::partition_span) units, as
//! a memtable over a stack of segments (oldest first). A key's time is a function of
//! the key, so a key lives in exactly one partition and partitions never disagree
//! about a key.

use super::cache::BlockCache;
use super::memtable::Memtable;
use super::merge::{Source, MEM_RANK};
use super::segment::{SegIter, Segment};
use crate::error::Result;

/// One partition of one namespace.
#[derive(Debug, Default)]
pub(crate) struct Partition {
    pub(crate) mem: Memtable,
    /// Segments, oldest first (increasing id).
    pub(crate) segs: Vec<Segment>,
}

impl Partition {
    /// The newest version of `key` in this partition: `Some(None)` is a tombstone.
    pub(crate) fn get(
        &self,
        key: &[u8],
        cache: &mut BlockCache,
        cap: u64,
        reads: &mut u64,
    ) -> Result<Option<Option<Vec<u8>>>> {
        if let Some(v) = self.mem.get(key) {
            return Ok(Some(v.map(<[u8]>::to_vec)));
        }
        for seg in self.segs.iter().rev() {
            if let Some(v) = seg.get(key, cache, cap, reads)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Adds this partition's inputs for a scan of `lo..hi` to `out`.
    pub(crate) fn sources<'a>(
        &'a self,
        lo: Option<&'a [u8]>,
        hi: Option<&'a [u8]>,
        reverse: bool,
        with_mem: bool,
        out: &mut Vec<(u64, Source<'a>)>,
    ) {
        if with_mem && !self.mem.is_empty() {
            out.push((MEM_RANK, Source::Mem(self.mem.range(lo, hi, reverse))));
        }
        for seg in &self.segs {
            if seg.overlaps(lo, hi) {
                out.push((seg.id, Source::Seg(SegIter::new(seg, lo, hi, reverse))));
            }
        }
    }

    /// The smallest and greatest key any version in the partition has (tombstones
    /// included).
    pub(crate) fn key_span(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut span: Option<(Vec<u8>, Vec<u8>)> =
            self.mem.key_span().map(|(a, b)| (a.to_vec(), b.to_vec()));
        for s in &self.segs {
            let (f, l) = (s.first_key(), &s.last_key[..]);
            span = Some(match span {
                None => (f.to_vec(), l.to_vec()),
                Some((a, b)) => (a.min(f.to_vec()), b.max(l.to_vec())),
            });
        }
        span
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.mem.is_empty() && self.segs.is_empty()
    }
}
