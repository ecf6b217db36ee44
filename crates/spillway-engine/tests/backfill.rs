//! Metric backfill (`run_job` with `resume` + `backfill`): a job checkpoints under one
//! query over the first part of an input, then resumes under a second query that adds,
//! changes, moves and drops metrics. The rows of the events after the checkpoint must
//! equal those of the second query run over the whole input without interruption, when
//! the reservoir covers the new windows; when it does not, a warning names the metric,
//! and the rows from the time it states on must still be equal.
//!
//! The interruption is an input that ends right at a checkpoint: the first run reads a
//! file holding the first `K` rows of the input (`K` a multiple of the checkpoint
//! interval, so its last checkpoint covers exactly those rows), and the resume reads the
//! whole input from the checkpoint's byte offset (the two files share those bytes).

use std::path::{Path, PathBuf};

use spillway_engine::checkpoint::Input;
use spillway_engine::job::{run_job, JobConfig, JobSummary, OpenAt};
use spillway_engine::operator::over::peers::Ties;
use spillway_engine::source::{self, SourceOptions};
use spillway_engine::Error;
use spillway_store::StoreKind;

/// Rows of a payment stream (no header): `card,merchant,amount,ts`, time in ms rising by
/// 0..6 per event; with `late_every` > 0, about one event in `late_every` is up to 45 ms
/// out of order and one in 101 is 300 ms late (beyond an allowed lateness of 50).
fn stream(n: usize, seed: u64, late_every: u64) -> Vec<String> {
    let mut x = seed | 1;
    let mut t: i64 = 1_000_000;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += (x % 7) as i64;
        let back = if late_every == 0 {
            0
        } else if x.is_multiple_of(101) {
            300
        } else if (x >> 12).is_multiple_of(late_every) {
            ((x >> 30) % 45) as i64
        } else {
            0
        };
        rows.push(format!(
            "c{},m{},{}.{:02},{}",
            x % 40,
            (x >> 20) % 15,
            (x >> 8) % 300,
            (x >> 40) % 100,
            t - back
        ));
    }
    rows
}

const HEADER: &str = "card,merchant,amount,ts";

struct Setup {
    dir: tempfile::TempDir,
    /// The whole input.
    full: PathBuf,
    /// Its first `k` rows.
    prefix: PathBuf,
    k: usize,
}

fn setup(rows: &[String], k: usize) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("tx.csv");
    let prefix = dir.path().join("tx-prefix.csv");
    let body = |rows: &[String]| format!("{HEADER}\n{}\n", rows.join("\n"));
    std::fs::write(&full, body(rows)).unwrap();
    std::fs::write(&prefix, body(&rows[..k])).unwrap();
    Setup { dir, full, prefix, k }
}

