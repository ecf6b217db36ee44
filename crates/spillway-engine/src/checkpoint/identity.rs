//! The checkpoint identity: what a resume must match, as typed fields (never Debug text,
//! so adding a field to an options struct elsewhere cannot change a recorded identity).
//! [`Identity::changes`] names each field that differs, with both values.

use std::fmt;
use std::path::Path;

use crate::source::{OnError, SourceOptions};
use crate::value::{DataType, Schema, TimeUnit};

/// What a checkpoint's events, state and results depend on besides the query text (which
/// a backfill may change: [`super::Record::query`] is apart).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// Where the events come from.
    pub input: Input,
    /// The input's columns, their types and the event-time column.
    pub schema: Schema,
    /// Allowed lateness, in the time column's unit.
    pub allowed_lateness: i64,
    /// The windowed aggregation's watermark delay, in the time column's unit.
    pub watermark_delay: i64,
    /// The state store.
    pub store: StoreIdentity,
    /// The SELECT items computed (a Kafka routing stage computes some); `None`: all.
    pub items: Option<Vec<usize>>,
    /// How `RANGE` frames treat rows of equal time.
    pub ties: crate::operator::over::peers::Ties,
}

/// Where a checkpointed job's events come from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Input {
    /// A file `spillway run` reads (a resume reads it on from the recorded position).
    File {
        /// The path as given.
        path: String,
        /// The event-time column.
        time_column: String,
        /// Its unit.
        time_unit: TimeUnit,
        /// `--schema` overrides.
        schema_overrides: Vec<(String, DataType)>,
        /// The dead-letter file of skipped rows (`None`: malformed rows stop the run).
        dead_letter: Option<String>,
        /// Rows type inference looks at.
        infer_rows: u64,
    },
    /// Events the caller pushes (Python's `Stream`, a Kafka worker's task): the caller
    /// keeps their position (a Kafka task records its offset in the checkpoint's tag).
    Pushed,
    /// Events a front-end generates, as it names them (`spillway demo`'s payments).
    Named(String),
}

impl Input {
    /// A file read with `options` (its type hints left out: they matter only through the
    /// schema, compared on its own, and a backfill's new query changes them).
    pub fn file(path: &Path, options: &SourceOptions) -> Input {
        Input::File {
            path: path.display().to_string(),
            time_column: options.time_column.clone(),
            time_unit: options.time_unit,
            schema_overrides: options.schema_overrides.clone(),
            dead_letter: match &options.on_error {
                OnError::Stop => None,
                OnError::Skip { dead_letter } => Some(dead_letter.display().to_string()),
            },
            infer_rows: options.infer_rows as u64,
        }
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::File {
                path,
                time_column,
                time_unit,
                schema_overrides,
                dead_letter,
                infer_rows,
            } => {
                write!(f, "file {path} (time column {time_column} in {}", time_unit.name())?;
                if !schema_overrides.is_empty() {
                    let o: Vec<String> =
                        schema_overrides.iter().map(|(c, t)| format!("{c}:{t}")).collect();
                    write!(f, ", --schema {}", o.join(","))?;
                }
                match dead_letter {
                    Some(d) => write!(f, ", malformed rows to {d}")?,
                    None => write!(f, ", malformed rows stop")?,
                }
                write!(f, ", {infer_rows} inference rows)")
            }
            Input::Pushed => f.write_str("pushed events"),
            Input::Named(n) => f.write_str(n),
        }
    }
}

/// The state store a checkpoint lives in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreIdentity {
    /// The backend ([`spillway_store::StoreKind::name`]).
    pub kind: String,
}

impl StoreIdentity {
    /// The identity of backend `kind`.
    pub fn of(kind: spillway_store::StoreKind) -> StoreIdentity {
        StoreIdentity { kind: kind.name().to_string() }
    }
}

/// One field of two identities that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// What differs ("allowed lateness", "schema", ...).
    pub what: &'static str,
    /// Its value in the checkpoint.
    pub recorded: String,
    /// Its value in this run.
    pub now: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (checkpoint: {}; now: {})", self.what, self.recorded, self.now)
    }
}

