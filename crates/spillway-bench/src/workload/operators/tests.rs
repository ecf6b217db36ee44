//! Tests of the operator state machines: hand-written op sequences per operator, Gadget's
//! worked example (notes §5.11) as a conformance vector, lateness, interval-join bounds and
//! no-loss accounting over random streams against independent oracles.
//!
//! Expected keys are built here by `k17` / `k10`, written from the documented layout and
//! independent of `KeyLayout`.

use super::*;
use crate::workload::{
    InputEvent, JoinInput, OpKind as O, OperatorKind as K, OperatorParams, StreamItem,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, HashSet};

type Op = (OpKind, Vec<u8>);

const V: u32 = 8;

fn ev(source: u8, key: u64, time: i64) -> StreamItem {
    StreamItem::Event(InputEvent { source, key, time, value_len: V })
}

fn wm(source: u8, time: i64) -> StreamItem {
    StreamItem::Watermark { source, time }
}

/// Full layout: tag, group BE, time BE with the sign bit flipped.
fn k17(tag: u8, group: u64, time: i64) -> Vec<u8> {
    let mut k = vec![tag];
    k.extend_from_slice(&group.to_be_bytes());
    k.extend_from_slice(&((time as u64) ^ (1 << 63)).to_be_bytes());
    k
}

/// Default 10-byte layout: tag, 4 group bytes, time + 2^39 in 5 bytes.
fn k10(tag: u8, group: u64, time: i64) -> Vec<u8> {
    assert!(group < 1 << 32 && time.abs() < 1 << 39);
    let mut k = vec![tag];
    k.extend_from_slice(&(group as u32).to_be_bytes());
    k.extend_from_slice(&((time + (1 << 39)) as u64).to_be_bytes()[3..]);
    k
}

fn params(kind: OperatorKind) -> OperatorParams {
    OperatorParams { key_bytes: 17, ..OperatorParams::new(kind) }
}

fn get(k: Vec<u8>) -> Op {
    (O::Get, k)
}
fn put(k: Vec<u8>) -> Op {
    (O::Put, k)
}
fn merge(k: Vec<u8>) -> Op {
    (O::Merge, k)
}
fn del(k: Vec<u8>) -> Op {
    (O::Delete, k)
}
fn seek(k: Vec<u8>) -> Op {
    (O::Seek, k)
}
fn next(k: Vec<u8>) -> Op {
    (O::Next, k)
}
fn gp(k: Vec<u8>) -> Vec<Op> {
    vec![get(k.clone()), put(k)]
}
fn gd(k: Vec<u8>) -> Vec<Op> {
    vec![get(k.clone()), del(k)]
}

/// Runs `chunks` of items (each chunk's ops collected separately) and then `finish` (the
/// last chunk of the result).
fn run_chunks(
    p: &OperatorParams,
    chunks: &[Vec<StreamItem>],
) -> (Vec<Vec<StateOp>>, OperatorStats) {
    let mut op = build(p).expect("valid params");
    let mut out = Vec::new();
    let mut n = 0u64;
    for chunk in chunks {
        let mut ops = Vec::new();
        for item in chunk {
            op.on_item(item, n, &mut |o: &StateOp| ops.push(o.clone()));
            n += u64::from(matches!(item, StreamItem::Event(_)));
        }
        out.push(ops);
    }
    let mut ops = Vec::new();
    op.finish(n, &mut |o: &StateOp| ops.push(o.clone()));
    out.push(ops);
    (out, op.stats())
}

fn kk(ops: &[StateOp]) -> Vec<Op> {
    ops.iter().map(|o| (o.kind, o.key.clone())).collect()
}

/// Runs `items` then `finish`; returns all ops.
fn run(p: &OperatorParams, items: &[StreamItem]) -> (Vec<StateOp>, OperatorStats) {
    let (chunks, stats) = run_chunks(p, &[items.to_vec()]);
    (chunks.concat(), stats)
}

fn cat(parts: Vec<Vec<Op>>) -> Vec<Op> {
    parts.concat()
}

// ---------------------------------------------------------------------------------------
// Key layout

#[test]
fn key_layout_exact_bytes() {
    let l17 = KeyLayout::new(17).unwrap();
    assert_eq!(l17.key(b'w', 1, 0), k17(b'w', 1, 0));
    assert_eq!(
        l17.key(b'w', 0x0102, -1),
        vec![b'w', 0, 0, 0, 0, 0, 0, 1, 2, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
    );
    let l20 = KeyLayout::new(20).unwrap();
    let mut padded = k17(b'm', u64::MAX, i64::MIN);
    padded.extend_from_slice(&[0, 0, 0]);
    assert_eq!(l20.key(b'm', u64::MAX, i64::MIN), padded);
    let l10 = KeyLayout::new(10).unwrap();
    assert_eq!(l10.key(b'w', 7, 30), vec![b'w', 0, 0, 0, 7, 0x80, 0, 0, 0, 30]);
    assert_eq!(l10.key(b'w', 7, -1), vec![b'w', 0, 0, 0, 7, 0x7f, 0xff, 0xff, 0xff, 0xff]);
    // 5 bytes: tag, 2 group bytes, 2 time bytes.
    let l5 = KeyLayout::new(5).unwrap();
    assert_eq!(l5.key(b'a', 0x0304, 2), vec![b'a', 3, 4, 0x80, 2]);
}

#[test]
fn key_layout_hashes_what_does_not_fit() {
    let l10 = KeyLayout::new(10).unwrap();
    assert!(!l10.is_exact(1 << 32, 0));
    assert!(!l10.is_exact(0, 1 << 39));
    assert!(l10.is_exact(0, -(1 << 39)));
    let h = l10.key(b'w', 1 << 32, 5);
    assert_eq!(h.len(), 10);
    assert_eq!(h[0], b'w' | 0x80);
    assert_ne!(h, l10.key(b'w', (1 << 32) + 1, 5));
    assert_eq!(h, l10.key(b'w', 1 << 32, 5), "deterministic");
    let l2 = KeyLayout::new(2).unwrap();
    assert_eq!(l2.key(b'w', 1, 1).len(), 2);
    assert!(KeyLayout::new(0).is_err());
    assert!(KeyLayout::new(MAX_KEY_BYTES + 1).is_err());
}

#[test]
fn key_layout_compact_is_unique_and_ordered() {
    let l = KeyLayout::new(10).unwrap();
    let mut seen = HashSet::new();
    let times = [-(1i64 << 39), -70000, -1, 0, 1, 255, 256, 70000, (1 << 39) - 1];
    let mut prev: Option<Vec<u8>> = None;
    for g in [0u64, 1, 255, 256, u32::MAX.into()] {
        for t in times {
            for tag in [TAG_WINDOW, TAG_META] {
                assert!(seen.insert(l.key(tag, g, t)), "duplicate key {tag} {g} {t}");
            }
            let k = l.key(TAG_WINDOW, g, t);
            if let Some(p) = &prev {
                assert!(p < &k, "order broken at group {g} time {t}");
            }
            prev = Some(k);
        }
    }
}

#[test]
fn build_rejects_bad_params() {
    let bad = |f: &dyn Fn(&mut OperatorParams), kind| {
        let mut p = OperatorParams::new(kind);
        f(&mut p);
        build(&p).err().expect("must be rejected")
    };
    let e = bad(&|p| p.window = 0, K::TumblingKeyedIncremental);
    assert!(e.to_string().contains("window = 0"), "{e}");
    bad(&|p| p.slide = -1, K::SlidingAllHolistic);
    bad(&|p| p.allowed_lateness = -1, K::SessionHolistic);
    bad(&|p| p.session_gap = 0, K::SessionIncremental);
    bad(&|p| (p.lower, p.upper) = (3, 2), K::JoinInterval);
    bad(&|p| p.key_bytes = 0, K::ContinuousAggregation);
    bad(&|p| (p.window, p.slide) = (1 << 40, 1), K::SlidingKeyedIncremental);
    for kind in OperatorKind::ALL {
        assert!(build(&OperatorParams::new(kind)).is_ok(), "{}", kind.name());
    }
}

// ---------------------------------------------------------------------------------------
// Gadget's worked example (notes §5.11), times x10: W = 30, one watermark per time unit.

fn gadget_chunks() -> Vec<Vec<StreamItem>> {
    let batches: [&[(i64, u64)]; 11] = [
        &[(1, 1)],
        &[],
        &[(20, 2), (21, 2), (21, 1)],
        &[],
        &[(45, 3)],
        &[(50, 4), (50, 3)],
        &[(67, 7)],
        &[],
        &[(83, 1)],
        &[(90, 2), (68, 1)],
        &[(100, 10)],
    ];
    batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut items: Vec<StreamItem> = b.iter().map(|&(t, k)| ev(0, k, t)).collect();
            items.push(wm(0, 10 * (i as i64 + 1)));
            items
        })
        .collect()
}

