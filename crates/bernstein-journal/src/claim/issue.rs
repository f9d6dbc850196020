//! Issuing claim receipts: choosing the row, recording the claim on the audit chain, and
//! signing the receipt (the reference's `POST /tasks/claim-receipt` over the JSON backlog).
//!
//! Order of effects for a grant: the `task.claim_receipt` audit event is appended first, and
//! its `prev_chain_digest` becomes the receipt's `chainHead`; only then is the receipt signed
//! and the updated backlog handed back (or, in [`claim_in_project`], written). A claim that
//! cannot be recorded on the chain is therefore never granted. A refusal writes nothing: it is
//! signed over the unchanged backlog and the chain head at the time.

use std::path::Path;

use bernstein_protocol::pyjson::Object;

use super::backlog::{BacklogEntry, BacklogLock, read_backlog, write_backlog};
use super::filter::ClaimFilter;
use super::receipt::{
    ClaimReceipt, REFUSED_TASK_ID, UNREGISTERED_FINGERPRINT, backlog_head_of_rows, normalised_rows,
};
use crate::audit::{AppendedRecord, AuditChain, AuditEvent, Timestamp, python_repr};
use crate::identity::SigningIdentity;
use crate::key::AuditKey;
use crate::run_journal::contained_path;
use crate::{Error, Result};

/// Event type of the audit record a granted claim writes.
pub const EVENT_TASK_CLAIM_RECEIPT: &str = "task.claim_receipt";

/// `claim_path` of a claim from the JSON backlog over MCP.
pub const MCP_CLAIM_PATH: &str = "mcp_claim";

/// `claim_path` of a claim from the task store (the route's fallback).
pub const TASK_STORE_CLAIM_PATH: &str = "by_id";

/// Actor of the `task.claim_receipt` record.
pub const CLAIM_EVENT_ACTOR: &str = "task_server";

/// Resource type of the `task.claim_receipt` record.
pub const CLAIM_EVENT_RESOURCE_TYPE: &str = "task_claim";

/// Name of the claim-signing identity under `.sdd/identity/` (`claim_signing.pem` / `.pub`).
pub const CLAIM_IDENTITY_NAME: &str = "claim_signing";

/// Longest claimer id, in UTF-8 bytes (one path component: the id later names a directory).
pub const MAX_CLAIMER_ID_BYTES: usize = 255;

/// The `task.claim_receipt` audit event (the reference's `record_task_claim_receipt`), without
/// `prev_chain_digest`, which the anchored append adds.
///
/// `task_version` is the row's attempt count after the claim for the JSON backlog, or the task
/// version for the task store.
pub fn claim_receipt_event(
    task_id: &str,
    role: &str,
    claimed_by: &str,
    depends_on: &[String],
    task_version: i64,
    claim_path: &str,
) -> AuditEvent {
    let details = Object::new()
        .with("task_id", task_id)
        .with("role", role)
        .with("claimed_by", claimed_by)
        .with("depends_on", depends_on.to_vec())
        .with("task_version", task_version)
        .with("claim_path", claim_path);
    AuditEvent::new(
        EVENT_TASK_CLAIM_RECEIPT,
        CLAIM_EVENT_ACTOR,
        CLAIM_EVENT_RESOURCE_TYPE,
        task_id,
        details,
    )
}

/// Who is claiming and under which filter.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The claiming worker; recorded as the row's claimer and the event's `claimed_by`.
    pub claimer_id: String,
    /// The claimer's agent card fingerprint; `None` or empty means
    /// [`UNREGISTERED_FINGERPRINT`].
    pub claimer_card_fingerprint: Option<String>,
    /// The eligibility filter.
    pub filter: ClaimFilter,
}

impl ClaimRequest {
    /// A request by `claimer_id` under `filter`, without a card fingerprint.
    pub fn new(claimer_id: impl Into<String>, filter: ClaimFilter) -> ClaimRequest {
        ClaimRequest {
            claimer_id: claimer_id.into(),
            claimer_card_fingerprint: None,
            filter,
        }
    }

    /// The fingerprint the receipt records (`body.claimer_card_fingerprint or "unregistered"`).
    pub fn fingerprint(&self) -> &str {
        match self.claimer_card_fingerprint.as_deref() {
            Some(fingerprint) if !fingerprint.is_empty() => fingerprint,
            _ => UNREGISTERED_FINGERPRINT,
        }
    }

