//! The pull-worker loop over MCP alone against the embedded store: run, claim, post a message,
//! post an artifact, complete, and the run handle reads `completed`.

use serde_json::json;

use crate::common::{Project, config, payload};

#[tokio::test(flavor = "multi_thread")]
async fn run_claim_message_artifact_complete() {
    let project = Project::new(config(true));

    let run = project
        .call(
            "bernstein_run",
            json!({"goal": "Add auth to the API", "role": "backend"}),
        )
        .await;
    let started = payload(&run);
    let task_id = started["task_id"].as_str().unwrap().to_owned();
    assert_eq!(started["status"], "open");
    assert_eq!(started["run_id"], format!("task-{task_id}"));
    assert_eq!(started["poll_after_ms"], 5000);
    assert_eq!(run.structured.as_ref().unwrap()["result"], started);

    let claim = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-1", "role": "backend"}),
        )
        .await;
    let receipt = payload(&claim);
    assert_eq!(receipt["granted"], true, "{}", claim.text);
    assert_eq!(receipt["taskId"], task_id.as_str());
    assert_eq!(receipt["specRevision"], "2026-07-28");
    assert!(receipt["signature"].as_str().unwrap().len() > 40);

    let refused = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-2", "role": "backend"}),
        )
        .await;
    assert_eq!(payload(&refused)["granted"], false, "{}", refused.text);
    assert_eq!(payload(&refused)["taskId"], "");

    let message = project
        .call(
            "bernstein_post_message",
            json!({"task_id": task_id, "sender": "worker-1", "body": "found the login route",
                   "kind": "finding"}),
        )
        .await;
    let entry = payload(&message);
    assert_eq!(entry["seq"], 0, "{}", message.text);
    assert_eq!(entry["prev_entry_hash"], "genesis");
    assert!(
        entry["entry_hash"]
            .as_str()
            .unwrap()
            .starts_with("hmac-sha256:")
    );
    assert_eq!(entry["sender_card_fingerprint"], "unregistered");

    let stranger = project
        .call(
            "bernstein_post_artifact",
            json!({"task_id": task_id, "key": "report", "artifact_type": "report",
                   "poster": "someone-else", "body": "# nope"}),
        )
        .await;
    assert!(payload(&stranger)["error"].is_string(), "{}", stranger.text);

    let artifact = project
        .call(
            "bernstein_post_artifact",
            json!({"task_id": task_id, "key": "report", "artifact_type": "report",
                   "poster": "worker-1", "body": "# Auth\n\nDone."}),
        )
        .await;
    let record = payload(&artifact);
    assert_eq!(record["version"], 1, "{}", artifact.text);
    assert_eq!(record["verified"], true, "{}", artifact.text);
    assert_eq!(record["content"]["body"], "# Auth\n\nDone.");

    let complete = project
        .call(
            "bernstein_complete",
            json!({"task_id": task_id, "result_summary": "auth added"}),
        )
        .await;
    let done = payload(&complete);
    assert_eq!(done["status"], "done", "{}", complete.text);
    assert_eq!(done["result_summary"], "auth added");

    for id in [task_id.clone(), format!("task-{task_id}")] {
        let status = project
            .call("bernstein_run_status", json!({"run_id": id}))
            .await;
        let handle = payload(&status);
        assert_eq!(handle["status"], "completed", "{}", status.text);
        assert_eq!(handle["runId"], format!("task-{task_id}"));
        assert_ne!(handle["journalHead"], "");
        assert_ne!(handle["chainHead"], "");
    }

    // Both receipts still verify offline after the loop and after an unrelated task: they
    // carry the backlog snapshot their head was computed over.
    project
        .call(
            "bernstein_create_task",
            json!({"title": "unrelated", "description": "moves the backlog file on"}),
        )
        .await;
    let chain = bernstein_journal::audit::AuditChain::open(
        project.root().join(".sdd/audit"),
        crate::common::audit_key(),
    );
    for wire in [&receipt, &payload(&refused)] {
        assert_eq!(wire["backlogSource"], "task_store", "{wire}");
        let wire = bernstein_protocol::pyjson::Value::from(wire);
        let parsed =
            bernstein_journal::claim::ClaimReceipt::from_wire(wire.as_object().unwrap()).unwrap();
        let report = bernstein_journal::claim::verify_task_store_claim_receipt(&parsed, &chain);
        assert!(report.ok(), "{:?}", report.findings);
    }

    let overview = project
        .call("bernstein_status", json!({"status": "done"}))
        .await;
    let body = payload(&overview);
    assert_eq!(body["counts"]["done"], 1, "{}", overview.text);
    assert_eq!(
        body["tasks"],
        json!([{"id": task_id, "title": "Add auth to the API", "role": "backend", "status": "done"}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn approve_refuses_a_task_that_is_not_held() {
    let project = Project::new(config(false));
    let created = project
        .call(
            "bernstein_create_task",
            json!({"title": "t", "description": "d", "depends_on": []}),
        )
        .await;
    let body = payload(&created);
    assert_eq!(body["role"], "auto", "{}", created.text);
    let id = body["id"].as_str().unwrap();
    let refused = project
        .call("bernstein_approve", json!({"task_id": id}))
        .await;
    assert_eq!(payload(&refused)["error"], "task_not_awaiting_approval");
    assert_eq!(payload(&refused)["current_status"], "open");
}

#[tokio::test(flavor = "multi_thread")]
async fn scenarios_run_and_report() {
    let project = Project::new(bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::All,
        ..config(false)
    });
    let list = project
        .call("bernstein_scenario", json!({"action": "list"}))
        .await;
    let scenarios = payload(&list);
    assert_eq!(scenarios.as_array().unwrap().len(), 8);
    let run = project
        .call(
            "bernstein_scenario",
            json!({"scenario_id": "docs-sync", "pr_number": 12, "context": "nightly"}),
        )
        .await;
    let handle = payload(&run);
    assert_eq!(handle["task_count"], 3, "{}", run.text);
    assert_eq!(handle["task_ids"].as_array().unwrap().len(), 3);
    assert_eq!(handle["poll_after_ms"], 5000);
    let orchestration = handle["orchestration_id"].as_str().unwrap();
    assert!(orchestration.starts_with("scn-") && orchestration.len() == 16);
    let status = project
        .call(
            "bernstein_scenario",
            json!({"action": "status", "orchestration_id": orchestration}),
        )
        .await;
    let body = payload(&status);
    assert_eq!(body["task_count"], 3, "{}", status.text);
    assert_eq!(body["status_counts"], json!({"open": 3}));
    let alias = project
        .call(
            "bernstein_scenario_status",
            json!({"orchestration_id": orchestration}),
        )
        .await;
    assert_eq!(payload(&alias)["result"], body);
}

#[tokio::test(flavor = "multi_thread")]
async fn subscribe_sees_a_new_task_or_times_out() {
    let project = Project::new(config(true));
    let timed_out = project
        .call(
            "bernstein_subscribe",
            json!({"role": "qa", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(
        payload(&timed_out),
        json!({"notifications": [], "timed_out": true})
    );

    // No sleep guesses when the subscription has taken its snapshot of known tasks: tasks are
    // created one at a time until the subscription answers, and it must name one of them (the
    // first it had not seen; remote.rs checks the order against a server that signals).
    let waiting = project.call(
        "bernstein_subscribe",
        json!({"role": "qa", "timeout_seconds": 30}),
    );
    tokio::pin!(waiting);
    let mut created = Vec::new();
    let notified = loop {
        assert!(created.len() < 200, "no notification after 200 new tasks");
        let title = format!("check {}", created.len());
        let outcome = project
            .call(
                "bernstein_create_task",
                json!({"title": title, "description": "d", "role": "qa"}),
            )
            .await;
        created.push(payload(&outcome)["id"].clone());
        tokio::select! {
            notified = &mut waiting => break notified,
            () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    };
    let body = payload(&notified);
    let id = body["notifications"][0]["task_id"].clone();
    let position = created
        .iter()
        .position(|c| *c == id)
        .unwrap_or_else(|| panic!("notified of a task it did not see created: {body}"));
    assert_eq!(
        body,
        json!({"notifications": [{"task_id": id, "title": format!("check {position}")}], "timed_out": false})
    );
}

/// A subscription waits for a task created after it began: a task of the role that already
/// exists is not news, and the wait times out.
#[tokio::test(flavor = "multi_thread")]
async fn subscribe_ignores_a_task_of_its_role_that_existed_before_the_wait() {
    let project = Project::new(config(false));
    let created = project
        .call(
            "bernstein_create_task",
            json!({"title": "old", "description": "d", "role": "qa"}),
        )
        .await;
    assert!(!created.is_error, "{}", created.text);
    let waited = project
        .call(
            "bernstein_subscribe",
            json!({"role": "qa", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(
        payload(&waited),
        json!({"notifications": [], "timed_out": true})
    );
}

/// A wait of zero seconds, which only permissive validation lets through (the schema's minimum
/// is one), is not a wait that ends at once: it falls back to the default of 30 s, so a task
/// created while it waits is still news.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_asking_to_wait_zero_seconds_waits_the_default() {
    let project = Project::new(bernstein_tools::ToolConfig {
        validation: bernstein_tools::Validation::Permissive,
        ..config(false)
    });
    let waiting = project.call(
        "bernstein_subscribe",
        json!({"role": "qa", "timeout_seconds": 0}),
    );
    tokio::pin!(waiting);
    // As above, tasks are created one at a time until the subscription answers.
    let mut created = 0;
    let answered = loop {
        assert!(created < 200, "no answer after 200 new tasks");
        let outcome = project
            .call(
                "bernstein_create_task",
                json!({"title": format!("check {created}"), "description": "d", "role": "qa"}),
            )
            .await;
        assert!(!outcome.is_error, "{}", outcome.text);
        created += 1;
        tokio::select! {
            answered = &mut waiting => break answered,
            () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    };
    let body = payload(&answered);
    assert_eq!(body["timed_out"], false, "{}", answered.text);
    assert_eq!(body["notifications"].as_array().map(Vec::len), Some(1));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_cancelled_before_it_starts_returns_the_running_chunk() {
    let project = Project::new(config(true));
    let ctx = project.ctx.clone();
    ctx.cancel.cancel();
    let outcome = project
        .call_with(
            &ctx,
            "bernstein_subscribe",
            json!({"role": "qa", "timeout_seconds": 30}),
        )
        .await;
    assert!(outcome.cancelled);
    assert!(!outcome.is_error);
    assert_eq!(
        outcome.partial,
        [r#"{"status": "running", "tool": "bernstein_subscribe"}"#]
    );
    assert_eq!(
        outcome.meter.as_ref().unwrap()["tool"],
        "bernstein_subscribe"
    );
}

/// A backlog older than the task log (a crash between the log append and the backlog rewrite,
/// or an old copy put back) never grants a task the log has claimed, cancelled or failed: the
/// claim path brings the backlog in step under the store lock before it claims.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_backlog_never_grants_a_second_claim() {
    let project = Project::new(config(false));
    let backlog = project.root().join(".sdd/runtime/task-backlog.json");
    let mut ids = Vec::new();
    for title in ["first task", "second task"] {
        let run = project
            .call("bernstein_run", json!({"goal": title, "role": "backend"}))
            .await;
        ids.push(payload(&run)["task_id"].as_str().unwrap().to_owned());
    }
    // A claim the backlog cannot grant (no task of that role) still brings the file in step
    // first: both tasks open, the snapshot a crash could leave behind.
    let refused = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-0", "role": "nobody"}),
        )
        .await;
    assert_eq!(payload(&refused)["granted"], false, "{}", refused.text);
    let stale = std::fs::read(&backlog).unwrap();

    let first = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-1", "role": "backend"}),
        )
        .await;
    assert_eq!(payload(&first)["granted"], true, "{}", first.text);
    assert_eq!(payload(&first)["taskId"], ids[0].as_str());
    let cancelled = project
        .call(
            "bernstein_cancel",
            json!({"task_id": ids[1], "reason": "not needed"}),
        )
        .await;
    assert!(!cancelled.is_error, "{}", cancelled.text);

    std::fs::write(&backlog, &stale).unwrap();
    let second = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-2", "role": "backend"}),
        )
        .await;
    assert_eq!(payload(&second)["granted"], false, "{}", second.text);
    let chain = bernstein_journal::audit::AuditChain::open(
        project.root().join(".sdd/audit"),
        crate::common::audit_key(),
    );
    let receipts = chain
        .verified_records()
        .filter(|r| r.event_type == "task.claim_receipt" && r.resource_id == ids[0])
        .count();
    assert_eq!(receipts, 1, "one task, one granted claim receipt");
}

/// The deprecated `bernstein_tasks` lists the task rows (filtered by status when asked), and
/// `bernstein_scenarios` lists the same scenarios as `bernstein_scenario {"action": "list"}`;
/// both answer inside the alias wrapper.
#[tokio::test(flavor = "multi_thread")]
async fn the_tasks_and_scenarios_aliases_answer_their_replacements() {
    let project = Project::new(bernstein_tools::ToolConfig {
        tier: bernstein_tools::Tier::All,
        ..config(false)
    });
    let mut ids = Vec::new();
    for title in ["first", "second"] {
        let created = project
            .call(
                "bernstein_create_task",
                json!({"title": title, "description": "d"}),
            )
            .await;
        ids.push(payload(&created)["id"].as_str().unwrap().to_owned());
    }
    project
        .call("bernstein_claim", json!({"task_id": ids[0]}))
        .await;
    let completed = project
        .call(
            "bernstein_complete",
            json!({"task_id": ids[0], "result_summary": "ok"}),
        )
        .await;
    assert_eq!(payload(&completed)["status"], "done", "{}", completed.text);

    let all = project.call("bernstein_tasks", json!({})).await;
    let rows = payload(&all)["result"].clone();
    let listed: Vec<(&str, &str)> = rows
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {}", all.text))
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        listed,
        vec![(ids[0].as_str(), "done"), (ids[1].as_str(), "open")]
    );
    let done = project
        .call("bernstein_tasks", json!({"status": "done"}))
        .await;
    let rows = payload(&done)["result"].clone();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{}", done.text);
    assert_eq!(rows[0]["id"], ids[0].as_str());
    assert_eq!(rows[0]["result_summary"], "ok");

    let scenarios = project.call("bernstein_scenarios", json!({})).await;
    let listed = project
        .call("bernstein_scenario", json!({"action": "list"}))
        .await;
    assert_eq!(payload(&scenarios)["result"], payload(&listed));
    assert_eq!(payload(&listed).as_array().unwrap().len(), 8);
}

/// Settling a cancellation reads the cancelled subtree, not every task the project ever
/// cancelled: with 300 tasks cancelled long before (a rejected plan), settling the cancel of a
/// parent and its subtask reads a handful of records from the task log, and seals both runs.
#[tokio::test(flavor = "multi_thread")]
async fn settling_a_cancellation_reads_the_subtree_not_every_cancelled_task() {
    use bernstein_journal::handle::{SealOutcome, seal_terminal_run};
    use bernstein_tasks::embedded::EmbeddedStore;
    use bernstein_tasks::model::NewTask;
    use bernstein_tools::{Backend, Settled};

    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), Some(crate::common::audit_key())).unwrap();
    let backend = Backend::embedded(store.clone(), crate::common::audit_key());
    let old: Vec<NewTask> = (0..300)
        .map(|i| NewTask::new(format!("old {i}"), "settled long ago"))
        .collect();
    let plan = store.create_plan("old work", old).unwrap();
    store.reject_plan(plan.id(), "not needed").unwrap();
    let parent = store
        .create_task(NewTask::new("parent", "cancelled now"))
        .unwrap();
    let child = store
        .create_subtask(&parent.id, NewTask::new("child", "cancelled with it"))
        .unwrap();
    let outcome = store.cancel_task(&parent.id, "stop").unwrap();
    assert_eq!(outcome.cancelled_descendants, 1);

    let before = store.log_read_stats().record_loads;
    backend
        .record_settled(dir.path(), parent.id.as_str(), Settled::Cancellation)
        .await;
    let loads = store.log_read_stats().record_loads - before;
    assert!(
        loads <= 4,
        "settling one parent and one subtask read {loads} records from the task log"
    );
    let chain = bernstein_journal::audit::AuditChain::open(
        dir.path().join(".sdd/audit"),
        crate::common::audit_key(),
    );
    for id in [&parent.id, &child.id] {
        let again = seal_terminal_run(dir.path(), &chain, id.as_str()).unwrap();
        assert!(
            matches!(again, SealOutcome::AlreadySealed { .. }),
            "the run of {id} was not sealed by the settling: {again:?}"
        );
    }
}

/// A claim hands its receipt to the catalogue as a value (`tools::Payload::Value`): with the
/// meter on, the envelope's `result` is that receipt; with it off, the text is the receipt's
/// `json.dumps(receipt, indent=2)`, as every other handler's bare payload is.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_answers_its_receipt_with_the_meter_on_and_off() {
    let mut receipts = Vec::new();
    for meter in [true, false] {
        let project = Project::new(config(meter));
        project
            .call("bernstein_run", json!({"goal": "Add auth to the API"}))
            .await;
        let claim = project
            .call("bernstein_claim", json!({"claimer_id": "worker-1"}))
            .await;
        assert!(!claim.is_error, "{}", claim.text);
        let receipt = payload(&claim);
        assert_eq!(receipt["granted"], true, "{}", claim.text);
        assert_eq!(receipt["backlogSource"], "task_store");
        assert_eq!(receipt["backlogSnapshot"].as_array().unwrap().len(), 1);
        if meter {
            assert!(
                claim.text.starts_with(r#"{"result": {"taskId": ""#),
                "{}",
                claim.text
            );
            assert!(
                claim
                    .text
                    .contains(r#", "_meter": {"tool": "bernstein_claim""#)
            );
        } else {
            let parsed = bernstein_protocol::pyjson::Value::parse(&claim.text).unwrap();
            assert_eq!(
                claim.text,
                bernstein_journal::handle::render_indent2(&parsed),
                "the bare payload is the receipt with indent 2"
            );
            assert!(
                claim.text.starts_with("{\n  \"taskId\": \""),
                "{}",
                claim.text
            );
        }
        // The fields that do not depend on the project's random ids and keys.
        receipts.push((
            receipt["granted"].clone(),
            receipt["specRevision"].clone(),
            receipt["backlogSnapshot"][0]["status"].clone(),
            receipt["backlogSnapshot"][0]["claimer"].clone(),
        ));
    }
    assert_eq!(receipts[0], receipts[1]);
    assert_eq!(receipts[0].2, "in_progress");
    assert_eq!(receipts[0].3, "worker-1");
}

/// A poll answers its handle exactly as the projection renders it: with the meter off the
/// payload is `render_run_status_body`, with it on the envelope's result is that handle, and
/// the historical alias wraps that handle in its deprecation notice.
#[tokio::test]
async fn a_run_status_answers_its_handle_with_the_meter_on_and_off() {
    for meter in [true, false] {
        let project = Project::new(config(meter));
        let run = project
            .call("bernstein_run", json!({"goal": "Add auth to the API"}))
            .await;
        let run_id = payload(&run)["run_id"].as_str().unwrap().to_owned();
        let polled = project
            .call("bernstein_run_status", json!({"run_id": run_id}))
            .await;
        assert!(!polled.is_error, "{}", polled.text);
        let (handle, _) =
            bernstein_journal::handle::poll_run_handle(project.dir.path(), &run_id, None).unwrap();
        let body = handle.render_run_status_body();
        let handle_value: serde_json::Value = serde_json::from_str(&body).unwrap();
        if meter {
            assert!(
                polled.text.starts_with(r#"{"result": {"taskId": ""#),
                "{}",
                polled.text
            );
            assert_eq!(payload(&polled), handle_value);
        } else {
            assert_eq!(polled.text, body);
            let alias = project
                .call("bernstein_task_handle", json!({"run_id": run_id}))
                .await;
            let notice: serde_json::Value = serde_json::from_str(&alias.text).unwrap();
            assert_eq!(notice["deprecated"], true, "{}", alias.text);
            assert_eq!(notice["result"], handle_value);
        }
    }
}

/// Creates a task to post messages on; returns its id.
async fn created_task_id(project: &Project) -> String {
    let created = project
        .call(
            "bernstein_create_task",
            json!({"title": "t", "description": "d"}),
        )
        .await;
    payload(&created)["id"].as_str().unwrap().to_owned()
}

/// The embedded mailbox lists a task's messages in posting order: every one of them without
/// a cursor, and only those after `since_seq` with one.
#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_mailbox_lists_the_messages_after_the_cursor() {
    use bernstein_protocol::pyjson::Value as PyValue;

    let project = Project::new(config(false));
    let id = created_task_id(&project).await;
    for text in ["first", "second"] {
        let posted = project
            .call(
                "bernstein_post_message",
                json!({"task_id": id, "sender": "w", "kind": "finding", "body": text}),
            )
            .await;
        assert!(!posted.is_error, "{}", posted.text);
    }
    let entries = |listed: PyValue| -> Vec<(i64, String)> {
        let PyValue::Array(rows) = listed else {
            panic!("the mailbox listing is not an array: {listed:?}")
        };
        rows.iter()
            .map(|row| {
                let row = row.as_object().unwrap();
                let seq = row.get("seq").and_then(PyValue::as_i64).unwrap();
                let body = row.get("body").and_then(PyValue::as_str).unwrap();
                (seq, body.to_owned())
            })
            .collect()
    };
    let backend = &project.ctx.backend;
    let all = entries(backend.list_messages(&id, None).await.unwrap());
    let bodies: Vec<&str> = all.iter().map(|(_, body)| body.as_str()).collect();
    assert_eq!(bodies, ["first", "second"]);
    let after_first = entries(backend.list_messages(&id, Some(all[0].0)).await.unwrap());
    assert_eq!(after_first, all[1..]);
}

/// A claim's `completed_ids` reach the backlog filter: a task whose dependency is not named
/// as completed is not claimable, and becomes claimable once the claim names it.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_takes_a_dependent_task_only_once_its_dependency_is_named_completed() {
    let project = Project::new(config(false));
    let first = project
        .call(
            "bernstein_create_task",
            json!({"title": "first", "description": "d", "role": "qa"}),
        )
        .await;
    let first_id = payload(&first)["id"].as_str().unwrap().to_owned();
    let second = project
        .call(
            "bernstein_create_task",
            json!({"title": "second", "description": "d", "role": "qa",
                   "depends_on": [first_id]}),
        )
        .await;
    let second_id = payload(&second)["id"].as_str().unwrap().to_owned();
    let claim = |completed: Vec<&str>| {
        project.call(
            "bernstein_claim",
            json!({"claimer_id": "worker-1", "role": "qa", "completed_ids": completed}),
        )
    };
    let taken = payload(&claim(vec![]).await);
    assert_eq!(taken["taskId"], first_id.as_str(), "{taken}");
    let blocked = payload(&claim(vec![]).await);
    assert_eq!(blocked["granted"], false, "{blocked}");
    let unblocked = payload(&claim(vec![first_id.as_str()]).await);
    assert_eq!(unblocked["granted"], true, "{unblocked}");
    assert_eq!(unblocked["taskId"], second_id.as_str());
}

/// Runs `goal` as a `qa` task and claims it as `worker-1`, so that artifacts can be posted on
/// it; returns its id.
async fn claimed_qa_task(project: &Project, goal: &str) -> String {
    let run = project
        .call("bernstein_run", json!({"goal": goal, "role": "qa"}))
        .await;
    let task_id = payload(&run)["task_id"].as_str().unwrap().to_owned();
    let claim = project
        .call(
            "bernstein_claim",
            json!({"claimer_id": "worker-1", "role": "qa"}),
        )
        .await;
    assert_eq!(payload(&claim)["granted"], true, "{}", claim.text);
    task_id
}

/// A table artifact keeps the columns and rows it was posted with.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_artifact_keeps_its_columns_and_rows() {
    let project = Project::new(config(false));
    let task_id = claimed_qa_task(&project, "Measure").await;
    let posted = project
        .call(
            "bernstein_post_artifact",
            json!({"task_id": task_id, "key": "timings", "artifact_type": "table",
                   "poster": "worker-1", "columns": ["case", "ms"],
                   "rows": [["cold", "41"], ["warm", "7"]]}),
        )
        .await;
    let record = payload(&posted);
    assert_eq!(
        record["content"]["columns"],
        json!(["case", "ms"]),
        "{}",
        posted.text
    );
    assert_eq!(
        record["content"]["rows"],
        json!([["cold", "41"], ["warm", "7"]])
    );
}

/// A message's sender card fingerprint is kept as given, and an empty one is recorded as
/// unregistered, as when none is given.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_sender_fingerprint_is_recorded_as_unregistered() {
    let project = Project::new(config(false));
    let id = created_task_id(&project).await;
    let fingerprint = "a".repeat(64);
    for (given, recorded) in [
        ("", "unregistered"),
        (fingerprint.as_str(), fingerprint.as_str()),
    ] {
        let posted = project
            .call(
                "bernstein_post_message",
                json!({"task_id": id, "sender": "w", "kind": "finding", "body": "b",
                       "sender_card_fingerprint": given}),
            )
            .await;
        let entry = payload(&posted);
        assert_eq!(
            entry["sender_card_fingerprint"], recorded,
            "{}",
            posted.text
        );
    }
}

/// A finding artifact is built from the SARIF result and the provenance it was posted with.
#[tokio::test(flavor = "multi_thread")]
async fn a_finding_artifact_keeps_its_sarif_result_and_provenance() {
    let project = Project::new(config(false));
    let task_id = claimed_qa_task(&project, "Scan").await;
    let sarif = json!({"ruleId": "R1", "locations": [{"physicalLocation": {
        "artifactLocation": {"uri": "src/app.py"},
        "region": {"startLine": 3, "snippet": {"text": "eval(x)"}}}}]});
    let posted = project
        .call(
            "bernstein_post_artifact",
            json!({"task_id": task_id, "key": "scan", "artifact_type": "finding",
                   "poster": "worker-1", "sarif_result": sarif, "tool": "scan",
                   "tool_version": "1", "pinned_ruleset_or_feed_digest": "sha256:ab",
                   "invocation_argv_hash": "h", "target": "repo"}),
        )
        .await;
    let content = &payload(&posted)["content"];
    assert_eq!(content["sarif_result"]["ruleId"], "R1", "{}", posted.text);
    assert_eq!(content["provenance"]["tool"], "scan", "{}", posted.text);
}

/// A mailbox entry carries the wall-clock time it was posted at, in Unix seconds.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_is_stamped_with_the_time_it_was_posted() {
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let project = Project::new(config(false));
    let id = created_task_id(&project).await;
    let before = now();
    let posted = project
        .call(
            "bernstein_post_message",
            json!({"task_id": id, "sender": "w", "kind": "finding", "body": "b"}),
        )
        .await;
    let after = now();
    let stamp = payload(&posted)["timestamp"].as_f64().unwrap();
    // Whole seconds of slack: the stamp may be rounded when it is rendered.
    assert!(
        before - 1.0 <= stamp && stamp <= after + 1.0,
        "posted between {before} and {after}, stamped {stamp}"
    );
}
