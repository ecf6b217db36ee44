//! Tests of sources and sinks: round trips, inference, error messages, dead letters,
//! resume at every position, sink escaping and truncation, the generator.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::value::{DataType, Event, Value};

fn write(dir: &Path, name: &str, data: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    p
}

fn opts(time: &str) -> SourceOptions {
    SourceOptions::new(time)
}

fn skip_opts(time: &str, dead: &Path) -> SourceOptions {
    SourceOptions { on_error: OnError::Skip { dead_letter: dead.to_path_buf() }, ..opts(time) }
}

/// All events until the end or the first error.
fn drain(src: &mut dyn Source) -> (Vec<Event>, Option<SourceError>) {
    let mut out = Vec::new();
    loop {
        match src.next_event() {
            Ok(Some(e)) => out.push(e),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

fn read_all(path: &Path, o: &SourceOptions) -> Vec<Event> {
    let mut src = open(path, o).unwrap();
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none(), "{}", err.unwrap());
    ev
}

fn first_error(path: &Path, o: &SourceOptions) -> String {
    match open(path, o) {
        Err(e) => e.to_string(),
        Ok(mut src) => drain(&mut *src).1.expect("an error").to_string(),
    }
}

fn s(x: &str) -> Value {
    Value::Str(x.into())
}

fn types(src: &dyn Source) -> Vec<(String, DataType)> {
    src.schema().fields().iter().map(|f| (f.name.clone(), f.ty)).collect()
}

// ---------------------------------------------------------------- reading

#[test]
fn csv_reads_quoted_fields_and_positions() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "p.csv",
        "ts,name,amount\n1,\"a, b\",1.5\n2,\"say \"\"hi\"\"\",2\n3,\"two\nlines\",\n",
    );
    let ev = read_all(&p, &opts("ts"));
    assert_eq!(ev.len(), 3);
    assert_eq!(ev[0].row, vec![Value::Int(1), s("a, b"), Value::Float(1.5)]);
    assert_eq!(ev[1].row, vec![Value::Int(2), s("say \"hi\""), Value::Float(2.0)]);
    assert_eq!(ev[2].row, vec![Value::Int(3), s("two\nlines"), Value::Null]);
    assert_eq!(ev.iter().map(|e| (e.time, e.seq)).collect::<Vec<_>>(), [(1, 0), (2, 1), (3, 2)]);
}

#[test]
fn tsv_and_sniffed_extension() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "p.tsv", "ts\tx\n5\ta,b\n");
    assert_eq!(read_all(&p, &opts("ts"))[0].row, vec![Value::Int(5), s("a,b")]);
    let p = write(dir.path(), "p.data", "\n  {\"ts\": 7}\n");
    assert_eq!(read_all(&p, &opts("ts"))[0].row, vec![Value::Int(7)]);
    let p = write(dir.path(), "q.data", "ts,x\n8,y\n");
    assert_eq!(read_all(&p, &opts("ts"))[0].row, vec![Value::Int(8), s("y")]);
}

#[test]
fn jsonl_reads_missing_keys_as_null_and_skips_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "e.jsonl",
        "{\"ts\":1,\"card\":\"x\"}\n\n   \n{\"amount\":2.5,\"ts\":2}\r\n{\"card\":\"z\",\"ts\":3,\"amount\":4}",
    );
    let mut src = open(&p, &opts("ts")).unwrap();
    assert_eq!(
        types(&*src),
        [
            ("ts".to_string(), DataType::Int),
            ("card".to_string(), DataType::Str),
            ("amount".to_string(), DataType::Float)
        ]
    );
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none());
    assert_eq!(ev[0].row, vec![Value::Int(1), s("x"), Value::Null]);
    assert_eq!(ev[1].row, vec![Value::Int(2), Value::Null, Value::Float(2.5)]);
    assert_eq!(ev[2].row, vec![Value::Int(3), s("z"), Value::Float(4.0)]);
    assert_eq!(ev[2].seq, 2);
}

// ---------------------------------------------------------------- inference

#[test]
fn csv_inference() {
    let t = delimited::infer_types(
        "i,f,m,b,e,x,s,n,w\n\
         1,1.5,1,true,,1,a,nan,\" 7 \"\n\
         -2,2,2.5,FALSE,,true,2,1,8\n\
         ,,,,,,,,\n",
    );
    use DataType::*;
    let t: Vec<DataType> = t.into_iter().map(|t| t.unwrap_or(Str)).collect();
    assert_eq!(t, [Int, Float, Float, Bool, Str, Str, Str, Str, Int]);
}

/// One `N/A` among numbers made the column a string (and the query then
/// failed on `SUM` of a string); the column now has the type most of its values have.
#[test]
fn inference_follows_the_values_that_parse() {
    let t = delimited::infer_types(
        "i,f,b,s,tie,e,x\n\
         1,1.5,true,a,1,,N/A\n\
         N/A,N/A,N/A,2,x,,-\n\
         3,2,false,c,,,?\n\
         4,3.5,TRUE,d,,,\n",
    );
    use DataType::*;
    assert_eq!(t, [Some(Int), Some(Float), Some(Bool), Some(Str), Some(Str), None, Some(Str)]);
}

/// The rows whose value does not fit the inferred type are reported with file, line,
/// column and value (stop), or go to the dead-letter file (skip); the others are read.
#[test]
fn values_that_do_not_fit_the_inferred_type_are_bad_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "n.csv",
        "ts,amount
1,10
2,N/A
3,2.5
4,5
",
    );
    let mut src = open(&p, &opts("ts")).unwrap();
    assert_eq!(types(&*src)[1], ("amount".to_string(), DataType::Float));
    let (ev, err) = drain(&mut *src);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        err.unwrap().to_string(),
        format!("{} line 3, column \"amount\": expected float, found \"N/A\"", p.display())
    );

    let dead = dir.path().join("dead.jsonl");
    let mut src = open(&p, &skip_opts("ts", &dead)).unwrap();
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none(), "{err:?}");
    let amounts: Vec<Value> = ev.iter().map(|e| e.row[1].clone()).collect();
    assert_eq!(amounts, [Value::Float(10.0), Value::Float(2.5), Value::Float(5.0)]);
    assert_eq!(src.skipped(), 1);
    src.sync().unwrap();
    let letters = std::fs::read_to_string(&dead).unwrap();
    assert!(
        letters.starts_with(&format!(
            "{{\"file\":\"{}\",\"line\":3,\"error\":\"column \\\"amount\\\": expected float",
            p.display()
        )) && letters.contains("\"raw\":\"2,N/A\""),
        "{letters}"
    );
}

