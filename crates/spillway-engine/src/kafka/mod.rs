//! Kafka: event and result topics, the `spillway kafka produce|consume` tools and the
//! workers of `spillway run --input kafka://...` (feature `kafka`, librdkafka from
//! Debian through `rdkafka`'s dynamic linking).
//!
//! This module owns the topic conventions (names, message layouts, the schema topic) and
//! the client settings; [`produce`], [`consume`] and [`worker`] are the three programs,
//! and [`status`] reads a group's members, offsets and lag without joining it.
//! The design follows Feedzai's Railgun (its streaming-windows paper): a processor unit owns a set of
//! (topic, partition) task processors, each with its own reservoir, plan and state; a
//! failed unit's partitions are reassigned and rewound to the last checkpoint.
//!
//! # FORMAT
//! - **Event message** (topic `T`): value = one JSON object, the row as `spillway run`'s
//!   JSON Lines input takes it (floats parsed exactly); key = the routing column's value
//!   as text (absent without `--key`); header `spillway.id` = the event id, as decimal
//!   ASCII: the row's 0-based index in the produced file, plus the topic's highest
//!   earlier id + 1 for `kafka produce --append` (ids are unique in a topic: results are
//!   keyed and joined by them); header `spillway.row` = the row's 0-based index in the
//!   produced file (what `kafka produce --resume` continues from). An event without the
//!   `spillway.id` header gets the id `T/PARTITION/OFFSET`.
//! - **Schema topic** (`T.schema`, one partition, compacted): key `schema`, value JSON
//!   `{"format":"spillway.events.v1","schema":{...},"key":"card"}` (the [`Schema`]:
//!   fields, time column, unit; the key column, if any) or, for a result topic, `{"format":"spillway.results.v1","columns":
//!   [["name","int"],...]}`. The newest message wins. Producers and workers write it;
//!   workers and `consume` read it, so no topic's types are ever guessed.
//! - **Result message** (topic `OUT`): key = the event id (as above), in the partition
//!   of the task that computed it (modulo `OUT`'s partition count), so one input
//!   partition's results, and each of its keys', are in one partition in order (for a
//!   routed query, the reply task's partition); value = byte `0x01`
//!   (layout version) followed by the output row as postcard (`Vec<Value>`: exact floats,
//!   NULLs, non-finite values). `spillway kafka consume` turns them into CSV / JSON
//!   Lines exactly as `spillway run` writes its output.
//! - **Late events** (topic `OUT.late`): events later than the allowed lateness, as
//!   event messages.
//! - **A task's checkpoint tag** (stored in the task session's checkpoint record): the
//!   input offset the state covers, 8 bytes little-endian, then, only with `--ties
//!   peers` and rows held, the held events oldest first as postcard
//!   `Vec<(String, Option<i64>)>` (event id, message timestamp). Fewer than 8 bytes,
//!   or bytes after them that do not decode, are refused when the task opens.
//!
//! # Unreachable brokers
//! librdkafka retries an unreachable bootstrap server silently until a call's timeout
//! ([`CALL_TIMEOUT`]); so `produce`, `consume` and workers first [`check_reachable`]:
//! a TCP connection to each bootstrap address, failing within [`CONNECT_TIMEOUT`] (a
//! refused connection at once) with a message naming the addresses.

pub mod consume;
pub mod produce;
pub mod remote;
pub mod route;
pub mod status;
pub mod worker;

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Error, Result};
use crate::value::{DataType, Schema, Value};

/// Header carrying an event's id.
pub const ID_HEADER: &str = "spillway.id";
/// Header carrying an event's 0-based row index in the file `kafka produce` read.
pub const ROW_HEADER: &str = "spillway.row";
/// First byte of a result message's value (its layout version).
pub const RESULT_VERSION: u8 = 1;
/// How long metadata and admin calls may take before they fail with a message naming
/// the broker.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`check_reachable`] waits for a bootstrap server to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A `kafka://HOST:PORT[,HOST:PORT...]/TOPIC` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaUrl {
    /// Bootstrap servers, comma-separated.
    pub brokers: String,
    /// Topic name.
    pub topic: String,
}

