//! Import of Gadget's `key=value` config files (Gadget notes §2) into an [`Experiment`],
//! and [`load_experiment`], which reads either format.
//!
//! Lexical rules follow Gadget's `Config` (notes §2.1): every whitespace character is
//! removed, a line whose first remaining character is `#` is a comment, a line without
//! `=` is ignored (with a note), the line is split at the first `=`, and a later
//! duplicate key replaces an earlier one (with a note). Keys are lowercased as in
//! Gadget; **values keep their case** (Gadget lowercases them, which breaks file paths).
//! Numbers are read like `std::stoi`/`std::stod`: a valid prefix is used and trailing
//! characters are dropped with a note (`lateness.threshold = 3;` gives 3).
//!
//! Unlike Gadget, an unknown key is an error naming the key and its line. Keys Gadget
//! parses but never uses, or that have no meaning in Spillway, are accepted and listed
//! in [`Imported::notes`]: `wrapper.*` (the sink is chosen by `[run]`),
//! `*.arrival.interarrival.*`, `operator.service.time.*`, `operator.key.popularity.*`
//! (Spillway's operators number state keys themselves), `trace.file.path` and `second.*`
//! for one-input operators.
//!
//! Mapping (P is `first` = source 0 or `second` = source 1):
//! * `P.event.generator.type`: `gadget` (synthetic) or `tracefile` (CSV, times in
//!   microseconds: multiplier `1e-6`, and the experiment's `time_unit` becomes `s`).
//! * `P...key.popularity.distrib.type` `zipf`/`uniform`/`hotspot`/`sequential`/`constant`
//!   with `params.keyspacesize` (-> `keys`), `s`, `a`/`b` (-> `min`/`max`),
//!   `hotspotfraction`/`hotoperationfraction` (with their intended meaning, not Gadget's
//!   swapped one), `constant`.
//! * `P...event.occurrence.gap.distrib.*` -> `gap` (`sd` -> `stddev`).
//! * `P...outoforder.percentage` -> `out_of_order` = percentage / 100;
//!   `P...lateness.threshold` -> `lateness_bound`; `P...watermark.frequency` ->
//!   `watermark_every`; and every imported source gets `disorder = "gadget"`
//!   ([`Disorder::Gadget`]), Gadget's meaning of these keys (notes §4.1): an out-of-order
//!   event is *delivered* 1..=`lateness.threshold` time units late with its own time,
//!   and the watermark is the current unit, it does **not** trail by the threshold. (An
//!   import that made the threshold a trailing watermark kept every window open
//!   `threshold` units longer than Gadget: on `configs/config.txt` the median key
//!   lifetime was 2.6x Gadget's.) Gadget's `tracefile` source has no out-of-order mode,
//!   so there the threshold is ignored with a note.
//! * `P...key.index`, `event.time.index`, `file.path` -> the CSV columns and path
//!   (relative paths are resolved against the config file's directory by
//!   [`load_experiment`]); `event.type.index` is noted and not used.
//! * `operator.type` (required; the replayers `flink.replayer`/`ycsb.replayer` are
//!   rejected), `window.length` (the session gap for `session.*`), `sliding.length`,
//!   `allowed.lateness` + `lateness.length`, `lower.bound`, `upper.bound`.
//! * `expected.num.operations` -> `run.max_ops`, and the `events` of each synthetic
//!   source (an upper bound: every event issues at least one state op).
//! * `operator.key.size.distrib.*` -> `key_bytes` (the constant, or the rounded mean of
//!   other types, with a note); `operator.value.size.distrib.*` -> every source's
//!   `value_size` (exponential `lambda` becomes `mean = 1/lambda`).
//!
//! Missing keys take Spillway's defaults ([`super::config`]). After mapping, the
//! experiment is validated; the error names the Gadget key.

use std::collections::BTreeMap;
use std::path::Path;

use super::config::{
    Column, ConfigError, CsvInput, Disorder, Experiment, Source, SourceInput, Synthetic,
};
use super::dist::{Gap, KeyPopularity, ValueSize};
use super::OperatorKind;

/// An imported experiment and what the importer ignored or changed.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The experiment.
    pub experiment: Experiment,
    /// One line per ignored key, reinterpreted value or Gadget bug not reproduced.
    pub notes: Vec<String>,
}

