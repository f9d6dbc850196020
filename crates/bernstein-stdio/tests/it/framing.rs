//! Line framing at the edges a real host produces: CRLF line ends, a line over the size limit
//! followed by a valid request, a line of exactly the limit, and a client that closes the
//! server's stdout.

use std::time::Duration;

use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::Dispatcher;
use bernstein_stdio::MAX_LINE_BYTES;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::task::JoinHandle;

/// A server on in-memory pipes: (client's write end, client's read end, the server task).
fn start(dir: &tempfile::TempDir) -> (DuplexStream, DuplexStream, JoinHandle<std::io::Result<()>>) {
    let key = AuditKey::from_master_bytes(b"0123456789abcdef".repeat(4));
    let dispatcher = Dispatcher::builder(dir.path())
        .audit_key(key)
        .build()
        .unwrap();
    let (client_in, server_out) = tokio::io::duplex(1 << 16);
    let (server_in, client_out) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(bernstein_stdio::serve(dispatcher, server_in, server_out));
    (client_out, client_in, server)
}

fn request(id: i64, method: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}).to_string()
}

async fn next(lines: &mut tokio::io::Lines<BufReader<DuplexStream>>) -> Value {
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("server closed early");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

#[tokio::test]
async fn crlf_terminated_requests_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mut input, output, server) = start(&dir);
    let mut lines = BufReader::new(output).lines();
    for id in [1, 2] {
        input
            .write_all(format!("{}\r\n", request(id, "tools/list")).as_bytes())
            .await
            .unwrap();
        let reply = next(&mut lines).await;
        assert_eq!(reply["id"], id, "{reply}");
        assert!(reply["result"]["tools"].is_array(), "{reply}");
    }
    input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn an_over_long_line_is_refused_and_the_next_request_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mut input, output, server) = start(&dir);
    let mut lines = BufReader::new(output).lines();
    // The pipe holds 64 KiB, so the long line is written while the server reads it.
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 1 << 20];
        let mut left = MAX_LINE_BYTES + 1;
        while left > 0 {
            let n = left.min(chunk.len());
            input.write_all(&chunk[..n]).await.unwrap();
            left -= n;
        }
        input.write_all(b"\n").await.unwrap();
        input
            .write_all(format!("{}\n", request(2, "tools/list")).as_bytes())
            .await
            .unwrap();
        input
    });
    let refused = next(&mut lines).await;
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    assert_eq!(refused["id"], Value::Null);
    let answered = next(&mut lines).await;
    assert_eq!(answered["id"], 2, "{answered}");
    assert!(answered["result"]["tools"].is_array());
    let mut input = writer.await.unwrap();
    input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_line_of_exactly_sixteen_mebibytes_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mut input, output, server) = start(&dir);
    let mut lines = BufReader::new(output).lines();
    // A ping padded with JSON whitespace to exactly 16 MiB is a message like any other: that is
    // the documented limit (rmcp's), the longest line accepted. The size is spelled out here
    // rather than read from `MAX_LINE_BYTES`, so a smaller constant fails this test.
    let ping = request(1, "ping");
    let padding = 16 * 1024 * 1024 - ping.len();
    let writer = tokio::spawn(async move {
        let chunk = vec![b' '; 1 << 20];
        let mut left = padding;
        while left > 0 {
            let n = left.min(chunk.len());
            input.write_all(&chunk[..n]).await.unwrap();
            left -= n;
        }
        input
            .write_all(format!("{ping}\n").as_bytes())
            .await
            .unwrap();
        input
    });
    let answered = next(&mut lines).await;
    assert_eq!(answered["id"], 1, "{answered}");
    assert_eq!(answered["result"], json!({}), "{answered}");
    let mut input = writer.await.unwrap();
    input.shutdown().await.unwrap();
    server.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_that_closes_stdout_ends_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let (mut input, output, server) = start(&dir);
    // The host stops reading: the server's stdout is closed. A write to it fails, and the
    // session ends at the next message it would answer, without waiting for stdin to close.
    drop(output);
    let mut sent = 0;
    while !server.is_finished() {
        assert!(sent < 500, "the session kept running with stdout closed");
        sent += 1;
        input
            .write_all(format!("{}\n", request(sent, "tools/list")).as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(sent >= 2, "ended before a write could fail");
    server.await.unwrap().unwrap();
    drop(input);
}
