//! The commands, one module per command of the clap tree.

pub mod bench;
pub mod cache;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod run;
pub mod trace;
