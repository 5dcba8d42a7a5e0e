//! Python objects to and from core's types, directly: serde reads core's types from Python
//! objects ([`de`]) and writes them as Python objects ([`ser`]), with no `serde_json::Value`
//! or JSON text in between.
//!
//! Everything the package exchanges with Python is the JSON shape of the trace format, so one
//! conversion serves every type, and both halves keep to exactly what JSON can say (what
//! `serde_json::Value` would read and write). Nothing here decides anything.

pub mod de;
pub mod ser;

use crate::errors::{EventError, ReboundError};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The Python object (JSON shape) of any serializable core value: dicts, lists, `str`, `int`,
/// `float`, `bool`, `None`.
///
/// # Errors
///
/// [`ReboundError`] if the value does not serialize (a bug), else Python's own.
pub fn to_py<'py, T: Serialize + ?Sized>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    value
        .serialize(ser::Pythonizer::new(py))
        .map_err(|e| ReboundError::new_err(format!("could not serialize a value: {e}")))
}

/// A core value read from a Python object of its JSON shape (`None`, `bool`, `int`, `float`,
/// `str`, lists, tuples, dicts with `str` keys, objects with a `to_json()` giving one); a
/// `str` is read as JSON text. `what` names the value in error messages (`event`).
///
/// # Errors
///
/// [`EventError`] (a [`ReboundError`]) saying what is wrong and where, never a panic.
pub fn from_py<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_str()?;
        return serde_json::from_str::<T>(text).map_err(|e| {
            if e.is_data() {
                EventError::new_err(format!("invalid {what}: {e}"))
            } else {
                EventError::new_err(format!("{what} is not valid JSON: {e}"))
            }
        });
    }
    T::deserialize(de::Depythonizer::new(obj.clone()))
        .map_err(|e| EventError::new_err(e.describe(what)))
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |n| n.to_string())
}

/// A `u64` from a Python `int`, with a message naming the argument when it is none.
///
/// # Errors
///
/// [`ReboundError`] for a negative, too large or non-integer value.
/// `error` as the error `make` builds from its message (without the `EventError: ` its
/// `Display` starts with); a `TypeError` (a value of the wrong Python type) stays one.
pub fn retyped(error: PyErr, make: impl FnOnce(String) -> PyErr) -> PyErr {
    Python::attach(|py| {
        if error.is_instance_of::<PyTypeError>(py) {
            error
        } else {
            make(error.value(py).to_string())
        }
    })
}

/// A non-negative integer argument that fits `T`: `TypeError` for anything but an int (a
/// bool included), and the error `out_of_range` builds for a value below 0 or past `T`'s
/// range (never a bare `OverflowError`).
pub fn int_arg<T: TryFrom<u64>>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    out_of_range: impl FnOnce(String) -> PyErr,
) -> PyResult<T> {
    if obj.cast::<PyBool>().is_ok() || obj.cast::<PyInt>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            type_name(obj)
        )));
    }
    match obj.extract::<u64>().ok().and_then(|v| T::try_from(v).ok()) {
        Some(v) => Ok(v),
        None => Err(out_of_range(format!(
            "{what} must be an integer from 0 to 2**{} - 1, got {obj}",
            std::mem::size_of::<T>() * 8
        ))),
    }
}

pub fn to_u64(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if obj.cast::<PyBool>().is_ok() || obj.cast::<PyInt>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be an int, got {}",
            type_name(obj)
        )));
    }
    obj.extract::<u64>().map_err(|_| {
        ReboundError::new_err(format!(
            "{what} must be a non-negative integer below 2**64, got {obj}"
        ))
    })
}

/// The secrets a caller names (`secrets=`): None, one `str`, or an iterable of `str`.
///
/// # Errors
///
/// [`ConfigError`](crate::errors::ConfigError) for one too short to mask (its text is never
/// shown); `TypeError` for another type.
pub fn secrets_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<rebound_core::Secrets> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(rebound_core::Secrets::none());
    };
    let bad = || {
        PyTypeError::new_err(format!(
            "secrets must be a str or an iterable of str, got {}",
            type_name(obj)
        ))
    };
    let words: Vec<String> = if let Ok(one) = obj.cast::<PyString>() {
        vec![one.to_str()?.to_owned()]
    } else {
        obj.try_iter()
            .map_err(|_| bad())?
            .map(|item| item.and_then(|i| i.extract::<String>().map_err(|_| bad())))
            .collect::<PyResult<_>>()?
    };
    rebound_core::Secrets::new(words)
        .map_err(|e| crate::errors::ConfigError::new_err(format!("secrets: {e}")))
}
