//! Cold start: the embedded store is opened on a background thread, so the protocol's own
//! methods answer while the task log is still being replayed, and a store that cannot be opened
//! is refused to the first call that needs it, as a structured error.
//!
//! The open is held back deterministically, not by timing: the test holds the task log's
//! exclusive lock (`.sdd/runtime/tasks.jsonl.lock`), which the open's recovery pass must take.

use std::fs::File;
use std::sync::Arc;

use bernstein_mcp_core::{CallScope, Dispatcher};
use serde_json::{Value, json};

use crate::support::{Notes, Project, key};

fn project_over(dir: tempfile::TempDir) -> Project {
    let (sender, receiver) = std::sync::mpsc::channel();
    let path = dir.path().to_path_buf();
    // Built on a thread of its own: a build that waited for the open would wait for the lock
    // this test holds, and the test must fail then rather than hang.
    std::thread::spawn(move || {
        let _ = sender.send(Dispatcher::builder(&path).audit_key(key()).build());
    });
    let dispatcher = receiver
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("building the dispatcher waited for the task store's open")
        .unwrap();
    Project {
        dir,
        dispatcher,
        scope: CallScope::new(),
        notes: Arc::new(Notes::default()),
    }
}

#[tokio::test]
async fn initialize_ping_and_tools_list_answer_while_the_store_is_still_opening() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join(".sdd").join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let gate = File::options()
        .read(true)
        .append(true)
        .create(true)
        .open(runtime.join("tasks.jsonl.lock"))
        .unwrap();
    gate.lock().unwrap();

    let project = Arc::new(project_over(dir));
    let init = project
        .result(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "cold-start", "version": "1"}}),
        )
        .await;
    assert!(init.get("serverInfo").is_some(), "{init}");
    project.result("ping", json!({})).await;
    let tools = project.result("tools/list", json!({})).await;
    assert!(
        tools["tools"]
            .as_array()
            .is_some_and(|tools| !tools.is_empty()),
        "{tools}"
    );

    // A call that needs the store waits for the open, which waits for the lock we hold.
    let call = tokio::spawn({
        let project = Arc::clone(&project);
        async move { project.call("bernstein_status", json!({})).await }
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(
        !call.is_finished(),
        "bernstein_status answered before the store was opened"
    );

    gate.unlock().unwrap();
    let status = call.await.unwrap();
    assert_ne!(status["isError"], Value::Bool(true), "{status}");
}

#[tokio::test]
async fn a_corrupt_task_log_is_refused_to_the_first_call_that_needs_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join(".sdd").join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::write(
        runtime.join("tasks.jsonl"),
        "{\"id\": \"x\", \"title\": 1}\n{\"id\": \"y\"}\n",
    )
    .unwrap();

    let project = project_over(dir);
    let init = project
        .result(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "cold-start", "version": "1"}}),
        )
        .await;
    assert!(init.get("serverInfo").is_some(), "{init}");

    for _ in 0..2 {
        let reply = project
            .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "bernstein_status", "arguments": {}}}))
            .await;
        let text = reply.to_string();
        let refused = reply.get("error").is_some() || reply["result"]["isError"] == true;
        assert!(refused, "a corrupt task log was served: {reply}");
        assert!(
            text.contains("tasks.jsonl"),
            "the refusal does not name the log: {reply}"
        );
    }
}

/// A project that has lived: its anchoring journal is read on a thread of its own as the
/// dispatcher is built, so the first anchored call reads only what was appended since. A
/// project without one gets none from the read ahead.
#[tokio::test]
async fn the_anchoring_journal_is_read_ahead_of_the_first_call() {
    use bernstein_journal::run_journal::{HashProfile, JournalWriter};
    use bernstein_mcp_core::DEFAULT_ANCHOR_RUN_ID;
    use bernstein_protocol::pyjson::Object;

    let fresh = project_over(tempfile::tempdir().unwrap());
    let fresh_anchor = fresh.dispatcher.anchor().expect("calls are anchored");
    let journal = fresh
        .dir
        .path()
        .join(".sdd/runs")
        .join(DEFAULT_ANCHOR_RUN_ID);
    // Both read aheads take the writer's lock, so once this one returns the other is over.
    fresh_anchor.read_ahead();
    assert!(!journal.exists(), "the read ahead created the journal");
    assert_eq!(fresh_anchor.journal_catch_up_stats().full_reads, 0);

    let dir = tempfile::tempdir().unwrap();
    let mut earlier =
        JournalWriter::open(dir.path(), DEFAULT_ANCHOR_RUN_ID, HashProfile::PyJsonV1).unwrap();
    for n in 0..40_u64 {
        earlier
            .append("mcp.other_server", &Object::new().with("n", n))
            .unwrap();
    }
    let project = project_over(dir);
    let anchor = project.dispatcher.anchor().expect("calls are anchored");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while anchor.journal_catch_up_stats().full_reads == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the anchoring journal was not read ahead of the first call"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let before = anchor.journal_catch_up_stats();
    assert_eq!(before.lock_holds, 0, "nothing was appended: {before:?}");
    let status = project.call("bernstein_status", json!({})).await;
    assert_ne!(status["isError"], Value::Bool(true), "{status}");
    let after = anchor.journal_catch_up_stats();
    assert_eq!(
        (after.full_reads, after.lock_holds),
        (1, 1),
        "the first call read the journal again: {after:?}"
    );
}
