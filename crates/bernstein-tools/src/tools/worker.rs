//! The worker loop and the task verbs: claim, create, post a message, post an artifact, cancel,
//! approve, complete.

use bernstein_gate::approval::{
    approval_granted, approval_refusal, completion_done, completion_refusal,
};
use bernstein_gate::cancel::{cancelled, not_cancellable, unknown_task};
use bernstein_protocol::pyjson::{Object, Value};

use super::{Payload, SERVER_HINT, arg_i64, arg_str, generic_error, indent2, trace};
use crate::backend::{CancelAnswer, GateAnswer, Settled};
use crate::context::ToolContext;

/// [`answer`], handing a value over as it is (see [`Payload`]).
fn answer_value(result: Result<Value, crate::Error>) -> Payload {
    match result {
        Ok(value) => Payload::Value(value),
        Err(e) => Payload::Text(generic_error(e, SERVER_HINT)),
    }
}

fn answer(result: Result<Value, crate::Error>) -> String {
    match result {
        Ok(Value::Object(object)) => indent2(object),
        Ok(other) => bernstein_journal::handle::render_indent2(&other),
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

fn copy_present(from: &Object, to: &mut Object, keys: &[&str]) {
    for key in keys {
        if let Some(value) = from.get(key) {
            to.insert(*key, value.clone());
        }
    }
}

/// `bernstein_claim`.
pub(super) async fn claim(ctx: &ToolContext, args: &Object) -> Payload {
    let completed = args
        .get("completed_ids")
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    let mut body = Object::new()
        .with("claimer_id", arg_str(args, "claimer_id").unwrap_or(""))
        .with("completed_ids", completed);
    copy_present(
        args,
        &mut body,
        &[
            "role",
            "project",
            "capability",
            "max_attempts",
            "claimer_card_fingerprint",
        ],
    );
    answer_value(ctx.backend.claim_receipt(&body).await)
}

/// `bernstein_create_task`.
pub(super) async fn create_task(ctx: &ToolContext, args: &Object) -> String {
    let mut body = Object::new()
        .with("title", arg_str(args, "title").unwrap_or(""))
        .with("description", arg_str(args, "description").unwrap_or(""))
        .with("role", arg_str(args, "role").unwrap_or("auto"))
        .with("priority", arg_i64(args, "priority").unwrap_or(2))
        .with("scope", arg_str(args, "scope").unwrap_or("medium"));
    copy_present(args, &mut body, &["run_id"]);
    if let Some(Value::Array(ids)) = args.get("depends_on")
        && !ids.is_empty()
    {
        body.insert("depends_on", Value::Array(ids.clone()));
    }
    copy_present(args, &mut body, &["model", "effort"]);
    match ctx.backend.create_task(&body, &trace(ctx)).await {
        Ok(row) => indent2(row),
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

/// `bernstein_post_message` (and the deprecated `bernstein_update`).
pub(super) async fn post_message(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("");
    let mut body = Object::new()
        .with("sender", arg_str(args, "sender").unwrap_or(""))
        .with("kind", arg_str(args, "kind").unwrap_or("finding"))
        .with("body", arg_str(args, "body").unwrap_or(""));
    copy_present(args, &mut body, &["sender_card_fingerprint"]);
    answer(ctx.backend.post_message(task_id, &body).await)
}

/// The artifact fields sent on to the route, in the reference's order.
const ARTIFACT_FIELDS: [&str; 15] = [
    "key",
    "artifact_type",
    "poster",
    "body",
    "columns",
    "rows",
    "url",
    "link_kind",
    "sarif_result",
    "tool",
    "tool_version",
    "pinned_ruleset_or_feed_digest",
    "invocation_argv_hash",
    "target",
    "task_id",
];

/// `bernstein_post_artifact`.
pub(super) async fn post_artifact(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("");
    let poster = arg_str(args, "poster").unwrap_or("");
    let mut body = Object::new();
    for key in ARTIFACT_FIELDS.iter().filter(|k| **k != "task_id") {
        if let Some(value) = args.get(key) {
            body.insert(*key, value.clone());
        }
    }
    answer(
        ctx.backend
            .post_artifact(task_id, poster, &body, &trace(ctx))
            .await,
    )
}

/// `bernstein_cancel`.
pub(super) async fn cancel(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("");
    let reason = arg_str(args, "reason").unwrap_or("");
    match ctx.backend.cancel_task(task_id, reason).await {
        Ok(CancelAnswer::UnknownTask) => indent2(unknown_task(task_id)),
        Ok(CancelAnswer::NotCancellable { reported_status }) => {
            indent2(not_cancellable(task_id, &reported_status))
        }
        Ok(CancelAnswer::Cancelled {
            row,
            cancelled_descendants,
        }) => {
            ctx.backend
                .record_settled(&ctx.workdir, task_id, Settled::Cancellation)
                .await;
            indent2(cancelled(
                row.get("id").cloned().unwrap_or(Value::Null),
                row.get("status").cloned().unwrap_or(Value::Null),
                Some(cancelled_descendants),
            ))
        }
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

/// `bernstein_approve`.
pub(super) async fn approve(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("");
    let note = arg_str(args, "note").unwrap_or("Approved via MCP");
    match ctx.backend.approve_task(task_id, note).await {
        Ok(GateAnswer::Passed { row, prior_status }) => {
            ctx.backend
                .record_settled(&ctx.workdir, task_id, Settled::Completion)
                .await;
            indent2(approval_granted(
                row.get("id").cloned().unwrap_or(Value::Null),
                row.get("status").cloned().unwrap_or(Value::Null),
                &prior_status,
                row.get("result_summary").cloned().unwrap_or(Value::Null),
            ))
        }
        Ok(GateAnswer::Refused { reported_status }) => {
            indent2(approval_refusal(task_id, &reported_status))
        }
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

/// `bernstein_complete`.
pub(super) async fn complete(ctx: &ToolContext, args: &Object) -> String {
    let task_id = arg_str(args, "task_id").unwrap_or("");
    let summary = arg_str(args, "result_summary").unwrap_or("");
    match ctx.backend.complete_task(task_id, summary).await {
        Ok(GateAnswer::Passed { row, .. }) => {
            ctx.backend
                .record_settled(&ctx.workdir, task_id, Settled::Completion)
                .await;
            indent2(completion_done(
                row.get("id").cloned().unwrap_or(Value::Null),
                row.get("status").cloned().unwrap_or(Value::Null),
                row.get("result_summary").cloned().unwrap_or(Value::Null),
            ))
        }
        Ok(GateAnswer::Refused { reported_status }) => {
            indent2(completion_refusal(task_id, &reported_status))
        }
        Err(e) => generic_error(e, SERVER_HINT),
    }
}
