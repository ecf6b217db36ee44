//! The query plan: a DAG `Window -> Filter -> GroupBy -> Aggregate` with shared prefixes,
//! built from a parsed [`QuerySpec`], and the window boundaries ("cursors") it needs.
//!
//! Metrics with the same frame share one window node; under it, metrics with the same
//! `FILTER` share one filter node; under that, metrics with the same `PARTITION BY` share
//! one group-by node, whose aggregates form one [`AggSet`] stored as one value per
//! partition key in the group-by's store namespace. Windows share boundaries: a boundary
//! is a time offset behind the frontier plus whether an event exactly on it has passed;
//! every `RANGE` window has an enter boundary (its frame end) and, unless it is
//! `UNBOUNDED PRECEDING`, an exit boundary (its frame start). The boundary
//! `(0, inclusive)` is the arrival itself: no cursor is needed. A `ROWS` window has no
//! boundary: its group-by nodes keep their partitions' last rows in a second namespace
//! (see [`crate::operator::over`]), and nothing of it is read back from the reservoir.
//!
//! The `RANGE` group-by nodes with one `PARTITION BY` (whatever their window and
//! `FILTER`) form one [`RecordNode`]: their states for a partition key are slots of one
//! store value (layout: [`crate::aggregate::record`]), so an event entering ten windows
//! at arrival costs one read-modify-write, and a key is stored once, not once per window.

use std::fmt::{self, Write as _};

use crate::aggregate::external::tree_layout;
use crate::aggregate::{AggKind, AggSet};
use crate::sql::{Expr, Frame, QuerySpec, RangeFrame, SelectItem, MAX_ROWS_PRECEDING};
use crate::value::{DataType, Schema};

/// A line in time that events pass as the frontier advances: an event `x` has passed
/// boundary `b` at frontier `T` iff `x.time < T - offset`, or `<=` when `inclusive`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Boundary {
    /// Offset behind the frontier, in time units.
    pub offset: i64,
    /// Whether an event exactly `offset` behind the frontier has passed.
    pub inclusive: bool,
}

impl Boundary {
    /// The arrival boundary: every event has passed it as soon as it arrives.
    pub const ARRIVAL: Boundary = Boundary { offset: 0, inclusive: true };

    /// Whether an event at `time` has passed this boundary at frontier `frontier`.
    #[inline]
    pub fn passed(self, time: i64, frontier: i64) -> bool {
        let line = frontier.saturating_sub(self.offset);
        if self.inclusive {
            time <= line
        } else {
            time < line
        }
    }
}

/// A window node: one frame.
#[derive(Clone, Debug)]
pub struct WindowNode {
    /// The frame.
    pub frame: Frame,
    /// Index into [`Plan::boundaries`] of the boundary where events enter (`None` for a
    /// `ROWS` frame: its events enter at arrival, through the kept rows).
    pub enter: Option<usize>,
    /// Index into [`Plan::boundaries`] of the boundary where events leave (`None` for
    /// `UNBOUNDED PRECEDING`, where nothing leaves, and for a `ROWS` frame, whose events
    /// leave by count).
    pub exit: Option<usize>,
    /// Filter nodes under this window.
    pub filters: Vec<usize>,
}

/// A filter node: the `FILTER (WHERE ..)` of its metrics (`None`: all events).
#[derive(Clone, Debug)]
pub struct FilterNode {
    /// Parent window.
    pub window: usize,
    /// The predicate.
    pub predicate: Option<Expr>,
    /// Group-by nodes under this filter.
    pub groups: Vec<usize>,
}

/// A group-by node: a partitioning and the aggregates computed per partition.
#[derive(Clone, Debug)]
pub struct GroupNode {
    /// Parent filter.
    pub filter: usize,
    /// Parent window (copied from the filter for the hot path).
    pub window: usize,
    /// Partition columns (field indices).
    pub partition_by: Vec<usize>,
    /// The aggregates: function, argument (None for `COUNT(*)`), argument type.
    pub aggs: Vec<(AggKind, Option<Expr>, Option<DataType>)>,
    /// Their combined state layout.
    pub set: AggSet,
    /// The node's name (`g<i>`): the store namespace of a `ROWS` node's state, and the
    /// prefix of its kept rows' and trees' namespaces. A `RANGE` node's state is a slot
    /// of its [`record`](Self::record).
    pub namespace: String,
    /// Under a `ROWS` frame: the store namespace of the partitions' kept rows (see
    /// [`crate::operator::over`]) and the frame's `n` (rows before the current one).
    pub rows: Option<(String, u64)>,
    /// The store namespace of the order-statistics trees of this node's holistic
    /// aggregates (`COUNT(DISTINCT)`, percentiles, `FIRST_VALUE`/`LAST_VALUE`; see
    /// [`crate::aggregate::external`]), when it has any and its frame is a `RANGE`.
    pub trees: Option<String>,
    /// Under a `RANGE` frame: the state record holding this node's state, and its slot
    /// in it. `None` under a `ROWS` frame, whose state lives in `namespace` beside its
    /// kept rows' header.
    pub record: Option<(usize, usize)>,
}

