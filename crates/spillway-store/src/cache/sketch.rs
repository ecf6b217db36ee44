//! The TinyLFU frequency sketch: a 4-bit count-min sketch with periodic aging, and an
//! optional doorkeeper in front of it.
//!
//! A port of Caffeine's `FrequencySketch` (com.github.benmanes.caffeine.cache):
//!
//! - **Counters**: 4 bits each, 16 to a `u64` word, so a count saturates at 15.
//! - **Block layout**: the table is an array of 64-byte blocks (8 words). A key hashes
//!   to one block and its 4 counters (the depth of the count-min sketch) all live in
//!   that block: counter `i` sits in word `2i` or `2i + 1` of the block, at one of its
//!   16 nibbles. One key costs one cache line, where a textbook count-min sketch would
//!   touch four random lines.
//! - **Width**: the table has `ceil_pow2(maximum)` words (at least one block), that is
//!   16 counters per cached entry, as Caffeine sizes it (`ensureCapacity`).
//! - **Aging** (`reset()`, TinyLFU's reset): after `sample_size = 10 x maximum`
//!   increments that changed a counter, every counter is halved. Halving truncates odd
//!   counts, so the sample count is corrected by the number of odd counters found
//!   (divided by the depth, 4) before being halved too, exactly as Caffeine does.
//! - **Estimate** (`frequency()`): the minimum of the key's 4 counters. Before a reset
//!   it never underestimates the true count (capped at 15).
//!
//! Divergences from Caffeine:
//! - Caffeine spreads a 32-bit `hashCode()` (`spread`) and draws the counter positions
//!   from a second round (`rehash`) of that same 32-bit value, so two keys with the same
//!   spread hash share all four counters. Here the input is the cache's 64-bit key hash:
//!   after one mixing round, the low half picks the block and the high half the
//!   counters, so keys only collide fully if they agree on 64 bits.
//! - Blocks are aligned to cache lines (Java cannot align them; Caffeine relies on the
//!   adjacent-line prefetcher), and the table asks for transparent huge pages.
//! - Growing the table keeps the counts (see
//!   [`ensure_capacity`](FrequencySketch::ensure_capacity)); Caffeine's forgets them.
//!
//! ## Doorkeeper
//! With [`FrequencySketch::new`]`(true)` a small blocked Bloom filter sits in front of
//! the counters, as in TinyLFU (Einziger, Friedman and Manes, "TinyLFU: A Highly
//! Efficient Cache Admission Policy", ACM ToS 2017, §3.4.2) and Caffeine's simulator
//! (`PeriodicResetCountMin4` with its `doorkeeper` membership filter): the first
//! increment of a key in a sample period only sets its doorkeeper bits; later ones
//! reach the counters. The estimate is the counters' minimum plus one if the key is in
//! the doorkeeper (capped at 15), and a reset clears the doorkeeper. Keys seen once
//! (most keys of a scan) then never occupy counters, so the counters of the keys that
//! matter collide less. As in the simulator, only increments that reach the counters
//! count towards the sample period. The filter has 4 bits per key in one 64-byte block
//! and as many words as the counter table (64 bits per word of counters).

/// Counts are 4 bits wide: the largest estimate.
pub const MAX_FREQUENCY: u8 = 15;

/// Halves every counter in a word: after the shift, clears the bit each counter would
/// take from its upper neighbour (Caffeine's `RESET_MASK`).
const RESET_MASK: u64 = 0x7777_7777_7777_7777;
/// The low bit of every counter in a word (Caffeine's `ONE_MASK`): counts odd counters.
const ONE_MASK: u64 = 0x1111_1111_1111_1111;
/// Words per block: 8 x 8 bytes = one 64-byte cache line.
const BLOCK_WORDS: usize = 8;
/// The sample period is this many times the maximum (Caffeine: `10 * maximum`).
const SAMPLE_FACTOR: u64 = 10;
/// Largest table, in words (Caffeine: `Integer.MAX_VALUE >>> 1`).
const MAX_WORDS: u64 = 1 << 30;
/// Bits per doorkeeper block (one cache line).
const DOORKEEPER_BLOCK_BITS: u64 = (BLOCK_WORDS * 64) as u64;

