//! Go-style durations, as in OpenAI's `x-ratelimit-reset-requests` / `-tokens` headers
//! (`6m0s`, `12ms`, `1s`, `0.5s`, `1h2m3.5s`).
//!
//! Grammar: one or more `<decimal><unit>` with units `h`, `m`, `s`, `ms`, `us`/`µs`, `ns`; a
//! bare `0` is zero (as in Go). A bare decimal number without a unit is read as seconds,
//! because some OpenAI-compatible servers send that. Signs are rejected (a negative reset is
//! meaningless). The result is rounded up to whole milliseconds so a wait never ends early.

/// Parses a duration into milliseconds; `None` for garbage or overflow.
pub(crate) fn parse_go_duration_ms(value: &str) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() || value.len() > 64 {
        return None;
    }
    if value == "0" {
        return Some(0);
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return decimal_scaled(value, 9).and_then(ns_to_ms_ceil);
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
        // Scale each unit to nanoseconds: 10^digits.
        let scale = match unit {
            "ns" => 0,
            "us" | "µs" | "μs" => 3,
            "ms" => 6,
            "s" => 9,
            "m" => {
                total_ns = total_ns.checked_add(decimal_scaled(number, 9)?.checked_mul(60)?)?;
                continue;
            }
            "h" => {
                total_ns = total_ns.checked_add(decimal_scaled(number, 9)?.checked_mul(3600)?)?;
                continue;
            }
            _ => return None,
        };
        total_ns = total_ns.checked_add(decimal_scaled(number, scale)?)?;
    }
    ns_to_ms_ceil(total_ns)
}

/// `ceil(number * 10^scale)` for an unsigned decimal like `12`, `0.5` or `3.25`, exactly and
/// without floating point. `None` for an empty part, two dots, or a value beyond `u128`.
pub(crate) fn decimal_scaled(number: &str, scale: u32) -> Option<u128> {
    let (int_part, frac_part) = match number.split_once('.') {
        Some((i, f)) => (i, f),
        None => (number, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
        || int_part.len() > 30
    {
        return None;
    }
    let mut value: u128 = 0;
    for d in int_part.bytes() {
        value = value.checked_mul(10)?.checked_add(u128::from(d - b'0'))?;
    }
    value = value.checked_mul(10u128.checked_pow(scale)?)?;
    let mut round_up = false;
    let mut place = scale;
    for d in frac_part.bytes() {
        let d = u128::from(d - b'0');
        if place == 0 {
            round_up |= d != 0;
        } else {
            place -= 1;
            value = value.checked_add(d.checked_mul(10u128.checked_pow(place)?)?)?;
        }
    }
    if round_up {
        value = value.checked_add(1)?;
    }
    Some(value)
}

fn ns_to_ms_ceil(ns: u128) -> Option<u64> {
    u64::try_from(ns.div_ceil(1_000_000)).ok()
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
            "",
            "-1s",
            "+1s",
            "s",
            "1x",
            "1.2.3s",
            "..s",
            "1 s",
            "NaN",
            "infs",
            "99999999999999999999999999999999999h",
            "1e3s",
        ] {
            assert_eq!(parse_go_duration_ms(bad), None, "{bad:?}");
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
    }
}
