//! `spillway run --input kafka://B/T`: this process as a worker of a Kafka consumer
//! group, argument handling and printing around `spillway_engine::kafka::worker`.

//! [`WorkerArgs`] is part of the command tree in every build (a file job refuses its
//! flags); running a worker needs the `kafka` feature.

#[cfg(feature = "kafka")]
use std::sync::atomic::AtomicBool;
#[cfg(feature = "kafka")]
use std::sync::Arc;

#[cfg(feature = "kafka")]
use anyhow::{bail, Result};
use clap::Args;
#[cfg(feature = "kafka")]
use spillway_engine::kafka::worker::{run_worker as worker, WorkerConfig};
#[cfg(feature = "kafka")]
use spillway_engine::kafka::KafkaUrl;
#[cfg(feature = "kafka")]
use spillway_engine::session::SessionConfig;

#[cfg(feature = "kafka")]
use super::file::FileJobArgs;
#[cfg(feature = "kafka")]
use super::job::{metrics_server, JobArgs};
#[cfg(feature = "kafka")]
use crate::cmd::args::{check_from, is_bare_number, read_query, wall_duration, OnErrorArg};
#[cfg(feature = "kafka")]
use crate::cmd::progress::progress_bar;

/// The flags only a Kafka worker uses (`--input kafka://B/T`); a file job refuses each.
#[derive(Debug, Args)]
#[command(next_help_heading = "Kafka worker (--input kafka://HOST:PORT/TOPIC)")]
pub struct WorkerArgs {
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
    /// readers at this pace (with a kafka:// input; at most --checkpoint-interval)
    /// [default: 100ms]
    #[arg(long, value_name = "DURATION")]
    pub(crate) commit_every: Option<String>,

    /// Checkpoint the tasks' state this often, e.g. 1s: a restarted or new owner of a
    /// partition replays the input since its last checkpoint [default: 1s]
    #[arg(long, value_name = "DURATION")]
    pub(crate) checkpoint_interval: Option<String>,

    /// Stop after a final commit and checkpoint once, for this long, no event arrived
    /// and every assigned partition was read to its end, counted from the last rebalance
    /// (with a kafka:// input; default: run until SIGINT/SIGTERM)
    #[arg(long, value_name = "DURATION")]
    pub(crate) idle_exit: Option<String>,
}

