//! The ADR-009 lineage log against the Bernstein 3.23 vectors (`artifacts/`,
//! `artifacts_tampered/`) and logs written by this crate, including non-ASCII entries the
//! reference's own check rejects.

use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::lineage_log::{
    AgentCard, AgentCards, LineageLog, LineageProblemKind, LineageVerification, NewLineageEntry,
    verify_lineage,
};
use bernstein_protocol::pyjson::{Dialect, Value};

use crate::support::{fixtures, vector};

const AGENT: &str = "agent:worker-a";
const KID: &str = "worker-a-key-1";

pub(crate) fn operator_key() -> Vec<u8> {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    raw.trim().as_bytes().to_vec()
}

fn expected() -> Value {
    Value::parse(&fs::read_to_string(vector("artifacts/expected.json")).unwrap()).unwrap()
}

/// The generator's agent: Ed25519 seed `0x33` repeated.
pub(crate) fn signer() -> SigningIdentity {
    SigningIdentity::from_seed(&[0x33; 32]).unwrap()
}

pub(crate) fn cards() -> AgentCards {
    let mut cards = AgentCards::new();
    cards.insert(AgentCard::new(AGENT, KID, signer().public_key_pem()).unwrap());
    cards
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::write(&target, fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

pub(crate) fn write(
    path: &str,
    content: &[u8],
    tool_call_id: &str,
    span_id: &str,
    ts_ns: u64,
) -> NewLineageEntry<'static> {
    NewLineageEntry {
        artefact_path: Box::leak(path.to_owned().into_boxed_str()),
        artefact_kind: "file",
        content: Box::leak(content.to_vec().into_boxed_slice()),
        agent_id: AGENT,
        agent_card_kid: KID,
        tool_call_id: Box::leak(tool_call_id.to_owned().into_boxed_str()),
        span_id: Box::leak(span_id.to_owned().into_boxed_str()),
        ts_ns,
        extra_parents: &[],
        trust_class: None,
        sensitivity: None,
    }
}

/// The generator's two `seal_write` calls.
fn vector_writes() -> [NewLineageEntry<'static>; 2] {
    [
        write(
            "src/app.py",
            b"print('v1')\n",
            "call-1",
            "00f067aa0ba902b7",
            1_780_000_800_000_000_000,
        ),
        write(
            "src/app.py",
            b"print('v2')\n",
            "call-2",
            "00f067aa0ba902b8",
            1_780_000_800_000_000_001,
        ),
    ]
}

fn kinds_at(report: &LineageVerification, line: usize) -> Vec<LineageProblemKind> {
    report
        .problems
        .iter()
        .filter(|p| p.line == Some(line))
        .map(|p| p.kind)
        .collect()
}

#[test]
fn the_generator_agent_is_the_seed_0x33_identity() {
    let expected = expected();
    let pem = expected
        .as_object()
        .unwrap()
        .get("lineage_log")
        .unwrap()
        .as_object()
        .unwrap()
        .get("agent_public_key_pem")
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(signer().public_key_pem(), pem);
}

#[test]
fn the_vector_log_verifies_including_hmacs_and_signatures() {
    let root = vector("artifacts");
    let report = verify_lineage(&root, "src/app.py", &operator_key(), &cards()).unwrap();
    assert!(report.ok, "{report:#?}");
    assert_eq!(report.reason, None);
    assert_eq!(report.entries, 2);
    let expected = expected();
    let hashes: Vec<Value> = report
        .artefact_entries
        .iter()
        .map(|h| Value::from(h.as_str()))
        .collect();
    let lineage = expected
        .as_object()
        .unwrap()
        .get("lineage_log")
        .unwrap()
        .as_object()
        .unwrap();
    assert_eq!(Value::Array(hashes), *lineage.get("entry_hashes").unwrap());
    assert_eq!(
        Value::Object(report.to_tool_result()),
        *lineage.get("bernstein_verify_lineage_src_app_py").unwrap()
    );
    // An artefact with no entry in a sound log is ok, as the reference answers.
    let unknown = verify_lineage(&root, "nope.txt", &operator_key(), &cards()).unwrap();
    assert_eq!(
        Value::Object(unknown.to_tool_result()),
        *lineage
            .get("bernstein_verify_lineage_unknown_path")
            .unwrap()
    );
    assert!(unknown.artefact_entries.is_empty());

    // The oracle's `lineage_log` section agrees for both vectors.
    for name in ["artifacts", "artifacts_tampered"] {
        let oracle =
            Value::parse(&fs::read_to_string(vector(&format!("oracle/{name}.json"))).unwrap())
                .unwrap();
        let section = oracle
            .as_object()
            .unwrap()
            .get("lineage_log")
            .unwrap()
            .as_object()
            .unwrap();
        let verdict = section
            .get("artefacts")
            .unwrap()
            .as_object()
            .unwrap()
            .get("src/app.py")
            .unwrap();
        let ours = verify_lineage(&vector(name), "src/app.py", &operator_key(), &cards()).unwrap();
        assert_eq!(
            Value::Array(vec![Value::from(ours.ok), Value::from(ours.reason.clone())]),
            *verdict,
            "{name}"
        );
    }
}

#[test]
fn the_tampered_vector_is_caught_at_line_two_only() {
    let report = verify_lineage(
        &vector("artifacts_tampered"),
        "src/app.py",
        &operator_key(),
        &cards(),
    )
    .unwrap();
    assert!(!report.ok);
    assert_eq!(
        report.reason.as_deref(),
        Some("non-canonical line bytes in log.jsonl")
    );
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    assert_eq!(report.problems[0].line, Some(2));
    assert_eq!(report.problems[0].kind, LineageProblemKind::NotCanonical);
}

#[test]
fn appending_the_vector_writes_reproduces_the_store_byte_for_byte() {
    let scratch = tempfile::tempdir().unwrap();
    let log = LineageLog::for_project(scratch.path());
    let expected = expected();
    let hashes = expected
        .as_object()
        .unwrap()
        .get("lineage_log")
        .unwrap()
        .as_object()
        .unwrap()
        .get("entry_hashes")
        .unwrap()
        .clone();
    let mut ours = Vec::new();
    for write in vector_writes() {
        ours.push(Value::from(
            log.append(&write, &operator_key(), &signer())
                .unwrap()
                .entry_hash,
        ));
    }
    assert_eq!(Value::Array(ours), hashes);
    let files = |root: &Path| -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    out.push(path.strip_prefix(root).unwrap().to_path_buf());
                }
            }
        }
        out.retain(|p| !p.starts_with("task-t-42"));
        out.sort();
        out
    };
    let theirs_root = vector("artifacts/.sdd/lineage");
    let ours_root = scratch.path().join(".sdd/lineage");
    assert_eq!(files(&ours_root), files(&theirs_root));
    for rel in files(&theirs_root) {
        assert_eq!(
            fs::read(ours_root.join(&rel)).unwrap(),
            fs::read(theirs_root.join(&rel)).unwrap(),
            "{}",
            rel.display()
        );
    }
}

