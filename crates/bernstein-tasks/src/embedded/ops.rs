//! The task operations, as decisions over a [`Txn`]: the reference task server's route and store
//! rules, applied atomically.
//!
//! Each function checks its gate against the current snapshots, then records every snapshot,
//! journal row and audit event the reference's server would produce for the same request. They
//! write nothing themselves; the store commits the transaction under its lock.

use bernstein_protocol::pyjson::Value;

use super::record::StoredTask;
use super::txn::{
    EVENT_TASK_CANCELLED, EVENT_TASK_CLAIMED, EVENT_TASK_COMPLETED, EVENT_TASK_FAILED, Txn,
};
use crate::backend::{ApprovalOutcome, CancelOutcome, ClaimRequest};
use crate::error::{Error, Resource};
use crate::lifecycle::{
    self, APPROVABLE_TASK_STATUSES, SERVER_CANCELLABLE_STATUSES, SUCCESSFUL_TASK_STATUSES,
    TaskStatus, WORKER_COMPLETABLE_TASK_STATUSES,
};
use crate::model::{NewTask, Task, TaskId};

/// The `reason` and summary of a completion without a result (the reference's
/// `_EMPTY_COMPLETION_REASON`).
pub(crate) const EMPTY_COMPLETION_REASON: &str = "completion missing summary";

/// What a completion did.
#[derive(Debug)]
pub(crate) enum Completion {
    /// The task is `done`.
    Done(Task),
    /// The summary was empty, so the task was failed (reported as an error once durable).
    FailedEmpty(Task),
}

fn parent_must_exist(txn: &Txn<'_>, parent: Option<&TaskId>) -> Result<(), Error> {
    match parent {
        Some(parent) if !txn.contains(parent) => Err(Error::NotFound {
            resource: Resource::ParentTask,
            id: parent.to_string(),
        }),
        _ => Ok(()),
    }
}

/// `POST /tasks`: a new `open` task with id `id`, and the `task.created` audit event.
pub(crate) fn create(txn: &mut Txn<'_>, request: NewTask, id: TaskId) -> Result<Task, Error> {
    parent_must_exist(txn, request.parent_task_id.as_ref())?;
    let task = Task::new(id, request, txn.now)?;
    txn.put(StoredTask::created(task.clone()))?;
    let details = bernstein_protocol::pyjson::Object::new()
        .with("task_id", &task.id)
        .with("title", task.title.as_str())
        .with("description", task.description.as_str())
        .with("role", task.role.as_str())
        .with("priority", task.priority)
        .with("scope", task.scope.as_str())
        .with(
            "depends_on",
            task.depends_on.iter().map(Value::from).collect::<Vec<_>>(),
        )
        .with("tenant_id", "default");
    txn.audit.push(bernstein_journal::audit::AuditEvent::new(
        "task.created",
        "task_server",
        "task",
        task.id.as_str(),
        details,
    ));
    Ok(task)
}

/// `POST /tasks/self-create`: a new `open` subtask of `parent`; the parent moves to
/// `waiting_for_subtasks` ("Split into N subtasks") unless it is already waiting, done, failed or
/// closed, or has no edge there. The reference writes no `task.created` event on this route.
pub(crate) fn create_subtask(
    txn: &mut Txn<'_>,
    parent: &TaskId,
    mut request: NewTask,
    id: TaskId,
) -> Result<Task, Error> {
    request.parent_task_id = Some(parent.clone());
    parent_must_exist(txn, Some(parent))?;
    let task = Task::new(id, request, txn.now)?;
    txn.put(StoredTask::created(task.clone()))?;
    let parent_stored = txn.require(parent)?;
    let skip = [
        TaskStatus::WaitingForSubtasks,
        TaskStatus::Done,
        TaskStatus::Failed,
        TaskStatus::Closed,
    ];
    let status = parent_stored.task.status;
    if !skip.contains(&status) && status.can_transition_to(TaskStatus::WaitingForSubtasks) {
        let children = txn.children(parent).len();
        let mut waiting = parent_stored;
        Txn::transition(&mut waiting, TaskStatus::WaitingForSubtasks)?;
        waiting.task.result_summary = Some(format!("Split into {children} subtasks"));
        waiting.set_passthrough("subtask_wait_started_at", txn.now);
        txn.put(waiting)?;
    }
    Ok(task)
}

