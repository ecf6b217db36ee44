//! The event reservoir: every input event, in (time, seq) order, kept in compressed chunks
//! in immutable on-disk segment files and read back by forward-only cursors (one per
//! window boundary).
//!
//! # Design
//!
//! [`Reservoir::append`] encodes an event into the *open chunk* (a byte buffer; no
//! allocation per event). When the chunk holds [`ReservoirOptions::chunk_events`] events
//! (or [`MAX_CHUNK_RAW_BYTES`] bytes) it is *sealed*: its bytes are handed to a background
//! writer thread that compresses, checksums and appends it to the current segment file,
//! rolling to a new segment when the next frame would push the file past
//! [`ReservoirOptions::segment_bytes`] (a segment always holds at least one chunk).
//! Sealed chunks stay readable from memory until the writer reports them written.
//!
//! **Backpressure**: at most [`MAX_PENDING_CHUNKS`] sealed chunks wait in the writer's
//! queue; when the writer falls further behind, `append` (the call that seals) blocks until
//! it catches up. Memory held for unwritten chunks is therefore bounded by about
//! `MAX_PENDING_CHUNKS + 2` chunks.
//!
//! **Cursors** hold their current chunk and one prefetched chunk, as encoded bytes. A
//! chunk on disk is read, verified, decompressed and checked to decode by a background
//! reader thread: when a cursor starts a chunk, it asks that thread for the next one if
//! the next one is on disk, or takes a reference to its bytes if it is still in memory
//! (only a cursor's first disk chunk is read on the calling thread). Every chunk (the
//! open chunk, read in place, sealed chunks not yet written and chunks read back) is
//! decoded one event at a time into a per-cursor [`Event`] that [`Reservoir::peek`] lends
//! out. A look-ahead ([`Reservoir::peek_ahead`], which the runtime uses to announce the
//! state its next passes will update) decodes events past the cursor once: the cursor
//! keeps them, at most the look-ahead's length, and `peek` hands them out in turn. So
//! resident memory is the open chunk, the unwritten sealed chunks, two encoded chunks and
//! at most one look-ahead of decoded events per cursor (tens of bytes per event, where a
//! decoded `Vec<Event>` took hundreds: a job with ten windows has ten exit cursors) and a
//! small index entry per live chunk (32 bytes per `chunk_events` events), whatever the
//! window length.
//!
//! **Errors** from the background threads surface on the next call (`append`, `sync`,
//! `peek`, `cursor`, `release_before`): the writer's error is returned once, after which
//! every call returns [`ReservoirError::Broken`]. A chunk read error (a checksum mismatch,
//! a short file) is returned by the `peek` that needs that chunk; no event of a chunk that
//! failed a check is ever returned.
//!
//! **Durability and recovery**: [`Reservoir::sync`] seals the open chunk (even if partial),
//! waits for the writer, fsyncs the current segment (older segments were fsynced when they
//! were rolled) and the directory, and returns a [`Position`]. [`Reservoir::recover`]
//! keeps exactly the events before that position: it truncates the position's segment to
//! the recorded length, deletes later segments, rebuilds the chunk index by scanning
//! chunk headers and then appends into a new segment.
//!
//! **Release**: [`Reservoir::release_before`] deletes whole segments whose events all lie
//! before an index, never the newest segment (so the writer's file is never deleted).
//!
//! **I/O seam**: every file operation (creating the directory, the schema file and
//! segments, chunk writes, fsyncs of files and of the directory, truncation, renames,
//! deletions, listing and reads) goes through the [`Fs`] of `spillway_store::io` that
//! [`ReservoirOptions::fs`] gives ([`StdFs`], the real file system, by default), as the
//! state stores' files do. Tests pass a `CrashFs` to build the files a power loss would
//! leave (`tests/powerloss_job.rs` cuts the power at every call of a job's checkpoint) or
//! a `FaultFs` to inject I/O errors. Each chunk frame is one positioned write at the
//! segment's end (one dynamic call per chunk, none per event); fsyncs are `fdatasync`.
//!
//! # FORMAT
//!
//! All integers are little-endian and fixed-width unless called varints. A reservoir
//! directory holds:
//!
//! * `schema.json`: `{"format_version": 1, "fingerprint": u64, "schema": Schema}` (serde
//!   JSON of [`Schema`]), written atomically at create time (`schema.json.tmp`, fsync,
//!   rename, fsync of the directory; the directory itself is created durably, its
//!   parent fsynced).
//! * `segment-NNNNNNNNNNNNNNNN.spr` (16 decimal digits = segment id, ascending, contiguous
//!   from the oldest live segment).
//!
//! Segment file = 36-byte header, then chunk frames back to back (nothing else):
//!
//! ```text
//! off len field
//!   0   4 magic "SPRS"
//!   4   2 format version (1)
//!   6   2 reserved (0)
//!   8   8 schema fingerprint: FNV-1a 64 of the canonical schema encoding
//!  16   8 segment id (equals the id in the file name)
//!  24   8 index of the segment's first event
//!  32   4 crc32c of bytes 0..32
//! ```
//!
//! Chunk frame = 36-byte header + compressed payload:
//!
//! ```text
//! off len field
//!   0   4 magic "SPRC"
//!   4   1 format version (1)
//!   5   1 codec: 1 = LZ4 (lz4_flex block format), 2 = zstd
//!   6   2 reserved (0)
//!   8   8 index of the chunk's first event
//!  16   4 event count (> 0)
//!  20   4 raw (uncompressed) payload length
//!  24   4 compressed payload length
//!  28   4 crc32c of the compressed payload
//!  32   4 crc32c of bytes 0..32
//!  36   n compressed payload
//! ```
//!
//! Raw payload = the chunk's events back to back, each (varints are LEB128, signed values
//! zigzag-encoded; deltas wrap in 64 bits; `prev` starts at 0 in every chunk):
//!
//! ```text
//! varint zigzag(time - prev.time)
//! varint zigzag(seq - prev.seq)
//! null bitmap: ceil(fields / 8) bytes, bit i (byte i/8, bit i%8) set = field i is NULL
//! per non-NULL field, in schema order:
//!   Int   varint zigzag(value)   (the time column: zigzag(value - time), usually 0)
//!   Float 8 bytes, IEEE bits
//!   Str   varint byte length + UTF-8 bytes
//!   Bool  1 byte, 0 or 1
//! ```
//!
//! Versioning: readers reject any other magic or version (a newer version is reported
//! as such). Checks on every read: header checksums, payload checksum, frame lengths
//! against the file length and the in-memory index, decompressed length against the
//! header, and decoding must consume exactly the raw payload for exactly `count` events.
//! Any mismatch is [`ReservoirError::Corrupt`] naming the file and byte offset.

