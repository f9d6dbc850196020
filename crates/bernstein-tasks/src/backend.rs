//! The task backend trait: everything the MCP tools ask of a task coordinator.
//!
//! Two implementations sit behind [`TaskBackend`]: the embedded store (`crate::embedded`), which
//! persists under `<workdir>/.sdd/`, and the remote backend, which fronts a running
//! `bernstein serve`. The tool handlers are written against the trait only, so they cannot tell
//! the two apart.
//!
//! The operations mirror the reference task server's routes the MCP layer calls
//! (`MCP_SURFACE.md` §1.3 and §9, `FORMATS.md` §8 and §9):
//!
//! | operation | route |
//! |---|---|
//! | [`TaskBackend::create_task`] | `POST /tasks` |
//! | [`TaskBackend::create_subtask`] | `POST /tasks/self-create` |
//! | [`TaskBackend::get_task`] | `GET /tasks/{id}` |
//! | [`TaskBackend::list_tasks`] | `GET /tasks?status=` |
//! | [`TaskBackend::claim_task`] | `POST /tasks/{id}/claim?expected_version=&claimed_by_session=` |
//! | [`TaskBackend::complete_task`] | `POST /tasks/{id}/complete` (worker completion) |
//! | [`TaskBackend::approve_task`] | `POST /tasks/{id}/complete` (sign-off of `pending_approval`) |
//! | [`TaskBackend::fail_task`] | `POST /tasks/{id}/fail` |
//! | [`TaskBackend::cancel_task`] | `POST /tasks/{id}/cancel` |
//! | [`TaskBackend::status_summary`] | `GET /status` |
//! | [`TaskBackend::create_plan`], [`TaskBackend::get_plan`], [`TaskBackend::list_plans`] | `POST/GET /plans` |
//! | [`TaskBackend::approve_plan`], [`TaskBackend::reject_plan`] | `POST /plans/{id}/approve\|reject` |
//!
//! Every failure is a [`crate::Error`]; [`crate::Error::kind`] classifies it the way the
//! reference's HTTP statuses do (404, 409, 422, 503, 500), so a transport can render the
//! reference's payloads. Nothing here depends on MCP or HTTP types.
//!
//! The methods return `impl Future + Send` rather than using an `async-trait` macro, so callers
//! can hold them across `.await` points in multi-threaded runtimes. The futures borrow their
//! arguments; the trait is not object-safe, and tool handlers are generic over `B: TaskBackend`.
//!
//! Gate checks that the reference MCP layer makes with a read before the write (completion,
//! approval, cancellation) are part of the operation here: a backend that can do so checks the
//! status and applies the transition atomically, and refuses with [`crate::Error::NotCompletable`],
//! [`crate::Error::NotApprovable`] or [`crate::Error::NotCancellable`]. A backend that cannot
//! (the remote one) checks with a read first, as the reference does.

use std::future::Future;

use bernstein_protocol::pyjson::{Object, Value};

use crate::error::Error;
use crate::lifecycle::TaskStatus;
use crate::model::{NewTask, Task, TaskId};
use crate::plan::{COST_DECIMALS, PlanContent, python_round};

/// Decimal places the reference keeps on the cost figures of `GET /status`.
pub const STATUS_COST_DECIMALS: u32 = 4;

/// A page request for [`TaskBackend::list_tasks`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListQuery {
    /// Only tasks in this status; `None` lists every status.
    pub status: Option<TaskStatus>,
    /// Continue after the page that returned this cursor; `None` starts at the first task.
    pub cursor: Option<String>,
    /// At most this many tasks; `None` returns every remaining task.
    pub limit: Option<usize>,
}

impl ListQuery {
    /// Every task, unfiltered and unpaginated.
    pub fn all() -> ListQuery {
        ListQuery::default()
    }

    /// Every task in `status`.
    pub fn with_status(status: TaskStatus) -> ListQuery {
        ListQuery {
            status: Some(status),
            ..ListQuery::default()
        }
    }
}

/// One page of [`TaskBackend::list_tasks`], in creation order.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks on this page.
    pub tasks: Vec<Task>,
    /// Pass this as [`ListQuery::cursor`] to read the next page; `None` on the last page.
    /// Cursors are opaque and only meaningful to the backend that issued them.
    pub next_cursor: Option<String>,
}

