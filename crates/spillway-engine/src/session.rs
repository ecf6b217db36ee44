//! A session: one query over events the caller pushes from memory (no source or sink
//! files), with checkpoints and resume. The Python package (`crates/spillway-py`) and the
//! Kafka workers' tasks drive it; [`crate::job::run_job`] is the file-to-file driver over
//! the same [operators](crate::operator). Both query shapes run here: per-event metrics
//! (`AGG(..) OVER w`: [`Session::process`] gives the event's row) and windowed
//! aggregations (`TUMBLE`, `HOP`, `CUMULATE`, `SESSION` in `FROM`: [`Session::push`]
//! gives the rows of the windows that fire, [`Session::finish`] the rest at the end).
//!
//! ```
//! use spillway_engine::session::{Session, SessionConfig};
//! use spillway_engine::operator::over::Outcome;
//! use spillway_engine::value::{DataType, Field, Schema, TimeUnit, Value};
//!
//! let schema = Schema::new(
//!     vec![
//!         Field { name: "ts".into(), ty: DataType::Int },
//!         Field { name: "card".into(), ty: DataType::Int },
//!     ],
//!     "ts",
//!     TimeUnit::S,
//! )
//! .unwrap();
//! let q = "SELECT card, COUNT(*) OVER (PARTITION BY card ORDER BY ts \
//!          RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW) AS n FROM t";
//! let mut s = Session::open(&SessionConfig::new(q), schema).unwrap();
//! let mut out = Vec::new();
//! for (ts, card) in [(0, 1), (5, 1), (20, 1)] {
//!     assert_eq!(s.process(ts, vec![Value::Int(ts), Value::Int(card)], &mut out).unwrap(), Outcome::Emitted);
//! }
//! assert_eq!(out, vec![Value::Int(1), Value::Int(1)]); // the event at 20 is alone in [10, 20]
//! ```
//!
//! ## Checkpoints
//! A session is a thin layer over the [driver](crate::driver), which runs the operator.
//! With [`SessionConfig::dir`], [`Session::checkpoint`] makes the driver's atomic
//! checkpoint: the operator's snapshot (the reservoir synced) and a
//! [`crate::checkpoint::Record`] whose front is the caller's tag
//! ([`Session::checkpoint_tagged`]) go into the store's `meta` namespace, and the store
//! checkpoints; only then are reservoir segments behind every cursor released. The first
//! checkpoint then writes the input schema to `DIR/SCHEMA.json` ([`checkpointed_schema`]),
//! so that a caller that infers its schema from data (Python's `Stream`) can reopen the
//! directory before any data arrives.
//!
//! FORMAT: the record is the [checkpoint module's](crate::checkpoint) (its FORMAT section;
//! the input is [`Input::Pushed`]). `SCHEMA.json` is the schema as JSON (written to a
//! temporary name, fsynced, renamed, the directory fsynced); it never changes for a
//! directory, whose checkpoints all carry the same schema (a session with another one is
//! refused, naming the change). [`Session::open`] on a directory holding such a
//! checkpoint continues from it, so pushing the rest of the events gives exactly the
//! results of an uninterrupted session. A directory with state but no completed
//! checkpoint is cleared and started over (nothing it held was checkpointed); one holding
//! a `spillway run` job's checkpoint is refused.

use std::path::{Path, PathBuf};

use spillway_store::StoreKind;

use crate::checkpoint::layout::{clear_dirs, replace_durably};
use crate::checkpoint::{self, Front, Identity, Input, StoreIdentity};
use crate::driver::{Cadence, Driver, StateConfig};
use crate::error::{Error, Result};
use crate::operator::over::{Counters, Outcome};
use crate::operator::QueryPlan;
use crate::reservoir::Compression;
#[cfg(doc)]
use crate::reservoir::ReservoirOptions;
use crate::value::{DataType, Row, Schema, Value};

/// The file holding a checkpointed session's input schema.
const SCHEMA_FILE: &str = "SCHEMA.json";

