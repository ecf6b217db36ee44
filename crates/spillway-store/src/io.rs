//! The I/O seam under every file a Spillway store writes (log segments, snapshots,
//! manifests). Production code uses [`StdFs`]; tests wrap it in [`FaultFs`] to inject
//! failed, short and torn writes and failed fsyncs, the way redb's `StorageBackend`
//! lets its tests build the file images a crash would leave.
//!
//! The trait methods transfer bytes in one call and may transfer fewer than asked;
//! callers go through [`read_exact_at`] and [`write_all_at`], which check every byte
//! count and turn a transfer that stops early into [`Error::ShortIo`].
//!
//! Direct I/O ([`OpenFlags::direct`], `O_DIRECT`) bypasses the OS page cache. Its
//! transfers must start at offsets, and cover lengths, that are multiples of
//! [`DIRECT_ALIGN`], from buffers aligned to it; [`read_range_direct`] reads any byte
//! range that way through an aligned bounce buffer. A file system that refuses
//! `O_DIRECT` (EINVAL at open) is reported as [`Error::DirectIoUnsupported`] by
//! [`open_file`], never silently served through the page cache.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// An open file that supports positioned I/O.
// A file handle's length is not a collection's size; `is_empty` would mislead.
#[allow(clippy::len_without_is_empty)]
pub trait FileHandle: Send + Sync {
    /// One positioned read; may return fewer bytes than `buf.len()` (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// One positioned write; may write fewer bytes than `buf.len()`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Makes written data durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

/// Alignment of offsets, lengths and buffers of direct-I/O transfers: 4 KiB, the
/// largest logical block size of the disks we run on and the page size of the OS.
pub const DIRECT_ALIGN: usize = 4096;

/// How [`Fs::open_with`] opens a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Bypass the OS page cache (`O_DIRECT`): every transfer must be aligned to
    /// [`DIRECT_ALIGN`] in offset, length and buffer address.
    pub direct: bool,
}

/// File-system operations a store needs.
pub trait Fs: Send + Sync + fmt::Debug {
    /// Opens `path` for reading and writing, creating it if `create`.
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>>;
    /// Opens `path` as `flags` say. The default serves buffered opens through
    /// [`open`](Self::open) and refuses direct ones with [`io::ErrorKind::Unsupported`]
    /// (a seam that cannot bypass a cache must not pretend to).
    fn open_with(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn FileHandle>> {
        if flags.direct {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "this file-system seam does not implement direct I/O",
            ));
        }
        self.open(path, flags.create)
    }
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes a directory's entries (creations, renames) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries of a directory.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdFile(File);

impl FileHandle for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl Fs for StdFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>> {
        let f =
            OpenOptions::new().read(true).write(true).create(create).truncate(false).open(path)?;
        Ok(Box::new(StdFile(f)))
    }
    fn open_with(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn FileHandle>> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(flags.create).truncate(false);
        if flags.direct {
            o.custom_flags(libc::O_DIRECT);
        }
        Ok(Box::new(StdFile(o.open(path)?)))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in std::fs::read_dir(dir)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
}

/// Reads exactly `buf.len()` bytes at `offset`, or fails naming file and offset.
pub fn read_exact_at(
    f: &dyn FileHandle,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
    op: &'static str,
) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(Error::ShortIo {
                    op,
                    path: path.to_path_buf(),
                    offset,
                    expected: buf.len(),
                    actual: done,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(op, path, e)),
        }
    }
    Ok(())
}

/// Opens `path` through `fs` as `flags` say; `op` names the purpose for errors. A
/// direct open the file system refuses (EINVAL, as file systems without `O_DIRECT`
/// answer, or a seam's [`io::ErrorKind::Unsupported`]) becomes
/// [`Error::DirectIoUnsupported`] naming the file.
pub fn open_file(
    fs: &dyn Fs,
    path: &Path,
    flags: OpenFlags,
    op: &'static str,
) -> Result<Box<dyn FileHandle>> {
    fs.open_with(path, flags).map_err(|e| direct_open_error(path, flags, op, e))
}