/// A column with no value in the inference rows takes the hinted type (the query's use
/// of it), else string; a hint never replaces a type inferred from values.
#[test]
fn columns_without_values_take_the_type_hints() {
    let dir = tempfile::tempdir().unwrap();
    let hinted = |o: SourceOptions| SourceOptions {
        type_hints: vec![("AMOUNT".into(), DataType::Float), ("card".into(), DataType::Int)],
        ..o
    };
    let p = write(
        dir.path(),
        "h.csv",
        "ts,card,amount,note
",
    );
    let src = open(&p, &hinted(opts("ts"))).unwrap();
    use DataType::*;
    let got: Vec<DataType> = types(&*src).into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, [Int, Int, Float, Str]);

    let p = write(
        dir.path(),
        "v.csv",
        "ts,card,amount
1,x,
2,y,
3,z,7.5
",
    );
    let o = SourceOptions { infer_rows: 2, ..hinted(opts("ts")) };
    let mut src = open(&p, &o).unwrap();
    let got: Vec<DataType> = types(&*src).into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, [Int, Str, Float]);
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev[2].row[2], Value::Float(7.5));

    let p = write(dir.path(), "n.jsonl", "{\"ts\":1,\"amount\":null}\n");
    let src = open(&p, &hinted(opts("ts"))).unwrap();
    assert_eq!(types(&*src)[1], ("amount".to_string(), Float));
}

#[test]
fn json_inference() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "i.jsonl",
        "{\"ts\":1,\"i\":1,\"f\":1.0,\"m\":1,\"b\":true,\"n\":null,\"x\":1,\"o\":{\"a\":1}}\n\
         {\"ts\":2,\"i\":-5,\"f\":2.5,\"m\":2.5,\"b\":false,\"x\":\"s\",\"o\":[1]}\n",
    );
    let mut src = open(&p, &opts("ts")).unwrap();
    use DataType::*;
    let got: Vec<DataType> = types(&*src).into_iter().map(|(_, t)| t).collect();
    assert_eq!(got, [Int, Int, Float, Float, Bool, Str, Str, Str]);
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(ev[0].row[3], Value::Float(1.0));
    assert_eq!(ev[0].row[6], s("1"));
    assert_eq!(ev[0].row[7], s("{\"a\":1}"));
    assert_eq!(ev[1].row[7], s("[1]"));
}

#[test]
fn inference_looks_only_at_infer_rows() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "a.csv", "ts,v\n1,1\n2,2\n3,2.5\n");
    let o = SourceOptions { infer_rows: 2, ..opts("ts") };
    let msg = first_error(&p, &o);
    assert_eq!(msg, format!("{} line 4, column \"v\": expected int, found \"2.5\"", p.display()));
    assert_eq!(read_all(&p, &opts("ts"))[0].row[1], Value::Float(1.0));
}

#[test]
fn overrides_win_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "o.csv", "ts,card,amount\n1,007,5\n");
    let o = SourceOptions {
        schema_overrides: parse_schema_overrides("card:string, AMOUNT:float").unwrap(),
        ..opts("ts")
    };
    let ev = read_all(&p, &o);
    assert_eq!(ev[0].row, vec![Value::Int(1), s("007"), Value::Float(5.0)]);

    let o = SourceOptions { schema_overrides: vec![("nope".into(), DataType::Int)], ..opts("ts") };
    let e = open(&p, &o).err().unwrap();
    assert!(matches!(e, SourceError::Options { .. }));
    assert!(e.to_string().contains("\"nope\"") && e.to_string().contains("ts, card, amount"));

    let o = SourceOptions { schema_overrides: vec![("ts".into(), DataType::Float)], ..opts("ts") };
    let e = open(&p, &o).err().unwrap();
    assert!(matches!(e, SourceError::Schema { .. }), "{e}");
    assert!(e.to_string().contains("time column `ts` must hold integers"), "{e}");

    let e = open(&p, &opts("time")).err().unwrap();
    assert!(e.to_string().contains("time column `time` is not in the input"), "{e}");
}

#[test]
fn time_column_is_forced_to_int() {
    let dir = tempfile::tempdir().unwrap();
    // Inference would say float; the time column is int, so the float row is an error.
    let p = write(dir.path(), "t.csv", "ts\n1\n1.5\n");
    let msg = first_error(&p, &opts("ts"));
    assert_eq!(msg, format!("{} line 3, {}", p.display(), bad_time("ts", "ms", "1.5")));
}

#[test]
fn schema_override_parsing() {
    assert_eq!(
        parse_schema_overrides("amount:float,card:string,a:b:bool").unwrap(),
        vec![
            ("amount".to_string(), DataType::Float),
            ("card".to_string(), DataType::Str),
            ("a:b".to_string(), DataType::Bool)
        ]
    );
    assert_eq!(parse_schema_overrides("  ").unwrap(), vec![]);
    let e = parse_schema_overrides("amount:decimal").unwrap_err().to_string();
    assert!(e.contains("unknown type \"decimal\" for column \"amount\""), "{e}");
    let e = parse_schema_overrides("amount").unwrap_err().to_string();
    assert!(e.contains("entry 1 \"amount\": no `:`"), "{e}");
    assert!(parse_schema_overrides("a:int,,b:int").is_err());
    assert!(parse_schema_overrides(":int").is_err());
    assert!(parse_schema_overrides("a:int,a:float").is_err());
}

// ---------------------------------------------------------------- errors

/// The message of a bad event-time value.
fn bad_time(column: &str, unit: &str, found: &str) -> String {
    format!(
        "column \"{column}\": expected the event time, an integer ({unit} since 1970-01-01) or \
         an RFC 3339 timestamp such as 2023-11-14T22:13:20.663Z or 2023-11-14 22:13:20.663 \
         (UTC unless an offset is given), found \"{found}\""
    )
}

