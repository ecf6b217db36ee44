//! The checkpoint store against `file://` (and, when `s3s-fs` is installed, an S3 server
//! on loopback): restores are byte-identical, an interrupted upload leaves the previous
//! checkpoint restorable, and a replaced owner's uploads never count.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    PutMultipartOptions, PutResult,
};

use super::*;

/// Every file under `dir` but `LOCK`/`REMOTE`, with its bytes.
fn snapshot(dir: &FsPath) -> BTreeMap<String, Vec<u8>> {
    checkpoint_files(dir)
        .unwrap()
        .into_iter()
        .map(|rel| {
            let bytes = std::fs::read(dir.join(&rel)).unwrap();
            (rel, bytes)
        })
        .collect()
}

fn write(dir: &FsPath, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn append(dir: &FsPath, rel: &str, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(dir.join(rel)).unwrap();
    f.write_all(bytes).unwrap();
}

fn noise(n: usize, seed: u64) -> Vec<u8> {
    use rand::{RngCore, SeedableRng};
    let mut v = vec![0u8; n];
    rand::rngs::SmallRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// A task directory like a session's: a growing log segment (over two chunks), a
/// manifest, an immutable reservoir segment, a lock and a temporary file.
fn task_dir(root: &FsPath, name: &str) -> PathBuf {
    let d = root.join(name);
    write(&d, "state/log-0.seg", &noise(CHUNK_BYTES * 2 + 1000, 1));
    write(&d, "state/MANIFEST-1", b"manifest one");
    write(&d, "reservoir/seg-0", &noise(300_000, 2));
    write(&d, "LOCK", b"");
    write(&d, "state/index-2.snap.tmp", b"half written");
    d
}

fn fast() -> Retry {
    Retry {
        attempts: 3,
        first_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
    }
}

fn file_store(root: &FsPath) -> CheckpointStore {
    let url = url::Url::from_directory_path(root).unwrap();
    CheckpointStore::open(url.as_str()).unwrap().retry(fast())
}

fn done(p: Published) -> UploadStats {
    match p {
        Published::Done(s) => s,
        Published::Fenced(why) => panic!("fenced: {why}"),
    }
}

/// A restore into an empty directory equals the uploaded directory byte for byte (less
/// `LOCK` and `*.tmp`), and a second upload after a file grew sends only its new tail.
fn restore_is_identical_and_uploads_are_incremental(cs: &CheckpointStore) {
    let tmp = tempfile::tempdir().unwrap();
    let a = task_dir(tmp.path(), "a");
    let mut owner = cs.claim("events-0", &a).unwrap();
    assert!(owner.restored.is_none(), "nothing to restore yet");
    let first = done(owner.publish(cs, &a).unwrap());
    let size = (CHUNK_BYTES * 2 + 1000 + 12 + 300_000) as u64;
    assert_eq!(first.state_bytes, size);
    assert!(first.uploaded_bytes >= size, "{first:?}");

    append(&a, "state/log-0.seg", &noise(5000, 3));
    write(&a, "state/MANIFEST-2", b"manifest two");
    std::fs::remove_file(a.join("state/MANIFEST-1")).unwrap();
    let second = done(owner.publish(cs, &a).unwrap());
    // The log's last chunk (1000 bytes, now 6000), the new manifest and the
    // checkpoint manifest; the two full chunks and the reservoir stay.
    assert_eq!(second.uploaded_objects, 3, "{second:?}");
    assert!(second.uploaded_bytes < 10_000, "{second:?}");
    assert!(second.deleted_objects >= 2, "old chunks and manifest collected: {second:?}");

    let b = tmp.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    write(&b, "stale/junk", b"left by an older owner on this machine");
    let next = cs.claim("events-0", &b).unwrap();
    let r = next.restored.as_ref().expect("restored into b");
    assert_eq!(r.bytes, size + 5000);
    assert_eq!(snapshot(&b), snapshot(&a));
    assert!(!b.join("stale").exists());
    assert!(!b.join("state/index-2.snap.tmp").exists());

    // A claim of a directory already in step with the pointer keeps it.
    drop(next);
    let again = cs.claim("events-0", &b).unwrap();
    assert!(again.restored.is_none());
}

#[test]
fn file_store_restores_identical_bytes_and_uploads_only_changes() {
    let store = tempfile::tempdir().unwrap();
    restore_is_identical_and_uploads_are_incremental(&file_store(store.path()));
}

/// Fails every put whose key contains `needle` while `armed`.
#[derive(Debug)]
struct Failing {
    inner: LocalFileSystem,
    needle: &'static str,
    armed: Arc<AtomicBool>,
}

impl std::fmt::Display for Failing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Failing({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Failing {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if self.armed.load(Ordering::SeqCst) && location.as_ref().contains(self.needle) {
            return Err(object_store::Error::Generic {
                store: "Failing",
                source: format!("injected failure writing {location}").into(),
            });
        }
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// An upload whose manifest (or pointer) cannot be written fails after its retries, and
/// the previous checkpoint stays the one a new owner restores.
#[test]
fn an_interrupted_upload_leaves_the_previous_checkpoint_restorable() {
    for needle in ["ckpt-", "HEAD/"] {
        let root = tempfile::tempdir().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        std::fs::create_dir_all(root.path().join("store")).unwrap();
        let inner = LocalFileSystem::new_with_prefix(root.path().join("store")).unwrap();
        let fs = Failing { inner, needle, armed: armed.clone() };
        let cs =
            CheckpointStore::with_store(Arc::new(fs), Path::default(), "failing://").retry(fast());
        let a = task_dir(root.path(), "a");
        let mut owner = cs.claim("t-0", &a).unwrap();
        done(owner.publish(&cs, &a).unwrap());
        let first = snapshot(&a);

        append(&a, "state/log-0.seg", b"more records");
        write(&a, "reservoir/seg-1", &noise(1000, 9));
        armed.store(true, Ordering::SeqCst);
        let e = owner.publish(&cs, &a).unwrap_err().to_string();
        assert!(e.contains("injected failure") && e.contains("gave up after 3 attempts"), "{e}");
        armed.store(false, Ordering::SeqCst);

        let b = root.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        let next = cs.claim("t-0", &b).unwrap();
        assert!(next.restored.is_some());
        assert_eq!(snapshot(&b), first, "failing {needle}: the previous checkpoint is restored");
    }
}

/// A replaced owner cannot make its checkpoint current, neither right after the claim
/// nor once the pointers it would collide with were garbage-collected, and its attempts
/// delete nothing the new owner needs.
#[test]
fn a_zombie_cannot_publish_after_a_newer_claim() {
    let root = tempfile::tempdir().unwrap();
    let cs = file_store(&root.path().join("store"));
    let a = task_dir(root.path(), "a");
    let mut zombie = cs.claim("t-0", &a).unwrap();
    done(zombie.publish(&cs, &a).unwrap());

    let b = root.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let mut owner = cs.claim("t-0", &b).unwrap();
    assert!(owner.epoch() > zombie.epoch());
    write(&b, "state/MANIFEST-9", b"the new owner's");

    // Right after the claim: the zombie's pointer number is taken.
    write(&a, "state/MANIFEST-5", b"the zombie's");
    assert!(matches!(zombie.publish(&cs, &a).unwrap(), Published::Fenced(_)));

    // The owner publishes twice (older pointers are deleted): the zombie's next pointer
    // number is free again, and still does not count.
    done(owner.publish(&cs, &b).unwrap());
    append(&b, "state/log-0.seg", b"x");
    done(owner.publish(&cs, &b).unwrap());
    let mut fenced = 0;
    for _ in 0..4 {
        append(&a, "state/log-0.seg", b"zombie records");
        match zombie.publish(&cs, &a).unwrap() {
            Published::Fenced(why) => {
                assert!(why.contains("newer owner"), "{why}");
                fenced += 1;
            }
            Published::Done(s) => panic!("a zombie's checkpoint counted: {s:?}"),
        }
    }
    assert_eq!(fenced, 4);

    let c = root.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    let restored = cs.claim("t-0", &c).unwrap();
    assert!(restored.restored.is_some());
    assert_eq!(snapshot(&c), snapshot(&b), "the newer owner's checkpoint, whole");
}

#[test]
fn bad_urls_fail_at_open_naming_them() {
    let e = CheckpointStore::open("ftp://host/x").err().unwrap().to_string();
    assert!(
        e.contains("--checkpoint-store ftp://host/x") && e.contains("unknown scheme ftp://"),
        "{e}"
    );
    let e = CheckpointStore::open("no-scheme").err().unwrap().to_string();
    assert!(e.contains("not a URL"), "{e}");
    let e = CheckpointStore::open("file:///proc/version/x").err().unwrap().to_string();
    assert!(e.contains("cannot create /proc/version/x"), "{e}");
    // An S3 endpoint nobody listens on fails at once, naming the URL.
    let opts = [
        ("aws_endpoint", "http://127.0.0.1:9"),
        ("aws_allow_http", "true"),
        ("aws_access_key_id", "k"),
        ("aws_secret_access_key", "s"),
        ("aws_region", "us-east-1"),
    ];
    let t = Instant::now();
    let e = CheckpointStore::open_with("s3://bucket/p", &opts).err().unwrap().to_string();
    assert!(e.contains("--checkpoint-store s3://bucket/p") && e.contains("probe"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

/// Restore time of a task with about 1 GiB of files from a `file://` store into an empty
/// directory, and the bytes a checkpoint uploads after 1 MiB was appended to its log
/// (`cargo test -p spillway-engine --features kafka --lib measure_ -- --ignored
/// --nocapture`; the numbers go to docs/DESIGN.md).
#[test]
#[ignore = "a measurement: writes 3 GiB"]
fn measure_restore_of_one_gib() {
    let root = tempfile::tempdir().unwrap();
    let cs = file_store(&root.path().join("store"));
    let a = root.path().join("a");
    // 16 log segments of 60 MiB and a reservoir of 64 MiB: 1024 MiB.
    for s in 0..16 {
        write(&a, &format!("state/log-{s}.seg"), &noise(60 << 20, s));
    }
    write(&a, "reservoir/segment-0.spr", &noise(64 << 20, 99));
    let mut owner = cs.claim("big-0", &a).unwrap();
    let first = done(owner.publish(&cs, &a).unwrap());
    append(&a, "state/log-15.seg", &noise(1 << 20, 7));
    let second = done(owner.publish(&cs, &a).unwrap());
    let b = root.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let t = Instant::now();
    let next = cs.claim("big-0", &b).unwrap();
    let claim_s = t.elapsed().as_secs_f64();
    let r = next.restored.unwrap();
    eprintln!(
        "first upload: {} MiB of state, {} MiB sent in {:.2} s; after 1 MiB appended: {} MiB of \
         state, {:.1} MiB sent in {:.2} s; restore into an empty directory: {} MiB in {:.2} s \
         (claim total {claim_s:.2} s)",
        first.state_bytes >> 20,
        first.uploaded_bytes >> 20,
        first.seconds,
        second.state_bytes >> 20,
        second.uploaded_bytes as f64 / f64::from(1 << 20),
        second.seconds,
        r.bytes >> 20,
        r.seconds,
    );
    assert_eq!(r.bytes, second.state_bytes);
}
