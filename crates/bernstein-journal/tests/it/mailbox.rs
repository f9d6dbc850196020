//! The worker mailbox, its signing identities and DLP redaction against the Bernstein 3.23
//! vectors: `mailbox/`, `mailbox_tampered/`, `server_probe/`, `dlp_redaction.json` and the claim
//! receipts' signatures.

use std::fs;
use std::path::{Path, PathBuf};

use bernstein_journal::Error;
use bernstein_journal::dlp::{DlpMode, RedactionContext, redact_text};
use bernstein_journal::identity::{
    SigningIdentity, identity_paths, private_key_pem_from_seed, verify_raw_signature,
};
use bernstein_journal::mailbox::{
    Authority, Entry, MAX_MESSAGE_BODY_BYTES, MAX_PENDING_PER_TASK, Mailbox, MirrorEvent,
    NewMessage, journal_path, parse_journal, read_journal, verify_journal,
    verify_journal_against_chain,
};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::support::vector;

const FAKE_HOME: &str = "/home/vector";

fn audit_key() -> Vec<u8> {
    let raw = fs::read_to_string(vector("_keys/audit.key")).unwrap();
    raw.trim().as_bytes().to_vec()
}

fn read_json(path: &Path) -> Value {
    Value::parse(&fs::read_to_string(path).unwrap()).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The oracle's `(ok, problems)` pair.
fn verdict(value: &Value) -> (bool, Vec<String>) {
    let pair = value.as_array().unwrap();
    (pair[0] == Value::Bool(true), strings(&pair[1]))
}

/// The live `task.mailbox_message` events of a vector's audit segment, as plain data.
fn mirrors(root: &Path) -> Vec<MirrorEvent> {
    let mut out = Vec::new();
    for entry in fs::read_dir(root.join(".sdd/audit")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in fs::read_to_string(&path).unwrap().lines() {
                let record = Value::parse(line).unwrap();
                let record = record.as_object().unwrap();
                if record.get("event_type").and_then(Value::as_str) == Some("task.mailbox_message")
                {
                    let details = record.get("details").unwrap().as_object().unwrap();
                    out.extend(MirrorEvent::from_details(details));
                }
            }
        }
    }
    out
}

/// Copies a vector identity into a scratch `.sdd/identity` with the 0600 mode git drops.
fn install_identity(from: &Path, sdd: &Path, name: &str) -> PathBuf {
    let identity_dir = sdd.join("identity");
    fs::create_dir_all(&identity_dir).unwrap();
    for ext in ["pem", "pub"] {
        let target = identity_dir.join(format!("{name}.{ext}"));
        fs::copy(from.join(format!("{name}.{ext}")), &target).unwrap();
        set_mode(&target, 0o600);
    }
    identity_dir
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn mailbox_vector_verifies_like_the_oracle() {
    let root = vector("mailbox");
    let oracle = read_json(&vector("oracle/mailbox.json"));
    let oracle = oracle
        .as_object()
        .unwrap()
        .get("mailbox")
        .unwrap()
        .as_object()
        .unwrap();
    let journal = read_journal(&journal_path(&root.join(".sdd"))).unwrap();
    let report = verify_journal(&journal, &audit_key());
    assert_eq!(
        Some(report.entries),
        oracle
            .get("entries")
            .and_then(Value::as_i64)
            .map(|n| n as usize)
    );
    assert_eq!(
        Some(report.head.as_str()),
        oracle.get("head").and_then(Value::as_str)
    );
    assert_eq!(
        (report.ok(), report.problems),
        verdict(oracle.get("verify").unwrap())
    );
    let chained = verify_journal_against_chain(&journal, &audit_key(), &mirrors(&root), &[]);
    assert_eq!(
        (chained.ok(), chained.problems),
        verdict(oracle.get("verify_against_chain").unwrap())
    );
}

#[test]
fn tampered_mailbox_reports_what_the_oracle_reports() {
    let root = vector("mailbox_tampered");
    let expected = read_json(&root.join("expected.json"));
    let expected = expected.as_object().unwrap();
    let journal = read_journal(&journal_path(&root.join(".sdd"))).unwrap();
    let report = verify_journal(&journal, &audit_key());
    let (ok, problems) = verdict(expected.get("verify").unwrap());
    assert!(!ok);
    assert_eq!(report.problems, problems);
    let chained = verify_journal_against_chain(&journal, &audit_key(), &mirrors(&root), &[]);
    assert_eq!(
        (chained.ok(), chained.problems),
        verdict(expected.get("verify_against_chain").unwrap())
    );
    // The oracle report for the directory says the same.
    let oracle = read_json(&vector("oracle/mailbox_tampered.json"));
    let section = oracle
        .as_object()
        .unwrap()
        .get("mailbox")
        .unwrap()
        .as_object()
        .unwrap();
    assert_eq!(verdict(section.get("verify").unwrap()), (false, problems));
}

#[test]
fn every_vector_entry_rederives_byte_exactly() {
    let root = vector("mailbox");
    let expected = read_json(&root.join("expected.json"));
    let expected = expected.as_object().unwrap();
    let key = audit_key();
    let signer = SigningIdentity::from_private_pem(
        &fs::read_to_string(root.join(".sdd/identity/mailbox_signing.pem")).unwrap(),
    )
    .unwrap();
    let raw = fs::read_to_string(journal_path(&root.join(".sdd"))).unwrap();
    let journal = parse_journal(raw.as_bytes());
    assert!(journal.problems.is_empty());
    let responses = expected.get("responses").unwrap().as_array().unwrap();
    for ((entry, line), response) in journal
        .entries
        .iter()
        .zip(raw.split_inclusive('\n'))
        .zip(responses)
    {
        assert_eq!(entry.to_row(), line, "row bytes of seq {}", entry.seq);
        assert_eq!(entry.expected_entry_hash(&key), entry.entry_hash);
        assert_eq!(entry.expected_body_hash(), entry.body_hash);
        // Ed25519 is deterministic: re-signing gives the stored signature.
        assert_eq!(
            signer.sign_raw(entry.signed_bytes().as_bytes()),
            entry.signature
        );
        assert!(entry.signature_valid());
        assert_eq!(entry.signer_public_key_pem, signer.public_key_pem());
        // The response objects were recorded in TaskMessageResponse order and dumped sorted.
        assert_eq!(
            Value::Object(entry.to_wire()).dumps(Dialect::PY_COMPACT_UTF8),
            response.dumps(Dialect::PY_COMPACT_UTF8)
        );
    }
    let first = &journal.entries[0];
    assert_eq!(
        Some(first.binding_bytes().as_str()),
        expected.get("entry0_binding_bytes").and_then(Value::as_str)
    );
    assert_eq!(
        Some(first.signed_bytes().as_str()),
        expected.get("entry0_signed_bytes").and_then(Value::as_str)
    );
}

/// One post of a generator run, replayed through [`Mailbox::post`].
struct Replay<'a> {
    task_id: &'a str,
    sender: &'a str,
    kind: &'a str,
    body: &'a str,
    fingerprint: &'a str,
    timestamp: f64,
}

