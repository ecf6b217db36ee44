//! Query translation: walks the `sqlparser` AST of one SELECT statement, rejects what
//! Spillway does not support, and builds the [`QuerySpec`] (items, metrics, windows,
//! frames).

use std::collections::HashMap;

use sqlparser::ast;
use sqlparser::ast::Spanned;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

use super::dialect::FlinkDialect;
use super::expr::{compile, compile_predicate, Scope};
use super::{
    loc, Expr, Frame, MetricSpec, QuerySpec, SelectItem, SqlError, WindowSpec, MAX_ROWS_PRECEDING,
};
use crate::aggregate::AggKind;
use crate::value::{DataType, Schema, Value};

const SUPPORTED_QUERY: &str = "SELECT <columns and aggregates OVER windows> FROM <stream> \
     [WHERE <condition>] [WINDOW <name> AS (<window>), ...]";

const SUPPORTED_AGGS: &str = "COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, AVG, MIN, MAX, \
     STDDEV_SAMP/STDDEV, VAR_SAMP/VARIANCE, MEDIAN, PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY \
     x), FIRST_VALUE, LAST_VALUE, each with OVER <window>";

const SUPPORTED_FRAME: &str = "RANGE BETWEEN <offset> PRECEDING AND CURRENT ROW, RANGE BETWEEN \
     <offset> PRECEDING AND <offset> PRECEDING, RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT \
     ROW (or AND <offset> PRECEDING), where <offset> is INTERVAL 'n' UNIT, an integer in the \
     time column's unit, or OPEN(<offset>) for an exclusive bound; ROWS BETWEEN <n> PRECEDING \
     AND CURRENT ROW with an integer 0 <= n <= 100000";

/// True for the names of the aggregates Spillway computes.
pub(crate) fn is_aggregate_name(lower: &str) -> bool {
    matches!(
        lower,
        "count"
            | "sum"
            | "avg"
            | "min"
            | "max"
            | "stddev"
            | "stddev_samp"
            | "variance"
            | "var_samp"
            | "median"
            | "percentile_cont"
            | "first_value"
            | "last_value"
    )
}

pub(super) fn unsupported(
    construct: String,
    supported: &str,
    span: sqlparser::tokenizer::Span,
) -> SqlError {
    SqlError::Unsupported { construct, supported: supported.to_string(), at: loc(span) }
}

pub(super) fn invalid(
    construct: impl ToString,
    message: String,
    span: sqlparser::tokenizer::Span,
) -> SqlError {
    SqlError::Invalid { construct: construct.to_string(), message, at: loc(span) }
}

pub(super) fn syntax(e: sqlparser::parser::ParserError) -> SqlError {
    let text = e.to_string();
    SqlError::Syntax(text.strip_prefix("sql parser error: ").unwrap_or(&text).to_string())
}

/// Parses a standalone scalar expression (e.g. a command-line filter) against `schema`.
pub fn parse_expr(sql: &str, schema: &Schema) -> Result<Expr, SqlError> {
    let dialect = FlinkDialect::default();
    let mut parser = Parser::new(&dialect).try_with_sql(sql).map_err(syntax)?;
    let e = parser.parse_expr().map_err(syntax)?;
    let next = parser.peek_token();
    if next.token != Token::EOF {
        return Err(SqlError::Syntax(format!(
            "unexpected `{}` after the expression at {}",
            next.token, next.span.start
        )));
    }
    compile(&e, &Scope { schema, qualifiers: Vec::new() })
}

/// Parses and validates a metrics query against the input schema.
pub fn parse_query(sql: &str, schema: &Schema) -> Result<QuerySpec, SqlError> {
    let dialect = FlinkDialect::default();
    let stmts = Parser::parse_sql(&dialect, sql).map_err(syntax)?;
    let stmt = match stmts.as_slice() {
        [one] => one,
        [] => {
            return Err(SqlError::Syntax("expected one SELECT statement, found none".into()));
        }
        many => {
            return Err(SqlError::Syntax(format!(
                "expected one SELECT statement, found {}",
                many.len()
            )));
        }
    };
    let ast::Statement::Query(query) = stmt else {
        let text = stmt.to_string();
        let word = text.split_whitespace().next().unwrap_or("").to_string();
        return Err(unsupported(format!("statement `{word} ...`"), SUPPORTED_QUERY, stmt.span()));
    };
    check_query(query)?;
    let ast::SetExpr::Select(select) = &*query.body else {
        return Err(unsupported(
            format!("query body `{}`", query.body),
            SUPPORTED_QUERY,
            query.body.span(),
        ));
    };
    let qualifiers = check_select(select)?;
    let scope = Scope { schema, qualifiers };

    let filter =
        select.selection.as_ref().map(|w| compile_predicate(w, &scope, "WHERE")).transpose()?;

    let named = NamedWindows::new(&select.named_window, &scope)?;
    let mut windows: Vec<WindowSpec> = Vec::new();
    let items = select_list(
        select,
        "plain columns and aggregates with OVER, each listed by name",
        SelectItem::name,
        |e, alias| select_item(e, alias, &scope, &named, &mut windows),
    )?;
    Ok(QuerySpec { items, filter, windows })
}

