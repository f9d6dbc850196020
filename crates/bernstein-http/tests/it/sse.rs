//! The SSE transport: endpoint event, 202 with the span id, `event: message` with `id:`, auth,
//! routing by stream token, and cancel on the stream.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Server, last_anchor_span, parse_events, request_bytes};

/// An open `GET /sse` stream read incrementally.
struct Stream {
    socket: TcpStream,
    buffer: String,
}

impl Stream {
    async fn open(server: &Server, headers: &[(&str, &str)]) -> (Stream, String) {
        let mut socket = TcpStream::connect(server.addr).await.unwrap();
        socket
            .write_all(&request_bytes(&server.host(), "GET", "/sse", headers, b""))
            .await
            .unwrap();
        let mut stream = Stream {
            socket,
            buffer: String::new(),
        };
        let head = stream.until("\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/event-stream"),
            "{head}"
        );
        let (event, _, data) = stream.next_event().await;
        assert_eq!(event, "endpoint");
        (stream, data)
    }

    async fn until(&mut self, marker: &str) -> String {
        loop {
            if let Some(at) = self.buffer.find(marker) {
                let out = self.buffer[..at + marker.len()].to_owned();
                self.buffer.drain(..at + marker.len());
                return out;
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(20), self.socket.read(&mut chunk))
                .await
                .expect("the stream delivered in time")
                .unwrap();
            assert!(n > 0, "the stream ended; had {:?}", self.buffer);
            self.buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    }

    /// The next SSE event (chunk-size lines of the chunked encoding are skipped).
    async fn next_event(&mut self) -> (String, Option<String>, String) {
        loop {
            let block = self.until("\n\n").await;
            let cleaned: String = block
                .lines()
                .filter(|l| {
                    l.starts_with("event:")
                        || l.starts_with("id:")
                        || l.starts_with("data:")
                        || l.starts_with(':')
                })
                .collect::<Vec<_>>()
                .join("\n");
            if let Some(event) = parse_events(&cleaned).into_iter().next() {
                return event;
            }
        }
    }
}

#[tokio::test]
async fn answers_arrive_on_the_stream_with_the_span_id_of_the_202() {
    let server = Server::bearer().await;
    let auth = [("authorization", "Bearer dev-token")];
    assert_eq!(
        server.request("GET", "/sse", &[], b"").await.status,
        401,
        "SSE is authenticated too"
    );
    let (mut stream, endpoint) = Stream::open(&server, &auth).await;
    assert!(endpoint.starts_with("/messages?stream="), "{endpoint}");

    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}});
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(&auth);
    let posted = server
        .request("POST", &endpoint, &headers, call.to_string().as_bytes())
        .await;
    assert_eq!(posted.status, 202);
    let span = posted.header("x-bernstein-span-id").unwrap().to_owned();
    let (event, id, data) = stream.next_event().await;
    assert_eq!(event, "message");
    assert_eq!(id.as_deref(), Some(span.as_str()));
    let response: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(response["id"], 1);
    assert_eq!(
        response["result"]["structuredContent"]["_meter"]["call_id"],
        span
    );
    assert_eq!(last_anchor_span(server.dir.path()), span);

    let list = json!({"jsonrpc":"2.0","id":2,"method":"tools/list"});
    let posted = server
        .request("POST", &endpoint, &headers, list.to_string().as_bytes())
        .await;
    assert_eq!(posted.status, 202);
    let (_, id, data) = stream.next_event().await;
    assert_eq!(id.as_deref(), posted.header("x-bernstein-span-id"));
    assert!(serde_json::from_str::<Value>(&data).unwrap()["result"]["tools"].is_array());

    // A token that names no stream on this instance routes nowhere.
    let lost = server
        .request(
            "POST",
            "/messages?stream=00000000000000000000000000000000",
            &headers,
            list.to_string().as_bytes(),
        )
        .await;
    assert_eq!(lost.status, 404);
    assert!(
        lost.json()["error"]
            .as_str()
            .unwrap()
            .contains("sticky routing")
    );
    // Wrong content type and batches are refused without reaching the stream.
    let wrong = server
        .request(
            "POST",
            &endpoint,
            &[("content-type", "text/plain"), auth[0]],
            list.to_string().as_bytes(),
        )
        .await;
    assert_eq!(wrong.status, 415);
    let batch = server
        .request("POST", &endpoint, &headers, format!("[{list}]").as_bytes())
        .await;
    assert_eq!(batch.status, 400);
    assert_eq!(batch.json()["error"]["code"], -32600);
    server.stop().await;
}

