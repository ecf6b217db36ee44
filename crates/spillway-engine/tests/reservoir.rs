//! Reservoir tests against a `Vec<Event>` oracle: round trips with several cursors across
//! chunk and segment boundaries (both codecs), sync/drop/recover, release, corruption of
//! the files on disk, background write errors and bounded memory.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use spillway_engine::reservoir::{
    Compression, CursorId, Position, Reservoir, ReservoirError, ReservoirOptions,
};
use spillway_engine::value::{DataType, Event, Field, Schema, TimeUnit, Value};

// ----- helpers ---------------------------------------------------------------------------

/// Bitwise equality (NaN payloads count).
fn same(a: &Event, b: &Event) -> bool {
    a.time == b.time
        && a.seq == b.seq
        && a.row.len() == b.row.len()
        && a.row.iter().zip(&b.row).all(|(x, y)| match (x, y) {
            (Value::Float(p), Value::Float(q)) => p.to_bits() == q.to_bits(),
            _ => x == y,
        })
}

fn schema_of(types: &[DataType], time_at: usize) -> Schema {
    let mut fields: Vec<Field> =
        types.iter().enumerate().map(|(i, &ty)| Field { name: format!("f{i}"), ty }).collect();
    let t = time_at.min(fields.len());
    fields.insert(t, Field { name: "ts".into(), ty: DataType::Int });
    Schema::new(fields, "ts", TimeUnit::Ms).unwrap()
}

fn simple_schema() -> Schema {
    schema_of(&[DataType::Float, DataType::Str, DataType::Int, DataType::Bool], 0)
}

/// Deterministic events for `simple_schema` (xorshift, no timing).
fn simple_events(n: usize, seed: u64) -> Vec<Event> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = 1_700_000_000_000i64;
    (0..n)
        .map(|i| {
            t += (next() % 5) as i64;
            let r = next();
            Event {
                time: t,
                seq: i as u64,
                row: vec![
                    Value::Int(t),
                    if r % 7 == 0 { Value::Null } else { Value::Float((r % 1000) as f64 / 8.0) },
                    Value::Str(format!("user{}", r % 50).into()),
                    Value::Int((r >> 20) as i64 % 1000 - 500),
                    Value::Bool(r & 1 == 1),
                ],
            }
        })
        .collect()
}

fn value_of(ty: DataType) -> BoxedStrategy<Value> {
    let nn = match ty {
        DataType::Int => any::<i64>().prop_map(Value::Int).boxed(),
        DataType::Float => any::<f64>().prop_map(Value::Float).boxed(),
        DataType::Str => "[a-z\u{e9}\u{4e16}]{0,10}".prop_map(|s| Value::Str(s.into())).boxed(),
        DataType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
    };
    prop_oneof![1 => Just(Value::Null), 5 => nn].boxed()
}

fn ty() -> impl Strategy<Value = DataType> {
    prop_oneof![
        Just(DataType::Int),
        Just(DataType::Float),
        Just(DataType::Str),
        Just(DataType::Bool)
    ]
}

/// A schema and up to `max` ordered events for it.
fn schema_and_events(max: usize) -> impl Strategy<Value = (Schema, Vec<Event>)> {
    (proptest::collection::vec(ty(), 0..5), 0usize..5).prop_flat_map(move |(types, time_at)| {
        let schema = schema_of(&types, time_at);
        let ti = schema.time_index();
        let row_types: Vec<DataType> = schema.fields().iter().map(|f| f.ty).collect();
        let row = row_types.iter().map(|&t| value_of(t)).collect::<Vec<_>>();
        let ev = (0i64..1000, any::<bool>(), row);
        proptest::collection::vec(ev, 0..max).prop_map(move |raw| {
            let mut t = -5_000i64;
            let evs = raw
                .into_iter()
                .enumerate()
                .map(|(i, (dt, time_in_row, mut row))| {
                    t += dt;
                    row[ti] = if time_in_row { Value::Int(t) } else { Value::Null };
                    Event { time: t, seq: i as u64 * 3, row }
                })
                .collect::<Vec<_>>();
            (schema.clone(), evs)
        })
    })
}

