//! Run handles that hold still and end, through the dispatcher: the run's chain head ignores
//! other calls' anchors, terminal transitions seal the run, and the sealed handle verifies in a
//! busy project.

use bernstein_journal::audit::{VerifiedRecord, verified_records};
use bernstein_journal::handle::{PresentedHandle, verify_handle_chain};
use bernstein_protocol::pyjson::Value as PyValue;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{Project, key, payload};

/// `structuredContent.result` of a `bernstein_run_status` poll, as bytes.
async fn poll(project: &Project, id: &str) -> String {
    let result = project
        .call("bernstein_run_status", json!({"run_id": id}))
        .await;
    let handle = &result["structuredContent"]["result"];
    assert!(handle.is_object(), "{result}");
    serde_json::to_string(handle).unwrap()
}

fn handle_field(bytes: &str, key: &str) -> String {
    let handle: Value = serde_json::from_str(bytes).unwrap();
    handle[key].as_str().unwrap().to_owned()
}

async fn run(project: &Project, goal: &str) -> String {
    let result = project.call("bernstein_run", json!({"goal": goal})).await;
    payload(&result)["task_id"].as_str().unwrap().to_owned()
}

fn records(project: &Project) -> Vec<VerifiedRecord> {
    let key = key();
    let mut walk = verified_records(&project.dir.path().join(".sdd/audit"), &key);
    let all: Vec<VerifiedRecord> = walk.by_ref().collect();
    assert!(walk.finish().ok(), "the chain verifies");
    all
}

fn seals_of(project: &Project, run_id: &str) -> Vec<VerifiedRecord> {
    records(project)
        .into_iter()
        .filter(|r| {
            r.event_type == "mcp.task_handle"
                && r.details.get("run_id").and_then(PyValue::as_str) == Some(run_id)
        })
        .collect()
}

fn verify(project: &Project, bytes: &str) -> bernstein_journal::handle::HandleChainReport {
    let presented =
        PresentedHandle::from_wire(&PyValue::parse(bytes).unwrap()).expect("a wire handle");
    verify_handle_chain(project.dir.path(), &key(), &presented).unwrap()
}

