//! `cargo xtask bench scale`: per-call latency, cold start and memory of the stdio server as the
//! project grows to 1 000, 10 000 and 100 000 tasks, with one server process and with two
//! processes alternating on the same workdir (issue 13, "Show it works").
//!
//! # The fill
//!
//! Each project is filled in-process through the library APIs the server itself uses, so its
//! files are byte for byte what a server would have written:
//!
//! * for every task, one call is anchored with [`Anchor::anchor`] on the server's default
//!   anchoring run (`mcp-calls`), as a `tools/call` of `bernstein_run` with the task's goal: a
//!   journal row and an `mcp.stateless_call` audit entry;
//! * the tasks are created by [`EmbeddedStore::create_plan`] in batches of
//!   [`FILL_BATCH`] and opened by [`EmbeddedStore::approve_plan`] (one store transaction per
//!   batch instead of one per task), then the task log is compacted as the store does on its
//!   own once the log is long. Every task is left `open`, which is the worst case for the
//!   claimable backlog.
//!
//! The fill is written on a tmpfs (`/dev/shm`) when there is one, where fsync costs nothing,
//! and then copied to the on-disk scratch directory the servers run on: the bytes are the same,
//! only the time to make them is not measured.
//!
//! # The measurement
//!
//! At each size (and on a fresh project): the cold start (median of three fresh processes, from
//! spawning to the `initialize` answer), then, with one process and then with two processes
//! started on the same workdir and called alternately, series of `bernstein_status`,
//! `bernstein_run_status` (on a run whose journal holds three rows), `bernstein_run`,
//! `bernstein_claim`, and `bernstein_complete` of tasks the bench claimed for it through the
//! store ([`claimed_for_completion`]). Every series
//! is bounded in count (`--calls`) and in time (`--seconds`), whichever ends first. The RSS is
//! `VmRSS` of the one-process server right after its series (the figure the target is read
//! from), its peak (`VmHWM`), and `VmRSS` again after [`RSS_SETTLE`] without a call: the
//! allocator gives back what a claim needed for a moment about a second after it was freed.
//!
//! Last, the pause probe times one append and fdatasync after a pause without I/O as long as
//! the largest project's claim, and one right after it: what a completion timed just after
//! such a claim would pay the disk, one reason the completions are a series of their own.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use bernstein_journal::key::AuditKey;
use bernstein_mcp_core::{Anchor, DEFAULT_ANCHOR_RUN_ID};
use bernstein_tasks::backend::ClaimRequest;
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tasks::{NewTask, TaskId};
use serde_json::{Value, json};

use crate::bench_doc::{self, Chart, Series};
use crate::bench_guard::{self, Scratch};
use crate::bench_limits;
use crate::bench_stdio::{
    self, BENCH_KEY, OUR_ENVIRONMENT, StdioServer, create_run_with_journal, median_cold_start,
    tool_payload,
};
use crate::project_root;

/// Tasks per store transaction while filling.
const FILL_BATCH: usize = 2_000;
/// Project sizes measured after the fresh one, unless `--sizes` says otherwise.
const DEFAULT_SIZES: &[usize] = &[1_000, 10_000, 100_000];
/// Timed calls per series at most, unless `--calls` says otherwise.
const DEFAULT_CALLS: usize = 200;
/// Seconds per series at most, unless `--seconds` says otherwise.
const DEFAULT_SECONDS: u64 = 6;
/// Untimed calls before each series.
const WARM_UP: usize = 3;
/// Fresh processes whose cold start is measured at each size; the median is reported.
const COLD_STARTS: usize = 3;
/// How long the one-process server is left without a call before its resident set is read a
/// second time.
const RSS_SETTLE: Duration = Duration::from_secs(2);
/// The tools measured, in the order of the report.
const TOOLS: &[&str] = &[
    "bernstein_run",
    "bernstein_claim",
    "bernstein_complete",
    "bernstein_status",
    "bernstein_run_status",
];

