//! Segment files and chunk frames on disk: header layouts, building a frame, reading and
//! verifying one chunk, scanning a segment's chunk headers, the schema file and the schema
//! fingerprint. Byte layouts are in the FORMAT section of the module docs. Every file
//! operation goes through the [`Fs`] seam of `spillway_store::io`.

use std::io;
use std::path::{Path, PathBuf};

use spillway_store::bytes::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use spillway_store::io::{FileHandle, Fs};

use crate::value::{DataType, Schema, TimeUnit};

use super::codec;
use super::{Compression, ReservoirError};

/// Segment header length in bytes.
pub(crate) const SEGMENT_HEADER_LEN: u64 = 36;
/// Chunk frame header length in bytes.
pub(crate) const FRAME_HEADER_LEN: usize = 36;
/// Segment file magic.
pub(crate) const SEGMENT_MAGIC: &[u8; 4] = b"SPRS";
/// Chunk frame magic.
pub(crate) const FRAME_MAGIC: &[u8; 4] = b"SPRC";
/// Newest segment format version this build writes and reads.
pub(crate) const SEGMENT_VERSION: u16 = 1;
/// Newest chunk frame format version this build writes and reads.
pub(crate) const FRAME_VERSION: u8 = 1;
/// Name of the schema file in a reservoir directory.
pub(crate) const SCHEMA_FILE: &str = "schema.json";
/// Version written into the schema file.
pub(crate) const SCHEMA_FILE_VERSION: u32 = 1;

/// Path of segment `id` in `dir`.
pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("segment-{id:016}.spr"))
}

/// The segment id of a file name, if it names a segment.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("segment-")?.strip_suffix(".spr")?;
    if digits.len() != 16 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Names of the entries of `dir`.
pub(crate) fn list_dir(fs: &dyn Fs, dir: &Path) -> Result<Vec<String>, ReservoirError> {
    fs.list_dir(dir).map_err(|e| ReservoirError::io("list directory", dir, e))
}

/// Ids of the segment files in `dir`, ascending.
pub(crate) fn list_segments(fs: &dyn Fs, dir: &Path) -> Result<Vec<u64>, ReservoirError> {
    let mut ids: Vec<u64> =
        list_dir(fs, dir)?.iter().filter_map(|n| parse_segment_name(n)).collect();
    ids.sort_unstable();
    Ok(ids)
}

/// fsyncs a directory so that created, renamed and removed entries are durable.
pub(crate) fn sync_dir(fs: &dyn Fs, dir: &Path) -> Result<(), ReservoirError> {
    fs.sync_dir(dir).map_err(|e| ReservoirError::io("fsync directory", dir, e))
}

/// Opens an existing file for positioned reads (and writes).
pub(crate) fn open_existing(
    fs: &dyn Fs,
    path: &Path,
    op: &'static str,
) -> Result<Box<dyn FileHandle>, ReservoirError> {
    fs.open(path, false).map_err(|e| ReservoirError::io(op, path, e))
}

