//! Proleptic Gregorian calendar arithmetic shared by the date parsers.
//!
//! Written by hand because core may not depend on chrono or httpdate. All arithmetic is in
//! `i64` on values whose ranges the callers have already checked, so it cannot overflow.

/// Milliseconds in one day.
pub(crate) const MS_PER_DAY: i64 = 86_400_000;

/// Whether `year` is a Gregorian leap year.
pub(crate) fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// How many days `month` (1–12) has in `year`; 0 for a month out of range.
pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
///
/// The caller guarantees `month` in 1..=12 and `day` in 1..=31.
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let m = i64::from(month);
    let d = i64::from(day);
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// A validated wall-clock instant in UTC, turned into Unix milliseconds.
///
/// Returns `None` when any field is out of range (month 13, 31 April, hour 24, …). A leap
/// second (`second == 60`) is accepted and counted as the next second, as POSIX time does.
pub(crate) fn unix_ms(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    millis: u32,
) -> Option<i64> {
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
        || millis > 999
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second);
    Some(days * MS_PER_DAY + secs * 1000 + i64::from(millis))
}

/// Parses exactly `s.len()` ASCII digits (no sign, no spaces) into a number.
pub(crate) fn digits(s: &str) -> Option<u32> {
    // Only digits (`parse` alone would take a leading `+`); empty or too large for a `u32`,
    // `parse` refuses.
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_and_known_dates_convert_to_unix_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        // Sun, 06 Nov 1994 08:49:37 GMT is 784111777 (RFC 9110's example).
        assert_eq!(unix_ms(1994, 11, 6, 8, 49, 37, 0), Some(784_111_777_000));
    }

    #[test]
    fn impossible_dates_are_rejected() {
        assert_eq!(unix_ms(2023, 2, 29, 0, 0, 0, 0), None);
        assert!(unix_ms(2024, 2, 29, 0, 0, 0, 0).is_some());
        assert_eq!(unix_ms(2023, 4, 31, 0, 0, 0, 0), None);
        assert_eq!(unix_ms(2023, 13, 1, 0, 0, 0, 0), None);
        assert_eq!(unix_ms(2023, 1, 1, 24, 0, 0, 0), None);
        assert_eq!(unix_ms(2023, 1, 0, 0, 0, 0, 0), None);
    }
}
