//! `spillway kafka produce`: a CSV / JSON Lines file into an event topic, one message per
//! row (layout in the [module docs](super)), keyed by a column, optionally paced at a
//! fixed rate (open loop) for latency runs. It owns the event topic's writing side: the
//! schema message, the event ids, and the rule that a topic holds each row of a file once
//! unless asked otherwise.
//!
//! The file is read by the engine's own sources (type inference, `--schema` overrides),
//! so a topic carries exactly the events `spillway run` would read from the file.
//!
//! # Guarantees
//! - **Validation first.** The whole file is read and every row parsed, exactly as the
//!   sending pass reads it, before anything goes to Kafka: a malformed row fails the
//!   command with its line and column, and the topic is left untouched (the error says
//!   nothing was sent). The file is read twice, so standard input is refused.
//! - **Transactional chunks.** Rows go out through a transactional producer whose
//!   transactional id is `spillway-produce-TOPIC`, in transactions of at most
//!   [`CHUNK_ROWS`] rows committed every [`ProduceConfig::commit_every`] (100 ms by
//!   default): `read_committed` readers (workers, `kafka consume`) see the rows while it
//!   runs, chunk by chunk, which `--rate` runs need. Each chunk is committed before the
//!   next begins, so what the topic holds of a run is always the run's first rows, in
//!   file order. A producer of the same topic started later fences an older one still
//!   running (its next commit fails) and aborts the chunk a killed one left open.
//! - **What a failure leaves.** On any error the open chunk is aborted, and the error
//!   says how many rows of the file are committed (the first K, rows 0 to K-1) and that
//!   `--resume` sends the rest. A killed producer leaves its committed chunks and an
//!   open one that the next producer of the topic aborts at its start (else the
//!   coordinator does, [`TXN_TIMEOUT_MS`] after it began).
//! - **No silent duplicates.** A topic already holding committed messages is refused
//!   (naming it, its message count, `--resume` and `--append`) unless [`Mode`] says:
//!   - [`Mode::Resume`] continues an interrupted produce of the same file: it reads
//!     every committed message of the topic (`read_committed`), takes the one with the
//!     highest numeric event id (the newest row of the last run, row R by its
//!     `spillway.row` header), checks that row R of the file encodes to exactly that
//!     message (payload and key) and, when the topic still holds all of that run's
//!     rows 0..R (no retention deleted any), that they match the file's rows 0..R as a
//!     whole (an order-independent digest of each row's index, key and value); else it
//!     refuses: "not the same file". Then it sends rows R+1.. with that run's ids. With
//!     nothing committed it starts at row 0.
//!   - [`Mode::Append`] sends the whole file again as new events. Event ids are unique
//!     in a topic (results are keyed by them, a routed job's partial results are
//!     joined by them, `consume` counts repeated ids as duplicates), so the appended
//!     rows get the ids `B..B+N-1` with B = the topic's highest committed numeric id +
//!     1; `spillway.row` still says which row of the file each one is.
//!
//!   Both refuse a file whose schema (columns, types, time column, `--key`) differs
//!   from the one in the topic's schema topic.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{
    check_reachable, client_config, ensure_topic, id_header, kerr, read_schema, write_key,
    write_schema, TopicSchema, CALL_TIMEOUT, ID_HEADER, ROW_HEADER,
};
use crate::error::{Error, Result};
use crate::source::{self, json_prefixes, json_row, Source, SourceOptions};
use crate::value::{Schema, Value};

/// Most rows in one transaction (a chunk also ends after [`ProduceConfig::commit_every`]).
pub const CHUNK_ROWS: u64 = 50_000;
/// The producer's `transaction.timeout.ms`: how long a killed producer's open chunk can
/// hold back `read_committed` readers when no producer of the topic starts again.
pub const TXN_TIMEOUT_MS: u64 = 5000;

/// What to do with a topic that already holds committed messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Refuse it (the default: a re-run must not double the events).
    #[default]
    New,
    /// Send the whole file again, as new events (ids after the topic's highest).
    Append,
    /// Continue an interrupted produce of the same file after its last committed row.
    Resume,
}

/// What to produce.
#[derive(Clone, Debug)]
pub struct ProduceConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Event topic (created if missing).
    pub topic: String,
    /// Input file (CSV or JSON Lines).
    pub input: PathBuf,
    /// How the input is read.
    pub source: SourceOptions,
    /// Column whose value keys each message (the partitioning key).
    pub key: Option<String>,
    /// Partitions of a topic created here; an existing topic must have this many.
    pub partitions: Option<i32>,
    /// Messages per second (open loop: each message is sent at its scheduled time,
    /// whatever the previous ones cost); `None`: as fast as the broker takes them.
    pub rate: Option<f64>,
    /// What to do with a topic that already holds committed messages.
    pub mode: Mode,
    /// How long a transaction (chunk) stays open at most before it is committed.
    pub commit_every: Duration,
}

