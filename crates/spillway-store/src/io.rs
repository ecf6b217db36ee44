//! The I/O seam under every file a Spillway store writes (log segments, snapshots,
//! manifests) and under the engine's event reservoir (`spillway_engine::reservoir`).
//! Production code uses [`StdFs`]; tests wrap it in [`FaultFs`] to inject failed, short
//! and torn writes, failed fsyncs and failed reads of one file, and in [`CrashFs`] to
//! build the file images a power loss would leave (unsynced writes dropped or torn,
//! unsynced directory entries undone), the way redb's `StorageBackend` lets its tests
//! do both. A store takes its `Fs` from [`StoreOptions::fs`](crate::StoreOptions::fs)
//! or its `open_with_fs`.
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    debug_assert!(bounce.len() >= DIRECT_ALIGN && bounce.len().is_multiple_of(DIRECT_ALIGN));
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
    /// Reads of this file fail with EIO ([`FaultFs::fail_reads_of`]).
    fail_reads: Option<PathBuf>,
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

    /// Makes every read of the file at `path` fail with EIO (opening and measuring it
    /// still succeed), as a transient device error would, until called again; `None`
    /// stops it. Independent of the [`Fault`] armed with [`set`](Self::set).
    pub fn fail_reads_of(&self, path: Option<&Path>) {
        self.state.lock().expect("fault state").fail_reads = path.map(Path::to_path_buf);
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
    path: PathBuf,
    state: Arc<Mutex<FaultState>>,
}

impl FileHandle for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let s = self.state.lock().expect("fault state");
        if s.dead {
            return Err(dead());
        }
        if s.fail_reads.as_deref() == Some(self.path.as_path()) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        drop(s);
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
        let inner = self.inner.open(path, create)?;
        Ok(Box::new(FaultFile { inner, path: path.to_path_buf(), state: self.state.clone() }))
    }
    fn open_with(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn FileHandle>> {
        if self.is_dead() {
            return Err(dead());
        }
        let inner = self.inner.open_with(path, flags)?;
        Ok(Box::new(FaultFile { inner, path: path.to_path_buf(), state: self.state.clone() }))
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

/// What a simulated power loss ([`CrashFs::crash`]) leaves of the writes and directory
/// operations that were not made durable by `sync_data` / `sync_dir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashMode {
    /// Every write since a file's last `sync_data` is lost, and every directory
    /// operation since its directory's last `sync_dir` is undone.
    DropUnsynced,
    /// Each `sector`-aligned piece of every unsynced write (and each unsynced
    /// truncation) independently survives or is lost, so writes land out of order and
    /// torn; a random prefix of each directory's unsynced operations survives.
    Scramble {
        /// Tearing granularity in bytes (512 or 4096).
        sector: usize,
    },
    /// Each file keeps its unsynced writes in order up to a random point; the write at
    /// that point is torn (a random subset of its sectors lands). A random prefix of
    /// each directory's unsynced operations survives.
    TornPrefix {
        /// Tearing granularity in bytes (512 or 4096).
        sector: usize,
    },
}

/// An unsynced change to a file's contents.
#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// An unsynced change to a directory's entries.
#[derive(Clone, Debug)]
enum DirOp {
    Create {
        name: String,
        id: u64,
    },
    Remove {
        name: String,
    },
    Rename {
        from: String,
        to: String,
        id: u64,
    },
    /// A directory created in this one.
    MkDir {
        name: String,
    },
}

#[derive(Debug, Default)]
struct CrashFile {
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Debug, Default)]
struct CrashState {
    next_id: u64,
    files: HashMap<u64, CrashFile>,
    /// The live directory entries of every tracked file, as the OS shows them now.
    names: HashMap<PathBuf, u64>,
    /// Per directory: the entries as of its last `sync_dir` (or when first seen).
    durable_dirs: HashMap<PathBuf, BTreeMap<String, u64>>,
    /// Per directory: the operations since its last `sync_dir`, in order.
    dir_ops: HashMap<PathBuf, Vec<DirOp>>,
    /// Per directory: its subdirectories as of its last `sync_dir` (or when first seen).
    durable_subdirs: HashMap<PathBuf, BTreeSet<String>>,
    /// Directories created through the seam (others, made before it or beside it, count
    /// as durable).
    made: BTreeSet<PathBuf>,
    suppress_sync: bool,
    /// Mutating calls left before the power is cut (`None`: never).
    cut_after: Option<u64>,
    cut: bool,
    /// Mutating calls made so far.
    calls: u64,
}

fn split(path: &Path) -> (PathBuf, String) {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    (dir, name)
}

fn power_cut() -> io::Error {
    io::Error::other("injected power cut: the device is gone until CrashFs::crash")
}

