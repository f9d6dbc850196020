//! Audit-chain golden vectors and properties.
//!
//! * Every case under `fixtures/vectors/audit/` gets exactly the reference's verdict, findings,
//!   tears and both head readings (`check_vector`).
//! * Re-appending the records of the `basic` vector reproduces its segment bytes exactly.
//! * Damage scenarios built here (tears, garbage, sealing, acknowledgement, unreadable files)
//!   give the verdicts the reference gives on the same bytes. The structural expectations in
//!   `SCENARIOS` were cross-checked with bernstein 3.23 itself; set
//!   `BERNSTEIN_AUDIT_SCENARIO_DUMP=<dir>` to write every scenario directory and the Rust report
//!   there for such a comparison.
//! * Properties: an untouched chain verifies; any single changed byte is reported at the record
//!   it hit. Four OS processes appending to one chain keep it linear.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use bernstein_journal::Error;
use bernstein_journal::audit::{
    self, AuditChain, AuditEvent, FindingKind, GENESIS_HMAC, MAX_LINE_BYTES, Scheme, TearClass,
    Timestamp, VerifyProgress, VerifyReport,
};
use bernstein_journal::crypto::hmac_sha256_hex;
use bernstein_journal::key::{AuditKey, KeyLocator};
use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use proptest::prelude::*;
use serde_json::{Value as Json, json};
use tempfile::TempDir;

use crate::support::{gzip_to, vector};

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// Copies a fixture key into a private temp file (git does not keep modes) and loads it.
fn fixture_key(name: &str) -> (TempDir, AuditKey) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.key");
    fs::copy(vector(&format!("_keys/{name}")), &path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let key = AuditKey::load(&KeyLocator::at(&path)).unwrap();
    (dir, key)
}

