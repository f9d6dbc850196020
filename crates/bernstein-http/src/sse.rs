//! The SSE transport: `GET /sse` opens a stream, `POST /messages?stream=<token>` sends one
//! message to be answered on it.
//!
//! The stream's first event is `event: endpoint` with the relative URL to POST to. Each answer
//! goes out as `event: message` whose `id:` is the response's span id (the `_meter.call_id`
//! and anchoring row of a `tools/call`, else the request's content-derived span id), and the
//! POST is answered 202 with the same id in `X-Bernstein-Span-Id` once it is known (after the
//! call is anchored, before it runs). Progress notifications go out as `event: message` without
//! an id. An idle stream gets a `: keepalive` comment.
//!
//! The token only routes answers to a stream that is open on this instance: nothing an answer
//! depends on is stored, so a deployment needs sticky routing for SSE (the POST must reach the
//! instance holding the stream) and none for streamable HTTP. Each stream has its own
//! [`CallScope`], as a stdio stream does: a `notifications/cancelled` POSTed for the stream
//! reaches its calls, and closing the stream cancels them.
//!
//! A stream holds at most [`Limits::outbox_messages`] answers queued for it and as many more
//! requests waiting for room in that queue. A request POSTed beyond that is refused with 429
//! before it is dispatched, so a client that never reads its stream cannot pile up calls (and
//! their answers in memory) without bound.
//!
//! [`Limits::outbox_messages`]: bernstein_mcp_core::Limits::outbox_messages

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bernstein_mcp_core::ids::request_span_id;
use bernstein_mcp_core::{CallScope, NotificationSink};
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::Value as JsonValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::body::{
    Next, ResponseBody, empty, error, event_stream, poll_body, sse_event, with_span,
};
use crate::service::{Parsed, Shared, is_json, parse, read_body};

/// The open streams of this instance, by token.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    open: Mutex<HashMap<String, Stream>>,
}

#[derive(Debug, Clone)]
struct Stream {
    events: mpsc::Sender<Bytes>,
    scope: CallScope,
    /// One permit per request that may be waiting to queue its answer on this stream.
    waiting: Arc<Semaphore>,
}

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Stream>> {
        // The map holds plain handles; a panic while locked cannot leave it inconsistent.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, token: &str) -> Option<Stream> {
        self.lock().get(token).cloned()
    }

    /// Forgets every stream: their bodies end once the calls still answering on them finish.
    /// Returns the streams' scopes, so a shutdown past its grace can cancel their calls.
    pub(crate) fn close_all(&self) -> Vec<CallScope> {
        self.lock()
            .drain()
            .map(|(_, stream)| stream.scope)
            .collect()
    }
}

/// Removes a stream and cancels its calls when its body is dropped (the client went away).
struct StreamGuard {
    shared: Arc<Shared>,
    token: String,
    scope: CallScope,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.shared.streams.lock().remove(&self.token);
        let cancelled = self.scope.cancel_all();
        if cancelled > 0 {
            tracing::debug!(cancelled, "an SSE stream closed; its calls were cancelled");
        }
    }
}

struct StreamBody {
    first: Option<Bytes>,
    events: mpsc::Receiver<Bytes>,
    keepalive: tokio::time::Interval,
    _guard: StreamGuard,
}

fn poll_stream(stream: &mut StreamBody, cx: &mut Context<'_>) -> Next {
    if let Some(first) = stream.first.take() {
        return Next::Data(first);
    }
    match stream.events.poll_recv(cx) {
        Poll::Ready(Some(bytes)) => return Next::Data(bytes),
        Poll::Ready(None) => return Next::End,
        Poll::Pending => {}
    }
    match stream.keepalive.poll_tick(cx) {
        Poll::Ready(_) => Next::Data(Bytes::from_static(b": keepalive\n\n")),
        Poll::Pending => Next::Pending,
    }
}

/// `GET /sse`.
pub(crate) fn open(shared: &Arc<Shared>) -> Response<ResponseBody> {
    let mut raw = [0u8; 16];
    if SystemRandom::new().fill(&mut raw).is_err() {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the system random source failed",
        );
    }
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let queued = shared.dispatcher.limits().outbox_messages.max(2);
    let (sender, events) = mpsc::channel(queued);
    let scope = CallScope::new();
    shared.streams.lock().insert(
        token.clone(),
        Stream {
            events: sender,
            scope: scope.clone(),
            waiting: Arc::new(Semaphore::new(queued)),
        },
    );
    let every = shared.config.sse_keepalive;
    let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let body = StreamBody {
        first: Some(sse_event(
            "endpoint",
            None,
            &format!("/messages?stream={token}"),
        )),
        events,
        keepalive,
        _guard: StreamGuard {
            shared: Arc::clone(shared),
            token,
            scope,
        },
    };
    event_stream(poll_body(body, poll_stream))
}

