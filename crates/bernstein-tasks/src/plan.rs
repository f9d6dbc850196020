//! Plan-mode estimates and the SHA-256 rendering hash an approval decision is bound to.
//!
//! When Bernstein creates a plan it stores `rendering_hash`, a digest of the plan's reviewable
//! content; approving or rejecting the plan recomputes the digest and refuses the decision with
//! 409 if the content changed after review. This module computes that digest byte-compatibly
//! with `core/planning/plan_rendering.py` (`FORMATS.md` §9):
//!
//! ```text
//! sha256_hex(PY-COMPACT-ASCII({plan_id, goal,
//!     task_estimates: sorted by task_id, each {task_id, title, role, model, estimated_tokens,
//!                     estimated_cost_usd: round(x, 6), risk_level, risk_reasons: sorted},
//!     total_estimated_cost_usd: round(x, 6), total_estimated_minutes, high_risk_tasks: sorted
//!     [, journal_head][, journal_verified]}))
//! ```
//!
//! Only the pure part lives here: the plan content, its canonical payload, the hash, Python's
//! `round(x, 6)`, reading a stored plan document, and the mismatch message. Persisting plans is
//! the store's job.

use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use ring::digest;

use crate::error::{Error, FieldProblem};

/// Decimal places the reference keeps on every cost before hashing.
pub const COST_DECIMALS: u32 = 6;

/// The cost and risk estimate of one task in a plan (`TaskCostEstimate`).
#[derive(Debug, Clone, PartialEq)]
pub struct PlanEstimate {
    /// The estimated task.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// Its role.
    pub role: String,
    /// The model the estimate assumes (`"unresolved"` by default).
    pub model: String,
    /// Estimated input plus output tokens.
    pub estimated_tokens: i64,
    /// Estimated cost in USD.
    pub estimated_cost_usd: f64,
    /// `low`, `medium`, `high` or `critical`.
    pub risk_level: String,
    /// Why the task got its risk level.
    pub risk_reasons: Vec<String>,
}

/// The reviewable content of a plan: everything the rendering hash covers.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanContent {
    /// The plan id.
    pub id: String,
    /// The goal the plan was made for.
    pub goal: String,
    /// One estimate per task.
    pub task_estimates: Vec<PlanEstimate>,
    /// Sum of the task costs, in USD.
    pub total_estimated_cost_usd: f64,
    /// Sum of the task time estimates.
    pub total_estimated_minutes: i64,
    /// Ids of the tasks rated high or critical.
    pub high_risk_tasks: Vec<String>,
}

/// A run-journal head bound into a rendering, when the plan was created against a journal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JournalBinding {
    /// The journal's Merkle head (`journal_head`), if bound.
    pub head: Option<String>,
    /// Whether the journal verified (`journal_verified`), if bound.
    pub verified: Option<bool>,
}

impl PlanEstimate {
    fn rendering_object(&self) -> Object {
        let mut reasons = self.risk_reasons.clone();
        // Python sorts `str` by code point, which is the byte order of UTF-8.
        reasons.sort();
        Object::new()
            .with("task_id", self.task_id.as_str())
            .with("title", self.title.as_str())
            .with("role", self.role.as_str())
            .with("model", self.model.as_str())
            .with("estimated_tokens", self.estimated_tokens)
            .with(
                "estimated_cost_usd",
                python_round(self.estimated_cost_usd, COST_DECIMALS),
            )
            .with("risk_level", self.risk_level.as_str())
            .with("risk_reasons", reasons)
    }
}

impl PlanContent {
    /// The canonical payload the hash is taken over, before serialisation.
    pub fn rendering_payload(&self, journal: &JournalBinding) -> Object {
        let mut estimates: Vec<&PlanEstimate> = self.task_estimates.iter().collect();
        // A stable sort, as Python's `sorted`, so equal task ids keep their stored order.
        estimates.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        let mut high_risk = self.high_risk_tasks.clone();
        high_risk.sort();
        let mut payload = Object::new()
            .with("plan_id", self.id.as_str())
            .with("goal", self.goal.as_str())
            .with(
                "task_estimates",
                estimates
                    .into_iter()
                    .map(|e| Value::Object(e.rendering_object()))
                    .collect::<Vec<_>>(),
            )
            .with(
                "total_estimated_cost_usd",
                python_round(self.total_estimated_cost_usd, COST_DECIMALS),
            )
            .with("total_estimated_minutes", self.total_estimated_minutes)
            .with("high_risk_tasks", high_risk);
        if let Some(head) = &journal.head {
            payload.insert("journal_head", head.as_str());
        }
        if let Some(verified) = journal.verified {
            payload.insert("journal_verified", verified);
        }
        payload
    }