#[test]
fn error_messages_name_file_line_column() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x9 = format!("line 7, {}", bad_time("ts", "ms", "x9"));
    let cases: Vec<(&str, &str, &str)> = vec![
        (
            "a.csv",
            "card,amount,ts\n1,2.5,10\n7,\"12,5\",11\n",
            "line 3, column \"amount\": expected float, found \"12,5\"",
        ),
        (
            "b.csv",
            "card,amount,ts\n1,2.5,10\n1,2.5\n",
            "line 3, expected 3 fields (as in the header), found 2",
        ),
        (
            "c.csv",
            "card,amount,ts\n1,2.5,10\n2,3,\n",
            "line 3, column \"ts\": expected int (the event time), found NULL",
        ),
        // Line numbers count quoted line breaks, blank lines and CRLF terminators.
        ("d.csv", "card,note,ts\r\n1,\"x\r\ny\nz\",10\r\n\r\n\n2,b,x9\r\n", &x9),
        (
            "e.jsonl",
            "{\"ts\":1,\"a\":1}\n\n{\"ts\":2,\"a\":\"x\"}\n",
            "line 3, column \"a\": expected int, found \"x\"",
        ),
        (
            "f.jsonl",
            "{\"ts\":1,\"a\":1}\n{\"a\":2}\n",
            "line 2, column \"ts\": expected int (the event time), found NULL",
        ),
        (
            "g.jsonl",
            "{\"ts\":1,\"a\":1}\n{\"ts\":2,\"a\":1,\"a\":2}\n",
            "line 2, key \"a\" appears twice",
        ),
        (
            "h.jsonl",
            "{\"ts\":1,\"a\":true}\n{\"ts\":2,\"a\":1.5}\n",
            "line 2, column \"a\": expected bool, found \"1.5\"",
        ),
    ];
    for (name, data, want) in cases {
        let p = write(d, name, data);
        let o = SourceOptions { infer_rows: 1, ..opts("ts") };
        assert_eq!(first_error(&p, &o), format!("{} {want}", p.display()), "{name}");
    }
}

#[test]
fn json_errors_unknown_key_and_bad_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "u.jsonl",
        "{\"ts\":1,\"a\":1}\n{\"ts\":2,\"b\":1}\n{\"ts\":3,\"zz\":1}\n{\"ts\":4,\n[1]\n{\"ts\":5} x\n",
    );
    let o = |dead: &Path| SourceOptions { infer_rows: 2, ..skip_opts("ts", dead) };
    let dead = dir.path().join("dead.jsonl");
    let mut src = open(&p, &o(&dead)).unwrap();
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none());
    assert_eq!(ev.len(), 2);
    assert_eq!(src.skipped(), 4);
    src.sync().unwrap();
    let dl = std::fs::read_to_string(&dead).unwrap();
    let recs: Vec<serde_json::Value> =
        dl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[0]["line"], 3);
    assert_eq!(
        recs[0]["error"],
        "key \"zz\" is not a column (columns inferred from the first rows: ts, a, b)"
    );
    assert_eq!(recs[0]["raw"], "{\"ts\":3,\"zz\":1}");
    assert_eq!(recs[0]["file"], p.display().to_string());
    for (r, line) in recs[1..].iter().zip([4, 5, 6]) {
        assert_eq!(r["line"], line);
        assert!(r["error"].as_str().unwrap().starts_with("invalid JSON object: "), "{r}");
    }
    // Stop mode: the same rows are errors naming line and key.
    let msg = first_error(&p, &SourceOptions { infer_rows: 2, ..opts("ts") });
    assert!(
        msg.starts_with(&format!("{} line 3, key \"zz\" is not a column", p.display())),
        "{msg}"
    );
}

#[test]
fn long_values_are_truncated_in_messages() {
    let dir = tempfile::tempdir().unwrap();
    let long = "y".repeat(500);
    let p = write(dir.path(), "l.csv", &format!("ts,v\n1,1\n2,{long}\n"));
    let o = SourceOptions { infer_rows: 1, ..opts("ts") };
    let msg = first_error(&p, &o);
    assert!(msg.ends_with(&format!("found \"{}...\"", "y".repeat(60))), "{msg}");
}

#[test]
fn empty_inputs() {
    let dir = tempfile::tempdir().unwrap();
    // An empty file has no columns: --schema must declare them.
    let declared = SourceOptions {
        schema_overrides: parse_schema_overrides("ts:int,amount:float").unwrap(),
        ..opts("ts")
    };
    let p = write(dir.path(), "e.csv", "");
    let msg = first_error(&p, &opts("ts"));
    assert!(msg.contains("the input is empty") && msg.contains("--schema name:type"), "{msg}");
    let src = open(&p, &declared).unwrap();
    assert_eq!(
        types(&*src),
        [("ts".to_string(), DataType::Int), ("amount".into(), DataType::Float)]
    );
    assert!(read_all(&p, &declared).is_empty());
    let p = write(dir.path(), "h.csv", "ts,a\n");
    assert!(read_all(&p, &opts("ts")).is_empty());
    let p = write(dir.path(), "e.jsonl", "\n\n");
    assert!(first_error(&p, &opts("ts")).contains("the input is empty"));
    assert!(read_all(&p, &declared).is_empty());
    let p = write(dir.path(), "z.jsonl", "");
    assert!(read_all(&p, &declared).is_empty());
    let p = write(dir.path(), "bad.jsonl", "\n[1]\n");
    let msg = first_error(&p, &opts("ts"));
    assert!(
        msg.contains("first problem: line 2: invalid type: sequence, expected a JSON object"),
        "{msg}"
    );
    let e = open(&dir.path().join("missing.csv"), &opts("ts")).err().unwrap();
    assert!(matches!(e, SourceError::Io { action: "open", .. }), "{e}");
}

// ---------------------------------------------------------------- skip mode