/// An array of 64-byte blocks aligned to cache lines (Caffeine's blocks cannot be
/// aligned in Java; here a key's counters always sit in exactly one line), zeroed by the
/// allocator and backed by transparent huge pages where the kernel allows, since the
/// sketch is read at random.
#[derive(Clone, Debug, Default)]
struct Blocks {
    /// `len * 8` words from `base`, plus up to 7 words of slack for the alignment.
    words: Vec<u64>,
    /// Index of the first word of block 0 (64-byte aligned).
    base: usize,
    /// Number of blocks.
    len: usize,
}

impl Blocks {
    fn zeroed(len: usize) -> Blocks {
        // `vec![0; n]` asks the allocator for zeroed memory (fresh pages), so the huge
        // page advice applies before the pages are touched.
        let words = vec![0u64; len * BLOCK_WORDS + BLOCK_WORDS - 1];
        let misalign = (words.as_ptr() as usize % 64) / 8;
        let base = (BLOCK_WORDS - misalign) % BLOCK_WORDS;
        crate::hot::advise_huge_pages(&words);
        Blocks { words, base, len }
    }

    /// A copy with `len` blocks (a multiple of the current number): every block lands in
    /// each new block its keys can map to, `b + i x self.len`.
    fn grown(&self, len: usize) -> Blocks {
        let mut g = Blocks::zeroed(len);
        if self.len > 0 {
            let old = &self.words[self.base..self.base + self.len * BLOCK_WORDS];
            for chunk in g.words[g.base..g.base + len * BLOCK_WORDS].chunks_exact_mut(old.len()) {
                chunk.copy_from_slice(old);
            }
        }
        g
    }

    #[inline]
    fn block(&self, i: usize) -> &[u64; BLOCK_WORDS] {
        let w = self.base + i * BLOCK_WORDS;
        (&self.words[w..w + BLOCK_WORDS]).try_into().expect("a block is 8 words")
    }

    #[inline]
    fn block_mut(&mut self, i: usize) -> &mut [u64; BLOCK_WORDS] {
        let w = self.base + i * BLOCK_WORDS;
        (&mut self.words[w..w + BLOCK_WORDS]).try_into().expect("a block is 8 words")
    }

    #[inline]
    fn prefetch(&self, i: usize) {
        crate::hot::prefetch(&self.words[self.base + i * BLOCK_WORDS]);
    }

    fn words_mut(&mut self) -> &mut [u64] {
        &mut self.words[self.base..self.base + self.len * BLOCK_WORDS]
    }
}

/// A probabilistic multiset estimating how often each key was seen recently, up to 15,
/// with periodic halving of all counts. Keys are given by their 64-bit hash. See the
/// [module docs](self).
///
/// It starts uninitialized (estimates are 0 and increments are ignored) until
/// [`ensure_capacity`](Self::ensure_capacity) sizes it, as Caffeine's sketch does, so a
/// cache far below its capacity pays nothing for it.
#[derive(Clone, Debug)]
pub struct FrequencySketch {
    /// Counters, 16 per word, 8 words per block. Empty: uninitialized.
    table: Blocks,
    /// Number of blocks minus one (a power of two minus one).
    block_mask: usize,
    /// Increments between two resets.
    sample_size: u64,
    /// Increments since the last reset (corrected at each reset).
    size: u64,
    /// Whether a doorkeeper filters first sightings.
    doorkeeper_on: bool,
    /// The doorkeeper's bits, 512 per block (empty if off).
    doorkeeper: Blocks,
    /// Number of doorkeeper blocks minus one.
    doorkeeper_mask: usize,
    /// Resets so far.
    resets: u64,
}

impl FrequencySketch {
    /// An uninitialized sketch, with or without a doorkeeper in front of its counters.
    pub fn new(doorkeeper: bool) -> Self {
        FrequencySketch {
            table: Blocks::default(),
            block_mask: 0,
            sample_size: 0,
            size: 0,
            doorkeeper_on: doorkeeper,
            doorkeeper: Blocks::default(),
            doorkeeper_mask: 0,
            resets: 0,
        }
    }

