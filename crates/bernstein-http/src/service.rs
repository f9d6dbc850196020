//! The tower service: routing, the protection checks, and streamable HTTP on `/mcp`.
//!
//! Routes (every path is exact):
//!
//! | path | methods | checks | answer |
//! |---|---|---|---|
//! | `/healthz` | GET | none | 200 `{"status":"ok"}` |
//! | `/.well-known/oauth-protected-resource` | GET | Host | 200 RFC 9728 document, or 404 without an issuer |
//! | `/mcp` | POST, DELETE (legacy) | Host, Origin, auth | JSON-RPC |
//! | `/sse`, `/messages` | GET, POST | Host, Origin, auth | the SSE transport ([`crate::sse`]) |
//! | `/readyz` | GET | Host, Origin, auth | 200 ready / 503 with the reason |
//! | `/metrics` | GET | Host, Origin, auth | Prometheus text, or 404 without a renderer |
//!
//! Everything else is 404 `{"error":"not found"}`; `/.well-known/oauth-authorization-server`
//! in particular is never served (it belongs to the identity provider).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bernstein_mcp_core::ids::request_span_id;
use bernstein_mcp_core::jsonrpc::{
    self, INVALID_PARAMS, INVALID_REQUEST, INVALID_REQUEST_META, Incoming, METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY, PARSE_ERROR, RequestId, RpcError,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use bernstein_mcp_core::{CallScope, DiscardNotifications, Dispatcher};
use bytes::Bytes;
use http::header::{ACCEPT, ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;
use rmcp::model::ProtocolVersion;
use serde_json::{Value as JsonValue, json};
use tokio::sync::mpsc;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use crate::access;
use crate::auth::{self, PROTECTED_RESOURCE_PATH, Refusal};
use crate::body::{
    BoxError, Next, ResponseBody, SPAN_HEADER, empty, error, event_stream, full, json, poll_body,
    sse_event, with_span,
};
use crate::calls::{CancelOnDrop, ChannelSink, Event, InFlight, Registration};
use crate::config::{HttpConfig, LEGACY_SESSION_WINDOW_END};
use crate::sse::Streams;

/// The counter of requests refused by the auth layer, by `reason`.
pub(crate) const AUTH_REFUSALS_TOTAL: &str = "bernstein_mcp_auth_refusals_total";

/// The JSON-RPC error code of a SEP-2243 header that is missing or disagrees with the body.
pub const HEADER_MISMATCH: i32 = -32020;

/// The streamable HTTP endpoint path.
pub const MCP_PATH: &str = "/mcp";

/// The legacy-session refusal once the compatibility window has closed.
pub(crate) fn session_window_closed() -> String {
    format!(
        "protocol sessions were removed by the stateless MCP spec revision; the mcp-session-id compatibility window ended on {LEGACY_SESSION_WINDOW_END}"
    )
}

type Boxed =
    tower::util::BoxCloneSyncService<Request<ResponseBody>, Response<ResponseBody>, Infallible>;

/// The HTTP transports as one `tower::Service<http::Request<B>>`: streamable HTTP on `/mcp`,
/// the SSE transport on `/sse` + `/messages`, the probes, discovery and metrics (see the
/// module table). Cheap to clone; a host mounts it beside its own routes (see the crate's
/// `examples/`).
#[derive(Clone)]
pub struct McpHttp {
    shared: Arc<Shared>,
    stack: Boxed,
}

impl std::fmt::Debug for McpHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHttp")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// What every request handler shares.
pub(crate) struct Shared {
    pub(crate) dispatcher: Dispatcher,
    pub(crate) config: HttpConfig,
    pub(crate) in_flight: InFlight,
    pub(crate) streams: Streams,
}

impl McpHttp {
    /// The service for `dispatcher`, configured by `config`. The tower-http layers applied, from
    /// the outside in: request tracing, CORS (the allowed origin reflected, the span header
    /// exposed), the request-body limit (413) and body timeout (408), and a response timeout
    /// (408).
    pub fn new(dispatcher: Dispatcher, config: HttpConfig) -> McpHttp {
        let shared = Arc::new(Shared {
            dispatcher,
            config,
            in_flight: InFlight::default(),
            streams: Streams::default(),
        });
        let cors_config = shared.config.clone();
        let cors = CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, _| {
                origin
                    .to_str()
                    .is_ok_and(|o| auth::origin_allowed(&cors_config, o))
            }))
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                CONTENT_TYPE,
                http::header::AUTHORIZATION,
                ACCEPT,
                HeaderName::from_static("mcp-protocol-version"),
                HeaderName::from_static("mcp-method"),
                HeaderName::from_static("mcp-name"),
                HeaderName::from_static("mcp-session-id"),
                HeaderName::from_static("last-event-id"),
            ])
            .expose_headers([HeaderName::from_static(SPAN_HEADER)]);
        let handler_shared = Arc::clone(&shared);
        let handler = tower::service_fn(move |request: Request<_>| {
            let shared = Arc::clone(&handler_shared);
            // Boxed here, outside the async block, so the handlers see one concrete body type.
            let request = request.map(box_body);
            async move { Ok::<_, Infallible>(shared.route(request).await) }
        });
        let stack = ServiceBuilder::new()
            .map_response(box_response)
            // A refusal or a 503 from the readiness probe is an answer, not a server fault:
            // logged at warn, so a load balancer's probes do not flood the error log.
            .layer(
                TraceLayer::new_for_http()
                    .on_failure(DefaultOnFailure::new().level(tracing::Level::WARN)),
            )
            .layer(cors)
            .map_response(box_response)
            .layer(RequestBodyLimitLayer::new(shared.config.body_limit))
            .layer(RequestBodyTimeoutLayer::new(shared.config.body_timeout))
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                shared.config.request_timeout,
            ))
            .service(handler);
        McpHttp {
            shared,
            stack: Boxed::new(stack),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HttpConfig {
        &self.shared.config
    }

    /// Ends every open SSE stream (at shutdown, so that graceful connection close can finish);
    /// the returned handle cancels whatever is still running if the grace runs out.
    pub(crate) fn close_streams(&self) -> Stragglers {
        Stragglers {
            shared: Arc::clone(&self.shared),
            streams: self.shared.streams.close_all(),
        }
    }
}