fn replay(vector_root: &Path, posts: &[Replay<'_>]) -> (tempfile::TempDir, Vec<Entry>) {
    let scratch = tempfile::tempdir().unwrap();
    let sdd = scratch.path().join(".sdd");
    let identity_dir =
        install_identity(&vector_root.join(".sdd/identity"), &sdd, "mailbox_signing");
    let signer = SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap();
    let mailbox = Mailbox::open(&sdd, &audit_key(), signer);
    // The vectors are the reference's bytes: replay them with the reference's rule set.
    let dlp = RedactionContext {
        home: Some(FAKE_HOME),
        secrets: &[],
        mode: DlpMode::Reference,
    };
    let entries = posts
        .iter()
        .map(|p| {
            let mut message = NewMessage::new(p.task_id, p.sender, p.kind, p.body, p.timestamp);
            message.sender_card_fingerprint = p.fingerprint;
            mailbox.post(&message, &dlp).unwrap()
        })
        .collect();
    (scratch, entries)
}

#[test]
fn posting_the_generator_inputs_reproduces_the_mailbox_vector() {
    let body0 = format!(
        "Found issue. Authorization: Bearer abc.def.ghi leaked; contact bob@example.com; \
         see {FAKE_HOME}/proj/app.py; ANTHROPIC_API_KEY=sk-ant-123 ok"
    );
    let fingerprint0 = format!("sha256:{}", "aa".repeat(32));
    let posts = [
        Replay {
            task_id: "t-42",
            sender: "worker-a",
            kind: "finding",
            body: &body0,
            fingerprint: &fingerprint0,
            timestamp: 1_780_000_600.5,
        },
        Replay {
            task_id: "t-43",
            sender: "worker-a",
            kind: "question",
            body: "Is the schema final? ☕ naïve \"quoted\" \\ back\nslash",
            fingerprint: "unregistered",
            timestamp: 1_780_000_601.0,
        },
        Replay {
            task_id: "t-42",
            sender: "worker-b",
            kind: "artefact_ref",
            body: "run-artifacts/task-t-42/summary/v1",
            fingerprint: "unregistered",
            #[allow(clippy::excessive_precision)]
            timestamp: 1_780_000_602.123_456_789,
        },
    ];
    let root = vector("mailbox");
    let (scratch, entries) = replay(&root, &posts);
    let written = fs::read(journal_path(&scratch.path().join(".sdd"))).unwrap();
    let golden = fs::read(journal_path(&root.join(".sdd"))).unwrap();
    assert_eq!(
        String::from_utf8(written).unwrap(),
        String::from_utf8(golden).unwrap()
    );
    assert_eq!(entries[0].redaction_count, 4);
    assert_eq!(
        entries[0].body,
        "Found issue. Authorization: ***REDACTED***"
    );
}

#[test]
fn posting_the_http_probe_inputs_reproduces_the_server_journal() {
    let posts = [
        Replay {
            task_id: "55ad7026909d",
            sender: "worker-a",
            kind: "finding",
            body: "token: abc123 found",
            fingerprint: "unregistered",
            timestamp: 1_796_004_102.734_909_5,
        },
        Replay {
            task_id: "f6e4301edd4e",
            sender: "worker-c",
            kind: "finding",
            body: "progress 50%",
            fingerprint: "unregistered",
            timestamp: 1_796_004_104.789_702_4,
        },
    ];
    let root = vector("server_probe");
    let (scratch, entries) = replay(&root, &posts);
    let written = fs::read_to_string(journal_path(&scratch.path().join(".sdd"))).unwrap();
    let golden = fs::read_to_string(journal_path(&root.join(".sdd"))).unwrap();
    assert_eq!(written, golden);

    // The `/messages` response body of the HTTP transcript is the wire shape of entry 0.
    let transcript = read_json(&vector("http/transcript.json"));
    let post = transcript
        .as_array()
        .unwrap()
        .iter()
        .find(|step| {
            step.as_object()
                .unwrap()
                .get("label")
                .and_then(Value::as_str)
                == Some("post message")
        })
        .unwrap();
    let response = post
        .as_object()
        .unwrap()
        .get("response")
        .unwrap()
        .as_object()
        .unwrap();
    assert_eq!(
        Value::Object(entries[0].to_wire()).dumps(Dialect::PY_COMPACT_UTF8),
        response
            .get("json")
            .unwrap()
            .dumps(Dialect::PY_COMPACT_UTF8)
    );

    // The MCP tool result keeps the reference's key order: compare the unsorted spelling.
    let tools = read_json(&vector("http/mcp_tools.json"));
    let call = tools
        .as_object()
        .unwrap()
        .iter()
        .find(|(name, _)| name.starts_with("bernstein_post_message:"))
        .map(|(_, call)| call.as_object().unwrap())
        .unwrap();
    let structured = call.get("structured").unwrap().as_object().unwrap();
    let result_text = structured.get("result").and_then(Value::as_str).unwrap();
    let result = Value::parse(result_text).unwrap();
    let inner = result.as_object().unwrap().get("result").unwrap();
    assert_eq!(
        Value::Object(entries[1].to_wire()).dumps(Dialect::PY_ROW),
        inner.dumps(Dialect::PY_ROW)
    );
}

#[test]
fn claim_receipt_signatures_are_byte_identical() {
    let pem = fs::read_to_string(vector("claim/.sdd/identity/claim_signing.pem")).unwrap();
    let public = fs::read_to_string(vector("claim/.sdd/identity/claim_signing.pub")).unwrap();
    let signer = SigningIdentity::from_pem_pair(&pem, &public).unwrap();
    assert_eq!(pem, private_key_pem_from_seed(&[0x11; 32]));
    for name in ["receipt_granted.json", "receipt_refused.json"] {
        let receipt = read_json(&vector(&format!("claim/{name}")));
        let receipt = receipt.as_object().unwrap();
        let receipt_hash = receipt.get("receiptHash").and_then(Value::as_str).unwrap();
        let payload = Value::Object(Object::new().with("receipt_hash", receipt_hash))
            .dumps(Dialect::PY_COMPACT_ASCII);
        let signature = receipt.get("signature").and_then(Value::as_str).unwrap();
        assert_eq!(signer.sign_raw(payload.as_bytes()), signature, "{name}");
        let embedded = receipt
            .get("signerPublicKeyPem")
            .and_then(Value::as_str)
            .unwrap();
        assert_eq!(embedded, public);
        assert!(verify_raw_signature(
            payload.as_bytes(),
            signature,
            embedded
        ));
        assert!(!verify_raw_signature(
            b"{\"receipt_hash\":\"x\"}",
            signature,
            embedded
        ));
    }
}

#[test]
fn dlp_vectors_match() {
    let vectors = read_json(&vector("dlp_redaction.json"));
    let vectors = vectors.as_object().unwrap();
    let home = vectors.get("HOME").and_then(Value::as_str).unwrap();
    let samples = vectors.get("samples").unwrap().as_array().unwrap();
    assert_eq!(samples.len(), 14);
    for sample in samples {
        let sample = sample.as_object().unwrap();
        let input = sample.get("input").and_then(Value::as_str).unwrap();
        let (output, count) = redact_text(input, Some(home));
        assert_eq!(
            Some(output.as_str()),
            sample.get("output").and_then(Value::as_str),
            "{input:?}"
        );
        assert_eq!(
            Some(count as i64),
            sample.get("count").and_then(Value::as_i64),
            "{input:?}"
        );
    }
}

/// A scratch project with a fresh mailbox identity.
struct Scratch {
    _dir: tempfile::TempDir,
    sdd: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let sdd = dir.path().join(".sdd");
        Scratch { _dir: dir, sdd }
    }

    fn mailbox(&self) -> Mailbox {
        let signer =
            SigningIdentity::load_or_create(&self.sdd.join("identity"), "mailbox_signing").unwrap();
        Mailbox::open(
            &self.sdd,
            b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            signer,
        )
    }

    fn journal_bytes(&self) -> Option<Vec<u8>> {
        fs::read(journal_path(&self.sdd)).ok()
    }
}

