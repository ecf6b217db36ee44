//! Values, types, schemas and events: the vocabulary every other engine module speaks.
//!
//! An [`Event`] is one input row with its event time (an integer in the schema's
//! [`TimeUnit`]) and its arrival sequence number. Rows are positional: `row[i]` holds the
//! value of `schema.fields()[i]`.

use std::fmt;

/// A column type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DataType {
    /// 64-bit signed integer.
    Int,
    /// 64-bit IEEE float.
    Float,
    /// UTF-8 string.
    Str,
    /// Boolean.
    Bool,
}

impl DataType {
    /// The lowercase name used in `--schema` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int => "int",
            DataType::Float => "float",
            DataType::Str => "string",
            DataType::Bool => "bool",
        }
    }

    /// Parses `int|float|string|bool` (also `str`, `integer`, `double`, `boolean`).
    pub fn parse(s: &str) -> Option<DataType> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "int" | "integer" | "bigint" | "i64" => DataType::Int,
            "float" | "double" | "f64" | "real" => DataType::Float,
            "string" | "str" | "text" | "varchar" => DataType::Str,
            "bool" | "boolean" => DataType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One field value. `Null` is SQL's NULL (an empty CSV cell, a JSON `null` or a missing
/// JSON key).
//
// `repr(u64)`: an 8-byte tag and every payload at offset 8, so a copy of a `Value` is three
// whole words. With the default layout a `Bool`'s payload sits at byte 1 and the compiler
// copies bytes 1..8 with overlapping narrow loads that miss store forwarding; that stall
// was the hottest instruction of building an output row (`perf annotate`, Q1).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[repr(u64)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Integer.
    Int(i64),
    /// Float.
    Float(f64),
    /// String.
    Str(Box<str>),
    /// Boolean.
    Bool(bool),
}

impl Value {
    /// The value's type, or `None` for NULL.
    pub fn data_type(&self) -> Option<DataType> {
        match self {
            Value::Null => None,
            Value::Int(_) => Some(DataType::Int),
            Value::Float(_) => Some(DataType::Float),
            Value::Str(_) => Some(DataType::Str),
            Value::Bool(_) => Some(DataType::Bool),
        }
    }

    /// True for NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Numeric view: ints and floats as f64; anything else `None`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// Appends a stable byte encoding of the value, used for group keys and distinct
    /// sets: equal values give equal bytes, and ints sort in numeric order.
    /// Layout: one tag byte (0 null, 1 int, 2 float, 3 str, 4 bool), then for an int its
    /// big-endian bytes with the sign bit flipped, for a float its bits (one NaN, -0
    /// folded to +0), for a string its bytes with each 0x00 written as 0x00 0xFF and a
    /// 0x00 0x01 terminator (so concatenated keys stay unambiguous), for a bool one byte.
    pub fn encode_key(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.push(0),
            Value::Int(i) => encode_int_key(*i, out),
            Value::Float(f) => encode_float_key(*f, out),
            Value::Str(s) => encode_str_key(s, out),
            Value::Bool(b) => encode_bool_key(*b, out),
        }
    }
}

impl Value {
    /// Reads one value written by [`Value::encode_key`] from the front of `bytes` and
    /// advances past it; `None` if the bytes are not such an encoding. Floats come back
    /// as encoded (`-0` as `+0`, every NaN as one NaN).
    pub fn decode_key(bytes: &mut &[u8]) -> Option<Value> {
        let (&tag, rest) = bytes.split_first()?;
        let eight = |rest: &[u8]| -> Option<u64> {
            Some(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?))
        };
        let (v, used) = match tag {
            0 => (Value::Null, 0),
            1 => (Value::Int((eight(rest)? ^ (1 << 63)) as i64), 8),
            2 => (Value::Float(f64::from_bits(eight(rest)?)), 8),
            3 => {
                let mut s = Vec::new();
                let mut i = 0;
                loop {
                    match (rest.get(i)?, rest.get(i + 1)) {
                        (0, Some(1)) => break,
                        (0, Some(0xFF)) => s.push(0),
                        (0, _) => return None,
                        (&b, _) => {
                            s.push(b);
                            i += 1;
                            continue;
                        }
                    }
                    i += 2;
                }
                (Value::Str(String::from_utf8(s).ok()?.into_boxed_str()), i + 2)
            }
            4 => (Value::Bool(*rest.first()? != 0), 1),
            _ => return None,
        };
        *bytes = &rest[used..];
        Some(v)
    }
}

