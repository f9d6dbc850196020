//! `cargo xtask bench http`: MCP over streamable HTTP on loopback at 1, 16 and 64 concurrent
//! clients, for three servers interleaved round by round (A B C A B C):
//!
//! 1. `bench/rmcp-http-baseline`, a bare rmcp 3.11 stateless streamable-HTTP server with one
//!    `add` tool: the floor;
//! 2. the reference's streamable HTTP transport (`bernstein.mcp.remote_transport.run_remote`,
//!    which no CLI command starts) in front of `bernstein serve`, when installed;
//! 3. ours, `bernstein-mcp --transport http --host 127.0.0.1 --port N`, with durable anchoring.
//!    Skipped with a message when the binary has no HTTP transport.
//!
//! Requests: `ping`, `tools/call` of `bernstein_status` and `bernstein_run_status` (the bare
//! server calls `add` instead, its floor for a tool call), and for ours `bernstein_run`, a
//! durable task-store mutation per request (the store's group commit shows there; the
//! reference is not loaded with it, since the tasks it would create would slow its later
//! `bernstein_status` rounds). Each load is bounded in count and in
//! time (see [`crate::bench_load`]). RSS is read idle (after start) and as the peak after the
//! 64-client loads.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::Object;
use serde_json::{Value, json};

use crate::bench_guard::ChildGuard;
use crate::bench_load::{Load, LoadResult, Target, call_once, run_load};
use crate::bench_stdio::{OUR_ENVIRONMENT, TASK_SERVER_TOKEN, TaskServer, proc_status_kib};

/// Client counts measured.
pub(crate) const CLIENTS: &[usize] = &[1, 16, 64];
/// Rounds: every load runs once per round, the servers in turn, and the rounds are merged.
const ROUNDS: usize = 2;
/// The bearer our and the reference's HTTP servers are given.
const MCP_TOKEN: &str = "bench-mcp-token";

/// The flags of the HTTP bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HttpOptions {
    /// Requests per load in all (split over the rounds).
    pub(crate) requests: usize,
    /// Seconds per load in all (split over the rounds).
    pub(crate) seconds: u64,
}

/// One measured load.
#[derive(Debug, Clone)]
pub(crate) struct HttpRow {
    pub(crate) server: &'static str,
    pub(crate) request: &'static str,
    pub(crate) clients: usize,
    pub(crate) result: LoadResult,
}

/// The memory of one server.
#[derive(Debug, Clone)]
pub(crate) struct HttpRss {
    pub(crate) server: &'static str,
    pub(crate) idle_kib: u64,
    pub(crate) peak_kib: u64,
}

/// Everything the HTTP bench measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct HttpResults {
    pub(crate) rows: Vec<HttpRow>,
    pub(crate) rss: Vec<HttpRss>,
    pub(crate) skipped: Vec<String>,
}

/// A running server under test.
struct Running {
    name: &'static str,
    target: Target,
    /// `(request label, JSON-RPC body)` in the order measured.
    requests: Vec<(&'static str, Value)>,
    process: ChildGuard,
    idle_kib: u64,
    // The reference's task server, stopped with it.
    _task_server: Option<TaskServer>,
}

pub(crate) struct HttpSetup<'a> {
    pub(crate) ours: &'a Path,
    /// Another build of `bernstein-mcp` (`--baseline-binary`), loaded beside ours in every
    /// round, so a change is measured side by side in one run.
    pub(crate) baseline: Option<&'a Path>,
    pub(crate) rmcp_http: &'a Path,
    pub(crate) reference_cli: Option<&'a Path>,
    pub(crate) python: Option<&'a Path>,
    pub(crate) key: &'a Path,
    pub(crate) scratch: &'a Path,
}

