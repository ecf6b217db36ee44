//! Aggregates: their state layouts and the insert / evict / result contract.
//!
//! This module owns how the aggregates of one group-by node keep their state for one
//! partition key as ONE byte value in a key-value store, and how that value changes per
//! event. Every operation is a read-modify-write: it reads the old bytes and appends the new
//! bytes to an empty buffer handed in by the caller. Fixed-size states are read and written
//! as little-endian fields in place (no serde, no allocation); variable-size (holistic)
//! states use length-prefixed sections.
//!
//! # Contract
//!
//! * [`AggSet::insert`] adds an event with its order key and the `horizon` under which
//!   it is inserted. Horizons passed to successive inserts never decrease. Events with a key
//!   at or after the horizon may later be taken out again by [`AggSet::remove_recent`];
//!   events before it only leave by [`AggSet::evict`].
//! * [`AggSet::evict`] removes the oldest event of the window (evictions come in increasing
//!   key order; the event was inserted). It returns true when the window is empty; the
//!   caller then deletes the key, so empty windows leave no state behind.
//! * [`AggSet::remove_recent`] removes an event whose key is at or after the horizon passed
//!   at its own and every later insert (used on a copy of the state to compute a late
//!   event's own result). It is exact for every aggregate.
//! * An insert may place an event older than everything in the state (re-adding evicted
//!   events to a copy): every aggregate puts it at its key position.
//! * A set built with [`AggSet::without_evictions`] (an `UNBOUNDED PRECEDING` window) is
//!   never evicted from; its inserts drop the entries before the horizon that no result
//!   can need any more, so MIN/MAX and FIRST_VALUE/LAST_VALUE keep O(1) entries plus those
//!   at or after the horizon instead of growing with the window.
//! * NULL handling is SQL's: aggregates skip NULL arguments, except `COUNT(*)` (counts rows)
//!   and `FIRST_VALUE`/`LAST_VALUE` (RESPECT NULLS). On no non-NULL input COUNT gives 0 and
//!   every other aggregate NULL; `VAR_SAMP`/`STDDEV_SAMP` need two values.
//!
//! The `try_*` methods report a state that does not decode or an argument of the wrong type
//! as an [`AggStateError`]; the plain methods (the engine runtime's interface) panic on
//! those, which only happens if the store returned bytes this `AggSet` did not write or the
//! caller broke the contract above.
//!
//! # FORMAT
//!
//! A state value is `[rows u64 LE][state of aggregate 0][state of aggregate 1]...`.
//! Fixed-size states are inline; variable-size states are a section `[len u32 LE][len
//! bytes]` (an empty section, `len = 0`, is an empty state). All integers and floats are
//! little-endian; `KSum` is a Neumaier compensated sum `[s f64][c f64]` whose value is
//! `s + c`. An absent state (`old == None`) equals the state of all zero bytes with empty
//! sections.
//!
//! | aggregate | state | insert / evict / remove_recent | result |
//! |---|---|---|---|
//! | `COUNT(*)` | nothing (uses `rows`) | O(1) | O(1) |
//! | `COUNT(x)` | `[n u64]` (8 B) | O(1) | O(1) |
//! | `SUM`/`AVG` int | `[sum i128][n u64]` (24 B), exact | O(1) | O(1) |
//! | `SUM`/`AVG` float | `[n u64][finite sum KSum][nan u64][+inf u64][-inf u64]` (48 B) | O(1) | O(1) |
//! | `VAR_SAMP`/`STDDEV_SAMP` | `[n u64][non-finite u64][K f64][Σ(x-K) KSum][Σ(x-K)² KSum]` (56 B) | O(1) | O(1) |
//! | `MIN`/`MAX` | section: `[mono_bytes u32][entry]*`, entry = `[time i64][seq u64][tagged value][entry_len u32]` | insert O(1) amortized comparisons (+ O(t) to place a late key in a tail of t entries); evict O(1); remove_recent O(t) | O(t) |
//! | `COUNT(DISTINCT)` | section: `[key_len u32][Value::encode_key bytes][count u64]*`, sorted by key bytes | O(d) for d distinct values | O(d) |
//! | `MEDIAN`/`PERCENTILE_CONT` | section: `[n u64][value f64][count u64]*`, sorted by `f64::total_cmp` | O(log d) search | O(d) |
//! | `FIRST_VALUE`/`LAST_VALUE` | section: `[entry]*` for every event of the window (NULLs included) in key order | O(1) at the ends, O(w) to place a late key | O(1) |
//!
//! A set built with [`AggSet::external_holistic`] keeps `COUNT(DISTINCT)`,
//! `MEDIAN`/`PERCENTILE_CONT` (and `FIRST_VALUE`/`LAST_VALUE` when it evicts) out of the
//! value: they take no bytes in it and live in order-statistics trees
//! ([`external`]), O(log n) per update.
//!
//! The tagged value is a tag byte (0 NULL, 1 int, 2 float, 3 string, 4 bool) followed by
//! i64 LE / f64 LE / `[len u32][UTF-8]` / one byte. The trailing `entry_len` lets lists be
//! walked from the back. Every operation also copies the whole state once (the store's
//! read-modify-write), so the byte cost of an op is O(state size): O(1) for the invertible
//! aggregates, O(monotonic deque + tail) for MIN/MAX, O(d) for DISTINCT/percentiles and
//! O(window) for FIRST_VALUE/LAST_VALUE (they keep every event, as the window's oldest or
//! newest event must be known after any eviction or late removal).
//!
//! ## Numerics
//!
//! * Int `SUM`/`AVG` accumulate in i128: exact and invertible. `SUM` reports an int when the
//!   sum fits in i64, else a float.
//! * Float sums use Neumaier compensated add and subtract. NaN and infinities are counted
//!   aside (they would poison an invertible sum forever) and combined at result time as
//!   IEEE addition would. When no finite value is left, the sum is reset to exactly 0.
//! * Variance uses shifted data: `K` is the first finite value inserted while the state held
//!   none; sums of `x-K` and `(x-K)²` are compensated; `K` and both sums reset to exactly 0
//!   when the last finite value leaves. Known limit: `K` stays while the window is never
//!   empty, so a series that drifts by many orders of magnitude more than its spread loses
//!   precision (as any shifted-data algorithm does). A finite float sum that overflows f64
//!   is not recovered after the large values leave.
//! * MIN/MAX order floats by `f64::total_cmp` (NaN above +inf, -0 below +0), strings by
//!   bytes, `false < true`.
//! * `COUNT(DISTINCT)` compares values by [`Value::encode_key`] (floats fold -0 to +0 and all
//!   NaNs to one).
//! * Percentiles work on f64 (ints widened), as PostgreSQL does for `bigint`.

