//! MemStore: every namespace is a hash map in memory (the equivalent of Flink's heap
//! state backend), or an ordered map (B-tree) when the namespace declares
//! [`AccessHint::Range`](crate::AccessHint): those serve ordered scans, cursors and
//! `delete_range`. Checkpoints write a full snapshot file.
//!
//! FORMAT: `snapshot-<seq>.mem` is a [block file](crate::blockfile) (magic `SWMEMSNP`,
//! version 1) whose frames hold records `ns u16 | key_len u32 | value_len u32 | key |
//! value`, batched up to 1 MiB per frame (a block-file frame holds at most 64 MiB, so
//! an entry's key and value together are at most [`MAX_ENTRY_LEN`] bytes). The manifest `MANIFEST-<seq>` names it under
//! `snapshot=`. Checkpoint protocol: write the snapshot under a temporary name, fsync,
//! rename; then publish the manifest the same way; then delete snapshots and manifests
//! older than the previous one. Recovery loads the newest manifest's snapshot.
//!
//! Memory: the store counts key and value bytes plus a fixed per-entry overhead of
//! [`ENTRY_OVERHEAD`] bytes and refuses writes that would exceed its budget.
//!
//! Limits: keys up to [`MAX_KEY_LEN`](crate::MAX_KEY_LEN), and key plus value up to
//! [`MAX_ENTRY_LEN`] (so that every entry fits one snapshot frame), checked when the
//! value is written ([`Error::ValueTooLarge`]), never first at the checkpoint.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use hashbrown::HashMap;

use crate::backend::StoreCore;
use crate::blockfile::{publish, BlockReader, BlockWriter, Cursor, MAX_FRAME};
use crate::error::{Error, Result};
use crate::io::{join, Fs};
use crate::manifest::{self, Manifest};
use crate::{
    check_key, check_value, CheckpointInfo, Ns, Order, Rmw, RmwFn, StateStore, StoreOptions,
    StoreStats, Visitor, MAX_VALUE_LEN,
};

const SNAP_MAGIC: [u8; 8] = *b"SWMEMSNP";
const FORMAT_VERSION: u32 = 1;
/// Bytes charged per entry on top of its key and value (hash slot, two heap headers).
pub const ENTRY_OVERHEAD: u64 = 64;
const FRAME_TARGET: usize = 1 << 20;
/// Bytes of a snapshot record before its key: namespace u16, key and value lengths.
const RECORD_HDR: usize = 10;
/// Longest key plus value of one entry, in bytes (64 MiB less a snapshot record
/// header): an entry is one record of a snapshot frame. Larger values, and list
/// merges that would grow past it, are refused with [`Error::ValueTooLarge`].
pub const MAX_ENTRY_LEN: usize = crate::blockfile::MAX_FRAME - RECORD_HDR;

/// Keys up to this long live inside the map's slot.
const INLINE_KEY: usize = 22;

/// A key as the maps hold it: short keys (most state keys: ids, window keys, 16-byte
/// references) inline in the slot, so a lookup compares them without chasing a pointer
/// to a separate allocation (one cache miss less per probe); longer ones boxed. It
/// hashes, compares and orders as the `[u8]` it holds, so maps are queried by `&[u8]`.
#[derive(Clone)]
enum MemKey {
    Inline { len: u8, buf: [u8; INLINE_KEY] },
    Heap(Box<[u8]>),
}

impl From<&[u8]> for MemKey {
    fn from(k: &[u8]) -> MemKey {
        if k.len() <= INLINE_KEY {
            let mut buf = [0u8; INLINE_KEY];
            buf[..k.len()].copy_from_slice(k);
            MemKey::Inline { len: k.len() as u8, buf }
        } else {
            MemKey::Heap(k.into())
        }
    }
}

impl std::ops::Deref for MemKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            MemKey::Inline { len, buf } => &buf[..*len as usize],
            MemKey::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for MemKey {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl std::hash::Hash for MemKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        <[u8] as std::hash::Hash>::hash(self, h)
    }
}

impl PartialEq for MemKey {
    fn eq(&self, other: &MemKey) -> bool {
        **self == **other
    }
}

impl Eq for MemKey {}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &MemKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MemKey {
    fn cmp(&self, other: &MemKey) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

/// One namespace's map: hashed, or ordered when the namespace asks for range reads.
enum NsMap {
    Hash(HashMap<MemKey, Vec<u8>>),
    Tree(BTreeMap<MemKey, Vec<u8>>),
}

impl NsMap {
    fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        match self {
            NsMap::Hash(m) => m.get(key),
            NsMap::Tree(m) => m.get(key),
        }
    }

