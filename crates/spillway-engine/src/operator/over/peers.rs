//! SQL's peer rows for `OVER (... RANGE ...)` windows, on request (`--ties peers`,
//! `ties="peers"` in Python): a row's frame includes every row of its partition with the
//! same `ORDER BY` time, also those that arrive after it.
//!
//! The default is per-event: each event's result covers what arrived no later than it
//! (as Railgun scores a payment when it arrives, and as pandas' `rolling` does). In SQL,
//! and in Flink (`RowTimeRangeBoundedPrecedingFunction` and
//! `RowTimeRangeUnboundedPrecedingFunction` aggregate all rows of one timestamp together
//! once the watermark passes it, then emit each of them with that aggregate), `CURRENT
//! ROW` of a `RANGE` frame stands for all of the row's peers. [`Peers`] gives that
//! semantics over the same [`Runtime`]:
//!
//! - The rows of the newest time seen are held back until that time is complete: an
//!   event with a later time arrives, or the input ends ([`Operator::finish`]). Then they
//!   are emitted in arrival order, each metric of a `RANGE` window taking the value the
//!   *last* peer of the row's partition (for that window's `PARTITION BY`) got. That
//!   peer's per-event result covers every peer before it, so the value is the SQL one.
//! - `ROWS` frames count rows, not times: their metrics keep the row's own value.
//! - A late event (older than the newest time, within the allowed lateness) keeps its own
//!   result (its peers that arrived before it are in it; rows already emitted are not
//!   revised: a stream cannot take a row back) and waits in line behind the held rows,
//!   so rows always come out in arrival order, as per-event rows do.
//! - A checkpoint records the held rows ([`PeersSnapshot`]), so a resume emits them as an
//!   uninterrupted run would. A backfill under a new query gives them the new query's
//!   columns ([`Peers::backfilled`]): the events are still in the lateness buffer, and
//!   their `RANGE` values are the backfilled state's.

use std::collections::HashMap;

use spillway_store::StateStore;

use super::backfill::Retention;
use super::{Counters, Outcome, Runtime};
use crate::error::{Error, Result};
use crate::operator::{Operator, OperatorSnapshot};
use crate::plan::{OutputSource, Plan};
use crate::value::{Event, Row, Value};

/// How rows with equal `ORDER BY` times see each other in `RANGE` frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Ties {
    /// Each event's result covers what arrived no later than it (the default).
    #[default]
    PerEvent,
    /// SQL's peer rows: every row of the same time (see the module docs).
    Peers,
}

impl Ties {
    /// `per-event` or `peers`.
    pub fn name(self) -> &'static str {
        match self {
            Ties::PerEvent => "per-event",
            Ties::Peers => "peers",
        }
    }

    /// Parses `per-event` or `peers`.
    pub fn parse(s: &str) -> std::result::Result<Ties, String> {
        match s {
            "per-event" => Ok(Ties::PerEvent),
            "peers" => Ok(Ties::Peers),
            _ => Err(format!("expected per-event or peers, got {s:?}")),
        }
    }
}

/// The rows a [`Peers`] operator holds back at a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PeersSnapshot {
    /// The newest time seen (the held rows' time).
    pub at: Option<i64>,
    /// The held rows, in arrival order, each with its partition key per `RANGE` group
    /// that an output column reads (none for a late row, which keeps its own values).
    pub held: Vec<(Row, Vec<Vec<u8>>)>,
}