mod codec;
pub mod external;
mod holistic;
mod minmax;
mod numeric;
pub mod record;
pub(crate) mod rows;
#[cfg(test)]
mod tests;

use crate::value::{DataType, EventKey, Value};
use codec::{begin_section, end_section, put_u64, Reader, Scalar};
use std::fmt;

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
    /// The SQL name, upper case (`COUNT(*)` and `COUNT(DISTINCT)` spelled out).
    pub fn name(&self) -> &'static str {
        match self {
            AggKind::CountStar => "COUNT(*)",
            AggKind::Count => "COUNT",
            AggKind::CountDistinct => "COUNT(DISTINCT)",
            AggKind::Sum => "SUM",
            AggKind::Avg => "AVG",
            AggKind::Min => "MIN",
            AggKind::Max => "MAX",
            AggKind::StddevSamp => "STDDEV_SAMP",
            AggKind::VarSamp => "VAR_SAMP",
            AggKind::Median => "MEDIAN",
            AggKind::PercentileCont(_) => "PERCENTILE_CONT",
            AggKind::FirstValue => "FIRST_VALUE",
            AggKind::LastValue => "LAST_VALUE",
        }
    }

    /// The result type for an argument of type `arg` (`None` = no argument, as in
    /// `COUNT(*)`), or a message saying what was expected.
    ///
    /// `SUM(int)` is typed int; a sum beyond the i64 range is reported as a float value.
    /// `AVG`, `STDDEV_SAMP`, `VAR_SAMP`, `MEDIAN` and `PERCENTILE_CONT` give floats.
    pub fn result_type(&self, arg: Option<DataType>) -> Result<DataType, String> {
        let name = self.name();
        if *self == AggKind::CountStar {
            return Ok(DataType::Int);
        }
        let Some(ty) = arg else {
            return Err(format!("{name} needs an argument column"));
        };
        let numeric = |out: DataType| match ty {
            DataType::Int | DataType::Float => Ok(out),
            other => Err(format!("{name} needs a numeric (int or float) argument, found {other}")),
        };
        match self {
            AggKind::CountStar | AggKind::Count | AggKind::CountDistinct => Ok(DataType::Int),
            AggKind::Sum => numeric(ty),
            AggKind::Avg | AggKind::StddevSamp | AggKind::VarSamp | AggKind::Median => {
                numeric(DataType::Float)
            }
            AggKind::PercentileCont(p) => {
                if !(0.0..=1.0).contains(p) {
                    return Err(format!(
                        "PERCENTILE_CONT fraction must be between 0 and 1, found {p}"
                    ));
                }
                numeric(DataType::Float)
            }
            AggKind::Min | AggKind::Max | AggKind::FirstValue | AggKind::LastValue => Ok(ty),
        }
    }

    /// True for the aggregates whose state is fixed-size and updated by subtraction on
    /// evict in O(1) (`COUNT`, `SUM`, `AVG`, `VAR_SAMP`, `STDDEV_SAMP`); false for MIN/MAX
    /// (monotonic deque) and the holistic ones.
    pub fn is_invertible(&self) -> bool {
        matches!(
            self,
            AggKind::CountStar
                | AggKind::Count
                | AggKind::Sum
                | AggKind::Avg
                | AggKind::StddevSamp
                | AggKind::VarSamp
        )
    }
}

