//! `bernstein_verify_lineage`: the whole-log check behind the per-artefact verdict.
//!
//! Every line of `log.jsonl` is checked, because the log is one store: an artefact's parents
//! may be entries of another artefact, and one edited line makes every answer drawn from the
//! log suspect. Per line:
//!
//! 1. it parses as a JSON object (UTF-8);
//! 2. it equals its canonical form in the writer's dialect, PY-COMPACT-UTF8 — the reference
//!    compares against `ensure_ascii=True` and so rejects every honest non-ASCII entry;
//! 3. it has the entry schema (`v` 1, known kind, `sha256:` hashes, string fields, integer
//!    `ts_ns`, no null optional field — the writer drops those — and no unknown field);
//! 4. its `operator_hmac` verifies under the operator key;
//! 5. its signature sidecar exists, names the entry's `agent_card_kid` in its header, and
//!    verifies against the caller's Agent Card for `(agent_id, agent_card_kid)`.
//!
//! Then every parent hash must name an entry of the log, and the file must end with a newline.
//! The verdict is `ok` only when nothing was found; `reason` is the first problem (the
//! reference's wording where it has one). An artefact with no entry in a sound log is ok, as
//! in the reference; [`LineageVerification::artefact_entries`] shows it is empty.

use std::collections::HashSet;
use std::path::Path;

use bernstein_protocol::encoding::is_lower_hex;
use bernstein_protocol::pyjson::{Object, Value};

use super::cards::AgentCards;
use super::{
    ACTIVITY_SOURCES, ARTEFACT_KINDS, LineageLog, SENSITIVITY_CLASSES, TRUST_CLASSES,
    canonical_entry, operator_hmac,
};
use crate::crypto::{constant_time_eq, sha256_hex};
use crate::identity::python_b64url_decode;
use crate::run_journal::{python_str_repr, python_strip};
use crate::{Error, Result};

