//! Event-time values as the file and Kafka JSON sources read them: an integer in the
//! schema's [`TimeUnit`], or an RFC 3339 / ISO 8601 timestamp converted to that integer.
//!
//! The engine's event time is an `i64` count of time units since the Unix epoch
//! (1970-01-01T00:00:00Z) — exactly what an integer time column holds — so a timestamp
//! lands on the same scale: `2023-11-14T22:13:20.663Z` is `1700000000663` in ms,
//! `1700000000` in s (fractions of a unit are floored, as for datetime64 columns in the
//! Python package).
//!
//! Accepted timestamps (parsed by `jiff`):
//! - `2023-11-14T22:13:20.663Z`, with `t`/`z` too, or with an offset
//!   (`2023-11-14T23:13:20.663+01:00`);
//! - the space-separated form `2023-11-14 22:13:20.663` (with or without an offset);
//! - fractional seconds of any precision up to nanoseconds, or none;
//! - without an offset the time is taken as UTC; a date alone is its midnight UTC.
//!
//! Anything else is a bad row whose message names the column and shows the forms
//! expected ([`RowProblem::BadTime`](super::RowProblem::BadTime)).

use crate::value::TimeUnit;

/// An example timestamp for messages.
pub(crate) const EXAMPLE: &str = "2023-11-14T22:13:20.663Z";

/// The event time `text` stands for in `unit`: an integer (surrounding ASCII whitespace
/// allowed), or a timestamp (see the module docs). `None` if it is neither, or if the
/// timestamp's count of units does not fit an `i64` (nanoseconds after 2262).
pub(crate) fn parse_time(text: &str, unit: TimeUnit) -> Option<i64> {
    let text = text.trim_ascii();
    if let Ok(t) = text.parse::<i64>() {
        return Some(t);
    }
    parse_timestamp(text, unit)
}

/// A timestamp (see the module docs) as a count of `unit`s since the epoch, floored.
pub(crate) fn parse_timestamp(text: &str, unit: TimeUnit) -> Option<i64> {
    // Cheap rejection of what cannot be a timestamp: it starts with a 4-digit year.
    let b = text.as_bytes();
    if b.len() < 10 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return None;
    }
    let ts = match text.parse::<jiff::Timestamp>() {
        Ok(ts) => ts,
        // No offset: a civil date and time, taken as UTC.
        Err(_) => {
            let dt = text.parse::<jiff::civil::DateTime>().ok()?;
            jiff::tz::Offset::UTC.to_timestamp(dt).ok()?
        }
    };
    let units = ts.as_nanosecond().div_euclid(i128::from(unit.nanos()));
    i64::try_from(units).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_land_on_the_integer_scale_of_the_unit() {
        let ms = 1_700_000_000_663;
        for text in [
            "2023-11-14T22:13:20.663Z",
            "2023-11-14t22:13:20.663z",
            "2023-11-14 22:13:20.663",
            "2023-11-14 22:13:20.663Z",
            "2023-11-14T22:13:20.663",
            "2023-11-14T23:13:20.663+01:00",
            "2023-11-14T17:13:20.663-05:00",
            "2023-11-14T22:13:20.663000000Z",
            " 2023-11-14T22:13:20.663Z ",
            "1700000000663",
        ] {
            assert_eq!(parse_time(text, TimeUnit::Ms), Some(ms), "{text}");
        }
        let t = "2023-11-14T22:13:20.663Z";
        assert_eq!(parse_time(t, TimeUnit::S), Some(1_700_000_000));
        assert_eq!(parse_time(t, TimeUnit::Us), Some(1_700_000_000_663_000));
        assert_eq!(parse_time(t, TimeUnit::Ns), Some(1_700_000_000_663_000_000));
        assert_eq!(parse_time("2023-11-14T22:13:20Z", TimeUnit::Ms), Some(1_700_000_000_000));
        assert_eq!(parse_time("2023-11-14", TimeUnit::S), Some(1_699_920_000));
        // Before the epoch: floored, as datetime64 columns are.
        assert_eq!(parse_time("1969-12-31T23:59:59.5Z", TimeUnit::S), Some(-1));
    }

    #[test]
    fn other_text_is_not_a_time() {
        for text in [
            "",
            "abc",
            "12.5",
            "2023-11-14T25:00:00Z",
            "2023-13-01",
            "14/11/2023 22:13",
            "2023-11-14T22:13:20.663 UTC",
            "Tue, 14 Nov 2023 22:13:20 GMT",
        ] {
            assert_eq!(parse_time(text, TimeUnit::Ms), None, "{text}");
        }
        // Nanoseconds overflow i64 after 2262.
        assert_eq!(parse_time("2300-01-01T00:00:00Z", TimeUnit::Ns), None);
        assert!(parse_time("2300-01-01T00:00:00Z", TimeUnit::Ms).is_some());
    }
}