    /// A sketch sized for a cache of `maximum` entries (see
    /// [`ensure_capacity`](Self::ensure_capacity)).
    pub fn with_capacity(maximum: u64, doorkeeper: bool) -> Self {
        let mut s = FrequencySketch::new(doorkeeper);
        s.ensure_capacity(maximum);
        s
    }

    /// Sizes the sketch for a cache of `maximum` entries: `ceil_pow2(maximum)` words of
    /// counters (at least one 64-byte block, at most 2^30 words) and a sample period of
    /// `10 x maximum` increments (Caffeine's `ensureCapacity`). Never shrinks the table.
    ///
    /// Divergence: Caffeine forgets all counts when the table grows. Here a key's block
    /// is its hash masked to the number of blocks, so after growing by a factor `f` the
    /// keys of old block `b` map to one of the blocks `b + i x old_blocks` (`i < f`):
    /// the old block, and the doorkeeper's, is copied to each of them, so no estimate
    /// drops and the sketch can grow with the cache's entries from the first one.
    pub fn ensure_capacity(&mut self, maximum: u64) {
        let maximum = maximum.min(MAX_WORDS);
        let words = maximum.next_power_of_two().max(BLOCK_WORDS as u64) as usize;
        self.sample_size = if maximum == 0 { SAMPLE_FACTOR } else { SAMPLE_FACTOR * maximum };
        let blocks = words / BLOCK_WORDS;
        if self.table.len >= blocks {
            return;
        }
        self.table = self.table.grown(blocks);
        self.block_mask = blocks - 1;
        if self.doorkeeper_on {
            self.doorkeeper = self.doorkeeper.grown(blocks);
            self.doorkeeper_mask = blocks - 1;
        }
        if self.size >= self.sample_size {
            self.reset();
        }
    }

    /// Words of counters (0 while uninitialized).
    pub fn table_words(&self) -> usize {
        self.table.len * BLOCK_WORDS
    }

    /// Whether [`ensure_capacity`](Self::ensure_capacity) has sized the sketch.
    pub fn is_initialized(&self) -> bool {
        self.table.len > 0
    }

    /// Whether a doorkeeper filters first sightings.
    pub fn has_doorkeeper(&self) -> bool {
        self.doorkeeper_on
    }

    /// Increments between two resets (0 while uninitialized). The cache's hill climber
    /// samples the hit rate over as many requests (Caffeine's `sampleSize`).
    pub fn sample_size(&self) -> u64 {
        self.sample_size
    }

    /// How many resets (halvings) have happened.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Memory held by the counters and the doorkeeper, in bytes.
    pub fn memory_bytes(&self) -> usize {
        (self.table.words.len() + self.doorkeeper.words.len()) * 8
    }

    /// The estimated number of recent occurrences of the key with hash `hash`, at most
    /// [`MAX_FREQUENCY`]: the minimum of its 4 counters, plus its doorkeeper bit.
    #[inline]
    pub fn frequency(&self, hash: u64) -> u8 {
        if self.table.len == 0 {
            return 0;
        }
        let s = spread(hash);
        let block = self.table.block((s as u32 as usize) & self.block_mask);
        let counter_hash = (s >> 32) as u32;
        let mut min = MAX_FREQUENCY;
        for i in 0..4 {
            let (word, shift) = counter_at(counter_hash, i);
            min = min.min(((block[word] >> shift) & 0xf) as u8);
        }
        if self.doorkeeper_on && min < MAX_FREQUENCY && self.doorkeeper_contains(s) {
            min += 1;
        }
        min
    }

    /// Records one occurrence of the key with hash `hash`. With a doorkeeper, a key's
    /// first occurrence in a sample period only sets its doorkeeper bits. After
    /// [`sample_size`](Self::sample_size) increments that changed a counter, all counts
    /// are halved ([`reset`](Self::reset)).
    #[inline]
    pub fn increment(&mut self, hash: u64) {
        if self.table.len == 0 {
            return;
        }
        let s = spread(hash);
        if self.doorkeeper_on && !self.doorkeeper_put(s) {
            return;
        }
        let block = self.table.block_mut((s as u32 as usize) & self.block_mask);
        let counter_hash = (s >> 32) as u32;
        let mut added = false;
        for i in 0..4 {
            let (word, shift) = counter_at(counter_hash, i);
            let mask = 0xf << shift;
            if block[word] & mask != mask {
                block[word] += 1 << shift;
                added = true;
            }
        }
        if added {
            self.size += 1;
            if self.size >= self.sample_size {
                self.reset();
            }
        }
    }

