//! Metrics of a running job or Kafka worker, in the Prometheus / OpenMetrics text format
//! (encoded by the `prometheus-client` crate), served over HTTP at `--metrics-addr` by a
//! small `tiny_http` server on its own thread ([`serve`]).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `spillway_events_in_total` | counter | | input events taken (a worker: including replayed ones) |
//! | `spillway_rows_out_total` | counter | | result rows emitted |
//! | `spillway_late_events_total` | counter | | events later than the allowed lateness (to the side output / `OUT.late`) |
//! | `spillway_malformed_total` | counter | | malformed input rows or messages (to the dead-letter file / topic) |
//! | `spillway_checkpoint_seconds` | histogram | | duration of each checkpoint |
//! | `spillway_commit_seconds` | histogram | | duration of each Kafka transaction commit |
//! | `spillway_upload_bytes_total` | counter | | bytes uploaded to `--checkpoint-store` |
//! | `spillway_consumer_lag` | gauge | `topic`, `partition` | messages behind the partition's high watermark |
//! | `spillway_state_keys` | gauge | `store` | live keys of a state store (when it counts them) |
//! | `spillway_state_bytes` | gauge | `store` | bytes in a state store's files |
//! | `spillway_tier_hits_total` / `spillway_tier_misses_total` | counter | `store`, `level` | tiered store lookups per level (L1, L2, L3) |
//!
//! Counters are fed from the drivers' own running totals ([`Metrics::set_totals`]) at
//! their progress ticks (about every 100 ms) and after each checkpoint, so the event loop
//! pays nothing per event. The `store` label is `job` for a file job and the task's
//! directory name (`TOPIC-PARTITION`) for a worker's task.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use spillway_store::StoreStats;

use crate::error::{Error, Result};