    /// Checks the claimer id the way the reference's route does (`_checked_claim_session`):
    /// one safe path segment, `^[A-Za-z0-9_.-]+$`, not `.` or `..`, at most 255 bytes.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] with the reference's wording.
    pub fn validate(&self) -> Result<()> {
        let id = self.claimer_id.as_str();
        let safe = !id.is_empty()
            && id != "."
            && id != ".."
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if !safe {
            return Err(Error::Malformed {
                what: "claim request",
                reason: format!(
                    "unsafe claimed_by_session {}: must match ^[A-Za-z0-9_.-]+\\Z and must not be '.' or '..'",
                    python_repr(&id.into())
                ),
            });
        }
        if id.len() > MAX_CLAIMER_ID_BYTES {
            return Err(Error::Malformed {
                what: "claim request",
                reason: format!(
                    "claimed_by_session is {} bytes, over the {MAX_CLAIMER_ID_BYTES}-byte filesystem limit for one path component",
                    id.len()
                ),
            });
        }
        Ok(())
    }
}

/// The clock readings a claim uses: `claimed_at` for the row (float Unix seconds) and the
/// audit record's timestamp. Neither enters any hash.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimTime {
    /// Written into the claimed row's `claimed_at`.
    pub claimed_at: f64,
    /// The `task.claim_receipt` record's timestamp (and day segment).
    pub audit_at: Timestamp,
}

impl ClaimTime {
    /// One reading of the system clock, used for both.
    pub fn now() -> ClaimTime {
        let audit_at = Timestamp::now();
        // Microseconds since the epoch fit an f64 exactly for the next few centuries.
        #[allow(clippy::cast_precision_loss)]
        let claimed_at = audit_at.unix_micros() as f64 / 1_000_000.0;
        ClaimTime {
            claimed_at,
            audit_at,
        }
    }
}

/// What issuing a receipt produced.
#[derive(Debug, Clone)]
pub struct ClaimOutcome {
    /// The signed receipt (granted or refusal).
    pub receipt: ClaimReceipt,
    /// The backlog after the claim, for the caller to persist; unchanged for a refusal.
    pub rows: Vec<BacklogEntry>,
    /// `rows` as `BacklogEntry.to_dict()` objects: what `backlogHead` hashed (with
    /// `claimed_at`, which the head leaves out), the file's rows and a task-store receipt's
    /// `backlogSnapshot`.
    pub normalised_rows: Vec<Object>,
    /// Index of the claimed row in `rows`, `None` for a refusal.
    pub claimed_index: Option<usize>,
    /// The `task.claim_receipt` record written for a grant.
    pub audit_record: Option<AppendedRecord>,
}

impl ClaimOutcome {
    /// Whether the claim was granted.
    pub fn granted(&self) -> bool {
        self.claimed_index.is_some()
    }

    /// The claimed row, after the claim.
    pub fn claimed_entry(&self) -> Option<&BacklogEntry> {
        self.claimed_index.and_then(|at| self.rows.get(at))
    }
}

