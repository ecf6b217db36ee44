//! Compiled scalar expressions: the `WHERE` filter, `FILTER (WHERE ..)` clauses and
//! aggregate arguments. Owns compilation from the `sqlparser` AST (name resolution and
//! static type checks), evaluation against a row, and a SQL-ish rendering.
//!
//! Evaluation semantics:
//! - `+ - * / %` on two ints give an int with checked arithmetic: overflow, division by
//!   zero and `i64::MIN % -1` give NULL; integer division truncates toward zero. If either
//!   side is a float the operation is done in floats; division or `%` by zero is NULL.
//!   A NULL operand gives NULL.
//! - Comparisons compare ints and floats numerically and exactly (no rounding of large
//!   ints); NaN equals NaN and sorts above every other number (as in PostgreSQL). Strings
//!   compare bytewise, booleans `false < true`. Comparing a string with a number is a type
//!   error when the query is parsed.
//! - `AND`, `OR`, `NOT`, `IN`, `BETWEEN` follow SQL's three-valued logic; `IS [NOT] NULL`
//!   is never NULL.
//! - `CAST(x AS t)` to `int` rounds floats half away from zero; a value that does not
//!   convert (out of range, unparsable string) becomes NULL rather than an error.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

use sqlparser::ast;
use sqlparser::ast::Spanned;

use super::{loc, SqlError};
use crate::value::{DataType, Schema, Value};

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Arithmetic negation `-x`.
    Neg,
    /// Logical `NOT x`.
    Not,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `=`
    Eq,
    /// `<>` (also written `!=`)
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
    /// `AND`
    And,
    /// `OR`
    Or,
}

impl BinaryOp {
    /// The operator as written in SQL.
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Mod => "%",
            BinaryOp::Eq => "=",
            BinaryOp::NotEq => "<>",
            BinaryOp::Lt => "<",
            BinaryOp::LtEq => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::GtEq => ">=",
            BinaryOp::And => "AND",
            BinaryOp::Or => "OR",
        }
    }

    /// True for `+ - * / %`.
    pub fn is_arithmetic(self) -> bool {
        matches!(
            self,
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod
        )
    }

    /// True for `= <> < <= > >=`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq
                | BinaryOp::NotEq
                | BinaryOp::Lt
                | BinaryOp::LtEq
                | BinaryOp::Gt
                | BinaryOp::GtEq
        )
    }

    /// Binding strength for rendering (higher binds tighter).
    fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq => 4,
            BinaryOp::Add | BinaryOp::Sub => 5,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod => 6,
        }
    }
}

/// A compiled scalar expression over one input row.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A column of the input schema.
    Column {
        /// Position in [`Schema::fields`] (and in the row).
        index: usize,
        /// The schema's spelling of the column name (for rendering).
        name: Box<str>,
        /// The column's type.
        ty: DataType,
    },
    /// A constant.
    Literal(Value),
    /// `-x` or `NOT x`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// `left op right`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        left: Box<Expr>,
        /// Right operand.
        right: Box<Expr>,
    },
    /// `expr IS NULL` (`negated`: `IS NOT NULL`).
    IsNull {
        /// The tested expression.
        expr: Box<Expr>,
        /// True for `IS NOT NULL`.
        negated: bool,
    },
    /// `expr IN (list..)` (`negated`: `NOT IN`).
    InList {
        /// The tested expression.
        expr: Box<Expr>,
        /// The candidates.
        list: Vec<Expr>,
        /// True for `NOT IN`.
        negated: bool,
    },
    /// `expr BETWEEN low AND high` (both inclusive; `negated`: `NOT BETWEEN`).
    Between {
        /// The tested expression.
        expr: Box<Expr>,
        /// Lower bound (inclusive).
        low: Box<Expr>,
        /// Upper bound (inclusive).
        high: Box<Expr>,
        /// True for `NOT BETWEEN`.
        negated: bool,
    },
    /// `CAST(expr AS to)`.
    Cast {
        /// The converted expression.
        expr: Box<Expr>,
        /// Target type.
        to: DataType,
    },
}

static NULL: Value = Value::Null;