/// What a finished produce reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProduceSummary {
    /// Messages sent and committed by this run.
    pub messages: u64,
    /// Data rows in the file.
    pub rows: u64,
    /// The first row this run sent (rows before it were committed by an earlier run
    /// and `--resume` skipped them; 0 otherwise).
    pub first_row: u64,
    /// Event id of row 0 of the file (0 unless `--append`ed to a topic holding events).
    pub id_base: u64,
    /// Transactions committed.
    pub transactions: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Messages per second.
    pub per_sec: f64,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Largest lag behind the schedule with `rate`, in milliseconds (how far the
    /// producer fell behind the rate asked for).
    pub max_behind_ms: f64,
}

/// Keeps the first failed delivery (a failed delivery also fails the commit).
#[derive(Default)]
struct Deliveries {
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = r {
            let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                *first = Some(format!("{e} (partition {})", m.partition()));
            }
        }
    }
}

/// Produces the file; `progress` gets the count of messages sent about every 100 ms.
pub fn produce(cfg: &ProduceConfig, mut progress: impl FnMut(u64)) -> Result<ProduceSummary> {
    if let Some(r) = cfg.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(Error::Config(format!(
                "--rate must be a positive number of events per second, not {r}"
            )));
        }
    }
    if cfg.commit_every.is_zero() {
        return Err(Error::Config("the commit interval must be positive".into()));
    }
    if cfg.input == Path::new("-") {
        return Err(Error::Config(
            "kafka produce reads its input twice (every row is checked before the first is \
             sent), so it needs a file, not standard input"
                .into(),
        ));
    }
    let brokers = &cfg.brokers;
    check_reachable(brokers)?;

    // Pass 1: every row, as the sending pass reads it; nothing is sent before it ends.
    let (schema, key_col, rows) = validate(cfg)?;
    let key_name = key_col.map(|k| schema.fields()[k].name.clone());
    let ours = TopicSchema::Events { schema: schema.clone(), key: key_name };

    let partitions = ensure_topic(brokers, &cfg.topic, cfg.partitions, false)?;
    // Fences an older producer of this topic and aborts the chunk a killed one left
    // open, so the committed messages below are final.
    let txn_id = format!("spillway-produce-{}", cfg.topic);
    let producer: ThreadedProducer<Deliveries> = client_config(brokers)
        .set("transactional.id", &txn_id)
        .set("transaction.timeout.ms", TXN_TIMEOUT_MS.to_string())
        // librdkafka requires socket.timeout.ms <= transaction.timeout.ms + 100.
        .set("socket.timeout.ms", TXN_TIMEOUT_MS.to_string())
        .set("linger.ms", if cfg.rate.is_some() { "1" } else { "5" })
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "500000")
        .create_with_context(Deliveries::default())
        .map_err(kerr(brokers, "creating a producer"))?;
    producer
        .init_transactions(CALL_TIMEOUT)
        .map_err(kerr(brokers, &format!("initialising transactions of {txn_id}")))?;

    // librdkafka looks up a topic first produced to only at its next 1 s metadata scan,
    // which would hold the first chunk back that long: look it up now.
    producer
        .client()
        .fetch_metadata(Some(&cfg.topic), CALL_TIMEOUT)
        .map_err(kerr(brokers, &format!("reading the metadata of {}", cfg.topic)))?;
    let committed = read_committed(brokers, &cfg.topic, partitions)?;
    let label = cfg.input.display().to_string();
    let plan = plan(cfg.mode, &cfg.topic, &label, rows, &committed)?;
    if committed.messages > 0 {
        match read_schema(brokers, &cfg.topic)? {
            Some(theirs) if theirs != ours => {
                return Err(Error::Config(format!(
                    "{label} reads as {} but the events in {} have {} ({}); --append and \
                     --resume need the same columns, types, time column and --key",
                    describe(&ours),
                    cfg.topic,
                    describe(&theirs),
                    super::schema_topic(&cfg.topic)
                )))
            }
            _ => {}
        }
    }

    // Pass 2: skip (and check) what is committed, then send.
    let mut src = open_source(cfg)?;
    if src.schema() != &schema {
        return Err(changed(&label, "its schema"));
    }
    let enc = Encoder { prefixes: json_prefixes(&source::schema_columns(&schema)), key_col };
    let (mut body, mut key) = (Vec::with_capacity(256), String::new());
    if let Some(n) = &plan.check {
        let last = plan.first_row - 1;
        // Rows 0..last are encoded as they were sent; their digest is compared with the
        // committed run's when the topic still holds all of that run's rows.
        let mut digest = 0u64;
        loop {
            let ev = src.next_event()?.ok_or_else(|| changed(&label, "its length"))?;
            let have_key = enc.encode(&ev.row, &mut body, &mut key);
            let key_b = have_key.then_some(key.as_bytes());
            digest = digest.wrapping_add(row_digest(ev.seq, key_b, &body));
            if ev.seq == last {
                break;
            }
        }
        // `body` and `key` hold row `last` now.
        let key_b = enc.key_col.is_some().then_some(key.as_bytes());
        if body != n.payload || key_b != n.key.as_deref() {
            return Err(Error::Config(format!(
                "--resume: {label} is not the same file: its row {last} is {} (key {}) but \
                 event {} in {} (partition {}, offset {}), the newest committed, is {} (key \
                 {}); --resume continues a produce of the same file with the same --key, \
                 --append adds a file as new events",
                quote_bytes(&body),
                key_b.map_or("none".into(), quote_bytes),
                n.id,
                cfg.topic,
                n.partition,
                n.offset,
                quote_bytes(&n.payload),
                n.key.as_deref().map_or("none".into(), quote_bytes),
            )));
        }
        if n.run_rows == plan.first_row && n.run_digest != digest {
            return Err(Error::Config(format!(
                "--resume: {label} is not the same file: its row {last} is the newest event \
                 of {} (id {}), but rows 0 to {last} as a whole differ from the {} that run \
                 committed (compared by digest); --resume continues a produce of the same \
                 file with the same --key, --append adds a file as new events",
                cfg.topic, n.id, n.run_rows
            )));
        }
    }
    write_schema(brokers, &cfg.topic, &ours)?;

    let start = Instant::now();
    let mut run = Run {
        producer: &producer,
        in_txn: false,
        txn_start: start,
        txn_rows: 0,
        next_row: plan.first_row,
        committed_to: plan.first_row,
        transactions: 0,
        fenced: false,
    };
    let mut max_behind = Duration::ZERO;
    let mut sent = 0u64;
    let start_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    let mut id = String::new();
    let mut row_s = String::new();
    let result = (|| -> Result<()> {
        while let Some(ev) = src.next_event()? {
            if ev.seq < plan.first_row {
                // Committed by an earlier run. The --resume check above has read these
                // already; this only guards against a plan past row 0 without a check.
                continue;
            }
            // With a rate, each message's timestamp is the time it was due, not the time
            // it went out: latency measured from it counts the wait of a producer that
            // fell behind (coordinated omission corrected, as wrk2 and Railgun's harness
            // do).
            let mut due_ms = None;
            if let Some(rate) = cfg.rate {
                due_ms = Some((start_unix_ms + sent as f64 * 1e3 / rate) as i64);
                let due = start + Duration::from_secs_f64(sent as f64 / rate);
                // A chunk whose interval ends before this row is due is committed first,
                // so slow rates do not hold rows back.
                if run.in_txn && run.txn_start + cfg.commit_every < due {
                    sleep_until(run.txn_start + cfg.commit_every);
                    run.commit(brokers, &cfg.topic)?;
                    progress(sent);
                }
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                } else {
                    max_behind = max_behind.max(now - due);
                }
            }
            if !run.in_txn {
                run.begin(brokers, &cfg.topic)?;
            }
            let have_key = enc.encode(&ev.row, &mut body, &mut key);
            id.clear();
            row_s.clear();
            // Writes into a String cannot fail.
            let _ = write!(id, "{}", plan.id_base + ev.seq);
            let _ = write!(row_s, "{}", ev.seq);
            let headers = OwnedHeaders::new_with_capacity(2)
                .insert(Header { key: ID_HEADER, value: Some(&id) })
                .insert(Header { key: ROW_HEADER, value: Some(&row_s) });
            let mut record = BaseRecord::to(&cfg.topic).payload(&body).headers(headers);
            if let Some(ms) = due_ms {
                record = record.timestamp(ms);
            }
            if have_key {
                record = record.key(&key);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                        record = r;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err((e, _)) => return Err(run.fail(brokers, &cfg.topic, "sending", e)),
                }
            }
            sent += 1;
            run.txn_rows += 1;
            run.next_row = ev.seq + 1;
            if run.txn_rows >= CHUNK_ROWS || run.txn_start.elapsed() >= cfg.commit_every {
                run.commit(brokers, &cfg.topic)?;
                progress(sent);
            }
        }
        if run.in_txn {
            run.commit(brokers, &cfg.topic)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        if run.in_txn {
            // The error is what matters; an abort that fails too (a fenced producer)
            // leaves the chunk to the coordinator, still uncommitted.
            let _ = producer.abort_transaction(Duration::from_secs(10));
        }
        return Err(Error::Stopped {
            error: Box::new(e),
            outputs: committed_note(
                &cfg.topic,
                &label,
                run.committed_to,
                rows,
                cfg.mode,
                run.fenced,
            ),
        });
    }
    progress(sent);
    let seconds = start.elapsed().as_secs_f64();
    Ok(ProduceSummary {
        messages: sent,
        rows,
        first_row: plan.first_row,
        id_base: plan.id_base,
        transactions: run.transactions,
        seconds,
        per_sec: sent as f64 / seconds.max(1e-9),
        partitions,
        max_behind_ms: max_behind.as_secs_f64() * 1e3,
    })
}

