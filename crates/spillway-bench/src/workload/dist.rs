//! Distributions of the synthetic event sources: key popularity, event-time gaps and
//! value sizes (Gadget notes §3), as configuration values (serde, used by
//! [`super::config`]) and as samplers.
//!
//! Every sampler draws from a caller-provided [`StdRng`], so a stream is a pure function
//! of its seed. Unlike Gadget (one `random_device` per draw), nothing here reads the OS
//! entropy source.
//!
//! Key popularity returns a key *rank* in `0..keys` (rank 0 is the hottest for zipf):
//!
//! | `type` | parameters (default) | key drawn |
//! |---|---|---|
//! | `uniform` | `min` (0), `max` (`keys - 1`) | uniform integer in `[min, max]`, then `% keys` (Gadget's `uniform` with `a`, `b`) |
//! | `zipf` | `s` (1.0) | `P(rank r) ∝ 1/(r+1)^s` over `keys` ranks, exact for any `s > 0` (including 1) by rejection-inversion (Hörmann and Derflinger, 1996), O(1) memory |
//! | `hotspot` | `hot_fraction` (0.2), `hot_op_fraction` (0.8) | `H = round(hot_fraction * keys)`; with probability `hot_op_fraction` a uniform key in `[0, H)`, otherwise one in `[H, keys)` |
//! | `sequential` | none | `0, 1, 2, ...` wrapping at `keys` |
//! | `constant` | `key` (0) | always `key` |
//! | `latest` | `s` (0.99), `insert_fraction` (0.05) | YCSB's "latest": the keys `0..keys` exist at the start; with probability `insert_fraction` the event inserts the next new key (`keys`, `keys + 1`, ...), otherwise it picks `newest - z` with `z` zipf(`s`) over the number of existing keys |
//! | `empirical` | `path` (required) | keys and weights read from a file (see [`Empirical`]); `keys` is not used |
//!
//! Event-time gaps (time units between consecutive events of one source, never
//! negative): `constant` (`value`, default 0.1), `exponential` (`lambda`, default 10: a
//! Poisson process with mean gap `1/lambda`), `uniform` (`a`, `b`: real in `[a, b)`),
//! `normal` (`mean`, `stddev`, clamped at 0).
//!
//! Value sizes in bytes: `constant` (`bytes`, default 10, may be 0), `uniform` (`min`,
//! `max`, inclusive integers), `normal` (`mean`, `stddev`), `exponential` (`mean`); the
//! random ones are rounded and clamped to at least 1 byte.

use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// An error building a sampler (bad parameters or an unreadable empirical file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistError {
    /// The file involved, if any.
    pub path: Option<PathBuf>,
    /// 1-based line in that file, if any.
    pub line: Option<usize>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{}", p.display())?;
            if let Some(l) = self.line {
                write!(f, ":{l}")?;
            }
            f.write_str(": ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for DistError {}

fn default_s() -> f64 {
    1.0
}
fn default_latest_s() -> f64 {
    0.99
}
fn default_insert_fraction() -> f64 {
    0.05
}
fn default_hot_fraction() -> f64 {
    0.2
}
fn default_hot_op_fraction() -> f64 {
    0.8
}
fn default_lambda() -> f64 {
    10.0
}
fn default_gap_constant() -> f64 {
    0.1
}
fn default_value_bytes() -> u32 {
    10
}

/// Key popularity of a synthetic source (TOML: `key_popularity = { type = "zipf", s = 1.0 }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum KeyPopularity {
    /// Uniform over `[min, max]` (defaults `0` and `keys - 1`), then `% keys`.
    Uniform {
        /// Smallest key drawn (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u64>,
        /// Largest key drawn (default `keys - 1`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u64>,
    },
    /// Zipf with exponent `s > 0` over ranks `0..keys`.
    Zipf {
        /// Exponent (default 1.0, Gadget's reference config).
        #[serde(default = "default_s")]
        s: f64,
    },
    /// A hot set of keys receives a fixed share of the events.
    Hotspot {
        /// Fraction of the keys that are hot, in `[0, 1]` (default 0.2).
        #[serde(default = "default_hot_fraction")]
        hot_fraction: f64,
        /// Fraction of the events that go to hot keys, in `[0, 1]` (default 0.8).
        #[serde(default = "default_hot_op_fraction")]
        hot_op_fraction: f64,
    },
    /// `0, 1, 2, ...`, wrapping at `keys`.
    Sequential,
    /// Always the same key.
    Constant {
        /// The key (default 0).
        #[serde(default)]
        key: u64,
    },
    /// YCSB's "latest": zipf over recency of the inserted keys.
    Latest {
        /// Zipf exponent over recency (default 0.99, YCSB's).
        #[serde(default = "default_latest_s")]
        s: f64,
        /// Probability that an event inserts a new key, in `[0, 1]` (default 0.05).
        #[serde(default = "default_insert_fraction")]
        insert_fraction: f64,
    },
    /// Keys and weights from a file (see [`Empirical`]).
    Empirical {
        /// The file.
        path: PathBuf,
    },
}

