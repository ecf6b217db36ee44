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
    spillway(&["trace", "gen", "--config", s(&cfg), "--out", s(&a)]);
    spillway(&["trace", "gen", "--config", s(&cfg), "--out", s(&b)]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let other = d.path().join("other.toml");
    std::fs::write(&other, EXP.replace("seed = 11", "seed = 12")).unwrap();
    let c = d.path().join("c.trace");
    spillway(&["trace", "gen", "--config", s(&other), "--out", s(&c)]);
    assert_ne!(std::fs::read(&a).unwrap(), std::fs::read(&c).unwrap());

    // bin -> gadget text -> bin keeps every op (the text format has no input-event
    // column, so compare the op streams through gadget text again).
    let (g1, back, g2) =
        (d.path().join("a.log"), d.path().join("back.trace"), d.path().join("b.log"));
    spillway(&["trace", "convert", s(&a), s(&g1)]);
    spillway(&["trace", "convert", s(&g1), s(&back)]);
    spillway(&["trace", "convert", s(&back), s(&g2)]);
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
    spillway(&["trace", "gen", "--config", s(&cfg), "--out", s(&t)]);
    let j = d.path().join("stats.json");
    let (table, _) = spillway(&["trace", "stats", s(&t), "--json", s(&j)]);
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
        spillway(&["trace", "gen", "--config", s(&cfg), "--out", s(&t), "--format", "gadget"]);
    assert!(err.contains("note:") && err.contains("wrapper"), "{err}");
    let raw = std::fs::read(&t).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.lines().count() > 100);
    assert!(text.lines().all(|l| l
        .split(' ')
        .nth(1)
        .is_some_and(|op| op == "merge" || op == "get" || op == "delete")));

    std::fs::write(&cfg, "operator.type=tumbling.keyed.incremental\nwindow.lenght=10\n").unwrap();
    let err = spillway_err(&["trace", "gen", "--config", s(&cfg), "--out", s(&t)]);
    assert!(err.contains("window.lenght"), "{err}");
    let toml = d.path().join("bad.toml");
    std::fs::write(
        &toml,
        "[operator]\ntype = \"sliding.keyed.incremental\"\nwindow = 2\nslide = 5\n",
    )
    .unwrap();
    let err = spillway_err(&["trace", "gen", "--config", s(&toml), "--out", s(&t)]);
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
    spillway(&["report", s(&sj), "--html", s(&html)]);
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
