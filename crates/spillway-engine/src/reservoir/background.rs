//! The two background threads: the segment writer (compresses, checksums and appends
//! sealed chunks to segment files, rolls segments, fsyncs on request) and the chunk
//! reader (reads, verifies and decompresses chunks that cursors will need next).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use super::segment::{self, SEGMENT_HEADER_LEN};
use super::{Compression, ReservoirError};

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
    file: File,
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
                    .sync_all()
                    .map_err(|e| ReservoirError::io("fsync segment", &old.path, e))?;
            }
            let id = self.cfg.next_id;
            let path = segment::segment_path(&self.cfg.dir, id);
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| ReservoirError::io("create segment", &path, e))?;
            let h = segment::segment_header(self.cfg.fingerprint, id, first);
            file.write_all(&h).map_err(|e| ReservoirError::io("write segment header", &path, e))?;
            self.cfg.next_id += 1;
            self.dir_dirty = true;
            self.cur = Some(OpenSegment { id, first, path, file, len: SEGMENT_HEADER_LEN });
        }
        let Some(s) = self.cur.as_mut() else {
            return Err(ReservoirError::Broken { what: "writer has no open segment".into() });
        };
        s.file.write_all(&frame).map_err(|e| ReservoirError::io("write chunk", &s.path, e))?;
        let offset = s.len;
        s.len += frame.len() as u64;
        self.cfg.last = (s.id, s.len);
        Ok(Written { seg: s.id, seg_first: s.first, offset, frame_len, compressed_len })
    }

    fn sync(&mut self) -> Result<(u64, u64), ReservoirError> {
        if let Some(s) = &self.cur {
            s.file.sync_all().map_err(|e| ReservoirError::io("fsync segment", &s.path, e))?;
        }
        if self.dir_dirty {
            segment::sync_dir(&self.cfg.dir)?;
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
pub(crate) fn reader_loop(jobs: Receiver<ReadJob>) {
    for j in jobs {
        let r = segment::read_chunk(&j.path, j.offset, j.frame_len, j.first, j.count).map(Arc::new);
        let _ = j.reply.send(r);
    }
}

/// Reads one chunk on the calling thread (same checks as the reader thread).
pub(crate) fn read_now(
    path: &Path,
    offset: u64,
    frame_len: u32,
    first: u64,
    count: u32,
) -> Result<Arc<Vec<u8>>, ReservoirError> {
    segment::read_chunk(path, offset, frame_len, first, count).map(Arc::new)
}
