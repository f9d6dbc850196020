//! Posting one artifact version (`bernstein_post_artifact`, FORMATS §6.1).
//!
//! A post writes, in order: the content blob, a spine entry (`run-artifacts/<run>/<key>/v<N>`,
//! `artifact:<key>:v<N>`, model `""`, integer-second timestamp, the host trace context when
//! given), an `artifact_posted` row in `.sdd/runs/task-<slug>/journal.jsonl`, and a
//! `run.artifact` audit event. The result is the reference's record plus `verified`,
//! `verify_reason` and the decoded `content`.
//!
//! Where the reference writes the blob and the spine entry and only then discovers that the
//! task journal cannot be resumed, this post validates everything first — the caller's claim,
//! the ids, the content, the trace context, the journal (sound chain, no discarded line, known
//! profile), the spine (verifies) and any blob already at the address — and writes nothing when
//! any check fails. A torn last row of the journal or the spine was never acknowledged; it is
//! left out of these checks, and the append under the lock records and cuts it. The one write a refusal makes is the
//! `run.artifact_refused` audit record for a poster that does not hold the task.
//!
//! Version allocation, the spine append and the journal append run under the spine's
//! cross-process `.spine.lock`, so two posters of this crate cannot both allocate version N+1.
//! The checks are repeated under the lock. The next version is one past the highest version of
//! the key in the journal *or* the spine: a post that died after its spine entry and before its
//! journal row has used its version, which is never handed out again (the verifier reports the
//! orphan entry; `prev_version_hash` still names the last version the journal acknowledged). The audit mirror follows the reference: it is
//! written after the journal row and its failure does not undo the post; the outcome is
//! reported in [`PostedArtifact::audit`].

use std::path::Path;
use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use bernstein_protocol::pyjson::{Object, Value};
use regex::Regex;

use super::blobs::{BlobState, BlobStore, content_address};
use super::content::{ArtifactContent, MAX_ARTIFACT_BYTES};
use super::spine::SpineTail;
use super::spine::{LineageSpine, NewSpineEntry, SpineEntry, TraceContext, check_new_entry};
use super::verify::{
    ARTIFACT_POSTED_EVENT, ArtifactRecord, artifact_rows, latest_versions, spine_max_version,
    verify_run_artifacts,
};
use crate::audit::{AuditChain, AuditEvent, Timestamp};
use crate::mailbox::validate_task_id;
use crate::run_journal::{
    Clock, HashProfile, JournalWriter, SystemClock, parse_journal_bytes, python_str_repr,
    run_journal_path, task_run_id, validate_run_id, verify_loaded,
};
use crate::{Error, Result};

/// Audit event type of a posted artifact.
pub const EVENT_RUN_ARTIFACT: &str = "run.artifact";
/// Audit event type of a refused post.
pub const EVENT_RUN_ARTIFACT_REFUSED: &str = "run.artifact_refused";
/// The refusal reason when the task has no claim holder.
pub const REFUSAL_UNCLAIMED: &str = "unclaimed_task";
/// The refusal reason when the poster is not the claim holder.
pub const REFUSAL_SCOPE: &str = "claim_scope_violation";
/// The artifact key pattern, as the reference spells it in its error text.
pub const ARTIFACT_KEY_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z";

static ARTIFACT_KEY: LazyLock<Regex> = LazyLock::new(|| {
    // A fixed pattern, compiled by every test run.
    #[allow(clippy::expect_used)]
    Regex::new(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\z").expect("artifact key pattern is valid")
});

/// Checks an artifact key: one safe path segment, no leading dot, at most 128 characters.
///
/// # Errors
///
/// [`Error::ArtifactInvalid`] with the reference's message.
pub fn validate_artifact_key(key: &str) -> Result<()> {
    if ARTIFACT_KEY.is_match(key) {
        Ok(())
    } else {
        Err(Error::ArtifactInvalid {
            reason: format!(
                "artifact key {} must match {ARTIFACT_KEY_PATTERN} (a single safe segment)",
                python_str_repr(key)
            ),
        })
    }
}

/// One post.
#[derive(Debug, Clone)]
pub struct PostRequest<'a> {
    /// The task the artifact is bound to.
    pub task_id: &'a str,
    /// The artifact slot; reposting a key appends a new version.
    pub key: &'a str,
    /// The typed content.
    pub content: &'a ArtifactContent,
    /// The task's current claim holder, `None` when it is unclaimed.
    pub holder: Option<&'a str>,
    /// The authenticated identity posting (recorded as the spine actor and audit actor).
    pub poster: &'a str,
    /// Host trace context to record on the spine entry.
    pub trace: TraceContext,
    /// The spine entry's timestamp in seconds; `None` reads the system clock.
    pub spine_timestamp: Option<i64>,
    /// The audit record's timestamp; `None` reads the system clock.
    pub audit_timestamp: Option<Timestamp>,
}

