//! Faults under load (issue 11 items 1 and 2): `bernstein-mcp` stdio servers driven by
//! pipelined clients with a mixed workload, killed with SIGKILL at random moments and restarted,
//! and several servers writing one workdir at once.
//!
//! A call counts as acknowledged when its response line reached the client. After every
//! restart the evidence must hold every acknowledged call (its anchoring row, its audit entry
//! and its effect on the task log, mailbox or spine), `bernstein-mcp verify` must pass or report
//! only crash debris of calls nobody was answered for (a torn tail, an abandoned call), no task
//! may have two terminal rows, and the restarted server must serve.
//!
//! The tests here are bounded (10 kills); `cargo xtask soak` runs the same test with
//! `BERNSTEIN_SOAK_KILLS` (and `BERNSTEIN_SOAK_SEED`, `BERNSTEIN_SOAK_SERVERS`) set.

#![allow(
    clippy::print_stderr,
    reason = "the soak figures (seed, kills, calls found, tears) are the test's report"
)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::faults_http::HttpLoad;

/// In-flight calls per server: one stdio client pipelines this many requests.
pub(crate) const IN_FLIGHT: usize = 16;

/// A small seeded generator (SplitMix64): the seed is printed, so a failing run can be replayed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// The time bound `BERNSTEIN_SOAK_SECONDS` sets, if any.
pub(crate) fn soak_deadline() -> Option<Instant> {
    std::env::var("BERNSTEIN_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(|s| Instant::now() + Duration::from_secs(s))
}

/// The seed from `BERNSTEIN_SOAK_SEED`, or one from the clock.
pub(crate) fn seed() -> u64 {
    std::env::var("BERNSTEIN_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

pub(crate) fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A project directory, a 0600 audit key and a home, all in one temporary directory.
pub(crate) struct Project {
    pub(crate) dir: tempfile::TempDir,
}

impl Project {
    pub(crate) fn new() -> Project {
        Project::within(tempfile::tempdir().unwrap())
    }

    pub(crate) fn within(dir: tempfile::TempDir) -> Project {
        std::fs::create_dir_all(dir.path().join("project")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let key = dir.path().join("audit.key");
        std::fs::write(
            &key,
            "3f1c9a7e5b2d4068a1c3e5f7092b4d6f8a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d\n",
        )
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        Project { dir }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    pub(crate) fn key(&self) -> PathBuf {
        self.dir.path().join("audit.key")
    }

    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Runs a `bernstein-mcp` subcommand on this project; returns the exit code and stdout.
    pub(crate) fn cli(&self, args: &[&str]) -> (i32, String) {
        let root = self.root();
        let key = self.key();
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--workdir",
            root.to_str().unwrap(),
            "--key-file",
            key.to_str().unwrap(),
        ]);
        let out = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .args(&all)
            .env_clear()
            .env("HOME", self.home())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }
}

/// What a server's reader thread reports.
pub(crate) enum Msg {
    /// One response line from server `server` in its generation `generation`.
    Line {
        server: usize,
        generation: u64,
        message: Value,
    },
    /// The server's stdout closed.
    Eof { server: usize, generation: u64 },
}

/// One running stdio server.
pub(crate) struct Server {
    child: Child,
    stdin: ChildStdin,
    pub(crate) generation: u64,
    next_id: i64,
}

impl Server {
    /// Starts `bernstein-mcp` on `project` and sends `initialize` (its answer arrives as a
    /// [`Msg::Line`] with id 0).
    pub(crate) fn start(
        project: &Project,
        server: usize,
        generation: u64,
        sink: Sender<Msg>,
    ) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .args([
                "--workdir",
                project.root().to_str().unwrap(),
                "--key-file",
                project.key().to_str().unwrap(),
            ])
            .env_clear()
            .env("HOME", project.home())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                    break;
                }
                // An answer wider than the pipe's buffer reaches the pipe in several writes; a
                // kill between them leaves its start without the closing newline. The client
                // never got that answer whole, so it acknowledges nothing.
                if line.last() != Some(&b'\n') {
                    eprintln!(
                        "faults: server {server} was killed in the middle of an answer \
                         ({} bytes written): not acknowledged",
                        line.len()
                    );
                    break;
                }
                let message: Value = serde_json::from_slice(&line).unwrap_or_else(|e| {
                    panic!(
                        "stdout is not protocol ({e}): {}",
                        String::from_utf8_lossy(&line)
                    )
                });
                if sink
                    .send(Msg::Line {
                        server,
                        generation,
                        message,
                    })
                    .is_err()
                {
                    return;
                }
            }
            let _ = sink.send(Msg::Eof { server, generation });
        });
        let stdin = child.stdin.take().unwrap();
        let mut server = Server {
            child,
            stdin,
            generation,
            next_id: 0,
        };
        server.send(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        );
        server
    }

    /// Sends one request; returns its id.
    pub(crate) fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        // A dead server's pipe refuses the write; its calls were never acknowledged.
        let _ = self.stdin.write_all(format!("{line}\n").as_bytes());
        let _ = self.stdin.flush();
        id
    }

    pub(crate) fn call(&mut self, tool: &str, arguments: Value) -> i64 {
        self.send("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL.
    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Closes stdin and waits for a clean exit.
    pub(crate) fn stop(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "server exited with {status}");
    }
}

