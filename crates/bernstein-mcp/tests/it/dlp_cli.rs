//! `BERNSTEIN_MCP_DLP` through the real binary: the extended rule set by default, the
//! reference's eight rules when asked, and a clear start-up error for anything else.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Serves `calls` (tool name, arguments) on stdin with `BERNSTEIN_MCP_DLP` set to `dlp`;
/// returns the exit code, each call's `result` payload and stderr.
fn serve_calls(
    home: &Path,
    dlp: Option<&str>,
    calls: &[(&str, Value)],
) -> (i32, Vec<Value>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"));
    command
        .args(["--workdir", home.join("project").to_str().unwrap()])
        .current_dir(home)
        .env_clear()
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"));
    if let Some(dlp) = dlp {
        command.env("BERNSTEIN_MCP_DLP", dlp);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for (id, (name, arguments)) in calls.iter().enumerate() {
            let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}});
            // A server that refuses to start may exit before its requests are written; the
            // write then fails with a broken pipe, and the exit code and stderr tell the rest.
            if writeln!(stdin, "{line}").is_err() {
                break;
            }
        }
    }
    let output = child.wait_with_output().unwrap();
    let mut results: Vec<(i64, Value)> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let message: Value = serde_json::from_str(line).unwrap();
            let id = message["id"].as_i64().unwrap();
            // Unstructured tools answer in the text content: `{"result": …, "_meter": …}`.
            let text = message["result"]["content"][0]["text"].as_str().unwrap();
            let payload: Value = serde_json::from_str(text).unwrap();
            (id, payload["result"].clone())
        })
        .collect();
    results.sort_by_key(|(id, _)| *id);
    (
        output.status.code().unwrap_or(-1),
        results.into_iter().map(|(_, result)| result).collect(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn the_dlp_mode_comes_from_the_environment() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("project")).unwrap();
    let (code, results, stderr) = serve_calls(
        home.path(),
        None,
        &[(
            "bernstein_run",
            json!({"goal": "Rotate keys", "role": "ops"}),
        )],
    );
    assert_eq!(code, 0, "{stderr}");
    let task_id = results[0]["task_id"].as_str().unwrap().to_owned();
    let post = |sender: &str| {
        (
            "bernstein_post_message",
            json!({"task_id": task_id, "sender": sender,
                "body": "leaked AKIAUJZDEGXDNCF32EPF in the log"}),
        )
    };

    // Unset: the extended rules catch the bare AWS key id.
    let (code, results, stderr) = serve_calls(home.path(), None, &[post("worker-a")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(results[0]["body"], "leaked ***REDACTED*** in the log");
    assert_eq!(results[0]["redaction_count"], 1);

    // `reference`: the reference's rules, which have no pattern for it.
    let (code, results, stderr) =
        serve_calls(home.path(), Some(" Reference "), &[post("worker-b")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(results[0]["body"], "leaked AKIAUJZDEGXDNCF32EPF in the log");
    assert_eq!(results[0]["redaction_count"], 0);
    assert_eq!(results[0]["seq"], 1);

    // Each entry's audit-chain mirror carries its own count.
    let mut segments: Vec<_> = std::fs::read_dir(home.path().join("project/.sdd/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    // Daily segments are named by date, so name order is chain order.
    segments.sort();
    let mut mirrored = Vec::new();
    for path in segments {
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            if record["event_type"] == "task.mailbox_message" {
                mirrored.push(record["details"]["redaction_count"].clone());
            }
        }
    }
    assert_eq!(mirrored, vec![json!(1), json!(0)]);

    // Anything else refuses to start, and the mailbox is unchanged.
    let mailbox = home.path().join("project/.sdd/runtime/mailbox.jsonl");
    let before = std::fs::read(&mailbox).unwrap();
    let (code, results, stderr) = serve_calls(home.path(), Some("strict"), &[post("worker-c")]);
    assert_eq!(code, 2);
    assert!(results.is_empty());
    assert!(
        stderr.contains("BERNSTEIN_MCP_DLP must be `extended` or `reference`, not \"strict\""),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&mailbox).unwrap(), before);
}