impl Expr {
    /// The column index when this expression is a plain column reference.
    pub fn as_column(&self) -> Option<usize> {
        match self {
            Expr::Column { index, .. } => Some(*index),
            _ => None,
        }
    }

    /// Evaluates the expression against `row` (positional per the schema). A missing
    /// column (short row) reads as NULL.
    pub fn eval(&self, row: &[Value]) -> Value {
        self.eval_cow(row).into_owned()
    }

    /// Evaluates without cloning when the result is a column value or a literal.
    pub fn eval_cow<'a>(&'a self, row: &'a [Value]) -> Cow<'a, Value> {
        match self {
            Expr::Column { index, .. } => Cow::Borrowed(row.get(*index).unwrap_or(&NULL)),
            Expr::Literal(v) => Cow::Borrowed(v),
            Expr::Unary { op: UnaryOp::Neg, expr } => Cow::Owned(match *expr.eval_cow(row) {
                Value::Int(i) => i.checked_neg().map_or(Value::Null, Value::Int),
                Value::Float(f) => Value::Float(-f),
                _ => Value::Null,
            }),
            Expr::Unary { op: UnaryOp::Not, expr } => {
                Cow::Owned(bool3(truth(&expr.eval_cow(row)).map(|b| !b)))
            }
            Expr::Binary { op: BinaryOp::And, left, right } => {
                let l = truth(&left.eval_cow(row));
                if l == Some(false) {
                    return Cow::Owned(Value::Bool(false));
                }
                let r = truth(&right.eval_cow(row));
                Cow::Owned(bool3(and3(l, r)))
            }
            Expr::Binary { op: BinaryOp::Or, left, right } => {
                let l = truth(&left.eval_cow(row));
                if l == Some(true) {
                    return Cow::Owned(Value::Bool(true));
                }
                let r = truth(&right.eval_cow(row));
                Cow::Owned(bool3(or3(l, r)))
            }
            Expr::Binary { op, left, right } => {
                let l = left.eval_cow(row);
                let r = right.eval_cow(row);
                Cow::Owned(if op.is_arithmetic() {
                    arith(*op, &l, &r)
                } else {
                    bool3(compare(&l, &r).map(|o| cmp_holds(*op, o)))
                })
            }
            Expr::IsNull { expr, negated } => {
                Cow::Owned(Value::Bool(expr.eval_cow(row).is_null() != *negated))
            }
            Expr::InList { expr, list, negated } => {
                let v = expr.eval_cow(row);
                if v.is_null() {
                    return Cow::Owned(Value::Null);
                }
                let mut saw_null = false;
                for item in list {
                    match compare(&v, &item.eval_cow(row)) {
                        Some(Ordering::Equal) => return Cow::Owned(Value::Bool(!*negated)),
                        None => saw_null = true,
                        Some(_) => {}
                    }
                }
                Cow::Owned(if saw_null { Value::Null } else { Value::Bool(*negated) })
            }
            Expr::Between { expr, low, high, negated } => {
                let v = expr.eval_cow(row);
                let ge = compare(&v, &low.eval_cow(row)).map(|o| o != Ordering::Less);
                let le = compare(&v, &high.eval_cow(row)).map(|o| o != Ordering::Greater);
                let r = and3(ge, le);
                Cow::Owned(bool3(if *negated { r.map(|b| !b) } else { r }))
            }
            Expr::Cast { expr, to } => {
                let v = expr.eval_cow(row);
                if v.data_type() == Some(*to) {
                    v
                } else {
                    Cow::Owned(cast(&v, *to))
                }
            }
        }
    }

    /// Evaluates a predicate: true only for `TRUE` (NULL and anything else is false).
    pub fn eval_bool(&self, row: &[Value]) -> bool {
        matches!(*self.eval_cow(row), Value::Bool(true))
    }

