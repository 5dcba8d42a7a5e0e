//! HTTP-date parsing (RFC 9110 §5.6.7) for `retry-after`.
//!
//! Accepts the preferred IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the two obsolete
//! forms recipients must still accept: RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and ANSI C
//! asctime (`Sun Nov  6 08:49:37 1994`). The weekday must be a real weekday name but is not
//! checked against the date. Anything else is `None`; nothing here panics.

use super::calendar::{digits, unix_ms};

const SHORT_DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Parses an HTTP-date into Unix milliseconds.
pub(crate) fn parse_http_date(value: &str) -> Option<i64> {
    // Every form below is matched piece by piece against ASCII names and digits, with
    // checked slicing: anything else (non-ASCII, absurdly long) is `None` without a
    // separate guard.
    let value = value.trim();
    if let Some((day_name, rest)) = value.split_once(", ") {
        if SHORT_DAYS.contains(&day_name) {
            return imf_fixdate(rest);
        }
        if LONG_DAYS.contains(&day_name) {
            return rfc850(rest);
        }
        return None;
    }
    asctime(value)
}

/// `06 Nov 1994 08:49:37 GMT` (after the weekday).
fn imf_fixdate(rest: &str) -> Option<i64> {
    let mut parts = rest.split(' ');
    let day = two_digits(parts.next()?)?;
    let month = month(parts.next()?)?;
    let year_text = parts.next()?;
    if year_text.len() != 4 {
        return None;
    }
    let year = i64::from(digits(year_text)?);
    let (h, m, s) = time_of_day(parts.next()?)?;
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    unix_ms(year, month, day, h, m, s, 0)
}

/// `06-Nov-94 08:49:37 GMT` (after the weekday). Two-digit years 70–99 are 19xx, 00–69 are
/// 20xx, a fixed pivot rather than RFC 9110's "50 years from now" so the result does not
/// depend on the clock.
fn rfc850(rest: &str) -> Option<i64> {
    let mut parts = rest.split(' ');
    let mut date = parts.next()?.split('-');
    let day = two_digits(date.next()?)?;
    let month = month(date.next()?)?;
    let yy_text = date.next()?;
    if yy_text.len() != 2 || date.next().is_some() {
        return None;
    }
    let yy = i64::from(digits(yy_text)?);
    let year = if yy >= 70 { 1900 + yy } else { 2000 + yy };
    let (h, m, s) = time_of_day(parts.next()?)?;
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    unix_ms(year, month, day, h, m, s, 0)
}

/// `Sun Nov  6 08:49:37 1994`: the day is space-padded to two characters.
fn asctime(value: &str) -> Option<i64> {
    let bytes = value.as_bytes();
    // "Www Mmm dd hh:mm:ss yyyy" is exactly 24 characters.
    if bytes.len() != 24 || bytes[3] != b' ' || bytes[7] != b' ' || bytes[10] != b' ' {
        return None;
    }
    if !SHORT_DAYS.contains(&value.get(0..3)?) {
        return None;
    }
    let month = month(value.get(4..7)?)?;
    let day = digits(value.get(8..10)?.trim_start_matches(' '))?;
    let (h, m, s) = time_of_day(value.get(11..19)?)?;
    if bytes[19] != b' ' {
        return None;
    }
    let year = i64::from(digits(value.get(20..24)?)?);
    unix_ms(year, month, day, h, m, s, 0)
}

fn two_digits(s: &str) -> Option<u32> {
    if s.len() == 2 {
        digits(s)
    } else {
        None
    }
}

fn month(s: &str) -> Option<u32> {
    let index = MONTHS.iter().position(|m| *m == s)?;
    u32::try_from(index + 1).ok()
}

/// `hh:mm:ss`, each exactly two digits.
fn time_of_day(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.split(':');
    let h = two_digits(parts.next()?)?;
    let m = two_digits(parts.next()?)?;
    let sec = two_digits(parts.next()?)?;
    if parts.next().is_some() {
        return None;
    }
    Some((h, m, sec))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RFC_EXAMPLE_MS: i64 = 784_111_777_000;

    #[test]
    fn all_three_http_date_forms_parse_to_the_same_instant() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(RFC_EXAMPLE_MS)
        );
        assert_eq!(
            parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"),
            Some(RFC_EXAMPLE_MS)
        );
        assert_eq!(
            parse_http_date("Sun Nov  6 08:49:37 1994"),
            Some(RFC_EXAMPLE_MS)
        );
    }

    #[test]
    fn malformed_http_dates_are_rejected() {
        for bad in [
            "",
            "Zun, 29 Sep 2023 16:26:27 GMT",
            "Fri, 29 Sep 2023 16:26:27 UTC",
            "Fri, 29 Sep 23 16:26:27 GMT",
            "Fri, 31 Sep 2023 16:26:27 GMT",
            "Fri, 29 Sept 2023 16:26:27 GMT",
            "Fri, 29 Sep 2023 25:26:27 GMT",
            "Fri, 29 Sep 2023 16:26 GMT",
            "Fri, 29 Sep 2023 16:26:27 GMT trailing",
            "Fri, 29 Sep 99999 16:26:27 GMT",
            "Fri, -1 Sep 2023 16:26:27 GMT",
            "Sun Nov 6 08:49:37 1994",
            "Sun Nov  6 08:49:37 19945",
            "Friday, 29-Sep-2023 16:26:27 GMT",
            "Fri, 29 Sep 2023 16:26:27 GMT\u{0}",
            "Fré, 29 Sep 2023 16:26:27 GMT",
            "2023-09-29T16:26:27Z",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn year_9999_parses_and_is_left_to_the_caller_to_judge() {
        assert!(parse_http_date("Fri, 31 Dec 9999 23:59:59 GMT").is_some());
    }
}
