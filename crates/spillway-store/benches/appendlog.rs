//! Criterion micro-benchmark of list appends: appendlog beside hashlog's list merge
//! and MemStore, 100-byte elements round-robin over 1024 lists, with lists growing for
//! the whole run (under a 32 MiB budget they outgrow memory, where hashlog re-copies a
//! list whose record left the mutable region and appendlog appends to its last chunk).
//! Run: `cargo bench -p spillway-store --bench appendlog`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use spillway_store::{
    AppendLogOptions, AppendLogStore, HashLogOptions, HashLogStore, MemStore, NamespaceSpec,
    StateStore, StoreOptions,
};

const LISTS: u64 = 1024;

fn stores(dir: &std::path::Path) -> Vec<Box<dyn StateStore>> {
    let opts = |name: &str| {
        StoreOptions::new(dir.join(name))
            .memory_budget(32 << 20)
            .namespace(NamespaceSpec::list("window"))
    };
    let h = || HashLogOptions::default().page_size(4 << 20);
    vec![
        Box::new(
            AppendLogStore::open(opts("appendlog"), AppendLogOptions::default().hashlog(h()))
                .expect("appendlog"),
        ),
        Box::new(HashLogStore::open(opts("hashlog"), h()).expect("hashlog")),
        // The in-memory reference: its whole state must fit its budget.
        Box::new(MemStore::open(opts("mem").memory_budget(4 << 30)).expect("mem")),
    ]
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stores = stores(dir.path());
    let mut g = c.benchmark_group("list");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));
    g.sample_size(10);
    let elem = [7u8; 100];
    for s in &mut stores {
        let ns = s.namespace("window").expect("ns");
        let name = s.name();
        let mut i = 0u64;
        g.bench_function(format!("{name}/append"), |b| {
            b.iter(|| {
                i += 1;
                s.merge(ns, &(i % LISTS).to_be_bytes(), black_box(&elem)).expect("append");
            })
        });
        let st = s.stats();
        eprintln!(
            "{name}: {i} appends, {} disk reads, {} bytes written, {} in memory",
            st.disk_reads, st.bytes_written, st.bytes_in_memory
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
