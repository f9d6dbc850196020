//! Signed claim receipts over the claimable backlog, and their offline verifier
//! (`FORMATS.md` §4; the reference's `core/protocols/mcp/claim_receipt.py`,
//! `core/tasks/claim.py` and `core/routes/task_claim_receipt.py`).
//!
//! An MCP worker claims with `bernstein_claim` and receives a receipt it can re-verify later
//! without a server: the receipt binds the claimed task, the claimer's card fingerprint, the
//! post-claim backlog (`backlogHead`), the filter (`filterDigest`) and the audit-chain head of
//! the `task.claim_receipt` event (`chainHead`) into one `receiptHash`, which is Ed25519-signed.
//!
//! * [`BacklogEntry`] rows with the reference's normalisation, reading any
//!   formatting, writing byte-identically ([`write_backlog`]) under [`BacklogLock`];
//! * [`ClaimFilter`]: eligibility ([`ClaimFilter::allows`], first match in file order) and
//!   [`ClaimFilter::digest`];
//! * [`ClaimReceipt`]: hashes, signature, `pollToken`, wire form;
//! * [`issue_claim_receipt`] (pure over rows + chain), [`claim_in_project`] (the whole
//!   claim on a project directory, under the backlog lock) and [`claim_on_entries`] (the same
//!   over rows the caller read and will write, under a lock it holds);
//! * [`verify_claim_receipt`] and its variants: every check of §4, every failure reported.
//!
//! ```text
//! backlogHead  = "sha256:" + sha256(PY-COMPACT-ASCII([row.to_dict() minus claimed_at]))
//! filterDigest = "sha256:" + sha256(PY-COMPACT-ASCII({capability, completed_ids, max_attempts,
//!                                                    project, role[, task_ids]}))
//! receiptHash  = sha256_hex(PY-COMPACT-ASCII({backlog_head, chain_head, claimer_card_fingerprint,
//!                                            filter_digest, spec_revision, task_id}))
//! signature    = b64url_nopad(Ed25519(PY-COMPACT-ASCII({"receipt_hash": receiptHash})))
//! pollToken    = base64_std(PY-COMPACT-ASCII({backlog_head, chain_head, filter_digest,
//!                                            spec_revision, task_id}))
//! ```

mod backlog;
mod filter;
mod issue;
pub(crate) mod python;
mod receipt;
mod verify;

pub use backlog::{
    BACKLOG_FILE_NAME, BACKLOG_LOCK_FILE_NAME, BacklogEntry, BacklogLock, STATUS_IN_PROGRESS,
    STATUS_OPEN, backlog_path, entries_from_rows, parse_backlog, read_backlog, render_backlog,
    write_backlog,
};
pub use filter::{ClaimFilter, TagAdmission};
pub use issue::{
    CLAIM_EVENT_ACTOR, CLAIM_EVENT_RESOURCE_TYPE, CLAIM_IDENTITY_NAME, ClaimOutcome, ClaimRequest,
    ClaimTime, EVENT_TASK_CLAIM_RECEIPT, MAX_CLAIMER_ID_BYTES, MCP_CLAIM_PATH,
    TASK_STORE_CLAIM_PATH, claim_in_project, claim_on_entries, claim_receipt_event,
    issue_claim_receipt,
};
pub use receipt::{
    BACKLOG_SOURCE_TASK_STORE, ClaimReceipt, REFUSED_TASK_ID, UNREGISTERED_FINGERPRINT,
    WALL_CLOCK_FIELD, backlog_head, backlog_head_of_rows, backlog_head_preimage, normalised_rows,
    refusal_chain_head,
};
pub use verify::{
    ClaimCheck, ClaimFinding, ClaimVerifyReport, verify_claim_receipt,
    verify_claim_receipt_against_backlog, verify_claim_receipt_in_project,
    verify_task_store_claim_receipt,
};
