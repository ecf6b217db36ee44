//! Engine benchmarks: Railgun's Q1 (SUM and COUNT per card over a sliding window) on
//! generated payments, run against several state stores in one process so their ratio is
//! evidence (`spillway bench engine`). The RocksDB row is the Flink-style baseline: the
//! same runtime doing a RocksDB read-modify-write (get + put) per event and per expiry.
//! The windowed-aggregation benchmark ([`run_windowed`], `spillway bench windows`) runs
//! `TUMBLE` / `HOP` SUM and COUNT per card the same way, store against store.

use std::time::Instant;

use hdrhistogram::Histogram;
use spillway_store::StoreKind;

use spillway_engine::checkpoint::{Front, Identity, Input, StoreIdentity};
use spillway_engine::driver::{Cadence, Driver, Io, StateConfig, BATCH_EVENTS};
use spillway_engine::error::{Error, Result};
use spillway_engine::operator::over::Outcome;
use spillway_engine::operator::windowed::WindowPlan;
use spillway_engine::operator::{Operator, QueryPlan};
use spillway_engine::plan::Plan;
use spillway_engine::reservoir::Compression;
use spillway_engine::source::{generate_events, PaymentGenerator, PaymentOptions, Source};
use spillway_engine::sql::{parse, parse_query, Query, TvfWindow};
use spillway_engine::value::{Event, Row, Schema, Value};

/// The Q1 query over a window of `window_ms`.
pub fn q1_query(window_ms: i64) -> String {
    format!(
        "SELECT card, ts, SUM(amount) OVER w AS card_sum, COUNT(*) OVER w AS card_count \
         FROM payments \
         WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW)"
    )
}

/// Q1 with one SUM and COUNT per window of `windows_ms`, all in one query: one plan, one
/// event reservoir for every window (the engine's form of shared window state: each
/// event is stored once, however many windows read it).
pub fn q1_query_windows(windows_ms: &[i64]) -> String {
    if let [w] = windows_ms {
        return q1_query(*w);
    }
    let metrics: Vec<String> = (0..windows_ms.len())
        .map(|i| {
            format!("SUM(amount) OVER w{i} AS card_sum_{i}, COUNT(*) OVER w{i} AS card_count_{i}")
        })
        .collect();
    let defs: Vec<String> = windows_ms
        .iter()
        .enumerate()
        .map(|(i, w)| {
            format!("w{i} AS (PARTITION BY card ORDER BY ts RANGE BETWEEN {w} PRECEDING AND CURRENT ROW)")
        })
        .collect();
    format!("SELECT card, ts, {} FROM payments WINDOW {}", metrics.join(", "), defs.join(", "))
}

/// One Q1 run.
#[derive(Clone, Debug)]
pub struct Q1Config {
    /// Generator parameters (events, cards, zipf skew, event-time rate, seed).
    pub payments: PaymentOptions,
    /// Window length in ms.
    pub window_ms: i64,
    /// More windows computed by the same query (empty: Q1 itself).
    pub extra_windows_ms: Vec<i64>,
    /// Allowed lateness in ms (the generator's events are in order, so none is late:
    /// this measures what keeping events for late results costs).
    pub allowed_lateness_ms: i64,
    /// Store memory budget in bytes.
    pub memory_budget: u64,
    /// Expected partition keys (a store sizing hint).
    pub expected_keys: Option<u64>,
    /// Generate all events before timing (in memory) instead of on the fly.
    pub pregenerate: bool,
    /// Events taken and announced to the store at a time ([`spillway_engine::operator::Operator::prefetch`]); 1
    /// processes them one at a time with no announcement. The job uses
    /// [`BATCH_EVENTS`].
    pub batch: usize,
    /// Every `late_every`-th event is made late: its time moves back by half the allowed
    /// lateness, so it arrives out of order but within the lateness and gets its own
    /// exact result (0: the stream stays in order).
    pub late_every: u64,
}

