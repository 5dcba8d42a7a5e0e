//! Go-style durations, as in OpenAI's `x-ratelimit-reset-requests` / `-tokens` headers
//! (`6m0s`, `12ms`, `1s`, `0.5s`, `1h2m3.5s`).
//!
//! Grammar: one or more `<decimal><unit>` with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`; a
//! bare `0` is zero (as in Go). A bare decimal number without a unit is read as seconds,
//! because some OpenAI-compatible servers send that. Signs are rejected (a negative reset is
//! meaningless). The result is rounded up to whole milliseconds so a wait never ends early.
//!
//! A well-formed value too large to represent saturates (at `u64::MAX` ms) instead of being
//! rejected: a server that asks for an absurdly long wait still asks for a long wait, and the
//! retry policy, not the parser, decides what a wait beyond its cap means.

/// Parses a duration into milliseconds, saturating at `u64::MAX`; `None` only for garbage.
pub(crate) fn parse_go_duration_ms(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value == "0" {
        return Some(0);
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return decimal_scaled(value, 9).map(ns_to_ms_ceil);
    }

    let mut total_ns: u128 = 0;
    let mut rest = value;
    while !rest.is_empty() {
        let number_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if number_len == 0 {
            return None;
        }
        let number = rest.get(..number_len)?;
        rest = rest.get(number_len..)?;
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = rest.get(..unit_len)?;
        rest = rest.get(unit_len..)?;
        // Each unit in nanoseconds: 10^digits, times 60 or 3600 for minutes and hours.
        let (digits, factor) = match unit {
            "ns" => (0, 1),
            "us" | "µs" | "μs" => (3, 1),
            "ms" => (6, 1),
            "s" => (9, 1),
            "m" => (9, 60),
            "h" => (9, 3600),
            _ => return None,
        };
        let ns = decimal_scaled(number, digits)?.saturating_mul(factor);
        total_ns = total_ns.saturating_add(ns);
    }
    Some(ns_to_ms_ceil(total_ns))
}

/// `ceil(number * 10^scale)` for an unsigned decimal like `12`, `0.5` or `3.25`, exactly and
/// without floating point, saturating at `u128::MAX`. `None` for an empty number, two dots
/// or anything but ASCII digits. `scale` is at most 9.
pub(crate) fn decimal_scaled(number: &str, scale: u32) -> Option<u128> {
    debug_assert!(scale <= 9, "decimal_scaled is used for at most nanoseconds");
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut value: u128 = 0;
    for d in int_part.bytes() {
        value = value
            .saturating_mul(10)
            .saturating_add(u128::from(d - b'0'));
    }
    value = value.saturating_mul(10u128.pow(scale));
    let mut round_up = false;
    let mut place = scale;
    for d in frac_part.bytes() {
        let d = u128::from(d - b'0');
        if place == 0 {
            round_up |= d != 0;
        } else {
            place -= 1;
            value = value.saturating_add(d * 10u128.pow(place));
        }
    }
    if round_up {
        value = value.saturating_add(1);
    }
    Some(value)
}

/// Whole milliseconds, rounded up, saturating at `u64::MAX`.
fn ns_to_ms_ceil(ns: u128) -> u64 {
    u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_reset_durations_parse_to_milliseconds() {
        for (text, ms) in [
            ("6m0s", 360_000),
            ("12ms", 12),
            ("1s", 1000),
            ("0.5s", 500),
            ("1h2m3.5s", 3_723_500),
            ("20ms", 20),
            ("2m59.56s", 179_560),
            ("0", 0),
            ("0s", 0),
            ("1.5m", 90_000),
            ("1500us", 2),
            ("1µs", 1),
            ("999999ns", 1),
            ("17", 17_000),
            ("0.25", 250),
        ] {
            assert_eq!(parse_go_duration_ms(text), Some(ms), "{text}");
        }
    }

    #[test]
    fn garbage_durations_are_rejected() {
        for bad in [
            "", "-1s", "+1s", "s", "1x", "1.2.3s", "..s", "1 s", "NaN", "infs", "1e3s",
        ] {
            assert_eq!(parse_go_duration_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn huge_durations_saturate_instead_of_being_rejected() {
        assert_eq!(parse_go_duration_ms("99999999h"), Some(359_999_996_400_000));
        for huge in [
            "99999999999999999999999999999999999h",
            "18446744073709551616ms",
            "9999999999999999999999999999999999999999999999999999s",
            "1h99999999999999999999999999999999999999999m",
        ] {
            assert_eq!(parse_go_duration_ms(huge), Some(u64::MAX), "{huge}");
        }
    }

    #[test]
    fn decimal_scaling_is_exact_and_rounds_up() {
        assert_eq!(decimal_scaled("1.5", 3), Some(1500));
        assert_eq!(decimal_scaled("1.0001", 3), Some(1001));
        assert_eq!(decimal_scaled("12.5", 0), Some(13));
        assert_eq!(decimal_scaled(".5", 3), Some(500));
        assert_eq!(decimal_scaled("5.", 3), Some(5000));
        assert_eq!(decimal_scaled(".", 3), None);
        assert_eq!(decimal_scaled("1..2", 3), None);
        assert_eq!(decimal_scaled(&"9".repeat(60), 3), Some(u128::MAX));
    }
}