#[test]
fn skip_mode_writes_dead_letters_and_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "s.csv",
        "card,amount,ts\n1,1.0,1\nx,2.0,2\n3,\"bad\namount\",3\n4,4.0,\n5,5.0,5\n6,6\n",
    );
    let dead = dir.path().join("dead.jsonl");
    let o = SourceOptions {
        schema_overrides: parse_schema_overrides("card:int,amount:float").unwrap(),
        ..skip_opts("ts", &dead)
    };
    let mut src = open(&p, &o).unwrap();
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none());
    assert_eq!(ev.iter().map(|e| (e.time, e.seq)).collect::<Vec<_>>(), [(1, 0), (5, 1)]);
    assert_eq!(src.skipped(), 4);
    assert_eq!(ev.len() as u64 + src.skipped(), 6, "emitted + skipped == data rows");
    src.sync().unwrap();
    let pos = src.position();
    assert_eq!(pos.dead_letter_bytes, std::fs::metadata(&dead).unwrap().len());
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&dead)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(u64, String, String)> = recs
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["raw"].as_str().unwrap().to_string(),
                r["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (3, "x,2.0,2".into(), "column \"card\": expected int, found \"x\"".into()),
            (
                4,
                "3,\"bad\namount\",3".into(),
                "column \"amount\": expected float, found \"bad\\namount\"".into()
            ),
            (6, "4,4.0,".into(), "column \"ts\": expected int (the event time), found NULL".into()),
            (8, "6,6".into(), "expected 3 fields (as in the header), found 2".into()),
        ]
    );
}

#[test]
fn dead_letters_are_exact_in_large_files() {
    // Several MB, so the CSV reader's kept input is released a few times.
    let dir = tempfile::tempdir().unwrap();
    let mut data = String::from("ts,note\n");
    let mut line = 2u64;
    let mut want = Vec::new();
    for i in 0..60_000u64 {
        if i % 7919 == 13 {
            let raw = format!("x{i},\"bad\nrow {i}\"");
            want.push((line, raw.clone()));
            data.push_str(&raw);
            data.push('\n');
            line += 2;
        } else {
            data.push_str(&format!("{i},\"note, number {i} {}\"\n", "z".repeat(i as usize % 90)));
            line += 1;
        }
    }
    let p = write(dir.path(), "big.csv", &data);
    let dead = dir.path().join("dead.jsonl");
    let mut src = open(&p, &skip_opts("ts", &dead)).unwrap();
    let (ev, err) = drain(&mut *src);
    assert!(err.is_none());
    assert_eq!(ev.len() + want.len(), 60_000);
    src.sync().unwrap();
    let got: Vec<(u64, String)> = std::fs::read_to_string(&dead)
        .unwrap()
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            (r["line"].as_u64().unwrap(), r["raw"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------- resume

/// For every k: read k events, checkpoint (sync + position), read on a bit (a crash
/// after the checkpoint), resume from the checkpoint and read to the end. The events and
/// the final dead-letter file must equal a straight read's.
fn check_resume_everywhere(path: &Path, o: &SourceOptions, dead: Option<&Path>) {
    let mut src = open(path, o).unwrap();
    let (all, err) = drain(&mut *src);
    assert!(err.is_none(), "{err:?}");
    src.sync().unwrap();
    let schema = src.schema().clone();
    let final_pos = src.position();
    let skipped_total = src.skipped();
    let dead_all = dead.map(|d| std::fs::read(d).unwrap());
    drop(src);
    for k in 0..=all.len() {
        let mut a = open(path, o).unwrap();
        for e in &all[..k] {
            assert_eq!(a.next_event().unwrap().as_ref(), Some(e));
        }
        a.sync().unwrap();
        let pos = a.position();
        assert_eq!(pos.next_seq, k as u64);
        // Read on past the checkpoint; these effects must be undone by resume.
        for _ in 0..2 {
            let _ = a.next_event().unwrap();
        }
        a.sync().unwrap();
        drop(a);
        let pos: SourcePosition =
            serde_json::from_str(&serde_json::to_string(&pos).unwrap()).unwrap();
        let mut b = resume(path, o, &schema, &pos).unwrap();
        let (rest, err) = drain(&mut *b);
        assert!(err.is_none(), "k={k}: {err:?}");
        assert_eq!(rest, all[k..], "k={k}");
        assert_eq!(b.skipped(), skipped_total, "k={k}");
        b.sync().unwrap();
        assert_eq!(b.position(), final_pos, "k={k}");
        if let (Some(d), Some(want)) = (dead, &dead_all) {
            assert_eq!(&std::fs::read(d).unwrap(), want, "k={k}: dead letters");
        }
    }
}

#[test]
fn csv_resume_at_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let data = "card,note,ts\r\n1,\"multi\r\nline\",1\r\n\r\n2,plain,2\n3,\"q \"\"x\"\"\",3\n\
                bad,row,4\n5,\"a\nb\nc\",5\n6,x\n7,\"\",7\n8,z,8";
    let p = write(dir.path(), "r.csv", data);
    let dead = dir.path().join("dead.jsonl");
    for infer_rows in [1, 3, 1000] {
        let o = SourceOptions { infer_rows, ..skip_opts("ts", &dead) };
        check_resume_everywhere(&p, &o, Some(&dead));
    }
    let p = write(dir.path(), "ok.csv", "ts,v\n1,\"x\ny\"\n2,b\n3,c\n");
    check_resume_everywhere(&p, &opts("ts"), None);
}

#[test]
fn jsonl_resume_at_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let data = "{\"ts\":1,\"a\":\"x\"}\n\n{\"ts\":2}\r\n{\"ts\":\"bad\"}\n{\"ts\":4,\"a\":\"é\"}\n\
                {oops\n{\"ts\":6,\"a\":null}\n  \n{\"ts\":7,\"a\":\"end\"}";
    let p = write(dir.path(), "r.jsonl", data);
    let dead = dir.path().join("dead.jsonl");
    for infer_rows in [1, 4, 1000] {
        let o = SourceOptions { infer_rows, ..skip_opts("ts", &dead) };
        check_resume_everywhere(&p, &o, Some(&dead));
    }
}

#[test]
fn resume_refuses_stdin_and_short_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "r.csv", "ts\n1\n");
    let src = open(&p, &opts("ts")).unwrap();
    let schema = src.schema().clone();
    let pos = SourcePosition { byte_offset: 100, ..SourcePosition::default() };
    let e = resume(&p, &opts("ts"), &schema, &pos).err().unwrap();
    assert!(e.to_string().contains("checkpoint is at byte 100"), "{e}");
    let e = resume(Path::new("-"), &opts("ts"), &schema, &SourcePosition::default()).err().unwrap();
    assert!(matches!(e, SourceError::Resume { .. }));
    let dead = dir.path().join("none.jsonl");
    let pos = SourcePosition { dead_letter_bytes: 10, ..SourcePosition::default() };
    let e = resume(&p, &skip_opts("ts", &dead), &schema, &pos).err().unwrap();
    assert!(e.to_string().contains("cannot resume") || matches!(e, SourceError::Io { .. }), "{e}");
}

