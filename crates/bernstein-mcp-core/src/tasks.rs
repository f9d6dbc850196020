//! The Tasks extension: native task rows for task-augmented `bernstein_run` calls.
//!
//! A task row is not server state. It is projected on every request from two sources, so any
//! server instance answers the same:
//!
//! * the run journal of the task (`task_run_id(task_id)`): its status fold (the run handle's
//!   projection) is the task's status;
//! * the task store (embedded or remote): timestamps, the result summary, and termination. When
//!   the store has already settled a task (done, failed, cancelled) but the journal lacks the
//!   matching event, the poll journals and seals it ([`bernstein_tools::Backend::poll_run`], the
//!   same poll `bernstein_run_status` serves, so both report one status); should that write
//!   fail, the store's terminal state still wins, so `tasks/cancel` is visible at once.
//!
//! The task id is the Bernstein task id `bernstein_run` returned (the id its run journal is
//! derived from), without the reference's `:<journal head>` suffix: a task id that changed
//! while the run progressed could not be polled reliably.
//!
//! Two wire forms are served: the 2025-11-25 experimental form (`{"task": {...}}` with `ttl`
//! and `pollInterval`, plus `tasks/result` and paginated `tasks/list`) for peers on the
//! `initialize` lifecycle, and the 2026-07-28 `io.modelcontextprotocol/tasks` form (flat
//! `resultType: "task"`, `ttlMs`, `pollIntervalMs`, `tasks/get` carrying the result) for
//! stateless peers that declare the extension. Every row states a finite TTL of 24 hours: a
//! null TTL would be dropped by hosts, and nothing evicts a run anyway.

use std::path::Path;

use bernstein_journal::audit::Timestamp;
use bernstein_journal::handle::{RunHandle, TaskStatus as RunStatus};
use bernstein_protocol::pyjson::{Object, Value as PyValue};
use bernstein_tools::{Backend, Catalogue};
use rmcp::model::{Task, TaskStatus};
use serde_json::{Map, Value as JsonValue, json};

use crate::jsonrpc::RpcError;

/// Every task row's TTL: 24 hours.
pub const TASK_TTL_MS: u64 = 86_400_000;
/// The advised delay between polls of a task row.
pub const TASK_POLL_INTERVAL_MS: u64 = 5_000;
/// Rows per `tasks/list` page.
pub const TASK_LIST_PAGE: usize = 100;

/// A task row projected from the journal and the store.
#[derive(Debug, Clone)]
pub(crate) struct TaskView {
    /// The row, 2026-07-28 model.
    pub(crate) task: Task,
    /// The run handle the status came from.
    pub(crate) handle: RunHandle,
    /// The store's result summary, when it has a non-empty one.
    pub(crate) summary: Option<String>,
    /// The task's title in the store.
    pub(crate) title: String,
    /// The task's status in the store (`open`, `done`, ...).
    pub(crate) store_status: String,
}

impl TaskView {
    /// The 2025-11-25 row: `taskId, status, statusMessage, createdAt, lastUpdatedAt, ttl,
    /// pollInterval`.
    pub(crate) fn legacy_row(&self) -> JsonValue {
        let mut row = Map::new();
        row.insert("taskId".to_owned(), json!(self.task.task_id));
        row.insert("status".to_owned(), json!(status_name(self.task.status)));
        if let Some(message) = &self.task.status_message {
            row.insert("statusMessage".to_owned(), json!(message));
        }
        row.insert("createdAt".to_owned(), json!(self.task.created_at));
        row.insert("lastUpdatedAt".to_owned(), json!(self.task.last_updated_at));
        row.insert("ttl".to_owned(), json!(TASK_TTL_MS));
        row.insert("pollInterval".to_owned(), json!(TASK_POLL_INTERVAL_MS));
        JsonValue::Object(row)
    }

    /// The `CallToolResult` the task settled with (`tasks/result`; `result` of a completed
    /// 2026-07-28 `tasks/get`): the summary as text, and as structured content the run payload
    /// in the shape `bernstein_run`'s `outputSchema` declares (see
    /// [`Catalogue::settled_run_result`]); `call_id` is the asking request's span id.
    pub(crate) fn tool_result(&self, catalogue: &Catalogue, call_id: &str) -> JsonValue {
        let status = self.task.status;
        let (text, is_error) = match status {
            TaskStatus::Completed => (
                self.summary
                    .clone()
                    .unwrap_or_else(|| "Task completed".to_owned()),
                false,
            ),
            TaskStatus::Failed => (
                self.summary
                    .clone()
                    .unwrap_or_else(|| "Task failed".to_owned()),
                true,
            ),
            TaskStatus::Cancelled => (
                self.summary
                    .clone()
                    .unwrap_or_else(|| "Task was cancelled".to_owned()),
                false,
            ),
            _ => (
                format!("Result not available; task still {}", status_name(status)),
                true,
            ),
        };
        json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": catalogue.settled_run_result(self.run_payload(), call_id),
            "isError": is_error,
        })
    }
}

