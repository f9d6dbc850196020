//! `cargo xtask bench [NAME] [FLAGS]`: the benchmarks, in release mode (the servers, and xtask
//! itself: `main` runs a dev build's `bench` again from a release build), on loopback only, every
//! load bounded in count and time, side by side with the reference implementation when it is
//! installed and with bare rmcp servers.
//!
//! Without a name it runs, in one go so the figures come from one run on one machine, the
//! issue-10 set and writes the `limits` section of `docs/benchmarks.md` and
//! `docs/bench-http.svg`:
//!
//! * `stdio`: cold start, sequential `bernstein_run_status` and `bernstein_status` with the
//!   meter on and off, and 16 pipelined calls in flight (`crate::bench_stdio`);
//! * `durable`: fdatasync latency and the durable call rate it implies;
//! * `verify`: `audit verify` on a 100 000-entry chain, ours, the reference's, and the raw
//!   HMAC-SHA256 limit on one and on every core (`crate::bench_limits`);
//! * `poll`: one run-handle poll on a 10-entry and on a 100 000-entry chain;
//! * `http`: `ping`, `bernstein_status`, `bernstein_run_status` at 1, 16 and 64 clients
//!   (`crate::bench_http`).
//!
//! Any of those names runs that part alone and only prints. `scale` runs the project-size bench
//! (`crate::bench_scale`, about ten minutes) and writes its own section. `audit`, `evidence` and
//! `store` run the crates' `harness = false` bench targets.
//!
//! Flags of the full run and of its parts: `--calls N`, `--status-calls N` (stdio),
//! `--http-requests N`, `--http-seconds S` (per load, all rounds together), `--no-docs`, and
//! `--baseline-binary PATH`: another build of `bernstein-mcp` (an earlier commit's release
//! binary, say) that the `stdio` part measures like ours in every round (`bernstein_run_status`
//! and `bernstein_status`, meter on), whose `audit verify` the `verify` part times on the same
//! chain, and which the `http` part serves and loads beside ours with every request and client
//! count, each interleaved with ours round by round, so a change is measured side by side in
//! one run.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use bernstein_journal::key::AuditKey;

use crate::bench_doc::{self, Chart, Series};
use crate::bench_guard::{self, Scratch};
use crate::bench_http::{self, CLIENTS, HttpOptions, HttpResults, HttpSetup};
use crate::bench_limits::{self, DurableLatency, VerifyRates};
use crate::bench_stdio::{self, Binaries, CallCounts, StdioResults};
use crate::{bench_scale, cargo, project_root};

/// `(package, bench target)`, run only when named.
const CRATE_BENCHES: &[(&str, &str)] = &[
    ("bernstein-journal", "audit"),
    ("bernstein-journal", "evidence"),
    ("bernstein-tasks", "store"),
];

/// The parts of the full run, in the order they run.
const PARTS: &[&str] = &["durable", "stdio", "verify", "poll", "http"];

/// Default requests per HTTP load (all rounds together).
const HTTP_REQUESTS: usize = 2_000;
/// Default seconds per HTTP load (all rounds together).
const HTTP_SECONDS: u64 = 10;

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let name = args.first().filter(|a| !a.starts_with("--")).cloned();
    let flags = if name.is_some() { &args[1..] } else { args };
    if name.as_deref() == Some("scale") {
        return bench_scale::run(flags);
    }
    let python = reference_python();
    if let Some((package, bench)) = CRATE_BENCHES
        .iter()
        .find(|(p, b)| name.as_deref() == Some(*b) || name.as_deref() == Some(*p))
    {
        return run_crate_bench(package, bench, python.as_deref());
    }
    let parts: Vec<&str> = match name.as_deref() {
        None => PARTS.to_vec(),
        Some(part) if PARTS.contains(&part) => vec![part],
        Some(other) => bail!(
            "no benchmark named {other:?}; try one of {}, scale, audit, evidence, store",
            PARTS.join(", ")
        ),
    };
    let options = Options::parse(flags)?;
    bench_guard::install_interrupt_handler()?;
    match &python {
        Some(py) => eprintln!("bench: comparing with the reference at {}", py.display()),
        None => eprintln!("bench: reference not installed; measuring bernstein-mcp alone"),
    }
    let binaries = bench_stdio::build_servers()?;
    let rmcp_http = if parts.contains(&"http") {
        Some(build_rmcp_http()?)
    } else {
        None
    };
    let scratch = Scratch::new("limits")?;
    let result = run_parts(
        &parts,
        &options,
        scratch.path(),
        python.as_deref(),
        &binaries,
        rmcp_http.as_deref(),
    );
    if result.is_err() {
        bench_stdio::print_logs(scratch.path());
    }
    let results = result?;
    let (summary, details) = render_report(&results);
    println!("{summary}\n{details}");
    if name.is_none() && !options.no_docs {
        if let Some(http) = &results.http {
            draw_http_chart(&project_root().join("docs/bench-http.svg"), http)?;
        }
        bench_doc::write_section("limits", &render_doc(&summary, &details, &options))?;
    }
    Ok(())
}

