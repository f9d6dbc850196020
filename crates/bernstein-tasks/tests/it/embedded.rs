//! The embedded store: the portable suite, then its files — the reference task-log format, the
//! backlog, the run journals and audit events, plans on disk, torn tails and compaction.

use std::path::{Path, PathBuf};

use bernstein_journal::audit;
use bernstein_journal::handle::{TaskStatus as RunStatus, project_task_status};
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{load_run_journal, task_run_id, verify_run_journal};
use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::backend::{ClaimRequest, ListQuery};
use bernstein_tasks::embedded::{EmbeddedStore, TornTail};
use bernstein_tasks::plan::PlanContent;
use bernstein_tasks::{Error, NewTask, TaskId, TaskStatus};

use crate::suite::{self, request};

/// The audit key every test store uses.
pub(crate) fn test_key() -> AuditKey {
    AuditKey::from_master_bytes(b"bernstein-tasks test key".to_vec())
}

/// A fresh project directory with a store that writes audit events.
pub(crate) fn project() -> (tempfile::TempDir, EmbeddedStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    (dir, store)
}

/// A claim the way `bernstein_claim` makes it on the embedded store: on the rows the store
/// holds, written back by the store.
pub(crate) fn claim_on_rows(
    store: &EmbeddedStore,
    dir: &Path,
    claimer: &str,
) -> bernstein_journal::claim::ClaimOutcome {
    use bernstein_journal::claim::{
        ClaimFilter, ClaimRequest as BacklogClaim, ClaimTime, claim_on_entries, entries_from_rows,
    };
    let request = BacklogClaim::new(claimer, ClaimFilter::default());
    store
        .claim_on_backlog(
            |rows| {
                let entries = entries_from_rows(rows.iter().copied(), "task-backlog.json")?;
                claim_on_entries(dir, test_key(), &request, entries, ClaimTime::now())
            },
            |outcome| {
                outcome
                    .granted()
                    .then_some(outcome.normalised_rows.as_slice())
            },
        )
        .unwrap()
        .unwrap()
}

/// A claim made on the backlog file by someone other than a store (the reference's receipt
/// route, as `claim_in_project` does it): granted, it names the task it took.
pub(crate) fn outsider_claim(dir: &Path) -> TaskId {
    use bernstein_journal::claim::{
        ClaimFilter, ClaimRequest as BacklogClaim, ClaimTime, claim_in_project,
    };
    let outside = claim_in_project(
        dir,
        test_key(),
        &BacklogClaim::new("outsider", ClaimFilter::default()),
        ClaimTime::now(),
    )
    .unwrap();
    TaskId::parse(&outside.receipt.task_id).expect("the outside claim was granted")
}

pub(crate) fn runtime(dir: &Path) -> PathBuf {
    dir.join(".sdd").join("runtime")
}

/// The task records of the log (not its evidence markers, seal lines or sealed debris).
fn log_lines(dir: &Path) -> Vec<Object> {
    std::fs::read_to_string(runtime(dir).join("tasks.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|line| Value::parse(line).ok()?.as_object().cloned())
        .filter(|record| record.contains_key("id"))
        .collect()
}

fn fixture(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vectors")
        .join(relative)
}

fn runtime_block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap()
        .block_on(future)
}

#[test]
fn the_portable_suite_passes() {
    let (_dir, store) = project();
    runtime_block_on(suite::suite(&store));
    assert_eq!(store.evidence_failures(), []);
    let report = store.audit_chain().unwrap().verify();
    assert!(report.ok(), "{:?}", report.verify_messages());
}

#[test]
fn the_plan_suite_passes_without_a_launch_flag() {
    let (_dir, store) = project();
    runtime_block_on(suite::plan_suite(&store));
}

#[test]
fn the_trait_also_runs_without_a_tokio_runtime() {
    // The futures run inline when no runtime is current; any executor can drive them.
    let (_dir, store) = project();
    let task = poll_once(bernstein_tasks::TaskBackend::create_task(
        &store,
        request("no runtime"),
    ))
    .unwrap();
    assert_eq!(store.get_task(&task.id).unwrap().status, TaskStatus::Open);
}

/// Drives a future that completes without waiting (the embedded store's futures do when no
/// runtime is present).
fn poll_once<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut context) {
        std::task::Poll::Ready(value) => value,
        std::task::Poll::Pending => panic!("the future waited"),
    }
}

