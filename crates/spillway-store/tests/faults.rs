//! Fault injection through the I/O seam and damaged-file fixtures.
//!
//! - Short writes, ENOSPC, failed fsync and a torn write (power cut mid-write) at
//!   random moments: the failing operation returns an I/O error, the store refuses
//!   further writes, and reopening returns the last completed checkpoint.
//! - Flipped bytes and truncated files in a checkpointed store: opening or reading
//!   either fails with an error naming the file, or returns correct values; never a
//!   wrong value.
//! - Refusals that do not poison, met by background work (an adaptive migration step
//!   whose target cannot hold a value): the operation it followed succeeds, once.

mod common;

use spillway_store::StateStoreExt;
use std::path::Path;
use std::sync::Arc;

use common::{check_all, open, open_with_fs, Kind, Model, Op, KV, LIST, ORD};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use spillway_store::io::{Fault, FaultFs};
use spillway_store::Error;

fn random_write(rng: &mut SmallRng) -> Op {
    let k = format!("key{:04}", rng.random_range(0..1500)).into_bytes();
    match rng.random_range(0..8) {
        0..=3 => Op::Put(KV, k, vec![rng.random(); rng.random_range(0..700)]),
        4 | 5 => Op::Merge(LIST, k, vec![rng.random(); rng.random_range(0..40)]),
        6 => Op::Delete(KV, k),
        _ => Op::Rmw(KV, k, rng.random_range(1..9)),
    }
}

fn fault_case(kind: Kind, fault: Fault, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::new();
    let mut store = open_with_fs(kind, dir.path(), Some(Arc::new(fs.clone()))).expect("open");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::default();
    let mut durable_seq = 0;
    let arm_at = rng.random_range(500..6000);
    let mut failure = None;
    for n in 0..40_000usize {
        if n == arm_at {
            fs.set(fault.clone());
        }
        let op = if n % 700 == 699 { Op::Checkpoint } else { random_write(&mut rng) };
        match common::write(&mut store, &op) {
            Ok(()) if matches!(op, Op::Checkpoint) => {
                model.durable = model.live.clone();
                durable_seq = store.checkpoint_seq();
            }
            Ok(()) => common::apply_to_model(&mut model, &op),
            Err(e) => {
                failure = Some((n, op, e));
                break;
            }
        }
    }
    let (n, op, err) = failure.unwrap_or_else(|| panic!("{kind:?} {fault:?}: no operation failed"));
    assert!(
        err.poisons(),
        "{kind:?} {fault:?}: op {n} ({op:?}) failed with a non-I/O error: {err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&*dir.path().to_string_lossy()),
        "{kind:?}: error does not name the file: {msg}"
    );
    // A poisoned store refuses writes.
    let again = common::write(&mut store, &Op::Put(KV, b"after".to_vec(), b"x".to_vec()));
    assert!(
        matches!(again, Err(Error::Poisoned { .. })),
        "{kind:?} {fault:?}: write after failure: {again:?}"
    );
    // So does every read: after a failed write or flush the store's memory may not
    // match its index (a scan after a failed page flush used to index past the frames).
    for i in [KV, LIST, ORD] {
        let ns = common::ns(&*store, i);
        let get = store.get(ns, b"key0001");
        assert!(
            matches!(get, Err(Error::Poisoned { .. })),
            "{kind:?} {fault:?}: get after failure: {get:?}"
        );
        let scan = store.scan_prefix(ns, b"", &mut |_, _| true);
        assert!(
            matches!(scan, Err(Error::Poisoned { .. })),
            "{kind:?} {fault:?}: scan after failure: {scan:?}"
        );
    }
    drop(store);

    // Reopen on the real file system: the last completed checkpoint, exactly. A
    // checkpoint whose manifest was published before a later step failed counts as
    // completed, so it may be one past the last acknowledged one.
    let mut store =
        open(kind, dir.path()).unwrap_or_else(|e| panic!("{kind:?} {fault:?}: reopen: {e}"));
    let seq = store.checkpoint_seq();
    if seq == durable_seq {
        check_all(kind, &mut store, &model.durable);
    } else {
        assert!(
            matches!(op, Op::Checkpoint) && seq == durable_seq + 1,
            "{kind:?} {fault:?}: reopened at {seq}, last checkpoint {durable_seq}"
        );
        check_all(kind, &mut store, &model.live);
    }
}

fn faults(seed: u64) -> Vec<Fault> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut v = vec![Fault::FailSync];
    for _ in 0..3 {
        let after = rng.random_range(0..3 << 20);
        v.push(Fault::ShortWrites { after_bytes: after, max: rng.random_range(0..5000) });
        v.push(Fault::FailWrites { after_bytes: after });
        v.push(Fault::Torn { after_bytes: after });
    }
    v
}

#[test]
fn hashlog_faults_leave_last_checkpoint() {
    for (i, f) in faults(1).into_iter().enumerate() {
        fault_case(Kind::HashLogTiny, f, i as u64);
    }
}

/// Tiered L1 + L3: the failure may meet an eviction into L3 or the checkpoint's flush.
#[test]
fn tiered_l13_faults_leave_last_checkpoint() {
    for (i, f) in faults(9).into_iter().enumerate() {
        fault_case(Kind::TieredL13, f, i as u64);
    }
}

/// Tiered L1 + L2 + L3 (Redis keeps running; the fault is L3's disk).
#[test]
fn tiered_l123_faults_leave_last_checkpoint() {
    for (i, f) in faults(10).into_iter().enumerate() {
        fault_case(Kind::TieredL123, f, i as u64);
    }
}

#[test]
fn mem_faults_leave_last_checkpoint() {
    for (i, f) in faults(2).into_iter().enumerate() {
        fault_case(Kind::Mem, f, 100 + i as u64);
    }
}

#[test]
fn appendlog_faults_leave_last_checkpoint() {
    for (i, f) in faults(5).into_iter().enumerate() {
        fault_case(Kind::AppendLogTiny, f, 400 + i as u64);
    }
}

#[test]
fn timelog_faults_leave_last_checkpoint() {
    for (i, f) in faults(3).into_iter().enumerate() {
        fault_case(Kind::TimeLogTiny, f, 200 + i as u64);
    }
}

