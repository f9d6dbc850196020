//! The behavioural suite of [`TaskBackend`], written against the trait only.
//!
//! Every check creates its own tasks and looks only at those (plus consistency checks over the
//! whole store), so the suite can run against a live `bernstein serve` that already holds tasks:
//! the remote backend's tests call [`suite`] (and [`plan_suite`] where plan mode is on) with
//! their backend. Refusals are checked by [`ErrorKind`], the HTTP-like class both backends
//! share; the embedded tests check exact variants on top.

use bernstein_tasks::backend::{ClaimRequest, ListQuery, PlanStatus, TaskBackend};
use bernstein_tasks::{Error, ErrorKind, NewTask, Task, TaskId, TaskStatus};

/// A request with a recognisable title.
pub fn request(title: &str) -> NewTask {
    NewTask::new(title, format!("suite task: {title}"))
}

fn claim_by(worker: &str) -> ClaimRequest {
    ClaimRequest {
        claimer: Some(worker.to_owned()),
        ..ClaimRequest::default()
    }
}

#[track_caller]
fn assert_kind<T: std::fmt::Debug>(result: Result<T, Error>, kind: ErrorKind) -> Error {
    match result {
        Ok(value) => panic!("expected a {kind:?} error, got {value:?}"),
        Err(error) => {
            assert_eq!(error.kind(), kind, "{error}");
            error
        }
    }
}

async fn status_of<B: TaskBackend>(backend: &B, id: &TaskId) -> TaskStatus {
    backend.get_task(id).await.expect("get").status
}

/// Runs every portable check.
pub async fn suite<B: TaskBackend>(backend: &B) {
    create_and_get(backend).await;
    claim_then_complete(backend).await;
    completion_auto_claims_an_open_task(backend).await;
    empty_summary_fails_the_task(backend).await;
    subtasks_split_and_complete_their_parent(backend).await;
    cancel_cascades_over_the_subtask_tree(backend).await;
    dependencies_gate_claims(backend).await;
    failure_strands_dependents(backend).await;
    unknown_ids_are_not_found(backend).await;
    listing_pages_cover_the_unpaginated_list(backend).await;
    status_counts_agree_with_the_list(backend).await;
}

async fn create_and_get<B: TaskBackend>(backend: &B) {
    let mut req = request("create and get");
    req.role = "qa".into();
    req.priority = 1;
    let created = backend.create_task(req).await.expect("create");
    assert_eq!(created.status, TaskStatus::Open);
    assert_eq!(created.version, 1);
    assert_eq!(created.role, "qa");
    assert_eq!(created.priority, 1);
    assert!(bernstein_protocol::encoding::is_lower_hex(
        created.id.as_str(),
        12
    ));
    let read = backend.get_task(&created.id).await.expect("get");
    assert_eq!(read.id, created.id);
    assert_eq!(read.title, "create and get");
    assert_eq!(read.status, TaskStatus::Open);
}

async fn claim_then_complete<B: TaskBackend>(backend: &B) {
    let task = backend
        .create_task(request("claim then complete"))
        .await
        .unwrap();
    let stale = ClaimRequest {
        expected_version: Some(task.version + 1),
        ..claim_by("worker-a")
    };
    assert_kind(
        backend.claim_task(&task.id, &stale).await,
        ErrorKind::Conflict,
    );
    let current = ClaimRequest {
        expected_version: Some(task.version),
        ..claim_by("worker-a")
    };
    let claimed = backend.claim_task(&task.id, &current).await.unwrap();
    assert_eq!(claimed.status, TaskStatus::Claimed);
    assert_eq!(claimed.version, task.version + 1);
    assert!(claimed.claimed_at.is_some());
    // Claimed twice: refused, and the first claim stands.
    assert_kind(
        backend.claim_task(&task.id, &claim_by("worker-b")).await,
        ErrorKind::Conflict,
    );
    let done = backend.complete_task(&task.id, "did it").await.unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert_eq!(done.result_summary.as_deref(), Some("did it"));
    assert!(done.completed_at.is_some());
    // Completing a done task again is refused and changes nothing.
    assert_kind(
        backend.complete_task(&task.id, "again").await,
        ErrorKind::Conflict,
    );
    let read = backend.get_task(&task.id).await.unwrap();
    assert_eq!(read.result_summary.as_deref(), Some("did it"));
}

