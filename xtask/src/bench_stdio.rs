//! `cargo xtask bench stdio`: sequential MCP calls over stdio, bernstein-mcp beside the
//! reference and a bare rmcp server, measured in one run on one machine.
//!
//! The driver is an MCP client reduced to what the figures need. It spawns a server process,
//! sends newline-delimited JSON-RPC (`initialize`, `notifications/initialized`, then `tools/call`
//! requests one at a time, each waiting for its answer) and reports:
//!
//! * calls per second and the latency of each call (mean, p99, and the mean of the first and
//!   last tenth, which shows whether a call gets slower as evidence accumulates);
//! * cold start: from spawning the process to the answer of the first `initialize`, the median
//!   of several fresh processes;
//! * the peak resident set of the server process (`VmHWM`), read just before it is shut down.
//!
//! Three servers are measured:
//!
//! 1. ours, `target/release/bernstein-mcp --workdir <project> --key-file <0600 key>`: every call
//!    is anchored (a journal row and an audit entry, both fsynced) before it runs. Each
//!    measurement gets a fresh project, so the anchoring journal starts empty every time. Also
//!    with `BERNSTEIN_MCP_COST_METER=0`.
//! 2. the reference, `bernstein mcp --server-url <task server>` next to `$BERNSTEIN_PY`, in front
//!    of a `bernstein serve` started on a free loopback port; it anchors nothing. Skipped with a
//!    line saying so when it is not installed.
//! 3. `bench/rmcp-baseline`, a bare rmcp 3.11 stdio server calling a trivial `add` tool: the floor
//!    any rmcp-based server pays per call.
//!
//! `bernstein_run_status` polls a run created through the server's own `bernstein_run`, whose
//! run journal the driver then fills with the same three rows for every server (the reference's
//! task server writes no run journals), so every server projects a handle from a real journal.
//! Every timed answer is checked: a JSON-RPC error, `isError` or an `error` payload fails the
//! benchmark instead of being counted as a fast call.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::Object;
use serde_json::{Value, json};

use crate::bench_guard::ChildGuard;
use crate::{cargo, project_root};

/// Timed `bernstein_run_status` (and rmcp `add`) calls per measurement, unless `--calls` says
/// otherwise.
const DEFAULT_CALLS: usize = 1000;
/// Timed `bernstein_status` calls per measurement, unless `--status-calls` says otherwise: the
/// reference answers this one through its task server at a few dozen calls per second.
const DEFAULT_STATUS_CALLS: usize = 200;
/// Untimed calls before each timed series, so caches and lazy imports are warm.
const WARM_UP_CALLS: usize = 10;
/// Fresh processes whose cold start is measured, per server; the median is reported.
const COLD_STARTS: usize = 5;
/// The reference takes seconds to start, so it is started fewer times.
const REFERENCE_COLD_STARTS: usize = 3;
/// A server that has not finished a whole measurement by then is killed and the bench fails.
const WATCHDOG: Duration = Duration::from_secs(600);
/// How long a server gets to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(15);
/// The audit key every server is given (hex, as Bernstein's key files hold it).
pub(crate) const BENCH_KEY: &str =
    "3f1c9a7e5b2d4068a1c3e5f7092b4d6f8a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d\n";
/// The bearer shared by the reference's task server and its MCP server.
pub(crate) const TASK_SERVER_TOKEN: &str = "bench-token";

/// Environment a developer may have set that would change what our server does.
pub(crate) const OUR_ENVIRONMENT: &[&str] = &[
    "BERNSTEIN_SERVER_URL",
    "BERNSTEIN_AUTH_TOKEN",
    "BERNSTEIN_AUDIT_KEY_PATH",
    "BERNSTEIN_MCP_TOOL_TIER",
    "BERNSTEIN_MCP_COST_METER",
    "BERNSTEIN_MCP_DEPRECATED_ALIASES",
    "BERNSTEIN_MCP_VALIDATION",
    "BERNSTEIN_LINEAGE_MCP_ENABLED",
];

/// How many timed calls each series makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallCounts {
    pub(crate) run_status: usize,
    pub(crate) status: usize,
}

impl CallCounts {
    pub(crate) fn parse(args: &[String]) -> anyhow::Result<CallCounts> {
        let mut counts = CallCounts {
            run_status: DEFAULT_CALLS,
            status: DEFAULT_STATUS_CALLS,
        };
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            let slot = match flag.as_str() {
                "--calls" => &mut counts.run_status,
                "--status-calls" => &mut counts.status,
                other => bail!(
                    "unknown argument {other:?}; usage: cargo xtask bench stdio \
                     [--calls N] [--status-calls N]"
                ),
            };
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a number"))?;
            *slot = value
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("{flag} needs a positive number, not {value:?}"))?;
        }
        Ok(counts)
    }
}

