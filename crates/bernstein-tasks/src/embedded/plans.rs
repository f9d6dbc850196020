//! Plan mode for the embedded store: estimates, and plan documents under
//! `.sdd/runtime/plans/<id>.json` in the reference's `TaskPlan.to_dict()` shape (`indent=2`).
//!
//! The estimate follows the reference's `_estimate_task_cost` with no seed configuration: tokens
//! by scope (30 000 / 80 000 / 200 000), the task's model or the complexity default (`haiku`,
//! `sonnet`, `opus`), and a blended price per 1 000 tokens for the Claude families
//! (0.003 / 0.009 / 0.015 USD). A model outside those families is estimated at $0, which is what
//! the reference's shared `is_free_route` check does for a model its price table does not list;
//! this crate carries no copy of that table, so a priced non-Claude model is under-estimated.
//! Risk follows `_classify_risk`; its keyword list is checked in declaration order (the
//! reference iterates a `frozenset`, so its order varies with `PYTHONHASHSEED`).

use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::{Object, Value};

use super::fsio;
use crate::backend::{PlanRecord, PlanStatus};
use crate::error::{Error, Resource};
use crate::model::{Complexity, Scope, Task, TaskId};
use crate::plan::{PlanContent, PlanEstimate};

/// Keywords in a title or description that mark high-risk work (`_HIGH_RISK_KEYWORDS`).
const HIGH_RISK_KEYWORDS: &[&str] = &[
    "auth",
    "authentication",
    "authorization",
    "schema",
    "migration",
    "database",
    "security",
    "secrets",
    "credentials",
    "permissions",
    "rbac",
    "encryption",
    "deploy",
    "infrastructure",
    "production",
    "billing",
    "payment",
    "delete",
    "drop",
    "destructive",
];

/// Roles that carry risk by themselves (`_HIGH_RISK_ROLES`).
const HIGH_RISK_ROLES: &[&str] = &["security", "devops", "infrastructure", "dba"];

/// Blended USD per 1 000 tokens of the model families the estimate prices.
const PRICE_PER_1K: &[(&str, f64)] = &[("haiku", 0.003), ("sonnet", 0.009), ("opus", 0.015)];

/// The risk level and reasons of a task (`_classify_risk`).
fn classify_risk(task: &Task) -> (String, Vec<String>) {
    let mut reasons = Vec::new();
    let text = format!("{} {}", task.title, task.description).to_lowercase();
    let matched: Vec<&str> = HIGH_RISK_KEYWORDS
        .iter()
        .copied()
        .filter(|keyword| text.contains(keyword))
        .collect();
    if !matched.is_empty() {
        reasons.push(format!(
            "Contains high-risk keywords: {}",
            matched.join(", ")
        ));
    }
    if HIGH_RISK_ROLES.contains(&task.role.to_lowercase().as_str()) {
        reasons.push(format!("High-risk role: {}", task.role));
    }
    if task.complexity == Complexity::High {
        reasons.push("High complexity task".to_owned());
    }
    if task.scope == Scope::Large {
        reasons.push("Large scope task".to_owned());
    }
    let severe = reasons.iter().any(|reason| {
        let lower = reason.to_lowercase();
        lower.contains("security") || lower.contains("auth")
    });
    let level = if reasons.len() >= 2 || severe {
        if reasons.len() >= 3 {
            "critical"
        } else {
            "high"
        }
    } else if !reasons.is_empty() {
        "medium"
    } else {
        "low"
    };
    (level.to_owned(), reasons)
}

