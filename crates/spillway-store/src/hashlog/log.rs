//! The hybrid log: a logical address space of fixed-size pages whose newest pages live
//! in memory (a mutable tail, then a read-only region) and whose older pages live in
//! segment files on disk.
//!
//! ```text
//!  begin            head               read_only              tail
//!    | on disk only   | in memory, immutable | in memory, mutable   |
//! ```
//! A page is written to disk exactly once, whole (one `pwrite` up to its used bytes,
//! rounded to 4 KiB), when it leaves the mutable region; record and page checksums are
//! computed at that moment, so in-place updates in the mutable region cost no
//! checksum work. A checkpoint seals the tail page early (the rest of it stays empty)
//! so that no page below a checkpoint's tail is ever written again.
//!
//! At most [`MAX_OPEN_SEGMENTS`] segment files are open at once: the least recently
//! used handle is closed when another segment is needed and reopened on demand, so
//! a log of any length holds a bounded number of file descriptors.
//!
//! With direct I/O ([`use_direct_io`](Log::use_direct_io)) segment files are opened
//! with `O_DIRECT`. Page writes already meet its alignment: each starts at a page
//! boundary of its segment, its length is a multiple of 4 KiB (or the page size), and
//! it comes from a page frame, an anonymous mapping and so page-aligned. Reads of a
//! record or a page read the 4 KiB blocks that contain it into an aligned bounce
//! buffer and copy the wanted bytes out; checksums are verified as with buffered
//! reads.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapMut;

use super::record::{put_u32, u32_at, Rec, LOG_VERSION, PAGE_HDR, PAGE_MAGIC, REC_HDR};
use crate::error::{Error, Result};
use crate::io::{
    aligned_buffer, open_file, read_exact_at, read_range_direct, write_all_at, FileHandle, Fs,
    OpenFlags, DIRECT_ALIGN,
};

/// Logical addresses end here: 44 bits of 8-byte units.
pub(crate) const ADDRESS_LIMIT: u64 = 1 << (super::index::ADDR_BITS + 3);
/// Bytes a record leaves free at the end of an otherwise empty page, so no record
/// ends exactly at a page boundary.
pub(crate) const MAX_RECORD_SLACK: usize = 8;
/// First bytes read for a disk-resident record before its length is known.
const READ_HINT: usize = 512;
/// Segment files kept open at most; the least recently used handle is closed beyond.
pub(crate) const MAX_OPEN_SEGMENTS: usize = 64;
/// Largest aligned buffer direct-I/O reads go through (a larger read takes several
/// transfers). It is also held to an eighth of a page, so that with small pages it
/// stays a small part of the buffer reserve the budget holds back; it is counted in
/// the store's resident bytes.
const BOUNCE_BYTES: usize = 128 << 10;

pub(crate) struct Log {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) dir: PathBuf,
    pub(crate) page_bits: u32,
    pub(crate) page_size: usize,
    pub(crate) seg_page_bits: u32,
    frames: VecDeque<MmapMut>,
    spare: Option<MmapMut>,
    head_page: u64,
    pub(crate) max_frames: usize,
    pub(crate) mutable_pages: usize,
    pub(crate) begin: u64,
    pub(crate) read_only: u64,
    /// Pages below this page-aligned address are on disk.
    flushed: u64,
    pub(crate) tail: u64,
    /// Open segment files, at most [`MAX_OPEN_SEGMENTS`].
    files: HashMap<u64, Segment>,
    /// Use counter stamped on a segment each time it is used (for LRU closing).
    segment_clock: u64,
    dirty: HashSet<u64>,
    disk_buf: Vec<u8>,
    disk_addr: u64,
    pub(crate) bytes_written: u64,
    pub(crate) disk_reads: u64,
    /// Segment files are opened with `O_DIRECT`.
    direct: bool,
    /// The aligned buffer of direct-I/O reads, mapped on first use.
    bounce: Option<MmapMut>,
}

/// An open segment file with its path, built once, for error messages.
struct Segment {
    path: PathBuf,
    file: Box<dyn FileHandle>,
    /// `segment_clock` when last used.
    used: u64,
}

/// Pages are written up to their used bytes rounded up to this many bytes.
const WRITE_ALIGN: usize = 4096;

