//! The event-detection application (spillway_bench::event_detection): the same
//! detections over every store and cache size, and the planted bursts found.

use spillway_bench::event_detection::{self, generate, run_stream, Burst, Config, Report};
use spillway_store::tiered::{L2Config, L3Kind, TieredOptions, TieredStore};
use spillway_store::StateStoreExt;
use spillway_store::{MemStore, StateStore, StoreOptions};

fn opts(dir: &std::path::Path) -> StoreOptions {
    StoreOptions::new(dir).memory_budget(64 << 20).namespace(event_detection::namespace_spec())
}

fn over_mem(cfg: &Config) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemStore::open(opts(dir.path())).unwrap();
    event_detection::run(cfg, &mut store).unwrap()
}

#[test]
fn detections_are_the_same_over_mem_and_tiered_at_every_l1_size() {
    let cfg = Config { posts: 60_000, seed: 3, ..Config::default() };
    let stream = generate(&cfg);
    let peak = event_detection::measure_state(&cfg).unwrap();
    assert!(peak.keys > 100 && peak.bytes > 10_000, "{peak:?}");
    let reference = over_mem(&cfg);
    assert!(!reference.events.is_empty());
    for pct in [1u64, 10, 100] {
        let l1 = (peak.l1_weight() * pct / 100).max(1);
        let dir = tempfile::tempdir().unwrap();
        let topts = TieredOptions::new(l1).l2(L2Config::None).l3(L3Kind::HashLog);
        let mut store = TieredStore::open(opts(dir.path()), topts).unwrap();
        let report = run_stream(&cfg, &stream, &mut store).unwrap();
        assert_eq!(report.events, reference.events, "L1 at {pct}% ({l1} bytes)");
        assert_eq!(report.posts, reference.posts);
        assert_eq!(report.cells_tested, reference.cells_tested);
        let t = store.tier_stats();
        assert!(t.l1_hits > 0, "{t:?}");
        if pct < 100 {
            // A small L1 really moved state down and back up.
            assert!(t.demotions_to_l3 > 0 && t.promotions_from_l3 > 0, "L1 {pct}%: {t:?}");
        }
        // The run leaves only the baseline behind (every window's tree was cleared),
        // and the state survives a checkpoint.
        store.checkpoint().unwrap();
    }
}

#[test]
fn planted_bursts_are_detected_where_and_when_they_happen() {
    let cfg = Config::default();
    let report = over_mem(&cfg);
    assert_eq!(report.bursts.len(), cfg.bursts);
    for (i, (b, m)) in report.bursts.iter().zip(report.burst_matches()).enumerate() {
        let Some(e) = m else {
            panic!("burst {i} {b:?} was not detected; events: {:#?}", report.events)
        };
        let e = &report.events[e];
        // The event's densest cell is at the burst's centre, not just its region.
        let (x, y) = e.hotspot.center();
        assert!(
            (x - b.lon).abs() < 0.1 && (y - b.lat).abs() < 0.1,
            "burst {i} at ({}, {}) but event hot spot at ({x}, {y})",
            b.lon,
            b.lat
        );
    }
    assert!(report.unmatched_events() <= 1, "spurious events: {:#?}", report.events);
}

#[test]
fn a_stream_without_bursts_has_no_events_and_a_moved_burst_is_not_covered() {
    let cfg = Config { bursts: 0, seed: 11, ..Config::default() };
    let quiet = over_mem(&cfg);
    assert!(quiet.events.is_empty(), "events without bursts: {:#?}", quiet.events);

    // The check is not vacuous: each event covers its burst, but not the same burst
    // two hours later or ten degrees away.
    let report = over_mem(&Config { posts: 100_000, ..Config::default() });
    let hour = 3_600_000;
    for (b, m) in report.bursts.iter().zip(report.burst_matches()) {
        let e = &report.events[m.expect("every burst detected")];
        assert!(e.covers(b));
        let later = if b.start_ms > 3 * hour {
            Burst { start_ms: b.start_ms - 2 * hour, end_ms: b.end_ms - 2 * hour, ..*b }
        } else {
            Burst { start_ms: b.start_ms + 2 * hour, end_ms: b.end_ms + 2 * hour, ..*b }
        };
        assert!(!e.covers(&later));
        assert!(!e.covers(&Burst { lat: b.lat + if b.lat > 47.0 { -10.0 } else { 10.0 }, ..*b }));
    }
}

#[test]
fn tumbling_windows_find_the_bursts_too() {
    let cfg = Config { posts: 100_000, slide_ms: 10 * 60_000, seed: 5, ..Config::default() };
    let report = over_mem(&cfg);
    let found = report.burst_matches().iter().filter(|m| m.is_some()).count();
    assert_eq!(found, cfg.bursts, "{:#?}", report.events);
}

#[test]
fn a_run_leaves_only_the_baseline_behind() {
    let cfg = Config { posts: 20_000, ..Config::default() };
    let dir = tempfile::tempdir().unwrap();
    let mut store = MemStore::open(opts(dir.path())).unwrap();
    event_detection::run(&cfg, &mut store).unwrap();
    let ns = store.namespace(event_detection::NAMESPACE).unwrap();
    let mut left = Vec::new();
    store
        .scan_prefix(ns, &[], &mut |k, _| {
            left.push(k.to_vec());
            true
        })
        .unwrap();
    assert!(!left.is_empty());
    // Every key left is an entry of the map "baseline" (kind 'M', id length 8).
    assert!(left.iter().all(|k| k.starts_with(b"M\x08baseline")), "{} keys", left.len());
}
