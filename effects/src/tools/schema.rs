//! Input validation against a tool's JSON Schema, with model-readable, bounded messages.
//!
//! With the `schema` feature (on by default) every input is checked against the tool's
//! schema by the `jsonschema` crate. Without it a schema must still be a JSON object (it is
//! sent to the model), but inputs are not checked against it: each tool checks its own.

use serde_json::Value;

/// At most this many problems are listed in one message.
#[cfg(feature = "schema")]
const MAX_PROBLEMS: usize = 5;
/// Each listed problem is cut to this many bytes (the instance value may be huge).
#[cfg(feature = "schema")]
const MAX_PROBLEM_BYTES: usize = 200;

/// A compiled input schema.
pub(crate) struct InputSchema {
    #[cfg(feature = "schema")]
    validator: jsonschema::Validator,
}

#[cfg(not(feature = "schema"))]
impl InputSchema {
    /// Accepts any JSON object as a schema (without the `schema` feature nothing checks it).
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        if !schema.is_object() {
            return Err("the input schema must be a JSON object".to_owned());
        }
        Ok(InputSchema {})
    }

    /// Always `Ok`: without the `schema` feature, inputs are the tool's to check.
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)]
    pub(crate) fn check(&self, _input: &Value) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(feature = "schema")]
impl InputSchema {
    /// Compiles `schema`; the error says what is wrong with it.
    pub(crate) fn compile(schema: &Value) -> Result<Self, String> {
        if !schema.is_object() {
            return Err("the input schema must be a JSON object".to_owned());
        }
        jsonschema::validator_for(schema)
            .map(|validator| InputSchema { validator })
            .map_err(|e| bounded(&e.to_string(), 500))
    }

    /// `Ok` when `input` matches; otherwise a message for the model listing what is wrong
    /// (at most [`MAX_PROBLEMS`] problems, each cut to [`MAX_PROBLEM_BYTES`] bytes).
    pub(crate) fn check(&self, input: &Value) -> Result<(), String> {
        let mut problems = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(input) {
            if problems.len() < MAX_PROBLEMS {
                let at = error.instance_path.to_string();
                let what = bounded(&error.to_string(), MAX_PROBLEM_BYTES);
                problems.push(if at.is_empty() {
                    what
                } else {
                    format!("at `{}`: {what}", bounded(&at, 100))
                });
            } else {
                more += 1;
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        let mut message = String::from("the input does not match the tool's input schema: ");
        message.push_str(&problems.join("; "));
        if more > 0 {
            message.push_str(&format!(" (and {more} more problems)"));
        }
        Err(message)
    }
}

pub(crate) use rebound_core::tool::bounded;

#[cfg(all(test, feature = "schema"))]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn huge_instances_give_short_messages() {
        let schema = InputSchema::compile(&json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}}
        }))
        .expect("valid schema");
        let err = schema
            .check(&json!({"n": "x".repeat(1_000_000)}))
            .expect_err("a string is not an integer");
        assert!(err.len() < 1000, "{} bytes", err.len());
        assert!(err.contains("at `/n`"), "{err}");
    }

    #[test]
    fn schemas_that_are_not_objects_are_refused() {
        assert!(InputSchema::compile(&json!(true)).is_err());
        assert!(InputSchema::compile(&json!({"type": 12})).is_err());
    }
}
