//! Hostile filesystem states around the tools that write or read caller-named paths: a
//! symlink race against the shutdown signal, and FIFOs where a file is expected.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{Project, config, payload};

/// Every entry below `dir`, symlinks not followed, with its kind and (for files) content.
fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_dir() {
                out.push((path.clone(), "dir".to_owned()));
                walk(&path, out);
            } else if kind.is_symlink() {
                out.push((path, "link".to_owned()));
            } else {
                let content = std::fs::read_to_string(&path).unwrap_or_default();
                out.push((path, format!("file {content:?}")));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Replaces whatever is at `path` (file, link or directory) by nothing.
fn clear(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// One swap cycle: `SHUTDOWN` flips between absent and a link to the victim file, then
/// `signals` and `runtime` each flip between a directory and a link to an outside directory.
fn swap_once(root: &Path, victim: &Path, outside_signals: &Path, outside_runtime: &Path) {
    let runtime = root.join(".sdd/runtime");
    let signals = runtime.join("signals");
    let shutdown = signals.join("SHUTDOWN");
    let _ = std::fs::create_dir_all(&signals);
    clear(&shutdown);
    let _ = std::os::unix::fs::symlink(victim, &shutdown);
    std::thread::yield_now();
    clear(&shutdown);

    let kept = runtime.join("signals.kept");
    clear(&kept);
    let _ = std::fs::rename(&signals, &kept);
    let _ = std::os::unix::fs::symlink(outside_signals, &signals);
    std::thread::yield_now();
    clear(&signals);
    let _ = std::fs::rename(&kept, &signals);

    let kept = root.join(".sdd/runtime.kept");
    clear(&kept);
    let _ = std::fs::rename(&runtime, &kept);
    let _ = std::os::unix::fs::symlink(outside_runtime, &runtime);
    std::thread::yield_now();
    clear(&runtime);
    let _ = std::fs::rename(&kept, &runtime);
}

/// 2,000 shutdown calls while another thread swaps the signal file and its parent directories
/// for symlinks that lead out of the project: the victim file keeps its content and nothing is
/// created outside the root. Before the fix the write followed the links.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_write_cannot_be_raced_onto_a_file_outside_the_root() {
    let project = Project::new(config(false));
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let outside_signals = outside.path().join("signals-target");
    let outside_runtime = outside.path().join("runtime-target");
    std::fs::create_dir(&outside_signals).unwrap();
    std::fs::create_dir(&outside_runtime).unwrap();
    let before = tree(outside.path());

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        let root = project.root().to_path_buf();
        let (victim, signals, runtime) = (victim.clone(), outside_signals, outside_runtime);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                swap_once(&root, &victim, &signals, &runtime);
                // A pause between cycles lets some calls meet a clean tree and succeed.
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    // Bounded in count and in time; the time bound only stops the loop early, it is not
    // asserted.
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut sent, mut refused, mut calls) = (0_usize, 0_usize, 0_usize);
    while calls < 2_000 && Instant::now() < deadline {
        calls += 1;
        let outcome = project
            .call("bernstein_shutdown_orchestrator", json!({}))
            .await;
        let body = payload(&outcome);
        if body["status"] == "shutdown signal sent" {
            sent += 1;
        } else {
            assert!(body["error"].is_string(), "{}", outcome.text);
            assert!(body["hint"].is_string(), "{}", outcome.text);
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let counts = format!("{calls} calls: {sent} sent, {refused} refused");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "{counts}"
    );
    assert_eq!(
        tree(outside.path()),
        before,
        "something changed outside the root ({counts})"
    );
}
