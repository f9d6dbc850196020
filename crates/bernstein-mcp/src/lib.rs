//! The command-line definition of `bernstein-mcp`, as a library.
//!
//! The binary (`main.rs`) parses this same definition; `cargo xtask codegen` renders the man
//! page from it, so the page cannot drift from the flags. Nothing else is exported: the
//! binary's work lives in the library crates.

// The binary reads these arguments and calls the environment helpers; here only the clap
// definition is used, so the rest of the module is dead in this target by design.
#[allow(
    dead_code,
    reason = "the binary target uses what the man page does not"
)]
mod cli;
mod cli_ops;

/// The `bernstein-mcp` command as clap builds it, for generated documentation.
pub fn command() -> clap::Command {
    <cli::Cli as clap::CommandFactory>::command()
}