/// What a claim by id asks for (`POST /tasks/{id}/claim`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimRequest {
    /// Refuse with [`crate::Error::VersionConflict`] unless the task still has this version.
    pub expected_version: Option<u64>,
    /// The worker identity taking the claim (`claimed_by_session`).
    pub claimer: Option<String>,
    /// Dependencies the caller knows to be complete; a dependency counts as delivered when it is
    /// listed here or is `done`/`closed` in the backend.
    pub completed_ids: Vec<TaskId>,
}

/// The result of a cascading cancel (`POST /tasks/{id}/cancel`).
#[derive(Debug, Clone, PartialEq)]
pub struct CancelOutcome {
    /// The root task, now `cancelled`.
    pub task: Task,
    /// How many tasks below the root in the subtask tree were cancelled with it.
    pub cancelled_descendants: usize,
    /// Dependents of the cancelled tasks that were moved to `blocked_by_failed_dep`.
    pub blocked_dependents: Vec<TaskId>,
}

/// The result of signing off a held result ([`TaskBackend::approve_task`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalOutcome {
    /// The task, now `done`.
    pub task: Task,
    /// The status it was approved from (`pending_approval`).
    pub approved_from: TaskStatus,
}

/// Task counts for one role in [`StatusSummary::per_role`].
#[derive(Debug, Clone, PartialEq)]
pub struct RoleSummary {
    /// The role.
    pub role: String,
    /// Tasks of this role in `open`.
    pub open: u64,
    /// Tasks of this role in `claimed`.
    pub claimed: u64,
    /// Tasks of this role in `done`.
    pub done: u64,
    /// Tasks of this role in `failed`.
    pub failed: u64,
    /// Spend attributed to this role's tasks, rounded to 4 places; `None` when the backend has
    /// no cost record for the role (the reference then leaves `cost_usd` off the row).
    pub cost_usd: Option<f64>,
}

/// The task roll-up behind `bernstein_status` (`GET /status`).
///
/// Counts are of the exact statuses, as the reference counts them: `claimed` does not include
/// `in_progress`.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSummary {
    /// Every task.
    pub total: u64,
    /// Tasks in `open`.
    pub open: u64,
    /// Tasks in `claimed`.
    pub claimed: u64,
    /// Tasks in `done`.
    pub done: u64,
    /// Tasks in `failed`.
    pub failed: u64,
    /// Tasks in `refused`.
    pub refused: u64,
    /// One row per role, sorted by role.
    pub per_role: Vec<RoleSummary>,
    /// Total spend, rounded to 4 places.
    pub total_cost_usd: f64,
}

impl StatusSummary {
    /// Folds `tasks` into a summary the way the reference's `status_summary` does: exact-status
    /// counts, per-role rows sorted by role, costs rounded to 4 places. A role gets a `cost_usd`
    /// only when at least one of its tasks has a non-zero cost.
    pub fn from_tasks<'a>(tasks: impl IntoIterator<Item = &'a Task>) -> StatusSummary {
        let mut summary = StatusSummary {
            total: 0,
            open: 0,
            claimed: 0,
            done: 0,
            failed: 0,
            refused: 0,
            per_role: Vec::new(),
            total_cost_usd: 0.0,
        };
        let mut roles: std::collections::BTreeMap<&str, (RoleSummary, f64, bool)> =
            std::collections::BTreeMap::new();
        let mut total_cost = 0.0;
        for task in tasks {
            summary.total += 1;
            let entry = roles.entry(task.role.as_str()).or_insert_with(|| {
                (
                    RoleSummary {
                        role: task.role.clone(),
                        open: 0,
                        claimed: 0,
                        done: 0,
                        failed: 0,
                        cost_usd: None,
                    },
                    0.0,
                    false,
                )
            });
            match task.status {
                TaskStatus::Open => {
                    summary.open += 1;
                    entry.0.open += 1;
                }
                TaskStatus::Claimed => {
                    summary.claimed += 1;
                    entry.0.claimed += 1;
                }
                TaskStatus::Done => {
                    summary.done += 1;
                    entry.0.done += 1;
                }
                TaskStatus::Failed => {
                    summary.failed += 1;
                    entry.0.failed += 1;
                }
                TaskStatus::Refused => summary.refused += 1,
                _ => {}
            }
            if task.cost_usd > 0.0 {
                entry.1 += task.cost_usd;
                entry.2 = true;
                total_cost += task.cost_usd;
            }
        }
        summary.per_role = roles
            .into_values()
            .map(|(mut row, cost, has_cost)| {
                if has_cost {
                    row.cost_usd = Some(python_round(cost, STATUS_COST_DECIMALS));
                }
                row
            })
            .collect();
        summary.total_cost_usd = python_round(total_cost, STATUS_COST_DECIMALS);
        summary
    }

    /// The summary as the task-figure keys of `GET /status`, in the reference's order
    /// (`total, open, claimed, done, failed, refused, per_role, total_cost_usd`).
    pub fn to_object(&self) -> Object {
        let per_role: Vec<Value> = self
            .per_role
            .iter()
            .map(|row| {
                let mut object = Object::new()
                    .with("role", row.role.as_str())
                    .with("open", row.open)
                    .with("claimed", row.claimed)
                    .with("done", row.done)
                    .with("failed", row.failed);
                if let Some(cost) = row.cost_usd {
                    object.insert("cost_usd", cost);
                }
                Value::Object(object)
            })
            .collect();
        // The reference starts its total at the integer 0 and adds only positive costs, so a
        // project that has spent nothing reports `0`, not `0.0`.
        let total_cost_usd = if self.total_cost_usd == 0.0 {
            Value::from(0)
        } else {
            Value::from(self.total_cost_usd)
        };
        Object::new()
            .with("total", self.total)
            .with("open", self.open)
            .with("claimed", self.claimed)
            .with("done", self.done)
            .with("failed", self.failed)
            .with("refused", self.refused)
            .with("per_role", per_role)
            .with("total_cost_usd", total_cost_usd)
    }
}