    fn get_mut(&mut self, key: &[u8]) -> Option<&mut Vec<u8>> {
        match self {
            NsMap::Hash(m) => m.get_mut(key),
            NsMap::Tree(m) => m.get_mut(key),
        }
    }

    fn insert(&mut self, key: MemKey, value: Vec<u8>) {
        match self {
            NsMap::Hash(m) => m.insert(key, value),
            NsMap::Tree(m) => m.insert(key, value),
        };
    }

    fn remove_entry(&mut self, key: &[u8]) -> Option<(MemKey, Vec<u8>)> {
        match self {
            NsMap::Hash(m) => m.remove_entry(key),
            NsMap::Tree(m) => m.remove_entry(key),
        }
    }

    fn len(&self) -> usize {
        match self {
            NsMap::Hash(m) => m.len(),
            NsMap::Tree(m) => m.len(),
        }
    }

    /// Bytes of the map's own structure (slots or tree nodes), an estimate.
    fn structure_bytes(&self) -> u64 {
        match self {
            NsMap::Hash(m) => (m.capacity() * 40) as u64,
            NsMap::Tree(m) => (m.len() * 48) as u64,
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            NsMap::Hash(m) => Box::new(m.iter().map(|(k, v)| (&k[..], &v[..]))),
            NsMap::Tree(m) => Box::new(m.iter().map(|(k, v)| (&k[..], &v[..]))),
        }
    }
}

/// The in-memory hash-map store. See the [module docs](self).
pub struct MemStore {
    opts: StoreOptions,
    fs: Arc<dyn Fs>,
    maps: Vec<NsMap>,
    bytes: u64,
    core: StoreCore,
    scratch: Vec<u8>,
}

fn entry_cost(key: usize, value: usize) -> u64 {
    (key + value) as u64 + ENTRY_OVERHEAD
}

/// Largest value an entry with a key of `klen` bytes may hold.
fn max_value(klen: usize) -> usize {
    MAX_ENTRY_LEN.saturating_sub(klen).min(MAX_VALUE_LEN)
}

