//! The dates servers put in delay hints (an HTTP-date `retry-after`, Anthropic's RFC 3339
//! rate-limit resets) follow the Gregorian calendar exactly: a date that does not exist is no
//! hint at all, and one that does is counted to the millisecond. Read through the public
//! path, `delay_hints`.

use rebound_core::classify::delay_hints;
use rebound_core::Headers;

/// The `retry-after` of `date` (an IMF-fixdate's date part, e.g. `29 Feb 2024`), read 5 s
/// before midnight + 5 s of that day, whose Unix ms is `midnight_ms`.
fn retry_after(date: &str, midnight_ms: u64) -> Option<u64> {
    let headers = Headers::new().with("retry-after", format!("Mon, {date} 00:00:05 GMT"));
    delay_hints(&headers, Some(midnight_ms)).retry_after_ms
}

/// Anthropic's reset header at `timestamp`, read at `now_ms`.
fn reset(timestamp: &str, now_ms: u64) -> Option<u64> {
    let headers = Headers::new()
        .with("anthropic-ratelimit-requests-reset", timestamp)
        .with("anthropic-ratelimit-requests-remaining", "0");
    delay_hints(&headers, Some(now_ms)).rate_limit_reset_ms
}

#[test]
fn leap_days_exist_in_leap_years_by_the_century_rule() {
    // Divisible by 4, not by 100: leap.
    assert_eq!(retry_after("29 Feb 2024", 1_709_164_800_000), Some(5_000));
    assert_eq!(retry_after("29 Feb 1996", 825_552_000_000), Some(5_000));
    // Divisible by 400: leap.
    assert_eq!(retry_after("29 Feb 2000", 951_782_400_000), Some(5_000));
    assert_eq!(reset("2000-02-29T00:00:05Z", 951_782_400_000), Some(5_000));
    // February of any other year has 28 days.
    assert_eq!(retry_after("28 Feb 2023", 1_677_542_400_000), Some(5_000));
    // Divisible by 100, not by 400: not leap; nor a year not divisible by 4.
    for date in ["29 Feb 1900", "29 Feb 2100", "29 Feb 2023"] {
        assert_eq!(retry_after(date, 0), None, "{date}");
    }
    for timestamp in ["2100-02-29T00:00:05Z", "1900-02-29T00:00:05Z"] {
        assert_eq!(reset(timestamp, 0), None, "{timestamp}");
    }
}

#[test]
fn the_thirty_day_months_end_on_the_thirtieth() {
    for (date, midnight) in [
        ("30 Apr 2023", 1_682_812_800_000),
        ("30 Jun 2023", 1_688_083_200_000),
        ("30 Sep 2023", 1_696_032_000_000),
        ("30 Nov 2023", 1_701_302_400_000),
    ] {
        assert_eq!(retry_after(date, midnight), Some(5_000), "{date}");
    }
    for date in ["31 Apr 2023", "31 Jun 2023", "31 Sep 2023", "31 Nov 2023"] {
        assert_eq!(retry_after(date, 0), None, "{date}");
    }
    assert_eq!(retry_after("31 Jan 2023", 1_675_123_200_000), Some(5_000));
}

/// The `retry-after` of 1 Jan 2024 at `time` (HH:MM:SS), read at that day's midnight.
fn at_time(time: &str) -> Option<u64> {
    let headers = Headers::new().with("retry-after", format!("Mon, 01 Jan 2024 {time} GMT"));
    delay_hints(&headers, Some(1_704_067_200_000)).retry_after_ms
}

#[test]
fn each_field_of_the_time_of_day_is_checked_on_its_own() {
    assert_eq!(at_time("23:59:59"), Some(86_399_000));
    // A leap second counts as the next second, as POSIX time does.
    assert_eq!(at_time("23:59:60"), Some(86_400_000));
    for time in ["24:00:00", "00:60:00", "00:00:61", "23:59:61", "00:59:99"] {
        assert_eq!(at_time(time), None, "{time}");
    }
    // Milliseconds come only from an RFC 3339 fraction, three digits at most.
    assert_eq!(
        reset("2024-01-01T00:00:01.999Z", 1_704_067_200_000),
        Some(1_999)
    );
    for timestamp in [
        "2024-00-10T00:00:00Z",
        "2024-13-10T00:00:00Z",
        "2024-01-00T00:00:00Z",
        "2024-01-32T00:00:00Z",
    ] {
        assert_eq!(reset(timestamp, 0), None, "{timestamp}");
    }
}