mod background;
mod codec;
mod error;
mod segment;

pub use error::ReservoirError;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use spillway_store::io::{create_dir_durable, Fs, StdFs};

use crate::value::{Event, Schema, Value};

use background::{ReadJob, WriteJob, WriterConfig, WriterMsg, Written};
use codec::EventCodec;
use segment::{segment_path, SCHEMA_FILE};

/// Sealed chunks that may wait for the writer thread before `append` blocks.
pub const MAX_PENDING_CHUNKS: usize = 8;

/// A chunk is sealed early when its raw encoding reaches this many bytes.
pub const MAX_CHUNK_RAW_BYTES: usize = 16 << 20;

/// How chunk payloads are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// LZ4 (lz4_flex block format): fast, the default.
    #[default]
    Lz4,
    /// zstd at the given level.
    Zstd(i32),
}

/// Where and how a reservoir stores its events.
#[derive(Clone, Debug)]
pub struct ReservoirOptions {
    /// Directory of the reservoir (created if missing, durably: the parent of each
    /// directory created is fsynced).
    pub dir: PathBuf,
    /// The file system every file operation goes through (default [`StdFs`], the real
    /// one). Tests give a `spillway_store::io::CrashFs` to build the files a power loss
    /// would leave, or a `FaultFs` to inject I/O errors.
    pub fs: Arc<dyn Fs>,
    /// Chunk compression (default LZ4). Readers handle either codec regardless.
    pub compression: Compression,
    /// Events per chunk (default 4096, at least 1).
    pub chunk_events: usize,
    /// Segment files roll when the next chunk would make them larger than this
    /// (default 64 MiB); a segment always holds at least one chunk.
    pub segment_bytes: u64,
}

impl ReservoirOptions {
    /// Options with the defaults: LZ4, 4096 events per chunk, 64 MiB segments, the real
    /// file system.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ReservoirOptions {
            dir: dir.into(),
            fs: Arc::new(StdFs),
            compression: Compression::Lz4,
            chunk_events: 4096,
            segment_bytes: 64 << 20,
        }
    }

    /// Sets the compression.
    #[must_use]
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }

    /// Sets the events per chunk.
    #[must_use]
    pub fn chunk_events(mut self, n: usize) -> Self {
        self.chunk_events = n;
        self
    }

    /// Sets the segment size.
    #[must_use]
    pub fn segment_bytes(mut self, n: u64) -> Self {
        self.segment_bytes = n;
        self
    }

    /// Sends every file operation through `fs` (default [`StdFs`], the real file system).
    #[must_use]
    pub fn fs(mut self, fs: Arc<dyn Fs>) -> Self {
        self.fs = fs;
        self
    }

    fn validate(&self) -> Result<u32, ReservoirError> {
        let n = u32::try_from(self.chunk_events).ok().filter(|&n| n > 0).ok_or_else(|| {
            ReservoirError::InvalidOption {
                what: format!("chunk_events is {}, expected 1..={}", self.chunk_events, u32::MAX),
            }
        })?;
        if let Compression::Zstd(level) = self.compression {
            let r = zstd::compression_level_range();
            if !r.contains(&level) {
                return Err(ReservoirError::InvalidOption {
                    what: format!("zstd level {level} is outside {}..={}", r.start(), r.end()),
                });
            }
        }
        Ok(n)
    }
}

/// A durable point in the reservoir, returned by [`Reservoir::sync`] and given to
/// [`Reservoir::recover`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    /// Events durably in the reservoir (the index of the next append).
    pub events: u64,
    /// Segment holding the last of those events (when no chunk was ever written: the id
    /// of the next segment to create, with `segment_len` 0).
    pub segment: u64,
    /// Length in bytes of that segment up to the end of the last of those events.
    pub segment_len: u64,
}

/// A cursor of one reservoir.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CursorId(u32);

