//! The HTTP load generator of `cargo xtask bench http`: `clients` concurrent HTTP/1.1 keep-alive
//! connections to a loopback MCP endpoint, each sending one JSON-RPC POST at a time, until a
//! total request count or a deadline is reached, whichever comes first.
//!
//! Every answer is checked (HTTP 200, a JSON-RPC `result`, and for `tools/call` a successful
//! tool payload), so an error can never be counted as a fast request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::bench_stdio::tool_payload;

/// Where and how to send.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) path: String,
    /// A bearer token, when the server wants one.
    pub(crate) bearer: Option<String>,
}

/// One load: what to send, how many clients, how many requests in all, and for how long.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub(crate) body: Value,
    pub(crate) clients: usize,
    pub(crate) requests: usize,
    pub(crate) budget: Duration,
}

/// What a load measured.
#[derive(Debug, Clone)]
pub(crate) struct LoadResult {
    pub(crate) latencies: Vec<Duration>,
    pub(crate) wall: Duration,
}

impl LoadResult {
    pub(crate) fn requests_per_second(&self) -> f64 {
        if self.wall.is_zero() {
            0.0
        } else {
            self.latencies.len() as f64 / self.wall.as_secs_f64()
        }
    }
}

/// Runs `load` against `target` on a fresh multi-threaded runtime.
pub(crate) fn run_load(target: &Target, load: &Load) -> anyhow::Result<LoadResult> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_load_async(target, load))
}

async fn run_load_async(target: &Target, load: &Load) -> anyhow::Result<LoadResult> {
    let body = Bytes::from(serde_json::to_vec(&load.body)?);
    let tickets = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + load.budget;
    let mut clients = Vec::with_capacity(load.clients);
    for _ in 0..load.clients {
        let target = target.clone();
        let body = body.clone();
        let tickets = Arc::clone(&tickets);
        let requests = load.requests;
        let tool_call = load.body.get("method").and_then(Value::as_str) == Some("tools/call");
        clients.push(tokio::spawn(async move {
            let mut client = Client::connect(&target).await?;
            let mut latencies = Vec::new();
            while tickets.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < deadline {
                let sent = Instant::now();
                let answer = client.post(&target, body.clone()).await?;
                latencies.push(sent.elapsed());
                check_answer(&answer, tool_call)?;
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await.context("a load client panicked")??);
    }
    Ok(LoadResult {
        latencies,
        wall: started.elapsed(),
    })
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    sender: http1::SendRequest<Full<Bytes>>,
}

impl Client {
    async fn connect(target: &Target) -> anyhow::Result<Client> {
        let stream = tokio::net::TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("cannot connect to {}", target.addr))?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // The connection ends when the client is dropped; its error, if any, surfaces
            // through the next request on it.
            let _ = connection.await;
        });
        Ok(Client { sender })
    }

    async fn post(&mut self, target: &Target, body: Bytes) -> anyhow::Result<Value> {
        self.sender.ready().await?;
        let mut request = hyper::Request::post(&target.path)
            .header(hyper::header::HOST, target.addr.to_string())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream");
        if let Some(token) = &target.bearer {
            request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = self
            .sender
            .send_request(request.body(Full::new(body))?)
            .await?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        ensure!(
            status == hyper::StatusCode::OK,
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        parse_answer(&bytes)
    }
}

/// The JSON-RPC message in a response body: plain JSON, or the first `data:` line of an SSE
/// stream.
fn parse_answer(bytes: &[u8]) -> anyhow::Result<Value> {
    let text = std::str::from_utf8(bytes).context("a response that is not UTF-8")?;
    let json = if text.trim_start().starts_with('{') {
        text
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim)
            .find(|data| data.starts_with('{'))
            .with_context(|| format!("no JSON-RPC message in the response: {text}"))?
    };
    serde_json::from_str(json).with_context(|| format!("not JSON: {json}"))
}

fn check_answer(answer: &Value, tool_call: bool) -> anyhow::Result<()> {
    if let Some(error) = answer.get("error") {
        bail!("a JSON-RPC error: {error}");
    }
    let result = answer
        .get("result")
        .with_context(|| format!("an answer without a result: {answer}"))?;
    if tool_call {
        tool_payload(result)?;
    }
    Ok(())
}

/// Sends one request on a fresh connection and returns the JSON-RPC answer's `result` (setup
/// calls, untimed).
pub(crate) fn call_once(target: &Target, body: &Value) -> anyhow::Result<Value> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut client = Client::connect(target).await?;
        let answer = client
            .post(target, Bytes::from(serde_json::to_vec(body)?))
            .await?;
        check_answer(&answer, false)?;
        answer
            .get("result")
            .cloned()
            .context("an answer without a result")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_read_from_json_or_sse_bodies() {
        assert_eq!(
            parse_answer(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap()["result"],
            json!({})
        );
        let sse = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":1}}\n\n";
        assert_eq!(parse_answer(sse).unwrap()["result"], json!({"a": 1}));
        assert!(parse_answer(b"event: ping\n\n").is_err());
    }

    #[test]
    fn errors_are_never_counted_as_answers() {
        assert!(check_answer(&json!({"result": {}}), false).is_ok());
        assert!(check_answer(&json!({"error": {"code": -1}}), false).is_err());
        assert!(check_answer(&json!({"id": 1}), false).is_err());
        assert!(
            check_answer(
                &json!({"result": {"isError": true, "structuredContent": {}}}),
                true
            )
            .is_err()
        );
    }

    #[test]
    fn a_load_is_bounded_by_count_and_checked() {
        // A tiny loopback HTTP server written for the test: it answers every POST with a
        // JSON-RPC result, except that it counts what it served.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let served = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&served);
        runtime.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let counter = Arc::clone(&counter);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_request| {
                        counter.fetch_add(1, Ordering::Relaxed);
                        async {
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(
                                    br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
                                )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let target = Target {
            addr,
            path: "/mcp".to_owned(),
            bearer: Some("t".to_owned()),
        };
        let load = Load {
            body: json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            clients: 4,
            requests: 50,
            budget: Duration::from_secs(30),
        };
        let result = run_load(&target, &load).unwrap();
        assert_eq!(result.latencies.len(), 50);
        assert_eq!(served.load(Ordering::Relaxed), 50);
        assert!(result.requests_per_second() > 0.0);
        let tool = Load {
            body: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
            ..load
        };
        // `{}` is not a tool payload: the load fails instead of counting it.
        assert!(run_load(&target, &tool).is_err());
        drop(runtime);
    }
}