/// `name:type` for each column, the time column marked with its unit.
pub fn describe_schema(s: &Schema) -> String {
    let cols: Vec<String> = s
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i == s.time_index() {
                format!("{}:{} (time, {})", f.name, f.ty, s.time_unit().name())
            } else {
                format!("{}:{}", f.name, f.ty)
            }
        })
        .collect();
    cols.join(", ")
}

impl Identity {
    /// The fields of `now` that differ from this recorded identity, in a fixed order.
    pub fn changes(&self, now: &Identity) -> Vec<Change> {
        let mut out = Vec::new();
        let mut cmp = |what, a: String, b: String| {
            if a != b {
                out.push(Change { what, recorded: a, now: b });
            }
        };
        cmp("input", self.input.to_string(), now.input.to_string());
        cmp("schema", describe_schema(&self.schema), describe_schema(&now.schema));
        cmp(
            "allowed lateness",
            self.allowed_lateness.to_string(),
            now.allowed_lateness.to_string(),
        );
        cmp("watermark delay", self.watermark_delay.to_string(), now.watermark_delay.to_string());
        cmp("store", self.store.kind.clone(), now.store.kind.clone());
        let items = |i: &Option<Vec<usize>>| match i {
            None => "all".to_string(),
            Some(v) => format!("{v:?}"),
        };
        cmp("SELECT items", items(&self.items), items(&now.items));
        cmp("ties", self.ties.name().to_string(), now.ties.name().to_string());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Field;
    use proptest::prelude::*;

    fn identity() -> Identity {
        let schema = Schema::new(
            vec![
                Field { name: "ts".into(), ty: DataType::Int },
                Field { name: "card".into(), ty: DataType::Int },
            ],
            "ts",
            TimeUnit::Ms,
        )
        .unwrap();
        Identity {
            input: Input::file(Path::new("in.csv"), &SourceOptions::new("ts")),
            schema,
            allowed_lateness: 0,
            watermark_delay: 0,
            store: StoreIdentity::of(spillway_store::StoreKind::HashLog),
            items: None,
            ties: Default::default(),
        }
    }

    #[test]
    fn changes_name_each_field_with_both_values() {
        let a = identity();
        assert!(a.changes(&a.clone()).is_empty());
        let mut b = a.clone();
        b.allowed_lateness = 5000;
        b.schema = Schema::new(
            vec![
                Field { name: "ts".into(), ty: DataType::Int },
                Field { name: "card".into(), ty: DataType::Str },
            ],
            "ts",
            TimeUnit::Ms,
        )
        .unwrap();
        let c: Vec<String> = a.changes(&b).iter().map(ToString::to_string).collect();
        assert_eq!(
            c,
            [
                "schema (checkpoint: ts:int (time, ms), card:int; now: ts:int (time, ms), card:string)",
                "allowed lateness (checkpoint: 0; now: 5000)",
            ]
        );
    }

    #[test]
    fn the_input_identity_ignores_type_hints() {
        let mut o = SourceOptions::new("ts");
        let a = Input::file(Path::new("x"), &o);
        o.type_hints.push(("amount".into(), DataType::Float));
        assert_eq!(a, Input::file(Path::new("x"), &o));
        o.time_unit = TimeUnit::S;
        assert_ne!(a, Input::file(Path::new("x"), &o));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// A recorded identity that is any bytes, or a valid one with a byte changed, cut or
        /// a length set huge, decodes to an identity or an error, and comparing a decoded one
        /// with this run's never panics.
        #[test]
        fn hostile_identities_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let now = identity();
            let good = postcard::to_stdvec(&now).unwrap();
            let mut huge = good[..at % good.len()].to_vec();
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            huge.extend_from_slice(&good[at % good.len()..]);
            let bad = crate::hostile::flipped(&good, at, byte);
            for b in [&garbage[..], &good[..cut % (good.len() + 1)], &bad, &huge] {
                if let Ok(was) = postcard::from_bytes::<Identity>(b) {
                    let _ = was.changes(&now);
                    let _ = describe_schema(&was.schema);
                }
            }
        }
    }
}
