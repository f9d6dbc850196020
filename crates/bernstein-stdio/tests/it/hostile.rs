//! A hostile client at the stdio seam: floods that never read their answers, oversized params,
//! a read that never ends, a panicking argument, input that is not UTF-8 or names a key twice,
//! and a reused request id. Each gets a clear answer, and none costs more than the client's own
//! share of the server.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bernstein_mcp_core::{Dispatcher, Limits};
use bernstein_tools::{ToolConfig, Validation};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::session::{Session, key};

/// This process's resident set size in KiB, from `/proc/self/status`.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// Writes `count` request lines made by `line` into the server's input from a task, counting
/// each line once it is accepted by the pipe; stops quietly when the server goes away.
fn flood(
    session: &mut Session,
    count: usize,
    line: impl Fn(usize) -> String + Send + 'static,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let mut input = session.to_server.take().unwrap();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&written);
    let task = tokio::spawn(async move {
        for n in 0..count {
            if input.write_all(line(n).as_bytes()).await.is_err() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
        }
        let _ = input.shutdown().await;
    });
    (written, task)
}

/// Waits until the flood stops moving short of `total` (the server stopped reading: `Some`
/// with the count), or until all of it was written (`None`), calling `tick` at every sample.
/// Gives up after a minute.
async fn wait_for_stall(
    written: &AtomicUsize,
    total: usize,
    mut tick: impl FnMut(),
) -> Option<usize> {
    let mut last = usize::MAX;
    let mut still = 0;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tick();
        let now = written.load(Ordering::SeqCst);
        if now == total {
            return None;
        }
        if now == last {
            still += 1;
            // Two seconds without a single line read: the reader is parked on the full queue.
            if still == 20 {
                return Some(now);
            }
        } else {
            still = 0;
            last = now;
        }
    }
    panic!("the flood neither finished nor stalled within a minute");
}

