//! The access log: one info line per HTTP request, on the target `bernstein_http::access`.
//!
//! [`crate::McpHttp`] stamps each request with a [`Note`] in its extensions before the tower
//! layers run; the `/mcp` and `/messages` handlers write the JSON-RPC method and the tool name
//! into it once the body is parsed, and the service writes the line when the response head is
//! ready. The line carries the HTTP method, the path, the JSON-RPC method, the tool (for
//! `tools/call`), the span id the response carries in `X-Bernstein-Span-Id`, the status, the
//! latency to the response head, and the configured auth mode. It never carries a header value,
//! a query string or a body, so neither a credential nor tool arguments reach the log.
//! A field that does not apply to a request (a probe has no JSON-RPC method) is the empty
//! string, so every line has the same columns.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Response};
use serde_json::Value as JsonValue;

use crate::body::SPAN_HEADER;
use crate::config::AuthMode;

/// What the handlers learn about a request that the access line reports.
#[derive(Clone, Default)]
pub(crate) struct Note(Arc<Mutex<Learned>>);

#[derive(Default)]
struct Learned {
    rpc_method: String,
    tool: String,
}

impl Note {
    /// Records the JSON-RPC method of `message`, and the tool name of a `tools/call`.
    pub(crate) fn record(&self, method: &str, message: &JsonValue) {
        let tool = if method == "tools/call" {
            message
                .pointer("/params/name")
                .and_then(JsonValue::as_str)
                .unwrap_or("")
        } else {
            ""
        };
        // A poisoned note only means a handler panicked mid-record; the line still goes out.
        let mut learned = self.0.lock().unwrap_or_else(|e| e.into_inner());
        method.clone_into(&mut learned.rpc_method);
        tool.clone_into(&mut learned.tool);
    }
}

/// One request being served: what is known before the handlers run.
pub(crate) struct Entry {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) auth: AuthMode,
    pub(crate) started: Instant,
    pub(crate) note: Note,
}

impl Entry {
    /// Writes the line for `response`.
    pub(crate) fn log<B>(&self, response: &Response<B>) {
        let learned = self.note.0.lock().unwrap_or_else(|e| e.into_inner());
        let span_id = response
            .headers()
            .get(SPAN_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let latency_ms = millis(self.started.elapsed());
        tracing::info!(
            target: "bernstein_http::access",
            method = %self.method,
            path = %self.path,
            rpc_method = %learned.rpc_method,
            tool = %learned.tool,
            span_id,
            status = response.status().as_u16(),
            latency_ms,
            auth = self.auth.as_str(),
            "request"
        );
    }
}

/// `elapsed` in milliseconds, with the sub-millisecond part kept.
fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What a note holds after `record(method, message)`: `(rpc_method, tool)`.
    fn check(method: &str, message: &JsonValue, expect: (&str, &str)) {
        let note = Note::default();
        note.record(method, message);
        let learned = note.0.lock().unwrap();
        assert_eq!(
            (learned.rpc_method.as_str(), learned.tool.as_str()),
            expect,
            "{method} {message}"
        );
    }

    #[test]
    fn a_note_keeps_the_method_and_only_a_tool_call_names_a_tool() {
        let named = json!({"params": {"name": "bernstein_status"}});
        check("tools/call", &named, ("tools/call", "bernstein_status"));
        // Another method's `params.name` (a prompt's, say) is not a tool.
        check("prompts/get", &named, ("prompts/get", ""));
        // A tools/call without a string name logs no tool, rather than failing.
        check(
            "tools/call",
            &json!({"params": {"name": 5}}),
            ("tools/call", ""),
        );
        check("ping", &json!({}), ("ping", ""));
    }

    #[test]
    fn latency_is_logged_in_milliseconds() {
        assert_eq!(millis(Duration::from_micros(1_500)), 1.5);
        assert_eq!(millis(Duration::from_secs(2)), 2000.0);
    }
}