/// [`Value::encode_key`] of an int (also used for scalars that are not in a `Value`).
pub(crate) fn encode_int_key(i: i64, out: &mut Vec<u8>) {
    out.push(1);
    out.extend_from_slice(&((i as u64) ^ (1 << 63)).to_be_bytes());
}

/// [`Value::encode_key`] of a float: `-0` folds to `+0`, every NaN to one NaN.
pub(crate) fn encode_float_key(f: f64, out: &mut Vec<u8>) {
    out.push(2);
    let bits = if f.is_nan() { f64::NAN.to_bits() } else { (f + 0.0).to_bits() };
    out.extend_from_slice(&bits.to_be_bytes());
}

/// [`Value::encode_key`] of a string.
pub(crate) fn encode_str_key(s: &str, out: &mut Vec<u8>) {
    out.push(3);
    for &b in s.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 1]);
}

/// [`Value::encode_key`] of a bool.
pub(crate) fn encode_bool_key(b: bool, out: &mut Vec<u8>) {
    out.push(4);
    out.push(u8::from(b));
}

impl fmt::Display for Value {
    /// Output formatting: NULL as the empty string, floats in Rust's shortest
    /// round-trip form (always with a `.` or exponent so they read back as floats).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => Ok(()),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => {
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
                    write!(f, "{x:.1}")
                } else {
                    write!(f, "{x}")
                }
            }
            Value::Str(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A named, typed column.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Field {
    /// Column name as in the input header / JSON key.
    pub name: String,
    /// Column type.
    pub ty: DataType,
}

/// The unit of the event-time column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimeUnit {
    /// Seconds.
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
    /// Nanoseconds.
    Ns,
}

impl TimeUnit {
    /// Nanoseconds per unit.
    pub fn nanos(self) -> i64 {
        match self {
            TimeUnit::S => 1_000_000_000,
            TimeUnit::Ms => 1_000_000,
            TimeUnit::Us => 1_000,
            TimeUnit::Ns => 1,
        }
    }

    /// Parses `s|ms|us|ns`.
    pub fn parse(s: &str) -> Option<TimeUnit> {
        Some(match s {
            "s" => TimeUnit::S,
            "ms" => TimeUnit::Ms,
            "us" => TimeUnit::Us,
            "ns" => TimeUnit::Ns,
            _ => return None,
        })
    }

    /// `s|ms|us|ns`.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::S => "s",
            TimeUnit::Ms => "ms",
            TimeUnit::Us => "us",
            TimeUnit::Ns => "ns",
        }
    }
}

/// The columns of a stream, and which one is event time.
///
/// Deserializing checks what [`Schema::new`] checks (a schema topic or a checkpoint may
/// hold what another program wrote): the time column exists and holds integers.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "SchemaFields")]
pub struct Schema {
    fields: Vec<Field>,
    time_index: usize,
    time_unit: TimeUnit,
}

/// [`Schema`]'s serialized fields (the same layout), before they are checked.
#[derive(serde::Deserialize)]
struct SchemaFields {
    fields: Vec<Field>,
    time_index: usize,
    time_unit: TimeUnit,
}

impl TryFrom<SchemaFields> for Schema {
    type Error = String;

    fn try_from(s: SchemaFields) -> Result<Schema, String> {
        match s.fields.get(s.time_index) {
            None => Err(format!(
                "schema's time column index {} is past its {} columns",
                s.time_index,
                s.fields.len()
            )),
            Some(f) if f.ty != DataType::Int => Err(format!(
                "schema's time column `{}` must hold integers, found type {}",
                f.name, f.ty
            )),
            Some(_) => {
                Ok(Schema { fields: s.fields, time_index: s.time_index, time_unit: s.time_unit })
            }
        }
    }
}

impl Schema {
    /// A schema; `time_column` must name an `Int` field.
    pub fn new(
        fields: Vec<Field>,
        time_column: &str,
        time_unit: TimeUnit,
    ) -> Result<Schema, String> {
        let time_index = fields.iter().position(|f| f.name == time_column).ok_or_else(|| {
            format!(
                "time column `{time_column}` is not in the input (columns: {})",
                fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ")
            )
        })?;
        if fields[time_index].ty != DataType::Int {
            return Err(format!(
                "time column `{time_column}` must hold integers (in {}), found type {}",
                time_unit.name(),
                fields[time_index].ty
            ));
        }
        Ok(Schema { fields, time_index, time_unit })
    }

    /// All fields in input order.
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// Position of the field called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// Position of the event-time field.
    pub fn time_index(&self) -> usize {
        self.time_index
    }

    /// Unit of the event-time field.
    pub fn time_unit(&self) -> TimeUnit {
        self.time_unit
    }
}

