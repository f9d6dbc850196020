//! Response bodies and the few response shapes the transports build: JSON, SSE event framing,
//! and the body that streams a call's progress notifications before its result.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use serde_json::Value as JsonValue;

/// A boxed error, as bodies and services carry them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every response the service produces.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// The response header that carries a JSON-RPC response's span id (`_meter.call_id`).
pub const SPAN_HEADER: &str = "x-bernstein-span-id";

/// A body holding `bytes`.
pub(crate) fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub(crate) fn empty() -> ResponseBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A JSON response with `status`.
pub(crate) fn json(status: StatusCode, value: &JsonValue) -> Response<ResponseBody> {
    let mut response = Response::new(full(value.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `{"error": message}` with `status`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<ResponseBody> {
    json(status, &serde_json::json!({"error": message}))
}

/// Sets the span header (span ids are hex, so always a valid header value).
pub(crate) fn with_span(
    mut response: Response<ResponseBody>,
    span: &str,
) -> Response<ResponseBody> {
    if let Ok(value) = HeaderValue::from_str(span) {
        response.headers_mut().insert(SPAN_HEADER, value);
    }
    response
}

/// One SSE event: `event: <kind>`, an optional `id:`, and the data on one line (JSON never
/// contains a raw newline).
pub(crate) fn sse_event(kind: &str, id: Option<&str>, data: &str) -> Bytes {
    let mut event = format!("event: {kind}\n");
    if let Some(id) = id {
        event.push_str("id: ");
        event.push_str(id);
        event.push('\n');
    }
    event.push_str("data: ");
    event.push_str(data);
    event.push_str("\n\n");
    Bytes::from(event)
}

/// A `text/event-stream` response around `body`.
pub(crate) fn event_stream(body: ResponseBody) -> Response<ResponseBody> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// What a body stream yields next.
pub(crate) enum Next {
    /// Send these bytes.
    Data(Bytes),
    /// Nothing now; poll again when woken.
    Pending,
    /// The stream is over.
    End,
}

/// A body driven by a poll function, for the SSE streams.
pub(crate) struct PollBody<S> {
    pub(crate) state: S,
    pub(crate) poll: fn(&mut S, &mut Context<'_>) -> Next,
}

impl<S: Unpin> Body for PollBody<S> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match (this.poll)(&mut this.state, cx) {
            Next::Data(bytes) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Next::Pending => Poll::Pending,
            Next::End => Poll::Ready(None),
        }
    }
}

/// Boxes a [`PollBody`].
pub(crate) fn poll_body<S: Unpin + Send + 'static>(
    state: S,
    poll: fn(&mut S, &mut Context<'_>) -> Next,
) -> ResponseBody {
    PollBody { state, poll }.boxed_unsync()
}
