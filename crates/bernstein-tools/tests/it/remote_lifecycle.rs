//! The remote backend's lifecycle: transitions this server performs over `--server-url`
//! journal the lifecycle row and seal the run, a task finished outside MCP reads terminal at
//! the next poll, and concurrent pollers leave one terminal row and one seal.
//!
//! The task server is a small stateful HTTP/1.1 server on loopback (the pattern of
//! `remote.rs`): it keeps task rows and applies `complete` and `cancel` (with the subtask
//! cascade) as `bernstein serve` does, so the backend's real HTTP client talks to it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bernstein_journal::audit::verified_records;
use bernstein_journal::handle::{PresentedHandle, verify_handle_chain};
use bernstein_journal::run_journal::load_run_journal;
use bernstein_protocol::pyjson::Value as PyValue;
use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::{Backend, Catalogue, Settled, ToolContext};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{audit_key, config, payload};

type Tasks = Arc<Mutex<BTreeMap<String, Value>>>;

/// Serves the task rows in `tasks` on loopback; returns the base URL.
async fn task_server(tasks: Tasks) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tasks = Arc::clone(&tasks);
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buffer).to_string();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buffer.len() >= end + 4 + length {
                        break (text[..end].to_owned(), text[end + 4..].to_owned());
                    }
                };
                let line = head.lines().next().unwrap_or_default().to_owned();
                let mut parts = line.split(' ');
                let method = parts.next().unwrap_or_default();
                let path = parts.next().unwrap_or_default();
                let (status, answer) = route(&tasks, method, path, &body);
                let response = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    format!("http://{address}")
}

