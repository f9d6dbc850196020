//! Chain verification (`journal.verify_journal` / `verify_events`), reporting every finding.
//!
//! The chain is recomputed from genesis using each row's *position* in the parsed list as its
//! index (not the stored `index` field) and every row key outside
//! [`EXCLUDED_FIELDS`](super::EXCLUDED_FIELDS), so unknown keys are hashed. The hash profile is
//! taken from the first row's `hash_profile` key, if present.
//!
//! Where the reference stops at the first divergent row, this verifier walks on and reports one
//! error per divergent row, continuing the chain from each row's *stored* `event_hash`, so a
//! single edited row yields a single error and a deleted or inserted row yields errors from the
//! seam onwards (the positions, and so the hashes, shift). `divergent_index`, `expected_hash`,
//! `actual_hash` and `head` keep the reference's meaning: they describe the first divergence.

use super::hashing::{GENESIS_HASH, HashProfile, event_hash, payload_hash};
use super::python::python_str_repr;
use super::reader::{LoadedJournal, load_journal};
use crate::Result;
use bernstein_protocol::pyjson::{Object, Value};
use std::path::Path;

/// The outcome of recomputing a journal's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalVerification {
    /// Whether every parsed row recomputes and links from genesis. Proves only that the
    /// surviving rows form a valid chain; see [`JournalVerification::ok`] for reader coverage.
    pub chain_consistent: bool,
    /// Number of parsed rows that entered verification.
    pub count: usize,
    /// The profile the rows were hashed with, or `None` when the first row names an unknown one.
    pub hash_profile: Option<HashProfile>,
    /// Position of the first row whose link or hash does not recompute.
    pub divergent_index: Option<usize>,
    /// Recomputed `event_hash` at `divergent_index` (empty when the row has no JCS form).
    pub expected_hash: Option<String>,
    /// Stored `event_hash` at `divergent_index`.
    pub actual_hash: Option<String>,
    /// The reference's `head`: the last row's `event_hash` when the chain is consistent, else
    /// the head of the verified prefix before the first divergence; empty for no rows.
    pub head: String,
    /// The `event_hash` of the last row that carries a non-empty one (what a run handle embeds
    /// as `journalHead`, verified or not).
    pub journal_head: String,
    /// 0-based physical lines the tolerant reader discarded.
    pub discarded_lines: Vec<usize>,
    /// Every finding, in the reference's wording: `step i: prev_hash break`, `step i:
    /// event_hash mismatch`, `unknown hash_profile '…'`, and the reader's
    /// `reader discarded unparsable or non-object physical line(s): …`.
    pub errors: Vec<String>,
}

impl JournalVerification {
    /// The overall verdict: the chain is consistent **and** no physical line was discarded.
    pub fn ok(&self) -> bool {
        self.chain_consistent && self.discarded_lines.is_empty()
    }

    /// Number of discarded physical lines.
    pub fn discarded(&self) -> usize {
        self.discarded_lines.len()
    }

    /// Reader coverage in the reference's words: `complete` or `partial`.
    pub fn coverage(&self) -> &'static str {
        if self.discarded_lines.is_empty() {
            "complete"
        } else {
            "partial"
        }
    }
}

/// Reads and verifies the journal file at `path` (a missing file is an empty, consistent
/// journal, as in the reference).
///
/// # Errors
///
/// [`crate::Error::Io`] when the file exists but cannot be read.
pub fn verify_journal(path: &Path) -> Result<JournalVerification> {
    Ok(verify_loaded(&load_journal(path)?))
}

/// Verifies an already loaded journal, folding the reader's discards into the report.
pub fn verify_loaded(loaded: &LoadedJournal) -> JournalVerification {
    let mut report = verify_rows(&loaded.rows);
    if !loaded.discarded_lines.is_empty() {
        let joined: Vec<String> = loaded
            .discarded_lines
            .iter()
            .map(usize::to_string)
            .collect();
        report.errors.push(format!(
            "reader discarded unparsable or non-object physical line(s): {}",
            joined.join(", ")
        ));
        report.discarded_lines.clone_from(&loaded.discarded_lines);
    }
    report
}

/// The hash profile a journal's rows declare: the first row's `hash_profile` (as Python's
/// `str()` of the value), defaulting to `py-json-v1`. `Err` carries an unknown name.
pub(crate) fn detect_hash_profile(rows: &[Object]) -> Result<HashProfile, String> {
    match rows.first().and_then(|row| row.get("hash_profile")) {
        None => Ok(HashProfile::PyJsonV1),
        Some(value) => {
            let name = value.to_python_str();
            HashProfile::from_name(&name).ok_or(name)
        }
    }
}

/// Python's `str(row.get(key, ""))`.
pub(crate) fn row_str(row: &Object, key: &str) -> String {
    row.get(key).map(Value::to_python_str).unwrap_or_default()
}

/// The last non-empty `event_hash` among `rows` (the reference's `_journal_head`).
pub fn journal_head(rows: &[Object]) -> String {
    rows.iter()
        .map(|row| row_str(row, "event_hash"))
        .rfind(|hash| !hash.is_empty())
        .unwrap_or_default()
}

