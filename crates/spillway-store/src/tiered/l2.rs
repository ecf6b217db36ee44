//! The Redis level (L2) of the tiered store: one connection, keys under the store's
//! prefix, a buffer of demotions sent as one pipeline, and the set of keys that are
//! newer in Redis than in the durable level below (walked with SSCAN by a flush; a key
//! leaves it only once the level below holds its value).
//!
//! Every operation is a pipeline or a single command over one synchronous connection
//! (the store has a single writer; an async runtime would add a thread hop per miss).
//! Any Redis error is returned as [`Error::Redis`] naming the address, and the caller
//! poisons the store: after a failed or lost connection nobody knows what Redis holds,
//! so the store does not guess (no reconnect that might read a restarted, empty Redis).

use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;

use super::bulk::BulkReader;
use super::server::RedisServer;
use super::writer::{Demotion, Writer};
use super::L2Config;
use crate::error::{Error, Result};

/// Trailing tag byte of every value stored in Redis: a value or a tombstone. A delete
/// must hide the older value a lower level still holds until the next checkpoint, so
/// it is stored, not executed as `DEL`. The tag goes last so that a demoted value (an
/// owned buffer) is sent and a fetched one returned without copying it.
pub(crate) const TAG_VALUE: u8 = 1;
pub(crate) const TAG_TOMBSTONE: u8 = 0;

/// Demotions buffered before one pipeline sends them (RECIPES: one round trip costs
/// ~7-15 us here, a 64-deep pipeline ~0.6 us per operation).
const PENDING_MAX_ENTRIES: usize = 64;
/// Bytes buffered before the pipeline is sent regardless of the count (a large value
/// goes out at once rather than sitting in process memory).
const PENDING_MAX_BYTES: usize = 1 << 20;
/// Keys moved per round trip when the dirty set is flushed to L3 or the prefix cleared.
const FLUSH_BATCH: usize = 32;
/// Socket read and write timeout: a hung server becomes an error, not a hang.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// What Redis (or the demotion buffer) says of a key.
pub(crate) enum Lookup {
    /// The newest value.
    Found(Vec<u8>),
    /// Deleted: the levels below must not be asked.
    Deleted,
    /// L2 does not hold the key: ask the level below.
    Absent,
}

/// A key (L1 form) and its newest value (`None`: deleted).
pub(crate) type Newest = (Vec<u8>, Option<Vec<u8>>);

/// Visits a key (L1 form) and its newest value (`None`: deleted); `false` stops.
pub(crate) type NewestVisitor<'a> = dyn FnMut(&[u8], Option<&[u8]>) -> bool + 'a;

pub(crate) struct RedisLevel {
    addr: String,
    con: redis::Connection,
    /// Data keys: `prefix + "d:" + ns (u16 LE) + key`.
    data_prefix: Vec<u8>,
    /// The set of L1-form keys (ns + key) whose Redis value is newer than L3's.
    dirty_key: Vec<u8>,
    /// The prefix every key of this store instance starts with (cleared at open).
    base: Vec<u8>,
    pending: HashMap<Box<[u8]>, Option<Vec<u8>>>,
    pending_bytes: usize,
    /// Hashes of every key written to Redis since open. Redis held nothing under the
    /// prefix at open (it was cleared) and only this store writes there, so a key whose
    /// hash is absent is not in Redis: a read of a key that never left L1 (a new key)
    /// costs no round trip. A hash collision only costs one.
    written: hashbrown::HashSet<u64>,
    /// Writes the demotion batches on a thread of its own.
    writer: Writer,
    /// Single-key reads over a socket of our own (none for TLS servers).
    bulk: Option<BulkReader>,
    /// Round trips made on the task's thread (the writer counts its own).
    round_trips: u64,
    keybuf: Vec<u8>,
    /// Keeps a private `auto` server alive as long as the store.
    _server: Option<Arc<RedisServer>>,
}