/// Counters and gauges of a reservoir (this process's work since create/recover, except
/// `events`, `segments_live` and `resident_bytes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReservoirStats {
    /// Events in the reservoir (= `len()`).
    pub events: u64,
    /// Chunks sealed.
    pub chunks_sealed: u64,
    /// Raw (uncompressed) payload bytes of the sealed chunks.
    pub bytes_raw: u64,
    /// Compressed payload bytes the writer reported written.
    pub bytes_compressed: u64,
    /// Segment files holding live chunks.
    pub segments_live: u64,
    /// Segment files deleted by `release_before`.
    pub segments_deleted: u64,
    /// Chunks read from disk by cursors (synchronous reads and prefetches).
    pub chunk_reads_from_disk: u64,
    /// Estimate of the bytes held in memory: open chunk, unwritten chunks, chunk index,
    /// cursor chunks (prefetches still in flight are not counted).
    pub resident_bytes: u64,
}

/// Marks an index entry whose chunk the writer has not reported written yet.
const UNWRITTEN: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
struct ChunkEntry {
    first: u64,
    count: u32,
    frame_len: u32,
    seg: u64,
    offset: u64,
}

#[derive(Clone, Copy, Debug)]
struct SegmentEntry {
    id: u64,
    first: u64,
}

enum Data {
    /// The open chunk (`Reservoir::open_buf`).
    Open,
    /// Raw bytes of a sealed chunk (held in memory, or read from disk and checked by the
    /// reader thread or by `load`), decoded one event at a time.
    Shared(Arc<Vec<u8>>),
}

struct Loaded {
    ordinal: u64,
    first: u64,
    /// Event count (for a sealed chunk; the open chunk ends at `len`).
    count: u32,
    data: Data,
    /// Byte offset of the next undecoded event.
    pos: usize,
    /// Index of the next undecoded event.
    next: u64,
    prev: (i64, u64),
}

enum Prefetch {
    None,
    Mem(u64, Arc<Vec<u8>>),
    Disk(u64, Receiver<Result<Arc<Vec<u8>>, ReservoirError>>),
}

struct Cursor {
    index: u64,
    cur: Option<Loaded>,
    prefetch: Prefetch,
    slot: Event,
    /// Index of the event in `slot`, `u64::MAX` when none.
    slot_index: u64,
    /// Events [`Reservoir::peek_ahead`] decoded past `slot`, in order, the first at index
    /// `slot_index + 1`; the chunk's decoder state (`Loaded::pos`, `next`) is after the
    /// last of them, so `peek` takes them from here instead of decoding them again.
    ahead: VecDeque<Event>,
    /// Decoded events no longer needed, kept for their allocations.
    spare: Vec<Event>,
}

impl Cursor {
    /// Forgets the decoded events (the cursor moved or lost its chunk).
    fn forget_ahead(&mut self) {
        self.spare.extend(self.ahead.drain(..));
    }
}

struct WriterHandle {
    jobs: SyncSender<WriteJob>,
    done: Receiver<WriterMsg>,
    failed: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

struct ReaderHandle {
    jobs: Sender<ReadJob>,
    thread: JoinHandle<()>,
}

/// Where a sealed chunk's bytes are.
enum Source {
    Mem(Arc<Vec<u8>>),
    Disk(ChunkEntry),
}

/// The event reservoir. See the module docs.
pub struct Reservoir {
    dir: PathBuf,
    fs: Arc<dyn Fs>,
    codec: Arc<EventCodec>,
    chunk_events: u32,
    open_buf: Vec<u8>,
    open_count: u32,
    open_prev: (i64, u64),
    len: u64,
    first_live: u64,
    /// Index of every live sealed chunk, oldest first; `chunks[0]` has ordinal `chunk_base`.
    chunks: VecDeque<ChunkEntry>,
    chunk_base: u64,
    /// Raw bytes of sealed chunks not yet reported written: ordinals `written_upto..`.
    pending: VecDeque<Arc<Vec<u8>>>,
    written_upto: u64,
    /// Live segments (those holding written chunks), oldest first.
    segments: VecDeque<SegmentEntry>,
    cursors: Vec<Cursor>,
    writer: Option<WriterHandle>,
    reader: Option<ReaderHandle>,
    broken: Option<String>,
    stats: ReservoirStats,
}

/// State a new `Reservoir` starts from.
struct Start {
    len: u64,
    first_live: u64,
    chunks: VecDeque<ChunkEntry>,
    segments: VecDeque<SegmentEntry>,
    writer: WriterConfig,
}

impl Reservoir {
    /// Creates an empty reservoir in `opts.dir` (created if missing). Refuses a
    /// directory that already holds a reservoir ([`ReservoirError::AlreadyExists`]).
    pub fn create(opts: ReservoirOptions, schema: &Schema) -> Result<Reservoir, ReservoirError> {
        let chunk_events = opts.validate()?;
        let dir = opts.dir.clone();
        let fs = opts.fs;
        create_dir_durable(&*fs, &dir)
            .map_err(|e| ReservoirError::io("create directory", &dir, e))?;
        let names = segment::list_dir(&*fs, &dir)?;
        if names.iter().any(|n| n == SCHEMA_FILE || segment::parse_segment_name(n).is_some()) {
            return Err(ReservoirError::AlreadyExists { path: dir });
        }
        segment::write_schema(&*fs, &dir, schema)?;
        let writer = WriterConfig {
            fs: Arc::clone(&fs),
            dir: dir.clone(),
            fingerprint: segment::fingerprint(schema),
            segment_bytes: opts.segment_bytes,
            compression: opts.compression,
            last: (0, 0),
            next_id: 0,
        };
        let start = Start {
            len: 0,
            first_live: 0,
            chunks: VecDeque::new(),
            segments: VecDeque::new(),
            writer,
        };
        Reservoir::start(dir, fs, schema, chunk_events, start)
    }

