//! A full disk and a read-only disk under `.sdd/` (issue 11 item 3): the project's `.sdd/` is a
//! small tmpfs mounted for the test.
//!
//! When the disk is full, every state-changing call gets a JSON-RPC error that says there is no
//! space for evidence, and nothing is acknowledged that is not on disk; once space is freed the
//! same server serves again and the project verifies. On a read-only remount, every
//! `tools/call` (each one writes its anchoring row) gets the same kind of error saying the
//! storage is read-only, the calls that write nothing (`ping`, `tools/list`) answer, and the
//! offline verifier reads the project.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`); where `mount` is refused the tests say SKIPPED
//! and why, and `cargo xtask soak disk` runs them where it is allowed.

#![allow(
    clippy::print_stderr,
    reason = "a skipped fault test says why on stderr, and the figures are the test's report"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::faults::{Client, Project, assert_call_order, check_evidence, verify};

/// A tmpfs mounted on a directory, unmounted when dropped.
struct Mount {
    at: PathBuf,
}

impl Mount {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it) on `at`, or says why not.
    fn tmpfs(at: &Path, size: &str) -> Result<Mount, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(Mount { at: at.to_owned() })
    }

    fn remount(&self, mode: &str) {
        let out = Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // A process still holding a file there: detach now, the kernel frees it later.
            let _ = Command::new("umount").arg("-l").arg(&self.at).status();
        }
    }
}

/// A project whose `.sdd/` is a fresh tmpfs of `size`, or `None` (with the reason printed)
/// where mounting is not allowed.
fn project_on_tmpfs(test: &str, size: &str) -> Option<(Project, Mount)> {
    let project = Project::new();
    match Mount::tmpfs(&project.root().join(".sdd"), size) {
        Ok(mount) => Some((project, mount)),
        Err(reason) => {
            eprintln!(
                "faults: {test} SKIPPED: cannot mount a tmpfs for .sdd/ ({reason}); run as root, \
                 or `cargo xtask soak disk` where mounting is allowed"
            );
            None
        }
    }
}

/// Fills the file system holding `dir` with one file; returns its path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.write_all(&[0u8]);
    path
}

/// Every problem `verify` reports is a tear (crash or refused-write debris).
fn assert_verifies(project: &Project) -> usize {
    let (report, problems, tears) = verify(project);
    assert!(
        problems
            .iter()
            .all(|p| p.contains("torn") || p.contains("tear")),
        "verify reports more than a tear: {report}"
    );
    tears
}

fn assert_storage_error(error: &Value, reason: &str) {
    assert_eq!(error["code"], -32603, "{error}");
    assert_eq!(error["data"]["reason"], reason, "{error}");
}

/// Issue 11 item 3, the full disk: clear errors while full, nothing acknowledged that is not
/// on disk, and the same server serves again once space is freed.
#[test]
fn a_full_disk_refuses_clearly_and_serving_resumes_when_space_is_freed() {
    let Some((project, mount)) = project_on_tmpfs("full disk", "1m") else {
        return;
    };
    let mut client = Client::start(&project);
    assert_eq!(
        client.round(0),
        Vec::<Value>::new(),
        "before the disk fills"
    );

    let filler = fill(&mount.at);
    let mut refused = Vec::new();
    for n in 1..=12 {
        refused.extend(client.round(n));
    }
    assert!(
        !refused.is_empty(),
        "a full disk refused nothing: the test did not fill it"
    );
    for error in &refused {
        assert_storage_error(error, "no_space_for_evidence");
    }
    // Everything answered while full is on the disk.
    let findings = check_evidence(&project.root(), &client.acks);
    assert_eq!(findings.missing, Vec::<String>::new());

    std::fs::remove_file(&filler).unwrap();
    for n in 13..=15 {
        assert_eq!(
            client.round(n),
            Vec::<Value>::new(),
            "after space was freed"
        );
    }
    let acknowledged = client.acks.len();
    client.server.stop();
    let findings = check_evidence(&project.root(), &client.acks);
    assert_eq!(findings.missing, Vec::<String>::new());
    assert_eq!(findings.double_terminal, Vec::<String>::new());
    let tears = assert_verifies(&project);
    let (calls, abandoned) = assert_call_order(&project);
    eprintln!(
        "faults: full disk: {} JSON-RPC refusals (no space for evidence), calls acknowledged \
         {acknowledged} and found {}, call order gap-free ({calls} calls, {abandoned} \
         abandoned), tears reported {tears}",
        refused.len(),
        findings.found
    );
}

/// Issue 11 item 3, the read-only disk: every tool call is refused with a clear error (each
/// one would write its anchoring row), calls that write nothing answer, the offline verifier
/// reads the project, and the same server serves again once the disk is writable.
#[test]
fn a_read_only_disk_refuses_writes_clearly_and_reads_answer() {
    let Some((project, mount)) = project_on_tmpfs("read-only disk", "4m") else {
        return;
    };
    let mut client = Client::start(&project);
    assert_eq!(client.round(0), Vec::<Value>::new());
    // A server holds files open for writing, which a remount to read-only refuses (EBUSY):
    // the disk turns read-only between two servers, as it does at boot or after an error.
    client.server.stop();
    mount.remount("ro");

    let mut client = Client::start(&project);
    let ping = client.request("ping", json!({}));
    assert_eq!(ping["result"], json!({}), "{ping}");
    let list = client.request("tools/list", json!({}));
    assert!(
        list["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    for (tool, arguments) in [
        ("bernstein_run", json!({"goal": "read-only"})),
        ("bernstein_run_status", json!({"run_id": "anything"})),
        ("bernstein_claim", json!({"claimer_id": "w"})),
    ] {
        let error = client.call(tool, arguments).unwrap_err();
        assert_storage_error(&error, "evidence_read_only");
    }
    let (report, problems, _) = verify(&project);
    assert!(problems.is_empty(), "verify on a read-only disk: {report}");

    mount.remount("rw");
    assert_eq!(client.round(1), Vec::<Value>::new(), "after the remount rw");
    client.server.stop();
    let findings = check_evidence(&project.root(), &client.acks);
    assert_eq!(findings.missing, Vec::<String>::new());
    assert_verifies(&project);
    assert_call_order(&project);
    eprintln!(
        "faults: read-only disk: 3 tool calls refused (evidence storage read-only), ping and \
         tools/list answered, verify read the project, serving resumed after remount rw"
    );
}
