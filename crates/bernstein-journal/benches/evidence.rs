//! Worker-loop evidence benchmarks, run by `cargo xtask bench evidence` (or `cargo bench -p
//! bernstein-journal --bench evidence`):
//!
//! * claims/s: a signed claim receipt per claim, with the `task.claim_receipt` audit append and
//!   the backlog rewrite, all durable, as `bernstein_claim` does on the embedded store;
//! * mailbox posts/s: redaction, HMAC chaining, Ed25519 signing and the fsynced journal append,
//!   then the `task.mailbox_message` audit mirror, as `bernstein_post_message` does.
//!
//! A measurement, not a test: it asserts only that what it timed verifies.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::time::{Duration, Instant};

use bernstein_journal::audit::{self, AuditChain};
use bernstein_journal::claim::{
    BacklogEntry, ClaimFilter, ClaimRequest, ClaimTime, backlog_path, claim_in_project,
    write_backlog,
};
use bernstein_journal::dlp::RedactionContext;
use bernstein_journal::identity::SigningIdentity;
use bernstein_journal::key::AuditKey;
use bernstein_journal::mailbox::{Mailbox, NewMessage};

const CLAIMS: usize = 200;
const POSTS: usize = 400;
const KEY: &[u8] = b"3f1c9a7e5b2d4068a1c3e5f7092b4d6f8a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d";

fn main() {
    let scratch = tempfile::Builder::new()
        .prefix("bench-evidence-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir");
    let key = AuditKey::from_master_bytes(KEY.to_vec());
    println!("== worker-loop evidence benchmarks ({CLAIMS} claims, {POSTS} mailbox posts)");

    let root = scratch.path().join("claims");
    let rows: Vec<BacklogEntry> = (0..CLAIMS)
        .map(|n| {
            let mut row = BacklogEntry::new(format!("t-{n}"));
            row.role = Some("backend".to_owned());
            row
        })
        .collect();
    std::fs::create_dir_all(root.join(".sdd/runtime")).expect("project");
    write_backlog(&backlog_path(&root), &rows).expect("backlog");
    let request = ClaimRequest::new(
        "worker-a",
        ClaimFilter {
            role: Some("backend".to_owned()),
            ..ClaimFilter::default()
        },
    );
    let started = Instant::now();
    for _ in 0..CLAIMS {
        let outcome =
            claim_in_project(&root, key.clone(), &request, ClaimTime::now()).expect("claim");
        assert!(outcome.granted(), "every claim finds an open row");
    }
    report("claims", CLAIMS, started.elapsed());
    assert!(audit::verify(&root.join(".sdd/audit"), &key).ok());

    let root = scratch.path().join("mailbox");
    let sdd = root.join(".sdd");
    let signer = SigningIdentity::load_or_create(&sdd.join("identity"), "mailbox_signing")
        .expect("identity");
    let mailbox = Mailbox::open(&sdd, key.master(), signer);
    let chain = AuditChain::open(sdd.join("audit"), key.clone());
    let body = "progress: 3 of 5 files migrated; see export API_TOKEN=abc for the staging run";
    let started = Instant::now();
    for n in 0..POSTS {
        // Spread posts over tasks so the 128-pending-per-task cap is never the limit.
        let task = format!("t-{}", n % 16);
        let message = NewMessage::new(
            &task,
            "worker-a",
            "finding",
            body,
            1_780_000_000.0 + n as f64,
        );
        let entry = mailbox
            .post(&message, &RedactionContext::default())
            .expect("post");
        chain.append(&entry.audit_mirror_event()).expect("mirror");
    }
    report("mailbox posts", POSTS, started.elapsed());
    assert!(mailbox.verify().expect("verify").ok());
}

fn report(what: &str, n: usize, elapsed: Duration) {
    println!(
        "{what:<14}: {:>8.1} /s  (mean {:.2?}, durable)",
        n as f64 / elapsed.as_secs_f64(),
        elapsed / n as u32
    );
}
