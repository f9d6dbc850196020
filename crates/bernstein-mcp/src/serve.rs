//! The default mode: serve MCP over stdio for one project.
//!
//! Everything the server is configured with is read here, once, at start-up (this is the only
//! crate that reads the environment):
//!
//! | source | effect |
//! |---|---|
//! | `--workdir` | the project root (default: the current directory) |
//! | `--server-url`, else `BERNSTEIN_SERVER_URL` | drive that task server instead of the embedded store |
//! | `BERNSTEIN_AUTH_TOKEN` | the bearer sent to that task server |
//! | `--mcp-tier`, else `BERNSTEIN_MCP_TOOL_TIER` | the tool tier |
//! | `BERNSTEIN_MCP_DEPRECATED_ALIASES` | deprecated aliases on/off |
//! | `BERNSTEIN_MCP_COST_METER` | the `_meter` envelope on/off |
//! | `BERNSTEIN_MCP_VALIDATION` | `permissive` demotes input-firewall failures |
//! | `BERNSTEIN_LINEAGE_MCP_ENABLED` | the lineage tool (on by default on stdio) |
//! | `BERNSTEIN_MCP_TOKEN` / `BERNSTEIN_MCP_AUTH_TOKEN`, `BERNSTEIN_MCP_OAUTH_ISSUER` | what the capability card reports about auth |
//! | `--key-file`, `BERNSTEIN_AUDIT_KEY_PATH`, `XDG_STATE_HOME`, `HOME` | the audit key (created when missing, as the reference does at start-up) |
//! | `--anchor-run` | the run every call is anchored in |
//! | `BERNSTEIN_MCP_DLP` | the mailbox DLP rule set: `extended` (default) or `reference` (the reference's eight rules, byte for byte) |
//! | `--allow-root` (repeatable), `BERNSTEIN_MCP_ALLOW_ROOTS` (`:`-separated) | confine tools' `workdir` to the project root plus these roots (unconfined without any) |
//! | `--metrics-addr`, `--metrics-public` | a Prometheus listener without auth (loopback unless public is explicit) |
//!
//! `--transport http` (see `http_serve`) reads its own settings and serves the same dispatcher.
//!
//! Logs go to stderr; stdout carries nothing but protocol.

use anyhow::Context;
use bernstein_journal::dlp::DlpMode;
use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::{AuthPosture, BackendChoice, Dispatcher, TransportInfo};
use bernstein_tools::config::{lineage_enabled, toggle_enabled};
use bernstein_tools::{Tier, ToolConfig, Validation};

use crate::Outcome;
use crate::cli::{ServeArgs, env_raw, env_value, key_locator};

pub(crate) fn serve(args: ServeArgs) -> anyhow::Result<Outcome> {
    let http = crate::http_serve::requested(&args)?;
    // Flags are checked and the listener bound before anything is created on disk.
    let metrics_listener = crate::metrics_setup::bind(&args.metrics)?;
    let metrics = crate::metrics_setup::install()?;
    let workdir = match args.workdir {
        Some(dir) => dir,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let workdir = std::path::absolute(&workdir)
        .with_context(|| format!("cannot resolve {}", workdir.display()))?;
    let tier = Tier::resolve(
        args.mcp_tier.as_deref(),
        env_raw("BERNSTEIN_MCP_TOOL_TIER").as_deref(),
    )?;
    let tool_config = ToolConfig {
        tier,
        aliases_enabled: toggle_enabled(env_raw("BERNSTEIN_MCP_DEPRECATED_ALIASES").as_deref()),
        cost_meter: toggle_enabled(env_raw("BERNSTEIN_MCP_COST_METER").as_deref()),
        validation: Validation::from_setting(env_raw("BERNSTEIN_MCP_VALIDATION").as_deref()),
        lineage_enabled: lineage_enabled(env_raw("BERNSTEIN_LINEAGE_MCP_ENABLED").as_deref(), true),
    };
    let dlp_setting = env_raw("BERNSTEIN_MCP_DLP").unwrap_or_default();
    let dlp_mode = DlpMode::parse(&dlp_setting).with_context(|| {
        format!("BERNSTEIN_MCP_DLP must be `extended` or `reference`, not {dlp_setting:?}")
    })?;
    let key = AuditKey::load_or_create(&key_locator(args.key_file))
        .context("cannot load or create the audit key")?;
    let backend = match args
        .server_url
        .or_else(|| env_value("BERNSTEIN_SERVER_URL"))
    {
        Some(url) => BackendChoice::Remote {
            url,
            bearer_token: env_value("BERNSTEIN_AUTH_TOKEN"),
        },
        None => BackendChoice::Embedded,
    };
    let auth = AuthPosture {
        bearer_token_configured: env_value("BERNSTEIN_MCP_TOKEN")
            .or_else(|| env_value("BERNSTEIN_MCP_AUTH_TOKEN"))
            .is_some(),
        oauth_issuer: env_value("BERNSTEIN_MCP_OAUTH_ISSUER")
            .map(|issuer| issuer.trim().trim_end_matches('/').to_owned())
            .filter(|issuer| !issuer.is_empty()),
    };
    let mut builder = Dispatcher::builder(&workdir)
        .backend(backend)
        .audit_key(key)
        .home_dir(env_value("HOME"))
        .dlp_mode(dlp_mode)
        .tool_config(tool_config)
        .auth(auth)
        .transports(vec![TransportInfo::Stdio {
            command: "bernstein-mcp".to_owned(),
            default: true,
        }]);
    if let Some(run_id) = args.anchor_run {
        builder = builder.anchor_run_id(run_id);
    }
    // Over stdio the client is the local user, so a `workdir` may name any project root unless
    // the operator lists the roots it may name; the HTTP transport confines always.
    let mut allow_roots = args.allow_roots;
    if let Some(listed) = env_raw(bernstein_mcp_core::card::ALLOW_ROOTS_ENV) {
        allow_roots.extend(std::env::split_paths(&listed).filter(|p| !p.as_os_str().is_empty()));
    }
    if !allow_roots.is_empty() {
        builder = builder.confine_workdirs(true).allowed_roots(allow_roots);
    }
    if let Some(http) = http {
        let render = crate::metrics_setup::renderer(&metrics.finish()?);
        return crate::http_serve::serve_http(builder, http, render, metrics_listener);
    }
    let dispatcher = builder
        .build()
        .with_context(|| format!("cannot serve the project at {}", workdir.display()))?;
    let metrics = metrics.finish()?;
    tracing::info!(
        workdir = %workdir.display(),
        tier = tier.as_str(),
        dlp = dlp_mode.as_str(),
        "serving MCP on stdio"
    );
    // One worker: a stdio session is one client, whose calls mostly wait on the anchor's
    // committer thread and the disk, so a second worker only adds wake-ups and work stealing
    // between the two. The runtime stays multi-threaded so that a mutation's fsync
    // (`block_in_place`) hands the worker's other calls to a fresh thread instead of stalling
    // them.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Some(listener) = metrics_listener {
        let render = crate::metrics_setup::renderer(&metrics);
        runtime.spawn(crate::metrics_setup::serve(listener, render));
    }
    // The serving loop runs on a worker, not on this thread: the calls it spawns then start on
    // the same worker instead of waking another.
    let served = runtime
        .block_on(runtime.spawn(bernstein_stdio::serve_stdio(dispatcher)))
        .context("the stdio serving loop failed")?;
    // The stdin reader thread may be parked in read(2), which cannot be interrupted; do not
    // wait for it (the stdout writer thread has already written everything).
    runtime.shutdown_background();
    served.context("reading stdin failed")?;
    Ok(Outcome::Served)
}
