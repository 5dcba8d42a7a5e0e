//! Tool input schemas in the subset of the OpenAPI 3.0 Schema object Gemini's
//! `FunctionDeclaration.parameters` takes (the API reference's `Schema`): JSON Schema in,
//! the nearest schema Gemini accepts out.
//!
//! What changes, and why (each of these is a 400 from the API otherwise):
//!
//! - `type` is written in the API's enum (`OBJECT`, `STRING`, …); a list of types with
//!   `"null"` becomes the type and `nullable: true`; a list of several types, an `anyOf`.
//! - `$ref` to `#/$defs/…` or `#/definitions/…` is replaced by the definition (Gemini has no
//!   references), at most [`MAX_DEPTH`] levels deep; a deeper or unknown reference becomes an
//!   unconstrained schema with the reference's description.
//! - `oneOf` becomes `anyOf`; `allOf` is merged into the schema (properties and `required`
//!   joined); `const` becomes a one-value `enum`. `enum` is kept only when every value is a
//!   string (the API takes string enums only), and `format` only where the API knows it
//!   (`enum` and `date-time` for strings, `float`/`double`, `int32`/`int64`).
//! - Keys the subset does not have (`additionalProperties`, `$schema`, `examples`,
//!   `patternProperties`, …) are left out, as is an empty `properties` (refused for an
//!   object); `required` keeps only names of listed properties.

use serde_json::{json, Map, Value};

/// How deep references are followed and schemas nested before the rest is left
/// unconstrained (the API itself refuses deeply nested schemas).
pub(crate) const MAX_DEPTH: usize = 24;

/// Keys copied as they are (when their value has the right JSON type).
const NUMBERS: &[&str] = &[
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
];

/// `schema` as Gemini's `parameters`, or `None` when it constrains nothing Gemini can say
/// (an object with no properties: the declaration is sent without `parameters`, which is
/// how the API takes a function without arguments).
pub(crate) fn parameters(schema: &Value) -> Option<Value> {
    let out = translate(schema, schema, 0);
    let empty_object = out.get("type").and_then(Value::as_str) == Some("OBJECT")
        && out.get("properties").is_none()
        && out.get("anyOf").is_none();
    if empty_object || out.as_object().map_or(true, Map::is_empty) {
        return None;
    }
    Some(out)
}

fn translate(schema: &Value, root: &Value, depth: usize) -> Value {
    let Some(map) = schema.as_object() else {
        // `true` (anything) or a malformed schema: unconstrained.
        return json!({});
    };
    if depth >= MAX_DEPTH {
        return described(map, json!({}));
    }
    if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
        return match resolve(root, reference) {
            Some(target) => {
                let mut out = translate(target, root, depth + 1);
                if let (Some(d), Some(o)) = (map.get("description"), out.as_object_mut()) {
                    o.insert("description".into(), d.clone());
                }
                out
            }
            None => described(map, json!({})),
        };
    }
    let mut merged;
    let map = match map.get("allOf").and_then(Value::as_array) {
        Some(parts) => {
            merged = map.clone();
            merged.remove("allOf");
            for part in parts {
                let part = match part.get("$ref").and_then(Value::as_str) {
                    Some(r) => resolve(root, r).unwrap_or(part),
                    None => part,
                };
                merge_into(&mut merged, part);
            }
            &merged
        }
        None => map,
    };

    let mut out = Map::new();
    let mut nullable = map.get("nullable").and_then(Value::as_bool) == Some(true);
    let mut any_of = Vec::new();
    match map.get("type") {
        Some(Value::String(t)) if t == "null" => nullable = true,
        Some(Value::String(t)) => {
            if let Some(t) = type_name(t) {
                out.insert("type".into(), t.into());
            }
        }
        Some(Value::Array(types)) => {
            let named: Vec<&str> = types
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| {
                    let null = *t == "null";
                    nullable |= null;
                    !null
                })
                .filter_map(type_name)
                .collect();
            match named.as_slice() {
                [] => {}
                [one] => {
                    out.insert("type".into(), (*one).into());
                }
                several => any_of.extend(several.iter().map(|t| json!({"type": t}))),
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = map.get(key) {
            for option in options {
                if option.get("type").and_then(Value::as_str) == Some("null") {
                    nullable = true;
                } else {
                    any_of.push(translate(option, root, depth + 1));
                }
            }
        }
    }
    if any_of.len() == 1 && out.get("type").is_none() {
        // One option left once `null` is taken out: the option itself.
        if let Some(Value::Object(only)) = any_of.pop() {
            out.extend(only);
        }
    } else if !any_of.is_empty() {
        out.insert("anyOf".into(), any_of.into());
    }
    if nullable {
        out.insert("nullable".into(), true.into());
    }
    for key in ["title", "description", "pattern"] {
        if let Some(v) = map.get(key).filter(|v| v.is_string()) {
            out.insert(key.into(), v.clone());
        }
    }
    for key in NUMBERS {
        if let Some(v) = map.get(*key).filter(|v| v.is_number()) {
            out.insert((*key).into(), v.clone());
        }
    }
    if let Some(v) = map.get("default") {
        out.insert("default".into(), v.clone());
    }
    if let Some(v) = map
        .get("example")
        .or_else(|| map.get("examples").and_then(|e| e.as_array()?.first()))
    {
        out.insert("example".into(), v.clone());
    }
    let values = match (map.get("enum"), map.get("const")) {
        (Some(Value::Array(values)), _) => Some(values.clone()),
        (None, Some(value)) => Some(vec![value.clone()]),
        _ => None,
    };
    if let Some(values) = values.filter(|v| !v.is_empty() && v.iter().all(Value::is_string)) {
        out.insert("enum".into(), values.into());
        out.entry("type").or_insert_with(|| "STRING".into());
    }
    let ty = out.get("type").and_then(Value::as_str).map(str::to_owned);
    if let Some(format) = map.get("format").and_then(Value::as_str) {
        let known = match ty.as_deref() {
            Some("STRING") => matches!(format, "enum" | "date-time"),
            Some("NUMBER") => matches!(format, "float" | "double"),
            Some("INTEGER") => matches!(format, "int32" | "int64"),
            _ => false,
        };
        if known {
            out.insert("format".into(), format.into());
        }
    }
    if let Some(Value::Object(properties)) = map.get("properties") {
        let translated: Map<String, Value> = properties
            .iter()
            .map(|(name, p)| (name.clone(), translate(p, root, depth + 1)))
            .collect();
        if !translated.is_empty() {
            if let Some(Value::Array(required)) = map.get("required") {
                let required: Vec<Value> = required
                    .iter()
                    .filter(|r| r.as_str().is_some_and(|r| translated.contains_key(r)))
                    .cloned()
                    .collect();
                if !required.is_empty() {
                    out.insert("required".into(), required.into());
                }
            }
            out.insert("properties".into(), translated.into());
            out.entry("type").or_insert_with(|| "OBJECT".into());
        }
    }
    if let Some(items) = map.get("items") {
        // A tuple's item list: the first item's schema stands for all.
        let items = match items {
            Value::Array(list) => list.first().unwrap_or(&Value::Null),
            one => one,
        };
        out.insert("items".into(), translate(items, root, depth + 1));
        out.entry("type").or_insert_with(|| "ARRAY".into());
    } else if ty.as_deref() == Some("ARRAY") {
        // The API refuses an array without `items`.
        out.insert("items".into(), json!({}));
    }
    Value::Object(out)
}

