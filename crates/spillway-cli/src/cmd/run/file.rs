//! `spillway run`, `spillway demo` and `spillway explain`: argument parsing and printing
//! around `spillway_engine::job`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use spillway_bench::units::{parse_count, parse_size};
use std::sync::Arc;

use spillway_engine::checkpoint::Input;
use spillway_engine::duration::parse_duration;
use spillway_engine::job::{run_job, HaltPoint, JobConfig, JobSummary, OpenAt, Progress};
use spillway_engine::metrics::{serve as serve_metrics, Metrics, MetricsServer};
use spillway_engine::operator::over::peers::Ties;
use spillway_engine::operator::windowed::WindowPlan;
use spillway_engine::plan::Plan;
use spillway_engine::reservoir::Compression;
use spillway_engine::source::{
    self, parse_schema_overrides, OnError, PaymentGenerator, PaymentOptions, Source, SourceOptions,
};
use spillway_engine::sql::Query;
use spillway_engine::value::{Field, Schema, TimeUnit};
use spillway_store::StoreKind;

/// What to do with malformed input rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnErrorArg {
    /// Stop with a message naming the line, column and expected type.
    Stop,
    /// Write the row to the dead-letter file, count it and go on.
    Skip,
}

/// Reservoir chunk compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    /// LZ4 (fast).
    Lz4,
    /// Zstandard level 3 (smaller).
    Zstd,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Compression {
        match c {
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd(3),
        }
    }
}

/// How the input is read (shared by `run`, `explain` and `kafka produce`). The time flags
/// are options so that a Kafka worker can tell a given value from the default (it checks
/// a given one against the topic's schema); [`source_options`] applies the defaults.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Event-time column: integers in --time-unit, or RFC 3339 / ISO 8601 timestamps
    /// (2023-11-14T22:13:20.663Z, an offset, or 2023-11-14 22:13:20.663 taken as UTC)
    /// converted to them [default: ts; with a kafka:// input, the topic's schema's, and
    /// another is refused]
    #[arg(long, value_name = "NAME")]
    pub(crate) time_column: Option<String>,

    /// Unit of the event-time column (of its integers since 1970-01-01, and of the
    /// engine's time): s, ms, us, ns [default: ms; with a kafka:// input, the topic's
    /// schema's, and another is refused]
    #[arg(long, value_parser = parse_unit, value_name = "UNIT")]
    pub(crate) time_unit: Option<TimeUnit>,

    /// Column types overriding inference, e.g. `card:string,amount:float`
    #[arg(long, value_name = "NAME:TYPE,...")]
    pub(crate) schema: Option<String>,
}

/// The levels of `--store tiered` (shared by `run` and `demo`).
#[derive(Debug, Default, Args)]
pub struct TierArgs {
    /// With --store tiered: capacity of the in-process L1 cache (adaptive W-TinyLFU), a
    /// size (64KiB, 16MiB) or a percentage of --memory-budget; 0 leaves L1 out
    /// [default: 25%]
    #[arg(long, value_name = "SIZE|PCT", value_parser = spillway_bench::units::parse_size_or_share)]
    pub(crate) l1: Option<spillway_bench::units::SizeOrShare>,

    /// With --store tiered: the Redis level: redis://HOST:PORT, redis+unix:///PATH, auto
    /// (a private redis-server child, stopped when the run ends) or none [default: auto]
    #[arg(long, value_name = "URL|auto|none")]
    pub(crate) l2: Option<spillway_store::tiered::L2Config>,

    /// With --store tiered: the durable level: hashlog or none (then the store cannot
    /// checkpoint) [default: hashlog]
    #[arg(long, value_name = "hashlog|none")]
    pub(crate) l3: Option<spillway_store::tiered::L3Kind>,
}

impl TierArgs {
    /// The tiered store's options; an error if levels are given for another store.
    pub(crate) fn options(
        &self,
        store: StoreKind,
        budget: u64,
    ) -> Result<spillway_store::TieredOptions> {
        use spillway_store::tiered::{L2Config, L3Kind};
        let given = self.l1.is_some() || self.l2.is_some() || self.l3.is_some();
        if store != StoreKind::Tiered {
            if given {
                bail!("--l1, --l2 and --l3 configure the tiered store: add --store tiered");
            }
            return Ok(spillway_store::TieredOptions::default());
        }
        let l1 = self.l1.map_or(budget / 4, |s| s.of(budget));
        let l3 = self.l3.unwrap_or(L3Kind::HashLog);
        if l3 == L3Kind::None {
            eprintln!(
                "note: the tiered store has no durable level (--l3 none): it refuses checkpoints \
                 and nothing it holds outlives the run"
            );
        }
        Ok(spillway_store::TieredOptions::new(l1)
            .l2(self.l2.clone().unwrap_or(L2Config::Auto))
            .l3(l3))
    }
}

fn parse_unit(s: &str) -> Result<TimeUnit, String> {
    TimeUnit::parse(s).ok_or_else(|| format!("unknown time unit `{s}`; use s, ms, us or ns"))
}

