//! The advertised output schemas (`MCP_SURFACE.md` §2.3).
//!
//! The four structured tools (`bernstein_run`, `bernstein_status`, `bernstein_run_status`,
//! `bernstein_subscribe`) declare exactly what they emit: the payload schema `P` with the
//! meter off, and `{result: P, _meter: M}` with it on. Every other tool returns text, which a
//! host sees as `{"result": <text>}`, and declares that wrapper.
//!
//! The run-handle branch of `bernstein_run_status` is generated from
//! [`RunHandle::to_wire_object`], so the advertised fields cannot drift from the emitted ones.

use bernstein_journal::handle::{RunHandle, TaskStatus};
use bernstein_protocol::pyjson::{Object, Value};

use crate::registry::ToolDef;

fn file(text: &str) -> Value {
    // These files are part of the crate and parsed by its tests; a parse failure can only be a
    // build defect, and answers with an unconstrained schema rather than a panic.
    Value::parse(text).unwrap_or_else(|_| Value::Object(Object::new()))
}

fn tool_error() -> Value {
    file(include_str!("output/tool_error.json"))
}

fn administrative_run_status() -> Value {
    file(include_str!("output/administrative_run_status.json"))
}

fn any_of(branches: Vec<Value>) -> Value {
    Value::Object(Object::new().with("anyOf", branches))
}

fn type_of(name: &str) -> Value {
    Value::Object(Object::new().with("type", name))
}

/// The closed schema of the run-handle wire body, derived from the body itself.
pub(crate) fn run_handle_schema() -> Value {
    let sample = RunHandle::from_journal("", "", &[], "").to_wire_object();
    let mut properties = Object::new();
    for (key, value) in sample.iter() {
        let schema = match (key, value) {
            ("status", _) => {
                let mut statuses: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
                statuses.sort_unstable();
                Value::Object(Object::new().with("type", "string").with(
                    "enum",
                    statuses.into_iter().map(Value::from).collect::<Vec<_>>(),
                ))
            }
            ("progress", _) => Value::Object(
                Object::new().with("type", vec![Value::from("object"), Value::from("null")]),
            ),
            (_, Value::Str(_)) => type_of("string"),
            (_, Value::Bool(_)) => type_of("boolean"),
            (_, Value::Int(_)) => type_of("integer"),
            (_, Value::Float(_)) => type_of("number"),
            _ => Value::Object(Object::new()),
        };
        properties.insert(key, schema);
    }
    let mut required: Vec<&str> = sample.keys().collect();
    required.sort_unstable();
    Value::Object(
        Object::new()
            .with("type", "object")
            .with("additionalProperties", false)
            .with(
                "required",
                required.into_iter().map(Value::from).collect::<Vec<_>>(),
            )
            .with("properties", properties),
    )
}

/// The payload schema `P` of a structured tool.
pub(crate) fn payload_schema(name: &str) -> Option<Value> {
    let branches = match name {
        "bernstein_run" => vec![
            file(include_str!("output/run_started.json")),
            administrative_run_status(),
            tool_error(),
        ],
        "bernstein_status" => vec![
            file(include_str!("output/status_report.json")),
            file(include_str!("output/status_outage.json")),
            tool_error(),
        ],
        "bernstein_run_status" => vec![
            run_handle_schema(),
            administrative_run_status(),
            tool_error(),
        ],
        "bernstein_subscribe" => vec![
            file(include_str!("output/subscribe_notified.json")),
            file(include_str!("output/subscribe_timed_out.json")),
            tool_error(),
        ],
        _ => return None,
    };
    Some(any_of(branches))
}

/// `M`: the `_meter` object.
pub(crate) fn meter_schema() -> Value {
    let properties = Object::new()
        .with("tool", type_of("string"))
        .with("call_id", type_of("string"))
        .with("latency_ms", type_of("number"))
        .with("cost_usd", type_of("number"))
        .with("ok", type_of("boolean"))
        .with("ts", type_of("string"))
        .with("error", type_of("string"));
    let required: Vec<Value> = ["tool", "call_id", "latency_ms", "cost_usd", "ok", "ts"]
        .into_iter()
        .map(Value::from)
        .collect();
    Value::Object(
        Object::new()
            .with("type", "object")
            .with("additionalProperties", false)
            .with("required", required)
            .with("properties", properties),
    )
}

/// `envelope(P)`.
pub(crate) fn envelope_schema(payload: Value) -> Value {
    Value::Object(
        Object::new()
            .with("type", "object")
            .with("additionalProperties", false)
            .with(
                "required",
                vec![Value::from("result"), Value::from("_meter")],
            )
            .with(
                "properties",
                Object::new()
                    .with("result", payload)
                    .with("_meter", meter_schema()),
            ),
    )
}

/// The wrapper schema FastMCP declares for a tool returning text.
pub(crate) fn text_result_schema(name: &str) -> Value {
    Value::Object(
        Object::new()
            .with(
                "properties",
                Object::new().with(
                    "result",
                    Object::new().with("title", "Result").with("type", "string"),
                ),
            )
            .with("required", vec![Value::from("result")])
            .with("title", format!("{name}Output"))
            .with("type", "object"),
    )
}

/// The advertised output schema of `def` with the meter on or off.
pub(crate) fn output_schema(def: &ToolDef, meter_on: bool) -> Value {
    match payload_schema(def.name) {
        Some(payload) if def.structured => {
            if meter_on {
                envelope_schema(payload)
            } else {
                payload
            }
        }
        _ => text_result_schema(def.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::TOOLS;

    /// `Catalogue::call` reads a tool's `structured` flag to choose between the parsed payload
    /// and the `{"result": <text>}` wrapper as its structured content, so the advertised schema
    /// follows the same flag rather than the name: a tool with a payload schema of its own that
    /// is declared as text advertises the text wrapper, with the meter on or off.
    #[test]
    fn the_output_schema_follows_the_structured_flag_not_the_name() {
        let mut payload_schemas = 0;
        for def in &TOOLS {
            payload_schemas += usize::from(payload_schema(def.name).is_some());
            let as_text = ToolDef {
                structured: false,
                ..*def
            };
            for meter_on in [false, true] {
                assert_eq!(
                    output_schema(&as_text, meter_on),
                    text_result_schema(def.name),
                    "{} with the meter {}",
                    def.name,
                    if meter_on { "on" } else { "off" }
                );
            }
        }
        // The four structured tools are among those turned to text above.
        assert_eq!(payload_schemas, 4);
    }
}
