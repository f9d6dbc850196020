//! `bernstein_scenario`: the packaged scenario library, scenario runs and their status.
//!
//! A scenario is a named recipe of tasks for a recurring job (a PR review, a docs sync). A run
//! creates one task per recipe step, all tagged with one `orchestration_id` in their metadata
//! (`scn-<12 hex>`), and answers with the same handle fields `bernstein_run` returns so the
//! tasks are polled with `bernstein_run_status`. The status action aggregates the tasks that
//! carry an orchestration id.

use std::collections::BTreeSet;

use bernstein_journal::run_journal::task_run_id;
use bernstein_protocol::encoding::hex;
use bernstein_protocol::pyjson::{Object, Value};
use ring::rand::{SecureRandom, SystemRandom};

use super::query::POLL_AFTER_MS;
use super::{arg_i64, arg_str, indent2, plain, trace};
use crate::context::ToolContext;

/// One step of a scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) title: &'static str,
    pub(crate) description: &'static str,
    pub(crate) role: &'static str,
    pub(crate) priority: i64,
    pub(crate) scope: &'static str,
    pub(crate) complexity: &'static str,
}

/// One packaged scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scenario {
    pub(crate) id: &'static str,
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) tags: &'static [&'static str],
    pub(crate) version: &'static str,
    pub(crate) steps: &'static [Step],
}

const fn step(
    title: &'static str,
    description: &'static str,
    role: &'static str,
    priority: i64,
    scope: &'static str,
    complexity: &'static str,
) -> Step {
    Step {
        title,
        description,
        role,
        priority,
        scope,
        complexity,
    }
}