fn compression() -> impl Strategy<Value = Compression> {
    prop_oneof![Just(Compression::Lz4), (1i32..6).prop_map(Compression::Zstd)]
}

/// Reads `n` events (or to the end) from the cursor, checking each against the oracle.
fn read_check(r: &mut Reservoir, c: CursorId, oracle: &[Event], n: usize) -> Result<(), String> {
    for _ in 0..n {
        let i = r.cursor_index(c);
        let got = r.peek(c).map_err(|e| e.to_string())?.cloned();
        match got {
            None => {
                if i as usize != oracle.len() {
                    return Err(format!("None at {i}, oracle has {}", oracle.len()));
                }
                return Ok(());
            }
            Some(ev) => {
                let want = oracle.get(i as usize).ok_or(format!("event at {i} past oracle"))?;
                if !same(&ev, want) {
                    return Err(format!("event {i}: got {ev:?}, want {want:?}"));
                }
                // A second peek returns the same event.
                let again = r.peek(c).map_err(|e| e.to_string())?.cloned();
                if again.as_ref().is_none_or(|a| !same(a, want)) {
                    return Err(format!("second peek at {i} differs"));
                }
                r.advance(c);
            }
        }
    }
    Ok(())
}

fn read_all(r: &mut Reservoir, c: CursorId, oracle: &[Event]) -> Result<(), String> {
    read_check(r, c, oracle, usize::MAX)?;
    if r.cursor_index(c) as usize != oracle.len() {
        return Err(format!("cursor stopped at {}, want {}", r.cursor_index(c), oracle.len()));
    }
    Ok(())
}

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "spr"))
        .collect();
    v.sort();
    v
}

