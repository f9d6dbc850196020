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
        Some("bench") if cfg!(debug_assertions) => return rerun_optimised(&args),
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

/// Runs this xtask command again from a release build of xtask and ends with its exit code.
///
/// The benchmarks' clients (the stdio client, the HTTP load generator, the scale driver and the
/// raw HMAC limit) run in this process, on the same two cores as the servers they load. Built
/// unoptimised (the `cargo xtask` alias is a dev build), the HTTP load generator spent about
/// 118 us of processor time on each of our 1.4 KB `bernstein_run_status` answers and 41 us on
/// each of bare rmcp's (an optimised build: 32 and 6.6 us), so it measured itself as much as
/// the servers and held down most the floors, the cheapest to serve: our ratios to them read
/// high.
fn rerun_optimised(args: &[String]) -> ExitCode {
    let mut command = nested_cargo();
    command
        .current_dir(project_root())
        .args(["run", "--quiet", "--release", "--package", "xtask", "--"])
        .args(args);
    // Replacing this process (cargo, in turn, replaces itself with the program it runs) leaves
    // one process, so Ctrl-C reaches only the bench and its own handler cleans up.
    let err = std::os::unix::process::CommandExt::exec(&mut command);
    eprintln!("xtask: cannot run the release build of xtask: {err}");
    ExitCode::FAILURE
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

/// [`cargo`] without the variables `cargo run` gave xtask for its own package: a build script
/// that watches one of them would see it change and rebuild the whole tree, twice (in the
/// nested cargo, then in the next plain `cargo test`).
fn nested_cargo() -> std::process::Command {
    let mut command = cargo();
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_MANIFEST_") {
            command.env_remove(name.as_ref());
        }
    }
    command
}
