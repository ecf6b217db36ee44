//! Segment files: immutable sorted runs of one partition, their sparse block index, and
//! the block reader with read-ahead. The byte layout is in the [module docs](super).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::BlockCache;
use crate::error::{Error, Result};
use crate::io::{read_exact_at, write_all_at, FileHandle, Fs};

/// First bytes of every segment file.
pub(crate) const SEG_MAGIC: [u8; 8] = *b"SWTLSEG\0";
/// Last bytes of every segment file (end of the footer).
pub(crate) const END_MAGIC: [u8; 8] = *b"SWTLEND\0";
/// Format version written in the header.
pub(crate) const SEG_VERSION: u32 = 1;
/// `magic [8] | version u32 | crc32c(magic, version) u32`.
pub(crate) const HEADER_LEN: u64 = 16;
/// `index_offset u64 | index_len u32 | index_crc u32 | records u64 |
/// crc32c(previous 24 bytes) u32 | reserved u32 | magic [8]`.
pub(crate) const FOOTER_LEN: u64 = 40;
/// `key_len u32 | value_len u32 | flags u8`.
pub(crate) const REC_HDR: usize = 9;
/// Flag bit of a tombstone record (its value is empty).
pub(crate) const FLAG_TOMBSTONE: u8 = 1;
/// Bytes of a block's record count and its trailing checksum.
pub(crate) const BLOCK_OVERHEAD: usize = 8;
/// Resident bytes charged per sparse-index entry besides its first key.
pub(crate) const INDEX_ENTRY_BYTES: u64 = 40;
/// Bytes written to the file per `pwrite` while a segment is built.
const WRITE_BUF: usize = 64 << 10;

/// An owned key and its value (`None`: tombstone).
pub(crate) type Entry = (Vec<u8>, Option<Vec<u8>>);

/// The file name of segment `id`.
pub(crate) fn segment_name(id: u64) -> String {
    format!("seg-{id:016}.tl")
}

/// The segment id in a file name made by [`segment_name`].
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("seg-")?.strip_suffix(".tl")?.parse().ok()
}

/// One entry of the sparse index: where a block is and the first key in it.
#[derive(Debug)]
pub(crate) struct BlockRef {
    pub(crate) offset: u64,
    pub(crate) len: u32,
    pub(crate) first_key: Box<[u8]>,
}

/// An open segment file with its sparse index in memory.
pub(crate) struct Segment {
    pub(crate) id: u64,
    pub(crate) path: PathBuf,
    file: Box<dyn FileHandle>,
    pub(crate) blocks: Vec<BlockRef>,
    pub(crate) last_key: Box<[u8]>,
    pub(crate) file_len: u64,
    /// Whether the file has been fsynced (segments are synced at the next checkpoint).
    pub(crate) synced: bool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("id", &self.id).field("blocks", &self.blocks.len()).finish()
    }
}

/// A decoded block: its bytes and where each record lies in them.
#[derive(Debug, Default)]
pub(crate) struct Block {
    data: Vec<u8>,
    /// (key offset, key length, value length, tombstone) per record, in key order.
    recs: Vec<(u32, u32, u32, bool)>,
}

impl Block {
    /// Bytes the decoded block occupies in memory.
    pub(crate) fn resident_bytes(&self) -> u64 {
        (self.data.capacity() + self.recs.capacity() * 16 + 64) as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.recs.len()
    }

    pub(crate) fn key(&self, i: usize) -> &[u8] {
        let (o, kl, _, _) = self.recs[i];
        &self.data[o as usize..(o + kl) as usize]
    }

    /// The value of record `i`, `None` for a tombstone.
    pub(crate) fn value(&self, i: usize) -> Option<&[u8]> {
        let (o, kl, vl, t) = self.recs[i];
        (!t).then(|| &self.data[(o + kl) as usize..(o + kl + vl) as usize])
    }

    /// Index of the first record with key `>= key`.
    pub(crate) fn lower_bound(&self, key: &[u8]) -> usize {
        self.recs.partition_point(|&(o, kl, _, _)| &self.data[o as usize..(o + kl) as usize] < key)
    }
}

