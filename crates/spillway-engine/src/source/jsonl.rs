//! JSON Lines source: one JSON object per line, blank lines skipped. The schema is the
//! union of the keys of the first `infer_rows` objects in first-seen order; a missing key
//! is NULL, a key outside the schema is a malformed row. The time column takes integers
//! and strings holding an integer or a timestamp ([`event_time`]); [`parse_row`] is also
//! how a Kafka worker reads an event message.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{BufRead, BufReader, Read};

use serde::de::{self, MapAccess, Visitor};

use super::infer::{build_schema, empty_input_schema, json_kind, json_text, json_type, json_value};
use super::{event_time, io_err, Core, DeadLetter, RowProblem, Source, SourceError, SourceOptions};
use super::{SourcePosition, Value};
use crate::value::{DataType, Event, Schema, TimeUnit};

/// A line read during inference, waiting to be replayed.
struct Pending {
    text: Vec<u8>,
    /// Line number (1-based) of the line.
    line: u64,
    end_byte: u64,
    end_line: u64,
}

/// A JSON Lines source.
pub(super) struct JsonSource {
    core: Core,
    input: BufReader<Box<dyn Read + Send>>,
    /// Global offset and line-break count of what `input` has consumed.
    read_byte: u64,
    read_line: u64,
    replay: VecDeque<Pending>,
    text: Vec<u8>,
    index: HashMap<String, usize>,
}

/// Reads one line (with its `\n`) into `buf`; false at end of input.
fn next_raw_line(
    input: &mut BufReader<Box<dyn Read + Send>>,
    buf: &mut Vec<u8>,
    file: &str,
) -> Result<bool, SourceError> {
    buf.clear();
    let n = input.read_until(b'\n', buf).map_err(io_err(file, "read"))?;
    Ok(n > 0)
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// A JSON object's members in order (for inference).
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, serde_json::Value>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A cursor over one line of JSON.
struct Scanner<'a> {
    s: &'a [u8],
    i: usize,
}

/// The message of a serde_json error found at `offset` of a line, with the position
/// made relative to the line.
fn located(e: &serde_json::Error, offset: usize) -> String {
    let text = e.to_string();
    let msg = match text.rfind(" at line ") {
        Some(k) if e.line() != 0 => &text[..k],
        _ => text.as_str(),
    };
    let column = if e.line() <= 1 { offset + e.column().max(1) } else { e.column() };
    format!("{msg} at column {column}")
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.i) == Some(&c);
        self.i += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8, what: &str) -> Result<(), RowProblem> {
        if self.eat(c) {
            return Ok(());
        }
        let found = match self.s.get(self.i) {
            Some(&b) if b.is_ascii_graphic() => format!("`{}`", b as char),
            Some(&b) => format!("byte 0x{b:02x}"),
            None => "the end of the line".to_string(),
        };
        Err(RowProblem::BadJson {
            message: format!("expected {what} at column {}, found {found}", self.i + 1),
        })
    }

    /// An object key (at a `"`).
    fn key(&mut self) -> Result<std::borrow::Cow<'a, str>, RowProblem> {
        let s = self.s;
        let body = self.i + 1;
        if s.get(self.i) == Some(&b'"') {
            // Fast path: no escapes and no control characters.
            if let Some(len) = s[body..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20) {
                if s[body + len] == b'"' {
                    if let Ok(k) = std::str::from_utf8(&s[body..body + len]) {
                        self.i = body + len + 1;
                        return Ok(std::borrow::Cow::Borrowed(k));
                    }
                }
            }
        } else {
            self.expect(b'"', "a key (`\"`)")?;
        }
        let (k, n): (String, usize) = self.one(self.i)?;
        self.i += n;
        Ok(std::borrow::Cow::Owned(k))
    }

    /// One JSON value of type `T` starting at `at`, and its length in bytes.
    fn one<T: serde::de::DeserializeOwned>(&self, at: usize) -> Result<(T, usize), RowProblem> {
        let mut it = serde_json::Deserializer::from_slice(&self.s[at..]).into_iter::<T>();
        match it.next() {
            Some(Ok(v)) => Ok((v, it.byte_offset())),
            Some(Err(e)) => Err(RowProblem::BadJson { message: located(&e, at) }),
            None => Err(RowProblem::BadJson {
                message: format!(
                    "expected a value at column {}, found the end of the line",
                    at + 1
                ),
            }),
        }
    }
}