    /// Reopens a reservoir after a crash, a kill or a clean drop, keeping exactly the
    /// first `pos.events` events: the segment `pos.segment` is truncated to
    /// `pos.segment_len` and later segments are deleted, even if they hold synced events.
    /// The schema must equal the stored one ([`ReservoirError::SchemaMismatch`]).
    pub fn recover(
        opts: ReservoirOptions,
        schema: &Schema,
        pos: &Position,
    ) -> Result<Reservoir, ReservoirError> {
        let chunk_events = opts.validate()?;
        let dir = opts.dir.clone();
        let fs = opts.fs;
        segment::check_schema(&*fs, &dir, schema)?;
        let fp = segment::fingerprint(schema);
        let mut changed = false;
        let mut live = Vec::new();
        for id in segment::list_segments(&*fs, &dir)? {
            if id > pos.segment || (id == pos.segment && pos.segment_len == 0) {
                let path = segment_path(&dir, id);
                fs.remove_file(&path).map_err(|e| {
                    ReservoirError::io("delete segment past the recovery position", &path, e)
                })?;
                changed = true;
            } else {
                live.push(id);
            }
        }
        if pos.segment_len > 0 {
            let path = segment_path(&dir, pos.segment);
            if live.last() == Some(&pos.segment) {
                let f = segment::open_existing(&*fs, &path, "open segment")?;
                let len = f.len().map_err(|e| ReservoirError::io("stat segment", &path, e))?;
                if len < pos.segment_len {
                    return Err(ReservoirError::corrupt(
                        &path,
                        len,
                        format!(
                            "segment ends at byte {len}, the recovery position needs {} bytes",
                            pos.segment_len
                        ),
                    ));
                }
                if len > pos.segment_len {
                    f.set_len(pos.segment_len)
                        .and_then(|()| f.sync_data())
                        .map_err(|e| ReservoirError::io("truncate segment", &path, e))?;
                    changed = true;
                }
            } else if !live.is_empty() {
                return Err(ReservoirError::corrupt(
                    &path,
                    0,
                    format!(
                        "segment file is missing; the recovery position needs its first {} bytes",
                        pos.segment_len
                    ),
                ));
            }
            // else: every segment up to the position was released; nothing is live.
        }
        if changed {
            segment::sync_dir(&*fs, &dir)?;
        }
        for w in live.windows(2) {
            if w[1] != w[0] + 1 {
                return Err(ReservoirError::corrupt(
                    segment_path(&dir, w[0] + 1),
                    0,
                    format!("segment file is missing between segments {} and {}", w[0], w[1]),
                ));
            }
        }
        let mut chunks = VecDeque::new();
        let mut segments = VecDeque::new();
        let mut end: Option<u64> = None;
        for &id in &live {
            let path = segment_path(&dir, id);
            let s = segment::scan_segment(&*fs, &path, id, fp)?;
            if let Some(e) = end {
                if s.first != e {
                    return Err(ReservoirError::corrupt(
                        &path,
                        24,
                        format!(
                            "segment starts at event {}, the previous one ends at {e}",
                            s.first
                        ),
                    ));
                }
            }
            if s.chunks.is_empty() {
                return Err(ReservoirError::corrupt(
                    &path,
                    segment::SEGMENT_HEADER_LEN,
                    "segment holds no chunk",
                ));
            }
            let mut next = s.first;
            for c in &s.chunks {
                chunks.push_back(ChunkEntry {
                    first: c.first,
                    count: c.count,
                    frame_len: c.frame_len,
                    seg: id,
                    offset: c.offset,
                });
                next = c.first + u64::from(c.count);
            }
            segments.push_back(SegmentEntry { id, first: s.first });
            end = Some(next);
        }
        let first_live = segments.front().map_or(pos.events, |s| s.first);
        let end = end.unwrap_or(pos.events);
        if end != pos.events {
            let last = live.last().copied().unwrap_or(pos.segment);
            return Err(ReservoirError::corrupt(
                segment_path(&dir, last),
                pos.segment_len,
                format!(
                    "the segments hold events {first_live}..{end}, the recovery position says \
                     {} events",
                    pos.events
                ),
            ));
        }
        let writer = WriterConfig {
            fs: Arc::clone(&fs),
            dir: dir.clone(),
            fingerprint: fp,
            segment_bytes: opts.segment_bytes,
            compression: opts.compression,
            last: (pos.segment, pos.segment_len),
            next_id: if pos.segment_len > 0 { pos.segment + 1 } else { pos.segment },
        };
        let start = Start { len: pos.events, first_live, chunks, segments, writer };
        Reservoir::start(dir, fs, schema, chunk_events, start)
    }

