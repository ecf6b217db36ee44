//! SQL metrics front end: turns one `SELECT ... OVER ...` query into a [`QuerySpec`]
//! (output columns, per-event metrics, the distinct sliding windows they use and the
//! `WHERE` filter). Parsing is done by the `sqlparser` crate (generic dialect); this
//! module owns the translation, its validation and error messages, and the compiled
//! scalar expressions ([`Expr`]) used by filters and aggregate arguments.
//!
//! # Query shape
//!
//! ```sql
//! SELECT card, ts,
//!        SUM(amount) OVER w AS sum_5m,
//!        COUNT(*) OVER w,
//!        AVG(amount) OVER (PARTITION BY merchant ORDER BY ts
//!                          RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW) AS avg_m,
//!        COUNT(*) FILTER (WHERE amount > 100) OVER w AS big,
//!        PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount) OVER w AS p90
//! FROM payments
//! WHERE amount > 0 AND country IN ('PT', 'ES')
//! WINDOW w AS (PARTITION BY card ORDER BY ts
//!              RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)
//! ```
//!
//! - `FROM` names the input stream (one table). Where the input has a name (`spillway
//!   run`: `--table`, else the input file's name without its extension), [`check_table`]
//!   checks the query names it; [`parse_query`] itself takes any name.
//! - The `SELECT` list holds plain columns (the current event's value) and aggregates
//!   with `OVER`: `COUNT(*)`, `COUNT(x)`, `COUNT(DISTINCT x)`, `SUM`, `AVG`, `MIN`, `MAX`,
//!   `STDDEV_SAMP` (`STDDEV`), `VAR_SAMP` (`VARIANCE`), `MEDIAN(x)`,
//!   `PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x)` (literal `0 <= p <= 1`),
//!   `FIRST_VALUE(x)`, `LAST_VALUE(x)`. `SUM`, `AVG`, `STDDEV`, `VAR`, `MEDIAN` and
//!   `PERCENTILE_CONT` need a numeric argument. An aggregate may carry
//!   `FILTER (WHERE cond)`.
//! - `WHERE` drops events before any window sees them.
//! - Output names: the alias if given, else the column name, else a rendering such as
//!   `sum(amount)`; two outputs with the same name (compared case-insensitively) are an
//!   error.
//! - Not supported (each gives an error naming the construct): aggregates without
//!   `OVER`, ranking/offset window functions (`ROW_NUMBER`, `LAG`, ...), `GROUP BY`
//!   (except in a windowed aggregation, below),
//!   `HAVING`, `ORDER BY`/`LIMIT` on the query, joins, subqueries, `SELECT *`, `DISTINCT`,
//!   and scalar expressions as SELECT items.
//!
//! # Windowed aggregation
//!
//! A query whose `FROM` is a window table function (`FROM TABLE(TUMBLE(TABLE payments,
//! DESCRIPTOR(ts), INTERVAL '5' MINUTE))`, also `HOP`, `CUMULATE`, `SESSION`) and that
//! groups by `window_start, window_end` is a windowed aggregation ([`WindowedQuery`]):
//! one row per window and group key when the window fires, computed by
//! [`crate::operator::windowed`]. [`parse`](fn@parse) tells the two shapes apart; Flink's `TABLE <name>`
//! argument is parsed by this module's dialect (`sqlparser`'s generic dialect has no
//! such argument).
//!
//! # Windows and bounds
//!
//! A window is `[PARTITION BY col, ...] ORDER BY <time column> <frame>`. `ORDER BY` must
//! name the schema's time column, ascending. No `PARTITION BY` (e.g.
//! `OVER (ORDER BY ts RANGE ...)`) is one global partition. Windows are given inline or
//! named in a `WINDOW w AS (...)` clause (`WINDOW w2 AS w1` aliases work; refining a named
//! window, `OVER (w ...)`, does not). Identical windows are shared.
//!
//! A `RANGE` frame is a time range: for the current event at time `t`, the window holds
//! the events of its partition whose time `x` lies between the two bounds. Frame offsets
//! are durations, written `INTERVAL 'n' UNIT` (`NANOSECOND`,
//! `MICROSECOND`, `MILLISECOND`, `SECOND`, `MINUTE`, `HOUR`, `DAY`, `WEEK`; `n` may be a
//! decimal such as `'1.5'` if the result is whole), `INTERVAL '5 minutes'` (also
//! `'1 hour 30 minutes'`, `'250 ms'`), or a plain non-negative integer counted in the time
//! column's unit. A duration must be a whole number of time-column units (e.g.
//! `INTERVAL '1' MILLISECOND` is an error when time is in seconds). A `ROWS` frame counts
//! rows instead (below).
//!
//! | SQL frame                                                              | window          |
//! |------------------------------------------------------------------------|-----------------|
//! | `RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW`          | `[t-5m, t]`     |
//! | `RANGE INTERVAL '5' MINUTE PRECEDING` (short form of the above)        | `[t-5m, t]`     |
//! | `RANGE BETWEEN 300 PRECEDING AND CURRENT ROW` (time in seconds)        | `[t-5m, t]`     |
//! | `RANGE BETWEEN INTERVAL '6' MINUTE PRECEDING AND INTERVAL '1' MINUTE PRECEDING` | `[t-6m, t-1m]` |
//! | `RANGE BETWEEN OPEN(INTERVAL '5' MINUTE) PRECEDING AND CURRENT ROW`    | `(t-5m, t]`     |
//! | `RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND OPEN(0) PRECEDING`    | `[t-5m, t)`     |
//! | `RANGE BETWEEN INTERVAL '6' MINUTE PRECEDING AND OPEN(INTERVAL '1' MINUTE) PRECEDING` | `[t-6m, t-1m)` |
//! | `RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW` (running total)    | `[unbounded, t]` |
//! | `RANGE UNBOUNDED PRECEDING` (short form of the above)                  | `[unbounded, t]` |
//! | `RANGE BETWEEN UNBOUNDED PRECEDING AND INTERVAL '1' MINUTE PRECEDING`  | `[unbounded, t-1m]` |
//! | `RANGE BETWEEN UNBOUNDED PRECEDING AND OPEN(0) PRECEDING`              | `[unbounded, t)` |
//! | `ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW` (the same window)   | `[unbounded, t]` |
//! | `ROWS BETWEEN 9 PRECEDING AND CURRENT ROW`                             | `rows[9 preceding, current]` |
//! | `ROWS 9 PRECEDING` (short form of the above)                           | `rows[9 preceding, current]` |
//!
//! Both SQL bounds are inclusive, as in SQL (`CURRENT ROW` is offset 0, inclusive, so it
//! includes events tied in time with the current one). `OPEN(...)` around an offset is
//! Spillway's extension that makes that bound exclusive: `(t-W, t]` is pandas'
//! `rolling(W)`, `[t-W, t)` excludes the current event and its time-ties (Railgun's
//! definition), and `[t-D-W, t-D)` is a window delayed by `D`. The start must not be
//! after the end, and a window may not be empty.
//!
//! `UNBOUNDED PRECEDING` starts the window at the partition's first event: a running
//! total that nothing ever leaves (the state holds it, the event reservoir does not).
//!
//! `ROWS BETWEEN n PRECEDING AND CURRENT ROW` holds the current event and the `n` events
//! of its partition just before it, in time order with time-ties in arrival order (as
//! PostgreSQL and Flink order peers), among the events that arrived no later than it: for
//! an event at time `t`, the last `n + 1` of the partition's events with time `<= t`.
//! A late event's window is the `n + 1` events at or before it; a later event's window
//! includes the late one if it is among its last `n + 1`. `n` is a non-negative integer
//! literal, at most [`MAX_ROWS_PRECEDING`]; `ROWS BETWEEN CURRENT ROW AND CURRENT ROW` is
//! `n = 0`. The rows are counted after the query's `WHERE`, and `FILTER (WHERE ..)`
//! chooses which of them the aggregate sees, as in SQL: `COUNT(*) FILTER (WHERE big) OVER
//! (ROWS 9 PRECEDING)` counts the big events among the last ten, not the last ten big
//! events.
//!
//! Errors, each naming the construct: `GROUPS` frames, `FOLLOWING` (windows cannot look
//! ahead), `UNBOUNDED FOLLOWING`, `UNBOUNDED PRECEDING` as a frame's end, a `ROWS` frame
//! that ends before the current row or whose offset is not an integer (`ROWS` with an
//! `INTERVAL`, `OPEN(..)`), more than [`MAX_ROWS_PRECEDING`] rows, and a missing frame
//! (SQL's default would be `RANGE UNBOUNDED PRECEDING`; Spillway asks for it explicitly).
//!
//! The result of a window for event `e` covers only events that arrived no later than
//! `e` (see the engine's semantics).