impl Setup {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn config(query: &str, output: &Path, ckpt: Option<&Path>, lateness: i64) -> JobConfig {
    JobConfig {
        query: query.to_string(),
        output: Some(output.to_path_buf()),
        discard_output: false,
        side_output: None,
        store: StoreKind::HashLog,
        tiered: Default::default(),
        memory_budget: 64 << 20,
        expected_keys: None,
        allowed_lateness: lateness,
        watermark_delay: 0,
        checkpoint_dir: ckpt.map(Path::to_path_buf),
        checkpoint_every: Some(if ckpt.is_some() { 1000 } else { 0 }),
        resume: false,
        compression: Default::default(),
        // The same for the prefix and the whole input: the resume reads on in the latter.
        input: Input::Named("tx".into()),
        // Small chunks and segments, so the reservoir releases segments as windows pass.
        reservoir_chunk_events: Some(128),
        reservoir_segment_bytes: Some(4096),
        halt: None,
        backfill: false,
        retain: None,
        metrics: None,
        ties: Default::default(),
        fs: None,
    }
}

/// Runs `cfg` over `input`; returns the summary and the warnings given to progress.
fn run(cfg: &JobConfig, input: &Path) -> Result<(JobSummary, Vec<String>), Error> {
    let opts = SourceOptions::new("ts");
    let mut open = |at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn source::Source>> {
        Ok(match at {
            OpenAt::Start | OpenAt::Schema => source::open(input, &opts)?,
            OpenAt::Checkpoint(schema, pos) => source::resume(input, &opts, schema, pos)?,
        })
    };
    let mut warnings = Vec::new();
    let s = run_job(cfg, &mut open, &mut |p| warnings.extend(p.warnings.iter().cloned()))?;
    Ok((s, warnings))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

/// The outcome of one backfill scenario.
struct Outcome {
    /// Header and rows of q2 over the whole input, without interruption.
    straight: Vec<String>,
    /// Header and rows of the backfilled run (the events after the checkpoint).
    backfilled: Vec<String>,
    /// Rows q1 emitted up to the checkpoint (the straight rows before the backfilled ones).
    before: usize,
    /// The first run's and the backfill's summaries, and the backfill's warnings.
    first: JobSummary,
    resumed: JobSummary,
    warnings: Vec<String>,
}

/// q1 with checkpoints over the first `k` rows, then q2 with `--backfill` over the rest;
/// and q2 over everything at once. `first` adjusts q1's config (e.g. `retain`).
fn scenario(
    s: &Setup,
    q1: &str,
    q2: &str,
    lateness: i64,
    first: impl FnOnce(&mut JobConfig),
) -> Outcome {
    scenario_with_ties(s, q1, q2, lateness, Ties::PerEvent, first)
}

/// [`scenario`] with `ties` for all three runs.
fn scenario_with_ties(
    s: &Setup,
    q1: &str,
    q2: &str,
    lateness: i64,
    ties: Ties,
    first: impl FnOnce(&mut JobConfig),
) -> Outcome {
    let straight_out = s.path("straight.csv");
    let mut straight = config(q2, &straight_out, None, lateness);
    straight.ties = ties;
    run(&straight, &s.full).unwrap();
    let ckpt = s.path("ckpt");
    let mut c1 = config(q1, &s.path("q1.csv"), Some(&ckpt), lateness);
    c1.ties = ties;
    first(&mut c1);
    let (first, _) = run(&c1, &s.prefix).unwrap();
    assert_eq!(first.counters.events, s.k as u64);
    let out2 = s.path("q2.csv");
    let mut c2 = config(q2, &out2, Some(&ckpt), lateness);
    c2.ties = ties;
    c2.resume = true;
    c2.backfill = true;
    let (resumed, warnings) = run(&c2, &s.full).unwrap();
    Outcome {
        straight: lines(&straight_out),
        backfilled: lines(&out2),
        before: first.counters.emitted as usize,
        first,
        resumed,
        warnings,
    }
}

impl Outcome {
    /// Asserts that the backfilled rows equal the straight run's rows after the checkpoint.
    fn assert_exact(&self) {
        assert_eq!(self.backfilled[0], self.straight[0], "header");
        let want = &self.straight[1 + self.before..];
        let got = &self.backfilled[1..];
        assert_eq!(got.len(), want.len(), "row count after the checkpoint");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "row {i} after the checkpoint");
        }
    }
}

const W2S: &str =
    "(PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)";

/// q2 changes a group (adds MAX and COUNT(DISTINCT) next to SUM and COUNT: a new state
/// layout, rebuilt), keeps the merchant group (MEDIAN in order-statistics trees) at
/// another index, adds a filtered metric, a new partitioning and a delayed window (new
/// enter and exit cursors), and drops a group; with out-of-order events within and
/// beyond the allowed lateness.
#[test]
fn changed_moved_new_and_dropped_groups_are_exact_with_lateness() {
    let rows = stream(40_000, 0x5EED_0001, 3);
    let s = setup(&rows, 20_000);
    let q1 = format!(
        "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
         MIN(amount) OVER (PARTITION BY card, merchant ORDER BY ts RANGE BETWEEN 500 PRECEDING AND CURRENT ROW) AS dropped, \
         AVG(amount) OVER m AS m_avg, MEDIAN(amount) OVER m AS m_med \
         FROM tx WINDOW w AS {W2S}, \
         m AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 3000 PRECEDING AND CURRENT ROW)"
    );
    let q2 = format!(
        "SELECT ts, card, AVG(amount) OVER m AS m_avg, MEDIAN(amount) OVER m AS m_med, \
         SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, MAX(amount) OVER w AS mx, \
         COUNT(DISTINCT merchant) OVER w AS merchants, \
         COUNT(*) FILTER (WHERE amount > 200) OVER w AS big, \
         SUM(amount) OVER (ORDER BY ts RANGE BETWEEN 1000 PRECEDING AND CURRENT ROW) AS all_1s, \
         COUNT(*) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 700 PRECEDING AND OPEN(20) PRECEDING) AS delayed \
         FROM tx WINDOW w AS {W2S}, \
         m AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 3000 PRECEDING AND CURRENT ROW)"
    );
    let o = scenario(&s, &q1, &q2, 50, |_| {});
    let b = o.resumed.backfill.as_ref().expect("a backfill summary");
    assert_eq!((b.groups_kept, b.groups_moved), (1, 1), "{b:?}");
    assert_eq!(b.groups_rebuilt, 4, "{b:?}");
    assert_eq!(b.groups_dropped, 2, "{b:?}");
    assert!(b.keys_copied > 0 && b.events_replayed > 0, "{b:?}");
    assert!(b.not_covered.is_empty() && o.warnings.is_empty(), "{:?}", o.warnings);
    assert!(o.resumed.counters.late_in_bounds > o.first.counters.late_in_bounds);
    assert!(o.resumed.counters.too_late > o.first.counters.too_late);
    o.assert_exact();
    // The late events after the checkpoint went to a side output started afresh.
    let side = lines(&s.path("q2.late.csv"));
    let straight_side = lines(&s.path("straight.late.csv"));
    let late_before = o.first.counters.too_late as usize;
    assert_eq!(side[1..], straight_side[1 + late_before..]);
}

