//! The lineage spine: `.sdd/lineage/<run_id>/spine.jsonl`, a hash chain of HMAC-tagged rows, one
//! per sealed artifact version (the reference's `core/lineage/spine.py`, FORMATS §6.1).
//!
//! ```text
//! entry_hash = "sha256:" + sha256("bernstein:lineage:v2" + PY-COMPACT-UTF8({actor,
//!                artifact_path, content_hash, model, prev_hash, step_id, timestamp
//!                [, traceparent, tracestate, baggage]}))
//! hmac       = hex(HMAC-SHA256(HKDF(master, "lineage"), PY-COMPACT-UTF8(row minus "hmac")))
//! row        = PY-COMPACT-UTF8(row) + "\n"
//! spine.head = PY-COMPACT-UTF8({count, head_hash, hmac = HMAC(derived, {count, head_hash})})
//! ```
//!
//! Version-1 rows hash without the domain tag and are tagged with the raw master key. A spine
//! whose `spine.head` declares `hash_profile: "jcs-v2"` tags (and stores) rows as RFC 8785.
//!
//! **Appending** takes the reference's cross-process lock (`flock` on `<run dir>/.spine.lock`),
//! then refuses to extend a spine that does not verify, records and cuts a torn last row (bytes
//! after the last newline were never acknowledged: see [`crate::durable::recover_torn_tail`]),
//! writes the row with one `write` plus `fsync` (taken back when either fails, so a retry
//! cannot duplicate it), makes the directory entries durable, and replaces `spine.head`
//! atomically.
//!
//! **Verifying** ([`verify_spine_bytes`]) reproduces `LineageSpine.verify` — the statuses `ok`,
//! `no_entries`, `seal_only` and `tampered`, and its per-line error texts — and checks more:
//! every row must also be byte-identical to its canonical serialisation and the file must end
//! with exactly one newline, so that *any* single-byte change is reported (the reference accepts
//! a final newline replaced by a space, because `json.loads` ignores surrounding whitespace).
//! The `spine.head` snapshot is checked too, but its findings are reported separately and do not
//! change the status: the reference treats it as a convenience a crash may leave stale.

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::blobs::{content_address, write_atomically};
use super::pyint::python_int;
use crate::audit::{python_repr, python_str};
use crate::crypto::{constant_time_eq, hmac_sha256_hex, sha256_hex};
use crate::durable::{
    append_durably, create_dir_all_durable, ensure_entry_durable, recover_torn_tail,
};
use crate::key::AuditKey;
use crate::run_journal::{contained_path, python_str_repr};
use crate::{Error, Result};

/// The spine file inside a run's lineage directory.
pub const SPINE_FILE_NAME: &str = "spine.jsonl";
/// The head snapshot inside a run's lineage directory.
pub const SPINE_HEAD_FILE_NAME: &str = "spine.head";
/// The cross-process append lock inside a run's lineage directory (the reference's name).
pub const SPINE_LOCK_FILE_NAME: &str = ".spine.lock";
/// The version stamped into every row this crate writes.
pub const SPINE_ENTRY_VERSION: i64 = 2;
/// The HKDF domain of the spine's HMAC key.
pub const LINEAGE_KEY_DOMAIN: &str = "lineage";
/// The domain tag prefixed to a version-2 entry-hash pre-image.
pub const LINEAGE_DOMAIN_TAG: &str = "bernstein:lineage:v2";
/// `step_id` prefix of the journal-head seal written when a run finalises.
pub const JOURNAL_SEAL_STEP_PREFIX: &str = "replay-journal-head:";
/// `step_id` prefix of an artifact *attempt* (a declared output that never landed).
pub const ARTIFACT_ATTEMPT_STEP_PREFIX: &str = "artifact-attempt:";

/// The fields every row must carry.
const REQUIRED_FIELDS: [&str; 10] = [
    "v",
    "prev_hash",
    "artifact_path",
    "content_hash",
    "actor",
    "step_id",
    "model",
    "timestamp",
    "entry_hash",
    "hmac",
];

/// The longest `tracestate` or `baggage` value recorded (the W3C baggage limit).
pub const MAX_TRACE_HEADER_BYTES: usize = 8192;

/// `<project_root>/.sdd/lineage`, unresolved.
pub fn lineage_dir(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join("lineage")
}

/// How a spine's rows and head are serialised for their HMAC (and stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpineHashProfile {
    /// PY-COMPACT-UTF8 (`py-json-v1`), the default.
    PyJsonV1,
    /// RFC 8785 (`jcs-v2`), declared by `spine.head`.
    JcsV2,
}

impl SpineHashProfile {
    /// The profile's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SpineHashProfile::PyJsonV1 => "py-json-v1",
            SpineHashProfile::JcsV2 => "jcs-v2",
        }
    }

    fn from_name(name: &str) -> Option<SpineHashProfile> {
        match name {
            "py-json-v1" => Some(SpineHashProfile::PyJsonV1),
            "jcs-v2" => Some(SpineHashProfile::JcsV2),
            _ => None,
        }
    }

    /// The canonical bytes of `object` in this profile; `None` when JCS cannot encode it.
    fn canonical(self, object: &Object) -> Option<String> {
        let value = Value::Object(object.clone());
        match self {
            SpineHashProfile::PyJsonV1 => Some(value.dumps(Dialect::PY_COMPACT_UTF8)),
            SpineHashProfile::JcsV2 => value.to_jcs().ok(),
        }
    }
}

/// W3C Trace Context from the calling host, recorded on the spine entry so a verifier holding
/// the spine can read the host trace off the artifact's provenance row.
pub use bernstein_protocol::trace::TraceContext;

/// Checks the trace fields' shapes before anything is recorded: `traceparent` must be a W3C
/// trace parent ([`bernstein_protocol::trace::parse_traceparent`]), and `tracestate`/`baggage`
/// must be printable ASCII of at most [`MAX_TRACE_HEADER_BYTES`].
///
/// # Errors
///
/// [`Error::ArtifactInvalid`] naming the field.
pub fn validate_trace(trace: &TraceContext) -> Result<()> {
    if let Some(traceparent) = &trace.traceparent
        && bernstein_protocol::trace::parse_traceparent(traceparent).is_none()
    {
        return Err(Error::ArtifactInvalid {
            reason: format!(
                "traceparent {} is not a W3C traceparent",
                python_str_repr(traceparent)
            ),
        });
    }
    for (name, value) in [
        ("tracestate", &trace.tracestate),
        ("baggage", &trace.baggage),
    ] {
        if let Some(value) = value
            && (value.len() > MAX_TRACE_HEADER_BYTES
                || !value
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..=0x7e).contains(&b)))
        {
            return Err(Error::ArtifactInvalid {
                reason: format!(
                    "{name} must be printable ASCII of at most {MAX_TRACE_HEADER_BYTES} bytes"
                ),
            });
        }
    }
    Ok(())
}

