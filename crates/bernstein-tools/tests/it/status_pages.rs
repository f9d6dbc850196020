//! `bernstein_status` with a status filter lists its tasks a page at a time: `limit` rows, then
//! `next_cursor` continues after the last one listed, and an empty cursor starts from the top.

use serde_json::{Value, json};

use crate::common::{Project, config, payload};

/// Calls `bernstein_status` with `arguments` and checks the rows it lists and its
/// `next_cursor`, which is absent when the list ends on this page.
async fn check(project: &Project, arguments: Value, tasks: Vec<Value>, next_cursor: Option<&str>) {
    let outcome = project.call("bernstein_status", arguments.clone()).await;
    let body = payload(&outcome);
    assert_eq!(body["tasks"], json!(tasks), "{arguments}: {}", outcome.text);
    assert_eq!(
        body.get("next_cursor"),
        next_cursor.map(|c| json!(c)).as_ref(),
        "{arguments}: {}",
        outcome.text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_list_continues_after_the_cursor_it_was_given() {
    let project = Project::new(config(false));
    let mut ids = Vec::new();
    for title in ["first", "second", "third"] {
        let created = project
            .call(
                "bernstein_create_task",
                json!({"title": title, "description": "d", "role": "qa"}),
            )
            .await;
        ids.push(payload(&created)["id"].as_str().unwrap().to_owned());
    }
    let row = |index: usize, title: &str| {
        let id = &ids[index];
        json!({"id": id, "title": title, "role": "qa", "status": "open"})
    };
    check(
        &project,
        json!({"status": "open", "limit": 2}),
        vec![row(0, "first"), row(1, "second")],
        Some(&ids[1]),
    )
    .await;
    check(
        &project,
        json!({"status": "open", "limit": 2, "cursor": ids[1]}),
        vec![row(2, "third")],
        None,
    )
    .await;
    check(
        &project,
        json!({"status": "open", "limit": 2, "cursor": ""}),
        vec![row(0, "first"), row(1, "second")],
        Some(&ids[1]),
    )
    .await;
    check(
        &project,
        json!({"status": "open"}),
        vec![row(0, "first"), row(1, "second"), row(2, "third")],
        None,
    )
    .await;
}
