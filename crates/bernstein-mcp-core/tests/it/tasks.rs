//! The Tasks extension (task-augmented `bernstein_run`, `tasks/*` in both wire forms),
//! progress notifications, and cancellation with partial results.

use std::sync::Arc;

use bernstein_mcp_core::{NotificationSink, TASK_TTL_MS};
use serde_json::{Value, json};

use crate::support::{Project, meta_2026, payload};

#[tokio::test]
async fn a_plain_run_is_a_call_result_and_a_task_augmented_run_is_a_task() {
    let project = Project::new();
    let plain = project
        .call("bernstein_run", json!({"goal": "plain run"}))
        .await;
    assert!(plain.get("content").is_some(), "{plain}");
    assert!(payload(&plain)["task_id"].is_string(), "{plain}");

    let created = project
        .result(
            "tools/call",
            json!({"name": "bernstein_run", "arguments": {"goal": "Task-augmented run"}, "task": {"ttl": 60000}}),
        )
        .await;
    let task = &created["task"];
    assert_eq!(task["status"], "working", "{created}");
    assert_eq!(
        task["ttl"], TASK_TTL_MS,
        "the requested ttl is not honoured: 24h is stated"
    );
    assert_eq!(task["pollInterval"], 5000);
    let task_id = task["taskId"].as_str().unwrap().to_owned();

    let got = project
        .result("tasks/get", json!({"taskId": task_id}))
        .await;
    assert_eq!(got["taskId"], task_id.as_str());
    assert_eq!(got["status"], "working");

    let pending = project
        .result("tasks/result", json!({"taskId": task_id}))
        .await;
    assert_eq!(pending["isError"], true);
    assert_eq!(
        pending["content"][0]["text"],
        "Result not available; task still working"
    );

    let listed = project.result("tasks/list", json!({})).await;
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(ids.contains(&task_id.as_str()));
    assert!(listed.get("nextCursor").is_none());

    let cancelled = project
        .result("tasks/cancel", json!({"taskId": task_id}))
        .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let got = project
        .result("tasks/get", json!({"taskId": task_id}))
        .await;
    assert_eq!(got["status"], "cancelled");
    // 2025-11-25: a task already in a terminal status cannot be cancelled again (-32602).
    let again = project
        .error("tasks/cancel", json!({"taskId": task_id}))
        .await;
    assert_eq!(again["code"], -32602, "{again}");
    assert_eq!(
        again["message"],
        format!("task {task_id} is already in the terminal status cancelled"),
    );
    let settled = project
        .result("tasks/result", json!({"taskId": task_id}))
        .await;
    assert_eq!(settled["isError"], false, "{settled}");
    let structured = &settled["structuredContent"];
    assert_eq!(structured["result"]["run_id"], format!("task-{task_id}"));
    assert_eq!(structured["result"]["status"], "cancelled");
    assert_eq!(structured["_meter"]["tool"], "bernstein_run");
    // A host that checks structured content against the advertised schema accepts it.
    let tools = project.result("tools/list", json!({})).await;
    let schema = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bernstein_run")
        .map(|t| t["outputSchema"].clone())
        .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let problems: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| e.to_string())
        .collect();
    assert!(problems.is_empty(), "{problems:?}\n{structured}");
}

