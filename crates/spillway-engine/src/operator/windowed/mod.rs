//! Windowed aggregation: the runtime of a [`WindowedQuery`] (Flink SQL's window
//! table-valued functions `TUMBLE`, `HOP`, `CUMULATE` and `SESSION`, grouped by the
//! window). It owns the window plan (filter nodes and their aggregates, `explain`), the
//! window state in the store, the timers, watermarks, firing, lateness and its output
//! convention.
//!
//! # Semantics (Flink's, cited)
//! - **Windows** are `[start, end)`, aligned to the epoch, assigned as Flink's
//!   `TumblingEventTimeWindows` / `SlidingEventTimeWindows` / `CumulativeWindowAssigner`
//!   / `EventTimeSessionWindows` do (see [`TvfWindow::assign`]). Sessions merge when they
//!   overlap or touch (`TimeWindow.intersects`: `start <= other.end && end >=
//!   other.start`, merged by `TimeWindow.mergeWindows`).
//! - **Watermark**: the largest event time seen (every event counts, also those `WHERE`
//!   drops) minus the watermark delay minus one time unit, advanced after each event as
//!   Flink's `WatermarkAssignerOperator.processElement` does with
//!   `pipeline.auto-watermark-interval` 0 (the event is processed under the watermark
//!   before it). Flink SQL has two usual watermark strategies, and this is the second:
//!   - `WATERMARK FOR ts AS ts` (strictly ascending timestamps, in Flink's docs): the
//!     largest time itself. A second event at the newest time is then late for a window
//!     ending right after it (`[0, 60000)` fires at 59999, so a second 59999 is dropped).
//!   - `WATERMARK FOR ts AS ts - INTERVAL '0.001' SECOND` (Flink's docs, for timestamps
//!     that can repeat), the DataStream API's default: `WatermarkStrategy
//!     .forBoundedOutOfOrderness(d)` emits `maxTimestamp - outOfOrdernessMillis - 1`
//!     (`BoundedOutOfOrdernessWatermarks.onPeriodicEmit`, "there is potential for
//!     matching timestamps to still be received"), and
//!     `WatermarkStrategy.forMonotonousTimestamps` is that with `d = 0`
//!     (`AscendingTimestampsWatermarks`): `maxTimestamp - 1`.
//!
//!   So the watermark is `max_time - delay - 1`, `--watermark-delay` (default 0) playing
//!   `outOfOrdernessMillis` in the time column's unit: an event at the newest time seen
//!   (a tie) is never late, in-order data never reaches the side output, and a delay of
//!   `d` takes events up to `d` behind the newest into every window they belong to.
//! - **Firing**: a window fires when the watermark reaches `end - 1`
//!   (`TimeWindowUtil.isWindowFired`: `windowEnd - 1 <= watermark`, i.e. Flink's
//!   `EventTimeTrigger` at `window.maxTimestamp()`), that is, with delay 0, at the first
//!   event at or after `end`. Every event at `end - 1`, ties included, is in time.
//! - **Lateness** follows the DataStream `WindowOperator` with `allowedLateness(L)`
//!   (Flink SQL's window TVF aggregation has no allowed lateness: its
//!   `AbstractWindowAggProcessor.processElement` drops a record whose windows have all
//!   fired, which is the `L = 0` case here). A window's state is kept until the watermark
//!   reaches `end - 1 + L` (`WindowOperator.cleanupTime`). An event is added to each of
//!   its windows not yet cleaned up (`isWindowLate`); if every window is, it goes to the
//!   side output and is counted (`isSkippedElement`). An event added to a window that has
//!   fired fires it again at once (`EventTimeTrigger.onElement` returns `FIRE` when
//!   `maxTimestamp <= watermark`).
//! - **Missed windows** (HOP, CUMULATE, and lateness): an event whose windows are
//!   partly cleaned up enters the others and misses those. Flink drops it from the
//!   cleaned windows silently (`WindowOperator` skips each `isWindowLate` window;
//!   SQL's `AbstractSliceWindowAggProcessor.processElement` adds a record whose slice
//!   has fired to that slice, which only the windows not yet fired still read, and drops
//!   it when its last window has fired). Here each missed window is counted
//!   ([`WindowStats::missed_windows`]) and reported with the event
//!   ([`WindowAgg::take_missed`]).
//! - **Counters**: [`Counters::late_in_bounds`] counts the events taken into a window
//!   although older than the newest event seen before them (out of order but in time;
//!   ties with the newest are in order); [`Counters::too_late`] the events no window took
//!   (the side output).
//! - **End of input**: every open window fires (Flink's final `MAX_WATERMARK`).
//!
//! # Side output
//! [`WindowAgg::take_missed`] hands over, after [`WindowAgg::process`], the event's row
//! and every window `[start, end)` it missed: all of them for an event returned as
//! [`Outcome::TooLate`], the cleaned ones for an event taken into others. A front-end's
//! side output of a windowed aggregation writes one row per missed window, the input's
//! columns followed by `window_start, window_end` (`Sink::create_window_side_output`,
//! `Sink::write_missed`), so a reader sees which window lacks which event, and an event
//! that only missed some of its windows is recorded too (Flink drops those silently).
//!
//! # Output convention
//! One row per firing: the SELECT list evaluated for one group key and one window. Rows
//! of one watermark advance come out in increasing window end, and for one window end in
//! the order the group keys first entered that window. A late event that updates a fired
//! window emits that window's row again, at once, with the whole window's new results:
//! the output is an upsert stream keyed by (group key, `window_start`, `window_end`),
//! where a later row replaces an earlier one (as Flink's DataStream `WindowOperator`
//! re-emits a window on a late firing, without a retraction). A session that a late
//! event merges with another is emitted as the merged session when it fires; the rows of
//! the sessions it absorbed stay in the output (they are other keys of the upsert stream).
//!
//! # State in the store
//! - Aligned windows (`TUMBLE`, `HOP`, `CUMULATE`) keep one aggregation state per filter
//!   node, group key and window: namespace `wN`, key `[end: 8 bytes, order-preserving]
//!   [group key]`, value an [`AggSet`] state updated by read-modify-write (the engine's
//!   aggregate layouts, see [`crate::aggregate`]). An event costs one read-modify-write per
//!   window and filter node it enters.
//! - Sessions keep per group key the list of its live sessions (namespace `sessions`:
//!   `[start i64 LE][end i64 LE][id u64 LE]` each) and each session's events (namespace
//!   `sevents`, key the session id, a list of events appended with the store's list
//!   merge). A merge appends the absorbed sessions' events to the surviving one; a firing
//!   aggregates the session's events. Session state is the raw events because sessions
//!   merge, and the aggregate states have no merge (Flink's `MergingWindowSet` merges
//!   namespaces of list state the same way).
//! - Timers: the group keys to fire at each window end, in list chunks of
//!   [`TIMER_CHUNK`] keys (namespace `timers`, key `[end: 8 bytes][chunk u32 BE]`); only
//!   the number of chunks per end is kept in memory (and in the checkpoint).
//!
//! Everything else (watermark, timer chunk counts, counters) is in the
//! [`WindowSnapshot`] a checkpoint writes next to the store's own checkpoint.

