//! A worker of `spillway run --input kafka://B/T --output kafka://B/OUT --group G
//! --checkpoint-dir DIR`: one consumer-group member (Railgun's processor unit) running one
//! task processor per assigned (topic, partition), with exactly-once results.
//!
//! # Task processors
//! A worker subscribes to the input topic and, when the query's metrics need other keys
//! than the input's (see [`super::route`]), to the stage topics `OUT.by-COL`/`OUT.all` and the
//! reply topic `OUT.reply`; the group spreads all their partitions over the workers. Each
//! assigned partition gets a task in `DIR/TOPIC-p/`, guarded by an exclusive lock on
//! `DIR/TOPIC-p/LOCK` so two workers never open the same partition's state (a worker that
//! lost it in a rebalance lets go before the new owner opens it; a killed worker's lock
//! goes with its process):
//! - an input partition's task decodes each event, routes it to the stage topics, and
//!   computes the input's own stage in a [`Session`] (runtime, reservoir, state store);
//! - a stage partition's task computes its stage's metrics in a [`Session`];
//! - a reply partition's task joins the stages' partials per event ([`Join`]).
//!
//! Event time is per task: each session has its own frontier, so a lagging partition never
//! makes another's events late. With each key's events in one partition and in time
//! order there, every event's result equals the single-process `spillway run`'s.
//!
//! # Exactly once
//! Everything a worker writes goes out inside a Kafka transaction (one transactional
//! producer per worker; the transactional id is `spillway-G-ID` for `--worker-id ID`, so a
//! restarted worker fences its predecessor at once, else a random one). Every commit
//! interval (`--commit-every`) the worker adds each moved partition's next input offset to
//! the transaction (`send_offsets_to_transaction` with the consumer's group metadata,
//! KIP-447, so a worker that was already replaced cannot commit) and commits it: the
//! output of every message before those offsets and the offsets become visible together
//! to `read_committed` readers. Every checkpoint interval (`--checkpoint-interval`, a
//! multiple of the commit interval in effect) it commits, then checkpoints each moved
//! task's state tagged with the offset just committed (the tasks at once, one thread
//! each: a checkpoint mostly waits for the disk).
//!
//! So a task's checkpoint offset `K` is never above the group's committed offset `C`. A
//! crash loses the open transaction (the broker aborts it when it times out or the same
//! `--worker-id` restarts). The partition's next owner restores the checkpoint, rewinds to
//! `K` and reprocesses `K..C` without producing (that output is already committed):
//! processing is deterministic per partition, so the state arrives at `C` exactly as it
//! was, and goes on producing from `C`. `K > C` cannot happen and is refused.
//!
//! The one invariant that keeps this exact: **no commit sends an offset below what the
//! group already committed for that partition** (`C` at the restore, then each offset
//! this worker committed). A replayed message marks nothing to commit, a task's commit
//! offset is never below `C` ([`Progress::commit_offset`]), and every commit's offset
//! list passes one check ([`offsets_to_commit`]) that refuses, as an error, an offset
//! below it. A lowered offset would survive the next crash and make the next owner emit
//! committed results again. After every rebuild the commit and checkpoint clocks restart.
//! A restored task may checkpoint during its replay: its tag `next` is below `C`, which
//! is a checkpoint like any other.
//!
//! With `--ties peers` (in place only) a session holds each row until its time is
//! complete in the partition, and a later message releases it. Such a row is sent under
//! its own event's id and timestamp, which the task keeps in order beside the session
//! (`Task::held`) and stores in the checkpoint's tag with the offset (`task_tag`).
//! Whether a released row is produced depends on the message that released it, like
//! any other output: the session is deterministic per partition, so a replayed message
//! below `C` releases exactly the rows it released before the crash (committed then),
//! and one at or above `C` the rows no committed transaction holds.
//!
//! A worker paused past the transaction timeout (a long GC pause, SIGSTOP) finds its
//! producer fenced when it comes back: unless its group membership failed too (a newer
//! instance under the same `--worker-id` took over, and this one stops), it replaces the
//! producer under the same transactional id and rebuilds its tasks from their
//! checkpoints, like after any rebalance.
//!
//! The protocol is tested by seeded kill schedules and by a test seam that halts a worker
//! at exact points of it (`SPILLWAY_KAFKA_FAULT`, the `fault` submodule); see
//! `crates/spillway-cli/tests/kafka/exactly_once.rs` and `scripts/kafka-soak.sh`. Committing
//! more often than checkpointing keeps results' latency low (a `read_committed` reader
//! sees a result only once its transaction commits) while the state is written once per
//! checkpoint; the price is up to one checkpoint interval of replay after a failover.
//! This is Kafka Streams' exactly-once-v2 (`TaskManager::commitOffsetsOrTransaction`:
//! offsets commit inside the producer's transaction; `commit.interval.ms`), with its
//! changelog replay replaced by the replay from the checkpoint offset.
//!
//! # Several machines
//! With `--checkpoint-store URL` ([`WorkerConfig::checkpoint_store`], [`super::remote`])
//! each worker's `--checkpoint-dir` is private: after each task checkpoint the worker
//! uploads what changed, and a rebuild claims each stateful task in the store before
//! opening it, which fences the previous owner's uploads and restores the task's current
//! checkpoint into the local directory unless it already holds it. An upload that a newer
//! owner fenced makes the worker rebuild as after a rebalance; one that fails after its
//! retries stops the worker, its last uploaded checkpoint still current. The store's
//! checkpoints carry the reservoir's segments with the state (the events the windows
//! still need), so a restore never re-reads the input before the checkpoint offset.
//!
//! # Rebalances
//! On any rebalance (a member joins, leaves or is killed and times out) the worker aborts
//! its open transaction, closes every task and reopens the tasks of its new assignment
//! from their checkpoints, rewinding each partition as above.
//!
//! # Batches
//! A worker takes up to [`BATCH_MESSAGES`] messages from its consumer at a time (the
//! `native` submodule: librdkafka's batch call, messages read in place) and processes
//! them in order. Each run of consecutive messages of one partition is decoded first and
//! announced to its task's session ([`Session::prefetch`]), so the state store fetches
//! the run's keys together, as the file job's driver does for its batches. Timers (the
//! commit and checkpoint intervals, progress) are read once per batch. A rebalance seen
//! after a batch drops the whole batch, as it dropped a polled message: the rebuild's
//! seeks deliver its messages again.
//!
//! # Bad messages
//! An input message that does not decode as an event of the topic's schema goes, with the
//! error in header `spillway.error`, to `OUT.dead-letter` in the same transaction and is
//! counted; events later than the allowed lateness go to `OUT.late`. A malformed message
//! on a stage or reply topic (only workers write there) stops the worker with an error
//! naming its topic, partition and offset.

mod fault;
#[expect(unsafe_code, reason = "librdkafka calls rdkafka 0.33 does not wrap")]
mod native;

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::remote::{CheckpointStore, Published, RemoteTask};
use super::route::{
    decode_partial, encode_partial_late, encode_partial_result, reply_topic, Join, Joined, Routing,
};
use super::{
    client_config, column_index, decode_event, encode_result, ensure_topic, kerr, late_topic,
    partition_count, read_schema, write_key, write_schema, TopicSchema, CALL_TIMEOUT, ID_HEADER,
};
use crate::error::{Error, Result};
use crate::operator::over::peers::Ties;
use crate::operator::over::Outcome;
use crate::operator::QueryPlan;
use crate::session::{Session, SessionConfig};
use crate::source::{json_prefixes, json_row, schema_columns};
use crate::sql::Expr;
use crate::value::{Event, Schema, Value};
use fault::{Fault, FaultPoint};
use native::{Batch, Msg};

/// Messages a worker takes from its consumer at a time. A task's run of events in a
/// batch is announced to its state store before they are processed, as the file job's
/// batches of [`crate::driver::BATCH_EVENTS`] are.
const BATCH_MESSAGES: usize = crate::driver::BATCH_EVENTS;

/// The id header's name for librdkafka.
const ID_HEADER_C: &std::ffi::CStr = c"spillway.id";

/// How to run a worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Event topic.
    pub input: String,
    /// Result topic (created with the input's partition count if missing).
    pub output: String,
    /// Consumer group: every worker of a job uses the same one.
    pub group: String,
    /// Directory of the task processors' state and checkpoints: shared by the workers,
    /// or, with `checkpoint_store`, this worker's private working directory.
    pub dir: PathBuf,
    /// URL of the store the tasks' checkpoints are uploaded to and restored from
    /// (`--checkpoint-store`; see [`super::remote`]); `None`: `dir` is shared.
    pub checkpoint_store: Option<String>,
    /// Partitions of the stage topics a one-partition input is routed to (1: no routing,
    /// the query runs in the input's one task); see [`super::route`].
    pub route_partitions: i32,
    /// Time between transaction commits: results become visible to `read_committed`
    /// readers at this pace.
    pub commit_every: Duration,
    /// Time between checkpoints of the tasks' state (each after a commit).
    pub checkpoint_every: Duration,
    /// A stable name of this worker (static group membership and transactional id).
    pub worker_id: Option<String>,
    /// Query, store and lateness of every task processor (`dir` and `items` are set per
    /// task).
    pub session: SessionConfig,
    /// Stop (after a final commit and checkpoint) once, for this long, no event arrived,
    /// no rebalance happened, and every assigned partition was read to its end
    /// ([`Worker::caught_up`]).
    pub idle_exit: Option<Duration>,
    /// Allowed lateness as `spillway run` takes it (`5s`, or a number in the topic's time
    /// unit); replaces `session.allowed_lateness` once the topic's schema is known.
    pub allowed_lateness: String,
    /// How far a windowed aggregation's watermark trails the newest event time of a
    /// task's partition, a duration in the topic's time unit (a bare number is in that
    /// unit); "0" for none. Per-event metrics refuse another value.
    pub watermark_delay: String,
    /// The event-time column the caller asked for (`--time-column`; `None`: not given).
    /// The topic's schema fixes it, so a given one must be the schema's
    /// ([`check_time_flags`]).
    pub time_column: Option<String>,
    /// The event-time unit the caller asked for (`--time-unit`; `None`: not given); a
    /// given one must be the schema's.
    pub time_unit: Option<crate::value::TimeUnit>,
    /// Where to report the worker's figures (`--metrics-addr`; `None`: nowhere).
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// Checks the time column and unit a worker was given ([`WorkerConfig::time_column`],
/// [`WorkerConfig::time_unit`]) against `schema`, the input topic's schema (written by
/// `spillway kafka produce`): the events' times are in the schema's unit, so another unit
/// would silently rescale every window and lateness. Values equal to the schema's pass.
pub fn check_time_flags(cfg: &WorkerConfig, schema: &Schema) -> Result<()> {
    let conflict = |flag: &str, given: &str, theirs: String| {
        Err(Error::Config(format!(
            "{flag} {given} conflicts with topic {}'s schema ({theirs}, set by kafka produce); \
             drop {flag}, or produce the topic again with {flag} {given}",
            cfg.input
        )))
    };
    let column = &schema.fields()[schema.time_index()].name;
    if let Some(c) = cfg.time_column.as_deref().filter(|c| c != column) {
        return conflict("--time-column", c, format!("time column {column}"));
    }
    let unit = schema.time_unit();
    if let Some(u) = cfg.time_unit.filter(|&u| u != unit) {
        return conflict("--time-unit", u.name(), unit.name().to_string());
    }
    Ok(())
}