/// q1 with a 2 s window; q2 adds an 8 s one.
fn longer_window_queries() -> (String, String) {
    let q1 = format!("SELECT card, ts, COUNT(*) OVER w AS n FROM tx WINDOW w AS {W2S}");
    let q2 = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n, \
         SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '8' SECOND PRECEDING AND CURRENT ROW) AS s8 \
         FROM tx WINDOW w AS {W2S}"
    );
    (q1, q2)
}

/// A window longer than any of q1's is covered when q1 ran with a retention that long:
/// the reservoir released segments all along, but not the ones the new window needs.
#[test]
fn a_longer_window_is_covered_by_the_retention() {
    let rows = stream(40_000, 0x5EED_0002, 0);
    let s = setup(&rows, 25_000);
    let (q1, q2) = longer_window_queries();
    let o = scenario(&s, &q1, &q2, 0, |c| c.retain = Some(10_000));
    assert!(
        o.first.reservoir_segments_deleted > 5,
        "the retention should still release old segments: {}",
        o.first.reservoir_segments_deleted
    );
    let b = o.resumed.backfill.as_ref().unwrap();
    assert!(b.not_covered.is_empty(), "{:?}", b.not_covered);
    assert_eq!((b.groups_kept, b.groups_rebuilt), (1, 1));
    o.assert_exact();
}

/// Without the retention the same window is not covered: a warning names the metric,
/// its window and the time from which it is exact; rows from that time on are equal to
/// the uninterrupted run's, and some before it are not (the gap is real).
#[test]
fn an_uncovered_window_warns_and_is_exact_from_the_stated_time() {
    let rows = stream(40_000, 0x5EED_0003, 0);
    let s = setup(&rows, 25_000);
    let (q1, q2) = longer_window_queries();
    let o = scenario(&s, &q1, &q2, 0, |_| {});
    let b = o.resumed.backfill.as_ref().unwrap();
    assert_eq!(b.not_covered.len(), 1, "{b:?}");
    let nc = &b.not_covered[0];
    assert_eq!(nc.metrics, vec!["s8".to_string()]);
    assert_eq!(nc.window, "[t-8s, t]");
    assert_eq!(o.warnings.len(), 1, "{:?}", o.warnings);
    let w = &o.warnings[0];
    for part in ["`s8`", "[t-8s, t]", &nc.exact_from.to_string(), "not covered"] {
        assert!(w.contains(part), "warning lacks {part}: {w}");
    }
    assert_eq!(b.warnings, o.warnings);
    // Oldest retained event + 8 s + 1 (a closed start).
    assert_eq!(nc.exact_from, nc.oldest_event_time + 8001);
    let ts = |row: &str| -> i64 { row.split(',').nth(1).unwrap().parse().unwrap() };
    let want = &o.straight[1 + o.before..];
    let got = &o.backfilled[1..];
    assert_eq!(got.len(), want.len());
    let mut compared = 0;
    let mut differ_before = 0;
    for (g, w) in got.iter().zip(want) {
        if ts(w) >= nc.exact_from {
            assert_eq!(g, w, "a row at or after the stated time {}", nc.exact_from);
            compared += 1;
        } else if g != w {
            differ_before += 1;
        }
    }
    assert!(compared > 1000, "only {compared} rows after the stated time");
    assert!(differ_before > 0, "no row before the stated time differs: the window was covered");
}

