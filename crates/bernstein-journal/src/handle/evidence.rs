//! The evidence-bundle input of the progress fold (`evidence.bundle.read_evidence_bundle`, as
//! `progress._project_evidence_counts` uses it).
//!
//! The bundle lives at `.sdd/evidence/bundles/<sha256_hex(task_id)>.json`. The fold needs two
//! numbers: how many producers the bundle declares (`len(items)`) and how many passed
//! (`status == "pass"`). Whether the bundle is *usable* follows the reference's
//! `EvidenceBundle.from_bytes` field by field, because a bundle it cannot build counts as
//! `(0, 0)` while some malformed bundles make it raise past every handler (an `AttributeError`
//! for a non-object document, an `OverflowError` for an infinite integer field), which fails the
//! whole projection. Both outcomes are reproduced.
//!
//! Deliberate difference: a bundle path that resolves outside the project root (a symlinked
//! bundle or bundles directory) is ignored, where the reference follows it. Documents in UTF-16
//! or UTF-32 (which Python's `json.loads(bytes)` would detect) count as unusable.

use crate::crypto::sha256_hex;
use crate::run_journal::{PyException, contained_path, python_int_check};
use crate::{Error, Result};
use bernstein_protocol::pyjson::Value;
use std::path::Path;

/// `(declared, passed)` evidence producers of `task_id`, or `(0, 0)` when there is no usable
/// bundle.
///
/// # Errors
///
/// [`Error::Malformed`] where the reference raises past its handlers (see the module docs).
pub fn read_evidence_counts(project_root: &Path, task_id: &str) -> Result<(u64, u64)> {
    if task_id.is_empty() {
        return Ok((0, 0));
    }
    let bundles = project_root.join(".sdd").join("evidence").join("bundles");
    let name = format!("{}.json", sha256_hex(task_id.as_bytes()));
    let Ok(path) = contained_path(project_root, &bundles, &[name.as_str()]) else {
        return Ok((0, 0));
    };
    if !path.is_file() {
        return Ok((0, 0));
    }
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok((0, 0));
    };
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok((0, 0));
    };
    let Ok(document) = Value::parse(text) else {
        return Ok((0, 0));
    };
    match bundle_counts(&document) {
        Ok(counts) => Ok(counts),
        Err(BundleFailure::Caught) => Ok((0, 0)),
        Err(BundleFailure::Escapes(exception)) => Err(Error::Malformed {
            what: "evidence bundle",
            reason: format!("{}: {exception} while building the bundle", path.display()),
        }),
    }
}

