//! Remote checkpoints (`--checkpoint-store URL`): a task's local checkpoint, copied to an
//! object store (S3, GCS, Azure or a local path, through the `object_store` crate) so that
//! a partition's next owner on any machine restores it into its own empty directory.
//!
//! The worker's `--checkpoint-dir` then is its private working directory. After each
//! local checkpoint of a task ([`crate::session::Session::checkpoint_tagged`],
//! [`super::route::Join::save`]) the worker calls [`RemoteTask::publish`]: the files of the
//! task directory at that moment are one consistent checkpoint (the stores name their
//! files by their own checkpoint protocol; nothing writes between the local checkpoint
//! and the upload), and what is new since the last upload goes up in content-addressed
//! chunks, then the checkpoint's manifest, then a new pointer. On a rebuild the worker
//! calls [`CheckpointStore::claim`] before it opens the task: that fences every earlier
//! owner and, unless the local directory already holds what the pointer names, replaces
//! the directory's contents with the checkpoint the pointer names.
//!
//! The object store's API is async; a [`CheckpointStore`] owns a current-thread tokio
//! runtime and blocks on it, so the worker stays synchronous.
//!
//! # FORMAT
//! Under the URL's prefix `P`, task `T` (the task directory's name, `TOPIC-p`) owns
//! `P/T/`:
//! ```text
//! P/T/HEAD/<g>             pointer number g (20 decimal digits), created once, never changed
//! P/T/<e>/<h>              a chunk: bytes of one file, uploaded in epoch e (20 digits);
//!                          h = xxh3-128 of the bytes, 32 lowercase hex digits
//! P/T/<e>/ckpt-<n>.json    checkpoint manifest n (10 digits) of epoch e
//! ```
//! A pointer is JSON `{"version":1,"epoch":E,"manifest":"<e>/ckpt-<n>.json"}` (`manifest`
//! null: no checkpoint yet). The current pointer is the one with the highest `g`.
//!
//! A manifest is JSON: `{"version":1,"task":"T","epoch":E,"files":[{"path":"state/…",
//! "size":N,"chunks":[{"key":"<e>/<h>","len":L,"hash":"<h>"}]}]}` listing every file of
//! the task directory (paths relative to it, `/`-separated, without `LOCK`, the local
//! marker `REMOTE` and `*.tmp` files) with the chunks that make it, in order. A file is
//! cut into chunks of [`CHUNK_BYTES`] at fixed offsets, so a file that grows at its end
//! (a hashlog segment) uploads only its last, partly filled chunk again and its new ones;
//! an unchanged file uploads nothing. Files are compared by content (their chunks'
//! hashes), never by name or time. A reader refuses a version it does not know, and
//! checks each downloaded chunk's length and hash.
//!
//! A checkpoint counts once a pointer names its manifest: chunks go up first, then the
//! manifest, then the pointer, so an upload interrupted at any point leaves the current
//! pointer naming a complete earlier checkpoint.
//!
//! # Fencing
//! Pointers are only ever *created* (`PutMode::Create`: `If-None-Match: *` on S3, an
//! exclusive create on a file system), never overwritten, so of two writers of pointer
//! `g` exactly one succeeds. A new owner *claims* the task: it reads the current pointer
//! `g` and creates pointer `g + 1` naming the same manifest, with epoch `E = g + 1`; the
//! epoch names the directory of everything it uploads. Each of its checkpoints then
//! creates the next pointer number after the last one it wrote. An earlier owner (a
//! zombie: paused, cut off, or simply not yet told of the rebalance) publishes by
//! creating the pointer after *its* last one, which the claim (or a later pointer) already
//! took: the create fails, and the zombie rebuilds its tasks as after a rebalance. Old
//! pointers are deleted, so a zombie far behind may find its number free: after every
//! successful create a writer lists the pointers and, seeing a higher one, deletes its own
//! and counts itself fenced. (A higher pointer always exists then: a pointer is deleted
//! only by the writer of a higher one, and the highest is never deleted.)
//!
//! Garbage collection: after a successful pointer create, the writer (epoch `E`) deletes
//! the older pointers and every object of epochs `<= E` that its new manifest does not
//! name. That cannot delete anything a newer owner needs: a newer owner (epoch `> E`)
//! claimed after this pointer, so it restored this manifest (kept) and uploads only
//! under its own epoch; a zombie's objects are of older epochs and named by no pointer.
//! Uploads a failed publish left behind are collected by the next successful one.
//!
//! # The local directory
//! `REMOTE` in the task directory names the manifest the directory was last in step with
//! (restored from or published). A claim keeps the local directory when the current
//! pointer names that manifest (or names none): its checkpoint is then that one or a newer
//! one this worker took but did not upload. Otherwise the directory is emptied (all but
//! `LOCK`) and the pointer's checkpoint downloaded into it, `REMOTE` written last, so a
//! restore cut short is done again.
//!
//! A checkpoint of any owner was taken at an offset `K` at or below the group's committed
//! offset then, which never decreases, so whichever complete checkpoint a task restores
//! satisfies the worker's exactly-once rule (`K <= C`, see [`super::worker`]).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Bytes per chunk object (the last chunk of a file is shorter).
pub const CHUNK_BYTES: usize = 8 << 20;
/// Chunks a restore fetches concurrently (so up to this many times [`CHUNK_BYTES`] in
/// memory).
const DOWNLOAD_AHEAD: usize = 8;
/// Version of the manifest and pointer encodings.
const FORMAT_VERSION: u32 = 1;
/// The local marker file: the manifest key the directory was last in step with.
const MARKER: &str = "REMOTE";
/// Name of the pointers' folder under a task's prefix.
const HEAD: &str = "HEAD";