fn post(mailbox: &Mailbox, task_id: &str, kind: &str, body: &str) -> Result<Entry, Error> {
    mailbox.post(
        &NewMessage::new(task_id, "worker-a", kind, body, 1_790_000_000.25),
        &RedactionContext::default(),
    )
}

#[test]
fn round_trip_post_reopen_verify() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    let first = post(&mailbox, "t-1", "finding", "export GITHUB_TOKEN=ghp_x").unwrap();
    assert_eq!((first.seq, first.prev_entry_hash.as_str()), (0, "genesis"));
    assert_eq!(first.body, "export GITHUB_TOKEN=***REDACTED***");
    assert_eq!(first.redaction_count, 2);
    // Separators Python's `splitlines()` breaks on must not split the row.
    let tricky =
        "line\u{2028}sep\u{2029}para\u{85}nel\u{b}vt\u{c}ff\u{1c}fs\u{1d}gs\u{1e}rs\r\ncrlf";
    let second = post(&mailbox, "t-2", "question", tricky).unwrap();
    assert_eq!(second.body, tricky);
    assert_eq!(second.prev_entry_hash, first.entry_hash);
    let third = post(&mailbox, "t-1", "artefact_ref", "ref").unwrap();
    assert_eq!(third.seq, 2);

    // A new process (a new Mailbox over the same files) sees and verifies the same journal.
    let reopened = scratch.mailbox();
    let report = reopened.verify().unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.entries, 3);
    assert_eq!(report.head, third.entry_hash);
    let loaded = reopened.load().unwrap();
    assert_eq!(
        loaded.entries,
        vec![first.clone(), second.clone(), third.clone()]
    );
    assert_eq!(
        reopened.pending("t-1", -1).unwrap(),
        vec![first.clone(), third.clone()]
    );
    assert_eq!(reopened.pending("t-1", 0).unwrap(), vec![third.clone()]);
    let fourth = post(&reopened, "t-2", "finding", "more").unwrap();
    assert_eq!(
        (fourth.seq, fourth.prev_entry_hash.as_str()),
        (3, third.entry_hash.as_str())
    );

    let mirrors: Vec<MirrorEvent> = [&first, &second, &third, &fourth]
        .iter()
        .map(|e| MirrorEvent::new(&e.entry_hash, &e.body_hash, e.seq, &e.task_id))
        .collect();
    assert!(reopened.verify_against_chain(&mirrors, &[]).unwrap().ok());
    let mut wrong = mirrors.clone();
    wrong[1].seq = Some(Value::from(7));
    wrong.remove(3);
    let report = reopened
        .verify_against_chain(&wrong, &["line 2: hmac mismatch".to_owned()])
        .unwrap();
    assert_eq!(
        report.problems,
        vec![
            "audit chain: line 2: hmac mismatch".to_owned(),
            "seq 1: audit-chain mirror disagrees on seq".to_owned(),
            "seq 3: no audit-chain mirror for entry".to_owned(),
        ]
    );
}

