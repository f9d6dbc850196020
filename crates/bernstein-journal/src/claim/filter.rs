//! The claim filter (the reference's `ClaimFilter`): which backlog row a claimer may take, and
//! the `filterDigest` that records the policy a receipt was issued under.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::backlog::{BacklogEntry, STATUS_OPEN};
use crate::crypto::sha256_hex;

/// A tag admission predicate (the reference's `ClaimFilter.admits`, #2544): given a row's
/// declared tags, `true` when every tag is currently admissible.
pub type TagAdmission = Arc<dyn Fn(&BTreeSet<String>) -> bool + Send + Sync>;

/// Eligibility constraints for a claim.
///
/// `None` fields constrain nothing. The tag admission predicate is not part of the
/// [`ClaimFilter::digest`] (the reference leaves it out too: it is a live admission-engine
/// projection, not a recordable value).
#[derive(Clone, Default)]
pub struct ClaimFilter {
    /// Only rows with exactly this project.
    pub project: Option<String>,
    /// Only rows with exactly this role.
    pub role: Option<String>,
    /// Only rows offering this capability.
    pub capability: Option<String>,
    /// Ids whose work is complete; every `depends_on` of a claimable row must be here.
    pub completed_ids: BTreeSet<String>,
    /// Global attempt ceiling; a row is skipped once `attempts >= min(this, row.max_attempts)`.
    pub max_attempts: Option<i64>,
    /// A task-scoped caller's allowlist of row ids; an empty set admits nothing. Recorded in
    /// the digest only when set.
    pub task_ids: Option<BTreeSet<String>>,
    /// Tag admission; consulted only for rows that declare tags. `None` disables the gate.
    pub admits: Option<TagAdmission>,
}

impl fmt::Debug for ClaimFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimFilter")
            .field("project", &self.project)
            .field("role", &self.role)
            .field("capability", &self.capability)
            .field("completed_ids", &self.completed_ids)
            .field("max_attempts", &self.max_attempts)
            .field("task_ids", &self.task_ids)
            .field("admits", &self.admits.as_ref().map(|_| "<predicate>"))
            .finish()
    }
}