/// The cost and risk estimate of one task (`_estimate_task_cost`).
pub(crate) fn estimate(task: &Task) -> PlanEstimate {
    let model = task.model.clone().unwrap_or_else(|| {
        match task.complexity {
            Complexity::Low => "haiku",
            Complexity::Medium => "sonnet",
            Complexity::High => "opus",
        }
        .to_owned()
    });
    let tokens: i64 = match task.scope {
        Scope::Small => 30_000,
        Scope::Medium => 80_000,
        Scope::Large => 200_000,
    };
    let lower = model.to_lowercase();
    let rate = if lower.trim().ends_with(":free") {
        0.0
    } else {
        PRICE_PER_1K
            .iter()
            .find(|(family, _)| lower.contains(family))
            .map_or(0.0, |(_, price)| *price)
    };
    let (risk_level, risk_reasons) = classify_risk(task);
    PlanEstimate {
        task_id: task.id.to_string(),
        title: task.title.clone(),
        role: task.role.clone(),
        model,
        estimated_tokens: tokens,
        estimated_cost_usd: (tokens as f64 / 1000.0) * rate,
        risk_level,
        risk_reasons,
    }
}

/// A pending plan for `goal` over `tasks`, with its rendering hash bound.
pub(crate) fn build(id: String, goal: &str, tasks: &[Task], now: f64) -> PlanRecord {
    let estimates: Vec<PlanEstimate> = tasks.iter().map(estimate).collect();
    let content = PlanContent {
        id,
        goal: goal.to_owned(),
        total_estimated_cost_usd: estimates.iter().map(|e| e.estimated_cost_usd).sum(),
        total_estimated_minutes: tasks.iter().map(|t| i64::from(t.estimated_minutes)).sum(),
        high_risk_tasks: estimates
            .iter()
            .filter(|e| matches!(e.risk_level.as_str(), "high" | "critical"))
            .map(|e| e.task_id.clone())
            .collect(),
        task_estimates: estimates,
    };
    let rendering_hash = content.rendering_hash();
    PlanRecord {
        content,
        status: PlanStatus::Pending,
        created_at: now,
        decided_at: None,
        decision_reason: String::new(),
        rendering_hash,
    }
}

/// Where plan documents live.
pub(crate) fn plans_dir(sdd: &Path) -> PathBuf {
    sdd.join("runtime").join("plans")
}

/// The document path of plan `plan_id`, after checking the id is one safe path segment.
fn plan_path(dir: &Path, plan_id: &str) -> Result<PathBuf, Error> {
    let id = TaskId::parse(plan_id)?;
    Ok(dir.join(format!("{id}.json")))
}

/// Writes `plan` durably (temporary file, fsync, rename, directory fsync).
#[cfg(test)]
pub(crate) fn write(dir: &Path, plan: &PlanRecord) -> Result<(), Error> {
    let path = plan_path(dir, plan.id())?;
    let text = super::evidence::plan_text(&plan.to_object());
    fsio::write_atomic(&path, text.as_bytes())
}

/// Where the document of `plan` (a plan object a transaction owes) stands against the disk.
enum Standing {
    /// No document.
    Missing,
    /// A pending document for a plan the transaction decided.
    Behind,
    /// The document is as far along as the plan object, or further.
    Current,
}

fn standing(dir: &Path, plan: &Object) -> Result<(PathBuf, Standing), Error> {
    let id = plan.get("id").and_then(Value::as_str).unwrap_or_default();
    let path = plan_path(dir, id)?;
    let wanted = plan
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("pending");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((path, Standing::Missing)),
        Err(e) => return Err(Error::storage("read", &path, &e)),
    };
    let stored = parse(&path, &text)?;
    let standing = if stored.status == PlanStatus::Pending && wanted != "pending" {
        Standing::Behind
    } else {
        Standing::Current
    };
    Ok((path, standing))
}

/// Writes the document of `plan` when the disk is behind it: missing, or still pending while
/// `plan` is decided. A document is never moved backwards, so replaying an old transaction
/// cannot undo a later decision.
pub(crate) fn write_forward(dir: &Path, plan: &Object) -> Result<(), Error> {
    match standing(dir, plan)? {
        (_, Standing::Current) => Ok(()),
        (path, Standing::Missing | Standing::Behind) => {
            fsio::write_atomic(&path, super::evidence::plan_text(plan).as_bytes())
        }
    }
}

