//! Experiment configuration: one TOML file describes the input sources, the operator and
//! how the run is driven ([`Experiment`]). Gadget's `key=value` files are imported by
//! [`super::gadget`].
//!
//! Unknown keys are errors, and every error names the offending key (and, for syntax and
//! type errors, the line and column). Defaults are Gadget's (notes §2.6 reference
//! config) where Gadget has one.
//!
//! # Schema (every key, with its default)
//!
//! Top level:
//! * `seed` (0): seeds every random draw; same file and seed, same event stream.
//! * `time_unit` (`"ms"`): label of the abstract time unit of all times below.
//!
//! `[[source]]`: one table per input, 1 or 2 (two exactly for the two-input operators
//! `join.tumbling`, `join.sliding`, `join.interval`, `continuous.join`). If there is no
//! `[[source]]` table at all, the operator gets as many default sources as it reads.
//! Every source has:
//! * `value_size` (`{ type = "constant", bytes = 10 }`): payload size in bytes; types
//!   `constant` (`bytes`), `uniform` (`min`, `max`), `normal` (`mean`, `stddev`),
//!   `exponential` (`mean`).
//! * `watermark_every` (1): a watermark is emitted each time the source's event time
//!   crosses a multiple of this many time units (>= 1).
//! * `lateness_bound` (0): the largest delay of an out-of-order event (>= 0); with
//!   `disorder = "bounded"` the watermark also trails the time crossed by this much.
//! * `disorder` (`"bounded"`): how out-of-order events and watermarks relate (see
//!   [`Disorder`] and [`super::source`]): `"bounded"` moves an event's time back and lets
//!   the watermark trail by `lateness_bound`, so no event is ever late (Flink's bounded
//!   out-of-orderness); `"gadget"` delivers an event up to `lateness_bound` units late
//!   with its own time behind a watermark that does not trail, so the operator drops it
//!   unless its window is still open (Gadget's `GadgetEventGenerator`, the meaning the
//!   Gadget importer gives `lateness.threshold`).
//!
//! A synthetic source (no `csv` key) also has:
//! * `events` (100000): number of events (>= 1).
//! * `keys` (1000000): size of the event-key space (>= 1).
//! * `key_popularity` (`{ type = "zipf", s = 1.0 }`): types `uniform` (`min`, `max`),
//!   `zipf` (`s`), `hotspot` (`hot_fraction` 0.2, `hot_op_fraction` 0.8), `sequential`,
//!   `constant` (`key`), `latest` (`s` 0.99, `insert_fraction` 0.05), `empirical`
//!   (`path`); see [`super::dist`].
//! * `gap` (`{ type = "exponential", lambda = 10.0 }`): event-time gap between consecutive
//!   events; types `constant` (`value`), `exponential` (`lambda`), `uniform` (`a`, `b`),
//!   `normal` (`mean`, `stddev`).
//! * `out_of_order` (0.0): probability in `[0, 1]` that an event is out of order by a
//!   random delay in `1..=lateness_bound` (needs `lateness_bound >= 1` when > 0): its time
//!   moved back (`disorder = "bounded"`) or its delivery put off (`"gadget"`); see
//!   [`super::source`] for the exact model.
//!
//! A trace source has `csv = { ... }` instead (and none of the synthetic keys):
//! * `path` (required): the CSV file (relative paths are resolved against the directory
//!   of the experiment file by [`Experiment::from_file`]).
//! * `key` (required), `time` (required): columns, each a 0-based index or a header name.
//! * `time_multiplier` (1.0): event time = `floor(value * time_multiplier)` (e.g. `1e-6`
//!   turns microseconds into seconds).
//! * `header` (false): whether the first line names the columns (needed to refer to
//!   columns by name).
//! * `event_type`, `type_filter` (absent): keep only rows whose `event_type` column equals
//!   `type_filter` (both or neither).
//!
//! `[operator]`:
//! * `type` (`"tumbling.keyed.incremental"`): a Gadget operator name
//!   ([`OperatorKind::name`]).
//! * `window` (5), `slide` (1): window length and slide (`1 <= slide <= window`).
//! * `session_gap` (5): session inactivity gap (>= 1).
//! * `lower` (-5), `upper` (5): interval-join bounds (`lower <= upper`).
//! * `allowed_lateness` (0): >= 0.
//! * `key_bytes` (10): length of state keys (>= 1).
//! * `join_input` (`"no_unique_key"`): `continuous.join` only, how both inputs' rows are
//!   kept ([`JoinInput`], Flink's `JoinRecordStateViews`): `no_unique_key` (a row -> count
//!   map per join key), `has_unique_key` (a unique key -> row map per join key) or
//!   `join_key_contains_unique_key` (one row per join key).
//!
//! `[run]`:
//! * `stores` (`["hashlog"]`): stores to run on: `mem`, `hashlog`, `rocksdb`.
//! * `mode` (`"offline"`): `offline` (write a trace) or `online` (run against the stores).
//! * `loop` (`"closed"`): `closed` (next op when the last completes) or `open` (paced).
//! * `rate` (absent): ops per second; required (> 0) with `loop = "open"`, not allowed
//!   with `closed`.
//! * `warmup_ops` (0): ops executed before measuring.
//! * `max_ops` (absent): stop after this many state ops (Gadget's
//!   `expected.num.operations`).
//!
//! [`EXAMPLE_TOML`] spells out every key at its default.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dist::{Gap, KeyPopularity, ValueSize};
use super::{JoinInput, OperatorKind, OperatorParams};