pub(crate) fn measure(setup: &HttpSetup<'_>, options: HttpOptions) -> anyhow::Result<HttpResults> {
    let mut results = HttpResults::default();
    let mut servers = vec![start_rmcp(setup)?];
    match (setup.reference_cli, setup.python) {
        (Some(cli), Some(python)) => match start_reference(setup, cli, python) {
            Ok(reference) => servers.push(reference),
            Err(e) => {
                eprintln!("bench http: reference SKIPPED: {e:#}");
                results
                    .skipped
                    .push(format!("reference: could not be started: {e:#}"));
            }
        },
        _ => results
            .skipped
            .push("reference: not installed (bash ../shared/reference/setup-oracle.sh)".to_owned()),
    }
    let builds = std::iter::once(("ours", setup.ours))
        .chain(setup.baseline.map(|binary| ("baseline", binary)));
    for (name, binary) in builds {
        match start_bernstein_mcp(setup, binary, name)? {
            Ok(running) => servers.push(running),
            Err(reason) => {
                eprintln!("bench http: {name} SKIPPED: {reason}");
                results.skipped.push(format!("{name}: {reason}"));
            }
        }
    }
    let per_round = Duration::from_secs(options.seconds) / ROUNDS as u32;
    let requests = options.requests.div_ceil(ROUNDS);
    for round in 0..ROUNDS {
        for &clients in CLIENTS {
            for request in [
                "ping",
                "tools/call floor",
                "bernstein_status",
                "bernstein_run_status",
                "bernstein_run",
            ] {
                for server in &servers {
                    let Some((label, body)) =
                        server.requests.iter().find(|(label, _)| *label == request)
                    else {
                        continue;
                    };
                    eprintln!(
                        "bench http: round {} {} {label} x{clients} clients",
                        round + 1,
                        server.name
                    );
                    let load = Load {
                        body: body.clone(),
                        clients,
                        requests,
                        budget: per_round,
                    };
                    let result = run_load(&server.target, &load)
                        .with_context(|| format!("{} {label} at {clients} clients", server.name))?;
                    match results.rows.iter_mut().find(|row| {
                        row.server == server.name && row.request == *label && row.clients == clients
                    }) {
                        Some(row) => {
                            row.result.latencies.extend(result.latencies);
                            row.result.wall += result.wall;
                        }
                        None => results.rows.push(HttpRow {
                            server: server.name,
                            request: label,
                            clients,
                            result,
                        }),
                    }
                }
            }
        }
    }
    for server in &servers {
        results.rss.push(HttpRss {
            server: server.name,
            idle_kib: server.idle_kib,
            peak_kib: proc_status_kib(server.process.id(), "VmHWM:").unwrap_or(0),
        });
    }
    Ok(results)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `port` accepts connections, failing when the process exits first.
fn wait_for_port(process: &mut ChildGuard, port: u16, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if !process.running() {
            bail!("the server exited before listening on port {port}");
        }
        ensure!(
            Instant::now() < deadline,
            "the server did not listen on port {port} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn target(port: u16, bearer: Option<&str>) -> Target {
    Target {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        path: "/mcp".to_owned(),
        bearer: bearer.map(str::to_owned),
    }
}

fn rpc(method: &str, params: Option<Value>) -> Value {
    match params {
        Some(params) => json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        None => json!({"jsonrpc": "2.0", "id": 1, "method": method}),
    }
}

fn tool(name: &str, arguments: Value) -> Value {
    rpc(
        "tools/call",
        Some(json!({"name": name, "arguments": arguments})),
    )
}

fn start_rmcp(setup: &HttpSetup<'_>) -> anyhow::Result<Running> {
    let port = free_port()?;
    let mut process = ChildGuard::spawn(
        Command::new(setup.rmcp_http)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(setup.scratch.join("rmcp-http.log"))?),
    )?;
    wait_for_port(&mut process, port, Duration::from_secs(30))?;
    let idle_kib = proc_status_kib(process.id(), "VmRSS:").unwrap_or(0);
    Ok(Running {
        name: "rmcp bare",
        target: target(port, None),
        requests: vec![
            ("ping", rpc("ping", None)),
            ("tools/call floor", tool("add", json!({"a": 20, "b": 22}))),
        ],
        process,
        idle_kib,
        _task_server: None,
    })
}

fn start_reference(setup: &HttpSetup<'_>, cli: &Path, python: &Path) -> anyhow::Result<Running> {
    let project = setup.scratch.join("reference-http");
    std::fs::create_dir_all(project.join(".sdd"))?;
    let state_home = setup.scratch.join("state");
    let task_server = TaskServer::start(cli, &project, setup.key, &state_home, setup.scratch)?;
    let port = free_port()?;
    let script = "import sys\nfrom bernstein.mcp.remote_transport import run_remote\n\
                  run_remote(sys.argv[1], host='127.0.0.1', port=int(sys.argv[2]), \
                  auth_token=sys.argv[3])\n";
    let mut process = ChildGuard::spawn(
        Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(task_server.url())
            .arg(port.to_string())
            .arg(MCP_TOKEN)
            .current_dir(&project)
            .env("BERNSTEIN_AUTH_TOKEN", TASK_SERVER_TOKEN)
            .env("BERNSTEIN_AUDIT_KEY_PATH", setup.key)
            .env("XDG_STATE_HOME", &state_home)
            .env_remove("BERNSTEIN_SERVER_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(setup.scratch.join("reference-http.log"))?),
    )?;
    wait_for_port(&mut process, port, Duration::from_secs(120))?;
    let idle_kib = proc_status_kib(process.id(), "VmRSS:").unwrap_or(0);
    let target = target(port, Some(MCP_TOKEN));
    // The reference's remote transport offers no `bernstein_run_status` ("Unknown tool"), so
    // only `ping` and `bernstein_status` are measured on it.
    // `bernstein_status` reads the task server; give it one task to count.
    call_once(
        &target,
        &tool("bernstein_run", json!({"goal": "http benchmark run"})),
    )?;
    let mut requests = bernstein_requests("unused");
    requests.retain(|(label, _)| !matches!(*label, "bernstein_run_status" | "bernstein_run"));
    Ok(Running {
        name: "reference",
        target,
        requests,
        process,
        idle_kib,
        _task_server: Some(task_server),
    })
}

/// Starts a `bernstein-mcp` build (ours, or the baseline) as `name` on its own project, or says
/// why it cannot be measured (`Ok(Err(reason))`).
fn start_bernstein_mcp(
    setup: &HttpSetup<'_>,
    binary: &Path,
    name: &'static str,
) -> anyhow::Result<Result<Running, String>> {
    let project = setup.scratch.join(format!("{name}-http"));
    std::fs::create_dir_all(project.join(".sdd"))?;
    let port = free_port()?;
    let log = setup.scratch.join(format!("{name}-http.log"));
    let mut command = Command::new(binary);
    command
        .args(["--transport", "http", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .arg("--workdir")
        .arg(&project)
        .arg("--key-file")
        .arg(setup.key)
        .env("BERNSTEIN_MCP_TOKEN", MCP_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log)?);
    for name in OUR_ENVIRONMENT {
        command.env_remove(name);
    }
    let mut process = ChildGuard::spawn(&mut command)?;
    if let Err(e) = wait_for_port(&mut process, port, Duration::from_secs(30)) {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        let first = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Ok(Err(format!(
            "this bernstein-mcp has no working HTTP transport ({e}; it said: {first})"
        )));
    }
    let idle_kib = proc_status_kib(process.id(), "VmRSS:").unwrap_or(0);
    let target = target(port, Some(MCP_TOKEN));
    let run_id = create_run_over_http(&target, &project)?;
    Ok(Ok(Running {
        name,
        target,
        requests: bernstein_requests(&run_id),
        process,
        idle_kib,
        _task_server: None,
    }))
}

fn bernstein_requests(run_id: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("ping", rpc("ping", None)),
        ("bernstein_status", tool("bernstein_status", json!({}))),
        (
            "bernstein_run_status",
            tool("bernstein_run_status", json!({"run_id": run_id})),
        ),
        (
            "bernstein_run",
            tool("bernstein_run", json!({"goal": "http benchmark task"})),
        ),
    ]
}

/// Creates a run through the server's `bernstein_run` and gives it the same three-row journal
/// as the stdio bench, so every server projects its handle from a real journal.
fn create_run_over_http(target: &Target, project: &Path) -> anyhow::Result<String> {
    let result = call_once(
        target,
        &tool("bernstein_run", json!({"goal": "http benchmark run"})),
    )?;
    let payload = crate::bench_stdio::tool_payload(&result)?;
    // The reference's remote transport answers the raw task row, whose run is `task-<id>`.
    let run_id = match payload.get("run_id").and_then(Value::as_str) {
        Some(run_id) => run_id.to_owned(),
        None => payload
            .get("id")
            .and_then(Value::as_str)
            .map(|id| format!("task-{id}"))
            .with_context(|| format!("bernstein_run returned no run_id and no id: {payload}"))?,
    };
    let task_id = run_id.strip_prefix("task-").unwrap_or(&run_id).to_owned();
    let mut journal = JournalWriter::open(project, &run_id, HashProfile::PyJsonV1)?;
    for (event, extra) in [
        ("task_claimed", ("claimed_by", "bench-worker")),
        ("task_progress", ("note", "half")),
        ("task_completed", ("result_summary", "benchmark fixture")),
    ] {
        journal.append(
            event,
            &Object::new()
                .with("task_id", task_id.as_str())
                .with(extra.0, extra.1),
        )?;
    }
    let answer = call_once(
        target,
        &tool("bernstein_run_status", json!({"run_id": run_id})),
    )?;
    crate::bench_stdio::tool_payload(&answer)?;
    Ok(run_id)
}

/// The row of `server`'s `request` at `clients`, when measured.
pub(crate) fn find<'a>(
    rows: &'a [HttpRow],
    server: &str,
    request: &str,
    clients: usize,
) -> Option<&'a HttpRow> {
    rows.iter()
        .find(|r| r.server == server && r.request == request && r.clients == clients)
}