/// The flags of `cargo xtask bench scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Options {
    sizes: Vec<usize>,
    calls: usize,
    seconds: u64,
    /// With `--open N`, only the newest N tasks of each project are left open (the rest are
    /// settled), as in a project that has lived; without it every task is open, the worst case
    /// for the claimable backlog.
    open: Option<usize>,
    write_docs: bool,
    /// With `--baseline-binary PATH`, another build of `bernstein-mcp` whose claims and
    /// completions are timed against ours at each size, the two taking turns on
    /// the same project.
    baseline: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Options> {
        let mut options = Options {
            sizes: DEFAULT_SIZES.to_vec(),
            calls: DEFAULT_CALLS,
            seconds: DEFAULT_SECONDS,
            open: None,
            write_docs: true,
            baseline: None,
        };
        let usage = "usage: cargo xtask bench scale [--sizes 1000,10000,100000] [--calls N] \
                     [--seconds S] [--open N] [--baseline-binary PATH] [--no-docs]";
        let mut args = args.iter();
        while let Some(flag) = args.next() {
            if flag == "--no-docs" {
                options.write_docs = false;
                continue;
            }
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value; {usage}"))?;
            let positive = |v: &str| -> anyhow::Result<usize> {
                v.parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("{flag} needs positive numbers, not {v:?}"))
            };
            match flag.as_str() {
                "--sizes" => {
                    options.sizes = value
                        .split(',')
                        .map(positive)
                        .collect::<anyhow::Result<_>>()?;
                }
                "--calls" => options.calls = positive(value)?,
                "--seconds" => options.seconds = positive(value)? as u64,
                "--open" => options.open = Some(positive(value)?),
                "--baseline-binary" => options.baseline = Some(PathBuf::from(value)),
                other => bail!("unknown argument {other:?}; {usage}"),
            }
        }
        Ok(options)
    }
}

/// One timed series.
#[derive(Debug, Clone, Default)]
struct Timing {
    latencies: Vec<Duration>,
}

impl Timing {
    fn percentile_ms(&self, percent: usize) -> f64 {
        percentile_ms(&self.latencies, percent)
    }

    fn calls_per_second(&self) -> f64 {
        let total: Duration = self.latencies.iter().sum();
        if total.is_zero() {
            0.0
        } else {
            self.latencies.len() as f64 / total.as_secs_f64()
        }
    }
}

pub(crate) fn percentile_ms(latencies: &[Duration], percent: usize) -> f64 {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let rank = (sorted.len() * percent).div_ceil(100).saturating_sub(1);
    sorted.get(rank).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Everything measured at one project size.
#[derive(Debug, Clone)]
struct SizeResult {
    tasks: usize,
    fill: Duration,
    cold_start: Duration,
    /// `VmRSS` right after the one-process series.
    rss_kib: u64,
    /// `VmHWM` after the one-process series.
    peak_rss_kib: u64,
    /// `VmRSS` [`RSS_SETTLE`] later.
    settled_rss_kib: u64,
    /// Per tool, in [`TOOLS`] order: one process, two processes alternating.
    one: Vec<Timing>,
    two: Vec<Timing>,
    /// With a baseline build: claim and complete, ours then the baseline's, alternating.
    side_by_side: Option<SideBySide>,
}

/// Claims and completions of our build and a baseline build on one project, taking turns.
#[derive(Debug, Clone, Default)]
struct SideBySide {
    ours_claim: Timing,
    ours_complete: Timing,
    baseline_claim: Timing,
    baseline_complete: Timing,
}

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let options = Options::parse(args)?;
    bench_guard::install_interrupt_handler()?;
    let ours = bench_stdio::build_ours()?;
    let scratch = Scratch::new("scale")?;
    let result = run_in(scratch.path(), &ours, &options);
    if result.is_err() {
        bench_stdio::print_logs(scratch.path());
    }
    result
}

