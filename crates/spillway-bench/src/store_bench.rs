//! `spillway bench store`: the state stores side by side in one process, on the
//! standard workloads.
//!
//! | workload | what one op does | keys | value |
//! |---|---|---|---|
//! | `rmw-uniform` | `rmw` +1 on a little-endian u64 counter, key uniform | 8-byte big-endian u64 | 8 bytes |
//! | `rmw-zipf` | the same, key drawn from YCSB's scrambled zipfian (0.99) | same | 8 bytes |
//! | `readwrite` | Samza/APSys'18 ReadWrite: `get` the record of a uniform id, `put` it back with count + 1 | same | 116 bytes: id u64, count u64, 100 bytes padding (little-endian) |
//! | `readwrite-zipf` | the same, ids drawn from YCSB's scrambled zipfian (0.99): a hot set that fits in the budget | same | same |
//! | `get` | after loading every key (not measured), a `get` of a uniform key | same | `value_size` bytes (default 8) |
//!
//! Each (store, workload) pair runs on a fresh store in a fresh directory, one after the
//! other, single-threaded; the same seed gives every store the same key sequence. Every
//! op is timed into an HDR histogram (1 ns to 60 s, 3 significant digits). Ops are timed
//! back to back with one clock read per op: an op's latency is the time from the end of
//! the previous op to its own end, so it includes drawing its key (a few ns) and
//! recording the previous latency. Throughput is ops divided by the wall time of the
//! measured phase.
//!
//! With `--batch N` (N > 1) the store is called once per N ops through the batched
//! operations ([`StateStoreExt::multi_rmw`], [`StateStoreExt::multi_get_with`], and
//! [`StateStore::prefetch`] before `readwrite`'s get/put pairs; see [`drive`]); the
//! clock is read once per batch and every op of a batch is recorded with the batch's
//! time, since none of them is complete before the batch is. The key sequence is the
//! same for every batch size.
//!
//! After the measured phase the harness reads the whole store back (not timed) and
//! checks it: the counters of `rmw-*` and `readwrite` sum to the number of ops, and
//! `get` found every key with its value. A mismatch is an error, not a result.
//!
//! With [`StoreBenchConfig::direct_io`] every store is opened with
//! [`StoreOptions::direct_io`], so its reads of state outside the budget reach the disk
//! rather than the OS page cache; each row then also records the read requests the
//! store directory's block device completed during the measured phase
//! (`/sys/dev/block/*/stat`: the whole device, so other processes' reads count too),
//! to compare with the disk's own random-read rate ([`crate::disk_bench`]).
//!
//! Peak RSS is the kernel's `VmHWM`, reset before each run through
//! `/proc/self/clear_refs`; it includes whatever the process held before the run
//! (the allocator may keep memory of earlier runs).

use spillway_store::StateStoreExt;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use spillway_store::{
    merges, NamespaceSpec, Ns, Rmw, StateStore, StoreKind, StoreOptions, StoreStats,
};

use crate::disk_bench::DiskProbeResult;
use crate::machine::{self, MachineInfo};
use crate::units::format_bytes;
use crate::zipf::{ScrambledZipfian, YCSB_THETA};

/// Name of the one namespace every benchmark store declares.
pub const NAMESPACE: &str = "state";
/// Bytes of padding in a `readwrite` record.
pub const READWRITE_PADDING: usize = 100;
/// Bytes of a `readwrite` record: id u64, count u64, padding.
pub const READWRITE_VALUE_LEN: usize = 16 + READWRITE_PADDING;
/// Progress is reported every this many ops.
const PROGRESS_EVERY: u64 = 1 << 16;

/// A store benchmark workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Workload {
    /// `rmw` increments of 8-byte counters, keys uniform.
    RmwUniform,
    /// `rmw` increments of 8-byte counters, keys zipfian (YCSB scrambled, 0.99).
    RmwZipf,
    /// Samza/APSys'18 ReadWrite: get then put of a 116-byte record, keys uniform.
    ReadWrite,
    /// Point gets of uniform keys after a load.
    Get,
    /// ReadWrite with ids from YCSB's scrambled zipfian (0.99).
    ReadWriteZipf,
}

impl Workload {
    /// Every workload, in the order `all` runs them.
    pub const ALL: [Workload; 5] = [
        Workload::RmwUniform,
        Workload::RmwZipf,
        Workload::ReadWrite,
        Workload::ReadWriteZipf,
        Workload::Get,
    ];

    /// The name used on command lines and in results.
    pub fn name(self) -> &'static str {
        match self {
            Workload::RmwUniform => "rmw-uniform",
            Workload::RmwZipf => "rmw-zipf",
            Workload::ReadWrite => "readwrite",
            Workload::ReadWriteZipf => "readwrite-zipf",
            Workload::Get => "get",
        }
    }

    /// Default sizes of this workload at `scale` (the standard sizes for [`Scale::Full`]).
    pub fn default_sizes(self, scale: Scale) -> Sizes {
        const MIB: u64 = 1 << 20;
        let (keys, ops, memory_budget) = match (self, scale) {
            (Workload::RmwUniform | Workload::RmwZipf, Scale::Full) => {
                (1_000_000, 10_000_000, 256 * MIB)
            }
            (Workload::ReadWrite | Workload::ReadWriteZipf, Scale::Full) => {
                (10_000_000, 10_000_000, 256 * MIB)
            }
            (Workload::Get, Scale::Full) => (1_000_000, 2_000_000, 256 * MIB),
            (Workload::RmwUniform | Workload::RmwZipf, Scale::Quick) => {
                (200_000, 1_000_000, 64 * MIB)
            }
            // 200k records of ~150 bytes in the log: about 30 MB, more than the pages a
            // 32 MiB budget leaves beside the index and buffers.
            (Workload::ReadWrite | Workload::ReadWriteZipf, Scale::Quick) => {
                (200_000, 1_000_000, 32 * MIB)
            }
            (Workload::Get, Scale::Quick) => (200_000, 400_000, 64 * MIB),
        };
        Sizes { keys, ops, value_size: self.fixed_value_size().unwrap_or(8), memory_budget }
    }

    /// The value size the workload fixes, if it does (`get` takes it from the config).
    pub fn fixed_value_size(self) -> Option<usize> {
        match self {
            Workload::RmwUniform | Workload::RmwZipf => Some(8),
            Workload::ReadWrite | Workload::ReadWriteZipf => Some(READWRITE_VALUE_LEN),
            Workload::Get => None,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Workload::ALL.into_iter().find(|w| w.name() == s).ok_or_else(|| {
            format!(
                "unknown workload {s:?}; expected one of rmw-uniform, rmw-zipf, readwrite, \
                 readwrite-zipf, get \
                 (or rmw for both rmw workloads, all for every workload)"
            )
        })
    }
}

