//! Opening a store directory: a fresh log, or the newest (or the asked-for)
//! checkpoint's log and index recovered ([`super::recovery`] replays the log).

use super::*;

impl HashLogStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one; its
    /// files go through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions, hopts: HashLogOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, hopts, fs)
    }

    /// Like [`open`](Self::open), doing all file I/O through `fs` (the test seam).
    pub fn open_with_fs(
        opts: StoreOptions,
        hopts: HashLogOptions,
        fs: Arc<dyn Fs>,
    ) -> Result<Self> {
        opts.validate()?;
        hopts.validate()?;
        let dir = opts.dir.clone();
        manifest::init_dir(&*fs, &dir, "hashlog", FORMAT_VERSION)?;
        let newest = opts.checkpoint_to_recover(&manifest::list_manifests(&*fs, &dir)?)?;
        // Small by default (at most 16384 buckets, 1 MiB: an index the size of the
        // state, not of the budget, stays in the CPU caches), doubled as keys arrive;
        // `expected_keys` presizes it.
        let bits = hopts.initial_index_bits.unwrap_or_else(|| {
            let buckets = (opts.memory_budget / 16 / BUCKET_BYTES).max(256);
            (63 - buckets.leading_zeros()).clamp(8, 14)
        });
        let mut recover = None;
        let mut index_snap = None;
        let (index, log, seq, garbage) = match newest {
            None => {
                // Checked before allocating: `expected_keys` may ask for any size.
                let needed = BUCKET_BYTES << bits;
                if needed > opts.memory_budget {
                    return Err(Error::BudgetTooSmall {
                        budget: opts.memory_budget,
                        needed,
                        what: format!(
                            "a hash index presized for expected_keys ({} buckets)",
                            1u64 << bits
                        ),
                    });
                }
                let page_bits = hopts.page_bits;
                let seg_bits = segment_bits(hopts.segment_bytes, page_bits);
                let start = (1u64 << page_bits) + PAGE_HDR as u64;
                (
                    HashIndex::new(bits),
                    Log::new(fs.clone(), &dir, page_bits, seg_bits, start, start)?,
                    0,
                    0,
                )
            }
            Some(seq) => {
                let m = manifest::read_manifest(&*fs, &dir, seq)?;
                let mpath = join(&dir, &manifest::manifest_name(seq));
                if m.get_str(&mpath, "store")? != "hashlog" {
                    return Err(Error::NotAStore {
                        path: mpath,
                        reason: "manifest of another store".into(),
                    });
                }
                m.check_namespaces(&opts)?;
                let bad = |key: &str, what: &str| {
                    Error::corrupt(&mpath, m.offset_of(key), format!("manifest: {what}"))
                };
                let page_bits = m.get_u64(&mpath, "page_bits")?;
                if !(12..=30).contains(&page_bits) {
                    return Err(bad("page_bits", "page_bits outside 12..=30"));
                }
                let page_bits = page_bits as u32;
                let seg_bits = m.get_u64(&mpath, "segment_page_bits")?;
                if seg_bits > 20 {
                    return Err(bad("segment_page_bits", "segment_page_bits above 20"));
                }
                let seg_bits = seg_bits as u32;
                let begin = m.get_u64(&mpath, "begin")?;
                let tail = m.get_u64(&mpath, "tail")?;
                if begin < 1 << page_bits || begin > tail {
                    return Err(bad("begin", "log begin outside [first page, tail]"));
                }
                if tail & ((1 << page_bits) - 1) != PAGE_HDR as u64 || tail > log::ADDRESS_LIMIT {
                    return Err(bad(
                        "tail",
                        "log tail not at a page start inside the address space",
                    ));
                }
                // Version 1 manifests name a snapshot exact at the tail.
                let name = m.get_str(&mpath, "index")?;
                let from = if m.version >= 2 { m.get_u64(&mpath, "index_tail")? } else { tail };
                if from > tail {
                    return Err(bad("index_tail", "index_tail lies past the tail"));
                }
                let none = m.version >= 2 && name == "none";
                let numbered = name.strip_prefix("index-").and_then(|n| n.strip_suffix(".snap"));
                if !none
                    && !numbered
                        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                {
                    return Err(bad("index", "index is not an index-<seq>.snap file name"));
                }
                let snap = join(&dir, name);
                let index = if none {
                    HashIndex::new(bits)
                } else {
                    index_snap = Some((name.to_string(), from));
                    let range = LogRange { tail, page_bits };
                    read_index(&*fs, &snap, opts.memory_budget, &range)?
                };
                recover = Some((from, m.get_u64(&mpath, "keys")?, snap, mpath.clone()));
                let log = Log::new(fs.clone(), &dir, page_bits, seg_bits, begin, tail)?;
                (index, log, seq, m.get_u64(&mpath, "garbage")?)
            }
        };
        let mut store = HashLogStore {
            merges: opts.namespaces.iter().map(|n| n.merge.clone()).collect(),
            core: StoreCore { seq, ..StoreCore::new(opts.memory_budget) },
            opts,
            hopts,
            fs,
            index,
            log,
            garbage,
            scratch: Vec::new(),
            prefetch_span: 0,
            compaction: None,
            scan_buf: Vec::new(),
            scan_buf_page: None,
            checkpoint_begin: u64::MAX,
            lowest_segment: 0,
            value_cap: None,
            snapshot: None,
            index_snap,
            snapshot_wanted: false,
            replay_carry: 0,
            replay_base: 0,
        };
        let from = recover.as_ref().map_or(0, |r| r.0).max(store.log.begin);
        store.replay_carry = store.log.tail.saturating_sub(from);
        store.size_frames()?;
        store.log.set_direct_io(store.opts.direct_io);
        if let Some((from, keys, snap, mpath)) = recover {
            store.recover_index(from, keys, &snap, &mpath)?;
        }
        store.clean_dir()?;
        store.log.use_direct_io(store.opts.direct_io)?;
        Ok(store)
    }
}
