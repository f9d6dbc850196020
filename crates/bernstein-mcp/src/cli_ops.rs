//! The operational flags and commands of the command line: metrics, log format, `doctor` and
//! `completions`. Kept apart from `cli.rs` so the serve and verification flags read on their own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// The metrics flags of the serve mode.
#[derive(Debug, Args)]
pub(crate) struct MetricsArgs {
    /// Serve Prometheus metrics on a separate listener without auth: `PORT` or `HOST:PORT`.
    /// The host defaults to 127.0.0.1; a host that is not loopback needs `--metrics-public`.
    /// Works with every transport, stdio included.
    #[arg(long, value_name = "ADDR", value_parser = parse_metrics_addr)]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Allow `--metrics-addr` on an address other than loopback. The listener has no auth, so
    /// expose it only on a network you trust.
    #[arg(long, requires = "metrics_addr")]
    pub(crate) metrics_public: bool,
}

/// `PORT` (on 127.0.0.1) or `HOST:PORT`.
fn parse_metrics_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!("expected PORT or HOST:PORT with a numeric host (127.0.0.1:9464, [::1]:9464), not {text:?}")
    })
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (tracing-subscriber's JSON layer), for a log store.
    Json,
}

/// `bernstein-mcp doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// The project root to check, the directory that holds (or will hold) `.sdd/`.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub(crate) workdir: PathBuf,
    /// The audit key file. Defaults to $BERNSTEIN_AUDIT_KEY_PATH, then
    /// $XDG_STATE_HOME/bernstein/audit.key, then ~/.local/state/bernstein/audit.key.
    #[arg(long, value_name = "F")]
    pub(crate) key_file: Option<PathBuf>,
    /// Check this task server (defaults to $BERNSTEIN_SERVER_URL): reachable, accepting the
    /// bearer from $BERNSTEIN_AUTH_TOKEN, and its version.
    #[arg(long, value_name = "URL")]
    pub(crate) server_url: Option<String>,
    /// The anchoring run to verify (default `mcp-calls`), as given to the server's `--anchor-run`.
    #[arg(long, value_name = "RUN_ID")]
    pub(crate) anchor_run: Option<String>,
    /// Check that the HTTP transport could bind this port on 127.0.0.1.
    #[arg(long, value_name = "PORT")]
    pub(crate) port: Option<u16>,
    /// Print one JSON object on stdout instead of the human report.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The shells `completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shell {
    /// GNU bash.
    Bash,
    /// Z shell.
    Zsh,
    /// fish.
    Fish,
}

/// `bernstein-mcp completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub(crate) shell: Shell,
}