/// Parses one JSON object into a row of `schema` (`index`: column of each name). Numbers
/// for float columns are parsed from their text with Rust's exact (correctly rounded)
/// parser, so floats round-trip exactly.
pub(crate) fn parse_row(
    text: &[u8],
    schema: &Schema,
    index: &HashMap<String, usize>,
) -> Result<Vec<Value>, RowProblem> {
    let fields = schema.fields();
    let mut row = vec![Value::Null; fields.len()];
    let mut seen = vec![false; fields.len()];
    let mut p = Scanner { s: text, i: 0 };
    p.ws();
    p.expect(b'{', "a JSON object (`{`)")?;
    p.ws();
    if !p.eat(b'}') {
        loop {
            p.ws();
            let key = p.key()?;
            let Some(&col) = index.get(key.as_ref()) else {
                let columns = fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ");
                return Err(RowProblem::UnknownKey { key: key.into_owned(), columns });
            };
            if std::mem::replace(&mut seen[col], true) {
                return Err(RowProblem::DuplicateKey { key: key.into_owned() });
            }
            p.ws();
            p.expect(b':', "`:`")?;
            p.ws();
            let at = p.i;
            let (v, n): (serde_json::Value, usize) = p.one(at)?;
            p.i += n;
            let raw = &text[at..at + n];
            let ty = fields[col].ty;
            if col == schema.time_index() {
                row[col] =
                    time_value(&v, schema.time_unit()).ok_or_else(|| RowProblem::BadTime {
                        column: fields[col].name.clone(),
                        unit: schema.time_unit(),
                        found: json_text(&v),
                    })?;
            } else {
                row[col] = match (&v, ty) {
                    // Exact: serde_json's own float parsing may be off by one ulp.
                    (serde_json::Value::Number(_), DataType::Float) => {
                        match std::str::from_utf8(raw).ok().and_then(|r| r.parse::<f64>().ok()) {
                            Some(f) => Value::Float(f),
                            None => json_value(v, ty).map_err(|v| bad(fields, col, &v))?,
                        }
                    }
                    // A number in a string column keeps its text as written.
                    (serde_json::Value::Number(_), DataType::Str) => {
                        Value::Str(String::from_utf8_lossy(raw).into())
                    }
                    _ => json_value(v, ty).map_err(|v| bad(fields, col, &v))?,
                };
            }
            p.ws();
            if p.eat(b',') {
                continue;
            }
            p.expect(b'}', "`,` or `}`")?;
            break;
        }
    }
    p.ws();
    if p.i != text.len() {
        return Err(RowProblem::BadJson {
            message: format!("unexpected text after the object at column {}", p.i + 1),
        });
    }
    Ok(row)
}

/// An event-time JSON value: NULL, an integer, or a string holding an integer or a
/// timestamp (see [`event_time`]); `None` for anything else.
fn time_value(v: &serde_json::Value, unit: TimeUnit) -> Option<Value> {
    match v {
        serde_json::Value::Null => Some(Value::Null),
        serde_json::Value::Number(n) => n.as_i64().map(Value::Int),
        serde_json::Value::String(s) => event_time::parse_time(s, unit).map(Value::Int),
        _ => None,
    }
}

fn bad(fields: &[crate::value::Field], col: usize, v: &serde_json::Value) -> RowProblem {
    RowProblem::BadValue {
        column: fields[col].name.clone(),
        expected: fields[col].ty,
        found: json_text(v),
    }
}

