//! Audit-chain benchmarks, run by `cargo xtask bench` (or `cargo bench -p bernstein-journal
//! --bench audit`).
//!
//! * verify throughput on a 100 000-entry chain (entries/s), streaming;
//! * append latency with fsync (each append is durable before it returns);
//! * the cost of a run-handle poll's chain-head lookup (`audit::head_index`) on the 100 000-entry
//!   chain and on a 10-entry chain, each poll after one more anchored call, and the one-off
//!   index build per process;
//!
//! When the reference implementation is installed (`BERNSTEIN_PY` names its interpreter), the same
//! chain is verified and the same number of appends is made by Bernstein 3.23 in the same run, and
//! the ratio is printed. This is a measurement, not a test: it asserts only that what it timed
//! verified.

#![allow(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bernstein_journal::audit::{self, AuditChain, AuditEvent, Scheme, Timestamp, expected_hmac};
use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::{Dialect, Object, Value};

const CHAIN_ENTRIES: u64 = 100_000;
const APPENDS: usize = 500;
const KEY: &[u8] = b"3f1c9a7e5b2d4068a1c3e5f7092b4d6f8a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d";

fn main() {
    let scratch = tempfile::Builder::new()
        .prefix("bench-audit-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir");
    let key = AuditKey::from_master_bytes(KEY.to_vec());
    let key_file = scratch.path().join("audit.key");
    std::fs::write(&key_file, KEY).expect("write key");
    set_private(&key_file);
    let python = std::env::var("BERNSTEIN_PY")
        .ok()
        .filter(|p| Path::new(p).exists());

    println!("== audit chain benchmarks ({CHAIN_ENTRIES} entries; {APPENDS} durable appends)");
    let chain_dir = scratch.path().join("chain");
    let started = Instant::now();
    write_chain(&chain_dir, &key, CHAIN_ENTRIES);
    println!("generated chain in {:.2?}", started.elapsed());

    let ours = best_of(3, || {
        let started = Instant::now();
        let report = audit::verify(&chain_dir, &key);
        assert!(
            report.ok() && report.entries == CHAIN_ENTRIES,
            "benchmark chain must verify"
        );
        started.elapsed()
    });
    let ours_rate = CHAIN_ENTRIES as f64 / ours.as_secs_f64();
    println!("verify  bernstein-mcp : {ours_rate:>12.0} entries/s ({ours:.2?} best of 3)");
    if let Some(py) = &python {
        let reference = reference_verify(py, &chain_dir, &key_file);
        let rate = CHAIN_ENTRIES as f64 / reference.as_secs_f64();
        println!("verify  bernstein 3.23: {rate:>12.0} entries/s ({reference:.2?})");
        println!("verify  ratio         : {:>12.1}x", ours_rate / rate);
    }

    let small_dir = scratch.path().join("small");
    write_chain(&small_dir, &key, 10);
    let large = poll_cost(&chain_dir, &key, CHAIN_ENTRIES);
    let small = poll_cost(&small_dir, &key, 10);
    println!(
        "poll    head ratio    : {:>12.2}x (100 000-entry / 10-entry chain, per poll)",
        large.as_secs_f64() / small.as_secs_f64()
    );

    let append_dir = scratch.path().join("append");
    let chain = AuditChain::open(&append_dir, key.clone());
    let mut latencies = Vec::with_capacity(APPENDS);
    for n in 0..APPENDS {
        let event = AuditEvent::new(
            "task.created",
            "bench",
            "task",
            format!("t-{n}"),
            Object::new()
                .with("task_id", format!("t-{n}"))
                .with("title", "benchmark task"),
        );
        let started = Instant::now();
        chain.append(&event).expect("append");
        latencies.push(started.elapsed());
    }
    assert!(audit::verify(&append_dir, &key).ok());
    latencies.sort();
    let mean = latencies.iter().sum::<Duration>() / APPENDS as u32;
    println!(
        "append  bernstein-mcp : mean {mean:.2?}  p50 {:.2?}  p99 {:.2?}  (fsync per append)",
        latencies[APPENDS / 2],
        latencies[APPENDS * 99 / 100]
    );
    if let Some(py) = &python {
        let total = reference_append(py, &scratch.path().join("append-py"), &key_file);
        println!(
            "append  bernstein 3.23: mean {:.2?}",
            total / APPENDS as u32
        );
        println!(
            "append  ratio (reference mean / ours): {:.1}x",
            (total / APPENDS as u32).as_secs_f64() / mean.as_secs_f64()
        );
    } else {
        println!("(reference not measured: set BERNSTEIN_PY to the oracle's python to compare)");
    }
}