#[test]
fn verify_lists_every_problem_of_every_entry() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    for body in ["a", "b", "c", "d"] {
        post(&mailbox, "t-1", "finding", body).unwrap();
    }
    let path = journal_path(&scratch.sdd);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Entry 1 gets a forged seq and body, a malformed row takes the place of entry 2, and
    // entry 3 therefore sits at position 2 with a chain link to the missing entry.
    let forged = lines[1]
        .replace("\"seq\":1", "\"seq\":9")
        .replace("\"body\":\"b\"", "\"body\":\"B\"");
    fs::write(
        &path,
        format!("{}\n{forged}\n{{not json\n{}\n", lines[0], lines[3]),
    )
    .unwrap();
    let report = mailbox.verify().unwrap();
    assert_eq!(
        report.problems,
        [
            "line 3: malformed journal row",
            "entry 1: seq 9 does not match chain position",
            "entry 1: entry hash mismatch",
            "entry 1: body hash mismatch",
            "entry 1: signature invalid",
            "entry 2: seq 3 does not match chain position",
            "entry 2: broken chain link",
        ]
    );
    assert!(!report.ok());
}

#[test]
fn torn_tail_stays_a_separate_malformed_row() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    post(&mailbox, "t-1", "finding", "one").unwrap();
    let path = journal_path(&scratch.sdd);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"body\":\"half");
    fs::write(&path, &bytes).unwrap();
    let entry = post(&mailbox, "t-1", "finding", "two").unwrap();
    assert_eq!(entry.seq, 1);
    let report = mailbox.verify().unwrap();
    assert_eq!(
        report.problems,
        vec!["line 2: malformed journal row".to_owned()]
    );
    assert_eq!(report.entries, 2);
}