/// Compiles the SELECT list with `item` (expression, alias): each item must be an
/// expression (`listable` says what may be listed), the list must not be empty and no two
/// output names may be equal (compared case-insensitively).
pub(super) fn select_list<T>(
    select: &ast::Select,
    listable: &str,
    name: fn(&T) -> &str,
    mut item: impl FnMut(&ast::Expr, Option<String>) -> Result<T, SqlError>,
) -> Result<Vec<T>, SqlError> {
    if select.projection.is_empty() {
        return Err(SqlError::Invalid {
            construct: "SELECT".into(),
            message: "the SELECT list is empty".into(),
            at: None,
        });
    }
    let mut items: Vec<T> = Vec::new();
    for it in &select.projection {
        let (e, alias) = match it {
            ast::SelectItem::UnnamedExpr(e) => (e, None),
            ast::SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
            other => {
                return Err(unsupported(
                    format!("`{other}` in the SELECT list"),
                    listable,
                    other.span(),
                ));
            }
        };
        let t = item(e, alias)?;
        if items.iter().any(|i| name(i).eq_ignore_ascii_case(name(&t))) {
            return Err(SqlError::DuplicateOutput { name: name(&t).to_string() });
        }
        items.push(t);
    }
    Ok(items)
}

pub(super) fn check_query(q: &ast::Query) -> Result<(), SqlError> {
    let span = q.span();
    let bad = |what: &str| Err(unsupported(what.to_string(), SUPPORTED_QUERY, span));
    if q.with.is_some() {
        return bad("WITH (common table expressions)");
    }
    if let Some(ob) = &q.order_by {
        return Err(unsupported(
            format!("`{ob}` on the query (results come out in event order)"),
            SUPPORTED_QUERY,
            span,
        ));
    }
    if q.limit_clause.is_some() || q.fetch.is_some() {
        return bad("LIMIT/OFFSET/FETCH");
    }
    if !q.locks.is_empty() || q.for_clause.is_some() {
        return bad("FOR clause");
    }
    if q.settings.is_some() || q.format_clause.is_some() || !q.pipe_operators.is_empty() {
        return bad("SETTINGS/FORMAT/pipe operators");
    }
    Ok(())
}

/// Checks the SELECT's clauses; returns the names the input table can be referred to by.
fn check_select(s: &ast::Select) -> Result<Vec<String>, SqlError> {
    let span = s.span();
    let bad = |what: String| Err(unsupported(what, SUPPORTED_QUERY, span));
    check_clauses(s, SUPPORTED_QUERY)?;
    match &s.group_by {
        ast::GroupByExpr::Expressions(v, m) if v.is_empty() && m.is_empty() => {}
        g => {
            return bad(format!(
                "`{g}` without a window table function in FROM (per-event metrics use \
                 PARTITION BY in the window; a windowed aggregation groups FROM \
                 TABLE(TUMBLE(TABLE <stream>, DESCRIPTOR(<time column>), <size>)) BY \
                 <columns>, window_start, window_end)"
            ))
        }
    }
    if let Some(h) = &s.having {
        return bad(format!("HAVING `{h}`"));
    }
    let [from] = s.from.as_slice() else {
        if s.from.is_empty() {
            return Err(invalid(
                "SELECT",
                "FROM <stream> is missing (name the input table: `spillway run` calls it by the input file's name without its extension, or by --table)".into(),
                span,
            ));
        }
        return bad("several tables in FROM (joins)".into());
    };
    if let Some(j) = from.joins.first() {
        return Err(unsupported(format!("join `{j}`"), SUPPORTED_QUERY, j.relation.span()));
    }
    match &from.relation {
        ast::TableFactor::Table { name, alias, args: None, .. } => {
            let mut names = Vec::new();
            if let Some(last) = name.0.last().and_then(|p| p.as_ident()) {
                names.push(last.value.clone());
            }
            if let Some(a) = alias {
                names.push(a.name.value.clone());
            }
            Ok(names)
        }
        ast::TableFactor::Derived { .. } => Err(unsupported(
            format!("subquery in FROM `{}`", from.relation),
            SUPPORTED_QUERY,
            from.relation.span(),
        )),
        ast::TableFactor::TableFunction { .. } => Err(unsupported(
            format!("FROM `{}` here", from.relation),
            "windowed aggregations (window table functions) run as jobs: `spillway run` and \
             `spillway explain`",
            from.relation.span(),
        )),
        other => Err(unsupported(format!("FROM `{other}`"), SUPPORTED_QUERY, other.span())),
    }
}