/// The dependencies of `task` that have not delivered: neither in `completed_ids` nor
/// `done`/`closed` here. A dependency that ended without delivering never counts.
fn unmet_dependencies(txn: &Txn<'_>, task: &Task, completed_ids: &[TaskId]) -> Vec<String> {
    task.depends_on
        .iter()
        .filter(|dep| {
            let status = txn.status(dep);
            let delivered_here = status.is_some_and(|s| SUCCESSFUL_TASK_STATUSES.contains(&s));
            let ended_badly =
                status.is_some_and(|s| lifecycle::UNSUCCESSFUL_TERMINAL_STATUSES.contains(&s));
            ended_badly || !(delivered_here || completed_ids.contains(dep))
        })
        .map(ToString::to_string)
        .collect()
}

/// Moves an `open` task to `claimed` for `claimer`, after the dependency gate.
fn claim_open(
    txn: &mut Txn<'_>,
    stored: StoredTask,
    claimer: Option<String>,
    completed_ids: &[TaskId],
) -> Result<StoredTask, Error> {
    let unmet = unmet_dependencies(txn, &stored.task, completed_ids);
    if !unmet.is_empty() {
        return Err(Error::DependenciesUnmet {
            task_id: stored.task.id.to_string(),
            unmet,
        });
    }
    let mut claimed = stored;
    Txn::transition(&mut claimed, TaskStatus::Claimed)?;
    claimed.task.claimed_at = Some(txn.now);
    claimed.task.claimed_by = claimer;
    claimed.task.attempts = claimed.task.attempts.saturating_add(1);
    txn.put(claimed.clone())?;
    let holder = Value::from(claimed.holder());
    txn.journal_row(&claimed.task, EVENT_TASK_CLAIMED, &[("claimed_by", holder)]);
    Ok(claimed)
}

/// `POST /tasks/{id}/claim`: optimistic version check, `open` only, dependency gate; writes the
/// `task.claim_receipt` (`claim_path: by_id`).
pub(crate) fn claim(txn: &mut Txn<'_>, id: &TaskId, request: &ClaimRequest) -> Result<Task, Error> {
    let stored = txn.require(id)?;
    if let Some(expected) = request.expected_version
        && expected != stored.task.version
    {
        return Err(Error::VersionConflict {
            task_id: id.to_string(),
            expected,
            actual: stored.task.version,
        });
    }
    if stored.task.status != TaskStatus::Open {
        return Err(Error::NotClaimable {
            task_id: id.to_string(),
            status: stored.task.status,
            holder: stored.task.claimed_by.clone(),
        });
    }
    let claimed = claim_open(txn, stored, request.claimer.clone(), &request.completed_ids)?;
    txn.claim_receipt(&claimed, "by_id");
    Ok(claimed.task)
}

