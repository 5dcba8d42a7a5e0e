//! Python objects to and from JSON values (`serde_json::Value`), and on to the core's types.
//!
//! Everything the package exchanges with Python is the JSON shape of the trace format, so one
//! conversion serves every type: a Python value becomes a `Value`, then serde reads the core
//! type from it (and the other way round). Nothing here decides anything.

use crate::errors::{EventError, ReboundError};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Number, Value};

/// Deeper than this, a Python value is refused rather than walked (a recursion this deep
/// would only come from a cyclic or hostile structure, and could overflow the stack).
const MAX_DEPTH: usize = 200;

/// Where in the value a conversion failed, built on the way back up.
struct Failure {
    path: Vec<String>,
    message: String,
}

impl Failure {
    fn new(message: String) -> Self {
        Failure {
            path: Vec::new(),
            message,
        }
    }

    fn at(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    fn describe(&self, what: &str) -> String {
        const SHOWN: usize = 8;
        let mut path = what.to_owned();
        for segment in self.path.iter().rev().take(SHOWN) {
            path.push_str(segment);
        }
        if self.path.len() > SHOWN {
            path.push('…');
        }
        format!("{path}: {}", self.message)
    }
}

/// The JSON value of a Python object made of `None`, `bool`, `int`, `float`, `str`, lists,
/// tuples and dicts with `str` keys (or an object with a `to_json()` giving one). `what` names
/// the value in error messages (`event`).
///
/// # Errors
///
/// [`EventError`] naming the path of the first value that has no JSON form.
fn to_event_value(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    walk(obj, 0).map_err(|f| EventError::new_err(f.describe(what)))
}

fn walk(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, Failure> {
    if depth > MAX_DEPTH {
        return Err(Failure::new(format!(
            "nested deeper than {MAX_DEPTH} levels (a cycle?)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(n) = i.extract::<u64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Value::from(n));
        }
        return Err(Failure::new(format!(
            "the integer {i} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        return Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| Failure::new(format!("{v} has no JSON form (not finite)")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return s
            .to_str()
            .map(|s| Value::String(s.to_owned()))
            .map_err(|e| Failure::new(format!("not valid UTF-8 text: {e}")));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = match k.cast::<PyString>() {
                Ok(s) => s
                    .to_str()
                    .map_err(|e| Failure::new(format!("a key is not valid UTF-8 text: {e}")))?
                    .to_owned(),
                Err(_) => {
                    return Err(Failure::new(format!(
                        "a dict key must be a str, got {}",
                        type_name(&k)
                    )))
                }
            };
            let value = walk(&v, depth + 1).map_err(|f| f.at(format!("[{key:?}]")))?;
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return walk_items(l.iter(), depth);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return walk_items(t.iter(), depth);
    }
    // Typed objects of the package (events, Snapshot summaries) know their JSON shape.
    if let Ok(method) = obj.getattr("to_json") {
        if method.is_callable() {
            let json = method
                .call0()
                .map_err(|e| Failure::new(format!("to_json() failed: {e}")))?;
            if json.is(obj) {
                return Err(Failure::new("to_json() returned the object itself".into()));
            }
            return walk(&json, depth + 1);
        }
    }
    Err(Failure::new(format!(
        "a {} has no JSON form (expected None, bool, int, float, str, list, tuple or dict)",
        type_name(obj)
    )))
}

fn walk_items<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
) -> Result<Value, Failure> {
    items
        .enumerate()
        .map(|(i, v)| walk(&v, depth + 1).map_err(|f| f.at(format!("[{i}]"))))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |n| n.to_string())
}

/// The Python object of a JSON value: dicts, lists, `str`, `int`, `float`, `bool`, `None`.
///
/// # Errors
///
/// Only Python's own (out of memory).
pub fn from_value<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(from_value(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, from_value(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// The Python object (JSON shape) of any serializable core value.
///
/// # Errors
///
/// [`ReboundError`] if the value does not serialize (a bug), else Python's own.
pub fn to_py<'py, T: Serialize + ?Sized>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let value = serde_json::to_value(value)
        .map_err(|e| ReboundError::new_err(format!("could not serialize a value: {e}")))?;
    from_value(py, &value)
}

/// A core value read from a Python object of its JSON shape; a JSON string is read as JSON.
/// `what` names it in error messages.
///
/// # Errors
///
/// [`EventError`] (a [`ReboundError`]) saying what is wrong, never a panic.
pub fn from_py<T: DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    let value = if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_str()?;
        serde_json::from_str::<Value>(text)
            .map_err(|e| EventError::new_err(format!("{what} is not valid JSON: {e}")))?
    } else {
        to_event_value(obj, what)?
    };
    serde_json::from_value(value).map_err(|e| EventError::new_err(format!("invalid {what}: {e}")))
}

/// A `u64` from a Python `int`, with a message naming the argument when it is none.
///
/// # Errors
///
/// [`ReboundError`] for a negative, too large or non-integer value.
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
