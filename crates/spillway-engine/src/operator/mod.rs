//! The operator contract: what every driver (the file job, [`crate::session::Session`]
//! for Python and the Kafka workers' tasks) runs a query as, whatever its shape.
//!
//! - [`QueryPlan`] parses and plans a query of either shape: per-event metrics over
//!   sliding windows (`AGG(..) OVER w`, [`Runtime`]) or a windowed aggregation (a window
//!   table function in `FROM`: `TUMBLE`, `HOP`, `CUMULATE`, `SESSION`, [`WindowAgg`]).
//!   It knows the output columns and their types and the store namespaces the operator
//!   needs, and renders `explain`.
//! - [`Operator`] is the trait both implement: `process` takes one event and *returns*
//!   the rows it emits (appended to the caller's vector: an OVER query emits at most one
//!   row per event, a windowed one any number as windows fire), `finish` fires what is
//!   still open at the end of input, `snapshot` syncs what must be durable besides the
//!   store and describes the operator's position ([`OperatorSnapshot`]), and the store is
//!   reachable for the driver's checkpoint.
//! - [`open`] builds the operator of a plan over an opened store, fresh or from a
//!   snapshot; a snapshot of the other shape is refused.
//!
//! Flink keeps the same split: `OneInputStreamOperator::processElement` for both its
//! `WindowOperator` and its over-aggregation operators, one driver (`StreamTask`) for all.

pub mod over;
pub mod windowed;

use std::path::Path;

use spillway_store::{NamespaceSpec, StateStore};

use crate::error::{Error, Result};
use crate::operator::over::backfill::Retention;
use crate::operator::over::peers::{Peers, Ties};
use crate::operator::over::{Counters, Outcome, Runtime, RuntimeSnapshot};
use crate::operator::windowed::{Missed, WindowAgg, WindowOutput, WindowPlan, WindowSnapshot};
use crate::plan::{OutputSource, Plan};
use crate::reservoir::{Position, Reservoir, ReservoirOptions};
use crate::sql::{parse, Query};
use crate::value::{DataType, Event, Row, Schema, Value};

/// The plan of a query of either shape.
#[derive(Clone, Debug)]
pub enum QueryPlan {
    /// Per-event metrics over sliding windows.
    Over(Plan),
    /// A windowed aggregation (a window table function in `FROM`).
    Windowed(WindowPlan),
}

impl QueryPlan {
    /// Parses `query` against `schema` and plans it. `items` keeps only those SELECT
    /// items (positions in the query): a Kafka routing stage computes the metrics of its
    /// key this way; a windowed aggregation is computed whole, so `items` is refused for
    /// it.
    pub fn build(query: &str, schema: &Schema, items: Option<&[usize]>) -> Result<QueryPlan> {
        Ok(match parse(query, schema)? {
            Query::Over(mut q) => {
                if let Some(keep) = items {
                    q.retain_items(keep).map_err(Error::Config)?;
                }
                QueryPlan::Over(Plan::build(&q, schema)?)
            }
            Query::Windowed(q) => {
                if items.is_some() {
                    return Err(Error::Config(
                        "a windowed aggregation (a window table function in FROM) is computed \
                         whole; it cannot be split by its SELECT items"
                            .into(),
                    ));
                }
                QueryPlan::Windowed(WindowPlan::build(&q))
            }
        })
    }

    /// Whether this is a windowed aggregation.
    pub fn is_windowed(&self) -> bool {
        matches!(self, QueryPlan::Windowed(_))
    }

    /// Names of the output columns.
    pub fn column_names(&self) -> Vec<String> {
        match self {
            QueryPlan::Over(p) => p.column_names(),
            QueryPlan::Windowed(p) => p.column_names(),
        }
    }

