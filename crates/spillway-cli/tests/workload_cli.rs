//! End-to-end tests of the workload harness through the binary: determinism of
//! generated traces, Gadget config import, conversion round trips, characterization
//! JSON, `bench workload`, `bench suite` and `report`.

use std::path::Path;
use std::process::Command;

fn spillway(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway")).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "spillway {args:?} failed:\n{stderr}");
    (stdout, stderr)
}

fn spillway_err(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spillway")).args(args).output().unwrap();
    assert!(!out.status.success(), "spillway {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const EXP: &str = "seed = 11\n[operator]\ntype = \"tumbling.keyed.holistic\"\nwindow = 10\n\
                   [[source]]\nevents = 5000\nkeys = 1000\nout_of_order = 0.1\nlateness_bound = 3\n";

#[test]
fn same_seed_same_trace_bytes_and_gadget_round_trip() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("exp.toml");
    std::fs::write(&cfg, EXP).unwrap();
    let (a, b) = (d.path().join("a.trace"), d.path().join("b.trace"));
    spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&a)]);
    spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&b)]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let other = d.path().join("other.toml");
    std::fs::write(&other, EXP.replace("seed = 11", "seed = 12")).unwrap();
    let c = d.path().join("c.trace");
    spillway(&["trace", "gen", "--config", s(&other), "--output", s(&c)]);
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&c).unwrap());

    // bin -> gadget text -> bin keeps every op (the text format has no input-event
    // column, so compare the op streams through gadget text again).
    let (g1, back, g2) =
        (d.path().join("a.log"), d.path().join("back.trace"), d.path().join("b.log"));
    spillway(&["trace", "convert", "--trace", s(&a), "--output", s(&g1)]);
    spillway(&["trace", "convert", "--trace", s(&g1), "--output", s(&back)]);
    spillway(&["trace", "convert", "--trace", s(&back), "--output", s(&g2)]);
    let raw = std::fs::read(&g1).unwrap();
    assert_eq!(raw, std::fs::read(&g2).unwrap());
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.lines().next().unwrap().starts_with("1 merge "),
        "{}",
        &text[..80.min(text.len())]
    );
}

#[test]
fn stats_json_has_the_op_mix_and_amplification() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("exp.toml");
    std::fs::write(
        &cfg,
        EXP.replace("tumbling.keyed.holistic", "sliding.keyed.incremental")
            .replace("window = 10", "window = 5\nslide = 1"),
    )
    .unwrap();
    let t = d.path().join("t.trace");
    spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&t)]);
    let j = d.path().join("stats.json");
    let (table, _) = spillway(&["trace", "stats", "--trace", s(&t), "--json", s(&j)]);
    assert!(table.contains("op mix"), "{table}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(j).unwrap()).unwrap();
    let mix = v["op_mix"].as_object().unwrap();
    for k in ["get", "put", "merge", "delete", "scan", "seek", "next"] {
        assert!(mix.contains_key(k), "op_mix lacks {k}: {mix:?}");
    }
    let sum: f64 = mix.values().map(|x| x.as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-9);
    // Sliding window 5, slide 1, incremental: each event updates 5 windows with a get
    // and a put, so at least 10 ops per event.
    assert!(v["event_amplification"].as_f64().unwrap() >= 10.0, "{v}");
    assert_eq!(mix["merge"], 0.0);
}

