//! Checkpoints: what every driver records in the state store so that a resume continues
//! exactly where the last checkpoint stood, and refuses to continue another job.
//!
//! - [`Record`]: one checkpoint's metadata: the query, the typed [`Identity`] a resume
//!   must match, the operator's snapshot, the event count, the reservoir retention, the
//!   checkpoint interval, and the front-end's position ([`Front`]: a file job's input
//!   offset and output lengths, or a pushed stream's tag, such as a Kafka task's offset).
//! - [`identity`]: the typed identity and how two are compared ([`Identity::changes`]
//!   names each field that differs, with both values).
//! - [`layout`]: `store.json`, which names the store directory of a job (backfills move
//!   it), and the durable file helpers.
//!
//! Both drivers write it the same way ([`crate::driver::Driver::checkpoint`]): the record
//! goes into the store's `meta` namespace and is made durable by the store's own
//! checkpoint (its manifest rename), together with the operator's state.
//!
//! ## FORMAT
//! - In namespace `meta`, key `checkpoint`: a 12-byte head `[chunk count: u64 LE]
//!   [crc32c of the blob: u32 LE]`; the blob in chunks of 32 KiB at `checkpoint/0`,
//!   `checkpoint/1`, ... A missing chunk or a checksum mismatch is an error.
//! - The blob is postcard of [`Record`], whose first field is `version` (a varint; this
//!   build writes and reads [`VERSION`] = 7). Identities are typed fields, never Debug
//!   text, so adding a field to an options struct does not change a recorded identity;
//!   a change to [`Record`] or [`Identity`] needs a new version.
//! - Version 6 (an OVER query's `RANGE` states one namespace per group-by node, `g<i>`,
//!   before the nodes sharing a `PARTITION BY` shared one state record) is refused: its
//!   store holds the states where this build does not look.
//! - Version 5 (a windowed aggregation's watermark one time unit later, before ties with
//!   the newest event were made in time, and its `WindowStats` without `missed_windows`)
//!   is refused: its timers were set by the other watermark.
//! - Versions 3 and 4 (a `spillway run` job's metadata with its identity as text pairs)
//!   and the `session` key of versions 1 and 2 (Python sessions and Kafka tasks, identity
//!   as one string) are refused with a message naming the version: finish such a job with
//!   the build that wrote it, or start over in an empty directory.

pub mod identity;
pub mod layout;

use std::path::Path;

use spillway_store::{StateStore, StateStoreExt};

pub use identity::{Change, Identity, Input, StoreIdentity};

use crate::error::{Error, Result};
use crate::operator::over::META_NAMESPACE;
use crate::operator::OperatorSnapshot;
use crate::source::SourcePosition;

/// The record layout this build writes and reads.
pub const VERSION: u32 = 7;
/// Key of the record in the `meta` namespace.
pub const KEY: &str = "checkpoint";
/// Key under which versions 1 and 2 of a session's metadata were written.
const OLD_SESSION_KEY: &str = "session";
/// Metadata chunk size in the store (below every backend's value limit).
const CHUNK: usize = 32 * 1024;

/// One checkpoint's metadata (see the module docs).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// [`VERSION`].
    pub version: u32,
    /// The query (a job resumes a changed one only with `--backfill`).
    pub query: String,
    /// What a resume must match besides the query.
    pub identity: Identity,
    /// The operator's position.
    pub operator: OperatorSnapshot,
    /// Events the checkpoint covers (the next event's sequence number).
    pub events: u64,
    /// Events between checkpoints of the run that wrote it, which a resume keeps unless
    /// given another (`None`: the caller checkpoints when it chooses).
    pub checkpoint_every: Option<u64>,
    /// The reservoir retention span (0: none) and its pseudo-cursor's index.
    pub retain: i64,
    /// See `retain`.
    pub retain_index: u64,
    /// The front-end's position.
    pub front: Front,
}

/// Where the front-end that wrote a checkpoint stood.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Front {
    /// A `spillway run` job over files.
    File(FilePosition),
    /// Events pushed by the caller, with the caller's tag of the checkpoint (a Kafka
    /// task's next offset; empty for Python).
    Pushed {
        /// The tag.
        tag: Vec<u8>,
    },
}

