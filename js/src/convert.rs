//! JSON text to and from core's types, and JavaScript numbers to core's integers. Everything
//! the package exchanges with JavaScript is the JSON shape of the trace format, so one
//! conversion serves every type. Nothing here decides anything.

use crate::errors::{error, Kind, Result};
use rebound_core::Millis;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A core value read from JSON text; `what` names it in the error (`event`), of `kind`.
pub fn from_json<T: DeserializeOwned>(text: &str, what: &str, kind: Kind) -> Result<T> {
    serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            error(kind, format!("invalid {what}: {e}"))
        } else {
            error(kind, format!("{what} is not valid JSON: {e}"))
        }
    })
}

/// The JSON text of a core value.
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|e| error(Kind::Rebound, format!("could not serialize a value: {e}")))
}

/// A non-negative whole number from a JavaScript number: `what` names it in the error.
pub fn whole(value: f64, what: &str, kind: Kind) -> Result<u64> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= MAX_SAFE_INTEGER {
        // A whole number in [0, 2^53) converts exactly.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(value as u64)
    } else {
        Err(error(
            kind,
            format!("{what} must be a whole number from 0 to Number.MAX_SAFE_INTEGER, not {value}"),
        ))
    }
}

/// The machine's clock reading in milliseconds (see [`clock`]).
pub fn millis(now_ms: f64) -> Result<Millis> {
    clock(now_ms, "the caller's clock", Kind::Event)
}

/// A clock reading in milliseconds: a finite number from 0 up, whose fraction is dropped
/// (`performance.now()` has one; the machine counts whole milliseconds). `whose` names the
/// clock in the error, of `kind`.
pub fn clock(now_ms: f64, whose: &str, kind: Kind) -> Result<Millis> {
    if now_ms.is_finite() && (0.0..=MAX_SAFE_INTEGER).contains(&now_ms) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Millis(now_ms.floor() as u64))
    } else {
        Err(error(
            kind,
            format!(
                "nowMs must be a finite number of milliseconds from 0 up ({whose}), not \
                 {now_ms}"
            ),
        ))
    }
}

/// A seed from a JavaScript number or a decimal string (for seeds past 2^53).
pub fn seed(value: &wasm_bindgen::JsValue) -> Result<u64> {
    if value.is_undefined() || value.is_null() {
        return Ok(0);
    }
    if let Some(n) = value.as_f64() {
        return whole(n, "seed", Kind::Config);
    }
    if let Some(s) = value.as_string() {
        return s.parse::<u64>().map_err(|e| {
            error(
                Kind::Config,
                format!("seed {s:?} is not a whole number from 0 to 2^64-1 ({e})"),
            )
        });
    }
    if value.is_bigint() {
        let text = js_sys::BigInt::from(value.clone())
            .to_string(10)
            .ok()
            .and_then(|s| s.as_string())
            .unwrap_or_default();
        return text.parse::<u64>().map_err(|e| {
            error(
                Kind::Config,
                format!("seed {text}n is not a whole number from 0 to 2^64-1 ({e})"),
            )
        });
    }
    Err(error(
        Kind::Config,
        "seed must be a number, a bigint or a decimal string",
    ))
}
