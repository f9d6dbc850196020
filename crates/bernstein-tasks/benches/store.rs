//! Throughput of the embedded task store with durability on: every operation is fsynced (task
//! log, backlog rewrite, run-journal row, audit event) before it returns.
//!
//! `cargo bench -p bernstein-tasks --bench store [-- <tasks>]` creates `<tasks>` tasks (300 by
//! default), claims each, then completes each, in a fresh project in the system temporary
//! directory, once with an audit key (every mutation also appends to the audit chain) and once
//! without, and prints operations per second for each phase.

use std::io::Write;
use std::time::{Duration, Instant};

use bernstein_journal::key::AuditKey;
use bernstein_tasks::backend::ClaimRequest;
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tasks::{Error, NewTask, TaskId};

fn rate(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

fn phase(
    out: &mut impl Write,
    label: &str,
    ids: &[TaskId],
    mut op: impl FnMut(&TaskId) -> Result<(), Error>,
) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    for id in ids {
        op(id)?;
    }
    let elapsed = start.elapsed();
    writeln!(
        out,
        "  {label:<9} {:>6} ops in {:>7.3} s = {:>8.1} ops/s ({:.2} ms/op)",
        ids.len(),
        elapsed.as_secs_f64(),
        rate(ids.len(), elapsed),
        elapsed.as_secs_f64() * 1000.0 / ids.len() as f64
    )?;
    Ok(())
}

fn run(
    out: &mut impl Write,
    tasks: usize,
    key: Option<AuditKey>,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(dir.path(), key)?;
    let start = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for n in 0..tasks {
        ids.push(
            store
                .create_task(NewTask::new(format!("bench {n}"), "benchmark task"))?
                .id,
        );
    }
    let elapsed = start.elapsed();
    writeln!(
        out,
        "  {:<9} {:>6} ops in {:>7.3} s = {:>8.1} ops/s ({:.2} ms/op)",
        "create",
        tasks,
        elapsed.as_secs_f64(),
        rate(tasks, elapsed),
        elapsed.as_secs_f64() * 1000.0 / tasks as f64
    )?;
    let claim = ClaimRequest {
        claimer: Some("bench-worker".into()),
        ..ClaimRequest::default()
    };
    phase(out, "claim", &ids, |id| {
        store.claim_task(id, &claim).map(|_| ())
    })?;
    phase(out, "complete", &ids, |id| {
        store.complete_task(id, "benchmarked").map(|_| ())
    })?;
    let log = std::fs::metadata(store.task_log_path())?.len();
    writeln!(
        out,
        "  task log: {log} bytes for {} records; evidence failures: {}",
        3 * tasks,
        store.evidence_failures().len()
    )?;
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tasks = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse::<usize>().ok())
        .unwrap_or(300)
        .max(1);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "embedded store, durable (fsync on), {tasks} tasks, temp dir {}",
        std::env::temp_dir().display()
    )?;
    writeln!(out, "with audit chain:")?;
    run(
        &mut out,
        tasks,
        Some(AuditKey::from_master_bytes(b"bench key".to_vec())),
    )?;
    writeln!(out, "without audit chain:")?;
    run(&mut out, tasks, None)?;
    Ok(())
}
