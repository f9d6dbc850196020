//! Translations between the task server's JSON and this crate's types, in both directions, and
//! from a [`RemoteFailure`] to the [`Error`] variant the embedded store would return for the same
//! refusal.
//!
//! Server rows are read leniently where the reference itself is lenient (a missing optional
//! field takes its default) and strictly where a wrong type would silently change meaning (a
//! status that is none of the 17, a priority that is not an integer). Every problem in a row is
//! reported at once. A row this crate cannot read is the server's fault, so it becomes
//! [`Error::Remote`] with status 502 (an invalid answer from the upstream server), never a
//! panic.
//!
//! Refusals are mapped to typed variants only where the variant's message is the server's own
//! `detail` text (illegal transitions, cancel refusals, version conflicts, plan decisions,
//! `Task 'x' not found`); anything else stays [`Error::Remote`] with the server's detail kept
//! verbatim.

use std::collections::{HashMap, HashSet};

use bernstein_protocol::pyjson::{Object, Value};

use super::failure::{FailureKind, RemoteFailure};
use crate::backend::{PlanDecision, PlanRecord, PlanStatus, RoleSummary, StatusSummary};
use crate::error::{Error, FieldProblem, Resource};
use crate::lifecycle::TaskStatus;
use crate::model::{Complexity, NewTask, Scope, Task, TaskId};
use crate::plan::PlanContent;

/// The status used for an answer this crate cannot read: 502, "the upstream server sent an
/// invalid response".
pub(crate) const INVALID_ANSWER_STATUS: u16 = 502;

/// An [`Error::Remote`] for an unreadable answer to `what`.
pub(crate) fn unreadable(what: &str, problems: &[FieldProblem]) -> Error {
    let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
    Error::Remote {
        status: INVALID_ANSWER_STATUS,
        message: format!(
            "the task server sent {what} this backend cannot read: {}",
            listed.join("; ")
        ),
    }
}

