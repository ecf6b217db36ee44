//! Durations on the command line (`5m`, `7d`, `250ms`) converted to event-time units.

use crate::value::TimeUnit;

/// Parses `<integer><unit>` with unit `ns|us|ms|s|m|h|d` (or a bare integer, taken in
/// `unit`) and returns it in `unit`. Errors name the input and what is accepted; a
/// duration that is not a whole number of `unit`s is refused rather than rounded.
pub fn parse_duration(s: &str, unit: TimeUnit) -> Result<i64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: i64 = num.parse().map_err(|_| {
        format!("bad duration `{s}`: expected a whole number followed by ns, us, ms, s, m, h or d (e.g. 5m)")
    })?;
    let nanos_per: i64 = match suffix {
        "" => return Ok(n),
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        other => {
            return Err(format!(
                "bad duration `{s}`: unknown unit `{other}`; use ns, us, ms, s, m, h or d"
            ))
        }
    };
    let nanos = n.checked_mul(nanos_per).ok_or_else(|| format!("duration `{s}` is too long"))?;
    if nanos % unit.nanos() != 0 {
        return Err(format!(
            "duration `{s}` is not a whole number of {} (the time column's unit)",
            unit.name()
        ));
    }
    Ok(nanos / unit.nanos())
}

/// Renders `n` time units of `unit` in the largest unit that divides it: `5m`, `90s`,
/// `250ms`, `0`.
pub fn display(n: i64, unit: TimeUnit) -> String {
    if n == 0 {
        return "0".into();
    }
    let nanos = i128::from(n) * i128::from(unit.nanos());
    const UNITS: [(i128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    for (u, suffix) in UNITS {
        if nanos % u == 0 {
            return format!("{}{suffix}", nanos / u);
        }
    }
    format!("{nanos}ns")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("5m", TimeUnit::Ms), Ok(300_000));
        assert_eq!(parse_duration("7d", TimeUnit::S), Ok(604_800));
        assert_eq!(parse_duration("250ms", TimeUnit::Us), Ok(250_000));
        assert_eq!(parse_duration("42", TimeUnit::Ms), Ok(42));
        assert!(parse_duration("1500us", TimeUnit::Ms).unwrap_err().contains("whole number of ms"));
        assert!(parse_duration("5 parsecs", TimeUnit::Ms).is_err());
        assert!(parse_duration("m", TimeUnit::Ms).is_err());
    }
}
