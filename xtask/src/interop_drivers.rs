//! The client drivers behind `cargo xtask interop clients` and `loop`: the kit's real MCP
//! clients, found or installed, run as child processes against a stdio server command line.
//!
//! * [`ClientKit`] finds the wrappers the kit's `clients/install.sh` puts in
//!   `$CLIENTS_DIR/bin` (default `~/.cache/bernstein-mcp/clients`), running the installer when
//!   they are missing;
//! * [`Client`] is one client in one protocol mode. `mcp-py-client` and `mcp-sdk-client` run a
//!   whole list of [`Op`]s on one connection and print one JSON document per operation;
//!   `mcp-inspector --cli` sends one request per process and prints `{"result": …}` on stdout or
//!   an error envelope on stderr. Either way the caller gets one [`Reply`] per operation;
//! * a [`Step`] pairs an operation with what it must answer ([`Expect`]), and a [`Transcript`]
//!   keeps the verdicts and the payloads later steps take their ids from;
//! * [`Running`] is a child process with its output collected on threads and a deadline, so a
//!   hung client fails its step instead of hanging the command.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::interop::write_key;
use crate::project_root;

/// The most one client process may take before it is killed and its step failed. A step that
/// answers normally takes a second or two; this only bounds a hung client.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The wrappers the kit's installer puts in `$CLIENTS_DIR/bin`.
const WRAPPERS: [&str; 5] = [
    "mcp-py-client",
    "mcp-sdk-client",
    "mcp-inspector",
    "mcp-conformance",
    "mcp-conformance-alpha",
];

/// The installed clients.
pub(crate) struct ClientKit {
    bin: PathBuf,
}

impl ClientKit {
    /// Finds the installed clients, running the kit's installer when they are missing. `Err`
    /// carries the reason the stage cannot run (no kit, no npm, no Python, the installer
    /// failed); a failure to even start a process is an `anyhow` error.
    pub(crate) fn locate_or_install() -> anyhow::Result<Result<ClientKit, String>> {
        let clients_dir = std::env::var_os("CLIENTS_DIR")
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|home| PathBuf::from(home).join(".cache/bernstein-mcp/clients"))
            })
            .unwrap_or_else(|| PathBuf::from(".cache/bernstein-mcp/clients"));
        let kit = ClientKit {
            bin: clients_dir.join("bin"),
        };
        if kit.is_complete() {
            return Ok(Ok(kit));
        }
        let kit_root = std::env::var_os("BERNSTEIN_REFERENCE_KIT")
            .map(|reference| PathBuf::from(reference).join(".."))
            .unwrap_or_else(|| project_root().join("../shared"));
        let installer = kit_root.join("clients/install.sh");
        if !installer.exists() {
            return Ok(Err(format!(
                "the MCP clients are not installed in {} and the kit's installer {} is missing \
                 (set BERNSTEIN_REFERENCE_KIT or CLIENTS_DIR)",
                clients_dir.display(),
                installer.display()
            )));
        }
        for (tool, probe) in [("npm", "--version"), ("python3", "--version")] {
            let runs = Command::new(tool)
                .arg(probe)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            if !runs {
                return Ok(Err(format!(
                    "the MCP clients are not installed and `{tool}` is not available to install them"
                )));
            }
        }
        eprintln!(
            "interop: installing the MCP clients with {} into {} (the first run downloads about 500 MB)",
            installer.display(),
            clients_dir.display()
        );
        let output = Command::new("bash")
            .arg(&installer)
            .env("CLIENTS_DIR", &clients_dir)
            .stdin(Stdio::null())
            .output()
            .context("run the clients installer")?;
        if !output.status.success() || !kit.is_complete() {
            return Ok(Err(format!(
                "the clients installer failed ({}):\n{}",
                output.status,
                tail(&String::from_utf8_lossy(&output.stderr), 15)
            )));
        }
        Ok(Ok(kit))
    }

    fn is_complete(&self) -> bool {
        WRAPPERS.iter().all(|name| self.bin.join(name).exists())
    }

    pub(crate) fn wrapper(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The kit's Python, the virtualenv that holds the SDK `mcp`.
    pub(crate) fn python(&self) -> PathBuf {
        self.bin.join("../py/bin/python")
    }
}

/// A server command line, the environment it needs, and how clients reach it.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) endpoint: Endpoint,
}

/// How a client reaches the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// The client starts the server command line itself and talks over its stdio.
    Stdio,
    /// Streamable HTTP at `url` (`…/mcp`) of a server already listening.
    Http { url: String, token: Option<String> },
    /// The SSE transport at `url` (`…/sse`) of a server already listening.
    Sse { url: String, token: Option<String> },
}