/// Prints the tail of every server log in `scratch` to stderr: the scratch directory is removed
/// when the bench ends, so a failure is explained here or not at all.
pub(crate) fn print_logs(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|ext| ext == "log")
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            let tail: Vec<&str> = text.lines().rev().take(20).collect();
            eprintln!("--- {} (last {} lines)", path.display(), tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// The two binaries we build: our server and the rmcp baseline.
/// The row label of the `--baseline-binary` build.
pub(crate) const BASELINE_LABEL: &str = "baseline";

pub(crate) struct Binaries {
    pub(crate) ours: PathBuf,
    pub(crate) rmcp: PathBuf,
}

pub(crate) fn build_servers() -> anyhow::Result<Binaries> {
    let ours = build_ours()?;
    let target = target_dir();
    let rmcp_target = target.join("rmcp-baseline");
    eprintln!("bench: building bench/rmcp-baseline (release)");
    let status = cargo()
        .args(["build", "-q", "--release", "--manifest-path"])
        .arg(project_root().join("bench/rmcp-baseline/Cargo.toml"))
        .arg("--target-dir")
        .arg(&rmcp_target)
        .current_dir(project_root())
        .status()?;
    ensure!(status.success(), "building bench/rmcp-baseline failed");
    Ok(Binaries {
        ours,
        rmcp: rmcp_target.join("release/rmcp-baseline"),
    })
}

/// The cargo target directory the benches build into.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"))
}

/// Builds our server in release mode and returns its path.
pub(crate) fn build_ours() -> anyhow::Result<PathBuf> {
    eprintln!("bench: building bernstein-mcp (release)");
    let status = cargo()
        .args(["build", "-q", "--release", "-p", "bernstein-mcp"])
        .current_dir(project_root())
        .status()?;
    ensure!(
        status.success(),
        "cargo build --release -p bernstein-mcp failed"
    );
    Ok(target_dir().join("release/bernstein-mcp"))
}

/// Rounds of the stdio bench: every server is measured once per round, in turn (A B C A B C),
/// with half the calls, and the rounds are merged, so a machine that slows down half-way
/// weighs on every server alike.
const ROUNDS: usize = 2;
/// Calls kept in flight by the pipelined series.
pub(crate) const PIPELINE_DEPTH: usize = 16;

/// What the stdio bench measured.
pub(crate) struct StdioResults {
    pub(crate) rows: Vec<Row>,
    pub(crate) pipelined: Vec<Pipelined>,
}

/// A pipelined series: [`PIPELINE_DEPTH`] calls in flight on one stdio connection.
#[derive(Debug, Clone)]
pub(crate) struct Pipelined {
    pub(crate) server: String,
    pub(crate) tool: String,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) wall: Duration,
}

impl Pipelined {
    pub(crate) fn calls_per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// `baseline`, when given, is another build of `bernstein-mcp` measured like ours (meter on) in
/// every round, between ours and the reference, so a change is measured side by side in one run.
pub(crate) fn measure_all(
    scratch: &Path,
    python: Option<&Path>,
    binaries: &Binaries,
    baseline: Option<&Path>,
    counts: CallCounts,
) -> anyhow::Result<StdioResults> {
    let key_path = scratch.join("audit.key");
    std::fs::write(&key_path, BENCH_KEY)?;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
    let per_round = CallCounts {
        run_status: counts.run_status.div_ceil(ROUNDS),
        status: counts.status.div_ceil(ROUNDS),
    };
    eprintln!(
        "bench stdio: {} timed calls per bernstein_run_status / add series, {} per \
         bernstein_status series, in {ROUNDS} interleaved rounds, {WARM_UP_CALLS} untimed \
         warm-up calls before each",
        counts.run_status, counts.status
    );
    let reference = Reference::locate(python);
    if reference.is_none() {
        eprintln!(
            "bench stdio: reference SKIPPED: no `bernstein` CLI next to $BERNSTEIN_PY (install it \
             with `bash ../shared/reference/setup-oracle.sh`, or set BERNSTEIN_PY)"
        );
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut pipelined: Vec<Pipelined> = Vec::new();
    for round in 0..ROUNDS {
        let round_dir = scratch.join(format!("round-{round}"));
        std::fs::create_dir_all(&round_dir)?;
        let ours = OurServer {
            name: "ours",
            binary: &binaries.ours,
            key: &key_path,
            scratch: &round_dir,
        };
        let mut measured = Vec::new();
        for meter in [true, false] {
            measured.extend(ours.measure(meter, per_round)?);
        }
        if let Some(baseline) = baseline {
            let baseline = OurServer {
                name: BASELINE_LABEL,
                binary: baseline,
                key: &key_path,
                scratch: &round_dir,
            };
            measured.extend(baseline.measure(true, per_round)?);
        }
        let mut piped = vec![ours.measure_pipelined(per_round.run_status)?];
        if let Some(reference) = &reference {
            let (reference_rows, reference_piped) =
                reference.measure(&round_dir, &key_path, per_round)?;
            measured.extend(reference_rows);
            piped.push(reference_piped);
        }
        measured.push(measure_rmcp(&binaries.rmcp, &round_dir, per_round)?);
        piped.push(measure_rmcp_pipelined(
            &binaries.rmcp,
            &round_dir,
            per_round.run_status,
        )?);
        merge_rows(&mut rows, measured);
        for new in piped {
            match pipelined
                .iter_mut()
                .find(|p| p.server == new.server && p.tool == new.tool)
            {
                Some(old) => {
                    old.latencies.extend(new.latencies);
                    old.wall += new.wall;
                }
                None => pipelined.push(new),
            }
        }
    }
    Ok(StdioResults { rows, pipelined })
}

/// Adds a round's rows to the merged ones: latencies are concatenated, the cold start is the
/// smaller of the rounds' medians, and the peak RSS the larger.
fn merge_rows(rows: &mut Vec<Row>, round: Vec<Row>) {
    for new in round {
        match rows
            .iter_mut()
            .find(|row| row.server == new.server && row.tool == new.tool)
        {
            Some(row) => {
                row.latencies.extend(new.latencies);
                row.cold_start = row.cold_start.min(new.cold_start);
                row.peak_rss_kib = row.peak_rss_kib.max(new.peak_rss_kib);
                row.idle_rss_kib = row.idle_rss_kib.max(new.idle_rss_kib);
            }
            None => rows.push(new),
        }
    }
}

pub(crate) fn render_pipelined(pipelined: &[Pipelined]) -> String {
    let mut out = format!(
        "stdio pipelined: {PIPELINE_DEPTH} calls in flight on one connection\n\n{:<18} {:<21} \
         {:>6} {:>9} {:>8} {:>8}\n",
        "server", "tool", "calls", "calls/s", "p50 ms", "p99 ms"
    );
    for p in pipelined {
        out.push_str(&format!(
            "{:<18} {:<21} {:>6} {:>9.1} {:>8.3} {:>8.3}\n",
            p.server,
            p.tool,
            p.latencies.len(),
            p.calls_per_second(),
            crate::bench_scale::percentile_ms(&p.latencies, 50),
            crate::bench_scale::percentile_ms(&p.latencies, 99),
        ));
    }
    out
}

/// One measured series: a server answering one tool `calls` times in a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row {
    pub(crate) server: String,
    pub(crate) tool: String,
    pub(crate) anchoring: bool,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) cold_start: Duration,
    pub(crate) peak_rss_kib: Option<u64>,
    /// Right after the `initialize` handshake, before any call.
    pub(crate) idle_rss_kib: Option<u64>,
}

