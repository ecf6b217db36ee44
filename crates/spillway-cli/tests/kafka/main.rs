//! Kafka against a real broker (scripts/kafka.sh: Kafka 4.3.1, KRaft, one node on
//! loopback). One broker serves the whole test binary: [`common::broker`] starts it on
//! first use (`kafka.sh start --owner PID`), and kafka.sh's watcher stops it by its PID
//! within a second of this binary's exit, however the binary ends.
//! Every test uses its own topics and groups, so the tests can share it.
//!
//! - [`exactly_once`]: exactly-once results under seeded kill schedules and fault seams,
//!   also with private directories and a `file://` or `s3://` checkpoint store (an S3
//!   server on loopback, [`s3_server`], started on first use like the broker).
//! - [`flags`]: every `spillway run` flag given to a worker is honoured or refused.
//! - [`kafka_sh`]: `kafka.sh start` on a port another process holds fails.
//! - [`metrics`]: a worker's `--metrics-addr` endpoint scraped while it runs.
//! - [`peers`]: `--ties peers` on workers equals `spillway run --ties peers`, also after
//!   a kill.
//! - [`produce`]: `kafka produce` is safe to retry; an unreachable broker fails fast.
//! - [`status`]: `kafka status` shows a running job's members, offsets and lag.
//! - [`windows`]: window table functions on workers equal `spillway run`, also after a
//!   kill.
#![cfg(feature = "kafka")]

mod common;
mod exactly_once;
mod flags;
mod kafka_sh;
mod metrics;
mod peers;
mod produce;
// The S3 server on loopback of the engine's checkpoint-store tests, one per test binary.
#[path = "../../../spillway-engine/src/kafka/remote/tests/s3_server.rs"]
mod s3_server;
#[path = "../support/scrape.rs"]
mod scrape;
mod status;
mod windows;
