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
//! A lookup compares tags and returns candidates; the caller confirms each by comparing
//! the key stored in the log record. With 20-bit tags a bucket of 7 entries sends a
//! lookup to a wrong record about once in 150,000 lookups.

pub(crate) const ADDR_BITS: u32 = 44;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
const TAG_BITS: u32 = 20;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const SLOTS: usize = 7;
/// Bytes of one bucket.
pub(crate) const BUCKET_BYTES: u64 = 64;

pub(crate) type Bucket = [u64; 8];

/// A slot position: `ov` selects the overflow array.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    ov: bool,
    bucket: u32,
    i: u8,
}

/// State of a walk over one bucket chain.
pub(crate) struct Probe {
    ov: bool,
    bucket: u32,
    i: u8,
    tag: u64,
}

pub(crate) struct HashIndex {
    pub(crate) b0: u32,
    pub(crate) bits: u32,
    pub(crate) main: Vec<Bucket>,
    pub(crate) overflow: Vec<Bucket>,
    pub(crate) count: u64,
}

#[inline]
fn addr_of(e: u64) -> u64 {
    (e & ADDR_MASK) << 3
}

impl HashIndex {
    pub(crate) fn new(bits: u32) -> Self {
        HashIndex { b0: bits, bits, main: vec![[0; 8]; 1 << bits], overflow: Vec::new(), count: 0 }
    }

    pub(crate) fn bytes(&self) -> u64 {
        (self.main.len() + self.overflow.len()) as u64 * BUCKET_BYTES
    }

    #[inline]
    fn tag(&self, h: u64) -> u64 {
        (h >> self.b0) & TAG_MASK
    }

    #[inline]
    pub(crate) fn probe(&self, h: u64) -> Probe {
        Probe { ov: false, bucket: (h & ((1u64 << self.bits) - 1)) as u32, i: 0, tag: self.tag(h) }
    }

    #[inline]
    fn bucket(&self, ov: bool, b: u32) -> &Bucket {
        if ov {
            &self.overflow[b as usize]
        } else {
            &self.main[b as usize]
        }
    }

    #[inline]
    fn bucket_mut(&mut self, ov: bool, b: u32) -> &mut Bucket {
        if ov {
            &mut self.overflow[b as usize]
        } else {
            &mut self.main[b as usize]
        }
    }

    /// Next entry of the probed chain whose tag matches; returns its slot and address.
    #[inline]
    pub(crate) fn next(&self, p: &mut Probe) -> Option<(Slot, u64)> {
        loop {
            let b = self.bucket(p.ov, p.bucket);
            while (p.i as usize) < SLOTS {
                let i = p.i;
                p.i += 1;
                let e = b[i as usize];
                if e != 0 && (e >> ADDR_BITS) == p.tag {
                    return Some((Slot { ov: p.ov, bucket: p.bucket, i }, addr_of(e)));
                }
            }
            let link = b[SLOTS];
            if link == 0 {
                return None;
            }
            p.ov = true;
            p.bucket = (link - 1) as u32;
            p.i = 0;
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
        let e = &mut self.bucket_mut(s.ov, s.bucket)[s.i as usize];
        *e = (*e & !ADDR_MASK) | (addr >> 3);
    }

    pub(crate) fn remove(&mut self, s: Slot) {
        self.bucket_mut(s.ov, s.bucket)[s.i as usize] = 0;
        self.count -= 1;
    }

    /// Bytes an insert of hash `h` would add (0, or one overflow bucket).
    pub(crate) fn insert_cost(&self, h: u64) -> u64 {
        let (mut ov, mut b) = (false, (h & ((1u64 << self.bits) - 1)) as u32);
        loop {
            let bk = self.bucket(ov, b);
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
        let b = (h & ((1u64 << self.bits) - 1)) as u32;
        self.place(false, b, entry);
        self.count += 1;
    }

    fn place(&mut self, mut ov: bool, mut b: u32, entry: u64) {
        loop {
            let bk = self.bucket_mut(ov, b);
            if let Some(slot) = bk[..SLOTS].iter_mut().find(|e| **e == 0) {
                *slot = entry;
                return;
            }
            if bk[SLOTS] == 0 {
                let n = self.overflow.len() as u64;
                self.bucket_mut(ov, b)[SLOTS] = n + 1;
                let mut nb = [0u64; 8];
                nb[0] = entry;
                self.overflow.push(nb);
                return;
            }
            let link = bk[SLOTS];
            ov = true;
            b = (link - 1) as u32;
        }
    }

    /// Whether the table is loaded enough to double (average over 4 of 7 slots per
    /// bucket: about 5% of buckets then chain into overflow; 16 index bytes per key).
    pub(crate) fn wants_grow(&self) -> bool {
        self.count > 4 * self.main.len() as u64 && self.bits < self.b0 + TAG_BITS && self.bits < 40
    }

    /// Bytes of the index after a doubling (before overflow is rebuilt, an estimate).
    pub(crate) fn grown_bytes(&self) -> u64 {
        2 * self.main.len() as u64 * BUCKET_BYTES + self.overflow.len() as u64 * BUCKET_BYTES / 2
    }

    /// Doubles the bucket array, redistributing entries by their tag bits.
    pub(crate) fn grow(&mut self) {
        let old_main = std::mem::take(&mut self.main);
        let old_ov = std::mem::take(&mut self.overflow);
        let shift = self.bits - self.b0;
        let n = old_main.len() as u64;
        self.bits += 1;
        self.main = vec![[0; 8]; 1 << self.bits];
        for (i, bucket) in old_main.iter().enumerate() {
            let mut bk = bucket;
            loop {
                for &e in &bk[..SLOTS] {
                    if e != 0 {
                        let bit = ((e >> ADDR_BITS) >> shift) & 1;
                        self.place(false, (i as u64 + bit * n) as u32, e);
                    }
                }
                if bk[SLOTS] == 0 {
                    break;
                }
                bk = &old_ov[(bk[SLOTS] - 1) as usize];
            }
        }
    }

    /// All occupied entries, as (hash-derived bucket, entry) pairs, for tests.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.main
            .iter()
            .chain(self.overflow.iter())
            .map(|b| b[..SLOTS].iter().filter(|e| **e != 0).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u64) -> u64 {
        xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes())
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