impl Row {
    fn total(&self) -> Duration {
        self.latencies.iter().sum()
    }

    pub(crate) fn calls_per_second(&self) -> f64 {
        let total = self.total().as_secs_f64();
        if total > 0.0 {
            self.latencies.len() as f64 / total
        } else {
            0.0
        }
    }

    pub(crate) fn mean_ms(&self) -> f64 {
        mean_ms(&self.latencies)
    }

    fn p99_ms(&self) -> f64 {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = (sorted.len() * 99).div_ceil(100).saturating_sub(1);
        sorted.get(rank).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    }

    /// The mean latency of the first and of the last tenth of the series.
    fn first_and_last_tenth_ms(&self) -> (f64, f64) {
        let tenth = (self.latencies.len() / 10).max(1);
        let first = &self.latencies[..tenth.min(self.latencies.len())];
        let last = &self.latencies[self.latencies.len().saturating_sub(tenth)..];
        (mean_ms(first), mean_ms(last))
    }
}

fn mean_ms(latencies: &[Duration]) -> f64 {
    if latencies.is_empty() {
        return 0.0;
    }
    latencies.iter().sum::<Duration>().as_secs_f64() * 1e3 / latencies.len() as f64
}

// ---------------------------------------------------------------------------------------------
// The servers.

/// bernstein-mcp on the embedded store.
struct OurServer<'a> {
    /// The label of its rows: "ours", or [`BASELINE_LABEL`] for another build.
    name: &'a str,
    binary: &'a Path,
    key: &'a Path,
    scratch: &'a Path,
}

