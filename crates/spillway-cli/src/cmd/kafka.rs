//! `spillway kafka produce|consume|status`: argument handling and printing around
//! `spillway_engine::kafka` (the workers are `spillway run --input kafka://...`).

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use spillway_engine::kafka::check_topic_name;
use spillway_engine::kafka::consume::{consume, ConsumeConfig};
use spillway_engine::kafka::produce::{produce, Mode, ProduceConfig};
use spillway_engine::kafka::status::{group_status, render_table};
use spillway_engine::source::OnError;

use crate::cmd::args::{source_options, wall_duration, InputArgs};
use crate::cmd::progress::progress_bar;

/// `spillway kafka ...`.
#[derive(Debug, Subcommand)]
pub enum KafkaCommand {
    /// Write a CSV / JSON Lines file to a topic, one message per row (creates the topic
    /// and its schema topic). Every row is checked before the first is sent; rows go out
    /// in transactions; a topic that already holds messages needs --resume or --append.
    Produce(ProduceArgs),
    /// Read a result (or event) topic's committed messages into a CSV / JSON Lines file.
    Consume(ConsumeArgs),
    /// Show a consumer group (the workers of a job): its members and the partitions each
    /// owns, and per partition the committed offset, the end (last stable offset) and the
    /// lag. Reads without joining the group.
    Status(StatusArgs),
}

/// `spillway kafka status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Bootstrap servers, e.g. 127.0.0.1:9092
    #[arg(long, value_name = "HOST:PORT,...")]
    brokers: String,
    /// Consumer group (a job's --group)
    #[arg(long, value_name = "G")]
    group: String,
    /// Write the status as JSON to FILE instead of printing a table; `--json` alone (or
    /// `--json -`) prints the JSON on stdout
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub(crate) json: Option<PathBuf>,
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
    /// Continue an interrupted produce of the same file: check that the topic's newest
    /// committed row is the file's, then send the rows after it
    #[arg(long, conflicts_with = "append")]
    resume: bool,
    /// Send the file to a topic that already holds messages, as new events (their ids
    /// follow the topic's highest)
    #[arg(long)]
    append: bool,
    /// Commit a transaction this often (readers see rows as they are committed)
    #[arg(long, default_value = "100ms", value_name = "DURATION")]
    commit_every: String,
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
                mode: match (a.resume, a.append) {
                    (true, _) => Mode::Resume,
                    (_, true) => Mode::Append,
                    _ => Mode::New,
                },
                commit_every: wall_duration(&a.commit_every, "--commit-every")?,
            };
            let pb = progress_bar(a.quiet);
            let s = produce(&cfg, |n| pb.set_message(format!("{n} messages sent")))?;
            pb.finish_and_clear();
            let mut notes = Vec::new();
            if s.first_row >= s.rows && s.rows > 0 {
                notes.push(format!("all {} rows were already committed", s.rows));
            } else if s.first_row > 0 {
                notes.push(format!(
                    "rows {} to {} of {}; the first {} were already committed",
                    s.first_row,
                    s.rows - 1,
                    s.rows,
                    s.first_row
                ));
            }
            if s.id_base > 0 {
                notes.push(format!("event ids from {}", s.id_base));
            }
            if cfg.rate.is_some() {
                notes.push(format!("at most {:.1} ms behind the schedule", s.max_behind_ms));
            }
            eprintln!(
                "{} messages to {} ({} partitions) in {} transactions, {:.2} s ({:.0}/s){}",
                s.messages,
                cfg.topic,
                s.partitions,
                s.transactions,
                s.seconds,
                s.per_sec,
                notes.iter().map(|n| format!("; {n}")).collect::<String>()
            );
            Ok(())
        }
        KafkaCommand::Status(a) => {
            let s = group_status(&a.brokers, &a.group)?;
            match &a.json {
                Some(p) if p.as_os_str() == "-" => {
                    println!("{}", serde_json::to_string_pretty(&s)?);
                }
                Some(p) => {
                    let body = serde_json::to_string_pretty(&s)?;
                    std::fs::write(p, body + "\n")
                        .map_err(|e| anyhow!("cannot write {}: {e}", p.display()))?;
                }
                None => print!("{}", render_table(&s)),
            }
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
