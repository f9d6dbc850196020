//! `audit verify`, `journal verify` and `journal handle` against the golden vectors: the
//! verdicts and exit codes the reference's oracle gives, and the stable JSON shapes.

use crate::support::{Scratch, run, vector};

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Runs `audit verify --json` on a copy of an audit vector and checks the verdict and exit code
/// against the reference's own report (`expected.json`).
#[track_caller]
fn check_audit(case: &str) -> serde_json::Value {
    let expected =
        json(&std::fs::read_to_string(vector(&format!("audit/{case}/expected.json"))).unwrap());
    let key = if case == "wrong_key" {
        "wrong.key"
    } else {
        "audit.key"
    };
    let scratch = Scratch::of(&format!("audit/{case}"), key);
    let project = scratch.project();
    let key_path = scratch.key();
    let out = run(
        &[
            "audit",
            "verify",
            "--json",
            "--workdir",
            project.to_str().unwrap(),
            "--key-file",
            key_path.to_str().unwrap(),
        ],
        scratch.dir.path(),
    );
    let report = json(&out.stdout);
    let ok = expected["verify_ok"].as_bool().unwrap();
    assert_eq!(report["ok"], ok, "{case}: {}", out.stdout);
    assert_eq!(out.code, if ok { 0 } else { 1 }, "{case}: {}", out.stderr);
    let hard: Vec<&str> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    let expected_hard: Vec<&str> = expected["detailed_hard_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    let same_location = |a: &str, b: &str| a.split(": ").next() == b.split(": ").next();
    assert_eq!(
        hard.len(),
        expected_hard.len(),
        "{case}: {hard:?} vs {expected_hard:?}"
    );
    for (got, want) in hard.iter().zip(&expected_hard) {
        assert!(same_location(got, want), "{case}: {got} vs {want}");
    }
    assert_eq!(
        report["tears"].as_array().unwrap().len(),
        expected["detailed_tears"].as_array().unwrap().len(),
        "{case}"
    );
    report
}

#[test]
fn audit_verify_matches_the_reference_on_every_vector() {
    let mut cases: Vec<String> = std::fs::read_dir(vector("audit"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    cases.sort();
    assert!(cases.len() >= 11, "{cases:?}");
    for case in &cases {
        check_audit(case);
    }
}

#[test]
fn audit_verify_json_shape_is_stable() {
    insta::assert_json_snapshot!("audit_verify_basic", check_audit("basic"));
    insta::assert_json_snapshot!(
        "audit_verify_tamper_last_entry",
        check_audit("tamper_last_entry")
    );
    insta::assert_json_snapshot!(
        "audit_verify_tamper_mid_whitespace",
        check_audit("tamper_mid_whitespace")
    );
}

#[test]
fn audit_verify_refuses_an_unsafe_or_missing_key_without_writing() {
    let scratch = Scratch::of("audit/basic", "audit.key");
    let project = scratch.project();
    let before = snapshot_tree(&project);
    let key_path = scratch.key();
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let out = run(
        &[
            "audit",
            "verify",
            "--workdir",
            project.to_str().unwrap(),
            "--key-file",
            key_path.to_str().unwrap(),
        ],
        scratch.dir.path(),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("must not grant group or world access"),
        "{}",
        out.stderr
    );

    // No key anywhere: the verifier must not mint one (the reference's CLI would).
    let out = run(
        &["audit", "verify", "--workdir", project.to_str().unwrap()],
        scratch.dir.path(),
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("audit key"), "{}", out.stderr);
    assert!(
        !scratch.dir.path().join(".local").exists(),
        "a key was created"
    );
    assert_eq!(
        before,
        snapshot_tree(&project),
        "verification wrote into the project"
    );
}

#[test]
fn usage_errors_exit_2() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["audit"][..],
        &["audit", "verify", "--bogus"],
        &["journal", "verify"],
        &["nonsense"],
    ] {
        let out = run(args, home.path());
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
    }
    let out = run(
        &["audit", "verify", "--workdir", "/nonexistent/project"],
        home.path(),
    );
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("no .sdd directory"), "{}", out.stderr);
}

#[test]
fn journal_verify_reports_the_divergent_row() {
    let home = tempfile::tempdir().unwrap();
    let check = |case: &str, ok: bool, divergent: serde_json::Value| -> serde_json::Value {
        let project = vector(&format!("journal/{case}"));
        let out = run(
            &[
                "journal",
                "verify",
                "task-t-42",
                "--json",
                "--workdir",
                project.to_str().unwrap(),
            ],
            home.path(),
        );
        let report = json(&out.stdout);
        assert_eq!(report["ok"], ok, "{case}: {}", out.stdout);
        assert_eq!(report["divergent_index"], divergent, "{case}");
        assert_eq!(out.code, if ok { 0 } else { 1 });
        report
    };
    let good = check("completed_run", true, serde_json::Value::Null);
    let bad = check("completed_run_tampered", false, 5.into());
    assert_eq!(bad["errors"][0], "step 5: event_hash mismatch");
    insta::assert_json_snapshot!("journal_verify_completed_run", good);
    insta::assert_json_snapshot!("journal_verify_completed_run_tampered", bad);

    for bad_id in ["../x", "a/b", "..", ""] {
        let project = vector("journal/completed_run");
        let out = run(
            &[
                "journal",
                "verify",
                bad_id,
                "--workdir",
                project.to_str().unwrap(),
            ],
            home.path(),
        );
        assert_eq!(out.code, 2, "{bad_id:?}: {}", out.stderr);
    }
}

#[test]
fn journal_handle_prints_the_reference_run_status_body() {
    let home = tempfile::tempdir().unwrap();
    let project = vector("journal/completed_run");
    let oracle =
        json(&std::fs::read_to_string(vector("oracle/journal__completed_run.json")).unwrap());
    let expected = &oracle["journals"]["runs"]["task-t-42"]["bernstein_run_status"];
    for id in ["t-42", "task-t-42"] {
        let out = run(
            &[
                "journal",
                "handle",
                id,
                "--workdir",
                project.to_str().unwrap(),
            ],
            home.path(),
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(&json(&out.stdout), expected, "{id}");
        // The tool returns `json.dumps(wire, indent=2)`: wire key order, two-space indent.
        let keys: Vec<&str> = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("  \"").and_then(|l| l.split('"').next()))
            .collect();
        assert_eq!(
            keys,
            [
                "taskId",
                "runId",
                "status",
                "journalHead",
                "chainHead",
                "specRevision",
                "traceId",
                "receiptHash",
                "pollToken",
                "progress",
                "progressHash"
            ]
        );
    }
}

fn snapshot_tree(root: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                out.push((
                    entry.path().display().to_string(),
                    std::fs::read(entry.path()).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}
