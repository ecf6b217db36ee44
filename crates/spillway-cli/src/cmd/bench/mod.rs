//! `spillway bench ...`.

pub mod cache;
pub mod holistic;
pub mod shared;
pub mod windows;
pub mod workload;
