//! Every served `tools/call` is anchored before it runs: journal rows with call_index 0..N-1,
//! matching audit entries, the span id as `_meter.call_id`, and the order reconstructed from
//! the chain alone.

use bernstein_journal::run_journal::load_run_journal;
use bernstein_mcp_core::{DEFAULT_ANCHOR_RUN_ID, OrderProblem, reconstruct_call_order};
use bernstein_protocol::pyjson::Value as PyValue;
use serde_json::json;

use crate::support::{Project, key};

#[tokio::test]
async fn n_calls_make_n_ordered_rows_and_entries() {
    let project = Project::new();
    let n = 5;
    let mut call_ids = Vec::new();
    for i in 0..n {
        let result = project
            .call(
                "bernstein_run_status",
                json!({"run_id": format!("run-{i}")}),
            )
            .await;
        call_ids.push(result["structuredContent"]["_meter"]["call_id"].clone());
    }
    // Other methods are not anchored.
    project.result("tools/list", json!({})).await;
    project.result("prompts/list", json!({})).await;

    let journal = load_run_journal(project.dir.path(), DEFAULT_ANCHOR_RUN_ID).unwrap();
    let indices: Vec<Option<i64>> = journal
        .rows
        .iter()
        .map(|row| row.get("call_index").and_then(PyValue::as_i64))
        .collect();
    assert_eq!(indices, (0..n).map(Some).collect::<Vec<_>>());

    let order = reconstruct_call_order(
        &project.dir.path().join(".sdd/audit"),
        &key(),
        DEFAULT_ANCHOR_RUN_ID,
    );
    assert!(order.ok(), "{order:?}");
    assert_eq!(order.calls.len(), n as usize);
    for (call, call_id) in order.calls.iter().zip(&call_ids) {
        assert_eq!(
            json!(call.span_id),
            *call_id,
            "the meter's call_id is the span id"
        );
    }
    let heads: Vec<String> = journal
        .rows
        .iter()
        .map(|row| {
            row.get("event_hash")
                .and_then(PyValue::as_str)
                .unwrap()
                .to_owned()
        })
        .collect();
    let recorded: Vec<String> = order.calls.iter().map(|c| c.journal_head.clone()).collect();
    assert_eq!(heads, recorded);
}

#[tokio::test]
async fn a_configured_anchor_run_and_a_client_traceparent() {
    let project = Project::with(|b| b.anchor_run_id("host-run"));
    let result = project
        .result(
            "tools/call",
            json!({"name": "bernstein_run_status", "arguments": {"run_id": "x"},
                   "_meta": {"traceparent": "00-0123456789abcdef0123456789abcdef-fedcba9876543210-01",
                             "baggage": "mcp.call_index=0"}}),
        )
        .await;
    assert_eq!(
        result["structuredContent"]["_meter"]["call_id"],
        "fedcba9876543210"
    );
    let order = reconstruct_call_order(&project.dir.path().join(".sdd/audit"), &key(), "host-run");
    assert!(order.ok(), "{order:?}");
    assert_eq!(order.calls[0].trace_id, "0123456789abcdef0123456789abcdef");
}

#[tokio::test]
async fn tampering_one_entry_fails_reconstruction_at_that_entry() {
    let project = Project::new();
    for i in 0..4 {
        project
            .call("bernstein_run_status", json!({"run_id": format!("r{i}")}))
            .await;
    }
    let audit = project.dir.path().join(".sdd/audit");
    let segment = std::fs::read_dir(&audit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&segment).unwrap();
    // Find the entry of call_index 2 and edit its details, keeping the line canonical.
    let lines: Vec<&str> = text.lines().collect();
    let target = lines
        .iter()
        .position(|l| l.contains("\"call_index\": 2,"))
        .unwrap();
    let mut edited: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    edited[target] = edited[target].replace("\"call_index\": 2,", "\"call_index\": 7,");
    std::fs::write(&segment, edited.join("\n") + "\n").unwrap();

    let order = reconstruct_call_order(&audit, &key(), DEFAULT_ANCHOR_RUN_ID);
    assert!(!order.ok());
    let failing: Vec<Option<u64>> = order.chain.errors.iter().map(|f| f.line).collect();
    assert_eq!(
        failing,
        vec![Some(target as u64 + 1)],
        "{:?}",
        order.chain.errors
    );
    assert_eq!(
        order.problems,
        vec![OrderProblem::Missing { call_index: 2 }]
    );
}

/// Every file under `.sdd`, with its bytes.
fn sdd_snapshot(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.join(".sdd")];
    while let Some(dir) = stack.pop() {
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing.flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                out.push((
                    entry.path().display().to_string(),
                    std::fs::read(entry.path()).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn refused_calls_write_nothing_not_even_an_anchor() {
    let project = Project::new();
    // One admitted call first, so the anchoring journal and chain exist.
    project
        .call("bernstein_run_status", json!({"run_id": "run-0"}))
        .await;
    let before = sdd_snapshot(project.dir.path());
    // An unknown tool is a JSON-RPC error, not a tool result.
    let unknown = project
        .error(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )
        .await;
    assert_eq!(unknown["code"], -32602, "{unknown}");
    let refused = [
        ("bernstein_run", json!({"goal": "x", "unexpected": 1})),
        ("bernstein_run", json!({"goal": 42})),
        ("bernstein_run_status", json!({"run_id": "a\u{0}b"})),
        (
            "bernstein_claim",
            json!({"claimer_id": "w", "completed_ids": [["deep"]]}),
        ),
    ];
    for (name, arguments) in refused {
        let result = project.call(name, arguments).await;
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // An unknown name, or the firewall's refusal payload (inside the meter envelope);
        // whether a refusal also carries `isError` is the tool-result shape's concern.
        let expected = if name == "no_such_tool" {
            "Unknown tool: no_such_tool"
        } else {
            r#"{"error": "payload"#
        };
        assert!(
            text.contains(expected),
            "{name} should be refused: {result}"
        );
    }
    assert_eq!(
        before,
        sdd_snapshot(project.dir.path()),
        "a refused call wrote to .sdd"
    );
    // And the server keeps serving admitted calls, in order.
    project
        .call("bernstein_run_status", json!({"run_id": "run-1"}))
        .await;
    let journal = load_run_journal(project.dir.path(), DEFAULT_ANCHOR_RUN_ID).unwrap();
    assert_eq!(journal.rows.len(), 2);
}

/// A call that cannot be anchored (the anchoring journal's path is taken by a directory, so no
/// row can be appended) is answered with -32603 and does not run: the task it asked for is
/// never created.
#[tokio::test]
async fn a_call_that_cannot_be_anchored_answers_internal_error_and_does_not_run() {
    let project = Project::new();
    let journal = bernstein_journal::run_journal::run_journal_path(
        project.dir.path(),
        bernstein_mcp_core::DEFAULT_ANCHOR_RUN_ID,
    )
    .unwrap();
    std::fs::create_dir_all(&journal).unwrap();
    let reply = project
        .send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                     "params": {"name": "bernstein_create_task",
                                "arguments": {"title": "must not exist", "description": "d"}}}))
        .await;
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    assert!(reply.get("result").is_none(), "{reply}");
    // Nothing ran: once anchoring works again, the store holds no task.
    std::fs::remove_dir_all(&journal).unwrap();
    let status = project.call("bernstein_status", json!({})).await;
    let text = status["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(r#""total": 0"#), "{text}");
    assert!(!text.contains("must not exist"), "{text}");
}
