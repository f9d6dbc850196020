//! `cargo xtask interop loop`: the worker loop end to end over stdio, driven by a real client.
//!
//! `mcp-py-client` (Python SDK 2.3.0, `auto` mode) drives the `bernstein-mcp` binary through
//! one loop: `bernstein_run` → `bernstein_claim` (a worker with the task's role) →
//! `bernstein_post_message` → `bernstein_post_artifact` (a report posted by the claimer) →
//! `bernstein_complete` → `bernstein_run_status`. Then the evidence the loop left is checked
//! offline four ways: the reference's `verify_dir.py` (with the claim receipt and the run
//! handle the tools returned, envelope stripped), our `bernstein-mcp verify`, our
//! `bernstein-mcp journal handle RUN --verify` on the handle, and our
//! `bernstein-mcp audit calls mcp-calls` (the call order rebuilt from the chain alone).
//!
//! The reference's handle check `verify_handle_chain_head` compares a handle with the chain's
//! current head, so a handle of ours, whose `chainHead` is the run's own head (its seal once it
//! ended), fails it as soon as anything else is appended: that one check is a documented
//! departure (ARCHITECTURE, "Run handles"). Every other reference check must pass, and our own
//! `--verify` must accept the handle.
//!
//! The loop runs twice: on the embedded task store and through the remote backend against a
//! live `bernstein serve` sharing the project and its audit key; both must end `completed`,
//! because this server journals and seals the transitions it performs on either backend. The
//! second run reports every step whose observation differs from the first.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::Value;

use crate::interop::Oracle;
use crate::interop_clients::{claim_step, run_step_with, worker_steps};
use crate::interop_drivers::{
    Client, ClientKit, HttpServer, Project, Running, Server, Transcript, brief, exit_zero, tail,
    verify_project,
};

/// The role of the run's task, which the worker claims by.
const ROLE: &str = "backend";

/// The bearer the live task server requires, and our remote backend sends.
const TOKEN: &str = "interop-loop-token";

/// The client that drives the loop: the Python SDK, discovering 2026-07-28.
const CLIENT: Client = Client::Python("auto");

/// Both loops, their evidence checks, and the differences between them.
pub(crate) fn run(
    oracle: &Oracle,
    kit: &ClientKit,
    binary: &Path,
    scratch: &Path,
    http: bool,
) -> anyhow::Result<()> {
    let dir = scratch.join("loop-embedded");
    let project = Project::create(&dir)?;
    let (_listener, server) = reach(Server::bernstein_mcp(binary, &project), http, &dir)?;
    let embedded = worker_loop(
        kit,
        &server,
        Some("completed"),
        oracle,
        binary,
        &project,
        &dir,
    );
    let wire = if http {
        "over http+bearer"
    } else {
        "over stdio"
    };
    report(&format!("embedded {wire}"), &embedded);

    let dir = scratch.join("loop-remote");
    let project = Project::create(&dir)?;
    let remote = {
        let serve = LiveServe::start(oracle, &project, &dir)?;
        let mut server = Server::bernstein_mcp(binary, &project);
        server.args.extend(["--server-url".to_owned(), serve.url()]);
        server
            .env
            .push(("BERNSTEIN_AUTH_TOKEN".to_owned(), TOKEN.to_owned()));
        let (_listener, server) = reach(server, http, &dir)?;
        let remote = worker_loop(kit, &server, None, oracle, binary, &project, &dir);
        if remote.passed() != remote.verdicts.len() {
            eprintln!(
                "interop: loop remote: bernstein serve log tail:\n{}",
                tail(
                    &std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default(),
                    15
                )
            );
        }
        remote
    };
    report(&format!("remote {wire}"), &remote);
    explain_run_status(&project, &remote);

    let mut differing = 0;
    for (ours, theirs) in embedded.verdicts.iter().zip(&remote.verdicts) {
        if ours.outcome != theirs.outcome {
            differing += 1;
            eprintln!(
                "interop: loop remote differs at {}: embedded {}, remote {}",
                ours.label,
                headline(&ours.outcome),
                headline(&theirs.outcome)
            );
        }
    }
    if differing == 0 {
        eprintln!("interop: loop remote: every step observed as on the embedded store");
    }

    let mut failed = Vec::new();
    if embedded.passed() != embedded.verdicts.len() {
        failed.push("embedded");
    }
    if remote.passed() != remote.verdicts.len() {
        failed.push("remote");
    }
    if !failed.is_empty() {
        bail!("the worker loop failed on: {}", failed.join(", "));
    }
    Ok(())
}

