//! Conversions between the wire's `serde_json` values and the Python-JSON values hashes are
//! computed over.
//!
//! The transport parses lines with `serde_json` (strict JSON, as JSON-RPC requires). Content
//! hashes must be computed the way the reference computes them, over `json.dumps` bytes, so the
//! parts of a request that are hashed are converted to [`bernstein_protocol::pyjson::Value`]
//! first. Integers that fit 64 bits stay integers; `serde_json` has already turned larger ones
//! into floats, the one place where a hash can differ from the reference's (documented in
//! `docs/ARCHITECTURE.md`).

use bernstein_protocol::pyjson::{Object, Value as PyValue};
use serde_json::Value as JsonValue;

/// The Python-JSON value of a wire value.
pub(crate) fn to_py(value: &JsonValue) -> PyValue {
    match value {
        JsonValue::Null => PyValue::Null,
        JsonValue::Bool(b) => PyValue::Bool(*b),
        JsonValue::Number(n) => {
            if let Some(i) = n.as_i64() {
                PyValue::from(i)
            } else if let Some(u) = n.as_u64() {
                PyValue::from(u)
            } else {
                PyValue::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        JsonValue::String(s) => PyValue::Str(s.clone()),
        JsonValue::Array(items) => PyValue::Array(items.iter().map(to_py).collect()),
        JsonValue::Object(map) => {
            let mut object = Object::new();
            for (key, item) in map {
                object.insert(key.clone(), to_py(item));
            }
            PyValue::Object(object)
        }
    }
}

/// The wire value of a Python-JSON value. Non-finite floats, which JSON cannot carry, become
/// `null` (as `serde_json` renders them); integers beyond 64 bits become floats.
pub(crate) fn to_json(value: &PyValue) -> JsonValue {
    match value {
        PyValue::Null => JsonValue::Null,
        PyValue::Bool(b) => JsonValue::Bool(*b),
        PyValue::Int(i) => i
            .as_i64()
            .map(JsonValue::from)
            .or_else(|| i.as_u64().map(JsonValue::from))
            .unwrap_or_else(|| {
                i.as_str()
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(JsonValue::Null, JsonValue::Number)
            }),
        PyValue::Float(x) => {
            serde_json::Number::from_f64(*x).map_or(JsonValue::Null, JsonValue::Number)
        }
        PyValue::Str(s) => JsonValue::String(s.clone()),
        PyValue::Array(items) => JsonValue::Array(items.iter().map(to_json).collect()),
        PyValue::Object(object) => JsonValue::Object(
            object
                .iter()
                .map(|(key, item)| (key.to_owned(), to_json(item)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bernstein_protocol::pyjson::Dialect;

    #[test]
    fn round_trips_keep_python_bytes() {
        let check = |wire: &str, python: &str| {
            let json: JsonValue = serde_json::from_str(wire).unwrap();
            assert_eq!(
                to_py(&json).dumps(Dialect::PY_COMPACT_ASCII),
                python,
                "{wire}"
            );
            assert_eq!(to_json(&to_py(&json)), json, "{wire}");
        };
        check(
            r#"{"b":1,"a":[1.0,"é",null,true]}"#,
            r#"{"a":[1.0,"\u00e9",null,true],"b":1}"#,
        );
        check("18446744073709551615", "18446744073709551615");
        check("-5", "-5");
        check("1e2", "100.0");
    }
}