#[test]
fn log_lines_are_the_reference_task_record_then_our_keys() {
    let (dir, store) = project();
    let task = store.create_task(request("format")).unwrap();
    store
        .claim_task(&task.id, &ClaimRequest::default())
        .unwrap();
    let reference: Vec<String> =
        std::fs::read_to_string(fixture("server_probe/.sdd/runtime/tasks.jsonl"))
            .unwrap()
            .lines()
            .next()
            .map(|line| {
                Value::parse(line)
                    .unwrap()
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap();
    let lines = log_lines(dir.path());
    assert_eq!(lines.len(), 2);
    for line in &lines {
        let keys: Vec<&str> = line.keys().collect();
        assert_eq!(keys[..reference.len()], reference);
        // The evidence the transaction owes rides last on its line (see the store's docs).
        assert_eq!(
            keys[reference.len()..],
            [
                "created_at",
                "model",
                "effort",
                "attempts",
                "cost_usd",
                "evidence"
            ]
        );
    }
    assert_eq!(lines[1].get("status").unwrap().as_str(), Some("claimed"));
    assert_eq!(lines[1].get("version").unwrap().as_i64(), Some(2));
}

#[test]
fn a_log_written_by_the_reference_server_is_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(runtime(dir.path())).unwrap();
    std::fs::copy(
        fixture("server_probe/.sdd/runtime/tasks.jsonl"),
        runtime(dir.path()).join("tasks.jsonl"),
    )
    .unwrap();
    let store = EmbeddedStore::open(dir.path(), None).unwrap();
    let all = store.list_tasks(&ListQuery::all()).unwrap().tasks;
    let statuses: Vec<(&str, TaskStatus)> = all.iter().map(|t| (t.id.as_str(), t.status)).collect();
    assert_eq!(
        statuses,
        [
            ("3ed7631685aa", TaskStatus::Cancelled),
            ("ac0fe2be5e50", TaskStatus::Cancelled),
            ("55ad7026909d", TaskStatus::Done),
            ("c2e62ed3dd8d", TaskStatus::Failed),
            ("ace605891267", TaskStatus::Failed),
            ("f6e4301edd4e", TaskStatus::Done),
        ]
    );
    let done = store
        .get_task(&TaskId::parse("55ad7026909d").unwrap())
        .unwrap();
    assert_eq!(done.claimed_by.as_deref(), Some("worker-a"));
    assert_eq!(done.version, 3);
    // Appending after the reference's lines keeps every unmodelled key of the task.
    let task = store.create_task(request("appended")).unwrap();
    store.cancel_task(&task.id, "x").unwrap();
    let cancelled_root = log_lines(dir.path())
        .into_iter()
        .find(|l| l.get("id").and_then(Value::as_str) == Some("3ed7631685aa"))
        .unwrap();
    assert_eq!(
        cancelled_root.get("eu_ai_act_risk").unwrap().as_str(),
        Some("high")
    );
}

#[test]
fn evidence_follows_each_mutation() {
    let (dir, store) = project();
    let mut req = request("evidence");
    req.depends_on = vec![TaskId::parse("b-1").unwrap()];
    let task = store.create_task(req).unwrap();
    let claim = ClaimRequest {
        claimer: Some("worker-a".into()),
        completed_ids: vec![TaskId::parse("b-1").unwrap()],
        ..ClaimRequest::default()
    };
    store.claim_task(&task.id, &claim).unwrap();
    let run_id = task_run_id(task.id.as_str());
    let rows = load_run_journal(dir.path(), &run_id).unwrap().rows;
    assert_eq!(project_task_status(&rows), RunStatus::Working);
    store.complete_task(&task.id, "ok").unwrap();

    let failing = store.create_task(request("will fail")).unwrap();
    store
        .claim_task(
            &failing.id,
            &ClaimRequest {
                claimer: Some("worker-b".into()),
                ..ClaimRequest::default()
            },
        )
        .unwrap();
    store.fail_task(&failing.id, "boom").unwrap();
    let never_claimed = store.create_task(request("cancel me")).unwrap();
    store.cancel_task(&never_claimed.id, "stop").unwrap();

    // Run journals: the rows the status projection reads, chained and verifiable.
    let rows = load_run_journal(dir.path(), &run_id).unwrap().rows;
    let events: Vec<&str> = rows
        .iter()
        .map(|r| r.get("event").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(events, ["task_claimed", "task_completed"]);
    assert_eq!(project_task_status(&rows), RunStatus::Completed);
    assert!(verify_run_journal(dir.path(), &run_id).unwrap().ok());
    let claimed_row: Vec<(&str, String)> = rows[0]
        .iter()
        .skip(7)
        .map(|(k, v)| (k, v.to_python_str()))
        .collect();
    assert_eq!(
        claimed_row,
        [
            ("task_id", task.id.to_string()),
            ("status", "claimed".to_owned()),
            ("task_version", "2".to_owned()),
            ("claimed_by", "worker-a".to_owned()),
        ]
    );
    let failed_rows = load_run_journal(dir.path(), &task_run_id(failing.id.as_str()))
        .unwrap()
        .rows;
    assert_eq!(project_task_status(&failed_rows), RunStatus::Failed);
    let cancelled_rows = load_run_journal(dir.path(), &task_run_id(never_claimed.id.as_str()))
        .unwrap()
        .rows;
    assert_eq!(project_task_status(&cancelled_rows), RunStatus::Cancelled);

    // Audit events: what the reference server writes for the same requests.
    let key = test_key();
    let audit_dir = dir.path().join(".sdd").join("audit");
    let records: Vec<audit::VerifiedRecord> = audit::verified_records(&audit_dir, &key).collect();
    let summary: Vec<(String, String, String, String)> = records
        .iter()
        .map(|r| {
            (
                r.event_type.clone(),
                r.actor.clone(),
                r.resource_type.clone(),
                r.resource_id.clone(),
            )
        })
        .collect();
    let row = |event: &str, actor: &str, kind: &str, id: &TaskId| {
        (
            event.to_owned(),
            actor.to_owned(),
            kind.to_owned(),
            id.to_string(),
        )
    };
    assert_eq!(
        summary,
        [
            row("task.created", "task_server", "task", &task.id),
            row("task.claim_receipt", "task_server", "task_claim", &task.id),
            row("task.created", "task_server", "task", &failing.id),
            row(
                "task.claim_receipt",
                "task_server",
                "task_claim",
                &failing.id
            ),
            row(
                "task.release_receipt",
                "task_store",
                "task_claim",
                &failing.id
            ),
            row("task.created", "task_server", "task", &never_claimed.id),
        ]
    );
    let keys = |details: &Object| {
        let mut keys: Vec<String> = details.keys().map(str::to_owned).collect();
        keys.sort();
        keys
    };
    // Same detail keys as the reference vector's events of each type.
    let reference = reference_detail_keys();
    for record in &records {
        assert_eq!(
            keys(&record.details),
            reference[&record.event_type],
            "{}",
            record.event_type
        );
    }
    let release = &records[4].details;
    assert_eq!(release.get("release_path").unwrap().as_str(), Some("fail"));
    assert_eq!(
        release.get("released_by").unwrap().as_str(),
        Some("worker-b")
    );
    assert_eq!(
        release.get("from_status").unwrap().as_str(),
        Some("claimed")
    );
    assert_eq!(release.get("to_status").unwrap().as_str(), Some("failed"));
    assert_eq!(
        records[1].details.get("claim_path").unwrap().as_str(),
        Some("by_id")
    );
    assert!(audit::verify(&audit_dir, &key).ok());
}

fn reference_detail_keys() -> std::collections::HashMap<String, Vec<String>> {
    let text =
        std::fs::read_to_string(fixture("server_probe/.sdd/audit/2026-11-30.jsonl")).unwrap();
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        let record = Value::parse(line).unwrap();
        let record = record.as_object().unwrap();
        let event = record
            .get("event_type")
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        let mut keys: Vec<String> = record
            .get("details")
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .map(str::to_owned)
            .collect();
        keys.sort();
        out.insert(event, keys);
    }
    out
}

#[test]
fn a_store_without_a_key_writes_no_audit_chain() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), None).unwrap();
    let task = store.create_task(request("no key")).unwrap();
    store.complete_task(&task.id, "done").unwrap();
    assert!(!dir.path().join(".sdd").join("audit").exists());
    assert!(store.audit_chain().is_none());
}

