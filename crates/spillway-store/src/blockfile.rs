//! Checksummed framed files: the container of MemStore snapshots, hashlog index
//! snapshots and manifests.
//!
//! FORMAT (all integers little-endian):
//! ```text
//! header  : magic [8] | version u32 | reserved u32 (0)               16 bytes
//! frame   : len u32 (< 0xFFFF_FFFF, <= MAX_FRAME = 64 MiB) | crc32c(payload) u32 | payload [len]
//! trailer : 0xFFFF_FFFF u32 | crc32c(frames u64 | payload_bytes u64) u32
//! ```
//! A file without its trailer, with a frame running past the end, or with any checksum
//! mismatch is reported as corrupt with the file and the offset of the bad frame.
//! Files are written under a temporary name, fsynced, then renamed into place.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::{read_exact_at, write_all_at, FileHandle, Fs};

const HEADER: usize = 16;
const END: u32 = u32::MAX;
/// Largest frame payload, in bytes: writers refuse a larger one with
/// [`Error::ValueTooLarge`] (stores bound their records so they never ask), and readers
/// report a frame header claiming more as corrupt before allocating for it.
pub(crate) const MAX_FRAME: usize = 64 << 20;
const WRITE_BUF: usize = 1 << 20;

/// Streams frames into a new file.
pub(crate) struct BlockWriter {
    file: Box<dyn FileHandle>,
    path: PathBuf,
    buf: Vec<u8>,
    /// Buffered bytes that trigger a write.
    flush_at: usize,
    offset: u64,
    frames: u64,
    payload: u64,
    /// Payload length of frame 0, for [`rewrite_first_frame`](Self::rewrite_first_frame).
    first_len: Option<usize>,
}

impl BlockWriter {
    pub(crate) fn create(fs: &dyn Fs, path: &Path, magic: [u8; 8], version: u32) -> Result<Self> {
        Self::create_buffered(fs, path, magic, version, WRITE_BUF)
    }

    /// Like [`create`](Self::create), writing whenever `buffer` bytes are buffered (a
    /// writer kept open across many operations keeps its buffer small).
    pub(crate) fn create_buffered(
        fs: &dyn Fs,
        path: &Path,
        magic: [u8; 8],
        version: u32,
        buffer: usize,
    ) -> Result<Self> {
        let file = fs.open(path, true).map_err(|e| Error::io("create file", path, e))?;
        file.set_len(0).map_err(|e| Error::io("truncate file", path, e))?;
        let flush_at = buffer.clamp(4096, WRITE_BUF);
        let mut buf = Vec::with_capacity(flush_at + 64);
        buf.extend_from_slice(&magic);
        buf.extend_from_slice(&version.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        Ok(BlockWriter {
            file,
            path: path.to_path_buf(),
            buf,
            flush_at,
            offset: 0,
            frames: 0,
            payload: 0,
            first_len: None,
        })
    }

    /// Bytes handed to the file so far (the buffer not included).
    pub(crate) fn written(&self) -> u64 {
        self.offset
    }

    /// Bytes of the write buffer.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buf.capacity()
    }

    /// Replaces the payload of frame 0 by `payload` of the same length (a header whose
    /// counts are known only at the end), in the buffer or in the file.
    pub(crate) fn rewrite_first_frame(&mut self, payload: &[u8]) -> Result<()> {
        assert_eq!(self.first_len, Some(payload.len()), "frame 0 must keep its length");
        let mut bytes = Vec::with_capacity(8 + payload.len());
        bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        bytes.extend_from_slice(payload);
        if self.offset == 0 {
            self.buf[HEADER..HEADER + bytes.len()].copy_from_slice(&bytes);
            Ok(())
        } else {
            write_all_at(&*self.file, &self.path, &bytes, HEADER as u64, "rewrite snapshot header")
        }
    }