// ---------------------------------------------------------------- sinks

fn cols(c: &[&str]) -> Vec<String> {
    c.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sink_csv_escaping() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.csv");
    let mut k = Sink::create(Some(&p), &cols(&["a", "b,c", "d"])).unwrap();
    k.write_row(&[Value::Int(-3), s("x,y"), Value::Float(2.0)]).unwrap();
    k.write_row(&[Value::Null, s("say \"hi\"\nbye"), Value::Float(0.1)]).unwrap();
    k.write_row(&[Value::Bool(true), s(""), Value::Float(f64::NAN)]).unwrap();
    let e = k.write_row(&[Value::Null]).unwrap_err();
    assert!(e.to_string().contains("a row needs 3 values (one per column), got 1"), "{e}");
    let len = k.sync().unwrap();
    assert_eq!(k.rows(), 3);
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(len, text.len() as u64);
    assert_eq!(text, "a,\"b,c\",d\n-3,\"x,y\",2.0\n,\"say \"\"hi\"\"\nbye\",0.1\ntrue,\"\",NaN\n");
    // A one-column file writes NULL as "" so the row is not a blank line.
    let p1 = dir.path().join("one.csv");
    let mut k = Sink::create(Some(&p1), &cols(&["v"])).unwrap();
    k.write_row(&[Value::Null]).unwrap();
    k.sync().unwrap();
    assert_eq!(std::fs::read_to_string(&p1).unwrap(), "v\n\"\"\n");
}

#[test]
fn sink_jsonl_escaping() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("o.jsonl");
    let mut k = Sink::create(Some(&p), &cols(&["a", "q\"k", "f", "b"])).unwrap();
    assert_eq!(k.format(), SinkFormat::JsonLines);
    k.write_row(&[Value::Int(1), s("x\"\n\\\u{1}é"), Value::Float(2.0), Value::Bool(false)])
        .unwrap();
    k.write_row(&[Value::Null, Value::Null, Value::Float(f64::INFINITY), Value::Null]).unwrap();
    k.write_row(&[Value::Int(i64::MIN), s(""), Value::Float(-1.5e-300), Value::Bool(true)])
        .unwrap();
    k.sync().unwrap();
    let text = std::fs::read_to_string(&p).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], r#"{"a":1,"q\"k":"x\"\n\\\u0001é","f":2.0,"b":false}"#);
    assert_eq!(lines[1], r#"{"a":null,"q\"k":null,"f":null,"b":null}"#);
    assert_eq!(lines[2], r#"{"a":-9223372036854775808,"q\"k":"","f":-1.5e-300,"b":true}"#);
}

#[test]
fn sink_resume_truncates() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["o.csv", "o.jsonl"] {
        let p = dir.path().join(name);
        let c = cols(&["a", "b"]);
        let mut k = Sink::create(Some(&p), &c).unwrap();
        k.write_row(&[Value::Int(1), s("one")]).unwrap();
        let len = k.sync().unwrap();
        k.write_row(&[Value::Int(2), s("lost")]).unwrap();
        k.sync().unwrap();
        drop(k);
        let mut k = Sink::resume(&p, &c, len).unwrap();
        k.write_row(&[Value::Int(3), s("three")]).unwrap();
        let len2 = k.sync().unwrap();
        drop(k);
        let mut straight = Sink::create(Some(&dir.path().join(format!("x{name}"))), &c).unwrap();
        straight.write_row(&[Value::Int(1), s("one")]).unwrap();
        straight.write_row(&[Value::Int(3), s("three")]).unwrap();
        straight.sync().unwrap();
        let want = std::fs::read(dir.path().join(format!("x{name}"))).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), want, "{name}");
        assert_eq!(len2, want.len() as u64);
        let e = Sink::resume(&p, &c, len2 + 1).err().unwrap();
        assert!(e.to_string().contains("cannot resume"), "{e}");
    }
    // Resuming at 0 bytes rewrites the CSV header.
    let p = dir.path().join("z.csv");
    Sink::resume(&p, &cols(&["a"]), 0).unwrap().sync().unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "a\n");
}

#[test]
fn side_output_writes_events_in_input_schema() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "in.csv", "ts,card,amount\n5,\"a,b\",1.5\n6,,\n");
    let src = open(&p, &opts("ts")).unwrap();
    let schema = src.schema().clone();
    let events = read_all(&p, &opts("ts"));
    let out = dir.path().join("late.csv");
    let mut k = Sink::create_side_output(&out, &schema).unwrap();
    for e in &events {
        k.write_event(e).unwrap();
    }
    k.sync().unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ts,card,amount\n5,\"a,b\",1.5\n6,,\n");
    assert_eq!(read_all(&out, &opts("ts")), events);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the sink writes, the source reads back: strings with delimiters, quotes,
    /// line breaks and unicode; NULLs; ints; floats (CSV and JSON Lines).
    #[test]
    fn sink_then_source_round_trip(
        rows in prop::collection::vec(
            (
                prop::option::of("[a-z,\"\n\r é{}:\\\\]{1,8}"),
                any::<i64>(),
                prop::option::of(-1e12f64..1e12),
                any::<bool>(),
            ),
            0..20,
        ),
        jsonl in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let name = if jsonl { "rt.jsonl" } else { "rt.csv" };
        let p = dir.path().join(name);
        let c = cols(&["s", "ts", "f", "b"]);
        let mut k = Sink::create(Some(&p), &c).unwrap();
        let want: Vec<Vec<Value>> = rows
            .iter()
            .map(|(st, t, f, b)| {
                vec![
                    st.as_deref().map_or(Value::Null, s),
                    Value::Int(*t),
                    f.map_or(Value::Null, Value::Float),
                    Value::Bool(*b),
                ]
            })
            .collect();
        for r in &want {
            k.write_row(r).unwrap();
        }
        k.sync().unwrap();
        let o = SourceOptions {
            schema_overrides: parse_schema_overrides("s:string,f:float,b:bool").unwrap(),
            ..opts("ts")
        };
        if want.is_empty() && jsonl {
            return Ok(()); // no keys to infer a schema from
        }
        let got: Vec<Vec<Value>> = read_all(&p, &o).into_iter().map(|e| e.row).collect();
        prop_assert_eq!(got, want);
    }
}

