//! The extended DLP rule set against its corpus (`fixtures/dlp/`): every rule removes its
//! positive examples, which the reference's eight rules leave in place; ordinary prose, hashes
//! and UUIDs are left alone; no text file under `fixtures/` gains a redaction; bodies built to
//! make a backtracking engine explode are redacted correctly; and a redacted body is stored,
//! counted, mirrored and verified the same way in both modes.

use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::dlp::{
    DlpMode, EXTENDED_RULE_NAMES, REDACTED, RedactionContext, extended_findings, redact_secrets,
    redact_secrets_in,
};
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::mailbox::{
    MAX_MESSAGE_BODY_BYTES, Mailbox, MirrorEvent, NewMessage, body_hash,
};
use bernstein_protocol::pyjson::Value;

use crate::support::fixtures;

fn extended(text: &str) -> (String, usize) {
    redact_secrets_in(DlpMode::Extended, text)
}

struct Positive {
    rule: String,
    text: String,
    secret: String,
}

fn positives() -> Vec<Positive> {
    let raw = fs::read_to_string(fixtures().join("dlp/positives.json")).unwrap();
    let doc = Value::parse(&raw).unwrap();
    let field = |item: &Value, name: &str| {
        item.as_object()
            .unwrap()
            .get(name)
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    };
    doc.as_object()
        .unwrap()
        .get("positives")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|item| Positive {
            rule: field(item, "rule"),
            text: field(item, "text"),
            secret: field(item, "secret"),
        })
        .collect()
}

#[test]
fn every_extended_rule_removes_its_positives_which_the_reference_misses() {
    let positives = positives();
    for rule in EXTENDED_RULE_NAMES {
        assert!(
            positives.iter().any(|p| p.rule == rule),
            "no positive example for {rule}"
        );
    }
    for p in &positives {
        let (reference, reference_count) = redact_secrets_in(DlpMode::Reference, &p.text);
        assert!(
            reference.contains(&p.secret),
            "the reference already catches the {} example {:?}",
            p.rule,
            p.text
        );
        let (out, count) = extended(&p.text);
        assert!(
            !out.contains(&p.secret),
            "{} left {:?} in {out:?}",
            p.rule,
            p.secret
        );
        let findings = extended_findings(&reference);
        let rules: Vec<&str> = findings.iter().map(|(rule, _)| *rule).collect();
        assert_eq!(rules, vec![p.rule.as_str()], "{:?}", p.text);
        assert!(findings[0].1.contains(&p.secret) || p.secret.contains(&findings[0].1));
        assert_eq!(count, reference_count + 1, "{:?}", p.text);
        assert!(out.contains(REDACTED));
    }
}

#[test]
fn the_negative_corpus_is_left_alone() {
    let text = fs::read_to_string(fixtures().join("dlp/negatives.txt")).unwrap();
    assert!(text.lines().count() > 30);
    for line in text.lines() {
        assert_eq!(extended(line), (line.to_owned(), 0), "{line:?}");
    }
    assert_eq!(extended(&text), (text.clone(), 0));
}

fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            text_files(&path, out);
        } else if let Ok(text) = fs::read_to_string(&path)
            && !text.contains('\0')
        {
            out.push(path);
        }
    }
}

/// The extended rules add no redaction to any text file under `fixtures/` except the positive
/// corpus: the count of false positives there is exactly zero. (Over the seeds and the
/// reference's transcripts, measured once outside the suite, see the DLP section of
/// `docs/ARCHITECTURE.md`.)
#[test]
fn no_fixture_gains_a_redaction_in_extended_mode() {
    let root = fixtures();
    let mut files = Vec::new();
    text_files(&root, &mut files);
    files.sort();
    let positives = root.join("dlp/positives.json");
    let mut scanned = 0;
    let mut false_positives = Vec::new();
    for path in files.iter().filter(|p| **p != positives) {
        let text = fs::read_to_string(path).unwrap();
        scanned += 1;
        let (reference, reference_count) = redact_secrets(&text);
        for (rule, secret) in extended_findings(&reference) {
            false_positives.push(format!("{}: {rule}: {secret}", path.display()));
        }
        let (out, count) = extended(&text);
        if false_positives.is_empty() {
            assert_eq!((out, count), (reference, reference_count));
        }
    }
    assert!(scanned > 150, "only {scanned} text files under fixtures/");
    assert_eq!(false_positives, Vec::<String>::new());
}

