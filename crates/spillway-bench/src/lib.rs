//! # spillway-bench
