//! Windowed aggregation: Flink SQL's window table-valued functions (TVFs) in `FROM`,
//! grouped by the window. Translates
//!
//! ```sql
//! SELECT card, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s
//! FROM TABLE(TUMBLE(TABLE payments, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
//! GROUP BY card, window_start, window_end
//! ```
//!
//! into a [`WindowedQuery`]. The four functions take their arguments in Flink's order:
//!
//! | function | windows of an event at time `t` |
//! |---|---|
//! | `TUMBLE(TABLE t, DESCRIPTOR(ts), size [, offset])` | the one `[s, s+size)` with `s - offset` a multiple of `size` |
//! | `HOP(TABLE t, DESCRIPTOR(ts), slide, size [, offset])` | every `[s, s+size)` holding `t`, `s - offset` a multiple of `slide` |
//! | `CUMULATE(TABLE t, DESCRIPTOR(ts), step, size [, offset])` | `[s, e)` for `s` the latest start at or before `t` with `s - offset` a multiple of `size`, and every `e = s + k*step > t`, `e <= s + size` |
//! | `SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), gap)` | per key, `[first, last + gap)` of a run of events less than `gap` apart |
//!
//! Windows are aligned to the epoch (time 0) moved by the optional `offset`, as Flink's
//! slice assigners do (`SliceAssigners.TumblingSliceAssigner`, `HoppingSliceAssigner`
//! and `CumulativeSliceAssigner`, through `TimeWindow.getWindowStartWithOffset`): daily
//! windows of a time zone 8 hours behind UTC are `TUMBLE(.., INTERVAL '1' DAY, INTERVAL
//! '8' HOUR)`. The offset may be negative (`INTERVAL '-1' HOUR` or `-INTERVAL '1' HOUR`);
//! `TUMBLE` needs `|offset| < size`, as Flink checks; `HOP` and `CUMULATE` take any offset
//! (only its remainder by the slide, or the size, matters). `HOP` needs `size` to be a
//! multiple of `slide` and `CUMULATE` `size` a multiple of `step`, as Flink's assigners
//! do. Sizes are durations as in frames (`INTERVAL '5' MINUTE`, `INTERVAL '5 minutes'`
//! or an integer in the time column's unit).
//!
//! `GROUP BY` must list `window_start` and `window_end` and may list input columns (the
//! group key); `SESSION`'s `PARTITION BY` columns must be exactly the group key. The
//! `SELECT` list holds group-key columns, `window_start`, `window_end`, `window_time`
//! (`window_end - 1`, Flink's rowtime of the result) and aggregates without `OVER`
//! (the engine's aggregates, each with an optional `FILTER (WHERE ..)`). `WHERE` drops
//! events before windowing. Firing, lateness and the output convention are the runtime's:
//! see [`crate::operator::windowed`].

use sqlparser::ast;
use sqlparser::ast::Spanned;

use super::dialect::PARTITION_BY_OP;
use super::expr::{compile_predicate, Scope};
use super::parse::{
    aggregate_call, check_clauses, check_query, interval_nanos, invalid, select_list, unsupported,
    AggCall, Over,
};
use super::{loc, Expr, SqlError};
use crate::aggregate::AggKind;
use crate::value::{DataType, Schema};

const SUPPORTED_TVF: &str = "SELECT <group columns, window_start, window_end, window_time, \
     aggregates> FROM TABLE(TUMBLE|HOP|CUMULATE|SESSION(TABLE <stream>, DESCRIPTOR(<time \
     column>), <durations>)) [WHERE <condition>] GROUP BY <columns>, window_start, window_end";

/// Most windows one event may fall in (`HOP` size / slide, `CUMULATE` size / step).
pub const MAX_WINDOWS_PER_EVENT: i64 = 10_000;

/// The windows a window table function assigns, in the time column's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TvfWindow {
    /// `TUMBLE(.., size [, offset])`.
    Tumble {
        /// Window length.
        size: i64,
        /// Where windows start, from the epoch (`|offset| < size`).
        offset: i64,
    },
    /// `HOP(.., slide, size [, offset])`.
    Hop {
        /// Distance between window starts.
        slide: i64,
        /// Window length (a multiple of `slide`).
        size: i64,
        /// Where windows start, from the epoch.
        offset: i64,
    },
    /// `CUMULATE(.., step, size [, offset])`.
    Cumulate {
        /// Distance between window ends.
        step: i64,
        /// Length of the largest window (a multiple of `step`).
        size: i64,
        /// Where the largest windows start, from the epoch.
        offset: i64,
    },
    /// `SESSION(.., gap)`.
    Session {
        /// Windows closer than this merge.
        gap: i64,
    },
}