    pub(crate) fn frame(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() > MAX_FRAME {
            return Err(Error::ValueTooLarge { len: payload.len(), max: MAX_FRAME });
        }
        self.buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        self.buf.extend_from_slice(payload);
        if self.frames == 0 {
            self.first_len = Some(payload.len());
        }
        self.frames += 1;
        self.payload += payload.len() as u64;
        if self.buf.len() >= self.flush_at {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        write_all_at(&*self.file, &self.path, &self.buf, self.offset, "write snapshot")?;
        self.offset += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes the trailer and fsyncs. Returns the file length.
    pub(crate) fn finish(mut self) -> Result<u64> {
        let mut tail = [0u8; 16];
        tail[..8].copy_from_slice(&self.frames.to_le_bytes());
        tail[8..].copy_from_slice(&self.payload.to_le_bytes());
        self.buf.extend_from_slice(&END.to_le_bytes());
        self.buf.extend_from_slice(&crc32c::crc32c(&tail).to_le_bytes());
        self.flush()?;
        self.file.sync_data().map_err(|e| Error::io("fsync snapshot", &self.path, e))?;
        Ok(self.offset)
    }
}

/// Reads frames back, verifying every checksum.
pub(crate) struct BlockReader {
    file: Box<dyn FileHandle>,
    path: PathBuf,
    len: u64,
    offset: u64,
    /// File offset of the payload of the frame `next` returned last.
    payload_at: u64,
    frames: u64,
    payload: u64,
    done: bool,
    /// Format version from the header.
    pub(crate) version: u32,
}

impl BlockReader {
    /// Opens `path`, checking its magic and that its version is at most `max_version`.
    pub(crate) fn open(fs: &dyn Fs, path: &Path, magic: [u8; 8], max_version: u32) -> Result<Self> {
        let file = fs.open(path, false).map_err(|e| Error::io("open file", path, e))?;
        let len = file.len().map_err(|e| Error::io("stat file", path, e))?;
        if len < HEADER as u64 {
            return Err(Error::corrupt(
                path,
                0,
                format!("file of {len} bytes is shorter than its header"),
            ));
        }
        let mut h = [0u8; HEADER];
        read_exact_at(&*file, path, &mut h, 0, "read header")?;
        if h[..8] != magic {
            return Err(Error::NotAStore {
                path: path.to_path_buf(),
                reason: format!("bad magic {:?}, expected {:?}", &h[..8], magic),
            });
        }
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4"));
        if version > max_version {
            return Err(Error::NewerFormat {
                path: path.to_path_buf(),
                found: version,
                supported: max_version,
            });
        }
        Ok(BlockReader {
            file,
            path: path.to_path_buf(),
            len,
            offset: HEADER as u64,
            payload_at: HEADER as u64,
            frames: 0,
            payload: 0,
            done: false,
            version,
        })
    }

    /// Reads the next frame into `out`; `Ok(false)` after the verified trailer.
    pub(crate) fn next(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        if self.done {
            return Ok(false);
        }
        let at = self.offset;
        if at + 8 > self.len {
            return Err(Error::corrupt(
                &self.path,
                at,
                "file ends without its trailer (truncated)",
            ));
        }
        let mut h = [0u8; 8];
        read_exact_at(&*self.file, &self.path, &mut h, at, "read frame header")?;
        let len = u32::from_le_bytes(h[..4].try_into().expect("4"));
        let crc = u32::from_le_bytes(h[4..].try_into().expect("4"));
        if len == END {
            let mut tail = [0u8; 16];
            tail[..8].copy_from_slice(&self.frames.to_le_bytes());
            tail[8..].copy_from_slice(&self.payload.to_le_bytes());
            if crc32c::crc32c(&tail) != crc {
                return Err(Error::corrupt(
                    &self.path,
                    at,
                    "trailer checksum mismatch (frames lost?)",
                ));
            }
            if at + 8 != self.len {
                return Err(Error::corrupt(&self.path, at + 8, "bytes after the trailer"));
            }
            self.done = true;
            return Ok(false);
        }
        let len = len as usize;
        if len > MAX_FRAME || at + 8 + len as u64 > self.len {
            return Err(Error::corrupt(
                &self.path,
                at,
                format!("frame length {len} runs past the end of the file ({} bytes)", self.len),
            ));
        }
        out.clear();
        out.resize(len, 0);
        read_exact_at(&*self.file, &self.path, out, at + 8, "read frame")?;
        if crc32c::crc32c(out) != crc {
            return Err(Error::corrupt(&self.path, at, "frame checksum mismatch"));
        }
        self.payload_at = at + 8;
        self.offset = at + 8 + len as u64;
        self.frames += 1;
        self.payload += len as u64;
        Ok(true)
    }

    /// The file path (for error messages).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// File offset of the payload of the frame [`next`](Self::next) returned last (of
    /// the trailer once it returned `false`): errors about a frame's content name the
    /// payload offset plus the position in it.
    pub(crate) fn payload_offset(&self) -> u64 {
        if self.done {
            self.offset
        } else {
            self.payload_at
        }
    }
}

/// Renames `tmp` to `dst` and fsyncs their directory: the publish step of every
/// atomic file write.
pub(crate) fn publish(fs: &dyn Fs, dir: &Path, tmp: &Path, dst: &Path) -> Result<()> {
    fs.rename(tmp, dst).map_err(|e| Error::io("rename into place", dst, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io("fsync directory", dir, e))
}

/// A cursor over a frame payload that turns short reads into corruption errors naming
/// the file offset of the field (`base` is the payload's offset in the file).
pub(crate) struct Cursor<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) pos: usize,
    path: &'a Path,
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8], path: &'a Path, base: u64) -> Self {
        Cursor { buf, pos: 0, path, base }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n);
        let s = end.and_then(|end| self.buf.get(self.pos..end)).ok_or_else(|| {
            Error::corrupt(
                self.path,
                self.offset(),
                format!("record field of {n} bytes runs past its frame"),
            )
        })?;
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().expect("2")))
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4")))
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8")))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// File offset of the next byte the cursor reads.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::{damaged, damages};
    use crate::io::StdFs;
    use proptest::prelude::*;

    const MAGIC: [u8; 8] = *b"SWTEST\0\0";

    /// Every frame of the block file at `path`.
    fn read_all(path: &Path) -> Result<Vec<Vec<u8>>> {
        let mut r = BlockReader::open(&StdFs, path, MAGIC, 2)?;
        let (mut out, mut buf) = (Vec::new(), Vec::new());
        while r.next(&mut buf)? {
            out.push(buf.clone());
        }
        Ok(out)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes (also behind a valid header), and valid files damaged (a frame
        /// length set huge, a cut, a flipped byte): reading answers `Ok` or `Err`, and
        /// what it returns is no more than the file holds.
        #[test]
        fn hostile_block_files_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..64),
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..4),
            ds in damages(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let mut w = BlockWriter::create(&StdFs, &path, MAGIC, 1).unwrap();
            for f in &frames {
                w.frame(f).unwrap();
            }
            w.finish().unwrap();
            let valid = std::fs::read(&path).unwrap();
            prop_assert_eq!(&read_all(&path).unwrap(), &frames);
            let behind_header = [&valid[..HEADER], &raw[..]].concat();
            for bytes in [raw, behind_header, damaged(&valid, &ds)] {
                std::fs::write(&path, &bytes).unwrap();
                if let Ok(got) = read_all(&path) {
                    prop_assert!(got.iter().map(Vec::len).sum::<usize>() <= bytes.len());
                }
            }
        }

        /// Reads of any length, a length field set huge included, from any bytes: each
        /// answers `Ok` or `Err` and the cursor never moves past the end.
        #[test]
        fn hostile_cursor_lengths_are_an_error_not_a_panic(
            buf in proptest::collection::vec(any::<u8>(), 0..32),
            reads in proptest::collection::vec((0u8..4, prop_oneof![0usize..40, Just(usize::MAX), any::<usize>()]), 0..8),
        ) {
            let mut c = Cursor::new(&buf, Path::new("f"), 16);
            for (kind, n) in reads {
                let ok = match kind {
                    0 => c.u16().is_ok(),
                    1 => c.u32().is_ok(),
                    2 => c.u64().is_ok(),
                    _ => c.bytes(n).is_ok(),
                };
                prop_assert!(c.pos <= buf.len(), "{ok}");
            }
        }
    }

    /// The minimal case the cursor proptest found: a length that overflows the position.
    #[test]
    fn a_cursor_read_of_usize_max_bytes_is_an_error_not_an_overflow() {
        let mut c = Cursor::new(&[0, 0, 0], Path::new("f"), 16);
        c.u16().unwrap();
        let e = c.bytes(usize::MAX).unwrap_err();
        assert!(matches!(e, Error::Corrupt { offset: 18, .. }), "{e}");
    }
}