/// Why the disk is behind `plan`, as a gap kind and a sentence, or `None` when it is not.
pub(crate) fn behind(dir: &Path, plan: &Object) -> Option<(&'static str, String)> {
    match standing(dir, plan) {
        Ok((_, Standing::Current)) => None,
        Ok((path, Standing::Missing)) => Some((
            "missing_plan",
            format!("plan document {} does not exist", path.display()),
        )),
        Ok((path, Standing::Behind)) => Some((
            "stale_plan",
            format!(
                "plan document {} is pending, the task log decided it",
                path.display()
            ),
        )),
        Err(e) => Some(("unreadable_plan", e.to_string())),
    }
}

/// Reads plan `plan_id`: [`Error::NotFound`] when there is no document, [`Error::CorruptStore`]
/// when it is not a plan.
pub(crate) fn read(dir: &Path, plan_id: &str) -> Result<PlanRecord, Error> {
    let path = plan_path(dir, plan_id)?;
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotFound {
                resource: Resource::Plan,
                id: plan_id.to_owned(),
            });
        }
        Err(e) => return Err(Error::storage("read", &path, &e)),
    };
    let plan = parse(&path, &text)?;
    if plan.id() != plan_id {
        return Err(corrupt(
            &path,
            format!("the document names plan {:?}", plan.id()),
        ));
    }
    Ok(plan)
}

/// Every plan, newest first (`created_at` descending, then by id).
pub(crate) fn list(dir: &Path) -> Result<Vec<PlanRecord>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::storage("list", dir, &e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::storage("list", dir, &e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Temporary files of an interrupted write end in `.tmp.<pid>.<hex>`, not `.json`.
        if let Some(id) = name.strip_suffix(".json") {
            ids.push(id.to_owned());
        }
    }
    ids.sort();
    let mut plans = ids
        .iter()
        .map(|id| read(dir, id))
        .collect::<Result<Vec<_>, _>>()?;
    plans.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
    Ok(plans)
}

fn corrupt(path: &Path, problem: String) -> Error {
    Error::CorruptStore {
        path: path.to_path_buf(),
        line: None,
        problem,
    }
}

/// Reads a `TaskPlan.to_dict()` document.
fn parse(path: &Path, text: &str) -> Result<PlanRecord, Error> {
    let document = Value::parse(text).map_err(|e| corrupt(path, format!("not JSON: {e:?}")))?;
    let content = PlanContent::from_stored(&document).map_err(|e| corrupt(path, e.to_string()))?;
    let Some(object) = document.as_object() else {
        return Err(corrupt(path, "not a JSON object".to_owned()));
    };
    let mut problems = Vec::new();
    let status = match object.get("status") {
        None => PlanStatus::Pending,
        Some(Value::Str(text)) => PlanStatus::parse(text).unwrap_or_else(|| {
            problems.push(format!("status: unknown plan status {text:?}"));
            PlanStatus::Pending
        }),
        Some(_) => {
            problems.push("status: must be a string".to_owned());
            PlanStatus::Pending
        }
    };
    let mut number = |key: &str| match object.get(key) {
        None | Some(Value::Null) => None,
        Some(value @ (Value::Int(_) | Value::Float(_))) => value.as_f64(),
        Some(_) => {
            problems.push(format!("{key}: must be a number or null"));
            None
        }
    };
    let created_at = number("created_at").unwrap_or(0.0);
    let decided_at = number("decided_at");
    let mut text_field = |key: &str| match object.get(key) {
        None => String::new(),
        Some(Value::Str(text)) => text.clone(),
        Some(_) => {
            problems.push(format!("{key}: must be a string"));
            String::new()
        }
    };
    let decision_reason = text_field("decision_reason");
    let rendering_hash = text_field("rendering_hash");
    if !problems.is_empty() {
        return Err(corrupt(path, problems.join("; ")));
    }
    Ok(PlanRecord {
        content,
        status,
        created_at,
        decided_at,
        decision_reason,
        rendering_hash,
    })
}