impl OurServer<'_> {
    fn command(&self, project: &Path, meter: bool, log: &Path) -> anyhow::Result<Command> {
        let mut command = Command::new(self.binary);
        command
            .arg("--workdir")
            .arg(project)
            .arg("--key-file")
            .arg(self.key)
            .stderr(File::create(log)?);
        for name in OUR_ENVIRONMENT {
            command.env_remove(name);
        }
        if !meter {
            command.env("BERNSTEIN_MCP_COST_METER", "0");
        }
        Ok(command)
    }

    /// A fresh project per series: the anchoring journal starts empty for every one of them.
    fn fresh_project(&self, name: &str) -> anyhow::Result<PathBuf> {
        let project = self.scratch.join(name);
        std::fs::create_dir_all(project.join(".sdd"))?;
        Ok(project)
    }

    /// `bernstein_run_status` with [`PIPELINE_DEPTH`] calls in flight, anchoring and meter on.
    fn measure_pipelined(&self, calls: usize) -> anyhow::Result<Pipelined> {
        let project = self.fresh_project("ours-pipelined")?;
        let log = self.scratch.join("ours-pipelined.log");
        let (mut server, _) = StdioServer::start(self.command(&project, true, &log)?)?;
        let run_id = create_run_with_journal(&mut server, &project)?;
        let pipelined = server.pipeline(
            "ours",
            "bernstein_run_status",
            &json!({"run_id": run_id}),
            calls,
        )?;
        server.finish()?;
        Ok(pipelined)
    }

    fn measure(&self, meter: bool, counts: CallCounts) -> anyhow::Result<Vec<Row>> {
        let name = self.name;
        let label = if meter {
            name.to_owned()
        } else {
            format!("{name} (meter off)")
        };
        let label = label.as_str();
        let suffix = if meter { "" } else { "-meter-off" };
        let log = self.scratch.join(format!("{name}{suffix}.log"));

        let project = self.fresh_project(&format!("{name}-run-status{suffix}"))?;
        let spawn = || self.command(&project, meter, &log);
        let (mut server, _) = StdioServer::start(spawn()?)?;
        let run_id = create_run_with_journal(&mut server, &project)?;
        server.finish()?;
        let cold_start = median_cold_start(&spawn, COLD_STARTS)?;
        let mut rows = vec![measure_series(
            spawn()?,
            label,
            "bernstein_run_status",
            json!({"run_id": run_id}),
            counts.run_status,
            cold_start,
            true,
        )?];

        let project = self.fresh_project(&format!("{name}-status{suffix}"))?;
        let spawn = || self.command(&project, meter, &log);
        let (mut server, _) = StdioServer::start(spawn()?)?;
        create_run(&mut server)?;
        server.finish()?;
        rows.push(measure_series(
            spawn()?,
            label,
            "bernstein_status",
            json!({}),
            counts.status,
            cold_start,
            true,
        )?);
        Ok(rows)
    }
}

/// The reference's stdio server and the task server it fronts.
struct Reference {
    cli: PathBuf,
}

impl Reference {
    fn locate(python: Option<&Path>) -> Option<Reference> {
        let cli = python?.with_file_name("bernstein");
        cli.exists().then_some(Reference { cli })
    }

    fn measure(
        &self,
        scratch: &Path,
        key: &Path,
        counts: CallCounts,
    ) -> anyhow::Result<(Vec<Row>, Pipelined)> {
        let project = scratch.join("reference");
        std::fs::create_dir_all(project.join(".sdd"))?;
        // Keep the reference's start-up key handling inside the scratch directory.
        let state_home = scratch.join("state");
        let task_server = TaskServer::start(&self.cli, &project, key, &state_home, scratch)?;
        let log = scratch.join("reference-mcp.log");
        let spawn = || -> anyhow::Result<Command> {
            let mut command = Command::new(&self.cli);
            command
                .args(["mcp", "--server-url", &task_server.url()])
                .current_dir(&project)
                .env("BERNSTEIN_AUTH_TOKEN", TASK_SERVER_TOKEN)
                .env("BERNSTEIN_AUDIT_KEY_PATH", key)
                .env("XDG_STATE_HOME", &state_home)
                .env_remove("BERNSTEIN_SERVER_URL")
                .env_remove("BERNSTEIN_MCP_COST_METER")
                .env_remove("BERNSTEIN_MCP_TOOL_TIER")
                .stderr(File::create(&log)?);
            Ok(command)
        };
        eprintln!(
            "bench stdio: reference task server on {}",
            task_server.url()
        );
        let (mut server, _) = StdioServer::start(spawn()?)?;
        let run_id = create_run_with_journal(&mut server, &project)?;
        server.finish()?;
        let cold_start = median_cold_start(&spawn, REFERENCE_COLD_STARTS)?;
        let mut rows = Vec::new();
        for (tool, arguments, calls) in [
            (
                "bernstein_run_status",
                json!({"run_id": run_id}),
                counts.run_status,
            ),
            ("bernstein_status", json!({}), counts.status),
        ] {
            rows.push(measure_series(
                spawn()?,
                "reference",
                tool,
                arguments,
                calls,
                cold_start,
                false,
            )?);
        }
        let (mut server, _) = StdioServer::start(spawn()?)?;
        let pipelined = server.pipeline(
            "reference",
            "bernstein_run_status",
            &json!({"run_id": run_id}),
            counts.run_status,
        )?;
        server.finish()?;
        drop(task_server);
        Ok((rows, pipelined))
    }
}

/// `bernstein serve` on a free loopback port, stopped when dropped.
pub(crate) struct TaskServer {
    child: ChildGuard,
    port: u16,
}

