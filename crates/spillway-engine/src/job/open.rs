//! Opening a file job: the checkpoint directory and its store layout, the input's
//! schema, the query's plan, and then one of three starts, each ending in a [`Driver`]
//! and the [`FileIo`] it runs with: fresh, a resume of the last checkpoint, or a backfill
//! of it under a new query (see the [job docs](super)).

use std::path::{Path, PathBuf};

use spillway_store::{StateStore, StoreKind, StoreOptions};

use super::output::{default_side_output, write_path, Cut, Delivery, FileIo};
use super::DEFAULT_CHECKPOINT_EVERY;
use super::{store_config, BackfillSummary, JobConfig, NotCoveredMetric, OpenAt, OpenSource};
use crate::checkpoint::layout::{clear_dirs, StoreLayout, STATE_DIR};
use crate::checkpoint::{self, Front, Identity, Record, StoreIdentity};
use crate::driver::{Cadence, Driver, StateConfig};
use crate::error::{Error, Result};
use crate::operator::over::backfill::{
    check_rebuildable, copy_kept_state, BackfillReport, GroupMap, NotCovered,
};
use crate::operator::over::{Runtime, RuntimeSnapshot};
use crate::operator::{OperatorSnapshot, QueryPlan};
use crate::plan::Plan;
use crate::reservoir::Reservoir;
use crate::source::{schema_columns, Sink, Source};
use crate::sql::{parse, Query};
use crate::value::Schema;

/// A job ready to run.
pub(super) struct Opened {
    pub(super) driver: Driver,
    pub(super) io: FileIo,
    /// Warnings to show before the first event.
    pub(super) warnings: Vec<String>,
    /// What a backfill did (`None`: no backfill).
    pub(super) backfill: Option<BackfillSummary>,
    /// Events between checkpoints (0: none).
    pub(super) checkpoint_every: u64,
    /// The temporary directory of a run without `--checkpoint-dir`.
    pub(super) _tmp: Option<tempfile::TempDir>,
}

/// Checks the flags, opens the checkpoint directory, learns the schema, plans the
/// query and opens the job fresh, resumed or backfilled.
pub(super) fn open(cfg: &JobConfig, open_source: &mut OpenSource<'_>) -> Result<Opened> {
    check_flags(cfg)?;
    let (base, tmp) = match &cfg.checkpoint_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("spillway-job-")
                .tempdir()
                .map_err(|e| Error::Config(format!("cannot create a temporary directory: {e}")))?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let layout = match &cfg.checkpoint_dir {
        Some(_) => StoreLayout::read(&base)?,
        None => None,
    };
    if cfg.checkpoint_dir.is_some()
        && !cfg.resume
        && (layout.is_some() || base.join(STATE_DIR).exists())
    {
        return Err(Error::Config(format!(
            "{} already holds a job's checkpoints; pass --resume to continue it, or choose an empty directory",
            base.display()
        )));
    }
    let layout = layout.unwrap_or_else(|| StoreLayout::initial(None));
    if cfg.resume {
        layout.remove_leftovers(&base)?;
    }

    // Parse the query against the source's schema (opening the source infers it). A
    // resume only learns the schema here: opening the source for the run would create
    // the dead-letter file afresh, losing the prefix the checkpoint covers.
    let fresh_source = if cfg.resume { None } else { Some(open_source(OpenAt::Start)?) };
    let schema = match &fresh_source {
        Some(s) => s.schema().clone(),
        None => open_source(OpenAt::Schema)?.schema().clone(),
    };
    let plan = QueryPlan::build(&cfg.query, &schema, None)?;
    check_plan(cfg, &plan)?;
    let job = Job {
        cfg,
        state: cfg.state(),
        identity: identity(cfg, &schema),
        side_path: cfg
            .side_output
            .clone()
            .unwrap_or_else(|| default_side_output(cfg.output.as_deref())),
        res_dir: base.join("reservoir"),
        base,
        layout,
        schema,
    };

    // A store opens only with the namespaces it was created with: those of the query
    // store.json names, when it is another one (its checkpoint, if any, then needs
    // --backfill; without one the run starts over with this query).
    let open_specs = match &job.layout.query {
        Some(q) if cfg.resume && *q != cfg.query => checkpointed_plan(q, &job.schema, &job.base)?.1,
        _ => plan.namespace_specs(),
    };
    let state_dir = job.base.join(&job.layout.dir);
    let mut store = job.state.open_store(&state_dir, open_specs)?;
    let record = if cfg.resume { checkpoint::read(store.as_mut(), &job.base)? } else { None };
    let mut opened = match record {
        Some(r) if r.query != cfg.query => job.backfill(r, plan, store, open_source)?,
        Some(r) => job.resume(r, plan, store, open_source)?,
        None => {
            let mut warnings = Vec::new();
            if cfg.resume {
                // No checkpoint (the directory is new or empty, or the run before was
                // killed before its first checkpoint): start over from scratch, and say so.
                warnings.push(format!(
                    "no checkpoint in {}: starting from the beginning",
                    job.base.display()
                ));
                drop(store);
                clear_dirs(&[&state_dir, &job.base.join(STATE_DIR), &job.res_dir])?;
                store = job.state.open_store(&job.base.join(STATE_DIR), plan.namespace_specs())?;
                if job.side_path.exists() {
                    let _ = std::fs::remove_file(&job.side_path);
                }
            }
            let mut o = job.fresh(plan, store, fresh_source, open_source)?;
            o.warnings = warnings;
            o
        }
    };
    opened._tmp = tmp;
    Ok(opened)
}