    /// Starts loading the cache lines the next [`increment`](Self::increment) or
    /// [`frequency`](Self::frequency) of `hash` reads, so that they arrive while the
    /// caller looks the key up.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        if self.table.len == 0 {
            return;
        }
        let s = spread(hash);
        self.table.prefetch((s as u32 as usize) & self.block_mask);
        if self.doorkeeper_on {
            self.doorkeeper.prefetch(self.doorkeeper_bits(s).0);
        }
    }

    /// Halves every counter and clears the doorkeeper (TinyLFU's reset). The sample
    /// count is reduced by a quarter of the number of odd counters (the truncation
    /// error of halving, per key of depth 4) and then halved (Caffeine's `reset()`).
    pub fn reset(&mut self) {
        let mut odd = 0u64;
        for w in self.table.words_mut() {
            odd += u64::from((*w & ONE_MASK).count_ones());
            *w = (*w >> 1) & RESET_MASK;
        }
        self.size = self.size.saturating_sub(odd >> 2) >> 1;
        self.doorkeeper.words_mut().fill(0);
        self.resets += 1;
    }

    /// Whether all 4 doorkeeper bits of the (spread) hash are set.
    #[inline]
    fn doorkeeper_contains(&self, s: u64) -> bool {
        let (block, bits) = self.doorkeeper_bits(s);
        let block = self.doorkeeper.block(block);
        bits.iter().all(|&b| block[(b >> 6) as usize] & (1 << (b & 63)) != 0)
    }

    /// Sets the doorkeeper bits of the (spread) hash; returns whether all were set
    /// already (the key was seen in this sample period).
    #[inline]
    fn doorkeeper_put(&mut self, s: u64) -> bool {
        let (block, bits) = self.doorkeeper_bits(s);
        let block = self.doorkeeper.block_mut(block);
        let mut present = true;
        for b in bits {
            let w = &mut block[(b >> 6) as usize];
            let m = 1u64 << (b & 63);
            present &= *w & m != 0;
            *w |= m;
        }
        present
    }

    /// The doorkeeper block and the 4 bit positions (0..512) within it, from a remix of
    /// the spread hash independent of the counters' choice.
    #[inline]
    fn doorkeeper_bits(&self, s: u64) -> (usize, [u64; 4]) {
        let d = (s ^ (s >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let block = (d as usize) & self.doorkeeper_mask;
        let hi = d >> 28;
        let b = DOORKEEPER_BLOCK_BITS - 1;
        (block, [hi & b, (hi >> 9) & b, (hi >> 18) & b, (hi >> 27) & b])
    }
}

/// Word index (within the key's block) and bit shift of counter `i` (0..4): word
/// `2i + (h & 1)`, nibble `(h >> 1) & 15`, where `h` is byte `i` of the counter hash
/// (Caffeine's `frequency`/`increment` indexing).
#[inline]
fn counter_at(counter_hash: u32, i: u32) -> (usize, u32) {
    let h = counter_hash >> (i << 3);
    let index = (h >> 1) & 15;
    let offset = (h & 1) as usize;
    (offset + ((i as usize) << 1), index << 2)
}

/// One round of mixing of the cache's key hash (splitmix64's finalizer), the role of
/// Caffeine's `spread`: defends the block choice against a weak key hash.
#[inline]
fn spread(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
impl FrequencySketch {
    /// The 4 raw counters of a hash (tests).
    pub(crate) fn counters(&self, hash: u64) -> [u8; 4] {
        let s = spread(hash);
        let block = self.table.block((s as u32 as usize) & self.block_mask);
        let counter_hash = (s >> 32) as u32;
        let mut out = [0u8; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let (word, shift) = counter_at(counter_hash, i as u32);
            *o = ((block[word] >> shift) & 0xf) as u8;
        }
        out
    }

    /// Increments counted towards the sample period (tests).
    pub(crate) fn sample_count(&self) -> u64 {
        self.size
    }
}
