//! `--metrics-addr` over stdio: a scripted session's counts as Prometheus scrapes them, scrapes
//! in the middle of a burst of calls, and the loopback rule for the listener.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any single wait of these tests may last before it fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(60);

/// The binary serving stdio with a metrics listener, read by two threads.
struct Live {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<Value>,
    metrics_url_port: u16,
}

impl Live {
    fn start(home: &Path, project: &Path, env: &[(&str, &str)]) -> Live {
        Live::start_with(home, project, &[], env)
    }

    fn start_with(home: &Path, project: &Path, args: &[&str], env: &[(&str, &str)]) -> Live {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(args)
            .current_dir(project)
            .env_clear()
            .env("HOME", home)
            .env("XDG_STATE_HOME", home.join("state"))
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let (answer_tx, answers) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let line = line.unwrap();
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout is not protocol ({e}): {line}"));
                if answer_tx.send(value).is_err() {
                    return;
                }
            }
        });
        let (log_tx, logs) = channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let _ = log_tx.send(line);
            }
        });
        let deadline = Instant::now() + PATIENCE;
        let port = loop {
            let line = logs
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("the metrics listener never said where it listens");
            if let Some(rest) = line
                .split("serving Prometheus metrics on http://127.0.0.1:")
                .nth(1)
            {
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        Live {
            child,
            stdin,
            answers,
            metrics_url_port: port,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for `count` answers and returns them by id (answers without an id under `null`).
    fn answers(&self, count: usize) -> HashMap<String, Value> {
        let deadline = Instant::now() + PATIENCE;
        let mut by_id = HashMap::new();
        for _ in 0..count {
            let answer = match self
                .answers
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => panic!("only {} answers came", by_id.len()),
                Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
            };
            by_id.insert(answer["id"].to_string(), answer);
        }
        by_id
    }

    fn scrape(&self) -> String {
        scrape(self.metrics_url_port, "/metrics").1
    }

    /// Closes stdin and waits for exit 0.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

/// One HTTP/1.1 GET on loopback: the status code and the body.
fn scrape(port: u16, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of the sample `series` (name and labels exactly as rendered), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn call(id: i64, name: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
    .to_string()
}

#[test]
fn a_scripted_session_is_counted_on_the_metrics_listener() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut live = Live::start(home.path(), &project, &[]);
    for i in 0..3 {
        live.send(&call(
            i,
            "bernstein_run_status",
            json!({"run_id": format!("run-{i}")}),
        ));
    }
    // The input firewall refuses a number where the schema wants a string: nothing runs.
    live.send(&call(10, "bernstein_run_status", json!({"run_id": 5})));
    // The handler runs and answers an error: the task does not exist.
    live.send(&call(11, "bernstein_approve", json!({"task_id": "nope"})));
    // An unknown tool is a JSON-RPC error, counted under one series whatever the name.
    live.send(&call(12, "no_such_tool_a", json!({})));
    live.send(&call(13, "no_such_tool_b", json!({})));
    live.send(r#"{"jsonrpc": "2.0", "id": 14, "method": "no/such/method"}"#);
    live.send("not json");
    let answers = live.answers(9);
    assert_eq!(answers["10"]["result"]["isError"], true, "{answers:?}");
    assert_eq!(answers["11"]["result"]["isError"], true, "{answers:?}");
    assert_eq!(answers["12"]["error"]["code"], -32602, "{answers:?}");

    let text = live.scrape();
    let expect = [
        (
            r#"bernstein_mcp_tool_calls_total{tool="bernstein_run_status",outcome="ok"}"#,
            3.0,
        ),
        (
            r#"bernstein_mcp_tool_calls_total{tool="bernstein_run_status",outcome="refused"}"#,
            1.0,
        ),
        (
            r#"bernstein_mcp_tool_calls_total{tool="bernstein_approve",outcome="tool_error"}"#,
            1.0,
        ),
        (
            r#"bernstein_mcp_tool_calls_total{tool="unknown",outcome="refused"}"#,
            2.0,
        ),
        (
            r#"bernstein_mcp_tool_call_duration_seconds_count{tool="bernstein_run_status"}"#,
            4.0,
        ),
        (
            r#"bernstein_mcp_tool_call_duration_seconds_count{tool="bernstein_approve"}"#,
            1.0,
        ),
        (r#"bernstein_mcp_jsonrpc_errors_total{code="-32602"}"#, 2.0),
        (r#"bernstein_mcp_jsonrpc_errors_total{code="-32601"}"#, 1.0),
        (r#"bernstein_mcp_jsonrpc_errors_total{code="-32700"}"#, 1.0),
        ("bernstein_mcp_tool_calls_in_flight", 0.0),
        // Only the four admitted calls were anchored, in however many groups they arrived.
        ("bernstein_mcp_anchor_append_duration_seconds_count", 4.0),
        ("bernstein_mcp_group_commit_batch_size_sum", 4.0),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    let groups = sample(&text, "bernstein_mcp_group_commit_batch_size_count").unwrap();
    assert!((1.0..=4.0).contains(&groups), "{groups} groups in\n{text}");
    // Each group fsyncs its journal rows and its audit entries.
    let fsyncs = sample(&text, "bernstein_mcp_fsync_duration_seconds_count").unwrap();
    assert!(fsyncs >= 2.0 * groups, "{fsyncs} fsyncs in\n{text}");
    for name in [
        "bernstein_mcp_tool_calls_total",
        "bernstein_mcp_tool_call_duration_seconds",
        "bernstein_mcp_jsonrpc_errors_total",
        "bernstein_mcp_anchor_append_duration_seconds",
        "bernstein_mcp_fsync_duration_seconds",
        "bernstein_mcp_group_commit_batch_size",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no help for {name}"
        );
    }
    // Only /metrics is served.
    assert_eq!(scrape(live.metrics_url_port, "/").0, 404);
    live.finish();
}

#[test]
fn scrapes_during_a_burst_change_no_answer() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    // Without the meter an answer carries no latency or call id, so equal calls answer equal bytes.
    let mut live = Live::start(home.path(), &project, &[("BERNSTEIN_MCP_COST_METER", "0")]);
    let port = live.metrics_url_port;
    let (stop_tx, stop) = channel::<()>();
    let scraper = std::thread::spawn(move || {
        let mut scrapes = 0;
        while stop.try_recv().is_err() && scrapes < 2000 {
            // Before the first call the exposition is empty; it is the status that matters.
            assert_eq!(scrape(port, "/metrics").0, 200);
            scrapes += 1;
        }
        scrapes
    });
    // Waves below the per-stream cap of requests in flight (32), so none is refused as busy.
    const WAVE: i64 = 20;
    const CALLS: i64 = 3 * WAVE;
    let mut answers = HashMap::new();
    for wave in 0..CALLS / WAVE {
        for i in wave * WAVE..(wave + 1) * WAVE {
            live.send(&call(
                i,
                "bernstein_run_status",
                json!({"run_id": "steady"}),
            ));
        }
        answers.extend(live.answers(WAVE as usize));
    }
    stop_tx.send(()).unwrap();
    let scrapes = scraper.join().unwrap();
    assert!(scrapes > 0);
    let first = &answers["0"]["result"];
    assert_eq!(first["isError"], false, "{first}");
    for i in 0..CALLS {
        let answer = &answers[&i.to_string()];
        assert_eq!(&answer["result"], first, "answer {i}: {answer}");
    }
    let text = live.scrape();
    assert_eq!(
        sample(
            &text,
            r#"bernstein_mcp_tool_calls_total{tool="bernstein_run_status",outcome="ok"}"#
        ),
        Some(CALLS as f64)
    );
    live.finish();
}

#[test]
fn remote_round_trips_are_timed() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    // A port nobody listens on: the round trip fails at connect, and is timed all the same.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut live = Live::start_with(home.path(), &project, &["--server-url", &url], &[]);
    live.send(&call(1, "bernstein_status", json!({})));
    let answers = live.answers(1);
    assert_eq!(answers["1"]["result"]["isError"], true, "{answers:?}");
    let text = live.scrape();
    let failed = sample(
        &text,
        r#"bernstein_mcp_backend_round_trip_seconds_count{method="GET",result="failed"}"#,
    );
    assert!(failed.is_some_and(|n| n >= 1.0), "{text}");
    assert!(text.contains("# HELP bernstein_mcp_backend_round_trip_seconds "));
    live.finish();
}

#[test]
fn the_metrics_listener_stays_on_loopback_unless_told() {
    let home = tempfile::tempdir().unwrap();
    let out = crate::support::run(&["--metrics-addr", "0.0.0.0:0"], home.path());
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("--metrics-public"), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    let out = crate::support::run(&["--metrics-addr", "not an address"], home.path());
    assert_eq!(out.code, 2, "{}", out.stderr);
}
