//! A worker of `spillway run --input kafka://B/T --output kafka://B/OUT --group G
//! --checkpoint-dir DIR`: one consumer-group member (Railgun's processor unit) running one
//! task processor per assigned partition, with exactly-once results.
//!
//! # Task processors
//! Each assigned partition `p` of `T` gets a [`Session`] (runtime, reservoir, state
//! store) in `DIR/T-p/`, guarded by an exclusive lock on `DIR/T-p/LOCK` so two workers
//! never open the same partition's state (a worker that lost `p` in a rebalance lets go
//! before the new owner opens it; a killed worker's lock goes with its process). Event
//! time is per partition: each session has its own frontier, so a lagging partition never
//! makes another's events late. With each key's events in one partition and in time
//! order there, every event's result equals the single-process `spillway run`'s.
//!
//! # Exactly once
//! Results are produced inside a Kafka transaction (one transactional producer per
//! worker; the transactional id is `spillway-G-ID` for `--worker-id ID`, so a restarted
//! worker fences its predecessor at once, else a random one). Every checkpoint interval
//! the worker, in this order:
//! 1. adds each partition's next input offset to the transaction
//!    (`send_offsets_to_transaction` with the consumer's group metadata, KIP-447, so a
//!    worker that was already replaced cannot commit) and commits it: the results of
//!    every event before those offsets and the offsets become visible together to
//!    `read_committed` readers;
//! 2. checkpoints each partition's session, tagging the checkpoint with that offset.
//!
//! A crash before 1 aborts the transaction (the broker aborts it when the transaction
//! times out or the same `--worker-id` restarts); the new owner finds checkpoint offset
//! `K` equal to the committed offset `C` and continues there. A crash between 1 and 2
//! leaves `K < C`: the new owner restores the checkpoint, rewinds to `K` and reprocesses
//! `K..C` without producing (those results are already committed) — processing is
//! deterministic per partition, so the state arrives at `C` exactly as it was. `K > C`
//! cannot happen and is refused. This is the order of Flink's two-phase commit sink with
//! the pre-commit replaced by replay, and the same reasoning as Kafka Streams'
//! exactly-once-v2 (`TaskManager::commitOffsetsOrTransaction`): offsets commit inside the
//! producer's transaction.
//!
//! # Rebalances
//! On any rebalance (a member joins, leaves or is killed and times out) the worker aborts
//! its open transaction, closes every session and reopens the sessions of its new
//! assignment from their checkpoints, rewinding each partition as above. Work since the
//! last checkpoint (at most one interval) is redone by whoever owns the partition next.
//!
//! # Bad messages
//! A message that does not decode as an event of the topic's schema goes, with the error
//! in header `spillway.error`, to `OUT.dead-letter` in the same transaction and is
//! counted; events later than the allowed lateness go to `OUT.late`.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{
    client_config, column_index, decode_event, encode_result, ensure_topic, event_id, kerr,
    late_topic, partition_count, read_schema, write_schema, TopicSchema, CALL_TIMEOUT, ID_HEADER,
};
use crate::error::{Error, Result};
use crate::runtime::Outcome;
use crate::session::{output_types, Session, SessionConfig};
use crate::source::{json_prefixes, json_row, schema_columns};
use crate::value::Schema;

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
    /// Directory of the task processors' state and checkpoints (shared by the workers).
    pub dir: PathBuf,
    /// Time between checkpoints (and transaction commits).
    pub checkpoint_every: Duration,
    /// A stable name of this worker (static group membership and transactional id).
    pub worker_id: Option<String>,
    /// Query, store and lateness of every task processor (`dir` is set per partition).
    pub session: SessionConfig,
    /// Stop (after a final checkpoint) when no event arrived for this long.
    pub idle_exit: Option<Duration>,
    /// Allowed lateness as `spillway run` takes it (`5s`, or a number in the topic's time
    /// unit); replaces `session.allowed_lateness` once the topic's schema is known.
    pub allowed_lateness: String,
}

