//! `completion/complete`: values for the arguments of the built-in prompts and resource
//! templates (and an extension's).
//!
//! Values come from fixed vocabularies (the roles Bernstein knows, the task scopes, common cost
//! windows, triage limits) and, for the `lineage://artefact/{artefact_path}` template, from the
//! artefacts the project's lineage log names. A value completes when it starts with what the
//! client typed, ignoring case; at most [`MAX_VALUES`] are returned, with `total` and `hasMore`
//! saying how many matched. A free-text argument (`goal`) has no suggestions.

use serde_json::{Value as JsonValue, json};

use crate::jsonrpc::RpcError;

/// The most values one completion returns (the MCP limit).
pub const MAX_VALUES: usize = 100;

/// The roles Bernstein's task model knows (the reference's `KNOWN_ROLES`, the `role` enum of
/// `bernstein_create_subtask`), suggested for `orchestrate_goal`'s `role`.
pub const KNOWN_ROLES: [&str; 19] = [
    "adversary",
    "analyst",
    "architect",
    "backend",
    "ci-fixer",
    "data",
    "devops",
    "docs",
    "frontend",
    "manager",
    "ml-engineer",
    "prompt-engineer",
    "qa",
    "resolver",
    "retrieval",
    "reviewer",
    "security",
    "visionary",
    "vp",
];

/// The task scopes `bernstein_run` accepts.
pub const SCOPES: [&str; 3] = ["small", "medium", "large"];

/// Window labels suggested for `cost_recap`'s `window` (a free label; these are the usual ones).
pub const COST_WINDOWS: [&str; 6] = [
    "today",
    "yesterday",
    "this week",
    "last week",
    "this month",
    "last month",
];

/// Limits suggested for `triage_failed_tasks`'s `limit`.
pub const TRIAGE_LIMITS: [&str; 4] = ["3", "5", "10", "20"];

/// What a completion request asks for, read from its params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    /// `ref/prompt` (its name) or `ref/resource` (its URI template).
    pub(crate) reference: Reference,
    /// The request's `ref` object as sent.
    pub(crate) raw_reference: JsonValue,
    /// The argument being completed.
    pub(crate) argument: String,
    /// What the client typed so far.
    pub(crate) value: String,
}

/// The thing whose argument is completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reference {
    /// A prompt, by name.
    Prompt(String),
    /// A resource template (or resource), by URI.
    Resource(String),
}

impl Query {
    /// Reads `{ref: {type, name|uri}, argument: {name, value}}`, answering -32602 for anything
    /// else.
    pub(crate) fn from_params(params: Option<&JsonValue>) -> Result<Query, RpcError> {
        let field = |object: Option<&JsonValue>, key: &str, what: &str| {
            object
                .and_then(|o| o.get(key))
                .and_then(JsonValue::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    RpcError::invalid_params(format!("completion/complete needs a string {what}"))
                })
        };
        let raw_reference = params.and_then(|p| p.get("ref"));
        let reference = match field(raw_reference, "type", "ref.type")?.as_str() {
            "ref/prompt" => Reference::Prompt(field(raw_reference, "name", "ref.name")?),
            "ref/resource" => Reference::Resource(field(raw_reference, "uri", "ref.uri")?),
            other => {
                return Err(RpcError::invalid_params(format!(
                    "completion/complete: unknown ref.type {other:?} (expected ref/prompt or ref/resource)"
                )));
            }
        };
        let argument = params.and_then(|p| p.get("argument"));
        Ok(Query {
            reference,
            raw_reference: raw_reference.cloned().unwrap_or(JsonValue::Null),
            argument: field(argument, "name", "argument.name")?,
            value: field(argument, "value", "argument.value")?,
        })
    }
}

/// The candidates of a built-in prompt's argument; `Err` for an unknown prompt or argument.
/// `None` means the prompt is not a built-in one.
pub(crate) fn prompt_candidates(
    prompt: &str,
    argument: &str,
) -> Option<Result<Vec<String>, RpcError>> {
    let unknown_argument = || {
        Err(RpcError::invalid_params(format!(
            "prompt {prompt} has no argument {argument:?}"
        )))
    };
    let owned = |values: &[&str]| Ok(values.iter().map(|v| (*v).to_owned()).collect());
    Some(match (prompt, argument) {
        ("orchestrate_goal", "role") => owned(&KNOWN_ROLES),
        ("orchestrate_goal", "scope") => owned(&SCOPES),
        ("orchestrate_goal", "goal") => Ok(Vec::new()),
        ("orchestrate_goal", _) => unknown_argument(),
        ("triage_failed_tasks", "limit") => owned(&TRIAGE_LIMITS),
        ("triage_failed_tasks", _) => unknown_argument(),
        ("cost_recap", "window") => owned(&COST_WINDOWS),
        ("cost_recap", _) => unknown_argument(),
        _ => return None,
    })
}