fn audit_key() -> &'static AuditKey {
    static KEY: OnceLock<(TempDir, AuditKey)> = OnceLock::new();
    &KEY.get_or_init(|| fixture_key("audit.key")).1
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Names, sizes, modification times and modes of everything under `root`, to prove that
/// readers write nothing.
fn dir_state(root: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            out.insert(
                entry.path(),
                (
                    meta.len(),
                    meta.modified().unwrap(),
                    meta.permissions().mode(),
                ),
            );
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    out
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// The report in the shape the CLI renders, plus the fields only tests look at.
fn report_json(report: &VerifyReport) -> Json {
    let finding = |f: &audit::Finding| json!({"file": f.file, "line": f.line, "offset": f.offset, "kind": f.kind.as_str(), "message": f.message});
    json!({
        "ok": report.ok(),
        "errors": report.errors.iter().map(finding).collect::<Vec<_>>(),
        "tears": report.tears.iter().map(|t| json!({
            "file": t.segment,
            "line": t.line,
            "offset": t.byte_offset,
            "kind": t.class.as_str(),
            "sealed": t.sealed,
            "acknowledged": t.acknowledged,
            "verified_prefix_offset": t.verified_prefix_offset,
            "describe": t.describe(),
            "raw_errors": t.raw_errors.iter().map(|f| f.message.clone()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "entries": report.entries,
        "verified_entries": report.verified_entries,
        "head": report.head,
        "files": report.files,
    })
}

/// The machine kind a reference message stands for.
fn kind_of_message(message: &str) -> FindingKind {
    let body = message.split_once(": ").map_or(message, |(_, rest)| rest);
    let body = body
        .split_once(": ")
        .filter(|_| body.starts_with(|c: char| c.is_ascii_digit()))
        .map_or(body, |(_, rest)| rest);
    [
        (
            "missing trailing newline",
            FindingKind::MissingTrailingNewline,
        ),
        ("undecodable bytes", FindingKind::Undecodable),
        ("invalid JSON", FindingKind::InvalidJson),
        ("entry is not a JSON object", FindingKind::NotAnObject),
        ("unsupported audit scheme", FindingKind::UnsupportedScheme),
        ("non-canonical line bytes", FindingKind::NonCanonical),
        ("prev_hmac mismatch", FindingKind::PrevHmacMismatch),
        ("HMAC mismatch", FindingKind::HmacMismatch),
        (
            "stated chain predecessor",
            FindingKind::StatedPredecessorMismatch,
        ),
        (
            "unreadable archived segment",
            FindingKind::UnreadableArchive,
        ),
        ("segment disappeared", FindingKind::UnreadableSegment),
    ]
    .into_iter()
    .find(|(prefix, _)| body.starts_with(prefix))
    .map(|(_, kind)| kind)
    .unwrap_or_else(|| panic!("unknown reference message {message:?}"))
}

/// `(file, line)` of a reference message `file:line: ...` (line `None` for `file: ...`).
fn position_of_message(message: &str) -> (String, Option<u64>) {
    let (file, rest) = message.split_once(':').unwrap();
    let line = rest.split_once(':').and_then(|(n, _)| n.parse().ok());
    (file.to_owned(), line)
}

// ---------------------------------------------------------------------------------------------
// golden vectors
// ---------------------------------------------------------------------------------------------

/// One vector case: the verdict, every hard error, every tear and both head readings must be
/// the reference's.
fn check_vector(case: &str) {
    let case_dir = vector(&format!("audit/{case}"));
    let expected: Json =
        serde_json::from_slice(&fs::read(case_dir.join("expected.json")).unwrap()).unwrap();
    let key_ascii = expected["key_ascii"].as_str().unwrap();
    let (_key_dir, key) = ["audit.key", "wrong.key"]
        .into_iter()
        .map(fixture_key)
        .find(|(_, key)| key.master() == key_ascii.as_bytes())
        .expect("a fixture key matches key_ascii");
    let audit_dir = case_dir.join(".sdd/audit");
    let before = dir_state(&case_dir);

    let report = audit::verify(&audit_dir, &key);

    assert_eq!(
        report.ok(),
        expected["verify_ok"].as_bool().unwrap(),
        "{case}: ok"
    );
    assert_eq!(
        report.ok(),
        expected["detailed_ok"].as_bool().unwrap(),
        "{case}: detailed ok"
    );
    let want_errors: Vec<&str> = expected["detailed_hard_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(
        report.errors.len(),
        want_errors.len(),
        "{case}: {:#?}",
        report.errors
    );
    for (got, want) in report.errors.iter().zip(&want_errors) {
        let (file, line) = position_of_message(want);
        assert_eq!(got.file, file, "{case}: {want}");
        if line.is_some() {
            assert_eq!(got.line, line, "{case}: {want}");
        }
        assert_eq!(got.kind, kind_of_message(want), "{case}: {want}");
        assert_eq!(&got.message, want, "{case}");
    }
    let want_verify: Vec<&str> = expected["verify_errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(report.verify_messages(), want_verify, "{case}: verify()");

    let want_tears = expected["detailed_tears"].as_array().unwrap();
    assert_eq!(
        report.tears.len(),
        want_tears.len(),
        "{case}: {:#?}",
        report.tears
    );
    for (got, want) in report.tears.iter().zip(want_tears) {
        assert_eq!(got.segment, want["segment"].as_str().unwrap(), "{case}");
        assert_eq!(
            got.byte_offset,
            want["byte_offset"].as_i64().unwrap(),
            "{case}"
        );
        assert_eq!(
            got.verified_prefix_offset,
            want["verified_prefix_offset"].as_i64().unwrap(),
            "{case}"
        );
        assert_eq!(
            got.class.as_str(),
            want["tear_class"].as_str().unwrap(),
            "{case}"
        );
        assert_eq!(got.sealed, want["sealed"].as_bool().unwrap(), "{case}");
        assert_eq!(
            got.acknowledged,
            want["acknowledged"].as_bool().unwrap(),
            "{case}"
        );
        assert_eq!(got.describe(), want["describe"].as_str().unwrap(), "{case}");
        let raw: Vec<&str> = got.raw_errors.iter().map(|f| f.message.as_str()).collect();
        let want_raw: Vec<&str> = want["raw_errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(raw, want_raw, "{case}");
    }

    let mut files = report.files.clone();
    files.sort();
    let want_files: Vec<&str> = expected["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(files, want_files, "{case}: files");

    assert_eq!(
        audit::keyless_newest_segment_head(&audit_dir),
        expected["chain_head_keyless_newest_segment"]
            .as_str()
            .unwrap(),
        "{case}: keyless head"
    );
    assert_eq!(
        audit::recovered_head(&audit_dir, &key),
        expected["chain_head_recovered_with_key"].as_str().unwrap(),
        "{case}: recovered head"
    );
    assert_eq!(
        dir_state(&case_dir),
        before,
        "{case}: readers must not write"
    );
}

#[test]
fn every_vector_case_gets_the_reference_verdict() {
    let mut cases: Vec<String> = fs::read_dir(vector("audit"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 11, "{cases:?}");
    for case in &cases {
        check_vector(case);
    }
}

#[test]
fn vector_reports_render_in_the_cli_shape() {
    let reports: BTreeMap<&str, Json> = [
        "tamper_last_entry",
        "tamper_newline_vt",
        "stated_pred_mismatch",
    ]
    .into_iter()
    .map(|case| {
        let report = audit::verify(&vector(&format!("audit/{case}/.sdd/audit")), audit_key());
        (case, report_json(&report))
    })
    .collect();
    insta::assert_json_snapshot!("vector_reports", reports);
}

#[test]
fn readers_and_chains_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send::<audit::VerifiedRecords<'static>>();
    assert_send_sync::<AuditChain>();
    assert_send_sync::<AuditKey>();
    assert_send_sync::<VerifyReport>();
}

#[test]
fn preimages_and_derived_key_match_the_reference() {
    let doc: Json =
        serde_json::from_slice(&fs::read(vector("audit/basic/preimages.json")).unwrap()).unwrap();
    let key = audit_key();
    assert_eq!(
        key.master(),
        doc["master_key_ascii"].as_str().unwrap().as_bytes()
    );
    assert_eq!(
        hex(&key.derived("audit")),
        doc["derived_key_hex"].as_str().unwrap()
    );
    assert_eq!(
        audit::SCHEME_2_DOMAIN_TAG,
        doc["domain_prefix"].as_str().unwrap()
    );
    assert_eq!(GENESIS_HMAC, doc["genesis_prev_hmac"].as_str().unwrap());

    let audit_dir = vector("audit/basic/.sdd/audit");
    let mut walked = audit::verified_records(&audit_dir, key);
    let records: Vec<_> = walked.by_ref().collect();
    assert!(walked.finish().ok());
    let want = doc["records"].as_array().unwrap();
    assert_eq!(records.len(), want.len());
    for (got, want) in records.iter().zip(want) {
        let segment = want["segment"].as_str().unwrap();
        assert_eq!(got.segment, segment.rsplit('/').next().unwrap());
        assert_eq!(got.line, want["line"].as_u64().unwrap());
        assert_eq!(got.event_type, want["event_type"].as_str().unwrap());
        assert_eq!(got.hmac, want["hmac"].as_str().unwrap());
        assert_eq!(got.scheme, Scheme::V2);

        let mut body = got.record.clone();
        body.remove("hmac");
        let pre_image = format!(
            "{}{}{}",
            audit::SCHEME_2_DOMAIN_TAG,
            got.prev_hmac,
            Value::Object(body.clone()).dumps(Dialect::PY_SPACED)
        );
        assert_eq!(pre_image, want["hmac_preimage_utf8"].as_str().unwrap());
        assert_eq!(
            hmac_sha256_hex(&key.derived("audit"), &[pre_image.as_bytes()]),
            got.hmac
        );
        assert_eq!(
            audit::expected_hmac(key, Scheme::V2, &got.prev_hmac, &got.record),
            got.hmac
        );
        if let Some(stated) = got.details.get("prev_chain_digest") {
            assert_eq!(stated.as_str(), Some(got.prev_hmac.as_str()));
        }
    }
}

/// Appending the `basic` vector's events with their timestamps reproduces its bytes: the live
/// segments exactly, and the archived day as the live segment it was before archiving.
#[test]
fn re_appending_the_basic_vector_reproduces_its_bytes() {
    let source = vector("audit/basic/.sdd/audit");
    let key = audit_key();
    let records: Vec<_> = audit::verified_records(&source, key).collect();
    let scratch = tempfile::tempdir().unwrap();
    let chain = AuditChain::open(scratch.path().join("audit"), key.clone());
    let mut head = GENESIS_HMAC.to_owned();
    for record in &records {
        let mut details = record.details.clone();
        let anchored = details.remove("prev_chain_digest").is_some();
        let event = AuditEvent::new(
            record.event_type.clone(),
            record.actor.clone(),
            record.resource_type.clone(),
            record.resource_id.clone(),
            details,
        );
        let at = Timestamp::parse(&record.timestamp).unwrap();
        let appended = if anchored {
            chain.append_at(&event, at).unwrap()
        } else {
            chain.append_unanchored(&event, Some(at)).unwrap()
        };
        assert_eq!(appended.prev_hmac, head);
        assert_eq!(appended.hmac, record.hmac);
        assert_eq!(appended.sealed_tear, None);
        head = appended.hmac;
    }
    for day in ["2026-07-02.jsonl", "2026-07-03.jsonl"] {
        assert_eq!(
            fs::read(chain.dir().join(day)).unwrap(),
            fs::read(source.join(day)).unwrap(),
            "{day}"
        );
    }
    assert_eq!(
        fs::read(chain.dir().join("2026-07-01.jsonl")).unwrap(),
        gunzip(&source.join("archive/2026-07-01.jsonl.gz"))
    );
    let lock = chain.dir().join(audit::LOCK_FILE_NAME);
    assert_eq!(
        fs::metadata(&lock).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let report = chain.verify();
    assert!(report.ok(), "{report:#?}");
    assert_eq!((report.entries, report.verified_entries), (9, 9));
    assert_eq!(report.head, head);
    assert_eq!(chain.recovered_head(), head);
    assert_eq!(chain.keyless_newest_segment_head(), head);
}

// ---------------------------------------------------------------------------------------------
// scenarios
// ---------------------------------------------------------------------------------------------

const DAY_2: &str = "2026-07-02.jsonl";
const DAY_3: &str = "2026-07-03.jsonl";

fn at(text: &str) -> Timestamp {
    Timestamp::parse(text).unwrap()
}

fn test_event(n: u64) -> AuditEvent {
    AuditEvent::new(
        "test.event",
        "tester",
        "thing",
        format!("r-{n}"),
        Object::new()
            .with("n", n)
            .with("text", "caf\u{e9} \u{2615}"),
    )
}

/// Three records on 2026-07-02 and three on 2026-07-03.
fn base_chain(dir: &Path) -> AuditChain {
    let chain = AuditChain::open(dir.to_path_buf(), audit_key().clone());
    for n in 0..6u64 {
        let day = if n < 3 { "02" } else { "03" };
        chain
            .append_at(
                &test_event(n),
                at(&format!("2026-07-{day}T10:00:00.00000{n}Z")),
            )
            .unwrap();
    }
    chain
}

fn lines_of(path: &Path) -> Vec<Vec<u8>> {
    let bytes = fs::read(path).unwrap();
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    lines
}

fn write_lines(path: &Path, lines: &[Vec<u8>]) {
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    fs::write(path, out).unwrap();
}

fn append_raw(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

fn truncate_by(path: &Path, n: u64) {
    let file = fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - n).unwrap();
}

fn ack(chain: &AuditChain, segment: &str, byte_offset: i64) {
    let event = AuditEvent::new(
        audit::EVENT_CHAIN_TEAR_ACKNOWLEDGED,
        "operator",
        "audit_segment",
        segment,
        Object::new()
            .with("segment", segment)
            .with("byte_offset", byte_offset)
            .with("reason", "investigated"),
    );
    chain
        .append_unanchored(&event, Some(at("2026-07-03T12:00:00.000000Z")))
        .unwrap();
}

fn next_append(chain: &AuditChain) -> audit::AppendedRecord {
    chain
        .append_at(&test_event(99), at("2026-07-03T11:00:00.000000Z"))
        .unwrap()
}

/// Appends, by hand, the record a Python writer produces for a string holding a lone surrogate
/// (`json.dumps` writes it as the escape `\ud800`), chained onto the current head.
fn write_lone_surrogate_record(chain: &AuditChain) {
    let prev = chain.recovered_head();
    let body = format!(
        concat!(
            r#"{{"actor": "py", "details": {{"prev_chain_digest": "{prev}", "title": "x\ud800y"}}, "#,
            r#""event_type": "task.created", "prev_hmac": "{prev}", "resource_id": "t-1", "#,
            r#""resource_type": "task", "scheme": 2, "timestamp": "2026-07-03T10:30:00.000000Z"}}"#
        ),
        prev = prev
    );
    let key = chain.key().derived("audit");
    let hmac = hmac_sha256_hex(
        &key,
        &[
            audit::SCHEME_2_DOMAIN_TAG.as_bytes(),
            prev.as_bytes(),
            body.as_bytes(),
        ],
    );
    let line = body.replacen(
        r#""prev_hmac""#,
        &format!(r#""hmac": "{hmac}", "prev_hmac""#),
        1,
    );
    append_raw(&chain.dir().join(DAY_3), format!("{line}\n").as_bytes());
}

/// Expected verdict of one scenario.
struct Expect {
    ok: bool,
    /// `(file, line, kind)` of every hard error, in order.
    errors: &'static [(&'static str, Option<u64>, &'static str)],
    /// `(segment, byte_offset, verified_prefix_offset, class, sealed, acknowledged)`.
    tears: &'static [(&'static str, i64, i64, &'static str, bool, bool)],
    /// Which record's `hmac` reading 1 must return: `(segment, 1-based line)`, or genesis.
    recovered: Option<(&'static str, u64)>,
    /// Which record's `hmac` reading 2 must return, or `""`.
    keyless: Option<(&'static str, u64)>,
}

type Mutation = fn(&AuditChain);

/// Damage scenarios on [`base_chain`]. Line numbers are physical lines; byte offsets follow from
/// the fixed key and timestamps (every base record is 447 bytes plus its terminator). Every expectation here is
/// what bernstein 3.23 reports for the same bytes.
fn scenarios() -> Vec<(&'static str, Mutation, Expect)> {
    vec![
        (
            "clean",
            |_| {},
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_partial_record",
            |c| truncate_by(&c.dir().join(DAY_3), 40),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1304, 896, "partial_record", false, false)],
                recovered: Some((DAY_3, 2)),
                keyless: Some((DAY_3, 2)),
            },
        ),
        (
            "final_lost_terminator",
            |c| truncate_by(&c.dir().join(DAY_3), 1),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1343, 1343, "unterminated_record", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_garbage_undecodable",
            |c| append_raw(&c.dir().join(DAY_3), b"\xff\xfe garbage\n"),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1355, 1344, "garbage_bytes", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_two_garbage_lines",
            |c| append_raw(&c.dir().join(DAY_3), b"abc\ndef\n"),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1352, 1344, "garbage_bytes", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_non_canonical",
            |c| {
                let path = c.dir().join(DAY_3);
                let mut lines = lines_of(&path);
                lines[2] = String::from_utf8(lines[2].clone())
                    .unwrap()
                    .replacen(": ", ":  ", 1)
                    .into_bytes();
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1345, 896, "non_canonical", false, false)],
                recovered: Some((DAY_3, 2)),
                keyless: Some((DAY_3, 2)),
            },
        ),
        (
            "final_empty_object",
            |c| append_raw(&c.dir().join(DAY_3), b"{}\n"),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1347, 1344, "invalid_hmac", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_not_object",
            |c| append_raw(&c.dir().join(DAY_3), b"[1, 2]\n"),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1351, 1344, "non_canonical", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "final_unknown_scheme",
            |c| append_raw(&c.dir().join(DAY_3), b"{\"hmac\": \"ab\", \"scheme\": 7}\n"),
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1372, 1344, "garbage_bytes", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 4)),
            },
        ),
        (
            "middle_garbage_line",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                lines.insert(1, b"not json".to_vec());
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[(DAY_2, Some(2), "invalid_json")],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "middle_nul_in_line",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                let pos = lines[1].iter().position(|&b| b == b'r').unwrap();
                lines[1][pos] = 0;
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[
                    (DAY_2, Some(2), "invalid_json"),
                    (DAY_2, Some(3), "prev_hmac_mismatch"),
                    (DAY_2, Some(3), "hmac_mismatch"),
                ],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "middle_invalid_utf8",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                let pos = lines[1].iter().position(|&b| b == b'r').unwrap();
                lines[1][pos] = 0xff;
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[
                    (DAY_2, Some(2), "undecodable"),
                    (DAY_2, Some(3), "prev_hmac_mismatch"),
                    (DAY_2, Some(3), "hmac_mismatch"),
                ],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "middle_bom_line",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                lines[1].splice(0..0, *b"\xef\xbb\xbf");
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[
                    (DAY_2, Some(2), "non_canonical"),
                    (DAY_2, Some(3), "prev_hmac_mismatch"),
                    (DAY_2, Some(3), "hmac_mismatch"),
                ],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "middle_crlf",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                lines[0].push(b'\r');
                write_lines(&path, &lines);
            },
            Expect {
                ok: false,
                errors: &[
                    (DAY_2, Some(1), "non_canonical"),
                    (DAY_2, Some(2), "prev_hmac_mismatch"),
                    (DAY_2, Some(2), "hmac_mismatch"),
                ],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "blank_lines_are_skipped",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                lines.insert(1, Vec::new());
                lines.insert(0, Vec::new());
                write_lines(&path, &lines);
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "non_final_missing_newline",
            |c| truncate_by(&c.dir().join(DAY_2), 1),
            Expect {
                ok: false,
                errors: &[(DAY_2, Some(3), "missing_trailing_newline")],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "middle_garbage_and_final_tear",
            |c| {
                let path = c.dir().join(DAY_2);
                let mut lines = lines_of(&path);
                lines.insert(1, b"\x00\x01garbage".to_vec());
                write_lines(&path, &lines);
                truncate_by(&c.dir().join(DAY_3), 1);
            },
            Expect {
                ok: false,
                errors: &[(DAY_2, Some(2), "undecodable")],
                tears: &[(DAY_3, 1343, 1343, "unterminated_record", false, false)],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "sealed_partial_record",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 40);
                next_append(c);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1304, 896, "partial_record", true, false)],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "sealed_and_acknowledged",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 40);
                next_append(c);
                ack(c, DAY_3, 1304);
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[(DAY_3, 1304, 896, "partial_record", true, true)],
                recovered: Some((DAY_3, 6)),
                keyless: Some((DAY_3, 6)),
            },
        ),
        (
            "ack_seals_first",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 40);
                ack(c, DAY_3, 1304);
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[(DAY_3, 1304, 896, "partial_record", true, true)],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "ack_naming_another_offset",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 40);
                ack(c, DAY_3, 1305);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1304, 896, "partial_record", true, false)],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "sealed_lost_terminator",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 1);
                next_append(c);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1343, 1343, "unterminated_record", true, false)],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "sealed_garbage",
            |c| {
                append_raw(&c.dir().join(DAY_3), b"abc\n\xffdef");
                next_append(c);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1352, 1344, "garbage_bytes", true, false)],
                recovered: Some((DAY_3, 7)),
                keyless: Some((DAY_3, 7)),
            },
        ),
        (
            "sealed_invalid_hmac_adopts_the_stored_hmac",
            |c| {
                let path = c.dir().join(DAY_3);
                let mut lines = lines_of(&path);
                lines[2] = String::from_utf8(lines[2].clone())
                    .unwrap()
                    .replace("\"n\": 5", "\"n\": 6")
                    .into_bytes();
                write_lines(&path, &lines);
                next_append(c);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1344, 896, "invalid_hmac", true, false)],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "sealed_unknown_scheme_tail",
            |c| {
                append_raw(&c.dir().join(DAY_3), b"{\"hmac\": \"ab\", \"scheme\": 7}\n");
                next_append(c);
            },
            Expect {
                ok: false,
                errors: &[],
                tears: &[(DAY_3, 1372, 1344, "invalid_hmac", true, false)],
                recovered: Some((DAY_3, 6)),
                keyless: Some((DAY_3, 6)),
            },
        ),
        (
            "sealed_then_clock_goes_back",
            |c| {
                truncate_by(&c.dir().join(DAY_3), 40);
                c.append_at(&test_event(7), at("2026-07-04T00:00:00.000000Z"))
                    .unwrap();
                c.append_at(&test_event(8), at("2026-07-03T23:00:00.000000Z"))
                    .unwrap();
            },
            Expect {
                ok: false,
                errors: &[],
                // The record on 07-04 chained onto the head before the seal written later on
                // 07-03, so the final segment's only record fails linkage: an unsealed tear.
                tears: &[
                    (DAY_3, 1304, 896, "partial_record", true, false),
                    ("2026-07-04.jsonl", 448, 0, "invalid_hmac", false, false),
                ],
                recovered: Some(("2026-07-04.jsonl", 1)),
                keyless: Some(("2026-07-04.jsonl", 1)),
            },
        ),
        (
            "python_record_with_lone_surrogate",
            |c| {
                write_lone_surrogate_record(c);
                next_append(c);
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 5)),
                keyless: Some((DAY_3, 5)),
            },
        ),
        (
            "legacy_anchor_events_are_exempt",
            |c| {
                let event = AuditEvent::new(
                    "skill.catalog.install",
                    "catalog",
                    "skill",
                    "s-1",
                    Object::new().with("prev_chain_digest", "f".repeat(64)),
                );
                c.append_unanchored(&event, Some(at("2026-07-03T11:00:00.000000Z")))
                    .unwrap();
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 4)),
                keyless: Some((DAY_3, 4)),
            },
        ),
        (
            "stated_predecessor_mismatch",
            |c| {
                let event = AuditEvent::new(
                    "task.created",
                    "task_server",
                    "task",
                    "t-1",
                    Object::new().with("prev_chain_digest", "f".repeat(64)),
                );
                c.append_unanchored(&event, Some(at("2026-07-03T11:00:00.000000Z")))
                    .unwrap();
            },
            Expect {
                ok: false,
                errors: &[(DAY_3, Some(4), "stated_predecessor_mismatch")],
                tears: &[],
                recovered: Some((DAY_3, 4)),
                keyless: Some((DAY_3, 4)),
            },
        ),
        (
            "directory_named_like_a_segment",
            |c| fs::create_dir(c.dir().join("2026-07-09.jsonl")).unwrap(),
            Expect {
                ok: false,
                errors: &[("2026-07-09.jsonl", None, "unreadable_segment")],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: None,
            },
        ),
        (
            "corrupt_archive",
            |c| {
                fs::create_dir_all(c.dir().join("archive")).unwrap();
                fs::write(
                    c.dir().join("archive/2026-07-01.jsonl.gz"),
                    b"\x1f\x8bnot really",
                )
                .unwrap();
            },
            Expect {
                ok: false,
                errors: &[("2026-07-01.jsonl.gz", None, "unreadable_archive")],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "empty_archive",
            |c| {
                fs::create_dir_all(c.dir().join("archive")).unwrap();
                fs::write(c.dir().join("archive/2026-07-01.jsonl.gz"), b"").unwrap();
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "archived_day",
            |c| {
                let path = c.dir().join(DAY_2);
                gzip_to(
                    &fs::read(&path).unwrap(),
                    &c.dir().join("archive/2026-07-02.jsonl.gz"),
                );
                fs::remove_file(path).unwrap();
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
        (
            "everything_archived",
            |c| {
                for day in [DAY_2, DAY_3] {
                    let path = c.dir().join(day);
                    gzip_to(
                        &fs::read(&path).unwrap(),
                        &c.dir().join(format!("archive/{day}.gz")),
                    );
                    fs::remove_file(path).unwrap();
                }
            },
            Expect {
                ok: true,
                errors: &[],
                tears: &[],
                recovered: Some(("2026-07-03.jsonl.gz", 3)),
                keyless: None,
            },
        ),
        (
            "deleted_first_day",
            |c| fs::remove_file(c.dir().join(DAY_2)).unwrap(),
            Expect {
                ok: false,
                errors: &[
                    (DAY_3, Some(1), "prev_hmac_mismatch"),
                    (DAY_3, Some(1), "hmac_mismatch"),
                ],
                tears: &[],
                recovered: Some((DAY_3, 3)),
                keyless: Some((DAY_3, 3)),
            },
        ),
    ]
}

/// The `hmac` stored on a given physical line of a (possibly archived) segment.
fn hmac_at(audit_dir: &Path, segment: &str, line: u64) -> String {
    let bytes = if segment.ends_with(".gz") {
        gunzip(&audit_dir.join("archive").join(segment))
    } else {
        fs::read(audit_dir.join(segment)).unwrap()
    };
    let raw = bytes.split(|&b| b == b'\n').nth(line as usize - 1).unwrap();
    let value = Value::parse(std::str::from_utf8(raw).unwrap()).unwrap();
    value
        .as_object()
        .unwrap()
        .get("hmac")
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
}

fn check_scenario(name: &str, mutate: Mutation, expect: &Expect) -> Json {
    let scratch = tempfile::tempdir().unwrap();
    let chain = base_chain(&scratch.path().join("audit"));
    mutate(&chain);
    let before = dir_state(chain.dir());
    let report = chain.verify();
    if let Ok(dump) = std::env::var("BERNSTEIN_AUDIT_SCENARIO_DUMP") {
        let target = Path::new(&dump).join(name);
        let _ = fs::remove_dir_all(&target);
        copy_tree(chain.dir(), &target.join("audit"));
        let mut dumped = report_json(&report);
        dumped["recovered"] = json!(chain.recovered_head());
        dumped["keyless"] = json!(chain.keyless_newest_segment_head());
        fs::write(
            target.join("rust.json"),
            serde_json::to_vec_pretty(&dumped).unwrap(),
        )
        .unwrap();
        // Dump mode collects material for a comparison with the reference; it asserts nothing.
        return dumped;
    }

    assert_eq!(report.ok(), expect.ok, "{name}: {report:#?}");
    let errors: Vec<(&str, Option<u64>, &str)> = report
        .errors
        .iter()
        .map(|f| (f.file.as_str(), f.line, f.kind.as_str()))
        .collect();
    assert_eq!(errors, expect.errors, "{name}: {:#?}", report.errors);
    let tears: Vec<(&str, i64, i64, &str, bool, bool)> = report
        .tears
        .iter()
        .map(|t| {
            (
                t.segment.as_str(),
                t.byte_offset,
                t.verified_prefix_offset,
                t.class.as_str(),
                t.sealed,
                t.acknowledged,
            )
        })
        .collect();
    assert_eq!(tears, expect.tears, "{name}: {:#?}", report.tears);
    let recovered = expect.recovered.map_or_else(
        || GENESIS_HMAC.to_owned(),
        |(s, l)| hmac_at(chain.dir(), s, l),
    );
    assert_eq!(chain.recovered_head(), recovered, "{name}: recovered head");
    let keyless = expect
        .keyless
        .map_or_else(String::new, |(s, l)| hmac_at(chain.dir(), s, l));
    assert_eq!(
        chain.keyless_newest_segment_head(),
        keyless,
        "{name}: keyless head"
    );
    assert_eq!(
        dir_state(chain.dir()),
        before,
        "{name}: readers must not write"
    );

    report_json(&report)
}

#[test]
fn damage_scenarios_get_the_reference_verdict() {
    let reports: BTreeMap<&str, Json> = scenarios()
        .into_iter()
        .map(|(name, mutate, expect)| (name, check_scenario(name, mutate, &expect)))
        .collect();
    if std::env::var_os("BERNSTEIN_AUDIT_SCENARIO_DUMP").is_none() {
        insta::assert_json_snapshot!("scenario_reports", reports);
    }
}

#[test]
fn sealing_reports_what_it_sealed_and_the_chain_continues() {
    let scratch = tempfile::tempdir().unwrap();
    let chain = base_chain(&scratch.path().join("audit"));
    let path = chain.dir().join(DAY_3);
    truncate_by(&path, 40);
    let torn_from = 896u64;
    let torn = fs::read(&path).unwrap()[torn_from as usize..].to_vec();
    let appended = next_append(&chain);
    let seal = appended
        .sealed_tear
        .clone()
        .expect("the torn tail was sealed");
    assert_eq!(seal.segment, DAY_3);
    assert_eq!(
        (seal.byte_offset, seal.verified_prefix_offset),
        (1304, torn_from)
    );
    assert_eq!(seal.tear_class, TearClass::PartialRecord);
    assert_eq!(
        seal.torn_bytes_sha256,
        bernstein_journal::crypto::sha256_hex(&torn)
    );
    assert_eq!(appended.prev_hmac, seal.record_hmac);
    // Torn bytes, the sealing terminator at 1304, the seal record, then the new record.
    assert_eq!(appended.offset, 1305 + lines_of(&path)[3].len() as u64 + 1);

    let records: Vec<_> = chain.verified_records().collect();
    let marker = records
        .iter()
        .find(|r| r.event_type == audit::EVENT_CHAIN_TORN_RECORD)
        .unwrap();
    assert_eq!(marker.line, 4);
    assert_eq!(marker.actor, "audit-log");
    assert_eq!(marker.resource_type, "audit_segment");
    assert_eq!(marker.resource_id, DAY_3);
    assert!(!marker.details.contains_key("prev_chain_digest"));
    assert_eq!(
        marker.details.get("byte_offset").and_then(Value::as_i64),
        Some(1304)
    );
    // A second append finds a clean tail and seals nothing.
    assert_eq!(next_append(&chain).sealed_tear, None);
}

// ---------------------------------------------------------------------------------------------
// bad input: findings or clear errors, never a panic, never a write
// ---------------------------------------------------------------------------------------------

#[test]
fn hostile_segments_are_findings_and_never_written() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("audit");
    fs::create_dir_all(&dir).unwrap();
    let mut huge = vec![b'{'; MAX_LINE_BYTES + 5];
    huge.push(b'\n');
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("2026-01-01.jsonl", b"\0\0\0\0\n\0".to_vec()),
        ("2026-01-02.jsonl", b"\xff\xfe\xfd\n\xc3\x28\n".to_vec()),
        ("2026-01-03.jsonl", huge),
        (
            "2026-01-04.jsonl",
            b"{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n".repeat(3),
        ),
        ("2026-01-05.jsonl", "[".repeat(100_000).into_bytes()),
        (
            "2026-01-06.jsonl",
            b"{\"hmac\": 5, \"prev_hmac\": null, \"scheme\": 2}\n".to_vec(),
        ),
        (
            "2026-01-07.jsonl",
            b"NaN\n-Infinity\n1e999\n\"\\ud800\"\n".to_vec(),
        ),
    ];
    for (name, bytes) in &inputs {
        fs::write(dir.join(name), bytes).unwrap();
    }
    let before = dir_state(&dir);
    let mut progress = Vec::new();
    let report =
        audit::verify_with_progress(&dir, audit_key(), &mut |p: VerifyProgress| progress.push(p));
    assert_eq!(dir_state(&dir), before);
    assert!(!report.ok());
    assert_eq!(report.verified_entries, 0);
    assert!(
        report.tears.is_empty(),
        "nothing verified, so nothing is a tear"
    );
    let kinds: Vec<(&str, Option<u64>, &str)> = report
        .errors
        .iter()
        .map(|f| (f.file.as_str(), f.line, f.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("2026-01-01.jsonl", Some(2), "missing_trailing_newline"),
            ("2026-01-01.jsonl", Some(1), "invalid_json"),
            ("2026-01-01.jsonl", Some(2), "invalid_json"),
            ("2026-01-02.jsonl", Some(1), "undecodable"),
            ("2026-01-02.jsonl", Some(2), "undecodable"),
            ("2026-01-03.jsonl", Some(1), "line_too_long"),
            ("2026-01-04.jsonl", Some(1), "invalid_json"),
            ("2026-01-04.jsonl", Some(2), "invalid_json"),
            ("2026-01-04.jsonl", Some(3), "invalid_json"),
            ("2026-01-05.jsonl", Some(1), "missing_trailing_newline"),
            ("2026-01-05.jsonl", Some(1), "invalid_json"),
            ("2026-01-06.jsonl", Some(1), "prev_hmac_mismatch"),
            ("2026-01-06.jsonl", Some(1), "hmac_mismatch"),
            ("2026-01-07.jsonl", Some(1), "not_an_object"),
            ("2026-01-07.jsonl", Some(2), "not_an_object"),
            ("2026-01-07.jsonl", Some(3), "not_an_object"),
            ("2026-01-07.jsonl", Some(4), "not_an_object"),
        ]
    );
    assert_eq!(
        report.errors[3].message,
        "2026-01-02.jsonl:1: undecodable bytes at offset 2 - 'utf-16-le' codec can't decode byte 0xfd in position 2: truncated data"
    );
    assert_eq!(
        report.errors[11].message,
        "2026-01-06.jsonl:1: prev_hmac mismatch (expected 0000000000000000\u{2026}, got None\u{2026})"
    );
    // The non-string stored hmac `5` is adopted as the head in its Python `str()` form.
    assert_eq!(report.head, "5");
    let total: u64 = inputs.iter().map(|(_, b)| b.len() as u64).sum();
    let last = progress.last().unwrap();
    assert_eq!((last.bytes_done, last.bytes_total), (total, total));
    assert!(
        progress
            .windows(2)
            .all(|w| w[0].bytes_done <= w[1].bytes_done)
    );
    assert_eq!(audit::keyless_newest_segment_head(&dir), "");
    assert_eq!(audit::recovered_head(&dir, audit_key()), GENESIS_HMAC);
}