#[test]
fn a_non_ascii_entry_round_trips_and_verifies() {
    let scratch = tempfile::tempdir().unwrap();
    let log = LineageLog::for_project(scratch.path());
    let first = log
        .append(
            &write(
                "docs/caf\u{e9}.md",
                "r\u{e9}sum\u{e9} \u{1f600}".as_bytes(),
                "appel-\u{e9}",
                "span-\u{65e5}",
                1,
            ),
            &operator_key(),
            &signer(),
        )
        .unwrap();
    let second = log
        .append(
            &write("docs/caf\u{e9}.md", b"v2", "appel-2", "s2", 2),
            &operator_key(),
            &signer(),
        )
        .unwrap();
    assert!(first.line.contains("caf\u{e9}"), "the line holds raw UTF-8");
    assert_eq!(
        second.entry.get("parent_hashes"),
        Some(&Value::Array(vec![Value::from(first.entry_hash.as_str())]))
    );
    // The reference's check re-dumps with ensure_ascii=True and so rejects this honest line.
    let reparsed = Value::parse(&first.line).unwrap();
    assert_ne!(reparsed.dumps(Dialect::PY_COMPACT_ASCII), first.line);

    let report = verify_lineage(
        scratch.path(),
        "docs/caf\u{e9}.md",
        &operator_key(),
        &cards(),
    )
    .unwrap();
    assert!(report.ok, "{report:#?}");
    assert_eq!(
        report.artefact_entries,
        vec![first.entry_hash.clone(), second.entry_hash.clone()]
    );
    let tips = log.tip_set("docs/caf\u{e9}.md").unwrap();
    assert_eq!(tips.open, vec![second.entry_hash]);
    assert_eq!(
        fs::read_to_string(log.tip_path("docs/caf\u{e9}.md").unwrap()).unwrap(),
        tips.to_json()
    );
}

