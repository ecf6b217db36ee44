//! Window assignment: which windows of a window table function an event belongs to.
//! The SQL module parses `TUMBLE`/`HOP`/`CUMULATE`/`SESSION` into a [`TvfWindow`]; this
//! module assigns events to its windows, following Flink's slice assigners
//! (`SliceAssigners.TumblingSliceAssigner`, `HoppingSliceAssigner`,
//! `CumulativeSliceAssigner`), which align windows with `TimeWindow.getWindowStartWithOffset`:
//! the start at or before `t` whose distance from `offset` is a multiple of the length.
//! Sessions are merged by the operator ([`super`]), not assigned here.

use crate::sql::TvfWindow;

impl TvfWindow {
    /// The aligned windows `[start, end)` holding time `t`, in ascending order of end
    /// (sessions are assigned by the runtime: nothing here).
    pub fn assign(&self, t: i64, out: &mut Vec<(i64, i64)>) {
        out.clear();
        match *self {
            TvfWindow::Tumble { size, offset } => {
                let s = window_start(t, offset, size);
                out.push((s, s.saturating_add(size)));
            }
            TvfWindow::Hop { slide, size, offset } => {
                // HoppingSliceAssigner: the slice (of `slide`) holding t ends the first
                // window; the later ones end a slide apart, while they still hold t.
                let last = window_start(t, offset, slide);
                let mut s = last - (size - slide);
                while s <= last {
                    if s.saturating_add(size) > t {
                        out.push((s, s.saturating_add(size)));
                    }
                    s += slide;
                }
            }
            TvfWindow::Cumulate { step, size, offset } => {
                // CumulativeSliceAssigner: the windows of the largest one holding t that
                // end at or after t's slice (of `step`).
                let s = window_start(t, offset, size);
                let mut e = window_start(t, offset, step).saturating_add(step);
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
            TvfWindow::Tumble { size, .. } | TvfWindow::Hop { size, .. } => end - size,
            // CumulativeSliceAssigner.getWindowStart.
            TvfWindow::Cumulate { size, offset, .. } => window_start(end - 1, offset, size),
            TvfWindow::Session { .. } => unreachable!("sessions carry their start"),
        }
    }
}

/// `TimeWindow.getWindowStartWithOffset`: the latest `s <= t` with `s - offset` a multiple
/// of `len` (for any sign of `t` and `offset`).
pub(crate) fn window_start(t: i64, offset: i64, len: i64) -> i64 {
    t - t.wrapping_sub(offset).rem_euclid(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Flink's `TimeWindow.getWindowStartWithOffset`, as Java computes it (`%` keeps the
    /// dividend's sign).
    fn flink_start(t: i64, offset: i64, size: i64) -> i64 {
        let remainder = (t - offset) % size;
        if remainder < 0 {
            t - (remainder + size)
        } else {
            t - remainder
        }
    }

    #[test]
    fn offsets_move_the_windows() {
        let mut out = Vec::new();
        // Daily windows 8 hours off the epoch.
        let (day, h) = (86_400_000, 3_600_000);
        TvfWindow::Tumble { size: day, offset: 8 * h }.assign(7 * h, &mut out);
        assert_eq!(out, vec![(8 * h - day, 8 * h)]);
        TvfWindow::Tumble { size: day, offset: -h }.assign(day - h, &mut out);
        assert_eq!(out, vec![(day - h, 2 * day - h)]);
        TvfWindow::Hop { slide: 10, size: 30, offset: 3 }.assign(12, &mut out);
        assert_eq!(out, vec![(-17, 13), (-7, 23), (3, 33)]);
        TvfWindow::Cumulate { step: 10, size: 40, offset: 25 }.assign(30, &mut out);
        assert_eq!(out, vec![(25, 35), (25, 45), (25, 55), (25, 65)]);
        let w = TvfWindow::Cumulate { step: 10, size: 40, offset: 25 };
        assert_eq!(w.start_of(45), 25);
        assert_eq!(w.start_of(65), 25);
        assert_eq!(w.start_of(66), 65);
    }

    proptest! {
        /// Every window holds t, starts where Flink's formula puts it, and the count is
        /// the function's (one, size / slide, or the cumulative steps left).
        #[test]
        fn windows_are_flinks(t in -1_000_000i64..1_000_000, len in 1i64..50, k in 1i64..6,
                              offset in -300i64..300) {
            let mut out = Vec::new();
            if offset.abs() < len {
                TvfWindow::Tumble { size: len, offset }.assign(t, &mut out);
                let s = flink_start(t, offset, len);
                prop_assert_eq!(&out, &vec![(s, s + len)]);
            }
            let size = len * k;
            TvfWindow::Hop { slide: len, size, offset }.assign(t, &mut out);
            prop_assert_eq!(out.len() as i64, k);
            let first_end = flink_start(t, offset, len) + len;
            for (i, &(s, e)) in out.iter().enumerate() {
                prop_assert_eq!(e, first_end + i as i64 * len);
                prop_assert_eq!(s, e - size);
                prop_assert!(s <= t && t < e);
            }
            let w = TvfWindow::Cumulate { step: len, size, offset };
            w.assign(t, &mut out);
            let s = flink_start(t, offset, size);
            let slice_end = flink_start(t, offset, len) + len;
            prop_assert_eq!(out.len() as i64, (s + size - slice_end) / len + 1);
            for (i, &(ws, e)) in out.iter().enumerate() {
                prop_assert_eq!(ws, s);
                prop_assert_eq!(e, slice_end + i as i64 * len);
                prop_assert_eq!(w.start_of(e), s);
                prop_assert!(ws <= t && t < e);
            }
        }
    }
}