/// What a finished worker reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WorkerSummary {
    /// Input events processed (including replayed ones).
    pub events: u64,
    /// Messages processed on every topic (input, stage and reply), including replayed ones.
    pub messages: u64,
    /// Messages reprocessed without producing, after a restore behind the committed offset.
    pub replayed: u64,
    /// Result rows produced (in committed and aborted transactions).
    pub emitted: u64,
    /// Events forwarded to stage topics.
    pub routed: u64,
    /// Partial results sent to the reply topic.
    pub partials: u64,
    /// Late events sent to `OUT.late`.
    pub late: u64,
    /// Malformed messages sent to `OUT.dead-letter`.
    pub dead_letters: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Checkpoints taken (each of all moved tasks).
    pub checkpoints: u64,
    /// Rebalances seen (assignments rebuilt).
    pub rebalances: u64,
    /// Producers replaced after the coordinator refused to abort a transaction or fenced
    /// a transaction it timed out.
    pub producer_resets: u64,
    /// Transient errors the consumer reported and recovered from (lost connections, a
    /// membership renewed after a pause).
    pub consumer_errors: u64,
    /// Events of this worker's reply tasks still waiting for a stage's partial when it
    /// stopped (0 unless a stage is behind; see [`Join`]).
    pub pending_joins: u64,
    /// The longest rebuild of the tasks after a rebalance (restores, rewinds), in ms.
    pub longest_rebuild_ms: f64,
    /// With a checkpoint store: task checkpoints uploaded, the bytes they held and the
    /// bytes actually uploaded (what changed since each task's previous upload).
    pub uploads: u64,
    /// See `uploads`.
    pub uploaded_state_bytes: u64,
    /// See `uploads`.
    pub uploaded_bytes: u64,
    /// Task checkpoints downloaded from the checkpoint store, and their bytes.
    pub restores: u64,
    /// See `restores`.
    pub restored_bytes: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Unix time in milliseconds of the first and the last message processed (0 without
    /// any): throughput over the busy span, without the start-up and idle tail.
    pub first_event_ms: f64,
    /// See `first_event_ms`.
    pub last_event_ms: f64,
}

fn unix_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Counts rebalance callbacks; the worker rebuilds its tasks when the count moves.
struct Ctx {
    epoch: AtomicU64,
    /// Whether the last completed rebalance gave this worker an assignment (possibly
    /// empty) that was not revoked since.
    assigned: AtomicBool,
}

impl ClientContext for Ctx {}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, _: &Rebalance<'_>) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
    fn post_rebalance(&self, r: &Rebalance<'_>) {
        match r {
            Rebalance::Assign(_) => self.assigned.store(true, Ordering::SeqCst),
            Rebalance::Revoke(_) => self.assigned.store(false, Ordering::SeqCst),
            Rebalance::Error(_) => {}
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a task does with its partition's messages (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Input events: route them, compute the input's own stage (if any).
    Input,
    /// Routed events of stage `.0`.
    Stage(usize),
    /// Partials to join.
    Reply,
}

struct Task {
    role: Role,
    dir: PathBuf,
    /// The stage this task computes, with its session.
    session: Option<(usize, Session)>,
    join: Option<Join>,
    pos: Progress,
    /// Moved since the last checkpoint.
    unsaved: bool,
    /// This worker's claim of the task in the checkpoint store.
    remote: Option<RemoteTask>,
    /// With `--ties peers`: the ids and timestamps of the events whose rows the session
    /// holds for their peers, oldest first (their rows come out in that order).
    held: VecDeque<Held>,
    _lock: File,
}

/// An event whose row a `--ties peers` session holds: its id (the result's key) and
/// its message's timestamp (the result's).
type Held = (String, Option<i64>);

/// Where a task's partition stands against the group's committed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Progress {
    /// Offset of the next message to process.
    next: i64,
    /// Messages below this offset have committed output: process, do not produce. It is
    /// the group's committed offset the task restored against.
    produce_from: i64,
    /// The group's committed offset as this worker knows it: `produce_from` at the
    /// restore, then each offset this worker committed. Never lowered.
    committed: i64,
    /// Produced output since the last commit (replayed messages never set it).
    uncommitted: bool,
}

impl Progress {
    /// A task restored to `next` whose partition's committed offset is `produce_from`.
    fn restored(next: i64, produce_from: i64) -> Progress {
        Progress { next, produce_from, committed: produce_from, uncommitted: false }
    }

    /// Takes the message at `offset`; true when its output is to be produced (it is at
    /// or past the committed offset), false while replaying.
    fn take(&mut self, offset: i64) -> bool {
        self.next = offset + 1;
        let produce = offset >= self.produce_from;
        self.uncommitted |= produce;
        produce
    }

    /// The offset the next commit sends for this task, `None` when it produced nothing
    /// since the last commit. Never below `produce_from`: a replaying task's position is
    /// behind what the group already committed, and committing it would hand the next
    /// owner committed messages to produce again.
    fn commit_offset(&self) -> Option<i64> {
        self.uncommitted.then(|| self.next.max(self.produce_from))
    }
}

/// The offsets of one commit, `(task, offset)`, checked against the one invariant of
/// the protocol: no offset below what the group already committed for that partition
/// (module docs, "Exactly once"). Every commit goes through here; a violation is an
/// error, never a commit.
fn offsets_to_commit<'t, K: Copy>(
    tasks: impl IntoIterator<Item = (K, &'t Progress)>,
    name: impl Fn(K) -> String,
) -> Result<Vec<(K, i64)>> {
    let mut out = Vec::new();
    for (k, p) in tasks {
        let Some(o) = p.commit_offset() else { continue };
        if o < p.committed {
            return Err(Error::Kafka(format!(
                "refusing to commit offset {o} for {}: the group's committed offset is already {} \
                 (committing it would make the next owner emit committed results again)",
                name(k),
                p.committed
            )));
        }
        out.push((k, o));
    }
    Ok(out)
}

struct Worker<'a> {
    consumer: BaseConsumer<Ctx>,
    in_txn: bool,
    seen_epoch: u64,
    /// When the last commit and the last checkpoint were due (restarted by a rebuild).
    last_commit: Instant,
    last_ckpt: Instant,
    /// The test seam (none unless `SPILLWAY_KAFKA_FAULT` is set).
    fault: Fault,
    /// Transient consumer errors already reported (one warning per kind).
    reported: Vec<String>,
    st: Tasks<'a>,
}

/// Everything but the consumer (a polled message borrows the consumer).
struct Tasks<'a> {
    cfg: &'a WorkerConfig,
    /// Every task's session settings (`dir`, `items` set per task).
    session: SessionConfig,
    schema: Schema,
    routing: Routing,
    /// The query's `WHERE`: rejected events are not routed.
    filter: Option<Expr>,
    /// Subscribed topics: the input, the forwarded stages' topics, the reply topic.
    topics: Vec<String>,
    roles: Vec<Role>,
    producer: native::Producer,
    /// The producer's transactional id (a replacement producer takes the same).
    txn_id: String,
    /// Set when the producer refused a message because the open transaction cannot
    /// commit ([`send`]); the worker then rebuilds.
    doomed: std::cell::RefCell<Option<KafkaError>>,
    tasks: BTreeMap<(usize, i32), Task>,
    /// The checkpoint store (`--checkpoint-store`).
    remote: Option<CheckpointStore>,
    summary: WorkerSummary,
    late_prefixes: Vec<Vec<u8>>,
    index: std::collections::HashMap<String, usize>,
    late: String,
    dead_letter: String,
    reply: String,
    /// Partitions of the output topic.
    out_parts: i32,
    /// The current message's event id and a routing key (buffers for all messages).
    id: String,
    key: String,
    buf: Vec<u8>,
    /// The row of the event being computed (`compute`, per-event metrics).
    out: Vec<Value>,
    /// The rows of the windows the event being computed closed (a windowed query).
    rows: Vec<Vec<Value>>,
    /// The decoded events of the run of messages being processed (`process_batch`).
    events: Vec<Event>,
    /// Per message of that run: whether it decoded (its event is next in `events`).
    decoded: Vec<bool>,
}

/// Why a batch was left before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interrupt {
    /// The producer refused a message because the transaction cannot commit.
    Doomed,
    /// The test seam's replay commit is due.
    ReplayCommit,
}

