//! The core read and start surface: `bernstein_run`, `bernstein_status`,
//! `bernstein_run_status`, `bernstein_subscribe`, and the aliases folded into them.

use std::path::PathBuf;
use std::time::Duration;

use bernstein_journal::handle::project_progress;
use bernstein_journal::run_journal::{journal_barrier_message, task_run_id};
use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::remote::SubscribeOutcome;

use super::{
    Payload, SERVER_HINT, arg_bool, arg_i64, arg_str, generic_error, indent2, plain, trace,
    workdir_path,
};
use crate::catalogue::Catalogue;
use crate::context::{ProgressTick, ToolContext};
use crate::error::Error;

/// The advisory delay before the first poll, in milliseconds.
pub(crate) const POLL_AFTER_MS: u64 = 5000;
/// The longest title a run gets from its goal, in code points.
const TITLE_CHARS: usize = 120;

/// The parameters of a run (shared by `bernstein_run` and `bernstein_create_subtask`).
struct RunRequest<'a> {
    goal: &'a str,
    role: &'a str,
    priority: i64,
    scope: &'a str,
    complexity: &'a str,
    estimated_minutes: i64,
    parent_task_id: Option<&'a str>,
}

async fn start_run(ctx: &ToolContext, request: &RunRequest<'_>) -> String {
    let title: String = request.goal.chars().take(TITLE_CHARS).collect();
    let mut body = Object::new()
        .with("title", title)
        .with("description", request.goal)
        .with("role", request.role)
        .with("priority", request.priority)
        .with("scope", request.scope)
        .with("complexity", request.complexity)
        .with("estimated_minutes", request.estimated_minutes);
    let trace = trace(ctx);
    let created = match request.parent_task_id {
        Some(parent) => {
            body.insert("parent_task_id", parent);
            ctx.backend.create_subtask(&body, &trace).await
        }
        None => ctx.backend.create_task(&body, &trace).await,
    };
    let row = match created {
        Ok(row) => row,
        Err(e) => return generic_error(e, SERVER_HINT),
    };
    let Some(task_id) = row.get("id").and_then(Value::as_str).map(str::to_owned) else {
        return generic_error("the created task row has no id", SERVER_HINT);
    };
    let mut answer = Object::new()
        .with("task_id", task_id.as_str())
        .with("title", row.get("title").cloned().unwrap_or(Value::Null))
        .with("status", row.get("status").cloned().unwrap_or(Value::Null))
        .with("run_id", task_run_id(&task_id))
        .with("poll_after_ms", POLL_AFTER_MS);
    if let Some(parent) = request.parent_task_id {
        let reported = row
            .get("parent_task_id")
            .filter(|v| **v != Value::Null)
            .cloned()
            .unwrap_or_else(|| Value::from(parent));
        answer.insert("parent_task_id", reported);
    }
    indent2(answer)
}

/// `bernstein_run`.
pub(super) async fn run(ctx: &ToolContext, args: &Object) -> String {
    let template = arg_str(args, "template").unwrap_or("orchestration");
    let goal = arg_str(args, "goal").unwrap_or("");
    let parent = arg_str(args, "parent_task_id");
    if template == "administrative" {
        let goal = if goal.is_empty() {
            "Administrative run"
        } else {
            goal
        };
        if parent.is_some() {
            return generic_error(
                "Administrative runs cannot have parent_task_id",
                SERVER_HINT,
            );
        }
        return match ctx
            .backend
            .create_administrative_run(goal, &trace(ctx))
            .await
        {
            Ok(Value::Object(run)) => indent2(run),
            Ok(_) => generic_error(
                Error::UnexpectedAnswer("the administrative run is not a JSON object".to_owned()),
                SERVER_HINT,
            ),
            Err(e) => generic_error(e, SERVER_HINT),
        };
    }
    start_run(
        ctx,
        &RunRequest {
            goal,
            role: arg_str(args, "role").unwrap_or("backend"),
            priority: arg_i64(args, "priority").unwrap_or(2),
            scope: arg_str(args, "scope").unwrap_or("medium"),
            complexity: arg_str(args, "complexity").unwrap_or("medium"),
            estimated_minutes: arg_i64(args, "estimated_minutes").unwrap_or(30),
            parent_task_id: parent,
        },
    )
    .await
}

/// `bernstein_create_subtask` (deprecated): a run under `parent_task_id`, role `auto` by
/// default.
pub(super) async fn create_subtask_alias(ctx: &ToolContext, args: &Object) -> String {
    start_run(
        ctx,
        &RunRequest {
            goal: arg_str(args, "goal").unwrap_or(""),
            role: arg_str(args, "role").unwrap_or("auto"),
            priority: arg_i64(args, "priority").unwrap_or(2),
            scope: arg_str(args, "scope").unwrap_or("medium"),
            complexity: arg_str(args, "complexity").unwrap_or("medium"),
            estimated_minutes: arg_i64(args, "estimated_minutes").unwrap_or(30),
            parent_task_id: Some(arg_str(args, "parent_task_id").unwrap_or("")),
        },
    )
    .await
}