#[test]
fn gadget_conformance_tumbling_keyed_incremental() {
    let p = OperatorParams { window: 30, ..OperatorParams::new(K::TumblingKeyedIncremental) };
    let (chunks, stats) = run_chunks(&p, &gadget_chunks());
    let w = |g, s| k10(b'w', g, s);
    // Gadget ids 1..8 are the windows (1,0) (2,0) (3,30) (4,30) (7,60) (1,60) (2,90) (10,90).
    let expected: Vec<Vec<Op>> = vec![
        gp(w(1, 0)),
        vec![],
        cat(vec![gp(w(2, 0)), gp(w(2, 0)), gp(w(1, 0)), gd(w(1, 0)), gd(w(2, 0))]),
        vec![],
        gp(w(3, 30)),
        cat(vec![gp(w(4, 30)), gp(w(3, 30)), gd(w(3, 30)), gd(w(4, 30))]),
        gp(w(7, 60)),
        vec![],
        cat(vec![gp(w(1, 60)), gd(w(7, 60)), gd(w(1, 60))]),
        gp(w(2, 90)), // the late (6.8, key 1) event: nothing
        gp(w(10, 90)),
        // finish: Gadget never fires these (no final flush, §1); Spillway does.
        cat(vec![gd(w(2, 90)), gd(w(10, 90))]),
    ];
    for (i, (got, want)) in chunks.iter().zip(&expected).enumerate() {
        assert_eq!(kk(got), *want, "time unit {}", i + 1);
    }
    assert_eq!(chunks.len(), expected.len());
    assert_eq!(stats.events, 12);
    assert_eq!(stats.late_dropped, 1);
    assert_eq!(stats.windows_fired, 8);
    assert_eq!(stats.live_state_keys, 0);
    // Values: puts carry value_len bytes, gets and deletes none.
    for o in chunks.concat() {
        let want = if o.kind == O::Put { V as usize } else { 0 };
        assert_eq!(o.value.len(), want, "{o:?}");
    }
}

/// Gadget's lateness variant (lateness 2 TU = 20): Gadget fires once (get, delete) at end + L
/// (5, 8, 11) and the late (6.8, key 1) event does get + put only. Flink (and Spillway) fire
/// (get) at the end, delete at end + L, and re-fire (get) the window the late event updates.
#[test]
fn gadget_conformance_with_lateness() {
    let p = OperatorParams {
        window: 30,
        allowed_lateness: 20,
        ..OperatorParams::new(K::TumblingKeyedIncremental)
    };
    let (chunks, stats) = run_chunks(&p, &gadget_chunks());
    let w = |g, s| k10(b'w', g, s);
    let (a, b, c, d) = (w(1, 0), w(2, 0), w(3, 30), w(4, 30));
    let (e, f, g, h) = (w(7, 60), w(1, 60), w(2, 90), w(10, 90));
    let expected: Vec<Vec<Op>> = vec![
        gp(a.clone()),
        vec![],
        cat(vec![
            gp(b.clone()),
            gp(b.clone()),
            gp(a.clone()),
            vec![get(a.clone()), get(b.clone())],
        ]),
        vec![],
        cat(vec![gp(c.clone()), vec![del(a), del(b)]]),
        cat(vec![gp(d.clone()), gp(c.clone()), vec![get(c.clone()), get(d.clone())]]),
        gp(e.clone()),
        vec![del(c), del(d)],
        cat(vec![gp(f.clone()), vec![get(e.clone()), get(f.clone())]]),
        cat(vec![gp(g.clone()), gp(f.clone()), vec![get(f.clone())]]),
        cat(vec![gp(h.clone()), vec![del(e), del(f)]]),
        vec![get(g.clone()), get(h.clone()), del(g), del(h)],
    ];
    for (i, (got, want)) in chunks.iter().zip(&expected).enumerate() {
        assert_eq!(kk(got), *want, "time unit {}", i + 1);
    }
    assert_eq!(stats.late_dropped, 0);
    assert_eq!(stats.windows_fired, 9);
    assert_eq!(stats.live_state_keys, 0);
}

// ---------------------------------------------------------------------------------------
// Tumbling and sliding windows

