//! Zipfian key generators as YCSB defines them. A crate of its own so that the harness
//! (`spillway-bench`, which re-exports it as `spillway_bench::zipf`) and the engine's
//! payment generator share it without the engine depending on the harness.
//!
//! [`Zipfian`] draws ranks `0..n` with `P(rank r) ∝ 1 / (r + 1)^theta` using the
//! rejection-free method of Gray et al. ("Quickly generating billion-record synthetic
//! databases", SIGMOD'94) that YCSB's `ZipfianGenerator` implements: `zeta(n, theta)` is
//! computed once, after which each draw costs one uniform variate and one `powf`. Ranks
//! 0 and 1 get their exact probabilities; later ranks follow the method's continuous
//! approximation (rank 2 comes out about 17% too frequent at `theta = 0.99`), exactly as
//! in YCSB, so results stay comparable with YCSB's.
//!
//! [`ScrambledZipfian`] is YCSB's `ScrambledZipfianGenerator`: it draws a rank from a
//! [`Zipfian`] and maps it to an item with a 64-bit FNV-1a hash modulo `n`, so the hot
//! items are spread over the key space instead of clustered at its start (which would
//! flatter stores with range locality). As in YCSB, distinct ranks can hash to the same
//! item, so a few items are slightly hotter than their rank says and a few are never
//! drawn.

use rand::Rng;

/// The skew YCSB uses by default (`zipfianconstant=0.99`).
pub const YCSB_THETA: f64 = 0.99;

/// `zeta(n, theta) = sum_{i=1..=n} 1 / i^theta`.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// Zipfian ranks in `0..n`: rank 0 is the most frequent.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    zeta2: f64,
    eta: f64,
    half_pow_theta: f64,
}

impl Zipfian {
    /// A generator over `n` ranks (`n >= 1`) with skew `theta` in `(0, 1)`. Computes
    /// `zeta(n, theta)`, which takes time linear in `n` (about 20 ms per million items).
    ///
    /// # Panics
    /// If `n == 0` or `theta` is outside `(0, 1)`.
    pub fn new(n: u64, theta: f64) -> Self {
        assert!(n > 0, "a zipfian distribution needs at least one item");
        assert!(theta > 0.0 && theta < 1.0, "zipfian theta must be in (0, 1), got {theta}");
        let mut z = Zipfian {
            n: 0,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan: 0.0,
            zeta2: zeta(2, theta),
            eta: 0.0,
            half_pow_theta: 0.5f64.powf(theta),
        };
        z.grow_to(n);
        z
    }

    /// Extends the distribution to `n` ranks (no-op if it has as many), adding the new
    /// terms of `zeta(n)` one by one (YCSB's growing item count for `latest`); the result
    /// is exactly `Zipfian::new(n, theta)`.
    pub fn grow_to(&mut self, n: u64) {
        if n <= self.n {
            return;
        }
        for i in self.n + 1..=n {
            self.zetan += 1.0 / (i as f64).powf(self.theta);
        }
        self.n = n;
        self.eta = if n <= 2 {
            // The closed form divides by zero for n <= 2; the two explicit branches of
            // `sample` cover every draw there.
            0.0
        } else {
            (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
        };
    }

    /// Number of ranks.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The skew parameter.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The exact probability of `rank` (for tests and reports).
    pub fn probability(&self, rank: u64) -> f64 {
        if rank >= self.n {
            return 0.0;
        }
        1.0 / ((rank + 1) as f64).powf(self.theta) / self.zetan
    }

    /// Draws a rank in `0..n`.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + self.half_pow_theta {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// 64-bit FNV-1a over the eight little-endian bytes of `v`, as YCSB's `fnvhash64`.
#[inline]
pub fn fnv1a64(mut v: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01B3;
    let mut h = OFFSET_BASIS;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(PRIME);
        v >>= 8;
    }
    h
}

/// YCSB's scrambled zipfian: zipfian popularity, hot items spread by an FNV hash.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    inner: Zipfian,
}

impl ScrambledZipfian {
    /// A generator of items in `0..n` with skew `theta` (see [`Zipfian::new`]).
    pub fn new(n: u64, theta: f64) -> Self {
        ScrambledZipfian { inner: Zipfian::new(n, theta) }
    }

