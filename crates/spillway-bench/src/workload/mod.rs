//! Streaming state-access workloads (Gadget-class): the vocabulary shared by the event
//! generator, the operator state machines, traces and the replayer.
//!
//! An experiment turns input streams ([`StreamItem`]: events and watermarks) into the
//! state operations ([`StateOp`]) that a Flink operator would issue, and hands each op to
//! an [`OpSink`]: a trace writer, the replayer (a live store), or a counter.

pub mod config;
pub mod dist;
pub mod gadget;
pub mod multi;
pub mod operators;
pub mod replay;
pub mod run;
pub mod source;
pub mod trace_replay;
pub mod ycsb;

use std::fmt;

/// Kind of one state operation.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum OpKind {
    /// Point read.
    #[default]
    Get,
    /// Point write (replace).
    Put,
    /// Append an operand to a list value.
    Merge,
    /// Point delete.
    Delete,
    /// Start of a range read at `key` (Gadget's `seek`, Flink's iterator seek).
    Seek,
    /// Next entry of the range read started by the last `Seek`.
    Next,
    /// A prefix scan of all entries whose key starts with `key` (one op, any length).
    Scan,
}

impl OpKind {
    /// Every kind, in the order used by tables and JSON (`op_mix`).
    pub const ALL: [OpKind; 7] = [
        OpKind::Get,
        OpKind::Put,
        OpKind::Merge,
        OpKind::Delete,
        OpKind::Scan,
        OpKind::Seek,
        OpKind::Next,
    ];

    /// Lowercase name as in Gadget traces and `op_mix` JSON: get, put, merge, delete,
    /// scan, seek, next.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Get => "get",
            OpKind::Put => "put",
            OpKind::Merge => "merge",
            OpKind::Delete => "delete",
            OpKind::Seek => "seek",
            OpKind::Next => "next",
            OpKind::Scan => "scan",
        }
    }

    /// Parses a name as written by [`OpKind::name`].
    pub fn parse(s: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One state operation as an operator issues it. `value` is empty for get, delete,
/// seek, next and scan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateOp {
    /// What the operator does.
    pub kind: OpKind,
    /// State key (derived from the event key and window, see each operator's docs).
    pub key: Vec<u8>,
    /// Value written (put) or operand appended (merge).
    pub value: Vec<u8>,
}

/// Receives the state operations of a workload, in order. `input_event` is the
/// 0-based number of the input event being processed when the op was issued (ops issued
/// by watermarks carry the number of the last event before it), so consumers can
/// compute event amplification and pace replay.
pub trait OpSink {
    /// The error a sink may fail with.
    type Error;
    /// One op.
    fn op(&mut self, input_event: u64, op: &StateOp) -> Result<(), Self::Error>;
}

/// One generated input event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputEvent {
    /// Which source (0 = first, 1 = second, for two-input operators).
    pub source: u8,
    /// Event key (a rank from the key-popularity distribution; operators turn it into
    /// bytes).
    pub key: u64,
    /// Event time, in the experiment's time unit.
    pub time: i64,
    /// Size of the event's payload in bytes (the value size of the ops it causes).
    pub value_len: u32,
}

/// What a source emits: events and watermarks, interleaved in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamItem {
    /// An event.
    Event(InputEvent),
    /// No further event of `source` will have a time below `time` (except late events
    /// that the source counts as such).
    Watermark {
        /// Which source.
        source: u8,
        /// Watermark time.
        time: i64,
    },
}

/// Where an operator sends the state operations it issues.
pub type Emit<'a> = dyn FnMut(&StateOp) + 'a;

/// The 15 operator types of Gadget (their Gadget config names in [`OperatorKind::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum OperatorKind {
    /// `tumbling.keyed.incremental`
    TumblingKeyedIncremental,
    /// `tumbling.keyed.holistic`
    TumblingKeyedHolistic,
    /// `tumbling.all.incremental`
    TumblingAllIncremental,
    /// `tumbling.all.holistic`
    TumblingAllHolistic,
    /// `sliding.keyed.incremental`
    SlidingKeyedIncremental,
    /// `sliding.keyed.holistic`
    SlidingKeyedHolistic,
    /// `sliding.all.incremental`
    SlidingAllIncremental,
    /// `sliding.all.holistic`
    SlidingAllHolistic,
    /// `session.incremental`
    SessionIncremental,
    /// `session.holistic`
    SessionHolistic,
    /// `join.tumbling`
    JoinTumbling,
    /// `join.sliding`
    JoinSliding,
    /// `join.interval`
    JoinInterval,
    /// `continuous.join`
    ContinuousJoin,
    /// `continuous.aggregation`
    ContinuousAggregation,
}

