//! The compact hash index: key hash -> log address, without keys.
//!
//! Buckets of eight `u64` slots (one cache line): slots 0..7 hold entries, slot 7 links
//! to an overflow bucket (`index + 1`, 0 = none). An entry packs a log address in
//! 8-byte units (44 bits, so 128 TiB of log) with 20 bits of the key's hash (the tag);
//! 0 means empty. The bucket of hash `h` is `h & (buckets - 1)`; the tag is
//! `(h >> b0) & 0xFFFFF`, where `b0` is the bucket bits the index started with. Hash
//! bits above `b0` are therefore in the tag, which lets the index double without
//! reading a single key: an entry of bucket `i` moves to `i | bit << bits` where `bit`
//! is the tag bit that the larger table also uses for addressing. Each doubling spends
//! one tag bit on addressing; after 20 doublings the index stops growing and buckets
//! chain into overflow instead.
//!
//! A doubling is incremental: the old arrays stay beside the new ones while
//! [`HashIndex::grow_step`] moves a few old buckets (with their overflow chains) per
//! write operation, so no single operation pays for the whole table. A lookup whose
//! old bucket has not moved yet probes the old arrays, every other lookup the new ones;
//! inserts go to the same place a lookup would probe. A checkpoint finishes the
//! doubling before it writes the snapshot.
//!
//! A lookup compares tags and returns candidates; the caller confirms each by comparing
//! the key stored in the log record. With 20-bit tags a bucket of 7 entries sends a
//! lookup to a wrong record about once in 150,000 lookups.

pub(crate) const ADDR_BITS: u32 = 44;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
pub(crate) const TAG_BITS: u32 = 20;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Entry slots of a bucket; the slot after them links to an overflow bucket.
pub(crate) const SLOTS: usize = 7;
/// Bytes of one bucket.
pub(crate) const BUCKET_BYTES: u64 = 64;

pub(crate) type Bucket = [u64; 8];

/// A slot position: `old` selects the arrays being drained by a doubling, `ov` the
/// overflow array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    old: bool,
    ov: bool,
    bucket: u32,
    i: u8,
}

/// State of a walk over one bucket chain. `mask` holds the slots of the current
/// bucket whose tag matches and that have not been returned yet; `fresh` says the
/// current bucket has not been scanned.
pub(crate) struct Probe {
    old: bool,
    ov: bool,
    bucket: u32,
    mask: u8,
    fresh: bool,
    tag: u64,
}

/// A home bucket's tag matches (see [`HashIndex::home_candidates`]).
pub(crate) struct HomeBucket<'a> {
    /// Slots whose tag matches, as a bit mask.
    pub(crate) mask: u8,
    /// Whether the bucket links to overflow (more candidates may lie beyond it).
    pub(crate) chained: bool,
    b: &'a Bucket,
    old: bool,
    bucket: u32,
}

impl HomeBucket<'_> {
    /// The slot and log address of candidate `i` (a bit of `mask`).
    #[inline(always)]
    pub(crate) fn candidate(&self, i: u32) -> (Slot, u64) {
        let slot = Slot { old: self.old, ov: false, bucket: self.bucket, i: i as u8 };
        (slot, addr_of(self.b[i as usize]))
    }
}

/// The arrays of the table being doubled, drained from bucket 0 upwards.
pub(crate) struct Draining {
    main: Vec<Bucket>,
    overflow: Vec<Bucket>,
    bits: u32,
    /// Old buckets below this one have moved to the new arrays.
    moved: usize,
}

pub(crate) struct HashIndex {
    pub(crate) b0: u32,
    pub(crate) bits: u32,
    pub(crate) main: Vec<Bucket>,
    pub(crate) overflow: Vec<Bucket>,
    pub(crate) count: u64,
    draining: Option<Draining>,
}