/// Flag combinations refused before anything is opened or written.
fn check_flags(cfg: &JobConfig) -> Result<()> {
    if cfg.resume && cfg.checkpoint_dir.is_none() {
        return Err(Error::Config("--resume needs --checkpoint-dir".into()));
    }
    if cfg.backfill && !cfg.resume {
        return Err(Error::Config(
            "--backfill continues a checkpoint under a new query: it needs --resume".into(),
        ));
    }
    match cfg.retain {
        Some(r) if r < 0 => {
            return Err(Error::Config(format!("--retain must be a duration >= 0, got {r}")))
        }
        Some(r) if r > 0 && cfg.checkpoint_dir.is_none() => {
            return Err(Error::Config(
                "--retain keeps reservoir events for a later --backfill of the job's \
                 checkpoints: it needs --checkpoint-dir"
                    .into(),
            ))
        }
        _ => {}
    }
    check_durable(cfg)
}

/// Flags the query's shape refuses.
fn check_plan(cfg: &JobConfig, plan: &QueryPlan) -> Result<()> {
    if !plan.is_windowed() && cfg.watermark_delay != 0 {
        return Err(Error::Config(
            "--watermark-delay applies to windowed aggregations (a window table function in \
             FROM); per-event metrics are emitted as each event arrives"
                .into(),
        ));
    }
    if plan.is_windowed() && cfg.backfill {
        return Err(Error::Config(
            "--backfill rebuilds per-event sliding-window metrics (AGG(..) OVER w) from the \
             event reservoir; a windowed aggregation (a window table function in FROM) keeps \
             no reservoir to rebuild from"
                .into(),
        ));
    }
    if plan.is_windowed() && cfg.retain.is_some_and(|r| r > 0) {
        return Err(Error::Config(
            "--retain keeps events in the reservoir of per-event sliding-window metrics; a \
             windowed aggregation (a window table function in FROM) has none"
                .into(),
        ));
    }
    Ok(())
}

/// What a resume must match besides the query.
fn identity(cfg: &JobConfig, schema: &Schema) -> Identity {
    Identity {
        input: cfg.input.clone(),
        schema: schema.clone(),
        allowed_lateness: cfg.allowed_lateness,
        watermark_delay: cfg.watermark_delay,
        store: StoreIdentity::of(cfg.store),
        items: None,
        ties: cfg.ties,
    }
}

/// What the three starts share.
struct Job<'a> {
    cfg: &'a JobConfig,
    state: StateConfig<'a>,
    identity: Identity,
    side_path: PathBuf,
    res_dir: PathBuf,
    base: PathBuf,
    layout: StoreLayout,
    schema: Schema,
}