/// New UNBOUNDED PRECEDING and ROWS metrics are rebuilt when the reservoir still holds
/// every event (a retention longer than the input), with lateness; a kept ROWS metric
/// moves its state and kept rows to its new index.
#[test]
fn unbounded_and_rows_metrics_are_rebuilt_from_a_complete_reservoir() {
    let rows = stream(30_000, 0x5EED_0004, 11);
    let s = setup(&rows, 15_000);
    let rows5 = "(PARTITION BY card ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)";
    let q1 = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n, MIN(amount) OVER {rows5} AS mn5 \
         FROM tx WINDOW w AS {W2S}"
    );
    let q2 = format!(
        "SELECT card, ts, \
         SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total, \
         COUNT(*) OVER w AS n, MIN(amount) OVER {rows5} AS mn5, \
         MAX(amount) OVER (PARTITION BY merchant ORDER BY ts ROWS BETWEEN 20 PRECEDING AND CURRENT ROW) AS mx20 \
         FROM tx WINDOW w AS {W2S}"
    );
    let o = scenario(&s, &q1, &q2, 50, |c| c.retain = Some(1_000_000_000));
    assert_eq!(o.first.reservoir_segments_deleted, 0);
    let b = o.resumed.backfill.as_ref().unwrap();
    assert_eq!((b.groups_kept, b.groups_moved, b.groups_rebuilt), (2, 2, 2), "{b:?}");
    o.assert_exact();
}

/// After a backfill, a plain `--resume` with the new query continues its checkpoints
/// (and appends to the new output).
#[test]
fn a_backfilled_job_resumes_under_the_new_query() {
    let rows = stream(30_000, 0x5EED_0005, 11);
    let s = setup(&rows, 10_000);
    let middle = s.path("tx-middle.csv");
    std::fs::write(&middle, format!("{HEADER}\n{}\n", rows[..20_000].join("\n"))).unwrap();
    let q1 = format!("SELECT card, ts, COUNT(*) OVER w AS n FROM tx WINDOW w AS {W2S}");
    let q2 = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n, AVG(amount) OVER (PARTITION BY merchant ORDER BY ts \
         RANGE BETWEEN 1500 PRECEDING AND CURRENT ROW) AS m FROM tx WINDOW w AS {W2S}"
    );
    let straight = s.path("straight.csv");
    run(&config(&q2, &straight, None, 50), &s.full).unwrap();
    let ckpt = s.path("ckpt");
    let (first, _) = run(&config(&q1, &s.path("q1.csv"), Some(&ckpt), 50), &s.prefix).unwrap();
    let out2 = s.path("q2.csv");
    let mut c2 = config(&q2, &out2, Some(&ckpt), 50);
    c2.resume = true;
    c2.backfill = true;
    run(&c2, &middle).unwrap();
    assert!(ckpt.join("state-1").is_dir() && !ckpt.join("state").exists());
    // The old query cannot resume it any more, the new one can, without --backfill.
    let mut old = config(&q1, &s.path("q1.csv"), Some(&ckpt), 50);
    old.resume = true;
    let e = run(&old, &s.full).unwrap_err().to_string();
    assert!(e.contains("different query") && e.contains("--backfill"), "{e}");
    c2.backfill = false;
    let (last, _) = run(&c2, &s.full).unwrap();
    assert!(last.backfill.is_none());
    assert_eq!(last.counters.events, 30_000);
    let want = lines(&straight);
    let got = lines(&out2);
    assert_eq!(got[0], want[0]);
    assert!(got[1..] == want[1 + first.counters.emitted as usize..], "rows differ");
}

fn backfill_err(s: &Setup, q1: &str, q2: &str, first: impl FnOnce(&mut JobConfig)) -> String {
    let ckpt = s.path("ckpt");
    let _ = std::fs::remove_dir_all(&ckpt);
    let mut c1 = config(q1, &s.path("q1.csv"), Some(&ckpt), 0);
    first(&mut c1);
    run(&c1, &s.prefix).unwrap();
    let mut c2 = config(q2, &s.path("q2.csv"), Some(&ckpt), 0);
    c2.resume = true;
    c2.backfill = true;
    let e = run(&c2, &s.full).unwrap_err().to_string();
    // A refused backfill leaves the checkpoint as it was: q1 resumes from it.
    let mut again = config(q1, &s.path("q1.csv"), Some(&ckpt), 0);
    again.resume = true;
    let (done, _) = run(&again, &s.full).unwrap();
    assert_eq!(done.counters.events, 20_000);
    e
}

