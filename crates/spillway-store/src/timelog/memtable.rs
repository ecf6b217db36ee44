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
/// Version 2: the records are one stream cut into frames, a record may span frames.
/// Version 1 (still read): every record lies within one frame.
const IMAGE_VERSION: u32 = 2;
/// Payload bytes per frame of the image (the last frame may hold fewer).
const IMAGE_FRAME: usize = 1 << 20;
/// `namespace u16 | key_len u32 | value_len u32 | flags u8`.
const IMAGE_REC_HDR: usize = 11;

/// The file name of the memtable image of checkpoint `seq`.
pub(crate) fn image_name(seq: u64) -> String {
    format!("mem-{seq:016}.tlm")
}

/// The checkpoint number in a file name made by [`image_name`].
pub(crate) fn parse_image_name(name: &str) -> Option<u64> {
    name.strip_prefix("mem-")?.strip_suffix(".tlm")?.parse().ok()
}

/// The byte stream of an image, written as frames of [`IMAGE_FRAME`] bytes.
struct ImageWriter {
    w: crate::blockfile::BlockWriter,
    frame: Vec<u8>,
}

impl ImageWriter {
    fn put(&mut self, mut bytes: &[u8]) -> crate::Result<()> {
        while !bytes.is_empty() {
            let n = (IMAGE_FRAME - self.frame.len()).min(bytes.len());
            self.frame.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.frame.len() == IMAGE_FRAME {
                self.w.frame(&self.frame)?;
                self.frame.clear();
            }
        }
        Ok(())
    }
}

/// Writes the memtables' entries as `(namespace, key, value or None)` into a block
/// file at `path` and fsyncs it; returns its length. Entries of any size the store
/// accepts fit: the records form one stream cut into frames of [`IMAGE_FRAME`] bytes,
/// so a record larger than a block-file frame (64 MiB) spans several.
pub(crate) fn write_image<'a>(
    fs: &dyn crate::io::Fs,
    path: &std::path::Path,
    entries: impl Iterator<Item = (u16, &'a [u8], Option<&'a [u8]>)>,
) -> crate::Result<u64> {
    let w = crate::blockfile::BlockWriter::create(fs, path, IMAGE_MAGIC, IMAGE_VERSION)?;
    let mut out = ImageWriter { w, frame: Vec::with_capacity(IMAGE_FRAME) };
    for (ns, k, v) in entries {
        let value = v.unwrap_or(&[]);
        let mut hdr = [0u8; IMAGE_REC_HDR];
        hdr[..2].copy_from_slice(&ns.to_le_bytes());
        hdr[2..6].copy_from_slice(&(k.len() as u32).to_le_bytes());
        hdr[6..10].copy_from_slice(&(value.len() as u32).to_le_bytes());
        hdr[10] = if v.is_none() { super::segment::FLAG_TOMBSTONE } else { 0 };
        out.put(&hdr)?;
        out.put(k)?;
        out.put(value)?;
    }
    if !out.frame.is_empty() {
        out.w.frame(&out.frame)?;
    }
    out.w.finish()
}

/// The byte stream of an image read back frame by frame.
struct ImageReader {
    r: crate::blockfile::BlockReader,
    frame: Vec<u8>,
    pos: usize,
    /// Bytes of a field that spans frames, gathered.
    spill: Vec<u8>,
    /// Whether fields may span frames (version 2).
    spans: bool,
}

impl ImageReader {
    /// Reads frames until one has bytes left; `false` at the end of the image.
    fn fill(&mut self) -> crate::Result<bool> {
        while self.pos >= self.frame.len() {
            if !self.r.next(&mut self.frame)? {
                return Ok(false);
            }
            self.pos = 0;
        }
        Ok(true)
    }

    /// File offset of the next byte (after [`fill`](Self::fill) returned `true`).
    fn offset(&self) -> u64 {
        self.r.payload_offset() + self.pos as u64
    }