#[test]
fn the_three_http_date_forms_name_the_same_instant() {
    // RFC 9110's example, 7 s after the time read.
    let now = 784_111_770_000;
    for date in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        let headers = Headers::new().with("retry-after", date);
        assert_eq!(
            delay_hints(&headers, Some(now)).retry_after_ms,
            Some(7_000),
            "{date}"
        );
    }
    // Two-digit years below 70 are this century's.
    let headers = Headers::new().with("retry-after", "Monday, 01-Jan-24 00:00:05 GMT");
    assert_eq!(
        delay_hints(&headers, Some(1_704_067_200_000)).retry_after_ms,
        Some(5_000)
    );
    // Anything else is no hint: other letters, a long tail, a date in other words.
    for date in [
        "Sün, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Növ 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT                                                  x",
        "Sun Nov  6 08:49:37 1994 GMT",
    ] {
        let headers = Headers::new().with("retry-after", date);
        assert_eq!(
            delay_hints(&headers, Some(now)).retry_after_ms,
            None,
            "{date}"
        );
    }
}

#[test]
fn each_obsolete_form_is_read_only_with_its_own_separators_and_zone() {
    // RFC 9110's example, as in the test above, 7 s after the time read.
    let now = 784_111_770_000;
    let read = |date: &str| {
        delay_hints(&Headers::new().with("retry-after", date), Some(now)).retry_after_ms
    };
    assert_eq!(read("Sunday, 06-Nov-94 08:49:37 GMT"), Some(7_000));
    assert_eq!(read("Sun Nov  6 08:49:37 1994"), Some(7_000));
    for date in [
        // RFC 850: the zone is GMT and nothing follows it.
        "Sunday, 06-Nov-94 08:49:37 UTC",
        "Sunday, 06-Nov-94 08:49:37 GMT extra",
        // asctime: a space after the weekday, after the month and after the day, each
        // checked on its own (the fields between them would still read).
        "SunXNov  6 08:49:37 1994",
        "Sun NovX 6 08:49:37 1994",
        "Sun Nov  6X08:49:37 1994",
    ] {
        assert_eq!(read(date), None, "{date}");
    }
}

#[test]
fn a_reset_timestamp_is_read_only_in_its_exact_shape_and_length() {
    // Each separator is checked on its own; the digits around a wrong one would still read.
    assert_eq!(reset("1970-01-01T00:00:05Z", 0), Some(5_000));
    assert_eq!(reset("1970-01-01 00:00:05Z", 0), Some(5_000));
    for timestamp in [
        "1970x01-01T00:00:05Z",
        "1970-01x01T00:00:05Z",
        "1970-01-01X00:00:05Z",
        "1970-01-01T00x00:05Z",
        "1970-01-01T00:00x05Z",
    ] {
        assert_eq!(reset(timestamp, 0), None, "{timestamp}");
    }
    // At most 64 characters, however long a fraction a server writes.
    let longest = format!("1970-01-01T00:00:05.{}Z", "0".repeat(43));
    assert_eq!(longest.len(), 64);
    assert_eq!(reset(&longest, 0), Some(5_000));
    let too_long = format!("1970-01-01T00:00:05.{}Z", "0".repeat(44));
    assert_eq!(reset(&too_long, 0), None);
}

#[test]
fn a_reset_offset_is_any_real_time_zone_up_to_23_59() {
    assert_eq!(reset("1970-01-01T23:00:05+23:00", 0), Some(5_000));
    assert_eq!(reset("1970-01-01T00:59:05+00:59", 0), Some(5_000));
    for timestamp in ["1970-01-02T00:00:05+24:00", "1970-01-01T01:00:05+00:60"] {
        assert_eq!(reset(timestamp, 0), None, "{timestamp}");
    }
}