/// The progress callback comes at most once per MiB read (and once per finished segment and
/// at the end), not once per line or batch, so a terminal progress bar is not redrawn
/// thousands of times. The reader runs ahead of the fold, so a short chain may be reported
/// whole at the first call; only the upper bound is fixed.
#[test]
fn progress_is_reported_at_most_once_per_mebibyte() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("audit");
    fs::create_dir_all(&dir).unwrap();
    // One segment of 3.5 MiB in 28,672 short lines, so a batch of lines is far below a MiB;
    // what the lines hold does not matter here.
    let line = format!("{}\n", "x".repeat(127));
    fs::write(dir.join("2026-01-01.jsonl"), line.repeat(28_672)).unwrap();
    let mut progress = Vec::new();
    audit::verify_with_progress(&dir, audit_key(), &mut |p: VerifyProgress| progress.push(p));
    let done: Vec<u64> = progress.iter().map(|p| p.bytes_done).collect();
    // Three whole MiB crossed, the segment finished, the end.
    assert!((1..=5).contains(&done.len()), "{done:?}");
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    assert_eq!(*done.last().unwrap(), 28_672 * 128);

    // Three small segments: one report as each is finished, however few bytes it held.
    let small = scratch.path().join("small");
    fs::create_dir_all(&small).unwrap();
    for day in ["2026-01-01", "2026-01-02", "2026-01-03"] {
        fs::write(small.join(format!("{day}.jsonl")), &line).unwrap();
    }
    let mut calls = 0;
    audit::verify_with_progress(&small, audit_key(), &mut |_| calls += 1);
    assert!(
        (3..=4).contains(&calls),
        "{calls} reports for three segments"
    );
}

