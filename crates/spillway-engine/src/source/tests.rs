//! Tests of sources and sinks.