#[test]
fn tumbling_keyed_holistic_sequence() {
    let p = OperatorParams { window: 10, ..params(K::TumblingKeyedHolistic) };
    let w = |g, s| k17(b'w', g, s);
    let items = [ev(0, 1, 1), ev(0, 2, 5), ev(0, 1, 12), wm(0, 10), ev(0, 1, 3), wm(0, 20)];
    let (chunks, stats) = run_chunks(&p, &[items.to_vec()]);
    let want = cat(vec![
        vec![merge(w(1, 0)), merge(w(2, 0)), merge(w(1, 10))],
        gd(w(1, 0)),
        gd(w(2, 0)),
        gd(w(1, 10)),
    ]);
    assert_eq!(kk(&chunks[0]), want);
    assert!(chunks[1].is_empty());
    assert_eq!(chunks[0][0].value.len(), V as usize);
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (4, 1, 3));
}

#[test]
fn tumbling_all_shares_one_group() {
    let w = |s| k17(b'w', 0, s);
    let items = [ev(0, 1, 1), ev(0, 2, 5), ev(0, 9, 11), wm(0, 10)];
    let p = OperatorParams { window: 10, ..params(K::TumblingAllIncremental) };
    let (ops, stats) = run(&p, &items);
    let want = cat(vec![gp(w(0)), gp(w(0)), gp(w(10)), gd(w(0)), gd(w(10))]);
    assert_eq!(kk(&ops), want);
    assert_eq!(stats.windows_fired, 2);
    let p = OperatorParams { window: 10, ..params(K::TumblingAllHolistic) };
    let (ops, _) = run(&p, &items);
    let want = cat(vec![vec![merge(w(0)), merge(w(0)), merge(w(10))], gd(w(0)), gd(w(10))]);
    assert_eq!(kk(&ops), want);
}

#[test]
fn sliding_keyed_incremental_sequence() {
    let p = OperatorParams { window: 10, slide: 5, ..params(K::SlidingKeyedIncremental) };
    let w = |s| k17(b'w', 1, s);
    // t = 7 is in [5,15) and [0,10); t = -3 in [-5,5) and [-10,0) (negative starts exist).
    let items = [ev(0, 1, 7), ev(0, 1, -3), wm(0, 5)];
    let (chunks, stats) = run_chunks(&p, &[items.to_vec()]);
    let want = cat(vec![gp(w(5)), gp(w(0)), gp(w(-5)), gp(w(-10)), gd(w(-10)), gd(w(-5))]);
    assert_eq!(kk(&chunks[0]), want);
    assert_eq!(kk(&chunks[1]), cat(vec![gd(w(0)), gd(w(5))]));
    assert_eq!(stats.windows_fired, 4);
}

#[test]
fn sliding_keyed_holistic_sequence() {
    // Slide > window: t = 12 is in no window (start 10 covers [10,12)).
    let p = OperatorParams { window: 2, slide: 5, ..params(K::SlidingKeyedHolistic) };
    let w = |g, s| k17(b'w', g, s);
    let items = [ev(0, 3, 11), ev(0, 4, 12), ev(0, 3, 10), wm(0, 12)];
    let (ops, stats) = run(&p, &items);
    assert_eq!(kk(&ops), cat(vec![vec![merge(w(3, 10)), merge(w(3, 10))], gd(w(3, 10))]));
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (3, 0, 1));
}

#[test]
fn sliding_all_incremental_sequence() {
    let p = OperatorParams { window: 4, slide: 2, ..params(K::SlidingAllIncremental) };
    let w = |s| k17(b'w', 0, s);
    let items = [ev(0, 5, 3), ev(0, 6, 4), wm(0, 5), ev(0, 7, 1), wm(0, 100)];
    let (ops, stats) = run(&p, &items);
    let want = cat(vec![
        gp(w(2)),
        gp(w(0)),
        gp(w(4)),
        gp(w(2)),
        gd(w(0)), // [0,4) ends at 4 <= 5
        // t = 1: [0,4) cleaned up, [-2,2) late: dropped, no op.
        gd(w(2)),
        gd(w(4)),
    ]);
    assert_eq!(kk(&ops), want);
    assert_eq!((stats.late_dropped, stats.windows_fired), (1, 3));
}

/// Late events within the allowed lateness update their window and re-fire it; later ones
/// are counted and issue no op.
#[test]
fn sliding_all_holistic_lateness() {
    let p = OperatorParams {
        window: 10,
        slide: 5,
        allowed_lateness: 5,
        ..params(K::SlidingAllHolistic)
    };
    let w = |s| k17(b'w', 0, s);
    let chunks = vec![
        vec![ev(0, 1, 7), ev(0, 2, 8), wm(0, 10)],
        vec![ev(0, 3, 3), ev(0, 3, 1)],
        vec![wm(0, 15)],
        vec![ev(0, 4, 2)],
    ];
    let (got, stats) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        vec![merge(w(5)), merge(w(0)), merge(w(5)), merge(w(0)), get(w(0))],
        // [-5,5) is cleaned up (4 + 5 <= 9), [0,10) has fired but lives until 14.
        vec![merge(w(0)), get(w(0)), merge(w(0)), get(w(0))],
        vec![get(w(5)), del(w(0))],
        vec![], // t = 2: both windows cleaned up, 2 + 5 <= 14: late
        vec![del(w(5))],
    ];
    for (i, (g, wnt)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *wnt, "chunk {i}");
    }
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (5, 1, 4));
}

// ---------------------------------------------------------------------------------------
// Sessions (Flink's WindowOperator + MergingWindowSet on RocksDB; see session.rs)

fn session_stream() -> Vec<Vec<StreamItem>> {
    vec![
        vec![ev(0, 1, 0)],
        vec![ev(0, 1, 5)],
        vec![ev(0, 1, 30)],
        vec![ev(0, 1, 20)],
        vec![ev(0, 1, 12)],
        vec![ev(0, 2, 100)],
        vec![wm(0, 45)],
        vec![ev(0, 1, 3)],
    ]
}