/// The rows of the project's backlog file.
pub(crate) fn backlog(dir: &Path) -> Vec<Object> {
    let text = std::fs::read_to_string(runtime(dir).join("task-backlog.json")).unwrap();
    Value::parse(&text)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_object().unwrap().clone())
        .collect()
}

fn row_summary(rows: &[Object]) -> Vec<(String, String, String)> {
    rows.iter()
        .map(|r| {
            (
                r.get("id").unwrap().to_python_str(),
                r.get("status").unwrap().to_python_str(),
                r.get("claimer").unwrap().to_python_str(),
            )
        })
        .collect()
}

#[test]
fn the_backlog_tracks_claimable_tasks_and_adopts_receipt_claims() {
    let (dir, store) = project();
    // A foreign row (hand-written, like the claim vector's) is kept in place.
    std::fs::write(
        runtime(dir.path()).join("task-backlog.json"),
        "[\n  {\n    \"id\": \"b-1\",\n    \"status\": \"done\",\n    \"claimer\": \"x\",\n    \"role\": \"backend\"\n  }\n]",
    )
    .unwrap();
    let first = store.create_task(request("first")).unwrap();
    let second = store.create_task(request("second")).unwrap();
    // Mutations leave the file alone; a reader that needs it current syncs it.
    assert!(
        !std::fs::read_to_string(runtime(dir.path()).join("task-backlog.json"))
            .unwrap()
            .contains(first.id.as_str())
    );
    store.sync_backlog().unwrap();
    let text = std::fs::read_to_string(runtime(dir.path()).join("task-backlog.json")).unwrap();
    assert!(text.starts_with("[\n  {\n    \"id\": \"b-1\""), "{text}");
    assert_eq!(
        row_summary(&backlog(dir.path())),
        [
            ("b-1".into(), "done".into(), "x".into()),
            (first.id.to_string(), "open".into(), "None".into()),
            (second.id.to_string(), "open".into(), "None".into()),
        ]
    );
    store
        .claim_task(
            &first.id,
            &ClaimRequest {
                claimer: Some("worker-a".into()),
                ..ClaimRequest::default()
            },
        )
        .unwrap();
    store.sync_backlog().unwrap();
    assert_eq!(
        row_summary(&backlog(dir.path()))[1],
        (
            first.id.to_string(),
            "in_progress".into(),
            "worker-a".into()
        )
    );
    store.complete_task(&first.id, "done").unwrap();
    store.sync_backlog().unwrap();
    assert_eq!(
        backlog(dir.path()).len(),
        2,
        "a done task leaves the backlog"
    );

    // A claim-receipt writer claims the second task on the file, without the store.
    let mut rows = backlog(dir.path());
    rows[1].insert("status", "in_progress");
    rows[1].insert("claimer", "worker-r");
    rows[1].insert("attempts", 1);
    rows[1].insert("claimed_at", 12.5);
    let text = bernstein_journal::handle::render_indent2(&Value::Array(
        rows.into_iter().map(Value::Object).collect(),
    ));
    std::fs::write(runtime(dir.path()).join("task-backlog.json"), text).unwrap();
    // The next mutation adopts it, so the store never hands the task out again.
    store.create_task(request("third")).unwrap();
    let adopted = store.get_task(&second.id).unwrap();
    assert_eq!(adopted.status, TaskStatus::Claimed);
    assert_eq!(adopted.claimed_by.as_deref(), Some("worker-r"));
    assert_eq!(adopted.claimed_at, Some(12.5));
    assert!(matches!(
        store.claim_task(&second.id, &ClaimRequest::default()),
        Err(Error::NotClaimable { .. })
    ));
    let rows = load_run_journal(dir.path(), &task_run_id(second.id.as_str()))
        .unwrap()
        .rows;
    assert_eq!(rows[0].get("event").unwrap().as_str(), Some("task_claimed"));
}