const DISTRIB_PARAMS: [&str; 6] = ["lambda", "constant", "sd", "mean", "a", "b"];
const POPULARITY_PARAMS: [&str; 7] =
    ["keyspacesize", "constant", "hotspotfraction", "hotoperationfraction", "s", "a", "b"];

/// Whether `key` is a key Gadget's `Config` knows (notes §2.2-2.5).
fn known_key(key: &str) -> bool {
    let params = |prefix: &str, names: &[&str]| {
        key == format!("{prefix}.type")
            || key.strip_prefix(&format!("{prefix}.params.")).is_some_and(|p| names.contains(&p))
    };
    if key.starts_with("wrapper.") {
        return true;
    }
    for p in ["first", "second"] {
        let g = format!("{p}.event.generator");
        let Some(rest) = key.strip_prefix(&format!("{g}.")) else { continue };
        return matches!(
            rest,
            "type"
                | "watermark.frequency"
                | "outoforder.percentage"
                | "lateness.threshold"
                | "key.index"
                | "event.time.index"
                | "event.type.index"
                | "file.path"
        ) || params(&format!("{g}.key.popularity.distrib"), &POPULARITY_PARAMS)
            || params(&format!("{g}.event.occurrence.gap.distrib"), &DISTRIB_PARAMS)
            || params(&format!("{g}.arrival.interarrival.distrib"), &DISTRIB_PARAMS);
    }
    matches!(
        key,
        "operator.type"
            | "expected.num.operations"
            | "window.length"
            | "sliding.length"
            | "allowed.lateness"
            | "lateness.length"
            | "upper.bound"
            | "lower.bound"
            | "trace.file.path"
    ) || params("operator.key.popularity.distrib", &POPULARITY_PARAMS)
        || params("operator.key.size.distrib", &DISTRIB_PARAMS)
        || params("operator.value.size.distrib", &DISTRIB_PARAMS)
        || params("operator.service.time.distrib", &DISTRIB_PARAMS)
}

/// The parsed file: key -> (line, value), plus notes.
struct Keys {
    map: BTreeMap<String, (usize, String)>,
    notes: Vec<String>,
}

fn gerr(line: usize, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Gadget { line, key: key.to_string(), message: message.into() }
}

/// Longest prefix of `v` that parses as `T` (Gadget's `stoi`/`stod` behaviour).
fn prefix_parse<T: std::str::FromStr>(v: &str) -> Option<(T, &str)> {
    (1..=v.len()).rev().filter(|&i| v.is_char_boundary(i)).find_map(|i| {
        let p = &v[..i];
        // `inf`, `nan` and a lone sign are not numbers for stoi/stod here.
        if p.chars().any(|c| c.is_ascii_digit()) {
            p.parse::<T>().ok().map(|x| (x, &v[i..]))
        } else {
            None
        }
    })
}

impl Keys {
    fn parse(text: &str) -> Result<Keys, ConfigError> {
        let mut map: BTreeMap<String, (usize, String)> = BTreeMap::new();
        let mut notes = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let line: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((k, v)) = line.split_once('=') else {
                notes.push(format!("line {line_no}: ignored (no `=`): {}", raw.trim()));
                continue;
            };
            let k = k.to_lowercase();
            if !known_key(&k) {
                return Err(gerr(
                    line_no,
                    &k,
                    "unknown Gadget key (see Gadget notes §2 for the keys Gadget reads)",
                ));
            }
            if let Some((prev, _)) = map.insert(k.clone(), (line_no, v.to_string())) {
                notes.push(format!("line {line_no}: `{k}` replaces the value from line {prev}"));
            }
        }
        Ok(Keys { map, notes })
    }

    fn line(&self, key: &str) -> usize {
        self.map.get(key).map_or(0, |(l, _)| *l)
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.map.get(key).map(|(_, v)| v.as_str())
    }

    fn num<T: std::str::FromStr>(
        &mut self,
        key: &str,
        what: &str,
    ) -> Result<Option<T>, ConfigError> {
        let Some((line, v)) = self.map.get(key).cloned() else { return Ok(None) };
        let Some((x, rest)) = prefix_parse::<T>(&v) else {
            return Err(gerr(line, key, format!("expected {what}, got {v:?}")));
        };
        if !rest.is_empty() {
            self.notes.push(format!(
                "line {line}: `{key}` = {v:?} read as {:?} (trailing {rest:?} dropped, as Gadget does)",
                &v[..v.len() - rest.len()]
            ));
        }
        Ok(Some(x))
    }

    fn int(&mut self, key: &str) -> Result<Option<i64>, ConfigError> {
        self.num(key, "an integer")
    }

    fn uint(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.int(key)? {
            Some(v) if v < 0 => Err(gerr(self.line(key), key, format!("must be >= 0, got {v}"))),
            v => Ok(v.map(|v| v as u64)),
        }
    }

    fn real(&mut self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.num(key, "a number")
    }

    fn req_real(&mut self, key: &str) -> Result<f64, ConfigError> {
        self.real(key)?.ok_or_else(|| gerr(0, key, "required for this distribution type"))
    }

    fn note(&mut self, key: &str, what: &str) {
        if self.map.contains_key(key) {
            let line = self.line(key);
            self.notes.push(format!("line {line}: `{key}` ignored: {what}"));
        }
    }

    /// Notes every key under `prefix` as ignored.
    fn note_prefix(&mut self, prefix: &str, what: &str) {
        let keys: Vec<String> =
            self.map.keys().filter(|k| k.starts_with(prefix)).cloned().collect();
        for k in keys {
            self.note(&k, what);
        }
    }
}

