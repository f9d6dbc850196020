//! The tools against a remote task server: an unreachable one (the reference's outage
//! payloads) and a scripted one that records the requests the gates make.

use std::sync::{Arc, Mutex};

use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::{Backend, Catalogue, ToolContext};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{config, payload};

/// A base URL nothing listens on.
async fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

fn context(base_url: &str, workdir: &std::path::Path) -> ToolContext {
    let remote = RemoteBackend::new(RemoteConfig::new(base_url)).unwrap();
    ToolContext::new(workdir, Arc::new(Backend::remote(remote)))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_answers_the_reference_outage_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&closed_port().await, dir.path());
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let status = catalogue.call(&ctx, "bernstein_status", json!({})).await;
    assert_eq!(
        status.text,
        "{\n  \"live\": true,\n  \"error\": \"All connection attempts failed\",\n  \"hint\": \"Task server may be restarting\"\n}"
    );
    let claim = catalogue
        .call(&ctx, "bernstein_claim", json!({"claimer_id": "w"}))
        .await;
    assert_eq!(
        claim.text,
        r#"{"error": "All connection attempts failed", "hint": "Task server may be restarting"}"#
    );
    // Local tools keep working without a server.
    let handle = catalogue
        .call(
            &ctx,
            "bernstein_run_status",
            json!({"run_id": "task-does-not-exist"}),
        )
        .await;
    assert_eq!(
        payload(&handle)["receiptHash"],
        "fc75ed7d14f1d02791d27e67d32777eae302cec4aacc0c8ea37710119e5a779c"
    );
    let health = catalogue.call(&ctx, "bernstein_health", json!({})).await;
    assert_eq!(payload(&health)["result"], json!({"status": "ok"}));
}

/// A one-route-table HTTP/1.1 server: answers each request with the body `respond` returns
/// for `(method, path)`, and records the request lines.
async fn scripted(respond: fn(&str, &str) -> (u16, String)) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
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
                            let lower = l.to_ascii_lowercase();
                            lower
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buffer.len() < end + 4 + length {
                        continue;
                    }
                    let line = text.lines().next().unwrap_or_default().to_owned();
                    let mut parts = line.split(' ');
                    let method = parts.next().unwrap_or_default().to_owned();
                    let path = parts.next().unwrap_or_default().to_owned();
                    log.lock().unwrap().push(format!("{method} {path}"));
                    let (status, body) = respond(&method, &path);
                    let reason = if status == 200 { "OK" } else { "Not Found" };
                    let response = format!(
                        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    return;
                }
            });
        }
    });
    (format!("http://{address}"), seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_completion_gate_reads_first_and_refuses_without_a_write() {
    let (url, seen) = scripted(|method, path| match (method, path) {
        ("GET", "/tasks/t-42") => (
            200,
            r#"{"id": "t-42", "status": "waiting_for_subtasks"}"#.to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let outcome = catalogue
        .call(
            &ctx,
            "bernstein_complete",
            json!({"task_id": "t-42", "result_summary": "x"}),
        )
        .await;
    let body = payload(&outcome);
    assert_eq!(body["error"], "task_not_completable", "{}", outcome.text);
    assert_eq!(body["current_status"], "waiting_for_subtasks");
    assert_eq!(*seen.lock().unwrap(), ["GET /tasks/t-42"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_a_server_returns_the_poll_handle() {
    let (url, seen) = scripted(|method, path| match (method, path) {
        ("POST", "/tasks") => (
            200,
            r#"{"id": "3ed7631685aa", "title": "Add auth", "status": "open", "role": "backend"}"#
                .to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let outcome = catalogue
        .call(&ctx, "bernstein_run", json!({"goal": "Add auth"}))
        .await;
    assert_eq!(
        outcome.text,
        "{\n  \"task_id\": \"3ed7631685aa\",\n  \"title\": \"Add auth\",\n  \"status\": \"open\",\n  \"run_id\": \"task-3ed7631685aa\",\n  \"poll_after_ms\": 5000\n}"
    );
    let unknown = catalogue
        .call(&ctx, "bernstein_cancel", json!({"task_id": "gone"}))
        .await;
    assert_eq!(payload(&unknown)["error"], "unknown_task");
    assert_eq!(*seen.lock().unwrap(), ["POST /tasks", "GET /tasks/gone"]);
}