impl TaskServer {
    pub(crate) fn start(
        cli: &Path,
        project: &Path,
        key: &Path,
        state_home: &Path,
        scratch: &Path,
    ) -> anyhow::Result<TaskServer> {
        // Ask the kernel for a free port, then hand it to the server.
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = ChildGuard::spawn(
            Command::new(cli)
                .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
                .current_dir(project)
                .env("BERNSTEIN_AUTH_TOKEN", TASK_SERVER_TOKEN)
                .env("BERNSTEIN_AUDIT_KEY_PATH", key)
                .env("XDG_STATE_HOME", state_home)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(File::create(scratch.join("reference-serve.log"))?),
        )
        .context("start bernstein serve")?;
        let mut server = TaskServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "bernstein serve did not start within 60 s"
            );
            ensure!(
                server.child.running(),
                "bernstein serve exited early (see reference-serve.log)"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(server)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

fn measure_rmcp(binary: &Path, scratch: &Path, counts: CallCounts) -> anyhow::Result<Row> {
    let log = scratch.join("rmcp-baseline.log");
    let spawn = || -> anyhow::Result<Command> {
        let mut command = Command::new(binary);
        command.stderr(File::create(&log)?);
        Ok(command)
    };
    let cold_start = median_cold_start(&spawn, COLD_STARTS)?;
    measure_series(
        spawn()?,
        "rmcp 3.11 bare",
        "add",
        json!({"a": 20, "b": 22}),
        counts.run_status,
        cold_start,
        false,
    )
}

fn measure_rmcp_pipelined(
    binary: &Path,
    scratch: &Path,
    calls: usize,
) -> anyhow::Result<Pipelined> {
    let mut command = Command::new(binary);
    command.stderr(File::create(scratch.join("rmcp-baseline-pipelined.log"))?);
    let (mut server, _) = StdioServer::start(command)?;
    let pipelined = server.pipeline("rmcp 3.11 bare", "add", &json!({"a": 20, "b": 22}), calls)?;
    server.finish()?;
    Ok(pipelined)
}

/// Creates a run through the server's own `bernstein_run` and returns its run id.
pub(crate) fn create_run(server: &mut StdioServer) -> anyhow::Result<String> {
    let answer = server.call_tool("bernstein_run", json!({"goal": "stdio benchmark run"}))?;
    let payload = tool_payload(&answer)?;
    payload
        .get("run_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .with_context(|| format!("bernstein_run returned no run_id: {answer}"))
}

/// Creates a run, then gives it the same three-row journal on every server, and checks the
/// server projects a handle from that journal.
pub(crate) fn create_run_with_journal(
    server: &mut StdioServer,
    project: &Path,
) -> anyhow::Result<String> {
    let run_id = create_run(server)?;
    let task_id = run_id.strip_prefix("task-").unwrap_or(&run_id).to_owned();
    let mut journal = JournalWriter::open(project, &run_id, HashProfile::PyJsonV1)?;
    journal.append(
        "task_claimed",
        &Object::new()
            .with("task_id", task_id.as_str())
            .with("claimed_by", "bench-worker"),
    )?;
    journal.append(
        "task_progress",
        &Object::new()
            .with("task_id", task_id.as_str())
            .with("fraction", 0.5),
    )?;
    journal.append(
        "task_completed",
        &Object::new()
            .with("task_id", task_id.as_str())
            .with("result_summary", "benchmark fixture"),
    )?;
    let answer = server.call_tool("bernstein_run_status", json!({"run_id": run_id}))?;
    let handle = tool_payload(&answer)?;
    ensure!(
        handle
            .get("journalHead")
            .and_then(Value::as_str)
            .is_some_and(|head| !head.is_empty()),
        "bernstein_run_status did not read the run journal of {run_id}: {answer}"
    );
    Ok(run_id)
}

// ---------------------------------------------------------------------------------------------
// Measuring.

/// Cold start of `runs` fresh processes (spawn to the `initialize` answer); the median.
pub(crate) fn median_cold_start(
    spawn: &dyn Fn() -> anyhow::Result<Command>,
    runs: usize,
) -> anyhow::Result<Duration> {
    let mut starts = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (server, cold_start) = StdioServer::start(spawn()?)?;
        server.finish()?;
        starts.push(cold_start);
    }
    starts.sort();
    starts
        .get(starts.len() / 2)
        .copied()
        .context("no cold start was measured")
}

/// Starts a server, warms it up, then times `calls` sequential calls of `tool`.
fn measure_series(
    command: Command,
    server_label: &str,
    tool: &str,
    arguments: Value,
    calls: usize,
    cold_start: Duration,
    anchoring: bool,
) -> anyhow::Result<Row> {
    eprintln!("bench stdio: {server_label} {tool} x{calls}");
    let (mut server, _) = StdioServer::start(command)?;
    let idle_rss_kib = server.rss_kib();
    for _ in 0..WARM_UP_CALLS {
        let answer = server.call_tool(tool, arguments.clone())?;
        tool_payload(&answer).with_context(|| format!("{server_label} {tool}"))?;
    }
    let mut latencies = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (answer, latency) = server.call_tool_timed(tool, arguments.clone())?;
        latencies.push(latency);
        tool_payload(&answer).with_context(|| format!("{server_label} {tool}"))?;
    }
    let peak_rss_kib = server.peak_rss_kib();
    server.finish()?;
    Ok(Row {
        server: server_label.to_owned(),
        tool: tool.to_owned(),
        anchoring,
        latencies,
        cold_start,
        peak_rss_kib,
        idle_rss_kib,
    })
}

/// The payload of a successful tool result: `structuredContent` (or the JSON in the first text
/// block), unwrapped from the `_meter` envelope. An `isError` result or a payload carrying an
/// `error` is a failure, so an outage can never be timed as a fast call.
pub(crate) fn tool_payload(result: &Value) -> anyhow::Result<Value> {
    ensure!(
        result.get("isError").and_then(Value::as_bool) != Some(true),
        "the tool answered isError: {result}"
    );
    let payload = match result.get("structuredContent") {
        Some(structured) => structured.clone(),
        None => result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .and_then(|text| serde_json::from_str(text).ok())
            .with_context(|| format!("the tool answered no JSON payload: {result}"))?,
    };
    let payload = match payload.get("result") {
        Some(inner) if payload.get("_meter").is_some() => inner.clone(),
        _ => payload,
    };
    ensure!(
        payload.get("error").is_none(),
        "the tool answered an error payload: {payload}"
    );
    Ok(payload)
}

// ---------------------------------------------------------------------------------------------
// The client.

/// A server process spoken to over newline-delimited JSON-RPC on its stdin and stdout.
pub(crate) struct StdioServer {
    child: Arc<Mutex<ChildGuard>>,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
    line: String,
    // Dropping the sender stops the watchdog thread.
    _watchdog: mpsc::Sender<()>,
}

impl StdioServer {
    /// Spawns the server and completes the `initialize` handshake; returns the server and the
    /// time from spawning to the `initialize` answer.
    pub(crate) fn start(mut command: Command) -> anyhow::Result<(StdioServer, Duration)> {
        let started = Instant::now();
        let mut child = ChildGuard::spawn(command.stdin(Stdio::piped()).stdout(Stdio::piped()))?;
        let pid = child.id();
        let stdin = child.child().stdin.take().context("no stdin pipe")?;
        let stdout = child.child().stdout.take().context("no stdout pipe")?;
        let child = Arc::new(Mutex::new(child));
        let (watchdog, stop) = mpsc::channel::<()>();
        let watched = Arc::clone(&child);
        std::thread::spawn(move || {
            if stop.recv_timeout(WATCHDOG) == Err(mpsc::RecvTimeoutError::Timeout) {
                eprintln!("bench stdio: server {pid} ran past {WATCHDOG:?}; killing it");
                let _ = watched.lock().map(|mut child| child.child().kill());
            }
        });
        let mut server = StdioServer {
            child,
            pid,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            next_id: 1,
            line: String::new(),
            _watchdog: watchdog,
        };
        server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bernstein-bench", "version": "1"},
            }),
        )?;
        let cold_start = started.elapsed();
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok((server, cold_start))
    }

    fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        let mut bytes = serde_json::to_vec(message)?;
        bytes.push(b'\n');
        stdin
            .write_all(&bytes)
            .and_then(|()| stdin.flush())
            .context("the server closed its stdin")
    }

    /// Sends one request and waits for its answer, skipping notifications; returns `result`.
    fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.request_timed(method, params).map(|(result, _)| result)
    }

    /// [`StdioServer::request`], also returning the time from just before the request was
    /// written to the moment the answer's last byte was read. The answer is parsed after the
    /// clock stops: xtask is a debug build, and its JSON parse of a large answer (a claim
    /// receipt carrying a 1,000-row snapshot is about 470 KB) would otherwise be timed as the
    /// server's latency.
    fn request_timed(&mut self, method: &str, params: Value) -> anyhow::Result<(Value, Duration)> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let started = Instant::now();
        self.send(&request)?;
        loop {
            self.line.clear();
            let read = self.stdout.read_line(&mut self.line)?;
            let answered = started.elapsed();
            ensure!(
                read > 0,
                "the server closed stdout before answering {method}"
            );
            let mut message: Value = serde_json::from_str(&self.line)
                .with_context(|| format!("not JSON-RPC: {}", self.line.trim_end()))?;
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("{method} answered a JSON-RPC error: {error}");
            }
            let result = message
                .get_mut("result")
                .map(Value::take)
                .with_context(|| format!("{method} answered without a result: {message}"))?;
            return Ok((result, answered));
        }
    }

    /// Calls `name` `calls` times with [`PIPELINE_DEPTH`] requests in flight: a new request
    /// goes out as soon as an answer comes in. Every answer is checked.
    pub(crate) fn pipeline(
        &mut self,
        server: &str,
        name: &str,
        arguments: &Value,
        calls: usize,
    ) -> anyhow::Result<Pipelined> {
        for _ in 0..WARM_UP_CALLS {
            tool_payload(&self.call_tool(name, arguments.clone())?)?;
        }
        let mut in_flight = std::collections::HashMap::new();
        let mut latencies = Vec::with_capacity(calls);
        let mut sent = 0;
        let started = Instant::now();
        while latencies.len() < calls {
            while sent < calls && in_flight.len() < PIPELINE_DEPTH {
                let id = self.next_id;
                self.next_id += 1;
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": name, "arguments": arguments}}))?;
                in_flight.insert(id, Instant::now());
                sent += 1;
            }
            self.line.clear();
            ensure!(
                self.stdout.read_line(&mut self.line)? > 0,
                "the server closed stdout with {} calls in flight",
                in_flight.len()
            );
            // The clock stops at the read, before the debug build's parse of the answer.
            let answered_at = Instant::now();
            let message: Value = serde_json::from_str(&self.line)
                .with_context(|| format!("not JSON-RPC: {}", self.line.trim_end()))?;
            let Some(sent_at) = message
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| in_flight.remove(&id))
            else {
                continue;
            };
            latencies.push(answered_at.duration_since(sent_at));
            if let Some(error) = message.get("error") {
                bail!("{name} answered a JSON-RPC error: {error}");
            }
            tool_payload(
                message
                    .get("result")
                    .context("an answer without a result")?,
            )?;
        }
        Ok(Pipelined {
            server: server.to_owned(),
            tool: name.to_owned(),
            latencies,
            wall: started.elapsed(),
        })
    }

    pub(crate) fn call_tool(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// [`StdioServer::call_tool`] with its latency: from just before the request was written
    /// to the read of the answer's last byte, the answer's parse not included.
    pub(crate) fn call_tool_timed(
        &mut self,
        name: &str,
        arguments: Value,
    ) -> anyhow::Result<(Value, Duration)> {
        self.request_timed("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// The process's peak resident set so far, from `/proc` (Linux only).
    pub(crate) fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid, "VmHWM:")
    }

    /// The process's resident set now.
    pub(crate) fn rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid, "VmRSS:")
    }

    /// Closes stdin and waits for the process to exit, killing it after a grace period. The
    /// exit status is not judged: the reference's CLI exits 1 when its stdin closes.
    pub(crate) fn finish(mut self) -> anyhow::Result<()> {
        self.stdin = None;
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            let mut child = self.child.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            if child.child().try_wait()?.is_some() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                child.child().kill()?;
                child.child().wait()?;
                bail!(
                    "server {} did not exit within {EXIT_GRACE:?} of EOF",
                    self.pid
                );
            }
            drop(child);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A `kB` field of `/proc/<pid>/status` (Linux only).