/// Recomputes the chain over in-memory rows (`verify_events`).
pub fn verify_rows(rows: &[Object]) -> JournalVerification {
    let mut check = match detect_hash_profile(rows) {
        Ok(profile) => ChainCheck::new(profile),
        Err(unknown) => {
            let mut report = ChainCheck::new(HashProfile::PyJsonV1).finish();
            report.chain_consistent = false;
            report.hash_profile = None;
            report.count = rows.len();
            report.journal_head = journal_head(rows);
            report.errors.push(format!(
                "unknown hash_profile {}",
                python_str_repr(&unknown)
            ));
            return report;
        }
    };
    for row in rows {
        check.push(row);
    }
    check.finish()
}

/// The chain recomputation of [`verify_rows`], fed one row at a time, so a journal of any
/// length is verified in constant memory (the writer's full read streams through it).
#[derive(Debug, Clone)]
pub(crate) struct ChainCheck {
    profile: HashProfile,
    prev_hash: String,
    report: JournalVerification,
}

impl ChainCheck {
    /// A check of rows hashed with `profile` (see [`detect_hash_profile`]).
    pub(crate) fn new(profile: HashProfile) -> ChainCheck {
        ChainCheck {
            profile,
            prev_hash: GENESIS_HASH.to_owned(),
            report: JournalVerification {
                chain_consistent: true,
                count: 0,
                hash_profile: Some(profile),
                divergent_index: None,
                expected_hash: None,
                actual_hash: None,
                head: String::new(),
                journal_head: String::new(),
                discarded_lines: Vec::new(),
                errors: Vec::new(),
            },
        }
    }

    /// The profile the rows are hashed with.
    pub(crate) fn profile(&self) -> HashProfile {
        self.profile
    }

    /// Checks the next row against the chain so far.
    pub(crate) fn push(&mut self, row: &Object) {
        let index = self.report.count;
        self.report.count += 1;
        let event_type = row_str(row, "event");
        // A row with no canonical form (NaN under jcs-v2) cannot have been written by a correct
        // writer; it is reported as a hash mismatch with an empty expected hash.
        let expected = payload_hash(self.profile, &event_type, row)
            .map(|p_hash| {
                event_hash(
                    self.profile,
                    &self.prev_hash,
                    &event_type,
                    &p_hash,
                    index as u64,
                )
            })
            .unwrap_or_default();
        let stored_hash = row_str(row, "event_hash");
        let stored_prev = row_str(row, "prev_hash");
        let finding = if stored_prev != self.prev_hash {
            Some("prev_hash break")
        } else if stored_hash != expected {
            Some("event_hash mismatch")
        } else {
            None
        };
        let report = &mut self.report;
        if let Some(what) = finding {
            report.errors.push(format!("step {index}: {what}"));
            if report.chain_consistent {
                report.chain_consistent = false;
                report.divergent_index = Some(index);
                report.expected_hash = Some(expected);
                report.actual_hash = Some(stored_hash.clone());
                report.head.clone_from(&self.prev_hash);
            }
        }
        if !stored_hash.is_empty() {
            report.journal_head.clone_from(&stored_hash);
        }
        self.prev_hash = stored_hash;
    }

    /// The report over every row pushed.
    pub(crate) fn finish(mut self) -> JournalVerification {
        if self.report.chain_consistent {
            self.report.head = self.prev_hash;
        }
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_journal::reader::parse_journal_bytes;

    fn row(text: &str) -> Object {
        match Value::parse(text).unwrap() {
            Value::Object(o) => o,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn empty_journal_is_consistent_with_empty_head() {
        let report = verify_rows(&[]);
        assert!(report.chain_consistent && report.ok());
        assert_eq!(report.head, "");
        assert_eq!(report.count, 0);
    }

    #[test]
    fn unknown_profile_is_reported_with_python_repr() {
        let report = verify_rows(&[row(r#"{"hash_profile": "jcs-v9", "event": "x"}"#)]);
        assert!(!report.chain_consistent);
        assert_eq!(report.errors, vec!["unknown hash_profile 'jcs-v9'"]);
        assert_eq!(report.divergent_index, None);
        let numeric = verify_rows(&[row(r#"{"hash_profile": 2}"#)]);
        assert_eq!(numeric.errors, vec!["unknown hash_profile '2'"]);
    }

    #[test]
    fn missing_chain_fields_break_at_step_zero() {
        let report = verify_rows(&[row(r#"{"event": "run_started"}"#)]);
        assert_eq!(report.errors, vec!["step 0: event_hash mismatch"]);
        assert_eq!(report.divergent_index, Some(0));
        assert_eq!(report.actual_hash.as_deref(), Some(""));
        let linked = verify_rows(&[row(r#"{"event": "x", "prev_hash": "zz"}"#)]);
        assert_eq!(linked.errors, vec!["step 0: prev_hash break"]);
    }

    #[test]
    fn discards_are_reported_after_chain_errors() {
        let loaded = parse_journal_bytes(b"garbage\n\n[]\n");
        let report = verify_loaded(&loaded);
        assert!(report.chain_consistent);
        assert!(!report.ok());
        assert_eq!(report.discarded(), 2);
        assert_eq!(report.coverage(), "partial");
        assert_eq!(
            report.errors,
            vec!["reader discarded unparsable or non-object physical line(s): 0, 2"]
        );
    }
}