/// A complete experiment file with every key at its default (it parses to
/// `Experiment::default()`).
pub const EXAMPLE_TOML: &str = r#"# Spillway experiment (every key at its default).
seed = 0                # seeds every random draw
time_unit = "ms"        # label of the time unit used below

[[source]]
events = 100000         # number of events
keys = 1000000          # size of the event-key space
# key popularity: uniform {min, max} | zipf {s} | hotspot {hot_fraction, hot_op_fraction}
#   | sequential | constant {key} | latest {s, insert_fraction} | empirical {path}
key_popularity = { type = "zipf", s = 1.0 }
# event-time gap: constant {value} | exponential {lambda} | uniform {a, b} | normal {mean, stddev}
gap = { type = "exponential", lambda = 10.0 }
# payload bytes: constant {bytes} | uniform {min, max} | normal {mean, stddev} | exponential {mean}
value_size = { type = "constant", bytes = 10 }
watermark_every = 1     # a watermark each time event time crosses a multiple of this
out_of_order = 0.0      # probability that an event is out of order
lateness_bound = 0      # largest out-of-order delay (bounded: also the watermark lag)
disorder = "bounded"    # bounded (time moved back, watermark trails) | gadget (delivered late)

# A trace source instead of a synthetic one (second input of a join, for example):
# [[source]]
# csv = { path = "tasks.csv", key = 0, time = 2, time_multiplier = 1e-6, header = false,
#         event_type = 4, type_filter = "1" }
# value_size = { type = "constant", bytes = 10 }
# watermark_every = 1
# lateness_bound = 0
# disorder = "bounded"

[operator]
type = "tumbling.keyed.incremental"
window = 5
slide = 1
session_gap = 5
lower = -5
upper = 5
allowed_lateness = 0
key_bytes = 10
# continuous.join state view: no_unique_key | has_unique_key | join_key_contains_unique_key
join_input = "no_unique_key"

[run]
stores = ["hashlog"]    # mem | hashlog | rocksdb
mode = "offline"        # offline | online
loop = "closed"         # closed | open (then rate = ops per second)
warmup_ops = 0
# max_ops = 100000      # stop after this many state ops
"#;

/// Why an experiment could not be loaded. Every variant names the key involved.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// The file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// TOML syntax, an unknown key or a value of the wrong type.
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The key at that place (dotted, with array indexes: `source[1].gap`), if found.
        key: Option<String>,
        /// The parser's message (names allowed keys or the expected type).
        message: String,
    },
    /// A value or a combination of values that is not allowed.
    Invalid {
        /// The key (dotted path, e.g. `operator.slide`, `source[0].out_of_order`).
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// A bad line in a Gadget `key=value` file.
    Gadget {
        /// 1-based line (0 if the problem is not tied to one line).
        line: usize,
        /// The Gadget key.
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

impl ConfigError {
    /// The key the error is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } => None,
            ConfigError::Syntax { key, .. } => key.as_deref(),
            ConfigError::Invalid { key, .. } | ConfigError::Gadget { key, .. } => Some(key),
        }
    }

    fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { key: key.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Io { path, message } => write!(f, "{}: {message}", path.display()),
            ConfigError::Syntax { line, column, key: Some(k), message } => {
                write!(f, "line {line}, column {column}, key `{k}`: {message}")
            }
            ConfigError::Syntax { line, column, key: None, message } => {
                write!(f, "line {line}, column {column}: {message}")
            }
            ConfigError::Invalid { key, message } => write!(f, "`{key}`: {message}"),
            ConfigError::Gadget { line: 0, key, message } => write!(f, "`{key}`: {message}"),
            ConfigError::Gadget { line, key, message } => {
                write!(f, "line {line}: `{key}`: {message}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// A CSV column: a 0-based index or a header name (TOML: an integer or a string).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Column {
    /// 0-based index.
    Index(usize),
    /// Name in the header line.
    Name(String),
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Column::Index(i) => write!(f, "column {i}"),
            Column::Name(n) => write!(f, "column {n:?}"),
        }
    }
}

impl<'de> Deserialize<'de> for Column {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Column, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Column;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 0-based column index or a column name")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Column, E> {
                usize::try_from(v)
                    .map(Column::Index)
                    .map_err(|_| E::custom("column index too large"))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Column, E> {
                usize::try_from(v)
                    .map(Column::Index)
                    .map_err(|_| E::custom(format!("a column index must be >= 0, got {v}")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Column, E> {
                Ok(Column::Name(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

fn default_multiplier() -> f64 {
    1.0
}
fn is_false(b: &bool) -> bool {
    !*b
}

/// A CSV trace input (Google Borg task events, taxi trips, ...). Rows are read in file
/// order (sorted or not); see [`super::source`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvInput {
    /// The file.
    pub path: PathBuf,
    /// Column of the event key (an unsigned integer is used as is, anything else is
    /// hashed with 64-bit FNV-1a).
    pub key: Column,
    /// Column of the event time.
    pub time: Column,
    /// Event time = `floor(value * time_multiplier)` (default 1).
    #[serde(default = "default_multiplier")]
    pub time_multiplier: f64,
    /// Whether the first line is a header (default false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub header: bool,
    /// Column of the event type (only used with `type_filter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<Column>,
    /// Keep only rows whose `event_type` column equals this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_filter: Option<String>,
}

/// A synthetic input: keys, gaps and out-of-order delays drawn from distributions.
#[derive(Clone, Debug, PartialEq)]
pub struct Synthetic {
    /// Number of events.
    pub events: u64,
    /// Size of the event-key space.
    pub keys: u64,
    /// Key popularity.
    pub key_popularity: KeyPopularity,
    /// Event-time gap between consecutive events.
    pub gap: Gap,
    /// Probability that an event is out of order by a delay in `1..=lateness_bound`
    /// (see [`Disorder`]).
    pub out_of_order: f64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Synthetic {
            events: 100_000,
            keys: 1_000_000,
            key_popularity: KeyPopularity::default(),
            gap: Gap::default(),
            out_of_order: 0.0,
        }
    }
}

/// Where a source's events come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceInput {
    /// Generated.
    Synthetic(Synthetic),
    /// Read from a CSV file.
    Csv(CsvInput),
}

/// How a source's out-of-order events and its watermarks relate (TOML `disorder`); the
/// exact models are in [`super::source`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Disorder {
    /// Flink's bounded out-of-orderness: an out-of-order event keeps its place in the
    /// arrival order and its time is moved back by up to `lateness_bound`; the watermark
    /// trails the time crossed by `lateness_bound`, so no event is ever behind it.
    #[default]
    Bounded,
    /// Gadget's `GadgetEventGenerator` (notes §4.1): an out-of-order event keeps its time
    /// and is delivered 1..=`lateness_bound` time units later; the watermark is the time
    /// crossed (it does not trail), so a delayed event arrives behind it and the operator
    /// drops it unless its window is still open (allowed lateness included).
    Gadget,
}

impl Disorder {
    /// The TOML name: `bounded` or `gadget`.
    pub fn name(self) -> &'static str {
        match self {
            Disorder::Bounded => "bounded",
            Disorder::Gadget => "gadget",
        }
    }
}

/// One input stream (a `[[source]]` table).
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// Synthetic or trace.
    pub input: SourceInput,
    /// Payload sizes.
    pub value_size: ValueSize,
    /// Watermark period in time units.
    pub watermark_every: i64,
    /// Largest out-of-order delay; with [`Disorder::Bounded`] also the watermark's lag
    /// behind the event time crossed.
    pub lateness_bound: i64,
    /// How out-of-order events and watermarks relate.
    pub disorder: Disorder,
}

impl Default for Source {
    fn default() -> Self {
        Source {
            input: SourceInput::Synthetic(Synthetic::default()),
            value_size: ValueSize::default(),
            watermark_every: 1,
            lateness_bound: 0,
            disorder: Disorder::Bounded,
        }
    }
}

/// Whether the run writes a trace or drives stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Write the state ops as a trace (Gadget's `wrapper.type=file`).
    #[default]
    Offline,
    /// Run the state ops against the stores.
    Online,
}

/// How ops are paced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoopMode {
    /// Issue the next op when the previous one completes.
    #[default]
    Closed,
    /// Issue ops at a fixed rate (`rate` ops/s) regardless of completions.
    Open,
}

