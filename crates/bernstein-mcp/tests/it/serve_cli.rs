//! The default serve mode driven as a host drives it (stdin/stdout of the real binary), and
//! `audit calls` reading the call order those calls left in the chain.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::run;

/// Runs `bernstein-mcp [args]` in `project` with `lines` on stdin; returns the exit code and
/// the stdout lines parsed as JSON.
fn serve(
    home: &Path,
    project: &Path,
    args: &[&str],
    lines: &[String],
) -> (i32, Vec<Value>, String) {
    serve_with_env(home, project, args, &[], lines)
}

/// [`serve`] with `env` set on top of the cleared environment.
fn serve_with_env(
    home: &Path,
    project: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    lines: &[String],
) -> (i32, Vec<Value>, String) {
    let mut child = server_command(home, project, args)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for line in lines {
            stdin.write_all(line.as_bytes()).unwrap();
            stdin.write_all(b"\n").unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let messages = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("stdout is not protocol ({e}): {line}"))
        })
        .collect();
    (
        output.status.code().unwrap_or(-1),
        messages,
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `bernstein-mcp [args]` in `project`, with a cleared environment but `HOME` and
/// `XDG_STATE_HOME` under `home`, and stdin and stdout piped.
fn server_command(home: &Path, project: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"));
    command
        .args(args)
        .current_dir(project)
        .env_clear()
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    command
}

fn request(id: i64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

fn by_id(messages: &[Value], id: i64) -> &Value {
    messages
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no response {id} in {messages:?}"))
}

#[test]
fn serves_stdio_until_eof_and_the_call_order_is_provable() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut lines = vec![request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    )];
    for i in 0..4 {
        lines.push(request(
            10 + i,
            "tools/call",
            json!({"name": "bernstein_run_status", "arguments": {"run_id": format!("run-{i}")}}),
        ));
    }
    lines.push("not json at all".to_owned());
    lines.push(request(20, "ping", json!({})));
    let (code, messages, stderr) = serve(home.path(), &project, &[], &lines);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        by_id(&messages, 1)["result"]["serverInfo"]["name"],
        "bernstein"
    );
    for i in 0..4 {
        assert_eq!(by_id(&messages, 10 + i)["result"]["isError"], false);
    }
    assert!(messages.iter().any(|m| m["error"]["code"] == -32700));
    assert_eq!(by_id(&messages, 20)["result"], json!({}));
    // The key was created where the reference creates it.
    let key = home.path().join("state/bernstein/audit.key");
    assert!(key.is_file());

    let workdir = project.to_str().unwrap();
    let key_arg = key.to_str().unwrap();
    let out = run(
        &[
            "audit",
            "calls",
            "mcp-calls",
            "--workdir",
            workdir,
            "--key-file",
            key_arg,
            "--json",
        ],
        home.path(),
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let order: Value = serde_json::from_str(&out.stdout).unwrap();
    let indices: Vec<i64> = order["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call_index"].as_i64().unwrap())
        .collect();
    assert_eq!(indices, vec![0, 1, 2, 3]);
    // The calls ran concurrently, so their order is the anchoring order, not the id order:
    // every answered call's `_meter.call_id` is one recorded span, and no span is extra.
    let mut answered: Vec<String> = (0..4)
        .map(|i| {
            by_id(&messages, 10 + i)["result"]["structuredContent"]["_meter"]["call_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let mut recorded: Vec<String> = order["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["span_id"].as_str().unwrap().to_owned())
        .collect();
    answered.sort();
    recorded.sort();
    assert_eq!(answered, recorded);

    // Tamper with the entry of call 1: the command fails, naming that entry.
    let audit = project.join(".sdd/audit");
    let segment = std::fs::read_dir(&audit)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&segment).unwrap();
    let mut rows: Vec<String> = text.lines().map(str::to_owned).collect();
    let target = rows
        .iter()
        .position(|l| l.contains("\"call_index\": 1,"))
        .unwrap();
    rows[target] = rows[target].replace("\"method\": \"tools/call\"", "\"method\": \"tools/CALL\"");
    std::fs::write(&segment, rows.join("\n") + "\n").unwrap();
    let out = run(
        &[
            "audit",
            "calls",
            "mcp-calls",
            "--workdir",
            workdir,
            "--key-file",
            key_arg,
        ],
        home.path(),
    );
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let name = segment.file_name().unwrap().to_str().unwrap();
    assert!(
        out.stdout
            .contains(&format!("{name}:{}: HMAC mismatch", target + 1)),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("call_index 1 has no verified entry"),
        "{}",
        out.stdout
    );
}

