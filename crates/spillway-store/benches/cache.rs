//! Criterion micro-benchmarks of the L1 cache policy (`cache::WTinyLfu`): `u64` keys and
//! values, a capacity of 2^20 entries, filled. `hit/zipf` and `hit/uniform` read present
//! keys (Zipf(0.99) or uniform over the keys, precomputed) with the policy's effect (a
//! sketch increment and a relink); `peek/*` is the bare lookup for comparison;
//! `miss-evict` inserts a new key into the full cache, which evicts one entry.
//! Run: `cargo bench -p spillway-store --bench cache`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spillway_store::cache::{CacheConfig, WTinyLfu};

const ENTRIES: u64 = 1 << 20;
/// Precomputed keys per read pattern (a power of two, read round-robin).
const SAMPLES: usize = 1 << 20;

/// xorshift64*: a cheap deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Spreads ranks over the key space (a bijection on 0..ENTRIES: the multiplier is odd),
/// so the hot keys are not the first slots filled.
fn key_of(rank: u64) -> u64 {
    rank.wrapping_mul(0x9e37_79b1) % ENTRIES
}

fn zipf_keys(s: f64, rng: &mut Rng) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(ENTRIES as usize);
    let mut acc = 0.0;
    for r in 1..=ENTRIES {
        acc += 1.0 / (r as f64).powf(s);
        cdf.push(acc);
    }
    (0..SAMPLES)
        .map(|_| {
            let u = rng.unit() * acc;
            key_of(cdf.partition_point(|&c| c < u) as u64)
        })
        .collect()
}

fn filled() -> WTinyLfu<u64, u64> {
    let mut c = WTinyLfu::new(CacheConfig::new(ENTRIES).seed(1));
    for k in 0..ENTRIES {
        c.insert(k, k, 1, &mut |_, _| unreachable!("no eviction while filling"));
    }
    c
}

fn bench(c: &mut Criterion) {
    let mut rng = Rng(0x5eed);
    let zipf = zipf_keys(0.99, &mut rng);
    let uniform: Vec<u64> = (0..SAMPLES).map(|_| rng.next() % ENTRIES).collect();

    let mut g = c.benchmark_group("cache-1M");
    g.throughput(Throughput::Elements(1));
    for (name, keys) in [("hit/zipf", &zipf), ("hit/uniform", &uniform)] {
        let mut cache = filled();
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                let k = keys[i & (SAMPLES - 1)];
                i = i.wrapping_add(1);
                black_box(cache.get(&k));
            })
        });
        assert_eq!(cache.stats().misses, 0, "{name}: every read hits");
    }

    // The lookup alone (no policy effect), as a baseline for the hits.
    for (name, keys) in [("peek/zipf", &zipf), ("peek/uniform", &uniform)] {
        let cache = filled();
        let mut i = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                let k = keys[i & (SAMPLES - 1)];
                i = i.wrapping_add(1);
                black_box(cache.peek(&k));
            })
        });
    }

    let mut cache = filled();
    let mut next = ENTRIES;
    let mut evicted = 0u64;
    g.bench_function("miss-evict", |b| {
        b.iter(|| {
            cache.insert(next, next, 1, &mut |k, _| evicted = evicted.wrapping_add(k));
            next += 1;
        })
    });
    black_box(evicted);
    assert_eq!(cache.len() as u64, ENTRIES);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