fn field_or(document: &Object, key: &str, default: Value) -> Value {
    document.get(key).cloned().unwrap_or(default)
}

fn per_role_costs(document: &Object) -> Vec<Value> {
    document
        .get("per_role")
        .and_then(Value::as_array)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_object)
        .map(|row| {
            Value::Object(
                Object::new()
                    .with("role", row.get("role").cloned().unwrap_or(Value::Null))
                    .with("cost_usd", field_or(row, "cost_usd", Value::Float(0.0))),
            )
        })
        .collect()
}

/// The compact task fields `bernstein_status` lists without `detail`.
const COMPACT_TASK_FIELDS: [&str; 4] = ["id", "title", "role", "status"];

/// The most tasks one `bernstein_status` answer lists (and its default `limit`), so a status
/// filter on a large project reads and renders a bounded page; `next_cursor` continues it.
pub(crate) const STATUS_PAGE_MAX: usize = 500;

/// `bernstein_status`.
pub(super) async fn status(ctx: &ToolContext, args: &Object) -> String {
    let filter = arg_str(args, "status").filter(|s| !s.is_empty());
    let detail = arg_bool(args, "detail").unwrap_or(false);
    let cursor = arg_str(args, "cursor").filter(|s| !s.is_empty());
    // The schema bounds `limit` to 1..=STATUS_PAGE_MAX; clamped here too, so no path lists more.
    let limit = arg_i64(args, "limit")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(STATUS_PAGE_MAX)
        .clamp(1, STATUS_PAGE_MAX);
    let outage = |e: Error| {
        let message = e.to_string();
        tracing::warn!("MCP tool error: {message}");
        indent2(
            Object::new()
                .with("live", true)
                .with("error", message)
                .with("hint", SERVER_HINT),
        )
    };
    let document = match ctx.backend.status_document().await {
        Ok(document) => document,
        Err(e) => return outage(e),
    };
    let tasks = match filter {
        Some(status) => match ctx.backend.list_tasks_page(status, cursor, limit).await {
            Ok(page) => Some(page),
            Err(e) => return outage(e),
        },
        None => None,
    };
    let zero = || Value::from(0);
    let mut body = Object::new()
        .with("live", true)
        .with(
            "counts",
            Object::new()
                .with("total", field_or(&document, "total", zero()))
                .with("open", field_or(&document, "open", zero()))
                .with("claimed", field_or(&document, "claimed", zero()))
                .with("done", field_or(&document, "done", zero()))
                .with("failed", field_or(&document, "failed", zero())),
        )
        .with(
            "cost",
            Object::new()
                .with(
                    "total_cost_usd",
                    field_or(&document, "total_cost_usd", Value::Float(0.0)),
                )
                .with("per_role", per_role_costs(&document)),
        );
    if detail {
        body.insert(
            "per_role",
            field_or(&document, "per_role", Value::Array(Vec::new())),
        );
    }
    if let (Some(status), Some((rows, next_cursor))) = (filter, tasks) {
        body.insert("status_filter", status);
        let listed: Vec<Value> = if detail {
            rows
        } else {
            rows.iter()
                .map(|row| {
                    let mut compact = Object::new();
                    for key in COMPACT_TASK_FIELDS {
                        let value = row
                            .as_object()
                            .and_then(|o| o.get(key))
                            .cloned()
                            .unwrap_or(Value::Null);
                        compact.insert(key, value);
                    }
                    Value::Object(compact)
                })
                .collect()
        };
        body.insert("tasks", listed);
        // Only a cut list carries it, so an answer that fits one page reads as before.
        if let Some(next) = next_cursor {
            body.insert("next_cursor", next);
        }
    }
    indent2(body)
}

