//! The Python exception classes and the mapping of engine errors onto them. Every
//! message is the engine's `Display` text, as `spillway run` prints it.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use spillway_engine::Error;

pyo3::create_exception!(
    spillway,
    SpillwayError,
    PyException,
    "Base class of every error Spillway raises."
);
pyo3::create_exception!(
    spillway,
    QueryError,
    SpillwayError,
    "The SQL query did not parse, names an unknown column or window, or cannot be planned; \
     the message points at the query's line and column."
);
pyo3::create_exception!(
    spillway,
    InputError,
    SpillwayError,
    "The input data does not fit: a missing or mistyped column, a malformed value (the \
     message names the row and column), an unreadable file."
);
pyo3::create_exception!(
    spillway,
    ConfigError,
    SpillwayError,
    "A bad option value (store, memory budget, lateness, checkpoint directory)."
);
pyo3::create_exception!(
    spillway,
    StoreError,
    SpillwayError,
    "The state store, the event reservoir or the aggregation state failed."
);
pyo3::create_exception!(
    spillway,
    CheckpointError,
    SpillwayError,
    "A checkpoint could not be written, read, or matched to this stream."
);

/// The Python exception for an engine error, carrying its `Display` message.
pub fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Sql(_) | Error::Plan(_) => QueryError::new_err(msg),
        Error::Source(_) => InputError::new_err(msg),
        Error::Config(_) => ConfigError::new_err(msg),
        Error::Checkpoint(_) => CheckpointError::new_err(msg),
        Error::Store(_) | Error::Reservoir(_) | Error::State(_) => StoreError::new_err(msg),
        _ => SpillwayError::new_err(msg),
    }
}

/// Registers the exception classes in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("SpillwayError", py.get_type::<SpillwayError>())?;
    m.add("QueryError", py.get_type::<QueryError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("CheckpointError", py.get_type::<CheckpointError>())?;
    Ok(())
}