// ----- round trips -----------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Append(usize),
    NewCursor(usize),
    Read(usize, usize),
    /// `peek_ahead` on a cursor: up to `n` events, the visitor stopping after `stop`.
    Ahead(usize, usize, usize),
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1usize..80).prop_map(Op::Append),
        1 => any::<usize>().prop_map(Op::NewCursor),
        4 => (any::<usize>(), 1usize..60).prop_map(|(c, n)| Op::Read(c, n)),
        3 => (any::<usize>(), 0usize..80, 1usize..80).prop_map(|(c, n, stop)| Op::Ahead(c, n, stop)),
        1 => Just(Op::Sync),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn round_trip_with_interleaved_cursors(
        (schema, events) in schema_and_events(500),
        ops in proptest::collection::vec(op(), 0..40),
        chunk_events in 1usize..40,
        segment_bytes in prop_oneof![40u64..2000, Just(64u64 << 20)],
        comp in compression(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let opts = ReservoirOptions::new(tmp.path().join("r"))
            .chunk_events(chunk_events)
            .segment_bytes(segment_bytes)
            .compression(comp);
        let mut r = Reservoir::create(opts, &schema).unwrap();
        let mut appended = 0usize;
        let mut cursors = Vec::new();
        for op in ops {
            match op {
                Op::Append(n) => {
                    for e in events.iter().skip(appended).take(n) {
                        r.append(e).unwrap();
                    }
                    appended = (appended + n).min(events.len());
                }
                Op::NewCursor(at) => cursors.push(r.cursor((at % (appended + 1)) as u64).unwrap()),
                Op::Read(c, n) => {
                    if !cursors.is_empty() {
                        let c = cursors[c % cursors.len()];
                        read_check(&mut r, c, &events[..appended], n).map_err(TestCaseError::fail)?;
                    }
                }
                Op::Ahead(c, n, stop) => {
                    // The events visited are the next ones from the cursor on (as far as
                    // its chunk goes), and the cursor stays; the reads after it (which
                    // reuse what the visit decoded) are checked by `Read` and `read_all`.
                    if !cursors.is_empty() {
                        let c = cursors[c % cursors.len()];
                        let at = r.cursor_index(c) as usize;
                        let mut seen = Vec::new();
                        r.peek_ahead(c, n, &mut |e| {
                            seen.push(e.clone());
                            seen.len() < stop
                        })
                        .unwrap();
                        prop_assert_eq!(r.cursor_index(c) as usize, at);
                        prop_assert!(seen.len() <= n.min(stop));
                        prop_assert_eq!(seen.is_empty(), n == 0 || at >= appended);
                        for (k, e) in seen.iter().enumerate() {
                            prop_assert!(same(e, &events[at + k]), "peek_ahead event {}", at + k);
                        }
                    }
                }
                Op::Sync => {
                    let p = r.sync().unwrap();
                    prop_assert_eq!(p.events, appended as u64);
                }
            }
            prop_assert_eq!(r.len(), appended as u64);
        }
        for e in &events[appended..] {
            r.append(e).unwrap();
        }
        cursors.push(r.cursor(0).unwrap());
        cursors.push(r.cursor((events.len() / 2) as u64).unwrap());
        for &c in &cursors {
            read_all(&mut r, c, &events).map_err(TestCaseError::fail)?;
        }
        // Also after everything is on disk.
        r.sync().unwrap();
        let c = r.cursor(0).unwrap();
        read_all(&mut r, c, &events).map_err(TestCaseError::fail)?;
        let st = r.stats();
        prop_assert_eq!(st.events, events.len() as u64);
        // A segment holds at least one chunk, so only two or more chunks can roll.
        if st.chunks_sealed >= 2 && 36 + 36 * st.chunks_sealed + st.bytes_compressed > segment_bytes {
            prop_assert!(st.segments_live > 1, "tiny segments must roll: {:?}", st);
        }
    }

    #[test]
    fn recover_keeps_exactly_the_synced_prefix(
        (schema, events) in schema_and_events(400),
        cuts in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
        recover_to_first in any::<bool>(),
        chunk_events in 1usize..30,
        segment_bytes in prop_oneof![40u64..1500, Just(64u64 << 20)],
        comp in compression(),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("r");
        let opts = ReservoirOptions::new(&dir)
            .chunk_events(chunk_events)
            .segment_bytes(segment_bytes)
            .compression(comp);
        let n = events.len();
        let (a, b) = (cuts.0.index(n + 1), cuts.1.index(n + 1));
        let (a, b) = (a.min(b), a.max(b));
        let mut r = Reservoir::create(opts.clone(), &schema).unwrap();
        for e in &events[..a] {
            r.append(e).unwrap();
        }
        let p1 = r.sync().unwrap();
        for e in &events[a..b] {
            r.append(e).unwrap();
        }
        let p2 = r.sync().unwrap();
        // Written (maybe) but never synced: must be discarded too.
        for e in &events[b..] {
            r.append(e).unwrap();
        }
        drop(r);
        let (pos, keep) = if recover_to_first { (p1, a) } else { (p2, b) };
        prop_assert_eq!(pos.events, keep as u64);
        let mut r = Reservoir::recover(opts.clone(), &schema, &pos).unwrap();
        prop_assert_eq!(r.len(), keep as u64);
        let c = r.cursor(0).unwrap();
        read_all(&mut r, c, &events[..keep]).map_err(TestCaseError::fail)?;
        // Continue appending: the tail is re-appended after the recovered prefix.
        for e in &events[keep..] {
            r.append(e).unwrap();
        }
        read_all(&mut r, c, &events).map_err(TestCaseError::fail)?;
        let p3 = r.sync().unwrap();
        drop(r);
        let mut r = Reservoir::recover(opts, &schema, &p3).unwrap();
        let c = r.cursor(0).unwrap();
        read_all(&mut r, c, &events).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn reservoir_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Reservoir>();
    send::<Position>();
}

#[test]
fn cursor_in_open_chunk_follows_sealing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = simple_schema();
    let evs = simple_events(100, 7);
    let mut r = Reservoir::create(ReservoirOptions::new(tmp.path()).chunk_events(10), &s).unwrap();
    let c = r.cursor(0).unwrap();
    assert!(r.peek(c).unwrap().is_none());
    for (i, e) in evs.iter().enumerate() {
        r.append(e).unwrap();
        // Read each event right after it is appended (always in the open chunk or the
        // just-sealed one).
        assert!(same(r.peek(c).unwrap().unwrap(), e), "event {i}");
        r.advance(c);
        assert!(r.peek(c).unwrap().is_none());
        r.advance(c); // no-op at the end
        assert_eq!(r.cursor_index(c), i as u64 + 1);
    }
}

