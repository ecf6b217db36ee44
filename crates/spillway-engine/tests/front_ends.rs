//! Every query kind on every in-process front-end: the file job (`run_job`, what
//! `spillway run` runs) and the session (what Python's `run` and `Stream` and the Kafka
//! workers' tasks drive) give the same output, byte for byte through the same CSV sink,
//! for windowed aggregations (TUMBLE, HOP, CUMULATE, SESSION), ROWS frames, UNBOUNDED and
//! OVER RANGE, also when the session checkpoints, is dropped (the events after its
//! checkpoint lost) and resumes from `events()`.

use std::path::{Path, PathBuf};

use spillway_engine::job::{run_job, JobConfig, OpenAt};
use spillway_engine::operator::over::Outcome;
use spillway_engine::session::{checkpointed_schema, Session, SessionConfig};
use spillway_engine::source::{self, Sink, SourceOptions};
use spillway_engine::value::{Event, Row};
use spillway_store::StoreKind;

/// A seeded stream `card,amount,ts` with ties, gaps and a few events out of order.
fn csv(n: usize, seed: u64) -> String {
    let mut x = seed | 1;
    let mut t: i64 = 1_000;
    let mut s = String::from("card,amount,ts\n");
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += (x % 40) as i64;
        let back = if i % 97 == 5 { (x >> 9) % 60 } else { 0 } as i64;
        s.push_str(&format!("c{},{}.{:02},{}\n", x % 9, (x >> 8) % 300, (x >> 40) % 100, t - back));
    }
    s
}

const QUERIES: &[(&str, &str)] = &[
    (
        "tumble",
        "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s \
         FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         GROUP BY card, window_start, window_end",
    ),
    (
        "hop",
        "SELECT card, window_start, window_end, MAX(amount) AS hi, AVG(amount) AS a \
         FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '500' MILLISECOND, INTERVAL '2' SECOND)) \
         GROUP BY card, window_start, window_end",
    ),
    (
        "cumulate",
        "SELECT card, window_start, window_end, COUNT(*) AS n \
         FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) \
         GROUP BY card, window_start, window_end",
    ),
    (
        "session",
        "SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s \
         FROM TABLE(SESSION(TABLE t PARTITION BY card, DESCRIPTOR(ts), INTERVAL '300' MILLISECOND)) \
         GROUP BY card, window_start, window_end",
    ),
    (
        "rows",
        "SELECT card, SUM(amount) OVER (PARTITION BY card ORDER BY ts ROWS BETWEEN 3 \
         PRECEDING AND CURRENT ROW) AS s4 FROM t",
    ),
    (
        "unbounded",
        "SELECT card, COUNT(*) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN UNBOUNDED \
         PRECEDING AND CURRENT ROW) AS n FROM t",
    ),
    (
        "range",
        "SELECT card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s FROM t WINDOW w AS \
         (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND \
         CURRENT ROW)",
    ),
];

const LATENESS: i64 = 100;

fn job(query: &str, input: &Path, output: &Path) {
    let cfg = JobConfig {
        query: query.to_string(),
        output: Some(output.to_path_buf()),
        discard_output: false,
        side_output: Some(output.with_extension("late.csv")),
        store: StoreKind::HashLog,
        tiered: Default::default(),
        memory_budget: 64 << 20,
        expected_keys: None,
        allowed_lateness: LATENESS,
        watermark_delay: 0,
        checkpoint_dir: None,
        checkpoint_every: Some(0),
        resume: false,
        compression: Default::default(),
        input: spillway_engine::checkpoint::Input::Named("in".into()),
        reservoir_chunk_events: Some(64),
        reservoir_segment_bytes: Some(4096),
        halt: None,
        backfill: false,
        retain: None,
        metrics: None,
        ties: Default::default(),
        fs: None,
    };
    let opts = SourceOptions::new("ts");
    let mut open = |at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn source::Source>> {
        Ok(match at {
            OpenAt::Start | OpenAt::Schema => source::open(input, &opts)?,
            OpenAt::Checkpoint(schema, pos) => source::resume(input, &opts, schema, pos)?,
        })
    };
    run_job(&cfg, &mut open, &mut |_| {}).unwrap();
}

