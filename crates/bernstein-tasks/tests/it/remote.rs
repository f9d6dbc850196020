//! The remote backend against a live Bernstein task server.
//!
//! [`live_server`] is ignored in a plain `cargo test`: it needs a running `bernstein serve`,
//! named by `BERNSTEIN_REMOTE_URL` (and `BERNSTEIN_AUTH_TOKEN` holding the token it was started
//! with). `.ci/run` installs the reference, starts its task server on a free loopback port and
//! runs this test with `--ignored`; `cargo xtask interop evidence` does the same. Run without the
//! variable, the test fails rather than pass without checking anything. It runs the portable
//! [`TaskBackend`] suite ([`crate::suite::suite`], the same checks the embedded store passes) and
//! then the remote-only checks below, one after the other, so the suite's whole-store
//! consistency checks are not disturbed by concurrent writes. The offline coverage of the backend
//! is the scripted-server suite in `src/remote/tests.rs`.
//!
//! To run it against the reference server, from a scratch directory:
//!
//! ```text
//! mkdir .sdd && BERNSTEIN_AUTH_TOKEN=dev BERNSTEIN_AUDIT_KEY_PATH=<0600 key file> \
//!     bernstein serve --host 127.0.0.1 --port 8766 &
//! BERNSTEIN_REMOTE_URL=http://127.0.0.1:8766 BERNSTEIN_AUTH_TOKEN=dev \
//!     cargo test -p bernstein-tasks --test it remote::live_server -- --ignored --nocapture
//! ```
//!
//! Every check creates its own tasks (the remote-only ones with a role unique to the run), so
//! the server may already hold tasks. One run creates 33 tasks, and the reference server refuses
//! more than 100 tasks in the default tenant (429 `Tenant default has reached max_tasks limit
//! (100)`), so start a fresh server after three runs. The plan suite is not run: `bernstein serve` never enables
//! plan mode, and the server has no route that creates a plan (see the `remote` module doc).

use std::io::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::backend::{ClaimRequest, ListQuery, TaskBackend};
use bernstein_tasks::remote::{
    FailureKind, RemoteBackend, RemoteConfig, SubscribeOutcome, TraceContext,
};
use bernstein_tasks::{Error, NewTask, Resource, TaskId, TaskStatus};

/// Writes one progress line straight to the terminal: the test harness captures the print
/// macros, and the run's progress should show in CI's log.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "live_server: {line}");
}

#[tokio::test]
#[ignore = "live server: run by .ci/run and `cargo xtask interop evidence` with BERNSTEIN_REMOTE_URL set"]
async fn live_server() {
    let url = std::env::var("BERNSTEIN_REMOTE_URL").expect(
        "BERNSTEIN_REMOTE_URL names no server: set it and BERNSTEIN_AUTH_TOKEN to run the \
         TaskBackend suite and the remote checks against a live `bernstein serve`",
    );
    let token = std::env::var("BERNSTEIN_AUTH_TOKEN").ok();
    let backend =
        RemoteBackend::new(RemoteConfig::new(url.as_str()).with_bearer_token(token)).unwrap();
    say(&format!("running against {url}"));
    crate::suite::suite(&backend).await;
    say("TaskBackend suite passed");
    task_lifecycle(&backend).await;
    dependencies_block_a_claim(&backend).await;
    mailbox_artifacts_receipts_and_costs(&backend).await;
    plans_are_off_under_bernstein_serve(&backend).await;
    subscription_sees_a_new_task(&backend).await;
    trace_headers_reach_the_task(&backend).await;
    administrative_runs(&backend).await;
    wrong_token_says_what_to_set(&backend).await;
    say("remote-only checks passed");
}

/// A role no other test or run uses, so `task.created` events and listings stay apart.
fn unique_role(stem: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{stem}-{nanos:x}")
}

fn new_task(title: &str, role: &str) -> NewTask {
    let mut request = NewTask::new(title, format!("{title} (live remote test)"));
    request.role = role.to_owned();
    request
}

fn obj(pairs: &[(&str, Value)]) -> Object {
    pairs.iter().cloned().collect()
}

fn field<'a>(value: &'a Value, key: &str) -> &'a Value {
    value
        .as_object()
        .and_then(|o| o.get(key))
        .unwrap_or_else(|| panic!("no {key:?} in {value:?}"))
}

