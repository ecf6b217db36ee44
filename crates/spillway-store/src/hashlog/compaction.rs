//! Log maintenance after each write: moving the read-only and head marks, and the
//! incremental compaction that copies a segment's live records to the tail and drops
//! dead segments.

use super::*;

pub(super) struct Compaction {
    pub(super) until: u64,
    pub(super) cursor: u64,
    pub(super) page: u64,
    pub(super) used: usize,
    pub(super) buf: Vec<u8>,
}

impl HashLogStore {
    /// After a compaction pass: deletes the segment files wholly below both the log's
    /// beginning and the beginning of every retained checkpoint, so the log's disk
    /// footprint stays bounded between checkpoints too.
    pub(super) fn drop_dead_segments(&mut self) -> Result<()> {
        let limit = self.log.begin.min(self.checkpoint_begin);
        let first_live = self.log.segment_of(limit);
        let dir = self.opts.dir.clone();
        for seg in self.lowest_segment..first_live {
            manifest::remove_quiet(&*self.fs, &dir, &log::segment_name(seg))?;
        }
        self.lowest_segment = self.lowest_segment.max(first_live);
        self.log.forget_segments_below(limit);
        Ok(())
    }

    /// Background work in bounded steps, one per write: moving index buckets of a
    /// doubling under way, copying buckets of a fuzzy index snapshot, and a compaction
    /// step if a pass is due or under way.
    pub(super) fn maintain(&mut self) -> Result<()> {
        if self.index.growing() && self.index.grow_step(GROW_STEP_BUCKETS) {
            self.size_frames()?; // the old arrays are gone: pages may use their memory
            if self.snapshot_wanted {
                self.start_snapshot()?;
            }
        }
        if let Some(s) = &mut self.snapshot {
            s.step(&self.index, self.hopts.snapshot_step)?;
            self.core.stats.bytes_written += s.new_bytes();
        }
        if self.compaction.is_none() {
            let size = self.log.tail - self.log.begin;
            let page = self.log.page_size as u64;
            let until = self.log.read_only & !(page - 1);
            if size > 4 * page
                && self.garbage as f64 > self.hopts.garbage_ratio * size as f64
                && until > self.log.begin
            {
                self.compaction = Some(Compaction {
                    until,
                    cursor: self.log.begin,
                    page: 0,
                    used: 0,
                    buf: Vec::new(),
                });
            } else {
                return Ok(());
            }
        }
        self.compaction_step()
    }

    pub(super) fn compaction_step(&mut self) -> Result<()> {
        let Some(mut c) = self.compaction.take() else { return Ok(()) };
        let page_bits = self.log.page_bits;
        let mask = (1u64 << page_bits) - 1;
        let mut done = 0usize;
        while done < self.hopts.compaction_step && c.cursor < c.until {
            let p = c.cursor >> page_bits;
            if c.page != p || c.buf.is_empty() {
                c.used = self.log.read_page(p, &mut c.buf)?;
                c.page = p;
                if ((c.cursor & mask) as usize) < PAGE_HDR {
                    c.cursor = (p << page_bits) + PAGE_HDR as u64;
                }
                done += PAGE_HDR;
            }
            let off = (c.cursor & mask) as usize;
            if off >= c.used {
                c.cursor = (p + 1) << page_bits;
                continue;
            }
            let Some(r) = rec_within(&c.buf[off..c.used]) else {
                let (path, off) = self.log.file_offset(c.cursor);
                return Err(Error::corrupt(path, off, "record overruns its page"));
            };
            let size = r.size();
            let ns = r.ns();
            let h = hash(ns, r.key());
            if let Some(slot) = self.index.find_addr(h, c.cursor) {
                let (key, value) = (r.key(), r.value());
                let size_new = record_size(key.len(), value.len());
                let a = self.log.alloc(size_new)?;
                write_record(self.log.mem_mut(a), ns, key, value, value.len());
                self.index.set(slot, a);
            } else {
                self.garbage = self.garbage.saturating_sub(size as u64);
                self.core.stats.compacted_bytes += size as u64;
            }
            c.cursor += size as u64;
            done += size;
        }
        self.log.begin = c.cursor.min(c.until);
        if c.cursor >= c.until {
            self.log.begin = c.until;
            self.core.stats.compactions += 1;
            self.drop_dead_segments()?;
        } else {
            self.compaction = Some(c);
        }
        Ok(())
    }
}