#[test]
fn gadget_config_files_are_imported_and_bad_keys_named() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("config.txt");
    std::fs::write(
        &cfg,
        "operator.type=sliding.all.holistic\nwindow.length=10\nsliding.length=5\n\
         first.event.generator.key.popularity.distrib.type=zipf\nfirst.event.generator.key.popularity.distrib.params.s=1\nexpected.num.operations=3000\n\
         wrapper.type=rocksdb\n",
    )
    .unwrap();
    let t = d.path().join("t.log");
    let (_, err) =
        spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&t), "--format", "gadget"]);
    assert!(err.contains("note:") && err.contains("wrapper"), "{err}");
    let raw = std::fs::read(&t).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.lines().count() > 100);
    assert!(text.lines().all(|l| l
        .split(' ')
        .nth(1)
        .is_some_and(|op| op == "merge" || op == "get" || op == "delete")));

    std::fs::write(&cfg, "operator.type=tumbling.keyed.incremental\nwindow.lenght=10\n").unwrap();
    let err = spillway_err(&["trace", "gen", "--config", s(&cfg), "--output", s(&t)]);
    assert!(err.contains("window.lenght"), "{err}");
    let toml = d.path().join("bad.toml");
    std::fs::write(
        &toml,
        "[operator]\ntype = \"sliding.keyed.incremental\"\nwindow = 2\nslide = 5\n",
    )
    .unwrap();
    let err = spillway_err(&["trace", "gen", "--config", s(&toml), "--output", s(&t)]);
    assert!(err.contains("slide"), "{err}");
}

#[test]
fn workload_suite_and_report() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("exp.toml");
    std::fs::write(
        &cfg,
        EXP.replace("tumbling.keyed.holistic", "join.interval")
            + "[[source]]\nevents = 3000\nkeys = 1000\n",
    )
    .unwrap();
    let j = d.path().join("w.json");
    let (out, _) = spillway(&[
        "bench",
        "workload",
        "--config",
        s(&cfg),
        "--stores",
        "mem,hashlog",
        "--json",
        s(&j),
        "--overhead",
    ]);
    assert!(
        out.contains("join.interval") && out.contains("hashlog") && out.contains("replay overhead"),
        "{out}"
    );
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    // Both stores replayed the same trace.
    assert_eq!(v["rows"][0]["ops"], v["rows"][1]["ops"]);

    let sj = d.path().join("suite.json");
    let (out, _) = spillway(&[
        "bench",
        "suite",
        "--stores",
        "mem",
        "--events",
        "1000",
        "--ycsb-ops",
        "1000",
        "--json",
        s(&sj),
    ]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sj).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 15 + 3, "{out}");
    for r in rows {
        for k in [
            "workload",
            "store",
            "ops",
            "seconds",
            "ops_per_sec",
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
        ] {
            assert!(r.get(k).is_some(), "row lacks {k}: {r}");
        }
        assert!(r["ops"].as_u64().unwrap() > 0, "{r}");
    }
    let html = d.path().join("r.html");
    spillway(&["report", s(&sj), "--output", s(&html)]);
    let page = std::fs::read_to_string(html).unwrap();
    assert!(page.contains("<svg") && page.contains("session.holistic") && page.contains("ycsb-f"));
    // Stack-distance and working-set plots of the 15 streaming workloads.
    assert_eq!(v["traces"].as_array().unwrap().len(), 15);
    assert!(page.contains("Stack-distance") && page.contains("Working set"), "plots missing");

    // Any YCSB letters, in the same run as streaming workloads.
    let (out, _) = spillway(&[
        "bench",
        "suite",
        "--stores",
        "mem",
        "--events",
        "500",
        "--ycsb-ops",
        "500",
        "--ycsb",
        "b,c,e",
    ]);
    for w in ["ycsb-b", "ycsb-c", "ycsb-e"] {
        assert!(out.contains(w), "{out}");
    }
}

#[test]
fn several_operators_at_once_own_or_shared_store() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a.toml");
    let b = d.path().join("b.toml");
    std::fs::write(&a, EXP).unwrap();
    std::fs::write(&b, EXP.replace("tumbling.keyed.holistic", "continuous.aggregation")).unwrap();
    for shared in [false, true] {
        let mut args = vec![
            "bench",
            "workload",
            "--config",
            s(&a),
            "--config",
            s(&b),
            "--stores",
            "mem,hashlog",
        ];
        if shared {
            args.push("--shared");
        }
        let (out, _) = spillway(&args);
        let rows: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(rows.len(), 4, "{out}");
        assert!(
            out.contains("continuous.aggregation") && out.contains("tumbling.keyed.holistic"),
            "{out}"
        );
        assert_eq!(out.contains("shared store"), shared, "{out}");
    }
}