/// Rejects the SELECT clauses no Spillway query has (`DISTINCT`, `TOP`, `INTO`, ...);
/// `supported` describes the query shape for the message.
pub(super) fn check_clauses(s: &ast::Select, supported: &str) -> Result<(), SqlError> {
    let span = s.span();
    let bad = |what: String| Err(unsupported(what, supported, span));
    if let Some(d) = &s.distinct {
        return bad(format!("`{d}`"));
    }
    if s.top.is_some() {
        return bad("TOP".into());
    }
    if s.into.is_some() {
        return bad("SELECT INTO".into());
    }
    if !s.lateral_views.is_empty() {
        return bad("LATERAL VIEW".into());
    }
    if s.prewhere.is_some() {
        return bad("PREWHERE".into());
    }
    if s.qualify.is_some() {
        return bad("QUALIFY".into());
    }
    if !s.cluster_by.is_empty() || !s.distribute_by.is_empty() || !s.sort_by.is_empty() {
        return bad("CLUSTER/DISTRIBUTE/SORT BY".into());
    }
    if s.connect_by.is_some() || s.value_table_mode.is_some() || s.exclude.is_some() {
        return bad("CONNECT BY/SELECT AS/EXCLUDE".into());
    }
    Ok(())
}

/// The `WINDOW name AS (...)` definitions, compiled.
struct NamedWindows {
    by_name: HashMap<String, WindowSpec>,
    names: Vec<String>,
}

impl NamedWindows {
    fn new(defs: &[ast::NamedWindowDefinition], scope: &Scope<'_>) -> Result<Self, SqlError> {
        let mut raw: HashMap<String, &ast::NamedWindowDefinition> = HashMap::new();
        let mut names = Vec::new();
        for d in defs {
            let key = d.0.value.to_ascii_lowercase();
            if raw.insert(key, d).is_some() {
                return Err(invalid(
                    d,
                    format!("window `{}` is defined twice", d.0.value),
                    d.0.span,
                ));
            }
            names.push(d.0.value.clone());
        }
        let mut by_name = HashMap::new();
        for d in defs {
            // Follow `WINDOW w2 AS w1` aliases (at most defs.len() hops: more is a cycle).
            let mut cur = d;
            let mut hops = 0;
            let spec = loop {
                match &cur.1 {
                    ast::NamedWindowExpr::WindowSpec(spec) => break spec,
                    ast::NamedWindowExpr::NamedWindow(target) => {
                        hops += 1;
                        if hops > defs.len() {
                            return Err(invalid(
                                d,
                                "window definitions refer to each other in a cycle".into(),
                                d.0.span,
                            ));
                        }
                        cur = raw.get(&target.value.to_ascii_lowercase()).copied().ok_or_else(
                            || SqlError::UnknownWindow {
                                name: target.value.clone(),
                                defined: names.clone(),
                                at: loc(target.span),
                            },
                        )?;
                    }
                }
            };
            by_name.insert(d.0.value.to_ascii_lowercase(), window_spec(spec, scope, d.0.span)?);
        }
        Ok(NamedWindows { by_name, names })
    }

    fn get(&self, id: &ast::Ident) -> Result<&WindowSpec, SqlError> {
        self.by_name.get(&id.value.to_ascii_lowercase()).ok_or_else(|| SqlError::UnknownWindow {
            name: id.value.clone(),
            defined: self.names.clone(),
            at: loc(id.span),
        })
    }
}

fn select_item(
    e: &ast::Expr,
    alias: Option<String>,
    scope: &Scope<'_>,
    named: &NamedWindows,
    windows: &mut Vec<WindowSpec>,
) -> Result<SelectItem, SqlError> {
    if let Some(col) = scope.column_ref(e) {
        let col = col?;
        let (index, name) = match &col {
            Expr::Column { index, name, .. } => (*index, name.to_string()),
            _ => unreachable_column(e)?,
        };
        return Ok(SelectItem::Column { name: alias.unwrap_or(name), index });
    }
    match e {
        ast::Expr::Nested(inner) => select_item(inner, alias, scope, named, windows),
        ast::Expr::Function(f) => {
            let (metric, default_name) = metric(f, e, scope, named, windows)?;
            Ok(SelectItem::Metric { name: alias.unwrap_or(default_name), metric })
        }
        _ => Err(unsupported(
            format!("scalar expression `{e}` in the SELECT list"),
            "plain columns and aggregates with OVER (use FILTER (WHERE ..) or an aggregate \
             argument expression instead)",
            e.span(),
        )),
    }
}

fn unreachable_column<T>(e: &ast::Expr) -> Result<T, SqlError> {
    Err(invalid(e, "expected a column reference".into(), e.span()))
}

/// Compiles `agg(...) [FILTER (WHERE ..)] OVER window`; returns the metric and its default
/// output name.
fn metric(
    f: &ast::Function,
    e: &ast::Expr,
    scope: &Scope<'_>,
    named: &NamedWindows,
    windows: &mut Vec<WindowSpec>,
) -> Result<(MetricSpec, String), SqlError> {
    let span = e.span();
    let call = aggregate_call(f, e, scope, Over::Required)?;
    let Some(over) = &f.over else { unreachable!("aggregate_call checked OVER") };
    let spec = match over {
        ast::WindowType::NamedWindow(id) => named.get(id)?.clone(),
        ast::WindowType::WindowSpec(ws) => window_spec(ws, scope, span)?,
    };
    let window = match windows.iter().position(|w| *w == spec) {
        Some(i) => i,
        None => {
            windows.push(spec);
            windows.len() - 1
        }
    };
    let AggCall { agg, arg, arg_type, filter, name } = call;
    Ok((MetricSpec { agg, arg, arg_type, filter, window }, name))
}