    /// The exact bytes that are hashed: the payload in PY-COMPACT-ASCII.
    pub fn rendering_preimage(&self, journal: &JournalBinding) -> String {
        Value::Object(self.rendering_payload(journal)).dumps(Dialect::PY_COMPACT_ASCII)
    }

    /// The rendering hash with no journal bound, which is what the approval gate stores and
    /// recomputes.
    pub fn rendering_hash(&self) -> String {
        self.rendering_hash_with(&JournalBinding::default())
    }

    /// The rendering hash with a journal binding.
    pub fn rendering_hash_with(&self, journal: &JournalBinding) -> String {
        let preimage = self.rendering_preimage(journal);
        hex(digest::digest(&digest::SHA256, preimage.as_bytes()).as_ref())
    }

    /// Reads the content of a stored plan document (`.sdd/runtime/plans/<id>.json`, the
    /// reference's `TaskPlan.to_dict()`), coercing fields the way `TaskPlan.from_dict` does:
    /// missing optional fields take their defaults, counts go through `int()`, costs through
    /// `float()`. Every problem is reported.
    ///
    /// The reference would also hash a non-string title or a non-list reason list verbatim; such
    /// a document is reported as invalid here instead, because no writer produces one.
    pub fn from_stored(document: &Value) -> Result<PlanContent, Error> {
        let mut problems = Vec::new();
        let Some(plan) = document.as_object() else {
            return Err(Error::InvalidPlan(vec![FieldProblem::new(
                "plan",
                "must be a JSON object",
            )]));
        };
        let id = required_str(&mut problems, plan, "id", "id");
        let goal = optional_str(&mut problems, plan, "goal", "goal", "");
        let mut task_estimates = Vec::new();
        match plan.get("task_estimates") {
            None => {}
            Some(Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    let at = format!("task_estimates[{index}]");
                    match item.as_object() {
                        Some(estimate) => {
                            task_estimates.push(read_estimate(&mut problems, estimate, &at));
                        }
                        None => problems.push(FieldProblem::new(at, "must be a JSON object")),
                    }
                }
            }
            Some(_) => problems.push(FieldProblem::new("task_estimates", "must be a list")),
        }
        let total_estimated_cost_usd = optional_float(
            &mut problems,
            plan,
            "total_estimated_cost_usd",
            "total_estimated_cost_usd",
        );
        let total_estimated_minutes = optional_int(
            &mut problems,
            plan,
            "total_estimated_minutes",
            "total_estimated_minutes",
        );
        let high_risk_tasks =
            optional_str_list(&mut problems, plan, "high_risk_tasks", "high_risk_tasks");
        if problems.is_empty() {
            Ok(PlanContent {
                id,
                goal,
                task_estimates,
                total_estimated_cost_usd,
                total_estimated_minutes,
                high_risk_tasks,
            })
        } else {
            Err(Error::InvalidPlan(problems))
        }
    }
}

/// The 409 detail the reference returns when a plan's recomputed hash differs from the stored
/// one. Line breaks in the id are escaped so the message stays on one log line.
pub fn hash_mismatch_message(plan_id: &str, stored: &str, current: &str) -> String {
    let safe_id = plan_id.replace('\n', "\\n").replace('\r', "\\r");
    format!("Plan {safe_id} rendering hash mismatch: stored {stored}, current {current}")
}

/// Python's `round(x, ndigits)` for a float.
///
/// Python rounds the exact binary value of `x` to `ndigits` decimal places, resolving exact
/// ties to even, and converts the decimal result back to the nearest float. Rust's fixed
/// precision formatting renders the exact binary value with the same tie rule, and parsing is
/// correctly rounded, so the two steps reproduce it. Going through `x * 10^n` instead would
/// round twice and differ on values such as `0.0078125`.
pub fn python_round(x: f64, ndigits: u32) -> f64 {
    // Non-finite values come back unchanged, and a float this large is already an integer.
    const INTEGRAL_FROM: f64 = 4_503_599_627_370_496.0; // 2^52
    if !x.is_finite() || x.abs() >= INTEGRAL_FROM {
        return x;
    }
    let digits = ndigits as usize;
    format!("{x:.digits$}").parse().unwrap_or(x)
}

fn read_estimate(problems: &mut Vec<FieldProblem>, estimate: &Object, at: &str) -> PlanEstimate {
    let field = |name: &str| format!("{at}.{name}");
    PlanEstimate {
        task_id: required_str(problems, estimate, "task_id", &field("task_id")),
        title: required_str(problems, estimate, "title", &field("title")),
        role: required_str(problems, estimate, "role", &field("role")),
        model: optional_str(problems, estimate, "model", &field("model"), "unresolved"),
        estimated_tokens: optional_int(
            problems,
            estimate,
            "estimated_tokens",
            &field("estimated_tokens"),
        ),
        estimated_cost_usd: optional_float(
            problems,
            estimate,
            "estimated_cost_usd",
            &field("estimated_cost_usd"),
        ),
        risk_level: optional_str(
            problems,
            estimate,
            "risk_level",
            &field("risk_level"),
            "low",
        ),
        risk_reasons: optional_str_list(problems, estimate, "risk_reasons", &field("risk_reasons")),
    }
}

