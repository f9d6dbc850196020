//! The fast path of the index build: one task-log line to its index fields without building a
//! JSON tree.
//!
//! Opening a project reads every line of `tasks.jsonl` once. Parsing each into a
//! [`bernstein_protocol::pyjson::Value`] tree and then into a [`StoredTask`] costs about a
//! hundred allocations per line (every key, every string, the unmodelled keys copied again),
//! which made a cold start at 100,000 tasks take seconds. Here `serde_json` reads the line
//! into a struct of borrowed fields, skipping the keys the index does not need without
//! allocating them, and the same [`Task`] the full reader builds is checked by the same
//! [`Task::validate`].
//!
//! The fast path only ever accepts: anything it does not handle exactly as the full reader
//! (`record::StoredTask::from_record` over a `pyjson` parse) returns `None`, and the caller
//! falls back to the full reader, which then accepts the line or reports the problem in its own
//! words. That covers every refusal (a wrong type, a missing key, a repeated key), the Python
//! dialect `serde_json` does not speak (NaN, Infinity, integers beyond 64 bits) and the
//! non-record lines (evidence markers, seals). Numbers the index keeps or checks are read with
//! `pyjson` from their raw text, so they are the values the full reader gets.

use std::borrow::Cow;

use bernstein_protocol::pyjson::{Object, Value};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::index::Meta;
use super::record::BatchMarker;
use crate::lifecycle::TaskStatus;
use crate::model::{Complexity, Scope, Task, TaskId};

/// The keys of a record the index build reads; every other key is skipped unparsed.
#[derive(Deserialize)]
struct Fields<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    title: Cow<'a, str>,
    #[serde(borrow)]
    description: Cow<'a, str>,
    #[serde(borrow)]
    role: Cow<'a, str>,
    priority: Option<i64>,
    #[serde(borrow)]
    scope: Option<Cow<'a, str>>,
    #[serde(borrow)]
    complexity: Option<Cow<'a, str>>,
    estimated_minutes: Option<i64>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    depends_on: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow)]
    parent_task_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    result_summary: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    effort: Option<Cow<'a, str>>,
    #[serde(borrow)]
    claimed_by_session: Option<Cow<'a, str>>,
    attempts: Option<i64>,
    version: Option<i64>,
    #[serde(borrow)]
    created_at: Option<&'a RawValue>,
    #[serde(borrow)]
    claimed_at: Option<&'a RawValue>,
    #[serde(borrow)]
    completed_at: Option<&'a RawValue>,
    #[serde(borrow)]
    cost_usd: Option<&'a RawValue>,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
    // `null` must stay distinguishable from absence here: the full reader refuses both keys
    // as `null`.
    #[serde(borrow, default, deserialize_with = "present")]
    batch: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    evidence: Option<&'a RawValue>,
}

/// A key that is present, whatever its value (`null` included).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// A record line read by the fast path.
pub(crate) struct FastRecord<'a> {
    /// The index fields.
    pub(crate) meta: Meta,
    /// The transaction marker.
    pub(crate) batch: Option<BatchMarker>,
    /// The raw `evidence` object, when the line carries one.
    pub(crate) evidence: Option<&'a str>,
}

/// A float field as the full reader reads it: absent or `null` is `None`, a number its value;
/// anything else (or a number `pyjson` reads differently) makes the caller fall back.
fn float(raw: Option<&RawValue>) -> Option<Option<f64>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    let text = raw.get();
    if text == "null" {
        return Some(None);
    }
    if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return None;
    }
    match Value::parse(text).ok()? {
        value @ (Value::Int(_) | Value::Float(_)) => Some(value.as_f64()),
        _ => None,
    }
}

fn id(text: &str) -> Option<TaskId> {
    TaskId::parse(text).ok()
}

fn owned(text: Option<Cow<'_, str>>) -> Option<String> {
    text.map(Cow::into_owned)
}

