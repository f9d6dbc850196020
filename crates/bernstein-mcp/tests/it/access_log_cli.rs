//! The HTTP access log (issue 12 item 3): a scripted session against `bernstein-mcp --transport
//! http --log-format json` with a bearer token; every request has one JSON access line with its
//! method, path, JSON-RPC method, tool, span id, status, latency and auth mode, and neither the
//! real token nor a wrong one appears anywhere in the log.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TOKEN: &str = "real-access-log-token-5f1c9e0b7a";
const WRONG: &str = "wrong-access-log-token-8d2e4a6c31";

/// One answer: the status, the span header (empty when absent) and the body.
struct Reply {
    status: u16,
    span: String,
    body: String,
}

fn request(port: u16, method: &str, path: &str, token: Option<&str>, body: &str) -> Reply {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n{auth}content-type: application/json\r\naccept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let span = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("x-bernstein-span-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    Reply {
        status,
        span,
        body: body.to_owned(),
    }
}

/// One request of the scripted session and what its access line must say.
struct Step<'a> {
    method: &'static str,
    path: &'static str,
    message: Option<&'a Value>,
    token: &'static str,
    status: u16,
    rpc_method: &'static str,
    tool: &'static str,
}

fn key_file(root: &Path) -> std::path::PathBuf {
    let key = root.join("audit.key");
    std::fs::write(&key, "07".repeat(32)).unwrap();
    std::fs::set_permissions(
        &key,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )
    .unwrap();
    key
}

#[test]
fn every_http_request_is_logged_once_with_its_fields_and_no_token() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let workdir = root.path().join("project");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&workdir).unwrap();
    let key = key_file(root.path());
    let stderr_path = root.path().join("stderr.log");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Killed on every exit path, so a failed assertion leaves no server behind.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(
        Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .args([
                "--log-format",
                "json",
                "--transport",
                "http",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--workdir",
                workdir.to_str().unwrap(),
                "--key-file",
                key.to_str().unwrap(),
            ])
            .env_clear()
            .env("HOME", &home)
            .env("RUST_LOG", "info")
            .env("BERNSTEIN_MCP_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.0.try_wait().unwrap().is_none(), "the server exited");
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }

    let initialize = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"0"}}});
    let list = json!({"jsonrpc":"2.0","id":2,"method":"tools/list"});
    let call = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}});
    let refused = json!({"jsonrpc":"2.0","id":4,"method":"tools/list"});
    let ping = json!({"jsonrpc":"2.0","id":5,"method":"ping"});
    let step = |method, path, message, token, status, rpc_method, tool| Step {
        method,
        path,
        message,
        token,
        status,
        rpc_method,
        tool,
    };
    let script = vec![
        step(
            "POST",
            "/mcp",
            Some(&initialize),
            TOKEN,
            200,
            "initialize",
            "",
        ),
        step("POST", "/mcp", Some(&list), TOKEN, 200, "tools/list", ""),
        step(
            "POST",
            "/mcp",
            Some(&call),
            TOKEN,
            200,
            "tools/call",
            "bernstein_status",
        ),
        // Refused before the body is read: no JSON-RPC method is known.
        step("POST", "/mcp", Some(&refused), WRONG, 401, "", ""),
        step("POST", "/mcp", Some(&ping), TOKEN, 200, "ping", ""),
        step("GET", "/readyz", None, TOKEN, 200, "", ""),
    ];
    let mut replies = Vec::new();
    for step in &script {
        let body = step.message.map(Value::to_string).unwrap_or_default();
        let reply = request(port, step.method, step.path, Some(step.token), &body);
        assert_eq!(reply.status, step.status, "{}: {}", step.path, reply.body);
        replies.push(reply);
    }
    drop(child);

    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(!stderr.contains(TOKEN), "the token leaked: {stderr}");
    assert!(!stderr.contains(WRONG), "the wrong token leaked: {stderr}");
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let access: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "bernstein_http::access")
        .collect();
    assert!(access.iter().all(|l| l["level"] == "INFO"), "{access:#?}");
    // One line per request, in order: the wait above only opened TCP connections, which are
    // not requests.
    assert_eq!(access.len(), script.len(), "{stderr}");
    for ((step, reply), line) in script.iter().zip(&replies).zip(&access) {
        let fields = &line["fields"];
        assert_eq!(fields["method"], step.method, "{line}");
        assert_eq!(fields["path"], step.path, "{line}");
        assert_eq!(fields["rpc_method"], step.rpc_method, "{line}");
        assert_eq!(fields["tool"], step.tool, "{line}");
        assert_eq!(fields["status"], step.status, "{line}");
        assert_eq!(fields["auth"], "bearer", "{line}");
        assert_eq!(fields["span_id"], reply.span.as_str(), "{line}");
        assert!(
            fields["latency_ms"].as_f64().is_some_and(|l| l >= 0.0),
            "{line}"
        );
        assert!(line["timestamp"].is_string(), "{line}");
    }
    // Every JSON-RPC request's answer carries a span id, and the log line names the same one.
    for (step, reply) in script.iter().zip(&replies) {
        if step.status == 200 && step.path == "/mcp" {
            assert!(!reply.span.is_empty(), "no span header: {}", reply.body);
        }
    }
}