/// An aggregate call compiled: what [`aggregate_call`] returns.
#[derive(Clone, Debug)]
pub(super) struct AggCall {
    /// The function.
    pub agg: AggKind,
    /// Its argument (`None` for `COUNT(*)`).
    pub arg: Option<Expr>,
    /// The argument's type.
    pub arg_type: Option<DataType>,
    /// `FILTER (WHERE ..)`.
    pub filter: Option<Expr>,
    /// The default output name, e.g. `sum(amount)`.
    pub name: String,
}

/// Whether an aggregate call must have `OVER` (a per-event metric) or must not have it
/// (an aggregate of a windowed `GROUP BY`, see [`super::tvf`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Over {
    Required,
    Forbidden,
}

/// Compiles `agg(...) [FILTER (WHERE ..)]` (checking `OVER` as `over` says).
pub(super) fn aggregate_call(
    f: &ast::Function,
    e: &ast::Expr,
    scope: &Scope<'_>,
    over: Over,
) -> Result<AggCall, SqlError> {
    let span = e.span();
    let fname = match f.name.0.as_slice() {
        [p] => p.as_ident().map(|i| i.value.to_ascii_lowercase()),
        _ => None,
    }
    .unwrap_or_else(|| f.name.to_string().to_ascii_lowercase());

    if !is_aggregate_name(&fname) {
        let what = match fname.as_str() {
            "row_number" | "rank" | "dense_rank" | "percent_rank" | "cume_dist" | "ntile"
            | "lag" | "lead" | "nth_value" => "window function",
            _ => "function",
        };
        return Err(unsupported(format!("{what} `{}`", f.name), SUPPORTED_AGGS, span));
    }
    match (over, &f.over) {
        (Over::Required, None) => {
            return Err(unsupported(
                format!("aggregate `{e}` without OVER"),
                &format!(
                    "sliding-window aggregates: add OVER <window>, e.g. `{e} OVER (PARTITION \
                     BY <column> ORDER BY <time column> RANGE BETWEEN INTERVAL '5' MINUTE \
                     PRECEDING AND CURRENT ROW)`; or a windowed aggregation: FROM \
                     TABLE(TUMBLE(TABLE <stream>, DESCRIPTOR(<time column>), <size>)) GROUP \
                     BY <columns>, window_start, window_end"
                ),
                span,
            ));
        }
        (Over::Forbidden, Some(w)) => {
            return Err(unsupported(
                format!("`OVER {w}` in a windowed aggregation"),
                "plain aggregates: the window is the one the window table function in FROM \
                 assigns",
                span,
            ));
        }
        _ => {}
    }
    if !matches!(f.parameters, ast::FunctionArguments::None) {
        return Err(unsupported(format!("parametric aggregate `{e}`"), SUPPORTED_AGGS, span));
    }
    if let Some(nt) = &f.null_treatment {
        return Err(unsupported(format!("`{nt}` in `{e}`"), SUPPORTED_AGGS, span));
    }
    let list = match &f.args {
        ast::FunctionArguments::List(list) => list,
        _ => {
            return Err(invalid(e, format!("`{fname}` needs an argument list"), span));
        }
    };
    if let Some(c) = list.clauses.first() {
        return Err(unsupported(format!("`{c}` inside `{fname}(...)`"), SUPPORTED_AGGS, span));
    }
    let distinct = matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct));
    if distinct && fname != "count" {
        return Err(unsupported(
            format!("DISTINCT in `{e}`"),
            "DISTINCT only in COUNT(DISTINCT x)",
            span,
        ));
    }
    if !f.within_group.is_empty() && fname != "percentile_cont" {
        return Err(unsupported(
            format!("WITHIN GROUP in `{e}`"),
            "WITHIN GROUP only with PERCENTILE_CONT(p)",
            span,
        ));
    }

    // Positional arguments: `*` or expressions.
    let mut args: Vec<Option<&ast::Expr>> = Vec::new();
    for a in &list.args {
        match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) => args.push(Some(x)),
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard) => args.push(None),
            other => {
                return Err(unsupported(
                    format!("argument `{other}` of `{fname}`"),
                    "one positional argument (or * in COUNT(*))",
                    span,
                ))
            }
        }
    }
    let one_arg = |args: &[Option<&ast::Expr>]| -> Result<Expr, SqlError> {
        match args {
            [Some(x)] => compile(x, scope),
            [None] => Err(invalid(e, format!("`{fname}(*)` is not valid; only COUNT(*)"), span)),
            _ => Err(invalid(
                e,
                format!("`{fname}` takes exactly one argument, found {}", args.len()),
                span,
            )),
        }
    };

    let (agg, arg) = match fname.as_str() {
        "count" => match args.as_slice() {
            [None] if !distinct => (AggKind::CountStar, None),
            [None] => {
                return Err(unsupported(
                    "COUNT(DISTINCT *)".into(),
                    "COUNT(*), COUNT(x), COUNT(DISTINCT x)",
                    span,
                ))
            }
            _ => {
                let kind = if distinct { AggKind::CountDistinct } else { AggKind::Count };
                (kind, Some(one_arg(&args)?))
            }
        },
        "sum" => (AggKind::Sum, Some(one_arg(&args)?)),
        "avg" => (AggKind::Avg, Some(one_arg(&args)?)),
        "min" => (AggKind::Min, Some(one_arg(&args)?)),
        "max" => (AggKind::Max, Some(one_arg(&args)?)),
        "stddev" | "stddev_samp" => (AggKind::StddevSamp, Some(one_arg(&args)?)),
        "variance" | "var_samp" => (AggKind::VarSamp, Some(one_arg(&args)?)),
        "median" => (AggKind::Median, Some(one_arg(&args)?)),
        "first_value" => (AggKind::FirstValue, Some(one_arg(&args)?)),
        "last_value" => (AggKind::LastValue, Some(one_arg(&args)?)),
        _ => {
            // percentile_cont(p) WITHIN GROUP (ORDER BY x)
            let p = one_arg(&args)?;
            let p = match p {
                Expr::Literal(Value::Int(i)) => i as f64,
                Expr::Literal(Value::Float(x)) => x,
                _ => {
                    return Err(invalid(
                        e,
                        format!(
                            "the fraction of PERCENTILE_CONT must be a number literal, found `{p}`"
                        ),
                        span,
                    ))
                }
            };
            if !(0.0..=1.0).contains(&p) {
                return Err(invalid(
                    e,
                    format!("PERCENTILE_CONT fraction {p} is outside [0, 1]"),
                    span,
                ));
            }
            let [ob] = f.within_group.as_slice() else {
                return Err(invalid(
                    e,
                    "PERCENTILE_CONT(p) needs WITHIN GROUP (ORDER BY <one expression>)".into(),
                    span,
                ));
            };
            if ob.options.asc == Some(false) || ob.options.nulls_first.is_some() {
                return Err(unsupported(
                    format!("`{ob}` in WITHIN GROUP"),
                    "WITHIN GROUP (ORDER BY x) ascending (for a descending order use 1 - p)",
                    span,
                ));
            }
            if ob.with_fill.is_some() {
                return Err(unsupported(format!("`{ob}`"), "WITHIN GROUP (ORDER BY x)", span));
            }
            (AggKind::PercentileCont(p), Some(compile(&ob.expr, scope)?))
        }
    };

    let arg_type = match &arg {
        None => None,
        Some(a) => {
            let t = a.data_type().ok_or_else(|| SqlError::Type {
                construct: e.to_string(),
                message: format!("the argument of `{fname}` has no type (a bare NULL)"),
                at: loc(span),
            })?;
            let numeric_only = !matches!(
                agg,
                AggKind::Count
                    | AggKind::CountDistinct
                    | AggKind::Min
                    | AggKind::Max
                    | AggKind::FirstValue
                    | AggKind::LastValue
            );
            if numeric_only && !matches!(t, DataType::Int | DataType::Float) {
                return Err(SqlError::Type {
                    construct: e.to_string(),
                    message: format!(
                        "`{fname}` needs a numeric (int or float) argument, found {t}"
                    ),
                    at: loc(span),
                });
            }
            Some(t)
        }
    };

    let filter =
        f.filter.as_ref().map(|w| compile_predicate(w, scope, "FILTER (WHERE ..)")).transpose()?;

    let mut name = match (&agg, &arg) {
        (AggKind::CountStar, _) => "count(*)".to_string(),
        (AggKind::CountDistinct, Some(a)) => format!("count(distinct {a})"),
        (AggKind::PercentileCont(p), Some(a)) => {
            format!("percentile_cont({p}) within group (order by {a})")
        }
        (_, Some(a)) => format!("{fname}({a})"),
        (_, None) => format!("{fname}()"),
    };
    if let Some(flt) = &filter {
        name.push_str(&format!(" filter (where {flt})"));
    }
    Ok(AggCall { agg, arg, arg_type, filter, name })
}

