//! The offline capsule verifier (the reference's `verify_context_capsule`).
//!
//! The five checks of `FORMATS.md` §7 run in order, and all of them run, so
//! [`ContextVerifyReport::findings`] lists every problem. The verdict fields (`ok`, `reason`,
//! `is_mock`, `signature_ok`, `chain_ok`, `journal_ok`, `journal_identity`) are the reference's:
//! they describe the first failing check, with the flags of the checks before it set, exactly
//! as the reference's early returns leave them.
//!
//! 1. [`CapsuleCheck::Record`]: the record loads;
//! 2. [`CapsuleCheck::Signature`]: the detached JWS verifies under the real domain. A capsule
//!    marked as a mock, or whose signature verifies only under the mock domain, is reported as
//!    a mock and is never OK;
//! 3. [`CapsuleCheck::AuditChain`]: the chain verifies, and a live `context.capsule` record
//!    carries this task id and the recomputed capsule hash;
//! 4. [`CapsuleCheck::Journal`]: the run journal exists, its chain is consistent with no
//!    discarded line, and, when the capsule names an intent capsule whose run journal was
//!    sealed (`intent.journal_seal`), it matches the seal;
//! 5. [`CapsuleCheck::JournalRecord`]: a `context.capsule_recorded` row carries this task id
//!    and the recomputed hash.
//!
//! As in the claim verifier, the chain records consulted by checks 3 and 4 are the ones whose
//! HMAC and linkage verified, in live segments; the reference reads live segments unverified.

use std::path::Path;

use bernstein_protocol::pyjson::{Object, Value};

use super::record::{CapsuleRecord, ContextCapsule, SignedContextCapsule, read_capsule_record};
use super::seal::{CAPSULE_RECORDED_EVENT, EVENT_CONTEXT_CAPSULE};
use crate::Result;
use crate::audit::{ARCHIVED_SUFFIX, AuditChain, python_str};
use crate::identity::python_eq;
use crate::run_journal::{
    journal_barrier_message, load_journal, python_str_repr, run_journal_path, verify_loaded,
};

/// Event type of the audit record that seals a finished run journal (#2649).
pub const EVENT_INTENT_JOURNAL_SEAL: &str = "intent.journal_seal";

/// The reason given for a mock capsule.
pub const MOCK_CAPSULE_REASON: &str =
    "capsule is a mock-layer fixture (mock-domain signature); mock capsules never verify as real";

/// The five checks, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapsuleCheck {
    /// The record loads.
    Record,
    /// The real-domain signature.
    Signature,
    /// The chain verifies and anchors the capsule hash.
    AuditChain,
    /// The run journal is consistent (and matches its seal, when sealed).
    Journal,
    /// The journal records the capsule hash.
    JournalRecord,
}

impl CapsuleCheck {
    /// A stable snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            CapsuleCheck::Record => "record",
            CapsuleCheck::Signature => "signature",
            CapsuleCheck::AuditChain => "audit_chain",
            CapsuleCheck::Journal => "journal",
            CapsuleCheck::JournalRecord => "journal_record",
        }
    }
}

/// Whether a journal matches an independent seal (the reference's `JournalIdentityStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalIdentity {
    /// The journal is exactly the sealed one.
    Verified,
    /// A seal exists and the journal differs from it.
    Mismatched,
    /// No seal to compare against.
    Unverifiable,
}

impl JournalIdentity {
    /// `verified`, `mismatched` or `unverifiable`.
    pub fn as_str(self) -> &'static str {
        match self {
            JournalIdentity::Verified => "verified",
            JournalIdentity::Mismatched => "mismatched",
            JournalIdentity::Unverifiable => "unverifiable",
        }
    }
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsuleFinding {
    /// The check that found it.
    pub check: CapsuleCheck,
    /// What is wrong, in the reference's words where it has them.
    pub message: String,
}

/// The outcome of verifying one capsule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextVerifyReport {
    /// Every check passed.
    pub ok: bool,
    /// The reference's reason: the first failure, `""` when OK.
    pub reason: String,
    /// The capsule is a mock-layer fixture.
    pub is_mock: bool,
    /// The real-domain signature verified (and the checks before it passed).
    pub signature_ok: bool,
    /// The chain verified and anchors the capsule (and the checks before it passed).
    pub chain_ok: bool,
    /// The run journal is consistent (and the checks before it passed).
    pub journal_ok: bool,
    /// The journal's identity against a seal, as far as the reference got.
    pub journal_identity: JournalIdentity,
    /// The loaded capsule, when the record loaded.
    pub capsule: Option<ContextCapsule>,
    /// Every problem, in check order.
    pub findings: Vec<CapsuleFinding>,
}

