//! Spillway's binary trace format: the streaming [`TraceWriter`] (an [`OpSink`] holding
//! one block in memory) and the streaming [`TraceReader`]. The byte layout is specified
//! in the FORMAT section of the [`trace`](super) module.

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use super::{TraceError, TraceRecord};
use crate::workload::replay::OpBatch;
use crate::workload::{OpKind, OpSink, StateOp};

/// File magic.
pub const MAGIC: [u8; 8] = *b"SPWTRACE";
/// Format version written by this build, and the highest it reads.
pub const VERSION: u16 = 1;
/// Largest raw (uncompressed) block payload, and so the largest single record.
pub const MAX_BLOCK_BYTES: usize = 1 << 28;
/// Largest metadata JSON.
pub const MAX_METADATA_BYTES: usize = 1 << 26;

const FLAG_METADATA: u16 = 1;
const BLOCK_TAG: u8 = b'B';
const END_TAG: u8 = b'E';
const BLOCK_LZ4: u8 = 1;
const BLOCK_HEADER_LEN: usize = 34;
const END_LEN: usize = 26;
const KIND_MASK: u8 = 0x07;
const FILLER_BIT: u8 = 0x08;
const FILLER: u8 = b'0';

fn kind_code(kind: OpKind) -> u8 {
    match kind {
        OpKind::Get => 0,
        OpKind::Put => 1,
        OpKind::Merge => 2,
        OpKind::Delete => 3,
        OpKind::Scan => 4,
        OpKind::Seek => 5,
        OpKind::Next => 6,
    }
}

fn kind_from_code(code: u8) -> Option<OpKind> {
    Some(match code {
        0 => OpKind::Get,
        1 => OpKind::Put,
        2 => OpKind::Merge,
        3 => OpKind::Delete,
        4 => OpKind::Scan,
        5 => OpKind::Seek,
        6 => OpKind::Next,
        _ => return None,
    })
}

