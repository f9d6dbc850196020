//! `cargo xtask fuzz [--seconds N] [TARGET...]`: runs the cargo-fuzz targets in `fuzz/`, each
//! for N seconds (default 60), seeded with the committed corpus `fuzz/corpus/<target>/`.
//!
//! cargo-fuzz and the nightly toolchain are installed on first use (`cargo install cargo-fuzz
//! --locked`, `rustup toolchain install nightly`). The targets are built without a sanitizer:
//! the workspace forbids `unsafe`, so what a fuzzer finds here is a panic, a hang or runaway
//! memory, and an uninstrumented build runs several times more inputs per second on the same
//! cores. New inputs the fuzzer finds go to a scratch corpus under the target directory, so
//! the committed corpus stays small. A failing input is left in `fuzz/artifacts/<target>/`;
//! copied into `fuzz/regressions/<target>/`, it is replayed by `cargo test -p bernstein-stdio
//! --test it fuzz_twins` from then on.
//!
//! The summary prints, per target, the executions, the rate and the outcome; the command
//! fails when any target failed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::project_root;

/// Per-input time limit (seconds): an input slower than this is reported as a hang.
const INPUT_TIMEOUT_SECONDS: u32 = 30;

/// Memory limit of a fuzzing process (MiB): more counts as an out-of-memory finding.
const RSS_LIMIT_MB: u32 = 2048;

/// One target's run.
struct Outcome {
    target: String,
    seconds: f64,
    executions: Option<u64>,
    failure: Option<String>,
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let mut seconds: u64 = 60;
    let mut wanted = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--seconds" => {
                seconds = rest
                    .next()
                    .context("--seconds needs a value")?
                    .parse()
                    .context("--seconds takes a whole number")?;
            }
            other if other.starts_with('-') => bail!("unknown option {other}"),
            target => wanted.push(target.to_owned()),
        }
    }
    let fuzz_dir = project_root().join("fuzz");
    ensure_tools()?;
    let targets = list_targets(&fuzz_dir)?;
    for target in &wanted {
        if !targets.contains(target) {
            bail!(
                "no fuzz target {target}; the targets are {}",
                targets.join(", ")
            );
        }
    }
    let selected = if wanted.is_empty() { targets } else { wanted };

    let status = nightly_cargo(&fuzz_dir)
        .args(["fuzz", "build", "--sanitizer", "none"])
        .status()
        .context("cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    let scratch = scratch_corpus_root()?;
    let mut outcomes = Vec::new();
    let bar = crate::progress::counter("fuzz: targets", selected.len() as u64);
    for target in &selected {
        outcomes.push(run_target(&fuzz_dir, &scratch, target, seconds)?);
        bar.inc();
    }
    drop(bar);

    println!("\n== fuzz summary ({seconds} s per target)");
    println!(
        "{:<20} {:>8} {:>14} {:>10}  result",
        "target", "seconds", "executions", "exec/s"
    );
    let mut failed = 0;
    for outcome in &outcomes {
        let executions = outcome
            .executions
            .map_or_else(|| "?".to_owned(), |n| n.to_string());
        let rate = outcome.executions.map_or_else(
            || "?".to_owned(),
            |n| format!("{:.0}", n as f64 / outcome.seconds),
        );
        let result = match &outcome.failure {
            None => "ok".to_owned(),
            Some(failure) => {
                failed += 1;
                failure.clone()
            }
        };
        println!(
            "{:<20} {:>8.0} {:>14} {:>10}  {result}",
            outcome.target, outcome.seconds, executions, rate
        );
    }
    if failed > 0 {
        bail!(
            "{failed} target(s) failed: copy each artifact into fuzz/regressions/<target>/, \
             fix the defect, and check that `cargo test -p bernstein-stdio --test it fuzz_twins` \
             passes"
        );
    }
    Ok(())
}

/// Installs cargo-fuzz and the nightly toolchain when they are missing.
fn ensure_tools() -> Result<()> {
    let has_nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_nightly {
        eprintln!("xtask fuzz: installing the nightly toolchain");
        let status = Command::new("rustup")
            .args(["toolchain", "install", "nightly", "--profile", "minimal"])
            .status()
            .context("rustup toolchain install nightly")?;
        if !status.success() {
            bail!("installing the nightly toolchain failed ({status})");
        }
    }
    let has_cargo_fuzz = Command::new("cargo")
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_cargo_fuzz {
        eprintln!("xtask fuzz: installing cargo-fuzz");
        let status = Command::new("cargo")
            .args(["install", "cargo-fuzz", "--locked"])
            .status()
            .context("cargo install cargo-fuzz")?;
        if !status.success() {
            bail!("cargo install cargo-fuzz failed ({status})");
        }
    }
    Ok(())
}

/// `cargo +nightly` in `dir`, through the rustup proxy (the cargo running xtask is stable and
/// pins its toolchain through the environment).
fn nightly_cargo(dir: &Path) -> Command {
    let mut command = Command::new("cargo");
    command
        .arg("+nightly")
        .current_dir(dir)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC");
    command
}

fn list_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let output = nightly_cargo(fuzz_dir)
        .args(["fuzz", "list"])
        .output()
        .context("cargo fuzz list")?;
    if !output.status.success() {
        bail!(
            "cargo fuzz list failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Where the inputs a run discovers go: beside the build, never into the committed corpus.
fn scratch_corpus_root() -> Result<PathBuf> {
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("fuzz/target"));
    let root = target_dir.join("fuzz-corpus");
    fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    Ok(root)
}

fn run_target(fuzz_dir: &Path, scratch: &Path, target: &str, seconds: u64) -> Result<Outcome> {
    let discovered = scratch.join(target);
    fs::create_dir_all(&discovered)?;
    let seeds = fuzz_dir.join("corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    fs::create_dir_all(&artifacts)?;
    println!("== fuzz {target}: {seconds} s, seeds {}", seeds.display());
    let started = Instant::now();
    let output = nightly_cargo(fuzz_dir)
        .args(["fuzz", "run", "--sanitizer", "none", target])
        .arg(&discovered)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-timeout={INPUT_TIMEOUT_SECONDS}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cargo fuzz run {target}"))?;
    let elapsed = started.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&output.stderr);
    let executions = log
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .find_map(|n| n.trim().parse().ok());
    let failure = (!output.status.success()).then(|| {
        let kind = log
            .lines()
            .find(|l| l.contains("==ERROR: libFuzzer") || l.contains("panicked at"))
            .unwrap_or("the fuzzer exited with an error")
            .trim()
            .to_owned();
        let artifact = log
            .lines()
            .find_map(|l| l.split("Test unit written to ").nth(1))
            .unwrap_or("no artifact")
            .trim()
            .to_owned();
        format!("FAILED: {kind} ({artifact})")
    });
    if failure.is_some() {
        // The fuzzer's own report is the evidence; keep it where the summary points.
        let tail: Vec<&str> = log.lines().rev().take(60).collect();
        for line in tail.into_iter().rev() {
            eprintln!("{line}");
        }
    }
    Ok(Outcome {
        target: target.to_owned(),
        seconds: elapsed,
        executions,
        failure,
    })
}