/// The bearer the MCP server requires when the loop runs over HTTP.
const MCP_BEARER: &str = "interop-loop-mcp-bearer";

/// `server` as the loop's client reaches it: itself over stdio, or, with `http`, a
/// `--transport http` listener started from it that requires [`MCP_BEARER`] (logging to
/// `dir/mcp-http.log`), kept running as long as the returned guard lives.
fn reach(server: Server, http: bool, dir: &Path) -> anyhow::Result<(Option<HttpServer>, Server)> {
    if !http {
        return Ok((None, server));
    }
    let (listener, server) =
        server.over_http(Some(MCP_BEARER), false, &dir.join("mcp-http.log"))?;
    Ok((Some(listener), server))
}

/// One worker loop through `server`, then the offline checks of the project it wrote. The
/// claim receipt is also checked by the reference right after the claim, before anything else
/// can touch the backlog it was issued over.
fn worker_loop(
    kit: &ClientKit,
    server: &Server,
    expected_status: Option<&'static str>,
    oracle: &Oracle,
    binary: &Path,
    project: &Project,
    dir: &Path,
) -> Transcript {
    let mut transcript = Transcript::default();
    transcript.run(CLIENT, kit, server, &[run_step_with(ROLE)]);
    let (Some(task_id), Some(run_id)) = (
        transcript.text("run", "task_id"),
        transcript.text("run", "run_id"),
    ) else {
        transcript.note(
            "worker loop",
            Err("bernstein_run returned no ids".to_owned()),
        );
        return transcript;
    };
    transcript.run(
        CLIENT,
        kit,
        server,
        &[claim_step(Some(task_id.clone()), ROLE)],
    );
    let receipts: Vec<PathBuf> = write_payload(&mut transcript, "claim", dir, "receipt.json")
        .into_iter()
        .collect();
    transcript.note(
        "reference verify_dir.py, receipt right after the claim",
        reference_verdict(oracle, project, &receipts, &[]),
    );
    transcript.run(
        CLIENT,
        kit,
        server,
        &worker_steps(&task_id, &run_id, expected_status),
    );
    let handles: Vec<PathBuf> = write_payload(&mut transcript, "run_status", dir, "handle.json")
        .into_iter()
        .collect();
    transcript.note(
        "reference verify_dir.py, after the loop",
        reference_verdict(oracle, project, &receipts, &handles),
    );
    transcript.note(
        "bernstein-mcp verify",
        verify_project(binary, project, &receipts),
    );
    for handle in &handles {
        let mut verify_handle = Command::new(binary);
        verify_handle
            .args(["journal", "handle", &run_id, "--verify", "--workdir"])
            .arg(&project.root)
            .arg("--key-file")
            .arg(&project.key)
            .arg("--handle")
            .arg(handle);
        transcript.note(
            "bernstein-mcp journal handle --verify",
            exit_zero(&mut verify_handle, "bernstein-mcp journal handle --verify"),
        );
    }
    let mut calls = Command::new(binary);
    calls
        .args(["audit", "calls", "mcp-calls", "--workdir"])
        .arg(&project.root)
        .arg("--key-file")
        .arg(&project.key);
    transcript.note(
        "bernstein-mcp audit calls mcp-calls",
        exit_zero(&mut calls, "bernstein-mcp audit calls"),
    );
    transcript
}

