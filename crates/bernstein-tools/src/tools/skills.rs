//! `load_skill` and the skill index: the packaged skill packs, served as text.
//!
//! Each skill is a markdown body (`skills/<name>/SKILL.md` in this crate) plus optional
//! reference documents and scripts, all compiled into the binary. Nothing is read from the
//! filesystem at call time and nothing is executed: a script is returned as text. Reference and
//! script names are looked up in the skill's own table, so no name can reach another file.

use bernstein_journal::crypto::sha256_hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::{arg_str, indent2};

/// One packaged skill.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Skill {
    /// The name `load_skill` takes.
    pub(crate) name: &'static str,
    /// One line for the index.
    pub(crate) description: &'static str,
    /// The markdown body (trailing whitespace is not served).
    pub(crate) body: &'static str,
    /// `(file name, text)` of each reference document.
    pub(crate) references: &'static [(&'static str, &'static str)],
    /// `(file name, text)` of each script.
    pub(crate) scripts: &'static [(&'static str, &'static str)],
}

impl Skill {
    /// The body as served.
    pub(crate) fn served_body(&self) -> &'static str {
        self.body.trim_end()
    }
}

/// The packaged skills, sorted by name.
pub(crate) const SKILLS: [Skill; 16] = [
    Skill {
        name: "analyst",
        description: "Weigh proposals: feasibility, payoff, risk.",
        body: include_str!("../../skills/analyst/SKILL.md"),
        references: &[],
        scripts: &[],
    },
    Skill {
        name: "architect",
        description: "System design: module boundaries, API contracts, decision records.",
        body: include_str!("../../skills/architect/SKILL.md"),
        references: &[
            (
                "adr-template.md",
                include_str!("../../skills/architect/references/adr-template.md"),
            ),
            (
                "decomposition-principles.md",
                include_str!("../../skills/architect/references/decomposition-principles.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "backend",
        description: "Server code: APIs, async work, strict typing.",
        body: include_str!("../../skills/backend/SKILL.md"),
        references: &[
            (
                "python-conventions.md",
                include_str!("../../skills/backend/references/python-conventions.md"),
            ),
            (
                "test-patterns.md",
                include_str!("../../skills/backend/references/test-patterns.md"),
            ),
            (
                "error-handling.md",
                include_str!("../../skills/backend/references/error-handling.md"),
            ),
        ],
        scripts: &[(
            "lint.sh",
            include_str!("../../skills/backend/scripts/lint.sh"),
        )],
    },
    Skill {
        name: "ci-fixer",
        description: "CI failures: read the error, make the minimal fix, verify.",
        body: include_str!("../../skills/ci-fixer/SKILL.md"),
        references: &[],
        scripts: &[],
    },
    Skill {
        name: "devops",
        description: "Operations: containers, CI/CD, infrastructure, monitoring.",
        body: include_str!("../../skills/devops/SKILL.md"),
        references: &[
            (
                "ci-patterns.md",
                include_str!("../../skills/devops/references/ci-patterns.md"),
            ),
            (
                "docker-practices.md",
                include_str!("../../skills/devops/references/docker-practices.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "frontend",
        description: "Web UI: components, state, accessibility.",
        body: include_str!("../../skills/frontend/SKILL.md"),
        references: &[
            (
                "a11y.md",
                include_str!("../../skills/frontend/references/a11y.md"),
            ),
            (
                "state-management.md",
                include_str!("../../skills/frontend/references/state-management.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "manager",
        description: "Planning: break goals into tasks on the task server.",
        body: include_str!("../../skills/manager/SKILL.md"),
        references: &[
            (
                "planning-rules.md",
                include_str!("../../skills/manager/references/planning-rules.md"),
            ),
            (
                "task-api.md",
                include_str!("../../skills/manager/references/task-api.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "ml-engineer",
        description: "Machine learning: training, inference, embeddings, evaluation.",
        body: include_str!("../../skills/ml-engineer/SKILL.md"),
        references: &[
            (
                "evaluation.md",
                include_str!("../../skills/ml-engineer/references/evaluation.md"),
            ),
            (
                "reproducibility.md",
                include_str!("../../skills/ml-engineer/references/reproducibility.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "prompt-engineer",
        description: "LLM prompts: design, evaluate and tune instructions.",
        body: include_str!("../../skills/prompt-engineer/SKILL.md"),
        references: &[],
        scripts: &[],
    },
    Skill {
        name: "qa",
        description: "Tests: suites, edge cases, regressions.",
        body: include_str!("../../skills/qa/SKILL.md"),
        references: &[
            (
                "edge-cases.md",
                include_str!("../../skills/qa/references/edge-cases.md"),
            ),
            (
                "test-strategy.md",
                include_str!("../../skills/qa/references/test-strategy.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "resolver",
        description: "Merge conflicts: resolve without losing either side's intent.",
        body: include_str!("../../skills/resolver/SKILL.md"),
        references: &[],
        scripts: &[],
    },
    Skill {
        name: "retrieval",
        description: "Retrieval: vector stores, embeddings, hybrid search, reranking.",
        body: include_str!("../../skills/retrieval/SKILL.md"),
        references: &[
            (
                "chunking.md",
                include_str!("../../skills/retrieval/references/chunking.md"),
            ),
            (
                "hybrid-search.md",
                include_str!("../../skills/retrieval/references/hybrid-search.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "reviewer",
        description: "Code review: correctness, tests, readiness to merge.",
        body: include_str!("../../skills/reviewer/SKILL.md"),
        references: &[
            (
                "review-rubric.md",
                include_str!("../../skills/reviewer/references/review-rubric.md"),
            ),
            (
                "feedback-tone.md",
                include_str!("../../skills/reviewer/references/feedback-tone.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "security",
        description: "Security review: common weaknesses, auth, secrets, input validation.",
        body: include_str!("../../skills/security/SKILL.md"),
        references: &[
            (
                "owasp-top-10.md",
                include_str!("../../skills/security/references/owasp-top-10.md"),
            ),
            (
                "auth-checklist.md",
                include_str!("../../skills/security/references/auth-checklist.md"),
            ),
            (
                "secrets-handling.md",
                include_str!("../../skills/security/references/secrets-handling.md"),
            ),
        ],
        scripts: &[],
    },
    Skill {
        name: "visionary",
        description: "Ideation: bold feature proposals.",
        body: include_str!("../../skills/visionary/SKILL.md"),
        references: &[],
        scripts: &[],
    },
    Skill {
        name: "vp",
        description: "Cross-team coordination: resolve conflicts, decide pivots.",
        body: include_str!("../../skills/vp/SKILL.md"),
        references: &[
            (
                "cell-decomposition.md",
                include_str!("../../skills/vp/references/cell-decomposition.md"),
            ),
            (
                "pivot-evaluation.md",
                include_str!("../../skills/vp/references/pivot-evaluation.md"),
            ),
        ],
        scripts: &[],
    },
];

/// The skill index (`bernstein://skills/index` and `load_skill` without a name): compact,
/// sorted-key JSON of `{"skills": [{"content_hash", "description", "name"}]}`, where
/// `content_hash` is the SHA-256 of the served body.
pub fn skill_index_text() -> String {
    let skills: Vec<Value> = SKILLS
        .iter()
        .map(|skill| {
            Value::Object(
                Object::new()
                    .with("content_hash", sha256_hex(skill.served_body().as_bytes()))
                    .with("description", skill.description)
                    .with("name", skill.name),
            )
        })
        .collect();
    Value::Object(Object::new().with("skills", skills)).dumps(Dialect::PY_COMPACT_UTF8)
}

fn names(files: &[(&str, &str)]) -> Vec<Value> {
    files.iter().map(|(name, _)| Value::from(*name)).collect()
}

/// Looks `file` up among `files`; the error names what was missing.
fn fetch(
    files: &[(&str, &'static str)],
    skill: &str,
    label: &str,
    file: Option<&str>,
) -> (Value, Option<String>) {
    let Some(file) = file else {
        return (Value::Null, None);
    };
    match files.iter().find(|(name, _)| *name == file) {
        Some((_, text)) => (Value::from(*text), None),
        None => (
            Value::Null,
            Some(format!("{label} {file:?} not found for skill {skill:?}")),
        ),
    }
}

/// `load_skill`.
pub(crate) fn load_skill_tool(args: &Object) -> String {
    let Some(name) = arg_str(args, "name") else {
        return skill_index_text();
    };
    let Some(skill) = SKILLS.iter().find(|s| s.name == name) else {
        return indent2(
            Object::new()
                .with("name", name)
                .with("body", "")
                .with("available_references", Value::Array(Vec::new()))
                .with("available_scripts", Value::Array(Vec::new()))
                .with("reference_content", Value::Null)
                .with("script_content", Value::Null)
                .with(
                    "error",
                    format!(
                        "skill {} not found",
                        bernstein_protocol::pyrepr::python_str_repr(name)
                    ),
                ),
        );
    };
    let (reference_content, reference_error) = fetch(
        skill.references,
        name,
        "reference",
        arg_str(args, "reference"),
    );
    let (script_content, script_error) =
        fetch(skill.scripts, name, "script", arg_str(args, "script"));
    indent2(
        Object::new()
            .with("name", skill.name)
            .with("body", skill.served_body())
            .with("available_references", names(skill.references))
            .with("available_scripts", names(skill.scripts))
            .with("reference_content", reference_content)
            .with("script_content", script_content)
            .with("error", reference_error.or(script_error)),
    )
}