/// Result of one Q1 run on one store.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Q1Result {
    /// Store name.
    pub store: String,
    /// Window length in ms (the first, with several).
    pub window_ms: i64,
    /// Windows computed by the query (1 for Q1).
    #[serde(default = "one")]
    pub windows: usize,
    /// Allowed lateness in ms.
    #[serde(default)]
    pub allowed_lateness_ms: i64,
    /// Events processed.
    pub events: u64,
    /// Events announced to the store at a time (1: none).
    #[serde(default)]
    pub batch: usize,
    /// Largest number of events inside the window at once (over all cards), sampled
    /// every 4096 events.
    pub max_events_in_window: u64,
    /// Wall seconds of the timed loop.
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Per-event latency (process call) percentiles in microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// Reservoir bytes written (compressed).
    pub reservoir_bytes: u64,
    /// Events that arrived out of order within the allowed lateness.
    #[serde(default)]
    pub late_events: u64,
    /// Recent events read to compute those late events' results
    /// ([`spillway_engine::operator::over::Runtime::late_events_examined`]).
    #[serde(default)]
    pub late_examined: u64,
}

fn one() -> usize {
    1
}

/// The benchmark's events: generated before timing (`pregenerate`) or on the fly.
fn event_source(
    gen: PaymentGenerator,
    payments: &PaymentOptions,
    pregenerate: bool,
) -> Result<impl FnMut() -> Result<Option<Event>>> {
    let mut pre: Option<std::vec::IntoIter<Event>> = None;
    let mut live: Option<PaymentGenerator> = None;
    if pregenerate {
        pre = Some(generate_events(payments.clone())?.into_iter());
    } else {
        live = Some(gen);
    }
    Ok(move || -> Result<Option<Event>> {
        match (&mut pre, &mut live) {
            (Some(it), _) => Ok(it.next()),
            (None, Some(g)) => Ok(g.next_event()?),
            (None, None) => Ok(None),
        }
    })
}

/// The benchmarks' side of the driver loop ([`Driver::run`]): events from `next`, rows
/// to `rows` (a digest, a check), `after` called after each event with the operator
/// (a figure sampled as the run goes).
struct BenchIo<'a> {
    next: &'a mut dyn FnMut() -> Result<Option<Event>>,
    rows: &'a mut dyn FnMut(&mut Vec<Row>, Outcome),
    after: &'a mut dyn FnMut(u64, &mut dyn Operator),
}

impl Io for BenchIo<'_> {
    fn next_event(&mut self) -> Result<Option<Event>> {
        (self.next)()
    }

    fn emit(&mut self, rows: &mut Vec<Row>, outcome: Outcome) -> Result<()> {
        (self.rows)(rows, outcome);
        Ok(())
    }

    fn sync(&mut self, _: u64) -> Result<Front> {
        Ok(Front::Pushed { tag: Vec::new() })
    }

    fn after_event(&mut self, events: u64, op: &mut dyn Operator) -> Result<()> {
        (self.after)(events, op);
        Ok(())
    }

    fn finish(&mut self, rows: &mut Vec<Row>) -> Result<()> {
        (self.rows)(rows, Outcome::Emitted);
        Ok(())
    }
}

/// A driver without checkpoints for `plan` over `store` in the temporary `dir` (the
/// benchmarks run through the same driver as the job: [`Driver::run`]).
#[allow(clippy::too_many_arguments)]
fn bench_driver(
    store: StoreKind,
    memory_budget: u64,
    expected_keys: Option<u64>,
    allowed_lateness: i64,
    plan: QueryPlan,
    schema: &Schema,
    query: &str,
    dir: &std::path::Path,
) -> Result<Driver> {
    let tiered = spillway_store::TieredOptions::default();
    let state = StateConfig {
        store,
        tiered: &tiered,
        memory_budget,
        expected_keys,
        allowed_lateness,
        watermark_delay: 0,
        compression: Compression::Lz4,
        reservoir_chunk_events: None,
        reservoir_segment_bytes: None,
        fs: None,
        ties: Default::default(),
    };
    let store = state.open_store(&dir.join("state"), plan.namespace_specs())?;
    let identity = Identity {
        input: Input::Named("benchmark".into()),
        schema: schema.clone(),
        allowed_lateness,
        watermark_delay: 0,
        store: StoreIdentity::of(state.store),
        items: None,
        ties: Default::default(),
    };
    Driver::open(
        &state,
        plan,
        store,
        identity,
        query,
        &dir.join("reservoir"),
        None,
        None,
        Cadence::Never,
        dir,
    )
}

