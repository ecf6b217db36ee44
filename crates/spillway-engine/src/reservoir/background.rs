//! The two background threads: the segment writer (compresses, checksums and appends
//! sealed chunks to segment files, rolls segments, fsyncs on request) and the chunk
//! reader (reads, verifies, decompresses and decodes chunks that cursors will need next).
//! Both go through the reservoir's [`Fs`] seam: one positioned write per chunk frame.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use spillway_store::io::{FileHandle, Fs};

use super::codec::EventCodec;
use super::segment::{self, SEGMENT_HEADER_LEN};
use super::{Compression, ReservoirError};
use crate::value::Event;

/// Work for the writer thread.
pub(crate) enum WriteJob {
    /// Append one sealed chunk (its raw payload) to the current segment.
    Chunk { first: u64, count: u32, raw: Arc<Vec<u8>> },
    /// fsync everything written so far; reply with (segment id, segment length) of the
    /// end of the last chunk written.
    Sync(Sender<Result<(u64, u64), ReservoirError>>),
}

/// Where a chunk was written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Written {
    pub seg: u64,
    pub seg_first: u64,
    pub offset: u64,
    pub frame_len: u32,
    pub compressed_len: u32,
}

/// Messages from the writer thread, in job order.
pub(crate) enum WriterMsg {
    Written(Written),
    Failed(ReservoirError),
}

/// Writer thread settings.
pub(crate) struct WriterConfig {
    pub fs: Arc<dyn Fs>,
    pub dir: PathBuf,
    pub fingerprint: u64,
    pub segment_bytes: u64,
    pub compression: Compression,
    /// (segment id, length) of the end of the last chunk on disk: reported by syncs
    /// before any new chunk is written.
    pub last: (u64, u64),
    /// Id of the next segment to create.
    pub next_id: u64,
}

struct OpenSegment {
    id: u64,
    first: u64,
    path: PathBuf,
    file: Box<dyn FileHandle>,
    len: u64,
}

struct Writer {
    cfg: WriterConfig,
    cur: Option<OpenSegment>,
    dir_dirty: bool,
}

impl Writer {
    fn write_chunk(
        &mut self,
        first: u64,
        count: u32,
        raw: &[u8],
    ) -> Result<Written, ReservoirError> {
        let (frame, compressed_len) = segment::build_frame(self.cfg.compression, first, count, raw)
            .map_err(|e| {
                ReservoirError::io("compress chunk", segment::segment_path(&self.cfg.dir, 0), e)
            })?;
        let frame_len = u32::try_from(frame.len()).map_err(|_| ReservoirError::InvalidEvent {
            index: first,
            what: "chunk frame longer than 4 GiB".into(),
        })?;
        let roll = match &self.cur {
            None => true,
            Some(s) => {
                s.len > SEGMENT_HEADER_LEN && s.len + frame.len() as u64 > self.cfg.segment_bytes
            }
        };
        if roll {
            if let Some(old) = self.cur.take() {
                old.file
                    .sync_data()
                    .map_err(|e| ReservoirError::io("fsync segment", &old.path, e))?;
            }
            let id = self.cfg.next_id;
            let path = segment::segment_path(&self.cfg.dir, id);
            let file = self
                .cfg
                .fs
                .open(&path, true)
                .map_err(|e| ReservoirError::io("create segment", &path, e))?;
            // A new segment id is never on disk (recovery deleted every later segment).
            if file.len().map_err(|e| ReservoirError::io("stat segment", &path, e))? != 0 {
                let e = io::Error::new(io::ErrorKind::AlreadyExists, "the segment already exists");
                return Err(ReservoirError::io("create segment", &path, e));
            }
            let h = segment::segment_header(self.cfg.fingerprint, id, first);
            segment::write_all_at(&*file, &h, 0)
                .map_err(|e| ReservoirError::io("write segment header", &path, e))?;
            self.cfg.next_id += 1;
            self.dir_dirty = true;
            self.cur = Some(OpenSegment { id, first, path, file, len: SEGMENT_HEADER_LEN });
        }
        let Some(s) = self.cur.as_mut() else {
            return Err(ReservoirError::Broken { what: "writer has no open segment".into() });
        };
        let offset = s.len;
        segment::write_all_at(&*s.file, &frame, offset)
            .map_err(|e| ReservoirError::io("write chunk", &s.path, e))?;
        s.len += frame.len() as u64;
        self.cfg.last = (s.id, s.len);
        Ok(Written { seg: s.id, seg_first: s.first, offset, frame_len, compressed_len })
    }

    fn sync(&mut self) -> Result<(u64, u64), ReservoirError> {
        if let Some(s) = &self.cur {
            s.file.sync_data().map_err(|e| ReservoirError::io("fsync segment", &s.path, e))?;
        }
        if self.dir_dirty {
            segment::sync_dir(&*self.cfg.fs, &self.cfg.dir)?;
            self.dir_dirty = false;
        }
        Ok(self.cfg.last)
    }
}