impl ContextVerifyReport {
    /// The `verify` object of the capsule tool, keys in the reference's order: `ok, reason,
    /// is_mock, signature_ok, chain_ok, journal_ok, journal_identity`.
    pub fn to_wire(&self) -> Object {
        Object::new()
            .with("ok", self.ok)
            .with("reason", self.reason.as_str())
            .with("is_mock", self.is_mock)
            .with("signature_ok", self.signature_ok)
            .with("chain_ok", self.chain_ok)
            .with("journal_ok", self.journal_ok)
            .with("journal_identity", self.journal_identity.as_str())
    }
}

/// The body of the capsule tool (`bernstein_task_capsule`): `{"capsule": projection}` plus
/// `"verify"` when a report is given.
pub fn task_capsule_body(
    signed: &SignedContextCapsule,
    verify: Option<&ContextVerifyReport>,
) -> Object {
    let mut body = Object::new().with("capsule", signed.project());
    if let Some(report) = verify {
        body.insert("verify", report.to_wire());
    }
    body
}

/// The reference flags that hold when a check fails.
#[derive(Debug, Clone, Copy)]
struct Reached {
    is_mock: bool,
    signature_ok: bool,
    chain_ok: bool,
    journal_ok: bool,
    journal_identity: JournalIdentity,
}

impl Reached {
    const NOTHING: Reached = Reached {
        is_mock: false,
        signature_ok: false,
        chain_ok: false,
        journal_ok: false,
        journal_identity: JournalIdentity::Unverifiable,
    };
}

/// Collects findings and remembers the first failure's flags.
struct Collector {
    findings: Vec<CapsuleFinding>,
    first: Option<(String, Reached)>,
}

impl Collector {
    fn fail(&mut self, check: CapsuleCheck, message: String, reached: Reached) {
        if self.first.is_none() {
            self.first = Some((message.clone(), reached));
        }
        self.findings.push(CapsuleFinding { check, message });
    }

    fn finish(self, capsule: Option<ContextCapsule>, passed: Reached) -> ContextVerifyReport {
        let (ok, reason, flags) = match self.first {
            Some((reason, flags)) => (false, reason, flags),
            None => (true, String::new(), passed),
        };
        ContextVerifyReport {
            ok,
            reason,
            is_mock: flags.is_mock,
            signature_ok: flags.signature_ok,
            chain_ok: flags.chain_ok,
            journal_ok: flags.journal_ok,
            journal_identity: flags.journal_identity,
            capsule,
            findings: self.findings,
        }
    }
}

