//! The checkpoint store against `file://` and against an S3 server on loopback
//! ([`s3_server`]: s3s-fs, one per test binary, reached as `s3://BUCKET/PREFIX` with
//! endpoint and credential options): restores are byte-identical, uploads are
//! incremental and garbage is collected, an interrupted upload leaves the previous
//! checkpoint restorable, a replaced owner's uploads never count, and bad configuration
//! fails at open naming what is wrong.

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

mod s3_server;
use s3_server::S3Server;

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
    assert_only_current_objects(cs, "events-0");

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

/// After a publish, the task's objects are exactly one pointer, the manifest it names and
/// the chunks that manifest names (garbage collection left nothing else).
fn assert_only_current_objects(cs: &CheckpointStore, task: &str) {
    let base = cs.task_base(task);
    let pointers = cs.pointers(&base).unwrap();
    assert_eq!(pointers.len(), 1, "one pointer left: {pointers:?}");
    let ptr = cs.read_pointer(&pointers[0].1).unwrap();
    let rel = ptr.manifest.expect("a manifest");
    let m = cs.read_manifest(&base, &rel).unwrap();
    let mut want: Vec<String> =
        m.files.iter().flat_map(|f| f.chunks.iter().map(|c| c.key.clone())).collect();
    want.push(rel);
    want.push(format!("{HEAD}/{:020}", pointers[0].0));
    want.sort();
    want.dedup();
    let skip = base.parts().count();
    let mut got: Vec<String> = cs
        .list(&base)
        .unwrap()
        .into_iter()
        .map(|p| p.parts().skip(skip).map(|x| x.as_ref().to_string()).collect::<Vec<_>>().join("/"))
        .collect();
    got.sort();
    assert_eq!(got, want, "the task's objects are exactly the current checkpoint's");
}

#[test]
fn file_store_restores_identical_bytes_and_uploads_only_changes() {
    let store = tempfile::tempdir().unwrap();
    restore_is_identical_and_uploads_are_incremental(&file_store(store.path()));
}

/// `s3://BUCKET/PREFIX` on this binary's S3 server, through [`CheckpointStore::open_with`]
/// (the start-up probe included), with a bucket of its own.
fn s3_store(bucket: &str) -> CheckpointStore {
    s3_open(bucket, &format!("s3://{bucket}/ckpts/job-1")).unwrap().retry(fast())
}

fn s3_open(bucket: &str, url: &str) -> Result<CheckpointStore> {
    let server = S3Server::get();
    server.bucket(bucket);
    let opts = server.options();
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
    CheckpointStore::open_with(url, &opts)
}