/// The API's name for a JSON Schema type, `None` for one it does not have.
fn type_name(t: &str) -> Option<&'static str> {
    Some(match t {
        "object" => "OBJECT",
        "string" => "STRING",
        "number" => "NUMBER",
        "integer" => "INTEGER",
        "boolean" => "BOOLEAN",
        "array" => "ARRAY",
        _ => return None,
    })
}

/// `schema` with `map`'s description, when it has one.
fn described(map: &Map<String, Value>, mut schema: Value) -> Value {
    if let (Some(d), Some(o)) = (
        map.get("description").filter(|d| d.is_string()),
        schema.as_object_mut(),
    ) {
        o.insert("description".into(), d.clone());
    }
    schema
}

/// The schema a local reference names (`#/$defs/Name`, `#/definitions/Name`, or any JSON
/// pointer into the root).
fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

/// Joins `part` (one of an `allOf`) into `into`: properties and `required` lists are
/// unioned, other keys taken when `into` lacks them.
fn merge_into(into: &mut Map<String, Value>, part: &Value) {
    let Some(part) = part.as_object() else {
        return;
    };
    for (key, value) in part {
        match (key.as_str(), into.get_mut(key), value) {
            ("properties", Some(Value::Object(mine)), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    mine.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            ("required", Some(Value::Array(mine)), Value::Array(theirs)) => {
                for r in theirs {
                    if !mine.contains(r) {
                        mine.push(r.clone());
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, _) => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// A Gemini schema read back as JSON Schema (for the fake server's parsed requests): types
/// in lower case, `nullable` as a type list.
#[cfg(feature = "server")]
pub(crate) fn to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            let nullable = map.get("nullable").and_then(Value::as_bool) == Some(true);
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("nullable", _) => {}
                    ("type", Value::String(t)) => {
                        let t = t.to_ascii_lowercase();
                        out.insert(
                            "type".into(),
                            if nullable {
                                json!([t, "null"])
                            } else {
                                t.into()
                            },
                        );
                    }
                    ("properties", Value::Object(props)) => {
                        let props: Map<String, Value> = props
                            .iter()
                            .map(|(k, v)| (k.clone(), to_json_schema(v)))
                            .collect();
                        out.insert(key.clone(), props.into());
                    }
                    ("items", v) => {
                        out.insert(key.clone(), to_json_schema(v));
                    }
                    ("anyOf", Value::Array(options)) => {
                        out.insert(
                            key.clone(),
                            options
                                .iter()
                                .map(to_json_schema)
                                .collect::<Vec<_>>()
                                .into(),
                        );
                    }
                    _ => {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}
