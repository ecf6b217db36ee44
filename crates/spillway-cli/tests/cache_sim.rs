//! End-to-end tests of `spillway cache sim` through the binary: JSON rows on plain and
//! gzip traces (gzip recognized by its magic bytes, not its name), and the error
//! messages for bad traces and arguments.

use std::path::Path;
use std::process::Command;

fn spillway(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "spillway {args:?} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn spillway_err(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway")).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "spillway {args:?} should fail with 1");
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// 3000 accesses over 200 distinct keys: a hot set of 5, a warm loop over 20 and a cold
/// loop over 180.
fn trace_text() -> String {
    let mut t = String::new();
    for i in 0..3000u64 {
        let key = match i % 3 {
            0 => 1000 + (i / 3) % 180,
            1 => i % 5,
            _ => (i * 7) % 20,
        };
        t.push_str(&format!("{key}\n"));
    }
    t
}

/// `text` as a gzip file of stored (uncompressed) deflate blocks, so the test needs no
/// compression library.
fn gzip(text: &str) -> Vec<u8> {
    let data = text.as_bytes();
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut blocks = data.chunks(0xffff).peekable();
    if data.is_empty() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(b) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = b.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(&crc32(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// CRC-32 (IEEE, reflected), bit by bit.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn json_rows_for_plain_and_gzip_traces() {
    let d = tempfile::tempdir().unwrap();
    let plain = d.path().join("plain.keys");
    let packed = d.path().join("packed.keys"); // gzip without a .gz name
    std::fs::write(&plain, trace_text()).unwrap();
    std::fs::write(&packed, gzip(&trace_text())).unwrap();
    let json = d.path().join("out.json");
    let table = spillway(&[
        "cache",
        "sim",
        "--trace",
        s(&plain),
        s(&packed),
        "--capacity",
        "5%,20,50%",
        "--policies",
        "wtinylfu,lru,arc,s3fifo,lirs,wtinylfu-fixed",
        "--json",
        s(&json),
    ]);
    assert!(table.contains("5% (10)"), "{table}");
    assert!(table.contains("50% (100)"), "{table}");
    assert!(table.contains("mean hit ratio over 6 cells"), "{table}");
    assert!(table.contains("target met on"), "{table}");

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 3 * 6);
    for r in rows {
        let mut fields: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        fields.sort_unstable();
        assert_eq!(fields, ["accesses", "capacity", "hit_ratio", "hits", "policy", "trace"]);
        assert_eq!(r["accesses"], 3000);
        let hits = r["hits"].as_u64().unwrap();
        let ratio = r["hit_ratio"].as_f64().unwrap();
        assert!(hits > 0 && hits < 3000, "{r}");
        assert!((ratio - hits as f64 / 3000.0).abs() < 1e-12, "{r}");
    }
    assert_eq!(rows[0]["trace"], "plain.keys");
    assert_eq!(rows[0]["policy"], "wtinylfu");
    assert_eq!(rows[0]["capacity"], 10);
    assert_eq!(rows[6]["capacity"], 20);
    assert_eq!(rows[17]["capacity"], 100);
    assert_eq!(rows[18]["trace"], "packed.keys");
    // The same keys, plain or gzip, give the same hits.
    for i in 0..18 {
        assert_eq!(rows[i]["hits"], rows[i + 18]["hits"], "row {i}");
    }
    assert!(v["machine"]["cpus"].as_u64().unwrap() >= 1);
}

#[test]
fn bad_traces_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.keys.gz");
    std::fs::write(&bad, gzip("1\n2\n3x\n4\n")).unwrap();
    let e = spillway_err(&["cache", "sim", "--trace", s(&bad)]);
    assert!(e.contains(&format!("error: {}:3: `3x` is not a key", bad.display())), "{e}");

    let empty = d.path().join("empty.keys");
    std::fs::write(&empty, "").unwrap();
    let e = spillway_err(&["cache", "sim", "--trace", s(&empty)]);
    assert!(e.contains("empty.keys: the trace is empty"), "{e}");

    let missing = d.path().join("missing.keys");
    let e = spillway_err(&["cache", "sim", "--trace", s(&empty), s(&missing)]);
    assert!(e.contains(&format!("cannot open trace {}", missing.display())), "{e}");
    assert!(e.contains("No such file"), "{e}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("t.keys");
    std::fs::write(&t, "1\n2\n").unwrap();

    let e = spillway_err(&["cache", "sim", "--trace", s(&t), "--policies", "lru,clock"]);
    assert!(e.contains("unknown policy `clock`"), "{e}");
    assert!(
        e.contains("wtinylfu, wtinylfu-fixed, wtinylfu-caffeine, lru, arc, s3fifo, lirs"),
        "{e}"
    );

    for (cap, why) in [
        ("0", "at least 1 entry"),
        ("0%", "greater than 0"),
        ("abc", "not a whole number"),
        ("5%,x%", "not a number before `%`"),
    ] {
        let e = spillway_err(&["cache", "sim", "--trace", s(&t), "--capacity", cap]);
        assert!(e.contains("bad capacity"), "{cap}: {e}");
        assert!(e.contains(why), "{cap}: {e}");
    }

    // Above 100% is allowed: more room than keys. The default policies are the
    // library's.
    let json = d.path().join("out.json");
    let out =
        spillway(&["cache", "sim", "--trace", s(&t), "--capacity", "150%", "--json", s(&json)]);
    assert!(out.contains("150% (3)"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let policies: Vec<&str> =
        v["results"].as_array().unwrap().iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, spillway_bench::cache_sim::DEFAULT_POLICIES);

    let e = spillway_err(&["cache", "sim"]);
    assert!(e.contains("--trace"), "{e}");
}
