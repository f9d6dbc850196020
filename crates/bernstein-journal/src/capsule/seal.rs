//! Sealing a capsule: the signed record, the `context.capsule` audit event and the
//! `context.capsule_recorded` journal row (the reference's `seal_and_bind`).
//!
//! Bernstein 3.23 has no caller of `seal_and_bind`; the capsule tool only reads records. This
//! writer exists so a spawner (and the tests) can produce records the verifier accepts, in the
//! reference's bytes.

use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::Object;

use super::record::{
    ContextCapsule, SignedContextCapsule, capsule_record_path, write_capsule_record,
};
use crate::audit::{AppendedRecord, AuditChain, AuditEvent, Timestamp};
use crate::identity::SigningIdentity;
use crate::run_journal::{AppendedRow, Clock, JournalWriter, run_journal_path};
use crate::{Error, Result};

/// Event type of the audit record that anchors a capsule.
pub const EVENT_CONTEXT_CAPSULE: &str = "context.capsule";

/// Journal event recording a capsule hash in the capsule's run journal.
pub const CAPSULE_RECORDED_EVENT: &str = "context.capsule_recorded";

/// Actor and resource type of the `context.capsule` record.
pub const CONTEXT_CAPSULE_ACTOR: &str = "context_capsule";

/// The `context.capsule` audit event of a sealed capsule (the reference's
/// `record_context_capsule`): resource id = the capsule hash, details = task and run ids,
/// params hash, capsule hash, pinned chain head and intent capsule hash.
pub fn context_capsule_event(capsule: &ContextCapsule) -> AuditEvent {
    let capsule_hash = capsule.capsule_hash();
    let details = Object::new()
        .with("task_id", capsule.task_id.as_str())
        .with("run_id", capsule.run_id.as_str())
        .with("params_hash", capsule.params_hash.as_str())
        .with("capsule_hash", capsule_hash.as_str())
        .with("audit_chain_head", capsule.audit_chain_head.as_str())
        .with("intent_capsule_hash", capsule.intent_capsule_hash.as_str());
    AuditEvent::new(
        EVENT_CONTEXT_CAPSULE,
        CONTEXT_CAPSULE_ACTOR,
        CONTEXT_CAPSULE_ACTOR,
        capsule_hash,
        details,
    )
}

/// The spawn-record fragment binding a worker to its capsule (`capsule_spawn_binding`):
/// `{context_task_id, context_params_hash, context_capsule_hash}`.
pub fn capsule_spawn_binding(capsule: &ContextCapsule) -> Object {
    Object::new()
        .with("context_task_id", capsule.task_id.as_str())
        .with("context_params_hash", capsule.params_hash.as_str())
        .with("context_capsule_hash", capsule.capsule_hash())
}

/// What sealing wrote.
#[derive(Debug, Clone)]
pub struct SealedCapsule {
    /// The signed capsule.
    pub signed: SignedContextCapsule,
    /// Where the record was written.
    pub record_path: PathBuf,
    /// The `context.capsule` audit record.
    pub audit_record: AppendedRecord,
    /// The `context.capsule_recorded` journal row, when a journal was given.
    pub journal_row: Option<AppendedRow>,
    /// The spawn-record binding ([`capsule_spawn_binding`]).
    pub binding: Object,
}

/// Signs `capsule` over the real domain and binds it: writes the record, appends the
/// `context.capsule` event to `chain` (at `audit_at`, or now), then, when `journal` is given,
/// appends `context.capsule_recorded {task_id, capsule_hash}` to it.
///
/// The inputs are checked before anything is written: the task id must name a record inside
/// the project, the run id a journal inside it, and a given journal must be the capsule's run
/// journal (a capsule recorded in another run's journal could never verify).
///
/// # Errors
///
/// [`Error::InvalidTaskId`], [`Error::InvalidRunId`], [`Error::Containment`],
/// [`Error::Malformed`] for a journal of another run, then the filesystem's, the chain's and
/// the journal's errors.
pub fn seal_and_bind<C: Clock>(
    project_root: &Path,
    chain: &AuditChain,
    journal: Option<&mut JournalWriter<C>>,
    capsule: ContextCapsule,
    identity: &SigningIdentity,
    audit_at: Option<Timestamp>,
) -> Result<SealedCapsule> {
    capsule_record_path(project_root, &capsule.task_id)?;
    run_journal_path(project_root, &capsule.run_id)?;
    if let Some(writer) = &journal
        && writer.run_id() != capsule.run_id
    {
        return Err(Error::Malformed {
            what: "context capsule",
            reason: format!(
                "the journal writer is for run {:?} but the capsule names run {:?}",
                writer.run_id(),
                capsule.run_id
            ),
        });
    }
    let signed = SignedContextCapsule::seal(capsule, identity);
    let record_path = write_capsule_record(project_root, &signed)?;
    let event = context_capsule_event(&signed.capsule);
    let audit_record = match audit_at {
        Some(at) => chain.append_at(&event, at)?,
        None => chain.append(&event)?,
    };
    let capsule_hash = signed.capsule.capsule_hash();
    let journal_row = match journal {
        Some(writer) => Some(
            writer.append(
                CAPSULE_RECORDED_EVENT,
                &Object::new()
                    .with("task_id", signed.capsule.task_id.as_str())
                    .with("capsule_hash", capsule_hash.as_str()),
            )?,
        ),
        None => None,
    };
    let binding = capsule_spawn_binding(&signed.capsule);
    Ok(SealedCapsule {
        signed,
        record_path,
        audit_record,
        journal_row,
        binding,
    })
}

/// Signs a fixture capsule over the mock domain and writes its record; nothing is anchored.
/// The record is the sanctioned mock layer for offline tests and never verifies as real.
///
/// # Errors
///
/// As [`write_capsule_record`].
pub fn seal_mock_capsule(
    project_root: &Path,
    capsule: ContextCapsule,
    identity: &SigningIdentity,
) -> Result<SignedContextCapsule> {
    let signed = SignedContextCapsule::seal_mock(capsule, identity);
    write_capsule_record(project_root, &signed)?;
    Ok(signed)
}