/// A scratch copy of the vector store, with a mutation applied.
fn tampered(mutate: impl FnOnce(&Path)) -> (tempfile::TempDir, LineageVerification) {
    let scratch = tempfile::tempdir().unwrap();
    copy_tree(&vector("artifacts"), scratch.path());
    mutate(&scratch.path().join(".sdd/lineage"));
    let report = verify_lineage(scratch.path(), "src/app.py", &operator_key(), &cards()).unwrap();
    (scratch, report)
}

fn replace_in(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from}");
    fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn an_edited_entry_is_caught_at_that_entry() {
    let (_dir, report) = tampered(|lineage| {
        replace_in(
            &lineage.join("log.jsonl"),
            "\"tool_call_id\":\"call-1\"",
            "\"tool_call_id\":\"call-9\"",
        );
    });
    assert!(!report.ok);
    let kinds = kinds_at(&report, 1);
    assert!(
        kinds.contains(&LineageProblemKind::OperatorHmac),
        "{report:#?}"
    );
    assert!(
        kinds.contains(&LineageProblemKind::SignatureMissing),
        "{report:#?}"
    );
    // The edit changes entry 1's hash, so entry 2's parent no longer resolves.
    assert_eq!(
        kinds_at(&report, 2),
        vec![LineageProblemKind::DanglingParent]
    );
    assert!(
        report
            .reason
            .unwrap()
            .starts_with("src/app.py: HMAC mismatch on entry sha256:")
    );
}

#[test]
fn a_forged_hmac_is_caught_at_that_entry() {
    // Re-tag entry 2 with the wrong key, re-sign it with the agent key and move its sidecar: only
    // the operator HMAC can tell.
    let scratch = tempfile::tempdir().unwrap();
    let log = LineageLog::for_project(scratch.path());
    let [one, two] = vector_writes();
    log.append(&one, &operator_key(), &signer()).unwrap();
    log.append(&two, b"not the operator key", &signer())
        .unwrap();
    let report = verify_lineage(scratch.path(), "src/app.py", &operator_key(), &cards()).unwrap();
    assert_eq!(kinds_at(&report, 1), vec![]);
    assert_eq!(kinds_at(&report, 2), vec![LineageProblemKind::OperatorHmac]);
    assert_eq!(report.problems.len(), 1);
}

