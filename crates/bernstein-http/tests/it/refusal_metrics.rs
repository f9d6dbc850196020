//! Auth refusals are counted through the `metrics` facade by reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use serde_json::json;

use crate::support::Server;

/// A recorder that keeps counters by name and labels (this test binary's global recorder).
#[derive(Default)]
struct Counting {
    counters: Mutex<HashMap<String, Arc<Cell>>>,
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
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
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

fn count(reason: &str) -> u64 {
    recorder()
        .counters
        .lock()
        .unwrap()
        .get(&format!(
            "bernstein_mcp_auth_refusals_total{{reason={reason}}}"
        ))
        .map_or(0, |c| c.0.load(Ordering::Relaxed))
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