mod dialect;
mod expr;
mod input;
mod parse;
mod tvf;

use std::fmt;

pub use expr::{BinaryOp, Expr, UnaryOp};
pub use input::{check_table, column_type_hints, from_table};
pub use parse::{parse_expr, parse_query};
pub use tvf::{TvfWindow, WindowedAggregate, WindowedItem, WindowedQuery, MAX_WINDOWS_PER_EVENT};

/// A query of either shape the engine runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// Per-event metrics over sliding windows (`AGG(..) OVER w`).
    Over(QuerySpec),
    /// A windowed aggregation: a window table function in `FROM`, `GROUP BY` the window.
    Windowed(WindowedQuery),
}

/// Parses either query shape: a windowed aggregation when `FROM` is a window table
/// function (`TABLE(TUMBLE(...))`, see [`WindowedQuery`]), per-event metrics otherwise
/// ([`parse_query`]).
pub fn parse(sql: &str, schema: &crate::value::Schema) -> Result<Query, SqlError> {
    use sqlparser::ast;
    let stmts = sqlparser::parser::Parser::parse_sql(&dialect::FlinkDialect::default(), sql)
        .map_err(parse::syntax)?;
    if let [ast::Statement::Query(q)] = stmts.as_slice() {
        if let ast::SetExpr::Select(s) = &*q.body {
            if let [from] = s.from.as_slice() {
                if tvf::tvf_call(from).is_some() {
                    return tvf::windowed_query(q, s, schema).map(Query::Windowed);
                }
            }
        }
    }
    parse_query(sql, schema).map(Query::Over)
}

