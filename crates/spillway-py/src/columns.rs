//! Column buffers in and out.
//!
//! In: the Python side hands one `(type, payload, nulls)` tuple per schema field. For
//! `int`/`float`/`bool` the payload is a bytes-like object holding the column as
//! contiguous little-endian `int64` / `float64` / `uint8` (numpy's `tobytes()`), read in
//! place; `nulls` is `None` or one byte per row (non-zero: NULL). For `string` the
//! payload is a list of `str` or `None`, read once per column. No Python object is made
//! per row.
//!
//! Out: [`ColumnBuilder`] collects one typed vector per output column and hands it back as
//! `(type, payload, nulls)` with the same encodings (payloads as `bytearray`, so numpy can
//! wrap them writable without another copy).

use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyTuple};
use spillway_engine::value::{DataType, Value};

use crate::errors::InputError;

/// Data of one input column.
enum Data<'a> {
    Int(&'a [u8]),
    Float(&'a [u8]),
    Bool(&'a [u8]),
    Str(Vec<Option<Box<str>>>),
}

/// One input column, borrowed from the Python objects that hold it.
pub struct InputColumn<'a> {
    data: Data<'a>,
    nulls: Option<&'a [u8]>,
}

/// The Python objects behind the columns of one batch (kept alive while the columns
/// borrow their bytes).
pub struct Held<'py> {
    cols: Vec<(DataType, Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>)>,
}

fn width(ty: DataType) -> usize {
    match ty {
        DataType::Int | DataType::Float => 8,
        DataType::Bool => 1,
        DataType::Str => 0,
    }
}

impl<'py> Held<'py> {
    /// Takes the `(type, payload, nulls)` tuples, checking each against the schema type.
    pub fn new(
        columns: &[Bound<'py, PyTuple>],
        fields: &[(String, DataType)],
    ) -> PyResult<Held<'py>> {
        if columns.len() != fields.len() {
            return Err(InputError::new_err(format!(
                "expected {} columns (one per schema field), got {}",
                fields.len(),
                columns.len()
            )));
        }
        let mut cols = Vec::with_capacity(columns.len());
        for (t, (name, ty)) in columns.iter().zip(fields) {
            let (kind, payload, nulls): (String, Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>) =
                t.extract()?;
            if DataType::parse(&kind) != Some(*ty) {
                return Err(InputError::new_err(format!(
                    "column \"{name}\": expected {ty}, got a {kind} buffer"
                )));
            }
            cols.push((*ty, payload, nulls));
        }
        Ok(Held { cols })
    }

    /// Borrowed views of the columns, each checked to hold `n` rows.
    pub fn columns(
        &self,
        fields: &[(String, DataType)],
        n: usize,
    ) -> PyResult<Vec<InputColumn<'_>>> {
        let mut out = Vec::with_capacity(self.cols.len());
        for ((ty, payload, nulls), (name, _)) in self.cols.iter().zip(fields) {
            let short = |what: &str, len: usize, want: usize| {
                InputError::new_err(format!(
                    "column \"{name}\": {what} holds {len} bytes, expected {want} for {n} rows"
                ))
            };
            let data = if *ty == DataType::Str {
                let list = payload.cast::<PyList>().map_err(|_| {
                    InputError::new_err(format!("column \"{name}\": string data must be a list"))
                })?;
                if list.len() != n {
                    return Err(short("the value list", list.len(), n));
                }
                let mut v = Vec::with_capacity(n);
                for item in list.iter() {
                    v.push(if item.is_none() {
                        None
                    } else {
                        Some(item.extract::<String>()?.into_boxed_str())
                    });
                }
                Data::Str(v)
            } else {
                let bytes = payload
                    .cast::<PyBytes>()
                    .map_err(|_| {
                        InputError::new_err(format!("column \"{name}\": data must be bytes"))
                    })?
                    .as_bytes();
                if bytes.len() != n * width(*ty) {
                    return Err(short("the buffer", bytes.len(), n * width(*ty)));
                }
                match ty {
                    DataType::Int => Data::Int(bytes),
                    DataType::Float => Data::Float(bytes),
                    _ => Data::Bool(bytes),
                }
            };
            let nulls = match nulls {
                Some(b) => {
                    let b = b.as_bytes();
                    if b.len() != n {
                        return Err(short("the null mask", b.len(), n));
                    }
                    Some(b)
                }
                None => None,
            };
            out.push(InputColumn { data, nulls });
        }
        Ok(out)
    }
}