/// The calls still running at shutdown.
pub(crate) struct Stragglers {
    shared: Arc<Shared>,
    streams: Vec<CallScope>,
}

impl Stragglers {
    /// Cancels them, so each answers with its partial work; returns how many.
    pub(crate) fn cancel(&self) -> usize {
        self.shared.in_flight.cancel_all()
            + self
                .streams
                .iter()
                .map(CallScope::cancel_all)
                .sum::<usize>()
    }
}

fn box_response<B>(response: Response<B>) -> Response<ResponseBody>
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    response.map(box_body)
}

fn box_body<B>(body: B) -> ResponseBody
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

impl<B> Service<Request<B>> for McpHttp
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ResponseBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let mut request: Request<ResponseBody> =
            request.map(|b| b.map_err(Into::into).boxed_unsync());
        let entry = access::Entry {
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            auth: self.shared.config.auth,
            started: Instant::now(),
            note: access::Note::default(),
        };
        request.extensions_mut().insert(entry.note.clone());
        // Boxed before the async block: awaiting the `Oneshot` in it directly trips rustc's
        // higher-ranked `Send` inference on the boxed body's error type.
        let answer: Self::Future = Box::pin(self.stack.clone().oneshot(request));
        Box::pin(async move {
            let response = answer.await?;
            entry.log(&response);
            Ok(response)
        })
    }
}

/// Which of JSON and SSE a request's `Accept` allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acceptable {
    pub(crate) json: bool,
    pub(crate) sse: bool,
}

/// Reads `Accept` (absent: both). A range with `q=0` is excluded.
pub(crate) fn acceptable(headers: &HeaderMap) -> Acceptable {
    let values: Vec<&HeaderValue> = headers.get_all(ACCEPT).iter().collect();
    if values.is_empty() {
        return Acceptable {
            json: true,
            sse: true,
        };
    }
    let mut out = Acceptable {
        json: false,
        sse: false,
    };
    for value in values {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            if refused {
                continue;
            }
            match media.as_str() {
                "*/*" => {
                    out.json = true;
                    out.sse = true;
                }
                "application/*" | "application/json" => out.json = true,
                "text/*" | "text/event-stream" => out.sse = true,
                _ => {}
            }
        }
    }
    out
}

