//! Logging to stderr through tracing, as text or as one JSON object a line.
//!
//! stdout belongs to the protocol on stdio, so every format writes to stderr only. `RUST_LOG`
//! sets the filter (default `warn`).

use crate::cli_ops::LogFormat;

/// Installs the global subscriber for `format`.
pub(crate) fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_target(false)
            .without_time()
            .init(),
        // A log store wants the time, the level, the target and every field as JSON members;
        // the span list carries the request context of a line.
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}