fn assert_refused(scratch: &Scratch, result: Result<Entry, Error>, before: Option<&[u8]>) -> Error {
    let err = result.expect_err("the post must be refused");
    assert_eq!(
        scratch.journal_bytes().as_deref(),
        before,
        "a refused post wrote to the journal"
    );
    err
}

#[test]
fn bad_posts_are_refused_and_write_nothing() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    // Before the first post there is no journal, and a refusal does not create one.
    let err = assert_refused(&scratch, post(&mailbox, "../etc", "finding", "x"), None);
    assert!(matches!(err, Error::InvalidTaskId { .. }), "{err}");
    assert!(!journal_path(&scratch.sdd).parent().unwrap().exists());

    post(&mailbox, "t-1", "finding", "seed").unwrap();
    let before = scratch.journal_bytes().unwrap();

    // 2048 two-byte characters plus one byte: 2049 characters, 4097 bytes.
    let too_long = format!("{}a", "é".repeat(2048));
    assert_eq!(
        (too_long.chars().count(), too_long.len()),
        (2049, MAX_MESSAGE_BODY_BYTES + 1)
    );
    let err = assert_refused(
        &scratch,
        post(&mailbox, "t-1", "finding", &too_long),
        Some(&before),
    );
    assert_eq!(err.to_string(), "message body exceeds 4096 bytes");
    assert!(matches!(
        err,
        Error::MessageTooLarge {
            bytes: 4097,
            limit: 4096
        }
    ));
    // Exactly 4096 bytes is accepted, and the cap is measured before redaction.
    let at_cap = "é".repeat(2048);
    post(&mailbox, "t-1", "finding", &at_cap).unwrap();
    let before = scratch.journal_bytes().unwrap();

    let err = assert_refused(&scratch, post(&mailbox, "t-1", "chat", "x"), Some(&before));
    assert_eq!(
        err.to_string(),
        "unknown message kind 'chat'; expected one of ('finding', 'artefact_ref', 'question', \
         'rendezvous_open', 'rendezvous_closed', 'steer.pause', 'steer.resume', 'steer.guidance', \
         'steer.redirect', 'steer.abort')"
    );

    for bad in ["", "..", "a/b", "t 1", "t\u{0}1"] {
        let err = assert_refused(&scratch, post(&mailbox, bad, "finding", "x"), Some(&before));
        assert!(matches!(err, Error::InvalidTaskId { .. }), "{bad:?}: {err}");
    }
}

#[test]
fn the_129th_unconsumed_message_is_refused() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    for i in 0..MAX_PENDING_PER_TASK {
        post(&mailbox, "t-full", "finding", &format!("m{i}")).unwrap();
    }
    let before = scratch.journal_bytes().unwrap();
    let err = assert_refused(
        &scratch,
        post(&mailbox, "t-full", "finding", "m128"),
        Some(&before),
    );
    assert_eq!(
        err.to_string(),
        "task 't-full' already holds 128 unconsumed messages"
    );
    assert!(matches!(err, Error::MailboxFull { limit: 128, .. }));
    // Other tasks are unaffected.
    post(&mailbox, "t-other", "finding", "fine").unwrap();
    // Consuming up to seq 0 frees exactly one slot.
    mailbox.record_consumption("t-full", 0);
    mailbox.record_consumption("t-full", -1);
    assert_eq!(mailbox.consumed_cursor("t-full"), 0);
    post(&mailbox, "t-full", "finding", "m128").unwrap();
    assert!(matches!(
        post(&mailbox, "t-full", "finding", "m129"),
        Err(Error::MailboxFull { .. })
    ));
    // The cursor is per process: a new Mailbox counts every message again.
    let fresh = scratch.mailbox();
    assert_eq!(fresh.consumed_cursor("t-full"), -1);
    assert!(fresh.verify().unwrap().ok());
}