/// Whether the request's `Content-Type` is JSON (`application/json`, any parameters).
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Reads a request body whole, mapping the limit and timeout layers' errors to their statuses.
pub(crate) async fn read_body(
    body: ResponseBody,
    limit: usize,
) -> Result<Bytes, Response<ResponseBody>> {
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&*err);
            while let Some(current) = cause {
                if current.is::<http_body_util::LengthLimitError>() {
                    return Err(error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        &format!("request body exceeds {limit} bytes"),
                    ));
                }
                if current.is::<tower_http::timeout::TimeoutError>() {
                    return Err(error(
                        StatusCode::REQUEST_TIMEOUT,
                        "request body not received in time",
                    ));
                }
                cause = current.source();
            }
            Err(error(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            ))
        }
    }
}

/// One parsed JSON-RPC message.
pub(crate) enum Parsed {
    /// Answered at once (parse error, batch, invalid message), with its HTTP status.
    Refused(Response<ResponseBody>),
    /// A request.
    Request {
        /// Its id.
        id: RequestId,
        /// Its method.
        method: String,
        /// The whole message, rebuilt from its parts.
        message: JsonValue,
    },
    /// A notification.
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        message: JsonValue,
    },
    /// A response from the client (the server sends no requests): accepted and ignored.
    ClientResponse,
}

/// Parses a body as one JSON-RPC message. Batches, parse errors (malformed JSON, invalid UTF-8)
/// and invalid messages are 400 with the JSON-RPC error.
pub(crate) fn parse(bytes: &[u8]) -> Parsed {
    let first = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first == Some(&b'[') && serde_json::from_slice::<JsonValue>(bytes).is_ok() {
        let error = RpcError::new(
            INVALID_REQUEST,
            "JSON-RPC batching was removed from the MCP specification; send one request per POST",
        );
        return Parsed::Refused(json(
            StatusCode::BAD_REQUEST,
            &jsonrpc::error_response(None, &error),
        ));
    }
    let rebuild = |id: Option<&RequestId>, method: &str, params: Option<JsonValue>| {
        let mut message = serde_json::Map::new();
        message.insert("jsonrpc".to_owned(), json!("2.0"));
        if let Some(id) = id {
            message.insert("id".to_owned(), id.to_json());
        }
        message.insert("method".to_owned(), json!(method));
        if let Some(params) = params {
            message.insert("params".to_owned(), params);
        }
        JsonValue::Object(message)
    };
    match jsonrpc::read_bytes(bytes) {
        Incoming::Request { id, method, params } => Parsed::Request {
            message: rebuild(Some(&id), &method, params),
            id,
            method,
        },
        Incoming::Notification { method, params } => Parsed::Notification {
            message: rebuild(None, &method, params),
            method,
        },
        Incoming::Response => Parsed::ClientResponse,
        Incoming::Invalid { id, error } => {
            debug_assert!(error.code == PARSE_ERROR || error.code < 0);
            Parsed::Refused(json(
                StatusCode::BAD_REQUEST,
                &jsonrpc::error_response(id.as_ref(), &error),
            ))
        }
    }
}