/// A torn tail that is one line over the line limit is sealed as garbage bytes: the sealer
/// hashes the tail streaming and never holds such a line whole, so it cannot parse it as the
/// partial record the same start under the limit is.
#[test]
fn a_torn_line_over_the_line_limit_is_sealed_as_garbage() {
    let seal_of = |torn: &[u8]| {
        let scratch = tempfile::tempdir().unwrap();
        let chain = base_chain(&scratch.path().join("audit"));
        let path = chain.dir().join(DAY_3);
        let verified = fs::metadata(&path).unwrap().len();
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(torn)
            .unwrap();
        let seal = next_append(&chain)
            .sealed_tear
            .expect("the torn tail was sealed");
        assert_eq!(
            (seal.verified_prefix_offset, seal.byte_offset),
            (verified, verified + torn.len() as u64)
        );
        assert_eq!(
            seal.torn_bytes_sha256,
            bernstein_journal::crypto::sha256_hex(torn)
        );
        assert!(chain.verify().errors.is_empty());
        seal.tear_class
    };
    let mut torn = br#"{"actor": ""#.to_vec();
    assert_eq!(seal_of(&torn), TearClass::PartialRecord);
    torn.resize(MAX_LINE_BYTES + 1, b'x');
    assert_eq!(seal_of(&torn), TearClass::GarbageBytes);
}

