//! Sources and sinks through the public API: stdin sniffing (the test binary re-runs
//! itself with data on stdin), and a read -> sink -> read round trip with resume.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use spillway_engine::source::{self, Sink, SourceOptions};
use spillway_engine::value::{Event, Value};

const CHILD: &str = "SPILLWAY_SOURCE_STDIN_CHILD";

/// In the child: reads stdin as a source and prints each event as `EVENT <json>`.
#[test]
fn stdin_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let mut src = source::open(Path::new("-"), &SourceOptions::new("ts")).unwrap();
    let mut out = std::io::stdout().lock();
    // The test harness may have printed "test stdin_child ... " without a line break.
    writeln!(out).unwrap();
    while let Some(e) = src.next_event().unwrap() {
        writeln!(out, "EVENT {}", serde_json::to_string(&e).unwrap()).unwrap();
    }
}

fn via_stdin(data: &str) -> Vec<Event> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", "stdin_child", "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "child failed: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("EVENT "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect()
}

#[test]
fn stdin_is_sniffed() {
    let csv = via_stdin("ts,card\n1,\"a,b\"\n2,c\n");
    assert_eq!(csv.len(), 2);
    assert_eq!(csv[0].row, vec![Value::Int(1), Value::Str("a,b".into())]);
    let json = via_stdin("\n  {\"ts\": 5, \"card\": \"x\"}\n{\"ts\": 6}\n");
    assert_eq!(json.len(), 2);
    assert_eq!(json[1].row, vec![Value::Int(6), Value::Null]);
    assert_eq!(json[1].seq, 1);
}

#[test]
fn file_to_sink_to_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "{\"ts\":1,\"a\":\"x\\ny\",\"b\":1.5}\n{\"ts\":2,\"a\":null,\"b\":-2}\n",
    )
    .unwrap();
    let opts = SourceOptions::new("ts");
    let mut src = source::open(&input, &opts).unwrap();
    let cols = source::schema_columns(src.schema());
    for out in ["out.csv", "out.jsonl"] {
        let path = dir.path().join(out);
        let mut sink = Sink::create(Some(&path), &cols).unwrap();
        let mut events = Vec::new();
        while let Some(e) = src.next_event().unwrap() {
            sink.write_event(&e).unwrap();
            events.push(e);
        }
        sink.sync().unwrap();
        let mut back = source::open(&path, &opts).unwrap();
        let mut again = Vec::new();
        while let Some(e) = back.next_event().unwrap() {
            again.push(e);
        }
        assert_eq!(again, events, "{out}");
        // Start over for the next format.
        let pos = source::SourcePosition { byte_offset: 0, ..Default::default() };
        src = source::resume(&input, &opts, &src.schema().clone(), &pos).unwrap();
    }
}