/// A new session, an extension, a second session, its extension, a merge of two
/// sessions, a firing with cleanup (L = 0) and a late event.
#[test]
fn session_incremental_sequence() {
    let p = OperatorParams { session_gap: 10, ..params(K::SessionIncremental) };
    let (got, stats) = run_chunks(&p, &session_stream());
    let m = |k| k17(b'm', k, 0);
    let s = |k, t| k17(b'w', k, t);
    let want: Vec<Vec<Op>> = vec![
        // new session [0,10), state window 0; the set changed: put M
        cat(vec![vec![get(m(1))], gp(s(1, 0)), vec![put(m(1))]]),
        // extends it to [0,15): mergeNamespaces without sources issues nothing
        cat(vec![vec![get(m(1))], gp(s(1, 0)), vec![put(m(1))]]),
        // new session [30,40)
        cat(vec![vec![get(m(1))], gp(s(1, 30)), vec![put(m(1))]]),
        // [20,30) touches [30,40): [20,40), state window stays 30
        cat(vec![vec![get(m(1))], gp(s(1, 30)), vec![put(m(1))]]),
        // [12,22) bridges [0,15) and [20,40): [0,40). Java's HashSet order is [0,15),
        // [12,22), [20,40), so [0,15)'s state window 0 is kept and 30 is absorbed:
        // RocksDBAggregatingState.mergeNamespaces = get, delete source; get, put target.
        cat(vec![
            vec![get(m(1)), get(s(1, 30)), del(s(1, 30))],
            gp(s(1, 0)), // mergeNamespaces into the target
            gp(s(1, 0)), // the event's add
            vec![put(m(1))],
        ]),
        cat(vec![vec![get(m(2))], gp(s(2, 100)), vec![put(m(2))]]),
        // [0,40) fires and is cleaned up by one timer (L = 0); the emptied set is cleared
        // by clearAllState's persist() and again by onEventTime's.
        vec![get(m(1)), get(s(1, 0)), del(s(1, 0)), del(m(1)), del(m(1))],
        // late: [3,13) merges with nothing and is late: retired, only the set's read
        vec![get(m(1))],
        vec![get(m(2)), get(s(2, 100)), del(s(2, 100)), del(m(2)), del(m(2))],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "chunk {i}");
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(got[0][3].value.len(), 32, "set: 32 bytes per session");
    assert_eq!(got[2][3].value.len(), 64);
    assert_eq!(got[4][7].value.len(), 32);
    assert_eq!(got[4][4].value.len(), V as usize, "merged accumulator");
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (7, 1, 2));
    assert_eq!(stats.live_state_keys, 0);
}

#[test]
fn session_holistic_sequence() {
    let p = OperatorParams { session_gap: 10, ..params(K::SessionHolistic) };
    let (got, stats) = run_chunks(&p, &session_stream());
    let m = |k| k17(b'm', k, 0);
    let s = |k, t| k17(b'w', k, t);
    let want: Vec<Vec<Op>> = vec![
        vec![get(m(1)), merge(s(1, 0)), put(m(1))],
        vec![get(m(1)), merge(s(1, 0)), put(m(1))],
        vec![get(m(1)), merge(s(1, 30)), put(m(1))],
        vec![get(m(1)), merge(s(1, 30)), put(m(1))],
        // RocksDBListState.mergeNamespaces: get, delete the source, merge its bytes in.
        vec![get(m(1)), get(s(1, 30)), del(s(1, 30)), merge(s(1, 0)), merge(s(1, 0)), put(m(1))],
        vec![get(m(2)), merge(s(2, 100)), put(m(2))],
        vec![get(m(1)), get(s(1, 0)), del(s(1, 0)), del(m(1)), del(m(1))],
        vec![get(m(1))],
        vec![get(m(2)), get(s(2, 100)), del(s(2, 100)), del(m(2)), del(m(2))],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "chunk {i}");
    }
    // The absorbed list held two events.
    assert_eq!(got[4][3].value.len(), 2 * V as usize);
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (7, 1, 2));
}

/// A merge in which Flink keeps the *later* session's state window: `[10,20)` bridges
/// `[0,10)` and `[15,25)`, and Java's HashSet iterates `[10,20)`, `[15,25)`, `[0,10)`, so
/// after the new window is removed `[15,25)` comes first and its state window 15 is kept.
#[test]
fn session_merge_keeps_flinks_state_window() {
    let m = k17(b'm', 1, 0);
    let (s0, s15) = (k17(b'w', 1, 0), k17(b'w', 1, 15));
    let chunks = vec![
        vec![ev(0, 1, 0)],
        vec![ev(0, 1, 15)],
        vec![ev(0, 1, 15)], // the window [15,25) is in the set: no merge, no persist
        vec![ev(0, 1, 10)],
        vec![wm(0, 30)],
    ];
    let p = OperatorParams { session_gap: 10, ..params(K::SessionHolistic) };
    let (got, stats) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        vec![get(m.clone()), merge(s0.clone()), put(m.clone())],
        vec![get(m.clone()), merge(s15.clone()), put(m.clone())],
        vec![get(m.clone()), merge(s15.clone())],
        vec![
            get(m.clone()),
            get(s0.clone()),
            del(s0.clone()),
            merge(s15.clone()), // [0,10)'s list
            merge(s15.clone()), // the event
            put(m.clone()),
        ],
        vec![get(m.clone()), get(s15.clone()), del(s15.clone()), del(m.clone()), del(m.clone())],
        vec![],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "holistic chunk {i}");
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(got[1][2].value.len(), 64, "two sessions");
    assert_eq!(got[3][3].value.len(), V as usize, "the absorbed list: one event");
    assert_eq!(got[3][5].value.len(), 32, "one session left");
    assert_eq!((stats.events, stats.windows_fired, stats.live_state_keys), (4, 1, 0));

    let p = OperatorParams { session_gap: 10, ..params(K::SessionIncremental) };
    let (got, _) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        cat(vec![vec![get(m.clone())], gp(s0.clone()), vec![put(m.clone())]]),
        cat(vec![vec![get(m.clone())], gp(s15.clone()), vec![put(m.clone())]]),
        cat(vec![vec![get(m.clone())], gp(s15.clone())]),
        cat(vec![
            vec![get(m.clone()), get(s0.clone()), del(s0.clone())],
            gp(s15.clone()), // mergeNamespaces: the target had a value, get it, put the merge
            gp(s15.clone()), // the event's add
            vec![put(m.clone())],
        ]),
        vec![get(m.clone()), get(s15.clone()), del(s15.clone()), del(m.clone()), del(m.clone())],
        vec![],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "incremental chunk {i}");
    }
}

