//! `bernstein-conformance`: serves the conformance fixtures over stdio.
//!
//! ```text
//! bernstein-conformance [--workdir DIR]
//! ```
//!
//! Without `--workdir` the fixtures are served over a scratch project that is removed at exit.
//! Exit codes: 0 served until EOF, 2 usage or setup error.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: bernstein-conformance [--workdir DIR]";

fn main() -> ExitCode {
    let mut workdir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--workdir" => match args.next() {
                Some(dir) => workdir = Some(PathBuf::from(dir)),
                None => return usage("--workdir needs a directory"),
            },
            "-h" | "--help" => {
                // A help text that cannot be written has nobody to be shown to.
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    // The scratch project lives as long as `scratch`.
    let scratch = match &workdir {
        Some(_) => None,
        None => match tempfile::tempdir() {
            Ok(dir) => Some(dir),
            Err(err) => return setup_error(&format!("cannot create a scratch project: {err}")),
        },
    };
    let root = match (&workdir, &scratch) {
        (Some(dir), _) => dir.clone(),
        (None, Some(dir)) => dir.path().to_path_buf(),
        (None, None) => return setup_error("no project directory"),
    };
    let dispatcher = match bernstein_conformance::dispatcher(&root) {
        Ok(dispatcher) => dispatcher,
        Err(err) => return setup_error(&err.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return setup_error(&format!("cannot start the runtime: {err}")),
    };
    match runtime.block_on(bernstein_stdio::serve_stdio(dispatcher)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => setup_error(&format!("stdio: {err}")),
    }
}

fn usage(problem: &str) -> ExitCode {
    // Stderr is the only place to say it; if it is gone, the exit code still says it.
    let _ = writeln!(std::io::stderr(), "bernstein-conformance: {problem}\n{USAGE}");
    ExitCode::from(2)
}

fn setup_error(problem: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "bernstein-conformance: {problem}");
    ExitCode::from(2)
}