impl Shared {
    async fn route(self: Arc<Self>, request: Request<ResponseBody>) -> Response<ResponseBody> {
        let (parts, body) = request.into_parts();
        let note = parts
            .extensions
            .get::<access::Note>()
            .cloned()
            .unwrap_or_default();
        let path = parts.uri.path();
        let method = &parts.method;
        if path == "/healthz" {
            return match *method {
                Method::GET | Method::HEAD => json(StatusCode::OK, &json!({"status": "ok"})),
                _ => method_not_allowed("GET"),
            };
        }
        let known = matches!(
            path,
            PROTECTED_RESOURCE_PATH
                | MCP_PATH
                | "/sse"
                | "/messages"
                | "/messages/"
                | "/readyz"
                | "/metrics"
        );
        if !known {
            return error(StatusCode::NOT_FOUND, "not found");
        }
        if !auth::host_allowed(&self.config, &parts.headers, parts.uri.host()) {
            return self.refuse(Refusal::Host, &parts.headers);
        }
        if path == PROTECTED_RESOURCE_PATH {
            if *method != Method::GET && *method != Method::HEAD {
                return method_not_allowed("GET");
            }
            return match auth::protected_resource(&self.config, &parts.headers) {
                Some(document) => {
                    let mut response = json(StatusCode::OK, &document);
                    response.headers_mut().insert(
                        http::header::CACHE_CONTROL,
                        HeaderValue::from_static("public, max-age=300"),
                    );
                    response
                }
                None => error(StatusCode::NOT_FOUND, "oauth discovery not configured"),
            };
        }
        if let Err(refusal) = auth::check(&self.config, &parts.headers, parts.uri.host()) {
            return self.refuse(refusal, &parts.headers);
        }
        if matches!(path, MCP_PATH | "/messages" | "/messages/")
            && parts.headers.contains_key("mcp-session-id")
            && !self.config.legacy_window_open()
        {
            return error(StatusCode::BAD_REQUEST, &session_window_closed());
        }
        match (path, method.clone()) {
            (MCP_PATH, Method::POST) => self.mcp_post(&parts.headers, body, &note).await,
            (MCP_PATH, Method::DELETE) => {
                if self.config.legacy_window_open() {
                    json(StatusCode::OK, &json!({"status": "ok"}))
                } else {
                    error(StatusCode::BAD_REQUEST, &session_window_closed())
                }
            }
            (MCP_PATH, _) => method_not_allowed("POST, DELETE"),
            ("/sse", Method::GET) => crate::sse::open(&self),
            ("/sse", _) => method_not_allowed("GET"),
            ("/messages" | "/messages/", Method::POST) => {
                crate::sse::post(&self, parts.uri.query(), &parts.headers, body, &note).await
            }
            ("/messages" | "/messages/", _) => method_not_allowed("POST"),
            ("/readyz", Method::GET) => match self.dispatcher.readiness().await {
                Ok(()) => json(StatusCode::OK, &json!({"status": "ready"})),
                Err(reason) => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"status": "unavailable", "reason": reason}),
                ),
            },
            ("/readyz", _) => method_not_allowed("GET"),
            ("/metrics", Method::GET) => match &self.config.metrics {
                Some(render) => {
                    let mut response = Response::new(full(render()));
                    response.headers_mut().insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                    );
                    response
                }
                None => error(StatusCode::NOT_FOUND, "metrics not enabled"),
            },
            _ => method_not_allowed("GET"),
        }
    }

    /// The answer to a refused protection check, counted by reason.
    fn refuse(&self, refusal: Refusal, headers: &HeaderMap) -> Response<ResponseBody> {
        metrics::counter!(AUTH_REFUSALS_TOTAL, "reason" => refusal.reason()).increment(1);
        tracing::info!(reason = refusal.reason(), "request refused");
        match refusal {
            Refusal::Host => error(StatusCode::MISDIRECTED_REQUEST, "host not allowed"),
            Refusal::Origin => error(StatusCode::FORBIDDEN, "origin not allowed"),
            Refusal::MissingCredential
            | Refusal::MalformedCredential
            | Refusal::WrongCredential => {
                let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized");
                if let Some(challenge) = auth::challenge(&self.config, headers)
                    .and_then(|c| HeaderValue::from_str(&c).ok())
                {
                    response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
                }
                response
            }
        }
    }

    /// `POST /mcp`.
    async fn mcp_post(
        self: &Arc<Self>,
        headers: &HeaderMap,
        body: ResponseBody,
        note: &access::Note,
    ) -> Response<ResponseBody> {
        if !is_json(headers) {
            return error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            );
        }
        let accept = acceptable(headers);
        if !accept.json && !accept.sse {
            return error(
                StatusCode::NOT_ACCEPTABLE,
                "Accept must allow application/json or text/event-stream",
            );
        }
        let bytes = match read_body(body, self.config.body_limit).await {
            Ok(bytes) => bytes,
            Err(response) => return response,
        };
        match parse(&bytes) {
            Parsed::Refused(response) => response,
            Parsed::ClientResponse => empty_status(StatusCode::ACCEPTED),
            Parsed::Notification { method, message } => {
                note.record(&method, &message);
                let span = request_span_id(&message);
                if method == "notifications/cancelled" {
                    let target = message
                        .get("params")
                        .and_then(|p| p.get("requestId"))
                        .and_then(RequestId::from_json);
                    if let Some(target) = target {
                        let found = self.in_flight.cancel(&target);
                        tracing::debug!(request_id = %target, found, "cancel requested");
                    }
                } else {
                    // Other notifications need no action; the dispatcher decides that.
                    let scope = CallScope::new();
                    let _ = self
                        .dispatcher
                        .accept(message, &scope)
                        .respond(Arc::new(DiscardNotifications))
                        .await;
                }
                with_span(empty_status(StatusCode::ACCEPTED), &span)
            }
            Parsed::Request {
                id,
                method,
                message,
            } => {
                note.record(&method, &message);
                if method == "initialize" && declares_stateless_era(headers, &message) {
                    // 2026-07-28 removed the handshake: a request of that era naming it asks for
                    // a method that no longer exists, answered as any unknown method is.
                    let error = RpcError::new(
                        METHOD_NOT_FOUND,
                        "Method not found: initialize (removed in 2026-07-28; use server/discover)",
                    );
                    return json(
                        StatusCode::NOT_FOUND,
                        &jsonrpc::error_response(Some(&id), &error),
                    );
                }
                let stateless = match sep2243(headers, &id, &method, &message) {
                    Ok(stateless) => stateless,
                    Err(refusal) => return json(StatusCode::BAD_REQUEST, &refusal),
                };
                self.mcp_request(id, method, message, stateless, accept)
                    .await
            }
        }
    }

    async fn mcp_request(
        self: &Arc<Self>,
        id: RequestId,
        method: String,
        message: JsonValue,
        stateless: bool,
        accept: Acceptable,
    ) -> Response<ResponseBody> {
        let fallback_span = request_span_id(&message);
        let scope = CallScope::new();
        let registration = self.in_flight.register(id.clone(), scope.clone());
        let accepted = self.dispatcher.accept(message, &scope);
        let finish = Finish {
            shared: Arc::clone(self),
            method,
            stateless,
            fallback_span,
            id: id.clone(),
        };
        if accepted.is_ready() {
            let response = accepted.respond(Arc::new(DiscardNotifications)).await;
            let (status, text) = finish.render(response);
            return finish.respond(status, text, None, accept);
        }
        let (events, mut receiver) = mpsc::channel(self.dispatcher.limits().outbox_messages.max(2));
        let sink = Arc::new(ChannelSink { events });
        let mut task = tokio::spawn(async move { accepted.respond(sink).await });
        let mut guard = CancelOnDrop {
            scope,
            id,
            armed: true,
        };
        let mut call_id: Option<String> = None;
        let joined = loop {
            tokio::select! {
                biased;
                event = receiver.recv() => match event {
                    Some(Event::CallId(id)) => call_id = Some(id),
                    Some(Event::Notification(notification)) if accept.sse => {
                        let span = call_id.clone().unwrap_or_else(|| finish.fallback_span.clone());
                        let first = sse_event("message", None, &notification.to_string());
                        let stream = CallStream {
                            first: Some(first),
                            receiver,
                            task: Some(task),
                            call_id,
                            finish,
                            guard,
                            _registration: registration,
                        };
                        return with_span(event_stream(poll_body(stream, poll_call)), &span);
                    }
                    // The client cannot take an event stream: progress is dropped.
                    Some(Event::Notification(_)) => {}
                    None => break (&mut task).await,
                },
                joined = &mut task => break joined,
            }
        };
        guard.armed = false;
        drop(registration);
        let (status, text) = finish.render(joined.ok().flatten());
        finish.respond(status, text, call_id, accept)
    }
}