/// The input as both passes read it.
fn open_source(cfg: &ProduceConfig) -> Result<Box<dyn Source>> {
    Ok(source::open(&cfg.input, &cfg.source)?)
}

/// Pass 1: the schema, the key column's index and the number of rows; a malformed row
/// (or a bad `--key`) is an error saying that nothing was sent.
fn validate(cfg: &ProduceConfig) -> Result<(Schema, Option<usize>, u64)> {
    let nothing_sent = |e: Error| Error::Stopped {
        error: Box::new(e),
        outputs: format!(
            "nothing was sent to {} (every row is checked before the first is sent)",
            cfg.topic
        ),
    };
    let mut src = open_source(cfg)?;
    let schema = src.schema().clone();
    let key_col = match &cfg.key {
        None => None,
        Some(k) => Some(schema.index_of(k).ok_or_else(|| {
            let cols: Vec<&str> = schema.fields().iter().map(|f| f.name.as_str()).collect();
            Error::Config(format!("--key {k}: no such column (columns: {})", cols.join(", ")))
        })?),
    };
    let mut rows = 0u64;
    while src.next_event().map_err(|e| nothing_sent(e.into()))?.is_some() {
        rows += 1;
    }
    Ok((schema, key_col, rows))
}

/// How rows become messages (the same for sending and for `--resume`'s check).
struct Encoder {
    prefixes: Vec<Vec<u8>>,
    key_col: Option<usize>,
}

