//! `bernstein-mcp doctor`: what is wrong with this setup, and how to fix it.
//!
//! Each check reports `ok`, `problem` (with the fix to apply) or `skipped` (nothing to check,
//! such as a task server when none is configured). The command only reads: it creates no key,
//! no directory and no evidence (`.sdd/` writability is asked of the kernel with `access(2)`,
//! and the port check binds and closes a socket), so running it changes nothing on disk. Exit
//! status: 0 when no check found a problem, 1 otherwise, 2 on a usage error.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use bernstein_journal::audit::Timestamp;
use bernstein_journal::dlp::DlpMode;
use bernstein_journal::key::AuditKey;
use bernstein_journal::run_journal;
use bernstein_mcp_core::{DEFAULT_ANCHOR_RUN_ID, reconstruct_call_order};
use bernstein_tools::Tier;
use bernstein_tools::config::{lineage_enabled, toggle_enabled};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::Outcome;
use crate::cli::{env_raw, env_value, key_locator};
use crate::cli_ops::DoctorArgs;
use crate::verify_cmds::{print_json, print_text};

/// A clock earlier than this (2025-01-01T00:00:00Z) is certainly wrong: evidence would carry
/// time stamps older than this software.
const CLOCK_FLOOR_UNIX_SECONDS: i64 = 1_735_689_600;

/// How far in the future evidence may seem before the clock is called wrong (file systems
/// and clock adjustments leave small skews).
const CLOCK_SKEW_ALLOWED: Duration = Duration::from_secs(300);

/// The deadline of each request to the task server.
const SERVER_TIMEOUT: Duration = Duration::from_secs(5);

/// The most bytes read from one task-server answer.
const SERVER_BODY_LIMIT: usize = 1024 * 1024;

/// The variables the server reads (see `serve.rs`); the secret ones are reported as set, never
/// by value.
const SETTINGS: &[(&str, bool)] = &[
    ("BERNSTEIN_SERVER_URL", false),
    ("BERNSTEIN_AUTH_TOKEN", true),
    ("BERNSTEIN_MCP_TOOL_TIER", false),
    ("BERNSTEIN_MCP_DEPRECATED_ALIASES", false),
    ("BERNSTEIN_MCP_COST_METER", false),
    ("BERNSTEIN_MCP_VALIDATION", false),
    ("BERNSTEIN_LINEAGE_MCP_ENABLED", false),
    ("BERNSTEIN_MCP_TOKEN", true),
    ("BERNSTEIN_MCP_AUTH_TOKEN", true),
    ("BERNSTEIN_MCP_OAUTH_ISSUER", false),
    ("BERNSTEIN_AUDIT_KEY_PATH", false),
    ("BERNSTEIN_MCP_DLP", false),
    ("BERNSTEIN_MCP_ALLOW_ROOTS", false),
];

/// The verdict of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Problem,
    Skipped,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Problem => "problem",
            Status::Skipped => "skipped",
        }
    }
}

/// One check: what it found, and for a problem the fix.
struct Check {
    name: &'static str,
    status: Status,
    summary: String,
    fix: Option<String>,
    detail: Value,
}

impl Check {
    fn ok(name: &'static str, summary: impl Into<String>, detail: Value) -> Check {
        Check {
            name,
            status: Status::Ok,
            summary: summary.into(),
            fix: None,
            detail,
        }
    }

    fn skipped(name: &'static str, summary: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Skipped,
            summary: summary.into(),
            fix: None,
            detail: json!({}),
        }
    }

    fn problem(
        name: &'static str,
        summary: impl Into<String>,
        fix: impl Into<String>,
        detail: Value,
    ) -> Check {
        Check {
            name,
            status: Status::Problem,
            summary: summary.into(),
            fix: Some(fix.into()),
            detail,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "status": self.status.as_str(),
            "summary": self.summary,
            "fix": self.fix,
            "detail": self.detail,
        })
    }
}