/// `peek_ahead` visits the events from the cursor on, up to the end of the chunk the
/// cursor stands in, and leaves the cursor where it was: in the open chunk, in sealed
/// in-memory chunks, and in chunks read back from disk after a recovery.
#[test]
fn peek_ahead_sees_the_next_events_and_moves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = simple_schema();
    let evs = simple_events(1000, 11);
    let opts = || ReservoirOptions::new(tmp.path()).chunk_events(64);
    let check = |r: &mut Reservoir, c: CursorId, from: usize, chunk_end: usize| {
        for n in [0usize, 1, 5, 64, 1000] {
            let mut seen = Vec::new();
            r.peek_ahead(c, n, &mut |e| {
                seen.push(e.clone());
                true
            })
            .unwrap();
            let want = &evs[from..(from + n).min(chunk_end).max(from)];
            assert_eq!(seen.len(), want.len(), "from {from}, n {n}");
            assert!(seen.iter().zip(want).all(|(a, b)| same(a, b)), "from {from}, n {n}");
            assert_eq!(r.cursor_index(c), from as u64);
            assert!(same(r.peek(c).unwrap().unwrap(), &evs[from]));
        }
        // The visitor can stop the visit.
        let mut count = 0;
        r.peek_ahead(c, 100, &mut |_| {
            count += 1;
            count < 3
        })
        .unwrap();
        assert_eq!(count, 3.min(chunk_end - from));
    };
    let mut r = Reservoir::create(opts(), &s).unwrap();
    for e in &evs[..1000] {
        r.append(e).unwrap();
    }
    let c = r.cursor(0).unwrap();
    for from in [0usize, 10, 63, 64, 100, 990] {
        while r.cursor_index(c) < from as u64 {
            r.peek(c).unwrap();
            r.advance(c);
        }
        let chunk_end = (from / 64 + 1) * 64;
        check(&mut r, c, from, chunk_end.min(1000));
    }
    let pos = r.sync().unwrap();
    drop(r);
    // From disk (decoded chunks).
    let mut r = Reservoir::recover(opts(), &s, &pos).unwrap();
    let c = r.cursor(130).unwrap();
    check(&mut r, c, 130, 192);
}

// ----- recover edge cases ------------------------------------------------------------------

#[test]
fn recover_of_an_empty_reservoir_and_schema_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let s = simple_schema();
    let mut r = Reservoir::create(ReservoirOptions::new(&dir), &s).unwrap();
    let p0 = r.sync().unwrap();
    assert_eq!(p0, Position { events: 0, segment: 0, segment_len: 0 });
    for e in simple_events(50, 1) {
        r.append(&e).unwrap();
    }
    r.sync().unwrap();
    drop(r);

    // A second create in the same directory is refused.
    let e = Reservoir::create(ReservoirOptions::new(&dir), &s).unwrap_err();
    assert!(matches!(e, ReservoirError::AlreadyExists { .. }), "{e}");
    assert!(e.to_string().contains("already holds a reservoir"));

    // A different schema is refused.
    let other = schema_of(&[DataType::Str], 0);
    let e = Reservoir::recover(ReservoirOptions::new(&dir), &other, &p0).unwrap_err();
    assert!(matches!(e, ReservoirError::SchemaMismatch { .. }), "{e}");
    assert!(e.to_string().contains("f0 string"), "{e}");

    // No reservoir at all.
    let e =
        Reservoir::recover(ReservoirOptions::new(tmp.path().join("none")), &s, &p0).unwrap_err();
    assert!(matches!(e, ReservoirError::NotAReservoir { .. }), "{e}");

    // Back to empty: everything after position 0 goes.
    let mut r = Reservoir::recover(ReservoirOptions::new(&dir), &s, &p0).unwrap();
    assert!(r.is_empty());
    assert!(segment_files(&dir).is_empty());
    let evs = simple_events(30, 2);
    for e in &evs {
        r.append(e).unwrap();
    }
    let c = r.cursor(0).unwrap();
    read_all(&mut r, c, &evs).unwrap();
}

