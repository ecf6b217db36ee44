//! The event reservoir (stub: in memory; replaced by the reservoir module).
#![allow(missing_docs)]
use crate::value::{Event, Schema};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug)]
pub enum Compression {
    Lz4,
    Zstd(i32),
}
#[derive(Clone, Debug)]
pub struct ReservoirOptions {
    pub dir: PathBuf,
    pub compression: Compression,
    pub chunk_events: usize,
    pub segment_bytes: u64,
}
impl ReservoirOptions {
    pub fn compression(mut self, c: Compression) -> Self {
        self.compression = c;
        self
    }
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ReservoirOptions {
            dir: dir.into(),
            compression: Compression::Lz4,
            chunk_events: 4096,
            segment_bytes: 64 << 20,
        }
    }
}
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Position {
    pub events: u64,
}
#[derive(Clone, Copy, Debug)]
pub struct CursorId(usize);
#[derive(Debug)]
pub struct ReservoirError(String);
impl std::fmt::Display for ReservoirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ReservoirError {}
#[derive(Clone, Debug, Default)]
pub struct ReservoirStats {
    pub events: u64,
    pub bytes_compressed: u64,
    pub bytes_raw: u64,
}
pub struct Reservoir {
    events: Vec<Event>,
    cursors: Vec<u64>,
}
impl Reservoir {
    pub fn create(_o: ReservoirOptions, _s: &Schema) -> Result<Reservoir, ReservoirError> {
        Ok(Reservoir { events: vec![], cursors: vec![] })
    }
    pub fn recover(
        _o: ReservoirOptions,
        _s: &Schema,
        _p: &Position,
    ) -> Result<Reservoir, ReservoirError> {
        Err(ReservoirError("stub".into()))
    }
    pub fn append(&mut self, ev: &Event) -> Result<(), ReservoirError> {
        self.events.push(ev.clone());
        Ok(())
    }
    pub fn len(&self) -> u64 {
        self.events.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
    pub fn sync(&mut self) -> Result<Position, ReservoirError> {
        Ok(Position { events: self.len() })
    }
    pub fn cursor(&mut self, from: u64) -> Result<CursorId, ReservoirError> {
        self.cursors.push(from);
        Ok(CursorId(self.cursors.len() - 1))
    }
    pub fn peek(&mut self, c: CursorId) -> Result<Option<&Event>, ReservoirError> {
        Ok(self.events.get(self.cursors[c.0] as usize))
    }
    pub fn advance(&mut self, c: CursorId) {
        self.cursors[c.0] += 1;
    }
    pub fn cursor_index(&self, c: CursorId) -> u64 {
        self.cursors[c.0]
    }
    pub fn release_before(&mut self, _i: u64) -> Result<(), ReservoirError> {
        Ok(())
    }
    pub fn stats(&self) -> ReservoirStats {
        ReservoirStats { events: self.len(), ..Default::default() }
    }
}