impl TvfWindow {
    /// The function's name.
    pub fn name(&self) -> &'static str {
        match self {
            TvfWindow::Tumble { .. } => "TUMBLE",
            TvfWindow::Hop { .. } => "HOP",
            TvfWindow::Cumulate { .. } => "CUMULATE",
            TvfWindow::Session { .. } => "SESSION",
        }
    }
}

/// An aggregate of a windowed `GROUP BY`.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowedAggregate {
    /// The function.
    pub agg: AggKind,
    /// Its argument (`None` for `COUNT(*)`).
    pub arg: Option<Expr>,
    /// The argument's type.
    pub arg_type: Option<DataType>,
    /// `FILTER (WHERE ..)`.
    pub filter: Option<Expr>,
}

/// One output column of a windowed aggregation.
#[derive(Clone, Debug, PartialEq)]
pub enum WindowedItem {
    /// A group-key column.
    Column {
        /// Output name.
        name: String,
        /// Input field index.
        index: usize,
    },
    /// `window_start`.
    WindowStart {
        /// Output name.
        name: String,
    },
    /// `window_end`.
    WindowEnd {
        /// Output name.
        name: String,
    },
    /// `window_time` (`window_end - 1`).
    WindowTime {
        /// Output name.
        name: String,
    },
    /// An aggregate over the group's events in the window.
    Aggregate {
        /// Output name.
        name: String,
        /// The aggregate.
        aggregate: WindowedAggregate,
    },
}

impl WindowedItem {
    /// The output column name.
    pub fn name(&self) -> &str {
        match self {
            WindowedItem::Column { name, .. }
            | WindowedItem::WindowStart { name }
            | WindowedItem::WindowEnd { name }
            | WindowedItem::WindowTime { name }
            | WindowedItem::Aggregate { name, .. } => name,
        }
    }
}

/// A parsed and validated windowed aggregation.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowedQuery {
    /// The table the window function reads (`TABLE <name>`).
    pub table: String,
    /// The windows.
    pub window: TvfWindow,
    /// The group key: input field indices (for `SESSION`, also its `PARTITION BY`).
    pub group_by: Vec<usize>,
    /// `WHERE`: events for which it is not TRUE are dropped before windowing.
    pub filter: Option<Expr>,
    /// Output columns in SELECT order.
    pub items: Vec<WindowedItem>,
}

/// The window columns a TVF adds to its table.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WindowColumn {
    Start,
    End,
    Time,
}

fn window_column(e: &ast::Expr) -> Option<WindowColumn> {
    let id = match e {
        ast::Expr::Identifier(id) => id,
        ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => &parts[1],
        ast::Expr::Nested(inner) => return window_column(inner),
        _ => return None,
    };
    match id.value.to_ascii_lowercase().as_str() {
        "window_start" => Some(WindowColumn::Start),
        "window_end" => Some(WindowColumn::End),
        "window_time" => Some(WindowColumn::Time),
        _ => None,
    }
}

/// The window table function call in `from`, if that is what it is.
pub(super) fn tvf_call(from: &ast::TableWithJoins) -> Option<&ast::Function> {
    match &from.relation {
        ast::TableFactor::TableFunction { expr: ast::Expr::Function(f), .. } => Some(f),
        _ => None,
    }
}

/// The table name inside a window function call (`TABLE <name> [PARTITION BY ..]`) and
/// where it is.
pub(super) fn tvf_table(f: &ast::Function) -> Option<(String, Option<super::Location>)> {
    let ast::FunctionArguments::List(list) = &f.args else { return None };
    let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Prefixed {
        prefix,
        value,
    }))) = list.args.first()
    else {
        return None;
    };
    if !prefix.value.eq_ignore_ascii_case("table") {
        return None;
    }
    let name: &ast::Expr = match &**value {
        ast::Expr::BinaryOp { left, .. } => left,
        other => other,
    };
    match name {
        ast::Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| (i.value.clone(), loc(i.span)))
        }
        ast::Expr::Identifier(i) => Some((i.value.clone(), loc(i.span))),
        _ => None,
    }
}

