//! `spillway run --input FILE`: the file job, argument handling and printing around
//! `spillway_engine::job`.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use spillway_bench::units::parse_count;
use spillway_engine::checkpoint::Input;
use spillway_engine::duration::parse_duration;
use spillway_engine::job::{run_job, HaltPoint, JobConfig, OpenAt};
use spillway_engine::source::{self, OnError, Source, SourceOptions};

use super::{metrics_server, RunArgs};
use crate::cmd::args::{check_from, read_query, source_options, OnErrorArg, FILE_TABLE};
use crate::cmd::progress::{progress_bar, progress_message};
use crate::cmd::summary::print_summary;

/// `spillway run` on a file.
pub fn run(a: RunArgs) -> Result<()> {
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
