//! The Tasks-extension status fold (`tasks_extension.project_task_status`, FORMATS §3.2).
//!
//! Starting from `working`, each row whose `event` is a lifecycle event moves the status; all
//! other events are ignored. A terminal status never changes again, but a non-terminal one can
//! go back (`input_required` then `task_progress` gives `working`). The status is a projection
//! of the journal only; it is independent of the task store.

use crate::run_journal::row_str;
use bernstein_protocol::pyjson::Object;

/// A Tasks-extension task status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// The run is executing (also the status of a journal with no lifecycle event).
    Working,
    /// The run waits for client input.
    InputRequired,
    /// The run finished successfully.
    Completed,
    /// The run finished with a failure.
    Failed,
    /// The run was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Every status, from live to terminal.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    /// The wire spelling (`working`, `input_required`, `completed`, `failed`, `cancelled`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// The status with this wire spelling.
    pub fn from_wire(name: &str) -> Option<TaskStatus> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == name)
    }

    /// Whether the run cannot leave this status.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// The status a journal event moves the run to, or `None` for events the fold ignores.
    pub fn for_event(event: &str) -> Option<TaskStatus> {
        Some(match event {
            "run_started" | "task_claimed" | "task_in_progress" | "task_progress" => {
                TaskStatus::Working
            }
            "input_required" | "task_input_required" => TaskStatus::InputRequired,
            "task_completed" | "run_completed" => TaskStatus::Completed,
            "task_failed" | "run_failed" => TaskStatus::Failed,
            "task_cancelled" | "run_cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Folds ordered journal rows onto a status, reading each row's `event` as Python's
/// `str(row.get("event", ""))`.
pub fn project_task_status<'a>(rows: impl IntoIterator<Item = &'a Object>) -> TaskStatus {
    project_events(rows.into_iter().map(|row| row_str(row, "event")))
}

/// Folds a sequence of event names onto a status.
pub fn project_events<S: AsRef<str>>(events: impl IntoIterator<Item = S>) -> TaskStatus {
    let mut status = TaskStatus::Working;
    for event in events {
        if status.is_terminal() {
            break;
        }
        if let Some(next) = TaskStatus::for_event(event.as_ref()) {
            status = next;
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_cases() {
        let check = |events: &[&str], expect: TaskStatus| {
            assert_eq!(project_events(events), expect, "{events:?}");
        };
        check(&[], TaskStatus::Working);
        check(
            &["run_started", "task_input_required"],
            TaskStatus::InputRequired,
        );
        check(
            &["run_started", "input_required", "task_progress"],
            TaskStatus::Working,
        );
        check(&["task_failed", "task_completed"], TaskStatus::Failed);
        check(&["run_cancelled", "run_started"], TaskStatus::Cancelled);
        check(&["artifact_posted"], TaskStatus::Working);
    }

    #[test]
    fn wire_names_round_trip() {
        for status in TaskStatus::ALL {
            assert_eq!(TaskStatus::from_wire(status.as_str()), Some(status));
        }
        assert_eq!(TaskStatus::from_wire("done"), None);
    }
}