async fn task_lifecycle(backend: &RemoteBackend) {
    let role = unique_role("live");

    // Create, read back, split into a subtask.
    let root = backend
        .create_task(new_task("Live root", &role))
        .await
        .unwrap();
    assert_eq!(root.status, TaskStatus::Open);
    assert_eq!(root.version, 1);
    assert_eq!(backend.get_task(&root.id).await.unwrap().id, root.id);
    let sub = backend
        .create_subtask(&root.id, new_task("Live sub", &role))
        .await
        .unwrap();
    assert_eq!(sub.parent_task_id.as_ref(), Some(&root.id));
    let parent = backend.get_task(&root.id).await.unwrap();
    assert_eq!(parent.status, TaskStatus::WaitingForSubtasks);
    assert_eq!(
        parent.result_summary.as_deref(),
        Some("Split into 1 subtasks")
    );

    // A waiting parent is neither completable nor approvable; nothing is written.
    assert_eq!(
        backend.complete_task(&root.id, "x").await.unwrap_err(),
        Error::NotCompletable {
            task_id: root.id.to_string(),
            status: TaskStatus::WaitingForSubtasks
        }
    );
    assert!(matches!(
        backend.approve_task(&root.id, "ok").await.unwrap_err(),
        Error::NotApprovable { .. }
    ));

    // Claim with optimistic locking, then the conflicts.
    let worker = backend
        .create_task(new_task("Live worker", &role))
        .await
        .unwrap();
    let claim = ClaimRequest {
        expected_version: Some(1),
        claimer: Some("worker-live".into()),
        completed_ids: Vec::new(),
    };
    let claimed = backend.claim_task(&worker.id, &claim).await.unwrap();
    assert_eq!(claimed.status, TaskStatus::Claimed);
    assert_eq!(claimed.version, 2);
    assert_eq!(
        backend.claim_task(&worker.id, &claim).await.unwrap_err(),
        Error::VersionConflict {
            task_id: worker.id.to_string(),
            expected: 1,
            actual: 2
        }
    );
    let again = backend
        .claim_task(&worker.id, &ClaimRequest::default())
        .await
        .unwrap_err();
    assert_eq!(
        again,
        Error::NotClaimable {
            task_id: worker.id.to_string(),
            status: TaskStatus::Claimed,
            holder: Some("worker-live".into())
        }
    );

    // Complete, then the reference's refusal of a second completion.
    let done = backend.complete_task(&worker.id, "did x").await.unwrap();
    assert_eq!(done.status, TaskStatus::Done);
    assert_eq!(done.result_summary.as_deref(), Some("did x"));
    let refusal = Error::IllegalTransition {
        task_id: worker.id.to_string(),
        from: TaskStatus::Done,
        to: TaskStatus::Done,
    };
    assert_eq!(
        backend
            .complete_task(&worker.id, "again")
            .await
            .unwrap_err(),
        refusal
    );
    // The server's own 409 for the same request maps to the same error and text.
    let raw = backend
        .client()
        .complete_task(&worker.id, "again")
        .await
        .unwrap_err();
    assert_eq!(raw.kind(), FailureKind::Conflict);
    assert_eq!(raw.detail_text(), Some(refusal.to_string()));
    assert_eq!(Error::from(raw), refusal);

    // An empty summary fails the task (422 empty_result_summary).
    let empty = backend
        .create_task(new_task("Live empty", &role))
        .await
        .unwrap();
    backend
        .claim_task(&empty.id, &ClaimRequest::default())
        .await
        .unwrap();
    assert_eq!(
        backend.complete_task(&empty.id, "").await.unwrap_err(),
        Error::EmptyResultSummary {
            task_id: empty.id.to_string()
        }
    );
    assert_eq!(
        backend.get_task(&empty.id).await.unwrap().status,
        TaskStatus::Failed
    );

    // Fail.
    let failing = backend
        .create_task(new_task("Live failing", &role))
        .await
        .unwrap();
    backend
        .claim_task(&failing.id, &ClaimRequest::default())
        .await
        .unwrap();
    let failed = backend.fail_task(&failing.id, "boom").await.unwrap();
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.result_summary.as_deref(), Some("boom"));

    // Cancel cascades to the subtask; a second cancel is refused with the server's text.
    let outcome = backend.cancel_task(&root.id, "stop").await.unwrap();
    assert_eq!(outcome.task.status, TaskStatus::Cancelled);
    assert_eq!(outcome.task.result_summary.as_deref(), Some("stop"));
    assert_eq!(outcome.cancelled_descendants, 1);
    let cascaded = backend.get_task(&sub.id).await.unwrap();
    assert_eq!(cascaded.status, TaskStatus::Cancelled);
    assert_eq!(
        cascaded.result_summary,
        Some(format!("Cascade: parent {} cancelled", root.id))
    );
    let error = backend.cancel_task(&root.id, "again").await.unwrap_err();
    assert_eq!(
        error,
        Error::NotCancellable {
            task_id: root.id.to_string(),
            status: TaskStatus::Cancelled
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "Task '{}' cannot be cancelled from status 'cancelled'",
            root.id
        )
    );

    // Unknown ids.
    let missing = TaskId::parse("live-missing-task").unwrap();
    assert_eq!(
        backend
            .create_subtask(&missing, new_task("Orphan", &role))
            .await
            .unwrap_err(),
        Error::NotFound {
            resource: Resource::ParentTask,
            id: missing.to_string()
        }
    );
    assert_eq!(
        backend.get_task(&missing).await.unwrap_err(),
        Error::NotFound {
            resource: Resource::Task,
            id: missing.to_string()
        }
    );

    // Listing: filtered, paginated, and unpaginated agree.
    let cancelled = backend
        .list_tasks(&ListQuery::with_status(TaskStatus::Cancelled))
        .await
        .unwrap();
    for id in [&root.id, &sub.id] {
        assert!(
            cancelled.tasks.iter().any(|t| &t.id == id),
            "{id} not listed"
        );
    }
    // One cancelled task per page, in the same order as the unpaginated listing.
    let mut query = ListQuery {
        status: Some(TaskStatus::Cancelled),
        cursor: None,
        limit: Some(1),
    };
    for expected in cancelled.tasks.iter().take(2) {
        let page = backend.list_tasks(&query).await.unwrap();
        assert_eq!(page.tasks.len(), 1);
        assert_eq!(&page.tasks[0].id, &expected.id);
        query.cursor = page.next_cursor;
    }

    let summary = backend.status_summary().await.unwrap();
    assert!(summary.total >= 6, "{summary:?}");
    assert!(
        summary.per_role.iter().any(|r| r.role == role),
        "{summary:?}"
    );
}