/// Latency percentile in microseconds.
fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

/// Runs Q1 on `store`. `progress` is called every 2^16 events with the count so far.
pub fn run_q1(cfg: &Q1Config, store: StoreKind, progress: &mut dyn FnMut(u64)) -> Result<Q1Result> {
    let gen = PaymentGenerator::new(cfg.payments.clone())?;
    let schema = gen.schema().clone();
    let time_col = schema.time_index();
    let mut windows = vec![cfg.window_ms];
    windows.extend_from_slice(&cfg.extra_windows_ms);
    let query = q1_query_windows(&windows);
    let plan = QueryPlan::Over(Plan::build(&parse_query(&query, &schema)?, &schema)?);
    let dir = tempfile::Builder::new()
        .prefix("spillway-q1-")
        .tempdir()
        .map_err(|e| Error::Config(format!("cannot create a temporary directory: {e}")))?;
    let mut driver = bench_driver(
        store,
        cfg.memory_budget,
        cfg.expected_keys,
        cfg.allowed_lateness_ms,
        plan,
        &schema,
        &query,
        dir.path(),
    )?;
    let mut next = event_source(gen, &cfg.payments, cfg.pregenerate)?;
    // Events are only moved back with a lateness to move them within: otherwise the
    // source is read directly (the wrapper is one more call per event on the hot loop).
    let by = cfg.allowed_lateness_ms / 2;
    let mut delayed;
    let next: &mut dyn FnMut() -> Result<Option<Event>> = if cfg.late_every > 0 && by > 0 {
        delayed = delay_some(&mut next, cfg.late_every, by, time_col);
        &mut delayed
    } else {
        &mut next
    };
    let mut max_in_window = 0u64;
    let mut io = BenchIo {
        next,
        rows: &mut |_, o| debug_assert_eq!(o, Outcome::Emitted),
        after: &mut |n, op| {
            if n.is_multiple_of(4096) {
                // Window occupancy, for the report.
                if let Some(rt) = op.as_over() {
                    max_in_window = max_in_window.max(rt.events_retained());
                }
            }
        },
    };
    let stats = driver.run(&mut io, cfg.batch, &mut |n, _, _| progress(n))?;
    let (n, hist, seconds) = (stats.events, &stats.latency_ns, stats.seconds);
    let op = driver.operator();
    let late_events = op.counters().late_in_bounds;
    let rt = op.as_over().ok_or_else(|| Error::Config("Q1 runs per-event metrics".into()))?;
    Ok(Q1Result {
        store: rt.store_mut().name().to_string(),
        window_ms: cfg.window_ms,
        windows: windows.len(),
        allowed_lateness_ms: cfg.allowed_lateness_ms,
        events: n,
        batch: cfg.batch.max(1),
        max_events_in_window: max_in_window,
        seconds,
        events_per_sec: n as f64 / seconds.max(1e-9),
        p50_us: us(hist, 0.5),
        p99_us: us(hist, 0.99),
        p999_us: us(hist, 0.999),
        max_us: hist.max() as f64 / 1000.0,
        reservoir_bytes: rt.reservoir_mut().stats().bytes_compressed,
        late_events,
        late_examined: rt.late_events_examined(),
    })
}

/// `next` with every `every`-th event moved `by` time units back (time and time
/// column), so that it arrives late (`every` 0 or `by` 0: unchanged).
fn delay_some<'a>(
    next: &'a mut dyn FnMut() -> Result<Option<Event>>,
    every: u64,
    by: i64,
    time_col: usize,
) -> impl FnMut() -> Result<Option<Event>> + 'a {
    let mut n = 0u64;
    move || {
        let mut e = next()?;
        n += 1;
        if let Some(e) = e.as_mut().filter(|_| every > 0 && by > 0 && n.is_multiple_of(every)) {
            e.time -= by;
            e.row[time_col] = Value::Int(e.time);
        }
        Ok(e)
    }
}

/// A windowed-aggregation benchmark: SUM and COUNT per card over `TUMBLE` or `HOP`
/// windows (NEXMark q5's shape: a `HOP` count per key), on generated payments.
#[derive(Clone, Debug)]
pub struct WindowBenchConfig {
    /// Generator parameters.
    pub payments: PaymentOptions,
    /// The windows (in ms).
    pub window: TvfWindow,
    /// Store memory budget in bytes.
    pub memory_budget: u64,
    /// Generate all events before timing.
    pub pregenerate: bool,
    /// Events announced to the store at a time ([`spillway_engine::operator::Operator::prefetch`]).
    pub batch: usize,
}