use crate::aggregate::AggKind;
use crate::value::{DataType, TimeUnit};

/// A parsed and validated metrics query.
#[derive(Clone, Debug, PartialEq)]
pub struct QuerySpec {
    /// Output columns, in SELECT order.
    pub items: Vec<SelectItem>,
    /// The `WHERE` condition: events for which it is not TRUE are dropped.
    pub filter: Option<Expr>,
    /// The distinct windows used by the metrics (deduplicated by equality, in order of
    /// first use).
    pub windows: Vec<WindowSpec>,
}

impl QuerySpec {
    /// Keeps only the SELECT items at positions `keep` (in that order) and the windows
    /// they use, renumbered: the part of a query one Kafka routing stage computes. An
    /// out-of-range position is an error naming it.
    pub fn retain_items(&mut self, keep: &[usize]) -> Result<(), String> {
        let n = self.items.len();
        let mut items = Vec::with_capacity(keep.len());
        for &i in keep {
            items.push(
                self.items
                    .get(i)
                    .cloned()
                    .ok_or_else(|| format!("SELECT item {i} does not exist (the query has {n})"))?,
            );
        }
        let mut renumber = vec![None; self.windows.len()];
        let mut windows = Vec::new();
        for item in &mut items {
            if let SelectItem::Metric { metric, .. } = item {
                let w = *renumber[metric.window].get_or_insert_with(|| {
                    windows.push(self.windows[metric.window].clone());
                    windows.len() - 1
                });
                metric.window = w;
            }
        }
        self.items = items;
        self.windows = windows;
        Ok(())
    }
}

/// One output column.
#[derive(Clone, Debug, PartialEq)]
pub enum SelectItem {
    /// The current event's value of an input column.
    Column {
        /// Output column name.
        name: String,
        /// Index of the input field.
        index: usize,
    },
    /// A sliding-window aggregate.
    Metric {
        /// Output column name.
        name: String,
        /// What to compute.
        metric: MetricSpec,
    },
}

impl SelectItem {
    /// The output column name.
    pub fn name(&self) -> &str {
        match self {
            SelectItem::Column { name, .. } | SelectItem::Metric { name, .. } => name,
        }
    }
}

/// An aggregate over a window.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricSpec {
    /// The aggregate function.
    pub agg: AggKind,
    /// Its argument (`None` for `COUNT(*)`). For `PERCENTILE_CONT` this is the
    /// `WITHIN GROUP (ORDER BY x)` expression; the fraction is in [`AggKind`].
    pub arg: Option<Expr>,
    /// The argument's type (`None` for `COUNT(*)`).
    pub arg_type: Option<DataType>,
    /// `FILTER (WHERE ..)`: only events for which it is TRUE enter the aggregate.
    pub filter: Option<Expr>,
    /// Index into [`QuerySpec::windows`].
    pub window: usize,
}

