//! What a host embedding the dispatcher reads back from it: each accessor agrees with what the
//! protocol serves, a parsed message is answered like its text, and a host's handler that
//! panics or never answers is answered like any other failure and leaves its stream.

use std::sync::Arc;
use std::time::Duration;

use bernstein_mcp_core::extension::{BoxFuture, Extension, ExtensionAnswer, ExtensionCall};
use bernstein_mcp_core::{CAPABILITY_URI, Limits, NotificationSink};
use serde_json::{Value, json};

use crate::support::Project;

#[tokio::test]
async fn the_accessors_agree_with_what_the_protocol_serves() {
    let limits = Limits {
        max_params_bytes: 1000,
        max_in_flight: 7,
        ..Limits::default()
    };
    let project = Project::with(|b| b.limits(limits));
    let dispatcher = &project.dispatcher;
    assert_eq!(dispatcher.limits(), &limits);
    assert_eq!(dispatcher.workdir(), project.dir.path());
    let initialized = project
        .result("initialize", json!({"protocolVersion": "2025-11-25"}))
        .await;
    assert_eq!(initialized["instructions"], dispatcher.instructions());
    let listed = project.result("tools/list", json!({})).await;
    let mut served: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    served.sort_unstable();
    let mut named: Vec<&str> = dispatcher.tool_names().collect();
    named.sort_unstable();
    assert_eq!(named, served);
    let card = project
        .result("resources/read", json!({"uri": CAPABILITY_URI}))
        .await;
    assert_eq!(card["contents"][0]["text"], dispatcher.capability_card());
}

#[tokio::test]
async fn a_parsed_message_is_answered_like_its_text() {
    let project = Project::new();
    let notes: Arc<dyn NotificationSink> = project.notes.clone();
    let handle = |message| {
        project
            .dispatcher
            .handle(message, &project.scope, Arc::clone(&notes))
    };
    assert_eq!(
        handle(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"})).await,
        Some(json!({"jsonrpc": "2.0", "id": 3, "result": {}}))
    );
    assert_eq!(
        handle(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await,
        None
    );
}

/// An extension whose one tool panics.
#[derive(Debug)]
struct Panics;

impl Extension for Panics {
    fn tools(&self) -> Vec<Value> {
        vec![json!({"name": "panics", "inputSchema": {"type": "object"}})]
    }

    fn call_tool<'a>(
        &'a self,
        _name: &'a str,
        _call: ExtensionCall,
    ) -> BoxFuture<'a, ExtensionAnswer> {
        Box::pin(async { panic!("the handler fails") })
    }
}

#[tokio::test]
async fn a_handler_that_panics_is_answered_with_its_id_and_leaves_its_stream() {
    let project = Project::with(|b| b.extension(Arc::new(Panics)));
    let reply = project
        .send(json!({"jsonrpc": "2.0", "id": "p", "method": "tools/call", "params": {"name": "panics"}}))
        .await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": "p", "error": {"code": -32603,
            "message": "Internal error: the request handler failed unexpectedly"}})
    );
    assert_eq!(project.scope.in_flight(), 0);
    // The stream serves on.
    assert_eq!(project.result("ping", json!({})).await, json!({}));
}

/// An extension whose one tool never answers.
#[derive(Debug)]
struct Never;

impl Extension for Never {
    fn tools(&self) -> Vec<Value> {
        vec![json!({"name": "never", "inputSchema": {"type": "object"}})]
    }

    fn call_tool<'a>(
        &'a self,
        _name: &'a str,
        _call: ExtensionCall,
    ) -> BoxFuture<'a, ExtensionAnswer> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn a_call_past_its_hard_timeout_is_answered_and_its_work_stopped() {
    let project = Project::with(|b| {
        b.extension(Arc::new(Never)).limits(Limits {
            call_timeout: Duration::from_millis(50),
            max_in_flight: 1,
            ..Limits::default()
        })
    });
    let reply = project
        .send(
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "never"}}),
        )
        .await;
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32603,
            "message": "request timed out after 0.05 s", "data": {"timeoutSeconds": 0.05}}})
    );
    // The stopped work gives back its stream entry and the process's only slot once the
    // runtime has dropped it, which takes it a turn or two; a call still running never does.
    for _ in 0..100 {
        if project.scope.in_flight() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(project.scope.in_flight(), 0);
    assert_eq!(project.result("ping", json!({})).await, json!({}));
}
