//! Conversions between `serde_json` values (what transports parse, strict JSON) and Python-JSON
//! values (what hashes and signatures are computed over).
//!
//! Integers that fit 64 bits stay integers both ways. `serde_json` has already turned wire
//! integers wider than that into floats, and a wider Python integer becomes a float on the way
//! out; non-finite floats, which JSON cannot carry, become `null`, as `serde_json` renders them.

use super::{Int, Object, Value};

impl From<&serde_json::Value> for Value {
    fn from(value: &serde_json::Value) -> Value {
        match value {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::from(i)
                } else if let Some(u) = n.as_u64() {
                    Value::from(u)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Value::Array(items.iter().map(Value::from).collect())
            }
            serde_json::Value::Object(map) => {
                let mut object = Object::new();
                for (key, item) in map {
                    object.insert(key.clone(), Value::from(item));
                }
                Value::Object(object)
            }
        }
    }
}

impl Value {
    /// The `serde_json` value for a wire message (see the module docs for what cannot cross).
    pub fn to_serde(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => int_to_serde(i),
            Value::Float(x) => serde_json::Number::from_f64(*x)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_serde).collect())
            }
            Value::Object(object) => serde_json::Value::Object(
                object
                    .iter()
                    .map(|(key, item)| (key.to_owned(), item.to_serde()))
                    .collect(),
            ),
        }
    }
}

fn int_to_serde(i: &Int) -> serde_json::Value {
    i.as_i64()
        .map(serde_json::Value::from)
        .or_else(|| i.as_u64().map(serde_json::Value::from))
        .unwrap_or_else(|| {
            i.as_str()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or(serde_json::Value::Null, serde_json::Value::Number)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pyjson::Dialect;

    #[test]
    fn round_trips_keep_python_bytes() {
        let check = |wire: &str, python: &str| {
            let json: serde_json::Value = serde_json::from_str(wire).unwrap();
            let py = Value::from(&json);
            assert_eq!(py.dumps(Dialect::PY_COMPACT_ASCII), python, "{wire}");
            assert_eq!(py.to_serde(), json, "{wire}");
        };
        check(
            r#"{"b":1,"a":[2.0,1e-07,"é"]}"#,
            r#"{"a":[2.0,1e-07,"\u00e9"],"b":1}"#,
        );
        check("18446744073709551615", "18446744073709551615");
        check("-9223372036854775808", "-9223372036854775808");
        assert_eq!(Value::Float(f64::NAN).to_serde(), serde_json::Value::Null);
        let wide = Value::Int(Int::parse("100000000000000000000000").unwrap());
        assert_eq!(wide.to_serde(), serde_json::json!(1e23));
    }
}