impl JsonSource {
    /// Reads up to `opts.infer_rows` non-blank lines and infers the schema from them.
    pub(super) fn open(
        label: String,
        input: Box<dyn Read + Send>,
        opts: &SourceOptions,
        dead: Option<DeadLetter>,
    ) -> Result<JsonSource, SourceError> {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let (mut read_byte, mut read_line) = (0u64, 0u64);
        let mut names: Vec<String> = Vec::new();
        let mut kinds: Vec<u8> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut replay = VecDeque::new();
        let mut first = true;
        let mut first_error: Option<String> = None;
        while replay.len() < opts.infer_rows.max(1) {
            let mut text = Vec::new();
            if !next_raw_line(&mut input, &mut text, &label)? {
                break;
            }
            if first {
                // A UTF-8 byte order mark is not part of the first object.
                first = false;
                if text.starts_with(b"\xEF\xBB\xBF") {
                    text[..3].copy_from_slice(b"   ");
                }
            }
            read_byte += text.len() as u64;
            let line = read_line + 1;
            read_line += u64::from(text.ends_with(b"\n"));
            if is_blank(&text) {
                continue;
            }
            match serde_json::from_slice::<Ordered>(&text) {
                Ok(Ordered(members)) => {
                    for (k, v) in &members {
                        let i = *index.entry(k.clone()).or_insert_with(|| {
                            names.push(k.clone());
                            kinds.push(0);
                            names.len() - 1
                        });
                        kinds[i] |= json_kind(v);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("line {line}: {e}"));
                }
            }
            replay.push_back(Pending { text, line, end_byte: read_byte, end_line: read_line });
        }
        if names.is_empty() {
            if let Some(e) = first_error {
                return Err(SourceError::Schema {
                    file: label,
                    message: format!(
                        "no JSON object with keys among the first {} non-blank lines, so no \
                         schema can be inferred (first problem: {e})",
                        replay.len()
                    ),
                });
            }
        }
        let schema = if names.is_empty() {
            // No object at all (an empty file or only blank lines): no columns to infer.
            empty_input_schema(&label, opts)?
        } else {
            let types = kinds.iter().map(|&k| json_type(k)).collect();
            build_schema(&label, names, types, opts)?
        };
        let core = Core::new(label, schema, dead);
        Ok(JsonSource { core, input, read_byte, read_line, replay, text: Vec::new(), index })
    }

    /// Continues at `core`'s position; `input` is already positioned there.
    pub(super) fn resume(core: Core, input: Box<dyn Read + Send>) -> JsonSource {
        let index =
            core.schema.fields().iter().enumerate().map(|(i, f)| (f.name.clone(), i)).collect();
        JsonSource {
            read_byte: core.byte_offset,
            read_line: core.line,
            core,
            input: BufReader::with_capacity(64 * 1024, input),
            replay: VecDeque::new(),
            text: Vec::new(),
            index,
        }
    }

    /// Reads the next non-blank line into `self.text` and returns its line number,
    /// advancing the position past it.
    fn next_line(&mut self) -> Result<Option<u64>, SourceError> {
        if let Some(p) = self.replay.pop_front() {
            self.text = p.text;
            self.core.byte_offset = p.end_byte;
            self.core.line = p.end_line;
            return Ok(Some(p.line));
        }
        loop {
            if !next_raw_line(&mut self.input, &mut self.text, &self.core.label)? {
                return Ok(None);
            }
            self.read_byte += self.text.len() as u64;
            let line = self.read_line + 1;
            self.read_line += u64::from(self.text.ends_with(b"\n"));
            self.core.byte_offset = self.read_byte;
            self.core.line = self.read_line;
            if !is_blank(&self.text) {
                return Ok(Some(line));
            }
        }
    }

    fn parse(&self) -> Result<Vec<Value>, RowProblem> {
        parse_row(&self.text, &self.core.schema, &self.index)
    }
}

impl Source for JsonSource {
    fn schema(&self) -> &Schema {
        &self.core.schema
    }

    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        loop {
            let Some(line) = self.next_line()? else {
                return Ok(None);
            };
            match self.parse().and_then(|row| self.core.event(row)) {
                Ok(event) => return Ok(Some(event)),
                Err(problem) => self.core.reject(line, problem, &self.text)?,
            }
        }
    }

    fn position(&self) -> SourcePosition {
        self.core.position()
    }

    fn skipped(&self) -> u64 {
        self.core.skipped
    }

    fn sync(&mut self) -> Result<(), SourceError> {
        self.core.sync()
    }
}