#[test]
fn a_forged_or_misattributed_signature_is_caught_at_that_entry() {
    let hex1 = "07fcea6e694e4e87fbebc0e32776183b254cb410bf0fef64590c7a6d5aa11e65";
    let sidecar = |lineage: &Path| {
        lineage.join(format!(
            "signatures/04/04791d82dd15fdd480f084d7ef65a10789fa5012cb7935f76080763444d48a00/{hex1}.jws"
        ))
    };
    // A signature by another key over the same bytes.
    let (_dir, report) = tampered(|lineage| {
        let line = fs::read_to_string(lineage.join("log.jsonl")).unwrap();
        let first = line.lines().next().unwrap().to_owned();
        let other = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
        fs::write(
            sidecar(lineage),
            other.sign_detached_jws(first.as_bytes(), KID),
        )
        .unwrap();
    });
    assert_eq!(
        kinds_at(&report, 1),
        vec![LineageProblemKind::SignatureInvalid]
    );
    assert_eq!(kinds_at(&report, 2), vec![]);
    // A sidecar signed under another kid.
    let (_dir, report) = tampered(|lineage| {
        let line = fs::read_to_string(lineage.join("log.jsonl")).unwrap();
        let first = line.lines().next().unwrap().to_owned();
        fs::write(
            sidecar(lineage),
            signer().sign_detached_jws(first.as_bytes(), "other-kid"),
        )
        .unwrap();
    });
    assert_eq!(kinds_at(&report, 1), vec![LineageProblemKind::KidMismatch]);
    // A missing sidecar.
    let (_dir, report) = tampered(|lineage| fs::remove_file(sidecar(lineage)).unwrap());
    assert_eq!(
        kinds_at(&report, 1),
        vec![LineageProblemKind::SignatureMissing]
    );
    // No card for the signing agent: nothing can be attributed.
    let report = verify_lineage(
        &vector("artifacts"),
        "src/app.py",
        &operator_key(),
        &AgentCards::new(),
    )
    .unwrap();
    assert_eq!(
        kinds_at(&report, 1),
        vec![LineageProblemKind::UnknownAgentCard]
    );
    assert_eq!(
        kinds_at(&report, 2),
        vec![LineageProblemKind::UnknownAgentCard]
    );
    // The wrong operator key fails every entry.
    let report = verify_lineage(&vector("artifacts"), "src/app.py", b"wrong", &cards()).unwrap();
    assert_eq!(kinds_at(&report, 1), vec![LineageProblemKind::OperatorHmac]);
    assert_eq!(kinds_at(&report, 2), vec![LineageProblemKind::OperatorHmac]);
}

#[test]
fn framing_schema_and_parent_problems_are_each_reported() {
    let (_dir, report) = tampered(|lineage| {
        let path = lineage.join("log.jsonl");
        let text = fs::read_to_string(&path).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.insert(1, "not json".to_owned());
        lines.push("{\"v\":2}".to_owned());
        fs::write(&path, lines.join("\n")).unwrap();
    });
    assert_eq!(kinds_at(&report, 2), vec![LineageProblemKind::Unparsable]);
    assert!(kinds_at(&report, 4).contains(&LineageProblemKind::Schema));
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == LineageProblemKind::Framing)
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.message.starts_with("invalid JSON in log.jsonl"))
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

    #[test]
    fn any_single_byte_change_to_the_log_is_reported(
        position in proptest::prelude::any::<proptest::sample::Index>(),
        byte in proptest::prelude::any::<u8>(),
    ) {
        let scratch = tempfile::tempdir().unwrap();
        copy_tree(&vector("artifacts/.sdd/lineage"), &scratch.path().join(".sdd/lineage"));
        let path = scratch.path().join(".sdd/lineage/log.jsonl");
        let mut bytes = fs::read(&path).unwrap();
        let at = position.index(bytes.len());
        proptest::prop_assume!(bytes[at] != byte);
        bytes[at] = byte;
        fs::write(&path, &bytes).unwrap();
        let report = verify_lineage(scratch.path(), "src/app.py", &operator_key(), &cards()).unwrap();
        proptest::prop_assert!(!report.ok, "byte {} -> {:#04x}", at, byte);
    }
}

#[test]
fn lineage_resource_bodies_match_the_reference() {
    let log = LineageLog::for_project(&vector("artifacts"));
    let expected =
        std::fs::read_to_string(fixtures().join("lineage/artifacts_src_app_py.body")).unwrap();
    assert_eq!(log.artefact_resource_body("src/app.py").unwrap(), expected);
    assert_eq!(log.artefact_resource_body("no/such/file").unwrap(), "");
    // Long after the vector's entries were written: none falls in the last 24 hours.
    let far_future_ns = 4_000_000_000u128 * 1_000_000_000;
    assert_eq!(
        log.stats_resource_body(far_future_ns).unwrap(),
        r#"{"agents_seen": ["agent:worker-a"], "artefacts": 1, "last_24h_entries": 0, "open_forks": 0, "total_entries": 2}"#
    );
    // Right at the entries' time both count.
    let stats = log.stats_resource_body(0).unwrap();
    assert!(stats.contains("\"last_24h_entries\": 2"), "{stats}");
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(
        LineageLog::for_project(empty.path())
            .stats_resource_body(0)
            .unwrap(),
        r#"{"agents_seen": [], "artefacts": 0, "last_24h_entries": 0, "open_forks": 0, "total_entries": 0}"#
    );
}