/// The flags of the issue-10 benches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    counts: CallCounts,
    http: HttpOptions,
    no_docs: bool,
    baseline: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Options> {
        let mut stdio_args = Vec::new();
        let mut http = HttpOptions {
            requests: HTTP_REQUESTS,
            seconds: HTTP_SECONDS,
        };
        let mut no_docs = false;
        let mut baseline = None;
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--no-docs" => no_docs = true,
                "--baseline-binary" => {
                    let path = args.next().context("--baseline-binary needs a path")?;
                    baseline = Some(PathBuf::from(path));
                }
                "--http-requests" | "--http-seconds" => {
                    let value: usize = args
                        .next()
                        .and_then(|v| v.parse().ok())
                        .filter(|n| *n > 0)
                        .with_context(|| format!("{flag} needs a positive number"))?;
                    if flag == "--http-requests" {
                        http.requests = value;
                    } else {
                        http.seconds = value as u64;
                    }
                }
                _ => {
                    stdio_args.push(flag.clone());
                    if let Some(value) = args.next() {
                        stdio_args.push(value.clone());
                    }
                }
            }
        }
        Ok(Options {
            counts: CallCounts::parse(&stdio_args)?,
            http,
            no_docs,
            baseline,
        })
    }
}

fn reference_python() -> Option<PathBuf> {
    std::env::var_os("BERNSTEIN_PY")
        .map(PathBuf::from)
        .or_else(|| {
            let default = PathBuf::from(std::env::var_os("HOME")?)
                .join(".cache/bernstein-mcp/oracle/bin/python");
            default.exists().then_some(default)
        })
}

fn run_crate_bench(package: &str, bench: &str, python: Option<&Path>) -> anyhow::Result<()> {
    let mut command = cargo();
    command
        .args(["bench", "-q", "-p", package, "--bench", bench])
        .current_dir(project_root());
    if let Some(py) = python {
        command.env("BERNSTEIN_PY", py);
    }
    ensure!(
        command.status()?.success(),
        "benchmark {package}/{bench} failed"
    );
    Ok(())
}

fn build_rmcp_http() -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"));
    eprintln!("bench: building bench/rmcp-http-baseline (release)");
    let status = cargo()
        .args(["build", "-q", "--release", "--manifest-path"])
        .arg(project_root().join("bench/rmcp-http-baseline/Cargo.toml"))
        .arg("--target-dir")
        .arg(target.join("rmcp-http-baseline"))
        .current_dir(project_root())
        .status()?;
    ensure!(status.success(), "building bench/rmcp-http-baseline failed");
    Ok(bench_http::rmcp_http_binary(&target))
}

/// Everything one run measured.
#[derive(Default)]
struct Results {
    cores: usize,
    sync: Option<DurableLatency>,
    stdio: Option<StdioResults>,
    verify: Option<VerifyRates>,
    poll: Option<(std::time::Duration, std::time::Duration)>,
    http: Option<HttpResults>,
}