/// Parses a comma-separated workload list. `rmw` stands for `rmw-uniform,rmw-zipf` and
/// `all` for every workload; duplicates are dropped, the first mention fixes the order.
pub fn parse_workloads(list: &str) -> std::result::Result<Vec<Workload>, String> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let ws: Vec<Workload> = match item {
            "all" => Workload::ALL.to_vec(),
            "rmw" => vec![Workload::RmwUniform, Workload::RmwZipf],
            w => vec![w.parse()?],
        };
        for w in ws {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    if out.is_empty() {
        return Err("empty workload list; name at least one workload".to_string());
    }
    Ok(out)
}

/// The stores this build can open, in [`StoreKind::ALL`] order (the baseline last).
/// The tiered store runs only when asked for by name (its levels are configured apart).
pub fn available_stores() -> Vec<StoreKind> {
    StoreKind::ALL.into_iter().filter(|k| k.available() && *k != StoreKind::Tiered).collect()
}

/// Fails with an actionable message if a store is not compiled into this build.
pub fn check_available(stores: &[StoreKind]) -> Result<()> {
    for k in stores {
        if !k.available() {
            bail!(
                "the {} store is not in this build; rebuild with `--features {}` (e.g. `cargo \
                 build --release -p spillway-cli --features {}`)",
                k.name(),
                k.name(),
                k.name()
            );
        }
    }
    Ok(())
}

/// Default sizes: the full sizes, or small ones that finish in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// The standard sizes (rmw: 1M keys, 10M ops; readwrite: 10M keys under
    /// 256 MiB, 10M ops; get: 1M keys, 2M ops).
    #[default]
    Full,
    /// Small sizes for a smoke run (200k keys; 1M rmw and readwrite ops, 400k gets;
    /// readwrite under 32 MiB so its state still exceeds memory).
    Quick,
}

/// The sizes one run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// Distinct keys (ids) the workload draws from.
    pub keys: u64,
    /// Measured ops.
    pub ops: u64,
    /// Value bytes.
    pub value_size: usize,
    /// Memory budget the store is opened with.
    pub memory_budget: u64,
}

/// What `spillway bench store` runs.
#[derive(Clone, Debug)]
pub struct StoreBenchConfig {
    /// Stores to compare; ratios are relative to the last one. Default:
    /// [`available_stores`].
    pub stores: Vec<StoreKind>,
    /// Workloads, run in this order. Default: all.
    pub workloads: Vec<Workload>,
    /// Which default sizes apply where no override is given. Default: full.
    pub scale: Scale,
    /// Overrides the workloads' key counts.
    pub keys: Option<u64>,
    /// Overrides the workloads' op counts.
    pub ops: Option<u64>,
    /// Value size of `get` (the other workloads fix theirs). Default 8.
    pub value_size: Option<usize>,
    /// Overrides the workloads' memory budgets.
    pub memory_budget: Option<u64>,
    /// Seed of the key sequences (the same for every store). Default 42.
    pub seed: u64,
    /// Directory under which each run gets a fresh, removed-afterwards store directory.
    /// Default: the system temporary directory.
    pub dir: Option<PathBuf>,
    /// No progress bars or per-run lines on stderr.
    pub quiet: bool,
    /// Read each store back after its run and check its contents. Default true.
    pub verify: bool,
    /// Ops per store call, each size run in turn: 1 is one call per op; larger sizes
    /// use the batched operations (see [`drive`]). Default `[1]`.
    pub batches: Vec<usize>,
    /// Open every store with direct I/O ([`StoreOptions::direct_io`]). Default false.
    pub direct_io: bool,
}

impl Default for StoreBenchConfig {
    fn default() -> Self {
        StoreBenchConfig {
            stores: available_stores(),
            workloads: Workload::ALL.to_vec(),
            scale: Scale::Full,
            keys: None,
            ops: None,
            value_size: None,
            memory_budget: None,
            seed: 42,
            dir: None,
            quiet: false,
            verify: true,
            batches: vec![1],
            direct_io: false,
        }
    }
}

impl StoreBenchConfig {
    /// The sizes `workload` runs with: its defaults at [`Self::scale`] with the
    /// overrides applied.
    pub fn sizes(&self, workload: Workload) -> Sizes {
        let d = workload.default_sizes(self.scale);
        Sizes {
            keys: self.keys.unwrap_or(d.keys),
            ops: self.ops.unwrap_or(d.ops),
            value_size: workload
                .fixed_value_size()
                .unwrap_or_else(|| self.value_size.unwrap_or(d.value_size)),
            memory_budget: self.memory_budget.unwrap_or(d.memory_budget),
        }
    }