/// How building the bundle failed, in terms of the reference's exception handlers.
#[derive(Debug, PartialEq, Eq)]
enum BundleFailure {
    /// `KeyError`, `TypeError` or `ValueError`: `read_evidence_bundle` returns `None`.
    Caught,
    /// Anything else escapes both handlers; the name of the Python exception class.
    Escapes(&'static str),
}

impl From<PyException> for BundleFailure {
    fn from(exception: PyException) -> BundleFailure {
        match exception {
            PyException::Overflow => BundleFailure::Escapes(exception.name()),
            PyException::Value | PyException::Type | PyException::Key => BundleFailure::Caught,
        }
    }
}

/// `EvidenceBundle.from_bytes` then `(len(items), passed_count)`, evaluating fields in the
/// reference's order so the first failure decides the outcome.
fn bundle_counts(document: &Value) -> Result<(u64, u64), BundleFailure> {
    // `row.get("output_diff")` runs first; on a non-dict it raises AttributeError.
    let Value::Object(row) = document else {
        return Err(BundleFailure::Escapes("AttributeError"));
    };
    let required = |key: &str| row.get(key).ok_or(BundleFailure::Caught);
    required("task_id")?;
    let statuses = items_statuses(row.get("items"))?;
    required("gate_passed")?;
    python_int_check(required("timestamp")?)?;
    if let Some(version) = row.get("v") {
        python_int_check(version)?;
    }
    if let Some(Value::Object(diff)) = row.get("output_diff") {
        for key in [
            "declared_and_produced",
            "declared_but_missing",
            "produced_but_undeclared",
        ] {
            match diff.get(key) {
                None | Some(Value::Array(_) | Value::Str(_) | Value::Object(_)) => {}
                Some(_) => return Err(BundleFailure::Caught),
            }
        }
    }
    let passed = statuses.iter().filter(|status| *status == "pass").count();
    Ok((statuses.len() as u64, passed as u64))
}

/// The `status` of every item (`EvidenceItem.from_dict` for each element of
/// `row.get("items", [])`).
fn items_statuses(items: Option<&Value>) -> Result<Vec<String>, BundleFailure> {
    let elements: &[Value] = match items {
        None => &[],
        Some(Value::Array(elements)) => elements,
        // Iterating a string yields one-character strings and iterating a dict yields its keys;
        // indexing either with "name" is a TypeError, so only empty ones pass.
        Some(Value::Str(s)) if s.is_empty() => &[],
        Some(Value::Object(o)) if o.is_empty() => &[],
        Some(_) => return Err(BundleFailure::Caught),
    };
    elements.iter().map(item_status).collect()
}

fn item_status(item: &Value) -> Result<String, BundleFailure> {
    let Value::Object(item) = item else {
        return Err(BundleFailure::Caught);
    };
    let required = |key: &str| item.get(key).ok_or(BundleFailure::Caught);
    required("name")?;
    required("kind")?;
    required("required")?;
    let status = required("status")?.to_python_str();
    python_int_check(required("exit_code")?)?;
    required("content_hash")?;
    python_int_check(required("size")?)?;
    required("truncated")?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts_of(text: &str) -> Result<(u64, u64), BundleFailure> {
        bundle_counts(&Value::parse(text).unwrap())
    }

    const ITEM_PASS: &str = r#"{"name": "a", "kind": "test", "required": true, "status": "pass", "exit_code": 0, "content_hash": "sha256:x", "size": 1, "truncated": false}"#;
    const ITEM_FAIL: &str = r#"{"name": "b", "kind": "lint", "required": false, "status": "fail", "exit_code": 1, "content_hash": "sha256:y", "size": 2, "truncated": false}"#;

    fn bundle(items: &str, extra: &str) -> String {
        format!(
            r#"{{"v": 1, "task_id": "t", "items": {items}, "gate_passed": true, "timestamp": 5{extra}}}"#
        )
    }

    #[test]
    fn counts_follow_the_reference_model() {
        let check = |text: &str, expect: Result<(u64, u64), BundleFailure>| {
            assert_eq!(counts_of(text), expect, "{text}");
        };
        check(
            &bundle(&format!("[{ITEM_PASS}, {ITEM_FAIL}, {ITEM_PASS}]"), ""),
            Ok((3, 2)),
        );
        check(&bundle("[]", ""), Ok((0, 0)));
        check(&bundle("\"\"", ""), Ok((0, 0)));
        check(&bundle("{}", ""), Ok((0, 0)));
        check(&bundle("\"x\"", ""), Err(BundleFailure::Caught));
        check(&bundle("null", ""), Err(BundleFailure::Caught));
        check(&bundle("[1]", ""), Err(BundleFailure::Caught));
        check(
            &bundle(
                &format!("[{ITEM_PASS}]"),
                r#", "output_diff": {"declared_but_missing": null}"#,
            ),
            Err(BundleFailure::Caught),
        );
        check(
            &bundle(
                &format!("[{ITEM_PASS}]"),
                r#", "output_diff": {"declared_but_missing": ["a"]}"#,
            ),
            Ok((1, 1)),
        );
        check(
            r#"{"task_id": "t", "items": [], "timestamp": 1}"#,
            Err(BundleFailure::Caught),
        );
        check(
            r#"{"task_id": "t", "items": [], "gate_passed": 1, "timestamp": "soon"}"#,
            Err(BundleFailure::Caught),
        );
        check(
            r#"{"task_id": "t", "items": [], "gate_passed": 1, "timestamp": Infinity}"#,
            Err(BundleFailure::Escapes("OverflowError")),
        );
        // A caught failure earlier in evaluation order wins over a later escaping one.
        check(
            r#"{"task_id": "t", "items": 5, "gate_passed": 1, "timestamp": Infinity}"#,
            Err(BundleFailure::Caught),
        );
        check("[]", Err(BundleFailure::Escapes("AttributeError")));
    }

    #[test]
    fn bundle_is_found_by_task_id_hash() {
        let dir = tempfile::tempdir().unwrap();
        let bundles = dir.path().join(".sdd/evidence/bundles");
        std::fs::create_dir_all(&bundles).unwrap();
        let name = format!("{}.json", sha256_hex(b"t-42"));
        std::fs::write(
            bundles.join(name),
            bundle(&format!("[{ITEM_PASS}, {ITEM_FAIL}]"), ""),
        )
        .unwrap();
        assert_eq!(read_evidence_counts(dir.path(), "t-42").unwrap(), (2, 1));
        assert_eq!(read_evidence_counts(dir.path(), "other").unwrap(), (0, 0));
        assert_eq!(read_evidence_counts(dir.path(), "").unwrap(), (0, 0));
    }
}
