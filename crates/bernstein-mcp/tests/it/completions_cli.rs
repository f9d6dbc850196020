//! `bernstein-mcp completions`: the scripts name every subcommand, and the bash one loads.

use std::process::Command;

use crate::support::run;

#[test]
fn the_bash_completion_script_parses_and_covers_the_subcommands() {
    let home = tempfile::tempdir().unwrap();
    let out = run(&["completions", "bash"], home.path());
    assert_eq!(out.code, 0, "{}", out.stderr);
    for word in [
        "doctor",
        "verify",
        "completions",
        "--metrics-addr",
        "--log-format",
    ] {
        assert!(out.stdout.contains(word), "no {word} in the bash script");
    }
    let script = home.path().join("bernstein-mcp.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    let checked = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // Sourcing it registers the completion function for the binary's name.
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p bernstein-mcp",
            script.display()
        ))
        .output()
        .unwrap();
    assert!(sourced.status.success(), "{sourced:?}");
    assert!(String::from_utf8_lossy(&sourced.stdout).contains("bernstein-mcp"));
}

#[test]
fn zsh_and_fish_scripts_are_written_and_other_shells_refused() {
    let home = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("zsh", "#compdef bernstein-mcp"),
        ("fish", "complete -c bernstein-mcp"),
    ] {
        let out = run(&["completions", shell], home.path());
        assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
        assert!(out.stdout.contains(marker), "{shell}: {}", out.stdout);
        assert!(out.stdout.contains("doctor"), "{shell}");
    }
    let out = run(&["completions", "powershell"], home.path());
    assert_eq!(out.code, 2);
    assert!(out.stdout.is_empty());
}