/// How the `run.artifact` audit mirror went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditMirror {
    /// The event was appended; this is its `hmac`.
    Recorded {
        /// The appended record's `hmac` (the chain head after it).
        hmac: String,
    },
    /// Appending failed after the post was anchored in the spine and the journal.
    Failed {
        /// Why.
        reason: String,
    },
}

/// What a post returns.
#[derive(Debug, Clone, PartialEq)]
pub struct PostedArtifact {
    /// The chain-anchored record.
    pub record: ArtifactRecord,
    /// Whether the record verifies right after the post (blob, spine, journal).
    pub verified: bool,
    /// Why not, `""` when it verifies.
    pub verify_reason: String,
    /// The decoded content, `None` when the record does not verify.
    pub content: Option<Object>,
    /// The spine entry written.
    pub spine_entry: SpineEntry,
    /// The audit mirror's outcome.
    pub audit: AuditMirror,
}

impl PostedArtifact {
    /// The tool result in the reference's key order: `task_id, key, artifact_type,
    /// content_hash, version, prev_version_hash, spine_entry_hash, journal_index,
    /// journal_event_hash, link_kind, size, verified, verify_reason, content`.
    pub fn to_wire(&self) -> Object {
        let mut wire = self.record.to_object();
        wire.insert("verified", self.verified);
        wire.insert("verify_reason", self.verify_reason.as_str());
        wire.insert(
            "content",
            self.content.clone().map_or(Value::Null, Value::Object),
        );
        wire
    }
}

/// Posts an artifact with the system clock for the journal row (see
/// [`post_run_artifact_with_clock`]).
///
/// # Errors
///
/// As [`post_run_artifact_with_clock`].
pub fn post_run_artifact(
    project_root: &Path,
    chain: &AuditChain,
    request: &PostRequest<'_>,
) -> Result<PostedArtifact> {
    post_run_artifact_with_clock(project_root, chain, request, SystemClock)
}

