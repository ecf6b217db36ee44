//! Writing a checkpoint (fold-over, the index snapshot whole or fuzzy, the manifest)
//! and removing what no retained checkpoint needs; the protocol is in [`super`].

use super::*;

impl HashLogStore {
    /// Removes leftovers: temporary files (but the snapshot being written), snapshots
    /// and manifests no retained checkpoint uses, and segments outside every retained
    /// checkpoint's log range. The previous checkpoint's manifest says what it uses: if
    /// it exists but cannot be read (an I/O error, damage), this fails naming it and
    /// deletes nothing.
    pub(super) fn clean_dir(&mut self) -> Result<()> {
        let dir = self.opts.dir.clone();
        let fs = self.fs.clone();
        let retained: Vec<u64> = manifest::list_manifests(&*fs, &dir)?
            .into_iter()
            .filter(|s| manifest::is_retained(*s, self.core.seq))
            .collect();
        let mut min_begin = self.log.begin;
        // The current checkpoint names `index_snap`; the previous one names its own.
        let mut snaps: Vec<String> = self.index_snap.iter().map(|(n, _)| n.clone()).collect();
        for &s in &retained {
            if s != self.core.seq {
                if let Some(m) = manifest::read_previous_manifest(&*fs, &dir, s)? {
                    let path = join(&dir, &manifest::manifest_name(s));
                    min_begin = min_begin.min(m.get_u64(&path, "begin")?);
                    snaps.push(m.get_str(&path, "index")?.to_string());
                }
            }
        }
        let writing = self.snapshot.as_ref().map(|w| w.tmp_name.clone());
        let first_seg = self.log.segment_of(min_begin);
        let last_seg = self.log.segment_of(self.log.tail.max(1) - 1);
        let keep_last = if self.core.seq == 0 { None } else { Some(last_seg) };
        for name in fs.list_dir(&dir).map_err(|e| Error::io("list directory", &dir, e))? {
            let remove = if name.ends_with(".tmp") {
                writing.as_ref() != Some(&name)
            } else if let Some(s) = name.strip_prefix("log-").and_then(|n| n.strip_suffix(".seg")) {
                match (s.parse::<u64>(), keep_last) {
                    (Ok(seg), Some(last)) => seg < first_seg || seg > last,
                    (Ok(_), None) => true,
                    _ => false,
                }
            } else if let Some(s) =
                name.strip_prefix("index-").and_then(|n| n.strip_suffix(".snap"))
            {
                s.parse::<u64>().is_ok() && !snaps.contains(&name)
            } else if let Some(s) = name.strip_prefix("MANIFEST-") {
                s.parse::<u64>().is_ok_and(|s| !retained.contains(&s))
            } else {
                false
            };
            if remove {
                manifest::remove_quiet(&*fs, &dir, &name)?;
            }
        }
        self.log.forget_segments_below(min_begin);
        self.checkpoint_begin = if self.core.seq == 0 { u64::MAX } else { min_begin };
        self.lowest_segment = first_seg;
        Ok(())
    }