/// A project holding a copy of the vector's lineage store, and its log.
fn vector_lineage() -> (tempfile::TempDir, LineageLog) {
    let scratch = tempfile::tempdir().unwrap();
    copy_tree(
        &vector("artifacts/.sdd/lineage"),
        &scratch.path().join(".sdd/lineage"),
    );
    let log = LineageLog::for_project(scratch.path());
    (scratch, log)
}

/// Forks `src/app.py` in `log`: a second root (the first entry with another `ts_ns`) beside
/// the first entry's child, appended to the log and to the artefact's projection.
fn fork_the_vector_artefact(log: &LineageLog) {
    let log_path = log.log_path().unwrap();
    let text = fs::read_to_string(&log_path).unwrap();
    let root = text.lines().next().unwrap().replace(
        "\"ts_ns\":1780000800000000000",
        "\"ts_ns\":1780000800000000002",
    );
    let projection = log.projection_path("src/app.py").unwrap();
    for path in [&log_path, &projection] {
        let mut bytes = fs::read(path).unwrap();
        bytes.extend_from_slice(format!("{root}\n").as_bytes());
        fs::write(path, bytes).unwrap();
    }
    assert_eq!(log.tip_set("src/app.py").unwrap().open.len(), 2);
}

/// `lineage://stats` counts an entry in the last 24 hours up to exactly a day after it, and an
/// artefact whose log holds two open tips as one open fork.
#[test]
fn stats_count_the_last_day_and_open_forks() {
    let (_scratch, log) = vector_lineage();
    let first: u128 = 1_780_000_800_000_000_000;
    let day: u128 = 24 * 3_600 * 1_000_000_000;
    let last_day = |now: u128| {
        let stats = Value::parse(&log.stats_resource_body(now).unwrap()).unwrap();
        let stats = stats.as_object().unwrap();
        (
            stats.get("last_24h_entries").cloned(),
            stats.get("open_forks").cloned(),
        )
    };
    assert_eq!(
        last_day(first + day),
        (Some(Value::from(2)), Some(Value::from(0)))
    );
    assert_eq!(
        last_day(first + day + 1),
        (Some(Value::from(1)), Some(Value::from(0)))
    );
    assert_eq!(
        last_day(first + day + 2),
        (Some(Value::from(0)), Some(Value::from(0)))
    );
    fork_the_vector_artefact(&log);
    assert_eq!(last_day(first + day).1, Some(Value::from(1)));
}

/// Paths the writer refuses and paths it reads through: a Windows drive path is absolute, a
/// signature file needs a plain stem, and a log that cannot be read is an error, never an
/// empty log.
#[test]
fn refused_paths_and_an_unreadable_log_are_errors() {
    let scratch = tempfile::tempdir().unwrap();
    let log = LineageLog::for_project(scratch.path());
    let drive = write("C:\\work\\app.py", b"x", "call-1", "00f067aa0ba902b7", 1);
    assert!(matches!(
        log.append(&drive, &operator_key(), &signer()),
        Err(bernstein_journal::Error::Malformed { .. })
    ));
    for bad in ["sha256:", "sha256:../x", "sha256:.hidden", "sha256:a\\b"] {
        assert!(log.signature_path("src/app.py", bad).is_err(), "{bad}");
    }
    assert!(log.signature_path("src/app.py", "sha256:abc").is_ok());
    // An empty log is appended to like a missing one.
    fs::create_dir_all(scratch.path().join(".sdd/lineage")).unwrap();
    fs::write(scratch.path().join(".sdd/lineage/log.jsonl"), b"").unwrap();
    let [first, _] = vector_writes();
    log.append(&first, &operator_key(), &signer()).unwrap();
    // The log is a directory now.
    let unreadable = tempfile::tempdir().unwrap();
    fs::create_dir_all(unreadable.path().join(".sdd/lineage/log.jsonl")).unwrap();
    let log = LineageLog::for_project(unreadable.path());
    assert!(log.read_entries().is_err());
    assert!(log.tip_set("src/app.py").is_err());
    assert!(verify_lineage(unreadable.path(), "src/app.py", &operator_key(), &cards()).is_err());
}

