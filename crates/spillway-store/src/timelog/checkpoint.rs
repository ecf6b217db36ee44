//! Checkpoints and recovery: publishing the live segments and a memtable image under a
//! manifest, loading them back, and deleting files no retained checkpoint names. The
//! protocol is in the [module docs](super).

use std::collections::HashSet;

use super::options::TimeField;
use super::segment::{parse_segment_name, Segment};
use super::{memtable, TimeLogStore, STORE_NAME};
use crate::error::{Error, Result};
use crate::io::join;
use crate::manifest::{self, Manifest};

impl TimeLogStore {
    /// Loads checkpoint `seq`: its layout, segments and memtable image. The segments of
    /// checkpoint `seq - 1` (if `prev_exists`) are kept on disk for now.
    pub(super) fn recover(&mut self, seq: u64, prev_exists: bool) -> Result<()> {
        let dir = self.opts.dir.clone();
        let m = manifest::read_manifest(&*self.fs, &dir, seq)?;
        let mpath = join(&dir, &manifest::manifest_name(seq));
        if m.get_str(&mpath, "store")? != STORE_NAME {
            return Err(Error::NotAStore {
                path: mpath,
                reason: "manifest of another store".into(),
            });
        }
        m.check_namespaces(&self.opts)?;
        // Errors name the offset of the manifest line at fault.
        let bad = |key: &str, what: &str| {
            Error::corrupt(&mpath, m.offset_of(key), format!("manifest: {what}"))
        };
        self.topts.time = TimeField::decode(m.get_str(&mpath, "time_field")?)
            .ok_or_else(|| bad("time_field", "bad time_field"))?;
        self.topts.span = m.get_u64(&mpath, "partition_span")?;
        if self.topts.span == 0 {
            return Err(bad("partition_span", "partition_span is 0"));
        }
        self.next_id = m.get_u64(&mpath, "next_segment")?;
        self.max_time = match m.get_str(&mpath, "max_time")? {
            "none" => None,
            t => Some(t.parse().map_err(|_| bad("max_time", "bad max_time"))?),
        };
        let live = parse_segments(&m, &mpath, self.parts.len())?;
        for &(ns, pid, id) in &live {
            if id >= self.next_id {
                return Err(bad("segments", "a segment id is not below next_segment"));
            }
            let seg = Segment::open(&*self.fs, &dir, id)?;
            self.index_bytes += seg.index_bytes();
            self.parts[ns].entry(pid).or_default().segs.push(seg);
        }
        for parts in &mut self.parts {
            for p in parts.values_mut() {
                p.segs.sort_by_key(|s| s.id);
            }
        }
        let image_name = m.get_str(&mpath, "memtables")?;
        if image_name.contains('/') || image_name.starts_with('.') {
            return Err(bad("memtables", "memtables is not a file name in the store directory"));
        }
        let image = join(&dir, image_name);
        let namespaces = self.parts.len();
        let (time, span) = (self.topts.time, self.topts.span);
        memtable::read_image(&*self.fs, &image.clone(), |at, ns, k, v| {
            if ns as usize >= namespaces {
                return Err(Error::corrupt(&image, at, format!("entry names namespace {ns}")));
            }
            let pid = time.time_of(k) / span;
            let part = self.parts[ns as usize].entry(pid).or_default();
            self.mem_bytes = (self.mem_bytes as i64 + part.mem.set(k, v)) as u64;
            Ok(())
        })?;
        self.core.seq = seq;
        // The previous checkpoint's files stay until the next checkpoint replaces it:
        // its manifest must be read (only a manifest that is gone counts as absent), or
        // cleanup would delete the segments only it names.
        if prev_exists {
            if let Some(prev) = manifest::read_previous_manifest(&*self.fs, &dir, seq - 1)? {
                let ppath = join(&dir, &manifest::manifest_name(seq - 1));
                let p = parse_segments(&prev, &ppath, self.parts.len())?;
                self.prev_live = p.into_iter().map(|(_, _, id)| id).collect();
            }
        }
        Ok(())
    }

    /// Deletes leftovers: `.tmp` files, manifests older than the previous checkpoint or
    /// newer than the recovered one,
    /// and segment files that are not live and that no retained checkpoint names.
    pub(super) fn clean_dir(&mut self) -> Result<()> {
        let dir = self.opts.dir.clone();
        let fs = self.fs.clone();
        let live = self.live_ids();
        for name in fs.list_dir(&dir).map_err(|e| Error::io("list directory", &dir, e))? {
            let remove = if name.ends_with(".tmp") {
                true
            } else if let Some(id) = parse_segment_name(&name) {
                self.next_id = self.next_id.max(id + 1);
                !live.contains(&id) && !self.prev_live.contains(&id)
            } else if let Some(s) = memtable::parse_image_name(&name) {
                !manifest::is_retained(s, self.core.seq)
            } else if let Some(s) = name.strip_prefix("MANIFEST-") {
                // Newer than the recovered one: discarded (StoreOptions::recover_at).
                s.parse::<u64>().is_ok_and(|s| !manifest::is_retained(s, self.core.seq))
            } else {
                false
            };
            if remove {
                manifest::remove_quiet(&*fs, &dir, &name)?;
            }
        }
        Ok(())
    }