/// The input's events, as the file source reads them.
fn events(input: &Path) -> (spillway_engine::value::Schema, Vec<Event>) {
    let mut src = source::open(input, &SourceOptions::new("ts")).unwrap();
    let schema = src.schema().clone();
    let mut evs = Vec::new();
    while let Some(e) = src.next_event().unwrap() {
        evs.push(e);
    }
    (schema, evs)
}

fn session_config(query: &str, dir: Option<PathBuf>) -> SessionConfig {
    let mut cfg = SessionConfig::new(query);
    cfg.memory_budget = 64 << 20;
    cfg.allowed_lateness = LATENESS;
    cfg.reservoir_chunk_events = Some(64);
    cfg.reservoir_segment_bytes = Some(4096);
    cfg.dir = dir;
    cfg
}

fn push_all(s: &mut Session, evs: &[Event], rows: &mut Vec<Row>) {
    for e in evs {
        let o = s.push(e.time, e.row.clone(), rows).unwrap();
        assert!(!matches!(o, Outcome::TooLate(_)), "the stream stays within the lateness");
    }
}

fn write(path: &Path, columns: &[String], rows: &[Row]) {
    let mut sink = Sink::create(Some(path), columns).unwrap();
    for r in rows {
        sink.write_row(r).unwrap();
    }
    sink.sync().unwrap();
}

#[test]
fn a_session_gives_the_file_jobs_output_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(&input, csv(3000, 7)).unwrap();
    let (schema, evs) = events(&input);
    for (name, q) in QUERIES {
        let want_path = dir.path().join(format!("{name}-job.csv"));
        job(q, &input, &want_path);
        let want = std::fs::read(&want_path).unwrap();
        assert!(want.len() > 200, "{name}: the job emitted rows");

        // Straight through.
        let mut s = Session::open(&session_config(q, None), schema.clone()).unwrap();
        let columns: Vec<String> = s.columns().iter().map(|c| c.0.clone()).collect();
        let mut rows = Vec::new();
        push_all(&mut s, &evs, &mut rows);
        s.finish(&mut rows).unwrap();
        let got_path = dir.path().join(format!("{name}-session.csv"));
        write(&got_path, &columns, &rows);
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(&got_path).unwrap()),
            String::from_utf8_lossy(&want),
            "{name}: session against the file job"
        );

        // A checkpoint at 1,234 events, 300 more pushed and lost, a resume from events().
        let ckpt = dir.path().join(format!("{name}-ckpt"));
        let cfg = session_config(q, Some(ckpt.clone()));
        let mut s = Session::open(&cfg, schema.clone()).unwrap();
        let mut rows = Vec::new();
        push_all(&mut s, &evs[..1234], &mut rows);
        s.checkpoint().unwrap();
        let mut lost = Vec::new();
        push_all(&mut s, &evs[1234..1534], &mut lost);
        drop(s);
        assert_eq!(checkpointed_schema(&ckpt).unwrap().as_ref(), Some(&schema), "{name}");
        let mut s = Session::open(&cfg, schema.clone()).unwrap();
        assert!(s.resumed(), "{name}");
        assert_eq!(s.events(), 1234, "{name}");
        let from = s.events() as usize;
        push_all(&mut s, &evs[from..], &mut rows);
        s.finish(&mut rows).unwrap();
        write(&got_path, &columns, &rows);
        assert_eq!(
            String::from_utf8_lossy(&std::fs::read(&got_path).unwrap()),
            String::from_utf8_lossy(&want),
            "{name}: session resumed from a checkpoint against the file job"
        );
    }
}

#[test]
fn process_refuses_a_windowed_query_and_names_push() {
    let (schema, _) = {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.csv");
        std::fs::write(&input, csv(10, 1)).unwrap();
        events(&input)
    };
    let mut s = Session::open(&SessionConfig::new(QUERIES[0].1), schema).unwrap();
    assert!(s.is_windowed());
    let e = s.process(1, vec![], &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("Session::push"), "{e}");
}

#[test]
fn a_directory_without_a_checkpoint_has_no_schema() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(checkpointed_schema(dir.path()).unwrap(), None);
    std::fs::write(dir.path().join("SCHEMA.json"), b"{not json").unwrap();
    let e = checkpointed_schema(dir.path()).unwrap_err();
    assert!(e.to_string().contains("SCHEMA.json"), "{e}");
}
