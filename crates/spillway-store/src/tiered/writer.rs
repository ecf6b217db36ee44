//! The Redis level's background writer: demotion batches are written to Redis by a
//! thread of their own over a second connection, so the task's thread does not wait
//! for Redis to receive large values (a 4 MiB `SET` costs 4-10 ms here, a `GET` of it
//! 1.2-2 ms: writing back on the task's thread made every L1 miss pay both).
//!
//! Until its batch is acknowledged, every demoted value stays readable in the
//! *in-flight* map, which reads consult before Redis; a key leaves the map only after
//! Redis acknowledged the write of that very version (a per-entry sequence number), so
//! a read never reaches Redis before the newest write of its key has. At most
//! [`QUEUE`] batches wait behind the one being written (backpressure). A failed write
//! is kept as the writer's error: the writer skips the batches after it (their values
//! stay readable in the map), and the store
//! reports the error (naming the address) on its next Redis operation and is poisoned
//! (the values lost with the batches were above the last checkpoint, which a reopen
//! recovers). Operations that read Redis wholesale (checkpoint's flush, scans, the
//! prefix clearing) first wait until nothing is in flight.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use hashbrown::HashMap;

/// Batches queued behind the one being written.
const QUEUE: usize = 1;

/// A demoted value: `None` is a tombstone.
pub(crate) type Value = Option<Arc<Vec<u8>>>;

/// A key (ns + key) and its newest value (`None`: deleted), as demoted.
pub(crate) type Demotion = (Box<[u8]>, Option<Vec<u8>>);

struct Batch {
    entries: Vec<(Box<[u8]>, u64, Value)>,
}

