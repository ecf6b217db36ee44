//! The query plan: a DAG `Window -> Filter -> GroupBy -> Aggregate` with shared prefixes,
//! built from a parsed [`QuerySpec`], and the window boundaries ("cursors") it needs.
//!
//! Metrics with the same frame share one window node; under it, metrics with the same
//! `FILTER` share one filter node; under that, metrics with the same `PARTITION BY` share
//! one group-by node, whose aggregates form one [`AggSet`] stored as one value per
//! partition key in the group-by's store namespace. Windows share boundaries: a boundary
//! is a time offset behind the frontier plus whether an event exactly on it has passed;
//! every window has an enter boundary (its frame end) and an exit boundary (its frame
//! start). The boundary `(0, inclusive)` is the arrival itself: no cursor is needed.

use std::fmt::{self, Write as _};

use crate::aggregate::{AggKind, AggSet};
use crate::sql::{Expr, Frame, QuerySpec, SelectItem};
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
    /// The frame (offsets and openness).
    pub frame: Frame,
    /// Index into [`Plan::boundaries`] of the boundary where events enter.
    pub enter: usize,
    /// Index into [`Plan::boundaries`] of the boundary where events leave.
    pub exit: usize,
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
    /// Store namespace holding this node's state.
    pub namespace: String,
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
    /// Output columns: name and source.
    pub outputs: Vec<(String, OutputSource)>,
    /// Longest frame start (how far behind the frontier events are still needed).
    pub max_start: i64,
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

fn enter_boundary(frame: &Frame) -> Boundary {
    Boundary { offset: frame.end, inclusive: !frame.end_open }
}

fn exit_boundary(frame: &Frame) -> Boundary {
    // An event leaves a `[t-S, ..` window once `x.time < T - S`; an `(t-S, ..` window
    // once `x.time <= T - S`.
    Boundary { offset: frame.start, inclusive: frame.start_open }
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
            if f.start < f.end || f.end < 0 {
                return Err(PlanError(format!(
                    "window frame {f} starts after it ends; the PRECEDING offset of the start must be at least the end's"
                )));
            }
            if f.start == f.end && (f.start_open || f.end_open) {
                return Err(PlanError(format!("window frame {f} can never hold an event")));
            }
            let existing = plan.windows.iter().position(|w| w.frame == f);
            let w = match existing {
                Some(w) => w,
                None => {
                    let enter = boundary_of(enter_boundary(&f), &mut plan);
                    let exit = boundary_of(exit_boundary(&f), &mut plan);
                    plan.max_start = plan.max_start.max(f.start);
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
                            plan.groups.push(GroupNode {
                                filter: fi,
                                window: w,
                                partition_by: spec.partition_by.clone(),
                                aggs: Vec::new(),
                                set: AggSet::new(&[]),
                                namespace: format!("g{gi}"),
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
            let kinds: Vec<(AggKind, Option<DataType>)> =
                g.aggs.iter().map(|(k, _, t)| (*k, *t)).collect();
            g.set = AggSet::new(&kinds);
        }
        Ok(plan)
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
                let f =
                    Frame { start: b.offset, start_open: false, end: b.offset, end_open: false };
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
                    let _ = writeln!(
                        s,
                        "{}GroupBy {by} -> state namespace `{}`",
                        pad(depth + 3),
                        g.namespace
                    );
                    for (ai, (k, arg, _)) in g.aggs.iter().enumerate() {
                        let call = match (k, arg) {
                            (AggKind::CountStar, _) => "COUNT(*)".to_string(),
                            (AggKind::CountDistinct, Some(a)) => format!("COUNT(DISTINCT {a})"),
                            (AggKind::PercentileCont(p), Some(a)) => {
                                format!("PERCENTILE_CONT({p}) WITHIN GROUP (ORDER BY {a})")
                            }
                            (k, Some(a)) => format!("{}({a})", k.name()),
                            (k, None) => format!("{}()", k.name()),
                        };
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
