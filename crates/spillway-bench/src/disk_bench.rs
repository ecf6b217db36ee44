//! `spillway bench disk`: the disk's own random-read rate, the ceiling of any store
//! whose reads miss memory. It writes a file once (not timed), then reads random
//! 4 KiB blocks of it with `O_DIRECT` (no OS page cache), one at a time from one
//! thread (queue depth 1, as the stores read synchronously), for a fixed time, and
//! reports reads per second and latency percentiles. The file lives in a fresh
//! temporary directory under the chosen one and is deleted afterwards.
//!
//! It also owns [`BlockDevice`], the read counter of the block device under a
//! directory, which `bench store --direct-io` samples around each measured phase.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::machine::{self, MachineInfo};

/// Bytes of one probe read (and its alignment).
pub const BLOCK: usize = 4096;

/// What the probe runs.
#[derive(Clone, Debug)]
pub struct DiskProbeConfig {
    /// Directory under which the probe file is created. Default: the system
    /// temporary directory.
    pub dir: Option<PathBuf>,
    /// Size of the probe file in bytes (rounded down to 4 KiB). Default 2 GiB.
    pub file_size: u64,
    /// Seconds of random reads. Default 10.
    pub seconds: f64,
    /// Seed of the read offsets. Default 42.
    pub seed: u64,
}

impl Default for DiskProbeConfig {
    fn default() -> Self {
        DiskProbeConfig { dir: None, file_size: 2 << 30, seconds: 10.0, seed: 42 }
    }
}

/// What the probe measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskProbeResult {
    /// Directory the probe file was created under.
    pub dir: String,
    /// Size of the probe file.
    pub file_size: u64,
    /// Bytes per read.
    pub block_bytes: usize,
    /// Reads completed.
    pub reads: u64,
    /// Wall seconds of the read phase.
    pub seconds: f64,
    /// Reads per second (queue depth 1).
    pub iops: f64,
    /// Median read latency in microseconds.
    pub p50_us: f64,
    /// 99th percentile read latency in microseconds.
    pub p99_us: f64,
    /// 99.9th percentile read latency in microseconds.
    pub p999_us: f64,
    /// Largest read latency in microseconds.
    pub max_us: f64,
}

impl DiskProbeResult {
    /// One line for people.
    pub fn summary(&self) -> String {
        format!(
            "disk: {:.0} random {} KiB O_DIRECT reads/s at queue depth 1 (p50 {:.1} us, p99 {:.1} \
             us, p99.9 {:.1} us, max {:.0} us; {} reads over a {} MiB file in {})",
            self.iops,
            self.block_bytes / 1024,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.max_us,
            self.reads,
            self.file_size >> 20,
            self.dir
        )
    }
}

/// The JSON file `spillway bench disk --json` writes.
#[derive(Clone, Debug, Serialize)]
pub struct DiskJsonReport<'a> {
    /// The probe's figures.
    pub disk: &'a DiskProbeResult,
    /// The machine.
    pub machine: MachineInfo,
    /// UTC date of the run, `YYYY-MM-DD`.
    pub date: String,
}

impl DiskProbeResult {
    /// Writes the result with the machine and date as JSON to `path`.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let doc = DiskJsonReport {
            disk: self,
            machine: MachineInfo::detect(),
            date: machine::today_utc(),
        };
        let mut text = serde_json::to_string_pretty(&doc)?;
        text.push('\n');
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

/// Runs the probe: writes the file, reads random blocks for the configured time,
/// deletes the file.
pub fn probe(cfg: &DiskProbeConfig) -> Result<DiskProbeResult> {
    let blocks = cfg.file_size / BLOCK as u64;
    ensure!(blocks > 0, "the probe file must be at least {BLOCK} bytes");
    ensure!(cfg.seconds > 0.0, "the probe must run for a positive time");
    let parent = cfg.dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let root = tempfile::Builder::new()
        .prefix("spillway-disk-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating a probe directory in {}", parent.display()))?;
    let path = root.path().join("probe.dat");
    write_file(&path, blocks * BLOCK as u64)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .with_context(|| {
            format!("opening {} with O_DIRECT (does the file system support it?)", path.display())
        })?;
    let mut buf = memmap2::MmapMut::map_anon(BLOCK).context("mapping an aligned read buffer")?;
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("bounds");
    let limit = Duration::from_secs_f64(cfg.seconds);
    let start = Instant::now();
    let mut reads = 0u64;
    let mut prev = start;
    loop {
        let off = rng.random_range(0..blocks) * BLOCK as u64;
        file.read_exact_at(&mut buf[..], off)
            .with_context(|| format!("reading {} at {off}", path.display()))?;
        let now = Instant::now();
        hist.saturating_record((now - prev).as_nanos() as u64);
        prev = now;
        reads += 1;
        if now - start >= limit {
            break;
        }
    }
    let seconds = (prev - start).as_secs_f64();
    drop(file);
    root.close().with_context(|| format!("removing {}", path.display()))?;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    Ok(DiskProbeResult {
        dir: parent.display().to_string(),
        file_size: blocks * BLOCK as u64,
        block_bytes: BLOCK,
        reads,
        seconds,
        iops: reads as f64 / seconds,
        p50_us: us(0.5),
        p99_us: us(0.99),
        p999_us: us(0.999),
        max_us: hist.max() as f64 / 1e3,
    })
}

/// Writes `len` bytes of non-repeating data to `path` and fsyncs it.
fn write_file(path: &Path, len: u64) -> Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut rng = SmallRng::seed_from_u64(len);
    let mut left = len;
    while left > 0 {
        rng.fill(&mut chunk[..]);
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n]).with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all().with_context(|| format!("syncing {}", path.display()))
}

/// The block device a directory lives on, for counting the reads it completes.
#[derive(Clone, Debug)]
pub struct BlockDevice {
    stat: PathBuf,
}

impl BlockDevice {
    /// The device of `dir` (Linux: `/sys/dev/block/MAJOR:MINOR/stat`), if known.
    pub fn of(dir: &Path) -> Option<BlockDevice> {
        let dev = std::fs::metadata(dir).ok()?.dev();
        // glibc's encoding of dev_t.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        let stat = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
        stat.exists().then_some(BlockDevice { stat })
    }

    /// Read requests the device has completed since boot (the first field of its
    /// `stat` file).
    pub fn reads_completed(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.stat).ok()?;
        text.split_whitespace().next()?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe writes, reads and removes its file; checks behaviour, not speed.
    #[test]
    fn probe_reads_and_cleans_up() {
        let base = tempfile::tempdir().unwrap();
        let cfg = DiskProbeConfig {
            dir: Some(base.path().to_path_buf()),
            file_size: 1 << 20,
            seconds: 0.05,
            seed: 1,
        };
        match probe(&cfg) {
            Ok(r) => {
                assert!(r.reads > 0 && r.iops > 0.0);
                assert_eq!(r.file_size, 1 << 20);
                assert!(r.p50_us <= r.p99_us && r.p99_us <= r.max_us);
                assert!(r.summary().contains("reads/s"));
            }
            // A file system without O_DIRECT: the error says so.
            Err(e) => assert!(format!("{e:#}").contains("O_DIRECT"), "{e:#}"),
        }
        assert_eq!(std::fs::read_dir(base.path()).unwrap().count(), 0);
    }
}
