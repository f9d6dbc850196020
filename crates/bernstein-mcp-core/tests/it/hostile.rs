//! Hostile input at the dispatcher seam: unknown tools, every refusal path of the shutdown
//! tool, and `workdir` arguments that name directories beyond the served root.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{Project, payload};

/// Every entry below `dir`, symlinks not followed, with its kind.
fn tree(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, &'static str)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_symlink() {
                out.push((path, "link"));
            } else if kind.is_dir() {
                out.push((path.clone(), "dir"));
                walk(&path, out);
            } else {
                out.push((path, "file"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn an_unknown_tool_is_invalid_params() {
    let project = Project::new();
    let error = project
        .error(
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )
        .await;
    assert_eq!(error["code"], -32602, "{error}");
    assert_eq!(error["message"], "Unknown tool: no_such_tool");
}

/// Every refusal of `bernstein_shutdown_orchestrator` (and its alias) is the structured tool
/// error `{error, hint}` with `isError: true`, and creates nothing: not in the served project,
/// not in the project named, not outside. Before the fix a NUL and a 4,200-character workdir
/// answered the firewall's `{error, jsonrpc_error}` with no hint.
#[tokio::test]
async fn every_shutdown_refusal_is_error_and_hint_and_creates_nothing() {
    let project = Project::new();
    let scratch = tempfile::tempdir().unwrap();
    let scratch_root = std::fs::canonicalize(scratch.path()).unwrap();
    let at = |name: &str| scratch_root.join(name);
    std::fs::create_dir_all(at("outside")).unwrap();
    std::fs::create_dir_all(at("bare")).unwrap();
    // A project whose `.sdd/runtime` leads out of it.
    std::fs::create_dir_all(at("escaping/.sdd")).unwrap();
    std::os::unix::fs::symlink(at("outside"), at("escaping/.sdd/runtime")).unwrap();
    // A project whose `.sdd/runtime` is a link that stays inside it: the write follows none.
    std::fs::create_dir_all(at("inner/.sdd")).unwrap();
    std::fs::create_dir_all(at("inner/elsewhere")).unwrap();
    std::os::unix::fs::symlink("../elsewhere", at("inner/.sdd/runtime")).unwrap();
    // A project whose signal path is a directory.
    std::fs::create_dir_all(at("dirsignal/.sdd/runtime/signals/SHUTDOWN")).unwrap();
    // A workdir that is a symlink loop.
    std::os::unix::fs::symlink(at("loop"), at("loop")).unwrap();
    let text = |path: PathBuf| path.to_str().unwrap().to_owned();
    let cases: Vec<(&str, Value)> = vec![
        ("NUL", json!({"workdir": "proj\u{0}"})),
        ("4,200 characters", json!({"workdir": "a".repeat(4_200)})),
        ("4,200 bytes", json!({"workdir": "é".repeat(2_100)})),
        ("empty", json!({"workdir": ""})),
        ("not text", json!({"workdir": 5})),
        ("unknown key", json!({"workdir": ".", "force": true})),
        ("no .sdd", json!({"workdir": text(at("bare"))})),
        ("escape", json!({"workdir": text(at("escaping"))})),
        ("link inside", json!({"workdir": text(at("inner"))})),
        (
            "signal is a directory",
            json!({"workdir": text(at("dirsignal"))}),
        ),
        ("symlink loop", json!({"workdir": text(at("loop"))})),
    ];
    // The served project's task store opens in the background and creates its lock files
    // under `.sdd/runtime` when it does; a call that needs the store waits for that, so the
    // snapshot below is not raced by the open (under load the lock files appeared after it
    // and were counted as created by the refusals).
    project.call("bernstein_status", json!({})).await;
    let project_before = tree(project.dir.path());
    let scratch_before = tree(&scratch_root);
    for tool in ["bernstein_shutdown_orchestrator", "bernstein_stop"] {
        for (label, arguments) in &cases {
            let result = project.call(tool, arguments.clone()).await;
            assert_eq!(result["isError"], true, "{tool} {label}: {result}");
            // The alias wraps what its handler answered; a firewall refusal comes bare.
            let mut body = payload(&result);
            if body.get("deprecated").is_some() {
                body = body["result"].clone();
            }
            assert!(body["error"].is_string(), "{tool} {label}: {body}");
            assert!(body["hint"].is_string(), "{tool} {label}: {body}");
            assert!(body.get("status").is_none(), "{tool} {label}: {body}");
        }
    }
    assert_eq!(tree(&scratch_root), scratch_before, "something was created");
    let created: Vec<_> = tree(project.dir.path())
        .into_iter()
        .filter(|entry| !project_before.contains(entry))
        .filter(|(path, _)| path.components().any(|c| c.as_os_str() == "runtime"))
        .collect();
    assert!(created.is_empty(), "{created:?}");
}

/// A project serving every tier with lineage on.
fn project_with_lineage() -> Project {
    Project::with(|builder| {
        builder.tool_config(bernstein_tools::ToolConfig {
            tier: bernstein_tools::Tier::All,
            lineage_enabled: true,
            ..bernstein_tools::ToolConfig::default()
        })
    })
}

/// An error that comes from the filesystem names its file relative to the project root: the
/// host's layout stays out of answers. Before the fix the journal's `refusing <abs path>: ...`
/// reached the client whole.
#[tokio::test]
async fn error_texts_name_paths_relative_to_the_project_root() {
    let project = Project::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(project.dir.path().join(".sdd/context")).unwrap();
    std::os::unix::fs::symlink(
        outside.path(),
        project.dir.path().join(".sdd/context/capsules"),
    )
    .unwrap();
    let result = project
        .call("bernstein_task_capsule", json!({"task_id": "t1"}))
        .await;
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let root = project.dir.path().to_str().unwrap();
    let canonical = std::fs::canonicalize(project.dir.path()).unwrap();
    assert!(!text.contains(root), "{text}");
    assert!(!text.contains(canonical.to_str().unwrap()), "{text}");
    assert!(text.contains(".sdd/context/capsules"), "{text}");
}

/// The bearer token of a remote backend never appears in `Debug` output (logs, panics).
#[test]
fn the_bearer_token_is_redacted_in_debug_output() {
    let choice = bernstein_mcp_core::BackendChoice::Remote {
        url: "http://127.0.0.1:8052".to_owned(),
        bearer_token: Some("s3cr3t-token-value".to_owned()),
    };
    let shown = format!("{choice:?}");
    assert!(!shown.contains("s3cr3t-token-value"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(shown.contains("http://127.0.0.1:8052"), "{shown}");
    let builder = bernstein_mcp_core::Dispatcher::builder("/nonexistent").backend(choice);
    let shown = format!("{builder:?}");
    assert!(!shown.contains("s3cr3t-token-value"), "{shown}");
}

/// Makes a FIFO at `path` (its parents created first).
fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success());
}

/// Bounds a call that, before the fix, blocked for ever on a FIFO: a hang becomes a failure.
/// The bound is generous and no duration is asserted.
async fn bounded<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(60), call)
        .await
        .expect("the call blocked on a FIFO")
}

/// A FIFO where a capsule record or the lineage log is expected is refused with a clear error,
/// at once, instead of a read that waits for a writer for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_where_a_file_is_expected_is_refused_promptly() {
    let project = project_with_lineage();
    let root = project.dir.path();
    mkfifo(&root.join(".sdd/context/capsules/t1.json"));
    let result = bounded(project.call("bernstein_task_capsule", json!({"task_id": "t1"}))).await;
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not a regular file"), "{text}");
    assert!(text.contains(".sdd/context/capsules/t1.json"), "{text}");

    mkfifo(&root.join(".sdd/lineage/log.jsonl"));
    let error = bounded(project.error("resources/read", json!({"uri": "lineage://stats"}))).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{error}"
    );
    let error = bounded(project.error(
        "resources/read",
        json!({"uri": "lineage://artefact/src/a.rs"}),
    ))
    .await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("not a regular file"),
        "{error}"
    );
    let result = bounded(project.call(
        "bernstein_verify_lineage",
        json!({"artefact_path": "src/a.rs"}),
    ))
    .await;
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("not a regular file"), "{text}");
}