/// Adds the trace fields that are present (even when empty: they were recorded as given) to a
/// spine row or pre-image.
fn insert_trace(trace: &TraceContext, object: &mut Object) {
    for (name, value) in [
        ("traceparent", &trace.traceparent),
        ("tracestate", &trace.tracestate),
        ("baggage", &trace.baggage),
    ] {
        if let Some(value) = value {
            object.insert(name, value.as_str());
        }
    }
}

/// One spine row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpineEntry {
    /// Entry version: 1 (raw key, no domain tag) or 2.
    pub v: i64,
    /// The previous row's `entry_hash` (`""` at genesis).
    pub prev_hash: String,
    /// `run-artifacts/<task_run_id>/<key>/v<N>` for a run artifact.
    pub artifact_path: String,
    /// `sha256:<hex>` of the sealed bytes.
    pub content_hash: String,
    /// Who wrote the artifact.
    pub actor: String,
    /// Cross-link to the originating step (`artifact:<key>:v<N>`).
    pub step_id: String,
    /// Model recorded for provenance (`""` for run artifacts).
    pub model: String,
    /// Integer seconds.
    pub timestamp: i64,
    /// The entry's identity.
    pub entry_hash: String,
    /// The row's HMAC tag (hex, no prefix).
    pub hmac: String,
    /// Host trace context, when one was ingested.
    pub trace: TraceContext,
}

impl SpineEntry {
    /// The HMAC-covered body: every field but `hmac`, in the reference's order.
    pub fn body(&self) -> Object {
        let mut body = Object::new()
            .with("v", self.v)
            .with("prev_hash", self.prev_hash.as_str())
            .with("artifact_path", self.artifact_path.as_str())
            .with("content_hash", self.content_hash.as_str())
            .with("actor", self.actor.as_str())
            .with("step_id", self.step_id.as_str())
            .with("model", self.model.as_str())
            .with("timestamp", self.timestamp)
            .with("entry_hash", self.entry_hash.as_str());
        insert_trace(&self.trace, &mut body);
        body
    }

    /// The stored line (without its newline) in `profile`.
    ///
    /// # Errors
    ///
    /// [`Error::Encode`] when the row has no JCS form.
    pub fn row(&self, profile: SpineHashProfile) -> Result<String> {
        let mut row = self.body();
        row.insert("hmac", self.hmac.as_str());
        profile
            .canonical(&row)
            .ok_or_else(|| Error::Encode("the spine row has no JCS form".to_owned()))
    }

    /// The entry hash the row's own fields recompute to.
    pub fn expected_entry_hash(&self) -> String {
        let mut fields = Object::new()
            .with("prev_hash", self.prev_hash.as_str())
            .with("artifact_path", self.artifact_path.as_str())
            .with("content_hash", self.content_hash.as_str())
            .with("actor", self.actor.as_str())
            .with("step_id", self.step_id.as_str())
            .with("model", self.model.as_str())
            .with("timestamp", self.timestamp);
        insert_trace(&self.trace, &mut fields);
        entry_hash_of(&fields, domain_prefix(self.v))
    }

    /// Whether this entry is intact on its own terms (the reference's `verify_entry`): its
    /// hash recomputes and its legacy-profile HMAC verifies under `key`.
    pub fn verify_standalone(&self, key: &AuditKey) -> bool {
        let Some(tag_key) = tag_key(self.v, key) else {
            return false;
        };
        let Some(body) = SpineHashProfile::PyJsonV1.canonical(&self.body()) else {
            return false;
        };
        constant_time_eq(
            self.entry_hash.as_bytes(),
            self.expected_entry_hash().as_bytes(),
        ) && constant_time_eq(
            self.hmac.as_bytes(),
            hmac_sha256_hex(&tag_key, &[body.as_bytes()]).as_bytes(),
        )
    }
}

fn domain_prefix(version: i64) -> &'static str {
    if version == 2 { LINEAGE_DOMAIN_TAG } else { "" }
}

/// The HMAC key of a row version: the derived lineage key for v2, the raw master for v1.
fn tag_key(version: i64, key: &AuditKey) -> Option<Vec<u8>> {
    match version {
        2 => Some(key.derived(LINEAGE_KEY_DOMAIN).to_vec()),
        1 => Some(key.master().to_vec()),
        _ => None,
    }
}

fn entry_hash_of(fields: &Object, prefix: &str) -> String {
    let preimage = format!(
        "{prefix}{}",
        Value::Object(fields.clone()).dumps(Dialect::PY_COMPACT_UTF8)
    );
    format!("sha256:{}", sha256_hex(preimage.as_bytes()))
}

/// The outcome of a spine verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpineStatus {
    /// The chain is intact and records at least one produced artifact.
    Ok,
    /// There is no row (a distinct status, never a pass).
    NoEntries,
    /// The chain is intact but holds only journal seals and artifact attempts.
    SealOnly,
    /// At least one row fails.
    Tampered,
}

impl SpineStatus {
    /// The reference's status value.
    pub fn as_str(self) -> &'static str {
        match self {
            SpineStatus::Ok => "ok",
            SpineStatus::NoEntries => "no_entries",
            SpineStatus::SealOnly => "seal_only",
            SpineStatus::Tampered => "tampered",
        }
    }
}

/// A spine verification report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpineVerification {
    /// The verdict.
    pub status: SpineStatus,
    /// Rows examined (the reference's `count`).
    pub count: usize,
    /// Every row problem, `line N: …`, in the reference's words plus this crate's byte checks.
    pub errors: Vec<String>,
    /// Problems with the `spine.head` snapshot; informational, they do not change `status`.
    pub head_findings: Vec<String>,
    /// A `spine.head` a post killed after its row left behind: missing although the spine has
    /// rows, or an authentic snapshot of an earlier row (its `head_hash` and `count` name a row
    /// of this spine, and its `hmac` verifies). The next post of the run replaces it. Crash
    /// debris, reported apart from [`SpineVerification::head_findings`].
    pub head_tears: Vec<String>,
    /// The profile rows were checked in.
    pub hash_profile: SpineHashProfile,
    /// The last row's `entry_hash` as stored (`""` when there is none).
    pub last_entry_hash: String,
}

impl SpineVerification {
    /// Only an intact chain that records produced artifacts is ok.
    pub fn ok(&self) -> bool {
        self.status == SpineStatus::Ok
    }

    /// The oracle's `{status, count, errors}` object.
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("status", self.status.as_str())
            .with("count", self.count)
            .with("errors", self.errors.clone())
    }
}

