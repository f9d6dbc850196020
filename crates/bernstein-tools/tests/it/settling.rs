//! `Backend::settle_run` on its own: what it reports writing, the lifecycle row it journals
//! (with the failure reason only on runs that did not complete), and the seal, on a remote
//! backend (which journals every transition itself) and on the embedded store (which fills in
//! a terminal row its own journal lacks).

use std::path::Path;

use bernstein_journal::run_journal::load_run_journal;
use bernstein_protocol::pyjson::{Object, Value};
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::Backend;

use crate::common::audit_key;

/// A remote backend: settling never calls the task server, so nothing needs to listen.
fn remote() -> Backend {
    Backend::remote(RemoteBackend::new(RemoteConfig::new("http://127.0.0.1:9")).unwrap())
}

fn task_row(id: &str, status: &str, summary: &str) -> Object {
    Object::new()
        .with("id", id)
        .with("status", status)
        .with("version", 3)
        .with("result_summary", summary)
}

/// The journal rows of `id`'s run.
fn journal(root: &Path, id: &str) -> Vec<Object> {
    load_run_journal(root, &format!("task-{id}")).unwrap().rows
}

fn events(rows: &[Object]) -> Vec<&str> {
    rows.iter()
        .map(|row| row.get("event").and_then(Value::as_str).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn settling_reports_the_row_and_the_seal_it_wrote_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let failed = task_row("t-8", "failed", "the build broke");
    // Without an audit key only the journal row is written, and only the first time.
    let unkeyed = remote();
    assert!(unkeyed.settle_run(root, "t-8", &failed).await.unwrap());
    assert!(!unkeyed.settle_run(root, "t-8", &failed).await.unwrap());
    // With the key, the row is already there and only the seal is new, again only once.
    let keyed = remote().with_audit_key(audit_key());
    assert!(keyed.settle_run(root, "t-8", &failed).await.unwrap());
    assert!(!keyed.settle_run(root, "t-8", &failed).await.unwrap());
    let rows = journal(root, "t-8");
    assert_eq!(events(&rows), ["task_failed"]);
    assert_eq!(rows[0].get("status"), Some(&Value::from("failed")));
    assert_eq!(rows[0].get("reason"), Some(&Value::from("the build broke")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completion_is_journalled_without_its_summary_as_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let backend = remote();
    let done = task_row("t-9", "done", "shipped");
    assert!(backend.settle_run(root, "t-9", &done).await.unwrap());
    let rows = journal(root, "t-9");
    assert_eq!(events(&rows), ["task_completed"]);
    assert_eq!(rows[0].get("reason"), None, "{:?}", rows[0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_has_not_ended_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let backend = remote().with_audit_key(audit_key());
    let claimed = task_row("t-10", "claimed", "");
    assert!(!backend.settle_run(root, "t-10", &claimed).await.unwrap());
    assert!(journal(root, "t-10").is_empty());
}

/// The embedded store journals its own transitions, but a terminal row its journal lacks (a
/// crash between the task log and the journal) is written by the settling, then sealed.
#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_store_fills_in_a_missing_terminal_row() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let store = EmbeddedStore::open(root, Some(audit_key())).unwrap();
    let backend = Backend::embedded(store, audit_key());
    let cancelled = task_row("t-11", "cancelled", "not needed");
    assert!(backend.settle_run(root, "t-11", &cancelled).await.unwrap());
    let rows = journal(root, "t-11");
    assert_eq!(events(&rows), ["task_cancelled"]);
    assert_eq!(rows[0].get("reason"), Some(&Value::from("not needed")));
    assert!(!backend.settle_run(root, "t-11", &cancelled).await.unwrap());
}