#[test]
fn refused_backfills_name_the_reason_and_keep_the_checkpoint() {
    let rows = stream(20_000, 0x5EED_0006, 0);
    let s = setup(&rows, 8_000);
    let q1 = format!("SELECT card, ts, COUNT(*) OVER w AS n FROM tx WINDOW w AS {W2S}");
    let with = |extra: &str| {
        format!("SELECT card, ts, COUNT(*) OVER w AS n, {extra} FROM tx WINDOW w AS {W2S}")
    };

    let e = backfill_err(
        &s,
        &q1,
        &with("SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS total"),
        |_| {},
    );
    assert!(
        e.contains("`total`") && e.contains("UNBOUNDED PRECEDING") && e.contains("--retain"),
        "{e}"
    );

    let e = backfill_err(
        &s,
        &q1,
        &with("MAX(amount) OVER (PARTITION BY card ORDER BY ts ROWS BETWEEN 5 PRECEDING AND CURRENT ROW) AS mx5"),
        |_| {},
    );
    assert!(e.contains("`mx5`") && e.contains("rows"), "{e}");

    let where_q = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n FROM tx WHERE amount > 10 WINDOW w AS {W2S}"
    );
    let e = backfill_err(&s, &q1, &where_q, |_| {});
    assert!(e.contains("WHERE amount > 10") && e.contains("FILTER"), "{e}");

    // The new output must not be the old one.
    let ckpt = s.path("ckpt");
    let _ = std::fs::remove_dir_all(&ckpt);
    run(&config(&q1, &s.path("q1.csv"), Some(&ckpt), 0), &s.prefix).unwrap();
    let mut c2 = config(&with("MAX(amount) OVER w AS mx"), &s.path("q1.csv"), Some(&ckpt), 0);
    c2.resume = true;
    c2.backfill = true;
    let e = run(&c2, &s.full).unwrap_err().to_string();
    assert!(e.contains("q1.csv") && e.contains("new one"), "{e}");

    // A windowed aggregation cannot backfill.
    c2.query = "SELECT card, window_start, window_end, COUNT(*) AS n \
                FROM TABLE(TUMBLE(TABLE tx, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
                GROUP BY card, window_start, window_end"
        .into();
    c2.output = Some(s.path("q2.csv"));
    let e = run(&c2, &s.full).unwrap_err().to_string();
    assert!(e.contains("--backfill") && e.contains("window table function"), "{e}");

    // --backfill without --resume.
    let mut c3 = config(&q1, &s.path("q3.csv"), Some(&s.path("other")), 0);
    c3.backfill = true;
    let e = run(&c3, &s.full).unwrap_err().to_string();
    assert!(e.contains("--resume"), "{e}");

    // Without --backfill, another query is refused as before, naming the way out.
    let mut c4 = config(&with("MAX(amount) OVER w AS mx"), &s.path("q4.csv"), Some(&ckpt), 0);
    c4.resume = true;
    let e = run(&c4, &s.full).unwrap_err().to_string();
    assert!(e.contains("different query") && e.contains("--backfill"), "{e}");

    // Another input (or lateness, store, schema) is refused with --backfill too.
    c4.backfill = true;
    c4.input = Input::Named("another".into());
    let e = run(&c4, &s.full).unwrap_err().to_string();
    assert!(e.contains("different input"), "{e}");
}

/// The time of a row of [`stream`].
fn time_of(row: &str) -> i64 {
    row.rsplit(',').next().unwrap().parse().unwrap()
}