fn run_in(scratch: &Path, binary: &Path, options: &Options) -> anyhow::Result<()> {
    let key_path = scratch.join("audit.key");
    std::fs::write(&key_path, BENCH_KEY)?;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600))?;
    let key = AuditKey::from_file(&key_path)?;
    let fill_base = Path::new("/dev/shm");
    let fill_base = if fill_base.is_dir() {
        fill_base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    eprintln!(
        "bench scale: sizes fresh,{}; at most {} calls or {} s per series; fills on {}",
        options
            .sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        options.calls,
        options.seconds,
        fill_base.display()
    );
    let mut results = Vec::new();
    for &tasks in std::iter::once(&0).chain(&options.sizes) {
        let project = scratch.join(format!("project-{tasks}"));
        let started = Instant::now();
        if tasks == 0 {
            std::fs::create_dir_all(project.join(".sdd"))?;
        } else {
            let fill_dir = Scratch::new_in(&fill_base, "scale-fill")?;
            fill(fill_dir.path(), tasks, options.open.unwrap_or(tasks), &key)?;
            copy_tree(fill_dir.path(), &project)?;
        }
        settle_disk(&project)?;
        let fill = started.elapsed();
        if tasks > 0 {
            eprintln!("bench scale: filled {tasks} tasks in {fill:.1?}");
        }
        let server = Server {
            binary,
            project: &project,
            key: &key_path,
            log: scratch.join(format!("server-{tasks}.log")),
        };
        let baseline = options.baseline.as_deref().map(|binary| Server {
            binary,
            project: &project,
            key: &key_path,
            log: scratch.join(format!("baseline-{tasks}.log")),
        });
        results.push(measure_size(
            &server,
            baseline.as_ref(),
            tasks,
            fill,
            options,
        )?);
        // The projects are large; only one is kept at a time.
        std::fs::remove_dir_all(&project)?;
    }
    let pause = pause_of(&results);
    eprintln!(
        "bench scale: the disk after a pause of {:.0} ms",
        pause.as_secs_f64() * 1e3
    );
    let probe = measure_pause(scratch, pause)?;
    let report = render_report(&results, &probe, options);
    println!("{report}");
    if options.write_docs {
        // The worst case (every task open) and the lived-in project (`--open N`) keep their
        // own sections and charts, so one run does not erase the other.
        let (section, chart) = match options.open {
            None => ("scale", "bench-scale.svg"),
            Some(_) => ("scale-lived", "bench-scale-lived.svg"),
        };
        draw_chart(&project_root().join("docs").join(chart), &results)?;
        bench_doc::write_section(section, &render_doc(&report, options, chart))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The fill.

/// Fills the project at `dir` with `tasks` open tasks and one anchored call per task.
fn fill(dir: &Path, tasks: usize, open: usize, key: &AuditKey) -> anyhow::Result<()> {
    fill_in_batches(dir, tasks, open, FILL_BATCH, key)
}

/// [`fill`] with `batch` tasks per plan.
fn fill_in_batches(
    dir: &Path,
    tasks: usize,
    open: usize,
    batch_size: usize,
    key: &AuditKey,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.join(".sdd"))?;
    let store = EmbeddedStore::open(dir, Some(key.clone()))?;
    let anchor = Anchor::open(dir, DEFAULT_ANCHOR_RUN_ID, key.clone())?;
    // The oldest `tasks - open` tasks are settled: their plans are rejected, which cancels
    // them in one transaction per batch. The newest `open` tasks are opened by approval.
    let settled = tasks.saturating_sub(open);
    let mut made = 0;
    while made < tasks {
        let limit = if made < settled { settled } else { tasks };
        let batch = batch_size.min(limit - made);
        let mut requests = Vec::with_capacity(batch);
        for n in made..made + batch {
            let goal = format!("scale benchmark task {n}");
            let params = json!({"name": "bernstein_run", "arguments": {"goal": goal}});
            anchor.anchor("tools/call", Some(&params))?;
            requests.push(NewTask::new(goal.clone(), goal));
        }
        let plan = store.create_plan(&format!("scale benchmark batch {made}"), requests)?;
        if made < settled {
            store.reject_plan(&plan.content.id, "scale benchmark fill: settled")?;
        } else {
            store.approve_plan(&plan.content.id, "scale benchmark fill")?;
        }
        made += batch;
    }
    store.compact()?;
    Ok(())
}

/// Rounds of the pause probe.
const PAUSE_ROUNDS: usize = 5;
/// The pause probe's pause at most, so that it stays bounded whatever a claim took.
const PAUSE_AT_MOST: Duration = Duration::from_secs(2);

/// One append and fdatasync after a pause without I/O, and one right after it.
#[derive(Debug, Clone)]
struct PauseProbe {
    pause: Duration,
    after_pause: Vec<Duration>,
    back_to_back: Vec<Duration>,
}

/// The pause the probe waits: the one-process claim's p50 at the largest size, the time a
/// claim there leaves the disk without a write before the completion that follows it.
fn pause_of(results: &[SizeResult]) -> Duration {
    let claim = TOOLS
        .iter()
        .position(|tool| *tool == "bernstein_claim")
        .unwrap_or(0);
    let p50 = results
        .last()
        .and_then(|largest| largest.one.get(claim))
        .map_or(0.0, |timing| timing.percentile_ms(50));
    Duration::from_secs_f64(p50 / 1e3).min(PAUSE_AT_MOST)
}

/// Times [`PAUSE_ROUNDS`] pairs of 300-byte appends with fdatasync in the scratch directory:
/// the first after `pause` without I/O, the second at once after it.
fn measure_pause(dir: &Path, pause: Duration) -> anyhow::Result<PauseProbe> {
    let path = dir.join("pause-probe.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let line = bench_limits::probe_line();
    let mut probe = PauseProbe {
        pause,
        after_pause: Vec::with_capacity(PAUSE_ROUNDS),
        back_to_back: Vec::with_capacity(PAUSE_ROUNDS),
    };
    for _ in 0..PAUSE_ROUNDS {
        std::thread::sleep(pause);
        probe
            .after_pause
            .push(bench_limits::timed_durable_append(&mut file, &line)?);
        probe
            .back_to_back
            .push(bench_limits::timed_durable_append(&mut file, &line)?);
    }
    std::fs::remove_file(&path)?;
    Ok(probe)
}

/// Writes back everything dirty on the filesystem holding `path` before a series is timed.
/// The copy of a large project leaves hundreds of megabytes in the page cache; written back
/// by the kernel while the servers run, they queue in front of every measured fsync and make
/// a large project's calls look slower than a fresh one's (the fresh project, measured first,
/// finds a quiet disk).
fn settle_disk(path: &Path) -> anyhow::Result<()> {
    let dir = std::fs::File::open(path)?;
    rustix::fs::syncfs(&dir).with_context(|| format!("syncfs {}", path.display()))?;
    Ok(())
}

/// Copies a directory tree (regular files and directories only, as a project holds).
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The measurement.

/// How to start our server on one project.
struct Server<'a> {
    binary: &'a Path,
    project: &'a Path,
    key: &'a Path,
    log: PathBuf,
}

impl Server<'_> {
    fn command(&self) -> anyhow::Result<Command> {
        let mut command = Command::new(self.binary);
        command
            .arg("--workdir")
            .arg(self.project)
            .arg("--key-file")
            .arg(self.key)
            .stderr(File::options().create(true).append(true).open(&self.log)?);
        for name in OUR_ENVIRONMENT {
            command.env_remove(name);
        }
        Ok(command)
    }

    fn start(&self) -> anyhow::Result<StdioServer> {
        Ok(StdioServer::start(self.command()?)?.0)
    }
}