#[tokio::test]
async fn a_cancel_posted_for_the_stream_reaches_its_call() {
    let server = Server::start().await;
    let (mut stream, endpoint) = Stream::open(&server, &[]).await;
    let headers = [("content-type", "application/json")];
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": 60.0}}});
    let posted = server
        .request("POST", &endpoint, &headers, call.to_string().as_bytes())
        .await;
    assert_eq!(posted.status, 202);
    let span = posted.header("x-bernstein-span-id").unwrap().to_owned();
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}});
    let posted = server
        .request("POST", &endpoint, &headers, cancel.to_string().as_bytes())
        .await;
    assert_eq!(posted.status, 202);
    let (_, id, data) = stream.next_event().await;
    assert_eq!(id.as_deref(), Some(span.as_str()));
    let response: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(response["result"]["cancelled"], true, "{response}");
    assert!(response["result"].get("isError").is_none());
    server.stop().await;
}

/// A stream whose client went away is forgotten, so its token no longer routes a POST, and
/// the calls running on it are cancelled. The server notices at its next write, a keep-alive
/// here.
#[tokio::test]
async fn a_stream_whose_client_left_is_forgotten() {
    let server = Server::with(|b| b, |c| c.sse_keepalive(Duration::from_millis(50))).await;
    let (stream, endpoint) = Stream::open(&server, &[]).await;
    let headers = [("content-type", "application/json")];
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let posted = server
        .request("POST", &endpoint, &headers, ping.as_bytes())
        .await;
    assert_eq!(posted.status, 202);
    drop(stream);
    // Bounded: 400 tries 50 ms apart, far past the few keep-alives the server needs.
    let mut refused = None;
    for _ in 0..400 {
        let posted = server
            .request("POST", &endpoint, &headers, ping.as_bytes())
            .await;
        if posted.status != 202 {
            refused = Some(posted);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("the stream's token still routed POSTs after its client left");
    assert_eq!(refused.status, 404);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("no open SSE stream with that token"),
        "{}",
        refused.body_text()
    );
    server.stop().await;
}

/// Shutdown ends every open stream at once rather than waiting out its grace: the client reads
/// the stream's end, and the server stops well inside a grace of ten minutes.
#[tokio::test]
async fn shutdown_ends_the_open_streams() {
    let server = Server::with(|b| b, |c| c.shutdown_grace(Duration::from_secs(600))).await;
    let (mut stream, _) = Stream::open(&server, &[]).await;
    server.stop().await;
    let mut rest = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        stream.socket.read_to_end(&mut rest),
    )
    .await
    .expect("the stream ended at shutdown")
    .unwrap();
}

/// A call with a progress token sends its progress on the stream, without an `id:` line,
/// before its answer.
#[tokio::test]
async fn progress_reaches_the_stream_before_the_answer() {
    let server = Server::start().await;
    let (mut stream, endpoint) = Stream::open(&server, &[]).await;
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "bernstein_run_status", "arguments": {"run_id": "run-b"},
        "_meta": {"progressToken": "pt-sse"}}});
    let posted = server
        .request(
            "POST",
            &endpoint,
            &[("content-type", "application/json")],
            call.to_string().as_bytes(),
        )
        .await;
    assert_eq!(posted.status, 202);
    let (event, id, data) = stream.next_event().await;
    assert_eq!((event.as_str(), id), ("message", None));
    let progress: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progressToken"], "pt-sse");
    let (_, id, data) = stream.next_event().await;
    assert_eq!(id.as_deref(), posted.header("x-bernstein-span-id"));
    let response: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(response["id"], 3, "{response}");
    server.stop().await;
}

/// The first keep-alive comes one interval after the stream opened, not at once: with an
/// interval of ten minutes, nothing but the answer follows the endpoint event.
#[tokio::test]
async fn the_first_keepalive_waits_its_interval() {
    let server = Server::with(|b| b, |c| c.sse_keepalive(Duration::from_secs(600))).await;
    let (mut stream, endpoint) = Stream::open(&server, &[]).await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}).to_string();
    let posted = server
        .request(
            "POST",
            &endpoint,
            &[("content-type", "application/json")],
            ping.as_bytes(),
        )
        .await;
    assert_eq!(posted.status, 202);
    let before_the_answer = stream.until("\"id\":9").await;
    assert!(
        !before_the_answer.contains("keepalive"),
        "{before_the_answer:?}"
    );
    server.stop().await;
}