fn required_str(
    problems: &mut Vec<FieldProblem>,
    object: &Object,
    key: &str,
    field: &str,
) -> String {
    match object.get(key) {
        Some(Value::Str(text)) => text.clone(),
        Some(_) => {
            problems.push(FieldProblem::new(field, "must be a string"));
            String::new()
        }
        None => {
            problems.push(FieldProblem::new(field, "is missing"));
            String::new()
        }
    }
}

fn optional_str(
    problems: &mut Vec<FieldProblem>,
    object: &Object,
    key: &str,
    field: &str,
    default: &str,
) -> String {
    match object.get(key) {
        None => default.to_owned(),
        Some(Value::Str(text)) => text.clone(),
        Some(_) => {
            problems.push(FieldProblem::new(field, "must be a string"));
            String::new()
        }
    }
}

fn optional_str_list(
    problems: &mut Vec<FieldProblem>,
    object: &Object,
    key: &str,
    field: &str,
) -> Vec<String> {
    match object.get(key) {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                match item {
                    Value::Str(text) => out.push(text.clone()),
                    _ => problems.push(FieldProblem::new(
                        format!("{field}[{index}]"),
                        "must be a string",
                    )),
                }
            }
            out
        }
        Some(_) => {
            problems.push(FieldProblem::new(field, "must be a list of strings"));
            Vec::new()
        }
    }
}

/// Python's `float(v)` for the JSON values a plan document can hold (ints, floats, booleans).
fn optional_float(
    problems: &mut Vec<FieldProblem>,
    object: &Object,
    key: &str,
    field: &str,
) -> f64 {
    match object.get(key) {
        None => 0.0,
        Some(Value::Float(x)) => *x,
        // `float(int)` is correctly rounded, and so is parsing the integer's decimal text.
        Some(Value::Int(n)) => n.as_str().parse().unwrap_or(f64::INFINITY),
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(_) => {
            problems.push(FieldProblem::new(field, "must be a number"));
            0.0
        }
    }
}

