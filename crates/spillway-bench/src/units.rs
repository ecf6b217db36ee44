//! Sizes and counts on command lines (`256MiB`, `10M`): the `spillway-units` crate,
//! re-exported so the harness's callers keep their paths.

pub use spillway_units::*;