impl Encoder {
    /// The message value into `body` and its key into `key`; false: no key.
    fn encode(&self, row: &[Value], body: &mut Vec<u8>, key: &mut String) -> bool {
        body.clear();
        json_row(body, &self.prefixes, row);
        key.clear();
        match self.key_col {
            Some(k) => {
                write_key(key, &row[k]);
                true
            }
            None => false,
        }
    }
}

/// The transaction state of the sending pass.
struct Run<'a> {
    producer: &'a ThreadedProducer<Deliveries>,
    in_txn: bool,
    txn_start: Instant,
    txn_rows: u64,
    /// The row after the last one sent.
    next_row: u64,
    /// Rows `0..committed_to` of the file are committed in the topic.
    committed_to: u64,
    transactions: u64,
    /// Another producer of the topic fenced this one.
    fenced: bool,
}

impl Run<'_> {
    fn begin(&mut self, brokers: &str, topic: &str) -> Result<()> {
        if let Err(e) = self.producer.begin_transaction() {
            return Err(self.fail(brokers, topic, "beginning a transaction", e));
        }
        self.in_txn = true;
        self.txn_start = Instant::now();
        self.txn_rows = 0;
        Ok(())
    }

    fn commit(&mut self, brokers: &str, topic: &str) -> Result<()> {
        if let Err(e) = self.producer.commit_transaction(CALL_TIMEOUT) {
            return Err(self.fail(brokers, topic, "committing rows", e));
        }
        self.in_txn = false;
        self.committed_to = self.next_row;
        self.transactions += 1;
        Ok(())
    }

    /// The error of a failed producer call, with what librdkafka knows beyond it: the
    /// fatal error behind a generic "Fatal error" and the first failed delivery. Sets
    /// `fenced` when another producer of the topic took over.
    fn fail(&mut self, brokers: &str, topic: &str, what: &str, e: KafkaError) -> Error {
        let mut m = format!("{what} to {topic} (brokers {brokers}): {e}");
        let mut codes = vec![e.rdkafka_error_code()];
        if let Some((code, why)) = self.producer.client().fatal_error() {
            if !m.contains(&why) {
                let _ = write!(m, " ({why})");
            }
            codes.push(Some(code));
        }
        let first = self.producer.context().first_error.lock().map(|f| f.clone());
        if let Ok(Some(d)) = first {
            let _ = write!(m, "; first failed delivery: {d}");
        }
        self.fenced = codes.iter().any(|c| {
            matches!(
                c,
                Some(
                    RDKafkaErrorCode::Fenced
                        | RDKafkaErrorCode::ProducerFenced
                        | RDKafkaErrorCode::InvalidProducerEpoch
                )
            )
        });
        Error::Kafka(m)
    }
}

