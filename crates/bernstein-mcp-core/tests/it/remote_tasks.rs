//! `tasks/get` and `bernstein_run_status` agree on the status of one task over a task server
//! (`--server-url`), including a task the server finished outside MCP: both are projected by
//! the same poll, which journals and seals what the server settled. The task server is a small
//! stateful HTTP/1.1 server on loopback (the pattern of the remote suites).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bernstein_mcp_core::Dispatcher;
use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::Backend;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{Project, key};

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

fn task(id: &str, status: &str, parent: Option<&str>) -> (String, Value) {
    (
        id.to_owned(),
        json!({"id": id, "title": id, "status": status, "version": 2, "parent_task_id": parent}),
    )
}

/// A scratch project whose dispatcher is served by a task server holding `tasks`.
async fn remote_project(tasks: &Tasks) -> Project {
    let url = task_server(Arc::clone(tasks)).await;
    let project = Project::new();
    let remote = RemoteBackend::new(RemoteConfig::new(&url)).unwrap();
    let backend = Arc::new(Backend::remote(remote).with_audit_key(key()));
    Project {
        dispatcher: Dispatcher::builder(project.dir.path())
            .audit_key(key())
            .backend_instance(backend)
            .build()
            .unwrap(),
        ..project
    }
}

async fn status_pair(project: &Project, id: &str) -> (String, String) {
    let got = project.result("tasks/get", json!({"taskId": id})).await;
    let polled = project
        .call("bernstein_run_status", json!({"run_id": id}))
        .await;
    (
        got["status"].as_str().unwrap().to_owned(),
        polled["structuredContent"]["result"]["status"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_get_and_run_status_agree_over_a_task_server() {
    let tasks: Tasks = Arc::new(Mutex::new(
        [task("t-1", "claimed", None), task("t-2", "claimed", None)]
            .into_iter()
            .collect(),
    ));
    let project = remote_project(&tasks).await;
    assert_eq!(
        status_pair(&project, "t-1").await,
        ("working".into(), "working".into())
    );
    project
        .call(
            "bernstein_complete",
            json!({"task_id": "t-1", "result_summary": "ok"}),
        )
        .await;
    assert_eq!(
        status_pair(&project, "t-1").await,
        ("completed".into(), "completed".into())
    );
    // Finished outside MCP: the first view to look journals it, the other agrees.
    tasks.lock().unwrap().get_mut("t-2").unwrap()["status"] = json!("cancelled");
    assert_eq!(
        status_pair(&project, "t-2").await,
        ("cancelled".into(), "cancelled".into())
    );
}

/// A settled task's row and result carry the store's summary: a completed task's summary is its
/// status message and its result text, and a failed task is an error result. A store summary
/// that is empty says nothing, so the row falls back to the status's default message.
#[tokio::test(flavor = "multi_thread")]
async fn settled_tasks_answer_with_the_stores_summary_or_the_default_message() {
    let tasks: Tasks = Arc::new(Mutex::new(
        [task("t-1", "claimed", None), task("t-2", "claimed", None)]
            .into_iter()
            .collect(),
    ));
    let project = remote_project(&tasks).await;
    project
        .call(
            "bernstein_complete",
            json!({"task_id": "t-1", "result_summary": "shipped the fix"}),
        )
        .await;
    let got = project.result("tasks/get", json!({"taskId": "t-1"})).await;
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["statusMessage"], "shipped the fix", "{got}");
    let settled = project
        .result("tasks/result", json!({"taskId": "t-1"}))
        .await;
    assert_eq!(settled["isError"], false, "{settled}");
    assert_eq!(
        settled["content"][0]["text"], "shipped the fix",
        "{settled}"
    );

    // Failed outside MCP with an empty summary.
    {
        let mut rows = tasks.lock().unwrap();
        let row = rows.get_mut("t-2").unwrap();
        row["status"] = json!("failed");
        row["result_summary"] = json!("");
    }
    let got = project.result("tasks/get", json!({"taskId": "t-2"})).await;
    assert_eq!(got["status"], "failed", "{got}");
    assert_eq!(got["statusMessage"], "Task failed", "{got}");
    let failed = project
        .result("tasks/result", json!({"taskId": "t-2"}))
        .await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(failed["content"][0]["text"], "Task failed", "{failed}");
}

/// Once the run journal has settled a task, its status is the task's status: a store that later
/// reports another terminal status does not rewrite it, and `tasks/get` still agrees with
/// `bernstein_run_status`.
#[tokio::test(flavor = "multi_thread")]
async fn a_settled_journal_outranks_a_later_store_status() {
    let tasks: Tasks = Arc::new(Mutex::new(
        [task("t-1", "claimed", None)].into_iter().collect(),
    ));
    let project = remote_project(&tasks).await;
    tasks.lock().unwrap().get_mut("t-1").unwrap()["status"] = json!("cancelled");
    assert_eq!(
        status_pair(&project, "t-1").await,
        ("cancelled".into(), "cancelled".into())
    );
    tasks.lock().unwrap().get_mut("t-1").unwrap()["status"] = json!("done");
    assert_eq!(
        status_pair(&project, "t-1").await,
        ("cancelled".into(), "cancelled".into())
    );
}