impl Default for KeyPopularity {
    /// Gadget's reference config: zipf with `s = 1`.
    fn default() -> Self {
        KeyPopularity::Zipf { s: 1.0 }
    }
}

/// Checks that `p` is a probability.
fn check_prob(name: &str, p: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("`{name}` must be a probability in [0, 1], got {p}"))
    }
}

fn check_positive(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(format!("`{name}` must be a finite number > 0, got {v}"))
    }
}

fn check_nonneg(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("`{name}` must be a finite number >= 0, got {v}"))
    }
}

impl KeyPopularity {
    /// The `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            KeyPopularity::Uniform { .. } => "uniform",
            KeyPopularity::Zipf { .. } => "zipf",
            KeyPopularity::Hotspot { .. } => "hotspot",
            KeyPopularity::Sequential => "sequential",
            KeyPopularity::Constant { .. } => "constant",
            KeyPopularity::Latest { .. } => "latest",
            KeyPopularity::Empirical { .. } => "empirical",
        }
    }

    /// Checks the parameters against `keys`; the error names the parameter and what is
    /// allowed.
    pub fn validate(&self, keys: u64) -> Result<(), String> {
        match *self {
            KeyPopularity::Uniform { min, max } => {
                let lo = min.unwrap_or(0);
                let hi = max.unwrap_or(keys.saturating_sub(1));
                if lo > hi {
                    return Err(format!("`min` ({lo}) must be <= `max` ({hi})"));
                }
                Ok(())
            }
            KeyPopularity::Zipf { s } => check_positive("s", s),
            KeyPopularity::Hotspot { hot_fraction, hot_op_fraction } => {
                check_prob("hot_fraction", hot_fraction)?;
                check_prob("hot_op_fraction", hot_op_fraction)
            }
            KeyPopularity::Latest { s, insert_fraction } => {
                check_positive("s", s)?;
                check_prob("insert_fraction", insert_fraction)
            }
            KeyPopularity::Sequential
            | KeyPopularity::Constant { .. }
            | KeyPopularity::Empirical { .. } => Ok(()),
        }
    }

    /// Builds the sampler over `keys` keys (reads the file of `empirical`).
    pub fn sampler(&self, keys: u64) -> Result<KeySampler, DistError> {
        let bad = |message: String| DistError { path: None, line: None, message };
        if keys == 0 && !matches!(self, KeyPopularity::Empirical { .. }) {
            return Err(bad("the key space must hold at least one key".into()));
        }
        self.validate(keys).map_err(bad)?;
        Ok(match *self {
            KeyPopularity::Uniform { min, max } => {
                KeySampler::Uniform { lo: min.unwrap_or(0), hi: max.unwrap_or(keys - 1), keys }
            }
            KeyPopularity::Zipf { s } => KeySampler::Zipf(ZipfRi::new(keys, s)),
            KeyPopularity::Hotspot { hot_fraction, hot_op_fraction } => {
                let hot = ((hot_fraction * keys as f64).round() as u64).min(keys);
                KeySampler::Hotspot { hot, keys, hot_op_fraction }
            }
            KeyPopularity::Sequential => KeySampler::Sequential { next: 0, keys },
            KeyPopularity::Constant { key } => KeySampler::Constant(key),
            KeyPopularity::Latest { s, insert_fraction } => {
                KeySampler::Latest { existing: keys, s, insert_fraction }
            }
            KeyPopularity::Empirical { ref path } => {
                KeySampler::Empirical(Empirical::from_file(path)?)
            }
        })
    }
}

