//! Criterion micro-benchmarks of the store components: in-memory rmw, get and put on
//! hashlog beside MemStore (and RocksStore with `--features rocksdb`), over 100k
//! 8-byte keys. Run: `cargo bench -p spillway-store --bench hashlog [--features rocksdb]`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use spillway_store::{
    merges, HashLogOptions, HashLogStore, MemStore, NamespaceSpec, Rmw, StateStore, StoreOptions,
};

const KEYS: u64 = 100_000;

fn stores(dir: &std::path::Path) -> Vec<Box<dyn StateStore>> {
    let opts = |name: &str| {
        StoreOptions::new(dir.join(name))
            .memory_budget(256 << 20)
            .namespace(NamespaceSpec::with_merge("state", merges::add_u64()))
    };
    let v: Vec<Box<dyn StateStore>> = vec![
        Box::new(HashLogStore::open(opts("hashlog"), HashLogOptions::default()).expect("hashlog")),
        Box::new(MemStore::open(opts("mem")).expect("mem")),
    ];
    #[cfg(feature = "rocksdb")]
    let v = {
        let mut v = v;
        v.push(Box::new(spillway_store::RocksStore::open(opts("rocksdb")).expect("rocksdb")));
        v
    };
    v
}

/// A cheap deterministic key sequence (an LCG over the key space).
fn next_key(state: &mut u64) -> [u8; 8] {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*state >> 33) % KEYS).to_be_bytes()
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores = stores(dir.path());
    for s in &mut stores {
        let ns = s.namespace("state").expect("ns");
        for k in 0..KEYS {
            s.put(ns, &k.to_be_bytes(), &0u64.to_le_bytes()).expect("load");
        }
    }
    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(1));
    for s in &mut stores {
        let ns = s.namespace("state").expect("ns");
        let name = s.name();
        let mut st = 1u64;
        g.bench_function(format!("{name}/rmw"), |b| {
            b.iter(|| {
                let k = next_key(&mut st);
                s.rmw(ns, &k, &mut |old, out| {
                    let v = old.map_or(0, |o| u64::from_le_bytes(o.try_into().unwrap_or([0; 8])));
                    out.extend_from_slice(&(v + 1).to_le_bytes());
                    Rmw::Put
                })
                .expect("rmw");
            })
        });
        let mut out = Vec::with_capacity(16);
        g.bench_function(format!("{name}/get"), |b| {
            b.iter(|| {
                let k = next_key(&mut st);
                black_box(s.get_into(ns, &k, &mut out).expect("get"));
            })
        });
        g.bench_function(format!("{name}/put"), |b| {
            b.iter(|| {
                let k = next_key(&mut st);
                s.put(ns, &k, &st.to_le_bytes()).expect("put");
            })
        });
        g.bench_function(format!("{name}/checkpoint-100k-keys"), |b| {
            b.iter_batched(
                || (),
                |()| black_box(s.checkpoint().expect("checkpoint")),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(std::time::Duration::from_millis(300)).measurement_time(std::time::Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
