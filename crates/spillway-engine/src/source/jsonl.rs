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
    parse_row_with(text, schema, index, true)
}

/// [`parse_row`] without its fast path for plain values ([`scalar`]): every value goes
/// through serde_json. The tests hold the two to the same results.
#[cfg(test)]
pub(crate) fn parse_row_general(
    text: &[u8],
    schema: &Schema,
    index: &HashMap<String, usize>,
) -> Result<Vec<Value>, RowProblem> {
    parse_row_with(text, schema, index, false)
}

fn parse_row_with(
    text: &[u8],
    schema: &Schema,
    index: &HashMap<String, usize>,
    fast: bool,
) -> Result<Vec<Value>, RowProblem> {
    let fields = schema.fields();
    let mut row = vec![Value::Null; fields.len()];
    let mut seen = Seen::new(fields.len());
    let mut p = Scanner { s: text, i: 0 };
    // The column the next key most likely names: writers (ours included) keep one order.
    let mut guess = 0;
    p.ws();
    p.expect(b'{', "a JSON object (`{`)")?;
    p.ws();
    if !p.eat(b'}') {
        loop {
            p.ws();
            let key = p.key()?;
            let col = match fields.get(guess) {
                Some(f) if f.name == key.as_ref() => guess,
                _ => match index.get(key.as_ref()) {
                    Some(&col) => col,
                    None => {
                        let columns =
                            fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ");
                        return Err(RowProblem::UnknownKey { key: key.into_owned(), columns });
                    }
                },
            };
            guess = col + 1;
            if seen.insert(col) {
                return Err(RowProblem::DuplicateKey { key: key.into_owned() });
            }
            p.ws();
            p.expect(b':', "`:`")?;
            p.ws();
            let at = p.i;
            let plain = if fast {
                scalar(text, at, fields[col].ty, col == schema.time_index())
            } else {
                None
            };
            if let Some((v, n)) = plain {
                row[col] = v;
                p.i += n;
                p.ws();
                if p.eat(b',') {
                    continue;
                }
                p.expect(b'}', "`,` or `}`")?;
                break;
            }
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

/// The columns a row has named so far (a bit set; a vector past 64 columns).
enum Seen {
    Small(u64),
    Large(Vec<bool>),
}

impl Seen {
    fn new(n: usize) -> Seen {
        if n <= 64 {
            Seen::Small(0)
        } else {
            Seen::Large(vec![false; n])
        }
    }

    /// Marks `col`; whether it was marked already.
    fn insert(&mut self, col: usize) -> bool {
        match self {
            Seen::Small(bits) => {
                let was = *bits & (1 << col) != 0;
                *bits |= 1 << col;
                was
            }
            Seen::Large(v) => std::mem::replace(&mut v[col], true),
        }
    }
}

/// The fast path of [`parse_row`] for the values events are made of: a JSON number that
/// an integer or float column (or the time column) takes, a string without escapes for
/// a string column, `true` / `false` for a boolean one, and `null`; with the bytes it
/// spans. `None` sends everything else (escapes, a value of another type, a number out
/// of range, anything malformed) down the general path, which gives the same values and
/// the same errors as before this path existed (a differential test checks it).
#[inline]
fn scalar(text: &[u8], at: usize, ty: DataType, is_time: bool) -> Option<(Value, usize)> {
    let rest = &text[at..];
    let (v, n) = match rest.first()? {
        b'-' | b'0'..=b'9' => {
            let (n, integral) = number_token(rest)?;
            // Both from ASCII digits, signs, '.' and exponents.
            let token = std::str::from_utf8(&rest[..n]).ok()?;
            match ty {
                // serde_json reads `-0` as a float.
                DataType::Int if integral && token != "-0" => (Value::Int(token.parse().ok()?), n),
                DataType::Float if !is_time => {
                    let f: f64 = token.parse().ok()?;
                    // serde_json refuses a number out of range: the general path says so.
                    if !f.is_finite() {
                        return None;
                    }
                    (Value::Float(f), n)
                }
                // Its text, if serde_json would read it (`1e400` is out of its range).
                DataType::Str if !is_time && token.parse::<f64>().is_ok_and(f64::is_finite) => {
                    (Value::Str(token.into()), n)
                }
                _ => return None,
            }
        }
        b'"' if ty == DataType::Str && !is_time => {
            let len = rest[1..].iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
            if rest[1 + len] != b'"' {
                return None;
            }
            (Value::Str(std::str::from_utf8(&rest[1..1 + len]).ok()?.into()), len + 2)
        }
        b'n' if rest.starts_with(b"null") => (Value::Null, 4),
        b't' if ty == DataType::Bool && rest.starts_with(b"true") => (Value::Bool(true), 4),
        b'f' if ty == DataType::Bool && rest.starts_with(b"false") => (Value::Bool(false), 5),
        _ => return None,
    };
    // A value ends at whitespace, `,` or `}`; `12x` or `nullx` is the general path's to
    // report.
    match rest.get(n) {
        Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}') => Some((v, n)),
        _ => None,
    }
}

/// The length of the JSON number at the start of `s` (RFC 8259: `-? (0 | [1-9][0-9]*)
/// (. [0-9]+)? ([eE] [+-]? [0-9]+)?`) and whether it is an integer (no fraction, no
/// exponent); `None` if `s` does not start with one.
fn number_token(s: &[u8]) -> Option<(usize, bool)> {
    let digits = |from: usize| s[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut i = usize::from(s.first() == Some(&b'-'));
    match s.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i += digits(i),
        _ => return None,
    }
    let mut integral = true;
    if s.get(i) == Some(&b'.') {
        let d = digits(i + 1);
        if d == 0 {
            return None;
        }
        i += 1 + d;
        integral = false;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(s.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let d = digits(i);
        if d == 0 {
            return None;
        }
        i += d;
        integral = false;
    }
    Some((i, integral))
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