/// Verifies the capsule of `task_id` in the project at `project_root` against `chain`.
///
/// Reads only: nothing is created or written.
///
/// # Errors
///
/// [`crate::Error::InvalidTaskId`] or [`crate::Error::Containment`] for a task id that cannot
/// name a record inside the project (the reference raises for those too), [`crate::Error::Io`]
/// when the record exists but cannot be read. Every other problem is a finding.
pub fn verify_context_capsule(
    project_root: &Path,
    chain: &AuditChain,
    task_id: &str,
) -> Result<ContextVerifyReport> {
    let mut out = Collector {
        findings: Vec::new(),
        first: None,
    };
    let signed = match read_capsule_record(project_root, task_id)? {
        CapsuleRecord::Loaded(signed) => *signed,
        CapsuleRecord::Missing => {
            out.fail(
                CapsuleCheck::Record,
                "no context capsule for task".to_owned(),
                Reached::NOTHING,
            );
            return Ok(out.finish(None, Reached::NOTHING));
        }
        CapsuleRecord::Malformed { reason } => {
            out.fail(
                CapsuleCheck::Record,
                "no context capsule for task".to_owned(),
                Reached::NOTHING,
            );
            out.findings.push(CapsuleFinding {
                check: CapsuleCheck::Record,
                message: format!("the capsule record does not load: {reason}"),
            });
            return Ok(out.finish(None, Reached::NOTHING));
        }
    };
    let capsule = &signed.capsule;
    let recomputed = capsule.capsule_hash();

    // Check 2.
    let (real_ok, mock_ok) = signed.signature_verdict();
    if signed.is_mock || (mock_ok && !real_ok) {
        out.fail(
            CapsuleCheck::Signature,
            MOCK_CAPSULE_REASON.to_owned(),
            Reached {
                is_mock: true,
                ..Reached::NOTHING
            },
        );
    } else if !real_ok {
        out.fail(
            CapsuleCheck::Signature,
            "capsule signature does not verify (tampered or wrong key)".to_owned(),
            Reached::NOTHING,
        );
    }
    let signed_ok = Reached {
        signature_ok: true,
        ..Reached::NOTHING
    };

    // Check 3, in one streaming pass that also gathers the journal seals check 4 needs.
    let mut records = chain.verified_records();
    let mut anchored = false;
    let mut seals: Vec<(String, Value)> = Vec::new();
    for record in records.by_ref() {
        if record.segment.ends_with(ARCHIVED_SUFFIX) {
            continue;
        }
        let detail = |key: &str| record.details.get(key).map(python_str).unwrap_or_default();
        if record.event_type == EVENT_CONTEXT_CAPSULE {
            anchored |= detail("capsule_hash") == recomputed && detail("task_id") == task_id;
        } else if record.event_type == EVENT_INTENT_JOURNAL_SEAL
            && !capsule.intent_capsule_hash.is_empty()
            && record.details.get("task_id").and_then(Value::as_str) == Some(task_id)
            && detail("run_id") == capsule.run_id
            && detail("capsule_hash") == capsule.intent_capsule_hash
        {
            seals.push((
                detail("journal_head"),
                record
                    .details
                    .get("event_count")
                    .cloned()
                    .unwrap_or(Value::Null),
            ));
        }
    }
    let chain_report = records.finish();
    if !chain_report.ok() {
        let messages = chain_report.verify_messages();
        if messages.is_empty() {
            out.fail(
                CapsuleCheck::AuditChain,
                "audit chain fails verification (chain break)".to_owned(),
                signed_ok,
            );
        }
        for message in messages {
            out.fail(
                CapsuleCheck::AuditChain,
                format!("audit chain fails verification ({message})"),
                signed_ok,
            );
        }
    }
    let chain_passed = Reached {
        chain_ok: true,
        ..signed_ok
    };
    if !anchored {
        out.fail(
            CapsuleCheck::AuditChain,
            "capsule hash is not anchored in the audit chain (tampered or never recorded)"
                .to_owned(),
            chain_passed,
        );
    }

    // Check 4.
    let journal_path = match run_journal_path(project_root, &capsule.run_id) {
        Ok(path) => path,
        Err(err) => {
            let detail =
                journal_barrier_message(&capsule.run_id, &err).unwrap_or_else(|| err.to_string());
            out.fail(
                CapsuleCheck::Journal,
                format!("invalid run id: {detail}"),
                chain_passed,
            );
            return Ok(out.finish(Some(signed.capsule), chain_passed));
        }
    };
    let seal = agreed_seal(&seals);
    let seal = match seal {
        Ok(seal) => seal,
        Err(message) => {
            out.fail(CapsuleCheck::Journal, message, chain_passed);
            None
        }
    };
    let loaded = match load_journal(&journal_path) {
        Ok(loaded) => loaded,
        Err(err) => {
            out.fail(
                CapsuleCheck::Journal,
                format!("cannot read the run journal: {err}"),
                chain_passed,
            );
            return Ok(out.finish(Some(signed.capsule), chain_passed));
        }
    };
    let verification = verify_loaded(&loaded);
    let exists = journal_path.exists();
    let mut seal_errors = Vec::new();
    let identity = match &seal {
        None => JournalIdentity::Unverifiable,
        Some((head, count)) => {
            let matches = exists
                && verification.ok()
                && verification.head == *head
                && i128::try_from(verification.count) == Ok(*count);
            if !exists {
                seal_errors.push("journal file is missing but an external seal exists".to_owned());
            }
            if i128::try_from(verification.count) != Ok(*count) {
                seal_errors.push(format!(
                    "journal holds {} events but the seal commits to {count}",
                    verification.count
                ));
            }
            if verification.head != *head {
                let or_empty = |s: &str| {
                    if s.is_empty() {
                        "(empty)".to_owned()
                    } else {
                        s.to_owned()
                    }
                };
                seal_errors.push(format!(
                    "journal head {} does not match sealed head {}",
                    or_empty(&verification.head),
                    or_empty(head)
                ));
            }
            if matches {
                JournalIdentity::Verified
            } else {
                JournalIdentity::Mismatched
            }
        }
    };
    let journal_reached = Reached {
        journal_identity: identity,
        ..chain_passed
    };
    if !exists {
        out.fail(
            CapsuleCheck::Journal,
            format!(
                "run journal for {} is missing; cannot re-derive at chain position",
                python_str_repr(&capsule.run_id)
            ),
            journal_reached,
        );
    } else if !verification.ok() {
        let detail = verification
            .errors
            .first()
            .cloned()
            .unwrap_or_else(|| "chain break".to_owned());
        out.fail(
            CapsuleCheck::Journal,
            format!("run journal chain/reader-coverage verification failed ({detail})"),
            journal_reached,
        );
    }
    let journal_passed = Reached {
        journal_ok: true,
        ..journal_reached
    };
    if seal.is_some() && identity != JournalIdentity::Verified {
        let mut errors = verification.errors.clone();
        errors.extend(seal_errors);
        let detail = if errors.is_empty() {
            "mismatch".to_owned()
        } else {
            errors.join("; ")
        };
        out.fail(
            CapsuleCheck::Journal,
            format!("run journal does not match its external seal: {detail}"),
            journal_passed,
        );
    }

    // Check 5.
    let recorded = loaded.rows.iter().any(|row| {
        let field = |key: &str| row.get(key).map(python_str).unwrap_or_default();
        row.get("event").and_then(Value::as_str) == Some(CAPSULE_RECORDED_EVENT)
            && field("task_id") == task_id
            && field("capsule_hash") == recomputed
    });
    if !recorded {
        out.fail(
            CapsuleCheck::JournalRecord,
            "capsule hash not recorded at any chain position in the run journal (context divergence)"
                .to_owned(),
            journal_passed,
        );
    }
    Ok(out.finish(Some(signed.capsule), journal_passed))
}

