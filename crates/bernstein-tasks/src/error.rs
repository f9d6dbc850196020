//! The one error type of `bernstein-tasks`.

use std::fmt;

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