/// Runs a worker until `stop` is set or, with `idle_exit`, the input stays idle; makes a
/// final checkpoint either way. `progress` gets the events processed about every 100 ms.
pub fn run_worker(
    cfg: &WorkerConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(u64),
) -> Result<WorkerSummary> {
    let remote = cfg.checkpoint_store.as_deref().map(CheckpointStore::open).transpose()?;
    super::check_reachable(&cfg.brokers)?;
    let b = &cfg.brokers;
    if cfg.session.store == spillway_store::StoreKind::Tiered
        && cfg.session.tiered.l3 == spillway_store::tiered::L3Kind::None
    {
        return Err(Error::Config(
            "a Kafka worker checkpoints every task's state (a partition's next owner restores \
             it), and the tiered store without its durable level (--l3 none) cannot: use \
             --l3 hashlog or another --store"
                .into(),
        ));
    }
    let Some(parts) = partition_count(b, &cfg.input)? else {
        return Err(Error::Kafka(format!(
            "input topic {} does not exist (brokers {b}); create it with `spillway kafka produce`",
            cfg.input
        )));
    };
    let (schema, key) = match read_schema(b, &cfg.input)? {
        Some(TopicSchema::Events { schema, key }) => (schema, key),
        Some(TopicSchema::Results { .. }) => {
            return Err(Error::Config(format!("{} is a result topic, not an event topic", cfg.input)))
        }
        None => {
            return Err(Error::Kafka(format!(
                "input topic {} has no schema in {} (brokers {b}); produce it with `spillway kafka produce`",
                cfg.input,
                super::schema_topic(&cfg.input)
            )))
        }
    };
    check_time_flags(cfg, &schema)?;
    let mut session_cfg = cfg.session.clone();
    session_cfg.allowed_lateness =
        crate::duration::parse_duration(&cfg.allowed_lateness, schema.time_unit())
            .map_err(|e| Error::Config(format!("--allowed-lateness: {e}")))?;
    session_cfg.watermark_delay =
        crate::duration::parse_duration(&cfg.watermark_delay, schema.time_unit())
            .map_err(|e| Error::Config(format!("--watermark-delay: {e}")))?;
    // The query must plan against the schema before anything is created.
    let plan = QueryPlan::build(&cfg.session.query, &schema, None)?;
    crate::operator::check_ties(&plan, session_cfg.ties)?;
    if !plan.is_windowed() && session_cfg.watermark_delay != 0 {
        return Err(Error::Config(
            "--watermark-delay is for windowed aggregations (TUMBLE, HOP, CUMULATE, SESSION in \
             FROM); this query computes per-event OVER metrics, each emitted as its event \
             arrives"
                .into(),
        ));
    }
    let columns = plan.output_types(&schema)?;
    let key_idx = match key.as_deref() {
        Some(k) => Some(schema.index_of(k).ok_or_else(|| {
            Error::Config(format!(
                "{}'s schema names key column {k}, which it does not have",
                cfg.input
            ))
        })?),
        None => None,
    };
    // The routing, and the WHERE that decides which events the input's tasks forward
    // (a windowed aggregation runs in place and applies its WHERE in its operator).
    let (routing, filter) = match &plan {
        QueryPlan::Windowed(w) => (
            Routing::windowed(&w.group_by, &schema, &cfg.input, key_idx, parts, columns.len())?,
            None,
        ),
        QueryPlan::Over(_) => {
            let crate::sql::Query::Over(q) = crate::sql::parse(&cfg.session.query, &schema)? else {
                unreachable!("planned as per-event metrics above")
            };
            let r = Routing::plan(
                &q,
                &schema,
                &cfg.input,
                &cfg.output,
                key_idx,
                parts,
                cfg.route_partitions,
            )?;
            (r, q.filter.clone())
        }
    };
    if session_cfg.ties == Ties::Peers && (!routing.forwarded().is_empty() || routing.joins()) {
        return Err(Error::Config(format!(
            "--ties peers runs in place only: every window of the query must PARTITION BY {}'s \
             key column ({}), so that all the peers of a row are in one partition; run the \
             query with spillway run on a file, or produce the topic keyed by the windows' \
             PARTITION BY column",
            cfg.input,
            key.as_deref().unwrap_or("the topic has none")
        )));
    }
    if cfg.commit_every.is_zero() || cfg.checkpoint_every < cfg.commit_every {
        return Err(Error::Config(format!(
            "the commit interval ({:?}) must be positive and at most the checkpoint interval ({:?})",
            cfg.commit_every, cfg.checkpoint_every
        )));
    }
    // A new result topic gets the input's partition count; an existing one is used as is.
    let out_parts = match partition_count(b, &cfg.output)? {
        Some(n) => n,
        None => {
            ensure_topic(b, &cfg.output, Some(parts), false)?;
            parts
        }
    };
    write_schema(b, &cfg.output, &TopicSchema::Results { columns })?;
    for t in [late_topic(&cfg.output), dead_letter_topic(&cfg.output)] {
        ensure_topic(b, &t, None, false)?;
        write_schema(b, &t, &TopicSchema::Events { schema: schema.clone(), key: key.clone() })?;
    }
    let mut topics = vec![cfg.input.clone()];
    let mut roles = vec![Role::Input];
    for (i, st) in routing.stages.iter().enumerate() {
        if i == 0 && routing.on_input {
            continue;
        }
        ensure_topic(b, &st.topic, Some(st.partitions), false)?;
        topics.push(st.topic.clone());
        roles.push(Role::Stage(i));
    }
    let reply = reply_topic(&cfg.output);
    if routing.joins() {
        ensure_topic(b, &reply, Some(parts), false)?;
        topics.push(reply.clone());
        roles.push(Role::Reply);
    }
    std::fs::create_dir_all(&cfg.dir)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", cfg.dir.display())))?;

    let mut cc = client_config(b);
    cc.set("group.id", &cfg.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000")
        // An idle fetch returns within this; results wait on it at every hop.
        .set("fetch.wait.max.ms", "100")
        // librdkafka stops fetching a partition whose local queue holds this many
        // messages and backs off before it looks again; at the default (100k) a fast
        // reader spent most of its time waiting (150k messages/s; 590k/s with 1M).
        .set("queued.min.messages", "1000000")
        .set("enable.partition.eof", "false");
    if let Some(id) = &cfg.worker_id {
        cc.set("group.instance.id", id);
    }
    let consumer: BaseConsumer<Ctx> = cc
        .create_with_context(Ctx { epoch: AtomicU64::new(0), assigned: AtomicBool::new(false) })
        .map_err(kerr(b, "creating a consumer"))?;
    let txn_id = match &cfg.worker_id {
        Some(id) => format!("spillway-{}-{id}", cfg.group),
        None => format!("spillway-{}-{:016x}", cfg.group, rand::random::<u64>()),
    };
    let producer = native::Producer::new(transactional_producer(b, &txn_id)?, &cfg.output);
    let subs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer.subscribe(&subs).map_err(kerr(b, &format!("subscribing to {}", subs.join(", "))))?;

    let mut w = Worker {
        consumer,
        in_txn: false,
        seen_epoch: 0,
        last_commit: Instant::now(),
        last_ckpt: Instant::now(),
        fault: Fault::from_env()?,
        reported: Vec::new(),
        st: Tasks {
            index: column_index(&schema),
            late_prefixes: json_prefixes(&schema_columns(&schema)),
            late: late_topic(&cfg.output),
            dead_letter: dead_letter_topic(&cfg.output),
            reply,
            id: String::new(),
            key: String::new(),
            buf: Vec::new(),
            out: Vec::new(),
            rows: Vec::new(),
            events: Vec::with_capacity(BATCH_MESSAGES),
            decoded: Vec::with_capacity(BATCH_MESSAGES),
            out_parts,
            cfg,
            session: session_cfg,
            filter,
            schema,
            routing,
            topics,
            roles,
            producer,
            txn_id,
            doomed: std::cell::RefCell::new(None),
            tasks: BTreeMap::new(),
            remote,
            summary: WorkerSummary::default(),
        },
    };
    let start = Instant::now();
    let r = w.run(stop, start, &mut progress);
    if r.is_err() && w.in_txn {
        let _ = w.st.producer.inner().abort_transaction(Duration::from_secs(5));
    }
    r?;
    w.st.summary.seconds = start.elapsed().as_secs_f64();
    Ok(w.st.summary)
}

/// A transactional producer with id `txn_id`, its transactions initialised: this fences
/// any earlier producer with the same id and aborts what it left open.
fn transactional_producer(
    brokers: &str,
    txn_id: &str,
) -> Result<ThreadedProducer<DefaultProducerContext>> {
    let producer: ThreadedProducer<DefaultProducerContext> = client_config(brokers)
        .set("transactional.id", txn_id)
        // A killed worker's open transaction blocks read_committed readers of what it
        // wrote until the coordinator aborts it this long after it began (unless a
        // restart under the same --worker-id aborts it at once); a transaction spans one
        // commit interval.
        .set("transaction.timeout.ms", "5000")
        // librdkafka requires socket.timeout.ms <= transaction.timeout.ms + 100.
        .set("socket.timeout.ms", "5000")
        .set("linger.ms", "2")
        .set("compression.type", "lz4")
        // A delivery report per message kept the producer's polling thread waking for
        // every delivered batch and freeing each message there; the worker does nothing
        // with a successful delivery (a failed one fails the transaction's commit, and
        // is still reported). One worker on Q1, 1M events, same build: 315k events/s
        // with every report, 347k-397k (three runs) with errors only.
        .set("delivery.report.only.error", "true")
        .create()
        .map_err(kerr(brokers, "creating a producer"))?;
    producer.init_transactions(CALL_TIMEOUT).map_err(kerr(brokers, "initialising transactions"))?;
    Ok(producer)
}

/// The dead-letter topic of the output topic `topic`.
pub fn dead_letter_topic(topic: &str) -> String {
    format!("{topic}.dead-letter")
}

/// A task checkpoint's tag: the input offset the state covers (8 bytes, little-endian),
/// then, with `--ties peers`, the events whose rows the session holds (postcard
/// `Vec<(String, Option<i64>)>`, oldest first; absent when none are held).
fn task_tag(next: i64, held: &VecDeque<Held>) -> Vec<u8> {
    let mut tag = next.to_le_bytes().to_vec();
    if !held.is_empty() {
        tag = postcard::to_extend(held, tag).expect("postcard encodes ids and times");
    }
    tag
}

/// The offset and the held events of a tag written by [`task_tag`].
fn parse_task_tag(tag: &[u8]) -> std::result::Result<(i64, VecDeque<Held>), String> {
    let Some((offset, rest)) = tag.split_first_chunk::<8>() else {
        return Err(format!("has {} bytes, not an input offset's 8", tag.len()));
    };
    let held = if rest.is_empty() {
        VecDeque::new()
    } else {
        let (held, left) = postcard::take_from_bytes(rest)
            .map_err(|e| format!("does not decode its held rows: {e}"))?;
        if !left.is_empty() {
            return Err(format!("has {} bytes after its held rows", left.len()));
        }
        held
    };
    Ok((i64::from_le_bytes(*offset), held))
}

impl Worker<'_> {
    fn run(
        &mut self,
        stop: &AtomicBool,
        start: Instant,
        progress: &mut impl FnMut(u64),
    ) -> Result<()> {
        let mut last_event = Instant::now();
        // Idle since: the last event or the last rebuild (a new assignment is not read
        // yet, however long the worker waited for it).
        let mut quiet_since = last_event;
        // When to ask the brokers again whether every assigned partition was read.
        let mut next_drain_check = last_event;
        let mut last_progress = start;
        // Lag and state figures are read once a second (the totals at every tick).
        let mut next_state_report = start;
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            // Timers are read once per batch: a clock read per message cost 8% of a busy
            // worker's samples.
            let batch = Batch::poll(&self.consumer, Duration::from_millis(5), BATCH_MESSAGES);
            let epoch = self.consumer.context().epoch.load(Ordering::SeqCst);
            if epoch != self.seen_epoch {
                // Messages fetched before the rewinds below are dropped: the seeks
                // deliver them again if they are still due.
                drop(batch);
                self.seen_epoch = epoch;
                let t = Instant::now();
                self.rebuild()?;
                quiet_since = Instant::now();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let s = &mut self.st.summary;
                s.longest_rebuild_ms = s.longest_rebuild_ms.max(ms);
                continue;
            }
            let mut errors = Vec::new();
            let (busy, interrupt) = self.st.process_batch(&batch, &self.fault, &mut errors)?;
            drop(batch);
            for e in errors {
                self.consumer_error(e)?;
            }
            if busy && self.st.summary.first_event_ms == 0.0 {
                self.st.summary.first_event_ms = unix_ms();
            }
            match interrupt {
                Some(Interrupt::Doomed) => {
                    // The transaction cannot commit: abort it (or replace the producer)
                    // and redo its span from the checkpoints (the rest of the batch too).
                    self.st.doomed.borrow_mut().take();
                    self.rebuild()?;
                    continue;
                }
                Some(Interrupt::ReplayCommit) => {
                    // A commit in the middle of a replay, then a halt until killed.
                    self.commit(false)?;
                    self.fault.reached(FaultPoint::ReplayCommit, self.st.summary.replayed);
                }
                None => {}
            }
            let now = Instant::now();
            if busy {
                last_event = now;
                quiet_since = now;
            } else if self.st.cfg.idle_exit.is_some_and(|d| now - quiet_since >= d)
                && now >= next_drain_check
            {
                if self.caught_up()? {
                    break;
                }
                next_drain_check = now + Duration::from_millis(500);
            }
            if now - self.last_commit >= self.st.cfg.commit_every {
                let save = now - self.last_ckpt >= self.st.cfg.checkpoint_every;
                self.commit(save)?;
                self.last_commit = Instant::now();
                if save {
                    self.last_ckpt = self.last_commit;
                }
            }
            if now - last_progress >= Duration::from_millis(100) {
                last_progress = now;
                progress(self.st.summary.events);
                if now >= next_state_report {
                    next_state_report = now + Duration::from_secs(1);
                    self.report_metrics(true);
                } else {
                    self.report_metrics(false);
                }
            }
        }
        if self.st.summary.messages > 0 {
            // The last message's time, to within the idle poll that noticed the end.
            let idle = last_event.elapsed().as_secs_f64() * 1e3;
            self.st.summary.last_event_ms = unix_ms() - idle;
        }
        self.commit(true)?;
        self.st.summary.pending_joins = self
            .st
            .tasks
            .values()
            .filter_map(|t| t.join.as_ref())
            .map(|j| j.pending() as u64)
            .sum();
        progress(self.st.summary.events);
        self.report_metrics(true);
        Ok(())
    }

    /// Reports the worker's totals to its metrics, if any; with `state`, also each
    /// partition's consumer lag (from the consumer's cached high watermarks) and each
    /// task's store figures.
    fn report_metrics(&mut self, state: bool) {
        let Some(m) = self.st.cfg.metrics.clone() else { return };
        let s = &self.st.summary;
        m.set_totals(&crate::metrics::Totals {
            events_in: s.events,
            rows_out: s.emitted,
            late: s.late,
            malformed: s.dead_letters,
            upload_bytes: s.uploaded_bytes,
        });
        if !state {
            return;
        }
        m.clear_lag();
        // The consumer's position, like `caught_up`: librdkafka moves it past transaction
        // markers, which a task's next offset never passes.
        let pos = self.consumer.position().ok();
        for (&(ti, p), t) in self.st.tasks.iter_mut() {
            let topic = &self.st.topics[ti];
            if let Some(high) = cached_high_watermark(&self.consumer, topic, p) {
                let at = match pos.as_ref().and_then(|l| l.find_partition(topic, p)) {
                    Some(e) => match e.offset() {
                        Offset::Offset(o) => o.max(t.pos.next),
                        _ => t.pos.next,
                    },
                    None => t.pos.next,
                };
                m.set_lag(topic, p, high - at);
            }
            if let Some((_, session)) = &mut t.session {
                let name = t.dir.file_name().map(|n| n.to_string_lossy().into_owned());
                m.set_store(&name.unwrap_or_default(), &session.store_stats());
            }
        }
    }
}