    fn start(
        dir: PathBuf,
        fs: Arc<dyn Fs>,
        schema: &Schema,
        chunk_events: u32,
        s: Start,
    ) -> Result<Reservoir, ReservoirError> {
        let (jobs, jobs_rx) = mpsc::sync_channel(MAX_PENDING_CHUNKS);
        let (done_tx, done) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let f2 = Arc::clone(&failed);
        let cfg = s.writer;
        let thread = std::thread::Builder::new()
            .name("reservoir-writer".into())
            .spawn(move || background::writer_loop(cfg, jobs_rx, done_tx, f2))
            .map_err(|e| ReservoirError::io("start writer thread for", &dir, e))?;
        let writer = WriterHandle { jobs, done, failed, thread };
        let (rjobs, rjobs_rx) = mpsc::channel();
        let codec = Arc::new(EventCodec::new(schema));
        let rcodec = Arc::clone(&codec);
        let rfs = Arc::clone(&fs);
        let rthread = std::thread::Builder::new()
            .name("reservoir-reader".into())
            .spawn(move || background::reader_loop(rfs, rcodec, rjobs_rx))
            .map_err(|e| ReservoirError::io("start reader thread for", &dir, e))?;
        let written_upto = s.chunks.len() as u64;
        Ok(Reservoir {
            dir,
            fs,
            codec,
            chunk_events,
            open_buf: Vec::with_capacity(64 * 1024),
            open_count: 0,
            open_prev: (0, 0),
            len: s.len,
            first_live: s.first_live,
            chunks: s.chunks,
            chunk_base: 0,
            pending: VecDeque::new(),
            written_upto,
            segments: s.segments,
            cursors: Vec::new(),
            writer: Some(writer),
            reader: Some(ReaderHandle { jobs: rjobs, thread: rthread }),
            broken: None,
            stats: ReservoirStats::default(),
        })
    }

    /// Appends one event (the caller keeps (time, seq) order; the reservoir does not
    /// check it). Blocks only when the writer is more than [`MAX_PENDING_CHUNKS`] chunks
    /// behind. A row that does not fit the schema is [`ReservoirError::InvalidEvent`] and
    /// appends nothing.
    #[inline]
    pub fn append(&mut self, ev: &Event) -> Result<(), ReservoirError> {
        if self.broken.is_some() || self.writer_failed() {
            return Err(self.failure());
        }
        let before = self.open_buf.len();
        let prev = self.open_prev;
        self.codec
            .encode(ev, &mut self.open_prev, &mut self.open_buf)
            .map_err(|what| ReservoirError::InvalidEvent { index: self.len, what })?;
        if self.open_buf.len() > u32::MAX as usize {
            self.open_buf.truncate(before);
            self.open_prev = prev;
            return Err(ReservoirError::InvalidEvent {
                index: self.len,
                what: "the event does not fit in a chunk (4 GiB)".into(),
            });
        }
        self.open_count += 1;
        self.len += 1;
        if self.open_count >= self.chunk_events || self.open_buf.len() >= MAX_CHUNK_RAW_BYTES {
            self.seal()?;
        }
        Ok(())
    }

    /// Events appended so far (the index of the next append).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no event was ever appended (or recovered).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the oldest event still readable (events before it were released).
    pub fn first_live(&self) -> u64 {
        self.first_live
    }