/// Slots of bucket `b` holding an entry with tag `tag`, as a bit mask (branch-free:
/// a slot matches when its entry XOR the tag leaves no bit above the address). An
/// empty slot (0) would match tag 0; only that rare tag pays for excluding empties.
#[inline(always)]
fn match_mask(b: &Bucket, tag: u64) -> u8 {
    let t = tag << ADDR_BITS;
    let mut m = 0u8;
    for (i, &e) in b[..SLOTS].iter().enumerate() {
        m |= u8::from((e ^ t) <= ADDR_MASK) << i;
    }
    if tag == 0 {
        for (i, &e) in b[..SLOTS].iter().enumerate() {
            m &= !(u8::from(e == 0) << i);
        }
    }
    m
}

/// The log address an index entry points at.
#[inline]
pub(crate) fn addr_of(e: u64) -> u64 {
    (e & ADDR_MASK) << 3
}

impl HashIndex {
    pub(crate) fn new(bits: u32) -> Self {
        Self::from_parts(bits, bits, vec![[0; 8]; 1 << bits], Vec::new(), 0)
    }

    pub(crate) fn from_parts(
        b0: u32,
        bits: u32,
        main: Vec<Bucket>,
        overflow: Vec<Bucket>,
        count: u64,
    ) -> Self {
        crate::hot::advise_huge_pages(&main);
        HashIndex { b0, bits, main, overflow, count, draining: None }
    }

    /// Bytes of all bucket arrays, including those of a doubling in progress.
    pub(crate) fn bytes(&self) -> u64 {
        let old = self.draining.as_ref().map_or(0, |d| d.main.len() + d.overflow.len());
        (self.main.len() + self.overflow.len() + old) as u64 * BUCKET_BYTES
    }

    #[inline]
    fn tag(&self, h: u64) -> u64 {
        (h >> self.b0) & TAG_MASK
    }

    /// Where hash `h` lives: the old arrays if its old bucket has not moved yet.
    #[inline]
    fn home(&self, h: u64) -> (bool, u32) {
        if let Some(d) = &self.draining {
            let ob = (h & ((1u64 << d.bits) - 1)) as usize;
            if ob >= d.moved {
                return (true, ob as u32);
            }
        }
        (false, (h & ((1u64 << self.bits) - 1)) as u32)
    }

