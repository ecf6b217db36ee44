//! The summary an engine job prints on stderr when it ends (`run` on a file, `demo`).

use spillway_engine::job::JobSummary;

/// Prints the summary on stderr. Its first line counts this run's events and rows; after
/// a resume or backfill a second line gives the whole job's since its first run.
pub(crate) fn print_summary(s: &JobSummary) {
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
