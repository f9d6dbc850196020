//! Context capsules against the Bernstein 3.23 vectors `capsule/` (a sealed capsule and a mock)
//! and `capsule_tampered/` (the budget edited in the record), with the oracle reports; sealing
//! round-trips and reproduces the vector bytes.

use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::Error;
use bernstein_journal::audit::{AuditChain, AuditEvent, Timestamp};
use bernstein_journal::capsule::{
    CapsuleCheck, CapsuleRecord, ContextCapsule, ContextVerifyReport, JournalIdentity,
    MOCK_CAPSULE_REASON, SignedContextCapsule, capsule_record_path, read_capsule_record,
    seal_and_bind, seal_mock_capsule, task_capsule_body, verify_context_capsule,
    write_capsule_record,
};
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal::{HashProfile, JournalWriter, load_run_journal};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::support::vector;

fn audit_key() -> AuditKey {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec())
}

fn read_object(path: &Path) -> Object {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Value::parse(&text).unwrap().as_object().unwrap().clone()
}

fn field<'a>(object: &'a Object, path: &[&str]) -> &'a Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = object;
    for key in parents {
        at = at.get(key).unwrap().as_object().unwrap();
    }
    at.get(last).unwrap_or_else(|| panic!("no {path:?}"))
}

/// Order-insensitive form (the fixture files were written with sorted keys).
fn unordered(value: &Value) -> serde_json::Value {
    serde_json::from_str(&value.dumps(Dialect::PY_COMPACT_UTF8)).unwrap()
}

fn identity() -> SigningIdentity {
    SigningIdentity::from_seed(&[0x44; 32]).unwrap()
}

fn chain_of(root: &Path) -> AuditChain {
    AuditChain::open(root.join(".sdd/audit"), audit_key())
}

fn verify(root: &Path, task_id: &str) -> ContextVerifyReport {
    verify_context_capsule(root, &chain_of(root), task_id).unwrap()
}

/// A stepping clock like the reference generator's frozen `time.time()` (+0.25 per reading).
fn stepping_clock(start: f64) -> impl FnMut() -> f64 {
    let mut now = start;
    move || {
        let value = now;
        now += 0.25;
        value
    }
}

/// The capsule `gen_capsule.py` seals for `t-42`, pinned to `chain_head`.
fn vector_capsule(chain_head: &str) -> ContextCapsule {
    let mut capsule = ContextCapsule::new("t-42", "task-t-42");
    capsule.params_hash = format!("sha256:{}", "9a".repeat(32));
    capsule.worktree_path = "/home/vector/project/.sdd/worktrees/t-42".to_owned();
    capsule.role = "backend".to_owned();
    capsule.budget_remaining_tokens = 120_000;
    capsule.budget_remaining_usd_micros = 2_500_000;
    capsule.set_dependency_state([("t-9", "done"), ("t-1", "closed")]);
    capsule.audit_chain_head = chain_head.to_owned();
    capsule.spawned_at = 1_780_000_900;
    capsule
}

/// Reproduces `gen_capsule.py` in a scratch project: the `task.created` record, a journal with
/// `run_started`, the sealed `t-42` capsule and the mock `t-mock` record.
fn reproduce_vector() -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    let audit = project.path().join(".sdd/audit");
    fs::create_dir_all(&audit).unwrap();
    let reference = fs::read_to_string(vector("capsule/.sdd/audit/2026-07-14.jsonl")).unwrap();
    fs::write(
        audit.join("2026-07-14.jsonl"),
        reference.split_inclusive('\n').next().unwrap(),
    )
    .unwrap();
    let chain = AuditChain::open(&audit, audit_key());
    let mut journal = JournalWriter::open_with_clock(
        project.path(),
        "task-t-42",
        HashProfile::PyJsonV1,
        stepping_clock(1_780_000_900.0),
    )
    .unwrap();
    journal
        .append("run_started", &Object::new().with("task_id", "t-42"))
        .unwrap();
    let capsule = vector_capsule(&chain.recovered_head());
    let sealed = seal_and_bind(
        project.path(),
        &chain,
        Some(&mut journal),
        capsule,
        &identity(),
        Timestamp::parse("2026-07-14T09:00:00.003000Z"),
    )
    .unwrap();
    assert_eq!(
        sealed.record_path,
        capsule_record_path(project.path(), "t-42").unwrap()
    );
    let mut mock = ContextCapsule::new("t-mock", "task-t-42");
    mock.role = "qa".to_owned();
    mock.spawned_at = 1;
    seal_mock_capsule(project.path(), mock, &identity()).unwrap();
    project
}

