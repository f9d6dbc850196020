//! The calls in flight on one transport stream, so that `notifications/cancelled` can reach them,
//! and the sink notifications go out through.
//!
//! Request ids are only unique within one stream (two stdio clients may both send id 1), so
//! each stream gets its own [`CallScope`]. The scope holds nothing a response depends on: it
//! lets a later cancel notification find the cancellation token of a running call, refuses a
//! request whose id is already in flight on the stream, and counts the stream's requests
//! against its cap. A request leaves the scope when it settles, so cancelling an unknown or
//! settled id finds nothing and does nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value as JsonValue;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::RequestId;

/// Where the dispatcher sends server-to-client notifications (progress) for one request.
///
/// A transport implements it over its output: stdio writes a line, streamable HTTP writes an
/// SSE event on the request's own stream. Sending must not block on the client.
pub trait NotificationSink: Send + Sync + 'static {
    /// Sends one JSON-RPC notification.
    fn send(&self, notification: JsonValue);

    /// Told the call id of a `tools/call` (its `_meter.call_id`, the anchoring row's span id)
    /// as soon as the call is anchored, before the tool runs. A transport that labels its
    /// response before the result exists (the HTTP span header on a streamed answer, the SSE
    /// `202`) keeps it; the default ignores it.
    fn call_id(&self, _call_id: &str) {}
}

impl<F> NotificationSink for F
where
    F: Fn(JsonValue) + Send + Sync + 'static,
{
    fn send(&self, notification: JsonValue) {
        self(notification);
    }
}

/// A sink that drops every notification (for transports that cannot deliver them).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardNotifications;

impl NotificationSink for DiscardNotifications {
    fn send(&self, _notification: JsonValue) {}
}

/// The requests in flight on one transport stream.
#[derive(Debug, Clone, Default)]
pub struct CallScope {
    in_flight: Arc<Mutex<HashMap<RequestId, CancellationToken>>>,
}

/// Why a request was not admitted to its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A request with the same id is still in flight on the stream.
    DuplicateId,
    /// The stream already has as many requests in flight as it may.
    Busy,
}

impl CallScope {
    /// An empty scope.
    pub fn new() -> CallScope {
        CallScope::default()
    }

    /// Cancels the in-flight call with `id`. Returns whether one was found; an unknown or
    /// settled id is a no-op.
    pub fn cancel(&self, id: &RequestId) -> bool {
        match self.lock().get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every in-flight call (a transport closing its input). Returns how many.
    pub fn cancel_all(&self) -> usize {
        let map = self.lock();
        for token in map.values() {
            token.cancel();
        }
        map.len()
    }

    /// How many requests are in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }

    /// Admits a request with `id` if no request with that id is in flight and the stream holds
    /// fewer than `max_in_flight` requests; it leaves the scope when the returned guard drops.
    ///
    /// A reused id is refused rather than replacing the running call: otherwise a later cancel
    /// would stop the wrong call, and two answers would carry one id.
    pub(crate) fn admit(
        &self,
        id: RequestId,
        max_in_flight: usize,
    ) -> Result<InFlightCall, Refusal> {
        let mut map = self.lock();
        if map.contains_key(&id) {
            return Err(Refusal::DuplicateId);
        }
        if map.len() >= max_in_flight {
            return Err(Refusal::Busy);
        }
        let token = CancellationToken::new();
        map.insert(id.clone(), token.clone());
        Ok(InFlightCall {
            scope: self.clone(),
            id,
            token,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        // The map holds plain tokens; a panic while it was locked cannot leave it inconsistent.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// An admitted request; removes itself from the scope when dropped.
#[derive(Debug)]
pub(crate) struct InFlightCall {
    scope: CallScope,
    id: RequestId,
    token: CancellationToken,
}

impl InFlightCall {
    /// The call's cancellation token.
    pub(crate) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Drop for InFlightCall {
    fn drop(&mut self) {
        // Admission refuses a second request with this id while this one is registered, so
        // the entry under our id is ours.
        self.scope.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_reaches_admitted_calls_only() {
        let scope = CallScope::new();
        let id = RequestId::Number(7);
        assert!(!scope.cancel(&id), "unknown id is a no-op");
        let call = scope.admit(id.clone(), 8).unwrap();
        let token = call.token();
        assert_eq!(scope.in_flight(), 1);
        assert!(scope.cancel(&id));
        assert!(token.is_cancelled());
        drop(call);
        assert_eq!(scope.in_flight(), 0);
        assert!(!scope.cancel(&id), "settled id is a no-op");
    }

    #[test]
    fn a_reused_id_is_refused_and_leaves_the_first_call_alone() {
        let scope = CallScope::new();
        let id = RequestId::String("a".to_owned());
        let first = scope.admit(id.clone(), 8).unwrap();
        assert_eq!(
            scope.admit(id.clone(), 8).unwrap_err(),
            Refusal::DuplicateId
        );
        assert_eq!(scope.in_flight(), 1);
        assert!(scope.cancel(&id));
        assert!(first.token().is_cancelled());
        drop(first);
        assert!(scope.admit(id, 8).is_ok(), "a settled id may be reused");
    }

    #[test]
    fn a_full_stream_is_busy_until_a_call_settles() {
        let scope = CallScope::new();
        let one = scope.admit(RequestId::Number(1), 2).unwrap();
        let _two = scope.admit(RequestId::Number(2), 2).unwrap();
        assert_eq!(
            scope.admit(RequestId::Number(3), 2).unwrap_err(),
            Refusal::Busy
        );
        drop(one);
        assert!(scope.admit(RequestId::Number(3), 2).is_ok());
    }
}