/// A `--transport http` server on a free loopback port, stopped (SIGINT, then SIGKILL) when
/// dropped.
pub(crate) struct HttpServer {
    child: Child,
    base: String,
}

impl HttpServer {
    /// Starts `program args --transport http --host 127.0.0.1 --port P` with `env` added and
    /// waits until it accepts connections. Its log goes to `log` when given, else nowhere.
    pub(crate) fn start(
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: Option<&Path>,
    ) -> anyhow::Result<HttpServer> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let stderr = match log {
            Some(path) => Stdio::from(
                std::fs::File::create(path)
                    .with_context(|| format!("create {}", path.display()))?,
            ),
            None => Stdio::null(),
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .args(["--transport", "http", "--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let mut child = command
            .spawn()
            .with_context(|| format!("start {}", program.display()))?;
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let log_tail = log
                    .and_then(|path| std::fs::read_to_string(path).ok())
                    .map(|text| tail(&text, 10))
                    .unwrap_or_default();
                bail!("{} exited with {status}:\n{log_tail}", program.display());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "{} did not listen on {address} within 60 s",
                    program.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(HttpServer {
            child,
            base: format!("http://{address}"),
        })
    }

    /// The streamable HTTP endpoint, `http://127.0.0.1:P/mcp`.
    pub(crate) fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The SSE transport's stream endpoint, `http://127.0.0.1:P/sse`.
    pub(crate) fn sse_url(&self) -> String {
        format!("{}/sse", self.base)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        // SIGINT first, so the server drains its in-flight calls; then for sure.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `bernstein-mcp --workdir <project> --mcp-tier all` with the audit key of `project`.
    pub(crate) fn bernstein_mcp(binary: &Path, project: &Project) -> Server {
        Server {
            program: binary.to_path_buf(),
            args: vec![
                "--workdir".to_owned(),
                project.root.display().to_string(),
                "--mcp-tier".to_owned(),
                "all".to_owned(),
            ],
            env: vec![(
                "BERNSTEIN_AUDIT_KEY_PATH".to_owned(),
                project.key.display().to_string(),
            )],
            endpoint: Endpoint::Stdio,
        }
    }

    /// Serves this command line over HTTP (adding `BERNSTEIN_MCP_TOKEN` when `token` is given,
    /// logging to `log`) and returns the listener with this server pointed at its `/mcp`, or at
    /// its `/sse` when `sse`.
    pub(crate) fn over_http(
        &self,
        token: Option<&str>,
        sse: bool,
        log: &Path,
    ) -> anyhow::Result<(HttpServer, Server)> {
        let mut env = self.env.clone();
        if let Some(token) = token {
            env.push(("BERNSTEIN_MCP_TOKEN".to_owned(), token.to_owned()));
        }
        let listener = HttpServer::start(&self.program, &self.args, &env, Some(log))?;
        let token = token.map(str::to_owned);
        let endpoint = if sse {
            Endpoint::Sse {
                url: listener.sse_url(),
                token,
            }
        } else {
            Endpoint::Http {
                url: listener.url(),
                token,
            }
        };
        let server = Server {
            endpoint,
            ..self.clone()
        };
        Ok((listener, server))
    }

    /// The command line as one POSIX-shell string, the form `mcp-py-client` and
    /// `mcp-sdk-client` split again.
    fn command_line(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .map(|word| shell_quote(&word))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Quotes `word` for a POSIX shell, leaving plain words as they are.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// A scratch Bernstein project: a directory holding `.sdd/`, and its own 0600 audit key.
#[derive(Debug, Clone)]
pub(crate) struct Project {
    pub(crate) root: PathBuf,
    pub(crate) key: PathBuf,
}

impl Project {
    /// Creates `<dir>/project/.sdd` and `<dir>/audit.key`.
    pub(crate) fn create(dir: &Path) -> anyhow::Result<Project> {
        let root = dir.join("project");
        std::fs::create_dir_all(root.join(".sdd"))
            .with_context(|| format!("create {}", root.display()))?;
        let key = dir.join("audit.key");
        write_key(&key)?;
        Ok(Project { root, key })
    }
}

/// One MCP client in one protocol mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Client {
    /// `mcp-py-client` (Python SDK 2.3.0): `legacy`, `auto` or `2026-07-28`.
    Python(&'static str),
    /// `mcp-sdk-client` (TypeScript SDK 1.32.2): the initialize handshake only.
    TypeScript,
    /// `mcp-inspector --cli` (Inspector 2.12): `legacy` or `modern`; one process per request.
    Inspector(&'static str),
}

impl Client {
    pub(crate) fn wrapper(self) -> &'static str {
        match self {
            Client::Python(_) => "mcp-py-client",
            Client::TypeScript => "mcp-sdk-client",
            Client::Inspector(_) => "mcp-inspector",
        }
    }

    pub(crate) fn mode(self) -> &'static str {
        match self {
            Client::Python(mode) | Client::Inspector(mode) => mode,
            Client::TypeScript => "legacy",
        }
    }

    /// `<wrapper> <mode>`, the label of the summary line.
    pub(crate) fn label(self) -> String {
        format!("{} {}", self.wrapper(), self.mode())
    }

    /// The protocol version the client should end up on.
    pub(crate) fn negotiated_version(self) -> &'static str {
        match self {
            Client::Python("legacy") | Client::TypeScript | Client::Inspector("legacy") => {
                "2025-11-25"
            }
            _ => "2026-07-28",
        }
    }

    /// Whether the client can send this operation at all.
    fn supports(self, op: &Op) -> bool {
        match (self, op) {
            (Client::Inspector(_), Op::Info | Op::Request { .. }) => false,
            (Client::Python(mode), Op::Request { .. }) => mode == "legacy",
            (Client::TypeScript, Op::Request { .. }) => false,
            _ => true,
        }
    }

    /// Runs `ops` in order against `server` and returns one reply per operation. The SDK
    /// drivers run them on one connection; Inspector starts one connection per operation.
    pub(crate) fn run(self, kit: &ClientKit, server: &Server, ops: &[Op]) -> Vec<Reply> {
        match self {
            Client::Inspector(_) => ops
                .iter()
                .map(|op| match self.spawn_inspector(kit, server, op) {
                    Ok(running) => inspector_reply(running.finish()),
                    Err(err) => Reply::failed(format!("cannot start {}: {err:#}", self.wrapper())),
                })
                .collect(),
            Client::Python(_) | Client::TypeScript => self.run_sdk_driver(kit, server, ops),
        }
    }

    fn run_sdk_driver(self, kit: &ClientKit, server: &Server, ops: &[Op]) -> Vec<Reply> {
        if ops.is_empty() {
            return Vec::new();
        }
        let mut command = match (&server.endpoint, self) {
            (Endpoint::Sse { .. }, Client::Python(_)) => {
                // The kit's driver with the SDK's `sse_client` put in for streamable HTTP.
                let mut command = Command::new(kit.python());
                command
                    .arg(project_root().join("xtask/assets/py_sse_client.py"))
                    .arg(kit.wrapper("py_client.py"));
                command
            }
            (Endpoint::Sse { .. }, _) => {
                let message = format!("{} has no SSE transport", self.wrapper());
                return ops.iter().map(|_| Reply::failed(message.clone())).collect();
            }
            _ => Command::new(kit.wrapper(self.wrapper())),
        };
        command.arg("--timeout").arg("90");
        let (transport, target, token) = match &server.endpoint {
            Endpoint::Stdio => {
                for (name, value) in &server.env {
                    command.arg("--env").arg(format!("{name}={value}"));
                }
                ("stdio", server.command_line(), None)
            }
            Endpoint::Http { url, token } | Endpoint::Sse { url, token } => {
                ("http", url.clone(), token.as_deref())
            }
        };
        if let Some(token) = token {
            command.arg("--token").arg(token);
        }
        command.arg(transport);
        if let Client::Python(mode) = self {
            command.arg(mode);
        }
        command.arg(target);
        for op in ops {
            command.arg(op.driver_json().to_string());
        }
        match Running::spawn(&mut command, CLIENT_TIMEOUT) {
            Ok(running) => sdk_driver_replies(&running.finish(), ops.len()),
            Err(err) => {
                let message = format!("cannot start {}: {err:#}", self.wrapper());
                ops.iter().map(|_| Reply::failed(message.clone())).collect()
            }
        }
    }

    /// Starts one Inspector process for `op`; it may be left running in the background.
    pub(crate) fn spawn_inspector(
        self,
        kit: &ClientKit,
        server: &Server,
        op: &Op,
    ) -> anyhow::Result<Running> {
        let Some(method_args) = op.inspector_args() else {
            bail!("Inspector cannot send {}", op.label());
        };
        let mut command = Command::new(kit.wrapper("mcp-inspector"));
        command.args([
            "--cli",
            "--protocol-era",
            self.mode(),
            "--format",
            "json",
            "-q",
        ]);
        match &server.endpoint {
            Endpoint::Stdio => {
                for (name, value) in &server.env {
                    command.arg("-e").arg(format!("{name}={value}"));
                }
                command.args(method_args).arg("--").arg(&server.program);
                command.args(&server.args);
            }
            Endpoint::Http { url, token } | Endpoint::Sse { url, token } => {
                let transport = if matches!(server.endpoint, Endpoint::Sse { .. }) {
                    "sse"
                } else {
                    "http"
                };
                // The URL goes before the method's flags: `--prompt-args` takes every word
                // after it, so a URL after it would be read as one more argument.
                command.arg(url).args(["--transport", transport]);
                if let Some(token) = token {
                    command
                        .arg("--header")
                        .arg(format!("Authorization: Bearer {token}"));
                }
                command.args(method_args);
            }
        }
        Running::spawn(&mut command, CLIENT_TIMEOUT)
    }
}

/// One request a client sends.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// The negotiated version, server info and capabilities (SDK drivers only).
    Info,
    /// `tools/list`.
    ListTools,
    /// `prompts/list`.
    ListPrompts,
    /// `prompts/get` with string arguments.
    GetPrompt {
        name: &'static str,
        arguments: Vec<(&'static str, &'static str)>,
    },
    /// `resources/read`.
    ReadResource(&'static str),
    /// `tools/call`.
    CallTool {
        name: &'static str,
        arguments: Value,
    },
    /// Any other request, sent raw (`mcp-py-client` only).
    Request { method: &'static str, params: Value },
}

impl Op {
    pub(crate) fn call(name: &'static str, arguments: Value) -> Op {
        Op::CallTool { name, arguments }
    }

    /// What the step is called in reports.
    pub(crate) fn label(&self) -> String {
        match self {
            Op::Info => "info".to_owned(),
            Op::ListTools => "tools/list".to_owned(),
            Op::ListPrompts => "prompts/list".to_owned(),
            Op::GetPrompt { name, .. } => format!("prompts/get {name}"),
            Op::ReadResource(uri) => format!("resources/read {uri}"),
            Op::CallTool { name, .. } => (*name).to_owned(),
            Op::Request { method, .. } => (*method).to_owned(),
        }
    }

    /// The operation in the `mcp-py-client` / `mcp-sdk-client` vocabulary.
    fn driver_json(&self) -> Value {
        match self {
            Op::Info => json!({"op": "info"}),
            Op::ListTools => json!({"op": "list_tools"}),
            Op::ListPrompts => json!({"op": "list_prompts"}),
            Op::GetPrompt { name, arguments } => {
                let arguments: serde_json::Map<String, Value> = arguments
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
                    .collect();
                json!({"op": "get_prompt", "name": name, "arguments": arguments})
            }
            Op::ReadResource(uri) => json!({"op": "read_resource", "uri": uri}),
            Op::CallTool { name, arguments } => {
                json!({"op": "call_tool", "name": name, "arguments": arguments})
            }
            Op::Request { method, params } => {
                json!({"op": "request", "method": method, "params": params})
            }
        }
    }

    /// The operation as Inspector `--cli` flags, when Inspector can send it.
    fn inspector_args(&self) -> Option<Vec<String>> {
        let owned = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        Some(match self {
            Op::Info | Op::Request { .. } => return None,
            Op::ListTools => owned(&["--method", "tools/list"]),
            Op::ListPrompts => owned(&["--method", "prompts/list"]),
            Op::GetPrompt { name, arguments } => {
                let mut args = owned(&["--method", "prompts/get", "--prompt-name", name]);
                if !arguments.is_empty() {
                    args.push("--prompt-args".to_owned());
                    args.extend(arguments.iter().map(|(k, v)| format!("{k}={v}")));
                }
                args
            }
            Op::ReadResource(uri) => owned(&["--method", "resources/read", "--uri", uri]),
            Op::CallTool { name, arguments } => {
                let mut args = owned(&["--method", "tools/call", "--tool-name", name]);
                args.push("--tool-args-json".to_owned());
                args.push(arguments.to_string());
                args
            }
        })
    }
}

/// What a client reported for one operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    /// No protocol error: the client got a result it accepted.
    pub(crate) ok: bool,
    /// The result as the server sent it, or the client's error report.
    pub(crate) body: Value,
}

impl Reply {
    pub(crate) fn failed(message: String) -> Reply {
        Reply {
            ok: false,
            body: json!({"message": message}),
        }
    }
}

/// The replies `mcp-py-client` / `mcp-sdk-client` printed, one JSON document per line, in
/// operation order. Missing lines (a crash, a refused connection) become failed replies that
/// carry the driver's own explanation.
fn sdk_driver_replies(finished: &Finished, expected: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = Vec::new();
    let mut connect_error = None;
    for line in finished.stdout.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(document) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if document.get("op").and_then(Value::as_str) == Some("connect") {
            connect_error = document.get("error").cloned();
            continue;
        }
        let ok = document.get("ok").and_then(Value::as_bool) == Some(true);
        let body = if ok {
            document.get("result").cloned().unwrap_or(Value::Null)
        } else {
            document.get("error").cloned().unwrap_or(document)
        };
        replies.push(Reply { ok, body });
    }
    while replies.len() < expected {
        let why = match &connect_error {
            Some(error) => format!("the client could not connect: {error}"),
            None => format!(
                "no answer ({}); stderr: {}",
                finished.describe_exit(),
                tail(&finished.stderr, 6)
            ),
        };
        replies.push(Reply::failed(why));
    }
    replies.truncate(expected);
    replies
}

/// The reply of one Inspector run: `{"result": …}` on stdout when it succeeded, an error
/// envelope on stderr when it did not.
pub(crate) fn inspector_reply(finished: Finished) -> Reply {
    let stdout = serde_json::from_str::<Value>(finished.stdout.trim()).ok();
    if finished.succeeded()
        && let Some(result) = stdout.as_ref().and_then(|d| d.get("result"))
    {
        return Reply {
            ok: true,
            body: result.clone(),
        };
    }
    let error = serde_json::from_str::<Value>(finished.stderr.trim())
        .ok()
        .and_then(|d| d.get("error").cloned());
    match error {
        Some(error) => Reply {
            ok: false,
            body: error,
        },
        None => Reply::failed(format!(
            "{}; stdout: {}; stderr: {}",
            finished.describe_exit(),
            tail(&finished.stdout, 4),
            tail(&finished.stderr, 6)
        )),
    }
}

/// The payload of a tool result: the first text block parsed as JSON, with the
/// `{"result": …, "_meter": …}` envelope stripped. `Err` for a protocol failure or an
/// `isError` result.
pub(crate) fn tool_payload(reply: &Reply) -> Result<Value, String> {
    if reply.body.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = refusal_payload(reply)
            .map(|payload| payload.to_string())
            .unwrap_or_default();
        return Err(format!("isError: {}", shorten(&text, 300)));
    }
    refusal_payload(reply)
}

/// The payload of a tool result whatever its `isError`: a refusal is answered with
/// `isError: true` and its structured payload, which an expected refusal is judged on.
fn refusal_payload(reply: &Reply) -> Result<Value, String> {
    if !reply.ok {
        return Err(format!("protocol error: {}", brief(&reply.body)));
    }
    let text = reply
        .body
        .get("content")
        .and_then(Value::as_array)
        .and_then(|blocks| blocks.first())
        .and_then(|block| block.get("text"))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no text content in {}", brief(&reply.body)))?;
    let parsed: Value = serde_json::from_str(text).unwrap_or_else(|_| Value::from(text));
    Ok(match parsed {
        Value::Object(mut envelope) if envelope.contains_key("_meter") => {
            envelope.remove("result").unwrap_or(Value::Null)
        }
        other => other,
    })
}

/// The tool-level refusal a payload carries (`{"error": "...", …}`), if any.
pub(crate) fn refusal(payload: &Value) -> Option<&str> {
    payload.get("error").and_then(Value::as_str)
}

/// A check on a result or payload: a short observation for the report, or why it failed.
pub(crate) type Check = Box<dyn Fn(&Value) -> Result<String, String>>;

/// How a step's answer is judged.
pub(crate) enum Expect {
    /// A non-tool request: its result must satisfy the check.
    Result(Check),
    /// A tool call: no error, and the payload must satisfy the check.
    Payload(Check),
    /// A tool call the server must refuse, with an `error` starting with this text.
    Refusal(&'static str),
}

impl Expect {
    pub(crate) fn result(check: impl Fn(&Value) -> Result<String, String> + 'static) -> Expect {
        Expect::Result(Box::new(check))
    }