/// `spillway run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The SQL query: a file, or the query text itself
    #[arg(long, value_name = "FILE|SQL")]
    pub(crate) query: String,

    /// Input file, CSV (with header) or JSON Lines by extension; `-` reads stdin;
    /// `kafka://HOST:PORT/TOPIC` makes this process a worker of --group (feature `kafka`)
    #[arg(long, value_name = "FILE|kafka://B/T")]
    pub(crate) input: PathBuf,

    /// The input's table name, which the query's FROM must name [default: the input
    /// file's name without its extension, e.g. payments for payments.csv; the topic of a
    /// kafka:// input; with stdin, any name is accepted]
    #[arg(long, value_name = "NAME")]
    pub(crate) table: Option<String>,

    /// Output file, CSV or JSON Lines by extension, written under a temporary name and
    /// renamed when the run succeeds; `-` (CSV on stdout, the default), FIFOs and devices
    /// such as /dev/null are written in place; with a Kafka input, the result topic
    /// `kafka://HOST:PORT/TOPIC`. Messages and the summary go to stderr
    #[arg(long, value_name = "FILE|-|kafka://B/T")]
    pub(crate) output: Option<PathBuf>,

    /// Kafka consumer group of the workers (with a kafka:// input)
    #[arg(long, value_name = "G")]
    pub(crate) group: Option<String>,

    /// A stable name for this worker (with a kafka:// input): a restart under the same
    /// name fences its predecessor's open transaction and rejoins the group at once
    #[arg(long, value_name = "ID")]
    pub(crate) worker_id: Option<String>,

    /// With a kafka:// input: upload every task's checkpoint to this object store
    /// (s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, az://CONTAINER/PREFIX or file:///PATH;
    /// credentials and endpoint from the environment, e.g. AWS_ENDPOINT), where a
    /// partition's next owner on any machine restores it; --checkpoint-dir is then each
    /// worker's private working directory
    #[arg(long, value_name = "URL")]
    pub(crate) checkpoint_store: Option<String>,

    /// With a one-partition kafka:// input: route each event to one topic per group-by
    /// key with this many partitions, computed in parallel and joined per event (1: run
    /// the whole query in the input's one task) [default: 4]
    #[arg(long, value_name = "N")]
    pub(crate) route_partitions: Option<i32>,

    /// Commit the workers' transaction this often: results reach `read_committed`
    /// readers at this pace (with a kafka:// input; at most --checkpoint-every)
    /// [default: 100ms]
    #[arg(long, value_name = "DURATION")]
    pub(crate) commit_every: Option<String>,

    /// Stop after a final commit and checkpoint once, for this long, no event arrived
    /// and every assigned partition was read to its end, counted from the last rebalance
    /// (with a kafka:// input; default: run until SIGINT/SIGTERM)
    #[arg(long, value_name = "DURATION")]
    pub(crate) idle_exit: Option<String>,

    /// Serve Prometheus metrics at http://HOST:PORT/metrics while the job runs: events
    /// in and out, late and malformed ones, checkpoint (and Kafka commit) durations,
    /// state keys and bytes, tiered cache hits per level, and with a kafka:// input the
    /// consumer lag per partition and the bytes uploaded to --checkpoint-store
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics_addr: Option<String>,

    #[command(flatten)]
    pub(crate) input_args: InputArgs,

    /// State store of the aggregation state: hashlog, mem, adaptive, tiered (levels with
    /// --l1/--l2/--l3), rocksdb (if built in)
    #[arg(long, default_value = "hashlog", value_name = "STORE")]
    pub(crate) store: StoreKind,

    #[command(flatten)]
    pub(crate) tier_args: TierArgs,

    /// Memory budget of the state store, e.g. 256MiB
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    pub(crate) memory_budget: u64,

    /// Expected number of partition keys, a sizing hint for the store (hashlog presizes
    /// its index instead of doubling it while keys arrive)
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub(crate) expected_keys: Option<u64>,

    /// How far behind the newest event time an event may arrive and still be exact,
    /// e.g. 5s; later events go to the side output
    #[arg(long, default_value = "0", value_name = "DURATION")]
    pub(crate) allowed_lateness: String,

    /// How OVER ... RANGE frames treat rows of equal time: per-event (each event's
    /// result covers what arrived no later than it) or peers (SQL's and Flink's: a row's
    /// frame holds every row of its partition with the same time; rows are emitted once
    /// their time is complete, when a later time arrives or the input ends)
    #[arg(long, default_value = "per-event", value_parser = Ties::parse, value_name = "per-event|peers")]
    pub(crate) ties: Ties,

    /// Windowed aggregations (TUMBLE/HOP/CUMULATE/SESSION): the watermark is the newest
    /// event time minus this minus one time unit (events tied with the newest are never
    /// late), e.g. 2s; a window [start, end) fires when the watermark reaches end - 1
    /// [default: 0]
    #[arg(long, value_name = "DURATION")]
    pub(crate) watermark_delay: Option<String>,

    /// Where events later than the allowed lateness are written [default:
    /// <output>.late.<ext>, or late-events.csv when writing to stdout, a FIFO
    /// or a device]
    #[arg(long, value_name = "FILE")]
    pub(crate) side_output: Option<PathBuf>,

    /// Malformed input rows: stop (default) or skip to the dead-letter file
    #[arg(long, value_enum)]
    pub(crate) on_error: Option<OnErrorArg>,

    /// Dead-letter file for --on-error skip [default: <input>.dead-letter]
    #[arg(long, value_name = "FILE")]
    pub(crate) dead_letter: Option<PathBuf>,

    /// Directory for the state store, event reservoir and checkpoints [default: a
    /// temporary directory, removed at the end]
    #[arg(long, value_name = "DIR")]
    pub(crate) checkpoint_dir: Option<PathBuf>,

    /// Checkpoint every N input events (with --checkpoint-dir) [default: 1M; a --resume
    /// or --backfill keeps the checkpoint's]; 0 makes no checkpoints (the directory then
    /// holds only the run's state and a --resume starts over); with a kafka:// input, a
    /// duration between checkpoints of the tasks' state [default: 1s]
    #[arg(long, value_name = "N|DURATION")]
    pub(crate) checkpoint_every: Option<String>,

    /// Continue a killed run from its last checkpoint in --checkpoint-dir (same
    /// arguments). Without a checkpoint there (a new or empty directory, or a run killed
    /// before its first checkpoint) it says so on stderr and starts from the beginning,
    /// so a supervisor may pass --resume to every start
    #[arg(long)]
    pub(crate) resume: bool,

    /// With --resume: continue the checkpoint under a different --query (same input,
    /// lateness, store, schema and WHERE) whose new or changed sliding-window metrics
    /// are rebuilt from the events the reservoir still holds; the rows of the events
    /// after the checkpoint go to a new --output file with the new columns
    #[arg(long, requires = "resume")]
    pub(crate) backfill: bool,

    /// Keep reservoir events at least this long behind the newest event time (e.g. 1h),
    /// so a later --backfill of windows up to that long is exact from its first event;
    /// recorded in the checkpoints, a resume keeps it [default: 0, only what the
    /// query's windows need]
    #[arg(long, value_name = "DURATION")]
    pub(crate) retain: Option<String>,

    /// Compression of the reservoir's chunks
    #[arg(long, value_enum, default_value = "lz4")]
    pub(crate) compression: CompressionArg,

    /// Internal (tests): events per reservoir chunk [default: 4096]
    #[arg(long, hide = true, value_parser = parse_count, value_name = "N")]
    pub(crate) reservoir_chunk_events: Option<u64>,

    /// Internal (tests): size at which reservoir segment files roll [default: 64MiB]
    #[arg(long, hide = true, value_parser = parse_size, value_name = "SIZE")]
    pub(crate) reservoir_segment_bytes: Option<u64>,

    /// Internal (tests): after N input events in total (and the checkpoint on that
    /// event, if any), flush the output files, create --halt-marker and wait to be killed
    #[arg(long, hide = true, value_name = "N", requires = "halt_marker")]
    pub(crate) halt_after: Option<u64>,

    /// Internal (tests): the file --halt-after creates
    #[arg(long, hide = true, value_name = "FILE", requires = "halt_after")]
    pub(crate) halt_marker: Option<PathBuf>,

    /// No progress line on stderr (warnings, errors and the final summary still show)
    #[arg(long, short)]
    pub(crate) quiet: bool,
}

