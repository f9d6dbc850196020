//! Repository hygiene checks, run by `cargo xtask tidy` and, as tests, by `cargo test`.
//!
//! Each check returns every problem it finds, so one run shows all of them.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::{cargo, project_root};

/// The library crates bottom-up. A crate may depend only on crates listed before it, and no
/// library crate may depend on the binary.
const LAYERS: &[&str] = &[
    "bernstein-protocol",
    "bernstein-journal",
    "bernstein-tasks",
    "bernstein-gate",
    "bernstein-tools",
    "bernstein-mcp-core",
    "bernstein-stdio",
    "bernstein-http",
    "bernstein-mcp",
    "bernstein-conformance",
];

/// Sibling crates that must never depend on one another even though both sit above the core
/// (the conformance server sits beside the binary, not on it).
const INDEPENDENT: &[(&str, &str)] = &[
    ("bernstein-http", "bernstein-stdio"),
    ("bernstein-conformance", "bernstein-mcp"),
];

pub(crate) fn run() -> anyhow::Result<()> {
    let mut problems = Vec::new();
    problems.extend(check_file_docs());
    problems.extend(check_manifests());
    problems.extend(check_architecture_doc());
    problems.extend(check_layering()?);
    problems.extend(crate::tidy_deps::check_dependency_table());
    if problems.is_empty() {
        eprintln!("tidy: ok");
        return Ok(());
    }
    for problem in &problems {
        eprintln!("tidy: {problem}");
    }
    bail!("{} tidy problem(s)", problems.len())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n == "target" || n == "snapshots")
            {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust file starts with a `//!` doc, carries no trailing whitespace and no leftover
/// markers of unfinished work.
fn check_file_docs() -> Vec<String> {
    let root = project_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("xtask"), &mut files);
    let unfinished = [
        concat!("TO", "DO"),
        concat!("FIX", "ME"),
        concat!("todo", "!("),
    ];
    let mut problems = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let Ok(text) = fs::read_to_string(&file) else {
            problems.push(format!("{rel}: unreadable"));
            continue;
        };
        if !text.starts_with("//!") {
            problems.push(format!("{rel}: must start with a `//!` module doc"));
        }
        for (n, line) in text.lines().enumerate() {
            if line.ends_with(' ') || line.ends_with('\t') {
                problems.push(format!("{rel}:{}: trailing whitespace", n + 1));
            }
            if let Some(marker) = unfinished.iter().find(|m| line.contains(*m)) {
                problems.push(format!("{rel}:{}: unfinished-work marker {marker}", n + 1));
            }
            // An ignored test is allowed only as the entry point of a child process that another
            // test spawns (cross-process locking and crash tests), or as a check that needs a
            // live server `.ci/run` starts; it says so in its reason. `cfg_attr(.., ignore)`
            // hides an ignore behind a condition and is refused whatever its reason.
            if ignore_without_reason(line) {
                problems.push(format!(
                    "{rel}:{}: ignored test; fix it or delete it",
                    n + 1
                ));
            }
        }
    }
    problems
}

/// Whether a line ignores a test other than by the allowed reasons (see [`check_file_docs`]).
fn ignore_without_reason(line: &str) -> bool {
    let trimmed = line.trim_start();
    let allowed = [
        "#[ignore = \"child process",
        "#[ignore = \"helper: run as a child process",
        "#[ignore = \"live server:",
    ];
    let conditional = trimmed.starts_with("#[cfg_attr(")
        && trimmed
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == "ignore");
    conditional
        || (trimmed.starts_with("#[ignore") && !allowed.iter().any(|a| trimmed.starts_with(a)))
}

