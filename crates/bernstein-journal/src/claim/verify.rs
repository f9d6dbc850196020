//! The offline claim-receipt verifier (the reference's `verify_claim_receipt`): no network, no
//! server, only the backlog rows and the audit chain.
//!
//! The checks run in the reference's order and every one of them runs, so a report lists every
//! failing check; [`ClaimVerifyReport::reason`] is the first failure, which is the reason the
//! reference gives:
//!
//! 1. [`ClaimCheck::BacklogHead`]: the `backlogHead` reprojected from the rows equals the
//!    receipt's. The rows are the *current* backlog, so a later claim on it invalidates
//!    earlier receipts, as in the reference;
//! 2. [`ClaimCheck::Signature`]: the Ed25519 signature over `{"receipt_hash": …}` verifies
//!    under the embedded public key. An unsigned receipt fails only when it is a grant;
//! 3. [`ClaimCheck::AuditChain`]: the audit chain verifies (the reference's `verify()`);
//! 4. [`ClaimCheck::ClaimEvent`], grants only: a `task.claim_receipt` record in a live segment
//!    names the receipt's task and has `prev_chain_digest == chainHead`.
//!
//! One deliberate difference: check 4 reads only records whose HMAC and linkage verified,
//! where the reference queries the live segments without authenticating them. The verdicts
//! agree whenever check 3 passes; when it fails, our check 4 does not vouch for forged lines.

use std::path::Path;

use bernstein_protocol::pyjson::{Object, Value};

use super::backlog::{BacklogEntry, read_backlog};
use super::issue::EVENT_TASK_CLAIM_RECEIPT;
use super::receipt::{ClaimReceipt, backlog_head_of_rows, normalised_rows};
use crate::audit::{ARCHIVED_SUFFIX, AuditChain, PREV_CHAIN_DIGEST_KEY, python_str};
use crate::identity::{PublicKey, python_b64url_decode};
use crate::key::AuditKey;
use crate::run_journal::contained_path;
use crate::{Error, Result};

/// The four checks of a claim receipt, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClaimCheck {
    /// The reprojected `backlogHead`.
    BacklogHead,
    /// The Ed25519 signature.
    Signature,
    /// The audit chain's own verification.
    AuditChain,
    /// The `task.claim_receipt` record at the embedded chain head.
    ClaimEvent,
}

impl ClaimCheck {
    /// A stable snake-case name (`backlog_head`, `signature`, `audit_chain`, `claim_event`).
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimCheck::BacklogHead => "backlog_head",
            ClaimCheck::Signature => "signature",
            ClaimCheck::AuditChain => "audit_chain",
            ClaimCheck::ClaimEvent => "claim_event",
        }
    }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimFinding {
    /// Which check failed.
    pub check: ClaimCheck,
    /// What failed, in the reference's words where it has them.
    pub message: String,
}

/// Every problem found with one receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimVerifyReport {
    /// The receipt's task id (`""` for a refusal).
    pub task_id: String,
    /// Whether the receipt is a grant.
    pub granted: bool,
    /// Every failed check, in check order.
    pub findings: Vec<ClaimFinding>,
    /// Derived wire fields stated differently from their recomputation (`receiptHash`,
    /// `pollToken`, `granted`). Informational: the reference ignores these fields, so they do
    /// not affect [`ClaimVerifyReport::ok`]. Filled by [`verify_claim_receipt_in_project`].
    pub derived_field_mismatches: Vec<String>,
}

impl ClaimVerifyReport {
    /// The verdict: no check failed.
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// The first failure: the reason the reference reports, `None` when the receipt verifies.
    pub fn reason(&self) -> Option<&str> {
        self.findings.first().map(|f| f.message.as_str())
    }

    /// The findings of one check.
    pub fn failures_of(&self, check: ClaimCheck) -> impl Iterator<Item = &ClaimFinding> {
        self.findings.iter().filter(move |f| f.check == check)
    }

    /// The report as JSON: `{ok, reason, task_id, granted, findings: [{check, message}],
    /// derived_field_mismatches}`.
    pub fn to_object(&self) -> Object {
        let findings: Vec<Value> = self
            .findings
            .iter()
            .map(|f| {
                Value::Object(
                    Object::new()
                        .with("check", f.check.as_str())
                        .with("message", f.message.as_str()),
                )
            })
            .collect();
        Object::new()
            .with("ok", self.ok())
            .with("reason", self.reason())
            .with("task_id", self.task_id.as_str())
            .with("granted", self.granted)
            .with("findings", Value::Array(findings))
            .with(
                "derived_field_mismatches",
                self.derived_field_mismatches.clone(),
            )
    }
}

