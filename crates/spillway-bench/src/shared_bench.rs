//! `spillway bench shared`: N window patterns over one stream with their contents kept
//! as per-operator copies or shared, side by side, per pattern count and
//! backend ([`crate::workload::multi`] runs each cell). It owns the grid, the check that
//! every cell produced the same window results, and the rows.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::workload::multi::{self, Backend, Family, Mode, MultiConfig};

/// What to run: blocks of rows, each one stream with its patterns, run in every mode over
/// every backend.
#[derive(Clone, Debug)]
pub struct SharedBenchConfig {
    /// One experiment per block (a pattern count of a family, or an experiment file).
    pub blocks: Vec<MultiConfig>,
    /// Modes run in each block (copies first).
    pub modes: Vec<Mode>,
    /// Backends (`redis` or a store).
    pub backends: Vec<Backend>,
    /// Memory budget of the stores.
    pub memory_budget: u64,
    /// Runs of each cell (>= 1); rows report the median.
    pub repeat: usize,
}

impl SharedBenchConfig {
    /// The blocks of `family` for each pattern count, over one stream.
    #[allow(clippy::too_many_arguments)]
    pub fn family(
        counts: &[usize],
        family: Family,
        base_window: u64,
        events: u64,
        keys: u64,
        value_bytes: usize,
        rate: u64,
        seed: u64,
    ) -> Vec<MultiConfig> {
        counts
            .iter()
            .map(|&n| MultiConfig {
                patterns: family.patterns(n, base_window),
                events,
                keys,
                value_bytes,
                rate,
                seed,
            })
            .collect()
    }
}

/// One (patterns, mode, store) cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SharedRow {
    /// Number of patterns.
    pub patterns: usize,
    /// `copies` or `shared`.
    pub mode: String,
    /// Backend name.
    pub store: String,
    /// Peak live bytes of state (keys + values; see [`crate::workload::multi`]).
    pub state_bytes: u64,
    /// Stream events processed per second (the same stream in every cell), median of the
    /// repetitions.
    pub ops_per_sec: f64,
    /// 99th percentile of one event's processing, microseconds (median of the
    /// repetitions).
    pub p99_us: f64,
    /// Every firing's window and contents equal those of every other cell of its block
    /// (both modes, every backend).
    pub results_equal: bool,
    /// Window firings.
    pub firings: u64,
    /// Events delivered by the firings.
    pub delivered: u64,
    /// Store operations (a store) or round trips (Redis).
    pub state_ops: u64,
    /// Digest of the firings, hex.
    pub digest: String,
}

/// Runs the grid; `progress` hears each cell as it starts. Redis cells need
/// `redis_url`.
pub fn run(
    cfg: &SharedBenchConfig,
    dir: &Path,
    redis_url: Option<&str>,
    progress: &mut dyn FnMut(usize, Mode, Backend),
) -> Result<Vec<SharedRow>> {
    let mut rows = Vec::new();
    for mc in &cfg.blocks {
        mc.check()?;
        let n = mc.patterns.len();
        let first = rows.len();
        // Repetitions interleave the cells (copies, shared, copies, shared, ...) so that
        // a slow spell of a shared machine hits both modes; each row reports the median
        // repetition by throughput (and the median p99).
        let cells: Vec<(Backend, Mode)> =
            cfg.backends.iter().flat_map(|&b| cfg.modes.iter().map(move |&m| (b, m))).collect();
        let mut runs: Vec<Vec<multi::MultiOutcome>> = vec![Vec::new(); cells.len()];
        for _ in 0..cfg.repeat.max(1) {
            for (c, &(b, mode)) in cells.iter().enumerate() {
                progress(n, mode, b);
                let cell = tempfile::Builder::new().prefix("spillway-shared-").tempdir_in(dir)?;
                runs[c].push(multi::run(mc, mode, b, cell.path(), cfg.memory_budget, redis_url)?);
            }
        }
        for (&(b, mode), outs) in cells.iter().zip(&runs) {
            let o0 = &outs[0];
            // Every repetition is the same stream: the same results and state.
            let consistent = outs.iter().all(|o| {
                (o.digest, o.firings, o.delivered, o.state_bytes)
                    == (o0.digest, o0.firings, o0.delivered, o0.state_bytes)
            });
            let mut tput: Vec<f64> = outs.iter().map(|o| o.events_per_sec).collect();
            let mut p99: Vec<f64> = outs.iter().map(|o| o.p99_us).collect();
            tput.sort_by(f64::total_cmp);
            p99.sort_by(f64::total_cmp);
            rows.push(SharedRow {
                patterns: n,
                mode: mode.name().into(),
                store: b.name().into(),
                state_bytes: o0.state_bytes,
                ops_per_sec: tput[tput.len() / 2],
                p99_us: p99[p99.len() / 2],
                results_equal: consistent,
                firings: o0.firings,
                delivered: o0.delivered,
                state_ops: o0.state_ops,
                digest: format!("{:032x}", o0.digest),
            });
        }
        let block = &mut rows[first..];
        let same = |a: &SharedRow, b: &SharedRow| {
            a.digest == b.digest && a.firings == b.firings && a.delivered == b.delivered
        };
        let all_equal = block.iter().all(|r| r.results_equal && same(r, &block[0]));
        for r in block.iter_mut() {
            r.results_equal = all_equal;
        }
    }
    Ok(rows)
}

/// Shared over copies for each (patterns, store): (patterns, store, bytes ratio,
/// throughput ratio).
pub fn ratios(rows: &[SharedRow]) -> Vec<(usize, String, f64, f64)> {
    let mut out = Vec::new();
    for c in rows.iter().filter(|r| r.mode == "copies") {
        if let Some(s) = rows
            .iter()
            .find(|r| r.mode == "shared" && r.patterns == c.patterns && r.store == c.store)
        {
            out.push((
                c.patterns,
                c.store.clone(),
                s.state_bytes as f64 / c.state_bytes.max(1) as f64,
                s.ops_per_sec / c.ops_per_sec.max(1e-9),
            ));
        }
    }
    out
}
