//! An S3 server on loopback for tests: `s3s-fs` (buckets are directories of a temporary
//! directory) behind `s3s`'s S3 protocol layer (SigV4 signatures checked against fixed
//! credentials), served by hyper on `127.0.0.1` at a free port from a background thread.
//! One server per test binary, started on first use ([`S3Server::get`]); it ends with the
//! process, and its directory is removed when the process exits normally (a killed test
//! binary leaves it under the system's temporary directory).
//!
//! Three things are added over `s3s-fs`, in [`Guarded`]:
//! - a put into a bucket that does not exist fails with `NoSuchBucket` (s3s-fs would
//!   create the directories), as on S3;
//! - a conditional create (`If-None-Match: *`, what fencing relies on) is atomic: s3s-fs
//!   checks for the object and then renames its upload into place, so two concurrent
//!   creates could both succeed; here creates are serialized, as S3 itself guarantees;
//! - fault injection: [`S3Server::fail_puts`] makes the next `n` puts whose
//!   `bucket/key` contains a needle fail with `503 Service Unavailable` (which clients
//!   retry), and counts them, so a test can check that retries happened.
//!
//! Shared by the engine's `kafka::remote` tests and the CLI's Kafka tests (included there
//! by `#[path]`), so it uses only their common dev-dependencies.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result, S3};

/// The server's access key id.
pub const ACCESS_KEY: &str = "spillway-test";
/// The server's secret access key.
pub const SECRET_KEY: &str = "spillway-test-secret";
/// The region the clients sign for (s3s accepts any).
pub const REGION: &str = "us-east-1";

/// A fault: the next `remaining` puts whose `bucket/key` contains `needle` fail.
struct Fault {
    needle: String,
    remaining: u64,
    hits: u64,
}

/// What the tests control.
#[derive(Default)]
struct Control {
    faults: Mutex<Vec<Fault>>,
    /// Held across a conditional create (check and rename).
    creates: tokio::sync::Mutex<()>,
}

/// The running server of this test binary.
pub struct S3Server {
    addr: SocketAddr,
    root: PathBuf,
    control: Arc<Control>,
    _dir: tempfile::TempDir,
}

static SERVER: OnceLock<S3Server> = OnceLock::new();

impl S3Server {
    /// The server of this test binary, started on first use.
    pub fn get() -> &'static S3Server {
        SERVER.get_or_init(S3Server::start)
    }

    fn start() -> S3Server {
        let dir = tempfile::Builder::new().prefix("spillway-s3-test").tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let control = Arc::new(Control::default());
        let fs = s3s_fs::FileSystem::new(&root).expect("s3s-fs over a temporary directory");
        let guarded = Guarded { fs, root: root.clone(), control: control.clone() };
        let mut b = s3s::service::S3ServiceBuilder::new(guarded);
        b.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = b.build();
        // Bound (and listening) before the server thread starts: clients may connect at
        // once, their connections wait in the backlog.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        listener.set_nonblocking(true).expect("non-blocking listener");
        std::thread::Builder::new()
            .name("s3-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a tokio runtime");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    loop {
                        let Ok((socket, _)) = listener.accept().await else { continue };
                        let service = service.clone();
                        tokio::spawn(async move {
                            let io = hyper_util::rt::TokioIo::new(socket);
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await;
                        });
                    }
                });
            })
            .expect("start the S3 server thread");
        S3Server { addr, root, control, _dir: dir }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates bucket `name` (a directory of the server's root) if missing.
    pub fn bucket(&self, name: &str) -> &Self {
        std::fs::create_dir_all(self.root.join(name)).expect("create a bucket directory");
        self
    }

    /// The directory holding bucket `name`'s objects (keys are paths under it).
    pub fn bucket_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// `object_store` options that reach this server with the right credentials.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint()),
            ("aws_allow_http", "true".into()),
            ("aws_access_key_id", ACCESS_KEY.into()),
            ("aws_secret_access_key", SECRET_KEY.into()),
            ("aws_region", REGION.into()),
        ]
    }

    /// The environment variables a user sets for the same (what `spillway` reads).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", REGION.into()),
        ]
    }

    /// Makes the next `n` puts whose `bucket/key` contains `needle` fail with 503.
    pub fn fail_puts(&self, needle: &str, n: u64) {
        let mut f = self.control.faults.lock().expect("faults");
        f.retain(|f| f.needle != needle);
        f.push(Fault { needle: needle.into(), remaining: n, hits: 0 });
    }

    /// How many puts failed for `needle` since [`Self::fail_puts`] armed it.
    pub fn failed_puts(&self, needle: &str) -> u64 {
        let f = self.control.faults.lock().expect("faults");
        f.iter().find(|f| f.needle == needle).map_or(0, |f| f.hits)
    }
}

/// `s3s-fs` with atomic conditional creates and injected put failures (module docs).
struct Guarded {
    fs: s3s_fs::FileSystem,
    root: PathBuf,
    control: Arc<Control>,
}

#[async_trait::async_trait]
impl S3 for Guarded {
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let name = format!("{}/{}", req.input.bucket, req.input.key);
        if !self.root.join(&req.input.bucket).is_dir() {
            return Err(s3_error!(NoSuchBucket, "no bucket {}", req.input.bucket));
        }
        {
            let mut faults = self.control.faults.lock().expect("faults");
            if let Some(f) = faults.iter_mut().find(|f| f.remaining > 0 && name.contains(&f.needle))
            {
                f.remaining -= 1;
                f.hits += 1;
                return Err(s3_error!(ServiceUnavailable, "injected failure writing {name}"));
            }
        }
        if req.input.if_none_match.is_some() {
            let _one = self.control.creates.lock().await;
            self.fs.put_object(req).await
        } else {
            self.fs.put_object(req).await
        }
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        self.fs.get_object(req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        self.fs.head_object(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        self.fs.delete_object(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.fs.delete_objects(req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        self.fs.list_objects_v2(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.fs.head_bucket(req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.fs.copy_object(req).await
    }
}

/// Every file under `dir`, relative, sorted (a bucket's objects).
pub fn files_under(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, here: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(here).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}