pub(crate) fn doctor(args: DoctorArgs) -> anyhow::Result<Outcome> {
    let workdir = std::path::absolute(&args.workdir)
        .with_context(|| format!("cannot resolve {}", args.workdir.display()))?;
    let (key_check, key) = audit_key(args.key_file.clone());
    let anchor_run = args
        .anchor_run
        .clone()
        .unwrap_or_else(|| DEFAULT_ANCHOR_RUN_ID.to_owned());
    let checks = vec![
        key_check,
        sdd(&workdir),
        clock(&workdir),
        anchoring_run(&workdir, &anchor_run, key.as_ref()),
        task_server(args.server_url.clone()),
        http_port(args.port),
        tools(),
    ];
    let healthy = checks.iter().all(|c| c.status != Status::Problem);
    if args.json {
        print_json(&json!({
            "healthy": healthy,
            "workdir": workdir.display().to_string(),
            "checks": checks.iter().map(Check::to_json).collect::<Vec<_>>(),
        }))?;
    } else {
        let mut out = format!(
            "bernstein-mcp doctor: {}: {}\n",
            workdir.display(),
            if healthy { "healthy" } else { "PROBLEMS FOUND" }
        );
        for check in &checks {
            let state = match check.status {
                Status::Ok => "ok",
                Status::Problem => "PROBLEM",
                Status::Skipped => "skipped",
            };
            out.push_str(&format!(
                "  {state:<8} {:<14} {}\n",
                check.name, check.summary
            ));
            if let Some(fix) = &check.fix {
                out.push_str(&format!("  {:<8} {:<14} fix: {fix}\n", "", ""));
            }
        }
        print_text(&out)?;
    }
    Ok(if healthy {
        Outcome::Verified
    } else {
        Outcome::Failed
    })
}

/// Which setting chose the key location, for the report.
fn key_source(explicit: bool) -> &'static str {
    if explicit {
        "--key-file"
    } else if env_value("BERNSTEIN_AUDIT_KEY_PATH").is_some() {
        "BERNSTEIN_AUDIT_KEY_PATH"
    } else if env_value("XDG_STATE_HOME").is_some() {
        "XDG_STATE_HOME"
    } else {
        "HOME"
    }
}

/// The audit key: found, where, its mode, and that it loads. Never creates one.
fn audit_key(explicit: Option<PathBuf>) -> (Check, Option<AuditKey>) {
    const NAME: &str = "audit_key";
    let source = key_source(explicit.is_some());
    let Some(path) = key_locator(explicit).resolve() else {
        return (
            Check::problem(
                NAME,
                "no key location is configured (no --key-file, BERNSTEIN_AUDIT_KEY_PATH, XDG_STATE_HOME or HOME)",
                "set HOME, or pass --key-file with the key that signs this project's audit chain",
                json!({"path": null, "source": null}),
            ),
            None,
        );
    };
    let shown = path.display().to_string();
    let metadata = match std::fs::metadata(&path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return (
                Check::problem(
                    NAME,
                    format!("no audit key at {shown} (from {source})"),
                    "serving creates the key there on first start (`bernstein-mcp`); for an existing \
                     project, point --key-file or BERNSTEIN_AUDIT_KEY_PATH at the key that signed \
                     its audit chain",
                    json!({"path": shown, "source": source, "found": false}),
                ),
                None,
            );
        }
        Err(err) => {
            return (
                Check::problem(
                    NAME,
                    format!("cannot read {shown}: {err}"),
                    format!("make {shown} readable by the user running bernstein-mcp"),
                    json!({"path": shown, "source": source, "found": true}),
                ),
                None,
            );
        }
    };
    let mode = metadata.permissions().mode() & 0o7777;
    let detail = json!({
        "path": shown,
        "source": source,
        "found": true,
        "mode": format!("{mode:04o}"),
    });
    if mode & 0o077 != 0 {
        return (
            Check::problem(
                NAME,
                format!("the audit key {shown} has mode {mode:04o}: group or others can read it"),
                format!("chmod 600 {shown}"),
                detail,
            ),
            None,
        );
    }
    match AuditKey::from_file(&path) {
        Ok(key) => (
            Check::ok(
                NAME,
                format!("{shown} (from {source}, mode {mode:04o})"),
                detail,
            ),
            Some(key),
        ),
        Err(err) => (
            Check::problem(
                NAME,
                format!("the audit key cannot be used: {err}"),
                "restore the key file from a backup: it holds 64 hex characters, and a new key \
                 cannot verify the existing chain",
                detail,
            ),
            None,
        ),
    }
}

