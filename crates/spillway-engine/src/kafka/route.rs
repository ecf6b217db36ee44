//! Routing a query over topics keyed by its group-by columns (Railgun's front-end), and
//! joining the partial results per event (Railgun's reply topic).
//!
//! # Stages
//! A metric is exact in a task processor when all events of each of its groups reach
//! that task in time order, i.e. when its topic is keyed by one of the metric's
//! `PARTITION BY` columns (the subset rule: metrics by `card` and by `(card, merchant)`
//! share the topic keyed by `card`) and each partition holds its events in time order.
//! [`Routing::plan`] gives every metric a *stage*, a topic where that holds:
//! - an input topic of several partitions keyed by `K`: every metric must be partitioned
//!   by `K` (among others) and is computed in place. Events of one merchant spread over
//!   partitions keyed by card; forwarding them from several partitions would interleave
//!   the partitions and lose their time order, so such a query is refused with the way
//!   out (key the topic, or give it one partition);
//! - an input topic of one partition (a total order, Railgun's front-end): its one task
//!   is the router. Each metric goes to `OUT.by-COL` (stage topics are named after the job's output topic, as
//!   its reply topic is), keyed by `COL`, with `--route-partitions`
//!   partitions; the columns are chosen greedily, each time the column covering the most
//!   metrics still without a stage (ties: the first in the schema), a small set cover.
//!   Metrics without `PARTITION BY` go to `OUT.all`, one partition. The router forwards in
//!   its input's order, and a transactional producer keeps that order per partition, so
//!   every stage partition sees its events in time order. The router is one task (one
//!   core): past its rate, split the stream by a key all metrics share.
//!
//! Input columns in the SELECT list go with the first stage. The router decodes each
//! event once (a malformed one goes to the dead-letter topic), drops the events the
//! query's `WHERE` rejects (they are neither output nor windowed, as in one process), and
//! writes each other event, bytes unchanged, with its event id and timestamp, to every
//! stage topic, keyed by that stage's column.
//!
//! # Reply topic and join
//! With one stage its tasks write result rows to the output topic directly. With several,
//! each stage task writes a *partial* per event to `OUT.reply` (keyed by event id, so all
//! partials of one event meet in one partition): the stage's columns, or the event itself
//! when it was later than the allowed lateness in that stage. The task of a reply
//! partition holds the partials of each event until all stages have answered, then writes
//! the joined row to `OUT` (its columns in SELECT order) or, if any stage found the event
//! too late, the event to `OUT.late`. Every stage answers every routed event, so no event
//! waits forever. The join state is checkpointed with the same offset protocol as a
//! session (see [`super::worker`]).
//!
//! Event time is per task: an event late in one stage (its frontier ran ahead) can be in
//! time in another; it is then counted in the other stage's windows but, as in one
//! process, gets no result row.
//!
//! # FORMAT
//! A partial (payload of an `OUT.reply` message, key = event id): byte 0 = `0x02` (layout
//! version), byte 1 = the stage's index, byte 2 = kind (`0`: result, `1`: too late), then
//! for a result the stage's values in postcard, for a late event its JSON row.
//!
//! The join state of reply partition `p` is the file `DIR/OUT.reply-p/join`: magic
//! `SPWJOIN1`, then the postcard body length (u32 LE), its CRC-32C (u32 LE) and the body:
//! `(offset: i64, pending: Vec<(event id, Vec<Option<Partial>>)>)`, where `offset` is the
//! reply offset the state covers. It is replaced atomically (temporary file, fsync,
//! rename, directory fsync).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::sql::{QuerySpec, SelectItem};
use crate::value::{Schema, Value};

/// Layout version of a partial.
pub const PARTIAL_VERSION: u8 = 2;
const JOIN_MAGIC: &[u8; 8] = b"SPWJOIN1";