impl InputColumn<'_> {
    /// Whether row `i` is NULL.
    pub fn is_null(&self, i: usize) -> bool {
        self.nulls.is_some_and(|m| m[i] != 0)
    }

    /// The value of row `i` (a string is moved out: each row is read once).
    #[inline]
    pub fn take(&mut self, i: usize) -> Value {
        if self.nulls.is_some_and(|m| m[i] != 0) {
            return Value::Null;
        }
        match &mut self.data {
            Data::Int(b) => Value::Int(i64::from_le_bytes(eight(b, i))),
            Data::Float(b) => Value::Float(f64::from_le_bytes(eight(b, i))),
            Data::Bool(b) => Value::Bool(b[i] != 0),
            Data::Str(v) => v[i].take().map_or(Value::Null, Value::Str),
        }
    }
}

#[inline]
fn eight(b: &[u8], i: usize) -> [u8; 8] {
    b[i * 8..i * 8 + 8].try_into().expect("8 bytes")
}

/// Collects one output column. The null flags stay empty until the first NULL (most
/// columns have none), then hold one byte per row.
pub enum ColumnBuilder {
    /// Ints and their null flags.
    Int(Vec<i64>, Vec<u8>),
    /// Floats and their null flags.
    Float(Vec<f64>, Vec<u8>),
    /// Bools and their null flags.
    Bool(Vec<u8>, Vec<u8>),
    /// Strings.
    Str(Vec<Option<Box<str>>>),
}

/// Records row `len`'s null flag in `n` (kept empty while no row is NULL).
#[inline]
fn flag(n: &mut Vec<u8>, len: usize, null: bool) {
    if null {
        n.resize(len, 0);
        n.push(1);
    } else if !n.is_empty() {
        n.push(0);
    }
}

impl ColumnBuilder {
    /// An empty column of type `ty` with room for `rows` values.
    pub fn new(ty: DataType, rows: usize) -> ColumnBuilder {
        match ty {
            DataType::Int => ColumnBuilder::Int(Vec::with_capacity(rows), Vec::new()),
            DataType::Float => ColumnBuilder::Float(Vec::with_capacity(rows), Vec::new()),
            DataType::Bool => ColumnBuilder::Bool(Vec::with_capacity(rows), Vec::new()),
            DataType::Str => ColumnBuilder::Str(Vec::with_capacity(rows)),
        }
    }

    /// Appends a value. An int column that gets a float (a `SUM` of ints beyond the i64
    /// range) becomes a float column; any other mismatch is rendered as text in a string
    /// column (it does not happen for the types the plan declares).
    #[inline]
    pub fn push(&mut self, v: Value) {
        match (&mut *self, v) {
            (ColumnBuilder::Int(d, n), Value::Int(x)) => {
                flag(n, d.len(), false);
                d.push(x);
            }
            (ColumnBuilder::Float(d, n), Value::Float(x)) => {
                flag(n, d.len(), false);
                d.push(x);
            }
            (ColumnBuilder::Int(d, n), Value::Null) => {
                flag(n, d.len(), true);
                d.push(0);
            }
            (ColumnBuilder::Float(d, n), Value::Null) => {
                flag(n, d.len(), true);
                d.push(f64::NAN);
            }
            (ColumnBuilder::Float(d, n), Value::Int(x)) => {
                flag(n, d.len(), false);
                d.push(x as f64);
            }
            (ColumnBuilder::Bool(d, n), Value::Null) => {
                flag(n, d.len(), true);
                d.push(0);
            }
            (ColumnBuilder::Bool(d, n), Value::Bool(x)) => {
                flag(n, d.len(), false);
                d.push(u8::from(x));
            }
            (ColumnBuilder::Str(d), Value::Null) => d.push(None),
            (ColumnBuilder::Str(d), Value::Str(s)) => d.push(Some(s)),
            (ColumnBuilder::Int(d, n), v @ Value::Float(_)) => {
                let d = std::mem::take(d).into_iter().map(|x| x as f64).collect();
                *self = ColumnBuilder::Float(d, std::mem::take(n));
                self.push(v);
            }
            (_, v) => {
                self.make_strings();
                self.push(Value::Str(v.to_string().into_boxed_str()));
            }
        }
    }