/// The index fields of the record on `line` (trimmed, not empty), or `None` when the line needs
/// the full reader.
pub(crate) fn record(line: &str) -> Option<FastRecord<'_>> {
    if !line.starts_with('{') {
        return None;
    }
    let fields: Fields<'_> = serde_json::from_str(line).ok()?;
    let metadata = match fields.metadata.map(RawValue::get) {
        None | Some("null") => Object::new(),
        Some("{}") => Object::new(),
        Some(raw) if raw.starts_with('{') => Value::parse(raw).ok()?.as_object()?.clone(),
        Some(_) => return None,
    };
    let batch = match fields.batch {
        None => None,
        Some(raw) => {
            let value = Value::parse(raw.get()).ok()?;
            let (k, n) = match value.as_array()? {
                [Value::Int(k), Value::Int(n)] => (k.as_u64()?, n.as_u64()?),
                _ => return None,
            };
            if !(k >= 1 && k <= n && n >= 2) {
                return None;
            }
            Some((usize::try_from(k).ok()?, usize::try_from(n).ok()?))
        }
    };
    let evidence = match fields.evidence {
        None => None,
        Some(raw) if raw.get().starts_with('{') => Some(raw.get()),
        Some(_) => return None,
    };
    let depends_on = fields
        .depends_on
        .unwrap_or_default()
        .iter()
        .map(|dep| id(dep))
        .collect::<Option<Vec<TaskId>>>()?;
    let parent_task_id = match fields.parent_task_id {
        None => None,
        Some(parent) => Some(id(&parent)?),
    };
    let task = Task {
        id: id(&fields.id)?,
        title: fields.title.into_owned(),
        description: fields.description.into_owned(),
        role: fields.role.into_owned(),
        priority: u8::try_from(fields.priority.unwrap_or(2)).ok()?,
        scope: Scope::parse(fields.scope.as_deref().unwrap_or("medium")).ok()?,
        complexity: Complexity::parse(fields.complexity.as_deref().unwrap_or("medium")).ok()?,
        estimated_minutes: u32::try_from(fields.estimated_minutes.unwrap_or(30)).ok()?,
        status: TaskStatus::parse(fields.status.as_deref().unwrap_or("open"))?,
        depends_on,
        parent_task_id,
        result_summary: owned(fields.result_summary),
        model: owned(fields.model),
        effort: owned(fields.effort),
        claimed_by: owned(fields.claimed_by_session),
        attempts: u32::try_from(fields.attempts.unwrap_or(0)).ok()?,
        version: u64::try_from(fields.version.unwrap_or(1)).ok()?,
        created_at: float(fields.created_at)?.unwrap_or(0.0),
        claimed_at: float(fields.claimed_at)?,
        completed_at: float(fields.completed_at)?,
        metadata,
        cost_usd: float(fields.cost_usd)?.unwrap_or(0.0),
    };
    task.validate().ok()?;
    Some(FastRecord {
        meta: Meta::of(&task),
        batch,
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::embedded::record::StoredTask;
    use crate::model::NewTask;

    /// What the full reader makes of `line`: its index fields and batch marker, or an error.
    fn full(line: &str) -> Option<(Meta, Option<BatchMarker>, bool)> {
        let value = Value::parse(line).ok()?;
        let record = value.as_object()?;
        let evidence = match record.get("evidence") {
            None => false,
            Some(Value::Object(_)) => true,
            Some(_) => return None,
        };
        let (stored, batch) = StoredTask::from_record(record).ok()?;
        Some((Meta::of(&stored.task), batch, evidence))
    }

    fn fast(line: &str) -> Option<(Meta, Option<BatchMarker>, bool)> {
        record(line).map(|r| (r.meta, r.batch, r.evidence.is_some()))
    }

    fn sample() -> String {
        let mut task = Task::new(
            TaskId::parse("3ed7631685aa").unwrap(),
            NewTask::new("Add \"auth\"", "é \u{1F600} \\ escapes"),
            1_796_004_102.5,
        )
        .unwrap();
        task.depends_on = vec![TaskId::parse("b-1").unwrap()];
        StoredTask::created(task).to_line(Some((1, 2)))
    }

    /// Lines the fast path must accept with the full reader's fields, or leave to it.
    #[test]
    fn the_fast_path_agrees_with_the_full_reader_or_declines() {
        let base = sample();
        let base = base.trim_end();
        let variants = [
            base.to_owned(),
            base.replace("\"priority\": 2", "\"priority\": 2.0"),
            base.replace("\"priority\": 2", "\"priority\": 99999999999999999999999"),
            base.replace("\"created_at\": 1796004102.5", "\"created_at\": NaN"),
            base.replace("\"created_at\": 1796004102.5", "\"created_at\": -1"),
            base.replace(
                "\"created_at\": 1796004102.5",
                "\"created_at\": \"yesterday\"",
            ),
            base.replace("\"batch\": [1, 2]", "\"batch\": null"),
            base.replace("\"batch\": [1, 2]", "\"batch\": [3, 2]"),
            base.replace("\"metadata\": {}", "\"metadata\": []"),
            base.replace(
                "\"metadata\": {}",
                "\"metadata\": {\"a\": [1, {\"b\": null}]}",
            ),
            base.replace("\"status\": \"open\"", "\"status\": \"sleeping\""),
            base.replace("\"title\": ", "\"title\": 1, \"x\": "),
            base.replace("\"id\": \"3ed7631685aa\"", "\"id\": \"../x\""),
            base.replace("{\"id\"", "{\"role\": \"qa\", \"id\""),
            base.replace(
                "\"depends_on\": [\"b-1\"]",
                "\"depends_on\": [\"3ed7631685aa\"]",
            ),
            format!(
                "{}, \"evidence\": {{\"journal\": []}}}}",
                &base[..base.len() - 1]
            ),
            format!("{}, \"evidence\": [1]}}", &base[..base.len() - 1]),
            format!("{}, \"evidence\": null}}", &base[..base.len() - 1]),
            "{\"evidence_written\": 12}".to_owned(),
        ];
        for line in variants {
            // When the fast path declines, the full reader decides.
            if let Some(found) = fast(&line) {
                assert_eq!(Some(found), full(&line), "{line}");
            }
        }
        assert!(fast(base).is_some(), "the common line takes the fast path");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever a byte edit does to a line, the fast path never accepts what the full
        /// reader refuses, nor reads different fields.
        #[test]
        fn an_edited_line_is_never_read_differently(at in 0usize..1000, byte in any::<u8>()) {
            let mut line = sample().trim_end().as_bytes().to_vec();
            let at = at % line.len();
            line[at] = byte;
            if let Ok(text) = std::str::from_utf8(&line)
                && let Some(found) = fast(text)
            {
                prop_assert_eq!(Some(found), full(text));
            }
        }
    }
}
