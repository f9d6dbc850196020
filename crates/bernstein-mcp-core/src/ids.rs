//! Content-derived W3C trace and span ids (FORMATS §3.4 "W3C ids", MCP_SURFACE §4.7).
//!
//! Every id is the prefix of a SHA-256 over the PY-COMPACT-ASCII bytes of
//! `{"domain": <domain>, "fields": <fields>}`, so any process that sees the same request content
//! derives the same id with no shared memory. A well-formed client `traceparent` in `_meta` wins
//! over the derivation, so a host's own trace carries through.

use bernstein_journal::crypto::sha256_hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};
use serde_json::Value as JsonValue;

/// Domain of the run's trace id.
pub const TRACE_DOMAIN: &str = "mcp.trace";
/// Domain of an anchored call's span id.
pub const SPAN_DOMAIN: &str = "mcp.span";
/// Domain of the transport correlation id of a request ([`request_span_id`]).
pub const REQUEST_DOMAIN: &str = "mcp.request";

/// The first `2 * bytes` hex characters of `sha256(PY-COMPACT-ASCII({"domain", "fields"}))`.
pub fn hashed_id(domain: &str, fields: Object, bytes: usize) -> String {
    let pre_image = PyValue::Object(Object::new().with("domain", domain).with("fields", fields))
        .dumps(Dialect::PY_COMPACT_ASCII);
    let mut digest = sha256_hex(pre_image.as_bytes());
    digest.truncate(bytes * 2);
    digest
}

/// `sha256_hex(run_id)`: the root every trace id of a run derives from.
pub fn run_root_hash(run_id: &str) -> String {
    sha256_hex(run_id.as_bytes())
}

/// The 32-hex-character trace id of a run: every anchored call of the run shares it.
pub fn trace_id_for_run(run_id: &str) -> String {
    hashed_id(
        TRACE_DOMAIN,
        Object::new().with("run_root_hash", run_root_hash(run_id)),
        16,
    )
}

/// `sha256_hex(PY-COMPACT-ASCII({"method", "params"}))` over the params with `_meta` removed:
/// the request content, independent of transport metadata.
pub fn params_content_hash(method: &str, params: Option<&JsonValue>) -> String {
    let params = params.map_or(PyValue::Object(Object::new()), without_meta);
    let pre_image = PyValue::Object(Object::new().with("method", method).with("params", params))
        .dumps(Dialect::PY_COMPACT_ASCII);
    sha256_hex(pre_image.as_bytes())
}

/// The 16-hex-character span id of the call at `call_index` with the given content hash.
pub fn span_id_for_call(params_content_hash: &str, call_index: u64) -> String {
    hashed_id(
        SPAN_DOMAIN,
        Object::new()
            .with("params_content_hash", params_content_hash)
            .with("call_index", call_index),
        8,
    )
}

pub use bernstein_protocol::trace::{TraceParent, parse_traceparent};

/// The `mcp.call_index` a client claims in a W3C `baggage` header value, if any.
///
/// `Some(Err(text))` when the member is present but is not a non-negative integer: a claim that
/// cannot be checked is refused like a wrong one.
pub fn baggage_call_index(baggage: &str) -> Option<Result<u64, String>> {
    baggage.split(',').find_map(|member| {
        // Members may carry `;`-separated properties after the value.
        let pair = member.split(';').next().unwrap_or("");
        let (key, value) = pair.split_once('=')?;
        (key.trim() == "mcp.call_index").then(|| {
            let value = value.trim();
            value.parse::<u64>().map_err(|_| value.to_owned())
        })
    })
}

