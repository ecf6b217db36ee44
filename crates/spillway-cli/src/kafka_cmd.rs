//! `spillway kafka produce|consume` and the worker mode of `spillway run` (a kafka://
//! input): argument handling and printing around `spillway_engine::kafka`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use spillway_engine::duration::parse_duration;
use spillway_engine::kafka::consume::{consume, ConsumeConfig};
use spillway_engine::kafka::produce::{produce, ProduceConfig};
use spillway_engine::kafka::worker::{run_worker as worker, WorkerConfig};
use spillway_engine::kafka::{check_topic_name, KafkaUrl};
use spillway_engine::session::SessionConfig;
use spillway_engine::source::OnError;
use spillway_engine::value::TimeUnit;

use crate::engine_cmd::{check_from, progress_bar, read_query, source_options, InputArgs, RunArgs};

/// `spillway kafka ...`.
#[derive(Debug, Subcommand)]
pub enum KafkaCommand {
    /// Write a CSV / JSON Lines file to a topic, one message per row (creates the topic
    /// and its schema topic).
    Produce(ProduceArgs),
    /// Read a result (or event) topic's committed messages into a CSV / JSON Lines file.
    Consume(ConsumeArgs),
}

/// `spillway kafka produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Bootstrap servers, e.g. 127.0.0.1:9092
    #[arg(long, value_name = "HOST:PORT,...")]
    brokers: String,
    /// Topic to write
    #[arg(long, value_name = "T")]
    topic: String,
    /// Input file, CSV (with header) or JSON Lines by extension
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Column whose value keys each message (Kafka hashes the key to a partition)
    #[arg(long, value_name = "COL")]
    key: Option<String>,
    /// Partitions of the topic if it is created here (an existing topic must match)
    #[arg(long, value_name = "N")]
    partitions: Option<i32>,
    /// Send at this many events per second, open loop [default: as fast as possible]
    #[arg(long, value_name = "EV_PER_S")]
    rate: Option<f64>,
    #[command(flatten)]
    input_args: InputArgs,
    /// No progress line on stderr
    #[arg(long, short)]
    quiet: bool,
}

/// `spillway kafka consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Bootstrap servers, e.g. 127.0.0.1:9092
    #[arg(long, value_name = "HOST:PORT,...")]
    brokers: String,
    /// Topic to read
    #[arg(long, value_name = "T")]
    topic: String,
    /// Output file, CSV or JSON Lines by extension [default: CSV on stdout]
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Stop after N rows
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    /// Stop after this long in all, e.g. 30s
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    timeout: String,
    /// Write the rows in event-id order (the input's row order): for a complete result
    /// topic, the file `spillway run` writes for the same input
    #[arg(long)]
    sort: bool,
    /// Add the event id as a first column `event_id`
    #[arg(long)]
    with_id: bool,
    /// Measure end-to-end latency: read time minus each message's timestamp (the time an
    /// event was due with `kafka produce --rate`); prints p50/p99/p99.9/max
    #[arg(long)]
    latency: bool,
    /// With --latency, write one CSV line per message: consumed_unix_ms,latency_ms,partition
    #[arg(long, value_name = "FILE", requires = "latency")]
    latency_log: Option<PathBuf>,
    /// Also write the summary as JSON to this file
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// No progress line on stderr
    #[arg(long, short)]
    quiet: bool,
}

fn wall_duration(s: &str, flag: &str) -> Result<std::time::Duration> {
    let ns = parse_duration(s, TimeUnit::Ns).map_err(|e| anyhow!("{flag}: {e}"))?;
    if ns <= 0 {
        bail!("{flag}: must be positive, not {s}");
    }
    Ok(std::time::Duration::from_nanos(ns as u64))
}

