//! Claim receipts against the Bernstein 3.23 vectors: `claim/` (granted, refused and tampered
//! receipts, the backlog before and after, the signing identity, the audit chain),
//! `server_probe/` with the live-server receipts of `http/` (one from the JSON backlog, one
//! from the task store), and the oracle reports.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::Error;
use bernstein_journal::audit::{AuditChain, Timestamp};
use bernstein_journal::claim::{
    BacklogEntry, ClaimCheck, ClaimFilter, ClaimReceipt, ClaimRequest, ClaimTime,
    ClaimVerifyReport, backlog_head, backlog_path, claim_in_project, issue_claim_receipt,
    parse_backlog, read_backlog, render_backlog, verify_claim_receipt_against_backlog,
    verify_claim_receipt_in_project, verify_task_store_claim_receipt,
};
use bernstein_journal::crypto::sha256_hex;
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use proptest::prelude::*;

use crate::support::{gzip_to, vector};

fn audit_key() -> AuditKey {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec())
}

fn read_value(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Value::parse(&text).unwrap()
}

fn read_object(path: &Path) -> Object {
    read_value(path).as_object().unwrap().clone()
}

fn field<'a>(object: &'a Object, path: &[&str]) -> &'a Value {
    let (last, parents) = path.split_last().unwrap();
    let mut at = object;
    for key in parents {
        at = at.get(key).unwrap().as_object().unwrap();
    }
    at.get(last).unwrap_or_else(|| panic!("no {path:?}"))
}

/// A JSON value as serde_json, for comparisons that ignore key order (the fixture files were
/// written with sorted keys).
fn unordered(value: &Value) -> serde_json::Value {
    serde_json::from_str(&value.dumps(Dialect::PY_COMPACT_UTF8)).unwrap()
}

/// The oracle's `[ok, reason]` pair.
fn verdict(value: &Value) -> (bool, Option<String>) {
    let pair = value.as_array().unwrap();
    (
        pair[0] == Value::Bool(true),
        pair[1].as_str().map(str::to_owned),
    )
}