/// Issues a signed claim receipt over `entries` (the backlog in file order).
///
/// 1. The first row the filter allows is chosen.
/// 2. For a grant, the row is claimed in the backlog, which is taken by value and handed back
///    as [`ClaimOutcome::rows`] (status `in_progress`, the claimer, `claimed_at`, one more
///    attempt), the `task.claim_receipt` event (`claim_path: "mcp_claim"`) is appended to
///    `chain` first, and its `prev_chain_digest` becomes `chainHead`. The caller persists
///    [`ClaimOutcome::rows`].
/// 3. For a refusal nothing is written: `taskId` is empty and `chainHead` is the chain's
///    state head, its newest entry that is not a call anchor
///    ([`super::receipt::refusal_chain_head`]).
///
/// `time` `None` takes one clock reading under the chain's append lock, for the record and
/// `claimed_at` both; an explicit [`ClaimTime`] is for deterministic tests and replays.
///
/// `backlogHead` is taken over the post-claim rows without `claimed_at`, so the same snapshot,
/// claimer and filter give a byte-identical `receiptHash` whenever the claim happens.
///
/// # Errors
///
/// [`Error::Malformed`] for an unsafe claimer id or an attempt counter that cannot grow;
/// the chain's errors when the audit append fails (then nothing was granted).
pub fn issue_claim_receipt(
    entries: Vec<BacklogEntry>,
    request: &ClaimRequest,
    signer: &SigningIdentity,
    chain: &AuditChain,
    time: impl Into<Option<ClaimTime>>,
) -> Result<ClaimOutcome> {
    // `None` reads the clock under the chain lock (see `AuditChain::append`): a reading taken
    // earlier could file the record under yesterday's segment after another appender moved the
    // chain into today's, forking it at midnight.
    let time: Option<ClaimTime> = time.into();
    request.validate()?;
    let filter_digest = request.filter.digest();
    let Some(index) = request.filter.select(&entries) else {
        let normalised = normalised_rows(&entries);
        let receipt = ClaimReceipt::new(
            REFUSED_TASK_ID,
            request.fingerprint(),
            backlog_head_of_rows(&normalised),
            filter_digest,
            super::receipt::refusal_chain_head(chain),
        )
        .signed(signer);
        return Ok(ClaimOutcome {
            receipt,
            rows: entries,
            normalised_rows: normalised,
            claimed_index: None,
            audit_record: None,
        });
    };
    let mut rows = entries;
    let claimed = &mut rows[index];
    claimed.claim(&request.claimer_id, time.map_or(0.0, |t| t.claimed_at))?;
    let event = claim_receipt_event(
        &claimed.id,
        claimed.role.as_deref().unwrap_or(""),
        &request.claimer_id,
        &claimed.depends_on,
        claimed.attempts,
        MCP_CLAIM_PATH,
    );
    let task_id = claimed.id.clone();
    let record = match time {
        Some(time) => chain.append_at(&event, time.audit_at)?,
        None => {
            let record = chain.append(&event)?;
            // One reading for both, as `ClaimTime::now` takes it; `claimed_at` enters no hash.
            #[allow(clippy::cast_precision_loss)]
            let claimed_at = Timestamp::parse(&record.timestamp)
                .map_or(0.0, |at| at.unix_micros() as f64 / 1_000_000.0);
            rows[index].claimed_at = Some(claimed_at);
            record
        }
    };
    let normalised = normalised_rows(&rows);
    let receipt = ClaimReceipt::new(
        task_id,
        request.fingerprint(),
        backlog_head_of_rows(&normalised),
        filter_digest,
        record.prev_hmac.clone(),
    )
    .signed(signer);
    Ok(ClaimOutcome {
        receipt,
        rows,
        normalised_rows: normalised,
        claimed_index: Some(index),
        audit_record: Some(record),
    })
}

/// Claims from the JSON backlog of the project at `project_root`, the way the reference's
/// claim-receipt route does for the default tenant:
///
/// * under the backlog lock (`.sdd/runtime/task-backlog.json.lock`) the backlog is read;
/// * the claim-signing identity `.sdd/identity/claim_signing.{pem,pub}` is loaded, or created
///   on first use;
/// * [`issue_claim_receipt`] runs against the chain in `.sdd/audit`, and for a grant the
///   updated backlog is written back (indent 2, unsorted keys, temporary file + rename).
///
/// This reads only the backlog file. Where a task store keeps the file as a projection of its
/// own log (the embedded store of `bernstein-tasks`), claim through that store instead
/// (`EmbeddedStore::claim_on_backlog` with [`claim_on_entries`]), which brings the file in step
/// with the log under its lock first: a backlog a crash left behind the log would otherwise
/// grant a task twice.
///
/// Bad input stops before anything is appended or rewritten: an unsafe claimer id, a backlog
/// path that resolves outside the project, an unreadable or malformed backlog, or an
/// unusable signing identity. (The lock file itself may be created.)
///
/// # Errors
///
/// As described above, plus the chain's and the filesystem's errors. When the backlog cannot
/// be written after the audit event was appended, the error is returned and the chain keeps a
/// claim event whose row was not persisted.
pub fn claim_in_project(
    project_root: &Path,
    key: AuditKey,
    request: &ClaimRequest,
    time: impl Into<Option<ClaimTime>>,
) -> Result<ClaimOutcome> {
    request.validate()?;
    let sdd = project_root.join(".sdd");
    let backlog = contained_path(
        project_root,
        &sdd.join("runtime"),
        &[super::backlog::BACKLOG_FILE_NAME],
    )?;
    let _lock = BacklogLock::acquire(&backlog)?;
    let entries = read_backlog(&backlog)?;
    let outcome = claim_on_entries(project_root, key, request, entries, time)?;
    if outcome.granted() {
        write_backlog(&backlog, &outcome.rows)?;
    }
    Ok(outcome)
}

