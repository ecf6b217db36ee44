//! Store directories: the `STORE` marker naming the backend and format, and the
//! numbered `MANIFEST-<seq>` files that publish checkpoints atomically.
//!
//! FORMAT: `STORE` and every manifest are [block files](crate::blockfile) (magic
//! `SWSTORE\0` / `SWMANIFS`) holding one frame of UTF-8 `key=value` lines. A manifest
//! always has `seq`, `store`, and one `ns=<merge tag> <name>` line per namespace in
//! declaration order (the tag is `list` or `fn:<function name>`); each backend adds
//! its own keys. In the tag and the name of an `ns` line, `%`, space and newline are
//! written `%25`, `%20` and `%0A`, so that any name reads back as it was (names
//! cannot hold control characters, see [`StoreOptions`], but a space or a `%` is
//! common).
//!
//! The block-file version is 1, or 2 for a backend whose fields an older reader would
//! misread (hashlog's incremental checkpoints: version 1 readers would not replay the
//! log tail), or 3 when an `ns` line holds an escape (readers of versions 1 and 2 took
//! the line literally and split it at its first space), so that such a reader refuses
//! the manifest with [`Error::NewerFormat`]. Each version includes the ones below it.
//! Versions 1 and 2 are read literally: they were written before the escapes, and
//! their names held no space in a function name and no newline (such a manifest did
//! not read back then either). A manifest is written as
//! `MANIFEST-<seq>.tmp`, fsynced, renamed, and the directory fsynced: a checkpoint
//! exists exactly when its final name does.

use std::collections::BTreeMap;
use std::path::Path;

use crate::blockfile::{publish, BlockReader, BlockWriter};
use crate::error::{Error, Result};
use crate::io::{join, Fs};
use crate::StoreOptions;

const STORE_MAGIC: [u8; 8] = *b"SWSTORE\0";
const MANIFEST_MAGIC: [u8; 8] = *b"SWMANIFS";
/// Newest manifest version any backend writes.
const MANIFEST_VERSION: u32 = 3;
/// The version from which the tags and names of `ns` lines are escaped.
const ESCAPED_NAMES: u32 = 3;

/// Whether `c` is written as an escape in an `ns` line.
fn escaped(c: char) -> bool {
    matches!(c, '%' | ' ' | '\n')
}

/// `s` with the characters [`escaped`] names written as `%XX`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if escaped(c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Reverses [`escape`]; `None` for a `%` not followed by an escape `escape` writes.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let hex = rest.get(i + 1..i + 3).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))?;
        let c = u8::from_str_radix(hex, 16).ok()?;
        if !escaped(char::from(c)) {
            return None;
        }
        out.push(char::from(c));
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// Key/value content of a manifest.
#[derive(Clone, Debug, Default)]
pub(crate) struct Manifest {
    pub(crate) seq: u64,
    /// Block-file version the manifest is (or was) written with: 1 unless the backend
    /// raises it.
    pub(crate) version: u32,
    pub(crate) fields: BTreeMap<String, String>,
    pub(crate) namespaces: Vec<(String, String)>,
    /// File offset of each field's line in a manifest read from disk (for errors).
    offsets: BTreeMap<String, u64>,
    /// File offset of the content (the frame payload) of a manifest read from disk.
    base: u64,
}

impl Manifest {
    pub(crate) fn new(seq: u64, store: &str, opts: &StoreOptions) -> Self {
        let mut fields = BTreeMap::new();
        fields.insert("store".to_string(), store.to_string());
        let namespaces = opts.namespaces.iter().map(|n| (n.merge.tag(), n.name.clone())).collect();
        Manifest { seq, version: 1, fields, namespaces, ..Manifest::default() }
    }

    pub(crate) fn set(&mut self, key: &str, value: impl ToString) {
        self.fields.insert(key.to_string(), value.to_string());
    }

    /// File offset of the line of field `key` (of the content if it is missing).
    pub(crate) fn offset_of(&self, key: &str) -> u64 {
        self.offsets.get(key).copied().unwrap_or(self.base)
    }

    pub(crate) fn get_u64(&self, path: &Path, key: &str) -> Result<u64> {
        let v = self.fields.get(key).ok_or_else(|| {
            Error::corrupt(path, self.offset_of(key), format!("manifest lacks `{key}`"))
        })?;
        v.parse().map_err(|_| {
            Error::corrupt(
                path,
                self.offset_of(key),
                format!("manifest field `{key}` = {v:?} is not a number"),
            )
        })
    }

    pub(crate) fn get_str(&self, path: &Path, key: &str) -> Result<&str> {
        self.fields.get(key).map(String::as_str).ok_or_else(|| {
            Error::corrupt(path, self.offset_of(key), format!("manifest lacks `{key}`"))
        })
    }

