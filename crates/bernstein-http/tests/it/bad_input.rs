//! The issue's bad-input list: each gets its documented status and body, and afterwards the
//! server still serves, nothing was written under `.sdd/`, and nothing panicked.

use std::time::{Duration, SystemTime};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Reply, Server, TOKEN, request_bytes};

async fn server() -> Server {
    Server::with(
        |b| b,
        |c| {
            c.auth_type("bearer")
                .bearer_token(Some(TOKEN.to_owned()))
                .oauth_issuer(Some("https://idp.example.com".to_owned()))
                .body_limit(64 * 1024)
                .body_timeout(Duration::from_millis(500))
                .header_read_timeout(Duration::from_millis(500))
        },
    )
    .await
}

const AUTH: (&str, &str) = ("authorization", "Bearer dev-token");
const JSON: (&str, &str) = ("content-type", "application/json");

/// Reads whatever the server sends until it closes the connection.
async fn read_all(mut stream: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("the server closed the connection in time");
    out
}

#[tokio::test]
async fn each_bad_input_gets_its_status_and_changes_nothing() {
    let server = server().await;
    // Warm up: the first call creates the evidence files; bad input must add nothing to them.
    let ok = server
        .call(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}}))
        .await;
    assert_eq!(ok.status, 200);
    let before = server.evidence().await;
    assert!(!before.is_empty());

    let parse_error = |reply: &Reply| {
        assert_eq!(reply.status, 400, "{}", reply.body_text());
        let body = reply.json();
        assert_eq!(body["error"]["code"], -32700, "{body}");
        assert_eq!(body["id"], serde_json::Value::Null);
    };
    // Malformed JSON and invalid UTF-8.
    parse_error(
        &server
            .request("POST", "/mcp", &[AUTH, JSON], b"{\"jsonrpc\":")
            .await,
    );
    parse_error(
        &server
            .request(
                "POST",
                "/mcp",
                &[AUTH, JSON],
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            )
            .await,
    );
    // A batch.
    let batch = server
        .request(
            "POST",
            "/mcp",
            &[AUTH, JSON],
            br#"[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]"#,
        )
        .await;
    assert_eq!(batch.status, 400);
    assert_eq!(
        batch.json()["error"]["message"],
        "JSON-RPC batching was removed from the MCP specification; send one request per POST"
    );
    // Wrong content type; an Accept that allows neither JSON nor SSE.
    let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let wrong_type = server
        .request(
            "POST",
            "/mcp",
            &[AUTH, ("content-type", "text/plain")],
            list,
        )
        .await;
    assert_eq!(wrong_type.status, 415);
    assert_eq!(
        wrong_type.json(),
        json!({"error":"Content-Type must be application/json"})
    );
    let wrong_accept = server
        .request("POST", "/mcp", &[AUTH, JSON, ("accept", "text/html")], list)
        .await;
    assert_eq!(wrong_accept.status, 406);
    assert_eq!(
        wrong_accept.json(),
        json!({"error":"Accept must allow application/json or text/event-stream"})
    );
    // A huge body, announced.
    let huge = vec![b' '; 65 * 1024];
    let reply = server.request("POST", "/mcp", &[AUTH, JSON], &huge).await;
    assert_eq!(reply.status, 413);
    // An endless chunked body: refused once it passes the limit.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer dev-token\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        server.host()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 4096, " ".repeat(4096));
    let mut sent = 0;
    while sent < 1024 * 1024 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
        sent += 4096;
    }
    let reply = Reply::parse(&read_all(stream).await);
    assert_eq!(reply.status, 413);
    assert_eq!(
        reply.json(),
        json!({"error":"request body exceeds 65536 bytes"})
    );
    // A slow sender: headers never finished, then a body that never arrives.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let answer = read_all(stream).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = request_bytes(&server.host(), "POST", "/mcp", &[AUTH, JSON], b"");
    let head = String::from_utf8(head)
        .unwrap()
        .replace("content-length: 0", "content-length: 100");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(b"{\"jsonrpc\"").await.unwrap();
    let reply = Reply::parse(&read_all(stream).await);
    assert_eq!(reply.status, 408);
    assert_eq!(
        reply.json(),
        json!({"error":"request body not received in time"})
    );
    // Bad, empty and oversized tokens.
    for token in [
        "Bearer nope",
        "Bearer ",
        &format!("Bearer {}", "t".repeat(32 * 1024)),
    ] {
        let reply = server
            .request("POST", "/mcp", &[("authorization", token), JSON], list)
            .await;
        assert_eq!(reply.status, 401);
        assert_eq!(reply.body_text(), r#"{"error":"unauthorized"}"#);
    }
    // A forged Host and a forged X-Forwarded-Proto (an injection attempt into the challenge).
    let forged = server
        .raw(&request_bytes("evil\"x.com", "POST", "/mcp", &[JSON], list))
        .await;
    assert_eq!(forged.status, 421);
    let injected = server
        .request(
            "POST",
            "/mcp",
            &[JSON, ("x-forwarded-proto", "https\", error=\"x")],
            list,
        )
        .await;
    assert_eq!(injected.status, 401);
    assert_eq!(
        injected.header("www-authenticate"),
        Some(
            format!(
                "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource\"",
                server.host()
            )
            .as_str()
        )
    );
    // An unknown Origin.
    let origin = server
        .request(
            "POST",
            "/mcp",
            &[AUTH, JSON, ("origin", "http://evil.example")],
            list,
        )
        .await;
    assert_eq!(origin.status, 403);
    // Methods and paths that are not served.
    assert_eq!(
        server.request("GET", "/mcp", &[AUTH], b"").await.status,
        405
    );
    assert_eq!(
        server.request("GET", "/nope", &[AUTH], b"").await.status,
        404
    );

    server.assert_serving().await;
    assert_eq!(
        server
            .call(&json!({"jsonrpc":"2.0","id":9,"method":"tools/list"}))
            .await
            .status,
        200
    );
    assert_eq!(
        server.evidence().await,
        before,
        "bad input wrote nothing under .sdd/"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_legacy_session_id_after_the_window_changes_nothing() {
    let server = Server::with(
        |b| b,
        |c| {
            c.clock(std::sync::Arc::new(|| {
                SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000)
            }))
        },
    )
    .await;
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}});
    let before = server.evidence().await;
    let refused = server.post(&[("mcp-session-id", "s-1")], &call).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("2027-07-28")
    );
    assert_eq!(
        server.evidence().await,
        before,
        "the refused call was not anchored"
    );
    server.assert_serving().await;
    server.stop().await;
}

