//! The chain-computed progress vector (`core/replay/progress.py`, FORMATS §3.4).
//!
//! Progress is folded only from rows real work produces: `retry.checkpoint`,
//! `task_diff_captured` and `task_review_decision` journal rows, the evidence bundle's declared
//! and passed producers, and the work ledger's phase and attempts. Nothing can set it directly;
//! `artifact_posted` rows never move it. Wall clock never enters it.
//!
//! **Which journal.** The reference MCP poll calls `project_task_progress(sdd, <resolved run
//! id>)`, which slugifies the id a second time and reads `.sdd/runs/task-task-…/journal.jsonl`,
//! a journal that never exists, so its checkpoint/diff/gate counts are always 0.
//! [`project_progress`] reads the journal of the run id it is given. The ledger is read for that
//! same run id and the evidence bundle for the task id, as the reference does.

use super::evidence::read_evidence_counts;
use super::ledger::read_ledger_task_state;
use crate::Result;
use crate::run_journal::{load_journal, row_str, run_journal_path, verify_loaded};
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use std::path::Path;

/// Schema version of the canonical progress vector.
pub const PROGRESS_SCHEMA_VERSION: u64 = 1;

/// Journal event counted as a checkpoint.
pub const EVENT_CHECKPOINT: &str = "retry.checkpoint";
/// Journal event counted as a captured diff.
pub const EVENT_DIFF_CAPTURED: &str = "task_diff_captured";
/// Journal event counted as a gate attempt.
pub const EVENT_REVIEW_DECISION: &str = "task_review_decision";

/// A task's progress, folded from journaled work only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProgressVector {
    /// The task this vector projects.
    pub task_id: String,
    /// [`PROGRESS_SCHEMA_VERSION`].
    pub schema_version: u64,
    /// `retry.checkpoint` rows.
    pub checkpoints: u64,
    /// `task_diff_captured` rows.
    pub diffs_captured: u64,
    /// `task_review_decision` rows.
    pub gate_attempts: u64,
    /// Evidence producers declared in the task's bundle.
    pub evidence_declared: u64,
    /// Evidence producers that passed.
    pub evidence_passed: u64,
    /// Work-ledger phase (`scheduled` .. `completed`), empty when unknown.
    pub ledger_phase: String,
    /// Number of `task.started` transitions.
    pub ledger_attempts: u64,
    /// Whether the ledger phase is `completed`, `failed` or `abandoned`.
    pub terminal: bool,
}

/// The non-journal inputs of the fold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgressInputs {
    /// Work-ledger phase, empty when unknown.
    pub ledger_phase: String,
    /// Number of `task.started` transitions.
    pub ledger_attempts: u64,
    /// Evidence producers declared.
    pub evidence_declared: u64,
    /// Evidence producers that passed.
    pub evidence_passed: u64,
}

/// Whether a work-ledger phase ends the run.
pub fn is_terminal_phase(phase: &str) -> bool {
    matches!(phase, "completed" | "failed" | "abandoned")
}

/// Monotone ordinal of a ledger phase; unknown phases are 0.
pub fn phase_ordinal(phase: &str) -> u64 {
    match phase {
        "scheduled" => 1,
        "started" | "suspended" | "resumed" => 2,
        "completed" | "failed" | "abandoned" => 3,
        _ => 0,
    }
}

/// Folds journal rows and the ledger/evidence inputs into a vector (`fold_progress`).
pub fn fold_progress(task_id: &str, rows: &[Object], inputs: &ProgressInputs) -> ProgressVector {
    let mut vector = ProgressVector {
        task_id: task_id.to_owned(),
        schema_version: PROGRESS_SCHEMA_VERSION,
        checkpoints: 0,
        diffs_captured: 0,
        gate_attempts: 0,
        evidence_declared: inputs.evidence_declared,
        evidence_passed: inputs.evidence_passed,
        ledger_phase: inputs.ledger_phase.clone(),
        ledger_attempts: inputs.ledger_attempts,
        terminal: is_terminal_phase(&inputs.ledger_phase),
    };
    for row in rows {
        match row_str(row, "event").as_str() {
            EVENT_CHECKPOINT => vector.checkpoints += 1,
            EVENT_DIFF_CAPTURED => vector.diffs_captured += 1,
            EVENT_REVIEW_DECISION => vector.gate_attempts += 1,
            _ => {}
        }
    }
    vector
}

impl ProgressVector {
    /// Monotone ordinal of the ledger phase.
    pub fn phase_ordinal(&self) -> u64 {
        phase_ordinal(&self.ledger_phase)
    }

    /// Checkpoints + diffs + gate attempts + passed evidence: the notified `progress` scalar.
    pub fn earned_steps(&self) -> u64 {
        self.checkpoints + self.diffs_captured + self.gate_attempts + self.evidence_passed
    }