/// Verifies spine bytes (and the head snapshot's bytes, when there is one) under `key`.
pub fn verify_spine_bytes(spine: &[u8], head: Option<&[u8]>, key: &AuditKey) -> SpineVerification {
    let mut report = SpineVerification {
        status: SpineStatus::NoEntries,
        count: 0,
        errors: Vec::new(),
        head_findings: Vec::new(),
        head_tears: Vec::new(),
        hash_profile: SpineHashProfile::PyJsonV1,
        last_entry_hash: String::new(),
    };
    let head_object = head.and_then(|bytes| {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| Value::parse(text).ok())
            .and_then(|value| value.as_object().cloned())
    });
    let body_len = spine.len() - spine.iter().rev().take_while(|b| **b == b'\n').count();
    let body = &spine[..body_len];
    if body.is_empty() {
        return report;
    }
    if let Some(declared) = head_object.as_ref().and_then(|h| h.get("hash_profile")) {
        let name = python_str(declared);
        match SpineHashProfile::from_name(&name) {
            Some(profile) => report.hash_profile = profile,
            None => {
                report.status = SpineStatus::Tampered;
                report
                    .errors
                    .push(format!("unknown hash_profile {}", python_str_repr(&name)));
                return report;
            }
        }
    }
    let profile = report.hash_profile;
    let mut prev_hash = String::new();
    let mut seal_only = true;
    let mut row_hashes = Vec::new();
    for (index, line) in body.split(|b| *b == b'\n').enumerate() {
        let line_no = index + 1;
        report.count += 1;
        let checked = check_row(line, line_no, &prev_hash, profile, key, &mut report.errors);
        if let Some(row) = checked {
            if !row.step_id.starts_with(JOURNAL_SEAL_STEP_PREFIX)
                && !row.step_id.starts_with(ARTIFACT_ATTEMPT_STEP_PREFIX)
            {
                seal_only = false;
            }
            prev_hash = row.entry_hash;
        }
        row_hashes.push(prev_hash.clone());
    }
    // The writer ends every row with exactly one newline; anything else was edited.
    let trailing = spine.len() - body_len;
    if trailing == 0 {
        report.errors.push("missing trailing newline".to_owned());
    } else if trailing > 1 {
        report
            .errors
            .push(format!("{} blank line(s) after the last row", trailing - 1));
    }
    report.last_entry_hash = last_entry_hash(body);
    let findings = head_findings(head, head_object.as_ref(), &report, profile, key);
    if stale_head(head, head_object.as_ref(), &findings, &row_hashes) {
        report.head_tears = findings;
    } else {
        report.head_findings = findings;
    }
    report.status = if !report.errors.is_empty() {
        SpineStatus::Tampered
    } else if seal_only {
        SpineStatus::SealOnly
    } else {
        SpineStatus::Ok
    };
    report
}

/// What the chain walk needs from a row that got far enough to be hashed.
struct CheckedRow {
    entry_hash: String,
    step_id: String,
}

/// Checks one row, appending its problems to `errors`; `Some` when the row was hashable (the
/// reference then continues the chain from its stored `entry_hash`).
fn check_row(
    line: &[u8],
    line_no: usize,
    prev_hash: &str,
    profile: SpineHashProfile,
    key: &AuditKey,
    errors: &mut Vec<String>,
) -> Option<CheckedRow> {
    let parsed = std::str::from_utf8(line)
        .ok()
        .and_then(|text| Value::parse(text).ok());
    let Some(parsed) = parsed else {
        errors.push(format!("line {line_no}: malformed JSON"));
        return None;
    };
    let Some(row) = parsed.as_object() else {
        errors.push(format!("line {line_no}: row is not an object"));
        return None;
    };
    let mut missing: Vec<&str> = REQUIRED_FIELDS
        .iter()
        .copied()
        .filter(|field| !row.contains_key(field))
        .collect();
    if !missing.is_empty() {
        missing.sort_unstable();
        let listed: Vec<String> = missing.iter().map(|f| python_str_repr(f)).collect();
        errors.push(format!(
            "line {line_no}: missing fields [{}]",
            listed.join(", ")
        ));
        return None;
    }
    let field = |name: &str| row.get(name).map(python_str).unwrap_or_default();
    let version_value = row.get("v").cloned().unwrap_or(Value::Null);
    let Some(version) = scheme_version(&version_value) else {
        errors.push(format!(
            "line {line_no}: unsupported entry version {}",
            python_repr(&version_value)
        ));
        return None;
    };
    let stored_prev = row.get("prev_hash");
    if stored_prev.and_then(Value::as_str) != Some(prev_hash) {
        let shown = |text: &str| python_str_repr(&text.chars().take(16).collect::<String>());
        errors.push(format!(
            "line {line_no}: prev_hash break (expected {}, got {})",
            shown(prev_hash),
            shown(&field("prev_hash"))
        ));
    }
    let timestamp = row.get("timestamp").and_then(python_int);
    let Some(timestamp) = timestamp else {
        errors.push(format!("line {line_no}: unhashable field types"));
        return None;
    };
    let mut fields = Object::new()
        .with("prev_hash", field("prev_hash"))
        .with("artifact_path", field("artifact_path"))
        .with("content_hash", field("content_hash"))
        .with("actor", field("actor"))
        .with("step_id", field("step_id"))
        .with("model", field("model"))
        .with("timestamp", Value::Int(timestamp));
    for name in ["traceparent", "tracestate", "baggage"] {
        match row.get(name) {
            None | Some(Value::Null) => {}
            Some(value) => fields.insert(name, value.clone()),
        }
    }
    let stored_hash = field("entry_hash");
    let expected_hash = entry_hash_of(&fields, domain_prefix(version));
    if !constant_time_eq(stored_hash.as_bytes(), expected_hash.as_bytes()) {
        errors.push(format!("line {line_no}: entry_hash mismatch"));
    }
    let mut body = row.clone();
    body.remove("hmac");
    let tag_ok = match (tag_key(version, key), profile.canonical(&body)) {
        (Some(tag_key), Some(bytes)) => constant_time_eq(
            field("hmac").as_bytes(),
            hmac_sha256_hex(&tag_key, &[bytes.as_bytes()]).as_bytes(),
        ),
        _ => false,
    };
    if !tag_ok {
        errors.push(format!("line {line_no}: hmac mismatch"));
    }
    if profile.canonical(row).as_deref().map(str::as_bytes) != Some(line) {
        errors.push(format!("line {line_no}: non-canonical row bytes"));
    }
    Some(CheckedRow {
        entry_hash: stored_hash,
        step_id: field("step_id"),
    })
}