/// One topic whose tasks compute some of the query's SELECT items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// The topic (the input topic, `OUT.by-COL` or `OUT.all`).
    pub topic: String,
    /// Field index of the key column (`None`: unkeyed, one partition or the input's own
    /// partitioning).
    pub key: Option<usize>,
    /// Partitions of the topic.
    pub partitions: i32,
    /// SELECT items computed here, positions in the query, in output order.
    pub items: Vec<usize>,
}

/// How a query's items are spread over stage topics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routing {
    /// The stages; a stage on the input topic, if any, comes first.
    pub stages: Vec<Stage>,
    /// Whether `stages[0]` is the input topic.
    pub on_input: bool,
    /// For each output column, the stage and the position in its partial.
    pub columns: Vec<(usize, usize)>,
}

impl Routing {
    /// Spreads `query`'s items over stages (module docs) for an input topic `input` with
    /// `parts` partitions keyed by the field `key` and the output topic `output`; a one-partition input is routed to
    /// stage topics of `route_parts` partitions (1: everything in place).
    pub fn plan(
        query: &QuerySpec,
        schema: &Schema,
        input: &str,
        output: &str,
        key: Option<usize>,
        parts: i32,
        route_parts: i32,
    ) -> Result<Routing> {
        let n = query.items.len();
        let by = |i: usize| -> Option<&[usize]> {
            match &query.items[i] {
                SelectItem::Metric { metric, .. } => {
                    Some(&query.windows[metric.window].partition_by)
                }
                SelectItem::Column { .. } => None,
            }
        };
        let in_place = Routing {
            stages: vec![Stage {
                topic: input.to_string(),
                key,
                partitions: parts,
                items: (0..n).collect(),
            }],
            on_input: true,
            columns: (0..n).map(|i| (0, i)).collect(),
        };
        let field = |i: usize| schema.fields()[i].name.as_str();
        if parts > 1 {
            // Each metric must be exact per input partition: the subset rule against the
            // input's key. Routing from several partitions would interleave them and lose
            // each key's time order, so it is refused rather than approximated.
            for i in 0..n {
                let Some(b) = by(i) else { continue };
                if key.is_some_and(|k| b.contains(&k)) {
                    continue;
                }
                let cols: Vec<&str> = b.iter().map(|&c| field(c)).collect();
                let keyed = key.map_or("not keyed by a column".to_string(), |k| {
                    format!("keyed by {}", field(k))
                });
                let need = if cols.is_empty() {
                    "a metric without PARTITION BY needs every event in one partition".to_string()
                } else {
                    format!("a metric partitioned by ({}) needs each group's events in one partition, in time order", cols.join(", "))
                };
                return Err(Error::Config(format!(
                    "{need}, but {input} has {parts} partitions and is {keyed}. Either produce the topic with --key {} \
                     (if every metric is partitioned by that column), or produce it with --partitions 1: the workers then \
                     route each event, in the topic's order, to one topic per group-by key and join the results",
                    cols.first().copied().unwrap_or("COL")
                )));
            }
            return Ok(in_place);
        }
        if route_parts <= 1 || (0..n).all(|i| by(i).is_none()) {
            return Ok(in_place);
        }
        // One partition: route by a greedy cover of the metrics' keys.
        let mut stage_of: Vec<Option<usize>> = vec![None; n];
        let mut stages: Vec<Stage> = Vec::new();
        loop {
            let open: Vec<usize> = (0..n)
                .filter(|&i| stage_of[i].is_none() && by(i).is_some_and(|b| !b.is_empty()))
                .collect();
            if open.is_empty() {
                break;
            }
            let mut best = (0usize, usize::MAX);
            for col in 0..schema.fields().len() {
                let covers =
                    open.iter().filter(|&&i| by(i).is_some_and(|b| b.contains(&col))).count();
                if covers > best.0 {
                    best = (covers, col);
                }
            }
            let col = best.1;
            let topic = format!("{output}.by-{}", field(col));
            super::check_topic_name(&topic).map_err(|why| {
                Error::Config(format!(
                    "cannot route by column `{}`: {why}; rename the column",
                    field(col)
                ))
            })?;
            let s = stages.len();
            stages.push(Stage {
                topic,
                key: Some(col),
                partitions: route_parts,
                items: Vec::new(),
            });
            for &i in &open {
                if by(i).is_some_and(|b| b.contains(&col)) {
                    stage_of[i] = Some(s);
                }
            }
        }
        // Global metrics: every event in one partition.
        if (0..n).any(|i| stage_of[i].is_none() && by(i).is_some()) {
            let s = stages.len();
            stages.push(Stage {
                topic: format!("{output}.all"),
                key: None,
                partitions: 1,
                items: Vec::new(),
            });
            for (i, st) in stage_of.iter_mut().enumerate() {
                if st.is_none() && by(i).is_some() {
                    *st = Some(s);
                }
            }
        }
        // Input columns go with the first stage.
        let mut columns = Vec::with_capacity(n);
        for (i, st) in stage_of.iter().enumerate() {
            let s = st.unwrap_or(0);
            columns.push((s, stages[s].items.len()));
            stages[s].items.push(i);
        }
        Ok(Routing { stages, on_input: false, columns })
    }