    pub(super) fn live_ids(&self) -> HashSet<u64> {
        self.parts
            .iter()
            .flat_map(|p| p.values())
            .flat_map(|p| p.segs.iter().map(|s| s.id))
            .collect()
    }

    pub(super) fn write_checkpoint(&mut self, seq: u64) -> Result<()> {
        // 1. Make every live segment durable.
        let dir = self.opts.dir.clone();
        for parts in &mut self.parts {
            for p in parts.values_mut() {
                for s in &mut p.segs {
                    s.sync()?;
                }
            }
        }
        // 2. Write the memtables' image (fsync, rename, fsync the directory, which
        //    also makes the segments' directory entries durable).
        let image = memtable::image_name(seq);
        let tmp = join(&dir, &format!("{image}.tmp"));
        let entries = self.parts.iter().enumerate().flat_map(|(ns, ps)| {
            ps.values().flat_map(move |p| {
                p.mem.map.iter().map(move |(k, v)| (ns as u16, &k[..], v.as_deref()))
            })
        });
        self.core.stats.bytes_written += memtable::write_image(&*self.fs, &tmp, entries)?;
        crate::blockfile::publish(&*self.fs, &dir, &tmp, &join(&dir, &image))?;
        // 3. Publish the manifest.
        let mut m = Manifest::new(seq, STORE_NAME, &self.opts);
        m.set("time_field", self.topts.time.encode());
        m.set("partition_span", self.topts.span);
        m.set("next_segment", self.next_id);
        m.set("max_time", self.max_time.map_or("none".to_string(), |t| t.to_string()));
        let mut segs = Vec::new();
        for (ns, parts) in self.parts.iter().enumerate() {
            for (pid, p) in parts {
                for s in &p.segs {
                    segs.push(format!("{ns}:{pid}:{}", s.id));
                }
            }
        }
        m.set("segments", segs.join(" "));
        m.set("memtables", &image);
        manifest::write_manifest(&*self.fs, &dir, &m)?;
        self.core.seq = seq;
        self.unpublished.clear();
        // 4. Keep this checkpoint and the previous one.
        let r = self.clean_dir();
        self.prev_live = self.live_ids();
        r
    }
}

/// The `segments` field of a manifest: (namespace, partition, segment id) triples.
fn parse_segments(
    m: &Manifest,
    path: &std::path::Path,
    namespaces: usize,
) -> Result<Vec<(usize, u64, u64)>> {
    let field = m.get_str(path, "segments")?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for t in field.split_whitespace() {
        let bad = || {
            let at = m.offset_of("segments");
            Error::corrupt(path, at, format!("manifest: bad segment entry {t:?}"))
        };
        let mut it = t.split(':');
        let (Some(ns), Some(pid), Some(id), None) = (it.next(), it.next(), it.next(), it.next())
        else {
            return Err(bad());
        };
        let ns: usize = ns.parse().map_err(|_| bad())?;
        let pid: u64 = pid.parse().map_err(|_| bad())?;
        let id: u64 = id.parse().map_err(|_| bad())?;
        if ns >= namespaces || !seen.insert(id) {
            return Err(bad());
        }
        out.push((ns, pid, id));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A manifest's `time_field` of `at:<offset>:<len>` whose offset plus length pass
    /// `usize::MAX`: the time of any key read back (from a memtable image or a put) is 0,
    /// as for any key too short for the field.
    #[test]
    fn a_time_field_past_usize_max_reads_time_zero_not_an_overflow() {
        let f = TimeField::decode(&format!("at:{}:8", usize::MAX)).expect("parses");
        assert_eq!(f.time_of(b"any key at all"), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any `time_field` and `segments` values of a manifest: parsing answers `Ok`
        /// or `Err` (or `None`), and a time field that parses reads any key.
        #[test]
        fn hostile_manifest_fields_are_an_error_not_a_panic(
            time in prop_oneof![
                "(suffix|at|x):[0-9]{0,20}(:[0-9]{0,20})?",
                Just(format!("at:{}:8", usize::MAX)),
                Just(format!("at:{}:1", usize::MAX - 3)),
                ".{0,12}",
            ],
            segments in "[0-9: ]{0,40}|.{0,20}",
            key in proptest::collection::vec(any::<u8>(), 0..12),
        ) {
            if let Some(f) = TimeField::decode(&time) {
                let _ = f.time_of(&key);
            }
            let mut m = Manifest::default();
            m.set("segments", &segments);
            let _ = parse_segments(&m, std::path::Path::new("MANIFEST"), 3);
        }
    }
}