/// Verifies `receipt` against raw backlog `rows` and `chain` (all four checks).
///
/// `rows` are hashed as given (minus `claimed_at`): pass `to_dict()` rows for a JSON-backlog
/// receipt ([`verify_claim_receipt_against_backlog`] does) and the embedded snapshot for a
/// task-store one ([`verify_task_store_claim_receipt`]).
pub fn verify_claim_receipt(
    receipt: &ClaimReceipt,
    rows: &[Object],
    chain: &AuditChain,
) -> ClaimVerifyReport {
    let mut report = empty_report(receipt);
    if backlog_head_of_rows(rows) != receipt.backlog_head {
        report.findings.push(ClaimFinding {
            check: ClaimCheck::BacklogHead,
            message: "backlog_head does not match the on-disk backlog".to_owned(),
        });
    }
    verify_after_backlog(receipt, chain, &mut report);
    report
}

/// [`verify_claim_receipt`] over a loaded backlog (its normalised `to_dict()` rows), as the
/// reference's CLI `backlog verify-claim` does.
pub fn verify_claim_receipt_against_backlog(
    receipt: &ClaimReceipt,
    entries: &[BacklogEntry],
    chain: &AuditChain,
) -> ClaimVerifyReport {
    verify_claim_receipt(receipt, &normalised_rows(entries), chain)
}

/// Verifies a task-store receipt (`backlogSource: "task_store"`) against its own embedded
/// `backlogSnapshot`, as the reference's `verify_dir.py` does. A receipt without a snapshot
/// fails the backlog check.
pub fn verify_task_store_claim_receipt(
    receipt: &ClaimReceipt,
    chain: &AuditChain,
) -> ClaimVerifyReport {
    match &receipt.backlog_snapshot {
        Some(rows) => verify_claim_receipt(receipt, rows, chain),
        None => {
            let mut report = empty_report(receipt);
            report.findings.push(ClaimFinding {
                check: ClaimCheck::BacklogHead,
                message: "receipt carries no backlogSnapshot (not a task_store receipt)".to_owned(),
            });
            verify_after_backlog(receipt, chain, &mut report);
            report
        }
    }
}

/// Verifies a presented wire receipt against the project at `project_root`: a task-store
/// receipt against its embedded snapshot, any other against `.sdd/runtime/task-backlog.json`,
/// and both against the chain in `.sdd/audit`. The derived-field comparison is included.
///
/// A backlog that cannot be read or parsed is a [`ClaimCheck::BacklogHead`] finding (the other
/// checks still run). Nothing is written.
///
/// # Errors
///
/// [`Error::Malformed`] when the wire object is not a claim receipt.
pub fn verify_claim_receipt_in_project(
    project_root: &Path,
    wire: &Object,
    key: AuditKey,
) -> Result<ClaimVerifyReport> {
    let receipt = ClaimReceipt::from_wire(wire)?;
    let sdd = project_root.join(".sdd");
    let chain = AuditChain::open(sdd.join("audit"), key);
    let mut report = if receipt.backlog_snapshot.is_some() {
        verify_task_store_claim_receipt(&receipt, &chain)
    } else {
        let backlog = contained_path(
            project_root,
            &sdd.join("runtime"),
            &[super::backlog::BACKLOG_FILE_NAME],
        )
        .and_then(|path| read_backlog(&path));
        match backlog {
            Ok(entries) => verify_claim_receipt_against_backlog(&receipt, &entries, &chain),
            Err(err) => {
                let mut report = empty_report(&receipt);
                report.findings.push(ClaimFinding {
                    check: ClaimCheck::BacklogHead,
                    message: format!("cannot read the backlog: {err}"),
                });
                verify_after_backlog(&receipt, &chain, &mut report);
                report
            }
        }
    };
    report.derived_field_mismatches = receipt.derived_field_mismatches(wire);
    Ok(report)
}

fn empty_report(receipt: &ClaimReceipt) -> ClaimVerifyReport {
    ClaimVerifyReport {
        task_id: receipt.task_id.clone(),
        granted: receipt.granted(),
        findings: Vec::new(),
        derived_field_mismatches: Vec::new(),
    }
}