/// A typed JSON member for the parser's differential test.
#[derive(Clone, Debug)]
enum Member {
    I(i64),
    F(f64),
    S(String),
    B(bool),
    Null,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The JSON Lines row parser against an oracle: objects written by serde_json (any
    /// key order, some keys missing, optional spaces) parse to exactly the values put in,
    /// floats bit for bit.
    #[test]
    fn json_row_parser_matches_oracle(
        members in prop::collection::vec(
            prop_oneof![
                any::<i64>().prop_map(Member::I),
                any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Member::F),
                "[a-z\"\\\n\u{1}é ]{0,6}".prop_map(Member::S),
                any::<bool>().prop_map(Member::B),
                Just(Member::Null),
            ],
            4,
        ),
        present in prop::collection::vec(any::<bool>(), 4),
        order in Just([0usize, 1, 2, 3]).prop_shuffle(),
        spaced in any::<bool>(),
    ) {
        use crate::value::{Field, Schema, TimeUnit};
        // Columns: k0 float, k"1 string, "k é2" bool, ts int.
        let names = ["k0", "k\"1", "k é2", "ts"];
        let fields: Vec<Field> = names
            .iter()
            .zip([DataType::Float, DataType::Str, DataType::Bool, DataType::Int])
            .map(|(n, ty)| Field { name: n.to_string(), ty })
            .collect();
        let schema = Schema::new(fields, "ts", TimeUnit::Ms).unwrap();
        let index: std::collections::HashMap<String, usize> =
            names.iter().enumerate().map(|(i, n)| (n.to_string(), i)).collect();
        let mut want = vec![Value::Null; 4];
        let mut parts = Vec::new();
        for &col in &order {
            if !present[col] {
                continue;
            }
            let m = &members[col];
            let (json, val) = match (col, m) {
                (_, Member::Null) => ("null".to_string(), Value::Null),
                (0, Member::F(f)) => (serde_json::to_string(f).unwrap(), Value::Float(*f)),
                (0, Member::I(i)) => (i.to_string(), Value::Float(*i as f64)),
                (1, Member::S(s)) => (serde_json::to_string(s).unwrap(), Value::Str(s.as_str().into())),
                (1, Member::I(i)) => (i.to_string(), Value::Str(i.to_string().into())),
                (2, Member::B(b)) => (b.to_string(), Value::Bool(*b)),
                (3, Member::I(i)) => (i.to_string(), Value::Int(*i)),
                _ => continue, // a type the column does not take: tested elsewhere
            };
            want[col] = val;
            let key = serde_json::to_string(names[col]).unwrap();
            parts.push(if spaced { format!(" {key} : {json} ") } else { format!("{key}:{json}") });
        }
        let line = format!("{{{}}}\n", parts.join(","));
        let got = jsonl::parse_row(line.as_bytes(), &schema, &index);
        prop_assert_eq!(got, Ok(want), "{}", line);
    }
}

/// The JSON values a row's member can hold, edge cases first: numbers at and past the
/// integer range, `-0`, leading zeros, exponents out of range, strings with escapes,
/// control characters or bytes that are not UTF-8, near-keywords, nesting, trailing text.
fn json_member_value() -> impl Strategy<Value = Vec<u8>> {
    let zoo: Vec<&'static [u8]> = vec![
        b"0",
        b"-0",
        b"7",
        b"-12",
        b"01",
        b"-",
        b"1.",
        b".5",
        b"1e",
        b"1e5",
        b"1E+5",
        b"2e-3",
        b"0.1",
        b"-0.0",
        b"1e400",
        b"-1e-400",
        b"9223372036854775807",
        b"-9223372036854775808",
        b"9223372036854775808",
        b"-9223372036854775809",
        b"123456789012345678901234567890",
        b"3.0",
        b"\"\"",
        b"\"abc\"",
        b"\"a\\\"b\"",
        b"\"\\u00e9\"",
        b"\"\xc3\xa9\"",
        b"\"\xff\"",
        b"\"a\tb\"",
        b"\"12\"",
        b"\"2023-11-14T22:13:20.663Z\"",
        b"true",
        b"false",
        b"null",
        b"nul",
        b"truex",
        b"nullx",
        b"12x",
        b"[1]",
        b"{\"a\":1}",
        b"1 2",
        b"\"x",
        b"",
    ];
    prop_oneof![
        4 => proptest::sample::select(zoo).prop_map(|b| b.to_vec()),
        1 => any::<i64>().prop_map(|i| i.to_string().into_bytes()),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}").into_bytes()),
        1 => "[a-z0-9 ]{0,6}".prop_map(|t| format!("\"{t}\"").into_bytes()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 5000, ..ProptestConfig::default() })]

    /// `parse_row`'s fast path for plain values gives exactly what the general path
    /// (serde_json for every value) gives: the same values, to the bit, and the same
    /// errors, for every column type and the time column.
    #[test]
    fn json_row_fast_path_matches_the_general_path(
        members in proptest::collection::vec((0usize..7, json_member_value(), 0usize..3), 0..7),
    ) {
        use crate::value::{Field, Schema, TimeUnit};
        let names = ["ts", "i", "f", "s", "b", "i2", "f2"];
        let tys = [DataType::Int, DataType::Int, DataType::Float, DataType::Str, DataType::Bool,
                   DataType::Int, DataType::Float];
        let fields = names.iter().zip(tys).map(|(n, ty)| Field { name: n.to_string(), ty }).collect();
        let schema = Schema::new(fields, "ts", TimeUnit::Ms).unwrap();
        let index: std::collections::HashMap<String, usize> =
            names.iter().enumerate().map(|(i, n)| (n.to_string(), i)).collect();
        let mut line = b"{".to_vec();
        for (k, (col, value, space)) in members.iter().enumerate() {
            if k > 0 {
                line.push(b',');
            }
            let pad: &[u8] = [&b""[..], b" ", b"\t "][*space];
            line.extend_from_slice(pad);
            line.extend_from_slice(format!("\"{}\"", names[*col]).as_bytes());
            line.extend_from_slice(pad);
            line.push(b':');
            line.extend_from_slice(pad);
            line.extend_from_slice(value);
            line.extend_from_slice(pad);
        }
        line.extend_from_slice(b"}\n");
        // Debug text compares floats to the bit (-0.0 is not 0.0 there).
        let fast = format!("{:?}", jsonl::parse_row(&line, &schema, &index));
        let general = format!("{:?}", jsonl::parse_row_general(&line, &schema, &index));
        prop_assert_eq!(fast, general, "{}", String::from_utf8_lossy(&line));
    }

    /// Any bytes (a Kafka message is whatever a producer wrote): an error or a row, the
    /// same from both paths, never a panic.
    #[test]
    fn json_rows_from_any_bytes(
        bytes in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            proptest::collection::vec(
                proptest::sample::select(b"{}[]:,\"\\ -+.eE0123456789tfnaulrsx".to_vec()),
                0..64,
            ),
        ],
    ) {
        use crate::value::{Field, Schema, TimeUnit};
        let fields = vec![
            Field { name: "ts".into(), ty: DataType::Int },
            Field { name: "a".into(), ty: DataType::Float },
            Field { name: "s".into(), ty: DataType::Str },
        ];
        let schema = Schema::new(fields, "ts", TimeUnit::Ms).unwrap();
        let index = [("ts".to_string(), 0usize), ("a".into(), 1), ("s".into(), 2)].into_iter().collect();
        let fast = format!("{:?}", jsonl::parse_row(&bytes, &schema, &index));
        let general = format!("{:?}", jsonl::parse_row_general(&bytes, &schema, &index));
        prop_assert_eq!(fast, general);
    }
}