mod assign;

use spillway_store::StateStoreExt;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use spillway_store::{Ns, Rmw, StateStore};

use crate::aggregate::external::{tree_layout, HolisticTrees};
use crate::aggregate::{AggKind, AggSet, AggStateError};
use crate::error::{Error, Result};
use crate::operator::over::{prefetch_announced, Counters, Outcome, META_NAMESPACE};
use crate::plan::call_text;
use crate::sql::{Expr, TvfWindow, WindowedItem, WindowedQuery};
use crate::value::{DataType, Event, EventKey, Row, Schema, Value};

/// Group keys per timer list chunk.
pub const TIMER_CHUNK: u32 = 1024;

const TIMERS_NS: &str = "timers";
const SESSIONS_NS: &str = "sessions";
const SESSION_EVENTS_NS: &str = "sevents";

/// Aggregates of one `FILTER` (node 0: no filter, always present).
#[derive(Clone, Debug)]
pub struct FilterNode {
    /// The `FILTER (WHERE ..)` predicate (`None`: every event).
    pub predicate: Option<Expr>,
    /// The aggregates: function, argument, argument type.
    pub aggs: Vec<(AggKind, Option<Expr>, Option<DataType>)>,
    /// Their state layout.
    pub set: AggSet,
    /// Store namespace.
    pub namespace: String,
    /// Store namespace of the order-statistics trees of its `COUNT(DISTINCT)` and
    /// percentile aggregates (aligned windows only; see [`crate::aggregate::external`]).
    pub trees: Option<String>,
}

/// Where an output column's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowOutput {
    /// The `i`-th group-key column.
    Key(usize),
    /// `window_start`.
    Start,
    /// `window_end`.
    End,
    /// `window_time` (`window_end - 1`).
    Time,
    /// Aggregate `agg` of filter node `node`.
    Agg {
        /// Filter node.
        node: usize,
        /// Position in its aggregates.
        agg: usize,
    },
}

/// The plan of a windowed aggregation: `Window -> Filter -> GroupBy -> Aggregate`, with
/// aggregates of the same `FILTER` sharing one state value.
#[derive(Clone, Debug)]
pub struct WindowPlan {
    /// Query-level `WHERE`.
    pub filter: Option<Expr>,
    /// The windows.
    pub window: TvfWindow,
    /// Group-key field indices.
    pub group_by: Vec<usize>,
    /// Filter nodes (node 0 has no predicate).
    pub nodes: Vec<FilterNode>,
    /// Output columns.
    pub outputs: Vec<(String, WindowOutput)>,
}

