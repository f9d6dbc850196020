//! A scratch project, a dispatcher over it, and helpers to send messages.

use std::sync::{Arc, Mutex};

use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::{CallScope, Dispatcher, DispatcherBuilder, NotificationSink};
use serde_json::{Value, json};

/// The test audit key (64 ASCII characters, as the reference's key files hold).
pub(crate) fn key() -> AuditKey {
    AuditKey::from_master_bytes(b"0123456789abcdef".repeat(4))
}

/// A temporary project directory with a dispatcher serving it.
pub(crate) struct Project {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) dispatcher: Dispatcher,
    pub(crate) scope: CallScope,
    pub(crate) notes: Arc<Notes>,
}

/// Collects the notifications the dispatcher sends.
#[derive(Default)]
pub(crate) struct Notes(Mutex<Vec<Value>>);

impl NotificationSink for Notes {
    fn send(&self, notification: Value) {
        self.0.lock().unwrap().push(notification);
    }
}

impl Notes {
    pub(crate) fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl Project {
    pub(crate) fn new() -> Project {
        Project::with(|b| b)
    }

    pub(crate) fn with(configure: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".sdd")).unwrap();
        let builder = Dispatcher::builder(dir.path()).audit_key(key());
        let dispatcher = configure(builder).build().unwrap();
        Project {
            dir,
            dispatcher,
            scope: CallScope::new(),
            notes: Arc::new(Notes::default()),
        }
    }

    /// Sends one message (as text) and returns the parsed response, if any.
    pub(crate) async fn send_text(&self, text: &str) -> Option<Value> {
        let notes: Arc<dyn NotificationSink> = self.notes.clone();
        self.dispatcher
            .handle_text(text, &self.scope, notes)
            .await
            .map(|reply| serde_json::from_str(&reply).unwrap())
    }

    /// Sends one message and returns the response.
    pub(crate) async fn send(&self, message: Value) -> Value {
        self.send_text(&message.to_string())
            .await
            .unwrap_or_else(|| panic!("no response to {message}"))
    }

    /// Sends a request and returns its `result`, failing on an error response.
    pub(crate) async fn result(&self, method: &str, params: Value) -> Value {
        let reply = self
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await;
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].clone()
    }

    /// Sends a request and returns its `error`, failing on a result.
    pub(crate) async fn error(&self, method: &str, params: Value) -> Value {
        let reply = self
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .await;
        assert!(reply.get("result").is_none(), "{method}: {reply}");
        reply["error"].clone()
    }

    /// Calls a tool and returns the `CallToolResult`.
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> Value {
        self.result("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }
}

/// The per-request `_meta` of a 2026-07-28 client; `tasks` declares the tasks extension.
pub(crate) fn meta_2026(tasks: bool) -> Value {
    let capabilities = if tasks {
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
    })
}

/// The payload of a tool result: `structuredContent.result` under the meter, else the parsed
/// text.
pub(crate) fn payload(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).unwrap_or(Value::String(text.to_owned()));
    match parsed.get("_meter") {
        Some(_) => parsed["result"].clone(),
        None => parsed,
    }
}
