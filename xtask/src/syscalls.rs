//! `cargo xtask syscalls`: what one anchored `bernstein_run_status` call costs in system calls,
//! counted by `strace -f -c` around the release binary serving stdio.
//!
//! The server is started twice on one scratch project (a run with a three-row journal, an
//! audit key, anchoring on): once for 1 call and once for 1 + `CALLS` calls. That is done
//! twice: as stdio serves by default, and with the `workdir` confined to the served and allowed
//! roots (`--allow-root`), which the HTTP transport always does. The difference of
//! the two `strace -c` tables, divided by `CALLS`, is the per-call cost, so start-up and
//! shut-down cancel out. The budget checked is what a lean call path promises: two fsyncs (the
//! journal row and the audit entry), no directory listing (`getdents64`, counted once the
//! project's audit directory is older than the head index's racy-timestamp window), no failing `mkdir`,
//! `readlink` or `statx`. `strace` is not a dependency of the project: without it the command
//! says SKIPPED and succeeds.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail, ensure};
use bernstein_journal::audit::head_index::SETTLED_MTIME;
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::Object;
use serde_json::{Value, json};

use crate::{cargo, project_root};

/// Timed calls whose cost is averaged.
const CALLS: u64 = 100;

/// Runs the check; see the module documentation.
pub(crate) fn run() -> anyhow::Result<()> {
    if Command::new("strace").arg("-V").output().is_err() {
        println!("syscalls: SKIPPED (strace is not installed)");
        return Ok(());
    }
    let status = cargo()
        .args(["build", "-q", "--release", "-p", "bernstein-mcp"])
        .status()?;
    ensure!(status.success(), "cargo build --release failed");
    let binary = project_root().join("target/release/bernstein-mcp");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|dir| Path::new(&dir).join("release/bernstein-mcp"))
        .filter(|path| path.exists())
        .unwrap_or(binary);

    let scratch = Scratch::new()?;
    let project = scratch.path().join("project");
    fs::create_dir_all(&project)?;
    let key = scratch.path().join("audit.key");
    fs::write(&key, format!("{}\n", "3f".repeat(32)))?;
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600))?;

    let run_id = {
        let mut server = Server::start(&target, &project, &key, &[], None)?;
        let answer = server.call_tool("bernstein_run", json!({"goal": "syscall count"}))?;
        let run_id = answer
            .pointer("/result/run_id")
            .and_then(Value::as_str)
            .context("bernstein_run returned no run_id")?
            .to_owned();
        server.finish()?;
        run_id
    };
    let mut journal = JournalWriter::open(&project, &run_id, HashProfile::PyJsonV1)?;
    for event in ["task_claimed", "task_progress", "task_completed"] {
        journal.append(event, &Object::new().with("task_id", run_id.as_str()))?;
    }
    // The run-head index lists the audit directory again on a poll while the directory's mtime
    // is younger than `SETTLED_MTIME` and no segment it knows is stamped after it (a
    // racy-timestamp guard that only a project seconds old meets, for its first few polls);
    // the budget is that of a lived project, so the count starts once it has settled.
    let audit_dir = project.join(".sdd").join("audit");
    let age = fs::metadata(&audit_dir)?
        .modified()?
        .elapsed()
        .unwrap_or_default();
    if let Some(left) = SETTLED_MTIME.checked_sub(age) {
        std::thread::sleep(left + std::time::Duration::from_millis(100));
    }

    let confine = [
        std::ffi::OsString::from("--allow-root"),
        scratch.path().join("allowed").into_os_string(),
    ];
    fs::create_dir_all(scratch.path().join("allowed"))?;
    let mut over = Vec::new();
    for (label, extra) in [
        ("unconfined, as over stdio", &[][..]),
        ("workdir confined, as over HTTP", &confine[..]),
    ] {
        let per_call = per_call_costs(&target, &project, &key, extra, &scratch, &run_id)?;
        println!("syscalls per bernstein_run_status call ({label}; strace -f -c, {CALLS} calls):");
        let mut total = 0.0;
        for (name, (calls, errors)) in &per_call {
            total += calls;
            println!("  {name:<16} {calls:>7.2}   failing {errors:>5.2}");
        }
        println!("  {:<16} {total:>7.2}", "total");
        over.extend(
            over_budget(&per_call)
                .into_iter()
                .map(|excess| format!("{label}: {excess}")),
        );
    }
    if !over.is_empty() {
        bail!("over the lean call path's budget: {}", over.join("; "));
    }
    println!("syscalls: within budget");
    Ok(())
}