/// Forwards a call's notifications to its stream and reports its call id to the POST.
struct StreamSink {
    events: mpsc::Sender<Bytes>,
    call_id: Mutex<Option<String>>,
    span: Mutex<Option<oneshot::Sender<String>>>,
}

impl StreamSink {
    /// The span the answer is labelled with: the call id when the dispatcher reported one.
    fn span_or(&self, fallback: String) -> String {
        self.call_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or(fallback)
    }

    fn report_span(&self, span: &str) {
        let sender = self.span.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(sender) = sender {
            let _ = sender.send(span.to_owned());
        }
    }
}

impl NotificationSink for StreamSink {
    fn send(&self, notification: JsonValue) {
        // A full stream means the client is not reading; progress is advisory and dropped.
        let _ = self
            .events
            .try_send(sse_event("message", None, &notification.to_string()));
    }

    fn call_id(&self, call_id: &str) {
        *self.call_id.lock().unwrap_or_else(|p| p.into_inner()) = Some(call_id.to_owned());
        self.report_span(call_id);
    }
}

/// `POST /messages?stream=<token>`.
pub(crate) async fn post(
    shared: &Arc<Shared>,
    query: Option<&str>,
    headers: &HeaderMap,
    body: ResponseBody,
    note: &crate::access::Note,
) -> Response<ResponseBody> {
    let token = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("stream="));
    let Some(stream) = token.and_then(|t| shared.streams.get(t)) else {
        return error(
            StatusCode::NOT_FOUND,
            "no open SSE stream with that token on this instance: open GET /sse first (SSE needs sticky routing)",
        );
    };
    if !is_json(headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let bytes = match read_body(body, shared.config.body_limit).await {
        Ok(bytes) => bytes,
        Err(response) => return response,
    };
    let (message, is_request) = match parse(&bytes) {
        Parsed::Refused(response) => return response,
        Parsed::ClientResponse => return accepted(None),
        Parsed::Notification { method, message } => {
            note.record(&method, &message);
            (message, false)
        }
        Parsed::Request {
            method, message, ..
        } => {
            note.record(&method, &message);
            (message, true)
        }
    };
    // Taken before the request is dispatched, so a refused request runs and writes nothing.
    let permit: Option<OwnedSemaphorePermit> = if is_request {
        match Arc::clone(&stream.waiting).try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                return error(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many answers are waiting on this SSE stream: read the stream before posting more",
                );
            }
        }
    } else {
        None
    };
    let fallback = request_span_id(&message);
    let accepted_message = shared.dispatcher.accept(message, &stream.scope);
    if !is_request {
        // A notification (a cancel reaches this stream's calls here) has no answer.
        let _ = accepted_message
            .respond(Arc::new(bernstein_mcp_core::DiscardNotifications))
            .await;
        return accepted(Some(&fallback));
    }
    let (span_sender, span) = oneshot::channel();
    let sink = Arc::new(StreamSink {
        events: stream.events.clone(),
        call_id: Mutex::new(None),
        span: Mutex::new(Some(span_sender)),
    });
    let events = stream.events.clone();
    tokio::spawn(async move {
        let response = accepted_message
            .respond(Arc::clone(&sink) as Arc<dyn NotificationSink>)
            .await;
        let id = sink.span_or(fallback);
        sink.report_span(&id);
        let Some(response) = response else { return };
        // Waiting for room is the backpressure on a client that does not read its stream; a
        // stream that closed meanwhile drops the answer. The permit is given back once the
        // answer is queued (or dropped).
        let _ = events
            .send(sse_event("message", Some(&id), &response.to_string()))
            .await;
        drop(permit);
    });
    match span.await {
        Ok(span) => accepted(Some(&span)),
        Err(_) => accepted(None),
    }
}

fn accepted(span: Option<&str>) -> Response<ResponseBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    match span {
        Some(span) => with_span(response, span),
        None => response,
    }
}
