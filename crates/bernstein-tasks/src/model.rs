//! The task record: safe ids, field rules, and the reference's `TaskResponse` rendering.
//!
//! A [`Task`] carries the fields the MCP tools read and write. Its rules come from the tool
//! schemas the reference advertises (`bernstein_run`, `bernstein_create_task`,
//! `bernstein_complete`): lengths are counted in Unicode code points, as draft-07 `maxLength`
//! counts them, so every value the input firewall accepts is also a valid task field.
//! [`Task::validate`] reports every broken rule at once.
//!
//! The model reads no clock and no random source of its own: creation times are passed in, and
//! [`TaskId::generate`] takes the random source as a parameter.

use std::fmt;

use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Object, Value};
use ring::rand::SecureRandom;

use crate::error::{Error, FieldProblem};
use crate::lifecycle::{self, TaskStatus};

/// Longest task id, in bytes (the tool schemas' `maxLength` for ids; ids are ASCII).
pub const MAX_TASK_ID_BYTES: usize = 256;
/// Longest title, in code points (`bernstein_create_task.title`).
pub const MAX_TITLE_CHARS: usize = 1024;
/// Longest description, in code points (`bernstein_create_task.description`,
/// `bernstein_run.goal`).
pub const MAX_DESCRIPTION_CHARS: usize = 8192;
/// Longest role, model or effort name, in code points.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest result summary, in code points (`bernstein_complete.result_summary`,
/// `bernstein_approve.note`).
pub const MAX_RESULT_SUMMARY_CHARS: usize = 8192;
/// Largest estimate, in minutes (`bernstein_run.estimated_minutes`).
pub const MAX_ESTIMATED_MINUTES: u32 = 100_000;
/// Most dependencies one task may declare (the task server's list cap).
pub const MAX_DEPENDENCIES: usize = 100;
/// Number of random bytes in a generated id: 6 bytes are the 12 hex characters the reference
/// takes from a UUID4 (`uuid4().hex[:12]`), all of which are random.
const GENERATED_ID_BYTES: usize = 6;

/// A task id that is safe to use as one path segment and that the reference accepts.
///
/// The alphabet is the tool schemas' id pattern `^[A-Za-z0-9_.:-]+$`, 1 to 256 bytes. That
/// already excludes path separators, NUL and every other control character; `.` and `..` match
/// the pattern but name the current and parent directory, so they are refused as well.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

impl TaskId {
    /// Checks `id` and wraps it.
    pub fn parse(id: &str) -> Result<TaskId, Error> {
        match id_problem(id) {
            None => Ok(TaskId(id.to_owned())),
            Some(reason) => Err(Error::InvalidTaskId {
                id: id.to_owned(),
                reason,
            }),
        }
    }

    /// A fresh id: 12 lowercase hex characters (48 random bits), the shape the reference task
    /// server mints.
    pub fn generate(random: &dyn SecureRandom) -> Result<TaskId, Error> {
        let mut bytes = [0u8; GENERATED_ID_BYTES];
        random.fill(&mut bytes).map_err(|_| Error::Randomness)?;
        Ok(TaskId(hex(&bytes)))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TaskId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<TaskId> for Value {
    fn from(id: TaskId) -> Value {
        Value::Str(id.0)
    }
}

impl From<&TaskId> for Value {
    fn from(id: &TaskId) -> Value {
        Value::Str(id.0.clone())
    }
}

/// Why `id` is not a safe task id, or `None` when it is.
fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        return Some("must not be empty");
    }
    if id.len() > MAX_TASK_ID_BYTES {
        return Some("longer than 256 bytes");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
    {
        return Some("may only contain A-Z, a-z, 0-9, '_', '.', ':' and '-'");
    }
    if id == "." || id == ".." {
        return Some("must not name the current or parent directory");
    }
    None
}

/// The size of a task (`scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `small`.
    Small,
    /// `medium` (the default).
    Medium,
    /// `large`.
    Large,
}