fn direct_open_error(path: &Path, flags: OpenFlags, op: &'static str, e: io::Error) -> Error {
    let refused = e.raw_os_error() == Some(libc::EINVAL) || e.kind() == io::ErrorKind::Unsupported;
    if flags.direct && refused {
        Error::DirectIoUnsupported { path: path.to_path_buf(), source: e }
    } else {
        Error::io(op, path, e)
    }
}

/// An anonymous mapping of `len` bytes (rounded up to [`DIRECT_ALIGN`]): page-aligned,
/// as direct-I/O buffers must be. `dir` (the store directory) is named in errors.
pub(crate) fn aligned_buffer(len: usize, dir: &Path) -> Result<memmap2::MmapMut> {
    memmap2::MmapMut::map_anon(len.next_multiple_of(DIRECT_ALIGN))
        .map_err(|e| Error::io("map a direct-I/O buffer", dir, e))
}

/// Appends the bytes `offset..offset + len` of a file opened for direct I/O to `out`:
/// reads the [`DIRECT_ALIGN`]ed blocks that contain them into `bounce` (aligned, a
/// multiple of [`DIRECT_ALIGN`] long), as many as fit per call, and copies the wanted
/// bytes out. Every block read must be in the file whole (a short read is
/// [`Error::ShortIo`]).
pub(crate) fn read_range_direct(
    f: &dyn FileHandle,
    path: &Path,
    bounce: &mut [u8],
    offset: u64,
    len: usize,
    out: &mut Vec<u8>,
    op: &'static str,
) -> Result<()> {
    debug_assert!(bounce.len() >= DIRECT_ALIGN && bounce.len() % DIRECT_ALIGN == 0);
    let align = DIRECT_ALIGN as u64;
    let end = offset + len as u64;
    let mut block = offset - offset % align;
    out.reserve(len);
    while block < end {
        let n = ((end - block).next_multiple_of(align) as usize).min(bounce.len());
        read_exact_at(f, path, &mut bounce[..n], block, op)?;
        let from = offset.max(block);
        let to = end.min(block + n as u64);
        out.extend_from_slice(&bounce[(from - block) as usize..(to - block) as usize]);
        block += n as u64;
    }
    Ok(())
}

/// Writes all of `buf` at `offset`, or fails naming file and offset.
pub fn write_all_at(
    f: &dyn FileHandle,
    path: &Path,
    buf: &[u8],
    offset: u64,
    op: &'static str,
) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(Error::ShortIo {
                    op,
                    path: path.to_path_buf(),
                    offset,
                    expected: buf.len(),
                    actual: done,
                })
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(op, path, e)),
        }
    }
    Ok(())
}

/// Which fault [`FaultFs`] injects next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// No fault.
    #[default]
    None,
    /// After `after_bytes` more bytes are written, every write fails with ENOSPC.
    FailWrites {
        /// Bytes still written successfully.
        after_bytes: u64,
    },
    /// After `after_bytes` more bytes, each write call transfers at most `max` bytes and
    /// then the device reports 0 bytes written (a full disk).
    ShortWrites {
        /// Bytes still written normally.
        after_bytes: u64,
        /// Bytes the first short write transfers.
        max: usize,
    },
    /// Every fsync fails with EIO.
    FailSync,
    /// After `after_bytes` more bytes, the next write lands only its first half and
    /// every later operation fails, as if power was cut mid-write.
    Torn {
        /// Bytes still written normally.
        after_bytes: u64,
    },
}

#[derive(Debug, Default)]
struct FaultState {
    fault: Fault,
    written: u64,
    dead: bool,
}

/// A file system that injects [`Fault`]s into an inner one. Clone it to keep a handle
/// for changing the fault while a store uses it.
#[derive(Clone, Debug)]
pub struct FaultFs {
    inner: Arc<dyn Fs>,
    state: Arc<Mutex<FaultState>>,
}

