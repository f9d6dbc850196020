//! The tools against a remote task server: an unreachable one (the reference's outage
//! payloads) and a scripted one that records the requests the gates make and pages its task
//! list.

use std::sync::{Arc, Mutex};

use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::{Backend, CancelAnswer, Catalogue, ToolContext};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::common::{config, payload};

/// A base URL nothing listens on.
pub(crate) async fn closed_port() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}")
}

pub(crate) fn context(base_url: &str, workdir: &std::path::Path) -> ToolContext {
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
pub(crate) async fn scripted(
    respond: fn(&str, &str) -> (u16, String),
) -> (String, Arc<Mutex<Vec<String>>>) {
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

/// The sign-off path of `bernstein_approve`: a task held in `pending_approval` is read, then
/// completed with the note, and the answer says which state it was approved from. (The
/// embedded store has no transition into `pending_approval`; a task server does.)
#[tokio::test(flavor = "multi_thread")]
async fn approve_signs_off_a_pending_approval_task() {
    let (url, seen) = scripted(|method, path| match (method, path) {
        ("GET", "/tasks/t-7") => (
            200,
            r#"{"id": "t-7", "status": "pending_approval", "result_summary": "held"}"#.to_owned(),
        ),
        ("POST", "/tasks/t-7/complete") => (
            200,
            r#"{"id": "t-7", "status": "done", "result_summary": "ship it"}"#.to_owned(),
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
            "bernstein_approve",
            json!({"task_id": "t-7", "note": "ship it"}),
        )
        .await;
    let body = payload(&outcome);
    assert_eq!(
        body["approved_from"], "pending_approval",
        "{}",
        outcome.text
    );
    assert_eq!(body["status"], "done");
    assert_eq!(body["result_summary"], "ship it");
    // The gate's read, the transition, then the read that journals and seals the run it ended
    // (the run handle issue): nothing else reaches the task server.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "GET /tasks/t-7",
            "POST /tasks/t-7/complete",
            "GET /tasks/t-7"
        ]
    );
}

/// A task server whose `GET /events/tasks` stream stays open: the request line is reported on
/// `opened` once the stream's head was sent (the deterministic sign that a subscription is
/// running), and each string received on the returned sender is written as one SSE chunk.
async fn event_stream() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    tokio::sync::mpsc::UnboundedSender<String>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (opened_tx, opened) = tokio::sync::mpsc::unbounded_channel();
    let (events, mut events_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            head.push(byte[0]);
        }
        let _ = stream
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            )
            .await;
        let line = String::from_utf8_lossy(&head)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        let _ = opened_tx.send(line);
        while let Some(chunk) = events_rx.recv().await {
            if stream.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    (format!("http://{address}"), opened, events)
}

/// `bernstein_subscribe` answers the first task created for its role once its stream is open:
/// the event is sent only after the server saw the subscription, so no sleep decides the order.
#[tokio::test(flavor = "multi_thread")]
async fn subscribe_answers_the_first_task_created_after_it_started() {
    let (url, mut opened, events) = event_stream().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let waiting = catalogue.call(
        &ctx,
        "bernstein_subscribe",
        json!({"role": "qa", "timeout_seconds": 30}),
    );
    let creating = async {
        let line = opened.recv().await.unwrap();
        assert_eq!(line, "GET /events/tasks?role=qa HTTP/1.1");
        events
            .send(
                "event: task.created\ndata: {\"task_id\": \"t-9\", \"title\": \"check it\"}\n\n"
                    .to_owned(),
            )
            .unwrap();
    };
    let (notified, ()) = tokio::join!(waiting, creating);
    assert_eq!(
        payload(&notified),
        json!({"notifications": [{"task_id": "t-9", "title": "check it"}], "timed_out": false})
    );
}

/// A call cancelled while it runs (its subscription stream is open and nothing has arrived)
/// stops at once and returns its partial work with the meter.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_cancelled_while_running_returns_its_partial_work() {
    let (url, mut opened, _events) = event_stream().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    let catalogue = Catalogue::new(&config(true)).unwrap();
    let waiting = catalogue.call(
        &ctx,
        "bernstein_subscribe",
        json!({"role": "qa", "timeout_seconds": 30}),
    );
    let cancelling = async {
        opened.recv().await.unwrap();
        ctx.cancel.cancel();
    };
    let (outcome, ()) = tokio::join!(waiting, cancelling);
    assert!(outcome.cancelled, "{}", outcome.text);
    assert!(!outcome.is_error);
    assert_eq!(
        outcome.partial,
        [r#"{"status": "running", "tool": "bernstein_subscribe"}"#]
    );
    let meter = outcome.meter.as_ref().unwrap();
    assert_eq!(meter["tool"], "bernstein_subscribe");
}

/// A tool's declared timeout is enforced: `bernstein_subscribe` declares 65 s. Its schema caps
/// `timeout_seconds` at 60, so only a permissive server (validation failures are warnings)
/// lets a subscription ask for 120 s; on a stream that never delivers, the call is stopped at
/// 65 s with the reference's timeout answer (the subscription's own deadline would answer
/// `timed_out` instead). This test takes the 65 s of real time it is about.
#[tokio::test(flavor = "multi_thread")]
async fn a_declared_timeout_stops_the_call() {
    let (url, mut opened, _events) = event_stream().await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    let catalogue = Catalogue::new(&bernstein_tools::ToolConfig {
        validation: bernstein_tools::Validation::Permissive,
        ..config(false)
    })
    .unwrap();
    let waiting = catalogue.call(
        &ctx,
        "bernstein_subscribe",
        json!({"role": "qa", "timeout_seconds": 120}),
    );
    // The bound only keeps a call that never connects from hanging the suite.
    let opened = tokio::time::timeout(std::time::Duration::from_secs(150), opened.recv());
    let (outcome, line) = tokio::join!(waiting, opened);
    assert_eq!(
        line.ok().flatten().as_deref(),
        Some("GET /events/tasks?role=qa HTTP/1.1"),
        "{}",
        outcome.text
    );
    // The reference's timeout payload, answered as an error result (refusals are errors).
    assert!(!outcome.cancelled && outcome.is_error, "{}", outcome.text);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&outcome.text).unwrap(),
        json!({
            "error": "tool bernstein_subscribe exceeded its declared timeout of 65s",
            "tool": "bernstein_subscribe",
            "timeoutSeconds": 65,
            "timeout": true,
        })
    );
}