/// Translates a SELECT whose FROM is a window table function.
pub(super) fn windowed_query(
    query: &ast::Query,
    select: &ast::Select,
    schema: &Schema,
) -> Result<WindowedQuery, SqlError> {
    check_query(query)?;
    check_clauses(select, SUPPORTED_TVF)?;
    let span = select.span();
    if let Some(h) = &select.having {
        return Err(unsupported(format!("HAVING `{h}`"), SUPPORTED_TVF, h.span()));
    }
    let [from] = select.from.as_slice() else {
        return Err(unsupported("several tables in FROM (joins)".into(), SUPPORTED_TVF, span));
    };
    if let Some(j) = from.joins.first() {
        return Err(unsupported(format!("join `{j}`"), SUPPORTED_TVF, j.relation.span()));
    }
    let f = tvf_call(from).expect("caller checked the window function");
    let fspan = from.relation.span();
    for c in schema.fields() {
        if matches!(
            c.name.to_ascii_lowercase().as_str(),
            "window_start" | "window_end" | "window_time"
        ) {
            return Err(invalid(
                &from.relation,
                format!(
                    "the input has a column `{}`, which the window function's own column of \
                     that name would hide; rename it in the input",
                    c.name
                ),
                fspan,
            ));
        }
    }
    let (table, partition, time_col, durations) = tvf_args(f, &from.relation)?;
    let mut qualifiers = vec![table.clone()];
    if let ast::TableFactor::TableFunction { alias: Some(a), .. } = &from.relation {
        qualifiers.push(a.name.value.clone());
    }
    let scope = Scope { schema, qualifiers };

    // DESCRIPTOR(ts) names the time column.
    let time_index = schema.time_index();
    match scope.column_ref(time_col) {
        Some(Ok(c)) if c.as_column() == Some(time_index) => {}
        Some(Err(e)) => return Err(e),
        _ => {
            return Err(invalid(
                time_col,
                format!(
                    "DESCRIPTOR must name the time column `{}`",
                    schema.fields()[time_index].name
                ),
                time_col.span(),
            ))
        }
    }
    let fname = f.name.to_string().to_ascii_uppercase();
    let dur = |e: &ast::Expr, what: &str| duration(e, what, &fname, schema);
    // The optional last argument: an offset of the windows' alignment, 0 without it.
    let offset_of = |o: Option<&&ast::Expr>| match o {
        Some(e) => signed_duration(e, "offset", &fname, schema),
        None => Ok(0),
    };
    let window = match (fname.as_str(), durations.as_slice()) {
        ("TUMBLE", [size, offset @ ..]) if offset.len() <= 1 => {
            let (size_v, offset_v) = (dur(size, "size")?, offset_of(offset.first())?);
            if offset_v.unsigned_abs() >= size_v.unsigned_abs() {
                // TumblingSliceAssigner's check.
                return Err(invalid(
                    f,
                    format!(
                        "TUMBLE needs an offset smaller than the size in absolute value (as \
                         Flink does); offset {} is not within size {size}",
                        offset[0]
                    ),
                    fspan,
                ));
            }
            TvfWindow::Tumble { size: size_v, offset: offset_v }
        }
        ("HOP", [slide, size, offset @ ..]) if offset.len() <= 1 => {
            let (slide_v, size_v) = (dur(slide, "slide")?, dur(size, "size")?);
            if size_v % slide_v != 0 {
                return Err(invalid(
                    f,
                    format!(
                        "HOP needs a size that is a whole multiple of the slide (as Flink's \
                         window aggregation does); size {size} is not a multiple of slide \
                         {slide}"
                    ),
                    fspan,
                ));
            }
            TvfWindow::Hop { slide: slide_v, size: size_v, offset: offset_of(offset.first())? }
        }
        ("CUMULATE", [step, size, offset @ ..]) if offset.len() <= 1 => {
            let (step_v, size_v) = (dur(step, "step")?, dur(size, "size")?);
            if size_v % step_v != 0 {
                return Err(invalid(
                    f,
                    format!(
                        "CUMULATE needs a max size that is a whole multiple of the step (as \
                         Flink does); size {size} is not a multiple of step {step}"
                    ),
                    fspan,
                ));
            }
            TvfWindow::Cumulate { step: step_v, size: size_v, offset: offset_of(offset.first())? }
        }
        ("SESSION", [gap]) => TvfWindow::Session { gap: dur(gap, "gap")? },
        (name, args) => {
            let want = match name {
                "TUMBLE" => "a size and an optional offset",
                "SESSION" => "a gap",
                "HOP" => "a slide, a size and an optional offset",
                _ => "a step, a size and an optional offset",
            };
            return Err(invalid(
                f,
                format!(
                    "{name} takes TABLE <stream>, DESCRIPTOR(<time column>) and {want}; found \
                     {} after the descriptor",
                    args.len()
                ),
                fspan,
            ));
        }
    };
    let per_event = match window {
        TvfWindow::Hop { slide, size, .. } => size / slide,
        TvfWindow::Cumulate { step, size, .. } => size / step,
        _ => 1,
    };
    if per_event > MAX_WINDOWS_PER_EVENT {
        return Err(invalid(
            f,
            format!(
                "every event would fall in {per_event} windows; at most \
                 {MAX_WINDOWS_PER_EVENT} are supported (use a larger slide or step)"
            ),
            fspan,
        ));
    }
    let mut session_keys = Vec::new();
    if let Some(p) = partition {
        if !matches!(window, TvfWindow::Session { .. }) {
            return Err(unsupported(
                format!("PARTITION BY in {fname}"),
                "PARTITION BY only in SESSION",
                p.span(),
            ));
        }
        let keys: Vec<&ast::Expr> = match p {
            ast::Expr::Tuple(v) => v.iter().collect(),
            ast::Expr::Nested(inner) => vec![&**inner],
            other => vec![other],
        };
        for k in keys {
            match scope.column_ref(k) {
                Some(c) => {
                    let i = c?.as_column().expect("a column reference");
                    if !session_keys.contains(&i) {
                        session_keys.push(i);
                    }
                }
                None => {
                    return Err(unsupported(
                        format!("PARTITION BY expression `{k}`"),
                        "PARTITION BY column names",
                        k.span(),
                    ))
                }
            }
        }
    }

    // GROUP BY: window_start, window_end and input columns.
    let ast::GroupByExpr::Expressions(exprs, mods) = &select.group_by else {
        return Err(unsupported("GROUP BY ALL".into(), SUPPORTED_TVF, span));
    };
    if !mods.is_empty() {
        return Err(unsupported(format!("GROUP BY modifier `{}`", mods[0]), SUPPORTED_TVF, span));
    }
    let (mut has_start, mut has_end) = (false, false);
    let mut group_by = Vec::new();
    for g in exprs {
        match window_column(g) {
            Some(WindowColumn::Start) => has_start = true,
            Some(WindowColumn::End) => has_end = true,
            Some(WindowColumn::Time) => {}
            None => match scope.column_ref(g) {
                Some(c) => {
                    let i = c?.as_column().expect("a column reference");
                    if !group_by.contains(&i) {
                        group_by.push(i);
                    }
                }
                None => {
                    return Err(unsupported(
                        format!("GROUP BY expression `{g}`"),
                        "GROUP BY input columns, window_start and window_end",
                        g.span(),
                    ))
                }
            },
        }
    }
    if !(has_start && has_end) {
        return Err(invalid(
            "GROUP BY",
            format!(
                "a windowed aggregation must GROUP BY window_start and window_end (missing: \
                 {})",
                [(!has_start).then_some("window_start"), (!has_end).then_some("window_end")]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            span,
        ));
    }
    if matches!(window, TvfWindow::Session { .. }) {
        let mut a = session_keys.clone();
        let mut b = group_by.clone();
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            let names = |v: &[usize]| {
                if v.is_empty() {
                    "(none)".to_string()
                } else {
                    v.iter()
                        .map(|&i| schema.fields()[i].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            return Err(unsupported(
                format!(
                    "SESSION partitioned by {} with GROUP BY columns {}",
                    names(&session_keys),
                    names(&group_by)
                ),
                "SESSION(TABLE t PARTITION BY <the GROUP BY columns>, ...): sessions per group \
                 key",
                fspan,
            ));
        }
    }

    let filter =
        select.selection.as_ref().map(|w| compile_predicate(w, &scope, "WHERE")).transpose()?;

    let items = select_list(
        select,
        "group columns, window_start, window_end, window_time and aggregates, each listed \
         by name",
        WindowedItem::name,
        |e, alias| windowed_item(e, alias, &scope, &group_by),
    )?;
    Ok(WindowedQuery { table, window, group_by, filter, items })
}

fn windowed_item(
    e: &ast::Expr,
    alias: Option<String>,
    scope: &Scope<'_>,
    group_by: &[usize],
) -> Result<WindowedItem, SqlError> {
    if let Some(w) = window_column(e) {
        let name = alias.unwrap_or_else(|| {
            match w {
                WindowColumn::Start => "window_start",
                WindowColumn::End => "window_end",
                WindowColumn::Time => "window_time",
            }
            .to_string()
        });
        return Ok(match w {
            WindowColumn::Start => WindowedItem::WindowStart { name },
            WindowColumn::End => WindowedItem::WindowEnd { name },
            WindowColumn::Time => WindowedItem::WindowTime { name },
        });
    }
    if let Some(col) = scope.column_ref(e) {
        let col = col?;
        let Expr::Column { index, name, .. } = &col else {
            return Err(invalid(e, "expected a column reference".into(), e.span()));
        };
        if !group_by.contains(index) {
            return Err(invalid(
                e,
                format!(
                    "column `{name}` is neither in GROUP BY nor inside an aggregate (add it to \
                     GROUP BY, or aggregate it, e.g. FIRST_VALUE({name}))"
                ),
                e.span(),
            ));
        }
        return Ok(WindowedItem::Column { name: alias.unwrap_or(name.to_string()), index: *index });
    }
    match e {
        ast::Expr::Nested(inner) => windowed_item(inner, alias, scope, group_by),
        ast::Expr::Function(f) => {
            let AggCall { agg, arg, arg_type, filter, name } =
                aggregate_call(f, e, scope, Over::Forbidden)?;
            Ok(WindowedItem::Aggregate {
                name: alias.unwrap_or(name),
                aggregate: WindowedAggregate { agg, arg, arg_type, filter },
            })
        }
        _ => Err(unsupported(
            format!("scalar expression `{e}` in the SELECT list"),
            "group columns, window columns and aggregates (use FILTER (WHERE ..) or an \
             aggregate argument expression instead)",
            e.span(),
        )),
    }
}

type TvfArgs<'a> = (String, Option<&'a ast::Expr>, &'a ast::Expr, Vec<&'a ast::Expr>);

/// Splits a window function's arguments: table name, `PARTITION BY` keys, the
/// descriptor's column and the durations after it.
fn tvf_args<'a>(
    f: &'a ast::Function,
    relation: &ast::TableFactor,
) -> Result<TvfArgs<'a>, SqlError> {
    let span = relation.span();
    let fname = f.name.to_string().to_ascii_uppercase();
    if !matches!(fname.as_str(), "TUMBLE" | "HOP" | "CUMULATE" | "SESSION") {
        return Err(unsupported(
            format!("table function `{}`", f.name),
            "the window table functions TUMBLE, HOP, CUMULATE and SESSION",
            span,
        ));
    }
    let shape = || {
        invalid(
            f,
            format!(
                "{fname} takes TABLE <stream>, DESCRIPTOR(<time column>) and its durations, \
                 positionally"
            ),
            span,
        )
    };
    let ast::FunctionArguments::List(list) = &f.args else { return Err(shape()) };
    let mut args = Vec::new();
    for a in &list.args {
        match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) => args.push(x),
            other => {
                return Err(unsupported(
                    format!("argument `{other}` of {fname}"),
                    "positional arguments",
                    span,
                ))
            }
        }
    }
    let [table_arg, descriptor, rest @ ..] = args.as_slice() else { return Err(shape()) };
    let ast::Expr::Prefixed { prefix, value } = table_arg else { return Err(shape()) };
    if !prefix.value.eq_ignore_ascii_case("table") {
        return Err(shape());
    }
    let (name, partition) = match &**value {
        ast::Expr::BinaryOp { left, op: ast::BinaryOperator::Custom(op), right }
            if op == PARTITION_BY_OP =>
        {
            (&**left, Some(&**right))
        }
        other => (other, None),
    };
    let table = match name {
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
        ast::Expr::Identifier(i) => Some(i.value.clone()),
        _ => None,
    }
    .ok_or_else(shape)?;
    let time_col = match descriptor {
        ast::Expr::Function(d) if d.name.to_string().eq_ignore_ascii_case("descriptor") => {
            match &d.args {
                ast::FunctionArguments::List(l) => match l.args.as_slice() {
                    [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(c))] => c,
                    _ => return Err(shape()),
                },
                _ => return Err(shape()),
            }
        }
        _ => return Err(shape()),
    };
    Ok((table, partition, time_col, rest.to_vec()))
}