    /// The output columns and their types: an input field's type, the window bounds'
    /// (event time, an integer), or the aggregate's result type. A `SUM` over ints typed
    /// [`DataType::Int`] may still give a float when it leaves the i64 range.
    pub fn output_types(&self, schema: &Schema) -> Result<Vec<(String, DataType)>> {
        let agg_type = |kind: crate::aggregate::AggKind, arg: Option<DataType>| {
            kind.result_type(arg).map_err(|m| Error::Plan(crate::plan::PlanError(m)))
        };
        match self {
            QueryPlan::Over(plan) => plan
                .outputs
                .iter()
                .map(|(name, src)| {
                    let ty = match *src {
                        OutputSource::Field(i) => schema.fields()[i].ty,
                        OutputSource::Metric { group, agg } => {
                            let (kind, _, arg) = &plan.groups[group].aggs[agg];
                            agg_type(*kind, *arg)?
                        }
                    };
                    Ok((name.clone(), ty))
                })
                .collect(),
            QueryPlan::Windowed(plan) => plan
                .outputs
                .iter()
                .map(|(name, src)| {
                    let ty = match *src {
                        WindowOutput::Key(i) => schema.fields()[plan.group_by[i]].ty,
                        WindowOutput::Start | WindowOutput::End | WindowOutput::Time => {
                            DataType::Int
                        }
                        WindowOutput::Agg { node, agg } => {
                            let (kind, _, arg) = &plan.nodes[node].aggs[agg];
                            agg_type(*kind, *arg)?
                        }
                    };
                    Ok((name.clone(), ty))
                })
                .collect(),
        }
    }

    /// The store namespaces the operator uses, with their access hints.
    pub fn namespace_specs(&self) -> Vec<NamespaceSpec> {
        match self {
            QueryPlan::Over(p) => Runtime::namespace_specs(p),
            QueryPlan::Windowed(p) => p.namespace_specs(),
        }
    }

    /// The DAG as `spillway explain` prints it.
    pub fn explain(&self, schema: &Schema) -> String {
        match self {
            QueryPlan::Over(p) => p.explain(schema),
            QueryPlan::Windowed(p) => p.explain(schema),
        }
    }
}

/// What a checkpoint records of the query's operator.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum OperatorSnapshot {
    /// Per-event metrics: the runtime's position and the reservoir's.
    Over {
        /// The runtime's cursors and counters.
        runtime: RuntimeSnapshot,
        /// The reservoir's synced position.
        reservoir: Position,
    },
    /// Per-event metrics with SQL's peer rows ([`over::peers`]): as `Over`, and the rows
    /// held until their time is complete.
    OverPeers {
        /// The runtime's cursors and counters.
        runtime: RuntimeSnapshot,
        /// The reservoir's synced position.
        reservoir: Position,
        /// The held rows.
        peers: over::peers::PeersSnapshot,
    },
    /// A windowed aggregation.
    Windowed(WindowSnapshot),
}

impl OperatorSnapshot {
    /// Events the operator had taken when the snapshot was made.
    pub fn events(&self) -> u64 {
        match self {
            OperatorSnapshot::Over { runtime, .. }
            | OperatorSnapshot::OverPeers { runtime, .. } => runtime.counters.events,
            OperatorSnapshot::Windowed(w) => w.counters().events,
        }
    }
}

/// A query's operator. See the [module docs](self).
pub trait Operator: Send {
    /// Announces the next events, so the store can load what they will touch.
    fn prefetch(&mut self, events: &[Event]);

    /// Processes one event; the rows it emits are appended to `rows`.
    fn process(&mut self, event: Event, rows: &mut Vec<Row>) -> Result<Outcome>;

    /// Whether every event's row (if any) comes out of its own `process` call, so a
    /// driver may use [`process_row`](Self::process_row): per-event metrics. A windowed
    /// aggregation, or peer rows held until their time completes, emit later.
    fn one_row_per_event(&self) -> bool {
        false
    }

    /// Processes one event of an operator that emits at most one row per event
    /// (per-event metrics), writing the row into `out` on [`Outcome::Emitted`], so a
    /// caller that reuses `out` allocates nothing per event. The default goes through
    /// [`process`](Self::process); the runtime writes into `out` directly.
    fn process_row(&mut self, event: Event, out: &mut Vec<Value>) -> Result<Outcome> {
        let mut rows = Vec::new();
        let o = self.process(event, &mut rows)?;
        if let Some(r) = rows.pop() {
            *out = r;
        }
        Ok(o)
    }