    /// Checks the configuration before anything runs.
    pub fn validate(&self) -> Result<()> {
        ensure!(!self.stores.is_empty(), "no stores selected; name at least one with --stores");
        ensure!(!self.workloads.is_empty(), "no workloads selected");
        ensure!(
            !self.batches.is_empty() && self.batches.iter().all(|b| (1..=1 << 16).contains(b)),
            "--batch sizes must be between 1 and 65536, got {:?}",
            self.batches
        );
        check_available(&self.stores)?;
        for (i, s) in self.stores.iter().enumerate() {
            ensure!(!self.stores[..i].contains(s), "store {} is listed twice", s.name());
        }
        for &w in &self.workloads {
            let s = self.sizes(w);
            ensure!(s.keys > 0, "{w}: --keys must be at least 1");
            ensure!(s.ops > 0, "{w}: --ops must be at least 1");
            ensure!(
                s.value_size <= spillway_store::MAX_VALUE_LEN,
                "{w}: value size {} exceeds the stores' maximum of {} bytes",
                s.value_size,
                spillway_store::MAX_VALUE_LEN
            );
        }
        Ok(())
    }
}

/// One row of results: one store on one workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// Store name ("hashlog", "mem", "rocksdb").
    pub store: String,
    /// Workload name.
    pub workload: String,
    /// Distinct keys.
    pub keys: u64,
    /// Value bytes.
    pub value_size: usize,
    /// Measured ops.
    pub ops: u64,
    /// Ops per store call (1: one call per op; more: the batched operations).
    #[serde(default = "one")]
    pub batch: usize,
    /// Wall seconds of the measured phase.
    pub seconds: f64,
    /// `ops / seconds`.
    pub ops_per_sec: f64,
    /// Median op latency in microseconds.
    pub p50_us: f64,
    /// 99th percentile op latency in microseconds.
    pub p99_us: f64,
    /// 99.9th percentile op latency in microseconds.
    pub p999_us: f64,
    /// Largest op latency in microseconds.
    pub max_us: f64,
    /// Memory budget the store was opened with.
    pub memory_budget_bytes: u64,
    /// Peak resident set of the process during the run (`VmHWM`), 0 if unknown.
    pub peak_rss_bytes: u64,
    /// Whether the store was opened with direct I/O.
    #[serde(default)]
    pub direct_io: bool,
    /// Read requests per second the store directory's block device completed during
    /// the measured phase (whole device: other processes count too); absent where the
    /// device is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_reads_per_sec: Option<f64>,
    /// Records the store itself read from disk per second of the measured phase (its
    /// `disk_reads` counter; absent for stores that do not count them, RocksDB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_reads_per_sec: Option<f64>,
}

fn one() -> usize {
    1
}

/// A (store, workload) pair that could not run, and why (a mem store whose state
/// outgrows its budget, for instance).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Store name.
    pub store: String,
    /// Workload name.
    pub workload: String,
    /// The reason, for people.
    pub reason: String,
}

/// Everything one `spillway bench store` invocation measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    /// Completed runs, workload by workload, stores in the configured order.
    pub results: Vec<BenchResult>,
    /// Runs that could not complete because the store ran out of its memory budget.
    pub skipped: Vec<Skipped>,
    /// The disk's own random-read rate, when the caller probed it
    /// ([`crate::disk_bench::probe`]; `bench store --direct-io` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_probe: Option<DiskProbeResult>,
}

/// The JSON file `--json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct JsonReport<'a> {
    /// The rows.
    pub results: &'a [BenchResult],
    /// Runs that could not complete.
    pub skipped: &'a [Skipped],
    /// The machine.
    pub machine: MachineInfo,
    /// UTC date of the run, `YYYY-MM-DD`.
    pub date: String,
    /// The command line, if the caller gives it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The disk probe, if one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_probe: Option<&'a DiskProbeResult>,
}

impl BenchReport {
    /// The JSON document of this report on this machine, dated today.
    pub fn to_json(&self, command: Option<String>) -> Result<String> {
        let doc = JsonReport {
            results: &self.results,
            skipped: &self.skipped,
            machine: MachineInfo::detect(),
            date: machine::today_utc(),
            command,
            disk_probe: self.disk_probe.as_ref(),
        };
        Ok(serde_json::to_string_pretty(&doc)?)
    }