/// The packaged scenarios, sorted by id.
pub(crate) const SCENARIOS: [Scenario; 8] = [
    Scenario {
        id: "dependency-audit",
        name: "Dependency Audit",
        description: "Audit the whole dependency tree for known vulnerabilities and plan the upgrades",
        tags: &["security", "maintenance", "schedule", "dependencies"],
        version: "1.0",
        steps: &[
            step(
                "List every dependency",
                "Produce the full list of direct and transitive dependencies with their pinned versions and licences",
                "security",
                1,
                "small",
                "low",
            ),
            step(
                "Check dependencies against advisories",
                "Match every listed dependency against the public vulnerability advisories and rate each hit by exploitability in this project",
                "security",
                1,
                "medium",
                "medium",
            ),
            step(
                "Plan upgrades",
                "For each affected dependency propose the smallest safe upgrade and note any breaking change it brings",
                "backend",
                1,
                "medium",
                "medium",
            ),
            step(
                "File follow-up issues",
                "Open one issue per finding that the upgrades do not resolve, with severity and a suggested owner",
                "devops",
                2,
                "small",
                "low",
            ),
        ],
    },
    Scenario {
        id: "deploy-verification",
        name: "Deploy Verification",
        description: "Smoke-test a fresh deployment and catch regressions early",
        tags: &["deploy", "verify", "ci", "api"],
        version: "1.0",
        steps: &[
            step(
                "Smoke-test the API",
                "Call every public endpoint once with a known-good request and check status codes and response shapes",
                "qa",
                1,
                "medium",
                "medium",
            ),
            step(
                "Scan error logs",
                "Read the service logs since the deployment and report new error kinds and their counts",
                "devops",
                1,
                "small",
                "low",
            ),
            step(
                "Compare performance with the baseline",
                "Measure latency of the main endpoints and compare with the last recorded baseline",
                "backend",
                1,
                "small",
                "low",
            ),
        ],
    },
    Scenario {
        id: "docs-sync",
        name: "Docs Sync",
        description: "Find and fix places where the documentation no longer matches the code",
        tags: &["docs", "maintenance", "schedule", "quality"],
        version: "1.0",
        steps: &[
            step(
                "Find documentation drift",
                "Compare the public interface of the code with the README and docs folder and list missing, stale or contradictory statements",
                "docs",
                1,
                "medium",
                "medium",
            ),
            step(
                "Update the API reference",
                "Bring the API reference in line with changed signatures and remove entries for removed symbols",
                "docs",
                1,
                "medium",
                "medium",
            ),
            step(
                "Check quickstart and examples",
                "Run the quickstart commands and example snippets and fix the ones that no longer work",
                "docs",
                2,
                "small",
                "low",
            ),
        ],
    },
    Scenario {
        id: "issue-decomposition",
        name: "Issue Decomposition",
        description: "Turn an issue into implementation tasks with acceptance criteria",
        tags: &["planning", "github", "decomposition", "issues"],
        version: "1.0",
        steps: &[
            step(
                "Understand the issue",
                "Read the issue and the code it concerns; write down the scope, the constraints and open questions",
                "architect",
                1,
                "medium",
                "medium",
            ),
            step(
                "Design the approach",
                "Choose an implementation approach, name the modules it changes and the contracts between them",
                "architect",
                1,
                "medium",
                "high",
            ),
            step(
                "Break the work into tasks",
                "Write one task per owned module with acceptance criteria and explicit dependencies",
                "manager",
                1,
                "small",
                "medium",
            ),
            step(
                "Note risks and rollback",
                "List what could go wrong in production and how each change would be rolled back",
                "backend",
                2,
                "small",
                "medium",
            ),
        ],
    },
    Scenario {
        id: "nightly-maintenance",
        name: "Nightly Maintenance",
        description: "Routine nightly upkeep: dependency security, lint fixes, old branches",
        tags: &["maintenance", "ci", "cleanup", "schedule"],
        version: "1.0",
        steps: &[
            step(
                "Check dependency security",
                "Check the dependencies against new advisories published since the last run",
                "security",
                1,
                "medium",
                "medium",
            ),
            step(
                "Fix lint and formatting",
                "Apply the formatter and fix the linter findings that do not change behaviour",
                "backend",
                1,
                "small",
                "low",
            ),
            step(
                "Clean up stale branches",
                "List branches merged or untouched for a long time and delete the merged ones",
                "devops",
                2,
                "small",
                "low",
            ),
        ],
    },
    Scenario {
        id: "pr-review-comprehensive",
        name: "Comprehensive PR Review",
        description: "Review a pull request from several angles at once: security, performance, style and tests",
        tags: &["review", "ci", "quality", "github"],
        version: "1.0",
        steps: &[
            step(
                "Review security",
                "Look for injection, access-control and secret-handling problems introduced by the change",
                "security",
                1,
                "medium",
                "medium",
            ),
            step(
                "Review performance",
                "Look for slow paths, unbounded work and needless allocations introduced by the change",
                "backend",
                1,
                "medium",
                "medium",
            ),
            step(
                "Review style and conventions",
                "Check naming, structure and documentation against the project's conventions",
                "reviewer",
                1,
                "small",
                "low",
            ),
            step(
                "Analyse test coverage",
                "Check that the tests exercise the changed behaviour and list what is untested",
                "qa",
                2,
                "small",
                "low",
            ),
        ],
    },
    Scenario {
        id: "pr-review-security-focused",
        name: "Security-Focused PR Review",
        description: "Review a pull request for security first: static analysis, auth flows, dependencies, secrets",
        tags: &["review", "security", "ci", "github", "sast"],
        version: "1.0",
        steps: &[
            step(
                "Static analysis of changed files",
                "Run static security analysis on the changed files and triage every finding",
                "security",
                1,
                "medium",
                "high",
            ),
            step(
                "Review authentication and authorisation",
                "Trace every changed entry point and confirm who may call it and how that is enforced",
                "security",
                1,
                "medium",
                "high",
            ),
            step(
                "Audit new dependencies",
                "Check dependencies added or upgraded by the change against known advisories",
                "security",
                1,
                "small",
                "medium",
            ),
            step(
                "Scan for secrets and personal data",
                "Search the change for credentials, tokens and personal data that must not be committed or logged",
                "security",
                1,
                "small",
                "medium",
            ),
        ],
    },
    Scenario {
        id: "test-coverage-boost",
        name: "Test Coverage Boost",
        description: "Find code paths without tests and add focused unit tests for them",
        tags: &["qa", "coverage", "maintenance", "tests"],
        version: "1.0",
        steps: &[
            step(
                "Find untested code",
                "Measure coverage and rank uncovered code by how much behaviour it carries",
                "qa",
                1,
                "medium",
                "medium",
            ),
            step(
                "Write tests for the main gaps",
                "Add unit tests for the highest-ranked gaps, one behaviour per test",
                "qa",
                1,
                "medium",
                "medium",
            ),
            step(
                "Check the new tests are deterministic",
                "Run the new tests repeatedly and in random order and fix any that are flaky",
                "qa",
                1,
                "small",
                "low",
            ),
        ],
    },
];