/// `spillway demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Payments to generate
    #[arg(long, default_value = "2M", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct cards (zipf-distributed)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    cards: u64,

    /// Distinct merchants (zipf-distributed)
    #[arg(long, default_value = "100k", value_parser = parse_count, value_name = "N")]
    merchants: u64,

    /// Window length, e.g. 5m, 1h, 7d
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    window: String,

    /// Zipf skew of cards and merchants (0 draws them uniformly)
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    zipf: f64,

    /// Mean payments per second of event time
    #[arg(long, default_value_t = 10_000.0, value_name = "RATE")]
    rate: f64,

    /// State store: hashlog, mem, adaptive, tiered (levels with --l1/--l2/--l3), rocksdb
    /// (if built in)
    #[arg(long, default_value = "hashlog", value_name = "STORE")]
    store: StoreKind,

    #[command(flatten)]
    tier_args: TierArgs,

    /// Memory budget of the state store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Also write the scored payments to FILE (CSV or JSON Lines)
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Write the summary as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// No progress line on stderr (the banner and the final summary still show)
    #[arg(long, short)]
    quiet: bool,
}

/// `spillway explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The SQL query: a file, or the query text itself
    #[arg(long, value_name = "FILE|SQL")]
    query: String,

    /// Input file whose columns and types the query refers to (inferred as `run` does);
    /// without it, --schema must list every column
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,

    /// The input's table name, which the query's FROM must name [default: the --input
    /// file's name without its extension; without --input, any name]
    #[arg(long, value_name = "NAME")]
    table: Option<String>,

    #[command(flatten)]
    input_args: InputArgs,
}

pub(crate) fn read_query(q: &str) -> Result<String> {
    let p = Path::new(q);
    if p.is_file() {
        std::fs::read_to_string(p)
            .with_context(|| format!("cannot read query file {}", p.display()))
    } else if q.trim_start().to_ascii_lowercase().starts_with("select") {
        Ok(q.to_string())
    } else {
        bail!("--query {q}: no such file, and not SQL text (which starts with SELECT)")
    }
}

/// Checks that the query's FROM names the input's table: `table` (--table) if given,
/// else `default` (the input file's name without its extension, or the Kafka topic),
/// said to be `default_is`; no check without either (stdin).
pub(crate) fn check_from(
    query: &str,
    table: Option<&str>,
    default: Option<String>,
    default_is: &str,
) -> Result<()> {
    let (table, why) = match (table, default) {
        (Some(t), _) => (t.to_string(), "--table".to_string()),
        (None, Some(t)) => (t, format!("{default_is}; --table NAME names it otherwise")),
        (None, None) => return Ok(()),
    };
    spillway_engine::sql::check_table(query, &table).map_err(|e| anyhow!("{e} ({why})"))
}

/// What the input's default table name is, for [`check_from`]'s message.
pub(crate) const FILE_TABLE: &str = "the input file's name without its extension";

/// The event-time column when --time-column is not given.
pub(crate) const DEFAULT_TIME_COLUMN: &str = "ts";
/// The event-time unit when --time-unit is not given.
pub(crate) const DEFAULT_TIME_UNIT: TimeUnit = TimeUnit::Ms;