/// What the topic holds of the file after a failed run, and how to go on.
fn committed_note(
    topic: &str,
    file: &str,
    committed: u64,
    rows: u64,
    mode: Mode,
    fenced: bool,
) -> String {
    let holds = if committed == 0 {
        format!("no row of {file} is committed in {topic} by this run")
    } else {
        format!(
            "the first {committed} of the {rows} rows of {file} (rows 0 to {}) are committed \
             in {topic}",
            committed - 1
        )
    };
    if fenced {
        // The newer producer's run is the newest in the topic now: a --resume would
        // continue that one, not this.
        return format!(
            "{holds}; this run stopped because another `kafka produce` of {topic} \
             (transactional id spillway-produce-{topic}) took over and aborted its open \
             transaction"
        );
    }
    if committed == 0 {
        return format!("{holds} (the open transaction was aborted): run the same command again");
    }
    let again = match mode {
        Mode::Append => "with --resume instead of --append",
        _ => "with --resume",
    };
    format!(
        "{holds} and the rest of this run was aborted: run the same command {again} to send \
         the other {}",
        rows - committed.min(rows)
    )
}

fn changed(file: &str, what: &str) -> Error {
    Error::Config(format!(
        "{file} changed while it was produced ({what} differs from the first read); \
         nothing more was sent"
    ))
}

/// Message bytes for an error message: text, escaped, truncated.
fn quote_bytes(b: &[u8]) -> String {
    source::quote(&String::from_utf8_lossy(b))
}

