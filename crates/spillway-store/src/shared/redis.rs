//! Window lists kept natively in Redis: [`RedisSharedLists`] (the shared scheme of the
//! parent module, each event once under its reference with a count) and [`RedisLists`]
//! (one copy of the event per window, what N operators with their own Flink `ListState`
//! keep). It owns the key layout, the two Lua scripts and the pipelining.
//!
//! Appends are queued and sent as one pipeline when the queue is full or before anything
//! reads (Redis runs one connection's commands in order, so a read sees every earlier
//! append); the windows that fire together are taken in one pipeline too. The reference
//! scheme is the parent module's, with the collision check done inside Redis: a small
//! `slot` script stores the event (or counts one more use), comparing the stored bytes and
//! walking the same probe sequence as [`super::reference`]; the reference is pushed onto
//! each window's list by a plain `RPUSH` right behind it in the pipeline, assuming probe
//! step 0. In the (never yet seen) case of a collision, the script reports the step it
//! used and the flush rewrites exactly those list elements with `LSET` at the positions
//! the `RPUSH` replies gave, before anything can read them: list order never depends on
//! a retry. Keeping the pushes out of Lua matters: a `redis.call` costs about a
//! microsecond of script overhead, a pipelined command a fraction of that.
//!
//! These lists live only in Redis (which the launcher runs without persistence): they
//! are not checkpointed. Durable shared lists are [`super::SharedLists`] over a store
//! (the tiered store's Redis level included), whose counts are checkpointed with it.
//!
//! # FORMAT (Redis keys)
//! - Event: key `<prefix>e:<reference 16 bytes>`, a string `[count: u32 LE][event bytes]`.
//! - Shared list: key `<prefix>l:<window key>`, a Redis list of 16-byte references.
//! - Copies list: key `<prefix>c:<window key>`, a Redis list of event bytes.
//!
//! Opening clears every key under the prefix: the state is the process's own. The scripts
//! touch event keys they compute (probe slots), so they assume one Redis, not a cluster.

use std::time::Duration;

use super::{reference, Ref};
use crate::error::{Error, Result};

/// Appends queued before they are sent as one pipeline.
const PIPELINE_EVENTS: usize = 256;
/// Longest wait for one reply.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// `KEYS[1]` = the event key at probe step 0; `ARGV[1]` = the event bytes, `ARGV[2]` =
/// the number of windows it joins. Stores the event with that count, or adds that many
/// uses to the slot holding the same bytes, probing past slots that hold other bytes.
/// Returns `{new (1 or 0), probe step}`. `SET … NX GET` (Redis >= 7.0) stores and reads
/// the slot in one call. The reference is pushed onto the lists by plain pipelined
/// `RPUSH`es after this call (see [`RedisSharedLists::flush`]).
const SLOT_LUA: &str = r#"
local ev = ARGV[1]
local n = tonumber(ARGV[2])
local key = KEYS[1]
local packed = struct.pack('<I4', n) .. ev
for step = 0, 15 do
  local old = redis.call('SET', key, packed, 'NX', 'GET')
  if not old then return {1, step} end
  if #old >= 4 and string.sub(old, 5) == ev then
    local c = struct.unpack('<I4', old) + n
    if c > 4294967295 then c = 4294967295 end
    redis.call('SETRANGE', key, 0, struct.pack('<I4', c))
    return {0, step}
  end
  local tail = struct.unpack('<I4', string.sub(key, -4))
  key = string.sub(key, 1, -5) .. struct.pack('<I4', (tail + 1) % 4294967296)
end
return redis.error_reply('16 different events share one 128-bit reference')
"#;

/// One connection with the error context every call needs.
struct Conn {
    addr: String,
    con: redis::Connection,
    round_trips: u64,
}

impl Conn {
    fn open(url: &str, prefix: &[u8]) -> Result<Conn> {
        let err = |op, e: redis::RedisError| Error::Redis {
            addr: url.to_string(),
            op,
            detail: e.to_string(),
        };
        let client = redis::Client::open(url).map_err(|e| err("connect", e))?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .map_err(|e| err("connect", e))?;
        con.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| err("connect", e))?;
        con.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| err("connect", e))?;
        let mut c = Conn { addr: url.to_string(), con, round_trips: 0 };
        let trips = crate::tiered::unlink_prefix(&mut c.con, prefix)
            .map_err(|e| c.err("clear old keys", e))?;
        c.round_trips += trips;
        Ok(c)
    }

    fn err(&self, op: &'static str, e: redis::RedisError) -> Error {
        Error::Redis { addr: self.addr.clone(), op, detail: e.to_string() }
    }

    fn load(&mut self, script: &str) -> Result<String> {
        self.round_trips += 1;
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query(&mut self.con)
            .map_err(|e| self.err("open", e))
    }

    fn run<T: redis::FromRedisValue>(
        &mut self,
        pipe: &redis::Pipeline,
        op: &'static str,
    ) -> Result<T> {
        self.round_trips += 1;
        pipe.query(&mut self.con).map_err(|e| self.err(op, e))
    }
}