#[test]
fn adaptive_faults_leave_last_checkpoint() {
    for (i, f) in faults(4).into_iter().enumerate() {
        fault_case(Kind::AdaptiveTiny, f, 300 + i as u64);
    }
}

/// A checkpointed store with its model.
fn fixture(kind: Kind, dir: &Path) -> Model {
    let mut store = open(kind, dir).expect("open");
    let mut rng = SmallRng::seed_from_u64(99);
    let mut model = Model::default();
    for n in 0..6000 {
        let op = random_write(&mut rng);
        common::write(&mut store, &op).expect("write");
        common::apply_to_model(&mut model, &op);
        if n == 3000 {
            store.checkpoint().expect("checkpoint");
        }
    }
    store.checkpoint().expect("checkpoint");
    model.durable = model.live.clone();
    model
}

/// Opens the damaged store and reads everything: each read is either the right value
/// or an error; returns how many errors were seen.
fn read_damaged(kind: Kind, dir: &Path, model: &Model, what: &str) -> usize {
    let mut store = match open(kind, dir) {
        Ok(s) => s,
        Err(e) => {
            assert!(
                matches!(
                    e,
                    Error::Corrupt { .. }
                        | Error::ShortIo { .. }
                        | Error::NotAStore { .. }
                        | Error::NewerFormat { .. }
                        | Error::NamespaceMismatch { .. }
                ),
                "{kind:?} {what}: open failed with an unexpected error: {e}"
            );
            return 1;
        }
    };
    let mut errors = 0;
    for ((i, k), v) in &model.durable {
        let n = common::ns(&*store, *i);
        match store.get(n, k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "{kind:?} {what}: wrong value for {k:?}"),
            Err(e) => {
                // After the first corruption error the store refuses further reads.
                assert!(
                    matches!(
                        e,
                        Error::Corrupt { .. } | Error::ShortIo { .. } | Error::Poisoned { .. }
                    ),
                    "{kind:?} {what}: {e}"
                );
                errors += 1;
            }
        }
    }
    errors
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

fn damage_everywhere(kind: Kind) {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let model = fixture(kind, &pristine);
    let mut names: Vec<String> = std::fs::read_dir(&pristine)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut rng = SmallRng::seed_from_u64(5);
    let mut detected = 0;
    let mut trial = 0;
    for name in &names {
        let len = std::fs::metadata(pristine.join(name)).expect("stat").len();
        if len == 0 {
            continue;
        }
        for t in 0..16 {
            trial += 1;
            let dir = base.path().join(format!("t{trial}"));
            copy_dir(&pristine, &dir);
            let path = dir.join(name);
            let mut bytes = std::fs::read(&path).expect("read");
            let what = if t < 9 {
                let at = rng.random_range(0..bytes.len());
                bytes[at] ^= 1 << rng.random_range(0..8);
                format!("{name}: flipped byte {at}")
            } else if t < 13 {
                // Hostile lengths and counts: eight bytes of 0xFF at an 8-aligned
                // offset (or at the end of a short file).
                let at = (rng.random_range(0..bytes.len()) & !7).min(bytes.len().saturating_sub(8));
                let end = (at + 8).min(bytes.len());
                bytes[at..end].fill(0xFF);
                format!("{name}: 0xFF over bytes {at}..{end}")
            } else {
                let cut = rng.random_range(0..bytes.len());
                bytes.truncate(cut);
                format!("{name}: truncated to {cut}")
            };
            std::fs::write(&path, &bytes).expect("write");
            detected += usize::from(read_damaged(kind, &dir, &model, &what) > 0);
            std::fs::remove_dir_all(&dir).expect("cleanup");
        }
    }
    assert!(detected > trial / 3, "{kind:?}: only {detected} of {trial} damages were detected");
}

#[test]
fn hashlog_damaged_files_never_give_wrong_values() {
    damage_everywhere(Kind::HashLogTiny);
}

#[test]
fn appendlog_damaged_files_never_give_wrong_values() {
    damage_everywhere(Kind::AppendLogTiny);
}

#[test]
fn timelog_damaged_files_never_give_wrong_values() {
    damage_everywhere(Kind::TimeLogTiny);
}

#[test]
fn mem_damaged_files_never_give_wrong_values() {
    damage_everywhere(Kind::Mem);
}

/// Specific fixtures: the error names the damaged file and the offset.
#[test]
fn hashlog_corruption_errors_name_file_and_offset() {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let model = fixture(Kind::HashLogTiny, &pristine);

    // A flipped byte in every page of the newest log segment (all of it lies above
    // the log's beginning): reading it fails naming the segment, never a wrong value.
    let dir = base.path().join("seg");
    copy_dir(&pristine, &dir);
    let seg = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .max()
        .expect("a segment");
    let mut bytes = std::fs::read(&seg).expect("read");
    let page = 64 << 10;
    for at in (100..bytes.len()).step_by(page) {
        bytes[at] ^= 0xff;
    }
    std::fs::write(&seg, &bytes).expect("write");
    assert!(read_damaged(Kind::HashLogTiny, &dir, &model, "flipped segment bytes") > 0);
    let mut store = open(Kind::HashLogTiny, &dir).expect("open");
    let n = common::ns(&*store, KV);
    let e = store.scan_prefix(n, b"", &mut |_, _| true).expect_err("scan over a damaged page");
    match &e {
        Error::Corrupt { path, offset, .. } => {
            assert_eq!(path, &seg);
            assert!(e.to_string().contains(&offset.to_string()), "{e}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    drop(store);

    // A damaged manifest: open fails naming it.
    let dir = base.path().join("manifest");
    copy_dir(&pristine, &dir);
    let manifest = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-")))
        .max()
        .expect("a manifest");
    let mut bytes = std::fs::read(&manifest).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&manifest, &bytes).expect("write");
    let e = open(Kind::HashLogTiny, &dir).err().expect("damaged manifest must not open");
    assert!(e.to_string().contains(&*manifest.to_string_lossy()), "{e}");

    // A truncated index snapshot: open fails naming it.
    let dir = base.path().join("index");
    copy_dir(&pristine, &dir);
    let snap = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .max()
        .expect("an index snapshot");
    let len = std::fs::metadata(&snap).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&snap)
        .expect("open")
        .set_len(len / 2)
        .expect("truncate");
    let e = open(Kind::HashLogTiny, &dir).err().expect("truncated index must not open");
    assert!(e.to_string().contains(&*snap.to_string_lossy()), "{e}");
}

/// Opening a directory that is not a store, or a store of a newer format, is refused.
#[test]
fn not_a_store_and_newer_format() {
    for kind in [Kind::Mem, Kind::HashLogTiny, Kind::TimeLogTiny, Kind::AppendLogTiny] {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("notes.txt"), b"hello").expect("write");
        let e = open(kind, dir.path()).err().expect("a non-store directory must not open");
        assert!(matches!(e, Error::NotAStore { .. }), "{kind:?}: {e}");

        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(kind, dir.path()).expect("create"));
        // The format version sits at bytes 8..12 of the marker's block-file header.
        let marker = dir.path().join("STORE");
        let mut bytes = std::fs::read(&marker).expect("marker");
        bytes[8..12].copy_from_slice(&999u32.to_le_bytes());
        std::fs::write(&marker, &bytes).expect("write");
        let e = open(kind, dir.path()).err().expect("a newer format must not open");
        assert!(matches!(e, Error::NewerFormat { .. }), "{kind:?}: {e}");
    }
}