pub(crate) fn segment_name(seg: u64) -> String {
    format!("log-{seg:010}.seg")
}

impl Log {
    /// A log whose tail is at the start of `tail_page` (after its header) and whose
    /// valid records start at `begin`.
    pub(crate) fn new(
        fs: Arc<dyn Fs>,
        dir: &Path,
        page_bits: u32,
        seg_page_bits: u32,
        begin: u64,
        tail: u64,
    ) -> Result<Self> {
        let page_size = 1usize << page_bits;
        let tail_page = tail >> page_bits;
        let mut log = Log {
            fs,
            dir: dir.to_path_buf(),
            page_bits,
            page_size,
            seg_page_bits,
            frames: VecDeque::new(),
            spare: None,
            head_page: tail_page,
            max_frames: 2,
            mutable_pages: 1,
            begin,
            read_only: tail,
            flushed: tail_page << page_bits,
            tail,
            files: HashMap::new(),
            segment_clock: 0,
            dirty: HashSet::new(),
            disk_buf: Vec::new(),
            disk_addr: 0,
            bytes_written: 0,
            disk_reads: 0,
            direct: false,
            bounce: None,
        };
        let frame = log.new_frame()?;
        log.frames.push_back(frame);
        Ok(log)
    }

    /// A zeroed page frame: an anonymous mapping of its own, so that an evicted page's
    /// memory goes back to the OS at once (a heap allocator may keep freed multi-MiB
    /// blocks resident), with transparent huge pages requested for fewer TLB misses.
    fn new_frame(&self) -> Result<MmapMut> {
        let frame = MmapMut::map_anon(self.page_size)
            .map_err(|e| Error::io("map a log page frame", &self.dir, e))?;
        #[cfg(target_os = "linux")]
        let _ = frame.advise(memmap2::Advice::HugePage); // a hint; failure is harmless
        Ok(frame)
    }

    #[inline]
    fn mask(&self) -> u64 {
        (self.page_size - 1) as u64
    }

    #[inline]
    pub(crate) fn tail_page(&self) -> u64 {
        self.tail >> self.page_bits
    }

    #[inline]
    pub(crate) fn head(&self) -> u64 {
        self.head_page << self.page_bits
    }

    pub(crate) fn frames_in_memory(&self) -> usize {
        self.frames.len() + usize::from(self.spare.is_some())
    }

    /// Bytes held by the buffer of the last disk-resident record read (and, with direct
    /// I/O, by the aligned buffer reads go through).
    pub(crate) fn disk_buf_bytes(&self) -> usize {
        self.disk_buf.capacity() + self.bounce.as_ref().map_or(0, |b| b.len())
    }

    /// Opens segment files with `O_DIRECT` from now on (call before any segment is
    /// opened: recovery reads segments), without checking the file system yet.
    pub(crate) fn set_direct_io(&mut self, on: bool) {
        debug_assert!(self.files.is_empty(), "segments opened before the I/O mode was set");
        self.direct = on;
    }

    /// [`set_direct_io`](Self::set_direct_io), and checks at once that the file system
    /// allows it, by opening (creating) the tail's segment: a refusal is
    /// [`Error::DirectIoUnsupported`] naming the file. (The store calls it once its
    /// directory is cleaned, so the segment it creates is not removed as a leftover.)
    pub(crate) fn use_direct_io(&mut self, on: bool) -> Result<()> {
        self.direct = on;
        if on {
            self.segment(self.segment_of(self.tail))?;
        }
        Ok(())
    }

    /// The aligned buffer of direct-I/O reads, taken out of `self` (give it back with
    /// `self.bounce = Some(..)`).
    fn take_bounce(&mut self) -> Result<MmapMut> {
        match self.bounce.take() {
            Some(b) => Ok(b),
            None => aligned_buffer(BOUNCE_BYTES.min(self.page_size / 8), &self.dir),
        }
    }

    /// Bytes from `a` to the end of its in-memory page.
    #[inline]
    pub(crate) fn mem(&self, a: u64) -> &[u8] {
        let f = &self.frames[((a >> self.page_bits) - self.head_page) as usize];
        &f[(a & self.mask()) as usize..]
    }