impl From<RemoteFailure> for Error {
    /// The context-free mapping: transport trouble is [`Error::Unavailable`], a request refused
    /// before sending is [`Error::InvalidRequest`], an illegal-transition 409 and an
    /// `empty_result_summary` 422 get their typed variants, and every other refusal is
    /// [`Error::Remote`] with the server's `detail` (or, for a 401, the advice to set
    /// `BERNSTEIN_AUTH_TOKEN`).
    fn from(failure: RemoteFailure) -> Error {
        match failure.kind() {
            FailureKind::Unreachable | FailureKind::Timeout | FailureKind::Transport => {
                Error::Unavailable(failure.to_string())
            }
            FailureKind::InvalidArgument => Error::InvalidRequest(failure.to_string()),
            FailureKind::MalformedBody => Error::Remote {
                status: INVALID_ANSWER_STATUS,
                message: failure.to_string(),
            },
            FailureKind::Conflict => failure
                .detail()
                .and_then(Value::as_str)
                .and_then(parse_illegal_transition)
                .unwrap_or_else(|| remote(&failure)),
            FailureKind::Validation if failure.error_code() == Some("empty_result_summary") => {
                let task_id = failure
                    .detail()
                    .and_then(Value::as_object)
                    .and_then(|d| d.get("task_id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Error::EmptyResultSummary { task_id }
            }
            _ => remote(&failure),
        }
    }
}

/// [`Error::Remote`] for a refused status: the server's detail, except for a 401, whose message
/// says which variable to set.
fn remote(failure: &RemoteFailure) -> Error {
    let message = match (failure.kind(), failure.detail_text()) {
        (FailureKind::Unauthorized, _) | (_, None) => failure.to_string(),
        (_, Some(detail)) => detail,
    };
    Error::Remote {
        status: failure.status_code().unwrap_or(INVALID_ANSWER_STATUS),
        message,
    }
}

/// The failure of a call on task `id`: a 404 is [`Error::NotFound`] for that task.
pub(crate) fn task_error(failure: RemoteFailure, id: &TaskId) -> Error {
    if failure.kind() == FailureKind::NotFound {
        return Error::NotFound {
            resource: Resource::Task,
            id: id.as_str().to_owned(),
        };
    }
    Error::from(failure)
}

/// The failure of a create naming `parent`: a 404 is [`Error::NotFound`] for the parent (the
/// server says `Parent task 'x' not found` from `self-create` and `Task 'x' not found` from
/// `POST /tasks`; both mean the parent is missing).
pub(crate) fn parent_error(failure: RemoteFailure, parent: &TaskId) -> Error {
    if failure.kind() == FailureKind::NotFound {
        return Error::NotFound {
            resource: Resource::ParentTask,
            id: parent.as_str().to_owned(),
        };
    }
    Error::from(failure)
}

/// The failure of a cancel of task `id`: the server's `Task 'x' cannot be cancelled from status
/// 'y'` 409 is [`Error::NotCancellable`].
pub(crate) fn cancel_error(failure: RemoteFailure, id: &TaskId) -> Error {
    if failure.kind() == FailureKind::Conflict
        && let Some(status) = failure
            .detail()
            .and_then(Value::as_str)
            .and_then(|d| quoted_after(d, "cannot be cancelled from status '"))
            .and_then(TaskStatus::parse)
    {
        return Error::NotCancellable {
            task_id: id.as_str().to_owned(),
            status,
        };
    }
    task_error(failure, id)
}

/// The failure of a claim of task `id`: `Version conflict: task X is at version N, expected M`
/// is [`Error::VersionConflict`], `task X is not open (status=…); cannot claim (…)` is
/// [`Error::NotClaimable`] when that variant renders the server's sentence exactly; the
/// dependency refusal is reported by the caller, which reads the dependencies to name the unmet
/// ones.
pub(crate) fn claim_error(failure: RemoteFailure, id: &TaskId) -> Error {
    if failure.kind() == FailureKind::Conflict
        && let Some(detail) = failure.detail().and_then(Value::as_str)
    {
        if let Some((actual, expected)) = parse_version_conflict(detail) {
            return Error::VersionConflict {
                task_id: id.as_str().to_owned(),
                expected,
                actual,
            };
        }
        if let Some(error) = parse_not_claimable(detail) {
            return error;
        }
    }
    task_error(failure, id)
}

/// `task X is not open (status=S); cannot claim (already claimed by session H)` as
/// [`Error::NotClaimable`], where `H` is `None` or a Python-quoted session id. Only accepted
/// when the variant renders back to exactly the same text, so a session id whose Python repr
/// needed escapes keeps the server's wording in [`Error::Remote`] instead.
fn parse_not_claimable(detail: &str) -> Option<Error> {
    let rest = detail.strip_prefix("task ")?;
    let (task_id, rest) = rest.split_once(" is not open (status=")?;
    let (status, rest) = rest.split_once("); cannot claim (already claimed by session ")?;
    let holder_repr = rest.strip_suffix(')')?;
    let holder = match holder_repr {
        "None" => None,
        quoted => Some(
            quoted
                .strip_prefix('\'')
                .and_then(|q| q.strip_suffix('\''))?
                .to_owned(),
        ),
    };
    let error = Error::NotClaimable {
        task_id: task_id.to_owned(),
        status: TaskStatus::parse(status)?,
        holder,
    };
    (error.to_string() == detail).then_some(error)
}

/// Whether a claim failure is the server's `task X has unresolved dependencies` refusal.
pub(crate) fn is_unresolved_dependencies(failure: &RemoteFailure) -> bool {
    failure.kind() == FailureKind::Conflict
        && failure
            .detail()
            .and_then(Value::as_str)
            .is_some_and(|d| d.ends_with(" has unresolved dependencies"))
}

/// The failure of a plan route for `plan_id`.
pub(crate) fn plan_error(failure: RemoteFailure, plan_id: &str) -> Error {
    let detail = failure.detail().and_then(Value::as_str).map(str::to_owned);
    match (failure.kind(), detail.as_deref()) {
        (FailureKind::NotFound, Some("Plan mode is not enabled on this server")) => {
            Error::PlanModeDisabled
        }
        (FailureKind::NotFound, Some(text)) if text.starts_with("Plan ") => Error::NotFound {
            resource: Resource::Plan,
            id: plan_id.to_owned(),
        },
        (FailureKind::Conflict, Some(text)) => {
            if let Some(status) = text.strip_prefix("Plan already ") {
                Error::PlanAlreadyDecided {
                    plan_id: plan_id.to_owned(),
                    status: status.to_owned(),
                }
            } else if let Some((stored, current)) = parse_hash_mismatch(text) {
                Error::PlanHashMismatch {
                    plan_id: plan_id.to_owned(),
                    stored,
                    current,
                }
            } else {
                Error::from(failure)
            }
        }
        _ => Error::from(failure),
    }
}

/// `Illegal task transition: 'from' -> 'to' (entity id)` as [`Error::IllegalTransition`].
pub(crate) fn parse_illegal_transition(detail: &str) -> Option<Error> {
    let rest = detail.strip_prefix("Illegal task transition: '")?;
    let (from, rest) = rest.split_once("' -> '")?;
    let (to, rest) = rest.split_once("' (entity ")?;
    let task_id = rest.strip_suffix(')')?;
    Some(Error::IllegalTransition {
        task_id: task_id.to_owned(),
        from: TaskStatus::parse(from)?,
        to: TaskStatus::parse(to)?,
    })
}

/// `(actual, expected)` from `Version conflict: task X is at version N, expected M`.
fn parse_version_conflict(detail: &str) -> Option<(u64, u64)> {
    let rest = detail.strip_prefix("Version conflict: task ")?;
    let (_, rest) = rest.rsplit_once(" is at version ")?;
    let (actual, expected) = rest.split_once(", expected ")?;
    Some((actual.parse().ok()?, expected.parse().ok()?))
}

/// `(stored, current)` from `Plan X rendering hash mismatch: stored H, current H`.
fn parse_hash_mismatch(detail: &str) -> Option<(String, String)> {
    let (_, rest) = detail.split_once(" rendering hash mismatch: stored ")?;
    let (stored, current) = rest.split_once(", current ")?;
    Some((stored.to_owned(), current.to_owned()))
}

/// The text between `prefix` and the next `'`.
fn quoted_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(prefix)?;
    rest.split_once('\'').map(|(inside, _)| inside)
}

/// The `POST /tasks` body for `request`, keys in the order the reference's `bernstein_run`
/// writes them, optional keys only when set.
pub(crate) fn create_body(request: &NewTask) -> Object {
    let mut body = common_body(request);
    if let Some(parent) = &request.parent_task_id {
        body.insert("parent_task_id", parent);
    }
    if !request.depends_on.is_empty() {
        body.insert("depends_on", ids(&request.depends_on));
    }
    if let Some(model) = &request.model {
        body.insert("model", model.as_str());
    }
    if let Some(effort) = &request.effort {
        body.insert("effort", effort.as_str());
    }
    if !request.metadata.is_empty() {
        body.insert("metadata", request.metadata.clone());
    }
    body
}

/// The `POST /tasks/self-create` body: the `TaskSelfCreate` fields only (that model has no
/// model, effort or metadata).
pub(crate) fn subtask_body(parent: &TaskId, request: &NewTask) -> Object {
    let mut body = common_body(request).with("parent_task_id", parent);
    if !request.depends_on.is_empty() {
        body.insert("depends_on", ids(&request.depends_on));
    }
    body
}

fn common_body(request: &NewTask) -> Object {
    Object::new()
        .with("title", request.title.as_str())
        .with("description", request.description.as_str())
        .with("role", request.role.as_str())
        .with("priority", request.priority)
        .with("scope", request.scope.as_str())
        .with("complexity", request.complexity.as_str())
        .with("estimated_minutes", request.estimated_minutes)
}

fn ids(list: &[TaskId]) -> Vec<Value> {
    list.iter().map(Value::from).collect()
}

/// Reads fields of one JSON object, collecting every problem.
struct Reader<'a> {
    object: &'a Object,
    prefix: String,
    problems: Vec<FieldProblem>,
}

