//! Polling run handles: both id forms, byte-identical polls, monotone progress ticks, and the
//! meter envelope.

use serde_json::json;

use crate::common::{Project, config, payload};

#[tokio::test(flavor = "multi_thread")]
async fn both_id_forms_project_one_handle_before_the_journal_exists() {
    let project = Project::new(config(false));
    let by_task = project
        .call("bernstein_run_status", json!({"run_id": "abc123"}))
        .await;
    let by_run = project
        .call("bernstein_run_status", json!({"run_id": "task-abc123"}))
        .await;
    assert_eq!(by_task.text, by_run.text);
    insta::assert_snapshot!(by_task.text);
    assert!(
        !project.root().join(".sdd/runs").exists(),
        "polling creates nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_polls_of_an_unchanged_journal_are_identical() {
    let project = Project::new(config(true));
    let run = project.call("bernstein_run", json!({"goal": "g"})).await;
    let id = payload(&run)["task_id"].as_str().unwrap().to_owned();
    project
        .call("bernstein_claim", json!({"claimer_id": "w"}))
        .await;
    project
        .call(
            "bernstein_complete",
            json!({"task_id": id, "result_summary": "ok"}),
        )
        .await;
    let first = project
        .call("bernstein_run_status", json!({"run_id": id}))
        .await;
    let second = project
        .call("bernstein_run_status", json!({"run_id": id}))
        .await;
    let result = |o: &bernstein_tools::ToolOutcome| {
        serde_json::to_string(&o.structured.as_ref().unwrap()["result"]).unwrap()
    };
    assert_eq!(result(&first), result(&second));
    let meter = &first.structured.as_ref().unwrap()["_meter"];
    assert_eq!(meter["tool"], "bernstein_run_status");
    assert_eq!(meter["call_id"], "0af4fa795b5c839a");
    assert_eq!(meter["cost_usd"], 0.0);
    assert_eq!(meter["ok"], true);
    assert!(meter["ts"].as_str().unwrap().ends_with('Z'));
    assert!(
        first.text.starts_with(r#"{"result": {"taskId": "#),
        "{}",
        first.text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_ticks_only_when_the_fold_advances() {
    let project = Project::new(config(true));
    let run = project.call("bernstein_run", json!({"goal": "g"})).await;
    let id = payload(&run)["task_id"].as_str().unwrap().to_owned();

    // No token: no tick.
    project
        .call("bernstein_run_status", json!({"run_id": id}))
        .await;
    assert!(project.ticks.lock().unwrap().is_empty());

    let ctx = project.ctx_with_progress(json!(77));
    project
        .call_with(&ctx, "bernstein_run_status", json!({"run_id": id}))
        .await;
    // The same fold again, under a different token and the other id form: suppressed.
    let again = project.ctx_with_progress(json!("t-2"));
    project
        .call_with(
            &again,
            "bernstein_run_status",
            json!({"run_id": format!("task-{id}")}),
        )
        .await;
    // The deprecated alias never ticks.
    project
        .call_with(&again, "bernstein_task_handle", json!({"run_id": id}))
        .await;

    // A checkpoint row in the run's own journal advances the fold.
    let run_id = format!("task-{id}");
    let mut writer = bernstein_journal::run_journal::JournalWriter::open(
        project.root(),
        &run_id,
        bernstein_journal::run_journal::HashProfile::PyJsonV1,
    )
    .unwrap();
    writer
        .append(
            "retry.checkpoint",
            &bernstein_protocol::pyjson::Object::new().with("task_id", id.as_str()),
        )
        .unwrap();
    project
        .call_with(&again, "bernstein_run_status", json!({"run_id": id}))
        .await;

    let ticks = project.ticks.lock().unwrap();
    let seen: Vec<(serde_json::Value, f64, Option<f64>, String)> = ticks
        .iter()
        .map(|t| {
            (
                t.progress_token.clone(),
                t.progress,
                t.total,
                t.message.clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                json!(77),
                0.0,
                None,
                "phase=unknown checkpoints=0 diffs=0 gates=0 evidence=0/0".to_owned()
            ),
            (
                json!("t-2"),
                1.0,
                None,
                "phase=unknown checkpoints=1 diffs=0 gates=0 evidence=0/0".to_owned()
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_meter_off_gives_the_bare_payload() {
    let project = Project::new(config(false));
    let outcome = project.call("bernstein_status", json!({})).await;
    insta::assert_snapshot!(outcome.text);
    assert_eq!(
        outcome.structured.unwrap(),
        serde_json::from_str::<serde_json::Value>(&outcome.text).unwrap()
    );
}

/// Polling an open run and reading the status are answered on the worker that runs the call:
/// no poll or read hands its work to a blocking thread, as `block_in_place` would (it starts a
/// thread to carry the worker's other tasks). The project and its run are made, and polled
/// once, on another runtime, so only the reads run on the counted one: a process's first poll
/// of a chain builds its head index, which is not brief and goes to a blocking thread.
#[test]
fn polls_and_status_reads_start_no_blocking_thread() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let setup = tokio::runtime::Runtime::new().unwrap();
    let project = Arc::new(Project::new(config(true)));
    let run = setup.block_on(project.call("bernstein_run", json!({"goal": "g"})));
    let id = payload(&run)["task_id"].as_str().unwrap().to_owned();
    setup.block_on(project.call("bernstein_run_status", json!({"run_id": id})));
    drop(setup);

    let started = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&started);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .enable_all()
        .build()
        .unwrap();
    // Spawned, so the calls run on the worker (`block_on`'s own future runs on this thread,
    // where `block_in_place` has no worker to hand off and runs inline).
    let polling = Arc::clone(&project);
    let answers = runtime.block_on(runtime.spawn(async move {
        let project = polling;
        let mut answers = Vec::new();
        for _ in 0..3 {
            let poll = project
                .call("bernstein_run_status", json!({"run_id": id}))
                .await;
            answers.push(poll.structured.unwrap()["result"]["status"].clone());
            let status = project.call("bernstein_status", json!({})).await;
            answers.push(status.structured.unwrap()["result"]["counts"]["total"].clone());
        }
        answers
    }));
    let answers = answers.unwrap();
    assert_eq!(
        answers,
        [json!("working"), json!(1)]
            .iter()
            .cycle()
            .take(6)
            .cloned()
            .collect::<Vec<_>>(),
        "the polls and reads answered"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "only the runtime's one worker started: a read was handed to a blocking thread"
    );
}