#[test]
fn an_unreadable_backlog_is_reported_and_left_alone() {
    let (dir, store) = project();
    let path = runtime(dir.path()).join("task-backlog.json");
    std::fs::write(&path, "not json").unwrap();
    store.create_task(request("x")).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not json");
    let failures = store.evidence_failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].target, "backlog");
}

/// A rejected plan's tasks end cancelled in their run journals too, so their handles say so;
/// an approved plan's tasks get no such row.
#[test]
fn a_plan_rejection_journals_each_cancelled_task_and_an_approval_does_not() {
    let (dir, store) = project();
    let events = |id: &TaskId| -> Vec<String> {
        let run_id = task_run_id(id.as_str());
        let journal = dir
            .path()
            .join(".sdd/runs")
            .join(&run_id)
            .join("journal.jsonl");
        if !journal.exists() {
            return Vec::new();
        }
        load_run_journal(dir.path(), &run_id)
            .unwrap()
            .rows
            .iter()
            .map(|row| row.get("event").unwrap().as_str().unwrap().to_owned())
            .collect()
    };
    let approved = store
        .create_plan("approved goal", vec![request("A0")])
        .unwrap();
    let decision = store.approve_plan(approved.id(), "yes").unwrap();
    assert_eq!(events(&decision.task_ids[0]), Vec::<String>::new());
    let rejected = store
        .create_plan("rejected goal", vec![request("R0"), request("R1")])
        .unwrap();
    let decision = store.reject_plan(rejected.id(), "no").unwrap();
    assert_eq!(decision.task_ids.len(), 2);
    for id in &decision.task_ids {
        assert_eq!(events(id), ["task_cancelled"], "{id}");
        let rows = load_run_journal(dir.path(), &task_run_id(id.as_str()))
            .unwrap()
            .rows;
        assert_eq!(project_task_status(&rows), RunStatus::Cancelled);
    }
}