    /// Starts loading the home bucket of hash `h` into the cache (a batch hashes its
    /// keys and prefetches their buckets before probing any of them).
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        let (old, b) = self.home(h);
        crate::hot::prefetch(self.bucket(old, false, b));
    }

    #[inline]
    pub(crate) fn probe(&self, h: u64) -> Probe {
        let (old, bucket) = self.home(h);
        Probe { old, ov: false, bucket, mask: 0, fresh: true, tag: self.tag(h) }
    }

    #[inline]
    fn arrays(&self, old: bool) -> (&Vec<Bucket>, &Vec<Bucket>) {
        match (old, &self.draining) {
            (true, Some(d)) => (&d.main, &d.overflow),
            _ => (&self.main, &self.overflow),
        }
    }

    #[inline]
    fn arrays_mut(&mut self, old: bool) -> (&mut Vec<Bucket>, &mut Vec<Bucket>) {
        match (old, &mut self.draining) {
            (true, Some(d)) => (&mut d.main, &mut d.overflow),
            _ => (&mut self.main, &mut self.overflow),
        }
    }

    #[inline]
    fn bucket(&self, old: bool, ov: bool, b: u32) -> &Bucket {
        let (main, overflow) = self.arrays(old);
        if ov {
            &overflow[b as usize]
        } else {
            &main[b as usize]
        }
    }

    #[inline]
    fn bucket_mut(&mut self, old: bool, ov: bool, b: u32) -> &mut Bucket {
        let (main, overflow) = self.arrays_mut(old);
        if ov {
            &mut overflow[b as usize]
        } else {
            &mut main[b as usize]
        }
    }

    /// The home bucket of hash `h` (the first of its chain) and the candidate slots in
    /// it, for the lookup fast path: most keys sit in their home bucket, so a lookup
    /// tries these before it walks the chain with [`probe`](Self::probe).
    #[inline(always)]
    pub(crate) fn home_candidates(&self, h: u64) -> HomeBucket<'_> {
        let (old, bucket) = self.home(h);
        let b = if old {
            match &self.draining {
                Some(d) => &d.main[bucket as usize],
                None => &self.main[bucket as usize],
            }
        } else {
            &self.main[bucket as usize]
        };
        HomeBucket { mask: match_mask(b, self.tag(h)), chained: b[SLOTS] != 0, b, old, bucket }
    }

    /// Next entry of the probed chain whose tag matches; returns its slot and address.
    ///
    /// A bucket is scanned without branches into a mask of matching slots: the slot a
    /// key sits in is random, so a compare-and-branch per slot mispredicts on most
    /// lookups, and a misprediction resolved only when the bucket arrives from memory
    /// throws away the next lookups the CPU had started (their cache misses no longer
    /// overlap). The mask's branches (any match? more candidates?) predict well.
    #[inline(always)]
    pub(crate) fn next(&self, p: &mut Probe) -> Option<(Slot, u64)> {
        loop {
            let b = self.bucket(p.old, p.ov, p.bucket);
            if p.fresh {
                p.fresh = false;
                p.mask = match_mask(b, p.tag);
            }
            if p.mask != 0 {
                let i = p.mask.trailing_zeros() as u8;
                p.mask &= p.mask - 1;
                let slot = Slot { old: p.old, ov: p.ov, bucket: p.bucket, i };
                return Some((slot, addr_of(b[i as usize])));
            }
            let link = b[SLOTS];
            if link == 0 {
                return None;
            }
            p.ov = true;
            p.bucket = (link - 1) as u32;
            p.fresh = true;
        }
    }

    /// The slot whose entry points at exactly `addr` for hash `h`, if any.
    pub(crate) fn find_addr(&self, h: u64, addr: u64) -> Option<Slot> {
        let mut p = self.probe(h);
        while let Some((s, a)) = self.next(&mut p) {
            if a == addr {
                return Some(s);
            }
        }
        None
    }

    #[inline]
    pub(crate) fn set(&mut self, s: Slot, addr: u64) {
        let e = &mut self.bucket_mut(s.old, s.ov, s.bucket)[s.i as usize];
        *e = (*e & !ADDR_MASK) | (addr >> 3);
    }

    pub(crate) fn remove(&mut self, s: Slot) {
        self.bucket_mut(s.old, s.ov, s.bucket)[s.i as usize] = 0;
        self.count -= 1;
    }

    /// Bytes an insert of hash `h` would add (0, or one overflow bucket).
    pub(crate) fn insert_cost(&self, h: u64) -> u64 {
        let (old, mut b) = self.home(h);
        let mut ov = false;
        loop {
            let bk = self.bucket(old, ov, b);
            if bk[..SLOTS].contains(&0) {
                return 0;
            }
            if bk[SLOTS] == 0 {
                return BUCKET_BYTES;
            }
            ov = true;
            b = (bk[SLOTS] - 1) as u32;
        }
    }

    pub(crate) fn insert(&mut self, h: u64, addr: u64) {
        let entry = (self.tag(h) << ADDR_BITS) | (addr >> 3);
        let (old, b) = self.home(h);
        self.place(old, b, entry);
        self.count += 1;
    }

    fn place(&mut self, old: bool, mut b: u32, entry: u64) {
        let mut ov = false;
        loop {
            let bk = self.bucket_mut(old, ov, b);
            if let Some(slot) = bk[..SLOTS].iter_mut().find(|e| **e == 0) {
                *slot = entry;
                return;
            }
            if bk[SLOTS] == 0 {
                let (_, overflow) = self.arrays_mut(old);
                let n = overflow.len() as u64;
                let mut nb = [0u64; 8];
                nb[0] = entry;
                overflow.push(nb);
                self.bucket_mut(old, ov, b)[SLOTS] = n + 1;
                return;
            }
            let link = bk[SLOTS];
            ov = true;
            b = (link - 1) as u32;
        }
    }

    /// Whether the table is loaded enough to double (average over 4 of 7 slots per
    /// bucket: about 5% of buckets then chain into overflow; 16 index bytes per key)
    /// and no doubling is under way.
    pub(crate) fn wants_grow(&self) -> bool {
        self.draining.is_none()
            && self.count > 4 * self.main.len() as u64
            && self.bits < self.b0 + TAG_BITS
            && self.bits < 40
    }

    /// Bytes of the index after a doubling (before overflow is rebuilt, an estimate).
    pub(crate) fn grown_bytes(&self) -> u64 {
        2 * self.main.len() as u64 * BUCKET_BYTES + self.overflow.len() as u64 * BUCKET_BYTES / 2
    }

    /// Starts doubling the bucket array; [`grow_step`](Self::grow_step) moves the
    /// entries.
    pub(crate) fn start_grow(&mut self) {
        debug_assert!(self.draining.is_none());
        let main = std::mem::take(&mut self.main);
        let overflow = std::mem::take(&mut self.overflow);
        self.draining = Some(Draining { main, overflow, bits: self.bits, moved: 0 });
        self.bits += 1;
        self.main = vec![[0; 8]; 1 << self.bits];
        crate::hot::advise_huge_pages(&self.main);
    }

    /// Whether a doubling is under way.
    pub(crate) fn growing(&self) -> bool {
        self.draining.is_some()
    }

    /// Moves up to `buckets` old buckets (and their overflow chains) to the new arrays,
    /// each entry by the tag bit the new table adds to addressing. Returns true when
    /// the doubling has finished and the old arrays are freed.
    pub(crate) fn grow_step(&mut self, buckets: usize) -> bool {
        let Some(d) = self.draining.take() else { return true };
        let n = d.main.len();
        let shift = d.bits - self.b0;
        let end = d.moved.saturating_add(buckets).min(n);
        for i in d.moved..end {
            let mut bk = &d.main[i];
            loop {
                for &e in &bk[..SLOTS] {
                    if e != 0 {
                        let bit = ((e >> ADDR_BITS) >> shift) & 1;
                        self.place(false, (i as u64 + bit * n as u64) as u32, e);
                    }
                }
                if bk[SLOTS] == 0 {
                    break;
                }
                bk = &d.overflow[(bk[SLOTS] - 1) as usize];
            }
        }
        if end < n {
            self.draining = Some(Draining { moved: end, ..d });
            false
        } else {
            true
        }
    }

    /// Doubles the bucket array at once (finishing a doubling under way first).
    #[cfg(test)]
    pub(crate) fn grow(&mut self) {
        self.grow_step(usize::MAX);
        self.start_grow();
        self.grow_step(usize::MAX);
    }

    /// Occupied entries in all arrays, for tests.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        let count = |arr: &[Bucket]| -> usize {
            arr.iter().map(|b| b[..SLOTS].iter().filter(|e| **e != 0).count()).sum()
        };
        let new = count(&self.main) + count(&self.overflow);
        let old = self.draining.as_ref().map_or(0, |d| {
            // Only buckets not yet moved (and their chains) still hold live entries.
            let mut n = 0;
            for b in &d.main[d.moved..] {
                let mut bk = b;
                loop {
                    n += bk[..SLOTS].iter().filter(|e| **e != 0).count();
                    if bk[SLOTS] == 0 {
                        break;
                    }
                    bk = &d.overflow[(bk[SLOTS] - 1) as usize];
                }
            }
            n
        });
        new + old
    }
}