#[test]
fn identity_problems_are_clear_errors_and_nothing_is_written() {
    let scratch = Scratch::new();
    let identity_dir = scratch.sdd.join("identity");
    SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap();
    let (private_path, public_path) = identity_paths(&identity_dir, "mailbox_signing");
    let private_before = fs::read(&private_path).unwrap();
    let public_before = fs::read(&public_path).unwrap();

    set_mode(&private_path, 0o644);
    let err = SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap_err();
    assert!(
        matches!(err, Error::SigningKeyPermissions { mode: 0o644, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chmod 600"), "{err}");

    set_mode(&private_path, 0o600);
    fs::write(
        &private_path,
        "-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let err = SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap_err();
    assert!(matches!(err, Error::SigningKeyMalformed { .. }), "{err}");
    assert!(err.to_string().contains("not valid base64"), "{err}");
    // Neither refusal touched the public half or created a journal.
    assert_eq!(fs::read(&public_path).unwrap(), public_before);
    assert_ne!(fs::read(&private_path).unwrap(), private_before);
    assert!(scratch.journal_bytes().is_none());
}

#[test]
fn rendezvous_protocol_is_enforced() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    let dlp = RedactionContext::default();
    let send = |task: &str, sender: &str, kind: &str, body: &str, authority: Authority<'_>| {
        let mut message = NewMessage::new(task, sender, kind, body, 1.0);
        message.authority = authority;
        mailbox.post(&message, &dlp)
    };
    let trusted = Authority::TrustedInternal;
    let question = send("t-b", "worker-a", "question", "which schema?", trusted).unwrap();
    let open_body = format!(
        r#"{{"awaited_task_id":"t-b","question_entry_hash":"{}","v":1,"waiter_task_id":"t-a"}}"#,
        question.entry_hash
    );
    let refusal = |r: Result<Entry, Error>| match r {
        Err(Error::MailboxUnauthorized { reason }) => reason,
        other => panic!("expected an authorization refusal, got {other:?}"),
    };
    assert_eq!(
        refusal(send(
            "t-b",
            "worker-z",
            "rendezvous_open",
            &open_body,
            trusted
        )),
        "rendezvous open references another sender or destination"
    );
    assert_eq!(
        refusal(send(
            "t-b",
            "worker-a",
            "rendezvous_open",
            "not json",
            trusted
        )),
        "invalid rendezvous open: rendezvous body is not JSON"
    );
    let open = send("t-b", "worker-a", "rendezvous_open", &open_body, trusted).unwrap();
    let reply = send("t-a", "worker-b", "question", "v2", trusted).unwrap();
    let close_body = format!(
        r#"{{"open_entry_hash":"{}","reply_entry_hash":"{}","resolution":"answered","v":1}}"#,
        open.entry_hash, reply.entry_hash
    );
    let scope = vec!["t-c".to_owned()];
    let worker = Authority::Worker {
        acting_task_id: Some("t-b"),
        authorized_task_ids: &scope,
    };
    assert_eq!(
        refusal(send(
            "t-a",
            "worker-b",
            "rendezvous_closed",
            &close_body,
            worker
        )),
        "acting task is not in this agent's task scope"
    );
    let scope = vec!["t-b".to_owned()];
    let worker = Authority::Worker {
        acting_task_id: Some("t-b"),
        authorized_task_ids: &scope,
    };
    send("t-a", "worker-b", "rendezvous_closed", &close_body, worker).unwrap();
    assert_eq!(
        refusal(send(
            "t-a",
            "worker-b",
            "rendezvous_closed",
            &close_body,
            worker
        )),
        "rendezvous is already closed"
    );
    assert_eq!(
        refusal(send("t-z", "worker-b", "finding", "x", worker)),
        "cross-task message kind 'finding' is not permitted"
    );
    assert!(mailbox.verify().unwrap().ok());
}

/// Who may post what, case by case: a worker's scope, its acting task and the recipient, and
/// the fields a rendezvous open must bind.
#[test]
fn worker_scope_and_rendezvous_bindings_are_enforced() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    let dlp = RedactionContext::default();
    let send = |task: &str, kind: &str, body: &str, authority: Authority<'_>| {
        let mut message = NewMessage::new(task, "worker-a", kind, body, 1.0);
        message.authority = authority;
        mailbox.post(&message, &dlp)
    };
    let check =
        |result: Result<Entry, Error>, expect: Option<&str>, case: &str| match (result, expect) {
            (Ok(_), None) => {}
            (Err(Error::MailboxUnauthorized { reason }), Some(expected)) => {
                assert_eq!(reason, expected, "{case}");
            }
            (other, _) => panic!("{case}: expected {expect:?}, got {other:?}"),
        };
    let scope_a = vec!["t-a".to_owned()];
    let no_scope: Vec<String> = Vec::new();
    let worker = |acting, scope| Authority::Worker {
        acting_task_id: acting,
        authorized_task_ids: scope,
    };
    let out_of_scope = Some("acting task is not in this agent's task scope");
    let cross_task = Some("cross-task message kind 'finding' is not permitted");
    /// Recipient, kind, acting task, scope, refusal, and what the case is.
    type Case<'a> = (
        &'a str,
        &'a str,
        Option<&'a str>,
        &'a [String],
        Option<&'a str>,
        &'a str,
    );
    let cases: [Case<'_>; 8] = [
        (
            "t-a",
            "finding",
            None,
            &scope_a,
            None,
            "own task, no acting id",
        ),
        (
            "t-a",
            "finding",
            Some(""),
            &scope_a,
            None,
            "an empty acting id is the recipient",
        ),
        (
            "t-a",
            "finding",
            Some("t-a"),
            &scope_a,
            None,
            "acting in scope",
        ),
        (
            "t-b",
            "finding",
            Some("t-b"),
            &scope_a,
            out_of_scope,
            "acting out of scope",
        ),
        (
            "t-b",
            "finding",
            None,
            &scope_a,
            out_of_scope,
            "recipient out of scope",
        ),
        (
            "t-x",
            "finding",
            Some("t-x"),
            &no_scope,
            None,
            "no scope: any acting task",
        ),
        (
            "t-b",
            "finding",
            Some("t-a"),
            &scope_a,
            cross_task,
            "another task's mailbox",
        ),
        (
            "t-b",
            "question",
            Some("t-a"),
            &scope_a,
            None,
            "a question to another task",
        ),
    ];
    for (task, kind, acting, scope, refusal, case) in cases {
        check(send(task, kind, "x", worker(acting, scope)), refusal, case);
    }

    let trusted = Authority::TrustedInternal;
    let question = send("t-b", "question", "which schema?", trusted).unwrap();
    let open = |waiter: &str, awaited: &str, hash: &str| {
        format!(
            r#"{{"awaited_task_id":"{awaited}","question_entry_hash":"{hash}","v":1,"waiter_task_id":"{waiter}"}}"#
        )
    };
    let hash = question.entry_hash.as_str();
    let unbound = Some("rendezvous open does not bind the acting and addressed tasks");
    let missing = Some("invalid rendezvous open: rendezvous open body is missing a bound field");
    check(
        send("t-b", "rendezvous_open", &open("", "t-b", hash), trusted),
        missing,
        "no waiter",
    );
    check(
        send("t-b", "rendezvous_open", &open("t-a", "", hash), trusted),
        missing,
        "no awaited task",
    );
    check(
        send("t-b", "rendezvous_open", &open("t-a", "t-b", ""), trusted),
        missing,
        "no question",
    );
    check(
        send("t-b", "rendezvous_open", &open("t-a", "t-c", hash), trusted),
        unbound,
        "another awaited task",
    );
    check(
        send(
            "t-b",
            "rendezvous_open",
            &open("t-c", "t-b", hash),
            worker(Some("t-a"), &scope_a),
        ),
        unbound,
        "a waiter other than the acting task",
    );
    check(
        send(
            "t-b",
            "rendezvous_open",
            &open("t-a", "t-b", "sha256:none"),
            trusted,
        ),
        Some("rendezvous open references no question entry"),
        "an unknown question",
    );
    let opened = send(
        "t-b",
        "rendezvous_open",
        &open("t-a", "t-b", hash),
        worker(Some("t-a"), &scope_a),
    )
    .expect("the acting worker opens on its own question");

    let close = |reply: &str, resolution: &str| {
        format!(
            r#"{{"open_entry_hash":"{}","reply_entry_hash":"{reply}","resolution":"{resolution}","v":1}}"#,
            opened.entry_hash
        )
    };
    check(
        send(
            "t-a",
            "rendezvous_closed",
            "not json",
            worker(Some("t-a"), &scope_a),
        ),
        Some("invalid rendezvous close: rendezvous body is not JSON"),
        "a close posted to the worker's own task is still a rendezvous",
    );
    let foreign_reply = mailbox
        .post(
            &NewMessage::new("t-a", "worker-z", "question", "v2", 1.0),
            &dlp,
        )
        .unwrap();
    check(
        send(
            "t-a",
            "rendezvous_closed",
            &close(&foreign_reply.entry_hash, "answered"),
            trusted,
        ),
        Some("reply entry belongs to another sender or destination"),
        "a reply from another sender",
    );
    let reply = send("t-a", "question", "v2", trusted).unwrap();
    check(
        send(
            "t-a",
            "rendezvous_closed",
            &close(&reply.entry_hash, "refused"),
            trusted,
        ),
        Some("non-answered rendezvous must not bind a reply"),
        "a refusal that binds a reply",
    );
    check(
        send("t-a", "rendezvous_closed", &close("", "refused"), trusted),
        None,
        "a refusal without a reply",
    );
    assert!(mailbox.verify().unwrap().ok());
}