fn measure_size(
    server: &Server<'_>,
    baseline: Option<&Server<'_>>,
    tasks: usize,
    fill: Duration,
    options: &Options,
) -> anyhow::Result<SizeResult> {
    let label = if tasks == 0 {
        "fresh".to_owned()
    } else {
        tasks.to_string()
    };
    eprintln!("bench scale: {label}: cold start");
    let cold_start = median_cold_start(&|| server.command(), COLD_STARTS)?;
    let run_id = {
        let mut setup = server.start()?;
        let run_id = create_run_with_journal(&mut setup, server.project)?;
        setup.finish()?;
        run_id
    };
    eprintln!("bench scale: {label}: one process");
    let mut one = server.start()?;
    let one_timings = measure_tools(server, &mut [&mut one], &run_id, options)?;
    let rss_kib = one.rss_kib().context("no VmRSS for the server")?;
    let peak_rss_kib = one.peak_rss_kib().context("no VmHWM for the server")?;
    std::thread::sleep(RSS_SETTLE);
    let settled_rss_kib = one.rss_kib().context("no VmRSS for the server")?;
    one.finish()?;
    let side_by_side = match baseline {
        Some(baseline) => {
            eprintln!("bench scale: {label}: ours and the baseline build alternating");
            Some(measure_side_by_side(server, baseline, options)?)
        }
        None => None,
    };
    eprintln!("bench scale: {label}: two processes alternating");
    let mut first = server.start()?;
    let mut second = server.start()?;
    let two_timings = measure_tools(server, &mut [&mut first, &mut second], &run_id, options)?;
    first.finish()?;
    second.finish()?;
    Ok(SizeResult {
        tasks,
        fill,
        cold_start,
        rss_kib,
        peak_rss_kib,
        settled_rss_kib,
        one: one_timings,
        two: two_timings,
        side_by_side,
    })
}

/// Claim-and-complete pairs per turn of one build in [`measure_side_by_side`].
const SIDE_BY_SIDE_TURN: usize = 10;

/// Claims and the completions of what they claimed, [`SIDE_BY_SIDE_TURN`] pairs on our server,
/// then as many on the baseline's, turn by turn on the same project, each pair followed by one
/// untimed `bernstein_run` so the open backlog keeps its size. The first claim of a turn finds
/// the backlog the other build wrote (as a second process would); the rest find their own, as
/// one server does. Bounded like every series: rounds start while fewer than `--calls` pairs
/// per build were timed and `--seconds` have not passed. Our turn also ends once it has used a
/// quarter of that time (claims on every task of a large project take seconds), and the
/// baseline's turn then makes exactly as many pairs, so both builds are always timed alike and
/// a round lasts at most about half the time plus two pairs.
fn measure_side_by_side(
    ours: &Server<'_>,
    baseline: &Server<'_>,
    options: &Options,
) -> anyhow::Result<SideBySide> {
    let mut servers = [ours.start()?, baseline.start()?];
    let mut result = SideBySide::default();
    let budget = Duration::from_secs(options.seconds);
    let started = Instant::now();
    'rounds: while result.baseline_claim.latencies.len() < options.calls
        && started.elapsed() < budget
    {
        let mut ours_pairs = 0;
        for (turn, server) in servers.iter_mut().enumerate() {
            let turn_started = Instant::now();
            let pairs = if turn == 0 {
                SIDE_BY_SIDE_TURN
            } else {
                ours_pairs
            };
            for _ in 0..pairs {
                if turn == 0 && ours_pairs > 0 && turn_started.elapsed() >= budget / 4 {
                    break;
                }
                let (answer, claimed) = server
                    .call_tool_timed("bernstein_claim", json!({"claimer_id": "scale-bench"}))?;
                let receipt = unwrap_result(tool_payload(&answer)?)?;
                if receipt.get("granted").and_then(Value::as_bool) != Some(true) {
                    eprintln!(
                        "bench scale: no open task left to claim; the side-by-side series ends"
                    );
                    break 'rounds;
                }
                let task_id = receipt
                    .get("taskId")
                    .and_then(Value::as_str)
                    .with_context(|| format!("a granted claim without taskId: {receipt}"))?
                    .to_owned();
                let (answer, completed) = server.call_tool_timed(
                    "bernstein_complete",
                    json!({"task_id": task_id, "result_summary": "scale benchmark"}),
                )?;
                tool_payload(&answer).context("bernstein_complete")?;
                tool_payload(
                    &server
                        .call_tool("bernstein_run", json!({"goal": "scale benchmark refill"}))?,
                )?;
                let (claims, completions) = if turn == 0 {
                    ours_pairs += 1;
                    (&mut result.ours_claim, &mut result.ours_complete)
                } else {
                    (&mut result.baseline_claim, &mut result.baseline_complete)
                };
                claims.latencies.push(claimed);
                completions.latencies.push(completed);
            }
        }
    }
    for server in servers {
        server.finish()?;
    }
    ensure!(
        !result.baseline_claim.latencies.is_empty(),
        "no claim was timed side by side"
    );
    Ok(result)
}