fn is_filler(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(|&b| b == FILLER)
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Options of a [`TraceWriter`].
#[derive(Clone, Debug)]
pub struct TraceWriterOptions {
    /// Target raw payload bytes per block (a block is written once it would exceed this;
    /// a single larger record gets a block of its own). Clamped to
    /// 1..=[`MAX_BLOCK_BYTES`]. Default 256 KiB.
    pub block_bytes: usize,
    /// Store a block lz4-compressed when that makes it smaller. Default true.
    pub compress: bool,
    /// JSON stored in the file header (e.g. the experiment text). Default none.
    pub metadata: Option<serde_json::Value>,
}

impl Default for TraceWriterOptions {
    fn default() -> Self {
        TraceWriterOptions { block_bytes: 256 * 1024, compress: true, metadata: None }
    }
}

/// Streaming binary trace writer. Memory is bounded by one block buffer. Call
/// [`TraceWriter::finish`] to write the last block and the end marker: a trace without
/// its end marker reads back as an error.
pub struct TraceWriter<W: Write> {
    out: W,
    opts: TraceWriterOptions,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    block_count: u32,
    block_records: u32,
    block_base: u64,
    last_event: u64,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the file header to `out` and returns the writer.
    pub fn new(mut out: W, mut opts: TraceWriterOptions) -> Result<Self, TraceError> {
        opts.block_bytes = opts.block_bytes.clamp(1, MAX_BLOCK_BYTES);
        let mut header = Vec::with_capacity(32);
        header.extend_from_slice(&MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        let meta = match &opts.metadata {
            Some(v) => serde_json::to_vec(v).map_err(|e| TraceError::Unrepresentable {
                record: 0,
                what: format!("metadata is not serializable JSON: {e}"),
            })?,
            None => Vec::new(),
        };
        if meta.len() > MAX_METADATA_BYTES {
            return Err(TraceError::Unrepresentable {
                record: 0,
                what: format!("metadata is {} bytes, above {MAX_METADATA_BYTES}", meta.len()),
            });
        }
        let flags = if opts.metadata.is_some() { FLAG_METADATA } else { 0 };
        header.extend_from_slice(&flags.to_le_bytes());
        header.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        header.extend_from_slice(&meta);
        let crc = crc32c::crc32c(&header);
        header.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&header)?;
        Ok(TraceWriter {
            out,
            buf: Vec::with_capacity(opts.block_bytes),
            opts,
            scratch: Vec::new(),
            block_count: 0,
            block_records: 0,
            block_base: 0,
            last_event: 0,
            records: 0,
        })
    }

    /// Number of records accepted so far.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Appends one record.
    pub fn write_record(&mut self, record: &TraceRecord) -> Result<(), TraceError> {
        self.write(record.input_event, &record.op)
    }

    /// Appends one op caused by input event `input_event` (which must not be below the
    /// previous record's).
    pub fn write(&mut self, input_event: u64, op: &StateOp) -> Result<(), TraceError> {
        if input_event < self.last_event {
            return Err(TraceError::InputEventDecreased {
                record: self.records,
                previous: self.last_event,
                got: input_event,
            });
        }
        let filler = is_filler(&op.value);
        let delta = input_event - self.last_event;
        let size = 1
            + varint_len(delta)
            + varint_len(op.key.len() as u64)
            + op.key.len()
            + varint_len(op.value.len() as u64)
            + if filler { 0 } else { op.value.len() };
        if size > MAX_BLOCK_BYTES || op.value.len() > MAX_BLOCK_BYTES {
            return Err(TraceError::Unrepresentable {
                record: self.records,
                what: format!(
                    "record of {} key and {} value bytes is above the block limit \
                     {MAX_BLOCK_BYTES}",
                    op.key.len(),
                    op.value.len()
                ),
            });
        }
        if self.block_records > 0
            && (self.buf.len() + size > self.opts.block_bytes || self.block_records == u32::MAX)
        {
            self.flush_block()?;
        }
        let mut kind = kind_code(op.kind);
        if filler {
            kind |= FILLER_BIT;
        }
        self.buf.push(kind);
        put_varint(&mut self.buf, delta);
        put_varint(&mut self.buf, op.key.len() as u64);
        self.buf.extend_from_slice(&op.key);
        put_varint(&mut self.buf, op.value.len() as u64);
        if !filler {
            self.buf.extend_from_slice(&op.value);
        }
        self.block_records += 1;
        self.last_event = input_event;
        self.records += 1;
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), TraceError> {
        if self.block_records == 0 {
            return Ok(());
        }
        if self.block_count == u32::MAX {
            return Err(TraceError::Unrepresentable {
                record: self.records,
                what: "trace exceeds 2^32 - 1 blocks".into(),
            });
        }
        let mut flags = 0u8;
        let mut payload: &[u8] = &self.buf;
        if self.opts.compress {
            self.scratch = lz4_flex::block::compress(&self.buf);
            if self.scratch.len() < self.buf.len() {
                flags |= BLOCK_LZ4;
                payload = &self.scratch;
            }
        }
        let mut h = [0u8; BLOCK_HEADER_LEN];
        h[0] = BLOCK_TAG;
        h[1] = flags;
        h[2..6].copy_from_slice(&self.block_count.to_le_bytes());
        h[6..10].copy_from_slice(&self.block_records.to_le_bytes());
        h[10..14].copy_from_slice(&(self.buf.len() as u32).to_le_bytes());
        h[14..18].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        h[18..26].copy_from_slice(&self.block_base.to_le_bytes());
        h[26..30].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        let hcrc = crc32c::crc32c(&h[..30]);
        h[30..34].copy_from_slice(&hcrc.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(payload)?;
        self.block_count += 1;
        self.block_records = 0;
        self.block_base = self.last_event;
        self.buf.clear();
        Ok(())
    }

    /// Writes the last block and the end marker, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.flush_block()?;
        let mut e = [0u8; END_LEN];
        e[0] = END_TAG;
        e[2..6].copy_from_slice(&self.block_count.to_le_bytes());
        e[6..14].copy_from_slice(&self.records.to_le_bytes());
        e[14..22].copy_from_slice(&self.last_event.to_le_bytes());
        let crc = crc32c::crc32c(&e[..22]);
        e[22..26].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&e)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> OpSink for TraceWriter<W> {
    type Error = TraceError;
    fn op(&mut self, input_event: u64, op: &StateOp) -> Result<(), TraceError> {
        self.write(input_event, op)
    }
}

/// Streaming binary trace reader: an iterator of records. After the first error it
/// returns `None`. It ends without error only after a valid end marker followed by the
/// end of the input.
pub struct TraceReader<R: Read> {
    inner: R,
    offset: u64,
    version: u16,
    metadata: Option<serde_json::Value>,
    pending: VecDeque<TraceRecord>,
    blocks: u32,
    records: u64,
    last_event: u64,
    done: bool,
}

fn corrupt(offset: u64, what: impl Into<String>) -> TraceError {
    TraceError::Corrupt { offset, what: what.into() }
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the file header.
    pub fn new(inner: R) -> Result<Self, TraceError> {
        let mut r = TraceReader {
            inner,
            offset: 0,
            version: 0,
            metadata: None,
            pending: VecDeque::new(),
            blocks: 0,
            records: 0,
            last_event: 0,
            done: false,
        };
        let mut fixed = [0u8; 16];
        let got = r.read_full(&mut fixed[..8])?;
        if got < 8 {
            if fixed[..got] == MAGIC[..got] {
                return Err(TraceError::Truncated { offset: r.offset, what: "file magic".into() });
            }
            return Err(TraceError::NotATrace);
        }
        if fixed[..8] != MAGIC {
            return Err(TraceError::NotATrace);
        }
        r.read_exact_or_truncated(&mut fixed[8..10], "format version")?;
        let version = u16::from_le_bytes([fixed[8], fixed[9]]);
        if version == 0 || version > VERSION {
            return Err(TraceError::UnsupportedVersion { found: version, supported: VERSION });
        }
        r.version = version;
        r.read_exact_or_truncated(&mut fixed[10..16], "file header")?;
        let flags = u16::from_le_bytes([fixed[10], fixed[11]]);
        if flags & !FLAG_METADATA != 0 {
            return Err(corrupt(10, format!("unknown header flags {flags:#06x}")));
        }
        let meta_len = u32::from_le_bytes([fixed[12], fixed[13], fixed[14], fixed[15]]) as usize;
        if meta_len > MAX_METADATA_BYTES {
            return Err(corrupt(
                12,
                format!("metadata length {meta_len} above {MAX_METADATA_BYTES}"),
            ));
        }
        if flags & FLAG_METADATA == 0 && meta_len != 0 {
            return Err(corrupt(12, "metadata length without the metadata flag"));
        }
        let mut meta = vec![0u8; meta_len];
        r.read_exact_or_truncated(&mut meta, "header metadata")?;
        let mut crc_bytes = [0u8; 4];
        let crc_off = r.offset;
        r.read_exact_or_truncated(&mut crc_bytes, "header checksum")?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&fixed), &meta);
        if crc != u32::from_le_bytes(crc_bytes) {
            return Err(corrupt(crc_off, "file header checksum mismatch"));
        }
        if flags & FLAG_METADATA != 0 {
            let v = serde_json::from_slice(&meta)
                .map_err(|e| corrupt(16, format!("header metadata is not JSON: {e}")))?;
            r.metadata = Some(v);
        }
        Ok(r)
    }

    /// Format version of the file.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Metadata JSON stored in the header, if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.metadata.as_ref()
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads until `buf` is full or EOF; returns bytes read.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => {
                    n += k;
                    self.offset += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError::Io(e)),
            }
        }
        Ok(n)
    }

    fn read_exact_or_truncated(&mut self, buf: &mut [u8], what: &str) -> Result<(), TraceError> {
        if self.read_full(buf)? < buf.len() {
            return Err(TraceError::Truncated { offset: self.offset, what: what.into() });
        }
        Ok(())
    }

    /// Decodes the next block's records straight into `batch` (no allocation per
    /// record) and returns whether more may follow (false after the valid end marker).
    /// Records the iterator has already decoded go first. The replay's reader thread
    /// uses this ([`crate::workload::replay::fill_from_trace`]).
    pub fn fill_batch(&mut self, batch: &mut OpBatch) -> Result<bool, TraceError> {
        if !self.pending.is_empty() {
            for r in self.pending.drain(..) {
                batch.push(r.input_event, r.op.kind, &r.op.key, &r.op.value);
            }
            return Ok(!self.done);
        }
        if self.done {
            return Ok(false);
        }
        match self.read_block(Some(batch)) {
            Ok(more) => {
                self.done = !more;
                Ok(more)
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Reads the next block (into `batch`, or else into `pending`) or the end marker.
    /// Returns false at a valid end.
    fn read_block(&mut self, batch: Option<&mut OpBatch>) -> Result<bool, TraceError> {
        let start = self.offset;
        let mut h = [0u8; BLOCK_HEADER_LEN];
        if self.read_full(&mut h[..1])? == 0 {
            return Err(TraceError::MissingEndMarker { offset: start, records: self.records });
        }
        match h[0] {
            BLOCK_TAG => {}
            END_TAG => {
                self.read_end(start)?;
                return Ok(false);
            }
            t => return Err(corrupt(start, format!("unknown block tag {t:#04x}"))),
        }
        self.read_exact_or_truncated(&mut h[1..], "block header")?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if crc32c::crc32c(&h[..30]) != u32_at(30) {
            return Err(corrupt(start, "block header checksum mismatch"));
        }
        let flags = h[1];
        let number = u32_at(2);
        let count = u32_at(6);
        let raw_len = u32_at(10) as usize;
        let stored_len = u32_at(14) as usize;
        let mut base = [0u8; 8];
        base.copy_from_slice(&h[18..26]);
        let base = u64::from_le_bytes(base);
        let payload_crc = u32_at(26);
        if flags & !BLOCK_LZ4 != 0 {
            return Err(corrupt(start, format!("unknown block flags {flags:#04x}")));
        }
        if number != self.blocks {
            return Err(corrupt(start, format!("block number {number}, expected {}", self.blocks)));
        }
        if base != self.last_event {
            return Err(corrupt(
                start,
                format!("block base input event {base}, expected {}", self.last_event),
            ));
        }
        if count == 0 || raw_len > MAX_BLOCK_BYTES || (count as usize) > raw_len {
            return Err(corrupt(
                start,
                format!("implausible block: {count} records in {raw_len} bytes"),
            ));
        }
        let lz4 = flags & BLOCK_LZ4 != 0;
        let max_stored =
            if lz4 { lz4_flex::block::get_maximum_output_size(raw_len) } else { raw_len };
        if stored_len > max_stored || (!lz4 && stored_len != raw_len) {
            return Err(corrupt(start, format!("stored length {stored_len} for raw {raw_len}")));
        }
        let mut stored = vec![0u8; stored_len];
        self.read_exact_or_truncated(&mut stored, "block payload")?;
        let payload_off = start + BLOCK_HEADER_LEN as u64;
        if crc32c::crc32c(&stored) != payload_crc {
            return Err(corrupt(payload_off, "block payload checksum mismatch"));
        }
        let raw = if lz4 {
            let mut raw = vec![0u8; raw_len];
            match lz4_flex::block::decompress_into(&stored, &mut raw) {
                Ok(n) if n == raw_len => raw,
                Ok(n) => {
                    return Err(corrupt(payload_off, format!("lz4 gave {n} bytes, not {raw_len}")))
                }
                Err(e) => return Err(corrupt(payload_off, format!("lz4: {e}"))),
            }
        } else {
            stored
        };
        match batch {
            Some(b) => {
                let mut filler = Vec::new();
                self.decode_block(&raw, count, payload_off, |ev, kind, key, value| {
                    let value = match value {
                        Ok(v) => v,
                        Err(n) => {
                            filler.resize(n, FILLER);
                            &filler[..n]
                        }
                    };
                    b.push(ev, kind, key, value);
                })?;
            }
            None => {
                let mut out = VecDeque::with_capacity(count as usize);
                self.decode_block(&raw, count, payload_off, |ev, kind, key, value| {
                    let value = match value {
                        Ok(v) => v.to_vec(),
                        Err(n) => vec![FILLER; n],
                    };
                    out.push_back(TraceRecord {
                        input_event: ev,
                        op: StateOp { kind, key: key.to_vec(), value },
                    });
                })?;
                self.pending = out;
            }
        }
        self.blocks += 1;
        Ok(true)
    }

    /// Checks and decodes the `count` records of a block's payload, calling `visit`
    /// with each one's input event, kind, key and value (`Err(n)`: a filler value of
    /// `n` bytes). Nothing is committed (event counters) unless the whole block is
    /// valid.
    fn decode_block(
        &mut self,
        raw: &[u8],
        count: u32,
        off: u64,
        mut visit: impl FnMut(u64, OpKind, &[u8], Result<&[u8], usize>),
    ) -> Result<(), TraceError> {
        let mut pos = 0usize;
        let mut last = self.last_event;
        let bad =
            |what: &str, pos: usize| corrupt(off, format!("record payload byte {pos}: {what}"));
        for _ in 0..count {
            let Some(&tag) = raw.get(pos) else {
                return Err(bad("fewer records than the block header says", pos));
            };
            pos += 1;
            let kind = kind_from_code(tag & KIND_MASK)
                .filter(|_| tag & !(KIND_MASK | FILLER_BIT) == 0)
                .ok_or_else(|| bad(&format!("bad op byte {tag:#04x}"), pos - 1))?;
            let delta = get_varint(raw, &mut pos).ok_or_else(|| bad("bad event varint", pos))?;
            last = last.checked_add(delta).ok_or_else(|| bad("input event overflows", pos))?;
            let klen = get_varint(raw, &mut pos).ok_or_else(|| bad("bad key length", pos))?;
            let key = take(raw, &mut pos, klen).ok_or_else(|| bad("key past block end", pos))?;
            let vlen = get_varint(raw, &mut pos).ok_or_else(|| bad("bad value length", pos))?;
            let value = if tag & FILLER_BIT != 0 {
                if vlen == 0 || vlen > MAX_BLOCK_BYTES as u64 {
                    return Err(bad("bad filler value length", pos));
                }
                Err(vlen as usize)
            } else {
                Ok(take(raw, &mut pos, vlen).ok_or_else(|| bad("value past block end", pos))?)
            };
            visit(last, kind, key, value);
        }
        if pos != raw.len() {
            return Err(bad("bytes after the last record", pos));
        }
        self.last_event = last;
        self.records += u64::from(count);
        Ok(())
    }

    fn read_end(&mut self, start: u64) -> Result<(), TraceError> {
        let mut e = [0u8; END_LEN];
        e[0] = END_TAG;
        self.read_exact_or_truncated(&mut e[1..], "end marker")?;
        let crc = u32::from_le_bytes([e[22], e[23], e[24], e[25]]);
        if crc32c::crc32c(&e[..22]) != crc {
            return Err(corrupt(start, "end marker checksum mismatch"));
        }
        let mut b8 = [0u8; 8];
        let blocks = u32::from_le_bytes([e[2], e[3], e[4], e[5]]);
        b8.copy_from_slice(&e[6..14]);
        let records = u64::from_le_bytes(b8);
        b8.copy_from_slice(&e[14..22]);
        let last = u64::from_le_bytes(b8);
        if e[1] != 0 || blocks != self.blocks || records != self.records || last != self.last_event
        {
            return Err(corrupt(
                start,
                format!(
                    "end marker says {blocks} blocks, {records} records, last event {last}; \
                     read {} blocks, {} records, last event {}",
                    self.blocks, self.records, self.last_event
                ),
            ));
        }
        let mut extra = [0u8; 1];
        if self.read_full(&mut extra)? != 0 {
            return Err(corrupt(self.offset - 1, "data after the end marker"));
        }
        Ok(())
    }
}

fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return None;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn take<'a>(buf: &'a [u8], pos: &mut usize, len: u64) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    let end = pos.checked_add(len)?;
    let v = buf.get(*pos..end)?;
    *pos = end;
    Some(v)
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Some(Ok(r));
            }
            if self.done {
                return None;
            }
            match self.read_block(None) {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn write_all(recs: &[TraceRecord], opts: TraceWriterOptions) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), opts).unwrap();
        for r in recs {
            w.write_record(r).unwrap();
        }
        w.finish().unwrap()
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<TraceRecord>, TraceError> {
        TraceReader::new(bytes)?.collect()
    }

    fn sample(n: u64) -> Vec<TraceRecord> {
        (0..n)
            .map(|i| TraceRecord {
                input_event: i / 2,
                op: StateOp {
                    kind: OpKind::ALL[(i % 7) as usize],
                    key: format!("key{}", i % 5).into_bytes(),
                    value: match i % 3 {
                        0 => vec![],
                        1 => vec![b'0'; (i % 11 + 1) as usize],
                        _ => vec![i as u8, 0, 255],
                    },
                },
            })
            .collect()
    }

    fn arb_records() -> impl Strategy<Value = Vec<TraceRecord>> {
        let rec = (
            0u64..4,
            0usize..7,
            proptest::collection::vec(any::<u8>(), 0..12),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..40),
                (0usize..50).prop_map(|n| vec![b'0'; n]),
                (0usize..5).prop_map(|n| {
                    let mut v = vec![b'0'; n];
                    v.push(b'1');
                    v
                }),
            ],
        );
        proptest::collection::vec(rec, 0..200).prop_map(|v| {
            let mut ev = 0u64;
            v.into_iter()
                .map(|(d, k, key, value)| {
                    ev += if d == 3 { 1 << 40 } else { d };
                    TraceRecord {
                        input_event: ev,
                        op: StateOp { kind: OpKind::ALL[k], key, value },
                    }
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn round_trip(recs in arb_records(), block in 1usize..600, compress in any::<bool>(),
                      meta in any::<bool>()) {
            let metadata = meta.then(|| serde_json::json!({"experiment": "a = 1\n", "n": 3}));
            let bytes = write_all(&recs, TraceWriterOptions {
                block_bytes: block, compress, metadata: metadata.clone(),
            });
            let r = TraceReader::new(&bytes[..]).unwrap();
            prop_assert_eq!(r.metadata().cloned(), metadata);
            let back: Vec<TraceRecord> = r.collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(back, recs);
        }
    }

    #[test]
    fn empty_trace_round_trips() {
        let bytes = write_all(&[], TraceWriterOptions::default());
        assert_eq!(read_all(&bytes).unwrap(), vec![]);
    }

    #[test]
    fn writer_rejects_decreasing_input_event() {
        let mut w = TraceWriter::new(Vec::new(), TraceWriterOptions::default()).unwrap();
        w.write(5, &StateOp::default()).unwrap();
        let e = w.write(4, &StateOp::default()).unwrap_err();
        assert!(matches!(e, TraceError::InputEventDecreased { record: 1, previous: 5, got: 4 }));
    }

    /// Every single-byte flip yields an error or the identical records; records returned
    /// before an error are a prefix of the original.
    #[test]
    fn byte_flips_never_give_different_records() {
        let recs = sample(40);
        for compress in [false, true] {
            let bytes = write_all(
                &recs,
                TraceWriterOptions {
                    block_bytes: 120,
                    compress,
                    metadata: Some(serde_json::json!({"x": 1})),
                },
            );
            for i in 0..bytes.len() {
                for mask in [0x01u8, 0x80, 0xff] {
                    let mut b = bytes.clone();
                    b[i] ^= mask;
                    let mut got = Vec::new();
                    let mut err = None;
                    match TraceReader::new(&b[..]) {
                        Err(e) => err = Some(e),
                        Ok(r) => {
                            for x in r {
                                match x {
                                    Ok(rec) => got.push(rec),
                                    Err(e) => {
                                        err = Some(e);
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    assert!(got.len() <= recs.len() && got[..] == recs[..got.len()], "byte {i}");
                    assert!(err.is_some() || got == recs, "byte {i} mask {mask:#x}");
                    assert!(err.is_some(), "flip of byte {i} went undetected");
                }
            }
        }
    }

    /// Every truncation is an error; exactly between blocks it is MissingEndMarker.
    #[test]
    fn truncation_at_every_offset_is_detected() {
        let recs = sample(60);
        let bytes = write_all(
            &recs,
            TraceWriterOptions { block_bytes: 100, compress: true, metadata: None },
        );
        // Block boundaries: walk the block headers.
        let mut boundaries = vec![];
        let mut off = 8 + 2 + 2 + 4 + 4;
        while bytes[off] == BLOCK_TAG {
            boundaries.push(off);
            let stored = u32::from_le_bytes(bytes[off + 14..off + 18].try_into().unwrap());
            off += BLOCK_HEADER_LEN + stored as usize;
        }
        boundaries.push(off);
        assert_eq!(off + END_LEN, bytes.len());
        assert!(boundaries.len() > 3, "test wants several blocks");
        for cut in 0..bytes.len() {
            let res = read_all(&bytes[..cut]);
            let err = res.expect_err(&format!("cut at {cut} read without error"));
            if boundaries.contains(&cut) {
                assert!(
                    matches!(err, TraceError::MissingEndMarker { offset, .. } if offset == cut as u64),
                    "cut {cut}: {err}"
                );
                assert!(err.to_string().contains("without its end marker"));
            } else if cut >= 8 {
                assert!(matches!(err, TraceError::Truncated { .. }), "cut {cut}: {err}");
            }
        }
        assert_eq!(read_all(&bytes).unwrap(), recs);
    }

    #[test]
    fn newer_version_is_a_clear_error() {
        let mut bytes = write_all(&sample(3), TraceWriterOptions::default());
        bytes[8] = 2;
        let e = read_all(&bytes).unwrap_err();
        assert!(matches!(e, TraceError::UnsupportedVersion { found: 2, supported: 1 }));
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(matches!(read_all(b"hello world, not a trace"), Err(TraceError::NotATrace)));
    }

    #[test]
    fn trailing_garbage_is_corrupt() {
        let mut bytes = write_all(&sample(3), TraceWriterOptions::default());
        bytes.push(0);
        assert!(matches!(read_all(&bytes), Err(TraceError::Corrupt { .. })));
    }

    #[test]
    fn filler_values_are_stored_by_length() {
        let recs: Vec<TraceRecord> = (0..100)
            .map(|i| TraceRecord {
                input_event: i,
                op: StateOp { kind: OpKind::Put, key: vec![1], value: vec![b'0'; 1000] },
            })
            .collect();
        let bytes = write_all(
            &recs,
            TraceWriterOptions { compress: false, ..TraceWriterOptions::default() },
        );
        assert!(bytes.len() < 100 * 10, "{} bytes", bytes.len());
        assert_eq!(read_all(&bytes).unwrap(), recs);
    }
}