impl TaskView {
    /// `bernstein_run`'s payload for this task as it stands now.
    fn run_payload(&self) -> Object {
        Object::new()
            .with("task_id", self.task.task_id.as_str())
            .with("title", self.title.as_str())
            .with("status", self.store_status.as_str())
            .with("run_id", self.handle.run_id.as_str())
            .with("poll_after_ms", TASK_POLL_INTERVAL_MS)
    }
}

/// The wire name of a task status.
pub(crate) fn status_name(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        _ => "working",
    }
}

fn from_run_status(status: RunStatus) -> TaskStatus {
    match status {
        RunStatus::Working => TaskStatus::Working,
        RunStatus::InputRequired => TaskStatus::InputRequired,
        RunStatus::Completed => TaskStatus::Completed,
        RunStatus::Failed => TaskStatus::Failed,
        RunStatus::Cancelled => TaskStatus::Cancelled,
    }
}

/// The terminal task status a store status settles to, if it is terminal.
fn store_terminal(status: &str) -> Option<TaskStatus> {
    match status {
        "done" | "closed" => Some(TaskStatus::Completed),
        "failed" | "abandoned" | "refused" => Some(TaskStatus::Failed),
        "cancelled" => Some(TaskStatus::Cancelled),
        _ => None,
    }
}

fn default_message(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "Task is running",
        TaskStatus::InputRequired => "Task requires input or approval",
        TaskStatus::Completed => "Task completed successfully",
        TaskStatus::Failed => "Task failed",
        TaskStatus::Cancelled => "Task was cancelled",
        _ => "Task is running",
    }
}

/// `2026-11-30T01:46:48.074195Z` from float Unix seconds.
fn iso_from_epoch(seconds: f64) -> Option<String> {
    if !seconds.is_finite() {
        return None;
    }
    let micros = (seconds * 1_000_000.0).round();
    Timestamp::from_unix_micros(micros as i64)
        .ok()
        .map(|t| t.to_record_string())
}

fn epoch_field(row: &Object, key: &str) -> Option<f64> {
    row.get(key).and_then(PyValue::as_f64)
}

/// How a task lookup failed.
pub(crate) fn lookup_error(task_id: &str, err: &bernstein_tools::Error) -> RpcError {
    if err.is_not_found() {
        RpcError::invalid_params(format!("Unknown task: {task_id}"))
    } else if matches!(err, bernstein_tools::Error::Task(_)) {
        RpcError::invalid_params(err.to_string())
    } else {
        RpcError::internal(err.to_string())
    }
}

