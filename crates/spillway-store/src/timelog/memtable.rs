//! The mutable part of a partition: a sorted map in memory where `None` is a tombstone
//! that hides older versions of the key in the partition's segments.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Bytes charged per memtable entry on top of its key and value (tree slot, two heap
/// headers).
pub(crate) const ENTRY_OVERHEAD: u64 = 64;

/// Borrowed memtable entries in key order (`None` value: tombstone).
pub(crate) type MemIter<'a> = Box<dyn Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a>;

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
    ) -> MemIter<'a> {
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

/// Magic of the memtable image a checkpoint writes.
const IMAGE_MAGIC: [u8; 8] = *b"SWTLMEM\0";
const IMAGE_VERSION: u32 = 1;
/// Payload bytes per frame of the image.
const IMAGE_FRAME: usize = 1 << 20;

/// The file name of the memtable image of checkpoint `seq`.
pub(crate) fn image_name(seq: u64) -> String {
    format!("mem-{seq:016}.tlm")
}

/// The checkpoint number in a file name made by [`image_name`].
pub(crate) fn parse_image_name(name: &str) -> Option<u64> {
    name.strip_prefix("mem-")?.strip_suffix(".tlm")?.parse().ok()
}

/// Writes the memtables' entries as `(namespace, key, value or None)` into a block
/// file at `path` and fsyncs it; returns its length.
pub(crate) fn write_image<'a>(
    fs: &dyn crate::io::Fs,
    path: &std::path::Path,
    entries: impl Iterator<Item = (u16, &'a [u8], Option<&'a [u8]>)>,
) -> crate::Result<u64> {
    let mut w = crate::blockfile::BlockWriter::create(fs, path, IMAGE_MAGIC, IMAGE_VERSION)?;
    let mut frame = Vec::with_capacity(IMAGE_FRAME + 1024);
    for (ns, k, v) in entries {
        let value = v.unwrap_or(&[]);
        frame.extend_from_slice(&ns.to_le_bytes());
        frame.extend_from_slice(&(k.len() as u32).to_le_bytes());
        frame.extend_from_slice(&(value.len() as u32).to_le_bytes());
        frame.push(if v.is_none() { super::segment::FLAG_TOMBSTONE } else { 0 });
        frame.extend_from_slice(k);
        frame.extend_from_slice(value);
        if frame.len() >= IMAGE_FRAME {
            w.frame(&frame)?;
            frame.clear();
        }
    }
    if !frame.is_empty() {
        w.frame(&frame)?;
    }
    w.finish()
}

/// Reads an image written by [`write_image`], verifying every frame, and hands each
/// entry to `f` with its file offset (for errors).
pub(crate) fn read_image(
    fs: &dyn crate::io::Fs,
    path: &std::path::Path,
    mut f: impl FnMut(u64, u16, &[u8], Option<&[u8]>) -> crate::Result<()>,
) -> crate::Result<()> {
    use crate::blockfile::{BlockReader, Cursor};
    let mut r = BlockReader::open(fs, path, IMAGE_MAGIC, IMAGE_VERSION)?;
    let mut frame = Vec::new();
    while r.next(&mut frame)? {
        let mut c = Cursor::new(&frame, r.path(), r.payload_offset());
        while !c.is_empty() {
            let at = c.offset();
            let ns = c.u16()?;
            let kl = c.u32()? as usize;
            let vl = c.u32()? as usize;
            let flags = c.bytes(1)?[0];
            let k = c.bytes(kl)?;
            let v = c.bytes(vl)?;
            let tomb = flags == super::segment::FLAG_TOMBSTONE;
            if flags & !super::segment::FLAG_TOMBSTONE != 0 || (tomb && vl != 0) {
                return Err(crate::Error::corrupt(r.path(), at, "memtable image: bad flags"));
            }
            f(at, ns, k, (!tomb).then_some(v))?;
        }
    }
    Ok(())
}