fn summary(scenario: &Scenario) -> Value {
    let roles: BTreeSet<&str> = scenario.steps.iter().map(|s| s.role).collect();
    Value::Object(
        Object::new()
            .with("id", scenario.id)
            .with("name", scenario.name)
            .with("description", scenario.description)
            .with(
                "tags",
                scenario
                    .tags
                    .iter()
                    .map(|t| Value::from(*t))
                    .collect::<Vec<_>>(),
            )
            .with("task_count", scenario.steps.len())
            .with(
                "roles",
                roles.into_iter().map(Value::from).collect::<Vec<_>>(),
            )
            .with("version", scenario.version),
    )
}

/// `action=list` (and the deprecated `bernstein_scenarios`).
pub(crate) fn list_text() -> String {
    bernstein_journal::handle::render_indent2(&Value::Array(
        SCENARIOS.iter().map(summary).collect(),
    ))
}

/// The rough wall-clock minutes of a whole run: scope and complexity minutes summed over the
/// steps, divided by the number of distinct roles (at most four) that can work in parallel,
/// and at least five.
pub(crate) fn estimate_minutes(scenario: &Scenario) -> i64 {
    if scenario.steps.is_empty() {
        return 0;
    }
    let total: i64 = scenario
        .steps
        .iter()
        .map(|s| {
            let scope = match s.scope {
                "small" => 10,
                "large" => 60,
                _ => 25,
            };
            let complexity = match s.complexity {
                "low" => 5,
                "high" => 35,
                _ => 15,
            };
            scope + complexity
        })
        .sum();
    let roles: BTreeSet<&str> = scenario.steps.iter().map(|s| s.role).collect();
    let parallel = i64::try_from(roles.len().clamp(1, 4)).unwrap_or(1);
    (total / parallel).max(5)
}

/// The trigger context appended to every step description.
fn context_block(context: &str, pr_number: Option<i64>, branch: Option<&str>) -> String {
    let branch = branch.filter(|b| !b.is_empty());
    if context.is_empty() && pr_number.is_none() && branch.is_none() {
        return String::new();
    }
    let mut lines = vec![String::new(), "## Trigger context".to_owned()];
    if let Some(number) = pr_number {
        lines.push(format!("- PR number: #{number}"));
    }
    if let Some(branch) = branch {
        lines.push(format!("- Branch: `{branch}`"));
    }
    if !context.is_empty() {
        lines.push(format!("- Note: {context}"));
    }
    lines.join("\n") + "\n"
}

fn orchestration_id() -> Result<String, ring::error::Unspecified> {
    let mut bytes = [0u8; 6];
    SystemRandom::new().fill(&mut bytes)?;
    Ok(format!("scn-{}", hex(&bytes)))
}

