//! One line of `.sdd/runtime/tasks.jsonl`: the reference's `TaskRecord` plus our bookkeeping.
//!
//! A record is a full task snapshot. Its keys are, in order, the 41 keys of the reference's
//! `TaskStore._task_to_record`, then the fields the reference keeps elsewhere or not at all
//! (`created_at`, `model`, `effort`, `attempts`, `cost_usd`), then any key a foreign writer put
//! on the task that neither list names, then `batch` when the record belongs to a multi-record
//! transaction. The reference's `Task.from_dict` reads `created_at`, `model` and `effort` and
//! ignores the other extra keys, so `bernstein serve` can replay the file.
//!
//! Reference keys this crate does not model (`task_type`, `owned_files`, `tenant_id`,
//! `eu_ai_act_risk`, `terminal_reason`, ...) are carried verbatim from the record that was read
//! ([`StoredTask::passthrough`]), so rewriting a task the reference wrote loses nothing; a task
//! created here gets the reference's dataclass defaults for them.

use bernstein_protocol::pyjson::{Dialect, Object, Value};

use crate::error::FieldProblem;
use crate::lifecycle::TaskStatus;
use crate::model::{Complexity, Scope, Task, TaskId};

/// Key of the transaction marker `[k, n]` (1-based position `k` of `n` records).
pub(crate) const BATCH_KEY: &str = "batch";

/// Key of the evidence a transaction owes (journal rows, audit events, a plan document), carried
/// on its last record so the store can write whatever a crash left unwritten (module `log`).
pub(crate) const EVIDENCE_KEY: &str = "evidence";

/// A record's place in a multi-record transaction: `(k, n)`, 1-based.
pub(crate) type BatchMarker = (usize, usize);

/// A task plus the record keys this crate carries without interpreting them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredTask {
    /// The modelled fields.
    pub(crate) task: Task,
    /// Every other key of the last record read or written, in record order.
    pub(crate) passthrough: Object,
}

impl StoredTask {
    /// A task created by this store: the reference's defaults for the unmodelled keys.
    pub(crate) fn created(task: Task) -> StoredTask {
        StoredTask {
            task,
            passthrough: Object::new(),
        }
    }

    /// Sets an unmodelled reference key (`subtask_wait_started_at`, `terminal_reason`).
    pub(crate) fn set_passthrough(&mut self, key: &str, value: impl Into<Value>) {
        self.passthrough.insert(key, value);
    }

    /// The claim holder the reference names in receipts: `claimed_by_session`, else
    /// `assigned_agent`, else `""`.
    pub(crate) fn holder(&self) -> String {
        if let Some(session) = &self.task.claimed_by {
            return session.clone();
        }
        match self.passthrough.get("assigned_agent") {
            Some(Value::Str(agent)) if !agent.is_empty() => agent.clone(),
            _ => String::new(),
        }
    }

    /// Whether the task carries evidence of a claim (the reference's `ClaimSnapshot.held`).
    pub(crate) fn holds_claim(&self) -> bool {
        self.task.claimed_at.is_some()
            || self
                .task
                .claimed_by
                .as_deref()
                .is_some_and(|s| !s.is_empty())
    }