async fn dependencies_block_a_claim(backend: &RemoteBackend) {
    let role = unique_role("live-deps");
    let dependency = backend
        .create_task(new_task("Live dep", &role))
        .await
        .unwrap();
    let mut request = new_task("Live dependent", &role);
    request.depends_on = vec![dependency.id.clone()];
    let dependent = backend.create_task(request).await.unwrap();
    assert_eq!(
        backend
            .claim_task(&dependent.id, &ClaimRequest::default())
            .await
            .unwrap_err(),
        Error::DependenciesUnmet {
            task_id: dependent.id.to_string(),
            unmet: vec![dependency.id.to_string()]
        }
    );
}

async fn mailbox_artifacts_receipts_and_costs(backend: &RemoteBackend) {
    let client = backend.client();
    let role = unique_role("live-raw");
    let task = backend
        .create_task(new_task("Live raw", &role))
        .await
        .unwrap();
    backend
        .claim_task(
            &task.id,
            &ClaimRequest {
                claimer: Some("worker-live".into()),
                ..ClaimRequest::default()
            },
        )
        .await
        .unwrap();

    // The mailbox entry comes back signed and redacted, and the listing holds the same bytes.
    let entry = client
        .post_message(
            &task.id,
            &obj(&[
                ("sender", "worker-live".into()),
                ("kind", "finding".into()),
                ("body", "token: abc123 found".into()),
            ]),
        )
        .await
        .unwrap();
    assert_eq!(
        field(&entry, "body").as_str(),
        Some("token: ***REDACTED***")
    );
    assert_eq!(field(&entry, "redaction_count").as_i64(), Some(1));
    assert!(
        field(&entry, "entry_hash")
            .as_str()
            .unwrap()
            .starts_with("hmac-sha256:")
    );
    let listed = client.list_messages(&task.id, None).await.unwrap();
    assert!(listed.as_array().unwrap().contains(&entry), "{listed:?}");

    // Artifacts: the claim holder may post, anyone else is refused with 403.
    let artifact = obj(&[
        ("key", "summary".into()),
        ("artifact_type", "report".into()),
        ("poster", "worker-live".into()),
        ("body", "# hi".into()),
    ]);
    let record = client
        .post_artifact(&task.id, "worker-live", &artifact)
        .await
        .unwrap();
    assert_eq!(field(&record, "verified"), &Value::Bool(true));
    assert_eq!(field(&record, "version").as_i64(), Some(1));
    let refused = client
        .post_artifact(&task.id, "mallory", &artifact)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), FailureKind::Forbidden);
    let records = client.list_artifacts(&task.id).await.unwrap();
    assert!(records.as_array().is_some() || records.as_object().is_some());
    let progress = client.task_progress(&task.id).await.unwrap();
    assert!(field(&progress, "vector_hash").as_str().is_some());

    // A claim receipt: signed either way, refused for a role with no work.
    let receipt = client
        .claim_receipt(&obj(&[
            ("claimer_id", "worker-live".into()),
            ("completed_ids", Value::Array(Vec::new())),
            ("role", unique_role("nobody").into()),
        ]))
        .await
        .unwrap();
    assert_eq!(field(&receipt, "granted"), &Value::Bool(false));
    assert_eq!(field(&receipt, "taskId").as_str(), Some(""));
    assert_eq!(field(&receipt, "specRevision").as_str(), Some("2026-07-28"));

    let costs = client.costs_current().await.unwrap();
    assert!(field(&costs, "spent_usd").as_f64().is_some());
    let status = client.status().await.unwrap();
    assert!(field(&status, "per_role").as_array().is_some());
}