/// Everything needed to turn a dispatcher answer into the HTTP answer.
struct Finish {
    shared: Arc<Shared>,
    method: String,
    stateless: bool,
    fallback_span: String,
    id: RequestId,
}

/// The bytes a response starts with room for: a run handle's answer (about 1.6 KB) is then
/// written without growing its buffer more than once.
const RENDER_START_CAPACITY: usize = 2048;

/// `value` as compact JSON, serialised straight into a byte buffer: `Display` would pass every
/// piece through the formatting machinery, and `serde_json::to_string` grows its buffer from
/// 128 bytes.
fn render_json(value: &JsonValue) -> String {
    let mut bytes = Vec::with_capacity(RENDER_START_CAPACITY);
    match serde_json::to_writer(&mut bytes, value) {
        // serde_json writes only UTF-8, so the check cannot fail; the fallback keeps a panic out.
        Ok(()) => String::from_utf8(bytes).unwrap_or_else(|_| value.to_string()),
        Err(_) => value.to_string(),
    }
}

impl Finish {
    /// The status and the serialised response. `initialize` gains the capability card; an
    /// unknown 2026-07-28 method is 404 and an unsupported version or a header mismatch 400.
    fn render(&self, response: Option<JsonValue>) -> (StatusCode, String) {
        let mut response = response.unwrap_or_else(|| {
            jsonrpc::error_response(
                Some(&self.id),
                &RpcError::internal("Internal error: the request handler did not complete"),
            )
        });
        if self.method == "initialize"
            && let Some(result) = response
                .get_mut("result")
                .and_then(JsonValue::as_object_mut)
            && let Ok(mut card) =
                serde_json::from_str::<JsonValue>(&self.shared.dispatcher.capability_card())
        {
            if let (Some(version), Some(card)) =
                (result.get("protocolVersion").cloned(), card.as_object_mut())
            {
                card.insert("specRevision".to_owned(), version);
            }
            result.insert("capabilityCard".to_owned(), card);
        }
        (status_of(&response, self.stateless), render_json(&response))
    }