/// `POST /tasks/{id}/complete` behind the completion gate: the status must be worker-completable
/// at the moment of writing; an `open` task is claimed first; an empty summary fails the task.
pub(crate) fn complete(txn: &mut Txn<'_>, id: &TaskId, summary: &str) -> Result<Completion, Error> {
    let mut stored = txn.require(id)?;
    if !WORKER_COMPLETABLE_TASK_STATUSES.contains(&stored.task.status) {
        return Err(Error::NotCompletable {
            task_id: id.to_string(),
            status: stored.task.status,
        });
    }
    if stored.task.status == TaskStatus::Open {
        let claimer = stored.task.claimed_by.clone();
        stored = claim_open(txn, stored, claimer, &[])?;
    }
    if summary.trim().is_empty() {
        let before = stored.clone();
        let mut failed = stored;
        Txn::transition(&mut failed, TaskStatus::Failed)?;
        failed.task.result_summary = Some(EMPTY_COMPLETION_REASON.to_owned());
        failed.task.completed_at = Some(txn.now);
        txn.put(failed.clone())?;
        txn.release_receipt(
            &before,
            &failed.task,
            "fail_empty_completion",
            EMPTY_COMPLETION_REASON,
        );
        txn.journal_row(
            &failed.task,
            EVENT_TASK_FAILED,
            &[("reason", Value::from(EMPTY_COMPLETION_REASON))],
        );
        txn.cascade_failed_dependency([id.clone()])?;
        return Ok(Completion::FailedEmpty(failed.task));
    }
    let mut done = stored;
    Txn::transition(&mut done, TaskStatus::Done)?;
    done.task.result_summary = Some(summary.to_owned());
    done.task.completed_at = Some(txn.now);
    txn.put(done.clone())?;
    txn.journal_row(&done.task, EVENT_TASK_COMPLETED, &[]);
    txn.complete_parents_if_ready(done.task.parent_task_id.clone())?;
    Ok(Completion::Done(done.task))
}

/// Sign-off of a held result (`pending_approval` → `done`) with `note` as the summary.
pub(crate) fn approve(
    txn: &mut Txn<'_>,
    id: &TaskId,
    note: &str,
) -> Result<ApprovalOutcome, Error> {
    let stored = txn.require(id)?;
    let from = stored.task.status;
    let Some(target) =
        lifecycle::approval_target(from).filter(|_| APPROVABLE_TASK_STATUSES.contains(&from))
    else {
        return Err(Error::NotApprovable {
            task_id: id.to_string(),
            status: from,
        });
    };
    if note.trim().is_empty() {
        return Err(Error::InvalidRequest(
            "an approval note must not be empty".to_owned(),
        ));
    }
    let mut done = stored;
    Txn::transition(&mut done, target)?;
    done.task.result_summary = Some(note.to_owned());
    done.task.completed_at = Some(txn.now);
    txn.put(done.clone())?;
    txn.journal_row(&done.task, EVENT_TASK_COMPLETED, &[]);
    txn.complete_parents_if_ready(done.task.parent_task_id.clone())?;
    Ok(ApprovalOutcome {
        task: done.task,
        approved_from: from,
    })
}

/// `POST /tasks/{id}/fail`: any status with an edge to `failed`; dependents are stranded.
pub(crate) fn fail(txn: &mut Txn<'_>, id: &TaskId, reason: &str) -> Result<Task, Error> {
    let before = txn.require(id)?;
    let mut failed = before.clone();
    Txn::transition(&mut failed, TaskStatus::Failed)?;
    failed.task.result_summary = Some(reason.to_owned());
    failed.task.completed_at = Some(txn.now);
    txn.put(failed.clone())?;
    txn.release_receipt(&before, &failed.task, "fail", reason);
    txn.journal_row(
        &failed.task,
        EVENT_TASK_FAILED,
        &[("reason", Value::from(reason))],
    );
    txn.cascade_failed_dependency([id.clone()])?;
    Ok(failed.task)
}