/// A parent with no edge to `waiting_for_subtasks` (here a cancelled one) still takes a
/// subtask and keeps its own status, as the reference's self-create route does; only a parent
/// that can wait moves to waiting.
#[test]
fn a_subtask_of_a_parent_that_cannot_wait_leaves_the_parent_alone() {
    let (_dir, store) = project();
    let parent = store.create_task(request("parent")).unwrap();
    store.cancel_task(&parent.id, "stopped").unwrap();
    let child = store
        .create_subtask(&parent.id, request("late child"))
        .unwrap();
    assert_eq!(child.status, TaskStatus::Open);
    assert_eq!(child.parent_task_id.as_ref(), Some(&parent.id));
    let after = store.get_task(&parent.id).unwrap();
    assert_eq!(after.status, TaskStatus::Cancelled);
    assert_eq!(store.get_task(&child.id).unwrap().status, TaskStatus::Open);
}

#[test]
fn exact_refusals() {
    let (_dir, store) = project();
    let task = store.create_task(request("refusals")).unwrap();
    let parent = store.create_task(request("parent")).unwrap();
    store.create_subtask(&parent.id, request("child")).unwrap();
    let check = |result: Result<_, Error>, expect: &str| {
        assert_eq!(
            result
                .map(|_: bernstein_tasks::Task| ())
                .unwrap_err()
                .to_string(),
            expect
        );
    };
    check(
        store.complete_task(&parent.id, "x"),
        &format!(
            "Task '{}' is in status 'waiting_for_subtasks' and cannot be completed by its worker",
            parent.id
        ),
    );
    store
        .claim_task(
            &task.id,
            &ClaimRequest {
                claimer: Some("worker-a".into()),
                ..ClaimRequest::default()
            },
        )
        .unwrap();
    check(
        store.claim_task(&task.id, &ClaimRequest::default()),
        &format!(
            "task {} is not open (status=claimed); cannot claim (already claimed by session 'worker-a')",
            task.id
        ),
    );
    check(
        store.claim_task(
            &parent.id,
            &ClaimRequest {
                expected_version: Some(1),
                ..ClaimRequest::default()
            },
        ),
        &format!("Task '{}' version conflict: expected 1, found 2", parent.id),
    );
    let missing = TaskId::parse("nope").unwrap();
    check(store.get_task(&missing), "Task 'nope' not found");
    check(
        store.create_subtask(&missing, request("x")),
        "Parent task 'nope' not found",
    );
    let err = store.complete_task(&task.id, "").unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Cannot complete task '{}': result_summary must be non-empty (provide diff or log reference). Task auto-failed with reason='completion missing summary'.",
            task.id
        )
    );
    assert_eq!(err.http_status(), 422);
    check(
        store.fail_task(&task.id, "x"),
        &format!(
            "Illegal task transition: 'failed' -> 'failed' (entity {})",
            task.id
        ),
    );
    assert!(matches!(
        store.approve_task(&task.id, "ok"),
        Err(Error::NotApprovable {
            status: TaskStatus::Failed,
            ..
        })
    ));
    assert!(matches!(
        store.list_tasks(&ListQuery {
            cursor: Some("ffffffffffff".into()),
            ..ListQuery::default()
        }),
        Err(Error::InvalidCursor(_))
    ));
    assert!(matches!(
        store.list_tasks(&ListQuery {
            limit: Some(0),
            ..ListQuery::default()
        }),
        Err(Error::InvalidRequest(_))
    ));
}

