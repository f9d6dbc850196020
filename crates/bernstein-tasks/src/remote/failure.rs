//! Why a task-server call failed, classified so callers can act on it.
//!
//! A [`RemoteFailure`] is data, not a second error type: it travels inside
//! [`crate::Error::Remote`] and keeps everything a caller may need to render the failure. Its
//! [`Display`](std::fmt::Display) text is written for a person (it names the URL and says what
//! to do, for example "set BERNSTEIN_AUTH_TOKEN"); [`RemoteFailure::reference_text`] is the text
//! the Python reference tools put in their generic `{"error": …}` payloads (httpx's wording),
//! for tool handlers that must stay byte-compatible with those payloads.
//!
//! Bodies are never trusted: a FastAPI error body is `{"detail": …}` where `detail` may be a
//! string, an object (`empty_result_summary`) or a list (pydantic validation errors), and a proxy
//! in front of the server may answer with HTML. Every shape is kept as it came, and the human
//! text is derived without panicking on any of them.

use std::fmt;
use std::time::Duration;

use bernstein_protocol::pyjson::{Dialect, Value};

/// Longest excerpt of a non-JSON body quoted in a message, in characters.
const BODY_EXCERPT_CHARS: usize = 200;

/// The class of a task-server failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The request was refused before anything was sent: an id, role or header value that
    /// cannot go on the wire.
    InvalidArgument,
    /// No TCP connection could be made (server down, wrong port, DNS failure). The reference
    /// renders this as `All connection attempts failed`.
    Unreachable,
    /// The server did not answer within the configured timeout.
    Timeout,
    /// The connection broke while the request or response was in flight, or the response was
    /// not valid HTTP/1.1.
    Transport,
    /// 401: no bearer token, or the wrong one.
    Unauthorized,
    /// 403: the server understood the caller but refuses it (for example a non-holder posting
    /// an artifact).
    Forbidden,
    /// 404: the task, run or route does not exist (plans answer 404 when plan mode is off).
    NotFound,
    /// 409: a conflict such as an illegal transition or a stale version; the server's `detail`
    /// text is kept verbatim.
    Conflict,
    /// 422: the server refused the request body (for example `empty_result_summary`).
    Validation,
    /// 429: the server is rate limiting the caller.
    RateLimited,
    /// Any 5xx answer.
    ServerError,
    /// Any other non-2xx status (1xx, 3xx, other 4xx).
    UnexpectedStatus,
    /// A 2xx answer whose body is not the JSON the route promises, or is too large.
    MalformedBody,
}