    /// The static result type; `None` when the expression is an untyped NULL (e.g. the
    /// literal `NULL`).
    pub fn data_type(&self) -> Option<DataType> {
        match self {
            Expr::Column { ty, .. } => Some(*ty),
            Expr::Literal(v) => v.data_type(),
            Expr::Unary { op: UnaryOp::Neg, expr } => expr.data_type(),
            Expr::Binary { op, left, right } if op.is_arithmetic() => {
                numeric_result(left.data_type(), right.data_type())
            }
            Expr::Cast { to, .. } => Some(*to),
            Expr::Unary { op: UnaryOp::Not, .. }
            | Expr::Binary { .. }
            | Expr::IsNull { .. }
            | Expr::InList { .. }
            | Expr::Between { .. } => Some(DataType::Bool),
        }
    }

    fn precedence(&self) -> u8 {
        match self {
            Expr::Binary { op, .. } => op.precedence(),
            Expr::Unary { op: UnaryOp::Not, .. } => 3,
            Expr::IsNull { .. } | Expr::InList { .. } | Expr::Between { .. } => 4,
            Expr::Unary { op: UnaryOp::Neg, .. } => 7,
            Expr::Column { .. } | Expr::Literal(_) | Expr::Cast { .. } => 8,
        }
    }
}

/// SQL truth value of a boolean value (`None` = NULL / not a boolean).
fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn bool3(b: Option<bool>) -> Value {
    b.map_or(Value::Null, Value::Bool)
}

fn and3(l: Option<bool>, r: Option<bool>) -> Option<bool> {
    match (l, r) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or3(l: Option<bool>, r: Option<bool>) -> Option<bool> {
    match (l, r) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

fn cmp_holds(op: BinaryOp, o: Ordering) -> bool {
    match op {
        BinaryOp::Eq => o == Ordering::Equal,
        BinaryOp::NotEq => o != Ordering::Equal,
        BinaryOp::Lt => o == Ordering::Less,
        BinaryOp::LtEq => o != Ordering::Greater,
        BinaryOp::Gt => o == Ordering::Greater,
        BinaryOp::GtEq => o != Ordering::Less,
        _ => false,
    }
}

fn arith(op: BinaryOp, l: &Value, r: &Value) -> Value {
    if let (Value::Int(a), Value::Int(b)) = (l, r) {
        let (a, b) = (*a, *b);
        let v = match op {
            BinaryOp::Add => a.checked_add(b),
            BinaryOp::Sub => a.checked_sub(b),
            BinaryOp::Mul => a.checked_mul(b),
            BinaryOp::Div => a.checked_div(b),
            BinaryOp::Mod => a.checked_rem(b),
            _ => None,
        };
        return v.map_or(Value::Null, Value::Int);
    }
    let (Some(a), Some(b)) = (l.as_f64(), r.as_f64()) else {
        return Value::Null;
    };
    match op {
        BinaryOp::Add => Value::Float(a + b),
        BinaryOp::Sub => Value::Float(a - b),
        BinaryOp::Mul => Value::Float(a * b),
        BinaryOp::Div if b != 0.0 => Value::Float(a / b),
        BinaryOp::Mod if b != 0.0 => Value::Float(a % b),
        _ => Value::Null,
    }
}

/// NaN equals NaN and is greater than every other float (PostgreSQL's order).
fn cmp_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Exact comparison of an int with a float.
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() || f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let t = f.trunc();
    // In range: -2^63 <= t < 2^63, so the conversion is exact.
    match i.cmp(&(t as i64)) {
        Ordering::Equal => cmp_f64(t, f),
        o => o,
    }
}

/// Compares two values; `None` when either is NULL or the types do not compare.
pub(crate) fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    Some(match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Float(x), Value::Float(y)) => cmp_f64(*x, *y),
        (Value::Int(x), Value::Float(y)) => cmp_int_float(*x, *y),
        (Value::Float(x), Value::Int(y)) => cmp_int_float(*y, *x).reverse(),
        (Value::Str(x), Value::Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        _ => return None,
    })
}