fn report_verdict(report: &ClaimVerifyReport) -> (bool, Option<String>) {
    (report.ok(), report.reason().map(str::to_owned))
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A scratch project with the claim-signing identity of `vector_root` (mode 0600, which git
/// does not keep) and the first `audit_lines` lines of its audit segment `segment`.
fn scratch_project(vector_root: &Path, segment: &str, audit_lines: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let identity = dir.path().join(".sdd/identity");
    fs::create_dir_all(&identity).unwrap();
    for ext in ["pem", "pub"] {
        let target = identity.join(format!("claim_signing.{ext}"));
        fs::copy(
            vector_root.join(format!(".sdd/identity/claim_signing.{ext}")),
            &target,
        )
        .unwrap();
        set_mode(&target, 0o600);
    }
    let audit = dir.path().join(".sdd/audit");
    fs::create_dir_all(&audit).unwrap();
    let text = fs::read_to_string(vector_root.join(".sdd/audit").join(segment)).unwrap();
    let prefix: String = text
        .split_inclusive('\n')
        .take(audit_lines)
        .collect::<Vec<_>>()
        .concat();
    fs::write(audit.join(segment), prefix).unwrap();
    dir
}

fn write_backlog_text(project: &Path, text: &str) {
    let path = backlog_path(project);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn timestamp(text: &str) -> Timestamp {
    Timestamp::parse(text).unwrap()
}

/// The granted claim of the `claim/` vector.
fn vector_grant_request() -> ClaimRequest {
    ClaimRequest {
        claimer_id: "worker-a".to_owned(),
        claimer_card_fingerprint: Some(format!("sha256:{}", sha256_hex(b"worker-a card key"))),
        filter: ClaimFilter {
            role: Some("backend".to_owned()),
            completed_ids: set(&["t-1"]),
            ..ClaimFilter::default()
        },
    }
}

/// The refused claim of the `claim/` vector.
fn vector_refusal_request() -> ClaimRequest {
    ClaimRequest::new(
        "worker-b",
        ClaimFilter {
            role: Some("qa".to_owned()),
            max_attempts: Some(2),
            ..ClaimFilter::default()
        },
    )
}

fn vector_claim_time() -> ClaimTime {
    ClaimTime {
        claimed_at: 1_780_000_500.123_456,
        audit_at: timestamp("2026-07-11T12:00:00.003000Z"),
    }
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = fs::read(&path).unwrap();
                out.push((path, bytes));
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
fn vector_receipts_get_the_oracle_verdicts() {
    let root = vector("claim");
    let expected = read_object(&root.join("expected.json"));
    let oracle = read_object(&vector("oracle/claim.json"));
    let oracle_receipts = field(&oracle, &["receipts", "receipts"])
        .as_object()
        .unwrap();
    let entries = read_backlog(&backlog_path(&root)).unwrap();
    let chain = AuditChain::open(root.join(".sdd/audit"), audit_key());
    let cases = [
        (
            "receipt_granted.json",
            &["granted", "verify_claim_receipt"][..],
        ),
        (
            "receipt_refused.json",
            &["refused", "verify_claim_receipt"][..],
        ),
        (
            "receipt_tampered_chainhead.json",
            &["tampered_chainhead_verify"][..],
        ),
        (
            "receipt_tampered_backloghead.json",
            &["tampered_backloghead_verify"][..],
        ),
        (
            "receipt_tampered_unsigned.json",
            &["tampered_unsigned_verify"][..],
        ),
    ];
    let mut reports = Vec::new();
    for (file, expected_at) in cases {
        let wire = read_object(&root.join(file));
        let receipt = ClaimReceipt::from_wire(&wire).unwrap();
        let report = verify_claim_receipt_against_backlog(&receipt, &entries, &chain);
        let want = verdict(field(&expected, expected_at));
        assert_eq!(report_verdict(&report), want, "{file}");
        if let Some(section) = oracle_receipts.get(&format!("out/claim/{file}")) {
            let section = section.as_object().unwrap();
            assert_eq!(
                Some(report.ok()),
                section.get("ok").map(|v| *v == Value::Bool(true)),
                "{file}"
            );
            assert_eq!(
                report.reason(),
                section.get("reason").and_then(Value::as_str),
                "{file}"
            );
        }
        // The project-level verifier reads the same backlog and chain and agrees.
        let in_project = verify_claim_receipt_in_project(&root, &wire, audit_key()).unwrap();
        assert_eq!(in_project.findings, report.findings, "{file}");
        reports.push((file, unordered(&Value::Object(in_project.to_object()))));
    }
    // Every failing check is listed, not only the first: the tampered chain head also has no
    // claim event at that head, and the edited receipts' stated derived fields are stale.
    insta::assert_json_snapshot!("claim_vector_reports", reports);
}

#[test]
fn http_receipts_verify_against_the_server_probe() {
    let root = vector("server_probe");
    let oracle = read_object(&vector("oracle/server_probe.json"));
    let oracle_receipts = field(&oracle, &["receipts", "receipts"])
        .as_object()
        .unwrap();
    let chain = AuditChain::open(root.join(".sdd/audit"), audit_key());
    for file in ["claim-receipt_granted.json", "claim-receipt_refused.json"] {
        let wire = read_object(&vector("http").join(file));
        let receipt = ClaimReceipt::from_wire(&wire).unwrap();
        let section = oracle_receipts
            .get(&format!("out/http/{file}"))
            .unwrap()
            .as_object()
            .unwrap();
        let want = (
            *section.get("ok").unwrap() == Value::Bool(true),
            section
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        );
        let report = if receipt.backlog_snapshot.is_some() {
            assert_eq!(
                section.get("rows_from").and_then(Value::as_str),
                Some("embedded backlogSnapshot (task_store)")
            );
            verify_task_store_claim_receipt(&receipt, &chain)
        } else {
            let entries = read_backlog(&backlog_path(&root)).unwrap();
            verify_claim_receipt_against_backlog(&receipt, &entries, &chain)
        };
        assert_eq!(report_verdict(&report), want, "{file}");
        let in_project = verify_claim_receipt_in_project(&root, &wire, audit_key()).unwrap();
        assert_eq!(report_verdict(&in_project), want, "{file}");
        assert!(in_project.derived_field_mismatches.is_empty(), "{file}");
    }
}

#[test]
fn task_store_receipt_wire_round_trips_in_key_order() {
    let wire = read_object(&vector("http/claim-receipt_refused.json"));
    let receipt = ClaimReceipt::from_wire(&wire).unwrap();
    assert!(!receipt.granted());
    assert_eq!(receipt.backlog_snapshot.as_ref().map(Vec::len), Some(5));
    let rebuilt = receipt.to_wire();
    assert_eq!(
        unordered(&Value::Object(rebuilt.clone())),
        unordered(&Value::Object(wire))
    );
    let keys: Vec<&str> = rebuilt.keys().collect();
    assert_eq!(&keys[11..], ["backlogSource", "backlogSnapshot"]);
    // A task-store receipt whose snapshot was edited no longer matches its backlogHead.
    let mut edited = receipt.clone();
    edited.backlog_snapshot.as_mut().unwrap()[0].insert("status", "open");
    let chain = AuditChain::open(vector("server_probe/.sdd/audit"), audit_key());
    let report = verify_task_store_claim_receipt(&edited, &chain);
    assert_eq!(
        report.reason(),
        Some("backlog_head does not match the on-disk backlog")
    );
    // A JSON-backlog receipt presented as a task-store one has no snapshot to check.
    let granted =
        ClaimReceipt::from_wire(&read_object(&vector("http/claim-receipt_granted.json"))).unwrap();
    let report = verify_task_store_claim_receipt(&granted, &chain);
    assert_eq!(report.failures_of(ClaimCheck::BacklogHead).count(), 1);
    assert_eq!(report.findings.len(), 1, "{report:?}");
}

/// Check 4 looks for the claim event in the live segments only, as the reference does: a
/// granted receipt whose `task.claim_receipt` event has since been archived no longer proves
/// its grant, although the chain itself still verifies.
#[test]
fn a_claim_event_only_in_an_archived_segment_does_not_anchor_the_receipt() {
    let root = vector("claim");
    let entries = read_backlog(&backlog_path(&root)).unwrap();
    let receipt =
        ClaimReceipt::from_wire(&read_object(&root.join("receipt_granted.json"))).unwrap();
    let live_only = AuditChain::open(root.join(".sdd/audit"), audit_key());
    assert!(verify_claim_receipt_against_backlog(&receipt, &entries, &live_only).ok());

    let archived = tempfile::tempdir().unwrap();
    let segment = "2026-07-11.jsonl";
    gzip_to(
        &fs::read(root.join(".sdd/audit").join(segment)).unwrap(),
        &archived
            .path()
            .join("archive")
            .join(format!("{segment}.gz")),
    );
    let chain = AuditChain::open(archived.path(), audit_key());
    assert!(chain.verify().ok(), "the archived chain still verifies");
    let report = verify_claim_receipt_against_backlog(&receipt, &entries, &chain);
    assert_eq!(
        report.findings.iter().map(|f| f.check).collect::<Vec<_>>(),
        [ClaimCheck::ClaimEvent],
        "{report:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Issuing reproduces the vectors byte for byte
// ---------------------------------------------------------------------------------------------

#[test]
fn issuing_reproduces_the_claim_vector() {
    let root = vector("claim");
    let expected = read_object(&root.join("expected.json"));
    let project = scratch_project(&root, "2026-07-11.jsonl", 1);
    let before = field(&expected, &["backlog_file_before_claim"])
        .as_str()
        .unwrap();
    write_backlog_text(project.path(), before);

    let granted = claim_in_project(
        project.path(),
        audit_key(),
        &vector_grant_request(),
        vector_claim_time(),
    )
    .unwrap();
    assert!(granted.granted());
    assert_eq!(granted.claimed_entry().unwrap().id, "t-42");
    let want = read_value(&root.join("receipt_granted.json"));
    assert_eq!(
        unordered(&Value::Object(granted.receipt.to_wire())),
        unordered(&want)
    );
    // The receipt's chain head is the predecessor of the claim event it wrote.
    let record = granted.audit_record.as_ref().unwrap();
    assert_eq!(record.prev_hmac, granted.receipt.chain_head);
    assert_eq!(
        unordered(record.record.get("details").unwrap()),
        unordered(field(&expected, &["granted", "audit_event_details"]))
    );
    assert_eq!(
        granted.receipt.receipt_hash_preimage(),
        field(&expected, &["granted", "receipt_hash_preimage"])
            .as_str()
            .unwrap()
    );
    assert_eq!(
        granted.receipt.signed_bytes(),
        field(&expected, &["granted", "signed_bytes"])
            .as_str()
            .unwrap()
    );

    let refused = claim_in_project(
        project.path(),
        audit_key(),
        &vector_refusal_request(),
        ClaimTime::now(),
    )
    .unwrap();
    assert!(!refused.granted());
    assert!(refused.audit_record.is_none());
    let want = read_value(&root.join("receipt_refused.json"));
    assert_eq!(
        unordered(&Value::Object(refused.receipt.to_wire())),
        unordered(&want)
    );

    // The files are the reference's, byte for byte: the rewritten backlog and the audit segment
    // with the claim event.
    assert_eq!(
        fs::read(backlog_path(project.path())).unwrap(),
        fs::read(backlog_path(&root)).unwrap()
    );
    assert_eq!(
        fs::read(project.path().join(".sdd/audit/2026-07-11.jsonl")).unwrap(),
        fs::read(root.join(".sdd/audit/2026-07-11.jsonl")).unwrap()
    );
    // The rows after both claims are the reference's `to_dict()` rows.
    let rows: Vec<Value> = read_backlog(&backlog_path(project.path()))
        .unwrap()
        .iter()
        .map(|e| Value::Object(e.to_dict()))
        .collect();
    assert_eq!(
        unordered(&Value::Array(rows)),
        unordered(field(&expected, &["backlog_rows_after_claims_to_dict"]))
    );
    // And both issued receipts verify offline in the scratch project.
    for receipt in [&granted.receipt, &refused.receipt] {
        let report =
            verify_claim_receipt_in_project(project.path(), &receipt.to_wire(), audit_key())
                .unwrap();
        assert!(report.ok(), "{report:?}");
    }
}

#[test]
fn issuing_reproduces_the_live_server_receipt() {
    // gen_http_probe.py wrote this backlog before the claim; the server had appended 12 audit
    // records by then.
    let root = vector("server_probe");
    let project = scratch_project(&root, "2026-11-30.jsonl", 12);
    write_backlog_text(
        project.path(),
        r#"[{"id": "b-1", "status": "done", "claimer": "x", "role": "backend"}, {"id": "b-2", "role": "backend", "depends_on": ["b-1"]}]"#,
    );
    let request = ClaimRequest {
        claimer_id: "worker-a".to_owned(),
        claimer_card_fingerprint: Some(format!("sha256:{}", "a".repeat(64))),
        filter: ClaimFilter {
            role: Some("backend".to_owned()),
            completed_ids: set(&["b-1"]),
            ..ClaimFilter::default()
        },
    };
    let time = ClaimTime {
        claimed_at: 1_796_004_103.392_215_3,
        audit_at: timestamp("2026-11-30T02:01:43.394493Z"),
    };
    let outcome = claim_in_project(project.path(), audit_key(), &request, time).unwrap();
    let want = read_value(&vector("http/claim-receipt_granted.json"));
    assert_eq!(
        unordered(&Value::Object(outcome.receipt.to_wire())),
        unordered(&want)
    );
    assert_eq!(
        fs::read(backlog_path(project.path())).unwrap(),
        fs::read(backlog_path(&root)).unwrap()
    );
    let written = fs::read_to_string(project.path().join(".sdd/audit/2026-11-30.jsonl")).unwrap();
    let reference = fs::read_to_string(root.join(".sdd/audit/2026-11-30.jsonl")).unwrap();
    assert_eq!(
        written.lines().last(),
        reference.lines().nth(12),
        "the claim event is the reference's 13th record"
    );
}

#[test]
fn the_pure_issuer_returns_rows_and_writes_only_the_audit_event() {
    let root = vector("claim");
    let expected = read_object(&root.join("expected.json"));
    let before = field(&expected, &["backlog_file_before_claim"])
        .as_str()
        .unwrap();
    let entries = parse_backlog(before, "before").unwrap();
    let project = scratch_project(&root, "2026-07-11.jsonl", 1);
    let chain = AuditChain::open(project.path().join(".sdd/audit"), audit_key());
    let signer = SigningIdentity::from_seed(&[0x11; 32]).unwrap();
    let outcome = issue_claim_receipt(
        entries.clone(),
        &vector_grant_request(),
        &signer,
        &chain,
        vector_claim_time(),
    )
    .unwrap();
    assert_eq!(outcome.claimed_index, Some(1));
    assert_eq!(
        render_backlog(&outcome.rows),
        fs::read_to_string(backlog_path(&root)).unwrap()
    );
    assert_eq!(
        entries,
        parse_backlog(before, "before").unwrap(),
        "input rows untouched"
    );
    assert!(
        !backlog_path(project.path()).exists(),
        "the caller persists the rows"
    );
    assert_eq!(
        outcome.receipt.signature,
        field(&expected, &["granted", "wire", "signature"])
            .as_str()
            .unwrap()
    );
    // A refusal is signed over the unchanged rows and the current head, and writes nothing.
    let segment = project.path().join(".sdd/audit/2026-07-11.jsonl");
    let audit_before = fs::read(&segment).unwrap();
    let refusal = issue_claim_receipt(
        outcome.rows.clone(),
        &vector_refusal_request(),
        &signer,
        &chain,
        vector_claim_time(),
    )
    .unwrap();
    assert_eq!(refusal.rows, outcome.rows);
    assert_eq!(refusal.receipt.task_id, "");
    assert_eq!(refusal.receipt.chain_head, chain.recovered_head());
    assert_eq!(refusal.receipt.backlog_head, backlog_head(&outcome.rows));
    assert_eq!(fs::read(&segment).unwrap(), audit_before);
}

#[test]
fn receipt_hash_is_independent_of_the_wall_clock() {
    let root = vector("claim");
    let expected = read_object(&root.join("expected.json"));
    let before = field(&expected, &["backlog_file_before_claim"])
        .as_str()
        .unwrap();
    let mut hashes = Vec::new();
    for (claimed_at, audit_at) in [
        (1.0, "2026-07-11T12:00:00.003000Z"),
        (1_999_999_999.5, "2026-07-11T23:59:59.999999Z"),
    ] {
        let project = scratch_project(&root, "2026-07-11.jsonl", 1);
        write_backlog_text(project.path(), before);
        let time = ClaimTime {
            claimed_at,
            audit_at: timestamp(audit_at),
        };
        let outcome =
            claim_in_project(project.path(), audit_key(), &vector_grant_request(), time).unwrap();
        assert_eq!(
            outcome.claimed_entry().unwrap().claimed_at,
            Some(claimed_at)
        );
        hashes.push((
            outcome.receipt.receipt_hash(),
            outcome.receipt.to_wire_text(),
        ));
    }
    assert_eq!(hashes[0], hashes[1]);
    assert_eq!(
        hashes[0].0,
        field(&expected, &["granted", "wire", "receiptHash"])
            .as_str()
            .unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------------

/// Runs a vector grant in a scratch project prepared by `prepare`, expects an error, and checks
/// that no backlog or audit byte changed.
fn refused_without_writes(prepare: impl FnOnce(&Path), request: &ClaimRequest) -> Error {
    let root = vector("claim");
    let project = scratch_project(&root, "2026-07-11.jsonl", 1);
    prepare(project.path());
    let before = tree(&project.path().join(".sdd"));
    let err = claim_in_project(project.path(), audit_key(), request, vector_claim_time())
        .expect_err("the claim must be refused");
    let after: Vec<_> = tree(&project.path().join(".sdd"))
        .into_iter()
        .filter(|(path, _)| !path.ends_with("task-backlog.json.lock"))
        .collect();
    assert_eq!(after, before, "nothing but the lock file may appear");
    err
}

#[test]
fn bad_input_is_refused_before_anything_is_written() {
    let vector_before = || {
        let expected = read_object(&vector("claim/expected.json"));
        field(&expected, &["backlog_file_before_claim"])
            .as_str()
            .unwrap()
            .to_owned()
    };
    let check = |prepare: &dyn Fn(&Path), request: &ClaimRequest, expect: &str| {
        let err = refused_without_writes(prepare, request);
        assert!(
            err.to_string().contains(expect),
            "{err} does not mention {expect:?}"
        );
    };
    let grant = vector_grant_request();
    check(
        &|p| write_backlog_text(p, "[{\"id\": \"t-1\"},"),
        &grant,
        "is not valid JSON",
    );
    check(
        &|p| write_backlog_text(p, r#"[{"id": "t-1"}, {"id": "t-1"}]"#),
        &grant,
        "duplicate task id(s): t-1",
    );
    check(
        &|p| write_backlog_text(p, r#"[{"id": "t-1", "depends_on": "t-0"}]"#),
        &grant,
        "has non-list depends_on",
    );
    check(
        &|p| write_backlog_text(p, r#"{"rows": []}"#),
        &grant,
        "must be a JSON array, got dict",
    );
    check(
        &|p| fs::write(backlog_path_dir(p).join("task-backlog.json"), b"[\xff]").unwrap(),
        &grant,
        "is not UTF-8",
    );
    let before = vector_before();
    check(
        &|p| {
            write_backlog_text(p, &before);
            fs::write(
                p.join(".sdd/identity/claim_signing.pem"),
                "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
            )
            .unwrap();
        },
        &grant,
        "signing key",
    );
    check(
        &|p| {
            write_backlog_text(p, &before);
            fs::write(
                p.join(".sdd/identity/claim_signing.pub"),
                SigningIdentity::from_seed(&[9; 32])
                    .unwrap()
                    .public_key_pem(),
            )
            .unwrap();
        },
        &grant,
        "mismatch",
    );
    for unsafe_id in ["../escape", "", "a b", "..", "w/1"] {
        let request = ClaimRequest {
            claimer_id: unsafe_id.to_owned(),
            ..vector_grant_request()
        };
        check(
            &|p| write_backlog_text(p, &before),
            &request,
            "claimed_by_session",
        );
    }
}

#[test]
fn the_signing_identity_is_minted_on_first_use_only_for_a_usable_backlog() {
    let project = tempfile::tempdir().unwrap();
    write_backlog_text(project.path(), "[{\"id\": 1}, {\"id\": \"1\"}]");
    let err = claim_in_project(
        project.path(),
        audit_key(),
        &vector_grant_request(),
        vector_claim_time(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::Malformed { .. }), "{err}");
    assert!(!project.path().join(".sdd/identity").exists());
    assert!(!project.path().join(".sdd/audit").exists());

    write_backlog_text(project.path(), r#"[{"id": "t-1", "role": "backend"}]"#);
    let request = ClaimRequest::new("worker-a", ClaimFilter::default());
    let outcome =
        claim_in_project(project.path(), audit_key(), &request, ClaimTime::now()).unwrap();
    assert!(outcome.granted());
    let identity = SigningIdentity::load(
        &project.path().join(".sdd/identity/claim_signing.pem"),
        &project.path().join(".sdd/identity/claim_signing.pub"),
    )
    .unwrap();
    assert_eq!(
        identity.public_key_pem(),
        outcome.receipt.signer_public_key_pem
    );
    let report =
        verify_claim_receipt_in_project(project.path(), &outcome.receipt.to_wire(), audit_key())
            .unwrap();
    assert!(report.ok(), "{report:?}");
    // The row is taken: the same request is now refused, signed at the head the grant wrote.
    let again = claim_in_project(project.path(), audit_key(), &request, ClaimTime::now()).unwrap();
    assert!(!again.granted());
    assert_eq!(again.receipt.chain_head, outcome.audit_record.unwrap().hmac);
}

fn backlog_path_dir(project: &Path) -> PathBuf {
    let dir = project.join(".sdd/runtime");
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_runtime_directory_leading_out_of_the_project_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let expected = read_object(&vector("claim/expected.json"));
    fs::write(
        outside.path().join("task-backlog.json"),
        field(&expected, &["backlog_file_before_claim"])
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let err = refused_without_writes(
        |p| std::os::unix::fs::symlink(outside.path(), p.join(".sdd/runtime")).unwrap(),
        &vector_grant_request(),
    );
    assert!(matches!(err, Error::Containment { .. }), "{err}");
    assert_eq!(
        fs::read_dir(outside.path()).unwrap().count(),
        1,
        "no lock file outside"
    );
}

#[test]
fn tampering_is_reported_by_the_verifier() {
    let root = vector("claim");
    let chain = AuditChain::open(root.join(".sdd/audit"), audit_key());
    let granted_wire = read_object(&root.join("receipt_granted.json"));
    let granted = ClaimReceipt::from_wire(&granted_wire).unwrap();
    let entries = read_backlog(&backlog_path(&root)).unwrap();

    // A backlog edited after the claim.
    let mut edited = entries.clone();
    edited[2].role = Some("backend".to_owned());
    let report = verify_claim_receipt_against_backlog(&granted, &edited, &chain);
    assert_eq!(
        report.reason(),
        Some("backlog_head does not match the on-disk backlog")
    );
    assert_eq!(report.findings.len(), 1);

    // A signature forged with another key, embedding that key: the hash binds every field, so
    // an edited field with a fresh signature is the only way through, and the claim event at
    // the edited chain head is still missing.
    let mut forged = granted.clone();
    forged.chain_head = "0".repeat(64);
    let forged = forged.signed(&SigningIdentity::from_seed(&[0x66; 32]).unwrap());
    let report = verify_claim_receipt_against_backlog(&forged, &entries, &chain);
    assert_eq!(
        report.reason(),
        Some("no task.claim_receipt event at the embedded chain head")
    );
    // Keeping the original key with the forged signature fails the signature check as well.
    let mut swapped = forged.clone();
    swapped
        .signer_public_key_pem
        .clone_from(&granted.signer_public_key_pem);
    let report = verify_claim_receipt_against_backlog(&swapped, &entries, &chain);
    let checks: Vec<ClaimCheck> = report.findings.iter().map(|f| f.check).collect();
    assert_eq!(checks, [ClaimCheck::Signature, ClaimCheck::ClaimEvent]);

    // A malformed embedded PEM.
    let mut bad_pem = granted.clone();
    bad_pem.signer_public_key_pem =
        "-----BEGIN PUBLIC KEY-----\n!!\n-----END PUBLIC KEY-----\n".to_owned();
    let report = verify_claim_receipt_against_backlog(&bad_pem, &entries, &chain);
    assert!(
        report
            .reason()
            .unwrap()
            .starts_with("receipt signature does not verify: cannot load public key"),
        "{report:?}"
    );

    // A broken audit chain: every failing check is listed, in order. Editing the first record
    // breaks its HMAC; the claim record after it still verifies against the adopted head.
    let project = tempfile::tempdir().unwrap();
    let audit = project.path().join(".sdd/audit");
    fs::create_dir_all(&audit).unwrap();
    let segment = fs::read_to_string(root.join(".sdd/audit/2026-07-11.jsonl")).unwrap();
    let edited_segment = segment.replacen("\"t-42\"}", "\"t-43\"}", 1);
    assert_ne!(edited_segment, segment);
    fs::write(audit.join("2026-07-11.jsonl"), &edited_segment).unwrap();
    let broken = AuditChain::open(&audit, audit_key());
    let report = verify_claim_receipt_against_backlog(&granted, &edited, &broken);
    let checks: Vec<ClaimCheck> = report.findings.iter().map(|f| f.check).collect();
    assert_eq!(checks, [ClaimCheck::BacklogHead, ClaimCheck::AuditChain]);
    assert_eq!(
        report.findings[1].message,
        "audit chain does not verify: 2026-07-11.jsonl:1: HMAC mismatch (expected dc98d22d1a416d54\u{2026}, got 88cb1ec173f1306d\u{2026})",
        "{report:?}"
    );
    // Removing the claim record as well leaves nothing at the embedded head.
    let first_line = edited_segment.split_inclusive('\n').next().unwrap();
    fs::write(audit.join("2026-07-11.jsonl"), first_line).unwrap();
    let report = verify_claim_receipt_against_backlog(&granted, &entries, &broken);
    let checks: Vec<ClaimCheck> = report.findings.iter().map(|f| f.check).collect();
    assert_eq!(checks, [ClaimCheck::AuditChain, ClaimCheck::ClaimEvent]);

    // A project whose backlog no longer parses: a finding, and the other checks still run.
    let project = tempfile::tempdir().unwrap();
    write_backlog_text(project.path(), "[");
    fs::create_dir_all(project.path().join(".sdd/audit")).unwrap();
    fs::copy(
        root.join(".sdd/audit/2026-07-11.jsonl"),
        project.path().join(".sdd/audit/2026-07-11.jsonl"),
    )
    .unwrap();
    let report =
        verify_claim_receipt_in_project(project.path(), &granted_wire, audit_key()).unwrap();
    assert_eq!(report.findings.len(), 1, "{report:?}");
    assert!(
        report.findings[0]
            .message
            .starts_with("cannot read the backlog: malformed backlog"),
        "{report:?}"
    );

    // A wire object that is not a receipt at all.
    assert!(matches!(
        verify_claim_receipt_in_project(&root, &Object::new().with("taskId", "t"), audit_key()),
        Err(Error::Malformed { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

/// A random backlog row as a JSON object, with every field the normalisation touches.
fn arb_row(id: String) -> impl Strategy<Value = Object> {
    let word = || "[a-z0-9é-]{1,6}";
    (
        prop::option::of(prop::sample::select(vec!["open", "done", "in_progress"])),
        prop::option::of(word()),
        prop::option::of(prop::sample::select(vec!["backend", "qa"])),
        prop::collection::vec(word(), 0..3),
        prop::collection::vec(prop::sample::select(vec!["t-0", "t-1", "t-2"]), 0..3),
        prop::option::of(0i64..4),
        prop::option::of(prop::sample::select(vec![1.5f64, 1_780_000_500.123_456])),
        prop::collection::vec((word(), 0i64..100), 0..3),
    )
        .prop_map(
            move |(status, claimer, role, tags, depends_on, attempts, claimed_at, metadata)| {
                let mut row = Object::new().with("id", id.as_str());
                if let Some(status) = status {
                    row.insert("status", status);
                }
                row.insert("claimer", claimer);
                if let Some(role) = role {
                    row.insert("role", role);
                }
                row.insert("tags", tags);
                row.insert("depends_on", depends_on);
                if let Some(attempts) = attempts {
                    row.insert("attempts", attempts);
                }
                if let Some(claimed_at) = claimed_at {
                    row.insert("claimed_at", claimed_at);
                }
                let mut meta = Object::new();
                for (k, v) in metadata {
                    meta.insert(k, v);
                }
                row.insert("metadata", meta);
                row
            },
        )
}

fn arb_rows() -> impl Strategy<Value = Vec<Object>> {
    (1usize..5).prop_flat_map(|n| {
        (0..n)
            .map(|i| arb_row(format!("t-{}", i + 10)))
            .collect::<Vec<_>>()
    })
}

/// `object` with its keys in the order given by `rotation` (a rotation of the key list).
fn reordered(object: &Object, rotation: usize) -> Object {
    let entries: Vec<(&str, &Value)> = object.iter().collect();
    let mut out = Object::new();
    let n = entries.len();
    for i in 0..n {
        let (key, value) = entries[(i + rotation) % n];
        out.insert(key, value.clone());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Re-indenting the file, reordering keys inside rows and spelling numbers differently do
    /// not change which row is claimed, the backlog head, or the receipt hash.
    #[test]
    fn receipt_hash_ignores_backlog_formatting(rows in arb_rows(), rotation in 0usize..12) {
        let pretty = render_backlog(
            &rows.iter().map(|r| BacklogEntry::from_dict(r).unwrap()).collect::<Vec<_>>(),
        );
        let compact_reordered = Value::Array(
            rows.iter().map(|r| Value::Object(reordered(r, rotation))).collect(),
        )
        .dumps(Dialect::PY_COMPACT_UTF8);
        let spaced = Value::Array(rows.iter().cloned().map(Value::Object).collect())
            .dumps(Dialect::PY_SPACED)
            .replace(", ", " ,\n\t ");
        let filter = ClaimFilter {
            completed_ids: set(&["t-0", "t-1"]),
            ..ClaimFilter::default()
        };
        let mut outcomes = Vec::new();
        for (n, text) in [pretty, compact_reordered, spaced].iter().enumerate() {
            let mut entries = parse_backlog(text, "prop").unwrap();
            let selected = filter.select(&entries);
            if let Some(at) = selected {
                // A different wall clock per formatting: excluded from the hash.
                entries[at].claim("worker-a", 1.0 + n as f64).unwrap();
            }
            let receipt = ClaimReceipt::new(
                selected.map(|at| entries[at].id.clone()).unwrap_or_default(),
                "unregistered",
                backlog_head(&entries),
                filter.digest(),
                "c".repeat(64),
            );
            outcomes.push((selected, receipt.receipt_hash()));
        }
        prop_assert_eq!(&outcomes[0], &outcomes[1]);
        prop_assert_eq!(&outcomes[0], &outcomes[2]);
    }

    /// Any change to a signed field of the vector's granted receipt fails verification at the
    /// signature check.
    #[test]
    fn editing_a_signed_field_fails_verification(
        which in 0usize..6,
        replacement in "[ -~]{0,70}",
    ) {
        let root = vector("claim");
        let mut wire = read_object(&root.join("receipt_granted.json"));
        let key = [
            "taskId",
            "claimerCardFingerprint",
            "backlogHead",
            "filterDigest",
            "chainHead",
            "specRevision",
        ][which];
        prop_assume!(wire.get(key).and_then(Value::as_str) != Some(replacement.as_str()));
        wire.insert(key, replacement.as_str());
        let receipt = ClaimReceipt::from_wire(&wire).unwrap();
        let entries = read_backlog(&backlog_path(&root)).unwrap();
        let chain = AuditChain::open(root.join(".sdd/audit"), audit_key());
        let report = verify_claim_receipt_against_backlog(&receipt, &entries, &chain);
        prop_assert!(!report.ok());
        prop_assert_eq!(report.failures_of(ClaimCheck::Signature).count(), 1, "{:?}", report);
    }
}

/// Without an explicit time, a claim reads its clock under the chain lock (so it cannot fork
/// the chain at midnight) and stamps the row's `claimed_at` from the same reading.
#[test]
fn a_live_claim_takes_its_one_clock_reading_from_the_audit_record() {
    let project = tempfile::tempdir().unwrap();
    write_backlog_text(project.path(), r#"[{"id": "t-1", "role": "backend"}]"#);
    let request = ClaimRequest::new("worker-a", ClaimFilter::default());
    let outcome = claim_in_project(project.path(), audit_key(), &request, None).unwrap();
    let record = outcome.audit_record.as_ref().unwrap();
    let at = Timestamp::parse(&record.timestamp).unwrap();
    let claimed_at = outcome.claimed_entry().unwrap().claimed_at.unwrap();
    assert!(
        (claimed_at - at.unix_micros() as f64 / 1_000_000.0).abs() < 1e-6,
        "{claimed_at} vs {}",
        record.timestamp
    );
    let report =
        verify_claim_receipt_in_project(project.path(), &outcome.receipt.to_wire(), audit_key())
            .unwrap();
    assert!(report.ok(), "{report:?}");
}