fn route(tasks: &Tasks, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut tasks = tasks.lock().unwrap();
    let not_found = (404, r#"{"detail": "Task not found"}"#.to_owned());
    if method == "GET" && path.starts_with("/tasks?status=") {
        let wanted = &path["/tasks?status=".len()..];
        // A task of this id makes every listing fail, as a server that errs mid-walk would.
        if tasks.contains_key(LISTING_FAILS) {
            return (500, r#"{"detail": "Internal Server Error"}"#.to_owned());
        }
        let rows: Vec<&Value> = tasks.values().filter(|t| t["status"] == wanted).collect();
        return (200, serde_json::to_string(&rows).unwrap());
    }
    let Some(rest) = path.strip_prefix("/tasks/") else {
        return not_found;
    };
    let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
    if !tasks.contains_key(id) {
        return not_found;
    }
    let args: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match (method, action) {
        ("GET", "") => {}
        ("POST", "complete") => {
            let task = tasks.get_mut(id).unwrap();
            task["status"] = json!("done");
            task["result_summary"] = args["result_summary"].clone();
            task["version"] = json!(task["version"].as_i64().unwrap_or(1) + 1);
        }
        ("POST", "cancel") => {
            let mut tree = vec![id.to_owned()];
            let mut next = 0;
            while next < tree.len() {
                let parent = tree[next].clone();
                next += 1;
                tree.extend(
                    tasks
                        .values()
                        .filter(|t| t["parent_task_id"] == parent.as_str())
                        .map(|t| t["id"].as_str().unwrap().to_owned()),
                );
            }
            for each in tree {
                let task = tasks.get_mut(&each).unwrap();
                task["status"] = json!("cancelled");
                task["result_summary"] = args["reason"].clone();
            }
        }
        _ => return not_found,
    }
    (200, tasks[id].to_string())
}

/// The id of a task whose presence makes the fake server's listings answer 500.
const LISTING_FAILS: &str = "listing-fails";

fn task(id: &str, status: &str, parent: Option<&str>) -> (String, Value) {
    (
        id.to_owned(),
        json!({"id": id, "title": id, "status": status, "version": 2, "parent_task_id": parent}),
    )
}

struct Remote {
    dir: tempfile::TempDir,
    tasks: Tasks,
    url: String,
    catalogue: Catalogue,
}

impl Remote {
    async fn new(rows: Vec<(String, Value)>) -> Remote {
        let tasks: Tasks = Arc::new(Mutex::new(rows.into_iter().collect()));
        let url = task_server(Arc::clone(&tasks)).await;
        Remote {
            dir: tempfile::tempdir().unwrap(),
            tasks,
            url,
            catalogue: Catalogue::new(&config(false)).unwrap(),
        }
    }

    /// A context with its own backend, as a separate server instance would have.
    fn ctx(&self) -> ToolContext {
        let remote = RemoteBackend::new(RemoteConfig::new(&self.url)).unwrap();
        let backend = Backend::remote(remote).with_audit_key(audit_key());
        ToolContext::new(self.dir.path(), Arc::new(backend))
    }

    async fn call(&self, ctx: &ToolContext, name: &str, args: Value) -> Value {
        payload(&self.catalogue.call(ctx, name, args).await)
    }

    async fn poll(&self, ctx: &ToolContext, id: &str) -> Value {
        self.call(ctx, "bernstein_run_status", json!({"run_id": id}))
            .await
    }

    /// Settles what a transition of `id` ended, through a backend of its own without an
    /// audit key (so rows are journalled and nothing is sealed).
    async fn record_settled(&self, id: &str, settled: Settled) {
        let backend = Backend::remote(RemoteBackend::new(RemoteConfig::new(&self.url)).unwrap());
        backend.record_settled(self.dir.path(), id, settled).await;
    }

    fn rows(&self, id: &str) -> Vec<String> {
        load_run_journal(self.dir.path(), &format!("task-{id}"))
            .unwrap()
            .rows
            .iter()
            .map(|r| r.get("event").and_then(PyValue::as_str).unwrap().to_owned())
            .collect()
    }

    fn seals(&self, id: &str) -> Vec<String> {
        let key = audit_key();
        verified_records(&self.dir.path().join(".sdd/audit"), &key)
            .filter(|r| {
                r.event_type == "mcp.task_handle"
                    && r.details.get("task_id").and_then(PyValue::as_str) == Some(id)
            })
            .map(|r| r.hmac)
            .collect()
    }

    fn verifies(&self, handle: &Value) -> bool {
        let wire = PyValue::parse(&handle.to_string()).unwrap();
        let presented = PresentedHandle::from_wire(&wire).unwrap();
        let report = verify_handle_chain(self.dir.path(), &audit_key(), &presented).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        report.verified()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_completion_journals_and_seals_before_the_tool_answers() {
    let remote = Remote::new(vec![task("t-42", "claimed", None)]).await;
    let ctx = remote.ctx();
    assert_eq!(remote.poll(&ctx, "t-42").await["status"], "working");
    let done = remote
        .call(
            &ctx,
            "bernstein_complete",
            json!({"task_id": "t-42", "result_summary": "shipped"}),
        )
        .await;
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(remote.rows("t-42"), ["task_completed"]);
    let seals = remote.seals("t-42");
    assert_eq!(seals.len(), 1);
    let handle = remote.poll(&ctx, "t-42").await;
    assert_eq!(handle["status"], "completed");
    assert_eq!(handle["chainHead"], seals[0].as_str());
    assert!(remote.verifies(&handle));
    // Polling again changes nothing.
    assert_eq!(remote.poll(&ctx, "task-t-42").await, handle);
    assert_eq!(remote.rows("t-42"), ["task_completed"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_cancel_journals_and_seals_every_cascaded_descendant() {
    let remote = Remote::new(vec![
        task("root", "open", None),
        task("kid", "open", Some("root")),
        task("other", "open", None),
    ])
    .await;
    let ctx = remote.ctx();
    let answer = remote
        .call(
            &ctx,
            "bernstein_cancel",
            json!({"task_id": "root", "reason": "stop"}),
        )
        .await;
    assert_eq!(answer["cancelled_descendants"], 1, "{answer}");
    for id in ["root", "kid"] {
        assert_eq!(remote.rows(id), ["task_cancelled"], "{id}");
        assert_eq!(remote.seals(id).len(), 1, "{id}");
        let handle = remote.poll(&ctx, id).await;
        assert_eq!(handle["status"], "cancelled");
        assert!(remote.verifies(&handle));
    }
    assert!(remote.rows("other").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_finished_outside_mcp_reads_terminal_and_concurrent_pollers_write_once() {
    let remote = Remote::new(vec![task("t-7", "claimed", None)]).await;
    let (a, b) = (remote.ctx(), remote.ctx());
    assert_eq!(remote.poll(&a, "t-7").await["status"], "working");
    // Finished with the bernstein CLI: only the task server knows.
    remote.tasks.lock().unwrap().get_mut("t-7").unwrap()["status"] = json!("done");
    let remote = Arc::new(remote);
    let mut polls = tokio::task::JoinSet::new();
    for i in 0..8 {
        let ctx = if i % 2 == 0 { a.clone() } else { b.clone() };
        let remote = Arc::clone(&remote);
        polls.spawn(async move { remote.poll(&ctx, "t-7").await });
    }
    let handles: Vec<Value> = polls.join_all().await;
    for handle in &handles {
        assert_eq!(handle["status"], "completed", "{handle}");
        assert_eq!(handle, &handles[0]);
    }
    assert_eq!(remote.rows("t-7"), ["task_completed"], "one terminal row");
    assert_eq!(remote.seals("t-7").len(), 1, "one seal");
    assert!(remote.verifies(&handles[0]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_approval_to_done_journals_and_seals() {
    let remote = Remote::new(vec![task("t-9", "pending_approval", None)]).await;
    let ctx = remote.ctx();
    let answer = remote
        .call(
            &ctx,
            "bernstein_approve",
            json!({"task_id": "t-9", "note": "looks right"}),
        )
        .await;
    assert_eq!(answer["status"], "done", "{answer}");
    assert_eq!(remote.rows("t-9"), ["task_completed"]);
    let seals = remote.seals("t-9");
    assert_eq!(seals.len(), 1);
    let handle = remote.poll(&ctx, "t-9").await;
    assert_eq!(handle["chainHead"], seals[0].as_str());
    assert!(remote.verifies(&handle));
}

/// After a completion the backend walks up the parent chain while the tasks it meets have
/// ended: a parent the server completed with its last subtask is journalled too, and the walk
/// stops at the first ancestor still open, which is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_completion_settles_the_ancestors_that_ended_with_it() {
    let remote = Remote::new(vec![
        task("top", "open", None),
        task("mid", "done", Some("top")),
        task("leaf", "done", Some("mid")),
    ])
    .await;
    remote.record_settled("leaf", Settled::Completion).await;
    assert_eq!(remote.rows("leaf"), ["task_completed"]);
    assert_eq!(remote.rows("mid"), ["task_completed"]);
    assert!(remote.rows("top").is_empty());
}

/// After a cancel the backend settles the cancelled tasks below the root only: a task that was
/// cancelled earlier on its own is not part of this cancel and gets no row from it.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_settles_its_own_subtree_and_not_other_cancelled_tasks() {
    let remote = Remote::new(vec![
        task("root", "cancelled", None),
        task("kid", "cancelled", Some("root")),
        task("grandkid", "cancelled", Some("kid")),
        task("earlier", "cancelled", None),
    ])
    .await;
    remote.record_settled("root", Settled::Cancellation).await;
    for id in ["root", "kid", "grandkid"] {
        assert_eq!(remote.rows(id), ["task_cancelled"], "{id}");
    }
    assert!(remote.rows("earlier").is_empty());
}

/// A completion whose parent cannot be read (the server no longer has it) still journals and
/// seals the task that ended: the walk up the parents may stop early, but what it gathered
/// before the failed read is settled, as ARCHITECTURE promises before the tool answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_completion_whose_parent_cannot_be_read_still_settles_the_task() {
    let remote = Remote::new(vec![task("leaf", "done", Some("gone"))]).await;
    remote.record_settled("leaf", Settled::Completion).await;
    assert_eq!(remote.rows("leaf"), ["task_completed"]);
}

/// A cancel whose listing of cancelled tasks fails still journals the cancelled root: the
/// subtree below it waits for the next poll, the root does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_whose_listing_fails_still_settles_the_root() {
    let remote = Remote::new(vec![
        task("root", "cancelled", None),
        task("kid", "cancelled", Some("root")),
        task(LISTING_FAILS, "open", None),
    ])
    .await;
    remote.record_settled("root", Settled::Cancellation).await;
    assert_eq!(remote.rows("root"), ["task_cancelled"]);
    assert!(remote.rows("kid").is_empty());
}