fn default_stores() -> Vec<String> {
    vec!["hashlog".to_string()]
}

/// The `[run]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Store names (`mem`, `hashlog`, `rocksdb`).
    #[serde(default = "default_stores")]
    pub stores: Vec<String>,
    /// Offline or online.
    #[serde(default)]
    pub mode: Mode,
    /// Closed or open loop (TOML key `loop`).
    #[serde(default, rename = "loop")]
    pub loop_mode: LoopMode,
    /// Ops per second for the open loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Ops run before measuring.
    #[serde(default)]
    pub warmup_ops: u64,
    /// Stop after this many state ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ops: Option<u64>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            stores: default_stores(),
            mode: Mode::Offline,
            loop_mode: LoopMode::Closed,
            rate: None,
            warmup_ops: 0,
            max_ops: None,
        }
    }
}

/// One experiment: sources, operator, run settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Experiment {
    /// Seed of every random draw.
    pub seed: u64,
    /// Label of the time unit.
    pub time_unit: String,
    /// The inputs (1 or 2).
    pub sources: Vec<Source>,
    /// The operator.
    pub operator: OperatorParams,
    /// How the run is driven.
    pub run: RunConfig,
}

impl Default for Experiment {
    /// Gadget's reference config (notes §2.6) with one synthetic source and no
    /// out-of-order events.
    fn default() -> Self {
        Experiment {
            seed: 0,
            time_unit: "ms".to_string(),
            sources: vec![Source::default()],
            operator: OperatorParams::new(OperatorKind::TumblingKeyedIncremental),
            run: RunConfig::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The TOML layer: raw serde structs close to the file, converted and validated.

fn default_time_unit() -> String {
    "ms".to_string()
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExperiment {
    #[serde(default)]
    seed: u64,
    #[serde(default = "default_time_unit")]
    time_unit: String,
    #[serde(default, rename = "source", skip_serializing_if = "Vec::is_empty")]
    sources: Vec<RawSource>,
    #[serde(default)]
    operator: RawOperator,
    #[serde(default)]
    run: RunConfig,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    events: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keys: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    out_of_order: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    watermark_every: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lateness_bound: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disorder: Option<Disorder>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key_popularity: Option<KeyPopularity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gap: Option<Gap>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value_size: Option<ValueSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    csv: Option<CsvInput>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawOperator {
    #[serde(rename = "type")]
    kind: String,
    window: i64,
    slide: i64,
    session_gap: i64,
    lower: i64,
    upper: i64,
    allowed_lateness: i64,
    key_bytes: usize,
    join_input: String,
}

impl Default for RawOperator {
    /// Gadget's defaults, as [`OperatorParams::new`] has them.
    fn default() -> Self {
        let p = OperatorParams::new(OperatorKind::TumblingKeyedIncremental);
        RawOperator {
            kind: p.kind.name().to_string(),
            window: p.window,
            slide: p.slide,
            session_gap: p.session_gap,
            lower: p.lower,
            upper: p.upper,
            allowed_lateness: p.allowed_lateness,
            key_bytes: p.key_bytes,
            join_input: p.join_input.name().to_string(),
        }
    }
}

fn operator_names() -> String {
    OperatorKind::ALL.iter().map(|k| format!("`{}`", k.name())).collect::<Vec<_>>().join(", ")
}

impl RawSource {
    fn into_source(self, i: usize) -> Result<Source, ConfigError> {
        let key = |k: &str| format!("source[{i}].{k}");
        let d = Source::default();
        let input = match self.csv {
            Some(csv) => {
                let synthetic = [
                    ("events", self.events.is_some()),
                    ("keys", self.keys.is_some()),
                    ("key_popularity", self.key_popularity.is_some()),
                    ("gap", self.gap.is_some()),
                    ("out_of_order", self.out_of_order.is_some()),
                ];
                if let Some((k, _)) = synthetic.iter().find(|(_, set)| *set) {
                    return Err(ConfigError::invalid(
                        key(k),
                        "not allowed in a source with `csv` (a trace source reads keys and \
                         times from its file); allowed with `csv`: value_size, \
                         watermark_every, lateness_bound, disorder",
                    ));
                }
                SourceInput::Csv(csv)
            }
            None => {
                let s = Synthetic::default();
                SourceInput::Synthetic(Synthetic {
                    events: self.events.unwrap_or(s.events),
                    keys: self.keys.unwrap_or(s.keys),
                    key_popularity: self.key_popularity.unwrap_or(s.key_popularity),
                    gap: self.gap.unwrap_or(s.gap),
                    out_of_order: self.out_of_order.unwrap_or(s.out_of_order),
                })
            }
        };
        Ok(Source {
            input,
            value_size: self.value_size.unwrap_or(d.value_size),
            watermark_every: self.watermark_every.unwrap_or(d.watermark_every),
            lateness_bound: self.lateness_bound.unwrap_or(d.lateness_bound),
            disorder: self.disorder.unwrap_or(d.disorder),
        })
    }

    fn from_source(s: &Source) -> RawSource {
        let mut r = RawSource {
            watermark_every: Some(s.watermark_every),
            lateness_bound: Some(s.lateness_bound),
            // Written only when not the default, so existing experiments print as before.
            disorder: (s.disorder != Disorder::Bounded).then_some(s.disorder),
            value_size: Some(s.value_size.clone()),
            ..RawSource::default()
        };
        match &s.input {
            SourceInput::Synthetic(y) => {
                r.events = Some(y.events);
                r.keys = Some(y.keys);
                r.out_of_order = Some(y.out_of_order);
                r.key_popularity = Some(y.key_popularity.clone());
                r.gap = Some(y.gap.clone());
            }
            SourceInput::Csv(c) => r.csv = Some(c.clone()),
        }
        r
    }
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary_compat(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// `str::floor_char_boundary` for stable Rust.
trait FloorBoundary {
    fn floor_char_boundary_compat(&self, i: usize) -> usize;
}

impl FloorBoundary for str {
    fn floor_char_boundary_compat(&self, mut i: usize) -> usize {
        while i > 0 && !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'
}

/// The bare key that ends right before byte `end` of `s` (skipping spaces and `=`).
fn key_before(s: &str) -> Option<&str> {
    let t = s.trim_end().strip_suffix('=')?.trim_end();
    let start = t.rfind(|c: char| !is_key_char(c)).map_or(0, |p| p + 1);
    let k = &t[start..];
    (!k.is_empty()).then_some(k)
}

/// Best-effort dotted path of the key at byte `offset` of a TOML text: the current
/// `[table]` / `[[array]]` header (with the array index) plus the key on that line
/// (and the enclosing inline-table key).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let offset = text.floor_char_boundary_compat(offset.min(text.len()));
    let line_start = text[..offset].rfind('\n').map_or(0, |p| p + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |p| offset + p);
    let line = &text[line_start..line_end];
    // On a header line, the error is about that table (headers up to and including it).
    let on_header = line.trim_start().starts_with('[');
    let scan_end = if on_header { line_end } else { line_start };
    let mut header = String::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for l in text[..scan_end].lines() {
        let l = l.trim();
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let n = match counts.iter_mut().find(|(k, _)| *k == name) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    counts.push((name.clone(), 0));
                    0
                }
            };
            header = format!("{name}[{n}]");
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split(']').next()) {
            // `[source.gap]` continues the last `[[source]]` element.
            let name = name.trim();
            let (first, rest) = name.split_once('.').unwrap_or((name, ""));
            header = match counts.iter().find(|(k, _)| k == first) {
                Some((_, n)) if !rest.is_empty() => format!("{first}[{n}].{rest}"),
                _ => name.to_string(),
            };
        }
    }
    let col = offset - line_start;
    if on_header {
        return (!header.is_empty()).then_some(header);
    }
    // The key at the offset itself (unknown-key errors point at the key).
    let here: String = line[col..].chars().take_while(|&c| is_key_char(c)).collect();
    let after = line[col + here.len()..].trim_start();
    let inner = if !here.is_empty() && after.starts_with('=') {
        Some(here)
    } else {
        key_before(&line[..col]).map(str::to_string)
    };
    // The key owning an inline table on this line, if the offset is inside it.
    let outer = line[..col].rfind('{').and_then(|p| key_before(&line[..p])).map(str::to_string);
    let mut parts: Vec<String> = Vec::new();
    if !header.is_empty() {
        parts.push(header);
    }
    match (outer, inner) {
        (Some(o), Some(i)) if o != i => {
            parts.push(o);
            parts.push(i);
        }
        (Some(o), _) => parts.push(o),
        (None, Some(i)) => parts.push(i),
        (None, None) => {}
    }
    (!parts.is_empty()).then(|| parts.join("."))
}

fn syntax_error(text: &str, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map_or(0, |s| s.start);
    let (line, column) = line_col(text, offset);
    ConfigError::Syntax {
        line,
        column,
        key: e.span().and_then(|s| key_at(text, s.start)),
        message: e.message().trim().to_string(),
    }
}

impl Experiment {
    /// Parses and validates an experiment.
    pub fn from_toml_str(text: &str) -> Result<Experiment, ConfigError> {
        let raw: RawExperiment = toml::from_str(text).map_err(|e| syntax_error(text, &e))?;
        let kind = OperatorKind::parse(&raw.operator.kind).ok_or_else(|| {
            ConfigError::invalid(
                "operator.type",
                format!("unknown operator {:?}; allowed: {}", raw.operator.kind, operator_names()),
            )
        })?;
        let o = &raw.operator;
        let join_input = JoinInput::parse(&o.join_input).ok_or_else(|| {
            let allowed = JoinInput::ALL
                .iter()
                .map(|j| format!("\"{}\"", j.name()))
                .collect::<Vec<_>>()
                .join(", ");
            ConfigError::invalid(
                "operator.join_input",
                format!("unknown state view {:?}; allowed: {allowed}", o.join_input),
            )
        })?;
        let operator = OperatorParams {
            kind,
            window: o.window,
            slide: o.slide,
            session_gap: o.session_gap,
            lower: o.lower,
            upper: o.upper,
            allowed_lateness: o.allowed_lateness,
            key_bytes: o.key_bytes,
            join_input,
        };
        let sources = if raw.sources.is_empty() {
            vec![Source::default(); if kind.two_inputs() { 2 } else { 1 }]
        } else {
            raw.sources
                .into_iter()
                .enumerate()
                .map(|(i, s)| s.into_source(i))
                .collect::<Result<Vec<_>, _>>()?
        };
        let e = Experiment {
            seed: raw.seed,
            time_unit: raw.time_unit,
            sources,
            operator,
            run: raw.run,
        };
        e.validate()?;
        Ok(e)
    }

    /// Reads and parses an experiment file. Relative paths inside it (`csv.path`,
    /// `empirical` key files) are resolved against the file's directory.
    pub fn from_file(path: &Path) -> Result<Experiment, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::Io { path: path.to_path_buf(), message: e.to_string() })?;
        let mut e = Experiment::from_toml_str(&text)?;
        if let Some(dir) = path.parent() {
            e.resolve_paths(dir);
        }
        Ok(e)
    }

    /// Makes relative input paths relative to `dir`.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for s in &mut self.sources {
            match &mut s.input {
                SourceInput::Csv(c) => fix(&mut c.path),
                SourceInput::Synthetic(y) => {
                    if let KeyPopularity::Empirical { path } = &mut y.key_popularity {
                        fix(path);
                    }
                }
            }
        }
    }