/// Pads `run` (repeated) to exactly `MAX_MESSAGE_BODY_BYTES` bytes with `tail` at the end.
fn adversarial_body(run: &str, tail: &str) -> (String, String) {
    let mut body = String::new();
    while body.len() + run.len() + tail.len() <= MAX_MESSAGE_BODY_BYTES {
        body.push_str(run);
    }
    let prefix = body.clone();
    while body.len() + tail.len() < MAX_MESSAGE_BODY_BYTES {
        body.push(' ');
    }
    body.push_str(tail);
    assert_eq!(body.len(), MAX_MESSAGE_BODY_BYTES);
    (body, prefix)
}

/// Bodies of near-misses, each a 4,096-byte run of text a backtracking engine would retry at
/// every position, with one real secret at the end. The `regex` crate runs every extended rule
/// in time linear in the body (it never backtracks), so this test asserts only what the
/// redaction does, never how long it takes.
#[test]
fn adversarial_bodies_are_redacted_correctly() {
    let a = |n: usize| "a".repeat(n);
    let akia = "AKIAUJZDEGXDNCF32EPF";
    let ghp = format!("ghp_{}", "Ab3".repeat(12));
    let cases: Vec<(&str, String, String, String)> = vec![
        // An AWS key id one character short, again and again.
        (
            "aws_access_key_id",
            "AKIAUJZDEGXDNCF32EP ".into(),
            akia.into(),
            akia.into(),
        ),
        (
            "github_token",
            format!("ghp_{} ", "Ab3".repeat(11)),
            ghp.clone(),
            ghp.clone(),
        ),
        (
            "gitlab_token",
            "glpat-abcdefghij0123456 ".into(),
            "glpat-abcdefghij0123456789".into(),
            "glpat-abcdefghij0123456789".into(),
        ),
        (
            "slack_token",
            "xoxb-12345678 ".into(),
            "xoxb-1234567890-abcdefgh".into(),
            "xoxb-1234567890-abcdefgh".into(),
        ),
        // Two JWT segments and a dot, with the second segment too short.
        (
            "jwt_extended",
            "eyJhbGciOiJub25lIn0.eyJzdWIi.".into(),
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0In0.".into(),
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0In0.".into(),
        ),
        // Armour lines that are one dash short, then a real truncated key.
        (
            "private_key_truncated",
            "-----BEGIN RSA PRIVATE KEY----\n".into(),
            format!("-----BEGIN RSA PRIVATE KEY-----\n{}", "MIIEow7Q".repeat(8)),
            "MIIEow7Q".repeat(8),
        ),
        // A complete armour line pattern with no END anywhere, and letters that keep the lazy
        // body scanning.
        (
            "private_key_block",
            "-----END RSA PRIVATE KEY---- ".into(),
            format!(
                "-----BEGIN PGP PRIVATE KEY BLOCK-----\n{}\n-----END PGP PRIVATE KEY BLOCK-----",
                a(40)
            ),
            a(40),
        ),
        (
            "authorization_header",
            "\"Authorization\": \"Bearer short\" ".into(),
            "\"Authorization\": \"Bearer q8Zt4LmN2vXy\"".into(),
            "q8Zt4LmN2vXy".into(),
        ),
        (
            "bearer_token",
            "bearer aaaaaaaaaaaaaaaaaaaaaaaa ".into(),
            "bearer Zq8t4LmN2vXy7Pw3Rk9sT1".into(),
            "Zq8t4LmN2vXy7Pw3Rk9sT1".into(),
        ),
        (
            "aws_secret_access_key",
            format!("\"SecretAccessKey\": \"{}\" ", a(39)),
            format!(
                "\"SecretAccessKey\": \"{}\"",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKY"
            ),
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKY".into(),
        ),
        // Low-entropy values that match the shape but fail the randomness test.
        (
            "generic_secret_assignment",
            "\"api_key\": \"aaaaaaaaaaaaaaaaaaaa\", ".into(),
            "\"api_key\": \"Zq8t4LmN2vXy7Pw3\"".into(),
            "Zq8t4LmN2vXy7Pw3".into(),
        ),
        (
            "url_password",
            "redis://user@host: ".into(),
            "redis://user:hunter2x@cache:6379".into(),
            "hunter2x".into(),
        ),
    ];
    for rule in EXTENDED_RULE_NAMES {
        assert!(
            cases.iter().any(|c| c.0 == rule),
            "no adversarial body for {rule}"
        );
    }
    for (rule, run, tail, secret) in cases {
        let (body, prefix) = adversarial_body(&run, &tail);
        let (reference, reference_count) = redact_secrets(&body);
        assert_eq!(
            reference_count, 0,
            "{rule}: the reference rules fire on {run:?}"
        );
        let (out, count) = extended(&body);
        assert_eq!(count, 1, "{rule}: {out}");
        assert!(out.starts_with(&prefix), "{rule}: a near-miss was redacted");
        assert!(!out.contains(&secret), "{rule}: {secret:?} survived");
        let findings = extended_findings(&reference);
        assert_eq!(findings.len(), 1, "{rule}");
        assert_eq!(findings[0].0, rule);
    }
}

