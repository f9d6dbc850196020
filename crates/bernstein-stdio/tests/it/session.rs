//! One session over `tokio::io::duplex`: initialize, tools, prompts, resources, tasks, a cancel
//! reaching a running call, a malformed line, and a clean end at EOF.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::{Dispatcher, DispatcherBuilder};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

pub(crate) struct Session {
    pub(crate) to_server: Option<tokio::io::DuplexStream>,
    pub(crate) from_server: tokio::io::Lines<BufReader<tokio::io::DuplexStream>>,
    pub(crate) server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Messages read while waiting for another id.
    pub(crate) pending: Vec<Value>,
    pub(crate) dir: Arc<tempfile::TempDir>,
    /// The dispatcher serving the stream, kept to wait for its store to open.
    dispatcher: Dispatcher,
}

/// Every file under `<root>/.sdd/` with its size: what a refused or cancelled message must
/// leave unchanged.
pub(crate) fn evidence_files(root: &Path) -> BTreeMap<String, u64> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, u64>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                walk(&path, out);
            } else {
                out.insert(path.display().to_string(), meta.len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(&root.join(".sdd"), &mut out);
    out
}

/// The test audit key.
pub(crate) fn key() -> AuditKey {
    AuditKey::from_master_bytes(b"0123456789abcdef".repeat(4))
}

impl Session {
    pub(crate) fn start() -> Session {
        Session::start_with(|builder| builder)
    }

    /// A session over a dispatcher the caller configures, in a fresh project.
    pub(crate) fn start_with(
        configure: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder,
    ) -> Session {
        let dir = tempfile::tempdir().unwrap();
        let builder = Dispatcher::builder(dir.path()).audit_key(key());
        let dispatcher = configure(builder).build().unwrap();
        Session::on(dispatcher, Arc::new(dir))
    }

    /// Another stream served by `dispatcher` (which serves the project at `dir`).
    pub(crate) fn on(dispatcher: Dispatcher, dir: Arc<tempfile::TempDir>) -> Session {
        let (client_in, server_out) = tokio::io::duplex(1 << 16);
        let (server_in, client_out) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(bernstein_stdio::serve(
            dispatcher.clone(),
            server_in,
            server_out,
        ));
        Session {
            to_server: Some(client_out),
            from_server: BufReader::new(client_in).lines(),
            server,
            pending: Vec::new(),
            dir,
            dispatcher,
        }
    }

    /// Every file under the project's `.sdd/` with its size, once the store has opened.
    ///
    /// The embedded store opens on a thread of its own when the dispatcher is built, and its
    /// open creates the store's lock files. A snapshot taken before that open ended would see
    /// those files appear later and blame the message under test (seen on a fresh CI machine);
    /// waiting for readiness, which writes nothing, takes every snapshot after the open.
    pub(crate) async fn evidence(&self) -> BTreeMap<String, u64> {
        self.store_opened().await;
        evidence_files(self.dir.path())
    }

    /// Waits until the embedded store's background open has ended (it creates
    /// `.sdd/runtime/` and the store's lock files); readiness writes nothing.
    pub(crate) async fn store_opened(&self) {
        self.dispatcher
            .readiness()
            .await
            .expect("the embedded store opened");
    }

    /// Sends raw bytes followed by a newline.
    pub(crate) async fn send_bytes(&mut self, bytes: &[u8]) {
        let input = self.to_server.as_mut().expect("input already closed");
        input.write_all(bytes).await.unwrap();
        input.write_all(b"\n").await.unwrap();
    }

    pub(crate) async fn send_line(&mut self, line: &str) {
        let input = self.to_server.as_mut().expect("input already closed");
        input.write_all(line.as_bytes()).await.unwrap();
        input.write_all(b"\n").await.unwrap();
    }

    /// Ends the server's input (EOF).
    pub(crate) async fn close_input(&mut self) {
        if let Some(mut input) = self.to_server.take() {
            input.shutdown().await.unwrap();
        }
    }

    pub(crate) async fn next_message(&mut self) -> Value {
        let line = self
            .from_server
            .next_line()
            .await
            .unwrap()
            .expect("server closed early");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"))
    }

    /// Reads until the response with `id` arrives; other messages are kept.
    pub(crate) async fn response(&mut self, id: Value) -> Value {
        if let Some(at) = self
            .pending
            .iter()
            .position(|m| m.get("id") == Some(&id) && m.get("method").is_none())
        {
            return self.pending.remove(at);
        }
        let wait = async {
            loop {
                let message = self.next_message().await;
                if message.get("id") == Some(&id) && message.get("method").is_none() {
                    return message;
                }
                self.pending.push(message);
            }
        };
        match tokio::time::timeout(std::time::Duration::from_secs(60), wait).await {
            Ok(message) => message,
            Err(_) => panic!("no response with id {id} within 60 s"),
        }
    }

    pub(crate) async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        let line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.send_line(&line).await;
        self.response(json!(id)).await
    }
}

