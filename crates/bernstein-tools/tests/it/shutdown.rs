//! `bernstein_shutdown_orchestrator` driven with arbitrary workdirs: the tool writes, so this is
//! where containment is proved. Whatever the workdir, the only change on disk is one `SHUTDOWN`
//! file (and its missing parent directories) inside a directory that already was a project.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tools::{Backend, Catalogue, ToolContext};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;

use crate::common::{audit_key, config, payload};

/// Every entry under `root`, symlinks not followed, with its kind and (for files) its bytes.
fn tree(root: &Path) -> BTreeMap<PathBuf, (&'static str, Vec<u8>)> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, (&'static str, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_symlink() {
                out.insert(path, ("link", Vec::new()));
            } else if kind.is_dir() {
                out.insert(path.clone(), ("dir", Vec::new()));
                walk(&path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path, ("file", bytes));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, &mut out);
    out
}

/// Workdirs built from path segments that name the project, its parents, non-projects and
/// `.sdd` itself, relative or absolute, and arbitrary short strings. The test roots every
/// absolute one in its scratch directory, so no case can reach a real project elsewhere.
fn workdirs() -> impl Strategy<Value = (bool, String)> {
    let segment = prop_oneof![
        4 => Just("p"),
        2 => Just("."),
        1 => Just(".."),
        1 => Just("d"),
        1 => Just("x"),
        1 => Just(".sdd"),
        2 => Just("link"),
        1 => Just(""),
    ];
    let built = (
        any::<bool>(),
        proptest::collection::vec(segment, 0..6).prop_map(|parts| parts.join("/")),
    );
    let arbitrary = (Just(false), "[a-z./\\\\é]{0,24}");
    prop_oneof![3 => built, 1 => arbitrary]
}

#[test]
fn arbitrary_workdirs_write_only_the_signal_of_a_real_project() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The store lives apart from the scratch tree, so its evidence never shows as a change.
    let store_dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(store_dir.path(), Some(audit_key())).unwrap();
    let backend = Arc::new(Backend::embedded(store, audit_key()));
    let catalogue = Catalogue::new(&config(false)).unwrap();
    let mut outcomes = BTreeMap::<&str, usize>::new();
    let counted = std::cell::RefCell::new(&mut outcomes);
    let mut runner = TestRunner::new(Config {
        cases: 256,
        ..Config::default()
    });
    runner
        .run(&workdirs(), |(absolute, workdir)| {
            // The server runs 12 levels below the scratch root (so no `..` chain leaves it),
            // in a directory that is not a project, beside the project `p` and a symlink to it.
            let scratch = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(scratch.path()).unwrap();
            let cwd = root.join("d/".repeat(12));
            std::fs::create_dir_all(cwd.join("p/.sdd")).unwrap();
            std::fs::create_dir_all(cwd.join("x")).unwrap();
            std::os::unix::fs::symlink(cwd.join("p"), cwd.join("link")).unwrap();
            // An absolute workdir is rooted in the scratch tree: `/.` must never name the
            // machine's root, where a write would land outside the test.
            let workdir = if absolute || workdir.starts_with('/') {
                format!("{}/{workdir}", cwd.display())
            } else {
                workdir
            };
            let ctx = ToolContext::new(&cwd, Arc::clone(&backend));
            let before = tree(&root);
            let outcome = runtime.block_on(catalogue.call(
                &ctx,
                "bernstein_shutdown_orchestrator",
                json!({ "workdir": &workdir }),
            ));
            let after = tree(&root);
            let added: Vec<&PathBuf> = after.keys().filter(|p| !before.contains_key(*p)).collect();
            for (path, entry) in &before {
                prop_assert_eq!(after.get(path), Some(entry), "{} changed", path.display());
            }
            let body = payload(&outcome);
            if body["status"] == "shutdown signal sent" {
                counted
                    .borrow_mut()
                    .entry("sent")
                    .and_modify(|n| *n += 1)
                    .or_insert(1);
                let signal = added
                    .iter()
                    .find(|p| p.ends_with(".sdd/runtime/signals/SHUTDOWN"))
                    .copied();
                prop_assert!(
                    signal.is_some(),
                    "no signal written for {:?}: {:?}",
                    workdir,
                    added
                );
                let signal = signal.unwrap();
                prop_assert_eq!(&after[signal], &("file", b"mcp-stop\n".to_vec()));
                // The project is a directory that already had `.sdd` before the call.
                let project = signal.ancestors().nth(4).unwrap();
                prop_assert!(
                    before
                        .get(&project.join(".sdd"))
                        .is_some_and(|e| e.0 == "dir")
                );
                prop_assert_eq!(
                    std::fs::canonicalize(body["path"].as_str().unwrap()).unwrap(),
                    signal.clone()
                );
                // Apart from the file, only its missing parents under that `.sdd` appeared.
                for path in &added {
                    prop_assert!(
                        *path == signal
                            || (signal.starts_with(path)
                                && after[*path].0 == "dir"
                                && path.starts_with(project.join(".sdd"))),
                        "{} appeared for {:?}",
                        path.display(),
                        workdir
                    );
                }
            } else {
                counted
                    .borrow_mut()
                    .entry("refused")
                    .and_modify(|n| *n += 1)
                    .or_insert(1);
                prop_assert!(
                    added.is_empty(),
                    "a refusal wrote {:?} for {:?}",
                    added,
                    workdir
                );
            }
            Ok(())
        })
        .unwrap();
    // Both outcomes occurred, or the property was only checked on one side.
    assert!(
        outcomes.contains_key("sent") && outcomes.contains_key("refused"),
        "{outcomes:?}"
    );
}
