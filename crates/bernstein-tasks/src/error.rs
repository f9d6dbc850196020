//! The one error type of `bernstein-tasks`.

use std::fmt;
use std::path::PathBuf;

use crate::lifecycle::TaskStatus;

/// Everything that can stop a task-model or plan operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transition table has no edge from `from` to `to`.
    ///
    /// The message is the reference's `IllegalTransitionError` text byte for byte, because the
    /// task server returns it as the 409 `detail` of a refused completion.
    #[error("Illegal task transition: '{from}' -> '{to}' (entity {task_id})")]
    IllegalTransition {
        /// The task that was asked to move.
        task_id: String,
        /// Its status at the time.
        from: TaskStatus,
        /// The status it was asked to enter.
        to: TaskStatus,
    },
    /// A status string that is none of the 17 Bernstein statuses.
    #[error("unknown task status {0:?}")]
    UnknownStatus(String),
    /// A scope string that is not `small`, `medium` or `large`.
    #[error("unknown task scope {0:?}: expected one of small, medium, large")]
    UnknownScope(String),
    /// A complexity string that is not `low`, `medium` or `high`.
    #[error("unknown task complexity {0:?}: expected one of low, medium, high")]
    UnknownComplexity(String),
    /// A task id that could name a path outside the directory it is joined onto, or that the
    /// reference would refuse.
    #[error("invalid task id {id:?}: {reason}")]
    InvalidTaskId {
        /// The refused id (shown escaped, never raw, because it came from a caller).
        id: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A task record broke one or more field rules; every broken rule is listed.
    #[error("invalid task: {}", join_problems(.0))]
    InvalidTask(Vec<FieldProblem>),
    /// A stored plan document could not be read as a plan; every problem is listed.
    #[error("invalid plan: {}", join_problems(.0))]
    InvalidPlan(Vec<FieldProblem>),
    /// The operating system's random source failed, so no id could be minted.
    #[error("the system random source failed; no task id was generated")]
    Randomness,
    /// No task or plan has this id. The message is the reference's 404 `detail` (`Task 'x' not
    /// found`, `Plan x not found`).
    #[error("{}", .resource.not_found_message(.id))]
    NotFound {
        /// What kind of record was looked up.
        resource: Resource,
        /// The id that was looked up.
        id: String,
    },
    /// An optimistic-locking claim named a version the task no longer has.
    #[error("Task '{task_id}' version conflict: expected {expected}, found {actual}")]
    VersionConflict {
        /// The task that was asked to move.
        task_id: String,
        /// The version the caller read.
        expected: u64,
        /// The version the store holds.
        actual: u64,
    },
    /// A claim named a task that is not `open`. The message is the reference's 409 `detail`.
    #[error(
        "task {task_id} is not open (status={status}); cannot claim (already claimed by session \
         {})",
        .holder.as_deref().map_or_else(|| "None".to_owned(), |h| format!("'{h}'"))
    )]
    NotClaimable {
        /// The task.
        task_id: String,
        /// Its status when the store checked.
        status: TaskStatus,
        /// The session holding the claim, if any.
        holder: Option<String>,
    },
    /// A claim named a task whose dependencies have not all delivered.
    #[error("Task '{task_id}' has unmet dependencies: {}", .unmet.join(", "))]
    DependenciesUnmet {
        /// The task that was asked to move.
        task_id: String,
        /// The dependencies that are neither in the caller's completed ids nor `done`/`closed`.
        unmet: Vec<String>,
    },
    /// The completion gate refused: the task is not in a worker-completable status at the moment
    /// of writing. The MCP layer renders this as the `task_not_completable` refusal.
    #[error("Task '{task_id}' is in status '{status}' and cannot be completed by its worker")]
    NotCompletable {
        /// The task.
        task_id: String,
        /// Its status when the store checked.
        status: TaskStatus,
    },
    /// The approval gate refused: the task holds no result awaiting sign-off. The MCP layer
    /// renders this as the `task_not_awaiting_approval` refusal.
    #[error("Task '{task_id}' is in status '{status}' and is not awaiting approval")]
    NotApprovable {
        /// The task.
        task_id: String,
        /// Its status when the store checked.
        status: TaskStatus,
    },
    /// The task is not in a cancellable status. The message is the reference's 409 `detail`.
    #[error("Task '{task_id}' cannot be cancelled from status '{status}'")]
    NotCancellable {
        /// The task.
        task_id: String,
        /// Its status when the store checked.
        status: TaskStatus,
    },
    /// A completion carried an empty result summary, so the task was failed instead (the
    /// reference's 422 `empty_result_summary`; the failure is durable when this is returned).
    #[error(
        "Cannot complete task '{task_id}': result_summary must be non-empty (provide diff or log \
         reference). Task auto-failed with reason='completion missing summary'."
    )]
    EmptyResultSummary {
        /// The task that was failed.
        task_id: String,
    },
    /// The plan was already approved or rejected. The message is the reference's 409 `detail`.
    #[error("Plan already {status}")]
    PlanAlreadyDecided {
        /// The plan.
        plan_id: String,
        /// `approved` or `rejected`.
        status: String,
    },
    /// The plan's content changed after review, so its rendering hash no longer matches. The
    /// message is the reference's 409 `detail`.
    #[error("{}", crate::plan::hash_mismatch_message(.plan_id, .stored, .current))]
    PlanHashMismatch {
        /// The plan.
        plan_id: String,
        /// The hash stored when the plan was created.
        stored: String,
        /// The hash of the content now.
        current: String,
    },
    /// The backend has no plan routes (the reference's 404 when plan mode is off).
    #[error("Plan mode is not enabled on this server")]
    PlanModeDisabled,
    /// A list cursor that this backend did not hand out.
    #[error("invalid list cursor {0:?}")]
    InvalidCursor(String),
    /// A request the backend refused for a reason with no variant of its own (an argument out of
    /// range, for example).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The backend could not be reached (the remote task server is down or restarting).
    #[error("{0}")]
    Unavailable(String),
    /// The remote task server answered with an HTTP error this crate has no variant for.
    #[error("{message}")]
    Remote {
        /// The HTTP status code.
        status: u16,
        /// The server's `detail` (or the raw body when it had none).
        message: String,
    },
    /// A file of the embedded store could not be read, written or synced.
    #[error("task store: cannot {operation} {}: {message}", .path.display())]
    Storage {
        /// What was being done (`open`, `append to`, `fsync`, `rename`, ...).
        operation: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error kind.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// A store file holds something that is not a record the store wrote. Nothing was changed.
    #[error(
        "task store file {} is corrupt{}: {problem}",
        .path.display(),
        .line.map_or_else(String::new, |line| format!(" at line {line}"))
    )]
    CorruptStore {
        /// The file.
        path: PathBuf,
        /// 1-based line number, for line-oriented files.
        line: Option<u64>,
        /// What is wrong with it.
        problem: String,
    },
}

