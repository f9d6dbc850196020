//! Resource exhaustion over HTTP: far more connections than the cap, clients that never read
//! large answers, and a flood of cancels. Each is bounded in count and time, and afterwards the
//! server still serves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};

use crate::support::{Reply, Server, read_answer, request_bytes, skip};

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

/// Closes the client's half of `stream` and waits until the server has closed its end too, so
/// that the connection no longer holds a slot (a refused connection is closed already).
async fn close(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut rest = Vec::new();
    // A reset is as good as an end here: the server has let go of the connection either way.
    let _ = tokio::time::timeout(STEP, stream.read_to_end(&mut rest))
        .await
        .expect("the server closed the connection once the client did");
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
    // Every client beyond the cap fits the waiting room, and none waits out the queue timeout
    // while the test runs, so each is served once a slot frees.
    let server = Server::with(
        |b| b,
        |c| {
            c.max_connections(CAP)
                .waiting_room(CLIENTS - CAP)
                .queue_timeout(STEP)
        },
    )
    .await;
    let before = server.evidence().await;
    // Each client connects, sends one keep-alive request, reports its answer, and holds the
    // connection open (so the server keeps its slot) until released; only then does it close.
    let (connected, mut connections) = mpsc::unbounded_channel::<()>();
    let (answered, mut answers) = mpsc::unbounded_channel::<()>();
    let release = Arc::new(Semaphore::new(0));
    let held = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (addr, host) = (server.addr, server.host());
        let (connected, answered) = (connected.clone(), answered.clone());
        let (release, held) = (Arc::clone(&release), Arc::clone(&held));
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            connected.send(()).unwrap();
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
    drop((connected, answered));
    for _ in 0..CLIENTS {
        tokio::time::timeout(STEP, connections.recv())
            .await
            .expect("every client connected")
            .unwrap();
    }
    // The kernel hands connections to the server in the order they were established, so every
    // client above is in a slot or in the waiting room before this one arrives: it finds the
    // room full and is refused at once, without reaching the dispatcher.
    let mut beyond = TcpStream::connect(server.addr).await.unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n", server.host());
    beyond.write_all(request.as_bytes()).await.unwrap();
    let refused = tokio::time::timeout(STEP, read_answer(&mut beyond))
        .await
        .expect("a connection beyond the waiting room was refused at once")
        .unwrap();
    assert_connection_refusal(&refused, CAP);
    drop(beyond);
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
    assert_eq!(
        server.evidence().await,
        before,
        "a refused connection wrote under .sdd/"
    );
    server.assert_serving().await;
    assert_calls(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_waits_out_the_queue_timeout_is_refused_and_the_server_serves_after() {
    // One slot and one place in the waiting room; the short queue timeout is what the test is
    // about, and nothing here depends on how long it really took.
    let server = Server::with(
        |b| b,
        |c| {
            c.max_connections(1)
                .queue_timeout(Duration::from_millis(100))
        },
    )
    .await;
    let before = server.evidence().await;
    let request = format!("GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n", server.host());
    let mut holder = TcpStream::connect(server.addr).await.unwrap();
    holder.write_all(request.as_bytes()).await.unwrap();
    let served = tokio::time::timeout(STEP, read_answer(&mut holder))
        .await
        .expect("the first connection was served")
        .unwrap();
    assert_eq!(served.status, 200);
    // The holder keeps its slot, so this connection waits in the room until it is refused.
    let waited = tokio::time::timeout(
        STEP,
        server.post(&[], &serde_json::from_str(STATUS_CALL).unwrap()),
    )
    .await
    .expect("a waiting connection was refused once the queue timeout passed");
    assert_connection_refusal(&waited, 1);
    assert_eq!(
        server.evidence().await,
        before,
        "a refused call wrote under .sdd/"
    );
    close(holder).await;
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
    // Every one of the thousand connections may wait for a slot as long as the test runs: this
    // test is about cancels, and a burst beyond the cap and the default waiting room would have
    // some of them refused with 503 (while other tests in this binary load the machine, even
    // a 1 s wait can run out).
    let server = Arc::new(Server::with(|b| b, |c| c.waiting_room(1000).queue_timeout(STEP)).await);
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

/// Raises the soft limit on open files to the hard limit, or says why the `needed` files cannot
/// be open at once.
fn raise_open_files_limit(needed: u64) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|soft| soft >= needed) {
        return Ok(());
    }
    // An unlimited hard limit still cannot be the soft one (the kernel caps it at nr_open), so
    // the soft limit is raised only as far as needed then.
    let target = limit.maximum.unwrap_or(needed);
    if target < needed {
        return Err(format!(
            "the hard limit on open files is {target}, below the {needed} this test holds at once \
             (raise it with `ulimit -Hn` as root)"
        ));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        },
    )
    .map_err(|err| format!("raising the soft limit on open files to {target} failed: {err}"))
}

/// The answers the held clients got: each is a 200 from `/healthz` or the connection refusal.
struct Tally {
    cap: usize,
    served: usize,
    refused: usize,
}

impl Tally {
    fn new(cap: usize) -> Tally {
        Tally {
            cap,
            served: 0,
            refused: 0,
        }
    }