    /// End of input: fires what is still open (a windowed aggregation's windows).
    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()>;

    /// Counters since the query began (across resumes).
    fn counters(&self) -> Counters;

    /// The state store, for the driver's checkpoint and metadata.
    fn store_mut(&mut self) -> &mut dyn StateStore;

    /// Syncs what must be durable besides the store (the reservoir) and describes the
    /// operator's position, for a checkpoint.
    fn snapshot(&mut self) -> Result<OperatorSnapshot>;

    /// After a checkpoint: releases the reservoir's segments behind every cursor (and
    /// behind `retention`'s); operators without a reservoir have nothing to release.
    fn release_reservoir(&mut self, retention: Option<&Retention>) -> Result<()> {
        let _ = retention;
        Ok(())
    }

    /// The per-event runtime, for what only an OVER query has (retention, backfill,
    /// reservoir figures).
    fn as_over(&mut self) -> Option<&mut Runtime> {
        None
    }

    /// The windowed aggregation, for its figures.
    fn as_windowed(&self) -> Option<&WindowAgg> {
        None
    }

    /// After [`process`](Self::process): the windows the event missed, with its row,
    /// for the side output (a windowed aggregation's; see [`WindowAgg::take_missed`]).
    /// Per-event metrics have no windows to miss: their late events are only
    /// [`Outcome::TooLate`].
    fn take_missed(&mut self) -> Option<Missed> {
        None
    }
}

impl Operator for Runtime {
    fn prefetch(&mut self, events: &[Event]) {
        Runtime::prefetch(self, events);
    }

    fn process(&mut self, event: Event, rows: &mut Vec<Row>) -> Result<Outcome> {
        let mut out = Vec::new();
        let o = Runtime::process(self, event, &mut out)?;
        if o == Outcome::Emitted {
            rows.push(out);
        }
        Ok(o)
    }

    fn process_row(&mut self, event: Event, out: &mut Vec<Value>) -> Result<Outcome> {
        Runtime::process(self, event, out)
    }

    fn one_row_per_event(&self) -> bool {
        true
    }

    fn finish(&mut self, _: &mut Vec<Row>) -> Result<()> {
        Ok(())
    }

    fn counters(&self) -> Counters {
        Runtime::counters(self)
    }

    fn store_mut(&mut self) -> &mut dyn StateStore {
        Runtime::store_mut(self)
    }

    fn snapshot(&mut self) -> Result<OperatorSnapshot> {
        let reservoir = self.reservoir_mut().sync()?;
        Ok(OperatorSnapshot::Over { runtime: Runtime::snapshot(self), reservoir })
    }

    fn release_reservoir(&mut self, retention: Option<&Retention>) -> Result<()> {
        self.release_reservoir_keeping(retention)
    }

    fn as_over(&mut self) -> Option<&mut Runtime> {
        Some(self)
    }
}

impl Operator for WindowAgg {
    fn prefetch(&mut self, events: &[Event]) {
        WindowAgg::prefetch(self, events);
    }

    fn process(&mut self, event: Event, rows: &mut Vec<Row>) -> Result<Outcome> {
        WindowAgg::process(self, event, rows)
    }

    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        WindowAgg::finish(self, rows)
    }

    fn counters(&self) -> Counters {
        WindowAgg::counters(self)
    }

    fn store_mut(&mut self) -> &mut dyn StateStore {
        WindowAgg::store_mut(self)
    }

    fn snapshot(&mut self) -> Result<OperatorSnapshot> {
        Ok(OperatorSnapshot::Windowed(WindowAgg::snapshot(self)))
    }

    fn as_windowed(&self) -> Option<&WindowAgg> {
        Some(self)
    }

    fn take_missed(&mut self) -> Option<Missed> {
        WindowAgg::take_missed(self)
    }
}

