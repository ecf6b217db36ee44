//! Event encoding inside a chunk payload (schema-driven varints, see the FORMAT section of
//! the module docs) and the chunk compression codecs.

use crate::value::{DataType, Event, Schema, Value};

use super::Compression;

/// Codec byte of an LZ4 (lz4_flex block format) chunk.
pub(crate) const CODEC_LZ4: u8 = 1;
/// Codec byte of a zstd chunk.
pub(crate) const CODEC_ZSTD: u8 = 2;

/// A decoding failure: byte offset inside the raw payload and what was wrong.
#[derive(Debug)]
pub(crate) struct DecodeError {
    pub offset: usize,
    pub what: String,
}

#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[inline]
pub(crate) fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let start = *pos;
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let Some(&b) = buf.get(*pos) else {
            return Err(DecodeError { offset: start, what: "varint runs past the payload".into() });
        };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(DecodeError { offset: start, what: "varint overflows 64 bits".into() });
        }
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Ok(v);
        }
        shift += 7;
    }
}

/// Encodes and decodes the events of one schema.
#[derive(Debug)]
pub(crate) struct EventCodec {
    types: Box<[DataType]>,
    names: Box<[String]>,
    time_index: usize,
    bitmap_len: usize,
}

impl EventCodec {
    pub(crate) fn new(schema: &Schema) -> EventCodec {
        let types: Box<[DataType]> = schema.fields().iter().map(|f| f.ty).collect();
        let names = schema.fields().iter().map(|f| f.name.clone()).collect();
        let bitmap_len = types.len().div_ceil(8);
        EventCodec { types, names, time_index: schema.time_index(), bitmap_len }
    }

    /// Appends the encoding of `ev` to `out`, delta-coded against `prev` (time, seq) which
    /// it then updates. On a schema violation `out` and `prev` are left unchanged.
    #[inline]
    pub(crate) fn encode(
        &self,
        ev: &Event,
        prev: &mut (i64, u64),
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        if ev.row.len() != self.types.len() {
            return Err(format!(
                "the row has {} values, the schema has {} fields",
                ev.row.len(),
                self.types.len()
            ));
        }
        let start = out.len();
        put_varint(out, zigzag(ev.time.wrapping_sub(prev.0)));
        put_varint(out, zigzag(ev.seq.wrapping_sub(prev.1) as i64));
        let bm = out.len();
        out.resize(bm + self.bitmap_len, 0);
        for (i, (v, ty)) in ev.row.iter().zip(self.types.iter()).enumerate() {
            match (v, ty) {
                (Value::Null, _) => out[bm + i / 8] |= 1 << (i % 8),
                (Value::Int(x), DataType::Int) => {
                    let x = if i == self.time_index { x.wrapping_sub(ev.time) } else { *x };
                    put_varint(out, zigzag(x));
                }
                (Value::Float(f), DataType::Float) => {
                    out.extend_from_slice(&f.to_bits().to_le_bytes())
                }
                (Value::Str(s), DataType::Str) => {
                    put_varint(out, s.len() as u64);
                    out.extend_from_slice(s.as_bytes());
                }
                (Value::Bool(b), DataType::Bool) => out.push(u8::from(*b)),
                (v, ty) => {
                    out.truncate(start);
                    return Err(format!(
                        "field {i} `{}` has type {ty}, the event holds {} `{v:?}`",
                        self.names[i],
                        v.data_type().map_or("null", |t| t.name()),
                    ));
                }
            }
        }
        *prev = (ev.time, ev.seq);
        Ok(())
    }

