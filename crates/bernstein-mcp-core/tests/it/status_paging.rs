//! `bernstein_status` with a status filter lists a bounded page: at most `limit` tasks (default
//! and maximum 500), and a `next_cursor` that continues the list when more remain. An answer
//! that fits one page carries no cursor, as before.

use serde_json::{Value, json};

use crate::support::{Project, payload};

async fn status(project: &Project, args: Value) -> Value {
    payload(&project.call("bernstein_status", args).await)
}

fn ids(page: &Value) -> Vec<String> {
    page["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no task list: {page}"))
        .iter()
        .map(|task| task["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_filtered_detailed_status_is_paged_by_limit_and_cursor() {
    let project = Project::new();
    let mut created = Vec::new();
    for n in 0..7 {
        let run = payload(
            &project
                .call("bernstein_run", json!({"goal": format!("task {n}")}))
                .await,
        );
        created.push(run["task_id"].as_str().unwrap().to_owned());
    }

    let whole = status(&project, json!({"status": "open", "detail": true})).await;
    assert_eq!(ids(&whole), created);
    assert!(whole.get("next_cursor").is_none(), "{whole}");

    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"status": "open", "detail": true, "limit": 3});
        if let Some(cursor) = &cursor {
            args["cursor"] = json!(cursor);
        }
        let page = status(&project, args).await;
        let page_ids = ids(&page);
        assert!(page_ids.len() <= 3, "{page}");
        // Full rows under detail=true, not the compact four fields.
        assert!(page["tasks"][0].get("description").is_some(), "{page}");
        listed.extend(page_ids);
        pages += 1;
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 10, "the cursor does not advance: {page}");
    }
    assert_eq!(pages, 3);
    assert_eq!(listed, created);

    // A cursor naming no listed task is refused, not read as "from the start".
    let unknown = status(
        &project,
        json!({"status": "open", "limit": 3, "cursor": "no-such-task"}),
    )
    .await;
    assert!(
        unknown.get("error").is_some() && unknown.get("tasks").is_none(),
        "{unknown}"
    );
}