/// Where a plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanStatus {
    /// Awaiting a decision.
    Pending,
    /// Approved: its tasks were promoted to `open`.
    Approved,
    /// Rejected: its tasks were cancelled.
    Rejected,
    /// Expired without a decision (set by the reference's planner; never by this crate).
    Expired,
}

impl PlanStatus {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Pending => "pending",
            PlanStatus::Approved => "approved",
            PlanStatus::Rejected => "rejected",
            PlanStatus::Expired => "expired",
        }
    }

    /// The status spelled `value`, or `None`.
    pub fn parse(value: &str) -> Option<PlanStatus> {
        [
            PlanStatus::Pending,
            PlanStatus::Approved,
            PlanStatus::Rejected,
            PlanStatus::Expired,
        ]
        .into_iter()
        .find(|status| status.as_str() == value)
    }
}

/// A stored plan: its reviewable content, the hash bound at creation and its decision.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRecord {
    /// What the rendering hash covers (id, goal, estimates, totals).
    pub content: PlanContent,
    /// Pending, approved or rejected.
    pub status: PlanStatus,
    /// Creation time, Unix seconds.
    pub created_at: f64,
    /// Decision time, Unix seconds.
    pub decided_at: Option<f64>,
    /// The reason given with the decision (`""` while pending).
    pub decision_reason: String,
    /// The rendering hash stored at creation (`""` for plans that predate it, which skip the
    /// check).
    pub rendering_hash: String,
}

impl PlanRecord {
    /// The plan id.
    pub fn id(&self) -> &str {
        &self.content.id
    }

    /// The plan as the reference's `TaskPlan.to_dict()`, keys in its order, costs rounded to 6
    /// places as it rounds them.
    pub fn to_object(&self) -> Object {
        let estimates: Vec<Value> = self
            .content
            .task_estimates
            .iter()
            .map(|estimate| {
                Value::Object(
                    Object::new()
                        .with("task_id", estimate.task_id.as_str())
                        .with("title", estimate.title.as_str())
                        .with("role", estimate.role.as_str())
                        .with("model", estimate.model.as_str())
                        .with("estimated_tokens", estimate.estimated_tokens)
                        .with(
                            "estimated_cost_usd",
                            python_round(estimate.estimated_cost_usd, COST_DECIMALS),
                        )
                        .with("risk_level", estimate.risk_level.as_str())
                        .with("risk_reasons", estimate.risk_reasons.clone()),
                )
            })
            .collect();
        Object::new()
            .with("id", self.content.id.as_str())
            .with("goal", self.content.goal.as_str())
            .with("task_estimates", estimates)
            .with(
                "total_estimated_cost_usd",
                python_round(self.content.total_estimated_cost_usd, COST_DECIMALS),
            )
            .with(
                "total_estimated_minutes",
                self.content.total_estimated_minutes,
            )
            .with("high_risk_tasks", self.content.high_risk_tasks.clone())
            .with("status", self.status.as_str())
            .with("created_at", self.created_at)
            .with("decided_at", self.decided_at)
            .with("decision_reason", self.decision_reason.as_str())
            .with("rendering_hash", self.rendering_hash.as_str())
    }
}