/// `<workdir>/.sdd/` exists and this user may write into it (and into the directories the
/// server appends to, when they exist), asked of the kernel without writing.
fn sdd(workdir: &Path) -> Check {
    const NAME: &str = "sdd";
    let sdd = workdir.join(".sdd");
    let shown = sdd.display().to_string();
    if !sdd.is_dir() {
        let what = if sdd.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Check::problem(
            NAME,
            format!("{shown} {what}"),
            "run in the project root or pass --workdir; serving (`bernstein-mcp`) creates .sdd/ \
             at its first call",
            json!({"path": shown, "exists": sdd.exists(), "writable": false}),
        );
    }
    let mut unwritable = Vec::new();
    for dir in [
        sdd.clone(),
        sdd.join("audit"),
        sdd.join("runs"),
        sdd.join("runtime"),
    ] {
        if !dir.is_dir() {
            continue;
        }
        let access = rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK;
        if let Err(err) = rustix::fs::access(&dir, access) {
            unwritable.push(format!("{} ({})", dir.display(), std::io::Error::from(err)));
        }
    }
    if unwritable.is_empty() {
        Check::ok(
            NAME,
            format!("{shown} exists and is writable"),
            json!({"path": shown, "exists": true, "writable": true}),
        )
    } else {
        Check::problem(
            NAME,
            format!("cannot write into {}", unwritable.join(", ")),
            "give the user running bernstein-mcp write access (chown or chmod u+w), or remount the \
             file system read-write",
            json!({"path": shown, "exists": true, "writable": false}),
        )
    }
}

/// The clock: after this software existed, and not behind the newest evidence.
fn clock(workdir: &Path) -> Check {
    const NAME: &str = "clock";
    let now = Timestamp::now();
    let shown = now.to_record_string();
    let fix =
        "set the system clock and keep it synchronised (for example `timedatectl set-ntp true`)";
    if now.unix_micros() / 1_000_000 < CLOCK_FLOOR_UNIX_SECONDS {
        return Check::problem(
            NAME,
            format!("the clock reads {shown}, before 2025"),
            fix,
            json!({"now": shown}),
        );
    }
    let limit = std::time::SystemTime::now() + CLOCK_SKEW_ALLOWED;
    let newest = std::fs::read_dir(workdir.join(".sdd").join("audit"))
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.metadata().ok()?.modified().ok())
        .max();
    if let Some(newest) = newest.filter(|t| *t > limit) {
        let ahead = newest
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        return Check::problem(
            NAME,
            format!(
                "the clock reads {shown}, but audit evidence was written {} s later than that",
                ahead.as_secs()
            ),
            fix,
            json!({"now": shown}),
        );
    }
    Check::ok(NAME, format!("{shown} (UTC)"), json!({"now": shown}))
}