/// Exact Zipf sampling over ranks `1..=n` with exponent `s > 0` by rejection-inversion
/// (W. Hörmann, G. Derflinger, "Rejection-inversion to generate variates from monotone
/// discrete distributions", 1996), as in Apache Commons' `ZipfDistribution`. O(1)
/// memory and setup; `s = 1` is handled by the series expansions of `helper1`/`helper2`.
#[derive(Clone, Debug)]
pub struct ZipfRi {
    n: u64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    squeeze: f64,
}

fn helper1(x: f64) -> f64 {
    // log1p(x) / x
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - x * 0.25))
    }
}

fn helper2(x: f64) -> f64 {
    // expm1(x) / x
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + x * 0.25))
    }
}

impl ZipfRi {
    /// Ranks `0..n` (`n >= 1`), exponent `s > 0`.
    pub fn new(n: u64, s: f64) -> ZipfRi {
        let mut z = ZipfRi { n: n.max(1), s, h_integral_x1: 0.0, h_integral_n: 0.0, squeeze: 0.0 };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n as f64 + 0.5);
        z.squeeze = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// Same exponent, `n` ranks (cheap: two logarithms).
    pub fn with_n(&self, n: u64) -> ZipfRi {
        let mut z = self.clone();
        z.n = n.max(1);
        z.h_integral_n = z.h_integral(z.n as f64 + 0.5);
        z
    }

    /// Number of ranks.
    pub fn n(&self) -> u64 {
        self.n
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// Draws a rank in `0..n` (0 is the most frequent).
    pub fn sample(&self, rng: &mut StdRng) -> u64 {
        loop {
            let r: f64 = rng.random();
            let u = self.h_integral_n + r * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).clamp(1.0, self.n as f64) as u64;
            let kf = k as f64;
            if kf - x <= self.squeeze || u >= self.h_integral(kf + 0.5) - self.h(kf) {
                return k - 1;
            }
        }
    }

    /// The exact probability of rank `r` (computes `zeta(n, s)`: linear in `n`; for
    /// tests and reports).
    pub fn probability(&self, r: u64) -> f64 {
        if r >= self.n {
            return 0.0;
        }
        let zeta: f64 = (1..=self.n).map(|i| (i as f64).powf(-self.s)).sum();
        ((r + 1) as f64).powf(-self.s) / zeta
    }
}

/// An empirical key distribution read from a text file. Each non-blank line that does
/// not start with `#` holds `key weight` (separated by whitespace or one comma): `key` a
/// non-negative integer, `weight` a finite number `>= 0`. Keys are drawn with probability
/// proportional to their weight (a key listed twice adds its weights). At least one
/// weight must be positive.
#[derive(Clone, Debug)]
pub struct Empirical {
    keys: Vec<u64>,
    cum: Vec<f64>,
}

impl Empirical {
    /// Reads the file.
    pub fn from_file(path: &Path) -> Result<Empirical, DistError> {
        let err = |line: Option<usize>, message: String| DistError {
            path: Some(path.to_path_buf()),
            line,
            message,
        };
        let f = std::fs::File::open(path).map_err(|e| err(None, format!("cannot open: {e}")))?;
        let mut keys = Vec::new();
        let mut weights = Vec::new();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|e| err(Some(i + 1), format!("cannot read: {e}")))?;
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = t
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|f| !f.is_empty())
                .collect();
            if fields.len() != 2 {
                return Err(err(
                    Some(i + 1),
                    format!("expected `key weight` (two fields), got {:?}", t),
                ));
            }
            let k: u64 = fields[0].parse().map_err(|_| {
                err(
                    Some(i + 1),
                    format!("key: expected a non-negative integer, got {:?}", fields[0]),
                )
            })?;
            let w: f64 = fields[1]
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| {
                    err(Some(i + 1), format!("weight: expected a number >= 0, got {:?}", fields[1]))
                })?;
            keys.push(k);
            weights.push(w);
        }
        Empirical::new(keys, weights).map_err(|m| err(None, m))
    }

    /// From keys and their weights (same length, weights `>= 0`, one positive).
    pub fn new(keys: Vec<u64>, weights: Vec<f64>) -> Result<Empirical, String> {
        if keys.len() != weights.len() {
            return Err("as many weights as keys are needed".into());
        }
        let mut cum = Vec::with_capacity(weights.len());
        let mut total = 0.0;
        for w in weights {
            if !(w.is_finite() && w >= 0.0) {
                return Err(format!("weights must be finite and >= 0, got {w}"));
            }
            total += w;
            cum.push(total);
        }
        if total <= 0.0 {
            return Err("at least one weight must be positive".into());
        }
        Ok(Empirical { keys, cum })
    }

    /// Draws a key.
    pub fn sample(&self, rng: &mut StdRng) -> u64 {
        let total = *self.cum.last().unwrap_or(&0.0);
        let u: f64 = rng.random::<f64>() * total;
        // First entry whose cumulative weight exceeds u (skips zero-weight entries).
        let i = self.cum.partition_point(|&c| c <= u).min(self.keys.len() - 1);
        self.keys[i]
    }
}