/// What a finished worker reports.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct WorkerSummary {
    /// Events processed (including replayed ones).
    pub events: u64,
    /// Events reprocessed without producing, after a restore behind the committed offset.
    pub replayed: u64,
    /// Result rows produced (in committed and aborted transactions).
    pub emitted: u64,
    /// Late events sent to `OUT.late`.
    pub late: u64,
    /// Malformed messages sent to `OUT.dead-letter`.
    pub dead_letters: u64,
    /// Transactions committed.
    pub commits: u64,
    /// Rebalances seen (assignments rebuilt).
    pub rebalances: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Unix time in milliseconds of the first and the last event processed (0 without
    /// events): throughput over the busy span, without the start-up and idle tail.
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
}

impl ClientContext for Ctx {}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, _: &Rebalance<'_>) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
    fn post_rebalance(&self, _: &Rebalance<'_>) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

struct Task {
    session: Session,
    /// Offset of the next message to process.
    next: i64,
    /// Messages below this offset have committed results: process, do not produce.
    produce_from: i64,
    /// Processed since the last checkpoint.
    dirty: bool,
    _lock: File,
}

struct Worker<'a> {
    consumer: BaseConsumer<Ctx>,
    in_txn: bool,
    seen_epoch: u64,
    st: Tasks<'a>,
}

/// Everything but the consumer (a polled message borrows the consumer).
struct Tasks<'a> {
    cfg: &'a WorkerConfig,
    /// Every task's session settings (`dir` set per partition).
    session: SessionConfig,
    schema: Schema,
    producer: ThreadedProducer<DefaultProducerContext>,
    tasks: BTreeMap<i32, Task>,
    summary: WorkerSummary,
    late_prefixes: Vec<Vec<u8>>,
    index: std::collections::HashMap<String, usize>,
    late: String,
    dead_letter: String,
    /// The current message's event id (one buffer for all messages).
    id: String,
}