    /// The experiment as TOML; every key is written explicitly, and
    /// `from_toml_str(&e.to_toml())` gives `e` back. (Integers above `i64::MAX`, which
    /// TOML cannot hold, make the result a single comment line saying so.)
    pub fn to_toml(&self) -> String {
        let raw = RawExperiment {
            seed: self.seed,
            time_unit: self.time_unit.clone(),
            sources: self.sources.iter().map(RawSource::from_source).collect(),
            operator: RawOperator {
                kind: self.operator.kind.name().to_string(),
                window: self.operator.window,
                slide: self.operator.slide,
                session_gap: self.operator.session_gap,
                lower: self.operator.lower,
                upper: self.operator.upper,
                allowed_lateness: self.operator.allowed_lateness,
                key_bytes: self.operator.key_bytes,
                join_input: self.operator.join_input.name().to_string(),
            },
            run: self.run.clone(),
        };
        toml::to_string(&raw).unwrap_or_else(|e| format!("# cannot write as TOML: {e}\n"))
    }

    /// The operator parameters.
    pub fn operator_params(&self) -> OperatorParams {
        self.operator.clone()
    }

    /// Checks values and combinations; the error names the key and what is allowed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let op = &self.operator;
        let kind = op.kind;
        let need = if kind.two_inputs() { 2 } else { 1 };
        if self.sources.len() != need {
            return Err(ConfigError::invalid(
                "source",
                format!(
                    "operator `{}` reads {need} input(s), so exactly {need} [[source]] table(s) \
                     are needed; got {}",
                    kind.name(),
                    self.sources.len()
                ),
            ));
        }
        if op.window < 1 {
            return Err(ConfigError::invalid(
                "operator.window",
                format!("must be >= 1, got {}", op.window),
            ));
        }
        if op.slide < 1 || op.slide > op.window {
            return Err(ConfigError::invalid(
                "operator.slide",
                format!("must be in 1..=window (window = {}), got {}", op.window, op.slide),
            ));
        }
        if op.session_gap < 1 {
            return Err(ConfigError::invalid(
                "operator.session_gap",
                format!("must be >= 1, got {}", op.session_gap),
            ));
        }
        if op.lower > op.upper {
            return Err(ConfigError::invalid(
                "operator.lower",
                format!("must be <= operator.upper ({}), got {}", op.upper, op.lower),
            ));
        }
        if op.allowed_lateness < 0 {
            return Err(ConfigError::invalid(
                "operator.allowed_lateness",
                format!("must be >= 0, got {}", op.allowed_lateness),
            ));
        }
        if op.key_bytes < 1 {
            return Err(ConfigError::invalid("operator.key_bytes", "must be >= 1, got 0"));
        }
        for (i, s) in self.sources.iter().enumerate() {
            validate_source(i, s)?;
        }
        self.validate_run()
    }

    fn validate_run(&self) -> Result<(), ConfigError> {
        let r = &self.run;
        for (i, name) in r.stores.iter().enumerate() {
            if name.parse::<spillway_store::StoreKind>().is_err() {
                return Err(ConfigError::invalid(
                    format!("run.stores[{i}]"),
                    format!("unknown store {name:?}; allowed: \"mem\", \"hashlog\", \"rocksdb\""),
                ));
            }
        }
        if r.mode == Mode::Online && r.stores.is_empty() {
            return Err(ConfigError::invalid(
                "run.stores",
                "mode = \"online\" needs at least one store (mem, hashlog, rocksdb)",
            ));
        }
        match (r.loop_mode, r.rate) {
            (LoopMode::Open, None) => Err(ConfigError::invalid(
                "run.rate",
                "loop = \"open\" needs `rate` (ops per second, > 0)",
            )),
            (LoopMode::Open, Some(rate)) if !(rate.is_finite() && rate > 0.0) => {
                Err(ConfigError::invalid("run.rate", format!("must be a number > 0, got {rate}")))
            }
            (LoopMode::Closed, Some(_)) => Err(ConfigError::invalid(
                "run.rate",
                "only allowed with loop = \"open\" (a closed loop is not paced)",
            )),
            _ => Ok(()),
        }
    }
}

