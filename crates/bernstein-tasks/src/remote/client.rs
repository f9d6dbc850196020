//! The HTTP/1.1 exchange with the task server: one request, one complete answer, one deadline.
//!
//! Requests go through hyper-util's client with connection pooling switched off. The reference
//! opens a fresh httpx client for every tool call, so nothing is lost, and a pooled connection
//! would race the server's keep-alive timeout (uvicorn closes idle connections after 5 s) and
//! turn an idle pause into a spurious "connection closed" failure.
//!
//! Every exchange of [`HttpClient::send`] runs under one deadline that covers connecting,
//! writing, and reading the whole body. httpx's `timeout=5.0` applies per phase instead; one
//! overall bound is stricter and easier to reason about for a tool call. Streams
//! ([`HttpClient::open_stream`]) are bounded by the caller, who owns the subscription deadline.
//!
//! Bodies are read with a size cap, so a misbehaving server cannot exhaust memory.

use std::error::Error as StdError;
use std::time::Duration;

use bernstein_protocol::pyjson::{Dialect, Value};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT};
use hyper::{Method, Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::endpoint::{BaseUrl, Target};
use super::failure::{RemoteFailure, StatusLine};

/// Largest response body read into memory (task lists of a busy server stay far below this).
pub(crate) const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// The `json.dumps` configuration httpx uses for a `json=` request body: insertion order,
/// compact separators, UTF-8 text.
const REQUEST_DIALECT: Dialect = Dialect {
    sort_keys: false,
    compact: true,
    ensure_ascii: false,
};

/// The `user-agent` every request carries.
const USER_AGENT_VALUE: &str = concat!("bernstein-mcp/", env!("CARGO_PKG_VERSION"));

/// One request to send.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) target: Target,
    pub(crate) body: Option<Value>,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
}

impl Call {
    /// A `GET` of `target`.
    pub(crate) fn get(target: Target) -> Call {
        Call {
            method: Method::GET,
            target,
            body: None,
            headers: Vec::new(),
        }
    }

    /// A `POST` of `body` (none for the bodiless routes such as claim) to `target`.
    pub(crate) fn post(target: Target, body: Option<Value>) -> Call {
        Call {
            method: Method::POST,
            target,
            body,
            headers: Vec::new(),
        }
    }

    /// Adds one header (already validated).
    pub(crate) fn header(mut self, name: HeaderName, value: HeaderValue) -> Call {
        self.headers.push((name, value));
        self
    }
}

/// A complete 2xx-or-not answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) method: Method,
    pub(crate) url: String,
    pub(crate) status: StatusLine,
    pub(crate) body: Bytes,
}

/// The histogram of task-server round trips, in seconds, by HTTP method and result
/// (`answered`: any HTTP status came back; `failed`: no answer; `timeout`).
pub const BACKEND_ROUND_TRIP_METRIC: &str = "bernstein_mcp_backend_round_trip_seconds";

/// Describes the remote backend's metrics to the installed recorder (the binary calls it once).
pub fn describe_metrics() {
    metrics::describe_histogram!(
        BACKEND_ROUND_TRIP_METRIC,
        metrics::Unit::Seconds,
        "Round trip of one request to the remote task server (connect, send, read the whole answer), by HTTP method and result."
    );
}

/// The configured connection to one task server.
#[derive(Debug, Clone)]
pub(crate) struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    base: BaseUrl,
    bearer: Option<HeaderValue>,
    timeout: Duration,
}

impl HttpClient {
    /// A client for `base`, sending `bearer` (already a valid `Bearer …` header value) on every
    /// request and giving each exchange `timeout`.
    pub(crate) fn new(base: BaseUrl, bearer: Option<HeaderValue>, timeout: Duration) -> HttpClient {
        let mut connector = HttpConnector::new();
        connector.enforce_http(true);
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        HttpClient {
            client,
            base,
            bearer,
            timeout,
        }
    }

    /// The base URL, normalised.
    pub(crate) fn base_url(&self) -> String {
        self.base.as_text()
    }

    /// The per-exchange timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether a bearer token is sent.
    pub(crate) fn bearer_configured(&self) -> bool {
        self.bearer.is_some()
    }