impl CrashState {
    /// Counts one mutating call against the armed power cut.
    fn tick(&mut self) -> io::Result<()> {
        if self.cut {
            return Err(power_cut());
        }
        self.calls += 1;
        if let Some(n) = self.cut_after.as_mut() {
            if *n == 0 {
                self.cut = true;
                return Err(power_cut());
            }
            *n -= 1;
        }
        Ok(())
    }

    fn dir_op(&mut self, dir: &Path, op: DirOp) {
        self.durable_dirs.entry(dir.to_path_buf()).or_default();
        self.dir_ops.entry(dir.to_path_buf()).or_default().push(op);
    }

    fn sync_file(&mut self, id: u64) {
        if self.suppress_sync {
            return;
        }
        if let Some(f) = self.files.get_mut(&id) {
            let pending = std::mem::take(&mut f.pending);
            for p in &pending {
                apply(&mut f.durable, p);
            }
        }
    }
}

fn apply(image: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset as usize..end].copy_from_slice(data);
        }
        Pending::SetLen(len) => image.resize(*len as usize, 0),
    }
}

/// Splits a write into pieces that end at `sector` boundaries of the file.
fn sectors(offset: u64, data: &[u8], sector: usize) -> Vec<Pending> {
    let sector = sector.max(1) as u64;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < data.len() {
        let pos = offset + at as u64;
        let room = (sector - pos % sector) as usize;
        let n = room.min(data.len() - at);
        out.push(Pending::Write { offset: pos, data: data[at..at + n].to_vec() });
        at += n;
    }
    out
}

/// A small deterministic generator (splitmix64) so crash images follow from a seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % (n as u64).max(1)) as usize
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

/// A file system that remembers what is durable, to simulate power loss.
///
/// It passes every call to the real file system and records, per file, the image as
/// of its last `sync_data` and the writes and truncations since; per directory, the
/// entries as of its last `sync_dir` and the creations, renames and removals since.
/// [`crash`](Self::crash) then rewrites the files on disk into what a power loss
/// could leave ([`CrashMode`]), after which a store opened over the directory must
/// recover its last completed checkpoint. Files present when the `CrashFs` was made
/// count as durable, and so do files written beside the seam (with `std::fs`, not
/// through it: a job's `store.json`), which a crash leaves as they are; opening such a
/// file through the seam later treats it as a new, empty, unsynced one, so route every
/// file of a store through the seam. A directory created through the seam is an entry of
/// its parent like a file: unless the parent was fsynced since, a crash takes it away
/// with everything in it (see [`create_dir_durable`]).
///
/// [`suppress_sync`](Self::suppress_sync) turns `sync_data` and `sync_dir` into
/// no-ops that still succeed, simulating a store that forgot its fsyncs, to show
/// that a crash test built on this seam can fail. [`cut_after`](Self::cut_after)
/// cuts the power after a number of mutating calls, so crashes land inside
/// checkpoints and page flushes. Clone it to keep a handle while a store uses it.
#[derive(Clone, Debug)]
pub struct CrashFs {
    inner: Arc<dyn Fs>,
    state: Arc<Mutex<CrashState>>,
}

impl CrashFs {
    /// Wraps the real file system, counting the files now under `root` as durable.
    pub fn new(root: &Path) -> io::Result<Self> {
        let fs = CrashFs { inner: Arc::new(StdFs), state: Arc::default() };
        fs.adopt(root)?;
        Ok(fs)
    }

