//! The MCP tool catalogue of bernstein-mcp: every tool's name, draft-07 input schema,
//! description, tier and handler, the deprecated aliases, the input firewall and the cost-meter
//! envelope.
//!
//! It does not know how a request arrived: no transport, no JSON-RPC ids, no HTTP headers. The
//! dispatcher in `bernstein-mcp-core` builds a [`Catalogue`] from a [`ToolConfig`], lists
//! [`Catalogue::tools`], and answers each `tools/call` with [`Catalogue::call`], passing a
//! [`ToolContext`] (project root, [`Backend`], per-request metadata, progress sink,
//! cancellation token). The answer is a [`ToolOutcome`]: the exact text block, the structured
//! content and the flags.
//!
//! # Registered tools
//!
//! In `tools/list` order, with the smallest tier that serves each:
//!
//! - `bernstein_run` (core): queue a run (or a subtask run, or an administrative container).
//! - `bernstein_subscribe` (standard): wait for the next task created for a role.
//! - `bernstein_status` (core): liveness, task counts, spend, filtered task lists.
//! - `bernstein_claim` (standard): claim the next eligible task as a signed claim receipt.
//! - `bernstein_create_task` (standard): create a bare backlog task.
//! - `bernstein_post_message` (standard): append a signed message to a task's mailbox.
//! - `bernstein_post_artifact` (standard): attach a chain-anchored artifact to a held task.
//! - `bernstein_cancel` (standard): cancel one task and its subtask tree.
//! - `bernstein_shutdown_orchestrator` (standard): write the project's `SHUTDOWN` signal.
//! - `bernstein_approve` (standard): sign off a result held in `pending_approval`.
//! - `bernstein_complete` (standard): report the result of work being executed.
//! - `bernstein_run_status` (core): project a run's verifiable handle from its journal.
//! - `bernstein_task_capsule` (standard): read, and optionally verify, a context capsule.
//! - `load_skill` (standard): the skill index, or one skill's body, reference or script.
//! - `bernstein_scenario` (all): list, run or poll packaged scenarios.
//! - `bernstein_verify_lineage` (all, only with lineage enabled): verify the lineage log.
//!
//! Deprecated aliases, callable but never listed (dropped with
//! `BERNSTEIN_MCP_DEPRECATED_ALIASES=0`, and each only while its replacement is served):
//!
//! - `bernstein_health`, `bernstein_tasks`, `bernstein_cost` → `bernstein_status`
//! - `bernstein_create_subtask` → `bernstein_run`
//! - `bernstein_task_handle` → `bernstein_run_status`
//! - `bernstein_update` → `bernstein_post_message`
//! - `bernstein_context` → `bernstein_task_capsule`
//! - `bernstein_stop` → `bernstein_shutdown_orchestrator`
//! - `bernstein_scenarios`, `bernstein_scenario_status` → `bernstein_scenario`
//! - `verify_chain` → `bernstein_verify_lineage`
//!
//! # Where this differs from the reference 3.23.0
//!
//! * The firewall sees the arguments as sent: unknown keys and wrong types are refused with the
//!   structured validation error instead of being dropped or coerced first.
//! * `_meter.call_id` is the dispatcher's content-derived span id, not a random uuid.
//! * `bernstein_run_status` resolves a task id to its task run before the journal exists, so
//!   both id forms project one handle from the first poll; its progress fold reads the resolved
//!   run's own journal.
//! * `bernstein_verify_lineage` works (the reference's always fails).
//! * The `bernstein_create_subtask` alias validates the role only when one is given, so its
//!   default (`auto`) no longer fails its own schema.
//! * A refusal or error payload (firewall, gate, handler, timeout) answers `isError: true` and
//!   `_meter.ok: false`, with the payload bytes unchanged; its paths are relative to the
//!   project root.
//! * The firewall refuses control characters in object keys, and its refusals of the tools
//!   promised to answer `{error, hint}` carry a `hint`.
//! * The shutdown signal is written without following any link below the root, and a
//!   `workdir` may be confined to the served root and operator roots
//!   ([`ToolContext::workdir_roots`]).
//!
//! Everything else (payload shapes, key order, error texts, hints) follows the reference.

mod backend;
mod catalogue;
pub mod config;
mod context;
mod envelope;
mod error;
pub mod firewall;
mod opening;
mod outcome;
mod output;
mod registry;
mod spec;
mod tools;

pub use backend::{Backend, BackendKind, CancelAnswer, GateAnswer, Settled};
pub use catalogue::{Catalogue, PreparedCall, relative_to_root};
pub use config::{Tier, ToolConfig, Validation};
pub use context::{CallMeta, ProgressSink, ProgressTick, ToolContext};
pub use error::Error;
pub use opening::OpeningStore;
pub use outcome::ToolOutcome;
pub use spec::{TaskSupport, ToolAnnotations, ToolSpec};
pub use tools::skills::skill_index_text;

#[cfg(test)]
mod tests {
    use super::*;

    /// The backticked names of the bullet list under `heading` in this file's crate docs: the
    /// first name of each bullet, or with `all_before_arrow`, every name left of a `→`.
    fn documented(heading: &str, all_before_arrow: bool) -> Vec<String> {
        let docs: Vec<&str> = include_str!("lib.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("//!"))
            .map(str::trim)
            .collect();
        let start = docs
            .iter()
            .position(|line| line.starts_with(heading))
            .expect("the heading is in the crate docs");
        docs[start + 1..]
            .iter()
            .skip_while(|line| !line.starts_with("- "))
            .take_while(|line| line.starts_with("- "))
            .flat_map(|line| {
                let before_arrow = line.split('→').next().unwrap_or_default();
                let names = before_arrow
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned);
                if all_before_arrow {
                    names.collect::<Vec<_>>()
                } else {
                    names.take(1).collect()
                }
            })
            .collect()
    }

    #[test]
    fn crate_docs_list_exactly_the_registered_tools() {
        let everything = Catalogue::new(&ToolConfig {
            tier: Tier::All,
            ..ToolConfig::default()
        })
        .unwrap();
        let tools: Vec<String> = everything.tools().iter().map(|t| t.name.clone()).collect();
        assert_eq!(documented("In `tools/list` order", false), tools);
        let aliases: Vec<String> = everything
            .registered_names()
            .iter()
            .filter(|name| !tools.contains(name))
            .cloned()
            .collect();
        assert_eq!(documented("Deprecated aliases", true), aliases);
    }
}