/// A claim hands its answer over as a value; one that reports an error (a task server's
/// refusal in a 200 answer) is still an error result, with the meter on or off, and keeps its
/// payload.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_answer_that_reports_an_error_is_an_error_result() {
    let (url, seen) = scripted(|method, path| match (method, path) {
        ("POST", "/tasks/claim-receipt") => (
            200,
            r#"{"error": "backlog unavailable", "hint": "retry later"}"#.to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(&url, dir.path());
    for meter in [true, false] {
        let catalogue = Catalogue::new(&config(meter)).unwrap();
        let claim = catalogue
            .call(&ctx, "bernstein_claim", json!({"claimer_id": "w"}))
            .await;
        assert!(claim.is_error, "meter {meter}: {}", claim.text);
        assert_eq!(payload(&claim)["error"], "backlog unavailable");
        assert_eq!(payload(&claim)["hint"], "retry later");
        if meter {
            assert_eq!(claim.meter.unwrap()["ok"], false);
        }
    }
    assert_eq!(seen.lock().unwrap().len(), 2);
}

/// A task server's status list has no paging, so the backend pages it: each page starts after
/// the cursor's row, holds at most `limit` rows, and names the next cursor only while rows
/// remain (a page that ends exactly on the last row names none).
#[tokio::test(flavor = "multi_thread")]
async fn a_remote_status_list_is_paged_after_the_cursor() {
    let (url, _seen) = scripted(|method, path| match (method, path) {
        ("GET", "/tasks?status=open") => (
            200,
            r#"[{"id": "t-1", "status": "open"}, {"id": "t-2", "status": "open"},
                {"id": "t-3", "status": "open"}, {"id": "t-4", "status": "open"},
                {"id": "t-5", "status": "open"}]"#
                .to_owned(),
        ),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let backend = Backend::remote(RemoteBackend::new(RemoteConfig::new(&url)).unwrap());
    let page = |cursor: Option<&'static str>, limit: usize| {
        let backend = &backend;
        async move {
            let (rows, next) = backend
                .list_tasks_page("open", cursor, limit)
                .await
                .unwrap();
            let ids: Vec<String> = rows
                .iter()
                .map(|row| {
                    let id = row.as_object().unwrap().get("id").unwrap();
                    id.as_str().unwrap().to_owned()
                })
                .collect();
            (ids, next)
        }
    };
    assert_eq!(
        page(None, 2).await,
        (
            vec!["t-1".to_owned(), "t-2".to_owned()],
            Some("t-2".to_owned())
        )
    );
    assert_eq!(
        page(Some("t-2"), 2).await,
        (
            vec!["t-3".to_owned(), "t-4".to_owned()],
            Some("t-4".to_owned())
        )
    );
    assert_eq!(page(Some("t-4"), 2).await, (vec!["t-5".to_owned()], None));
    assert_eq!(
        page(Some("t-3"), 2).await,
        (vec!["t-4".to_owned(), "t-5".to_owned()], None)
    );
    // A limit of zero is raised to one row rather than answering an empty page.
    assert_eq!(
        page(Some("t-1"), 0).await,
        (vec!["t-2".to_owned()], Some("t-2".to_owned()))
    );
    let unknown = backend.list_tasks_page("open", Some("t-9"), 2).await;
    assert!(
        matches!(
            unknown,
            Err(bernstein_tools::Error::Task(
                bernstein_tasks::Error::InvalidCursor(ref cursor)
            )) if cursor == "t-9"
        ),
        "{unknown:?}"
    );
}

/// Only a "no such task" answer makes a cancel report an unknown task: when the pre-check
/// read fails because the server cannot be reached, the cancel is that failure.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_whose_read_fails_is_an_error_not_an_unknown_task() {
    let backend =
        Backend::remote(RemoteBackend::new(RemoteConfig::new(closed_port().await)).unwrap());
    let answer = backend.cancel_task("t-5", "stop").await;
    assert!(
        matches!(answer, Err(ref e) if !e.is_not_found()),
        "{answer:?}"
    );
}

/// A cancel the server refuses with 409 (the task ended between the pre-check and the cancel)
/// is answered as not cancellable, with the status read again; any other refusal is an error.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_refused_as_a_conflict_is_not_cancellable_and_other_refusals_are_errors() {
    let (url, seen) = scripted(|method, path| match (method, path) {
        ("GET", "/tasks/t-5" | "/tasks/t-6") => (200, r#"{"status": "claimed"}"#.to_owned()),
        ("POST", "/tasks/t-5/cancel") => (409, r#"{"detail": "conflict"}"#.to_owned()),
        ("POST", "/tasks/t-6/cancel") => (400, r#"{"detail": "bad request"}"#.to_owned()),
        _ => (404, r#"{"detail": "Not Found"}"#.to_owned()),
    })
    .await;
    let backend = Backend::remote(RemoteBackend::new(RemoteConfig::new(&url)).unwrap());
    let conflict = backend.cancel_task("t-5", "stop").await.unwrap();
    assert_eq!(
        conflict,
        CancelAnswer::NotCancellable {
            reported_status: "claimed".to_owned()
        }
    );
    assert_eq!(
        *seen.lock().unwrap(),
        ["GET /tasks/t-5", "POST /tasks/t-5/cancel", "GET /tasks/t-5"]
    );
    let refused = backend.cancel_task("t-6", "stop").await;
    assert!(refused.is_err(), "{refused:?}");
}