impl OperatorKind {
    /// All 15, in Gadget's order.
    pub const ALL: [OperatorKind; 15] = [
        OperatorKind::TumblingKeyedIncremental,
        OperatorKind::TumblingKeyedHolistic,
        OperatorKind::TumblingAllIncremental,
        OperatorKind::TumblingAllHolistic,
        OperatorKind::SlidingKeyedIncremental,
        OperatorKind::SlidingKeyedHolistic,
        OperatorKind::SlidingAllIncremental,
        OperatorKind::SlidingAllHolistic,
        OperatorKind::SessionIncremental,
        OperatorKind::SessionHolistic,
        OperatorKind::JoinTumbling,
        OperatorKind::JoinSliding,
        OperatorKind::JoinInterval,
        OperatorKind::ContinuousJoin,
        OperatorKind::ContinuousAggregation,
    ];

    /// Gadget's name (`operator.type` value), also used in TOML experiments.
    pub fn name(self) -> &'static str {
        match self {
            OperatorKind::TumblingKeyedIncremental => "tumbling.keyed.incremental",
            OperatorKind::TumblingKeyedHolistic => "tumbling.keyed.holistic",
            OperatorKind::TumblingAllIncremental => "tumbling.all.incremental",
            OperatorKind::TumblingAllHolistic => "tumbling.all.holistic",
            OperatorKind::SlidingKeyedIncremental => "sliding.keyed.incremental",
            OperatorKind::SlidingKeyedHolistic => "sliding.keyed.holistic",
            OperatorKind::SlidingAllIncremental => "sliding.all.incremental",
            OperatorKind::SlidingAllHolistic => "sliding.all.holistic",
            OperatorKind::SessionIncremental => "session.incremental",
            OperatorKind::SessionHolistic => "session.holistic",
            OperatorKind::JoinTumbling => "join.tumbling",
            OperatorKind::JoinSliding => "join.sliding",
            OperatorKind::JoinInterval => "join.interval",
            OperatorKind::ContinuousJoin => "continuous.join",
            OperatorKind::ContinuousAggregation => "continuous.aggregation",
        }
    }

    /// Parses a Gadget name.
    pub fn parse(s: &str) -> Option<OperatorKind> {
        OperatorKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// How the operator's state is accessed, the static layout choice of the APSys'18
    /// paper: interval-join buffers and the continuous join's per-key maps (its default
    /// [`JoinInput::NoUniqueKey`] view) are read by range (seek + next over one key's
    /// entries); holistic windows, holistic sessions and window joins append to
    /// per-window lists that are read whole when the window fires; the incremental
    /// operators and the continuous aggregation read and update small values. See
    /// [`OperatorParams::access_hint`] for the hint of a continuous join with another
    /// view.
    pub fn access_hint(self) -> spillway_store::AccessHint {
        use spillway_store::AccessHint;
        match self {
            OperatorKind::JoinInterval | OperatorKind::ContinuousJoin => AccessHint::Range,
            OperatorKind::TumblingKeyedHolistic
            | OperatorKind::TumblingAllHolistic
            | OperatorKind::SlidingKeyedHolistic
            | OperatorKind::SlidingAllHolistic
            | OperatorKind::SessionHolistic
            | OperatorKind::JoinTumbling
            | OperatorKind::JoinSliding => AccessHint::ListAppend,
            OperatorKind::TumblingKeyedIncremental
            | OperatorKind::TumblingAllIncremental
            | OperatorKind::SlidingKeyedIncremental
            | OperatorKind::SlidingAllIncremental
            | OperatorKind::SessionIncremental
            | OperatorKind::ContinuousAggregation => AccessHint::Point,
        }
    }

    /// Whether the operator reads two sources.
    pub fn two_inputs(self) -> bool {
        matches!(
            self,
            OperatorKind::JoinTumbling
                | OperatorKind::JoinSliding
                | OperatorKind::JoinInterval
                | OperatorKind::ContinuousJoin
        )
    }
}