impl WindowPlan {
    /// Builds the plan of `q`.
    pub fn build(q: &WindowedQuery) -> WindowPlan {
        let mut nodes = vec![FilterNode {
            predicate: None,
            aggs: Vec::new(),
            set: AggSet::new(&[]),
            namespace: "w0".into(),
            trees: None,
        }];
        let mut outputs = Vec::new();
        for item in &q.items {
            let src = match item {
                WindowedItem::Column { index, .. } => WindowOutput::Key(
                    q.group_by.iter().position(|g| g == index).expect("parser checked GROUP BY"),
                ),
                WindowedItem::WindowStart { .. } => WindowOutput::Start,
                WindowedItem::WindowEnd { .. } => WindowOutput::End,
                WindowedItem::WindowTime { .. } => WindowOutput::Time,
                WindowedItem::Aggregate { aggregate: a, .. } => {
                    let fkey = a.filter.as_ref().map(|e| e.to_string());
                    let node = match nodes
                        .iter()
                        .position(|n| n.predicate.as_ref().map(|e| e.to_string()) == fkey)
                    {
                        Some(n) => n,
                        None => {
                            nodes.push(FilterNode {
                                predicate: a.filter.clone(),
                                aggs: Vec::new(),
                                set: AggSet::new(&[]),
                                namespace: format!("w{}", nodes.len()),
                                trees: None,
                            });
                            nodes.len() - 1
                        }
                    };
                    let n = &mut nodes[node];
                    let key = (a.agg, a.arg.as_ref().map(|e| e.to_string()));
                    let agg = match n
                        .aggs
                        .iter()
                        .position(|(k, x, _)| (*k, x.as_ref().map(|e| e.to_string())) == key)
                    {
                        Some(i) => i,
                        None => {
                            n.aggs.push((a.agg, a.arg.clone(), a.arg_type));
                            n.aggs.len() - 1
                        }
                    };
                    WindowOutput::Agg { node, agg }
                }
            };
            outputs.push((item.name().to_string(), src));
        }
        for n in &mut nodes {
            let kinds: Vec<(AggKind, Option<DataType>)> =
                n.aggs.iter().map(|(k, _, t)| (*k, *t)).collect();
            // Nothing leaves a window's state before it fires, so MIN/MAX and
            // FIRST_VALUE/LAST_VALUE keep O(1) entries (`without_evictions`); in aligned
            // windows COUNT(DISTINCT) and the percentiles live in order-statistics trees
            // (O(log n) per event). A session's aggregates are computed from its events
            // when it fires, in memory, so they stay inline.
            let set = AggSet::new(&kinds).without_evictions();
            (n.set, n.trees) = if matches!(q.window, TvfWindow::Session { .. }) {
                (set, None)
            } else {
                tree_layout(set, &n.namespace)
            };
        }
        WindowPlan {
            filter: q.filter.clone(),
            window: q.window,
            group_by: q.group_by.clone(),
            nodes,
            outputs,
        }
    }

    /// Names of the output columns.
    pub fn column_names(&self) -> Vec<String> {
        self.outputs.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Store namespaces this plan's runtime uses, with access hints.
    pub fn namespace_specs(&self) -> Vec<spillway_store::NamespaceSpec> {
        use spillway_store::{AccessHint, NamespaceSpec};
        let mut v: Vec<NamespaceSpec> = self
            .nodes
            .iter()
            .map(|n| NamespaceSpec::list(n.namespace.clone()).hint(AccessHint::Point))
            .collect();
        v.extend(
            self.nodes
                .iter()
                .filter_map(|n| n.trees.clone())
                .map(|t| NamespaceSpec::list(t).hint(AccessHint::Point)),
        );
        v.push(NamespaceSpec::list(TIMERS_NS).hint(AccessHint::ListAppend));
        if matches!(self.window, TvfWindow::Session { .. }) {
            v.push(NamespaceSpec::list(SESSIONS_NS).hint(AccessHint::Point));
            v.push(NamespaceSpec::list(SESSION_EVENTS_NS).hint(AccessHint::ListAppend));
        }
        v.push(NamespaceSpec::list(META_NAMESPACE).hint(AccessHint::Point));
        v
    }

    /// Renders the DAG as `spillway explain` prints it.
    pub fn explain(&self, schema: &Schema) -> String {
        let unit = schema.time_unit();
        let field = |i: usize| schema.fields()[i].name.clone();
        let dur = |d: i64| crate::duration::display(d, unit);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Source (time column `{}`, unit {})",
            field(schema.time_index()),
            unit.name()
        );
        let mut depth = 1;
        let pad = |d: usize| "  ".repeat(d);
        if let Some(f) = &self.filter {
            let _ = writeln!(s, "  Where {f}");
            depth = 2;
        }
        let off = |o: i64| match o {
            0 => String::new(),
            o if o < 0 => format!(" offset -{}", dur(-o)),
            o => format!(" offset {}", dur(o)),
        };
        let w = match self.window {
            TvfWindow::Tumble { size, offset } => {
                format!("TUMBLE size {}{}", dur(size), off(offset))
            }
            TvfWindow::Hop { slide, size, offset } => {
                format!(
                    "HOP size {} slide {}{} ({} windows per event)",
                    dur(size),
                    dur(slide),
                    off(offset),
                    size / slide
                )
            }
            TvfWindow::Cumulate { step, size, offset } => format!(
                "CUMULATE size {} step {}{} ({} windows per event at most)",
                dur(size),
                dur(step),
                off(offset),
                size / step
            ),
            TvfWindow::Session { gap } => format!("SESSION gap {}", dur(gap)),
        };
        let by = if self.group_by.is_empty() {
            "(global)".to_string()
        } else {
            self.group_by.iter().map(|&i| field(i)).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            s,
            "{}Window {w}, windows [start, end) fire at watermark >= end - 1",
            pad(depth)
        );
        let state = match self.window {
            TvfWindow::Session { .. } => {
                "sessions in `sessions`, their events in `sevents`".to_string()
            }
            _ => "one state per window and key".to_string(),
        };
        let _ = writeln!(
            s,
            "{}GroupBy {by}, window_start, window_end ({state}; timers in `timers`)",
            pad(depth + 1)
        );
        for (node, n) in self.nodes.iter().enumerate() {
            if n.predicate.is_none() && n.aggs.is_empty() {
                continue;
            }
            let what = match &n.predicate {
                Some(p) => p.to_string(),
                None => "(all events)".to_string(),
            };
            let trees = match &n.trees {
                Some(t) => format!(", order-statistics trees in `{t}`"),
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "{}Filter {what} -> state namespace `{}`{trees}",
                pad(depth + 2),
                n.namespace
            );
            for (ai, (k, arg, _)) in n.aggs.iter().enumerate() {
                let outs: Vec<&str> = self
                    .outputs
                    .iter()
                    .filter(|(_, src)| *src == WindowOutput::Agg { node, agg: ai })
                    .map(|(n, _)| n.as_str())
                    .collect();
                let _ = writeln!(
                    s,
                    "{}Aggregate {} -> {}",
                    pad(depth + 3),
                    call_text(*k, arg.as_ref()),
                    outs.join(", ")
                );
            }
        }
        s
    }
}