/// Why an aggregate state could not be updated or read.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AggStateError {
    /// The state ended before a field. `agg` is the aggregate's position (`None`: the
    /// row-count header).
    Truncated {
        /// Aggregate position, `None` for the header.
        agg: Option<usize>,
        /// Offset of the field in the state value.
        offset: usize,
        /// Bytes the field needs.
        needed: usize,
        /// Length of the state value.
        len: usize,
    },
    /// Bytes remained after the last aggregate's state.
    TrailingBytes {
        /// Offset where the states ended.
        offset: usize,
        /// Length of the state value.
        len: usize,
    },
    /// A field holds a value no writer produces.
    Corrupt {
        /// Aggregate position, `None` for the header.
        agg: Option<usize>,
        /// Offset of the field (within the state value, or within the section being built).
        offset: usize,
        /// What was found.
        what: &'static str,
    },
    /// A variable-size state outgrew its u32 length prefix.
    TooLarge {
        /// Aggregate position.
        agg: Option<usize>,
        /// Size in bytes.
        len: usize,
    },
    /// The argument slice does not hold one value per aggregate.
    ArgCount {
        /// Aggregates in the set.
        expected: usize,
        /// Arguments passed.
        found: usize,
    },
    /// An argument does not have its column's type.
    ArgType {
        /// Aggregate position.
        agg: Option<usize>,
        /// Aggregate name.
        name: &'static str,
        /// Declared argument type.
        expected: DataType,
        /// Type of the value passed.
        found: DataType,
    },
    /// An evicted or removed event is not in a state that keeps every event.
    Missing {
        /// Aggregate position.
        agg: Option<usize>,
        /// Aggregate name.
        name: &'static str,
        /// The event's key.
        key: EventKey,
    },
    /// An evict or remove on a state that holds no rows.
    NoRows {
        /// The event's key.
        key: EventKey,
    },
    /// An evict on a set built [`without_evictions`](AggSet::without_evictions).
    NoEvictions {
        /// The event's key.
        key: EventKey,
    },
    /// The set was built by [`AggSet::new`] from an aggregate / type pair that
    /// [`AggKind::result_type`] rejects.
    Invalid {
        /// Aggregate position.
        agg: usize,
        /// Why the pair is invalid.
        message: String,
    },
}

fn part(agg: Option<usize>) -> String {
    match agg {
        Some(i) => format!("aggregate #{i}"),
        None => "the row-count header".to_string(),
    }
}