/// Timelog fixtures: a flipped byte in a segment's block, a truncated segment, a
/// damaged segment index and a damaged manifest each give `Corrupt` naming the file,
/// never a wrong value or a panic.
#[test]
fn timelog_corruption_errors_name_file_and_offset() {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let model = fixture(Kind::TimeLogTiny, &pristine);
    let segments = |dir: &Path| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .expect("ls")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "tl"))
            .collect();
        v.sort();
        v
    };
    // The newest segment is named by the newest checkpoint.
    let newest = |dir: &Path| segments(dir).pop().expect("a segment");

    // A flipped byte inside the first block: reads that reach it fail naming the file.
    let dir = base.path().join("block");
    copy_dir(&pristine, &dir);
    let seg = newest(&dir);
    let mut bytes = std::fs::read(&seg).expect("read");
    bytes[40] ^= 0x10;
    std::fs::write(&seg, &bytes).expect("write");
    assert!(read_damaged(Kind::TimeLogTiny, &dir, &model, "flipped block byte") > 0);
    let mut store = open(Kind::TimeLogTiny, &dir).expect("open: indexes are intact");
    for i in [KV, LIST] {
        let n = common::ns(&*store, i);
        if let Err(e) = store.scan_prefix(n, b"", &mut |_, _| true) {
            match &e {
                Error::Corrupt { path, offset, .. } => {
                    assert_eq!(path, &seg);
                    assert_eq!(*offset, 16, "the first block starts after the header");
                    assert!(e.to_string().contains(&*seg.to_string_lossy()), "{e}");
                }
                // The first corruption poisoned the store: later reads are refused.
                Error::Poisoned { .. } => {}
                other => panic!("expected Corrupt, got {other}"),
            }
        }
    }
    // A corruption error poisons the store: writes are refused.
    let n = common::ns(&*store, KV);
    assert!(matches!(store.put(n, b"x", b"y"), Err(Error::Poisoned { .. })));
    drop(store);

    // A truncated segment, and a damaged index (bytes just before the footer): open
    // fails naming the segment.
    for (what, cut) in [("truncated", true), ("index", false)] {
        let dir = base.path().join(what);
        copy_dir(&pristine, &dir);
        let seg = newest(&dir);
        let mut bytes = std::fs::read(&seg).expect("read");
        if cut {
            bytes.truncate(bytes.len() - 7);
        } else {
            let at = bytes.len() - 41;
            bytes[at] ^= 0x01;
        }
        std::fs::write(&seg, &bytes).expect("write");
        let e = open(Kind::TimeLogTiny, &dir).err().expect("a damaged segment must not open");
        assert!(matches!(e, Error::Corrupt { .. }), "{what}: {e}");
        assert!(e.to_string().contains(&*seg.to_string_lossy()), "{what}: {e}");
    }

    // A damaged manifest: open fails naming it.
    let dir = base.path().join("manifest");
    copy_dir(&pristine, &dir);
    let manifest = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("MANIFEST-")))
        .max()
        .expect("a manifest");
    let mut bytes = std::fs::read(&manifest).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&manifest, &bytes).expect("write");
    let e = open(Kind::TimeLogTiny, &dir).err().expect("damaged manifest must not open");
    assert!(e.to_string().contains(&*manifest.to_string_lossy()), "{e}");
}

/// The hybrid log under an appendlog directory, opened with the chunk namespaces, to
/// damage heads and chunks behind appendlog's back (with valid checksums).
fn raw_hashlog(dir: &Path) -> spillway_store::HashLogStore {
    use spillway_store::appendlog::chunk_namespace;
    use spillway_store::NamespaceSpec;
    let opts = common::options(dir, Kind::AppendLogTiny.budget())
        .namespace(NamespaceSpec::list(chunk_namespace(common::NAMESPACES[LIST])))
        .namespace(NamespaceSpec::list(chunk_namespace(common::NAMESPACES[common::ORD])));
    spillway_store::HashLogStore::open(opts, common::hashlog_options(Kind::AppendLogTiny))
        .expect("open the hybrid log under appendlog")
}

fn chunk_key(key: &[u8], no: u32) -> Vec<u8> {
    let mut k = key.to_vec();
    k.extend_from_slice(&no.to_be_bytes());
    k
}