    /// Sends `call` and reads the whole answer, all under the configured timeout.
    pub(crate) async fn send(&self, call: Call) -> Result<Reply, RemoteFailure> {
        let method = call.method.clone();
        let url = self.base.join(&call.target.render());
        let exchange = async {
            let request = self.build(&call, &url, "application/json")?;
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| classify_request_error(&method, &url, &e))?;
            let status = status_line(&response);
            let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| body_error(&method, &url, &status, e.as_ref()))?
                .to_bytes();
            Ok(Reply {
                method: method.clone(),
                url: url.clone(),
                status,
                body,
            })
        };
        let started = std::time::Instant::now();
        let (answer, result) = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(reply)) => (Ok(reply), "answered"),
            Ok(Err(failure)) => (Err(failure), "failed"),
            Err(_) => (
                Err(RemoteFailure::timeout(method.as_str(), &url, self.timeout)),
                "timeout",
            ),
        };
        // The route is left out of the labels: it names task ids, which would make one series
        // per task.
        metrics::histogram!(
            BACKEND_ROUND_TRIP_METRIC,
            "method" => method.as_str().to_owned(),
            "result" => result,
        )
        .record(started.elapsed().as_secs_f64());
        answer
    }

    /// Sends `call` asking for `text/event-stream` and returns the answer's head and open body
    /// once the status is known to be 2xx. No deadline is applied here: the caller bounds the
    /// whole subscription. A non-2xx answer is read (up to the body cap) and returned as the
    /// usual classified failure.
    pub(crate) async fn open_stream(
        &self,
        call: Call,
    ) -> Result<(String, Response<Incoming>), RemoteFailure> {
        let method = call.method.clone();
        let url = self.base.join(&call.target.render());
        let request = self.build(&call, &url, "text/event-stream")?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| classify_request_error(&method, &url, &e))?;
        if response.status().is_success() {
            return Ok((url, response));
        }
        let status = status_line(&response);
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| body_error(&method, &url, &status, e.as_ref()))?
            .to_bytes();
        Err(RemoteFailure::status(
            method.as_str(),
            &url,
            status,
            &body,
            self.bearer_configured(),
        ))
    }

    fn build(
        &self,
        call: &Call,
        url: &str,
        accept: &'static str,
    ) -> Result<Request<Full<Bytes>>, RemoteFailure> {
        let method = call.method.as_str();
        let mut builder = Request::builder()
            .method(call.method.clone())
            .uri(url)
            .header(ACCEPT, HeaderValue::from_static(accept))
            .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        if let Some(bearer) = &self.bearer {
            builder = builder.header(AUTHORIZATION, bearer.clone());
        }
        for (name, value) in &call.headers {
            builder = builder.header(name.clone(), value.clone());
        }
        let body = match &call.body {
            Some(value) => {
                builder =
                    builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                Bytes::from(value.dumps(REQUEST_DIALECT))
            }
            None => Bytes::new(),
        };
        // The URL was assembled from a validated base and percent-encoded segments, so a
        // failure here means a bug in that assembly; it is reported, not unwrapped.
        builder.body(Full::new(body)).map_err(|e| {
            RemoteFailure::transport(method, url, format!("could not build the request: {e}"))
        })
    }

    /// Sends `call` and checks the status: a 2xx answer's body parsed as JSON, or the
    /// classified failure.
    pub(crate) async fn send_json(&self, call: Call) -> Result<Value, RemoteFailure> {
        let reply = self.send(call).await?;
        self.parse_reply(reply)
    }

    /// Turns a complete answer into its JSON body, or the classified failure.
    pub(crate) fn parse_reply(&self, reply: Reply) -> Result<Value, RemoteFailure> {
        let method = reply.method.as_str();
        if !(200..300).contains(&reply.status.code) {
            return Err(RemoteFailure::status(
                method,
                &reply.url,
                reply.status,
                &reply.body,
                self.bearer_configured(),
            ));
        }
        let text = std::str::from_utf8(&reply.body).map_err(|e| {
            RemoteFailure::malformed(
                method,
                &reply.url,
                reply.status.clone(),
                format!("the body is not UTF-8: {e}"),
            )
        })?;
        Value::parse(text).map_err(|e| {
            RemoteFailure::malformed(method, &reply.url, reply.status.clone(), e.to_string())
        })
    }
}

/// The status line of `response`, with the reason phrase the server actually sent.
pub(crate) fn status_line<B>(response: &Response<B>) -> StatusLine {
    let code = response.status();
    let reason = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|phrase| String::from_utf8_lossy(phrase.as_bytes()).into_owned())
        .or_else(|| code.canonical_reason().map(str::to_owned))
        .unwrap_or_default();
    StatusLine {
        code: code.as_u16(),
        reason,
    }
}

fn classify_request_error(
    method: &Method,
    url: &str,
    error: &hyper_util::client::legacy::Error,
) -> RemoteFailure {
    let cause = error_chain(error);
    if error.is_connect() {
        RemoteFailure::unreachable(method.as_str(), url, cause)
    } else {
        RemoteFailure::transport(method.as_str(), url, cause)
    }
}

fn body_error(
    method: &Method,
    url: &str,
    status: &StatusLine,
    error: &(dyn StdError + Send + Sync + 'static),
) -> RemoteFailure {
    if error.is::<http_body_util::LengthLimitError>() {
        RemoteFailure::malformed(
            method.as_str(),
            url,
            status.clone(),
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
    } else {
        RemoteFailure::transport(method.as_str(), url, error_chain(error))
    }
}

/// An error and its sources, joined with `: ` (hyper's top-level messages are terse).
fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        let inner_text = inner.to_string();
        if !text.contains(&inner_text) {
            text.push_str(": ");
            text.push_str(&inner_text);
        }
        source = inner.source();
    }
    text
}