/// [`claim_in_project`] over backlog rows the caller has read under the backlog lock it still
/// holds, and whose [`ClaimOutcome::rows`] it writes back for a grant: the claim-signing
/// identity is loaded (or created on first use) and [`issue_claim_receipt`] runs against the
/// project's chain. For a task store that keeps the backlog file as a projection of its own
/// log and already holds the file's rows, so the file is not read and parsed twice.
///
/// # Errors
///
/// An unsafe claimer id or an unusable signing identity, before anything is appended; the
/// chain's errors.
pub fn claim_on_entries(
    project_root: &Path,
    key: AuditKey,
    request: &ClaimRequest,
    entries: Vec<BacklogEntry>,
    time: impl Into<Option<ClaimTime>>,
) -> Result<ClaimOutcome> {
    request.validate()?;
    let sdd = project_root.join(".sdd");
    // The identity is loaded (or minted on first use) only once the backlog is known to be
    // usable, and before the chain is touched: a bad key file stops the claim unrecorded.
    let signer = SigningIdentity::load_or_create(&sdd.join("identity"), CLAIM_IDENTITY_NAME)?;
    let chain = AuditChain::open(sdd.join("audit"), key);
    issue_claim_receipt(entries, request, &signer, &chain, time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: &str) -> ClaimRequest {
        ClaimRequest::new(id, ClaimFilter::default())
    }

    /// Both readings are one clock reading: the row's float seconds are the record's
    /// microseconds, and they are the wall clock's seconds.
    #[test]
    fn a_claim_time_is_one_reading_in_seconds() {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let time = ClaimTime::now();
        #[allow(clippy::cast_precision_loss)]
        let micros = time.audit_at.unix_micros() as f64;
        assert!(
            (time.claimed_at * 1_000_000.0 - micros).abs() < 1.0,
            "{} s is not {micros} us",
            time.claimed_at
        );
        assert!(
            (time.claimed_at - before).abs() < 60.0,
            "{} is not the wall clock's {before}",
            time.claimed_at
        );
    }

    #[test]
    fn claimer_ids_are_single_safe_segments() {
        let check = |id: &str, ok: bool| assert_eq!(request(id).validate().is_ok(), ok, "{id:?}");
        check("worker-a", true);
        check("w.1_b", true);
        check(&"a".repeat(255), true);
        check(&"a".repeat(256), false);
        check("", false);
        check(".", false);
        check("..", false);
        check("../x", false);
        check("a/b", false);
        check("a b", false);
        check("é", false);
        assert_eq!(
            request("a/b").validate().unwrap_err().to_string(),
            "malformed claim request: unsafe claimed_by_session 'a/b': must match ^[A-Za-z0-9_.-]+\\Z and must not be '.' or '..'"
        );
    }

    #[test]
    fn fingerprint_defaults_to_unregistered() {
        let mut req = request("w");
        assert_eq!(req.fingerprint(), UNREGISTERED_FINGERPRINT);
        req.claimer_card_fingerprint = Some(String::new());
        assert_eq!(req.fingerprint(), UNREGISTERED_FINGERPRINT);
        req.claimer_card_fingerprint = Some("sha256:ab".to_owned());
        assert_eq!(req.fingerprint(), "sha256:ab");
    }

    #[test]
    fn claim_event_details() {
        let event = claim_receipt_event("t-1", "", "w", &["a".to_owned()], 2, MCP_CLAIM_PATH);
        assert_eq!(event.event_type, EVENT_TASK_CLAIM_RECEIPT);
        assert_eq!(event.actor, "task_server");
        assert_eq!(event.resource_type, "task_claim");
        assert_eq!(event.resource_id, "t-1");
        assert_eq!(
            bernstein_protocol::pyjson::Value::Object(event.details)
                .dumps(bernstein_protocol::pyjson::Dialect::PY_SPACED),
            r#"{"claim_path": "mcp_claim", "claimed_by": "w", "depends_on": ["a"], "role": "", "task_id": "t-1", "task_version": 2}"#
        );
    }
}