/// The kind of record an [`Error::NotFound`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// A task.
    Task,
    /// The parent named by a subtask request.
    ParentTask,
    /// A plan.
    Plan,
}

impl Resource {
    /// The reference's 404 detail for `id`; the task route quotes the id, the plan route does
    /// not.
    pub fn not_found_message(self, id: &str) -> String {
        match self {
            Resource::Task => format!("Task '{id}' not found"),
            Resource::ParentTask => format!("Parent task '{id}' not found"),
            Resource::Plan => format!("Plan {id} not found"),
        }
    }
}

/// The HTTP-like class of an [`Error`], so a transport can render the reference's payloads
/// without matching every variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The named task or plan does not exist (404).
    NotFound,
    /// The request conflicts with the record's current state (409).
    Conflict,
    /// The request itself is invalid (422, as FastAPI answers validation errors).
    Invalid,
    /// The backend cannot be reached (503).
    Unavailable,
    /// The backend failed internally (500).
    Internal,
}

impl ErrorKind {
    /// The HTTP status code the reference task server answers with for this class.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorKind::NotFound => 404,
            ErrorKind::Conflict => 409,
            ErrorKind::Invalid => 422,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
        }
    }
}

impl Error {
    /// The HTTP-like class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } | Error::PlanModeDisabled => ErrorKind::NotFound,
            Error::IllegalTransition { .. }
            | Error::VersionConflict { .. }
            | Error::NotClaimable { .. }
            | Error::DependenciesUnmet { .. }
            | Error::NotCompletable { .. }
            | Error::NotApprovable { .. }
            | Error::NotCancellable { .. }
            | Error::PlanAlreadyDecided { .. }
            | Error::PlanHashMismatch { .. } => ErrorKind::Conflict,
            Error::UnknownStatus(_)
            | Error::UnknownScope(_)
            | Error::UnknownComplexity(_)
            | Error::InvalidTaskId { .. }
            | Error::InvalidTask(_)
            | Error::InvalidCursor(_)
            | Error::InvalidRequest(_)
            | Error::EmptyResultSummary { .. } => ErrorKind::Invalid,
            Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::Remote { status, .. } => match status {
                404 => ErrorKind::NotFound,
                409 => ErrorKind::Conflict,
                400 | 422 => ErrorKind::Invalid,
                502..=504 => ErrorKind::Unavailable,
                _ => ErrorKind::Internal,
            },
            Error::InvalidPlan(_)
            | Error::Randomness
            | Error::Storage { .. }
            | Error::CorruptStore { .. } => ErrorKind::Internal,
        }
    }

    /// The HTTP status code the reference answers with (see [`ErrorKind::http_status`]);
    /// [`Error::Remote`] keeps the status the server sent.
    pub fn http_status(&self) -> u16 {
        match self {
            Error::Remote { status, .. } => *status,
            other => other.kind().http_status(),
        }
    }

    /// A stable machine-readable code for this error, for logs and error payloads.
    pub fn code(&self) -> &'static str {
        match self {
            Error::IllegalTransition { .. } => "illegal_transition",
            Error::UnknownStatus(_) => "unknown_status",
            Error::UnknownScope(_) => "unknown_scope",
            Error::UnknownComplexity(_) => "unknown_complexity",
            Error::InvalidTaskId { .. } => "invalid_task_id",
            Error::InvalidTask(_) => "invalid_task",
            Error::InvalidPlan(_) => "invalid_plan",
            Error::Randomness => "randomness",
            Error::NotFound {
                resource: Resource::Task | Resource::ParentTask,
                ..
            } => "unknown_task",
            Error::NotFound {
                resource: Resource::Plan,
                ..
            } => "unknown_plan",
            Error::VersionConflict { .. } => "version_conflict",
            Error::NotClaimable { .. } => "task_not_claimable",
            Error::DependenciesUnmet { .. } => "dependencies_unmet",
            Error::NotCompletable { .. } => "task_not_completable",
            Error::NotApprovable { .. } => "task_not_awaiting_approval",
            Error::NotCancellable { .. } => "task_not_cancellable",
            Error::EmptyResultSummary { .. } => "empty_result_summary",
            Error::PlanAlreadyDecided { .. } => "plan_already_decided",
            Error::PlanHashMismatch { .. } => "plan_hash_mismatch",
            Error::PlanModeDisabled => "plan_mode_disabled",
            Error::InvalidCursor(_) => "invalid_cursor",
            Error::InvalidRequest(_) => "invalid_request",
            Error::Unavailable(_) => "unavailable",
            Error::Remote { .. } => "remote_error",
            Error::Storage { .. } => "storage",
            Error::CorruptStore { .. } => "corrupt_store",
        }
    }

    /// A [`Error::Storage`] from an I/O error on `path`.
    pub fn storage(
        operation: &'static str,
        path: impl Into<PathBuf>,
        err: &std::io::Error,
    ) -> Error {
        Error::Storage {
            operation,
            path: path.into(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}

/// One broken rule on one field of a task or plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    /// The field, with an index where the field is a list (`depends_on[2]`).
    pub field: String,
    /// What is wrong with it, as a sentence fragment.
    pub problem: String,
}

impl FieldProblem {
    /// A problem on `field`.
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> FieldProblem {
        FieldProblem {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

fn join_problems(problems: &[FieldProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
