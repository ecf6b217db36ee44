//! SQL's peer rows (`ties = peers`, `operator::over::peers`) against a brute-force
//! oracle: on time-ordered input with many ties, a `RANGE` metric of every row covers all
//! rows of its partition with a time in the frame, the row's later-arriving peers
//! included; a `ROWS` metric stays per-event; rows come out in arrival order. The same
//! holds across a checkpoint and resume that falls between peers, and the default
//! (per-event) still sees only what arrived before.

use spillway_engine::operator::over::peers::Ties;
use spillway_engine::operator::over::Outcome;
use spillway_engine::session::{Session, SessionConfig};
use spillway_engine::value::{DataType, Field, Row, Schema, TimeUnit, Value};

const Q: &str = "SELECT card, ts, SUM(amount) OVER w AS s, COUNT(*) OVER w AS n, \
                 COUNT(*) OVER u AS total, COUNT(*) OVER r AS last3, \
                 COUNT(*) OVER m AS by_merchant FROM t \
                 WINDOW w AS (PARTITION BY card ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW), \
                 u AS (PARTITION BY card ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW), \
                 r AS (PARTITION BY card ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW), \
                 m AS (PARTITION BY merchant ORDER BY ts RANGE BETWEEN 5 PRECEDING AND CURRENT ROW)";

fn schema() -> Schema {
    Schema::new(
        vec![
            Field { name: "ts".into(), ty: DataType::Int },
            Field { name: "card".into(), ty: DataType::Int },
            Field { name: "merchant".into(), ty: DataType::Int },
            Field { name: "amount".into(), ty: DataType::Int },
        ],
        "ts",
        TimeUnit::S,
    )
    .unwrap()
}

/// Time-ordered events (ts, card, merchant, amount) with many ties.
fn events(n: usize, seed: u64) -> Vec<[i64; 4]> {
    let mut x = seed | 1;
    let mut t = 0i64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Half the events share the previous one's time.
            if x.is_multiple_of(2) {
                t += ((x >> 3) % 4) as i64;
            }
            [t, ((x >> 8) % 3) as i64, ((x >> 16) % 2) as i64, ((x >> 24) % 50) as i64]
        })
        .collect()
}

/// What SQL gives each row, by brute force over the whole input.
fn oracle(ev: &[[i64; 4]], ties: Ties) -> Vec<Vec<Value>> {
    ev.iter()
        .enumerate()
        .map(|(i, e)| {
            // Per-event: only rows that arrived no later than this one; peers: all rows.
            let seen = |j: usize| ties == Ties::Peers || j <= i;
            let mut s = 0;
            let (mut n, mut total, mut by_merchant) = (0i64, 0i64, 0i64);
            for (_, f) in ev.iter().enumerate().filter(|&(j, _)| seen(j)) {
                if f[1] == e[1] && f[0] <= e[0] {
                    total += 1;
                    if f[0] >= e[0] - 10 {
                        n += 1;
                        s += f[3];
                    }
                }
                if f[2] == e[2] && f[0] <= e[0] && f[0] >= e[0] - 5 {
                    by_merchant += 1;
                }
            }
            let last3 = ev[..=i].iter().filter(|f| f[1] == e[1]).count().min(3) as i64;
            vec![
                Value::Int(e[1]),
                Value::Int(e[0]),
                Value::Int(s),
                Value::Int(n),
                Value::Int(total),
                Value::Int(last3),
                Value::Int(by_merchant),
            ]
        })
        .collect()
}

fn config(ties: Ties, dir: Option<&std::path::Path>) -> SessionConfig {
    let mut c = SessionConfig::new(Q);
    c.ties = ties;
    c.dir = dir.map(std::path::Path::to_path_buf);
    c
}

fn push(s: &mut Session, ev: &[[i64; 4]], out: &mut Vec<Row>) {
    for e in ev {
        let row = e.iter().map(|&v| Value::Int(v)).collect();
        assert_eq!(s.push(e[0], row, out).unwrap(), Outcome::Emitted);
    }
}

#[test]
fn peer_rows_equal_sql_by_brute_force() {
    for seed in 1..=6 {
        let ev = events(400, seed);
        for ties in [Ties::Peers, Ties::PerEvent] {
            let mut s = Session::open(&config(ties, None), schema()).unwrap();
            let mut out = Vec::new();
            push(&mut s, &ev, &mut out);
            s.finish(&mut out).unwrap();
            let want = oracle(&ev, ties);
            assert_eq!(out.len(), want.len(), "seed {seed} {ties:?}");
            for (i, (g, w)) in out.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "seed {seed} {ties:?}: row {i} (event {:?})", ev[i]);
            }
        }
    }
}

#[test]
fn peer_rows_survive_a_checkpoint_between_peers() {
    let ev = events(300, 9);
    let want = oracle(&ev, Ties::Peers);
    // Cut where the next event shares the previous one's time, so rows are held back at
    // the checkpoint.
    let cut = (100..ev.len()).find(|&i| ev[i][0] == ev[i - 1][0]).expect("a tie");
    let d = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    {
        let mut s = Session::open(&config(Ties::Peers, Some(d.path())), schema()).unwrap();
        push(&mut s, &ev[..cut], &mut out);
        s.checkpoint().unwrap();
        // Events after the checkpoint are lost with the session.
        push(&mut s, &ev[cut..cut + 20], &mut Vec::new());
    }
    assert!(out.len() < cut, "rows of the last time are held back at the checkpoint");
    let mut s = Session::open(&config(Ties::Peers, Some(d.path())), schema()).unwrap();
    assert!(s.resumed());
    assert_eq!(s.events(), cut as u64);
    push(&mut s, &ev[cut..], &mut out);
    s.finish(&mut out).unwrap();
    assert_eq!(out, want);

    // Another --ties over the same checkpoint is refused, naming it.
    let e = Session::open(&config(Ties::PerEvent, Some(d.path())), schema()).err().unwrap();
    assert!(e.to_string().contains("ties (checkpoint: peers; now: per-event)"), "{e}");
}

#[test]
fn per_event_calls_are_refused_for_peer_rows() {
    let mut s = Session::open(&config(Ties::Peers, None), schema()).unwrap();
    let e = s.process(0, vec![Value::Int(0); 4], &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("Session::push"), "{e}");
}

#[test]
fn a_late_row_keeps_its_own_result_and_its_place_in_line() {
    let q = "SELECT ts, COUNT(*) OVER (PARTITION BY card ORDER BY ts \
             RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS n FROM t";
    let mut c = SessionConfig::new(q);
    c.ties = Ties::Peers;
    c.allowed_lateness = 100;
    let mut s = Session::open(&c, schema()).unwrap();
    let mut out = Vec::new();
    for t in [10, 20, 20, 15, 30] {
        let row = vec![Value::Int(t), Value::Int(1), Value::Int(0), Value::Int(1)];
        assert_eq!(s.push(t, row, &mut out).unwrap(), Outcome::Emitted);
    }
    s.finish(&mut out).unwrap();
    // The rows at 20 see both peers (not the later, late 15); the late 15 sees 10 and
    // itself; rows come out in arrival order.
    let got: Vec<(i64, i64)> = out
        .iter()
        .map(|r| match (&r[0], &r[1]) {
            (Value::Int(t), Value::Int(n)) => (*t, *n),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, [(10, 1), (20, 3), (20, 3), (15, 2), (30, 3)]);
}
