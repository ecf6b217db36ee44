//! Index snapshots: the writer of `index-<n>.snap` (format in the FORMAT section of
//! [`super`]), whole inside a checkpoint or fuzzy in bounded steps, and its reader
//! ([`read_index`]), which validates a snapshot before recovery uses it.
//!
//! A fuzzy snapshot records `from`, the log tail when it starts, then copies a bounded
//! number of buckets per write operation (and per checkpoint) in bucket-number order,
//! main buckets first, then overflow buckets, while the store keeps changing the index.
//! No doubling starts while it runs, so bucket numbers stay put. Its header (frame 0)
//! is written first with zero counts and rewritten with the final counts when every
//! bucket is copied; the file is fsynced and renamed by the next checkpoint, whose
//! manifest names it with `index_tail = from`. A bucket's copy may reflect any moment
//! between `from` and the end, which recovery repairs by replaying the log from `from`
//! (see the checkpoint protocol in [`super`]).

use std::path::{Path, PathBuf};

use super::index::{self, entries_in, HashIndex, BUCKET_BYTES};
use super::record::PAGE_HDR;
use super::{BUCKETS_PER_FRAME, FORMAT_VERSION, INDEX_MAGIC};
use crate::blockfile::{publish, BlockReader, BlockWriter, Cursor};
use crate::error::{Error, Result};
use crate::io::{join, Fs};

/// Bytes of one bucket in a snapshot frame: bucket number u64 + 8 slots u64.
const BUCKET_REC: usize = 72;

/// A snapshot being written.
pub(super) struct SnapshotWriter {
    w: BlockWriter,
    dir: PathBuf,
    /// Final file name (`index-<n>.snap`).
    pub(super) name: String,
    /// Temporary name while it is written (`index-<n>.snap.tmp`).
    pub(super) tmp_name: String,
    /// The log tail when the snapshot started: recovery replays the log from here.
    pub(super) from: u64,
    /// The log's written-bytes counter when the snapshot started (the store's replay
    /// estimate counts from here once the snapshot is published).
    pub(super) mark: u64,
    b0: u32,
    bits: u32,
    n_main: u64,
    /// Next bucket (snapshot numbering) to copy.
    next: u64,
    /// Overflow buckets when the last bucket was copied (`None` while copying).
    done: Option<u64>,
    entries: u64,
    frame: Vec<u8>,
    frame_buckets: usize,
    /// Bytes of the file already counted in the store's statistics.
    reported: u64,
}

fn header(b0: u32, bits: u32, n_main: u64, n_ov: u64, entries: u64) -> Vec<u8> {
    let mut head = Vec::with_capacity(32);
    head.extend_from_slice(&b0.to_le_bytes());
    head.extend_from_slice(&bits.to_le_bytes());
    head.extend_from_slice(&n_main.to_le_bytes());
    head.extend_from_slice(&n_ov.to_le_bytes());
    head.extend_from_slice(&entries.to_le_bytes());
    head
}

impl SnapshotWriter {
    /// Creates `<name>.tmp` and writes its provisional header. `buffer` bounds the bytes
    /// buffered between writes (and the frame size).
    pub(super) fn start(
        fs: &dyn Fs,
        dir: &Path,
        name: String,
        index: &HashIndex,
        from: u64,
        buffer: usize,
    ) -> Result<Self> {
        debug_assert!(!index.growing(), "a snapshot starts only between doublings");
        let tmp_name = format!("{name}.tmp");
        let mut w = BlockWriter::create_buffered(
            fs,
            &join(dir, &tmp_name),
            INDEX_MAGIC,
            FORMAT_VERSION,
            buffer,
        )?;
        let n_main = index.main.len() as u64;
        w.frame(&header(index.b0, index.bits, n_main, 0, 0))?;
        let frame_buckets = (buffer / BUCKET_REC).clamp(1, BUCKETS_PER_FRAME);
        Ok(SnapshotWriter {
            w,
            dir: dir.to_path_buf(),
            name,
            tmp_name,
            from,
            mark: 0,
            b0: index.b0,
            bits: index.bits,
            n_main,
            next: 0,
            done: None,
            entries: 0,
            frame: Vec::with_capacity(frame_buckets * BUCKET_REC),
            frame_buckets,
            reported: 0,
        })
    }

    /// Copies up to `buckets` more buckets of `index` (empty ones are skipped, as the
    /// format allows); returns true once every bucket has been copied.
    pub(super) fn step(&mut self, index: &HashIndex, buckets: usize) -> Result<bool> {
        if self.done.is_some() {
            return Ok(true);
        }
        debug_assert!(index.bits == self.bits && !index.growing(), "doubling under a snapshot");
        let end = self.next.saturating_add(buckets as u64).min(index.snapshot_buckets());
        while self.next < end {
            let b = index.snapshot_bucket(self.next);
            if b.iter().any(|e| *e != 0) {
                self.frame.extend_from_slice(&self.next.to_le_bytes());
                for e in b {
                    self.frame.extend_from_slice(&e.to_le_bytes());
                }
                self.entries += entries_in(b);
                if self.frame.len() >= self.frame_buckets * BUCKET_REC {
                    self.w.frame(&self.frame)?;
                    self.frame.clear();
                }
            }
            self.next += 1;
        }
        // Overflow buckets created meanwhile are numbered after the ones copied, so the
        // copy ends once it has caught up with the growing overflow array.
        if self.next >= index.snapshot_buckets() {
            self.done = Some(self.next - self.n_main);
        }
        Ok(self.done.is_some())
    }

