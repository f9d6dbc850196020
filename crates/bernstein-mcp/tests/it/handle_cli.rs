//! `journal handle RUN --verify [--json]`: a sealed run verifies in a busy project, the JSON
//! shape is stable, and bad input exits 2 with a structured error while an edited seal or a
//! removed journal row exits 1 naming what broke.

use std::path::Path;

use bernstein_journal::audit::{AuditChain, AuditEvent, Timestamp};
use bernstein_journal::handle::seal_terminal_run_at;
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{HashProfile, JournalWriter};
use bernstein_protocol::pyjson::Object;

use crate::support::{Run, run, vector};

fn at(n: i64) -> Timestamp {
    Timestamp::from_unix_micros(1_796_003_208_000_000 + n * 1_000_000).unwrap()
}

/// A project whose run `task-t-42` was created, claimed, completed and sealed, with anchors of
/// other calls in between and after, written with fixed clocks so the bytes are stable.
fn sealed_project(root: &Path, key_file: &Path) {
    let chain = AuditChain::open(
        root.join(".sdd/audit"),
        AuditKey::from_file(key_file).unwrap(),
    );
    let anchor = |index: i64, n: i64| {
        chain
            .append_at(
                &AuditEvent::new(
                    "mcp.stateless_call",
                    "mcp_stateless_core",
                    "mcp_stateless_call",
                    format!("span{index}"),
                    Object::new()
                        .with("run_id", "mcp-calls")
                        .with("call_index", index),
                ),
                at(n),
            )
            .unwrap();
    };
    chain
        .append_at(
            &AuditEvent::new(
                "task.created",
                "task_server",
                "task",
                "t-42",
                Object::new().with("task_id", "t-42"),
            ),
            at(1),
        )
        .unwrap();
    anchor(0, 2);
    let mut tick = 1_796_003_208.0;
    let mut writer =
        JournalWriter::open_with_clock(root, "task-t-42", HashProfile::PyJsonV1, move || {
            tick += 0.5;
            tick
        })
        .unwrap();
    let row = |status: &str| Object::new().with("task_id", "t-42").with("status", status);
    writer.append("task_claimed", &row("claimed")).unwrap();
    writer.append("task_completed", &row("done")).unwrap();
    seal_terminal_run_at(root, &chain, "t-42", Some(at(3))).unwrap();
    for i in 1..6 {
        anchor(i, 3 + i);
    }
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("audit.key");
        std::fs::copy(vector("_keys/audit.key"), &key).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        sealed_project(&dir.path().join("project"), &key);
        Setup { dir }
    }

    fn project(&self) -> std::path::PathBuf {
        self.dir.path().join("project")
    }

    fn verify(&self, id: &str, json: bool) -> Run {
        let project = self.project();
        let key = self.dir.path().join("audit.key");
        let mut args = vec![
            "journal",
            "handle",
            id,
            "--verify",
            "--workdir",
            project.to_str().unwrap(),
            "--key-file",
            key.to_str().unwrap(),
        ];
        if json {
            args.push("--json");
        }
        run(&args, self.dir.path())
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn a_sealed_handle_verifies_and_its_json_shape_is_stable() {
    let setup = Setup::new();
    for id in ["t-42", "task-t-42"] {
        let out = setup.verify(id, true);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        insta::assert_snapshot!("journal_handle_verify_sealed", out.stdout);
    }
    let human = setup.verify("t-42", false);
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains("OK"), "{}", human.stdout);
    assert!(human.stdout.contains("(terminal seal)"), "{}", human.stdout);
}

#[test]
fn bad_ids_and_unknown_runs_exit_2_with_a_structured_error_and_write_nothing() {
    let setup = Setup::new();
    let before = snapshot(&setup.project());
    for id in ["../etc", "a/b", "..", "no-such-run"] {
        let out = setup.verify(id, true);
        assert_eq!(out.code, 2, "{id}: {}", out.stderr);
        let report = json(&out.stdout);
        assert_eq!(report["verified"], false, "{id}");
        assert!(
            report["error"].as_str().unwrap().len() > 10,
            "{id}: {report}"
        );
    }
    assert_eq!(
        snapshot(&setup.project()),
        before,
        "verification writes nothing"
    );
}

#[test]
fn an_edited_seal_and_a_removed_journal_row_fail_naming_the_cause() {
    let setup = Setup::new();
    let segment = std::fs::read_dir(setup.project().join(".sdd/audit"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let original = std::fs::read_to_string(&segment).unwrap();
    let line = original
        .lines()
        .position(|l| l.contains("mcp.task_handle"))
        .unwrap()
        + 1;
    std::fs::write(
        &segment,
        original.replacen("\"status\": \"completed\"", "\"status\": \"cancelled\"", 1),
    )
    .unwrap();
    let out = setup.verify("t-42", true);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let report = json(&out.stdout);
    let name = segment.file_name().unwrap().to_str().unwrap();
    let problems: Vec<&str> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with(&format!("{name}:{line}:"))),
        "{problems:?}"
    );
    std::fs::write(&segment, original).unwrap();

    let journal = setup.project().join(".sdd/runs/task-t-42/journal.jsonl");
    let rows = std::fs::read_to_string(&journal).unwrap();
    std::fs::write(&journal, format!("{}\n", rows.lines().next().unwrap())).unwrap();
    let out = setup.verify("t-42", true);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let report = json(&out.stdout);
    assert!(
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().contains("seal journal_head")),
        "{report}"
    );
}

fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}
