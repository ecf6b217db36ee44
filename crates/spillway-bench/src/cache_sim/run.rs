//! Running a simulation: every (trace, capacity, policy) cell replays the whole trace
//! through a fresh policy. A trace is read into memory once and its cells run on up to
//! `threads` threads.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::ProgressBar;
use serde::Serialize;

use super::{make, Capacity, Policy, SimError, Trace, POLICIES};

/// Accesses between progress updates.
const PROGRESS_CHUNK: usize = 1 << 16;

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Trace files (plain or gzip text, one key per line).
    pub traces: Vec<PathBuf>,
    /// Capacities, each resolved per trace.
    pub capacities: Vec<Capacity>,
    /// Policy names, each one of [`POLICIES`].
    pub policies: Vec<String>,
    /// Seed of randomized policies (W-TinyLFU's sketch).
    pub seed: u64,
    /// Threads that run cells (at least 1).
    pub threads: usize,
}

/// The result of one (trace, capacity, policy) cell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimRow {
    /// The trace's file name.
    pub trace: String,
    /// The capacity as given (`5%`); not in the JSON.
    #[serde(skip)]
    pub capacity_spec: String,
    /// The capacity in entries.
    pub capacity: u64,
    /// The policy's name.
    pub policy: String,
    /// Accesses replayed (the trace's lines).
    pub accesses: u64,
    /// Accesses that hit.
    pub hits: u64,
    /// `hits / accesses`.
    pub hit_ratio: f64,
}

/// Replays `keys` through `policy` and returns the hits, advancing `progress` by one
/// per access.
pub fn simulate(policy: &mut dyn Policy, keys: &[u64], progress: &ProgressBar) -> u64 {
    let mut hits = 0u64;
    for chunk in keys.chunks(PROGRESS_CHUNK) {
        hits += chunk.iter().map(|&k| u64::from(policy.access(k))).sum::<u64>();
        progress.inc(chunk.len() as u64);
    }
    hits
}

/// Runs every cell of `cfg`: rows ordered by trace, then capacity, then policy, as
/// given. Policy names and trace files are checked before anything runs. `progress`
/// counts accesses replayed; its length grows as each trace is read.
pub fn run(cfg: &SimConfig, progress: &ProgressBar) -> Result<Vec<SimRow>, SimError> {
    for p in &cfg.policies {
        if !POLICIES.contains(&p.as_str()) {
            return Err(SimError::UnknownPolicy { name: p.clone() });
        }
    }
    for path in &cfg.traces {
        File::open(path).map_err(|source| SimError::Open { path: path.clone(), source })?;
    }
    let mut rows = Vec::new();
    for path in &cfg.traces {
        progress.set_message(path.display().to_string());
        let trace = Trace::read(path)?;
        rows.extend(run_trace(cfg, &trace, progress)?);
    }
    Ok(rows)
}

/// The cells of one trace.
pub fn run_trace(
    cfg: &SimConfig,
    trace: &Trace,
    progress: &ProgressBar,
) -> Result<Vec<SimRow>, SimError> {
    let cells = cfg.capacities.len() * cfg.policies.len();
    progress.inc_length((trace.keys.len() * cells) as u64);
    let next = AtomicUsize::new(0);
    let work = || -> Result<Vec<(usize, SimRow)>, SimError> {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            if k >= cells {
                return Ok(done);
            }
            let capacity = cfg.capacities[k / cfg.policies.len()];
            let name = &cfg.policies[k % cfg.policies.len()];
            let entries = capacity.entries(trace.distinct);
            let mut policy = make(name, entries, cfg.seed)?;
            let hits = simulate(policy.as_mut(), &trace.keys, progress);
            let accesses = trace.keys.len() as u64;
            done.push((
                k,
                SimRow {
                    trace: trace.name.clone(),
                    capacity_spec: capacity.to_string(),
                    capacity: entries as u64,
                    policy: name.clone(),
                    accesses,
                    hits,
                    hit_ratio: hits as f64 / accesses as f64,
                },
            ));
        }
    };
    let threads = cfg.threads.clamp(1, cells.max(1));
    let mut rows: Vec<(usize, SimRow)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
        let mut all = Vec::with_capacity(cells);
        for h in handles {
            all.extend(h.join().expect("a simulation thread panicked")?);
        }
        Ok::<_, SimError>(all)
    })?;
    rows.sort_by_key(|(k, _)| *k);
    Ok(rows.into_iter().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_in_order_and_threads_agree() {
        let trace = Trace {
            name: "t".into(),
            keys: (0..5000u64)
                .map(|i| if i % 2 == 0 { i % 10 } else { (i * 7919) % 300 })
                .collect(),
            distinct: 0,
        };
        let distinct = trace.keys.iter().collect::<std::collections::HashSet<_>>().len();
        let trace = Trace { distinct, ..trace };
        let mut cfg = SimConfig {
            traces: vec![],
            capacities: vec![Capacity::Percent(10.0), Capacity::Entries(50)],
            policies: ["lru", "arc", "s3fifo", "lirs"].map(String::from).to_vec(),
            seed: 1,
            threads: 1,
        };
        let one = run_trace(&cfg, &trace, &ProgressBar::hidden()).unwrap();
        cfg.threads = 2;
        let two = run_trace(&cfg, &trace, &ProgressBar::hidden()).unwrap();
        assert_eq!(one, two);
        let order: Vec<_> =
            one.iter().map(|r| (r.capacity_spec.as_str(), r.policy.as_str())).collect();
        assert_eq!(
            order,
            [
                ("10%", "lru"),
                ("10%", "arc"),
                ("10%", "s3fifo"),
                ("10%", "lirs"),
                ("50", "lru"),
                ("50", "arc"),
                ("50", "s3fifo"),
                ("50", "lirs")
            ]
        );
        assert_eq!(one[0].capacity, (distinct as f64 / 10.0).round() as u64);
        for r in &one {
            assert_eq!(r.accesses, 5000);
            assert!(r.hits > 0 && r.hits < 5000, "{r:?}");
            assert_eq!(r.hit_ratio, r.hits as f64 / 5000.0);
        }
    }

    #[test]
    fn unknown_policy_and_missing_file_fail_before_running() {
        let cfg = SimConfig {
            traces: vec![PathBuf::from("/nonexistent/a.keys")],
            capacities: vec![Capacity::Entries(5)],
            policies: vec!["lru".into(), "clock".into()],
            seed: 1,
            threads: 1,
        };
        let e = run(&cfg, &ProgressBar::hidden()).unwrap_err().to_string();
        assert!(e.contains("unknown policy `clock`"), "{e}");
        assert!(e.contains("lru, arc, s3fifo, lirs"), "{e}");
        let cfg = SimConfig { policies: vec!["lru".into()], ..cfg };
        let e = run(&cfg, &ProgressBar::hidden()).unwrap_err().to_string();
        assert_eq!(e, "cannot open trace /nonexistent/a.keys");
    }
}
