//! Aggregates: their state layouts and the insert / evict / result contract.
//! (Interface fixed by the engine runtime; implementation in progress.)

use crate::value::{DataType, EventKey, Value};

/// An aggregate function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AggKind {
    /// `COUNT(*)`: rows in the window.
    CountStar,
    /// `COUNT(x)`: non-NULL values.
    Count,
    /// `COUNT(DISTINCT x)`.
    CountDistinct,
    /// `SUM(x)`.
    Sum,
    /// `AVG(x)`.
    Avg,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
    /// `STDDEV_SAMP(x)` (alias `STDDEV`).
    StddevSamp,
    /// `VAR_SAMP(x)` (alias `VARIANCE`).
    VarSamp,
    /// `MEDIAN(x)` = `PERCENTILE_CONT(0.5)`.
    Median,
    /// `PERCENTILE_CONT(p) WITHIN GROUP (ORDER BY x)`, `0 <= p <= 1`.
    PercentileCont(f64),
    /// `FIRST_VALUE(x)`: value of the oldest event in the window (RESPECT NULLS).
    FirstValue,
    /// `LAST_VALUE(x)`: value of the newest event in the window (RESPECT NULLS).
    LastValue,
}

impl AggKind {
    /// SQL name.
    pub fn name(&self) -> &'static str {
        "agg"
    }
}

/// The aggregates that share one group-by node; their states are stored together as
/// one value per group key.
#[derive(Clone, Debug)]
pub struct AggSet {
    _aggs: Vec<(AggKind, Option<DataType>)>,
}

impl AggSet {
    /// `aggs[i]` = (function, argument type; `None` for `COUNT(*)`).
    pub fn new(aggs: &[(AggKind, Option<DataType>)]) -> AggSet {
        AggSet { _aggs: aggs.to_vec() }
    }

    /// Adds an event.
    pub fn insert(
        &self,
        _old: Option<&[u8]>,
        _out: &mut Vec<u8>,
        _key: EventKey,
        _args: &[Value],
        _horizon: EventKey,
    ) {
        unimplemented!()
    }

    /// Removes the oldest event; returns true when the window is now empty.
    pub fn evict(&self, _old: &[u8], _out: &mut Vec<u8>, _key: EventKey, _args: &[Value]) -> bool {
        unimplemented!()
    }

    /// Removes an event at or after the horizon.
    pub fn remove_recent(&self, _old: &[u8], _out: &mut Vec<u8>, _key: EventKey, _args: &[Value]) {
        unimplemented!()
    }

    /// Appends one result per aggregate.
    pub fn results(&self, _state: &[u8], _out: &mut Vec<Value>) {
        unimplemented!()
    }

    /// Appends the results of an empty window.
    pub fn empty_results(&self, _out: &mut Vec<Value>) {
        unimplemented!()
    }
}