impl KafkaUrl {
    /// Parses `kafka://BROKERS/TOPIC`; `None` when `s` does not start with `kafka://`.
    pub fn parse(s: &str) -> Option<Result<KafkaUrl>> {
        let rest = s.strip_prefix("kafka://")?;
        let bad = |why: &str| {
            Error::Config(format!(
                "{s:?} is not a Kafka address: {why} (expected kafka://HOST:PORT/TOPIC)"
            ))
        };
        Some((|| {
            let (brokers, topic) = rest.split_once('/').ok_or_else(|| bad("no topic"))?;
            if brokers.is_empty() {
                return Err(bad("no broker"));
            }
            check_topic_name(topic).map_err(|m| bad(&m))?;
            Ok(KafkaUrl { brokers: brokers.to_string(), topic: topic.to_string() })
        })())
    }
}

/// Kafka's own topic-name rule: 1-249 characters of `[a-zA-Z0-9._-]`.
pub fn check_topic_name(t: &str) -> std::result::Result<(), String> {
    if t.is_empty() || t.len() > 249 {
        return Err(format!("topic name {t:?} must have 1 to 249 characters"));
    }
    if let Some(c) =
        t.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {t:?} has {c:?}; Kafka allows letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// The schema topic of `topic`.
pub fn schema_topic(topic: &str) -> String {
    format!("{topic}.schema")
}

/// The late-event topic of the output topic `topic`.
pub fn late_topic(topic: &str) -> String {
    format!("{topic}.late")
}

/// Client settings shared by every client: the bootstrap servers, loopback-friendly
/// timeouts, and librdkafka's own logs kept off stderr unless they are errors.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("socket.timeout.ms", "10000")
        .set("log_level", "3")
        .set("broker.address.family", "v4");
    // Extra librdkafka properties, `k=v,k=v` (tuning and debugging; they apply to every
    // client and override the settings above, not the per-role ones set after this).
    if let Ok(extra) = std::env::var("SPILLWAY_KAFKA_CONFIG") {
        for kv in extra.split(',').filter(|s| !s.is_empty()) {
            // An entry without `=` is passed with an empty value, so librdkafka names
            // it in the error it gives when the client is created; nothing is dropped.
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            c.set(k.trim(), v.trim());
        }
    }
    c
}

/// Fails unless some bootstrap server in `brokers` (`HOST:PORT,...`, optionally
/// `PROTOCOL://HOST:PORT`; port 9092 when left out) accepts a TCP connection within
/// [`CONNECT_TIMEOUT`]. The addresses are tried in parallel and the first that answers
/// ends the check, so it takes one round trip when a broker runs and at most
/// [`CONNECT_TIMEOUT`] (plus name resolution) when none does; a refused connection fails
/// at once. The error names every address and why it failed.
pub fn check_reachable(brokers: &str) -> Result<()> {
    let addrs: Vec<String> =
        brokers.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect();
    if addrs.is_empty() {
        return Err(Error::Config(format!(
            "no Kafka broker address in {brokers:?} (expected HOST:PORT[,HOST:PORT...])"
        )));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, a) in addrs.iter().enumerate() {
        let (tx, a) = (tx.clone(), a.clone());
        // Detached: a name lookup that hangs past the deadline must not hold the caller.
        std::thread::spawn(move || {
            let _ = tx.send((i, probe(&a)));
        });
    }
    drop(tx);
    // The probes' own connect timeout, plus slack for resolving names.
    let deadline = Instant::now() + CONNECT_TIMEOUT + Duration::from_millis(500);
    let mut why: Vec<Option<String>> = vec![None; addrs.len()];
    for _ in 0..addrs.len() {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((_, Ok(()))) => return Ok(()),
            Ok((i, Err(e))) => why[i] = Some(e),
            Err(_) => break,
        }
    }
    let failed: Vec<String> = addrs
        .iter()
        .zip(why)
        .map(|(a, w)| {
            let w =
                w.unwrap_or_else(|| format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()));
            format!("{a} ({w})")
        })
        .collect();
    Err(Error::Kafka(format!(
        "no Kafka broker answers at {}; is one running? (scripts/kafka.sh start DIR)",
        failed.join(", ")
    )))
}

