//! The built-in prompt catalogue: `orchestrate_goal`, `triage_failed_tasks`, `cost_recap`.
//!
//! Each prompt renders deterministically from its arguments and the set of registered tools
//! (a step that needs a tool the active tier does not serve is left out, so a prompt never
//! names an unregistered tool). Rendering calls no backend.

use rmcp::model::{GetPromptResult, Prompt, PromptArgument, PromptMessage, Role};
use serde_json::{Map, Value as JsonValue};

/// The prompt names, in catalogue order.
pub const PROMPT_NAMES: [&str; 3] = ["orchestrate_goal", "triage_failed_tasks", "cost_recap"];

/// Default `role` of `orchestrate_goal`.
pub const DEFAULT_ROLE: &str = "backend";
/// Default `scope` of `orchestrate_goal`.
pub const DEFAULT_SCOPE: &str = "medium";
/// Default `limit` of `triage_failed_tasks`.
pub const DEFAULT_TRIAGE_LIMIT: u64 = 5;
/// Default `window` of `cost_recap`.
pub const DEFAULT_WINDOW: &str = "today";

/// Why a `prompts/get` could not render (answered as JSON-RPC invalid params).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptError {
    /// No prompt has this name.
    Unknown(String),
    /// A required argument is absent or empty.
    Missing(&'static str),
    /// An argument has a value the prompt cannot use.
    Invalid {
        /// The argument.
        argument: &'static str,
        /// Why.
        reason: String,
    },
}

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptError::Unknown(name) => write!(f, "Unknown prompt: {name}"),
            PromptError::Missing(argument) => write!(f, "Missing required argument: {argument}"),
            PromptError::Invalid { argument, reason } => {
                write!(f, "Invalid argument {argument}: {reason}")
            }
        }
    }
}

fn argument(name: &str, description: &str, required: bool) -> PromptArgument {
    PromptArgument::new(name)
        .with_description(description)
        .with_required(required)
}

/// The catalogue as `prompts/list` advertises it.
pub fn list() -> Vec<Prompt> {
    vec![
        Prompt::new(
            "orchestrate_goal",
            Some("Plan one Bernstein run for a goal and follow it to a terminal status."),
            Some(vec![
                argument("goal", "What the run should accomplish.", true),
                argument(
                    "role",
                    "Specialist role for the work (default backend).",
                    false,
                ),
                argument(
                    "scope",
                    "Task scope: small, medium or large (default medium).",
                    false,
                ),
            ]),
        ),
        Prompt::new(
            "triage_failed_tasks",
            Some("Review the most recent failed tasks and propose a next action for each cause."),
            Some(vec![argument(
                "limit",
                "How many failed tasks to inspect (default 5).",
                false,
            )]),
        ),
        Prompt::new(
            "cost_recap",
            Some("Summarise spend per role for a labelled time window."),
            Some(vec![argument(
                "window",
                "Label of the window, for example today (default today).",
                false,
            )]),
        ),
    ]
}

/// Renders `name` with `arguments`. Prompt arguments are strings on the wire; `limit` also
/// accepts a JSON integer.
///
/// # Errors
///
/// [`PromptError`] for an unknown prompt, a missing `goal`, or an unusable `limit`.
pub fn render(
    name: &str,
    arguments: Option<&Map<String, JsonValue>>,
    is_registered: &dyn Fn(&str) -> bool,
) -> Result<GetPromptResult, PromptError> {
    let text_arg = |key: &str| -> Option<String> {
        match arguments?.get(key)? {
            JsonValue::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            JsonValue::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let (description, body) = match name {
        "orchestrate_goal" => {
            let goal = text_arg("goal").ok_or(PromptError::Missing("goal"))?;
            let role = text_arg("role").unwrap_or_else(|| DEFAULT_ROLE.to_owned());
            let scope = text_arg("scope").unwrap_or_else(|| DEFAULT_SCOPE.to_owned());
            (0, orchestrate_goal(&goal, &role, &scope, is_registered))
        }
        "triage_failed_tasks" => {
            let limit = match text_arg("limit") {
                None => DEFAULT_TRIAGE_LIMIT,
                Some(text) => match text.parse::<u64>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(PromptError::Invalid {
                            argument: "limit",
                            reason: format!("expected a positive integer, got {text:?}"),
                        });
                    }
                },
            };
            (1, triage_failed_tasks(limit))
        }
        "cost_recap" => {
            let window = text_arg("window").unwrap_or_else(|| DEFAULT_WINDOW.to_owned());
            (2, cost_recap(&window))
        }
        other => return Err(PromptError::Unknown(other.to_owned())),
    };
    let prompt = &list()[description];
    let result = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, body)]);
    Ok(match &prompt.description {
        Some(description) => result.with_description(description.as_str()),
        None => result,
    })
}