#[test]
fn serve_flags_pick_the_project_and_the_tier() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    // The store opens on a thread of its own and a server may end before that open does, so
    // a call that needs the store shows which project was served, not `tools/list` alone.
    let lines = vec![
        request(1, "tools/list", json!({})),
        request(
            2,
            "tools/call",
            json!({"name": "bernstein_status", "arguments": {}}),
        ),
    ];
    let workdir = project.to_str().unwrap();
    let (code, messages, stderr) = serve(
        home.path(),
        home.path(),
        &["--workdir", workdir, "--mcp-tier", "core"],
        &lines,
    );
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = by_id(&messages, 1)["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["bernstein_run", "bernstein_status", "bernstein_run_status"]
    );
    let status = &by_id(&messages, 2)["result"];
    assert_eq!(status["isError"], json!(false), "{status}");
    assert!(
        project.join(".sdd").is_dir(),
        "the project under --workdir is served"
    );

    let (code, _, stderr) = serve(home.path(), home.path(), &["--mcp-tier", "everything"], &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("Unknown MCP tool tier 'everything'"),
        "{stderr}"
    );
}

/// One serve session with `env`: the advertised tool names, the capability card, the resource
/// URIs, and the text of one `bernstein_status` call and one badly typed `bernstein_run_status`.
struct Session {
    tools: Vec<String>,
    card: Value,
    resources: Vec<String>,
    status: String,
    bad_input: String,
    health: String,
}

fn session(home: &Path, project: &Path, env: &[(&str, &str)]) -> Session {
    let call = |id: i64, name: &str, arguments: Value| {
        request(
            id,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        )
    };
    let lines = vec![
        request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        ),
        request(2, "tools/list", json!({})),
        request(
            3,
            "resources/read",
            json!({"uri": "bernstein://capability"}),
        ),
        request(4, "resources/list", json!({})),
        call(5, "bernstein_status", json!({})),
        call(6, "bernstein_run_status", json!({"run_id": 5})),
        call(7, "bernstein_health", json!({})),
    ];
    let workdir = project.to_str().unwrap();
    let (code, messages, stderr) = serve_with_env(home, home, &["--workdir", workdir], env, &lines);
    assert_eq!(code, 0, "{stderr}");
    let text = |id: i64| {
        let result = &by_id(&messages, id)["result"];
        result["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| by_id(&messages, id).to_string())
    };
    let card = by_id(&messages, 3)["result"]["contents"][0]["text"]
        .as_str()
        .unwrap();
    Session {
        tools: by_id(&messages, 2)["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect(),
        card: serde_json::from_str(card).unwrap(),
        resources: by_id(&messages, 4)["result"]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap().to_owned())
            .collect(),
        status: text(5),
        bad_input: text(6),
        health: text(7),
    }
}