    #[inline]
    pub(crate) fn mem_mut(&mut self, a: u64) -> &mut [u8] {
        let mask = self.mask();
        let f = &mut self.frames[((a >> self.page_bits) - self.head_page) as usize];
        &mut f[(a & mask) as usize..]
    }

    /// Makes the record at `a` readable through [`view`](Self::view).
    #[inline]
    pub(crate) fn load(&mut self, a: u64) -> Result<()> {
        if a >= self.head() || self.disk_addr == a {
            return Ok(());
        }
        self.read_disk_record(a)
    }

    /// The record at `a`, which must be in memory or just [`load`](Self::load)ed.
    #[inline]
    pub(crate) fn view(&self, a: u64) -> Rec<'_> {
        if a >= self.head() {
            Rec(self.mem(a))
        } else {
            debug_assert_eq!(self.disk_addr, a);
            Rec(&self.disk_buf)
        }
    }

    fn locate(&self, a: u64) -> (u64, u64) {
        let page = a >> self.page_bits;
        let seg = page >> self.seg_page_bits;
        let in_seg =
            ((page & ((1 << self.seg_page_bits) - 1)) << self.page_bits) | (a & self.mask());
        (seg, in_seg)
    }

    /// The open segment `seg`, opening (or creating) its file on first use and closing
    /// the least recently used one beyond [`MAX_OPEN_SEGMENTS`]. (Closing loses nothing:
    /// a later fsync through a new handle makes the file's earlier writes durable.)
    fn segment(&mut self, seg: u64) -> Result<&Segment> {
        self.segment_clock += 1;
        let now = self.segment_clock;
        if !self.files.contains_key(&seg) {
            if self.files.len() >= MAX_OPEN_SEGMENTS {
                let lru = self.files.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k);
                if let Some(lru) = lru {
                    self.files.remove(&lru);
                }
            }
            let path = self.dir.join(segment_name(seg));
            let flags = OpenFlags { create: true, direct: self.direct };
            let file = open_file(&*self.fs, &path, flags, "open log segment")?;
            self.files.insert(seg, Segment { path, file, used: now });
        }
        let s = self.files.get_mut(&seg).expect("segment just opened");
        s.used = now;
        Ok(s)
    }

    /// Segment files open now.
    pub(crate) fn open_segments(&self) -> usize {
        self.files.len()
    }

    fn read_disk_record(&mut self, a: u64) -> Result<()> {
        let (seg, off) = self.locate(a);
        let in_page = (a & self.mask()) as usize;
        let page_left = self.page_size - in_page;
        let mut buf = std::mem::take(&mut self.disk_buf);
        let r = if self.direct {
            match self.take_bounce() {
                Ok(mut bounce) => {
                    let r = match self.segment(seg) {
                        Ok(s) => {
                            read_record_direct(s, &mut bounce, &mut buf, off, in_page, page_left)
                        }
                        Err(e) => Err(e),
                    };
                    self.bounce = Some(bounce);
                    r
                }
                Err(e) => Err(e),
            }
        } else {
            match self.segment(seg) {
                Ok(s) => read_record(s, &mut buf, off, in_page, page_left),
                Err(e) => Err(e),
            }
        };
        self.disk_buf = buf;
        self.disk_reads += 1;
        self.disk_addr = if r.is_ok() { a } else { 0 };
        r
    }

    /// Reserves `size` bytes at the tail (records never span pages). A record never
    /// ends exactly at its page's end (see [`MAX_RECORD_SLACK`]), so the tail always
    /// lies inside the tail page's frame.
    #[inline]
    pub(crate) fn alloc(&mut self, size: usize) -> Result<u64> {
        debug_assert!(PAGE_HDR + size + MAX_RECORD_SLACK <= self.page_size);
        let off = (self.tail & self.mask()) as usize;
        if off + size >= self.page_size {
            self.turn_page()?;
        }
        let a = self.tail;
        self.tail += size as u64;
        Ok(a)
    }

    /// Seals the tail page at its current fill and starts the next one.
    pub(crate) fn turn_page(&mut self) -> Result<()> {
        let p = self.tail_page();
        let used = (self.tail & self.mask()) as u32;
        put_u32(self.mem_mut(p << self.page_bits), 16, used);
        if (p + 2) << self.page_bits > ADDRESS_LIMIT {
            return Err(Error::AddressSpaceExhausted);
        }
        self.tail = ((p + 1) << self.page_bits) + PAGE_HDR as u64;
        let ro_page = (p + 2).saturating_sub(self.mutable_pages as u64);
        self.advance_read_only(ro_page << self.page_bits)?;
        while self.frames.len() >= self.max_frames.max(2) {
            self.evict_head()?;
        }
        let frame = match self.spare.take() {
            Some(mut f) => {
                f.fill(0);
                f
            }
            None => self.new_frame()?,
        };
        self.frames.push_back(frame);
        Ok(())
    }

    /// Moves the read-only boundary up to `to` (never past the tail) and writes every
    /// complete page below it that is not on disk yet.
    pub(crate) fn advance_read_only(&mut self, to: u64) -> Result<()> {
        let to = to.min(self.tail);
        if to > self.read_only {
            self.read_only = to;
        }
        while self.flushed + (self.page_size as u64) <= self.read_only {
            self.flush_page(self.flushed >> self.page_bits)?;
            self.flushed += self.page_size as u64;
        }
        Ok(())
    }

    /// Drops the oldest in-memory page, writing it first if needed.
    pub(crate) fn evict_head(&mut self) -> Result<()> {
        debug_assert!(self.head_page < self.tail_page());
        self.advance_read_only((self.head_page + 1) << self.page_bits)?;
        let frame = self.frames.pop_front().expect("head frame");
        self.head_page += 1;
        if self.spare.is_none() {
            self.spare = Some(frame);
        }
        Ok(())
    }

    /// Evicts pages until at most `max_frames` are resident.
    pub(crate) fn shrink(&mut self) -> Result<()> {
        self.spare = None;
        while self.frames.len() > self.max_frames.max(2) {
            self.evict_head()?;
        }
        Ok(())
    }

    /// Computes record and page checksums of complete page `p` and writes it.
    fn flush_page(&mut self, p: u64) -> Result<()> {
        let page_bits = self.page_bits;
        let frame = &mut self.frames[(p - self.head_page) as usize];
        let used = u32_at(frame, 16) as usize;
        let mut off = PAGE_HDR;
        while off < used {
            let (size, crc) = {
                let r = Rec(&frame[off..]);
                (r.size(), crc32c::crc32c(r.crc_span()))
            };
            put_u32(frame, off, crc);
            off += size;
        }
        put_u32(frame, 4, PAGE_MAGIC);
        frame[8..16].copy_from_slice(&p.to_le_bytes());
        frame[20..22].copy_from_slice(&LOG_VERSION.to_le_bytes());
        let crc = crc32c::crc32c(&frame[4..used]);
        put_u32(frame, 0, crc);
        let len = used.next_multiple_of(WRITE_ALIGN).min(self.page_size);
        let (seg, off) = self.locate(p << page_bits);
        self.segment(seg)?;
        let (s, frame) = (&self.files[&seg], &self.frames[(p - self.head_page) as usize]);
        // What O_DIRECT needs, true by construction (see the module docs).
        debug_assert!(off % DIRECT_ALIGN as u64 == 0 && len.is_multiple_of(DIRECT_ALIGN));
        debug_assert!((frame.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN));
        write_all_at(&*s.file, &s.path, &frame[..len], off, "write log page")?;
        self.dirty.insert(seg);
        self.bytes_written += len as u64;
        Ok(())
    }

    /// Reads complete page `p` into `buf` (from memory or disk, verifying its checksum
    /// when read from disk) and returns the bytes it uses. For the tail page, the used
    /// bytes end at the tail.
    pub(crate) fn read_page(&mut self, p: u64, buf: &mut Vec<u8>) -> Result<usize> {
        buf.clear();
        if p >= self.head_page {
            let f = &self.frames[(p - self.head_page) as usize];
            let used = if p == self.tail_page() {
                (self.tail & self.mask()) as usize
            } else {
                u32_at(f, 16) as usize
            };
            buf.extend_from_slice(&f[..used]);
            return Ok(used);
        }
        if self.direct {
            let mut bounce = self.take_bounce()?;
            let r = self.read_page_direct(p, &mut bounce, buf);
            self.bounce = Some(bounce);
            return r;
        }
        let (seg, off) = self.locate(p << self.page_bits);
        let page_size = self.page_size;
        let Segment { path, file, .. } = self.segment(seg)?;
        let f = &**file;
        buf.resize(PAGE_HDR, 0);
        read_exact_at(f, path, buf, off, "read log page header")?;
        check_page_header(path, off, p, buf, page_size)?;
        let used = u32_at(buf, 16) as usize;
        buf.resize(used, 0);
        read_exact_at(f, path, &mut buf[PAGE_HDR..], off + PAGE_HDR as u64, "read log page")?;
        if crc32c::crc32c(&buf[4..used]) != u32_at(buf, 0) {
            return Err(Error::corrupt(path, off, format!("log page {p} checksum mismatch")));
        }
        self.disk_reads += 1;
        Ok(used)
    }

    /// [`read_page`](Self::read_page) of on-disk page `p` with direct I/O: its first
    /// 4 KiB block (always written: a page is written in whole blocks), then the blocks
    /// of the rest of its used bytes.
    fn read_page_direct(&mut self, p: u64, bounce: &mut [u8], buf: &mut Vec<u8>) -> Result<usize> {
        let (seg, off) = self.locate(p << self.page_bits);
        let page_size = self.page_size;
        let Segment { path, file, .. } = self.segment(seg)?;
        let f = &**file;
        read_range_direct(f, path, bounce, off, DIRECT_ALIGN, buf, "read log page header")?;
        let used = u32_at(buf, 16) as usize;
        check_page_header(path, off, p, buf, page_size)?;
        if used <= DIRECT_ALIGN {
            buf.truncate(used);
        } else {
            let rest = used - DIRECT_ALIGN;
            read_range_direct(
                f,
                path,
                bounce,
                off + DIRECT_ALIGN as u64,
                rest,
                buf,
                "read log page",
            )?;
        }
        if crc32c::crc32c(&buf[4..used]) != u32_at(buf, 0) {
            return Err(Error::corrupt(path, off, format!("log page {p} checksum mismatch")));
        }
        self.disk_reads += 1;
        Ok(used)
    }

    /// Seals the tail page if it holds records, then writes every page below the tail
    /// and makes all of it read-only. Afterwards nothing below `tail` changes again.
    pub(crate) fn fold_over(&mut self) -> Result<()> {
        if (self.tail & self.mask()) as usize > PAGE_HDR {
            self.turn_page()?;
        }
        self.advance_read_only(self.tail)
    }

    /// fsyncs every segment written since the last call.
    pub(crate) fn sync(&mut self) -> Result<()> {
        let mut segs: Vec<u64> = self.dirty.iter().copied().collect();
        segs.sort_unstable();
        for seg in segs {
            let s = self.segment(seg)?;
            s.file.sync_data().map_err(|e| Error::io("fsync log segment", &s.path, e))?;
            self.dirty.remove(&seg);
        }
        Ok(())
    }

    /// Closes handles of segments wholly below `addr` (they are about to be deleted).
    pub(crate) fn forget_segments_below(&mut self, addr: u64) {
        let first_live = (addr >> self.page_bits) >> self.seg_page_bits;
        self.files.retain(|seg, _| *seg >= first_live);
        self.dirty.retain(|seg| *seg >= first_live);
    }

    /// The segment file holding logical address `addr` and the offset in that file.
    pub(crate) fn file_offset(&self, addr: u64) -> (PathBuf, u64) {
        let (seg, off) = self.locate(addr);
        (self.dir.join(segment_name(seg)), off)
    }

    pub(crate) fn segment_of(&self, addr: u64) -> u64 {
        (addr >> self.page_bits) >> self.seg_page_bits
    }
}