impl fmt::Display for AggStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AggStateError::Truncated { agg, offset, needed, len } => write!(
                f,
                "aggregate state is truncated: {} needs {needed} bytes at offset {offset} but \
                 the state is {len} bytes long (the store returned bytes this aggregate set \
                 did not write)",
                part(*agg)
            ),
            AggStateError::TrailingBytes { offset, len } => write!(
                f,
                "aggregate state has {} unexpected bytes after offset {offset} (length {len}); \
                 was it written by a different aggregate set?",
                len - offset
            ),
            AggStateError::Corrupt { agg, offset, what } => {
                write!(
                    f,
                    "aggregate state is corrupt: {} holds {what} at offset {offset}",
                    part(*agg)
                )
            }
            AggStateError::TooLarge { agg, len } => write!(
                f,
                "aggregate state of {} would be {len} bytes, more than a u32 length prefix \
                 allows; use a smaller window or fewer distinct values",
                part(*agg)
            ),
            AggStateError::ArgCount { expected, found } => write!(
                f,
                "aggregate set has {expected} aggregates but {found} argument values were passed \
                 (pass one per aggregate, any value for COUNT(*))"
            ),
            AggStateError::ArgType { agg, name, expected, found } => write!(
                f,
                "{} ({name}) expects a {expected} argument, got a {found} value",
                part(*agg)
            ),
            AggStateError::Missing { agg, name, key } => write!(
                f,
                "{} ({name}): the event at time {} seq {} was removed but is not in the state \
                 (evictions must follow inserts, oldest first)",
                part(*agg),
                key.time,
                key.seq
            ),
            AggStateError::NoRows { key } => write!(
                f,
                "cannot remove the event at time {} seq {}: the aggregate state holds no rows",
                key.time, key.seq
            ),
            AggStateError::Invalid { agg, message } => {
                write!(f, "aggregate #{agg} is invalid: {message}")
            }
            AggStateError::NoEvictions { key } => write!(
                f,
                "cannot evict the event at time {} seq {}: the aggregate set was built without \
                 evictions (an UNBOUNDED PRECEDING window)",
                key.time, key.seq
            ),
        }
    }
}

impl std::error::Error for AggStateError {}

/// How one aggregate's state is kept (resolved once from kind and argument type).
#[derive(Clone, Debug)]
enum Op {
    CountStar,
    Count,
    SumInt {
        avg: bool,
    },
    SumFloat {
        avg: bool,
    },
    Var {
        sqrt: bool,
    },
    MinMax {
        max: bool,
        ty: DataType,
    },
    Distinct {
        ty: DataType,
    },
    Percentile {
        p: f64,
    },
    FirstLast {
        last: bool,
        ty: DataType,
    },
    /// A holistic aggregate kept outside the inline state, in an order-statistics tree
    /// ([`external::HolisticTrees`]): no inline bytes; its result is filled in by the
    /// caller from the tree.
    External {
        distinct: bool,
    },
    Invalid(String),
}

impl Op {
    fn resolve(kind: AggKind, arg: Option<DataType>) -> Op {
        if let Err(e) = kind.result_type(arg) {
            return Op::Invalid(e);
        }
        let ty = arg.unwrap_or(DataType::Int);
        match kind {
            AggKind::CountStar => Op::CountStar,
            AggKind::Count => Op::Count,
            AggKind::CountDistinct => Op::Distinct { ty },
            AggKind::Sum | AggKind::Avg => {
                let avg = kind == AggKind::Avg;
                if ty == DataType::Int {
                    Op::SumInt { avg }
                } else {
                    Op::SumFloat { avg }
                }
            }
            AggKind::Min => Op::MinMax { max: false, ty },
            AggKind::Max => Op::MinMax { max: true, ty },
            AggKind::StddevSamp => Op::Var { sqrt: true },
            AggKind::VarSamp => Op::Var { sqrt: false },
            AggKind::Median => Op::Percentile { p: 0.5 },
            AggKind::PercentileCont(p) => Op::Percentile { p },
            AggKind::FirstValue => Op::FirstLast { last: false, ty },
            AggKind::LastValue => Op::FirstLast { last: true, ty },
        }
    }

