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

/// Runs a subcommand on a scratch copy of a vector with the vector audit key, from inside the
/// project (receipt paths are given relative to it).
fn run_in(scratch: &Scratch, args: &[&str]) -> crate::support::Run {
    let project = scratch.project();
    let key = scratch.key();
    let mut full: Vec<&str> = args.to_vec();
    full.extend([
        "--workdir",
        project.to_str().unwrap(),
        "--key-file",
        key.to_str().unwrap(),
    ]);
    run(&full, scratch.dir.path())
}

#[test]
fn backlog_verify_claim_gives_the_reference_verdict_per_receipt() {
    let scratch = Scratch::of("claim", "audit.key");
    let oracle = json(&std::fs::read_to_string(vector("oracle/claim.json")).unwrap());
    let verdicts = oracle["receipts"]["receipts"].as_object().unwrap();
    assert!(verdicts.len() >= 3);
    for (name, verdict) in verdicts {
        let file = name.rsplit('/').next().unwrap();
        let receipt = scratch.project().join(file);
        let out = run_in(
            &scratch,
            &[
                "backlog",
                "verify-claim",
                "--json",
                "--receipt",
                receipt.to_str().unwrap(),
            ],
        );
        let ok = verdict["ok"].as_bool().unwrap();
        assert_eq!(
            out.code,
            if ok { 0 } else { 1 },
            "{file}: {}{}",
            out.stdout,
            out.stderr
        );
        let report = json(&out.stdout);
        assert_eq!(report["ok"], ok, "{file}");
        assert_eq!(report["reason"], verdict["reason"], "{file}");
    }
    // A receipt whose backlog head was tampered with fails too, at the backlog check.
    let receipt = scratch.project().join("receipt_tampered_backloghead.json");
    let out = run_in(
        &scratch,
        &[
            "backlog",
            "verify-claim",
            "--receipt",
            receipt.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(out.stdout.contains("backlog"), "{}", out.stdout);
    // A receipt that is not JSON is a usage error.
    let bogus = scratch.dir.path().join("bogus.json");
    std::fs::write(&bogus, "not json").unwrap();
    let out = run_in(
        &scratch,
        &[
            "backlog",
            "verify-claim",
            "--receipt",
            bogus.to_str().unwrap(),
        ],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[test]
fn capsule_verify_reports_real_mock_and_tampered_capsules() {
    let check = |case: &str, task: &str, ok: bool, is_mock: bool| {
        let scratch = Scratch::of(case, "audit.key");
        let out = run_in(&scratch, &["capsule", "verify", task, "--json"]);
        assert_eq!(
            out.code,
            if ok { 0 } else { 1 },
            "{case}/{task}: {}{}",
            out.stdout,
            out.stderr
        );
        let report = json(&out.stdout);
        assert_eq!(report["ok"], ok, "{case}/{task}");
        assert_eq!(report["is_mock"], is_mock, "{case}/{task}");
    };
    check("capsule", "t-42", true, false);
    check("capsule", "t-mock", false, true);
    check("capsule_tampered", "t-42", false, false);
    let scratch = Scratch::of("capsule", "audit.key");
    let out = run_in(&scratch, &["capsule", "verify", "../escape"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[test]
fn project_verify_matches_the_reference_verdict_on_every_vector_tree() {
    // (vector, receipts to pass, expected verdict). The reference's `verify_dir.py` verdicts are
    // in `fixtures/vectors/oracle/`; tampered trees fail, clean ones pass.
    let cases: &[(&str, &[&str], bool)] = &[
        ("mailbox", &[], true),
        ("mailbox_tampered", &[], false),
        ("artifacts", &[], true),
        ("artifacts_tampered", &[], false),
        ("capsule", &[], true),
        ("capsule_tampered", &[], false),
        ("plan", &[], true),
        ("journal/completed_run", &[], true),
        ("journal/completed_run_tampered", &[], false),
        (
            "claim",
            &["receipt_granted.json", "receipt_refused.json"],
            true,
        ),
        (
            "claim",
            &["receipt_granted.json", "receipt_tampered_chainhead.json"],
            false,
        ),
    ];
    for (case, receipts, ok) in cases {
        let scratch = Scratch::of(case, "audit.key");
        let receipt_paths: Vec<String> = receipts
            .iter()
            .map(|r| scratch.project().join(r).display().to_string())
            .collect();
        let mut args = vec!["verify", "--json"];
        for path in &receipt_paths {
            args.extend(["--receipt", path.as_str()]);
        }
        let out = run_in(&scratch, &args);
        let report = json(&out.stdout);
        assert_eq!(report["ok"], *ok, "{case} {receipts:?}: {}", out.stdout);
        assert_eq!(out.code, if *ok { 0 } else { 1 }, "{case}");
        let sections: Vec<&String> = report["sections"].as_object().unwrap().keys().collect();
        assert_eq!(sections.len(), 9, "{case}: {sections:?}");
    }
}

/// A writer killed mid-row leaves half a row; the next append records and cuts it, and
/// `verify` lists the cut (a note: the bytes were never acknowledged) without failing.
#[test]
fn project_verify_lists_a_torn_tail_a_writer_cut() {
    use bernstein_journal::run_journal::{HashProfile, JournalWriter};
    use bernstein_protocol::pyjson::Object;

    let scratch = Scratch::of("journal/completed_run", "audit.key");
    let project = scratch.project();
    let journal = project.join(".sdd/runs/task-t-42/journal.jsonl");
    let mut bytes = std::fs::read(&journal).unwrap();
    let whole = bytes.len();
    bytes.extend_from_slice(b"{\"ts\": 1.0, \"ind");
    std::fs::write(&journal, bytes).unwrap();
    let mut writer = JournalWriter::open(&project, "task-t-42", HashProfile::PyJsonV1).unwrap();
    writer.append("operator_note", &Object::new()).unwrap();

    let out = run_in(&scratch, &["verify", "--json"]);
    let report = json(&out.stdout);
    let journals = &report["sections"]["journals"];
    assert_eq!(journals["ok"], true, "{}", out.stdout);
    let notes: Vec<&str> = journals["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let expected = format!(
        "recovered tear: .sdd/runs/task-t-42/journal.jsonl: cut 16 unacknowledged byte(s) of a torn last row at offset {whole}"
    );
    assert!(notes.iter().any(|n| n.starts_with(&expected)), "{notes:?}");
    let text = run_in(&scratch, &["verify"]);
    assert!(
        text.stdout.contains(&format!("note: {expected}")),
        "{}",
        text.stdout
    );
}

/// Issue 14 item 6a: a change the task log holds without its evidence (a crash between the log
/// append and the evidence) is reported by `verify` with the log's file, line and the kind of
/// gap; once a store has opened the project (and replayed the evidence) it verifies clean.
#[test]
fn project_verify_reports_evidence_the_task_log_owes() {
    use bernstein_tasks::backend::ClaimRequest;
    use bernstein_tasks::embedded::{CrashPoint, EmbeddedStore};

    let scratch = Scratch::of("plan", "audit.key");
    let key = bernstein_journal::key::AuditKey::from_file(&scratch.key()).unwrap();
    let store = EmbeddedStore::open(scratch.project(), Some(key.clone())).unwrap();
    let task = store
        .create_task(bernstein_tasks::NewTask::new(
            "crash",
            "between log and evidence",
        ))
        .unwrap();
    store.set_crash_point(Some(CrashPoint::AfterLogAppend));
    assert!(
        store
            .claim_task(&task.id, &ClaimRequest::default())
            .is_err()
    );
    drop(store);

    let out = run_in(&scratch, &["verify", "--json"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let report = json(&out.stdout);
    let tasks = &report["sections"]["tasks"];
    assert_eq!(tasks["ok"], false, "{}", out.stdout);
    let kinds: Vec<&str> = tasks["detail"]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|gap| gap["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "unwritten_evidence",
            "missing_journal_row",
            "missing_audit_event"
        ],
        "{}",
        out.stdout
    );
    for gap in &tasks["detail"]["gaps"].as_array().unwrap()[..3] {
        assert!(
            gap["file"]
                .as_str()
                .unwrap()
                .ends_with(".sdd/runtime/tasks.jsonl")
        );
        assert_eq!(gap["line"], 3, "{gap}");
    }

    EmbeddedStore::open(scratch.project(), Some(key)).unwrap();
    let out = run_in(&scratch, &["verify", "--json"]);
    assert_eq!(
        json(&out.stdout)["sections"]["tasks"]["ok"],
        true,
        "{}",
        out.stdout
    );
}

/// A server stopped between an anchoring row and its audit entry: `verify` notes the row
/// without an entry, the next call records the index as abandoned, and then `verify` and
/// `audit calls` report the abandoned call, with no gap in the order.
#[test]
fn verify_and_audit_calls_report_an_abandoned_call() {
    use bernstein_journal::key::AuditKey;
    use bernstein_journal::run_journal::{HashProfile, JournalWriter};
    use bernstein_mcp_core::Anchor;
    use bernstein_protocol::pyjson::Object;

    let scratch = Scratch::of("journal/completed_run", "audit.key");
    let project = scratch.project();
    let key = AuditKey::from_file(&scratch.key()).unwrap();
    let params = serde_json::json!({"name": "bernstein_health", "arguments": {}});
    let anchor = Anchor::open(&project, "mcp-calls", key.clone()).unwrap();
    anchor.anchor("tools/call", Some(&params)).unwrap();
    // The row a killed server leaves: no audit entry follows it.
    let mut writer = JournalWriter::open(&project, "mcp-calls", HashProfile::PyJsonV1).unwrap();
    let orphan = Object::new()
        .with("method", "tools/call")
        .with("call_index", 1u64)
        .with("trace_id", "0123456789abcdef0123456789abcdef")
        .with("span_id", "0123456789abcdef");
    writer.append("mcp.stateless_call", &orphan).unwrap();

    let notes = |report: &serde_json::Value| -> Vec<String> {
        report["sections"]["journals"]["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    let report = json(&run_in(&scratch, &["verify", "--json"]).stdout);
    assert_eq!(report["sections"]["journals"]["ok"], true, "{report}");
    assert!(
        notes(&report)
            .iter()
            .any(|n| n.starts_with("mcp-calls: call_index 1 has a journal row but no audit entry")),
        "{report}"
    );

    let next = Anchor::open(&project, "mcp-calls", key).unwrap();
    assert_eq!(
        next.anchor("tools/call", Some(&params)).unwrap().call_index,
        2
    );
    let report = json(&run_in(&scratch, &["verify", "--json"]).stdout);
    let journals = &report["sections"]["journals"];
    assert_eq!(journals["ok"], true, "{report}");
    assert_eq!(
        journals["detail"]["mcp-calls"]["abandoned_calls"],
        serde_json::json!([1])
    );
    assert!(
        notes(&report)
            .iter()
            .any(|n| n.starts_with("mcp-calls: call_index 1 was abandoned")),
        "{report}"
    );

    let out = run_in(&scratch, &["audit", "calls", "mcp-calls", "--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let order = json(&out.stdout);
    let indices = |list: &str| -> Vec<i64> {
        order[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["call_index"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(indices("calls"), vec![0, 2]);
    assert_eq!(indices("abandoned"), vec![1]);
    assert_eq!(order["abandoned"][0]["span_id"], "0123456789abcdef");
    assert_eq!(order["problems"], serde_json::json!([]));
    let text = run_in(&scratch, &["audit", "calls", "mcp-calls"]);
    assert_eq!(text.code, 0, "{}", text.stdout);
    assert!(
        text.stdout
            .contains("OK (2 call(s), 1 abandoned; chain verified)")
            && text.stdout.contains("tools/call ABANDONED (never ran)"),
        "{}",
        text.stdout
    );
}
