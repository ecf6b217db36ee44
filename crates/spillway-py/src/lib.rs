//! `spillway._native`: the compiled half of the `spillway` Python package.
//!
//! | file | owns |
//! |---|---|
//! | `lib.rs` | the module: [`Session`] (one query over pushed batches, checkpoints), `run_file`, `explain`, schema and option parsers |
//! | `columns.rs` | column buffers in (bytes / lists from numpy and pandas) and out (typed vectors) |
//! | `errors.rs` | the exception classes and the engine-error mapping |
//!
//! Every query runs through `spillway_engine::session::Session`, the engine's runtime,
//! reservoir and state store: the same code `spillway run` runs. The DataFrame handling
//! (dtype mapping, output assembly) is in `python/spillway/__init__.py`.

mod columns;
mod errors;

use std::collections::HashMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use spillway_engine::duration::parse_duration as engine_parse_duration;
use spillway_engine::operator::over::peers::Ties;
use spillway_engine::operator::over::Outcome;
use spillway_engine::operator::QueryPlan;
use spillway_engine::reservoir::Compression;
use spillway_engine::session::{Session as EngineSession, SessionConfig};
use spillway_engine::source::{self, parse_schema_overrides, RowProblem, SourceOptions};
use spillway_engine::sql::SqlError;
use spillway_engine::value::{DataType, Field, Row, Schema, TimeUnit, Value};
use spillway_engine::Error;
use spillway_store::StoreKind;

use crate::columns::{builders, positions, to_py_list, Held};
use crate::errors::{to_py, ConfigError, InputError};

fn unit(s: &str) -> PyResult<TimeUnit> {
    TimeUnit::parse(s).ok_or_else(|| {
        ConfigError::new_err(format!("unknown time unit `{s}`; use s, ms, us or ns"))
    })
}

/// The type column `name` is declared with, by the engine's names and synonyms.
fn data_type(name: &str, ty: &str) -> PyResult<DataType> {
    DataType::parse(ty).ok_or_else(|| {
        InputError::new_err(format!(
            "column \"{name}\": unknown type `{ty}`; use int, float, string or bool"
        ))
    })
}

fn schema_of(fields: &[(String, String)], time_column: &str, time_unit: &str) -> PyResult<Schema> {
    let mut fs = Vec::with_capacity(fields.len());
    for (name, ty) in fields {
        fs.push(Field { name: name.clone(), ty: data_type(name, ty)? });
    }
    Schema::new(fs, time_column, unit(time_unit)?).map_err(InputError::new_err)
}

fn type_pairs<'a>(it: impl Iterator<Item = (&'a str, DataType)>) -> Vec<(String, String)> {
    it.map(|(n, t)| (n.to_string(), t.name().to_string())).collect()
}

#[allow(clippy::too_many_arguments)]
fn config(
    sql: &str,
    store: &str,
    memory_budget: u64,
    expected_keys: Option<u64>,
    allowed_lateness: i64,
    compression: &str,
    dir: Option<PathBuf>,
    ties: &str,
) -> PyResult<SessionConfig> {
    let store: StoreKind = store.parse().map_err(ConfigError::new_err)?;
    if !store.available() {
        return Err(ConfigError::new_err(format!(
            "store {} is not built into the Python package; use hashlog or mem",
            store.name()
        )));
    }
    let mut cfg = SessionConfig::new(sql);
    cfg.store = store;
    cfg.memory_budget = memory_budget;
    cfg.expected_keys = expected_keys;
    cfg.allowed_lateness = allowed_lateness;
    cfg.compression = match compression {
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd(3),
        other => {
            return Err(ConfigError::new_err(format!(
                "unknown compression `{other}`; use lz4 or zstd"
            )))
        }
    };
    cfg.dir = dir;
    cfg.ties = Ties::parse(ties).map_err(|e| ConfigError::new_err(format!("ties: {e}")))?;
    Ok(cfg)
}

