//! Key-access traces: text, one decimal `u64` key per line, each line a read; plain or
//! gzip-compressed (recognized by the gzip magic bytes `1f 8b`, whatever the file's
//! name). The format of the cache2k and LIRS traces measured in docs/RESULTS.md, and of
//! Caffeine's `lirs:` traces, after conversion.

use std::collections::HashSet;
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flate2::read::MultiGzDecoder;

use super::list::KeyHasher;
use super::SimError;

/// The first two bytes of a gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
/// How much of a bad line an error shows.
const MAX_SHOWN: usize = 60;

/// A trace read into memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// The file's name (without its directory), as results name the trace.
    pub name: String,
    /// The accessed keys in order.
    pub keys: Vec<u64>,
    /// How many distinct keys the trace has (what percentage capacities refer to).
    pub distinct: usize,
}

impl Trace {
    /// Reads the trace at `path`, plain or gzip.
    pub fn read(path: &Path) -> Result<Trace, SimError> {
        let f = File::open(path)
            .map_err(|source| SimError::Open { path: path.to_path_buf(), source })?;
        let name = path
            .file_name()
            .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Trace::from_reader(name, path, f)
    }

    /// Reads a trace from `reader` (plain or gzip); `path` is only for errors.
    pub fn from_reader(name: String, path: &Path, reader: impl Read) -> Result<Trace, SimError> {
        let mut raw = BufReader::with_capacity(1 << 16, reader);
        let head = raw.fill_buf().map_err(|source| read_error(path, 1, source))?;
        let (keys, distinct) = if head.starts_with(&GZIP_MAGIC) {
            parse(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(raw)), path)?
        } else {
            parse(raw, path)?
        };
        if keys.is_empty() {
            return Err(SimError::EmptyTrace { path: path.to_path_buf() });
        }
        Ok(Trace { name, keys, distinct })
    }
}

fn read_error(path: &Path, line: u64, source: std::io::Error) -> SimError {
    SimError::Read { path: path.to_path_buf(), line, source }
}

/// The keys of every line and the number of distinct ones.
fn parse(mut r: impl BufRead, path: &Path) -> Result<(Vec<u64>, usize), SimError> {
    let mut keys = Vec::new();
    let mut seen: HashSet<u64, BuildHasherDefault<KeyHasher>> = HashSet::default();
    let mut buf = Vec::with_capacity(32);
    let mut line = 0u64;
    loop {
        buf.clear();
        line += 1;
        let n = r.read_until(b'\n', &mut buf).map_err(|e| read_error(path, line, e))?;
        if n == 0 {
            break;
        }
        let text = buf.trim_ascii();
        let key = std::str::from_utf8(text).ok().and_then(|s| s.parse::<u64>().ok());
        let key = match key {
            Some(k) if text.first().is_some_and(u8::is_ascii_digit) => k,
            _ => return Err(bad_line(path, line, text)),
        };
        keys.push(key);
        seen.insert(key);
    }
    Ok((keys, seen.len()))
}

fn bad_line(path: &Path, line: u64, text: &[u8]) -> SimError {
    let text = String::from_utf8_lossy(text);
    let text = if text.chars().count() > MAX_SHOWN {
        format!("{}...", text.chars().take(MAX_SHOWN).collect::<String>())
    } else if text.is_empty() {
        "(empty line)".to_string()
    } else {
        text.into_owned()
    };
    SimError::BadLine { path: PathBuf::from(path), line, text }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(text: &str) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    fn read(bytes: &[u8]) -> Result<Trace, SimError> {
        Trace::from_reader("t".into(), Path::new("t.keys"), bytes)
    }

    #[test]
    fn plain_and_gzip_read_the_same() {
        let text = "1\n2\r\n18446744073709551615\n1\n2";
        let plain = read(text.as_bytes()).unwrap();
        assert_eq!(plain.keys, vec![1, 2, u64::MAX, 1, 2]);
        assert_eq!(plain.distinct, 3);
        assert_eq!(read(&gzip(text)).unwrap(), plain);
    }

    #[test]
    fn bad_lines_name_file_line_and_text() {
        for (text, line, shown) in [
            ("1\n2\nabc\n", 3, "`abc`"),
            ("1\n-4\n", 2, "`-4`"),
            ("1\n+4\n", 2, "`+4`"),
            ("18446744073709551616\n", 1, "`18446744073709551616`"),
            ("1\n\n2\n", 2, "(empty line)"),
        ] {
            let e = read(text.as_bytes()).unwrap_err().to_string();
            assert!(e.starts_with(&format!("t.keys:{line}: ")), "{e}");
            assert!(e.contains(shown), "{e}");
            let e = read(&gzip(text)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("t.keys:{line}: ")), "{e}");
        }
    }

    #[test]
    fn empty_and_corrupt_traces_are_errors() {
        let e = read(b"").unwrap_err().to_string();
        assert!(e.contains("t.keys: the trace is empty"), "{e}");
        assert!(matches!(read(&gzip("")), Err(SimError::EmptyTrace { .. })));
        let mut bad = gzip("1\n2\n3\n");
        let n = bad.len();
        bad[n - 6] ^= 0xff; // the CRC
        assert!(matches!(read(&bad), Err(SimError::Read { .. })));
        let e = Trace::read(Path::new("/nonexistent/x.keys.gz")).unwrap_err().to_string();
        assert_eq!(e, "cannot open trace /nonexistent/x.keys.gz");
    }
}