/// With `--ties peers` the checkpoint falls among the rows of one time, which wait for
/// their peers (the first run's input ends there, so they never came out of it). The
/// backfilled query gives those events its own columns and its peer values once their
/// time is complete: from the first held event on, its rows equal those of the new
/// query run without interruption.
#[test]
fn rows_held_for_their_peers_come_out_with_the_new_query() {
    let rows = stream(30_000, 0x5EED_0007, 0);
    let t = |i: usize| time_of(&rows[i]);
    // A checkpoint (one every 1000 events) after two tied events, with a third to come.
    let k = (10..30)
        .map(|m| m * 1000)
        .find(|&k| t(k - 2) == t(k - 1) && t(k) == t(k - 1))
        .expect("a checkpoint among tied events");
    let held = (0..k).rev().take_while(|&i| t(i) == t(k - 1)).count();
    let s = setup(&rows, k);
    let q1 = format!("SELECT card, ts, SUM(amount) OVER w AS s FROM tx WINDOW w AS {W2S}");
    let q2 = format!(
        "SELECT card, ts, merchant, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
         MAX(amount) OVER w AS hi, AVG(amount) OVER (PARTITION BY merchant ORDER BY ts \
         RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS m \
         FROM tx WINDOW w AS {W2S}"
    );
    let o = scenario_with_ties(&s, &q1, &q2, 0, Ties::Peers, |_| {});
    assert!(o.warnings.is_empty(), "{:?}", o.warnings);
    assert_eq!(o.backfilled[0], o.straight[0], "header");
    let want = &o.straight[1 + k - held..];
    let got = &o.backfilled[1..];
    assert_eq!(got.len(), want.len(), "rows from the first held event on ({held} held)");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "row {i} from the first held event");
    }
}

/// Held rows whose own value the state cannot give back are refused by name, and the
/// checkpoint stays as it was: a new query with a `ROWS` metric (a row's own value),
/// and rows held for late events (they keep their per-event values).
#[test]
fn held_rows_the_state_cannot_rebuild_are_refused() {
    let rows = stream(30_000, 0x5EED_0007, 0);
    let t = |i: usize| time_of(&rows[i]);
    let k = (10..30).map(|m| m * 1000).find(|&k| t(k - 2) == t(k - 1)).unwrap();
    let s = setup(&rows, k);
    // The ROWS node is kept (the same in both queries): no rebuild, but a held row's
    // own value of it is not in the state.
    let rows3 = "SUM(amount) OVER (PARTITION BY card ORDER BY ts ROWS BETWEEN 2 PRECEDING \
                 AND CURRENT ROW) AS last3";
    let q1 = format!("SELECT card, ts, COUNT(*) OVER w AS n, {rows3} FROM tx WINDOW w AS {W2S}");
    let q2 = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n, {rows3}, MAX(amount) OVER w AS hi FROM tx \
         WINDOW w AS {W2S}"
    );
    let ckpt = s.path("ckpt");
    let mut c1 = config(&q1, &s.path("q1.csv"), Some(&ckpt), 0);
    c1.ties = Ties::Peers;
    run(&c1, &s.prefix).unwrap();
    let mut c2 = config(&q2, &s.path("q2.csv"), Some(&ckpt), 0);
    c2.ties = Ties::Peers;
    c2.resume = true;
    c2.backfill = true;
    let e = run(&c2, &s.full).unwrap_err().to_string();
    assert!(e.contains("count rows (ROWS)"), "{e}");
    let mut again = c1.clone();
    again.resume = true;
    let (done, _) = run(&again, &s.full).unwrap();
    assert_eq!(done.counters.events, 30_000);

    // A late event (within the lateness) held behind the rows of the newest time.
    let mut late_rows = rows[..k].to_vec();
    let newest = t(k - 1);
    late_rows.push(format!("c1,m1,5.00,{}", newest - 10));
    late_rows.extend_from_slice(&rows[k..]);
    let s = setup(&late_rows, k + 1);
    let mut c1 = config(&q1, &s.path("q1.csv"), Some(&s.path("ckpt")), 50);
    c1.ties = Ties::Peers;
    c1.checkpoint_every = Some(k as u64 + 1);
    run(&c1, &s.prefix).unwrap();
    let q2 = format!(
        "SELECT card, ts, COUNT(*) OVER w AS n, MAX(amount) OVER w AS hi FROM tx WINDOW w AS {W2S}"
    );
    let mut c2 = config(&q2, &s.path("q2.csv"), Some(&s.path("ckpt")), 50);
    c2.ties = Ties::Peers;
    c2.checkpoint_every = Some(k as u64 + 1);
    c2.resume = true;
    c2.backfill = true;
    let e = run(&c2, &s.full).unwrap_err().to_string();
    assert!(e.contains("late events' rows"), "{e}");
}
