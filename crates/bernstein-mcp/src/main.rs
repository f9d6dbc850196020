//! The `bernstein-mcp` binary.
//!
//! `main` only parses the command line, sets up logging to stderr, runs the command and maps
//! the outcome to an exit code: 0 verified (or served until input ended), 1 verification
//! failed, 2 usage or setup error. With no subcommand it serves MCP over stdio. The work itself
//! lives in the library crates.

mod audit_calls;
mod cli;
mod cli_ops;
mod completions;
mod doctor;
mod http_serve;
mod logging;
mod metrics_setup;
mod progress;
mod project_verify;
mod serve;
mod verify_cmds;

use std::process::ExitCode;

use clap::Parser;

/// The process allocator is jemalloc, configured at build time (`.cargo/config.toml`,
/// `JEMALLOC_SYS_WITH_MALLOC_CONF`) to give freed pages back to the system about a second after
/// they were freed, from one background thread. A claim on a backlog of many open tasks needs
/// memory for a moment (its answer carries every row): with glibc's allocator a server kept
/// about 1 GiB resident after two claims on 100,000 open rows (it returns a heap's memory only
/// from its top, and keeps one arena per thread); with this one it is back to within
/// about 50 MiB of its idle size half a second later (`memory_cli` tests it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// What a command concluded, mapped to the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Everything verified (exit 0).
    Verified,
    /// Something failed verification (exit 1).
    Failed,
    /// The server ran until its input ended (exit 0).
    Served,
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    logging::init(cli.log_format);
    match run(cli) {
        Ok(Outcome::Verified | Outcome::Served) => ExitCode::SUCCESS,
        Ok(Outcome::Failed) => ExitCode::from(1),
        Err(err) => {
            // A setup error (missing key, unreadable project) is a usage problem, not a verdict.
            tracing::error!("{err:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: cli::Cli) -> anyhow::Result<Outcome> {
    let Some(command) = cli.command else {
        return serve::serve(cli.serve);
    };
    match command {
        cli::Command::Audit(cli::AuditCommand::Verify(args)) => verify_cmds::audit_verify(args),
        cli::Command::Audit(cli::AuditCommand::Calls(args)) => audit_calls::audit_calls(args),
        cli::Command::Journal(cli::JournalCommand::Verify(args)) => {
            verify_cmds::journal_verify(args)
        }
        cli::Command::Journal(cli::JournalCommand::Handle(args)) => {
            verify_cmds::journal_handle(args)
        }
        cli::Command::Backlog(cli::BacklogCommand::VerifyClaim(args)) => {
            verify_cmds::backlog_verify_claim(
                &args.receipt,
                args.backlog,
                args.audit_dir,
                &args.project.workdir,
                args.key_file,
                args.json,
            )
        }
        cli::Command::Capsule(cli::CapsuleCommand::Verify(args)) => verify_cmds::capsule_verify(
            &args.task_id,
            &args.project.workdir,
            args.key_file,
            args.json,
        ),
        cli::Command::Doctor(args) => doctor::doctor(args),
        cli::Command::Completions(args) => completions::completions(args.shell),
        cli::Command::Verify(args) => verify_cmds::project_verify(
            &args.project.workdir,
            &args.receipt,
            args.key_file,
            args.json,
        ),
    }
}