/// A generated binary trace of `EXP` (tumbling keyed holistic) and its op count.
fn gen_trace(d: &Path) -> (std::path::PathBuf, u64) {
    let cfg = d.join("exp.toml");
    std::fs::write(&cfg, EXP).unwrap();
    let t = d.join("t.trace");
    spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&t)]);
    let j = d.join("stats.json");
    spillway(&["trace", "stats", "--trace", s(&t), "--json", s(&j)]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(j).unwrap()).unwrap();
    (t, v["ops"].as_u64().unwrap())
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn replay_of_a_binary_trace_has_the_rows_of_bench_workload() {
    let d = tempfile::tempdir().unwrap();
    let (t, ops) = gen_trace(d.path());
    let j = d.path().join("out/replay.json");
    let stores = d.path().join("not/yet/there");
    let (out, err) = spillway(&[
        "bench",
        "replay",
        "--trace",
        s(&t),
        "--stores",
        "mem,hashlog",
        "--json",
        s(&j),
        "--dir",
        s(&stores),
    ]);
    assert!(!err.contains("warning"), "{err}");
    assert!(stores.is_dir(), "--dir is created");
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[0].starts_with("workload") && rows[0].contains("p99.9 us"), "{out}");
    assert!(rows[1].starts_with("t.trace") && rows[1].contains("mem"), "{out}");
    let v = json(&j);
    let r = v["rows"].as_array().unwrap();
    assert_eq!(r.len(), 2);
    for row in r {
        assert_eq!(row["ops"].as_u64(), Some(ops), "every op of the trace, per store: {row}");
    }
    // The same row keys as `bench workload` writes.
    let cfg = d.path().join("exp.toml");
    let wj = d.path().join("w.json");
    spillway(&["bench", "workload", "--config", s(&cfg), "--stores", "mem", "--json", s(&wj)]);
    let w = json(&wj);
    let keys = |x: &serde_json::Value| {
        x.as_object().unwrap().keys().cloned().collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(keys(&r[0]), keys(&w["rows"][0]));
    assert_eq!(w["rows"][0]["ops"].as_u64(), Some(ops), "the replay replays what workload runs");
    for k in ["details", "traces", "machine", "date", "title"] {
        assert!(v.get(k).is_some(), "replay JSON lacks {k}");
    }
    assert_eq!(v["warnings"]["garbage_rows"], 0);
    assert_eq!(v["warnings"]["missing_first_op"], 0);
    assert_eq!(v["trace"]["format"], "binary");
    assert_eq!(v["trace"]["access_hint"], "list-append", "the generating operator's layout");
}

#[test]
fn replay_of_a_gadget_dump_reports_garbage_rows_and_the_missing_first_op() {
    let d = tempfile::tempdir().unwrap();
    let (t, ops) = gen_trace(d.path());
    let text = d.path().join("t.log");
    spillway(&["trace", "convert", "--trace", s(&t), "--output", s(&text)]);
    // What Gadget's dump writes: op 0 missing, then two garbage rows with empty keys
    // (the `userkey` placeholder version and the value version).
    // (Keys are raw bytes, not UTF-8.)
    let body = std::fs::read(&text).unwrap();
    let first = body.iter().position(|&b| b == b'\n').unwrap();
    let mut dump = body[first + 1..].to_vec();
    dump.extend(format!("{} get  userkey gadget gadgetFile\n", ops + 1).bytes());
    dump.extend(format!("{} put   gadget gadgetFile\n", ops + 2).bytes());
    let plain = d.path().join("gadget.log");
    std::fs::write(&plain, &dump).unwrap();
    let gz = d.path().join("gadget.log.gz");
    std::fs::write(&gz, gzip(&dump)).unwrap();
    for (file, compression) in [(&plain, "none"), (&gz, "gzip")] {
        let j = d.path().join("r.json");
        let (out, err) =
            spillway(&["bench", "replay", "--trace", s(file), "--stores", "mem", "--json", s(&j)]);
        assert!(err.contains("warning") && err.contains("2 trailing garbage row(s)"), "{err}");
        assert!(err.contains("missing first op"), "{err}");
        let v = json(&j);
        assert_eq!(v["warnings"]["garbage_rows"], 2);
        assert_eq!(v["warnings"]["first_garbage_row"].as_u64(), Some(ops));
        assert_eq!(v["warnings"]["missing_first_op"], 1);
        assert_eq!(v["trace"]["compression"], compression);
        assert_eq!(v["trace"]["format"], "gadget");
        // Every op but the missing first one and the garbage rows.
        assert_eq!(v["rows"][0]["ops"].as_u64(), Some(ops - 1), "{out}");
    }
}