    fn adopt(&self, dir: &Path) -> io::Result<()> {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        {
            let mut s = self.lock();
            s.durable_dirs.entry(dir.to_path_buf()).or_default();
        }
        for e in rd {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                let name = e.file_name().to_string_lossy().into_owned();
                self.lock().durable_subdirs.entry(dir.to_path_buf()).or_default().insert(name);
                self.adopt(&path)?;
                continue;
            }
            let bytes = std::fs::read(&path)?;
            let mut s = self.lock();
            let id = s.next_id;
            s.next_id += 1;
            s.files.insert(id, CrashFile { durable: bytes, pending: Vec::new() });
            s.names.insert(path.clone(), id);
            let (d, name) = split(&path);
            s.durable_dirs.entry(d).or_default().insert(name, id);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CrashState> {
        self.state.lock().expect("crash state")
    }

    /// With `true`, `sync_data` and `sync_dir` succeed without making anything
    /// durable (a store that forgot its fsyncs).
    pub fn suppress_sync(&self, on: bool) {
        self.lock().suppress_sync = on;
    }

    /// Cuts the power after `calls` more mutating calls (writes, truncations, fsyncs,
    /// creations, renames, removals): that call and every later one fail, as if the
    /// machine stopped there. `None` disarms it.
    pub fn cut_after(&self, calls: Option<u64>) {
        let mut s = self.lock();
        s.cut_after = calls;
    }

    /// Whether an armed power cut has happened.
    pub fn is_cut(&self) -> bool {
        self.lock().cut
    }

    /// Mutating calls made through this file system so far (the unit of
    /// [`cut_after`](Self::cut_after)).
    pub fn calls(&self) -> u64 {
        self.lock().calls
    }

    /// Turns the files on disk into what a power loss could leave, chosen by `mode`
    /// and `seed`, and then counts everything as durable again (the machine has
    /// rebooted). Close every store using this file system first.
    pub fn crash(&self, mode: CrashMode, seed: u64) -> io::Result<()> {
        let mut rng = SplitMix(seed);
        let mut s = self.lock();
        // Directory entries: the durable ones, then a prefix of the unsynced operations.
        let mut dirs: Vec<PathBuf> = s.durable_dirs.keys().cloned().collect();
        dirs.sort();
        let mut result: BTreeMap<PathBuf, BTreeMap<String, u64>> = BTreeMap::new();
        let mut subdirs: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
        for dir in &dirs {
            let mut entries = s.durable_dirs[dir].clone();
            let mut subs = s.durable_subdirs.get(dir).cloned().unwrap_or_default();
            let ops = s.dir_ops.get(dir).cloned().unwrap_or_default();
            let keep = match mode {
                CrashMode::DropUnsynced => 0,
                _ => rng.below(ops.len() + 1),
            };
            for op in &ops[..keep] {
                match op {
                    DirOp::Create { name, id } => {
                        entries.insert(name.clone(), *id);
                    }
                    DirOp::Remove { name } => {
                        entries.remove(name);
                    }
                    DirOp::Rename { from, to, id } => {
                        entries.remove(from);
                        entries.insert(to.clone(), *id);
                    }
                    DirOp::MkDir { name } => {
                        subs.insert(name.clone());
                    }
                }
            }
            result.insert(dir.clone(), entries);
            subdirs.insert(dir.clone(), subs);
        }
        // A directory whose entry in its parent was not durable is gone, with everything
        // in it (the parent sorts before its children).
        let mut gone: BTreeSet<PathBuf> = BTreeSet::new();
        for dir in &s.made {
            let (parent, name) = split(dir);
            let kept =
                !gone.contains(&parent) && subdirs.get(&parent).is_some_and(|d| d.contains(&name));
            if !kept {
                gone.insert(dir.clone());
            }
        }
        for dir in &gone {
            result.remove(dir);
            subdirs.remove(dir);
            if dir.is_dir() {
                std::fs::remove_dir_all(dir)?;
            }
        }
        // File contents: the durable image plus what survives of the unsynced changes.
        let mut images: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut ids: Vec<u64> = result.values().flat_map(|e| e.values().copied()).collect();
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            let f = s.files.get(&id).expect("tracked file");
            let mut image = f.durable.clone();
            match mode {
                CrashMode::DropUnsynced => {}
                CrashMode::Scramble { sector } => {
                    for p in &f.pending {
                        match p {
                            Pending::Write { offset, data } => {
                                for piece in sectors(*offset, data, sector) {
                                    if rng.coin() {
                                        apply(&mut image, &piece);
                                    }
                                }
                            }
                            Pending::SetLen(_) => {
                                if rng.coin() {
                                    apply(&mut image, p);
                                }
                            }
                        }
                    }
                }
                CrashMode::TornPrefix { sector } => {
                    let whole = rng.below(f.pending.len() + 1);
                    for p in &f.pending[..whole] {
                        apply(&mut image, p);
                    }
                    if let Some(Pending::Write { offset, data }) = f.pending.get(whole) {
                        for piece in sectors(*offset, data, sector) {
                            if rng.coin() {
                                apply(&mut image, &piece);
                            }
                        }
                    }
                }
            }
            images.insert(id, image);
        }
        // Rewrite the tracked directories to match. A file the seam never saw (written
        // beside it, with std::fs) is left as it is.
        for (dir, entries) in &result {
            if !dir.is_dir() {
                continue;
            }
            for e in std::fs::read_dir(dir)? {
                let e = e?;
                if e.file_type()?.is_file() && s.names.contains_key(&e.path()) {
                    std::fs::remove_file(e.path())?;
                }
            }
            for (name, id) in entries {
                std::fs::write(dir.join(name), &images[id])?;
            }
        }
        // After the reboot everything on disk is durable.
        s.names.clear();
        s.files.clear();
        s.dir_ops.clear();
        s.durable_dirs.clear();
        s.durable_subdirs = subdirs;
        s.made.retain(|d| !gone.contains(d));
        s.cut = false;
        s.cut_after = None;
        for (dir, entries) in result {
            for (name, id) in &entries {
                s.names.insert(dir.join(name), *id);
                let image = images[id].clone();
                s.files.insert(*id, CrashFile { durable: image, pending: Vec::new() });
            }
            s.durable_dirs.insert(dir, entries);
        }
        Ok(())
    }
}

