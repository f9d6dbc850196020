//! Dependency truth: the table in `docs/ARCHITECTURE.md` ("Dependencies") lists exactly the
//! external crates the workspace's manifests use (direct dependencies, dev and build ones
//! included), each with a reason, and the root `[workspace.dependencies]` declares no crate that
//! nothing uses.
//!
//! Manifests are read as text: every dependency is `name.workspace = true` or
//! `name = { workspace = true … }` (another tidy check enforces that), inside a section whose
//! name ends in `dependencies`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use crate::project_root;

/// The dependency names of one manifest's dependency sections, with `path` dependencies
/// (workspace crates) marked.
fn dependencies(manifest: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            // `[dependencies.foo]` names its crate in the header.
            if let Some((section, name)) = header.rsplit_once('.')
                && section.ends_with("dependencies")
            {
                out.push((name.trim_matches('"').to_owned(), false));
                in_deps = false;
                continue;
            }
            in_deps = header.ends_with("dependencies");
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let name = key.trim().split('.').next().unwrap_or("").trim_matches('"');
        if !name.is_empty() {
            out.push((name.to_owned(), value.contains("path")));
        }
    }
    out
}

/// The crates named in the first cell of each row of the "Dependencies" table, with the row's
/// reason. Parenthesised notes (`(dev)`, features) are not crate names.
fn table_rows(doc: &str) -> Vec<(Vec<String>, String)> {
    let Some(start) = doc.find("### Dependencies") else {
        return Vec::new();
    };
    let section = &doc[start + 3..];
    let end = section.find("\n## ").or_else(|| section.find("\n### "));
    let section = &section[..end.unwrap_or(section.len())];
    let mut rows = Vec::new();
    for line in section.lines() {
        let Some(cells) = line.strip_prefix('|') else {
            continue;
        };
        let mut cells = cells.split('|');
        let (Some(first), Some(why)) = (cells.next(), cells.next()) else {
            continue;
        };
        let mut names_text = String::new();
        let mut depth = 0usize;
        for c in first.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ if depth == 0 => names_text.push(c),
                _ => {}
            }
        }
        let names: Vec<String> = names_text
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        if !names.is_empty() {
            rows.push((names, why.trim().to_owned()));
        }
    }
    rows
}

/// Compares the crates used (each with the manifests using it), the crates the root declares,
/// and the table rows; every mismatch is one problem naming the crate.
fn compare(
    used: &BTreeMap<String, BTreeSet<String>>,
    declared: &BTreeSet<String>,
    rows: &[(Vec<String>, String)],
) -> Vec<String> {
    const DOC: &str = "docs/ARCHITECTURE.md (Dependencies)";
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for (names, why) in rows {
        if why.is_empty() {
            problems.push(format!(
                "{DOC}: the row of `{}` gives no reason",
                names.join("`, `")
            ));
        }
        listed.extend(names.iter().cloned());
    }
    for (krate, users) in used {
        if !listed.contains(krate) {
            problems.push(format!(
                "{DOC}: `{krate}` is used by {} but has no row; add `| `{krate}` | why it is needed |`",
                users.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for krate in listed.iter().filter(|k| !used.contains_key(*k)) {
        problems.push(format!(
            "{DOC}: `{krate}` has a row but no workspace manifest uses it; remove the row"
        ));
    }
    for krate in declared.iter().filter(|k| !used.contains_key(*k)) {
        problems.push(format!(
            "Cargo.toml: `{krate}` is declared in [workspace.dependencies] but no crate uses it"
        ));
    }
    problems
}

/// Checks the table against the manifests of the workspace members (`crates/*`, `xtask`).
pub(crate) fn check_dependency_table() -> Vec<String> {
    let root = project_root();
    let mut problems = Vec::new();
    let root_manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let declared_all = dependencies(&root_manifest);
    let internal: BTreeSet<String> = declared_all
        .iter()
        .filter(|(_, is_path)| *is_path)
        .map(|(name, _)| name.clone())
        .collect();
    let declared: BTreeSet<String> = declared_all
        .into_iter()
        .filter(|(_, is_path)| !is_path)
        .map(|(name, _)| name)
        .collect();
    let mut manifests = vec![root.join("xtask/Cargo.toml")];
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        manifests.extend(entries.flatten().map(|e| e.path().join("Cargo.toml")));
    }
    let mut used: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for manifest in manifests {
        let rel = manifest
            .strip_prefix(&root)
            .unwrap_or(&manifest)
            .display()
            .to_string();
        let text = match fs::read_to_string(&manifest) {
            Ok(text) => text,
            Err(err) => {
                problems.push(format!("{rel}: {err}"));
                continue;
            }
        };
        for (name, _) in dependencies(&text) {
            if !internal.contains(&name) {
                used.entry(name).or_default().insert(rel.clone());
            }
        }
    }
    let doc = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap_or_default();
    problems.extend(compare(&used, &declared, &table_rows(&doc)));
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_and_rows_are_read_as_written() {
        let manifest = "[package]\nname = \"x\"\n\n[dependencies]\n# a comment = no\n\
                        anyhow.workspace = true\ntokio = { workspace = true, features = [\"rt\"] }\n\
                        bernstein-journal = { path = \"../j\" }\n\n[dev-dependencies]\n\
                        insta.workspace = true\n\n[dependencies.serde]\nworkspace = true\n\n\
                        [[test]]\nname = \"it\"\n";
        let names: Vec<(String, bool)> = dependencies(manifest);
        assert_eq!(
            names,
            [
                ("anyhow", false),
                ("tokio", false),
                ("bernstein-journal", true),
                ("insta", false),
                ("serde", false),
            ]
            .map(|(n, p)| (n.to_owned(), p))
        );
        let doc = "## X\n\n### Dependencies\n\n| crate | why |\n|---|---|\n\
                   | `rustix` (`fs`) | dirs |\n| `hyper`, `http` | one stack |\n| `ring` | |\n\n\
                   ## Next\n| `outside` | not in the section |\n";
        let rows = table_rows(doc);
        assert_eq!(
            rows,
            vec![
                (vec!["rustix".to_owned()], "dirs".to_owned()),
                (
                    vec!["hyper".to_owned(), "http".to_owned()],
                    "one stack".to_owned()
                ),
                (vec!["ring".to_owned()], String::new()),
            ]
        );
    }

    #[test]
    fn every_mismatch_names_its_crate() {
        let used: BTreeMap<String, BTreeSet<String>> =
            [("tower", "crates/bernstein-http/Cargo.toml"), ("ring", "x")]
                .into_iter()
                .map(|(k, m)| (k.to_owned(), BTreeSet::from([m.to_owned()])))
                .collect();
        let declared = BTreeSet::from(["ring".to_owned(), "tower".to_owned(), "blake3".to_owned()]);
        let rows = vec![
            (vec!["ring".to_owned()], "hashes".to_owned()),
            (vec!["plotters".to_owned()], String::new()),
        ];
        let problems = compare(&used, &declared, &rows);
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems[0].contains("`plotters` gives no reason"));
        assert!(
            problems[1]
                .contains("`tower` is used by crates/bernstein-http/Cargo.toml but has no row")
        );
        assert!(problems[2].contains("`plotters` has a row but no workspace manifest uses it"));
        assert!(problems[3].contains("`blake3` is declared in [workspace.dependencies]"));
    }
}