pub(crate) fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

// ---------------------------------------------------------------------------------------------
// The report.

pub(crate) fn render_report(rows: &[Row]) -> String {
    let mut out = String::from(
        "\nstdio: sequential tools/call over stdio, one answer awaited before the next request\n\n",
    );
    out.push_str(&format!(
        "{:<18} {:<21} {:<9} {:>6} {:>9} {:>8} {:>8} {:>17} {:>9} {:>8}\n",
        "server",
        "tool",
        "anchoring",
        "calls",
        "calls/s",
        "mean ms",
        "p99 ms",
        "first/last10% ms",
        "cold ms",
        "RSS MiB"
    ));
    for row in rows {
        let (first, last) = row.first_and_last_tenth_ms();
        out.push_str(&format!(
            "{:<18} {:<21} {:<9} {:>6} {:>9.1} {:>8.3} {:>8.3} {:>17} {:>9.1} {:>8}\n",
            row.server,
            row.tool,
            if row.anchoring { "on" } else { "none" },
            row.latencies.len(),
            row.calls_per_second(),
            row.mean_ms(),
            row.p99_ms(),
            format!("{first:.3}/{last:.3}"),
            row.cold_start.as_secs_f64() * 1e3,
            row.peak_rss_kib.map_or_else(
                || "-".to_owned(),
                |kib| format!("{:.1}", kib as f64 / 1024.0)
            ),
        ));
    }
    let find = |server: &str, tool: &str| {
        rows.iter()
            .find(|row| row.server == server && row.tool == tool)
    };
    let rmcp = rows.iter().find(|row| row.tool == "add");
    out.push_str("\nratios (calls/s: above 1 means ours is faster; cold start: below 1 means ours starts faster)\n");
    for tool in ["bernstein_run_status", "bernstein_status"] {
        let Some(ours) = find("ours", tool) else {
            continue;
        };
        if let Some(baseline) = find(BASELINE_LABEL, tool) {
            out.push_str(&format!(
                "  {tool:<21} ours/baseline calls/s  {:>8.2}x (p50 {:.3} ms against {:.3} ms)\n",
                ours.calls_per_second() / baseline.calls_per_second(),
                crate::bench_scale::percentile_ms(&ours.latencies, 50),
                crate::bench_scale::percentile_ms(&baseline.latencies, 50),
            ));
        }
        match find("reference", tool) {
            Some(reference) => out.push_str(&format!(
                "  {tool:<21} ours/reference calls/s {:>8.2}x\n",
                ours.calls_per_second() / reference.calls_per_second()
            )),
            None => out.push_str(&format!(
                "  {tool:<21} ours/reference calls/s        - (reference not measured)\n"
            )),
        }
        if let Some(rmcp) = rmcp {
            out.push_str(&format!(
                "  {tool:<21} ours/rmcp add calls/s  {:>8.2}x\n",
                ours.calls_per_second() / rmcp.calls_per_second()
            ));
        }
    }
    if let Some(ours) = rows.iter().find(|row| row.server == "ours") {
        let cold = ours.cold_start.as_secs_f64();
        if let Some(reference) = rows.iter().find(|row| row.server == "reference") {
            out.push_str(&format!(
                "  cold start            ours/reference         {:>8.3}x\n",
                cold / reference.cold_start.as_secs_f64()
            ));
        }
        if let Some(rmcp) = rmcp {
            out.push_str(&format!(
                "  cold start            ours/rmcp              {:>8.2}x\n",
                cold / rmcp.cold_start.as_secs_f64()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(server: &str, tool: &str, millis: &[u64], cold_ms: u64) -> Row {
        Row {
            server: server.to_owned(),
            tool: tool.to_owned(),
            anchoring: server == "ours",
            latencies: millis.iter().map(|ms| Duration::from_millis(*ms)).collect(),
            cold_start: Duration::from_millis(cold_ms),
            peak_rss_kib: Some(10 * 1024),
            idle_rss_kib: Some(5 * 1024),
        }
    }

    #[test]
    fn call_counts_come_from_flags_or_defaults() {
        let check = |args: &[&str], expect: Option<CallCounts>| {
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            assert_eq!(CallCounts::parse(&args).ok(), expect, "{args:?}");
        };
        let counts = |run_status, status| Some(CallCounts { run_status, status });
        check(&[], counts(DEFAULT_CALLS, DEFAULT_STATUS_CALLS));
        check(&["--calls", "50"], counts(50, DEFAULT_STATUS_CALLS));
        check(&["--status-calls", "7", "--calls", "9"], counts(9, 7));
        check(&["--calls"], None);
        check(&["--calls", "0"], None);
        check(&["--calls", "x"], None);
        check(&["--fast"], None);
    }

    #[test]
    fn statistics_of_a_series() {
        let series = row("ours", "t", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 5);
        assert!((series.calls_per_second() - 10.0 / 0.055).abs() < 1e-6);
        assert!((series.mean_ms() - 5.5).abs() < 1e-9);
        assert!((series.p99_ms() - 10.0).abs() < 1e-9);
        assert_eq!(series.first_and_last_tenth_ms(), (1.0, 10.0));
        let hundred: Vec<u64> = (1..=100).collect();
        let series = row("ours", "t", &hundred, 5);
        assert!((series.p99_ms() - 99.0).abs() < 1e-9);
        assert_eq!(series.first_and_last_tenth_ms(), (5.5, 95.5));
    }

    #[test]
    fn tool_payloads_unwrap_the_meter_and_refuse_errors() {
        let check = |result: Value, expect: Option<Value>| {
            assert_eq!(tool_payload(&result).ok(), expect, "{result}");
        };
        check(
            json!({"structuredContent": {"_meter": {}, "result": {"live": true}}}),
            Some(json!({"live": true})),
        );
        check(
            json!({"structuredContent": {"sum": 3}, "isError": false}),
            Some(json!({"sum": 3})),
        );
        check(
            json!({"content": [{"type": "text", "text": "{\"status\": \"working\"}"}]}),
            Some(json!({"status": "working"})),
        );
        check(
            json!({"structuredContent": {"_meter": {}, "result": {"live": true, "error": "down"}}}),
            None,
        );
        check(
            json!({"structuredContent": {"sum": 3}, "isError": true}),
            None,
        );
        check(
            json!({"content": [{"type": "text", "text": "not json"}]}),
            None,
        );
    }

    #[test]
    fn the_report_shows_every_row_and_the_ratios() {
        let rows = [
            row("ours", "bernstein_run_status", &[1, 1], 4),
            row("reference", "bernstein_run_status", &[4, 4], 3400),
            row("ours", "bernstein_status", &[2, 2], 4),
            row("rmcp 3.11 bare", "add", &[1, 1], 2),
        ];
        let report = render_report(&rows);
        assert_eq!(
            report.lines().filter(|l| l.contains("bernstein_")).count(),
            7
        );
        assert!(
            report.contains("ours/reference calls/s     4.00x"),
            "{report}"
        );
        assert!(report.contains("ours/reference calls/s        - (reference not measured)"));
        assert!(
            report.contains("ours/rmcp add calls/s      0.50x"),
            "{report}"
        );
        assert!(report.contains("cold start            ours/reference            0.001x"));
        assert!(report.contains("cold start            ours/rmcp                  2.00x"));
    }

    #[test]
    fn a_server_that_exits_without_answering_is_an_error() {
        let mut command = Command::new("sh");
        command.args(["-c", "read line; exit 0"]);
        let err = StdioServer::start(command).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("the server closed stdout before answering initialize")
        );
    }

    #[test]
    fn the_client_skips_notifications_and_matches_ids() {
        // A shell "server" that answers initialize, then a tool call preceded by a progress
        // notification and by a stale answer to another id.
        let script = r#"
read init
echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}'
read initialized
read call
echo '{"jsonrpc":"2.0","method":"notifications/progress","params":{}}'
echo '{"jsonrpc":"2.0","id":99,"result":{}}'
echo '{"jsonrpc":"2.0","id":2,"result":{"structuredContent":{"sum":3}}}'
read call
echo '{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}'
"#;
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        let (mut server, _cold_start) = StdioServer::start(command).unwrap();
        let answer = server.call_tool("add", json!({"a": 1, "b": 2})).unwrap();
        assert_eq!(tool_payload(&answer).unwrap(), json!({"sum": 3}));
        let err = server.call_tool("add", json!({})).unwrap_err().to_string();
        assert!(err.contains("-32602"), "{err}");
        server.finish().unwrap();
    }
}