/// Compiles a window definition (`PARTITION BY .. ORDER BY <time> RANGE ..`).
fn window_spec(
    ws: &ast::WindowSpec,
    scope: &Scope<'_>,
    span: sqlparser::tokenizer::Span,
) -> Result<WindowSpec, SqlError> {
    let time_index = scope.schema.time_index();
    let time_name = &scope.schema.fields()[time_index].name;
    if let Some(base) = &ws.window_name {
        return Err(unsupported(
            format!("refining window `{base}` (`OVER ({ws})`)"),
            "OVER <name> as defined, or a complete inline window",
            span,
        ));
    }
    let mut partition_by = Vec::new();
    for p in &ws.partition_by {
        let col = match scope.column_ref(p) {
            Some(c) => c?,
            None => {
                return Err(unsupported(
                    format!("PARTITION BY expression `{p}`"),
                    "PARTITION BY column names",
                    p.span(),
                ))
            }
        };
        if let Some(i) = col.as_column() {
            if !partition_by.contains(&i) {
                partition_by.push(i);
            }
        }
    }
    let order_msg = format!("ORDER BY {time_name} (the time column, ascending)");
    let [ob] = ws.order_by.as_slice() else {
        let found = if ws.order_by.is_empty() {
            "a window without ORDER BY".to_string()
        } else {
            format!(
                "ORDER BY {}",
                ws.order_by.iter().map(|o| o.to_string()).collect::<Vec<_>>().join(", ")
            )
        };
        return Err(unsupported(found, &order_msg, span));
    };
    let is_time =
        matches!(scope.column_ref(&ob.expr), Some(Ok(c)) if c.as_column() == Some(time_index));
    if !is_time
        || ob.options.asc == Some(false)
        || ob.options.nulls_first.is_some()
        || ob.with_fill.is_some()
    {
        return Err(unsupported(format!("window `ORDER BY {ob}`"), &order_msg, ob.expr.span()));
    }
    let Some(frame) = &ws.window_frame else {
        return Err(invalid(
            format!("OVER ({ws})"),
            format!(
                "the window has no frame (SQL's default frame is unbounded); add e.g. `RANGE \
                 BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW`, or `RANGE UNBOUNDED \
                 PRECEDING` for a running total. Supported: {SUPPORTED_FRAME}"
            ),
            span,
        ));
    };
    Ok(WindowSpec { partition_by, frame: frame_spec(frame, scope, span)? })
}