/// With allowed lateness the firing and the cleanup are two timers; the cleanup of one of
/// two sessions writes the remaining set twice (32 bytes each); a window late beyond the
/// lateness only reads the set.
#[test]
fn session_cleanup_with_lateness_keeps_other_sessions() {
    let p = OperatorParams { session_gap: 10, allowed_lateness: 5, ..params(K::SessionHolistic) };
    let m = k17(b'm', 1, 0);
    let (s0, s30) = (k17(b'w', 1, 0), k17(b'w', 1, 30));
    let chunks = vec![
        vec![ev(0, 1, 0)],
        vec![ev(0, 1, 30)],
        vec![wm(0, 10)],    // Wf 9: [0,10) fires (max timestamp 9); cleanup at 14
        vec![ev(0, 1, 2)],  // [0,12): timers of [0,10) deleted, new ones at 11 and 16
        vec![wm(0, 17)],    // Wf 16: [0,12) fires at 11, is cleaned up at 16
        vec![ev(0, 1, 1)],  // [1,11): cleanup 15 <= 16: late
        vec![ev(0, 1, 30)], // the window [30,40) is in the set: it does not change
    ];
    let (got, stats) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        vec![get(m.clone()), merge(s0.clone()), put(m.clone())],
        vec![get(m.clone()), merge(s30.clone()), put(m.clone())],
        vec![get(m.clone()), get(s0.clone())],
        vec![get(m.clone()), merge(s0.clone()), put(m.clone())],
        vec![
            get(m.clone()),
            get(s0.clone()), // firing timer (11)
            get(m.clone()),
            del(s0.clone()), // cleanup timer (16): clearAllState
            put(m.clone()),  // persist() in clearAllState
            put(m.clone()),  // persist() in onEventTime
        ],
        vec![get(m.clone())],
        vec![get(m.clone()), merge(s30.clone())],
        // finish: [30,40) fires at 39, is cleaned up at 44
        vec![
            get(m.clone()),
            get(s30.clone()),
            get(m.clone()),
            del(s30.clone()),
            del(m.clone()),
            del(m.clone()),
        ],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "chunk {i}");
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(got[3][2].value.len(), 64);
    assert_eq!((got[4][4].value.len(), got[4][5].value.len()), (32, 32));
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (5, 1, 3));
    assert_eq!(stats.live_state_keys, 0);
}

#[test]
fn session_lateness_refires() {
    let p = OperatorParams { session_gap: 10, allowed_lateness: 10, ..params(K::SessionHolistic) };
    let m = k17(b'm', 1, 0);
    let s = k17(b'w', 1, 0);
    let chunks = vec![
        vec![ev(0, 1, 0)],
        vec![wm(0, 10)],   // [0,10) fires, lives until 19
        vec![ev(0, 1, 5)], // extends to [0,15)
        vec![wm(0, 16)],   // [0,15) fires
        vec![ev(0, 1, 1)], // inside [0,15): no set change, re-fire
        vec![wm(0, 30)],   // cleanup at 24
        vec![ev(0, 1, 2)], // late: [2,12) cleaned up long ago
    ];
    let (got, stats) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        vec![get(m.clone()), merge(s.clone()), put(m.clone())],
        vec![get(m.clone()), get(s.clone())],
        vec![get(m.clone()), merge(s.clone()), put(m.clone())],
        vec![get(m.clone()), get(s.clone())],
        vec![get(m.clone()), merge(s.clone()), get(s.clone())],
        vec![get(m.clone()), del(s.clone()), del(m.clone()), del(m.clone())],
        vec![get(m.clone())],
        vec![],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "chunk {i}");
    }
    assert_eq!((stats.events, stats.late_dropped, stats.windows_fired), (4, 1, 3));
}

// ---------------------------------------------------------------------------------------
// Window joins

#[test]
fn join_tumbling_sequence() {
    let p = OperatorParams { window: 10, ..params(K::JoinTumbling) };
    let w = |g, s| k17(b'w', g, s);
    let items = [
        ev(0, 1, 1),
        ev(1, 1, 2),
        ev(1, 2, 3),
        ev(2, 1, 4), // source 2: ignored
        wm(0, 10),   // right still at -inf: nothing fires
        wm(2, 50),
        wm(1, 10),
        ev(0, 1, 5), // late on both sides
    ];
    let (chunks, stats) = run_chunks(&p, &[items[..5].to_vec(), items[5..].to_vec()]);
    assert_eq!(kk(&chunks[0]), vec![merge(w(1, 0)), merge(w(1, 0)), merge(w(2, 0))]);
    assert_eq!(kk(&chunks[1]), cat(vec![gd(w(1, 0)), gd(w(2, 0))]));
    assert!(chunks[2].is_empty());
    assert_eq!(stats.events, 4);
    assert_eq!(stats.ignored_items, 2);
    assert_eq!((stats.late_dropped, stats.windows_fired), (1, 2));
}

#[test]
fn join_sliding_sequence() {
    let p = OperatorParams { window: 10, slide: 5, ..params(K::JoinSliding) };
    let w = |s| k17(b'w', 1, s);
    let (ops, stats) = run(&p, &[ev(0, 1, 7), ev(1, 1, 12)]);
    let want = cat(vec![
        vec![merge(w(5)), merge(w(0)), merge(w(10)), merge(w(5))],
        gd(w(0)),
        gd(w(5)),
        gd(w(10)),
    ]);
    assert_eq!(kk(&ops), want);
    assert_eq!(stats.windows_fired, 3);
}

// ---------------------------------------------------------------------------------------
// Interval join

#[test]
fn interval_join_sequence() {
    let p = OperatorParams { lower: -2, upper: 3, ..params(K::JoinInterval) };
    let l = |t| k17(b'l', 1, t);
    let r = |t| k17(b'r', 1, t);
    let chunks = vec![
        vec![ev(0, 1, 10)],
        vec![ev(1, 1, 11)],
        vec![ev(1, 1, 11)],
        vec![ev(0, 1, 12)],
        vec![wm(0, 14), wm(1, 14)], // Wf = 13
        vec![ev(0, 1, 12)],         // 12 < 13: late
        vec![ev(0, 1, 13)],
    ];
    let (got, stats) = run_chunks(&p, &chunks);
    let want: Vec<Vec<Op>> = vec![
        cat(vec![gp(l(10)), vec![seek(r(i64::MIN))]]),
        cat(vec![gp(r(11)), vec![seek(l(i64::MIN)), next(l(10))]]),
        cat(vec![gp(r(11)), vec![seek(l(i64::MIN)), next(l(10))]]),
        cat(vec![gp(l(12)), vec![seek(r(i64::MIN)), next(r(11))]]),
        // left 10 expires at 10 + 3, right 11 at 11 + 2
        vec![del(l(10)), del(r(11))],
        vec![],
        cat(vec![gp(l(13)), vec![seek(r(i64::MIN))]]),
        vec![del(l(12)), del(l(13))],
    ];
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(kk(g), *w, "chunk {i}");
    }
    // The bucket of right 11 holds two events.
    assert_eq!(got[2][1].value.len(), 2 * V as usize);
    assert_eq!((stats.events, stats.late_dropped, stats.live_state_keys), (6, 1, 0));
}