fn cast(v: &Value, to: DataType) -> Value {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    match (v, to) {
        (Value::Null, _) => Value::Null,
        (Value::Int(i), DataType::Float) => Value::Float(*i as f64),
        (Value::Float(f), DataType::Int) => {
            let r = f.round();
            if r.is_finite() && (-TWO_63..TWO_63).contains(&r) {
                Value::Int(r as i64)
            } else {
                Value::Null
            }
        }
        (Value::Bool(b), DataType::Int) => Value::Int(i64::from(*b)),
        (Value::Bool(b), DataType::Float) => Value::Float(f64::from(u8::from(*b))),
        (Value::Int(i), DataType::Bool) => Value::Bool(*i != 0),
        (Value::Float(f), DataType::Bool) => Value::Bool(*f != 0.0),
        (Value::Str(s), DataType::Int) => s.trim().parse().map_or(Value::Null, Value::Int),
        (Value::Str(s), DataType::Float) => s.trim().parse().map_or(Value::Null, Value::Float),
        (Value::Str(s), DataType::Bool) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "yes" | "y" | "on" | "1" => Value::Bool(true),
            "false" | "f" | "no" | "n" | "off" | "0" => Value::Bool(false),
            _ => Value::Null,
        },
        (v, DataType::Str) => Value::Str(v.to_string().into()),
        (v, _) => v.clone(),
    }
}

fn is_numeric(t: Option<DataType>) -> bool {
    matches!(t, None | Some(DataType::Int) | Some(DataType::Float))
}

fn numeric_result(l: Option<DataType>, r: Option<DataType>) -> Option<DataType> {
    match (l, r) {
        (Some(DataType::Float), _) | (_, Some(DataType::Float)) => Some(DataType::Float),
        (Some(DataType::Int), _) | (_, Some(DataType::Int)) => Some(DataType::Int),
        _ => None,
    }
}

fn comparable(a: Option<DataType>, b: Option<DataType>) -> bool {
    match (a, b) {
        (None, _) | (_, None) => true,
        (Some(x), Some(y)) => x == y || (is_numeric(Some(x)) && is_numeric(Some(y))),
    }
}

fn type_name(t: Option<DataType>) -> &'static str {
    t.map_or("null", DataType::name)
}

// ---------------------------------------------------------------------------------------
// Rendering

fn is_plain_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Writes a column name, double-quoted when it is not a plain identifier.
pub(crate) fn write_ident(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if is_plain_ident(name) {
        f.write_str(name)
    } else {
        write!(f, "\"{}\"", name.replace('"', "\"\""))
    }
}

fn write_literal(f: &mut fmt::Formatter<'_>, v: &Value) -> fmt::Result {
    match v {
        Value::Null => f.write_str("NULL"),
        Value::Int(i) => write!(f, "{i}"),
        Value::Float(x) => write!(f, "{x:?}"),
        Value::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
        Value::Bool(true) => f.write_str("TRUE"),
        Value::Bool(false) => f.write_str("FALSE"),
    }
}

fn cast_type_name(t: DataType) -> &'static str {
    match t {
        DataType::Int => "BIGINT",
        DataType::Float => "DOUBLE",
        DataType::Str => "VARCHAR",
        DataType::Bool => "BOOLEAN",
    }
}

