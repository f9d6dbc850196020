//! `bernstein-mcp doctor` against a healthy project, a world-readable key, a missing `.sdd`,
//! and task servers that are down, refuse the bearer or accept it; it never changes the tree.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use serde_json::Value;

/// Every file and directory under `root`, with its size, mode and modification time.
fn tree(root: &Path) -> BTreeMap<PathBuf, (u64, u32, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            }
            out.insert(
                entry.path(),
                (
                    meta.len(),
                    meta.permissions().mode(),
                    meta.modified().unwrap(),
                ),
            );
        }
    }
    out
}

struct Setup {
    home: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("project")).unwrap();
        Setup { home }
    }

    fn project(&self) -> PathBuf {
        self.home.path().join("project")
    }

    fn key(&self) -> PathBuf {
        self.home.path().join(".local/state/bernstein/audit.key")
    }

    /// Serves a few calls, so the project has `.sdd/`, a key and an anchoring run.
    fn serve_calls(&self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .current_dir(self.project())
            .env_clear()
            .env("HOME", self.home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        for i in 0..3 {
            writeln!(
                stdin,
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"bernstein_run_status","arguments":{{"run_id":"r{i}"}}}}}}"#
            )
            .unwrap();
        }
        drop(stdin);
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 3);
    }

    /// Runs `doctor --json` with `args` and `env`; the exit code and the parsed report.
    fn doctor(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
        let output = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
            .args(["doctor", "--json", "--workdir"])
            .arg(self.project())
            .args(args)
            .env_clear()
            .env("HOME", self.home.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let report = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&output.stderr)));
        (output.status.code().unwrap_or(-1), report)
    }

    /// The report with the scratch directory and the clock replaced by stable markers.
    fn normalised(&self, report: &Value) -> Value {
        let home = self.home.path().to_str().unwrap();
        let text = report.to_string().replace(home, "[HOME]");
        let mut value: Value = serde_json::from_str(&text).unwrap();
        for check in value["checks"].as_array_mut().unwrap() {
            if check["name"] == "clock" {
                check["detail"]["now"] = "[now]".into();
                check["summary"] = "[now] (UTC)".into();
            }
        }
        value
    }
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

#[test]
fn a_healthy_project_passes_and_nothing_changes() {
    let setup = Setup::new();
    setup.serve_calls();
    let before = tree(setup.home.path());
    let (code, report) = setup.doctor(&[], &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(tree(setup.home.path()), before);
    assert_eq!(report["healthy"], true);
    assert_eq!(check(&report, "anchoring_run")["detail"]["calls"], 3);
    insta::assert_json_snapshot!("doctor_healthy", setup.normalised(&report));

    // The human report says the same, one line a check.
    let output = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
        .args(["doctor", "--workdir"])
        .arg(setup.project())
        .env_clear()
        .env("HOME", setup.home.path())
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains(": healthy"), "{text}");
    assert!(text.contains("ok       audit_key"), "{text}");
}

#[test]
fn a_world_readable_key_is_a_problem_with_its_fix() {
    let setup = Setup::new();
    setup.serve_calls();
    std::fs::set_permissions(setup.key(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = tree(setup.home.path());
    let (code, report) = setup.doctor(&[], &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(tree(setup.home.path()), before);
    let key = check(&report, "audit_key");
    assert_eq!(key["status"], "problem");
    assert_eq!(key["detail"]["mode"], "0644");
    assert_eq!(
        key["fix"],
        format!("chmod 600 {}", setup.key().display()).as_str()
    );
    insta::assert_json_snapshot!("doctor_key_0644", setup.normalised(&report));
}

#[test]
fn a_missing_sdd_and_key_are_problems_and_doctor_creates_neither() {
    let setup = Setup::new();
    let before = tree(setup.home.path());
    let (code, report) = setup.doctor(&[], &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(tree(setup.home.path()), before);
    assert!(!setup.key().exists() && !setup.project().join(".sdd").exists());
    let sdd = check(&report, "sdd");
    assert_eq!(sdd["status"], "problem");
    assert!(sdd["fix"].as_str().unwrap().contains("--workdir"), "{sdd}");
    assert_eq!(check(&report, "audit_key")["status"], "problem");
    assert_eq!(check(&report, "anchoring_run")["status"], "ok");
}

#[test]
fn an_unreachable_task_server_is_a_problem() {
    let setup = Setup::new();
    setup.serve_calls();
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let (code, report) = setup.doctor(&["--server-url", &url], &[]);
    assert_eq!(code, 1, "{report}");
    let server = check(&report, "task_server");
    assert_eq!(server["status"], "problem");
    assert_eq!(server["detail"]["reachable"], false);
    assert!(
        server["summary"]
            .as_str()
            .unwrap()
            .starts_with("cannot reach the task server"),
        "{server}"
    );
    assert!(server["fix"].as_str().unwrap().contains("bernstein serve"));
}

/// A loopback stand-in for a task server: `/health` is public, `/status` wants `Bearer good`,
/// the agent card names a version. Serves `connections` connections, then stops.
fn fake_task_server(connections: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut authorised = false;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                authorised |= header
                    .trim()
                    .eq_ignore_ascii_case("authorization: Bearer good");
            }
            let path = request_line.split(' ').nth(1).unwrap_or("");
            let (status, body) = match path {
                "/health" => ("200 OK", r#"{"status":"ok"}"#),
                "/status" if authorised => ("200 OK", r#"{"open":0}"#),
                "/status" => ("401 Unauthorized", r#"{"detail":"Missing header"}"#),
                "/.well-known/agent.json" => ("200 OK", r#"{"version":"3.23.0"}"#),
                _ => ("404 Not Found", "{}"),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
fn the_task_server_bearer_and_version_are_checked() {
    let setup = Setup::new();
    setup.serve_calls();
    let url = fake_task_server(2);
    let (code, report) = setup.doctor(
        &["--server-url", &url],
        &[("BERNSTEIN_AUTH_TOKEN", "wrong")],
    );
    assert_eq!(code, 1, "{report}");
    let server = check(&report, "task_server");
    assert_eq!(server["detail"]["reachable"], true);
    assert_eq!(server["detail"]["authenticated"], false);
    assert!(
        server["fix"]
            .as_str()
            .unwrap()
            .contains("BERNSTEIN_AUTH_TOKEN")
    );
    // The token itself is never reported, only that one is set.
    assert!(!report.to_string().contains("wrong"), "{report}");
    assert_eq!(
        check(&report, "tools")["detail"]["settings"]["BERNSTEIN_AUTH_TOKEN"],
        "(set)"
    );

    let url = fake_task_server(3);
    let (code, report) = setup.doctor(&["--server-url", &url], &[("BERNSTEIN_AUTH_TOKEN", "good")]);
    assert_eq!(code, 0, "{report}");
    let server = check(&report, "task_server");
    assert_eq!(server["detail"]["authenticated"], true);
    assert_eq!(server["detail"]["version"], "3.23.0");
}

#[test]
fn a_busy_port_is_a_problem() {
    let setup = Setup::new();
    setup.serve_calls();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let (code, report) = setup.doctor(&["--port", &port], &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(check(&report, "http_port")["status"], "problem");
    drop(busy);
}
