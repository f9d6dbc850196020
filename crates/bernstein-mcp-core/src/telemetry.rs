//! The dispatcher's metrics, recorded through the `metrics` facade.
//!
//! The facade does no IO and keeps the layering: without an installed recorder (an embedding
//! host that wants none, the unit tests) every record is a no-op. The binary installs the
//! Prometheus recorder, calls [`describe`] once, and serves the text format on `/metrics` and
//! `--metrics-addr`. Every name starts with `bernstein_mcp_`; label values come from closed
//! sets (tool names the catalogue serves, outcomes, JSON-RPC codes), never from a caller's
//! free text, so a client cannot create series at will.

use std::time::Instant;

use serde_json::Value as JsonValue;

use crate::jsonrpc::RpcError;

/// Counter of answered `tools/call` requests, by `tool` and `outcome`.
pub const TOOL_CALLS_TOTAL: &str = "bernstein_mcp_tool_calls_total";
/// Histogram of `tools/call` latency in seconds (anchoring included), by `tool`.
pub const TOOL_CALL_DURATION: &str = "bernstein_mcp_tool_call_duration_seconds";
/// Gauge of `tools/call` requests running now.
pub const TOOL_CALLS_IN_FLIGHT: &str = "bernstein_mcp_tool_calls_in_flight";
/// Counter of JSON-RPC error responses, by `code`.
pub const JSONRPC_ERRORS_TOTAL: &str = "bernstein_mcp_jsonrpc_errors_total";
/// Histogram of the anchoring append (journal row and audit entry, both fsynced), in seconds.
pub const ANCHOR_APPEND_DURATION: &str = "bernstein_mcp_anchor_append_duration_seconds";
/// Histogram of the rows made durable by one anchoring commit.
pub const GROUP_COMMIT_BATCH_SIZE: &str = "bernstein_mcp_group_commit_batch_size";

/// The `tool` label of a name the catalogue does not serve: unknown names stay one series.
pub const UNKNOWN_TOOL: &str = "unknown";

/// Describes every metric of the server (this crate's, and those recorded by
/// `bernstein-journal` and `bernstein-tasks`) to the installed recorder.
pub fn describe() {
    metrics::describe_counter!(
        TOOL_CALLS_TOTAL,
        "Answered tools/call requests by tool and outcome: ok; tool_error (the tool ran and answered isError, gate refusals included); refused (nothing ran: unknown tool, arguments the input firewall refused, a call that could not be anchored); cancelled (stopped before it finished: cancelled by the client, timed out, or its transport went away). Unknown tool names count as tool=\"unknown\"."
    );
    metrics::describe_histogram!(
        TOOL_CALL_DURATION,
        metrics::Unit::Seconds,
        "Latency of tools/call by tool, from dispatch to answer, anchoring included."
    );
    metrics::describe_gauge!(TOOL_CALLS_IN_FLIGHT, "tools/call requests running now.");
    metrics::describe_counter!(
        JSONRPC_ERRORS_TOTAL,
        "JSON-RPC error responses by code (parse errors, invalid requests and params, unknown methods, busy, timeouts)."
    );
    metrics::describe_histogram!(
        ANCHOR_APPEND_DURATION,
        metrics::Unit::Seconds,
        "Latency of anchoring one call, from the request to its durable evidence: waiting for the group commit in progress, then its group's journal rows and audit entries, each group fsynced once."
    );
    metrics::describe_histogram!(
        GROUP_COMMIT_BATCH_SIZE,
        "Calls anchored by one group commit: their journal rows share one write and fsync, and their audit entries another."
    );
    bernstein_journal::durable::describe_metrics();
    bernstein_tasks::remote::describe_metrics();
}

/// Counts one JSON-RPC error response.
pub(crate) fn jsonrpc_error(error: &RpcError) {
    metrics::counter!(JSONRPC_ERRORS_TOTAL, "code" => error.code.to_string()).increment(1);
}

/// Records one anchored call that took `started.elapsed()`, its wait for the group included.
pub(crate) fn anchor_committed(started: Instant) {
    metrics::histogram!(ANCHOR_APPEND_DURATION).record(started.elapsed().as_secs_f64());
}

/// Records one group commit of `calls` calls.
pub(crate) fn group_committed(calls: usize) {
    metrics::histogram!(GROUP_COMMIT_BATCH_SIZE).record(calls as f64);
}

/// How a `tools/call` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallOutcome {
    Ok,
    ToolError,
    Refused,
    Cancelled,
}

impl CallOutcome {
    fn label(self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::Refused => "refused",
            CallOutcome::Cancelled => "cancelled",
        }
    }
}

/// One `tools/call` being measured: in flight from [`ToolCallMetrics::start`] until dropped.
/// A call dropped before [`ToolCallMetrics::finish`] (its task was aborted by a timeout or by a
/// transport that stopped waiting) counts as cancelled, or as a tool error when it panicked.
pub(crate) struct ToolCallMetrics {
    tool: String,
    started: Instant,
    firewall_refused: bool,
    outcome: Option<CallOutcome>,
}