/// Runs a `spillway kafka` command.
pub fn run(cmd: KafkaCommand) -> Result<()> {
    match cmd {
        KafkaCommand::Produce(a) => {
            check_topic_name(&a.topic).map_err(|e| anyhow!("--topic: {e}"))?;
            let cfg = ProduceConfig {
                brokers: a.brokers,
                topic: a.topic,
                input: a.input,
                source: source_options(&a.input_args, OnError::Stop)?,
                key: a.key,
                partitions: a.partitions,
                rate: a.rate,
            };
            let pb = progress_bar(a.quiet);
            let s = produce(&cfg, |n| pb.set_message(format!("{n} messages sent")))?;
            pb.finish_and_clear();
            eprintln!(
                "{} messages to {} ({} partitions) in {:.2} s ({:.0}/s){}",
                s.messages,
                cfg.topic,
                s.partitions,
                s.seconds,
                s.per_sec,
                if cfg.rate.is_some() {
                    format!("; at most {:.1} ms behind the schedule", s.max_behind_ms)
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        KafkaCommand::Consume(a) => {
            check_topic_name(&a.topic).map_err(|e| anyhow!("--topic: {e}"))?;
            let cfg = ConsumeConfig {
                brokers: a.brokers,
                topic: a.topic,
                output: a.output,
                count: a.count,
                timeout: wall_duration(&a.timeout, "--timeout")?,
                sort: a.sort,
                with_id: a.with_id,
                latency: a.latency,
                latency_log: a.latency_log,
            };
            let pb = progress_bar(a.quiet);
            let s = consume(&cfg, |n| pb.set_message(format!("{n} rows")))?;
            pb.finish_and_clear();
            eprintln!(
                "{} rows from {} in {:.2} s; {} event ids seen more than once",
                s.rows, cfg.topic, s.seconds, s.duplicate_ids
            );
            if let Some(l) = &s.latency {
                eprintln!(
                    "end-to-end latency over {} messages: p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms{}",
                    l.count,
                    l.p50_ms,
                    l.p99_ms,
                    l.p999_ms,
                    l.max_ms,
                    if l.unstamped > 0 { format!(" ({} without a timestamp)", l.unstamped) } else { String::new() }
                );
            }
            if let Some(p) = &a.json {
                let body = serde_json::to_string_pretty(&s)?;
                std::fs::write(p, body + "\n")
                    .map_err(|e| anyhow!("cannot write {}: {e}", p.display()))?;
            }
            if s.timed_out {
                bail!(
                    "timed out after {} with {} of {} rows",
                    a.timeout,
                    s.rows,
                    cfg.count.unwrap_or_default()
                );
            }
            Ok(())
        }
    }
}

/// `spillway run --input kafka://B/T --output kafka://B/OUT --group G --checkpoint-dir DIR`.
pub fn run_worker(a: RunArgs) -> Result<()> {
    let input_s = a.input.to_string_lossy().into_owned();
    let input = KafkaUrl::parse(&input_s).expect("a kafka:// input")?;
    let Some(out) = a.output.as_ref().map(|o| o.to_string_lossy().into_owned()) else {
        bail!("a Kafka worker needs --output kafka://HOST:PORT/TOPIC (the result topic)");
    };
    let output = match KafkaUrl::parse(&out) {
        Some(u) => u?,
        None => bail!("--output {out}: a Kafka worker writes to a topic, kafka://HOST:PORT/TOPIC"),
    };
    if output.brokers != input.brokers {
        bail!("--input and --output must name the same brokers (one transaction covers both)");
    }
    let Some(group) = a.group.clone() else {
        bail!("a Kafka worker needs --group G (every worker of the job uses the same group)");
    };
    let Some(dir) = a.checkpoint_dir.clone() else {
        bail!("a Kafka worker needs --checkpoint-dir DIR (shared by the workers: a partition's new owner restores from it)");
    };
    if a.resume {
        bail!("--resume is implied for Kafka workers: each partition continues from its checkpoint in --checkpoint-dir");
    }
    if a.side_output.is_some()
        || a.dead_letter.is_some()
        || a.on_error != crate::engine_cmd::OnErrorArg::Stop
    {
        bail!(
            "a Kafka worker sends late events to {0}.late and malformed messages to {0}.dead-letter; \
             --side-output, --dead-letter and --on-error are for file inputs",
            output.topic
        );
    }
    if a.input_args.schema.is_some() {
        bail!(
            "--schema: a Kafka worker takes the schema from the topic's schema topic ({}.schema)",
            input.topic
        );
    }
    let checkpoint_every =
        wall_duration(a.checkpoint_every.as_deref().unwrap_or("1s"), "--checkpoint-every")?;
    // Default: 100 ms, or the checkpoint interval when that is shorter.
    let commit_every = match a.commit_every.as_deref() {
        Some(c) => wall_duration(c, "--commit-every")?,
        None => checkpoint_every.min(std::time::Duration::from_millis(100)),
    };
    if commit_every > checkpoint_every {
        bail!(
            "--commit-every ({}) must not be longer than --checkpoint-every ({}): a checkpoint covers only committed input",
            a.commit_every.as_deref().unwrap_or_default(),
            a.checkpoint_every.as_deref().unwrap_or("1s")
        );
    }
    let idle_exit = a.idle_exit.as_deref().map(|s| wall_duration(s, "--idle-exit")).transpose()?;
    let query = read_query(&a.query)?;
    check_from(&query, a.table.as_deref(), Some(input.topic.clone()), "the input topic's name")?;
    let mut session = SessionConfig::new(query);
    session.store = a.store;
    session.tiered = a.tier_args.options(a.store, a.memory_budget)?;
    session.memory_budget = a.memory_budget;
    session.expected_keys = a.expected_keys;
    session.compression = a.compression.into();
    // The lateness is in the topic's time unit, known once its schema is read; the
    // worker converts it (a plain number is already in that unit).
    session.allowed_lateness = 0;
    let route_partitions = a.route_partitions.unwrap_or(4);
    if route_partitions < 1 {
        bail!("--route-partitions: a topic needs at least 1 partition, not {route_partitions}");
    }
    let cfg = WorkerConfig {
        route_partitions,
        brokers: input.brokers,
        input: input.topic,
        output: output.topic,
        group,
        dir,
        commit_every,
        checkpoint_every,
        worker_id: a.worker_id.clone(),
        session,
        idle_exit,
        allowed_lateness: a.allowed_lateness.clone(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let pb = progress_bar(a.quiet);
    let s = worker(&cfg, &stop, |n| pb.set_message(format!("{n} events")))?;
    pb.finish_and_clear();
    if !a.quiet {
        eprintln!(
            "{} events in {:.2} s ({} messages, {} replayed after a restore), {} results, {} late, {} malformed; {} routed, {} partial results; {} transactions committed, {} checkpoints, {} rebalances (longest rebuild {:.0} ms), {} producer resets",
            s.events, s.seconds, s.messages, s.replayed, s.emitted, s.late, s.dead_letters, s.routed, s.partials, s.commits, s.checkpoints, s.rebalances, s.longest_rebuild_ms, s.producer_resets
        );
        if s.events > 0 {
            let busy = (s.last_event_ms - s.first_event_ms) / 1e3;
            eprintln!(
                "busy from unix ms {:.0} to {:.0}: {:.0} events/s over {busy:.2} s",
                s.first_event_ms,
                s.last_event_ms,
                s.events as f64 / busy.max(1e-9)
            );
        }
    }
    Ok(())
}