/// Floods `session` with `FLOOD` pings it never reads, asserts the server stopped reading
/// short of the end, then reads on: every ping is answered exactly once, by a result or by a
/// "server busy" refusal. Returns how many were refused busy.
async fn flood_pings_unread_then_read_every_answer(mut session: Session) -> usize {
    const FLOOD: usize = 20_000;
    let (written, task) = flood(&mut session, FLOOD, |id| {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n")
    });
    let stalled = wait_for_stall(&written, FLOOD, || {}).await;
    assert!(
        stalled.is_some(),
        "the server read all {FLOOD} requests although none of its answers was read"
    );
    let mut answered = HashSet::new();
    let mut busy = 0;
    while answered.len() < FLOOD {
        let message = tokio::time::timeout(Duration::from_secs(60), session.next_message())
            .await
            .expect("the answers stopped coming");
        let id = message["id"].as_u64().expect("an answer with a numeric id");
        assert!(answered.insert(id), "id {id} answered twice");
        if message.get("error").is_some() {
            assert_eq!(message["error"]["code"], -32603, "{message}");
            assert!(
                message["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("server busy"),
                "{message}"
            );
            busy += 1;
        } else {
            assert_eq!(message["result"], json!({}), "{message}");
        }
    }
    assert!(busy < FLOOD, "some pings were served");
    task.await.unwrap();
    assert!(session.from_server.next_line().await.unwrap().is_none());
    session.server.await.unwrap().unwrap();
    busy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_that_never_reads_stops_the_reader_and_loses_no_answer() {
    flood_pings_unread_then_read_every_answer(Session::start()).await;
}

/// The reader stops for a client that never reads even when no cap ever refuses a request
/// and every call ends at once: each call takes its answer's place in the outbox before it
/// starts, so the reader waits once the outbox is full, whatever the race between reading and
/// answering. Before, only a "server busy" refusal sent from the reading loop stopped it, and
/// with caps that never refuse the server read the whole flood and held every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_that_never_reads_stops_the_reader_even_when_no_cap_refuses() {
    let session = Session::start_with(|b| {
        b.limits(Limits {
            max_in_flight_per_stream: 1 << 20,
            max_in_flight: 1 << 20,
            ..Limits::default()
        })
    });
    let busy = flood_pings_unread_then_read_every_answer(session).await;
    assert_eq!(busy, 0, "a cap that never refuses refused a ping");
}

/// Set in the child process that measures memory alone (see the test below).
const MEMORY_CHILD_VAR: &str = "BERNSTEIN_STDIO_MEMORY_CHILD";

#[test]
fn memory_stays_bounded_while_a_client_floods_tools_list_and_never_reads() {
    // RSS belongs to the whole process, and the tests running beside this one in the same
    // binary allocate too: measured here, their growth would be blamed on the flood (a fresh
    // 2-core CI machine saw exactly that). The measurement runs alone in a child process.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hostile::memory_flood_measured_alone",
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(MEMORY_CHILD_VAR, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        child.status.success() && stdout.contains("1 passed"),
        "the measuring child failed ({}):\n{stdout}\n{stderr}",
        child.status
    );
    assert!(
        stderr.contains("memory flood: RSS grew by"),
        "the child did not measure:\n{stderr}"
    );
}

/// Child-process half of `memory_stays_bounded_while_a_client_floods_tools_list_and_never_reads`;
/// does nothing unless that test launched it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of memory_stays_bounded_while_a_client_floods_tools_list_and_never_reads"]
#[allow(clippy::print_stderr, reason = "the figure is read by the parent test")]
async fn memory_flood_measured_alone() {
    if std::env::var_os(MEMORY_CHILD_VAR).is_none() {
        return;
    }
    // Each tools/list answer is tens of KiB; unbounded, 3,000 of them held for a client that
    // does not read would take well over 100 MiB.
    const FLOOD: usize = 3_000;
    const BOUND_KIB: u64 = 64 * 1024;
    let mut session = Session::start();
    let before = vm_rss_kib();
    let (written, task) = flood(&mut session, FLOOD, |id| {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/list\"}}\n")
    });
    let mut peak = before;
    let stalled = wait_for_stall(&written, FLOOD, || peak = peak.max(vm_rss_kib())).await;
    // Keep sampling while the server answers what it has read.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(vm_rss_kib());
    }
    let grown = peak.saturating_sub(before);
    eprintln!(
        "memory flood: RSS grew by {grown} KiB (bound {BOUND_KIB} KiB), stalled at {stalled:?}"
    );
    assert!(
        grown < BOUND_KIB,
        "RSS grew by {grown} KiB (bound {BOUND_KIB} KiB) while a client flooded {FLOOD} tools/list \
         requests without reading (stalled at {stalled:?})"
    );
    assert!(stalled.is_some(), "the server kept reading");
    // The client goes away without reading: the session ends.
    let Session {
        from_server,
        server,
        ..
    } = session;
    drop(from_server);
    tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the server ended after its client went away")
        .unwrap()
        .unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn params_beyond_the_limit_are_refused_before_anything_runs() {
    let mut session = Session::start();
    let before = session.evidence().await;
    let padding = "x".repeat(300 * 1024);
    let refused = session
        .request(
            1,
            "tools/call",
            json!({"name": "bernstein_status", "arguments": {}, "_meta": {"padding": padding}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["data"]["maxParamsBytes"],
        Limits::default().max_params_bytes
    );
    assert_eq!(
        session.evidence().await,
        before,
        "nothing anchored or written"
    );
    let served = session
        .request(
            2,
            "tools/call",
            json!({"name": "bernstein_status", "arguments": {}}),
        )
        .await;
    assert!(served.get("result").is_some(), "{served}");
}

fn subscribe(id: i64, seconds: f64) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "bernstein_subscribe", "arguments": {"role": "qa", "timeout_seconds": seconds}}})
    .to_string()
}

#[tokio::test]
async fn requests_beyond_the_stream_cap_are_answered_busy() {
    let mut session = Session::start_with(|b| {
        b.limits(Limits {
            max_in_flight_per_stream: 2,
            ..Limits::default()
        })
    });
    session.send_line(&subscribe(1, 60.0)).await;
    session.send_line(&subscribe(2, 60.0)).await;
    let busy = session.request(3, "ping", json!({})).await;
    assert_eq!(busy["error"]["code"], -32603, "{busy}");
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("server busy: this stream"),
        "{busy}"
    );
    session
        .send_line(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
        )
        .await;
    assert_eq!(
        session.response(json!(1)).await["result"]["cancelled"],
        true
    );
    assert_eq!(
        session.request(4, "ping", json!({})).await["result"],
        json!({})
    );
    session
        .send_line(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
        )
        .await;
    assert_eq!(
        session.response(json!(2)).await["result"]["cancelled"],
        true
    );
}