/// A damaged list head (wrong length, bad field, byte length that disagrees with its
/// chunks) or a missing chunk is `Error::Corrupt` naming the namespace and key, never
/// a panic or a wrong value; other lists still read correctly.
#[test]
fn appendlog_damaged_head_or_missing_chunk_is_corrupt() {
    use spillway_store::{StateStore, StateStoreExt};
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let mut elems = Vec::new();
    {
        let mut store = common::open_appendlog(Kind::AppendLogTiny, &pristine).expect("open");
        let ns = store.namespace("lists").expect("ns");
        for i in 0u32..400 {
            let e = vec![i as u8; 40];
            store.append(ns, b"long", &e).expect("append");
            elems.push(e);
            store.append(ns, b"other", &i.to_le_bytes()).expect("append");
        }
        store.checkpoint().expect("checkpoint");
    }
    let mut want = Vec::new();
    for e in &elems {
        spillway_store::list::push(&mut want, e);
    }
    type Damage = Box<dyn Fn(&mut spillway_store::HashLogStore)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "missing chunk",
            Box::new(|h| {
                let c = h.namespace(&spillway_store::appendlog::chunk_namespace("lists")).unwrap();
                h.delete(c, &chunk_key(b"long", 2)).unwrap();
            }),
        ),
        (
            "short head",
            Box::new(|h| {
                let n = h.namespace("lists").unwrap();
                h.put(n, b"long", &[1u8; 39]).unwrap();
            }),
        ),
        (
            "head last chunk before first",
            Box::new(|h| {
                let n = h.namespace("lists").unwrap();
                let mut v = h.get(n, b"long").unwrap().unwrap();
                v[20..24].copy_from_slice(&7u32.to_le_bytes());
                v[24..28].copy_from_slice(&3u32.to_le_bytes());
                h.put(n, b"long", &v).unwrap();
            }),
        ),
        (
            "head byte length off by one frame",
            Box::new(|h| {
                let n = h.namespace("lists").unwrap();
                let mut v = h.get(n, b"long").unwrap().unwrap();
                let bytes = u64::from_le_bytes(v[12..20].try_into().unwrap()) + 44;
                v[12..20].copy_from_slice(&bytes.to_le_bytes());
                h.put(n, b"long", &v).unwrap();
            }),
        ),
        (
            "last chunk longer than the head says",
            Box::new(|h| {
                let n = h.namespace("lists").unwrap();
                let v = h.get(n, b"long").unwrap().unwrap();
                let last = u32::from_le_bytes(v[24..28].try_into().unwrap());
                let c = h.namespace(&spillway_store::appendlog::chunk_namespace("lists")).unwrap();
                h.merge(c, &chunk_key(b"long", last), b"extra").unwrap();
            }),
        ),
        (
            "unknown head version",
            Box::new(|h| {
                let n = h.namespace("lists").unwrap();
                let mut v = h.get(n, b"long").unwrap().unwrap();
                v[0] = 9;
                h.put(n, b"long", &v).unwrap();
            }),
        ),
    ];
    for (i, (what, damage)) in cases.iter().enumerate() {
        let dir = base.path().join(format!("case{i}"));
        copy_dir(&pristine, &dir);
        {
            let mut h = raw_hashlog(&dir);
            damage(&mut h);
            h.checkpoint().expect("checkpoint");
        }
        let mut store = common::open_appendlog(Kind::AppendLogTiny, &dir).expect("open");
        let ns = store.namespace("lists").expect("ns");
        let e = store.get(ns, b"long").expect_err(what);
        assert!(matches!(e, Error::Corrupt { .. }), "{what}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("\"lists\"") && msg.contains("long"), "{what}: {msg}");
        let it = store.iter_list(ns, b"long", &mut |_| true);
        assert!(matches!(it, Err(Error::Corrupt { .. })), "{what}: iter_list {it:?}");
        let scan = store.scan_prefix(ns, b"", &mut |_, _| true);
        assert!(matches!(scan, Err(Error::Corrupt { .. })), "{what}: scan {scan:?}");
        // The other list is intact; the store refuses writes after the corruption.
        let other = store.list_len(ns, b"other").expect("other list");
        assert_eq!(other, 400, "{what}");
        let w = store.append(ns, b"other", b"x");
        assert!(matches!(w, Err(Error::Poisoned { .. })), "{what}: write after corruption {w:?}");
    }
    // And the pristine copy reads back exactly.
    let mut store = common::open_appendlog(Kind::AppendLogTiny, &pristine).expect("open");
    let ns = store.namespace("lists").expect("ns");
    assert_eq!(store.get(ns, b"long").expect("get"), Some(want));
}

/// A block file split into its 16-byte header and frame payloads.
fn read_frames(path: &Path) -> (Vec<u8>, Vec<Vec<u8>>) {
    let bytes = std::fs::read(path).expect("read block file");
    let mut frames = Vec::new();
    let mut at = 16;
    loop {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        if len == u32::MAX {
            break;
        }
        frames.push(bytes[at + 8..at + 8 + len as usize].to_vec());
        at += 8 + len as usize;
    }
    (bytes[..16].to_vec(), frames)
}

/// Writes a block file with valid checksums around (possibly damaged) payloads: the
/// damage is in the content, which only the loaders' own checks can catch.
fn write_frames(path: &Path, header: &[u8], frames: &[Vec<u8>]) {
    let mut out = header.to_vec();
    let mut payload = 0u64;
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(f).to_le_bytes());
        out.extend_from_slice(f);
        payload += f.len() as u64;
    }
    let mut tail = [0u8; 16];
    tail[..8].copy_from_slice(&(frames.len() as u64).to_le_bytes());
    tail[8..].copy_from_slice(&payload.to_le_bytes());
    out.extend_from_slice(&u32::MAX.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&tail).to_le_bytes());
    std::fs::write(path, out).expect("write block file");
}

/// File offset of frame `i`'s payload in a block file with these frames.
fn payload_offset(frames: &[Vec<u8>], i: usize) -> u64 {
    16 + frames[..i].iter().map(|f| 8 + f.len() as u64).sum::<u64>() + 8
}

fn newest(dir: &Path, prefix: &str, suffix: &str) -> std::path::PathBuf {
    std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with(prefix) && n.ends_with(suffix)
        })
        .max()
        .expect("file present")
}