pub(crate) fn source_options(a: &InputArgs, on_error: OnError) -> Result<SourceOptions> {
    let mut o = SourceOptions::new(a.time_column.as_deref().unwrap_or(DEFAULT_TIME_COLUMN));
    o.time_unit = a.time_unit.unwrap_or(DEFAULT_TIME_UNIT);
    o.on_error = on_error;
    if let Some(s) = &a.schema {
        o.schema_overrides = parse_schema_overrides(s)?;
    }
    Ok(o)
}

pub(crate) fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("template"));
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

fn progress_message(p: &Progress<'_>) -> String {
    let h = p.latency_ns;
    format!(
        "{} events  {:.2}M events/s  latency p50 {:.1} us  p99 {:.1} us  p99.9 {:.1} us",
        p.events,
        p.events as f64 / p.seconds.max(1e-9) / 1e6,
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.value_at_quantile(0.999) as f64 / 1e3,
    )
}

/// Prints the summary on stderr. Its first line counts this run's events and rows; after
/// a resume or backfill a second line gives the whole job's since its first run.
fn print_summary(s: &JobSummary) {
    let c = &s.counters_this_run;
    eprintln!(
        "{} events in {:.2} s ({:.2}M events/s, store {}): {} rows emitted, {} filtered by WHERE, {} late beyond the allowed lateness{}, {} malformed rows skipped, {} late within it",
        s.events_this_run,
        s.seconds,
        s.events_per_sec / 1e6,
        s.store,
        c.emitted,
        c.filtered,
        c.too_late,
        s.side_output.as_ref().map_or(String::new(), |p| format!(" (written to {})", p.display())),
        s.skipped_rows_this_run,
        c.late_in_bounds,
    );
    let t = &s.counters;
    if t.events != c.events {
        eprintln!(
            "whole job since its first run (this run continued a checkpoint{}): {} events, {} rows emitted, {} filtered, {} late beyond the lateness, {} malformed rows skipped",
            if s.backfill.is_some() { " under a new query" } else { "" },
            t.events,
            t.emitted,
            t.filtered,
            t.too_late,
            s.skipped_rows,
        );
    }
    eprintln!(
        "latency (ingest to emit, checkpoint pauses included): p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, max {:.1} us; reservoir {} compressed of {} raw bytes, {} segments deleted",
        s.latency_us.p50,
        s.latency_us.p99,
        s.latency_us.p999,
        s.latency_us.max,
        s.reservoir_bytes.0,
        s.reservoir_bytes.1,
        s.reservoir_segments_deleted
    );
    if let Some(w) = &s.windows {
        eprintln!(
            "windows{}: {} rows fired, {} late updates (a late event re-emitted its window), {} session merges, {} windows missed by events taken into others",
            if t.events != c.events { " (whole job)" } else { "" },
            w.fired,
            w.late_updates,
            w.session_merges,
            w.missed_windows
        );
    }
    if let Some(b) = &s.backfill {
        eprintln!(
            "backfill: {} group-by nodes kept ({} moved to new namespaces, {} state keys copied), {} rebuilt from {} reservoir events, {} dropped; {} metric groups not covered by the reservoir{}",
            b.groups_kept,
            b.groups_moved,
            b.keys_copied,
            b.groups_rebuilt,
            b.events_replayed,
            b.groups_dropped,
            b.not_covered.len(),
            if b.not_covered.is_empty() {
                String::new()
            } else {
                let from: Vec<String> = b
                    .not_covered
                    .iter()
                    .map(|n| format!("{} exact from time {}", n.metrics.join(", "), n.exact_from))
                    .collect();
                format!(" ({})", from.join("; "))
            }
        );
    }
    let p = &s.checkpoint_pause_us;
    // The interval last: the line starts as it did before it was printed.
    let every = if s.checkpoint_every > 0 {
        format!("; one every {} input events", s.checkpoint_every)
    } else {
        String::new()
    };
    if p.count > 0 {
        eprintln!(
            "{} checkpoints, pauses: p50 {:.1} us, p99 {:.1} us, max {:.1} us{every}",
            s.checkpoints, p.p50, p.p99, p.max
        );
    } else {
        eprintln!("{} checkpoints{every}", s.checkpoints);
    }
    eprintln!(
        "aggregation state: {} live keys, {} in the store's files, {} reads from disk",
        s.state.live_keys.map_or("?".to_string(), |k| k.to_string()),
        spillway_bench::units::format_bytes(s.state.bytes_on_disk),
        s.state.disk_reads
    );
    if let Some(t) = &s.state.tiers {
        eprintln!(
            "tiered store: L1 hit ratio {:.1}% ({} entries, {} of {}), L2 hits {}, L3 hits {}; \
             demotions {} to L2, {} to L3; {} Redis round trips",
            t.l1_hit_ratio() * 100.0,
            t.l1_entries,
            spillway_bench::units::format_bytes(t.l1_bytes),
            spillway_bench::units::format_bytes(t.l1_capacity),
            t.l2_hits,
            t.l3_hits,
            t.demotions_to_l2,
            t.demotions_to_l3,
            t.l2_round_trips
        );
    }
}

/// The metrics of `--metrics-addr ADDR` and their server (`None` without the flag).
pub(crate) fn metrics_server(
    addr: Option<&str>,
) -> Result<(Option<Arc<Metrics>>, Option<MetricsServer>)> {
    let Some(addr) = addr else { return Ok((None, None)) };
    let m = Metrics::new();
    let server = serve_metrics(addr, m.clone())?;
    eprintln!("serving metrics at http://{}/metrics", server.addr());
    Ok((Some(m), Some(server)))
}