fn distrib_type<'a>(k: &'a Keys, prefix: &str) -> Option<&'a str> {
    k.str(&format!("{prefix}.type"))
}

fn gap_of(k: &mut Keys, prefix: &str) -> Result<Option<Gap>, ConfigError> {
    let p = |n: &str| format!("{prefix}.params.{n}");
    let Some(t) = distrib_type(k, prefix).map(str::to_lowercase) else { return Ok(None) };
    Ok(Some(match t.as_str() {
        "exponential" => Gap::Exponential { lambda: k.req_real(&p("lambda"))? },
        "constant" => Gap::Constant { value: k.req_real(&p("constant"))? },
        "uniform" => Gap::Uniform { a: k.req_real(&p("a"))?, b: k.req_real(&p("b"))? },
        "normal" => Gap::Normal { mean: k.req_real(&p("mean"))?, stddev: k.req_real(&p("sd"))? },
        other => {
            return Err(gerr(
                k.line(&format!("{prefix}.type")),
                &format!("{prefix}.type"),
                format!("unknown type {other:?}; allowed: exponential, constant, uniform, normal"),
            ))
        }
    }))
}

fn value_size_of(k: &mut Keys, prefix: &str) -> Result<Option<ValueSize>, ConfigError> {
    let Some(g) = gap_of(k, prefix)? else { return Ok(None) };
    let to_u32 = |x: f64| x.round().clamp(0.0, f64::from(u32::MAX)) as u32;
    Ok(Some(match g {
        Gap::Constant { value } => ValueSize::Constant { bytes: to_u32(value) },
        Gap::Uniform { a, b } => ValueSize::Uniform { min: to_u32(a), max: to_u32(b) },
        Gap::Normal { mean, stddev } => ValueSize::Normal { mean, stddev },
        Gap::Exponential { lambda } => ValueSize::Exponential { mean: 1.0 / lambda },
    }))
}

fn popularity_of(
    k: &mut Keys,
    prefix: &str,
    keys: u64,
) -> Result<Option<KeyPopularity>, ConfigError> {
    let p = |n: &str| format!("{prefix}.params.{n}");
    let tkey = format!("{prefix}.type");
    let Some(t) = k.str(&tkey).map(str::to_lowercase) else { return Ok(None) };
    Ok(Some(match t.as_str() {
        "zipf" => KeyPopularity::Zipf { s: k.req_real(&p("s"))? },
        "sequential" => KeyPopularity::Sequential,
        "uniform" => {
            let a = k.uint(&p("a"))?;
            let b = k.uint(&p("b"))?;
            KeyPopularity::Uniform { min: a, max: b }
        }
        "hotspot" => {
            let h = k.req_real(&p("hotspotfraction"))?;
            let o = k.req_real(&p("hotoperationfraction"))?;
            k.notes.push(format!(
                "`{prefix}`: hotspot imported with hot_fraction = {h} and hot_op_fraction = {o}; \
                 Gadget itself runs it with hot fraction {o} and op fraction 0.5 (its config bug)"
            ));
            KeyPopularity::Hotspot { hot_fraction: h, hot_op_fraction: o }
        }
        "constant" => {
            let c = k.str(&p("constant")).unwrap_or("0").to_string();
            let key = c.parse::<u64>().unwrap_or_else(|_| {
                k.notes.push(format!("`{}`: key {c:?} is not an integer; hashed", p("constant")));
                super::source::fnv1a(c.as_bytes())
            });
            KeyPopularity::Constant { key }
        }
        other => {
            return Err(gerr(
                k.line(&tkey),
                &tkey,
                format!(
                    "unknown type {other:?}; allowed: zipf, uniform, hotspot, sequential, constant"
                ),
            ))
        }
    }))
    .map(|kp| {
        if matches!(kp, Some(KeyPopularity::Sequential)) && keys > 0 {
            k.notes.push(format!(
                "`{prefix}`: Gadget's sequential keys never repeat; Spillway's wrap after \
                 `keys` = {keys} keys"
            ));
        }
        kp
    })
}