#[test]
fn appending_refuses_nothing_it_can_seal_and_leaves_no_stray_files() {
    // A segment of pure garbage: the append seals it (nothing verified locally) and the chain
    // continues from the recovered head of the older segments.
    let scratch = tempfile::tempdir().unwrap();
    let chain = base_chain(&scratch.path().join("audit"));
    fs::write(chain.dir().join("2026-07-04.jsonl"), b"\0\xff garbage").unwrap();
    let appended = chain
        .append_at(&test_event(9), at("2026-07-04T01:00:00.000000Z"))
        .unwrap();
    let seal = appended.sealed_tear.unwrap();
    assert_eq!((seal.byte_offset, seal.verified_prefix_offset), (10, 0));
    assert_eq!(seal.tear_class, TearClass::GarbageBytes);
    let report = chain.verify();
    assert!(report.errors.is_empty(), "{:#?}", report.errors);
    assert_eq!(report.tears.len(), 1);
    assert!(report.tears[0].sealed);
    let mut names: Vec<_> = fs::read_dir(chain.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".chain.lock", DAY_2, DAY_3, "2026-07-04.jsonl"]);
}

#[test]
fn key_problems_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8], mode: u32| {
        let path = dir.path().join(name);
        fs::write(&path, bytes).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        KeyLocator::at(path)
    };
    assert!(matches!(
        AuditKey::load(&KeyLocator::at(dir.path().join("absent"))),
        Err(Error::KeyMissing { .. })
    ));
    assert!(matches!(
        AuditKey::load(&write("open", b"3f1c", 0o644)),
        Err(Error::KeyPermissions { mode: 0o644, .. })
    ));
    assert!(matches!(
        AuditKey::load_or_create(&write("group", b"3f1c", 0o640)),
        Err(Error::KeyPermissions { .. })
    ));
    for (name, bytes) in [
        ("nul", &b"\0\0\0"[..]),
        ("empty", b"\n"),
        ("binary", b"\xff\xfe"),
    ] {
        let err = AuditKey::load(&write(name, bytes, 0o600)).unwrap_err();
        assert!(matches!(err, Error::KeyMalformed { .. }), "{name}: {err}");
        assert!(!err.to_string().contains('\0'));
    }
    // The fixture's wrong key is accepted: it is printable ASCII, just not the chain's key.
    let (_dir, wrong) = fixture_key("wrong.key");
    assert_eq!(wrong.master(), b"not-the-key");
}

