//! Traces through files and the public API: write a binary trace through `OpSink`,
//! convert it to Gadget text and back, and characterize every copy.

use std::fs::File;
use std::io::{BufReader, BufWriter};

use spillway_bench::trace::{
    characterize, convert, key_frequencies, AnyTraceReader, CharacterizeOptions, TraceFormat,
    TraceReader, TraceRecord, TraceWriter, TraceWriterOptions,
};
use spillway_bench::workload::{OpKind, OpSink, StateOp};

fn ops() -> Vec<(u64, StateOp)> {
    let mut v = Vec::new();
    for e in 0..2000u64 {
        let key = format!("{:010}", e % 97).into_bytes();
        v.push((e, StateOp { kind: OpKind::Get, key: key.clone(), value: vec![] }));
        v.push((e, StateOp { kind: OpKind::Put, key: key.clone(), value: vec![b'0'; 64] }));
        if e % 10 == 9 {
            v.push((e, StateOp { kind: OpKind::Delete, key, value: vec![] }));
        }
    }
    v
}

fn write_binary<S: OpSink>(sink: &mut S, ops: &[(u64, StateOp)]) -> Result<(), S::Error> {
    for (e, op) in ops {
        sink.op(*e, op)?;
    }
    Ok(())
}

#[test]
fn files_round_trip_and_characterize() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("t.trace");
    let txt = dir.path().join("t.log");
    let bin2 = dir.path().join("t2.trace");
    let ops = ops();

    let meta =
        serde_json::json!({"experiment": "[operator]\ntype = \"tumbling.keyed.incremental\"\n"});
    let mut w = TraceWriter::new(
        BufWriter::new(File::create(&bin).unwrap()),
        TraceWriterOptions { metadata: Some(meta.clone()), ..Default::default() },
    )
    .unwrap();
    write_binary(&mut w, &ops).unwrap();
    w.finish().unwrap();

    let r = TraceReader::new(BufReader::new(File::open(&bin).unwrap())).unwrap();
    assert_eq!(r.metadata(), Some(&meta));
    let back: Vec<TraceRecord> = r.collect::<Result<_, _>>().unwrap();
    let want: Vec<TraceRecord> =
        ops.iter().map(|(e, op)| TraceRecord { input_event: *e, op: op.clone() }).collect();
    assert_eq!(back, want);

    let n = convert(
        File::open(&bin).unwrap(),
        TraceFormat::Binary,
        BufWriter::new(File::create(&txt).unwrap()),
        TraceFormat::GadgetText,
    )
    .unwrap();
    assert_eq!(n, ops.len() as u64);
    let text = std::fs::read_to_string(&txt).unwrap();
    assert!(text.starts_with("1 get 0000000000  gadget gadgetFile\n2 put 0000000000 000"));
    convert(
        File::open(&txt).unwrap(),
        TraceFormat::GadgetText,
        BufWriter::new(File::create(&bin2).unwrap()),
        TraceFormat::Binary,
    )
    .unwrap();

    let open = |p: &std::path::Path, f| AnyTraceReader::new(File::open(p).unwrap(), f).unwrap();
    let opts = CharacterizeOptions {
        reference_counts: Some(key_frequencies(open(&txt, TraceFormat::GadgetText)).unwrap()),
        window_ops: 500,
        ..Default::default()
    };
    let a = characterize(open(&bin, TraceFormat::Binary), &opts).unwrap();
    let b = characterize(open(&bin2, TraceFormat::Binary), &opts).unwrap();
    assert_eq!(a.ops, ops.len() as u64);
    assert_eq!(a.input_events, 2000);
    assert_eq!(a.distinct_keys, 97);
    assert_eq!(a.ks_vs_reference, Some(0.0));
    assert_eq!(a.ks_vs(&b), 0.0);
    assert_eq!(a.op_counts, b.op_counts);
    assert_eq!(a.stack_distances, b.stack_distances);
    // Text has one input event per op.
    assert!((a.event_amplification.unwrap() - 2.1).abs() < 1e-12);
    // Text has no input events (its sequence numbers survive the conversion back).
    assert_eq!(b.event_amplification, None);
    assert!(!b.has_input_events);
    assert_eq!(a.deletes_without_write, 0);
    assert_eq!(a.delete_ttl.count, 200);
    let json = serde_json::to_string(&a).unwrap();
    assert!(json.contains("\"op_mix\":{\"get\":"));
    assert!(!a.table().is_empty());
}
