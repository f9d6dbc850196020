//! The static tool table: names, tiers, schema files, aliases, in the reference's registration
//! order.

use crate::config::Tier;
use crate::spec::{TaskSupport, ToolAnnotations};

/// One tool of the catalogue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolDef {
    /// The tool name (and schema file stem).
    pub(crate) name: &'static str,
    /// The smallest tier that serves it.
    pub(crate) tier: Tier,
    /// The draft-07 input schema file.
    pub(crate) schema: &'static str,
    /// Whether the tool declares an output schema of its own and returns structured content.
    pub(crate) structured: bool,
    /// `execution.taskSupport`.
    pub(crate) task_support: Option<TaskSupport>,
    /// Effect hints.
    pub(crate) annotations: ToolAnnotations,
    /// Served only when lineage is enabled.
    pub(crate) needs_lineage: bool,
}

/// One deprecated alias.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AliasDef {
    /// The old name (and schema file stem).
    pub(crate) name: &'static str,
    /// The tool that replaced it.
    pub(crate) replacement: &'static str,
    /// Its own draft-07 input schema file.
    pub(crate) schema: &'static str,
}

/// The release the aliases are announced to disappear in (already past; they stay).
pub(crate) const ALIAS_REMOVAL_RELEASE: &str = "v3.12.0";

const fn hints(
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
) -> ToolAnnotations {
    ToolAnnotations {
        read_only,
        destructive,
        idempotent,
        open_world,
    }
}

macro_rules! schema {
    ($name:literal) => {
        include_str!(concat!("../schemas/", $name, ".json"))
    };
}

/// Every tool, in registration order (the order of `tools/list`).
pub(crate) const TOOLS: [ToolDef; 16] = [
    ToolDef {
        name: "bernstein_run",
        tier: Tier::Core,
        schema: schema!("bernstein_run"),
        structured: true,
        task_support: Some(TaskSupport::Optional),
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_subscribe",
        tier: Tier::Standard,
        schema: schema!("bernstein_subscribe"),
        structured: true,
        task_support: None,
        annotations: hints(true, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_status",
        tier: Tier::Core,
        schema: schema!("bernstein_status"),
        structured: true,
        task_support: None,
        annotations: hints(true, false, true, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_claim",
        tier: Tier::Standard,
        schema: schema!("bernstein_claim"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_create_task",
        tier: Tier::Standard,
        schema: schema!("bernstein_create_task"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_post_message",
        tier: Tier::Standard,
        schema: schema!("bernstein_post_message"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_post_artifact",
        tier: Tier::Standard,
        schema: schema!("bernstein_post_artifact"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_cancel",
        tier: Tier::Standard,
        schema: schema!("bernstein_cancel"),
        structured: false,
        task_support: None,
        annotations: hints(false, true, true, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_shutdown_orchestrator",
        tier: Tier::Standard,
        schema: schema!("bernstein_shutdown_orchestrator"),
        structured: false,
        task_support: None,
        annotations: hints(false, true, true, false),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_approve",
        tier: Tier::Standard,
        schema: schema!("bernstein_approve"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_complete",
        tier: Tier::Standard,
        schema: schema!("bernstein_complete"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_run_status",
        tier: Tier::Core,
        schema: schema!("bernstein_run_status"),
        structured: true,
        task_support: Some(TaskSupport::Forbidden),
        // Not read-only: a poll journals and seals a run whose end is not recorded yet (once;
        // the same poll again writes nothing, hence idempotent), and asks a task server.
        annotations: hints(false, false, true, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_task_capsule",
        tier: Tier::Standard,
        schema: schema!("bernstein_task_capsule"),
        structured: false,
        task_support: None,
        annotations: hints(true, false, true, false),
        needs_lineage: false,
    },
    ToolDef {
        name: "load_skill",
        tier: Tier::Standard,
        schema: schema!("load_skill"),
        structured: false,
        task_support: None,
        annotations: hints(true, false, true, false),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_scenario",
        tier: Tier::All,
        schema: schema!("bernstein_scenario"),
        structured: false,
        task_support: None,
        annotations: hints(false, false, false, true),
        needs_lineage: false,
    },
    ToolDef {
        name: "bernstein_verify_lineage",
        tier: Tier::All,
        schema: schema!("bernstein_verify_lineage"),
        structured: false,
        task_support: None,
        annotations: hints(true, false, true, false),
        needs_lineage: true,
    },
];

/// Every deprecated alias, in registration order.
pub(crate) const ALIASES: [AliasDef; 11] = [
    AliasDef {
        name: "bernstein_health",
        replacement: "bernstein_status",
        schema: schema!("bernstein_health"),
    },
    AliasDef {
        name: "bernstein_tasks",
        replacement: "bernstein_status",
        schema: schema!("bernstein_tasks"),
    },
    AliasDef {
        name: "bernstein_cost",
        replacement: "bernstein_status",
        schema: schema!("bernstein_cost"),
    },
    AliasDef {
        name: "bernstein_create_subtask",
        replacement: "bernstein_run",
        schema: schema!("bernstein_create_subtask"),
    },
    AliasDef {
        name: "bernstein_task_handle",
        replacement: "bernstein_run_status",
        schema: schema!("bernstein_task_handle"),
    },
    AliasDef {
        name: "bernstein_update",
        replacement: "bernstein_post_message",
        schema: schema!("bernstein_update"),
    },
    AliasDef {
        name: "bernstein_context",
        replacement: "bernstein_task_capsule",
        schema: schema!("bernstein_context"),
    },
    AliasDef {
        name: "bernstein_stop",
        replacement: "bernstein_shutdown_orchestrator",
        schema: schema!("bernstein_stop"),
    },
    AliasDef {
        name: "bernstein_scenarios",
        replacement: "bernstein_scenario",
        schema: schema!("bernstein_scenarios"),
    },
    AliasDef {
        name: "bernstein_scenario_status",
        replacement: "bernstein_scenario",
        schema: schema!("bernstein_scenario_status"),
    },
    AliasDef {
        name: "verify_chain",
        replacement: "bernstein_verify_lineage",
        schema: schema!("verify_chain"),
    },
];