/// How `continuous.join` keeps each input's rows: the three state views of Flink's
/// `JoinRecordStateViews` (flink-table-runtime), chosen by the planner from the input's
/// unique keys (`JoinUtil.analyzeJoinInput`). One choice applies to both inputs.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum JoinInput {
    /// `InputSideHasNoUniqueKey`: a `MapState<row, count>` per join key. The default: an
    /// insert-only input without a declared primary key (every Gadget source) has no
    /// unique key, and `analyzeJoinInput` then returns `JoinInputSideSpec.withoutUniqueKey()`.
    #[default]
    NoUniqueKey,
    /// `InputSideHasUniqueKey`: a `MapState<unique key, row>` per join key.
    HasUniqueKey,
    /// `JoinKeyContainsUniqueKey`: one `ValueState<row>` per join key.
    JoinKeyContainsUniqueKey,
}

impl JoinInput {
    /// Every variant, in the order of [`JoinInput::name`]'s documentation.
    pub const ALL: [JoinInput; 3] =
        [JoinInput::NoUniqueKey, JoinInput::HasUniqueKey, JoinInput::JoinKeyContainsUniqueKey];

    /// Name in experiment files: `no_unique_key`, `has_unique_key`,
    /// `join_key_contains_unique_key`.
    pub fn name(self) -> &'static str {
        match self {
            JoinInput::NoUniqueKey => "no_unique_key",
            JoinInput::HasUniqueKey => "has_unique_key",
            JoinInput::JoinKeyContainsUniqueKey => "join_key_contains_unique_key",
        }
    }

    /// Parses a name as written by [`JoinInput::name`].
    pub fn parse(s: &str) -> Option<JoinInput> {
        JoinInput::ALL.into_iter().find(|j| j.name() == s)
    }
}

/// Parameters of an operator (times in the experiment's time unit). Defaults are
/// Gadget's: window 5, slide 1, session gap 5, interval bounds [-5, 5] (lower, upper
/// relative to the left event's time), allowed lateness 0, 10-byte state keys; the
/// continuous join's state view defaults to [`JoinInput::NoUniqueKey`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OperatorParams {
    /// Operator type.
    pub kind: OperatorKind,
    /// Window length (tumbling, sliding, window joins).
    pub window: i64,
    /// Slide (sliding windows and sliding join).
    pub slide: i64,
    /// Inactivity gap that closes a session.
    pub session_gap: i64,
    /// Interval join: a right event r joins a left event l iff
    /// `l.time + lower <= r.time <= l.time + upper`.
    pub lower: i64,
    /// See `lower`.
    pub upper: i64,
    /// Events later than the watermark by at most this much still update their window.
    pub allowed_lateness: i64,
    /// Length of the state keys the operator builds, in bytes.
    pub key_bytes: usize,
    /// `continuous.join` only: the state view of both inputs.
    #[serde(default)]
    pub join_input: JoinInput,
}

impl OperatorParams {
    /// [`OperatorKind::access_hint`], refined by the parameters: a continuous join with
    /// the [`JoinInput::JoinKeyContainsUniqueKey`] view reads and writes one value per
    /// key (point access) instead of iterating a map.
    pub fn access_hint(&self) -> spillway_store::AccessHint {
        match (self.kind, self.join_input) {
            (OperatorKind::ContinuousJoin, JoinInput::JoinKeyContainsUniqueKey) => {
                spillway_store::AccessHint::Point
            }
            (kind, _) => kind.access_hint(),
        }
    }

    /// Gadget's defaults for `kind`.
    pub fn new(kind: OperatorKind) -> OperatorParams {
        OperatorParams {
            kind,
            window: 5,
            slide: 1,
            session_gap: 5,
            lower: -5,
            upper: 5,
            allowed_lateness: 0,
            key_bytes: 10,
            join_input: JoinInput::NoUniqueKey,
        }
    }
}