/// A post whose writer died before the entry's audit mirror leaves the mirror owed; the next
/// mirrored post writes it first, once, and a mirror already there is not written again.
#[test]
fn the_next_mirrored_post_settles_an_owed_mirror_once() {
    let scratch = Scratch::new();
    let mailbox = scratch.mailbox();
    let chain = bernstein_journal::audit::AuditChain::open(
        scratch.sdd.join("audit"),
        bernstein_journal::key::AuditKey::from_master_bytes(audit_key()),
    );
    let dlp = RedactionContext::default();
    let message = |task: &'static str| NewMessage::new(task, "w", "finding", "x", 1.0);
    let mirrored = |task| {
        let (entry, error) = mailbox.post_mirrored(&message(task), &dlp, &chain).unwrap();
        assert!(error.is_none(), "{error:?}");
        entry
    };
    let first = mirrored("t-1");
    // Posted without its mirror, as by a writer killed before it.
    let owed = mailbox.post(&message("t-2"), &dlp).unwrap();
    let third = mirrored("t-3");
    let fourth = mirrored("t-4");
    let mirrored_hashes: Vec<String> = mirrors(scratch.sdd.parent().unwrap())
        .into_iter()
        .map(|mirror| mirror.entry_hash)
        .collect();
    assert_eq!(
        mirrored_hashes,
        [
            first.entry_hash,
            owed.entry_hash,
            third.entry_hash,
            fourth.entry_hash
        ]
    );
}