/// A sliding window: partitioning columns and a frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WindowSpec {
    /// Partitioning field indices, in order (empty: one global partition).
    pub partition_by: Vec<usize>,
    /// The frame.
    pub frame: Frame,
}

/// The largest `n` of `ROWS BETWEEN n PRECEDING AND CURRENT ROW`. A late event's result
/// may read back up to `n` kept rows of its partition (see [`crate::operator::over`]), so `n`
/// bounds that work.
pub const MAX_ROWS_PRECEDING: u64 = 100_000;

/// Which events of the current event's partition a window holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// `RANGE`: the events whose time lies between two bounds relative to the current
    /// event's time.
    Range(RangeFrame),
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the current event and the `n` events
    /// of its partition just before it in (time, arrival) order.
    Rows {
        /// `n`, at most [`MAX_ROWS_PRECEDING`].
        preceding: u64,
    },
}

/// A `RANGE` frame relative to the current event's time `t`, in the schema's time unit.
///
/// An event at time `x` of the current event's partition is in the window iff
/// `t - start <= x` (`<` if `start_open`; no lower bound when `start` is `None`) and
/// `x <= t - end` (`<` if `end_open`). Always `start >= end >= 0`, and the window is
/// never empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RangeFrame {
    /// Offset of the oldest bound (`t - start`); `None` for `UNBOUNDED PRECEDING`.
    pub start: Option<i64>,
    /// True when the start bound is exclusive (always false when unbounded).
    pub start_open: bool,
    /// Offset of the newest bound (`t - end`).
    pub end: i64,
    /// True when the end bound is exclusive.
    pub end_open: bool,
}

impl RangeFrame {
    /// True when an event at time `x` is in the window of an event at time `t`.
    pub fn contains(&self, t: i64, x: i64) -> bool {
        let hi = i128::from(t) - i128::from(self.end);
        let x = i128::from(x);
        let after_start = match self.start {
            None => true,
            Some(start) => {
                let lo = i128::from(t) - i128::from(start);
                if self.start_open {
                    lo < x
                } else {
                    lo <= x
                }
            }
        };
        after_start && (if self.end_open { x < hi } else { x <= hi })
    }
}

impl Frame {
    /// The bounded `RANGE` frame `[t-start, t-end]`, each bound exclusive when `*_open`.
    pub fn range(start: i64, start_open: bool, end: i64, end_open: bool) -> Frame {
        Frame::Range(RangeFrame { start: Some(start), start_open, end, end_open })
    }

    /// `RANGE BETWEEN UNBOUNDED PRECEDING AND ..`: `[unbounded, t-end]` (`)` if `end_open`).
    pub fn unbounded(end: i64, end_open: bool) -> Frame {
        Frame::Range(RangeFrame { start: None, start_open: false, end, end_open })
    }

    /// `ROWS BETWEEN preceding PRECEDING AND CURRENT ROW`.
    pub fn rows(preceding: u64) -> Frame {
        Frame::Rows { preceding }
    }

    /// Offset of the newest bound behind the current event's time: the `RANGE` end, 0
    /// for `ROWS` (which ends at the current row).
    pub fn end(&self) -> i64 {
        match self {
            Frame::Range(r) => r.end,
            Frame::Rows { .. } => 0,
        }
    }

    /// Renders the frame with durations in `unit`, e.g. `[t-5m, t]`, `(t-6m, t-1m)`,
    /// `[unbounded, t]` or `rows[9 preceding, current]`.
    pub fn display(&self, unit: TimeUnit) -> impl fmt::Display + '_ {
        FrameDisplay { frame: self, unit: Some(unit) }
    }
}

impl fmt::Display for Frame {
    /// Renders offsets as raw time-unit counts, e.g. `[t-300, t]`; see [`Frame::display`]
    /// for durations.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        FrameDisplay { frame: self, unit: None }.fmt(f)
    }
}

struct FrameDisplay<'a> {
    frame: &'a Frame,
    unit: Option<TimeUnit>,
}

fn write_offset(f: &mut fmt::Formatter<'_>, off: i64, unit: Option<TimeUnit>) -> fmt::Result {
    if off == 0 {
        return f.write_str("t");
    }
    let Some(unit) = unit else {
        return write!(f, "t-{off}");
    };
    write!(f, "t-{}", crate::duration::display(off, unit))
}

