//! A scratch project built from a golden vector, and a runner for the built binary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `fixtures/vectors/<rel>`.
pub(crate) fn vector(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/vectors")
        .join(rel)
}

/// A temporary copy of a vector project plus a 0600 copy of an audit key (git does not keep
/// file modes, and the key loader refuses group or world bits).
pub(crate) struct Scratch {
    pub(crate) dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn of(vector_rel: &str, key: &str) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(&vector(vector_rel), &dir.path().join("project"));
        let key_path = dir.path().join("audit.key");
        std::fs::copy(vector(&format!("_keys/{key}")), &key_path).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Scratch { dir }
    }

    pub(crate) fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    pub(crate) fn key(&self) -> PathBuf {
        self.dir.path().join("audit.key")
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// What one run of the binary produced.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `bernstein-mcp` with `args` and an environment that cannot leak a real key.
pub(crate) fn run(args: &[&str], home: &Path) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_bernstein-mcp"))
        .args(args)
        .env_clear()
        .env("HOME", home)
        .output()
        .unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}