/// `POST /tasks/{id}/cancel`: the root must be cancellable; every cancellable task below it in
/// the subtask tree is cancelled too (breadth first), then the dependents of all of them are
/// stranded.
pub(crate) fn cancel(txn: &mut Txn<'_>, id: &TaskId, reason: &str) -> Result<CancelOutcome, Error> {
    let root = txn.require(id)?;
    if !SERVER_CANCELLABLE_STATUSES.contains(&root.task.status) {
        return Err(Error::NotCancellable {
            task_id: id.to_string(),
            status: root.task.status,
        });
    }
    let mut tree = vec![id.clone()];
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next].clone();
        next += 1;
        let children: Vec<TaskId> = txn
            .children(&parent)
            .into_iter()
            .filter(|child| !tree.contains(child))
            .collect();
        tree.extend(children);
    }
    let mut cancelled = Vec::new();
    for task_id in &tree {
        let before = txn.require(task_id)?;
        if !SERVER_CANCELLABLE_STATUSES.contains(&before.task.status) {
            continue;
        }
        let is_root = task_id == id;
        let cascade_reason = if is_root {
            reason.to_owned()
        } else {
            format!("parent {id} cancelled: {reason}")
        };
        let summary = if is_root {
            reason.to_owned()
        } else {
            format!("Cascade: parent {id} cancelled")
        };
        let mut after = before.clone();
        Txn::transition(&mut after, TaskStatus::Cancelled)?;
        after.task.result_summary = Some(summary.clone());
        after.task.completed_at = Some(txn.now);
        txn.put(after.clone())?;
        txn.release_receipt(&before, &after.task, "cancel_cascade", &cascade_reason);
        txn.journal_row(
            &after.task,
            EVENT_TASK_CANCELLED,
            &[("reason", Value::from(summary))],
        );
        cancelled.push(task_id.clone());
    }
    let blocked_dependents = txn.cascade_failed_dependency(cancelled.iter().cloned())?;
    Ok(CancelOutcome {
        task: txn.require(id)?.task,
        cancelled_descendants: cancelled.len().saturating_sub(1),
        blocked_dependents,
    })
}

/// Plan mode: new tasks held `planned` until their plan is decided.
pub(crate) fn create_planned(
    txn: &mut Txn<'_>,
    request: NewTask,
    id: TaskId,
) -> Result<Task, Error> {
    parent_must_exist(txn, request.parent_task_id.as_ref())?;
    let mut task = Task::new(id, request, txn.now)?;
    // No transition enters `planned`: plan mode creates tasks in it directly.
    task.status = TaskStatus::Planned;
    txn.put(StoredTask::created(task.clone()))?;
    Ok(task)
}

/// A plan decision: every listed task still `planned` moves to `to` (`open` on approval,
/// `cancelled` on rejection). Returns the moved ids in plan order.
pub(crate) fn decide_planned(
    txn: &mut Txn<'_>,
    task_ids: &[TaskId],
    to: TaskStatus,
) -> Result<Vec<TaskId>, Error> {
    let mut moved = Vec::new();
    for id in task_ids {
        let Some(stored) = txn.get(id)? else {
            continue;
        };
        if stored.task.status != TaskStatus::Planned {
            continue;
        }
        let mut after = stored;
        Txn::transition(&mut after, to)?;
        txn.put(after.clone())?;
        if to == TaskStatus::Cancelled {
            txn.journal_row(&after.task, EVENT_TASK_CANCELLED, &[]);
        }
        moved.push(id.clone());
    }
    Ok(moved)
}

/// Adopts a claim made directly on the backlog file (the claim-receipt path claims rows there):
/// the `open` task becomes `claimed` by `claimer` with the row's claim time and attempt count.
/// No audit event: the claim receipt already recorded the claim.
pub(crate) fn adopt_backlog_claim(
    txn: &mut Txn<'_>,
    id: &TaskId,
    claimer: Option<String>,
    claimed_at: Option<f64>,
    attempts: Option<u32>,
) -> Result<(), Error> {
    if txn.status(id) != Some(TaskStatus::Open) {
        return Ok(());
    }
    let Some(stored) = txn.get(id)? else {
        return Ok(());
    };
    if stored.task.status != TaskStatus::Open {
        return Ok(());
    }
    let mut claimed = stored;
    Txn::transition(&mut claimed, TaskStatus::Claimed)?;
    claimed.task.claimed_at = Some(claimed_at.unwrap_or(txn.now));
    claimed.task.claimed_by = claimer;
    claimed.task.attempts = attempts.unwrap_or(claimed.task.attempts.saturating_add(1));
    txn.put(claimed.clone())?;
    let holder = Value::from(claimed.holder());
    txn.journal_row(&claimed.task, EVENT_TASK_CLAIMED, &[("claimed_by", holder)]);
    Ok(())
}