impl ToolCallMetrics {
    /// Starts measuring a call of `tool` (`None`: a name the catalogue does not serve).
    pub(crate) fn start(tool: Option<&str>) -> ToolCallMetrics {
        metrics::gauge!(TOOL_CALLS_IN_FLIGHT).increment(1.0);
        ToolCallMetrics {
            tool: tool.unwrap_or(UNKNOWN_TOOL).to_owned(),
            started: Instant::now(),
            firewall_refused: false,
            outcome: None,
        }
    }

    /// The input firewall refused the arguments, so the tool's error result is a refusal.
    pub(crate) fn firewall_refused(&mut self) {
        self.firewall_refused = true;
    }

    /// Classifies the call's answer: an error response means nothing ran.
    pub(crate) fn finish(&mut self, answer: &Result<JsonValue, RpcError>) {
        let flag = |value: &JsonValue, key: &str| value.get(key) == Some(&JsonValue::Bool(true));
        self.outcome = Some(match answer {
            Err(_) => CallOutcome::Refused,
            Ok(result) if flag(result, "cancelled") => CallOutcome::Cancelled,
            Ok(result) if flag(result, "isError") && self.firewall_refused => CallOutcome::Refused,
            Ok(result) if flag(result, "isError") => CallOutcome::ToolError,
            Ok(_) => CallOutcome::Ok,
        });
    }
}

impl Drop for ToolCallMetrics {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or(if std::thread::panicking() {
            CallOutcome::ToolError
        } else {
            CallOutcome::Cancelled
        });
        metrics::gauge!(TOOL_CALLS_IN_FLIGHT).decrement(1.0);
        metrics::counter!(
            TOOL_CALLS_TOTAL,
            "tool" => self.tool.clone(),
            "outcome" => outcome.label(),
        )
        .increment(1);
        metrics::histogram!(TOOL_CALL_DURATION, "tool" => self.tool.clone())
            .record(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata,
        SharedString, Unit,
    };
    use serde_json::json;

    use super::*;

    /// What a recorder was told: each description as `kind name unit`, each counter or gauge
    /// update as `kind series operation value`, each histogram sample as `histogram series`
    /// with its value kept apart in `samples` (durations differ from run to run).
    #[derive(Debug, Default)]
    struct Told {
        described: Vec<String>,
        updates: Vec<String>,
        samples: Vec<f64>,
    }

    /// A recorder that writes down everything it is told (installed for one closure only).
    #[derive(Default)]
    struct Recording {
        told: Arc<Mutex<Told>>,
    }

    impl Recording {
        fn describe(&self, kind: &str, name: &KeyName, unit: Option<Unit>) {
            let line = format!("{kind} {} {unit:?}", name.as_str());
            self.told.lock().unwrap().described.push(line);
        }

        fn series(&self, kind: &str, key: &Key) -> Arc<Series> {
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            Arc::new(Series {
                name: format!("{kind} {}{{{}}}", key.name(), labels.join(",")),
                told: Arc::clone(&self.told),
            })
        }
    }

