//! RFC 3339 timestamps, as in Anthropic's `anthropic-ratelimit-*-reset` headers
//! (`2025-08-21T12:40:59Z`).
//!
//! Accepts `YYYY-MM-DDTHH:MM:SS`, an optional fraction of any length (kept to milliseconds,
//! rounded up so a wait never ends early), and `Z` or a `±HH:MM` offset. `t`, `z` and a space
//! instead of `T` are accepted, as RFC 3339 §5.6 allows.

use super::calendar::{digits, unix_ms};

/// Parses an RFC 3339 timestamp into Unix milliseconds.
pub(crate) fn parse_rfc3339(value: &str) -> Option<i64> {
    let value = value.trim();
    if !value.is_ascii() || value.len() < 20 || value.len() > 64 {
        return None;
    }
    let b = value.as_bytes();
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = i64::from(digits(value.get(0..4)?)?);
    let month = digits(value.get(5..7)?)?;
    let day = digits(value.get(8..10)?)?;
    let hour = digits(value.get(11..13)?)?;
    let minute = digits(value.get(14..16)?)?;
    let second = digits(value.get(17..19)?)?;

    let mut rest = value.get(19..)?;
    let mut millis: u32 = 0;
    let mut round_up = false;
    if let Some(fraction_and_zone) = rest.strip_prefix('.') {
        let len = fraction_and_zone
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if len == 0 {
            return None;
        }
        let fraction = fraction_and_zone.get(..len)?;
        for (i, d) in fraction.bytes().enumerate() {
            let d = u32::from(d - b'0');
            match i {
                0 => millis += d * 100,
                1 => millis += d * 10,
                2 => millis += d,
                _ => round_up |= d != 0,
            }
        }
        rest = fraction_and_zone.get(len..)?;
    }

    let offset_ms: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let ob = rest.as_bytes();
            if ob.len() != 6 || ob[3] != b':' {
                return None;
            }
            let sign = match ob[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh = digits(rest.get(1..3)?)?;
            let om = digits(rest.get(4..6)?)?;
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (i64::from(oh) * 3_600_000 + i64::from(om) * 60_000)
        }
    };

    let local = unix_ms(year, month, day, hour, minute, second, millis)?;
    Some(local - offset_ms + i64::from(round_up))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamps_parse_to_unix_ms() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2025-08-21T12:40:59Z"),
            Some(1_755_780_059_000)
        );
        assert_eq!(
            parse_rfc3339("2025-08-21t12:40:59z"),
            Some(1_755_780_059_000)
        );
    }

    #[test]
    fn fractions_keep_milliseconds_and_round_up_the_rest() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.250Z"), Some(1250));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.2501Z"), Some(1251));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.000000000Z"), Some(1000));
    }

    #[test]
    fn offsets_shift_to_utc() {
        assert_eq!(parse_rfc3339("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339("1969-12-31T23:30:00-00:30"), Some(0));
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for bad in [
            "",
            "garbage",
            "2025-08-21",
            "2025-08-21T12:40:59",
            "2025-08-21T12:40:59+0100",
            "2025-08-21T12:40:59.Z",
            "2025-13-21T12:40:59Z",
            "2025-02-30T12:40:59Z",
            "2025-08-21T24:00:00Z",
            "2025-08-21T12:40:59+24:00",
            "+2025-08-21T12:40:59Z",
            "2025-08-21T12:40:59Zjunk",
            "２０２５-08-21T12:40:59Z",
            "Sun, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }
}
