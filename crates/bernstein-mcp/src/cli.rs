//! The command line: flag definitions and the environment the binary reads.
//!
//! This is the only place in the workspace that reads environment variables. Library crates get
//! every value passed in explicitly.

use std::path::PathBuf;

use bernstein_journal::key::KeyLocator;
use clap::{Args, Parser, Subcommand};

/// bernstein-mcp: the Bernstein MCP server and offline evidence verifier.
#[derive(Debug, Parser)]
#[command(name = "bernstein-mcp", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Audit-chain commands.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Run-journal commands.
    #[command(subcommand)]
    Journal(JournalCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the HMAC audit chain under `<workdir>/.sdd/audit`.
    ///
    /// Exit status: 0 when the chain verifies (no hard error, no unacknowledged tear), 1 when it
    /// does not, 2 on a usage or setup error such as a missing or unsafe key.
    Verify(AuditVerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AuditVerifyArgs {
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
    /// The audit key file. Defaults to $BERNSTEIN_AUDIT_KEY_PATH, then
    /// $XDG_STATE_HOME/bernstein/audit.key, then ~/.local/state/bernstein/audit.key.
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum JournalCommand {
    /// Verify the hash chain of `<workdir>/.sdd/runs/<RUN_ID>/journal.jsonl`.
    Verify(JournalVerifyArgs),
    /// Print the run handle exactly as `bernstein_run_status` returns it with the cost meter off.
    Handle(JournalHandleArgs),
}

#[derive(Debug, Args)]
pub(crate) struct JournalVerifyArgs {
    /// The run id (for example `task-abc123`).
    pub(crate) run_id: String,
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JournalHandleArgs {
    /// A run id or a task id; both project the same handle.
    pub(crate) run_or_task_id: String,
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ProjectArgs {
    /// The project root, the directory that holds `.sdd/`.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) workdir: PathBuf,
}

/// The audit-key search path from an explicit flag and the process environment.
pub(crate) fn key_locator(explicit: Option<PathBuf>) -> KeyLocator {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    KeyLocator {
        explicit,
        env_key_path: non_empty("BERNSTEIN_AUDIT_KEY_PATH"),
        xdg_state_home: non_empty("XDG_STATE_HOME"),
        home: non_empty("HOME"),
    }
}
