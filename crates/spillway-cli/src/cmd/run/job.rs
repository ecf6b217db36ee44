//! The flags of `spillway run` that the file job and the Kafka worker share (the query,
//! the input and output, the state store and the reservoir), and the metrics endpoint
//! both serve.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use spillway_bench::units::{parse_count, parse_size};
use spillway_engine::metrics::{serve as serve_metrics, Metrics, MetricsServer};
use spillway_engine::operator::over::peers::Ties;
use spillway_store::StoreKind;

use crate::cmd::args::{CompressionArg, InputArgs, TierArgs};

/// `spillway run`'s flags for a file job and a Kafka worker alike (a worker refuses some
/// values, saying why).
#[derive(Debug, Args)]
pub struct JobArgs {
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

    /// Directory for the state store, event reservoir and checkpoints [default: a
    /// temporary directory, removed at the end; a Kafka worker needs one]
    #[arg(long, value_name = "DIR")]
    pub(crate) checkpoint_dir: Option<PathBuf>,

    /// Compression of the reservoir's chunks
    #[arg(long, value_enum, default_value = "lz4")]
    pub(crate) compression: CompressionArg,

    /// Internal (tests): events per reservoir chunk [default: 4096]
    #[arg(long, hide = true, value_parser = parse_count, value_name = "N")]
    pub(crate) reservoir_chunk_events: Option<u64>,

    /// Internal (tests): size at which reservoir segment files roll [default: 64MiB]
    #[arg(long, hide = true, value_parser = parse_size, value_name = "SIZE")]
    pub(crate) reservoir_segment_bytes: Option<u64>,

    /// No progress line on stderr (warnings, errors and the final summary still show)
    #[arg(long, short)]
    pub(crate) quiet: bool,

    /// The spelling before --checkpoint-events (a file job's count of input events) and
    /// --checkpoint-interval (a Kafka worker's duration), which it means by the input;
    /// kept for one release
    #[arg(
        long,
        hide = true,
        value_name = "N|DURATION",
        conflicts_with_all = ["checkpoint_events", "checkpoint_interval"]
    )]
    pub(crate) checkpoint_every: Option<String>,
}

impl JobArgs {
    /// Whether the input is a Kafka topic (`kafka://...`): this process is then a worker.
    pub(crate) fn kafka_input(&self) -> bool {
        self.input.to_str().is_some_and(|s| s.starts_with("kafka://"))
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