/// Every crate inherits the workspace lints and states its layering in its manifest.
fn check_manifests() -> Vec<String> {
    let root = project_root();
    let mut manifests = vec![root.join("xtask/Cargo.toml")];
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        manifests.extend(entries.flatten().map(|e| e.path().join("Cargo.toml")));
    }
    let mut problems = Vec::new();
    for manifest in manifests {
        let rel = manifest
            .strip_prefix(&root)
            .unwrap_or(&manifest)
            .display()
            .to_string();
        match fs::read_to_string(&manifest) {
            Ok(text) => {
                if !text.contains("[lints]\nworkspace = true") {
                    problems.push(format!("{rel}: missing `[lints] workspace = true`"));
                }
                for line in text.lines() {
                    let dep_line = line.contains('=') && !line.trim_start().starts_with('#');
                    let is_section_key = line.starts_with('[')
                        || line.starts_with("name")
                        || line.starts_with("description")
                        || line.starts_with("path")
                        || line.starts_with("autotests")
                        || line == "publish = false"
                        || line.starts_with("harness")
                        || line.contains(".workspace = true")
                        || line.contains("{ workspace = true")
                        || line.starts_with("workspace = true");
                    if dep_line && !is_section_key {
                        problems.push(format!(
                            "{rel}: `{line}`: declare versions once in [workspace.dependencies]"
                        ));
                    }
                }
            }
            Err(err) => problems.push(format!("{rel}: {err}")),
        }
    }
    problems
}

/// `docs/ARCHITECTURE.md` has a section for every crate.
fn check_architecture_doc() -> Vec<String> {
    let root = project_root();
    let doc = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap_or_default();
    let mut problems = Vec::new();
    for krate in LAYERS.iter().chain(["xtask"].iter()) {
        if !doc.contains(&format!("### `{krate}`")) {
            problems.push(format!("docs/ARCHITECTURE.md: no `### `{krate}`` section"));
        }
    }
    problems
}

/// Lower crates never depend upward, checked on the real dependency graph with `cargo tree`.
fn check_layering() -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for (level, krate) in LAYERS.iter().enumerate() {
        let output = cargo()
            .args(["tree", "-q", "-e", "normal,build", "--prefix", "none", "-p"])
            .arg(krate)
            .current_dir(project_root())
            .output()?;
        if !output.status.success() {
            bail!(
                "cargo tree -p {krate} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let tree = String::from_utf8_lossy(&output.stdout);
        let deps: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|name| *name != *krate)
            .collect();
        for higher in &LAYERS[level + 1..] {
            if deps.contains(higher) {
                problems.push(format!("{krate} depends on {higher}, which sits above it"));
            }
        }
        for (a, b) in INDEPENDENT {
            if *krate == *a && deps.contains(b) {
                problems.push(format!(
                    "{a} depends on {b}; transports must stay independent"
                ));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    #[track_caller]
    fn assert_clean(problems: Vec<String>) {
        assert!(
            problems.is_empty(),
            "tidy problems:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn ignored_tests_need_an_allowed_reason() {
        for (line, refused) in [
            ("#[test]", false),
            ("    #[ignore]", true),
            ("#[ignore = \"slow\"]", true),
            ("#[ignore = \"child process of the crash test\"]", false),
            ("#[ignore = \"helper: run as a child process by x\"]", false),
            ("#[ignore = \"live server: run by .ci/run\"]", false),
            ("#[cfg_attr(miri, ignore)]", true),
            (
                "  #[cfg_attr(not(target_os = \"linux\"), ignore = \"child process\")]",
                true,
            ),
            ("#[cfg_attr(test, derive(Debug))]", false),
            ("// an ignore in a comment", false),
        ] {
            assert_eq!(super::ignore_without_reason(line), refused, "{line}");
        }
    }

    #[test]
    fn every_file_is_documented_and_finished() {
        assert_clean(super::check_file_docs());
    }

    #[test]
    fn manifests_use_workspace_lints_and_dependencies() {
        assert_clean(super::check_manifests());
    }

    #[test]
    fn architecture_doc_covers_every_crate() {
        assert_clean(super::check_architecture_doc());
    }

    #[test]
    fn dependency_table_lists_exactly_the_crates_used() {
        assert_clean(crate::tidy_deps::check_dependency_table());
    }

    #[test]
    fn crates_never_depend_upward() {
        assert_clean(super::check_layering().expect("cargo tree runs"));
    }
}