pub(crate) fn render(results: &HttpResults) -> String {
    use crate::bench_scale::percentile_ms;
    let mut out = String::from(
        "\nhttp: streamable HTTP on loopback, keep-alive connections, one request in flight per \
         client\n\n",
    );
    out.push_str(&format!(
        "{:<11} {:<21} {:>7} {:>8} {:>10} {:>9} {:>9} {:>8}\n",
        "server", "request", "clients", "requests", "req/s", "p50 ms", "p99 ms", "p99/p50"
    ));
    for row in &results.rows {
        let p50 = percentile_ms(&row.result.latencies, 50);
        let p99 = percentile_ms(&row.result.latencies, 99);
        out.push_str(&format!(
            "{:<11} {:<21} {:>7} {:>8} {:>10.1} {:>9.3} {:>9.3} {:>8.1}\n",
            row.server,
            row.request,
            row.clients,
            row.result.latencies.len(),
            row.result.requests_per_second(),
            p50,
            p99,
            if p50 > 0.0 { p99 / p50 } else { 0.0 }
        ));
    }
    let side_by_side: Vec<String> = results
        .rows
        .iter()
        .filter(|row| row.server == "ours")
        .filter_map(|ours| {
            let baseline = find(&results.rows, "baseline", ours.request, ours.clients)?;
            let base = baseline.result.requests_per_second();
            (base > 0.0).then(|| {
                format!(
                    "  {:<21} {:>7} {:>10.1} {:>10.1} {:>9.2}x\n",
                    ours.request,
                    ours.clients,
                    ours.result.requests_per_second(),
                    base,
                    ours.result.requests_per_second() / base
                )
            })
        })
        .collect();
    if !side_by_side.is_empty() {
        out.push_str(&format!(
            "\nside by side with --baseline-binary (loaded in turn with ours, round by round)\n  \
             {:<21} {:>7} {:>10} {:>10} {:>10}\n",
            "request", "clients", "ours req/s", "base req/s", "ours/base"
        ));
        out.push_str(&side_by_side.concat());
    }
    out.push_str("\nRSS: idle / peak after the 64-client loads (MiB)\n");
    for rss in &results.rss {
        out.push_str(&format!(
            "  {:<11} {:>7.1} / {:>7.1}\n",
            rss.server,
            rss.idle_kib as f64 / 1024.0,
            rss.peak_kib as f64 / 1024.0
        ));
    }
    for skipped in &results.skipped {
        out.push_str(&format!("SKIPPED {skipped}\n"));
    }
    out
}

/// Where the HTTP baseline binary is built.
pub(crate) fn rmcp_http_binary(target: &Path) -> PathBuf {
    target.join("rmcp-http-baseline/release/rmcp-http-baseline")
}
