//! # spillway-units
//!
//! Parsing of the sizes and counts given on command lines and to the Python package
//! (`256MiB`, `10M`): a crate of its own with no dependencies, so the Python wheel and
//! the CLI share it without pulling in the benchmark harness.

use std::fmt;

/// A size or count that could not be parsed; its message says what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseUnitError {
    input: String,
    expected: &'static str,
}

impl fmt::Display for ParseUnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}; got {:?}", self.expected, self.input)
    }
}

impl std::error::Error for ParseUnitError {}

const SIZE_EXPECTED: &str = "a byte count with an optional unit: a plain number of bytes \
    (1000000), binary units KiB, MiB, GiB, TiB (256MiB = 268435456) or decimal units kB, MB, \
    GB, TB (1MB = 1000000); fractions such as 1.5GiB are allowed";

const COUNT_EXPECTED: &str = "a count: a plain number (1000000, 1_000_000) or one with a \
    decimal suffix k, M, G (10M = 10000000)";

/// Splits `s` into its numeric part and unit suffix and returns the number times the
/// unit's multiplier, rejecting negative, non-finite, overflowing and fractional-byte
/// results.
fn parse_with_units(
    s: &str,
    units: &[(&str, u64)],
    expected: &'static str,
) -> Result<u64, ParseUnitError> {
    let err = || ParseUnitError { input: s.to_string(), expected };
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(err());
    }
    let unit = unit.trim();
    let mult = units
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, m)| m)
        .ok_or_else(err)?;
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(err);
    }
    let x: f64 = num.parse().map_err(|_| err())?;
    let v = x * mult as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 || v.fract() != 0.0 {
        return Err(err());
    }
    Ok(v as u64)
}

/// Parses a byte size: `1000000`, `512KiB`, `256MiB`, `1GiB`, `1.5GiB`, `64MB`, `10 kB`.
/// Units are case-insensitive; `KiB`/`MiB`/`GiB`/`TiB` are powers of 1024 and
/// `kB`/`MB`/`GB`/`TB` powers of 1000. A bare `B` suffix is allowed.
pub fn parse_size(s: &str) -> Result<u64, ParseUnitError> {
    const UNITS: &[(&str, u64)] = &[
        ("", 1),
        ("b", 1),
        ("kib", 1 << 10),
        ("mib", 1 << 20),
        ("gib", 1 << 30),
        ("tib", 1 << 40),
        ("kb", 1_000),
        ("mb", 1_000_000),
        ("gb", 1_000_000_000),
        ("tb", 1_000_000_000_000),
    ];
    parse_with_units(s, UNITS, SIZE_EXPECTED)
}

/// A size given either in bytes or as a share of some whole (`--l1 64KiB` or `--l1 10%`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeOrShare {
    /// Bytes ([`parse_size`]'s forms).
    Bytes(u64),
    /// A percentage from 0 to 100.
    Percent(f64),
}

impl SizeOrShare {
    /// The size in bytes, a percentage being taken of `whole` (rounded down).
    pub fn of(self, whole: u64) -> u64 {
        match self {
            SizeOrShare::Bytes(b) => b,
            SizeOrShare::Percent(p) => (whole as f64 * p / 100.0) as u64,
        }
    }
}

/// Parses a size ([`parse_size`]) or a percentage from 0% to 100% (`10%`, `2.5 %`).
pub fn parse_size_or_share(s: &str) -> Result<SizeOrShare, ParseUnitError> {
    match s.trim().strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|x| (0.0..=100.0).contains(x))
            .map(SizeOrShare::Percent)
            .ok_or_else(|| ParseUnitError {
                input: s.to_string(),
                expected: "a percentage from 0% to 100%",
            }),
        None => parse_size(s).map(SizeOrShare::Bytes),
    }
}

/// Parses a count: `1000000`, `1_000_000`, `200k`, `10M`, `1G` (decimal multipliers).
pub fn parse_count(s: &str) -> Result<u64, ParseUnitError> {
    const UNITS: &[(&str, u64)] = &[("", 1), ("k", 1_000), ("m", 1_000_000), ("g", 1_000_000_000)];
    parse_with_units(s, UNITS, COUNT_EXPECTED)
}

/// Formats a byte count for people: `256 MiB`, `1.5 GiB`, `812 B`.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_or_shares() {
        assert_eq!(parse_size_or_share("64KiB").unwrap(), SizeOrShare::Bytes(64 << 10));
        assert_eq!(parse_size_or_share("10%").unwrap(), SizeOrShare::Percent(10.0));
        assert_eq!(parse_size_or_share("2.5 %").unwrap().of(1000), 25);
        assert_eq!(parse_size_or_share("0%").unwrap().of(1000), 0);
        let e = parse_size_or_share("150%").unwrap_err().to_string();
        assert!(e.contains("percentage from 0% to 100%"), "{e}");
        assert!(parse_size_or_share("ten%").is_err());
        assert!(parse_size_or_share("12XB").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1000000"), Ok(1_000_000));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("512kib"), Ok(512 << 10));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size(" 10 kB "), Ok(10_000));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn bad_sizes_say_what_is_accepted() {
        for bad in ["", "MiB", "12XB", "-1MiB", "1.5", "0.5B", "1.2.3MiB", "99999999999TiB"] {
            let e = parse_size(bad).expect_err(bad);
            let msg = e.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("256MiB"), "{msg}");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("10M"), Ok(10_000_000));
        assert_eq!(parse_count("200k"), Ok(200_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("2.5M"), Ok(2_500_000));
        assert!(parse_count("10MiB").is_err());
        assert!(parse_count("x").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(256 << 20), "256 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(812), "812 B");
    }
}