/// Occupied entries of a bucket.
pub(crate) fn entries_in(b: &Bucket) -> u64 {
    b[..SLOTS].iter().filter(|e| **e != 0).count() as u64
}

/// Recovery from a fuzzy index snapshot (see the hashlog checkpoint protocol).
impl HashIndex {
    /// Cleans an index loaded from a fuzzy snapshot before the log tail is replayed:
    /// empties overflow buckets no chain reaches (created after their predecessor was
    /// copied; every entry in them belongs to a key whose record is replayed) and
    /// removes the entries below `begin` (stale: every live record lies at or above
    /// the log's beginning). An entry at or past `tail`, or a chain that loops, is an
    /// error (the snapshot does not belong to this log).
    pub(crate) fn clean_loaded(&mut self, begin: u64, tail: u64) -> Result<(), String> {
        assert!(self.draining.is_none(), "a loaded index is not doubling");
        let n_ov = self.overflow.len();
        let mut reachable = vec![false; n_ov];
        for b in 0..self.main.len() {
            let mut link = self.main[b][SLOTS];
            let mut steps = 0;
            while link != 0 {
                let o = (link - 1) as usize;
                steps += 1;
                if o >= n_ov || reachable[o] || steps > n_ov {
                    return Err(format!("overflow chain of bucket {b} is broken"));
                }
                reachable[o] = true;
                link = self.overflow[o][SLOTS];
            }
        }
        // Removes the entries of `bk` below `begin`; returns (removed, an entry past tail).
        fn sweep(bk: &mut Bucket, begin: u64, tail: u64) -> (u64, Option<u64>) {
            let (mut removed, mut bad) = (0, None);
            for e in &mut bk[..SLOTS] {
                if *e != 0 {
                    let a = addr_of(*e);
                    if a >= tail {
                        bad = Some(a);
                    } else if a < begin {
                        *e = 0;
                        removed += 1;
                    }
                }
            }
            (removed, bad)
        }
        let mut removed = 0u64;
        let mut bad = None;
        for bk in &mut self.main {
            let (r, b) = sweep(bk, begin, tail);
            removed += r;
            bad = bad.or(b);
        }
        for (o, bk) in self.overflow.iter_mut().enumerate() {
            if reachable[o] {
                let (r, b) = sweep(bk, begin, tail);
                removed += r;
                bad = bad.or(b);
            } else {
                removed += bk[..SLOTS].iter().filter(|e| **e != 0).count() as u64;
                *bk = [0; 8];
            }
        }
        if let Some(a) = bad {
            return Err(format!("entry points at log address {a}, past the checkpoint's tail"));
        }
        self.count -= removed;
        Ok(())
    }