    pub(crate) fn payload(check: impl Fn(&Value) -> Result<String, String> + 'static) -> Expect {
        Expect::Payload(Box::new(check))
    }
}

/// One request of a script and what it must answer.
pub(crate) struct Step {
    pub(crate) key: &'static str,
    pub(crate) op: Op,
    pub(crate) expect: Expect,
}

impl Step {
    pub(crate) fn new(key: &'static str, op: Op, expect: Expect) -> Step {
        Step { key, op, expect }
    }
}

/// The verdict on one step.
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub(crate) label: String,
    pub(crate) outcome: Result<String, String>,
}

/// Judges `reply` against `step`; on success returns the observation and, for tool calls, the
/// payload.
pub(crate) fn judge(step: &Step, reply: &Reply) -> (Result<String, String>, Option<Value>) {
    match &step.expect {
        Expect::Result(check) => {
            if !reply.ok {
                return (Err(format!("protocol error: {}", brief(&reply.body))), None);
            }
            (check(&reply.body), Some(reply.body.clone()))
        }
        Expect::Payload(check) => match tool_payload(reply) {
            Err(err) => (Err(err), None),
            Ok(payload) => match refusal(&payload) {
                Some(error) => (
                    Err(format!("refused: {error}: {}", brief(&payload))),
                    Some(payload),
                ),
                None => (check(&payload), Some(payload)),
            },
        },
        Expect::Refusal(prefix) => match refusal_payload(reply) {
            // Inspector's CLI reports an `isError` result as its own error, `tool_is_error`,
            // and drops the payload: the refusal reached the client as an error, which is what
            // the server promises, but its text cannot be checked through this client.
            Err(_) if !reply.ok && reply.body.get("code") == Some(&json!("tool_is_error")) => (
                Ok(format!(
                    "refused as an isError result ({prefix}; payload not shown by this client)"
                )),
                None,
            ),
            Err(err) => (Err(err), None),
            Ok(payload) => match refusal(&payload) {
                // A refusal is an error result (`isError: true`), beyond the reference.
                Some(error)
                    if error.starts_with(prefix)
                        && reply.body.get("isError").and_then(Value::as_bool) != Some(true) =>
                {
                    (
                        Err(format!(
                            "refused with {error:?} but not as an isError result"
                        )),
                        Some(payload),
                    )
                }
                Some(error) if error.starts_with(prefix) => {
                    (Ok(format!("refused as expected ({prefix})")), Some(payload))
                }
                Some(error) => (
                    Err(format!("refused with {error:?}, expected {prefix:?}")),
                    Some(payload),
                ),
                None => (
                    Err(format!(
                        "answered {} where a refusal was expected",
                        brief(&payload)
                    )),
                    Some(payload),
                ),
            },
        },
    }
}

/// The verdicts of a run, and the payloads of the steps that passed, by key.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    pub(crate) verdicts: Vec<Verdict>,
    pub(crate) payloads: BTreeMap<&'static str, Value>,
}

