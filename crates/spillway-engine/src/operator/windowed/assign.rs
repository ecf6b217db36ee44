//! Window assignment: which windows of a window table function an event belongs to.
//! The SQL module parses `TUMBLE`/`HOP`/`CUMULATE`/`SESSION` into a [`TvfWindow`]; this
//! module assigns events to its windows, following Flink's assigners with offset 0
//! (`TimeWindow.getWindowStartWithOffset`, `SlidingEventTimeWindows.assignWindows`,
//! `CumulativeWindowAssigner.assignWindows`). Sessions are merged by the operator
//! ([`super`]), not assigned here.

use crate::sql::TvfWindow;

impl TvfWindow {
    /// The aligned windows `[start, end)` holding time `t`, in ascending order of end
    /// (sessions are assigned by the runtime: nothing here).
    pub fn assign(&self, t: i64, out: &mut Vec<(i64, i64)>) {
        out.clear();
        let floor = |t: i64, m: i64| t - t.rem_euclid(m);
        match *self {
            TvfWindow::Tumble { size } => {
                let s = floor(t, size);
                out.push((s, s.saturating_add(size)));
            }
            TvfWindow::Hop { slide, size } => {
                // SlidingEventTimeWindows.assignWindows: starts from the last one at or
                // before t back while the window still holds t.
                let last = floor(t, slide);
                let mut s = last - (size - slide);
                while s <= last {
                    if s.saturating_add(size) > t {
                        out.push((s, s.saturating_add(size)));
                    }
                    s += slide;
                }
            }
            TvfWindow::Cumulate { step, size } => {
                // CumulativeWindowAssigner.assignWindows.
                let s = floor(t, size);
                let mut e = floor(t, step).saturating_add(step);
                while e <= s.saturating_add(size) {
                    out.push((s, e));
                    e = e.saturating_add(step);
                }
            }
            TvfWindow::Session { .. } => {}
        }
    }

    /// The start of the aligned window ending at `end` (not for sessions).
    pub fn start_of(&self, end: i64) -> i64 {
        match *self {
            TvfWindow::Tumble { size } | TvfWindow::Hop { size, .. } => end - size,
            TvfWindow::Cumulate { size, .. } => {
                let last = end - 1;
                last - last.rem_euclid(size)
            }
            TvfWindow::Session { .. } => unreachable!("sessions carry their start"),
        }
    }
}
