//! The calls in flight on this instance's `/mcp` endpoint, by JSON-RPC id, so that a
//! `notifications/cancelled` POSTed in a later request reaches the call it names.
//!
//! Each POST gets its own [`CallScope`] (independent clients reuse ids freely, so one shared
//! scope would refuse the second client's id 1 as a duplicate); this registry maps an id to the
//! scopes holding a call with it. A cancel names only an id, so it reaches every call with that
//! id on this instance, which are calls of clients holding the same credential. Nothing an
//! answer depends on is stored: a call leaves the registry when it settles, and an unknown or
//! settled id is a no-op.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bernstein_mcp_core::jsonrpc::RequestId;
use bernstein_mcp_core::{CallScope, NotificationSink};
use serde_json::Value as JsonValue;
use tokio::sync::mpsc;

/// The registry (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct InFlight {
    calls: Arc<Mutex<HashMap<RequestId, HashMap<u64, CallScope>>>>,
    next: Arc<AtomicU64>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, HashMap<u64, CallScope>>> {
        // The map holds plain handles; a panic while locked cannot leave it inconsistent.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the call `id` running in `scope` until the returned guard drops.
    pub(crate) fn register(&self, id: RequestId, scope: CallScope) -> Registration {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock()
            .entry(id.clone())
            .or_default()
            .insert(key, scope);
        Registration {
            registry: self.clone(),
            id,
            key,
        }
    }

    /// Cancels every call in flight (shutdown past its grace); returns how many.
    pub(crate) fn cancel_all(&self) -> usize {
        let calls = self.lock();
        calls
            .values()
            .flat_map(HashMap::values)
            .map(CallScope::cancel_all)
            .sum()
    }

    /// Cancels the calls with `id`; returns how many were found.
    pub(crate) fn cancel(&self, id: &RequestId) -> usize {
        let calls = self.lock();
        calls.get(id).map_or(0, |scopes| {
            scopes.values().filter(|scope| scope.cancel(id)).count()
        })
    }
}

/// Removes a call from the registry when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    registry: InFlight,
    id: RequestId,
    key: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut calls = self.registry.lock();
        if let Some(scopes) = calls.get_mut(&self.id) {
            scopes.remove(&self.key);
            if scopes.is_empty() {
                calls.remove(&self.id);
            }
        }
    }
}

/// Cancels a call when dropped while armed: the client stopped waiting (its connection closed or
/// it dropped the response stream), which on streamable HTTP is a cancel.
pub(crate) struct CancelOnDrop {
    pub(crate) scope: CallScope,
    pub(crate) id: RequestId,
    pub(crate) armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.armed && self.scope.cancel(&self.id) {
            tracing::debug!(request_id = %self.id, "the client closed its stream; call cancelled");
        }
    }
}

/// What a running call reports before its answer.
#[derive(Debug)]
pub(crate) enum Event {
    /// The call's id (`_meter.call_id`), known once it is anchored.
    CallId(String),
    /// A notification (progress) for the client.
    Notification(JsonValue),
}

/// A sink that forwards the call id and notifications into a bounded channel. A notification
/// that finds the channel full is dropped: progress is advisory.
pub(crate) struct ChannelSink {
    pub(crate) events: mpsc::Sender<Event>,
}

impl NotificationSink for ChannelSink {
    fn send(&self, notification: JsonValue) {
        let _ = self.events.try_send(Event::Notification(notification));
    }

    fn call_id(&self, call_id: &str) {
        let _ = self.events.try_send(Event::CallId(call_id.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_settled_ids_cancel_nothing() {
        let registry = InFlight::default();
        let id = RequestId::Number(2);
        assert_eq!(registry.cancel(&id), 0);
        let registration = registry.register(id.clone(), CallScope::new());
        // Registered, but no call admitted in the scope yet: nothing to cancel.
        assert_eq!(registry.cancel(&id), 0);
        drop(registration);
        assert!(registry.lock().is_empty(), "a settled call leaves no trace");
    }

    /// Each POST admits its request in a scope of its own, so two clients may both have a call
    /// with id 1 in flight. A cancel naming an id reaches the call of each, and cancelling
    /// everything (shutdown past its grace) reaches every call of every client; both count
    /// the calls they reached, which is what the shutdown's log line reports.
    #[tokio::test]
    async fn cancels_reach_the_calls_of_every_scope_and_count_them() {
        let dir = tempfile::tempdir().unwrap();
        let dispatcher = bernstein_mcp_core::Dispatcher::builder(dir.path())
            .audit_key(bernstein_journal::key::AuditKey::from_master_bytes(
                b"0123456789abcdef".repeat(4),
            ))
            .build()
            .unwrap();
        let registry = InFlight::default();
        // Each request stays admitted while its answer is pending, and registered while its
        // registration is held: both are kept until the end of the test.
        let running: Vec<_> = [1, 1, 2]
            .into_iter()
            .map(|id| {
                let scope = CallScope::new();
                let request = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
                let pending = dispatcher.accept(request, &scope);
                (pending, registry.register(RequestId::Number(id), scope))
            })
            .collect();
        let check = |cancelled: usize, expect: usize, what: &str| {
            assert_eq!(cancelled, expect, "{what}");
        };
        check(
            registry.cancel(&RequestId::Number(1)),
            2,
            "both calls with id 1",
        );
        check(
            registry.cancel(&RequestId::Number(3)),
            0,
            "an id nobody sent",
        );
        check(registry.cancel_all(), 3, "every call of every scope");
        drop(running);
        check(registry.cancel_all(), 0, "settled calls leave the registry");
    }
}
