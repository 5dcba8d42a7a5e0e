//! A serde `Deserializer` over Python objects: core's types read straight from dicts, lists,
//! `str`, `int`, `float`, `bool` and `None`, with no JSON value or text in between.
//!
//! It reads exactly what `serde_json::Value` would read from the same objects' JSON form, so
//! the JSON shape stays the one contract: no truthiness (`"no"` is no bool), no `int` from a
//! `bool`, no `float` that JSON cannot write, `str` keys only. Objects of the package that
//! are not plain data (typed events, `Snapshot`) are read through their `to_json()`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::types::{PyDictMethods, PyListMethods, PyTupleMethods};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// Deeper than this, a Python value is refused rather than walked (a recursion this deep
/// would only come from a cyclic or hostile structure, and could overflow the stack).
pub const MAX_DEPTH: usize = 200;

/// Why a Python value could not be read, and where in it (innermost segment first).
#[derive(Debug)]
pub struct Error {
    path: Vec<String>,
    message: String,
    /// The value has no JSON form (or is too deep); else serde found it is not the type's.
    shape: bool,
}

impl Error {
    fn shape(message: String) -> Self {
        Error {
            path: Vec::new(),
            message,
            shape: true,
        }
    }

    fn at(mut self, segment: impl FnOnce() -> String) -> Self {
        self.path.push(segment());
        self
    }

    /// The one line a person reads: `event["failure"]: a set has no JSON form (…)` or
    /// `invalid event: unknown variant …`, the path shortened to its first segments.
    pub fn describe(&self, what: &str) -> String {
        const SHOWN: usize = 8;
        let mut path = String::new();
        for segment in self.path.iter().rev().take(SHOWN) {
            path.push_str(segment);
        }
        if self.path.len() > SHOWN {
            path.push('…');
        }
        if self.shape {
            format!("{what}{path}: {}", self.message)
        } else if path.is_empty() {
            format!("invalid {what}: {}", self.message)
        } else {
            format!("invalid {what} at {path}: {}", self.message)
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe("value"))
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            path: Vec::new(),
            message: msg.to_string(),
            shape: false,
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |n| n.to_string())
}

/// Reads one Python value. `depth` counts the containers above it.
pub struct Depythonizer<'py> {
    obj: Bound<'py, PyAny>,
    depth: usize,
}

impl<'py> Depythonizer<'py> {
    /// A deserializer of `obj`, the root of what is read.
    pub fn new(obj: Bound<'py, PyAny>) -> Self {
        Depythonizer { obj, depth: 0 }
    }

    fn child(&self, obj: Bound<'py, PyAny>) -> Result<Self, Error> {
        if self.depth >= MAX_DEPTH {
            return Err(Error::shape(format!(
                "nested deeper than {MAX_DEPTH} levels (a cycle?)"
            )));
        }
        Ok(Depythonizer {
            obj,
            depth: self.depth + 1,
        })
    }

    /// Whether the value is plain data: None, bool, int, float, str, dict, list or tuple.
    fn is_plain(&self) -> bool {
        let obj = &self.obj;
        obj.is_none()
            || obj.is_instance_of::<PyBool>()
            || obj.is_instance_of::<PyInt>()
            || obj.is_instance_of::<PyFloat>()
            || obj.is_instance_of::<PyString>()
            || obj.is_instance_of::<PyDict>()
            || obj.is_instance_of::<PyList>()
            || obj.is_instance_of::<PyTuple>()
    }

    /// For an object of the package that is not plain data: what its `to_json()` gives
    /// (called only on objects that are not plain data).
    fn json_form(&self) -> Result<Option<Self>, Error> {
        let obj = &self.obj;
        let Ok(method) = obj.getattr(pyo3::intern!(obj.py(), "to_json")) else {
            return Ok(None);
        };
        if !method.is_callable() {
            return Ok(None);
        }
        let json = method
            .call0()
            .map_err(|e| Error::shape(format!("to_json() failed: {e}")))?;
        if json.is(obj) {
            return Err(Error::shape("to_json() returned the object itself".into()));
        }
        self.child(json).map(Some)
    }