/// Times every tool of [`TOOLS`], calling the servers in turn.
fn measure_tools(
    server: &Server<'_>,
    servers: &mut [&mut StdioServer],
    run_id: &str,
    options: &Options,
) -> anyhow::Result<Vec<Timing>> {
    let budget = Duration::from_secs(options.seconds);
    let mut timings = vec![Timing::default(); TOOLS.len()];
    let index = |tool: &str| TOOLS.iter().position(|t| *t == tool).unwrap_or(0);
    let simple: [(&str, Value); 3] = [
        ("bernstein_run", json!({"goal": "scale benchmark call"})),
        ("bernstein_status", json!({})),
        ("bernstein_run_status", json!({"run_id": run_id})),
    ];
    for (tool, arguments) in &simple {
        for n in 0..WARM_UP {
            let server = &mut servers[n % servers.len()];
            tool_payload(&server.call_tool(tool, arguments.clone())?)?;
        }
        let started = Instant::now();
        let timing = &mut timings[index(tool)];
        while timing.latencies.len() < options.calls && started.elapsed() < budget {
            let server = &mut servers[timing.latencies.len() % servers.len()];
            let (answer, latency) = server.call_tool_timed(tool, arguments.clone())?;
            timing.latencies.push(latency);
            tool_payload(&answer)
                .with_context(|| format!("{tool} at call {}", call_count(timing)))?;
        }
    }
    // The claims, a series of their own; the bernstein_run series above made sure a fresh
    // project has open tasks to claim.
    let started = Instant::now();
    while timings[index("bernstein_claim")].latencies.len() < options.calls
        && started.elapsed() < budget
    {
        let turn = timings[index("bernstein_claim")].latencies.len();
        let server = &mut servers[turn % servers.len()];
        let (answer, latency) =
            server.call_tool_timed("bernstein_claim", json!({"claimer_id": "scale-bench"}))?;
        let receipt = unwrap_result(tool_payload(&answer)?)?;
        if receipt.get("granted").and_then(Value::as_bool) != Some(true) {
            eprintln!(
                "bench scale: no open task left to claim ({receipt}); the claim series ends here"
            );
            break;
        }
        timings[index("bernstein_claim")].latencies.push(latency);
    }
    // The completions, a series of their own like every other tool's, of tasks claimed for
    // them by this process through the store (see `claimed_for_completion`).
    let claimed = claimed_for_completion(server, options.calls)?;
    let started = Instant::now();
    for (turn, task_id) in claimed.iter().enumerate() {
        if started.elapsed() >= budget {
            break;
        }
        let server = &mut servers[turn % servers.len()];
        let (answer, completed) = server.call_tool_timed(
            "bernstein_complete",
            json!({"task_id": task_id.as_str(), "result_summary": "scale benchmark"}),
        )?;
        timings[index("bernstein_complete")]
            .latencies
            .push(completed);
        tool_payload(&answer).context("bernstein_complete")?;
    }
    for (tool, timing) in TOOLS.iter().zip(&timings) {
        ensure!(!timing.latencies.is_empty(), "no {tool} call was timed");
    }
    Ok(timings)
}

