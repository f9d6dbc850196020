//! `cargo xtask conformance`: the official MCP conformance suites against our HTTP servers.
//!
//! Installs the clients kit when it is missing (the same installer `interop clients` uses,
//! which puts `@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha.12 under
//! `$CLIENTS_DIR`), builds `bernstein-conformance` and `bernstein-mcp`, starts each with
//! `--transport http` on a free loopback port over a scratch project, and runs:
//!
//! * 0.1.16, `--spec-version 2025-11-25`;
//! * 0.2.0-alpha.12, `--suite all --spec-version 2026-07-28`;
//! * 0.2.0-alpha.12, each tasks-extension scenario on its own.
//!
//! It prints the checks passed and failed per run and the failing scenarios. Against the
//! conformance server each run is checked against its expected-failures file
//! (`crates/bernstein-conformance/expected-failures/<version>.yml`, every entry with its
//! reason); a failure not listed there, or an entry that now passes, fails the command. Against
//! `bernstein-mcp`, which serves no fixtures, the counts are reported only.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, ensure};
use serde_json::Value;

use crate::interop_drivers::{ClientKit, HttpServer};
use crate::{cargo, project_root};

/// The SEP-2663 tasks-extension scenarios, run one at a time.
const TASK_SCENARIOS: [&str; 10] = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
];

/// One run of a suite.
struct Suite {
    label: String,
    wrapper: &'static str,
    args: Vec<String>,
    baseline: &'static str,
}

fn suites() -> Vec<Suite> {
    let strings = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    let mut suites = vec![
        Suite {
            label: "0.1.16 (2025-11-25)".to_owned(),
            wrapper: "mcp-conformance",
            args: strings(&["--spec-version", "2025-11-25"]),
            baseline: "0.1.16.yml",
        },
        Suite {
            label: "0.2.0-alpha.12 --suite all (2026-07-28)".to_owned(),
            wrapper: "mcp-conformance-alpha",
            args: strings(&["--suite", "all", "--spec-version", "2026-07-28"]),
            baseline: "0.2.0-alpha.12.yml",
        },
    ];
    for scenario in TASK_SCENARIOS {
        suites.push(Suite {
            label: format!("0.2.0-alpha.12 {scenario}"),
            wrapper: "mcp-conformance-alpha",
            args: strings(&["--scenario", scenario]),
            baseline: "0.2.0-alpha.12.yml",
        });
    }
    suites
}

/// Checks counted over a run's `checks.json` files.
#[derive(Debug, Default)]
struct Counts {
    passed: usize,
    failed: usize,
    warnings: usize,
    failing: Vec<String>,
}

fn count(dir: &Path) -> Counts {
    let mut counts = Counts::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return counts;
    };
    let mut runs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    runs.sort();
    for run in runs {
        let Ok(text) = std::fs::read_to_string(run.join("checks.json")) else {
            continue;
        };
        let Ok(Value::Array(checks)) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let mut failed_here = false;
        for check in &checks {
            match check["status"].as_str() {
                Some("SUCCESS") => counts.passed += 1,
                Some("FAILURE") => {
                    counts.failed += 1;
                    failed_here = true;
                }
                Some("WARNING") => counts.warnings += 1,
                _ => {}
            }
        }
        if failed_here {
            let name = run
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            // `server-<scenario>-<YYYY-MM-DDT…>`: cut at the timestamp.
            let rest = name.strip_prefix("server-").unwrap_or(&name);
            let stamp = rest.char_indices().find(|(at, c)| {
                let tail = &rest.as_bytes()[at + c.len_utf8()..];
                *c == '-'
                    && tail.len() > 10
                    && tail[..4].iter().all(u8::is_ascii_digit)
                    && tail[4] == b'-'
                    && tail[10] == b'T'
            });
            let scenario = stamp.map_or(rest, |(at, _)| &rest[..at]).to_owned();
            counts.failing.push(scenario);
        }
    }
    counts
}