/// Polls a run's chain head through one index, as a server does: each poll follows one new
/// anchored call (appended untimed). Prints the one-off build and the mean poll; returns it.
fn poll_cost(dir: &Path, key: &AuditKey, entries: u64) -> Duration {
    const POLLS: u32 = 200;
    let chain = AuditChain::open(dir, key.clone());
    let mut index = audit::head_index::RunHeadIndex::new(dir);
    let started = Instant::now();
    let head = index.run_head("task-t-5").expect("index");
    let build = started.elapsed();
    assert!(!head.is_empty(), "the polled run has an entry");
    let mut total = Duration::ZERO;
    for n in 0..POLLS {
        let anchor = AuditEvent::new(
            "mcp.stateless_call",
            "mcp_stateless_core",
            "mcp_stateless_call",
            format!("span{n}"),
            Object::new()
                .with("run_id", "mcp-calls")
                .with("call_index", i64::from(n)),
        );
        chain.append(&anchor).expect("append");
        let started = Instant::now();
        let polled = index.run_head("task-t-5").expect("poll");
        total += started.elapsed();
        assert_eq!(polled, head, "anchors never move the run's head");
    }
    let mean = total / POLLS;
    println!(
        "poll    {entries:>6}-entry chain: mean {mean:.2?} per poll ({POLLS} polls, one anchor \
         before each); index build {build:.2?} once per process"
    );
    mean
}

fn best_of(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..n).map(|_| f()).min().unwrap_or_default()
}

/// Writes a valid scheme-2 chain quickly: one day segment per 10 000 entries, no fsync (only the
/// verifier is being measured here).
fn write_chain(dir: &Path, key: &AuditKey, entries: u64) {
    std::fs::create_dir_all(dir).expect("chain dir");
    let mut prev = audit::GENESIS_HMAC.to_owned();
    let mut file: Option<std::io::BufWriter<std::fs::File>> = None;
    for n in 0..entries {
        if n % 10_000 == 0 {
            let day = Timestamp::from_unix_micros(
                1_780_000_000_000_000 + (n / 10_000) as i64 * 86_400_000_000,
            )
            .expect("timestamp");
            let f = std::fs::File::create(dir.join(day.segment_name())).expect("segment");
            if let Some(mut old) = file.replace(std::io::BufWriter::new(f)) {
                old.flush().expect("flush");
            }
        }
        let ts = Timestamp::from_unix_micros(
            1_780_000_000_000_000 + (n / 10_000) as i64 * 86_400_000_000 + n as i64,
        )
        .expect("timestamp");
        let details = Object::new()
            .with("prev_chain_digest", prev.clone())
            .with("task_id", format!("t-{n}"))
            .with("cost_usd", 0.125 * n as f64)
            .with("note", "caf\u{e9} \u{1d11e}");
        let body = Object::new()
            .with("actor", "bench")
            .with("details", details)
            .with("event_type", "task.created")
            .with("prev_hmac", prev.clone())
            .with("resource_id", format!("t-{n}"))
            .with("resource_type", "task")
            .with("scheme", 2)
            .with("timestamp", ts.to_record_string());
        let hmac = expected_hmac(key, Scheme::V2, &prev, &body);
        let line = Value::Object(body.with("hmac", hmac.clone())).dumps(Dialect::PY_SPACED);
        let out = file.as_mut().expect("segment open");
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .expect("write");
        prev = hmac;
    }
    if let Some(mut f) = file {
        f.flush().expect("flush");
    }
}

fn reference_verify(python: &str, dir: &Path, key_file: &Path) -> Duration {
    let script = r#"
import sys, time
from pathlib import Path
from bernstein.core.security.audit import AuditLog
log = AuditLog(Path(sys.argv[1]), key=Path(sys.argv[2]).read_bytes().strip())
t = time.perf_counter(); ok, errors = log.verify(); dt = time.perf_counter() - t
assert ok, errors[:3]
print(dt)
"#;
    run_python(python, script, &[dir, key_file])
}

fn reference_append(python: &str, dir: &Path, key_file: &Path) -> Duration {
    let script = format!(
        r#"
import sys, time
from pathlib import Path
from bernstein.core.security.audit_chain import AuditChainStore
store = AuditChainStore(Path(sys.argv[1]), key=Path(sys.argv[2]).read_bytes().strip())
t = time.perf_counter()
for n in range({APPENDS}):
    store.log_with_prev_digest(event_type="task.created", actor="bench", resource_type="task",
                               resource_id=f"t-{{n}}", details={{"task_id": f"t-{{n}}", "title": "benchmark task"}})
print(time.perf_counter() - t)
"#
    );
    run_python(python, &script, &[dir, key_file])
}

fn run_python(python: &str, script: &str, args: &[&Path]) -> Duration {
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run the reference");
    assert!(
        output.status.success(),
        "reference failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seconds: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("seconds");
    Duration::from_secs_f64(seconds)
}

fn set_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}