fn source_of(
    k: &mut Keys,
    p: &str,
    events: Option<u64>,
    time_unit: &mut String,
) -> Result<Source, ConfigError> {
    let g = format!("{p}.event.generator");
    let key = |n: &str| format!("{g}.{n}");
    let mut s = Source { disorder: Disorder::Gadget, ..Source::default() };
    if let Some(w) = k.int(&key("watermark.frequency"))? {
        s.watermark_every = w;
    }
    let tkey = key("type");
    let ty = k.str(&tkey).map(str::to_lowercase);
    match ty.as_deref() {
        Some("gadget") | None => {
            if let Some(l) = k.int(&key("lateness.threshold"))? {
                s.lateness_bound = l;
            }
            let mut y = Synthetic::default();
            if let Some(e) = events {
                y.events = e;
            }
            let pop = format!("{g}.key.popularity.distrib");
            if let Some(n) = k.uint(&format!("{pop}.params.keyspacesize"))? {
                y.keys = n;
            }
            if let Some(kp) = popularity_of(k, &pop, y.keys)? {
                y.key_popularity = kp;
            }
            if let Some(gap) = gap_of(k, &format!("{g}.event.occurrence.gap.distrib"))? {
                y.gap = gap;
            }
            if let Some(pct) = k.real(&key("outoforder.percentage"))? {
                y.out_of_order = pct / 100.0;
                if pct > 0.0 {
                    k.notes.push(format!(
                        "`{}`: {pct}% imported as probability {}; Gadget's real share is \
                         floor(pct)/101 of events, and it loses the first event at or past \
                         each time-unit boundary (Spillway keeps them)",
                        key("outoforder.percentage"),
                        pct / 100.0
                    ));
                }
            }
            for n in ["key.index", "event.time.index", "event.type.index", "file.path"] {
                k.note(&key(n), "only used by `tracefile` sources");
            }
            s.input = SourceInput::Synthetic(y);
        }
        Some("tracefile") => {
            let col = |k: &mut Keys, n: &str| -> Result<Option<Column>, ConfigError> {
                Ok(k.uint(&key(n))?.map(|i| Column::Index(i as usize)))
            };
            let path = k
                .str(&key("file.path"))
                .ok_or_else(|| gerr(0, &key("file.path"), "required for a tracefile source"))?;
            let path = path.into();
            let kc = col(k, "key.index")?
                .ok_or_else(|| gerr(0, &key("key.index"), "required for a tracefile source"))?;
            let tc = col(k, "event.time.index")?.ok_or_else(|| {
                gerr(0, &key("event.time.index"), "required for a tracefile source")
            })?;
            k.note(
                &key("event.type.index"),
                "Spillway's events carry no type (use `csv.event_type` + `type_filter` in TOML \
                 to filter rows)",
            );
            *time_unit = "s".to_string();
            s.input = SourceInput::Csv(CsvInput {
                path,
                key: kc,
                time: tc,
                time_multiplier: 1e-6,
                header: false,
                event_type: None,
                type_filter: None,
            });
            k.note(&key("outoforder.percentage"), "only used by `gadget` sources");
            k.note(
                &key("lateness.threshold"),
                "only used by `gadget` sources (Gadget's trace source delivers rows in file order)",
            );
            k.note_prefix(&format!("{g}.key.popularity."), "only used by `gadget` sources");
            k.note_prefix(&format!("{g}.event.occurrence."), "only used by `gadget` sources");
        }
        Some(other) => {
            return Err(gerr(
                k.line(&tkey),
                &tkey,
                format!("unknown generator {other:?}; allowed: gadget, tracefile"),
            ))
        }
    }
    k.note_prefix(&format!("{g}.arrival."), "Gadget never uses the arrival distribution");
    Ok(s)
}

