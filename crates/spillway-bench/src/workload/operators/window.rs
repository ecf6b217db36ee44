//! Tumbling and sliding windows (keyed and "all", incremental and holistic) and the
//! tumbling and sliding window joins: Flink's `WindowOperator` with an `EventTimeTrigger`,
//! a reducing state (incremental: `get` + `put` per add) or a list state (holistic and
//! joins: `merge` per add), one state key per (group, window start).

use super::{Clock, Issuer, KeyLayout, Operator, OperatorStats, Timers, TAG_WINDOW};
use crate::workload::{Emit, InputEvent, OperatorKind, OperatorParams, StreamItem};
use std::collections::HashSet;

/// A window operator; tumbling windows are sliding windows with `slide == size`.
#[derive(Debug)]
pub(super) struct WindowOperator {
    size: i64,
    slide: i64,
    holistic: bool,
    keyed: bool,
    lateness: i64,
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    /// Live windows: (group, start).
    windows: HashSet<(u64, i64)>,
    timers: Timers<(u64, i64)>,
}

impl WindowOperator {
    pub(super) fn new(
        kind: OperatorKind,
        params: &OperatorParams,
        slide: i64,
        layout: KeyLayout,
    ) -> WindowOperator {
        use OperatorKind as K;
        let holistic = !matches!(
            kind,
            K::TumblingKeyedIncremental
                | K::TumblingAllIncremental
                | K::SlidingKeyedIncremental
                | K::SlidingAllIncremental
        );
        let keyed = !matches!(
            kind,
            K::TumblingAllIncremental
                | K::TumblingAllHolistic
                | K::SlidingAllIncremental
                | K::SlidingAllHolistic
        );
        WindowOperator {
            size: params.window,
            slide,
            holistic,
            keyed,
            lateness: params.allowed_lateness,
            clock: Clock::new(kind.two_inputs()),
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            windows: HashSet::new(),
            timers: Timers::new(),
        }
    }

    /// Window starts of `t`, latest first (Flink's `SlidingEventTimeWindows`, with a floor
    /// that is also right for negative times).
    fn starts(&self, t: i64) -> Vec<i64> {
        let (t, size, slide) = (i128::from(t), i128::from(self.size), i128::from(self.slide));
        let mut out = Vec::new();
        let mut s = t - t.rem_euclid(slide);
        // Starts below i64::MIN cannot be keyed; no i64 event is that far below anyway.
        while s > t - size && s >= i128::from(i64::MIN) {
            out.extend(i64::try_from(s).ok());
            s -= slide;
        }
        out
    }

    fn on_event(&mut self, ev: &InputEvent, emit: &mut Emit<'_>) {
        self.stats.events += 1;
        let wf = self.clock.wf;
        let group = if self.keyed { ev.key } else { 0 };
        let len = u64::from(ev.value_len);
        let mut skipped = true;
        for start in self.starts(ev.time) {
            let max_ts = start.saturating_add(self.size) - 1;
            let cleanup = max_ts.saturating_add(self.lateness);
            if cleanup <= wf {
                continue; // window late: already cleaned up
            }
            skipped = false;
            let key = self.issuer.key(TAG_WINDOW, group, start);
            if self.holistic {
                self.issuer.merge(emit, &key, len);
            } else {
                self.issuer.get(emit, &key);
                self.issuer.put(emit, &key, len);
            }
            self.windows.insert((group, start));
            if max_ts <= wf {
                self.issuer.get(emit, &key);
                self.stats.windows_fired += 1;
            } else {
                self.timers.register(max_ts, (group, start));
            }
            self.timers.register(cleanup, (group, start));
        }
        if skipped && ev.time.saturating_add(self.lateness) <= wf {
            self.stats.late_dropped += 1;
        }
    }

    fn fire_timers(&mut self, emit: &mut Emit<'_>) {
        while let Some((time, (group, start))) = self.timers.pop_due(self.clock.wf) {
            if !self.windows.contains(&(group, start)) {
                continue;
            }
            let max_ts = start.saturating_add(self.size) - 1;
            let cleanup = max_ts.saturating_add(self.lateness);
            let key = self.issuer.key(TAG_WINDOW, group, start);
            if time == max_ts {
                self.issuer.get(emit, &key);
                self.stats.windows_fired += 1;
            }
            if time == cleanup {
                self.issuer.delete(emit, &key);
                self.windows.remove(&(group, start));
            }
        }
    }
}

impl Operator for WindowOperator {
    fn on_item(&mut self, item: &StreamItem, _input_event: u64, emit: &mut Emit<'_>) {
        match item {
            StreamItem::Event(ev) => {
                if self.clock.side(ev.source).is_none() {
                    self.stats.ignored_items += 1;
                } else {
                    self.on_event(ev, emit);
                }
            }
            StreamItem::Watermark { source, time } => match self.clock.watermark(*source, *time) {
                Err(()) => self.stats.ignored_items += 1,
                Ok(Some(_)) => self.fire_timers(emit),
                Ok(None) => {}
            },
        }
    }

    fn finish(&mut self, _input_event: u64, emit: &mut Emit<'_>) {
        self.clock.finish();
        self.fire_timers(emit);
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats { live_state_keys: self.windows.len() as u64, ..self.stats }
    }
}
