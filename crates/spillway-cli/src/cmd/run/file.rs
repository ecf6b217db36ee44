//! `spillway run --input FILE`: the file job, argument handling and printing around
//! `spillway_engine::job`.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use clap::Args;
use spillway_bench::units::parse_count;
use spillway_engine::checkpoint::Input;
use spillway_engine::duration::parse_duration;
use spillway_engine::job::{run_job, HaltPoint, JobConfig, OpenAt};
use spillway_engine::source::{self, OnError, Source, SourceOptions};

use super::job::{metrics_server, JobArgs};
use crate::cmd::args::{check_from, read_query, source_options, OnErrorArg, FILE_TABLE};
use crate::cmd::progress::{progress_bar, progress_message};
use crate::cmd::summary::print_summary;

/// The flags only a file job uses (`--input FILE`); a Kafka worker refuses each, saying
/// what it does instead.
#[derive(Debug, Args)]
#[command(next_help_heading = "File job (--input FILE)")]
pub struct FileJobArgs {
    /// Where events later than the allowed lateness are written (default:
    /// `<output>.late.<ext>`, or late-events.csv when writing to stdout, a FIFO
    /// or a device)
    #[arg(long, value_name = "FILE")]
    pub(crate) side_output: Option<PathBuf>,

    /// Malformed input rows: stop (default) or skip to the dead-letter file
    #[arg(long, value_enum)]
    pub(crate) on_error: Option<OnErrorArg>,

    /// Dead-letter file for --on-error skip [default: <input>.dead-letter]
    #[arg(long, value_name = "FILE")]
    pub(crate) dead_letter: Option<PathBuf>,

    /// Checkpoint every N input events (with --checkpoint-dir) [default: 1M; a --resume
    /// or --backfill keeps the checkpoint's]; 0 makes no checkpoints (the directory then
    /// holds only the run's state and a --resume starts over)
    #[arg(long, value_parser = parse_count, value_name = "N")]
    pub(crate) checkpoint_events: Option<u64>,

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

    /// Internal (tests): after N input events in total (and the checkpoint on that
    /// event, if any), flush the output files, create --halt-marker and wait to be killed
    #[arg(long, hide = true, value_name = "N", requires = "halt_marker")]
    pub(crate) halt_after: Option<u64>,

    /// Internal (tests): the file --halt-after creates
    #[arg(long, hide = true, value_name = "FILE", requires = "halt_after")]
    pub(crate) halt_marker: Option<PathBuf>,
}

/// `spillway run --input FILE` (the worker flags were refused by the caller).
pub fn run(a: JobArgs, f: FileJobArgs) -> Result<()> {
    if a.output.as_ref().and_then(|o| o.to_str()).is_some_and(|s| s.starts_with("kafka://")) {
        bail!("a kafka:// output needs a kafka:// input (a worker of --group); write a file output and `spillway kafka produce` it instead");
    }
    // Not given: the checkpoint's interval on a resume, else the default (1M).
    let checkpoint_every =
        match (f.checkpoint_events, &a.checkpoint_every) {
            (Some(n), _) => Some(n),
            (None, Some(s)) => Some(parse_count(s).map_err(|e| {
                anyhow!("--checkpoint-every: {e} (a count of input events, e.g. 1M)")
            })?),
            (None, None) => None,
        };
    // The metrics address is taken first: a bad or busy one fails before anything runs.
    let (metrics, _metrics_server) = metrics_server(a.metrics_addr.as_deref())?;
    let query = read_query(&a.query)?;
    check_from(&query, a.table.as_deref(), source::table_name(&a.input), FILE_TABLE)?;
    let on_error = match f.on_error.unwrap_or(OnErrorArg::Stop) {
        OnErrorArg::Stop => OnError::Stop,
        OnErrorArg::Skip => OnError::Skip {
            dead_letter: f.dead_letter.clone().unwrap_or_else(|| {
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
    if f.resume && a.input == Path::new("-") {
        bail!("--resume cannot re-read stdin; give the input as a file");
    }
    let retain = match &f.retain {
        Some(r) => Some(parse_duration(r, sopts.time_unit).map_err(|e| anyhow!("--retain: {e}"))?),
        None => None,
    };
    let cfg = JobConfig {
        query,
        // `-` is stdout, as when no --output is given.
        output: a.output.clone().filter(|p| p != Path::new("-")),
        discard_output: false,
        side_output: f.side_output.clone(),
        store: a.store,
        tiered: a.tier_args.options(a.store, a.memory_budget)?,
        memory_budget: a.memory_budget,
        expected_keys: a.expected_keys,
        allowed_lateness: lateness,
        watermark_delay,
        checkpoint_dir: a.checkpoint_dir.clone(),
        checkpoint_every,
        resume: f.resume,
        compression: a.compression.into(),
        input: Input::file(&a.input, &sopts),
        reservoir_chunk_events: a
            .reservoir_chunk_events
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        reservoir_segment_bytes: a.reservoir_segment_bytes,
        halt: match (f.halt_after, &f.halt_marker) {
            (Some(events), Some(marker)) => Some(HaltPoint { events, marker: marker.clone() }),
            _ => None,
        },
        backfill: f.backfill,
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