#[test]
fn replay_bad_inputs_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let e = spillway_err(&["bench", "replay", "--trace", s(&d.path().join("missing.log"))]);
    assert!(e.contains("missing.log") && e.contains("No such file"), "{e}");
    let empty = d.path().join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let e = spillway_err(&["bench", "replay", "--trace", s(&empty)]);
    assert!(e.contains("empty.log") && e.contains("no ops"), "{e}");
    let bad = d.path().join("bad.log");
    std::fs::write(&bad, "1 get 0000000001  gadget gadgetFile\n2 fetch 0000000001\n").unwrap();
    let e = spillway_err(&["bench", "replay", "--trace", s(&bad)]);
    assert!(e.contains("bad.log") && e.contains("line 2") && e.contains("fetch"), "{e}");
    std::fs::write(&bad, "1 get a\n2 get  x\n3 get b\n").unwrap();
    let e = spillway_err(&["bench", "replay", "--trace", s(&bad)]);
    assert!(e.contains("line 2") && e.contains("empty key"), "{e}");
    let gz = d.path().join("cut.log.gz");
    let long: String = (1..=5000).map(|i| format!("{i} get k{}\n", i % 13)).collect();
    let z = gzip(long.as_bytes());
    std::fs::write(&gz, &z[..z.len() / 2]).unwrap();
    let e = spillway_err(&["bench", "replay", "--trace", s(&gz)]);
    assert!(e.contains("cut.log.gz") && e.contains("gzip"), "{e}");
    let e = spillway_err(&["bench", "replay", "--trace", s(&empty), "--rate", "0"]);
    assert!(e.contains("--rate"), "{e}");
}

#[test]
fn stats_of_a_trace_without_input_events_say_not_applicable() {
    let d = tempfile::tempdir().unwrap();
    let (t, _) = gen_trace(d.path());
    let text = d.path().join("t.log");
    spillway(&["trace", "convert", "--trace", s(&t), "--output", s(&text)]);
    let back = d.path().join("back.trace");
    spillway(&["trace", "convert", "--trace", s(&text), "--output", s(&back)]);
    for file in [&text, &back] {
        let j = d.path().join("s.json");
        let (table, _) = spillway(&["trace", "stats", "--trace", s(file), "--json", s(&j)]);
        assert!(table.contains("event amplification          n/a"), "{table}");
        let v = json(&j);
        assert!(v["event_amplification"].is_null(), "{}", v["event_amplification"]);
        assert!(v["key_space_amplification"].is_null());
    }
    let (table, _) = spillway(&["trace", "stats", "--trace", s(&t)]);
    assert!(!table.contains("n/a"), "{table}");
}

#[test]
fn missing_output_directories_are_created_or_named() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("exp.toml");
    std::fs::write(&cfg, EXP).unwrap();
    let t = d.path().join("new/dir/t.trace");
    spillway(&["trace", "gen", "--config", s(&cfg), "--output", s(&t)]);
    let log = d.path().join("other/t.log");
    spillway(&["trace", "convert", "--trace", s(&t), "--output", s(&log)]);
    assert!(t.is_file() && log.is_file());
    // A directory that cannot be made: its parent is a file.
    let file = d.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let e =
        spillway_err(&["trace", "gen", "--config", s(&cfg), "--output", s(&file.join("t.trace"))]);
    assert!(e.contains("cannot create the directory") && e.contains("plain"), "{e}");
    let e = spillway_err(&["bench", "replay", "--trace", s(&t), "--dir", s(&file.join("stores"))]);
    assert!(e.contains("cannot create the store directory") && e.contains("plain"), "{e}");
}