/// Per-end timer bookkeeping: how many list chunks hold its group keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct TimerMeta {
    chunks: u32,
    in_last: u32,
}

/// Counters of a windowed aggregation beyond [`Counters`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowStats {
    /// Rows emitted when the watermark passed a window's end (including end of input).
    pub fired: u64,
    /// Rows emitted again because a late event updated a fired window.
    pub late_updates: u64,
    /// Session merges (two or more sessions became one).
    pub session_merges: u64,
    /// Windows that events taken into other windows could not enter (their state was
    /// cleaned up), one per event and window; events no window took are
    /// [`Counters::too_late`] instead. See the module docs.
    pub missed_windows: u64,
}

/// What one event missed (see [`WindowAgg::take_missed`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Missed {
    /// The event's row (input columns).
    pub row: Row,
    /// The windows `[start, end)` it missed, in ascending order of end.
    pub windows: Vec<(i64, i64)>,
}

/// Serializable position of a windowed aggregation (part of a checkpoint).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WindowSnapshot {
    /// Largest event time seen.
    max_time: Option<i64>,
    /// Timers not yet fired: (end, chunks, keys in the last chunk).
    pending: Vec<(i64, TimerMeta)>,
    /// Timers fired, awaiting cleanup (lateness > 0).
    fired: Vec<(i64, TimerMeta)>,
    /// Next session id.
    next_session: u64,
    /// Counters.
    counters: Counters,
    /// Window counters.
    stats: WindowStats,
}

impl WindowSnapshot {
    /// The counters at the checkpoint.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// One live session of a group key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Session {
    start: i64,
    end: i64,
    id: u64,
}

fn decode_sessions(v: &[u8]) -> Option<Vec<Session>> {
    if !v.len().is_multiple_of(24) {
        return None;
    }
    Some(
        v.chunks_exact(24)
            .map(|c| Session {
                start: i64::from_le_bytes(c[..8].try_into().expect("8")),
                end: i64::from_le_bytes(c[8..16].try_into().expect("8")),
                id: u64::from_le_bytes(c[16..].try_into().expect("8")),
            })
            .collect(),
    )
}

fn encode_sessions(v: &[Session], out: &mut Vec<u8>) {
    out.clear();
    for s in v {
        out.extend_from_slice(&s.start.to_le_bytes());
        out.extend_from_slice(&s.end.to_le_bytes());
        out.extend_from_slice(&s.id.to_le_bytes());
    }
}

/// Order-preserving 8 bytes of a time.
fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// Key of timer list chunk `chunk` of window end `end`.
fn timer_key(end: i64, chunk: u32) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..8].copy_from_slice(&time_key(end));
    k[8..].copy_from_slice(&chunk.to_be_bytes());
    k
}

fn encode_group(cols: &[usize], row: &Row, out: &mut Vec<u8>) {
    out.clear();
    for &c in cols {
        row[c].encode_key(out);
    }
}

/// The horizon under which windowed aggregates insert: nothing is ever removed again.
const NO_REMOVAL: EventKey = EventKey { time: i64::MAX, seq: u64::MAX };

/// The runtime of one windowed aggregation.
pub struct WindowAgg {
    plan: WindowPlan,
    store: Box<dyn StateStore>,
    ns: Vec<Ns>,
    /// Per filter node: the trees of its holistic aggregates (aligned windows).
    trees: Vec<Option<HolisticTrees>>,
    timers_ns: Ns,
    sessions_ns: Option<(Ns, Ns)>,
    lateness: i64,
    delay: i64,
    max_time: Option<i64>,
    pending: BTreeMap<i64, TimerMeta>,
    fired: BTreeMap<i64, TimerMeta>,
    next_session: u64,
    counters: Counters,
    stats: WindowStats,
    /// What the last event processed missed.
    missed: Option<Missed>,
    // scratch
    missed_windows: Vec<(i64, i64)>,
    windows: Vec<(i64, i64)>,
    group: Vec<u8>,
    key: Vec<u8>,
    args: Vec<Value>,
    results: Vec<Vec<Value>>,
    buf: Vec<u8>,
    prefetch_keys: Vec<u8>,
    prefetch_ends: Vec<(Ns, usize)>,
}