/// `spillway run`.
pub fn run(a: RunArgs) -> Result<()> {
    let kafka_input = a.input.to_str().is_some_and(|s| s.starts_with("kafka://"));
    if kafka_input {
        // Every flag is used or refused in `kafka_cmd::worker_config`.
        #[cfg(feature = "kafka")]
        return crate::cmd::kafka::run_worker(a);
        #[cfg(not(feature = "kafka"))]
        bail!("--input {}: this spillway was built without Kafka support; build it with `cargo build --release --features kafka` (needs librdkafka-dev)", a.input.display());
    }
    for (flag, set) in [
        ("--group", a.group.is_some()),
        ("--worker-id", a.worker_id.is_some()),
        ("--checkpoint-store", a.checkpoint_store.is_some()),
        ("--idle-exit", a.idle_exit.is_some()),
        ("--commit-every", a.commit_every.is_some()),
        ("--route-partitions", a.route_partitions.is_some()),
    ] {
        if set {
            bail!("{flag} is for Kafka workers (--input kafka://HOST:PORT/TOPIC)");
        }
    }
    if a.output.as_ref().and_then(|o| o.to_str()).is_some_and(|s| s.starts_with("kafka://")) {
        bail!("a kafka:// output needs a kafka:// input (a worker of --group); write a file output and `spillway kafka produce` it instead");
    }
    // Not given: the checkpoint's interval on a resume, else the default (1M).
    let checkpoint_every =
        match &a.checkpoint_every {
            None => None,
            Some(s) => Some(parse_count(s).map_err(|e| {
                anyhow!("--checkpoint-every: {e} (a count of input events, e.g. 1M)")
            })?),
        };
    // The metrics address is taken first: a bad or busy one fails before anything runs.
    let (metrics, _metrics_server) = metrics_server(a.metrics_addr.as_deref())?;
    let query = read_query(&a.query)?;
    check_from(&query, a.table.as_deref(), source::table_name(&a.input), FILE_TABLE)?;
    let on_error = match a.on_error.unwrap_or(OnErrorArg::Stop) {
        OnErrorArg::Stop => OnError::Stop,
        OnErrorArg::Skip => OnError::Skip {
            dead_letter: a.dead_letter.clone().unwrap_or_else(|| {
                let mut p = a.input.clone().into_os_string();
                p.push(".dead-letter");
                PathBuf::from(p)
            }),
        },
    };
    let mut sopts = source_options(&a.input_args, on_error)?;
    sopts.type_hints = spillway_engine::sql::column_type_hints(&query);
    let lateness = parse_duration(&a.allowed_lateness, sopts.time_unit)
        .map_err(|e| anyhow!("--allowed-lateness: {e}"))?;
    let watermark_delay =
        parse_duration(a.watermark_delay.as_deref().unwrap_or("0"), sopts.time_unit)
            .map_err(|e| anyhow!("--watermark-delay: {e}"))?;
    if a.resume && a.input == Path::new("-") {
        bail!("--resume cannot re-read stdin; give the input as a file");
    }
    let retain = match &a.retain {
        Some(r) => Some(parse_duration(r, sopts.time_unit).map_err(|e| anyhow!("--retain: {e}"))?),
        None => None,
    };
    let cfg = JobConfig {
        query,
        // `-` is stdout, as when no --output is given.
        output: a.output.clone().filter(|p| p != Path::new("-")),
        discard_output: false,
        side_output: a.side_output.clone(),
        store: a.store,
        tiered: a.tier_args.options(a.store, a.memory_budget)?,
        memory_budget: a.memory_budget,
        expected_keys: a.expected_keys,
        allowed_lateness: lateness,
        watermark_delay,
        checkpoint_dir: a.checkpoint_dir.clone(),
        checkpoint_every,
        resume: a.resume,
        compression: a.compression.into(),
        input: Input::file(&a.input, &sopts),
        reservoir_chunk_events: a
            .reservoir_chunk_events
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        reservoir_segment_bytes: a.reservoir_segment_bytes,
        halt: match (a.halt_after, &a.halt_marker) {
            (Some(events), Some(marker)) => Some(HaltPoint { events, marker: marker.clone() }),
            _ => None,
        },
        backfill: a.backfill,
        retain,
        metrics: metrics.clone(),
        ties: a.ties,
        fs: None,
    };
    let input = a.input.clone();
    // Only the schema: no dead-letter file is created (a resume keeps the existing one).
    let schema_opts = SourceOptions { on_error: OnError::Stop, ..sopts.clone() };
    let mut open = |at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn Source>> {
        Ok(match at {
            OpenAt::Start => source::open(&input, &sopts)?,
            OpenAt::Schema => source::open(&input, &schema_opts)?,
            OpenAt::Checkpoint(schema, pos) => source::resume(&input, &sopts, schema, pos)?,
        })
    };
    let pb = progress_bar(a.quiet);
    let summary = run_job(&cfg, &mut open, &mut |p| {
        // Warnings show even with --quiet.
        for w in p.warnings {
            pb.suspend(|| eprintln!("warning: {w}"));
        }
        pb.set_message(progress_message(p))
    })?;
    pb.finish_and_clear();
    // --quiet hides the progress line only: the summary is what the run did.
    print_summary(&summary);
    Ok(())
}