/// Whether a query (`plan`) backfilled from a checkpoint whose operator held `old`'s
/// rows, with `buffer` its lateness buffer, can give those rows its own columns (see
/// [`Peers::backfilled`]); checked before the backfill rebuilds anything.
pub fn check_backfill<'a>(
    plan: &Plan,
    buffer: impl Iterator<Item = &'a Event>,
    old: &PeersSnapshot,
) -> Result<()> {
    let Some(at) = old.at.filter(|_| !old.held.is_empty()) else { return Ok(()) };
    let peers = buffer.filter(|e| e.time == at).count();
    if peers != old.held.len() {
        return Err(Error::Config(format!(
            "the checkpoint holds {} rows for their peers but {peers} events of their time \
             ({at}): the others are late events' rows, which keep values the state no longer \
             shows; resume once without --backfill until a later time has arrived (the next \
             checkpoint then holds no late rows), then backfill",
            old.held.len()
        )));
    }
    if let Some(g) = plan.outputs.iter().find_map(|(_, src)| match *src {
        OutputSource::Metric { group, .. } if plan.groups[group].rows.is_some() => Some(group),
        _ => None,
    }) {
        return Err(Error::Config(format!(
            "the checkpoint holds {peers} rows for their peers (as every --ties peers \
             checkpoint does), and the new query's metrics of {} count rows (ROWS): a held \
             row's own value of them is not in the state, so this query cannot be backfilled \
             under --ties peers; run it from the start",
            super::state_name(plan, g)
        )));
    }
    Ok(())
}

/// The per-event [`Runtime`] with SQL's peer rows. See the module docs.
pub struct Peers {
    rt: Runtime,
    /// (output column, index into `groups`) of every metric of a `RANGE` group.
    columns: Vec<(usize, usize)>,
    /// The `RANGE` group-by nodes those columns read.
    groups: Vec<usize>,
    state: PeersSnapshot,
    /// Per entry of `groups`: partition key -> index in `held` of its last peer.
    last: Vec<HashMap<Vec<u8>, usize>>,
    out: Vec<Value>,
}

impl Peers {
    /// Peer rows over `rt`, holding `snapshot`'s rows if it continues a checkpoint. A
    /// snapshot whose rows do not have the query's output columns, or whose rows' keys
    /// are not one per `RANGE` group (none for a late row), is an error.
    pub fn new(rt: Runtime, snapshot: Option<PeersSnapshot>) -> Result<Peers> {
        let plan = rt.plan();
        let mut groups: Vec<usize> = Vec::new();
        let mut columns = Vec::new();
        for (i, (_, src)) in plan.outputs.iter().enumerate() {
            if let OutputSource::Metric { group, .. } = *src {
                if plan.groups[group].rows.is_some() {
                    continue;
                }
                let gi = groups.iter().position(|&g| g == group).unwrap_or_else(|| {
                    groups.push(group);
                    groups.len() - 1
                });
                columns.push((i, gi));
            }
        }
        let mut p = Peers {
            rt,
            last: vec![HashMap::new(); groups.len()],
            columns,
            groups,
            state: snapshot.unwrap_or_default(),
            out: Vec::new(),
        };
        let width = p.rt.plan().outputs.len();
        for i in 0..p.state.held.len() {
            let (row, keys) = &p.state.held[i];
            if row.len() != width || !(keys.is_empty() || keys.len() == p.groups.len()) {
                return Err(Error::Checkpoint(format!(
                    "the checkpoint's held row {i} has {} columns and {} partition keys, but \
                     the query has {width} output columns and {} RANGE groups (none for a \
                     late row's keys)",
                    row.len(),
                    keys.len(),
                    p.groups.len()
                )));
            }
            for (g, k) in keys.iter().enumerate() {
                p.last[g].insert(k.clone(), i);
            }
        }
        Ok(p)
    }

    /// Peer rows over `rt`, a query backfilled from a checkpoint whose operator held
    /// `old`'s rows (in the checkpointed query's columns). The events of those rows get
    /// the new query's: they are the lateness buffer's events at the held time, in
    /// arrival order (an event at the newest time is never late, and it stays in the
    /// buffer while that time is the newest), and each gets its `RANGE` metrics from
    /// the backfilled state, which holds all of them ([`Runtime::peer_row`]). A row held
    /// for a late event keeps its own per-event value, which that state no longer
    /// shows: such a checkpoint is refused, as is a new query with `ROWS` metrics.
    pub fn backfilled(rt: Runtime, old: &PeersSnapshot) -> Result<Peers> {
        let mut p = Peers::new(rt, None)?;
        let Some(at) = old.at else { return Ok(p) };
        p.state.at = Some(at);
        let events: Vec<Event> = p.rt.buffer.iter().filter(|e| e.time == at).cloned().collect();
        check_backfill(p.rt.plan(), events.iter(), old)?;
        for e in &events {
            let row = p.rt.peer_row(e)?;
            let keys = p.keys_of(&e.row);
            let i = p.state.held.len();
            for (g, k) in keys.iter().enumerate() {
                p.last[g].insert(k.clone(), i);
            }
            p.state.held.push((row, keys));
        }
        Ok(p)
    }