impl<'a> Reader<'a> {
    fn new(object: &'a Object, prefix: &str) -> Reader<'a> {
        Reader {
            object,
            prefix: prefix.to_owned(),
            problems: Vec::new(),
        }
    }

    fn field(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    fn problem(&mut self, name: &str, problem: &str) {
        let field = self.field(name);
        self.problems.push(FieldProblem::new(field, problem));
    }

    /// A string; null or missing reads as `""`.
    fn text(&mut self, name: &str) -> String {
        match self.object.get(name) {
            None | Some(Value::Null) => String::new(),
            Some(Value::Str(text)) => text.clone(),
            Some(_) => {
                self.problem(name, "must be a string");
                String::new()
            }
        }
    }

    /// A string or null.
    fn optional_text(&mut self, name: &str) -> Option<String> {
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Str(text)) => Some(text.clone()),
            Some(_) => {
                self.problem(name, "must be a string or null");
                None
            }
        }
    }

    /// A non-negative integer that fits `T`; missing reads as `default`.
    fn count<T: TryFrom<u64>>(&mut self, name: &str, default: T) -> T {
        match self.object.get(name) {
            None => default,
            Some(Value::Int(n)) => match n.as_u64().and_then(|n| T::try_from(n).ok()) {
                Some(value) => value,
                None => {
                    self.problem(name, "is out of range");
                    default
                }
            },
            Some(_) => {
                self.problem(name, "must be an integer");
                default
            }
        }
    }