    /// The manifest's content and the block-file version to write it with (at least
    /// [`ESCAPED_NAMES`] when a namespace line holds an escape).
    fn encode(&self) -> (Vec<u8>, u32) {
        let mut s = format!("seq={}\n", self.seq);
        for (k, v) in &self.fields {
            debug_assert!(!k.contains(['=', '\n']) && !v.contains('\n'), "field {k}={v:?}");
            s.push_str(&format!("{k}={v}\n"));
        }
        let mut version = self.version;
        for (tag, name) in &self.namespaces {
            if tag.contains(escaped) || name.contains(escaped) {
                version = version.max(ESCAPED_NAMES);
            }
            s.push_str(&format!("ns={} {}\n", escape(tag), escape(name)));
        }
        (s.into_bytes(), version)
    }

    /// Decodes the content, written with block-file `version`, of a manifest whose
    /// payload starts at file offset `base`.
    fn decode(path: &Path, bytes: &[u8], base: u64, version: u32) -> Result<Self> {
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::corrupt(path, base + e.valid_up_to() as u64, "manifest is not UTF-8")
        })?;
        let mut m = Manifest { base, ..Manifest::default() };
        let mut seq = None;
        let mut at = base;
        for line in text.split_inclusive('\n') {
            let line_at = at;
            at += line.len() as u64;
            let line = line.strip_suffix('\n').unwrap_or(line);
            let (k, v) = line.split_once('=').ok_or_else(|| {
                Error::corrupt(path, line_at, format!("manifest line {line:?} lacks `=`"))
            })?;
            match k {
                "seq" => seq = v.parse().ok(),
                "ns" => {
                    let bad =
                        || Error::corrupt(path, line_at, format!("bad namespace line {line:?}"));
                    let (tag, name) = v.split_once(' ').ok_or_else(bad)?;
                    if version >= ESCAPED_NAMES {
                        let tag = unescape(tag).ok_or_else(bad)?;
                        let name = unescape(name).ok_or_else(bad)?;
                        m.namespaces.push((tag, name));
                    } else {
                        m.namespaces.push((tag.to_string(), name.to_string()));
                    }
                }
                _ => {
                    m.fields.insert(k.to_string(), v.to_string());
                    m.offsets.insert(k.to_string(), line_at);
                }
            }
        }
        m.seq = seq.ok_or_else(|| Error::corrupt(path, base, "manifest lacks a valid `seq`"))?;
        Ok(m)
    }

    /// Errors unless the namespaces declared in `opts` equal the manifest's.
    pub(crate) fn check_namespaces(&self, opts: &StoreOptions) -> Result<()> {
        let declared: Vec<(String, String)> =
            opts.namespaces.iter().map(|n| (n.merge.tag(), n.name.clone())).collect();
        if declared != self.namespaces {
            let show = |v: &[(String, String)]| {
                v.iter().map(|(t, n)| format!("{n:?} ({t:?})")).collect::<Vec<_>>().join(", ")
            };
            return Err(Error::NamespaceMismatch {
                detail: format!(
                    "checkpoint {} has [{}], open declared [{}]",
                    self.seq,
                    show(&self.namespaces),
                    show(&declared)
                ),
            });
        }
        Ok(())
    }
}

/// Checkpoints every store keeps: the newest and the one before it (so that a
/// store built of several, adaptive, can recover its parts at the previous one).
pub(crate) const RETAINED: u64 = 2;

/// Whether checkpoint `s` is among those retained when `newest` is the newest (0:
/// none): the one policy of every store, which each store's cleanup asks.
pub(crate) fn is_retained(s: u64, newest: u64) -> bool {
    newest > 0 && s <= newest && s + RETAINED > newest
}

/// After checkpoint `seq` was published: keeps the [`RETAINED`] newest, deleting every
/// older manifest and then, through `also`, the store's files of that checkpoint.
pub(crate) fn drop_older_checkpoints(
    fs: &dyn Fs,
    dir: &Path,
    seq: u64,
    mut also: impl FnMut(u64) -> Result<()>,
) -> Result<()> {
    for old in list_manifests(fs, dir)? {
        if old < seq && !is_retained(old, seq) {
            remove_quiet(fs, dir, &manifest_name(old))?;
            also(old)?;
        }
    }
    Ok(())
}

/// At open with [`StoreOptions::recover_at`]: deletes the manifests among `retained`
/// that are newer than the recovered checkpoint `seq` (0: none), so the next
/// checkpoint's number is free.
pub(crate) fn discard_newer(fs: &dyn Fs, dir: &Path, retained: &[u64], seq: u64) -> Result<()> {
    for &newer in retained.iter().filter(|s| **s > seq) {
        remove_quiet(fs, dir, &manifest_name(newer))?;
    }
    Ok(())
}

pub(crate) fn manifest_name(seq: u64) -> String {
    format!("MANIFEST-{seq:016}")
}