    /// Writes [`Self::to_json`] to `path`.
    pub fn write_json(&self, path: &Path, command: Option<String>) -> Result<()> {
        let mut text = self.to_json(command)?;
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// The results as an aligned text table.
    pub fn table(&self) -> String {
        let header = [
            "store",
            "workload",
            "batch",
            "ops",
            "seconds",
            "Mops/s",
            "p50 us",
            "p99 us",
            "p99.9 us",
            "max us",
            "budget MiB",
            "peak RSS MiB",
        ];
        let mib = |b: u64| format!("{:.0}", b as f64 / f64::from(1u32 << 20));
        let rows: Vec<[String; 12]> = self
            .results
            .iter()
            .map(|r| {
                [
                    r.store.clone(),
                    r.workload.clone(),
                    r.batch.to_string(),
                    r.ops.to_string(),
                    format!("{:.2}", r.seconds),
                    format!("{:.3}", r.ops_per_sec / 1e6),
                    format!("{:.2}", r.p50_us),
                    format!("{:.2}", r.p99_us),
                    format!("{:.2}", r.p999_us),
                    format!("{:.1}", r.max_us),
                    mib(r.memory_budget_bytes),
                    mib(r.peak_rss_bytes),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[&str]| {
            let mut l = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i > 0 {
                    l.push_str("  ");
                }
                // Text columns left-aligned, numbers right-aligned.
                if i < 2 {
                    l.push_str(&format!("{cell:<w$}"));
                } else {
                    l.push_str(&format!("{cell:>w$}"));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&header);
        for row in &rows {
            line(&row.each_ref().map(String::as_str));
        }
        for s in &self.skipped {
            out.push_str(&format!("skipped {} on {}: {}\n", s.workload, s.store, s.reason));
        }
        out
    }

    /// For each workload (and batch size) with more than one store: the throughput of
    /// every store relative to the last one (the baseline), e.g. `rmw-uniform:
    /// hashlog/rocksdb = 31.2x throughput`; batched runs say their batch size.
    pub fn ratios(&self) -> Vec<String> {
        let mut groups: Vec<(&str, usize)> = Vec::new();
        for r in &self.results {
            if !groups.contains(&(r.workload.as_str(), r.batch)) {
                groups.push((&r.workload, r.batch));
            }
        }
        let mut out = Vec::new();
        for (w, b) in groups {
            let rows: Vec<&BenchResult> =
                self.results.iter().filter(|r| r.workload == w && r.batch == b).collect();
            let Some((base, others)) = rows.split_last() else {
                continue;
            };
            let label = if b == 1 { w.to_string() } else { format!("{w} (batch {b})") };
            for r in others {
                out.push(format!(
                    "{label}: {}/{} = {:.1}x throughput",
                    r.store,
                    base.store,
                    r.ops_per_sec / base.ops_per_sec
                ));
            }
        }
        out
    }
}

impl BenchReport {
    /// With a [disk probe](Self::disk_probe): its line, then per row the store's ops/s,
    /// the device's reads/s and the store's own disk reads/s, each as a share of the
    /// disk's random-read rate.
    pub fn disk_comparison(&self) -> Vec<String> {
        let Some(d) = &self.disk_probe else { return Vec::new() };
        let mut out = vec![d.summary()];
        let pct = |x: f64| 100.0 * x / d.iops;
        for r in &self.results {
            let mut line = format!(
                "{} {}: {:.0} ops/s = {:.0}% of the disk's reads/s",
                r.store,
                r.workload,
                r.ops_per_sec,
                pct(r.ops_per_sec)
            );
            if let Some(dev) = r.device_reads_per_sec {
                line.push_str(&format!("; device {:.0} reads/s ({:.0}%)", dev, pct(dev)));
            }
            if let Some(own) = r.store_reads_per_sec {
                line.push_str(&format!("; store {:.0} disk reads/s ({:.0}%)", own, pct(own)));
            }
            out.push(line);
        }
        out
    }
}

/// What the measured phase of one run produced.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Ops measured.
    pub ops: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Per-op latencies in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// `get` only: ops that found their key with a value of the expected length.
    pub hits: u64,
}

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// Opens a fresh benchmark store of `kind` in `dir` with one namespace, [`NAMESPACE`],
/// whose merge adds u64 counters (the benchmarks themselves use rmw, get and put).
/// With `direct_io` the store bypasses the OS page cache ([`StoreOptions::direct_io`]).
pub fn open_store(
    kind: StoreKind,
    dir: &Path,
    memory_budget: u64,
    direct_io: bool,
) -> Result<Box<dyn StateStore>> {
    let opts = StoreOptions::new(dir)
        .memory_budget(memory_budget)
        .direct_io(direct_io)
        .namespace(NamespaceSpec::with_merge(NAMESPACE, merges::add_u64()));
    kind.open(opts).with_context(|| format!("opening a {} store in {}", kind.name(), dir.display()))
}

/// The value `get` loads for `key`: the key's little-endian bytes repeated.
pub fn get_value(key: u64, value_size: usize, out: &mut Vec<u8>) {
    out.clear();
    let b = key.to_le_bytes();
    out.extend(b.iter().cycle().take(value_size));
}

/// Runs `ops` ops in calls of `batch` ops each (the last call may be shorter), each
/// call timed back to back into a histogram (see the module docs). `op(n)` runs the
/// next `n` ops. With a batch of one an op's latency is its own; in a batch every op
/// completes when its batch does, so each is recorded with the batch's time.
#[inline]
fn measure(
    ops: u64,
    batch: usize,
    pb: &ProgressBar,
    pb_offset: u64,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<(Duration, Histogram<u64>)> {
    // quanta reads the TSC (about 7 ns here) where the OS clock costs about 25 ns a
    // call on this VM; it falls back to the OS clock where the TSC is not reliable.
    // One read per call: a call's latency runs from the end of the previous one to
    // its own end.
    let clock = quanta::Clock::new();
    let mut hist = new_histogram();
    let start = clock.raw();
    let mut prev = start;
    let mut done = 0u64;
    let mut next_progress = PROGRESS_EVERY;
    while done < ops {
        let n = (ops - done).min(batch as u64) as usize;
        op(n)?;
        let now = clock.raw();
        let _ = hist.record_n(clock.delta_as_nanos(prev, now).max(1), n as u64);
        prev = now;
        done += n as u64;
        if done >= next_progress {
            pb.set_position(pb_offset + done);
            next_progress = done + PROGRESS_EVERY;
        }
    }
    Ok((clock.delta(start, prev), hist))
}

fn counter(v: Option<&[u8]>) -> u64 {
    v.and_then(|v| <[u8; 8]>::try_from(v).ok()).map_or(0, u64::from_le_bytes)
}

fn incr(old: Option<&[u8]>, out: &mut Vec<u8>) -> Rmw {
    out.extend_from_slice(&counter(old).wrapping_add(1).to_le_bytes());
    Rmw::Put
}

/// Loads (for `get`) and runs the measured phase of `workload` on `store`, `batch` ops
/// per store call: with `batch > 1` the rmw workloads call
/// [`StateStoreExt::multi_rmw`], `get` calls [`StateStoreExt::multi_get_with`], and
/// `readwrite` announces the batch's ids with [`StateStore::prefetch`] and then runs
/// its get and put per id (its put depends on its get). The key sequence depends only
/// on `seed` and `workload`, never on the batch size.
pub fn drive(
    store: &mut dyn StateStore,
    workload: Workload,
    sizes: Sizes,
    seed: u64,
    batch: usize,
    pb: &ProgressBar,
) -> Result<Measurement> {
    ensure!(batch >= 1, "the batch size must be at least 1");
    let ns = store.namespace(NAMESPACE)?;
    let mut rng =
        SmallRng::seed_from_u64(seed ^ (workload as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let keys = sizes.keys;
    let ops = sizes.ops;
    let mut hits = 0;
    let zipf = matches!(workload, Workload::RmwZipf | Workload::ReadWriteZipf)
        .then(|| ScrambledZipfian::new(keys, YCSB_THETA));
    let mut next_key = move || match &zipf {
        Some(z) => z.sample(&mut rng),
        None => rng.random_range(0..keys),
    };
    // The batch's keys, encoded once (big-endian u64, the benchmarks' key format).
    let mut ids = vec![0u64; batch];
    let mut kbuf = vec![[0u8; 8]; batch];
    let (elapsed, latency_ns) = match workload {
        Workload::RmwUniform | Workload::RmwZipf => {
            pb.set_length(ops);
            if batch == 1 {
                measure(ops, 1, pb, 0, |_| {
                    let k = next_key().to_be_bytes();
                    Ok(store.rmw(ns, &k, &mut incr)?)
                })?
            } else {
                measure(ops, batch, pb, 0, |n| {
                    for k in &mut kbuf[..n] {
                        *k = next_key().to_be_bytes();
                    }
                    let refs: Vec<&[u8]> = kbuf[..n].iter().map(|k| &k[..]).collect();
                    Ok(store.multi_rmw(ns, &refs, &mut |_, old, out| incr(old, out))?)
                })?
            }
        }
        Workload::ReadWrite | Workload::ReadWriteZipf => {
            pb.set_length(ops);
            let mut buf = Vec::with_capacity(READWRITE_VALUE_LEN);
            let mut rec = [b'p'; READWRITE_VALUE_LEN];
            let mut one = |store: &mut dyn StateStore, id: u64| -> Result<()> {
                let k = id.to_be_bytes();
                let count = if store.get_into(ns, &k, &mut buf)? {
                    ensure!(
                        buf.len() == READWRITE_VALUE_LEN,
                        "readwrite: id {id} has a value of {} bytes, expected {READWRITE_VALUE_LEN}",
                        buf.len()
                    );
                    counter(Some(&buf[8..16]))
                } else {
                    0
                };
                rec[..8].copy_from_slice(&id.to_le_bytes());
                rec[8..16].copy_from_slice(&(count + 1).to_le_bytes());
                Ok(store.put(ns, &k, &rec)?)
            };
            measure(ops, batch, pb, 0, |n| {
                for (id, k) in ids[..n].iter_mut().zip(&mut kbuf) {
                    *id = next_key();
                    *k = id.to_be_bytes();
                }
                if n > 1 {
                    let refs: Vec<(Ns, &[u8])> = kbuf[..n].iter().map(|k| (ns, &k[..])).collect();
                    store.prefetch(&refs);
                }
                ids[..n].iter().try_for_each(|&id| one(&mut *store, id))
            })?
        }
        Workload::Get => {
            pb.set_length(keys + ops);
            pb.set_message("load");
            let mut val = Vec::with_capacity(sizes.value_size);
            for key in 0..keys {
                get_value(key, sizes.value_size, &mut val);
                store.put(ns, &key.to_be_bytes(), &val)?;
                if key % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
                    pb.set_position(key + 1);
                }
            }
            pb.set_position(keys);
            pb.set_message("get");
            let mut out = Vec::with_capacity(sizes.value_size);
            let value_size = sizes.value_size;
            if batch == 1 {
                measure(ops, 1, pb, keys, |_| {
                    let k = next_key().to_be_bytes();
                    if store.get_into(ns, &k, &mut out)? && out.len() == value_size {
                        hits += 1;
                    }
                    Ok(())
                })?
            } else {
                measure(ops, batch, pb, keys, |n| {
                    for k in &mut kbuf[..n] {
                        *k = next_key().to_be_bytes();
                    }
                    let refs: Vec<&[u8]> = kbuf[..n].iter().map(|k| &k[..]).collect();
                    Ok(store.multi_get_with(ns, &refs, &mut |_, v| {
                        if v.is_some_and(|v| v.len() == value_size) {
                            hits += 1;
                        }
                    })?)
                })?
            }
        }
    };
    pb.set_position(pb.length().unwrap_or(0));
    Ok(Measurement { ops, elapsed, latency_ns, hits })
}

/// Totals of a store's contents after a run, read back with a prefix scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Contents {
    /// Keys in the namespace.
    pub keys: u64,
    /// Sum of the counters (`rmw-*`: the value; `readwrite`: the count field; `get`: 0).
    pub counter_sum: u64,
}

/// Reads the whole namespace back and checks every record has the shape `workload`
/// writes; returns the totals.
pub fn read_back(store: &mut dyn StateStore, workload: Workload, sizes: Sizes) -> Result<Contents> {
    let ns: Ns = store.namespace(NAMESPACE)?;
    let mut c = Contents::default();
    let mut bad: Option<String> = None;
    let mut expect = Vec::new();
    store.scan_prefix(ns, &[], &mut |k, v| {
        let id = match <[u8; 8]>::try_from(k) {
            Ok(b) if u64::from_be_bytes(b) < sizes.keys => u64::from_be_bytes(b),
            _ => {
                bad = Some(format!("unexpected key {k:02x?}"));
                return false;
            }
        };
        c.keys += 1;
        let ok = match workload {
            Workload::RmwUniform | Workload::RmwZipf => {
                c.counter_sum += counter(Some(v));
                v.len() == 8
            }
            Workload::ReadWrite | Workload::ReadWriteZipf => {
                let ok = v.len() == READWRITE_VALUE_LEN && counter(Some(&v[..8])) == id;
                if ok {
                    c.counter_sum += counter(Some(&v[8..16]));
                }
                ok
            }
            Workload::Get => {
                get_value(id, sizes.value_size, &mut expect);
                v == expect.as_slice()
            }
        };
        if !ok {
            bad = Some(format!("key {id} has an unexpected value of {} bytes: {v:02x?}", v.len()));
        }
        ok
    })?;
    match bad {
        Some(b) => Err(anyhow!("{workload}: {b}")),
        None => Ok(c),
    }
}

/// Checks the store after the measured phase: counters sum to the ops (`rmw-*`,
/// `readwrite`), every key was loaded and every get hit (`get`).
pub fn verify(
    store: &mut dyn StateStore,
    workload: Workload,
    sizes: Sizes,
    m: &Measurement,
) -> Result<()> {
    let c = read_back(store, workload, sizes)?;
    let name = store.name();
    ensure!(
        c.keys <= sizes.keys,
        "{name} {workload}: {} keys, more than the {} drawn from",
        c.keys,
        sizes.keys
    );
    match workload {
        Workload::RmwUniform
        | Workload::RmwZipf
        | Workload::ReadWrite
        | Workload::ReadWriteZipf => ensure!(
            c.counter_sum == m.ops,
            "{name} {workload}: the counters sum to {} after {} increments",
            c.counter_sum,
            m.ops
        ),
        Workload::Get => {
            ensure!(
                c.keys == sizes.keys,
                "{name} get: {} keys after loading {}",
                c.keys,
                sizes.keys
            );
            ensure!(m.hits == m.ops, "{name} get: {} of {} gets found their value", m.hits, m.ops);
        }
    }
    Ok(())
}

fn progress_bar(quiet: bool, prefix: String) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template(
            "{prefix:<22} {msg:4} [{bar:30}] {human_pos}/{human_len} {per_sec:>14} eta {eta}",
        )
        .expect("valid progress template")
        .progress_chars("=> "),
    );
    pb.set_prefix(prefix);
    pb
}

fn summary(r: &BenchResult, st: &StoreStats) -> String {
    format!(
        "{} {}: {:.3} Mops/s, p99 {:.2} us, peak RSS {}; store: {} in memory, {} on disk, {} disk reads",
        r.store,
        r.workload,
        r.ops_per_sec / 1e6,
        r.p99_us,
        format_bytes(r.peak_rss_bytes),
        format_bytes(st.bytes_in_memory),
        format_bytes(st.bytes_on_disk),
        st.disk_reads
    )
}

/// Runs one store on one workload in a fresh directory `dir` (created; left for the
/// caller to remove), with direct I/O if `direct_io`. Returns the result and the
/// store's final stats.
#[allow(clippy::too_many_arguments)] // one run's full description, each argument plain
pub fn run_one(
    kind: StoreKind,
    workload: Workload,
    sizes: Sizes,
    seed: u64,
    batch: usize,
    dir: &Path,
    verify_after: bool,
    direct_io: bool,
    pb: &ProgressBar,
) -> Result<(BenchResult, StoreStats)> {
    machine::reset_peak_rss();
    let mut store = open_store(kind, dir, sizes.memory_budget, direct_io)?;
    let device = crate::disk_bench::BlockDevice::of(dir);
    let reads_before = device.as_ref().and_then(|d| d.reads_completed());
    let store_reads_before = store.stats().disk_reads;
    let m = drive(store.as_mut(), workload, sizes, seed, batch, pb)?;
    let reads_after = device.as_ref().and_then(|d| d.reads_completed());
    let store_reads = store.stats().disk_reads - store_reads_before;
    let peak_rss_bytes = machine::peak_rss_bytes();
    if verify_after {
        pb.set_message("check");
        verify(store.as_mut(), workload, sizes, &m)?;
    }
    let stats = store.stats();
    drop(store);
    let seconds = m.elapsed.as_secs_f64();
    let us = |q: f64| m.latency_ns.value_at_quantile(q) as f64 / 1e3;
    let result = BenchResult {
        store: kind.name().to_string(),
        workload: workload.name().to_string(),
        keys: sizes.keys,
        value_size: sizes.value_size,
        ops: m.ops,
        batch,
        seconds,
        ops_per_sec: if seconds > 0.0 { m.ops as f64 / seconds } else { 0.0 },
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        max_us: m.latency_ns.max() as f64 / 1e3,
        memory_budget_bytes: sizes.memory_budget,
        peak_rss_bytes,
        direct_io,
        device_reads_per_sec: match (reads_before, reads_after) {
            (Some(b), Some(a)) if seconds > 0.0 => Some(a.saturating_sub(b) as f64 / seconds),
            _ => None,
        },
        store_reads_per_sec: (kind != StoreKind::Rocks && seconds > 0.0)
            .then(|| store_reads as f64 / seconds),
    };
    Ok((result, stats))
}

/// Runs every configured (workload, store) pair, workload by workload, each on a fresh
/// store in a fresh directory that is removed afterwards. A run whose store outgrows
/// its memory budget is reported in [`BenchReport::skipped`]; any other error stops the
/// benchmark.
pub fn run(cfg: &StoreBenchConfig) -> Result<BenchReport> {
    cfg.validate()?;
    let parent = match &cfg.dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => std::env::temp_dir(),
    };
    let root = tempfile::Builder::new()
        .prefix("spillway-bench-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a run directory in {}", parent.display()))?;
    let mut report = BenchReport::default();
    let runs = cfg.workloads.iter().flat_map(|&w| cfg.batches.iter().map(move |&b| (w, b)));
    for (workload, batch) in runs {
        let sizes = cfg.sizes(workload);
        for (i, &kind) in cfg.stores.iter().enumerate() {
            let dir = root.path().join(format!("{workload}-{batch}-{i}-{}", kind.name()));
            let label = if batch == 1 {
                format!("{} {workload}", kind.name())
            } else {
                format!("{} {workload} batch {batch}", kind.name())
            };
            let pb = progress_bar(cfg.quiet, label);
            let outcome = run_one(
                kind,
                workload,
                sizes,
                cfg.seed,
                batch,
                &dir,
                cfg.verify,
                cfg.direct_io,
                &pb,
            );
            pb.finish_and_clear();
            // Free the disk space before the next run; a failure here only wastes space.
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                if !cfg.quiet && dir.exists() {
                    eprintln!("warning: could not remove {}: {e}", dir.display());
                }
            }
            match outcome {
                Ok((r, stats)) => {
                    if !cfg.quiet {
                        eprintln!("{}", summary(&r, &stats));
                    }
                    report.results.push(r);
                }
                Err(e) => match e.downcast_ref::<spillway_store::Error>() {
                    Some(se @ spillway_store::Error::BudgetTooSmall { .. }) => {
                        let reason = format!(
                            "the store outgrew its {} memory budget ({se})",
                            format_bytes(sizes.memory_budget)
                        );
                        if !cfg.quiet {
                            eprintln!("{} {workload}: skipped: {reason}", kind.name());
                        }
                        report.skipped.push(Skipped {
                            store: kind.name().to_string(),
                            workload: workload.name().to_string(),
                            reason,
                        });
                    }
                    _ => {
                        return Err(e.context(format!("{} on {workload}", kind.name())));
                    }
                },
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(keys: u64, ops: u64) -> Sizes {
        Sizes { keys, ops, value_size: 8, memory_budget: 64 << 20 }
    }

    #[test]
    fn workload_names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
            assert_eq!(w.to_string(), w.name());
        }
        assert!("rmw".parse::<Workload>().is_err());
    }

    #[test]
    fn workload_lists() {
        use Workload::*;
        assert_eq!(parse_workloads("rmw"), Ok(vec![RmwUniform, RmwZipf]));
        assert_eq!(parse_workloads("all"), Ok(Workload::ALL.to_vec()));
        assert_eq!(parse_workloads("get, rmw-zipf,get"), Ok(vec![Get, RmwZipf]));
        assert_eq!(parse_workloads("readwrite,rmw"), Ok(vec![ReadWrite, RmwUniform, RmwZipf]));
        assert_eq!(parse_workloads("readwrite,readwrite-zipf"), Ok(vec![ReadWrite, ReadWriteZipf]));
        let e = parse_workloads("rmw,scan").unwrap_err();
        assert!(e.contains("\"scan\"") && e.contains("readwrite"), "{e}");
        assert!(parse_workloads(",").is_err());
    }

    #[test]
    fn sizes_follow_scale_and_overrides() {
        let mut cfg = StoreBenchConfig::default();
        assert_eq!(cfg.sizes(Workload::ReadWrite).keys, 10_000_000);
        assert_eq!(cfg.sizes(Workload::ReadWrite).memory_budget, 256 << 20);
        assert_eq!(cfg.sizes(Workload::ReadWrite).value_size, 116);
        assert_eq!(cfg.sizes(Workload::Get).ops, 2_000_000);
        cfg.value_size = Some(100);
        cfg.keys = Some(5);
        assert_eq!(cfg.sizes(Workload::Get).value_size, 100);
        assert_eq!(cfg.sizes(Workload::RmwZipf).value_size, 8);
        assert_eq!(cfg.sizes(Workload::RmwZipf).keys, 5);
        cfg.scale = Scale::Quick;
        assert_eq!(cfg.sizes(Workload::RmwUniform).ops, 1_000_000);
    }

    #[test]
    fn unavailable_store_error_says_how_to_rebuild() {
        if StoreKind::Rocks.available() {
            return;
        }
        let cfg = StoreBenchConfig { stores: vec![StoreKind::Rocks], ..Default::default() };
        let e = run(&cfg).unwrap_err().to_string();
        assert!(e.contains("--features rocksdb"), "{e}");
    }

    /// Drives each workload on mem and hashlog and checks the store's contents
    /// independently of `verify`.
    #[test]
    fn every_workload_leaves_exact_state() {
        for kind in [StoreKind::Mem, StoreKind::HashLog] {
            for w in Workload::ALL {
                let dir = tempfile::tempdir().unwrap();
                let sizes =
                    Sizes { value_size: w.fixed_value_size().unwrap_or(24), ..tiny(500, 3000) };
                let mut store = open_store(kind, dir.path(), sizes.memory_budget, false).unwrap();
                let m = drive(store.as_mut(), w, sizes, 7, 1, &ProgressBar::hidden()).unwrap();
                assert_eq!(m.ops, 3000);
                assert_eq!(m.latency_ns.len(), 3000, "one latency per op");
                verify(store.as_mut(), w, sizes, &m).unwrap();
                let ns = store.namespace(NAMESPACE).unwrap();
                // Read back key by key.
                let (mut present, mut sum) = (0u64, 0u64);
                for id in 0..sizes.keys {
                    if let Some(v) = store.get(ns, &id.to_be_bytes()).unwrap() {
                        present += 1;
                        match w {
                            Workload::RmwUniform | Workload::RmwZipf => {
                                sum += u64::from_le_bytes(v[..].try_into().unwrap());
                            }
                            Workload::ReadWrite | Workload::ReadWriteZipf => {
                                assert_eq!(v.len(), 116);
                                assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), id);
                                sum += u64::from_le_bytes(v[8..16].try_into().unwrap());
                                assert!(v[16..].iter().all(|&b| b == b'p'));
                            }
                            Workload::Get => {
                                assert_eq!(v.len(), 24);
                                assert_eq!(v[..8], id.to_le_bytes());
                            }
                        }
                    }
                }
                match w {
                    Workload::Get => {
                        assert_eq!(present, sizes.keys);
                        assert_eq!(m.hits, m.ops);
                    }
                    _ => {
                        assert_eq!(sum, 3000, "{kind:?} {w}: counters sum to the ops");
                        // 3000 uniform draws over 500 keys touch (almost) all of them;
                        // zipf touches fewer.
                        assert!(present > 100 && present <= 500, "{kind:?} {w}: {present}");
                    }
                }
            }
        }
    }

    #[test]
    fn verify_catches_a_lost_update() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = tiny(100, 1000);
        let mut store = open_store(StoreKind::Mem, dir.path(), sizes.memory_budget, false).unwrap();
        let m = drive(store.as_mut(), Workload::RmwUniform, sizes, 1, 1, &ProgressBar::hidden())
            .unwrap();
        let ns = store.namespace(NAMESPACE).unwrap();
        store.delete(ns, &3u64.to_be_bytes()).unwrap();
        store.put(ns, &4u64.to_be_bytes(), &0u64.to_le_bytes()).unwrap();
        let e = verify(store.as_mut(), Workload::RmwUniform, sizes, &m).unwrap_err().to_string();
        assert!(e.contains("sum to"), "{e}");
    }

    #[test]
    fn run_reports_every_pair_and_ratios() {
        let base = tempfile::tempdir().unwrap();
        let cfg = StoreBenchConfig {
            stores: vec![StoreKind::HashLog, StoreKind::Mem],
            workloads: Workload::ALL.to_vec(),
            scale: Scale::Quick,
            keys: Some(2000),
            ops: Some(20_000),
            value_size: None,
            memory_budget: Some(64 << 20),
            seed: 42,
            dir: Some(base.path().to_path_buf()),
            quiet: true,
            verify: true,
            // Batched runs are verified like the others: every counter update landed.
            batches: vec![1, 7],
            direct_io: false,
        };
        let report = run(&cfg).unwrap();
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        let n = Workload::ALL.len();
        assert_eq!(report.results.len(), 4 * n);
        assert_eq!(report.results.iter().filter(|r| r.batch == 7).count(), 2 * n);
        for r in &report.results {
            assert_eq!(r.ops, 20_000);
            assert!(r.ops_per_sec > 0.0 && r.seconds > 0.0);
            assert!(r.p50_us <= r.p99_us && r.p99_us <= r.p999_us && r.p999_us <= r.max_us);
            assert_eq!(r.memory_budget_bytes, 64 << 20);
        }
        let ratios = report.ratios();
        assert_eq!(ratios.len(), 2 * n);
        assert!(ratios[0].starts_with("rmw-uniform: hashlog/mem = "), "{ratios:?}");
        assert!(ratios[1].starts_with("rmw-uniform (batch 7): hashlog/mem = "), "{ratios:?}");
        let table = report.table();
        assert_eq!(table.lines().count(), 4 * n + 1, "{table}");
        assert!(table.starts_with("store"), "{table}");
        let json: serde_json::Value = serde_json::from_str(&report.to_json(None).unwrap()).unwrap();
        assert_eq!(json["results"].as_array().unwrap().len(), 4 * n);
        for field in [
            "store",
            "workload",
            "batch",
            "ops",
            "seconds",
            "ops_per_sec",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "memory_budget_bytes",
            "peak_rss_bytes",
        ] {
            assert!(json["results"][0].get(field).is_some(), "missing {field}");
        }
        assert!(json["machine"]["cpus"].as_u64().unwrap() >= 1);
        assert_eq!(json["date"].as_str().unwrap().len(), 10);
        // The run directory was removed.
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }

    /// With direct I/O, hashlog runs both readwrite workloads (its state outgrows the
    /// budget, so it reads from disk) and the rows say so; a store without direct I/O
    /// stops the benchmark with the store's typed refusal.
    #[test]
    fn direct_io_runs_hashlog_and_refuses_mem() {
        let base = tempfile::tempdir().unwrap();
        let cfg = StoreBenchConfig {
            stores: vec![StoreKind::HashLog],
            workloads: parse_workloads("readwrite,readwrite-zipf").unwrap(),
            keys: Some(50_000),
            ops: Some(200_000),
            memory_budget: Some(2 << 20),
            dir: Some(base.path().to_path_buf()),
            quiet: true,
            direct_io: true,
            ..Default::default()
        };
        let report = run(&cfg).unwrap();
        assert_eq!(report.results.len(), 2);
        for r in &report.results {
            assert!(r.direct_io);
            assert!(r.store_reads_per_sec.is_some_and(|x| x > 0.0), "{r:?}");
        }
        let cfg = StoreBenchConfig { stores: vec![StoreKind::Mem], ..cfg };
        let e = format!("{:#}", run(&cfg).unwrap_err());
        assert!(e.contains("direct_io"), "{e}");
    }

    #[test]
    fn mem_store_over_budget_is_skipped_not_fatal() {
        let base = tempfile::tempdir().unwrap();
        let cfg = StoreBenchConfig {
            stores: vec![StoreKind::Mem],
            workloads: vec![Workload::ReadWrite],
            keys: Some(50_000),
            ops: Some(100_000),
            memory_budget: Some(1 << 20),
            dir: Some(base.path().to_path_buf()),
            quiet: true,
            ..Default::default()
        };
        let report = run(&cfg).unwrap();
        assert!(report.results.is_empty());
        assert_eq!(report.skipped.len(), 1);
        assert!(report.skipped[0].reason.contains("budget"), "{:?}", report.skipped);
        assert!(report.table().contains("skipped readwrite on mem"));
    }
}