    fn respond(
        &self,
        status: StatusCode,
        text: String,
        call_id: Option<String>,
        accept: Acceptable,
    ) -> Response<ResponseBody> {
        let span = call_id.unwrap_or_else(|| self.fallback_span.clone());
        let mut response = if accept.json {
            let mut response = Response::new(full(text));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        } else {
            event_stream(full(sse_event("message", Some(&span), &text)))
        };
        *response.status_mut() = status;
        with_span(response, &span)
    }
}

/// The HTTP status of a dispatcher answer: an unknown method of a stateless (2026-07-28)
/// request is 404; an unsupported protocol version, a header mismatch, a missing client
/// capability and a stateless request's malformed `_meta` are 400; every other answer,
/// JSON-RPC errors included, is 200.
fn status_of(response: &JsonValue, stateless: bool) -> StatusCode {
    let code = response
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(JsonValue::as_i64);
    match code {
        Some(c) if c == i64::from(METHOD_NOT_FOUND) && stateless => StatusCode::NOT_FOUND,
        Some(c)
            if c == i64::from(UNSUPPORTED_PROTOCOL_VERSION)
                || c == i64::from(HEADER_MISMATCH)
                || c == i64::from(MISSING_REQUIRED_CLIENT_CAPABILITY) =>
        {
            StatusCode::BAD_REQUEST
        }
        // SEP-2575: a 2026-07-28 request whose `_meta` lacks a required key is a bad
        // request on HTTP, not only a JSON-RPC error.
        Some(c)
            if c == i64::from(INVALID_PARAMS)
                && stateless
                && response
                    .pointer("/error/message")
                    .and_then(JsonValue::as_str)
                    .is_some_and(|m| m.starts_with(INVALID_REQUEST_META)) =>
        {
            StatusCode::BAD_REQUEST
        }
        _ => StatusCode::OK,
    }
}

/// A call answered as an event stream: its progress notifications, then the response.
struct CallStream {
    first: Option<Bytes>,
    receiver: mpsc::Receiver<Event>,
    task: Option<tokio::task::JoinHandle<Option<JsonValue>>>,
    call_id: Option<String>,
    finish: Finish,
    /// Cancels the call if the client drops the stream before the response.
    guard: CancelOnDrop,
    _registration: Registration,
}

fn poll_call(stream: &mut CallStream, cx: &mut Context<'_>) -> Next {
    if let Some(first) = stream.first.take() {
        return Next::Data(first);
    }
    loop {
        let Some(task) = stream.task.as_mut() else {
            return Next::End;
        };
        match stream.receiver.poll_recv(cx) {
            Poll::Ready(Some(Event::Notification(notification))) => {
                return Next::Data(sse_event("message", None, &notification.to_string()));
            }
            Poll::Ready(Some(Event::CallId(id))) => {
                stream.call_id = Some(id);
                continue;
            }
            Poll::Ready(None) | Poll::Pending => {}
        }
        return match Pin::new(task).poll(cx) {
            Poll::Ready(joined) => {
                stream.task = None;
                stream.guard.armed = false;
                let (_, text) = stream.finish.render(joined.ok().flatten());
                let span = stream
                    .call_id
                    .clone()
                    .unwrap_or_else(|| stream.finish.fallback_span.clone());
                Next::Data(sse_event("message", Some(&span), &text))
            }
            Poll::Pending => Next::Pending,
        };
    }
}