    /// The notified `total`: the declared evidence producers, or `None` when there are none.
    pub fn total(&self) -> Option<u64> {
        (self.evidence_declared > 0).then_some(self.evidence_declared)
    }

    /// The notification message:
    /// `phase=<phase|unknown> checkpoints=N diffs=N gates=N evidence=P/D`.
    pub fn message(&self) -> String {
        let phase = if self.ledger_phase.is_empty() {
            "unknown"
        } else {
            &self.ledger_phase
        };
        format!(
            "phase={phase} checkpoints={} diffs={} gates={} evidence={}/{}",
            self.checkpoints,
            self.diffs_captured,
            self.gate_attempts,
            self.evidence_passed,
            self.evidence_declared
        )
    }

    /// The ten canonical fields, in the reference's order.
    pub fn to_canonical_object(&self) -> Object {
        Object::new()
            .with("task_id", self.task_id.as_str())
            .with("schema_version", self.schema_version)
            .with("checkpoints", self.checkpoints)
            .with("diffs_captured", self.diffs_captured)
            .with("gate_attempts", self.gate_attempts)
            .with("evidence_declared", self.evidence_declared)
            .with("evidence_passed", self.evidence_passed)
            .with("ledger_phase", self.ledger_phase.as_str())
            .with("ledger_attempts", self.ledger_attempts)
            .with("terminal", self.terminal)
    }

    /// PY-COMPACT-ASCII of the canonical fields (`canonical_progress_bytes`).
    pub fn canonical_bytes(&self) -> String {
        Value::Object(self.to_canonical_object()).dumps(Dialect::PY_COMPACT_ASCII)
    }

    /// SHA-256 hex of [`ProgressVector::canonical_bytes`].
    pub fn vector_hash(&self) -> String {
        crate::crypto::sha256_hex(self.canonical_bytes().as_bytes())
    }

    /// The API/handle body: the canonical fields, then `earned_steps`, `phase_ordinal`,
    /// `vector_hash`.
    pub fn to_wire_object(&self) -> Object {
        self.to_canonical_object()
            .with("earned_steps", self.earned_steps())
            .with("phase_ordinal", self.phase_ordinal())
            .with("vector_hash", self.vector_hash())
    }

    /// Every component is at least the corresponding component of `other`.
    pub fn dominates(&self, other: &ProgressVector) -> bool {
        self.checkpoints >= other.checkpoints
            && self.diffs_captured >= other.diffs_captured
            && self.gate_attempts >= other.gate_attempts
            && self.evidence_declared >= other.evidence_declared
            && self.evidence_passed >= other.evidence_passed
            && self.ledger_attempts >= other.ledger_attempts
            && self.phase_ordinal() >= other.phase_ordinal()
    }

    /// Dominates `other` and differs from it somewhere in the canonical fields.
    pub fn strictly_advances(&self, other: &ProgressVector) -> bool {
        self.dominates(other) && self.to_canonical_object() != other.to_canonical_object()
    }

    /// Whether a progress tick may be emitted for this vector after `previous` was (the first
    /// tick always may).
    pub fn should_emit_after(&self, previous: Option<&ProgressVector>) -> bool {
        previous.is_none_or(|previous| self.strictly_advances(previous))
    }

    /// Reads a vector back from its wire or canonical form (extra keys such as `vector_hash`
    /// are ignored; the hash is always recomputed from the fields).
    ///
    /// # Errors
    ///
    /// [`crate::Error::Malformed`] when a field is missing or has the wrong type.
    pub fn from_wire(object: &Object) -> Result<ProgressVector> {
        let malformed = |reason: String| crate::Error::Malformed {
            what: "progress vector",
            reason,
        };
        let count = |key: &str| -> Result<u64> {
            match object.get(key) {
                Some(Value::Int(n)) => n
                    .as_u64()
                    .ok_or_else(|| malformed(format!("{key} is not a non-negative integer"))),
                _ => Err(malformed(format!("{key} must be an integer"))),
            }
        };
        let text = |key: &str| -> Result<String> {
            object
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("{key} must be a string")))
        };
        let terminal = match object.get("terminal") {
            Some(Value::Bool(b)) => *b,
            _ => return Err(malformed("terminal must be a boolean".to_owned())),
        };
        Ok(ProgressVector {
            task_id: text("task_id")?,
            schema_version: count("schema_version")?,
            checkpoints: count("checkpoints")?,
            diffs_captured: count("diffs_captured")?,
            gate_attempts: count("gate_attempts")?,
            evidence_declared: count("evidence_declared")?,
            evidence_passed: count("evidence_passed")?,
            ledger_phase: text("ledger_phase")?,
            ledger_attempts: count("ledger_attempts")?,
            terminal,
        })
    }
}