impl ClaimFilter {
    /// Whether `entry` satisfies every predicate, in the reference's order:
    ///
    /// 1. `status == "open"` and no claimer;
    /// 2. the id is in `task_ids`, when a scope is set;
    /// 3. `project` and `role` equal the filter's, when set (a row without one never matches);
    /// 4. the required `capability` is offered, when set;
    /// 5. `attempts < min(max_attempts, row.max_attempts)` over the limits that are set;
    /// 6. when the row declares tags and an admission predicate is set, it admits them;
    /// 7. every `depends_on` id is in `completed_ids`.
    pub fn allows(&self, entry: &BacklogEntry) -> bool {
        if entry.status != STATUS_OPEN || entry.claimer.is_some() {
            return false;
        }
        if let Some(scope) = &self.task_ids
            && !scope.contains(&entry.id)
        {
            return false;
        }
        if let Some(project) = &self.project
            && entry.project.as_ref() != Some(project)
        {
            return false;
        }
        if let Some(role) = &self.role
            && entry.role.as_ref() != Some(role)
        {
            return false;
        }
        if let Some(capability) = &self.capability
            && !entry.capabilities.contains(capability)
        {
            return false;
        }
        let limit = match (self.max_attempts, entry.max_attempts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if limit.is_some_and(|limit| entry.attempts >= limit) {
            return false;
        }
        if let Some(admits) = &self.admits
            && !entry.tags.is_empty()
        {
            let tags: BTreeSet<String> = entry.tags.iter().cloned().collect();
            if !admits(&tags) {
                return false;
            }
        }
        entry
            .depends_on
            .iter()
            .all(|dep| self.completed_ids.contains(dep))
    }

    /// Index of the first row in file order that [`ClaimFilter::allows`].
    pub fn select(&self, entries: &[BacklogEntry]) -> Option<usize> {
        entries.iter().position(|entry| self.allows(entry))
    }

    /// The digest pre-image: PY-COMPACT-ASCII of `{capability, completed_ids (sorted),
    /// max_attempts, project, role[, task_ids (sorted), only when a scope is set]}`.
    pub fn digest_preimage(&self) -> String {
        let mut preimage = Object::new()
            .with("project", self.project.clone())
            .with("role", self.role.clone())
            .with("capability", self.capability.clone())
            .with("completed_ids", sorted_strings(&self.completed_ids))
            .with("max_attempts", self.max_attempts);
        if let Some(scope) = &self.task_ids {
            preimage.insert("task_ids", sorted_strings(scope));
        }
        Value::Object(preimage).dumps(Dialect::PY_COMPACT_ASCII)
    }

    /// `filterDigest`: `"sha256:" + sha256_hex(digest_preimage)`.
    pub fn digest(&self) -> String {
        format!("sha256:{}", sha256_hex(self.digest_preimage().as_bytes()))
    }
}

/// A set as a JSON array in Python `sorted()` order (code point order, which is the `String`
/// order).
fn sorted_strings(set: &BTreeSet<String>) -> Value {
    Value::Array(set.iter().map(|s| Value::Str(s.clone())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn open_row(id: &str) -> BacklogEntry {
        BacklogEntry::new(id)
    }

    #[test]
    fn debug_names_every_field_and_hides_the_predicate() {
        let filter = ClaimFilter {
            role: Some("backend".to_owned()),
            completed_ids: set(&["t-0"]),
            admits: Some(Arc::new(|_: &BTreeSet<String>| true)),
            ..ClaimFilter::default()
        };
        assert_eq!(
            format!("{filter:?}"),
            r#"ClaimFilter { project: None, role: Some("backend"), capability: None, completed_ids: {"t-0"}, max_attempts: None, task_ids: None, admits: Some("<predicate>") }"#
        );
    }

    #[test]
    fn every_predicate_gates() {
        let base = || {
            let mut row = open_row("t-1");
            row.role = Some("backend".to_owned());
            row.project = Some("demo".to_owned());
            row.capabilities = vec!["python".to_owned()];
            row.depends_on = vec!["t-0".to_owned()];
            row.tags = vec!["gpu".to_owned()];
            row
        };
        let filter = || ClaimFilter {
            project: Some("demo".to_owned()),
            role: Some("backend".to_owned()),
            capability: Some("python".to_owned()),
            completed_ids: set(&["t-0"]),
            max_attempts: Some(2),
            task_ids: Some(set(&["t-1"])),
            admits: Some(Arc::new(|tags: &BTreeSet<String>| {
                !tags.contains("blocked")
            })),
        };
        let check = |row: BacklogEntry, filter: ClaimFilter, expect: bool, why: &str| {
            assert_eq!(filter.allows(&row), expect, "{why}");
        };
        check(base(), filter(), true, "everything matches");
        check(
            base(),
            ClaimFilter::default(),
            false,
            "dependency not complete",
        );
        let mut row = base();
        row.depends_on.clear();
        check(
            row,
            ClaimFilter::default(),
            true,
            "empty filter admits a free open row",
        );

        let mut row = base();
        row.status = "done".to_owned();
        check(row, filter(), false, "status must be open");
        let mut row = base();
        row.claimer = Some("w".to_owned());
        check(row, filter(), false, "claimer must be unset");
        check(
            base(),
            ClaimFilter {
                task_ids: Some(set(&[])),
                ..filter()
            },
            false,
            "an empty scope admits nothing",
        );
        let mut row = base();
        row.project = None;
        check(
            row,
            filter(),
            false,
            "a row without a project never matches a project filter",
        );
        check(
            base(),
            ClaimFilter {
                role: Some("qa".to_owned()),
                ..filter()
            },
            false,
            "role mismatch",
        );
        check(
            base(),
            ClaimFilter {
                capability: Some("rust".to_owned()),
                ..filter()
            },
            false,
            "capability missing",
        );
        let mut row = base();
        row.attempts = 2;
        check(row, filter(), false, "attempts at the filter ceiling");
        let mut row = base();
        row.attempts = 1;
        row.max_attempts = Some(1);
        check(row, filter(), false, "the row ceiling is lower");
        let mut row = base();
        row.attempts = 5;
        check(
            row,
            ClaimFilter {
                max_attempts: None,
                ..filter()
            },
            true,
            "no ceiling at all",
        );
        let mut row = base();
        row.tags.push("blocked".to_owned());
        check(row, filter(), false, "tag admission refuses");
        let mut row = base();
        row.tags = vec!["blocked".to_owned()];
        check(
            row,
            ClaimFilter {
                admits: None,
                ..filter()
            },
            true,
            "no admission predicate disables the tag gate",
        );
        let mut row = base();
        row.tags.clear();
        check(
            row,
            ClaimFilter {
                admits: Some(Arc::new(|_: &BTreeSet<String>| false)),
                ..filter()
            },
            true,
            "an untagged row skips admission",
        );
    }

    #[test]
    fn select_takes_the_first_match_in_file_order() {
        let rows = vec![open_row("b"), open_row("a")];
        assert_eq!(ClaimFilter::default().select(&rows), Some(0));
        let scoped = ClaimFilter {
            task_ids: Some(set(&["a"])),
            ..ClaimFilter::default()
        };
        assert_eq!(scoped.select(&rows), Some(1));
        assert_eq!(scoped.select(&[]), None);
    }

    #[test]
    fn digest_matches_the_vectors() {
        // fixtures/vectors/claim/expected.json: granted.filter_digest_preimage and the two
        // receipts' filterDigest values.
        let granted = ClaimFilter {
            role: Some("backend".to_owned()),
            completed_ids: set(&["t-1"]),
            ..ClaimFilter::default()
        };
        assert_eq!(
            granted.digest_preimage(),
            r#"{"capability":null,"completed_ids":["t-1"],"max_attempts":null,"project":null,"role":"backend"}"#
        );
        assert_eq!(
            granted.digest(),
            "sha256:f07424092b48f6b015982de1b221f5177750a6aeb12d14bdc73f2806d77671e8"
        );
        let refused = ClaimFilter {
            role: Some("qa".to_owned()),
            max_attempts: Some(2),
            ..ClaimFilter::default()
        };
        assert_eq!(
            refused.digest(),
            "sha256:178c56fd3213d7a1e7164a544b72fb171bbd670f20cc0a3843cc3b80bb54d562"
        );
        let scoped = ClaimFilter {
            task_ids: Some(set(&["z", "a"])),
            admits: Some(Arc::new(|_: &BTreeSet<String>| true)),
            ..ClaimFilter::default()
        };
        assert_eq!(
            scoped.digest_preimage(),
            r#"{"capability":null,"completed_ids":[],"max_attempts":null,"project":null,"role":null,"task_ids":["a","z"]}"#
        );
    }
}