/// Every variable `serve` reads, set through the real binary's environment, changes what a host
/// sees: each against the default session.
#[test]
fn serve_reads_every_bernstein_variable() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    let default = session(home.path(), &project, &[]);
    assert!(default.tools.len() > 3, "{:?}", default.tools);
    assert!(
        default.status.contains("\"_meter\": {"),
        "{}",
        default.status
    );
    assert!(
        default
            .bad_input
            .contains("payload failed schema validation"),
        "{}",
        default.bad_input
    );
    assert!(
        !default.health.contains("Unknown tool"),
        "{}",
        default.health
    );
    assert!(default.resources.iter().any(|u| u == "lineage://stats"));
    assert_eq!(default.card["auth"]["bearer_token_configured"], false);
    assert_eq!(default.card["auth"]["oauth"]["enabled"], false);
    // Without BERNSTEIN_AUDIT_KEY_PATH the key lands under XDG_STATE_HOME.
    assert!(home.path().join("state").read_dir().is_ok());

    let tier = session(
        home.path(),
        &project,
        &[("BERNSTEIN_MCP_TOOL_TIER", "core")],
    );
    assert_eq!(
        tier.tools,
        vec!["bernstein_run", "bernstein_status", "bernstein_run_status"]
    );

    let meter = session(
        home.path(),
        &project,
        &[("BERNSTEIN_MCP_COST_METER", "off")],
    );
    assert!(!meter.status.contains("_meter"), "{}", meter.status);
    assert!(meter.status.starts_with('{'), "{}", meter.status);

    let aliases = session(
        home.path(),
        &project,
        &[("BERNSTEIN_MCP_DEPRECATED_ALIASES", "false")],
    );
    assert!(
        aliases.health.contains("Unknown tool"),
        "{}",
        aliases.health
    );

    let permissive = session(
        home.path(),
        &project,
        &[("BERNSTEIN_MCP_VALIDATION", "permissive")],
    );
    assert!(
        !permissive
            .bad_input
            .contains("payload failed schema validation"),
        "{}",
        permissive.bad_input
    );

    let lineage = session(
        home.path(),
        &project,
        &[("BERNSTEIN_LINEAGE_MCP_ENABLED", "0")],
    );
    assert!(
        !lineage
            .resources
            .iter()
            .any(|u| u.starts_with("lineage://"))
    );

    for variable in ["BERNSTEIN_MCP_TOKEN", "BERNSTEIN_MCP_AUTH_TOKEN"] {
        let auth = session(home.path(), &project, &[(variable, "secret")]);
        assert_eq!(
            auth.card["auth"]["bearer_token_configured"], true,
            "{variable}"
        );
    }
    let oauth = session(
        home.path(),
        &project,
        &[("BERNSTEIN_MCP_OAUTH_ISSUER", " https://issuer.example/ ")],
    );
    assert_eq!(oauth.card["auth"]["oauth"]["enabled"], true);
    assert_eq!(
        oauth.card["auth"]["oauth"]["issuer"],
        "https://issuer.example"
    );

    // BERNSTEIN_AUDIT_KEY_PATH: the key is created exactly there.
    let key = home.path().join("keys/explicit.key");
    session(
        home.path(),
        &project,
        &[("BERNSTEIN_AUDIT_KEY_PATH", key.to_str().unwrap())],
    );
    assert_eq!(std::fs::read(&key).unwrap().len(), 64);

    // BERNSTEIN_SERVER_URL and BERNSTEIN_AUTH_TOKEN: the status call goes to that server with
    // that bearer token. A loopback listener records the first request and answers 503.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader};
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_owned());
        }
        let mut stream = stream;
        let _ = stream.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        head
    });
    let remote = session(
        home.path(),
        &project,
        &[
            ("BERNSTEIN_SERVER_URL", url.as_str()),
            ("BERNSTEIN_AUTH_TOKEN", "remote-secret"),
        ],
    );
    let head = seen.join().unwrap();
    assert!(head[0].contains(" /"), "{head:?}");
    assert!(
        head.iter()
            .any(|h| h.eq_ignore_ascii_case("authorization: Bearer remote-secret")),
        "{head:?}"
    );
    assert!(!remote.status.contains("\"total\""), "{}", remote.status);
}