/// Whether a request declares the 2026-07-28 era or later, in its `MCP-Protocol-Version` header
/// or its `_meta` protocol version.
fn declares_stateless_era(headers: &HeaderMap, message: &JsonValue) -> bool {
    let newest_handshake_free = ProtocolVersion::NO_INITIALIZE.as_str();
    let header = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok());
    let meta = message
        .pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion")
        .and_then(JsonValue::as_str);
    [header, meta]
        .into_iter()
        .flatten()
        .any(|version| version >= newest_handshake_free)
}

/// The SEP-2243 header rules for a request; `Ok(true)` when it is served statelessly
/// (2026-07-28), where an unknown method is 404; `Err` is the JSON-RPC error answered with 400.
///
/// * an `MCP-Protocol-Version` header naming a version this server does not know: 400, -32022
///   with the supported list;
/// * a request that declares 2026-07-28 or later (in `_meta` or the header) must send
///   `MCP-Protocol-Version` equal to its `_meta` version, `Mcp-Method` equal to its method, and
///   for `tools/call`/`prompts/get` `Mcp-Name` equal to `params.name` (`resources/read`:
///   `params.uri`); otherwise 400, -32020.
fn sep2243(
    headers: &HeaderMap,
    id: &RequestId,
    method: &str,
    message: &JsonValue,
) -> Result<bool, JsonValue> {
    let supported: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    let header = |name: &str| headers.get(name).map(|v| v.to_str().map(str::to_owned));
    let mismatch = |text: String| {
        let error = RpcError::new(HEADER_MISMATCH, text);
        Err(jsonrpc::error_response(Some(id), &error))
    };
    let header_version = match header("mcp-protocol-version") {
        None => None,
        Some(Ok(version)) => Some(version),
        Some(Err(_)) => return mismatch("MCP-Protocol-Version header is not ASCII".to_owned()),
    };
    if let Some(version) = &header_version
        && !supported.contains(&version.as_str())
    {
        let error = RpcError::new(
            UNSUPPORTED_PROTOCOL_VERSION,
            format!("Unsupported protocol version: {version}"),
        )
        .with_data(json!({"supported": supported, "requested": version}));
        return Err(jsonrpc::error_response(Some(id), &error));
    }
    let params = message.get("params");
    let meta_version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(JsonValue::as_str);
    let declared = meta_version.or(header_version.as_deref());
    let stateless = method != "initialize"
        && declared.is_some_and(|v| v >= ProtocolVersion::NO_INITIALIZE.as_str());
    if !stateless {
        return Ok(method == "server/discover");
    }
    match (&header_version, meta_version) {
        (None, _) => return mismatch("MCP-Protocol-Version header is required".to_owned()),
        (Some(h), Some(m)) if h != m => {
            return mismatch(format!(
                "MCP-Protocol-Version header {h:?} does not match the request's _meta protocolVersion {m:?}"
            ));
        }
        _ => {}
    }
    match header("mcp-method") {
        Some(Ok(m)) if m == method => {}
        Some(Ok(m)) => {
            return mismatch(format!(
                "Mcp-Method header {m:?} does not match the method {method:?}"
            ));
        }
        _ => return mismatch("Mcp-Method header is required".to_owned()),
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        _ => None,
    };
    if let Some(named) = named.and_then(JsonValue::as_str) {
        let decoded = headers
            .get("mcp-name")
            .and_then(|v| decode_header_value(v.as_bytes()));
        match decoded {
            Some(value) if value == named => {}
            Some(value) => {
                return mismatch(format!(
                    "Mcp-Name header {value:?} does not match {named:?}"
                ));
            }
            None => return mismatch("Mcp-Name header is required".to_owned()),
        }
    }
    Ok(true)
}