/// Gathers the fold inputs from disk and projects the progress of `task_id`, whose journal and
/// work ledger are those of `run_id` (the MCP poll passes the resolved run id for both).
///
/// * Journal: `.sdd/runs/<run_id>/journal.jsonl`, fail-closed: a journal whose chain does not
///   recompute or that has discarded lines contributes no rows; a missing one contributes none.
/// * Ledger: `.sdd/runtime/ledger/<run_id>/000000.jsonl`, see
///   [`read_ledger_task_state`](super::read_ledger_task_state).
/// * Evidence: `.sdd/evidence/bundles/<sha256(task_id)>.json`, see
///   [`read_evidence_counts`](super::read_evidence_counts).
///
/// # Errors
///
/// Where the reference raises out of `project_task_progress` (so the MCP layer emits no tick):
/// an invalid run id or a journal escaping the project ([`crate::Error::InvalidRunId`],
/// [`crate::Error::Containment`]), an unreadable journal ([`crate::Error::Io`]), and ledger rows
/// or bundles that make the reference's coercions raise uncaught ([`crate::Error::Malformed`]).
pub fn project_progress(
    project_root: &Path,
    task_id: &str,
    run_id: &str,
) -> Result<ProgressVector> {
    let journal_path = run_journal_path(project_root, run_id)?;
    let rows = if journal_path.is_file() {
        let loaded = load_journal(&journal_path)?;
        let verification = verify_loaded(&loaded);
        if verification.ok() {
            loaded.rows
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    let (ledger_phase, ledger_attempts) = read_ledger_task_state(project_root, run_id, task_id)?;
    let (evidence_declared, evidence_passed) = read_evidence_counts(project_root, task_id)?;
    Ok(fold_progress(
        task_id,
        &rows,
        &ProgressInputs {
            ledger_phase,
            ledger_attempts,
            evidence_declared,
            evidence_passed,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(checkpoints: u64, phase: &str) -> ProgressVector {
        fold_progress(
            "t",
            &[],
            &ProgressInputs {
                ledger_phase: phase.to_owned(),
                ..ProgressInputs::default()
            },
        )
        .with_checkpoints(checkpoints)
    }

    impl ProgressVector {
        fn with_checkpoints(mut self, n: u64) -> ProgressVector {
            self.checkpoints = n;
            self
        }
    }

    #[test]
    fn ledger_phases_are_ordered_and_unknown_ones_are_zero() {
        let check = |phase: &str, ordinal: u64, terminal: bool| {
            assert_eq!(phase_ordinal(phase), ordinal, "{phase}");
            assert_eq!(is_terminal_phase(phase), terminal, "{phase}");
        };
        check("scheduled", 1, false);
        check("started", 2, false);
        check("suspended", 2, false);
        check("resumed", 2, false);
        check("completed", 3, true);
        check("failed", 3, true);
        check("abandoned", 3, true);
        check("", 0, false);
        check("Scheduled", 0, false);
    }

    #[test]
    fn advancement_is_strict_and_componentwise() {
        let base = vector(1, "started");
        assert!(base.should_emit_after(None));
        assert!(!base.should_emit_after(Some(&base)));
        assert!(vector(2, "started").strictly_advances(&base));
        assert!(vector(1, "completed").strictly_advances(&base));
        assert!(!vector(0, "completed").strictly_advances(&base));
        // "failed" and "completed" share an ordinal, so the switch is not an advance either way
        // by ordinal, but the canonical fields differ: it counts as advancing.
        assert!(vector(1, "failed").strictly_advances(&vector(1, "completed")));
    }

    #[test]
    fn message_and_total() {
        let mut v = vector(1, "");
        assert_eq!(
            v.message(),
            "phase=unknown checkpoints=1 diffs=0 gates=0 evidence=0/0"
        );
        assert_eq!(v.total(), None);
        v.evidence_declared = 3;
        v.evidence_passed = 2;
        v.ledger_phase = "started".to_owned();
        assert_eq!(v.total(), Some(3));
        assert_eq!(v.earned_steps(), 3);
        assert_eq!(
            v.message(),
            "phase=started checkpoints=1 diffs=0 gates=0 evidence=2/3"
        );
    }

    #[test]
    fn wire_round_trip() {
        let v = vector(4, "completed");
        assert!(v.terminal);
        assert_eq!(ProgressVector::from_wire(&v.to_wire_object()).unwrap(), v);
        let broken = v.to_wire_object().with("checkpoints", -1);
        assert!(ProgressVector::from_wire(&broken).is_err());
    }
}
