//! `spillway bench ...`: one module per benchmark, each parsing its flags into the
//! configuration of its `spillway_bench` (or `engine_bench`) harness and printing the
//! table; [`rows`] holds the result rows that `workload`, `replay` and `suite` share.

use anyhow::Result;
use clap::Subcommand;

pub mod cache;
pub mod checkpoint;
pub mod disk;
pub mod engine;
pub mod holistic;
pub mod phase;
pub mod replay;
mod rows;
pub mod shared;
pub mod store;
pub mod suite;
pub mod windows;
pub mod workload;

/// `spillway bench`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Run the state stores side by side on the store workloads and print a table.
    ///
    /// Workloads: rmw-uniform and rmw-zipf (rmw +1 on 8-byte counters, 1M keys),
    /// readwrite (the Samza/APSys'18 ReadWrite query: get and put of a 116-byte
    /// record, 10M ids under a 256 MiB budget, so state exceeds memory), readwrite-zipf
    /// (the same with zipfian 0.99 ids) and get (point reads after a load). Each store runs each workload on a fresh store.
    Store(store::StoreArgs),
    /// Measure the disk's random 4 KiB read rate with O_DIRECT at queue depth 1 (the
    /// ceiling of a store whose reads miss memory): writes a file once, reads random
    /// blocks of it for a fixed time, deletes it.
    Disk(disk::DiskArgs),
    /// Railgun's Q1 (SUM and COUNT per card over a sliding window) on generated payments,
    /// the stores side by side (RocksDB is the Flink-style baseline: a get and a put per
    /// event and per expiry), or several window lengths side by side.
    Engine(engine::EngineBenchArgs),
    /// Run one streaming-state experiment (TOML or Gadget config) against the stores:
    /// the operator's state accesses, replayed with HDR latencies.
    Workload(workload::WorkloadArgs),
    /// Replay an outside trace (Spillway binary or Gadget text, optionally .gz or .xz)
    /// against the stores, with the rows of `bench workload`; Gadget's trailing garbage
    /// rows and missing first op are reported as warnings, not replayed.
    Replay(replay::ReplayArgs),
    /// All 15 Gadget operators (Gadget's defaults) and YCSB A, D and F against the
    /// stores, one row per (workload, store).
    Suite(suite::SuiteArgs),
    /// The phase-change experiment: one namespace serves point updates, then range
    /// reads; the adaptive store against static layouts, per phase.
    Phase(phase::PhaseArgs),
    /// One checkpoint after a few updates to a large state: its pause and bytes, then
    /// the recovery time (hashlog incremental, hashlog with a whole index snapshot per
    /// checkpoint, RocksDB).
    Checkpoint(checkpoint::CheckpointArgs),
    /// The DEBS'22 multi-level cache's synthetic application: large objects, zipf
    /// read-modify-writes, in memory, Redis only and tiered (L1 at 10-30% over Redis over
    /// hashlog, and L1 over hashlog), each in its own process; slowdowns, hit ratios and
    /// peak RSS.
    Cache(cache::CacheBenchArgs),
    /// Window patterns over one stream (CCGrid'17 multi-pattern analytics): each
    /// pattern's window contents kept as per-operator copies (Flink's ListState per
    /// operator) or shared (each event once, windows hold references), per pattern count
    /// and store; peak state bytes, events/s, p99 and whether the window results are equal.
    Shared(shared::SharedBenchArgs),
    /// Windowed aggregation (TUMBLE and HOP SUM/COUNT per card, NEXMark q5's shape) on
    /// generated payments, the stores side by side (RocksDB state is the Flink-style
    /// baseline), with throughput against Flink's published q5 figure per core.
    Windows(windows::WindowsBenchArgs),
    /// Holistic aggregates (COUNT(DISTINCT), MEDIAN, PERCENTILE_CONT, FIRST_VALUE,
    /// LAST_VALUE) over a full sliding window (7 days, 10^5 events per card by default):
    /// order-statistics trees in the store against the inline layout that rewrites the
    /// whole window per event, side by side, with their throughput ratio.
    Holistic(holistic::HolisticBenchArgs),
}

/// Runs a `spillway bench` command.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Store(a) => store::run(a),
        BenchCommand::Disk(a) => disk::run(a),
        BenchCommand::Engine(a) => engine::run(a),
        BenchCommand::Workload(a) => workload::run(a),
        BenchCommand::Replay(a) => replay::run(a),
        BenchCommand::Suite(a) => suite::run(a),
        BenchCommand::Phase(a) => phase::run(a),
        BenchCommand::Checkpoint(a) => checkpoint::run(a),
        BenchCommand::Cache(a) => cache::run(a),
        BenchCommand::Shared(a) => shared::run(&a),
        BenchCommand::Windows(a) => windows::run(a),
        BenchCommand::Holistic(a) => holistic::run(a),
    }
}
