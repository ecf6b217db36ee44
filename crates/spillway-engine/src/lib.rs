//! # spillway-engine
//!
//! The exact sliding-window metrics engine: events, schema, SQL metrics, the shared plan
//! DAG, windows, aggregates and the event reservoir.

pub mod aggregate;
pub mod bench;
pub mod duration;
pub mod error;
pub mod job;
pub mod plan;
pub mod reservoir;
pub mod runtime;
pub mod source;
pub mod sql;
pub mod value;

pub use error::{Error, Result};
