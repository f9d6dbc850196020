//! The operational flags and commands of the command line: metrics, log format, `doctor` and
//! `completions`. Kept apart from `cli.rs` so the serve and verification flags read on their own.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

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