/// Posts an artifact; `journal_clock` stamps the journal row (`ts`, `elapsed_s`). The spine
/// HMAC key is derived from the chain's key.
///
/// # Errors
///
/// Nothing is written when any of these is returned, except the refusal audit record:
/// * [`Error::InvalidTaskId`] or [`Error::InvalidRunId`] for a task id that cannot name a
///   task journal;
/// * [`Error::ArtifactRefused`] when `poster` is not the claim holder (audit-recorded);
/// * [`Error::ArtifactInvalid`] for a bad key or trace context;
/// * [`Error::ArtifactTooLarge`] when the content is over 1 MiB;
/// * [`Error::JournalUnusable`] when the task journal cannot be extended soundly;
/// * [`Error::EvidenceUnusable`] when the spine does not verify or a blob at the address is
///   corrupt;
/// * [`Error::Containment`] when a store resolves outside the project.
///
/// [`Error::Io`] during the writes leaves what the reference would leave after the same
/// failure (a blob, or a blob and a spine entry, without a journal row).
pub fn post_run_artifact_with_clock<C: Clock>(
    project_root: &Path,
    chain: &AuditChain,
    request: &PostRequest<'_>,
    journal_clock: C,
) -> Result<PostedArtifact> {
    let task_id = request.task_id;
    validate_task_id(task_id)?;
    let run_id = task_run_id(task_id);
    validate_run_id(&run_id)?;
    check_claim(chain, request)?;
    validate_artifact_key(request.key)?;
    let bytes = request.content.canonical_bytes();
    if bytes.len() > MAX_ARTIFACT_BYTES {
        return Err(Error::ArtifactTooLarge {
            size: bytes.len(),
            cap: MAX_ARTIFACT_BYTES,
        });
    }
    let content_hash = content_address(&bytes);
    // The version is not known yet; the path shape is checked with a placeholder.
    check_new_entry(&NewSpineEntry {
        artifact_path: &format!("run-artifacts/{run_id}/{}/v1", request.key),
        content: &bytes,
        actor: request.poster,
        step_id: "",
        model: "",
        timestamp: 0,
        trace: &request.trace,
    })?;
    let spine = LineageSpine::open(project_root, &run_id, chain.key())?;
    let blobs = BlobStore::for_project(project_root);

    // Unlocked pre-check, so a refused post creates not even the lock file.
    preflight(
        project_root,
        &run_id,
        request.key,
        &spine,
        &blobs,
        &content_hash,
    )?;

    let lock = spine.lock()?;
    let (prior, tail) = preflight(
        project_root,
        &run_id,
        request.key,
        &spine,
        &blobs,
        &content_hash,
    )?;
    let journal_version = prior.as_ref().map_or(0, |p| p.version);
    let version = journal_version.max(spine_max_version(&spine.entries()?, request.key)) + 1;
    let prev_version_hash = prior.map(|p| p.spine_entry_hash).unwrap_or_default();

    let stored = blobs.put(&bytes)?;
    let artifact_path = format!("run-artifacts/{run_id}/{}/v{version}", request.key);
    let step_id = format!("artifact:{}:v{version}", request.key);
    let spine_entry = spine.append_locked(
        &lock,
        &tail,
        &NewSpineEntry {
            artifact_path: &artifact_path,
            content: &bytes,
            actor: request.poster,
            step_id: &step_id,
            model: "",
            timestamp: request.spine_timestamp.unwrap_or_else(unix_seconds),
            trace: &request.trace,
        },
    )?;
    let artifact_type = request.content.artifact_type().as_str();
    let link_kind = request.content.link_kind();
    let payload = Object::new()
        .with("task_id", task_id)
        .with("key", request.key)
        .with("artifact_type", artifact_type)
        .with("content_hash", stored.content_hash.as_str())
        .with("version", version)
        .with("prev_version_hash", prev_version_hash.as_str())
        .with("spine_entry_hash", spine_entry.entry_hash.as_str())
        .with("link_kind", link_kind)
        .with("size", stored.size);
    let mut writer = JournalWriter::open_with_clock(
        project_root,
        &run_id,
        HashProfile::PyJsonV1,
        journal_clock,
    )?;
    let row = writer.append(ARTIFACT_POSTED_EVENT, &payload)?;
    drop(lock);

    let record = ArtifactRecord {
        task_id: task_id.to_owned(),
        key: request.key.to_owned(),
        artifact_type: artifact_type.to_owned(),
        content_hash: stored.content_hash,
        version,
        prev_version_hash,
        spine_entry_hash: spine_entry.entry_hash.clone(),
        journal_index: i64::try_from(row.index).unwrap_or(i64::MAX),
        journal_event_hash: row.event_hash,
        link_kind: link_kind.to_owned(),
        size: i64::try_from(stored.size).unwrap_or(i64::MAX),
    };
    let audit = mirror(chain, request, &record);
    let (verified, verify_reason) = check_posted(project_root, chain, &record);
    let content = if verified {
        decode_object(&bytes)
    } else {
        None
    };
    Ok(PostedArtifact {
        verified: verified && content.is_some(),
        verify_reason: if verified && content.is_none() {
            "stored blob could not be decoded".to_owned()
        } else {
            verify_reason
        },
        record,
        content,
        spine_entry,
        audit,
    })
}

/// Refuses (and audit-records) a post by anyone but the claim holder.
fn check_claim(chain: &AuditChain, request: &PostRequest<'_>) -> Result<()> {
    let reason = match request.holder {
        None | Some("") => REFUSAL_UNCLAIMED,
        Some(holder) if request.poster.is_empty() || request.poster != holder => REFUSAL_SCOPE,
        Some(_) => return Ok(()),
    };
    // The reference records the refusal with an empty key (the route refuses before it
    // reads the body); the same bytes are written here.
    let event = AuditEvent::new(
        EVENT_RUN_ARTIFACT_REFUSED,
        "run_artifact",
        "run_artifact",
        request.task_id,
        Object::new()
            .with("task_id", request.task_id)
            .with("key", "")
            .with("caller", request.poster)
            .with("reason", reason),
    );
    let appended = match request.audit_timestamp {
        Some(at) => chain.append_at(&event, at),
        None => chain.append(&event),
    };
    if let Err(err) = appended {
        // As in the reference, a failed mirror does not turn the refusal into something else.
        tracing::warn!(task_id = request.task_id, error = %err, "run.artifact_refused mirror failed");
    }
    Err(Error::ArtifactRefused {
        task_id: request.task_id.to_owned(),
        caller: request.poster.to_owned(),
        reason,
    })
}