/// A state record: the `RANGE` group-by nodes with one `PARTITION BY`, whose states for
/// a partition key are the slots of one value in the record's namespace.
#[derive(Clone, Debug)]
pub struct RecordNode {
    /// Store namespace of the records.
    pub namespace: String,
    /// Partition columns (field indices), the same for every member.
    pub partition_by: Vec<usize>,
    /// The member group-by nodes, in slot order.
    pub groups: Vec<usize>,
}

impl GroupNode {
    /// Builds the aggregates' state layout: an `UNBOUNDED PRECEDING` frame never evicts,
    /// and under a `RANGE` frame (with `trees`) the holistic aggregates live in
    /// order-statistics trees in the namespace `<namespace>.ost`.
    fn layout_aggregates(&mut self, unbounded: bool, trees: bool) {
        let kinds: Vec<(AggKind, Option<DataType>)> =
            self.aggs.iter().map(|(k, _, t)| (*k, *t)).collect();
        let mut set = AggSet::new(&kinds);
        if unbounded && self.rows.is_none() {
            // UNBOUNDED PRECEDING: nothing is ever evicted, so MIN/MAX and
            // FIRST_VALUE/LAST_VALUE keep only what a late event can still change.
            set = set.without_evictions();
        }
        // RANGE frames keep holistic aggregates in order-statistics trees: O(log n) per
        // update in the window's size. ROWS frames keep them inline (their late-event
        // path rebuilds windows from kept rows in memory).
        (self.set, self.trees) = if trees && self.rows.is_none() {
            tree_layout(set, &self.namespace)
        } else {
            (set, None)
        };
    }
}

/// Where an output column's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputSource {
    /// A field of the event.
    Field(usize),
    /// Aggregate `agg` of group-by node `group`.
    Metric {
        /// Group-by node.
        group: usize,
        /// Position in the node's aggregates.
        agg: usize,
    },
}

/// The whole plan of one query.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Query-level `WHERE`: events failing it are neither output nor windowed.
    pub filter: Option<Expr>,
    /// Distinct boundaries, sorted by (offset, exclusive-after-inclusive).
    pub boundaries: Vec<Boundary>,
    /// Window nodes.
    pub windows: Vec<WindowNode>,
    /// Filter nodes.
    pub filters: Vec<FilterNode>,
    /// Group-by nodes.
    pub groups: Vec<GroupNode>,
    /// State records (of the `RANGE` group-by nodes).
    pub records: Vec<RecordNode>,
    /// Output columns: name and source.
    pub outputs: Vec<(String, OutputSource)>,
    /// How far behind the frontier the window cursors reach: the largest boundary offset
    /// (a bounded `RANGE` frame's start, an `UNBOUNDED PRECEDING` frame's end; `ROWS`
    /// frames have none). Older events are not needed from the reservoir: `UNBOUNDED`
    /// and `ROWS` windows hold what they need in the state store.
    pub max_start: i64,
}

/// An aggregate call as `explain` prints it, e.g. `COUNT(DISTINCT merchant)`.
pub(crate) fn call_text(kind: AggKind, arg: Option<&Expr>) -> String {
    match (kind, arg) {
        (AggKind::CountStar, _) => "COUNT(*)".to_string(),
        (AggKind::CountDistinct, Some(a)) => format!("COUNT(DISTINCT {a})"),
        (AggKind::PercentileCont(p), Some(a)) => {
            format!("PERCENTILE_CONT({p}) WITHIN GROUP (ORDER BY {a})")
        }
        (k, Some(a)) => format!("{}({a})", k.name()),
        (k, None) => format!("{}()", k.name()),
    }
}

/// A plan that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

fn enter_boundary(frame: &RangeFrame) -> Boundary {
    Boundary { offset: frame.end, inclusive: !frame.end_open }
}

fn exit_boundary(frame: &RangeFrame) -> Option<Boundary> {
    // An event leaves a `[t-S, ..` window once `x.time < T - S`; an `(t-S, ..` window
    // once `x.time <= T - S`.
    frame.start.map(|start| Boundary { offset: start, inclusive: frame.start_open })
}

