//! Workdir confinement as the HTTP transport turns it on: a `workdir` argument of the tools and
//! aliases that take one must resolve to a directory inside an allowed root, and anything else is
//! refused with the confinement hint before the tool runs.

use std::path::Path;
use std::sync::Arc;

use bernstein_tools::ToolContext;
use serde_json::{Value, json};

use crate::common::{Project, config, payload};

/// The hint every confinement refusal carries.
const HINT: &str = "workdir must be the served project root, a directory inside it, or a root the operator allowed";

/// A context of `project` confined to its own root.
fn confined(project: &Project) -> ToolContext {
    let mut ctx = project.ctx.clone();
    let root = std::fs::canonicalize(project.root()).unwrap();
    ctx.workdir_roots = Some(Arc::from(vec![root]));
    ctx
}

/// Calls `name` with `arguments` under confinement and checks whether it was refused for
/// `workdir`: a refusal is the generic error naming the workdir as Python's `repr` prints it.
async fn check(project: &Project, name: &str, arguments: Value, refused_for: Option<&str>) {
    let outcome = project
        .call_with(&confined(project), name, arguments.clone())
        .await;
    let body = payload(&outcome);
    // An alias answers its payload inside `{"result": ...}`.
    let body = body.get("result").cloned().unwrap_or(body);
    match refused_for {
        Some(workdir) => {
            let error = format!("workdir '{workdir}' is outside the roots this server may serve");
            assert_eq!(
                body,
                json!({"error": error, "hint": HINT}),
                "{name} {arguments}: {}",
                outcome.text
            );
            assert!(outcome.is_error, "{name} {arguments}: {}", outcome.text);
        }
        None => assert_ne!(
            body.get("hint"),
            Some(&json!(HINT)),
            "{name} {arguments}: {}",
            outcome.text
        ),
    }
}

fn text(path: &Path) -> String {
    path.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workdir_outside_the_allowed_roots_is_refused_and_one_inside_is_served() {
    let project = Project::new(config(false));
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = text(elsewhere.path());
    std::fs::create_dir(project.root().join("sub")).unwrap();
    std::fs::write(project.root().join("notes.txt"), "not a directory").unwrap();

    // The default workdir, the root itself and a directory inside it are served.
    for workdir in [None, Some("."), Some("sub")] {
        let mut arguments = json!({"run_id": "task-absent"});
        if let Some(workdir) = workdir {
            arguments["workdir"] = json!(workdir);
        }
        check(&project, "bernstein_run_status", arguments.clone(), None).await;
        check(&project, "bernstein_task_handle", arguments, None).await;
    }
    // A directory outside every root, and a file inside the root, are refused, through the
    // tool and through an alias alike.
    for workdir in [outside.as_str(), "notes.txt", "missing"] {
        let arguments = json!({"run_id": "task-absent", "workdir": workdir});
        check(
            &project,
            "bernstein_run_status",
            arguments.clone(),
            Some(workdir),
        )
        .await;
        check(&project, "bernstein_task_handle", arguments, Some(workdir)).await;
    }
    check(
        &project,
        "bernstein_shutdown_orchestrator",
        json!({"workdir": outside}),
        Some(&outside),
    )
    .await;
    // The refused shutdown wrote nothing into the directory it named.
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}
