//! The commands, one module per command of the clap tree (`main.rs` holds its root):
//!
//! - [`run`]: `spillway run`, the file job ([`run::file`]) and the Kafka worker
//!   ([`run::worker`], feature `kafka`);
//! - [`demo`], [`explain`], [`report`]: `spillway demo`, `explain`, `report`;
//! - [`trace`]: `spillway trace gen|stats|convert`;
//! - [`cache`]: `spillway cache sim`;
//! - `kafka`: `spillway kafka produce|consume|status` (feature `kafka`);
//! - [`bench`](mod@bench): `spillway bench ...`, one file per benchmark.
//!
//! What several commands share: [`args`] (argument groups and what they mean),
//! [`progress`] (the stderr spinner and a job's progress line) and [`summary`] (a job's
//! summary).

pub mod args;
pub mod bench;
pub mod cache;
pub mod demo;
pub mod explain;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod progress;
pub mod report;
pub mod run;
pub mod summary;
pub mod trace;