fn key(prefix: &[u8], tag: &[u8], k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(prefix.len() + tag.len() + k.len());
    v.extend_from_slice(prefix);
    v.extend_from_slice(tag);
    v.extend_from_slice(k);
    v
}

/// Shared window lists natively in Redis: each event once, with a count; each window a
/// list of references. See the module docs.
pub struct RedisSharedLists {
    conn: Conn,
    prefix: Vec<u8>,
    slot_sha: String,
    queue: redis::Pipeline,
    /// Per queued event, in queue order: the number of its windows (its commands in the
    /// pipeline are the slot script, then one `RPUSH` per window; a collision repair
    /// reads the event and the list keys back from those commands, so nothing is copied
    /// per event).
    queued: Vec<usize>,
    new_events: u64,
    collisions: u64,
}

impl RedisSharedLists {
    /// Connects to `url` (`redis://…` or `redis+unix://…`), loads the scripts and clears
    /// every key under `spw:shared:<name>:`.
    pub fn connect(url: &str, name: &str) -> Result<RedisSharedLists> {
        let prefix = format!("spw:shared:{name}:").into_bytes();
        let mut conn = Conn::open(url, &prefix)?;
        let slot_sha = conn.load(SLOT_LUA)?;
        Ok(RedisSharedLists {
            conn,
            prefix,
            slot_sha,
            queue: redis::pipe(),
            queued: Vec::new(),
            new_events: 0,
            collisions: 0,
        })
    }