/// Opening must fail with `Corrupt` naming `path` at `offset` (and never hang, panic
/// or return data).
fn assert_corrupt_at(kind: Kind, dir: &Path, path: &Path, offset: u64, what: &str) {
    match open(kind, dir) {
        Err(Error::Corrupt { path: p, offset: o, what: w }) => {
            assert_eq!(p, path, "{what}: {w}");
            assert_eq!(o, offset, "{what}: {w}");
        }
        Err(e) => panic!("{what}: expected Corrupt, got {e}"),
        Ok(_) => panic!("{what}: a damaged store opened"),
    }
}

/// Damaged hashlog index snapshots (with valid checksums, so only validation can tell):
/// an entry pointing past the log's tail or into a page header, an overflow link that
/// loops (a probe used to loop forever), a manifest whose
/// log range or index name is wrong. Each is `Corrupt` naming the file and the real
/// offset of the bad bucket or manifest line (it used to say 16 for everything).
#[test]
fn hashlog_damaged_index_and_manifest_fixtures() {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let model = fixture(Kind::HashLogTiny, &pristine);
    const ADDR_MASK: u64 = (1 << 44) - 1;
    type Damage = fn(&mut Vec<u8>, &mut Vec<Vec<u8>>) -> (usize, usize);
    // Each damage returns (frame, byte in frame) of the record the error must name.
    let cases: Vec<(&str, Damage)> = vec![
        ("entry past the tail", |_, frames| {
            let f = &mut frames[1];
            let s = (0..7).find(|s| f[8 + 8 * s..16 + 8 * s] != [0; 8]).unwrap();
            let e = u64::from_le_bytes(f[8 + 8 * s..16 + 8 * s].try_into().unwrap());
            f[8 + 8 * s..16 + 8 * s].copy_from_slice(&(e | ADDR_MASK).to_le_bytes());
            (1, 0)
        }),
        ("entry in page 0", |_, frames| {
            let f = &mut frames[1];
            let s = (0..7).find(|s| f[8 + 8 * s..16 + 8 * s] != [0; 8]).unwrap();
            let e = u64::from_le_bytes(f[8 + 8 * s..16 + 8 * s].try_into().unwrap());
            f[8 + 8 * s..16 + 8 * s].copy_from_slice(&((e & !ADDR_MASK) | 1).to_le_bytes());
            (1, 0)
        }),
        ("overflow link loop", |_, frames| {
            // One more overflow bucket, linking to itself, and a main bucket without an
            // overflow chain linking to it. (The fixture may already have overflow
            // buckets; the new one goes after them.)
            let n_main = u64::from_le_bytes(frames[0][8..16].try_into().unwrap());
            let n_ov = u64::from_le_bytes(frames[0][16..24].try_into().unwrap());
            frames[0][16..24].copy_from_slice(&(n_ov + 1).to_le_bytes());
            let f = &mut frames[1];
            let r = (0..f.len() / 72)
                .find(|r| {
                    let no = u64::from_le_bytes(f[72 * r..72 * r + 8].try_into().unwrap());
                    no < n_main && f[72 * r + 64..72 * r + 72] == [0; 8]
                })
                .unwrap();
            f[72 * r + 64..72 * r + 72].copy_from_slice(&(n_ov + 1).to_le_bytes());
            let last = frames.len() - 1;
            let mut rec = (n_main + n_ov).to_le_bytes().to_vec();
            rec.extend_from_slice(&[0u8; 56]);
            rec.extend_from_slice(&(n_ov + 1).to_le_bytes());
            let at = frames[last].len();
            frames[last].extend_from_slice(&rec);
            (last, at)
        }),
    ];
    for (i, (what, damage)) in cases.into_iter().enumerate() {
        let dir = base.path().join(format!("index{i}"));
        copy_dir(&pristine, &dir);
        let snap = newest(&dir, "index-", ".snap");
        let (mut header, mut frames) = read_frames(&snap);
        let (frame, at) = damage(&mut header, &mut frames);
        write_frames(&snap, &header, &frames);
        assert_corrupt_at(
            Kind::HashLogTiny,
            &dir,
            &snap,
            payload_offset(&frames, frame) + at as u64,
            what,
        );
    }

    // An overflow bucket no chain reaches is legal (a fuzzy snapshot copies a bucket
    // before an overflow bucket is linked from it): open empties it and reads right.
    {
        let dir = base.path().join("orphan");
        copy_dir(&pristine, &dir);
        let snap = newest(&dir, "index-", ".snap");
        let (header, mut frames) = read_frames(&snap);
        let n_main = u64::from_le_bytes(frames[0][8..16].try_into().unwrap());
        let n_ov = u64::from_le_bytes(frames[0][16..24].try_into().unwrap());
        frames[0][16..24].copy_from_slice(&(n_ov + 1).to_le_bytes());
        let last = frames.len() - 1;
        let mut rec = (n_main + n_ov).to_le_bytes().to_vec();
        rec.extend_from_slice(&[0u8; 64]);
        frames[last].extend_from_slice(&rec);
        write_frames(&snap, &header, &frames);
        drop(open(Kind::HashLogTiny, &dir).expect("a snapshot with an orphaned bucket opens"));
        assert_eq!(read_damaged(Kind::HashLogTiny, &dir, &model, "orphan"), 0);
    }

    // Manifests: a tail past the address space, a begin in page 0, an index file name
    // that leaves the directory.
    let edits: [(&str, &str, &str); 3] = [
        ("tail", "tail=", "tail=99999999999999999"),
        ("begin", "begin=", "begin=40"),
        ("index", "index=", "index=../pristine/STORE"),
    ];
    for (i, (what, key, line)) in edits.into_iter().enumerate() {
        let dir = base.path().join(format!("manifest{i}"));
        copy_dir(&pristine, &dir);
        let manifest = newest(&dir, "MANIFEST-", "");
        let (header, mut frames) = read_frames(&manifest);
        let text = String::from_utf8(frames[0].clone()).unwrap();
        let at = text.find(&format!("\n{key}")).map(|p| p + 1).expect("field present");
        let end = at + text[at..].find('\n').unwrap();
        frames[0] = format!("{}{line}{}", &text[..at], &text[end..]).into_bytes();
        write_frames(&manifest, &header, &frames);
        assert_corrupt_at(
            Kind::HashLogTiny,
            &dir,
            &manifest,
            payload_offset(&frames, 0) + at as u64,
            what,
        );
    }

    // The pristine copy still reads back exactly.
    assert_eq!(read_damaged(Kind::HashLogTiny, &pristine, &model, "pristine"), 0);
}