/// The transport correlation id of a JSON-RPC message (the reference's `request_span_id`): the
/// parent id of a valid `_meta.traceparent`, else the 16-hex-character
/// `hashed_id("mcp.request", {id, method, params without _meta})`.
///
/// The HTTP transports send it as `X-Bernstein-Span-Id` and as the SSE event id.
pub fn request_span_id(message: &JsonValue) -> String {
    let params = message.get("params");
    if let Some(parent) = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("traceparent"))
        .and_then(JsonValue::as_str)
        .and_then(parse_traceparent)
    {
        return parent.parent_id;
    }
    let id = message.get("id").map_or(PyValue::Null, PyValue::from);
    let method = message.get("method").map_or(PyValue::Null, PyValue::from);
    let params = params.map_or(PyValue::Object(Object::new()), without_meta);
    hashed_id(
        REQUEST_DOMAIN,
        Object::new()
            .with("id", id)
            .with("method", method)
            .with("params", params),
        8,
    )
}

/// The params as Python-JSON, with the `_meta` member removed from an object.
fn without_meta(params: &JsonValue) -> PyValue {
    match PyValue::from(params) {
        PyValue::Object(mut object) => {
            object.remove("_meta");
            PyValue::Object(object)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anchoring_vector_from_the_reference() {
        // remote_inprocess_experiments.json, "recomputed ids for call_index 0".
        let hash = params_content_hash(
            "tools/call",
            Some(&json!({"name": "bernstein_health", "arguments": {}})),
        );
        assert_eq!(
            hash,
            "6cfac7461184eae27a16782763835245ef661dc091a42f1cfeff1c8069d6bde9"
        );
        assert_eq!(
            run_root_hash("mcp-remote-demo"),
            "61f731e9d9ce9c80cdcf6a44db1c946481c9d993ee8cd1feaf66b01c0d3a3554"
        );
        assert_eq!(
            trace_id_for_run("mcp-remote-demo"),
            "691155e7c660f1515c64fc9e8c9cbaa3"
        );
        assert_eq!(span_id_for_call(&hash, 0), "0af4fa795b5c839a");
        // `_meta` does not change the content hash.
        let with_meta = params_content_hash(
            "tools/call",
            Some(
                &json!({"name": "bernstein_health", "arguments": {}, "_meta": {"progressToken": 1}}),
            ),
        );
        assert_eq!(with_meta, hash);
    }

    #[test]
    fn request_span_ids_from_the_reference() {
        let check = |message: JsonValue, expect: &str| {
            assert_eq!(request_span_id(&message), expect, "{message}");
        };
        check(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{}}}),
            "2f2e5dfcd9dd1aba",
        );
        check(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},
                "_meta":{"traceparent":"00-0123456789abcdef0123456789abcdef-fedcba9876543210-01"}}}),
            "fedcba9876543210",
        );
        check(
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},
                "_meta":{"progressToken":5}}}),
            "2f2e5dfcd9dd1aba",
        );
    }

    #[test]
    fn traceparent_shapes() {
        let check =
            |text: &str, ok: bool| assert_eq!(parse_traceparent(text).is_some(), ok, "{text}");
        check(
            "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
            true,
        );
        check(
            "ff-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
            false,
        );
        check(
            "00-0123456789ABCDEF0123456789abcdef-0123456789abcdef-01",
            false,
        );
        check(
            "00-00000000000000000000000000000000-0123456789abcdef-01",
            false,
        );
        check(
            "00-0123456789abcdef0123456789abcdef-0000000000000000-01",
            false,
        );
        check("00-zzzz-0000000000000000-01", false);
        check(
            "00-0123456789abcdef0123456789abcdef-0123456789abcdef",
            false,
        );
        check("", false);
    }

    #[test]
    fn baggage_claims() {
        let check = |text: &str, expect: Option<Result<u64, String>>| {
            assert_eq!(baggage_call_index(text), expect, "{text}");
        };
        check("mcp.method=tools/call,mcp.call_index=1", Some(Ok(1)));
        check(" mcp.call_index = 7 ;prop=1", Some(Ok(7)));
        check("mcp.call_index=x", Some(Err("x".to_owned())));
        check("other=1", None);
        check("", None);
    }
}