async fn completion_auto_claims_an_open_task<B: TaskBackend>(backend: &B) {
    let task = backend.create_task(request("auto claim")).await.unwrap();
    let done = backend
        .complete_task(&task.id, "done directly")
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert!(done.claimed_at.is_some(), "an open task is claimed first");
    assert_eq!(done.version, task.version + 2);
}

async fn empty_summary_fails_the_task<B: TaskBackend>(backend: &B) {
    let task = backend.create_task(request("empty summary")).await.unwrap();
    backend
        .claim_task(&task.id, &ClaimRequest::default())
        .await
        .unwrap();
    let error = assert_kind(
        backend.complete_task(&task.id, "   ").await,
        ErrorKind::Invalid,
    );
    assert!(
        error
            .to_string()
            .contains("result_summary must be non-empty"),
        "{error}"
    );
    let failed = backend.get_task(&task.id).await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(
        failed.result_summary.as_deref(),
        Some("completion missing summary")
    );
}

async fn subtasks_split_and_complete_their_parent<B: TaskBackend>(backend: &B) {
    let grandparent = backend.create_task(request("grandparent")).await.unwrap();
    let parent = backend
        .create_subtask(&grandparent.id, request("parent"))
        .await
        .unwrap();
    assert_eq!(parent.parent_task_id.as_ref(), Some(&grandparent.id));
    let waiting = backend.get_task(&grandparent.id).await.unwrap();
    assert_eq!(waiting.status, TaskStatus::WaitingForSubtasks);
    assert_eq!(
        waiting.result_summary.as_deref(),
        Some("Split into 1 subtasks")
    );
    let first = backend
        .create_subtask(&parent.id, request("child one"))
        .await
        .unwrap();
    let second = backend
        .create_subtask(&parent.id, request("child two"))
        .await
        .unwrap();
    let parent_now = backend.get_task(&parent.id).await.unwrap();
    assert_eq!(parent_now.status, TaskStatus::WaitingForSubtasks);
    // The split is recorded once: a parent already waiting keeps its first summary.
    assert_eq!(
        parent_now.result_summary.as_deref(),
        Some("Split into 1 subtasks")
    );
    // A waiting parent completes only through its subtasks.
    assert_kind(
        backend.complete_task(&parent.id, "by hand").await,
        ErrorKind::Conflict,
    );
    backend.complete_task(&first.id, "one").await.unwrap();
    assert_eq!(
        status_of(backend, &parent.id).await,
        TaskStatus::WaitingForSubtasks
    );
    backend.complete_task(&second.id, "two").await.unwrap();
    let parent_done = backend.get_task(&parent.id).await.unwrap();
    assert_eq!(parent_done.status, TaskStatus::Done);
    assert_eq!(
        parent_done.result_summary.as_deref(),
        Some("Completed via 2 subtasks")
    );
    // The completion bubbles up: the grandparent's only child is now done.
    let grandparent_done = backend.get_task(&grandparent.id).await.unwrap();
    assert_eq!(grandparent_done.status, TaskStatus::Done);
    assert_eq!(
        grandparent_done.result_summary.as_deref(),
        Some("Completed via 1 subtasks")
    );
    // An unknown parent is a 404 and creates nothing.
    let missing = TaskId::parse("000000000000").unwrap();
    assert_kind(
        backend.create_subtask(&missing, request("orphan")).await,
        ErrorKind::NotFound,
    );
}

async fn cancel_cascades_over_the_subtask_tree<B: TaskBackend>(backend: &B) {
    let root = backend.create_task(request("cancel root")).await.unwrap();
    let child = backend
        .create_subtask(&root.id, request("cancel child"))
        .await
        .unwrap();
    let grandchild = backend
        .create_subtask(&child.id, request("cancel grandchild"))
        .await
        .unwrap();
    let finished = backend
        .create_subtask(&root.id, request("finished child"))
        .await
        .unwrap();
    backend.complete_task(&finished.id, "early").await.unwrap();
    let mut dependent_request = request("depends on the child");
    dependent_request.depends_on = vec![child.id.clone()];
    let dependent = backend.create_task(dependent_request).await.unwrap();

    let outcome = backend.cancel_task(&root.id, "stop").await.unwrap();
    assert_eq!(outcome.task.id, root.id);
    assert_eq!(outcome.task.status, TaskStatus::Cancelled);
    assert_eq!(outcome.task.result_summary.as_deref(), Some("stop"));
    assert_eq!(outcome.cancelled_descendants, 2);
    for id in [&child.id, &grandchild.id] {
        let task = backend.get_task(id).await.unwrap();
        assert_eq!(task.status, TaskStatus::Cancelled);
        assert_eq!(
            task.result_summary,
            Some(format!("Cascade: parent {} cancelled", root.id))
        );
    }
    assert_eq!(status_of(backend, &finished.id).await, TaskStatus::Done);
    let blocked = backend.get_task(&dependent.id).await.unwrap();
    assert_eq!(blocked.status, TaskStatus::BlockedByFailedDep);
    assert_eq!(
        blocked.result_summary,
        Some(format!("dependency {} is cancelled", child.id))
    );
    // A cancelled task cannot be cancelled again.
    let error = assert_kind(
        backend.cancel_task(&root.id, "again").await,
        ErrorKind::Conflict,
    );
    assert_eq!(
        error.to_string(),
        format!(
            "Task '{}' cannot be cancelled from status 'cancelled'",
            root.id
        )
    );
}

