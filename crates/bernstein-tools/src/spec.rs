//! What `tools/list` advertises for one tool.

use bernstein_protocol::pyjson::{Object, Value as PyValue};

/// How a tool may be invoked under the Tasks extension (`execution.taskSupport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskSupport {
    /// The tool may be called plainly or task-augmented (`bernstein_run`).
    Optional,
    /// The tool must not be called task-augmented (`bernstein_run_status`).
    Forbidden,
}

impl TaskSupport {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Optional => "optional",
            TaskSupport::Forbidden => "forbidden",
        }
    }
}

/// MCP tool annotations: hints about a tool's effects. The reference advertises none, so
/// [`ToolSpec::to_list_entry`] leaves them out; a host that wants them can emit these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolAnnotations {
    /// The tool does not change its environment.
    pub read_only: bool,
    /// The tool may destroy or overwrite state (meaningful when not read-only).
    pub destructive: bool,
    /// Calling the tool again with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool talks to the world outside the project (a task server, other hosts).
    pub open_world: bool,
}

/// One advertised tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool name.
    pub name: String,
    /// A display title (the reference advertises none).
    pub title: Option<String>,
    /// The description: the schema file's `description`.
    pub description: String,
    /// The draft-07 input schema, the schema file verbatim.
    pub input_schema: serde_json::Value,
    /// The output schema: the envelope (or bare payload) schema of the structured tools, the
    /// `{"result": string}` wrapper schema of the others.
    pub output_schema: Option<serde_json::Value>,
    /// `execution.taskSupport`, for the two tools that declare it.
    pub task_support: Option<TaskSupport>,
    /// Effect hints.
    pub annotations: ToolAnnotations,
    /// The declared per-call timeout in seconds (`timeoutSeconds` of the schema), if any.
    pub timeout_seconds: Option<f64>,
    /// The same entry with the reference's key order preserved (see
    /// [`ToolSpec::to_list_entry`]).
    pub(crate) ordered_input_schema: Object,
    pub(crate) ordered_output_schema: Option<PyValue>,
}

impl ToolSpec {
    /// The `tools/list` entry with the reference's key order (`name, description, inputSchema,
    /// outputSchema, execution`) and the schema files' own key order, for hosts that need the
    /// reference's bytes. `serde_json::Value` (without `preserve_order`) sorts keys; this does
    /// not.
    pub fn to_list_entry(&self) -> Object {
        let mut entry = Object::new().with("name", self.name.as_str());
        if let Some(title) = &self.title {
            entry.insert("title", title.as_str());
        }
        entry.insert("description", self.description.as_str());
        entry.insert(
            "inputSchema",
            PyValue::Object(self.ordered_input_schema.clone()),
        );
        if let Some(output) = &self.ordered_output_schema {
            entry.insert("outputSchema", output.clone());
        }
        if let Some(support) = self.task_support {
            entry.insert(
                "execution",
                Object::new().with("taskSupport", support.as_str()),
            );
        }
        entry
    }
}
