//! The `bernstein-mcp` binary.
//!
//! `main` only parses the command line, sets up logging to stderr, runs the command and maps
//! the outcome to an exit code: 0 verified (or served until input ended), 1 verification
//! failed, 2 usage or setup error. With no subcommand it serves MCP over stdio. The work itself
//! lives in the library crates.

mod audit_calls;
mod cli;
mod http_serve;
mod project_verify;
mod serve;
mod verify_cmds;

use std::process::ExitCode;

use clap::Parser;

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
    init_logging();
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
        cli::Command::Verify(args) => verify_cmds::project_verify(
            &args.project.workdir,
            &args.receipt,
            args.key_file,
            args.json,
        ),
    }
}

/// Logs go to stderr: on stdio, stdout belongs to the protocol. `RUST_LOG` sets the filter.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .without_time()
        .init();
}