/// The Gadget key that a Spillway key of an imported experiment came from.
fn gadget_key(spillway: &str, kind: OperatorKind) -> String {
    if let Some(rest) = spillway.strip_prefix("source[") {
        let (idx, field) = rest.split_once("].").unwrap_or((rest, ""));
        let p = if idx == "1" { "second" } else { "first" };
        let g = format!("{p}.event.generator");
        return match field.split('.').next().unwrap_or("") {
            "events" => "expected.num.operations".to_string(),
            "keys" => format!("{g}.key.popularity.distrib.params.keyspacesize"),
            "key_popularity" => format!("{g}.key.popularity.distrib.params"),
            "gap" => format!("{g}.event.occurrence.gap.distrib.params"),
            "out_of_order" => format!("{g}.outoforder.percentage"),
            "lateness_bound" => format!("{g}.lateness.threshold"),
            "watermark_every" => format!("{g}.watermark.frequency"),
            "value_size" => "operator.value.size.distrib.params".to_string(),
            "csv" => format!("{g}.file.path"),
            _ => g,
        };
    }
    match spillway {
        "operator.window" | "operator.session_gap" => "window.length",
        "operator.slide" => "sliding.length",
        "operator.lower" => "lower.bound",
        "operator.upper" => "upper.bound",
        "operator.allowed_lateness" => "lateness.length",
        "operator.key_bytes" => "operator.key.size.distrib.params.constant",
        "source" if kind.two_inputs() => "second.event.generator.type",
        _ => "operator.type",
    }
    .to_string()
}

/// Imports a Gadget config (see the module docs).
pub fn import_gadget_config(text: &str) -> Result<Imported, ConfigError> {
    let mut k = Keys::parse(text)?;
    let okey = "operator.type";
    let name = k.str(okey).ok_or_else(|| gerr(0, okey, "required"))?.to_lowercase();
    let kind = match OperatorKind::parse(&name) {
        Some(kind) => kind,
        None if name == "flink.replayer" || name == "ycsb.replayer" => {
            return Err(gerr(
                k.line(okey),
                okey,
                format!(
                "{name:?} replays a trace file; it is not an experiment (use the trace replayer)"
            ),
            ))
        }
        None => {
            let all: Vec<&str> = OperatorKind::ALL.iter().map(|k| k.name()).collect();
            return Err(gerr(
                k.line(okey),
                okey,
                format!("unknown operator {name:?}; allowed: {}", all.join(", ")),
            ));
        }
    };
    let mut e = Experiment { sources: Vec::new(), ..Experiment::default() };
    e.operator.kind = kind;
    let budget = k.uint("expected.num.operations")?;
    e.run.max_ops = budget;
    let mut time_unit = e.time_unit.clone();
    e.sources.push(source_of(&mut k, "first", budget, &mut time_unit)?);
    if kind.two_inputs() {
        e.sources.push(source_of(&mut k, "second", budget, &mut time_unit)?);
    } else {
        k.note_prefix("second.", "one-input operators read only the first source");
    }
    e.time_unit = time_unit;
    if let Some(w) = k.int("window.length")? {
        if matches!(kind, OperatorKind::SessionHolistic | OperatorKind::SessionIncremental) {
            e.operator.session_gap = w;
        } else {
            e.operator.window = w;
        }
    }
    if let Some(s) = k.int("sliding.length")? {
        e.operator.slide = s;
    }
    if let Some(v) = k.int("lower.bound")? {
        e.operator.lower = v;
    }
    if let Some(v) = k.int("upper.bound")? {
        e.operator.upper = v;
    }
    let allowed = k.str("allowed.lateness").map(str::to_lowercase);
    match allowed.as_deref() {
        Some("true") => e.operator.allowed_lateness = k.int("lateness.length")?.unwrap_or(0),
        Some("false") | None => k.note(
            "lateness.length",
            "`allowed.lateness` is not true (Gadget's window operators would use it anyway)",
        ),
        Some(v) => {
            return Err(gerr(
                k.line("allowed.lateness"),
                "allowed.lateness",
                format!("expected true or false, got {v:?}"),
            ))
        }
    }
    if let Some(vs) = value_size_of(&mut k, "operator.value.size.distrib")? {
        for s in &mut e.sources {
            s.value_size = vs.clone();
        }
    }
    let ks = "operator.key.size.distrib";
    if let Some(g) = gap_of(&mut k, ks)? {
        let bytes = g.mean().round().max(1.0) as usize;
        if !matches!(g, Gap::Constant { .. }) {
            k.notes.push(format!(
                "`{ks}`: state keys have a fixed length in Spillway; using the mean, {bytes} bytes"
            ));
        }
        e.operator.key_bytes = bytes;
    }
    if k.str("operator.key.popularity.distrib.type").is_some_and(|t| t != "sequential") {
        k.notes.push(
            "`operator.key.popularity.distrib.type`: Spillway's operators number state keys \
             sequentially (Gadget's recommended setting)"
                .to_string(),
        );
    }
    k.note_prefix("operator.key.popularity.", "state keys are built by the operators");
    k.note_prefix("operator.service.time.", "Gadget never uses the service time");
    k.note("trace.file.path", "only used by Gadget's replayers");
    k.note_prefix("wrapper.", "the sink is chosen by `[run]` (mode, stores)");
    e.validate().map_err(|err| match err {
        ConfigError::Invalid { key, message } => {
            let gk = gadget_key(&key, kind);
            ConfigError::Gadget {
                line: k.line(&gk),
                key: gk,
                message: format!("{message} (Spillway key `{key}`)"),
            }
        }
        other => other,
    })?;
    Ok(Imported { experiment: e, notes: k.notes })
}

