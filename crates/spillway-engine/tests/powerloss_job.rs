//! Power loss inside a job's checkpoint: a real job ([`run_job`], per-event sliding-window
//! metrics, so the event reservoir is used) runs over a seeded input with its state store
//! and reservoir on a crash-simulating file system ([`CrashFs`], given through
//! [`JobConfig::fs`]) rooted at the checkpoint directory. The power is cut at every
//! mutating file-system call from the end of the first checkpoint to the end of the
//! second (the reservoir's chunk writes, segment rolls and fsyncs; the store's page
//! flush, fsync and manifest; the release of reservoir segments afterwards), and at every
//! call before that (directories, schema and store files, the first checkpoint): the call
//! fails, so does the job, and the files are turned into what a power loss could leave
//! ([`CrashMode`], one per cut in turn, seeded by the cut: unsynced writes dropped, kept
//! out of order or torn at 512 B / 4 KiB sectors, unsynced directory entries undone). A
//! `--resume` over the real file system must then finish the job with output and side
//! output byte-identical to an uninterrupted run's. (The output files are written beside
//! the seam; the resume cuts them back to the checkpoint's lengths.)
//!
//! The `oracle_detects_*` tests show the check is not vacuous: with every fsync of the
//! seam suppressed, or only the reservoir segments' skipped, the same cuts find resumes
//! that fail.
//!
//! Determinism: between checkpoints the only file-system calls are the reservoir
//! writer's (one thread, in chunk order; the store's memory budget holds all its state),
//! and a checkpoint's reservoir sync waits for the writer before the store's calls
//! begin, so call `n` is the same call in every run, and so is its crash image.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_engine::checkpoint::Input;
use spillway_engine::job::{run_job, JobConfig, OpenAt};
use spillway_engine::source::{self, SourceOptions};
use spillway_store::io::{CrashFs, CrashMode, FileHandle, Fs};
use spillway_store::StoreKind;

/// Input events.
const EVENTS: usize = 1200;
/// Events between checkpoints.
const EVERY: u64 = 400;
/// Allowed lateness (ms): the generator's out-of-order events are within it, its late
/// ones beyond it (they go to the side output).
const LATENESS: i64 = 50;
const HEADER: &str = "card,merchant,amount,ts";
const QUERY: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
     AVG(amount) OVER m AS m_avg \
     FROM tx \
     WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 300 PRECEDING AND CURRENT ROW), \
     m AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 150 PRECEDING AND CURRENT ROW)";

/// `n` rows `card,merchant,amount,ts` (time in ms rising by 0..6 per event; about one
/// in 8 events up to 45 ms out of order, one in 101 300 ms late), from a xorshift seed.
fn rows(n: usize, seed: u64) -> Vec<String> {
    let mut x = seed | 1;
    let mut t: i64 = 1_000_000;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t += (x % 7) as i64;
            let back = if x.is_multiple_of(101) {
                300
            } else if (x >> 12).is_multiple_of(8) {
                ((x >> 30) % 45) as i64
            } else {
                0
            };
            format!(
                "c{},m{},{}.{:02},{}",
                x % 40,
                (x >> 20) % 15,
                (x >> 8) % 300,
                (x >> 40) % 100,
                t - back
            )
        })
        .collect()
}