struct CrashHandle {
    id: u64,
    inner: Box<dyn FileHandle>,
    state: Arc<Mutex<CrashState>>,
}

impl CrashHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, CrashState> {
        self.state.lock().expect("crash state")
    }
}

impl FileHandle for CrashHandle {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.lock().cut {
            return Err(power_cut());
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut s = self.lock();
        s.tick()?;
        let n = self.inner.write_at(buf, offset)?;
        if let Some(f) = s.files.get_mut(&self.id) {
            f.pending.push(Pending::Write { offset, data: buf[..n].to_vec() });
        }
        Ok(n)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        self.inner.sync_data()?;
        s.sync_file(self.id);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        self.inner.set_len(len)?;
        if let Some(f) = s.files.get_mut(&self.id) {
            f.pending.push(Pending::SetLen(len));
        }
        Ok(())
    }
}

impl Fs for CrashFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>> {
        let mut s = self.lock();
        if s.cut {
            return Err(power_cut());
        }
        let id = match s.names.get(path) {
            Some(id) => *id,
            None => {
                if create {
                    s.tick()?;
                }
                let file = self.inner.open(path, create)?;
                drop(file);
                let id = s.next_id;
                s.next_id += 1;
                s.files.insert(id, CrashFile::default());
                s.names.insert(path.to_path_buf(), id);
                let (dir, name) = split(path);
                s.dir_op(&dir, DirOp::Create { name, id });
                id
            }
        };
        let inner = self.inner.open(path, create)?;
        Ok(Box::new(CrashHandle { id, inner, state: self.state.clone() }))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        self.inner.remove_file(path)?;
        if s.names.remove(path).is_some() {
            let (dir, name) = split(path);
            s.dir_op(&dir, DirOp::Remove { name });
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        self.inner.rename(from, to)?;
        let Some(id) = s.names.remove(from) else { return Ok(()) };
        s.names.insert(to.to_path_buf(), id);
        let (fdir, fname) = split(from);
        let (tdir, tname) = split(to);
        if fdir == tdir {
            s.dir_op(&tdir, DirOp::Rename { from: fname, to: tname, id });
        } else {
            s.dir_op(&fdir, DirOp::Remove { name: fname });
            s.dir_op(&tdir, DirOp::Create { name: tname, id });
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.tick()?;
        self.inner.sync_dir(dir)?;
        if s.suppress_sync {
            return Ok(());
        }
        let ops = s.dir_ops.remove(dir).unwrap_or_default();
        let mut subs = s.durable_subdirs.remove(dir).unwrap_or_default();
        let entries = s.durable_dirs.entry(dir.to_path_buf()).or_default();
        for op in ops {
            match op {
                DirOp::MkDir { name } => {
                    subs.insert(name);
                }
                DirOp::Create { name, id } => {
                    entries.insert(name, id);
                }
                DirOp::Remove { name } => {
                    entries.remove(&name);
                }
                DirOp::Rename { from, to, id } => {
                    entries.remove(&from);
                    entries.insert(to, id);
                }
            }
        }
        s.durable_subdirs.insert(dir.to_path_buf(), subs);
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        if self.lock().cut {
            return Err(power_cut());
        }
        self.inner.list_dir(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        if s.cut {
            return Err(power_cut());
        }
        let created = missing_dirs(dir);
        if !created.is_empty() {
            s.tick()?;
        }
        self.inner.create_dir_all(dir)?;
        // Outermost first: each new directory is an unsynced entry of its parent.
        for d in created.iter().rev() {
            let (parent, name) = split(d);
            s.dir_op(&parent, DirOp::MkDir { name });
            s.durable_dirs.entry(d.clone()).or_default();
            s.made.insert(d.clone());
        }
        s.durable_dirs.entry(dir.to_path_buf()).or_default();
        Ok(())
    }
}

/// `dir` and the ancestors of it that do not exist yet, innermost first.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut p = dir;
    while !p.as_os_str().is_empty() && !p.exists() {
        out.push(p.to_path_buf());
        match p.parent() {
            Some(q) => p = q,
            None => break,
        }
    }
    out
}

/// Creates `dir` and its missing ancestors through `fs` and fsyncs the parent of each
/// directory it created, so the directory's entry survives a power loss (a store's
/// files are durable only if the directory holding them is).
pub fn create_dir_durable(fs: &dyn Fs, dir: &Path) -> io::Result<()> {
    let created = missing_dirs(dir);
    fs.create_dir_all(dir)?;
    for d in created.iter().rev() {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        fs.sync_dir(parent)?;
    }
    Ok(())
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
