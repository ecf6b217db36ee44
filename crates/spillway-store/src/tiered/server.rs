//! The one Redis launcher of the workspace: starts a private `redis-server` child for the
//! tiered store's `--l2 auto`, the tests and the benchmarks, and stops it by PID.
//!
//! The child listens only on a unix socket in a fresh private directory (`--port 0`: no
//! TCP listener at all), with persistence off (`--save ""`, `--appendonly no`) and
//! `maxmemory-policy noeviction` (Redis must never drop a key the store demoted to it;
//! when it runs out of memory it refuses writes, and the store reports that).
//!
//! Lifetime: [`RedisServer`] stops its child on drop (SIGTERM, wait up to 5 s, then
//! SIGKILL) and removes its directory. If the process dies without dropping it (a
//! SIGKILL, a panic abort), the child gets SIGTERM from the kernel
//! (`PR_SET_PDEATHSIG`): the child is spawned from one long-lived launcher thread,
//! because the kernel sends the signal when the *thread* that forked the child exits,
//! and test harnesses run each test on a thread of its own. Directories left by a
//! process that died are removed by the next start.
//!
//! [`RedisServer::shared`] is the process-wide server (started on first use, kept for
//! the process's life, stopped by [`RedisServer::stop_shared`] or by the kernel at
//! exit): a test binary or a CLI run starts one, not one per store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A running private `redis-server`, stopped by PID when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Mutex<Option<Child>>,
    dir: PathBuf,
    socket: PathBuf,
}

/// Longest wait for a fresh server to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

fn launch_error(detail: String) -> Error {
    Error::Redis { addr: "auto (a private redis-server)".into(), op: "start", detail }
}

impl RedisServer {
    /// Starts a private server; returns once it answers PING. Fails with a message
    /// saying to install `redis-server` when the binary is missing.
    /// The binary is `redis-server` from `PATH`, or `$SPILLWAY_REDIS_SERVER`.
    pub fn start() -> Result<RedisServer> {
        let bin =
            std::env::var_os("SPILLWAY_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        RedisServer::start_binary(Path::new(&bin))
    }

    /// Starts a private server from the given `redis-server` binary.
    pub fn start_binary(bin: &Path) -> Result<RedisServer> {
        let base = std::env::temp_dir();
        remove_stale_dirs(&base);
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = base.join(format!("spillway-redis-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| launch_error(format!("cannot create {}: {e}", dir.display())))?;
        let socket = dir.join("redis.sock");
        let mut cmd = Command::new(bin);
        cmd.args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--maxmemory-policy", "noeviction", "--dir"])
            .arg(&dir)
            .args(["--logfile"])
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = spawn_on_launcher(cmd).map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            if e.kind() == std::io::ErrorKind::NotFound {
                launch_error(format!(
                    "{} is not installed: install it (Debian/Ubuntu: `apt-get install \
                     redis-server`), or give a running server (redis://HOST:PORT or \
                     redis+unix://PATH) with --l2 (the tiered store) or --redis (bench shared)",
                    bin.display()
                ))
            } else {
                launch_error(format!("cannot run {}: {e}", bin.display()))
            }
        })?;
        let server = RedisServer { child: Mutex::new(Some(child)), dir, socket };
        server.wait_ready()?;
        Ok(server)
    }

    /// The process-wide server: started on the first call, shared by every later one.
    pub fn shared() -> Result<Arc<RedisServer>> {
        let mut slot = shared_slot().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref() {
            if s.is_running() {
                return Ok(s.clone());
            }
        }
        let s = Arc::new(RedisServer::start()?);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Stops the process-wide server now (if this was its last user, by PID; stores
    /// still holding it keep it until they drop). Call at the end of a CLI run.
    pub fn stop_shared() {
        let taken = shared_slot().lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(taken);
    }

    /// The URL to connect to (`redis+unix:///…/redis.sock`).
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    /// The server's PID (none once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(Child::id)
    }

    /// Whether the child is still running.
    pub fn is_running(&self) -> bool {
        let mut g = self.child.lock().unwrap_or_else(|p| p.into_inner());
        matches!(g.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Kills the server with SIGKILL at once (tests: Redis dying mid-run).
    pub fn kill(&self) {
        if let Some(mut c) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_ready(&self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = self.url();
        loop {
            let answered = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
                .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
            if answered.is_ok() {
                return Ok(());
            }
            if !self.is_running() {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(3).collect();
                return Err(launch_error(format!(
                    "redis-server exited at start: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(launch_error(format!(
                    "redis-server did not answer PING on {url} within {READY_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn stop(&self) {
        let Some(mut c) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        if let Ok(None) = c.try_wait() {
            terminate(c.id());
            let deadline = Instant::now() + STOP_TIMEOUT;
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = c.kill();
        }
        let _ = c.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn shared_slot() -> &'static Mutex<Option<Arc<RedisServer>>> {
    static SLOT: OnceLock<Mutex<Option<Arc<RedisServer>>>> = OnceLock::new();
    SLOT.get_or_init(|| Mutex::new(None))
}

/// Removes `spillway-redis-PID-N` directories whose process is gone.
fn remove_stale_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("spillway-redis-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` from the launcher thread, which lives as long as the process, with
/// `PR_SET_PDEATHSIG` = SIGTERM set in the child.
fn spawn_on_launcher(cmd: Command) -> std::io::Result<Child> {
    static LAUNCHER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let tx = LAUNCHER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("spillway-redis-launcher".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    set_parent_death_signal(&mut cmd);
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawn the redis launcher thread");
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| std::io::Error::other("the redis launcher thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the redis launcher thread is gone"))?
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, kill on itself), allocating nothing.
    let parent = std::process::id();
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would signal.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// SIGTERM to our own child by PID (not reaped yet: we hold its `Child`).
#[allow(unsafe_code)]
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; pid is our unreaped child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}