impl Job<'_> {
    /// The checkpoint cadence: every `every` events with a checkpoint directory; without
    /// one (or with 0), none, and reservoir segments are released as windows pass them,
    /// except after a resume, whose recovered checkpoint still needs its events.
    fn cadence(&self, every: u64, resumed: bool) -> Cadence {
        match (every > 0 && self.cfg.checkpoint_dir.is_some(), resumed) {
            (true, _) => Cadence::Every(every),
            (false, false) => Cadence::Never,
            (false, true) => Cadence::NeverKeepAll,
        }
    }

    /// The interval given, else the checkpoint's (a resume keeps it), else the default.
    fn every(&self, record: Option<&Record>) -> u64 {
        self.cfg
            .checkpoint_every
            .or(record.and_then(|r| r.checkpoint_every))
            .unwrap_or(DEFAULT_CHECKPOINT_EVERY)
    }

    /// The file side of the run.
    fn io(
        &self,
        source: Box<dyn Source>,
        sink: Option<Sink>,
        side: Option<Sink>,
        delivery: Delivery,
        windowed: bool,
    ) -> FileIo {
        let cfg = self.cfg;
        FileIo {
            windowed,
            skipped_at_start: source.skipped(),
            source,
            sink,
            side,
            schema: self.schema.clone(),
            side_write_path: write_path(delivery, &self.side_path),
            side_abs: absolute(&self.side_path),
            side_path: self.side_path.clone(),
            output_path: cfg.output.clone().filter(|_| !cfg.discard_output),
            output_write_path: cfg
                .output
                .as_deref()
                .filter(|_| !cfg.discard_output)
                .map(|p| write_path(delivery, p)),
            output_abs: match (&cfg.output, cfg.discard_output) {
                (Some(p), false) => Some(absolute(p)),
                _ => None,
            },
            last_cut: match delivery {
                Delivery::InPlace(c) => c,
                Delivery::Staged => None,
            },
            delivery,
            halt: cfg.halt.clone(),
        }
    }

    fn opened(&self, driver: Driver, io: FileIo, every: u64) -> Opened {
        let checkpoint_every =
            if matches!(driver.cadence(), Cadence::Every(_)) { every } else { 0 };
        Opened { driver, io, warnings: Vec::new(), backfill: None, checkpoint_every, _tmp: None }
    }

    /// A run from the input's start.
    fn fresh(
        &self,
        plan: QueryPlan,
        store: Box<dyn StateStore>,
        source: Option<Box<dyn Source>>,
        open_source: &mut OpenSource<'_>,
    ) -> Result<Opened> {
        let cfg = self.cfg;
        if cfg.checkpoint_dir.is_some() {
            StoreLayout::initial(Some(cfg.query.clone())).write(&self.base)?;
        }
        let source = match source {
            Some(s) => s,
            None => open_source(OpenAt::Start)?,
        };
        let columns = plan.column_names();
        let windowed = plan.is_windowed();
        let every = self.every(None);
        let cadence = self.cadence(every, false);
        let driver = Driver::open(
            &self.state,
            plan,
            store,
            self.identity.clone(),
            &cfg.query,
            &self.res_dir,
            None,
            cfg.retain,
            cadence,
            &self.base,
        )?;
        let delivery = if matches!(cadence, Cadence::Every(_)) {
            Delivery::InPlace(None)
        } else {
            Delivery::Staged
        };
        // Created last: nothing above can fail and leave it behind.
        let sink = if cfg.discard_output {
            None
        } else {
            let path = cfg.output.as_deref().map(|p| write_path(delivery, p));
            Some(Sink::create(path.as_deref(), &columns)?)
        };
        Ok(self.opened(driver, self.io(source, sink, None, delivery, windowed), every))
    }

    /// The position a record of a file job holds (a session's is refused).
    fn file_position(&self, record: &Record) -> Result<checkpoint::FilePosition> {
        match &record.front {
            Front::File(p) => Ok(p.clone()),
            Front::Pushed { .. } => Err(Error::Config(format!(
                "{} holds the checkpoints of a session (Python's Stream or a Kafka worker's \
                 task), not of a `spillway run` job; choose another directory",
                self.base.display()
            ))),
        }
    }

    /// A resume of the last checkpoint under the same query.
    fn resume(
        &self,
        record: Record,
        plan: QueryPlan,
        store: Box<dyn StateStore>,
        open_source: &mut OpenSource<'_>,
    ) -> Result<Opened> {
        let cfg = self.cfg;
        record.check_identity(&self.identity, &self.base, "a job")?;
        let pos = self.file_position(&record)?;
        let mut warnings = Vec::new();
        if cfg.backfill {
            warnings.push(format!(
                "{} already runs this query: --backfill continues it as --resume does",
                self.base.display()
            ));
        }
        let columns = plan.column_names();
        let windowed = plan.is_windowed();
        let every = self.every(Some(&record));
        let cadence = self.cadence(every, true);
        let events = record.events;
        let driver = Driver::open(
            &self.state,
            plan,
            store,
            self.identity.clone(),
            &cfg.query,
            &self.res_dir,
            Some(record),
            cfg.retain,
            cadence,
            &self.base,
        )?;
        let source = open_source(OpenAt::Checkpoint(&self.schema, &pos.source))?;
        let cut = Cut { events, output_len: pos.output_len, side_len: pos.side_len };
        let sink = match (&cfg.output, cfg.discard_output) {
            (_, true) => None,
            (Some(p), false) => Some(Sink::resume(p, &columns, pos.output_len)?),
            (None, false) => {
                return Err(Error::Config(
                    "--resume needs --output FILE (stdout cannot be cut back)".into(),
                ))
            }
        };
        let side = if self.side_path.exists() {
            let columns = if windowed {
                Sink::window_side_output_columns(&self.schema)
            } else {
                schema_columns(&self.schema)
            };
            Some(Sink::resume(&self.side_path, &columns, pos.side_len)?)
        } else {
            None
        };
        let mut o = self.opened(
            driver,
            self.io(source, sink, side, Delivery::InPlace(Some(cut)), windowed),
            every,
        );
        o.warnings = warnings;
        Ok(o)
    }

    /// A resume of the last checkpoint under a new query (see the job docs).
    fn backfill(
        &self,
        record: Record,
        plan: QueryPlan,
        store: Box<dyn StateStore>,
        open_source: &mut OpenSource<'_>,
    ) -> Result<Opened> {
        let cfg = self.cfg;
        record.check_identity(&self.identity, &self.base, "a job")?;
        if !cfg.backfill {
            return Err(other_query(&self.base));
        }
        let pos = self.file_position(&record)?;
        let specs = plan.namespace_specs();
        let windowed = || {
            Error::Checkpoint(format!(
                "{} holds a windowed aggregation's checkpoint; --backfill rebuilds \
                 per-event sliding-window metrics only",
                self.base.display()
            ))
        };
        // With peers, the rows held for their peers too (the checkpoint's ties equal the
        // run's: the identity check above).
        let (runtime, reservoir, held) = match record.operator.clone() {
            OperatorSnapshot::Over { runtime, reservoir } => (runtime, reservoir, None),
            OperatorSnapshot::OverPeers { runtime, reservoir, peers } => {
                (runtime, reservoir, Some(peers))
            }
            _ => return Err(windowed()),
        };
        let QueryPlan::Over(plan) = plan else { return Err(windowed()) };
        if let Some(held) = &held {
            crate::operator::over::peers::check_backfill(&plan, runtime.buffer.iter(), held)?;
        }
        let columns = plan.column_names();
        // The output restarts with the new columns: never over the old job's files.
        let out = match (&cfg.output, cfg.discard_output) {
            (Some(p), false) => Some(p),
            (_, true) => None,
            (None, false) => {
                return Err(Error::Config(
                    "--backfill needs --output FILE: the new query's rows go to a new \
                     file (its columns differ from the checkpointed query's output)"
                        .into(),
                ))
            }
        };
        let old_files: Vec<&str> =
            pos.output.iter().map(String::as_str).chain([&*pos.side_output]).collect();
        for (flag, p) in out
            .map(|p| ("--output", p.as_path()))
            .into_iter()
            .chain([("the side output", self.side_path.as_path())])
        {
            if old_files.contains(&absolute(p).as_str()) {
                return Err(Error::Config(format!(
                    "--backfill starts {flag} {} afresh with the new query's columns, \
                     but the checkpointed job wrote that file; name a new one",
                    p.display()
                )));
            }
        }
        let reservoir = Reservoir::recover(
            self.state.reservoir_options(&self.res_dir),
            &self.schema,
            &reservoir,
        )?;
        let frontier = runtime.frontier.unwrap_or(0);
        let next = self.layout.next(&cfg.query);
        let new_dir = self.base.join(&next.dir);
        let (rt, report, keys) = open_backfill(
            cfg,
            &self.base,
            &record.query,
            store,
            plan,
            &self.schema,
            reservoir,
            runtime,
            self.state.store_options(&new_dir, specs),
        )?;
        let summary = backfill_summary_of(&report, keys, frontier, self.schema.time_unit());
        let every = self.every(Some(&record));
        let cadence = self.cadence(every, true);
        let op: Box<dyn crate::operator::Operator> = match &held {
            Some(held) => Box::new(crate::operator::over::peers::Peers::backfilled(rt, held)?),
            None => Box::new(rt),
        };
        let mut driver = Driver::with_operator(
            op,
            &cfg.query,
            self.identity.clone(),
            record.events,
            cfg.retain.unwrap_or(record.retain),
            (record.retain, record.retain_index),
            cadence,
        )?;
        let source = open_source(OpenAt::Checkpoint(&self.schema, &pos.source))?;
        let sink = match out {
            Some(p) => Some(Sink::create(Some(p), &columns)?),
            None => None,
        };
        if self.side_path.exists() {
            std::fs::remove_file(&self.side_path).map_err(|e| {
                Error::Config(format!(
                    "cannot remove {} to start the side output afresh: {e}",
                    self.side_path.display()
                ))
            })?;
        }
        let mut io = self.io(source, sink, None, Delivery::InPlace(None), false);
        // One checkpoint of the new store, then the switch to it.
        let front = crate::driver::Io::sync(&mut io, driver.events())?;
        driver.checkpoint(front)?;
        next.write(&self.base)?;
        // The old directory is a leftover now: a failure to remove it here is retried by
        // the next resume.
        let _ = std::fs::remove_dir_all(self.base.join(&self.layout.dir));
        driver.release()?;
        let mut o = self.opened(driver, io, every);
        o.warnings = summary.warnings.clone();
        o.backfill = Some(summary);
        Ok(o)
    }
}