#[test]
fn plan_documents_match_the_reference_and_refuse_edited_content() {
    let (dir, store) = project();
    let tasks: Vec<NewTask> = ["P0", "P1"]
        .iter()
        .map(|title| {
            let mut req = NewTask::new(*title, "");
            req.estimated_minutes = 10;
            req
        })
        .collect();
    let plan = store.create_plan("goal one", tasks).unwrap();
    let path = runtime(dir.path())
        .join("plans")
        .join(format!("{}.json", plan.id()));
    let text = std::fs::read_to_string(&path).unwrap();

    // Given the reference vector's ids, our estimates render to the reference's stored hash.
    let reference =
        Value::parse(&std::fs::read_to_string(fixture("http/plans.json")).unwrap()).unwrap();
    let reference_plan = reference
        .as_object()
        .unwrap()
        .get("list")
        .unwrap()
        .as_array()
        .unwrap()[1]
        .as_object()
        .unwrap()
        .clone();
    let renamed = text
        .replace(plan.id(), "86fb98ac29f1")
        .replace(&plan.content.task_estimates[0].task_id, "a6876efd5ac5")
        .replace(&plan.content.task_estimates[1].task_id, "6884a80d4f24");
    let content = PlanContent::from_stored(&Value::parse(&renamed).unwrap()).unwrap();
    assert_eq!(
        content.rendering_hash(),
        reference_plan
            .get("rendering_hash")
            .unwrap()
            .as_str()
            .unwrap()
    );

    // Editing the goal after review is caught, and nothing moves.
    std::fs::write(&path, text.replace("goal one", "goal edited")).unwrap();
    let log_before = std::fs::read(runtime(dir.path()).join("tasks.jsonl")).unwrap();
    let err = store.approve_plan(plan.id(), "ok").unwrap_err();
    assert!(matches!(err, Error::PlanHashMismatch { .. }));
    assert_eq!(err.http_status(), 409);
    assert!(err.to_string().starts_with(&format!(
        "Plan {} rendering hash mismatch: stored {}, current ",
        plan.id(),
        plan.rendering_hash
    )));
    assert_eq!(
        std::fs::read(runtime(dir.path()).join("tasks.jsonl")).unwrap(),
        log_before
    );
    for estimate in &plan.content.task_estimates {
        let id = TaskId::parse(&estimate.task_id).unwrap();
        assert_eq!(store.get_task(&id).unwrap().status, TaskStatus::Planned);
    }
}