/// A key sampler built by [`KeyPopularity::sampler`]; some variants carry state
/// (`sequential`, `latest`), none grows with the number of draws.
#[derive(Clone, Debug)]
pub enum KeySampler {
    /// See [`KeyPopularity::Uniform`].
    Uniform {
        /// Smallest key.
        lo: u64,
        /// Largest key.
        hi: u64,
        /// Key space (the draw is taken modulo it).
        keys: u64,
    },
    /// See [`KeyPopularity::Zipf`].
    Zipf(ZipfRi),
    /// See [`KeyPopularity::Hotspot`].
    Hotspot {
        /// Number of hot keys (`0..hot`).
        hot: u64,
        /// Key space.
        keys: u64,
        /// Share of draws that go to hot keys.
        hot_op_fraction: f64,
    },
    /// See [`KeyPopularity::Sequential`].
    Sequential {
        /// Next key.
        next: u64,
        /// Key space.
        keys: u64,
    },
    /// See [`KeyPopularity::Constant`].
    Constant(u64),
    /// See [`KeyPopularity::Latest`].
    Latest {
        /// Keys inserted so far (`0..existing`).
        existing: u64,
        /// Zipf exponent over recency.
        s: f64,
        /// Insert probability.
        insert_fraction: f64,
    },
    /// See [`KeyPopularity::Empirical`].
    Empirical(Empirical),
}

impl KeySampler {
    /// Draws the next key.
    pub fn sample(&mut self, rng: &mut StdRng) -> u64 {
        match self {
            KeySampler::Uniform { lo, hi, keys } => rng.random_range(*lo..=*hi) % *keys,
            KeySampler::Zipf(z) => z.sample(rng),
            KeySampler::Hotspot { hot, keys, hot_op_fraction } => {
                let to_hot = rng.random::<f64>() < *hot_op_fraction;
                if (to_hot && *hot > 0) || *hot == *keys {
                    rng.random_range(0..*hot)
                } else {
                    rng.random_range(*hot..*keys)
                }
            }
            KeySampler::Sequential { next, keys } => {
                let k = *next;
                *next = (k + 1) % *keys;
                k
            }
            KeySampler::Constant(k) => *k,
            KeySampler::Latest { existing, s, insert_fraction } => {
                if rng.random::<f64>() < *insert_fraction {
                    let k = *existing;
                    *existing += 1;
                    return k;
                }
                // Rebuilding the rejection-inversion constants costs a few logarithms.
                let z = ZipfRi::new(*existing, *s);
                *existing - 1 - z.sample(rng)
            }
            KeySampler::Empirical(e) => e.sample(rng),
        }
    }
}

/// Distribution of the event-time gap between consecutive events of a source
/// (TOML: `gap = { type = "exponential", lambda = 10.0 }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Gap {
    /// Always `value` time units.
    Constant {
        /// The gap (default 0.1).
        #[serde(default = "default_gap_constant")]
        value: f64,
    },
    /// Exponential with rate `lambda` (a Poisson process, mean gap `1/lambda`).
    Exponential {
        /// Rate, events per time unit (default 10).
        #[serde(default = "default_lambda")]
        lambda: f64,
    },
    /// Uniform real in `[a, b)`.
    Uniform {
        /// Lower bound (>= 0).
        a: f64,
        /// Upper bound (>= a).
        b: f64,
    },
    /// Normal, clamped at 0.
    Normal {
        /// Mean.
        mean: f64,
        /// Standard deviation (>= 0).
        stddev: f64,
    },
}

impl Default for Gap {
    /// Gadget's reference config: exponential with `lambda = 10`.
    fn default() -> Self {
        Gap::Exponential { lambda: 10.0 }
    }
}