/// The windowed-aggregation query of [`WindowBenchConfig::window`].
pub fn windowed_query(w: TvfWindow) -> String {
    let off = |o: i64| if o == 0 { String::new() } else { format!(", {o}") };
    let tvf = match w {
        TvfWindow::Tumble { size, offset } => {
            format!("TUMBLE(TABLE payments, DESCRIPTOR(ts), {size}{})", off(offset))
        }
        TvfWindow::Hop { slide, size, offset } => {
            format!("HOP(TABLE payments, DESCRIPTOR(ts), {slide}, {size}{})", off(offset))
        }
        TvfWindow::Cumulate { step, size, offset } => {
            format!("CUMULATE(TABLE payments, DESCRIPTOR(ts), {step}, {size}{})", off(offset))
        }
        TvfWindow::Session { gap } => {
            format!("SESSION(TABLE payments PARTITION BY card, DESCRIPTOR(ts), {gap})")
        }
    };
    format!(
        "SELECT card, window_start, window_end, SUM(amount) AS s, COUNT(*) AS n \
         FROM TABLE({tvf}) GROUP BY card, window_start, window_end"
    )
}

/// Result of one windowed-aggregation run on one store.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WindowBenchResult {
    /// Store name.
    pub store: String,
    /// The window function (`TUMBLE`, `HOP`, ...).
    pub window: String,
    /// The query.
    pub query: String,
    /// Events processed.
    pub events: u64,
    /// Rows emitted (window firings, end of input included).
    pub rows: u64,
    /// Aggregation state read-modify-writes.
    pub state_updates: u64,
    /// Wall seconds of the timed loop (end-of-input firing included).
    pub seconds: f64,
    /// Events per second.
    pub events_per_sec: f64,
    /// Per-event latency (process call, firings included) percentiles in microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// A digest of every output row, equal across stores when their results are.
    pub digest: u64,
}

/// Runs the windowed aggregation of `cfg` on `store`; `progress` is called every 2^16
/// events.
pub fn run_windowed(
    cfg: &WindowBenchConfig,
    store: StoreKind,
    progress: &mut dyn FnMut(u64),
) -> Result<WindowBenchResult> {
    let gen = PaymentGenerator::new(cfg.payments.clone())?;
    let schema = gen.schema().clone();
    let query = windowed_query(cfg.window);
    let Query::Windowed(q) = parse(&query, &schema)? else {
        return Err(Error::Config("the benchmark query is not a windowed aggregation".into()));
    };
    let plan = QueryPlan::Windowed(WindowPlan::build(&q));
    let dir = tempfile::Builder::new()
        .prefix("spillway-windows-")
        .tempdir()
        .map_err(|e| Error::Config(format!("cannot create a temporary directory: {e}")))?;
    let mut driver = bench_driver(
        store,
        cfg.memory_budget,
        Some(cfg.payments.cards.saturating_mul(2)),
        0,
        plan,
        &schema,
        &query,
        dir.path(),
    )?;
    let mut next = event_source(gen, &cfg.payments, cfg.pregenerate)?;
    let mut digest = Digest::default();
    let mut io =
        BenchIo { next: &mut next, rows: &mut |rows, _| digest.rows(rows), after: &mut |_, _| {} };
    let stats = driver.run(&mut io, cfg.batch, &mut |n, _, _| progress(n))?;
    let (n, hist, seconds) = (stats.events, &stats.latency_ns, stats.seconds);
    let op = driver.operator();
    let c = op.counters();
    Ok(WindowBenchResult {
        store: op.store_mut().name().to_string(),
        window: cfg.window.name().to_string(),
        query,
        events: n,
        rows: c.emitted,
        state_updates: c.state_updates,
        seconds,
        events_per_sec: n as f64 / seconds.max(1e-9),
        p50_us: us(hist, 0.5),
        p99_us: us(hist, 0.99),
        p999_us: us(hist, 0.999),
        max_us: hist.max() as f64 / 1000.0,
        digest: digest.0,
    })
}

