//! Auth refusals and refused connections are counted through the `metrics` facade by reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::{Server, read_answer};

/// A recorder that keeps counters by name and labels, and the counters' descriptions by name
/// (this test binary's global recorder).
#[derive(Default)]
struct Counting {
    counters: Mutex<HashMap<String, Arc<Cell>>>,
    descriptions: Mutex<HashMap<String, String>>,
}

#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

fn label(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Counting {
    fn describe_counter(&self, name: KeyName, _: Option<Unit>, help: SharedString) {
        self.descriptions
            .lock()
            .unwrap()
            .insert(name.as_str().to_owned(), help.into_owned());
    }
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let cell = Arc::clone(self.counters.lock().unwrap().entry(label(key)).or_default());
        Counter::from_arc(cell)
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn recorder() -> &'static Counting {
    static RECORDER: OnceLock<&'static Counting> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let counting: &'static Counting = Box::leak(Box::default());
        metrics::set_global_recorder(counting).expect("no other recorder in this test binary");
        counting
    })
}

/// The value of one counter series, `name{label=value}`.
fn series(key: &str) -> u64 {
    recorder()
        .counters
        .lock()
        .unwrap()
        .get(key)
        .map_or(0, |c| c.0.load(Ordering::Relaxed))
}

fn count(reason: &str) -> u64 {
    series(&format!(
        "bernstein_mcp_auth_refusals_total{{reason={reason}}}"
    ))
}

fn refused_connections(reason: &str) -> u64 {
    series(&format!(
        "bernstein_mcp_http_connections_refused_total{{reason={reason}}}"
    ))
}

/// Opens a connection and sends `GET /healthz` on it, keeping it open.
async fn healthz(server: &Server) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let request = format!("GET /healthz HTTP/1.1\r\nhost: {}\r\n\r\n", server.host());
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// The status of the answer on `stream`.
async fn status(stream: &mut TcpStream) -> u16 {
    tokio::time::timeout(Duration::from_secs(60), read_answer(stream))
        .await
        .expect("answered in time")
        .unwrap()
        .status
}

#[tokio::test]
async fn refusals_are_counted_by_reason() {
    let _ = recorder();
    let before: Vec<u64> = ["missing", "wrong_token", "origin", "host"]
        .iter()
        .map(|r| count(r))
        .collect();
    let server = Server::bearer().await;
    let list = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    assert_eq!(server.post(&[], &list).await.status, 401);
    assert_eq!(
        server
            .post(&[("authorization", "Bearer nope")], &list)
            .await
            .status,
        401
    );
    assert_eq!(
        server
            .post(&[("authorization", "Bearer nope")], &list)
            .await
            .status,
        401
    );
    assert_eq!(
        server
            .post(&[("origin", "https://evil.example")], &list)
            .await
            .status,
        403
    );
    let forged = server
        .raw(&crate::support::request_bytes(
            "evil.example",
            "GET",
            "/readyz",
            &[],
            b"",
        ))
        .await;
    assert_eq!(forged.status, 421);
    let after: Vec<u64> = ["missing", "wrong_token", "origin", "host"]
        .iter()
        .map(|r| count(r))
        .collect();
    // Other tests in this binary may refuse requests too, so the counts grow at least by ours.
    assert!(after[0] > before[0], "{before:?} {after:?}");
    assert!(after[1] >= before[1] + 2, "{before:?} {after:?}");
    assert!(after[2] > before[2], "{before:?} {after:?}");
    assert!(after[3] > before[3], "{before:?} {after:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_counted_by_reason() {
    let _ = recorder();
    let before = [
        refused_connections("waiting_room_full"),
        refused_connections("queue_timeout"),
    ];
    // One slot and one place in the waiting room. The first server's queue timeout outlasts
    // the test, so its waiting connection is served once the slot frees; the second's is short,
    // so its waiting connection is refused.
    let patient = Server::with(
        |b| b,
        |c| {
            c.max_connections(1)
                .waiting_room(1)
                .queue_timeout(Duration::from_secs(60))
        },
    )
    .await;
    let mut holder = healthz(&patient).await;
    assert_eq!(status(&mut holder).await, 200);
    let mut waiting = healthz(&patient).await;
    // Connections are accepted in the order they were established, so the waiting one holds
    // the only place when this one arrives.
    let mut beyond = healthz(&patient).await;
    assert_eq!(status(&mut beyond).await, 503);
    drop(holder);
    assert_eq!(status(&mut waiting).await, 200);
    drop(waiting);
    patient.stop().await;

    let impatient = Server::with(
        |b| b,
        |c| {
            c.max_connections(1)
                .queue_timeout(Duration::from_millis(100))
        },
    )
    .await;
    let mut holder = healthz(&impatient).await;
    assert_eq!(status(&mut holder).await, 200);
    let mut waiting = healthz(&impatient).await;
    assert_eq!(status(&mut waiting).await, 503);
    drop(holder);
    impatient.stop().await;

    let after = [
        refused_connections("waiting_room_full"),
        refused_connections("queue_timeout"),
    ];
    // Other tests in this binary may refuse connections too, so the counts grow at least by
    // ours.
    assert!(after[0] > before[0], "{before:?} {after:?}");
    assert!(after[1] > before[1], "{before:?} {after:?}");
}

/// The transport describes both of its counters, so the Prometheus text carries their help lines.
#[test]
fn both_counters_are_described() {
    // The recorder is installed first: descriptions given before there is one are lost.
    let recorder = recorder();
    bernstein_http::describe_metrics();
    let descriptions = recorder.descriptions.lock().unwrap().clone();
    assert_eq!(
        descriptions
            .get("bernstein_mcp_http_connections_refused_total")
            .map(String::as_str),
        Some(
            "HTTP connections answered 503 and closed because every slot was taken, by reason \
             (waiting_room_full, queue_timeout)."
        )
    );
    assert_eq!(
        descriptions
            .get("bernstein_mcp_auth_refusals_total")
            .map(String::as_str),
        Some("HTTP requests refused by the auth layer, by reason.")
    );
}