/// How to run a session.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The SQL text.
    pub query: String,
    /// State store backend (default hashlog).
    pub store: StoreKind,
    /// The levels of the tiered store, when `store` is [`StoreKind::Tiered`] (default:
    /// [`spillway_store::TieredOptions::default`]).
    pub tiered: spillway_store::TieredOptions,
    /// Memory budget of the store, in bytes (default 256 MiB).
    pub memory_budget: u64,
    /// Expected number of partition keys, a store sizing hint (default none).
    pub expected_keys: Option<u64>,
    /// Allowed lateness in the time column's unit (default 0).
    pub allowed_lateness: i64,
    /// How far a windowed aggregation's watermark trails the newest event time (beyond
    /// the one unit that keeps ties in time), in the time column's unit (default 0;
    /// per-event metrics have no watermark and refuse another value).
    pub watermark_delay: i64,
    /// Reservoir chunk compression (default LZ4).
    pub compression: Compression,
    /// Events per reservoir chunk (default `None`: [`ReservoirOptions`]'s 4096).
    pub reservoir_chunk_events: Option<usize>,
    /// Size at which reservoir segment files roll (default `None`:
    /// [`ReservoirOptions`]'s 64 MiB).
    pub reservoir_segment_bytes: Option<u64>,
    /// Directory of the store, reservoir and checkpoints (default `None`: a temporary
    /// directory removed when the session is dropped; no checkpoints).
    pub dir: Option<PathBuf>,
    /// How `RANGE` frames treat rows of equal time (default per-event; see
    /// [`crate::operator::over::peers`]).
    pub ties: crate::operator::over::peers::Ties,
    /// Compute only these SELECT items (positions in the query, in output order) and the
    /// windows they use; `None`: all of them. A Kafka routing stage computes the metrics
    /// of its key this way ([`crate::sql::QuerySpec::retain_items`]).
    pub items: Option<Vec<usize>>,
}

impl SessionConfig {
    /// A configuration with the defaults listed on each field.
    pub fn new(query: impl Into<String>) -> SessionConfig {
        SessionConfig {
            query: query.into(),
            store: StoreKind::HashLog,
            tiered: spillway_store::TieredOptions::default(),
            memory_budget: 256 << 20,
            expected_keys: None,
            allowed_lateness: 0,
            watermark_delay: 0,
            compression: Compression::Lz4,
            reservoir_chunk_events: None,
            reservoir_segment_bytes: None,
            dir: None,
            items: None,
            ties: Default::default(),
        }
    }
}

impl SessionConfig {
    /// The state options of the session's driver.
    pub fn state(&self) -> StateConfig<'_> {
        StateConfig {
            store: self.store,
            tiered: &self.tiered,
            memory_budget: self.memory_budget,
            expected_keys: self.expected_keys,
            allowed_lateness: self.allowed_lateness,
            watermark_delay: self.watermark_delay,
            compression: self.compression,
            reservoir_chunk_events: self.reservoir_chunk_events,
            reservoir_segment_bytes: self.reservoir_segment_bytes,
            fs: None,
            ties: self.ties,
        }
    }
}