    /// The partition key of `row` for each `RANGE` node an output column reads.
    fn keys_of(&self, row: &Row) -> Vec<Vec<u8>> {
        let plan = self.rt.plan();
        self.groups
            .iter()
            .map(|&g| {
                let mut k = Vec::new();
                for &c in &plan.groups[g].partition_by {
                    row[c].encode_key(&mut k);
                }
                k
            })
            .collect()
    }

    /// Emits the held rows with their peers' final values.
    fn flush(&mut self, rows: &mut Vec<Row>) {
        let held = std::mem::take(&mut self.state.held);
        for (row, keys) in &held {
            let mut r = row.clone();
            if keys.is_empty() {
                rows.push(r);
                continue;
            }
            for &(c, g) in &self.columns {
                let last = self.last[g][&keys[g]];
                r[c] = held[last].0[c].clone();
            }
            rows.push(r);
        }
        for l in &mut self.last {
            l.clear();
        }
    }

    /// The runtime underneath.
    pub fn runtime(&mut self) -> &mut Runtime {
        &mut self.rt
    }
}

impl Operator for Peers {
    fn prefetch(&mut self, events: &[Event]) {
        self.rt.prefetch(events);
    }

    fn process(&mut self, event: Event, rows: &mut Vec<Row>) -> Result<Outcome> {
        if self.rt.plan().filter.as_ref().is_some_and(|f| !f.eval_bool(&event.row)) {
            // Dropped by WHERE: it moves no time forward (the runtime counts it).
            return self.rt.process(event, &mut self.out);
        }
        let t = event.time;
        let late = self.state.at.is_some_and(|a| t < a);
        if !late && self.state.at.is_some_and(|a| t > a) {
            self.flush(rows);
        }
        let keys: Vec<Vec<u8>> = if late { Vec::new() } else { self.keys_of(&event.row) };
        let outcome = self.rt.process(event, &mut self.out)?;
        if outcome != Outcome::Emitted {
            return Ok(outcome);
        }
        if !late {
            self.state.at = Some(t);
            let i = self.state.held.len();
            for (g, k) in keys.iter().enumerate() {
                self.last[g].insert(k.clone(), i);
            }
        }
        // A late row (no keys) keeps its own values when the line is flushed.
        self.state.held.push((self.out.clone(), keys));
        Ok(outcome)
    }

    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        self.flush(rows);
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.rt.counters()
    }

    fn store_mut(&mut self) -> &mut dyn StateStore {
        self.rt.store_mut()
    }

    fn snapshot(&mut self) -> Result<OperatorSnapshot> {
        let reservoir = self.rt.reservoir_mut().sync()?;
        Ok(OperatorSnapshot::OverPeers {
            runtime: self.rt.snapshot(),
            reservoir,
            peers: self.state.clone(),
        })
    }

    fn release_reservoir(&mut self, retention: Option<&Retention>) -> Result<()> {
        self.rt.release_reservoir_keeping(retention)
    }

    fn as_over(&mut self) -> Option<&mut Runtime> {
        Some(&mut self.rt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint;
    use crate::session::{Session, SessionConfig};
    use crate::value::{DataType, Field, Schema, TimeUnit};
    use proptest::prelude::*;
    use spillway_store::{StoreKind, StoreOptions};

    const Q: &str = "SELECT k, COUNT(*) OVER (PARTITION BY k ORDER BY ts \
                     RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS n FROM t";

    fn schema() -> Schema {
        let f = |name: &str| Field { name: name.into(), ty: DataType::Int };
        Schema::new(vec![f("ts"), f("k")], "ts", TimeUnit::Ms).unwrap()
    }

    fn config(dir: &std::path::Path) -> SessionConfig {
        let mut cfg = SessionConfig::new(Q);
        cfg.dir = Some(dir.to_path_buf());
        cfg.ties = Ties::Peers;
        cfg
    }

    /// Checkpoints a session in `d` holding two rows for their peers, applies `edit` to
    /// the recorded snapshot (as another program or a damaged record could leave it, its
    /// checksum intact) and resumes.
    fn resume_edited(
        d: &tempfile::TempDir,
        edit: impl FnOnce(&mut PeersSnapshot),
    ) -> Result<Session> {
        let cfg = config(d.path());
        let mut s = Session::open(&cfg, schema()).unwrap();
        let mut rows = Vec::new();
        for (t, k) in [(0, 1), (1, 1), (1, 2)] {
            s.push(t, vec![Value::Int(t), Value::Int(k)], &mut rows).unwrap();
        }
        s.checkpoint().unwrap();
        drop(s);
        let plan = crate::operator::QueryPlan::build(Q, &schema(), None).unwrap();
        let mut opts = StoreOptions::new(d.path().join("state"));
        for spec in plan.namespace_specs() {
            opts = opts.namespace(spec);
        }
        let mut st = StoreKind::HashLog.open(opts).unwrap();
        let mut record = checkpoint::read(st.as_mut(), d.path()).unwrap().unwrap();
        let OperatorSnapshot::OverPeers { peers, .. } = &mut record.operator else {
            panic!("not a peers snapshot: {:?}", record.operator)
        };
        assert_eq!(peers.held.len(), 2);
        edit(peers);
        checkpoint::write(st.as_mut(), &record).unwrap();
        StateStore::checkpoint(st.as_mut()).unwrap();
        drop(st);
        Session::open(&cfg, schema())
    }

    /// A held row with more partition keys than the query has `RANGE` groups: restoring
    /// indexed past the groups.
    #[test]
    fn a_held_row_with_too_many_keys_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let e = resume_edited(&d, |p| p.held[0].1.push(vec![9])).err().expect("resumed");
        let e = e.to_string();
        assert!(e.contains("held row 0") && e.contains("2 partition keys"), "{e}");
    }

    /// A held row with fewer columns than the query's output: flushing it (at the end of
    /// the input) indexed past the row.
    #[test]
    fn a_held_row_with_too_few_columns_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let e = resume_edited(&d, |p| p.held[1].0.clear())
            .and_then(|mut s| s.finish(&mut Vec::new()))
            .unwrap_err();
        let e = e.to_string();
        assert!(e.contains("held row 1") && e.contains("0 columns"), "{e}");
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            (-2i64..3).prop_map(Value::Int),
            any::<f64>().prop_map(Value::Float),
            ".{0,3}".prop_map(|s| Value::Str(s.into())),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A recorded peers snapshot of any shape (rows of any width, any number of keys,
        /// any held time) resumes to a session that takes events and finishes, or is an
        /// error; never a panic.
        #[test]
        fn hostile_peers_snapshots_are_an_error_not_a_panic(
            at in prop::option::of(-2i64..4),
            held in prop::collection::vec(
                (
                    prop::collection::vec(arb_value(), 0..4),
                    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..3), 0..3),
                ),
                0..4,
            ),
            events in prop::collection::vec((0i64..4, 0i64..3), 0..4),
        ) {
            let d = tempfile::tempdir().unwrap();
            let Ok(mut s) = resume_edited(&d, |p| *p = PeersSnapshot { at, held }) else {
                return Ok(());
            };
            let mut rows = Vec::new();
            for (t, k) in events {
                let _ = s.push(t, vec![Value::Int(t), Value::Int(k)], &mut rows);
            }
            let _ = s.finish(&mut rows);
        }
    }
}