fn run_parts(
    parts: &[&str],
    options: &Options,
    scratch: &Path,
    python: Option<&Path>,
    binaries: &Binaries,
    rmcp_http: Option<&Path>,
) -> anyhow::Result<Results> {
    let key_file = scratch.join("audit.key");
    std::fs::write(&key_file, bench_stdio::BENCH_KEY)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600))?;
    }
    let key = AuditKey::from_file(&key_file)?;
    let mut results = Results {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        ..Results::default()
    };
    let bar = crate::progress::counter("bench: parts", parts.len() as u64);
    for part in parts {
        bar.inc();
        eprintln!("bench: {part}");
        let dir = scratch.join(part);
        std::fs::create_dir_all(&dir)?;
        match *part {
            "durable" => results.sync = Some(bench_limits::measure_fdatasync(&dir)?),
            "stdio" => {
                results.stdio = Some(bench_stdio::measure_all(
                    &dir,
                    python,
                    binaries,
                    options.baseline.as_deref(),
                    options.counts,
                )?);
            }
            "verify" => {
                results.verify = Some(bench_limits::measure_verify(
                    &dir,
                    &key,
                    &key_file,
                    python,
                    &binaries.ours,
                    options.baseline.as_deref(),
                )?);
            }
            "poll" => {
                let small = bench_limits::measure_poll(&dir, &key, 10)?;
                let large = bench_limits::measure_poll(&dir, &key, bench_limits::CHAIN_ENTRIES)?;
                results.poll = Some((small, large));
            }
            "http" => {
                let reference_cli = python
                    .map(|py| py.with_file_name("bernstein"))
                    .filter(|cli| cli.exists());
                results.http = Some(bench_http::measure(
                    &HttpSetup {
                        ours: &binaries.ours,
                        baseline: options.baseline.as_deref(),
                        rmcp_http: rmcp_http.context("the HTTP baseline was not built")?,
                        reference_cli: reference_cli.as_deref(),
                        python,
                        key: &key_file,
                        scratch: &dir,
                    },
                    options.http,
                )?);
            }
            other => bail!("unknown part {other}"),
        }
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(results)
}

// ---------------------------------------------------------------------------------------------
// The report.

/// One line of the summary table.
struct Line {
    figure: String,
    ours: Option<f64>,
    reference: Option<f64>,
    rmcp: Option<f64>,
    limit: Option<f64>,
    unit: &'static str,
    /// Higher is better (rates) or lower is better (times, memory).
    higher_is_better: bool,
    target: &'static str,
}

fn ratio(ours: Option<f64>, other: Option<f64>, higher_is_better: bool) -> String {
    match (ours, other) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
            // Always "how many times better ours is": above 1 is better.
            let r = if higher_is_better { a / b } else { b / a };
            format!("{r:.2}x")
        }
        _ => "-".to_owned(),
    }
}

fn value(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 1.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
        None => "-".to_owned(),
    }
}

