//! What a query says about its input before the input's schema is known: the table its
//! `FROM` names, checked against the input's name ([`check_table`]), and the types its
//! use of columns implies ([`column_type_hints`]: `SUM(amount)` is numeric, `card = 'x'`
//! a string), for columns the input gives no value to infer a type from (a header-only
//! file, an all-empty column; see [`crate::source::SourceOptions::type_hints`]).

use sqlparser::ast;
use sqlparser::parser::Parser;

use super::{loc, SqlError};
use crate::value::DataType;

/// Aggregates that need a numeric argument.
const NUMERIC_AGGS: [&str; 7] =
    ["sum", "avg", "stddev", "stddev_samp", "variance", "var_samp", "median"];

/// The single SELECT of `sql`, `None` if it is not one (parse_query reports why).
fn select(sql: &str) -> Option<Box<ast::Select>> {
    let mut stmts = Parser::parse_sql(&super::dialect::FlinkDialect::default(), sql).ok()?;
    if stmts.len() != 1 {
        return None;
    }
    let ast::Statement::Query(query) = stmts.pop()? else { return None };
    match *query.body {
        ast::SetExpr::Select(select) => Some(select),
        _ => None,
    }
}

/// The table the query's `FROM` names (the last part of a qualified name, as written)
/// and where, `None` if the text is not one SELECT over one named table
/// ([`super::parse_query`] says what is wrong then).
pub fn from_table(sql: &str) -> Option<(String, Option<super::Location>)> {
    let select = select(sql)?;
    let [from] = select.from.as_slice() else { return None };
    match &from.relation {
        ast::TableFactor::Table { name, .. } => {
            name.0.last().and_then(|p| p.as_ident()).map(|i| (i.value.clone(), loc(i.span)))
        }
        _ => super::tvf::tvf_call(from).and_then(super::tvf::tvf_table),
    }
}

/// Checks that the query's `FROM` names the input `table` (compared
/// case-insensitively, as SQL compares unquoted names): an error naming both otherwise.
/// Text that is not one SELECT over one named table passes ([`super::parse_query`]
/// reports it).
pub fn check_table(sql: &str, table: &str) -> Result<(), SqlError> {
    match from_table(sql) {
        Some((name, at)) if !name.eq_ignore_ascii_case(table) => {
            Err(SqlError::UnknownTable { name, table: table.to_string(), at })
        }
        _ => Ok(()),
    }
}

/// The types `sql` implies for the columns it uses, first use first, each column once:
/// a numeric aggregate's argument (`SUM`, `AVG`, `STDDEV`, `VARIANCE`, `MEDIAN`,
/// `PERCENTILE_CONT`'s `ORDER BY`) and an operand of arithmetic or of a comparison with
/// a number is float; a column compared with a string literal is string, with `TRUE` /
/// `FALSE` or used as a condition of AND / OR / NOT is bool. Other uses (plain SELECT
/// columns, `PARTITION BY`, `COUNT`, `MIN`, ...) imply nothing. Empty for text that
/// does not parse.
pub fn column_type_hints(sql: &str) -> Vec<(String, DataType)> {
    let mut hints = Hints(Vec::new());
    let Some(select) = select(sql) else { return hints.0 };
    for item in &select.projection {
        match item {
            ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } => {
                hints.walk(e)
            }
            _ => {}
        }
    }
    if let Some(w) = &select.selection {
        hints.condition(w);
    }
    hints.0
}

struct Hints(Vec<(String, DataType)>);

/// The column name of a column reference (`col` or `t.col`).
fn column(e: &ast::Expr) -> Option<&str> {
    match e {
        ast::Expr::Identifier(id) => Some(&id.value),
        ast::Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.as_str()),
        ast::Expr::Nested(inner) => column(inner),
        _ => None,
    }
}

/// The type of a literal, if `e` is one (a signed number included).
fn literal_type(e: &ast::Expr) -> Option<DataType> {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(..) => Some(DataType::Float),
            ast::Value::SingleQuotedString(_) => Some(DataType::Str),
            ast::Value::Boolean(_) => Some(DataType::Bool),
            _ => None,
        },
        ast::Expr::UnaryOp { op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus, expr } => {
            literal_type(expr)
        }
        ast::Expr::Nested(inner) => literal_type(inner),
        _ => None,
    }
}

impl Hints {
    /// Records `ty` for `e` if it is a column without a hint yet.
    fn hint(&mut self, e: &ast::Expr, ty: DataType) {
        if let Some(name) = column(e) {
            if !self.0.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                self.0.push((name.to_string(), ty));
            }
        }
    }

    /// `e` is used where a boolean is needed.
    fn condition(&mut self, e: &ast::Expr) {
        self.hint(e, DataType::Bool);
        self.walk(e);
    }

    /// Every operand of `e` compared with `others`' literal type.
    fn compared(&mut self, e: &ast::Expr, others: &[&ast::Expr]) {
        if let Some(ty) = others.iter().find_map(|o| literal_type(o)) {
            self.hint(e, ty);
        }
    }

    fn walk(&mut self, e: &ast::Expr) {
        use ast::BinaryOperator as B;
        match e {
            ast::Expr::BinaryOp { left, op, right } => {
                match op {
                    B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
                        self.hint(left, DataType::Float);
                        self.hint(right, DataType::Float);
                    }
                    B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
                        self.compared(left, &[right]);
                        self.compared(right, &[left]);
                    }
                    B::And | B::Or => {
                        self.hint(left, DataType::Bool);
                        self.hint(right, DataType::Bool);
                    }
                    _ => {}
                }
                self.walk(left);
                self.walk(right);
            }
            ast::Expr::UnaryOp { op, expr } => {
                match op {
                    ast::UnaryOperator::Not => self.hint(expr, DataType::Bool),
                    ast::UnaryOperator::Minus | ast::UnaryOperator::Plus => {
                        self.hint(expr, DataType::Float)
                    }
                    _ => {}
                }
                self.walk(expr);
            }
            ast::Expr::Between { expr, low, high, .. } => {
                self.compared(expr, &[low, high]);
                self.walk(expr);
            }
            ast::Expr::InList { expr, list, .. } => {
                let refs: Vec<&ast::Expr> = list.iter().collect();
                self.compared(expr, &refs);
                self.walk(expr);
            }
            ast::Expr::Nested(inner)
            | ast::Expr::IsNull(inner)
            | ast::Expr::IsNotNull(inner)
            | ast::Expr::Cast { expr: inner, .. } => self.walk(inner),
            ast::Expr::Function(f) => self.function(f),
            _ => {}
        }
    }

    fn function(&mut self, f: &ast::Function) {
        let name = f.name.0.last().and_then(|p| p.as_ident()).map(|i| i.value.to_ascii_lowercase());
        let numeric = name.as_deref().is_some_and(|n| NUMERIC_AGGS.contains(&n));
        if let ast::FunctionArguments::List(list) = &f.args {
            for arg in &list.args {
                if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) = arg {
                    if numeric {
                        self.hint(x, DataType::Float);
                    }
                    self.walk(x);
                }
            }
        }
        if name.as_deref() == Some("percentile_cont") {
            for ob in &f.within_group {
                self.hint(&ob.expr, DataType::Float);
            }
        }
        if let Some(w) = &f.filter {
            self.condition(w);
        }
    }
}