/// How often and how patiently a failed object operation is tried again.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// Attempts in all (default 6).
    pub attempts: u32,
    /// Wait after the first failure, doubled after each further one (default 200 ms).
    pub first_backoff: Duration,
    /// Longest wait between attempts (default 5 s).
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 6,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A checkpoint store: an object store and a prefix (module docs).
pub struct CheckpointStore {
    rt: tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    url: String,
    retry: Retry,
}

#[derive(Serialize, Deserialize, PartialEq, Eq, Debug, Clone)]
struct Pointer {
    version: u32,
    epoch: u64,
    manifest: Option<String>,
}

#[derive(Serialize, Deserialize, Debug)]
struct Manifest {
    version: u32,
    task: String,
    epoch: u64,
    files: Vec<FileEntry>,
}

#[derive(Serialize, Deserialize, Debug)]
struct FileEntry {
    path: String,
    size: u64,
    chunks: Vec<Chunk>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
struct Chunk {
    key: String,
    len: u64,
    hash: String,
}

/// What a claim did to the local directory.
#[derive(Clone, Debug, Default)]
pub struct RestoreStats {
    /// Files downloaded.
    pub files: usize,
    /// Bytes downloaded.
    pub bytes: u64,
    /// Wall time of the download, in seconds.
    pub seconds: f64,
}

/// A task claimed by this worker: the fencing state of its uploads (module docs).
pub struct RemoteTask {
    name: String,
    base: Path,
    epoch: u64,
    /// The newest pointer number this owner created.
    generation: u64,
    /// Chunks known to exist (hash -> key relative to `base`): those of the manifest the
    /// current pointer names.
    known: HashMap<String, String>,
    /// Manifests written in this epoch.
    seq: u64,
    /// The download a claim made, if it replaced the local directory.
    pub restored: Option<RestoreStats>,
}

/// What one [`RemoteTask::publish`] did.
#[derive(Clone, Debug, Default)]
pub struct UploadStats {
    /// Bytes of the checkpoint (all its files).
    pub state_bytes: u64,
    /// Bytes uploaded (new chunks and the manifest).
    pub uploaded_bytes: u64,
    /// Objects uploaded (new chunks and the manifest).
    pub uploaded_objects: usize,
    /// Objects deleted by garbage collection.
    pub deleted_objects: usize,
    /// Wall time, in seconds (hashing, uploads, pointer, garbage collection).
    pub seconds: f64,
}

/// The outcome of [`RemoteTask::publish`].
#[derive(Debug)]
pub enum Published {
    /// The checkpoint is the task's current one.
    Done(UploadStats),
    /// A newer owner claimed the task; the message says how this was found.
    Fenced(String),
}

/// The schemes [`CheckpointStore::open`] takes.
const SCHEMES: &str =
    "s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or file:///PATH";

/// The `object_store` error kinds that another attempt cannot fix. Not `AlreadyExists`:
/// outside a conditional create ([`CheckpointStore::create`] hands it back) it is S3's
/// `409 Conflict` (a conflicting operation in progress), which passes.
fn permanent(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::NotFound { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

/// The transport failure (no HTTP answer: connect, timeout, ...) behind `e`, if that is
/// what it is.
fn transport_failure(e: &object_store::Error) -> Option<object_store::client::HttpErrorKind> {
    let mut cur: &(dyn std::error::Error + 'static) = e;
    loop {
        if let Some(h) = cur.downcast_ref::<object_store::client::HttpError>() {
            return Some(h.kind());
        }
        cur = cur.source()?;
    }
}

/// The number of the pointer after pointer `g` of the task at `base`; an error for the
/// last number there is (a listed pointer's name is whatever the store holds).
fn next_pointer(g: u64, base: &Path, url: &str) -> Result<u64> {
    g.checked_add(1).ok_or_else(|| {
        Error::Checkpoint(format!(
            "task {base} in {url} has pointer {g}, which has no next pointer number; was it \
             written by another program?"
        ))
    })
}

fn key_path(base: &Path, rel: &str) -> Path {
    rel.split('/').fold(base.clone(), |p, part| p.join(part))
}

impl CheckpointStore {
    /// Opens the store `url` (`s3://`, `gs://`, `az://` with credentials and endpoint from
    /// the usual environment variables, e.g. `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`,
    /// `AWS_ALLOW_HTTP`; or `file:///path`, created if missing) and checks that it works:
    /// it writes, reads, conditionally re-creates (which must be refused) and deletes a
    /// probe object, so a wrong scheme, a missing bucket, refused credentials, an
    /// unreachable endpoint or a store without conditional puts fail here, naming the
    /// URL.
    pub fn open(url: &str) -> Result<CheckpointStore> {
        CheckpointStore::open_with(url, &[])
    }

    /// [`Self::open`] with `options` (`object_store` configuration keys such as
    /// `aws_endpoint`, `aws_allow_http`, `aws_access_key_id`) over those of the environment.
    pub fn open_with(url: &str, options: &[(&str, &str)]) -> Result<CheckpointStore> {
        let bad = |why: String| Error::Config(format!("--checkpoint-store {url}: {why}"));
        let parsed = url::Url::parse(url)
            .map_err(|e| bad(format!("not a URL ({e}); expected {SCHEMES}")))?;
        // HTTP stores verify TLS with rustls over ring (no aws-lc-rs build); installing
        // the process default twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Timeouts go in as configuration keys, before the environment's and `options`'
        // keys are applied on top: `with_client_options` would replace the client options
        // those set (`aws_allow_http` among them: an `http://` endpoint was refused).
        let timeouts = [("connect_timeout", "5s"), ("timeout", "60s")];
        // The engine retries itself (`Retry`), so the client gives up quickly: an
        // unreachable endpoint fails the start-up probe in seconds.
        let retry = object_store::RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(15),
            ..Default::default()
        };
        // A cloud builder from the environment, the URL and `options`, and the endpoint
        // it will talk to (named in start-up errors).
        macro_rules! builder {
            ($b:ty, $endpoint:expr) => {{
                let mut b = <$b>::from_env();
                for (k, v) in timeouts {
                    b = b.with_config(k.parse().expect("a client option"), v);
                }
                b = b.with_url(url);
                for (k, v) in options {
                    let key = k.parse().map_err(|e| bad(format!("option {k}: {e}")))?;
                    b = b.with_config(key, *v);
                }
                let endpoint: String = $endpoint(&b);
                let store = b.with_retry(retry).build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(store) as Arc<dyn ObjectStore>, endpoint)
            }};
        }
        let cloud_path = || Path::parse(parsed.path().trim_start_matches('/'));
        let ((store, endpoint), prefix) = match parsed.scheme() {
            "s3" | "s3a" => {
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as K};
                let endpoint = |b: &AmazonS3Builder| {
                    b.get_config_value(&K::Endpoint).unwrap_or_else(|| {
                        let region = b.get_config_value(&K::Region);
                        format!(
                            "https://s3.{}.amazonaws.com",
                            region.as_deref().unwrap_or("us-east-1")
                        )
                    })
                };
                (builder!(AmazonS3Builder, endpoint), cloud_path().map_err(|e| bad(e.to_string()))?)
            }
            "gs" => {
                use object_store::gcp::GoogleCloudStorageBuilder;
                let endpoint =
                    |_: &GoogleCloudStorageBuilder| "https://storage.googleapis.com".to_string();
                (
                    builder!(GoogleCloudStorageBuilder, endpoint),
                    cloud_path().map_err(|e| bad(e.to_string()))?,
                )
            }
            "az" | "azure" | "abfs" | "abfss" => {
                use object_store::azure::{AzureConfigKey as K, MicrosoftAzureBuilder};
                let endpoint = |b: &MicrosoftAzureBuilder| {
                    b.get_config_value(&K::Endpoint).unwrap_or_else(|| {
                        let account = b.get_config_value(&K::AccountName);
                        format!(
                            "https://{}.blob.core.windows.net",
                            account.as_deref().unwrap_or("ACCOUNT")
                        )
                    })
                };
                (
                    builder!(MicrosoftAzureBuilder, endpoint),
                    cloud_path().map_err(|e| bad(e.to_string()))?,
                )
            }
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path (use file:///absolute/path)".into()))?;
                std::fs::create_dir_all(&dir)
                    .map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?;
                ((Arc::new(fs) as Arc<dyn ObjectStore>, dir.display().to_string()), Path::default())
            }
            s => return Err(bad(format!("unknown scheme {s}://; expected {SCHEMES}"))),
        };
        let cs = CheckpointStore::with_store(store, prefix, url);
        cs.probe(parsed.host_str().unwrap_or_default(), &endpoint).map_err(bad)?;
        Ok(cs)
    }

    /// A checkpoint store over `store` under `prefix`, named `url` in messages, without
    /// the start-up probe (tests wrap stores to inject faults).
    pub fn with_store(store: Arc<dyn ObjectStore>, prefix: Path, url: &str) -> CheckpointStore {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread tokio runtime");
        CheckpointStore { rt, store, prefix, url: url.to_string(), retry: Retry::default() }
    }

    /// Sets how failed operations are retried (default [`Retry::default`]).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> CheckpointStore {
        self.retry = retry;
        self
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Writes, reads, conditionally re-creates (which must be refused) and deletes a probe
    /// object; the error says what is wrong, naming `bucket` (the URL's host) and
    /// `endpoint`. Each step is one call (the client's own few quick retries only), so a
    /// store that cannot work fails in seconds.
    fn probe(&self, bucket: &str, endpoint: &str) -> std::result::Result<(), String> {
        let key = self.prefix.clone().join(format!(".probe-{:016x}", rand::random::<u64>()));
        let explain = |doing: &str, e: object_store::Error| -> String {
            use object_store::client::HttpErrorKind as H;
            if let Some(kind @ (H::Connect | H::Request | H::Timeout | H::Interrupted)) =
                transport_failure(&e)
            {
                return format!(
                    "cannot reach {endpoint} ({kind:?} error {doing}; is the endpoint right \
                     and the server up?): {e}"
                );
            }
            match e {
                object_store::Error::NotFound { .. } => format!(
                    "bucket {bucket} does not exist at {endpoint} (or the prefix is not \
                     writable): {doing}: {e}"
                ),
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. } => format!(
                    "{endpoint} refused the credentials (AWS_ACCESS_KEY_ID / \
                     AWS_SECRET_ACCESS_KEY or the store's equivalents, or their rights on \
                     bucket {bucket}): {doing}: {e}"
                ),
                e => format!("{doing} at {endpoint}: {e}"),
            }
        };
        let once = |mode| {
            self.rt.block_on(self.store.put_opts(
                &key,
                PutPayload::from_static(b"probe"),
                PutOptions { mode, ..Default::default() },
            ))
        };
        once(PutMode::Overwrite)
            .map_err(|e| explain(&format!("writing a probe object {key}"), e))?;
        let read = self.rt.block_on(async { self.store.get(&key).await?.bytes().await });
        let again = once(PutMode::Create);
        let _ = self.rt.block_on(self.store.delete(&key));
        let read = read.map_err(|e| explain(&format!("reading the probe object {key}"), e))?;
        if read != b"probe"[..] {
            return Err(format!("the probe object {key} read back different at {endpoint}"));
        }
        match again {
            Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Ok(_) => Err(format!(
                "{endpoint} overwrote an existing object on a conditional create \
                 (If-None-Match), which fencing needs; use a store that supports it"
            )),
            Err(e) => {
                Err(explain("a conditional create (If-None-Match), which fencing needs, failed", e))
            }
        }
    }

