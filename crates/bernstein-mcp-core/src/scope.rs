//! The calls in flight on one transport stream, so that `notifications/cancelled` can reach them,
//! and the sink notifications go out through.
//!
//! Request ids are only unique within one stream (two stdio clients may both send id 1), so
//! each stream gets its own [`CallScope`]. The scope holds nothing a response depends on: it
//! only lets a later cancel notification find the cancellation token of a running call. A call
//! leaves the scope when it settles, so cancelling an unknown or settled id finds nothing and
//! does nothing.

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

/// The cancellable calls of one transport stream.
#[derive(Debug, Clone, Default)]
pub struct CallScope {
    in_flight: Arc<Mutex<InFlightMap>>,
}

/// Request id to (registration serial, token). The serial tells a call's own entry apart from a
/// later request that reused its id.
#[derive(Debug, Default)]
struct InFlightMap {
    next_serial: u64,
    calls: HashMap<RequestId, (u64, CancellationToken)>,
}

impl CallScope {
    /// An empty scope.
    pub fn new() -> CallScope {
        CallScope::default()
    }

    /// Cancels the in-flight call with `id`. Returns whether one was found; an unknown or
    /// settled id is a no-op.
    pub fn cancel(&self, id: &RequestId) -> bool {
        match self.lock().calls.get(id) {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every in-flight call (a transport closing its input). Returns how many.
    pub fn cancel_all(&self) -> usize {
        let map = self.lock();
        for (_, token) in map.calls.values() {
            token.cancel();
        }
        map.calls.len()
    }

    /// How many calls are in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().calls.len()
    }

    /// Registers a call; it leaves the scope when the returned guard drops.
    pub(crate) fn register(&self, id: RequestId) -> InFlightCall {
        let token = CancellationToken::new();
        let mut map = self.lock();
        let serial = map.next_serial;
        map.next_serial += 1;
        // A client that reuses the id of a running call replaces the entry: the later request
        // is the one a later cancel most plausibly names.
        map.calls.insert(id.clone(), (serial, token.clone()));
        InFlightCall {
            scope: self.clone(),
            id,
            serial,
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, InFlightMap> {
        // The map holds plain tokens; a panic while it was locked cannot leave it inconsistent.
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A registered call; removes itself from the scope when dropped.
#[derive(Debug)]
pub(crate) struct InFlightCall {
    scope: CallScope,
    id: RequestId,
    serial: u64,
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
        let mut map = self.scope.lock();
        // Only remove our own entry, not a later request's that reused the id.
        if map
            .calls
            .get(&self.id)
            .is_some_and(|(serial, _)| *serial == self.serial)
        {
            map.calls.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_reaches_registered_calls_only() {
        let scope = CallScope::new();
        let id = RequestId::Number(7);
        assert!(!scope.cancel(&id), "unknown id is a no-op");
        let call = scope.register(id.clone());
        let token = call.token();
        assert_eq!(scope.in_flight(), 1);
        assert!(scope.cancel(&id));
        assert!(token.is_cancelled());
        let reused = scope.register(id.clone());
        drop(call);
        assert_eq!(scope.in_flight(), 1, "the reusing request keeps its entry");
        drop(reused);
        assert_eq!(scope.in_flight(), 0);
        assert!(!scope.cancel(&id), "settled id is a no-op");
    }
}