/// Twenty calls that neither name nor change run `quiet`.
async fn unrelated_calls(project: &Project, other: &str, n: usize) {
    for i in 0..n {
        match i % 4 {
            0 => {
                project.call("bernstein_status", json!({})).await;
            }
            1 => {
                run(project, &format!("other run {i}")).await;
            }
            2 => {
                project
                    .call(
                        "bernstein_post_message",
                        json!({"task_id": other, "sender": "w", "body": format!("note {i}")}),
                    )
                    .await;
            }
            _ => {
                poll(project, other).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn polls_by_task_id_and_run_id_are_identical_and_stay_so_after_twenty_calls() {
    let project = Project::new();
    let quiet = run(&project, "the polled run").await;
    let other = run(&project, "the busy run").await;
    let by_task = poll(&project, &quiet).await;
    let by_run = poll(&project, &format!("task-{quiet}")).await;
    assert_eq!(by_task, by_run);

    // The head is the run's own newest entry (its task.created), not the last anchor.
    let created = records(&project)
        .into_iter()
        .find(|r| {
            r.event_type == "task.created"
                && r.details.get("task_id").and_then(PyValue::as_str) == Some(quiet.as_str())
        })
        .unwrap();
    assert_eq!(handle_field(&by_task, "chainHead"), created.hmac);

    let before = records(&project).len();
    unrelated_calls(&project, &other, 20).await;
    assert!(
        records(&project).len() >= before + 20,
        "the calls were anchored"
    );
    assert_eq!(poll(&project, &quiet).await, by_task);
    assert_eq!(poll(&project, &format!("task-{quiet}")).await, by_task);
}

#[tokio::test(flavor = "multi_thread")]
async fn completion_seals_the_run_and_the_seal_verifies_after_a_hundred_calls() {
    let project = Project::new();
    let id = run(&project, "finish me").await;
    let other = run(&project, "keep busy").await;
    let working = poll(&project, &id).await;
    assert_eq!(handle_field(&working, "status"), "working");

    project
        .call(
            "bernstein_complete",
            json!({"task_id": id, "result_summary": "done"}),
        )
        .await;
    let run_id = format!("task-{id}");
    let seals = seals_of(&project, &run_id);
    assert_eq!(seals.len(), 1, "one seal, written before the tool answered");
    let seal = &seals[0];
    assert_eq!(
        seal.details.get("status").and_then(PyValue::as_str),
        Some("completed")
    );
    assert_eq!(
        seal.details.get("chain_head").and_then(PyValue::as_str),
        Some(handle_field(&working, "chainHead").as_str()),
        "the seal states the run's head before it"
    );

    let done = poll(&project, &id).await;
    assert_eq!(handle_field(&done, "status"), "completed");
    assert_eq!(handle_field(&done, "chainHead"), seal.hmac);
    assert_eq!(
        seal.details.get("journal_head").and_then(PyValue::as_str),
        Some(handle_field(&done, "journalHead").as_str())
    );
    let report = verify(&project, &done);
    assert!(report.verified(), "{:?}", report.problems);
    assert!(!report.stale());
    assert!(report.chain_head_entry.as_ref().unwrap().seal);

    unrelated_calls(&project, &other, 100).await;
    assert_eq!(poll(&project, &id).await, done, "the poll holds still");
    let later = verify(&project, &done);
    assert!(later.verified(), "{:?}", later.problems);
    assert!(!later.stale());
    assert_eq!(seals_of(&project, &run_id).len(), 1, "polls never re-seal");

    // The polling test of the working handle: genuine, but later entries name the run.
    let old = verify(&project, &working);
    assert!(!old.verified(), "its status no longer re-projects");
    assert!(old.stale());
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_seals_the_root_and_every_cascaded_descendant() {
    let project = Project::new();
    let root = run(&project, "parent").await;
    let child = payload(
        &project
            .call(
                "bernstein_run",
                json!({"goal": "child", "parent_task_id": root}),
            )
            .await,
    )["task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let outcome = project
        .call(
            "bernstein_cancel",
            json!({"task_id": root, "reason": "stop"}),
        )
        .await;
    assert_eq!(payload(&outcome)["cancelled_descendants"], 1, "{outcome}");
    for id in [&root, &child] {
        let seals = seals_of(&project, &format!("task-{id}"));
        assert_eq!(seals.len(), 1, "{id}");
        let handle = poll(&project, id).await;
        assert_eq!(handle_field(&handle, "status"), "cancelled");
        assert_eq!(handle_field(&handle, "chainHead"), seals[0].hmac);
        assert!(verify(&project, &handle).verified());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_run_without_a_seal_is_sealed_once_by_the_next_poll() {
    let project = Project::new();
    let id = run(&project, "ended elsewhere").await;
    // Another writer ends the run in its journal without sealing it.
    let run_id = format!("task-{id}");
    bernstein_journal::run_journal::JournalWriter::open(
        project.dir.path(),
        &run_id,
        bernstein_journal::run_journal::HashProfile::PyJsonV1,
    )
    .unwrap()
    .append(
        "run_failed",
        &bernstein_protocol::pyjson::Object::new().with("task_id", id.as_str()),
    )
    .unwrap();
    assert!(seals_of(&project, &run_id).is_empty());
    let first = poll(&project, &id).await;
    let second = poll(&project, &run_id).await;
    assert_eq!(first, second);
    assert_eq!(handle_field(&first, "status"), "failed");
    let seals = seals_of(&project, &run_id);
    assert_eq!(seals.len(), 1);
    assert_eq!(handle_field(&first, "chainHead"), seals[0].hmac);
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_get_and_run_status_agree_on_the_status() {
    let project = Project::new();
    let id = run(&project, "agree").await;
    let status_of_task = |got: &Value| got["status"].as_str().unwrap().to_owned();
    let got = project.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(status_of_task(&got), "working");
    assert_eq!(
        handle_field(&poll(&project, &id).await, "status"),
        "working"
    );
    project
        .call("bernstein_cancel", json!({"task_id": id, "reason": "no"}))
        .await;
    let got = project.result("tasks/get", json!({"taskId": id})).await;
    assert_eq!(status_of_task(&got), "cancelled");
    assert_eq!(
        handle_field(&poll(&project, &id).await, "status"),
        "cancelled"
    );
}

/// One step of an interleaving: a poll of the watched run (by either id form) or an unrelated
/// call.
#[derive(Debug, Clone)]
enum Step {
    PollByTask,
    PollByRun,
    Status,
    OtherRun,
    Message,
    PollOther,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::PollByTask),
        Just(Step::PollByRun),
        Just(Step::Status),
        Just(Step::OtherRun),
        Just(Step::Message),
        Just(Step::PollOther),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_leaves_the_polls_of_an_unchanged_run_identical(
        steps in proptest::collection::vec(step(), 1..14)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let project = Project::new();
            let watched = run(&project, "watched").await;
            let other = run(&project, "other").await;
            let first = poll(&project, &watched).await;
            for step in &steps {
                match step {
                    Step::PollByTask => assert_eq!(poll(&project, &watched).await, first),
                    Step::PollByRun => {
                        assert_eq!(poll(&project, &format!("task-{watched}")).await, first);
                    }
                    Step::Status => {
                        project.call("bernstein_status", json!({})).await;
                    }
                    Step::OtherRun => {
                        run(&project, "another").await;
                    }
                    Step::Message => {
                        project
                            .call(
                                "bernstein_post_message",
                                json!({"task_id": other, "sender": "w", "body": "hi"}),
                            )
                            .await;
                    }
                    Step::PollOther => {
                        poll(&project, &other).await;
                    }
                }
            }
            assert_eq!(poll(&project, &watched).await, first);
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_cancel_seals_the_run_before_it_answers() {
    let project = Project::new();
    let id = run(&project, "cancel me from the host").await;
    let cancelled = project.result("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let seals = seals_of(&project, &format!("task-{id}"));
    assert_eq!(seals.len(), 1);
    let handle = poll(&project, &id).await;
    assert_eq!(handle_field(&handle, "chainHead"), seals[0].hmac);
    assert!(verify(&project, &handle).verified());
}