/// The anchoring run's journal verifies, and its call order verifies against the chain.
fn anchoring_run(workdir: &Path, run_id: &str, key: Option<&AuditKey>) -> Check {
    const NAME: &str = "anchoring_run";
    let path = match run_journal::run_journal_path(workdir, run_id) {
        Ok(path) => path,
        Err(err) => {
            return Check::problem(
                NAME,
                format!("the anchoring run id {run_id:?} is not usable: {err}"),
                "pass a plain run id to --anchor-run",
                json!({"run_id": run_id}),
            );
        }
    };
    if !path.is_file() {
        return Check::ok(
            NAME,
            format!("no call anchored yet in run {run_id}"),
            json!({"run_id": run_id, "rows": 0, "calls": 0}),
        );
    }
    let journal = match run_journal::verify_journal(&path) {
        Ok(journal) => journal,
        Err(err) => {
            return Check::problem(
                NAME,
                format!("cannot read {}: {err}", path.display()),
                "make the journal readable by the user running bernstein-mcp",
                json!({"run_id": run_id}),
            );
        }
    };
    if !journal.ok() {
        return Check::problem(
            NAME,
            format!(
                "the journal of run {run_id} does not verify: {}",
                journal.errors.join("; ")
            ),
            format!(
                "run `bernstein-mcp journal verify {run_id}` for every finding, and restore the \
                 journal from a backup"
            ),
            json!({"run_id": run_id, "rows": journal.count}),
        );
    }
    let Some(key) = key else {
        return Check::skipped(
            NAME,
            format!(
                "the journal of run {run_id} verifies ({} rows); the call order needs the audit key",
                journal.count
            ),
        );
    };
    let order = reconstruct_call_order(&workdir.join(".sdd").join("audit"), key, run_id);
    let detail = json!({"run_id": run_id, "rows": journal.count, "calls": order.calls.len()});
    if order.ok() {
        Check::ok(
            NAME,
            format!(
                "run {run_id}: the journal and the order of its {} calls verify",
                order.calls.len()
            ),
            detail,
        )
    } else {
        let mut problems: Vec<String> = order.problems.iter().map(ToString::to_string).collect();
        let (errors, tears) = order.chain_findings();
        problems.extend(errors.iter().map(|f| f.message.clone()));
        problems.extend(tears.iter().map(|t| t.describe()));
        Check::problem(
            NAME,
            format!(
                "the call order of run {run_id} does not verify: {}",
                problems.join("; ")
            ),
            format!(
                "run `bernstein-mcp audit calls {run_id}` and `bernstein-mcp audit verify` for the \
                 findings; check that the key is the one that signed this chain"
            ),
            detail,
        )
    }
}

/// What one GET to the task server answered.
struct Answer {
    status: u16,
    body: Bytes,
}

async fn get(url: &str, bearer: Option<&str>) -> Result<Answer, String> {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let mut request = http::Request::get(url);
    if let Some(token) = bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::new())
        .map_err(|err| format!("not a usable URL: {err}"))?;
    let exchange = async {
        let response = client.request(request).await.map_err(|err| {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(&err);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            text
        })?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), SERVER_BODY_LIMIT)
            .collect()
            .await
            .map_err(|err| err.to_string())?
            .to_bytes();
        Ok(Answer { status, body })
    };
    tokio::time::timeout(SERVER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer within {} s", SERVER_TIMEOUT.as_secs()))?
}