/// One query over pushed events. See the module docs.
pub struct Session {
    driver: Driver,
    windowed: bool,
    columns: Vec<(String, DataType)>,
    checkpoints: bool,
    /// The tag of the checkpoint resumed from (`None`: a fresh session).
    resumed_tag: Option<Vec<u8>>,
    /// The session's directory (its `SCHEMA.json`).
    base: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Session {
    /// Parses and plans the query against `schema` and opens the store and reservoir,
    /// continuing from the checkpoint in [`SessionConfig::dir`] if it holds one.
    pub fn open(cfg: &SessionConfig, schema: Schema) -> Result<Session> {
        let plan = QueryPlan::build(&cfg.query, &schema, cfg.items.as_deref())?;
        if !plan.is_windowed() && cfg.watermark_delay != 0 {
            return Err(Error::Config(
                "a watermark delay applies to windowed aggregations (a window table function \
                 in FROM); per-event metrics are emitted as each event arrives"
                    .into(),
            ));
        }
        let columns = plan.output_types(&schema)?;
        let windowed = plan.is_windowed();
        let (base, tmp) = match &cfg.dir {
            Some(d) => (d.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("spillway-session-").tempdir().map_err(
                    |e| Error::Config(format!("cannot create a temporary directory: {e}")),
                )?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let state_dir = base.join("state");
        let res_dir = base.join("reservoir");
        let state = cfg.state();
        let identity = Identity {
            input: Input::Pushed,
            schema,
            allowed_lateness: cfg.allowed_lateness,
            watermark_delay: cfg.watermark_delay,
            store: StoreIdentity::of(cfg.store),
            items: cfg.items.clone(),
            ties: cfg.ties,
        };
        let had_state = state_dir.exists();
        let mut store = state.open_store(&state_dir, plan.namespace_specs())?;
        let record = if had_state { checkpoint::read(store.as_mut(), &base)? } else { None };
        let cadence = if cfg.dir.is_some() { Cadence::OnDemand } else { Cadence::Never };
        let resumed_tag = match &record {
            Some(r) => {
                let Front::Pushed { tag } = &r.front else {
                    return Err(Error::Config(format!(
                        "{} holds a `spillway run` job's checkpoints, not a session's; choose another directory",
                        base.display()
                    )));
                };
                if r.query != cfg.query {
                    return Err(Error::Checkpoint(format!(
                        "{} was written by a session with another query ({:?}); reopen it with \
                         the same query or choose another directory",
                        base.display(),
                        r.query
                    )));
                }
                r.check_identity(&identity, &base, "a session")?;
                Some(tag.clone())
            }
            None => {
                if had_state || res_dir.exists() {
                    // State from a session that never completed a checkpoint: start over.
                    drop(store);
                    clear_dirs(&[&state_dir, &res_dir])?;
                    store = state.open_store(&state_dir, plan.namespace_specs())?;
                }
                None
            }
        };
        let driver = Driver::open(
            &state, plan, store, identity, &cfg.query, &res_dir, record, None, cadence, &base,
        )?;
        Ok(Session {
            driver,
            windowed,
            columns,
            checkpoints: cfg.dir.is_some(),
            resumed_tag,
            base,
            _tmp: tmp,
        })
    }

    /// The input schema.
    pub fn schema(&self) -> &Schema {
        self.driver.schema()
    }

    /// Output columns (the SELECT list) and their types. A `SUM` over ints typed
    /// [`DataType::Int`] may still give a [`Value::Float`] when it leaves the i64 range.
    pub fn columns(&self) -> &[(String, DataType)] {
        &self.columns
    }

    /// True when [`Session::open`] continued from a checkpoint.
    pub fn resumed(&self) -> bool {
        self.resumed_tag.is_some()
    }

    /// Events given to this session so far, including those before a resume.
    pub fn events(&self) -> u64 {
        self.driver.events()
    }

    /// Runtime counters (across resumes).
    pub fn counters(&self) -> Counters {
        self.driver.counters()
    }

    /// The state store's statistics.
    pub fn store_stats(&mut self) -> spillway_store::StoreStats {
        self.driver.operator().store_mut().stats()
    }

    /// Whether the query is a windowed aggregation (rows come as windows fire, through
    /// [`Session::push`] and [`Session::finish`]).
    pub fn is_windowed(&self) -> bool {
        self.windowed
    }

    /// Whether each event's row (if any) comes back from its own call, so
    /// [`Session::process`] serves: per-event metrics without peer rows. Otherwise rows
    /// come through [`Session::push`] and [`Session::finish`].
    pub fn one_row_per_event(&mut self) -> bool {
        self.driver.operator().one_row_per_event()
    }

    /// Announces the next events, in the order they will be pushed, so the state store
    /// can prefetch the state they touch (as [`Driver::run`] does for each batch it
    /// reads). A hint only: results are exactly those of pushing the events without it.
    /// The events' sequence numbers are ignored.
    pub fn prefetch(&mut self, events: &[crate::value::Event]) {
        self.driver.prefetch(events);
    }

    /// Processes the next event: `row` holds one value per schema field (its time field
    /// equal to `time`). The rows it emits are appended to `rows`: the event's own row
    /// for per-event metrics ([`Outcome::Emitted`]), the rows of the windows it closed for
    /// a windowed aggregation. An event later than the allowed lateness comes back as
    /// [`Outcome::TooLate`].
    pub fn push(&mut self, time: i64, row: Row, rows: &mut Vec<Row>) -> Result<Outcome> {
        let event = self.driver.next_event(time, row);
        let outcome = self.driver.process(event, rows)?;
        self.driver.release_if_due()?;
        Ok(outcome)
    }

    /// Like [`Session::push`] for per-event metrics, whose event has at most one row: on
    /// [`Outcome::Emitted`], `out` holds it. A windowed aggregation is refused (its rows
    /// are not the event's; use `push`).
    pub fn process(&mut self, time: i64, row: Row, out: &mut Vec<Value>) -> Result<Outcome> {
        if !self.driver.operator().one_row_per_event() {
            return Err(Error::Config(
                "this query emits rows later than their events (a windowed aggregation as its \
                 windows fire, peer rows once their time is complete): push events with \
                 Session::push and end with Session::finish"
                    .into(),
            ));
        }
        let event = self.driver.next_event(time, row);
        let outcome = self.driver.process_row(event, out)?;
        self.driver.release_if_due()?;
        Ok(outcome)
    }

    /// End of input: a windowed aggregation fires every window still open (appending
    /// their rows); per-event metrics have nothing to add. Events pushed after this
    /// start new windows.
    pub fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        self.driver.finish(rows)
    }

    /// Makes an atomic checkpoint (see the module docs). Needs [`SessionConfig::dir`].
    pub fn checkpoint(&mut self) -> Result<()> {
        self.checkpoint_tagged(&[])
    }

    /// Like [`Session::checkpoint`], storing `tag` in the same atomic checkpoint (the
    /// Kafka worker records the input offset the checkpoint covers); [`Session::tag`]
    /// reads it back after a resume.
    pub fn checkpoint_tagged(&mut self, tag: &[u8]) -> Result<()> {
        if !self.checkpoints {
            return Err(Error::Config(
                "checkpoint() needs a checkpoint directory (the session runs in a temporary one)"
                    .into(),
            ));
        }
        self.driver.checkpoint(Front::Pushed { tag: tag.to_vec() })?;
        // After the checkpoint, so a schema file always has a checkpoint behind it.
        write_schema(&self.base, self.driver.schema())?;
        self.driver.release()
    }

    /// The tag of the checkpoint this session resumed from (empty when it was written by
    /// [`Session::checkpoint`]); `None` for a session that did not resume.
    pub fn tag(&self) -> Option<&[u8]> {
        self.resumed_tag.as_deref()
    }
}

/// Writes `schema` to `dir/SCHEMA.json` unless it is there (see the module docs).
fn write_schema(dir: &Path, schema: &Schema) -> Result<()> {
    if dir.join(SCHEMA_FILE).exists() {
        return Ok(());
    }
    let json = serde_json::to_vec_pretty(schema)
        .map_err(|e| Error::Checkpoint(format!("cannot encode the schema: {e}")))?;
    replace_durably(dir, SCHEMA_FILE, &json)
}

/// The input schema of the session checkpointed in `dir` (`None`: no checkpoint there),
/// so a caller can reopen it before it has seen any data.
pub fn checkpointed_schema(dir: &Path) -> Result<Option<Schema>> {
    let path = dir.join(SCHEMA_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Checkpoint(format!("cannot read {}: {e}", path.display()))),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Checkpoint(format!("{} is not a schema: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Field, TimeUnit};

    fn schema() -> Schema {
        Schema::new(
            vec![
                Field { name: "ts".into(), ty: DataType::Int },
                Field { name: "card".into(), ty: DataType::Int },
                Field { name: "amount".into(), ty: DataType::Float },
            ],
            "ts",
            TimeUnit::S,
        )
        .unwrap()
    }

    const Q: &str = "SELECT card, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s, \
        AVG(amount) OVER w AS a FROM t \
        WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN INTERVAL '30' SECOND PRECEDING AND CURRENT ROW)";

    fn events(n: i64) -> Vec<(i64, Row)> {
        (0..n)
            .map(|i| {
                let ts = i * 3 + (i % 7);
                (ts, vec![Value::Int(ts), Value::Int(i % 5), Value::Float((i % 13) as f64 + 0.25)])
            })
            .collect()
    }

    fn run(s: &mut Session, evs: &[(i64, Row)]) -> Vec<Vec<Value>> {
        let mut rows = Vec::new();
        let mut out = Vec::new();
        for (t, r) in evs {
            if s.process(*t, r.clone(), &mut out).unwrap() == Outcome::Emitted {
                rows.push(out.clone());
            }
        }
        rows
    }

    #[test]
    fn output_types_follow_the_aggregates() {
        let s = Session::open(&SessionConfig::new(Q), schema()).unwrap();
        let tys: Vec<DataType> = s.columns().iter().map(|c| c.1).collect();
        assert_eq!(tys, [DataType::Int, DataType::Int, DataType::Float, DataType::Float]);
    }

    #[test]
    fn checkpoint_and_resume_equal_an_uninterrupted_session() {
        let evs = events(3000);
        let whole = run(&mut Session::open(&SessionConfig::new(Q), schema()).unwrap(), &evs);
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = SessionConfig::new(Q);
        cfg.dir = Some(dir.path().to_path_buf());
        let mut s = Session::open(&cfg, schema()).unwrap();
        assert!(!s.resumed());
        let mut got = run(&mut s, &evs[..1700]);
        s.checkpoint().unwrap();
        // Events after the checkpoint are lost with the session and pushed again.
        run(&mut s, &evs[1700..1900]);
        drop(s);
        let mut s = Session::open(&cfg, schema()).unwrap();
        assert!(s.resumed());
        assert_eq!(s.events(), 1700);
        got.extend(run(&mut s, &evs[1700..]));
        assert_eq!(got, whole);
    }

    #[test]
    fn resume_with_another_query_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = SessionConfig::new(Q);
        cfg.dir = Some(dir.path().to_path_buf());
        let mut s = Session::open(&cfg, schema()).unwrap();
        run(&mut s, &events(10));
        s.checkpoint().unwrap();
        drop(s);
        cfg.query = Q.replace("30", "40");
        let e = Session::open(&cfg, schema()).err().expect("refused");
        assert!(e.to_string().contains("another query"), "{e}");
    }

    #[test]
    fn checkpoint_without_a_directory_is_an_error() {
        let mut s = Session::open(&SessionConfig::new(Q), schema()).unwrap();
        assert!(matches!(s.checkpoint(), Err(Error::Config(_))));
    }
}
