//! Recovery of the index: the loaded snapshot cleaned, then the log replayed from the
//! snapshot's start to the checkpoint's tail (the argument that this is exact is in
//! the checkpoint protocol of [`super`]).

use std::path::Path;

use super::index::Slot;
use super::record::{rec_within, PAGE_HDR};
use super::{hash, HashLogStore};
use crate::error::{Error, Result};

impl HashLogStore {
    /// Brings the index loaded from a snapshot taken from log address `from` to the
    /// state of the checkpoint: drops stale entries, replays the records from
    /// `max(from, begin)` to the tail in log order, and checks the number of keys
    /// against the manifest's `keys`. `snap` names the snapshot and `mpath` the manifest
    /// for errors.
    pub(super) fn recover_index(
        &mut self,
        from: u64,
        keys: u64,
        snap: &Path,
        mpath: &Path,
    ) -> Result<()> {
        let (begin, tail) = (self.log.begin, self.log.tail);
        self.index.clean_loaded(begin, tail).map_err(|e| Error::corrupt(snap, 16, e))?;
        let page_bits = self.log.page_bits;
        let mask = (1u64 << page_bits) - 1;
        let mut a = from.max(begin);
        let mut buf = std::mem::take(&mut self.scan_buf);
        let mut slots = Vec::new();
        let r = (|| {
            while a < tail && (a >> page_bits) < self.log.tail_page() {
                let p = a >> page_bits;
                let used = self.log.read_page(p, &mut buf)?;
                let mut off = ((a & mask) as usize).max(PAGE_HDR);
                while off < used {
                    let addr = (p << page_bits) + off as u64;
                    let Some(r) = rec_within(&buf[off..used]) else {
                        let (path, off) = self.log.file_offset(addr);
                        return Err(Error::corrupt(path, off, "record overruns its page"));
                    };
                    let size = r.size();
                    if usize::from(r.ns()) >= self.merges.len() {
                        let (path, off) = self.log.file_offset(addr);
                        return Err(Error::corrupt(path, off, "record of an unknown namespace"));
                    }
                    let key = r.key();
                    self.replay_record(r.ns(), key, r.is_tombstone(), addr, &mut slots)?;
                    off += size;
                }
                a = (p + 1) << page_bits;
            }
            Ok(())
        })();
        if buf.capacity() <= self.log.page_size {
            self.scan_buf = buf;
        }
        r?;
        if self.index.count != keys {
            return Err(Error::corrupt(
                mpath,
                16,
                format!(
                    "recovery found {} keys, the checkpoint recorded {keys} (index {} and log \
                     disagree)",
                    self.index.count,
                    snap.display()
                ),
            ));
        }
        Ok(())
    }

    /// Applies one logged record to the index: every entry whose record has the same
    /// key is dropped, then a value record gets an entry at `addr` (reusing the first
    /// such slot). A fuzzy snapshot can hold two entries for one key (the key was
    /// deleted and inserted again in another slot of its chain while the snapshot ran),
    /// so the search does not stop at the first match.
    fn replay_record(
        &mut self,
        ns: u16,
        key: &[u8],
        tombstone: bool,
        addr: u64,
        slots: &mut Vec<Slot>,
    ) -> Result<()> {
        let h = hash(ns, key);
        slots.clear();
        let mut p = self.index.probe(h);
        while let Some((slot, cand)) = self.index.next(&mut p) {
            if cand < self.log.begin {
                continue; // stale; none are left after clean_loaded
            }
            self.log.load(cand)?;
            let r = self.log.view(cand);
            if r.ns() == ns && r.key() == key {
                slots.push(slot);
            }
        }
        let keep = if tombstone { None } else { slots.first().copied() };
        for &s in slots.iter().skip(usize::from(keep.is_some())) {
            self.index.remove(s);
        }
        if tombstone {
            return Ok(());
        }
        match keep {
            Some(s) => self.index.set(s, addr),
            None => {
                let cost = self.reserve_index_entry(h)?;
                self.index.insert(h, addr);
                if self.index.growing() {
                    self.index.grow_step(usize::MAX);
                    self.size_frames()?;
                } else if cost > 0 {
                    self.size_frames()?;
                }
            }
        }
        Ok(())
    }
}