/// One query over batches of columns; see `spillway.Stream` for the Python API.
#[pyclass(unsendable, module = "spillway._native")]
struct Session {
    inner: EngineSession,
    fields: Vec<(String, DataType)>,
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (sql, fields, time_column, time_unit, store, memory_budget, expected_keys, allowed_lateness, compression, dir, ties="per-event"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        sql: &str,
        fields: Vec<(String, String)>,
        time_column: &str,
        time_unit: &str,
        store: &str,
        memory_budget: u64,
        expected_keys: Option<u64>,
        allowed_lateness: i64,
        compression: &str,
        dir: Option<PathBuf>,
        ties: &str,
    ) -> PyResult<Session> {
        let schema = schema_of(&fields, time_column, time_unit)?;
        let cfg = config(
            sql,
            store,
            memory_budget,
            expected_keys,
            allowed_lateness,
            compression,
            dir,
            ties,
        )?;
        let inner = EngineSession::open(&cfg, schema).map_err(to_py)?;
        let fields = inner.schema().fields().iter().map(|f| (f.name.clone(), f.ty)).collect();
        Ok(Session { inner, fields })
    }

    /// Output columns as `(name, type)`.
    #[getter]
    fn columns(&self) -> Vec<(String, String)> {
        type_pairs(self.inner.columns().iter().map(|(n, t)| (n.as_str(), *t)))
    }

    /// Input schema as `(name, type)`.
    #[getter]
    fn schema(&self) -> Vec<(String, String)> {
        type_pairs(self.fields.iter().map(|(n, t)| (n.as_str(), *t)))
    }

    /// Events pushed so far (including those before a resume).
    #[getter]
    fn events(&self) -> u64 {
        self.inner.events()
    }

    /// Whether the session continued from a checkpoint.
    #[getter]
    fn resumed(&self) -> bool {
        self.inner.resumed()
    }

    /// The bytes stored with the checkpoint this session continued from (`checkpoint`'s
    /// `tag`), or `None` for a fresh session.
    #[getter]
    fn tag<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.tag().map(|t| PyBytes::new(py, t))
    }

    /// Whether the query is a windowed aggregation (its rows come as windows fire, not
    /// one per input row).
    #[getter]
    fn windowed(&self) -> bool {
        self.inner.is_windowed()
    }

    /// Whether each input row's result comes back from the push that scores it (false
    /// for a windowed aggregation, and for peer rows, held until their time completes).
    #[getter]
    fn per_event(&mut self) -> bool {
        self.inner.one_row_per_event()
    }

    /// Runtime counters.
    fn counters(&self) -> HashMap<&'static str, u64> {
        let c = self.inner.counters();
        HashMap::from([
            ("events", c.events),
            ("emitted", c.emitted),
            ("filtered", c.filtered),
            ("too_late", c.too_late),
            ("late_in_bounds", c.late_in_bounds),
            ("state_updates", c.state_updates),
        ])
    }

    /// Processes `n` rows given as one `(type, payload, nulls)` tuple per schema field.
    /// Returns `(output columns, emitted row positions, too-late row positions)`, the
    /// positions as little-endian int64 bytes. A windowed aggregation's output rows are
    /// the windows that fired, and its emitted positions are empty.
    fn push<'py>(
        &mut self,
        py: Python<'py>,
        columns: Vec<Bound<'py, PyTuple>>,
        n: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let held = Held::new(&columns, &self.fields)?;
        let mut cols = held.columns(&self.fields, n)?;
        let ti = self.inner.schema().time_index();
        // Refuse a NULL event time before any row of the batch is processed.
        for i in 0..n {
            if cols[ti].is_null(i) {
                let problem = RowProblem::NullTime { column: self.fields[ti].0.clone() };
                return Err(InputError::new_err(format!("DataFrame row {i}, {problem}")));
            }
        }
        let windowed = self.inner.is_windowed();
        let per_event = self.inner.one_row_per_event();
        let mut out_cols = builders(self.inner.columns().iter().map(|c| c.1), n);
        let mut emitted = Vec::with_capacity(if windowed { 0 } else { n });
        let mut late = Vec::new();
        // Per-event metrics write each row into the reused `out` (nothing allocated per
        // row); a windowed aggregation appends the rows of the windows that fire.
        let (mut out, mut rows) = (Vec::new(), Vec::new());
        for i in 0..n {
            let row: Row = cols.iter_mut().map(|c| c.take(i)).collect();
            let Value::Int(t) = row[ti] else { unreachable!("time column is int and not null") };
            let outcome = if per_event {
                self.inner.process(t, row, &mut out)
            } else {
                self.inner.push(t, row, &mut rows)
            };
            match outcome.map_err(to_py)? {
                Outcome::Emitted if per_event => {
                    for (b, v) in out_cols.iter_mut().zip(out.drain(..)) {
                        b.push(v);
                    }
                    emitted.push(i as i64);
                }
                // Peer rows: the row comes later, in arrival order (`rows`).
                Outcome::Emitted if !windowed => emitted.push(i as i64),
                Outcome::Emitted | Outcome::Filtered => {}
                Outcome::TooLate(_) => late.push(i as i64),
            }
            for r in rows.drain(..) {
                for (b, v) in out_cols.iter_mut().zip(r) {
                    b.push(v);
                }
            }
        }
        let cols = to_py_list(py, out_cols)?;
        PyTuple::new(py, [cols.into_any(), positions(py, &emitted)?, positions(py, &late)?])
    }

    /// End of input: the rows of the windows still open (a windowed aggregation; none
    /// for per-event metrics), as output columns.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut rows = Vec::new();
        self.inner.finish(&mut rows).map_err(to_py)?;
        let mut out_cols = builders(self.inner.columns().iter().map(|c| c.1), rows.len());
        for r in rows {
            for (b, v) in out_cols.iter_mut().zip(r) {
                b.push(v);
            }
        }
        to_py_list(py, out_cols)
    }

    /// Makes an atomic checkpoint in the session's directory, with `tag` (bytes the
    /// caller reads back as `tag` after a resume) in the same checkpoint.
    #[pyo3(signature = (tag=None))]
    fn checkpoint(&mut self, tag: Option<&[u8]>) -> PyResult<()> {
        self.inner.checkpoint_tagged(tag.unwrap_or_default()).map_err(to_py)
    }
}