/// Python's `int(v)` for the JSON values a plan document can hold: integers as they are, floats
/// truncated toward zero, booleans as 0 and 1.
fn optional_int(problems: &mut Vec<FieldProblem>, object: &Object, key: &str, field: &str) -> i64 {
    match object.get(key) {
        None => 0,
        Some(Value::Int(n)) => n.as_i64().unwrap_or_else(|| {
            problems.push(FieldProblem::new(field, "does not fit in 64 bits"));
            0
        }),
        Some(Value::Float(x)) if x.is_finite() && x.abs() < 9.2e18 => x.trunc() as i64,
        Some(Value::Float(_)) => {
            problems.push(FieldProblem::new(field, "must be a finite integer"));
            0
        }
        Some(Value::Bool(b)) => i64::from(*b),
        Some(_) => {
            problems.push(FieldProblem::new(field, "must be an integer"));
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check_round(x: f64, expect: f64) {
        let got = python_round(x, 6);
        assert!(
            got.to_bits() == expect.to_bits(),
            "round({x:?}, 6) = {got:?}, expected {expect:?}"
        );
    }

    #[test]
    fn round_matches_cpython() {
        // Expected values printed by CPython 3.12.1 `round(x, 6)`.
        check_round(0.0078125, 0.007812); // exact tie, rounds to even
        check_round(0.0234375, 0.023438); // exact tie, rounds to even (up)
        check_round(3.0000005, 3.000001); // binary value sits above the tie
        check_round(2.6749995, 2.675); // binary value sits above the tie
        check_round(1.0000005, 1.000001); // binary value sits above the tie
        check_round(0.1 + 0.2, 0.3);
        check_round(0.09, 0.09);
        check_round(3.0, 3.0);
        check_round(-1e-9, -0.0);
        check_round(-0.0, -0.0);
        check_round(1e-7, 0.0);
        check_round(5e-7, 0.0); // 5e-7 is just below the tie in binary
        check_round(5.000000000000001e-7, 1e-6);
        check_round(123456.7890125, 123456.789012); // binary value sits below the tie
        check_round(1e300, 1e300);
        check_round(4503599627370497.0, 4503599627370497.0);
        assert!(python_round(f64::NAN, 6).is_nan());
        check_round(f64::INFINITY, f64::INFINITY);
        check_round(f64::NEG_INFINITY, f64::NEG_INFINITY);
    }

    #[test]
    fn mismatch_message_escapes_line_breaks() {
        assert_eq!(
            hash_mismatch_message("a\nb\r", "s", "c"),
            "Plan a\\nb\\r rendering hash mismatch: stored s, current c"
        );
    }

    #[test]
    fn journal_binding_changes_the_payload() {
        let content = PlanContent {
            id: "p".into(),
            goal: "g".into(),
            task_estimates: Vec::new(),
            total_estimated_cost_usd: 0.0,
            total_estimated_minutes: 0,
            high_risk_tasks: Vec::new(),
        };
        let bound = JournalBinding {
            head: Some("h".into()),
            verified: Some(true),
        };
        assert_eq!(
            content.rendering_preimage(&bound),
            "{\"goal\":\"g\",\"high_risk_tasks\":[],\"journal_head\":\"h\",\"journal_verified\":true,\
             \"plan_id\":\"p\",\"task_estimates\":[],\"total_estimated_cost_usd\":0.0,\
             \"total_estimated_minutes\":0}"
        );
        assert_ne!(
            content.rendering_hash(),
            content.rendering_hash_with(&bound)
        );
    }

    #[test]
    fn stored_document_problems_are_all_reported() {
        let document = Value::parse(
            r#"{"goal": 5, "task_estimates": [{"task_id": "a", "title": 1, "estimated_tokens": "x",
                "risk_reasons": ["ok", 2]}, 7], "total_estimated_cost_usd": "1",
                "high_risk_tasks": "t"}"#,
        )
        .unwrap();
        let err = PlanContent::from_stored(&document).unwrap_err();
        insta::assert_snapshot!(err.to_string());
    }

    #[test]
    fn stored_numbers_are_coerced_like_python() {
        let document = Value::parse(
            r#"{"id": "p", "task_estimates": [{"task_id": "a", "title": "t", "role": "r",
                "estimated_tokens": 12.9, "estimated_cost_usd": 3}],
                "total_estimated_cost_usd": true, "total_estimated_minutes": false}"#,
        )
        .unwrap();
        let content = PlanContent::from_stored(&document).unwrap();
        let estimate = &content.task_estimates[0];
        assert_eq!(estimate.estimated_tokens, 12);
        assert_eq!(estimate.estimated_cost_usd.to_bits(), 3.0f64.to_bits());
        assert_eq!(estimate.model, "unresolved");
        assert_eq!(estimate.risk_level, "low");
        assert_eq!(content.goal, "");
        assert_eq!(content.total_estimated_cost_usd.to_bits(), 1.0f64.to_bits());
        assert_eq!(content.total_estimated_minutes, 0);
        // `float(3)` hashes as `3.0`, never as the integer `3`.
        assert!(
            content
                .rendering_preimage(&JournalBinding::default())
                .contains("\"estimated_cost_usd\":3.0,")
        );
    }

    proptest! {
        #[test]
        fn round_is_idempotent_and_close(x in -1e9f64..1e9) {
            let once = python_round(x, 6);
            prop_assert_eq!(python_round(once, 6).to_bits(), once.to_bits());
            prop_assert!((once - x).abs() <= 5e-7 + x.abs() * 4.0 * f64::EPSILON);
        }

        #[test]
        fn hash_ignores_estimate_and_reason_order(
            ids in proptest::collection::btree_set("[a-z]{1,6}", 1..6),
            reasons in proptest::collection::vec("[a-zA-Z ]{0,8}", 0..4),
            rotate in 0usize..6,
        ) {
            let estimates: Vec<PlanEstimate> = ids.iter().map(|id| PlanEstimate {
                task_id: id.clone(),
                title: format!("title {id}"),
                role: "backend".into(),
                model: "sonnet".into(),
                estimated_tokens: 80_000,
                estimated_cost_usd: 0.72,
                risk_level: "low".into(),
                risk_reasons: reasons.clone(),
            }).collect();
            let content = PlanContent {
                id: "p".into(),
                goal: "g".into(),
                task_estimates: estimates.clone(),
                total_estimated_cost_usd: 1.44,
                total_estimated_minutes: 20,
                high_risk_tasks: ids.iter().cloned().collect(),
            };
            let mut shuffled = content.clone();
            let shift = rotate % shuffled.task_estimates.len();
            shuffled.task_estimates.rotate_left(shift);
            shuffled.high_risk_tasks.reverse();
            for estimate in &mut shuffled.task_estimates {
                estimate.risk_reasons.reverse();
            }
            prop_assert_eq!(content.rendering_hash(), shuffled.rendering_hash());
        }
    }
}