/// The task server: reachable (`/health`, public), the bearer accepted (`/status`), and its
/// version (`/.well-known/agent.json`).
fn task_server(flag: Option<String>) -> Check {
    const NAME: &str = "task_server";
    let Some(url) = flag.or_else(|| env_value("BERNSTEIN_SERVER_URL")) else {
        return Check::skipped(
            NAME,
            "no task server configured (--server-url, BERNSTEIN_SERVER_URL): the embedded store serves",
        );
    };
    let base = url.trim_end_matches('/').to_owned();
    let bearer = env_value("BERNSTEIN_AUTH_TOKEN");
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return Check::problem(
                NAME,
                format!("cannot start the async runtime: {err}"),
                "check the process limits (threads, file descriptors)",
                json!({"url": base}),
            );
        }
    };
    runtime.block_on(async {
        let mut detail = json!({
            "url": base,
            "bearer_configured": bearer.is_some(),
            "reachable": false,
            "authenticated": null,
            "version": null,
        });
        if let Err(err) = get(&format!("{base}/health"), None).await {
            return Check::problem(
                NAME,
                format!("cannot reach the task server at {base}: {err}"),
                "start it (`bernstein serve`), or correct --server-url / BERNSTEIN_SERVER_URL",
                detail,
            );
        }
        detail["reachable"] = json!(true);
        let status = match get(&format!("{base}/status"), bearer.as_deref()).await {
            Ok(answer) => answer.status,
            Err(err) => {
                return Check::problem(
                    NAME,
                    format!("the task server at {base} answered /health but not /status: {err}"),
                    "check the server's logs; it may be overloaded or restarting",
                    detail,
                );
            }
        };
        if status == 401 || status == 403 {
            detail["authenticated"] = json!(false);
            let fix = if bearer.is_some() {
                "set BERNSTEIN_AUTH_TOKEN to the token the task server expects"
            } else {
                "the task server requires a token: set BERNSTEIN_AUTH_TOKEN"
            };
            return Check::problem(
                NAME,
                format!("the task server at {base} refused the request (HTTP {status})"),
                fix,
                detail,
            );
        }
        if !(200..300).contains(&status) {
            return Check::problem(
                NAME,
                format!("the task server at {base} answered /status with HTTP {status}"),
                "check that the URL names a Bernstein task server (`bernstein serve`)",
                detail,
            );
        }
        detail["authenticated"] = json!(true);
        let version = get(&format!("{base}/.well-known/agent.json"), None)
            .await
            .ok()
            .filter(|answer| answer.status == 200)
            .and_then(|answer| serde_json::from_slice::<Value>(&answer.body).ok())
            .and_then(|card| {
                card.get("version")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        detail["version"] = json!(version);
        Check::ok(
            NAME,
            format!(
                "{base} answers, accepts the request, version {}",
                version.as_deref().unwrap_or("unknown")
            ),
            detail,
        )
    })
}

/// The HTTP transport's port can be bound on loopback (bound and closed at once).
fn http_port(port: Option<u16>) -> Check {
    const NAME: &str = "http_port";
    let Some(port) = port else {
        return Check::skipped(NAME, "no --port given");
    };
    match std::net::TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => {
            drop(listener);
            Check::ok(
                NAME,
                format!("127.0.0.1:{port} can be bound"),
                json!({"port": port, "bindable": true}),
            )
        }
        Err(err) => Check::problem(
            NAME,
            format!("127.0.0.1:{port} cannot be bound: {err}"),
            format!(
                "choose another --port, or stop what listens there (`ss -ltnp 'sport = :{port}'`)"
            ),
            json!({"port": port, "bindable": false}),
        ),
    }
}

/// The tool tier and the settings in force, from the environment the server would read.
fn tools() -> Check {
    const NAME: &str = "tools";
    let settings: serde_json::Map<String, Value> = SETTINGS
        .iter()
        .filter_map(|(name, secret)| {
            let value = env_raw(name)?;
            let shown = if *secret { "(set)".to_owned() } else { value };
            Some(((*name).to_owned(), json!(shown)))
        })
        .collect();
    let tier = Tier::resolve(None, env_raw("BERNSTEIN_MCP_TOOL_TIER").as_deref());
    let dlp_setting = env_raw("BERNSTEIN_MCP_DLP").unwrap_or_default();
    let dlp = DlpMode::parse(&dlp_setting);
    let detail = json!({
        "tier": tier.as_ref().ok().map(|t| t.as_str()),
        "deprecated_aliases": toggle_enabled(env_raw("BERNSTEIN_MCP_DEPRECATED_ALIASES").as_deref()),
        "cost_meter": toggle_enabled(env_raw("BERNSTEIN_MCP_COST_METER").as_deref()),
        "validation": match env_raw("BERNSTEIN_MCP_VALIDATION") {
            Some(v) if v.trim().eq_ignore_ascii_case("permissive") => "permissive",
            _ => "strict",
        },
        "lineage": lineage_enabled(env_raw("BERNSTEIN_LINEAGE_MCP_ENABLED").as_deref(), true),
        "dlp": dlp.map(|d| d.as_str()),
        "settings": settings,
    });
    match (tier, dlp) {
        (Err(err), _) => Check::problem(
            NAME,
            format!("BERNSTEIN_MCP_TOOL_TIER is not usable: {err}"),
            "set BERNSTEIN_MCP_TOOL_TIER to core, standard or all (or unset it)",
            detail,
        ),
        (_, None) => Check::problem(
            NAME,
            format!("BERNSTEIN_MCP_DLP is {dlp_setting:?}"),
            "set BERNSTEIN_MCP_DLP to extended or reference (or unset it)",
            detail,
        ),
        (Ok(tier), Some(dlp)) => Check::ok(
            NAME,
            format!("tier {}, DLP {}", tier.as_str(), dlp.as_str()),
            detail,
        ),
    }
}