/// The demo's query: Railgun's fraud metrics over `window_ms`.
pub fn demo_query(window_ms: i64) -> String {
    format!(
        "SELECT card, merchant, amount, ts,\n\
         \x20      SUM(amount) OVER card_w AS card_sum,\n\
         \x20      COUNT(*) OVER card_w AS card_count,\n\
         \x20      AVG(amount) OVER merchant_w AS merchant_avg\n\
         FROM payments\n\
         WINDOW card_w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW),\n\
         \x20      merchant_w AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN {window_ms} PRECEDING AND CURRENT ROW)\n"
    )
}

/// `spillway demo`.
pub fn demo(a: DemoArgs) -> Result<()> {
    let window = parse_duration(&a.window, TimeUnit::Ms).map_err(|e| anyhow!("--window: {e}"))?;
    let popts = PaymentOptions {
        seed: a.seed,
        events: a.events,
        cards: a.cards,
        merchants: a.merchants,
        zipf: a.zipf,
        events_per_second: a.rate,
        ..PaymentOptions::default()
    };
    let cfg = JobConfig {
        query: demo_query(window),
        output: a.output.clone(),
        discard_output: a.output.is_none(),
        side_output: None,
        store: a.store,
        tiered: a.tier_args.options(a.store, a.memory_budget)?,
        memory_budget: a.memory_budget,
        expected_keys: Some(a.cards + a.merchants),
        allowed_lateness: 0,
        watermark_delay: 0,
        checkpoint_dir: None,
        checkpoint_every: Some(0),
        resume: false,
        compression: Compression::Lz4,
        input: Input::Named(format!("the payments generator (seed {})", a.seed)),
        reservoir_chunk_events: None,
        reservoir_segment_bytes: None,
        halt: None,
        backfill: false,
        retain: None,
        metrics: None,
        ties: Default::default(),
        fs: None,
    };
    eprintln!(
        "spillway demo: {} payments over {} cards and {} merchants ({}), {} window, store {}\n{}",
        a.events,
        a.cards,
        a.merchants,
        if a.zipf > 0.0 { format!("zipf {}", a.zipf) } else { "uniform".to_string() },
        a.window,
        a.store.name(),
        cfg.query.trim_end()
    );
    let mut open = |_at: OpenAt<'_>| -> spillway_engine::Result<Box<dyn Source>> {
        Ok(Box::new(PaymentGenerator::new(popts.clone())?))
    };
    spillway_bench::machine::reset_peak_rss();
    let pb = progress_bar(a.quiet);
    let s = run_job(&cfg, &mut open, &mut |p| pb.set_message(progress_message(p)))?;
    pb.finish_and_clear();
    let peak = spillway_bench::machine::peak_rss_bytes();
    // --quiet hides the progress line only, as for `run`.
    print_summary(&s);
    eprintln!("peak resident memory: {}", spillway_bench::units::format_bytes(peak));
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "events": s.events_this_run,
            "seconds": s.seconds,
            "events_per_sec": s.events_per_sec,
            "latency_us": {
                "p50": s.latency_us.p50,
                "p99": s.latency_us.p99,
                "p999": s.latency_us.p999,
                "max": s.latency_us.max,
            },
            "checkpoint_pause_us": s.checkpoint_pause_us,
            "reservoir_segments_deleted": s.reservoir_segments_deleted,
            "peak_rss_bytes": peak,
            "late_events": s.counters.too_late,
            "state": s.state,
            "store": s.store,
            "window": a.window,
            "cards": a.cards,
            "merchants": a.merchants,
            "zipf": a.zipf,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// `spillway explain`.
pub fn explain(a: ExplainArgs) -> Result<()> {
    let query = read_query(&a.query)?;
    check_from(
        &query,
        a.table.as_deref(),
        a.input.as_deref().and_then(source::table_name),
        FILE_TABLE,
    )?;
    let mut sopts = source_options(&a.input_args, OnError::Stop)?;
    sopts.type_hints = spillway_engine::sql::column_type_hints(&query);
    let schema = match &a.input {
        Some(p) => source::open(p, &sopts)?.schema().clone(),
        None => {
            if sopts.schema_overrides.is_empty() {
                bail!("explain needs the input's columns: give --input FILE or --schema name:type,...");
            }
            let fields = sopts
                .schema_overrides
                .iter()
                .map(|(n, t)| Field { name: n.clone(), ty: *t })
                .collect();
            Schema::new(fields, &sopts.time_column, sopts.time_unit).map_err(|e| anyhow!(e))?
        }
    };
    match spillway_engine::sql::parse(&query, &schema)? {
        Query::Over(spec) => print!("{}", Plan::build(&spec, &schema)?.explain(&schema)),
        Query::Windowed(q) => print!("{}", WindowPlan::build(&q).explain(&schema)),
    }
    Ok(())
}

/// `spillway bench engine`.
#[derive(Debug, Args)]
pub struct EngineBenchArgs {
    /// Payments per run
    #[arg(long, default_value = "5M", value_parser = parse_count, value_name = "N")]
    events: u64,

    /// Distinct cards (zipf 0.99)
    #[arg(long, default_value = "1M", value_parser = parse_count, value_name = "N")]
    cards: u64,

    /// Zipfian skew of the cards in (0, 1); 0 draws them uniformly
    #[arg(long, default_value_t = 0.99, value_name = "S")]
    zipf: f64,

    /// Window lengths, comma-separated (e.g. 5m or 20m,7d); with several, each runs in
    /// its own child process (so peak memory is per window) and the ratios to the first
    /// are printed
    #[arg(long, default_value = "5m", value_delimiter = ',', value_name = "LIST")]
    windows: Vec<String>,

    /// Also run every --windows length in one job (one query with a SUM and a COUNT per
    /// window, one event reservoir for all), in a child process of its own, and print
    /// its peak RSS against the longest window alone: the engine's shared window state
    #[arg(long)]
    together: bool,

