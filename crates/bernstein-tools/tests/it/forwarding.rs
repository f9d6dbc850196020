//! The tools against a remote task server, for what only a remote server shows: the call's W3C
//! trace context forwarded with every create and artifact post, a created subtask's parent as
//! the server reports it, and the spend the server's status document reports per role.

use bernstein_tools::Catalogue;
use serde_json::{Value, json};

use crate::common::{config, payload};
use crate::remote::{closed_port, context, scripted};

/// The payload of `name` called with `arguments` in `ctx`, unwrapped from an alias's
/// `{"result": ...}`.
async fn answer(ctx: &bernstein_tools::ToolContext, name: &str, arguments: Value) -> Value {
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let outcome = catalogue.call(ctx, name, arguments).await;
    let body = payload(&outcome);
    body.get("result").cloned().unwrap_or(body)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trace_context_of_the_call_is_forwarded_by_every_tool_that_creates_or_posts() {
    let dir = tempfile::tempdir().unwrap();
    let mut ctx = context(&closed_port().await, dir.path());
    // A header value no HTTP request can carry: a tool that forwards it is refused before it
    // connects, where one that dropped it would report the closed port instead.
    ctx.meta.traceparent = Some("00-trace\nbroken".to_owned());
    let refused = json!({
        "error": "invalid request: refused before sending to the task server: the traceparent value cannot be sent as an HTTP header (it must be visible ASCII)",
        "hint": "Task server may be restarting",
    });
    for (name, arguments) in [
        (
            "bernstein_create_task",
            json!({"title": "t", "description": "d"}),
        ),
        ("bernstein_run", json!({"goal": "g"})),
        ("bernstein_run", json!({"template": "administrative"})),
        (
            "bernstein_create_subtask",
            json!({"goal": "g", "parent_task_id": "p"}),
        ),
        (
            "bernstein_post_artifact",
            json!({"task_id": "t-1", "key": "k", "artifact_type": "report", "poster": "w",
                   "body": "b"}),
        ),
    ] {
        assert_eq!(
            answer(&ctx, name, arguments.clone()).await,
            refused,
            "{name} {arguments}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_under_a_parent_reports_the_parent_the_server_recorded() {
    // The server files the subtask under another parent than the one asked for, and says so.
    let (url, _) = scripted(|method, path| match (method, path) {
        ("POST", "/tasks/self-create") => (
            200,
            r#"{"id": "t-9", "title": "g", "status": "open", "parent_task_id": "p-filed"}"#
                .to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    for name in ["bernstein_run", "bernstein_create_subtask"] {
        assert_eq!(
            answer(
                &ctx,
                name,
                json!({"goal": "g", "parent_task_id": "p-asked"})
            )
            .await,
            json!({"task_id": "t-9", "title": "g", "status": "open", "run_id": "task-t-9",
                   "poll_after_ms": 5000, "parent_task_id": "p-filed"}),
            "{name}"
        );
    }

    // A row whose parent is null reports the parent the call named.
    let (url, _) = scripted(|method, path| match (method, path) {
        ("POST", "/tasks/self-create") => (
            200,
            r#"{"id": "t-9", "title": "g", "status": "open", "parent_task_id": null}"#.to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let ctx = context(&url, dir.path());
    assert_eq!(
        answer(
            &ctx,
            "bernstein_run",
            json!({"goal": "g", "parent_task_id": "p-asked"})
        )
        .await["parent_task_id"],
        "p-asked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_spend_per_role_is_the_role_and_cost_of_each_row_of_the_status_document() {
    let (url, _) = scripted(|method, path| match (method, path) {
        ("GET", "/status") => (
            200,
            r#"{"total": 3, "open": 1, "claimed": 1, "done": 1, "failed": 0,
                "total_cost_usd": 1.5,
                "per_role": [{"role": "qa", "cost_usd": 1.25, "tasks": 2},
                             {"role": "backend"}, "not a row"]}"#
                .to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    // A row without a cost costs nothing, and an entry that is not a row is left out.
    let spend = json!({
        "total_cost_usd": 1.5,
        "per_role": [{"role": "qa", "cost_usd": 1.25}, {"role": "backend", "cost_usd": 0.0}],
    });
    assert_eq!(answer(&ctx, "bernstein_cost", json!({})).await, spend);
    assert_eq!(
        answer(&ctx, "bernstein_status", json!({})).await,
        json!({
            "live": true,
            "counts": {"total": 3, "open": 1, "claimed": 1, "done": 1, "failed": 0},
            "cost": spend,
        })
    );
}
