//! `spillway run`: a SQL metrics query over an input file ([`file`](mod@file)), or, with a
//! `kafka://` input, this process as a worker of a Kafka consumer group ([`worker`]).
//! Both take the flags of [`job`]; each refuses the other's flags, saying why.

use anyhow::{bail, Result};
use clap::Args;

pub mod file;
pub mod job;
pub mod worker;

/// `spillway run`: the shared flags, then the file job's, then the worker's.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub(crate) job: job::JobArgs,

    #[command(flatten)]
    pub(crate) file: file::FileJobArgs,

    #[command(flatten)]
    pub(crate) worker: worker::WorkerArgs,
}

/// `spillway run`: a worker with a `kafka://` input, else a file job.
pub fn run(a: RunArgs) -> Result<()> {
    let RunArgs { job, file, worker } = a;
    if job.kafka_input() {
        // Every flag is used or refused in `worker::worker_config`.
        #[cfg(feature = "kafka")]
        return worker::run(job, worker, &file);
        #[cfg(not(feature = "kafka"))]
        bail!("--input {}: this spillway was built without Kafka support; build it with `cargo build --release --features kafka` (needs librdkafka-dev)", job.input.display());
    }
    if let Some(flag) = worker.first_given() {
        bail!("{flag} is for Kafka workers (--input kafka://HOST:PORT/TOPIC)");
    }
    file::run(job, file)
}