/// Gadget computes `t - upper` unsigned (wraps for t < upper) and never cleans up; here the
/// buffered key itself is deleted, for extreme times and negative bounds too.
#[test]
fn interval_join_no_underflow() {
    let p = OperatorParams { lower: -5, upper: -1, ..params(K::JoinInterval) };
    let items =
        [ev(0, 1, 2), ev(1, 1, -3), ev(0, 2, i64::MIN), ev(1, 2, i64::MAX), ev(0, 3, i64::MAX)];
    let (ops, stats) = run(&p, &items);
    let deletes: Vec<Op> =
        ops.iter().filter(|o| o.kind == O::Delete).map(|o| (o.kind, o.key.clone())).collect();
    // Cleanup times: left 2 -> 2, right -3 -> -3 + 5 = 2, left MIN -> MIN, right MAX and
    // left MAX -> MAX (saturated); order (time, registration).
    let want = vec![
        del(k17(b'l', 2, i64::MIN)),
        del(k17(b'l', 1, 2)),
        del(k17(b'r', 1, -3)),
        del(k17(b'r', 2, i64::MAX)),
        del(k17(b'l', 3, i64::MAX)),
    ];
    assert_eq!(deletes, want);
    assert_eq!(stats.live_state_keys, 0);
}

// ---------------------------------------------------------------------------------------
// Continuous operators

fn join_stream() -> Vec<StreamItem> {
    vec![
        ev(0, 1, 5),
        ev(1, 1, 3),
        wm(0, 100),
        wm(1, 100),
        ev(1, 2, 0),
        ev(0, 1, 1),
        ev(0, 1, 5), // the same left row again
        ev(1, 1, 9),
    ]
}

/// Default view, `InputSideHasNoUniqueKey`: the other side's map is iterated (seek, one
/// next per row), the own row's count is read and written.
#[test]
fn continuous_join_sequence() {
    let p = params(K::ContinuousJoin);
    assert_eq!(p.join_input, JoinInput::NoUniqueKey);
    let l = |k, t| k17(b'l', k, t);
    let r = |k, t| k17(b'r', k, t);
    let (chunks, stats) = run_chunks(&p, &[join_stream()]);
    let want = cat(vec![
        vec![seek(r(1, i64::MIN))],
        gp(l(1, 5)),
        vec![seek(l(1, i64::MIN)), next(l(1, 5))],
        gp(r(1, 3)),
        vec![seek(l(2, i64::MIN))],
        gp(r(2, 0)),
        vec![seek(r(1, i64::MIN)), next(r(1, 3))],
        gp(l(1, 1)),
        vec![seek(r(1, i64::MIN)), next(r(1, 3))],
        gp(l(1, 5)), // count 2: the same key
        vec![seek(l(1, i64::MIN)), next(l(1, 1)), next(l(1, 5))],
        gp(r(1, 9)),
    ]);
    assert_eq!(kk(&chunks[0]), want);
    assert!(chunks[1].is_empty(), "finish deletes nothing");
    for o in &chunks[0] {
        let want = if o.kind == O::Put { V as usize } else { 0 };
        assert_eq!(o.value.len(), want, "{o:?}");
    }
    assert_eq!((stats.events, stats.late_dropped, stats.live_state_keys), (6, 0, 5));
}

/// `InputSideHasUniqueKey`: the same iteration, and one `put` per row (MapState.put).
#[test]
fn continuous_join_has_unique_key_sequence() {
    let p = OperatorParams { join_input: JoinInput::HasUniqueKey, ..params(K::ContinuousJoin) };
    let l = |k, t| k17(b'l', k, t);
    let r = |k, t| k17(b'r', k, t);
    let (ops, stats) = run(&p, &join_stream());
    let want = vec![
        seek(r(1, i64::MIN)),
        put(l(1, 5)),
        seek(l(1, i64::MIN)),
        next(l(1, 5)),
        put(r(1, 3)),
        seek(l(2, i64::MIN)),
        put(r(2, 0)),
        seek(r(1, i64::MIN)),
        next(r(1, 3)),
        put(l(1, 1)),
        seek(r(1, i64::MIN)),
        next(r(1, 3)),
        put(l(1, 5)), // the same unique key: replaced
        seek(l(1, i64::MIN)),
        next(l(1, 1)),
        next(l(1, 5)),
        put(r(1, 9)),
    ];
    assert_eq!(kk(&ops), want);
    assert_eq!((stats.events, stats.live_state_keys), (6, 5));
}

/// `JoinKeyContainsUniqueKey`: one value per side and key, `get` the other, `put` the own.
#[test]
fn continuous_join_key_contains_unique_key_sequence() {
    let p = OperatorParams {
        join_input: JoinInput::JoinKeyContainsUniqueKey,
        ..params(K::ContinuousJoin)
    };
    let l = |k| k17(b'l', k, 0);
    let r = |k| k17(b'r', k, 0);
    let (ops, stats) = run(&p, &join_stream());
    let want = vec![
        get(r(1)),
        put(l(1)),
        get(l(1)),
        put(r(1)),
        get(l(2)),
        put(r(2)),
        get(r(1)),
        put(l(1)),
        get(r(1)),
        put(l(1)),
        get(l(1)),
        put(r(1)),
    ];
    assert_eq!(kk(&ops), want);
    assert_eq!((stats.events, stats.live_state_keys), (6, 3));
    assert_eq!(p.access_hint(), spillway_store::AccessHint::Point);
    assert_eq!(params(K::ContinuousJoin).access_hint(), spillway_store::AccessHint::Range);
}

/// `RocksDBMapIterator` reads 128 entries per seek; it seeks again to the last entry read
/// and steps over it with a `next`.
#[test]
fn continuous_join_map_iterator_reseeks_every_128_entries() {
    let p = params(K::ContinuousJoin);
    let l = |t| k17(b'l', 1, t);
    let mut items: Vec<StreamItem> = (0..300).map(|t| ev(0, 1, t)).collect();
    items.push(ev(1, 1, 0));
    let (chunks, _) = run_chunks(&p, &[items[..300].to_vec(), items[300..].to_vec()]);
    let mut want = vec![seek(l(i64::MIN))];
    for t in 0..300 {
        if t == 128 || t == 256 {
            want.extend([seek(l(t - 1)), next(l(t - 1))]);
        }
        want.push(next(l(t)));
    }
    want.extend(gp(k17(b'r', 1, 0)));
    assert_eq!(kk(&chunks[1]), want);
    // Exactly 128 entries: one batch, no second seek.
    let mut items: Vec<StreamItem> = (0..128).map(|t| ev(0, 1, t)).collect();
    items.push(ev(1, 1, 0));
    let (ops, _) = run(&p, &items);
    let seeks = ops.iter().filter(|o| o.kind == O::Seek && o.key[0] == b'l').count();
    assert_eq!(seeks, 1);
}