/// An order-sensitive FNV-1a digest of output rows (over their key encodings, so it
/// costs little inside the timed loop).
struct Digest(u64, Vec<u8>);

impl Default for Digest {
    fn default() -> Self {
        Digest(0xcbf2_9ce4_8422_2325, Vec::new())
    }
}

impl Digest {
    fn rows(&mut self, rows: &mut Vec<Vec<spillway_engine::value::Value>>) {
        for r in rows.drain(..) {
            self.1.clear();
            for v in &r {
                v.encode_key(&mut self.1);
            }
            for &b in &self.1 {
                self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windowed_benchmark_results_agree_across_stores() {
        let cfg = WindowBenchConfig {
            payments: PaymentOptions {
                events: 20_000,
                cards: 2_000,
                events_per_second: 50.0,
                ..PaymentOptions::default()
            },
            window: TvfWindow::Hop { slide: 60_000, size: 300_000, offset: 0 },
            memory_budget: 64 << 20,
            pregenerate: true,
            batch: 64,
        };
        let a = run_windowed(&cfg, StoreKind::Mem, &mut |_| {}).unwrap();
        let b = run_windowed(&cfg, StoreKind::HashLog, &mut |_| {}).unwrap();
        assert_eq!(a.events, 20_000);
        // Every event enters 5 windows: one read-modify-write each.
        assert_eq!(a.state_updates, 5 * 20_000);
        assert!(a.rows > 5_000, "{} rows", a.rows);
        assert_eq!((a.rows, a.digest), (b.rows, b.digest));
    }
}

/// A holistic aggregate of [`run_holistic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HolisticAgg {
    /// `COUNT(DISTINCT merchant)`.
    Distinct,
    /// `MEDIAN(amount)`.
    Median,
    /// `PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount)`.
    P90,
    /// `FIRST_VALUE(amount)`.
    First,
    /// `LAST_VALUE(amount)`.
    Last,
}

impl HolisticAgg {
    /// The SQL call.
    pub fn sql(self) -> &'static str {
        match self {
            HolisticAgg::Distinct => "COUNT(DISTINCT merchant)",
            HolisticAgg::Median => "MEDIAN(amount)",
            HolisticAgg::P90 => "PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount)",
            HolisticAgg::First => "FIRST_VALUE(amount)",
            HolisticAgg::Last => "LAST_VALUE(amount)",
        }
    }
}

/// A holistic-aggregate benchmark: the aggregates over a sliding `RANGE` window per
/// card, with the window full (about `per_key` events per card) while timed.
#[derive(Clone, Debug)]
pub struct HolisticConfig {
    /// Cards (drawn uniformly).
    pub keys: u64,
    /// Events per card inside the window at steady state.
    pub per_key: u64,
    /// Events timed once the window is full.
    pub timed_events: u64,
    /// Window length in ms.
    pub window_ms: i64,
    /// Distinct merchants (the `COUNT(DISTINCT)` domain).
    pub merchants: u64,
    /// The aggregates, all over the one window.
    pub aggs: Vec<HolisticAgg>,
    /// Store memory budget in bytes.
    pub memory_budget: u64,
    /// Generator seed.
    pub seed: u64,
    /// Keep the holistic aggregates inline (one value per card rewritten per event)
    /// instead of in order-statistics trees.
    pub inline: bool,
}

/// Result of one [`run_holistic`] run.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct HolisticResult {
    /// Store name.
    pub store: String,
    /// `tree` or `inline`.
    pub layout: String,
    /// The query.
    pub query: String,
    /// Events processed before timing (filling the window).
    pub fill_events: u64,
    /// Seconds spent filling.
    pub fill_seconds: f64,
    /// Events timed.
    pub events: u64,
    /// Events in the window at the end (all cards).
    pub events_in_window: u64,
    /// Wall seconds of the timed loop.
    pub seconds: f64,
    /// Timed events per second.
    pub events_per_sec: f64,
    /// Mean nanoseconds per timed event.
    pub ns_per_event: f64,
    /// Per-event latency percentiles (us).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Maximum.
    pub max_us: f64,
    /// A digest of every timed output row (equal across layouts and stores).
    pub digest: u64,
}

