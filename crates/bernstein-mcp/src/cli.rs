//! The command line: flag definitions and the environment the binary reads.
//!
//! This is the only place in the workspace that reads environment variables. Library crates get
//! every value passed in explicitly.

use std::path::PathBuf;

use anyhow::Context;
use bernstein_journal::key::{AuditKey, KeyLocator};
use clap::{Args, Parser, Subcommand};

/// bernstein-mcp: the Bernstein MCP server and offline evidence verifier.
///
/// Without a subcommand it serves MCP over stdio for the project in the current directory (or
/// `--workdir`).
#[derive(Debug, Parser)]
#[command(name = "bernstein-mcp", version, about, long_about = None, args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
}

/// How the default serve mode runs.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The project root to serve, the directory that holds (or will hold) `.sdd/`. Defaults to
    /// the current directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) workdir: Option<PathBuf>,
    /// Drive a running `bernstein serve` at this URL instead of the embedded task store.
    /// Defaults to $BERNSTEIN_SERVER_URL; the bearer it needs comes from $BERNSTEIN_AUTH_TOKEN.
    #[arg(long, value_name = "URL")]
    pub(crate) server_url: Option<String>,
    /// The tool tier: core, standard (the default) or all. Wins over $BERNSTEIN_MCP_TOOL_TIER.
    #[arg(long, value_name = "TIER")]
    pub(crate) mcp_tier: Option<String>,
    /// The run whose journal anchors every served tool call (default `mcp-calls`).
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) anchor_run: Option<String>,
    /// The audit key file (created when missing). Defaults to $BERNSTEIN_AUDIT_KEY_PATH, then
    /// $XDG_STATE_HOME/bernstein/audit.key, then ~/.local/state/bernstein/audit.key.
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Confine the `workdir` argument of the tools that take one to the served project root and
    /// the roots given here (repeatable; also $BERNSTEIN_MCP_ALLOW_ROOTS, `:`-separated). Without
    /// any, a local stdio client may name any project root on the machine.
    #[arg(long = "allow-root", value_name = "DIR")]
    pub(crate) allow_roots: Vec<PathBuf>,
    /// The transport: `stdio` (the default) or `http` (streamable HTTP on /mcp and SSE on /sse,
    /// one listener). Defaults to $BERNSTEIN_MCP_TRANSPORT.
    #[arg(long, value_name = "TRANSPORT")]
    pub(crate) transport: Option<String>,
    /// With `--transport http`: the bind host (default 127.0.0.1; $BERNSTEIN_MCP_HOST). A
    /// non-loopback host needs $BERNSTEIN_MCP_TOKEN.
    #[arg(long, value_name = "HOST")]
    pub(crate) host: Option<String>,
    /// With `--transport http`: the bind port (default 8053; $BERNSTEIN_MCP_PORT).
    #[arg(long, value_name = "PORT")]
    pub(crate) port: Option<u16>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Audit-chain commands.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Run-journal commands.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Claimable-backlog commands.
    #[command(subcommand)]
    Backlog(BacklogCommand),
    /// Context-capsule commands.
    #[command(subcommand)]
    Capsule(CapsuleCommand),
    /// Run every offline verifier over the project and print one report with a section per kind:
    /// audit chain, run journals and their handles, mailbox (alone and against the chain), the
    /// claim receipts given, artifacts with blobs and spines, the lineage log, capsules, plans.
    ///
    /// Exit status: 0 when everything verifies, 1 when anything fails, 2 on a usage or setup
    /// error.
    Verify(ProjectVerifyArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum BacklogCommand {
    /// Verify a signed claim receipt offline: the backlog head re-projected from the backlog (or
    /// from the snapshot a task-store receipt carries), the Ed25519 signature, the audit chain,
    /// and for a grant the `task.claim_receipt` event that recorded it.
    ///
    /// Exit status: 0 verified, 1 failed, 2 usage or setup error.
    VerifyClaim(VerifyClaimArgs),
}

#[derive(Debug, Args)]
pub(crate) struct VerifyClaimArgs {
    /// The receipt JSON (a bare receipt, or a tool result with the receipt under `result`).
    #[arg(long, value_name = "R")]
    pub(crate) receipt: PathBuf,
    /// The backlog file. Defaults to `<workdir>/.sdd/runtime/task-backlog.json`.
    #[arg(long, value_name = "B")]
    pub(crate) backlog: Option<PathBuf>,
    /// The audit directory. Defaults to `<workdir>/.sdd/audit`.
    #[arg(long, value_name = "D")]
    pub(crate) audit_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
    /// The audit key file (see `audit verify`).
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum CapsuleCommand {
    /// Verify a task's signed context capsule: its signature (a mock capsule is reported as
    /// mock and never OK), its `context.capsule` audit anchor and its run journal.
    ///
    /// Exit status: 0 verified, 1 failed, 2 usage or setup error.
    Verify(CapsuleVerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CapsuleVerifyArgs {
    /// The task whose capsule to verify.
    pub(crate) task_id: String,
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
    /// The audit key file (see `audit verify`).
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ProjectVerifyArgs {
    #[command(flatten)]
    pub(crate) project: ProjectArgs,
    /// A claim receipt to verify as well; repeat for several.
    #[arg(long, value_name = "R")]
    pub(crate) receipt: Vec<PathBuf>,
    /// The audit key file (see `audit verify`).
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Verify the HMAC audit chain under `<workdir>/.sdd/audit`.
    ///
    /// Exit status: 0 when the chain verifies (no hard error, no unacknowledged tear), 1 when it
    /// does not, 2 on a usage or setup error such as a missing or unsafe key.
    Verify(AuditVerifyArgs),
    /// Print the MCP call order of a run, reconstructed from the audit chain alone.
    ///
    /// Verifies the chain, keeps the run's `mcp.stateless_call` entries, sorts them by
    /// call_index and requires exactly 0..n-1. Exit status: 0 when all of that holds, 1 when
    /// it does not (naming the failing entry), 2 on a usage or setup error.
    Calls(AuditCallsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct AuditCallsArgs {
    /// The anchoring run id (for example `mcp-calls`).
    pub(crate) run_id: String,
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
    /// Print the run handle exactly as `bernstein_run_status` returns it with the cost meter off,
    /// or with `--verify` check it against the journal and the audit chain. Exit status with
    /// `--verify`: 0 when the handle verifies (stale or not), 1 when it does not, 2 on a usage
    /// or setup error (an unknown run, an id that is not one plain path component, no key).
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
    /// Verify the handle: the chain verifies, the entry at chainHead names the run (and, for a
    /// seal, states the handle's status and journal head), the status, journal head and
    /// receiptHash re-project; reports whether later entries name the run.
    #[arg(long)]
    pub(crate) verify: bool,
    /// With --verify: check this saved handle (a `bernstein_run_status` body, with or without
    /// the meter envelope) instead of the one projected now.
    #[arg(long, value_name = "FILE", requires = "verify")]
    pub(crate) handle: Option<PathBuf>,
    /// With --verify: the audit key file (default search path as for `audit verify`).
    #[arg(long, value_name = "F", requires = "verify")]
    pub(crate) key_file: Option<PathBuf>,
    /// With --verify: print one JSON object on stdout instead of the human report.
    #[arg(long, requires = "verify")]
    pub(crate) json: bool,
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

/// A non-empty environment variable.
pub(crate) fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// An environment variable as set, empty values included (the toggles distinguish them).
pub(crate) fn env_raw(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Loads the audit key for a verification command: from the explicit file, else the
/// environment's search path. Verification never creates a key, so a missing one is an error.
pub(crate) fn load_audit_key(explicit: Option<PathBuf>) -> anyhow::Result<AuditKey> {
    AuditKey::load(&key_locator(explicit)).context("cannot load the audit key")
}