fn orchestrate_goal(
    goal: &str,
    role: &str,
    scope: &str,
    is_registered: &dyn Fn(&str) -> bool,
) -> String {
    let mut steps = vec![
        format!(
            "Start the run with `bernstein_run`, passing the goal, role `{role}` and scope \
             `{scope}`. Call it once: it returns a task_id (the run id) as soon as the run is \
             queued."
        ),
        "Poll `bernstein_run_status` with that run id, tens of seconds apart, until the status \
         is completed, failed or cancelled. Use `bernstein_status` when you need the wider task \
         list."
            .to_owned(),
    ];
    if is_registered("bernstein_post_message") {
        steps.push(
            "If the run stalls on a blocker, record it on the task with \
             `bernstein_post_message` and tell the user; do not approve or complete work that \
             did not run."
                .to_owned(),
        );
    } else {
        steps.push(
            "If the run stalls on a blocker, tell the user the task id and the status you saw; \
             do not approve or complete work that did not run."
                .to_owned(),
        );
    }
    format!(
        "You are driving one Bernstein orchestration run.\n\nGoal: {goal}\nRole: {role}\n\
         Scope: {scope}\n\nSteps:\n{}\n\nFinish by reporting the task ids and final statuses \
         to the user, or the error you could not recover from.",
        numbered(&steps)
    )
}

fn triage_failed_tasks(limit: u64) -> String {
    let steps = [
        "Call `bernstein_status` with `status=\"failed\"` and `detail=true` to list the failed \
         tasks."
            .to_owned(),
        format!(
            "Take at most {limit} of them, newest first, and read each result summary for the \
             shortest way to reproduce the failure."
        ),
        "Group the failures by likely cause (environment, flaky test, real defect) and propose \
         one next action per group."
            .to_owned(),
    ];
    format!(
        "Triage the most recent failed Bernstein tasks.\n\nSteps:\n{}\n\nAnswer with a table: \
         task_id, role, cause, next action.",
        numbered(&steps)
    )
}

fn cost_recap(window: &str) -> String {
    let steps = [
        "Call `bernstein_status` with `detail=true` and read the `cost` block: the total and \
         the per-role rows."
            .to_owned(),
        "Order the roles by cost, highest first, and fold rows under $0.01 into one \"other\" \
         row."
            .to_owned(),
        "Point out any role that accounts for more than half of the total.".to_owned(),
    ];
    format!(
        "Write a cost recap for the window labelled \"{window}\".\n\nSteps:\n{}\n\nAnswer with \
         one short paragraph and a per-role table.",
        numbered(&steps)
    )
}

fn numbered(steps: &[String]) -> String {
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| format!("{}. {step}", i + 1))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The tool names a prompt body can mention.
pub const MENTIONED_TOOLS: [&str; 4] = [
    "bernstein_run",
    "bernstein_run_status",
    "bernstein_status",
    "bernstein_post_message",
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: JsonValue) -> Map<String, JsonValue> {
        value.as_object().unwrap().clone()
    }

    fn text(result: &GetPromptResult) -> String {
        let value = serde_json::to_value(result).unwrap();
        value["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn renders_are_deterministic_and_validate_arguments() {
        let all = |_: &str| true;
        let check = |name: &str, arguments: JsonValue, expect: Result<&[&str], PromptError>| {
            let got = render(name, Some(&args(arguments)), &all);
            match (got, expect) {
                (Ok(result), Ok(needles)) => {
                    let body = text(&result);
                    for needle in needles {
                        assert!(body.contains(needle), "{name}: {needle:?} not in {body}");
                    }
                }
                (Err(err), Err(want)) => assert_eq!(err, want, "{name}"),
                (got, want) => panic!("{name}: {got:?} vs {want:?}"),
            }
        };
        check(
            "orchestrate_goal",
            json!({"goal": "ship X", "role": "qa"}),
            Ok(&[
                "Goal: ship X",
                "Role: qa",
                "Scope: medium",
                "bernstein_post_message",
            ]),
        );
        check(
            "orchestrate_goal",
            json!({}),
            Err(PromptError::Missing("goal")),
        );
        check(
            "orchestrate_goal",
            json!({"goal": "  "}),
            Err(PromptError::Missing("goal")),
        );
        check(
            "triage_failed_tasks",
            json!({"limit": "3"}),
            Ok(&["at most 3 of them"]),
        );
        check(
            "triage_failed_tasks",
            json!({"limit": 2}),
            Ok(&["at most 2 of them"]),
        );
        check("triage_failed_tasks", json!({}), Ok(&["at most 5 of them"]));
        check(
            "triage_failed_tasks",
            json!({"limit": "many"}),
            Err(PromptError::Invalid {
                argument: "limit",
                reason: "expected a positive integer, got \"many\"".to_owned(),
            }),
        );
        // Zero is the one non-negative integer that is not a positive limit: it is refused as
        // text and as a JSON integer.
        for zero in [json!("0"), json!(0)] {
            check(
                "triage_failed_tasks",
                json!({ "limit": zero }),
                Err(PromptError::Invalid {
                    argument: "limit",
                    reason: "expected a positive integer, got \"0\"".to_owned(),
                }),
            );
        }
        check(
            "triage_failed_tasks",
            json!({"limit": "1"}),
            Ok(&["at most 1 of them"]),
        );
        check("cost_recap", json!({}), Ok(&["window labelled \"today\""]));
        check(
            "cost_recap",
            json!({"window": "week 32"}),
            Ok(&["\"week 32\""]),
        );
        check(
            "nope",
            json!({}),
            Err(PromptError::Unknown("nope".to_owned())),
        );
        let first = render("cost_recap", None, &all).unwrap();
        assert_eq!(first, render("cost_recap", None, &all).unwrap());
    }

    #[test]
    fn prompts_name_only_registered_tools() {
        let core = |name: &str| name != "bernstein_post_message";
        let body =
            text(&render("orchestrate_goal", Some(&args(json!({"goal": "g"}))), &core).unwrap());
        assert!(!body.contains("bernstein_post_message"));
    }
}