/// Rejects a frame no query produces: a `RANGE` frame that starts after it ends or can
/// hold no event, a `ROWS` frame beyond [`MAX_ROWS_PRECEDING`].
fn check_frame(f: &Frame) -> Result<(), PlanError> {
    match f {
        Frame::Range(r) => {
            if r.end < 0 || r.start.is_some_and(|start| start < r.end) {
                return Err(PlanError(format!(
                    "window frame {f} starts after it ends; the PRECEDING offset of the start must be at least the end's"
                )));
            }
            if r.start == Some(r.end) && (r.start_open || r.end_open) {
                return Err(PlanError(format!("window frame {f} can never hold an event")));
            }
            if r.start.is_none() && r.start_open {
                return Err(PlanError(format!(
                    "window frame {f}: an UNBOUNDED PRECEDING start cannot be open"
                )));
            }
        }
        Frame::Rows { preceding } => {
            if *preceding > MAX_ROWS_PRECEDING {
                return Err(PlanError(format!(
                    "window frame {f} holds more than {MAX_ROWS_PRECEDING} rows before the current one; use a RANGE frame for longer windows"
                )));
            }
        }
    }
    Ok(())
}

impl Plan {
    /// Builds the DAG for `query`.
    pub fn build(query: &QuerySpec, schema: &Schema) -> Result<Plan, PlanError> {
        let mut plan = Plan {
            filter: query.filter.clone(),
            boundaries: Vec::new(),
            windows: Vec::new(),
            filters: Vec::new(),
            groups: Vec::new(),
            records: Vec::new(),
            outputs: Vec::new(),
            max_start: 0,
        };
        let boundary_of = |b: Boundary, plan: &mut Plan| -> usize {
            match plan.boundaries.iter().position(|&x| x == b) {
                Some(i) => i,
                None => {
                    plan.boundaries.push(b);
                    plan.boundaries.len() - 1
                }
            }
        };
        let mut window_of_spec = Vec::with_capacity(query.windows.len());
        for spec in &query.windows {
            let f = spec.frame;
            check_frame(&f)?;
            let existing = plan.windows.iter().position(|w| w.frame == f);
            let w = match existing {
                Some(w) => w,
                None => {
                    let (enter, exit) = match &f {
                        Frame::Range(r) => {
                            let enter = boundary_of(enter_boundary(r), &mut plan);
                            let exit = exit_boundary(r).map(|b| boundary_of(b, &mut plan));
                            plan.max_start = plan.max_start.max(r.start.unwrap_or(r.end));
                            (Some(enter), exit)
                        }
                        Frame::Rows { .. } => (None, None),
                    };
                    plan.windows.push(WindowNode { frame: f, enter, exit, filters: Vec::new() });
                    plan.windows.len() - 1
                }
            };
            window_of_spec.push(w);
        }
        for item in &query.items {
            match item {
                SelectItem::Column { name, index } => {
                    if *index >= schema.fields().len() {
                        return Err(PlanError(format!("column `{name}` is not in the input")));
                    }
                    plan.outputs.push((name.clone(), OutputSource::Field(*index)));
                }
                SelectItem::Metric { name, metric } => {
                    let spec = &query.windows[metric.window];
                    let w = window_of_spec[metric.window];
                    let fkey = metric.filter.as_ref().map(|e| e.to_string());
                    let fi = match plan.windows[w].filters.iter().copied().find(|&fi| {
                        plan.filters[fi].predicate.as_ref().map(|e| e.to_string()) == fkey
                    }) {
                        Some(fi) => fi,
                        None => {
                            plan.filters.push(FilterNode {
                                window: w,
                                predicate: metric.filter.clone(),
                                groups: Vec::new(),
                            });
                            let fi = plan.filters.len() - 1;
                            plan.windows[w].filters.push(fi);
                            fi
                        }
                    };
                    let gi = match plan.filters[fi]
                        .groups
                        .iter()
                        .copied()
                        .find(|&gi| plan.groups[gi].partition_by == spec.partition_by)
                    {
                        Some(gi) => gi,
                        None => {
                            let gi = plan.groups.len();
                            let rows = match plan.windows[w].frame {
                                Frame::Rows { preceding } => {
                                    Some((format!("g{gi}.rows"), preceding))
                                }
                                Frame::Range(_) => None,
                            };
                            plan.groups.push(GroupNode {
                                filter: fi,
                                window: w,
                                partition_by: spec.partition_by.clone(),
                                aggs: Vec::new(),
                                set: AggSet::new(&[]),
                                namespace: format!("g{gi}"),
                                rows,
                                trees: None,
                                record: None,
                            });
                            plan.filters[fi].groups.push(gi);
                            gi
                        }
                    };
                    let group = &mut plan.groups[gi];
                    let key = (metric.agg, metric.arg.as_ref().map(|e| e.to_string()));
                    let agg = match group
                        .aggs
                        .iter()
                        .position(|(k, a, _)| (*k, a.as_ref().map(|e| e.to_string())) == key)
                    {
                        Some(a) => a,
                        None => {
                            group.aggs.push((metric.agg, metric.arg.clone(), metric.arg_type));
                            group.aggs.len() - 1
                        }
                    };
                    plan.outputs.push((name.clone(), OutputSource::Metric { group: gi, agg }));
                }
            }
        }
        for g in &mut plan.groups {
            let unbounded = plan.windows[g.window].exit.is_none();
            g.layout_aggregates(unbounded, true);
        }
        for gi in 0..plan.groups.len() {
            if plan.groups[gi].rows.is_some() {
                continue;
            }
            let by = &plan.groups[gi].partition_by;
            let ri = match plan.records.iter().position(|r| r.partition_by == *by) {
                Some(ri) => ri,
                None => {
                    plan.records.push(RecordNode {
                        namespace: format!("s{}", plan.records.len()),
                        partition_by: by.clone(),
                        groups: Vec::new(),
                    });
                    plan.records.len() - 1
                }
            };
            plan.groups[gi].record = Some((ri, plan.records[ri].groups.len()));
            plan.records[ri].groups.push(gi);
        }
        Ok(plan)
    }

