//! Progress bars of `audit verify` and `verify`: drawn on a terminal's stderr, never on a pipe,
//! and never on stdout.

use std::process::Command;

use crate::support::{Scratch, run};

#[test]
fn no_progress_is_drawn_when_stderr_is_a_pipe() {
    let scratch = Scratch::of("audit/basic", "audit.key");
    let workdir = scratch.project();
    let key = scratch.key();
    for command in [&["audit", "verify"][..], &["verify"][..]] {
        let mut args = command.to_vec();
        args.extend(["--workdir", workdir.to_str().unwrap()]);
        args.extend(["--key-file", key.to_str().unwrap()]);
        let out = run(&args, scratch.dir.path());
        assert_eq!(out.code, 0, "{command:?}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr, "", "{command:?}");
        assert!(!out.stdout.contains("verifying"), "{}", out.stdout);
    }
}

#[test]
#[allow(
    clippy::print_stderr,
    reason = "a skipped check says why in the test output"
)]
fn a_terminal_sees_the_sections_go_by() {
    // util-linux `script` runs the command on a pseudo-terminal; stdout goes to /dev/null, so
    // whatever it records came through stderr.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` is not installed, no pseudo-terminal to draw on");
        return;
    }
    let scratch = Scratch::of("audit/basic", "audit.key");
    let inner = format!(
        "'{}' verify --workdir '{}' --key-file '{}' >/dev/null",
        env!("CARGO_BIN_EXE_bernstein-mcp"),
        scratch.project().display(),
        scratch.key().display()
    );
    let output = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env_clear()
        .env("HOME", scratch.dir.path())
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let drawn = String::from_utf8_lossy(&output.stdout);
    assert!(drawn.contains("verifying audit"), "{drawn:?}");
    assert!(drawn.contains("/9"), "{drawn:?}");
}