/// The result of deciding a plan (`POST /plans/{id}/approve|reject`).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDecision {
    /// The plan.
    pub plan_id: String,
    /// `approved` or `rejected`.
    pub status: PlanStatus,
    /// The `planned` tasks that moved: promoted to `open` on approval, cancelled on rejection.
    pub task_ids: Vec<TaskId>,
}

impl PlanDecision {
    /// The reference's response body: `{plan_id, status, tasks_promoted, promoted_task_ids}`
    /// for an approval, `{plan_id, status, tasks_cancelled, cancelled_task_ids}` for a rejection.
    pub fn to_object(&self) -> Object {
        let ids: Vec<Value> = self.task_ids.iter().map(Value::from).collect();
        let (count_key, ids_key) = match self.status {
            PlanStatus::Rejected => ("tasks_cancelled", "cancelled_task_ids"),
            PlanStatus::Approved | PlanStatus::Pending | PlanStatus::Expired => {
                ("tasks_promoted", "promoted_task_ids")
            }
        };
        Object::new()
            .with("plan_id", self.plan_id.as_str())
            .with("status", self.status.as_str())
            .with(count_key, self.task_ids.len())
            .with(ids_key, ids)
    }
}

/// A task coordinator the MCP tools can drive.
///
/// Every method returns a `Send` future; errors are [`crate::Error`] values classified by
/// [`crate::Error::kind`].
pub trait TaskBackend: Send + Sync {
    /// Creates an `open` task (`POST /tasks`). A `parent_task_id` in the request must name an
    /// existing task but does not split it; use [`TaskBackend::create_subtask`] for that. Every
    /// `depends_on` id must name an existing task.
    fn create_task(&self, request: NewTask) -> impl Future<Output = Result<Task, Error>> + Send;

    /// Creates an `open` subtask of `parent` (`POST /tasks/self-create`). The parent moves to
    /// `waiting_for_subtasks` with `result_summary = "Split into N subtasks"` unless it is
    /// already waiting, `done`, `failed` or `closed`. The request's own `parent_task_id` is
    /// replaced by `parent`.
    fn create_subtask(
        &self,
        parent: &TaskId,
        request: NewTask,
    ) -> impl Future<Output = Result<Task, Error>> + Send;

    /// The task with id `id`, or [`crate::Error::NotFound`].
    fn get_task(&self, id: &TaskId) -> impl Future<Output = Result<Task, Error>> + Send;

    /// Tasks in creation order, filtered by status and paginated.
    fn list_tasks(&self, query: &ListQuery)
    -> impl Future<Output = Result<TaskPage, Error>> + Send;

    /// Claims task `id` (`open` → `claimed`): refuses with a version conflict when
    /// `expected_version` is stale, and with [`crate::Error::DependenciesUnmet`] while a
    /// dependency has not delivered.
    fn claim_task(
        &self,
        id: &TaskId,
        claim: &ClaimRequest,
    ) -> impl Future<Output = Result<Task, Error>> + Send;

    /// Reports the worker's completion of task `id` with `result_summary`.
    ///
    /// The task must be worker-completable (`open`, `claimed`, `in_progress`) when the change is
    /// written, or the call fails with [`crate::Error::NotCompletable`] (for a `done` task too,
    /// as the MCP completion gate refuses it before the server's illegal-transition 409 could).
    /// An `open` task is claimed first. An empty (or all-whitespace) summary fails the task and returns
    /// [`crate::Error::EmptyResultSummary`]. Completing the last unfinished subtask of a
    /// `waiting_for_subtasks` parent completes the parent, up the ancestor chain.
    fn complete_task(
        &self,
        id: &TaskId,
        result_summary: &str,
    ) -> impl Future<Output = Result<Task, Error>> + Send;

    /// Signs off the held result of task `id` (`pending_approval` → `done`) with `note` as the
    /// result summary; refuses with [`crate::Error::NotApprovable`] from any other status.
    fn approve_task(
        &self,
        id: &TaskId,
        note: &str,
    ) -> impl Future<Output = Result<ApprovalOutcome, Error>> + Send;