fn mailbox_in(dir: &Path) -> Mailbox {
    let sdd = dir.join(".sdd");
    let signer = SigningIdentity::load_or_create(&sdd.join("identity"), "mailbox_signing").unwrap();
    Mailbox::open(
        &sdd,
        b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        signer,
    )
}

/// The same body posted in both modes: each stores its own redaction, counts it, mirrors the
/// count to the audit event, and verifies offline without the DLP running again.
#[test]
fn both_modes_store_count_mirror_and_verify() {
    let body = "deploy key AKIAUJZDEGXDNCF32EPF; export API_TOKEN=s3cret ok";
    let expectations = [
        (
            DlpMode::Reference,
            "deploy key AKIAUJZDEGXDNCF32EPF; export API_TOKEN=***REDACTED*** ok",
            2,
        ),
        (
            DlpMode::Extended,
            "deploy key ***REDACTED***; export API_TOKEN=***REDACTED*** ok",
            3,
        ),
    ];
    for (mode, stored, count) in expectations {
        let dir = tempfile::tempdir().unwrap();
        let mailbox = mailbox_in(dir.path());
        let context = RedactionContext {
            mode,
            ..RedactionContext::default()
        };
        let entry = mailbox
            .post(
                &NewMessage::new("t-1", "worker-a", "finding", body, 1_790_000_000.5),
                &context,
            )
            .unwrap();
        assert_eq!(entry.body, stored, "{mode:?}");
        assert_eq!(entry.redaction_count, count, "{mode:?}");
        assert_eq!(entry.body_hash, body_hash(stored));
        let mirror = entry.audit_mirror_event();
        assert_eq!(
            mirror
                .details
                .get("redaction_count")
                .and_then(Value::as_i64),
            Some(count)
        );
        // A new process reads and verifies what was written; nothing re-runs the rules.
        let reopened = mailbox_in(dir.path());
        assert!(reopened.verify().unwrap().ok());
        let mirrors = vec![MirrorEvent::new(
            &entry.entry_hash,
            &entry.body_hash,
            entry.seq,
            &entry.task_id,
        )];
        assert!(reopened.verify_against_chain(&mirrors, &[]).unwrap().ok());
    }
    assert_eq!(DlpMode::default(), DlpMode::Extended);
}

#[test]
fn modes_parse_from_their_settings() {
    assert_eq!(DlpMode::parse("reference"), Some(DlpMode::Reference));
    assert_eq!(DlpMode::parse(" Reference "), Some(DlpMode::Reference));
    assert_eq!(DlpMode::parse("extended"), Some(DlpMode::Extended));
    assert_eq!(DlpMode::parse(""), Some(DlpMode::Extended));
    assert_eq!(DlpMode::parse("strict"), None);
    for mode in [DlpMode::Reference, DlpMode::Extended] {
        assert_eq!(DlpMode::parse(mode.as_str()), Some(mode));
    }
}