/// Checks the journal, the spine and the blob address; returns the prior version of `key` and
/// the spine position to chain onto.
fn preflight(
    project_root: &Path,
    run_id: &str,
    key: &str,
    spine: &LineageSpine,
    blobs: &BlobStore,
    content_hash: &str,
) -> Result<(Option<ArtifactRecord>, SpineTail)> {
    let journal_path = run_journal_path(project_root, run_id)?;
    let unusable = |reason: String| Error::JournalUnusable {
        path: journal_path.clone(),
        reason,
    };
    let mut bytes = match std::fs::read(&journal_path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(Error::io("read", &journal_path, err)),
    };
    // A torn last row was never acknowledged; the journal writer cuts it under its lock.
    if !bytes.ends_with(b"\n") && !bytes.ends_with(b"\r") {
        bytes.truncate(
            bytes
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |at| at + 1),
        );
    }
    let loaded = parse_journal_bytes(&bytes);
    let verification = verify_loaded(&loaded);
    if !verification.ok() || verification.hash_profile.is_none() {
        return Err(unusable(format!(
            "the task journal does not verify: {}",
            verification.errors.join("; ")
        )));
    }
    let tail = spine.tail()?;
    if let BlobState::Corrupt { actual, .. } = blobs.state(content_hash)? {
        return Err(Error::EvidenceUnusable {
            path: blobs.path_for(content_hash)?,
            reason: format!(
                "the stored blob hashes to {actual}, not to its address; refusing to overwrite it"
            ),
        });
    }
    let records: Vec<ArtifactRecord> = artifact_rows(&loaded)
        .into_iter()
        .map(|(record, _)| record)
        .collect();
    Ok((latest_versions(&records).remove(key), tail))
}

fn mirror(chain: &AuditChain, request: &PostRequest<'_>, record: &ArtifactRecord) -> AuditMirror {
    let event = AuditEvent::new(
        EVENT_RUN_ARTIFACT,
        request.poster,
        "run_artifact",
        record.spine_entry_hash.as_str(),
        Object::new()
            .with("task_id", record.task_id.as_str())
            .with("key", record.key.as_str())
            .with("artifact_type", record.artifact_type.as_str())
            .with("content_hash", record.content_hash.as_str())
            .with("version", record.version)
            .with("prev_version_hash", record.prev_version_hash.as_str())
            .with("spine_entry_hash", record.spine_entry_hash.as_str())
            .with("journal_index", record.journal_index)
            .with("journal_event_hash", record.journal_event_hash.as_str()),
    );
    let appended = match request.audit_timestamp {
        Some(at) => chain.append_at(&event, at),
        None => chain.append(&event),
    };
    match appended {
        Ok(appended) => AuditMirror::Recorded {
            hmac: appended.hmac,
        },
        Err(err) => {
            tracing::warn!(
                task_id = record.task_id,
                key = record.key,
                version = record.version,
                error = %err,
                "run.artifact audit mirror failed"
            );
            AuditMirror::Failed {
                reason: err.to_string(),
            }
        }
    }
}

/// Verifies the record just written with the same checks the verifier applies.
fn check_posted(
    project_root: &Path,
    chain: &AuditChain,
    record: &ArtifactRecord,
) -> (bool, String) {
    match verify_run_artifacts(project_root, &record.task_id, chain.key()) {
        Ok(report) => report
            .results
            .into_iter()
            .find(|check| {
                check.key == record.key
                    && check.version == record.version
                    && check.journal_index == record.journal_index
            })
            .map_or_else(
                || (false, "no verification result".to_owned()),
                |check| (check.ok, check.reason),
            ),
        Err(err) => (false, err.to_string()),
    }
}

fn decode_object(bytes: &[u8]) -> Option<Object> {
    let text = std::str::from_utf8(bytes).ok()?;
    match Value::parse(text).ok()? {
        Value::Object(object) => Some(object),
        _ => None,
    }
}

fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