/// The scheme a row's `v` selects under Python `==` (`True == 1`, `2.0 == 2`), if supported.
fn scheme_version(value: &Value) -> Option<i64> {
    match value {
        Value::Bool(true) => Some(1),
        Value::Int(i) => i.as_i64().filter(|v| *v == 1 || *v == 2),
        Value::Float(x) if *x == 1.0 => Some(1),
        Value::Float(x) if *x == 2.0 => Some(2),
        _ => None,
    }
}

/// The stored `entry_hash` of the last row, as the reference's `_read_head` reads it.
fn last_entry_hash(body: &[u8]) -> String {
    body.rsplit(|b| *b == b'\n')
        .next()
        .and_then(|line| std::str::from_utf8(line).ok())
        .and_then(|text| Value::parse(text).ok())
        .and_then(|value| {
            value
                .as_object()
                .and_then(|row| row.get("entry_hash"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

/// Whether the head `findings` describe nothing but a head a killed post left behind: no head
/// file at all for a spine with rows, or a head whose only faults are that it names an earlier
/// row of this spine (by `head_hash`, with the matching `count`) with a valid `hmac`.
fn stale_head(
    head: Option<&[u8]>,
    head_object: Option<&Object>,
    findings: &[String],
    row_hashes: &[String],
) -> bool {
    if findings.is_empty() {
        return false;
    }
    let Some(object) = head_object else {
        return head.is_none() && !row_hashes.is_empty();
    };
    if findings.iter().any(|f| f == "spine.head hmac mismatch") {
        return false;
    }
    let stored_head = object.get("head_hash").map(python_str).unwrap_or_default();
    let count = object
        .get("count")
        .and_then(Value::as_i64)
        .and_then(|c| usize::try_from(c).ok());
    count.is_some_and(|count| {
        count >= 1
            && count < row_hashes.len()
            && row_hashes[count - 1] == stored_head
            && !stored_head.is_empty()
    })
}

fn head_findings(
    head: Option<&[u8]>,
    head_object: Option<&Object>,
    report: &SpineVerification,
    profile: SpineHashProfile,
    key: &AuditKey,
) -> Vec<String> {
    let mut findings = Vec::new();
    let Some(object) = head_object else {
        findings.push(if head.is_some() {
            "spine.head is not a JSON object".to_owned()
        } else {
            "spine.head is missing".to_owned()
        });
        return findings;
    };
    let stored_head = object.get("head_hash").map(python_str).unwrap_or_default();
    if stored_head != report.last_entry_hash {
        findings.push(format!(
            "spine.head names head {stored_head:?}, the last row's entry_hash is {:?}",
            report.last_entry_hash
        ));
    }
    let count = object.get("count").and_then(Value::as_i64);
    if count.and_then(|c| usize::try_from(c).ok()) != Some(report.count) {
        findings.push(format!(
            "spine.head counts {} row(s), the spine has {}",
            object
                .get("count")
                .map(python_repr)
                .unwrap_or_else(|| "None".to_owned()),
            report.count
        ));
    }
    let mut body = object.clone();
    body.remove("hmac");
    let expected = profile
        .canonical(&body)
        .map(|bytes| hmac_sha256_hex(&key.derived(LINEAGE_KEY_DOMAIN), &[bytes.as_bytes()]));
    let stored = object.get("hmac").map(python_str).unwrap_or_default();
    if expected.is_none_or(|tag| !constant_time_eq(tag.as_bytes(), stored.as_bytes())) {
        findings.push("spine.head hmac mismatch".to_owned());
    }
    findings
}

/// A new row to append.
#[derive(Debug, Clone)]
pub struct NewSpineEntry<'a> {
    /// Repo-relative POSIX path or run-artifact path of what is sealed.
    pub artifact_path: &'a str,
    /// The sealed bytes (hashed into `content_hash`).
    pub content: &'a [u8],
    /// Who wrote them.
    pub actor: &'a str,
    /// Cross-link to the originating step.
    pub step_id: &'a str,
    /// Model recorded for provenance.
    pub model: &'a str,
    /// Integer seconds.
    pub timestamp: i64,
    /// Host trace context.
    pub trace: &'a TraceContext,
}

/// The reference's artifact-key check for repo-relative paths: non-empty, not absolute (POSIX
/// or drive-prefixed), and no `..` segment (with `\` read as a separator). Artifact URIs
/// (`scheme://…`) are refused: this writer records repo paths only.
pub(crate) fn artifact_path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("empty artifact_path");
    }
    if path.contains("://") {
        return Some("artifact URIs are not supported by this writer");
    }
    let bytes = path.as_bytes();
    if path.starts_with('/') || (path.chars().count() > 2 && bytes.get(1..3) == Some(b":\\")) {
        return Some("absolute artifact_path not allowed");
    }
    if path
        .replace('\\', "/")
        .split('/')
        .any(|segment| segment == "..")
    {
        return Some("path traversal in artifact_path");
    }
    None
}

/// The reference's spine run-id rules: non-empty, no separator, not a parent reference, no NUL.
fn validate_spine_run_id(run_id: &str) -> Result<()> {
    let refuse = |reason: &'static str| {
        Err(Error::InvalidRunId {
            id: run_id.to_owned(),
            reason,
        })
    };
    if run_id.is_empty() {
        return refuse("must not be empty");
    }
    if run_id.contains('/') || run_id.contains('\\') {
        return refuse("contains a path separator");
    }
    if run_id == "." || run_id.starts_with("..") {
        return refuse("resolves to a parent path");
    }
    if run_id.contains('\0') {
        return refuse("contains a NUL byte");
    }
    Ok(())
}

/// An exclusive hold on a spine's `.spine.lock`; released when dropped.
#[derive(Debug)]
pub struct SpineLock {
    _file: File,
}

/// What a locked spine looks like before an append.
#[derive(Debug, Clone)]
pub(crate) struct SpineTail {
    pub(crate) prev_hash: String,
    pub(crate) count: usize,
    pub(crate) profile: SpineHashProfile,
}

/// One run's spine under `<project_root>/.sdd/lineage/<run_id>/`.
#[derive(Debug, Clone)]
pub struct LineageSpine {
    project_root: PathBuf,
    run_id: String,
    key: AuditKey,
}

impl LineageSpine {
    /// The spine of `run_id`, tagged with keys derived from `key`. Opening does no IO.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRunId`] for an id that would leave its directory.
    pub fn open(project_root: &Path, run_id: &str, key: &AuditKey) -> Result<LineageSpine> {
        validate_spine_run_id(run_id)?;
        Ok(LineageSpine {
            project_root: project_root.to_path_buf(),
            run_id: run_id.to_owned(),
            key: key.clone(),
        })
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The containment-checked path of `name` inside the run's lineage directory.
    ///
    /// # Errors
    ///
    /// [`Error::Containment`] when it resolves outside `.sdd/lineage`.
    pub fn file(&self, name: &str) -> Result<PathBuf> {
        contained_path(
            &self.project_root,
            &lineage_dir(&self.project_root),
            &[&self.run_id, name],
        )
    }

    fn read_optional(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let path = self.file(name)?;
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
            Err(err) => Err(Error::io("read", &path, err)),
        }
    }

    /// Verifies the spine (a missing file has no entries).
    ///
    /// # Errors
    ///
    /// [`Error::Containment`], or [`Error::Io`] when a file exists but cannot be read.
    pub fn verify(&self) -> Result<SpineVerification> {
        let spine = self.read_optional(SPINE_FILE_NAME)?.unwrap_or_default();
        let head = self.read_optional(SPINE_HEAD_FILE_NAME)?;
        Ok(verify_spine_bytes(&spine, head.as_deref(), &self.key))
    }

    /// Every row that parses with the required shape, in file order (the reference's
    /// `iter_entries`: malformed rows are skipped; [`LineageSpine::verify`] reports them).
    ///
    /// # Errors
    ///
    /// As [`LineageSpine::verify`].
    pub fn entries(&self) -> Result<Vec<SpineEntry>> {
        let spine = self.read_optional(SPINE_FILE_NAME)?.unwrap_or_default();
        Ok(parse_entries(&spine))
    }

    /// Takes the cross-process append lock, creating the run directory and the lock file.
    ///
    /// # Errors
    ///
    /// [`Error::Containment`] or [`Error::Io`].
    pub fn lock(&self) -> Result<SpineLock> {
        let lock_path = self.file(SPINE_LOCK_FILE_NAME)?;
        let dir = parent_of(&lock_path)?;
        create_dir_all_durable(&dir).map_err(|err| Error::io("create", &dir, err))?;
        let lock_path = self.file(SPINE_LOCK_FILE_NAME)?;
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&lock_path)
            .map_err(|err| Error::io("open", &lock_path, err))?;
        file.lock()
            .map_err(|err| Error::io("lock", &lock_path, err))?;
        Ok(SpineLock { _file: file })
    }

    /// Appends one row under the lock and returns it.
    ///
    /// # Errors
    ///
    /// [`Error::ArtifactInvalid`] for an unsafe artifact path or trace context;
    /// [`Error::EvidenceUnusable`] when the spine does not verify (a torn last row is recorded and
    /// cut instead);
    /// [`Error::Containment`] or [`Error::Io`].
    pub fn append(&self, entry: &NewSpineEntry<'_>) -> Result<SpineEntry> {
        check_new_entry(entry)?;
        let lock = self.lock()?;
        let tail = self.tail()?;
        self.append_locked(&lock, &tail, entry)
    }

    /// Reads the chain position for an append, refusing a spine that cannot be extended. A torn
    /// last row (no newline) is left out: it was never acknowledged, and the append cuts it
    /// under the lock before writing.
    pub(crate) fn tail(&self) -> Result<SpineTail> {
        let spine_path = self.file(SPINE_FILE_NAME)?;
        let mut spine = self.read_optional(SPINE_FILE_NAME)?.unwrap_or_default();
        let head = self.read_optional(SPINE_HEAD_FILE_NAME)?;
        let unusable = |reason: String| Error::EvidenceUnusable {
            path: spine_path.clone(),
            reason,
        };
        let complete = spine
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        spine.truncate(complete);
        let verification = verify_spine_bytes(&spine, head.as_deref(), &self.key);
        if verification.status == SpineStatus::Tampered {
            return Err(unusable(format!(
                "the spine does not verify: {}",
                verification.errors.join("; ")
            )));
        }
        Ok(SpineTail {
            prev_hash: verification.last_entry_hash,
            count: verification.count,
            profile: verification.hash_profile,
        })
    }

    /// Writes one row chained onto `tail`; the caller holds the lock and checked the entry.
    pub(crate) fn append_locked(
        &self,
        _lock: &SpineLock,
        tail: &SpineTail,
        new: &NewSpineEntry<'_>,
    ) -> Result<SpineEntry> {
        let mut entry = SpineEntry {
            v: SPINE_ENTRY_VERSION,
            prev_hash: tail.prev_hash.clone(),
            artifact_path: new.artifact_path.to_owned(),
            content_hash: content_address(new.content),
            actor: new.actor.to_owned(),
            step_id: new.step_id.to_owned(),
            model: new.model.to_owned(),
            timestamp: new.timestamp,
            entry_hash: String::new(),
            hmac: String::new(),
            trace: new.trace.clone(),
        };
        entry.entry_hash = entry.expected_entry_hash();
        let body = tail
            .profile
            .canonical(&entry.body())
            .ok_or_else(|| Error::Encode("the spine row has no JCS form".to_owned()))?;
        entry.hmac = hmac_sha256_hex(&self.key.derived(LINEAGE_KEY_DOMAIN), &[body.as_bytes()]);
        let mut line = entry.row(tail.profile)?;
        line.push('\n');

        let spine_path = self.file(SPINE_FILE_NAME)?;
        let dir = parent_of(&spine_path)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&spine_path)
            .map_err(|err| Error::io("open", &spine_path, err))?;
        // `tail` left a torn last row out; cut it (recorded) so the row lands on a fresh line.
        recover_torn_tail(&self.project_root, &mut file, &spine_path)?;
        let old_len = file
            .metadata()
            .map_err(|err| Error::io("stat", &spine_path, err))?
            .len();
        // One write(2) on an O_APPEND descriptor, then fsync before the head moves.
        append_durably(&mut file, old_len, line.as_bytes())
            .map_err(|err| Error::io("append to", &spine_path, err))?;
        ensure_entry_durable(&spine_path).map_err(|err| Error::io("fsync", &dir, err))?;
        self.write_head(&dir, &entry.entry_hash, tail.count + 1, tail.profile)?;
        Ok(entry)
    }

    fn write_head(
        &self,
        dir: &Path,
        head_hash: &str,
        count: usize,
        profile: SpineHashProfile,
    ) -> Result<()> {
        let mut body = Object::new()
            .with("head_hash", head_hash)
            .with("count", count);
        if profile != SpineHashProfile::PyJsonV1 {
            body.insert("hash_profile", profile.as_str());
        }
        let canonical = profile
            .canonical(&body)
            .ok_or_else(|| Error::Encode("the spine head has no JCS form".to_owned()))?;
        body.insert(
            "hmac",
            hmac_sha256_hex(
                &self.key.derived(LINEAGE_KEY_DOMAIN),
                &[canonical.as_bytes()],
            ),
        );
        let text = Value::Object(body).dumps(Dialect::PY_COMPACT_UTF8);
        let head_path = self.file(SPINE_HEAD_FILE_NAME)?;
        write_atomically(dir, &head_path, text.as_bytes())
    }
}