    /// The same plan with every holistic aggregate kept inline, as one value per
    /// partition rewritten per event (the layout before order-statistics trees: O(n) per
    /// update in the window's size). For benchmarks that compare the two layouts.
    #[must_use]
    pub fn with_inline_holistic(mut self) -> Plan {
        for g in &mut self.groups {
            let unbounded = self.windows[g.window].exit.is_none();
            g.layout_aggregates(unbounded, false);
        }
        self
    }

    /// Names of the output columns.
    pub fn column_names(&self) -> Vec<String> {
        self.outputs.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Renders the DAG as an indented tree (what `spillway explain` prints).
    pub fn explain(&self, schema: &Schema) -> String {
        let unit = schema.time_unit().name();
        let field = |i: usize| schema.fields()[i].name.clone();
        let mut s = String::new();
        let _ = writeln!(s, "Source (time column `{}`, unit {unit})", field(schema.time_index()));
        let mut depth = 1;
        if let Some(f) = &self.filter {
            let _ = writeln!(s, "  Where {f}");
            depth = 2;
        }
        let pad = |d: usize| "  ".repeat(d);
        let tu = schema.time_unit();
        let cursors: Vec<String> = self
            .boundaries
            .iter()
            .filter(|b| **b != Boundary::ARRIVAL)
            .map(|b| {
                let f = Frame::range(b.offset, false, b.offset, false);
                let at = f.display(tu).to_string();
                // "[t-5m, t-5m]" -> "t-5m"
                let at = at.trim_start_matches('[').split(',').next().unwrap_or("").to_string();
                format!(
                    "{at} ({})",
                    if b.inclusive { "events at it included" } else { "events before it" }
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "{}Reservoir: one tail (arrival), {} cursor(s){}{}",
            pad(depth),
            cursors.len(),
            if cursors.is_empty() { "" } else { ": " },
            cursors.join(", ")
        );
        for (wi, w) in self.windows.iter().enumerate() {
            let _ = writeln!(
                s,
                "{}Window #{wi} {}",
                pad(depth + 1),
                w.frame.display(schema.time_unit())
            );
            for &fi in &w.filters {
                let f = &self.filters[fi];
                match &f.predicate {
                    Some(p) => {
                        let _ = writeln!(s, "{}Filter {p}", pad(depth + 2));
                    }
                    None => {
                        let _ = writeln!(s, "{}Filter (all events)", pad(depth + 2));
                    }
                }
                for &gi in &f.groups {
                    let g = &self.groups[gi];
                    let by = if g.partition_by.is_empty() {
                        "(global)".to_string()
                    } else {
                        g.partition_by.iter().map(|&i| field(i)).collect::<Vec<_>>().join(", ")
                    };
                    let rows = match &g.rows {
                        Some((ns, n)) => format!(", last {} rows in `{ns}`", n + 1),
                        None => String::new(),
                    };
                    let rows = match &g.trees {
                        Some(ns) => format!("{rows}, order-statistics trees in `{ns}`"),
                        None => rows,
                    };
                    let state = match g.record {
                        Some((ri, slot)) => {
                            format!("state record `{}` slot {slot}", self.records[ri].namespace)
                        }
                        None => format!("state namespace `{}`", g.namespace),
                    };
                    let _ = writeln!(s, "{}GroupBy {by} -> {state}{rows}", pad(depth + 3));
                    for (ai, (k, arg, _)) in g.aggs.iter().enumerate() {
                        let call = call_text(*k, arg.as_ref());
                        let outs: Vec<&str> = self
                            .outputs
                            .iter()
                            .filter(|(_, src)| *src == OutputSource::Metric { group: gi, agg: ai })
                            .map(|(n, _)| n.as_str())
                            .collect();
                        let _ = writeln!(
                            s,
                            "{}Aggregate {call} -> {}",
                            pad(depth + 4),
                            outs.join(", ")
                        );
                    }
                }
            }
        }
        s
    }
}
