//! Opening trace files: the compression (none, gzip, xz) and then the trace format
//! (binary, Gadget text) are detected from the first bytes, so `spillway trace stats`,
//! `trace convert` and `bench replay` read `gadget.log.gz` or `run.trace.xz` as they are.
//!
//! # FORMAT (detection)
//!
//! First on the file's bytes; the file name's extension is not consulted:
//!
//! | first bytes | taken as |
//! |---|---|
//! | `1F 8B` | gzip (RFC 1952); every member of a multi-member file is read (`flate2`) |
//! | `FD 37 7A 58 5A 00` | xz; every stream of a multi-stream file is read (`xz2`, linked against the system's liblzma) |
//! | anything else | not compressed |
//!
//! Then on the (decompressed) trace bytes:
//!
//! | first bytes | taken as |
//! |---|---|
//! | `SPWTRACE` | Spillway's binary trace (see the FORMAT section of [`super`]) |
//! | anything else | Gadget text ([`super::gadget`]); an empty file is an empty text trace |
//!
//! A corrupt or cut compressed stream fails with an I/O error that names the
//! compression ("gzip decompression: ...").

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::Path;

use super::binary::MAGIC;
use super::{AnyTraceReader, TraceError, TraceFormat};

const GZIP_MAGIC: &[u8] = &[0x1F, 0x8B];
const XZ_MAGIC: &[u8] = &[0xFD, b'7', b'z', b'X', b'Z', 0x00];

/// How a trace file is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip.
    Gzip,
    /// xz.
    Xz,
}

impl Compression {
    /// `none`, `gzip` or `xz`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
        }
    }
}

/// The reader type of an opened trace file.
pub type FileTraceReader = AnyTraceReader<Box<dyn Read + Send>>;

/// An opened trace file: its detected compression and format, and its records.
pub struct TraceFile {
    /// Compression detected.
    pub compression: Compression,
    /// Format detected (after decompression).
    pub format: TraceFormat,
    /// The records.
    pub reader: FileTraceReader,
}

impl TraceFile {
    /// Whether the records carry real input-event numbers: `Some(false)` for Gadget text
    /// (whose `input_event` is the line's sequence number) and for binary traces whose
    /// metadata says `"input_events": false` (written by a conversion from text);
    /// `Some(true)` for binary traces written by the generator (metadata with the
    /// experiment, or `"input_events": true`); `None` when the file does not say.
    pub fn input_events(&self) -> Option<bool> {
        match &self.reader {
            AnyTraceReader::GadgetText(_) => Some(false),
            AnyTraceReader::Binary(r) => {
                let m = r.metadata()?;
                match m.get("input_events").and_then(serde_json::Value::as_bool) {
                    Some(b) => Some(b),
                    None => m.get("experiment").map(|_| true),
                }
            }
        }
    }

    /// The experiment text stored in a generated binary trace's metadata, if any.
    pub fn experiment_toml(&self) -> Option<&str> {
        match &self.reader {
            AnyTraceReader::Binary(r) => r.metadata()?.get("experiment")?.as_str(),
            AnyTraceReader::GadgetText(_) => None,
        }
    }
}

/// Maps the errors of a decompressor to ones that say which decompression failed.
struct Named<R> {
    inner: R,
    what: &'static str,
}

impl<R: Read> Read for Named<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner
            .read(buf)
            .map_err(|e| io::Error::new(e.kind(), format!("{} decompression: {e}", self.what)))
    }
}