/// One row of values, positional per [`Schema::fields`].
pub type Row = Vec<Value>;

/// Order of events in time: event time, then arrival sequence number (ties in time are
/// ordered by arrival).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct EventKey {
    /// Event time in the schema's unit.
    pub time: i64,
    /// Arrival sequence number (0-based, unique per run).
    pub seq: u64,
}

impl EventKey {
    /// Length of the [`encode_ordered`](Self::encode_ordered) encoding.
    pub const ORDERED_LEN: usize = 16;

    /// Appends the 16-byte order-preserving encoding of the key (time with its sign bit
    /// flipped, then seq, both big-endian): byte order equals `(time, seq)` order. The
    /// `FIRST_VALUE` / `LAST_VALUE` trees of `aggregate::external` start their keys with
    /// it.
    pub fn encode_ordered(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&((self.time as u64) ^ (1 << 63)).to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
    }

    /// The key at the front of an [`encode_ordered`](Self::encode_ordered) encoding
    /// (`None` if `bytes` is shorter than 16 bytes); the rest of `bytes` is whatever
    /// followed it.
    pub fn decode_ordered(bytes: &[u8]) -> Option<EventKey> {
        let t = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let s = u64::from_be_bytes(bytes.get(8..Self::ORDERED_LEN)?.try_into().ok()?);
        Some(EventKey { time: (t ^ (1 << 63)) as i64, seq: s })
    }
}

/// An input event: its row, its event time (also present in the row) and its arrival
/// sequence number.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Event time in the schema's unit.
    pub time: i64,
    /// Arrival sequence number (0-based, unique per run).
    pub seq: u64,
    /// Field values.
    pub row: Row,
}

impl Event {
    /// The event's position in time order.
    pub fn key(&self) -> EventKey {
        EventKey { time: self.time, seq: self.seq }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_event_keys_sort_by_time_then_seq() {
        let ks = [(i64::MIN, 0), (-5, 9), (-5, 10), (0, 0), (3, u64::MAX), (i64::MAX, 1)];
        let enc: Vec<Vec<u8>> = ks
            .iter()
            .map(|&(time, seq)| {
                let mut v = Vec::new();
                EventKey { time, seq }.encode_ordered(&mut v);
                assert_eq!(v.len(), EventKey::ORDERED_LEN);
                assert_eq!(EventKey::decode_ordered(&v), Some(EventKey { time, seq }));
                v
            })
            .collect();
        assert!(enc.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(EventKey::decode_ordered(&enc[0][..15]), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Schemas (a checkpoint's, `SCHEMA.json`, a schema topic's) and key encodings that
        /// are any bytes, or valid ones with a byte changed or cut, decode to something
        /// [`Schema::new`] would build (its time column exists and holds ints) or to an
        /// error, never a panic.
        #[test]
        fn hostile_schemas_and_keys_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..48),
            time_index in 0usize..4,
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
            s in ".{0,4}",
        ) {
            let f = |name: &str, ty| Field { name: name.into(), ty };
            let raw = Schema {
                fields: vec![f("ts", DataType::Int), f("x", DataType::Str), f("y", DataType::Int)],
                time_index,
                time_unit: TimeUnit::Us,
            };
            let good = postcard::to_stdvec(&raw).unwrap();
            let bad = crate::hostile::flipped(&good, at, byte);
            let json = serde_json::to_vec(&raw).unwrap();
            let bad_json = crate::hostile::flipped(&json, at, byte);
            let check = |r: Option<Schema>| {
                if let Some(s) = r {
                    assert_eq!(s.fields()[s.time_index()].ty, DataType::Int, "{s:?}");
                }
            };
            for b in [&garbage[..], &good, &bad, &good[..cut % (good.len() + 1)]] {
                check(postcard::from_bytes::<Schema>(b).ok());
            }
            for b in [&garbage[..], &json, &bad_json, &json[..cut % (json.len() + 1)]] {
                check(serde_json::from_slice::<Schema>(b).ok());
            }
            prop_assert_eq!(
                postcard::from_bytes::<Schema>(&good).is_ok(),
                matches!(time_index, 0 | 2)
            );

            let mut key = Vec::new();
            for v in [Value::Int(-3), Value::Str(s.into()), Value::Float(-0.5), Value::Bool(true)] {
                v.encode_key(&mut key);
            }
            let bad = crate::hostile::flipped(&key, at, byte);
            for b in [&garbage[..], &key, &bad, &key[..cut % (key.len() + 1)]] {
                let mut rest = b;
                while !rest.is_empty() && Value::decode_key(&mut rest).is_some() {}
            }
        }
    }
}