/// A topic schema as `name:type,...` with its time column and key.
fn describe(s: &TopicSchema) -> String {
    match s {
        TopicSchema::Events { schema, key } => {
            let cols: Vec<String> =
                schema.fields().iter().map(|f| format!("{}:{}", f.name, f.ty)).collect();
            format!(
                "{} (time column {}, key {})",
                cols.join(","),
                schema.fields()[schema.time_index()].name,
                key.as_deref().unwrap_or("none")
            )
        }
        TopicSchema::Results { .. } => "a result topic's columns".into(),
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// The committed messages of a topic, as far as producing cares.
#[derive(Clone, Debug, Default, PartialEq)]
struct Committed {
    /// Committed data messages.
    messages: u64,
    /// The one with the highest numeric event id (`None`: no numeric id).
    newest: Option<Newest>,
}

/// The committed message with the highest numeric event id.
#[derive(Clone, Debug, PartialEq)]
struct Newest {
    id: u64,
    /// Its `spillway.row` header.
    row: Option<u64>,
    key: Option<Vec<u8>>,
    payload: Vec<u8>,
    partition: i32,
    offset: i64,
    /// Committed messages of its run (those whose id minus row equals its own; all of
    /// rows 0..=row unless retention deleted some).
    run_rows: u64,
    /// The sum of their [`row_digest`]s.
    run_digest: u64,
}

/// A digest of one message as produce writes it (row index, key, value); a run's is the
/// wrapping sum over its messages, so it does not depend on the order they are read in.
fn row_digest(row: u64, key: Option<&[u8]>, payload: &[u8]) -> u64 {
    // FNV-1a over the parts (lengths included, so no two splits collide), then a
    // finalizer that spreads every input bit (sums of raw FNV values cancel too easily).
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&row.to_le_bytes());
    match key {
        None => eat(&[0]),
        Some(k) => {
            eat(&[1]);
            eat(&(k.len() as u64).to_le_bytes());
            eat(k);
        }
    }
    eat(payload);
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Reads every committed message of `topic` (`read_committed`, each partition from its
/// low watermark to its end). Partitions without messages are not read at all.
fn read_committed(brokers: &str, topic: &str, partitions: i32) -> Result<Committed> {
    let c: BaseConsumer = client_config(brokers)
        .set("group.id", "spillway-produce")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("fetch.wait.max.ms", "100")
        .create()
        .map_err(kerr(brokers, "creating a consumer"))?;
    let mut tpl = TopicPartitionList::new();
    let mut open = HashSet::new();
    for p in 0..partitions {
        let (lo, hi) = c
            .fetch_watermarks(topic, p, CALL_TIMEOUT)
            .map_err(kerr(brokers, &format!("reading the offsets of {topic} partition {p}")))?;
        if hi > lo {
            tpl.add_partition_offset(topic, p, Offset::Offset(lo))
                .map_err(kerr(brokers, &format!("assigning {topic}")))?;
            open.insert(p);
        }
    }
    let mut out = Committed::default();
    if open.is_empty() {
        return Ok(out);
    }
    c.assign(&tpl).map_err(kerr(brokers, &format!("assigning {topic}")))?;
    // Per run (id of row 0): committed messages and their digest.
    let mut runs: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut last_progress = Instant::now();
    while !open.is_empty() {
        let m = match c.poll(Duration::from_millis(100)) {
            None => {
                if last_progress.elapsed() > CALL_TIMEOUT {
                    return Err(Error::Kafka(format!(
                        "reading the committed messages of {topic} stalled for {} s (brokers \
                         {brokers}; partitions {open:?} not read to their end)",
                        CALL_TIMEOUT.as_secs()
                    )));
                }
                continue;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                open.remove(&p);
                last_progress = Instant::now();
                continue;
            }
            Some(Err(e)) => return Err(kerr(brokers, &format!("reading {topic}"))(e)),
            Some(Ok(m)) => m,
        };
        last_progress = Instant::now();
        out.messages += 1;
        let Some(id) = id_header(&m).and_then(|s| s.parse::<u64>().ok()) else { continue };
        let row: Option<u64> = m.headers().and_then(|h| {
            (0..h.count())
                .map(|i| h.get(i))
                .find(|hdr| hdr.key == ROW_HEADER)
                .and_then(|hdr| std::str::from_utf8(hdr.value?).ok()?.parse().ok())
        });
        let payload = m.payload().unwrap_or_default();
        if let Some(r) = row.filter(|&r| r <= id) {
            let run = runs.entry(id - r).or_default();
            run.0 += 1;
            run.1 = run.1.wrapping_add(row_digest(r, m.key(), payload));
        }
        if out.newest.as_ref().is_none_or(|n| id > n.id) {
            out.newest = Some(Newest {
                id,
                row,
                key: m.key().map(<[u8]>::to_vec),
                payload: payload.to_vec(),
                partition: m.partition(),
                offset: m.offset(),
                run_rows: 0,
                run_digest: 0,
            });
        }
    }
    if let Some(n) = &mut out.newest {
        if let Some(r) = n.row.filter(|&r| r <= n.id) {
            (n.run_rows, n.run_digest) = runs[&(n.id - r)];
        }
    }
    Ok(out)
}

/// Where the sending pass starts, with which ids, and what it must find first.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    /// The first row to send.
    first_row: u64,
    /// The id of row 0 (row `r` gets `id_base + r`).
    id_base: u64,
    /// With `--resume`: the committed message row `first_row - 1` must encode to.
    check: Option<Newest>,
}

/// Decides, from what the topic holds, where to start, or refuses.
fn plan(mode: Mode, topic: &str, file: &str, rows: u64, c: &Committed) -> Result<Plan> {
    if c.messages == 0 {
        return Ok(Plan { first_row: 0, id_base: 0, check: None });
    }
    // `None`: the newest id (another program's header) is the largest there is.
    let next_id = c.newest.as_ref().map_or(Some(0), |n| n.id.checked_add(1));
    let p = match mode {
        Mode::New => Err(Error::Config(format!(
            "topic {topic} already holds {} committed messages; producing {file} again would \
             repeat its events. --resume continues an interrupted produce of the same file \
             after its last committed row; --append adds the file's rows again as new \
             events ({})",
            c.messages,
            next_id
                .map_or("no id is left after its newest".to_string(), |i| format!("ids from {i}"))
        ))),
        Mode::Append => match next_id {
            Some(id_base) => Ok(Plan { first_row: 0, id_base, check: None }),
            None => Err(Error::Config(format!(
                "--append: the newest event of {topic} has id {}, the largest there is: no id \
                 is left for {file}'s rows; produce to a new topic",
                u64::MAX
            ))),
        },
        Mode::Resume => {
            let Some(n) = &c.newest else {
                return Err(Error::Config(format!(
                    "--resume: none of the {} committed messages of {topic} has a numeric \
                     event id, so none was written by `spillway kafka produce`; --append adds \
                     {file} as new events",
                    c.messages
                )));
            };
            let Some(row) = n.row.filter(|&r| r <= n.id) else {
                return Err(Error::Config(format!(
                    "--resume: the newest event of {topic} (id {}, partition {}, offset {}) \
                     has no valid {ROW_HEADER} header, so which row of a file it is is \
                     unknown; --append adds {file} as new events",
                    n.id, n.partition, n.offset
                )));
            };
            if row >= rows {
                return Err(Error::Config(format!(
                    "--resume: {file} is not the same file: the newest event of {topic} (id \
                     {}) is row {row} of its file, but {file} has {rows} rows",
                    n.id
                )));
            }
            Ok(Plan { first_row: row + 1, id_base: n.id - row, check: Some(n.clone()) })
        }
    }?;
    // Row `r` gets id `id_base + r`: the file's last row must have one.
    if p.id_base.checked_add(rows.saturating_sub(1)).is_none() {
        return Err(Error::Config(format!(
            "the newest event of {topic} has id {}: {file}'s {rows} rows would need ids past \
             the largest there is ({}); produce to a new topic",
            c.newest.as_ref().map_or(0, |n| n.id),
            u64::MAX
        )));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn newest(id: u64, row: Option<u64>) -> Newest {
        Newest {
            id,
            row,
            key: None,
            payload: b"{}".to_vec(),
            partition: 0,
            offset: 7,
            run_rows: 0,
            run_digest: 0,
        }
    }

    fn committed(messages: u64, n: Option<Newest>) -> Committed {
        Committed { messages, newest: n }
    }

    #[test]
    fn an_empty_topic_starts_at_row_0_in_every_mode() {
        for mode in [Mode::New, Mode::Append, Mode::Resume] {
            let p = plan(mode, "t", "f.csv", 10, &Committed::default()).unwrap();
            assert_eq!(p, Plan { first_row: 0, id_base: 0, check: None });
        }
    }

    #[test]
    fn a_topic_with_events_is_refused_naming_it_its_count_and_both_flags() {
        let c = committed(4999, Some(newest(4998, Some(4998))));
        let e = plan(Mode::New, "pay", "p.csv", 10_000, &c).unwrap_err().to_string();
        for want in
            ["topic pay", "4999 committed messages", "--resume", "--append", "ids from 4999"]
        {
            assert!(e.contains(want), "{want:?} not in: {e}");
        }
    }

    #[test]
    fn append_gives_new_ids_after_the_highest() {
        let c = committed(3, Some(newest(41, Some(1))));
        let p = plan(Mode::Append, "t", "f", 5, &c).unwrap();
        assert_eq!(p, Plan { first_row: 0, id_base: 42, check: None });
        // Only messages without numeric ids: ids start at 0, they cannot collide.
        let p = plan(Mode::Append, "t", "f", 5, &committed(3, None)).unwrap();
        assert_eq!(p.id_base, 0);
    }

    #[test]
    fn resume_continues_after_the_newest_row_with_its_runs_ids() {
        // A plain run: id = row.
        let c = committed(5000, Some(newest(4999, Some(4999))));
        let p = plan(Mode::Resume, "t", "f", 10_000, &c).unwrap();
        assert_eq!((p.first_row, p.id_base), (5000, 0));
        assert_eq!(p.check, c.newest);
        // An appended run (ids from 10000) killed after row 17.
        let c = committed(10_018, Some(newest(10_017, Some(17))));
        let p = plan(Mode::Resume, "t", "f", 10_000, &c).unwrap();
        assert_eq!((p.first_row, p.id_base), (18, 10_000));
        // Everything was committed: nothing left to send.
        let c = committed(10, Some(newest(9, Some(9))));
        assert_eq!(plan(Mode::Resume, "t", "f", 10, &c).unwrap().first_row, 10);
    }

    #[test]
    fn resume_refuses_what_it_cannot_place() {
        let e = |c: Committed, rows| plan(Mode::Resume, "t", "f.csv", rows, &c).unwrap_err();
        let m = e(committed(3, None), 5).to_string();
        assert!(m.contains("none was written by `spillway kafka produce`"), "{m}");
        let m = e(committed(3, Some(newest(2, None))), 5).to_string();
        assert!(m.contains("no valid spillway.row header"), "{m}");
        let m = e(committed(3, Some(newest(2, Some(3)))), 5).to_string();
        assert!(m.contains("no valid spillway.row header"), "{m}");
        let m = e(committed(8, Some(newest(7, Some(7)))), 5).to_string();
        assert!(m.contains("f.csv is not the same file") && m.contains("has 5 rows"), "{m}");
    }

    /// Event ids near the largest u64 (headers another program wrote): the next id
    /// overflowed, or the file's rows were planned ids past it (`id_base + row`
    /// overflowed when sending).
    #[test]
    fn ids_past_the_largest_are_refused_not_a_panic() {
        let top = committed(1, Some(newest(u64::MAX, Some(0))));
        let e = plan(Mode::New, "t", "f", 5, &top).unwrap_err().to_string();
        assert!(e.contains("no id is left after its newest"), "{e}");
        let e = plan(Mode::Append, "t", "f", 5, &top).unwrap_err().to_string();
        assert!(e.contains("no id is left for f's rows"), "{e}");
        let e = plan(Mode::Resume, "t", "f", 5, &top).unwrap_err().to_string();
        assert!(e.contains("would need ids past the largest"), "{e}");
        let near = committed(1, Some(newest(u64::MAX - 2, None)));
        let e = plan(Mode::Append, "t", "f", 10, &near).unwrap_err().to_string();
        assert!(e.contains("10 rows would need ids past the largest"), "{e}");
        // The last id there is can still be given, and resumed after.
        assert_eq!(plan(Mode::Append, "t", "f", 2, &near).unwrap().id_base, u64::MAX - 1);
        let p = plan(Mode::Resume, "t", "f", 1, &top).unwrap();
        assert_eq!((p.first_row, p.id_base), (1, u64::MAX));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any newest id and row header (as any program may write them) and any file size
        /// plan a start whose ids all exist, or are refused; never a panic.
        #[test]
        fn hostile_event_ids_are_an_error_not_a_panic(
            messages in 0u64..3,
            id in prop_oneof![any::<u64>(), (0u64..4).prop_map(|d| u64::MAX - d), 0u64..8],
            row in prop::option::of(prop_oneof![any::<u64>(), 0u64..8]),
            rows in prop_oneof![any::<u64>(), 0u64..10],
            has_newest in any::<bool>(),
        ) {
            let c = committed(messages, has_newest.then(|| newest(id, row)));
            for mode in [Mode::New, Mode::Append, Mode::Resume] {
                if let Ok(p) = plan(mode, "t", "f", rows, &c) {
                    prop_assert!(p.id_base.checked_add(rows.saturating_sub(1)).is_some());
                }
            }
        }
    }

    #[test]
    fn row_digests_tell_rows_keys_and_values_apart() {
        let d = row_digest(3, Some(b"k"), b"{}");
        assert_eq!(d, row_digest(3, Some(b"k"), b"{}"));
        for other in [
            row_digest(4, Some(b"k"), b"{}"),
            row_digest(3, Some(b"j"), b"{}"),
            row_digest(3, Some(b""), b"{}"),
            row_digest(3, None, b"{}"),
            row_digest(3, Some(b"k"), b"{ }"),
            // Bytes moved between the key and the value.
            row_digest(3, Some(b"k{"), b"}"),
        ] {
            assert_ne!(d, other);
        }
        assert_ne!(row_digest(3, None, b""), row_digest(3, Some(b""), b""));
    }

    #[test]
    fn a_failure_says_what_is_committed_and_how_to_go_on() {
        let m = committed_note("pay", "p.csv", 0, 10, Mode::New, false);
        assert!(m.contains("no row of p.csv is committed in pay"), "{m}");
        assert!(m.contains("run the same command again"), "{m}");
        let m = committed_note("pay", "p.csv", 4000, 10_000, Mode::New, false);
        assert!(m.contains("the first 4000 of the 10000 rows of p.csv (rows 0 to 3999)"), "{m}");
        assert!(m.contains("with --resume to send the other 6000"), "{m}");
        let m = committed_note("pay", "p.csv", 1, 2, Mode::Append, false);
        assert!(m.contains("--resume instead of --append"), "{m}");
        // A fenced run does not advise --resume: that would continue the newer run.
        let m = committed_note("pay", "p.csv", 4000, 10_000, Mode::New, true);
        assert!(
            m.contains("rows 0 to 3999") && m.contains("another `kafka produce` of pay"),
            "{m}"
        );
        assert!(!m.contains("--resume"), "{m}");
    }

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p
    }

    fn cfg(input: PathBuf, key: Option<&str>) -> ProduceConfig {
        ProduceConfig {
            brokers: "127.0.0.1:1".into(),
            topic: "t".into(),
            input,
            source: SourceOptions::new("ts"),
            key: key.map(String::from),
            partitions: None,
            rate: None,
            mode: Mode::New,
            commit_every: Duration::from_millis(100),
        }
    }

    #[test]
    fn validation_reads_every_row_and_names_the_bad_one() {
        let d = tempfile::tempdir().unwrap();
        let mut s = String::from("ts,card,amount\n");
        for i in 0..6000 {
            let amount = if i == 4999 { "12,x".to_string() } else { format!("{i}.5") };
            let amount = if amount.contains(',') { format!("\"{amount}\"") } else { amount };
            let _ = writeln!(s, "{i},{},{amount}", i % 7);
        }
        let bad = write(d.path(), "bad.csv", &s);
        let e = validate(&cfg(bad, Some("card"))).unwrap_err().to_string();
        assert!(e.contains("line 5001"), "{e}");
        assert!(e.contains("column \"amount\": expected float"), "{e}");
        assert!(e.contains("nothing was sent to t"), "{e}");

        let good = write(d.path(), "good.csv", "ts,card\n1,a\n2,b\n");
        let (schema, key, rows) = validate(&cfg(good.clone(), Some("card"))).unwrap();
        assert_eq!((schema.fields().len(), key, rows), (2, Some(1), 2));
        let e = validate(&cfg(good, Some("nope"))).unwrap_err().to_string();
        assert!(e.contains("--key nope: no such column (columns: ts, card)"), "{e}");
    }

    #[test]
    fn standard_input_is_refused_before_any_connection() {
        let e = produce(&cfg(PathBuf::from("-"), None), |_| {}).unwrap_err().to_string();
        assert!(e.contains("needs a file, not standard input"), "{e}");
    }

    #[test]
    fn rows_encode_as_json_objects_keyed_by_the_column_text() {
        let enc =
            Encoder { prefixes: json_prefixes(&["ts".into(), "card".into()]), key_col: Some(1) };
        let (mut body, mut key) = (Vec::new(), String::new());
        assert!(enc.encode(&[Value::Int(5), Value::Str("a\"b".into())], &mut body, &mut key));
        assert_eq!(
            (body.as_slice(), key.as_str()),
            (br#"{"ts":5,"card":"a\"b"}"#.as_slice(), "a\"b")
        );
        assert!(enc.encode(&[Value::Int(6), Value::Null], &mut body, &mut key));
        assert_eq!(key, "");
        let enc = Encoder { key_col: None, ..enc };
        assert!(!enc.encode(&[Value::Int(6), Value::Null], &mut body, &mut key));
    }
}