fn summary_lines(results: &Results) -> Vec<Line> {
    let mut lines = Vec::new();
    let sync_ms = results
        .sync
        .as_ref()
        .map(|s| s.one.mean().as_secs_f64() * 1e3);
    let pair_ms = results
        .sync
        .as_ref()
        .map(|s| s.pair.mean().as_secs_f64() * 1e3);
    if let Some(stdio) = &results.stdio {
        let find = |server: &str, tool: &str| {
            stdio
                .rows
                .iter()
                .find(|r| r.server == server && r.tool == tool)
        };
        let rmcp = find("rmcp 3.11 bare", "add");
        let bare_ms = rmcp.map(bench_stdio::Row::mean_ms);
        let limit = match (bare_ms, sync_ms) {
            (Some(bare), Some(sync)) => Some(1e3 / (bare + 2.0 * sync)),
            _ => None,
        };
        // The floor of this disk for our call, which makes its two fdatasyncs side by side:
        // one bare call plus the pair as the disk served it.
        let pair_limit = match (bare_ms, pair_ms) {
            (Some(bare), Some(pair)) => Some(1e3 / (bare + pair)),
            _ => None,
        };
        for (label, server, tool, target, limit) in [
            (
                "ours",
                "ours",
                "bernstein_run_status",
                ">= 0.9x limit; >= 5x ref when fdatasync <= 0.2 ms",
                limit,
            ),
            (
                "ours (meter off)",
                "ours (meter off)",
                "bernstein_run_status",
                "",
                limit,
            ),
            (
                "ours (limit: one bare call plus the side-by-side pair)",
                "ours",
                "bernstein_run_status",
                "",
                pair_limit,
            ),
            ("ours", "ours", "bernstein_status", ">= 50x ref", None),
            (
                "ours (meter off)",
                "ours (meter off)",
                "bernstein_status",
                "",
                None,
            ),
        ] {
            lines.push(Line {
                figure: format!("stdio {tool}, {label}, calls/s"),
                ours: find(server, tool).map(bench_stdio::Row::calls_per_second),
                reference: find("reference", tool).map(bench_stdio::Row::calls_per_second),
                rmcp: rmcp.map(bench_stdio::Row::calls_per_second),
                limit,
                unit: "calls/s",
                higher_is_better: true,
                target,
            });
        }
        let piped = |server: &str| {
            stdio
                .pipelined
                .iter()
                .find(|p| p.server == server)
                .map(bench_stdio::Pipelined::calls_per_second)
        };
        lines.push(Line {
            figure: format!(
                "stdio bernstein_run_status, {} in flight, calls/s",
                bench_stdio::PIPELINE_DEPTH
            ),
            ours: piped("ours"),
            reference: piped("reference"),
            rmcp: piped("rmcp 3.11 bare"),
            limit: None,
            unit: "calls/s",
            higher_is_better: true,
            target: "",
        });
        let cold = |row: Option<&bench_stdio::Row>| row.map(|r| r.cold_start.as_secs_f64() * 1e3);
        lines.push(Line {
            figure: "stdio cold start to the initialize answer, ms".to_owned(),
            ours: cold(find("ours", "bernstein_run_status")),
            reference: cold(find("reference", "bernstein_run_status")),
            rmcp: cold(rmcp),
            limit: None,
            unit: "ms",
            higher_is_better: false,
            target: "<= 3x rmcp; >= 300x faster than ref",
        });
        let idle = |row: Option<&bench_stdio::Row>| {
            row.and_then(|r| r.idle_rss_kib).map(|k| k as f64 / 1024.0)
        };
        lines.push(Line {
            figure: "stdio RSS idle, MiB".to_owned(),
            ours: idle(find("ours", "bernstein_run_status")),
            reference: idle(find("reference", "bernstein_run_status")),
            rmcp: idle(rmcp),
            limit: None,
            unit: "MiB",
            higher_is_better: false,
            target: "<= 15 MiB",
        });
    }
    if let Some(verify) = &results.verify {
        lines.push(Line {
            figure: format!(
                "audit verify, {} entries, entries/s (limit: raw HMAC on {} cores)",
                bench_limits::CHAIN_ENTRIES,
                verify.cores
            ),
            ours: Some(verify.ours),
            reference: verify.reference,
            rmcp: None,
            limit: Some(verify.hmac_all_cores),
            unit: "entries/s",
            higher_is_better: true,
            target: ">= 0.5x limit; >= 20x ref",
        });
    }
    if let Some((small, large)) = results.poll {
        lines.push(Line {
            figure: "poll on a 100k-entry chain, us (limit: the 10-entry chain)".to_owned(),
            ours: Some(large.as_secs_f64() * 1e6),
            reference: None,
            rmcp: None,
            limit: Some(small.as_secs_f64() * 1e6),
            unit: "us",
            higher_is_better: false,
            target: "",
        });
    }
    if let Some(http) = &results.http {
        let rate = |server: &str, request: &str| {
            bench_http::find(&http.rows, server, request, 64)
                .map(|r| r.result.requests_per_second())
        };
        for (request, target) in [
            ("ping", ">= 0.7x rmcp"),
            ("bernstein_status", ""),
            ("bernstein_run_status", ">= 0.5x rmcp; >= 50x ref"),
        ] {
            lines.push(Line {
                figure: format!("http {request}, 64 clients, req/s"),
                ours: rate("ours", request),
                reference: rate("reference", request),
                rmcp: rate(
                    "rmcp bare",
                    if request == "ping" {
                        "ping"
                    } else {
                        "tools/call floor"
                    },
                ),
                limit: None,
                unit: "req/s",
                higher_is_better: true,
                target,
            });
        }
        let tail = |server: &str| {
            bench_http::find(&http.rows, server, "bernstein_run_status", 64)
                .or_else(|| bench_http::find(&http.rows, server, "tools/call floor", 64))
                .map(|r| {
                    let p50 = bench_scale::percentile_ms(&r.result.latencies, 50);
                    let p99 = bench_scale::percentile_ms(&r.result.latencies, 99);
                    if p50 > 0.0 { p99 / p50 } else { 0.0 }
                })
        };
        lines.push(Line {
            figure: "http p99/p50 at 64 clients (tool call)".to_owned(),
            ours: tail("ours"),
            reference: tail("reference"),
            rmcp: tail("rmcp bare"),
            limit: None,
            unit: "",
            higher_is_better: false,
            target: "<= 10",
        });
        let peak = |server: &str| {
            http.rss
                .iter()
                .find(|r| r.server == server)
                .map(|r| r.peak_kib as f64 / 1024.0)
        };
        lines.push(Line {
            figure: "http RSS peak at 64 clients, MiB".to_owned(),
            ours: peak("ours"),
            reference: peak("reference"),
            rmcp: peak("rmcp bare"),
            limit: None,
            unit: "MiB",
            higher_is_better: false,
            target: "<= 60 MiB",
        });
    }
    lines
}