/// Reads up to `n` bytes (fewer only at the end of the input).
fn head<R: Read>(r: &mut R, n: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Detects the compression and format of `input` (see the module docs) and opens it.
pub fn open_reader(input: Box<dyn Read + Send>) -> Result<TraceFile, TraceError> {
    let mut input = input;
    let first = head(&mut input, XZ_MAGIC.len())?;
    let compression = if first.starts_with(GZIP_MAGIC) {
        Compression::Gzip
    } else if first.starts_with(XZ_MAGIC) {
        Compression::Xz
    } else {
        Compression::None
    };
    let raw: Box<dyn Read + Send> = Box::new(Cursor::new(first).chain(input));
    let mut data: Box<dyn Read + Send> = match compression {
        Compression::None => raw,
        Compression::Gzip => Box::new(BufReader::with_capacity(
            1 << 20,
            Named { inner: flate2::read::MultiGzDecoder::new(raw), what: "gzip" },
        )),
        Compression::Xz => Box::new(BufReader::with_capacity(
            1 << 20,
            Named { inner: xz2::read::XzDecoder::new_multi_decoder(raw), what: "xz" },
        )),
    };
    let magic = head(&mut data, MAGIC.len())?;
    let format = if magic == MAGIC { TraceFormat::Binary } else { TraceFormat::GadgetText };
    let data: Box<dyn Read + Send> = Box::new(Cursor::new(magic).chain(data));
    Ok(TraceFile { compression, format, reader: AnyTraceReader::new(data, format)? })
}

/// Opens the trace file at `path` (see the module docs). Errors do not name the path;
/// callers add it.
pub fn open(path: &Path) -> Result<TraceFile, TraceError> {
    let f = File::open(path)?;
    open_reader(Box::new(BufReader::with_capacity(1 << 20, f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceWriter, TraceWriterOptions};
    use crate::workload::{OpKind, StateOp};
    use std::io::Write;

    fn text() -> Vec<u8> {
        b"1 put 0000000003 0000 gadget gadgetFile\n2 get 0000000003  gadget gadgetFile\n".to_vec()
    }

    fn binary() -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), TraceWriterOptions::default()).unwrap();
        w.write(0, &StateOp { kind: OpKind::Get, key: b"k".to_vec(), value: vec![] }).unwrap();
        w.finish().unwrap()
    }

    fn gz(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn xz(b: &[u8]) -> Vec<u8> {
        let mut e = xz2::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn open_bytes(b: Vec<u8>) -> Result<TraceFile, TraceError> {
        open_reader(Box::new(Cursor::new(b)))
    }

    #[test]
    fn detects_compression_then_format() {
        for (bytes, c, f, n) in [
            (text(), Compression::None, TraceFormat::GadgetText, 2),
            (gz(&text()), Compression::Gzip, TraceFormat::GadgetText, 2),
            (xz(&text()), Compression::Xz, TraceFormat::GadgetText, 2),
            (binary(), Compression::None, TraceFormat::Binary, 1),
            (gz(&binary()), Compression::Gzip, TraceFormat::Binary, 1),
            (xz(&binary()), Compression::Xz, TraceFormat::Binary, 1),
            (Vec::new(), Compression::None, TraceFormat::GadgetText, 0),
            (gz(b""), Compression::Gzip, TraceFormat::GadgetText, 0),
        ] {
            let t = open_bytes(bytes).unwrap();
            assert_eq!((t.compression, t.format), (c, f));
            let recs: Vec<_> = t.reader.collect::<Result<_, _>>().unwrap();
            assert_eq!(recs.len(), n, "{c:?} {f:?}");
        }
        // Two gzip members are one trace.
        let mut two = gz(b"1 get a\n");
        two.extend(gz(b"2 get b\n"));
        assert_eq!(open_bytes(two).unwrap().reader.count(), 2);
    }

    #[test]
    fn input_events_by_format_and_metadata() {
        assert_eq!(open_bytes(text()).unwrap().input_events(), Some(false));
        assert_eq!(open_bytes(binary()).unwrap().input_events(), None);
        for (meta, want) in [
            (serde_json::json!({"experiment": "seed = 1\n"}), Some(true)),
            (serde_json::json!({"input_events": false}), Some(false)),
        ] {
            let opts = TraceWriterOptions { metadata: Some(meta), ..Default::default() };
            let w = TraceWriter::new(Vec::new(), opts).unwrap();
            assert_eq!(open_bytes(w.finish().unwrap()).unwrap().input_events(), want);
        }
    }

    #[test]
    fn corrupt_streams_name_the_compression() {
        let long: String = (1..=2000).map(|i| format!("{i} get k{}\n", i % 7)).collect();
        let mut bad = gz(long.as_bytes());
        let n = bad.len();
        bad.truncate(n / 2);
        let t = open_bytes(bad).unwrap();
        let e = t.reader.collect::<Result<Vec<_>, _>>().unwrap_err().to_string();
        assert!(e.contains("gzip decompression"), "{e}");
        let mut bad = xz(&text());
        bad[8] ^= 0xFF;
        let e = match open_bytes(bad) {
            Err(e) => e.to_string(),
            Ok(t) => t.reader.collect::<Result<Vec<_>, _>>().unwrap_err().to_string(),
        };
        assert!(e.contains("xz decompression"), "{e}");
    }
}