/// Checks the header of on-disk page `p` (at `off` of `path`) in the first bytes of
/// `buf`: magic, page number, used bytes within the page, a version this build reads.
fn check_page_header(path: &Path, off: u64, p: u64, buf: &[u8], page_size: usize) -> Result<()> {
    let used = u32_at(buf, 16) as usize;
    if u32_at(buf, 4) != PAGE_MAGIC
        || u64::from_le_bytes(buf[8..16].try_into().expect("8")) != p
        || used < PAGE_HDR
        || used > page_size
    {
        return Err(Error::corrupt(path, off, format!("bad header of log page {p}")));
    }
    let version = u16::from_le_bytes([buf[20], buf[21]]);
    if version > LOG_VERSION {
        return Err(Error::NewerFormat {
            path: path.to_path_buf(),
            found: u32::from(version),
            supported: u32::from(LOG_VERSION),
        });
    }
    Ok(())
}

/// [`read_record`] with direct I/O: reads the 4 KiB block(s) holding the record header
/// (up to the block boundary after it, never past the page) through `bounce`, then, if
/// the record goes on, the blocks of the rest of it.
fn read_record_direct(
    seg: &Segment,
    bounce: &mut [u8],
    buf: &mut Vec<u8>,
    off: u64,
    in_page: usize,
    page_left: usize,
) -> Result<()> {
    let (path, f) = (&seg.path, &*seg.file);
    // Bytes from the record to the block boundary after its header: the page is on
    // disk in whole blocks up to its used bytes, so they are all in the file.
    let in_block = (off % DIRECT_ALIGN as u64) as usize;
    let to_boundary = (in_block + REC_HDR).next_multiple_of(DIRECT_ALIGN) - in_block;
    let first = page_left.min(to_boundary);
    debug_assert!((in_page + first).is_multiple_of(DIRECT_ALIGN) || first == page_left);
    buf.clear();
    read_range_direct(f, path, bounce, off, first, buf, "read log record")?;
    let need = record_len(path, off, buf, first, page_left)?;
    if need > first {
        read_range_direct(
            f,
            path,
            bounce,
            off + first as u64,
            need - first,
            buf,
            "read log record",
        )?;
    } else {
        buf.truncate(need);
    }
    check_record_crc(path, off, buf)?;
    Ok(())
}

