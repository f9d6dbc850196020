//! The cost-meter envelope (`MCP_SURFACE.md` §2.1) and the deprecated-alias wrapper (§1.4).
//!
//! With the meter on, a handler's JSON text `p` becomes
//! `json.dumps({"result": json.loads(p) (or p itself when it is not JSON), "_meter": meter})`:
//! Python's default separators, `ensure_ascii`, keys in insertion order. `_meter` is
//! `{tool, call_id, latency_ms, cost_usd, ok, ts}` (`ok` is `false` when the payload is a
//! refusal or an error), where `call_id` is the dispatcher's
//! content-derived span id (the reference draws a random uuid4 instead), `latency_ms` the
//! monotonic elapsed time rounded to 3 places, `cost_usd` always `0.0` (this server spends no
//! model tokens), and `ts` the UTC call start (`2026-11-30T01:45:30.922350Z`, the fraction left
//! out when it is zero, as Python's `isoformat` does).

use bernstein_journal::audit::Timestamp;
use bernstein_journal::handle::render_indent2;
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::registry::ALIAS_REMOVAL_RELEASE;

/// The `_meter` fields of one call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Meter {
    pub(crate) tool: String,
    pub(crate) call_id: String,
    pub(crate) latency_ms: f64,
    pub(crate) started: Timestamp,
    /// `false` when the call answered a refusal or an error (beyond the reference, whose
    /// `ok` is `false` only for failures of the framework itself).
    pub(crate) ok: bool,
}

impl Meter {
    pub(crate) fn to_object(&self) -> Object {
        Object::new()
            .with("tool", self.tool.as_str())
            .with("call_id", self.call_id.as_str())
            .with("latency_ms", round3(self.latency_ms))
            .with("cost_usd", 0.0)
            .with("ok", self.ok)
            .with("ts", isoformat_z(&self.started))
    }
}

/// Python's `round(x, 3)` for the non-negative latencies measured here.
fn round3(x: f64) -> f64 {
    if !x.is_finite() {
        return 0.0;
    }
    // Formatting to 3 places rounds half to even on the exact binary value, as Python's
    // `round` does; the parse gives the nearest double of that decimal.
    format!("{x:.3}").parse().unwrap_or(0.0)
}

/// `datetime.isoformat()` of a UTC instant with `+00:00` written as `Z`.
pub(crate) fn isoformat_z(at: &Timestamp) -> String {
    let text = at.to_record_string();
    if at.unix_micros().rem_euclid(1_000_000) == 0 {
        text.replacen(".000000Z", "Z", 1)
    } else {
        text
    }
}

/// The payload as the envelope carries it: the parsed JSON, or the raw text.
pub(crate) fn parsed_or_raw(payload: &str) -> Value {
    Value::parse(payload).unwrap_or_else(|_| Value::Str(payload.to_owned()))
}

/// Wraps `payload` in the envelope and renders it.
#[cfg(test)]
pub(crate) fn envelope(payload: &str, meter: &Meter) -> String {
    envelope_of(parsed_or_raw(payload), meter)
}

/// Wraps a payload already taken through [`parsed_or_raw`] in the envelope and renders it,
/// so a caller that parsed the payload for its own reasons does not parse it again.
pub(crate) fn envelope_of(result: Value, meter: &Meter) -> String {
    Value::Object(
        Object::new()
            .with("result", result)
            .with("_meter", meter.to_object()),
    )
    .dumps(Dialect::PY_ROW)
}

/// The deprecated-alias payload, pretty-printed with indent 2.
pub(crate) fn alias_wrapper(alias: &str, replacement: &str, payload: &str) -> String {
    let body = Object::new()
        .with("deprecated", true)
        .with("tool", alias)
        .with("replacement", replacement)
        .with("removal_release", ALIAS_REMOVAL_RELEASE)
        .with(
            "notice",
            format!(
                "{alias} is deprecated; call {replacement} instead. This alias is removed in \
                 {ALIAS_REMOVAL_RELEASE}."
            ),
        )
        .with("result", parsed_or_raw(payload));
    render_indent2(&Value::Object(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(micros: i64, latency: f64) -> Meter {
        Meter {
            tool: "bernstein_status".to_owned(),
            call_id: "0af4fa795b5c839a".to_owned(),
            latency_ms: latency,
            started: Timestamp::from_unix_micros(micros).unwrap(),
            ok: true,
        }
    }

    #[test]
    fn envelope_matches_the_reference_layout() {
        let text = envelope(
            "{\n  \"live\": true\n}",
            &meter(1_796_003_130_922_350, 6.0644),
        );
        assert_eq!(
            text,
            r#"{"result": {"live": true}, "_meter": {"tool": "bernstein_status", "call_id": "0af4fa795b5c839a", "latency_ms": 6.064, "cost_usd": 0.0, "ok": true, "ts": "2026-11-30T01:45:30.922350Z"}}"#
        );
        let raw = envelope("not json", &meter(1_796_003_130_000_000, 0.29));
        assert!(raw.starts_with(r#"{"result": "not json", "#), "{raw}");
        assert!(raw.ends_with(r#""ts": "2026-11-30T01:45:30Z"}}"#), "{raw}");
    }

    #[test]
    fn a_value_is_enveloped_as_its_indent_two_text_would_be() {
        // A handler that answers a value (`tools::Payload::Value`) skips rendering it and
        // parsing it back; the envelope must not tell the difference.
        let value = Value::Object(
            Object::new()
                .with("taskId", "3f2a9c1b7d0e")
                .with("granted", true)
                .with("claimed_at", 1_796_004_103.392_215_3)
                .with("small", 1e-07)
                .with("whole", 5.0)
                .with("big", 12_345_678_901_234_567_i64)
                .with("title", "caf\u{e9} \u{1f600} \"quoted\"\n")
                .with("claimer", Value::Null)
                .with(
                    "backlogSnapshot",
                    Value::Array(vec![
                        Value::Object(
                            Object::new()
                                .with("id", "a")
                                .with("depends_on", Value::Array(vec![])),
                        ),
                        Value::Object(Object::new()),
                    ]),
                ),
        );
        let meter = meter(1_796_003_130_922_350, 6.0644);
        let text = bernstein_journal::handle::render_indent2(&value);
        assert_eq!(envelope_of(value.clone(), &meter), envelope(&text, &meter));
    }

    #[test]
    fn latency_rounds_to_three_places() {
        assert_eq!(round3(0.2904), 0.29);
        assert_eq!(round3(17.3715), 17.372);
        assert_eq!(round3(f64::NAN), 0.0);
    }

    #[test]
    fn alias_wrapper_names_the_replacement() {
        insta::assert_snapshot!(alias_wrapper(
            "bernstein_health",
            "bernstein_status",
            r#"{"status": "ok"}"#
        ));
    }
}