async fn dependencies_gate_claims<B: TaskBackend>(backend: &B) {
    let first = backend.create_task(request("dependency")).await.unwrap();
    let mut gated = request("gated");
    gated.depends_on = vec![first.id.clone()];
    let gated = backend.create_task(gated).await.unwrap();
    assert_kind(
        backend.claim_task(&gated.id, &claim_by("worker-a")).await,
        ErrorKind::Conflict,
    );
    assert_eq!(status_of(backend, &gated.id).await, TaskStatus::Open);
    backend.complete_task(&first.id, "unblocks").await.unwrap();
    let claimed = backend
        .claim_task(&gated.id, &claim_by("worker-a"))
        .await
        .unwrap();
    assert_eq!(claimed.status, TaskStatus::Claimed);
}

async fn failure_strands_dependents<B: TaskBackend>(backend: &B) {
    let failing = backend.create_task(request("will fail")).await.unwrap();
    let mut next = request("after the failure");
    next.depends_on = vec![failing.id.clone()];
    let next = backend.create_task(next).await.unwrap();
    let mut after_next = request("two hops away");
    after_next.depends_on = vec![next.id.clone()];
    let after_next = backend.create_task(after_next).await.unwrap();
    backend
        .claim_task(&failing.id, &claim_by("worker-f"))
        .await
        .unwrap();
    let failed = backend.fail_task(&failing.id, "boom").await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.result_summary.as_deref(), Some("boom"));
    let stranded = backend.get_task(&next.id).await.unwrap();
    assert_eq!(stranded.status, TaskStatus::BlockedByFailedDep);
    // Transitive strands name their nearest cause.
    let far = backend.get_task(&after_next.id).await.unwrap();
    assert_eq!(far.status, TaskStatus::BlockedByFailedDep);
    assert_eq!(
        far.result_summary,
        Some(format!("dependency {} is blocked_by_failed_dep", next.id))
    );
    // Failing a failed task again is an illegal transition.
    assert_kind(
        backend.fail_task(&failing.id, "again").await,
        ErrorKind::Conflict,
    );
}

async fn unknown_ids_are_not_found<B: TaskBackend>(backend: &B) {
    let missing = TaskId::parse("ffffffffffff").unwrap();
    assert_kind(backend.get_task(&missing).await, ErrorKind::NotFound);
    assert_kind(
        backend.claim_task(&missing, &ClaimRequest::default()).await,
        ErrorKind::NotFound,
    );
    assert_kind(
        backend.complete_task(&missing, "x").await,
        ErrorKind::NotFound,
    );
    assert_kind(backend.fail_task(&missing, "x").await, ErrorKind::NotFound);
    assert_kind(
        backend.cancel_task(&missing, "x").await,
        ErrorKind::NotFound,
    );
}

async fn listing_pages_cover_the_unpaginated_list<B: TaskBackend>(backend: &B) {
    for n in 0..5 {
        backend
            .create_task(request(&format!("listed {n}")))
            .await
            .unwrap();
    }
    let everything = backend.list_tasks(&ListQuery::all()).await.unwrap();
    assert_eq!(everything.next_cursor, None);
    let mut paged: Vec<Task> = Vec::new();
    let mut query = ListQuery {
        limit: Some(2),
        ..ListQuery::default()
    };
    loop {
        let page = backend.list_tasks(&query).await.unwrap();
        assert!(page.tasks.len() <= 2);
        paged.extend(page.tasks);
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
    }
    let ids = |tasks: &[Task]| tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&paged), ids(&everything.tasks));
    let open = backend
        .list_tasks(&ListQuery::with_status(TaskStatus::Open))
        .await
        .unwrap();
    assert!(open.tasks.iter().all(|t| t.status == TaskStatus::Open));
    let open_in_full: Vec<TaskId> = everything
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Open)
        .map(|t| t.id.clone())
        .collect();
    assert_eq!(ids(&open.tasks), open_in_full);
}