    fn no_json_form(&self) -> Error {
        Error::shape(format!(
            "a {} has no JSON form (expected None, bool, int, float, str, list, tuple or dict)",
            type_name(&self.obj)
        ))
    }
}

impl<'de, 'py> de::Deserializer<'de> for Depythonizer<'py> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let obj = &self.obj;
        if obj.is_none() {
            return visitor.visit_unit();
        }
        if let Ok(b) = obj.cast::<PyBool>() {
            return visitor.visit_bool(b.is_true());
        }
        if let Ok(s) = obj.cast::<PyString>() {
            let s = s
                .to_str()
                .map_err(|e| Error::shape(format!("not valid UTF-8 text: {e}")))?;
            return visitor.visit_str(s);
        }
        if let Ok(i) = obj.cast::<PyInt>() {
            if let Ok(n) = i.extract::<u64>() {
                return visitor.visit_u64(n);
            }
            if let Ok(n) = i.extract::<i64>() {
                return visitor.visit_i64(n);
            }
            return Err(Error::shape(format!(
                "the integer {i} does not fit in 64 bits"
            )));
        }
        if let Ok(f) = obj.cast::<PyFloat>() {
            let v = f.value();
            if !v.is_finite() {
                return Err(Error::shape(format!("{v} has no JSON form (not finite)")));
            }
            return visitor.visit_f64(v);
        }
        if let Ok(d) = obj.cast::<PyDict>() {
            return visitor.visit_map(DictAccess {
                parent: &self,
                iter: d.iter(),
                value: None,
                len: d.len(),
            });
        }
        if let Ok(l) = obj.cast::<PyList>() {
            return visitor.visit_seq(ItemsAccess {
                parent: &self,
                items: Items::List(l.clone()),
                next: 0,
            });
        }
        if let Ok(t) = obj.cast::<PyTuple>() {
            return visitor.visit_seq(ItemsAccess {
                parent: &self,
                items: Items::Tuple(t.clone()),
                next: 0,
            });
        }
        match self.json_form()? {
            Some(json) => json.deserialize_any(visitor),
            None => Err(self.no_json_form()),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.obj.is_none() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    /// As `serde_json::Value` reads an enum: a `str` is a unit variant, a dict of one entry
    /// a variant and its content.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        if let Ok(s) = self.obj.cast::<PyString>() {
            let s = s
                .to_str()
                .map_err(|e| Error::shape(format!("not valid UTF-8 text: {e}")))?;
            return visitor.visit_enum(s.into_deserializer());
        }
        if let Ok(d) = self.obj.cast::<PyDict>() {
            if d.len() != 1 {
                return Err(de::Error::invalid_value(
                    de::Unexpected::Map,
                    &"map with a single key",
                ));
            }
            let Some((key, value)) = d.iter().next() else {
                return Err(de::Error::invalid_length(0, &"map with a single key"));
            };
            let key = key.cast_into::<PyString>().map_err(|e| {
                Error::shape(format!(
                    "a dict key must be a str, got {}",
                    type_name(e.into_inner().as_any())
                ))
            })?;
            let content = self.child(value)?;
            let segment = || format!("[{:?}]", key.to_string_lossy());
            return visitor
                .visit_enum(EnumAccess {
                    variant: key.clone(),
                    content,
                })
                .map_err(|e| e.at(segment));
        }
        if self.is_plain() {
            return Err(de::Error::invalid_type(
                unexpected(&self.obj),
                &"string or map",
            ));
        }
        match self.json_form()? {
            Some(json) => json.deserialize_enum(name, variants, visitor),
            None => Err(self.no_json_form()),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

/// What serde's messages call a value that is not what a type expects.
fn unexpected<'a>(obj: &'a Bound<'_, PyAny>) -> de::Unexpected<'a> {
    if obj.is_none() {
        de::Unexpected::Unit
    } else if let Ok(b) = obj.cast::<PyBool>() {
        de::Unexpected::Bool(b.is_true())
    } else if let Ok(i) = obj.cast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(n) => de::Unexpected::Signed(n),
            Err(_) => de::Unexpected::Other("integer"),
        }
    } else if let Ok(f) = obj.cast::<PyFloat>() {
        de::Unexpected::Float(f.value())
    } else {
        de::Unexpected::Seq
    }
}

