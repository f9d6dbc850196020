//! What the real binary keeps resident after a call that needed a lot of memory for a moment.

use std::time::{Duration, Instant};

use bernstein_journal::key::AuditKey;
use bernstein_tasks::NewTask;
use bernstein_tasks::embedded::EmbeddedStore;
use serde_json::json;

use crate::faults::{Client, Project};

/// Open tasks in the project: enough that a claim, whose answer carries every row, needs tens
/// of megabytes while it runs.
const OPEN_TASKS: usize = 8_000;
/// Tasks per plan while filling (one store transaction each).
const FILL_BATCH: usize = 1_000;
/// How much more than before the claims the server may keep once they are answered.
const KEPT_AT_MOST_KIB: u64 = 16 * 1024;
/// How long the allocator has to give the claims' memory back.
const GIVE_BACK_WITHIN: Duration = Duration::from_secs(10);

/// `VmRSS` (resident now) of `pid`, in KiB.
fn resident_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` field in KiB: `VmRSS:` or `VmHWM:` (the most it was ever resident).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// Two claims on a backlog of 8,000 open tasks each build and answer every row (a few tens
/// of megabytes), then free it all while other memory stays allocated after it. The server
/// must give that memory back to the system and not sit on it until it exits: glibc's
/// allocator kept it (about 1 GiB after two claims on 100,000 open rows, in every later
/// `VmRSS`).
#[test]
fn memory_a_large_claim_needed_is_given_back_to_the_system() {
    let project = Project::new();
    {
        let key = AuditKey::from_file(&project.key()).unwrap();
        let store = EmbeddedStore::open(project.root(), Some(key)).unwrap();
        for batch in 0..OPEN_TASKS / FILL_BATCH {
            let tasks = (0..FILL_BATCH)
                .map(|n| {
                    let goal = format!("memory test task {batch}-{n}");
                    NewTask::new(goal.clone(), goal)
                })
                .collect();
            let plan = store.create_plan(&format!("batch {batch}"), tasks).unwrap();
            store.approve_plan(&plan.content.id, "memory test").unwrap();
        }
    }
    let mut client = Client::start(&project);
    let pid = client.server.pid();
    client.call("bernstein_status", json!({})).unwrap();
    let before = resident_kib(pid);

    for worker in ["w1", "w2"] {
        let claim = client
            .call("bernstein_claim", json!({"claimer_id": worker}))
            .unwrap();
        assert_eq!(
            claim["result"]["granted"], true,
            "{}",
            claim["result"]["taskId"]
        );
        let rows = claim["result"]["backlogSnapshot"].as_array().unwrap().len();
        assert!(rows >= OPEN_TASKS, "the answer carried {rows} rows");
    }
    // The claims did need the memory, or this test shows nothing.
    let peak = status_kib(pid, "VmHWM:");
    assert!(
        peak > before + 2 * KEPT_AT_MOST_KIB,
        "resident {before} KiB before the claims, at most {peak} KiB after them"
    );

    let deadline = Instant::now() + GIVE_BACK_WITHIN;
    let mut now = resident_kib(pid);
    while now > before + KEPT_AT_MOST_KIB && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        now = resident_kib(pid);
    }
    assert!(
        now <= before + KEPT_AT_MOST_KIB,
        "resident {before} KiB before two claims, {peak} KiB after them, and still {now} KiB \
         {GIVE_BACK_WITHIN:?} later"
    );
    client.server.stop();
}
