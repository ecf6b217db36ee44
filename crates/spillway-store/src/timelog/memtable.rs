//! The mutable part of a partition: a sorted map in memory where `None` is a tombstone
//! that hides older versions of the key in the partition's segments.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Bytes charged per memtable entry on top of its key and value (tree slot, two heap
/// headers).
pub(crate) const ENTRY_OVERHEAD: u64 = 64;

/// A partition's memtable with its byte count.
#[derive(Debug, Default)]
pub(crate) struct Memtable {
    pub(crate) map: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Resident bytes: keys, values and [`ENTRY_OVERHEAD`] per entry.
    pub(crate) bytes: u64,
}

fn cost(key: &[u8], value: &Option<Vec<u8>>) -> u64 {
    (key.len() + value.as_ref().map_or(0, Vec::len)) as u64 + ENTRY_OVERHEAD
}

impl Memtable {
    /// Sets `key` to `value` (`None`: tombstone). Returns the change in resident bytes.
    pub(crate) fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> i64 {
        let value = value.map(<[u8]>::to_vec);
        let add = cost(key, &value);
        let old = match self.map.get_mut(key) {
            Some(slot) => {
                let old = cost(key, slot);
                *slot = value;
                old
            }
            None => {
                self.map.insert(key.to_vec(), value);
                0
            }
        };
        self.bytes = self.bytes + add - old;
        add as i64 - old as i64
    }

    /// The entry for `key`: `Some(None)` is a tombstone.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.map.get(key).map(Option::as_deref)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries within `lo..hi` (half-open, `None` unbounded), in one direction.
    pub(crate) fn range<'a>(
        &'a self,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        reverse: bool,
    ) -> Box<dyn Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a> {
        if lo.zip(hi).is_some_and(|(l, h)| l >= h) {
            return Box::new(std::iter::empty());
        }
        let lo = lo.map_or(Bound::Unbounded, Bound::Included);
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        let r = self.map.range::<[u8], _>((lo, hi)).map(|(k, v)| (&k[..], v.as_deref()));
        if reverse {
            Box::new(r.rev())
        } else {
            Box::new(r)
        }
    }

    /// Smallest and greatest key.
    pub(crate) fn key_span(&self) -> Option<(&[u8], &[u8])> {
        let first = self.map.keys().next()?;
        let last = self.map.keys().next_back()?;
        Some((first, last))
    }
}