/// Refuses, before anything is opened or written, a job that would checkpoint (or
/// resume) a store that keeps nothing durable: the tiered store without an L3 level.
/// Otherwise it would run until its first checkpoint and fail there.
fn check_durable(cfg: &JobConfig) -> Result<()> {
    let durable =
        !(cfg.store == StoreKind::Tiered && cfg.tiered.l3 == spillway_store::tiered::L3Kind::None);
    let Some(dir) = cfg.checkpoint_dir.as_deref() else { return Ok(()) };
    if durable || (cfg.checkpoint_every == Some(0) && !cfg.resume) {
        return Ok(());
    }
    let asks = if cfg.resume {
        format!("--resume continues a checkpoint in {}", dir.display())
    } else {
        format!(
            "--checkpoint-dir {} makes a checkpoint every {} events",
            dir.display(),
            cfg.checkpoint_every.unwrap_or(DEFAULT_CHECKPOINT_EVERY)
        )
    };
    Err(Error::Config(format!(
        "the tiered store without a durable level (--l3 none) cannot checkpoint, but {asks}: \
         add --l3 hashlog, or run without checkpoints (--checkpoint-events 0, or no \
         --checkpoint-dir)"
    )))
}

/// The error of a resume whose query differs from the checkpoint's without --backfill.
fn other_query(base: &Path) -> Error {
    Error::Checkpoint(format!(
        "{} was written by a job with a different query; resume with the same --query, or \
         add --backfill to continue it under the new one (new metrics are rebuilt from the \
         events the reservoir still holds)",
        base.display()
    ))
}