/// Reads exactly `buf.len()` bytes at `offset` through one or more positioned reads;
/// [`io::ErrorKind::UnexpectedEof`] if the file ends first.
pub(crate) fn read_exact_at(f: &dyn FileHandle, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ends after {done} of {} bytes", buf.len()),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` at `offset` through one or more positioned writes (one, unless
/// the device writes short); [`io::ErrorKind::WriteZero`] if a write transfers nothing.
pub(crate) fn write_all_at(f: &dyn FileHandle, buf: &[u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match f.write_at(&buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("the device took {done} of {} bytes", buf.len()),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A 64-bit FNV-1a hash of a canonical encoding of the schema (field names and types,
/// time column, time unit). Stored in every segment header.
pub(crate) fn fingerprint(schema: &Schema) -> u64 {
    let mut b = Vec::new();
    b.extend_from_slice(b"spillway-reservoir-schema-v1");
    b.extend_from_slice(&(schema.fields().len() as u64).to_le_bytes());
    for f in schema.fields() {
        b.extend_from_slice(&(f.name.len() as u64).to_le_bytes());
        b.extend_from_slice(f.name.as_bytes());
        b.push(match f.ty {
            DataType::Int => 1,
            DataType::Float => 2,
            DataType::Str => 3,
            DataType::Bool => 4,
        });
    }
    b.extend_from_slice(&(schema.time_index() as u64).to_le_bytes());
    b.push(match schema.time_unit() {
        TimeUnit::S => 1,
        TimeUnit::Ms => 2,
        TimeUnit::Us => 3,
        TimeUnit::Ns => 4,
    });
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in &b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Contents of the schema file.
#[derive(serde::Serialize, serde::Deserialize)]
struct SchemaFile {
    format_version: u32,
    fingerprint: u64,
    schema: Schema,
}

/// Writes the schema file atomically (temporary file, fsync, rename, fsync directory).
pub(crate) fn write_schema(fs: &dyn Fs, dir: &Path, schema: &Schema) -> Result<(), ReservoirError> {
    let body = SchemaFile {
        format_version: SCHEMA_FILE_VERSION,
        fingerprint: fingerprint(schema),
        schema: schema.clone(),
    };
    let text = serde_json::to_vec_pretty(&body).map_err(|e| {
        ReservoirError::io("encode schema", dir.join(SCHEMA_FILE), io::Error::other(e))
    })?;
    let tmp = dir.join(format!("{SCHEMA_FILE}.tmp"));
    {
        let f = fs.open(&tmp, true).map_err(|e| ReservoirError::io("create", &tmp, e))?;
        // A create interrupted before its rename may have left a longer one.
        f.set_len(0).map_err(|e| ReservoirError::io("truncate", &tmp, e))?;
        write_all_at(&*f, &text, 0).map_err(|e| ReservoirError::io("write", &tmp, e))?;
        f.sync_data().map_err(|e| ReservoirError::io("fsync", &tmp, e))?;
    }
    let dst = dir.join(SCHEMA_FILE);
    fs.rename(&tmp, &dst).map_err(|e| ReservoirError::io("rename schema file", &dst, e))?;
    sync_dir(fs, dir)
}

/// Reads the schema file and checks it equals `schema`.
pub(crate) fn check_schema(fs: &dyn Fs, dir: &Path, schema: &Schema) -> Result<(), ReservoirError> {
    let path = dir.join(SCHEMA_FILE);
    let f = match fs.open(&path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ReservoirError::NotAReservoir {
                path: dir.to_path_buf(),
                reason: format!("it has no `{SCHEMA_FILE}`"),
            })
        }
        Err(e) => return Err(ReservoirError::io("open", path, e)),
    };
    let len = f.len().map_err(|e| ReservoirError::io("stat", &path, e))?;
    let len = usize::try_from(len)
        .map_err(|_| ReservoirError::corrupt(&path, 0, format!("schema file of {len} bytes")))?;
    let mut text = vec![0u8; len];
    read_exact_at(&*f, &mut text, 0).map_err(|e| ReservoirError::io("read", &path, e))?;
    let stored: SchemaFile = serde_json::from_slice(&text).map_err(|e| {
        let offset = line_col_offset(&text, e.line(), e.column());
        ReservoirError::corrupt(&path, offset, format!("bad schema file ({e})"))
    })?;
    if stored.format_version != SCHEMA_FILE_VERSION {
        return Err(ReservoirError::corrupt(
            &path,
            0,
            format!(
                "schema file format version {} (this build reads {SCHEMA_FILE_VERSION})",
                stored.format_version
            ),
        ));
    }
    if stored.fingerprint != fingerprint(&stored.schema) {
        return Err(ReservoirError::corrupt(
            &path,
            0,
            "stored fingerprint does not match the stored schema",
        ));
    }
    if &stored.schema != schema {
        return Err(ReservoirError::SchemaMismatch {
            path,
            what: describe_diff(&stored.schema, schema),
        });
    }
    Ok(())
}

fn line_col_offset(text: &[u8], line: usize, col: usize) -> u64 {
    let mut off = 0usize;
    for (i, l) in text.split(|&b| b == b'\n').enumerate() {
        if i + 1 == line {
            return (off + col.saturating_sub(1)) as u64;
        }
        off += l.len() + 1;
    }
    off as u64
}

fn describe_schema(s: &Schema) -> String {
    let cols: Vec<String> = s.fields().iter().map(|f| format!("{} {}", f.name, f.ty)).collect();
    format!(
        "({}) time column `{}` in {}",
        cols.join(", "),
        s.fields()[s.time_index()].name,
        s.time_unit().name()
    )
}

fn describe_diff(stored: &Schema, given: &Schema) -> String {
    format!("stored {}, given {}", describe_schema(stored), describe_schema(given))
}

/// The 36-byte segment header.
pub(crate) fn segment_header(fingerprint: u64, id: u64, first: u64) -> [u8; 36] {
    let mut h = [0u8; 36];
    h[0..4].copy_from_slice(SEGMENT_MAGIC);
    put_u16(&mut h, 4, SEGMENT_VERSION);
    put_u64(&mut h, 8, fingerprint);
    put_u64(&mut h, 16, id);
    put_u64(&mut h, 24, first);
    let crc = crc32c::crc32c(&h[0..32]);
    put_u32(&mut h, 32, crc);
    h
}

/// Builds one chunk frame (header + compressed payload). Returns the frame and the
/// compressed payload length.
pub(crate) fn build_frame(
    compression: Compression,
    first: u64,
    count: u32,
    raw: &[u8],
) -> io::Result<(Vec<u8>, u32)> {
    let (codec, payload) = codec::compress(compression, raw)?;
    let raw_len = u32::try_from(raw.len()).map_err(io::Error::other)?;
    let clen = u32::try_from(payload.len()).map_err(io::Error::other)?;
    let mut f = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    f.extend_from_slice(FRAME_MAGIC);
    f.push(FRAME_VERSION);
    f.push(codec);
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&first.to_le_bytes());
    f.extend_from_slice(&count.to_le_bytes());
    f.extend_from_slice(&raw_len.to_le_bytes());
    f.extend_from_slice(&clen.to_le_bytes());
    f.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let hcrc = crc32c::crc32c(&f[0..32]);
    f.extend_from_slice(&hcrc.to_le_bytes());
    f.extend_from_slice(&payload);
    Ok((f, clen))
}

/// A parsed, checksum-verified chunk frame header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FrameHeader {
    pub codec: u8,
    pub first: u64,
    pub count: u32,
    pub raw_len: u32,
    pub compressed_len: u32,
    pub payload_crc: u32,
}

impl FrameHeader {
    /// Frame length (header + payload) in bytes.
    pub(crate) fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.compressed_len)
    }
}