#[test]
fn a_torn_tail_is_skipped_reported_and_sealed_on_the_next_append() {
    let (dir, store) = project();
    let task = store.create_task(request("before the tear")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let intact = std::fs::read(&log).unwrap();
    let mut torn = intact.clone();
    torn.extend_from_slice(b"{\"id\": \"abc\", \"title\": \"half a rec");
    std::fs::write(&log, &torn).unwrap();

    let reopened = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    assert_eq!(
        reopened.get_task(&task.id).unwrap().title,
        "before the tear"
    );
    let tear = TornTail {
        offset: intact.len() as u64,
        length: (torn.len() - intact.len()) as u64,
        removed: false,
    };
    assert_eq!(reopened.torn_tails(), [tear]);
    // Reads never write: the debris is still there.
    assert_eq!(std::fs::read(&log).unwrap(), torn);

    let after = reopened.create_task(request("after the tear")).unwrap();
    assert_eq!(
        reopened.torn_tails(),
        [
            tear,
            TornTail {
                removed: true,
                ..tear
            }
        ]
    );
    let lines = log_lines(dir.path());
    assert_eq!(lines.len(), 2);
    // Sealed in place, never cut: the bytes may belong to a writer that takes no lock.
    assert!(std::fs::read(&log).unwrap().starts_with(&torn));
    // The first store catches up on the other instance's append.
    assert_eq!(store.get_task(&after.id).unwrap().title, "after the tear");
}

#[test]
fn a_half_written_transaction_is_a_torn_tail() {
    let (dir, store) = project();
    let parent = store.create_task(request("parent")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let before = std::fs::read(&log).unwrap();
    store.create_subtask(&parent.id, request("child")).unwrap();
    let after = std::fs::read(&log).unwrap();
    let text = std::str::from_utf8(&after[before.len()..]).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].ends_with("\"batch\": [1, 2]}"), "{}", lines[0]);
    // Keep only the first record of the pair, newline included: the split never happened.
    let mut half = before.clone();
    half.extend_from_slice(lines[0].as_bytes());
    half.push(b'\n');
    std::fs::write(&log, &half).unwrap();
    let reopened = EmbeddedStore::open(dir.path(), None).unwrap();
    assert_eq!(
        reopened.list_tasks(&ListQuery::all()).unwrap().tasks.len(),
        1
    );
    assert_eq!(
        reopened.get_task(&parent.id).unwrap().status,
        TaskStatus::Open
    );
    assert_eq!(reopened.torn_tails().len(), 1);
}

