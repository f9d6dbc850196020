//! See <https://github.com/matklad/cargo-xtask/>.
//!
//! Project automation for bernstein-mcp, run as `cargo xtask <command>`:
//!
//! * `tidy`: repository hygiene and crate layering (also run by `cargo test`);
//! * `codegen [--check]`: generated docs (`docs/tools.md`) from the live tool catalogue;
//! * `bench`: the benchmarks, side by side with the reference when it is installed;
//! * `interop [evidence | chain | clients | loop] [--http]`: feeds trees written by
//!   bernstein-mcp to the reference's own verifiers (`evidence`), drives the binary over stdio
//!   with real MCP clients (`clients`), and runs the worker loop end to end on both backends
//!   (`loop`); no stage runs them all; `--http` runs `clients` and `loop` over
//!   `--transport http` (streamable HTTP, with and without a bearer, and SSE);
//! * `fuzz [--seconds N] [TARGET...]`: the cargo-fuzz targets in `fuzz/` (nightly), N seconds
//!   each, seeded with the committed corpus.
//! * `conformance`: the official MCP conformance suites (0.1.16 and 0.2.0-alpha.12) against the
//!   conformance server and `bernstein-mcp` over HTTP, with pass/fail counts.
//! * `soak [kill | writers | disk]`: the fault tests at soak size (SIGKILL under load, many
//!   writers on one workdir, full and read-only disks).
//! * `syscalls`: the system calls of one anchored `bernstein_run_status` call, counted with
//!   `strace -f -c`, against the lean call path's budget (SKIPPED without strace).

#![allow(
    clippy::print_stderr,
    clippy::print_stdout,
    reason = "xtask is a command-line tool that reports to its terminal"
)]

mod bench;
mod bench_doc;
mod bench_guard;
mod bench_http;
mod bench_limits;
mod bench_load;
mod bench_scale;
mod bench_stdio;
mod codegen;
mod conformance;
mod fuzz;
mod interop;
mod interop_clients;
mod interop_drivers;
mod interop_loop;
mod progress;
mod soak;
mod syscalls;
mod tidy;
mod tidy_deps;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("tidy") => tidy::run(),
        Some("bench") => bench::run(&args[1..]),
        Some("codegen") => codegen::run(&args[1..]),
        Some("interop") => interop::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("conformance") => conformance::run(&args[1..]),
        Some("soak") => soak::run(&args[1..]),
        Some("syscalls") => syscalls::run(),
        _ => {
            eprintln!(
                "usage: cargo xtask <tidy | codegen [--check] | bench [NAME] | \
                 interop [evidence | chain | clients | loop] [--http] | fuzz [--seconds N] [TARGET...] | \
                 conformance | soak [kill | writers | disk] | syscalls>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root, from this crate's manifest directory.
fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The cargo that runs us, so nested invocations use the same toolchain.
fn cargo() -> std::process::Command {
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}
