//! Direct I/O (`StoreOptions::direct_io`): which stores honour it, and the typed errors
//! when it cannot be had. The model runs with direct I/O are in `conformance.rs`
//! (`Kind::HashLogDirect`, `Kind::AppendLogDirect`).

mod common;

use std::io;
use std::path::Path;
use std::sync::Arc;

use common::{check_all, options, Kind};
use spillway_store::io::{FaultFs, FileHandle, Fs, OpenFlags, StdFs};
use spillway_store::{
    AdaptiveOptions, AdaptiveStore, Error, HashLogStore, MemStore, StateStore, TimeLogOptions,
    TimeLogStore,
};

/// A file system that refuses `O_DIRECT` the way tmpfs before Linux 6.6 and other file
/// systems without it do: EINVAL at open.
#[derive(Debug)]
struct NoDirectFs;

impl Fs for NoDirectFs {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>> {
        StdFs.open(path, create)
    }
    fn open_with(&self, path: &Path, flags: OpenFlags) -> io::Result<Box<dyn FileHandle>> {
        if flags.direct {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        StdFs.open(path, flags.create)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdFs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdFs.create_dir_all(dir)
    }
}

/// A test seam that implements only `open`: the trait's default `open_with` must
/// refuse direct opens rather than serve them through a cache.
#[derive(Debug)]
struct OldSeam;

impl Fs for OldSeam {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn FileHandle>> {
        StdFs.open(path, create)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdFs.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        StdFs.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        StdFs.create_dir_all(dir)
    }
}

fn open_direct(dir: &Path, fs: Arc<dyn Fs>) -> spillway_store::Result<HashLogStore> {
    let opts = options(dir, Kind::HashLogDirect.budget()).direct_io(true);
    HashLogStore::open_with_fs(opts, common::hashlog_options(Kind::HashLogDirect), fs)
}

#[test]
fn file_system_refusing_o_direct_fails_open_with_a_typed_error_naming_the_file() {
    for fs in [Arc::new(NoDirectFs) as Arc<dyn Fs>, Arc::new(OldSeam)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = open_direct(dir.path(), fs).err().expect("direct I/O was refused");
        match &e {
            Error::DirectIoUnsupported { path, .. } => {
                assert!(path.starts_with(dir.path()), "{e}");
                assert!(path.extension().is_some_and(|x| x == "seg"), "{e}");
            }
            other => panic!("expected DirectIoUnsupported, got {other:?}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("does not support direct I/O"), "{msg}");
        assert!(msg.contains(".seg"), "{msg}");
    }
    // Without direct I/O the same seam serves the store.
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = options(dir.path(), Kind::HashLogTiny.budget());
    let fs = Arc::new(NoDirectFs);
    HashLogStore::open_with_fs(opts, common::hashlog_options(Kind::HashLogTiny), fs)
        .expect("buffered open");
}

#[test]
fn stores_without_direct_io_refuse_the_option_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || options(dir.path(), 4 << 20).direct_io(true);
    let errors = [
        MemStore::open(opts()).err(),
        TimeLogStore::open(opts(), TimeLogOptions::default()).err(),
        AdaptiveStore::open(opts(), AdaptiveOptions::default()).err(),
    ];
    for e in errors {
        let e = e.expect("direct_io must be refused");
        assert!(matches!(e, Error::Unsupported { op: "the direct_io option", .. }), "{e:?}");
        assert!(e.to_string().contains("direct_io"), "{e}");
    }
}

/// The fault-injection seam passes direct opens through to the real file system.
#[test]
fn fault_fs_serves_direct_io() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store: Box<dyn StateStore> =
        Box::new(open_direct(dir.path(), Arc::new(FaultFs::new())).expect("open"));
    let ns = store.namespace("kv").expect("ns");
    let mut model = std::collections::BTreeMap::new();
    for i in 0u32..20_000 {
        let k = format!("key-{:05}", i % 5000).into_bytes();
        let v = vec![(i % 251) as u8; 40 + (i % 97) as usize];
        store.put(ns, &k, &v).expect("put");
        model.insert((common::KV, k), v);
    }
    store.checkpoint().expect("checkpoint");
    check_all(Kind::HashLogDirect, &mut store, &model);
    assert!(store.stats().disk_reads > 0, "the state outgrew the budget and was read back");
}

/// The segment files of a direct-I/O store are open with `O_DIRECT` (checked in the
/// kernel's view of the process's descriptors), those of a default store are not.
#[cfg(target_os = "linux")]
#[test]
fn segment_files_are_opened_with_o_direct_only_when_asked() {
    fn segment_flags(dir: &Path) -> Vec<i32> {
        let mut flags = Vec::new();
        for fd in std::fs::read_dir("/proc/self/fd").expect("fds").flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else { continue };
            if !target.starts_with(dir) || target.extension().is_none_or(|x| x != "seg") {
                continue;
            }
            let info = format!("/proc/self/fdinfo/{}", fd.file_name().to_string_lossy());
            let Ok(text) = std::fs::read_to_string(info) else { continue };
            let octal = text.lines().find_map(|l| l.strip_prefix("flags:")).expect("flags");
            flags.push(i32::from_str_radix(octal.trim(), 8).expect("octal flags"));
        }
        flags
    }
    for direct in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = options(dir.path(), Kind::HashLogTiny.budget()).direct_io(direct);
        let mut store =
            HashLogStore::open(opts, common::hashlog_options(Kind::HashLogTiny)).expect("open");
        let ns = store.namespace("kv").expect("ns");
        for i in 0u32..5000 {
            store.put(ns, &i.to_be_bytes(), &[7u8; 200]).expect("put");
        }
        let flags = segment_flags(dir.path());
        assert!(!flags.is_empty(), "no open segment file");
        for f in flags {
            assert_eq!(f & libc::O_DIRECT != 0, direct, "flags {f:o}");
        }
    }
}