/// Writes the payload a step returned (its envelope already stripped) to `dir/name`, for the
/// offline verifiers; `None` when the step failed or the file cannot be written.
fn write_payload(
    transcript: &mut Transcript,
    key: &str,
    dir: &Path,
    name: &str,
) -> Option<PathBuf> {
    let payload = transcript.payloads.get(key)?;
    let path = dir.join(name);
    match std::fs::write(&path, payload.to_string()) {
        Ok(()) => Some(path),
        Err(err) => {
            transcript.note(
                format!("write {name}"),
                Err(format!("cannot write {}: {err}", path.display())),
            );
            None
        }
    }
}

/// Runs `verify_dir.py` and requires exit 0 with every section ok and every receipt and handle
/// given actually checked.
fn reference_verdict(
    oracle: &Oracle,
    project: &Project,
    receipts: &[PathBuf],
    handles: &[PathBuf],
) -> Result<String, String> {
    let mut command = Command::new(&oracle.python);
    command
        .arg(&oracle.verify_dir)
        .arg(&project.root)
        .arg("--key-file")
        .arg(&project.key);
    for receipt in receipts {
        command.arg("--receipt").arg(receipt);
    }
    for handle in handles {
        command.arg("--handle").arg(handle);
    }
    let finished = Running::spawn(&mut command, Duration::from_secs(120))
        .map_err(|err| format!("cannot run verify_dir.py: {err:#}"))?
        .finish();
    let report: Value = serde_json::from_str(&finished.stdout).map_err(|_| {
        format!(
            "verify_dir.py printed no JSON ({}): {}",
            finished.describe_exit(),
            tail(&finished.stderr, 10)
        )
    })?;
    let sections: Vec<(&String, bool)> = report
        .as_object()
        .map(|object| {
            object
                .iter()
                .filter_map(|(name, section)| {
                    let ok = section.get("ok")?.as_bool()?;
                    Some((name, ok))
                })
                .collect()
        })
        .unwrap_or_default();
    let departs_on_chain_head = report
        .get("handles")
        .is_some_and(handles_depart_only_on_the_chain_head);
    let failing: Vec<String> = sections
        .iter()
        .filter(|(name, ok)| !(*ok || name.as_str() == "handles" && departs_on_chain_head))
        .map(|(name, _)| format!("{name}: {}", brief(&report[name.as_str()])))
        .collect();
    let counted = |section: &str, list: &str| {
        report
            .pointer(&format!("/{section}/{list}"))
            .and_then(Value::as_object)
            .map_or(0, serde_json::Map::len)
    };
    let checked_receipts = counted("receipts", "receipts");
    let checked_handles = counted("handles", "handles");
    // verify_dir.py exits 1 for the chain-head departure alone; that exit is accepted only
    // when every failing check is that one.
    let exit_accepted = finished.succeeded() || (departs_on_chain_head && failing.is_empty());
    if !exit_accepted || !failing.is_empty() {
        return Err(format!(
            "verify_dir.py {}: {}",
            finished.describe_exit(),
            failing.join("; ")
        ));
    }
    if checked_receipts != receipts.len() || checked_handles != handles.len() {
        return Err(format!(
            "verify_dir.py checked {checked_receipts} of {} receipts and {checked_handles} of {} handles",
            receipts.len(),
            handles.len()
        ));
    }
    let departure = if departs_on_chain_head {
        " (verify_handle_chain_head departs by design: the handle carries the run's own head)"
    } else {
        ""
    };
    Ok(format!(
        "{}, {} sections ok, receipts checked: {checked_receipts}, handles checked: {checked_handles}{departure}",
        finished.describe_exit(),
        sections.iter().filter(|(_, ok)| *ok).count()
    ))
}

/// Whether every handle the reference checked passed everything but `verify_handle_chain_head`
/// (the current-chain-head comparison our per-run chain head departs from on purpose).
fn handles_depart_only_on_the_chain_head(section: &Value) -> bool {
    let Some(handles) = section.get("handles").and_then(Value::as_object) else {
        return false;
    };
    !handles.is_empty()
        && handles.values().all(|handle| {
            handle.get("receipt_hash_matches_wire") == Some(&Value::Bool(true))
                && handle.pointer("/verify_handle/0") == Some(&Value::Bool(true))
        })
}