/// Checks what a caller supplies for a new row.
pub(crate) fn check_new_entry(entry: &NewSpineEntry<'_>) -> Result<()> {
    if let Some(problem) = artifact_path_problem(entry.artifact_path) {
        return Err(Error::ArtifactInvalid {
            reason: format!("{problem}: {}", python_str_repr(entry.artifact_path)),
        });
    }
    validate_trace(entry.trace)
}

fn parent_of(path: &Path) -> Result<PathBuf> {
    path.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::Containment {
            path: path.to_path_buf(),
            reason: "the path has no parent directory".to_owned(),
        })
}

/// The tolerant reader: rows with the required fields and convertible types.
pub(crate) fn parse_entries(spine: &[u8]) -> Vec<SpineEntry> {
    let body_len = spine.len() - spine.iter().rev().take_while(|b| **b == b'\n').count();
    let body = &spine[..body_len];
    if body.is_empty() {
        return Vec::new();
    }
    body.split(|b| *b == b'\n')
        .filter_map(|line| {
            let value = Value::parse(std::str::from_utf8(line).ok()?).ok()?;
            let row = value.as_object()?;
            if REQUIRED_FIELDS.iter().any(|f| !row.contains_key(f)) {
                return None;
            }
            let text = |name: &str| row.get(name).map(python_str).unwrap_or_default();
            let trace = |name: &str| match row.get(name) {
                None | Some(Value::Null) => None,
                Some(value) => Some(python_str(value)),
            };
            Some(SpineEntry {
                v: python_int(row.get("v")?)?.as_i64()?,
                prev_hash: text("prev_hash"),
                artifact_path: text("artifact_path"),
                content_hash: text("content_hash"),
                actor: text("actor"),
                step_id: text("step_id"),
                model: text("model"),
                timestamp: python_int(row.get("timestamp")?)?.as_i64()?,
                entry_hash: text("entry_hash"),
                hmac: text("hmac"),
                trace: TraceContext {
                    traceparent: trace("traceparent"),
                    tracestate: trace("tracestate"),
                    baggage: trace("baggage"),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AuditKey {
        AuditKey::from_master_bytes(
            b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_vec(),
        )
    }

    fn append(spine: &LineageSpine, step: &str, trace: &TraceContext) -> SpineEntry {
        spine
            .append(&NewSpineEntry {
                artifact_path: "run-artifacts/task-t/k/v1",
                content: step.as_bytes(),
                actor: "worker",
                step_id: step,
                model: "",
                timestamp: 1_780_000_700,
                trace,
            })
            .unwrap()
    }

    #[test]
    fn appended_rows_chain_verify_and_carry_the_trace() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "task-t", &key()).unwrap();
        assert_eq!(spine.verify().unwrap().status, SpineStatus::NoEntries);
        let first = append(&spine, "artifact:k:v1", &TraceContext::default());
        let trace = TraceContext {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: Some("rojo=00f067aa0ba902b7".into()),
            baggage: Some("user=caf%C3%A9".into()),
        };
        let second = append(&spine, "artifact:k:v2", &trace);
        assert_eq!(second.prev_hash, first.entry_hash);
        let report = spine.verify().unwrap();
        assert_eq!(report.status, SpineStatus::Ok, "{report:?}");
        assert!(report.head_findings.is_empty(), "{report:?}");
        let stored = spine.entries().unwrap();
        assert_eq!(stored, vec![first, second.clone()]);
        assert!(second.verify_standalone(&key()));
        let text = fs::read_to_string(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        assert!(text.contains(
            "\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\""
        ));
        assert!(spine.file(SPINE_LOCK_FILE_NAME).unwrap().exists());
        assert_eq!(spine.run_id(), "task-t");
    }

    #[test]
    fn the_tolerant_reader_keeps_a_last_row_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        let first = append(&spine, "artifact:k:v1", &TraceContext::default());
        let second = append(&spine, "artifact:k:v2", &TraceContext::default());
        let written = fs::read_to_string(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        let check = |spine: &str, expect: &[&SpineEntry]| {
            let parsed = parse_entries(spine.as_bytes());
            assert_eq!(parsed.iter().collect::<Vec<_>>(), expect, "{spine:?}");
        };
        check(&written, &[&first, &second]);
        check(&format!("{written}\n\n"), &[&first, &second]);
        // The reference's `iter_entries` parses a complete row whatever follows it.
        check(written.trim_end_matches('\n'), &[&first, &second]);
        check(&format!("{written}{{\"v\":2,"), &[&first, &second]);
        check("", &[]);
    }

    #[test]
    fn a_spine_that_cannot_be_read_is_an_error_not_an_empty_spine() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        // A directory where the spine file belongs: it exists, and reading it fails.
        fs::create_dir_all(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        assert!(matches!(spine.verify(), Err(Error::Io { .. })));
        assert!(matches!(spine.entries(), Err(Error::Io { .. })));
    }

    #[test]
    fn seal_only_spines_are_not_ok() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        append(&spine, "replay-journal-head:run", &TraceContext::default());
        append(&spine, "artifact-attempt:t", &TraceContext::default());
        let report = spine.verify().unwrap();
        assert_eq!(report.status, SpineStatus::SealOnly);
        // An intact chain without a produced artifact is still no pass.
        assert!(!report.ok());
    }

    /// Writes the first row of a spine in `profile`, as a writer that declared the profile in
    /// `spine.head` would, through the same locked append every post uses.
    fn append_first_row_in(spine: &LineageSpine, profile: SpineHashProfile) -> SpineEntry {
        let lock = spine.lock().unwrap();
        let tail = SpineTail {
            prev_hash: String::new(),
            count: 0,
            profile,
        };
        spine
            .append_locked(
                &lock,
                &tail,
                &NewSpineEntry {
                    artifact_path: "run-artifacts/task-t/k/v1",
                    content: b"first",
                    actor: "worker",
                    step_id: "artifact:k:v1",
                    model: "",
                    timestamp: 1_780_000_700,
                    trace: &TraceContext::default(),
                },
            )
            .unwrap()
    }

    #[test]
    fn a_jcs_spine_declares_its_profile_in_the_head_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        let first = append_first_row_in(&spine, SpineHashProfile::JcsV2);
        let head_path = spine.file(SPINE_HEAD_FILE_NAME).unwrap();
        let head = fs::read_to_string(&head_path).unwrap();
        assert!(head.contains("\"hash_profile\":\"jcs-v2\""), "{head}");
        let report = spine.verify().unwrap();
        assert_eq!(report.status, SpineStatus::Ok, "{report:?}");
        assert_eq!(report.hash_profile, SpineHashProfile::JcsV2);
        assert!(report.head_findings.is_empty(), "{report:?}");

        // The next append reads the profile from the head and declares it again.
        let second = append(&spine, "artifact:k:v2", &TraceContext::default());
        assert_eq!(second.prev_hash, first.entry_hash);
        let head = fs::read_to_string(&head_path).unwrap();
        assert!(head.contains("\"hash_profile\":\"jcs-v2\""), "{head}");
        let report = spine.verify().unwrap();
        assert_eq!(
            (report.status, report.count),
            (SpineStatus::Ok, 2),
            "{report:?}"
        );
        assert!(report.head_findings.is_empty(), "{report:?}");
    }

    #[test]
    fn the_head_names_either_profile_and_nothing_else() {
        // A py-json-v1 row and a head naming a profile (its hmac is not checked here: head
        // findings do not change the status, the profile does).
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        append(&spine, "artifact:k:v1", &TraceContext::default());
        let rows = fs::read(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        let check = |declared: &str, expect: Option<SpineHashProfile>| {
            let head = format!("{{\"hash_profile\":\"{declared}\"}}");
            let report = verify_spine_bytes(&rows, Some(head.as_bytes()), &key());
            match expect {
                Some(profile) => {
                    assert_eq!(report.status, SpineStatus::Ok, "{declared}: {report:?}");
                    assert_eq!(report.hash_profile, profile, "{declared}");
                }
                None => assert_eq!(
                    report.errors,
                    vec![format!("unknown hash_profile '{declared}'")]
                ),
            }
        };
        check("py-json-v1", Some(SpineHashProfile::PyJsonV1));
        check("jcs-v2", Some(SpineHashProfile::JcsV2));
        check("", None);
        check("jcs-v1", None);
    }

    #[test]
    fn trace_headers_may_fill_the_baggage_limit_and_no_more() {
        let check = |len: usize, ok: bool| {
            for trace in [
                TraceContext {
                    tracestate: Some("a".repeat(len)),
                    ..TraceContext::default()
                },
                TraceContext {
                    baggage: Some("a".repeat(len)),
                    ..TraceContext::default()
                },
            ] {
                assert_eq!(validate_trace(&trace).is_ok(), ok, "{len}: {trace:?}");
            }
        };
        check(0, true);
        check(MAX_TRACE_HEADER_BYTES - 1, true);
        check(MAX_TRACE_HEADER_BYTES, true);
        check(MAX_TRACE_HEADER_BYTES + 1, false);
    }

    #[test]
    fn a_standalone_entry_needs_both_its_hash_and_its_hmac() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        let entry = append(&spine, "artifact:k:v1", &TraceContext::default());
        let check = |edit: &dyn Fn(&mut SpineEntry), expect: bool| {
            let mut edited = entry.clone();
            edit(&mut edited);
            assert_eq!(edited.verify_standalone(&key()), expect, "{edited:?}");
        };
        check(&|_| {}, true);
        // A stored hash that does not recompute, under an hmac that tags the edited body.
        check(
            &|e| {
                e.entry_hash = format!("sha256:{}", "0".repeat(64));
                let body = SpineHashProfile::PyJsonV1.canonical(&e.body()).unwrap();
                e.hmac = hmac_sha256_hex(&key().derived(LINEAGE_KEY_DOMAIN), &[body.as_bytes()]);
            },
            false,
        );
        // A stored hmac that is not the body's tag, over a hash that recomputes.
        check(&|e| e.hmac = "0".repeat(64), false);
        // A version with no key at all.
        check(&|e| e.v = 3, false);
        // The same row under another key.
        let other = AuditKey::from_master_bytes(b"another master key".to_vec());
        assert!(!entry.verify_standalone(&other));
    }

    #[test]
    fn a_tampered_spine_refuses_appends() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        append(&spine, "artifact:k:v1", &TraceContext::default());
        let path = spine.file(SPINE_FILE_NAME).unwrap();
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace("worker", "mallor");
        fs::write(&path, &text).unwrap();
        let report = spine.verify().unwrap();
        assert_eq!(report.status, SpineStatus::Tampered);
        assert_eq!(
            report.errors,
            vec!["line 1: entry_hash mismatch", "line 1: hmac mismatch"]
        );
        let err = spine
            .append(&NewSpineEntry {
                artifact_path: "a",
                content: b"x",
                actor: "w",
                step_id: "s",
                model: "",
                timestamp: 1,
                trace: &TraceContext::default(),
            })
            .unwrap_err();
        assert!(matches!(err, Error::EvidenceUnusable { .. }), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
    }

    #[test]
    fn verify_reports_every_line_with_the_reference_texts() {
        let check = |spine: &str, expect: &[&str]| {
            let report = verify_spine_bytes(spine.as_bytes(), None, &key());
            assert_eq!(report.errors, expect, "{spine:?}");
        };
        check("x\n", &["line 1: malformed JSON"]);
        check("[1]\n", &["line 1: row is not an object"]);
        check(
            "{\"actor\":\"a\"}\n",
            &[
                "line 1: missing fields ['artifact_path', 'content_hash', 'entry_hash', 'hmac', 'model', 'prev_hash', 'step_id', 'timestamp', 'v']",
            ],
        );
        check(
            "{\"actor\":\"a\",\"artifact_path\":\"p\",\"content_hash\":\"c\",\"entry_hash\":\"e\",\"hmac\":\"h\",\"model\":\"\",\"prev_hash\":\"\",\"step_id\":\"s\",\"timestamp\":1,\"v\":3}\n",
            &["line 1: unsupported entry version 3"],
        );
        check(
            "{\"actor\":\"a\",\"artifact_path\":\"p\",\"content_hash\":\"c\",\"entry_hash\":\"e\",\"hmac\":\"h\",\"model\":\"\",\"prev_hash\":\"sha256:0123456789abcdef\",\"step_id\":\"s\",\"timestamp\":null,\"v\":2}",
            &[
                "line 1: prev_hash break (expected '', got 'sha256:012345678')",
                "line 1: unhashable field types",
                "missing trailing newline",
            ],
        );
    }

    #[test]
    fn the_file_must_end_with_exactly_one_newline() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        append(&spine, "artifact:k:v1", &TraceContext::default());
        let written = fs::read_to_string(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        let row = written.trim_end_matches('\n');
        let check = |ending: &str, expect: &[&str]| {
            let spine = format!("{row}{ending}");
            let report = verify_spine_bytes(spine.as_bytes(), None, &key());
            assert_eq!(report.errors, expect, "{ending:?}");
        };
        check("\n", &[]);
        check("", &["missing trailing newline"]);
        check("\n\n", &["1 blank line(s) after the last row"]);
        check("\n\n\n", &["2 blank line(s) after the last row"]);
    }

    /// A genesis row whose `v` member is `v`, hashed and tagged as scheme `scheme` would be.
    fn row_with_version(v: Value, scheme: i64) -> String {
        let fields = Object::new()
            .with("prev_hash", "")
            .with("artifact_path", "src/a.py")
            .with("content_hash", content_address(b"a"))
            .with("actor", "worker")
            .with("step_id", "write:1")
            .with("model", "")
            .with("timestamp", 1_700_000_000);
        let mut row = fields.clone();
        row.insert("v", v);
        row.insert("entry_hash", entry_hash_of(&fields, domain_prefix(scheme)));
        let body = SpineHashProfile::PyJsonV1.canonical(&row).unwrap();
        let tag_key = tag_key(scheme, &key()).unwrap();
        row.insert("hmac", hmac_sha256_hex(&tag_key, &[body.as_bytes()]));
        format!("{}\n", SpineHashProfile::PyJsonV1.canonical(&row).unwrap())
    }

    #[test]
    fn the_row_version_selects_its_scheme_by_python_equality() {
        // The reference compares `v` with `==`, so `True` and `1.0` are version 1 and `2.0` is
        // version 2; a row tagged under the wrong scheme fails its hash and hmac.
        let check = |v: Value, scheme: i64, expect: &[&str]| {
            let row = row_with_version(v.clone(), scheme);
            let report = verify_spine_bytes(row.as_bytes(), None, &key());
            assert_eq!(report.errors, expect, "{row}");
        };
        check(Value::from(1), 1, &[]);
        check(Value::from(2), 2, &[]);
        check(Value::from(true), 1, &[]);
        check(Value::from(1.0), 1, &[]);
        check(Value::from(2.0), 2, &[]);
        check(
            Value::from(2.0),
            1,
            &["line 1: entry_hash mismatch", "line 1: hmac mismatch"],
        );
        check(
            Value::from(false),
            1,
            &["line 1: unsupported entry version False"],
        );
        check(
            Value::from(3.0),
            2,
            &["line 1: unsupported entry version 3.0"],
        );
        check(Value::from(0), 2, &["line 1: unsupported entry version 0"]);
    }

    /// A `spine.head` over `count` and `head_hash` whose hmac verifies under the test key.
    fn signed_head(count: usize, head_hash: &str) -> String {
        let body = Object::new()
            .with("head_hash", head_hash)
            .with("count", count);
        let canonical = SpineHashProfile::PyJsonV1.canonical(&body).unwrap();
        let hmac = hmac_sha256_hex(&key().derived(LINEAGE_KEY_DOMAIN), &[canonical.as_bytes()]);
        Value::Object(body.with("hmac", hmac)).dumps(Dialect::PY_COMPACT_UTF8)
    }

    #[test]
    fn only_an_authentic_head_of_an_earlier_row_is_a_tear() {
        let dir = tempfile::tempdir().unwrap();
        let spine = LineageSpine::open(dir.path(), "run", &key()).unwrap();
        let first = append(&spine, "artifact:k:v1", &TraceContext::default());
        let second = append(&spine, "artifact:k:v2", &TraceContext::default());
        let rows = fs::read_to_string(spine.file(SPINE_FILE_NAME).unwrap()).unwrap();
        // Each case: spine bytes, head bytes, and whether the head's findings are a tear (crash
        // debris) or head findings; `None` when the head has no finding at all.
        let check = |spine: &str, head: Option<&str>, tear: Option<bool>| {
            let report = verify_spine_bytes(spine.as_bytes(), head.map(str::as_bytes), &key());
            let (findings, tears) = (&report.head_findings, &report.head_tears);
            match tear {
                None => assert!(
                    findings.is_empty() && tears.is_empty(),
                    "{head:?}: {report:?}"
                ),
                Some(true) => assert!(
                    findings.is_empty() && !tears.is_empty(),
                    "{head:?}: {report:?}"
                ),
                Some(false) => assert!(
                    !findings.is_empty() && tears.is_empty(),
                    "{head:?}: {report:?}"
                ),
            }
        };
        check(&rows, Some(&signed_head(2, &second.entry_hash)), None);
        // What a post killed before its head moved leaves: no head, or the previous one.
        check(&rows, None, Some(true));
        check(&rows, Some(&signed_head(1, &first.entry_hash)), Some(true));
        // A head file that does not parse is no snapshot of anything.
        check(&rows, Some("garbage"), Some(false));
        // Authentic heads that name no earlier row of this spine.
        check(&rows, Some(&signed_head(1, "sha256:other")), Some(false));
        check(
            &rows,
            Some(&signed_head(1, &second.entry_hash)),
            Some(false),
        );
        check(&rows, Some(&signed_head(0, "")), Some(false));
        // A head counting every row is not behind, even when the last row does not parse and
        // the head names the row before it.
        let broken_last = format!("{}\ngarbage\n", rows.lines().next().unwrap());
        check(
            &broken_last,
            Some(&signed_head(2, &first.entry_hash)),
            Some(false),
        );
    }

    #[test]
    fn unknown_hash_profile_in_the_head_is_tampering() {
        let report = verify_spine_bytes(b"{}\n", Some(b"{\"hash_profile\":\"x\"}"), &key());
        assert_eq!(report.status, SpineStatus::Tampered);
        assert_eq!(report.errors, vec!["unknown hash_profile 'x'"]);
    }

    #[test]
    fn unsafe_paths_run_ids_and_traces_are_refused() {
        for path in ["", "/etc/passwd", "C:\\x", "a/../b", "a\\..\\b", "pr://x/1"] {
            assert!(artifact_path_problem(path).is_some(), "{path:?}");
        }
        assert_eq!(artifact_path_problem("src/app.py"), None);
        for run_id in ["", "a/b", "..", "..x", ".", "a\0"] {
            assert!(
                LineageSpine::open(Path::new("/tmp"), run_id, &key()).is_err(),
                "{run_id:?}"
            );
        }
        let bad = |traceparent: &str| TraceContext {
            traceparent: Some(traceparent.into()),
            ..TraceContext::default()
        };
        for traceparent in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "garbage",
        ] {
            assert!(validate_trace(&bad(traceparent)).is_err(), "{traceparent}");
        }
        assert!(
            validate_trace(&bad(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"
            ))
            .is_ok()
        );
        let control = TraceContext {
            baggage: Some("a=\n".into()),
            ..TraceContext::default()
        };
        assert!(validate_trace(&control).is_err());
    }
}