/// A second project on the machine, with `.sdd`.
fn other_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".sdd")).unwrap();
    dir
}

/// The payload text of a tool result.
fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// Whether the card read from `project` says `workdir` is confined.
async fn card_says_confined(project: &Project) -> Value {
    let read = project
        .result("resources/read", json!({"uri": "bernstein://capability"}))
        .await;
    let card: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    card["workdir"]["confined"].clone()
}

/// Without confinement (stdio), a `workdir` may name another project root on the machine.
#[tokio::test]
async fn an_unconfined_workdir_may_name_another_project() {
    let project = Project::new();
    let other = other_project();
    let named = other.path().to_str().unwrap();
    for (tool, arguments) in [
        (
            "bernstein_run_status",
            json!({"run_id": "r1", "workdir": named}),
        ),
        (
            "bernstein_task_capsule",
            json!({"task_id": "t1", "workdir": named}),
        ),
    ] {
        let text = text_of(&project.call(tool, arguments).await);
        assert!(!text.contains("outside the roots"), "{tool}: {text}");
    }
    let sent = project
        .call("bernstein_shutdown_orchestrator", json!({"workdir": named}))
        .await;
    assert_eq!(sent["isError"], false, "{sent}");
    assert!(other.path().join(".sdd/runtime/signals/SHUTDOWN").is_file());
    assert_eq!(card_says_confined(&project).await, false);
}