impl Transcript {
    /// Runs the steps `client` supports, in order, and records their verdicts.
    pub(crate) fn run(&mut self, client: Client, kit: &ClientKit, server: &Server, steps: &[Step]) {
        let steps: Vec<&Step> = steps.iter().filter(|s| client.supports(&s.op)).collect();
        let ops: Vec<Op> = steps.iter().map(|s| s.op.clone()).collect();
        let replies = client.run(kit, server, &ops);
        for (step, reply) in steps.iter().zip(&replies) {
            self.record(step, reply);
        }
    }

    /// Records the verdict on one reply.
    pub(crate) fn record(&mut self, step: &Step, reply: &Reply) {
        let (outcome, payload) = judge(step, reply);
        if outcome.is_ok()
            && let Some(payload) = payload
        {
            self.payloads.insert(step.key, payload);
        }
        self.verdicts.push(Verdict {
            label: step.op.label(),
            outcome,
        });
    }

    /// Records a check made outside any client (an offline verifier, say).
    pub(crate) fn note(&mut self, label: impl Into<String>, outcome: Result<String, String>) {
        self.verdicts.push(Verdict {
            label: label.into(),
            outcome,
        });
    }

    /// A string field of a recorded payload.
    pub(crate) fn text(&self, key: &str, field: &str) -> Option<String> {
        self.payloads
            .get(key)
            .and_then(|p| p.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    pub(crate) fn passed(&self) -> usize {
        self.verdicts.iter().filter(|v| v.outcome.is_ok()).count()
    }

    pub(crate) fn failures(&self) -> impl Iterator<Item = (&str, &str)> {
        self.verdicts.iter().filter_map(|v| match &v.outcome {
            Err(why) => Some((v.label.as_str(), why.as_str())),
            Ok(_) => None,
        })
    }
}

/// A running child process whose output is collected on two threads, so neither pipe can fill
/// up and stall it.
pub(crate) struct Running {
    child: Child,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
    deadline: Instant,
}

/// How a child process ended.
#[derive(Debug, Clone, Default)]
pub(crate) struct Finished {
    pub(crate) status: Option<ExitStatus>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) timed_out: bool,
}

impl Finished {
    pub(crate) fn succeeded(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    pub(crate) fn describe_exit(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "killed after the time limit".to_owned(),
            (false, Some(status)) => status.to_string(),
            (false, None) => "no exit status".to_owned(),
        }
    }
}

impl Running {
    /// Starts `command` with stdin closed and stdout and stderr collected, to be killed if it
    /// is still running `timeout` from now when [`Running::finish`] waits for it.
    pub(crate) fn spawn(command: &mut Command, timeout: Duration) -> anyhow::Result<Running> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("start {:?}", command.get_program()))?;
        let stdout = collect(child.stdout.take());
        let stderr = collect(child.stderr.take());
        Ok(Running {
            child,
            stdout,
            stderr,
            deadline: Instant::now() + timeout,
        })
    }

    /// Waits for the process, killing it at its deadline.
    pub(crate) fn finish(mut self) -> Finished {
        let mut finished = Finished::default();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    finished.status = Some(status);
                    break;
                }
                Ok(None) if Instant::now() < self.deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(None) | Err(_) => {
                    finished.timed_out = true;
                    let _ = self.child.kill();
                    finished.status = self.child.wait().ok();
                    break;
                }
            }
        }
        finished.stdout = String::from_utf8_lossy(&self.stdout.join().unwrap_or_default()).into();
        finished.stderr = String::from_utf8_lossy(&self.stderr.join().unwrap_or_default()).into();
        finished
    }
}