/// Parses and verifies a frame header read from `path` at `offset`.
pub(crate) fn parse_frame_header(
    h: &[u8],
    path: &Path,
    offset: u64,
) -> Result<FrameHeader, ReservoirError> {
    if h.len() < FRAME_HEADER_LEN {
        return Err(ReservoirError::corrupt(path, offset, "chunk header is cut short"));
    }
    if &h[0..4] != FRAME_MAGIC {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!("chunk magic {:02x?}, expected {:02x?} (\"SPRC\")", &h[0..4], FRAME_MAGIC),
        ));
    }
    let stored = u32_at(h, 32);
    let crc = crc32c::crc32c(&h[0..32]);
    if stored != crc {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!("chunk header checksum {stored:#010x}, computed {crc:#010x}"),
        ));
    }
    if h[4] != FRAME_VERSION {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!("chunk format version {} (this build reads {FRAME_VERSION})", h[4]),
        ));
    }
    let fh = FrameHeader {
        codec: h[5],
        first: u64_at(h, 8),
        count: u32_at(h, 16),
        raw_len: u32_at(h, 20),
        compressed_len: u32_at(h, 24),
        payload_crc: u32_at(h, 28),
    };
    if fh.count == 0 {
        return Err(ReservoirError::corrupt(path, offset, "chunk header says 0 events"));
    }
    Ok(fh)
}

/// Reads `buf.len()` bytes at `offset`; a short file is `Corrupt` naming the offset.
fn read_at(
    f: &dyn FileHandle,
    path: &Path,
    buf: &mut [u8],
    offset: u64,
    what: &str,
) -> Result<(), ReservoirError> {
    match read_exact_at(f, buf, offset) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            let len = f.len().unwrap_or(0);
            Err(ReservoirError::corrupt(
                path,
                offset,
                format!("{what} needs {} bytes here but the file ends at byte {len}", buf.len()),
            ))
        }
        Err(e) => Err(ReservoirError::io("read", path, e)),
    }
}

/// Reads and verifies the chunk at `offset` of segment file `path`, expected (from the
/// in-memory index) to hold `count` events starting at `first`, and returns its raw
/// (decompressed) payload.
pub(crate) fn read_chunk(
    fs: &dyn Fs,
    path: &Path,
    offset: u64,
    frame_len: u32,
    first: u64,
    count: u32,
) -> Result<Vec<u8>, ReservoirError> {
    let f = open_existing(fs, path, "open segment")?;
    let mut buf = vec![0u8; frame_len as usize];
    read_at(&*f, path, &mut buf, offset, "chunk frame")?;
    let h = parse_frame_header(&buf, path, offset)?;
    if h.frame_len() != u64::from(frame_len) || h.first != first || h.count != count {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!(
                "chunk header says events {}..+{} in a {}-byte frame, the index expects \
                 {first}..+{count} in {frame_len} bytes",
                h.first,
                h.count,
                h.frame_len()
            ),
        ));
    }
    let payload = &buf[FRAME_HEADER_LEN..];
    let crc = crc32c::crc32c(payload);
    if crc != h.payload_crc {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!("chunk payload checksum {:#010x}, computed {crc:#010x}", h.payload_crc),
        ));
    }
    codec::decompress(h.codec, payload, h.raw_len as usize)
        .map_err(|what| ReservoirError::corrupt(path, offset, what))
}