/// A schema as Python sees it: `(name, type)` pairs and the time column's name.
type Fields = (Vec<(String, String)>, String);

/// The input schema and time column of the session checkpointed in `dir`, or `None` when
/// `dir` holds no checkpoint: a `Stream` without `schema=` reopens the directory with it
/// before any batch arrives.
#[pyfunction]
fn checkpointed_schema(dir: PathBuf) -> PyResult<Option<Fields>> {
    Ok(spillway_engine::session::checkpointed_schema(&dir).map_err(to_py)?.map(|schema| {
        let fields = type_pairs(schema.fields().iter().map(|f| (f.name.as_str(), f.ty)));
        let time = schema.fields()[schema.time_index()].name.clone();
        (fields, time)
    }))
}

/// Runs `sql` over a CSV / JSON Lines file read by the engine's own source (inference,
/// `schema` overrides and row errors exactly as `spillway run`). Returns `(output
/// columns as (name, type), output data, input schema as (name, type), too-late rows'
/// data, counters)`.
#[pyfunction]
#[pyo3(signature = (sql, path, time_column, time_unit, schema, store, memory_budget, expected_keys, allowed_lateness, compression, ties="per-event"))]
#[allow(clippy::too_many_arguments)]
fn run_file<'py>(
    py: Python<'py>,
    sql: &str,
    path: PathBuf,
    time_column: &str,
    time_unit: &str,
    schema: Option<&str>,
    store: &str,
    memory_budget: u64,
    expected_keys: Option<u64>,
    allowed_lateness: i64,
    compression: &str,
    ties: &str,
) -> PyResult<Bound<'py, PyTuple>> {
    let mut sopts = SourceOptions::new(time_column);
    sopts.time_unit = unit(time_unit)?;
    // Columns without values (a header-only file) are typed by the query's use of them.
    sopts.type_hints = spillway_engine::sql::column_type_hints(sql);
    if let Some(s) = schema {
        sopts.schema_overrides = parse_schema_overrides(s).map_err(|e| to_py(e.into()))?;
    }
    let mut src = source::open(&path, &sopts).map_err(|e| to_py(e.into()))?;
    let cfg = config(
        sql,
        store,
        memory_budget,
        expected_keys,
        allowed_lateness,
        compression,
        None,
        ties,
    )?;
    let mut session = EngineSession::open(&cfg, src.schema().clone()).map_err(to_py)?;
    let mut out_cols = builders(session.columns().iter().map(|c| c.1), 0);
    let mut late_cols = builders(src.schema().fields().iter().map(|f| f.ty), 0);
    let mut rows = Vec::new();
    while let Some(e) = src.next_event().map_err(|e| to_py(e.into()))? {
        match session.push(e.time, e.row, &mut rows).map_err(to_py)? {
            Outcome::Emitted | Outcome::Filtered => {}
            Outcome::TooLate(e) => {
                for (b, v) in late_cols.iter_mut().zip(e.row) {
                    b.push(v);
                }
            }
        }
        for r in rows.drain(..) {
            for (b, v) in out_cols.iter_mut().zip(r) {
                b.push(v);
            }
        }
    }
    session.finish(&mut rows).map_err(to_py)?;
    for r in rows.drain(..) {
        for (b, v) in out_cols.iter_mut().zip(r) {
            b.push(v);
        }
    }
    let columns = type_pairs(session.columns().iter().map(|(n, t)| (n.as_str(), *t)));
    let fields = type_pairs(src.schema().fields().iter().map(|f| (f.name.as_str(), f.ty)));
    let c = session.counters();
    let counters = HashMap::from([
        ("events", c.events),
        ("emitted", c.emitted),
        ("filtered", c.filtered),
        ("too_late", c.too_late),
        ("late_in_bounds", c.late_in_bounds),
        ("skipped", src.skipped()),
    ]);
    PyTuple::new(
        py,
        [
            columns.into_pyobject(py)?.into_any(),
            to_py_list(py, out_cols)?.into_any(),
            fields.into_pyobject(py)?.into_any(),
            to_py_list(py, late_cols)?.into_any(),
            counters.into_pyobject(py)?.into_any(),
        ],
    )
}