    /// Queues `event` for every list of `windows` (sent with the next flush or read).
    pub fn append_many(&mut self, windows: &[&[u8]], event: &[u8]) -> Result<()> {
        crate::check_value(event.len(), crate::MAX_VALUE_LEN - 4)?;
        if windows.is_empty() {
            return Ok(());
        }
        let r0 = reference(event, 0);
        self.queue
            .cmd("EVALSHA")
            .arg(&self.slot_sha)
            .arg(1)
            .arg(key(&self.prefix, b"e:", &r0))
            .arg(event)
            .arg(windows.len());
        for w in windows {
            self.queue.cmd("RPUSH").arg(key(&self.prefix, b"l:", w)).arg(&r0[..]);
        }
        self.queued.push(windows.len());
        if self.queued.len() >= PIPELINE_EVENTS {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends the queued appends; repairs the list elements of any event the slot script
    /// had to move past a collision.
    pub fn flush(&mut self) -> Result<()> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let replies: Vec<redis::Value> = self.conn.run(&self.queue, "append")?;
        let queued = std::mem::take(&mut self.queued);
        let bad = |conn: &Conn, what: &str| Error::Redis {
            addr: conn.addr.clone(),
            op: "append",
            detail: format!("unexpected reply to an append: {what}"),
        };
        let mut repair = redis::pipe();
        let mut repairs = 0usize;
        let mut at = 0usize;
        // Argument `n` of the pipeline's command `at` (slot script: 4 = the event; RPUSH:
        // 1 = the list's key).
        let arg = |queue: &redis::Pipeline, at: usize, n: usize| -> Option<Vec<u8>> {
            match queue.cmd_iter().nth(at)?.args_iter().nth(n)? {
                redis::Arg::Simple(b) => Some(b.to_vec()),
                _ => None,
            }
        };
        for &windows in &queued {
            let (new, step) = match replies.get(at) {
                Some(redis::Value::Array(v)) => match v.as_slice() {
                    [redis::Value::Int(n), redis::Value::Int(s)] => (*n, *s),
                    _ => return Err(bad(&self.conn, "the slot script's reply")),
                },
                _ => return Err(bad(&self.conn, "the slot script's reply")),
            };
            self.new_events += u64::from(new == 1);
            if step != 0 {
                let step = u32::try_from(step).map_err(|_| bad(&self.conn, "a probe step"))?;
                self.collisions += 1;
                let event =
                    arg(&self.queue, at, 4).ok_or_else(|| bad(&self.conn, "a slot command"))?;
                let r = reference(&event, step);
                for i in 0..windows {
                    let Some(redis::Value::Int(len)) = replies.get(at + 1 + i) else {
                        return Err(bad(&self.conn, "an RPUSH reply"));
                    };
                    let list = arg(&self.queue, at + 1 + i, 1)
                        .ok_or_else(|| bad(&self.conn, "an RPUSH command"))?;
                    repair.cmd("LSET").arg(list).arg(len - 1).arg(&r[..]).ignore();
                    repairs += 1;
                }
            }
            at += 1 + windows;
        }
        self.queue.clear();
        if repairs > 0 {
            self.conn.run::<()>(&repair, "append")?;
        }
        Ok(())
    }

    /// Events that collided with other bytes under their reference and were stored at a
    /// later probe slot (their list elements rewritten at flush).
    pub fn collisions(&self) -> u64 {
        self.collisions
    }

    /// Events whose bytes were new state when appended, since the connection opened
    /// (a caller tracking live bytes subtracts the frees `take` reports).
    pub fn new_events(&self) -> u64 {
        self.new_events
    }

    /// Round trips to Redis so far.
    pub fn round_trips(&self) -> u64 {
        self.conn.round_trips
    }

    /// Fires and clears `windows` in one pipeline: `visit(i, event)` sees the events of
    /// `windows[i]` in append order; counts drop and events whose last window this was
    /// are deleted. Returns the number of events freed.
    pub fn take_many(
        &mut self,
        windows: &[&[u8]],
        visit: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<usize> {
        self.windows(windows, WindowMode::Take, visit)
    }

    /// The events of `window` in append order.
    pub fn read(&mut self, window: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.windows(&[window], WindowMode::Read, &mut |_, e| out.push(e.to_vec()))?;
        Ok(out)
    }

    /// Lets `window` go (counts drop, last uses deleted). Returns the events freed.
    pub fn purge(&mut self, window: &[u8]) -> Result<usize> {
        self.windows(&[window], WindowMode::Purge, &mut |_, _| {})
    }

    /// The reference count of `r` (0: not stored).
    pub fn count(&mut self, r: &Ref) -> Result<u32> {
        self.flush()?;
        let mut p = redis::pipe();
        p.cmd("GETRANGE").arg(key(&self.prefix, b"e:", r)).arg(0).arg(3);
        let (v,): (Vec<u8>,) = self.conn.run(&p, "read")?;
        Ok(v.try_into().map(u32::from_le_bytes).unwrap_or(0))
    }

    /// Reads, takes or purges `windows` in three pipelined round trips whatever their
    /// number and length: `LRANGE` each list; `MGET` every distinct reference (all are
    /// checked before anything changes, so a damaged list changes nothing); then, unless
    /// reading, one `DEL` for the lists and the freed events and a `SETRANGE` of the count
    /// of each event still held. The read-then-write is safe because the lists under this
    /// prefix have one writer, this connection.
    fn windows(
        &mut self,
        windows: &[&[u8]],
        mode: WindowMode,
        visit: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<usize> {
        self.flush()?;
        if windows.is_empty() {
            return Ok(0);
        }
        let op = if mode == WindowMode::Read { "read" } else { "take" };
        let list_keys: Vec<Vec<u8>> = windows.iter().map(|w| key(&self.prefix, b"l:", w)).collect();
        let mut p = redis::pipe();
        for k in &list_keys {
            p.cmd("LRANGE").arg(k).arg(0).arg(-1);
        }
        let mut lists: Vec<Vec<Vec<u8>>> = self.conn.run(&p, op)?;
        if mode != WindowMode::Read {
            // A window named twice is empty the second time, as after a first take.
            let mut seen = hashbrown::HashSet::new();
            for (w, l) in windows.iter().zip(lists.iter_mut()) {
                if !seen.insert(*w) {
                    l.clear();
                }
            }
        }
        // Distinct references in first-seen order, with the uses the windows drop.
        let mut slot: hashbrown::HashMap<&[u8], usize> = hashbrown::HashMap::new();
        let mut distinct: Vec<(&[u8], u32)> = Vec::new();
        for (w, refs) in lists.iter().enumerate() {
            for r in refs {
                if r.len() != 16 {
                    return Err(super::bad_list(windows[w], "an element is not 16 bytes"));
                }
                let i = *slot.entry(&r[..]).or_insert_with(|| {
                    distinct.push((&r[..], 0));
                    distinct.len() - 1
                });
                distinct[i].1 += 1;
            }
        }
        let event_keys: Vec<Vec<u8>> =
            distinct.iter().map(|(r, _)| key(&self.prefix, b"e:", r)).collect();
        let values: Vec<Option<Vec<u8>>> = if event_keys.is_empty() {
            Vec::new()
        } else {
            let mut p = redis::pipe();
            p.cmd("MGET").arg(&event_keys);
            let (v,): (Vec<Option<Vec<u8>>>,) = self.conn.run(&p, op)?;
            v
        };
        for (w, refs) in lists.iter().enumerate() {
            for r in refs {
                match values.get(slot[&r[..]]) {
                    Some(Some(v)) if v.len() >= 4 => {}
                    _ => {
                        let r: Ref = r[..].try_into().expect("16 bytes");
                        return Err(super::dangling(windows[w], &r));
                    }
                }
            }
        }
        if mode != WindowMode::Purge {
            for (w, refs) in lists.iter().enumerate() {
                for r in refs {
                    let v = values[slot[&r[..]]].as_deref().expect("checked");
                    visit(w, &v[4..]);
                }
            }
        }
        if mode == WindowMode::Read {
            return Ok(0);
        }
        let mut p = redis::pipe();
        let mut dels: Vec<&[u8]> = list_keys.iter().map(Vec::as_slice).collect();
        for (i, (_, uses)) in distinct.iter().enumerate() {
            let v = values[i].as_deref().expect("checked");
            let count = u32::from_le_bytes(v[..4].try_into().expect("4 bytes"));
            match count.checked_sub(*uses).filter(|&c| c > 0) {
                None => dels.push(&event_keys[i]),
                Some(c) => {
                    p.cmd("SETRANGE").arg(&event_keys[i]).arg(0).arg(&c.to_le_bytes()[..]).ignore();
                }
            }
        }
        let freed = dels.len() - list_keys.len();
        p.cmd("DEL").arg(&dels).ignore();
        self.conn.run::<()>(&p, op)?;
        Ok(freed)
    }
}

/// What [`RedisSharedLists::windows`] does to the windows it reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WindowMode {
    Read,
    Take,
    Purge,
}

/// One copy of each event per window, natively in Redis: a list per window, `RPUSH` per
/// window an event belongs to, `LRANGE` + `DEL` when it fires. This is what N window
/// operators that each keep their own list state do, and the baseline of the shared
/// scheme. Appends are pipelined as in [`RedisSharedLists`].
pub struct RedisLists {
    conn: Conn,
    prefix: Vec<u8>,
    queue: redis::Pipeline,
    queued: usize,
}

impl RedisLists {
    /// Connects to `url` and clears every key under `spw:copies:<name>:`.
    pub fn connect(url: &str, name: &str) -> Result<RedisLists> {
        let prefix = format!("spw:copies:{name}:").into_bytes();
        let conn = Conn::open(url, &prefix)?;
        Ok(RedisLists { conn, prefix, queue: redis::pipe(), queued: 0 })
    }

    /// Queues one copy of `event` at the end of each list of `windows`.
    pub fn append_many(&mut self, windows: &[&[u8]], event: &[u8]) -> Result<()> {
        if windows.is_empty() {
            return Ok(());
        }
        for w in windows {
            self.queue.cmd("RPUSH").arg(key(&self.prefix, b"c:", w)).arg(event).ignore();
        }
        self.queued += 1;
        if self.queued >= PIPELINE_EVENTS {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends the queued appends.
    pub fn flush(&mut self) -> Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        self.conn.run::<()>(&self.queue, "append")?;
        self.queue.clear();
        self.queued = 0;
        Ok(())
    }

    /// Round trips to Redis so far.
    pub fn round_trips(&self) -> u64 {
        self.conn.round_trips
    }

    /// Fires and clears `windows` in one pipeline; `visit(i, event)` sees the events of
    /// `windows[i]` in append order.
    pub fn take_many(
        &mut self,
        windows: &[&[u8]],
        visit: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        self.flush()?;
        if windows.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        for w in windows {
            let k = key(&self.prefix, b"c:", w);
            p.cmd("LRANGE").arg(&k).arg(0).arg(-1).cmd("DEL").arg(&k).ignore();
        }
        let lists: Vec<Vec<Vec<u8>>> = self.conn.run(&p, "take")?;
        for (i, l) in lists.iter().enumerate() {
            for e in l {
                visit(i, e);
            }
        }
        Ok(())
    }
}
