//! # spillway-bench
//!
//! Spillway's benchmark harness. The `spillway` binary is a thin shell over it.
//!
//! - [`store_bench`]: `spillway bench store`, the state stores side by side on the
//!   standard workloads (`rmw-uniform`, `rmw-zipf`, `readwrite`, `get`), with HDR
//!   latency percentiles, peak RSS, a text table, throughput ratios and a JSON report.
//! - [`engine_bench`]: the engine's benchmarks (`spillway bench engine`, `bench windows`,
//!   `bench holistic`): Railgun's Q1, windowed aggregations and holistic aggregates over
//!   generated payments, each store side by side, run through the engine's one driver.
//! - [`disk_bench`]: `spillway bench disk`, the disk's random 4 KiB `O_DIRECT` read
//!   rate (the ceiling of a store whose reads miss memory).
//! - [`cache_bench`]: `spillway bench cache`, the DEBS'22 synthetic application (large
//!   objects, zipf read-modify-writes) over memory, Redis-only and tiered stores.
//! - [`cache_sim`]: `spillway cache sim`, hit ratios of the store's W-TinyLFU against
//!   LRU, ARC, S3-FIFO and LIRS (ports of Caffeine's simulator policies) on key traces.
//! - [`checkpoint`]: `spillway bench checkpoint`, one checkpoint after a few updates
//!   to a large state and the recovery of it (hashlog incremental, hashlog with a whole
//!   index snapshot per checkpoint, RocksDB).
//! - [`workload`]: streaming state-access workloads (Gadget-class): experiments, event
//!   generation, the operator state machines, the replay of generated and outside
//!   traces against the stores.
//! - [`trace`]: state-access traces (binary and Gadget text, plain, gzip or xz),
//!   characterization, the checks of outside traces (Gadget's dump defects).
//! - [`event_detection`]: the DEBS'22 paper's real application, spatio-temporal event
//!   detection over geotagged posts with a quadtree per window, on cacheable collections
//!   (the `event_detection` example runs it over the tiered store).
//! - [`phase`]: `spillway bench phase`, the phase-change experiment (point updates,
//!   then range reads on one namespace) for the adaptive store.
//! - [`report`]: the HTML report with SVG plots (`spillway report`).
//! - [`zipf`]: YCSB's zipfian and scrambled-zipfian key generators.
//! - [`machine`]: what results are recorded with (CPU, kernel, date, peak RSS).
//! - [`units`]: parsing of `256MiB`-style sizes and `10M`-style counts.

pub mod cache_bench;
pub mod cache_sim;
pub mod checkpoint;
pub mod disk_bench;
pub mod engine_bench;
pub mod event_detection;
pub mod machine;
pub mod phase;
pub mod report;
pub mod shared_bench;
pub mod store_bench;
pub mod trace;
pub mod units;
pub mod workload;
/// YCSB's zipfian generators (the `spillway-zipf` crate, shared with the engine).
pub use spillway_zipf as zipf;