/// A file job's position at a checkpoint.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct FilePosition {
    /// The input's position after the last event covered.
    pub source: SourcePosition,
    /// Absolute path of the output (`None`: stdout or discarded).
    pub output: Option<String>,
    /// Absolute path of the side output (late events).
    pub side_output: String,
    /// Bytes of the output the checkpoint covers.
    pub output_len: u64,
    /// Bytes of the side output the checkpoint covers.
    pub side_len: u64,
}

impl Record {
    /// Errors unless this record's identity equals `now`, naming every field that
    /// differs with both values. `who` says what wrote it ("a job", "a session").
    pub fn check_identity(&self, now: &Identity, base: &Path, who: &str) -> Result<()> {
        self.identity.check(now, base, who)
    }
}

impl Identity {
    /// Errors unless `now` equals this recorded identity, naming every field that differs
    /// with both values. `who` says what wrote it ("a job", "a session").
    pub fn check(&self, now: &Identity, base: &Path, who: &str) -> Result<()> {
        let changes = self.changes(now);
        if changes.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = changes.iter().map(ToString::to_string).collect();
        let hint = if changes.iter().any(|c| c.what == "schema") {
            " (a resume infers the input's column types again: pin them with --schema)"
        } else {
            ""
        };
        Err(Error::Checkpoint(format!(
            "{} was written by {who} with a different {}{hint}; resume with the same arguments",
            base.display(),
            list.join(", ")
        )))
    }
}

/// Writes `record` into the store's `meta` namespace (durable with the store's next
/// checkpoint).
pub fn write(store: &mut dyn StateStore, record: &Record) -> Result<()> {
    let bytes = postcard::to_stdvec(record)
        .map_err(|e| Error::Checkpoint(format!("cannot encode checkpoint metadata: {e}")))?;
    write_blob(store, KEY, &bytes)
}

/// Reads the record of the store's last checkpoint (`None`: no checkpoint). A record of
/// an older layout is refused with a message naming its version; `base` names the
/// directory in messages.
pub fn read(store: &mut dyn StateStore, base: &Path) -> Result<Option<Record>> {
    let older = |what: &str, v: u32| {
        Error::Checkpoint(format!(
            "{} holds a checkpoint in {what} version {v}, written by an earlier Spillway; \
             this build reads version {VERSION} only: finish that job with the build that \
             started it, or start over in an empty directory",
            base.display()
        ))
    };
    let bad = |e: postcard::Error| {
        Error::Checkpoint(format!(
            "cannot decode the checkpoint metadata in {}: {e}",
            base.display()
        ))
    };
    let Some(bytes) = read_blob(store, KEY)? else {
        return match read_blob(store, OLD_SESSION_KEY)? {
            Some(old) => {
                let (v, _) = postcard::take_from_bytes::<u32>(&old).map_err(bad)?;
                Err(older("session metadata", v))
            }
            None => Ok(None),
        };
    };
    let (v, _) = postcard::take_from_bytes::<u32>(&bytes).map_err(bad)?;
    if v != VERSION {
        return Err(if v < VERSION {
            older("metadata", v)
        } else {
            Error::Checkpoint(format!(
                "{} holds a checkpoint in metadata version {v}, written by a newer Spillway; \
                 this build reads version {VERSION}",
                base.display()
            ))
        });
    }
    postcard::from_bytes(&bytes).map(Some).map_err(bad)
}

/// Writes `bytes` under `key` in the store's `meta` namespace in the chunked,
/// checksummed layout of the module docs.
pub fn write_blob(store: &mut dyn StateStore, key: &str, bytes: &[u8]) -> Result<()> {
    let ns = store.namespace(META_NAMESPACE)?;
    let chunks: Vec<&[u8]> = bytes.chunks(CHUNK).collect();
    let mut head = Vec::with_capacity(16);
    head.extend_from_slice(&(chunks.len() as u64).to_le_bytes());
    head.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
    store.put(ns, key.as_bytes(), &head)?;
    for (i, c) in chunks.iter().enumerate() {
        store.put(ns, format!("{key}/{i}").as_bytes(), c)?;
    }
    Ok(())
}