async fn status_counts_agree_with_the_list<B: TaskBackend>(backend: &B) {
    let everything = backend.list_tasks(&ListQuery::all()).await.unwrap().tasks;
    let summary = backend.status_summary().await.unwrap();
    let count =
        |status: TaskStatus| everything.iter().filter(|t| t.status == status).count() as u64;
    assert_eq!(summary.total, everything.len() as u64);
    assert_eq!(summary.open, count(TaskStatus::Open));
    assert_eq!(summary.claimed, count(TaskStatus::Claimed));
    assert_eq!(summary.done, count(TaskStatus::Done));
    assert_eq!(summary.failed, count(TaskStatus::Failed));
    let role_rows: u64 = summary
        .per_role
        .iter()
        .map(|r| r.open + r.claimed + r.done + r.failed)
        .sum();
    assert_eq!(
        role_rows,
        summary.open + summary.claimed + summary.done + summary.failed
    );
    let mut roles: Vec<&str> = summary.per_role.iter().map(|r| r.role.as_str()).collect();
    let sorted = {
        let mut copy = roles.clone();
        copy.sort_unstable();
        copy
    };
    assert_eq!(roles, sorted);
    roles.dedup();
    assert_eq!(roles.len(), summary.per_role.len());
}

/// Plan mode: planned tasks, approval promotes, rejection cancels, decisions are final.
pub async fn plan_suite<B: TaskBackend>(backend: &B) {
    let mut first = request("P0");
    first.estimated_minutes = 10;
    let mut second = request("P1");
    second.estimated_minutes = 10;
    let plan = backend
        .create_plan("goal one", vec![first, second])
        .await
        .unwrap();
    assert_eq!(plan.status, PlanStatus::Pending);
    assert_eq!(plan.content.goal, "goal one");
    assert_eq!(plan.content.task_estimates.len(), 2);
    assert_eq!(plan.content.total_estimated_minutes, 20);
    assert_eq!(plan.rendering_hash, plan.content.rendering_hash());
    let ids: Vec<TaskId> = plan
        .content
        .task_estimates
        .iter()
        .map(|e| TaskId::parse(&e.task_id).unwrap())
        .collect();
    for id in &ids {
        assert_eq!(status_of(backend, id).await, TaskStatus::Planned);
        // A planned task is not claimable, and not completable by a worker.
        assert_kind(
            backend.claim_task(id, &ClaimRequest::default()).await,
            ErrorKind::Conflict,
        );
        assert_kind(backend.complete_task(id, "x").await, ErrorKind::Conflict);
    }
    assert_eq!(backend.get_plan(plan.id()).await.unwrap(), plan);
    assert!(
        backend
            .list_plans()
            .await
            .unwrap()
            .iter()
            .any(|p| p.id() == plan.id())
    );

    let decision = backend.approve_plan(plan.id(), "ship it").await.unwrap();
    assert_eq!(decision.status, PlanStatus::Approved);
    assert_eq!(decision.task_ids, ids);
    for id in &ids {
        assert_eq!(status_of(backend, id).await, TaskStatus::Open);
    }
    let decided = backend.get_plan(plan.id()).await.unwrap();
    assert_eq!(decided.status, PlanStatus::Approved);
    assert_eq!(decided.decision_reason, "ship it");
    assert!(decided.decided_at.is_some());
    let again = assert_kind(
        backend.approve_plan(plan.id(), "twice").await,
        ErrorKind::Conflict,
    );
    assert_eq!(again.to_string(), "Plan already approved");

    let rejected_plan = backend
        .create_plan("goal two", vec![request("P2")])
        .await
        .unwrap();
    let rejection = backend.reject_plan(rejected_plan.id(), "no").await.unwrap();
    assert_eq!(rejection.status, PlanStatus::Rejected);
    assert_eq!(rejection.task_ids.len(), 1);
    assert_eq!(
        status_of(backend, &rejection.task_ids[0]).await,
        TaskStatus::Cancelled
    );
    assert_kind(
        backend.reject_plan(rejected_plan.id(), "again").await,
        ErrorKind::Conflict,
    );
    assert_kind(backend.get_plan("000000000000").await, ErrorKind::NotFound);
}