fn collect<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buffer = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buffer);
        }
        buffer
    })
}

/// The last `lines` lines of `text`, for error reports.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `value` as compact JSON, cut to a readable length.
pub(crate) fn brief(value: &Value) -> String {
    shorten(&value.to_string(), 400)
}

pub(crate) fn shorten(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A string field of a payload, or an error naming it.
pub(crate) fn field<'a>(payload: &'a Value, name: &str) -> Result<&'a str, String> {
    payload
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("no string {name:?} in {}", brief(payload)))
}

/// Requires `payload[name] == want`.
pub(crate) fn field_is(payload: &Value, name: &str, want: &Value) -> Result<String, String> {
    match payload.get(name) {
        Some(got) if got == want => Ok(format!("{name}={want}")),
        got => Err(format!(
            "{name} is {}, expected {want}: {}",
            got.map_or_else(|| "missing".to_owned(), Value::to_string),
            brief(payload)
        )),
    }
}

/// `bernstein-mcp verify` over `project` with `receipts`: the observation, or why it failed.
pub(crate) fn verify_project(
    binary: &Path,
    project: &Project,
    receipts: &[PathBuf],
) -> Result<String, String> {
    let mut command = Command::new(binary);
    command
        .args(["verify", "--workdir"])
        .arg(&project.root)
        .arg("--key-file")
        .arg(&project.key);
    for receipt in receipts {
        command.arg("--receipt").arg(receipt);
    }
    exit_zero(&mut command, "bernstein-mcp verify")
}