/// Writes and publishes a manifest.
pub(crate) fn write_manifest(fs: &dyn Fs, dir: &Path, m: &Manifest) -> Result<()> {
    let name = manifest_name(m.seq);
    let tmp = join(dir, &format!("{name}.tmp"));
    let (content, version) = m.encode();
    debug_assert!((1..=MANIFEST_VERSION).contains(&version));
    let mut w = BlockWriter::create(fs, &tmp, MANIFEST_MAGIC, version)?;
    w.frame(&content)?;
    w.finish()?;
    publish(fs, dir, &tmp, &join(dir, &name))
}

pub(crate) fn read_manifest(fs: &dyn Fs, dir: &Path, seq: u64) -> Result<Manifest> {
    let path = join(dir, &manifest_name(seq));
    let mut r = BlockReader::open(fs, &path, MANIFEST_MAGIC, MANIFEST_VERSION)?;
    let mut buf = Vec::new();
    if !r.next(&mut buf)? {
        return Err(Error::corrupt(&path, r.payload_offset(), "manifest has no content frame"));
    }
    let mut m = Manifest::decode(&path, &buf, r.payload_offset(), r.version)?;
    m.version = r.version;
    let mut extra = Vec::new();
    if r.next(&mut extra)? {
        let at = r.payload_offset() - 8;
        return Err(Error::corrupt(&path, at, "manifest has more than one frame"));
    }
    if m.seq != seq {
        return Err(Error::corrupt(
            &path,
            m.base,
            format!("manifest names seq {} but its file says {seq}", m.seq),
        ));
    }
    Ok(m)
}