/// Claims `count` new tasks for the completion series through the store, in this process,
/// while the servers run (as a second process would): one plan of `count` tasks, approved,
/// then each task claimed by id. Completing the claim series' own tasks instead gave too few
/// completions to read a p50 from: on 100,000 open rows a series holds three or four claims
/// (each computes for over a second: its receipt hashes and carries every open row), and each
/// completion followed a second in which the disk had nothing to write, which can make the
/// first fdatasync after it cost several times one made back to back (the report's pause
/// probe measures it in the same run).
fn claimed_for_completion(server: &Server<'_>, count: usize) -> anyhow::Result<Vec<TaskId>> {
    let key = AuditKey::from_file(server.key)?;
    let store = EmbeddedStore::open(server.project, Some(key))?;
    let requests = (0..count)
        .map(|n| {
            let goal = format!("scale benchmark completion {n}");
            NewTask::new(goal.clone(), goal)
        })
        .collect();
    let plan = store.create_plan("scale benchmark completions", requests)?;
    let approved = store.approve_plan(&plan.content.id, "scale benchmark completions")?;
    let claim = ClaimRequest {
        expected_version: None,
        claimer: Some("scale-bench".to_owned()),
        completed_ids: Vec::new(),
    };
    for id in &approved.task_ids {
        store.claim_task(id, &claim)?;
    }
    ensure!(
        approved.task_ids.len() == count,
        "the completion plan opened {} tasks, not {count}",
        approved.task_ids.len()
    );
    Ok(approved.task_ids)
}

/// A claim receipt can arrive as a JSON string under `result`, itself wrapped in the `_meter`
/// envelope; this peels both layers off.
fn unwrap_result(mut payload: Value) -> anyhow::Result<Value> {
    loop {
        match payload.get("result") {
            Some(Value::String(text)) => {
                payload = serde_json::from_str(text)
                    .with_context(|| format!("a result that is not JSON: {text}"))?;
            }
            Some(inner) if payload.get("_meter").is_some() => payload = inner.clone(),
            _ => return Ok(payload),
        }
    }
}

fn call_count(timing: &Timing) -> usize {
    timing.latencies.len()
}

// ---------------------------------------------------------------------------------------------
// The report.

fn size_label(tasks: usize) -> String {
    if tasks == 0 {
        "fresh".to_owned()
    } else {
        tasks.to_string()
    }
}