impl Expr {
    /// Writes `self`, parenthesized when it binds looser than `min`.
    fn write_at(&self, f: &mut fmt::Formatter<'_>, min: u8) -> fmt::Result {
        if self.precedence() < min {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column { name, .. } => write_ident(f, name),
            Expr::Literal(v) => write_literal(f, v),
            Expr::Unary { op: UnaryOp::Neg, expr } => {
                f.write_str("-")?;
                let negative_lit = matches!(
                    **expr,
                    Expr::Literal(Value::Int(i)) if i < 0
                ) || matches!(**expr, Expr::Literal(Value::Float(x)) if x.is_sign_negative());
                if negative_lit || matches!(**expr, Expr::Unary { op: UnaryOp::Neg, .. }) {
                    write!(f, "({expr})")
                } else {
                    expr.write_at(f, 7)
                }
            }
            Expr::Unary { op: UnaryOp::Not, expr } => {
                f.write_str("NOT ")?;
                expr.write_at(f, 3)
            }
            Expr::Binary { op, left, right } => {
                let p = op.precedence();
                left.write_at(f, if op.is_comparison() { p + 1 } else { p })?;
                write!(f, " {} ", op.symbol())?;
                right.write_at(f, p + 1)
            }
            Expr::IsNull { expr, negated } => {
                expr.write_at(f, 5)?;
                f.write_str(if *negated { " IS NOT NULL" } else { " IS NULL" })
            }
            Expr::InList { expr, list, negated } => {
                expr.write_at(f, 5)?;
                f.write_str(if *negated { " NOT IN (" } else { " IN (" })?;
                for (i, e) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{e}")?;
                }
                f.write_str(")")
            }
            Expr::Between { expr, low, high, negated } => {
                expr.write_at(f, 5)?;
                f.write_str(if *negated { " NOT BETWEEN " } else { " BETWEEN " })?;
                low.write_at(f, 5)?;
                f.write_str(" AND ")?;
                high.write_at(f, 5)
            }
            Expr::Cast { expr, to } => write!(f, "CAST({expr} AS {})", cast_type_name(*to)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Compilation

/// Name-resolution context: the schema and the names a column may be qualified with
/// (the FROM table and its alias).
pub(crate) struct Scope<'a> {
    pub(crate) schema: &'a Schema,
    pub(crate) qualifiers: Vec<String>,
}

impl Scope<'_> {
    /// Resolves a column name (exact spelling first, then case-insensitively).
    pub(crate) fn column(&self, ident: &ast::Ident) -> Result<Expr, SqlError> {
        let fields = self.schema.fields();
        let index = fields
            .iter()
            .position(|f| f.name == ident.value)
            .or_else(|| self.schema.index_of(&ident.value))
            .ok_or_else(|| SqlError::UnknownColumn {
                name: ident.value.clone(),
                available: fields.iter().map(|f| f.name.clone()).collect(),
                at: loc(ident.span),
            })?;
        let field = &fields[index];
        Ok(Expr::Column { index, name: field.name.as_str().into(), ty: field.ty })
    }

    /// Resolves `col` or `table.col`; `None` if `e` is not a column reference.
    pub(crate) fn column_ref(&self, e: &ast::Expr) -> Option<Result<Expr, SqlError>> {
        match e {
            ast::Expr::Identifier(id) => Some(self.column(id)),
            ast::Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let q = &parts[0].value;
                if self.qualifiers.iter().any(|n| n.eq_ignore_ascii_case(q)) {
                    Some(self.column(&parts[1]))
                } else {
                    Some(Err(SqlError::Invalid {
                        construct: e.to_string(),
                        message: format!(
                            "`{q}` is not the input table; qualify columns with {}",
                            self.qualifiers
                                .iter()
                                .map(|n| format!("`{n}`"))
                                .collect::<Vec<_>>()
                                .join(" or ")
                        ),
                        at: loc(e.span()),
                    }))
                }
            }
            ast::Expr::Nested(inner) => self.column_ref(inner),
            _ => None,
        }
    }
}

const SUPPORTED_EXPR: &str = "columns, literals (integers, decimals, 'strings', TRUE, FALSE, \
     NULL), + - * / %, unary -, = <> != < <= > >=, AND, OR, NOT, IS [NOT] NULL, [NOT] IN \
     (list), [NOT] BETWEEN, CAST(x AS type) and parentheses";

fn unsupported(e: &ast::Expr, what: &str) -> SqlError {
    SqlError::Unsupported {
        construct: format!("{what} `{e}`"),
        supported: SUPPORTED_EXPR.to_string(),
        at: loc(e.span()),
    }
}

fn type_error(e: &ast::Expr, message: String) -> SqlError {
    SqlError::Type { construct: e.to_string(), message, at: loc(e.span()) }
}

/// Parses a numeric literal's text: an integer when it has no `.`/exponent, else a float.
pub(crate) fn number_literal(text: &str, e: &ast::Expr) -> Result<Value, SqlError> {
    if text.contains(['.', 'e', 'E']) {
        text.parse::<f64>().map(Value::Float).map_err(|_| SqlError::Invalid {
            construct: e.to_string(),
            message: "not a valid number".to_string(),
            at: loc(e.span()),
        })
    } else {
        text.parse::<i64>().map(Value::Int).map_err(|_| SqlError::Invalid {
            construct: e.to_string(),
            message: "integer literal out of the 64-bit range (write it with a decimal point \
                      for a float)"
                .to_string(),
            at: loc(e.span()),
        })
    }
}