#[tokio::test]
async fn requests_beyond_the_process_cap_are_answered_busy_on_every_stream() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let dispatcher = Dispatcher::builder(dir.path())
        .audit_key(key())
        .limits(Limits {
            max_in_flight: 2,
            ..Limits::default()
        })
        .build()
        .unwrap();
    let mut first = Session::on(dispatcher.clone(), Arc::clone(&dir));
    let mut second = Session::on(dispatcher, Arc::clone(&dir));
    first.send_line(&subscribe(1, 60.0)).await;
    first.send_line(&subscribe(2, 60.0)).await;
    // The first stream's ping is read after both calls were admitted.
    let busy = first.request(3, "ping", json!({})).await;
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("server busy: the server"),
        "{busy}"
    );
    let busy = second.request(1, "ping", json!({})).await;
    assert_eq!(busy["error"]["code"], -32603, "{busy}");
    for id in [1, 2] {
        first
            .send_line(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}}).to_string())
            .await;
        assert_eq!(first.response(json!(id)).await["result"]["cancelled"], true);
    }
    assert_eq!(
        second.request(2, "ping", json!({})).await["result"],
        json!({})
    );
}

/// A call blocked for ever on the blocking pool is cut by the hard timeout, and the runtime keeps
/// answering meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_never_ends_times_out_and_ping_is_still_answered() {
    let mut session = Session::start_with(|b| {
        b.limits(Limits {
            call_timeout: Duration::from_secs(1),
            ..Limits::default()
        })
    });
    // Another process holding the task store's lock stands for any read that never ends (a FIFO
    // is now refused before it is read): `bernstein_status` waits on that lock on the blocking
    // pool, declares no timeout of its own, and must be cut by the hard timeout.
    // The store creates `.sdd/runtime/` as it opens, on a thread of its own.
    session.store_opened().await;
    let lock_path = session.dir.path().join(".sdd/runtime/tasks.jsonl.lock");
    let holder = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .unwrap();
    holder.lock().unwrap();
    for id in [1, 2] {
        session
            .send_line(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "bernstein_status", "arguments": {}}}).to_string())
            .await;
    }
    let pong = session.request(3, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    for id in [1, 2] {
        let answer = session.response(json!(id)).await;
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        assert_eq!(answer["error"]["data"]["timeoutSeconds"], 1.0, "{answer}");
    }
    drop(holder);
    session.close_input().await;
    assert!(session.from_server.next_line().await.unwrap().is_none());
    session.server.await.unwrap().unwrap();
}

/// A FIFO where the lineage log should be is refused at once (it is never opened for a blocking
/// read), and the runtime keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_resource_is_refused_and_ping_is_still_answered() {
    let mut session = Session::start();
    let lineage = session.dir.path().join(".sdd/lineage");
    std::fs::create_dir_all(&lineage).unwrap();
    let fifo = lineage.join("log.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for id in [1, 2] {
        session
            .send_line(&json!({"jsonrpc": "2.0", "id": id, "method": "resources/read", "params": {"uri": "lineage://stats"}}).to_string())
            .await;
    }
    let pong = session.request(3, "ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
    for id in [1, 2] {
        let answer = session.response(json!(id)).await;
        assert_eq!(answer["error"]["code"], -32603, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("not a regular file"), "{answer}");
        // The error names the file relative to the project root, not the host's layout.
        let root = session.dir.path().to_str().unwrap();
        assert!(!message.contains(root), "{answer}");
        assert!(message.contains(".sdd/lineage/log.jsonl"), "{answer}");
    }
    session.close_input().await;
    assert!(session.from_server.next_line().await.unwrap().is_none());
    session.server.await.unwrap().unwrap();
}