    /// Appends the empty state.
    fn put_empty(&self, out: &mut Vec<u8>) {
        let zeros: usize = match self {
            Op::CountStar | Op::Invalid(_) | Op::External { .. } => 0,
            Op::Count => 8,
            Op::SumInt { .. } => 24,
            Op::SumFloat { .. } => 48,
            Op::Var { .. } => 56,
            // Empty section.
            Op::MinMax { .. }
            | Op::Distinct { .. }
            | Op::Percentile { .. }
            | Op::FirstLast { .. } => 4,
        };
        out.resize(out.len() + zeros, 0);
    }
}

/// Which change an op applies.
#[derive(Clone, Copy)]
enum Step {
    Insert(EventKey),
    Evict,
    RemoveRecent,
}

/// The aggregates that share one group-by node; their states are stored together as
/// one value per group key.
///
/// ```
/// use spillway_engine::aggregate::{AggKind, AggSet};
/// use spillway_engine::value::{DataType, EventKey, Value};
///
/// let set = AggSet::new(&[(AggKind::Sum, Some(DataType::Int)), (AggKind::CountStar, None)]);
/// let key = |t| EventKey { time: t, seq: t as u64 };
/// let horizon = key(0);
///
/// // Insert two events: the store hands the old bytes (none yet) and an empty buffer.
/// let mut s1 = Vec::new();
/// set.insert(None, &mut s1, key(1), &[Value::Int(5), Value::Null], horizon);
/// let mut s2 = Vec::new();
/// set.insert(Some(&s1), &mut s2, key(2), &[Value::Int(7), Value::Null], horizon);
/// let mut results = Vec::new();
/// set.results(&s2, &mut results);
/// assert_eq!(results, vec![Value::Int(12), Value::Int(2)]);
///
/// // Evict the oldest event; the window is not empty yet.
/// let mut s3 = Vec::new();
/// assert!(!set.evict(&s2, &mut s3, key(1), &[Value::Int(5), Value::Null]));
/// results.clear();
/// set.results(&s3, &mut results);
/// assert_eq!(results, vec![Value::Int(7), Value::Int(1)]);
///
/// // Evicting the last event empties the window: the caller deletes the key.
/// let mut s4 = Vec::new();
/// assert!(set.evict(&s3, &mut s4, key(2), &[Value::Int(7), Value::Null]));
/// results.clear();
/// set.empty_results(&mut results);
/// assert_eq!(results, vec![Value::Null, Value::Int(0)]);
/// ```
#[derive(Clone, Debug)]
pub struct AggSet {
    aggs: Vec<(AggKind, Option<DataType>)>,
    ops: Vec<Op>,
    empty: Vec<u8>,
    /// False for a set built [`without_evictions`](AggSet::without_evictions).
    evicts: bool,
}

impl AggSet {
    /// `aggs[i]` = (function, argument type; `None` for `COUNT(*)`).
    ///
    /// Pairs are not checked here (see [`AggSet::try_new`]); a set holding a pair that
    /// [`AggKind::result_type`] rejects fails every update with [`AggStateError::Invalid`].
    pub fn new(aggs: &[(AggKind, Option<DataType>)]) -> AggSet {
        let ops: Vec<Op> = aggs.iter().map(|&(k, t)| Op::resolve(k, t)).collect();
        let empty = empty_state(&ops);
        AggSet { aggs: aggs.to_vec(), ops, empty, evicts: true }
    }

    /// The same set for a window that never evicts (`UNBOUNDED PRECEDING`): an insert
    /// also drops what no later operation can need, so the states of MIN/MAX and
    /// FIRST_VALUE/LAST_VALUE stop growing with the window. Of the events before the
    /// horizon (which only an eviction could take out) MIN/MAX keep the best one and
    /// FIRST_VALUE/LAST_VALUE the oldest and the newest; events at or after it stay, for
    /// [`remove_recent`](AggSet::remove_recent). The state layout is unchanged. Evicting
    /// from such a set is an error ([`AggStateError::NoEvictions`]).
    #[must_use]
    pub fn without_evictions(mut self) -> AggSet {
        self.evicts = false;
        self
    }

