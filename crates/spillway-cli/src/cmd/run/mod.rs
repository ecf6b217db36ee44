//! `spillway run`: a SQL metrics query over an input file ([`file`]), or, with a
//! `kafka://` input, this process as a worker of a Kafka consumer group ([`worker`]).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::metrics::{serve as serve_metrics, Metrics, MetricsServer};
use spillway_engine::operator::over::peers::Ties;
use spillway_store::StoreKind;

use crate::cmd::args::{CompressionArg, InputArgs, OnErrorArg, TierArgs};

pub mod file;
#[cfg(feature = "kafka")]
pub mod worker;

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
        // Every flag is used or refused in `worker::worker_config`.
        #[cfg(feature = "kafka")]
        return worker::run_worker(a);
        #[cfg(not(feature = "kafka"))]
        anyhow::bail!("--input {}: this spillway was built without Kafka support; build it with `cargo build --release --features kafka` (needs librdkafka-dev)", a.input.display());
    }
    file::run(a)
}
