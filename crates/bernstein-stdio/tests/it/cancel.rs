//! Streaming cancel over the stdio seam: a flood of `notifications/cancelled` for ids that are
//! not in flight (unknown, settled, or in flight on another stream) stops nothing, writes
//! nothing and leaves the server serving; the one cancel that names the running call gets its
//! partial work back, with `_meter` and without `isError`.

use std::sync::Arc;

use bernstein_mcp_core::Dispatcher;
use serde_json::{Value, json};

use crate::session::{Session, evidence_files, key};

/// A tool call that waits up to 60 s for a task to appear: it is still running when cancelled.
fn long_call(id: i64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 60}}})
    .to_string()
}

fn cancel(id: &Value) -> String {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "flood"}})
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cancels_for_ids_not_in_flight_change_nothing() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let dispatcher = Dispatcher::builder(dir.path())
        .audit_key(key())
        .build()
        .unwrap();
    let mut first = Session::on(dispatcher.clone(), Arc::clone(&dir));
    let mut second = Session::on(dispatcher, Arc::clone(&dir));
    first.send_line(&long_call(1)).await;
    // A ping answered after the call was read proves the call is admitted and running.
    assert_eq!(
        first.request(2, "ping", json!({})).await["result"],
        json!({})
    );
    // Id 2 has settled on the first stream; id 1 is in flight there, but not on the second.
    // The call is anchored on the blocking pool (journal row, then audit entry): wait, bounded,
    // for both before comparing.
    let journal = dir.path().join(".sdd/runs/mcp-calls/journal.jsonl");
    let audited = |root: &std::path::Path| {
        evidence_files(root).iter().any(|(path, len)| {
            path.contains("/.sdd/audit/") && path.ends_with(".jsonl") && *len > 0
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(&journal).map_or(0, |j| j.lines().count()) < 1
        || !audited(dir.path())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the long call was never anchored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = evidence_files(dir.path());

    let flood = |ids: Vec<Value>| -> String {
        let mut text = String::new();
        for id in &ids {
            text.push_str(&cancel(id));
            text.push('\n');
        }
        text
    };
    let first_ids: Vec<Value> = (0..500)
        .map(|i| {
            if i % 2 == 0 {
                json!(1000 + i)
            } else {
                json!(format!("s-{i}"))
            }
        })
        .chain(std::iter::once(json!(2)))
        .collect();
    let second_ids: Vec<Value> = (0..499).map(|i| json!(i)).chain([json!(1)]).collect();
    assert_eq!(first_ids.len() + second_ids.len(), 1001);
    // Both streams flood at once.
    let (first_flood, second_flood) = (flood(first_ids), flood(second_ids));
    let writes = async {
        tokio::join!(
            first.send_bytes(first_flood.trim_end().as_bytes()),
            second.send_bytes(second_flood.trim_end().as_bytes())
        )
    };
    writes.await;

    // Notifications are never answered: the next message on each stream is its ping's answer.
    assert_eq!(
        first.request(3, "ping", json!({})).await,
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );
    assert_eq!(
        second.request(3, "ping", json!({})).await,
        json!({"jsonrpc": "2.0", "id": 3, "result": {}})
    );
    assert!(first.pending.is_empty() && second.pending.is_empty());
    // Nothing was written and the running call was not touched.
    assert_eq!(evidence_files(dir.path()), before);
    let listed = second.request(4, "tools/list", json!({})).await;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );

    // The one cancel that names the running call on its own stream stops it, with its work.
    first.send_line(&cancel(&json!(1))).await;
    let reply = first.response(json!(1)).await;
    let result = &reply["result"];
    assert_eq!(result["cancelled"], true, "{reply}");
    assert_eq!(
        result["partial"],
        json!([r#"{"status": "running", "tool": "bernstein_subscribe"}"#]),
        "{reply}"
    );
    assert_eq!(result["_meter"]["tool"], "bernstein_subscribe", "{reply}");
    assert!(result["_meter"]["call_id"].is_string(), "{reply}");
    assert!(result.get("isError").is_none(), "{reply}");
    // Settled now: cancelling it again is a no-op and the stream keeps serving.
    first.send_line(&cancel(&json!(1))).await;
    assert_eq!(
        first.request(5, "ping", json!({})).await["result"],
        json!({})
    );
}
