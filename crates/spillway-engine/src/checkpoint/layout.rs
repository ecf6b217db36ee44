//! `store.json`: which directory of a job's checkpoint directory holds its state store
//! (`state`, then `state-1`, `state-2`, ... after backfills), and the query whose
//! namespaces that store was created with; plus the durable file helpers the job and
//! the session share.
//!
//! FORMAT: JSON `{"format_version": 1, "dir": "state-N", "query": "..."}`, replaced
//! atomically ([`replace_durably`]: written to `store.json.tmp`, fsynced, renamed, the
//! directory fsynced). Another `format_version` is refused.

use std::path::Path;

use crate::error::{Error, Result};

/// The file naming the state store's directory.
pub const LAYOUT_FILE: &str = "store.json";
/// The state store's directory until a backfill moves it.
pub const STATE_DIR: &str = "state";

/// The contents of [`LAYOUT_FILE`]: which directory holds the state store, and the query
/// whose namespaces it was created with.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct StoreLayout {
    /// 1.
    pub format_version: u32,
    /// The store's directory name (`state` or `state-N`).
    pub dir: String,
    /// The query whose namespaces the store was created with (`None`: not yet known).
    pub query: Option<String>,
}

impl StoreLayout {
    /// The layout before any backfill: the store in `state`.
    pub fn initial(query: Option<String>) -> StoreLayout {
        StoreLayout { format_version: 1, dir: STATE_DIR.into(), query }
    }

    /// The generation of a store directory name: `state` is 0, `state-N` is N.
    pub fn generation(name: &str) -> Option<u64> {
        if name == STATE_DIR {
            return Some(0);
        }
        let n = name.strip_prefix("state-")?;
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok()
    }

    /// Reads `<base>/store.json` (`None` if there is none).
    pub fn read(base: &Path) -> Result<Option<StoreLayout>> {
        let path = base.join(LAYOUT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::Checkpoint(format!("cannot read {}: {e}", path.display())))
            }
        };
        let l: StoreLayout = serde_json::from_str(&text).map_err(|e| {
            Error::Checkpoint(format!(
                "{}: {e} (expected {{\"format_version\": 1, \"dir\": \"state\", \"query\": \"...\"}})",
                path.display()
            ))
        })?;
        if l.format_version != 1 {
            return Err(Error::Checkpoint(format!(
                "{}: format_version {} is not supported (this build reads 1)",
                path.display(),
                l.format_version
            )));
        }
        match Self::generation(&l.dir) {
            None => Err(Error::Checkpoint(format!(
                "{}: dir {:?} is not a store directory name (state or state-N)",
                path.display(),
                l.dir
            ))),
            // A backfill moves the store to the next generation (`next`).
            Some(u64::MAX) => Err(Error::Checkpoint(format!(
                "{}: dir {:?} has no next generation for a backfill to move to",
                path.display(),
                l.dir
            ))),
            Some(_) => Ok(Some(l)),
        }
    }

    /// Replaces `<base>/store.json` atomically.
    pub fn write(&self, base: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Checkpoint(format!("cannot encode {LAYOUT_FILE}: {e}")))?;
        replace_durably(base, LAYOUT_FILE, text.as_bytes())
    }

    /// The layout of the store directory a backfill creates next, for `query`.
    pub fn next(&self, query: &str) -> StoreLayout {
        let g = Self::generation(&self.dir).unwrap_or(0) + 1;
        StoreLayout { format_version: 1, dir: format!("state-{g}"), query: Some(query.into()) }
    }

    /// Removes the store directories in `base` other than this layout's: what an
    /// interrupted backfill left (a new directory never switched to, or the old one
    /// not yet removed).
    pub fn remove_leftovers(&self, base: &Path) -> Result<()> {
        let entries = match std::fs::read_dir(base) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::Config(format!("cannot list {}: {e}", base.display()))),
        };
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::Config(format!("cannot list {}: {e}", base.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != self.dir && Self::generation(&name).is_some() && entry.path().is_dir() {
                clear_dirs(&[&entry.path()])?;
            }
        }
        Ok(())
    }
}

/// Replaces `dir/name` with `bytes` atomically and durably: written to `name.tmp`,
/// fsynced, renamed over `name`, the directory fsynced.
pub fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let err = |what: &str, p: &Path, e: std::io::Error| {
        Error::Checkpoint(format!("cannot {what} {}: {e}", p.display()))
    };
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&tmp).map_err(|e| err("create", &tmp, e))?;
        f.write_all(bytes).map_err(|e| err("write", &tmp, e))?;
        f.sync_all().map_err(|e| err("fsync", &tmp, e))?;
    }
    std::fs::rename(&tmp, &path).map_err(|e| err("rename to", &path, e))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| err("fsync", dir, e))
}

/// Removes the directories that exist among `dirs` (state of a run or session that
/// never completed a checkpoint, so it starts over).
pub fn clear_dirs(dirs: &[&std::path::Path]) -> Result<()> {
    for d in dirs {
        if d.exists() {
            std::fs::remove_dir_all(d)
                .map_err(|e| Error::Config(format!("cannot clear {}: {e}", d.display())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A `store.json` naming the last generation there is: a backfill's next directory
    /// overflowed the generation.
    #[test]
    fn a_layout_of_the_last_generation_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let text =
            format!(r#"{{"format_version": 1, "dir": "state-{}", "query": null}}"#, u64::MAX);
        std::fs::write(d.path().join(LAYOUT_FILE), text).unwrap();
        if let Ok(Some(l)) = StoreLayout::read(d.path()) {
            // What a backfill does with it.
            let _ = l.next("SELECT 1");
        }
        let e = StoreLayout::read(d.path()).unwrap_err().to_string();
        assert!(e.contains("state-18446744073709551615") && e.contains("no next"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// A `store.json` that is any bytes, or a valid one with a byte changed or cut, or
        /// naming any directory, reads to a layout whose next generation exists, or an
        /// error; never a panic.
        #[test]
        fn hostile_layout_files_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            dir in prop_oneof![".{0,12}", "state-[0-9]{1,22}"],
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let d = tempfile::tempdir().unwrap();
            let good = serde_json::to_vec(&StoreLayout {
                format_version: 1,
                dir,
                query: Some("SELECT 1".into()),
            })
            .unwrap();
            let bad = crate::hostile::flipped(&good, at, byte);
            for b in [&garbage[..], &good, &bad, &good[..cut % (good.len() + 1)]] {
                std::fs::write(d.path().join(LAYOUT_FILE), b).unwrap();
                if let Ok(Some(l)) = StoreLayout::read(d.path()) {
                    let next = l.next("SELECT 2");
                    prop_assert!(StoreLayout::generation(&next.dir) > StoreLayout::generation(&l.dir));
                }
            }
        }
    }
}