impl RedisLevel {
    /// Connects, checks the server will not evict our keys, and clears every key left
    /// under `base` by an earlier run (they may be newer than the checkpoint being
    /// recovered). `track_dirty`: a durable level lies below (keep the dirty set).
    pub(crate) fn connect(cfg: &L2Config, base: String, track_dirty: bool) -> Result<Self> {
        let (server, url, addr) = match cfg {
            L2Config::Auto => {
                let s = RedisServer::shared()?;
                let url = s.url();
                (Some(s), url.clone(), format!("auto ({url})"))
            }
            L2Config::Url(u) => (None, u.clone(), u.clone()),
            L2Config::None => unreachable!("connect is only called with an L2"),
        };
        let err = |op: &'static str, e: redis::RedisError| Error::Redis {
            addr: addr.clone(),
            op,
            detail: e.to_string(),
        };
        let client = redis::Client::open(url.as_str()).map_err(|e| err("connect", e))?;
        let open = || -> Result<redis::Connection> {
            let con = client
                .get_connection_with_timeout(Duration::from_secs(5))
                .map_err(|e| err("connect", e))?;
            con.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| err("connect", e))?;
            con.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| err("connect", e))?;
            Ok(con)
        };
        let con = open()?;
        let writer_con = open()?;
        let bulk = BulkReader::connect(client.get_connection_info(), IO_TIMEOUT)
            .transpose()
            .map_err(|detail| Error::Redis { addr: addr.clone(), op: "connect", detail })?;
        let base = base.into_bytes();
        let mut data_prefix = base.clone();
        data_prefix.extend_from_slice(b"d:");
        let mut dirty_key = base.clone();
        dirty_key.extend_from_slice(b"dirty");
        let writer =
            Writer::start(writer_con, data_prefix.clone(), track_dirty.then(|| dirty_key.clone()))
                .map_err(|e| Error::Redis {
                    addr: addr.clone(),
                    op: "connect",
                    detail: format!("cannot start the writer thread: {e}"),
                })?;
        let mut l2 = RedisLevel {
            addr,
            con,
            data_prefix,
            dirty_key,
            base,
            pending: HashMap::new(),
            pending_bytes: 0,
            written: hashbrown::HashSet::new(),
            writer,
            bulk,
            round_trips: 0,
            keybuf: Vec::new(),
            _server: server,
        };
        l2.check_eviction_policy()?;
        l2.clear_prefix()?;
        Ok(l2)
    }

    /// Bytes of process memory L2 holds (the written-key hashes, the send buffer).
    pub(crate) fn memory_bytes(&self) -> u64 {
        (self.written.capacity() * 9 + self.writer.bytes() + self.pending_bytes) as u64
    }

    /// The address as configured, for messages.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    fn err(&self, op: &'static str, e: redis::RedisError) -> Error {
        Error::Redis { addr: self.addr.clone(), op, detail: e.to_string() }
    }

    /// A Redis that evicts keys under memory pressure would silently lose demoted
    /// writes. A server whose CONFIG command is disabled (managed Redis) is taken as is.
    fn check_eviction_policy(&mut self) -> Result<()> {
        let Ok(v) = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query::<Vec<String>>(&mut self.con)
        else {
            return Ok(());
        };
        match v.get(1).map(String::as_str) {
            Some("noeviction") | None => Ok(()),
            Some(p) => Err(Error::Redis {
                addr: self.addr.clone(),
                op: "open",
                detail: format!(
                    "its maxmemory-policy is {p}: Redis could evict keys the store demoted to \
                     it and lose writes; set `maxmemory-policy noeviction` (or use --l2 auto)"
                ),
            }),
        }
    }

    /// One page of `SCAN cursor MATCH pattern`: the next cursor (0: done) and keys.
    fn scan_page(
        &mut self,
        cursor: u64,
        pattern: &[u8],
        op: &'static str,
    ) -> Result<(u64, Vec<Vec<u8>>)> {
        let page = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut self.con)
            .map_err(|e| self.err(op, e))?;
        self.round_trips += 1;
        Ok(page)
    }

    /// What a stored value says: its trailing tag separates a value from a tombstone.
    /// Anything else was not written by this store.
    fn untag(&self, mut v: Vec<u8>, key: &[u8], op: &'static str) -> Result<Lookup> {
        match v.pop() {
            Some(TAG_VALUE) => Ok(Lookup::Found(v)),
            Some(TAG_TOMBSTONE) if v.is_empty() => Ok(Lookup::Deleted),
            _ => Err(Error::Redis {
                addr: self.addr.clone(),
                op,
                detail: format!(
                    "key {:?} holds a value this store did not write (bad tag): is another \
                     program writing under the prefix {:?}?",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&self.base)
                ),
            }),
        }
    }

    /// Deletes every key under this instance's prefix (SCAN + UNLINK in batches).
    pub(crate) fn clear_prefix(&mut self) -> Result<()> {
        self.settle("clear old keys")?;
        let trips =
            unlink_prefix(&mut self.con, &self.base).map_err(|e| self.err("clear old keys", e))?;
        self.round_trips += trips;
        Ok(())
    }

    fn data_key(&mut self, k: &[u8]) -> &[u8] {
        self.keybuf.clear();
        self.keybuf.extend_from_slice(&self.data_prefix);
        self.keybuf.extend_from_slice(k);
        &self.keybuf
    }

    /// The newest value of `k` (L1 form: ns + key) that L2 knows: the demotion buffer
    /// first, then Redis.
    pub(crate) fn get(&mut self, k: &[u8]) -> Result<Lookup> {
        if let Some(v) = self.pending.get(k) {
            return Ok(match v {
                Some(v) => Lookup::Found(v.clone()),
                None => Lookup::Deleted,
            });
        }
        // One lock: the writer's error and its in-flight value of `k`.
        let in_flight = self.writer.lookup(k).map_err(|detail| Error::Redis {
            addr: self.addr.clone(),
            op: "demote",
            detail,
        })?;
        if let Some(v) = in_flight {
            return Ok(match v {
                Some(v) => Lookup::Found(v.to_vec()),
                None => Lookup::Deleted,
            });
        }
        if !self.written.contains(&key_hash(k)) {
            return Ok(Lookup::Absent);
        }
        self.keybuf.clear();
        self.keybuf.extend_from_slice(&self.data_prefix);
        self.keybuf.extend_from_slice(k);
        let got: Option<Vec<u8>> = match &mut self.bulk {
            Some(b) => b.get(&self.keybuf).map_err(|detail| Error::Redis {
                addr: self.addr.clone(),
                op: "read",
                detail,
            })?,
            None => redis::cmd("GET").arg(&self.keybuf[..]).query(&mut self.con).map_err(|e| {
                Error::Redis { addr: self.addr.clone(), op: "read", detail: e.to_string() }
            })?,
        };
        self.round_trips += 1;
        match got {
            None => Ok(Lookup::Absent),
            Some(v) => self.untag(v, k, "read"),
        }
    }

    /// Whether [`get`](Self::get) of `k` would ask Redis (it was written there and is
    /// not in the demotion buffer).
    pub(crate) fn would_ask_redis(&self, k: &[u8]) -> bool {
        !self.pending.contains_key(k)
            && self.written.contains(&key_hash(k))
            && !self.writer.contains(k)
    }

    /// Reads several keys (L1 form) from Redis in one pipeline (callers ask only for
    /// keys [`would_ask_redis`](Self::would_ask_redis) accepts).
    pub(crate) fn get_many(&mut self, keys: &[&[u8]]) -> Result<Vec<Lookup>> {
        self.check_writer()?;
        let mut pipe = redis::pipe();
        for k in keys {
            pipe.cmd("GET").arg(self.data_key(k));
        }
        let values: Vec<Option<Vec<u8>>> =
            pipe.query(&mut self.con).map_err(|e| self.err("read", e))?;
        self.round_trips += 1;
        let mut out = Vec::with_capacity(values.len());
        for (k, v) in keys.iter().zip(values) {
            out.push(match v {
                None => Lookup::Absent,
                Some(v) => self.untag(v, k, "read")?,
            });
        }
        Ok(out)
    }

    /// Buffers the demotion of `k`'s newest value (`None`: deleted); sends the buffer
    /// when it is full.
    pub(crate) fn demote(&mut self, k: Box<[u8]>, v: Option<Vec<u8>>) -> Result<()> {
        self.pending_bytes += k.len() + v.as_ref().map_or(0, Vec::len);
        if let Some(old) = self.pending.insert(k, v) {
            self.pending_bytes -= old.map_or(0, |o| o.len());
        }
        if self.pending.len() >= PENDING_MAX_ENTRIES || self.pending_bytes >= PENDING_MAX_BYTES {
            self.flush_pending()?;
        }
        Ok(())
    }

    /// Removes `k` from the demotion buffer (it is being promoted into L1, which then
    /// holds the only newest copy, dirty).
    pub(crate) fn take_pending(&mut self, k: &[u8]) -> Option<Option<Vec<u8>>> {
        let v = self.pending.remove(k)?;
        self.pending_bytes -= k.len() + v.as_ref().map_or(0, Vec::len);
        Some(v)
    }

    /// Hands every buffered demotion to the writer thread as one batch (one pipeline of
    /// SETs, plus an SADD to the dirty set when a durable level lies below).
    pub(crate) fn flush_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return self.check_writer();
        }
        let entries: Vec<Demotion> = self.pending.drain().collect();
        for (k, _) in &entries {
            self.written.insert(key_hash(k));
        }
        self.pending_bytes = 0;
        let addr = &self.addr;
        self.writer.submit(entries).map_err(|detail| Error::Redis {
            addr: addr.clone(),
            op: "demote",
            detail,
        })
    }

    /// The writer's error, if one of its writes failed.
    fn check_writer(&self) -> Result<()> {
        match self.writer.error() {
            None => Ok(()),
            Some(detail) => Err(Error::Redis { addr: self.addr.clone(), op: "demote", detail }),
        }
    }

    /// Sends the demotion buffer and waits until the writer has written everything, so
    /// that Redis itself holds the newest value of every key L2 holds.
    pub(crate) fn settle(&mut self, op: &'static str) -> Result<()> {
        self.flush_pending()?;
        let addr = &self.addr;
        self.writer.wait_idle().map_err(|detail| Error::Redis { addr: addr.clone(), op, detail })
    }

    /// Round trips to Redis, the writer's included.
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips + self.writer.round_trips()
    }

    /// One page of a walk over the dirty set (`SSCAN` from `cursor`, about
    /// [`FLUSH_BATCH`] keys) with each key's Redis value (`None`: a tombstone), and the
    /// cursor of the next page (0: the walk is over). The keys stay in the set: the
    /// caller removes those that reached L3 with [`mark_clean`](Self::mark_clean) (sent
    /// in the same round trip as the next page through `clean`), so a key leaves the
    /// set only after L3 holds its value and a failure in between loses nothing.
    /// A member that is not a key this store wrote (shorter than the namespace number,
    /// or naming none of the store's `namespaces`) is an error, as a bad tag is.
    pub(crate) fn dirty_page(
        &mut self,
        cursor: u64,
        clean: &[Vec<u8>],
        namespaces: usize,
    ) -> Result<(u64, Vec<Newest>)> {
        self.settle("flush to L3")?;
        let mut pipe = redis::pipe();
        if !clean.is_empty() {
            pipe.cmd("SREM").arg(&self.dirty_key).arg(clean).ignore();
        }
        pipe.cmd("SSCAN").arg(&self.dirty_key).arg(cursor).arg("COUNT").arg(FLUSH_BATCH);
        let ((next, members),): ((u64, Vec<Vec<u8>>),) =
            pipe.query(&mut self.con).map_err(|e| self.err("flush to L3", e))?;
        self.round_trips += 1;
        if members.is_empty() {
            return Ok((next, Vec::new()));
        }
        let mut pipe = redis::pipe();
        for m in &members {
            let key = self.data_key(m).to_vec();
            pipe.cmd("GET").arg(key);
        }
        let values: Vec<Option<Vec<u8>>> =
            pipe.query(&mut self.con).map_err(|e| self.err("flush to L3", e))?;
        self.round_trips += 1;
        let mut out = Vec::with_capacity(members.len());
        for (m, v) in members.into_iter().zip(values) {
            if m.get(..2)
                .is_none_or(|n| usize::from(u16::from_le_bytes([n[0], n[1]])) >= namespaces)
            {
                return Err(Error::Redis {
                    addr: self.addr.clone(),
                    op: "flush to L3",
                    detail: format!(
                        "the dirty set holds {:?}, not a key of this store (no namespace of its \
                         {namespaces}): is another program writing under the prefix {:?}?",
                        String::from_utf8_lossy(&m),
                        String::from_utf8_lossy(&self.base)
                    ),
                });
            }
            let v = match v {
                Some(v) => match self.untag(v, &m, "flush to L3")? {
                    Lookup::Found(v) => Some(v),
                    _ => None,
                },
                None => {
                    return Err(Error::Redis {
                        addr: self.addr.clone(),
                        op: "flush to L3",
                        detail: format!(
                            "key {:?} is in the dirty set but Redis no longer holds it (was \
                             the server restarted or flushed under the store?)",
                            String::from_utf8_lossy(&m)
                        ),
                    })
                }
            };
            out.push((m, v));
        }
        Ok((next, out))
    }

    /// Removes keys that reached L3 from the dirty set.
    pub(crate) fn mark_clean(&mut self, keys: &[Vec<u8>]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        redis::cmd("SREM")
            .arg(&self.dirty_key)
            .arg(keys)
            .query::<()>(&mut self.con)
            .map_err(|e| self.err("flush to L3", e))?;
        self.round_trips += 1;
        Ok(())
    }

    /// Visits every key of L2 (L1 form) starting with `prefix` and its newest value
    /// (`None`: a tombstone). The demotion buffer must have been flushed.
    pub(crate) fn scan(&mut self, prefix: &[u8], visit: &mut NewestVisitor<'_>) -> Result<()> {
        self.settle("scan")?;
        let mut pattern = glob_escape(&self.data_prefix);
        pattern.extend_from_slice(&glob_escape(prefix));
        pattern.push(b'*');
        let mut cursor: u64 = 0;
        loop {
            let (next, keys) = self.scan_page(cursor, &pattern, "scan")?;
            for chunk in keys.chunks(FLUSH_BATCH) {
                let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                    .arg(chunk)
                    .query(&mut self.con)
                    .map_err(|e| self.err("scan", e))?;
                self.round_trips += 1;
                for (k, v) in chunk.iter().zip(values) {
                    // Deleted between SCAN and MGET cannot happen: we are the only writer.
                    let Some(v) = v else { continue };
                    let k = &k[self.data_prefix.len()..];
                    let go = match self.untag(v, k, "scan")? {
                        Lookup::Found(v) => visit(k, Some(&v)),
                        _ => visit(k, None),
                    };
                    if !go {
                        return Ok(());
                    }
                }
            }
            cursor = next;
            if cursor == 0 {
                return Ok(());
            }
        }
    }
}