    /// Makes every appended event durable (seals a partial open chunk, waits for the
    /// writer, fsyncs) and returns the position to put in a checkpoint.
    pub fn sync(&mut self) -> Result<Position, ReservoirError> {
        self.check()?;
        self.seal()?;
        let (tx, rx) = mpsc::channel();
        let sent = match &self.writer {
            Some(w) => w.jobs.send(WriteJob::Sync(tx)).is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.writer_gone());
        }
        let (segment, segment_len) = match rx.recv() {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                self.broken = Some(e.to_string());
                return Err(e);
            }
            Err(_) => return Err(self.writer_gone()),
        };
        self.drain_writer()?;
        Ok(Position { events: self.len, segment, segment_len })
    }

    /// A new cursor whose next event is index `from` (`first_live() <= from <= len()`).
    pub fn cursor(&mut self, from: u64) -> Result<CursorId, ReservoirError> {
        self.check()?;
        if from > self.len {
            return Err(ReservoirError::OutOfRange { index: from, len: self.len });
        }
        if from < self.first_live {
            return Err(ReservoirError::Released { index: from, first_live: self.first_live });
        }
        let id = u32::try_from(self.cursors.len())
            .map_err(|_| ReservoirError::InvalidOption { what: "more than 2^32 cursors".into() })?;
        self.cursors.push(Cursor {
            index: from,
            cur: None,
            prefetch: Prefetch::None,
            slot: Event { time: 0, seq: 0, row: Vec::new() },
            slot_index: u64::MAX,
            ahead: VecDeque::new(),
            spare: Vec::new(),
        });
        Ok(CursorId(id))
    }

    /// The event at the cursor, without advancing; `None` when the cursor is at `len()`.
    pub fn peek(&mut self, c: CursorId) -> Result<Option<&Event>, ReservoirError> {
        self.check()?;
        let ci = c.0 as usize;
        let Some(cur) = self.cursors.get(ci) else {
            return Err(ReservoirError::UnknownCursor { id: c.0 });
        };
        let index = cur.index;
        if cur.slot_index == index {
            return Ok(Some(&self.cursors[ci].slot));
        }
        let slot_index = cur.slot_index;
        if !cur.ahead.is_empty() {
            let cur = &mut self.cursors[ci];
            // `ahead` starts right after `slot`: step over the events the cursor passed.
            match index.checked_sub(slot_index.wrapping_add(1)) {
                Some(skip) if slot_index != u64::MAX && skip < cur.ahead.len() as u64 => {
                    for _ in 0..skip {
                        if let Some(e) = cur.ahead.pop_front() {
                            cur.spare.push(e);
                        }
                    }
                    if let Some(mut e) = cur.ahead.pop_front() {
                        std::mem::swap(&mut e, &mut cur.slot);
                        cur.spare.push(e);
                        cur.slot_index = index;
                        return Ok(Some(&self.cursors[ci].slot));
                    }
                }
                // Past them (the chunk's decoder state goes on from there) or back before
                // them (the chunk is loaded again): decode as usual.
                _ => cur.forget_ahead(),
            }
        }
        if index >= self.len {
            return Ok(None);
        }
        if index < self.first_live {
            return Err(ReservoirError::Released { index, first_live: self.first_live });
        }
        let cur = &self.cursors[ci];
        let covered = cur.cur.as_ref().is_some_and(|l| {
            let end = match l.data {
                Data::Open => self.len,
                Data::Shared(_) => l.first + u64::from(l.count),
            };
            l.first <= index && index < end && l.next <= index
        });
        if !covered {
            self.load(ci, index)?;
        }
        let Reservoir { cursors, open_buf, codec, .. } = self;
        let cur = &mut cursors[ci];
        let Some(l) = cur.cur.as_mut() else {
            return Err(ReservoirError::Broken { what: "cursor lost its chunk".into() });
        };
        let buf: &[u8] = match &l.data {
            Data::Open => open_buf,
            Data::Shared(a) => a,
        };
        let mut failure = None;
        while l.next <= index {
            if let Err(e) = codec.decode(buf, &mut l.pos, &mut l.prev, &mut cur.slot) {
                failure = Some(chunk_corrupt(
                    l.ordinal,
                    format!("event {}: {} at payload byte {}", l.next, e.what, e.offset),
                ));
                break;
            }
            l.next += 1;
        }
        if failure.is_none()
            && matches!(l.data, Data::Shared(_))
            && l.next == l.first + u64::from(l.count)
            && l.pos != buf.len()
        {
            failure = Some(chunk_corrupt(
                l.ordinal,
                format!(
                    "{} events end at payload byte {}, the payload has {} bytes",
                    l.count,
                    l.pos,
                    buf.len()
                ),
            ));
        }
        if let Some(e) = failure {
            // Forget the chunk: a retry starts it over (and fails the same way).
            cur.cur = None;
            cur.slot_index = u64::MAX;
            cur.forget_ahead();
            return Err(e);
        }
        cur.slot_index = index;
        Ok(Some(&cur.slot))
    }

    /// Visits up to `n` events from the cursor on (the one [`peek`](Self::peek) returns
    /// first) without moving it, as far as the chunk the cursor stands in reaches, until
    /// `f` returns false. For look-ahead hints (the runtime announces the state the
    /// events leaving its windows will update): it never reads another chunk, and a
    /// decoding error just ends the visit (the cursor reports it when it gets there).
    /// The cursor keeps the events it decoded (at most `n`), and `peek` returns them as
    /// it gets there without decoding them again.
    pub fn peek_ahead(
        &mut self,
        c: CursorId,
        n: usize,
        f: &mut dyn FnMut(&Event) -> bool,
    ) -> Result<(), ReservoirError> {
        let Some(first) = self.peek(c)? else { return Ok(()) };
        if n == 0 || !f(first) {
            return Ok(());
        }
        let len = self.len;
        let Reservoir { cursors, open_buf, codec, .. } = self;
        let cur = &mut cursors[c.0 as usize];
        let index = cur.index;
        let end = index.saturating_add(n as u64);
        // The events decoded ahead already, then on from the chunk's decoder state (which
        // they leave after them), as far as the chunk reaches.
        for e in cur.ahead.iter().take(n - 1) {
            if !f(e) {
                return Ok(());
            }
        }
        let Some(l) = cur.cur.as_mut() else { return Ok(()) };
        let chunk_end = match &l.data {
            Data::Open => len,
            Data::Shared(_) => l.first + u64::from(l.count),
        };
        let end = chunk_end.min(end);
        let buf: &[u8] = match &l.data {
            Data::Shared(a) => a,
            Data::Open => open_buf,
        };
        while l.next < end {
            let mut e =
                cur.spare.pop().unwrap_or_else(|| Event { time: 0, seq: 0, row: Vec::new() });
            let (mut pos, mut prev) = (l.pos, l.prev);
            // A sealed chunk's last event must end its payload (as `peek` checks).
            let sealed_end = l.next + 1 == chunk_end && matches!(l.data, Data::Shared(_));
            if codec.decode(buf, &mut pos, &mut prev, &mut e).is_err()
                || (sealed_end && pos != buf.len())
            {
                // Left for `peek` to decode again and report.
                cur.spare.push(e);
                break;
            }
            (l.pos, l.prev) = (pos, prev);
            l.next += 1;
            let go = f(&e);
            cur.ahead.push_back(e);
            if !go {
                break;
            }
        }
        Ok(())
    }

    /// Steps the cursor past the event `peek` returned (a no-op at `len()` or for an
    /// unknown cursor).
    pub fn advance(&mut self, c: CursorId) {
        let len = self.len;
        if let Some(cur) = self.cursors.get_mut(c.0 as usize) {
            if cur.index < len {
                cur.index += 1;
            }
        }
    }

    /// Drops the chunks the cursor holds (its current and prefetched one) without moving
    /// it: for a cursor that only marks a position between reads (a one-off scan, a
    /// retention floor). A later [`peek`](Self::peek) reads its chunk again. A no-op for
    /// an unknown cursor.
    pub fn park(&mut self, c: CursorId) {
        if let Some(cur) = self.cursors.get_mut(c.0 as usize) {
            cur.cur = None;
            cur.prefetch = Prefetch::None;
            cur.slot_index = u64::MAX;
            cur.forget_ahead();
        }
    }

    /// Index of the cursor's next event (0 for an unknown cursor).
    pub fn cursor_index(&self, c: CursorId) -> u64 {
        self.cursors.get(c.0 as usize).map_or(0, |cur| cur.index)
    }

    /// Deletes the segments whose events all lie before `index` (never the newest
    /// segment). Cursors must not be before `index` afterwards (`peek` then returns
    /// [`ReservoirError::Released`] for events that were deleted).
    pub fn release_before(&mut self, index: u64) -> Result<(), ReservoirError> {
        self.check()?;
        self.drain_writer()?;
        while self.segments.len() >= 2 && self.segments[1].first <= index {
            let Some(s) = self.segments.pop_front() else { break };
            let path = segment_path(&self.dir, s.id);
            match self.fs.remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ReservoirError::io("delete released segment", &path, e)),
            }
            // One deletion durable before the next: a crash never leaves a gap.
            segment::sync_dir(&*self.fs, &self.dir)?;
            self.stats.segments_deleted += 1;
        }
        if let Some(front) = self.segments.front().copied() {
            while self.chunks.front().is_some_and(|e| e.seg != UNWRITTEN && e.seg < front.id) {
                self.chunks.pop_front();
                self.chunk_base += 1;
            }
            self.first_live = self.first_live.max(front.first);
        }
        Ok(())
    }

    /// Counters and the resident-memory estimate.
    pub fn stats(&self) -> ReservoirStats {
        let mut s = self.stats.clone();
        s.events = self.len;
        s.segments_live = self.segments.len() as u64;
        let mut b = self.open_buf.capacity()
            + self.pending.iter().map(|p| p.capacity()).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<ChunkEntry>()
            + self.segments.capacity() * std::mem::size_of::<SegmentEntry>()
            + self.cursors.capacity() * std::mem::size_of::<Cursor>();
        for c in &self.cursors {
            if let Some(l) = &c.cur {
                match &l.data {
                    // Chunks still in `pending` are counted there.
                    Data::Shared(a) if l.ordinal < self.written_upto => b += a.capacity(),
                    _ => {}
                }
            }
            match &c.prefetch {
                Prefetch::Mem(ord, a) if *ord < self.written_upto => b += a.capacity(),
                // A chunk read from disk comes back about as large as the current one.
                Prefetch::Disk(..) => {
                    if let Some(Loaded { data: Data::Shared(a), .. }) = &c.cur {
                        b += a.capacity();
                    }
                }
                _ => {}
            }
            b += c.slot.row.capacity() * std::mem::size_of::<Value>();
            for v in &c.slot.row {
                if let Value::Str(s) = v {
                    b += s.len();
                }
            }
        }
        s.resident_bytes = b as u64;
        s
    }

    // ----- internals -------------------------------------------------------------------

    fn writer_failed(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.failed.load(Ordering::Acquire))
    }

    /// Fails if the reservoir is broken or the writer reported an error.
    fn check(&mut self) -> Result<(), ReservoirError> {
        if self.broken.is_some() || self.writer_failed() {
            return Err(self.failure());
        }
        Ok(())
    }

    /// The error to return when broken or the writer failed.
    fn failure(&mut self) -> ReservoirError {
        if let Some(b) = &self.broken {
            return ReservoirError::Broken { what: b.clone() };
        }
        match self.drain_writer() {
            Err(e) => e,
            Ok(()) => self.writer_gone(),
        }
    }

    /// Applies every message the writer sent so far.
    fn drain_writer(&mut self) -> Result<(), ReservoirError> {
        loop {
            let msg = match &self.writer {
                Some(w) => w.done.try_recv(),
                None => Err(TryRecvError::Disconnected),
            };
            match msg {
                Ok(WriterMsg::Written(w)) => self.apply_written(w),
                Ok(WriterMsg::Failed(e)) => {
                    self.broken = Some(e.to_string());
                    return Err(e);
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => {
                    let what = "the writer thread stopped".to_string();
                    self.broken = Some(what.clone());
                    return Err(ReservoirError::Broken { what });
                }
            }
        }
    }

    /// The writer thread is gone: wait for its last message and return its error.
    fn writer_gone(&mut self) -> ReservoirError {
        if let Some(b) = &self.broken {
            return ReservoirError::Broken { what: b.clone() };
        }
        loop {
            let msg = match &self.writer {
                Some(w) => w.done.recv().ok(),
                None => None,
            };
            match msg {
                Some(WriterMsg::Written(w)) => self.apply_written(w),
                Some(WriterMsg::Failed(e)) => {
                    self.broken = Some(e.to_string());
                    return e;
                }
                None => {
                    let what = "the writer thread stopped".to_string();
                    self.broken = Some(what.clone());
                    return ReservoirError::Broken { what };
                }
            }
        }
    }

    fn apply_written(&mut self, w: Written) {
        let i = (self.written_upto - self.chunk_base) as usize;
        if let Some(e) = self.chunks.get_mut(i) {
            e.seg = w.seg;
            e.offset = w.offset;
            e.frame_len = w.frame_len;
        }
        self.pending.pop_front();
        self.written_upto += 1;
        self.stats.bytes_compressed += u64::from(w.compressed_len);
        if self.segments.back().map(|s| s.id) != Some(w.seg) {
            self.segments.push_back(SegmentEntry { id: w.seg, first: w.seg_first });
        }
    }

    /// Seals the open chunk (if it holds events) and hands it to the writer.
    fn seal(&mut self) -> Result<(), ReservoirError> {
        if self.open_count == 0 {
            return Ok(());
        }
        let count = self.open_count;
        let first = self.len - u64::from(count);
        let cap = self.open_buf.capacity();
        let raw = Arc::new(std::mem::replace(&mut self.open_buf, Vec::with_capacity(cap)));
        let ordinal = self.chunk_base + self.chunks.len() as u64;
        self.chunks.push_back(ChunkEntry { first, count, frame_len: 0, seg: UNWRITTEN, offset: 0 });
        self.pending.push_back(Arc::clone(&raw));
        for c in &mut self.cursors {
            if let Some(l) = &mut c.cur {
                if l.ordinal == ordinal {
                    l.data = Data::Shared(Arc::clone(&raw));
                    l.count = count;
                }
            }
        }
        self.open_count = 0;
        self.open_prev = (0, 0);
        self.stats.chunks_sealed += 1;
        self.stats.bytes_raw += raw.len() as u64;
        self.drain_writer()?;
        let sent = match &self.writer {
            Some(w) => w.jobs.send(WriteJob::Chunk { first, count, raw }).is_ok(),
            None => false,
        };
        if !sent {
            return Err(self.writer_gone());
        }
        Ok(())
    }

    fn source(&self, ordinal: u64) -> Option<Source> {
        if ordinal >= self.written_upto {
            let a = self.pending.get((ordinal - self.written_upto) as usize)?;
            Some(Source::Mem(Arc::clone(a)))
        } else {
            let e = self.chunks.get(ordinal.checked_sub(self.chunk_base)? as usize)?;
            Some(Source::Disk(*e))
        }
    }

    /// Points cursor `ci` at the chunk holding `index` and starts the prefetch of the
    /// chunk after it.
    fn load(&mut self, ci: usize, index: u64) -> Result<(), ReservoirError> {
        self.drain_writer()?;
        let open_first = self.len - u64::from(self.open_count);
        let open_ordinal = self.chunk_base + self.chunks.len() as u64;
        let (ordinal, first, count) = if index >= open_first {
            (open_ordinal, open_first, self.open_count)
        } else {
            let i = self.chunks.partition_point(|e| e.first <= index);
            let Some(e) = i.checked_sub(1).and_then(|i| self.chunks.get(i)) else {
                return Err(ReservoirError::Released { index, first_live: self.first_live });
            };
            (self.chunk_base + (i - 1) as u64, e.first, e.count)
        };
        let prefetched = std::mem::replace(&mut self.cursors[ci].prefetch, Prefetch::None);
        let data = if ordinal == open_ordinal {
            Data::Open
        } else {
            match prefetched {
                Prefetch::Mem(o, a) if o == ordinal => Data::Shared(a),
                Prefetch::Disk(o, rx) if o == ordinal => match rx.recv() {
                    Ok(Ok(d)) => Data::Shared(d),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => {
                        return Err(ReservoirError::Broken {
                            what: "the reader thread stopped".into(),
                        })
                    }
                },
                _ => match self.source(ordinal) {
                    Some(Source::Mem(a)) => Data::Shared(a),
                    Some(Source::Disk(e)) => {
                        self.stats.chunk_reads_from_disk += 1;
                        let path = segment_path(&self.dir, e.seg);
                        let d = background::read_now(
                            &*self.fs,
                            &self.codec,
                            &path,
                            e.offset,
                            e.frame_len,
                            e.first,
                            e.count,
                        )?;
                        Data::Shared(d)
                    }
                    None => {
                        return Err(ReservoirError::Released { index, first_live: self.first_live })
                    }
                },
            }
        };
        let next = ordinal + 1;
        let prefetch = if next < open_ordinal { self.request(next) } else { Prefetch::None };
        let cur = &mut self.cursors[ci];
        cur.prefetch = prefetch;
        cur.cur = Some(Loaded { ordinal, first, count, data, pos: 0, next: first, prev: (0, 0) });
        Ok(())
    }

    /// Starts fetching chunk `ordinal` for a cursor.
    fn request(&mut self, ordinal: u64) -> Prefetch {
        match self.source(ordinal) {
            Some(Source::Mem(a)) => Prefetch::Mem(ordinal, a),
            Some(Source::Disk(e)) => {
                let Some(r) = &self.reader else { return Prefetch::None };
                let (tx, rx) = mpsc::channel();
                let job = ReadJob {
                    path: segment_path(&self.dir, e.seg),
                    offset: e.offset,
                    frame_len: e.frame_len,
                    first: e.first,
                    count: e.count,
                    reply: tx,
                };
                if r.jobs.send(job).is_err() {
                    return Prefetch::None;
                }
                self.stats.chunk_reads_from_disk += 1;
                Prefetch::Disk(ordinal, rx)
            }
            None => Prefetch::None,
        }
    }
}

/// A chunk held in memory failed to decode (chunks from disk were checked by
/// `background::read_now`, which names file and offset, before any event of theirs is
/// returned).
fn chunk_corrupt(ordinal: u64, what: String) -> ReservoirError {
    ReservoirError::corrupt("<memory>", 0, format!("in-memory chunk {ordinal}, {what}"))
}

impl Drop for Reservoir {
    fn drop(&mut self) {
        if let Some(w) = self.writer.take() {
            let WriterHandle { jobs, done, thread, .. } = w;
            drop(jobs);
            let _ = thread.join();
            drop(done);
        }
        if let Some(r) = self.reader.take() {
            let ReaderHandle { jobs, thread } = r;
            drop(jobs);
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for Reservoir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservoir")
            .field("dir", &self.dir)
            .field("len", &self.len)
            .field("first_live", &self.first_live)
            .field("chunks", &self.chunks.len())
            .field("segments", &self.segments.len())
            .field("cursors", &self.cursors.len())
            .finish()
    }
}