/// The first line of an outcome, cut short: the full text was already reported.
fn headline(outcome: &Result<String, String>) -> String {
    let full = describe(outcome);
    let first = full.lines().next().unwrap_or_default();
    match first.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &first[..cut]),
        None => first.to_owned(),
    }
}

fn describe(outcome: &Result<String, String>) -> String {
    match outcome {
        Ok(observed) => format!("ok ({observed})"),
        Err(why) => format!("FAILED ({why})"),
    }
}

/// One line per step, then the total.
fn report(backend: &str, transcript: &Transcript) {
    for verdict in &transcript.verdicts {
        eprintln!(
            "interop: loop {backend} {}: {}",
            verdict.label,
            describe(&verdict.outcome)
        );
    }
    eprintln!(
        "interop: loop {backend}: {}/{} ok",
        transcript.passed(),
        transcript.verdicts.len()
    );
}

/// When the remote run status is not `completed`, says what the run journal holds, so the
/// report names the cause rather than only the symptom.
fn explain_run_status(project: &Project, remote: &Transcript) {
    let Some(status) = remote.text("run_status", "status") else {
        return;
    };
    if status == "completed" {
        return;
    }
    let Some(run_id) = remote.text("run", "run_id") else {
        return;
    };
    let journal = project
        .root
        .join(".sdd/runs")
        .join(&run_id)
        .join("journal.jsonl");
    let kinds: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|row| row.get("event").and_then(Value::as_str).map(str::to_owned))
        .collect();
    eprintln!(
        "interop: loop remote: bernstein_complete answered done, yet the run handle reads \
         {status:?}: the run journal {run_id} holds only {kinds:?}, no task_completed row \
         (the reference task server does not journal its own lifecycle transitions)"
    );
}

/// A reference `bernstein serve` on a free loopback port, killed when dropped.
struct LiveServe {
    child: Child,
    port: u16,
}

impl LiveServe {
    /// Starts the reference task server in `project` with its audit key and the bearer token,
    /// and waits until it accepts connections.
    fn start(oracle: &Oracle, project: &Project, dir: &Path) -> anyhow::Result<LiveServe> {
        // Ask the kernel for a free port, then hand it to the server.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&oracle.cli)
            .args(["serve", "--host", "127.0.0.1", "--port", &port.to_string()])
            .current_dir(&project.root)
            .env("BERNSTEIN_AUTH_TOKEN", TOKEN)
            .env("BERNSTEIN_AUDIT_KEY_PATH", &project.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log"))?)
            .spawn()
            .context("start bernstein serve")?;
        let mut serve = LiveServe { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "bernstein serve did not start within 60 s"
            );
            ensure!(
                serve.child.try_wait()?.is_none(),
                "bernstein serve exited early (see {})",
                dir.join("serve.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(serve)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for LiveServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::handles_depart_only_on_the_chain_head;

    #[test]
    fn only_the_chain_head_comparison_is_excused() {
        let section = |receipt_hash: bool, verify_handle: bool| {
            json!({"ok": false, "handles": {"h.json": {
                "ok": false,
                "receipt_hash_matches_wire": receipt_hash,
                "verify_handle": [verify_handle, null],
                "verify_handle_chain_head": [false, "embedded chain_head does not match the audit chain head"],
            }}})
        };
        assert!(handles_depart_only_on_the_chain_head(&section(true, true)));
        assert!(!handles_depart_only_on_the_chain_head(&section(
            false, true
        )));
        assert!(!handles_depart_only_on_the_chain_head(&section(
            true, false
        )));
        assert!(!handles_depart_only_on_the_chain_head(
            &json!({"ok": false, "handles": {}})
        ));
    }
}
