//! # spillway-engine
//!
//! Spillway's exact sliding-window metrics engine. A query such as
//!
//! ```sql
//! SELECT card, ts,
//!        SUM(amount) OVER w AS sum_5m, COUNT(*) OVER w AS count_5m
//! FROM payments
//! WINDOW w AS (PARTITION BY card ORDER BY ts
//!              RANGE BETWEEN INTERVAL '5' MINUTE PRECEDING AND CURRENT ROW)
//! ```
//!
//! produces one output row per input event, in input order, whose metrics cover exactly
//! the events of its partition that arrived no later than it and lie in its window —
//! for windows of seconds or of months at the same memory.
//!
//! | module | owns |
//! |---|---|
//! | [`value`] | values, types, schema, events |
//! | [`source`] | CSV / JSON Lines sources with type inference and exact resume, the payments generator, CSV / JSON Lines sinks |
//! | [`sql`] | the SQL front end (parsed with `sqlparser`): metrics, windows, frames, filters, expressions |
//! | [`plan`] | the DAG `Window -> Filter -> GroupBy -> Aggregate` with shared prefixes; `explain` |
//! | [`aggregate`] | aggregate state layouts and the insert / evict / result contract |
//! | [`reservoir`] | the event reservoir: compressed, checksummed chunks in segment files, read by cursors with prefetch |
//! | [`operator`] | the operator contract both query shapes implement, and the plan of either shape |
//! | [`operator::over`] | per-event metrics (`AGG(..) OVER w`): window maintenance over the reservoir and the state store; exactness under lateness; metric backfill and reservoir retention ([`operator::over::backfill`]) |
//! | [`operator::windowed`] | windowed aggregation (`TUMBLE`/`HOP`/`CUMULATE`/`SESSION`): window assignment, state, timers, watermarks, firing, lateness |
//! | [`driver`] | the one driver every front-end runs an operator through: opening fresh or from a checkpoint, the event loop, checkpoints, reservoir release |
//! | [`checkpoint`] | the checkpoint record and its typed identity (FORMAT), `store.json` |
//! | [`job`] | the file front-end: flags, opening (fresh, resume, `--backfill`), outputs and what a failed run leaves |
//! | [`metrics`] | Prometheus metrics of a job or worker, served at `--metrics-addr` |
//! | [`session`] | the push front-end: one query over events pushed from memory (Python, Kafka tasks), checkpoints and resume |
//!
//! Aggregation state lives in a `spillway_store::StateStore` (hashlog by default), one
//! value per (group-by node, partition key), updated by read-modify-write of fixed
//! little-endian layouts, so the state may exceed memory.

pub mod aggregate;
pub mod checkpoint;
pub mod driver;
pub mod duration;
pub mod error;
#[cfg(test)]
mod hostile;
pub mod job;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod metrics;
pub mod operator;
pub mod plan;
pub mod reservoir;
pub mod session;
pub mod source;
pub mod sql;
pub mod value;

pub use error::{Error, Result};