impl MemStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one; its
    /// files go through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, fs)
    }

    /// Like [`open`](Self::open), doing all file I/O through `fs`.
    pub fn open_with_fs(opts: StoreOptions, fs: Arc<dyn Fs>) -> Result<Self> {
        opts.validate()?;
        opts.refuse_direct_io("mem")?;
        manifest::init_dir(&*fs, &opts.dir, "mem", FORMAT_VERSION)?;
        let mut store = MemStore {
            maps: opts
                .namespaces
                .iter()
                .map(|n| {
                    if n.wants_order() {
                        NsMap::Tree(BTreeMap::new())
                    } else {
                        NsMap::Hash(HashMap::new())
                    }
                })
                .collect(),
            fs,
            bytes: 0,
            core: StoreCore::new(opts.memory_budget),
            scratch: Vec::new(),
            opts,
        };
        let retained = manifest::list_manifests(&*store.fs, &store.opts.dir)?;
        if let Some(seq) = store.opts.checkpoint_to_recover(&retained)? {
            store.recover(seq)?;
        }
        manifest::discard_newer(&*store.fs, &store.opts.dir, &retained, store.core.seq)?;
        Ok(store)
    }

    fn recover(&mut self, seq: u64) -> Result<()> {
        let dir = self.opts.dir.clone();
        let m = manifest::read_manifest(&*self.fs, &dir, seq)?;
        m.check_namespaces(&self.opts)?;
        let mpath = join(&dir, &manifest::manifest_name(seq));
        let name = m.get_str(&mpath, "snapshot")?;
        let numbered = name.strip_prefix("snapshot-").and_then(|n| n.strip_suffix(".mem"));
        if !numbered.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            let what = "manifest: snapshot is not a snapshot-<seq>.mem file name";
            return Err(Error::corrupt(&mpath, m.offset_of("snapshot"), what));
        }
        let path = join(&dir, name);
        let mut r = BlockReader::open(&*self.fs, &path, SNAP_MAGIC, FORMAT_VERSION)?;
        let mut frame = Vec::new();
        while r.next(&mut frame)? {
            let mut c = Cursor::new(&frame, r.path(), r.payload_offset());
            while !c.is_empty() {
                let at = c.offset();
                let ns = c.u16()? as usize;
                let klen = c.u32()? as usize;
                let vlen = c.u32()? as usize;
                let key = c.bytes(klen)?;
                let value = c.bytes(vlen)?;
                if ns >= self.maps.len() {
                    return Err(Error::corrupt(&path, at, format!("record names namespace {ns}")));
                }
                if klen > crate::MAX_KEY_LEN || klen + vlen > MAX_ENTRY_LEN {
                    return Err(Error::corrupt(&path, at, "record exceeds the entry limits"));
                }
                if self.maps[ns].get(key).is_some() {
                    return Err(Error::corrupt(&path, at, "key recorded twice in the snapshot"));
                }
                // Checked per record, so a snapshot larger than the budget is refused
                // before it is all in memory.
                self.check_budget(entry_cost(klen, vlen))?;
                self.bytes += entry_cost(klen, vlen);
                self.maps[ns].insert(key.into(), value.to_vec());
            }
        }
        self.core.seq = seq;
        Ok(())
    }

    fn check_writable(&self) -> Result<()> {
        self.core.writable()
    }

    fn check_budget(&self, extra: u64) -> Result<()> {
        let needed = self.bytes + extra;
        if needed > self.opts.memory_budget {
            return Err(Error::BudgetTooSmall {
                budget: self.opts.memory_budget,
                needed,
                what: "the in-memory state of the mem store".into(),
            });
        }
        Ok(())
    }

    fn set(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        check_value(value.len(), max_value(key.len()))?;
        let map = &mut self.maps[ns.index()];
        match map.get_mut(key) {
            Some(v) => {
                let extra = value.len().saturating_sub(v.len()) as u64;
                let needed = self.bytes + extra;
                if needed > self.opts.memory_budget {
                    return Err(Error::BudgetTooSmall {
                        budget: self.opts.memory_budget,
                        needed,
                        what: "the in-memory state of the mem store".into(),
                    });
                }
                self.bytes = self.bytes + value.len() as u64 - v.len() as u64;
                v.clear();
                v.extend_from_slice(value);
                self.core.stats.in_place_updates += 1;
            }
            None => {
                self.check_budget(entry_cost(key.len(), value.len()))?;
                self.bytes += entry_cost(key.len(), value.len());
                self.maps[ns.index()].insert(key.into(), value.to_vec());
            }
        }
        Ok(())
    }

    /// One read-modify-write once the store, namespace and key are checked.
    fn rmw_checked(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        // An existing key is looked up once: read, decide and swap the new value in
        // through the same slot.
        let r = if let Some(v) = self.maps[ns.index()].get_mut(key) {
            match f(Some(&v[..]), &mut out) {
                Rmw::Put => {
                    let needed = self.bytes + out.len().saturating_sub(v.len()) as u64;
                    if let Err(e) = check_value(out.len(), max_value(key.len())) {
                        Err(e)
                    } else if needed > self.opts.memory_budget {
                        Err(Error::BudgetTooSmall {
                            budget: self.opts.memory_budget,
                            needed,
                            what: "the in-memory state of the mem store".into(),
                        })
                    } else {
                        // The new value moves into the map (no copy); the old buffer
                        // becomes scratch.
                        self.bytes = self.bytes + out.len() as u64 - v.len() as u64;
                        std::mem::swap(v, &mut out);
                        self.core.stats.in_place_updates += 1;
                        Ok(())
                    }
                }
                Rmw::Delete => {
                    self.remove(ns, key);
                    Ok(())
                }
                Rmw::Keep => Ok(()),
            }
        } else {
            match f(None, &mut out) {
                // Known absent: insert without a second lookup.
                Rmw::Put => check_value(out.len(), max_value(key.len()))
                    .and_then(|()| self.check_budget(entry_cost(key.len(), out.len())))
                    .map(|()| {
                        self.bytes += entry_cost(key.len(), out.len());
                        let v = std::mem::take(&mut out);
                        self.maps[ns.index()].insert(key.into(), v);
                    }),
                Rmw::Delete | Rmw::Keep => Ok(()),
            }
        };
        self.scratch = out;
        r
    }

    fn remove(&mut self, ns: Ns, key: &[u8]) {
        if let Some((k, v)) = self.maps[ns.index()].remove_entry(key) {
            self.bytes -= entry_cost(k.len(), v.len());
        }
    }

    fn ns_ok(&self, ns: Ns) -> Result<()> {
        if ns.index() >= self.maps.len() {
            return Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) });
        }
        Ok(())
    }

    fn write_checkpoint(&mut self, seq: u64) -> Result<()> {
        let dir = self.opts.dir.clone();
        let name = format!("snapshot-{seq:016}.mem");
        let tmp = join(&dir, &format!("{name}.tmp"));
        let mut w = BlockWriter::create(&*self.fs, &tmp, SNAP_MAGIC, FORMAT_VERSION)?;
        let mut frame = Vec::with_capacity(FRAME_TARGET + 1024);
        for (ns, map) in self.maps.iter().enumerate() {
            for (k, v) in map.iter() {
                // Writes bound an entry to MAX_ENTRY_LEN, so a record always fits a frame.
                if frame.len() + RECORD_HDR + k.len() + v.len() > MAX_FRAME {
                    w.frame(&frame)?;
                    frame.clear();
                }
                frame.extend_from_slice(&(ns as u16).to_le_bytes());
                frame.extend_from_slice(&(k.len() as u32).to_le_bytes());
                frame.extend_from_slice(&(v.len() as u32).to_le_bytes());
                frame.extend_from_slice(k);
                frame.extend_from_slice(v);
                if frame.len() >= FRAME_TARGET {
                    w.frame(&frame)?;
                    frame.clear();
                }
            }
        }
        if !frame.is_empty() {
            w.frame(&frame)?;
        }
        self.core.stats.bytes_written += w.finish()?;
        publish(&*self.fs, &dir, &tmp, &join(&dir, &name))?;
        let mut m = Manifest::new(seq, "mem", &self.opts);
        m.set("snapshot", &name);
        manifest::write_manifest(&*self.fs, &dir, &m)?;
        manifest::drop_older_checkpoints(&*self.fs, &dir, seq, |old| {
            manifest::remove_quiet(&*self.fs, &dir, &format!("snapshot-{old:016}.mem"))
        })
    }
}