/// Projects the task row of `task_id`.
pub(crate) async fn project(
    backend: &Backend,
    workdir: &Path,
    task_id: &str,
) -> Result<TaskView, RpcError> {
    let row = backend
        .get_task(task_id)
        .await
        .map_err(|err| lookup_error(task_id, &err))?;
    // The same poll `bernstein_run_status` serves (journal fold, run chain head, and the
    // store's terminal status journalled and sealed when the journal lags), so `tasks/get` and
    // the tool agree on the status of one task on both backends.
    let (run_handle, _) = backend.poll_run(workdir, task_id).await.map_err(|err| {
        RpcError::invalid_params(format!("task {task_id} has no usable run journal: {err}"))
    })?;
    let row = if run_handle.is_terminal() {
        row
    } else {
        // The poll may have settled the task meanwhile; re-read so both views are of one moment.
        backend
            .get_task(task_id)
            .await
            .map_err(|err| lookup_error(task_id, &err))?
    };
    let store_status = row
        .get("status")
        .and_then(PyValue::as_str)
        .unwrap_or("")
        .to_owned();
    let mut status = from_run_status(run_handle.status);
    if !status.is_terminal()
        && let Some(terminal) = store_terminal(&store_status)
    {
        status = terminal;
    }
    let summary = row
        .get("result_summary")
        .and_then(PyValue::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let created = epoch_field(&row, "created_at");
    let updated = ["created_at", "claimed_at", "completed_at", "closed_at"]
        .iter()
        .filter_map(|key| epoch_field(&row, key))
        .fold(None, |max: Option<f64>, t| {
            Some(max.map_or(t, |m| m.max(t)))
        });
    let now = Timestamp::now().to_record_string();
    let created_at = created
        .and_then(iso_from_epoch)
        .unwrap_or_else(|| now.clone());
    let updated_at = updated.and_then(iso_from_epoch).unwrap_or(now);
    let message = summary
        .clone()
        .unwrap_or_else(|| default_message(status).to_owned());
    let task = Task::new(task_id, status, created_at, updated_at)
        .with_status_message(message)
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(TASK_POLL_INTERVAL_MS);
    let title = row
        .get("title")
        .and_then(PyValue::as_str)
        .unwrap_or("")
        .to_owned();
    Ok(TaskView {
        task,
        handle: run_handle,
        summary,
        title,
        store_status,
    })
}

/// The ids of every task in the store, oldest first.
pub(crate) async fn all_task_ids(backend: &Backend) -> Result<Vec<String>, RpcError> {
    let rows = backend
        .list_tasks(None)
        .await
        .map_err(|err| RpcError::internal(err.to_string()))?;
    Ok(rows
        .iter()
        .filter_map(|row| row.as_object()?.get("id")?.as_str().map(str::to_owned))
        .collect())
}

/// An opaque `tasks/list` cursor for the page starting at `offset`.
pub(crate) fn encode_cursor(offset: usize) -> String {
    bernstein_protocol::encoding::base64url_nopad(format!("offset={offset}").as_bytes())
}

/// The offset a cursor names.
pub(crate) fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = bernstein_protocol::encoding::decode_base64url(cursor)?;
    String::from_utf8(bytes)
        .ok()?
        .strip_prefix("offset=")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        for offset in [0, 100, 12_345] {
            assert_eq!(decode_cursor(&encode_cursor(offset)), Some(offset));
        }
        assert_eq!(decode_cursor("!!"), None);
        assert_eq!(
            decode_cursor(&bernstein_protocol::encoding::base64url_nopad(b"page=1")),
            None
        );
    }

    #[test]
    fn timestamps_render_with_microseconds() {
        assert_eq!(
            iso_from_epoch(1_796_003_208.074_195).as_deref(),
            Some("2026-11-30T01:46:48.074195Z")
        );
        assert_eq!(iso_from_epoch(f64::NAN), None);
    }

    #[test]
    fn store_termination_mapping() {
        let check = |s: &str, want: Option<TaskStatus>| assert_eq!(store_terminal(s), want, "{s}");
        check("done", Some(TaskStatus::Completed));
        check("closed", Some(TaskStatus::Completed));
        check("failed", Some(TaskStatus::Failed));
        check("cancelled", Some(TaskStatus::Cancelled));
        check("open", None);
        check("pending_approval", None);
    }

    /// A task row spells every run status the way the run journal spells it, so a host that
    /// reads both the task row and `bernstein_run_status` sees one word for one state.
    #[test]
    fn task_rows_name_every_run_status_as_the_journal_does() {
        for run_status in RunStatus::ALL {
            assert_eq!(
                status_name(from_run_status(run_status)),
                run_status.as_str(),
                "{run_status:?}"
            );
        }
    }

    #[test]
    fn each_status_has_its_own_default_message() {
        let check = |status: TaskStatus, want: &str| {
            assert_eq!(default_message(status), want, "{status:?}");
        };
        check(TaskStatus::Working, "Task is running");
        check(TaskStatus::InputRequired, "Task requires input or approval");
        check(TaskStatus::Completed, "Task completed successfully");
        check(TaskStatus::Failed, "Task failed");
        check(TaskStatus::Cancelled, "Task was cancelled");
    }

    /// Store timestamps are read as float seconds when present; a missing or non-numeric field
    /// gives no time, so the row falls back to the current time instead of inventing one.
    #[test]
    fn epoch_fields_are_read_only_when_numeric() {
        let row = Object::new()
            .with("created_at", 1_796_003_208.5)
            .with("title", "not a time");
        assert_eq!(epoch_field(&row, "created_at"), Some(1_796_003_208.5));
        assert_eq!(epoch_field(&row, "title"), None);
        assert_eq!(epoch_field(&row, "closed_at"), None);
    }
}