fn cast_target(dt: &ast::DataType) -> Option<DataType> {
    let s = dt.to_string().to_ascii_lowercase();
    let base = s.split('(').next().unwrap_or("").trim();
    match base {
        "double precision" | "float8" | "float4" | "decimal" | "numeric" => Some(DataType::Float),
        "int8" | "int4" | "smallint" | "tinyint" | "int64" => Some(DataType::Int),
        "char" | "character varying" | "character" => Some(DataType::Str),
        other => DataType::parse(other),
    }
}

/// Compiles an expression and checks that it is boolean (a WHERE or FILTER condition).
pub(crate) fn compile_predicate(
    e: &ast::Expr,
    scope: &Scope<'_>,
    clause: &str,
) -> Result<Expr, SqlError> {
    let c = compile(e, scope)?;
    match c.data_type() {
        Some(DataType::Bool) | None => Ok(c),
        Some(t) => {
            Err(type_error(e, format!("{clause} needs a boolean condition, found type {t}")))
        }
    }
}

/// Compiles a `sqlparser` expression, resolving columns and checking types.
pub(crate) fn compile(e: &ast::Expr, scope: &Scope<'_>) -> Result<Expr, SqlError> {
    if let Some(col) = scope.column_ref(e) {
        return col;
    }
    match e {
        ast::Expr::Nested(inner) => compile(inner, scope),
        ast::Expr::Value(v) => match &v.value {
            ast::Value::Number(text, _) => number_literal(text, e).map(Expr::Literal),
            ast::Value::SingleQuotedString(s) => Ok(Expr::Literal(Value::Str(s.as_str().into()))),
            ast::Value::Boolean(b) => Ok(Expr::Literal(Value::Bool(*b))),
            ast::Value::Null => Ok(Expr::Literal(Value::Null)),
            _ => Err(unsupported(e, "literal")),
        },
        ast::Expr::UnaryOp { op, expr } => match op {
            ast::UnaryOperator::Minus => {
                // Fold `-<number>` into a literal (so i64::MIN is writable).
                if let ast::Expr::Value(v) = &**expr {
                    if let ast::Value::Number(text, _) = &v.value {
                        return number_literal(&format!("-{text}"), e).map(Expr::Literal);
                    }
                }
                let inner = compile(expr, scope)?;
                if !is_numeric(inner.data_type()) {
                    return Err(type_error(
                        e,
                        format!(
                            "unary minus needs a number, found {}",
                            type_name(inner.data_type())
                        ),
                    ));
                }
                Ok(Expr::Unary { op: UnaryOp::Neg, expr: Box::new(inner) })
            }
            ast::UnaryOperator::Plus => {
                let inner = compile(expr, scope)?;
                if !is_numeric(inner.data_type()) {
                    return Err(type_error(
                        e,
                        format!(
                            "unary plus needs a number, found {}",
                            type_name(inner.data_type())
                        ),
                    ));
                }
                Ok(inner)
            }
            ast::UnaryOperator::Not => {
                let inner = compile(expr, scope)?;
                if !matches!(inner.data_type(), None | Some(DataType::Bool)) {
                    return Err(type_error(
                        e,
                        format!("NOT needs a boolean, found {}", type_name(inner.data_type())),
                    ));
                }
                Ok(Expr::Unary { op: UnaryOp::Not, expr: Box::new(inner) })
            }
            _ => Err(unsupported(e, "operator")),
        },
        ast::Expr::BinaryOp { left, op, right } => {
            let op = match op {
                ast::BinaryOperator::Plus => BinaryOp::Add,
                ast::BinaryOperator::Minus => BinaryOp::Sub,
                ast::BinaryOperator::Multiply => BinaryOp::Mul,
                ast::BinaryOperator::Divide => BinaryOp::Div,
                ast::BinaryOperator::Modulo => BinaryOp::Mod,
                ast::BinaryOperator::Eq => BinaryOp::Eq,
                ast::BinaryOperator::NotEq => BinaryOp::NotEq,
                ast::BinaryOperator::Lt => BinaryOp::Lt,
                ast::BinaryOperator::LtEq => BinaryOp::LtEq,
                ast::BinaryOperator::Gt => BinaryOp::Gt,
                ast::BinaryOperator::GtEq => BinaryOp::GtEq,
                ast::BinaryOperator::And => BinaryOp::And,
                ast::BinaryOperator::Or => BinaryOp::Or,
                _ => return Err(unsupported(e, "operator")),
            };
            let l = compile(left, scope)?;
            let r = compile(right, scope)?;
            let (lt, rt) = (l.data_type(), r.data_type());
            let ok = if op.is_arithmetic() {
                is_numeric(lt) && is_numeric(rt)
            } else if op.is_comparison() {
                comparable(lt, rt)
            } else {
                matches!(lt, None | Some(DataType::Bool))
                    && matches!(rt, None | Some(DataType::Bool))
            };
            if !ok {
                let need = if op.is_arithmetic() {
                    "numbers"
                } else if op.is_comparison() {
                    "comparable types (numbers with numbers, strings with strings, booleans \
                     with booleans)"
                } else {
                    "booleans"
                };
                return Err(type_error(
                    e,
                    format!(
                        "`{}` needs {need}, found {} and {}",
                        op.symbol(),
                        type_name(lt),
                        type_name(rt)
                    ),
                ));
            }
            Ok(Expr::Binary { op, left: Box::new(l), right: Box::new(r) })
        }
        ast::Expr::IsNull(inner) | ast::Expr::IsNotNull(inner) => Ok(Expr::IsNull {
            expr: Box::new(compile(inner, scope)?),
            negated: matches!(e, ast::Expr::IsNotNull(_)),
        }),
        ast::Expr::InList { expr, list, negated } => {
            let x = compile(expr, scope)?;
            let mut items = Vec::with_capacity(list.len());
            for item in list {
                let c = compile(item, scope)?;
                if !comparable(x.data_type(), c.data_type()) {
                    return Err(type_error(
                        e,
                        format!(
                            "IN compares {} with {} (`{item}`)",
                            type_name(x.data_type()),
                            type_name(c.data_type())
                        ),
                    ));
                }
                items.push(c);
            }
            Ok(Expr::InList { expr: Box::new(x), list: items, negated: *negated })
        }
        ast::Expr::Between { expr, negated, low, high } => {
            let x = compile(expr, scope)?;
            let lo = compile(low, scope)?;
            let hi = compile(high, scope)?;
            for b in [&lo, &hi] {
                if !comparable(x.data_type(), b.data_type()) {
                    return Err(type_error(
                        e,
                        format!(
                            "BETWEEN compares {} with {}",
                            type_name(x.data_type()),
                            type_name(b.data_type())
                        ),
                    ));
                }
            }
            Ok(Expr::Between {
                expr: Box::new(x),
                low: Box::new(lo),
                high: Box::new(hi),
                negated: *negated,
            })
        }
        ast::Expr::Cast { expr, data_type, format: None, .. } => {
            let to = cast_target(data_type).ok_or_else(|| SqlError::Unsupported {
                construct: format!("cast target type `{data_type}`"),
                supported: "BIGINT/INT/INTEGER, DOUBLE/FLOAT/REAL, VARCHAR/TEXT/STRING, \
                            BOOLEAN"
                    .to_string(),
                at: loc(e.span()),
            })?;
            Ok(Expr::Cast { expr: Box::new(compile(expr, scope)?), to })
        }
        ast::Expr::Function(func) => {
            let name = func.name.to_string().to_ascii_lowercase();
            if super::parse::is_aggregate_name(&name) {
                Err(SqlError::Unsupported {
                    construct: format!("aggregate `{e}` inside an expression"),
                    supported: "aggregates only as whole SELECT items with OVER, e.g. \
                                `SUM(amount) OVER w`"
                        .to_string(),
                    at: loc(e.span()),
                })
            } else {
                Err(unsupported(e, "function call"))
            }
        }
        ast::Expr::Subquery(_) | ast::Expr::Exists { .. } | ast::Expr::InSubquery { .. } => {
            Err(unsupported(e, "subquery"))
        }
        _ => Err(unsupported(e, "expression")),
    }
}