#[test]
fn s3_store_restores_identical_bytes_and_uploads_only_changes() {
    let cs = s3_store("incremental");
    restore_is_identical_and_uploads_are_incremental(&cs);
    // The objects live where the URL says: under ckpts/job-1/ of the bucket.
    let files = s3_server::files_under(&S3Server::get().bucket_dir("incremental"));
    assert!(files.iter().any(|f| f.starts_with("ckpts/job-1/events-0/HEAD/")), "{files:?}");
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

/// On S3: the server fails every put of a chunk, of the checkpoint manifest or of the
/// pointer (503, which the client and then the store retry with backoff) during a
/// publish; the publish fails after its retries naming the object, and the previous
/// checkpoint is what a new owner restores. A few failures in a row are absorbed by the
/// retries and the publish succeeds.
#[test]
fn an_interrupted_upload_to_s3_leaves_the_previous_checkpoint_restorable() {
    let server = S3Server::get();
    let cs = s3_store("interrupted");
    // The owner's epoch directory (chunks go first, then the manifest), its manifests,
    // the pointers.
    for (k, what) in ["chunks", "manifest", "pointer"].into_iter().enumerate() {
        let task = format!("t-{k}");
        let needle_of = |epoch: u64| {
            let base = format!("interrupted/ckpts/job-1/{task}");
            match what {
                "chunks" => format!("{base}/{epoch:020}/"),
                "manifest" => format!("{base}/{epoch:020}/ckpt-"),
                _ => format!("{base}/HEAD/"),
            }
        };
        let root = tempfile::tempdir().unwrap();
        let a = task_dir(root.path(), "a");
        let mut owner = cs.claim(&task, &a).unwrap();
        done(owner.publish(&cs, &a).unwrap());
        let first = snapshot(&a);

        // A new chunk (the log's grown tail), a new manifest and a new pointer to write.
        append(&a, "state/log-0.seg", b"more records");
        write(&a, "reservoir/seg-1", &noise(1000, 9));
        let needle = needle_of(owner.epoch());
        server.fail_puts(&needle, u64::MAX);
        let e = match owner.publish(&cs, &a) {
            Err(e) => e.to_string(),
            Ok(p) => panic!("{needle}: published despite the failures: {p:?}"),
        };
        let failed = server.failed_puts(&needle);
        server.fail_puts(&needle, 0);
        assert!(
            e.contains("injected failure")
                && e.contains("gave up after 3 attempts")
                && e.contains("s3://interrupted/ckpts/job-1"),
            "{what}: {e}"
        );
        // Each of the store's 3 attempts is a request the client itself retried.
        assert!(failed > u64::from(fast().attempts), "{what}: {failed} failed puts");

        let b = root.path().join("b");
        std::fs::create_dir_all(&b).unwrap();
        let mut next = cs.claim(&task, &b).unwrap();
        assert!(next.restored.is_some());
        assert_eq!(snapshot(&b), first, "failing {what}: the previous checkpoint is restored");

        // Five failures in a row: more than one client call retries, fewer than the store's.
        write(&b, "state/MANIFEST-7", b"after the outage");
        let needle = needle_of(next.epoch());
        server.fail_puts(&needle, 5);
        done(next.publish(&cs, &b).unwrap());
        assert_eq!(server.failed_puts(&needle), 5, "{what}");
        let c = root.path().join("c");
        std::fs::create_dir_all(&c).unwrap();
        cs.claim(&task, &c).unwrap();
        assert_eq!(snapshot(&c), snapshot(&b), "{what}: the retried checkpoint counts");
    }
}

/// A replaced owner cannot make its checkpoint current, neither right after the claim
/// nor once the pointers it would collide with were garbage-collected, and its attempts
/// delete nothing the new owner needs.
#[test]
fn a_zombie_cannot_publish_after_a_newer_claim() {
    let root = tempfile::tempdir().unwrap();
    zombie_is_fenced(&file_store(&root.path().join("store")));
}

#[test]
fn a_zombie_cannot_publish_after_a_newer_claim_on_s3() {
    zombie_is_fenced(&s3_store("fencing"));
}

fn zombie_is_fenced(cs: &CheckpointStore) {
    let root = tempfile::tempdir().unwrap();
    let a = task_dir(root.path(), "a");
    let mut zombie = cs.claim("t-0", &a).unwrap();
    done(zombie.publish(cs, &a).unwrap());

    let b = root.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let mut owner = cs.claim("t-0", &b).unwrap();
    assert!(owner.epoch() > zombie.epoch());
    write(&b, "state/MANIFEST-9", b"the new owner's");

    // Right after the claim: the zombie's pointer number is taken.
    write(&a, "state/MANIFEST-5", b"the zombie's");
    assert!(matches!(zombie.publish(cs, &a).unwrap(), Published::Fenced(_)));

    // The owner publishes twice (older pointers are deleted): the zombie's next pointer
    // number is free again, and still does not count.
    done(owner.publish(cs, &b).unwrap());
    append(&b, "state/log-0.seg", b"x");
    done(owner.publish(cs, &b).unwrap());
    let mut fenced = 0;
    for _ in 0..4 {
        append(&a, "state/log-0.seg", b"zombie records");
        match zombie.publish(cs, &a).unwrap() {
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

/// Each misconfiguration of an S3 store fails at open, against a real S3 server, with a
/// message naming the URL and what is wrong.
#[test]
fn bad_s3_configuration_fails_at_open_naming_it() {
    let server = S3Server::get();
    let endpoint = server.endpoint();
    let with = |url: &str, replace: &[(&'static str, &str)]| {
        let mut opts: Vec<(&str, String)> = server.options();
        for (k, v) in replace {
            opts.retain(|(o, _)| o != k);
            opts.push((k, (*v).to_string()));
        }
        let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let t = Instant::now();
        let e = CheckpointStore::open_with(url, &opts).err().expect("refused").to_string();
        // An error, not a hang through long retries.
        assert!(t.elapsed() < Duration::from_secs(30), "{url}: {:?} for {e}", t.elapsed());
        assert!(e.contains(&format!("--checkpoint-store {url}")), "{e}");
        e
    };
    // The right configuration opens.
    s3_open("configured", "s3://configured/p").unwrap();

    let e = with("s4://configured/p", &[]);
    assert!(e.contains("unknown scheme s4://") && e.contains("s3://BUCKET/PREFIX"), "{e}");

    let e = with("s3://no-such-bucket/p", &[]);
    assert!(e.contains("bucket no-such-bucket does not exist") && e.contains(&endpoint), "{e}");

    let e = with("s3://configured/p", &[("aws_secret_access_key", "wrong")]);
    assert!(e.contains("refused the credentials") && e.contains(&endpoint), "{e}");

    let e = with("s3://configured/p", &[("aws_access_key_id", "nobody")]);
    assert!(e.contains("refused the credentials") && e.contains(&endpoint), "{e}");

    // A port on 127.0.0.1 that nobody listens on (bound, then closed).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let e = with("s3://configured/p", &[("aws_endpoint", &closed)]);
    assert!(e.contains(&format!("cannot reach {closed}")), "{e}");

    let e = with("s3://configured/p", &[("aws_no_such_option", "x")]);
    assert!(e.contains("option aws_no_such_option"), "{e}");
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

/// Failover of a partition with about 1 GiB of hashlog state through the S3 server: a
/// task directory holding a real hashlog store (1M keys of 1 KiB values), its first
/// upload, five incremental checkpoints (2% of the keys rewritten before each: what each
/// uploads against the state's size), then a claim into an empty directory (the restore)
/// and the store's open there (recovery), timed apart (`cargo test -p spillway-engine
/// --features kafka --lib measure_s3 -- --ignored --nocapture`; figures in
/// docs/RESULTS.md).
#[test]
#[ignore = "a measurement: writes about 3 GiB"]
fn measure_s3_failover_of_one_gib_of_hashlog_state() {
    use rand::{Rng, SeedableRng};
    use spillway_store::{
        merges, HashLogOptions, HashLogStore, NamespaceSpec, StateStore, StateStoreExt,
        StoreOptions,
    };

    const KEYS: u64 = 1 << 20;
    const VALUE: usize = 1024;
    let opts = |dir: &FsPath| {
        StoreOptions::new(dir)
            .memory_budget(256 << 20)
            .namespace(NamespaceSpec::with_merge("kv", merges::add_u64()))
    };
    let value = |k: u64, round: u64| noise(VALUE, k ^ (round << 40));
    let mib = |b: u64| b as f64 / f64::from(1 << 20);

    let cs = s3_store("measure");
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    let mut owner = cs.claim("pay-0", &a).unwrap();
    let mut store = HashLogStore::open(opts(&a.join("state")), HashLogOptions::default()).unwrap();
    let ns = store.namespace("kv").unwrap();
    let t = Instant::now();
    for k in 0..KEYS {
        store.put(ns, &k.to_be_bytes(), &value(k, 0)).unwrap();
    }
    store.checkpoint().unwrap();
    eprintln!(
        "loaded {KEYS} keys of {VALUE} B and checkpointed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    eprintln!("| checkpoint | keys rewritten | state (MiB) | uploaded (MiB) | uploaded / state | objects | upload time (s) |");
    eprintln!("|---|---|---|---|---|---|---|");
    let row = |i: &str, rewritten: u64, s: &UploadStats| {
        eprintln!(
            "| {i} | {rewritten} | {:.1} | {:.1} | {:.1}% | {} | {:.2} |",
            mib(s.state_bytes),
            mib(s.uploaded_bytes),
            100.0 * s.uploaded_bytes as f64 / s.state_bytes as f64,
            s.uploaded_objects,
            s.seconds
        );
    };
    let first = done(owner.publish(&cs, &a).unwrap());
    row("first (full)", KEYS, &first);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let rewrite = KEYS / 50;
    let mut last = first;
    for round in 1..=5u64 {
        for _ in 0..rewrite {
            let k = rng.random_range(0..KEYS);
            store.put(ns, &k.to_be_bytes(), &value(k, round)).unwrap();
        }
        store.checkpoint().unwrap();
        last = done(owner.publish(&cs, &a).unwrap());
        row(&format!("incremental {round}"), rewrite, &last);
    }
    drop(store);

    // Failover: a worker with an empty directory claims the task.
    let b = root.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let t = Instant::now();
    let next = cs.claim("pay-0", &b).unwrap();
    let claim_s = t.elapsed().as_secs_f64();
    let r = next.restored.expect("restored into an empty directory");
    let t = Instant::now();
    let mut reopened =
        HashLogStore::open(opts(&b.join("state")), HashLogOptions::default()).unwrap();
    let open_s = t.elapsed().as_secs_f64();
    let ns = reopened.namespace("kv").unwrap();
    assert_eq!(reopened.get(ns, &0u64.to_be_bytes()).unwrap().map(|v| v.len()), Some(VALUE));
    eprintln!(
        "failover to an empty directory: claim + restore {:.1} MiB in {} files: {claim_s:.2} s \
         (download {:.2} s, {:.0} MiB/s); hashlog open (recovery) {open_s:.2} s; total {:.2} s",
        mib(r.bytes),
        r.files,
        r.seconds,
        mib(r.bytes) / r.seconds,
        claim_s + open_s
    );
    assert_eq!(r.bytes, last.state_bytes);
}

/// Writes the object `rel` (`/`-separated) of task `t-0` of the file store in `store`.
fn put_object(store: &FsPath, rel: &str, bytes: &[u8]) {
    write(&store.join("t-0"), rel, bytes);
}

fn pointer_json(epoch: u64, manifest: Option<&str>) -> Vec<u8> {
    serde_json::to_vec(&Pointer {
        version: FORMAT_VERSION,
        epoch,
        manifest: manifest.map(Into::into),
    })
    .unwrap()
}

/// A pointer numbered 18446744073709551615 (20 digits, as the layout names pointers; left
/// by another program): the claim's next pointer number overflowed.
#[test]
fn a_pointer_numbered_last_is_an_error() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("store");
    let cs = file_store(&store);
    put_object(&store, &format!("HEAD/{}", u64::MAX), &pointer_json(1, None));
    let dir = root.path().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    let e = cs.claim("t-0", &dir).err().expect("claimed").to_string();
    assert!(e.contains("pointer 18446744073709551615") && e.contains("no next"), "{e}");
}

/// A pointer numbered one below the last: the claim takes the last number, and the
/// first checkpoint's next pointer number overflowed.
#[test]
fn a_claim_of_the_last_pointer_number_cannot_publish_but_does_not_panic() {
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("store");
    let cs = file_store(&store);
    put_object(&store, &format!("HEAD/{}", u64::MAX - 1), &pointer_json(1, None));
    let a = task_dir(root.path(), "a");
    let mut task = cs.claim("t-0", &a).unwrap();
    assert_eq!(task.epoch(), u64::MAX);
    let e = task.publish(&cs, &a).expect_err("published").to_string();
    assert!(e.contains("pointer 18446744073709551615") && e.contains("no next"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 64,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Pointers and manifests that are any bytes, or a valid checkpoint's with a byte
    /// changed or cut (another program's, or damage), claim to a restored directory or an
    /// error, never a panic.
    #[test]
    fn hostile_pointers_and_manifests_are_an_error_not_a_panic(
        garbage in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
        which in 0u8..3,
        at in proptest::prelude::any::<usize>(),
        byte in proptest::prelude::any::<u8>(),
        cut in proptest::prelude::any::<usize>(),
        number in proptest::prop_oneof![
            proptest::prelude::Just(u64::MAX),
            proptest::prelude::Just(u64::MAX - 1),
            0u64..3,
        ],
    ) {
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("store");
        let cs = file_store(&store);
        // A valid checkpoint of a small directory.
        let a = root.path().join("a");
        write(&a, "state/one", b"first file");
        write(&a, "reservoir/two", &noise(100, 3));
        let mut task = cs.claim("t-0", &a).unwrap();
        done(task.publish(&cs, &a).unwrap());
        let head = store.join("t-0").join("HEAD");
        let ptr_path = std::fs::read_dir(&head).unwrap().next().unwrap().unwrap().path();
        let ptr = std::fs::read(&ptr_path).unwrap();
        let p: Pointer = serde_json::from_slice(&ptr).unwrap();
        let manifest_path = store.join("t-0").join(p.manifest.as_deref().unwrap());
        let manifest = std::fs::read(&manifest_path).unwrap();
        // Damage the pointer (0) or the manifest (1), or renumber the pointer (2).
        let good = if which == 0 { &ptr } else { &manifest };
        let bad = crate::hostile::flipped(good, at, byte);
        for b in [&garbage[..], &bad, &good[..cut % (good.len() + 1)]] {
            match which {
                0 => std::fs::write(&ptr_path, b).unwrap(),
                1 => std::fs::write(&manifest_path, b).unwrap(),
                _ => std::fs::rename(&ptr_path, head.join(format!("{number:020}"))).unwrap(),
            }
            let c = root.path().join("c");
            let _ = std::fs::remove_dir_all(&c);
            std::fs::create_dir_all(&c).unwrap();
            if let Ok(mut t) = cs.claim("t-0", &c) {
                let _ = t.publish(&cs, &c);
            }
            // Back to the valid checkpoint for the next round.
            for e in std::fs::read_dir(&head).unwrap() {
                std::fs::remove_file(e.unwrap().path()).unwrap();
            }
            std::fs::write(&ptr_path, &ptr).unwrap();
            std::fs::write(&manifest_path, &manifest).unwrap();
        }
    }
}