/// The retraction path (the generated streams are insert-only): `retractRecord` after the
/// other side's read, on hand-built records.
#[test]
fn continuous_join_retractions() {
    let layout = KeyLayout::new(17).unwrap();
    let rec = |key, time| InputEvent { source: 0, key, time, value_len: V };
    let l = |k, t| k17(b'l', k, t);
    let r = |k, t| k17(b'r', k, t);
    let run_view = |view, steps: &[(Side, InputEvent, bool)]| {
        let mut j = continuous::ContinuousJoin::new(view, layout);
        let mut ops = Vec::new();
        for (side, e, retract) in steps {
            j.process(*side, e, *retract, &mut |o: &StateOp| ops.push(o.clone()));
        }
        (kk(&ops), j.stats().live_state_keys)
    };
    use Side::{Left as L, Right as R};
    // InputSideHasNoUniqueKey: count 2 -> 1 (put), 1 -> 0 (delete), absent (get only).
    let steps = [
        (L, rec(1, 5), false),
        (L, rec(1, 5), false),
        (R, rec(1, 7), false),
        (L, rec(1, 5), true),
        (L, rec(1, 5), true),
        (L, rec(1, 5), true),
    ];
    let (ops, live) = run_view(JoinInput::NoUniqueKey, &steps);
    let want = cat(vec![
        vec![seek(r(1, i64::MIN))],
        gp(l(1, 5)),
        vec![seek(r(1, i64::MIN))],
        gp(l(1, 5)),
        vec![seek(l(1, i64::MIN)), next(l(1, 5))],
        gp(r(1, 7)),
        vec![seek(r(1, i64::MIN)), next(r(1, 7))],
        gp(l(1, 5)), // count 2 -> 1
        vec![seek(r(1, i64::MIN)), next(r(1, 7))],
        gd(l(1, 5)),                                             // count 1 -> removed
        vec![seek(r(1, i64::MIN)), next(r(1, 7)), get(l(1, 5))], // absent: no write
    ]);
    assert_eq!(ops, want);
    assert_eq!(live, 1);
    // InputSideHasUniqueKey: MapState.remove, present or not.
    let steps = [(L, rec(1, 5), false), (L, rec(1, 5), true), (L, rec(1, 5), true)];
    let (ops, live) = run_view(JoinInput::HasUniqueKey, &steps);
    let s = || seek(r(1, i64::MIN));
    assert_eq!(ops, vec![s(), put(l(1, 5)), s(), del(l(1, 5)), s(), del(l(1, 5))]);
    assert_eq!(live, 0);
    // JoinKeyContainsUniqueKey: ValueState.clear.
    let steps = [(R, rec(2, 5), false), (R, rec(2, 6), true)];
    let (ops, live) = run_view(JoinInput::JoinKeyContainsUniqueKey, &steps);
    assert_eq!(ops, vec![get(l(2, 0)), put(r(2, 0)), get(l(2, 0)), del(r(2, 0))]);
    assert_eq!(live, 0);
}

#[test]
fn continuous_aggregation_sequence() {
    let p = params(K::ContinuousAggregation);
    let a = |k| k17(b'a', k, 0);
    let (ops, stats) = run(&p, &[ev(0, 1, 5), ev(0, 2, 3), wm(0, 100), ev(0, 1, 1)]);
    assert_eq!(kk(&ops), cat(vec![gp(a(1)), gp(a(2)), gp(a(1))]));
    assert_eq!((stats.events, stats.late_dropped, stats.live_state_keys), (3, 0, 2));
}

// ---------------------------------------------------------------------------------------
// Random streams: no-loss accounting and bounded buffers

struct Gen {
    rng: StdRng,
    keys: u64,
    disorder: i64,
    late_pct: u32,
    wm_every: u32,
}

impl Gen {
    /// `n` events (sources 0 and 1, plus a few of source 2) with increasing base time,
    /// bounded disorder, some very late events and periodic watermarks per source.
    fn stream(&mut self, n: usize) -> Vec<StreamItem> {
        let mut items = Vec::new();
        let mut base = self.rng.random_range(-50..50i64);
        for i in 0..n {
            base += self.rng.random_range(0..3);
            let mut t = base + self.rng.random_range(-self.disorder..=self.disorder);
            if self.rng.random_range(0..100) < self.late_pct {
                t -= self.rng.random_range(0..40);
            }
            let source = match self.rng.random_range(0..50) {
                0 => 2,
                x => (x % 2) as u8,
            };
            let key = self.rng.random_range(0..self.keys);
            let value_len = self.rng.random_range(0..20);
            items.push(StreamItem::Event(InputEvent { source, key, time: t, value_len }));
            if (i as u32).is_multiple_of(self.wm_every) {
                for s in 0..2 {
                    let lag = self.rng.random_range(0..3);
                    items.push(wm(s, base - self.disorder - lag));
                }
            }
        }
        items
    }
}

fn gen(seed: u64) -> Gen {
    Gen { rng: StdRng::seed_from_u64(seed), keys: 6, disorder: 4, late_pct: 5, wm_every: 5 }
}

/// Applies ops to a set of live keys: put/merge insert, delete must remove a live key.
#[derive(Default)]
struct Oracle {
    live: HashSet<Vec<u8>>,
    ever: HashSet<Vec<u8>>,
    last: Option<Op>,
}

impl Oracle {
    fn apply(&mut self, o: &StateOp, key_bytes: usize) {
        assert_eq!(o.key.len(), key_bytes, "{o:?}");
        match o.kind {
            O::Put | O::Merge => {
                self.live.insert(o.key.clone());
                self.ever.insert(o.key.clone());
            }
            O::Delete => {
                // A session cleanup persists the emptied set twice (clearAllState, then
                // onEventTime): the second delete repeats the one before it.
                let repeat = self.last.as_ref() == Some(&(O::Delete, o.key.clone()));
                assert!(self.live.remove(&o.key) || repeat, "delete of a key not live: {o:?}");
            }
            O::Get | O::Seek | O::Next => assert!(o.value.is_empty()),
            O::Scan => panic!("no operator scans"),
        }
        self.last = Some((o.kind, o.key.clone()));
    }
}