#[tokio::test]
async fn stateless_peers_with_the_tasks_extension_get_flat_task_rows() {
    let project = Project::new();
    let created = project
        .result(
            "tools/call",
            json!({"name": "bernstein_run", "arguments": {"goal": "g"}, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["ttlMs"], TASK_TTL_MS);
    assert_eq!(created["pollIntervalMs"], 5000);
    let task_id = created["taskId"].as_str().unwrap().to_owned();
    let got = project
        .result(
            "tasks/get",
            json!({"taskId": task_id, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(got["resultType"], "complete");
    assert_eq!(got["status"], "working");
    // Only a completed task carries its result, and only a failed one an error.
    assert!(
        got.get("result").is_none() && got.get("error").is_none(),
        "{got}"
    );
    let ack = project
        .result(
            "tasks/cancel",
            json!({"taskId": task_id, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(ack["resultType"], "complete");
    let got = project
        .result(
            "tasks/get",
            json!({"taskId": task_id, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(got["status"], "cancelled");
    assert!(
        got.get("result").is_none() && got.get("error").is_none(),
        "{got}"
    );
    // The extension acknowledges a cancel of a settled task, as rmcp's task manager does.
    let ack = project
        .result(
            "tasks/cancel",
            json!({"taskId": task_id, "_meta": meta_2026(true)}),
        )
        .await;
    assert_eq!(ack["resultType"], "complete", "{ack}");
    // Without the extension the same call is a plain result.
    let plain = project
        .result(
            "tools/call",
            json!({"name": "bernstein_run", "arguments": {"goal": "g"}, "_meta": meta_2026(false)}),
        )
        .await;
    assert!(plain.get("content").is_some(), "{plain}");
}

#[tokio::test]
async fn progress_ticks_only_with_a_token() {
    let project = Project::new();
    project
        .call("bernstein_run_status", json!({"run_id": "run-a"}))
        .await;
    assert!(project.notes.take().is_empty());
    project
        .result(
            "tools/call",
            json!({"name": "bernstein_run_status", "arguments": {"run_id": "run-b"}, "_meta": {"progressToken": "pt-1"}}),
        )
        .await;
    let notes = project.notes.take();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["method"], "notifications/progress");
    assert_eq!(notes[0]["params"]["progressToken"], "pt-1");
    assert_eq!(
        notes[0]["params"]["message"],
        "phase=unknown checkpoints=0 diffs=0 gates=0 evidence=0/0"
    );
    // A token is a string or any integer, a negative one too; a token of another type is no
    // token at all. Each call asks about a run of its own, whose first report is a tick.
    for (token, ticks) in [
        (json!(-7), 1),
        (json!(7), 1),
        (json!(1.5), 0),
        (json!(null), 0),
    ] {
        project
            .result(
                "tools/call",
                json!({"name": "bernstein_run_status", "arguments": {"run_id": format!("run-{token}")}, "_meta": {"progressToken": token}}),
            )
            .await;
        let notes = project.notes.take();
        assert_eq!(notes.len(), ticks, "{token}: {notes:?}");
        for note in notes {
            assert_eq!(note["params"]["progressToken"], token);
        }
    }
}

#[tokio::test]
async fn cancelling_an_in_flight_call_returns_its_partial_work() {
    let project = Arc::new(Project::new());
    let call = {
        let project = Arc::clone(&project);
        tokio::spawn(async move {
            let notes: Arc<dyn NotificationSink> = project.notes.clone();
            let accepted = project.dispatcher.accept(
                json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call",
                       "params": {"name": "bernstein_subscribe", "arguments": {"role": "backend", "timeout_seconds": 60}}}),
                &project.scope,
            );
            accepted.respond(notes).await
        })
    };
    // The call is registered as soon as it is accepted; wait until it is.
    while project.scope.in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        project
            .send_text(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}}"#
            )
            .await,
        None
    );
    let reply = call.await.unwrap().unwrap();
    let result = &reply["result"];
    assert_eq!(result["cancelled"], true, "{reply}");
    assert_eq!(
        result["partial"],
        json!([r#"{"status": "running", "tool": "bernstein_subscribe"}"#]),
        "{reply}"
    );
    assert!(
        result.get("isError").is_none(),
        "a cancel is not a tool failure: {reply}"
    );
    assert_eq!(project.scope.in_flight(), 0);
    // Cancelling the settled id again is a no-op.
    assert_eq!(
        project
            .send_text(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41}}"#
            )
            .await,
        None
    );
    let _: Value = project.result("ping", json!({})).await;
}

/// `tasks/list` pages past 100 tasks: the first page holds 100 and a cursor, the next the rest
/// and none, and together they list every task exactly once.
#[tokio::test]
async fn tasks_list_pages_past_one_hundred_tasks() {
    let project = Project::new();
    let total = 105;
    let mut created = std::collections::BTreeSet::new();
    for n in 0..total {
        let run = project
            .call("bernstein_run", json!({"goal": format!("goal {n}")}))
            .await;
        created.insert(payload(&run)["task_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(created.len(), total);
    let first = project.result("tasks/list", json!({})).await;
    let page = |listed: &Value| -> Vec<String> {
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["taskId"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut seen = page(&first);
    assert_eq!(seen.len(), 100);
    let cursor = first["nextCursor"].as_str().expect("a cursor after 100");
    let second = project
        .result("tasks/list", json!({"cursor": cursor}))
        .await;
    assert_eq!(page(&second).len(), total - 100, "{second}");
    assert!(second.get("nextCursor").is_none(), "{second}");
    seen.extend(page(&second));
    let unique: std::collections::BTreeSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "a task listed twice");
    assert_eq!(unique, created);
    // A page that ends exactly at the last task has no next page, so it carries no cursor.
    let cursor =
        bernstein_protocol::encoding::base64url_nopad(format!("offset={}", total - 100).as_bytes());
    let last = project
        .result("tasks/list", json!({"cursor": cursor}))
        .await;
    assert_eq!(page(&last), seen[total - 100..], "{last}");
    assert!(last.get("nextCursor").is_none(), "{last}");
}

/// An answer no anchored call stands behind (a task's result, a call the firewall refused
/// before anchoring) carries the request's content-derived span id as its call id.
#[tokio::test]
async fn an_unanchored_answer_carries_the_requests_span_id() {
    let project = Project::new();
    let created = project.call("bernstein_run", json!({"goal": "g"})).await;
    let task_id = payload(&created)["task_id"].as_str().unwrap().to_owned();
    for message in [
        json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": task_id}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "bernstein_run_status", "arguments": {"run_id": 5}}}),
    ] {
        let reply = project.send(message.clone()).await;
        assert_eq!(
            reply["result"]["structuredContent"]["_meter"]["call_id"],
            bernstein_mcp_core::ids::request_span_id(&message),
            "{reply}"
        );
    }
}