#[derive(Default)]
struct State {
    /// Newest in-flight version of each key: (sequence, value).
    map: HashMap<Box<[u8]>, (u64, Value)>,
    /// Bytes of values in the map.
    bytes: usize,
    /// Batches submitted and not yet finished.
    batches: usize,
    /// The first write error; later batches are dropped.
    error: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    idle: Condvar,
    round_trips: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub(crate) struct Writer {
    tx: Option<mpsc::SyncSender<Batch>>,
    handle: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    seq: u64,
}

impl Writer {
    /// Starts the writer over `con`. Data keys are `data_prefix + key`; with
    /// `dirty_key`, each batch also adds its keys to that set.
    pub(crate) fn start(
        mut con: redis::Connection,
        data_prefix: Vec<u8>,
        dirty_key: Option<Vec<u8>>,
    ) -> std::io::Result<Writer> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
            round_trips: AtomicU64::new(0),
        });
        let (tx, rx) = mpsc::sync_channel::<Batch>(QUEUE);
        let sh = shared.clone();
        let handle =
            std::thread::Builder::new().name("spillway-redis-writer".into()).spawn(move || {
                let mut buf = Vec::new();
                for batch in rx {
                    let failed = sh.lock().error.is_some();
                    let result = if failed {
                        Ok(())
                    } else {
                        write_batch(&mut con, &mut buf, &data_prefix, dirty_key.as_deref(), &batch)
                    };
                    sh.round_trips.fetch_add(1, Ordering::Relaxed);
                    if buf.capacity() > super::l2::SENDBUF_KEEP {
                        buf = Vec::new();
                    }
                    let mut st = sh.lock();
                    if let Err(e) = result {
                        st.error.get_or_insert(e);
                    }
                    // After a failure the values stay in the map: a read racing with the
                    // failure still finds the newest value instead of asking a Redis that
                    // may have lost it (the store is poisoned on its next operation).
                    let written = !failed && st.error.is_none();
                    for (k, seq, _) in batch.entries.into_iter().filter(|_| written) {
                        if st.map.get(&k).is_some_and(|(s, _)| *s == seq) {
                            if let Some((_, v)) = st.map.remove(&k) {
                                st.bytes -= v.map_or(0, |v| v.len());
                            }
                        }
                    }
                    st.batches -= 1;
                    drop(st);
                    sh.idle.notify_all();
                }
            })?;
        Ok(Writer { tx: Some(tx), handle: Some(handle), shared, seq: 0 })
    }

    /// Hands a batch to the writer (blocks while [`QUEUE`] batches wait). The values
    /// are readable through [`lookup`](Self::lookup) until Redis acknowledged them.
    pub(crate) fn submit(&mut self, entries: Vec<Demotion>) -> Result<(), String> {
        let mut batch = Batch { entries: Vec::with_capacity(entries.len()) };
        {
            let mut st = self.shared.lock();
            if let Some(e) = &st.error {
                return Err(e.clone());
            }
            for (k, v) in entries {
                self.seq += 1;
                let v = v.map(Arc::new);
                st.bytes += v.as_ref().map_or(0, |v| v.len());
                if let Some((_, old)) = st.map.insert(k.clone(), (self.seq, v.clone())) {
                    st.bytes -= old.map_or(0, |o| o.len());
                }
                batch.entries.push((k, self.seq, v));
            }
            st.batches += 1;
        }
        let tx = self.tx.as_ref().expect("the writer runs until dropped");
        if tx.send(batch).is_err() {
            return Err("the Redis writer thread is gone".into());
        }
        Ok(())
    }

    /// The newest in-flight value of `k`, if it is in flight; the writer's error if a
    /// write failed (one lock for both: this is on every L1 miss).
    pub(crate) fn lookup(&self, k: &[u8]) -> Result<Option<Value>, String> {
        let st = self.shared.lock();
        if let Some(e) = &st.error {
            return Err(e.clone());
        }
        Ok(st.map.get(k).map(|(_, v)| v.clone()))
    }

    /// Whether `k` is in flight.
    pub(crate) fn contains(&self, k: &[u8]) -> bool {
        self.shared.lock().map.contains_key(k)
    }

    /// The writer's error, if a write failed.
    pub(crate) fn error(&self) -> Option<String> {
        self.shared.lock().error.clone()
    }

    /// Waits until every submitted batch is written (or dropped after an error);
    /// returns the writer's error if there is one.
    pub(crate) fn wait_idle(&self) -> Result<(), String> {
        let mut st = self.shared.lock();
        while st.batches > 0 {
            st = self.shared.idle.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.error.clone().map_or(Ok(()), Err)
    }

    /// Bytes of in-flight values.
    pub(crate) fn bytes(&self) -> usize {
        self.shared.lock().bytes
    }

    /// Round trips the writer made.
    pub(crate) fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::Relaxed)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Writes one batch as one pipeline: a SET per entry (the value with its trailing tag,
/// or a tombstone) and an SADD of the keys to the dirty set. The RESP framing of each
/// command is encoded into `buf` and sent around the value, which goes to the socket
/// from its own buffer (no copy).
fn write_batch(
    con: &mut redis::Connection,
    buf: &mut Vec<u8>,
    data_prefix: &[u8],
    dirty_key: Option<&[u8]>,
    batch: &Batch,
) -> Result<(), String> {
    use super::l2::{resp_bulk, resp_bulk_header, TAG_TOMBSTONE, TAG_VALUE};
    let io = |e: redis::RedisError| e.to_string();
    let mut commands = 0usize;
    buf.clear();
    for (k, _, v) in &batch.entries {
        buf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
        resp_bulk_header(buf, data_prefix.len() + k.len());
        buf.extend_from_slice(data_prefix);
        buf.extend_from_slice(k);
        buf.extend_from_slice(b"\r\n");
        match v {
            Some(v) => {
                resp_bulk_header(buf, v.len() + 1);
                if v.len() >= DIRECT_SEND {
                    con.send_packed_command(buf).map_err(io)?;
                    con.send_packed_command(v).map_err(io)?;
                    buf.clear();
                } else {
                    buf.extend_from_slice(v);
                }
                buf.push(TAG_VALUE);
            }
            None => {
                resp_bulk_header(buf, 1);
                buf.push(TAG_TOMBSTONE);
            }
        }
        buf.extend_from_slice(b"\r\n");
        commands += 1;
    }
    if let Some(dirty) = dirty_key {
        super::l2::resp_header(buf, b'*', batch.entries.len() + 2);
        buf.extend_from_slice(b"$4\r\nSADD\r\n");
        resp_bulk(buf, dirty);
        for (k, _, _) in &batch.entries {
            resp_bulk(buf, k);
        }
        commands += 1;
    }
    con.send_packed_command(buf).map_err(io)?;
    // Every reply is read, even after an error reply, so the connection stays in step.
    let mut refused = None;
    for _ in 0..commands {
        if let redis::Value::ServerError(e) = con.recv_response().map_err(io)? {
            refused.get_or_insert(format!("the server refused a write: {e:?}"));
        }
    }
    refused.map_or(Ok(()), Err)
}

/// Values at least this long are sent from their own buffer instead of being copied
/// into the pipeline's.
const DIRECT_SEND: usize = 64 << 10;