/// A window duration: a positive interval or integer in the time column's unit.
fn duration(e: &ast::Expr, what: &str, fname: &str, schema: &Schema) -> Result<i64, SqlError> {
    let span = e.span();
    let unit = schema.time_unit();
    let unit_name = unit.name();
    let n: i64 = match e {
        ast::Expr::Nested(inner) => return duration(inner, what, fname, schema),
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => text.parse().map_err(|_| {
                invalid(
                    e,
                    format!(
                        "the {what} of {fname} must be an INTERVAL or a whole number of \
                         {unit_name} (the time column's unit)"
                    ),
                    span,
                )
            })?,
            _ => {
                return Err(invalid(
                    e,
                    format!("the {what} of {fname} must be an INTERVAL or an integer"),
                    span,
                ))
            }
        },
        ast::Expr::Interval(iv) => {
            let nanos = interval_nanos(iv, e)?;
            let u = i128::from(unit.nanos());
            if nanos % u != 0 {
                return Err(invalid(
                    e,
                    format!(
                        "the {what} is not a whole number of {unit_name} (the time column's \
                         unit)"
                    ),
                    span,
                ));
            }
            i64::try_from(nanos / u)
                .map_err(|_| invalid(e, format!("the {what} is too large"), span))?
        }
        _ => {
            return Err(invalid(
                e,
                format!("the {what} of {fname} must be an INTERVAL or an integer"),
                span,
            ))
        }
    };
    if n <= 0 {
        return Err(invalid(e, format!("the {what} of {fname} must be positive"), span));
    }
    Ok(n)
}

