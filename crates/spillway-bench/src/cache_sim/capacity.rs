//! Cache capacities: a count of entries (`5000`) or a percentage of a trace's distinct
//! keys (`5%`, `0.5%`).

use std::fmt;
use std::str::FromStr;

use super::SimError;

/// The largest capacity in entries (the policies index nodes with `u32`, and LIRS keeps
/// up to three nodes per entry).
pub const MAX_ENTRIES: u64 = 1 << 30;

/// A cache capacity as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    /// This many entries.
    Entries(u64),
    /// This percentage of the trace's distinct keys (rounded, at least 1 entry). Above
    /// 100 is allowed.
    Percent(f64),
}

impl Capacity {
    /// Parses `5000` or `5%`.
    pub fn parse(text: &str) -> Result<Capacity, SimError> {
        let bad = |reason| SimError::BadCapacity { text: text.to_string(), reason };
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            let p: f64 = p.trim().parse().map_err(|_| bad("not a number before `%`"))?;
            if !p.is_finite() || p <= 0.0 {
                return Err(bad("a percentage must be a finite number greater than 0"));
            }
            return Ok(Capacity::Percent(p));
        }
        let n: u64 = t.parse().map_err(|_| bad("not a whole number of entries"))?;
        match n {
            0 => Err(bad("a cache needs at least 1 entry")),
            n if n > MAX_ENTRIES => Err(bad("more than 2^30 entries")),
            n => Ok(Capacity::Entries(n)),
        }
    }

    /// The capacity in entries for a trace with `distinct` keys: a percentage is
    /// `round(distinct * p / 100)`, at least 1 (and at most [`MAX_ENTRIES`]).
    pub fn entries(self, distinct: usize) -> usize {
        let n = match self {
            Capacity::Entries(n) => n,
            Capacity::Percent(p) => ((distinct as f64 * p / 100.0).round() as u64).max(1),
        };
        n.min(MAX_ENTRIES) as usize
    }
}

impl FromStr for Capacity {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        Capacity::parse(s)
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capacity::Entries(n) => write!(f, "{n}"),
            Capacity::Percent(p) => write!(f, "{p}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entries_and_percentages() {
        assert_eq!(Capacity::parse("5000").unwrap(), Capacity::Entries(5000));
        assert_eq!(Capacity::parse("5%").unwrap(), Capacity::Percent(5.0));
        assert_eq!(Capacity::parse(" 0.5% ").unwrap(), Capacity::Percent(0.5));
        assert_eq!(Capacity::parse("150%").unwrap(), Capacity::Percent(150.0));
        assert_eq!(Capacity::Percent(5.0).to_string(), "5%");
        assert_eq!(Capacity::Percent(0.5).to_string(), "0.5%");
        assert_eq!(Capacity::Entries(7).to_string(), "7");
    }

    #[test]
    fn percentages_round_and_keep_one_entry() {
        // The traces' 1%, 5%, 20% of 9,939 distinct keys.
        assert_eq!(Capacity::Percent(1.0).entries(9939), 99);
        assert_eq!(Capacity::Percent(5.0).entries(9939), 497);
        assert_eq!(Capacity::Percent(20.0).entries(9939), 1988);
        assert_eq!(Capacity::Percent(1.0).entries(10), 1, "0.1 rounds to 0, kept at 1");
        assert_eq!(Capacity::Percent(150.0).entries(10), 15);
        assert_eq!(Capacity::Entries(5000).entries(10), 5000);
    }

    #[test]
    fn bad_capacities_say_why() {
        for (text, why) in [
            ("0", "at least 1 entry"),
            ("0%", "greater than 0"),
            ("-5%", "greater than 0"),
            ("abc", "not a whole number"),
            ("abc%", "not a number"),
            ("1.5", "not a whole number"),
            ("", "not a whole number"),
            ("inf%", "greater than 0"),
            ("99999999999", "2^30"),
        ] {
            let e = Capacity::parse(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad capacity `{text}`: ")), "{e}");
            assert!(e.contains(why), "{text}: {e}");
            assert!(e.contains("(5%)"), "{e}");
        }
    }
}
