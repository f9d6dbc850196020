//! Resource exhaustion over HTTP: far more connections than the cap, clients that never read
//! large answers, and a flood of cancels. Each is bounded in count and time, and afterwards the
//! server still serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc};

use crate::support::{Server, request_bytes};

/// Awaits every client task, re-raising a panic of any.
async fn join_all(handles: Vec<tokio::task::JoinHandle<()>>) {
    for handle in handles {
        handle.await.expect("a client task panicked");
    }
}

/// How long any single step may take before the test reports the server as stuck.
const STEP: Duration = Duration::from_secs(60);

const STATUS_CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{}}}"#;

/// A `tools/call` on a fresh connection answers 200 with a result.
async fn assert_calls(server: &Server) {
    let reply = server
        .post(&[], &serde_json::from_str(STATUS_CALL).unwrap())
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body_text());
    assert!(reply.json()["result"].is_object(), "{}", reply.body_text());
}

/// Reads from `stream` until `buffer` ends with `suffix`.
async fn read_until_suffix(stream: &mut TcpStream, buffer: &mut Vec<u8>, suffix: &[u8]) {
    while !buffer.ends_with(suffix) {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(buffer));
        buffer.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_wait_and_the_server_serves_after() {
    const CAP: usize = 8;
    const CLIENTS: usize = 200;
    let server = Server::with(|b| b, |c| c.max_connections(CAP)).await;
    // Each client sends one keep-alive request, reports its answer, and holds the connection
    // open (so the server keeps its slot) until released; only then does it close.
    let (answered, mut answers) = mpsc::unbounded_channel::<()>();
    let release = Arc::new(Semaphore::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (addr, host) = (server.addr, server.host());
        let (answered, release, held) = (answered.clone(), Arc::clone(&release), Arc::clone(&held));
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let request = format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut reply = Vec::new();
            read_until_suffix(&mut stream, &mut reply, br#"{"status":"ok"}"#).await;
            assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
            held.fetch_add(1, Ordering::SeqCst);
            answered.send(()).unwrap();
            release.acquire().await.unwrap().forget();
            held.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
        }));
    }
    drop(answered);
    let mut served = 0;
    while served < CLIENTS {
        // A full round of the cap (or what is left), then a pause in which a server without a
        // cap would answer more: none may come while these connections are held.
        let round = CAP.min(CLIENTS - served);
        for _ in 0..round {
            tokio::time::timeout(STEP, answers.recv())
                .await
                .expect("a waiting connection was served once a slot freed")
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            held.load(Ordering::SeqCst),
            round,
            "more connections were served at once than the cap of {CAP}"
        );
        assert!(answers.try_recv().is_err());
        served += round;
        release.add_permits(round);
    }
    join_all(clients).await;
    server.assert_serving().await;
    assert_calls(&server).await;
    server.stop().await;
}

/// One `tools/list` request that keeps the connection open, for pipelining.
fn keep_alive_list(host: &str) -> Vec<u8> {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    format!(
        "POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_large_answers_do_not_stop_the_others() {
    let server = Server::start().await;
    let list = server
        .post(&[], &json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(list.status, 200);
    // Enough pipelined answers to fill the sockets' buffers many times over (the send buffer
    // grows to 4 MiB on Linux), so the server's writes to this client block.
    let pipelined = (16 * 4 * 1024 * 1024 / list.body.len()).max(64);

    // A JSON reader: pipelined `tools/list` requests on one connection with a tiny receive
    // buffer, none of whose answers are read.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled_json = socket.connect(server.addr).await.unwrap();
    let requests = keep_alive_list(&server.host()).repeat(pipelined);
    let writer = async {
        // The server stops reading once its writes block; what is left stays unsent.
        let _ =
            tokio::time::timeout(Duration::from_secs(5), stalled_json.write_all(&requests)).await;
    };

    // An SSE reader: a stream opened and read up to its endpoint event, then never again, while
    // requests with large answers are posted to it.
    let mut stalled_sse = TcpStream::connect(server.addr).await.unwrap();
    stalled_sse
        .write_all(&request_bytes(&server.host(), "GET", "/sse", &[], b""))
        .await
        .unwrap();
    let mut opened = Vec::new();
    read_until_suffix(&mut stalled_sse, &mut opened, b"\n\n\r\n").await;
    let opened = String::from_utf8(opened).unwrap();
    let endpoint = opened
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("no endpoint in {opened}"))
        .to_owned();
    // Requests are posted until the stream refuses more: its queue and the requests waiting
    // for room in it are bounded, so a client that never reads cannot pile up calls and their
    // answers (the socket buffers between the two ends take some answers first; 2,000 posts
    // bound the loop).
    let posts = async {
        // Every request before the refused one was accepted, so the refused one's id counts
        // them.
        for id in 0..2000 {
            let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}).to_string();
            let reply = server
                .request(
                    "POST",
                    &endpoint,
                    &[("content-type", "application/json")],
                    body.as_bytes(),
                )
                .await;
            if reply.status == 429 {
                assert!(
                    reply.json()["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("read the stream")),
                    "{}",
                    reply.body_text()
                );
                return id;
            }
            assert_eq!(reply.status, 202, "{}", reply.body_text());
        }
        panic!("2,000 requests were accepted for a stream that is never read");
    };
    let ((), accepted) = tokio::join!(writer, posts);
    assert!(accepted >= 64, "refused after only {accepted} requests");

    // Meanwhile every other client is served.
    let mut others = Vec::new();
    for _ in 0..20 {
        let addr = server.addr;
        let host = server.host();
        others.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(&request_bytes(
                    &host,
                    "POST",
                    "/mcp",
                    &[("content-type", "application/json")],
                    STATUS_CALL.as_bytes(),
                ))
                .await
                .unwrap();
            let mut reply = Vec::new();
            tokio::time::timeout(STEP, stream.read_to_end(&mut reply))
                .await
                .expect("another client was served while two clients did not read")
                .unwrap();
            assert!(
                reply.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&reply)
            );
        }));
    }
    join_all(others).await;
    server.assert_serving().await;
    drop(stalled_json);
    drop(stalled_sse);
    server.assert_serving().await;
    assert_calls(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_cancels_for_unknown_ids_are_each_accepted_and_write_nothing() {
    let server = Arc::new(Server::start().await);
    // Warm up: the first call creates the evidence files; the cancels must add nothing.
    assert_calls(&server).await;
    let before = server.evidence().await;
    assert!(!before.is_empty());
    let mut cancels = Vec::new();
    for n in 0..1000_u32 {
        let server = Arc::clone(&server);
        cancels.push(tokio::spawn(async move {
            let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                "params":{"requestId": format!("unknown-{n}"), "reason": "flood"}});
            let reply = server.post(&[], &cancel).await;
            assert_eq!(reply.status, 202, "{}", reply.body_text());
            assert!(reply.body.is_empty());
        }));
    }
    join_all(cancels).await;
    assert_eq!(
        server.evidence().await,
        before,
        "a cancel wrote under .sdd/"
    );
    assert_calls(&server).await;
    Arc::into_inner(server).unwrap().stop().await;
}