/// With confinement on (HTTP; `--allow-root` on stdio), a `workdir` must resolve inside the
/// served root or an allowed root: another project, a `..` escape, a symlink out and a sibling
/// sharing the root's prefix are refused with `{error, hint}` and nothing is written.
#[tokio::test]
async fn a_confined_workdir_stays_in_the_served_and_allowed_roots() {
    let allowed = other_project();
    let allowed_path = allowed.path().to_path_buf();
    let project = Project::with(|builder| {
        builder
            .confine_workdirs(true)
            .allowed_roots(vec![allowed_path])
    });
    let root = project.dir.path();
    let stranger = other_project();
    std::fs::create_dir_all(root.join("sub/.sdd")).unwrap();
    std::os::unix::fs::symlink(stranger.path(), root.join("link-out")).unwrap();
    let sibling = PathBuf::from(format!("{}-evil", root.display()));
    std::fs::create_dir_all(sibling.join(".sdd")).unwrap();
    let refused = [
        stranger.path().to_str().unwrap().to_owned(),
        "..".to_owned(),
        "link-out".to_owned(),
        sibling.to_str().unwrap().to_owned(),
        "/".to_owned(),
        "missing-dir".to_owned(),
    ];
    let stranger_before = tree(stranger.path());
    for workdir in &refused {
        for (tool, arguments) in [
            (
                "bernstein_run_status",
                json!({"run_id": "r1", "workdir": workdir}),
            ),
            (
                "bernstein_task_capsule",
                json!({"task_id": "t1", "workdir": workdir}),
            ),
            (
                "bernstein_shutdown_orchestrator",
                json!({"workdir": workdir}),
            ),
            (
                "bernstein_task_handle",
                json!({"run_id": "r1", "workdir": workdir}),
            ),
        ] {
            let result = project.call(tool, arguments).await;
            assert_eq!(result["isError"], true, "{tool} {workdir}: {result}");
            let mut body = payload(&result);
            if body.get("deprecated").is_some() {
                body = body["result"].clone();
            }
            assert!(
                body["error"]
                    .as_str()
                    .unwrap()
                    .contains("outside the roots"),
                "{tool} {workdir}: {body}"
            );
            assert!(body["hint"].is_string(), "{tool} {workdir}: {body}");
        }
    }
    assert_eq!(tree(stranger.path()), stranger_before);
    assert!(!sibling.join(".sdd/runtime").exists());
    std::fs::remove_dir_all(&sibling).unwrap();

    // The served root, a directory inside it and an allowed root are served.
    for workdir in [
        ".".to_owned(),
        "sub".to_owned(),
        allowed.path().to_str().unwrap().to_owned(),
    ] {
        let text = text_of(
            &project
                .call(
                    "bernstein_task_capsule",
                    json!({"task_id": "t1", "workdir": workdir}),
                )
                .await,
        );
        assert!(!text.contains("outside the roots"), "{workdir}: {text}");
    }
    let sent = project
        .call(
            "bernstein_shutdown_orchestrator",
            json!({"workdir": allowed.path().to_str().unwrap()}),
        )
        .await;
    assert_eq!(sent["isError"], false, "{sent}");
    assert_eq!(card_says_confined(&project).await, true);
}