    /// The routing of a windowed aggregation (a window table function in `FROM`) with
    /// `items` output columns grouped by the fields `group_by`: always in place, in the
    /// input's tasks. With several partitions each group must live in one (the subset
    /// rule: the input's key is one of the group-by columns), else it is refused as an
    /// OVER metric is; a window's rows are exact per partition, and a partition's event
    /// time (its watermark) is its own.
    pub fn windowed(
        group_by: &[usize],
        schema: &Schema,
        input: &str,
        key: Option<usize>,
        parts: i32,
        items: usize,
    ) -> Result<Routing> {
        if parts > 1 && !key.is_some_and(|k| group_by.contains(&k)) {
            let field = |i: usize| schema.fields()[i].name.as_str();
            let cols: Vec<&str> = group_by.iter().map(|&c| field(c)).collect();
            let keyed = key
                .map_or("not keyed by a column".to_string(), |k| format!("keyed by {}", field(k)));
            return Err(Error::Config(format!(
                "a windowed aggregation grouped by ({}) needs each group's events in one \
                 partition, in time order, but {input} has {parts} partitions and is {keyed}. \
                 Produce the topic with --key {} (one of the GROUP BY columns), or with \
                 --partitions 1",
                cols.join(", "),
                cols.first().copied().unwrap_or("COL")
            )));
        }
        Ok(Routing {
            stages: vec![Stage {
                topic: input.to_string(),
                key,
                partitions: parts,
                items: (0..items).collect(),
            }],
            on_input: true,
            columns: (0..items).map(|i| (0, i)).collect(),
        })
    }

    /// The stages the input's tasks forward events to.
    pub fn forwarded(&self) -> &[Stage] {
        &self.stages[usize::from(self.on_input)..]
    }

    /// Whether partial results meet in a reply topic (more than one stage).
    pub fn joins(&self) -> bool {
        self.stages.len() > 1
    }
}

/// The reply topic of output topic `out`.
pub fn reply_topic(out: &str) -> String {
    format!("{out}.reply")
}

/// A stage's answer for one event.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Partial {
    /// The stage's output columns.
    Result(Vec<Value>),
    /// The event (JSON row) was later than the allowed lateness in this stage.
    Late(Vec<u8>),
}

/// Encodes stage `stage`'s result columns as a partial into `out`.
pub fn encode_partial_result(stage: usize, values: &[Value], out: &mut Vec<u8>) {
    let mut buf = std::mem::take(out);
    buf.clear();
    buf.extend_from_slice(&[PARTIAL_VERSION, stage as u8, 0]);
    *out = postcard::to_extend(values, buf).expect("postcard encodes values");
}

/// Encodes "too late in stage `stage`" with the event's JSON row into `out`.
pub fn encode_partial_late(stage: usize, row: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[PARTIAL_VERSION, stage as u8, 1]);
    out.extend_from_slice(row);
}