/// Runs a worker until `stop` is set or, with `idle_exit`, the input stays idle; makes a
/// final checkpoint either way. `progress` gets the events processed about every 100 ms.
pub fn run_worker(
    cfg: &WorkerConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(u64),
) -> Result<WorkerSummary> {
    let b = &cfg.brokers;
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
    let mut session_cfg = cfg.session.clone();
    session_cfg.allowed_lateness =
        crate::duration::parse_duration(&cfg.allowed_lateness, schema.time_unit())
            .map_err(|e| Error::Config(format!("--allowed-lateness: {e}")))?;
    // The query must plan against the schema before anything is created.
    let columns = {
        let q = crate::sql::parse_query(&cfg.session.query, &schema)?;
        let plan = crate::plan::Plan::build(&q, &schema)?;
        check_routing(&plan, &schema, key.as_deref(), parts, &cfg.input)?;
        output_types(&plan, &schema)?
    };
    // A new result topic gets the input's partition count; an existing one is used as is.
    if partition_count(b, &cfg.output)?.is_none() {
        ensure_topic(b, &cfg.output, Some(parts), false)?;
    }
    write_schema(b, &cfg.output, &TopicSchema::Results { columns })?;
    for t in [late_topic(&cfg.output), dead_letter_topic(&cfg.output)] {
        ensure_topic(b, &t, None, false)?;
        write_schema(b, &t, &TopicSchema::Events { schema: schema.clone(), key: key.clone() })?;
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
        .set("enable.partition.eof", "false");
    if let Some(id) = &cfg.worker_id {
        cc.set("group.instance.id", id);
    }
    let consumer: BaseConsumer<Ctx> = cc
        .create_with_context(Ctx { epoch: AtomicU64::new(0) })
        .map_err(kerr(b, "creating a consumer"))?;
    let txn_id = match &cfg.worker_id {
        Some(id) => format!("spillway-{}-{id}", cfg.group),
        None => format!("spillway-{}-{:016x}", cfg.group, rand::random::<u64>()),
    };
    let producer: ThreadedProducer<DefaultProducerContext> = client_config(b)
        .set("transactional.id", &txn_id)
        .set("transaction.timeout.ms", "10000")
        .set("linger.ms", "2")
        .set("compression.type", "lz4")
        .create()
        .map_err(kerr(b, "creating a producer"))?;
    producer.init_transactions(CALL_TIMEOUT).map_err(kerr(b, "initialising transactions"))?;
    consumer.subscribe(&[&cfg.input]).map_err(kerr(b, &format!("subscribing to {}", cfg.input)))?;

    let late_prefixes = json_prefixes(&schema_columns(&schema));
    let index = column_index(&schema);
    let mut w = Worker {
        consumer,
        in_txn: false,
        seen_epoch: 0,
        st: Tasks {
            index,
            late: late_topic(&cfg.output),
            dead_letter: dead_letter_topic(&cfg.output),
            id: String::new(),
            cfg,
            session: session_cfg,
            schema,
            producer,
            tasks: BTreeMap::new(),
            summary: WorkerSummary::default(),
            late_prefixes,
        },
    };
    let start = Instant::now();
    let r = w.run(stop, start, &mut progress);
    if r.is_err() && w.in_txn {
        let _ = w.st.producer.abort_transaction(Duration::from_secs(5));
    }
    r?;
    w.st.summary.seconds = start.elapsed().as_secs_f64();
    Ok(w.st.summary)
}

/// Railgun's subset rule: a metric is exact per partition when the topic is keyed by one
/// of the metric's `PARTITION BY` columns (all events of a metric's group then share a
/// partition). A metric without `PARTITION BY` needs every event in one partition.
fn check_routing(
    plan: &crate::plan::Plan,
    schema: &Schema,
    key: Option<&str>,
    parts: i32,
    topic: &str,
) -> Result<()> {
    if parts == 1 {
        return Ok(());
    }
    let key_idx = key.and_then(|k| schema.index_of(k));
    for g in &plan.groups {
        if key_idx.is_some_and(|k| g.partition_by.contains(&k)) {
            continue;
        }
        let by: Vec<&str> =
            g.partition_by.iter().map(|&i| schema.fields()[i].name.as_str()).collect();
        let keyed = key.map_or("not keyed by a column".to_string(), |k| format!("keyed by {k}"));
        return Err(Error::Config(if by.is_empty() {
            format!("a metric without PARTITION BY needs every event in one partition, but {topic} has {parts} partitions")
        } else {
            format!(
                "a metric partitioned by ({}) needs each group's events in one partition, but {topic} ({parts} partitions) is {keyed}; \
                 produce the topic with --key {} (routing one event to several keyed topics is not built yet)",
                by.join(", "),
                by[0]
            )
        }));
    }
    Ok(())
}

/// The dead-letter topic of the output topic `topic`.
pub fn dead_letter_topic(topic: &str) -> String {
    format!("{topic}.dead-letter")
}

fn offset_tag(o: i64) -> [u8; 8] {
    o.to_le_bytes()
}

impl Worker<'_> {
    fn run(
        &mut self,
        stop: &AtomicBool,
        start: Instant,
        progress: &mut impl FnMut(u64),
    ) -> Result<()> {
        let mut last_ckpt = Instant::now();
        let mut last_event = Instant::now();
        let mut last_progress = start;
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            if self.st.cfg.idle_exit.is_some_and(|d| last_event.elapsed() >= d) {
                break;
            }
            let msg = self.consumer.poll(Duration::from_millis(50));
            let epoch = self.consumer.context().epoch.load(Ordering::SeqCst);
            if epoch != self.seen_epoch {
                // A message fetched before the rewinds below is dropped: the seeks
                // deliver it again if it is still due.
                drop(msg);
                self.seen_epoch = epoch;
                self.rebuild()?;
                continue;
            }
            if let Some(m) = msg {
                // The error's context is formatted only on an error, not per message.
                let m = m.map_err(|e| {
                    kerr(&self.st.cfg.brokers, &format!("reading {}", self.st.cfg.input))(e)
                })?;
                if self.st.process(&m, &mut out, &mut buf)? {
                    last_event = Instant::now();
                    let s = &mut self.st.summary;
                    if s.first_event_ms == 0.0 {
                        s.first_event_ms = unix_ms();
                    }
                }
            }
            if last_ckpt.elapsed() >= self.st.cfg.checkpoint_every {
                self.checkpoint()?;
                last_ckpt = Instant::now();
            }
            if last_progress.elapsed() >= Duration::from_millis(100) {
                last_progress = Instant::now();
                progress(self.st.summary.events);
            }
        }
        if self.st.summary.events > 0 {
            // The last event's time, to within the idle poll that noticed the end.
            let idle = last_event.elapsed().as_secs_f64() * 1e3;
            self.st.summary.last_event_ms = unix_ms() - idle;
        }
        self.checkpoint()?;
        progress(self.st.summary.events);
        Ok(())
    }
}