/// One acknowledged tool call: the tool, its `_meter.call_id` (the anchoring span) and the
/// fields of the tool's result the checks read.
#[derive(Clone, Debug)]
pub(crate) struct Ack {
    pub(crate) tool: String,
    pub(crate) call_id: String,
    pub(crate) ok: bool,
    pub(crate) result: Value,
}

/// The result fields [`check_evidence`] and [`assert_only_debris`] read. A claim's receipt
/// carries the whole backlog snapshot; kept whole for every acknowledged call, a 200-kill soak
/// held gigabytes of snapshots nobody reads.
const RESULT_FIELDS: [&str; 8] = [
    "task_id",
    "taskId",
    "granted",
    "entry_hash",
    "spine_entry_hash",
    "seq",
    "version",
    "key",
];

impl Ack {
    /// The acknowledgement of a call of `tool` answered with the tool-result `body`.
    pub(crate) fn from_body(tool: &str, body: &Value) -> Ack {
        let result = &body["result"];
        let kept = RESULT_FIELDS
            .iter()
            .filter_map(|field| Some(((*field).to_owned(), result.get(*field)?.clone())))
            .collect::<serde_json::Map<_, _>>();
        Ack {
            tool: tool.to_owned(),
            call_id: body["_meter"]["call_id"].as_str().unwrap_or("").to_owned(),
            ok: body["_meter"]["ok"] == true,
            result: Value::Object(kept),
        }
    }
}

/// The tool-result body (`{"result", "_meter"}`) of a `tools/call` response, or `None` for a
/// JSON-RPC error.
pub(crate) fn tool_body(message: &Value) -> Option<Value> {
    let text = message["result"]["content"][0]["text"].as_str()?;
    serde_json::from_str(text).ok()
}

/// One logical client: claim → post a message → post an artifact → complete → status, and a
/// run whenever a claim finds nothing open. Claiming first keeps the open backlog as small as
/// the number of workers however long the load runs: a run made by a worker that was killed
/// before its claim is claimed by the next worker instead of staying open for good.
pub(crate) struct Worker {
    name: String,
    step: u8,
    task: String,
    n: u64,
}

/// The [`Worker`] step that starts a run.
const RUN: u8 = 0;
/// The [`Worker`] step that claims a task.
const CLAIM: u8 = 1;
/// The [`Worker`] step that completes the task in hand.
const COMPLETE: u8 = 4;

impl Worker {
    pub(crate) fn new(name: String) -> Worker {
        Worker {
            name,
            step: CLAIM,
            task: String::new(),
            n: 0,
        }
    }

    /// The next call: tool name and arguments.
    pub(crate) fn next_call(&mut self) -> (&'static str, Value) {
        self.n += 1;
        let (name, task, n) = (&self.name, &self.task, self.n);
        match self.step {
            RUN => ("bernstein_run", json!({"goal": format!("{name} goal {n}")})),
            CLAIM => ("bernstein_claim", json!({"claimer_id": name})),
            2 => (
                "bernstein_post_message",
                json!({"task_id": task, "body": format!("{name} finding {n}"), "sender": name}),
            ),
            3 => (
                "bernstein_post_artifact",
                json!({"task_id": task, "key": format!("k-{name}"), "artifact_type": "report",
                       "poster": name, "body": format!("report {n}")}),
            ),
            COMPLETE => (
                "bernstein_complete",
                json!({"task_id": task, "result_summary": format!("{name} done {n}")}),
            ),
            _ => ("bernstein_run_status", json!({"run_id": task})),
        }
    }

    /// Takes the answer to the call `next_call` returned last.
    pub(crate) fn answered(&mut self, body: &Value) {
        let ok = body["_meter"]["ok"] == true;
        self.step = match self.step {
            RUN => CLAIM,
            CLAIM if ok && body["result"]["granted"] == true => {
                self.task = body["result"]["taskId"].as_str().unwrap().to_owned();
                CLAIM + 1
            }
            CLAIM => RUN,
            2..=4 if ok => self.step + 1,
            _ => CLAIM,
        };
    }

    /// Its server died (or refused), so the call in flight got no answer. A task in hand is
    /// completed next rather than left claimed for good: every claim receipt lists the claimed
    /// tasks, and a soak's hundreds of kills would otherwise grow each receipt without bound. A
    /// complete that already happened is refused as a tool error, which the checks allow.
    pub(crate) fn restart(&mut self) {
        self.step = if (CLAIM + 1..=COMPLETE).contains(&self.step) {
            COMPLETE
        } else {
            CLAIM
        };
    }
}

/// Several servers on one project, each with [`IN_FLIGHT`] workers, and the acknowledged calls.
pub(crate) struct Fleet<'p> {
    project: &'p Project,
    pub(crate) servers: Vec<Server>,
    workers: Vec<Vec<Worker>>,
    /// (server, request id) → worker index and tool.
    pending: HashMap<(usize, i64), (usize, &'static str)>,
    inbox: Receiver<Msg>,
    sink: Sender<Msg>,
    pub(crate) acks: Vec<Ack>,
    /// JSON-RPC errors received (each a refusal, not an acknowledgement).
    pub(crate) errors: Vec<Value>,
    generation: u64,
}