    /// Counts one client's answer; a client without one fails the test.
    fn add(&mut self, answer: Result<Reply, String>) {
        let reply = answer.unwrap_or_else(|err| {
            panic!(
                "a client got no answer after {} served and {} refused: {err}",
                self.served, self.refused
            )
        });
        match reply.status {
            200 => {
                assert_eq!(reply.body_text(), r#"{"status":"ok"}"#);
                self.served += 1;
            }
            503 => {
                assert_connection_refusal(&reply, self.cap);
                self.refused += 1;
            }
            other => panic!("answered {other}: {}", reply.body_text()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_held_connections_are_capped_and_the_rest_refused_with_a_clear_error() {
    const CAP: usize = 256;
    const CLIENTS: usize = 10_000;
    // Connections being opened and awaiting their answer at once: enough to keep the server's
    // accept queue full, few enough that the kernel's accept backlog never overflows.
    const OPENING: usize = 512;
    // How long a client waits to connect, or for its answer, before the server counts as stuck.
    const ANSWER: Duration = Duration::from_secs(30);
    // Each client's socket, the server's end of each served or waiting one, and a margin for
    // the test harness and the store.
    if let Err(reason) = raise_open_files_limit((CLIENTS + 2 * CAP + 512) as u64) {
        skip(&format!(
            "ten_thousand_held_connections_are_capped_and_the_rest_refused_with_a_clear_error: {reason}"
        ));
        return;
    }
    // The idle bound is far longer than the test, so a served connection holds its slot until
    // its client closes it.
    let server = Server::with(
        |b| b,
        |c| {
            c.max_connections(CAP)
                .header_read_timeout(Duration::from_secs(600))
        },
    )
    .await;
    let before = server.evidence().await;
    let started = Instant::now();
    let (answered, mut answers) = mpsc::unbounded_channel::<Result<Reply, String>>();
    let (release, released) = watch::channel(false);
    let opening = Arc::new(Semaphore::new(OPENING));
    let mut tally = Tally::new(CAP);
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        // Answers are tallied while clients are opened, so the first client left without an
        // answer fails the test at once instead of after every other client's wait.
        let permit = tokio::time::timeout(STEP, async {
            loop {
                tokio::select! {
                    biased;
                    Some(answer) = answers.recv() => tally.add(answer),
                    permit = Arc::clone(&opening).acquire_owned() => break permit.unwrap(),
                }
            }
        })
        .await
        .expect("a client got its answer, so another could connect");
        let (addr, host) = (server.addr, server.host());
        let (answered, mut released) = (answered.clone(), released.clone());
        clients.push(tokio::spawn(async move {
            let opened = async {
                let mut stream = tokio::time::timeout(ANSWER, TcpStream::connect(addr))
                    .await
                    .map_err(|_| "no connection within 30 s".to_owned())?
                    .map_err(|err| format!("connecting failed: {err}"))?;
                let request = format!("GET /healthz HTTP/1.1\r\nhost: {host}\r\n\r\n");
                tokio::time::timeout(ANSWER, stream.write_all(request.as_bytes()))
                    .await
                    .map_err(|_| "the request was not sent within 30 s".to_owned())?
                    .map_err(|err| format!("sending the request failed: {err}"))?;
                let reply = tokio::time::timeout(ANSWER, read_answer(&mut stream))
                    .await
                    .map_err(|_| "no answer (served or refused) within 30 s".to_owned())??;
                Ok::<_, String>((stream, reply))
            };
            let (stream, reply) = match opened.await {
                Ok(opened) => opened,
                Err(err) => {
                    let _ = answered.send(Err(err));
                    return;
                }
            };
            drop(permit);
            let _ = answered.send(Ok(reply));
            // The socket stays open until every client has its answer.
            let _ = tokio::time::timeout(STEP, released.wait_for(|go| *go)).await;
            close(stream).await;
        }));
    }
    drop((answered, released));
    while tally.served + tally.refused < CLIENTS {
        let answer = tokio::time::timeout(STEP, answers.recv())
            .await
            .expect("every client reports its answer")
            .expect("every client reports its answer");
        tally.add(answer);
    }
    let Tally {
        served, refused, ..
    } = tally;
    let elapsed = started.elapsed();
    // Served connections keep their slot while held, so no more than the cap were ever served.
    assert!(
        (1..=CAP).contains(&served),
        "{served} connections served with a cap of {CAP}"
    );
    assert_eq!(served + refused, CLIENTS);

    // While all of them are held, a fresh request gets the same clear refusal, not a hang.
    let busy = server
        .post(&[], &json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(busy.status, 503, "{}", busy.body_text());
    assert_connection_refusal(&busy, CAP);
    assert_eq!(
        server.evidence().await,
        before,
        "a refused connection wrote under .sdd/"
    );

    release.send(true).unwrap();
    // Each client waits until the server has closed its end, so every slot is free again.
    join_all(clients).await;
    server.assert_serving().await;
    assert_calls(&server).await;
    server.stop().await;
    report(&format!(
        "exhaustion: {CLIENTS} connections held at once against a cap of {CAP}: {served} served \
         (200), {refused} refused (503 with Retry-After), all answered in {elapsed:.1?}; a fresh \
         POST /mcp was refused with 503 while they were held; served again once they closed"
    ));
}

/// The refusal a connection beyond the cap and the waiting room gets: 503, retry after a
/// second, the connection closed, and a JSON body naming the limit.
fn assert_connection_refusal(reply: &Reply, cap: usize) {
    assert_eq!(reply.status, 503, "{}", reply.body_text());
    assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
    assert_eq!(reply.header("connection"), Some("close"), "{reply:?}");
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{reply:?}"
    );
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("too many connections") && error.contains(&format!("at most {cap}")),
        "{}",
        reply.body_text()
    );
}

/// Prints a test's figures on stderr, where the harness shows them.
#[allow(clippy::print_stderr)]
fn report(figures: &str) {
    eprintln!("{figures}");
}
