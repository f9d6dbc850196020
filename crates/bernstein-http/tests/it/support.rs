//! A server on a loopback port 0 and a raw HTTP/1.1 client, so that tests control every byte
//! (bad input, slow senders, chunked bodies) and see every header.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bernstein_http::{HttpConfig, HttpConfigBuilder, McpHttp};
use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::{Dispatcher, DispatcherBuilder, TransportInfo};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The test audit key.
pub(crate) fn key() -> AuditKey {
    AuditKey::from_master_bytes(b"0123456789abcdef".repeat(4))
}

/// The bearer token tests configure.
pub(crate) const TOKEN: &str = "dev-token";

pub(crate) struct Server {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) dir: Arc<tempfile::TempDir>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), bernstein_http::Error>>>,
    /// The dispatcher behind the server, kept to wait for its store to open.
    dispatcher: Dispatcher,
}

/// The dispatcher the HTTP binary builds: confined, listing the HTTP and SSE transports.
pub(crate) fn http_dispatcher(builder: DispatcherBuilder) -> DispatcherBuilder {
    builder.confine_workdirs(true).transports(vec![
        TransportInfo::Http {
            path: "/mcp".to_owned(),
            default: true,
        },
        TransportInfo::Sse {
            command: "bernstein-mcp --transport http".to_owned(),
            default: false,
        },
    ])
}

impl Server {
    /// Anonymous on loopback.
    pub(crate) async fn start() -> Server {
        Server::with(|b| b, |c| c).await
    }

    /// With the bearer token [`TOKEN`].
    pub(crate) async fn bearer() -> Server {
        Server::with(
            |b| b,
            |c| c.auth_type("bearer").bearer_token(Some(TOKEN.to_owned())),
        )
        .await
    }

    pub(crate) async fn with(
        dispatcher: impl FnOnce(DispatcherBuilder) -> DispatcherBuilder,
        http: impl FnOnce(HttpConfigBuilder) -> HttpConfigBuilder,
    ) -> Server {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let built = dispatcher(http_dispatcher(
            Dispatcher::builder(dir.path()).audit_key(key()),
        ))
        .build()
        .unwrap();
        Server::serve(built, dir, http).await
    }

    pub(crate) async fn serve(
        dispatcher: Dispatcher,
        dir: Arc<tempfile::TempDir>,
        http: impl FnOnce(HttpConfigBuilder) -> HttpConfigBuilder,
    ) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = http(HttpConfig::builder(addr)).build().unwrap();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bernstein_http::serve(
            listener,
            McpHttp::new(dispatcher.clone(), config),
            async move {
                let _ = stop.await;
            },
        ));
        Server {
            addr,
            dir,
            shutdown: Some(shutdown),
            task: Some(task),
            dispatcher,
        }
    }

    pub(crate) fn host(&self) -> String {
        self.addr.to_string()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends raw request bytes on a fresh connection and reads the answer to its end.
    pub(crate) async fn raw(&self, request: &[u8]) -> Reply {
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let mut bytes = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut bytes))
            .await
            .expect("the server answered in time")
            .unwrap();
        Reply::parse(&bytes)
    }

    /// A request with `Host`, `Content-Length` and `Connection: close` added.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        self.raw(&request_bytes(&self.host(), method, path, headers, body))
            .await
    }

    /// `POST /mcp` with a JSON body and the given headers.
    pub(crate) async fn post(&self, headers: &[(&str, &str)], body: &Value) -> Reply {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        self.request("POST", "/mcp", &all, body.to_string().as_bytes())
            .await
    }

    /// `POST /mcp` with the bearer token.
    pub(crate) async fn call(&self, body: &Value) -> Reply {
        self.post(&[("authorization", "Bearer dev-token")], body)
            .await
    }

    /// Every file under `.sdd/` with its length, to show that nothing was written; taken once
    /// the store has opened.
    ///
    /// The embedded store opens on a thread of its own when the dispatcher is built, and its
    /// open creates the store's lock files. A snapshot taken before that open ended would see
    /// those files appear later and blame the request under test; waiting for readiness, which
    /// writes nothing, takes every snapshot after the open.
    pub(crate) async fn evidence(&self) -> Vec<(PathBuf, u64)> {
        self.dispatcher
            .readiness()
            .await
            .expect("the embedded store opened");
        let mut out = Vec::new();
        walk(&self.dir.path().join(".sdd"), &mut out);
        out.sort();
        out
    }

    /// Whether the server still serves: `/healthz` answers and a `tools/list` is answered.
    pub(crate) async fn assert_serving(&self) {
        let health = self.request("GET", "/healthz", &[], b"").await;
        assert_eq!(health.status, 200);
        assert_eq!(health.body_text(), r#"{"status":"ok"}"#);
        assert!(
            !self.task.as_ref().unwrap().is_finished(),
            "the server task ended"
        );
    }

    /// Shuts the server down and waits for it.
    pub(crate) async fn stop(mut self) {
        let _ = self.shutdown.take().unwrap().send(());
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("shutdown is bounded")
            .unwrap()
            .unwrap();
    }
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            let len = entry.metadata().map_or(0, |m| m.len());
            out.push((path, len));
        }
    }
}

pub(crate) fn request_bytes(
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads one HTTP/1.1 answer with a `Content-Length` body, leaving the connection open.
pub(crate) async fn read_answer(stream: &mut TcpStream) -> Result<Reply, String> {
    let mut bytes = Vec::new();
    loop {
        if let Some(head) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            let length: usize = Reply::parse(&bytes[..head + 4])
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    format!("no content-length: {:?}", String::from_utf8_lossy(&bytes))
                })?;
            if bytes.len() >= head + 4 + length {
                return Ok(Reply::parse(&bytes[..head + 4 + length]));
            }
        }
        let mut chunk = [0u8; 1024];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|err| format!("reading an answer failed: {err}"))?;
        if n == 0 {
            return Err(format!(
                "closed before a whole answer: {:?}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn parse(bytes: &[u8]) -> Reply {
        let split = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(bytes)));
        let head = std::str::from_utf8(&bytes[..split]).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let raw = &bytes[split + 4..];
        let chunked = headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
        let body = if chunked { dechunk(raw) } else { raw.to_vec() };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn body_text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body_text()))
    }

    /// The SSE events of an event-stream body: (event, id, data).
    pub(crate) fn events(&self) -> Vec<(String, Option<String>, String)> {
        parse_events(&self.body_text())
    }
}

pub(crate) fn parse_events(text: &str) -> Vec<(String, Option<String>, String)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let mut event = String::new();
            let mut id = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_owned();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = v.to_owned();
                }
            }
            (event, id, data)
        })
        .collect()
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        let start = end + 2;
        out.extend_from_slice(&raw[start..start + size]);
        raw = &raw[start + size + 2..];
    }
}

/// The span id of the last anchoring row of the default anchoring run.
pub(crate) fn last_anchor_span(dir: &Path) -> String {
    let journal = dir.join(".sdd/runs/mcp-calls/journal.jsonl");
    let text = std::fs::read_to_string(journal).unwrap();
    let row: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    row["payload"]["span_id"]
        .as_str()
        .or_else(|| row["span_id"].as_str())
        .unwrap_or_else(|| panic!("no span id in {row}"))
        .to_owned()
}

/// Reports a test skipped because the machine lacks what it needs (on stderr, where the test
/// harness shows it).
#[allow(clippy::print_stderr)]
pub(crate) fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}