#[test]
fn json_row_parser_errors() {
    use crate::value::{Field, Schema, TimeUnit};
    let schema =
        Schema::new(vec![Field { name: "ts".into(), ty: DataType::Int }], "ts", TimeUnit::Ms)
            .unwrap();
    let index = [("ts".to_string(), 0usize)].into_iter().collect();
    let cases = [
        ("[1]", "expected a JSON object (`{`) at column 1, found `[`"),
        ("{\"ts\":1", "expected `,` or `}` at column 8, found the end of the line"),
        ("{\"ts\":1} x", "unexpected text after the object at column 10"),
        ("{\"ts\" 1}", "expected `:` at column 7, found `1`"),
        ("{ts:1}", "expected a key (`\"`) at column 2, found `t`"),
        ("{\"ts\":tru}", "expected ident at column 10"),
        ("{\"ts\":}", "expected value at column 7"),
    ];
    for (line, want) in cases {
        match jsonl::parse_row(line.as_bytes(), &schema, &index) {
            Err(RowProblem::BadJson { message }) => assert_eq!(message, want, "{line}"),
            other => panic!("{line}: {other:?}"),
        }
    }
}

#[test]
fn time_columns_take_rfc3339_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let ms = 1_700_000_000_663;
    let csv = write(
        dir.path(),
        "t.csv",
        "card,ts\na,2023-11-14T22:13:20.663Z\nb,2023-11-14 22:13:20.663\nc,1700000000663\n\
         d,2023-11-14T23:13:20.663+01:00\n",
    );
    let times: Vec<i64> = read_all(&csv, &opts("ts")).iter().map(|e| e.time).collect();
    assert_eq!(times, vec![ms; 4]);
    let jsonl = write(
        dir.path(),
        "t.jsonl",
        "{\"card\":\"a\",\"ts\":\"2023-11-14T22:13:20.663Z\"}\n\
         {\"card\":\"b\",\"ts\":1700000000663}\n\
         {\"card\":\"c\",\"ts\":\"2023-11-14 22:13:20.663\"}\n",
    );
    let events = read_all(&jsonl, &opts("ts"));
    assert_eq!(events.iter().map(|e| e.time).collect::<Vec<_>>(), vec![ms; 3]);
    assert_eq!(events[0].row, vec![s("a"), Value::Int(ms)]);
    // The unit sets the scale, as for integers.
    let secs = SourceOptions { time_unit: crate::value::TimeUnit::S, ..opts("ts") };
    assert_eq!(read_all(&csv, &secs)[0].time, 1_700_000_000);

    // Anything else: the row, the column and what was expected, with an example.
    let bad = write(dir.path(), "b.csv", "card,ts\na,2023-11-14T22:13:20Z\nb,14/11/2023\n");
    let want = format!("{} line 3, {}", bad.display(), bad_time("ts", "ms", "14/11/2023"));
    assert_eq!(first_error(&bad, &opts("ts")), want);
    let bad = write(dir.path(), "b.jsonl", "{\"ts\":\"2023-11-14T22:13:20Z\"}\n{\"ts\":1.5}\n");
    let want = format!("{} line 2, {}", bad.display(), bad_time("ts", "ms", "1.5"));
    assert_eq!(first_error(&bad, &opts("ts")), want);
}