fn validate_source(i: usize, s: &Source) -> Result<(), ConfigError> {
    let key = |k: &str| format!("source[{i}].{k}");
    if s.watermark_every < 1 {
        return Err(ConfigError::invalid(
            key("watermark_every"),
            format!("must be >= 1 time unit, got {}", s.watermark_every),
        ));
    }
    if s.lateness_bound < 0 {
        return Err(ConfigError::invalid(
            key("lateness_bound"),
            format!("must be >= 0, got {}", s.lateness_bound),
        ));
    }
    s.value_size.validate().map_err(|m| ConfigError::invalid(key("value_size"), m))?;
    match &s.input {
        SourceInput::Synthetic(y) => {
            if y.events == 0 {
                return Err(ConfigError::invalid(key("events"), "must be >= 1, got 0"));
            }
            if y.keys == 0 {
                return Err(ConfigError::invalid(key("keys"), "must be >= 1, got 0"));
            }
            y.key_popularity
                .validate(y.keys)
                .map_err(|m| ConfigError::invalid(key("key_popularity"), m))?;
            y.gap.validate().map_err(|m| ConfigError::invalid(key("gap"), m))?;
            if !(0.0..=1.0).contains(&y.out_of_order) {
                return Err(ConfigError::invalid(
                    key("out_of_order"),
                    format!("must be a probability in [0, 1], got {}", y.out_of_order),
                ));
            }
            if y.out_of_order > 0.0 && s.lateness_bound < 1 {
                return Err(ConfigError::invalid(
                    key("lateness_bound"),
                    format!(
                        "must be >= 1 when out_of_order > 0 (got out_of_order = {}, \
                         lateness_bound = {})",
                        y.out_of_order, s.lateness_bound
                    ),
                ));
            }
        }
        SourceInput::Csv(c) => {
            if !(c.time_multiplier.is_finite() && c.time_multiplier > 0.0) {
                return Err(ConfigError::invalid(
                    key("csv.time_multiplier"),
                    format!("must be a finite number > 0, got {}", c.time_multiplier),
                ));
            }
            for (name, col) in [
                ("key", Some(&c.key)),
                ("time", Some(&c.time)),
                ("event_type", c.event_type.as_ref()),
            ] {
                if let Some(Column::Name(n)) = col {
                    if !c.header {
                        return Err(ConfigError::invalid(
                            key(&format!("csv.{name}")),
                            format!(
                                "column name {n:?} needs `header = true`; without a header \
                                 give a 0-based column index"
                            ),
                        ));
                    }
                }
            }
            match (&c.event_type, &c.type_filter) {
                (Some(_), None) => {
                    return Err(ConfigError::invalid(
                        key("csv.event_type"),
                        "only used together with `type_filter` (give both or neither)",
                    ))
                }
                (None, Some(_)) => {
                    return Err(ConfigError::invalid(
                        key("csv.type_filter"),
                        "needs `event_type` (the column compared with it)",
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ConfigError {
        Experiment::from_toml_str(text).expect_err("should be rejected")
    }

    /// The error names `key` (in its key field and in its message).
    fn assert_names(text: &str, key: &str) {
        let e = err(text);
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.to_string().contains(key), "{e}");
    }

    #[test]
    fn example_parses_to_the_defaults() {
        let e = Experiment::from_toml_str(EXAMPLE_TOML).unwrap();
        assert_eq!(e, Experiment::default());
        assert_eq!(Experiment::from_toml_str("").unwrap(), Experiment::default());
    }

    #[test]
    fn defaults_are_gadgets() {
        let e = Experiment::default();
        let SourceInput::Synthetic(s) = &e.sources[0].input else { panic!() };
        assert_eq!(s.keys, 1_000_000);
        assert_eq!(s.key_popularity, KeyPopularity::Zipf { s: 1.0 });
        assert_eq!(s.gap, Gap::Exponential { lambda: 10.0 });
        assert_eq!(e.sources[0].value_size, ValueSize::Constant { bytes: 10 });
        assert_eq!(
            e.operator_params(),
            OperatorParams::new(OperatorKind::TumblingKeyedIncremental)
        );
    }

    #[test]
    fn two_input_default_sources() {
        let e = Experiment::from_toml_str("[operator]\ntype = \"join.interval\"\n").unwrap();
        assert_eq!(e.sources.len(), 2);
    }

    fn full() -> Experiment {
        Experiment::from_toml_str(
            r#"
seed = 7
time_unit = "s"
[[source]]
events = 500
keys = 100
key_popularity = { type = "hotspot", hot_fraction = 0.1, hot_op_fraction = 0.9 }
gap = { type = "normal", mean = 0.5, stddev = 0.25 }
value_size = { type = "uniform", min = 3, max = 40 }
watermark_every = 2
out_of_order = 0.25
lateness_bound = 3
disorder = "gadget"
[[source]]
csv = { path = "jobs.csv", key = "job", time = 1, time_multiplier = 1e-6, header = true, event_type = 2, type_filter = "FINISH" }
lateness_bound = 10
[operator]
type = "join.sliding"
window = 10
slide = 2
lower = -3
upper = 4
allowed_lateness = 2
key_bytes = 16
join_input = "has_unique_key"
[run]
stores = ["mem", "hashlog"]
mode = "online"
loop = "open"
rate = 1000.5
warmup_ops = 10
max_ops = 99
"#,
        )
        .unwrap()
    }

    #[test]
    fn toml_round_trip() {
        for e in [Experiment::default(), full()] {
            let text = e.to_toml();
            let back = Experiment::from_toml_str(&text)
                .unwrap_or_else(|err| panic!("{err}\n--- text:\n{text}"));
            assert_eq!(back, e, "{text}");
        }
        let e = full();
        assert_eq!(e.seed, 7);
        assert_eq!(e.operator.kind, OperatorKind::JoinSliding);
        assert_eq!(e.operator.join_input, JoinInput::HasUniqueKey);
        assert_eq!(e.run.rate, Some(1000.5));
        assert_eq!(
            (e.sources[0].disorder, e.sources[1].disorder),
            (Disorder::Gadget, Disorder::Bounded)
        );
        let SourceInput::Csv(c) = &e.sources[1].input else { panic!() };
        assert_eq!(c.key, Column::Name("job".into()));
        assert_eq!(c.time, Column::Index(1));
        for kp in [
            KeyPopularity::Uniform { min: Some(1), max: None },
            KeyPopularity::Sequential,
            KeyPopularity::Constant { key: 3 },
            KeyPopularity::Latest { s: 0.9, insert_fraction: 0.5 },
            KeyPopularity::Empirical { path: "w.txt".into() },
        ] {
            let mut e = Experiment::default();
            let SourceInput::Synthetic(s) = &mut e.sources[0].input else { panic!() };
            s.key_popularity = kp;
            s.gap = Gap::Uniform { a: 0.0, b: 2.0 };
            e.sources[0].value_size = ValueSize::Exponential { mean: 30.0 };
            assert_eq!(Experiment::from_toml_str(&e.to_toml()).unwrap(), e);
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = err("sed = 1\n");
        assert!(e.to_string().contains("sed"), "{e}");
        assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e:?}");
        let e = err("[operator]\nwindw = 3\n");
        assert!(e.to_string().contains("windw"), "{e}");
        assert!(matches!(e, ConfigError::Syntax { line: 2, .. }), "{e:?}");
        let e = err("[[source]]\ngap = { type = \"exponential\", lamda = 2.0 }\n");
        assert!(e.to_string().contains("lamda"), "{e}");
        let e = err("[[source]]\nkey_popularity = { type = \"zipff\" }\n");
        assert!(e.to_string().contains("zipff") && e.to_string().contains("zipf"), "{e}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let e = err("[[source]]\nevents = \"many\"\n");
        assert_eq!(e.key(), Some("source[0].events"), "{e}");
        let e = err("[[source]]\n[[source]]\nkeys = -3\n[operator]\ntype = \"join.tumbling\"\n");
        assert_eq!(e.key(), Some("source[1].keys"), "{e}");
        let e = err("[run]\nmode = \"onlin\"\n");
        assert_eq!(e.key(), Some("run.mode"), "{e}");
        assert!(e.to_string().contains("online"), "{e}");
        let e = err("[[source]]\ngap = { type = \"uniform\", a = 1.0, b = \"x\" }\n");
        assert_eq!(e.key(), Some("source[0].gap"), "{e}");
        let e = err("[[source]]\n[[source]]\n[source.gap]\ntype = \"constant\"\nvalue = \"x\"\n");
        assert_eq!(e.key(), Some("source[1].gap"), "{e}");
        let e = err("seed = \n");
        assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e:?}");
    }

    #[test]
    fn impossible_combinations() {
        assert_names("[operator]\ntype = \"join.interval\"\n[[source]]\n", "source");
        assert_names("[[source]]\n[[source]]\n", "source");
        assert_names("[operator]\ntype = \"tumbling.keyed.holstic\"\n", "operator.type");
        assert_names("[operator]\nwindow = 0\n", "operator.window");
        assert_names("[operator]\nslide = 0\n", "operator.slide");
        assert_names("[operator]\nwindow = 2\nslide = 3\n", "operator.slide");
        assert_names("[operator]\nlower = 3\nupper = 2\n", "operator.lower");
        assert_names("[operator]\nsession_gap = 0\n", "operator.session_gap");
        assert_names("[operator]\nallowed_lateness = -1\n", "operator.allowed_lateness");
        assert_names("[operator]\njoin_input = \"unique\"\n", "operator.join_input");
        let e = err("[operator]\njoin_input = \"unique\"\n");
        assert!(e.to_string().contains("join_key_contains_unique_key"), "{e}");
        assert_names("[[source]]\nevents = 0\n", "source[0].events");
        assert_names("[[source]]\nkeys = 0\n", "source[0].keys");
        assert_names(
            "[[source]]\nout_of_order = 1.5\nlateness_bound = 2\n",
            "source[0].out_of_order",
        );
        assert_names("[[source]]\nout_of_order = 0.1\n", "source[0].lateness_bound");
        assert_names("[[source]]\nwatermark_every = 0\n", "source[0].watermark_every");
        assert_names(
            "[[source]]\nkey_popularity = { type = \"hotspot\", hot_fraction = 2.0 }\n",
            "source[0].key_popularity",
        );
        assert_names(
            "[[source]]\ngap = { type = \"exponential\", lambda = 0.0 }\n",
            "source[0].gap",
        );
        assert_names(
            "[[source]]\ncsv = { path = \"x\", key = \"k\", time = 1 }\n",
            "source[0].csv.key",
        );
        assert_names(
            "[[source]]\nevents = 5\ncsv = { path = \"x\", key = 0, time = 1 }\n",
            "source[0].events",
        );
        assert_names(
            "[[source]]\ncsv = { path = \"x\", key = 0, time = 1, type_filter = \"a\" }\n",
            "source[0].csv.type_filter",
        );
        assert_names(
            "[[source]]\ncsv = { path = \"x\", key = 0, time = 1, time_multiplier = 0.0 }\n",
            "source[0].csv.time_multiplier",
        );
        assert_names("[run]\nloop = \"open\"\n", "run.rate");
        assert_names("[run]\nrate = 5.0\n", "run.rate");
        assert_names("[run]\nstores = [\"mem\", \"leveldb\"]\n", "run.stores[1]");
        assert_names("[run]\nmode = \"online\"\nstores = []\n", "run.stores");
        // The operator-name error lists the allowed names.
        let e = err("[operator]\ntype = \"nope\"\n");
        assert!(e.to_string().contains("session.holistic"), "{e}");
    }

    #[test]
    fn from_file_resolves_relative_paths() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("exp.toml");
        std::fs::write(&p, "[[source]]\ncsv = { path = \"t.csv\", key = 0, time = 1 }\n").unwrap();
        let e = Experiment::from_file(&p).unwrap();
        let SourceInput::Csv(c) = &e.sources[0].input else { panic!() };
        assert_eq!(c.path, dir.path().join("t.csv"));
        let missing = dir.path().join("none.toml");
        let e = Experiment::from_file(&missing).unwrap_err();
        assert!(matches!(e, ConfigError::Io { .. }));
    }

    proptest::proptest! {
        #[test]
        fn round_trip_random_experiments(
            seed in 0u64..=i64::MAX as u64,
            events in 1u64..1_000_000_000,
            keys in 1u64..1_000_000_000,
            s in 0.01f64..5.0,
            lambda in 0.001f64..1000.0,
            ooo in 0.0f64..=1.0,
            lateness in 1i64..1000,
            every in 1i64..1000,
            window in 1i64..1_000_000,
            slide_frac in 0.0f64..=1.0,
            lower in -1000i64..1000,
            span in 0i64..1000,
            two in proptest::bool::ANY,
            gadget in proptest::bool::ANY,
        ) {
            let mut e = Experiment { seed, ..Experiment::default() };
            let src = Source {
                input: SourceInput::Synthetic(Synthetic {
                    events,
                    keys,
                    key_popularity: KeyPopularity::Zipf { s },
                    gap: Gap::Exponential { lambda },
                    out_of_order: ooo,
                }),
                value_size: ValueSize::Normal { mean: lambda, stddev: s },
                watermark_every: every,
                lateness_bound: lateness,
                disorder: if gadget { Disorder::Gadget } else { Disorder::Bounded },
            };
            e.sources = vec![src; if two { 2 } else { 1 }];
            e.operator.kind =
                if two { OperatorKind::JoinInterval } else { OperatorKind::SlidingAllHolistic };
            e.operator.window = window;
            e.operator.slide = ((window as f64 * slide_frac) as i64).clamp(1, window);
            e.operator.lower = lower;
            e.operator.upper = lower + span;
            e.validate().unwrap();
            let back = Experiment::from_toml_str(&e.to_toml()).unwrap();
            proptest::prop_assert_eq!(back, e);
        }
    }
}