    fn make_strings(&mut self) {
        fn render<T: ToString>(d: &[T], n: &[u8]) -> Vec<Option<Box<str>>> {
            d.iter()
                .enumerate()
                .map(|(i, x)| {
                    (n.get(i).copied().unwrap_or(0) == 0).then(|| x.to_string().into_boxed_str())
                })
                .collect()
        }
        *self = ColumnBuilder::Str(match &*self {
            ColumnBuilder::Int(d, n) => render(d, n),
            ColumnBuilder::Float(d, n) => render(d, n),
            ColumnBuilder::Bool(d, n) => render(&d.iter().map(|&b| b != 0).collect::<Vec<_>>(), n),
            ColumnBuilder::Str(d) => d.clone(),
        });
    }

    /// `(type, payload, nulls)` for the Python side (`nulls` is `None` without NULLs).
    /// Payloads are written straight into the `bytearray`s.
    pub fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mask = |n: &[u8]| -> Option<Bound<'py, PyByteArray>> {
            n.contains(&1).then(|| PyByteArray::new(py, n))
        };
        let (ty, payload, nulls): (&str, Bound<'py, PyAny>, _) = match self {
            ColumnBuilder::Int(d, n) => ("int", le_bytes(py, &d, i64::to_le_bytes)?, mask(&n)),
            ColumnBuilder::Float(d, n) => ("float", le_bytes(py, &d, f64::to_le_bytes)?, mask(&n)),
            ColumnBuilder::Bool(d, n) => ("bool", PyByteArray::new(py, &d).into_any(), mask(&n)),
            ColumnBuilder::Str(d) => {
                let list = PyList::new(py, d.iter().map(|s| s.as_deref()))?;
                ("string", list.into_any(), None)
            }
        };
        PyTuple::new(
            py,
            [ty.into_pyobject(py)?.into_any(), payload, nulls.into_pyobject(py)?.into_any()],
        )
    }
}

/// A `bytearray` holding `v`'s values as 8-byte little-endian words.
fn le_bytes<'py, T: Copy>(
    py: Python<'py>,
    v: &[T],
    f: fn(T) -> [u8; 8],
) -> PyResult<Bound<'py, PyAny>> {
    let b = PyByteArray::new_with(py, v.len() * 8, |buf| {
        for (dst, x) in buf.chunks_exact_mut(8).zip(v) {
            dst.copy_from_slice(&f(*x));
        }
        Ok(())
    })?;
    Ok(b.into_any())
}

/// Builders for columns of these types.
pub fn builders(types: impl Iterator<Item = DataType>, rows: usize) -> Vec<ColumnBuilder> {
    types.map(|t| ColumnBuilder::new(t, rows)).collect()
}

/// The builders as a Python list of `(type, payload, nulls)` tuples.
pub fn to_py_list<'py>(py: Python<'py>, b: Vec<ColumnBuilder>) -> PyResult<Bound<'py, PyList>> {
    let items = b.into_iter().map(|c| c.into_py(py)).collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// Little-endian int64 bytes of `v` as a `bytearray`.
pub fn positions<'py>(py: Python<'py>, v: &[i64]) -> PyResult<Bound<'py, PyAny>> {
    le_bytes(py, v, i64::to_le_bytes)
}