impl Tasks<'_> {
    /// The index of a message's topic in `topics` (`None`: not subscribed). One topic
    /// unless the query is routed: no name lookup per message then.
    fn topic_of(&self, m: &Msg<'_>) -> Option<usize> {
        if self.topics.len() == 1 {
            Some(0)
        } else {
            self.topics.iter().position(|t| t == m.topic())
        }
    }

    /// Processes a batch of messages in order, each as [`Tasks::process`] does; the
    /// consumer errors among them go into `errors`. Each run of consecutive messages of
    /// one partition whose task decodes events is decoded first and, where the task
    /// computes them, announced to its session ([`Session::prefetch`]). Returns whether
    /// any message was for a current task, and why the batch was left before its end,
    /// if it was: the rest of it is then not processed.
    fn process_batch(
        &mut self,
        batch: &Batch<'_>,
        fault: &Fault,
        errors: &mut Vec<KafkaError>,
    ) -> Result<(bool, Option<Interrupt>)> {
        let mut busy = false;
        let mut events = std::mem::take(&mut self.events);
        let mut decoded = std::mem::take(&mut self.decoded);
        let n = batch.len();
        let mut i = 0;
        while i < n {
            let m = batch.get(i);
            if let Some(e) = m.error() {
                errors.push(e);
                i += 1;
                continue;
            }
            let (t, p) = (self.topic_of(&m), m.partition());
            let mut end = i + 1;
            while end < n {
                let x = batch.get(end);
                if x.error().is_some() || x.partition() != p || self.topic_of(&x) != t {
                    break;
                }
                end += 1;
            }
            let task = t.and_then(|t| self.tasks.get_mut(&(t, p)));
            events.clear();
            decoded.clear();
            if let Some(task) = task.filter(|task| task.role != Role::Reply) {
                for k in i..end {
                    // A message that does not decode is decoded again when processed,
                    // for its error.
                    let e =
                        batch.get(k).payload().map(|b| decode_event(b, &self.schema, &self.index));
                    decoded.push(matches!(e, Some(Ok(_))));
                    if let Some(Ok((time, row))) = e {
                        events.push(Event { time, seq: 0, row });
                    }
                }
                if let Some((_, session)) = &mut task.session {
                    session.prefetch(&events);
                }
            }
            let mut run = events.drain(..);
            for k in i..end {
                let event = if decoded.get(k - i) == Some(&true) { run.next() } else { None };
                let took = self.process(batch.get(k), event.map(|e| (e.time, e.row)))?;
                busy |= took;
                if self.doomed.borrow().is_some() {
                    return Ok((busy, Some(Interrupt::Doomed)));
                }
                if took
                    && fault.point == Some(FaultPoint::ReplayCommit)
                    && fault.due(self.summary.replayed)
                {
                    return Ok((busy, Some(Interrupt::ReplayCommit)));
                }
            }
            drop(run);
            i = end;
        }
        self.events = events;
        self.decoded = decoded;
        Ok((busy, None))
    }

    /// Processes one message, `event` its value if it was decoded already; false when
    /// it was not for a current task.
    fn process(&mut self, m: Msg<'_>, event: Option<(i64, Vec<Value>)>) -> Result<bool> {
        let p = m.partition();
        let Some(t) = self.topic_of(&m) else { return Ok(false) };
        let Some(task) = self.tasks.get_mut(&(t, p)) else { return Ok(false) };
        if m.offset() < task.pos.next {
            return Ok(false);
        }
        let produce = task.pos.take(m.offset());
        task.unsaved = true;
        let role = task.role;
        if role == Role::Reply {
            // A partial's key is its event id (it carries no id header).
            self.id.clear();
            self.id.push_str(std::str::from_utf8(m.key().unwrap_or_default()).unwrap_or_default());
        } else {
            event_id(&m, &mut self.id);
        }
        self.summary.messages += 1;
        if !produce {
            self.summary.replayed += 1;
        }
        let ts = m.timestamp_ms();
        match role {
            Role::Input => self.process_input(&m, (t, p), produce, ts, event)?,
            Role::Stage(_) => {
                let (time, row) = match (event, m.payload()) {
                    (Some(e), _) => Ok(e),
                    (None, Some(b)) => decode_event(b, &self.schema, &self.index),
                    (None, None) => Err("empty message".into()),
                }
                .map_err(|why| self.internal(&m, &why))?;
                self.compute((t, p), time, row, produce, ts)?;
            }
            Role::Reply => {
                let (stage, partial) = decode_partial(m.payload().unwrap_or_default())
                    .map_err(|why| self.internal(&m, &why))?;
                let task = self.tasks.get_mut(&(t, p)).expect("task present");
                let join = task.join.as_mut().expect("a reply task joins");
                let done = join
                    .add(&self.routing, &self.id, stage, partial)
                    .map_err(|why| self.internal(&m, &why))?;
                match done {
                    Some(Joined::Row(row)) if produce => {
                        encode_result(&row, &mut self.buf);
                        self.emit_row(p, ts)?;
                    }
                    Some(Joined::Late(json)) if produce => {
                        self.buf = json;
                        self.emit_late(ts)?;
                    }
                    _ => {}
                }
            }
        }
        Ok(true)
    }

    fn internal(&self, m: &Msg<'_>, why: &str) -> Error {
        Error::Kafka(format!(
            "{} partition {} offset {}: {why} (only Spillway workers write this topic)",
            m.topic(),
            m.partition(),
            m.offset()
        ))
    }

    /// An input event: dead-letter it, or route it and compute the input's own stage.
    fn process_input(
        &mut self,
        m: &Msg<'_>,
        task: (usize, i32),
        produce: bool,
        ts: Option<i64>,
        event: Option<(i64, Vec<Value>)>,
    ) -> Result<()> {
        self.summary.events += 1;
        let decoded = match (event, m.payload()) {
            (Some(e), _) => Ok(e),
            (None, Some(b)) => decode_event(b, &self.schema, &self.index),
            (None, None) => Err("empty message".into()),
        };
        let (time, row) = match decoded {
            Ok(e) => e,
            Err(why) => {
                if produce {
                    let why = format!(
                        "{} partition {} offset {}: {why}",
                        self.cfg.input,
                        m.partition(),
                        m.offset()
                    );
                    let headers = OwnedHeaders::new()
                        .insert(Header { key: ID_HEADER, value: Some(&self.id) })
                        .insert(Header { key: "spillway.error", value: Some(&why) });
                    let rec = BaseRecord::to(&self.dead_letter)
                        .key(self.id.as_str())
                        .payload(m.payload().unwrap_or_default())
                        .headers(headers);
                    send(self.producer.inner(), with_ts(rec, ts), &self.cfg.brokers, &self.doomed)?;
                    self.summary.dead_letters += 1;
                }
                return Ok(());
            }
        };
        let forwarded = self.routing.forwarded();
        if !forwarded.is_empty() && self.filter.as_ref().is_none_or(|f| f.eval_bool(&row)) {
            // Rejected events are neither windowed nor output anywhere: not routed.
            if produce {
                for st in forwarded {
                    self.key.clear();
                    if let Some(k) = st.key {
                        write_key(&mut self.key, &row[k]);
                    }
                    let headers = OwnedHeaders::new()
                        .insert(Header { key: ID_HEADER, value: Some(&self.id) });
                    let mut rec = BaseRecord::to(&st.topic)
                        .payload(m.payload().unwrap_or_default())
                        .headers(headers);
                    rec = if st.key.is_some() {
                        rec.key(self.key.as_str())
                    } else {
                        rec.partition(0)
                    };
                    send(self.producer.inner(), with_ts(rec, ts), &self.cfg.brokers, &self.doomed)?;
                    self.summary.routed += 1;
                }
            }
        }
        if self.tasks[&task].session.is_some() {
            self.compute(task, time, row, produce, ts)?;
        }
        Ok(())
    }

    /// Runs an event through the task's session and sends what comes out: a result row or
    /// a late event, to the output topics or, when stages join, as a partial.
    fn compute(
        &mut self,
        task: (usize, i32),
        time: i64,
        row: Vec<Value>,
        produce: bool,
        ts: Option<i64>,
    ) -> Result<()> {
        let t = self.tasks.get_mut(&task).expect("task present");
        let (stage, session) = t.session.as_mut().expect("a computing task has a session");
        let stage = *stage;
        // The event's row (per-event metrics, into the reused `out`), or the rows of the
        // windows it closed (a windowed aggregation, which runs in place, never joins).
        let (mut out, mut rows) = (std::mem::take(&mut self.out), std::mem::take(&mut self.rows));
        rows.clear();
        let per_event = session.one_row_per_event();
        let peers = !per_event && !session.is_windowed();
        let outcome = if !per_event {
            session.push(time, row, &mut rows)
        } else {
            session.process(time, row, &mut out)
        };
        let sent = match &outcome {
            Ok(Outcome::Emitted) if produce && per_event => self.send_row(stage, task.1, &out, ts),
            Ok(o) if peers => {
                // The session holds this event's row for its peers; the rows it gives
                // back are the oldest held ones, each sent under its own event's id and
                // timestamp. A replayed message (`produce` false) releases rows an
                // earlier run sent already (before the committed offset): kept in step,
                // not sent.
                let held = &mut self.tasks.get_mut(&task).expect("task present").held;
                if matches!(o, Outcome::Emitted) {
                    held.push_back((self.id.clone(), ts));
                }
                if held.len() < rows.len() {
                    Err(Error::State(format!(
                        "partition {}: {} peer rows came out but {} were held",
                        task.1,
                        rows.len(),
                        held.len()
                    )))
                } else {
                    let released: Vec<Held> = held.drain(..rows.len()).collect();
                    if produce {
                        rows.iter().zip(released).try_for_each(|(r, (id, ts))| {
                            self.send_row_as(stage, task.1, r, id, ts)
                        })
                    } else {
                        Ok(())
                    }
                }
            }
            Ok(_) if produce => rows.iter().try_for_each(|r| self.send_row(stage, task.1, r, ts)),
            _ => Ok(()),
        };
        (self.out, self.rows) = (out, rows);
        let outcome = outcome?;
        sent?;
        if !produce {
            return Ok(());
        }
        let joins = self.routing.joins();
        match outcome {
            Outcome::Emitted => {}
            Outcome::TooLate(ev) => {
                self.buf.clear();
                json_row(&mut self.buf, &self.late_prefixes, &ev.row);
                if joins {
                    let json = std::mem::take(&mut self.buf);
                    encode_partial_late(stage, &json, &mut self.buf);
                    self.emit_partial(ts)?;
                } else {
                    self.emit_late(ts)?;
                }
            }
            Outcome::Filtered => {}
        }
        Ok(())
    }

    /// Sends one result row of the task of partition `p`: to the output topic, or as a
    /// partial to the reply topic when stages join.
    fn send_row(&mut self, stage: usize, p: i32, row: &[Value], ts: Option<i64>) -> Result<()> {
        if self.routing.joins() {
            encode_partial_result(stage, row, &mut self.buf);
            self.emit_partial(ts)
        } else {
            encode_result(row, &mut self.buf);
            self.emit_row(p, ts)
        }
    }

    /// [`Self::send_row`] for the event `id` (not the message being processed): a peer
    /// row released by a later event.
    fn send_row_as(
        &mut self,
        stage: usize,
        p: i32,
        row: &[Value],
        mut id: String,
        ts: Option<i64>,
    ) -> Result<()> {
        std::mem::swap(&mut self.id, &mut id);
        let r = self.send_row(stage, p, row, ts);
        std::mem::swap(&mut self.id, &mut id);
        r
    }

    /// Sends `buf` to `topic`, keyed by the event id, with the id also in a header when
    /// `id_header` (messages whose key is not the id's only carrier for readers of
    /// event topics: late events and dead letters).
    fn send_buf(&self, topic: &str, id_header: bool, ts: Option<i64>) -> Result<()> {
        let mut rec = BaseRecord::to(topic).key(self.id.as_str()).payload(&self.buf[..]);
        if id_header {
            rec = rec.headers(
                OwnedHeaders::new().insert(Header { key: ID_HEADER, value: Some(&self.id) }),
            );
        }
        send(self.producer.inner(), with_ts(rec, ts), &self.cfg.brokers, &self.doomed)
    }

    /// Sends the result row encoded in `buf`, computed by the task of partition `p`, to
    /// the output topic, keyed by the event id, in partition `p` modulo the output's
    /// partition count (the same number by default). So the results of one
    /// input partition (with a keyed input, of each of its keys) are in one output
    /// partition in the order they were computed, which a reader of the output can rely
    /// on; hashing the event id spread one card's results over every partition. It also
    /// gives each output partition one writer (its task's owner), though a
    /// `read_committed` reader's latency measured the same either way (RESULTS).
    fn emit_row(&mut self, p: i32, ts: Option<i64>) -> Result<()> {
        let partition = p % self.out_parts;
        loop {
            match self.producer.send_output(self.id.as_bytes(), partition, &self.buf, ts) {
                Ok(()) => break,
                Err(e) => {
                    if !refused(e, &self.cfg.brokers, &self.cfg.output, &self.doomed)? {
                        break;
                    }
                }
            }
        }
        self.summary.emitted += 1;
        Ok(())
    }

    /// Sends the JSON row in `buf` to `OUT.late`.
    fn emit_late(&mut self, ts: Option<i64>) -> Result<()> {
        self.send_buf(&self.late, true, ts)?;
        self.summary.late += 1;
        Ok(())
    }

    /// Sends the partial in `buf` to the reply topic.
    fn emit_partial(&mut self, ts: Option<i64>) -> Result<()> {
        self.send_buf(&self.reply, false, ts)?;
        self.summary.partials += 1;
        Ok(())
    }
}

