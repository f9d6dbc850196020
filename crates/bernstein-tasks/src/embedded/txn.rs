//! One mutation, decided against the folded log and collected before anything is written.
//!
//! A [`Txn`] overlays the changes of one operation on the folded task log: every changed
//! snapshot (in the order the reference's server would write them), the run-journal rows and the
//! audit events that accompany them. The operation's rules (gates, transitions, cascades) read
//! the overlay, so a cascade sees the tasks it has already moved. Nothing touches the disk until
//! the store commits the transaction; an operation that fails leaves no trace.

use std::collections::{BTreeSet, HashMap};

use bernstein_journal::audit::AuditEvent;
use bernstein_protocol::pyjson::{Object, Value};

use super::log::TaskLog;
use super::record::StoredTask;
use crate::error::Error;
use crate::lifecycle::{TaskStatus, UNSUCCESSFUL_TERMINAL_STATUSES};
use crate::model::{Task, TaskId};

/// Journal event names the status projection reads (`FORMATS.md` §3.2).
pub(crate) const EVENT_TASK_CLAIMED: &str = "task_claimed";
/// The task delivered.
pub(crate) const EVENT_TASK_COMPLETED: &str = "task_completed";
/// The task failed.
pub(crate) const EVENT_TASK_FAILED: &str = "task_failed";
/// The task was cancelled.
pub(crate) const EVENT_TASK_CANCELLED: &str = "task_cancelled";

/// One run-journal row to append to `.sdd/runs/task-<slug>/journal.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JournalRow {
    /// The task whose run journal receives the row.
    pub(crate) task_id: TaskId,
    /// The event name.
    pub(crate) event: &'static str,
    /// The payload keys, in order.
    pub(crate) payload: Object,
}

/// The changes of one operation.
#[derive(Debug)]
pub(crate) struct Txn<'a> {
    base: &'a TaskLog,
    overlay: HashMap<TaskId, StoredTask>,
    created: Vec<TaskId>,
    /// Snapshots to append, in order (a task changed twice appears twice).
    pub(crate) records: Vec<StoredTask>,
    /// Run-journal rows, in order.
    pub(crate) journal: Vec<JournalRow>,
    /// Audit events, in order.
    pub(crate) audit: Vec<AuditEvent>,
    /// The time every change of this transaction is stamped with.
    pub(crate) now: f64,
}

