//! Walks over the log: a whole scan within key bounds, and the resumable bounded
//! step of `scan_step`.

use super::*;

impl HashLogStore {
    /// Walks the live records of `ns` within the bounds from the log's beginning to its
    /// tail, visiting at most `limit`; returns how many it visited.
    pub(super) fn walk(
        &mut self,
        ns: u16,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        let page_bits = self.log.page_bits;
        let mut buf = std::mem::take(&mut self.scan_buf);
        self.scan_buf_page = None;
        let mut p = self.log.begin >> page_bits;
        let last = self.log.tail_page();
        let begin = self.log.begin;
        let mut n = 0;
        let result = (|| {
            while p <= last && n < limit {
                let used = self.log.read_page(p, &mut buf)?;
                let mut off = PAGE_HDR;
                while off < used {
                    let addr = (p << page_bits) + off as u64;
                    let Some(r) = rec_within(&buf[off..used]) else {
                        let (path, off) = self.log.file_offset(addr);
                        return Err(Error::corrupt(path, off, "record overruns its page"));
                    };
                    let size = r.size();
                    if addr >= begin
                        && r.ns() == ns
                        && crate::in_bounds(r.key(), start, end)
                        && self.index.find_addr(hash(ns, r.key()), addr).is_some()
                    {
                        n += 1;
                        if !visit(r.key(), r.value()) || n == limit {
                            return Ok(());
                        }
                    }
                    off += size;
                }
                p += 1;
            }
            Ok(())
        })();
        if buf.capacity() <= self.log.page_size {
            self.scan_buf = buf;
        }
        result.map(|()| n)
    }

    /// One bounded step of a walk over the live records of `ns` in log order: visits
    /// up to `limit` of them from log address `from` (0: the log's beginning) and
    /// returns the address to continue from, or `None` once the walk reached the tail.
    /// In-memory pages are read in place; an on-disk page is read once into the scan
    /// buffer and kept there for the next step. A record rewritten at the tail during
    /// the walk is visited at its new address (its old copy is dead), so every record
    /// that is live throughout the walk is visited exactly once.
    pub(super) fn walk_step(
        &mut self,
        ns: u16,
        from: u64,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<u64>> {
        let page_bits = self.log.page_bits;
        let mask = (1u64 << page_bits) - 1;
        let mut a = from.max(self.log.begin);
        let mut visited = 0usize;
        let mut stopped = false;
        while visited < limit && !stopped {
            if a >= self.log.tail {
                return Ok(None);
            }
            let p = a >> page_bits;
            let mut off = ((a & mask) as usize).max(PAGE_HDR);
            let in_memory = (p << page_bits) >= self.log.head();
            let used = if in_memory {
                if p == self.log.tail_page() {
                    (self.log.tail & mask) as usize
                } else {
                    record::u32_at(self.log.mem(p << page_bits), 16) as usize
                }
            } else {
                if self.scan_buf_page != Some(p) {
                    let mut buf = std::mem::take(&mut self.scan_buf);
                    self.scan_buf_page = None;
                    let r = self.log.read_page(p, &mut buf);
                    self.scan_buf = buf;
                    r?;
                    self.scan_buf_page = Some(p);
                }
                self.scan_buf.len()
            };
            while off < used && visited < limit && !stopped {
                let page: &[u8] =
                    if in_memory { self.log.mem(p << page_bits) } else { &self.scan_buf };
                let addr = (p << page_bits) + off as u64;
                let Some(r) = page.get(off..used).and_then(rec_within) else {
                    let (path, off) = self.log.file_offset(addr);
                    return Err(Error::corrupt(path, off, "record overruns its page"));
                };
                let size = r.size();
                off += size;
                if r.ns() == ns && self.index.find_addr(hash(ns, r.key()), addr).is_some() {
                    visited += 1;
                    stopped = !visit(r.key(), r.value());
                }
            }
            a = if off >= used { (p + 1) << page_bits } else { (p << page_bits) + off as u64 };
        }
        Ok((a < self.log.tail).then_some(a))
    }
}