/// Reads the manifest of a retained checkpoint other than the recovered one (the
/// previous checkpoint, whose files cleanup must keep): `Ok(None)` only when the file
/// is gone (NotFound: the checkpoint does not exist). Any other failure, a transient
/// EIO as much as damage, is returned naming the file: treating it as absent would
/// delete files that checkpoint needs (and [`StoreOptions::recover_at`] may still
/// ask for it), so the caller fails before deleting anything.
pub(crate) fn read_previous_manifest(
    fs: &dyn Fs,
    dir: &Path,
    seq: u64,
) -> Result<Option<Manifest>> {
    match read_manifest(fs, dir, seq) {
        Ok(m) => Ok(Some(m)),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Sequence numbers of the published manifests in `dir`, ascending. Leftover `.tmp`
/// files of an interrupted checkpoint are ignored.
pub(crate) fn list_manifests(fs: &dyn Fs, dir: &Path) -> Result<Vec<u64>> {
    let mut seqs: Vec<u64> = fs
        .list_dir(dir)
        .map_err(|e| Error::io("list directory", dir, e))?
        .iter()
        .filter_map(|n| n.strip_prefix("MANIFEST-").and_then(|s| s.parse().ok()))
        .collect();
    seqs.sort_unstable();
    Ok(seqs)
}

/// Opens or initialises a store directory for backend `store` at format `version`.
///
/// A missing or empty directory becomes a new store. A directory with files but no
/// `STORE` marker, or a marker for another backend, is [`Error::NotAStore`]; a newer
/// format is [`Error::NewerFormat`]. Returns the marker's format version.
pub(crate) fn init_dir(fs: &dyn Fs, dir: &Path, store: &str, version: u32) -> Result<u32> {
    // The directory's own entry must be durable too, or a power loss takes the store away.
    crate::io::create_dir_durable(fs, dir)
        .map_err(|e| Error::io("create store directory", dir, e))?;
    let names = fs.list_dir(dir).map_err(|e| Error::io("list directory", dir, e))?;
    let marker = join(dir, "STORE");
    if names.iter().any(|n| n == "STORE") {
        let mut r = BlockReader::open(fs, &marker, STORE_MAGIC, u32::MAX)?;
        let mut buf = Vec::new();
        if !r.next(&mut buf)? {
            return Err(Error::corrupt(&marker, r.payload_offset(), "STORE marker is empty"));
        }
        let text = String::from_utf8_lossy(&buf);
        let found = text.strip_prefix("store=").unwrap_or("").trim();
        if found != store {
            return Err(Error::NotAStore {
                path: dir.to_path_buf(),
                reason: format!("it holds a {found:?} store, not {store:?}"),
            });
        }
        if r.version > version {
            return Err(Error::NewerFormat { path: marker, found: r.version, supported: version });
        }
        return Ok(r.version);
    }
    let foreign: Vec<&String> = names.iter().filter(|n| !n.ends_with(".tmp")).collect();
    if !foreign.is_empty() {
        return Err(Error::NotAStore {
            path: dir.to_path_buf(),
            reason: format!(
                "it has no STORE marker but holds other files (e.g. {:?}); give an empty or new directory",
                foreign[0]
            ),
        });
    }
    let tmp = join(dir, "STORE.tmp");
    let mut w = BlockWriter::create(fs, &tmp, STORE_MAGIC, version)?;
    w.frame(format!("store={store}\n").as_bytes())?;
    w.finish()?;
    publish(fs, dir, &tmp, &marker)?;
    Ok(version)
}

/// Removes `name` from `dir`, ignoring a file that is already gone.
pub(crate) fn remove_quiet(fs: &dyn Fs, dir: &Path, name: &str) -> Result<()> {
    match fs.remove_file(&join(dir, name)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove file", join(dir, name), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_two_newest_checkpoints_are_retained() {
        assert!(!is_retained(0, 0), "no checkpoint yet: nothing is retained");
        assert!(is_retained(1, 1));
        assert!(is_retained(4, 5) && is_retained(5, 5));
        assert!(!is_retained(3, 5), "older than the previous one");
        assert!(!is_retained(6, 5), "newer than the newest (a discarded one)");
    }

    #[test]
    fn escapes_round_trip_and_only_where_needed() {
        for s in ["plain", "my fn", "100%", "%20", "a\nb", "ünï ναμε", "=:", ""] {
            let e = escape(s);
            assert!(!e.contains([' ', '\n']), "{e:?}");
            assert_eq!(unescape(&e).as_deref(), Some(s), "{e:?}");
        }
        assert_eq!(escape("a=b:c"), "a=b:c");
        for bad in ["%", "%2", "%zz", "%41", "%+A", "%é"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    /// Versions 1 and 2 are read literally, version 3 unescaped; a manifest is written
    /// at version 3 only when a namespace line needs an escape.
    #[test]
    fn namespace_lines_by_version() {
        let path = Path::new("MANIFEST-test");
        let text = b"seq=4\nstore=mem\nns=fn:100%25 a%20b\n";
        let old = Manifest::decode(path, text, 16, 2).expect("version 2");
        assert_eq!(old.namespaces, vec![("fn:100%25".to_string(), "a%20b".to_string())]);
        let new = Manifest::decode(path, text, 16, 3).expect("version 3");
        assert_eq!(new.namespaces, vec![("fn:100%".to_string(), "a b".to_string())]);
        let e = Manifest::decode(path, b"seq=4\nns=list a%4\n", 16, 3).expect_err("bad escape");
        assert!(matches!(e, Error::Corrupt { offset: 22, .. }), "{e}");
        let mut m = Manifest { seq: 4, version: 2, ..Manifest::default() };
        m.namespaces.push(("list".into(), "plain:name=1".into()));
        assert_eq!(m.encode().1, 2);
        m.namespaces.push(("fn:my fn".into(), "x".into()));
        let (bytes, version) = m.encode();
        assert_eq!(version, 3);
        let back = Manifest::decode(path, &bytes, 16, version).expect("decode");
        assert_eq!(back.namespaces, m.namespaces);
    }

    fn sample() -> Manifest {
        let mut m = Manifest { seq: 7, version: 3, ..Manifest::default() };
        m.set("store", "hashlog");
        m.set("page_bits", 12);
        m.namespaces.push(("list".into(), "a b%".into()));
        m.namespaces.push(("fn:sum".into(), "c".into()));
        m
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes, any lines of the manifest's alphabet, and damaged valid contents,
        /// under every version: `decode` answers `Ok` or `Err`.
        #[test]
        fn hostile_manifest_text_is_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..64),
            lines in proptest::collection::vec("[a-z0-9%= \\n\u{e9}]{0,12}", 0..6),
            version in 0u32..5,
            ds in crate::hostile::damages(),
        ) {
            let path = Path::new("MANIFEST-test");
            let text = lines.join("\n").into_bytes();
            let valid = sample().encode().0;
            for b in [raw, text, crate::hostile::damaged(&valid, &ds)] {
                if let Ok(m) = Manifest::decode(path, &b, 16, version) {
                    prop_assert!(m.fields.keys().all(|k| !k.contains('\n')));
                }
            }
        }

        /// A manifest file damaged anywhere (frame lengths set huge, cut, flipped bytes):
        /// reading it answers `Ok` or `Err`.
        #[test]
        fn hostile_manifest_files_are_an_error_not_a_panic(ds in crate::hostile::damages()) {
            let dir = tempfile::tempdir().unwrap();
            let fs = crate::io::StdFs;
            write_manifest(&fs, dir.path(), &sample()).unwrap();
            let path = join(dir.path(), &manifest_name(7));
            let valid = std::fs::read(&path).unwrap();
            prop_assert_eq!(read_manifest(&fs, dir.path(), 7).unwrap().namespaces, sample().namespaces);
            std::fs::write(&path, crate::hostile::damaged(&valid, &ds)).unwrap();
            let _ = read_manifest(&fs, dir.path(), 7);
        }
    }
}