type Labels = Vec<(&'static str, String)>;

/// The metrics of one process. See the module docs.
pub struct Metrics {
    registry: Registry,
    events_in: Counter,
    rows_out: Counter,
    late: Counter,
    malformed: Counter,
    upload_bytes: Counter,
    checkpoint_seconds: Histogram,
    commit_seconds: Histogram,
    lag: Family<Labels, Gauge>,
    state_keys: Family<Labels, Gauge>,
    state_bytes: Family<Labels, Gauge>,
    tier_hits: Family<Labels, Counter>,
    tier_misses: Family<Labels, Counter>,
    /// Serializes updates of running totals (several tasks feed one process's metrics).
    update: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Running totals a driver reports ([`Metrics::set_totals`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    /// Input events taken.
    pub events_in: u64,
    /// Result rows emitted.
    pub rows_out: u64,
    /// Events later than the allowed lateness.
    pub late: u64,
    /// Malformed input rows or messages.
    pub malformed: u64,
    /// Bytes uploaded to the checkpoint store.
    pub upload_bytes: u64,
}

/// Raises `c` to `total` (a counter only goes up; a smaller total changes nothing).
fn raise(c: &Counter, total: u64) {
    let now = c.get();
    if total > now {
        c.inc_by(total - now);
    }
}

fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Every metric of the module docs, registered and at zero.
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let m = Metrics {
            events_in: Counter::default(),
            rows_out: Counter::default(),
            late: Counter::default(),
            malformed: Counter::default(),
            upload_bytes: Counter::default(),
            // 1 ms to about 65 s.
            checkpoint_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            commit_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            lag: Family::default(),
            state_keys: Family::default(),
            state_bytes: Family::default(),
            tier_hits: Family::default(),
            tier_misses: Family::default(),
            update: Mutex::new(()),
            registry: Registry::default(),
        };
        registry.register("spillway_events_in", "Input events taken", m.events_in.clone());
        registry.register("spillway_rows_out", "Result rows emitted", m.rows_out.clone());
        registry.register(
            "spillway_late_events",
            "Events later than the allowed lateness",
            m.late.clone(),
        );
        registry.register(
            "spillway_malformed",
            "Malformed input rows or messages",
            m.malformed.clone(),
        );
        registry.register(
            "spillway_upload_bytes",
            "Bytes uploaded to the checkpoint store",
            m.upload_bytes.clone(),
        );
        registry.register(
            "spillway_checkpoint_seconds",
            "Duration of each checkpoint",
            m.checkpoint_seconds.clone(),
        );
        registry.register(
            "spillway_commit_seconds",
            "Duration of each Kafka transaction commit",
            m.commit_seconds.clone(),
        );
        registry.register(
            "spillway_consumer_lag",
            "Messages behind the partition's high watermark",
            m.lag.clone(),
        );
        registry.register(
            "spillway_state_keys",
            "Live keys of a state store",
            m.state_keys.clone(),
        );
        registry.register(
            "spillway_state_bytes",
            "Bytes in a state store's files",
            m.state_bytes.clone(),
        );
        registry.register(
            "spillway_tier_hits",
            "Tiered store lookups served per level",
            m.tier_hits.clone(),
        );
        registry.register(
            "spillway_tier_misses",
            "Tiered store lookups missed per level",
            m.tier_misses.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    /// Raises the counters to a driver's running totals.
    pub fn set_totals(&self, t: &Totals) {
        let _g = self.update.lock().unwrap_or_else(|e| e.into_inner());
        raise(&self.events_in, t.events_in);
        raise(&self.rows_out, t.rows_out);
        raise(&self.late, t.late);
        raise(&self.malformed, t.malformed);
        raise(&self.upload_bytes, t.upload_bytes);
    }

    /// Records one checkpoint's duration.
    pub fn observe_checkpoint(&self, seconds: f64) {
        self.checkpoint_seconds.observe(seconds);
    }

    /// Records one transaction commit's duration.
    pub fn observe_commit(&self, seconds: f64) {
        self.commit_seconds.observe(seconds);
    }

    /// Sets a partition's consumer lag.
    pub fn set_lag(&self, topic: &str, partition: i32, lag: i64) {
        let labels = vec![("topic", topic.to_string()), ("partition", partition.to_string())];
        self.lag.get_or_create(&labels).set(lag.max(0));
    }

    /// Forgets the lag of partitions this process no longer reads (after a rebalance).
    pub fn clear_lag(&self) {
        self.lag.clear();
    }

    /// Sets the state figures of the store labelled `store` from its statistics.
    pub fn set_store(&self, store: &str, s: &StoreStats) {
        let labels = vec![("store", store.to_string())];
        if let Some(k) = s.live_keys {
            self.state_keys.get_or_create(&labels).set(gauge(k));
        }
        self.state_bytes.get_or_create(&labels).set(gauge(s.bytes_on_disk));
        if let Some(t) = s.tiers() {
            let _g = self.update.lock().unwrap_or_else(|e| e.into_inner());
            for (level, hits, misses) in [
                ("L1", t.l1_hits, t.l1_misses),
                ("L2", t.l2_hits, t.l2_misses),
                ("L3", t.l3_hits, t.l3_misses),
            ] {
                let l = vec![("store", store.to_string()), ("level", level.to_string())];
                raise(&self.tier_hits.get_or_create(&l), hits);
                raise(&self.tier_misses.get_or_create(&l), misses);
            }
        }
    }

    /// The exposition text (OpenMetrics, ending in `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// The HTTP server of [`serve`]; dropping it stops the server.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// The address it listens on (with the port the OS chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `metrics` at `http://ADDR/metrics` (every other path is a 404) from a thread
/// of its own. `addr` is `HOST:PORT`; one that does not parse or resolve, or that is
/// already in use, is an error naming it, before anything else starts.
pub fn serve(addr: &str, metrics: Arc<Metrics>) -> Result<MetricsServer> {
    let bad = |why: String| Error::Config(format!("--metrics-addr {addr}: {why}"));
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| bad(format!("not a HOST:PORT address ({e})")))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))?;
    let server =
        tiny_http::Server::http(sock).map_err(|e| bad(format!("cannot listen there: {e}")))?;
    let bound = server.server_addr().to_ip().unwrap_or(sock);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("spillway-metrics".into())
        .spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                let req = match server.recv_timeout(Duration::from_millis(200)) {
                    Ok(Some(r)) => r,
                    Ok(None) => continue,
                    Err(_) => break,
                };
                let path = req.url().split('?').next().unwrap_or("");
                let resp = if path == "/metrics" {
                    let ct = tiny_http::Header::from_bytes(
                        &b"Content-Type"[..],
                        &b"application/openmetrics-text; version=1.0.0; charset=utf-8"[..],
                    )
                    .expect("a valid header");
                    tiny_http::Response::from_string(metrics.encode()).with_header(ct)
                } else {
                    tiny_http::Response::from_string("spillway serves /metrics\n")
                        .with_status_code(404)
                };
                // A scraper that hung up is its own problem.
                let _ = req.respond(resp);
            }
        })
        .map_err(|e| bad(format!("cannot start the server thread: {e}")))?;
    Ok(MetricsServer { addr: bound, stop, thread: Some(thread) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_only_raise_counters_and_encode_as_openmetrics() {
        let m = Metrics::new();
        m.set_totals(&Totals { events_in: 10, rows_out: 7, ..Totals::default() });
        m.set_totals(&Totals { events_in: 4, rows_out: 9, ..Totals::default() });
        m.set_lag("in", 2, 5);
        m.observe_checkpoint(0.01);
        let text = m.encode();
        assert!(text.contains("spillway_events_in_total 10\n"), "{text}");
        assert!(text.contains("spillway_rows_out_total 9\n"), "{text}");
        assert!(text.contains("spillway_consumer_lag{topic=\"in\",partition=\"2\"} 5\n"), "{text}");
        assert!(text.contains("spillway_checkpoint_seconds_count 1\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn bad_and_busy_addresses_are_errors_naming_them() {
        let m = Metrics::new();
        let e = serve("nonsense", m.clone()).err().unwrap().to_string();
        assert!(e.contains("--metrics-addr nonsense: not a HOST:PORT address"), "{e}");
        let s = serve("127.0.0.1:0", m.clone()).unwrap();
        let busy = s.addr().to_string();
        let e = serve(&busy, m).err().unwrap().to_string();
        assert!(e.contains(&format!("--metrics-addr {busy}: cannot listen there")), "{e}");
    }
}
