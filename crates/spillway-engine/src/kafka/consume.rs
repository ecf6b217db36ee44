//! `spillway kafka consume`: a result (or event) topic into a CSV / JSON Lines file,
//! reading only committed messages (`isolation.level=read_committed`), so what it writes
//! is what the workers' transactions committed.
//!
//! It reads every partition from its beginning (no consumer group, nothing committed) and
//! stops after `count` rows or at the timeout. Each row's event id (the message key) is
//! tracked: the summary counts ids seen more than once, the exactly-once check. With
//! `sort`, rows are written in event-id order (numeric ids numerically), which for a
//! complete result topic is exactly the file `spillway run` writes for the same input.
//!
//! With `latency`, each message's end-to-end latency is the time it was read minus its
//! Kafka timestamp. Workers keep their input's timestamp on what they write, and `kafka
//! produce --rate` stamps each event with the time it was due on the open-loop schedule,
//! so this is produce-time (as scheduled: coordinated omission corrected) to
//! reply-consumed-time, Railgun's end-to-end measure. The producer, workers and this
//! reader must share a clock (one machine here). Latencies go into an HDR histogram
//! (1 µs to 1 h, 3 significant digits) and, with `latency_log`, one CSV line per message.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{
    client_config, column_index, decode_event, decode_result, kerr, partition_count, read_schema,
    TopicSchema,
};
use crate::error::{Error, Result};
use crate::source::{schema_columns, Sink};
use crate::value::Value;

/// Turns a message's value into a row.
type Decode = dyn Fn(&[u8]) -> std::result::Result<Vec<Value>, String>;

/// What to consume.
#[derive(Clone, Debug)]
pub struct ConsumeConfig {
    /// Bootstrap servers.
    pub brokers: String,
    /// Topic to read.
    pub topic: String,
    /// Output file (`None`: CSV on stdout).
    pub output: Option<PathBuf>,
    /// Stop after this many rows.
    pub count: Option<u64>,
    /// Stop after this long in all.
    pub timeout: Duration,
    /// Write rows in event-id order (buffers them until the end).
    pub sort: bool,
    /// Add the event id as a first column `event_id`.
    pub with_id: bool,
    /// Measure each message's end-to-end latency (module docs).
    pub latency: bool,
    /// With `latency`: write `consumed_unix_ms,latency_ms,partition` per message here.
    pub latency_log: Option<PathBuf>,
}

/// End-to-end latency percentiles, in milliseconds.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Latency {
    /// Messages measured.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// Messages without a timestamp (not measured).
    pub unstamped: u64,
}

/// What a finished consume reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConsumeSummary {
    /// Rows written.
    pub rows: u64,
    /// Rows whose event id had been seen before (0 when every result came exactly once).
    pub duplicate_ids: u64,
    /// True when the timeout ended the read before `count` rows.
    pub timed_out: bool,
    /// Wall seconds.
    pub seconds: f64,
    /// With `latency`.
    pub latency: Option<Latency>,
}

