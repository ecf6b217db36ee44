//! The [`StateStore`] contract served by the hybrid log: point operations,
//! batches with overlapped cache misses, scans, checkpoints and stats.

use super::*;

impl StateStore for HashLogStore {
    fn name(&self) -> &'static str {
        "hashlog"
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn is_ordered(&self, _: Ns) -> bool {
        false
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.core.readable()?;
        let ns = self.ns_id(ns)?;
        self.core.stats.gets += 1;
        out.clear();
        let r = self.find(ns, key, hash(ns, key));
        match self.poison(r)? {
            Some((_, addr)) => {
                out.extend_from_slice(self.log.view(addr).value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_with_capacity(ns, key, value, value.len())
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        self.check_writable()?;
        let nsid = self.ns_id(ns)?;
        check_key(key)?;
        self.core.stats.merges += 1;
        let h = hash(nsid, key);
        let max = self.limit(nsid, key.len());
        let r = (|| {
            let found = self.find(nsid, key, h)?;
            let op = &self.merges[nsid as usize];
            match op {
                MergeOp::ListAppend => {
                    let add = crate::list::framed_len(operand);
                    let old_len = found.map_or(0, |(_, a)| self.log.view(a).vlen());
                    crate::check_value(old_len + add, max)?;
                    if let Some((_, addr)) = found {
                        if addr >= self.log.read_only {
                            let rec = self.log.mem_mut(addr);
                            let (klen, vlen, cap) = {
                                let r = Rec(rec);
                                (r.klen(), r.vlen(), r.vcap())
                            };
                            if vlen + add <= cap {
                                crate::list::put(&mut rec[REC_HDR + klen + vlen..], operand);
                                record::put_u32(rec, 12, (vlen + add) as u32);
                                self.core.stats.in_place_updates += 1;
                                return self.maintain();
                            }
                        }
                    }
                    self.scratch.clear();
                    if let Some((_, a)) = found {
                        self.scratch.extend_from_slice(self.log.view(a).value());
                    }
                    crate::list::push(&mut self.scratch, operand);
                    let vcap = if found.is_some() {
                        (2 * self.scratch.len()).min(max)
                    } else {
                        self.scratch.len()
                    };
                    self.upsert(nsid, key, h, found, ValueSrc::Scratch, vcap)?;
                }
                MergeOp::Function { f, .. } => {
                    self.scratch.clear();
                    let old = found.map(|(_, a)| self.log.view(a).value());
                    f(old, operand, &mut self.scratch);
                    crate::check_value(self.scratch.len(), max)?;
                    let len = self.scratch.len();
                    self.upsert(nsid, key, h, found, ValueSrc::Scratch, len)?;
                }
            }
            self.maintain()
        })();
        self.poison(r)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        self.check_writable()?;
        let ns = self.ns_id(ns)?;
        self.core.stats.deletes += 1;
        let r = (|| {
            let found = self.find(ns, key, hash(ns, key))?;
            self.remove_found(ns, key, found)?;
            self.maintain()
        })();
        self.poison(r)
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        self.check_writable()?;
        let nsid = self.ns_id(ns)?;
        self.rmw_hashed(nsid, key, hash(nsid, key), f)
    }

    fn prefetch(&mut self, keys: &[(Ns, &[u8])]) {
        for chunk in keys.chunks(BATCH) {
            let mut hashes = [0u64; BATCH];
            for (h, (ns, key)) in hashes.iter_mut().zip(chunk) {
                *h = hash(ns.0, key);
            }
            self.prefetch_hashes(&hashes[..chunk.len()]);
        }
    }

    /// The batch hashes and prefetches `BATCH` (32) operations at a time, so that their
    /// index and record misses overlap, then applies them in order; a `Get` hands the
    /// closure the value where it lies in the log (no copy).
    fn apply_batch(&mut self, ops: &[BatchOp<'_>], f: &mut MultiRmwFn<'_>) -> Result<()> {
        self.core.readable()?;
        let mut unused = Vec::new();
        for (c, chunk) in ops.chunks(BATCH).enumerate() {
            let mut hashes = [0u64; BATCH];
            for (h, op) in hashes.iter_mut().zip(chunk) {
                *h = hash(op.ns.0, op.key);
            }
            self.prefetch_hashes(&hashes[..chunk.len()]);
            for (j, op) in chunk.iter().enumerate() {
                let i = c * BATCH + j;
                match op.kind {
                    BatchKind::Get => {
                        let nsid = self.ns_id(op.ns)?;
                        self.core.stats.gets += 1;
                        let r = self.find(nsid, op.key, hashes[j]);
                        let value = self.poison(r)?.map(|(_, addr)| self.log.view(addr).value());
                        f(i, value, &mut unused);
                    }
                    BatchKind::Rmw => {
                        self.check_writable()?;
                        let nsid = self.ns_id(op.ns)?;
                        self.rmw_hashed(nsid, op.key, hashes[j], &mut |old, out| f(i, old, out))?;
                    }
                    BatchKind::Put(v) => self.put(op.ns, op.key, v)?,
                    BatchKind::Merge(v) => self.merge(op.ns, op.key, v)?,
                    BatchKind::Delete => self.delete(op.ns, op.key)?,
                }
            }
        }
        Ok(())
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
        order.unordered(
            "hashlog",
            "its index is a hash table: it scans in log order (Order::Any); use an ordered \
             store (rocksdb, timelog) for key order",
        )?;
        self.core.readable()?;
        let ns = self.ns_id(ns)?;
        self.core.stats.scans += 1;
        let r = self.walk(ns, start, end, limit, visit);
        self.poison(r)
    }

    fn scan_step(
        &mut self,
        ns: Ns,
        from: Option<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        self.core.readable()?;
        let ns = self.ns_id(ns)?;
        let from = match from {
            None => 0,
            Some(t) => u64::from_le_bytes(t.try_into().map_err(|_| Error::InvalidOption {
                option: "scan_step",
                detail: format!("a hashlog walk token is 8 bytes, got {}", t.len()),
            })?),
        };
        self.core.stats.scans += 1;
        let r = self.walk_step(ns, from, limit, visit);
        self.poison(r).map(|next| next.map(|a| a.to_le_bytes().to_vec()))
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        crate::backend::checkpoint(self, |s| &mut s.core, HashLogStore::write_checkpoint)
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.core.stats();
        s.index_bytes = self.index.bytes();
        s.bytes_in_memory = s.index_bytes
            + (self.log.frames_in_memory() * self.log.page_size) as u64
            + (self.scratch.capacity() + self.scan_buf.capacity()) as u64
            + self.log.disk_buf_bytes() as u64
            + self.compaction.as_ref().map_or(0, |c| c.buf.capacity() as u64)
            + self.snapshot.as_ref().map_or(0, |w| w.memory() as u64);
        s.bytes_on_disk = crate::io::dir_bytes(&self.opts.dir);
        s.bytes_written += self.log.bytes_written;
        s.disk_reads = self.log.disk_reads;
        s.live_keys = Some(self.index.count);
        s
    }
}
