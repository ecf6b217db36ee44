//! `spillway kafka produce`: a CSV / JSON Lines file into an event topic, one message per
//! row (layout in the [module docs](super)), keyed by a column, optionally paced at a
//! fixed rate (open loop) for latency runs.
//!
//! The file is read by the engine's own sources (type inference, `--schema` overrides,
//! malformed rows stop with their line and column), so a topic carries exactly the events
//! `spillway run` would read from the file. The schema goes to the topic's schema topic
//! first. The producer is idempotent with `acks=all`; every delivery is confirmed before
//! the command reports success, and a failed delivery fails the command.

use std::fmt::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use super::{client_config, ensure_topic, kerr, write_key, write_schema, TopicSchema, ID_HEADER};
use crate::error::{Error, Result};
use crate::source::{self, json_prefixes, json_row, SourceOptions};

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
}

/// What a finished produce reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProduceSummary {
    /// Messages sent and acknowledged.
    pub messages: u64,
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

/// Counts deliveries and keeps the first failure.
#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
                if first.is_none() {
                    use rdkafka::Message;
                    *first =
                        Some(format!("{e} (partition {}, offset {})", m.partition(), m.offset()));
                }
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
    let mut src = source::open(&cfg.input, &cfg.source)?;
    let schema = src.schema().clone();
    let key_col = match &cfg.key {
        None => None,
        Some(k) => Some(schema.index_of(k).ok_or_else(|| {
            let cols: Vec<&str> = schema.fields().iter().map(|f| f.name.as_str()).collect();
            Error::Config(format!("--key {k}: no such column (columns: {})", cols.join(", ")))
        })?),
    };
    let brokers = &cfg.brokers;
    let partitions = ensure_topic(brokers, &cfg.topic, cfg.partitions, false)?;
    let key_name = key_col.map(|k| schema.fields()[k].name.clone());
    write_schema(
        brokers,
        &cfg.topic,
        &TopicSchema::Events { schema: schema.clone(), key: key_name },
    )?;

    let producer: ThreadedProducer<Deliveries> = client_config(brokers)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", if cfg.rate.is_some() { "1" } else { "5" })
        .set("compression.type", "lz4")
        .set("queue.buffering.max.messages", "500000")
        .create_with_context(Deliveries::default())
        .map_err(kerr(brokers, "creating a producer"))?;
    let prefixes = json_prefixes(&source::schema_columns(&schema));
    let (mut body, mut key, mut id) = (Vec::with_capacity(256), String::new(), String::new());
    let start = Instant::now();
    let mut last_progress = start;
    let mut sent = 0u64;
    let mut max_behind = Duration::ZERO;
    let start_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    while let Some(ev) = src.next_event()? {
        // With a rate, each message's timestamp is the time it was due, not the time it
        // went out: latency measured from it counts the wait of a producer that fell
        // behind (coordinated omission corrected, as wrk2 and Railgun's harness do).
        let mut due_ms = None;
        if let Some(rate) = cfg.rate {
            due_ms = Some((start_unix_ms + sent as f64 * 1e3 / rate) as i64);
            let due = start + Duration::from_secs_f64(sent as f64 / rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            } else {
                max_behind = max_behind.max(now - due);
            }
        }
        body.clear();
        json_row(&mut body, &prefixes, &ev.row);
        id.clear();
        // Writes into a String cannot fail.
        let _ = write!(id, "{}", ev.seq);
        let headers = OwnedHeaders::new().insert(Header { key: ID_HEADER, value: Some(&id) });
        let mut record = BaseRecord::to(&cfg.topic).payload(&body).headers(headers);
        if let Some(ms) = due_ms {
            record = record.timestamp(ms);
        }
        if let Some(k) = key_col {
            key.clear();
            write_key(&mut key, &ev.row[k]);
            record = record.key(&key);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, r)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(kerr(brokers, &format!("sending to {}", cfg.topic))(e)),
            }
        }
        sent += 1;
        if sent.is_multiple_of(1024) {
            check_failures(producer.context(), &cfg.topic, brokers)?;
            if last_progress.elapsed() >= Duration::from_millis(100) {
                last_progress = Instant::now();
                progress(sent);
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(kerr(brokers, &format!("flushing {}", cfg.topic)))?;
    check_failures(producer.context(), &cfg.topic, brokers)?;
    let ok = producer.context().ok.load(Ordering::Relaxed);
    if ok != sent {
        return Err(Error::Kafka(format!(
            "{} of {sent} messages to {} were not acknowledged (brokers {brokers})",
            sent - ok,
            cfg.topic
        )));
    }
    progress(sent);
    let seconds = start.elapsed().as_secs_f64();
    Ok(ProduceSummary {
        messages: sent,
        seconds,
        per_sec: sent as f64 / seconds.max(1e-9),
        partitions,
        max_behind_ms: max_behind.as_secs_f64() * 1e3,
    })
}

fn check_failures(d: &Deliveries, topic: &str, brokers: &str) -> Result<()> {
    if d.failed.load(Ordering::Relaxed) > 0 {
        let first = d.first_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        return Err(Error::Kafka(format!(
            "delivery to {topic} failed (brokers {brokers}): {}",
            first.unwrap_or_default()
        )));
    }
    Ok(())
}
