//! The task state machine: the 17 statuses, the legal transition table and the named status sets.
//!
//! Everything here is a transcription of Bernstein 3.23's `core/tasks/lifecycle.py` and
//! `core/tasks/models.TaskStatus`, checked edge by edge and set by set against the golden vector
//! `fixtures/vectors/lifecycle.json`. The gates in `bernstein-gate` and the task stores project
//! their rules from these sets rather than restating them, so a rule cannot drift between
//! surfaces.
//!
//! Every named set is a slice sorted by status value (Python `str` order), which is the order the
//! reference writes them in its wire payloads (`approvable_statuses`, `completable_statuses`).

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// One of the 17 Bernstein task statuses.
///
/// The variants are declared in the reference's enum order; [`TaskStatus::ALL`] keeps that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Held by plan mode until the plan it belongs to is decided.
    Planned,
    /// Queued and claimable.
    Open,
    /// Claimed by a worker that has not started yet.
    Claimed,
    /// Being executed by a worker.
    InProgress,
    /// Finished; may still be closed, failed by verification or reopened.
    Done,
    /// Verified and closed (terminal).
    Closed,
    /// Ended without delivering; may be retried.
    Failed,
    /// Blocked on something other than a dependency.
    Blocked,
    /// A parent waiting for its subtasks to finish.
    WaitingForSubtasks,
    /// Cancelled (terminal).
    Cancelled,
    /// Its worker is gone; crash recovery decides.
    Orphaned,
    /// Suspended at a cooperative mailbox rendezvous.
    Suspended,
    /// Finished work held for a sign-off decision.
    PendingApproval,
    /// Deliberately abandoned by its worker (terminal).
    Abandoned,
    /// Stranded because a dependency was abandoned.
    BlockedByAbandon,
    /// Stranded because a dependency failed.
    BlockedByFailedDep,
    /// The worker refused the task with a typed refusal (terminal).
    Refused,
}

use TaskStatus::*;

impl TaskStatus {
    /// Every status, in the reference's declaration order.
    pub const ALL: [TaskStatus; 17] = [
        Planned,
        Open,
        Claimed,
        InProgress,
        Done,
        Closed,
        Failed,
        Blocked,
        WaitingForSubtasks,
        Cancelled,
        Orphaned,
        Suspended,
        PendingApproval,
        Abandoned,
        BlockedByAbandon,
        BlockedByFailedDep,
        Refused,
    ];