/// Reads the topic into the output; `progress` gets the row count about every 100 ms.
pub fn consume(cfg: &ConsumeConfig, mut progress: impl FnMut(u64)) -> Result<ConsumeSummary> {
    let brokers = &cfg.brokers;
    super::check_reachable(brokers)?;
    let Some(parts) = partition_count(brokers, &cfg.topic)? else {
        return Err(Error::Kafka(format!(
            "topic {} does not exist (brokers {brokers})",
            cfg.topic
        )));
    };
    let Some(ts) = read_schema(brokers, &cfg.topic)? else {
        return Err(Error::Kafka(format!(
            "topic {} has no schema in {}: it was not written by `spillway kafka produce` or a `spillway run` worker",
            cfg.topic,
            super::schema_topic(&cfg.topic)
        )));
    };
    let (mut columns, decode): (Vec<String>, Box<Decode>) = match ts {
        TopicSchema::Results { columns } => {
            (columns.into_iter().map(|c| c.0).collect(), Box::new(decode_result))
        }
        TopicSchema::Events { schema, .. } => {
            let index = column_index(&schema);
            let cols = schema_columns(&schema);
            (cols, Box::new(move |b: &[u8]| decode_event(b, &schema, &index).map(|e| e.1)))
        }
    };
    if cfg.with_id {
        columns.insert(0, "event_id".into());
    }
    let consumer: BaseConsumer = client_config(brokers)
        .set("group.id", "spillway-consume")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "false")
        // An idle fetch returns within this (it would add to measured latency).
        .set("fetch.wait.max.ms", "100")
        // librdkafka stops fetching a partition whose local queue holds this many
        // messages and backs off before it looks again; at the default (100k) a fast
        // reader spent most of its time waiting (150k messages/s; 590k/s with 1M).
        .set("queued.min.messages", "1000000")
        .create()
        .map_err(kerr(brokers, "creating a consumer"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..parts {
        tpl.add_partition_offset(&cfg.topic, p, Offset::Beginning)
            .map_err(kerr(brokers, "assigning partitions"))?;
    }
    consumer.assign(&tpl).map_err(kerr(brokers, &format!("assigning {}", cfg.topic)))?;

    let mut sink = Sink::create(cfg.output.as_deref(), &columns)?;
    let mut seen = HashSet::new();
    let mut buffered: Vec<(String, Vec<Value>)> = Vec::new();
    let (mut rows, mut dups) = (0u64, 0u64);
    let start = Instant::now();
    let mut last_progress = start;
    let mut timed_out = false;
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .expect("valid histogram bounds");
    let mut unstamped = 0u64;
    let mut log = match &cfg.latency_log {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| Error::Config(format!("cannot create {}: {e}", p.display())))?,
        )),
        None => None,
    };
    if let Some(l) = &mut log {
        writeln!(l, "consumed_unix_ms,latency_ms,partition").map_err(log_err(cfg))?;
    }
    while cfg.count.is_none_or(|n| rows < n) {
        let left = cfg.timeout.saturating_sub(start.elapsed());
        if left.is_zero() {
            timed_out = cfg.count.is_some();
            break;
        }
        let Some(m) = consumer.poll(left.min(Duration::from_millis(100))) else { continue };
        // The error's context is formatted only on an error, not per message.
        let m = m.map_err(|e| kerr(brokers, &format!("reading {}", cfg.topic))(e))?;
        if cfg.latency {
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            match m.timestamp().to_millis() {
                Some(ts) => {
                    let us = (now_us - ts * 1000).max(1);
                    hist.saturating_record(us as u64);
                    if let Some(l) = &mut log {
                        writeln!(
                            l,
                            "{:.3},{:.3},{}",
                            now_us as f64 / 1e3,
                            us as f64 / 1e3,
                            m.partition()
                        )
                        .map_err(log_err(cfg))?;
                    }
                }
                None => unstamped += 1,
            }
        }
        let Some(body) = m.payload() else { continue };
        // The id header (events, late and dead-letter messages), else the key (results).
        let id = match (super::id_header(&m), m.key()) {
            (Some(h), _) => h.to_string(),
            (None, Some(k)) => String::from_utf8_lossy(k).into_owned(),
            (None, None) => {
                let mut id = String::new();
                super::event_id(&m, &mut id);
                id
            }
        };
        let mut row = decode(body).map_err(|e| {
            Error::Kafka(format!(
                "{} partition {} offset {}: {e}",
                cfg.topic,
                m.partition(),
                m.offset()
            ))
        })?;
        if !seen.insert(id.clone()) {
            dups += 1;
        }
        if cfg.with_id {
            row.insert(0, Value::Str(id.clone().into()));
        }
        if cfg.sort {
            buffered.push((id, row));
        } else {
            sink.write_row(&row)?;
        }
        rows += 1;
        if last_progress.elapsed() >= Duration::from_millis(100) {
            last_progress = Instant::now();
            progress(rows);
        }
    }
    if cfg.sort {
        buffered.sort_by(|a, b| match (a.0.parse::<u64>(), b.0.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            _ => a.0.cmp(&b.0),
        });
        for (_, row) in &buffered {
            sink.write_row(row)?;
        }
    }
    sink.sync()?;
    if let Some(mut l) = log {
        l.flush().map_err(log_err(cfg))?;
    }
    progress(rows);
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1e3;
    let latency = cfg.latency.then(|| Latency {
        count: hist.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: hist.max() as f64 / 1e3,
        unstamped,
    });
    Ok(ConsumeSummary {
        rows,
        duplicate_ids: dups,
        timed_out,
        seconds: start.elapsed().as_secs_f64(),
        latency,
    })
}

fn log_err(cfg: &ConsumeConfig) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| {
        let p = cfg.latency_log.as_deref().unwrap_or(std::path::Path::new("?"));
        Error::Config(format!("cannot write {}: {e}", p.display()))
    }
}