impl Tasks<'_> {
    /// Processes one input message; false when it was not for a current task.
    fn process<M: Message>(
        &mut self,
        m: &M,
        out: &mut Vec<crate::value::Value>,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let p = m.partition();
        let Some(task) = self.tasks.get_mut(&p) else { return Ok(false) };
        if m.offset() < task.next {
            return Ok(false);
        }
        task.next = m.offset() + 1;
        task.dirty = true;
        let produce = m.offset() >= task.produce_from;
        let id = &mut self.id;
        event_id(m, id);
        let id = id.as_str();
        self.summary.events += 1;
        if !produce {
            self.summary.replayed += 1;
        }
        let decoded = match m.payload() {
            Some(b) => decode_event(b, &self.schema, &self.index),
            None => Err("empty message".into()),
        };
        let (time, row) = match decoded {
            Ok(e) => e,
            Err(why) => {
                if produce {
                    let why =
                        format!("{} partition {p} offset {}: {why}", self.cfg.input, m.offset());
                    let headers = OwnedHeaders::new()
                        .insert(Header { key: ID_HEADER, value: Some(id) })
                        .insert(Header { key: "spillway.error", value: Some(&why) });
                    let rec = BaseRecord::to(&self.dead_letter)
                        .key(id)
                        .payload(m.payload().unwrap_or_default())
                        .headers(headers);
                    send(&self.producer, rec, &self.cfg.brokers)?;
                    self.summary.dead_letters += 1;
                }
                return Ok(true);
            }
        };
        match task.session.process(time, row, out)? {
            Outcome::Emitted if produce => {
                encode_result(out, buf);
                send(
                    &self.producer,
                    BaseRecord::to(&self.cfg.output).key(id).payload(&buf[..]),
                    &self.cfg.brokers,
                )?;
                self.summary.emitted += 1;
            }
            Outcome::TooLate(ev) if produce => {
                buf.clear();
                json_row(buf, &self.late_prefixes, &ev.row);
                let headers =
                    OwnedHeaders::new().insert(Header { key: ID_HEADER, value: Some(id) });
                let rec = BaseRecord::to(&self.late).key(id).payload(&buf[..]).headers(headers);
                send(&self.producer, rec, &self.cfg.brokers)?;
                self.summary.late += 1;
            }
            _ => {}
        }
        Ok(true)
    }
}