    /// Runs `op` with retries; `what` names it in the error.
    fn call<T, F>(&self, what: &dyn Fn() -> String, op: impl Fn() -> F) -> Result<T>
    where
        F: std::future::Future<Output = object_store::Result<T>>,
    {
        let mut wait = self.retry.first_backoff;
        let mut attempt = 1;
        loop {
            match self.rt.block_on(op()) {
                Ok(v) => return Ok(v),
                Err(e) if permanent(&e) || attempt >= self.retry.attempts => {
                    return Err(Error::Checkpoint(format!(
                        "{} in {}: {e}{}",
                        what(),
                        self.url,
                        if attempt > 1 {
                            format!(" (gave up after {attempt} attempts)")
                        } else {
                            String::new()
                        }
                    )))
                }
                Err(_) => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(self.retry.max_backoff);
                    attempt += 1;
                }
            }
        }
    }

    /// Like [`Self::call`], but hands a permanent `object_store` error back.
    fn call_raw<T, F>(
        &self,
        what: &dyn Fn() -> String,
        op: impl Fn() -> F,
    ) -> Result<std::result::Result<T, object_store::Error>>
    where
        F: std::future::Future<Output = object_store::Result<T>>,
    {
        let mut wait = self.retry.first_backoff;
        let mut attempt = 1;
        loop {
            match self.rt.block_on(op()) {
                Ok(v) => return Ok(Ok(v)),
                Err(e)
                    if permanent(&e) || matches!(e, object_store::Error::AlreadyExists { .. }) =>
                {
                    return Ok(Err(e))
                }
                Err(e) if attempt >= self.retry.attempts => {
                    return Err(Error::Checkpoint(format!(
                        "{} in {}: {e} (gave up after {attempt} attempts)",
                        what(),
                        self.url
                    )))
                }
                Err(_) => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(self.retry.max_backoff);
                    attempt += 1;
                }
            }
        }
    }

    fn get(&self, key: &Path) -> Result<Vec<u8>> {
        let bytes = self.call(&|| format!("reading {key}"), || async {
            self.store.get(key).await?.bytes().await
        })?;
        Ok(bytes.to_vec())
    }

    fn put(&self, key: &Path, bytes: Vec<u8>) -> Result<()> {
        let payload = PutPayload::from(bytes);
        self.call(&|| format!("writing {key}"), || self.store.put(key, payload.clone()))?;
        Ok(())
    }

    /// Creates `key` only if it does not exist: `Ok(false)` when it does.
    fn create(&self, key: &Path, bytes: Vec<u8>) -> Result<bool> {
        let payload = PutPayload::from(bytes);
        let opts = || PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.call_raw(&|| format!("creating {key}"), || {
            self.store.put_opts(key, payload.clone(), opts())
        })? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(Error::Checkpoint(format!("creating {key} in {}: {e}", self.url))),
        }
    }

    fn list(&self, prefix: &Path) -> Result<Vec<Path>> {
        self.call(&|| format!("listing {prefix}"), || async {
            let metas: Vec<_> = self.store.list(Some(prefix)).try_collect().await?;
            Ok(metas.into_iter().map(|m| m.location).collect())
        })
    }

    fn delete(&self, key: &Path) -> Result<()> {
        match self.call_raw(&|| format!("deleting {key}"), || self.store.delete(key))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::Checkpoint(format!("deleting {key} in {}: {e}", self.url))),
        }
    }

    fn task_base(&self, task: &str) -> Path {
        self.prefix.clone().join(task)
    }

    /// The pointers of a task, `(number, key)`, highest last.
    fn pointers(&self, base: &Path) -> Result<Vec<(u64, Path)>> {
        let head = base.clone().join(HEAD);
        let mut out: Vec<(u64, Path)> = self
            .list(&head)?
            .into_iter()
            .filter_map(|p| p.filename().and_then(|f| f.parse().ok()).map(|g| (g, p)))
            .collect();
        out.sort();
        Ok(out)
    }

    fn read_pointer(&self, key: &Path) -> Result<Pointer> {
        let bytes = self.get(key)?;
        let p: Pointer = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Checkpoint(format!("pointer {key} in {} does not decode: {e}", self.url))
        })?;
        if p.version != FORMAT_VERSION {
            return Err(Error::Checkpoint(format!(
                "pointer {key} in {} has version {} (this build reads {FORMAT_VERSION})",
                self.url, p.version
            )));
        }
        Ok(p)
    }

    fn read_manifest(&self, base: &Path, rel: &str) -> Result<Manifest> {
        let key = key_path(base, rel);
        let bytes = self.get(&key)?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Checkpoint(format!("manifest {key} in {} does not decode: {e}", self.url))
        })?;
        if m.version != FORMAT_VERSION {
            return Err(Error::Checkpoint(format!(
                "manifest {key} in {} has version {} (this build reads {FORMAT_VERSION})",
                self.url, m.version
            )));
        }
        Ok(m)
    }

    /// Claims task `name` for this worker (fencing every earlier owner) and brings its
    /// local directory `dir` in step with the task's current checkpoint (module docs,
    /// "The local directory"). `dir` exists and is locked by the caller.
    pub fn claim(&self, name: &str, dir: &FsPath) -> Result<RemoteTask> {
        let base = self.task_base(name);
        let mut tries = 0;
        let (epoch, ptr) = loop {
            let pointers = self.pointers(&base)?;
            let (g, ptr) = match pointers.last() {
                Some((g, key)) => (*g, self.read_pointer(key)?),
                None => (0, Pointer { version: FORMAT_VERSION, epoch: 0, manifest: None }),
            };
            let g1 = next_pointer(g, &base, &self.url)?;
            let next = Pointer { version: FORMAT_VERSION, epoch: g1, manifest: ptr.manifest };
            let key = base.clone().join(HEAD).join(format!("{g1:020}"));
            if self.create(&key, serde_json::to_vec(&next).expect("a pointer encodes"))? {
                break (g1, next);
            }
            tries += 1;
            if tries >= 20 {
                return Err(Error::Checkpoint(format!(
                    "cannot claim task {name} in {}: other workers keep claiming it",
                    self.url
                )));
            }
        };
        let manifest = match &ptr.manifest {
            Some(rel) => Some(self.read_manifest(&base, rel)?),
            None => None,
        };
        let mut task = RemoteTask {
            name: name.to_string(),
            base,
            epoch,
            generation: epoch,
            known: HashMap::new(),
            seq: 0,
            restored: None,
        };
        if let Some(m) = &manifest {
            let marker = std::fs::read_to_string(dir.join(MARKER)).ok();
            if marker.as_deref() != ptr.manifest.as_deref() {
                task.restored = Some(self.download(&task.base, m, dir)?);
                write_marker(dir, ptr.manifest.as_deref().unwrap_or_default())?;
            }
            for f in &m.files {
                for c in &f.chunks {
                    task.known.insert(c.hash.clone(), c.key.clone());
                }
            }
        }
        Ok(task)
    }

    /// Empties `dir` (all but `LOCK`) and writes the files of manifest `m` into it.
    fn download(&self, base: &Path, m: &Manifest, dir: &FsPath) -> Result<RestoreStats> {
        let t = Instant::now();
        let io = |what: &str, p: &FsPath, e: std::io::Error| {
            Error::Checkpoint(format!("{what} {}: {e}", p.display()))
        };
        for entry in std::fs::read_dir(dir).map_err(|e| io("cannot list", dir, e))? {
            let entry = entry.map_err(|e| io("cannot list", dir, e))?;
            if entry.file_name() == "LOCK" {
                continue;
            }
            let p = entry.path();
            let r = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(|e| io("cannot remove", &p, e))?;
        }
        let mut stats = RestoreStats::default();
        // Chunks are fetched DOWNLOAD_AHEAD at a time, concurrently (one round trip per
        // chunk would leave the link idle); a chunk whose concurrent fetch fails is
        // fetched again on its own with the usual retries.
        let all: Vec<(usize, &Chunk)> = m
            .files
            .iter()
            .enumerate()
            .flat_map(|(i, f)| f.chunks.iter().map(move |c| (i, c)))
            .collect();
        let mut next = 0;
        let mut fetched: std::collections::VecDeque<Vec<u8>> = Default::default();
        for (fi, f) in m.files.iter().enumerate() {
            let path = local_path(dir, &f.path)?;
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
            }
            let mut out =
                std::fs::File::create(&path).map_err(|e| io("cannot create", &path, e))?;
            for c in &f.chunks {
                if fetched.is_empty() {
                    let group = &all[next..(next + DOWNLOAD_AHEAD).min(all.len())];
                    let keys: Vec<Path> =
                        group.iter().map(|(_, c)| key_path(base, &c.key)).collect();
                    let got = self.rt.block_on(futures_util::future::join_all(
                        keys.iter().map(|k| async move { self.store.get(k).await?.bytes().await }),
                    ));
                    for (k, r) in keys.iter().zip(got) {
                        fetched.push_back(match r {
                            Ok(b) => b.to_vec(),
                            Err(_) => self.get(k)?,
                        });
                    }
                    next += group.len();
                }
                debug_assert!(
                    std::ptr::eq(all[next - fetched.len()].1, c)
                        && all[next - fetched.len()].0 == fi
                );
                let key = key_path(base, &c.key);
                let bytes = fetched.pop_front().expect("fetched ahead");
                if bytes.len() as u64 != c.len || hash_hex(&bytes) != c.hash {
                    return Err(Error::Checkpoint(format!(
                        "chunk {key} in {} does not match manifest entry {} ({} bytes read, {} expected, or another hash): damaged store?",
                        self.url,
                        f.path,
                        bytes.len(),
                        c.len
                    )));
                }
                out.write_all(&bytes).map_err(|e| io("cannot write", &path, e))?;
                stats.bytes += c.len;
            }
            out.sync_all().map_err(|e| io("cannot sync", &path, e))?;
            stats.files += 1;
        }
        stats.seconds = t.elapsed().as_secs_f64();
        Ok(stats)
    }
}