/// Runs `command` and requires exit 0; on failure the error carries the tail of its output.
pub(crate) fn exit_zero(command: &mut Command, what: &str) -> Result<String, String> {
    let finished = Running::spawn(command, CLIENT_TIMEOUT)
        .map_err(|err| format!("cannot run {what}: {err:#}"))?
        .finish();
    if finished.succeeded() {
        Ok("exit 0".to_owned())
    } else {
        Err(format!(
            "{what} {}:\n{}\n{}",
            finished.describe_exit(),
            tail(&finished.stdout, 20),
            tail(&finished.stderr, 10)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        let check = |word: &str, expect: &str| assert_eq!(shell_quote(word), expect, "{word:?}");
        check("/tmp/bernstein-mcp", "/tmp/bernstein-mcp");
        check("--workdir", "--workdir");
        check("a b", "'a b'");
        check("it's", r"'it'\''s'");
        check("", "''");
    }

    #[test]
    fn tool_payloads_lose_the_meter_envelope() {
        let reply = |text: &str, is_error: bool| Reply {
            ok: true,
            body: json!({"content": [{"type": "text", "text": text}], "isError": is_error}),
        };
        let check = |reply: Reply, expect: Result<Value, &str>| {
            let got = tool_payload(&reply);
            match expect {
                Ok(value) => assert_eq!(got, Ok(value)),
                Err(prefix) => assert!(
                    got.as_ref().is_err_and(|e| e.starts_with(prefix)),
                    "{got:?}"
                ),
            }
        };
        check(
            reply(r#"{"result": {"a": 1}, "_meter": {"ok": true}}"#, false),
            Ok(json!({"a": 1})),
        );
        check(reply(r#"{"a": 1}"#, false), Ok(json!({"a": 1})));
        check(reply("plain words", false), Ok(json!("plain words")));
        check(reply(r#"{"a": 1}"#, true), Err("isError"));
        check(
            Reply {
                ok: false,
                body: json!({"code": -32602}),
            },
            Err("protocol error"),
        );
    }

    #[test]
    fn expectations_tell_refusals_from_answers() {
        let answer = |payload: Value| Reply {
            ok: true,
            body: json!({"content": [{"type": "text", "text": json!({"result": payload, "_meter": {}}).to_string()}], "isError": false}),
        };
        let refused = Reply {
            ok: true,
            body: json!({"content": [{"type": "text", "text": json!({"result": {"error": "task_not_awaiting_approval"}, "_meter": {}}).to_string()}], "isError": true}),
        };
        let refused_as_success = answer(json!({"error": "task_not_awaiting_approval"}));
        let done = answer(json!({"status": "done"}));
        let expect_done = Step::new(
            "x",
            Op::call("t", json!({})),
            Expect::payload(|p| field_is(p, "status", &Value::from("done"))),
        );
        let expect_refusal = Step::new(
            "x",
            Op::call("t", json!({})),
            Expect::Refusal("task_not_awaiting"),
        );
        assert!(judge(&expect_done, &done).0.is_ok());
        assert!(judge(&expect_done, &refused).0.is_err());
        assert!(judge(&expect_refusal, &refused).0.is_ok());
        assert!(judge(&expect_refusal, &refused_as_success).0.is_err());
        assert!(judge(&expect_refusal, &done).0.is_err());
        // Inspector's CLI turns an isError result into its own `tool_is_error` error.
        let inspector_refused = Reply {
            ok: false,
            body: json!({"code": "tool_is_error", "message": "Tool 'bernstein_approve' returned isError:true."}),
        };
        assert!(judge(&expect_refusal, &inspector_refused).0.is_ok());
        assert!(judge(&expect_done, &inspector_refused).0.is_err());
    }

    #[test]
    fn driver_output_maps_to_replies_in_order() {
        let finished = |stdout: &str| Finished {
            stdout: stdout.to_owned(),
            ..Finished::default()
        };
        let replies = sdk_driver_replies(
            &finished(
                "{\"op\": \"info\", \"ok\": true, \"result\": {\"v\": 1}}\n\
                 {\"op\": \"call_tool\", \"ok\": false, \"error\": {\"code\": -32602}}\n",
            ),
            3,
        );
        assert_eq!(replies.len(), 3);
        assert_eq!(
            replies[0],
            Reply {
                ok: true,
                body: json!({"v": 1})
            }
        );
        assert_eq!(
            replies[1],
            Reply {
                ok: false,
                body: json!({"code": -32602})
            }
        );
        assert!(!replies[2].ok);
        let refused = sdk_driver_replies(
            &finished("{\"op\": \"connect\", \"ok\": false, \"error\": {\"message\": \"boom\"}}"),
            1,
        );
        assert!(
            refused[0].body["message"]
                .as_str()
                .is_some_and(|m| m.contains("boom"))
        );
    }

    #[test]
    fn inspector_flags_carry_each_request() {
        let check = |op: Op, expect: Option<&[&str]>| {
            let expect = expect.map(|words| words.iter().map(|w| (*w).to_owned()).collect());
            assert_eq!(op.inspector_args(), expect);
        };
        check(Op::Info, None);
        check(Op::ListTools, Some(&["--method", "tools/list"]));
        check(
            Op::GetPrompt {
                name: "cost_recap",
                arguments: vec![("window", "today")],
            },
            Some(&[
                "--method",
                "prompts/get",
                "--prompt-name",
                "cost_recap",
                "--prompt-args",
                "window=today",
            ]),
        );
        check(
            Op::call("load_skill", json!({"name": "x"})),
            Some(&[
                "--method",
                "tools/call",
                "--tool-name",
                "load_skill",
                "--tool-args-json",
                r#"{"name":"x"}"#,
            ]),
        );
    }
}
