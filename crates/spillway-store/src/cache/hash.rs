//! The cache's key hasher: deterministic for a given seed, cheap for integer keys.
//!
//! Integers are folded into the state with one 64x64->128-bit multiply each (the
//! "folded multiply" of foldhash/wyhash); byte strings go through xxh3 seeded with the
//! current state. `finish` folds once more so that both the low bits (hashbrown's
//! bucket index, the sketch's block) and the top bits (hashbrown's tag) are mixed.
//! The same hash serves the map, the frequency sketch and the doorkeeper, as Caffeine
//! derives all of them from `hashCode()`.

use std::hash::{BuildHasher, Hasher};

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;
const FINISH: u64 = 0xa076_1d64_78bd_642f;

#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Builds [`SeededHasher`]s starting from a state derived from the cache's seed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeededState {
    start: u64,
}

impl SeededState {
    pub(crate) fn new(seed: u64) -> Self {
        SeededState { start: folded_multiply(seed ^ 0x243f_6a88_85a3_08d3, MUL) | 1 }
    }
}

impl BuildHasher for SeededState {
    type Hasher = SeededHasher;

    #[inline]
    fn build_hasher(&self) -> SeededHasher {
        SeededHasher { state: self.start }
    }
}

/// See the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeededHasher {
    state: u64,
}

impl Hasher for SeededHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(bytes, self.state);
        self.state = folded_multiply(self.state ^ h, MUL);
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.state = folded_multiply(self.state ^ i, MUL);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        folded_multiply(self.state, FINISH)
    }
}