/// The plan's task ids, in plan order (ids that are not safe task ids cannot name a task here).
pub(crate) fn task_ids(plan: &PlanRecord) -> Vec<TaskId> {
    plan.content
        .task_estimates
        .iter()
        .filter_map(|e| TaskId::parse(&e.task_id).ok())
        .collect()
}

/// Refuses a decision on a plan that is decided, or whose content changed after its hash was
/// bound (plans without a hash skip the check, as in the reference).
pub(crate) fn check_decidable(plan: &PlanRecord) -> Result<(), Error> {
    if plan.status != PlanStatus::Pending {
        return Err(Error::PlanAlreadyDecided {
            plan_id: plan.id().to_owned(),
            status: plan.status.as_str().to_owned(),
        });
    }
    if !plan.rendering_hash.is_empty() {
        let current = plan.content.rendering_hash();
        if current != plan.rendering_hash {
            return Err(Error::PlanHashMismatch {
                plan_id: plan.id().to_owned(),
                stored: plan.rendering_hash.clone(),
                current,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::evidence::plan_text;
    use crate::model::NewTask;

    fn task(title: &str, role: &str, complexity: Complexity, scope: Scope) -> Task {
        let mut request = NewTask::new(title, "");
        request.role = role.to_owned();
        request.complexity = complexity;
        request.scope = scope;
        Task::new(TaskId::parse("a6876efd5ac5").unwrap(), request, 1.0).unwrap()
    }

    fn check(task: Task, expect: (&str, &[&str])) {
        let (level, reasons) = classify_risk(&task);
        assert_eq!(
            (
                level.as_str(),
                reasons
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice()
            ),
            expect
        );
    }

    #[test]
    fn risk_levels_follow_the_reference_rules() {
        check(
            task("P0", "backend", Complexity::Medium, Scope::Medium),
            ("low", &[]),
        );
        check(
            task("Drop table", "backend", Complexity::Medium, Scope::Medium),
            ("medium", &["Contains high-risk keywords: drop"]),
        );
        check(
            task("Add auth", "backend", Complexity::Medium, Scope::Medium),
            ("high", &["Contains high-risk keywords: auth"]),
        );
        check(
            task("x", "DevOps", Complexity::High, Scope::Large),
            (
                "critical",
                &[
                    "High-risk role: DevOps",
                    "High complexity task",
                    "Large scope task",
                ],
            ),
        );
    }

    #[test]
    fn estimates_match_the_reference_plan_vector() {
        // fixtures/vectors/http/plans.json: a medium backend task costs 80 000 tokens of sonnet.
        let estimate = estimate(&task("P0", "backend", Complexity::Medium, Scope::Medium));
        assert_eq!(estimate.model, "sonnet");
        assert_eq!(estimate.estimated_tokens, 80_000);
        assert_eq!(estimate.estimated_cost_usd, 0.72);
        let mut free = task("P0", "backend", Complexity::Low, Scope::Small);
        free.model = Some("vendor/model:free".into());
        assert_eq!(estimate_cost(&free), 0.0);
        free.model = None;
        assert_eq!(estimate_cost(&free), 0.09);
    }

    fn estimate_cost(task: &Task) -> f64 {
        estimate(task).estimated_cost_usd
    }

    #[test]
    fn plan_documents_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = [task("P0", "backend", Complexity::Medium, Scope::Medium)];
        let plan = build(
            "86fb98ac29f1".into(),
            "goal one",
            &tasks,
            1_796_004_119.427_735,
        );
        write(dir.path(), &plan).unwrap();
        assert_eq!(read(dir.path(), "86fb98ac29f1").unwrap(), plan);
        assert_eq!(list(dir.path()).unwrap(), std::slice::from_ref(&plan));
        insta::assert_snapshot!(
            std::fs::read_to_string(dir.path().join("86fb98ac29f1.json")).unwrap()
        );
        assert!(matches!(
            read(dir.path(), "000000000000"),
            Err(Error::NotFound {
                resource: Resource::Plan,
                ..
            })
        ));
        assert!(matches!(
            read(dir.path(), "../x"),
            Err(Error::InvalidTaskId { .. })
        ));
        check_decidable(&plan).unwrap();
    }

    /// A one-task pending plan with id `id`, created at `created_at`.
    fn plan_at(id: &str, created_at: f64) -> PlanRecord {
        let tasks = [task("P0", "backend", Complexity::Medium, Scope::Medium)];
        build(id.to_owned(), "goal", &tasks, created_at)
    }

    /// Plan `86fb98ac29f1` with `status`.
    fn plan_with(status: PlanStatus) -> PlanRecord {
        let mut plan = plan_at("86fb98ac29f1", 1.0);
        plan.status = status;
        plan
    }

    #[test]
    fn plan_documents_live_under_runtime_plans() {
        assert_eq!(
            plans_dir(Path::new("/project/.sdd")),
            PathBuf::from("/project/.sdd/runtime/plans")
        );
    }

    /// Brings a plan directory holding `on_disk` forward to a plan owed as `owed`, checking the
    /// gap reported before and the status on disk after.
    fn check_forward(
        on_disk: Option<PlanStatus>,
        owed: PlanStatus,
        gap: Option<&str>,
        after: PlanStatus,
    ) {
        let dir = tempfile::tempdir().unwrap();
        if let Some(status) = on_disk {
            write(dir.path(), &plan_with(status)).unwrap();
        }
        let object = plan_with(owed).to_object();
        let case = format!("{on_disk:?} on disk, {owed:?} owed");
        assert_eq!(
            behind(dir.path(), &object).map(|(kind, _)| kind),
            gap,
            "{case}"
        );
        write_forward(dir.path(), &object).unwrap();
        assert_eq!(
            read(dir.path(), "86fb98ac29f1").unwrap().status,
            after,
            "{case}"
        );
        assert_eq!(
            behind(dir.path(), &object).map(|(kind, _)| kind),
            None,
            "{case}"
        );
    }

    /// A document is written when it is missing or still pending while the log decided the
    /// plan, and is never moved backwards or from one decision to another.
    #[test]
    fn plan_documents_only_move_forward() {
        use PlanStatus::{Approved, Pending, Rejected};
        check_forward(None, Pending, Some("missing_plan"), Pending);
        check_forward(None, Approved, Some("missing_plan"), Approved);
        check_forward(Some(Pending), Pending, None, Pending);
        check_forward(Some(Pending), Approved, Some("stale_plan"), Approved);
        check_forward(Some(Pending), Rejected, Some("stale_plan"), Rejected);
        check_forward(Some(Approved), Pending, None, Approved);
        check_forward(Some(Approved), Approved, None, Approved);
        check_forward(Some(Approved), Rejected, None, Approved);
    }

    /// The gap details name the document, so an operator knows which file to look at.
    #[test]
    fn plan_gaps_name_the_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("86fb98ac29f1.json");
        let approved = plan_with(PlanStatus::Approved).to_object();
        assert_eq!(
            behind(dir.path(), &approved),
            Some((
                "missing_plan",
                format!("plan document {} does not exist", path.display())
            ))
        );
        write(dir.path(), &plan_with(PlanStatus::Pending)).unwrap();
        assert_eq!(
            behind(dir.path(), &approved),
            Some((
                "stale_plan",
                format!(
                    "plan document {} is pending, the task log decided it",
                    path.display()
                )
            ))
        );
    }

    /// A document that cannot be read or is not a plan is reported as unreadable, not as
    /// missing, and is not overwritten.
    #[test]
    fn unreadable_plan_documents_are_reported_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("86fb98ac29f1.json");
        let approved = plan_with(PlanStatus::Approved).to_object();
        std::fs::create_dir(&path).unwrap();
        let (kind, detail) = behind(dir.path(), &approved).unwrap();
        assert_eq!(kind, "unreadable_plan", "{detail}");
        assert_eq!(
            write_forward(dir.path(), &approved).unwrap_err().code(),
            "storage"
        );
        std::fs::remove_dir(&path).unwrap();
        std::fs::write(&path, "not json").unwrap();
        let (kind, detail) = behind(dir.path(), &approved).unwrap();
        assert_eq!(kind, "unreadable_plan", "{detail}");
        assert_eq!(
            write_forward(dir.path(), &approved).unwrap_err().code(),
            "corrupt_store"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not json");
    }

    /// Reads a plan directory whose document for `86fb98ac29f1` is set up by `prepare`,
    /// expecting the error code `expect`.
    fn check_read_error(prepare: fn(&Path), expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        prepare(&dir.path().join("86fb98ac29f1.json"));
        let error = read(dir.path(), "86fb98ac29f1").unwrap_err();
        assert_eq!(error.code(), expect, "{error}");
    }

    /// Only a document that does not exist is "not found"; one that exists but cannot be read
    /// or is not this plan is a storage problem the caller must see.
    #[test]
    fn reading_a_plan_tells_missing_from_broken() {
        check_read_error(|_| {}, "unknown_plan");
        check_read_error(|path| std::fs::create_dir(path).unwrap(), "storage");
        check_read_error(|path| std::fs::write(path, "[]").unwrap(), "corrupt_store");
        check_read_error(
            |path| {
                let other = plan_at("000000000000", 1.0).to_object();
                std::fs::write(path, plan_text(&other)).unwrap();
            },
            "corrupt_store",
        );
        check_read_error(
            |path| {
                let mut object = plan_at("86fb98ac29f1", 1.0).to_object();
                object.insert("status", "maybe");
                std::fs::write(path, plan_text(&object)).unwrap();
            },
            "corrupt_store",
        );
    }

    /// No plan directory means no plans; a plan directory that is not a directory is an error.
    #[test]
    fn listing_plans_tells_no_directory_from_a_broken_one() {
        let dir = tempfile::tempdir().unwrap();
        let plans = dir.path().join("plans");
        assert_eq!(list(&plans).unwrap(), []);
        std::fs::write(&plans, "").unwrap();
        assert_eq!(list(&plans).unwrap_err().code(), "storage");
    }

    /// Plans list newest first, and files that are not plan documents (temporary files of an
    /// interrupted write) are skipped.
    #[test]
    fn plans_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let older = plan_at("000000000001", 1.0);
        let newer = plan_at("000000000002", 2.0);
        write(dir.path(), &older).unwrap();
        write(dir.path(), &newer).unwrap();
        std::fs::write(dir.path().join("000000000003.json.tmp.1.ab"), "").unwrap();
        assert_eq!(list(dir.path()).unwrap(), [newer, older]);
    }

    /// A plan's task ids come in plan order, and an id that is not a safe task id is skipped.
    #[test]
    fn task_ids_follow_the_plan_and_skip_unsafe_ids() {
        let mut plan = plan_at("86fb98ac29f1", 1.0);
        let estimate = plan.content.task_estimates[0].clone();
        plan.content.task_estimates = ["bbb", "../x", "aaa"]
            .into_iter()
            .map(|id| PlanEstimate {
                task_id: id.to_owned(),
                ..estimate.clone()
            })
            .collect();
        assert_eq!(
            task_ids(&plan),
            [TaskId::parse("bbb").unwrap(), TaskId::parse("aaa").unwrap()]
        );
    }

    /// Only a pending plan whose content still has its bound hash can be decided; a plan
    /// without a hash skips the hash check.
    #[test]
    fn only_pending_unchanged_plans_are_decidable() {
        let code = |plan: &PlanRecord| check_decidable(plan).err().map(|e| e.code());
        for status in [
            PlanStatus::Approved,
            PlanStatus::Rejected,
            PlanStatus::Expired,
        ] {
            assert_eq!(
                code(&plan_with(status)),
                Some("plan_already_decided"),
                "{status:?}"
            );
        }
        let mut changed = plan_with(PlanStatus::Pending);
        changed.content.goal = "another goal".to_owned();
        assert_eq!(code(&changed), Some("plan_hash_mismatch"));
        changed.rendering_hash.clear();
        assert_eq!(code(&changed), None);
    }
}
