//! Type inference and text-to-value parsing shared by the file sources, and building the
//! final schema (time column forced to int, `--schema` overrides applied).

use super::{quote, SourceError, SourceOptions};
use crate::value::{DataType, Field, Schema, Value};

/// Parses one CSV cell as `ty`. An empty cell is NULL; ints, floats and bools may be
/// surrounded by ASCII whitespace. `None` if the cell is not a value of that type.
pub(super) fn parse_cell(cell: &[u8], ty: DataType) -> Option<Value> {
    if cell.is_empty() {
        return Some(Value::Null);
    }
    match ty {
        DataType::Str => std::str::from_utf8(cell).ok().map(|s| Value::Str(s.into())),
        DataType::Int => {
            let s = std::str::from_utf8(cell.trim_ascii()).ok()?;
            s.parse::<i64>().ok().map(Value::Int)
        }
        DataType::Float => {
            let t = cell.trim_ascii();
            // Only plain decimal/scientific notation: no "inf", "nan", "infinity".
            if t.is_empty() || !t.iter().all(|b| b"0123456789+-.eE".contains(b)) {
                return None;
            }
            let s = std::str::from_utf8(t).ok()?;
            s.parse::<f64>().ok().map(Value::Float)
        }
        DataType::Bool => {
            let t = cell.trim_ascii();
            if t.eq_ignore_ascii_case(b"true") {
                Some(Value::Bool(true))
            } else if t.eq_ignore_ascii_case(b"false") {
                Some(Value::Bool(false))
            } else {
                None
            }
        }
    }
}

/// Candidate types in narrowing order.
const CANDIDATES: [DataType; 3] = [DataType::Bool, DataType::Int, DataType::Float];

/// Per-column inference state for CSV: which of bool/int/float still parse every
/// non-empty value seen.
#[derive(Clone, Debug)]
pub(super) struct CellTypes {
    possible: Vec<[bool; 3]>,
    seen: Vec<bool>,
}

impl CellTypes {
    pub(super) fn new(columns: usize) -> CellTypes {
        CellTypes { possible: vec![[true; 3]; columns], seen: vec![false; columns] }
    }

    /// Looks at one row's cells (a row with the wrong field count must not be given).
    pub(super) fn observe<'a>(&mut self, cells: impl Iterator<Item = &'a [u8]>) {
        for ((cell, possible), seen) in cells.zip(&mut self.possible).zip(&mut self.seen) {
            if cell.is_empty() {
                continue;
            }
            *seen = true;
            for (i, ty) in CANDIDATES.iter().enumerate() {
                if possible[i] && parse_cell(cell, *ty).is_none() {
                    possible[i] = false;
                }
            }
        }
    }

    /// The narrowest type per column (string when no candidate parses every value, or
    /// when the column held only NULLs).
    pub(super) fn types(&self) -> Vec<DataType> {
        self.possible
            .iter()
            .zip(&self.seen)
            .map(|(possible, &seen)| {
                if !seen {
                    return DataType::Str;
                }
                CANDIDATES.iter().zip(possible).find(|(_, &p)| p).map_or(DataType::Str, |(t, _)| *t)
            })
            .collect()
    }
}

/// Kinds of JSON values seen in a column (bit set).
pub(super) const J_BOOL: u8 = 1;
/// Integer JSON number.
pub(super) const J_INT: u8 = 2;
/// Non-integer JSON number.
pub(super) const J_FLOAT: u8 = 4;
/// String, array or object.
pub(super) const J_OTHER: u8 = 8;

/// The kind bit of a JSON value (0 for null).
pub(super) fn json_kind(v: &serde_json::Value) -> u8 {
    match v {
        serde_json::Value::Null => 0,
        serde_json::Value::Bool(_) => J_BOOL,
        serde_json::Value::Number(n) if n.is_i64() => J_INT,
        serde_json::Value::Number(_) => J_FLOAT,
        _ => J_OTHER,
    }
}

/// The column type for a set of JSON kinds: ints with floats widen to float, any other
/// mix (or only NULLs) is string.
pub(super) fn json_type(kinds: u8) -> DataType {
    match kinds {
        J_BOOL => DataType::Bool,
        J_INT => DataType::Int,
        J_FLOAT => DataType::Float,
        k if k == J_INT | J_FLOAT => DataType::Float,
        _ => DataType::Str,
    }
}

/// Converts a JSON value to a value of column type `ty`; `None` if it does not fit.
/// String columns also take numbers and bools (as their JSON text) and arrays/objects
/// (as compact JSON text); int columns take only integer numbers.
pub(super) fn json_value(v: serde_json::Value, ty: DataType) -> Result<Value, serde_json::Value> {
    use serde_json::Value as J;
    match (v, ty) {
        (J::Null, _) => Ok(Value::Null),
        (J::Number(n), DataType::Int) if n.is_i64() => {
            n.as_i64().map(Value::Int).ok_or(J::Number(n))
        }
        (J::Number(n), DataType::Float) => n.as_f64().map(Value::Float).ok_or(J::Number(n)),
        (J::Bool(b), DataType::Bool) => Ok(Value::Bool(b)),
        (J::String(s), DataType::Str) => Ok(Value::Str(s.into_boxed_str())),
        (other @ (J::Number(_) | J::Bool(_) | J::Array(_) | J::Object(_)), DataType::Str) => {
            Ok(Value::Str(other.to_string().into_boxed_str()))
        }
        (other, _) => Err(other),
    }
}

/// The text of a JSON value for messages (strings without their quotes).
pub(super) fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Builds the schema from column names and inferred types: forces the time column to
/// int, applies the overrides (exact name, else a unique case-insensitive match) and
/// checks names are unique and the time column exists.
pub(super) fn build_schema(
    file: &str,
    names: Vec<String>,
    mut types: Vec<DataType>,
    opts: &SourceOptions,
) -> Result<Schema, SourceError> {
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(SourceError::Schema {
                file: file.to_string(),
                message: format!("column \"{name}\" appears twice"),
            });
        }
    }
    if let Some(i) = names.iter().position(|n| *n == opts.time_column) {
        types[i] = DataType::Int;
    }
    for (name, ty) in &opts.schema_overrides {
        let i = match names.iter().position(|n| n == name) {
            Some(i) => i,
            None => {
                let matches: Vec<usize> = names
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.eq_ignore_ascii_case(name))
                    .map(|(i, _)| i)
                    .collect();
                match matches[..] {
                    [i] => i,
                    _ => {
                        return Err(SourceError::Options {
                            message: format!(
                                "--schema names column {} but {file} has no such column \
                                 (columns: {})",
                                quote(name),
                                names.join(", ")
                            ),
                        })
                    }
                }
            }
        };
        types[i] = *ty;
    }
    let fields =
        names.into_iter().zip(types).map(|(name, ty)| Field { name, ty }).collect::<Vec<_>>();
    Schema::new(fields, &opts.time_column, opts.time_unit)
        .map_err(|message| SourceError::Schema { file: file.to_string(), message })
}
