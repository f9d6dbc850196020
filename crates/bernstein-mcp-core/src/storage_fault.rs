//! Evidence storage that cannot take a write: a full disk (`ENOSPC`, `EDQUOT`) or a read-only
//! one (`EROFS`), turned into one clear JSON-RPC error.
//!
//! Every `tools/call` writes evidence (its anchoring row and audit entry, then the tool's own
//! rows), and a call whose evidence cannot be written must not be acknowledged. The writers
//! already refuse such a write and take back what they appended; what reaches the dispatcher
//! is an error text carrying the operating system's error (`std::io::Error` renders it as
//! `(os error N)`, whichever crate wrapped it). This module recognises those codes so that the
//! client gets `-32603` with a message that says why and `data` a program can act on, instead
//! of a generic internal error or a tool result that hints at a restarting server.

use serde_json::json;

use crate::jsonrpc::{INTERNAL_ERROR, RpcError};

/// `ENOSPC` and `EDQUOT` (Linux numbering).
const NO_SPACE: [i32; 2] = [28, 122];
/// `EROFS`.
const READ_ONLY: i32 = 30;

/// The JSON-RPC error for a call whose evidence could not be written for want of space or
/// because the storage is read-only, or `None` when `detail` names no such error.
/// `anchored` says whether the call's anchoring row and audit entry were written (the tool
/// then ran and failed) or not (nothing was written for the call).
pub(crate) fn storage_fault(detail: &str, anchored: bool) -> Option<RpcError> {
    let errno = os_error(detail)?;
    let reason = if errno == READ_ONLY {
        "evidence_read_only"
    } else {
        "no_space_for_evidence"
    };
    let what = if reason == "evidence_read_only" {
        "the evidence storage is read-only"
    } else {
        "no space for evidence"
    };
    let effect = if anchored {
        "the call was recorded and refused; its change was not made"
    } else {
        "nothing was recorded and nothing was changed"
    };
    Some(
        RpcError::new(INTERNAL_ERROR, format!("{what}: {effect}")).with_data(json!({
            "reason": reason,
            "errno": errno,
            "anchored": anchored,
            "retryable": true,
            "detail": detail,
        })),
    )
}

/// The last `(os error N)` in `text` whose code is a storage fault.
fn os_error(text: &str) -> Option<i32> {
    text.match_indices("(os error ")
        .filter_map(|(at, marker)| {
            let rest = &text[at + marker.len()..];
            let digits = rest.split(')').next()?;
            digits.parse::<i32>().ok()
        })
        .filter(|code| *code == READ_ONLY || NO_SPACE.contains(code))
        .last()
}

#[cfg(test)]
mod tests {
    use super::storage_fault;

    #[test]
    fn a_full_disk_is_a_clear_error_with_data() {
        let err = storage_fault(
            "append to /p/.sdd/audit/2026-12-02.jsonl: No space left on device (os error 28)",
            false,
        )
        .unwrap();
        assert_eq!(err.code, -32603);
        assert_eq!(
            err.message,
            "no space for evidence: nothing was recorded and nothing was changed"
        );
        let data = err.data.unwrap();
        assert_eq!(data["reason"], "no_space_for_evidence");
        assert_eq!(data["errno"], 28);
        assert_eq!(data["anchored"], false);
    }

    #[test]
    fn a_read_only_disk_says_so() {
        let err = storage_fault(
            "{\"error\": \"create .sdd/runtime: Read-only file system (os error 30)\"}",
            true,
        )
        .unwrap();
        assert_eq!(
            err.message,
            "the evidence storage is read-only: the call was recorded and refused; its change \
             was not made"
        );
        assert_eq!(err.data.unwrap()["reason"], "evidence_read_only");
    }

    /// A quota is a full disk too, and the storage fault is found behind a later error of
    /// another kind in the same text.
    #[test]
    fn a_quota_behind_another_error_is_found() {
        let err = storage_fault(
            "fsync .sdd/audit: Disk quota exceeded (os error 122); cleanup: Permission denied \
             (os error 13)",
            true,
        )
        .unwrap();
        let data = err.data.unwrap();
        assert_eq!(data["reason"], "no_space_for_evidence");
        assert_eq!(data["errno"], 122);
    }

    #[test]
    fn other_errors_are_left_alone() {
        assert!(storage_fault("permission denied (os error 13)", false).is_none());
        assert!(storage_fault("task not found", true).is_none());
        assert!(storage_fault("(os error x)", true).is_none());
    }
}