/// A duration that may be zero or negative (a window offset): `-INTERVAL '1' HOUR`,
/// `INTERVAL '-1' HOUR`, `-5` or `0` as well as the positive forms of [`duration`].
fn signed_duration(
    e: &ast::Expr,
    what: &str,
    fname: &str,
    schema: &Schema,
) -> Result<i64, SqlError> {
    match e {
        ast::Expr::Nested(inner) => signed_duration(inner, what, fname, schema),
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, expr } => {
            Ok(-signed_duration(expr, what, fname, schema)?)
        }
        ast::Expr::Value(v) if matches!(&v.value, ast::Value::Number(t, _) if t.trim() == "0") => {
            Ok(0)
        }
        ast::Expr::Interval(iv) => {
            // A sign inside the quotes (Calcite's INTERVAL '-1' HOUR) applies to the amount.
            let text = match &*iv.value {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(t) => Some(t.trim()),
                    _ => None,
                },
                _ => None,
            };
            if text == Some("0") {
                return Ok(0);
            }
            let bad = |_| {
                invalid(
                    e,
                    format!(
                        "the {what} of {fname} must be a whole number of the time column's \
                         unit, positive or negative, e.g. INTERVAL '10' MINUTE or INTERVAL \
                         '-10' MINUTE"
                    ),
                    e.span(),
                )
            };
            match text.and_then(|t| t.strip_prefix('-')) {
                Some(amount) => {
                    let mut positive = iv.clone();
                    positive.value = Box::new(ast::Expr::Value(
                        ast::Value::SingleQuotedString(amount.to_string()).into(),
                    ));
                    Ok(-duration(&ast::Expr::Interval(positive), what, fname, schema)
                        .map_err(bad)?)
                }
                None => duration(e, what, fname, schema).map_err(bad),
            }
        }
        _ => duration(e, what, fname, schema),
    }
}