#[test]
fn bad_calls_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let s = simple_schema();
    let e = Reservoir::create(ReservoirOptions::new(tmp.path().join("a")).chunk_events(0), &s)
        .unwrap_err();
    assert!(matches!(e, ReservoirError::InvalidOption { .. }), "{e}");
    let e = Reservoir::create(
        ReservoirOptions::new(tmp.path().join("b")).compression(Compression::Zstd(1000)),
        &s,
    )
    .unwrap_err();
    assert!(matches!(e, ReservoirError::InvalidOption { .. }), "{e}");

    let mut r = Reservoir::create(ReservoirOptions::new(tmp.path().join("c")), &s).unwrap();
    let evs = simple_events(20, 3);
    r.append(&evs[0]).unwrap();
    let mut bad = evs[1].clone();
    bad.row[2] = Value::Int(5); // a string column
    let e = r.append(&bad).unwrap_err();
    assert!(matches!(e, ReservoirError::InvalidEvent { index: 1, .. }), "{e}");
    assert!(e.to_string().contains("`f1`"), "{e}");
    let mut short = evs[1].clone();
    short.row.pop();
    assert!(r.append(&short).is_err());
    assert_eq!(r.len(), 1);
    for e in &evs[1..] {
        r.append(e).unwrap();
    }
    let c = r.cursor(0).unwrap();
    read_all(&mut r, c, &evs).unwrap();
    let e = r.cursor(21).unwrap_err();
    assert!(matches!(e, ReservoirError::OutOfRange { index: 21, len: 20 }), "{e}");
    let other = {
        let mut r2 = Reservoir::create(ReservoirOptions::new(tmp.path().join("d")), &s).unwrap();
        for _ in 0..5 {
            r2.cursor(0).unwrap();
        }
        r2.cursor(0).unwrap()
    };
    assert!(matches!(r.peek(other), Err(ReservoirError::UnknownCursor { .. })));
}

// ----- release -------------------------------------------------------------------------------

#[test]
fn release_deletes_whole_old_segments_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let s = simple_schema();
    let opts = ReservoirOptions::new(&dir).chunk_events(16).segment_bytes(600);
    let evs = simple_events(2000, 11);
    let mut r = Reservoir::create(opts.clone(), &s).unwrap();
    for e in &evs {
        r.append(e).unwrap();
    }
    let c_far = r.cursor(100).unwrap();
    r.sync().unwrap();
    let files_before = segment_files(&dir).len();
    assert!(files_before > 10, "{files_before} segments");

    r.release_before(0).unwrap();
    assert_eq!(r.stats().segments_deleted, 0);
    r.release_before(1000).unwrap();
    let st = r.stats();
    let first = r.first_live();
    assert!(st.segments_deleted > 0);
    assert!(first <= 1000 && first > 0, "first_live {first}");
    assert_eq!(segment_files(&dir).len() as u64, st.segments_live);
    assert_eq!(files_before as u64, st.segments_live + st.segments_deleted);

    // A cursor before the released region is refused, one at the boundary reads on.
    let e = r.cursor(first - 1).unwrap_err();
    assert!(
        matches!(e, ReservoirError::Released { index, first_live } if index == first - 1 && first_live == first),
        "{e}"
    );
    let e = r.peek(c_far).unwrap_err();
    assert!(matches!(e, ReservoirError::Released { .. }), "{e}");
    let c = r.cursor(first).unwrap();
    read_check(&mut r, c, &evs, 10).unwrap();
    assert_eq!(r.cursor_index(c), first + 10);
    let c2 = r.cursor(1000).unwrap();

    // Everything released: the newest segment stays.
    r.release_before(u64::MAX).unwrap();
    assert_eq!(r.stats().segments_live, 1);
    assert_eq!(segment_files(&dir).len(), 1);
    let last = r.first_live();
    let c3 = r.cursor(last).unwrap();
    read_all(&mut r, c3, &evs).unwrap();
    // c2 sat before the released region now.
    if last > 1000 {
        assert!(r.peek(c2).is_err());
    }

    // Recover after release, then continue.
    let more = simple_events(2300, 11);
    let p = r.sync().unwrap();
    drop(r);
    let mut r = Reservoir::recover(opts, &s, &p).unwrap();
    assert_eq!(r.first_live(), last);
    for e in &more[2000..] {
        r.append(e).unwrap();
    }
    let c = r.cursor(last).unwrap();
    read_all(&mut r, c, &more).unwrap();
    assert!(r.cursor(last - 1).is_err());
}