    /// A number (int or float); missing or null reads as `None`.
    fn optional_number(&mut self, name: &str) -> Option<f64> {
        match self.object.get(name) {
            None | Some(Value::Null) => None,
            Some(value @ (Value::Int(_) | Value::Float(_))) => value.as_f64(),
            Some(_) => {
                self.problem(name, "must be a number or null");
                None
            }
        }
    }

    fn task_id(&mut self, name: &str, text: &str) -> Option<TaskId> {
        match TaskId::parse(text) {
            Ok(id) => Some(id),
            Err(Error::InvalidTaskId { reason, .. }) => {
                self.problem(name, reason);
                None
            }
            Err(other) => {
                self.problem(name, &other.to_string());
                None
            }
        }
    }
}

/// A server task row (`TaskResponse`) as a [`Task`].
///
/// The row has no claimer, attempt count or per-task cost, so `claimed_by` is `None`,
/// `attempts` 0 and `cost_usd` 0.0 on tasks read from a server. Field rules of
/// [`Task::validate`] (a non-empty title, for example) are not applied: the server is the
/// authority on what it stores, and the reference itself creates a task with an empty title
/// when `bernstein_run` is called without a goal.
pub(crate) fn task_from_row(row: &Value) -> Result<Task, Error> {
    let Some(object) = row.as_object() else {
        return Err(unreadable(
            "a task row",
            &[FieldProblem::new("task", "must be a JSON object")],
        ));
    };
    let task = read_task(object, "");
    task.map_err(|problems| unreadable("a task row", &problems))
}

fn read_task(object: &Object, prefix: &str) -> Result<Task, Vec<FieldProblem>> {
    let mut r = Reader::new(object, prefix);
    let id_text = r.text("id");
    let id = r.task_id("id", &id_text);
    let title = r.text("title");
    let description = r.text("description");
    let role = r.text("role");
    let priority = r.count::<u8>("priority", 2);
    let scope_text = r.text("scope");
    let scope = match scope_text.as_str() {
        "" => Some(Scope::Medium),
        text => Scope::parse(text).ok(),
    };
    if scope.is_none() {
        r.problem("scope", "must be small, medium or large");
    }
    let complexity_text = r.text("complexity");
    let complexity = match complexity_text.as_str() {
        "" => Some(Complexity::Medium),
        text => Complexity::parse(text).ok(),
    };
    if complexity.is_none() {
        r.problem("complexity", "must be low, medium or high");
    }
    let estimated_minutes = match r.object.get("estimated_minutes") {
        None | Some(Value::Null) => 0,
        Some(_) => r.count::<u32>("estimated_minutes", 0),
    };
    let status_text = r.text("status");
    let status = TaskStatus::parse(&status_text);
    if status.is_none() {
        r.problem("status", "is not one of the 17 task statuses");
    }
    let mut depends_on = Vec::new();
    match r.object.get("depends_on") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                let name = format!("depends_on[{index}]");
                match item.as_str() {
                    Some(text) => depends_on.extend(r.task_id(&name, text)),
                    None => r.problem(&name, "must be a string"),
                }
            }
        }
        Some(_) => r.problem("depends_on", "must be a list"),
    }
    let parent_task_id = r
        .optional_text("parent_task_id")
        .and_then(|text| r.task_id("parent_task_id", &text));
    let result_summary = r.optional_text("result_summary");
    let model = r.optional_text("model");
    let effort = r.optional_text("effort");
    let version = r.count::<u64>("version", 1);
    let created_at = r.optional_number("created_at").unwrap_or(0.0);
    let claimed_at = r.optional_number("claimed_at");
    let completed_at = r.optional_number("completed_at");
    let metadata = match r.object.get("metadata") {
        None | Some(Value::Null) => Object::new(),
        Some(Value::Object(metadata)) => metadata.clone(),
        Some(_) => {
            r.problem("metadata", "must be an object");
            Object::new()
        }
    };
    match (id, scope, complexity, status) {
        (Some(id), Some(scope), Some(complexity), Some(status)) if r.problems.is_empty() => {
            Ok(Task {
                id,
                title,
                description,
                role,
                priority,
                scope,
                complexity,
                estimated_minutes,
                status,
                depends_on,
                parent_task_id,
                result_summary,
                model,
                effort,
                claimed_by: None,
                attempts: 0,
                version,
                created_at,
                claimed_at,
                completed_at,
                metadata,
                cost_usd: 0.0,
            })
        }
        _ => Err(r.problems),
    }
}