    /// The same set with its holistic aggregates kept outside the inline state, each in
    /// an order-statistics tree in the store ([`external::HolisticTrees`]), so that an
    /// update costs O(log n) in the window's size instead of rewriting a value that holds
    /// the whole window: `COUNT(DISTINCT)`, `MEDIAN`/`PERCENTILE_CONT`, and
    /// `FIRST_VALUE`/`LAST_VALUE` when the set evicts (without evictions their inline
    /// state is already O(1), see [`without_evictions`](AggSet::without_evictions)).
    /// The inline state keeps the row count and the other aggregates; for an external
    /// aggregate [`results`](AggSet::results) appends a placeholder (`NULL`) that the
    /// caller replaces with [`external::HolisticTrees::results`].
    #[must_use]
    pub fn external_holistic(mut self) -> AggSet {
        for op in &mut self.ops {
            let ext = match op {
                Op::Distinct { .. } => Some(true),
                Op::Percentile { .. } => Some(false),
                Op::FirstLast { .. } if self.evicts => Some(false),
                _ => None,
            };
            if let Some(distinct) = ext {
                *op = Op::External { distinct };
            }
        }
        self.empty = empty_state(&self.ops);
        self
    }

    /// Positions of the aggregates kept outside the inline state (see
    /// [`external_holistic`](AggSet::external_holistic)), with their kinds.
    pub fn external(&self) -> impl Iterator<Item = (usize, AggKind)> + '_ {
        self.ops
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op, Op::External { .. }))
            .map(|(i, _)| (i, self.aggs[i].0))
    }

    /// False for a set built [`without_evictions`](AggSet::without_evictions).
    pub fn evicts(&self) -> bool {
        self.evicts
    }

    /// Like [`AggSet::new`], but rejects a pair that [`AggKind::result_type`] rejects.
    pub fn try_new(aggs: &[(AggKind, Option<DataType>)]) -> Result<AggSet, AggStateError> {
        for (i, &(k, t)) in aggs.iter().enumerate() {
            k.result_type(t).map_err(|message| AggStateError::Invalid { agg: i, message })?;
        }
        Ok(AggSet::new(aggs))
    }

    /// The (function, argument type) pairs, in state order.
    pub fn aggs(&self) -> &[(AggKind, Option<DataType>)] {
        &self.aggs
    }

    /// The state of an empty window (what `old == None` stands for).
    pub fn empty_state(&self) -> &[u8] {
        &self.empty
    }

    /// Adds an event.
    ///
    /// # Panics
    /// If `old` was not written by this set or an argument has the wrong type; see
    /// [`AggSet::try_insert`].
    pub fn insert(
        &self,
        old: Option<&[u8]>,
        out: &mut Vec<u8>,
        key: EventKey,
        args: &[Value],
        horizon: EventKey,
    ) {
        if let Err(e) = self.try_insert(old, out, key, args, horizon) {
            panic!("{e}");
        }
    }

    /// Removes the oldest event; returns true when the window is now empty.
    ///
    /// # Panics
    /// As [`AggSet::insert`]; see [`AggSet::try_evict`].
    pub fn evict(&self, old: &[u8], out: &mut Vec<u8>, key: EventKey, args: &[Value]) -> bool {
        match self.try_evict(old, out, key, args) {
            Ok(empty) => empty,
            Err(e) => panic!("{e}"),
        }
    }

    /// Removes an event at or after the horizon.
    ///
    /// # Panics
    /// As [`AggSet::insert`]; see [`AggSet::try_remove_recent`].
    pub fn remove_recent(&self, old: &[u8], out: &mut Vec<u8>, key: EventKey, args: &[Value]) {
        if let Err(e) = self.try_remove_recent(old, out, key, args) {
            panic!("{e}");
        }
    }

    /// Appends one result per aggregate.
    ///
    /// # Panics
    /// If `state` was not written by this set; see [`AggSet::try_results`].
    pub fn results(&self, state: &[u8], out: &mut Vec<Value>) {
        if let Err(e) = self.try_results(state, out) {
            panic!("{e}");
        }
    }

    /// Appends the results of an empty window.
    pub fn empty_results(&self, out: &mut Vec<Value>) {
        out.extend(self.ops.iter().map(|op| match op {
            Op::CountStar | Op::Count | Op::Distinct { .. } => Value::Int(0),
            Op::External { distinct: true } => Value::Int(0),
            _ => Value::Null,
        }));
    }

    /// [`AggSet::insert`], reporting a bad state or argument as an error. `out` is cleared
    /// first; on error its content is unspecified.
    pub fn try_insert(
        &self,
        old: Option<&[u8]>,
        out: &mut Vec<u8>,
        key: EventKey,
        args: &[Value],
        horizon: EventKey,
    ) -> Result<(), AggStateError> {
        self.step(old.unwrap_or(&self.empty), out, key, args, Step::Insert(horizon)).map(|_| ())
    }

    /// [`AggSet::evict`], reporting a bad state or argument as an error.
    pub fn try_evict(
        &self,
        old: &[u8],
        out: &mut Vec<u8>,
        key: EventKey,
        args: &[Value],
    ) -> Result<bool, AggStateError> {
        self.step(old, out, key, args, Step::Evict).map(|rows| rows == 0)
    }

    /// [`AggSet::remove_recent`], reporting a bad state or argument as an error.
    pub fn try_remove_recent(
        &self,
        old: &[u8],
        out: &mut Vec<u8>,
        key: EventKey,
        args: &[Value],
    ) -> Result<(), AggStateError> {
        self.step(old, out, key, args, Step::RemoveRecent).map(|_| ())
    }

    /// [`AggSet::results`], reporting a bad state as an error (nothing is appended then).
    pub fn try_results(&self, state: &[u8], out: &mut Vec<Value>) -> Result<(), AggStateError> {
        let before = out.len();
        let r = self.results_into(state, out);
        if r.is_err() {
            out.truncate(before);
        }
        r
    }

    fn results_into(&self, state: &[u8], out: &mut Vec<Value>) -> Result<(), AggStateError> {
        let mut r = Reader::new(state);
        let rows = r.u64()?;
        for (i, op) in self.ops.iter().enumerate() {
            r.agg = Some(i);
            let v = match op {
                Op::CountStar => Value::Int(i64::try_from(rows).unwrap_or(i64::MAX)),
                Op::Count => Value::Int(i64::try_from(r.u64()?).unwrap_or(i64::MAX)),
                Op::SumInt { avg } => numeric::sum_int_result(&mut r, *avg)?,
                Op::SumFloat { avg } => numeric::sum_float_result(&mut r, *avg)?,
                Op::Var { sqrt } => numeric::var_result(&mut r, *sqrt)?,
                Op::MinMax { max, .. } => {
                    let base = r.pos() + 4;
                    minmax::result(r.section()?, base, r.agg, *max)?
                }
                Op::Distinct { .. } => holistic::distinct_result(r.section()?, r.agg)?,
                Op::Percentile { p } => {
                    let base = r.pos() + 4;
                    holistic::pct_result(r.section()?, base, r.agg, *p)?
                }
                Op::FirstLast { last, .. } => {
                    let base = r.pos() + 4;
                    holistic::fl_result(r.section()?, base, r.agg, *last)?
                }
                // Placeholder: the caller fills it in from the tree.
                Op::Invalid(_) | Op::External { .. } => Value::Null,
            };
            out.push(v);
        }
        r.finish()
    }

    /// Applies one step; returns the row count after it.
    fn step(
        &self,
        old: &[u8],
        out: &mut Vec<u8>,
        key: EventKey,
        args: &[Value],
        step: Step,
    ) -> Result<u64, AggStateError> {
        if args.len() != self.ops.len() {
            return Err(AggStateError::ArgCount { expected: self.ops.len(), found: args.len() });
        }
        if !self.evicts && matches!(step, Step::Evict) {
            return Err(AggStateError::NoEvictions { key });
        }
        let compact = !self.evicts;
        out.clear();
        out.reserve(old.len() + 64);
        let mut r = Reader::new(old);
        let rows = r.u64()?;
        let rows = match step {
            Step::Insert(_) => rows.wrapping_add(1),
            Step::Evict | Step::RemoveRecent => {
                rows.checked_sub(1).ok_or(AggStateError::NoRows { key })?
            }
        };
        put_u64(out, rows);
        let delta: i8 = if matches!(step, Step::Insert(_)) { 1 } else { -1 };
        for (i, (op, arg)) in self.ops.iter().zip(args).enumerate() {
            let agg = Some(i);
            r.agg = agg;
            let name = self.aggs[i].0.name();
            match op {
                Op::CountStar => {}
                Op::Count => numeric::count_step(&mut r, out, !arg.is_null(), delta)?,
                Op::SumInt { .. } => {
                    let x = match Scalar::of(arg, DataType::Int, agg, name)? {
                        Some(Scalar::Int(v)) => Some(v),
                        _ => None,
                    };
                    numeric::sum_int_step(&mut r, out, x, delta)?;
                }
                Op::SumFloat { .. } => {
                    let x = Scalar::of(arg, DataType::Float, agg, name)?.and_then(Scalar::as_f64);
                    numeric::sum_float_step(&mut r, out, x, delta)?;
                }
                Op::Var { .. } => {
                    let x = numeric_arg(arg, agg, name)?;
                    numeric::var_step(&mut r, out, x, delta)?;
                }
                Op::MinMax { max, ty } => {
                    let base = r.pos() + 4;
                    let sec = r.section()?;
                    match (Scalar::of(arg, *ty, agg, name)?, step) {
                        (None, _) => copy_section(out, sec, agg)?,
                        (Some(x), Step::Insert(h)) => {
                            minmax::insert(sec, base, agg, out, key, x, h, *max, compact)?
                        }
                        (Some(_), Step::Evict) => minmax::evict(sec, base, agg, out, key)?,
                        (Some(_), Step::RemoveRecent) => {
                            minmax::remove_recent(sec, base, agg, out, key)?
                        }
                    }
                }
                Op::Distinct { ty } => {
                    let base = r.pos() + 4;
                    let sec = r.section()?;
                    match Scalar::of(arg, *ty, agg, name)? {
                        None => copy_section(out, sec, agg)?,
                        Some(x) => holistic::distinct_step(sec, base, agg, out, x, delta, key)?,
                    }
                }
                Op::Percentile { .. } => {
                    let base = r.pos() + 4;
                    let sec = r.section()?;
                    match numeric_arg(arg, agg, name)? {
                        None => copy_section(out, sec, agg)?,
                        Some(x) => holistic::pct_step(sec, base, agg, out, x, delta, key, name)?,
                    }
                }
                Op::FirstLast { ty, .. } => {
                    let base = r.pos() + 4;
                    let sec = r.section()?;
                    let v = Scalar::of(arg, *ty, agg, name)?;
                    match step {
                        Step::Insert(h) => {
                            holistic::fl_insert(sec, base, agg, out, key, v, h, compact)?
                        }
                        Step::Evict => holistic::fl_remove(sec, base, agg, out, key, true, name)?,
                        Step::RemoveRecent => {
                            holistic::fl_remove(sec, base, agg, out, key, false, name)?
                        }
                    }
                }
                Op::External { .. } => {}
                Op::Invalid(message) => {
                    return Err(AggStateError::Invalid { agg: i, message: message.clone() })
                }
            }
        }
        r.finish()?;
        Ok(rows)
    }
}

/// The state of an empty window: a zero row count and each op's empty state.
fn empty_state(ops: &[Op]) -> Vec<u8> {
    let mut empty = vec![0u8; 8];
    for op in ops {
        op.put_empty(&mut empty);
    }
    empty
}

/// A numeric argument as f64 (ints widened); NULL as `None`.
fn numeric_arg(
    v: &Value,
    agg: Option<usize>,
    name: &'static str,
) -> Result<Option<f64>, AggStateError> {
    match v {
        Value::Null => Ok(None),
        Value::Int(i) => Ok(Some(*i as f64)),
        Value::Float(f) => Ok(Some(*f)),
        other => Err(AggStateError::ArgType {
            agg,
            name,
            expected: DataType::Float,
            found: other.data_type().unwrap_or(DataType::Float),
        }),
    }
}

fn copy_section(out: &mut Vec<u8>, sec: &[u8], agg: Option<usize>) -> Result<(), AggStateError> {
    let at = begin_section(out);
    out.extend_from_slice(sec);
    end_section(out, at, agg)
}
