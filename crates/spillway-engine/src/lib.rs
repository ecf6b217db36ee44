//! # spillway-engine
//!
//! The exact sliding-window metrics engine: events, schema, SQL metrics, the shared plan
//! DAG, windows, aggregates and the event reservoir. It is built by the engine issue;
//! this crate holds its place in the workspace layout and depends only on
//! `spillway-store`, as the design requires.