impl Worker<'_> {
    /// Aborts the open transaction, closes every task and opens the tasks of the current
    /// assignment from their checkpoints, rewinding each partition (module docs).
    fn rebuild(&mut self) -> Result<()> {
        let b = self.st.cfg.brokers.clone();
        if self.in_txn {
            self.st
                .producer
                .abort_transaction(CALL_TIMEOUT)
                .map_err(kerr(&b, "aborting a transaction"))?;
            self.in_txn = false;
        }
        self.st.tasks.clear();
        let assignment = self.consumer.assignment().map_err(kerr(&b, "reading the assignment"))?;
        if assignment.count() == 0 {
            return Ok(());
        }
        self.st.summary.rebalances += 1;
        let committed = self.consumer.committed_offsets(assignment.clone(), CALL_TIMEOUT).map_err(
            kerr(&b, &format!("reading group {}'s committed offsets", self.st.cfg.group)),
        )?;
        for el in assignment.elements() {
            let (topic, p) = (el.topic().to_string(), el.partition());
            let c = committed.find_partition(&topic, p).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
            let dir = self.st.cfg.dir.join(format!("{topic}-{p}"));
            let lock = lock_dir(&dir)?;
            let mut scfg = self.st.session.clone();
            scfg.dir = Some(dir.clone());
            let mut session = Session::open(&scfg, self.st.schema.clone()).map_err(|e| {
                Error::Checkpoint(format!("partition {p} of {topic} in {}: {e}", dir.display()))
            })?;
            let k = match session.tag()? {
                Some(tag) => Some(i64::from_le_bytes(tag.as_slice().try_into().map_err(|_| {
                    Error::Checkpoint(format!(
                        "{}: the checkpoint carries no input offset (written by a session outside a Kafka worker?)",
                        dir.display()
                    ))
                })?)),
                None => None,
            };
            let (start, produce_from) = match (k, c) {
                (Some(k), Some(c)) if k <= c => (k, c),
                (Some(k), c) => {
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
                    let (lo, _) = self
                        .consumer
                        .fetch_watermarks(&topic, p, CALL_TIMEOUT)
                        .map_err(kerr(&b, &format!("reading the offsets of {topic}")))?;
                    if lo > 0 && c.is_some_and(|c| c > 0) {
                        return Err(Error::Checkpoint(format!(
                            "partition {p} of {topic}: group {} committed offset {} but {} has no checkpoint, \
                             and the messages before offset {lo} are gone: the state cannot be rebuilt",
                            self.st.cfg.group,
                            c.unwrap_or_default(),
                            dir.display()
                        )));
                    }
                    (lo, c.unwrap_or(lo))
                }
            };
            seek(&self.consumer, &topic, p, start, &b)?;
            self.st
                .tasks
                .insert(p, Task { session, next: start, produce_from, dirty: false, _lock: lock });
        }
        self.st.producer.begin_transaction().map_err(kerr(&b, "beginning a transaction"))?;
        self.in_txn = true;
        Ok(())
    }

    /// Commits the transaction with the tasks' offsets, then checkpoints the tasks that
    /// moved (module docs). A transaction the broker aborts (a rebalance fenced it) makes
    /// the worker rebuild from its checkpoints instead.
    fn checkpoint(&mut self) -> Result<()> {
        if !self.in_txn {
            return Ok(());
        }
        let b = self.st.cfg.brokers.clone();
        let mut offsets = TopicPartitionList::new();
        for (&p, t) in &self.st.tasks {
            if t.dirty {
                offsets
                    .add_partition_offset(&self.st.cfg.input, p, Offset::Offset(t.next))
                    .map_err(kerr(&b, "listing offsets"))?;
            }
        }
        if offsets.count() == 0 {
            return Ok(());
        }
        let meta = self.consumer.group_metadata().ok_or_else(|| {
            Error::Kafka(format!(
                "the consumer of group {} has no group metadata",
                self.st.cfg.group
            ))
        })?;
        let r = (|| {
            self.st.producer.send_offsets_to_transaction(&offsets, &meta, CALL_TIMEOUT)?;
            self.st.producer.commit_transaction(CALL_TIMEOUT)
        })();
        self.in_txn = false;
        match r {
            Ok(()) => {}
            Err(KafkaError::Transaction(e)) if !e.is_fatal() => {
                // Fenced by a rebalance or a timeout: what this transaction held is
                // redone from the checkpoints.
                if e.txn_requires_abort() {
                    let _ = self.st.producer.abort_transaction(CALL_TIMEOUT);
                }
                return self.rebuild();
            }
            Err(e) => return Err(kerr(&b, "committing a transaction")(e)),
        }
        self.st.summary.commits += 1;
        for t in self.st.tasks.values_mut().filter(|t| t.dirty) {
            t.session.checkpoint_tagged(&offset_tag(t.next))?;
            t.dirty = false;
        }
        self.st.producer.begin_transaction().map_err(kerr(&b, "beginning a transaction"))?;
        self.in_txn = true;
        Ok(())
    }
}

/// Sends one message in the open transaction, waiting while the local queue is full.
fn send<'a>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut rec: BaseRecord<'a, str, [u8]>,
    brokers: &str,
) -> Result<()> {
    loop {
        match producer.send(rec) {
            Ok(()) => return Ok(()),
            Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                rec = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, r)) => return Err(kerr(brokers, &format!("sending to {}", r.topic))(e)),
        }
    }
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

/// Takes the exclusive lock of a task directory, waiting (bounded) for a previous owner
/// that is still letting go.
fn lock_dir(dir: &Path) -> Result<File> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::Config(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("LOCK");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::Config(format!("cannot open {}: {e}", path.display())))?;
    let start = Instant::now();
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Checkpoint(format!(
                    "{} stayed locked for 60 s: another worker still owns this partition",
                    path.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::Config(format!("cannot lock {}: {e}", path.display())))
            }
        }
    }
}