// ----- corruption -------------------------------------------------------------------------

/// Builds a synced reservoir of 600 events in several segments; returns its position.
fn build_for_damage(
    dir: &Path,
    comp: Compression,
) -> (ReservoirOptions, Schema, Vec<Event>, Position) {
    let s = simple_schema();
    let opts = ReservoirOptions::new(dir).chunk_events(50).segment_bytes(1500).compression(comp);
    let evs = simple_events(600, 5);
    let mut r = Reservoir::create(opts.clone(), &s).unwrap();
    for e in &evs {
        r.append(e).unwrap();
    }
    let p = r.sync().unwrap();
    (opts, s, evs, p)
}

/// Recovers and reads everything; returns the first error. Panics on a wrong event.
fn recover_and_read(
    opts: &ReservoirOptions,
    s: &Schema,
    evs: &[Event],
    p: &Position,
) -> Option<ReservoirError> {
    let mut r = match Reservoir::recover(opts.clone(), s, p) {
        Ok(r) => r,
        Err(e) => return Some(e),
    };
    let c = r.cursor(0).unwrap();
    loop {
        let i = r.cursor_index(c) as usize;
        match r.peek(c) {
            Ok(Some(ev)) => {
                assert!(same(ev, &evs[i]), "wrong event {i}: {ev:?}");
                r.advance(c);
            }
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

#[test]
fn flipped_payload_byte_is_reported_with_file_and_offset() {
    for comp in [Compression::Lz4, Compression::Zstd(3)] {
        let tmp = tempfile::tempdir().unwrap();
        let (opts, s, evs, p) = build_for_damage(tmp.path(), comp);
        let files = segment_files(tmp.path());
        assert!(files.len() >= 3);
        let victim = &files[1];
        let mut bytes = std::fs::read(victim).unwrap();
        // First chunk of the segment starts at 36; its payload at 72.
        bytes[72 + 3] ^= 0x10;
        std::fs::write(victim, &bytes).unwrap();
        let e = recover_and_read(&opts, &s, &evs, &p).expect("damage must be detected");
        match &e {
            ReservoirError::Corrupt { path, offset, what } => {
                assert_eq!(path, victim);
                assert_eq!(*offset, 36);
                assert!(what.contains("checksum"), "{what}");
            }
            other => panic!("expected Corrupt, got {other}"),
        }
        assert!(e.to_string().contains(&victim.display().to_string()));
        assert!(e.to_string().contains("byte offset 36"));
    }
}

#[test]
fn flipped_chunk_header_and_segment_header_fail_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let (opts, s, evs, p) = build_for_damage(tmp.path(), Compression::Lz4);
    let files = segment_files(tmp.path());
    let mut bytes = std::fs::read(&files[0]).unwrap();
    bytes[36 + 17] ^= 1; // event count of the first chunk
    std::fs::write(&files[0], &bytes).unwrap();
    match recover_and_read(&opts, &s, &evs, &p) {
        Some(ReservoirError::Corrupt { path, offset: 36, what }) => {
            assert_eq!(path, files[0]);
            assert!(what.contains("header checksum"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    bytes[36 + 17] ^= 1;
    bytes[20] ^= 1; // segment id in the segment header
    std::fs::write(&files[0], &bytes).unwrap();
    match recover_and_read(&opts, &s, &evs, &p) {
        Some(ReservoirError::Corrupt { path, offset: 0, .. }) => assert_eq!(path, files[0]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncated_and_missing_segments_fail_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let (opts, s, evs, p) = build_for_damage(tmp.path(), Compression::Lz4);
    let files = segment_files(tmp.path());
    let n = files.len();
    // The position's segment shorter than the position.
    let last = &files[n - 1];
    let len = std::fs::metadata(last).unwrap().len();
    assert_eq!(len, p.segment_len);
    let saved = std::fs::read(last).unwrap();
    std::fs::OpenOptions::new().write(true).open(last).unwrap().set_len(len - 5).unwrap();
    match recover_and_read(&opts, &s, &evs, &p) {
        Some(ReservoirError::Corrupt { path, offset, .. }) => {
            assert_eq!(&path, last);
            assert_eq!(offset, len - 5);
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(last, &saved).unwrap();
    // An older segment cut in the middle of a chunk.
    let mid = &files[1];
    let mlen = std::fs::metadata(mid).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(mid).unwrap().set_len(mlen - 7).unwrap();
    match recover_and_read(&opts, &s, &evs, &p) {
        Some(ReservoirError::Corrupt { path, what, .. }) => {
            assert_eq!(&path, mid);
            assert!(what.contains("past the end"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    // An older segment missing.
    std::fs::remove_file(mid).unwrap();
    match recover_and_read(&opts, &s, &evs, &p) {
        Some(ReservoirError::Corrupt { path, what, .. }) => {
            assert_eq!(&path, mid);
            assert!(what.contains("missing"), "{what}");
        }
        other => panic!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any single flipped bit anywhere in any segment is detected, and no wrong event is
    /// ever returned before the detection.
    #[test]
    fn any_flipped_bit_is_detected(file in any::<prop::sample::Index>(), at in any::<prop::sample::Index>(), bit in 0u8..8, zstd in any::<bool>()) {
        let tmp = tempfile::tempdir().unwrap();
        let comp = if zstd { Compression::Zstd(1) } else { Compression::Lz4 };
        let (opts, s, evs, p) = build_for_damage(tmp.path(), comp);
        let files = segment_files(tmp.path());
        let victim = file.get(&files);
        let mut bytes = std::fs::read(victim).unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= 1 << bit;
        std::fs::write(victim, &bytes).unwrap();
        match recover_and_read(&opts, &s, &evs, &p) {
            Some(ReservoirError::Corrupt { path, offset, .. }) => {
                prop_assert_eq!(&path, victim);
                prop_assert!(offset <= i as u64, "offset {} after flipped byte {}", offset, i);
            }
            other => prop_assert!(false, "flip at {} of {:?} gave {:?}", i, victim, other),
        }
    }
}

// ----- background errors and memory ----------------------------------------------------------

#[test]
fn writer_errors_surface_on_the_next_call() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let s = simple_schema();
    let mut r = Reservoir::create(ReservoirOptions::new(&dir).chunk_events(4), &s).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // The writer cannot create the first segment; appends may or may not see it yet.
    // Whichever call comes first after the failure returns the writer's error.
    let mut first = None;
    for e in simple_events(8, 1) {
        if let Err(x) = r.append(&e) {
            first = Some(x);
            break;
        }
    }
    let e = match first {
        Some(e) => e,
        None => r.sync().unwrap_err(),
    };
    assert!(matches!(e, ReservoirError::Io { op: "create segment", .. }), "{e}");
    assert!(e.to_string().contains("segment-0000000000000000.spr"), "{e}");
    let e = r.append(&simple_events(1, 1)[0]).unwrap_err();
    assert!(matches!(e, ReservoirError::Broken { .. }), "{e}");
    assert!(matches!(r.sync(), Err(ReservoirError::Broken { .. })));
}

/// The reservoir's files go through the `Fs` seam of its options: a failed fsync there
/// (an injected `FaultFs` fault) fails `sync`, naming the segment, and breaks the
/// reservoir; a torn chunk write (power cut mid-write) fails the next call, and a
/// recovery from the last synced position reads back exactly the events before it.
#[test]
fn file_operations_go_through_the_fs_seam() {
    use spillway_store::io::{Fault, FaultFs};
    use std::sync::Arc;

    let s = simple_schema();
    let events = simple_events(40, 9);
    let tmp = tempfile::tempdir().unwrap();
    let fs = FaultFs::new();
    let opts = ReservoirOptions::new(tmp.path().join("a")).chunk_events(4).fs(Arc::new(fs.clone()));
    let mut r = Reservoir::create(opts, &s).unwrap();
    for e in &events[..10] {
        r.append(e).unwrap();
    }
    fs.set(Fault::FailSync);
    let e = r.sync().unwrap_err();
    assert!(matches!(e, ReservoirError::Io { op: "fsync segment", .. }), "{e}");
    assert!(e.to_string().contains("segment-0000000000000000.spr"), "{e}");
    assert!(matches!(r.sync(), Err(ReservoirError::Broken { .. })));

    let fs = FaultFs::new();
    let dir = tmp.path().join("b");
    let opts = ReservoirOptions::new(&dir).chunk_events(4).fs(Arc::new(fs.clone()));
    let mut r = Reservoir::create(opts.clone(), &s).unwrap();
    for e in &events[..20] {
        r.append(e).unwrap();
    }
    let pos = r.sync().unwrap();
    fs.set(Fault::Torn { after_bytes: 0 });
    let mut failed = false;
    for e in &events[20..] {
        if r.append(e).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed || r.sync().is_err(), "a torn write went unreported");
    assert!(fs.is_dead());
    drop(r);
    let mut r = Reservoir::recover(ReservoirOptions::new(&dir).chunk_events(4), &s, &pos).unwrap();
    assert_eq!(r.len(), 20);
    let c = r.cursor(0).unwrap();
    read_all(&mut r, c, &events[..20]).unwrap();
}

#[test]
fn resident_memory_stays_bounded_with_a_far_behind_cursor() {
    let tmp = tempfile::tempdir().unwrap();
    let s = simple_schema();
    let opts = ReservoirOptions::new(tmp.path()).chunk_events(1024).segment_bytes(1 << 20);
    let mut r = Reservoir::create(opts, &s).unwrap();
    let evs = simple_events(1_000_000, 99);
    let far = r.cursor(0).unwrap();
    let near = r.cursor(0).unwrap();
    let mut max_resident = 0u64;
    for (i, e) in evs.iter().enumerate() {
        r.append(e).unwrap();
        if (i + 1) % 1000 == 0 {
            let len = r.len();
            // near: 10 events behind the tail; far: 200k behind.
            while r.cursor_index(near) + 10 < len {
                let j = r.cursor_index(near) as usize;
                assert!(same(r.peek(near).unwrap().unwrap(), &evs[j]));
                r.advance(near);
            }
            while r.cursor_index(far) + 200_000 < len {
                let j = r.cursor_index(far) as usize;
                assert!(same(r.peek(far).unwrap().unwrap(), &evs[j]), "event {j}");
                r.advance(far);
            }
            if (i + 1) % 50_000 == 0 {
                r.release_before(r.cursor_index(far)).unwrap();
            }
            max_resident = max_resident.max(r.stats().resident_bytes);
        }
    }
    let st = r.stats();
    assert!(st.chunk_reads_from_disk > 500, "{st:?}");
    assert!(st.segments_deleted > 0, "{st:?}");
    // ~20 bytes/event raw: the 200k-event gap alone is ~4 MB raw.
    assert!(st.bytes_raw > 10 << 20, "{st:?}");
    assert!(max_resident < 2 << 20, "resident {max_resident} bytes, stats {st:?}");
}