// ---------------------------------------------------------------------------------------------
// properties
// ---------------------------------------------------------------------------------------------

/// A five-record single-segment chain, built once with the real append path.
struct PropertyChain {
    bytes: Vec<u8>,
    /// `[start, end)` of each record's line, terminator included.
    spans: Vec<(usize, usize)>,
}

fn property_chain() -> &'static PropertyChain {
    static CHAIN: OnceLock<PropertyChain> = OnceLock::new();
    CHAIN.get_or_init(|| {
        let scratch = tempfile::tempdir().unwrap();
        let chain = AuditChain::open(scratch.path().join("audit"), audit_key().clone());
        for n in 0..5u64 {
            chain
                .append_at(
                    &test_event(n),
                    at(&format!("2026-07-05T08:00:00.00000{n}Z")),
                )
                .unwrap();
        }
        let bytes = fs::read(chain.dir().join("2026-07-05.jsonl")).unwrap();
        let mut spans = Vec::new();
        let mut start = 0;
        for (pos, &b) in bytes.iter().enumerate() {
            if b == b'\n' {
                spans.push((start, pos + 1));
                start = pos + 1;
            }
        }
        PropertyChain { bytes, spans }
    })
}

fn verify_bytes(bytes: &[u8]) -> VerifyReport {
    let scratch = tempfile::tempdir().unwrap();
    fs::write(scratch.path().join("2026-07-05.jsonl"), bytes).unwrap();
    audit::verify(scratch.path(), audit_key())
}