impl FailureKind {
    /// A stable lower-case name, for logs and tests.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::InvalidArgument => "invalid_argument",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Timeout => "timeout",
            FailureKind::Transport => "transport",
            FailureKind::Unauthorized => "unauthorized",
            FailureKind::Forbidden => "forbidden",
            FailureKind::NotFound => "not_found",
            FailureKind::Conflict => "conflict",
            FailureKind::Validation => "validation",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::ServerError => "server_error",
            FailureKind::UnexpectedStatus => "unexpected_status",
            FailureKind::MalformedBody => "malformed_body",
        }
    }

    /// The kind for a non-2xx status code.
    pub(crate) fn for_status(status: u16) -> FailureKind {
        match status {
            401 => FailureKind::Unauthorized,
            403 => FailureKind::Forbidden,
            404 => FailureKind::NotFound,
            409 => FailureKind::Conflict,
            422 => FailureKind::Validation,
            429 => FailureKind::RateLimited,
            500..=599 => FailureKind::ServerError,
            _ => FailureKind::UnexpectedStatus,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The HTTP status line of a refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusLine {
    /// The status code.
    pub code: u16,
    /// The reason phrase the server sent (or the canonical one when it sent none).
    pub reason: String,
}

/// One failed task-server call.
///
/// Boxed inside, so a `Result` carrying it stays one pointer wide on the error side.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteFailure(Box<Details>);

/// Everything known about one failure.
#[derive(Debug, Clone, PartialEq)]
struct Details {
    kind: FailureKind,
    method: String,
    url: String,
    status: Option<StatusLine>,
    /// The parsed JSON body of an error answer, when it was JSON.
    body: Option<Value>,
    /// A short, escaped excerpt of a body that was not JSON.
    body_excerpt: Option<String>,
    /// Transport-level detail (the OS error, the parse error, the limit that was hit).
    cause: Option<String>,
    /// The deadline that passed, for a timeout.
    timeout: Option<Duration>,
    /// Whether the refused request carried a bearer token (it changes the 401 advice).
    bearer_configured: bool,
}

impl Details {
    fn bare(kind: FailureKind, method: &str, url: &str) -> Details {
        Details {
            kind,
            method: method.to_owned(),
            url: url.to_owned(),
            status: None,
            body: None,
            body_excerpt: None,
            cause: None,
            timeout: None,
            bearer_configured: false,
        }
    }
}

impl RemoteFailure {
    /// A request refused before sending, for `reason` (a full sentence fragment).
    pub(crate) fn invalid_argument(reason: String) -> RemoteFailure {
        RemoteFailure(Box::new(Details {
            cause: Some(reason),
            ..Details::bare(FailureKind::InvalidArgument, "", "")
        }))
    }

    /// No connection could be opened.
    pub(crate) fn unreachable(method: &str, url: &str, cause: String) -> RemoteFailure {
        RemoteFailure(Box::new(Details {
            cause: Some(cause),
            ..Details::bare(FailureKind::Unreachable, method, url)
        }))
    }

    /// The deadline passed before the answer was complete.
    pub(crate) fn timeout(method: &str, url: &str, after: Duration) -> RemoteFailure {
        RemoteFailure(Box::new(Details {
            timeout: Some(after),
            ..Details::bare(FailureKind::Timeout, method, url)
        }))
    }

    /// The exchange broke mid-way.
    pub(crate) fn transport(method: &str, url: &str, cause: String) -> RemoteFailure {
        RemoteFailure(Box::new(Details {
            cause: Some(cause),
            ..Details::bare(FailureKind::Transport, method, url)
        }))
    }

    /// A 2xx answer whose body is unusable.
    pub(crate) fn malformed(
        method: &str,
        url: &str,
        status: StatusLine,
        cause: String,
    ) -> RemoteFailure {
        RemoteFailure(Box::new(Details {
            status: Some(status),
            cause: Some(cause),
            ..Details::bare(FailureKind::MalformedBody, method, url)
        }))
    }

    /// A non-2xx answer with body `body` (kept as JSON when it parses, as an excerpt otherwise).
    pub(crate) fn status(
        method: &str,
        url: &str,
        status: StatusLine,
        body: &[u8],
        bearer_configured: bool,
    ) -> RemoteFailure {
        let text = String::from_utf8_lossy(body);
        let (json, excerpt) = match Value::parse(&text) {
            Ok(value) => (Some(value), None),
            Err(_) if text.trim().is_empty() => (None, None),
            Err(_) => (None, Some(excerpt(&text))),
        };
        RemoteFailure(Box::new(Details {
            status: Some(status.clone()),
            body: json,
            body_excerpt: excerpt,
            bearer_configured,
            ..Details::bare(FailureKind::for_status(status.code), method, url)
        }))
    }

    /// The class of failure.
    pub fn kind(&self) -> FailureKind {
        self.0.kind
    }

    /// The request method (`GET`, `POST`); empty for [`FailureKind::InvalidArgument`].
    pub fn method(&self) -> &str {
        &self.0.method
    }

    /// The full URL of the request, including its query string; empty for
    /// [`FailureKind::InvalidArgument`].
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// The status line, when the server answered.
    pub fn status_line(&self) -> Option<&StatusLine> {
        self.0.status.as_ref()
    }

    /// The status code, when the server answered.
    pub fn status_code(&self) -> Option<u16> {
        self.0.status.as_ref().map(|s| s.code)
    }

    /// The whole JSON body of an error answer, when it was JSON.
    pub fn body(&self) -> Option<&Value> {
        self.0.body.as_ref()
    }

    /// FastAPI's `detail` member of the error body: a string for most refusals, an object for
    /// `empty_result_summary`, a list for request-validation errors.
    pub fn detail(&self) -> Option<&Value> {
        self.0.body.as_ref()?.as_object()?.get("detail")
    }

    /// The `detail` as one line of text: the string itself, an object's `message` (or its
    /// `error`), the `msg` of each pydantic validation entry joined with `; `, or the compact
    /// JSON of anything else.
    pub fn detail_text(&self) -> Option<String> {
        let detail = self.detail()?;
        Some(match detail {
            Value::Str(text) => text.clone(),
            Value::Object(object) => match (object.get("message"), object.get("error")) {
                (Some(Value::Str(message)), _) => message.clone(),
                (_, Some(Value::Str(error))) => error.clone(),
                _ => detail.dumps(Dialect::PY_COMPACT_UTF8),
            },
            Value::Array(items) => {
                let messages: Vec<String> = items.iter().map(validation_entry_text).collect();
                messages.join("; ")
            }
            other => other.dumps(Dialect::PY_COMPACT_UTF8),
        })
    }

    /// The machine-readable `detail.error` code of a structured refusal (for example
    /// `empty_result_summary`), when there is one.
    pub fn error_code(&self) -> Option<&str> {
        self.detail()?.as_object()?.get("error")?.as_str()
    }

    /// The text the Python reference tools show for this failure in their generic error payload
    /// (`str(exception)` of the httpx error): `All connection attempts failed` for an
    /// unreachable server, httpx's `Client error '404 Not Found' for url '…'` paragraph for a
    /// refused status, `json.loads`' message for a malformed body. Failures the reference
    /// reports differently (timeouts, broken connections) fall back to the [`Display`] text.
    ///
    /// [`Display`]: std::fmt::Display
    pub fn reference_text(&self) -> String {
        match (self.0.kind, &self.0.status) {
            (FailureKind::Unreachable, _) => "All connection attempts failed".to_owned(),
            (FailureKind::MalformedBody, _) => self.0.cause.clone().unwrap_or_default(),
            (_, Some(status)) => {
                let class = match status.code / 100 {
                    1 => "Informational response",
                    3 => "Redirect response",
                    4 => "Client error",
                    5 => "Server error",
                    _ => "Invalid status code",
                };
                format!(
                    "{class} '{} {}' for url '{}'\nFor more information check: \
                     https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/{}",
                    status.code, status.reason, self.0.url, status.code
                )
            }
            _ => self.to_string(),
        }
    }

    fn server_words(&self) -> Option<String> {
        self.detail_text()
            .or_else(|| {
                self.0
                    .body
                    .as_ref()
                    .map(|b| b.dumps(Dialect::PY_COMPACT_UTF8))
            })
            .or_else(|| self.0.body_excerpt.clone())
    }
}

fn validation_entry_text(item: &Value) -> String {
    let Some(object) = item.as_object() else {
        return item.dumps(Dialect::PY_COMPACT_UTF8);
    };
    let message = object
        .get("msg")
        .and_then(Value::as_str)
        .map_or_else(|| item.dumps(Dialect::PY_COMPACT_UTF8), str::to_owned);
    match object.get("loc").and_then(Value::as_array) {
        Some(location) if !location.is_empty() => {
            let path: Vec<String> = location.iter().map(Value::to_python_str).collect();
            format!("{}: {message}", path.join("."))
        }
        _ => message,
    }
}

fn excerpt(text: &str) -> String {
    let mut cut: String = text.trim().chars().take(BODY_EXCERPT_CHARS).collect();
    if text.trim().chars().count() > BODY_EXCERPT_CHARS {
        cut.push('…');
    }
    format!("{cut:?}")
}

impl fmt::Display for RemoteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = format!("{} {}", self.0.method, self.0.url);
        let status = self
            .0
            .status
            .as_ref()
            .map(|s| format!("{} {}", s.code, s.reason))
            .unwrap_or_default();
        match self.0.kind {
            FailureKind::InvalidArgument => write!(
                f,
                "refused before sending to the task server: {}",
                self.0.cause.as_deref().unwrap_or("invalid argument")
            ),
            FailureKind::Unreachable => write!(
                f,
                "cannot reach the task server for {call}: All connection attempts failed ({}); \
                 is `bernstein serve` running at that address?",
                self.0.cause.as_deref().unwrap_or("no address answered")
            ),
            FailureKind::Timeout => {
                let after = self.0.timeout.unwrap_or_default();
                write!(
                    f,
                    "the task server did not answer {call} within {} ms",
                    after.as_millis()
                )
            }
            FailureKind::Transport => write!(
                f,
                "the connection to the task server broke during {call}: {}",
                self.0.cause.as_deref().unwrap_or("unknown transport error")
            ),
            FailureKind::Unauthorized => {
                let words = self
                    .server_words()
                    .unwrap_or_else(|| "no reason given".to_owned());
                let advice = if self.0.bearer_configured {
                    "the configured bearer token was refused; set BERNSTEIN_AUTH_TOKEN to the \
                     token the task server was started with"
                } else {
                    "no bearer token is configured; set BERNSTEIN_AUTH_TOKEN to the token the \
                     task server was started with"
                };
                write!(
                    f,
                    "the task server refused {call} ({status}: {words}): {advice}"
                )
            }
            FailureKind::Conflict => match self.detail_text() {
                // The detail of a 409 is the server's own sentence (an illegal transition, a
                // stale version); it is the message, unchanged.
                Some(detail) => f.write_str(&detail),
                None => write!(f, "the task server answered {status} to {call}"),
            },
            FailureKind::MalformedBody => write!(
                f,
                "the task server answered {call} with a body that is not the expected JSON: {}",
                self.0.cause.as_deref().unwrap_or("unreadable body")
            ),
            _ => match self.server_words() {
                Some(words) => write!(f, "the task server answered {status} to {call}: {words}"),
                None => write!(f, "the task server answered {status} to {call}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, reason: &str, body: &str, bearer: bool) -> RemoteFailure {
        RemoteFailure::status(
            "GET",
            "http://127.0.0.1:8052/tasks/nope",
            StatusLine {
                code,
                reason: reason.to_owned(),
            },
            body.as_bytes(),
            bearer,
        )
    }

    fn check(failure: &RemoteFailure, kind: FailureKind, display: &str, detail: Option<&str>) {
        assert_eq!(failure.kind(), kind);
        assert_eq!(failure.to_string(), display);
        assert_eq!(failure.detail_text().as_deref(), detail);
    }

    #[test]
    fn status_classes() {
        check(
            &refused(
                404,
                "Not Found",
                r#"{"detail":"Task 'nope' not found"}"#,
                true,
            ),
            FailureKind::NotFound,
            "the task server answered 404 Not Found to GET http://127.0.0.1:8052/tasks/nope: \
             Task 'nope' not found",
            Some("Task 'nope' not found"),
        );
        check(
            &refused(
                409,
                "Conflict",
                r#"{"detail":"Illegal task transition: 'done' -> 'done' (entity x)"}"#,
                true,
            ),
            FailureKind::Conflict,
            "Illegal task transition: 'done' -> 'done' (entity x)",
            Some("Illegal task transition: 'done' -> 'done' (entity x)"),
        );
        check(
            &refused(
                401,
                "Unauthorized",
                r#"{"detail":"Missing or invalid Authorization header"}"#,
                false,
            ),
            FailureKind::Unauthorized,
            "the task server refused GET http://127.0.0.1:8052/tasks/nope (401 Unauthorized: \
             Missing or invalid Authorization header): no bearer token is configured; set \
             BERNSTEIN_AUTH_TOKEN to the token the task server was started with",
            Some("Missing or invalid Authorization header"),
        );
        check(
            &refused(401, "Unauthorized", "", true),
            FailureKind::Unauthorized,
            "the task server refused GET http://127.0.0.1:8052/tasks/nope (401 Unauthorized: \
             no reason given): the configured bearer token was refused; set \
             BERNSTEIN_AUTH_TOKEN to the token the task server was started with",
            None,
        );
        check(
            &refused(502, "Bad Gateway", "<html><b>bad</b></html>", true),
            FailureKind::ServerError,
            "the task server answered 502 Bad Gateway to GET \
             http://127.0.0.1:8052/tasks/nope: \"<html><b>bad</b></html>\"",
            None,
        );
        check(
            &refused(500, "Internal Server Error", "[1,2]", true),
            FailureKind::ServerError,
            "the task server answered 500 Internal Server Error to GET \
             http://127.0.0.1:8052/tasks/nope: [1,2]",
            None,
        );
        check(
            &refused(307, "Temporary Redirect", "", true),
            FailureKind::UnexpectedStatus,
            "the task server answered 307 Temporary Redirect to GET \
             http://127.0.0.1:8052/tasks/nope",
            None,
        );
        check(
            &refused(
                403,
                "Forbidden",
                r#"{"detail":"caller does not hold an active claim for task 'x'"}"#,
                true,
            ),
            FailureKind::Forbidden,
            "the task server answered 403 Forbidden to GET http://127.0.0.1:8052/tasks/nope: \
             caller does not hold an active claim for task 'x'",
            Some("caller does not hold an active claim for task 'x'"),
        );
        assert_eq!(
            refused(429, "Too Many Requests", "", true).kind(),
            FailureKind::RateLimited
        );
    }

    #[test]
    fn structured_and_list_details() {
        let empty_summary = refused(
            422,
            "Unprocessable Entity",
            r#"{"detail":{"error":"empty_result_summary","message":"Cannot complete task 'c': result_summary must be non-empty","status":"failed"}}"#,
            true,
        );
        assert_eq!(empty_summary.kind(), FailureKind::Validation);
        assert_eq!(empty_summary.error_code(), Some("empty_result_summary"));
        assert_eq!(
            empty_summary.detail_text().as_deref(),
            Some("Cannot complete task 'c': result_summary must be non-empty")
        );
        let pydantic = refused(
            422,
            "Unprocessable Entity",
            r#"{"detail":[{"type":"missing","loc":["body","title"],"msg":"Field required"},{"loc":[],"msg":"x"},7]}"#,
            true,
        );
        assert_eq!(
            pydantic.detail_text().as_deref(),
            Some("body.title: Field required; x; 7")
        );
        assert_eq!(pydantic.error_code(), None);
        let odd = refused(400, "Bad Request", r#"{"detail":{"n":1}}"#, true);
        assert_eq!(odd.detail_text().as_deref(), Some(r#"{"n":1}"#));
    }

    #[test]
    fn reference_texts_match_httpx() {
        assert_eq!(
            refused(404, "Not Found", "{}", true).reference_text(),
            "Client error '404 Not Found' for url 'http://127.0.0.1:8052/tasks/nope'\n\
             For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/404"
        );
        assert_eq!(
            refused(503, "Service Unavailable", "", true).reference_text(),
            "Server error '503 Service Unavailable' for url 'http://127.0.0.1:8052/tasks/nope'\n\
             For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/503"
        );
        let down = RemoteFailure::unreachable(
            "GET",
            "http://127.0.0.1:1/status",
            "Connection refused (os error 111)".to_owned(),
        );
        assert_eq!(down.reference_text(), "All connection attempts failed");
        assert_eq!(
            down.to_string(),
            "cannot reach the task server for GET http://127.0.0.1:1/status: All connection \
             attempts failed (Connection refused (os error 111)); is `bernstein serve` running \
             at that address?"
        );
        let late = RemoteFailure::timeout("GET", "http://h:1/status", Duration::from_millis(250));
        assert_eq!(
            late.to_string(),
            "the task server did not answer GET http://h:1/status within 250 ms"
        );
        assert_eq!(late.reference_text(), late.to_string());
    }

    #[test]
    fn long_bodies_are_cut() {
        let body = "x".repeat(1000);
        let failure = refused(500, "Internal Server Error", &body, true);
        let text = failure.to_string();
        assert!(text.ends_with(&format!("{}…\"", "x".repeat(200))), "{text}");
    }
}