#[test]
fn concurrent_posters_keep_one_chain() {
    let scratch = Scratch::new();
    let identity_dir = scratch.sdd.join("identity");
    SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap();
    std::thread::scope(|s| {
        for worker in 0..4 {
            let scratch = &scratch;
            s.spawn(move || {
                let mailbox = scratch.mailbox();
                for i in 0..10 {
                    post(
                        &mailbox,
                        &format!("t-{worker}"),
                        "finding",
                        &format!("{worker}/{i}"),
                    )
                    .unwrap();
                }
            });
        }
    });
    let report = scratch.mailbox().verify().unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.entries, 40);
}

#[test]
fn capsule_detached_jws_is_byte_identical() {
    // The capsule generator signs with the seed 0x44 under kid `context-capsule`.
    let signer = SigningIdentity::from_seed(&[0x44; 32]).unwrap();
    for (file, domain) in [
        ("t-42.json", &b"bernstein.context-capsule.v1\0"[..]),
        ("t-mock.json", &b"bernstein.context-capsule.MOCK.v1\0"[..]),
    ] {
        let record = read_json(&vector(&format!("capsule/.sdd/context/capsules/{file}")));
        let record = record.as_object().unwrap();
        let canonical = record
            .get("capsule")
            .unwrap()
            .dumps(Dialect::PY_COMPACT_UTF8);
        let payload = [domain, canonical.as_bytes()].concat();
        let jws = record.get("signature").and_then(Value::as_str).unwrap();
        let pem = record
            .get("signer_public_key_pem")
            .and_then(Value::as_str)
            .unwrap();
        assert_eq!(pem, signer.public_key_pem());
        assert_eq!(
            signer.sign_detached_jws(&payload, "context-capsule"),
            jws,
            "{file}"
        );
        assert!(bernstein_journal::identity::verify_detached_jws(
            &payload,
            jws,
            "context-capsule",
            pem
        ));
        assert!(!bernstein_journal::identity::verify_detached_jws(
            &payload,
            jws,
            "other-kid",
            pem
        ));
        let other_domain = [&b"x"[..], canonical.as_bytes()].concat();
        assert!(!bernstein_journal::identity::verify_detached_jws(
            &other_domain,
            jws,
            "context-capsule",
            pem
        ));
    }
}
