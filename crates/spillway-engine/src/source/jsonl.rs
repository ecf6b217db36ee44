//! JSON Lines source: one JSON object per line, blank lines skipped. The schema is the
//! union of the keys of the first `infer_rows` objects in first-seen order; a missing key
//! is NULL, a key outside the schema is a malformed row.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{BufRead, BufReader, Read};

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};

use super::infer::{build_schema, json_kind, json_text, json_type, json_value};
use super::{io_err, Core, DeadLetter, RowProblem, Source, SourceError, SourceOptions};
use super::{SourcePosition, Value};
use crate::value::{Event, Schema};

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
    problem: Option<RowProblem>,
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

/// Deserializes one object straight into a row of the schema.
struct RowSeed<'a> {
    schema: &'a Schema,
    index: &'a HashMap<String, usize>,
    problem: &'a mut Option<RowProblem>,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = Vec<Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<Value>, D::Error> {
        d.deserialize_map(self)
    }
}

/// A key looked up in the schema while parsing.
struct KeySeed<'a>(&'a HashMap<String, usize>);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Result<usize, String>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Result<usize, String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, k: &str) -> Result<Self::Value, E> {
        Ok(self.0.get(k).copied().ok_or_else(|| k.to_string()))
    }
}

impl<'de> Visitor<'de> for RowSeed<'_> {
    type Value = Vec<Value>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Value>, A::Error> {
        let fields = self.schema.fields();
        let mut row = vec![Value::Null; fields.len()];
        let mut seen = vec![false; fields.len()];
        while let Some(key) = map.next_key_seed(KeySeed(self.index))? {
            let i = match key {
                Ok(i) => i,
                Err(key) => {
                    let columns =
                        fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", ");
                    *self.problem = Some(RowProblem::UnknownKey { key, columns });
                    return Err(de::Error::custom("unknown key"));
                }
            };
            if std::mem::replace(&mut seen[i], true) {
                *self.problem = Some(RowProblem::DuplicateKey { key: fields[i].name.clone() });
                return Err(de::Error::custom("duplicate key"));
            }
            let v: serde_json::Value = map.next_value()?;
            match json_value(v, fields[i].ty) {
                Ok(v) => row[i] = v,
                Err(v) => {
                    *self.problem = Some(RowProblem::BadValue {
                        column: fields[i].name.clone(),
                        expected: fields[i].ty,
                        found: json_text(&v),
                    });
                    return Err(de::Error::custom("bad value"));
                }
            }
        }
        Ok(row)
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
        let types = kinds.iter().map(|&k| json_type(k)).collect();
        let schema = build_schema(&label, names, types, opts)?;
        let core = Core::new(label, schema, dead);
        Ok(JsonSource {
            core,
            input,
            read_byte,
            read_line,
            replay,
            text: Vec::new(),
            index,
            problem: None,
        })
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
            problem: None,
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

    fn parse(&mut self) -> Result<Vec<Value>, RowProblem> {
        self.problem = None;
        let mut de = serde_json::Deserializer::from_slice(&self.text);
        let seed =
            RowSeed { schema: &self.core.schema, index: &self.index, problem: &mut self.problem };
        let result = seed.deserialize(&mut de).and_then(|row| de.end().map(|()| row));
        match result {
            Ok(row) => Ok(row),
            Err(e) => {
                Err(self.problem.take().unwrap_or(RowProblem::BadJson { message: e.to_string() }))
            }
        }
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