/// The query of [`run_holistic`].
pub fn holistic_query(aggs: &[HolisticAgg], window_ms: i64) -> String {
    let metrics: Vec<String> =
        aggs.iter().enumerate().map(|(i, a)| format!("{} OVER w AS m{i}", a.sql())).collect();
    format!(
        "SELECT card, ts, {} FROM payments WINDOW w AS (PARTITION BY card ORDER BY ts \
         RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW)",
        metrics.join(", ")
    )
}

/// Runs the holistic benchmark on `store`: `keys * per_key` events fill the window
/// (untimed; the event-time rate is chosen so the window then holds about `per_key`
/// events per card), then `timed_events` more slide it and are timed.
pub fn run_holistic(
    cfg: &HolisticConfig,
    store: StoreKind,
    progress: &mut dyn FnMut(u64),
) -> Result<HolisticResult> {
    if cfg.keys == 0 || cfg.per_key == 0 || cfg.window_ms <= 0 || cfg.aggs.is_empty() {
        return Err(Error::Config(
            "the holistic benchmark needs keys, events per key, a window and an aggregate".into(),
        ));
    }
    let fill = cfg.keys * cfg.per_key;
    let payments = PaymentOptions {
        seed: cfg.seed,
        events: fill + cfg.timed_events,
        cards: cfg.keys,
        merchants: cfg.merchants.max(1),
        zipf: 0.0,
        events_per_second: fill as f64 / (cfg.window_ms as f64 / 1000.0),
        ..PaymentOptions::default()
    };
    let gen = PaymentGenerator::new(payments.clone())?;
    let schema = gen.schema().clone();
    let query = holistic_query(&cfg.aggs, cfg.window_ms);
    let mut plan = Plan::build(&parse_query(&query, &schema)?, &schema)?;
    if cfg.inline {
        plan = plan.with_inline_holistic();
    }
    let dir = tempfile::Builder::new()
        .prefix("spillway-holistic-")
        .tempdir()
        .map_err(|e| Error::Config(format!("cannot create a temporary directory: {e}")))?;
    let mut driver = bench_driver(
        store,
        cfg.memory_budget,
        None,
        0,
        QueryPlan::Over(plan),
        &schema,
        &query,
        dir.path(),
    )?;
    let mut next = event_source(gen, &payments, true)?;
    let mut rows = Vec::new();
    let started = Instant::now();
    for n in 1..=fill {
        let Some(e) = next()? else { break };
        driver.process(e, &mut rows)?;
        rows.clear();
        if n.is_multiple_of(4096) {
            progress(n);
            driver.release()?;
        }
    }
    let fill_seconds = started.elapsed().as_secs_f64();
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut io = BenchIo {
        next: &mut next,
        rows: &mut |rows, _| {
            for v in rows.iter().flatten() {
                let mut mix = |x: u64| digest = (digest ^ x).wrapping_mul(0x0000_0100_0000_01b3);
                match v {
                    Value::Null => mix(0),
                    Value::Int(i) => mix(*i as u64 ^ 1 << 62),
                    Value::Float(f) => mix(f.to_bits()),
                    Value::Bool(b) => mix(u64::from(*b) + 2),
                    Value::Str(s) => s.bytes().for_each(|b| mix(u64::from(b))),
                }
            }
        },
        after: &mut |_, _| {},
    };
    let stats = driver.run(&mut io, BATCH_EVENTS, &mut |n, _, _| progress(n))?;
    let (n, hist, seconds) = (stats.events, &stats.latency_ns, stats.seconds);
    let op = driver.operator();
    let store_name = op.store_mut().name().to_string();
    let rt = op.as_over().ok_or_else(|| Error::Config("the holistic query is per-event".into()))?;
    Ok(HolisticResult {
        store: store_name,
        layout: if cfg.inline { "inline" } else { "tree" }.to_string(),
        query,
        fill_events: fill,
        fill_seconds,
        events: n,
        events_in_window: rt.events_retained(),
        seconds,
        events_per_sec: n as f64 / seconds.max(1e-9),
        ns_per_event: seconds * 1e9 / (n.max(1) as f64),
        p50_us: us(hist, 0.5),
        p99_us: us(hist, 0.99),
        max_us: hist.max() as f64 / 1000.0,
        digest,
    })
}