fn render_report(results: &[SizeResult], probe: &PauseProbe, options: &Options) -> String {
    let mut out = format!(
        "\nscale: stdio, embedded store, anchoring on; at most {} calls or {} s per series\n\n",
        options.calls, options.seconds
    );
    out.push_str(&format!(
        "{:<22} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}\n",
        "tool",
        "tasks",
        "calls",
        "p50 ms",
        "p99 ms",
        "calls/s",
        "2p p50",
        "2p p99",
        "2p c/s",
        "2p/1p"
    ));
    for (t, tool) in TOOLS.iter().enumerate() {
        for result in results {
            let (one, two) = (&result.one[t], &result.two[t]);
            out.push_str(&format!(
                "{:<22} {:>8} {:>7} {:>9.3} {:>9.3} {:>9.1} {:>9.3} {:>9.3} {:>9.1} {:>7.2}x\n",
                tool,
                size_label(result.tasks),
                one.latencies.len(),
                one.percentile_ms(50),
                one.percentile_ms(99),
                one.calls_per_second(),
                two.percentile_ms(50),
                two.percentile_ms(99),
                two.calls_per_second(),
                two.calls_per_second() / one.calls_per_second(),
            ));
        }
    }
    out.push_str(&format!(
        "\n{:<8} {:>8} {:>13} {:>9} {:>14} {:>9} {:>10} {:>14}\n",
        "tasks",
        "fill s",
        "cold start ms",
        "RSS MiB",
        "RSS KiB/task*",
        "peak MiB",
        "2 s later",
        "2 s KiB/task*"
    ));
    let fresh = results.first();
    for result in results {
        let per_task = |kib: u64, fresh_kib: fn(&SizeResult) -> u64| match (fresh, result.tasks) {
            (Some(fresh), tasks) if tasks > 0 => format!(
                "{:.2}",
                kib.saturating_sub(fresh_kib(fresh)) as f64 / tasks as f64
            ),
            _ => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<8} {:>8.1} {:>13.1} {:>9.1} {:>14} {:>9.1} {:>10.1} {:>14}\n",
            size_label(result.tasks),
            result.fill.as_secs_f64(),
            result.cold_start.as_secs_f64() * 1e3,
            result.rss_kib as f64 / 1024.0,
            per_task(result.rss_kib, |fresh| fresh.rss_kib),
            result.peak_rss_kib as f64 / 1024.0,
            result.settled_rss_kib as f64 / 1024.0,
            per_task(result.settled_rss_kib, |fresh| fresh.settled_rss_kib),
        ));
    }
    out.push_str(
        "* RSS above the fresh project's, per task (target: at most 4 KiB; judged on the \
         reading right after the series)\n",
    );
    if results.iter().any(|result| result.side_by_side.is_some()) {
        out.push_str(&format!(
            "\nside by side with --baseline-binary (one process each, on the same project, \
             taking turns of {SIDE_BY_SIDE_TURN} claim-and-complete pairs)\n\n",
        ));
        out.push_str(&format!(
            "{:<22} {:>8} {:>7} {:>12} {:>12} {:>14}\n",
            "tool", "tasks", "pairs", "ours p50", "base p50", "ours/baseline"
        ));
        for result in results {
            let Some(side) = &result.side_by_side else {
                continue;
            };
            for (tool, ours, base) in [
                ("bernstein_claim", &side.ours_claim, &side.baseline_claim),
                (
                    "bernstein_complete",
                    &side.ours_complete,
                    &side.baseline_complete,
                ),
            ] {
                out.push_str(&format!(
                    "{tool:<22} {:>8} {:>7} {:>12.3} {:>12.3} {:>13.2}x\n",
                    size_label(result.tasks),
                    ours.latencies.len(),
                    ours.percentile_ms(50),
                    base.percentile_ms(50),
                    base.percentile_ms(50) / ours.percentile_ms(50),
                ));
            }
        }
        out.push_str(
            "(ours/baseline: the baseline's p50 over ours; above 1 means ours is faster)\n",
        );
    }
    out.push_str(&format!(
        "\nthe disk after a pause (claims and completions are timed as separate series): one \
         append and fdatasync p50 {:.3} ms after {:.0} ms without I/O (the largest project's \
         claim p50), {:.3} ms right after it ({PAUSE_ROUNDS} rounds)\n",
        percentile_ms(&probe.after_pause, 50),
        probe.pause.as_secs_f64() * 1e3,
        percentile_ms(&probe.back_to_back, 50),
    ));
    if let (Some(fresh), Some(largest)) = (fresh, results.last())
        && largest.tasks > 0
    {
        out.push_str(&format!(
            "\nratios at {} tasks (targets: rate >= 0.67x fresh; two processes >= 0.5x one; \
             cold start <= 250 ms)\n",
            largest.tasks
        ));
        for (t, tool) in TOOLS.iter().enumerate() {
            let rate = largest.one[t].calls_per_second() / fresh.one[t].calls_per_second();
            let two = largest.two[t].calls_per_second() / largest.one[t].calls_per_second();
            out.push_str(&format!(
                "  {tool:<22} rate / fresh {rate:>6.2}x {}   two / one {two:>6.2}x {}\n",
                verdict(rate >= 2.0 / 3.0),
                verdict(two >= 0.5)
            ));
        }
        let cold = largest.cold_start.as_secs_f64() * 1e3;
        out.push_str(&format!(
            "  cold start {cold:.1} ms {}\n",
            verdict(cold <= 250.0)
        ));
        let per_task = largest.rss_kib.saturating_sub(fresh.rss_kib) as f64 / largest.tasks as f64;
        let settled = largest
            .settled_rss_kib
            .saturating_sub(fresh.settled_rss_kib) as f64
            / largest.tasks as f64;
        out.push_str(&format!(
            "  RSS {per_task:.2} KiB per task above idle {} ({settled:.2} two seconds later)\n",
            verdict(per_task <= 4.0)
        ));
    }
    out
}

fn verdict(met: bool) -> &'static str {
    if met { "(met)" } else { "(MISSED)" }
}

fn render_doc(report: &str, options: &Options, chart: &str) -> String {
    let (title, tasks, command) = match options.open {
        None => (
            "every task open (the worst case)".to_owned(),
            "one open task per task, tasks created in batches of {FILL_BATCH} through plan \
             approval"
                .replace("{FILL_BATCH}", &FILL_BATCH.to_string()),
            "cargo xtask bench scale".to_owned(),
        ),
        Some(open) => (
            format!("a project that has lived ({open} tasks open, the rest settled)"),
            format!(
                "the newest {open} tasks open and every older one settled, tasks created in \
                 batches of {FILL_BATCH} through plans, approved for the open tasks and rejected \
                 (which cancels them) for the settled ones"
            ),
            format!("cargo xtask bench scale --open {open}"),
        ),
    };
    format!(
        "## Scale: per-call cost as the project grows, {title}\n\n\
         Measured by `{command}` (issue 13). Each project is filled in-process through the \
         store and anchoring APIs the server uses (one anchored `bernstein_run` call per task; \
         {tasks}; the task log compacted), on a tmpfs, then copied to disk; the servers then \
         run on the disk copy. Every series is at most {} calls or {} s. \"2p\" is two server \
         processes on the same workdir, called alternately.\n\n\
         ![latency against project size]({chart})\n\n\
         ```text\n{}\n```\n\n\
         Reproduce: `{command}` (about 10 minutes on 2 cores; `--sizes 1000,10000` for a \
         quick run).\n",
        options.calls,
        options.seconds,
        report.trim()
    )
}