/// Decodes and verifies the block whose bytes (record count, records, checksum) are
/// `bytes`, read from `path` at `offset`.
pub(crate) fn decode_block(path: &Path, offset: u64, bytes: Vec<u8>) -> Result<Block> {
    let corrupt = |what: String| Error::corrupt(path, offset, what);
    if bytes.len() < BLOCK_OVERHEAD {
        return Err(corrupt(format!("block of {} bytes is shorter than its frame", bytes.len())));
    }
    let body = bytes.len() - 4;
    let stored = u32::from_le_bytes(bytes[body..].try_into().expect("4"));
    if crc32c::crc32c(&bytes[..body]) != stored {
        return Err(corrupt("block checksum mismatch".into()));
    }
    let count = u32::from_le_bytes(bytes[..4].try_into().expect("4")) as usize;
    let mut recs = Vec::with_capacity(count.min(body / REC_HDR));
    let mut pos = 4;
    let mut prev: Option<(usize, usize)> = None;
    for i in 0..count {
        let hdr = bytes
            .get(pos..pos + REC_HDR)
            .ok_or_else(|| corrupt(format!("record {i} header runs past its block")))?;
        let kl = u32::from_le_bytes(hdr[..4].try_into().expect("4")) as usize;
        let vl = u32::from_le_bytes(hdr[4..8].try_into().expect("4")) as usize;
        let flags = hdr[8];
        let ko = pos + REC_HDR;
        if ko + kl + vl > body || flags & !FLAG_TOMBSTONE != 0 {
            return Err(corrupt(format!("record {i} runs past its block or has bad flags")));
        }
        if let Some((po, pl)) = prev {
            if bytes[po..po + pl] >= bytes[ko..ko + kl] {
                return Err(corrupt(format!("record {i} is out of key order")));
            }
        }
        prev = Some((ko, kl));
        recs.push((ko as u32, kl as u32, vl as u32, flags & FLAG_TOMBSTONE != 0));
        pos = ko + kl + vl;
    }
    if pos != body {
        return Err(corrupt(format!("{} stray bytes after the block's records", body - pos)));
    }
    Ok(Block { data: bytes, recs })
}

/// Streams sorted records into a new segment file.
pub(crate) struct SegmentWriter {
    id: u64,
    path: PathBuf,
    file: Box<dyn FileHandle>,
    block_size: usize,
    /// Encoded bytes not yet written, starting at file offset `flushed`.
    buf: Vec<u8>,
    flushed: u64,
    block: Vec<u8>,
    block_records: u32,
    block_first: Vec<u8>,
    blocks: Vec<BlockRef>,
    last_key: Vec<u8>,
    records: u64,
}