impl WindowAgg {
    /// A runtime over `store` (opened with [`WindowPlan::namespace_specs`]); with
    /// `snapshot`, continues from a checkpoint. `allowed_lateness` and
    /// `watermark_delay` are in the time column's unit.
    pub fn new(
        plan: WindowPlan,
        store: Box<dyn StateStore>,
        allowed_lateness: i64,
        watermark_delay: i64,
        snapshot: Option<WindowSnapshot>,
    ) -> Result<WindowAgg> {
        if allowed_lateness < 0 {
            return Err(Error::Config(format!(
                "allowed lateness must be >= 0, got {allowed_lateness}"
            )));
        }
        if watermark_delay < 0 {
            return Err(Error::Config(format!(
                "the watermark delay must be >= 0, got {watermark_delay}"
            )));
        }
        let mut ns = Vec::new();
        let mut trees = Vec::new();
        for n in &plan.nodes {
            ns.push(store.namespace(&n.namespace)?);
            trees.push(match &n.trees {
                Some(t) => HolisticTrees::new(store.namespace(t)?, t, &n.set),
                None => None,
            });
        }
        let timers_ns = store.namespace(TIMERS_NS)?;
        let sessions_ns = match plan.window {
            TvfWindow::Session { .. } => {
                Some((store.namespace(SESSIONS_NS)?, store.namespace(SESSION_EVENTS_NS)?))
            }
            _ => None,
        };
        let nodes = plan.nodes.len();
        let mut w = WindowAgg {
            plan,
            store,
            ns,
            trees,
            timers_ns,
            sessions_ns,
            lateness: allowed_lateness,
            delay: watermark_delay,
            max_time: None,
            pending: BTreeMap::new(),
            fired: BTreeMap::new(),
            next_session: 0,
            counters: Counters::default(),
            stats: WindowStats::default(),
            missed: None,
            missed_windows: Vec::new(),
            windows: Vec::new(),
            group: Vec::new(),
            key: Vec::new(),
            args: Vec::new(),
            results: vec![Vec::new(); nodes],
            buf: Vec::new(),
            prefetch_keys: Vec::new(),
            prefetch_ends: Vec::new(),
        };
        if let Some(s) = snapshot {
            w.max_time = s.max_time;
            w.pending = s.pending.into_iter().collect();
            w.fired = s.fired.into_iter().collect();
            w.next_session = s.next_session;
            w.counters = s.counters;
            w.stats = s.stats;
        }
        Ok(w)
    }

    /// The plan.
    pub fn plan(&self) -> &WindowPlan {
        &self.plan
    }

    /// Counters so far (`emitted` counts output rows).
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    /// Window counters so far.
    pub fn stats(&self) -> WindowStats {
        self.stats.clone()
    }

    /// The store.
    pub fn store_mut(&mut self) -> &mut dyn StateStore {
        self.store.as_mut()
    }

    /// The current watermark, `max_time - delay - 1` (`None` before the first event; see
    /// the module docs).
    pub fn watermark(&self) -> Option<i64> {
        self.max_time.map(|m| m.saturating_sub(self.delay).saturating_sub(1))
    }

    /// The position, for a checkpoint.
    pub fn snapshot(&self) -> WindowSnapshot {
        WindowSnapshot {
            max_time: self.max_time,
            pending: self.pending.iter().map(|(&e, &m)| (e, m)).collect(),
            fired: self.fired.iter().map(|(&e, &m)| (e, m)).collect(),
            next_session: self.next_session,
            counters: self.counters.clone(),
            stats: self.stats.clone(),
        }
    }

    fn state_err(&self, node: usize, e: AggStateError) -> Error {
        Error::State(format!("namespace `{}`: {e}", self.plan.nodes[node].namespace))
    }

    /// Announces a batch of events about to be processed: the store prefetches the
    /// window states they will update (aligned windows only). A hint only.
    pub fn prefetch(&mut self, events: &[Event]) {
        if events.len() < 2 || self.sessions_ns.is_some() {
            return;
        }
        let WindowAgg {
            plan, ns, prefetch_keys: keys, prefetch_ends: ends, windows, group, ..
        } = self;
        keys.clear();
        ends.clear();
        for e in events {
            if plan.filter.as_ref().is_some_and(|f| !f.eval_bool(&e.row)) {
                continue;
            }
            encode_group(&plan.group_by, &e.row, group);
            plan.window.assign(e.time, windows);
            for &(_, end) in windows.iter() {
                for (ni, n) in plan.nodes.iter().enumerate() {
                    if n.predicate.as_ref().is_some_and(|p| !p.eval_bool(&e.row)) {
                        continue;
                    }
                    keys.extend_from_slice(&time_key(end));
                    keys.extend_from_slice(group);
                    ends.push((ns[ni], keys.len()));
                }
            }
        }
        prefetch_announced(self.store.as_mut(), keys, ends);
    }

    /// Processes one event; rows it emits (firings and late updates) are appended to
    /// `rows`. Returns [`Outcome::Emitted`] when the event was taken into a window
    /// (whether or not rows were emitted), [`Outcome::Filtered`] when `WHERE` dropped it
    /// and [`Outcome::TooLate`] when every window it falls in was cleaned up (the side
    /// output).
    pub fn process(&mut self, event: Event, rows: &mut Vec<Vec<Value>>) -> Result<Outcome> {
        self.counters.events += 1;
        self.missed = None;
        self.missed_windows.clear();
        let wm = self.watermark().unwrap_or(i64::MIN);
        let t = event.time;
        let outcome = if self.plan.filter.as_ref().is_some_and(|f| !f.eval_bool(&event.row)) {
            self.counters.filtered += 1;
            Outcome::Filtered
        } else {
            let taken = match self.plan.window {
                TvfWindow::Session { gap } => self.add_to_session(&event, gap, wm, rows)?,
                _ => self.add_to_windows(&event, wm, rows)?,
            };
            if !self.missed_windows.is_empty() {
                if taken {
                    self.stats.missed_windows += self.missed_windows.len() as u64;
                }
                self.missed = Some(Missed {
                    row: event.row.clone(),
                    windows: std::mem::take(&mut self.missed_windows),
                });
            }
            if taken {
                if self.max_time.is_some_and(|m| t < m) {
                    self.counters.late_in_bounds += 1;
                }
                Outcome::Emitted
            } else {
                self.counters.too_late += 1;
                Outcome::TooLate(event)
            }
        };
        self.max_time = Some(self.max_time.map_or(t, |m| m.max(t)));
        let wm = self.watermark().unwrap_or(i64::MIN);
        self.advance(wm, rows)?;
        Ok(outcome)
    }