impl<'p> Fleet<'p> {
    pub(crate) fn start(project: &'p Project, servers: usize) -> Fleet<'p> {
        let (sink, inbox) = channel();
        let mut fleet = Fleet {
            project,
            servers: Vec::new(),
            workers: Vec::new(),
            pending: HashMap::new(),
            inbox,
            sink,
            acks: Vec::new(),
            errors: Vec::new(),
            generation: 0,
        };
        for s in 0..servers {
            fleet.generation += 1;
            let server = Server::start(project, s, fleet.generation, fleet.sink.clone());
            fleet.servers.push(server);
            fleet.workers.push(
                (0..IN_FLIGHT)
                    .map(|w| Worker::new(format!("s{s}w{w}")))
                    .collect(),
            );
        }
        fleet
    }

    fn issue(&mut self, server: usize, worker: usize) {
        let (tool, arguments) = self.workers[server][worker].next_call();
        let id = self.servers[server].call(tool, arguments);
        self.pending.insert((server, id), (worker, tool));
    }

    /// Fills every server's pipeline.
    pub(crate) fn prime(&mut self) {
        for server in 0..self.servers.len() {
            for worker in 0..IN_FLIGHT {
                self.issue(server, worker);
            }
        }
    }

    /// Handles one message; with `refill`, the answered worker issues its next call.
    fn handle(&mut self, msg: Msg, refill: bool) -> Option<(usize, u64)> {
        match msg {
            Msg::Eof { server, generation } => Some((server, generation)),
            Msg::Line {
                server,
                generation,
                message,
            } => {
                if generation != self.servers[server].generation {
                    // A killed server's last lines still count: the client read them.
                    self.record(server, &message, false);
                    return None;
                }
                self.record(server, &message, refill);
                None
            }
        }
    }

    fn record(&mut self, server: usize, message: &Value, refill: bool) {
        let Some(id) = message["id"].as_i64() else {
            return;
        };
        let Some((worker, tool)) = self.pending.remove(&(server, id)) else {
            return;
        };
        match tool_body(message) {
            Some(body) => {
                self.acks.push(Ack::from_body(tool, &body));
                self.workers[server][worker].answered(&body);
            }
            None => {
                self.errors.push(message.clone());
                self.workers[server][worker].restart();
            }
        }
        if refill {
            self.issue(server, worker);
        }
    }

    /// Serves answers and refills pipelines for `window`.
    pub(crate) fn run_for(&mut self, window: Duration) {
        let deadline = Instant::now() + window;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.inbox.recv_timeout(left) {
                Ok(msg) => {
                    if let Some((server, generation)) = self.handle(msg, true) {
                        assert_ne!(
                            generation, self.servers[server].generation,
                            "server {server} exited while serving"
                        );
                    }
                }
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => unreachable!("the fleet holds a sink"),
            }
        }
    }

    /// Kills server `server` with SIGKILL, records every answer it had written, and restarts
    /// it; returns once the new process answered `initialize` and one call.
    pub(crate) fn kill_and_restart(&mut self, server: usize) {
        self.servers[server].kill();
        let dead = self.servers[server].generation;
        // Mark the old generation dead so its last lines are recorded without refills.
        self.generation += 1;
        self.servers[server].generation = self.generation;
        loop {
            match self.inbox.recv_timeout(Duration::from_secs(30)) {
                Ok(msg) => {
                    if let Some((s, g)) = self.handle(msg, true)
                        && s == server
                        && g == dead
                    {
                        break;
                    }
                }
                Err(e) => panic!("the killed server's output never closed: {e}"),
            }
        }
        // Calls still pending on the dead server got no answer: they were not acknowledged.
        self.pending.retain(|(s, _), _| *s != server);
        for worker in &mut self.workers[server] {
            worker.restart();
        }
        let fresh = Server::start(self.project, server, self.generation, self.sink.clone());
        self.servers[server] = fresh;
        self.await_serving(server);
    }

    /// Waits for `initialize` and one status call on a fresh server: it serves again.
    fn await_serving(&mut self, server: usize) {
        let id = self.servers[server].call("bernstein_run_status", json!({"run_id": "probe"}));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .inbox
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("server {server} did not serve after restart: {e}"));
            if let Msg::Line {
                server: s,
                generation,
                message,
            } = &msg
                && *s == server
                && *generation == self.servers[server].generation
                && message["id"] == id
            {
                assert_eq!(
                    message["result"]["isError"], false,
                    "the restarted server refused its first call: {message}"
                );
                return;
            }
            if let Msg::Line {
                server: s,
                generation,
                message,
            } = &msg
                && *s == server
                && *generation == self.servers[server].generation
                && message["id"] == 0
            {
                assert!(message.get("result").is_some(), "{message}");
                continue;
            }
            assert!(
                self.handle(msg, true).is_none_or(|(s, _)| s != server),
                "server {server} exited after restart"
            );
        }
    }

    /// Stops refilling and waits until every pending call is answered; [`Fleet::prime`]
    /// resumes the load.
    pub(crate) fn quiesce(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .inbox
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{} calls never answered: {e}", self.pending.len()));
            if let Some((server, generation)) = self.handle(msg, false) {
                assert_ne!(
                    generation, self.servers[server].generation,
                    "server {server} exited while quiescing"
                );
            }
        }
    }

    /// Stops refilling and waits until every pending call is answered, then stops the servers.
    pub(crate) fn drain_and_stop(mut self) -> (Vec<Ack>, Vec<Value>) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .inbox
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{} calls never answered: {e}", self.pending.len()));
            // The initialize answers (id 0) are not tool calls.
            if let Some((server, _)) = self.handle(msg, false) {
                panic!("server {server} exited while draining");
            }
        }
        for server in self.servers {
            server.stop();
        }
        (self.acks, self.errors)
    }
}

