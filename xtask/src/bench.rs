//! `cargo xtask bench [NAME]`: runs the benchmarks in release mode, side by side with the
//! reference implementation when it is installed.
//!
//! Benchmarks are `harness = false` bench targets that print their own figures; this command only
//! finds them, points them at the reference interpreter, and runs them in one go so the figures
//! in a report come from one run on one machine.
//!
//! `stdio` is driven from here instead (`crate::bench_stdio`): it spawns server processes and
//! speaks MCP to them, ours beside the reference and a bare rmcp server. `cargo xtask bench
//! stdio [--calls N] [--status-calls N]` runs it alone.

use std::path::PathBuf;

use anyhow::ensure;

use crate::{bench_stdio, cargo, project_root};

/// `(package, bench target)`, in the order they run.
const BENCHES: &[(&str, &str)] = &[
    ("bernstein-journal", "audit"),
    ("bernstein-journal", "evidence"),
    ("bernstein-tasks", "store"),
];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let filter = args.first().map(String::as_str);
    let python = std::env::var_os("BERNSTEIN_PY")
        .map(PathBuf::from)
        .or_else(|| {
            let default = PathBuf::from(std::env::var_os("HOME")?)
                .join(".cache/bernstein-mcp/oracle/bin/python");
            default.exists().then_some(default)
        });
    match &python {
        Some(py) => eprintln!("bench: comparing with the reference at {}", py.display()),
        None => eprintln!("bench: reference not installed; measuring bernstein-mcp alone"),
    }
    let mut ran = 0;
    for (package, bench) in BENCHES {
        if filter.is_some_and(|f| f != *bench && f != *package) {
            continue;
        }
        let manifest = project_root()
            .join("crates")
            .join(package)
            .join("benches")
            .join(format!("{bench}.rs"));
        if !manifest.exists() {
            continue;
        }
        let mut command = cargo();
        command
            .args(["bench", "-q", "-p", package, "--bench", bench])
            .current_dir(project_root());
        if let Some(py) = &python {
            command.env("BERNSTEIN_PY", py);
        }
        ensure!(
            command.status()?.success(),
            "benchmark {package}/{bench} failed"
        );
        ran += 1;
    }
    if filter.is_none_or(|f| f == "stdio") {
        bench_stdio::run(python.as_deref(), args.get(1..).unwrap_or_default())?;
        ran += 1;
    }
    ensure!(ran > 0, "no benchmark matched {filter:?}");
    Ok(())
}
