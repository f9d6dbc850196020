//! `--log-format`: JSON log lines go to stderr, and stdout carries nothing but protocol even
//! at the most verbose filter.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

#[test]
fn json_logs_go_to_stderr_and_stdout_stays_protocol() {
    let home = tempfile::tempdir().unwrap();
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
        .args(["--log-format", "json"])
        .current_dir(&project)
        .env_clear()
        .env("HOME", home.path())
        .env("XDG_STATE_HOME", home.path().join("state"))
        .env("RUST_LOG", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bernstein_run_status","arguments":{"run_id":"r"}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bernstein_approve","arguments":{"task_id":"missing"}}}"#,
            "not json",
        ];
        for line in lines {
            writeln!(stdin, "{line}").unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let answers: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    assert_eq!(answers.len(), 4, "{stdout}");
    assert!(answers.iter().all(|a| a["jsonrpc"] == "2.0"), "{stdout}");

    let stderr = String::from_utf8(output.stderr).unwrap();
    let logs: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let messages: Vec<&str> = logs
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    assert!(messages.contains(&"serving MCP on stdio"), "{stderr}");
    // The handler error of call 3 is logged, as a warning with its level and target.
    let warning = logs
        .iter()
        .find(|l| l["level"] == "WARN")
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(warning["timestamp"].is_string() && warning["target"].is_string());
}

#[test]
fn an_unknown_log_format_is_a_usage_error() {
    let home = tempfile::tempdir().unwrap();
    let out = crate::support::run(&["--log-format", "xml"], home.path());
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("text") && out.stderr.contains("json"),
        "{}",
        out.stderr
    );
}

/// stderr carries only our own logs, also when the process may run on fewer processors than
/// the machine has (`taskset`, a container's cpuset): the allocator must not write its own
/// notice there. jemalloc's per-processor arenas printed one on every start in that case.
#[test]
fn stderr_stays_quiet_when_the_process_is_pinned_to_one_processor() {
    let processors = std::thread::available_parallelism().map_or(1, usize::from);
    let home = tempfile::tempdir().unwrap();
    let output = Command::new("taskset")
        .args(["--cpu-list", "0"])
        .arg(env!("CARGO_BIN_EXE_bernstein-mcp"))
        .arg("--version")
        .env_clear()
        .env("HOME", home.path())
        .output()
        .expect("taskset (util-linux) runs the binary on one processor");
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("bernstein-mcp "),
        "{output:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "",
        "stderr of a --version pinned to one of {processors} processors"
    );
}
