//! SQL metrics (stub interface; replaced by the sql module).
#![allow(missing_docs)]
use crate::aggregate::AggKind;
use crate::value::{DataType, Row, Value};
use std::fmt;

#[derive(Clone, Debug)]
pub struct QuerySpec {
    pub items: Vec<SelectItem>,
    pub filter: Option<Expr>,
    pub windows: Vec<WindowSpec>,
}
#[derive(Clone, Debug)]
pub enum SelectItem {
    Column { name: String, index: usize },
    Metric { name: String, metric: MetricSpec },
}
#[derive(Clone, Debug)]
pub struct MetricSpec {
    pub agg: AggKind,
    pub arg: Option<Expr>,
    pub arg_type: Option<DataType>,
    pub filter: Option<Expr>,
    pub window: usize,
}
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WindowSpec {
    pub partition_by: Vec<usize>,
    pub frame: Frame,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub start: i64,
    pub start_open: bool,
    pub end: i64,
    pub end_open: bool,
}
impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self)
    }
}
#[derive(Clone, Debug)]
pub enum Expr {
    Column(usize),
    Literal(Value),
}
impl Expr {
    pub fn eval(&self, row: &Row) -> Value {
        match self {
            Expr::Column(i) => row[*i].clone(),
            Expr::Literal(v) => v.clone(),
        }
    }
    pub fn eval_bool(&self, row: &Row) -> bool {
        matches!(self.eval(row), Value::Bool(true))
    }
}
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self)
    }
}
#[derive(Debug)]
pub struct SqlError(pub String);
impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for SqlError {}
pub fn parse_query(_sql: &str, _schema: &crate::value::Schema) -> Result<QuerySpec, SqlError> {
    Err(SqlError("stub".into()))
}
