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

/// Per-column inference state for CSV: how many non-empty values were seen and how many
/// of them parse as bool, int and float.
///
/// # Rule
/// A column gets the type most of its values have (see [`CellTypes::types`]), so a
/// numeric column with a few unparseable values (`N/A`, `-`, a typo) stays numeric and
/// those rows are reported as bad rows (file, line, column, value) when they are read,
/// instead of the column silently becoming a string the query then cannot sum.
#[derive(Clone, Debug)]
pub(super) struct CellTypes {
    /// Per column: non-empty values, then how many parse as bool, int, float.
    counts: Vec<[u64; 4]>,
}

impl CellTypes {
    pub(super) fn new(columns: usize) -> CellTypes {
        CellTypes { counts: vec![[0; 4]; columns] }
    }

    /// Looks at one row's cells (a row with the wrong field count must not be given).
    pub(super) fn observe<'a>(&mut self, cells: impl Iterator<Item = &'a [u8]>) {
        for (cell, c) in cells.zip(&mut self.counts) {
            if cell.is_empty() {
                continue;
            }
            c[0] += 1;
            for (i, ty) in [DataType::Bool, DataType::Int, DataType::Float].into_iter().enumerate()
            {
                if parse_cell(cell, ty).is_some() {
                    c[i + 1] += 1;
                }
            }
        }
    }

    /// The type per column, from its non-empty values:
    /// - bool when more than half of them are `true`/`false`;
    /// - else int when more than half of them are integers and every number among them
    ///   is an integer, float when more than half are numbers (ints and decimals mixed);
    /// - else string (also when no value parses as anything else);
    /// - `None` when the column had no non-empty value at all (an all-empty column, or a
    ///   header-only file): [`build_schema`] then takes the type from
    ///   [`SourceOptions::type_hints`], or string without a hint.
    pub(super) fn types(&self) -> Vec<Option<DataType>> {
        self.counts
            .iter()
            .map(|&[n, bools, ints, floats]| {
                if n == 0 {
                    return None;
                }
                let most = |k: u64| k > n - k;
                Some(if most(bools) {
                    DataType::Bool
                } else if most(floats) {
                    if ints == floats {
                        DataType::Int
                    } else {
                        DataType::Float
                    }
                } else {
                    DataType::Str
                })
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
/// mix is string; only NULLs give `None` (typed by [`build_schema`] from the hints).
pub(super) fn json_type(kinds: u8) -> Option<DataType> {
    Some(match kinds {
        0 => return None,
        J_BOOL => DataType::Bool,
        J_INT => DataType::Int,
        J_FLOAT => DataType::Float,
        k if k == J_INT | J_FLOAT => DataType::Float,
        _ => DataType::Str,
    })
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

/// Builds the schema from column names and inferred types: a column inferred as `None`
/// (no value to infer from) takes its type from [`SourceOptions::type_hints`], else
/// string; then forces the time column to int, applies the overrides (exact name, else a
/// unique case-insensitive match) and checks names are unique and the time column exists.
pub(super) fn build_schema(
    file: &str,
    names: Vec<String>,
    types: Vec<Option<DataType>>,
    opts: &SourceOptions,
) -> Result<Schema, SourceError> {
    let mut types: Vec<DataType> = names
        .iter()
        .zip(types)
        .map(|(name, ty)| {
            ty.or_else(|| {
                let hint = |exact: bool| {
                    opts.type_hints.iter().find(|(n, _)| {
                        if exact {
                            n == name
                        } else {
                            n.eq_ignore_ascii_case(name)
                        }
                    })
                };
                hint(true).or_else(|| hint(false)).map(|(_, t)| *t)
            })
            .unwrap_or(DataType::Str)
        })
        .collect();
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

/// The schema of an input with no columns at all (an empty file: no CSV header, no JSON
/// object): the `--schema` overrides, in the order given, if they name the time column;
/// else an error saying the input is empty and how to declare its columns.
pub(super) fn empty_input_schema(file: &str, opts: &SourceOptions) -> Result<Schema, SourceError> {
    let declares_time = opts.schema_overrides.iter().any(|(n, _)| *n == opts.time_column);
    if !declares_time {
        return Err(SourceError::Schema {
            file: file.to_string(),
            message: format!(
                "the input is empty (no header row or JSON object), so it has no columns; to \
                 run over an empty input, declare its columns and types with --schema \
                 name:type,... including the time column (e.g. --schema {}:int,amount:float)",
                opts.time_column
            ),
        });
    }
    let fields = opts
        .schema_overrides
        .iter()
        .map(|(name, ty)| Field { name: name.clone(), ty: *ty })
        .collect::<Vec<_>>();
    Schema::new(fields, &opts.time_column, opts.time_unit)
        .map_err(|message| SourceError::Schema { file: file.to_string(), message })
}