    /// What the event just given to [`process`](Self::process) missed, if anything: its
    /// row and the windows that did not take it (all of them for
    /// [`Outcome::TooLate`], the cleaned-up ones for an event taken into others; see the
    /// module docs). Cleared by the next `process`.
    pub fn take_missed(&mut self) -> Option<Missed> {
        self.missed.take()
    }

    /// End of input: every open window fires and all window state is released.
    pub fn finish(&mut self, rows: &mut Vec<Vec<Value>>) -> Result<()> {
        self.advance(i64::MAX, rows)
    }

    fn cleaned(&self, end: i64, wm: i64) -> bool {
        end.saturating_sub(1).saturating_add(self.lateness) <= wm
    }

    /// Adds `event` to its aligned windows; false if all were cleaned up.
    fn add_to_windows(
        &mut self,
        event: &Event,
        wm: i64,
        rows: &mut Vec<Vec<Value>>,
    ) -> Result<bool> {
        let mut windows = std::mem::take(&mut self.windows);
        self.plan.window.assign(event.time, &mut windows);
        encode_group(&self.plan.group_by, &event.row, &mut self.group);
        let mut taken = false;
        let ekey = event.key();
        for &(start, end) in &windows {
            if self.cleaned(end, wm) {
                self.missed_windows.push((start, end));
                continue;
            }
            taken = true;
            let mut first = false;
            for ni in 0..self.plan.nodes.len() {
                let node = &self.plan.nodes[ni];
                if node.predicate.as_ref().is_some_and(|p| !p.eval_bool(&event.row)) {
                    continue;
                }
                self.args.clear();
                for (_, arg, _) in &node.aggs {
                    self.args.push(arg.as_ref().map_or(Value::Null, |a| a.eval(&event.row)));
                }
                self.key.clear();
                self.key.extend_from_slice(&time_key(end));
                self.key.extend_from_slice(&self.group);
                let set = &node.set;
                let args = &self.args;
                let mut failed = None;
                self.store.rmw(self.ns[ni], &self.key, &mut |old, out| {
                    if ni == 0 && old.is_none() {
                        first = true;
                    }
                    match set.try_insert(old, out, ekey, args, NO_REMOVAL) {
                        Ok(()) => Rmw::Put,
                        Err(e) => {
                            failed = Some(e);
                            Rmw::Keep
                        }
                    }
                })?;
                if let Some(e) = failed {
                    return Err(self.state_err(ni, e));
                }
                if let Some(t) = self.trees[ni].as_mut() {
                    t.update(self.store.as_mut(), &self.key, ekey, &self.args, 1)?;
                }
                self.counters.state_updates += 1;
            }
            if first {
                let group = std::mem::take(&mut self.group);
                let r = self.add_timer(end, wm, &group);
                self.group = group;
                r?;
            }
            if end - 1 <= wm {
                // A late event in a fired window: fire it again (EventTimeTrigger).
                let group = std::mem::take(&mut self.group);
                let r = self.emit_aligned(end, &group, rows, false);
                self.group = group;
                r?;
                self.stats.late_updates += 1;
            }
        }
        self.windows = windows;
        Ok(taken)
    }

    /// Registers `group` to fire at `end` (in the fired map if the window has fired).
    fn add_timer(&mut self, end: i64, wm: i64, group: &[u8]) -> Result<()> {
        let map = if end - 1 <= wm { &mut self.fired } else { &mut self.pending };
        let meta = map.entry(end).or_insert(TimerMeta { chunks: 1, in_last: 0 });
        if meta.in_last == TIMER_CHUNK {
            meta.chunks += 1;
            meta.in_last = 0;
        }
        meta.in_last += 1;
        let k = timer_key(end, meta.chunks - 1);
        self.store.merge(self.timers_ns, &k, group)?;
        Ok(())
    }