async fn run(ctx: &ToolContext, args: &Object) -> String {
    let scenario_id = arg_str(args, "scenario_id").unwrap_or("");
    let Some(scenario) = SCENARIOS.iter().find(|s| s.id == scenario_id) else {
        return plain(Object::new().with("error", format!("Unknown scenario: {scenario_id}")));
    };
    let Ok(orchestration) = orchestration_id() else {
        return plain(Object::new().with("error", "the system random source failed"));
    };
    let block = context_block(
        arg_str(args, "context").unwrap_or(""),
        arg_i64(args, "pr_number"),
        arg_str(args, "branch"),
    );
    let trace = trace(ctx);
    let mut task_ids: Vec<String> = Vec::new();
    for step in scenario.steps {
        let title: String = step.title.chars().take(120).collect();
        let body = Object::new()
            .with("title", title)
            .with("description", format!("{}{block}", step.description))
            .with("role", step.role)
            .with("priority", step.priority)
            .with("scope", step.scope)
            .with("complexity", step.complexity)
            .with(
                "metadata",
                Object::new()
                    .with("scenario_id", scenario.id)
                    .with("orchestration_id", orchestration.as_str()),
            );
        // As in the reference, a step that cannot be created is logged and skipped; the
        // answer lists the tasks that exist.
        match ctx.backend.create_task(&body, &trace).await {
            Ok(row) => {
                if let Some(id) = row
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|i| !i.is_empty())
                {
                    task_ids.push(id.to_owned());
                }
            }
            Err(e) => tracing::warn!("scenario task creation failed: {e}"),
        }
    }
    let tasks: Vec<Value> = task_ids
        .iter()
        .map(|id| {
            Value::Object(
                Object::new()
                    .with("task_id", id.as_str())
                    .with("run_id", task_run_id(id)),
            )
        })
        .collect();
    let mut handle = Object::new()
        .with("orchestration_id", orchestration.as_str())
        .with("scenario_id", scenario.id)
        .with("task_count", scenario.steps.len())
        .with("estimated_minutes", estimate_minutes(scenario))
        .with(
            "task_ids",
            task_ids
                .iter()
                .map(|i| Value::from(i.as_str()))
                .collect::<Vec<_>>(),
        )
        .with("tasks", tasks);
    if let Some(first) = task_ids.first() {
        handle.insert("task_id", first.as_str());
        handle.insert("run_id", task_run_id(first));
    }
    handle.insert("poll_after_ms", POLL_AFTER_MS);
    indent2(handle)
}

/// The most task rows a status answer lists.
const STATUS_ROWS: usize = 50;

/// `action=status` (and the deprecated `bernstein_scenario_status`).
pub(crate) async fn status_text(ctx: &ToolContext, args: &Object) -> String {
    let orchestration = arg_str(args, "orchestration_id").unwrap_or("");
    let rows = match ctx.backend.list_tasks(None).await {
        Ok(rows) => rows,
        Err(e) => return plain(Object::new().with("error", e.to_string())),
    };
    let mut counts = Object::new();
    let mut matched = Vec::new();
    for row in rows.iter().filter_map(Value::as_object) {
        let belongs = row
            .get("metadata")
            .and_then(Value::as_object)
            .and_then(|m| m.get("orchestration_id"))
            .and_then(Value::as_str)
            == Some(orchestration);
        if !belongs {
            continue;
        }
        let status = row
            .get("status")
            .map_or_else(|| "unknown".to_owned(), Value::to_python_str);
        let seen = counts.get(&status).and_then(Value::as_i64).unwrap_or(0);
        counts.insert(status.as_str(), seen + 1);
        let field = |key: &str| row.get(key).cloned().unwrap_or(Value::Null);
        matched.push(Value::Object(
            Object::new()
                .with("id", field("id"))
                .with("title", field("title"))
                .with("role", field("role"))
                .with("status", status.as_str())
                .with("result_summary", field("result_summary")),
        ));
    }
    let task_count = matched.len();
    matched.truncate(STATUS_ROWS);
    indent2(
        Object::new()
            .with("orchestration_id", orchestration)
            .with("task_count", task_count)
            .with("status_counts", counts)
            .with("tasks", matched),
    )
}