fn write_input(path: &Path, rows: &[String]) {
    std::fs::write(path, format!("{HEADER}\n{}\n", rows.join("\n")))
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A job over the test's query, checkpointing every [`EVERY`] events into `ckpt`; small
/// reservoir chunks and segments, so segments roll and are released between checkpoints.
fn config(store: StoreKind, output: &Path, ckpt: &Path, fs: Option<Arc<dyn Fs>>) -> JobConfig {
    JobConfig {
        query: QUERY.to_string(),
        output: Some(output.to_path_buf()),
        discard_output: false,
        side_output: None,
        store,
        tiered: Default::default(),
        memory_budget: 8 << 20,
        expected_keys: None,
        allowed_lateness: LATENESS,
        watermark_delay: 0,
        checkpoint_dir: Some(ckpt.to_path_buf()),
        checkpoint_every: Some(EVERY),
        resume: false,
        compression: Default::default(),
        input: Input::Named("tx".into()),
        reservoir_chunk_events: Some(32),
        reservoir_segment_bytes: Some(2048),
        halt: None,
        backfill: false,
        retain: None,
        fs,
        metrics: None,
        ties: Default::default(),
    }
}

fn run(cfg: &JobConfig, input: &Path) -> spillway_engine::Result<()> {
    let opts = SourceOptions::new("ts");
    let mut open = |at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn source::Source>> {
        Ok(match at {
            OpenAt::Start | OpenAt::Schema => source::open(input, &opts)?,
            OpenAt::Checkpoint(schema, pos) => source::resume(input, &opts, schema, pos)?,
        })
    };
    run_job(cfg, &mut open, &mut |_| {}).map(|_| ())
}

/// The side output's default path next to `output`.
fn side_of(output: &Path) -> PathBuf {
    output.with_file_name("out.late.csv")
}

/// The files a finished job leaves: output and side output (empty if none).
fn outputs(output: &Path) -> (Vec<u8>, Vec<u8>) {
    let read = |p: &Path| std::fs::read(p).unwrap_or_default();
    (read(output), read(&side_of(output)))
}

/// The test's input and what an uninterrupted run makes of it.
struct Fixture {
    dir: tempfile::TempDir,
    input: PathBuf,
    store: StoreKind,
    want: (Vec<u8>, Vec<u8>),
}

impl Fixture {
    fn new(store: StoreKind) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("tx.csv");
        write_input(&input, &rows(EVENTS, 0x5eed_1234));
        let run_dir = dir.path().join("reference");
        std::fs::create_dir(&run_dir).expect("mkdir");
        let out = run_dir.join("out.csv");
        run(&config(store, &out, &run_dir.join("ckpt"), None), &input)
            .unwrap_or_else(|e| panic!("{store:?}: uninterrupted run: {e}"));
        let want = outputs(&out);
        assert!(!want.0.is_empty() && !want.1.is_empty(), "the run wrote output and late events");
        Fixture { dir, input, store, want }
    }

    /// Mutating file-system calls a run makes over the first `events` input events on
    /// a [`CrashFs`] (with `events` a multiple of [`EVERY`]: through that checkpoint).
    fn calls_through(&self, events: usize, fsyncs: Fsyncs) -> u64 {
        let d = tempfile::tempdir_in(self.dir.path()).expect("tempdir");
        let input = d.path().join("prefix.csv");
        write_input(&input, &rows(EVENTS, 0x5eed_1234)[..events]);
        let ckpt = d.path().join("ckpt");
        std::fs::create_dir(&ckpt).expect("mkdir");
        let fs = CrashFs::new(&ckpt).expect("crash fs");
        let cfg = config(self.store, &d.path().join("out.csv"), &ckpt, Some(fsyncs.seam(&fs)));
        run(&cfg, &input).unwrap_or_else(|e| panic!("{:?}: run over {events}: {e}", self.store));
        fs.calls()
    }

    /// Runs the job with the power cut at mutating call `cut` (counted from the job's
    /// first), crashes as `mode` says, resumes over the real file system and compares
    /// the outputs with the uninterrupted run's. `Err` says what differed.
    fn power_loss(&self, cut: u64, mode: CrashMode, fsyncs: Fsyncs) -> Result<(), String> {
        let d = tempfile::tempdir_in(self.dir.path()).expect("tempdir");
        let (out, ckpt) = (d.path().join("out.csv"), d.path().join("ckpt"));
        std::fs::create_dir(&ckpt).expect("mkdir");
        let fs = CrashFs::new(&ckpt).expect("crash fs");
        fs.cut_after(Some(cut));
        let cfg = config(self.store, &out, &ckpt, Some(fsyncs.seam(&fs)));
        match run(&cfg, &self.input) {
            Ok(()) => panic!("cut at call {cut}: the job finished; the cut is past its calls"),
            Err(e) => assert!(fs.is_cut(), "cut at call {cut}: the job failed without a cut: {e}"),
        }
        fs.crash(mode, cut).map_err(|e| format!("crash: {e}"))?;
        let resume = JobConfig { resume: true, ..config(self.store, &out, &ckpt, None) };
        run(&resume, &self.input).map_err(|e| format!("resume failed: {e}"))?;
        let got = outputs(&out);
        for (what, got, want) in
            [("output", &got.0, &self.want.0), ("side output", &got.1, &self.want.1)]
        {
            if got != want {
                let at = got.iter().zip(want.iter()).take_while(|(a, b)| a == b).count();
                return Err(format!(
                    "the {what} differs from the uninterrupted run's from byte {at} ({} bytes, \
                     expected {})",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
    }

    /// Cuts the power at each call of `calls` in turn, crashing with the modes in turn
    /// (seeded by the cut); the failures, each naming its cut and mode.
    fn cuts(&self, calls: impl Iterator<Item = u64>, fsyncs: Fsyncs) -> Vec<String> {
        calls
            .filter_map(|cut| {
                let mode = mode_of(cut);
                self.power_loss(cut, mode, fsyncs)
                    .err()
                    .map(|e| format!("cut at call {cut}, {mode:?}: {e}"))
            })
            .collect()
    }
}

/// Which fsyncs reach the crash-simulating file system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fsyncs {
    /// All of them: the job as it is.
    All,
    /// None ([`CrashFs::suppress_sync`]): a job that never makes anything durable.
    None,
    /// All but those of the reservoir's segment files: a reservoir that forgot to fsync
    /// its chunks.
    NotSegments,
}

impl Fsyncs {
    /// The file system a job under test goes through.
    fn seam(self, fs: &CrashFs) -> Arc<dyn Fs> {
        fs.suppress_sync(self == Fsyncs::None);
        match self {
            Fsyncs::All | Fsyncs::None => Arc::new(fs.clone()),
            Fsyncs::NotSegments => Arc::new(NoSegmentSync(fs.clone())),
        }
    }
}

/// A [`CrashFs`] on which the fsyncs of reservoir segments (`*.spr`) succeed without
/// reaching it ([`Fsyncs::NotSegments`]).
#[derive(Debug)]
struct NoSegmentSync(CrashFs);

struct NoSyncFile(Box<dyn FileHandle>);

impl FileHandle for NoSyncFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn len(&self) -> std::io::Result<u64> {
        self.0.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
}

impl Fs for NoSegmentSync {
    fn open(&self, path: &Path, create: bool) -> std::io::Result<Box<dyn FileHandle>> {
        let f = self.0.open(path, create)?;
        let segment = path.extension().is_some_and(|e| e == "spr");
        Ok(if segment { Box::new(NoSyncFile(f)) } else { f })
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.0.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.0.sync_dir(dir)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.0.list_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
}

/// The crash mode of cut point `cut`: the modes in turn.
fn mode_of(cut: u64) -> CrashMode {
    const MODES: [CrashMode; 5] = [
        CrashMode::DropUnsynced,
        CrashMode::Scramble { sector: 512 },
        CrashMode::TornPrefix { sector: 4096 },
        CrashMode::Scramble { sector: 4096 },
        CrashMode::TornPrefix { sector: 512 },
    ];
    MODES[(cut % MODES.len() as u64) as usize]
}

/// The calls from the end of checkpoint 1 to the end of checkpoint 2 (and a little
/// after), with `fsyncs`: the reservoir's chunk writes and segment rolls, then the
/// checkpoint (the reservoir's sync, the store's flush, fsync and manifest), then the
/// release of the segments every window has passed.
fn second_checkpoint(f: &Fixture, fsyncs: Fsyncs) -> std::ops::RangeInclusive<u64> {
    let first = f.calls_through(EVERY as usize, fsyncs);
    let second = f.calls_through(2 * EVERY as usize, fsyncs);
    assert!(second > first + 10, "calls {first}..{second} between two checkpoints");
    first..=second
}

/// The power cut at every call from the end of checkpoint 1 to the end of checkpoint 2,
/// each with one crash mode in turn: the resumed job's output is the uninterrupted
/// run's.
#[test]
fn job_resumes_exactly_after_power_loss_in_a_checkpoint() {
    let f = Fixture::new(StoreKind::HashLog);
    let calls = second_checkpoint(&f, Fsyncs::All);
    let failures = f.cuts(calls.clone(), Fsyncs::All);
    assert!(
        failures.is_empty(),
        "cuts at calls {calls:?}: {} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The power cut at every call from the job's start to the end of checkpoint 1 (the
/// store's and the reservoir's directories and first files, then the first checkpoint):
/// the resume continues the checkpoint, or starts over when there is none.
#[test]
fn job_resumes_exactly_after_power_loss_before_its_first_checkpoint() {
    let f = Fixture::new(StoreKind::HashLog);
    let first = f.calls_through(EVERY as usize, Fsyncs::All);
    let failures = f.cuts(0..=first, Fsyncs::All);
    assert!(
        failures.is_empty(),
        "cuts at calls 0..={first}: {} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The oracle is not vacuous: with every fsync suppressed at the seam, some of the cuts
/// of [`job_resumes_exactly_after_power_loss_in_a_checkpoint`] (the same calls and crash
/// modes, which pass with the fsyncs) leave files from which the resume fails or writes
/// other output. (Others lose everything, and the job rightly starts over.)
#[test]
fn oracle_detects_a_job_without_fsyncs() {
    let f = Fixture::new(StoreKind::HashLog);
    let detected = f.cuts(second_checkpoint(&f, Fsyncs::None), Fsyncs::None);
    eprintln!("without fsyncs:\n{}", detected.join("\n"));
    assert!(!detected.is_empty(), "suppressing every fsync went unnoticed");
}

/// The same with only the fsyncs of the reservoir's segment files skipped (the one a
/// checkpoint's reservoir sync makes, and those of segment rolls): a checkpoint then
/// records a reservoir position that a crash does not keep, and the resume says so.
#[test]
fn oracle_detects_a_reservoir_without_fsyncs() {
    let f = Fixture::new(StoreKind::HashLog);
    let detected = f.cuts(second_checkpoint(&f, Fsyncs::NotSegments), Fsyncs::NotSegments);
    eprintln!("without the reservoir segments' fsyncs:\n{}", detected.join("\n"));
    assert!(
        detected.iter().any(|e| e.contains("segment")),
        "skipping the reservoir segments' fsyncs went unnoticed"
    );
}