    /// Decodes the event at `*pos` of `buf` into `out` (reusing its row allocation),
    /// advancing `*pos` and updating `prev`.
    #[inline]
    pub(crate) fn decode(
        &self,
        buf: &[u8],
        pos: &mut usize,
        prev: &mut (i64, u64),
        out: &mut Event,
    ) -> Result<(), DecodeError> {
        let time = prev.0.wrapping_add(unzigzag(get_varint(buf, pos)?));
        let seq = prev.1.wrapping_add(unzigzag(get_varint(buf, pos)?) as u64);
        let bm = *pos;
        let Some(bitmap) = buf.get(bm..bm + self.bitmap_len) else {
            return Err(DecodeError {
                offset: bm,
                what: "null bitmap runs past the payload".into(),
            });
        };
        *pos += self.bitmap_len;
        out.row.clear();
        out.row.reserve(self.types.len());
        for (i, ty) in self.types.iter().enumerate() {
            if bitmap[i / 8] & (1 << (i % 8)) != 0 {
                out.row.push(Value::Null);
                continue;
            }
            let at = *pos;
            let v = match ty {
                DataType::Int => {
                    let x = unzigzag(get_varint(buf, pos)?);
                    Value::Int(if i == self.time_index { x.wrapping_add(time) } else { x })
                }
                DataType::Float => {
                    let Some(b) = buf.get(at..at + 8) else {
                        return Err(DecodeError {
                            offset: at,
                            what: format!("float field {i} runs past the payload"),
                        });
                    };
                    *pos += 8;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    Value::Float(f64::from_bits(u64::from_le_bytes(a)))
                }
                DataType::Str => {
                    let n = get_varint(buf, pos)?;
                    let s = *pos;
                    let bytes = usize::try_from(n)
                        .ok()
                        .and_then(|n| s.checked_add(n))
                        .and_then(|e| buf.get(s..e))
                        .ok_or_else(|| DecodeError {
                            offset: at,
                            what: format!("string field {i} of {n} bytes runs past the payload"),
                        })?;
                    *pos += bytes.len();
                    let st = std::str::from_utf8(bytes).map_err(|e| DecodeError {
                        offset: at,
                        what: format!("string field {i} is not UTF-8: {e}"),
                    })?;
                    Value::Str(st.into())
                }
                DataType::Bool => match buf.get(at) {
                    Some(0) => {
                        *pos += 1;
                        Value::Bool(false)
                    }
                    Some(1) => {
                        *pos += 1;
                        Value::Bool(true)
                    }
                    Some(b) => {
                        return Err(DecodeError {
                            offset: at,
                            what: format!("bool field {i} holds byte {b}, expected 0 or 1"),
                        })
                    }
                    None => {
                        return Err(DecodeError {
                            offset: at,
                            what: format!("bool field {i} runs past the payload"),
                        })
                    }
                },
            };
            out.row.push(v);
        }
        out.time = time;
        out.seq = seq;
        *prev = (time, seq);
        Ok(())
    }
}

/// Compresses a raw payload; returns the codec byte and the compressed bytes.
pub(crate) fn compress(c: Compression, raw: &[u8]) -> std::io::Result<(u8, Vec<u8>)> {
    match c {
        Compression::Lz4 => Ok((CODEC_LZ4, lz4_flex::block::compress(raw))),
        Compression::Zstd(level) => Ok((CODEC_ZSTD, zstd::bulk::compress(raw, level)?)),
    }
}