    /// Calls `f` with each group key registered at `end`, in registration order, one
    /// list chunk at a time (`delete`: and drops the chunks).
    fn for_timer_keys(
        &mut self,
        end: i64,
        meta: TimerMeta,
        delete: bool,
        f: &mut dyn FnMut(&mut Self, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for c in 0..meta.chunks {
            let k = timer_key(end, c);
            if let Some(v) = self.store.get(self.timers_ns, &k)? {
                for item in spillway_store::list::iter(&v) {
                    let item = item.map_err(|e| {
                        Error::State(format!("timer list of window end {end}: {e}"))
                    })?;
                    f(self, item)?;
                }
            }
            if delete {
                self.store.delete(self.timers_ns, &k)?;
            }
        }
        Ok(())
    }

    /// Fires the windows whose end the watermark `wm` has reached and cleans up those
    /// past the allowed lateness.
    fn advance(&mut self, wm: i64, rows: &mut Vec<Vec<Value>>) -> Result<()> {
        while let Some((&end, &meta)) = self.pending.first_key_value() {
            if end - 1 > wm {
                break;
            }
            self.pending.remove(&end);
            let clean = self.cleaned(end, wm);
            self.for_timer_keys(end, meta, clean, &mut |w, g| {
                let fired = match w.sessions_ns {
                    None => {
                        w.emit_aligned(end, g, rows, clean)?;
                        true
                    }
                    Some(_) => w.fire_session(end, g, rows, clean)?,
                };
                w.stats.fired += u64::from(fired);
                Ok(())
            })?;
            if !clean {
                self.fired.insert(end, meta);
            }
        }
        while let Some((&end, &meta)) = self.fired.first_key_value() {
            if !self.cleaned(end, wm) {
                break;
            }
            self.fired.remove(&end);
            self.for_timer_keys(end, meta, true, &mut |w, g| match w.sessions_ns {
                None => w.drop_aligned(end, g),
                Some(_) => w.drop_session(end, g),
            })?;
        }
        Ok(())
    }

    fn drop_aligned(&mut self, end: i64, group: &[u8]) -> Result<()> {
        self.key.clear();
        self.key.extend_from_slice(&time_key(end));
        self.key.extend_from_slice(group);
        for ni in 0..self.ns.len() {
            self.store.delete(self.ns[ni], &self.key)?;
            if let Some(t) = self.trees[ni].as_mut() {
                t.clear(self.store.as_mut(), &self.key)?;
            }
        }
        Ok(())
    }

    /// Emits the row of the aligned window ending at `end` for `group`; with `take`,
    /// also deletes its state (in the same store access).
    fn emit_aligned(
        &mut self,
        end: i64,
        group: &[u8],
        rows: &mut Vec<Vec<Value>>,
        take: bool,
    ) -> Result<()> {
        self.key.clear();
        self.key.extend_from_slice(&time_key(end));
        self.key.extend_from_slice(group);
        for ni in 0..self.plan.nodes.len() {
            let mut r = std::mem::take(&mut self.results[ni]);
            r.clear();
            let set = &self.plan.nodes[ni].set;
            let mut done = Ok(());
            let mut found = false;
            if take {
                self.store.rmw(self.ns[ni], &self.key, &mut |old, _| match old {
                    Some(v) => {
                        found = true;
                        done = set.try_results(v, &mut r);
                        Rmw::Delete
                    }
                    None => Rmw::Keep,
                })?;
            } else if self.store.get_into(self.ns[ni], &self.key, &mut self.buf)? {
                found = true;
                done = set.try_results(&self.buf, &mut r);
            }
            if !found {
                set.empty_results(&mut r);
            }
            if let (true, Some(t)) = (found && done.is_ok(), self.trees[ni].as_mut()) {
                let store = self.store.as_mut();
                let mut tr = t.results(store, &self.key, &mut r);
                if take && tr.is_ok() {
                    tr = t.clear(store, &self.key);
                }
                tr?;
            }
            self.results[ni] = r;
            done.map_err(|e| self.state_err(ni, e))?;
        }
        let start = self.plan.window.start_of(end);
        self.push_row(start, end, group, rows)
    }

    fn push_row(
        &mut self,
        start: i64,
        end: i64,
        group: &[u8],
        rows: &mut Vec<Vec<Value>>,
    ) -> Result<()> {
        let mut keyvals = Vec::with_capacity(self.plan.group_by.len());
        let mut rest = group;
        for _ in &self.plan.group_by {
            keyvals.push(Value::decode_key(&mut rest).ok_or_else(|| {
                Error::State("a timer holds a group key that does not decode".into())
            })?);
        }
        let row: Vec<Value> = self
            .plan
            .outputs
            .iter()
            .map(|(_, src)| match *src {
                WindowOutput::Key(i) => keyvals[i].clone(),
                WindowOutput::Start => Value::Int(start),
                WindowOutput::End => Value::Int(end),
                WindowOutput::Time => Value::Int(end - 1),
                WindowOutput::Agg { node, agg } => self.results[node][agg].clone(),
            })
            .collect();
        rows.push(row);
        self.counters.emitted += 1;
        Ok(())
    }

    // ---- sessions ----

    fn sessions_of(&mut self, group: &[u8]) -> Result<Vec<Session>> {
        let (sns, _) = self.sessions_ns.expect("session window");
        match self.store.get(sns, group)? {
            None => Ok(Vec::new()),
            Some(v) => decode_sessions(&v).ok_or_else(|| {
                Error::State(format!("namespace `{SESSIONS_NS}`: a value of {} bytes", v.len()))
            }),
        }
    }

    fn put_sessions(&mut self, group: &[u8], sessions: &[Session]) -> Result<()> {
        let (sns, _) = self.sessions_ns.expect("session window");
        if sessions.is_empty() {
            self.store.delete(sns, group)?;
        } else {
            encode_sessions(sessions, &mut self.buf);
            self.store.put(sns, group, &self.buf)?;
        }
        Ok(())
    }

    fn session_events(&mut self, id: u64) -> Result<Vec<Event>> {
        let (_, ens) = self.sessions_ns.expect("session window");
        let Some(v) = self.store.get(ens, &id.to_be_bytes())? else { return Ok(Vec::new()) };
        let mut events = Vec::new();
        for item in spillway_store::list::iter(&v) {
            let item = item.map_err(|e| Error::State(format!("events of session {id}: {e}")))?;
            events.push(postcard::from_bytes(item).map_err(|e| {
                Error::State(format!("an event of session {id} does not decode: {e}"))
            })?);
        }
        Ok(events)
    }

    /// Adds `event` to its key's sessions (merging them as Flink's `MergingWindowSet`
    /// does); false if the resulting session was already cleaned up.
    fn add_to_session(
        &mut self,
        event: &Event,
        gap: i64,
        wm: i64,
        rows: &mut Vec<Vec<Value>>,
    ) -> Result<bool> {
        let (_, ens) = self.sessions_ns.expect("session window");
        encode_group(&self.plan.group_by, &event.row, &mut self.group);
        let group = std::mem::take(&mut self.group);
        let mut sessions = self.sessions_of(&group)?;
        let mut merged = Session { start: event.time, end: event.time.saturating_add(gap), id: 0 };
        // Sessions are disjoint and sorted by start; those the new window touches merge.
        let (touching, rest): (Vec<Session>, Vec<Session>) =
            sessions.drain(..).partition(|s| s.start <= merged.end && s.end >= merged.start);
        for s in &touching {
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
        }
        if self.cleaned(merged.end, wm) {
            // Only possible when nothing live merges with it (live sessions end later).
            self.missed_windows.push((merged.start, merged.end));
            let mut back = rest;
            back.extend(touching);
            back.sort_by_key(|s| s.start);
            self.put_sessions(&group, &back)?;
            self.group = group;
            return Ok(false);
        }
        // The survivor is the earliest session; the others' events move into it.
        let survivor = match touching.first() {
            Some(s) => s.id,
            None => {
                let id = self.next_session;
                self.next_session += 1;
                id
            }
        };
        merged.id = survivor;
        if touching.len() > 1 {
            self.stats.session_merges += 1;
            for s in &touching[1..] {
                let key = s.id.to_be_bytes();
                if let Some(v) = self.store.get(ens, &key)? {
                    for item in spillway_store::list::iter(&v) {
                        let item = item.map_err(|e| {
                            Error::State(format!("events of session {}: {e}", s.id))
                        })?;
                        self.store.merge(ens, &survivor.to_be_bytes(), item)?;
                    }
                }
                self.store.delete(ens, &key)?;
            }
        }
        let bytes = postcard::to_stdvec(event)
            .map_err(|e| Error::State(format!("cannot encode an event: {e}")))?;
        self.store.merge(ens, &survivor.to_be_bytes(), &bytes)?;
        self.counters.state_updates += 1;
        let mut all = rest;
        all.push(merged);
        all.sort_by_key(|s| s.start);
        self.put_sessions(&group, &all)?;
        // A timer for (group, end) exists if a merged session already ended there.
        let grew = !touching.iter().any(|s| s.end == merged.end);
        let r = (|| {
            if grew {
                self.add_timer(merged.end, wm, &group)?;
            }
            if merged.end - 1 <= wm {
                self.emit_session(merged, &group, rows)?;
                self.stats.late_updates += 1;
            }
            Ok(())
        })();
        self.group = group;
        r.map(|()| true)
    }

    /// Aggregates session `s` of `group` and emits its row.
    fn emit_session(&mut self, s: Session, group: &[u8], rows: &mut Vec<Vec<Value>>) -> Result<()> {
        let mut events = self.session_events(s.id)?;
        events.sort_by_key(|e| e.key());
        let mut state = Vec::new();
        let mut out = Vec::new();
        for ni in 0..self.plan.nodes.len() {
            let node = &self.plan.nodes[ni];
            let mut have = false;
            for e in &events {
                if node.predicate.as_ref().is_some_and(|p| !p.eval_bool(&e.row)) {
                    continue;
                }
                self.args.clear();
                for (_, arg, _) in &node.aggs {
                    self.args.push(arg.as_ref().map_or(Value::Null, |a| a.eval(&e.row)));
                }
                node.set
                    .try_insert(
                        have.then_some(&state[..]),
                        &mut out,
                        e.key(),
                        &self.args,
                        NO_REMOVAL,
                    )
                    .map_err(|x| Error::State(format!("session aggregate: {x}")))?;
                std::mem::swap(&mut state, &mut out);
                have = true;
            }
            let mut r = std::mem::take(&mut self.results[ni]);
            r.clear();
            let done = if have {
                node.set.try_results(&state, &mut r)
            } else {
                node.set.empty_results(&mut r);
                Ok(())
            };
            self.results[ni] = r;
            done.map_err(|x| Error::State(format!("session aggregate: {x}")))?;
        }
        self.push_row(s.start, s.end, group, rows)
    }

    /// Fires `group`'s session ending at `end` if it still does (timers of sessions that
    /// grew are stale); `clean` also drops it. True if a row was emitted.
    fn fire_session(
        &mut self,
        end: i64,
        group: &[u8],
        rows: &mut Vec<Vec<Value>>,
        clean: bool,
    ) -> Result<bool> {
        let sessions = self.sessions_of(group)?;
        let Some(&s) = sessions.iter().find(|s| s.end == end) else { return Ok(false) };
        self.emit_session(s, group, rows)?;
        if clean {
            self.drop_session(end, group)?;
        }
        Ok(true)
    }

    fn drop_session(&mut self, end: i64, group: &[u8]) -> Result<()> {
        let (_, ens) = self.sessions_ns.expect("session window");
        let mut sessions = self.sessions_of(group)?;
        let Some(i) = sessions.iter().position(|s| s.end == end) else { return Ok(()) };
        let s = sessions.remove(i);
        self.store.delete(ens, &s.id.to_be_bytes())?;
        self.put_sessions(group, &sessions)?;
        Ok(())
    }
}