/// `path` made absolute (for comparing output paths across runs).
fn absolute(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).to_string_lossy().into_owned()
}

/// The plan and store namespaces of the query a checkpoint directory recorded (`None`
/// for a windowed aggregation's plan).
fn checkpointed_plan(
    query: &str,
    schema: &Schema,
    base: &Path,
) -> Result<(Option<Plan>, Vec<spillway_store::NamespaceSpec>)> {
    let bad = |e: String| {
        Error::Checkpoint(format!(
            "the query of the checkpoint in {} no longer plans against this input: {e}",
            base.display()
        ))
    };
    match parse(query, schema).map_err(|e| bad(e.to_string()))? {
        Query::Over(q) => {
            let plan = Plan::build(&q, schema).map_err(|e| bad(e.to_string()))?;
            let specs = Runtime::namespace_specs(&plan);
            Ok((Some(plan), specs))
        }
        Query::Windowed(q) => {
            Ok((None, crate::operator::windowed::WindowPlan::build(&q).namespace_specs()))
        }
    }
}

/// The backfill's work on the state (see the module docs): plans the checkpointed
/// query, matches its group-by nodes with `plan`'s, copies the kept state from
/// `old_store` into a new store (`new_opts`, its directory cleared first), and opens
/// the runtime of `plan` with the rebuilt nodes replayed. Returns the runtime, what the
/// backfill did and the number of state keys copied.
#[allow(clippy::too_many_arguments)]
fn open_backfill(
    cfg: &JobConfig,
    base: &Path,
    old_query: &str,
    mut old_store: Box<dyn StateStore>,
    plan: Plan,
    schema: &Schema,
    reservoir: Reservoir,
    snapshot: RuntimeSnapshot,
    new_opts: StoreOptions,
) -> Result<(Runtime, BackfillReport, u64)> {
    let (old_plan, _) = checkpointed_plan(old_query, schema, base)?;
    let old_plan = old_plan.ok_or_else(|| {
        Error::Checkpoint(format!(
            "{} holds a windowed aggregation's checkpoint; --backfill rebuilds per-event \
             sliding-window metrics only",
            base.display()
        ))
    })?;
    let unit = schema.time_unit();
    let map = GroupMap::new(&old_plan, &plan)?;
    check_rebuildable(&plan, &map, &reservoir, unit)?;
    clear_dirs(&[new_opts.dir.as_path()])?;
    let mut new_store = store_config(cfg.store, &cfg.tiered).open(new_opts)?;
    let keys = copy_kept_state(old_store.as_mut(), &old_plan, new_store.as_mut(), &plan, &map)?;
    drop(old_store);
    let (rt, report) = Runtime::backfill(
        plan,
        new_store,
        reservoir,
        cfg.allowed_lateness,
        &old_plan,
        snapshot,
        &map,
        unit,
    )?;
    Ok((rt, report, keys))
}