/// Decompresses a payload that must expand to exactly `raw_len` bytes.
pub(crate) fn decompress(codec: u8, data: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    let out = match codec {
        CODEC_LZ4 => lz4_flex::block::decompress(data, raw_len)
            .map_err(|e| format!("lz4 payload does not decompress: {e}"))?,
        CODEC_ZSTD => zstd::bulk::decompress(data, raw_len)
            .map_err(|e| format!("zstd payload does not decompress: {e}"))?,
        other => return Err(format!("unknown codec {other} (expected 1 lz4 or 2 zstd)")),
    };
    if out.len() != raw_len {
        return Err(format!(
            "payload decompresses to {} bytes, the header says {raw_len}",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Field, TimeUnit};
    use proptest::prelude::*;

    fn schema() -> Schema {
        Schema::new(
            vec![
                Field { name: "ts".into(), ty: DataType::Int },
                Field { name: "x".into(), ty: DataType::Float },
                Field { name: "s".into(), ty: DataType::Str },
                Field { name: "b".into(), ty: DataType::Bool },
                Field { name: "n".into(), ty: DataType::Int },
            ],
            "ts",
            TimeUnit::Ms,
        )
        .unwrap()
    }

    fn value(ty: u8) -> impl Strategy<Value = Value> {
        let nn: BoxedStrategy<Value> = match ty {
            0 => any::<i64>().prop_map(Value::Int).boxed(),
            1 => any::<f64>().prop_map(Value::Float).boxed(),
            2 => ".{0,12}".prop_map(|s| Value::Str(s.into())).boxed(),
            _ => any::<bool>().prop_map(Value::Bool).boxed(),
        };
        prop_oneof![1 => Just(Value::Null), 4 => nn]
    }

    fn event() -> impl Strategy<Value = Event> {
        (any::<i64>(), any::<u64>(), value(1), value(2), value(3), value(0), any::<bool>())
            .prop_map(|(time, seq, x, s, b, n, time_in_row)| Event {
                time,
                seq,
                row: vec![if time_in_row { Value::Int(time) } else { Value::Null }, x, s, b, n],
            })
    }

    /// Floats compared bitwise so NaN payloads count.
    fn same(a: &Event, b: &Event) -> bool {
        a.time == b.time
            && a.seq == b.seq
            && a.row.len() == b.row.len()
            && a.row.iter().zip(&b.row).all(|(x, y)| match (x, y) {
                (Value::Float(p), Value::Float(q)) => p.to_bits() == q.to_bits(),
                _ => x == y,
            })
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<u64>(), i in any::<i64>()) {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            put_varint(&mut b, zigzag(i));
            let mut p = 0;
            prop_assert_eq!(get_varint(&b, &mut p).unwrap(), v);
            prop_assert_eq!(unzigzag(get_varint(&b, &mut p).unwrap()), i);
            prop_assert_eq!(p, b.len());
        }

        #[test]
        fn events_round_trip(evs in proptest::collection::vec(event(), 0..40)) {
            let c = EventCodec::new(&schema());
            let mut buf = Vec::new();
            let mut prev = (0, 0);
            for e in &evs {
                c.encode(e, &mut prev, &mut buf).unwrap();
            }
            let mut pos = 0;
            let mut prev = (0, 0);
            let mut out = Event { time: 0, seq: 0, row: Vec::new() };
            for e in &evs {
                c.decode(&buf, &mut pos, &mut prev, &mut out).unwrap();
                prop_assert!(same(e, &out), "{:?} != {:?}", e, out);
            }
            prop_assert_eq!(pos, buf.len());
        }

        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let c = EventCodec::new(&schema());
            let mut pos = 0;
            let mut prev = (0, 0);
            let mut out = Event { time: 0, seq: 0, row: Vec::new() };
            while pos < bytes.len() {
                if c.decode(&bytes, &mut pos, &mut prev, &mut out).is_err() {
                    break;
                }
            }
        }

        #[test]
        fn truncated_encoding_is_an_error(e in event(), cut in any::<prop::sample::Index>()) {
            let c = EventCodec::new(&schema());
            let mut buf = Vec::new();
            c.encode(&e, &mut (0, 0), &mut buf).unwrap();
            let cut = cut.index(buf.len());
            let mut pos = 0;
            let mut out = Event { time: 0, seq: 0, row: Vec::new() };
            prop_assert!(c.decode(&buf[..cut], &mut pos, &mut (0, 0), &mut out).is_err());
        }
    }

    #[test]
    fn wrong_type_leaves_buffer_untouched() {
        let c = EventCodec::new(&schema());
        let mut buf = vec![7u8];
        let mut prev = (5, 6);
        let bad = Event {
            time: 1,
            seq: 2,
            row: vec![Value::Int(1), Value::Int(3), Value::Null, Value::Null, Value::Null],
        };
        let err = c.encode(&bad, &mut prev, &mut buf).unwrap_err();
        assert!(err.contains("field 1 `x` has type float"), "{err}");
        assert_eq!(buf, vec![7u8]);
        assert_eq!(prev, (5, 6));
        let short = Event { time: 1, seq: 2, row: vec![Value::Null] };
        assert!(c.encode(&short, &mut prev, &mut buf).is_err());
    }

    #[test]
    fn codecs_round_trip_and_check_length() {
        let raw: Vec<u8> = (0..5000u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
        for c in [Compression::Lz4, Compression::Zstd(3)] {
            let (codec, z) = compress(c, &raw).unwrap();
            assert_eq!(decompress(codec, &z, raw.len()).unwrap(), raw);
            assert!(decompress(codec, &z, raw.len() + 1).is_err());
            assert!(decompress(9, &z, raw.len()).is_err());
        }
    }
}