/// A standard normal variate (Box-Muller; one of the pair is discarded so that every
/// draw consumes exactly two uniforms).
fn std_normal(rng: &mut StdRng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// An exponential variate with rate `lambda`.
fn exponential(rng: &mut StdRng, lambda: f64) -> f64 {
    let u: f64 = rng.random(); // [0, 1)
    -(1.0 - u).ln() / lambda
}

impl Gap {
    /// Checks the parameters; the error names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Gap::Constant { value } => check_nonneg("value", value),
            Gap::Exponential { lambda } => check_positive("lambda", lambda),
            Gap::Uniform { a, b } => {
                check_nonneg("a", a)?;
                check_nonneg("b", b)?;
                if a > b {
                    return Err(format!("`a` ({a}) must be <= `b` ({b})"));
                }
                Ok(())
            }
            Gap::Normal { mean, stddev } => {
                if !mean.is_finite() {
                    return Err(format!("`mean` must be finite, got {mean}"));
                }
                check_nonneg("stddev", stddev)
            }
        }
    }

    /// The mean gap before clamping (for reports).
    pub fn mean(&self) -> f64 {
        match *self {
            Gap::Constant { value } => value,
            Gap::Exponential { lambda } => 1.0 / lambda,
            Gap::Uniform { a, b } => (a + b) / 2.0,
            Gap::Normal { mean, .. } => mean,
        }
    }

    /// Draws a gap (`>= 0`).
    pub fn sample(&self, rng: &mut StdRng) -> f64 {
        let g = match *self {
            Gap::Constant { value } => value,
            Gap::Exponential { lambda } => exponential(rng, lambda),
            Gap::Uniform { a, b } => {
                if a < b {
                    rng.random_range(a..b)
                } else {
                    a
                }
            }
            Gap::Normal { mean, stddev } => mean + stddev * std_normal(rng),
        };
        g.max(0.0)
    }
}

/// Distribution of event payload sizes in bytes
/// (TOML: `value_size = { type = "constant", bytes = 10 }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ValueSize {
    /// Always `bytes` (0 allowed).
    Constant {
        /// Size (default 10, Gadget's reference config).
        #[serde(default = "default_value_bytes")]
        bytes: u32,
    },
    /// Uniform integer in `[min, max]`, at least 1.
    Uniform {
        /// Smallest size.
        min: u32,
        /// Largest size.
        max: u32,
    },
    /// Normal, rounded, at least 1.
    Normal {
        /// Mean size.
        mean: f64,
        /// Standard deviation (>= 0).
        stddev: f64,
    },
    /// Exponential with the given mean, rounded, at least 1.
    Exponential {
        /// Mean size (> 0).
        mean: f64,
    },
}

impl Default for ValueSize {
    /// Gadget's reference config: constant 10 bytes.
    fn default() -> Self {
        ValueSize::Constant { bytes: 10 }
    }
}