    /// Buckets (main, then overflow) a snapshot writes, numbered as in the snapshot.
    pub(crate) fn snapshot_buckets(&self) -> u64 {
        (self.main.len() + self.overflow.len()) as u64
    }

    /// Bucket `no` in snapshot numbering (main buckets first, then overflow).
    pub(crate) fn snapshot_bucket(&self, no: u64) -> &Bucket {
        let n = self.main.len() as u64;
        if no < n {
            &self.main[no as usize]
        } else {
            &self.overflow[(no - n) as usize]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
    }

    #[test]
    fn match_mask_finds_exactly_the_tagged_entries() {
        let e = |tag: u64, addr: u64| (tag << ADDR_BITS) | (addr >> 3);
        let mut b: Bucket = [0; 8];
        b[0] = e(5, 64);
        b[2] = e(5, 128);
        b[3] = e(6, 64);
        b[6] = e(0, 256);
        b[7] = e(5, 8); // the link slot is never an entry
        assert_eq!(match_mask(&b, 5), 0b101);
        assert_eq!(match_mask(&b, 6), 0b1000);
        // Tag 0: empty slots (0) must not match, the entry with tag 0 must.
        assert_eq!(match_mask(&b, 0), 0b100_0000);
        assert_eq!(match_mask(&[0; 8], 0), 0);
    }

    /// The home-bucket fast path agrees with the full chain walk, for every key of a
    /// table whose buckets chain (and while a doubling is half done).
    #[test]
    fn home_candidates_agree_with_probe() {
        let mut ix = HashIndex::new(4);
        for i in 0..2_000u64 {
            ix.insert(h(i), 8 * (i + 1));
        }
        assert!(!ix.overflow.is_empty(), "the test wants chained buckets");
        let check = |ix: &HashIndex| {
            for i in 0..2_000u64 {
                let mut p = ix.probe(h(i));
                let mut chain = Vec::new();
                while let Some((_, a)) = ix.next(&mut p) {
                    chain.push(a);
                }
                let home = ix.home_candidates(h(i));
                let mut m = home.mask;
                let mut fast = Vec::new();
                while m != 0 {
                    fast.push(home.candidate(m.trailing_zeros()).1);
                    m &= m - 1;
                }
                assert_eq!(chain[..fast.len()], fast[..], "key {i}");
                assert!(chain.contains(&(8 * (i + 1))), "key {i}");
                assert!(home.chained || fast.contains(&(8 * (i + 1))), "key {i}");
            }
        };
        check(&ix);
        ix.start_grow();
        ix.grow_step(5);
        check(&ix);
    }

    #[test]
    fn grow_keeps_every_entry_findable() {
        let mut ix = HashIndex::new(4);
        for i in 0..20_000u64 {
            if ix.wants_grow() {
                ix.grow();
            }
            ix.insert(h(i), (i + 1) * 8);
        }
        assert!(ix.bits > 4, "index should have grown");
        assert_eq!(ix.entries(), 20_000);
        for i in 0..20_000u64 {
            assert!(ix.find_addr(h(i), (i + 1) * 8).is_some(), "entry {i} lost");
        }
    }

    #[test]
    fn incremental_grow_interleaved_with_inserts_updates_and_removes() {
        let mut ix = HashIndex::new(3);
        let mut live = std::collections::BTreeMap::new();
        for i in 0..30_000u64 {
            if ix.wants_grow() {
                ix.start_grow();
            }
            if ix.growing() {
                ix.grow_step(3);
            }
            ix.insert(h(i), (i + 1) * 8);
            live.insert(i, (i + 1) * 8);
            if i % 3 == 0 {
                // Move an older key to a new address, and remove another.
                let k = i / 2;
                if let Some(a) = live.get(&k).copied() {
                    let s = ix.find_addr(h(k), a).expect("older key present");
                    ix.set(s, (a + 1) << 20);
                    live.insert(k, (a + 1) << 20);
                }
                let r = i / 3;
                if let Some(a) = live.remove(&r) {
                    let s = ix.find_addr(h(r), a).expect("key to remove present");
                    ix.remove(s);
                }
            }
        }
        assert!(ix.bits > 6, "index should have grown several times");
        assert_eq!(ix.entries() as u64, ix.count);
        assert_eq!(ix.count, live.len() as u64);
        for (k, a) in &live {
            assert!(ix.find_addr(h(*k), *a).is_some(), "entry {k} lost");
        }
        ix.grow_step(usize::MAX);
        assert!(!ix.growing());
        for (k, a) in &live {
            assert!(ix.find_addr(h(*k), *a).is_some(), "entry {k} lost after finishing");
        }
    }

    #[test]
    fn remove_and_reinsert_reuses_slots() {
        let mut ix = HashIndex::new(2);
        for i in 0..100u64 {
            ix.insert(h(i), (i + 1) * 8);
        }
        for i in 0..100u64 {
            let s = ix.find_addr(h(i), (i + 1) * 8).expect("present");
            ix.remove(s);
        }
        assert_eq!(ix.count, 0);
        let before = ix.overflow.len();
        for i in 0..100u64 {
            ix.insert(h(i), (i + 1) * 8);
        }
        assert_eq!(ix.overflow.len(), before, "freed slots are reused");
    }
}