/// The job summary of a backfill, with one warning per metric not covered.
fn backfill_summary_of(
    r: &BackfillReport,
    keys_copied: u64,
    frontier: i64,
    unit: crate::value::TimeUnit,
) -> BackfillSummary {
    let not_covered: Vec<NotCoveredMetric> = r
        .not_covered
        .iter()
        .map(|n: &NotCovered| NotCoveredMetric {
            metrics: n.metrics.clone(),
            window: n.frame.display(unit).to_string(),
            oldest_event_time: n.oldest,
            exact_from: n.exact_from,
        })
        .collect();
    let warnings = not_covered
        .iter()
        .map(|n| {
            let names: Vec<String> = n.metrics.iter().map(|m| format!("`{m}`")).collect();
            format!(
                "backfilled metric {} (window {}) is not covered by the reservoir: it holds no \
                 event older than time {} (older ones were released), and the window reaches \
                 further back from the checkpoint's frontier {frontier}; its results are exact \
                 for events at time {} and later (the frontier + {} {}), approximate before",
                names.join(", "),
                n.window,
                n.oldest_event_time,
                n.exact_from,
                n.exact_from.saturating_sub(frontier),
                unit.name()
            )
        })
        .collect();
    BackfillSummary {
        groups_kept: r.groups_kept as u64,
        groups_moved: r.groups_moved as u64,
        groups_rebuilt: r.groups_rebuilt as u64,
        groups_dropped: r.groups_dropped as u64,
        keys_copied,
        events_replayed: r.events_replayed,
        not_covered,
        warnings,
    }
}