impl FaultFs {
    /// Wraps the real file system.
    pub fn new() -> Self {
        FaultFs { inner: Arc::new(StdFs), state: Arc::default() }
    }

    /// Arms a fault, counting bytes from now.
    pub fn set(&self, fault: Fault) {
        let mut s = self.state.lock().expect("fault state");
        s.fault = fault;
        s.written = 0;
    }

    /// True once a torn write has "cut the power".
    pub fn is_dead(&self) -> bool {
        self.state.lock().expect("fault state").dead
    }
}

impl Default for FaultFs {
    fn default() -> Self {
        Self::new()
    }
}

fn dead() -> io::Error {
    io::Error::other("injected fault: device gone after torn write")
}

struct FaultFile {
    inner: Box<dyn FileHandle>,
    state: Arc<Mutex<FaultState>>,
}

impl FileHandle for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.state.lock().expect("fault state").dead {
            return Err(dead());
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut s = self.state.lock().expect("fault state");
        if s.dead {
            return Err(dead());
        }
        let allowed = match s.fault {
            Fault::FailWrites { after_bytes }
            | Fault::ShortWrites { after_bytes, .. }
            | Fault::Torn { after_bytes } => after_bytes.saturating_sub(s.written),
            _ => u64::MAX,
        };
        if (buf.len() as u64) <= allowed {
            s.written += buf.len() as u64;
            drop(s);
            return self.inner.write_at(buf, offset);
        }
        match s.fault.clone() {
            Fault::FailWrites { .. } => Err(io::Error::from_raw_os_error(libc::ENOSPC)),
            Fault::ShortWrites { max, .. } => {
                if s.written > u64::MAX / 2 {
                    return Ok(0);
                }
                s.written = u64::MAX; // later calls write nothing
                let n = max.min(buf.len());
                drop(s);
                self.inner.write_at(&buf[..n], offset)
            }
            Fault::Torn { .. } => {
                s.dead = true;
                drop(s);
                let half = buf.len() / 2;
                self.inner.write_at(&buf[..half], offset)?;
                Err(dead())
            }
            _ => unreachable!("other faults never limit writes"),
        }
    }

    fn sync_data(&self) -> io::Result<()> {
        let s = self.state.lock().expect("fault state");
        if s.dead {
            return Err(dead());
        }
        if s.fault == Fault::FailSync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        drop(s);
        self.inner.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.state.lock().expect("fault state").dead {
            return Err(dead());
        }
        self.inner.set_len(len)
    }
}

impl Fs for FaultFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>> {
        if self.is_dead() {
            return Err(dead());
        }
        Ok(Box::new(FaultFile { inner: self.inner.open(path, create)?, state: self.state.clone() }))
    }
    fn open_with(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn FileHandle>> {
        if self.is_dead() {
            return Err(dead());
        }
        let inner = self.inner.open_with(path, flags)?;
        Ok(Box::new(FaultFile { inner, state: self.state.clone() }))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        if self.is_dead() {
            return Err(dead());
        }
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.is_dead() {
            return Err(dead());
        }
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let s = self.state.lock().expect("fault state");
        if s.dead {
            return Err(dead());
        }
        if s.fault == Fault::FailSync {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        drop(s);
        self.inner.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
}

/// `dir/name` as a path.
/// Bytes of the files under `dir`, recursively, counting a hard-linked file once (a
/// RocksDB checkpoint shares SST files with the live database). Unreadable entries
/// count as 0: this feeds `stats()`, which must not fail.
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, seen: &mut std::collections::HashSet<(u64, u64)>, total: &mut u64) {
        let Ok(rd) = std::fs::read_dir(dir) else { return };
        for entry in rd.flatten() {
            let Ok(m) = entry.metadata() else { continue };
            if m.is_dir() {
                walk(&entry.path(), seen, total);
            } else if m.is_file() && seen.insert((m.dev(), m.ino())) {
                *total += m.len();
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    walk(dir, &mut seen, &mut total);
    total
}

pub(crate) fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