/// A list of task rows as tasks, every problem in every row reported.
pub(crate) fn tasks_from_rows(rows: &[Value]) -> Result<Vec<Task>, Error> {
    let mut tasks = Vec::with_capacity(rows.len());
    let mut problems = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        let prefix = format!("tasks[{index}]");
        match row.as_object() {
            Some(object) => match read_task(object, &prefix) {
                Ok(task) => tasks.push(task),
                Err(found) => problems.extend(found),
            },
            None => problems.push(FieldProblem::new(prefix, "must be a JSON object")),
        }
    }
    if problems.is_empty() {
        Ok(tasks)
    } else {
        Err(unreadable("a task list", &problems))
    }
}

/// The `status` of a task row, when it names one of the 17 statuses.
pub(crate) fn row_status(row: &Value) -> Option<TaskStatus> {
    TaskStatus::parse(row.as_object()?.get("status")?.as_str()?)
}

/// One page of `GET /tasks?limit=&offset=`: `(rows, total)`.
pub(crate) fn page_from_envelope(envelope: &Value) -> Result<(Vec<Value>, usize), Error> {
    let problem =
        |field: &str, text: &str| unreadable("a task page", &[FieldProblem::new(field, text)]);
    let object = envelope
        .as_object()
        .ok_or_else(|| problem("page", "must be a JSON object"))?;
    let rows = object
        .get("tasks")
        .and_then(Value::as_array)
        .ok_or_else(|| problem("tasks", "must be a list"))?;
    let total = object
        .get("total")
        .and_then(|t| match t {
            Value::Int(n) => n.as_u64(),
            _ => None,
        })
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| problem("total", "must be a non-negative integer"))?;
    Ok((rows.to_vec(), total))
}

/// `GET /status` as a [`StatusSummary`]: missing counts read as 0 and a missing total cost as
/// 0.0, as the reference's status tool reads them.
pub(crate) fn status_from_document(document: &Value) -> Result<StatusSummary, Error> {
    let Some(object) = document.as_object() else {
        return Err(unreadable(
            "a status document",
            &[FieldProblem::new("status", "must be a JSON object")],
        ));
    };
    let mut r = Reader::new(object, "");
    let total = r.count::<u64>("total", 0);
    let open = r.count::<u64>("open", 0);
    let claimed = r.count::<u64>("claimed", 0);
    let done = r.count::<u64>("done", 0);
    let failed = r.count::<u64>("failed", 0);
    let refused = r.count::<u64>("refused", 0);
    let total_cost_usd = r.optional_number("total_cost_usd").unwrap_or(0.0);
    let mut problems = std::mem::take(&mut r.problems);
    let mut per_role = Vec::new();
    match object.get("per_role") {
        None | Some(Value::Null) => {}
        Some(Value::Array(rows)) => {
            for (index, row) in rows.iter().enumerate() {
                let prefix = format!("per_role[{index}]");
                let Some(row) = row.as_object() else {
                    problems.push(FieldProblem::new(prefix, "must be a JSON object"));
                    continue;
                };
                let mut r = Reader::new(row, &prefix);
                per_role.push(RoleSummary {
                    role: r.text("role"),
                    open: r.count::<u64>("open", 0),
                    claimed: r.count::<u64>("claimed", 0),
                    done: r.count::<u64>("done", 0),
                    failed: r.count::<u64>("failed", 0),
                    cost_usd: r.optional_number("cost_usd"),
                });
                problems.append(&mut r.problems);
            }
        }
        Some(_) => problems.push(FieldProblem::new("per_role", "must be a list")),
    }
    if !problems.is_empty() {
        return Err(unreadable("a status document", &problems));
    }
    Ok(StatusSummary {
        total,
        open,
        claimed,
        done,
        failed,
        refused,
        per_role,
        total_cost_usd,
    })
}