/// One server driven one request at a time.
pub(crate) struct Client {
    pub(crate) server: Server,
    inbox: Receiver<Msg>,
    pub(crate) acks: Vec<Ack>,
}

impl Client {
    pub(crate) fn start(project: &Project) -> Client {
        let (sink, inbox) = channel();
        let server = Server::start(project, 0, 1, sink);
        let mut client = Client {
            server,
            inbox,
            acks: Vec::new(),
        };
        let init = client.wait(0);
        assert!(init.get("result").is_some(), "initialize: {init}");
        client
    }

    fn wait(&mut self, id: i64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(Msg::Line { message, .. }) if message["id"] == id => return message,
                Ok(Msg::Line { .. }) => {}
                Ok(Msg::Eof { .. }) => panic!("the server exited"),
                Err(e) => panic!("no answer to request {id}: {e}"),
            }
        }
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.server.send(method, params);
        self.wait(id)
    }

    /// Calls a tool; a tool result is recorded as acknowledged, a JSON-RPC error is returned
    /// as `Err`.
    pub(crate) fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, Value> {
        let message = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        match tool_body(&message) {
            Some(body) => {
                self.acks.push(Ack::from_body(tool, &body));
                Ok(body)
            }
            None => Err(message["error"].clone()),
        }
    }

    /// One round of the workload: run, claim, message, artifact, complete. Returns the
    /// JSON-RPC errors it got; tool results are checked not to hide a storage fault.
    pub(crate) fn round(&mut self, n: usize) -> Vec<Value> {
        let mut errors = Vec::new();
        let mut task = None;
        let mut calls: Vec<(&str, Value)> = vec![
            ("bernstein_run", json!({"goal": format!("disk goal {n}")})),
            ("bernstein_claim", json!({"claimer_id": format!("w{n}")})),
        ];
        // The poster of a message or an artifact must hold the task's claim.
        let me = format!("w{n}");
        for step in 0..5 {
            if step >= 2 {
                let Some(task) = &task else { break };
                calls.push(match step {
                    2 => (
                        "bernstein_post_message",
                        json!({"task_id": task, "body": format!("finding {n}"), "sender": me}),
                    ),
                    3 => (
                        "bernstein_post_artifact",
                        json!({"task_id": task, "key": format!("k{n}"), "artifact_type": "report",
                               "poster": me, "body": format!("report {n} {}", "x".repeat(2000))}),
                    ),
                    _ => (
                        "bernstein_complete",
                        json!({"task_id": task, "result_summary": format!("done {n}")}),
                    ),
                });
            }
            let (tool, arguments) = calls[step].clone();
            match self.call(tool, arguments) {
                Ok(body) => {
                    let text = body.to_string();
                    // Every step of the round is one the project allows, so a refusal can
                    // only be the storage's, and that must be a JSON-RPC error.
                    assert!(
                        body["_meter"]["ok"] == true,
                        "{tool}: refused as a tool result, not a JSON-RPC error: {text}"
                    );
                    if tool == "bernstein_claim" && body["result"]["granted"] == true {
                        task = body["result"]["taskId"].as_str().map(str::to_owned);
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        errors
    }
}

/// Parses the whole lines of a JSON-lines file (a torn last line is skipped).
pub(crate) fn json_lines(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    whole
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

fn files_under(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(listing) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in listing.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            out.push(path);
        }
    }
    out
}

/// What the evidence on disk says about the acknowledged calls.
#[derive(Default, Debug)]
pub(crate) struct Findings {
    /// Acknowledged calls whose evidence is missing, one line each.
    pub(crate) missing: Vec<String>,
    /// Tasks with more than one terminal transition.
    pub(crate) double_terminal: Vec<String>,
    /// Acknowledged calls found whole.
    pub(crate) found: usize,
}

const TERMINAL: [&str; 3] = ["done", "failed", "cancelled"];
const TERMINAL_ROWS: [&str; 3] = ["task_completed", "task_failed", "task_cancelled"];

/// Checks every acknowledged call against the files under `.sdd/`.
pub(crate) fn check_evidence(root: &Path, acks: &[Ack]) -> Findings {
    let sdd = root.join(".sdd");
    let mut audit_spans = BTreeSet::new();
    let mut audit_dir: Vec<PathBuf> = std::fs::read_dir(sdd.join("audit"))
        .map(|l| l.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    audit_dir.sort();
    for segment in audit_dir
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
    {
        for record in json_lines(segment) {
            if record["event_type"] == "mcp.stateless_call" {
                audit_spans.insert(
                    record["details"]["span_id"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                );
            }
        }
    }
    let row_spans: BTreeSet<String> = json_lines(&sdd.join("runs/mcp-calls/journal.jsonl"))
        .iter()
        .filter_map(|row| row["span_id"].as_str().map(str::to_owned))
        .collect();
    let tasks = json_lines(&sdd.join("runtime/tasks.jsonl"));
    // Indexed once: a soak checks thousands of calls against tens of thousands of rows.
    let statuses: BTreeSet<(&str, &str)> = tasks
        .iter()
        .filter_map(|t| Some((t["id"].as_str()?, t["status"].as_str()?)))
        .collect();
    let has_status = |id: &str, status: &str| statuses.contains(&(id, status));
    let mailbox: BTreeSet<String> = json_lines(&sdd.join("runtime/mailbox.jsonl"))
        .iter()
        .filter_map(|e| e["entry_hash"].as_str().map(str::to_owned))
        .collect();
    let spine_hashes: BTreeSet<String> = files_under(&sdd.join("lineage"), "spine.jsonl")
        .iter()
        .flat_map(|p| json_lines(p))
        .filter_map(|e| e["entry_hash"].as_str().map(str::to_owned))
        .collect();

    let mut findings = Findings::default();
    for ack in acks {
        let before = findings.missing.len();
        let id = &ack.call_id;
        if !row_spans.contains(id) {
            findings
                .missing
                .push(format!("{} {id}: no anchoring row", ack.tool));
        }
        if !audit_spans.contains(id) {
            findings
                .missing
                .push(format!("{} {id}: no audit entry", ack.tool));
        }
        if ack.ok {
            let r = &ack.result;
            let effect = match ack.tool.as_str() {
                "bernstein_run" => has_status(r["task_id"].as_str().unwrap_or(""), "open"),
                "bernstein_claim" if r["granted"] == true => {
                    has_status(r["taskId"].as_str().unwrap_or(""), "claimed")
                }
                "bernstein_post_message" => {
                    mailbox.contains(r["entry_hash"].as_str().unwrap_or(""))
                }
                "bernstein_post_artifact" => {
                    spine_hashes.contains(r["spine_entry_hash"].as_str().unwrap_or(""))
                }
                "bernstein_complete" => has_status(r["task_id"].as_str().unwrap_or(""), "done"),
                _ => true,
            };
            if !effect {
                findings
                    .missing
                    .push(format!("{} {id}: effect missing: {r}", ack.tool));
            }
        }
        if findings.missing.len() == before {
            findings.found += 1;
        }
    }

    let mut terminal: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    for t in &tasks {
        if TERMINAL.iter().any(|s| t["status"] == *s) {
            terminal
                .entry(t["id"].as_str().unwrap_or("").to_owned())
                .or_default()
                .insert(t["version"].as_i64().unwrap_or(-1));
        }
    }
    for (task, versions) in terminal {
        if versions.len() > 1 {
            findings.double_terminal.push(format!(
                "task log: {task} has terminal versions {versions:?}"
            ));
        }
    }
    for journal in files_under(&sdd.join("runs"), "journal.jsonl") {
        let rows = json_lines(&journal)
            .into_iter()
            .filter(|row| TERMINAL_ROWS.iter().any(|e| row["event"] == *e))
            .count();
        if rows > 1 {
            findings
                .double_terminal
                .push(format!("{}: {rows} terminal rows", journal.display()));
        }
    }
    findings
}

/// `bernstein-mcp verify --json` on the project: the report, its problems (section: text) and
/// the number of tears it reports.
pub(crate) fn verify(project: &Project) -> (Value, Vec<String>, usize) {
    let (_, stdout) = project.cli(&["verify", "--json"]);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {stdout}"));
    let mut problems = Vec::new();
    let mut tears = 0;
    for (name, section) in report["sections"].as_object().unwrap() {
        for p in section["problems"].as_array().unwrap() {
            problems.push(format!("{name}: {}", p.as_str().unwrap()));
        }
        tears += section["notes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| {
                let note = n.as_str().unwrap();
                note.contains("tear") || note.contains("torn")
            })
            .count();
        tears += section["detail"]["tears"].as_array().map_or(0, Vec::len);
    }
    (report, problems, tears)
}

/// `audit calls mcp-calls --json`: the call order must be gap free (every index answered or
/// reported abandoned) with no problem; returns (calls, abandoned).
pub(crate) fn assert_call_order(project: &Project) -> (usize, usize) {
    let (code, stdout) = project.cli(&["audit", "calls", "mcp-calls", "--json"]);
    let order: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("audit calls printed no JSON ({e}): {stdout}"));
    assert_eq!(code, 0, "audit calls: {stdout}");
    assert_eq!(order["problems"], json!([]), "audit calls: {stdout}");
    let indices = |list: &str| -> Vec<i64> {
        order[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_index"].as_i64().unwrap())
            .collect()
    };
    let calls = indices("calls");
    let abandoned = indices("abandoned");
    let mut all: Vec<i64> = calls.iter().chain(&abandoned).copied().collect();
    all.sort_unstable();
    let expected: Vec<i64> = (0..all.len() as i64).collect();
    assert_eq!(all, expected, "the call order has a gap or a repeat");
    (calls.len(), abandoned.len())
}

/// The figures one kill run reports.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) kills: u64,
    pub(crate) acknowledged: usize,
    pub(crate) found: usize,
    pub(crate) tears: usize,
    pub(crate) abandoned: usize,
}

/// `kills` SIGKILLs of random servers among `servers` stdio servers on one project, each
/// after a random window of load; every check of the module after each restart.
pub(crate) fn kill_under_load(
    servers: usize,
    kills: u64,
    seed: u64,
    deadline: Option<Instant>,
) -> Tally {
    eprintln!("faults: kill -9 under load: seed {seed}, {servers} stdio server(s), {kills} kills");
    let mut rng = Rng::new(seed);
    let project = Project::new();
    let mut fleet = Fleet::start(&project, servers);
    fleet.prime();
    let mut tally = Tally::default();
    for kill in 0..kills {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            eprintln!("faults: the time bound is reached after {kill} kills");
            break;
        }
        fleet.run_for(Duration::from_millis(100 + rng.below(900)));
        let victim = rng.below(servers as u64) as usize;
        fleet.kill_and_restart(victim);
        tally.kills += 1;
        // The restarted server answered a call, so any row its predecessor left without an
        // audit entry is settled. The other servers finish their calls in flight, so that
        // `verify` reads a project nobody is writing, and then the load resumes.
        fleet.quiesce();
        check_after_restart(&project, &fleet.acks, kill);
        if (kill + 1) % 25 == 0 {
            eprintln!(
                "faults: {} kills, {} calls acknowledged so far",
                kill + 1,
                fleet.acks.len()
            );
        }
        fleet.prime();
    }
    let (acks, errors) = fleet.drain_and_stop();
    assert!(errors.is_empty(), "JSON-RPC errors under load: {errors:?}");
    let findings = check_evidence(&project.root(), &acks);
    assert_eq!(findings.missing, Vec::<String>::new());
    assert_eq!(findings.double_terminal, Vec::<String>::new());
    let (report, problems, tears) = verify(&project);
    assert_only_debris(&project.root(), &acks, &report, &problems);
    let (_, abandoned) = assert_call_order(&project);
    tally.acknowledged = acks.len();
    tally.found = findings.found;
    tally.tears = tears;
    tally.abandoned = abandoned;
    eprintln!(
        "faults: kills survived {}, calls acknowledged {} and found {}, tears reported {}, \
         abandoned calls reported {} (seed {seed})",
        tally.kills, tally.acknowledged, tally.found, tally.tears, tally.abandoned
    );
    tally
}

pub(crate) fn check_after_restart(project: &Project, acks: &[Ack], kill: u64) {
    let findings = check_evidence(&project.root(), acks);
    assert_eq!(
        findings.missing,
        Vec::<String>::new(),
        "after kill {kill}: acknowledged calls lost"
    );
    assert_eq!(
        findings.double_terminal,
        Vec::<String>::new(),
        "after kill {kill}"
    );
    let (report, problems, _) = verify(project);
    assert_only_debris(&project.root(), acks, &report, &problems);
}

/// Every problem `verify` reports must be crash debris of a call that was never answered:
/// nothing acknowledged may be reported broken, and nothing may be broken silently (the
/// evidence checks above catch what verify does not report). The debris allowed: tears; the
/// missing mirror of the mailbox's *last* entry when that post was never answered (its writer
/// died before the mirror; the next post writes it; an earlier entry without its mirror is a
/// gap that stays, and fails). Posts torn between their spine entry, journal row and
/// `spine.head` are notes of `report`, not problems; none may name an answered post.
pub(crate) fn assert_only_debris(root: &Path, acks: &[Ack], report: &Value, problems: &[String]) {
    let acknowledged_seqs: BTreeSet<i64> = acks
        .iter()
        .filter(|a| a.tool == "bernstein_post_message" && a.ok)
        .filter_map(|a| a.result["seq"].as_i64())
        .collect();
    let last_seq = json_lines(&root.join(".sdd/runtime/mailbox.jsonl"))
        .last()
        .and_then(|e| e["seq"].as_i64());
    // Acknowledged artifact versions, as the spine names them: `artifact:<key>:v<N>` of a run.
    let acknowledged_versions: BTreeSet<String> = acks
        .iter()
        .filter(|a| a.tool == "bernstein_post_artifact" && a.ok)
        .map(|a| {
            format!(
                "spine task-{}: entry {} (artifact:{}:v{})",
                a.result["task_id"].as_str().unwrap_or(""),
                a.result["version"].as_i64().unwrap_or(0) - 1,
                a.result["key"].as_str().unwrap_or(""),
                a.result["version"].as_i64().unwrap_or(0)
            )
        })
        .collect();
    let notes = report["sections"]["artifacts"]["notes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    for note in notes.iter().filter_map(Value::as_str) {
        // A post killed after its spine entry and before its journal row leaves an orphan
        // version (documented in docs/durability.md, "Artifacts"); never one that was answered.
        if let Some((entry, _)) = note
            .strip_prefix("torn post: ")
            .and_then(|spine| spine.split_once(" has no artifact_posted row"))
        {
            assert!(
                !acknowledged_versions.contains(entry),
                "an acknowledged artifact is reported torn: {note}"
            );
        }
        // A post killed after creating a run's spine file and before its first row leaves an
        // empty spine; it is debris only when no post of that run was answered.
        if let Some(run) = note
            .strip_prefix("spine task-")
            .and_then(|rest| rest.split_once(": torn post: the spine file is empty"))
            .map(|(run, _)| run)
        {
            assert!(
                !acks.iter().any(|a| a.tool == "bernstein_post_artifact"
                    && a.ok
                    && a.result["task_id"].as_str() == Some(run)),
                "a spine with an acknowledged artifact is empty: {note}"
            );
        }
    }
    for problem in problems {
        let unanswered_mirror = problem
            .strip_prefix("mailbox: seq ")
            .and_then(|rest| rest.split_once(": no audit-chain mirror for entry"))
            .and_then(|(seq, _)| seq.parse::<i64>().ok())
            .is_some_and(|seq| Some(seq) == last_seq && !acknowledged_seqs.contains(&seq));
        assert!(
            unanswered_mirror || problem.contains("torn") || problem.contains("tear"),
            "verify reports more than crash debris: {problems:#?}"
        );
    }
}

/// Issue 11 item 1: SIGKILL under load, 10 kills of two stdio servers sharing one workdir,
/// each with 16 calls in flight. `cargo xtask soak` runs it with more kills.
#[test]
fn acknowledged_calls_survive_sigkill_under_load() {
    let kills = env_number("BERNSTEIN_SOAK_KILLS", 10);
    let servers = env_number("BERNSTEIN_SOAK_SERVERS", 2) as usize;
    let deadline = soak_deadline();
    let tally = kill_under_load(servers, kills, seed(), deadline);
    if deadline.is_none() {
        assert_eq!(tally.kills, kills);
    }
    assert!(tally.acknowledged > 0, "no call was answered");
    assert_eq!(tally.found, tally.acknowledged);
}

/// The reference oracle's Python and CLI (`~/.cache/bernstein-mcp/oracle/bin/`), when installed.
fn oracle() -> Option<(PathBuf, PathBuf)> {
    let python = std::env::var_os("BERNSTEIN_PY").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/bernstein-mcp/oracle/bin/python")
        },
        PathBuf::from,
    );
    let cli = python.with_file_name("bernstein");
    (python.exists() && cli.exists()).then_some((python, cli))
}