fn hash_hex(bytes: &[u8]) -> String {
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes))
}

/// `rel` (a manifest path) under `dir`, refusing paths that leave it.
fn local_path(dir: &FsPath, rel: &str) -> Result<PathBuf> {
    let mut p = dir.to_path_buf();
    for part in rel.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(Error::Checkpoint(format!("manifest path {rel:?} is not a relative path")));
        }
        p.push(part);
    }
    Ok(p)
}

fn write_marker(dir: &FsPath, manifest: &str) -> Result<()> {
    let tmp = dir.join(format!("{MARKER}.tmp"));
    let path = dir.join(MARKER);
    std::fs::write(&tmp, manifest)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| Error::Checkpoint(format!("cannot write {}: {e}", path.display())))
}

/// Every file of a task directory that belongs to its checkpoint, relative, sorted.
fn checkpoint_files(dir: &FsPath) -> Result<Vec<String>> {
    fn walk(root: &FsPath, rel: &str, out: &mut Vec<String>) -> Result<()> {
        let here = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
        let rd = std::fs::read_dir(&here)
            .map_err(|e| Error::Checkpoint(format!("cannot list {}: {e}", here.display())))?;
        for entry in rd {
            let entry = entry
                .map_err(|e| Error::Checkpoint(format!("cannot list {}: {e}", here.display())))?;
            let Ok(name) = entry.file_name().into_string() else {
                return Err(Error::Checkpoint(format!(
                    "{}: a file name that is not UTF-8",
                    entry.path().display()
                )));
            };
            if name.ends_with(".tmp") || (rel.is_empty() && (name == "LOCK" || name == MARKER)) {
                continue;
            }
            let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(root, &child, out)?;
            } else {
                out.push(child);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

impl RemoteTask {
    /// The epoch of this owner (the number of its claim pointer).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Uploads the checkpoint the task directory `dir` holds now and makes it the task's
    /// current one, unless a newer owner claimed the task ([`Published::Fenced`]; nothing
    /// of it then counts). An error after retries leaves the previous checkpoint current.
    pub fn publish(&mut self, cs: &CheckpointStore, dir: &FsPath) -> Result<Published> {
        let t = Instant::now();
        let mut stats = UploadStats::default();
        let mut files = Vec::new();
        let mut buf = vec![0u8; CHUNK_BYTES];
        for rel in checkpoint_files(dir)? {
            let path = dir.join(&rel);
            let io = |e: std::io::Error| {
                Error::Checkpoint(format!("cannot read {}: {e}", path.display()))
            };
            let mut f = std::fs::File::open(&path).map_err(io)?;
            let mut entry = FileEntry { path: rel.clone(), size: 0, chunks: Vec::new() };
            loop {
                let n = read_full(&mut f, &mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                let bytes = &buf[..n];
                let hash = hash_hex(bytes);
                let key = match self.known.get(&hash) {
                    Some(k) => k.clone(),
                    None => {
                        let k = format!("{:020}/{hash}", self.epoch);
                        cs.put(&key_path(&self.base, &k), bytes.to_vec())?;
                        stats.uploaded_bytes += n as u64;
                        stats.uploaded_objects += 1;
                        self.known.insert(hash.clone(), k.clone());
                        k
                    }
                };
                entry.chunks.push(Chunk { key, len: n as u64, hash });
                entry.size += n as u64;
                if n < buf.len() {
                    break;
                }
            }
            stats.state_bytes += entry.size;
            files.push(entry);
        }
        self.seq += 1;
        let rel = format!("{:020}/ckpt-{:010}.json", self.epoch, self.seq);
        let m =
            Manifest { version: FORMAT_VERSION, task: self.name.clone(), epoch: self.epoch, files };
        let body = serde_json::to_vec(&m).expect("a manifest encodes");
        stats.uploaded_bytes += body.len() as u64;
        stats.uploaded_objects += 1;
        cs.put(&key_path(&self.base, &rel), body)?;

        let g = next_pointer(self.generation, &self.base, &cs.url)?;
        let ptr =
            Pointer { version: FORMAT_VERSION, epoch: self.epoch, manifest: Some(rel.clone()) };
        let key = self.base.clone().join(HEAD).join(format!("{g:020}"));
        if !cs.create(&key, serde_json::to_vec(&ptr).expect("a pointer encodes"))? {
            // Ours if an attempt that seemed to fail had in fact written it.
            if cs.read_pointer(&key).ok().as_ref() != Some(&ptr) {
                return Ok(Published::Fenced(format!(
                    "task {}: pointer {g} in {} was already written by a newer owner",
                    self.name, cs.url
                )));
            }
        }
        let pointers = cs.pointers(&self.base)?;
        if let Some((newest, _)) = pointers.last().filter(|(n, _)| *n > g) {
            let _ = cs.delete(&key);
            return Ok(Published::Fenced(format!(
                "task {}: a newer owner wrote pointer {newest} in {} (this worker's was {g})",
                self.name, cs.url
            )));
        }
        self.generation = g;
        write_marker(dir, &rel)?;

        // Garbage collection (module docs): failures leave garbage, never a loss.
        let referenced: HashSet<String> = m
            .files
            .iter()
            .flat_map(|f| f.chunks.iter().map(|c| c.key.clone()))
            .chain([rel])
            .collect();
        self.known.retain(|_, k| referenced.contains(k));
        let mut doomed = Vec::new();
        for (n, p) in pointers {
            if n < g {
                doomed.push(p);
            }
        }
        let base_parts = self.base.parts().count();
        for p in cs.list(&self.base)? {
            let parts: Vec<String> =
                p.parts().skip(base_parts).map(|x| x.as_ref().to_string()).collect();
            let Some(first) = parts.first() else { continue };
            let Ok(epoch) = first.parse::<u64>() else { continue };
            if epoch <= self.epoch && !referenced.contains(&parts.join("/")) {
                doomed.push(p);
            }
        }
        for p in doomed {
            match cs.delete(&p) {
                Ok(()) => stats.deleted_objects += 1,
                Err(e) => {
                    eprintln!("warning: checkpoint garbage collection: {e} (left in place)");
                    break;
                }
            }
        }
        stats.seconds = t.elapsed().as_secs_f64();
        Ok(Published::Done(stats))
    }
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