    /// The checkpoint protocol (module docs): a step of a fuzzy snapshot under way,
    /// fold-over, fsync, publishing a complete snapshot, a whole snapshot when one is
    /// due and the index is small, the manifest; then a fuzzy snapshot starts if one is
    /// due.
    pub(super) fn write_checkpoint(&mut self, seq: u64) -> Result<()> {
        let dir = self.opts.dir.clone();
        let fs = self.fs.clone();
        if let Some(s) = &mut self.snapshot {
            s.step(&self.index, self.hopts.snapshot_step)?;
            self.core.stats.bytes_written += s.new_bytes();
        }
        self.log.fold_over()?;
        self.log.sync()?;
        if self.snapshot.as_ref().is_some_and(SnapshotWriter::is_done) {
            let s = self.snapshot.take().expect("a snapshot under way");
            let (done, mark) = ((s.name.clone(), s.from), s.mark);
            self.core.stats.bytes_written += s.finish(&*fs)?;
            self.index_snap = Some(done);
            (self.replay_carry, self.replay_base) = (0, mark);
        }
        let tail = self.log.tail;
        let replay = self.replay_bytes();
        let ratio = self.hopts.snapshot_ratio;
        let index_bytes = self.index.bytes();
        let due = self.snapshot.is_none()
            && replay > 0
            && (ratio == 0.0 || replay as f64 > ratio * index_bytes as f64);
        let whole = due && (ratio == 0.0 || index_bytes <= self.hopts.inline_snapshot_bytes);
        if whole {
            if self.index.growing() {
                self.index.grow_step(usize::MAX);
                self.size_frames()?;
            }
            let name = format!("index-{seq:016}.snap");
            self.core.stats.bytes_written +=
                snapshot::write_whole(&*fs, &dir, name.clone(), &self.index, tail)?;
            self.index_snap = Some((name, tail));
            (self.replay_carry, self.replay_base) = (0, self.log.bytes_written);
        }
        let mut m = Manifest::new(seq, "hashlog", &self.opts);
        m.version = MANIFEST_VERSION;
        m.set("begin", self.log.begin);
        m.set("tail", tail);
        m.set("page_bits", self.log.page_bits);
        m.set("segment_page_bits", self.log.seg_page_bits);
        m.set("garbage", self.garbage);
        match &self.index_snap {
            Some((name, from)) => {
                m.set("index", name);
                m.set("index_tail", from);
            }
            None => {
                m.set("index", "none");
                m.set("index_tail", 0);
            }
        }
        m.set("keys", self.index.count);
        manifest::write_manifest(&*fs, &dir, &m)?;
        self.core.seq = seq;
        if due && !whole {
            if self.index.growing() {
                self.snapshot_wanted = true;
            } else {
                self.start_snapshot()?;
            }
        }
        self.clean_dir()
    }

    /// Starts a fuzzy index snapshot from the current tail (named after the next
    /// checkpoint, so its name is newer than every snapshot a manifest names).
    pub(super) fn start_snapshot(&mut self) -> Result<()> {
        self.snapshot_wanted = false;
        let name = format!("index-{:016}.snap", self.core.seq + 1);
        let buffer = self.log.page_size / 4;
        let mut w = SnapshotWriter::start(
            &*self.fs,
            &self.opts.dir,
            name,
            &self.index,
            self.log.tail,
            buffer,
        )?;
        w.mark = self.log.bytes_written;
        self.snapshot = Some(w);
        Ok(())
    }

    /// Whether a fuzzy index snapshot is being written (or waits for an index doubling
    /// to finish before it starts).
    pub fn index_snapshot_running(&self) -> bool {
        self.snapshot.is_some() || self.snapshot_wanted
    }

    /// Copies what is left of a fuzzy index snapshot at once (finishing a doubling it
    /// waits for first); the next checkpoint publishes it. For tools and tests that
    /// want the snapshot done now rather than in steps.
    pub fn complete_index_snapshot(&mut self) -> Result<()> {
        self.check_writable()?;
        let r = (|| {
            if self.snapshot_wanted {
                self.index.grow_step(usize::MAX);
                self.size_frames()?;
                self.start_snapshot()?;
            }
            if let Some(s) = &mut self.snapshot {
                s.step(&self.index, usize::MAX)?;
                self.core.stats.bytes_written += s.new_bytes();
            }
            Ok(())
        })();
        self.poison(r)
    }

    /// About the log bytes a recovery of a checkpoint taken now would replay (from the
    /// newest complete index snapshot's start, or the log's beginning, to the tail):
    /// the log pages written since that snapshot started. It decides when the next
    /// snapshot starts ([`HashLogOptions::index_snapshot_ratio`]).
    pub fn replay_bytes(&self) -> u64 {
        self.replay_carry + self.log.bytes_written.saturating_sub(self.replay_base)
    }
}