impl fmt::Display for FrameDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fr = match self.frame {
            Frame::Range(r) => r,
            Frame::Rows { preceding } => return write!(f, "rows[{preceding} preceding, current]"),
        };
        match fr.start {
            None => f.write_str("[unbounded")?,
            Some(start) => {
                f.write_str(if fr.start_open { "(" } else { "[" })?;
                write_offset(f, start, self.unit)?;
            }
        }
        f.write_str(", ")?;
        write_offset(f, fr.end, self.unit)?;
        f.write_str(if fr.end_open { ")" } else { "]" })
    }
}

/// A position in the query text (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: u64,
    /// Column, from 1.
    pub column: u64,
}

/// Converts a `sqlparser` span to its start location (`None` for an empty span).
pub(crate) fn loc(span: sqlparser::tokenizer::Span) -> Option<Location> {
    (span.start.line > 0).then_some(Location { line: span.start.line, column: span.start.column })
}

/// Why a query was rejected.
#[derive(Clone, Debug, PartialEq)]
pub enum SqlError {
    /// The text is not valid SQL (message from the parser, with line and column).
    Syntax(String),
    /// Valid SQL that Spillway does not support.
    Unsupported {
        /// The offending construct, quoted from the query.
        construct: String,
        /// What is supported instead.
        supported: String,
        /// Where it starts, when known.
        at: Option<Location>,
    },
    /// A column name that is not in the input schema.
    UnknownColumn {
        /// The name as written.
        name: String,
        /// The schema's columns.
        available: Vec<String>,
        /// Where it is used.
        at: Option<Location>,
    },
    /// `OVER w` with no `WINDOW w AS (...)`.
    UnknownWindow {
        /// The name as written.
        name: String,
        /// Names defined in the WINDOW clause.
        defined: Vec<String>,
        /// Where it is used.
        at: Option<Location>,
    },
    /// A type mismatch (e.g. comparing a string with a number, `SUM` of a string).
    Type {
        /// The offending expression.
        construct: String,
        /// What was found and what was expected.
        message: String,
        /// Where it starts, when known.
        at: Option<Location>,
    },
    /// Any other invalid construct (bad frame, percentile out of range, ...).
    Invalid {
        /// The offending construct.
        construct: String,
        /// What is wrong and what was expected.
        message: String,
        /// Where it starts, when known.
        at: Option<Location>,
    },
    /// `FROM name` names another table than the input (see [`check_table`]).
    UnknownTable {
        /// The name after FROM, as written.
        name: String,
        /// The input's table name.
        table: String,
        /// Where the name is.
        at: Option<Location>,
    },
    /// Two output columns with the same name.
    DuplicateOutput {
        /// The repeated name.
        name: String,
    },
}

fn write_at(f: &mut fmt::Formatter<'_>, at: &Option<Location>) -> fmt::Result {
    match at {
        Some(l) => write!(f, "line {}, column {}: ", l.line, l.column),
        None => Ok(()),
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlError::Syntax(m) => write!(f, "SQL syntax error: {m}"),
            SqlError::Unsupported { construct, supported, at } => {
                write_at(f, at)?;
                write!(f, "{construct} is not supported; supported: {supported}")
            }
            SqlError::UnknownColumn { name, available, at } => {
                write_at(f, at)?;
                write!(f, "unknown column `{name}`; available columns: {}", available.join(", "))
            }
            SqlError::UnknownWindow { name, defined, at } => {
                write_at(f, at)?;
                if defined.is_empty() {
                    write!(f, "unknown window `{name}`: the query has no WINDOW clause")
                } else {
                    write!(f, "unknown window `{name}`; defined windows: {}", defined.join(", "))
                }
            }
            SqlError::Type { construct, message, at } => {
                write_at(f, at)?;
                write!(f, "type error in `{construct}`: {message}")
            }
            SqlError::Invalid { construct, message, at } => {
                write_at(f, at)?;
                write!(f, "invalid `{construct}`: {message}")
            }
            SqlError::UnknownTable { name, table, at } => {
                write_at(f, at)?;
                write!(f, "FROM `{name}`: no such table; the input is the table `{table}`")
            }
            SqlError::DuplicateOutput { name } => write!(
                f,
                "output column `{name}` appears twice; give one of them a different alias with \
                 AS"
            ),
        }
    }
}

impl std::error::Error for SqlError {}

#[cfg(test)]
mod tests;