#[tokio::test]
async fn a_whole_session_over_a_duplex() {
    let mut session = Session::start();
    let init = session
        .request(1, "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}))
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(
        init["result"]["instructions"]
            .as_str()
            .unwrap()
            .contains("bernstein_run_status")
    );
    session
        .send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;

    let tools = session.request(2, "tools/list", json!({})).await;
    // The standard tier advertises 14 tools.
    assert_eq!(
        tools["result"]["tools"].as_array().unwrap().len(),
        14,
        "{tools}"
    );

    let status = session
        .request(3, "tools/call", json!({"name": "bernstein_run_status", "arguments": {"run_id": "task-x"}, "_meta": {"progressToken": 7}}))
        .await;
    assert_eq!(status["result"]["isError"], false, "{status}");
    let progress: Vec<&Value> = session
        .pending
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(
        progress.len(),
        1,
        "the tick precedes its response: {:?}",
        session.pending
    );
    assert_eq!(progress[0]["params"]["progressToken"], 7);

    let prompts = session.request(4, "prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"].as_array().unwrap().len(), 3);
    let card = session
        .request(
            5,
            "resources/read",
            json!({"uri": "bernstein://capability"}),
        )
        .await;
    assert_eq!(
        card["result"]["contents"][0]["mimeType"],
        "application/json"
    );

    let created = session
        .request(
            6,
            "tools/call",
            json!({"name": "bernstein_run", "arguments": {"goal": "over stdio"}, "task": {}}),
        )
        .await;
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = session
        .request(7, "tasks/get", json!({"taskId": task_id}))
        .await;
    assert_eq!(got["result"]["status"], "working");

    // A long call and a cancel that reaches it while it runs; a ping is answered meanwhile.
    session
        .send_line(&json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 60}}}).to_string())
        .await;
    let pong = session.request(9, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    session
        .send_line(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"user"}}"#)
        .await;
    let cancelled = session.response(json!(8)).await;
    assert_eq!(cancelled["result"]["cancelled"], true, "{cancelled}");

    // Malformed input is answered and the server keeps serving.
    session.send_line("{this is not json").await;
    let parse_error = session.response(Value::Null).await;
    assert_eq!(parse_error["error"]["code"], -32700);
    session.send_line("").await;
    let after = session.request(10, "ping", json!({})).await;
    assert_eq!(after["result"], json!({}));

    // EOF: the server finishes cleanly and closes its output.
    session.close_input().await;
    let mut rest: HashMap<String, Value> = HashMap::new();
    while let Some(line) = session.from_server.next_line().await.unwrap() {
        rest.insert(line.clone(), serde_json::from_str(&line).unwrap());
    }
    assert!(rest.is_empty(), "nothing was owed: {rest:?}");
    session.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn eof_lets_calls_still_running_finish_and_flushes_their_answers() {
    let mut session = Session::start();
    // A subscription that times out on its own after one second: answered in full, not cut.
    session
        .send_line(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 1}}}).to_string())
        .await;
    // Make sure the call was accepted before the input ends.
    assert_eq!(
        session.request(2, "ping", json!({})).await["result"],
        json!({})
    );
    session.close_input().await;
    let answer = session.response(json!(1)).await;
    assert!(answer["result"].get("cancelled").is_none(), "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["result"]["timed_out"], true,
        "{answer}"
    );
    assert!(session.from_server.next_line().await.unwrap().is_none());
    session.server.await.unwrap().unwrap();
}
