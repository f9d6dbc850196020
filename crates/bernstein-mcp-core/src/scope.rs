//! The calls in flight on one transport stream, so that `notifications/cancelled` can reach them,
//! and the sink notifications go out through.
//!
//! Request ids are only unique within one stream (two stdio clients may both send id 1), so
//! each stream gets its own [`CallScope`]. The scope holds nothing a response depends on: it
//! lets a later cancel notification find the cancellation token of a running call, refuses a
//! request whose id is already in flight on the stream, and counts the stream's requests
//! against its cap. A request leaves the scope when it settles, so cancelling an unknown or
//! settled id finds nothing and does nothing.
//!
//! A scope also carries the stream's notification settings: the log level a legacy client set
//! with `logging/setLevel` and the resources it subscribed to. They decide which notifications
//! the stream receives, never what a response says.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value as JsonValue;
use tokio_util::sync::CancellationToken;

use crate::jsonrpc::RequestId;
use crate::logging::LogLevel;

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
    settings: Arc<Mutex<StreamSettings>>,
}

/// What a stream asked to be notified of.
#[derive(Debug, Default)]
struct StreamSettings {
    /// The level set by `logging/setLevel`, if any.
    log_level: Option<LogLevel>,
    /// Subscribed resource URIs, each with the content last seen (`None` when it could not be
    /// read), so a change can be told from a re-read.
    subscriptions: BTreeMap<String, Option<String>>,
}

/// A subscription beyond the stream's cap ([`CallScope::subscribe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManySubscriptions;

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

    /// The log level the stream's client set with `logging/setLevel`, if it set one.
    pub fn log_level(&self) -> Option<LogLevel> {
        self.settings().log_level
    }

    /// Sets the stream's log level (`logging/setLevel`).
    pub fn set_log_level(&self, level: LogLevel) {
        self.settings().log_level = Some(level);
    }

    /// The URIs the stream is subscribed to, in order.
    pub fn subscriptions(&self) -> Vec<String> {
        self.settings().subscriptions.keys().cloned().collect()
    }

    /// Subscribes to `uri`, remembering `content` as last seen. Subscribing again refreshes the
    /// content; a new URI beyond `max` is refused.
    pub(crate) fn subscribe(
        &self,
        uri: &str,
        content: Option<String>,
        max: usize,
    ) -> Result<(), TooManySubscriptions> {
        let mut settings = self.settings();
        if !settings.subscriptions.contains_key(uri) && settings.subscriptions.len() >= max {
            return Err(TooManySubscriptions);
        }
        settings.subscriptions.insert(uri.to_owned(), content);
        Ok(())
    }

    /// Ends a subscription; `false` when there was none (a no-op).
    pub(crate) fn unsubscribe(&self, uri: &str) -> bool {
        self.settings().subscriptions.remove(uri).is_some()
    }

    /// Records `content` as the latest of a subscribed `uri`; `true` when it differs from what
    /// was seen before (the client is owed `notifications/resources/updated`). `false` for a URI
    /// the stream is not (or no longer) subscribed to.
    pub(crate) fn observe(&self, uri: &str, content: Option<String>) -> bool {
        let mut settings = self.settings();
        match settings.subscriptions.get_mut(uri) {
            Some(seen) if *seen != content => {
                *seen = content;
                true
            }
            _ => false,
        }
    }

    fn settings(&self) -> std::sync::MutexGuard<'_, StreamSettings> {
        // Plain values; a panic while locked cannot leave them inconsistent.
        self.settings.lock().unwrap_or_else(|p| p.into_inner())
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
    /// The stream the call was admitted on.
    pub(crate) fn scope(&self) -> &CallScope {
        &self.scope
    }

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

    /// A call sees the stream it was admitted on: its calls in flight and its settings.
    #[test]
    fn an_admitted_call_carries_its_stream() {
        let scope = CallScope::new();
        let call = scope.admit(RequestId::Number(1), 8).unwrap();
        assert_eq!(call.scope().in_flight(), 1);
        call.scope().set_log_level(LogLevel::Debug);
        assert_eq!(scope.log_level(), Some(LogLevel::Debug));
    }

    #[test]
    fn cancel_all_cancels_every_call_in_flight_and_counts_them() {
        let scope = CallScope::new();
        assert_eq!(scope.cancel_all(), 0, "nothing in flight");
        let calls: Vec<InFlightCall> = [
            RequestId::Number(1),
            RequestId::Number(2),
            RequestId::String("three".to_owned()),
        ]
        .into_iter()
        .map(|id| scope.admit(id, 8).unwrap())
        .collect();
        assert_eq!(scope.cancel_all(), 3);
        assert!(calls.iter().all(|call| call.token().is_cancelled()));
        drop(calls);
        assert_eq!(scope.cancel_all(), 0, "settled calls leave the scope");
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
    fn stream_settings_hold_the_level_and_the_subscriptions() {
        let scope = CallScope::new();
        assert_eq!(scope.log_level(), None);
        scope.set_log_level(LogLevel::Notice);
        assert_eq!(scope.clone().log_level(), Some(LogLevel::Notice));
        scope.subscribe("a://1", Some("x".to_owned()), 2).unwrap();
        scope.subscribe("a://2", None, 2).unwrap();
        assert_eq!(scope.subscribe("a://3", None, 2), Err(TooManySubscriptions));
        scope.subscribe("a://1", Some("y".to_owned()), 2).unwrap();
        assert!(!scope.observe("a://1", Some("y".to_owned())), "unchanged");
        assert!(scope.observe("a://1", Some("z".to_owned())), "changed");
        assert!(!scope.observe("a://1", Some("z".to_owned())), "seen now");
        assert!(
            !scope.observe("a://9", Some("z".to_owned())),
            "not subscribed"
        );
        assert_eq!(scope.subscriptions(), ["a://1", "a://2"]);
        assert!(scope.unsubscribe("a://2"));
        assert!(
            !scope.unsubscribe("a://2"),
            "a second unsubscribe is a no-op"
        );
        assert!(!scope.observe("a://2", Some("new".to_owned())));
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