/// Reads what [`write_blob`] wrote under `key` (`None`: nothing), checking the chunk
/// count and checksum.
pub fn read_blob(store: &mut dyn StateStore, key: &str) -> Result<Option<Vec<u8>>> {
    let ns = store.namespace(META_NAMESPACE)?;
    let Some(head) = store.get(ns, key.as_bytes())? else { return Ok(None) };
    if head.len() != 12 {
        return Err(Error::Checkpoint(format!(
            "metadata header has {} bytes, expected 12",
            head.len()
        )));
    }
    let n = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let mut bytes = Vec::new();
    for i in 0..n {
        let c = store
            .get(ns, format!("{key}/{i}").as_bytes())?
            .ok_or_else(|| Error::Checkpoint(format!("metadata chunk {i} of {n} is missing")))?;
        bytes.extend_from_slice(&c);
    }
    if crc32c::crc32c(&bytes) != crc {
        return Err(Error::Checkpoint("metadata checksum mismatch".into()));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{DataType, Field, Schema, TimeUnit};
    use proptest::prelude::*;
    use spillway_store::{StoreKind, StoreOptions};

    fn store(dir: &Path) -> Box<dyn StateStore> {
        StoreKind::HashLog
            .open(
                StoreOptions::new(dir)
                    .namespace(spillway_store::NamespaceSpec::list(META_NAMESPACE)),
            )
            .unwrap()
    }

    fn identity() -> Identity {
        let schema =
            Schema::new(vec![Field { name: "ts".into(), ty: DataType::Int }], "ts", TimeUnit::Ms)
                .unwrap();
        Identity {
            input: Input::Pushed,
            schema,
            allowed_lateness: 7,
            watermark_delay: 0,
            store: StoreIdentity::of(StoreKind::HashLog),
            items: None,
            ties: Default::default(),
        }
    }

    #[test]
    fn a_session_checkpoint_reads_back_as_written() {
        use crate::session::{Session, SessionConfig};
        use crate::value::Value;
        let d = tempfile::tempdir().unwrap();
        let q = "SELECT COUNT(*) OVER (ORDER BY ts RANGE BETWEEN 10 PRECEDING AND CURRENT ROW) AS n FROM t";
        let mut cfg = SessionConfig::new(q);
        cfg.dir = Some(d.path().to_path_buf());
        cfg.allowed_lateness = 7;
        let mut s = Session::open(&cfg, identity().schema).unwrap();
        let mut out = Vec::new();
        for t in 0..5 {
            s.process(t, vec![Value::Int(t)], &mut out).unwrap();
        }
        s.checkpoint_tagged(&[1, 2, 3]).unwrap();
        drop(s);
        let plan = crate::operator::QueryPlan::build(q, &identity().schema, None).unwrap();
        let mut opts = StoreOptions::new(d.path().join("state"));
        for spec in plan.namespace_specs() {
            opts = opts.namespace(spec);
        }
        let mut st = StoreKind::HashLog.open(opts).unwrap();
        let r = read(st.as_mut(), d.path()).unwrap().unwrap();
        assert_eq!(r.identity, identity());
        assert_eq!((r.version, r.events, r.checkpoint_every), (VERSION, 5, None));
        assert!(matches!(r.front, Front::Pushed { ref tag } if tag == &[1, 2, 3]));
    }

    #[test]
    fn older_and_newer_layouts_are_refused_naming_their_version() {
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        // A job's version 4 metadata starts with its version, as every layout does.
        let mut old = postcard::to_stdvec(&4u32).unwrap();
        old.extend_from_slice(&[0; 16]);
        write_blob(s.as_mut(), KEY, &old).unwrap();
        let e = read(s.as_mut(), d.path()).unwrap_err().to_string();
        assert!(e.contains("metadata version 4") && e.contains("earlier Spillway"), "{e}");
        let newer = postcard::to_stdvec(&(VERSION + 1)).unwrap();
        write_blob(s.as_mut(), KEY, &newer).unwrap();
        let e = read(s.as_mut(), d.path()).unwrap_err().to_string();
        assert!(e.contains(&format!("version {}", VERSION + 1)) && e.contains("newer"), "{e}");

        // A session of versions 1 and 2 wrote under its own key.
        let d = tempfile::tempdir().unwrap();
        let mut s = store(d.path());
        write_blob(s.as_mut(), OLD_SESSION_KEY, &postcard::to_stdvec(&2u32).unwrap()).unwrap();
        let e = read(s.as_mut(), d.path()).unwrap_err().to_string();
        assert!(e.contains("session metadata version 2"), "{e}");
    }

    #[test]
    fn a_changed_identity_is_refused_naming_each_change() {
        let was = identity();
        let mut now = was.clone();
        now.allowed_lateness = 9;
        now.store = StoreIdentity::of(StoreKind::Rocks);
        let e = was.check(&now, Path::new("/ck"), "a session").unwrap_err().to_string();
        assert!(
            e.contains("allowed lateness (checkpoint: 7; now: 9)")
                && e.contains("store (checkpoint: hashlog; now: rocksdb)"),
            "{e}"
        );
        assert!(was.check(&was, Path::new("/ck"), "a session").is_ok());
    }

    /// A record of every shape a field can take: a peers operator holding a row, a
    /// pushed front with a tag.
    fn record() -> Record {
        use crate::operator::over::peers::PeersSnapshot;
        use crate::operator::over::{Counters, RuntimeSnapshot};
        use crate::value::{Event, Value};
        let event = Event { time: 5, seq: 1, row: vec![Value::Int(5)] };
        Record {
            version: VERSION,
            query: "SELECT 1".into(),
            identity: identity(),
            operator: OperatorSnapshot::OverPeers {
                runtime: RuntimeSnapshot {
                    frontier: Some(5),
                    buffer: vec![event.clone()],
                    cursors: vec![(1, 0, vec![event])],
                    counters: Counters::default(),
                },
                reservoir: crate::reservoir::Position { events: 2, segment: 0, segment_len: 40 },
                peers: PeersSnapshot {
                    at: Some(5),
                    held: vec![(vec![Value::Str("x".into())], vec![vec![1, 2]])],
                },
            },
            events: 2,
            checkpoint_every: Some(100),
            retain: 0,
            retain_index: 0,
            front: Front::Pushed { tag: vec![1, 2, 3] },
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Checkpoint metadata whose blob is any bytes, or a valid record with a byte
        /// changed, cut or a length set huge (the checksum made to match, as another program
        /// or an older build writes it), and headers of any bytes, read to a record or an
        /// error, never a panic.
        #[test]
        fn hostile_checkpoint_metadata_is_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            head in prop::collection::vec(any::<u8>(), 0..16),
            chunks in prop_oneof![Just(u64::MAX), 0u64..4],
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let d = tempfile::tempdir().unwrap();
            let mut s = store(d.path());
            write_blob(s.as_mut(), KEY, &garbage).unwrap();
            let _ = read(s.as_mut(), d.path());
            let good = postcard::to_stdvec(&record()).unwrap();
            prop_assert!(read_back(s.as_mut(), d.path(), &good).is_ok());
            let _ = read_back(s.as_mut(), d.path(), &good[..cut % (good.len() + 1)]);
            let bad = crate::hostile::flipped(&good, at, byte);
            let _ = read_back(s.as_mut(), d.path(), &bad);
            // A varint (a length or a count) set to u64::MAX.
            let mut huge = good[..at % good.len()].to_vec();
            huge.extend_from_slice(&[0xff; 9]);
            huge.push(0x01);
            huge.extend_from_slice(&good[at % good.len()..]);
            let _ = read_back(s.as_mut(), d.path(), &huge);
            // Headers: any bytes, and a chunk count past the chunks.
            let ns = s.namespace(META_NAMESPACE).unwrap();
            s.put(ns, KEY.as_bytes(), &head).unwrap();
            let _ = read(s.as_mut(), d.path());
            let mut h = chunks.to_le_bytes().to_vec();
            h.extend_from_slice(&crc32c::crc32c(&good).to_le_bytes());
            s.put(ns, KEY.as_bytes(), &h).unwrap();
            let _ = read(s.as_mut(), d.path());
        }
    }

    /// Writes `blob` as the checkpoint metadata and reads it back.
    fn read_back(s: &mut dyn StateStore, base: &Path, blob: &[u8]) -> Result<Option<Record>> {
        write_blob(s, KEY, blob)?;
        read(s, base)
    }
}