/// `HOST:PORT` of a bootstrap address: without a `PROTOCOL://` prefix, port 9092 when
/// there is none (as librdkafka reads it); IPv6 hosts in brackets.
fn host_port(addr: &str) -> (String, u16) {
    let a = addr.split_once("://").map_or(addr, |(_, rest)| rest);
    let (host, port) = match a.rsplit_once(':') {
        // `[::1]:9092`, `h:9092`; a bare IPv6 address without brackets has no port.
        Some((h, p)) if !h.contains(':') || h.ends_with(']') => (h, p.parse().ok()),
        _ => (a, None),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (host.to_string(), port.unwrap_or(9092))
}

/// Connects to one bootstrap address (every address its name resolves to, in turn).
fn probe(addr: &str) -> std::result::Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let (host, port) = host_port(addr);
    let resolved: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    let mut last = format!("{host} resolves to no address");
    for sa in resolved {
        match TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => {
                last = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                        format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())
                    }
                    _ => e.to_string(),
                };
            }
        }
    }
    Err(last)
}

/// Wraps a client error with the broker address and what was being done.
pub(crate) fn kerr<'a>(
    brokers: &'a str,
    what: &str,
) -> impl Fn(rdkafka::error::KafkaError) -> Error + 'a {
    let what = what.to_string();
    move |e| Error::Kafka(format!("{what} (brokers {brokers}): {e}"))
}

/// What a schema topic holds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "format")]
pub enum TopicSchema {
    /// An event topic: the rows' schema.
    #[serde(rename = "spillway.events.v1")]
    Events {
        /// The schema.
        schema: Schema,
        /// The column whose value keys the messages (`None`: unkeyed or unknown).
        #[serde(default)]
        key: Option<String>,
    },
    /// A result topic: output column names and types.
    #[serde(rename = "spillway.results.v1")]
    Results {
        /// Column names and types.
        columns: Vec<(String, DataType)>,
    },
}