/// The writer thread's body. Stops at the first error: sets `failed`, sends the error on
/// `done` and returns (which closes `jobs`, so the owner's next send fails too).
pub(crate) fn writer_loop(
    cfg: WriterConfig,
    jobs: Receiver<WriteJob>,
    done: Sender<WriterMsg>,
    failed: Arc<AtomicBool>,
) {
    let mut w = Writer { cfg, cur: None, dir_dirty: false };
    for job in jobs {
        let r = match job {
            WriteJob::Chunk { first, count, raw } => w.write_chunk(first, count, &raw).map(|wr| {
                let _ = done.send(WriterMsg::Written(wr));
            }),
            WriteJob::Sync(reply) => match w.sync() {
                Ok(pos) => {
                    let _ = reply.send(Ok(pos));
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        if let Err(e) = r {
            failed.store(true, Ordering::Release);
            let _ = done.send(WriterMsg::Failed(e));
            return;
        }
    }
}

/// A request to read one chunk.
pub(crate) struct ReadJob {
    pub path: PathBuf,
    pub offset: u64,
    pub frame_len: u32,
    pub first: u64,
    pub count: u32,
    pub reply: Sender<Result<Arc<Vec<u8>>, ReservoirError>>,
}

/// The reader thread's body: serves read jobs until the channel closes.
pub(crate) fn reader_loop(fs: Arc<dyn Fs>, codec: Arc<EventCodec>, jobs: Receiver<ReadJob>) {
    for j in jobs {
        let r = read_now(&*fs, &codec, &j.path, j.offset, j.frame_len, j.first, j.count);
        let _ = j.reply.send(r);
    }
}

/// Reads, verifies and decompresses one chunk on the calling thread, and checks that its
/// payload decodes to exactly `count` events using exactly all its bytes. Returns the
/// decompressed payload, which cursors decode one event at a time as they step through
/// it: a cursor holds a chunk's encoded bytes (tens of bytes per event), not a decoded
/// `Vec<Event>` (hundreds), so a job with many windows (many cursors) stays small.
pub(crate) fn read_now(
    fs: &dyn Fs,
    codec: &EventCodec,
    path: &Path,
    offset: u64,
    frame_len: u32,
    first: u64,
    count: u32,
) -> Result<Arc<Vec<u8>>, ReservoirError> {
    let raw = segment::read_chunk(fs, path, offset, frame_len, first, count)?;
    let mut pos = 0usize;
    let mut prev = (0i64, 0u64);
    let mut ev = Event { time: 0, seq: 0, row: Vec::new() };
    for k in 0..u64::from(count) {
        codec.decode(&raw, &mut pos, &mut prev, &mut ev).map_err(|e| {
            ReservoirError::corrupt(
                path,
                offset,
                format!("chunk event {}: {} at payload byte {}", first + k, e.what, e.offset),
            )
        })?;
    }
    if pos != raw.len() {
        return Err(ReservoirError::corrupt(
            path,
            offset,
            format!(
                "chunk's {count} events end at payload byte {pos}, the payload has {} bytes",
                raw.len()
            ),
        ));
    }
    Ok(Arc::new(raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{DataType, Field, Schema, TimeUnit, Value};
    use spillway_store::io::StdFs;

    /// Frames whose checksums are right but whose payload does not decode as `count`
    /// events are still refused, naming file and frame offset.
    #[test]
    fn well_checksummed_but_undecodable_chunks_are_corrupt() {
        let schema = Schema::new(
            vec![
                Field { name: "ts".into(), ty: DataType::Int },
                Field { name: "b".into(), ty: DataType::Bool },
            ],
            "ts",
            TimeUnit::S,
        )
        .unwrap();
        let codec = EventCodec::new(&schema);
        let ev = Event { time: 5, seq: 1, row: vec![Value::Int(5), Value::Bool(true)] };
        let mut good = Vec::new();
        codec.encode(&ev, &mut (0, 0), &mut good).unwrap();
        let mut bad_bool = good.clone();
        *bad_bool.last_mut().unwrap() = 7;
        let mut trailing = good.clone();
        trailing.push(0);
        let tmp = tempfile::tempdir().unwrap();
        for (i, (raw, count, want)) in [
            (good.clone(), 1u32, None),
            (bad_bool, 1, Some("bool field 1 holds byte 7")),
            (trailing, 1, Some("end at payload byte")),
            (good, 2, Some("runs past the payload")),
        ]
        .into_iter()
        .enumerate()
        {
            let path = tmp.path().join(format!("seg{i}"));
            let (frame, _) = segment::build_frame(Compression::Lz4, 10, count, &raw).unwrap();
            let mut file = segment::segment_header(1, 0, 10).to_vec();
            file.extend_from_slice(&frame);
            std::fs::write(&path, &file).unwrap();
            let r = read_now(&StdFs, &codec, &path, 36, frame.len() as u32, 10, count);
            match (r, want) {
                (Ok(d), None) => {
                    let (mut pos, mut prev) = (0, (0, 0));
                    let mut got = Event { time: 0, seq: 0, row: Vec::new() };
                    codec.decode(&d, &mut pos, &mut prev, &mut got).unwrap();
                    assert_eq!(got, ev);
                }
                (Err(ReservoirError::Corrupt { path: p, offset: 36, what }), Some(w)) => {
                    assert_eq!(p, path);
                    assert!(what.contains(w), "{what}");
                }
                (r, w) => panic!("case {i}: {r:?}, wanted {w:?}"),
            }
        }
    }
}
