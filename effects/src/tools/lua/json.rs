//! Converting between JSON and Lua values: a call's input into Lua, a definition's schema
//! and `run`'s result out of it.

use mlua::{Lua, Value as LuaValue};
use serde_json::{Map, Number, Value};

/// Nesting beyond this is refused when converting between Lua and JSON (also stops cycles).
const MAX_DEPTH: usize = 64;

pub(super) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "table with named fields",
    }
}

/// A JSON value as a Lua value: objects and arrays become tables, `null` becomes `nil`.
pub(super) fn json_to_lua(lua: &Lua, value: &Value, depth: usize) -> mlua::Result<LuaValue> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::RuntimeError(format!(
            "the input is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(match value {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, json_to_lua(lua, item, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
        Value::Object(fields) => {
            let table = lua.create_table_with_capacity(0, fields.len())?;
            for (key, item) in fields {
                table.raw_set(key.as_str(), json_to_lua(lua, item, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// A Lua value as JSON. Tables whose keys are exactly 1..n become arrays, tables with string
/// keys (and the empty table) become objects; anything else is refused with where it is.
pub(super) fn lua_to_json(value: &LuaValue, at: &str, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "is nested more than {MAX_DEPTH} levels deep at `{at}` (or refers to itself)"
        ));
    }
    match value {
        LuaValue::Nil => Ok(Value::Null),
        LuaValue::Boolean(b) => Ok(Value::Bool(*b)),
        LuaValue::Integer(i) => Ok(Value::from(*i)),
        LuaValue::Number(n) => Number::from_f64(*n)
            .map(Value::Number)
            .ok_or_else(|| format!("has a number that JSON cannot hold ({n}) at `{at}`")),
        LuaValue::String(s) => match s.to_str() {
            Ok(s) => Ok(Value::String(s.to_string())),
            Err(_) => Err(format!("has a string that is not UTF-8 text at `{at}`")),
        },
        LuaValue::Table(table) => {
            let mut named = Map::new();
            let mut indexed: Vec<(i64, Value)> = Vec::new();
            for pair in table.clone().pairs::<LuaValue, LuaValue>() {
                let (key, item) = pair.map_err(|e| format!("cannot be read at `{at}`: {e}"))?;
                match key {
                    LuaValue::String(key) => {
                        let key = key
                            .to_str()
                            .map_err(|_| format!("has a key that is not UTF-8 text at `{at}`"))?
                            .to_string();
                        let inner = format!("{at}.{key}");
                        named.insert(key, lua_to_json(&item, &inner, depth + 1)?);
                    }
                    LuaValue::Integer(i) => {
                        let inner = format!("{at}[{i}]");
                        indexed.push((i, lua_to_json(&item, &inner, depth + 1)?));
                    }
                    other => {
                        return Err(format!(
                            "has a {} key at `{at}` (use string keys or a list)",
                            other.type_name()
                        ))
                    }
                }
            }
            if indexed.is_empty() {
                return Ok(Value::Object(named));
            }
            if !named.is_empty() {
                return Err(format!("mixes list items and named fields at `{at}`"));
            }
            indexed.sort_by_key(|(i, _)| *i);
            if indexed
                .iter()
                .enumerate()
                .any(|(n, (i, _))| *i != n as i64 + 1)
            {
                return Err(format!(
                    "has a list with holes or keys other than 1, 2, 3, … at `{at}`"
                ));
            }
            Ok(Value::Array(indexed.into_iter().map(|(_, v)| v).collect()))
        }
        other => Err(format!(
            "has a {} at `{at}`, which JSON cannot hold",
            other.type_name()
        )),
    }
}