/// Output keeps its input's timestamp, as Kafka Streams does
/// (`ProcessorContext::forward` keeps the record's timestamp): with `kafka produce --rate`
/// that is the time the event was due, so `kafka consume --latency` measures end to end.
/// The high watermark of a partition as the consumer last learnt it from a fetch
/// (`rd_kafka_get_watermark_offsets`: no broker round trip, unlike `fetch_watermarks`);
/// `None` before the first fetch. rdkafka 0.33 does not wrap this call, hence the one
/// unsafe blocks of the engine (the other is in `status.rs`).
#[allow(unsafe_code)]
fn cached_high_watermark(consumer: &BaseConsumer<Ctx>, topic: &str, p: i32) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` lives; the topic is a
    // NUL-terminated string and both out-pointers point to locals.
    let err = unsafe {
        rdkafka_sys::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            p,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// The event id of a message into `out` (cleared first), as [`super::event_id`] reads
/// it: its `spillway.id` header, else `TOPIC/PARTITION/OFFSET`.
fn event_id(m: &Msg<'_>, out: &mut String) {
    use std::fmt::Write;
    out.clear();
    match m.header(ID_HEADER_C).and_then(|h| std::str::from_utf8(h).ok()) {
        Some(id) => out.push_str(id),
        None => {
            let _ = write!(out, "{}/{}/{}", m.topic(), m.partition(), m.offset());
        }
    }
}

fn with_ts<'a>(rec: BaseRecord<'a, str, [u8]>, ts: Option<i64>) -> BaseRecord<'a, str, [u8]> {
    match ts {
        Some(ms) => rec.timestamp(ms),
        None => rec,
    }
}

impl Worker<'_> {
    /// Aborts the open transaction, closes every task and opens the tasks of the current
    /// assignment from their checkpoints, rewinding each partition (module docs).
    fn rebuild(&mut self) -> Result<()> {
        let b = self.st.cfg.brokers.clone();
        // The clocks restart with the new transaction: a rebuilt task commits and
        // checkpoints a full interval after its restore, not at once.
        self.last_commit = Instant::now();
        self.last_ckpt = self.last_commit;
        // A refusal recorded before this rebuild concerned the transaction it aborts.
        self.st.doomed.borrow_mut().take();
        if self.in_txn {
            self.in_txn = false;
            if let Err(e) = self.st.producer.inner().abort_transaction(CALL_TIMEOUT) {
                // The coordinator refused the abort (the transaction had already ended
                // there, or fenced this producer after a timeout).
                self.replace_producer(e, "aborting a transaction")?;
            }
        }
        self.st.tasks.clear();
        let assignment = self.consumer.assignment().map_err(kerr(&b, "reading the assignment"))?;
        if assignment.count() == 0 {
            return Ok(());
        }
        self.st.summary.rebalances += 1;
        // Every task's directory is locked first, all or none (see `lock_all`).
        let dirs: Vec<PathBuf> = assignment
            .elements()
            .iter()
            .filter(|el| self.st.topics.iter().any(|t| t == el.topic()))
            .map(|el| self.st.cfg.dir.join(format!("{}-{}", el.topic(), el.partition())))
            .collect();
        let Some(mut locks) = self.lock_all(&dirs)? else {
            // A rebalance arrived while waiting: the run loop rebuilds for it.
            return Ok(());
        };
        // First every task's state, under its lock: a previous owner still letting go
        // finishes (and commits) before the committed offsets are read below.
        let mut opened = Vec::new();
        for el in assignment.elements() {
            let (topic, p) = (el.topic().to_string(), el.partition());
            let Some(ti) = self.st.topics.iter().position(|t| *t == topic) else { continue };
            let role = self.st.roles[ti];
            let dir = self.st.cfg.dir.join(format!("{topic}-{p}"));
            let lock = locks.remove(&dir).expect("every assigned task's directory was locked");
            let stage = match role {
                Role::Input if self.st.routing.on_input => Some(0),
                Role::Stage(s) => Some(s),
                _ => None,
            };
            let mut task = Task {
                role,
                dir: dir.clone(),
                session: None,
                join: None,
                pos: Progress::restored(0, 0),
                unsaved: false,
                remote: None,
                held: VecDeque::new(),
                _lock: lock,
            };
            if let Some(store) =
                self.st.remote.as_ref().filter(|_| stage.is_some() || role == Role::Reply)
            {
                // Fences the previous owner and brings the directory to the task's
                // current checkpoint (super::remote, "The local directory").
                let claim = store.claim(&format!("{topic}-{p}"), &dir)?;
                if let Some(r) = &claim.restored {
                    self.st.summary.restores += 1;
                    self.st.summary.restored_bytes += r.bytes;
                    eprintln!(
                        "restored partition {p} of {topic} from {}: {} files, {} bytes in {:.2} s",
                        store.url(),
                        r.files,
                        r.bytes,
                        r.seconds
                    );
                }
                task.remote = Some(claim);
            }
            // The offset the task's state covers: `None` without a checkpoint,
            // `Some(None)` for a task without state (it starts at the committed offset).
            let k: Option<Option<i64>> = if let Some(s) = stage {
                let mut scfg = self.st.session.clone();
                scfg.dir = Some(dir.clone());
                let n = self.st.routing.columns.len();
                let items = &self.st.routing.stages[s].items;
                if items.len() != n || items.iter().enumerate().any(|(i, &x)| i != x) {
                    scfg.items = Some(items.clone());
                }
                let session = Session::open(&scfg, self.st.schema.clone()).map_err(|e| {
                    Error::Checkpoint(format!("partition {p} of {topic} in {}: {e}", dir.display()))
                })?;
                let k = match session.tag() {
                    Some(tag) => {
                        let (k, held) = parse_task_tag(tag).map_err(|why| {
                            Error::Checkpoint(format!(
                                "{}: the checkpoint's tag {why} (written by a session outside \
                                 a Kafka worker?)",
                                dir.display()
                            ))
                        })?;
                        task.held = held;
                        Some(Some(k))
                    }
                    None => None,
                };
                task.session = Some((s, session));
                k
            } else if role == Role::Reply {
                match Join::load(&dir)? {
                    Some((join, k)) => {
                        task.join = Some(join);
                        Some(Some(k))
                    }
                    None => {
                        task.join = Some(Join::default());
                        None
                    }
                }
            } else {
                Some(None)
            };
            opened.push((ti, topic, p, task, k));
        }
        let committed = self.committed(&assignment, &opened)?;
        for (ti, topic, p, mut task, k) in opened {
            let dir = task.dir.clone();
            let c = committed.get(&(ti, p)).copied().flatten();
            let (start, produce_from) = match (k, c) {
                (Some(None), c) => {
                    let lo = match c {
                        Some(c) => c,
                        None => self.low_watermark(&topic, p)?,
                    };
                    (lo, lo)
                }
                (Some(Some(k)), Some(c)) if k <= c => (k, c),
                (Some(Some(k)), c) => {
                    return Err(Error::Checkpoint(format!(
                        "{}: the checkpoint covers partition {p} of {topic} up to offset {k}, but group {} committed {}; \
                         was this directory used with another group or topic?",
                        dir.display(),
                        self.st.cfg.group,
                        c.map_or("nothing".to_string(), |c| format!("offset {c}"))
                    )))
                }
                (None, c) => {
                    // No checkpoint: the state is empty, i.e. the state at the start of
                    // the partition, which must still be there.
                    let lo = self.low_watermark(&topic, p)?;
                    if lo > 0 && c.is_some_and(|c| c > 0) {
                        return Err(Error::Checkpoint(format!(
                            "partition {p} of {topic}: group {} committed offset {} but {} has no checkpoint{}, \
                             and the messages before offset {lo} are gone: the state cannot be rebuilt",
                            self.st.cfg.group,
                            c.unwrap_or_default(),
                            dir.display(),
                            match &self.st.remote {
                                Some(r) => format!(" (nor has {})", r.url()),
                                None => " (give every worker the same --checkpoint-dir, or a --checkpoint-store)".into(),
                            }
                        )));
                    }
                    (lo, c.unwrap_or(lo))
                }
            };
            seek(&self.consumer, &topic, p, start, &b)?;
            task.pos = Progress::restored(start, produce_from);
            self.st.tasks.insert((ti, p), task);
        }
        self.begin_transaction()?;
        self.in_txn = true;
        Ok(())
    }

    /// Begins the next transaction. A producer the coordinator fenced while this worker
    /// was paused (past the transaction timeout) may show it only here, when no
    /// transaction of its was open to abort or commit (librdkafka then fails every call
    /// with the fatal `Fenced`): it is replaced as in [`Self::replace_producer`] (which
    /// stops the worker if another instance took its membership) and the transaction
    /// begins on the new producer. The tasks are as their checkpoints or the last commit
    /// left them, so nothing is lost.
    /// Locks every directory of `dirs`, all or none. A worker that held some locks while
    /// waiting for another could deadlock with one doing the same the other way round:
    /// a worker back from a pause rebuilds from its stale assignment and waits for a
    /// partition the group gave away, holding one the new owner waits for. So between
    /// attempts every lock is let go, and the consumer is polled so a pending rebalance
    /// reaches this worker; when one does (`None`), the caller gives up this rebuild.
    /// After 60 s of a partition staying locked, the worker stops with an error.
    fn lock_all(
        &self,
        dirs: &[PathBuf],
    ) -> Result<Option<std::collections::HashMap<PathBuf, File>>> {
        let epoch = self.consumer.context().epoch.load(Ordering::SeqCst);
        let start = Instant::now();
        loop {
            let mut held = std::collections::HashMap::new();
            let mut busy = None;
            for d in dirs {
                match try_lock_dir(d)? {
                    Some(f) => {
                        held.insert(d.clone(), f);
                    }
                    None => {
                        busy = Some(d);
                        break;
                    }
                }
            }
            let Some(busy) = busy else { return Ok(Some(held)) };
            drop(held);
            if start.elapsed() >= Duration::from_secs(60) {
                return Err(Error::Checkpoint(format!(
                    "{} stayed locked for 60 s: another worker still owns this partition",
                    busy.join("LOCK").display()
                )));
            }
            // A message polled here is dropped: the rebuild's seeks deliver it again.
            drop(self.consumer.poll(Duration::from_millis(20)));
            if self.consumer.context().epoch.load(Ordering::SeqCst) != epoch {
                return Ok(None);
            }
        }
    }

    fn begin_transaction(&mut self) -> Result<()> {
        let b = self.st.cfg.brokers.clone();
        match self.st.producer.inner().begin_transaction() {
            Ok(()) => Ok(()),
            Err(e) if dooms_transaction(&e) => {
                self.replace_producer(e, "beginning a transaction")?;
                self.st
                    .producer
                    .inner()
                    .begin_transaction()
                    .map_err(kerr(&b, "beginning a transaction"))
            }
            Err(e) => Err(kerr(&b, "beginning a transaction")(e)),
        }
    }

    /// The group's committed offset of each opened task (`None`: nothing committed).
    /// With `isolation.level=read_committed` librdkafka asks for stable offsets
    /// (KIP-447's `require_stable`: `rd_kafka_committed` sets it and retries while a
    /// transaction's offsets are pending), so an offset a previous owner committed is
    /// never read as its older value. A per-partition error is an error here.
    #[allow(clippy::type_complexity)]
    fn committed(
        &self,
        assignment: &TopicPartitionList,
        opened: &[(usize, String, i32, Task, Option<Option<i64>>)],
    ) -> Result<std::collections::HashMap<(usize, i32), Option<i64>>> {
        let b = &self.st.cfg.brokers;
        let c = self.consumer.committed_offsets(assignment.clone(), CALL_TIMEOUT).map_err(kerr(
            b,
            &format!("reading group {}'s committed offsets", self.st.cfg.group),
        ))?;
        let mut out = std::collections::HashMap::with_capacity(opened.len());
        for (ti, topic, p, _, _) in opened {
            let e = c.find_partition(topic, *p);
            if let Some(Err(err)) = e.as_ref().map(|e| e.error()) {
                return Err(kerr(
                    b,
                    &format!("reading the committed offset of partition {p} of {topic}"),
                )(err));
            }
            let o = e.and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
            out.insert((*ti, *p), o);
        }
        Ok(out)
    }

    /// Whether the worker holds an assignment (possibly empty: a group may have more
    /// workers than partitions) and read every assigned partition to its end: the consumer's position
    /// (librdkafka moves it past transaction markers and aborted messages, which are never
    /// delivered) is at the partition's end as the broker reports it now (the last stable
    /// offset for a `read_committed` consumer, else the high watermark; either way a
    /// partition with an open transaction is read to its end only once that transaction
    /// ends). `--idle-exit` asks this before it stops a worker, so a worker that was just
    /// given partitions, or whose fetches lag, does not stop with their messages unread.
    fn caught_up(&self) -> Result<bool> {
        if !self.consumer.context().assigned.load(Ordering::SeqCst) {
            // Still joining the group (or between a revoke and the next assignment).
            return Ok(false);
        }
        let b = &self.st.cfg.brokers;
        let assignment = self.consumer.assignment().map_err(kerr(b, "reading the assignment"))?;
        let pos = self.consumer.position().map_err(kerr(b, "reading the consumer's positions"))?;
        for el in assignment.elements() {
            let (topic, p) = (el.topic(), el.partition());
            let Some(ti) = self.st.topics.iter().position(|t| t == topic) else { continue };
            // A task's next offset is where its reading stands if the consumer has not
            // delivered anything since the rewind.
            let next = self.st.tasks.get(&(ti, p)).map(|t| t.pos.next);
            let at = match pos.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => Some(o.max(next.unwrap_or(o))),
                _ => next,
            };
            let (_, end) = self
                .consumer
                .fetch_watermarks(topic, p, CALL_TIMEOUT)
                .map_err(kerr(b, &format!("reading the offsets of {topic}")))?;
            if at.is_none_or(|at| at < end) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn low_watermark(&self, topic: &str, p: i32) -> Result<i64> {
        let (lo, _) = self
            .consumer
            .fetch_watermarks(topic, p, CALL_TIMEOUT)
            .map_err(kerr(&self.st.cfg.brokers, &format!("reading the offsets of {topic}")))?;
        Ok(lo)
    }

    /// Commits the transaction with the moved tasks' offsets and, with `save`, then
    /// checkpoints the tasks moved since their last checkpoint (module docs). A
    /// transaction the broker aborts (a rebalance fenced it) makes the worker rebuild from
    /// its checkpoints instead.
    fn commit(&mut self, save: bool) -> Result<()> {
        if !self.in_txn {
            return Ok(());
        }
        let b = self.st.cfg.brokers.clone();
        let topics = &self.st.topics;
        let list =
            offsets_to_commit(self.st.tasks.iter().map(|(&k, t)| (k, &t.pos)), |(ti, p)| {
                format!("partition {p} of {}", topics[ti])
            })?;
        if !list.is_empty() {
            let mut offsets = TopicPartitionList::new();
            for &((ti, p), o) in &list {
                offsets
                    .add_partition_offset(&self.st.topics[ti], p, Offset::Offset(o))
                    .map_err(kerr(&b, "listing offsets"))?;
            }
            let meta = self.consumer.group_metadata().ok_or_else(|| {
                Error::Kafka(format!(
                    "the consumer of group {} has no group metadata",
                    self.st.cfg.group
                ))
            })?;
            let commit_started = Instant::now();
            let mut r =
                self.st.producer.inner().send_offsets_to_transaction(&offsets, &meta, CALL_TIMEOUT);
            if r.is_ok() {
                self.fault.reached(FaultPoint::BeforeCommit, self.st.summary.commits + 1);
                r = self.st.producer.inner().commit_transaction(CALL_TIMEOUT);
            }
            self.in_txn = false;
            match r {
                Ok(()) => {}
                Err(KafkaError::Transaction(e)) if !e.is_fatal() => {
                    // Fenced by a rebalance or a timeout: what this transaction held is
                    // redone from the checkpoints.
                    if e.txn_requires_abort() {
                        let _ = self.st.producer.inner().abort_transaction(CALL_TIMEOUT);
                    }
                    return self.rebuild();
                }
                Err(e) => return self.producer_failed(e, "committing a transaction"),
            }
            self.st.summary.commits += 1;
            if let Some(m) = &self.st.cfg.metrics {
                m.observe_commit(commit_started.elapsed().as_secs_f64());
            }
            for (k, o) in list {
                let pos = &mut self.st.tasks.get_mut(&k).expect("a listed task").pos;
                pos.committed = o;
                pos.uncommitted = false;
            }
            self.begin_transaction()?;
            self.in_txn = true;
        }
        if save && self.st.tasks.values().any(|t| t.unsaved) {
            let round = self.st.summary.checkpoints + 1;
            let ckpt_started = Instant::now();
            let mut fenced = None;
            checkpoint_sessions(self.st.tasks.values_mut().filter(|t| t.unsaved))?;
            for t in self.st.tasks.values_mut().filter(|t| t.unsaved) {
                if let Some(j) = &t.join {
                    j.save(&t.dir, t.pos.next)?;
                }
                if let (Some(store), Some(r)) = (&self.st.remote, &mut t.remote) {
                    match r.publish(store, &t.dir)? {
                        Published::Done(u) => {
                            let s = &mut self.st.summary;
                            s.uploads += 1;
                            s.uploaded_state_bytes += u.state_bytes;
                            s.uploaded_bytes += u.uploaded_bytes;
                        }
                        Published::Fenced(why) => {
                            fenced = Some(why);
                            break;
                        }
                    }
                }
                t.unsaved = false;
                self.fault.reached(FaultPoint::MidCheckpoint, round);
            }
            if let Some(why) = fenced {
                // Another worker owns a task now: rebuild as after a rebalance (the
                // consumer learns of the new assignment, or the task is claimed back
                // from its current checkpoint).
                eprintln!("warning: {why}; rebuilding this worker's tasks");
                return self.rebuild();
            }
            self.st.summary.checkpoints += 1;
            if let Some(m) = &self.st.cfg.metrics {
                m.observe_checkpoint(ckpt_started.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    /// After a fatal producer error (`what` failed with `e`): the producer is replaced
    /// ([`Self::replace_producer`]) and the tasks are rebuilt from their checkpoints.
    fn producer_failed(&mut self, e: KafkaError, what: &str) -> Result<()> {
        self.in_txn = false;
        self.replace_producer(e, what)?;
        self.rebuild()
    }

    /// The producer failed (`what` with `e`) so that its transaction cannot go on. A
    /// worker whose consumer failed too was replaced in the group (a newer instance under
    /// the same `--worker-id` took the membership and the transactional id) and stops
    /// with the error; otherwise the coordinator ended or fenced the transaction (this
    /// worker was paused past the transaction timeout), and a new producer under the same
    /// transactional id aborts whatever is still open and starts clean.
    fn replace_producer(&mut self, e: KafkaError, what: &str) -> Result<()> {
        let b = self.st.cfg.brokers.clone();
        if let Some((code, why)) = self.consumer.client().fatal_error() {
            return Err(Error::Kafka(format!(
                "{what} (brokers {b}): {e}; this worker's group membership failed too ({code}: {why}): \
                 another instance of it took over"
            )));
        }
        self.st.summary.producer_resets += 1;
        let inner = transactional_producer(&b, &self.st.txn_id)?;
        self.st.producer = native::Producer::new(inner, &self.st.cfg.output);
        Ok(())
    }
}

impl Worker<'_> {
    /// An error the consumer reported instead of a message. A fatal one (this worker's
    /// static membership was taken by a newer instance) or one about the topics
    /// themselves stops the worker; one that librdkafka recovers from by itself (a lost
    /// connection, a coordinator moving, a membership that expired while the process was
    /// paused and is being renewed) is reported once per kind and the worker goes on: the
    /// rebalance that follows, if any, rebuilds the tasks.
    fn consumer_error(&mut self, e: KafkaError) -> Result<()> {
        let b = &self.st.cfg.brokers;
        if let Some((code, why)) = self.consumer.client().fatal_error() {
            return Err(Error::Kafka(format!(
                "reading the input (brokers {b}): {e}; the consumer failed for good ({code}: {why})"
            )));
        }
        let transient = matches!(
            e.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::BrokerTransportFailure
                    | RDKafkaErrorCode::AllBrokersDown
                    | RDKafkaErrorCode::Resolve
                    | RDKafkaErrorCode::OperationTimedOut
                    | RDKafkaErrorCode::TimedOutQueue
                    | RDKafkaErrorCode::PollExceeded
                    | RDKafkaErrorCode::RequestTimedOut
                    | RDKafkaErrorCode::NetworkException
                    | RDKafkaErrorCode::NotCoordinator
                    | RDKafkaErrorCode::CoordinatorNotAvailable
                    | RDKafkaErrorCode::CoordinatorLoadInProgress
                    | RDKafkaErrorCode::RebalanceInProgress
                    | RDKafkaErrorCode::UnknownMemberId
                    | RDKafkaErrorCode::IllegalGeneration
            )
        );
        if !transient {
            return Err(kerr(b, "reading the input")(e));
        }
        self.st.summary.consumer_errors += 1;
        let text = e.to_string();
        if !self.reported.contains(&text) {
            eprintln!("warning: the consumer reported {text} (brokers {b}); it recovers by itself, the worker goes on");
            self.reported.push(text);
        }
        Ok(())
    }
}

/// Sends one message in the open transaction, waiting while the local queue is full.
///
/// A producer that refuses because the transaction itself is doomed (the coordinator
/// fenced or aborted it: a worker paused past the transaction timeout finds its producer
/// so when it comes back) does not stop the worker: the refusal goes into `doomed` and
/// the worker rebuilds its tasks after the current message, as when a commit fails (the
/// message's output is redone from the checkpoints). Any other refusal is an error.
fn send<'a>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut rec: BaseRecord<'a, str, [u8]>,
    brokers: &str,
    doomed: &std::cell::RefCell<Option<KafkaError>>,
) -> Result<()> {
    loop {
        match producer.send(rec) {
            Ok(()) => return Ok(()),
            Err((e, r)) => {
                if !refused(e, brokers, r.topic, doomed)? {
                    return Ok(());
                }
                rec = r;
            }
        }
    }
}

/// What [`send`] does when the producer refuses a message to `topic` with `e`: true to
/// try again (the local queue was full; after a millisecond), false to go on without it
/// (the transaction is doomed: recorded in `doomed`), or the error.
fn refused(
    e: KafkaError,
    brokers: &str,
    topic: &str,
    doomed: &std::cell::RefCell<Option<KafkaError>>,
) -> Result<bool> {
    if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) {
        std::thread::sleep(Duration::from_millis(1));
        Ok(true)
    } else if dooms_transaction(&e) {
        doomed.borrow_mut().get_or_insert(e);
        Ok(false)
    } else {
        Err(kerr(brokers, &format!("sending to {topic}"))(e))
    }
}

/// Whether a producer's refusal to send says its transaction cannot commit (the
/// producer is fenced, failed fatally, or waits for an abort), rather than that the
/// message is bad.
fn dooms_transaction(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fatal
                | RDKafkaErrorCode::State
                | RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
                | RDKafkaErrorCode::InvalidTransactionalState
        )
    )
}

/// Rewinds partition `p` to `offset`; the fetcher of a just-assigned partition may not
/// take a seek at once, so this retries for a few seconds.
fn seek(
    consumer: &BaseConsumer<Ctx>,
    topic: &str,
    p: i32,
    offset: i64,
    brokers: &str,
) -> Result<()> {
    let start = Instant::now();
    loop {
        match consumer.seek(topic, p, Offset::Offset(offset), Duration::from_secs(5)) {
            Ok(()) => return Ok(()),
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(kerr(
                    brokers,
                    &format!("rewinding partition {p} of {topic} to {offset}"),
                )(e))
            }
        }
    }
}

/// The exclusive lock of a task directory if no one holds it (`None`: a previous owner
/// still does; `Worker::lock_all` waits, all or none).
fn try_lock_dir(dir: &Path) -> Result<Option<File>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::Config(format!("cannot open {}: {e}", path.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::Config(format!("cannot lock {}: {e}", path.display())))
        }
    }
}

/// Most task checkpoints a checkpoint round runs at once.
const CHECKPOINT_THREADS: usize = 8;

/// Checkpoints the sessions of `tasks`, each at its task's `next` offset: a replaying
/// task's checkpoint covers less than the committed offset (K <= C, module docs); every
/// other task's `next` was just committed. The tasks write their own directories, and
/// most of a checkpoint's time is the disk's (the store's log pages and fsyncs), so
/// several tasks checkpoint at once, one thread each (at most [`CHECKPOINT_THREADS`]):
/// the worker's pause is about the slowest task's checkpoint, not their sum. The first
/// error is returned once every task's checkpoint has ended.
fn checkpoint_sessions<'a>(tasks: impl Iterator<Item = &'a mut Task>) -> Result<()> {
    let mut work: Vec<(Vec<u8>, &mut Session)> = tasks
        .filter_map(|t| {
            let tag = task_tag(t.pos.next, &t.held);
            t.session.as_mut().map(|(_, s)| (tag, s))
        })
        .collect();
    if work.len() <= 1 {
        return work.iter_mut().try_for_each(|(tag, s)| s.checkpoint_tagged(tag));
    }
    let mut first_error = None;
    for group in work.chunks_mut(CHECKPOINT_THREADS) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = group
                .iter_mut()
                .map(|(tag, s)| {
                    let tag = &*tag;
                    std::thread::Builder::new()
                        .name("task-checkpoint".into())
                        .spawn_scoped(scope, move || s.checkpoint_tagged(tag))
                })
                .collect();
            for h in handles {
                let r = match h {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(e) => {
                        Err(Error::Checkpoint(format!("starting a task checkpoint thread: {e}")))
                    }
                };
                if let Err(e) = r {
                    first_error.get_or_insert(e);
                }
            }
        });
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn task_tags_round_trip_and_refuse_what_they_did_not_write() {
        let none = VecDeque::new();
        assert_eq!(task_tag(42, &none), 42i64.to_le_bytes().to_vec());
        assert_eq!(parse_task_tag(&task_tag(42, &none)), Ok((42, none.clone())));
        let held: VecDeque<Held> =
            [("7".to_string(), Some(1_700)), ("pay/1/9".to_string(), None)].into();
        assert_eq!(parse_task_tag(&task_tag(-1, &held)), Ok((-1, held.clone())));
        assert!(parse_task_tag(&[1, 2, 3]).unwrap_err().contains("3 bytes"));
        let mut cut = task_tag(5, &held);
        cut.pop();
        assert!(parse_task_tag(&cut).unwrap_err().contains("does not decode"));
        let mut more = task_tag(5, &held);
        more.push(0);
        assert!(parse_task_tag(&more).unwrap_err().contains("1 bytes after"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Checkpoint tags that are any bytes, or valid ones with a byte changed, cut or a
        /// length set huge, parse to an offset or an error, never a panic.
        #[test]
        fn hostile_task_tags_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            next in any::<i64>(),
            held in prop::collection::vec(
                (".{0,6}", prop::option::of(any::<i64>())), 0..4),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = parse_task_tag(&garbage);
            let held: VecDeque<Held> = held.into();
            let tag = task_tag(next, &held);
            prop_assert_eq!(parse_task_tag(&tag), Ok((next, held.clone())));
            let _ = parse_task_tag(&tag[..cut % (tag.len() + 1)]);
            let bad = crate::hostile::flipped(&tag, at, byte);
            let _ = parse_task_tag(&bad);
            // The held rows' count, then the first id's length, set to u64::MAX.
            let mut huge = tag[..8].to_vec();
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            prop_assert!(parse_task_tag(&huge).is_err());
            let mut huge = tag[..8].to_vec();
            huge.push(1);
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            huge.extend_from_slice(&garbage);
            prop_assert!(parse_task_tag(&huge).is_err());
        }
    }

    fn list(tasks: &[Progress]) -> Result<Vec<(usize, i64)>> {
        offsets_to_commit(tasks.iter().enumerate(), |i| format!("task {i}"))
    }

    #[test]
    fn a_replaying_task_never_lowers_the_committed_offset() {
        // Restored from a checkpoint at 100 behind the group's committed 500.
        let mut p = Progress::restored(100, 500);
        for o in 100..164 {
            assert!(!p.take(o), "offset {o} is replayed, not produced");
        }
        assert_eq!(p.next, 164);
        assert_eq!(list(&[p]).unwrap(), vec![], "a replay alone commits nothing");
        // Even when marked as moved, the offset sent is the committed one, not 164.
        p.uncommitted = true;
        assert_eq!(list(&[p]).unwrap(), vec![(0, 500)]);
        // Past the committed offset it produces and commits its position.
        let mut p = Progress::restored(100, 500);
        for o in 100..=520 {
            assert_eq!(p.take(o), o >= 500);
        }
        assert_eq!(list(&[p]).unwrap(), vec![(0, 521)]);
    }

    #[test]
    fn the_id_header_name_given_to_librdkafka_is_the_id_header() {
        assert_eq!(ID_HEADER_C.to_str(), Ok(ID_HEADER));
    }

    #[test]
    fn an_offset_below_the_committed_one_is_an_error_not_a_commit() {
        let ok = Progress { next: 700, produce_from: 500, committed: 600, uncommitted: true };
        let bad = Progress { next: 650, produce_from: 500, committed: 680, uncommitted: true };
        let e = list(&[ok, bad]).unwrap_err().to_string();
        assert!(e.contains("refusing to commit offset 650 for task 1"), "{e}");
        assert!(e.contains("already 680"), "{e}");
    }
}