/// A plan document (`TaskPlan.to_dict()`) as a [`PlanRecord`].
pub(crate) fn plan_from_document(document: &Value) -> Result<PlanRecord, Error> {
    let content = PlanContent::from_stored(document)?;
    let Some(object) = document.as_object() else {
        return Err(unreadable(
            "a plan",
            &[FieldProblem::new("plan", "must be a JSON object")],
        ));
    };
    let mut r = Reader::new(object, "");
    let status_text = r.text("status");
    let status = match status_text.as_str() {
        "" => Some(PlanStatus::Pending),
        text => PlanStatus::parse(text),
    };
    if status.is_none() {
        r.problem("status", "must be pending, approved, rejected or expired");
    }
    let created_at = r.optional_number("created_at").unwrap_or(0.0);
    let decided_at = r.optional_number("decided_at");
    let decision_reason = r.text("decision_reason");
    let rendering_hash = r.text("rendering_hash");
    match status {
        Some(status) if r.problems.is_empty() => Ok(PlanRecord {
            content,
            status,
            created_at,
            decided_at,
            decision_reason,
            rendering_hash,
        }),
        _ => Err(unreadable("a plan", &r.problems)),
    }
}

/// The answer of `POST /plans/{id}/approve|reject` as a [`PlanDecision`].
pub(crate) fn decision_from_answer(answer: &Value, plan_id: &str) -> Result<PlanDecision, Error> {
    let problem =
        |field: &str, text: &str| unreadable("a plan decision", &[FieldProblem::new(field, text)]);
    let object = answer
        .as_object()
        .ok_or_else(|| problem("decision", "must be a JSON object"))?;
    let status = object
        .get("status")
        .and_then(Value::as_str)
        .and_then(PlanStatus::parse)
        .ok_or_else(|| problem("status", "must be a plan status"))?;
    let ids_key = match status {
        PlanStatus::Rejected => "cancelled_task_ids",
        _ => "promoted_task_ids",
    };
    let mut task_ids = Vec::new();
    let mut problems = Vec::new();
    match object.get(ids_key) {
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                match item.as_str().map(TaskId::parse) {
                    Some(Ok(id)) => task_ids.push(id),
                    _ => problems.push(FieldProblem::new(
                        format!("{ids_key}[{index}]"),
                        "must be a task id",
                    )),
                }
            }
        }
        _ => problems.push(FieldProblem::new(ids_key, "must be a list")),
    }
    if !problems.is_empty() {
        return Err(unreadable("a plan decision", &problems));
    }
    let plan_id = object
        .get("plan_id")
        .and_then(Value::as_str)
        .unwrap_or(plan_id)
        .to_owned();
    Ok(PlanDecision {
        plan_id,
        status,
        task_ids,
    })
}

/// The ids of the rows whose `parent_task_id` chains reach `root` (the root itself excluded),
/// walking only through `rows`, as the reference's `_count_descendants` does over the
/// post-cancel listing of cancelled tasks. Sorted, so the result does not depend on hashing.
pub(crate) fn descendants(rows: &[Value], root: &str) -> Vec<String> {
    let mut parent_by_id: HashMap<&str, Option<&str>> = HashMap::new();
    for row in rows {
        let Some(object) = row.as_object() else {
            continue;
        };
        let Some(id) = object
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
        else {
            continue;
        };
        // A repeated id takes the later parent, as a dict comprehension does.
        parent_by_id.insert(id, object.get("parent_task_id").and_then(Value::as_str));
    }
    let mut found = Vec::new();
    for (id, parent) in &parent_by_id {
        if *id == root {
            continue;
        }
        let mut seen: HashSet<&str> = HashSet::new();
        let mut cursor = *parent;
        while let Some(current) = cursor {
            if current == root {
                found.push((*id).to_owned());
                break;
            }
            if !seen.insert(current) {
                break;
            }
            cursor = parent_by_id.get(current).copied().flatten();
        }
    }
    found.sort();
    found
}