struct DictAccess<'a, 'py> {
    parent: &'a Depythonizer<'py>,
    iter: pyo3::types::dict::BoundDictIterator<'py>,
    /// The value of the key just read, and the key (for the path of an error).
    value: Option<(Bound<'py, PyString>, Bound<'py, PyAny>)>,
    len: usize,
}

impl<'de> MapAccess<'de> for DictAccess<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.len = self.len.saturating_sub(1);
        let key = key.cast_into::<PyString>().map_err(|e| {
            Error::shape(format!(
                "a dict key must be a str, got {}",
                type_name(e.into_inner().as_any())
            ))
        })?;
        let text = key
            .to_str()
            .map_err(|e| Error::shape(format!("a key is not valid UTF-8 text: {e}")))?;
        let out = seed.deserialize(MapKey(text))?;
        self.value = Some((key, value));
        Ok(Some(out))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let Some((key, value)) = self.value.take() else {
            return Err(de::Error::custom("a value was asked for before its key"));
        };
        let segment = || format!("[{:?}]", key.to_string_lossy());
        let child = self.parent.child(value).map_err(|e| e.at(segment))?;
        seed.deserialize(child).map_err(|e| e.at(segment))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.len)
    }
}

enum Items<'py> {
    List(Bound<'py, PyList>),
    Tuple(Bound<'py, PyTuple>),
}

struct ItemsAccess<'a, 'py> {
    parent: &'a Depythonizer<'py>,
    items: Items<'py>,
    next: usize,
}

impl ItemsAccess<'_, '_> {
    fn len(&self) -> usize {
        match &self.items {
            Items::List(l) => l.len(),
            Items::Tuple(t) => t.len(),
        }
    }
}

impl<'de> SeqAccess<'de> for ItemsAccess<'_, '_> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        // By index, checked each time: a to_json() further in may have changed the list.
        let i = self.next;
        let item = match &self.items {
            Items::List(l) => l.get_item(i).ok(),
            Items::Tuple(t) => t.get_item(i).ok(),
        };
        let Some(item) = item else {
            return Ok(None);
        };
        self.next += 1;
        let segment = || format!("[{i}]");
        let child = self.parent.child(item).map_err(|e| e.at(segment))?;
        seed.deserialize(child).map(Some).map_err(|e| e.at(segment))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.len().saturating_sub(self.next))
    }
}

struct EnumAccess<'py> {
    variant: Bound<'py, PyString>,
    content: Depythonizer<'py>,
}

impl<'de, 'py> de::EnumAccess<'de> for EnumAccess<'py> {
    type Error = Error;
    type Variant = Depythonizer<'py>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Depythonizer<'py>), Error> {
        let name = self
            .variant
            .to_str()
            .map_err(|e| Error::shape(format!("a key is not valid UTF-8 text: {e}")))?;
        let variant = seed.deserialize(MapKey(name))?;
        Ok((variant, self.content))
    }
}

/// The content of a variant read from `{"variant": content}`, as `serde_json::Value` reads it.
impl<'de> de::VariantAccess<'de> for Depythonizer<'_> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_map(self, visitor)
    }
}

/// A dict key: a `str`, read as a number or bool by the types keyed by them (as serde_json
/// reads the keys of a JSON object).
struct MapKey<'a>(&'a str);

macro_rules! parse_key {
    ($($method:ident => $visit:ident: $ty:ty),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0.parse::<$ty>() {
                Ok(n) => visitor.$visit(n),
                Err(_) => Err(de::Error::invalid_type(de::Unexpected::Str(self.0), &visitor)),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for MapKey<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_str(self.0)
    }

    parse_key! {
        deserialize_bool => visit_bool: bool,
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(self.0.into_deserializer())
    }

    serde::forward_to_deserialize_any! {
        i128 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}