fn relative_files(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.file_name().is_some_and(|n| n != ".chain.lock") {
                let bytes = fs::read(&path).unwrap();
                out.push((path.strip_prefix(root).unwrap().to_path_buf(), bytes));
            }
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// The oracle's verdicts
// ---------------------------------------------------------------------------------------------

#[test]
fn vector_capsules_get_the_oracle_verdicts() {
    let mut reports = Vec::new();
    for dir in ["capsule", "capsule_tampered"] {
        let root = vector(dir);
        let oracle = read_object(&vector(&format!("oracle/{dir}.json")));
        let capsules = field(&oracle, &["capsules", "capsules"])
            .as_object()
            .unwrap();
        assert_eq!(capsules.len(), 2);
        for (task_id, want) in capsules.iter() {
            let report = verify(&root, task_id);
            assert_eq!(
                unordered(&Value::Object(report.to_wire())),
                unordered(want),
                "{dir}/{task_id}"
            );
            reports.push((
                format!("{dir}/{task_id}"),
                report
                    .findings
                    .iter()
                    .map(|f| format!("{}: {}", f.check.as_str(), f.message))
                    .collect::<Vec<_>>(),
            ));
        }
    }
    // The tampered record fails its signature, and, since every check runs, the edited hash is
    // also reported as neither anchored nor recorded.
    insta::assert_json_snapshot!("capsule_vector_findings", reports);
}

#[test]
fn tool_bodies_match_the_reference_tool() {
    let cases = [
        ("capsule", "t-42", "bernstein_task_capsule_verify_true"),
        ("capsule", "t-mock", "bernstein_task_capsule_mock"),
        (
            "capsule_tampered",
            "t-42",
            "bernstein_task_capsule_verify_true",
        ),
    ];
    for (dir, task_id, key) in cases {
        let root = vector(dir);
        let expected = read_object(&root.join("expected.json"));
        let CapsuleRecord::Loaded(signed) = read_capsule_record(&root, task_id).unwrap() else {
            panic!("{dir}/{task_id} does not load");
        };
        let report = verify(&root, task_id);
        let body = task_capsule_body(&signed, Some(&report));
        assert_eq!(
            unordered(&Value::Object(body.clone())),
            unordered(field(&expected, &[key])),
            "{dir}/{task_id}"
        );
        let keys: Vec<&str> = body.keys().collect();
        assert_eq!(keys, ["capsule", "verify"]);
        let projection: Vec<&str> = field(&body, &["capsule"])
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(
            projection,
            [
                "task_id",
                "run_id",
                "capsule_hash",
                "params_hash",
                "role",
                "worktree_path",
                "budget_remaining_tokens",
                "budget_remaining_usd_micros",
                "dependency_state",
                "audit_chain_head",
                "intent_capsule_hash",
                "is_mock"
            ]
        );
        let verify_keys: Vec<&str> = field(&body, &["verify"])
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(
            verify_keys,
            [
                "ok",
                "reason",
                "is_mock",
                "signature_ok",
                "chain_ok",
                "journal_ok",
                "journal_identity"
            ]
        );
        assert_eq!(
            unordered(&Value::Object(task_capsule_body(&signed, None))),
            unordered(&Value::Object(
                Object::new().with("capsule", field(&expected, &[key, "capsule"]).clone())
            ))
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sealing
// ---------------------------------------------------------------------------------------------

#[test]
fn sealing_reproduces_the_vector_bytes() {
    let project = reproduce_vector();
    let expected = read_object(&vector("capsule/expected.json"));
    assert_eq!(
        relative_files(project.path()),
        relative_files(&vector("capsule"))
            .into_iter()
            .filter(|(path, _)| path != Path::new("expected.json"))
            .collect::<Vec<_>>(),
        "record, mock record, audit segment and journal are the reference's bytes"
    );
    let capsule =
        vector_capsule("0fbc8cc5e13659686af17a34b3b69f47cabc4b912af2b6a0e0c9b8a7482d044e");
    assert_eq!(
        capsule.canonical_bytes(),
        field(&expected, &["canonical_bytes"]).as_str().unwrap()
    );
    assert_eq!(
        capsule.capsule_hash(),
        field(&expected, &["capsule_hash"]).as_str().unwrap()
    );
    let mut signing_input = b"eyJhbGciOiJFZERTQSIsImI2NCI6ZmFsc2UsImNyaXQiOlsiYjY0Il0sImtpZCI6ImNvbnRleHQtY2Fwc3VsZSJ9.".to_vec();
    signing_input
        .extend(capsule.signing_payload(bernstein_journal::capsule::CONTEXT_CAPSULE_DOMAIN_REAL));
    assert_eq!(
        String::from_utf8(signing_input).unwrap(),
        field(&expected, &["signing_input"]).as_str().unwrap()
    );
    assert_eq!(
        unordered(&Value::Object(
            bernstein_journal::capsule::capsule_spawn_binding(&capsule)
        )),
        unordered(field(&expected, &["spawn_binding"]))
    );
    let report = verify(project.path(), "t-42");
    assert!(report.ok, "{report:?}");
    assert!(report.findings.is_empty());
    assert_eq!(report.capsule, Some(capsule));
}

#[test]
fn sealing_without_a_journal_is_reported_as_unrecorded() {
    let project = tempfile::tempdir().unwrap();
    let chain = chain_of(project.path());
    let capsule = ContextCapsule::new("t-1", "task-t-1");
    seal_and_bind::<fn() -> f64>(project.path(), &chain, None, capsule, &identity(), None).unwrap();
    let report = verify(project.path(), "t-1");
    assert!(!report.ok);
    assert!(report.chain_ok && report.signature_ok && !report.journal_ok);
    assert_eq!(
        report.reason,
        "run journal for 'task-t-1' is missing; cannot re-derive at chain position"
    );
    let checks: Vec<CapsuleCheck> = report.findings.iter().map(|f| f.check).collect();
    assert_eq!(checks, [CapsuleCheck::Journal, CapsuleCheck::JournalRecord]);
}

#[test]
fn a_task_id_at_the_file_name_limit_round_trips() {
    // `<id>.json` is exactly 255 bytes, the longest file name Linux allows.
    let project = tempfile::tempdir().unwrap();
    let task_id = "t".repeat(250);
    let signed = SignedContextCapsule::seal(ContextCapsule::new(&task_id, "task-t"), &identity());
    write_capsule_record(project.path(), &signed).unwrap();
    assert_eq!(
        read_capsule_record(project.path(), &task_id).unwrap(),
        CapsuleRecord::Loaded(Box::new(signed))
    );
}

#[test]
fn bad_input_writes_nothing() {
    let project = tempfile::tempdir().unwrap();
    let chain = chain_of(project.path());
    for task_id in ["../escape", "", ".", "..", "a/b", "a\\b", "a\0b"] {
        let capsule = ContextCapsule::new(task_id, "task-x");
        let err =
            seal_and_bind::<fn() -> f64>(project.path(), &chain, None, capsule, &identity(), None)
                .unwrap_err();
        assert!(
            matches!(err, Error::InvalidTaskId { .. }),
            "{task_id:?}: {err}"
        );
        let err = verify_context_capsule(project.path(), &chain, task_id).unwrap_err();
        assert!(
            matches!(err, Error::InvalidTaskId { .. }),
            "{task_id:?}: {err}"
        );
        assert!(matches!(
            read_capsule_record(project.path(), task_id),
            Err(Error::InvalidTaskId { .. })
        ));
    }
    for run_id in ["../x", "", "a/b"] {
        let capsule = ContextCapsule::new("t-1", run_id);
        let err =
            seal_and_bind::<fn() -> f64>(project.path(), &chain, None, capsule, &identity(), None)
                .unwrap_err();
        assert!(
            matches!(err, Error::InvalidRunId { .. }),
            "{run_id:?}: {err}"
        );
    }
    let mut other_run = JournalWriter::open_with_clock(
        project.path(),
        "task-other",
        HashProfile::PyJsonV1,
        stepping_clock(0.0),
    )
    .unwrap();
    let err = seal_and_bind(
        project.path(),
        &chain,
        Some(&mut other_run),
        ContextCapsule::new("t-1", "task-t-1"),
        &identity(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err}");
    assert_eq!(
        fs::read_dir(project.path()).unwrap().count(),
        0,
        "nothing was written"
    );

    // A capsules directory leading out of the project.
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(project.path().join(".sdd/context")).unwrap();
    std::os::unix::fs::symlink(outside.path(), project.path().join(".sdd/context/capsules"))
        .unwrap();
    let err = seal_and_bind::<fn() -> f64>(
        project.path(),
        &chain,
        None,
        ContextCapsule::new("t-1", "task-t-1"),
        &identity(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Containment { .. }), "{err}");
    assert!(matches!(
        verify_context_capsule(project.path(), &chain, "t-1"),
        Err(Error::Containment { .. })
    ));
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(!project.path().join(".sdd/audit").exists());
}

// ---------------------------------------------------------------------------------------------
// Tampering, mocks and malformed records
// ---------------------------------------------------------------------------------------------

/// Rewrites the `t-42` record of a reproduced vector project after `edit`, re-signed with the
/// vector key when `resign` (so the failure lies past the signature check).
fn edit_record(project: &Path, resign: bool, edit: impl FnOnce(&mut SignedContextCapsule)) {
    let CapsuleRecord::Loaded(signed) = read_capsule_record(project, "t-42").unwrap() else {
        panic!("record does not load");
    };
    let mut signed = *signed;
    edit(&mut signed);
    if resign {
        let is_mock = signed.is_mock;
        signed = SignedContextCapsule {
            is_mock,
            ..SignedContextCapsule::seal(signed.capsule, &identity())
        };
    }
    write_capsule_record(project, &signed).unwrap();
}

#[test]
fn every_kind_of_damage_is_named() {
    let check = |damage: &dyn Fn(&Path),
                 reason: &str,
                 flags: (bool, bool, bool, bool),
                 findings: &[CapsuleCheck]| {
        let project = reproduce_vector();
        damage(project.path());
        let report = verify(project.path(), "t-42");
        assert!(!report.ok, "{reason}");
        assert_eq!(report.reason, reason);
        assert_eq!(
            (
                report.is_mock,
                report.signature_ok,
                report.chain_ok,
                report.journal_ok
            ),
            flags,
            "{reason}"
        );
        let checks: Vec<CapsuleCheck> = report.findings.iter().map(|f| f.check).collect();
        assert_eq!(checks, findings, "{reason}: {:?}", report.findings);
    };
    use CapsuleCheck::{AuditChain as Chain, Journal, JournalRecord, Record, Signature};

    check(
        &|p| fs::remove_file(capsule_record_path(p, "t-42").unwrap()).unwrap(),
        "no context capsule for task",
        (false, false, false, false),
        &[Record],
    );
    check(
        &|p| fs::write(capsule_record_path(p, "t-42").unwrap(), "{\"capsule\": 1}").unwrap(),
        "no context capsule for task",
        (false, false, false, false),
        &[Record, Record],
    );
    check(
        &|p| edit_record(p, false, |s| s.signature = "x..y".to_owned()),
        "capsule signature does not verify (tampered or wrong key)",
        (false, false, false, false),
        &[Signature],
    );
    check(
        &|p| {
            edit_record(p, false, |s| {
                s.signer_public_key_pem = "not a pem".to_owned()
            })
        },
        "capsule signature does not verify (tampered or wrong key)",
        (false, false, false, false),
        &[Signature],
    );
    check(
        &|p| edit_record(p, false, |s| s.is_mock = true),
        MOCK_CAPSULE_REASON,
        (true, false, false, false),
        &[Signature],
    );
    check(
        &|p| edit_record(p, true, |s| s.capsule.role = "qa".to_owned()),
        "capsule hash is not anchored in the audit chain (tampered or never recorded)",
        (false, true, true, false),
        &[Chain, JournalRecord],
    );
    check(
        &|p| {
            let segment = p.join(".sdd/audit/2026-07-14.jsonl");
            let text = fs::read_to_string(&segment).unwrap();
            fs::write(&segment, text.replacen("t-42\"}", "t-43\"}", 1)).unwrap();
        },
        "audit chain fails verification (2026-07-14.jsonl:1: HMAC mismatch (expected 7fdb5a9f27db48f9…, got 0fbc8cc5e1365968…))",
        (false, true, false, false),
        &[Chain],
    );
    check(
        &|p| {
            let journal = p.join(".sdd/runs/task-t-42/journal.jsonl");
            let text = fs::read_to_string(&journal).unwrap();
            fs::write(&journal, text.lines().nth(1).unwrap().to_owned() + "\n").unwrap();
        },
        "run journal chain/reader-coverage verification failed (step 0: prev_hash break)",
        (false, true, true, false),
        &[Journal],
    );
    check(
        &|p| {
            let journal = p.join(".sdd/runs/task-t-42/journal.jsonl");
            let text = fs::read_to_string(&journal).unwrap();
            fs::write(&journal, text.lines().next().unwrap().to_owned() + "\n").unwrap();
        },
        "capsule hash not recorded at any chain position in the run journal (context divergence)",
        (false, true, true, true),
        &[JournalRecord],
    );
    check(
        &|p| {
            let journal = p.join(".sdd/runs/task-t-42/journal.jsonl");
            let mut text = fs::read_to_string(&journal).unwrap();
            text.push_str("not json\n");
            fs::write(&journal, text).unwrap();
        },
        "run journal chain/reader-coverage verification failed (reader discarded unparsable or non-object physical line(s): 2)",
        (false, true, true, false),
        &[Journal],
    );
    check(
        &|p| edit_record(p, true, |s| s.capsule.run_id = "../escape".to_owned()),
        "capsule hash is not anchored in the audit chain (tampered or never recorded)",
        (false, true, true, false),
        &[Chain, Journal],
    );
}

#[test]
fn an_unsafe_run_id_past_the_anchor_is_named() {
    // Anchor a capsule whose run id the journal barrier refuses: the failure is the run id.
    let project = tempfile::tempdir().unwrap();
    let chain = chain_of(project.path());
    let capsule = ContextCapsule::new("t-1", "bad/run");
    let signed = SignedContextCapsule::seal(capsule, &identity());
    write_capsule_record(project.path(), &signed).unwrap();
    chain
        .append(&bernstein_journal::capsule::context_capsule_event(
            &signed.capsule,
        ))
        .unwrap();
    let report = verify(project.path(), "t-1");
    assert_eq!(
        report.reason,
        "invalid run id: unsafe run_id for journal path: 'bad/run'"
    );
    assert!(report.signature_ok && report.chain_ok && !report.journal_ok);
}

#[test]
fn mock_capsules_are_never_ok() {
    let root = vector("capsule");
    let report = verify(&root, "t-mock");
    assert!(!report.ok && report.is_mock && !report.signature_ok);
    assert_eq!(report.reason, MOCK_CAPSULE_REASON);
    // Clearing the on-disk flag does not help: the signature is over the mock domain.
    let project = tempfile::tempdir().unwrap();
    let CapsuleRecord::Loaded(mock) = read_capsule_record(&root, "t-mock").unwrap() else {
        panic!("mock does not load");
    };
    let mut unflagged = *mock;
    unflagged.is_mock = false;
    write_capsule_record(project.path(), &unflagged).unwrap();
    let report = verify(project.path(), "t-mock");
    assert!(!report.ok && report.is_mock, "{report:?}");
}

// ---------------------------------------------------------------------------------------------
// Intent journal seals
// ---------------------------------------------------------------------------------------------

/// A sealed capsule with an intent capsule hash and a two-row journal, plus `seals`
/// (`journal_head`, `event_count`) as `intent.journal_seal` records. Reasons were taken from
/// the reference's `verify_context_capsule` on the same layout.
fn sealed_intent_project(seals: &[(Option<&str>, Value)]) -> ContextVerifyReport {
    let (project, head) = intent_project("sha256:ii");
    for (stated_head, count) in seals {
        let details = Object::new()
            .with("task_id", "t-7")
            .with("run_id", "task-t-7")
            .with("capsule_hash", "sha256:ii")
            .with("journal_head", stated_head.unwrap_or(&head))
            .with("event_count", count.clone());
        append_seal(project.path(), details);
    }
    let report = verify(project.path(), "t-7");
    drop(project);
    report
}

#[test]
fn intent_journal_seals_decide_the_journal_identity() {
    let report = sealed_intent_project(&[]);
    assert!(report.ok);
    assert_eq!(report.journal_identity, JournalIdentity::Unverifiable);

    let report = sealed_intent_project(&[(None, Value::from(2))]);
    assert!(report.ok, "{report:?}");
    assert_eq!(report.journal_identity, JournalIdentity::Verified);

    let report = sealed_intent_project(&[(Some("abc"), Value::from(3))]);
    assert!(!report.ok);
    assert!(report.journal_ok);
    assert_eq!(report.journal_identity, JournalIdentity::Mismatched);
    assert!(
        report.reason.starts_with(
            "run journal does not match its external seal: journal holds 2 events but the seal commits to 3; journal head "
        ),
        "{}",
        report.reason
    );
    assert!(report.reason.ends_with(" does not match sealed head abc"));

    let report = sealed_intent_project(&[(Some("abc"), Value::from(3)), (None, Value::from(2))]);
    assert_eq!(
        report.reason,
        "run journal has disagreeing external seals; its identity is ambiguous"
    );
    assert!(!report.journal_ok);
    assert_eq!(report.journal_identity, JournalIdentity::Unverifiable);

    let report = sealed_intent_project(&[(None, Value::Bool(true))]);
    assert_eq!(
        report.reason,
        "run journal seal records no usable event_count"
    );
    assert_eq!(report.findings.len(), 1);
}

/// The journal of run `task-t-7` in `project`, on a clock that steps one second a row.
fn t7_journal(project: &Path) -> JournalWriter<impl bernstein_journal::run_journal::Clock + use<>> {
    JournalWriter::open_with_clock(
        project,
        "task-t-7",
        HashProfile::PyJsonV1,
        stepping_clock(1.0),
    )
    .unwrap()
}

/// A capsule `t-7` of run `task-t-7` naming the intent capsule `intent` (none when empty),
/// sealed and bound into a journal that opens with `run_started`; returns the project and the
/// journal head after the two rows.
fn intent_project(intent: &str) -> (tempfile::TempDir, String) {
    let project = tempfile::tempdir().unwrap();
    let mut journal = t7_journal(project.path());
    journal
        .append("run_started", &Object::new().with("task_id", "t-7"))
        .unwrap();
    let mut capsule = ContextCapsule::new("t-7", "task-t-7");
    capsule.intent_capsule_hash = intent.to_owned();
    seal_and_bind(
        project.path(),
        &chain_of(project.path()),
        Some(&mut journal),
        capsule,
        &identity(),
        None,
    )
    .unwrap();
    let head = journal_head(project.path());
    (project, head)
}

/// The `event_hash` of the last row of `task-t-7`'s journal.
fn journal_head(project: &Path) -> String {
    let rows = load_run_journal(project, "task-t-7").unwrap().rows;
    let last = rows.last().unwrap().get("event_hash").unwrap();
    last.as_str().unwrap().to_owned()
}

/// Appends an `intent.journal_seal` record with `details` (task `t-7`).
fn append_seal(project: &Path, details: Object) {
    chain_of(project)
        .append(&AuditEvent::new(
            "intent.journal_seal",
            "x",
            "r",
            "t-7",
            details,
        ))
        .unwrap();
}

/// Seal details for `t-7`, `task-t-7`, intent `sha256:ii`.
fn seal_details(head: &str, count: i64) -> Object {
    Object::new()
        .with("task_id", "t-7")
        .with("run_id", "task-t-7")
        .with("capsule_hash", "sha256:ii")
        .with("journal_head", head)
        .with("event_count", count)
}

fn messages(report: &ContextVerifyReport) -> Vec<(CapsuleCheck, String)> {
    report
        .findings
        .iter()
        .map(|f| (f.check, f.message.clone()))
        .collect()
}

#[test]
fn only_a_seal_of_this_intent_task_and_run_is_the_journals() {
    // Each seal contradicts the journal (count 9), so it shows whenever it is taken as the
    // journal's own.
    let check = |intent: &str, edit: &dyn Fn(Object) -> Object, identity: JournalIdentity| {
        let (project, head) = intent_project(intent);
        append_seal(project.path(), edit(seal_details(&head, 9)));
        let report = verify(project.path(), "t-7");
        assert_eq!(report.journal_identity, identity, "{report:?}");
        assert_eq!(report.ok, identity == JournalIdentity::Unverifiable);
    };
    let same = |details: Object| details;
    check("sha256:ii", &same, JournalIdentity::Mismatched);
    check("", &same, JournalIdentity::Unverifiable);
    check(
        "",
        &|details: Object| details.with("capsule_hash", ""),
        JournalIdentity::Unverifiable,
    );
    for (field, value) in [
        ("task_id", Value::from("t-8")),
        ("task_id", Value::from(7)),
        ("run_id", Value::from("task-t-8")),
        ("capsule_hash", Value::from("sha256:other")),
    ] {
        check(
            "sha256:ii",
            &|details: Object| details.with(field, value.clone()),
            JournalIdentity::Unverifiable,
        );
    }
}

#[test]
fn a_seal_mismatch_names_every_difference() {
    use CapsuleCheck::{Journal, JournalRecord};
    let unrecorded = (
        JournalRecord,
        "capsule hash not recorded at any chain position in the run journal (context divergence)"
            .to_owned(),
    );
    // `seal` receives the journal head and returns the seal's head and count; `damage` runs
    // after sealing; `expect` receives the journal head.
    let check = |seal: &dyn Fn(&str) -> (String, i64),
                 damage: &dyn Fn(&Path),
                 flags: (bool, JournalIdentity),
                 expect: &dyn Fn(&str) -> Vec<(CapsuleCheck, String)>| {
        let (project, head) = intent_project("sha256:ii");
        let (sealed_head, count) = seal(&head);
        append_seal(project.path(), seal_details(&sealed_head, count));
        damage(project.path());
        let report = verify(project.path(), "t-7");
        let expect = expect(&head);
        assert_eq!(messages(&report), expect);
        assert_eq!((report.journal_ok, report.journal_identity), flags);
        assert_eq!(report.ok, expect.is_empty());
        assert_eq!(
            report.reason,
            expect.first().map(|f| f.1.clone()).unwrap_or_default()
        );
    };
    let intact = |_: &Path| {};
    let mismatch = |detail: &str| {
        (
            Journal,
            format!("run journal does not match its external seal: {detail}"),
        )
    };

    check(
        &|head| (head.to_owned(), 2),
        &intact,
        (true, JournalIdentity::Verified),
        &|_| vec![],
    );
    check(
        &|head| (head.to_owned(), 3),
        &intact,
        (true, JournalIdentity::Mismatched),
        &|_| vec![mismatch("journal holds 2 events but the seal commits to 3")],
    );
    check(
        &|_| ("abc".to_owned(), 2),
        &intact,
        (true, JournalIdentity::Mismatched),
        &|head| {
            vec![mismatch(&format!(
                "journal head {head} does not match sealed head abc"
            ))]
        },
    );
    check(
        &|_| (String::new(), 1),
        &intact,
        (true, JournalIdentity::Mismatched),
        &|head| {
            vec![mismatch(&format!(
                "journal holds 2 events but the seal commits to 1; journal head {head} does not match sealed head (empty)"
            ))]
        },
    );
    // A journal whose chain breaks after the seal was taken from it: its verified prefix is
    // empty, so its head is too.
    let break_chain = |project: &Path| {
        let path = project.join(".sdd/runs/task-t-7/journal.jsonl");
        let text = fs::read_to_string(&path).unwrap();
        fs::write(&path, text.replacen("\"t-7\"", "\"t-8\"", 1)).unwrap();
    };
    check(
        &|head| (head.to_owned(), 2),
        &break_chain,
        (false, JournalIdentity::Mismatched),
        &|head| {
            vec![
                (
                    Journal,
                    "run journal chain/reader-coverage verification failed (step 0: event_hash mismatch)".to_owned(),
                ),
                mismatch(&format!(
                    "step 0: event_hash mismatch; journal head (empty) does not match sealed head {head}"
                )),
            ]
        },
    );
    // A line the reader discards leaves head and count as sealed, and still breaks the match.
    let discard_line = |project: &Path| {
        let path = project.join(".sdd/runs/task-t-7/journal.jsonl");
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("not json\n");
        fs::write(&path, text).unwrap();
    };
    let discarded = "reader discarded unparsable or non-object physical line(s): 2";
    check(
        &|head| (head.to_owned(), 2),
        &discard_line,
        (false, JournalIdentity::Mismatched),
        &|_| {
            vec![
                (
                    Journal,
                    format!("run journal chain/reader-coverage verification failed ({discarded})"),
                ),
                mismatch(discarded),
            ]
        },
    );
    // A sealed journal that is gone.
    let remove = |project: &Path| {
        fs::remove_file(project.join(".sdd/runs/task-t-7/journal.jsonl")).unwrap();
    };
    check(
        &|_| (String::new(), 0),
        &remove,
        (false, JournalIdentity::Mismatched),
        &|_| {
            vec![
                (
                    Journal,
                    "run journal for 'task-t-7' is missing; cannot re-derive at chain position"
                        .to_owned(),
                ),
                mismatch("journal file is missing but an external seal exists"),
                unrecorded.clone(),
            ]
        },
    );
}

#[test]
fn only_a_recorded_row_of_this_task_and_hash_records_the_capsule() {
    // `row` is appended to a journal from which the sealing row was removed.
    let check = |row: &dyn Fn(&str) -> (String, Object), recorded: bool| {
        let project = tempfile::tempdir().unwrap();
        let capsule = ContextCapsule::new("t-7", "task-t-7");
        let sealed = seal_and_bind(
            project.path(),
            &chain_of(project.path()),
            None::<&mut JournalWriter>,
            capsule,
            &identity(),
            None,
        )
        .unwrap();
        let (event, payload) = row(&sealed.signed.capsule.capsule_hash());
        let mut journal = t7_journal(project.path());
        journal.append(&event, &payload).unwrap();
        let report = verify(project.path(), "t-7");
        let expect: Vec<(CapsuleCheck, String)> = if recorded {
            vec![]
        } else {
            vec![(
                CapsuleCheck::JournalRecord,
                "capsule hash not recorded at any chain position in the run journal (context divergence)".to_owned(),
            )]
        };
        assert_eq!(messages(&report), expect);
        assert!(report.journal_ok);
    };
    let recorded = |event: &str, task_id: &str, hash: &str| {
        (
            event.to_owned(),
            Object::new()
                .with("task_id", task_id)
                .with("capsule_hash", hash),
        )
    };
    check(
        &|hash| recorded("context.capsule_recorded", "t-7", hash),
        true,
    );
    check(
        &|hash| recorded("context.capsule_other", "t-7", hash),
        false,
    );
    check(
        &|hash| recorded("context.capsule_recorded", "t-8", hash),
        false,
    );
    check(
        &|_| recorded("context.capsule_recorded", "t-7", "sha256:00"),
        false,
    );
}

#[test]
fn only_a_context_capsule_record_of_this_task_and_hash_anchors_it() {
    let check = |details: &dyn Fn(&str) -> (String, Object), anchored: bool| {
        let project = tempfile::tempdir().unwrap();
        let mut journal = t7_journal(project.path());
        let signed =
            SignedContextCapsule::seal(ContextCapsule::new("t-7", "task-t-7"), &identity());
        write_capsule_record(project.path(), &signed).unwrap();
        let hash = signed.capsule.capsule_hash();
        journal
            .append(
                "context.capsule_recorded",
                &Object::new()
                    .with("task_id", "t-7")
                    .with("capsule_hash", hash.as_str()),
            )
            .unwrap();
        let (event, details) = details(&hash);
        chain_of(project.path())
            .append(&AuditEvent::new(&event, "x", "r", "t-7", details))
            .unwrap();
        let report = verify(project.path(), "t-7");
        let expect: Vec<(CapsuleCheck, String)> = if anchored {
            vec![]
        } else {
            vec![(
                CapsuleCheck::AuditChain,
                "capsule hash is not anchored in the audit chain (tampered or never recorded)"
                    .to_owned(),
            )]
        };
        assert_eq!(messages(&report), expect);
        assert_eq!(report.ok, anchored);
    };
    let record = |event: &str, task_id: &str, hash: &str| {
        (
            event.to_owned(),
            Object::new()
                .with("task_id", task_id)
                .with("capsule_hash", hash),
        )
    };
    check(&|hash| record("context.capsule", "t-7", hash), true);
    check(&|hash| record("context.capsule_other", "t-7", hash), false);
    check(&|hash| record("context.capsule", "t-8", hash), false);
    check(&|_| record("context.capsule", "t-7", "sha256:00"), false);
}