    /// Fails task `id` with `reason` as its result summary (`POST /tasks/{id}/fail`). Its
    /// dependents move to `blocked_by_failed_dep`.
    fn fail_task(
        &self,
        id: &TaskId,
        reason: &str,
    ) -> impl Future<Output = Result<Task, Error>> + Send;

    /// Cancels task `id` and every cancellable task below it in the subtask tree
    /// (`POST /tasks/{id}/cancel`). The root gets `reason` as its summary, descendants
    /// `Cascade: parent <id> cancelled`; dependents of every cancelled task move to
    /// `blocked_by_failed_dep`. Refuses with [`crate::Error::NotCancellable`] unless the root is
    /// in a cancellable status.
    fn cancel_task(
        &self,
        id: &TaskId,
        reason: &str,
    ) -> impl Future<Output = Result<CancelOutcome, Error>> + Send;

    /// Task counts and spend, overall and per role (`GET /status`).
    fn status_summary(&self) -> impl Future<Output = Result<StatusSummary, Error>> + Send;

    /// Creates a plan for `goal` whose tasks are created `planned` (`POST /plans`), with a cost
    /// and risk estimate per task and the rendering hash bound to its content.
    fn create_plan(
        &self,
        goal: &str,
        tasks: Vec<NewTask>,
    ) -> impl Future<Output = Result<PlanRecord, Error>> + Send;

    /// The plan with id `plan_id`, or [`crate::Error::NotFound`].
    fn get_plan(&self, plan_id: &str) -> impl Future<Output = Result<PlanRecord, Error>> + Send;

    /// Every plan, newest first (as `GET /plans` lists them).
    fn list_plans(&self) -> impl Future<Output = Result<Vec<PlanRecord>, Error>> + Send;

    /// Approves a pending plan: its `planned` tasks become `open`. Refuses with
    /// [`crate::Error::PlanAlreadyDecided`] or [`crate::Error::PlanHashMismatch`].
    fn approve_plan(
        &self,
        plan_id: &str,
        reason: &str,
    ) -> impl Future<Output = Result<PlanDecision, Error>> + Send;

    /// Rejects a pending plan: its `planned` tasks are cancelled. Refuses like
    /// [`TaskBackend::approve_plan`].
    fn reject_plan(
        &self,
        plan_id: &str,
        reason: &str,
    ) -> impl Future<Output = Result<PlanDecision, Error>> + Send;
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::Dialect;

    use super::*;
    use crate::model::NewTask;

    fn task(id: &str, role: &str, status: TaskStatus, cost: f64) -> Task {
        let mut request = NewTask::new("t", "d");
        request.role = role.to_owned();
        let mut task = Task::new(TaskId::parse(id).unwrap(), request, 1.0).unwrap();
        task.status = status;
        task.cost_usd = cost;
        task
    }

    #[test]
    fn status_summary_counts_exact_statuses_per_role() {
        let tasks = [
            task("a", "backend", TaskStatus::Open, 0.0),
            task("b", "backend", TaskStatus::Claimed, 0.123_456),
            task("c", "qa", TaskStatus::InProgress, 0.0),
            task("d", "qa", TaskStatus::Done, 1.0),
            task("e", "backend", TaskStatus::Failed, 0.0),
            task("f", "docs", TaskStatus::Refused, 0.0),
        ];
        let summary = StatusSummary::from_tasks(&tasks);
        insta::assert_snapshot!(Value::Object(summary.to_object()).dumps(Dialect::PY_ROW));
    }

    #[test]
    fn plan_decision_shapes() {
        let approved = PlanDecision {
            plan_id: "86fb98ac29f1".into(),
            status: PlanStatus::Approved,
            task_ids: vec![TaskId::parse("a6876efd5ac5").unwrap()],
        };
        assert_eq!(
            Value::Object(approved.to_object()).dumps(Dialect::PY_ROW),
            r#"{"plan_id": "86fb98ac29f1", "status": "approved", "tasks_promoted": 1, "promoted_task_ids": ["a6876efd5ac5"]}"#
        );
        for status in [
            PlanStatus::Pending,
            PlanStatus::Approved,
            PlanStatus::Rejected,
            PlanStatus::Expired,
        ] {
            assert_eq!(PlanStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(PlanStatus::parse("Approved"), None);
    }
}