/// The `completion` result for `candidates` filtered by `typed`.
pub(crate) fn result(candidates: Vec<String>, typed: &str) -> JsonValue {
    let typed = typed.to_lowercase();
    let matching: Vec<String> = candidates
        .into_iter()
        .filter(|candidate| candidate.to_lowercase().starts_with(&typed))
        .collect();
    let total = matching.len();
    let values: Vec<String> = matching.into_iter().take(MAX_VALUES).collect();
    json!({"completion": {"values": values, "total": total, "hasMore": total > MAX_VALUES}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_roles_match_the_role_enum_of_the_tool_schema() {
        let schema: JsonValue = serde_json::from_str(include_str!(
            "../../bernstein-tools/schemas/bernstein_create_subtask.json"
        ))
        .unwrap();
        assert_eq!(schema["properties"]["role"]["enum"], json!(KNOWN_ROLES));
        let scopes: JsonValue = serde_json::from_str(include_str!(
            "../../bernstein-tools/schemas/bernstein_run.json"
        ))
        .unwrap();
        assert_eq!(scopes["properties"]["scope"]["enum"], json!(SCOPES));
    }

    #[test]
    fn queries_are_read_or_refused() {
        let query = Query::from_params(Some(&json!({
            "ref": {"type": "ref/prompt", "name": "cost_recap"},
            "argument": {"name": "window", "value": "th"},
        })))
        .unwrap();
        assert_eq!(query.reference, Reference::Prompt("cost_recap".to_owned()));
        assert_eq!(
            (query.argument.as_str(), query.value.as_str()),
            ("window", "th")
        );
        for bad in [
            json!({}),
            json!({"ref": {"type": "ref/tool", "name": "x"}, "argument": {"name": "a", "value": ""}}),
            json!({"ref": {"type": "ref/prompt"}, "argument": {"name": "a", "value": ""}}),
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a"}}),
            json!({"ref": {"type": "ref/resource", "uri": 3}, "argument": {"name": "a", "value": ""}}),
        ] {
            let err = Query::from_params(Some(&bad)).unwrap_err();
            assert_eq!(err.code, crate::jsonrpc::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn results_filter_by_prefix_ignoring_case_and_cap_at_the_limit() {
        let check = |prompt: &str, argument: &str, typed: &str, expect: JsonValue| {
            let candidates = prompt_candidates(prompt, argument).unwrap().unwrap();
            assert_eq!(
                result(candidates, typed)["completion"]["values"],
                expect,
                "{prompt}.{argument}={typed}"
            );
        };
        check(
            "orchestrate_goal",
            "role",
            "re",
            json!(["resolver", "retrieval", "reviewer"]),
        );
        check("orchestrate_goal", "role", "ML", json!(["ml-engineer"]));
        check("orchestrate_goal", "scope", "", json!(SCOPES));
        check("orchestrate_goal", "goal", "ship", json!([]));
        check(
            "cost_recap",
            "window",
            "this",
            json!(["this week", "this month"]),
        );
        check("triage_failed_tasks", "limit", "1", json!(["10"]));
        // An argument a built-in prompt does not have is refused, not passed on as if the
        // prompt were an extension's.
        for prompt in ["orchestrate_goal", "triage_failed_tasks", "cost_recap"] {
            assert!(
                prompt_candidates(prompt, "nope").unwrap().is_err(),
                "{prompt}"
            );
        }
        assert!(prompt_candidates("not_ours", "x").is_none());
        let many: Vec<String> = (0..150).map(|i| format!("v{i}")).collect();
        let capped = result(many, "v");
        assert_eq!(
            capped["completion"]["values"].as_array().unwrap().len(),
            MAX_VALUES
        );
        assert_eq!(capped["completion"]["total"], 150);
        assert_eq!(capped["completion"]["hasMore"], true);
    }
}