/// A send buffer grown past this is released after use (a burst of large values
/// should not pin its size for the store's life).
pub(crate) const SENDBUF_KEEP: usize = 16 << 20;

/// Appends a RESP bulk-string header (`$LEN\r\n`).
pub(crate) fn resp_bulk_header(buf: &mut Vec<u8>, len: usize) {
    resp_header(buf, b'$', len);
}

/// Appends a RESP header: `*N\r\n` (an array) or `$N\r\n` (a bulk string), without
/// allocating.
pub(crate) fn resp_header(buf: &mut Vec<u8>, kind: u8, n: usize) {
    use std::io::Write as _;
    buf.push(kind);
    let _ = write!(buf, "{n}\r\n");
}

/// Appends a RESP bulk string.
pub(crate) fn resp_bulk(buf: &mut Vec<u8>, b: &[u8]) {
    resp_bulk_header(buf, b.len());
    buf.extend_from_slice(b);
    buf.extend_from_slice(b"\r\n");
}

fn key_hash(k: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(k)
}

/// Escapes the glob characters of Redis' MATCH (`* ? [ ] \`).
/// Deletes every key that starts with `base` (SCAN + UNLINK in pages of 1000); returns
/// the round trips it took. Shared by the tiered store's L2 and the Redis shared lists.
pub(crate) fn unlink_prefix(con: &mut redis::Connection, base: &[u8]) -> redis::RedisResult<u64> {
    let mut pattern = glob_escape(base);
    pattern.push(b'*');
    let (mut cursor, mut trips) = (0u64, 0u64);
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        trips += 1;
        if !keys.is_empty() {
            redis::cmd("UNLINK").arg(&keys).query::<()>(con)?;
            trips += 1;
        }
        cursor = next;
        if cursor == 0 {
            return Ok(trips);
        }
    }
}

fn glob_escape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 4);
    for &b in s {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}
