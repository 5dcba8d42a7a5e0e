//! A serde `Serializer` that builds Python objects: core's values handed to Python as dicts,
//! lists, `str`, `int`, `float`, `bool` and `None`, with no JSON value or text in between.
//!
//! It builds what `serde_json::to_value` would and `json.loads` would then make of it, so the
//! JSON shape stays the one contract: tuples and bytes become lists, map keys strings
//! (numbers and bools written out, as in JSON), a float JSON cannot write becomes `None`.

use pyo3::prelude::*;
use pyo3::types::PyDictMethods;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use serde::ser::{self, Serialize};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::sync::Mutex;

/// The Python strings of field and variant names (`&'static str`s of core's types), made and
/// interned once: a new string per field of every command would cost its allocation and, as
/// a dict key, its hash. Keyed by address and length; a static is never dropped, so no
/// Python object outlives the interpreter in a destructor.
static NAMES: Mutex<BTreeMap<(usize, usize), Py<PyString>>> = Mutex::new(BTreeMap::new());

fn name<'py>(py: Python<'py>, name: &'static str) -> Bound<'py, PyString> {
    let key = (name.as_ptr() as usize, name.len());
    // A poisoned lock only means a panic elsewhere: the map itself is always whole.
    let mut names = NAMES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    names
        .entry(key)
        .or_insert_with(|| PyString::intern(py, name).unbind())
        .bind(py)
        .clone()
}

/// Why a value could not be built (a bug in rebound, or Python out of memory).
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

impl From<PyErr> for Error {
    fn from(e: PyErr) -> Self {
        Error(e.to_string())
    }
}

type Result<T> = std::result::Result<T, Error>;

/// Builds the Python object of one serializable value.
#[derive(Clone, Copy)]
pub struct Pythonizer<'py> {
    py: Python<'py>,
}

impl<'py> Pythonizer<'py> {
    /// A serializer building objects of `py`.
    pub fn new(py: Python<'py>) -> Self {
        Pythonizer { py }
    }

    fn int<T>(self, v: T) -> Result<Bound<'py, PyAny>>
    where
        T: IntoPyObject<'py, Output = Bound<'py, PyInt>, Error = Infallible>,
    {
        match v.into_pyobject(self.py) {
            Ok(int) => Ok(int.into_any()),
            Err(never) => match never {},
        }
    }

    /// `{variant: content}`, as serde_json writes a variant with content.
    fn variant(
        self,
        variant: &'static str,
        content: Bound<'py, PyAny>,
    ) -> Result<Bound<'py, PyAny>> {
        let d = PyDict::new(self.py);
        d.set_item(name(self.py, variant), content)?;
        Ok(d.into_any())
    }
}