/// `expected_keys` is a hint: a huge one is refused with `BudgetTooSmall` before the
/// index is allocated (it used to allocate first).
#[test]
fn hashlog_huge_expected_keys_is_refused_before_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = common::hashlog_options(Kind::HashLogTiny).expected_keys(u64::MAX);
    let r = spillway_store::HashLogStore::open(common::options(dir.path(), 1 << 20), h);
    assert!(matches!(r, Err(Error::BudgetTooSmall { .. })), "{:?}", r.err());
}

/// Damaged mem snapshots with valid checksums: a key recorded twice, a record naming an
/// undeclared namespace, a snapshot name leaving the directory. `Corrupt` naming the
/// file and the record's real offset.
#[test]
fn mem_damaged_snapshot_fixtures() {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("pristine");
    let model = fixture(Kind::Mem, &pristine);
    for (i, what) in ["duplicate key", "unknown namespace"].into_iter().enumerate() {
        let dir = base.path().join(format!("snap{i}"));
        copy_dir(&pristine, &dir);
        let snap = newest(&dir, "snapshot-", ".mem");
        let (header, mut frames) = read_frames(&snap);
        let f = &frames[0];
        let klen = u32::from_le_bytes(f[2..6].try_into().unwrap()) as usize;
        let vlen = u32::from_le_bytes(f[6..10].try_into().unwrap()) as usize;
        let mut rec = f[..10 + klen + vlen].to_vec();
        if i == 1 {
            rec[..2].copy_from_slice(&7u16.to_le_bytes());
            rec[10] ^= 0x55; // and a key that is not a duplicate
        }
        let at = frames[0].len();
        frames[0].extend_from_slice(&rec);
        write_frames(&snap, &header, &frames);
        assert_corrupt_at(Kind::Mem, &dir, &snap, payload_offset(&frames, 0) + at as u64, what);
    }
    let dir = base.path().join("name");
    copy_dir(&pristine, &dir);
    let manifest = newest(&dir, "MANIFEST-", "");
    let (header, mut frames) = read_frames(&manifest);
    let text = String::from_utf8(frames[0].clone()).unwrap();
    let at = text.find("\nsnapshot=").expect("snapshot line") + 1;
    let end = at + text[at..].find('\n').unwrap();
    frames[0] = format!("{}snapshot=/etc/hostname{}", &text[..at], &text[end..]).into_bytes();
    write_frames(&manifest, &header, &frames);
    assert_corrupt_at(Kind::Mem, &dir, &manifest, payload_offset(&frames, 0) + at as u64, "name");
    assert_eq!(read_damaged(Kind::Mem, &pristine, &model, "pristine"), 0);
}

/// Replaces field `key`'s line of the newest manifest in `dir` with `line` (checksums
/// recomputed); returns the manifest and the file offset of that line.
fn edit_manifest(dir: &Path, key: &str, line: &str) -> (std::path::PathBuf, u64) {
    let manifest = newest(dir, "MANIFEST-", "");
    let (header, mut frames) = read_frames(&manifest);
    let text = String::from_utf8(frames[0].clone()).expect("utf-8 manifest");
    let at = text.find(&format!("\n{key}=")).map(|p| p + 1).expect("field present");
    let end = at + text[at..].find('\n').expect("line end");
    frames[0] = format!("{}{line}{}", &text[..at], &text[end..]).into_bytes();
    write_frames(&manifest, &header, &frames);
    (manifest, payload_offset(&frames, 0) + at as u64)
}

/// Timelog and adaptive manifests with valid checksums but bad fields: `Corrupt` naming
/// the manifest and the offset of the bad line (timelog used to say 16, adaptive 0), and
/// a memtable image name leaving the directory is refused.
#[test]
fn timelog_and_adaptive_damaged_manifest_fixtures() {
    let base = tempfile::tempdir().expect("tempdir");
    let pristine = base.path().join("timelog");
    fixture(Kind::TimeLogTiny, &pristine);
    let edits = [
        ("partition_span", "partition_span=0"),
        ("memtables", "memtables=../timelog/STORE"),
        ("segments", "segments=0:0:x"),
        ("max_time", "max_time=soon"),
    ];
    for (i, (key, line)) in edits.into_iter().enumerate() {
        let dir = base.path().join(format!("t{i}"));
        copy_dir(&pristine, &dir);
        let (manifest, at) = edit_manifest(&dir, key, line);
        assert_corrupt_at(Kind::TimeLogTiny, &dir, &manifest, at, key);
    }
    let pristine = base.path().join("adaptive");
    {
        let mut store = open(Kind::AdaptiveTiny, &pristine).expect("open");
        for i in 0..200u32 {
            common::write(&mut store, &Op::Put(KV, i.to_le_bytes().to_vec(), vec![1; 50]))
                .expect("put");
        }
        store.checkpoint().expect("checkpoint");
    }
    let dir = base.path().join("a0");
    copy_dir_all(&pristine, &dir);
    let (manifest, at) = edit_manifest(&dir, "ns.0", "ns.0=sideways");
    assert_corrupt_at(Kind::AdaptiveTiny, &dir, &manifest, at, "adaptive ns.0");
}