impl StateStore for MemStore {
    fn name(&self) -> &'static str {
        "mem"
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.core.readable()?;
        self.ns_ok(ns)?;
        self.core.stats.gets += 1;
        out.clear();
        match self.maps[ns.index()].get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        self.core.stats.puts += 1;
        self.set(ns, key, value)
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        self.core.stats.merges += 1;
        let op = self.opts.namespaces[ns.index()].merge.clone();
        if let crate::MergeOp::ListAppend = op {
            if let Some(v) = self.maps[ns.index()].get_mut(key) {
                let add = crate::list::framed_len(operand);
                check_value(v.len() + add, max_value(key.len()))?;
                let needed = self.bytes + add as u64;
                if needed > self.opts.memory_budget {
                    return Err(Error::BudgetTooSmall {
                        budget: self.opts.memory_budget,
                        needed,
                        what: "the in-memory state of the mem store".into(),
                    });
                }
                crate::list::push(v, operand);
                self.bytes += add as u64;
                self.core.stats.in_place_updates += 1;
                return Ok(());
            }
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        op.apply(self.maps[ns.index()].get(key).map(|v| &v[..]), operand, &mut out);
        let r = self.set(ns, key, &out);
        self.scratch = out;
        r
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        self.core.stats.deletes += 1;
        self.remove(ns, key);
        Ok(())
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        check_key(key)?;
        self.core.stats.rmws += 1;
        self.rmw_checked(ns, key, f)
    }

    fn is_ordered(&self, ns: Ns) -> bool {
        matches!(self.maps.get(ns.index()), Some(NsMap::Tree(_)))
    }

    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.core.readable()?;
        self.ns_ok(ns)?;
        let hint = "this namespace is a hash map; declare it with AccessHint::Range to keep it \
                    ordered";
        self.core.stats.scans += 1;
        match &self.maps[ns.index()] {
            NsMap::Hash(m) => {
                order.unordered("mem", hint)?;
                let mut n = 0;
                for (k, v) in m {
                    if n == limit {
                        break;
                    }
                    if crate::in_bounds(k, start, end) {
                        n += 1;
                        if !visit(k, v) {
                            break;
                        }
                    }
                }
                Ok(n)
            }
            NsMap::Tree(m) => {
                if !crate::bounds_nonempty(start, end) {
                    return Ok(0);
                }
                let range = m.range::<[u8], _>((start, end)).map(|(k, v)| (&k[..], &v[..]));
                Ok(crate::cursor::visit_ordered(range, order.direction(), limit, visit))
            }
        }
    }

    fn delete_range(&mut self, ns: Ns, start: &[u8], end: &[u8]) -> Result<u64> {
        self.check_writable()?;
        self.ns_ok(ns)?;
        let NsMap::Tree(m) = &mut self.maps[ns.index()] else {
            return Err(Error::Unsupported {
                store: "mem",
                op: "delete_range",
                hint: "this namespace is a hash map; declare it with AccessHint::Range to \
                       keep it ordered",
            });
        };
        if start >= end {
            return Ok(0);
        }
        let keys: Vec<MemKey> = m
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.remove(ns, k);
        }
        self.core.stats.deletes += keys.len() as u64;
        Ok(keys.len() as u64)
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        crate::backend::checkpoint(self, |s| &mut s.core, MemStore::write_checkpoint)
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.core.stats();
        s.bytes_in_memory = self.bytes;
        s.index_bytes = self.maps.iter().map(NsMap::structure_bytes).sum();
        s.live_keys = Some(self.maps.iter().map(|m| m.len() as u64).sum());
        s.bytes_on_disk = crate::io::dir_bytes(&self.opts.dir);
        s
    }
}
