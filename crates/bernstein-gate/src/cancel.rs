//! The read-before-act pre-check of `bernstein_cancel` and its three answers.
//!
//! The tool reads the task first. An unknown id and a status outside
//! [`MCP_CANCELLABLE_STATUSES`] are answered without a cancel request being sent; an already
//! terminal task is reported with its current state, not as an error. The task server itself
//! also cancels `suspended` tasks, but the MCP pre-check does not offer that.

use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::TaskStatus;
use bernstein_tasks::lifecycle::{MCP_CANCELLABLE_STATUSES, set_contains};

use crate::approval::Refusal;
use crate::reported;
use bernstein_protocol::pyrepr::python_str_repr;

/// The `error` code of the unknown-task answer.
pub const UNKNOWN_TASK_ERROR: &str = "unknown_task";

/// Whether `bernstein_cancel` sends a cancel request for a task in the reported status.
pub fn is_cancellable(status: &str) -> bool {
    set_contains(MCP_CANCELLABLE_STATUSES, status)
}

/// The pre-check: `Ok(status)` when the cancel request may be sent for task `task_id` in
/// `reported_status` (empty when the row had none); otherwise the not-cancellable answer.
pub fn cancel_precheck(task_id: &str, reported_status: &str) -> Result<TaskStatus, Refusal> {
    match TaskStatus::parse(reported_status) {
        Some(status) if is_cancellable(reported_status) => Ok(status),
        _ => Err(Refusal::new(not_cancellable(task_id, reported_status))),
    }
}

/// The answer for an id the task server does not know: `error`, `task_id`, `message`. The
/// message quotes the id with Python's `repr`, as the reference does.
pub fn unknown_task(task_id: &str) -> Object {
    Object::new()
        .with("error", UNKNOWN_TASK_ERROR)
        .with("task_id", task_id)
        .with(
            "message",
            format!(
                "No task with id {}; nothing was cancelled.",
                python_str_repr(task_id)
            ),
        )
}

/// The answer for a task that is terminal or otherwise not cancellable (also used when the
/// cancel request itself is refused with 409 and the task is re-read): `task_id`, `status`,
/// `cancelled: false`, `message`.
pub fn not_cancellable(task_id: &str, reported_status: &str) -> Object {
    let status = reported(reported_status);
    Object::new()
        .with("task_id", task_id)
        .with("status", status)
        .with("cancelled", false)
        .with(
            "message",
            format!("Task {task_id} is already in a terminal or non-cancellable state ({status})."),
        )
}

/// The answer after a cancel: `task_id`, `status`, `cancelled: true` and, on stdio,
/// `cancelled_descendants` (the remote transport omits the count, so pass `None` there).
/// `task_id` and `status` are taken from the task row the cancel returned.
pub fn cancelled(
    task_id: impl Into<Value>,
    status: impl Into<Value>,
    cancelled_descendants: Option<u64>,
) -> Object {
    let mut answer = Object::new()
        .with("task_id", task_id)
        .with("status", status)
        .with("cancelled", true);
    if let Some(count) = cancelled_descendants {
        answer.insert("cancelled_descendants", count);
    }
    answer
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::Dialect;

    use super::*;

    fn row(payload: &Object) -> String {
        Value::Object(payload.clone()).dumps(Dialect::PY_ROW)
    }

    #[test]
    fn precheck_offers_exactly_the_mcp_set() {
        for status in TaskStatus::ALL {
            let expect = MCP_CANCELLABLE_STATUSES.contains(&status);
            assert_eq!(
                cancel_precheck("t-1", status.as_str()).is_ok(),
                expect,
                "{status}"
            );
        }
        // The server would cancel a suspended task; the MCP pre-check does not ask it to.
        assert!(cancel_precheck("t-1", "suspended").is_err());
        assert!(cancel_precheck("t-1", "").is_err());
    }

    #[test]
    fn answers_match_the_recorded_tool_output() {
        // Recorded from the reference stdio server (stdio_with_task_server transcript).
        assert_eq!(
            row(&unknown_task("no-such-task")),
            r#"{"error": "unknown_task", "task_id": "no-such-task", "message": "No task with id 'no-such-task'; nothing was cancelled."}"#
        );
        assert_eq!(
            row(&not_cancellable("3ba33b8f6dd1", "cancelled")),
            r#"{"task_id": "3ba33b8f6dd1", "status": "cancelled", "cancelled": false, "message": "Task 3ba33b8f6dd1 is already in a terminal or non-cancellable state (cancelled)."}"#
        );
        assert_eq!(
            row(&cancelled("3ba33b8f6dd1", "cancelled", Some(0))),
            r#"{"task_id": "3ba33b8f6dd1", "status": "cancelled", "cancelled": true, "cancelled_descendants": 0}"#
        );
    }

    #[test]
    fn unknown_task_quotes_like_python() {
        insta::assert_snapshot!(row(&unknown_task("it's\n")));
    }

    #[test]
    fn not_cancellable_without_status() {
        insta::assert_snapshot!(row(&not_cancellable("t-1", "")));
    }

    #[test]
    fn remote_cancel_answer_has_no_count() {
        insta::assert_snapshot!(row(&cancelled("t-1", "cancelled", None)));
    }
}