/// Whether `text` looks like a Gadget `key=value` file rather than TOML: its first
/// meaningful line has a bare dotted key Gadget knows.
pub fn looks_like_gadget(text: &str) -> bool {
    text.lines()
        .map(|l| l.chars().filter(|c| !c.is_whitespace()).collect::<String>())
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_once('=').map(|(k, _)| k.to_lowercase()))
        .is_some_and(|k| k.contains('.') && known_key(&k))
}

/// Loads an experiment file: TOML if the name ends in `.toml`, otherwise Gadget's
/// format if [`looks_like_gadget`], else TOML. Relative input paths are resolved
/// against the file's directory.
pub fn load_experiment(path: &Path) -> Result<Imported, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::Io { path: path.to_path_buf(), message: e.to_string() })?;
    let toml = path.extension().is_some_and(|x| x.eq_ignore_ascii_case("toml"));
    let mut imported = if !toml && looks_like_gadget(&text) {
        import_gadget_config(&text)?
    } else {
        Imported { experiment: Experiment::from_toml_str(&text)?, notes: Vec::new() }
    };
    if let Some(dir) = path.parent() {
        imported.experiment.resolve_paths(dir);
    }
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::config::LoopMode;

    /// Gadget's `configs/config.txt` (notes §2.6), with its comment style, spacing and
    /// the stray `;`.
    const CONFIG_TXT: &str = include_str!("../../tests/data/gadget-config.txt");

    /// Gadget's `configs/config2.txt` (notes §2.6): two trace sources.
    const CONFIG2_TXT: &str = "\
first.event.generator.type = tracefile
first.event.generator.file.path = Tasks-Input.txt
first.event.generator.key.index = 0
first.event.generator.event.time.index = 2
first.event.generator.event.type.index = 4
first.event.generator.watermark.frequency = 1
second.event.generator.type = tracefile
second.event.generator.file.path = jobs.txt
second.event.generator.key.index = 0
second.event.generator.event.time.index = 1
second.event.generator.event.type.index = 2
second.event.generator.watermark.frequency = 1
operator.type = continuous.join
expected.num.operations = 1000
operator.key.popularity.distrib.type = sequential
operator.key.popularity.distrib.params.keyspacesize = 100
operator.key.size.distrib.type = constant
operator.key.size.distrib.params.constant = 10
operator.value.size.distrib.type = constant
operator.value.size.distrib.params.constant = 10
trace.file.path = -
wrapper.type = rocksdb
wrapper.path = /tmp/db
";

    #[test]
    fn imports_the_reference_config() {
        let Imported { experiment: e, notes } = import_gadget_config(CONFIG_TXT).unwrap();
        assert_eq!(e.operator.kind, OperatorKind::TumblingKeyedIncremental);
        assert_eq!((e.operator.window, e.operator.slide, e.operator.key_bytes), (5, 1, 10));
        assert_eq!(e.run.max_ops, Some(100_000));
        assert_eq!(e.sources.len(), 1);
        let s = &e.sources[0];
        assert_eq!((s.watermark_every, s.lateness_bound), (1, 3));
        // Gadget's meaning of the threshold: delayed delivery, no trailing watermark.
        assert_eq!(s.disorder, Disorder::Gadget);
        assert_eq!(s.value_size, ValueSize::Constant { bytes: 10 });
        let SourceInput::Synthetic(y) = &s.input else { panic!("{s:?}") };
        assert_eq!(y.key_popularity, KeyPopularity::Zipf { s: 1.0 });
        assert_eq!(y.keys, 1_000_000);
        assert_eq!(y.gap, Gap::Exponential { lambda: 10.0 });
        assert_eq!(y.out_of_order, 0.02);
        assert_eq!(y.events, 100_000);
        let all = notes.join("\n");
        assert!(all.contains("wrapper.type") && all.contains("wrapper.path"), "{all}");
        assert!(all.contains("lateness.threshold") && all.contains("\";\""), "{all}");
        // The import is a valid experiment that survives a TOML round trip.
        assert_eq!(Experiment::from_toml_str(&e.to_toml()).unwrap(), e);
    }

    #[test]
    fn imports_two_trace_sources_keeping_path_case() {
        let Imported { experiment: e, notes } = import_gadget_config(CONFIG2_TXT).unwrap();
        assert_eq!(e.operator.kind, OperatorKind::ContinuousJoin);
        assert_eq!(e.time_unit, "s");
        let SourceInput::Csv(c) = &e.sources[0].input else { panic!() };
        assert_eq!(c.path, Path::new("Tasks-Input.txt"));
        assert_eq!((c.key.clone(), c.time.clone()), (Column::Index(0), Column::Index(2)));
        assert_eq!(c.time_multiplier, 1e-6);
        let SourceInput::Csv(c) = &e.sources[1].input else { panic!() };
        assert_eq!(c.time, Column::Index(1));
        assert!(e.sources.iter().all(|s| s.disorder == Disorder::Gadget && s.lateness_bound == 0));
        let all = notes.join("\n");
        for k in ["event.type.index", "trace.file.path", "wrapper.type"] {
            assert!(all.contains(k), "{k} missing from notes:\n{all}");
        }
    }

    #[test]
    fn wrapper_key_alone_gives_a_note() {
        let i = import_gadget_config("operator.type=continuous.aggregation\nwrapper.type=file\n")
            .unwrap();
        assert_eq!(i.notes.len(), 1, "{:?}", i.notes);
        assert!(i.notes[0].contains("wrapper.type") && i.notes[0].contains("line 2"));
        assert_eq!(i.experiment.run.loop_mode, LoopMode::Closed);
    }

    #[test]
    fn unknown_and_bad_keys_are_named() {
        let e =
            import_gadget_config("operator.type = join.tumbling\nwindow.lenght = 5\n").unwrap_err();
        assert_eq!(e.key(), Some("window.lenght"));
        assert!(e.to_string().contains("line 2") && e.to_string().contains("window.lenght"), "{e}");
        let e = import_gadget_config("first.event.generator.key.popularity.distrib.params.z=1\n")
            .unwrap_err();
        assert!(e.to_string().contains("params.z"), "{e}");
        let e = import_gadget_config("window.length = 5\n").unwrap_err();
        assert_eq!(e.key(), Some("operator.type"));
        let e = import_gadget_config("operator.type = ycsb.replayer\n").unwrap_err();
        assert!(e.to_string().contains("replays"), "{e}");
        let e = import_gadget_config("operator.type = sliding.all.holistic\nwindow.length = x\n")
            .unwrap_err();
        assert_eq!(e.key(), Some("window.length"));
        // Validation errors name the Gadget key.
        let e = import_gadget_config(
            "operator.type = sliding.all.holistic\nwindow.length = 2\nsliding.length = 3\n",
        )
        .unwrap_err();
        assert_eq!(e.key(), Some("sliding.length"), "{e}");
        assert!(e.to_string().contains("line 3"), "{e}");
        let e = import_gadget_config(
            "operator.type = tumbling.all.holistic\n\
             first.event.generator.outoforder.percentage = 5\n",
        )
        .unwrap_err();
        assert_eq!(e.key(), Some("first.event.generator.lateness.threshold"), "{e}");
        let e = import_gadget_config(
            "operator.type = tumbling.all.holistic\n\
             first.event.generator.event.occurrence.gap.distrib.type = poisson\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("poisson") && e.to_string().contains("exponential"), "{e}");
    }

    #[test]
    fn session_window_length_is_the_gap_and_hotspot_is_fixed() {
        let i = import_gadget_config(
            "operator.type = session.holistic\nwindow.length = 120\n\
             first.event.generator.key.popularity.distrib.type = hotspot\n\
             first.event.generator.key.popularity.distrib.params.keyspacesize = 100\n\
             first.event.generator.key.popularity.distrib.params.hotspotfraction = 0.1\n\
             first.event.generator.key.popularity.distrib.params.hotoperationfraction = 0.9\n\
             allowed.lateness = true\nlateness.length = 4\n\
             second.event.generator.type = gadget\n",
        )
        .unwrap();
        assert_eq!(i.experiment.operator.session_gap, 120);
        assert_eq!(i.experiment.operator.window, 5);
        assert_eq!(i.experiment.operator.allowed_lateness, 4);
        let SourceInput::Synthetic(y) = &i.experiment.sources[0].input else { panic!() };
        assert_eq!(
            y.key_popularity,
            KeyPopularity::Hotspot { hot_fraction: 0.1, hot_op_fraction: 0.9 }
        );
        assert!(i.notes.iter().any(|n| n.contains("second.event.generator.type")), "{:?}", i.notes);
    }

    #[test]
    fn load_picks_the_format() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path().join("config.txt");
        std::fs::write(&g, CONFIG2_TXT).unwrap();
        let i = load_experiment(&g).unwrap();
        let SourceInput::Csv(c) = &i.experiment.sources[1].input else { panic!() };
        assert_eq!(c.path, dir.path().join("jobs.txt"));
        let t = dir.path().join("exp.toml");
        std::fs::write(&t, "seed = 3\n").unwrap();
        assert_eq!(load_experiment(&t).unwrap().experiment.seed, 3);
        // A TOML file without the extension is sniffed as TOML.
        let t2 = dir.path().join("exp.conf");
        std::fs::write(&t2, "# comment\nseed = 4\n[operator]\nwindow = 7\n").unwrap();
        assert_eq!(load_experiment(&t2).unwrap().experiment.operator.window, 7);
        assert!(looks_like_gadget(CONFIG_TXT));
        assert!(!looks_like_gadget(crate::workload::config::EXAMPLE_TOML));
    }

    #[test]
    fn imported_reference_config_streams_without_loss() {
        let mut e = import_gadget_config(CONFIG_TXT).unwrap().experiment;
        if let SourceInput::Synthetic(y) = &mut e.sources[0].input {
            y.events = 20_000;
        }
        let mut s = crate::workload::source::EventStream::new(&e).unwrap();
        let n = s.by_ref().filter(|i| matches!(i, crate::workload::StreamItem::Event(_))).count();
        assert_eq!(n, 20_000);
        let c = s.counts();
        assert_eq!((c.generated, c.emitted), (20_000, 20_000));
        // About 2% delivered 1-3 units late, each behind the watermark of its own unit.
        assert!((300..=500).contains(&c.out_of_order), "{c:?}");
        assert_eq!(c.late, c.out_of_order);
    }

    #[test]
    fn tracefile_threshold_is_noted_not_used() {
        let i = import_gadget_config(
            "operator.type = continuous.aggregation
\
             first.event.generator.type = tracefile
\
             first.event.generator.file.path = t.csv
\
             first.event.generator.key.index = 0
\
             first.event.generator.event.time.index = 1
\
             first.event.generator.lateness.threshold = 3
",
        )
        .unwrap();
        assert_eq!(i.experiment.sources[0].lateness_bound, 0);
        assert!(
            i.notes.iter().any(|n| n.contains("line 6") && n.contains("lateness.threshold")),
            "{:?}",
            i.notes
        );
    }
}