/// The plan of `sql` as text. Without `fields`, every column the query names is taken as
/// a float (the time column as an int).
#[pyfunction]
#[pyo3(signature = (sql, fields, time_column, time_unit))]
fn explain(
    sql: &str,
    fields: Option<Vec<(String, String)>>,
    time_column: &str,
    time_unit: &str,
) -> PyResult<String> {
    let guess = fields.is_none();
    let mut fields = fields.unwrap_or_else(|| vec![(time_column.to_string(), "int".to_string())]);
    loop {
        let schema = schema_of(&fields, time_column, time_unit)?;
        match QueryPlan::build(sql, &schema, None) {
            Ok(plan) => return Ok(plan.explain(&schema)),
            Err(Error::Sql(e)) if guess && fields.len() < 1024 => match *e {
                SqlError::UnknownColumn { name, .. } => fields.push((name, "float".to_string())),
                other => return Err(to_py(Error::from(other))),
            },
            Err(e) => return Err(to_py(e)),
        }
    }
}

/// A schema checked by the engine, each type under its engine name (`integer` and
/// `bigint` become `int`, `text` becomes `string`, ...). `schema` is either the string
/// `spillway run --schema` takes (`"card:string,amount:float"`, parsed by the engine's
/// own parser) or a list of `(name, type)` pairs. A malformed entry or an unknown type is
/// an `InputError` naming the column and the type.
#[pyfunction]
fn parse_schema(schema: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    if let Ok(text) = schema.extract::<String>() {
        let fields = parse_schema_overrides(&text).map_err(|e| to_py(e.into()))?;
        return Ok(type_pairs(fields.iter().map(|(n, t)| (n.as_str(), *t))));
    }
    let pairs: Vec<(String, String)> = schema.extract()?;
    pairs
        .into_iter()
        .map(|(name, ty)| {
            let ty = data_type(&name, &ty)?;
            Ok((name, ty.name().to_string()))
        })
        .collect()
}

/// A duration such as `5m`, `7d` or `250ms` (or a bare integer) in `time_unit`s.
#[pyfunction]
fn parse_duration(s: &str, time_unit: &str) -> PyResult<i64> {
    engine_parse_duration(s, unit(time_unit)?).map_err(ConfigError::new_err)
}

/// A size such as `256MiB` in bytes.
#[pyfunction]
fn parse_size(s: &str) -> PyResult<u64> {
    spillway_units::parse_size(s).map_err(|e| ConfigError::new_err(e.to_string()))
}

/// The compiled module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(run_file, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(checkpointed_schema, m)?)?;
    m.add_function(wrap_pyfunction!(parse_schema, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add("__doc__", "Compiled core of the spillway package (use the `spillway` module).")?;
    Ok(())
}