    /// The record object, keys in file order; `batch` is `Some((k, n))` inside a multi-record
    /// transaction.
    pub(crate) fn to_record(&self, batch: Option<BatchMarker>) -> Object {
        let task = &self.task;
        let mut record = Object::new();
        for &(key, default) in REFERENCE_KEYS {
            let value = match key {
                "id" => Value::from(&task.id),
                "title" => Value::from(task.title.as_str()),
                "description" => Value::from(task.description.as_str()),
                "role" => Value::from(task.role.as_str()),
                "priority" => Value::from(task.priority),
                "scope" => Value::from(task.scope.as_str()),
                "complexity" => Value::from(task.complexity.as_str()),
                "estimated_minutes" => Value::from(task.estimated_minutes),
                "status" => Value::from(task.status.as_str()),
                "depends_on" => {
                    Value::from(task.depends_on.iter().map(Value::from).collect::<Vec<_>>())
                }
                "parent_task_id" => Value::from(task.parent_task_id.as_ref().map(Value::from)),
                "result_summary" => Value::from(task.result_summary.clone()),
                "version" => Value::from(task.version),
                "claimed_at" => Value::from(task.claimed_at),
                "completed_at" => Value::from(task.completed_at),
                "claimed_by_session" => Value::from(task.claimed_by.clone()),
                "metadata" => Value::Object(task.metadata.clone()),
                other => self
                    .passthrough
                    .get(other)
                    .cloned()
                    .unwrap_or_else(|| default.value()),
            };
            record.insert(key, value);
        }
        record.insert("created_at", task.created_at);
        record.insert("model", task.model.clone());
        record.insert("effort", task.effort.clone());
        record.insert("attempts", task.attempts);
        record.insert("cost_usd", task.cost_usd);
        for (key, value) in self.passthrough.iter() {
            if !record.contains_key(key) && key != BATCH_KEY && key != EVIDENCE_KEY {
                record.insert(key, value.clone());
            }
        }
        if let Some((index, size)) = batch {
            record.insert(BATCH_KEY, vec![index, size]);
        }
        record
    }

    /// The record as one log line with its `\n`: `json.dumps(record, default=str) + "\n"`.
    pub(crate) fn to_line(&self, batch: Option<BatchMarker>) -> String {
        self.to_line_with_evidence(batch, None)
    }

    /// [`StoredTask::to_line`], with the transaction's owed evidence under `evidence` when given
    /// (the reference reader ignores the key).
    pub(crate) fn to_line_with_evidence(
        &self,
        batch: Option<BatchMarker>,
        evidence: Option<&Object>,
    ) -> String {
        let mut record = self.to_record(batch);
        if let Some(evidence) = evidence {
            record.insert(EVIDENCE_KEY, Value::Object(evidence.clone()));
        }
        let mut line = Value::Object(record).dumps(Dialect::PY_ROW);
        line.push('\n');
        line
    }