/// `bench shared`: copies and shared over mem, hashlog and a private Redis give the same
/// window results in every row; sharing keeps fewer bytes once events sit in several
/// windows; an experiment file with `shared = true` runs that mode only; bad input is
/// named.
#[test]
fn bench_shared_rows_are_equal_across_modes_and_stores() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("shared.json");
    spillway(&[
        "bench",
        "shared",
        "--patterns",
        "1,4",
        "--stores",
        "mem,hashlog,redis",
        "--events",
        "3000",
        "--keys",
        "10",
        "--base-window",
        "100",
        "--json",
        s(&out),
        "-q",
    ]);
    let j = json(&out);
    let rows = j["results"].as_array().unwrap();
    assert_eq!(rows.len(), 12, "2 pattern counts x 3 stores x 2 modes");
    for r in rows {
        assert_eq!(r["results_equal"], true, "{r}");
        assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0);
    }
    let bytes = |mode: &str| {
        rows.iter()
            .find(|r| r["patterns"] == 4 && r["store"] == "mem" && r["mode"] == mode)
            .unwrap()["state_bytes"]
            .as_u64()
            .unwrap()
    };
    assert!(bytes("shared") < bytes("copies"), "{} vs {}", bytes("shared"), bytes("copies"));
    let cfg = d.path().join("exp.toml");
    std::fs::write(
        &cfg,
        "events = 2000\nshared = true\n[[pattern]]\nwindow = 50\nslide = 25\n\
         [[pattern]]\nwindow = 80\npartition = \"key % 3\"\n",
    )
    .unwrap();
    let out2 = d.path().join("exp.json");
    spillway(&[
        "bench",
        "shared",
        "--config",
        s(&cfg),
        "--stores",
        "mem",
        "--json",
        s(&out2),
        "-q",
    ]);
    let rows = json(&out2)["results"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["mode"], "shared");
    assert_eq!(rows[0]["patterns"], 2);
    std::fs::write(&cfg, "[[pattern]]\nwindow = 5\nslide = 9\n").unwrap();
    let e = spillway_err(&["bench", "shared", "--config", s(&cfg), "-q"]);
    assert!(e.contains("pattern 0: need 1 <= slide <= window"), "{e}");
    let e = spillway_err(&["bench", "shared", "--stores", "mem,nope", "-q"]);
    assert!(e.contains("or redis"), "{e}");
}

/// The spellings before `--output` and `--trace` (`trace gen --out`, `trace stats FILE`,
/// `trace convert IN OUT`, `report --html`), kept for one release, still work and give
/// what the new ones give.
#[test]
fn old_flag_spellings_still_work() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    std::fs::write(p("exp.toml"), EXP).unwrap();
    spillway(&["trace", "gen", "--config", s(&p("exp.toml")), "--out", s(&p("old.trace"))]);
    spillway(&["trace", "gen", "--config", s(&p("exp.toml")), "--output", s(&p("new.trace"))]);
    assert_eq!(std::fs::read(p("old.trace")).unwrap(), std::fs::read(p("new.trace")).unwrap());

    let (old, _) = spillway(&["trace", "stats", s(&p("old.trace"))]);
    let (new, _) = spillway(&["trace", "stats", "--trace", s(&p("old.trace"))]);
    assert!(!old.is_empty() && old == new, "{old}\n{new}");

    spillway(&["trace", "convert", s(&p("old.trace")), s(&p("old.log"))]);
    spillway(&["trace", "convert", "--trace", s(&p("old.trace")), "--output", s(&p("new.log"))]);
    assert_eq!(std::fs::read(p("old.log")).unwrap(), std::fs::read(p("new.log")).unwrap());

    let json = p("r.json");
    spillway(&[
        "bench",
        "replay",
        "--trace",
        s(&p("old.trace")),
        "--stores",
        "mem",
        "--json",
        s(&json),
    ]);
    spillway(&["report", s(&json), "--html", s(&p("old.html"))]);
    spillway(&["report", s(&json), "--output", s(&p("new.html"))]);
    let page = std::fs::read_to_string(p("old.html")).unwrap();
    assert!(page.contains("<svg"), "{page}");
    assert_eq!(page, std::fs::read_to_string(p("new.html")).unwrap());
}