impl SegmentWriter {
    /// Creates (or truncates) the file of segment `id` in `dir`.
    pub(crate) fn create(fs: &dyn Fs, dir: &Path, id: u64, block_size: usize) -> Result<Self> {
        let path = dir.join(segment_name(id));
        let file = fs.open(&path, true).map_err(|e| Error::io("create segment", &path, e))?;
        file.set_len(0).map_err(|e| Error::io("truncate segment", &path, e))?;
        let mut buf = Vec::with_capacity(WRITE_BUF + block_size);
        buf.extend_from_slice(&SEG_MAGIC);
        buf.extend_from_slice(&SEG_VERSION.to_le_bytes());
        buf.extend_from_slice(&crc32c::crc32c(&buf).to_le_bytes());
        Ok(SegmentWriter {
            id,
            path,
            file,
            block_size: block_size.max(64),
            buf,
            flushed: 0,
            block: Vec::with_capacity(block_size + 64),
            block_records: 0,
            block_first: Vec::new(),
            blocks: Vec::new(),
            last_key: Vec::new(),
            records: 0,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Records added so far.
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Appends a record; keys must arrive in strictly increasing order.
    pub(crate) fn add(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        debug_assert!(self.records == 0 || key > &self.last_key[..], "keys out of order");
        if self.block_records == 0 {
            self.block.clear();
            self.block.extend_from_slice(&[0; 4]);
            self.block_first.clear();
            self.block_first.extend_from_slice(key);
        }
        let v = value.unwrap_or(&[]);
        self.block.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.block.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.block.push(if value.is_none() { FLAG_TOMBSTONE } else { 0 });
        self.block.extend_from_slice(key);
        self.block.extend_from_slice(v);
        self.block_records += 1;
        self.records += 1;
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.block.len() >= self.block_size {
            self.seal_block()?;
        }
        Ok(())
    }

    fn seal_block(&mut self) -> Result<()> {
        if self.block_records == 0 {
            return Ok(());
        }
        self.block[..4].copy_from_slice(&self.block_records.to_le_bytes());
        let crc = crc32c::crc32c(&self.block);
        self.block.extend_from_slice(&crc.to_le_bytes());
        let offset = self.flushed + self.buf.len() as u64;
        self.blocks.push(BlockRef {
            offset,
            len: self.block.len() as u32,
            first_key: self.block_first.as_slice().into(),
        });
        self.buf.extend_from_slice(&self.block);
        self.block_records = 0;
        if self.buf.len() >= WRITE_BUF {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        write_all_at(&*self.file, &self.path, &self.buf, self.flushed, "write segment")?;
        self.flushed += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the index and footer (no fsync: segments are synced at the checkpoint
    /// that publishes them) and returns the segment, open for reading, with the bytes
    /// written. A writer with no records writes nothing useful: callers check
    /// [`records`](Self::records) first.
    pub(crate) fn finish(mut self) -> Result<(Segment, u64)> {
        self.seal_block()?;
        let index_offset = self.flushed + self.buf.len() as u64;
        let mut index = Vec::new();
        index.extend_from_slice(&(self.blocks.len() as u32).to_le_bytes());
        for b in &self.blocks {
            index.extend_from_slice(&b.offset.to_le_bytes());
            index.extend_from_slice(&b.len.to_le_bytes());
            index.extend_from_slice(&(b.first_key.len() as u32).to_le_bytes());
            index.extend_from_slice(&b.first_key);
        }
        index.extend_from_slice(&(self.last_key.len() as u32).to_le_bytes());
        index.extend_from_slice(&self.last_key);
        let mut footer = Vec::with_capacity(FOOTER_LEN as usize);
        footer.extend_from_slice(&index_offset.to_le_bytes());
        footer.extend_from_slice(&(index.len() as u32).to_le_bytes());
        footer.extend_from_slice(&crc32c::crc32c(&index).to_le_bytes());
        footer.extend_from_slice(&self.records.to_le_bytes());
        let fcrc = crc32c::crc32c(&footer);
        footer.extend_from_slice(&fcrc.to_le_bytes());
        footer.extend_from_slice(&0u32.to_le_bytes());
        footer.extend_from_slice(&END_MAGIC);
        self.buf.extend_from_slice(&index);
        self.buf.extend_from_slice(&footer);
        self.flush()?;
        let len = self.flushed;
        Ok((
            Segment {
                id: self.id,
                path: self.path,
                file: self.file,
                blocks: self.blocks,
                last_key: self.last_key.into(),
                file_len: len,
                synced: false,
            },
            len,
        ))
    }
}

impl Segment {
    /// Opens segment `id` in `dir`, verifying its header, footer and index.
    pub(crate) fn open(fs: &dyn Fs, dir: &Path, id: u64) -> Result<Segment> {
        let path = dir.join(segment_name(id));
        let file = fs.open(&path, false).map_err(|e| Error::io("open segment", &path, e))?;
        let len = file.len().map_err(|e| Error::io("stat segment", &path, e))?;
        if len < HEADER_LEN + FOOTER_LEN {
            return Err(Error::corrupt(
                &path,
                0,
                format!("segment of {len} bytes is shorter than header and footer (truncated)"),
            ));
        }
        let mut h = [0u8; HEADER_LEN as usize];
        read_exact_at(&*file, &path, &mut h, 0, "read segment header")?;
        let hcrc = u32::from_le_bytes(h[12..16].try_into().expect("4"));
        if h[..8] != SEG_MAGIC || crc32c::crc32c(&h[..12]) != hcrc {
            return Err(Error::corrupt(&path, 0, "bad segment header (magic or checksum)"));
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4"));
        if version > SEG_VERSION {
            return Err(Error::NewerFormat { path, found: version, supported: SEG_VERSION });
        }
        let foot_at = len - FOOTER_LEN;
        let mut f = [0u8; FOOTER_LEN as usize];
        read_exact_at(&*file, &path, &mut f, foot_at, "read segment footer")?;
        let fcrc = u32::from_le_bytes(f[24..28].try_into().expect("4"));
        if f[32..40] != END_MAGIC || crc32c::crc32c(&f[..24]) != fcrc {
            return Err(Error::corrupt(
                &path,
                foot_at,
                "bad segment footer (truncated or damaged file)",
            ));
        }
        let index_offset = u64::from_le_bytes(f[..8].try_into().expect("8"));
        let index_len = u64::from(u32::from_le_bytes(f[8..12].try_into().expect("4")));
        let index_crc = u32::from_le_bytes(f[12..16].try_into().expect("4"));
        if index_offset < HEADER_LEN || index_offset.checked_add(index_len) != Some(foot_at) {
            return Err(Error::corrupt(&path, foot_at, "footer places the index outside the file"));
        }
        let mut index = vec![0u8; index_len as usize];
        read_exact_at(&*file, &path, &mut index, index_offset, "read segment index")?;
        if crc32c::crc32c(&index) != index_crc {
            return Err(Error::corrupt(&path, index_offset, "segment index checksum mismatch"));
        }
        // Errors name the offset of the index entry at fault.
        let bad = |at: u64, what: &str| Error::corrupt(&path, at, format!("segment index: {what}"));
        let mut c = crate::blockfile::Cursor::new(&index, &path, index_offset);
        let n = c.u32()? as usize;
        let mut blocks = Vec::with_capacity(n.min(index.len() / 16));
        let mut expect = HEADER_LEN;
        for _ in 0..n {
            let at = c.offset();
            let offset = c.u64()?;
            let blen = c.u32()?;
            let kl = c.u32()? as usize;
            let first_key: Box<[u8]> = c.bytes(kl)?.into();
            if offset != expect || (blen as usize) < BLOCK_OVERHEAD {
                return Err(bad(at, "blocks are not contiguous"));
            }
            if blocks.last().is_some_and(|p: &BlockRef| p.first_key >= first_key) {
                return Err(bad(at, "first keys out of order"));
            }
            expect = offset + u64::from(blen);
            blocks.push(BlockRef { offset, len: blen, first_key });
        }
        let last_at = c.offset();
        let kl = c.u32()? as usize;
        let last_key: Box<[u8]> = c.bytes(kl)?.into();
        if !c.is_empty() || expect != index_offset || blocks.is_empty() {
            return Err(bad(index_offset, "index does not cover the data exactly"));
        }
        if blocks.last().is_some_and(|b| b.first_key > last_key) {
            return Err(bad(last_at, "last key precedes the last block"));
        }
        Ok(Segment { id, path, file, blocks, last_key, file_len: len, synced: true })
    }

    /// Resident bytes of the sparse index.
    pub(crate) fn index_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.first_key.len() as u64 + INDEX_ENTRY_BYTES).sum::<u64>()
            + self.last_key.len() as u64
            + 128
    }

    pub(crate) fn first_key(&self) -> &[u8] {
        &self.blocks[0].first_key
    }

    /// Makes the file durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if !self.synced {
            self.file.sync_data().map_err(|e| Error::io("fsync segment", &self.path, e))?;
            self.synced = true;
        }
        Ok(())
    }

    /// Reads blocks `first..first + n` (contiguous in the file) with one `pread` and
    /// decodes them.
    pub(crate) fn read_blocks(&self, first: usize, n: usize) -> Result<Vec<Block>> {
        let refs = &self.blocks[first..first + n];
        let start = refs[0].offset;
        let last = &refs[n - 1];
        let total = (last.offset + u64::from(last.len) - start) as usize;
        let mut all = vec![0u8; total];
        read_exact_at(&*self.file, &self.path, &mut all, start, "read segment block")?;
        let mut out = Vec::with_capacity(n);
        for r in refs.iter().rev() {
            let at = (r.offset - start) as usize;
            let bytes = all.split_off(at);
            out.push(decode_block(&self.path, r.offset, bytes)?);
        }
        out.reverse();
        Ok(out)
    }

    /// The block that would hold `key`, if any: the last one whose first key is at
    /// most `key`.
    pub(crate) fn block_for(&self, key: &[u8]) -> Option<usize> {
        let p = self.blocks.partition_point(|b| &b.first_key[..] <= key);
        p.checked_sub(1)
    }

    /// Looks `key` up: `Some(None)` is a tombstone. Reads at most one block, through
    /// `cache` (whose capacity is `cap`).
    pub(crate) fn get(
        &self,
        key: &[u8],
        cache: &mut BlockCache,
        cap: u64,
        reads: &mut u64,
    ) -> Result<Option<Option<Vec<u8>>>> {
        if key > &self.last_key[..] {
            return Ok(None);
        }
        let Some(b) = self.block_for(key) else { return Ok(None) };
        let block = match cache.get(self.id, b as u32) {
            Some(block) => block,
            None => {
                *reads += 1;
                let block = Arc::new(self.read_blocks(b, 1)?.pop().expect("one block"));
                cache.insert(self.id, b as u32, block.clone(), cap);
                block
            }
        };
        let i = block.lower_bound(key);
        if i < block.len() && block.key(i) == key {
            return Ok(Some(block.value(i).map(<[u8]>::to_vec)));
        }
        Ok(None)
    }

    /// Whether the segment may hold keys within `lo..hi` (half-open, `None` unbounded).
    pub(crate) fn overlaps(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
        lo.is_none_or(|lo| &self.last_key[..] >= lo) && hi.is_none_or(|hi| self.first_key() < hi)
    }
}

/// Iterates the records of one segment within a half-open key range in one direction,
/// block by block.
///
/// Read-ahead: each `pread` fetches the block the scan needs next *and* the block after
/// it in the scan direction (when that block can still hold keys of the range); the
/// second block waits decoded in `ahead` and is served without I/O when the first is
/// used up. A sequential scan thus issues one `pread` per two blocks, and the kernel
/// sees 2-block sequential reads it can extend with its own read-ahead. The reads are
/// synchronous (the store has no I/O thread): what it saves is system calls and seeks,
/// not latency overlapped with work. At most two blocks per open iterator are resident.
pub(crate) struct SegIter<'a> {
    seg: &'a Segment,
    lo: Option<&'a [u8]>,
    hi: Option<&'a [u8]>,
    reverse: bool,
    /// The next block to load (may be out of range: then the iterator ends).
    next_block: isize,
    cur: Option<Block>,
    /// Position in `cur`: the next record to return (forward) or one past it (reverse).
    pos: usize,
    ahead: Option<(usize, Block)>,
    done: bool,
    /// Blocks read from disk.
    pub(crate) reads: u64,
}

impl<'a> SegIter<'a> {
    pub(crate) fn new(
        seg: &'a Segment,
        lo: Option<&'a [u8]>,
        hi: Option<&'a [u8]>,
        reverse: bool,
    ) -> Self {
        let (next_block, done) = if reverse {
            // The last block whose first key lies below `hi`.
            let p = match hi {
                Some(hi) => seg.blocks.partition_point(|b| &b.first_key[..] < hi),
                None => seg.blocks.len(),
            };
            (p as isize - 1, p == 0)
        } else {
            let b = lo.and_then(|lo| seg.block_for(lo)).unwrap_or(0);
            (b as isize, false)
        };
        SegIter { seg, lo, hi, reverse, next_block, cur: None, pos: 0, ahead: None, done, reads: 0 }
    }

    /// Whether block `b` can hold keys of the range (given the scan reached it).
    fn block_in_range(&self, b: isize) -> bool {
        if b < 0 || b as usize >= self.seg.blocks.len() {
            return false;
        }
        let b = b as usize;
        if self.reverse {
            // Going down: block b+1 started above `lo` (or we would have stopped).
            self.lo.is_none_or(|lo| match self.seg.blocks.get(b + 1) {
                Some(next) => &next.first_key[..] > lo,
                None => &self.seg.last_key[..] >= lo,
            })
        } else {
            self.hi.is_none_or(|hi| &self.seg.blocks[b].first_key[..] < hi)
        }
    }

    fn load(&mut self) -> Result<bool> {
        let b = self.next_block;
        if !self.block_in_range(b) {
            self.done = true;
            return Ok(false);
        }
        let step: isize = if self.reverse { -1 } else { 1 };
        self.next_block = b + step;
        let block = match self.ahead.take() {
            Some((ab, blk)) if ab as isize == b => blk,
            _ => {
                let nb = b + step;
                let pair = self.block_in_range(nb);
                let (first, n) = match (pair, self.reverse) {
                    (false, _) => (b as usize, 1),
                    (true, false) => (b as usize, 2),
                    (true, true) => (nb as usize, 2),
                };
                let mut blocks = self.seg.read_blocks(first, n)?;
                self.reads += n as u64;
                if n == 2 {
                    let (keep, other) = if self.reverse {
                        let hi = blocks.pop().expect("2");
                        (hi, blocks.pop().expect("2"))
                    } else {
                        let hi = blocks.pop().expect("2");
                        (blocks.pop().expect("2"), hi)
                    };
                    self.ahead = Some((nb as usize, other));
                    keep
                } else {
                    blocks.pop().expect("1")
                }
            }
        };
        self.pos = if self.reverse {
            match self.hi {
                Some(hi) => block.lower_bound(hi),
                None => block.len(),
            }
        } else {
            match self.lo {
                Some(lo) => block.lower_bound(lo),
                None => 0,
            }
        };
        self.cur = Some(block);
        Ok(true)
    }

    /// The next record in range: key and value (`None`: tombstone).
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            if self.done {
                return Ok(None);
            }
            if let Some(block) = &self.cur {
                let i = if self.reverse {
                    if self.pos == 0 {
                        None
                    } else {
                        Some(self.pos - 1)
                    }
                } else if self.pos < block.len() {
                    Some(self.pos)
                } else {
                    None
                };
                if let Some(i) = i {
                    let k = block.key(i);
                    let inside = if self.reverse {
                        self.lo.is_none_or(|lo| k >= lo)
                    } else {
                        self.hi.is_none_or(|hi| k < hi)
                    };
                    if !inside {
                        self.done = true;
                        self.cur = None;
                        self.ahead = None;
                        return Ok(None);
                    }
                    let out = (k.to_vec(), block.value(i).map(<[u8]>::to_vec));
                    if self.reverse {
                        self.pos -= 1;
                    } else {
                        self.pos += 1;
                    }
                    return Ok(Some(out));
                }
                self.cur = None;
            }
            if !self.load()? {
                return Ok(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::{damaged, damages};
    use crate::io::StdFs;
    use proptest::prelude::*;

    /// Rewrites a block's trailing checksum, as a hostile writer would.
    fn reseal_block(b: &mut [u8]) {
        if b.len() >= 4 {
            let body = b.len() - 4;
            let crc = crc32c::crc32c(&b[..body]);
            b[body..].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Rewrites the index and footer checksums of a segment file's bytes (where the
    /// footer still places the index inside the file), so that the index fields are
    /// what is read.
    fn reseal_index(f: &mut [u8]) {
        let len = f.len() as u64;
        if len < HEADER_LEN + FOOTER_LEN {
            return;
        }
        let foot = (len - FOOTER_LEN) as usize;
        let at = u64::from_le_bytes(f[foot..foot + 8].try_into().unwrap());
        let n = u64::from(u32::from_le_bytes(f[foot + 8..foot + 12].try_into().unwrap()));
        if at >= HEADER_LEN && at.checked_add(n) == Some(foot as u64) {
            let crc = crc32c::crc32c(&f[at as usize..foot]);
            f[foot + 12..foot + 16].copy_from_slice(&crc.to_le_bytes());
        }
        let fcrc = crc32c::crc32c(&f[foot..foot + 24]);
        f[foot + 24..foot + 28].copy_from_slice(&fcrc.to_le_bytes());
    }

    /// Every record of `seg` forward and backward, and a lookup of `probe`.
    fn read_all(seg: &Segment, probe: &[u8]) -> Result<()> {
        for reverse in [false, true] {
            let mut it = SegIter::new(seg, None, None, reverse);
            while it.next_entry()?.is_some() {}
        }
        let mut it = SegIter::new(seg, Some(probe), None, false);
        it.next_entry()?;
        seg.get(probe, &mut BlockCache::default(), 1 << 20, &mut 0)?;
        Ok(())
    }

    fn records() -> impl Strategy<Value = Vec<(Vec<u8>, Option<Vec<u8>>)>> {
        proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 0..6),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            1..30,
        )
        .prop_map(|m| m.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes and damaged valid blocks (a key or value length set huge, a count
        /// set huge, a cut), checksum rewritten: decoding answers `Ok` or `Err`, and
        /// every record of a block that decodes lies inside it.
        #[test]
        fn hostile_blocks_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..64),
            recs in records(),
            ds in damages(),
            probe in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut valid = vec![0u8; 4];
            valid[..4].copy_from_slice(&(recs.len() as u32).to_le_bytes());
            for (k, v) in &recs {
                let val = v.as_deref().unwrap_or(&[]);
                valid.extend_from_slice(&(k.len() as u32).to_le_bytes());
                valid.extend_from_slice(&(val.len() as u32).to_le_bytes());
                valid.push(if v.is_none() { FLAG_TOMBSTONE } else { 0 });
                valid.extend_from_slice(k);
                valid.extend_from_slice(val);
            }
            valid.extend_from_slice(&[0; 4]);
            reseal_block(&mut valid);
            prop_assert_eq!(decode_block(Path::new("seg"), 16, valid.clone()).unwrap().len(), recs.len());
            for mut b in [raw, damaged(&valid, &ds)] {
                reseal_block(&mut b);
                if let Ok(block) = decode_block(Path::new("seg"), 16, b) {
                    for i in 0..block.len() {
                        let _ = (block.key(i), block.value(i));
                    }
                    let _ = block.lower_bound(&probe);
                }
            }
        }

        /// A segment file damaged anywhere (the index and footer checksums rewritten or
        /// not), or any bytes: opening answers `Ok` or `Err`, and so does reading every
        /// record of a segment that opens.
        #[test]
        fn hostile_segment_files_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..80),
            recs in records(),
            ds in damages(),
            reseal in any::<bool>(),
            probe in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut w = SegmentWriter::create(&StdFs, dir.path(), 1, 64).unwrap();
            for (k, v) in &recs {
                w.add(k, v.as_deref()).unwrap();
            }
            let (seg, _) = w.finish().unwrap();
            read_all(&seg, &probe).unwrap();
            let path = seg.path.clone();
            drop(seg);
            let valid = std::fs::read(&path).unwrap();
            for mut b in [raw, damaged(&valid, &ds)] {
                if reseal {
                    reseal_index(&mut b);
                }
                std::fs::write(&path, &b).unwrap();
                if let Ok(seg) = Segment::open(&StdFs, dir.path(), 1) {
                    let _ = read_all(&seg, &probe);
                }
            }
        }
    }
}