/// Kafka workers read event messages with the JSON row parser: timestamps included.
#[test]
fn json_row_parser_reads_timestamps() {
    use crate::value::{Field, Schema, TimeUnit};
    let fields = vec![
        Field { name: "ts".into(), ty: DataType::Int },
        Field { name: "a".into(), ty: DataType::Int },
    ];
    let schema = Schema::new(fields, "ts", TimeUnit::Us).unwrap();
    let index = [("ts".to_string(), 0usize), ("a".to_string(), 1)].into_iter().collect();
    let got = jsonl::parse_row(br#"{"ts":"2023-11-14T22:13:20.663Z","a":1}"#, &schema, &index);
    assert_eq!(got, Ok(vec![Value::Int(1_700_000_000_663_000), Value::Int(1)]));
    let got = jsonl::parse_row(br#"{"ts":"soon","a":1}"#, &schema, &index);
    assert!(matches!(got, Err(RowProblem::BadTime { .. })), "{got:?}");
}

// ---------------------------------------------------------------- generator

fn small(seed: u64) -> PaymentOptions {
    PaymentOptions { seed, events: 5000, cards: 1000, merchants: 100, ..PaymentOptions::default() }
}

#[test]
fn generator_is_deterministic_per_seed() {
    let a = generate_events(small(1)).unwrap();
    let b = generate_events(small(1)).unwrap();
    let c = generate_events(small(2)).unwrap();
    assert_eq!(a.len(), 5000);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let g = PaymentGenerator::new(small(1)).unwrap();
    assert_eq!(
        g.schema().fields().iter().map(|f| (f.name.as_str(), f.ty)).collect::<Vec<_>>(),
        [
            ("card", DataType::Int),
            ("merchant", DataType::Int),
            ("amount", DataType::Float),
            ("ts", DataType::Int)
        ]
    );
    assert_eq!(g.schema().time_index(), 3);
    for (i, e) in a.iter().enumerate() {
        assert_eq!(e.seq, i as u64);
        assert_eq!(e.row[3], Value::Int(e.time));
        let Value::Int(card) = e.row[0] else { panic!("card") };
        let Value::Int(merchant) = e.row[1] else { panic!("merchant") };
        assert!((0..1000).contains(&card) && (0..100).contains(&merchant));
        let Value::Float(amount) = e.row[2] else { panic!("amount") };
        assert!(amount >= 0.01 && ((amount * 100.0).round() - amount * 100.0).abs() < 1e-6);
        if i > 0 {
            assert!(e.time >= a[i - 1].time);
        }
    }
    // 5000 events at 10k/s of event time span about half a second.
    let span = a[4999].time - a[0].time;
    assert!((400..600).contains(&span), "span {span} ms");
    assert!(a[0].time >= PaymentOptions::default().start_ms);
}

#[test]
fn generator_zipf_rank_zero_is_hottest() {
    let opts = PaymentOptions { events: 20_000, cards: 10_000, ..small(9) };
    let events = generate_events(opts).unwrap();
    let mut counts = vec![0u32; 10_000];
    for e in &events {
        if let Value::Int(c) = e.row[0] {
            counts[c as usize] += 1;
        }
    }
    let hot = spillway_zipf::ScrambledZipfian::new(10_000, 0.99).item_of_rank(0);
    let max = (0..10_000).max_by_key(|&i| counts[i]).unwrap();
    assert_eq!(max as u64, hot);
    assert!(counts[hot as usize] > 1000, "{}", counts[hot as usize]);
    // Uniform (zipf 0) has no such hot card.
    let events = generate_events(PaymentOptions { zipf: 0.0, events: 20_000, ..small(9) }).unwrap();
    let mut counts = vec![0u32; 1000];
    for e in &events {
        if let Value::Int(c) = e.row[0] {
            counts[c as usize] += 1;
        }
    }
    assert!(counts.iter().max().copied().unwrap() < 60);
}

#[test]
fn generator_resumes_by_skipping() {
    let all = generate_events(small(3)).unwrap();
    let mut g = PaymentGenerator::new(small(3)).unwrap();
    for e in &all[..1234] {
        assert_eq!(g.next_event().unwrap().as_ref(), Some(e));
    }
    let pos = g.position();
    assert_eq!(pos.next_seq, 1234);
    let mut h = PaymentGenerator::new(small(3)).unwrap();
    h.skip_to(pos.next_seq);
    let (rest, err) = drain(&mut h);
    assert!(err.is_none());
    assert_eq!(rest, all[1234..]);
}

#[test]
fn generator_rejects_bad_options() {
    for o in [
        PaymentOptions { cards: 0, ..small(1) },
        PaymentOptions { zipf: 1.0, ..small(1) },
        PaymentOptions { zipf: -0.5, ..small(1) },
        PaymentOptions { events_per_second: 0.0, ..small(1) },
        PaymentOptions { events_per_second: f64::NAN, ..small(1) },
    ] {
        assert!(matches!(PaymentGenerator::new(o), Err(SourceError::Options { .. })));
    }
}

#[test]
fn sniffing_picks_the_format_and_keeps_the_bytes() {
    let cases: [(&[u8], Format); 5] = [
        (b"  \n\n {\"ts\":1}\n", Format::JsonLines),
        (b"\xEF\xBB\xBF{\"ts\":1}", Format::JsonLines),
        (b"ts,a\n1,2\n", Format::Delimited(b',')),
        (b"", Format::Delimited(b',')),
        (b"\n\n", Format::Delimited(b',')),
    ];
    for (data, want) in cases {
        let mut r = std::io::Cursor::new(data.to_vec());
        let (prefix, f) = sniff(&mut r).unwrap();
        assert_eq!(f, want, "{data:?}");
        // Nothing is lost: the prefix plus the rest is the whole input.
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut r, &mut rest).unwrap();
        assert_eq!([prefix, rest].concat(), data);
    }
}

// ---------------------------------------------------------------- hostile files

/// Bytes from a damaged or foreign file, named `.csv`, `.jsonl` or neither (sniffed):
/// opening and reading it to the end gives events and then the end or an error, never a
/// panic; with `--on-error skip` every row is an event or a dead letter.
mod hostile_files {
    use super::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::collection::vec(
                proptest::sample::select(b"ts,a\n\r\"'{}[]:-+.eE0129tfnul\t \xff\xc3".to_vec()),
                0..200,
            ),
            // A valid file with one byte changed.
            (any::<usize>(), any::<u8>()).prop_map(|(at, b)| {
                let mut v = b"ts,card,amount\n1,\"a, b\",1.5\n2,x,2\n3,\"q\"\"\",\n".to_vec();
                let i = at % v.len();
                v[i] = b;
                v
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn any_file_reads_as_events_or_an_error(
            data in bytes(),
            ext in proptest::sample::select(&["csv", "jsonl", "tsv", "data"][..]),
            skip in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join(format!("in.{ext}"));
            std::fs::write(&p, &data).unwrap();
            let dead = dir.path().join("dead.txt");
            let o = if skip { skip_opts("ts", &dead) } else { opts("ts") };
            if let Ok(mut src) = open(&p, &o) {
                let (events, _err) = drain(&mut *src);
                // Every event read has a place in the file: no more events than lines.
                let lines = data.split(|&b| b == b'\n').count();
                prop_assert!(events.len() <= lines, "{} events from {} lines", events.len(), lines);
            }
        }
    }
}