    /// The item that rank `rank` maps to: `|fnv1a64(rank)| mod n`, with the absolute
    /// value of the hash taken as a signed 64-bit integer, as YCSB's Java code does.
    #[inline]
    pub fn item_of_rank(&self, rank: u64) -> u64 {
        (fnv1a64(rank) as i64).wrapping_abs() as u64 % self.inner.n
    }

    /// The unscrambled generator.
    pub fn ranks(&self) -> &Zipfian {
        &self.inner
    }

    /// Draws an item in `0..n`.
    #[inline]
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.item_of_rank(self.inner.sample(rng))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    const DRAWS: u64 = 1_000_000;

    fn counts(n: u64, mut draw: impl FnMut() -> u64) -> Vec<u64> {
        let mut c = vec![0u64; n as usize];
        for _ in 0..DRAWS {
            let x = draw();
            assert!(x < n, "draw {x} out of range 0..{n}");
            c[x as usize] += 1;
        }
        c
    }

    fn assert_near(observed: u64, p: f64, what: &str) {
        let f = observed as f64 / DRAWS as f64;
        // 5 standard deviations of a binomial proportion, plus 1% relative slack.
        let sd = (p * (1.0 - p) / DRAWS as f64).sqrt();
        let tol = 5.0 * sd + 0.01 * p;
        assert!(
            (f - p).abs() <= tol,
            "{what}: observed frequency {f:.5}, expected {p:.5} ± {tol:.5}"
        );
    }

    #[test]
    fn zeta_small_values() {
        assert!((zeta(1, 0.99) - 1.0).abs() < 1e-12);
        assert!((zeta(2, 0.5) - (1.0 + 1.0 / 2f64.sqrt())).abs() < 1e-12);
    }

    #[test]
    fn zipfian_rank_frequencies_match_theory() {
        let n = 1000;
        let z = Zipfian::new(n, YCSB_THETA);
        let mut rng = SmallRng::seed_from_u64(7);
        let c = counts(n, || z.sample(&mut rng));
        // Ranks 0 and 1 have exact branches in the algorithm.
        for rank in [0, 1] {
            assert_near(c[rank as usize], z.probability(rank), &format!("rank {rank}"));
        }
        // Later ranks follow Gray et al.'s continuous approximation (as in YCSB): close,
        // not exact.
        for rank in [2, 9, 99] {
            let f = c[rank as usize] as f64 / DRAWS as f64;
            let p = z.probability(rank);
            assert!((f / p - 1.0).abs() < 0.25, "rank {rank}: observed {f:.5}, exact {p:.5}");
        }
        // Popularity falls with rank.
        assert!(c[0] > c[1] && c[1] > c[9] && c[9] > c[99]);
    }

    #[test]
    fn scrambled_hottest_item_matches_rank_one() {
        let n = 10_000;
        let z = ScrambledZipfian::new(n, YCSB_THETA);
        let mut rng = SmallRng::seed_from_u64(42);
        let c = counts(n, || z.sample(&mut rng));
        let hot = z.item_of_rank(0);
        // Ranks that collide with rank 0's item add their (tiny) probabilities.
        let p: f64 =
            (0..n).filter(|&r| z.item_of_rank(r) == hot).map(|r| z.ranks().probability(r)).sum();
        assert_near(c[hot as usize], p, "hottest item");
        let max_item = (0..n as usize).max_by_key(|&i| c[i]).unwrap() as u64;
        assert_eq!(max_item, hot, "the item of rank 0 is the most frequent");
    }

    #[test]
    fn scrambling_spreads_hot_items() {
        let n = 1_000_000;
        let z = ScrambledZipfian::new(n, YCSB_THETA);
        // The ten hottest items must not sit in the first 1% of the key space together.
        let hot: Vec<u64> = (0..10).map(|r| z.item_of_rank(r)).collect();
        assert!(hot.iter().all(|&i| i < n));
        assert!(hot.iter().filter(|&&i| i < n / 100).count() < 5, "{hot:?}");
        // Unscrambled, they would be 0..10.
        assert_ne!(hot, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn tiny_domains() {
        let mut rng = SmallRng::seed_from_u64(1);
        for n in 1..=3 {
            let z = ScrambledZipfian::new(n, YCSB_THETA);
            for _ in 0..10_000 {
                assert!(z.sample(&mut rng) < n);
            }
        }
    }

    #[test]
    fn fnv_is_ycsb_fnv1a() {
        // FNV-1a of eight zero bytes.
        assert_eq!(fnv1a64(0), 0xA8C7_F832_281A_39C5);
    }
}