#[test]
fn an_untouched_generated_chain_verifies() {
    let PropertyChain { bytes, spans } = property_chain();
    let report = verify_bytes(bytes);
    assert!(report.ok(), "{report:#?}");
    assert_eq!(report.entries, spans.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_changed_byte_is_reported_at_its_record(
        record in 0usize..5,
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
    ) {
        let PropertyChain { bytes, spans } = property_chain();
        let (start, end) = spans[record];
        let at = start + position.index(end - start);
        prop_assume!(bytes[at] != replacement);
        let mut damaged = bytes.clone();
        damaged[at] = replacement;
        let report = verify_bytes(&damaged);
        prop_assert!(!report.ok());
        let first_line = report
            .errors
            .iter()
            .chain(report.tears.iter().flat_map(|t| t.raw_errors.iter()))
            .filter_map(|f| f.line)
            .min();
        prop_assert_eq!(first_line, Some(record as u64 + 1), "{:#?}", report);
    }
}

// ---------------------------------------------------------------------------------------------
// four OS processes appending to one chain
// ---------------------------------------------------------------------------------------------

const CHILD_DIR: &str = "BERNSTEIN_AUDIT_TEST_CHILD_DIR";
const CHILD_KEY: &str = "BERNSTEIN_AUDIT_TEST_CHILD_KEY";
const CHILD_ID: &str = "BERNSTEIN_AUDIT_TEST_CHILD_ID";
const APPENDS_PER_PROCESS: u64 = 40;

/// The appender loop run by each child process of `four_processes_append_to_one_linear_chain`.
#[test]
#[ignore = "child process of four_processes_append_to_one_linear_chain"]
fn concurrent_append_child() {
    let (Ok(dir), Ok(key_path), Ok(id)) = (
        std::env::var(CHILD_DIR),
        std::env::var(CHILD_KEY),
        std::env::var(CHILD_ID),
    ) else {
        panic!("run only as a child process of four_processes_append_to_one_linear_chain");
    };
    let key = AuditKey::load(&KeyLocator::at(key_path)).unwrap();
    let chain = AuditChain::open(dir, key);
    crate::races::wait_for_go();
    for seq in 0..APPENDS_PER_PROCESS {
        let event = AuditEvent::new(
            "test.concurrent",
            format!("writer-{id}"),
            "thing",
            format!("{id}-{seq}"),
            Object::new().with("writer", id.as_str()).with("seq", seq),
        );
        chain.append(&event).unwrap();
    }
}

#[test]
fn four_processes_append_to_one_linear_chain() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("audit");
    let (key_dir, _) = fixture_key("audit.key");
    let exe = std::env::current_exe().unwrap();
    // All four wait on one go-file, so their appends contend for the lock.
    let commands = (0..4)
        .map(|id| {
            let mut command = Command::new(&exe);
            command
                .args([
                    "audit::concurrent_append_child",
                    "--exact",
                    "--ignored",
                    "--test-threads=1",
                ])
                .env(CHILD_DIR, &dir)
                .env(CHILD_KEY, key_dir.path().join("audit.key"))
                .env(CHILD_ID, id.to_string())
                .stdout(std::process::Stdio::null());
            command
        })
        .collect();
    for mut child in crate::races::start_together(scratch.path(), commands) {
        assert!(child.wait().unwrap().success());
    }

    let key = audit_key();
    let mut walked = audit::verified_records(&dir, key);
    let records: Vec<_> = walked.by_ref().collect();
    let report = walked.finish();
    assert!(report.ok(), "{:#?}", report.errors);
    let total = 4 * APPENDS_PER_PROCESS;
    assert_eq!((report.entries, report.verified_entries), (total, total));
    let mut next_seq = BTreeMap::new();
    let mut prev = GENESIS_HMAC.to_owned();
    for record in &records {
        assert_eq!(record.prev_hmac, prev);
        assert_eq!(
            record
                .details
                .get("prev_chain_digest")
                .and_then(Value::as_str),
            Some(prev.as_str())
        );
        let writer = record
            .details
            .get("writer")
            .and_then(Value::as_str)
            .unwrap()
            .to_owned();
        let seq = record.details.get("seq").and_then(Value::as_i64).unwrap();
        let expected = next_seq.entry(writer).or_insert(0i64);
        assert_eq!(
            seq, *expected,
            "each writer's records appear in its own order"
        );
        *expected += 1;
        prev = record.hmac.clone();
    }
    assert_eq!(next_seq.len(), 4);
    let writers: Vec<String> = records
        .iter()
        .map(|r| {
            r.details
                .get("writer")
                .and_then(Value::as_str)
                .unwrap()
                .to_owned()
        })
        .collect();
    crate::races::assert_interleaved(&writers);
    assert!(next_seq.values().all(|&n| n == APPENDS_PER_PROCESS as i64));
    assert_eq!(report.head, prev);
    assert_eq!(audit::recovered_head(&dir, key), prev);
}
