//! `spillway run`.

pub mod file;