    impl metrics::Recorder for Recording {
        fn describe_counter(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.describe("counter", &name, unit);
        }
        fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.describe("gauge", &name, unit);
        }
        fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
            self.describe("histogram", &name, unit);
        }
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.series("counter", key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.series("gauge", key))
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(self.series("histogram", key))
        }
    }

    /// One series as the recorder registered it.
    struct Series {
        name: String,
        told: Arc<Mutex<Told>>,
    }

    impl Series {
        fn update(&self, operation: &str, value: f64) {
            let line = format!("{} {operation} {value}", self.name);
            self.told.lock().unwrap().updates.push(line);
        }
    }

    impl CounterFn for Series {
        fn increment(&self, value: u64) {
            self.update("increment", value as f64);
        }
        fn absolute(&self, value: u64) {
            self.update("absolute", value as f64);
        }
    }

    impl GaugeFn for Series {
        fn increment(&self, value: f64) {
            self.update("increment", value);
        }
        fn decrement(&self, value: f64) {
            self.update("decrement", value);
        }
        fn set(&self, value: f64) {
            self.update("set", value);
        }
    }

    impl HistogramFn for Series {
        fn record(&self, value: f64) {
            let mut told = self.told.lock().unwrap();
            told.updates.push(self.name.clone());
            told.samples.push(value);
        }
    }

    /// What `run` told the metrics facade.
    fn told(run: impl FnOnce()) -> Told {
        let recording = Recording::default();
        metrics::with_local_recorder(&recording, run);
        std::mem::take(&mut *recording.told.lock().unwrap())
    }

    #[test]
    fn describe_names_every_metric_of_the_server_with_its_unit() {
        let told = told(describe);
        assert_eq!(
            told.described,
            [
                "counter bernstein_mcp_tool_calls_total None",
                "histogram bernstein_mcp_tool_call_duration_seconds Some(Seconds)",
                "gauge bernstein_mcp_tool_calls_in_flight None",
                "counter bernstein_mcp_jsonrpc_errors_total None",
                "histogram bernstein_mcp_anchor_append_duration_seconds Some(Seconds)",
                "histogram bernstein_mcp_group_commit_batch_size None",
                "histogram bernstein_mcp_fsync_duration_seconds Some(Seconds)",
                "histogram bernstein_mcp_backend_round_trip_seconds Some(Seconds)",
            ]
        );
        assert!(told.updates.is_empty(), "{told:?}");
    }

    #[test]
    fn errors_and_anchoring_are_recorded_in_their_own_series() {
        let told = told(|| {
            jsonrpc_error(&RpcError::invalid_params("bad"));
            jsonrpc_error(&RpcError::new(-32601, "Method not found: x"));
            anchor_committed(Instant::now());
            group_committed(3);
        });
        assert_eq!(
            told.updates,
            [
                "counter bernstein_mcp_jsonrpc_errors_total{code=-32602} increment 1",
                "counter bernstein_mcp_jsonrpc_errors_total{code=-32601} increment 1",
                "histogram bernstein_mcp_anchor_append_duration_seconds{}",
                "histogram bernstein_mcp_group_commit_batch_size{}",
            ]
        );
        // The anchoring latency is some non-negative number of seconds; the batch is its size.
        assert!(told.samples[0] >= 0.0, "{told:?}");
        assert_eq!(told.samples[1], 3.0);
    }

    #[test]
    fn a_call_is_counted_by_tool_and_outcome_when_its_measure_is_dropped() {
        let check = |tool: Option<&str>, end: &dyn Fn(ToolCallMetrics), expect: [&str; 2]| {
            let told = told(|| end(ToolCallMetrics::start(tool)));
            let [counted, timed] = expect;
            assert_eq!(
                told.updates,
                [
                    "gauge bernstein_mcp_tool_calls_in_flight{} increment 1",
                    "gauge bernstein_mcp_tool_calls_in_flight{} decrement 1",
                    counted,
                    timed,
                ],
                "{tool:?}"
            );
            assert!(told.samples[0] >= 0.0, "{told:?}");
        };
        let finished = |firewall_refused: bool, answer: Result<JsonValue, RpcError>| {
            move |mut call: ToolCallMetrics| {
                if firewall_refused {
                    call.firewall_refused();
                }
                call.finish(&answer);
            }
        };
        let health = "histogram bernstein_mcp_tool_call_duration_seconds{tool=bernstein_health}";
        check(
            Some("bernstein_health"),
            &finished(false, Ok(json!({"isError": false}))),
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=ok} increment 1",
                health,
            ],
        );
        check(
            Some("bernstein_health"),
            &finished(false, Ok(json!({"isError": true}))),
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=tool_error} increment 1",
                health,
            ],
        );
        check(
            Some("bernstein_health"),
            &finished(true, Ok(json!({"isError": true}))),
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=refused} increment 1",
                health,
            ],
        );
        check(
            Some("bernstein_health"),
            &finished(false, Ok(json!({"cancelled": true}))),
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=cancelled} increment 1",
                health,
            ],
        );
        // A name the catalogue does not serve is counted as one `unknown` series.
        check(
            None,
            &finished(false, Err(RpcError::invalid_params("Unknown tool: x"))),
            [
                "counter bernstein_mcp_tool_calls_total{tool=unknown,outcome=refused} increment 1",
                "histogram bernstein_mcp_tool_call_duration_seconds{tool=unknown}",
            ],
        );
        // A call dropped before it finished was stopped: aborted by a timeout or a transport.
        check(
            Some("bernstein_health"),
            &drop,
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=cancelled} increment 1",
                health,
            ],
        );
        // A call dropped while its tool panics is a tool error.
        check(
            Some("bernstein_health"),
            &|call| {
                let unwound = std::panic::catch_unwind(move || {
                    let _call = call;
                    panic!("the tool panicked");
                });
                assert!(unwound.is_err());
            },
            [
                "counter bernstein_mcp_tool_calls_total{tool=bernstein_health,outcome=tool_error} increment 1",
                health,
            ],
        );
    }

    fn outcome_of(firewall_refused: bool, answer: Result<JsonValue, RpcError>) -> CallOutcome {
        let mut call = ToolCallMetrics::start(Some("bernstein_health"));
        if firewall_refused {
            call.firewall_refused();
        }
        call.finish(&answer);
        call.outcome.unwrap()
    }

    #[test]
    fn answers_are_classified_by_what_ran() {
        let cases = [
            (false, Ok(json!({"isError": false})), CallOutcome::Ok),
            (false, Ok(json!({"task": {}})), CallOutcome::Ok),
            (false, Ok(json!({"isError": true})), CallOutcome::ToolError),
            (true, Ok(json!({"isError": true})), CallOutcome::Refused),
            (
                false,
                Err(RpcError::invalid_params("Unknown tool: x")),
                CallOutcome::Refused,
            ),
            (
                false,
                Ok(json!({"cancelled": true, "isError": false})),
                CallOutcome::Cancelled,
            ),
        ];
        for (refused, answer, expected) in cases {
            assert_eq!(outcome_of(refused, answer.clone()), expected, "{answer:?}");
        }
    }
}