    /// Reads a record the way the reference's `Task.from_dict` does (missing optional keys take
    /// its defaults), except that a value of the wrong type is reported instead of carried into
    /// the task. Returns the task and the record's batch marker.
    pub(crate) fn from_record(
        record: &Object,
    ) -> Result<(StoredTask, Option<BatchMarker>), Vec<FieldProblem>> {
        let mut reader = Reader {
            record,
            problems: Vec::new(),
        };
        let id = reader.id("id");
        let title = reader.required_str("title");
        let description = reader.required_str("description");
        let role = reader.required_str("role");
        let priority = reader.int("priority", 2);
        let scope = reader
            .optional_str("scope")
            .unwrap_or_else(|| "medium".to_owned());
        let complexity = reader
            .optional_str("complexity")
            .unwrap_or_else(|| "medium".to_owned());
        let estimated_minutes = reader.int("estimated_minutes", 30);
        let status = reader
            .optional_str("status")
            .unwrap_or_else(|| "open".to_owned());
        let depends_on = reader.id_list("depends_on");
        let parent_task_id = reader.optional_id("parent_task_id");
        let result_summary = reader.optional_str("result_summary");
        let model = reader.optional_str("model");
        let effort = reader.optional_str("effort");
        let claimed_by = reader.optional_str("claimed_by_session");
        let attempts = reader.int("attempts", 0);
        let version = reader.int("version", 1);
        let created_at = reader.float("created_at").unwrap_or(0.0);
        let claimed_at = reader.float("claimed_at");
        let completed_at = reader.float("completed_at");
        let cost_usd = reader.float("cost_usd").unwrap_or(0.0);
        let metadata = match record.get("metadata") {
            None | Some(Value::Null) => Object::new(),
            Some(Value::Object(object)) => object.clone(),
            Some(_) => {
                reader.problem("metadata", "must be an object");
                Object::new()
            }
        };
        let batch = reader.batch();
        let scope = Scope::parse(&scope).map_err(|e| reader.problem("scope", e.to_string()));
        let complexity =
            Complexity::parse(&complexity).map_err(|e| reader.problem("complexity", e.to_string()));
        let status = TaskStatus::parse(&status)
            .ok_or_else(|| reader.problem("status", format!("unknown status {status:?}")));
        let priority = u8::try_from(priority)
            .map_err(|_| reader.problem("priority", format!("{priority} is out of range")));
        let estimated_minutes = u32::try_from(estimated_minutes).map_err(|_| {
            reader.problem(
                "estimated_minutes",
                format!("{estimated_minutes} is out of range"),
            )
        });
        let attempts = u32::try_from(attempts)
            .map_err(|_| reader.problem("attempts", format!("{attempts} is out of range")));
        let version = u64::try_from(version)
            .map_err(|_| reader.problem("version", format!("{version} is out of range")));
        let mut problems = reader.problems;
        let (
            Some(id),
            Ok(scope),
            Ok(complexity),
            Ok(status),
            Ok(priority),
            Ok(estimated_minutes),
            Ok(attempts),
            Ok(version),
        ) = (
            id,
            scope,
            complexity,
            status,
            priority,
            estimated_minutes,
            attempts,
            version,
        )
        else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        let passthrough: Object = record
            .iter()
            .filter(|(key, _)| !is_modelled(key) && *key != BATCH_KEY && *key != EVIDENCE_KEY)
            .map(|(key, value)| (key.to_owned(), value.clone()))
            .collect();
        let task = Task {
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
            claimed_by,
            attempts,
            version,
            created_at,
            claimed_at,
            completed_at,
            metadata,
            cost_usd,
        };
        if let Err(crate::Error::InvalidTask(found)) = task.validate() {
            problems.extend(found);
            return Err(problems);
        }
        Ok((StoredTask { task, passthrough }, batch))
    }
}

/// A default for an unmodelled reference key.
#[derive(Debug, Clone, Copy)]
enum KeyDefault {
    /// The key is modelled; the default is never used.
    Modelled,
    Null,
    False,
    Zero,
    ZeroFloat,
    Three,
    EmptyList,
    Str(&'static str),
}

impl KeyDefault {
    fn value(self) -> Value {
        match self {
            KeyDefault::Modelled | KeyDefault::Null => Value::Null,
            KeyDefault::False => Value::Bool(false),
            KeyDefault::Zero => Value::from(0u8),
            KeyDefault::ZeroFloat => Value::Float(0.0),
            KeyDefault::Three => Value::from(3u8),
            KeyDefault::EmptyList => Value::Array(Vec::new()),
            KeyDefault::Str(text) => Value::from(text),
        }
    }
}

/// The reference's `_task_to_record` keys in order, with the default of each unmodelled key
/// (the reference `Task` dataclass defaults).
const REFERENCE_KEYS: &[(&str, KeyDefault)] = &[
    ("id", KeyDefault::Modelled),
    ("title", KeyDefault::Modelled),
    ("description", KeyDefault::Modelled),
    ("role", KeyDefault::Modelled),
    ("priority", KeyDefault::Modelled),
    ("scope", KeyDefault::Modelled),
    ("complexity", KeyDefault::Modelled),
    ("estimated_minutes", KeyDefault::Modelled),
    ("status", KeyDefault::Modelled),
    ("task_type", KeyDefault::Str("standard")),
    ("upgrade_details", KeyDefault::Null),
    ("depends_on", KeyDefault::Modelled),
    ("parent_task_id", KeyDefault::Modelled),
    ("depends_on_repo", KeyDefault::Null),
    ("owned_files", KeyDefault::EmptyList),
    ("assigned_agent", KeyDefault::Null),
    ("result_summary", KeyDefault::Modelled),
    ("tenant_id", KeyDefault::Str("default")),
    ("cell_id", KeyDefault::Null),
    ("repo", KeyDefault::Null),
    ("batch_eligible", KeyDefault::False),
    ("eu_ai_act_risk", KeyDefault::Str("minimal")),
    ("approval_required", KeyDefault::False),
    ("risk_level", KeyDefault::Str("low")),
    ("slack_context", KeyDefault::Null),
    ("version", KeyDefault::Modelled),
    ("claimed_at", KeyDefault::Modelled),
    ("completed_at", KeyDefault::Modelled),
    ("closed_at", KeyDefault::Null),
    ("claimed_by_session", KeyDefault::Modelled),
    ("parent_session_id", KeyDefault::Null),
    ("subtask_wait_started_at", KeyDefault::Null),
    ("parent_context", KeyDefault::Null),
    ("retry_count", KeyDefault::Zero),
    ("max_retries", KeyDefault::Three),
    ("retry_delay_s", KeyDefault::ZeroFloat),
    ("terminal_reason", KeyDefault::Null),
    ("max_output_tokens", KeyDefault::Null),
    ("meta_messages", KeyDefault::EmptyList),
    ("metadata", KeyDefault::Modelled),
    ("max_turns", KeyDefault::Null),
];

/// Keys this crate models: everything else is passthrough.
const MODELLED_EXTRA_KEYS: &[&str] = &["created_at", "model", "effort", "attempts", "cost_usd"];

fn is_modelled(key: &str) -> bool {
    MODELLED_EXTRA_KEYS.contains(&key)
        || REFERENCE_KEYS
            .iter()
            .any(|(name, default)| *name == key && matches!(default, KeyDefault::Modelled))
}

struct Reader<'a> {
    record: &'a Object,
    problems: Vec<FieldProblem>,
}