    /// Allowed lateness values, comma-separated (e.g. 0,5s); with several, each runs on
    /// every store and the throughput ratio to the first is printed (the generated
    /// events are in order: this is what keeping events for late results costs)
    #[arg(long, default_value = "0", value_delimiter = ',', value_name = "LIST")]
    lateness: Vec<String>,

    /// Make every N-th event late: its time moves back by half the allowed lateness, so
    /// it arrives out of order within the lateness and gets its own exact result (needs
    /// a --lateness above 0; 0 keeps the stream in order)
    #[arg(long, default_value_t = 0, value_name = "N")]
    late_every: u64,

    /// Mean payments per second of event time
    #[arg(long, default_value_t = 2_000.0, value_name = "RATE")]
    rate: f64,

    /// Stores, comma-separated; ratios are printed relative to the last one [default:
    /// hashlog, mem, adaptive and rocksdb if built in]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    stores: Option<Vec<StoreKind>>,

    /// Memory budget of every store
    #[arg(long, default_value = "2GiB", value_parser = parse_size, value_name = "SIZE")]
    memory_budget: u64,

    /// Generate events on the fly inside the timed loop instead of before it (bounded
    /// memory for very long runs; generation time is then included)
    #[arg(long)]
    stream: bool,

    /// Generator seed
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Events read ahead and announced to the store at a time, so it can prefetch their
    /// state (the job's default); 1 processes events one at a time with no announcement
    #[arg(long, default_value_t = spillway_engine::driver::BATCH_EVENTS, value_name = "N")]
    batch: usize,

    /// Write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Internal: run one (window, store) and write its result as JSON to FILE
    #[arg(long, hide = true, value_name = "FILE")]
    child_json: Option<PathBuf>,
}