/// A server to test: name, program, arguments, environment, and whether a baseline applies.
type Target = (
    &'static str,
    PathBuf,
    Vec<String>,
    Vec<(String, String)>,
    bool,
);

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    ensure!(args.is_empty(), "usage: cargo xtask conformance");
    let kit = match ClientKit::locate_or_install()? {
        Ok(kit) => kit,
        Err(reason) => {
            println!("conformance: SKIPPED: {reason}");
            return Ok(());
        }
    };
    let status = cargo()
        .args([
            "build",
            "-q",
            "-p",
            "bernstein-mcp",
            "-p",
            "bernstein-conformance",
        ])
        .current_dir(project_root())
        .status()?;
    ensure!(status.success(), "cargo build failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"));
    let scratch =
        std::env::temp_dir().join(format!("bernstein-conformance-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)?;
    let baselines = project_root().join("crates/bernstein-conformance/expected-failures");

    let conformance_project = scratch.join("conformance-project");
    std::fs::create_dir_all(&conformance_project)?;
    let project = crate::interop_drivers::Project::create(&scratch.join("bernstein-mcp"))?;
    let servers: [Target; 2] = [
        (
            "bernstein-conformance",
            target.join("debug/bernstein-conformance"),
            vec![
                "--workdir".to_owned(),
                conformance_project.display().to_string(),
            ],
            Vec::new(),
            true,
        ),
        (
            "bernstein-mcp",
            target.join("debug/bernstein-mcp"),
            vec![
                "--workdir".to_owned(),
                project.root.display().to_string(),
                "--mcp-tier".to_owned(),
                "all".to_owned(),
            ],
            vec![(
                "BERNSTEIN_AUDIT_KEY_PATH".to_owned(),
                project.key.display().to_string(),
            )],
            false,
        ),
    ];
    let mut problems = Vec::new();
    let mut summary = Vec::new();
    for (name, program, args, env, with_baseline) in &servers {
        let server = HttpServer::start(program, args, env, None)?;
        for (index, suite) in suites().iter().enumerate() {
            let out = scratch.join(format!("out-{name}-{index}"));
            let mut command = Command::new(kit.wrapper(suite.wrapper));
            command
                .args(["server", "--url", &server.url()])
                .args(&suite.args)
                .arg("-o")
                .arg(&out)
                .stdin(Stdio::null());
            if *with_baseline {
                command
                    .arg("--expected-failures")
                    .arg(baselines.join(suite.baseline));
            }
            let output = command
                .output()
                .with_context(|| format!("run {}", suite.wrapper))?;
            let counts = count(&out);
            let line = format!(
                "{name} / {}: {} passed, {} failed, {} warnings{}",
                suite.label,
                counts.passed,
                counts.failed,
                counts.warnings,
                if counts.failing.is_empty() {
                    String::new()
                } else {
                    format!(" (failing: {})", counts.failing.join(", "))
                }
            );
            println!("{line}");
            summary.push((name, counts));
            if *with_baseline && !output.status.success() {
                let stdout = String::from_utf8_lossy(&output.stdout);
                let verdict: Vec<&str> = stdout
                    .lines()
                    .skip_while(|l| {
                        !l.contains("Baseline") && !l.contains("Unexpected") && !l.contains("Stale")
                    })
                    .collect();
                problems.push(format!(
                    "{name} / {}: the expected-failures baseline does not hold:\n{}",
                    suite.label,
                    verdict.join("\n")
                ));
            }
        }
    }
    for name in ["bernstein-conformance", "bernstein-mcp"] {
        let (passed, failed) = summary
            .iter()
            .filter(|(n, _)| **n == name)
            .fold((0, 0), |(p, f), (_, c)| (p + c.passed, f + c.failed));
        println!("{name}: {passed} passed, {failed} failed (checks, all runs)");
    }
    let _ = std::fs::remove_dir_all(&scratch);
    ensure!(problems.is_empty(), "{}", problems.join("\n"));
    Ok(())
}
