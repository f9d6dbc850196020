//! Signed context capsules and their offline verifier (`FORMATS.md` §7; the reference's
//! `core/agents/context_capsule.py`).
//!
//! A capsule is the canonical, content-addressed record of what a spawned worker was given:
//! task and run ids, params hash, worktree, role, remaining budget, dependency state, the
//! audit-chain head at spawn and the intent capsule hash. It is stored, Ed25519-signed, at
//! `.sdd/context/capsules/<task_id>.json`, anchored by a `context.capsule` audit event, and
//! recorded as a `context.capsule_recorded` row in the capsule's run journal:
//!
//! ```text
//! record       = PY-COMPACT-UTF8({capsule, capsule_hash, is_mock, signature, signer_public_key_pem})
//! capsule_hash = "sha256:" + sha256(PY-COMPACT-UTF8(capsule))
//! signature    = detached JWS (b64=false, kid "context-capsule") over
//!                "bernstein.context-capsule.v1\0" + PY-COMPACT-UTF8(capsule)
//! ```
//!
//! Mock capsules (test fixtures) are signed over `"bernstein.context-capsule.MOCK.v1\0"` and are
//! always reported as mocks, never as verified.
//!
//! * [`ContextCapsule`], [`SignedContextCapsule`]: canonical bytes, hash, signing, the
//!   tool projection;
//! * [`read_capsule_record`] / [`write_capsule_record`] through a task id check and the
//!   containment barrier;
//! * [`seal_and_bind`]: record + audit anchor + journal row (nothing in Bernstein 3.23 calls
//!   the reference's equivalent; the tests use it to round-trip);
//! * [`verify_context_capsule`]: the five checks, every problem reported.

mod record;
mod seal;
mod verify;

pub use record::{
    CONTEXT_CAPSULE_DOMAIN_MOCK, CONTEXT_CAPSULE_DOMAIN_REAL, CONTEXT_CAPSULE_KID,
    CONTEXT_CAPSULE_VERSION, CapsuleRecord, ContextCapsule, SignedContextCapsule,
    capsule_record_path, capsules_dir, read_capsule_record, validate_capsule_task_id,
    write_capsule_record,
};
pub use seal::{
    CAPSULE_RECORDED_EVENT, CONTEXT_CAPSULE_ACTOR, EVENT_CONTEXT_CAPSULE, SealedCapsule,
    capsule_spawn_binding, context_capsule_event, seal_and_bind, seal_mock_capsule,
};
pub use verify::{
    CapsuleCheck, CapsuleFinding, ContextVerifyReport, EVENT_INTENT_JOURNAL_SEAL, JournalIdentity,
    MOCK_CAPSULE_REASON, task_capsule_body, verify_context_capsule,
};