fn frame_spec(
    fr: &ast::WindowFrame,
    scope: &Scope<'_>,
    span: sqlparser::tokenizer::Span,
) -> Result<Frame, SqlError> {
    let text = match &fr.end_bound {
        Some(end) => format!("{} BETWEEN {} AND {end}", fr.units, fr.start_bound),
        None => format!("{} {}", fr.units, fr.start_bound),
    };
    let look_ahead = |b: &ast::WindowFrameBound| {
        unsupported(
            format!("`{b}` in the {} frame `{text}` (windows cannot look ahead)", fr.units),
            SUPPORTED_FRAME,
            span,
        )
    };
    for b in std::iter::once(&fr.start_bound).chain(&fr.end_bound) {
        if matches!(b, ast::WindowFrameBound::Following(_)) {
            return Err(look_ahead(b));
        }
    }
    if matches!(fr.end_bound, Some(ast::WindowFrameBound::Preceding(None))) {
        return Err(invalid(
            &text,
            "UNBOUNDED PRECEDING can only start a frame; end it with CURRENT ROW or <offset> \
             PRECEDING"
                .into(),
            span,
        ));
    }
    match fr.units {
        ast::WindowFrameUnits::Range => range_frame(fr, &text, scope, span),
        ast::WindowFrameUnits::Rows => rows_frame(fr, &text, span),
        ast::WindowFrameUnits::Groups => Err(unsupported(
            format!("GROUPS frame `{text}` (windows are time ranges or row counts)"),
            SUPPORTED_FRAME,
            span,
        )),
    }
}

/// A `RANGE` frame (bounds other than `FOLLOWING` and a trailing `UNBOUNDED PRECEDING`,
/// which [`frame_spec`] rejected).
fn range_frame(
    fr: &ast::WindowFrame,
    text: &str,
    scope: &Scope<'_>,
    span: sqlparser::tokenizer::Span,
) -> Result<Frame, SqlError> {
    let unit_nanos = scope.schema.time_unit().nanos();
    let (end, end_open) = match &fr.end_bound {
        Some(b) => bound(b, unit_nanos, scope, span)?,
        None => (0, false),
    };
    if matches!(fr.start_bound, ast::WindowFrameBound::Preceding(None)) {
        return Ok(Frame::unbounded(end, end_open));
    }
    let (start, start_open) = bound(&fr.start_bound, unit_nanos, scope, span)?;
    if start < end {
        return Err(invalid(
            text,
            format!(
                "the frame starts after it ends ({} is nearer to the current row than {})",
                fr.start_bound,
                fr.end_bound.as_ref().map_or("CURRENT ROW".to_string(), |b| b.to_string())
            ),
            span,
        ));
    }
    if start == end && (start_open || end_open) {
        return Err(invalid(
            text,
            "the frame is empty (an open bound at equal offsets)".into(),
            span,
        ));
    }
    Ok(Frame::range(start, start_open, end, end_open))
}