/// The summary (Markdown: the machine and the table of ratios) and the detail tables (text).
fn render_report(results: &Results) -> (String, String) {
    let mut out = String::new();
    out.push_str(&format!("machine: {} cores", results.cores));
    if let Some(DurableLatency { one, pair }) = &results.sync {
        out.push_str(&format!(
            "; fdatasync of a 300-byte append: mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms ({} \
             syncs); two such appends to two files side by side: mean {:.3} ms, p50 {:.3} ms, \
             p99 {:.3} ms",
            one.mean().as_secs_f64() * 1e3,
            bench_scale::percentile_ms(&one.latencies, 50),
            bench_scale::percentile_ms(&one.latencies, 99),
            one.latencies.len(),
            pair.mean().as_secs_f64() * 1e3,
            bench_scale::percentile_ms(&pair.latencies, 50),
            bench_scale::percentile_ms(&pair.latencies, 99),
        ));
    }
    out.push_str("\n\nratios: above 1 means ours is better (faster, or smaller)\n\n");
    out.push_str("| figure | ours | reference | bare rmcp | limit | ours/ref | ours/rmcp | ours/limit | target |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for line in summary_lines(results) {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            line.figure,
            value(line.ours),
            value(line.reference),
            value(line.rmcp),
            value(line.limit),
            ratio(line.ours, line.reference, line.higher_is_better),
            ratio(line.ours, line.rmcp, line.higher_is_better),
            ratio(line.ours, line.limit, line.higher_is_better),
            line.target,
        ));
        let _ = line.unit;
    }
    let summary = out;
    let mut out = String::new();
    if let Some(verify) = &results.verify {
        out.push_str(&format!(
            "\naudit verify detail: ours {:.0}/s; reference {}; raw HMAC-SHA256 over the same \
             lines ({:.0} bytes mean) {:.0}/s on 1 core, {:.0}/s on {} cores\n",
            verify.ours,
            verify
                .reference
                .map_or_else(|| "not measured".to_owned(), |r| format!("{r:.0}/s")),
            verify.mean_line_bytes,
            verify.hmac_one_core,
            verify.hmac_all_cores,
            verify.cores
        ));
        if let Some(baseline) = verify.baseline {
            out.push_str(&format!(
                "audit verify side by side: ours {:.0}/s; baseline binary {baseline:.0}/s \
                 (ours/baseline {:.2}x), best of {} interleaved rounds each\n",
                verify.ours,
                verify.ours / baseline,
                bench_limits::VERIFY_ROUNDS
            ));
        }
    }
    if let Some((small, large)) = results.poll {
        out.push_str(&format!(
            "poll detail: {:.1} us on a 10-entry chain, {:.1} us on a {}-entry chain\n",
            small.as_secs_f64() * 1e6,
            large.as_secs_f64() * 1e6,
            bench_limits::CHAIN_ENTRIES
        ));
    }
    if let Some(stdio) = &results.stdio {
        out.push_str(&bench_stdio::render_report(&stdio.rows));
        out.push('\n');
        out.push_str(&bench_stdio::render_pipelined(&stdio.pipelined));
    }
    if let Some(http) = &results.http {
        out.push_str(&bench_http::render(http));
    }
    (summary, out)
}