/// Per-call system calls of `bernstein_run_status` on `run_id`: `strace -f -c` of a server
/// started with `extra` flags answering 1 call, subtracted from one answering 1 + `CALLS`
/// calls, divided by `CALLS`. Syscalls below 0.05 per call are left out.
fn per_call_costs(
    target: &Path,
    project: &Path,
    key: &Path,
    extra: &[std::ffi::OsString],
    scratch: &Scratch,
    run_id: &str,
) -> anyhow::Result<BTreeMap<String, (f64, f64)>> {
    let count = |calls: u64, name: &str| -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
        let out = scratch.path().join(name);
        let mut server = Server::start(target, project, key, extra, Some(&out))?;
        for _ in 0..calls {
            server.call_tool("bernstein_run_status", json!({"run_id": run_id}))?;
        }
        server.finish()?;
        parse_summary(&fs::read_to_string(&out)?)
    };
    let once = count(1, "once.txt")?;
    let many = count(1 + CALLS, "many.txt")?;
    let mut per_call = BTreeMap::new();
    for (name, (calls, errors)) in &many {
        let (calls_once, errors_once) = once.get(name).copied().unwrap_or_default();
        #[allow(clippy::cast_precision_loss)]
        let cost = (
            calls.saturating_sub(calls_once) as f64 / CALLS as f64,
            errors.saturating_sub(errors_once) as f64 / CALLS as f64,
        );
        if cost.0 >= 0.05 {
            per_call.insert(name.clone(), cost);
        }
    }
    Ok(per_call)
}

/// What in `per_call` exceeds the lean call path's budget (see the module documentation).
fn over_budget(per_call: &BTreeMap<String, (f64, f64)>) -> Vec<String> {
    let cost = |name: &str| per_call.get(name).copied().unwrap_or_default();
    let mut over = Vec::new();
    let fsyncs = cost("fsync").0 + cost("fdatasync").0;
    if fsyncs > 2.0 {
        over.push(format!("{fsyncs} fsyncs per call (budget 2)"));
    }
    for name in ["getdents64", "getdents"] {
        if cost(name).0 > 0.0 {
            over.push(format!("{name} per call: {} (budget 0)", cost(name).0));
        }
    }
    for name in [
        "mkdir",
        "mkdirat",
        "readlink",
        "readlinkat",
        "statx",
        "newfstatat",
    ] {
        if cost(name).1 > 0.0 {
            over.push(format!(
                "failing {name} per call: {} (budget 0)",
                cost(name).1
            ));
        }
    }
    over
}

/// A scratch directory under the system's temporary directory, removed when dropped (also when
/// the check fails part-way).
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("xtask-syscalls-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `strace -c`'s table: per syscall, calls and errors.
fn parse_summary(text: &str) -> anyhow::Result<BTreeMap<String, (u64, u64)>> {
    let mut table = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = fields.last() else { continue };
        if fields.len() < 5
            || *name == "total"
            || !fields[0].starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        let calls: u64 = fields[3].parse().context("strace -c calls column")?;
        let errors: u64 = if fields.len() == 6 {
            fields[4].parse().context("strace -c errors column")?
        } else {
            0
        };
        table.insert((*name).to_owned(), (calls, errors));
    }
    ensure!(!table.is_empty(), "strace wrote no summary");
    Ok(table)
}

/// The binary serving stdio, perhaps under `strace -f -c -o OUT`.
struct Server {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Server {
    fn start(
        binary: &Path,
        project: &Path,
        key: &Path,
        extra: &[std::ffi::OsString],
        strace: Option<&Path>,
    ) -> anyhow::Result<Server> {
        let mut command = match strace {
            Some(out) => {
                let mut command = Command::new("strace");
                command.args(["-f", "-c", "-o"]).arg(out).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .arg("--workdir")
            .arg(project)
            .arg("--key-file")
            .arg(key)
            .args(extra)
            .env_remove("BERNSTEIN_SERVER_URL")
            .env_remove("BERNSTEIN_AUDIT_KEY_PATH")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn().context("start the server")?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut server = Server {
            child,
            stdin: Some(stdin),
            stdout,
            next_id: 0,
        };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "xtask-syscalls", "version": "1"}}),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(server)
    }

    fn send(&mut self, message: &Value) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{message}")?;
        stdin.flush()?;
        Ok(())
    }

    fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            ensure!(
                self.stdout.read_line(&mut line)? > 0,
                "the server closed stdout"
            );
            let message: Value = serde_json::from_str(&line)?;
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                return message
                    .get("result")
                    .cloned()
                    .context(format!("{method} failed: {message}"));
            }
        }
    }

    /// Calls a tool and returns its structured payload (`result` and `_meter`).
    fn call_tool(&mut self, name: &str, arguments: Value) -> anyhow::Result<Value> {
        let result = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        ensure!(
            result.get("isError") != Some(&Value::Bool(true)),
            "{name} failed: {result}"
        );
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .context("no text content")?;
        Ok(serde_json::from_str(text)?)
    }

    fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        ensure!(status.success(), "the server exited with {status}");
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
