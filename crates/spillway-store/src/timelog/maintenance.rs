//! Moving data down and out: memtable flushes into segments, merges of a partition's
//! segments, retiring obsolete segment files, and expiry of whole partitions.

use super::merge::MergeIter;
use super::segment::{segment_name, Segment, SegmentWriter};
use super::TimeLogStore;
use crate::error::{Error, Result};
use crate::manifest;
use std::path::PathBuf;

impl TimeLogStore {
    /// Flushes the largest memtables until they hold at most `target` bytes. Flushing
    /// down to half the share (not just under it) makes flushes come in batches, so
    /// segments are not made from a few records each.
    pub(super) fn flush_down(&mut self, target: u64) -> Result<()> {
        while self.mem_bytes > target {
            let largest = self
                .parts
                .iter()
                .enumerate()
                .flat_map(|(ns, ps)| ps.iter().map(move |(pid, p)| (p.mem.bytes, ns, *pid)))
                .filter(|(b, _, _)| *b > 0)
                .max();
            let Some((_, ns, pid)) = largest else { break };
            self.flush(ns, pid)?;
        }
        Ok(())
    }

    pub(super) fn apply_retention(&mut self) -> Result<()> {
        if let (Some(ret), Some(max)) = (self.topts.retention, self.max_time) {
            if max >= ret {
                self.expire_before(max - ret)?;
            }
        }
        Ok(())
    }

    /// Writes the memtable of partition `pid` of `ns` into a new segment (tombstones
    /// only when older segments may hold the key), then merges the partition's
    /// segments if there are too many.
    pub(super) fn flush(&mut self, ns: usize, pid: u64) -> Result<()> {
        let Some(part) = self.parts[ns].get(&pid) else { return Ok(()) };
        if part.mem.is_empty() {
            return Ok(());
        }
        let keep_tombstones = !part.segs.is_empty();
        let id = self.next_id;
        self.next_id += 1;
        let mut w = SegmentWriter::create(&*self.fs, &self.opts.dir, id, self.topts.block_size)?;
        let written = (|| {
            for (k, v) in &part.mem.map {
                if v.is_some() || keep_tombstones {
                    w.add(k, v.as_deref())?;
                }
            }
            Ok::<_, Error>(())
        })();
        let seg = match written {
            Ok(()) if w.records() > 0 => Some(self.finish_segment(w)?),
            Ok(()) => {
                self.discard(w.path().to_path_buf());
                None
            }
            Err(e) => {
                self.discard(w.path().to_path_buf());
                return Err(e);
            }
        };
        let part = self.parts[ns].get_mut(&pid).expect("partition");
        self.mem_bytes -= part.mem.bytes;
        part.mem = Default::default();
        if let Some(seg) = seg {
            self.index_bytes += seg.index_bytes();
            part.segs.push(seg);
        }
        if part.segs.len() > self.topts.max_segments {
            self.compact(ns, pid)?;
        } else if part.is_empty() {
            self.parts[ns].remove(&pid);
        }
        Ok(())
    }

    pub(super) fn finish_segment(&mut self, w: SegmentWriter) -> Result<Segment> {
        let path = w.path().to_path_buf();
        match w.finish() {
            Ok((seg, bytes)) => {
                self.core.stats.bytes_written += bytes;
                self.unpublished.insert(seg.id);
                Ok(seg)
            }
            Err(e) => {
                self.discard(path);
                Err(e)
            }
        }
    }

    /// Best-effort removal of a segment file that was never completed (recovery
    /// deletes it anyway: no manifest names it).
    pub(super) fn discard(&self, path: PathBuf) {
        let _ = self.fs.remove_file(&path);
    }

    /// Merges all segments of partition `pid` into one. The memtable is newer than
    /// every segment and holds its keys' only newer versions, so the merged segment
    /// needs no tombstones.
    pub(super) fn compact(&mut self, ns: usize, pid: u64) -> Result<()> {
        let Some(part) = self.parts[ns].get(&pid) else { return Ok(()) };
        let id = self.next_id;
        self.next_id += 1;
        let mut w = SegmentWriter::create(&*self.fs, &self.opts.dir, id, self.topts.block_size)?;
        let mut sources = Vec::new();
        part.sources(None, None, false, false, &mut sources);
        let mut reads = 0;
        let written = (|| {
            let mut m = MergeIter::new(sources, false)?;
            let r = (|| {
                while let Some((k, v)) = m.next_live()? {
                    w.add(&k, Some(&v))?;
                }
                Ok::<_, Error>(())
            })();
            reads = m.reads();
            r
        })();
        self.core.stats.disk_reads += reads;
        let seg = match written {
            Ok(()) if w.records() > 0 => Some(self.finish_segment(w)?),
            Ok(()) => {
                self.discard(w.path().to_path_buf());
                None
            }
            Err(e) => {
                self.discard(w.path().to_path_buf());
                return Err(e);
            }
        };
        let part = self.parts[ns].get_mut(&pid).expect("partition");
        let old = std::mem::take(&mut part.segs);
        let old_bytes: u64 = old.iter().map(|s| s.file_len).sum();
        let new_bytes = seg.as_ref().map_or(0, |s| s.file_len);
        if let Some(seg) = seg {
            self.index_bytes += seg.index_bytes();
            part.segs.push(seg);
        }
        if part.is_empty() {
            self.parts[ns].remove(&pid);
        }
        self.core.stats.compactions += 1;
        self.core.stats.compacted_bytes += old_bytes.saturating_sub(new_bytes);
        for s in old {
            self.retire(s)?;
        }
        Ok(())
    }

    /// Forgets a segment that is no longer live: its file goes now if no checkpoint
    /// names it, else at the first checkpoint that no longer retains it.
    pub(super) fn retire(&mut self, seg: Segment) -> Result<()> {
        self.index_bytes -= seg.index_bytes();
        if self.unpublished.remove(&seg.id) {
            let name = segment_name(seg.id);
            drop(seg);
            manifest::remove_quiet(&*self.fs, &self.opts.dir, &name)?;
        }
        Ok(())
    }

    /// Removes partition `pid` of `ns` with its memtable and segments.
    pub(super) fn drop_partition(&mut self, ns: usize, pid: u64) -> Result<()> {
        if let Some(part) = self.parts[ns].remove(&pid) {
            self.mem_bytes -= part.mem.bytes;
            for s in part.segs {
                self.retire(s)?;
            }
        }
        Ok(())
    }

    /// Drops every partition, in every namespace, whose whole time span lies below `t`
    /// (files and memtable, no compaction pass), and returns how many it dropped. The
    /// keys in them disappear: this is expiry, not a delete the contract describes.
    /// Partitions wholly below `t` are those numbered below `t / partition_span`.
    pub fn expire_before(&mut self, t: u64) -> Result<u64> {
        self.check_writable()?;
        let limit = t / self.topts.span;
        let r = (|| {
            let mut dropped = 0;
            for ns in 0..self.parts.len() {
                let old: Vec<u64> = self.parts[ns].range(..limit).map(|(p, _)| *p).collect();
                for pid in old {
                    self.drop_partition(ns, pid)?;
                    dropped += 1;
                }
            }
            Ok(dropped)
        })();
        self.poison(r)
    }
}