impl ValueSize {
    /// Checks the parameters; the error names the parameter.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            ValueSize::Constant { .. } => Ok(()),
            ValueSize::Uniform { min, max } => {
                if min > max {
                    return Err(format!("`min` ({min}) must be <= `max` ({max})"));
                }
                Ok(())
            }
            ValueSize::Normal { mean, stddev } => {
                if !mean.is_finite() {
                    return Err(format!("`mean` must be finite, got {mean}"));
                }
                check_nonneg("stddev", stddev)
            }
            ValueSize::Exponential { mean } => check_positive("mean", mean),
        }
    }

    /// Draws a size.
    pub fn sample(&self, rng: &mut StdRng) -> u32 {
        let clamp = |x: f64| x.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        match *self {
            ValueSize::Constant { bytes } => bytes,
            ValueSize::Uniform { min, max } => rng.random_range(min..=max).max(1),
            ValueSize::Normal { mean, stddev } => clamp(mean + stddev * std_normal(rng)),
            ValueSize::Exponential { mean } => clamp(exponential(rng, 1.0 / mean)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng(seed: u64) -> StdRng {
        StdRng::seed_from_u64(seed)
    }

    /// Observed share within 5 binomial standard deviations (plus 0.5% relative) of p.
    fn assert_share(count: u64, draws: u64, p: f64, what: &str) {
        let f = count as f64 / draws as f64;
        let tol = 5.0 * (p * (1.0 - p) / draws as f64).sqrt() + 0.005 * p;
        assert!((f - p).abs() <= tol, "{what}: observed {f:.5}, expected {p:.5} ± {tol:.5}");
    }

    fn zipf_shares(n: u64, s: f64, seed: u64) {
        let z = ZipfRi::new(n, s);
        let mut r = rng(seed);
        let draws = 400_000u64;
        let mut c = [0u64; 10];
        for _ in 0..draws {
            let k = z.sample(&mut r);
            assert!(k < n);
            if k < 10 {
                c[k as usize] += 1;
            }
        }
        let zeta: f64 = (1..=n).map(|i| (i as f64).powf(-s)).sum();
        for rank in [0usize, 1, 2, 9] {
            if (rank as u64) < n {
                let p = ((rank + 1) as f64).powf(-s) / zeta;
                assert_share(c[rank], draws, p, &format!("zipf n={n} s={s} rank {rank}"));
            }
        }
    }

    #[test]
    fn zipf_exact_for_s_one_and_others() {
        zipf_shares(1000, 1.0, 1);
        zipf_shares(1_000_000, 1.0, 2);
        zipf_shares(1000, 0.99, 3);
        zipf_shares(1000, 0.5, 4);
        zipf_shares(1000, 1.5, 5);
        zipf_shares(3, 2.0, 6);
        zipf_shares(1, 1.0, 7);
    }

    #[test]
    fn zipf_probability_matches_closed_form() {
        let z = ZipfRi::new(4, 1.0);
        let h = 1.0 + 0.5 + 1.0 / 3.0 + 0.25;
        assert!((z.probability(0) - 1.0 / h).abs() < 1e-12);
        assert_eq!(z.probability(4), 0.0);
    }

    #[test]
    fn hotspot_shares() {
        let mut s = KeyPopularity::Hotspot { hot_fraction: 0.1, hot_op_fraction: 0.9 }
            .sampler(1000)
            .unwrap();
        let mut r = rng(11);
        let draws = 200_000;
        let mut hot = 0;
        let mut hot_key_zero = 0;
        for _ in 0..draws {
            let k = s.sample(&mut r);
            assert!(k < 1000);
            if k < 100 {
                hot += 1;
            }
            if k == 0 {
                hot_key_zero += 1;
            }
        }
        assert_share(hot, draws, 0.9, "hot share");
        assert_share(hot_key_zero, draws, 0.9 / 100.0, "one hot key");
        // Degenerate splits never panic and stay in range.
        for (h, o) in [(0.0, 0.9), (1.0, 0.1), (0.5, 0.0), (0.5, 1.0)] {
            let mut s =
                KeyPopularity::Hotspot { hot_fraction: h, hot_op_fraction: o }.sampler(7).unwrap();
            for _ in 0..1000 {
                assert!(s.sample(&mut r) < 7);
            }
        }
    }

    #[test]
    fn uniform_range_and_mean() {
        let mut s = KeyPopularity::Uniform { min: None, max: None }.sampler(10).unwrap();
        let mut r = rng(3);
        let mut c = [0u64; 10];
        for _ in 0..100_000 {
            c[s.sample(&mut r) as usize] += 1;
        }
        for (k, &n) in c.iter().enumerate() {
            assert_share(n, 100_000, 0.1, &format!("uniform key {k}"));
        }
        // Gadget's uniform [a, b] % N.
        let mut s = KeyPopularity::Uniform { min: Some(5), max: Some(14) }.sampler(10).unwrap();
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            seen[s.sample(&mut r) as usize] = true;
        }
        assert!(seen.iter().all(|&b| b));
    }

    #[test]
    fn sequential_constant_wrap() {
        let mut s = KeyPopularity::Sequential.sampler(3).unwrap();
        let mut r = rng(0);
        let v: Vec<u64> = (0..7).map(|_| s.sample(&mut r)).collect();
        assert_eq!(v, [0, 1, 2, 0, 1, 2, 0]);
        let mut s = KeyPopularity::Constant { key: 42 }.sampler(3).unwrap();
        assert_eq!(s.sample(&mut r), 42);
    }

    #[test]
    fn latest_prefers_recent_keys_and_inserts() {
        let mut s = KeyPopularity::Latest { s: 0.99, insert_fraction: 0.1 }.sampler(1000).unwrap();
        let mut r = rng(5);
        let draws: u64 = 100_000;
        let mut inserts = 0;
        let mut newest_hits = 0u64;
        let mut newest = 999u64;
        for _ in 0..draws {
            let k = s.sample(&mut r);
            if k == newest + 1 {
                inserts += 1;
                newest = k;
            } else {
                assert!(k <= newest);
                if k == newest {
                    newest_hits += 1;
                }
            }
        }
        assert_share(inserts, draws, 0.1, "insert share");
        // The newest key is the zipf rank-0 key (share ≈ 0.9 / H(n, 0.99), n ≈ 1000..11000).
        let f = newest_hits as f64 / draws as f64;
        assert!(f > 0.08 && f < 0.16, "newest share {f}");
    }

    #[test]
    fn empirical_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cdf.txt");
        std::fs::write(&p, "# key weight\n7 3\n\n9, 1\n11 0\n").unwrap();
        let mut s = KeyPopularity::Empirical { path: p.clone() }.sampler(0).unwrap();
        let mut r = rng(9);
        let mut sevens = 0;
        for _ in 0..100_000 {
            let k = s.sample(&mut r);
            assert!(k == 7 || k == 9, "{k}");
            sevens += u64::from(k == 7);
        }
        assert_share(sevens, 100_000, 0.75, "key 7");
        std::fs::write(&p, "7 3\n8 x\n").unwrap();
        let e = KeyPopularity::Empirical { path: p.clone() }.sampler(0).unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.to_string().contains("weight"), "{e}");
        std::fs::write(&p, "7 0\n").unwrap();
        assert!(KeyPopularity::Empirical { path: p }.sampler(0).is_err());
    }

    #[test]
    fn gap_means_and_ranges() {
        let mut r = rng(21);
        let n: u64 = 200_000;
        let mean = |g: &Gap, r: &mut StdRng| (0..n).map(|_| g.sample(r)).sum::<f64>() / n as f64;
        let m = mean(&Gap::Exponential { lambda: 10.0 }, &mut r);
        // sd of the mean = 0.1 / sqrt(n) ≈ 0.00022
        assert!((m - 0.1).abs() < 0.0015, "exponential mean {m}");
        let g = Gap::Uniform { a: 2.0, b: 3.0 };
        for _ in 0..10_000 {
            let x = g.sample(&mut r);
            assert!((2.0..3.0).contains(&x), "{x}");
        }
        let m = mean(&g, &mut r);
        assert!((m - 2.5).abs() < 0.01, "uniform mean {m}");
        let m = mean(&Gap::Normal { mean: 1.0, stddev: 0.1 }, &mut r);
        assert!((m - 1.0).abs() < 0.005, "normal mean {m}");
        for _ in 0..10_000 {
            assert!(Gap::Normal { mean: 0.0, stddev: 1.0 }.sample(&mut r) >= 0.0);
        }
        assert_eq!(Gap::Constant { value: 0.25 }.sample(&mut r), 0.25);
    }

    #[test]
    fn value_sizes() {
        let mut r = rng(8);
        assert_eq!(ValueSize::Constant { bytes: 0 }.sample(&mut r), 0);
        for _ in 0..10_000 {
            let v = ValueSize::Uniform { min: 3, max: 5 }.sample(&mut r);
            assert!((3..=5).contains(&v));
            assert!(ValueSize::Exponential { mean: 2.0 }.sample(&mut r) >= 1);
            assert!(ValueSize::Normal { mean: 0.0, stddev: 5.0 }.sample(&mut r) >= 1);
        }
        let n: u64 = 100_000;
        let m = (0..n)
            .map(|_| f64::from(ValueSize::Exponential { mean: 100.0 }.sample(&mut r)))
            .sum::<f64>()
            / n as f64;
        assert!((m - 100.0).abs() < 2.0, "exponential value mean {m}");
    }

    #[test]
    fn validation_names_parameters() {
        let e = KeyPopularity::Hotspot { hot_fraction: 1.5, hot_op_fraction: 0.5 }
            .validate(10)
            .unwrap_err();
        assert!(e.contains("hot_fraction"), "{e}");
        assert!(KeyPopularity::Zipf { s: 0.0 }.validate(10).unwrap_err().contains("`s`"));
        assert!(Gap::Exponential { lambda: -1.0 }.validate().unwrap_err().contains("lambda"));
        assert!(Gap::Uniform { a: 3.0, b: 2.0 }.validate().is_err());
        assert!(ValueSize::Uniform { min: 3, max: 2 }.validate().is_err());
        assert!(KeyPopularity::Uniform { min: None, max: None }.sampler(0).is_err());
    }
}