/// One chunk found by [`scan_segment`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedChunk {
    pub first: u64,
    pub count: u32,
    pub offset: u64,
    pub frame_len: u32,
}

/// What [`scan_segment`] found.
pub(crate) struct ScannedSegment {
    /// First event index from the segment header.
    pub first: u64,
    /// Chunks in file order.
    pub chunks: Vec<ScannedChunk>,
}

/// Reads and verifies a segment's header and every chunk header (payloads are verified
/// when read). The frames must tile the file exactly.
pub(crate) fn scan_segment(
    fs: &dyn Fs,
    path: &Path,
    id: u64,
    fingerprint: u64,
) -> Result<ScannedSegment, ReservoirError> {
    let f = open_existing(fs, path, "open segment")?;
    let len = f.len().map_err(|e| ReservoirError::io("stat segment", path, e))?;
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    read_at(&*f, path, &mut h, 0, "segment header")?;
    if &h[0..4] != SEGMENT_MAGIC {
        return Err(ReservoirError::corrupt(
            path,
            0,
            format!("segment magic {:02x?}, expected {:02x?} (\"SPRS\")", &h[0..4], SEGMENT_MAGIC),
        ));
    }
    let stored = u32_at(&h, 32);
    let crc = crc32c::crc32c(&h[0..32]);
    if stored != crc {
        return Err(ReservoirError::corrupt(
            path,
            0,
            format!("segment header checksum {stored:#010x}, computed {crc:#010x}"),
        ));
    }
    let version = u16_at(&h, 4);
    if version != SEGMENT_VERSION {
        return Err(ReservoirError::corrupt(
            path,
            4,
            format!("segment format version {version} (this build reads {SEGMENT_VERSION})"),
        ));
    }
    let fp = u64_at(&h, 8);
    if fp != fingerprint {
        return Err(ReservoirError::corrupt(
            path,
            8,
            format!("segment schema fingerprint {fp:#018x}, the schema's is {fingerprint:#018x}"),
        ));
    }
    let hid = u64_at(&h, 16);
    if hid != id {
        return Err(ReservoirError::corrupt(
            path,
            16,
            format!("segment header says id {hid}, the file name says {id}"),
        ));
    }
    let first = u64_at(&h, 24);
    let mut chunks = Vec::new();
    let mut offset = SEGMENT_HEADER_LEN;
    let mut next = first;
    let mut fh = [0u8; FRAME_HEADER_LEN];
    while offset < len {
        read_at(&*f, path, &mut fh, offset, "chunk header")?;
        let c = parse_frame_header(&fh, path, offset)?;
        if c.first != next {
            return Err(ReservoirError::corrupt(
                path,
                offset,
                format!("chunk starts at event {}, expected {next}", c.first),
            ));
        }
        if offset + c.frame_len() > len {
            return Err(ReservoirError::corrupt(
                path,
                offset,
                format!(
                    "chunk frame of {} bytes runs past the end of the file at byte {len}",
                    c.frame_len()
                ),
            ));
        }
        let frame_len = u32::try_from(c.frame_len())
            .map_err(|_| ReservoirError::corrupt(path, offset, "chunk frame longer than 4 GiB"))?;
        chunks.push(ScannedChunk { first: c.first, count: c.count, offset, frame_len });
        next += u64::from(c.count);
        offset += c.frame_len();
    }
    Ok(ScannedSegment { first, chunks })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// The segment and chunk headers of the FORMAT section, byte for byte: segments
    /// written by earlier builds must still read.
    #[test]
    fn header_bytes_are_pinned() {
        let h = segment_header(0x1122_3344_5566_7788, 5, 1000);
        assert_eq!(
            hex(&h),
            "535052530100000088776655443322110500000000000000e8030000000000005f2abc24"
        );
        let mut f = Vec::new();
        f.extend_from_slice(FRAME_MAGIC);
        f.extend_from_slice(&[FRAME_VERSION, 1, 0, 0]);
        f.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        for v in [7u32, 300, 120, 0xdead_beef] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&f);
        f.extend_from_slice(&crc.to_le_bytes());
        let fh = parse_frame_header(&f, Path::new("x"), 0).unwrap();
        assert_eq!(
            (fh.codec, fh.first, fh.count, fh.raw_len, fh.compressed_len, fh.payload_crc),
            (1, 0x0102_0304_0506_0708, 7, 300, 120, 0xdead_beef)
        );
        let (frame, clen) = build_frame(Compression::Lz4, 9, 2, b"").unwrap();
        assert_eq!(frame.len(), FRAME_HEADER_LEN + clen as usize);
        let back = parse_frame_header(&frame, Path::new("x"), 0).unwrap();
        assert_eq!((back.first, back.count, back.raw_len, back.compressed_len), (9, 2, 0, clen));
    }
}