/// The single seal every matching `intent.journal_seal` record agrees on, as `(journal_head,
/// event_count)`; `Ok(None)` when there is none.
///
/// # Errors
///
/// The reference's reason when the seals disagree, or when the agreed `event_count` is not an
/// integer (a boolean is not one either).
fn agreed_seal(seals: &[(String, Value)]) -> Result<Option<(String, i128)>, String> {
    // Python builds a set of (head, count) tuples: equal pairs (with 1 == 1.0 == True) collapse
    // into the first one inserted.
    let mut distinct: Vec<&(String, Value)> = Vec::new();
    for seal in seals {
        if !distinct
            .iter()
            .any(|known| known.0 == seal.0 && python_eq(&known.1, &seal.1))
        {
            distinct.push(seal);
        }
    }
    match distinct.as_slice() {
        [] => Ok(None),
        [(head, Value::Int(count))] => match count.as_str().parse::<i128>() {
            Ok(count) => Ok(Some((head.clone(), count))),
            Err(_) => Err("run journal seal records no usable event_count".to_owned()),
        },
        [_] => Err("run journal seal records no usable event_count".to_owned()),
        _ => {
            Err("run journal has disagreeing external seals; its identity is ambiguous".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_collapse_with_python_equality() {
        let seal = |head: &str, count: Value| (head.to_owned(), count);
        assert_eq!(agreed_seal(&[]), Ok(None));
        assert_eq!(
            agreed_seal(&[seal("h", Value::from(2)), seal("h", Value::Float(2.0))]),
            Ok(Some(("h".to_owned(), 2)))
        );
        assert_eq!(
            agreed_seal(&[seal("h", Value::Float(2.0)), seal("h", Value::from(2))]),
            Err("run journal seal records no usable event_count".to_owned())
        );
        assert_eq!(
            agreed_seal(&[seal("h", Value::Bool(true))]),
            Err("run journal seal records no usable event_count".to_owned())
        );
        assert_eq!(
            agreed_seal(&[seal("h", Value::from(2)), seal("g", Value::from(2))]),
            Err("run journal has disagreeing external seals; its identity is ambiguous".to_owned())
        );
        assert_eq!(
            agreed_seal(&[seal("h", Value::from(2)), seal("h", Value::from(3))]),
            Err("run journal has disagreeing external seals; its identity is ambiguous".to_owned())
        );
    }
}
