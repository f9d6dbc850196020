//! Run artifacts, the content-addressed blob store and the lineage spine (FORMATS §6.1), the
//! evidence behind `bernstein_post_artifact`, byte-compatible with Bernstein 3.23's
//! `core/evidence/run_artifacts.py`, `core/evidence/bundle.py` and `core/lineage/spine.py`.
//!
//! * [`content`](ArtifactContent): the four typed shapes (report, table, link, SARIF finding)
//!   and their PY-COMPACT-UTF8 content bytes, capped at [`MAX_ARTIFACT_BYTES`];
//! * [`BlobStore`]: `.sdd/evidence/blobs/<hex[:2]>/<hex>`, written atomically and idempotently;
//! * [`LineageSpine`]: `.sdd/lineage/<task_run_id>/spine.jsonl` and `spine.head`, appended under
//!   the reference's `.spine.lock`, verified to `ok` / `no_entries` / `seal_only` / `tampered`
//!   with per-line errors (version-1 rows included);
//! * [`post_run_artifact`]: validates everything, then writes blob, spine entry,
//!   `artifact_posted` journal row and `run.artifact` audit event, chaining versions per key;
//!   a poster that does not hold the task is refused and the refusal audit-recorded;
//! * [`verify_run_artifacts`] / [`verify_all_run_artifacts`]: per-row reports listing every
//!   problem, with the reference's verdict text first.
//!
//! A host's W3C trace context ([`TraceContext`]) is recorded on the spine entry's
//! `traceparent` / `tracestate` / `baggage` fields, which the entry hash and HMAC cover; the
//! `step_id` stays `artifact:<key>:v<N>` as the reference writes it.

mod blobs;
mod content;
mod post;
mod pyint;
mod spine;
mod verify;

pub use blobs::{
    BlobState, BlobStore, CONTENT_HASH_PREFIX, StoredBlob, address_hex, blobs_dir, content_address,
};
pub use content::{
    ArtifactContent, ArtifactFields, ArtifactType, FindingProvenance, LINK_KINDS,
    MAX_ARTIFACT_BYTES,
};
pub use post::{
    ARTIFACT_KEY_PATTERN, AuditMirror, EVENT_RUN_ARTIFACT, EVENT_RUN_ARTIFACT_REFUSED, PostRequest,
    PostedArtifact, REFUSAL_SCOPE, REFUSAL_UNCLAIMED, post_run_artifact,
    post_run_artifact_with_clock, validate_artifact_key,
};
pub use spine::{
    ARTIFACT_ATTEMPT_STEP_PREFIX, JOURNAL_SEAL_STEP_PREFIX, LINEAGE_DOMAIN_TAG, LINEAGE_KEY_DOMAIN,
    LineageSpine, MAX_TRACE_HEADER_BYTES, NewSpineEntry, SPINE_ENTRY_VERSION, SPINE_FILE_NAME,
    SPINE_HEAD_FILE_NAME, SPINE_LOCK_FILE_NAME, SpineEntry, SpineHashProfile, SpineLock,
    SpineStatus, SpineVerification, TraceContext, lineage_dir, validate_trace, verify_spine_bytes,
};
pub use verify::{
    ARTIFACT_POSTED_EVENT, ArtifactCheck, ArtifactRecord, JOURNAL_IDENTITY_UNVERIFIABLE,
    PERSISTENT_AGENT_STEP_EVENT, ProjectArtifactsReport, SpineFindings, TaskArtifactsReport,
    latest_versions, read_artifact_rows, spine_findings, task_journal_path,
    verify_all_run_artifacts, verify_run_artifacts,
};

pub(crate) use blobs::write_atomically;