/// How [`open`] builds an operator besides its plan and store.
#[derive(Clone, Debug)]
pub struct OperatorOptions<'a> {
    /// Allowed lateness, in the time column's unit.
    pub allowed_lateness: i64,
    /// Watermark delay of a windowed aggregation (time units; 0 for OVER queries).
    pub watermark_delay: i64,
    /// The reservoir of an OVER query: its directory and options.
    pub reservoir: &'a ReservoirOptions,
    /// How an OVER query's `RANGE` frames treat rows of equal time.
    pub ties: Ties,
}

/// Refuses `ties` that `plan` cannot take: peer rows are for `OVER ... RANGE` windows,
/// not a windowed aggregation. [`open`] checks it; a front-end that creates things
/// before it opens an operator (a Kafka worker's topics) checks it first.
pub fn check_ties(plan: &QueryPlan, ties: Ties) -> Result<()> {
    if ties == Ties::Peers && plan.is_windowed() {
        return Err(Error::Config(
            "ties = peers applies to OVER ... RANGE windows (per-event metrics); a windowed \
             aggregation (a window table function in FROM) groups rows by window"
                .into(),
        ));
    }
    Ok(())
}

/// The operator of `plan` over `store`: fresh, or continuing from `snapshot` (whose
/// shape must be the plan's). An OVER query's reservoir is created in, or recovered
/// from, `opts.reservoir`; `schema` is the input's.
pub fn open(
    plan: QueryPlan,
    store: Box<dyn StateStore>,
    schema: &Schema,
    opts: &OperatorOptions<'_>,
    snapshot: Option<OperatorSnapshot>,
    dir: &Path,
) -> Result<Box<dyn Operator>> {
    check_ties(&plan, opts.ties)?;
    let peers = opts.ties == Ties::Peers;
    Ok(match (plan, snapshot) {
        (QueryPlan::Over(plan), None) => {
            let reservoir = Reservoir::create(opts.reservoir.clone(), schema)?;
            let rt = Runtime::new(plan, store, reservoir, opts.allowed_lateness, None)?;
            if peers {
                Box::new(Peers::new(rt, None)?)
            } else {
                Box::new(rt)
            }
        }
        (QueryPlan::Over(plan), Some(OperatorSnapshot::Over { runtime, reservoir })) if !peers => {
            let reservoir = Reservoir::recover(opts.reservoir.clone(), schema, &reservoir)?;
            Box::new(Runtime::new(plan, store, reservoir, opts.allowed_lateness, Some(runtime))?)
        }
        (
            QueryPlan::Over(plan),
            Some(OperatorSnapshot::OverPeers { runtime, reservoir, peers: held }),
        ) if peers => {
            let reservoir = Reservoir::recover(opts.reservoir.clone(), schema, &reservoir)?;
            let rt = Runtime::new(plan, store, reservoir, opts.allowed_lateness, Some(runtime))?;
            Box::new(Peers::new(rt, Some(held))?)
        }
        (
            QueryPlan::Over(_),
            Some(OperatorSnapshot::Over { .. } | OperatorSnapshot::OverPeers { .. }),
        ) => {
            return Err(Error::Checkpoint(format!(
                "{} was checkpointed with ties = {}; resume with the same --ties",
                dir.display(),
                if peers { Ties::PerEvent.name() } else { Ties::Peers.name() }
            )))
        }
        (QueryPlan::Windowed(plan), snap @ (None | Some(OperatorSnapshot::Windowed(_)))) => {
            let snap = match snap {
                Some(OperatorSnapshot::Windowed(s)) => Some(s),
                _ => None,
            };
            Box::new(WindowAgg::new(
                plan,
                store,
                opts.allowed_lateness,
                opts.watermark_delay,
                snap,
            )?)
        }
        (_, Some(_)) => {
            return Err(Error::Checkpoint(format!(
                "{} holds the checkpoint of another kind of query (per-event metrics against \
                 a windowed aggregation)",
                dir.display()
            )))
        }
    })
}