impl Reader<'_> {
    fn problem(&mut self, field: &str, problem: impl Into<String>) {
        self.problems.push(FieldProblem::new(field, problem));
    }

    fn id(&mut self, key: &str) -> Option<TaskId> {
        match self.record.get(key) {
            Some(Value::Str(text)) => match TaskId::parse(text) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.problem(key, e.to_string());
                    None
                }
            },
            Some(_) => {
                self.problem(key, "must be a string");
                None
            }
            None => {
                self.problem(key, "is missing");
                None
            }
        }
    }

    fn optional_id(&mut self, key: &str) -> Option<TaskId> {
        match self.record.get(key) {
            None | Some(Value::Null) => None,
            Some(_) => self.id(key),
        }
    }

    fn id_list(&mut self, key: &str) -> Vec<TaskId> {
        match self.record.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut ids = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    match item.as_str().map(TaskId::parse) {
                        Some(Ok(id)) => ids.push(id),
                        Some(Err(e)) => self.problem(&format!("{key}[{index}]"), e.to_string()),
                        None => self.problem(&format!("{key}[{index}]"), "must be a string"),
                    }
                }
                ids
            }
            Some(_) => {
                self.problem(key, "must be a list");
                Vec::new()
            }
        }
    }

    fn required_str(&mut self, key: &str) -> String {
        match self.record.get(key) {
            Some(Value::Str(text)) => text.clone(),
            Some(_) => {
                self.problem(key, "must be a string");
                String::new()
            }
            None => {
                self.problem(key, "is missing");
                String::new()
            }
        }
    }

    fn optional_str(&mut self, key: &str) -> Option<String> {
        match self.record.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Str(text)) => Some(text.clone()),
            Some(_) => {
                self.problem(key, "must be a string or null");
                None
            }
        }
    }

    fn int(&mut self, key: &str, default: i64) -> i64 {
        match self.record.get(key) {
            None | Some(Value::Null) => default,
            Some(Value::Int(n)) => n.as_i64().unwrap_or_else(|| {
                self.problem(key, "is out of range");
                default
            }),
            Some(_) => {
                self.problem(key, "must be an integer");
                default
            }
        }
    }

    fn float(&mut self, key: &str) -> Option<f64> {
        match self.record.get(key) {
            None | Some(Value::Null) => None,
            Some(value @ (Value::Int(_) | Value::Float(_))) => value.as_f64(),
            Some(_) => {
                self.problem(key, "must be a number or null");
                None
            }
        }
    }

    fn batch(&mut self) -> Option<BatchMarker> {
        let value = self.record.get(BATCH_KEY)?;
        let pair = value.as_array().and_then(|items| match items {
            [Value::Int(k), Value::Int(n)] => Some((k.as_u64()?, n.as_u64()?)),
            _ => None,
        });
        match pair {
            Some((k, n)) if k >= 1 && k <= n && n >= 2 => {
                Some((usize::try_from(k).ok()?, usize::try_from(n).ok()?))
            }
            _ => {
                self.problem(BATCH_KEY, "must be [k, n] with 1 <= k <= n and n >= 2");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::model::NewTask;

    fn fixture_lines() -> Vec<Object> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/vectors/server_probe/.sdd/runtime/tasks.jsonl");
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| Value::parse(line).unwrap().as_object().unwrap().clone())
            .collect()
    }

    #[test]
    fn reference_records_round_trip_byte_for_byte_apart_from_our_extra_keys() {
        for record in fixture_lines() {
            let (stored, batch) = StoredTask::from_record(&record).unwrap();
            assert_eq!(batch, None);
            let written = stored.to_record(None);
            // The reference keys come back in the reference order with the same values...
            let reference: Vec<(&str, &Value)> = record.iter().collect();
            let ours: Vec<(&str, &Value)> = written.iter().take(reference.len()).collect();
            assert_eq!(ours, reference);
            // ...followed only by our bookkeeping keys.
            let extra: Vec<&str> = written.keys().skip(reference.len()).collect();
            assert_eq!(extra, MODELLED_EXTRA_KEYS);
        }
    }

    #[test]
    fn reference_record_without_created_at_reads_as_time_zero() {
        let record = &fixture_lines()[0];
        let (stored, _) = StoredTask::from_record(record).unwrap();
        assert_eq!(stored.task.created_at, 0.0);
        assert_eq!(stored.task.status, TaskStatus::Open);
        assert_eq!(
            stored.passthrough.get("eu_ai_act_risk"),
            Some(&Value::from("high"))
        );
    }

    #[test]
    fn new_task_record_uses_reference_defaults() {
        let task = Task::new(
            TaskId::parse("3ed7631685aa").unwrap(),
            NewTask::new("Add auth", "Add auth to API"),
            1_796_004_102.5,
        )
        .unwrap();
        let line = StoredTask::created(task).to_line(Some((1, 2)));
        insta::assert_snapshot!(line);
    }

    #[test]
    fn foreign_keys_are_carried_and_batch_is_read() {
        let mut record = fixture_lines()[0].clone();
        record.insert("future_field", vec![1, 2]);
        record.insert(BATCH_KEY, vec![2, 3]);
        let (stored, batch) = StoredTask::from_record(&record).unwrap();
        assert_eq!(batch, Some((2, 3)));
        let written = stored.to_record(None);
        assert_eq!(written.get("future_field"), record.get("future_field"));
        assert!(!written.contains_key(BATCH_KEY));
    }

    fn problems(record: &Object) -> Vec<String> {
        StoredTask::from_record(record)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn malformed_records_report_every_problem() {
        let mut record = fixture_lines()[0].clone();
        record.insert("id", "a/b");
        record.insert("title", 7);
        record.insert("status", "sleeping");
        record.insert("depends_on", vec![Value::from(1), Value::from("..")]);
        record.insert("claimed_at", "yesterday");
        record.insert(BATCH_KEY, vec![3, 2]);
        insta::assert_debug_snapshot!(problems(&record));
    }

    #[test]
    fn field_rules_apply_to_loaded_records() {
        let mut record = fixture_lines()[0].clone();
        record.insert("title", "t".repeat(1025));
        assert_eq!(
            problems(&record),
            ["title: is 1025 characters, more than 1024"]
        );
    }
}