impl WorkerArgs {
    /// The first worker flag given, which a file job refuses.
    pub(crate) fn first_given(&self) -> Option<&'static str> {
        [
            ("--group", self.group.is_some()),
            ("--worker-id", self.worker_id.is_some()),
            ("--checkpoint-store", self.checkpoint_store.is_some()),
            ("--idle-exit", self.idle_exit.is_some()),
            ("--commit-every", self.commit_every.is_some()),
            ("--route-partitions", self.route_partitions.is_some()),
            ("--checkpoint-interval", self.checkpoint_interval.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

/// The worker's configuration from `spillway run`'s flags (`--input kafka://B/T`). Every
/// flag is either used or refused here with the reason (the file job's [`FileJobArgs`]
/// all are; the README's Kafka section lists them); the time flags are checked against
/// the topic's schema by the worker
/// ([`spillway_engine::kafka::worker::check_time_flags`]). Contacts nothing.
#[cfg(feature = "kafka")]
pub(crate) fn worker_config(a: &JobArgs, w: &WorkerArgs, f: &FileJobArgs) -> Result<WorkerConfig> {
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
    let Some(group) = w.group.clone() else {
        bail!("a Kafka worker needs --group G (every worker of the job uses the same group)");
    };
    let Some(dir) = a.checkpoint_dir.clone() else {
        bail!("a Kafka worker needs --checkpoint-dir DIR (shared by the workers: a partition's new owner restores from it; or each worker's own, with --checkpoint-store URL)");
    };
    let out_t = &output.topic;
    // File-job flags a worker has no use for: refused, saying what the worker does instead.
    let refused = [
        (
            f.backfill,
            "--backfill works on a file input's checkpoints (--input FILE), not on Kafka \
             workers: a worker's --checkpoint-dir holds one query's state; run a changed query \
             under a new --group and --checkpoint-dir"
                .to_string(),
        ),
        (
            f.retain.is_some(),
            "--retain keeps a file job's reservoir for a later --backfill (--input FILE); \
             Kafka workers do not backfill"
                .to_string(),
        ),
        (
            f.resume,
            "--resume is implied for Kafka workers: each partition continues from its \
             checkpoint in --checkpoint-dir"
                .to_string(),
        ),
        (
            f.side_output.is_some(),
            format!("--side-output: a Kafka worker sends late events to the topic {out_t}.late"),
        ),
        (
            f.dead_letter.is_some(),
            format!(
                "--dead-letter: a Kafka worker sends malformed messages to the topic \
                 {out_t}.dead-letter"
            ),
        ),
        (
            f.on_error == Some(OnErrorArg::Stop),
            format!(
                "--on-error stop: a Kafka worker does not stop on a malformed message; it sends \
                 it to the topic {out_t}.dead-letter and goes on (--on-error skip)"
            ),
        ),
        (
            a.input_args.schema.is_some(),
            format!(
                "--schema: a Kafka worker takes the schema from the topic's schema topic ({}.schema)",
                input.topic
            ),
        ),
        (
            f.checkpoint_events.is_some(),
            "--checkpoint-events counts a file job's input events; a Kafka worker checkpoints \
             by time: --checkpoint-interval DURATION"
                .to_string(),
        ),
        (
            f.halt_after.is_some() || f.halt_marker.is_some(),
            "--halt-after and --halt-marker are test hooks of file jobs; stop a Kafka worker \
             with SIGTERM, or kill it"
                .to_string(),
        ),
    ];
    if let Some((_, why)) = refused.into_iter().find(|(given, _)| *given) {
        bail!(why);
    }
    // --checkpoint-every is the spelling before --checkpoint-interval; messages name the
    // one given.
    let (ckpt_flag, ckpt_given) = match (&w.checkpoint_interval, &a.checkpoint_every) {
        (None, Some(c)) => ("--checkpoint-every", Some(c.as_str())),
        (c, _) => ("--checkpoint-interval", c.as_deref()),
    };
    let checkpoint_every = match ckpt_given {
        Some(c) if is_bare_number(c) => bail!(
            "{ckpt_flag} {c}: a Kafka worker checkpoints by time; give a duration with its \
             unit, e.g. 1s (a count of input events is for file inputs)"
        ),
        c => wall_duration(c.unwrap_or("1s"), ckpt_flag)?,
    };
    // Default: 100 ms, or the checkpoint interval when that is shorter.
    let commit_every = match w.commit_every.as_deref() {
        Some(c) => wall_duration(c, "--commit-every")?,
        None => checkpoint_every.min(std::time::Duration::from_millis(100)),
    };
    if commit_every > checkpoint_every {
        bail!(
            "--commit-every ({}) must not be longer than {ckpt_flag} ({}): a checkpoint covers only committed input",
            w.commit_every.as_deref().unwrap_or_default(),
            ckpt_given.unwrap_or("1s")
        );
    }
    let idle_exit = w.idle_exit.as_deref().map(|s| wall_duration(s, "--idle-exit")).transpose()?;
    let query = read_query(&a.query)?;
    check_from(&query, a.table.as_deref(), Some(input.topic.clone()), "the input topic's name")?;
    // Every task processor's store and reservoir (each task gets the whole budget).
    let mut session = SessionConfig::new(query);
    session.ties = a.ties;
    session.store = a.store;
    session.tiered = a.tier_args.options(a.store, a.memory_budget)?;
    session.memory_budget = a.memory_budget;
    session.expected_keys = a.expected_keys;
    session.compression = a.compression.into();
    session.reservoir_chunk_events =
        a.reservoir_chunk_events.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    session.reservoir_segment_bytes = a.reservoir_segment_bytes;
    // The lateness is in the topic's time unit, known once its schema is read; the
    // worker converts it (a plain number is already in that unit).
    session.allowed_lateness = 0;
    let route_partitions = w.route_partitions.unwrap_or(4);
    if route_partitions < 1 {
        bail!("--route-partitions: a topic needs at least 1 partition, not {route_partitions}");
    }
    Ok(WorkerConfig {
        route_partitions,
        brokers: input.brokers,
        input: input.topic,
        output: output.topic,
        group,
        dir,
        checkpoint_store: w.checkpoint_store.clone(),
        commit_every,
        checkpoint_every,
        worker_id: w.worker_id.clone(),
        session,
        idle_exit,
        allowed_lateness: a.allowed_lateness.clone(),
        watermark_delay: a.watermark_delay.clone().unwrap_or_else(|| "0".into()),
        time_column: a.input_args.time_column.clone(),
        time_unit: a.input_args.time_unit,
        metrics: None,
    })
}

/// `spillway run --input kafka://B/T --output kafka://B/OUT --group G --checkpoint-dir DIR`.
#[cfg(feature = "kafka")]
pub fn run(a: JobArgs, w: WorkerArgs, f: &FileJobArgs) -> Result<()> {
    let mut cfg = worker_config(&a, &w, f)?;
    // Taken before the worker joins its group: a bad or busy address fails first.
    let (metrics, _metrics_server) = metrics_server(a.metrics_addr.as_deref())?;
    cfg.metrics = metrics;
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
        if cfg.checkpoint_store.is_some() {
            eprintln!(
                "checkpoint store: {} task checkpoints uploaded, {} bytes sent for {} bytes of state; {} restored ({} bytes)",
                s.uploads, s.uploaded_bytes, s.uploaded_state_bytes, s.restores, s.restored_bytes
            );
        }
        if s.consumer_errors > 0 {
            eprintln!("{} transient consumer errors recovered from", s.consumer_errors);
        }
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
    if s.pending_joins > 0 {
        // Not silent even with --quiet: these events have no result row yet.
        eprintln!(
            "warning: {} events in this worker's reply partitions still wait for a stage's partial \
             (a stage is behind; they complete when its worker catches up)",
            s.pending_joins
        );
    }
    Ok(())
}

#[cfg(all(test, feature = "kafka"))]
mod tests {
    use super::*;
    use std::time::Duration;

    use clap::Parser;
    use spillway_engine::reservoir::Compression;
    use spillway_engine::value::TimeUnit;
    use spillway_store::tiered::{L2Config, L3Kind};
    use spillway_store::StoreKind;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        a: crate::cmd::run::RunArgs,
    }

    const Q: &str = "SELECT card, COUNT(*) OVER (PARTITION BY card ORDER BY ts \
                     RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW) AS n FROM pay";

    fn config(extra: &[&str]) -> Result<WorkerConfig> {
        let mut argv = vec!["run", "--query", Q, "--input", "kafka://127.0.0.1:1/pay"];
        argv.extend_from_slice(&["--output", "kafka://127.0.0.1:1/out", "--group", "g"]);
        argv.extend_from_slice(&["--checkpoint-dir", "/nonexistent/ckpt"]);
        argv.extend_from_slice(extra);
        let a = Run::try_parse_from(argv)?.a;
        worker_config(&a.job, &a.worker, &a.file)
    }

    /// The flags a worker uses reach its configuration (every task's session is a clone
    /// of `session` with its own directory); nothing is contacted.
    #[test]
    fn used_flags_reach_the_worker_config() {
        type Check = fn(&WorkerConfig) -> bool;
        let cases: &[(&[&str], Check)] = &[
            (&[], |c| {
                c.session.store == StoreKind::HashLog
                    && c.session.memory_budget == 256 << 20
                    && c.session.expected_keys.is_none()
                    && c.session.compression == Compression::Lz4
                    && c.session.reservoir_chunk_events.is_none()
                    && c.session.reservoir_segment_bytes.is_none()
                    && c.time_column.is_none()
                    && c.time_unit.is_none()
                    && c.allowed_lateness == "0"
                    && c.checkpoint_every == Duration::from_secs(1)
                    && c.commit_every == Duration::from_millis(100)
                    && c.route_partitions == 4
                    && c.idle_exit.is_none()
                    && c.worker_id.is_none()
                    && (c.input.as_str(), c.output.as_str(), c.group.as_str())
                        == ("pay", "out", "g")
            }),
            (&["--time-column", "ts"], |c| c.time_column.as_deref() == Some("ts")),
            (&["--time-unit", "s"], |c| c.time_unit == Some(TimeUnit::S)),
            (&["--allowed-lateness", "5s"], |c| c.allowed_lateness == "5s"),
            (&["--store", "mem"], |c| c.session.store == StoreKind::Mem),
            (&["--memory-budget", "64MiB"], |c| c.session.memory_budget == 64 << 20),
            (&["--expected-keys", "10k"], |c| c.session.expected_keys == Some(10_000)),
            (&["--compression", "zstd"], |c| c.session.compression == Compression::Zstd(3)),
            (
                &["--store", "tiered", "--memory-budget", "8MiB", "--l1", "1MiB", "--l2", "none"],
                |c| {
                    c.session.store == StoreKind::Tiered
                        && c.session.tiered.l1_bytes == Some(1 << 20)
                        && c.session.tiered.l2 == L2Config::None
                        && c.session.tiered.l3 == L3Kind::HashLog
                },
            ),
            (&["--store", "tiered", "--l1", "50%", "--l2", "none"], |c| {
                c.session.tiered.l1_bytes == Some(128 << 20)
            }),
            (&["--reservoir-chunk-events", "8"], |c| c.session.reservoir_chunk_events == Some(8)),
            (&["--reservoir-segment-bytes", "4KiB"], |c| {
                c.session.reservoir_segment_bytes == Some(4096)
            }),
            (&["--checkpoint-every", "3s", "--commit-every", "250ms"], |c| {
                c.checkpoint_every == Duration::from_secs(3)
                    && c.commit_every == Duration::from_millis(250)
            }),
            (&["--checkpoint-every", "50ms"], |c| c.commit_every == Duration::from_millis(50)),
            (&["--checkpoint-interval", "3s", "--commit-every", "250ms"], |c| {
                c.checkpoint_every == Duration::from_secs(3)
                    && c.commit_every == Duration::from_millis(250)
            }),
            (&["--checkpoint-interval", "50ms"], |c| c.commit_every == Duration::from_millis(50)),
            (&["--idle-exit", "3s"], |c| c.idle_exit == Some(Duration::from_secs(3))),
            (&["--worker-id", "w1"], |c| c.worker_id.as_deref() == Some("w1")),
            (&["--route-partitions", "2"], |c| c.route_partitions == 2),
            (&["--on-error", "skip"], |_| true),
            (&["--quiet"], |_| true),
        ];
        for (args, check) in cases {
            let c = config(args).unwrap_or_else(|e| panic!("{args:?}: {e:#}"));
            assert!(check(&c), "{args:?} did not reach the worker's config: {c:#?}");
        }
    }

    /// The time flags against a topic schema of `ts` in ms: absent or equal pass, another
    /// value is refused naming the topic and the schema's value.
    #[test]
    fn time_flags_must_match_the_topic_schema() {
        use spillway_engine::kafka::worker::check_time_flags;
        use spillway_engine::value::{DataType, Field, Schema};
        let field = |n: &str| Field { name: n.into(), ty: DataType::Int };
        let schema = Schema::new(vec![field("ts"), field("t")], "ts", TimeUnit::Ms).unwrap();
        let cases: &[(&[&str], Option<&str>)] = &[
            (&[], None),
            (&["--time-unit", "ms", "--time-column", "ts"], None),
            (
                &["--time-unit", "s"],
                Some("--time-unit s conflicts with topic pay's schema (ms, set by kafka produce); drop --time-unit, or produce the topic again with --time-unit s"),
            ),
            (
                &["--time-column", "t", "--time-unit", "ms"],
                Some("--time-column t conflicts with topic pay's schema (time column ts, set by kafka produce)"),
            ),
        ];
        for (args, want) in cases {
            let r = check_time_flags(&config(args).unwrap(), &schema);
            match want {
                None => assert!(r.is_ok(), "{args:?}: {r:?}"),
                Some(w) => {
                    let e = r.expect_err("refused").to_string();
                    assert!(e.contains(w), "{args:?}: {e}");
                }
            }
        }
    }

    /// A worker checkpoints by time (--checkpoint-interval, or --checkpoint-every, its
    /// spelling before); a file job's --checkpoint-events is refused, saying which flag to
    /// use, and messages name the spelling given.
    #[test]
    fn checkpoint_flags_of_a_worker() {
        let cases: &[(&[&str], &str)] = &[
            (&["--checkpoint-events", "1000"], "--checkpoint-events counts a file job's input events; a Kafka worker checkpoints by time: --checkpoint-interval DURATION"),
            (&["--checkpoint-interval", "1000"], "--checkpoint-interval 1000: a Kafka worker checkpoints by time"),
            (&["--commit-every", "2s"], "--commit-every (2s) must not be longer than --checkpoint-interval (1s)"),
            (&["--commit-every", "2s", "--checkpoint-every", "1s"], "--commit-every (2s) must not be longer than --checkpoint-every (1s)"),
            (&["--checkpoint-every", "1s", "--checkpoint-interval", "1s"], "cannot be used with"),
        ];
        for (args, want) in cases {
            let e = config(args).expect_err("refused").to_string();
            assert!(e.contains(want), "{args:?}: {e}");
        }
    }

    #[test]
    fn bare_numbers_are_not_wall_durations() {
        let e = config(&["--checkpoint-every", "1000"]).unwrap_err().to_string();
        assert!(e.contains("a count of input events is for file inputs"), "{e}");
        let e = config(&["--idle-exit", "3"]).unwrap_err().to_string();
        assert!(e.contains("--idle-exit 3: give a duration with its unit, e.g. 3s"), "{e}");
    }
}