    /// Whether every bucket has been copied.
    pub(super) fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Bytes handed to the file since the last call (for the store's statistics).
    pub(super) fn new_bytes(&mut self) -> u64 {
        let w = self.w.written();
        let d = w - self.reported;
        self.reported = w;
        d
    }

    /// Memory held by the writer's buffers.
    pub(super) fn memory(&self) -> usize {
        self.w.buffer_bytes() + self.frame.capacity()
    }

    /// Writes the last frame, the final header and the trailer, fsyncs, renames the file
    /// to its final name and fsyncs the directory. Must follow a `step` that returned
    /// true. Returns the bytes written since the last [`new_bytes`](Self::new_bytes).
    pub(super) fn finish(mut self, fs: &dyn Fs) -> Result<u64> {
        let n_ov = self.done.expect("every bucket copied before the snapshot is finished");
        if !self.frame.is_empty() {
            self.w.frame(&self.frame)?;
        }
        self.w.rewrite_first_frame(&header(self.b0, self.bits, self.n_main, n_ov, self.entries))?;
        let len = self.w.finish()?;
        publish(fs, &self.dir, &join(&self.dir, &self.tmp_name), &join(&self.dir, &self.name))?;
        Ok(len - self.reported)
    }
}

/// Writes the whole of `index` as snapshot `name` at once (exact at log address
/// `from`). Returns the bytes written.
pub(super) fn write_whole(
    fs: &dyn Fs,
    dir: &Path,
    name: String,
    index: &HashIndex,
    from: u64,
) -> Result<u64> {
    let mut s = SnapshotWriter::start(fs, dir, name, index, from, 1 << 20)?;
    s.step(index, usize::MAX)?;
    s.finish(fs)
}

/// The log range index entries may point into: `[begin, tail)` of the manifest, and
/// no address inside a page header.
pub(super) struct LogRange {
    pub(super) tail: u64,
    pub(super) page_bits: u32,
}

/// Loads an index snapshot, validating everything in it before use: sizes against the
/// budget before allocating, bucket numbers, entry counts, every entry's address
/// against the log of its manifest, and the overflow links (in range, each overflow
/// bucket linked from at most one bucket, so no chain loops).
/// Errors name the file and the offset of the bad header, bucket or frame.
pub(super) fn read_index(
    fs: &dyn Fs,
    path: &Path,
    budget: u64,
    range: &LogRange,
) -> Result<HashIndex> {
    const BUCKET_RECORD: usize = 8 + 8 * 8;
    let mut r = BlockReader::open(fs, path, INDEX_MAGIC, FORMAT_VERSION)?;
    let mut buf = Vec::new();
    if !r.next(&mut buf)? {
        let at = r.payload_offset();
        return Err(Error::corrupt(path, at, "index snapshot has no header frame"));
    }
    let head_at = r.payload_offset();
    let mut c = Cursor::new(&buf, path, head_at);
    let b0 = c.u32()?;
    let bits = c.u32()?;
    let n_main = c.u64()?;
    let n_ov = c.u64()?;
    let count = c.u64()?;
    if !(1..=40).contains(&bits)
        || b0 > bits
        || bits > b0 + index::TAG_BITS
        || n_main != 1 << bits
        || n_ov > (1 << 36)
    {
        return Err(Error::corrupt(path, head_at, "index snapshot header has impossible sizes"));
    }
    // Checked before allocating, so a damaged or foreign header cannot exhaust memory.
    let needed = (n_main + n_ov) * BUCKET_BYTES;
    if needed > budget {
        return Err(Error::BudgetTooSmall {
            budget,
            needed,
            what: format!("the hash index recorded in {}", path.display()),
        });
    }
    let mut index = HashIndex::from_parts(
        b0,
        bits,
        vec![[0; 8]; n_main as usize],
        vec![[0; 8]; n_ov as usize],
        count,
    );
    let total = n_main + n_ov;
    let page_mask = (1u64 << range.page_bits) - 1;
    let mut next = 0u64;
    let mut entries = 0u64;
    // File offset of each bucket record that links to an overflow bucket.
    let mut links: Vec<(u64, u64, u64)> = Vec::new();
    while r.next(&mut buf)? {
        let frame_at = r.payload_offset();
        if buf.len() % BUCKET_RECORD != 0 {
            return Err(Error::corrupt(path, frame_at, "index snapshot frame of wrong size"));
        }
        for (i, rec) in buf.chunks_exact(BUCKET_RECORD).enumerate() {
            let at = frame_at + (i * BUCKET_RECORD) as u64;
            let no = u64::from_le_bytes(rec[..8].try_into().expect("8"));
            if no < next || no >= total {
                return Err(Error::corrupt(
                    path,
                    at,
                    format!("index snapshot bucket {no} out of order or range"),
                ));
            }
            next = no + 1;
            let bucket = if no < n_main {
                &mut index.main[no as usize]
            } else {
                &mut index.overflow[(no - n_main) as usize]
            };
            for (i, e) in rec[8..].chunks_exact(8).enumerate() {
                bucket[i] = u64::from_le_bytes(e.try_into().expect("8"));
            }
            for &e in &bucket[..index::SLOTS] {
                if e == 0 {
                    continue;
                }
                let a = index::addr_of(e);
                // Below the checkpoint's `begin` is stale (compacted since the snapshot
                // started), dropped by recovery; past the tail, in page 0 or in a page
                // header is damage.
                let first = 1u64 << range.page_bits;
                if a < first || a >= range.tail || ((a & page_mask) as usize) < PAGE_HDR {
                    return Err(Error::corrupt(
                        path,
                        at,
                        format!(
                            "index snapshot bucket {no} points at log address {a}, outside \
                             the checkpoint's log [{first}, {})",
                            range.tail
                        ),
                    ));
                }
                entries += 1;
            }
            let link = bucket[index::SLOTS];
            if link > n_ov {
                return Err(Error::corrupt(
                    path,
                    at,
                    format!("index snapshot bucket {no} links to overflow bucket {link} of {n_ov}"),
                ));
            }
            if link != 0 {
                links.push((no, link - 1, at));
            }
        }
    }
    if entries != count {
        return Err(Error::corrupt(
            path,
            head_at,
            format!("index snapshot holds {entries} entries, its header says {count}"),
        ));
    }
    // No overflow bucket may be linked from two buckets: then no chain from a main
    // bucket can loop (a loop needs a bucket linked twice, by its chain and by the loop).
    // Buckets no chain reaches are legal in a fuzzy snapshot (created after it copied
    // the bucket that links them); recovery empties them.
    let mut linked_from: Vec<u64> = vec![u64::MAX; n_ov as usize];
    for &(no, ov, at) in &links {
        if linked_from[ov as usize] != u64::MAX {
            return Err(Error::corrupt(
                path,
                at,
                format!("index snapshot bucket {no} links to overflow bucket {ov}, already linked"),
            ));
        }
        linked_from[ov as usize] = no;
    }
    Ok(index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::{damaged, damages};
    use crate::io::StdFs;
    use proptest::prelude::*;

    /// Page bits of the log the snapshots index, and its tail (page 4).
    const PAGE_BITS: u32 = 12;
    const TAIL: u64 = (4 << PAGE_BITS) + PAGE_HDR as u64;

    /// A bucket record: its number, then slots and link.
    fn bucket(no: u64, slots: [u64; 8]) -> Vec<u8> {
        let mut b = no.to_le_bytes().to_vec();
        for s in slots {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    /// An entry pointing at log address `a` (tag 5).
    fn entry(a: u64) -> u64 {
        (5 << index::ADDR_BITS) | (a >> 3)
    }

    /// Writes a snapshot of the given header frame and bucket frames (valid checksums).
    fn write(path: &Path, frames: &[Vec<u8>]) {
        let mut w = BlockWriter::create(&StdFs, path, INDEX_MAGIC, FORMAT_VERSION).unwrap();
        for f in frames {
            w.frame(f).unwrap();
        }
        w.finish().unwrap();
    }

    fn load(path: &Path) -> Result<HashIndex> {
        let mut index =
            read_index(&StdFs, path, 1 << 20, &LogRange { tail: TAIL, page_bits: PAGE_BITS })?;
        index.clean_loaded(1 << PAGE_BITS, TAIL).map_err(|e| Error::corrupt(path, 16, e))?;
        Ok(index)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Snapshots whose frames verify but whose header (sizes, counts) and bucket
        /// records (numbers, entries, overflow links) are damaged or any bytes, and
        /// snapshot files damaged anywhere: loading answers `Ok` or `Err`.
        #[test]
        fn hostile_index_snapshots_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..80),
            ds in damages(),
            which in 0u8..4,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("index-1.snap");
            let a = (1 << PAGE_BITS) + PAGE_HDR as u64;
            let head = header(8, 8, 256, 2, 3);
            let b1 = [entry(a), entry(a + 64), 0, 0, 0, 0, 0, 1];
            let ov = [entry(a + 128), 0, 0, 0, 0, 0, 0, 0];
            let buckets = [bucket(3, b1), bucket(256, ov)].concat();
            let valid = [head.clone(), buckets.clone()];
            write(&path, &valid);
            prop_assert_eq!(load(&path).unwrap().count, 3);
            let frames = match which {
                0 => vec![damaged(&head, &ds), buckets],
                1 => vec![head, damaged(&buckets, &ds)],
                2 => vec![head, raw],
                _ => vec![raw],
            };
            write(&path, &frames);
            let _ = load(&path);
            write(&path, &valid);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, damaged(&bytes, &ds)).unwrap();
            let _ = load(&path);
        }
    }
}
