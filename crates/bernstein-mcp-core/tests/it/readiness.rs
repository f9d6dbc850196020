//! `Dispatcher::readiness`: ready over a usable project, and otherwise a reason that names the
//! part that is unusable (the embedded store or the task server).

use std::sync::Arc;

use bernstein_mcp_core::Dispatcher;
use bernstein_tasks::remote::{RemoteBackend, RemoteConfig};
use bernstein_tools::Backend;

use crate::support::{Project, key};

#[tokio::test]
async fn a_scratch_project_is_ready() {
    let project = Project::new();
    assert_eq!(project.dispatcher.readiness().await, Ok(()));
}

/// A task log the store refuses to open makes the server unready, and the reason blames the
/// embedded store, not a task server it does not have.
#[tokio::test]
async fn a_corrupt_task_log_makes_the_embedded_store_unready() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join(".sdd").join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::write(
        runtime.join("tasks.jsonl"),
        "{\"id\": \"x\", \"title\": 1}\n",
    )
    .unwrap();
    let dispatcher = Dispatcher::builder(dir.path())
        .audit_key(key())
        .build()
        .unwrap();
    let reason = dispatcher.readiness().await.unwrap_err();
    assert!(
        reason.starts_with("the embedded task store cannot be read: "),
        "{reason}"
    );
    assert!(reason.contains("tasks.jsonl"), "{reason}");
}

/// A task server that refuses connections makes the server unready, and the reason says the
/// task server does not answer.
#[tokio::test]
async fn a_task_server_that_does_not_answer_makes_the_server_unready() {
    // A loopback port that was just free and is closed again refuses the connection.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let remote = RemoteBackend::new(RemoteConfig::new(format!("http://127.0.0.1:{port}"))).unwrap();
    let project = Project::new();
    let dispatcher = Dispatcher::builder(project.dir.path())
        .audit_key(key())
        .backend_instance(Arc::new(Backend::remote(remote).with_audit_key(key())))
        .build()
        .unwrap();
    let reason = dispatcher.readiness().await.unwrap_err();
    assert!(
        reason.starts_with("the task server does not answer: "),
        "{reason}"
    );
}