/// The length of the record whose first `first` bytes (at least its header, else an
/// error) are in `buf`, after checking its lengths fit the `page_left` bytes left in
/// its page. Both record readers (buffered and direct) call this.
fn record_len(path: &Path, off: u64, buf: &[u8], first: usize, page_left: usize) -> Result<usize> {
    if first < REC_HDR {
        return Err(Error::corrupt(path, off, "record header crosses its page end"));
    }
    let r = Rec(buf);
    let (klen, vlen, vcap) = (r.klen(), r.vlen(), r.vcap());
    if vlen > vcap || REC_HDR + klen + vcap > page_left {
        return Err(Error::corrupt(
            path,
            off,
            format!("record lengths (key {klen}, value {vlen}/{vcap}) overrun the page"),
        ));
    }
    Ok(REC_HDR + klen + vlen)
}

/// Verifies the checksum of the whole record in `buf`.
fn check_record_crc(path: &Path, off: u64, buf: &[u8]) -> Result<()> {
    if crc32c::crc32c(Rec(buf).crc_span()) != u32_at(buf, 0) {
        return Err(Error::corrupt(path, off, "log record checksum mismatch"));
    }
    Ok(())
}

/// Reads the record at in-segment offset `off` of `seg` into `buf` and verifies its
/// lengths and checksum. `in_page` is its offset in its page, `page_left` the bytes
/// from it to the page's end.
fn read_record(
    seg: &Segment,
    buf: &mut Vec<u8>,
    off: u64,
    in_page: usize,
    page_left: usize,
) -> Result<()> {
    let (path, f) = (&seg.path, &*seg.file);
    // A page is on disk up to its used bytes rounded to WRITE_ALIGN, so the bytes up to
    // the boundary after the record header are in the file.
    let to_boundary = (in_page + REC_HDR).next_multiple_of(WRITE_ALIGN) - in_page;
    let first = page_left.min(READ_HINT.min(to_boundary).max(REC_HDR));
    buf.clear();
    buf.resize(first, 0);
    read_exact_at(f, path, buf, off, "read log record")?;
    let need = record_len(path, off, buf, first, page_left)?;
    if need > first {
        buf.resize(need, 0);
        read_exact_at(f, path, &mut buf[first..], off + first as u64, "read log record")?;
    }
    check_record_crc(path, off, buf)?;
    Ok(())
}