impl<'py> ser::Serializer for Pythonizer<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;
    type SerializeSeq = Items<'py>;
    type SerializeTuple = Items<'py>;
    type SerializeTupleStruct = Items<'py>;
    type SerializeTupleVariant = Items<'py>;
    type SerializeMap = Dict<'py>;
    type SerializeStruct = Dict<'py>;
    type SerializeStructVariant = Dict<'py>;

    fn serialize_bool(self, v: bool) -> Result<Self::Ok> {
        Ok(PyBool::new(self.py, v).to_owned().into_any())
    }

    fn serialize_i8(self, v: i8) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_i16(self, v: i16) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_i32(self, v: i32) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_i64(self, v: i64) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_i128(self, v: i128) -> Result<Self::Ok> {
        // As serde_json: a number only when it fits in 64 bits.
        match (u64::try_from(v), i64::try_from(v)) {
            (Ok(u), _) => self.int(u),
            (_, Ok(i)) => self.int(i),
            _ => Err(Error("number out of range".into())),
        }
    }

    fn serialize_u8(self, v: u8) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_u16(self, v: u16) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_u32(self, v: u32) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_u64(self, v: u64) -> Result<Self::Ok> {
        self.int(v)
    }

    fn serialize_u128(self, v: u128) -> Result<Self::Ok> {
        u64::try_from(v)
            .map_err(|_| Error("number out of range".into()))
            .and_then(|u| self.int(u))
    }

    fn serialize_f32(self, v: f32) -> Result<Self::Ok> {
        self.serialize_f64(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<Self::Ok> {
        if v.is_finite() {
            Ok(PyFloat::new(self.py, v).into_any())
        } else {
            Ok(self.py.None().into_bound(self.py))
        }
    }

    fn serialize_char(self, v: char) -> Result<Self::Ok> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<Self::Ok> {
        Ok(PyString::new(self.py, v).into_any())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<Self::Ok> {
        Ok(PyList::new(self.py, v)?.into_any())
    }

    fn serialize_none(self) -> Result<Self::Ok> {
        Ok(self.py.None().into_bound(self.py))
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Self::Ok> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<Self::Ok> {
        self.serialize_none()
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<Self::Ok> {
        self.serialize_none()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Self::Ok> {
        Ok(name(self.py, variant).into_any())
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Self::Ok> {
        let content = value.serialize(self)?;
        self.variant(variant, content)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Items<'py>> {
        Ok(Items {
            to: self,
            items: Vec::with_capacity(len.unwrap_or(0)),
            variant: None,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Items<'py>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(self, _name: &'static str, len: usize) -> Result<Items<'py>> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Items<'py>> {
        Ok(Items {
            to: self,
            items: Vec::with_capacity(len),
            variant: Some(variant),
        })
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Dict<'py>> {
        Ok(Dict {
            to: self,
            dict: PyDict::new(self.py),
            key: None,
            variant: None,
        })
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Dict<'py>> {
        self.serialize_map(None)
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Dict<'py>> {
        let mut d = self.serialize_map(None)?;
        d.variant = Some(variant);
        Ok(d)
    }
}

/// A list being built (a sequence, tuple, or a tuple variant's content).
pub struct Items<'py> {
    to: Pythonizer<'py>,
    items: Vec<Bound<'py, PyAny>>,
    variant: Option<&'static str>,
}

impl<'py> Items<'py> {
    fn push<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.items.push(value.serialize(self.to)?);
        Ok(())
    }

    fn done(self) -> Result<Bound<'py, PyAny>> {
        let list = PyList::new(self.to.py, self.items)?.into_any();
        match self.variant {
            Some(variant) => self.to.variant(variant, list),
            None => Ok(list),
        }
    }
}

impl<'py> ser::SerializeSeq for Items<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

impl<'py> ser::SerializeTuple for Items<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

impl<'py> ser::SerializeTupleStruct for Items<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

impl<'py> ser::SerializeTupleVariant for Items<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        self.push(value)
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

/// A dict being built (a map, a struct, or a struct variant's content).
pub struct Dict<'py> {
    to: Pythonizer<'py>,
    dict: Bound<'py, PyDict>,
    key: Option<Bound<'py, PyString>>,
    variant: Option<&'static str>,
}

impl<'py> Dict<'py> {
    fn done(self) -> Result<Bound<'py, PyAny>> {
        let dict = self.dict.into_any();
        match self.variant {
            Some(variant) => self.to.variant(variant, dict),
            None => Ok(dict),
        }
    }
}

impl<'py> ser::SerializeMap for Dict<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<()> {
        let key = key.serialize(KeyText)?;
        self.key = Some(PyString::new(self.to.py, &key));
        Ok(())
    }

    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<()> {
        let key = self
            .key
            .take()
            .ok_or_else(|| Error("a map value was serialized before its key".into()))?;
        self.dict.set_item(key, value.serialize(self.to)?)?;
        Ok(())
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

impl<'py> ser::SerializeStruct for Dict<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<()> {
        self.dict
            .set_item(self::name(self.to.py, name), value.serialize(self.to)?)?;
        Ok(())
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

impl<'py> ser::SerializeStructVariant for Dict<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        name: &'static str,
        value: &T,
    ) -> Result<()> {
        ser::SerializeStruct::serialize_field(self, name, value)
    }

    fn end(self) -> Result<Self::Ok> {
        self.done()
    }
}

/// A map key's text, as serde_json writes keys: strings as they are, numbers and bools
/// written out; anything else is no JSON object key.
struct KeyText;

fn no_key() -> Error {
    Error("key must be a string".into())
}

impl ser::Serializer for KeyText {
    type Ok = String;
    type Error = Error;
    type SerializeSeq = ser::Impossible<String, Error>;
    type SerializeTuple = ser::Impossible<String, Error>;
    type SerializeTupleStruct = ser::Impossible<String, Error>;
    type SerializeTupleVariant = ser::Impossible<String, Error>;
    type SerializeMap = ser::Impossible<String, Error>;
    type SerializeStruct = ser::Impossible<String, Error>;
    type SerializeStructVariant = ser::Impossible<String, Error>;

    fn serialize_bool(self, v: bool) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_i128(self, v: i128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_u128(self, v: u128) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String> {
        Err(no_key())
    }
    fn serialize_f64(self, _v: f64) -> Result<String> {
        Err(no_key())
    }
    fn serialize_char(self, v: char) -> Result<String> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String> {
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String> {
        Err(no_key())
    }
    fn serialize_none(self) -> Result<String> {
        Err(no_key())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _value: &T) -> Result<String> {
        Err(no_key())
    }
    fn serialize_unit(self) -> Result<String> {
        Err(no_key())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String> {
        Err(no_key())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String> {
        Err(no_key())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(no_key())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple> {
        Err(no_key())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(no_key())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(no_key())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        Err(no_key())
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self::SerializeStruct> {
        Err(no_key())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(no_key())
    }
}