/// A `ROWS` frame: `n PRECEDING` (or `CURRENT ROW`, `n = 0`) to `CURRENT ROW`, or
/// `UNBOUNDED PRECEDING` to `CURRENT ROW`, which is the `RANGE` frame `[unbounded, t]`
/// (time-ties of the current event arrived before it, so they precede it in both).
fn rows_frame(
    fr: &ast::WindowFrame,
    text: &str,
    span: sqlparser::tokenizer::Span,
) -> Result<Frame, SqlError> {
    match &fr.end_bound {
        None | Some(ast::WindowFrameBound::CurrentRow) => {}
        Some(b) => {
            return Err(unsupported(
                format!(
                    "ROWS frame `{text}` ending at `{b}` (a ROWS frame ends at the current row)"
                ),
                SUPPORTED_FRAME,
                span,
            ))
        }
    }
    let n = match &fr.start_bound {
        ast::WindowFrameBound::CurrentRow => 0,
        ast::WindowFrameBound::Preceding(None) => return Ok(Frame::unbounded(0, false)),
        ast::WindowFrameBound::Preceding(Some(e)) => rows_count(e, text)?,
        ast::WindowFrameBound::Following(_) => unreachable!("frame_spec rejects FOLLOWING"),
    };
    Ok(Frame::rows(n))
}

/// The `n` of `ROWS BETWEEN n PRECEDING ..`: a non-negative integer literal up to
/// [`MAX_ROWS_PRECEDING`].
fn rows_count(e: &ast::Expr, text: &str) -> Result<u64, SqlError> {
    let span = e.span();
    match e {
        ast::Expr::Nested(inner) => rows_count(inner, text),
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(digits, _) => {
                let n: u64 = digits.parse().map_err(|_| {
                    invalid(
                        e,
                        format!(
                            "a ROWS frame offset counts rows: a non-negative integer, found \
                             `{digits}` in `{text}`"
                        ),
                        span,
                    )
                })?;
                if n > MAX_ROWS_PRECEDING {
                    return Err(invalid(
                        e,
                        format!(
                            "a ROWS frame holds at most {MAX_ROWS_PRECEDING} rows before the \
                             current one (`{text}` asks for {n}); for longer windows use a \
                             RANGE frame"
                        ),
                        span,
                    ));
                }
                Ok(n)
            }
            _ => Err(unsupported(
                format!("ROWS frame offset `{e}` in `{text}`"),
                "a non-negative integer number of rows",
                span,
            )),
        },
        ast::Expr::Interval(_) => Err(unsupported(
            format!("ROWS frame offset `{e}` in `{text}` (ROWS counts rows)"),
            "a non-negative integer number of rows; for a time offset use RANGE BETWEEN \
             <offset> PRECEDING AND CURRENT ROW",
            span,
        )),
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, .. } => {
            Err(invalid(e, format!("a ROWS frame offset must be non-negative (in `{text}`)"), span))
        }
        _ => Err(unsupported(
            format!("ROWS frame offset `{e}` in `{text}`"),
            "a non-negative integer number of rows (ROWS bounds are inclusive; OPEN(..) is \
             for RANGE offsets)",
            span,
        )),
    }
}

/// A `RANGE` frame bound as (offset in time units, exclusive?); `UNBOUNDED` and
/// `FOLLOWING` are handled by the callers.
fn bound(
    b: &ast::WindowFrameBound,
    unit_nanos: i64,
    scope: &Scope<'_>,
    span: sqlparser::tokenizer::Span,
) -> Result<(i64, bool), SqlError> {
    match b {
        ast::WindowFrameBound::CurrentRow => Ok((0, false)),
        ast::WindowFrameBound::Preceding(Some(e)) => offset(e, false, unit_nanos, scope),
        ast::WindowFrameBound::Preceding(None) | ast::WindowFrameBound::Following(_) => {
            Err(unsupported(format!("`{b}` here"), SUPPORTED_FRAME, span))
        }
    }
}

fn offset(
    e: &ast::Expr,
    open: bool,
    unit_nanos: i64,
    scope: &Scope<'_>,
) -> Result<(i64, bool), SqlError> {
    let span = e.span();
    let unit_name = scope.schema.time_unit().name();
    let bad = || {
        unsupported(
            format!("frame offset `{e}`"),
            "INTERVAL 'n' UNIT, a non-negative integer in the time column's unit, or \
             OPEN(<offset>) for an exclusive bound",
            span,
        )
    };
    match e {
        ast::Expr::Nested(inner) => offset(inner, open, unit_nanos, scope),
        ast::Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("open") => {
            if open {
                return Err(invalid(e, "OPEN(...) is nested".into(), span));
            }
            let ast::FunctionArguments::List(list) = &f.args else { return Err(bad()) };
            match list.args.as_slice() {
                [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(inner))]
                    if list.duplicate_treatment.is_none()
                        && list.clauses.is_empty()
                        && f.over.is_none()
                        && f.filter.is_none() =>
                {
                    offset(inner, true, unit_nanos, scope)
                }
                _ => Err(invalid(e, "OPEN takes exactly one offset".into(), span)),
            }
        }
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => {
                let n: i64 = text.parse().map_err(|_| {
                    invalid(
                        e,
                        format!(
                            "a plain frame offset must be a non-negative integer number of {unit_name} (the time column's unit)"
                        ),
                        span,
                    )
                })?;
                Ok((n, open))
            }
            _ => Err(bad()),
        },
        ast::Expr::Interval(iv) => {
            let nanos = interval_nanos(iv, e)?;
            let unit = i128::from(unit_nanos);
            if nanos % unit != 0 {
                return Err(invalid(
                    e,
                    format!("the interval is not a whole number of {unit_name} (the time column's unit)"),
                    span,
                ));
            }
            let n = i64::try_from(nanos / unit)
                .map_err(|_| invalid(e, "the interval is too large".into(), span))?;
            Ok((n, open))
        }
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus, .. } => Err(invalid(
            e,
            "frame offsets must be non-negative (write a later bound as a smaller PRECEDING \
             offset)"
                .into(),
            span,
        )),
        _ => Err(bad()),
    }
}

