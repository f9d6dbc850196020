//! Memory and cold start of the embedded task store against the project's size.
//!
//! `cargo run --release -p bernstein-tasks --example store_scale -- 10000 100000` fills a fresh
//! project (in the system temporary directory, no audit key) with each number of tasks, through
//! [`EmbeddedStore::create_tasks`] in transactions of 1,000, then starts a fresh process that
//! opens the store and prints:
//!
//! * the open time (the cold start: one streaming pass over `tasks.jsonl` building the index);
//! * the resident set (`VmRSS` of `/proc/self/status`) before and after the open, and the
//!   difference per task (the index; records stay in the log);
//! * the time of a status summary and of a `get_task` (one record read back from the log).
//!
//! It also prints the filling process's RSS growth per task. With `STORE_SCALE_KEEP` set the
//! projects are kept (their paths printed) for profiling `store_scale --open <dir>`. Linux only
//! (`/proc`).

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use bernstein_tasks::NewTask;
use bernstein_tasks::embedded::EmbeddedStore;

/// Resident set size in KiB, from `/proc/self/status`.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn open_and_measure(dir: &str) -> Result<(), Box<dyn std::error::Error>> {
    let before = rss_kib();
    let start = Instant::now();
    let store = EmbeddedStore::open(dir, None)?;
    let open = start.elapsed();
    let after = rss_kib();
    let start = Instant::now();
    let summary = store.status_summary()?;
    let status = start.elapsed();
    let first = store
        .list_tasks(&bernstein_tasks::backend::ListQuery {
            limit: Some(1),
            ..bernstein_tasks::backend::ListQuery::all()
        })?
        .tasks;
    let start = Instant::now();
    if let Some(task) = first.first() {
        store.get_task(&task.id)?;
    }
    let get = start.elapsed();
    let tasks = summary.total.max(1);
    let log = std::fs::metadata(store.task_log_path())?.len();
    writeln!(
        std::io::stdout(),
        "  open (cold start): {:.1} ms for {} tasks, {:.1} MB of log",
        open.as_secs_f64() * 1000.0,
        summary.total,
        log as f64 / 1e6
    )?;
    writeln!(
        std::io::stdout(),
        "  RSS: {before} KiB before open, {after} KiB after: {:.0} bytes per task",
        (after.saturating_sub(before) * 1024) as f64 / tasks as f64
    )?;
    writeln!(
        std::io::stdout(),
        "  status summary {:.3} ms, get_task {:.3} ms",
        status.as_secs_f64() * 1000.0,
        get.as_secs_f64() * 1000.0
    )?;
    Ok(())
}

fn fill(tasks: usize) -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path(), None)?;
    let before = rss_kib();
    let start = Instant::now();
    let mut left = tasks;
    let mut n = 0usize;
    while left > 0 {
        let batch = left.min(1000);
        let requests = (0..batch)
            .map(|i| {
                NewTask::new(
                    format!("scale task {}", n + i),
                    "a task of the store scale measurement",
                )
            })
            .collect();
        store.create_tasks(requests)?;
        n += batch;
        left -= batch;
    }
    let after = rss_kib();
    writeln!(
        std::io::stdout(),
        "{tasks} tasks: filled in {:.1} s; the filling process grew by {:.0} bytes per task",
        start.elapsed().as_secs_f64(),
        (after.saturating_sub(before) * 1024) as f64 / tasks as f64
    )?;
    Ok(dir)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, dir] = args.as_slice()
        && flag == "--open"
    {
        return open_and_measure(dir);
    }
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![10_000, 100_000]
    } else {
        sizes
    };
    for tasks in sizes {
        let dir = fill(tasks)?;
        let status = Command::new(std::env::current_exe()?)
            .arg("--open")
            .arg(dir.path())
            .status()?;
        if !status.success() {
            return Err(format!("the measuring process failed: {status}").into());
        }
        if std::env::var_os("STORE_SCALE_KEEP").is_some() {
            // For profiling the open alone: `store_scale --open <dir>`.
            writeln!(std::io::stdout(), "  kept {}", dir.keep().display())?;
        }
    }
    Ok(())
}