impl Scope {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Small => "small",
            Scope::Medium => "medium",
            Scope::Large => "large",
        }
    }

    /// The scope spelled `value`.
    pub fn parse(value: &str) -> Result<Scope, Error> {
        match value {
            "small" => Ok(Scope::Small),
            "medium" => Ok(Scope::Medium),
            "large" => Ok(Scope::Large),
            _ => Err(Error::UnknownScope(value.to_owned())),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How hard a task is (`complexity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Complexity {
    /// `low`.
    Low,
    /// `medium` (the default).
    Medium,
    /// `high`.
    High,
}

impl Complexity {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Complexity::Low => "low",
            Complexity::Medium => "medium",
            Complexity::High => "high",
        }
    }

    /// The complexity spelled `value`.
    pub fn parse(value: &str) -> Result<Complexity, Error> {
        match value {
            "low" => Ok(Complexity::Low),
            "medium" => Ok(Complexity::Medium),
            "high" => Ok(Complexity::High),
            _ => Err(Error::UnknownComplexity(value.to_owned())),
        }
    }
}

impl fmt::Display for Complexity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caller asks for when it creates a task (the `POST /tasks` body the tools send).
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    /// Short title, 1 to 1024 code points.
    pub title: String,
    /// Full description, up to 8192 code points.
    pub description: String,
    /// Specialist role, 1 to 64 code points.
    pub role: String,
    /// 1 (critical), 2 (normal) or 3 (nice to have).
    pub priority: u8,
    /// Task size.
    pub scope: Scope,
    /// Task difficulty.
    pub complexity: Complexity,
    /// Rough estimate in minutes, at most 100 000.
    pub estimated_minutes: u32,
    /// The parent, when the task is a subtask.
    pub parent_task_id: Option<TaskId>,
    /// Tasks that must be done before this one is claimable.
    pub depends_on: Vec<TaskId>,
    /// Requested model, 1 to 64 code points.
    pub model: Option<String>,
    /// Requested effort, 1 to 64 code points.
    pub effort: Option<String>,
    /// Trigger-source metadata (for example `orchestration_id` for scenario runs).
    pub metadata: Object,
}

impl NewTask {
    /// A request with the reference's defaults: role `backend`, priority 2, medium scope and
    /// complexity, 30 minutes, no parent, no dependencies, no model or effort, empty metadata.
    pub fn new(title: impl Into<String>, description: impl Into<String>) -> NewTask {
        NewTask {
            title: title.into(),
            description: description.into(),
            role: "backend".to_owned(),
            priority: 2,
            scope: Scope::Medium,
            complexity: Complexity::Medium,
            estimated_minutes: 30,
            parent_task_id: None,
            depends_on: Vec::new(),
            model: None,
            effort: None,
            metadata: Object::new(),
        }
    }
}

/// One task as the task coordinator keeps it.
///
/// Fields are public so a store can load and update records; [`Task::validate`] is the check a
/// store runs before it persists one, and [`Task::transition_to`] the only way status should
/// change.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task id.
    pub id: TaskId,
    /// Short title, 1 to 1024 code points.
    pub title: String,
    /// Full description, up to 8192 code points.
    pub description: String,
    /// Specialist role, 1 to 64 code points.
    pub role: String,
    /// 1 (critical), 2 (normal) or 3 (nice to have).
    pub priority: u8,
    /// Task size.
    pub scope: Scope,
    /// Task difficulty.
    pub complexity: Complexity,
    /// Rough estimate in minutes.
    pub estimated_minutes: u32,
    /// Current lifecycle status.
    pub status: TaskStatus,
    /// Tasks that must be done before this one is claimable.
    pub depends_on: Vec<TaskId>,
    /// The parent, when the task is a subtask.
    pub parent_task_id: Option<TaskId>,
    /// What the work produced, or why it ended.
    pub result_summary: Option<String>,
    /// Requested model.
    pub model: Option<String>,
    /// Requested effort.
    pub effort: Option<String>,
    /// The worker identity holding the claim, if any. Not part of the reference's task row.
    pub claimed_by: Option<String>,
    /// How many times the task has been claimed. Not part of the reference's task row.
    pub attempts: u32,
    /// Optimistic-locking version: 1 at creation, raised by the store on every status change.
    pub version: u64,
    /// Creation time, Unix seconds.
    pub created_at: f64,
    /// Claim time, Unix seconds.
    pub claimed_at: Option<f64>,
    /// Completion or failure time, Unix seconds.
    pub completed_at: Option<f64>,
    /// Trigger-source metadata.
    pub metadata: Object,
    /// Spend attributed to the task, in USD. Not part of the reference's task row; it feeds the
    /// per-role cost totals.
    pub cost_usd: f64,
}

impl Task {
    /// A new `open` task with id `id`, created at `created_at` (Unix seconds), after checking
    /// every field rule.
    pub fn new(id: TaskId, request: NewTask, created_at: f64) -> Result<Task, Error> {
        let task = Task {
            id,
            title: request.title,
            description: request.description,
            role: request.role,
            priority: request.priority,
            scope: request.scope,
            complexity: request.complexity,
            estimated_minutes: request.estimated_minutes,
            status: TaskStatus::Open,
            depends_on: request.depends_on,
            parent_task_id: request.parent_task_id,
            result_summary: None,
            model: request.model,
            effort: request.effort,
            claimed_by: None,
            attempts: 0,
            version: 1,
            created_at,
            claimed_at: None,
            completed_at: None,
            metadata: request.metadata,
            cost_usd: 0.0,
        };
        task.validate()?;
        Ok(task)
    }

    /// Checks every field rule and reports all broken ones in one [`Error::InvalidTask`].
    pub fn validate(&self) -> Result<(), Error> {
        let mut problems = Vec::new();
        check_text(&mut problems, "title", &self.title, 1, MAX_TITLE_CHARS);
        check_text(
            &mut problems,
            "description",
            &self.description,
            0,
            MAX_DESCRIPTION_CHARS,
        );
        check_text(&mut problems, "role", &self.role, 1, MAX_NAME_CHARS);
        if !(1..=3).contains(&self.priority) {
            problems.push(FieldProblem::new(
                "priority",
                format!("must be 1, 2 or 3, not {}", self.priority),
            ));
        }
        if self.estimated_minutes > MAX_ESTIMATED_MINUTES {
            problems.push(FieldProblem::new(
                "estimated_minutes",
                format!(
                    "must be at most {MAX_ESTIMATED_MINUTES}, not {}",
                    self.estimated_minutes
                ),
            ));
        }
        if self.depends_on.len() > MAX_DEPENDENCIES {
            problems.push(FieldProblem::new(
                "depends_on",
                format!(
                    "lists {} tasks, more than {MAX_DEPENDENCIES}",
                    self.depends_on.len()
                ),
            ));
        }
        if self.depends_on.contains(&self.id) {
            problems.push(FieldProblem::new(
                "depends_on",
                "must not name the task itself",
            ));
        }
        if self.parent_task_id.as_ref() == Some(&self.id) {
            problems.push(FieldProblem::new(
                "parent_task_id",
                "must not name the task itself",
            ));
        }
        if let Some(summary) = &self.result_summary {
            check_text(
                &mut problems,
                "result_summary",
                summary,
                0,
                MAX_RESULT_SUMMARY_CHARS,
            );
        }
        for (field, value) in [("model", &self.model), ("effort", &self.effort)] {
            if let Some(value) = value {
                check_text(&mut problems, field, value, 1, MAX_NAME_CHARS);
            }
        }
        if let Some(worker) = &self.claimed_by {
            // Claimer ids share the task-id alphabet in the claim schema (`claimer_id`).
            if let Some(reason) = id_problem(worker) {
                problems.push(FieldProblem::new("claimed_by", reason));
            }
        }
        if self.version == 0 {
            problems.push(FieldProblem::new("version", "starts at 1"));
        }
        check_time(&mut problems, "created_at", Some(self.created_at));
        check_time(&mut problems, "claimed_at", self.claimed_at);
        check_time(&mut problems, "completed_at", self.completed_at);
        if !(self.cost_usd.is_finite() && self.cost_usd >= 0.0) {
            problems.push(FieldProblem::new(
                "cost_usd",
                "must be a finite, non-negative amount",
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidTask(problems))
        }
    }

    /// Moves the task to `to` if the transition table allows it; otherwise leaves it unchanged
    /// and returns the reference's illegal-transition error. Version and timestamps are the
    /// store's to maintain.
    pub fn transition_to(&mut self, to: TaskStatus) -> Result<(), Error> {
        lifecycle::transition(self.id.as_str(), self.status, to)?;
        self.status = to;
        Ok(())
    }

    /// The task as a row in the reference's `TaskResponse` field order, restricted to the
    /// fields this model holds. `claimed_by`, `attempts` and `cost_usd` are bookkeeping the
    /// reference does not put on the row, so they are left out.
    pub fn to_object(&self) -> Object {
        Object::new()
            .with("id", &self.id)
            .with("title", self.title.as_str())
            .with("description", self.description.as_str())
            .with("role", self.role.as_str())
            .with("priority", self.priority)
            .with("scope", self.scope.as_str())
            .with("complexity", self.complexity.as_str())
            .with("estimated_minutes", self.estimated_minutes)
            .with("status", self.status.as_str())
            .with(
                "depends_on",
                self.depends_on.iter().map(Value::from).collect::<Vec<_>>(),
            )
            .with(
                "parent_task_id",
                self.parent_task_id.as_ref().map(Value::from),
            )
            .with("result_summary", self.result_summary.clone())
            .with("model", self.model.clone())
            .with("effort", self.effort.clone())
            .with("metadata", self.metadata.clone())
            .with("created_at", self.created_at)
            .with("claimed_at", self.claimed_at)
            .with("completed_at", self.completed_at)
            .with("version", self.version)
    }
}

fn check_text(problems: &mut Vec<FieldProblem>, field: &str, value: &str, min: usize, max: usize) {
    let chars = value.chars().count();
    if chars < min {
        problems.push(FieldProblem::new(field, "must not be empty"));
    } else if chars > max {
        problems.push(FieldProblem::new(
            field,
            format!("is {chars} characters, more than {max}"),
        ));
    }
}

fn check_time(problems: &mut Vec<FieldProblem>, field: &str, value: Option<f64>) {
    if let Some(seconds) = value
        && !(seconds.is_finite() && seconds >= 0.0)
    {
        problems.push(FieldProblem::new(
            field,
            "must be a finite, non-negative Unix time",
        ));
    }
}

#[cfg(test)]
mod tests {
    use bernstein_protocol::pyjson::Dialect;
    use proptest::prelude::*;
    use ring::rand::SystemRandom;

    use super::*;

    fn id(text: &str) -> TaskId {
        TaskId::parse(text).unwrap()
    }

    fn sample() -> Task {
        let mut request = NewTask::new("Add auth", "Add auth to API");
        request.metadata.insert("orchestration_id", "orch-1");
        Task::new(id("3ed7631685aa"), request, 1_796_004_102.369_560_7).unwrap()
    }

    fn check_id(text: &str, expect: Result<(), &str>) {
        let got = TaskId::parse(text).map(|_| ()).map_err(|e| match e {
            Error::InvalidTaskId { reason, .. } => reason,
            other => panic!("unexpected error {other:?}"),
        });
        assert_eq!(got, expect, "{text:?}");
    }

    #[test]
    fn task_ids() {
        check_id("3ed7631685aa", Ok(()));
        check_id("t-42", Ok(()));
        check_id("orch:1.a_b", Ok(()));
        check_id("a..b", Ok(()));
        check_id(&"a".repeat(256), Ok(()));
        check_id("", Err("must not be empty"));
        check_id(&"a".repeat(257), Err("longer than 256 bytes"));
        for bad in ["a/b", "a\\b", "/abs", "a\0b", "a\nb", "a b", "é", "a\u{7f}"] {
            check_id(
                bad,
                Err("may only contain A-Z, a-z, 0-9, '_', '.', ':' and '-'"),
            );
        }
        check_id(".", Err("must not name the current or parent directory"));
        check_id("..", Err("must not name the current or parent directory"));
    }

    #[test]
    fn invalid_id_error_escapes_the_input() {
        let err = TaskId::parse("a\nb").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid task id \"a\\nb\": may only contain A-Z, a-z, 0-9, '_', '.', ':' and '-'"
        );
    }

    #[test]
    fn generated_ids_have_the_reference_shape() {
        let random = SystemRandom::new();
        let first = TaskId::generate(&random).unwrap();
        let second = TaskId::generate(&random).unwrap();
        for generated in [&first, &second] {
            assert!(bernstein_protocol::encoding::is_lower_hex(
                generated.as_str(),
                12
            ));
            assert_eq!(TaskId::parse(generated.as_str()).as_ref(), Ok(generated));
        }
        // 48 random bits: a collision here means the generator is not drawing fresh bytes.
        assert_ne!(first, second);
    }

    #[test]
    fn scope_and_complexity_spellings() {
        for scope in [Scope::Small, Scope::Medium, Scope::Large] {
            assert_eq!(Scope::parse(scope.as_str()), Ok(scope));
        }
        for complexity in [Complexity::Low, Complexity::Medium, Complexity::High] {
            assert_eq!(Complexity::parse(complexity.as_str()), Ok(complexity));
        }
        assert_eq!(
            Scope::parse("huge"),
            Err(Error::UnknownScope("huge".into()))
        );
        assert_eq!(
            Complexity::parse("Medium"),
            Err(Error::UnknownComplexity("Medium".into()))
        );
    }

    #[test]
    fn new_task_starts_open_at_version_one() {
        let task = sample();
        assert_eq!(task.status, TaskStatus::Open);
        assert_eq!(task.version, 1);
        assert_eq!(task.attempts, 0);
        assert_eq!(task.claimed_by, None);
        assert_eq!(task.result_summary, None);
    }

    #[test]
    fn validation_reports_every_problem() {
        let mut task = sample();
        task.title = String::new();
        task.description = "d".repeat(MAX_DESCRIPTION_CHARS + 1);
        task.role = "r".repeat(65);
        task.priority = 4;
        task.estimated_minutes = MAX_ESTIMATED_MINUTES + 1;
        task.depends_on = vec![task.id.clone()];
        task.parent_task_id = Some(task.id.clone());
        task.result_summary = Some("s".repeat(MAX_RESULT_SUMMARY_CHARS + 1));
        task.model = Some(String::new());
        task.claimed_by = Some("w/1".into());
        task.version = 0;
        task.claimed_at = Some(f64::NAN);
        task.cost_usd = -1.0;
        let Err(Error::InvalidTask(problems)) = task.validate() else {
            panic!("expected InvalidTask");
        };
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "title",
                "description",
                "role",
                "priority",
                "estimated_minutes",
                "depends_on",
                "parent_task_id",
                "result_summary",
                "model",
                "claimed_by",
                "version",
                "claimed_at",
                "cost_usd",
            ]
        );
        insta::assert_snapshot!(Error::InvalidTask(problems).to_string());
    }

    #[test]
    fn lengths_count_code_points_not_bytes() {
        // 1024 two-byte characters pass the tool schema's maxLength, so they must pass here.
        let mut task = sample();
        task.title = "é".repeat(MAX_TITLE_CHARS);
        assert_eq!(task.validate(), Ok(()));
        task.title.push('é');
        assert!(task.validate().is_err());
    }

    #[test]
    fn too_many_dependencies_are_refused() {
        let mut task = sample();
        task.depends_on = (0..=MAX_DEPENDENCIES)
            .map(|n| id(&format!("dep{n}")))
            .collect();
        assert!(matches!(task.validate(), Err(Error::InvalidTask(p)) if p.len() == 1));
        task.depends_on.pop();
        assert_eq!(task.validate(), Ok(()));
    }

    #[test]
    fn transition_to_applies_only_legal_moves() {
        let mut task = sample();
        task.transition_to(TaskStatus::Claimed).unwrap();
        assert_eq!(task.status, TaskStatus::Claimed);
        let err = task.transition_to(TaskStatus::PendingApproval).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Illegal task transition: 'claimed' -> 'pending_approval' (entity 3ed7631685aa)"
        );
        assert_eq!(task.status, TaskStatus::Claimed);
    }

    #[test]
    fn row_uses_the_task_response_field_order() {
        let mut task = sample();
        task.depends_on = vec![id("55ad7026909d")];
        task.parent_task_id = Some(id("0123456789ab"));
        task.transition_to(TaskStatus::Claimed).unwrap();
        task.claimed_at = Some(1_796_004_102.687_210_8);
        task.claimed_by = Some("worker-1".into());
        task.cost_usd = 0.25;
        insta::assert_snapshot!(Value::Object(task.to_object()).dumps(Dialect::PY_ROW));
    }

    proptest! {
        #[test]
        fn parsed_ids_are_single_safe_segments(text in "\\PC{0,40}") {
            if let Ok(parsed) = TaskId::parse(&text) {
                let s = parsed.as_str();
                prop_assert!(!s.is_empty() && s.len() <= MAX_TASK_ID_BYTES);
                prop_assert!(!s.contains('/') && !s.contains('\\') && !s.contains('\0'));
                prop_assert!(s != "." && s != "..");
                prop_assert!(s.bytes().all(|b| b.is_ascii_graphic()));
            }
        }

        #[test]
        fn every_legal_transition_is_applied(steps in proptest::collection::vec(0usize..17, 0..20)) {
            let mut task = sample();
            for step in steps {
                let to = TaskStatus::ALL[step];
                let before = task.status;
                let result = task.transition_to(to);
                prop_assert_eq!(result.is_ok(), before.can_transition_to(to));
                prop_assert_eq!(task.status, if result.is_ok() { to } else { before });
            }
        }
    }
}