    /// The next `n` bytes of the record at file offset `at`: in place when they lie in
    /// the current frame, else gathered from the frames that follow (version 2).
    fn take(&mut self, n: usize, at: u64) -> crate::Result<&[u8]> {
        if self.frame.len() - self.pos >= n {
            self.pos += n;
            return Ok(&self.frame[self.pos - n..self.pos]);
        }
        if !self.spans {
            let what = format!("memtable image: record field of {n} bytes runs past its frame");
            return Err(crate::Error::corrupt(self.r.path(), self.offset(), what));
        }
        self.spill.clear();
        while self.spill.len() < n {
            if !self.fill()? {
                let what = format!("memtable image ends inside the record (a field of {n} bytes)");
                return Err(crate::Error::corrupt(self.r.path(), at, what));
            }
            let m = (n - self.spill.len()).min(self.frame.len() - self.pos);
            self.spill.extend_from_slice(&self.frame[self.pos..self.pos + m]);
            self.pos += m;
        }
        Ok(&self.spill)
    }
}

/// Reads an image written by [`write_image`] (or a version 1 one), verifying every
/// frame, and hands each entry to `f` with its file offset (for errors).
pub(crate) fn read_image(
    fs: &dyn crate::io::Fs,
    path: &std::path::Path,
    mut f: impl FnMut(u64, u16, &[u8], Option<&[u8]>) -> crate::Result<()>,
) -> crate::Result<()> {
    use super::segment::FLAG_TOMBSTONE;
    let r = crate::blockfile::BlockReader::open(fs, path, IMAGE_MAGIC, IMAGE_VERSION)?;
    let spans = r.version >= 2;
    let mut img = ImageReader { r, frame: Vec::new(), pos: 0, spill: Vec::new(), spans };
    while img.fill()? {
        let at = img.offset();
        let h: [u8; IMAGE_REC_HDR] = img.take(IMAGE_REC_HDR, at)?.try_into().expect("header");
        let ns = u16::from_le_bytes([h[0], h[1]]);
        let kl = u32::from_le_bytes(h[2..6].try_into().expect("4")) as usize;
        let vl = u32::from_le_bytes(h[6..10].try_into().expect("4")) as usize;
        let tomb = h[10] == FLAG_TOMBSTONE;
        if h[10] & !FLAG_TOMBSTONE != 0 || (tomb && vl != 0) {
            return Err(crate::Error::corrupt(path, at, "memtable image: bad flags"));
        }
        if kl > crate::MAX_KEY_LEN || vl > crate::MAX_VALUE_LEN {
            let what = format!("memtable image: a key of {kl} or a value of {vl} bytes");
            return Err(crate::Error::corrupt(path, at, what));
        }
        let (k, v) = img.take(kl + vl, at)?.split_at(kl);
        f(at, ns, k, (!tomb).then_some(v))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdFs;

    /// Records larger than a frame, and records straddling frame boundaries, read back
    /// exactly; a version 1 image (each record within a frame) still reads.
    #[test]
    fn image_records_span_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mem.tlm");
        let big: Vec<u8> = (0..3 * IMAGE_FRAME + 5).map(|i| (i % 251) as u8).collect();
        let mid = vec![7u8; IMAGE_FRAME - 20];
        let entries: Vec<(u16, Vec<u8>, Option<Vec<u8>>)> = vec![
            (0, b"a".to_vec(), Some(mid.clone())),
            (1, b"b".to_vec(), Some(big.clone())),
            (0, b"c".to_vec(), None),
            (2, vec![9u8; 40], Some(b"small".to_vec())),
        ];
        let iter = entries.iter().map(|(n, k, v)| (*n, &k[..], v.as_deref()));
        write_image(&StdFs, &path, iter).expect("write");
        let mut back = Vec::new();
        read_image(&StdFs, &path, |_, n, k, v| {
            back.push((n, k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .expect("read");
        assert_eq!(back, entries);

        // Version 1: the same records, each within its frame.
        let mut w = crate::blockfile::BlockWriter::create(&StdFs, &path, IMAGE_MAGIC, 1).unwrap();
        let mut rec = Vec::new();
        rec.extend_from_slice(&3u16.to_le_bytes());
        rec.extend_from_slice(&1u32.to_le_bytes());
        rec.extend_from_slice(&2u32.to_le_bytes());
        rec.extend_from_slice(&[0, b'k', b'v', b'w']);
        w.frame(&rec).unwrap();
        w.frame(&rec).unwrap();
        w.finish().unwrap();
        let mut n = 0;
        read_image(&StdFs, &path, |_, ns, k, v| {
            assert_eq!((ns, k, v), (3, &b"k"[..], Some(&b"vw"[..])));
            n += 1;
            Ok(())
        })
        .expect("read version 1");
        assert_eq!(n, 2);
        // In version 1 a record running past its frame is damage.
        let mut w = crate::blockfile::BlockWriter::create(&StdFs, &path, IMAGE_MAGIC, 1).unwrap();
        w.frame(&rec[..8]).unwrap();
        w.frame(&rec[8..]).unwrap();
        w.finish().unwrap();
        let e = read_image(&StdFs, &path, |_, _, _, _| Ok(())).expect_err("spanning v1");
        assert!(matches!(e, crate::Error::Corrupt { .. }), "{e}");
    }

    use crate::hostile::{damaged, damages};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Images whose frames (valid checksums) hold any bytes or damaged valid records
        /// (a key or value length set huge, a cut), of either version, and image files
        /// damaged anywhere: reading answers `Ok` or `Err`, and hands out no more bytes
        /// than the file holds.
        #[test]
        fn hostile_memtable_images_are_an_error_not_a_panic(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
            entries in proptest::collection::vec(
                (0u16..3, proptest::collection::vec(any::<u8>(), 0..8),
                 proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8))),
                0..6,
            ),
            ds in damages(),
            version in 1u32..=2,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("mem.tlm");
            let iter = entries.iter().map(|(n, k, v)| (*n, &k[..], v.as_deref()));
            write_image(&StdFs, &path, iter).unwrap();
            let valid = std::fs::read(&path).unwrap();
            let read = |path: &std::path::Path| {
                let mut n = 0usize;
                read_image(&StdFs, path, |_, _, k, v| {
                    n += k.len() + v.map_or(0, <[u8]>::len);
                    Ok(())
                })
                .map(|()| n)
            };
            prop_assert!(read(&path).is_ok());
            // Records of any bytes, and damaged records, inside frames that verify.
            let mut stream = Vec::new();
            for (ns, k, v) in &entries {
                stream.extend_from_slice(&ns.to_le_bytes());
                stream.extend_from_slice(&(k.len() as u32).to_le_bytes());
                stream.extend_from_slice(&(v.as_ref().map_or(0, Vec::len) as u32).to_le_bytes());
                stream.push(u8::from(v.is_none()));
                stream.extend_from_slice(k);
                stream.extend_from_slice(v.as_deref().unwrap_or(&[]));
            }
            let stream = damaged(&stream, &ds);
            let cut = stream.len() / 2;
            for payloads in [frames.clone(), vec![stream[..cut].to_vec(), stream[cut..].to_vec()]] {
                let mut w = crate::blockfile::BlockWriter::create(&StdFs, &path, IMAGE_MAGIC, version).unwrap();
                for f in &payloads {
                    w.frame(f).unwrap();
                }
                w.finish().unwrap();
                if let Ok(n) = read(&path) {
                    prop_assert!(n <= payloads.iter().map(Vec::len).sum::<usize>());
                }
            }
            std::fs::write(&path, damaged(&valid, &ds)).unwrap();
            let _ = read(&path);
        }
    }
}