impl<'a> Txn<'a> {
    /// An empty transaction over `base`, stamped `now`.
    pub(crate) fn new(base: &'a TaskLog, now: f64) -> Txn<'a> {
        Txn {
            base,
            overlay: HashMap::new(),
            created: Vec::new(),
            records: Vec::new(),
            journal: Vec::new(),
            audit: Vec::new(),
            now,
        }
    }

    /// The snapshots, journal rows and audit events to write, in order.
    pub(crate) fn into_parts(self) -> (Vec<StoredTask>, Vec<JournalRow>, Vec<AuditEvent>) {
        (self.records, self.journal, self.audit)
    }

    /// The current snapshot of `id` (read back from the log unless the transaction changed it).
    pub(crate) fn get(&self, id: &TaskId) -> Result<Option<StoredTask>, Error> {
        match self.overlay.get(id) {
            Some(stored) => Ok(Some(stored.clone())),
            None => self.base.load(id),
        }
    }

    /// The current snapshot of `id`, or the reference's 404.
    pub(crate) fn require(&self, id: &TaskId) -> Result<StoredTask, Error> {
        self.get(id)?.ok_or_else(|| Error::NotFound {
            resource: crate::error::Resource::Task,
            id: id.to_string(),
        })
    }

    /// Whether a task with id `id` exists.
    pub(crate) fn contains(&self, id: &TaskId) -> bool {
        self.overlay.contains_key(id) || self.base.index().contains(id)
    }

    /// The current status of `id`, from the index (no record is read).
    pub(crate) fn status(&self, id: &TaskId) -> Option<TaskStatus> {
        match self.overlay.get(id) {
            Some(stored) => Some(stored.task.status),
            None => self.base.index().status(id),
        }
    }

    fn parent(&self, id: &TaskId) -> Option<&TaskId> {
        match self.overlay.get(id) {
            Some(stored) => stored.task.parent_task_id.as_ref(),
            None => self.base.index().parent(id),
        }
    }

    fn depends_on(&self, id: &TaskId) -> &[TaskId] {
        match self.overlay.get(id) {
            Some(stored) => &stored.task.depends_on,
            None => self.base.index().depends_on(id),
        }
    }

    /// The tasks whose parent is `parent`, in creation order (from the index's reverse map and
    /// this transaction's changes, not a scan of every task).
    pub(crate) fn children(&self, parent: &TaskId) -> Vec<TaskId> {
        let index = self.base.index();
        let mut known: Vec<(usize, TaskId)> = index
            .children(parent)
            .chain(self.overlay.keys())
            .filter(|id| self.parent(id) == Some(parent))
            .map(|id| (index.slot(id).unwrap_or(usize::MAX), id.clone()))
            .collect();
        known.sort();
        known.dedup();
        // Tasks created by this transaction come last, in the order they were created.
        let created_rank = |id: &TaskId| self.created.iter().position(|c| c == id);
        known.sort_by_key(|(slot, id)| (*slot, created_rank(id)));
        known.into_iter().map(|(_, id)| id).collect()
    }

    /// The tasks (outside `deps`) that depend on any task of `deps`.
    pub(crate) fn dependents(&self, deps: &BTreeSet<TaskId>) -> BTreeSet<TaskId> {
        let index = self.base.index();
        deps.iter()
            .flat_map(|dep| index.dependents(dep))
            .chain(self.overlay.keys())
            .filter(|id| !deps.contains(*id))
            .filter(|id| self.depends_on(id).iter().any(|dep| deps.contains(dep)))
            .cloned()
            .collect()
    }

    /// Whether any task names `id` as a dependency.
    pub(crate) fn is_referenced(&self, id: &TaskId) -> bool {
        self.base.index().is_referenced(id)
            || self
                .overlay
                .values()
                .any(|stored| stored.task.depends_on.contains(id))
    }

    /// Records a new or changed snapshot after checking every field rule.
    pub(crate) fn put(&mut self, stored: StoredTask) -> Result<(), Error> {
        stored.task.validate()?;
        let id = stored.task.id.clone();
        if !self.contains(&id) {
            self.created.push(id.clone());
        }
        self.records.push(stored.clone());
        self.overlay.insert(id, stored);
        Ok(())
    }

    /// Moves `stored` to `to` (the transition table decides), raising its version.
    pub(crate) fn transition(stored: &mut StoredTask, to: TaskStatus) -> Result<(), Error> {
        stored.task.transition_to(to)?;
        stored.task.version += 1;
        Ok(())
    }

    /// Queues a run-journal row for `task`: `task_id`, `status`, `task_version`, then `extra`.
    pub(crate) fn journal_row(
        &mut self,
        task: &Task,
        event: &'static str,
        extra: &[(&str, Value)],
    ) {
        let mut payload = Object::new()
            .with("task_id", &task.id)
            .with("status", task.status.as_str())
            .with("task_version", task.version);
        for (key, value) in extra {
            payload.insert(*key, value.clone());
        }
        self.journal.push(JournalRow {
            task_id: task.id.clone(),
            event,
            payload,
        });
    }

    /// Queues the reference's `task.claim_receipt` for a claim granted by id.
    pub(crate) fn claim_receipt(&mut self, stored: &StoredTask, claim_path: &str) {
        let task = &stored.task;
        let details = Object::new()
            .with("task_id", &task.id)
            .with("role", task.role.as_str())
            .with("claimed_by", stored.holder())
            .with(
                "depends_on",
                task.depends_on.iter().map(Value::from).collect::<Vec<_>>(),
            )
            .with("task_version", task.version)
            .with("claim_path", claim_path);
        self.audit.push(AuditEvent::new(
            "task.claim_receipt",
            "task_server",
            "task_claim",
            task.id.as_str(),
            details,
        ));
    }

    /// Queues the reference's `task.release_receipt` when `before` held a claim (the reference
    /// mints none for a task that was never claimed).
    pub(crate) fn release_receipt(
        &mut self,
        before: &StoredTask,
        after: &Task,
        release_path: &str,
        reason: &str,
    ) {
        if !before.holds_claim() {
            return;
        }
        let details = Object::new()
            .with("task_id", &after.id)
            .with("role", after.role.as_str())
            .with("released_by", before.holder())
            .with("task_version", after.version)
            .with("release_path", release_path)
            .with("reason", reason)
            .with("from_status", before.task.status.as_str())
            .with("to_status", after.status.as_str());
        self.audit.push(AuditEvent::new(
            "task.release_receipt",
            "task_store",
            "task_claim",
            after.id.as_str(),
            details,
        ));
    }

    /// Strands every task that can no longer run because the tasks in `seeds` ended without
    /// delivering (the reference's `_cascade_failed_dependency`): rings of dependents are moved
    /// to `blocked_by_failed_dep` in id order, each naming its nearest blocking dependency.
    /// Returns the stranded ids in the order they were moved.
    pub(crate) fn cascade_failed_dependency(
        &mut self,
        seeds: impl IntoIterator<Item = TaskId>,
    ) -> Result<Vec<TaskId>, Error> {
        let mut stranded = Vec::new();
        let mut frontier: BTreeSet<TaskId> = seeds.into_iter().collect();
        while !frontier.is_empty() {
            // In id order (a `BTreeSet`), as the reference sorts the ring.
            let candidates = self.dependents(&frontier);
            let mut next = BTreeSet::new();
            for candidate in candidates {
                // Read now: an earlier candidate of this ring may be this one's dependency.
                let Some(current) = self.get(&candidate)? else {
                    continue;
                };
                let Some((blocker, blocker_status)) = self.blocking_dependency(&current.task)
                else {
                    continue;
                };
                if !current
                    .task
                    .status
                    .can_transition_to(TaskStatus::BlockedByFailedDep)
                {
                    continue;
                }
                let reason = format!("dependency {blocker} is {blocker_status}");
                let mut moved = current.clone();
                Txn::transition(&mut moved, TaskStatus::BlockedByFailedDep)?;
                moved.task.result_summary = Some(reason.clone());
                moved.set_passthrough("terminal_reason", "blocked_by_failed_dependency");
                moved.task.metadata.insert("blocking_task_id", &blocker);
                self.put(moved.clone())?;
                self.release_receipt(&current, &moved.task, "failed_dependency_cascade", &reason);
                next.insert(moved.task.id.clone());
                stranded.push(moved.task.id);
            }
            frontier = next;
        }
        Ok(stranded)
    }

    /// The lowest-id direct dependency of `task` that ended without delivering, with its status.
    fn blocking_dependency(&self, task: &Task) -> Option<(TaskId, TaskStatus)> {
        let mut blockers: Vec<(TaskId, TaskStatus)> = task
            .depends_on
            .iter()
            .filter_map(|dep| {
                let status = self.status(dep)?;
                UNSUCCESSFUL_TERMINAL_STATUSES
                    .contains(&status)
                    .then(|| (dep.clone(), status))
            })
            .collect();
        blockers.sort_by(|a, b| a.0.cmp(&b.0));
        blockers.into_iter().next()
    }

    /// Completes each waiting ancestor whose direct children are all `done`, walking up from
    /// `parent` (the reference's `_complete_parent_if_ready`).
    pub(crate) fn complete_parents_if_ready(
        &mut self,
        parent: Option<TaskId>,
    ) -> Result<(), Error> {
        let mut current = parent;
        let mut visited = BTreeSet::new();
        while let Some(id) = current {
            if !visited.insert(id.clone()) {
                return Ok(());
            }
            if self.status(&id) != Some(TaskStatus::WaitingForSubtasks) {
                return Ok(());
            }
            let Some(stored) = self.get(&id)? else {
                return Ok(());
            };
            let children: Vec<Option<TaskStatus>> = self
                .children(&id)
                .iter()
                .map(|child| self.status(child))
                .collect();
            if children.is_empty() || children.iter().any(|s| *s != Some(TaskStatus::Done)) {
                return Ok(());
            }
            let mut done = stored;
            Txn::transition(&mut done, TaskStatus::Done)?;
            done.task.result_summary = Some(format!("Completed via {} subtasks", children.len()));
            done.task.completed_at = Some(self.now);
            self.put(done.clone())?;
            self.journal_row(&done.task, EVENT_TASK_COMPLETED, &[]);
            current = done.task.parent_task_id;
        }
        Ok(())
    }
}