fn copy_dir_all(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        if e.file_type().expect("type").is_dir() {
            copy_dir_all(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// The `key=value` fields of manifest `seq` in `dir`.
fn manifest_fields(dir: &Path, seq: u64) -> std::collections::BTreeMap<String, String> {
    let (_, frames) = read_frames(&dir.join(format!("MANIFEST-{seq:016}")));
    let text = String::from_utf8(frames[0].clone()).expect("utf-8 manifest");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The file names in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn fill(
    store: &mut Box<dyn spillway_store::StateStore>,
    model: &mut Model,
    rng: &mut SmallRng,
    n: usize,
) {
    for _ in 0..n {
        let op = random_write(rng);
        common::write(store, &op).expect("write");
        common::apply_to_model(model, &op);
    }
}

/// Files checkpoint `older` needs that checkpoint `newer` does not (so a cleanup that
/// forgets `older` deletes them).
fn only_older_needs(kind: Kind, dir: &Path, older: u64, newer: u64) -> Vec<String> {
    let (a, b) = (manifest_fields(dir, older), manifest_fields(dir, newer));
    match kind {
        Kind::HashLogTiny => {
            let bits = |m: &std::collections::BTreeMap<String, String>| {
                m["page_bits"].parse::<u64>().unwrap()
                    + m["segment_page_bits"].parse::<u64>().unwrap()
            };
            let seg = |m: &std::collections::BTreeMap<String, String>| {
                m["begin"].parse::<u64>().unwrap() >> bits(m)
            };
            (seg(&a)..seg(&b)).map(|s| format!("log-{s:010}.seg")).collect()
        }
        Kind::TimeLogTiny => {
            let ids = |m: &std::collections::BTreeMap<String, String>| -> Vec<String> {
                m["segments"]
                    .split_whitespace()
                    .map(|t| {
                        format!(
                            "seg-{:016}.tl",
                            t.rsplit(':').next().unwrap().parse::<u64>().unwrap()
                        )
                    })
                    .collect()
            };
            let newer_ids = ids(&b);
            ids(&a).into_iter().filter(|s| !newer_ids.contains(s)).collect()
        }
        other => unreachable!("{other:?}"),
    }
}

/// A previous manifest that fails to read for a transient reason (EIO) is not
/// "absent": opening fails naming it and deletes nothing, so that the previous
/// checkpoint (what `recover_at` asks for after a crash between the adaptive store's
/// two checkpoint phases) stays whole. Hashlog used to ignore its `begin` and delete
/// the log segments below the newer one's; timelog used to delete the segments only
/// it named.
fn eio_on_previous_manifest_fails_open(kind: Kind) {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::new();
    let mut store = open_with_fs(kind, dir.path(), Some(Arc::new(fs.clone()))).expect("open");
    let mut rng = SmallRng::seed_from_u64(77);
    let mut model = Model::default();
    fill(&mut store, &mut model, &mut rng, 3000);
    let older = store.checkpoint().expect("checkpoint").seq;
    let at_older = model.live.clone();
    fill(&mut store, &mut model, &mut rng, 20_000);
    let newer = store.checkpoint().expect("checkpoint").seq;
    drop(store);
    let needed = only_older_needs(kind, dir.path(), older, newer);
    let before = file_names(dir.path());
    assert!(
        needed.iter().any(|n| before.contains(n)),
        "{kind:?}: the test needs files only checkpoint {older} uses; {needed:?} in {before:?}"
    );

    let prev = dir.path().join(format!("MANIFEST-{older:016}"));
    fs.fail_reads_of(Some(&prev));
    let r = open_with_fs(kind, dir.path(), Some(Arc::new(fs.clone())));
    fs.fail_reads_of(None);
    match r {
        Ok(_) => panic!("{kind:?}: opened although the previous manifest could not be read"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&*prev.to_string_lossy()),
                "{kind:?}: {msg} does not name {prev:?}"
            );
        }
    }
    assert_eq!(file_names(dir.path()), before, "{kind:?}: a failed open deleted files");

    // The previous checkpoint is whole: recover_at reads it back exactly.
    let opts = common::options(dir.path(), kind.budget()).recover_at(older);
    let mut store = common::open_opts(kind, opts, None)
        .unwrap_or_else(|e| panic!("{kind:?}: recover_at({older}): {e}"));
    check_all(kind, &mut store, &at_older);
}

#[test]
fn hashlog_eio_on_previous_manifest_fails_open() {
    eio_on_previous_manifest_fails_open(Kind::HashLogTiny);
}

#[test]
fn timelog_eio_on_previous_manifest_fails_open() {
    eio_on_previous_manifest_fails_open(Kind::TimeLogTiny);
}

/// The adaptive store's crash window: a part's checkpoint is published, then its
/// cleanup cannot read the part's previous manifest (EIO). The cleanup must fail
/// deleting nothing (it used to delete the log segments the previous part checkpoint
/// needs), so the adaptive checkpoint fails and reopening recovers the last adaptive
/// checkpoint, whose part checkpoint is the previous one, exactly.
#[test]
fn adaptive_part_cleanup_eio_keeps_the_previous_part_checkpoint() {
    use spillway_store::{AdaptiveOptions, AdaptiveStore, StateStore};
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::new();
    let aopts = || AdaptiveOptions::default().dynamic(false).page_size(64 << 10);
    let open = |fs: Option<&FaultFs>| -> Box<dyn StateStore> {
        let opts = common::options(dir.path(), 4 << 20);
        Box::new(
            match fs {
                Some(fs) => AdaptiveStore::open_with_fs(opts, aopts(), Arc::new(fs.clone())),
                None => AdaptiveStore::open(opts, aopts()),
            }
            .expect("open adaptive"),
        )
    };
    let mut store = open(Some(&fs));
    let mut rng = SmallRng::seed_from_u64(78);
    let mut model = Model::default();
    fill(&mut store, &mut model, &mut rng, 3000);
    store.checkpoint().expect("checkpoint");
    let at_checkpoint = model.live.clone();
    let hash = dir.path().join("hash");
    let older = manifest_seqs(&hash).into_iter().max().expect("a hash part checkpoint");
    fill(&mut store, &mut model, &mut rng, 20_000);
    fs.fail_reads_of(Some(&hash.join(format!("MANIFEST-{older:016}"))));
    let r = store.checkpoint();
    fs.fail_reads_of(None);
    let e = r.expect_err("the part's cleanup could not read its previous manifest");
    assert!(e.to_string().contains("MANIFEST-"), "{e}");
    drop(store);
    let newer = manifest_seqs(&hash).into_iter().max().expect("checkpoint");
    assert!(newer > older, "the part's checkpoint was published before its cleanup");
    let needed = only_older_needs(Kind::HashLogTiny, &hash, older, newer);
    assert!(!needed.is_empty(), "the test needs log segments only the older checkpoint uses");
    let mut store = open(None);
    assert_eq!(store.checkpoint_seq(), 1);
    check_all(Kind::AdaptiveTiny, &mut store, &at_checkpoint);
}

fn manifest_seqs(dir: &Path) -> Vec<u64> {
    file_names(dir)
        .iter()
        .filter_map(|n| n.strip_prefix("MANIFEST-").and_then(|s| s.parse().ok()))
        .collect()
}

/// Adaptive: a migration step whose target part refuses an entry. A directory whose
/// list part was created with 1 MiB pages holds a list of 100 KB; reopened with 64 KiB
/// pages, its new hash part cannot hold that list (ValueTooLarge, which does not
/// poison), and the shared value cap follows the smaller pages. Migrating the namespace
/// to the hash layout meets the list in the step that follows a user's merge: the merge
/// was applied and must return Ok (a caller retrying it would apply it twice), later
/// operations must work, and the migration is abandoned: the namespace moves back to the
/// list layout, also across a checkpoint and reopen taken while it moves back.
#[test]
fn adaptive_migration_its_target_refuses_is_abandoned() {
    use std::collections::BTreeMap;

    use spillway_store::{
        AccessHint, AdaptiveOptions, AdaptiveStore, Layout, NamespaceSpec, StateStore, StoreOptions,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = || {
        StoreOptions::new(dir.path())
            .memory_budget(64 << 20)
            .namespace(NamespaceSpec::list("lists").hint(AccessHint::ListAppend))
    };
    let mut model: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    let check = |s: &mut AdaptiveStore, model: &BTreeMap<Vec<u8>, Vec<Vec<u8>>>, when: &str| {
        let ns = s.namespace("lists").expect("ns");
        for (k, elems) in model {
            let mut want = Vec::new();
            for e in elems {
                want.extend_from_slice(&(e.len() as u32).to_le_bytes());
                want.extend_from_slice(e);
            }
            let got = s.get(ns, k).unwrap_or_else(|e| panic!("{when}: get {k:?}: {e}"));
            assert_eq!(got, Some(want), "{when}: key {:?}", String::from_utf8_lossy(k));
        }
        let mut count = 0;
        s.scan_prefix(ns, b"", &mut |_, _| {
            count += 1;
            true
        })
        .unwrap_or_else(|e| panic!("{when}: scan: {e}"));
        assert_eq!(count, model.len(), "{when}: keys");
    };
    {
        let a = AdaptiveOptions::default().dynamic(false).page_size(1 << 20);
        let mut s = AdaptiveStore::open(opts(), a).expect("open with 1 MiB pages");
        let ns = s.namespace("lists").expect("ns");
        for j in 0..100u8 {
            s.merge(ns, b"big", &[j; 1000]).expect("merge");
            model.entry(b"big".to_vec()).or_default().push(vec![j; 1000]);
        }
        for k in 0..4 {
            let k = format!("small{k}").into_bytes();
            s.merge(ns, &k, b"s").expect("merge");
            model.entry(k).or_default().push(b"s".to_vec());
        }
        s.checkpoint().expect("checkpoint");
    }
    let a = || AdaptiveOptions::default().dynamic(false).page_size(64 << 10).step_entries(1);
    let mut s = AdaptiveStore::open(opts(), a()).expect("reopen with 64 KiB pages");
    let ns = s.namespace("lists").expect("ns");
    check(&mut s, &model, "reopened");
    s.migrate(ns, Layout::Hash).expect("start migrating to the hash layout");
    // Each merge is followed by a step that moves one entry; one of them meets "big".
    let mut n = 0;
    while s.stats().layouts()[0].failed_migrations == 0 {
        let k = format!("m{n}").into_bytes();
        s.merge(ns, &k, b"op").unwrap_or_else(|e| {
            panic!("merge m{n} was applied, then the migration step after it failed: {e}")
        });
        model.entry(k).or_default().push(b"op".to_vec());
        n += 1;
        assert!(n < 10, "no step met the list the hash part cannot hold");
    }
    let why = s.stats().layouts()[0].migration_error.clone().expect("why it was abandoned");
    let big_hex = "626967";
    assert!(why.contains("\"lists\"") && why.contains(big_hex) && why.contains("hashlog"), "{why}");
    assert_eq!(s.migration(), Some((ns, Layout::Hash, Layout::List)), "moving back");
    // A checkpoint while the namespace moves back (every operation runs a step, reads
    // too) records that migration, not the abandoned one; a reopen resumes it with the
    // same state.
    s.checkpoint().expect("checkpoint");
    check(&mut s, &model, "after the refused step");
    drop(s);
    let mut s = AdaptiveStore::open(opts(), a()).expect("reopen");
    assert_eq!(s.migration(), Some((ns, Layout::Hash, Layout::List)), "moving back");
    check(&mut s, &model, "reopened while moving back");
    for n in 0..40 {
        let k = format!("m{}", n % 10).into_bytes();
        s.merge(ns, &k, b"later").expect("merge");
        model.entry(k).or_default().push(b"later".to_vec());
    }
    s.finish_migration().expect("moving back completes");
    assert_eq!(s.layout(ns), Some(Layout::List));
    assert!(s.migration().is_none(), "{:?}", s.migration());
    check(&mut s, &model, "moved back");
    s.checkpoint().expect("checkpoint");
    drop(s);
    let mut s = AdaptiveStore::open(opts(), a()).expect("reopen");
    assert_eq!(s.layout(ns), Some(Layout::List));
    assert!(s.migration().is_none(), "the checkpoint records no migration");
    check(&mut s, &model, "reopened after moving back");
    // Asked for again, the migration is tried again, and finish_migration, which ran
    // the refused step itself, says why it was abandoned.
    s.migrate(ns, Layout::Hash).expect("start migrating again");
    let e = s.finish_migration().expect_err("the hash part still cannot hold the list");
    assert!(matches!(e, Error::MigrationAbandoned(_)), "{e:?}");
    assert!(e.to_string().contains(big_hex), "{e}");
    assert_eq!(s.layout(ns), Some(Layout::List));
    assert!(s.migration().is_none());
    check(&mut s, &model, "after finish_migration");
}