/// `--allow-root` (repeatable) turns workdir confinement on over stdio: the card says so, a
/// listed root is served and another project is refused with `{error, hint}`.
#[test]
fn allow_root_confines_workdir_arguments() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("p");
    let allowed = home.path().join("allowed");
    let stranger = home.path().join("stranger");
    for dir in [&project, &allowed, &stranger] {
        std::fs::create_dir_all(dir.join(".sdd")).unwrap();
    }
    let call = |id: i64, workdir: &Path| {
        request(
            id,
            "tools/call",
            json!({"name": "bernstein_shutdown_orchestrator",
                   "arguments": {"workdir": workdir.to_str().unwrap()}}),
        )
    };
    let lines = vec![
        request(
            1,
            "resources/read",
            json!({"uri": "bernstein://capability"}),
        ),
        call(2, &allowed),
        call(3, &stranger),
    ];
    let (code, messages, stderr) = serve(
        home.path(),
        &project,
        &["--allow-root", allowed.to_str().unwrap()],
        &lines,
    );
    assert_eq!(code, 0, "{stderr}");
    let card: Value = serde_json::from_str(
        by_id(&messages, 1)["result"]["contents"][0]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(card["workdir"]["confined"], true);
    assert_eq!(by_id(&messages, 2)["result"]["isError"], false);
    assert!(allowed.join(".sdd/runtime/signals/SHUTDOWN").is_file());
    let refused = &by_id(&messages, 3)["result"];
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("outside the roots"), "{text}");
    assert!(text.contains("\"hint\""), "{text}");
    assert!(!stranger.join(".sdd/runtime").exists());
}

/// The stdio server runs its calls on one runtime worker. A mutation that waits (here on the
/// task store's lock, held by another process) must hand that worker's other calls to another
/// thread instead of stalling them: a `ping` sent while `bernstein_run` waits is answered
/// first, and the mutation is answered once the lock is free.
#[test]
fn a_mutation_waiting_on_the_store_lock_does_not_stall_other_calls() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::MetadataExt;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("p");
    std::fs::create_dir_all(&project).unwrap();
    let mut child = server_command(
        home.path(),
        &project,
        &["--workdir", project.to_str().unwrap()],
    )
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (sender, answers) = mpsc::channel::<Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let message: Value = serde_json::from_str(&line.unwrap()).unwrap();
            if sender.send(message).is_err() {
                break;
            }
        }
    });
    let mut send = |line: String| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let next = |within: Duration| answers.recv_timeout(within);
    send(request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    ));
    assert_eq!(next(Duration::from_secs(30)).unwrap()["id"], 1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    // A status call opens the store, so its lock file exists before the test takes the lock.
    send(request(
        2,
        "tools/call",
        json!({"name": "bernstein_status", "arguments": {}}),
    ));
    let status = next(Duration::from_secs(30)).unwrap();
    assert_eq!(status["id"], 2);
    assert_eq!(status["result"]["isError"], json!(false), "{status}");

    let lock_path = project.join(".sdd/runtime/tasks.jsonl.lock");
    let held = std::fs::File::open(&lock_path).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    send(request(
        3,
        "tools/call",
        json!({"name": "bernstein_run", "arguments": {"goal": "wait for the lock"}}),
    ));
    // Wait (bounded) until the server is blocked on the lock: /proc/locks lists a waiter.
    let inode = format!(":{} ", std::fs::metadata(&lock_path).unwrap().ino());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|line| line.contains("->") && line.contains(&inode))
    {
        assert!(
            Instant::now() < deadline,
            "bernstein_run never waited on the store's lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    send(request(4, "ping", json!({})));
    let first = next(Duration::from_secs(20))
        .expect("a ping sent while a mutation waits on the store lock was not answered");
    assert_eq!(
        first["id"], 4,
        "the ping is answered while the mutation waits: {first}"
    );

    drop(held);
    let run = next(Duration::from_secs(30)).expect("the mutation was never answered");
    assert_eq!(run["id"], 3);
    assert_eq!(run["result"]["isError"], json!(false), "{run}");
    // Closing stdin ends the session.
    drop(stdin);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
}