/// The same card twice is one card; a different card for the same identity is a conflict.
#[test]
fn a_second_card_for_one_identity_is_kept_only_when_identical() {
    let mut cards = AgentCards::new();
    assert!(cards.is_empty());
    let card = || AgentCard::new(AGENT, KID, signer().public_key_pem()).unwrap();
    cards.insert(card());
    cards.insert(card());
    assert!(!cards.is_empty());
    assert_eq!((cards.len(), cards.conflicts().len()), (1, 0));
    let other = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
    cards.insert(AgentCard::new(AGENT, KID, other.public_key_pem()).unwrap());
    assert_eq!((cards.len(), cards.conflicts().len()), (1, 1));
    assert_eq!(
        cards.get(AGENT, KID).unwrap().public_key_pem,
        signer().public_key_pem()
    );
}

/// A project without a log has no tips and verifies as absent; an append names the open tip
/// and then each extra parent once.
#[test]
fn no_log_is_empty_and_extra_parents_join_the_tip_once() {
    let scratch = tempfile::tempdir().unwrap();
    let log = LineageLog::for_project(scratch.path());
    assert!(log.tip_set("src/app.py").unwrap().open.is_empty());
    let report = verify_lineage(scratch.path(), "src/app.py", &operator_key(), &cards()).unwrap();
    assert!(!report.log_present);
    let [first, second] = vector_writes();
    let tip = log
        .append(&first, &operator_key(), &signer())
        .unwrap()
        .entry_hash;
    let extra = format!("sha256:{}", "e".repeat(64));
    let parents = [tip.clone(), extra.clone(), extra.clone()];
    let mut with_extra = second;
    with_extra.extra_parents = &parents;
    let appended = log.append(&with_extra, &operator_key(), &signer()).unwrap();
    assert_eq!(
        appended.entry.get("parent_hashes"),
        Some(&Value::from(vec![tip, extra]))
    );
}

/// Conflicting cards are reported when there are entries they could have signed.
#[test]
fn conflicting_cards_are_reported_beside_a_log() {
    let mut conflicting = cards();
    let other = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
    conflicting.insert(AgentCard::new(AGENT, KID, other.public_key_pem()).unwrap());
    let report = verify_lineage(
        &vector("artifacts"),
        "src/app.py",
        &operator_key(),
        &conflicting,
    )
    .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind == LineageProblemKind::CardConflict),
        "{report:?}"
    );
    let empty = tempfile::tempdir().unwrap();
    let report = verify_lineage(empty.path(), "src/app.py", &operator_key(), &conflicting).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
}

/// The tip file after an append on a forked artefact keeps the other branch's tip open beside
/// the new entry, as the log itself projects.
#[test]
fn an_append_on_a_fork_keeps_the_other_tip_in_the_tip_file() {
    let (_scratch, log) = vector_lineage();
    fork_the_vector_artefact(&log);
    let next = write(
        "src/app.py",
        b"print('v3')\n",
        "call-3",
        "00f067aa0ba902b9",
        3,
    );
    let appended = log.append(&next, &operator_key(), &signer()).unwrap();
    let tips =
        Value::parse(&fs::read_to_string(log.tip_path("src/app.py").unwrap()).unwrap()).unwrap();
    let open = tips
        .as_object()
        .unwrap()
        .get("open")
        .unwrap()
        .as_array()
        .unwrap();
    assert_eq!(open.len(), 2, "{tips:?}");
    assert!(
        open.contains(&Value::from(appended.entry_hash.as_str())),
        "{tips:?}"
    );
    assert_eq!(log.tip_set("src/app.py").unwrap().open.len(), 2);
}