/// Decodes a partial: the stage index and the answer.
pub fn decode_partial(b: &[u8]) -> std::result::Result<(usize, Partial), String> {
    match b {
        [PARTIAL_VERSION, stage, 0, body @ ..] => postcard::from_bytes(body)
            .map(|v| (usize::from(*stage), Partial::Result(v)))
            .map_err(|e| format!("not a partial result: {e}")),
        [PARTIAL_VERSION, stage, 1, body @ ..] => {
            Ok((usize::from(*stage), Partial::Late(body.to_vec())))
        }
        [PARTIAL_VERSION, _, k, ..] => Err(format!("partial kind {k} is unknown")),
        [v, ..] => Err(format!(
            "partial layout version {v} is not supported (this build reads {PARTIAL_VERSION})"
        )),
        [] => Err("empty message".into()),
    }
}

/// An event's partials so far, one slot per stage (the join state's entries).
type Pending = (String, Vec<Option<Partial>>);

/// What a completed event joins into.
#[derive(Clone, Debug, PartialEq)]
pub enum Joined {
    /// The output row.
    Row(Vec<Value>),
    /// Some stage found the event too late: its JSON row.
    Late(Vec<u8>),
}

/// The join state of one reply partition: partials per event id until every stage has
/// answered.
///
/// Every partial is produced in exactly one committed transaction (see [`super::worker`]),
/// so a second partial of a stage for one event is a bug or a foreign writer. While the
/// event waits, the second partial is an error. Once the event completed, it cannot be
/// told from the first partial of a new event without remembering every completed id, so
/// the join remembers the last [`RECENT_DONE`] completed ids (in memory, rebuilt by the
/// replay after a restore) and refuses a partial for one of them; an older duplicate opens
/// an entry that never completes, which the worker reports when it stops
/// ([`Join::pending`], `pending_joins` in its summary).
#[derive(Debug, Default)]
pub struct Join {
    pending: HashMap<String, Vec<Option<Partial>>>,
    done: RecentIds,
}

/// How many completed event ids a reply task remembers to detect duplicate partials.
pub const RECENT_DONE: usize = 1 << 16;