#[test]
fn compaction_keeps_every_task_and_other_instances_follow() {
    let (dir, store) = project();
    let other = EmbeddedStore::open(dir.path(), None).unwrap();
    let mut ids = Vec::new();
    for n in 0..10 {
        let task = store.create_task(request(&format!("c{n}"))).unwrap();
        store.complete_task(&task.id, "done").unwrap();
        ids.push(task.id);
    }
    let before = store.list_tasks(&ListQuery::all()).unwrap();
    assert_eq!(other.list_tasks(&ListQuery::all()).unwrap(), before);
    let compaction = store.compact().unwrap();
    assert_eq!(compaction.tasks, 10);
    assert!(compaction.bytes_after < compaction.bytes_before);
    assert_eq!(log_lines(dir.path()).len(), 10);
    assert_eq!(store.list_tasks(&ListQuery::all()).unwrap(), before);
    // The other instance sees a new file and re-reads it, then keeps appending to it.
    assert_eq!(other.list_tasks(&ListQuery::all()).unwrap(), before);
    let extra = other.create_task(request("after compaction")).unwrap();
    assert_eq!(store.get_task(&extra.id).unwrap().title, "after compaction");
    let names: Vec<String> = std::fs::read_dir(runtime(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp."))
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

/// A log that has grown to 4096 records or more, eight or more per task, is compacted by the
/// next mutation that leaves no evidence owed: the task's history folds into its snapshot.
#[test]
fn a_long_history_is_compacted_by_the_next_mutation() {
    let (dir, store) = project();
    let task = store.create_task(request("busy")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text
        .lines()
        .find(|line| line.contains("\"version\": 1"))
        .unwrap();
    // Snapshots that owe no evidence (the first one's is written, as its marker says).
    let line = format!("{}}}", &line[..line.find(", \"evidence\": ").unwrap()]);
    let history: String = (2..=4096)
        .map(|version| {
            format!(
                "{}\n",
                line.replace("\"version\": 1", &format!("\"version\": {version}"))
            )
        })
        .collect();
    std::fs::write(&log, format!("{text}{history}")).unwrap();
    let reopened = EmbeddedStore::open(dir.path(), None).unwrap();
    assert_eq!(reopened.get_task(&task.id).unwrap().version, 4096);
    assert!(log_lines(dir.path()).len() >= 4096);
    reopened.complete_task(&task.id, "done").unwrap();
    let records = log_lines(dir.path());
    assert_eq!(records.len(), 1, "one snapshot per task after compaction");
    assert_eq!(
        reopened.get_task(&task.id).unwrap().status,
        TaskStatus::Done
    );
}

#[test]
fn a_held_result_is_signed_off_only_from_pending_approval() {
    // No transition enters `pending_approval`; the orchestrator writes it. Model that with a
    // snapshot line like the ones the reference appends.
    let (dir, store) = project();
    let task = store.create_task(request("held")).unwrap();
    let log = runtime(dir.path()).join("tasks.jsonl");
    let line = std::fs::read_to_string(&log).unwrap();
    let held = line
        .replace("\"status\": \"open\"", "\"status\": \"pending_approval\"")
        .replace("\"version\": 1", "\"version\": 2");
    let mut text = line.clone();
    text.push_str(&held);
    std::fs::write(&log, text).unwrap();

    assert!(matches!(
        store.complete_task(&task.id, "worker says done"),
        Err(Error::NotCompletable {
            status: TaskStatus::PendingApproval,
            ..
        })
    ));
    assert!(matches!(
        store.approve_task(&task.id, "  "),
        Err(Error::InvalidRequest(_))
    ));
    let outcome = store.approve_task(&task.id, "Approved via MCP").unwrap();
    assert_eq!(outcome.approved_from, TaskStatus::PendingApproval);
    assert_eq!(outcome.task.status, TaskStatus::Done);
    assert_eq!(
        outcome.task.result_summary.as_deref(),
        Some("Approved via MCP")
    );
    assert_eq!(outcome.task.version, 3);
    assert!(matches!(
        store.approve_task(&task.id, "again"),
        Err(Error::NotApprovable {
            status: TaskStatus::Done,
            ..
        })
    ));
    let rows = load_run_journal(dir.path(), &task_run_id(task.id.as_str()))
        .unwrap()
        .rows;
    assert_eq!(project_task_status(&rows), RunStatus::Completed);
}

/// The last handle of a store that changed tasks leaves the backlog file current when it
/// closes, so a reader started after it finds it so; a store that changed nothing writes
/// nothing on close.
#[test]
fn closing_a_store_that_changed_tasks_brings_the_backlog_in_step() {
    let (dir, store) = project();
    let backlog = runtime(dir.path()).join("task-backlog.json");
    let task = store.create_task(request("t")).unwrap();
    drop(store);
    let text = std::fs::read_to_string(&backlog).expect("the backlog was written on close");
    assert!(text.contains(task.id.as_str()), "{text}");

    std::fs::remove_file(&backlog).unwrap();
    let reader = EmbeddedStore::open(dir.path(), Some(test_key())).unwrap();
    assert_eq!(reader.get_task(&task.id).unwrap().id, task.id);
    drop(reader);
    assert!(
        !backlog.exists(),
        "a store that changed nothing wrote the backlog on close"
    );
}