/// `bernstein_scenario`.
pub(crate) async fn scenario_tool(ctx: &ToolContext, args: &Object) -> String {
    match arg_str(args, "action").unwrap_or("run") {
        "list" => list_text(),
        "status" => status_text(ctx, args).await,
        _ => run(ctx, args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_follow_the_heuristic() {
        let check = |id: &str, expect: i64| {
            let scenario = SCENARIOS.iter().find(|s| s.id == id).unwrap();
            assert_eq!(estimate_minutes(scenario), expect, "{id}");
        };
        // docs-sync: (25+15) + (25+15) + (10+5) = 95 over one role.
        check("docs-sync", 95);
        // test-coverage-boost: 40 + 40 + 15 = 95, one role.
        check("test-coverage-boost", 95);
        // pr-review-comprehensive: 40 + 40 + 15 + 15 = 110 over four roles.
        check("pr-review-comprehensive", 27);
    }

    #[test]
    fn scenario_ids_are_sorted_and_unique() {
        let ids: Vec<&str> = SCENARIOS.iter().map(|s| s.id).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn context_block_lists_what_was_given() {
        assert_eq!(context_block("", None, None), "");
        assert_eq!(
            context_block("nightly", Some(7), Some("main")),
            "\n## Trigger context\n- PR number: #7\n- Branch: `main`\n- Note: nightly\n"
        );
    }

    /// A scenario of `steps` alone, for the estimate (a scenario holds its steps for the life
    /// of the program, so the test leaks them).
    fn of_steps(steps: Vec<Step>) -> Scenario {
        let steps: &'static [Step] = Box::leak(steps.into_boxed_slice());
        Scenario {
            id: "custom",
            name: "Custom",
            description: "",
            tags: &[],
            version: "1.0",
            steps,
        }
    }

    #[test]
    fn an_estimate_sums_scope_and_complexity_minutes_over_the_roles_that_work_in_parallel() {
        let check = |steps: Vec<Step>, expect: i64| {
            let scenario = of_steps(steps);
            assert_eq!(estimate_minutes(&scenario), expect, "{:?}", scenario.steps);
        };
        check(vec![], 0);
        // Small is 10 minutes, large 60, anything else 25; low is 5, high 35, anything else 15.
        check(vec![step("t", "d", "qa", 2, "small", "low")], 15);
        check(vec![step("t", "d", "qa", 2, "large", "high")], 95);
        check(vec![step("t", "d", "qa", 2, "medium", "medium")], 40);
        check(vec![step("t", "d", "qa", 2, "unknown", "unknown")], 40);
        // Two roles halve the sum of 15 and 95; one role twice does not.
        check(
            vec![
                step("t", "d", "qa", 2, "small", "low"),
                step("t", "d", "backend", 2, "large", "high"),
            ],
            55,
        );
        check(
            vec![
                step("t", "d", "qa", 2, "small", "low"),
                step("t", "d", "qa", 2, "large", "high"),
            ],
            110,
        );
        // At most four roles work at once: five steps of 40 minutes over five roles take 50.
        check(
            vec![
                step("t", "d", "a", 2, "medium", "medium"),
                step("t", "d", "b", 2, "medium", "medium"),
                step("t", "d", "c", 2, "medium", "medium"),
                step("t", "d", "d", 2, "medium", "medium"),
                step("t", "d", "e", 2, "medium", "medium"),
            ],
            50,
        );
    }

    #[test]
    fn a_context_block_is_written_when_any_one_of_its_parts_is_given() {
        let check = |context: &str, pr_number: Option<i64>, branch: Option<&str>, expect: &str| {
            assert_eq!(
                context_block(context, pr_number, branch),
                expect,
                "{context:?} {pr_number:?} {branch:?}"
            );
        };
        // An empty branch counts as no branch.
        check("", None, Some(""), "");
        check(
            "nightly",
            None,
            None,
            "\n## Trigger context\n- Note: nightly\n",
        );
        check("", Some(7), None, "\n## Trigger context\n- PR number: #7\n");
        check(
            "",
            None,
            Some("main"),
            "\n## Trigger context\n- Branch: `main`\n",
        );
        check(
            "nightly",
            None,
            Some(""),
            "\n## Trigger context\n- Note: nightly\n",
        );
    }
}