/// The last [`RECENT_DONE`] ids, oldest first out.
#[derive(Debug, Default)]
struct RecentIds {
    set: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl RecentIds {
    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn insert(&mut self, id: String) {
        if self.order.len() == RECENT_DONE {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.set.insert(id.clone());
        self.order.push_back(id);
    }
}

impl Join {
    /// Adds `stage`'s partial for event `id`; returns the joined result when it was the
    /// last one missing. A second partial from the same stage for a waiting or a recently
    /// completed event is an error (see [`Join`]).
    pub fn add(
        &mut self,
        routing: &Routing,
        id: &str,
        stage: usize,
        partial: Partial,
    ) -> std::result::Result<Option<Joined>, String> {
        let n = routing.stages.len();
        if stage >= n {
            return Err(format!("partial from stage {stage}, but the query has {n} stages"));
        }
        let parts = match self.pending.get_mut(id) {
            Some(p) => p,
            None if self.done.contains(id) => {
                return Err(format!(
                    "a partial from stage {stage} for event {id}, which already completed"
                ))
            }
            None => self.pending.entry(id.to_string()).or_insert_with(|| vec![None; n]),
        };
        // Only a loaded join state can hold another count (another query's, or damage).
        if parts.len() != n {
            return Err(format!(
                "the join state's entry for event {id} has {} partial slots, but the query has \
                 {n} stages (was the state written for another query?)",
                parts.len()
            ));
        }
        if parts[stage].is_some() {
            return Err(format!("a second partial from stage {stage} for event {id}"));
        }
        parts[stage] = Some(partial);
        if parts.iter().any(Option::is_none) {
            return Ok(None);
        }
        let (key, parts) = self.pending.remove_entry(id).expect("present");
        self.done.insert(key);
        let mut vals: Vec<Vec<Value>> = Vec::with_capacity(n);
        for p in parts {
            match p.expect("complete") {
                Partial::Late(row) => return Ok(Some(Joined::Late(row))),
                Partial::Result(v) => vals.push(v),
            }
        }
        let mut row = Vec::with_capacity(routing.columns.len());
        for &(s, pos) in &routing.columns {
            let v = vals[s].get(pos).cloned().ok_or_else(|| {
                format!(
                    "stage {s}'s partial for event {id} has {} columns, not {}",
                    vals[s].len(),
                    pos + 1
                )
            })?;
            row.push(v);
        }
        Ok(Some(Joined::Row(row)))
    }

    /// Events still waiting for a stage.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Writes the state, tagged with the reply offset it covers, to `dir/join`
    /// atomically (FORMAT in the module docs).
    pub fn save(&self, dir: &Path, offset: i64) -> Result<()> {
        let mut entries: Vec<(&String, &Vec<Option<Partial>>)> = self.pending.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let body = postcard::to_stdvec(&(offset, entries))
            .map_err(|e| Error::Checkpoint(format!("cannot encode the join state: {e}")))?;
        let path = join_path(dir);
        let tmp = dir.join("join.tmp");
        let io = |what: &str, p: &Path| {
            let what = what.to_string();
            let p = p.to_path_buf();
            move |e: std::io::Error| Error::Checkpoint(format!("{what} {}: {e}", p.display()))
        };
        let mut f = std::fs::File::create(&tmp).map_err(io("cannot create", &tmp))?;
        let len = u32::try_from(body.len()).map_err(|_| {
            Error::Checkpoint(format!("join state of {} is over 4 GiB", dir.display()))
        })?;
        f.write_all(JOIN_MAGIC)
            .and_then(|()| f.write_all(&len.to_le_bytes()))
            .and_then(|()| f.write_all(&crc32c::crc32c(&body).to_le_bytes()))
            .and_then(|()| f.write_all(&body))
            .and_then(|()| f.sync_all())
            .map_err(io("cannot write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io("cannot rename to", &path))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io("cannot sync", dir))?;
        Ok(())
    }

    /// Reads `dir/join`: the state and the offset it covers, `None` when there is none.
    pub fn load(dir: &Path) -> Result<Option<(Join, i64)>> {
        let path = join_path(dir);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::Checkpoint(format!("cannot read {}: {e}", path.display())))
            }
        };
        let bad = |why: String| Error::Checkpoint(format!("{}: {why}", path.display()));
        if bytes.len() < 16 || &bytes[..8] != JOIN_MAGIC {
            return Err(bad("not a Spillway join state (bad magic or too short)".into()));
        }
        let len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let body = &bytes[16..];
        if body.len() != len {
            return Err(bad(format!("body is {} bytes, the header says {len}", body.len())));
        }
        if crc32c::crc32c(body) != crc {
            return Err(bad("checksum mismatch".into()));
        }
        let (offset, entries): (i64, Vec<Pending>) =
            postcard::from_bytes(body).map_err(|e| bad(format!("cannot decode: {e}")))?;
        Ok(Some((
            Join { pending: entries.into_iter().collect(), done: RecentIds::default() },
            offset,
        )))
    }
}

fn join_path(dir: &Path) -> PathBuf {
    dir.join("join")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::parse_query;
    use crate::value::{DataType, Field, TimeUnit};
    use proptest::prelude::*;

    fn schema() -> Schema {
        let f = |name: &str, ty| Field { name: name.to_string(), ty };
        Schema::new(
            vec![
                f("id", DataType::Int),
                f("ts", DataType::Int),
                f("card", DataType::Str),
                f("merchant", DataType::Str),
                f("amount", DataType::Float),
            ],
            "ts",
            TimeUnit::Ms,
        )
        .unwrap()
    }

    const Q: &str = "SELECT id, \
        SUM(amount) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 60000 PRECEDING AND CURRENT ROW) AS c_sum, \
        COUNT(*) OVER (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 60000 PRECEDING AND CURRENT ROW) AS m_n, \
        COUNT(*) OVER (PARTITION BY card, merchant ORDER BY ts RANGE BETWEEN 60000 PRECEDING AND CURRENT ROW) AS cm_n, \
        COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 60000 PRECEDING AND CURRENT ROW) AS all_n \
        FROM t";

    #[test]
    fn the_subset_rule_shares_topics_and_columns_map_back() {
        let s = schema();
        let q = parse_query(Q, &s).unwrap();
        let r = Routing::plan(&q, &s, "pay", "out", None, 1, 4).unwrap();
        let topics: Vec<&str> = r.stages.iter().map(|s| s.topic.as_str()).collect();
        // (card, merchant) shares the first chosen stage: card covers two metrics.
        assert_eq!(topics, ["out.by-card", "out.by-merchant", "out.all"]);
        assert!(!r.on_input && r.joins());
        assert_eq!(r.stages[0].items, vec![0, 1, 3]);
        assert_eq!(r.stages[1].items, vec![2]);
        assert_eq!(r.stages[2].items, vec![4]);
        assert_eq!(r.stages[0].partitions, 4);
        assert_eq!(r.stages[2].partitions, 1);
        assert_eq!(r.columns, vec![(0, 0), (0, 1), (1, 0), (0, 2), (2, 0)]);
        assert_eq!(r.forwarded().len(), 3);

        // No routing asked for: everything in place.
        let r = Routing::plan(&q, &s, "pay", "out", None, 1, 1).unwrap();
        assert_eq!(r.stages.len(), 1);
        assert!(r.on_input && !r.joins() && r.forwarded().is_empty());

        // Several partitions: only metrics partitioned by the key are exact in place.
        let e = Routing::plan(&q, &s, "pay", "out", Some(2), 4, 4).unwrap_err().to_string();
        assert!(e.contains("(merchant)") && e.contains("--partitions 1"), "{e}");
        let only_card = "SELECT card, COUNT(*) OVER (PARTITION BY card ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS n, \
            COUNT(*) OVER (PARTITION BY merchant, card ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS m FROM t";
        let r =
            Routing::plan(&parse_query(only_card, &s).unwrap(), &s, "pay", "out", Some(2), 4, 4)
                .unwrap();
        assert!(r.on_input && !r.joins());
        let e = Routing::plan(&parse_query(only_card, &s).unwrap(), &s, "pay", "out", None, 4, 4)
            .unwrap_err();
        assert!(e.to_string().contains("not keyed by a column"), "{e}");
    }

    #[test]
    fn retained_items_plan_alone() {
        let s = schema();
        let mut q = parse_query(Q, &s).unwrap();
        q.retain_items(&[2]).unwrap();
        assert_eq!(q.windows.len(), 1);
        assert_eq!(q.windows[0].partition_by, vec![3]);
        assert!(q.retain_items(&[5]).unwrap_err().contains("does not exist"));
    }

    #[test]
    fn partials_join_in_select_order_and_late_wins() {
        let s = schema();
        let q = parse_query(Q, &s).unwrap();
        let r = Routing::plan(&q, &s, "pay", "out", None, 1, 4).unwrap();
        let mut j = Join::default();
        let res = |v: Vec<i64>| Partial::Result(v.into_iter().map(Value::Int).collect());
        assert_eq!(j.add(&r, "7", 2, res(vec![40])).unwrap(), None);
        assert_eq!(j.add(&r, "7", 0, res(vec![7, 10, 30])).unwrap(), None);
        assert!(j.add(&r, "7", 0, res(vec![7, 10, 30])).unwrap_err().contains("second"));
        let row = j.add(&r, "7", 1, res(vec![20])).unwrap().unwrap();
        let want: Vec<Value> = [7, 10, 20, 30, 40].into_iter().map(Value::Int).collect();
        assert_eq!(row, Joined::Row(want));
        assert_eq!(j.pending(), 0);
        j.add(&r, "8", 0, res(vec![8, 1, 1])).unwrap();
        j.add(&r, "8", 1, Partial::Late(b"{}".to_vec())).unwrap();
        assert_eq!(j.add(&r, "8", 2, res(vec![1])).unwrap(), Some(Joined::Late(b"{}".to_vec())));
        assert!(j.add(&r, "9", 3, res(vec![])).is_err());
    }

    #[test]
    fn a_partial_for_a_completed_event_is_refused_while_remembered() {
        let s = schema();
        let q = parse_query(Q, &s).unwrap();
        let r = Routing::plan(&q, &s, "pay", "out", None, 1, 4).unwrap();
        let res = |v: Vec<i64>| Partial::Result(v.into_iter().map(Value::Int).collect());
        let complete = |j: &mut Join, id: &str| {
            j.add(&r, id, 0, res(vec![7, 10, 30])).unwrap();
            j.add(&r, id, 1, res(vec![20])).unwrap();
            assert!(j.add(&r, id, 2, res(vec![40])).unwrap().is_some());
        };
        let mut j = Join::default();
        complete(&mut j, "e0");
        let e = j.add(&r, "e0", 1, res(vec![20])).unwrap_err();
        assert!(e.contains("event e0, which already completed"), "{e}");
        assert_eq!(j.pending(), 0, "the refused partial opened no entry");
        // Past the remembered span, a duplicate opens an entry that stays pending (and
        // is reported by the worker).
        for i in 1..=RECENT_DONE {
            complete(&mut j, &format!("e{i}"));
        }
        assert_eq!(j.add(&r, "e0", 1, res(vec![20])).unwrap(), None);
        assert_eq!(j.pending(), 1);
        assert!(j.add(&r, &format!("e{RECENT_DONE}"), 0, res(vec![1, 1, 1])).is_err());
    }

    #[test]
    fn partials_and_join_state_round_trip_and_damage_is_named() {
        let mut buf = Vec::new();
        let values = vec![Value::Int(3), Value::Null];
        encode_partial_result(5, &values, &mut buf);
        assert_eq!(decode_partial(&buf).unwrap(), (5, Partial::Result(values)));
        encode_partial_late(5, b"{\"a\":1}", &mut buf);
        assert_eq!(decode_partial(&buf).unwrap(), (5, Partial::Late(b"{\"a\":1}".to_vec())));
        assert!(decode_partial(&[9, 0, 0]).unwrap_err().contains("version 9"));
        assert!(decode_partial(&[]).is_err());

        let dir = tempfile::tempdir().unwrap();
        assert!(Join::load(dir.path()).unwrap().is_none());
        let s = schema();
        let q = parse_query(Q, &s).unwrap();
        let r = Routing::plan(&q, &s, "pay", "out", None, 1, 4).unwrap();
        let mut j = Join::default();
        j.add(&r, "1", 1, Partial::Result(vec![Value::Int(2)])).unwrap();
        j.save(dir.path(), 42).unwrap();
        let (mut back, off) = Join::load(dir.path()).unwrap().unwrap();
        assert_eq!((off, back.pending()), (42, 1));
        back.add(&r, "1", 0, Partial::Result(vec![Value::Int(1); 3])).unwrap();
        let got = back.add(&r, "1", 2, Partial::Result(vec![Value::Int(3)])).unwrap();
        assert!(matches!(got, Some(Joined::Row(_))));

        let path = dir.path().join("join");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(Join::load(dir.path()).unwrap_err().to_string().contains("checksum"));
        std::fs::write(&path, b"nope").unwrap();
        assert!(Join::load(dir.path()).unwrap_err().to_string().contains("magic"));
    }

    /// Writes `body` as a join state with a valid header and checksum (what another
    /// program or an older build could leave), as [`Join::save`] frames it.
    fn write_join(dir: &Path, body: &[u8]) {
        let mut bytes = JOIN_MAGIC.to_vec();
        bytes.extend_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
        bytes.extend_from_slice(body);
        std::fs::write(join_path(dir), bytes).unwrap();
    }

    /// Loads the join state in `dir`, if it decodes, and completes each of its events
    /// with a partial from every stage of `r`: each step is a result or an error.
    fn load_and_complete(dir: &Path, r: &Routing) {
        let Ok(Some((mut j, _))) = Join::load(dir) else { return };
        let ids: Vec<String> = j.pending.keys().cloned().collect();
        for id in ids {
            for stage in 0..r.stages.len() + 1 {
                let _ = j.add(r, &id, stage, Partial::Result(vec![Value::Int(1); 3]));
            }
        }
    }

    /// A join state (checksum intact) whose event has one partial slot, not one per
    /// stage: adding the last stage's partial indexed past the slots.
    #[test]
    fn a_join_state_with_too_few_slots_is_an_error() {
        let s = schema();
        let r = Routing::plan(&parse_query(Q, &s).unwrap(), &s, "pay", "out", None, 1, 4).unwrap();
        assert_eq!(r.stages.len(), 3);
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<Pending> = vec![("1".into(), vec![None])];
        write_join(dir.path(), &postcard::to_stdvec(&(7i64, entries)).unwrap());
        let (mut j, _) = Join::load(dir.path()).unwrap().unwrap();
        let e = j.add(&r, "1", 2, Partial::Result(vec![Value::Int(3)])).unwrap_err();
        assert!(
            e.contains("event 1") && e.contains("1 partial slots") && e.contains("3 stages"),
            "{e}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Partials that are any bytes, or valid ones with a byte changed, cut or a length
        /// set huge, decode to a partial or an error, never a panic.
        #[test]
        fn hostile_partials_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            ints in prop::collection::vec(any::<i64>(), 0..6),
            text in ".{0,8}",
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = decode_partial(&garbage);
            let mut partial = Vec::new();
            let mut values: Vec<Value> = ints.into_iter().map(Value::Int).collect();
            values.push(Value::Str(text.into()));
            encode_partial_result(1, &values, &mut partial);
            prop_assert_eq!(decode_partial(&partial), Ok((1, Partial::Result(values))));
            let _ = decode_partial(&partial[..cut % (partial.len() + 1)]);
            let bad = crate::hostile::flipped(&partial, at, byte);
            let _ = decode_partial(&bad);
            // A vector length (the varint after the 3-byte head) set to u64::MAX.
            let mut huge = partial[..3].to_vec();
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            huge.extend_from_slice(&partial[4..]);
            prop_assert!(decode_partial(&huge).is_err());
        }

        /// Join states with a valid checksum whose body is any bytes, or a valid body with
        /// a byte changed or cut, load to a state or an error, and completing their events
        /// is a result or an error, never a panic.
        #[test]
        fn hostile_join_states_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            slots in prop::collection::vec(0usize..5, 1..4),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let s = schema();
            let r = Routing::plan(&parse_query(Q, &s).unwrap(), &s, "pay", "out", None, 1, 4)
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            write_join(dir.path(), &garbage);
            load_and_complete(dir.path(), &r);
            // Events with 0 to 4 slots (the query has 3 stages), some filled.
            let entries: Vec<Pending> = slots
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    let p = (0..n)
                        .map(|k| (k % 2 == 0).then(|| Partial::Result(vec![Value::Int(k as i64)])))
                        .collect();
                    (i.to_string(), p)
                })
                .collect();
            let body = postcard::to_stdvec(&(5i64, entries)).unwrap();
            write_join(dir.path(), &body);
            load_and_complete(dir.path(), &r);
            write_join(dir.path(), &body[..cut % (body.len() + 1)]);
            load_and_complete(dir.path(), &r);
            let bad = crate::hostile::flipped(&body, at, byte);
            write_join(dir.path(), &bad);
            load_and_complete(dir.path(), &r);
        }
    }
}