/// Checks 2 to 4.
fn verify_after_backlog(
    receipt: &ClaimReceipt,
    chain: &AuditChain,
    report: &mut ClaimVerifyReport,
) {
    if let Some(message) = signature_problem(receipt) {
        report.findings.push(ClaimFinding {
            check: ClaimCheck::Signature,
            message,
        });
    }

    // One streaming pass serves checks 3 and 4: the verified records are scanned for the
    // claim event while the walk builds the chain's report.
    let mut records = chain.verified_records();
    let mut anchored = false;
    for record in records.by_ref() {
        if anchored
            || !receipt.granted()
            || record.segment.ends_with(ARCHIVED_SUFFIX)
            || record.event_type != EVENT_TASK_CLAIM_RECEIPT
        {
            continue;
        }
        let detail = |key: &str| record.details.get(key).map(python_str).unwrap_or_default();
        anchored = detail("task_id") == receipt.task_id
            && detail(PREV_CHAIN_DIGEST_KEY) == receipt.chain_head;
    }
    let chain_report = records.finish();
    if !chain_report.ok() {
        let messages = chain_report.verify_messages();
        let joined = if messages.is_empty() {
            "unknown".to_owned()
        } else {
            messages.join("; ")
        };
        report.findings.push(ClaimFinding {
            check: ClaimCheck::AuditChain,
            message: format!("audit chain does not verify: {joined}"),
        });
    }
    if receipt.granted() && !anchored {
        report.findings.push(ClaimFinding {
            check: ClaimCheck::ClaimEvent,
            message: "no task.claim_receipt event at the embedded chain head".to_owned(),
        });
    }
}

/// Check 2 in the reference's words (its `verify_payload` outcome reasons), `None` when the
/// signature is acceptable.
fn signature_problem(receipt: &ClaimReceipt) -> Option<String> {
    let signature = receipt.signature.as_str();
    let pem = receipt.signer_public_key_pem.as_str();
    if signature.is_empty() && pem.is_empty() {
        return receipt
            .granted()
            .then(|| "granted receipt is not signed".to_owned());
    }
    let reason = if signature.is_empty() {
        Some("entry has no signature".to_owned())
    } else if pem.is_empty() {
        Some("catalog has no signer_pubkey".to_owned())
    } else {
        match PublicKey::from_spki_pem(pem) {
            Err(Error::SigningKeyMalformed { reason, .. }) => {
                Some(format!("cannot load public key: {reason}"))
            }
            Err(other) => Some(format!("cannot load public key: {other}")),
            Ok(key) => match python_b64url_decode(signature) {
                None => Some("signature is not valid base64url".to_owned()),
                Some(_) if key.verify_raw(receipt.signed_bytes().as_bytes(), signature) => None,
                Some(_) => Some("signature does not verify".to_owned()),
            },
        }
    };
    reason.map(|reason| format!("receipt signature does not verify: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SigningIdentity;

    fn signed(task_id: &str) -> ClaimReceipt {
        ClaimReceipt::new(task_id, "f", "b", "d", "c")
            .signed(&SigningIdentity::from_seed(&[7; 32]).unwrap())
    }

    #[test]
    fn signature_problems_use_the_reference_reasons() {
        let check = |receipt: ClaimReceipt, expect: Option<&str>| {
            assert_eq!(
                signature_problem(&receipt).as_deref(),
                expect,
                "{receipt:?}"
            );
        };
        check(signed("t"), None);
        check(signed(""), None);
        let mut unsigned = signed("t");
        unsigned.signature.clear();
        unsigned.signer_public_key_pem.clear();
        check(unsigned.clone(), Some("granted receipt is not signed"));
        unsigned.task_id.clear();
        check(unsigned, None);
        let mut no_signature = signed("t");
        no_signature.signature.clear();
        check(
            no_signature,
            Some("receipt signature does not verify: entry has no signature"),
        );
        let mut no_key = signed("");
        no_key.signer_public_key_pem.clear();
        check(
            no_key,
            Some("receipt signature does not verify: catalog has no signer_pubkey"),
        );
        let mut bad_pem = signed("t");
        bad_pem.signer_public_key_pem =
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".to_owned();
        assert!(
            signature_problem(&bad_pem)
                .unwrap()
                .starts_with("receipt signature does not verify: cannot load public key: ")
        );
        let mut forged = signed("t");
        forged.task_id = "t-other".to_owned();
        check(
            forged,
            Some("receipt signature does not verify: signature does not verify"),
        );
        let mut garbled = signed("t");
        garbled.signature = "A".to_owned();
        check(
            garbled,
            Some("receipt signature does not verify: signature is not valid base64url"),
        );
        let mut other_key = signed("t");
        other_key.signer_public_key_pem = SigningIdentity::from_seed(&[8; 32])
            .unwrap()
            .public_key_pem()
            .to_owned();
        check(
            other_key,
            Some("receipt signature does not verify: signature does not verify"),
        );
    }
}