fn render_doc(summary: &str, details: &str, options: &Options) -> String {
    format!(
        "## Near the physical limits: stdio, HTTP, verify, durability\n\n\
         Measured by `cargo xtask bench` (issue 10) in one run: release builds of the servers \
         and of xtask itself, whose clients and HTTP load generator share the cores with the \
         servers they load, loopback only, every load bounded in count and time, servers \
         interleaved round by round. stdio: {} \
         `bernstein_run_status` and {} `bernstein_status` calls per series; HTTP: at most {} \
         requests or {} s per load. \"limit\" is the physical limit measured in the same run: \
         for a durable stdio call, one bare rmcp call plus two fdatasyncs (the journal row and \
         the audit entry), and on the row marked so one bare call plus two fdatasyncs of two \
         files side by side, as the disk served them in the same run; for verify, raw HMAC-SHA256 over the same lines with `ring` on every \
         core.\n\n\
         ![HTTP requests per second against concurrent clients](bench-http.svg)\n\n\
         {}\n\n```text\n{}\n```\n\n\
         Reproduce: install the reference oracle (`bash ../shared/reference/setup-oracle.sh`, or \
         set `BERNSTEIN_PY` to its Python), then run `cargo xtask bench` from the repository \
         root (about 10 minutes on 2 cores). `cargo xtask bench NAME` runs one part (`durable`, \
         `stdio`, `verify`, `poll`, `http`) and only prints; `--no-docs` leaves this file alone. \
         The command runs itself again from `cargo run --release -p xtask`. Each server is \
         built by the command itself: `bernstein-mcp` with `cargo build \
         --release`, the two bare rmcp servers from `bench/rmcp-baseline` and \
         `bench/rmcp-http-baseline`.\n",
        options.counts.run_status,
        options.counts.status,
        options.http.requests,
        options.http.seconds,
        summary.trim_end(),
        details.trim(),
    )
}

fn draw_http_chart(path: &Path, http: &HttpResults) -> anyhow::Result<()> {
    let mut series = Vec::new();
    for server in ["rmcp bare", "reference", "ours"] {
        for request in [
            "ping",
            "tools/call floor",
            "bernstein_status",
            "bernstein_run_status",
        ] {
            let points: Vec<(f64, f64)> = CLIENTS
                .iter()
                .filter_map(|&clients| {
                    bench_http::find(&http.rows, server, request, clients)
                        .map(|r| (clients as f64, r.result.requests_per_second().max(0.1)))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    name: format!("{server}: {request}"),
                    points,
                });
            }
        }
    }
    bench_doc::line_chart(
        path,
        &Chart {
            title: "MCP over streamable HTTP on loopback: requests per second",
            x_label: "concurrent clients",
            y_label: "requests/s",
            log_x: true,
            log_y: true,
        },
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_split_between_stdio_and_http() {
        let args: Vec<String> = ["--calls", "40", "--http-requests", "9", "--no-docs"]
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        let options = Options::parse(&args).unwrap();
        assert_eq!(options.counts.run_status, 40);
        assert_eq!(options.http.requests, 9);
        assert_eq!(options.http.seconds, HTTP_SECONDS);
        assert!(options.no_docs);
        assert_eq!(options.baseline, None);
        let with_baseline = Options::parse(&[
            "--baseline-binary".to_owned(),
            "/tmp/old".to_owned(),
            "--no-docs".to_owned(),
        ])
        .unwrap();
        assert_eq!(with_baseline.baseline, Some(PathBuf::from("/tmp/old")));
        assert!(with_baseline.no_docs);
        assert!(Options::parse(&["--baseline-binary".to_owned()]).is_err());
        assert!(Options::parse(&["--http-seconds".to_owned(), "0".to_owned()]).is_err());
        assert!(Options::parse(&["--bogus".to_owned()]).is_err());
    }

    #[test]
    fn ratios_read_above_one_as_better() {
        assert_eq!(ratio(Some(200.0), Some(100.0), true), "2.00x");
        assert_eq!(ratio(Some(5.0), Some(10.0), false), "2.00x");
        assert_eq!(ratio(None, Some(1.0), true), "-");
        assert_eq!(ratio(Some(1.0), Some(0.0), true), "-");
    }
}
