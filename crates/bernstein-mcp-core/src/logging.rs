//! MCP logging: `logging/setLevel` and the `notifications/message` a call emits.
//!
//! The threshold a request's messages are filtered by comes from where its lifecycle keeps it:
//!
//! * legacy (2024-11-05 .. 2025-11-25): the level the client last set with `logging/setLevel` on
//!   its stream ([`crate::CallScope`]), or the dispatcher's default when it set none (no
//!   messages unless the host configured one, see
//!   [`crate::DispatcherBuilder::default_log_level`]);
//! * 2026-07-28: the request's own `_meta` `io.modelcontextprotocol/logLevel`, and no messages
//!   without it (`logging/setLevel` is gone from that revision, -32601).
//!
//! A stream's level lives on its scope, not in the dispatcher: it changes which notifications a
//! stream receives, never what a response says, so the "no state a response depends on" rule
//! holds. On a transport whose streams are single requests (stateless HTTP) a `setLevel`
//! reaches only itself; a 2026-07-28 client says its level on every request instead.

use std::sync::Arc;

use serde_json::{Value as JsonValue, json};

use crate::jsonrpc::{self, RpcError};
use crate::scope::NotificationSink;

/// The per-request `_meta` key a 2026-07-28 client names its log level with.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// A syslog severity (RFC 5424) as MCP names it, least severe first, so `a >= b` reads "`a` is
/// at least as severe as `b`".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Detailed debugging information.
    Debug,
    /// General informational messages.
    Info,
    /// Normal but significant events.
    Notice,
    /// Warning conditions.
    Warning,
    /// Error conditions.
    Error,
    /// Critical conditions.
    Critical,
    /// Action must be taken immediately.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl LogLevel {
    /// Every level, least severe first.
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// The level a wire name stands for (exact, lower case, as the schema spells it).
    pub fn parse(name: &str) -> Option<LogLevel> {
        LogLevel::ALL
            .into_iter()
            .find(|level| level.as_str() == name)
    }

    /// Reads a `level` value from a request, answering -32602 with the allowed names when it
    /// is absent, not a string, or not a level.
    pub(crate) fn from_param(value: Option<&JsonValue>, what: &str) -> Result<LogLevel, RpcError> {
        let allowed: Vec<&str> = LogLevel::ALL.iter().map(|l| l.as_str()).collect();
        let refuse = |got: String| {
            RpcError::invalid_params(format!(
                "{what} must be one of {}; got {got}",
                allowed.join(", ")
            ))
            .with_data(json!({"allowed": allowed}))
        };
        match value {
            Some(JsonValue::String(name)) => {
                LogLevel::parse(name).ok_or_else(|| refuse(format!("{name:?}")))
            }
            Some(other) => Err(refuse(other.to_string())),
            None => Err(refuse("nothing".to_owned())),
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one request's log messages go: the request's notification sink, filtered by the
/// threshold in force for it. Cheap to clone.
#[derive(Clone)]
pub struct RequestLog {
    threshold: Option<LogLevel>,
    notify: Arc<dyn NotificationSink>,
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("threshold", &self.threshold)
            .finish_non_exhaustive()
    }
}

impl RequestLog {
    /// A log that sends messages at `threshold` or above to `notify`; `None` sends nothing.
    pub fn new(threshold: Option<LogLevel>, notify: Arc<dyn NotificationSink>) -> RequestLog {
        RequestLog { threshold, notify }
    }

    /// The threshold in force, if any.
    pub fn threshold(&self) -> Option<LogLevel> {
        self.threshold
    }

    /// Whether a message at `level` would be sent.
    pub fn enabled(&self, level: LogLevel) -> bool {
        self.threshold.is_some_and(|threshold| level >= threshold)
    }

    /// Sends `notifications/message {level, logger, data}` when `level` passes the threshold.
    pub fn log(&self, level: LogLevel, logger: &str, data: JsonValue) {
        if self.enabled(level) {
            self.notify.send(jsonrpc::notification(
                "notifications/message",
                json!({"level": level.as_str(), "logger": logger, "data": data}),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn levels_order_by_severity_and_round_trip() {
        for pair in LogLevel::ALL.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
        }
        for level in LogLevel::ALL {
            assert_eq!(LogLevel::parse(level.as_str()), Some(level));
        }
        assert_eq!(LogLevel::parse("WARNING"), None);
        assert_eq!(LogLevel::parse("warn"), None);
    }

    #[test]
    fn from_param_names_the_allowed_levels() {
        assert_eq!(
            LogLevel::from_param(Some(&json!("notice")), "level").unwrap(),
            LogLevel::Notice
        );
        for bad in [Some(json!("loud")), Some(json!(3)), None] {
            let err = LogLevel::from_param(bad.as_ref(), "level").unwrap_err();
            assert_eq!(err.code, jsonrpc::INVALID_PARAMS);
            assert!(
                err.message
                    .starts_with("level must be one of debug, info, notice")
            );
        }
    }

    #[test]
    fn a_log_sends_at_or_above_its_threshold_only() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let sent = Arc::clone(&sent);
            move |note: JsonValue| sent.lock().unwrap().push(note)
        };
        let log = RequestLog::new(Some(LogLevel::Warning), Arc::new(sink));
        log.log(LogLevel::Info, "t", json!("quiet"));
        log.log(LogLevel::Warning, "t", json!("kept"));
        log.log(LogLevel::Emergency, "t", json!({"k": 1}));
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0]["method"], "notifications/message");
        assert_eq!(
            sent[0]["params"],
            json!({"level": "warning", "logger": "t", "data": "kept"})
        );
        assert_eq!(sent[1]["params"]["level"], "emergency");
        let silent = RequestLog::new(None, Arc::new(crate::DiscardNotifications));
        assert!(!silent.enabled(LogLevel::Emergency));
    }

    #[test]
    fn a_level_displays_as_its_wire_name() {
        let shown: Vec<String> = LogLevel::ALL.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "debug",
                "info",
                "notice",
                "warning",
                "error",
                "critical",
                "alert",
                "emergency"
            ]
        );
    }

    #[test]
    fn a_log_reports_its_threshold_and_shows_it_in_its_debug_form() {
        let check = |threshold: Option<LogLevel>, debug: &str| {
            let log = RequestLog::new(threshold, Arc::new(crate::DiscardNotifications));
            assert_eq!(log.threshold(), threshold);
            assert_eq!(format!("{log:?}"), debug);
        };
        check(None, "RequestLog { threshold: None, .. }");
        check(
            Some(LogLevel::Notice),
            "RequestLog { threshold: Some(Notice), .. }",
        );
        check(
            Some(LogLevel::Emergency),
            "RequestLog { threshold: Some(Emergency), .. }",
        );
    }
}