/// The reference's own chain writer (`AuditChainStore`, as `cargo xtask interop chain` runs
/// it), appending to the project's chain until `stop` exists; prints its count on exit.
const REFERENCE_WRITER: &str = r#"
import sys, time
from pathlib import Path
from bernstein.core.security.audit_chain import AuditChainStore
audit_dir, key_path, stop = sys.argv[1:4]
store = AuditChainStore(Path(audit_dir), key=Path(key_path).read_bytes().strip())
n = 0
deadline = time.monotonic() + 600
while not Path(stop).exists() and time.monotonic() < deadline:
    store.log_with_prev_digest(event_type="reference.writer", actor="task_server",
        resource_type="note", resource_id=f"ref-{n}", details={"n": n})
    n += 1
    time.sleep(0.005)
print(n)
"#;

/// Four servers on one workdir (`http` of them on HTTP) for `seconds` of load (and, with `python`, the reference's chain
/// writer beside them): one gap-free call order, one chain both verifiers accept, every task
/// transition once, every acknowledged call found.
fn many_writers(seconds: u64, reference: Option<&(PathBuf, PathBuf)>, http: usize) {
    let project = Project::new();
    let audit_dir = project.root().join(".sdd/audit");
    std::fs::create_dir_all(&audit_dir).unwrap();
    let stop = project.dir.path().join("stop");
    let writer = reference.map(|(python, _)| {
        Command::new(python)
            .args(["-c", REFERENCE_WRITER])
            .arg(&audit_dir)
            .arg(project.key())
            .arg(&stop)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    });
    let mut fleet = Fleet::start(&project, 4 - http);
    fleet.prime();
    // Two HTTP servers share 16 concurrent clients.
    let load = (http > 0).then(|| HttpLoad::start(&project, http, 16 / http));
    fleet.run_for(Duration::from_secs(seconds));
    let (mut acks, mut errors) = fleet.drain_and_stop();
    if let Some(load) = load {
        let (more_acks, more_errors) = load.stop();
        acks.extend(more_acks);
        errors.extend(more_errors);
    }
    std::fs::write(&stop, b"").unwrap();
    let reference_records = writer.map(|child| {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the reference's writer failed");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap()
    });
    assert!(errors.is_empty(), "JSON-RPC errors under load: {errors:?}");

    let findings = check_evidence(&project.root(), &acks);
    assert_eq!(findings.missing, Vec::<String>::new());
    assert_eq!(findings.double_terminal, Vec::<String>::new());
    let (calls, abandoned) = assert_call_order(&project);
    assert_eq!(abandoned, 0, "nothing was killed, so no call is abandoned");
    // Every tools/call of the four servers was anchored (plus the initialize-free status
    // probes, which there are none of here): one order for all of them.
    assert_eq!(calls, acks.len());

    // Every task transition exactly once: one snapshot per (task, version) in the task log,
    // and no event twice in a task's journal (the workload claims and completes each task at
    // most once).
    let mut versions: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for t in json_lines(&project.root().join(".sdd/runtime/tasks.jsonl")) {
        if let (Some(id), Some(v)) = (t["id"].as_str(), t["version"].as_i64()) {
            *versions.entry((id.to_owned(), v)).or_default() += 1;
        }
    }
    let repeated: Vec<_> = versions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "transitions written twice: {repeated:?}"
    );
    for journal in files_under(&project.root().join(".sdd/runs"), "journal.jsonl") {
        if journal.parent().is_some_and(|d| d.ends_with("mcp-calls")) {
            continue;
        }
        let mut events = BTreeMap::new();
        for row in json_lines(&journal) {
            *events
                .entry(row["event"].as_str().unwrap_or("").to_owned())
                .or_insert(0) += 1;
        }
        assert!(
            events
                .iter()
                .all(|(e, n)| *n == 1 || e == "artifact_posted"),
            "{}: {events:?}",
            journal.display()
        );
    }

    let (code, out) = project.cli(&["audit", "verify", "--json"]);
    assert_eq!(code, 0, "our verifier rejects the shared chain: {out}");
    let (report, problems, tears) = verify(&project);
    assert_eq!(problems, Vec::<String>::new(), "{report}");
    assert_eq!(tears, 0);
    let oracle_verdict = reference.map(|(_, cli)| {
        let out = Command::new(cli)
            .args(["audit", "verify-hmac"])
            .current_dir(project.root())
            .env("BERNSTEIN_AUDIT_KEY_PATH", project.key())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the reference's verify-hmac rejects the shared chain: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        "passed"
    });
    eprintln!(
        "faults: many writers: {} stdio and {http} HTTP servers, {seconds} s: calls acknowledged {} and found {}, \
         call order gap-free ({calls} calls), reference records interleaved {:?}, \
         reference verify-hmac: {:?}",
        4 - http,
        acks.len(),
        findings.found,
        reference_records,
        oracle_verdict
    );
}