/// What kind of problem a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineageProblemKind {
    /// The file's line structure: no final newline, or an empty line.
    Framing,
    /// A line that is not UTF-8 JSON.
    Unparsable,
    /// A line that is not its canonical serialisation.
    NotCanonical,
    /// A line that is not a valid entry.
    Schema,
    /// The operator HMAC does not verify.
    OperatorHmac,
    /// No signature sidecar for the entry.
    SignatureMissing,
    /// The sidecar's header names another key id than the entry.
    KidMismatch,
    /// The signature does not verify.
    SignatureInvalid,
    /// No Agent Card for the entry's `(agent_id, agent_card_kid)`.
    UnknownAgentCard,
    /// Two different cards claim one identity.
    CardConflict,
    /// A parent hash names no entry of the log.
    DanglingParent,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineageProblem {
    /// The kind.
    pub kind: LineageProblemKind,
    /// The 1-based line of `log.jsonl`, when the problem belongs to one.
    pub line: Option<usize>,
    /// The entry's hash, when it could be computed.
    pub entry_hash: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The verdict for one artefact path and the findings over the whole log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineageVerification {
    /// The artefact asked about.
    pub artefact_path: String,
    /// Whether nothing was found.
    pub ok: bool,
    /// The first problem, `None` when ok.
    pub reason: Option<String>,
    /// Whether `log.jsonl` exists.
    pub log_present: bool,
    /// Lines that parsed as objects.
    pub entries: usize,
    /// The hashes of the artefact's entries, in log order.
    pub artefact_entries: Vec<String>,
    /// Every problem, in line order, then parents, then framing.
    pub problems: Vec<LineageProblem>,
}

impl LineageVerification {
    /// The tool's `{"ok", "reason"}` result.
    pub fn to_tool_result(&self) -> Object {
        Object::new()
            .with("ok", self.ok)
            .with("reason", self.reason.clone())
    }
}

/// One parsed entry, as the later passes need it.
struct SeenEntry {
    line: usize,
    hash: String,
    parents: Vec<String>,
}

/// Verifies the project's lineage log and answers for `artefact_path` (see the module
/// documentation). `operator_key` is the operator HMAC secret (Bernstein passes the audit
/// master key); `cards` are the Agent Cards signatures are checked against.
///
/// # Errors
///
/// [`Error::Containment`] when `.sdd/lineage` resolves outside the project, or [`Error::Io`]
/// when the log exists but cannot be read.
pub fn verify_lineage(
    project_root: &Path,
    artefact_path: &str,
    operator_key: &[u8],
    cards: &AgentCards,
) -> Result<LineageVerification> {
    let log = LineageLog::for_project(project_root);
    let log_path = log.log_path()?;
    let (bytes, log_present) = match crate::regular_file::read_regular(&log_path) {
        Ok(bytes) => (bytes, true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => (Vec::new(), false),
        Err(err) => return Err(Error::io("read", &log_path, err)),
    };
    let mut report = LineageVerification {
        artefact_path: artefact_path.to_owned(),
        ok: true,
        reason: None,
        log_present,
        entries: 0,
        artefact_entries: Vec::new(),
        problems: Vec::new(),
    };
    let mut raw_lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    if raw_lines.last().is_some_and(|last| last.is_empty()) {
        raw_lines.pop();
    }
    let mut seen: Vec<SeenEntry> = Vec::new();
    for (index, raw) in raw_lines.iter().enumerate() {
        let line = index + 1;
        if let Some(entry) = check_line(&log, raw, line, operator_key, cards, &mut report) {
            seen.push(entry);
        }
    }
    report.entries = seen.len();
    if !seen.is_empty() {
        for conflict in cards.conflicts() {
            report.problems.push(LineageProblem {
                kind: LineageProblemKind::CardConflict,
                line: None,
                entry_hash: None,
                message: conflict.clone(),
            });
        }
    }
    let known: HashSet<&str> = seen.iter().map(|entry| entry.hash.as_str()).collect();
    for entry in &seen {
        for parent in &entry.parents {
            if !known.contains(parent.as_str()) {
                report.problems.push(LineageProblem {
                    kind: LineageProblemKind::DanglingParent,
                    line: Some(entry.line),
                    entry_hash: Some(entry.hash.clone()),
                    message: format!(
                        "dangling parent {}… for entry {}…",
                        prefix(parent, 24),
                        prefix(&entry.hash, 24)
                    ),
                });
            }
        }
    }
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        report.problems.push(LineageProblem {
            kind: LineageProblemKind::Framing,
            line: None,
            entry_hash: None,
            message: "log: missing trailing newline".to_owned(),
        });
    }
    report.ok = report.problems.is_empty();
    report.reason = report.problems.first().map(|p| p.message.clone());
    Ok(report)
}

fn prefix(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

/// Checks one line, recording its problems; `Some` when it parsed as an object.
fn check_line(
    log: &LineageLog,
    raw: &[u8],
    line: usize,
    operator_key: &[u8],
    cards: &AgentCards,
    report: &mut LineageVerification,
) -> Option<SeenEntry> {
    let mut problem = |kind, hash: Option<&str>, message: String| {
        report.problems.push(LineageProblem {
            kind,
            line: Some(line),
            entry_hash: hash.map(str::to_owned),
            message,
        });
    };
    if raw.is_empty() {
        problem(
            LineageProblemKind::Framing,
            None,
            format!("log line {line}: empty line"),
        );
        return None;
    }
    let parsed = std::str::from_utf8(raw)
        .map_err(|err| err.to_string())
        .and_then(|text| Value::parse(text).map_err(|err| err.to_string()));
    let value = match parsed {
        Ok(value) => value,
        Err(err) => {
            problem(
                LineageProblemKind::Unparsable,
                None,
                format!("invalid JSON in log.jsonl: {err}"),
            );
            return None;
        }
    };
    let Some(entry) = value.as_object() else {
        problem(
            LineageProblemKind::Schema,
            None,
            format!("log line {line}: corrupt entry: not a JSON object"),
        );
        return None;
    };
    let canonical = canonical_entry(entry);
    let hash = format!("sha256:{}", sha256_hex(canonical.as_bytes()));
    if canonical.as_bytes() != raw {
        problem(
            LineageProblemKind::NotCanonical,
            Some(&hash),
            "non-canonical line bytes in log.jsonl".to_owned(),
        );
    }
    for detail in schema_problems(entry) {
        problem(
            LineageProblemKind::Schema,
            Some(&hash),
            format!("log line {line}: corrupt entry: {detail}"),
        );
    }
    let text = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or_default();
    let artefact = text("artefact_path");
    let stored_hmac = text("operator_hmac");
    let expected_hmac = operator_hmac(entry, operator_key);
    if !constant_time_eq(stored_hmac.as_bytes(), expected_hmac.as_bytes()) {
        problem(
            LineageProblemKind::OperatorHmac,
            Some(&hash),
            format!("{artefact}: HMAC mismatch on entry {hash}"),
        );
    }
    let (agent_id, kid) = (text("agent_id"), text("agent_card_kid"));
    match cards.get(agent_id, kid) {
        None => problem(
            LineageProblemKind::UnknownAgentCard,
            Some(&hash),
            format!(
                "{artefact}: no agent card for (agent_id={}, kid={}) - kid binding cannot be established (entry {hash})",
                python_str_repr(agent_id),
                python_str_repr(kid)
            ),
        ),
        Some(card) => match read_signature(log, artefact, &hash) {
            None => problem(
                LineageProblemKind::SignatureMissing,
                Some(&hash),
                format!("{artefact}: missing signature sidecar for entry {hash}"),
            ),
            Some(jws) => {
                let header_kid = jws_header_kid(&jws);
                if header_kid.as_deref() != Some(kid) {
                    problem(
                        LineageProblemKind::KidMismatch,
                        Some(&hash),
                        format!(
                            "{artefact}: kid binding mismatch on entry {hash} - signed body kid {} != JWS header kid {}",
                            python_str_repr(kid),
                            header_kid
                                .as_deref()
                                .map_or("None".to_owned(), python_str_repr)
                        ),
                    );
                } else if !card
                    .public_key()
                    .verify_detached_jws(canonical.as_bytes(), &jws, kid)
                {
                    problem(
                        LineageProblemKind::SignatureInvalid,
                        Some(&hash),
                        format!("{artefact}: invalid signature on entry {hash}"),
                    );
                }
            }
        },
    }
    if entry.get("artefact_path").and_then(Value::as_str) == Some(report.artefact_path.as_str()) {
        report.artefact_entries.push(hash.clone());
    }
    let parents = entry
        .get("parent_hashes")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(crate::audit::python_str).collect())
        .unwrap_or_default();
    Some(SeenEntry {
        line,
        hash,
        parents,
    })
}

/// The sidecar's text, stripped as the reference strips it; `None` when it cannot be read.
fn read_signature(log: &LineageLog, artefact_path: &str, entry_hash: &str) -> Option<String> {
    let path = log.signature_path(artefact_path, entry_hash).ok()?;
    let text = std::fs::read_to_string(path).ok()?;
    Some(python_strip(&text).to_owned())
}

/// The `kid` of a detached JWS's protected header (the reference's `jws_header_kid`).
fn jws_header_kid(jws: &str) -> Option<String> {
    let mut parts = jws.splitn(3, '.');
    let (protected, empty, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if !empty.is_empty() || signature.contains('.') {
        return None;
    }
    let header = python_b64url_decode(protected)?;
    let value = Value::parse(std::str::from_utf8(&header).ok()?).ok()?;
    value
        .as_object()?
        .get("kid")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

const REQUIRED_STRINGS: [&str; 6] = [
    "artefact_path",
    "agent_id",
    "agent_card_kid",
    "tool_call_id",
    "span_id",
    "operator_hmac",
];

const OPTIONAL_FIELDS: [&str; 6] = [
    "trust_class",
    "activity_source",
    "attachment_digests",
    "model_ref",
    "sensitivity",
    "external_attestation",
];

/// Every way `entry` departs from the entry schema.
fn schema_problems(entry: &Object) -> Vec<String> {
    let mut problems = Vec::new();
    let repr = |text: &str| python_str_repr(text);
    match entry.get("v") {
        Some(Value::Int(v)) if v.as_i64() == Some(super::LINEAGE_ENTRY_VERSION) => {}
        Some(other) => problems.push(format!(
            "unsupported entry version: {}",
            crate::audit::python_repr(other)
        )),
        None => problems.push("missing field 'v'".to_owned()),
    }
    for name in REQUIRED_STRINGS {
        match entry.get(name) {
            Some(Value::Str(_)) => {}
            Some(_) => problems.push(format!("field {} must be a string", repr(name))),
            None => problems.push(format!("missing field {}", repr(name))),
        }
    }
    match entry.get("artefact_kind") {
        Some(Value::Str(kind)) if ARTEFACT_KINDS.contains(&kind.as_str()) => {}
        Some(Value::Str(kind)) => problems.push(format!("unknown artefact_kind: {}", repr(kind))),
        Some(_) => problems.push("field 'artefact_kind' must be a string".to_owned()),
        None => problems.push("missing field 'artefact_kind'".to_owned()),
    }
    match entry.get("content_hash") {
        Some(Value::Str(hash)) if hash.starts_with("sha256:") => {}
        Some(other) => problems.push(format!(
            "content_hash must start with 'sha256:', got {}",
            crate::audit::python_repr(other)
        )),
        None => problems.push("missing field 'content_hash'".to_owned()),
    }
    match entry.get("parent_hashes") {
        Some(Value::Array(parents)) => {
            for parent in parents {
                if !parent.as_str().is_some_and(|p| p.starts_with("sha256:")) {
                    problems.push(format!(
                        "parent_hash must start with 'sha256:', got {}",
                        crate::audit::python_repr(parent)
                    ));
                }
            }
        }
        Some(_) => problems.push("field 'parent_hashes' must be a list".to_owned()),
        None => problems.push("missing field 'parent_hashes'".to_owned()),
    }
    match entry.get("ts_ns") {
        Some(Value::Int(_)) => {}
        Some(_) => problems.push("field 'ts_ns' must be an integer".to_owned()),
        None => problems.push("missing field 'ts_ns'".to_owned()),
    }
    for name in OPTIONAL_FIELDS {
        let Some(value) = entry.get(name) else {
            continue;
        };
        let allowed: Option<&[&str]> = match name {
            "trust_class" => Some(&TRUST_CLASSES),
            "activity_source" => Some(&ACTIVITY_SOURCES),
            "sensitivity" => Some(&SENSITIVITY_CLASSES),
            _ => None,
        };
        match (name, value) {
            (_, Value::Null) => problems.push(format!(
                "optional field {} is null (the writer drops it)",
                repr(name)
            )),
            ("attachment_digests", Value::Array(digests)) if !digests.is_empty() => {
                for digest in digests {
                    if !digest.as_str().is_some_and(|d| is_lower_hex(d, 64)) {
                        problems.push(format!(
                            "attachment digest must be 64 lower-case hex chars, got {}",
                            crate::audit::python_repr(digest)
                        ));
                    }
                }
            }
            ("attachment_digests", _) => {
                problems.push("attachment_digests must be a non-empty list of digests".to_owned())
            }
            ("model_ref" | "external_attestation", Value::Object(_)) => {}
            ("model_ref" | "external_attestation", _) => {
                problems.push(format!("field {} must be an object", repr(name)));
            }
            (_, Value::Str(class)) if allowed.is_some_and(|set| set.contains(&class.as_str())) => {}
            (_, other) => problems.push(format!(
                "unknown {name}: {}",
                crate::audit::python_repr(other)
            )),
        }
    }
    let known: HashSet<&str> = [
        "v",
        "artefact_kind",
        "content_hash",
        "parent_hashes",
        "ts_ns",
    ]
    .into_iter()
    .chain(REQUIRED_STRINGS)
    .chain(OPTIONAL_FIELDS)
    .collect();
    for key in entry.keys() {
        if !known.contains(key) {
            problems.push(format!("unexpected field {}", repr(key)));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector's first entry, which the schema accepts as it is.
    const GOOD: &str = r#"{"agent_card_kid":"worker-a-key-1","agent_id":"agent:worker-a","artefact_kind":"file","artefact_path":"src/app.py","content_hash":"sha256:14f9","operator_hmac":"a210","parent_hashes":[],"span_id":"00f067aa0ba902b7","tool_call_id":"call-1","ts_ns":1780000800000000000,"v":1}"#;

    /// The schema problems of the good entry with `changes` merged over it (a `null` value
    /// stays as a null field).
    fn check(changes: &str, expect: &[&str]) {
        let mut entry = Value::parse(GOOD).unwrap().as_object().unwrap().clone();
        for (key, value) in Value::parse(changes).unwrap().as_object().unwrap().iter() {
            entry.insert(key, value.clone());
        }
        assert_eq!(schema_problems(&entry), expect, "{changes}");
    }

    #[test]
    fn the_entry_schema_is_held_field_by_field() {
        check("{}", &[]);
        check(r#"{"v": 2}"#, &["unsupported entry version: 2"]);
        check(r#"{"v": "1"}"#, &["unsupported entry version: '1'"]);
        check(
            r#"{"artefact_kind": "dir"}"#,
            &["unknown artefact_kind: 'dir'"],
        );
        check(
            r#"{"content_hash": "md5:x"}"#,
            &["content_hash must start with 'sha256:', got 'md5:x'"],
        );
        check(
            r#"{"parent_hashes": ["sha256:a", "b"]}"#,
            &["parent_hash must start with 'sha256:', got 'b'"],
        );
        check(
            r#"{"trust_class": "operator", "activity_source": "adapter", "sensitivity": "public"}"#,
            &[],
        );
        check(
            r#"{"trust_class": "anyone"}"#,
            &["unknown trust_class: 'anyone'"],
        );
        check(
            r#"{"activity_source": "human"}"#,
            &["unknown activity_source: 'human'"],
        );
        check(
            r#"{"sensitivity": "secret"}"#,
            &["unknown sensitivity: 'secret'"],
        );
        check(r#"{"sensitivity": 3}"#, &["unknown sensitivity: 3"]);
        check(
            r#"{"trust_class": null}"#,
            &["optional field 'trust_class' is null (the writer drops it)"],
        );
        let digest = "ab".repeat(32);
        check(&format!(r#"{{"attachment_digests": ["{digest}"]}}"#), &[]);
        check(
            r#"{"attachment_digests": []}"#,
            &["attachment_digests must be a non-empty list of digests"],
        );
        check(
            r#"{"attachment_digests": ["AB"]}"#,
            &["attachment digest must be 64 lower-case hex chars, got 'AB'"],
        );
        check(r#"{"model_ref": {"id": "m"}}"#, &[]);
        check(
            r#"{"model_ref": "m"}"#,
            &["field 'model_ref' must be an object"],
        );
        check(r#"{"colour": "red"}"#, &["unexpected field 'colour'"]);
    }
}