fn check_random(kind: OperatorKind, p: &OperatorParams, seed: u64) {
    let items = gen(seed).stream(1500);
    let mut op = build(p).unwrap();
    let mut oracle = Oracle::default();
    let (mut events, mut ignored) = (0u64, 0u64);
    for (i, item) in items.iter().enumerate() {
        let source = match item {
            StreamItem::Event(e) => e.source,
            StreamItem::Watermark { source, .. } => *source,
        };
        if kind.two_inputs() && source > 1 {
            ignored += 1;
        } else if matches!(item, StreamItem::Event(_)) {
            events += 1;
        }
        op.on_item(item, i as u64, &mut |o: &StateOp| oracle.apply(o, p.key_bytes));
        assert_eq!(
            op.stats().live_state_keys,
            oracle.live.len() as u64,
            "{} item {i}",
            kind.name()
        );
    }
    op.finish(items.len() as u64, &mut |o: &StateOp| oracle.apply(o, p.key_bytes));
    let stats = op.stats();
    assert_eq!(stats.events, events, "{}", kind.name());
    assert_eq!(stats.ignored_items, ignored, "{}", kind.name());
    assert!(stats.late_dropped <= events);
    assert_eq!(stats.live_state_keys, oracle.live.len() as u64, "{}", kind.name());
    assert!(!oracle.ever.is_empty());
    match kind {
        K::ContinuousJoin | K::ContinuousAggregation => {
            // Never deleted: every key ever written is still live.
            assert_eq!(oracle.live, oracle.ever, "{}", kind.name());
            assert_eq!(stats.late_dropped, 0);
        }
        _ => {
            assert!(oracle.live.is_empty(), "{}: {} keys left", kind.name(), oracle.live.len());
            assert!(stats.late_dropped > 0, "{}: the stream has late events", kind.name());
        }
    }
}

#[test]
fn random_streams_every_key_is_deleted_and_stats_add_up() {
    for kind in OperatorKind::ALL {
        for seed in 0..4 {
            let mut p = OperatorParams { window: 8, slide: 3, session_gap: 4, ..params(kind) };
            p.allowed_lateness = [0, 0, 3, 7][seed as usize];
            check_random(kind, &p, seed);
        }
    }
    // Default 10-byte keys (compact layout) as well.
    for kind in OperatorKind::ALL {
        check_random(kind, &OperatorParams::new(kind), 9);
    }
}

/// Independent oracle for tumbling windows: an event is dropped iff its window's
/// `end + L <= W` (W = the largest watermark so far); every window created before its end
/// fires once at its end, and every accepted event that arrives after its window's end
/// re-fires it.
#[test]
fn random_tumbling_late_counts_match_oracle() {
    for seed in 0..6 {
        let lateness = [0, 2, 5][seed as usize % 3];
        let p = OperatorParams {
            window: 7,
            allowed_lateness: lateness,
            ..params(K::TumblingKeyedHolistic)
        };
        let items = gen(100 + seed).stream(1000);
        let mut op = build(&p).unwrap();
        let mut w = i64::MIN;
        let (mut dropped, mut fired) = (0u64, 0u64);
        let mut windows = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            match *item {
                StreamItem::Event(e) => {
                    let end = e.time.div_euclid(7) * 7 + 7;
                    if end + lateness <= w {
                        dropped += 1;
                    } else {
                        // A window first seen after its end has no firing timer: it only
                        // fires on its events.
                        if end > w {
                            windows.insert((e.key, end));
                        }
                        fired += u64::from(end <= w);
                    }
                }
                StreamItem::Watermark { time, .. } => w = w.max(time),
            }
            op.on_item(item, i as u64, &mut |_: &StateOp| {});
        }
        op.finish(0, &mut |_: &StateOp| {});
        let s = op.stats();
        assert_eq!(s.late_dropped, dropped, "seed {seed}");
        assert_eq!(s.windows_fired, fired + windows.len() as u64, "seed {seed}");
    }
}

/// The interval join holds exactly the buckets whose cleanup time is after the watermark,
/// and so stays bounded by the keys times the buffered time span.
#[test]
fn random_interval_join_buffers_are_bounded() {
    for (seed, (lower, upper)) in [(-5i64, 5i64), (-20, -3), (2, 9), (0, 0)].into_iter().enumerate()
    {
        let p = OperatorParams { lower, upper, ..params(K::JoinInterval) };
        let mut g = gen(200 + seed as u64);
        let items = g.stream(20_000);
        let mut op = build(&p).unwrap();
        let mut oracle = Oracle::default();
        let mut accepted: BTreeSet<(u8, u64, i64)> = BTreeSet::new();
        let mut sides = [i64::MIN; 2];
        let mut max_live = 0u64;
        let mut max_time = i64::MIN;
        for (i, item) in items.iter().enumerate() {
            op.on_item(item, i as u64, &mut |o: &StateOp| oracle.apply(o, 17));
            match *item {
                StreamItem::Event(e) if e.source < 2 => {
                    let wf = sides[0].min(sides[1]).saturating_sub(1);
                    max_time = max_time.max(e.time);
                    if e.time >= wf {
                        accepted.insert((e.source, e.key, e.time));
                    }
                }
                StreamItem::Watermark { source, time } if source < 2 => {
                    let s = usize::from(source);
                    let before = sides[0].min(sides[1]).saturating_sub(1);
                    sides[s] = sides[s].max(time);
                    let wf = sides[0].min(sides[1]).saturating_sub(1);
                    if wf <= before {
                        continue; // timers fire only when the watermark advances
                    }
                    // Flink: a left bucket lives while t + max(upper, 0) > Wf, a right one
                    // while t + max(-lower, 0) > Wf.
                    accepted.retain(|&(side, _, t)| {
                        let horizon = if side == 0 { upper.max(0) } else { (-lower).max(0) };
                        t + horizon > wf
                    });
                    let live = op.stats().live_state_keys;
                    assert_eq!(live, accepted.len() as u64, "seed {seed} item {i}");
                    max_live = max_live.max(live);
                    // Bound: 2 sides x keys x (time span between the watermark and the
                    // newest event, plus the bound horizon).
                    let span = (max_time - wf) + upper.max(0) + (-lower).max(0) + 1;
                    assert!(live <= 2 * g.keys * span as u64, "seed {seed}: {live} > bound");
                }
                _ => {}
            }
        }
        assert!(max_live > 0 && max_live < 2 * g.keys * 60, "max live {max_live}");
        op.finish(0, &mut |o: &StateOp| oracle.apply(o, 17));
        assert!(oracle.live.is_empty());
        assert_eq!(op.stats().live_state_keys, 0);
    }
}

#[test]
fn timers_dedupe_and_order() {
    let mut t: Timers<u8> = Timers::new();
    t.register(5, 1);
    t.register(3, 2);
    t.register(5, 1);
    t.register(5, 0);
    t.delete(3, 2);
    assert_eq!(t.len(), 2);
    assert_eq!(t.pop_due(4), None);
    assert_eq!(t.pop_due(5), Some((5, 1)));
    assert_eq!(t.pop_due(5), Some((5, 0)));
    assert_eq!(t.pop_due(i64::MAX), None);
}