#[tokio::test]
async fn input_end_ends_the_server_within_the_drain_bound() {
    let mut session = Session::start_with(|b| {
        b.limits(Limits {
            drain_timeout: Duration::from_secs(1),
            ..Limits::default()
        })
    });
    session.send_line(&subscribe(1, 60.0)).await;
    assert_eq!(
        session.request(2, "ping", json!({})).await["result"],
        json!({})
    );
    session.close_input().await;
    // Well short of the 60 s the call asked for: the drain bound cancels it.
    let answer = tokio::time::timeout(Duration::from_secs(30), session.response(json!(1)))
        .await
        .expect("the call was cut at the drain bound");
    assert_eq!(answer["result"]["cancelled"], true, "{answer}");
    assert!(session.from_server.next_line().await.unwrap().is_none());
    tokio::time::timeout(Duration::from_secs(30), session.server)
        .await
        .expect("the server ended")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn an_unrepresentable_subscribe_timeout_is_served_not_panicked() {
    let mut session = Session::start_with(|b| {
        b.tool_config(ToolConfig {
            validation: Validation::Permissive,
            ..ToolConfig::default()
        })
    });
    session.send_line(&subscribe(1, 1e300)).await;
    // The subscription answers the first task created for its role after it began waiting.
    for attempt in 0..40 {
        let created = session
            .request(
                100 + attempt,
                "tools/call",
                json!({"name": "bernstein_create_task", "arguments": {"title": format!("t{attempt}"), "description": "d", "role": "qa"}}),
            )
            .await;
        assert_eq!(created["result"]["isError"], false, "{created}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        session.request(1_000 + attempt, "ping", json!({})).await;
        if let Some(at) = session.pending.iter().position(|m| m["id"] == 1) {
            let answer = session.pending.remove(at);
            assert!(answer.get("error").is_none(), "{answer}");
            let result = &answer["result"]["structuredContent"]["result"];
            assert_eq!(result["timed_out"], false, "{answer}");
            assert_eq!(
                result["notifications"][0]["title"]
                    .as_str()
                    .unwrap()
                    .chars()
                    .next(),
                Some('t')
            );
            return;
        }
    }
    panic!("the subscription with timeout_seconds 1e300 never answered");
}

#[tokio::test]
async fn a_cursor_at_the_end_of_u64_is_a_clean_error() {
    let mut session = Session::start();
    // base64url("offset=18446744073709551615")
    let answer = session
        .request(
            1,
            "tasks/list",
            json!({"cursor": "b2Zmc2V0PTE4NDQ2NzQ0MDczNzA5NTUxNjE1"}),
        )
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid pagination cursor"),
        "{answer}"
    );
}

#[tokio::test]
async fn invalid_utf8_is_a_parse_error_and_nothing_is_written() {
    let mut session = Session::start();
    let before = session.evidence().await;
    let mut line = br#"{"jsonrpc":"2.0","id":""#.to_vec();
    line.extend_from_slice(b"\xff\xfe");
    line.extend_from_slice(
        br#"","method":"tools/call","params":{"name":"bernstein_run","arguments":{"goal":"#,
    );
    line.extend_from_slice(b"\"g\xff\"}}}");
    session.send_bytes(&line).await;
    let answer = session.response(Value::Null).await;
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert!(
        answer["error"]["data"]["detail"]
            .as_str()
            .unwrap()
            .contains("UTF-8"),
        "{answer}"
    );
    assert_eq!(
        session.request(2, "ping", json!({})).await["result"],
        json!({})
    );
    assert_eq!(session.evidence().await, before);
}

#[tokio::test]
async fn only_json_whitespace_is_stripped() {
    let mut session = Session::start();
    // Space, tab and a trailing CR around a message are JSON whitespace.
    session
        .send_line(" \t{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} \r")
        .await;
    assert_eq!(session.response(json!(1)).await["result"], json!({}));
    for (id, padded) in [
        (
            2,
            "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}",
        ),
        (
            3,
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\u{3000}",
        ),
        (4, "\u{b}{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}"),
        (5, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}\u{c}"),
    ] {
        session.send_line(padded).await;
        let answer = session.response(Value::Null).await;
        assert_eq!(answer["error"]["code"], -32700, "id {id}: {answer}");
    }
    assert_eq!(
        session.request(6, "ping", json!({})).await["result"],
        json!({})
    );
}

#[tokio::test]
async fn a_repeated_id_is_refused_with_a_null_id() {
    let mut session = Session::start();
    session
        .send_line(r#"{"jsonrpc":"2.0","id":10,"method":"ping","id":11}"#)
        .await;
    let answer = session.response(Value::Null).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"duplicate key "id""#),
        "{answer}"
    );
    session
        .send_line(r#"{"jsonrpc":"2.0","id":12,"method":"tools/list","method":"ping"}"#)
        .await;
    assert_eq!(session.response(json!(12)).await["error"]["code"], -32600);
    // Nothing else was answered for ids 10, 11 or 12.
    assert_eq!(
        session.request(13, "ping", json!({})).await["result"],
        json!({})
    );
    assert!(session.pending.is_empty(), "{:?}", session.pending);
}

#[tokio::test]
async fn a_repeated_tool_name_is_refused_and_runs_nothing() {
    let mut session = Session::start();
    let before = session.evidence().await;
    session
        .send_line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_status","arguments":{},"name":"bernstein_shutdown_orchestrator"}}"#)
        .await;
    let answer = session.response(json!(1)).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"duplicate key "name" at params"#),
        "{answer}"
    );
    assert_eq!(session.evidence().await, before);
    assert!(!session.dir.path().join(".sdd/runtime/signals").exists());
}

#[tokio::test]
async fn a_repeated_argument_key_is_invalid_params() {
    let mut session = Session::start();
    let before = session.evidence().await;
    session
        .send_line(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bernstein_run","arguments":{"goal":"a","nested":{"k":1,"k":2}}}}"#)
        .await;
    let answer = session.response(json!(1)).await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains(r#"duplicate key "k" in the tool arguments at nested"#),
        "{answer}"
    );
    assert_eq!(session.evidence().await, before);
}

#[tokio::test]
async fn a_reused_id_in_flight_is_refused_and_the_first_call_keeps_it() {
    let mut session = Session::start();
    session.send_line(&subscribe(5, 60.0)).await;
    session.send_line(&subscribe(5, 1.0)).await;
    let refused = session.response(json!(5)).await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already in flight"),
        "{refused}"
    );
    // The cancel names id 5 and reaches the first call, which answers with its own result.
    session
        .send_line(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#,
        )
        .await;
    let first = session.response(json!(5)).await;
    assert_eq!(first["result"]["cancelled"], true, "{first}");
    assert_eq!(
        session.request(6, "ping", json!({})).await["result"],
        json!({})
    );
    assert!(
        session.pending.is_empty(),
        "one answer per request: {:?}",
        session.pending
    );
}

/// Sends twenty `tools/list` requests (more answer than the 64 KiB pipe holds, and fewer calls
/// than the stream may run at once), ends the input, leaves the answers unread for `pause`,
/// then reads to the end; returns the ids answered.
async fn answers_read_after_a_pause(drain_timeout: Duration, pause: Duration) -> HashSet<i64> {
    let mut session = Session::start_with(|b| {
        b.limits(Limits {
            drain_timeout,
            ..Limits::default()
        })
    });
    for id in 1..=20 {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string();
        session.send_line(&line).await;
    }
    session.close_input().await;
    tokio::time::sleep(pause).await;
    let mut answered = HashSet::new();
    let read_all = async {
        while let Some(line) = session.from_server.next_line().await.unwrap() {
            let message: Value = serde_json::from_str(&line).unwrap();
            assert!(message["result"]["tools"].is_array(), "{message}");
            answered.insert(message["id"].as_i64().unwrap());
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read_all)
        .await
        .expect("the server closed its output");
    answered
}

#[tokio::test]
async fn answers_wait_for_a_slow_reader_while_the_drain_bound_lasts() {
    // Nothing is in flight at the end of input, so the drain ends at once; the answers already
    // queued still get what is left of the drain bound (a minute here) to be read, well past
    // the one-second cancel grace.
    let answered =
        answers_read_after_a_pause(Duration::from_secs(60), Duration::from_secs(3)).await;
    assert_eq!(answered, (1..=20).collect::<HashSet<_>>());
}

#[tokio::test]
async fn answers_wait_for_a_slow_reader_for_the_grace_when_the_drain_bound_is_zero() {
    // With no drain bound at all the writer still gets the cancel grace (one second) to
    // flush what is queued, so a client that reads a moment after closing its input loses
    // nothing.
    let answered = answers_read_after_a_pause(Duration::ZERO, Duration::from_millis(200)).await;
    assert_eq!(answered, (1..=20).collect::<HashSet<_>>());
}