fn draw_chart(path: &Path, results: &[SizeResult]) -> anyhow::Result<()> {
    // The fresh project is drawn at 100 tasks, so it fits the logarithmic axis.
    let x = |tasks: usize| if tasks == 0 { 100.0 } else { tasks as f64 };
    let mut series = Vec::new();
    for (t, tool) in TOOLS.iter().enumerate() {
        series.push(Series {
            name: format!("{tool} p50"),
            points: results
                .iter()
                .map(|r| (x(r.tasks), r.one[t].percentile_ms(50).max(0.001)))
                .collect(),
        });
    }
    series.push(Series {
        name: "bernstein_run_status p50, two processes".to_owned(),
        points: results
            .iter()
            .map(|r| (x(r.tasks), r.two[4].percentile_ms(50).max(0.001)))
            .collect(),
    });
    bench_doc::line_chart(
        path,
        &Chart {
            title: "stdio per-call latency (p50) against project size (fresh drawn at 100)",
            x_label: "tasks in the project",
            y_label: "latency, ms",
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
    fn options_come_from_flags_or_defaults() {
        let parse = |args: &[&str]| {
            Options::parse(&args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>())
        };
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults.sizes, DEFAULT_SIZES);
        assert!(defaults.write_docs);
        let set = parse(&[
            "--sizes",
            "10,20",
            "--calls",
            "5",
            "--seconds",
            "2",
            "--open",
            "7",
            "--no-docs",
        ])
        .unwrap();
        assert_eq!(
            set,
            Options {
                sizes: vec![10, 20],
                calls: 5,
                seconds: 2,
                open: Some(7),
                write_docs: false,
                baseline: None,
            }
        );
        assert!(parse(&["--open", "0"]).is_err());
        assert!(parse(&["--sizes", "10,0"]).is_err());
        assert!(parse(&["--calls"]).is_err());
        assert!(parse(&["--fast"]).is_err());
    }

    #[test]
    fn claim_receipts_are_unwrapped_from_strings_and_the_meter() {
        let receipt = json!({"taskId": "t", "granted": true});
        let wrapped = json!({"result": json!({"result": receipt, "_meter": {}}).to_string()});
        assert_eq!(unwrap_result(wrapped).unwrap(), receipt);
        assert_eq!(unwrap_result(receipt.clone()).unwrap(), receipt);
        assert!(unwrap_result(json!({"result": "not json"})).is_err());
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let latencies: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert!((percentile_ms(&latencies, 50) - 50.0).abs() < 1e-9);
        assert!((percentile_ms(&latencies, 99) - 99.0).abs() < 1e-9);
        assert_eq!(percentile_ms(&[], 50), 0.0);
    }

    #[test]
    fn the_fill_writes_what_a_server_reads() {
        // A small fill through the real APIs: the tasks are open, the anchoring journal holds one
        // row per task and the chain verifies.
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(BENCH_KEY.trim().as_bytes().to_vec());
        fill(dir.path(), 5, 5, &key).unwrap();
        let store = EmbeddedStore::open(dir.path(), Some(key.clone())).unwrap();
        assert_eq!(store.status_summary().unwrap().open, 5);
        let journal = std::fs::read_to_string(
            dir.path()
                .join(".sdd/runs")
                .join(DEFAULT_ANCHOR_RUN_ID)
                .join("journal.jsonl"),
        )
        .unwrap();
        assert_eq!(
            journal
                .lines()
                .filter(|l| l.contains("mcp.stateless_call"))
                .count(),
            5
        );
        let report = bernstein_journal::audit::verify(&dir.path().join(".sdd/audit"), &key);
        assert!(report.ok(), "{report:?}");
        assert!(report.entries >= 5);
    }

    #[test]
    fn a_lived_in_fill_leaves_only_the_newest_tasks_open() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(BENCH_KEY.trim().as_bytes().to_vec());
        // Batches of 4: 11 tasks, the newest 5 open, so the settled part ends inside a batch
        // and the open part spans two.
        fill_in_batches(dir.path(), 11, 5, 4, &key).unwrap();
        let store = EmbeddedStore::open(dir.path(), Some(key)).unwrap();
        let summary = store.status_summary().unwrap();
        assert_eq!(summary.total, 11);
        assert_eq!(summary.open, 5);
        assert_eq!((summary.claimed, summary.done, summary.failed), (0, 0, 0));
        // The open ones are the newest five.
        let mut open: Vec<String> = store
            .list_tasks(&bernstein_tasks::backend::ListQuery::with_status(
                bernstein_tasks::TaskStatus::Open,
            ))
            .unwrap()
            .tasks
            .into_iter()
            .map(|task| task.title)
            .collect();
        open.sort();
        let mut newest: Vec<String> = (6..11)
            .map(|n| format!("scale benchmark task {n}"))
            .collect();
        newest.sort();
        assert_eq!(open, newest);
    }
}