/// Issue 11 item 2: four servers on one workdir under load for a bounded time: four stdio
/// servers (16 calls in flight each), then two stdio servers beside two HTTP servers (8
/// concurrent clients each), then four stdio servers once more with the reference's chain
/// writer appending beside them (skipped, with a note, when the oracle is not installed).
#[test]
fn many_writers_leave_one_order_and_one_chain() {
    let seconds = env_number("BERNSTEIN_SOAK_WRITER_SECONDS", 3);
    many_writers(seconds, None, 0);
    // Every wait in the mixed run is bounded: a stdio call unanswered for 120 s fails the drain,
    // and an HTTP call unanswered for 60 s is recorded as an error (nothing is killed here).
    many_writers(seconds, None, 2);
    match oracle() {
        Some(oracle) => many_writers(seconds, Some(&oracle), 0),
        None => eprintln!(
            "faults: many writers beside the reference SKIPPED: the oracle is not installed \
             (bash ../shared/reference/setup-oracle.sh)"
        ),
    }
}

/// Regression: a server killed between a mailbox entry and its audit mirror (the kill test
/// found it) left the entry without a mirror for good, and `verify` failed the mailbox section
/// ever after. The next post now writes the owed mirror first, under the mailbox lock.
#[test]
fn the_next_post_mirrors_an_entry_a_killed_writer_left_unmirrored() {
    use bernstein_journal::dlp::RedactionContext;
    use bernstein_journal::identity::SigningIdentity;
    use bernstein_journal::key::AuditKey;
    use bernstein_journal::mailbox::{Mailbox, NewMessage};

    let project = Project::new();
    let mut client = Client::start(&project);
    let run = client
        .call("bernstein_run", json!({"goal": "mailbox mirror"}))
        .unwrap();
    let task = run["result"]["task_id"].as_str().unwrap().to_owned();
    // What the killed writer left: its entry, fsynced, and no mirror on the chain.
    let key = AuditKey::from_file(&project.key()).unwrap();
    let sdd = project.root().join(".sdd");
    let signer = SigningIdentity::load_or_create(&sdd.join("identity"), "mailbox_signing").unwrap();
    Mailbox::open(&sdd, key.master(), signer)
        .post(
            &NewMessage::new(&task, "killed", "finding", "unmirrored", 1.8e9),
            &RedactionContext::default(),
        )
        .unwrap();
    let (_, problems, _) = verify(&project);
    assert_eq!(
        problems,
        ["mailbox: seq 0: no audit-chain mirror for entry"]
    );

    let posted = client
        .call(
            "bernstein_post_message",
            json!({"task_id": task, "body": "next", "sender": "w"}),
        )
        .unwrap();
    assert_eq!(posted["result"]["seq"], 1, "{posted}");
    client.server.stop();
    let (report, problems, _) = verify(&project);
    assert_eq!(problems, Vec::<String>::new(), "{report}");
}