/// Creates `topic` with `partitions` partitions (replication 1) unless it exists; an
/// existing topic must have `partitions` partitions when that is given. Returns the
/// topic's partition count.
pub fn ensure_topic(
    brokers: &str,
    topic: &str,
    partitions: Option<i32>,
    compact: bool,
) -> Result<i32> {
    if let Some(n) = partition_count(brokers, topic)? {
        if let Some(want) = partitions {
            if want != n {
                return Err(Error::Kafka(format!(
                    "topic {topic} exists with {n} partitions, not the {want} asked for (brokers {brokers}); \
                     delete it or ask for {n}"
                )));
            }
        }
        return Ok(n);
    }
    let n = partitions.unwrap_or(1);
    if n < 1 {
        return Err(Error::Config(format!("a topic needs at least 1 partition, not {n}")));
    }
    let admin: AdminClient<DefaultClientContext> =
        client_config(brokers).create().map_err(kerr(brokers, "creating an admin client"))?;
    let mut t = NewTopic::new(topic, n, TopicReplication::Fixed(1));
    if compact {
        t = t.set("cleanup.policy", "compact");
    }
    let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let res = futures_executor::block_on(admin.create_topics([&t], &opts))
        .map_err(kerr(brokers, &format!("creating topic {topic}")))?;
    for r in res {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => {
                return Err(Error::Kafka(format!("creating topic {t} (brokers {brokers}): {code}")))
            }
        }
    }
    // Wait until the topic's partitions have leaders (bounded).
    let start = Instant::now();
    loop {
        if partition_count(brokers, topic)? == Some(n) {
            return Ok(n);
        }
        if start.elapsed() > CALL_TIMEOUT {
            return Err(Error::Kafka(format!(
                "topic {topic} was created but has no leaders after {}s (brokers {brokers})",
                CALL_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The partition count of `topic` (`None`: no such topic). Errors name the broker.
pub fn partition_count(brokers: &str, topic: &str) -> Result<Option<i32>> {
    let c: BaseConsumer =
        client_config(brokers).create().map_err(kerr(brokers, "creating a client"))?;
    let md = c
        .fetch_metadata(Some(topic), CALL_TIMEOUT)
        .map_err(kerr(brokers, "reading metadata; is a broker running there?"))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else { return Ok(None) };
    match t.error() {
        None => {
            let ps = t.partitions();
            if ps.iter().any(|p| p.leader() < 0 || p.error().is_some()) {
                return Ok(None);
            }
            Ok(Some(ps.len() as i32))
        }
        Some(e) if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition => {
            Ok(None)
        }
        Some(e) => Err(Error::Kafka(format!(
            "metadata of topic {topic} (brokers {brokers}): {}",
            RDKafkaErrorCode::from(e)
        ))),
    }
}

/// Writes `schema` to `topic`'s schema topic (creating it), waiting for the broker's
/// acknowledgement.
pub fn write_schema(brokers: &str, topic: &str, schema: &TopicSchema) -> Result<()> {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let st = schema_topic(topic);
    ensure_topic(brokers, &st, Some(1), true)?;
    if read_schema(brokers, topic)?.as_ref() == Some(schema) {
        return Ok(());
    }
    let p: BaseProducer = client_config(brokers)
        .set("acks", "all")
        .create()
        .map_err(kerr(brokers, "creating a producer"))?;
    let body =
        serde_json::to_vec(schema).map_err(|e| Error::Kafka(format!("encoding a schema: {e}")))?;
    p.send(BaseRecord::to(&st).key("schema").payload(&body))
        .map_err(|(e, _)| kerr(brokers, &format!("writing the schema to {st}"))(e))?;
    p.flush(CALL_TIMEOUT).map_err(kerr(brokers, &format!("writing the schema to {st}")))
}

/// Reads the newest schema of `topic` (`None`: it has none).
pub fn read_schema(brokers: &str, topic: &str) -> Result<Option<TopicSchema>> {
    let st = schema_topic(topic);
    if partition_count(brokers, &st)?.is_none() {
        return Ok(None);
    }
    let c: BaseConsumer = client_config(brokers)
        .set("enable.auto.commit", "false")
        .set("group.id", "spillway-schema-reader")
        .create()
        .map_err(kerr(brokers, "creating a consumer"))?;
    let (lo, hi) = c
        .fetch_watermarks(&st, 0, CALL_TIMEOUT)
        .map_err(kerr(brokers, &format!("reading the offsets of {st}")))?;
    if hi <= lo {
        return Ok(None);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&st, 0, Offset::Offset(lo))
        .map_err(kerr(brokers, &format!("assigning {st}")))?;
    c.assign(&tpl).map_err(kerr(brokers, &format!("assigning {st}")))?;
    let start = Instant::now();
    let mut newest = None;
    while start.elapsed() < CALL_TIMEOUT {
        let Some(m) = c.poll(Duration::from_millis(100)) else { continue };
        let m = m.map_err(kerr(brokers, &format!("reading {st}")))?;
        if let Some(body) = m.payload() {
            let s: TopicSchema = serde_json::from_slice(body).map_err(|e| {
                Error::Kafka(format!("{st} offset {}: not a Spillway schema: {e}", m.offset()))
            })?;
            newest = Some(s);
        }
        if m.offset() + 1 >= hi {
            return Ok(newest);
        }
    }
    Err(Error::Kafka(format!(
        "reading {st} timed out after {}s (brokers {brokers})",
        CALL_TIMEOUT.as_secs()
    )))
}

/// The `spillway.id` header of a message, if it has one.
pub fn id_header<M: Message>(m: &M) -> Option<&str> {
    let h = m.headers()?;
    (0..h.count())
        .map(|i| h.get(i))
        .find(|hdr| hdr.key == ID_HEADER)
        .and_then(|hdr| hdr.value.and_then(|v| std::str::from_utf8(v).ok()))
}

/// The event id of a message into `out` (cleared first): its `spillway.id` header, else
/// `TOPIC/PARTITION/OFFSET`. Workers reuse one buffer for every message.
pub fn event_id<M: Message>(m: &M, out: &mut String) {
    use std::fmt::Write;
    out.clear();
    match id_header(m) {
        Some(id) => out.push_str(id),
        None => {
            let _ = write!(out, "{}/{}/{}", m.topic(), m.partition(), m.offset());
        }
    }
}

/// Writes the message key for value `v` of a key column: its text, empty for NULL (all
/// NULL keys share a partition). The producer and the router use the same text, so a key
/// lands in the same partition number of every topic with as many partitions.
pub fn write_key(out: &mut String, v: &Value) {
    use std::fmt::Write;
    if !matches!(v, Value::Null) {
        // Writes into a String cannot fail.
        let _ = write!(out, "{v}");
    }
}

/// Encodes a result row (see FORMAT) into `out`, replacing its contents and reusing its
/// allocation.
pub fn encode_result(values: &[Value], out: &mut Vec<u8>) {
    let mut buf = std::mem::take(out);
    buf.clear();
    buf.push(RESULT_VERSION);
    // Serializing plain values into a Vec cannot fail.
    *out = postcard::to_extend(values, buf).expect("postcard encodes values");
}

/// Decodes a result row (see FORMAT).
pub fn decode_result(bytes: &[u8]) -> std::result::Result<Vec<Value>, String> {
    match bytes.split_first() {
        Some((&RESULT_VERSION, body)) => {
            postcard::from_bytes(body).map_err(|e| format!("not a result row: {e}"))
        }
        Some((v, _)) => Err(format!(
            "result layout version {v} is not supported (this build reads {RESULT_VERSION})"
        )),
        None => Err("empty message".into()),
    }
}

/// Decodes an event message's JSON object into a row of `schema`, with its event time.
pub(crate) fn decode_event(
    bytes: &[u8],
    schema: &Schema,
    index: &std::collections::HashMap<String, usize>,
) -> std::result::Result<(i64, Vec<Value>), String> {
    let row = crate::source::jsonl::parse_row(bytes, schema, index).map_err(|p| p.to_string())?;
    match row[schema.time_index()] {
        Value::Int(t) => Ok((t, row)),
        _ => {
            Err(format!("the time column `{}` is null", schema.fields()[schema.time_index()].name))
        }
    }
}

/// Column index by name (the JSON row parser's lookup table).
pub(crate) fn column_index(schema: &Schema) -> std::collections::HashMap<String, usize> {
    schema.fields().iter().enumerate().map(|(i, f)| (f.name.clone(), i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn urls_parse_and_bad_ones_say_why() {
        let u = KafkaUrl::parse("kafka://127.0.0.1:9092,h:1/pay.ments_1").unwrap().unwrap();
        assert_eq!(u.brokers, "127.0.0.1:9092,h:1");
        assert_eq!(u.topic, "pay.ments_1");
        assert!(KafkaUrl::parse("payments.csv").is_none());
        for bad in ["kafka://h:1", "kafka:///t", "kafka://h:1/", "kafka://h:1/a b"] {
            let e = KafkaUrl::parse(bad).unwrap().unwrap_err().to_string();
            assert!(e.contains("not a Kafka address"), "{bad}: {e}");
        }
    }

    #[test]
    fn results_round_trip_exactly() {
        let row = vec![
            Value::Int(-3),
            Value::Float(0.1 + 0.2),
            Value::Float(f64::NAN),
            Value::Null,
            Value::Str("a,\"b\"".into()),
            Value::Bool(true),
        ];
        let mut buf = Vec::new();
        encode_result(&row, &mut buf);
        let back = decode_result(&buf).unwrap();
        assert_eq!(back.len(), row.len());
        assert_eq!(back[1], Value::Float(0.1 + 0.2));
        assert!(matches!(back[2], Value::Float(f) if f.is_nan()));
        assert_eq!(back[4], row[4]);
        assert!(decode_result(&[9, 1]).unwrap_err().contains("version 9"));
        assert!(decode_result(&[]).is_err());
    }

    #[test]
    fn bootstrap_addresses_split_like_librdkafka() {
        assert_eq!(host_port("127.0.0.1:9093"), ("127.0.0.1".into(), 9093));
        assert_eq!(host_port("PLAINTEXT://broker:19092"), ("broker".into(), 19092));
        assert_eq!(host_port("broker"), ("broker".into(), 9092));
        assert_eq!(host_port("[::1]:9094"), ("::1".into(), 9094));
        assert_eq!(host_port("::1"), ("::1".into(), 9092));
    }

    /// A port nobody listens on: bound, then released.
    fn refused_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    #[test]
    fn an_unreachable_broker_fails_at_once_naming_the_address() {
        let port = refused_port();
        let start = Instant::now();
        let e = check_reachable(&format!("127.0.0.1:{port}")).unwrap_err().to_string();
        assert!(start.elapsed() < CONNECT_TIMEOUT, "a refused connection waited for the timeout");
        assert_eq!(
            e,
            format!(
                "kafka: no Kafka broker answers at 127.0.0.1:{port} (connection refused); \
                 is one running? (scripts/kafka.sh start DIR)"
            )
        );
        let e = check_reachable(" , ").unwrap_err().to_string();
        assert!(e.contains("no Kafka broker address"), "{e}");
    }

    #[test]
    fn one_listening_bootstrap_server_is_enough() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let up = l.local_addr().unwrap().port();
        let down = refused_port();
        check_reachable(&format!("127.0.0.1:{up}")).unwrap();
        check_reachable(&format!("127.0.0.1:{down},PLAINTEXT://127.0.0.1:{up}")).unwrap();
        let e =
            check_reachable(&format!("127.0.0.1:{down},127.0.0.1:{down}")).unwrap_err().to_string();
        assert_eq!(e.matches("connection refused").count(), 2, "{e}");
    }

    #[test]
    fn schema_messages_are_tagged_json() {
        let s = TopicSchema::Results { columns: vec![("n".into(), DataType::Int)] };
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"format\":\"spillway.results.v1\""), "{j}");
        assert_eq!(serde_json::from_str::<TopicSchema>(&j).unwrap(), s);
    }

    /// An event schema whose time column index is past its fields (JSON another program
    /// wrote to the schema topic): a worker decoding its first event indexed the row
    /// past its end.
    #[test]
    fn a_schema_message_without_its_time_column_is_an_error() {
        let bodies: [&[u8]; 3] = [
            br#"{"format":"spillway.events.v1","schema":{"fields":[],"time_index":0,"time_unit":"Ms"}}"#,
            br#"{"format":"spillway.events.v1","schema":{"fields":[{"name":"ts","ty":"Int"}],"time_index":1,"time_unit":"Ms"}}"#,
            br#"{"format":"spillway.events.v1","schema":{"fields":[{"name":"ts","ty":"Str"}],"time_index":0,"time_unit":"Ms"}}"#,
        ];
        for body in bodies {
            let r = serde_json::from_slice::<TopicSchema>(body);
            if let Ok(TopicSchema::Events { schema, .. }) = &r {
                // What a worker does with the topic's first event.
                let _ = decode_event(b"{}", schema, &column_index(schema));
            }
            let e = r.unwrap_err().to_string();
            assert!(e.contains("time column"), "{e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Result messages that are any bytes, or valid ones with a byte changed, cut or a
        /// length set huge, decode to a row or an error, never a panic.
        #[test]
        fn hostile_result_messages_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            row in prop::collection::vec(crate::hostile::any_value(6), 0..6),
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = decode_result(&garbage);
            let mut with_version = vec![RESULT_VERSION];
            with_version.extend_from_slice(&garbage);
            let _ = decode_result(&with_version);
            let mut msg = Vec::new();
            encode_result(&row, &mut msg);
            prop_assert_eq!(decode_result(&msg).map(|r| r.len()), Ok(row.len()));
            let _ = decode_result(&msg[..cut % (msg.len() + 1)]);
            let bad = crate::hostile::flipped(&msg, at, byte);
            let _ = decode_result(&bad);
            // The row's length (the varint after the version byte) set to u64::MAX.
            let mut huge = vec![RESULT_VERSION];
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            huge.extend_from_slice(&msg[2..]);
            prop_assert!(decode_result(&huge).is_err());
        }

        /// Schema messages: a valid one with a byte changed or cut, or any text, decode to
        /// a schema that can decode events, or an error; never a panic.
        #[test]
        fn hostile_schema_messages_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            time_index in 0usize..4,
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = serde_json::from_slice::<TopicSchema>(&garbage);
            let body = format!(
                r#"{{"format":"spillway.events.v1","schema":{{"fields":[{{"name":"ts","ty":"Int"}},{{"name":"x","ty":"Int"}}],"time_index":{time_index},"time_unit":"Ms"}},"key":"x"}}"#
            );
            let bad = crate::hostile::flipped(body.as_bytes(), at, byte);
            for b in [body.as_bytes(), &bad, &body.as_bytes()[..cut % (body.len() + 1)]] {
                if let Ok(TopicSchema::Events { schema, .. }) = serde_json::from_slice(b) {
                    let index = column_index(&schema);
                    let _ = decode_event(br#"{"ts": 1, "x": 2}"#, &schema, &index);
                    let _ = decode_event(b"{}", &schema, &index);
                }
            }
        }
    }
}