/// A SEP-2243 header value: plain ASCII, or `=?base64?<standard base64 of UTF-8>?=`.
fn decode_header_value(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    match text
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

fn empty_status(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = status;
    response
}

fn method_not_allowed(allow: &'static str) -> Response<ResponseBody> {
    let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    response
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response renders as `serde_json`'s own compact text, escapes and non-ASCII included,
    /// at any size (past the starting capacity too).
    #[test]
    fn a_response_renders_as_compact_json() {
        fn check(value: JsonValue) {
            assert_eq!(render_json(&value), value.to_string());
        }
        check(serde_json::json!(null));
        check(serde_json::json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
        check(serde_json::json!({"text": "line\n\"quoted\" \u{7} é ✓", "n": [1.5, -2, 1e300]}));
        check(serde_json::json!({"big": "x".repeat(3 * RENDER_START_CAPACITY)}));
        assert_eq!(
            render_json(&serde_json::json!({"b": 1, "a": [true]})),
            r#"{"a":[true],"b":1}"#
        );
    }

    #[test]
    fn accept_ranges_are_read_with_their_weights() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(ACCEPT, HeaderValue::from_static(value));
            acceptable(&headers)
        };
        let a = with("application/json, text/event-stream");
        assert!(a.json && a.sse);
        let a = with("text/html");
        assert!(!a.json && !a.sse);
        let a = with("*/*;q=0, text/event-stream");
        assert!(!a.json && a.sse);
        let a = acceptable(&HeaderMap::new());
        assert!(a.json && a.sse);
    }

    #[test]
    fn answers_map_to_their_http_status() {
        let check = |answer: JsonValue, stateless: bool, expect: StatusCode| {
            assert_eq!(
                status_of(&answer, stateless),
                expect,
                "{answer} (stateless: {stateless})"
            );
        };
        let failed = |code: i32, message: &str| {
            let error = json!({"code": code, "message": message});
            json!({"jsonrpc": "2.0", "id": 1, "error": error})
        };
        let malformed_meta = format!("{INVALID_REQUEST_META}: protocolVersion");
        check(
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            true,
            StatusCode::OK,
        );
        check(
            failed(METHOD_NOT_FOUND, "Method not found"),
            true,
            StatusCode::NOT_FOUND,
        );
        check(
            failed(METHOD_NOT_FOUND, "Method not found"),
            false,
            StatusCode::OK,
        );
        for code in [
            UNSUPPORTED_PROTOCOL_VERSION,
            HEADER_MISMATCH,
            MISSING_REQUIRED_CLIENT_CAPABILITY,
        ] {
            check(failed(code, "refused"), false, StatusCode::BAD_REQUEST);
            check(failed(code, "refused"), true, StatusCode::BAD_REQUEST);
        }
        check(
            failed(INVALID_PARAMS, &malformed_meta),
            true,
            StatusCode::BAD_REQUEST,
        );
        // The same error outside the stateless era, another invalid-params message, or the
        // `_meta` message under another code stays a JSON-RPC error answered with 200.
        check(
            failed(INVALID_PARAMS, &malformed_meta),
            false,
            StatusCode::OK,
        );
        check(failed(INVALID_PARAMS, "missing name"), true, StatusCode::OK);
        check(
            failed(INVALID_REQUEST, &malformed_meta),
            true,
            StatusCode::OK,
        );
        check(failed(PARSE_ERROR, "Parse error"), true, StatusCode::OK);
    }

    #[test]
    fn base64_sentinel_header_values_decode() {
        assert_eq!(
            decode_header_value(b"bernstein_status").as_deref(),
            Some("bernstein_status")
        );
        assert_eq!(
            decode_header_value(b"=?base64?w6k=?=").as_deref(),
            Some("\u{e9}")
        );
        assert_eq!(decode_header_value(b"=?base64?***?="), None);
    }

    #[test]
    fn batches_and_bad_bytes_are_refused_with_400() {
        for body in [
            &b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]"[..],
            b"{",
            b"\xff\xfe",
        ] {
            match parse(body) {
                Parsed::Refused(response) => assert_eq!(response.status(), StatusCode::BAD_REQUEST),
                _ => panic!("{body:?} was not refused"),
            }
        }
    }
}