/// `spillway bench engine`.
pub fn bench_engine(a: EngineBenchArgs) -> Result<()> {
    use spillway_bench::engine_bench::{run_q1, Q1Config, Q1Result};
    let stores = a.stores.clone().unwrap_or_else(spillway_bench::store_bench::available_stores);
    let lateness_ms: Vec<i64> = a
        .lateness
        .iter()
        .map(|l| parse_duration(l, TimeUnit::Ms).map_err(|e| anyhow!("--lateness: {e}")))
        .collect::<Result<_>>()?;
    if lateness_ms.len() > 1 && (a.windows.len() > 1 || a.together) {
        bail!("several --lateness values need a single window (and no --together)");
    }
    let cfg_for = |w: &str| -> Result<Q1Config> {
        Ok(Q1Config {
            payments: PaymentOptions {
                seed: a.seed,
                events: a.events,
                cards: a.cards,
                merchants: 1,
                zipf: a.zipf,
                events_per_second: a.rate,
                ..PaymentOptions::default()
            },
            window_ms: parse_duration(w, TimeUnit::Ms).map_err(|e| anyhow!("--windows: {e}"))?,
            extra_windows_ms: Vec::new(),
            allowed_lateness_ms: lateness_ms[0],
            memory_budget: a.memory_budget,
            expected_keys: Some(a.cards),
            pregenerate: !a.stream,
            batch: a.batch.max(1),
            late_every: a.late_every,
        })
    };
    if a.late_every > 0 && lateness_ms.iter().all(|&l| l < 2) {
        bail!("--late-every needs an allowed lateness of at least 2 ms (--lateness)");
    }
    let mut rows: Vec<(Q1Result, u64)> = Vec::new();
    if let Some(path) = &a.child_json {
        let (cfg, s) = match (a.windows.as_slice(), stores.as_slice(), a.together) {
            ([w], [s], false) => (cfg_for(w)?, *s),
            ([w, rest @ ..], [s], true) => {
                let mut cfg = cfg_for(w)?;
                for r in rest {
                    cfg.extra_windows_ms.push(cfg_for(r)?.window_ms);
                }
                (cfg, *s)
            }
            _ => bail!(
                "--child-json runs exactly one window (or, with --together, one job) and one store"
            ),
        };
        spillway_bench::machine::reset_peak_rss();
        let r = run_q1(&cfg, s, &mut |_| {})?;
        let peak = spillway_bench::machine::peak_rss_bytes();
        std::fs::write(path, serde_json::to_string(&(r, peak))?)?;
        return Ok(());
    }
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::new(
            a.events * ((a.windows.len() + usize::from(a.together)) * stores.len()) as u64,
        )
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} events {msg} ({eta})")
            .expect("template"),
    );
    if a.together && a.windows.len() < 2 {
        bail!("--together needs at least two --windows");
    }
    let separate = a.windows.len() > 1;
    // Each window alone, then (with --together) all windows in one job per store.
    let mut runs: Vec<(String, bool, i64)> = Vec::new();
    for w in &a.windows {
        for &l in &lateness_ms {
            runs.push((w.clone(), false, l));
        }
    }
    if a.together {
        runs.push((a.windows.join(","), true, lateness_ms[0]));
    }
    for (w, together, lateness) in &runs {
        for &s in &stores {
            pb.set_message(format!("window {w}, store {}", s.name()));
            let done = pb.position();
            if separate {
                let tmp = tempfile::NamedTempFile::new()?;
                let exe = std::env::current_exe()?;
                let mut cmd = std::process::Command::new(exe);
                cmd.args(["bench", "engine", "--events", &a.events.to_string()])
                    .args(if *together { &["--together"][..] } else { &[][..] })
                    .args(["--cards", &a.cards.to_string(), "--windows", w])
                    .args(["--zipf", &a.zipf.to_string()])
                    .args(["--rate", &a.rate.to_string(), "--stores", s.name()])
                    .args(["--lateness", &format!("{lateness}ms")])
                    .args(["--late-every", &a.late_every.to_string()])
                    .args([
                        "--memory-budget",
                        &a.memory_budget.to_string(),
                        "--seed",
                        &a.seed.to_string(),
                        "--batch",
                        &a.batch.to_string(),
                    ])
                    .arg("--child-json")
                    .arg(tmp.path());
                if a.stream {
                    cmd.arg("--stream");
                }
                let st = cmd.status()?;
                if !st.success() {
                    bail!("child run for window {w} on {} failed", s.name());
                }
                rows.push(serde_json::from_str(&std::fs::read_to_string(tmp.path())?)?);
                pb.set_position(done + a.events);
            } else {
                spillway_bench::machine::reset_peak_rss();
                let cfg = Q1Config { allowed_lateness_ms: *lateness, ..cfg_for(w)? };
                let r = run_q1(&cfg, s, &mut |n| pb.set_position(done + n))?;
                rows.push((r, spillway_bench::machine::peak_rss_bytes()));
            }
        }
    }
    pb.finish_and_clear();
    println!(
        "Railgun Q1: SUM(amount), COUNT(*) per card, {} events, {} cards ({}), {} payments/s of event time{}",
        a.events,
        a.cards,
        if a.zipf > 0.0 { format!("zipf {}", a.zipf) } else { "uniform".to_string() },
        a.rate,
        if a.stream { ", generated inside the timed loop" } else { ", pre-generated in memory" }
    );
    println!(
        "{:<8} {:<9} {:>12} {:>8} {:>12} {:>8} {:>8} {:>8} {:>9} {:>10}",
        "window",
        "store",
        "in window",
        "seconds",
        "events/s",
        "p50 us",
        "p99 us",
        "p99.9us",
        "max us",
        "peak RSS"
    );
    for (r, peak) in &rows {
        println!(
            "{:<8} {:<9} {:>12} {:>8.2} {:>12.0} {:>8.2} {:>8.2} {:>8.2} {:>9.0} {:>10}",
            if r.windows > 1 {
                format!("{} wins", r.windows)
            } else {
                if r.allowed_lateness_ms > 0 {
                    format!("{}ms L{}ms", r.window_ms, r.allowed_lateness_ms)
                } else {
                    format!("{}ms", r.window_ms)
                }
            },
            r.store,
            r.max_events_in_window,
            r.seconds,
            r.events_per_sec,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            spillway_bench::units::format_bytes(*peak)
        );
    }
    for (r, _) in rows.iter().filter(|(r, _)| r.late_events > 0) {
        println!(
            "store {}, lateness {}ms: {} events arrived late (within the lateness) and got their own exact results, reading {:.1} recent events each",
            r.store, r.allowed_lateness_ms, r.late_events,
            r.late_examined as f64 / r.late_events as f64
        );
    }
    if stores.len() > 1 {
        let last = stores.len() - 1;
        for (wi, w) in a.windows.iter().enumerate() {
            let base = &rows[wi * stores.len() + last].0;
            for si in 0..last {
                let r = &rows[wi * stores.len() + si].0;
                println!(
                    "window {w}: {} / {} throughput = {:.1}x",
                    r.store,
                    base.store,
                    r.events_per_sec / base.events_per_sec
                );
            }
        }
    }
    for (li, l) in a.lateness.iter().enumerate().skip(1) {
        for (si, s) in stores.iter().enumerate() {
            let base = &rows[si].0;
            let r = &rows[li * stores.len() + si].0;
            println!(
                "store {}: lateness {l} vs {}: throughput ratio {:.3}",
                s.name(),
                a.lateness[0],
                r.events_per_sec / base.events_per_sec
            );
        }
    }
    if a.together {
        let longest = (0..a.windows.len())
            .max_by_key(|&wi| rows[wi * stores.len()].0.window_ms)
            .expect("at least two windows");
        for (si, s) in stores.iter().enumerate() {
            let (one, one_peak) = &rows[longest * stores.len() + si];
            let (all, all_peak) = &rows[a.windows.len() * stores.len() + si];
            println!(
                "store {}: {} windows in one job vs window {} alone: peak RSS ratio {:.3}, throughput ratio {:.3}",
                s.name(),
                a.windows.len(),
                a.windows[longest],
                *all_peak as f64 / (*one_peak).max(1) as f64,
                all.events_per_sec / one.events_per_sec
            );
        }
    }
    if a.windows.len() > 1 {
        for (si, s) in stores.iter().enumerate() {
            let (b, bpeak) = &rows[si];
            for wi in 1..a.windows.len() {
                let (r, peak) = &rows[wi * stores.len() + si];
                println!(
                    "store {}: window {} vs {}: throughput ratio {:.3}, peak RSS ratio {:.3}",
                    s.name(),
                    a.windows[wi],
                    a.windows[0],
                    r.events_per_sec / b.events_per_sec,
                    *peak as f64 / (*bpeak).max(1) as f64
                );
            }
        }
    }
    if let Some(path) = &a.json {
        let j = serde_json::json!({
            "machine": spillway_bench::machine::MachineInfo::detect(),
            "date": spillway_bench::machine::today_utc(),
            "events": a.events,
            "cards": a.cards,
            "rate": a.rate,
            "stream": a.stream,
            "rows": rows.iter().map(|(r, p)| serde_json::json!({"result": r, "peak_rss_bytes": p})).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")?;
    }
    Ok(())
}