/// A method a served path does not take is 405, with `Allow` naming the ones it does take,
/// and `HEAD` is served wherever `GET` is without auth. Checked before any body is read, so
/// nothing is written either.
#[tokio::test]
async fn each_path_names_the_methods_it_serves() {
    let server = server().await;
    let before = server.evidence().await;
    let check = |method: &'static str, path: &'static str, expect: Option<&'static str>| {
        let server = &server;
        async move {
            let reply = server.request(method, path, &[AUTH], b"").await;
            match expect {
                Some(allow) => {
                    assert_eq!(reply.status, 405, "{method} {path}");
                    assert_eq!(reply.header("allow"), Some(allow), "{method} {path}");
                    assert_eq!(reply.json(), json!({"error":"method not allowed"}));
                }
                None => {
                    assert_eq!(reply.status, 200, "{method} {path}");
                    assert_eq!(reply.header("allow"), None, "{method} {path}");
                }
            }
        }
    };
    check("GET", "/mcp", Some("POST, DELETE")).await;
    check("PUT", "/mcp", Some("POST, DELETE")).await;
    check("PUT", "/sse", Some("GET")).await;
    check("GET", "/messages", Some("POST")).await;
    check("DELETE", "/messages/", Some("POST")).await;
    check("POST", "/readyz", Some("GET")).await;
    check("POST", "/healthz", Some("GET")).await;
    check("POST", "/.well-known/oauth-protected-resource", Some("GET")).await;
    check("HEAD", "/.well-known/oauth-protected-resource", None).await;
    check("HEAD", "/healthz", None).await;
    server.assert_serving().await;
    assert_eq!(server.evidence().await, before);
    server.stop().await;
}