async fn plans_are_off_under_bernstein_serve(backend: &RemoteBackend) {
    assert_eq!(
        backend.list_plans().await.unwrap_err(),
        Error::PlanModeDisabled
    );
    assert_eq!(
        backend.get_plan("86fb98ac29f1").await.unwrap_err(),
        Error::PlanModeDisabled
    );
    assert_eq!(
        backend
            .approve_plan("86fb98ac29f1", "ok")
            .await
            .unwrap_err(),
        Error::PlanModeDisabled
    );
}

async fn subscription_sees_a_new_task(backend: &RemoteBackend) {
    let role = unique_role("live-sse");
    let creator = backend.clone();
    let create_role = role.clone();
    let (outcome, created) = tokio::join!(
        backend.client().subscribe(&role, Duration::from_secs(20)),
        async move {
            // Give the subscription time to register before the task exists: the stream has
            // no replay.
            tokio::time::sleep(Duration::from_millis(500)).await;
            creator
                .create_task(new_task("Live event", &create_role))
                .await
        }
    );
    let created = created.unwrap();
    let SubscribeOutcome::Notification(notification) = outcome.unwrap() else {
        panic!("no notification for {}", created.id);
    };
    assert_eq!(
        field(&notification, "task_id").as_str(),
        Some(created.id.as_str())
    );
    assert_eq!(field(&notification, "title").as_str(), Some("Live event"));

    let quiet = backend
        .client()
        .subscribe(&unique_role("live-quiet"), Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(quiet, SubscribeOutcome::TimedOut);
}

async fn trace_headers_reach_the_task(backend: &RemoteBackend) {
    let trace = TraceContext {
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("vendor=1".into()),
        baggage: Some("userId=alice".into()),
    };
    let traced = backend.with_trace(&trace).unwrap();
    let task = traced
        .create_task(new_task("Live traced", &unique_role("live-trace")))
        .await
        .unwrap();
    // The server records the forwarded trace context in the task's metadata.
    assert_eq!(
        task.metadata.get("traceparent").and_then(Value::as_str),
        trace.traceparent.as_deref()
    );
    assert_eq!(
        task.metadata.get("baggage").and_then(Value::as_str),
        Some("userId=alice")
    );
}

async fn administrative_runs(backend: &RemoteBackend) {
    let run = backend
        .client()
        .create_administrative_run("Live administrative run")
        .await
        .unwrap();
    let run_id = field(&run, "runId").as_str().unwrap().to_owned();
    assert!(run_id.starts_with("admin-"), "{run_id}");
    let read = backend
        .client()
        .get_administrative_run(&run_id)
        .await
        .unwrap();
    assert_eq!(field(&read, "runId").as_str(), Some(run_id.as_str()));
}

async fn wrong_token_says_what_to_set(backend: &RemoteBackend) {
    let wrong = RemoteBackend::new(
        RemoteConfig::new(backend.client().base_url())
            .with_bearer_token(Some("not-the-token".into())),
    )
    .unwrap();
    let error = wrong.status_summary().await.unwrap_err();
    let Error::Remote { status, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*status, 401);
    assert!(message.contains("BERNSTEIN_AUTH_TOKEN"), "{message}");
}