    /// The wire spelling (`"in_progress"`, `"pending_approval"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Planned => "planned",
            Open => "open",
            Claimed => "claimed",
            InProgress => "in_progress",
            Done => "done",
            Closed => "closed",
            Failed => "failed",
            Blocked => "blocked",
            WaitingForSubtasks => "waiting_for_subtasks",
            Cancelled => "cancelled",
            Orphaned => "orphaned",
            Suspended => "suspended",
            PendingApproval => "pending_approval",
            Abandoned => "abandoned",
            BlockedByAbandon => "blocked_by_abandon",
            BlockedByFailedDep => "blocked_by_failed_dep",
            Refused => "refused",
        }
    }

    /// The status with wire spelling `value`, or `None`. Matching is exact: the reference's
    /// enum lookup is case-sensitive and does not trim.
    pub fn parse(value: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|s| s.as_str() == value)
    }

    /// The statuses this one may move to, sorted by value.
    pub const fn outgoing(self) -> &'static [TaskStatus] {
        match self {
            // Plan mode: promoted by a plan approval, cancelled by a rejection, failed by a
            // batch stage failure.
            Planned => &[Cancelled, Failed, Open],
            Open => &[
                Abandoned,
                BlockedByAbandon,
                BlockedByFailedDep,
                Cancelled,
                Claimed,
                Failed,
                Refused,
                WaitingForSubtasks,
            ],
            Claimed => &[
                Abandoned,
                Blocked,
                BlockedByAbandon,
                BlockedByFailedDep,
                Cancelled,
                Done,
                Failed,
                InProgress,
                Open,
                Refused,
                Suspended,
                WaitingForSubtasks,
            ],
            InProgress => &[
                Abandoned,
                Blocked,
                BlockedByAbandon,
                BlockedByFailedDep,
                Cancelled,
                Done,
                Failed,
                Open,
                Orphaned,
                Refused,
                Suspended,
                WaitingForSubtasks,
            ],
            // A suspension restores the state that entered it, or is cancelled by an operator.
            Suspended => &[Cancelled, Claimed, InProgress],
            Orphaned => &[Abandoned, Done, Failed, Open],
            Blocked => &[Abandoned, Cancelled, Failed, Open],
            WaitingForSubtasks => &[
                Abandoned,
                Blocked,
                BlockedByAbandon,
                BlockedByFailedDep,
                Cancelled,
                Done,
                Failed,
            ],
            Failed => &[Open],
            // Closed after verification, failed by the janitor, or reopened for another attempt.
            Done => &[Closed, Failed, Open],
            BlockedByAbandon | BlockedByFailedDep => &[Abandoned, Cancelled, Open],
            // The only way out of a held result is the sign-off that completes it.
            PendingApproval => &[Done],
            Closed | Cancelled | Abandoned | Refused => &[],
        }
    }

    /// Whether the transition table has an edge from `self` to `to`.
    pub fn can_transition_to(self, to: TaskStatus) -> bool {
        self.outgoing().contains(&to)
    }

    /// Whether the status has no outgoing edge at all (see [`TERMINAL_TASK_STATUSES`]).
    pub fn is_terminal(self) -> bool {
        self.outgoing().is_empty()
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for TaskStatus {
    type Err = Error;

    fn from_str(value: &str) -> Result<TaskStatus, Error> {
        TaskStatus::parse(value).ok_or_else(|| Error::UnknownStatus(value.to_owned()))
    }
}

/// Whether the transition table has an edge from `from` to `to`.
pub fn can_transition(from: TaskStatus, to: TaskStatus) -> bool {
    from.can_transition_to(to)
}

/// Checks one transition of task `task_id`, failing with the reference's
/// `Illegal task transition: 'from' -> 'to' (entity <id>)` error when the table has no edge.
///
/// This only decides legality; the caller applies the change and its bookkeeping (version,
/// timestamps, audit event).
pub fn transition(task_id: &str, from: TaskStatus, to: TaskStatus) -> Result<(), Error> {
    if from.can_transition_to(to) {
        Ok(())
    } else {
        Err(Error::IllegalTransition {
            task_id: task_id.to_owned(),
            from,
            to,
        })
    }
}

/// Every legal `(from, to)` edge, grouped by `from` in declaration order.
pub fn transitions() -> impl Iterator<Item = (TaskStatus, TaskStatus)> {
    TaskStatus::ALL
        .into_iter()
        .flat_map(|from| from.outgoing().iter().map(move |&to| (from, to)))
}

/// `APPROVABLE_TASK_STATUSES`: the statuses a per-task approval may act on.
pub const APPROVABLE_TASK_STATUSES: &[TaskStatus] = &[PendingApproval];

/// `PLAN_GATED_TASK_STATUSES`: statuses whose decision belongs to a plan, not to the task.
pub const PLAN_GATED_TASK_STATUSES: &[TaskStatus] = &[Planned];

/// `WORKER_COMPLETABLE_TASK_STATUSES`: the statuses a worker may report its own completion from.
///
/// `waiting_for_subtasks`, `orphaned` and `pending_approval` also have an edge to `done` and are
/// deliberately excluded: completing them on request marks work done that the caller did not do.
pub const WORKER_COMPLETABLE_TASK_STATUSES: &[TaskStatus] = &[Claimed, InProgress, Open];

/// The statuses `bernstein_cancel` accepts before it sends a cancel request (its read-before-act
/// pre-check). The task server itself also accepts `suspended`; see
/// [`SERVER_CANCELLABLE_STATUSES`].
pub const MCP_CANCELLABLE_STATUSES: &[TaskStatus] = &[
    Blocked,
    Claimed,
    InProgress,
    Open,
    Planned,
    WaitingForSubtasks,
];

/// The statuses `POST /tasks/{id}/cancel` and the task store cancel (and cascade through).
pub const SERVER_CANCELLABLE_STATUSES: &[TaskStatus] = &[
    Blocked,
    Claimed,
    InProgress,
    Open,
    Planned,
    Suspended,
    WaitingForSubtasks,
];

/// `TERMINAL_TASK_STATUSES`: statuses with no outgoing edge. `done` and `failed` are not here,
/// because they keep recovery edges.
pub const TERMINAL_TASK_STATUSES: &[TaskStatus] = &[Abandoned, Cancelled, Closed, Refused];

/// `LANE_FINISHED_STATUSES`: finished until an operator reopens them, so a worktree or sandbox
/// provisioned for the task is no longer needed.
pub const LANE_FINISHED_STATUSES: &[TaskStatus] =
    &[Abandoned, Cancelled, Closed, Done, Failed, Refused];

/// `SUCCESSFUL_TASK_STATUSES`: a dependency here has delivered.
pub const SUCCESSFUL_TASK_STATUSES: &[TaskStatus] = &[Closed, Done];

/// `UNSUCCESSFUL_TERMINAL_STATUSES`: a dependency here will never deliver on its own.
pub const UNSUCCESSFUL_TERMINAL_STATUSES: &[TaskStatus] = &[
    Abandoned,
    BlockedByAbandon,
    BlockedByFailedDep,
    Cancelled,
    Failed,
    Orphaned,
    Refused,
];

/// `DEPENDENCY_BLOCKED_STATUSES`: stranded because of a dependency rather than by running.
pub const DEPENDENCY_BLOCKED_STATUSES: &[TaskStatus] = &[BlockedByAbandon, BlockedByFailedDep];

/// `IN_FLIGHT_TASK_STATUSES`: neither delivered nor ended.
pub const IN_FLIGHT_TASK_STATUSES: &[TaskStatus] = &[
    Blocked,
    Claimed,
    InProgress,
    Open,
    PendingApproval,
    Planned,
    Suspended,
    WaitingForSubtasks,
];

/// `TASK_APPROVAL_TARGETS`: where an approval moves a task from each approvable status.
pub fn approval_target(status: TaskStatus) -> Option<TaskStatus> {
    match status {
        PendingApproval => Some(Done),
        _ => None,
    }
}

/// Whether the status string `value` names a member of `set`. Unknown or empty strings are in no
/// set, so a task payload without a readable status fails closed.
pub fn set_contains(set: &[TaskStatus], value: &str) -> bool {
    set.iter().any(|s| s.as_str() == value)
}

/// The wire spellings of `set`, in its (sorted) order.
pub fn set_values(set: &[TaskStatus]) -> Vec<&'static str> {
    set.iter().map(|s| s.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_spelling() {
        for status in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(status.as_str()), Some(status));
            assert_eq!(status.as_str().parse::<TaskStatus>(), Ok(status));
            assert_eq!(status.to_string(), status.as_str());
        }
    }

    #[test]
    fn parse_is_exact() {
        for text in ["", "Open", " open", "open ", "in-progress", "unknown"] {
            assert_eq!(TaskStatus::parse(text), None, "{text:?}");
            assert_eq!(
                text.parse::<TaskStatus>(),
                Err(Error::UnknownStatus(text.to_owned()))
            );
        }
    }

    #[test]
    fn illegal_transition_message_matches_the_reference() {
        // The 409 detail recorded from the reference task server when a done task is completed
        // again (fixtures/vectors/http/transcript.json).
        let err = transition("55ad7026909d", Done, Done).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Illegal task transition: 'done' -> 'done' (entity 55ad7026909d)"
        );
        assert_eq!(transition("x", PendingApproval, Done), Ok(()));
    }

    #[test]
    fn outgoing_lists_are_sorted_and_unique() {
        for status in TaskStatus::ALL {
            let values = set_values(status.outgoing());
            let mut sorted = values.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(values, sorted, "{status}");
        }
    }

    #[test]
    fn terminal_means_no_outgoing_edge() {
        for status in TaskStatus::ALL {
            assert_eq!(
                status.is_terminal(),
                set_contains(TERMINAL_TASK_STATUSES, status.as_str()),
                "{status}"
            );
        }
    }

    #[test]
    fn no_edge_enters_planned_or_pending_approval() {
        // FORMATS §8: both are reached only by plan mode / the orchestrator, never by a
        // transition, so no HTTP path leads into them.
        for (_, to) in transitions() {
            assert_ne!(to, Planned);
            assert_ne!(to, PendingApproval);
        }
    }

    #[test]
    fn approval_targets_cover_exactly_the_approvable_set() {
        for status in TaskStatus::ALL {
            let approvable = APPROVABLE_TASK_STATUSES.contains(&status);
            assert_eq!(approval_target(status).is_some(), approvable, "{status}");
            if let Some(target) = approval_target(status) {
                assert!(status.can_transition_to(target));
            }
        }
    }

    #[test]
    fn set_contains_fails_closed() {
        assert!(set_contains(WORKER_COMPLETABLE_TASK_STATUSES, "open"));
        assert!(!set_contains(WORKER_COMPLETABLE_TASK_STATUSES, ""));
        assert!(!set_contains(WORKER_COMPLETABLE_TASK_STATUSES, "unknown"));
        assert!(!set_contains(WORKER_COMPLETABLE_TASK_STATUSES, "OPEN"));
    }
}
