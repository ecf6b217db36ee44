//! What long-running commands show on stderr while they run: a spinner with a message
//! (none with --quiet or when stderr is not a terminal), and an engine job's progress
//! line (`run`, `demo`).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use spillway_engine::job::Progress;

pub(crate) fn progress_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("template"));
    pb.enable_steady_tick(Duration::from_millis(200));
    pb
}

pub(crate) fn progress_message(p: &Progress<'_>) -> String {
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