/// `bernstein_tasks` (deprecated): the raw task list.
pub(super) async fn tasks_alias(ctx: &ToolContext, args: &Object) -> String {
    let filter = arg_str(args, "status").filter(|s| !s.is_empty());
    match ctx.backend.list_tasks(filter).await {
        Ok(rows) => bernstein_journal::handle::render_indent2(&Value::Array(rows)),
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

/// `bernstein_cost` (deprecated): the spend part of the status document.
pub(super) async fn cost_alias(ctx: &ToolContext) -> String {
    match ctx.backend.status_document().await {
        Ok(document) => indent2(
            Object::new()
                .with(
                    "total_cost_usd",
                    field_or(&document, "total_cost_usd", Value::Float(0.0)),
                )
                .with("per_role", per_role_costs(&document)),
        ),
        Err(e) => generic_error(e, SERVER_HINT),
    }
}

/// `bernstein_run_status` (and, without progress ticks, `bernstein_task_handle`). A handle is
/// answered as its wire object ([`Payload::Value`]): a poll answered again and again is then
/// not rendered with indent 2 only to be parsed back for the `_meter` envelope.
/// `confined_workdir` is the workdir as confinement resolved it, when confinement is on.
pub(super) async fn run_status(
    cat: &Catalogue,
    ctx: &ToolContext,
    args: &Object,
    ticks: bool,
    confined_workdir: Option<PathBuf>,
) -> Payload {
    let run_id = arg_str(args, "run_id").unwrap_or("").to_owned();
    if run_id.starts_with("admin-") {
        return match ctx.backend.get_administrative_run(&run_id).await {
            Ok(Value::Object(run)) => indent2(run),
            Ok(_) => generic_error(
                Error::UnexpectedAnswer("the administrative run is not a JSON object".to_owned()),
                SERVER_HINT,
            ),
            Err(e) => generic_error(e, SERVER_HINT),
        }
        .into();
    }
    // Confinement already resolved the workdir the same way; otherwise one `openat2` when the
    // workdir holds no symlink, a full resolution otherwise.
    let base = confined_workdir.unwrap_or_else(|| {
        let base = workdir_path(ctx, arg_str(args, "workdir").unwrap_or("."));
        bernstein_journal::run_journal::canonicalize_cheaply(&base).unwrap_or(base)
    });
    let (handle, resolved) = match ctx.backend.poll_run(&base, &run_id).await {
        Ok((handle, resolved)) => (handle, resolved.run_id),
        Err(e) => match journal_barrier_message(&run_id, &e) {
            Some(message) => {
                return generic_error(message, "run_id must be a plain run identifier").into();
            }
            None => return generic_error(e, "Run journal not found").into(),
        },
    };
    if ticks {
        maybe_tick(cat, ctx, &base, &resolved).await;
    }
    Payload::Value(Value::Object(handle.to_wire_object()))
}

/// Sends a progress tick for the resolved run when the call carried a progress token and the
/// journal fold strictly advanced past the last tick this catalogue sent for the run. The fold
/// reads the resolved run's own journal. Every failure is swallowed: a tick is advisory.
async fn maybe_tick(cat: &Catalogue, ctx: &ToolContext, base: &std::path::Path, resolved: &str) {
    let (Some(token), Some(sink)) = (&ctx.meta.progress_token, &ctx.progress) else {
        return;
    };
    let folded = tokio::task::spawn_blocking({
        let base = base.to_path_buf();
        let resolved = resolved.to_owned();
        move || project_progress(&base, &resolved, &resolved)
    })
    .await;
    let vector = match folded {
        Ok(Ok(vector)) => vector,
        Ok(Err(e)) => {
            tracing::debug!("progress fold failed for {resolved}: {e}");
            return;
        }
        Err(e) => {
            tracing::debug!("progress fold failed for {resolved}: {e}");
            return;
        }
    };
    let mut last = cat
        .ticks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !vector.should_emit_after(last.get(resolved)) {
        return;
    }
    #[allow(clippy::cast_precision_loss)]
    let tick = ProgressTick {
        progress_token: token.clone(),
        progress: vector.earned_steps() as f64,
        total: vector.total().map(|t| t as f64),
        message: vector.message(),
    };
    sink(tick);
    last.insert(resolved.to_owned(), vector);
}

/// `bernstein_subscribe`.
pub(super) async fn subscribe(ctx: &ToolContext, args: &Object) -> String {
    let role = arg_str(args, "role").unwrap_or("");
    let seconds = args
        .get("timeout_seconds")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(30.0);
    // Permissive validation lets a value beyond the schema's maximum through; a wait no
    // `Duration` can hold is a wait without end, which the declared timeout then bounds.
    let wait = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
    match ctx.backend.subscribe(role, wait).await {
        Ok(SubscribeOutcome::Notification(notification)) => plain(
            Object::new()
                .with("notifications", vec![notification])
                .with("timed_out", false),
        ),
        Ok(SubscribeOutcome::TimedOut) => plain(
            Object::new()
                .with("notifications", Value::Array(Vec::new()))
                .with("timed_out", true),
        ),
        Ok(SubscribeOutcome::StreamEnded) => {
            plain(Object::new().with("error", "Task event stream ended before a notification"))
        }
        Err(e) => generic_error(e, SERVER_HINT),
    }
}