/// Nanoseconds per interval unit, for the units that have a fixed length.
fn field_nanos(f: &ast::DateTimeField) -> Option<i128> {
    use ast::DateTimeField as D;
    Some(match f {
        D::Nanosecond | D::Nanoseconds => 1,
        D::Microsecond | D::Microseconds => 1_000,
        D::Millisecond | D::Milliseconds => 1_000_000,
        D::Second | D::Seconds => 1_000_000_000,
        D::Minute | D::Minutes => 60_000_000_000,
        D::Hour | D::Hours => 3_600_000_000_000,
        D::Day | D::Days => 86_400_000_000_000,
        D::Week(None) | D::Weeks => 7 * 86_400_000_000_000,
        _ => return None,
    })
}

/// Nanoseconds per unit word in `INTERVAL '5 minutes'`.
fn word_nanos(w: &str) -> Option<i128> {
    Some(match w.to_ascii_lowercase().as_str() {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "microsecond" | "microseconds" => 1_000,
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        "w" | "week" | "weeks" => 7 * 86_400_000_000_000,
        _ => return None,
    })
}

/// `amount * unit` exactly, for a non-negative decimal `amount` such as `5` or `1.5`.
fn decimal_times(amount: &str, unit: i128) -> Option<i128> {
    let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || int.len() > 20
        || frac.len() > 18
    {
        return None;
    }
    let i: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let f: i128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let scale = 10i128.pow(frac.len() as u32);
    let frac_part = f.checked_mul(unit)?;
    if frac_part % scale != 0 {
        return None;
    }
    i.checked_mul(unit)?.checked_add(frac_part / scale)
}

pub(super) fn interval_nanos(iv: &ast::Interval, e: &ast::Expr) -> Result<i128, SqlError> {
    let span = e.span();
    if let Some(last) = &iv.last_field {
        return Err(unsupported(
            format!("interval range `... TO {last}`"),
            "INTERVAL 'n' UNIT or INTERVAL 'n unit ...'",
            span,
        ));
    }
    let text = match &*iv.value {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) | ast::Value::Number(s, _) => s.trim().to_string(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    let not_whole = || {
        invalid(
            e,
            "the interval amount must be a non-negative number that makes a whole number of \
             nanoseconds, e.g. INTERVAL '5' MINUTE"
                .into(),
            span,
        )
    };
    match &iv.leading_field {
        Some(field) => {
            let unit = field_nanos(field).ok_or_else(|| {
                unsupported(
                    format!("interval unit {field}"),
                    "fixed-length units: NANOSECOND, MICROSECOND, MILLISECOND, SECOND, MINUTE, \
                     HOUR, DAY, WEEK",
                    span,
                )
            })?;
            decimal_times(&text, unit).ok_or_else(not_whole)
        }
        None => {
            // '5 minutes', '1 hour 30 minutes', '250ms'
            let mut total: i128 = 0;
            let mut rest = text.as_str();
            let mut parts = 0;
            while !rest.trim_start().is_empty() {
                rest = rest.trim_start();
                let num_len =
                    rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
                let (num, after) = rest.split_at(num_len);
                let after = after.trim_start();
                let word_len =
                    after.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(after.len());
                let (word, after) = after.split_at(word_len);
                let unit = word_nanos(word).ok_or_else(|| {
                    invalid(
                        e,
                        format!(
                            "cannot read `{text}` as a duration; write e.g. INTERVAL '5' MINUTE \
                             or INTERVAL '5 minutes' (units: ns, us, ms, s, m/min/minute, \
                             h/hour, d/day, w/week)"
                        ),
                        span,
                    )
                })?;
                total = decimal_times(num, unit)
                    .and_then(|n| total.checked_add(n))
                    .ok_or_else(not_whole)?;
                rest = after;
                parts += 1;
            }
            if parts == 0 {
                return Err(not_whole());
            }
            Ok(total)
        }
    }
}
