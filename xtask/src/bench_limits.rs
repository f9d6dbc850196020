//! The physical limits of `cargo xtask bench`, measured in the same run as the servers:
//!
//! * `durable`: the latency of one `write` + `fdatasync` of a journal-sized line in the on-disk
//!   scratch directory, and the call rate it implies for a durable sequential call (one bare
//!   rmcp call plus two fdatasyncs: the anchoring journal row and the audit entry); and, timed
//!   in alternation with it, two such appends to two files side by side, which is how an
//!   anchored call makes its row and its entry durable;
//! * `verify`: `audit verify` on one 100 000-entry chain by ours (the release binary's
//!   `audit verify`, process start included), by the
//!   reference's `AuditLog.verify` (when installed), and the raw HMAC-SHA256 limit over the same
//!   lines with `ring`, on one core and on every core;
//! * `poll`: the cost of one run-handle poll's chain-head lookup on a 10-entry and on a
//!   100 000-entry chain, each poll after one more anchored call.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use bernstein_journal::audit::{self, AuditChain, AuditEvent, Scheme, Timestamp, expected_hmac};
use bernstein_journal::key::AuditKey;
use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};

/// Entries of the verify chain.
pub(crate) const CHAIN_ENTRIES: u64 = 100_000;
/// fdatasyncs timed.
const SYNCS: usize = 300;
/// Polls timed per chain.
const POLLS: u32 = 200;

/// The fdatasync latency of the disk under `dir`.
#[derive(Debug, Clone)]
pub(crate) struct SyncLatency {
    pub(crate) latencies: Vec<Duration>,
}

impl SyncLatency {
    pub(crate) fn mean(&self) -> Duration {
        self.latencies.iter().sum::<Duration>() / self.latencies.len().max(1) as u32
    }
}

/// What the disk under the scratch directory takes to make an anchored call durable, timed in
/// alternation so that both come from the same minutes of the machine.
#[derive(Debug, Clone)]
pub(crate) struct DurableLatency {
    /// One append and fdatasync of one file.
    pub(crate) one: SyncLatency,
    /// Two appends and fdatasyncs of two files side by side, the second on a helper thread, as
    /// an anchored call makes its journal row and its audit entry durable: the floor of that
    /// call on this disk, which a disk that serves two fdatasyncs no faster together than one
    /// after the other puts at two single latencies.
    pub(crate) pair: SyncLatency,
}

/// A journal-sized line for the disk probes: 299 bytes and its newline.
pub(crate) fn probe_line() -> [u8; 300] {
    let mut line = [b'x'; 300];
    line[299] = b'\n';
    line
}

/// Appends `line` to `file` and fdatasyncs it, as the anchoring journal appends a row; returns
/// the time both took.
pub(crate) fn timed_durable_append(
    file: &mut std::fs::File,
    line: &[u8],
) -> std::io::Result<Duration> {
    let started = Instant::now();
    file.write_all(line)?;
    file.sync_data()?;
    Ok(started.elapsed())
}

/// Appends a 300-byte line and fdatasyncs it, [`SYNCS`] times, as the anchoring journal does;
/// each time also times a pair of such appends to two files side by side.
pub(crate) fn measure_fdatasync(dir: &Path) -> anyhow::Result<DurableLatency> {
    let open = |name: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(name))
    };
    let mut single = open("fdatasync-probe.jsonl")?;
    let mut row = open("fdatasync-pair-row.jsonl")?;
    let entry = open("fdatasync-pair-entry.jsonl")?;
    let line = probe_line();
    let (to_helper, helper_work) = std::sync::mpsc::channel::<()>();
    let (helper_done, from_helper) = std::sync::mpsc::channel::<std::io::Result<()>>();
    let mut one = Vec::with_capacity(SYNCS);
    let mut pair = Vec::with_capacity(SYNCS);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let mut entry = entry;
        scope.spawn(move || {
            for () in helper_work {
                let synced = entry.write_all(&line).and_then(|()| entry.sync_data());
                if helper_done.send(synced).is_err() {
                    return;
                }
            }
        });
        for _ in 0..SYNCS {
            one.push(timed_durable_append(&mut single, &line)?);

            let started = Instant::now();
            to_helper.send(())?;
            row.write_all(&line)?;
            row.sync_data()?;
            from_helper.recv()??;
            pair.push(started.elapsed());
        }
        // Closing the channel ends the helper's loop, so the scope can join it.
        drop(to_helper);
        Ok(())
    })?;
    for name in [
        "fdatasync-probe.jsonl",
        "fdatasync-pair-row.jsonl",
        "fdatasync-pair-entry.jsonl",
    ] {
        std::fs::remove_file(dir.join(name))?;
    }
    Ok(DurableLatency {
        one: SyncLatency { latencies: one },
        pair: SyncLatency { latencies: pair },
    })
}

/// Verify rates over one chain, entries per second.
#[derive(Debug, Clone)]
pub(crate) struct VerifyRates {
    pub(crate) ours: f64,
    /// The baseline binary's rate on the same chain, timed in the same rounds as ours.
    pub(crate) baseline: Option<f64>,
    pub(crate) reference: Option<f64>,
    pub(crate) hmac_one_core: f64,
    pub(crate) hmac_all_cores: f64,
    pub(crate) cores: usize,
    pub(crate) mean_line_bytes: f64,
}

/// Rounds of `audit verify` per binary; the best round of each is reported.
pub(crate) const VERIFY_ROUNDS: usize = 3;

/// Writes a [`CHAIN_ENTRIES`]-entry chain into a project under `dir` and verifies it every way.
/// Ours is the release binary `ours` running `audit verify`, timed whole (process start
/// included): xtask itself is a debug build, so verifying in-process would time unoptimised
/// code. A `baseline` binary (another build) is timed the same way, alternating with ours round
/// by round, so the two rates come from the same minutes of the machine.
pub(crate) fn measure_verify(
    dir: &Path,
    key: &AuditKey,
    key_file: &Path,
    python: Option<&Path>,
    ours_binary: &Path,
    baseline: Option<&Path>,
) -> anyhow::Result<VerifyRates> {
    let project = dir.join("verify-project");
    let chain = project.join(".sdd/audit");
    write_chain(&chain, key, CHAIN_ENTRIES)?;
    let lines = chain_lines(&chain)?;
    ensure!(
        lines.len() as u64 == CHAIN_ENTRIES,
        "the chain was not written whole"
    );
    let rate = |elapsed: Duration| CHAIN_ENTRIES as f64 / elapsed.as_secs_f64();
    let time_verify = |binary: &Path| -> anyhow::Result<Duration> {
        let started = Instant::now();
        let output = Command::new(binary)
            .args(["audit", "verify", "--json", "--workdir"])
            .arg(&project)
            .arg("--key-file")
            .arg(key_file)
            .output()
            .with_context(|| format!("run {} audit verify", binary.display()))?;
        let elapsed = started.elapsed();
        let report: serde_json::Value = serde_json::from_slice(&output.stdout)
            .context("audit verify --json printed no JSON")?;
        ensure!(
            output.status.success() && report["entries"] == CHAIN_ENTRIES,
            "the benchmark chain must verify under {}: {report}",
            binary.display()
        );
        Ok(elapsed)
    };
    let mut ours = Duration::MAX;
    let mut baseline_best = baseline.map(|_| Duration::MAX);
    for _ in 0..VERIFY_ROUNDS {
        ours = ours.min(time_verify(ours_binary)?);
        if let (Some(binary), Some(best)) = (baseline, baseline_best.as_mut()) {
            *best = (*best).min(time_verify(binary)?);
        }
    }
    let reference = match python {
        Some(py) => Some(rate(reference_verify(py, &chain, key_file)?)),
        None => None,
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let hmac_key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.master());
    let one = best_of(3, || Ok(hmac_lines(&hmac_key, &lines, 1)))?;
    let all = best_of(3, || Ok(hmac_lines(&hmac_key, &lines, cores)))?;
    let mean_line_bytes =
        lines.iter().map(Vec::len).sum::<usize>() as f64 / lines.len().max(1) as f64;
    Ok(VerifyRates {
        ours: rate(ours),
        baseline: baseline_best.map(rate),
        reference,
        hmac_one_core: rate(one),
        hmac_all_cores: rate(all),
        cores,
        mean_line_bytes,
    })
}

/// The time to HMAC every line once, split over `threads` threads.
fn hmac_lines(key: &ring::hmac::Key, lines: &[Vec<u8>], threads: usize) -> Duration {
    let started = Instant::now();
    let chunk = lines.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for part in lines.chunks(chunk) {
            scope.spawn(move || {
                let mut last = 0u8;
                for line in part {
                    last ^= ring::hmac::sign(key, line).as_ref()[0];
                }
                std::hint::black_box(last);
            });
        }
    });
    started.elapsed()
}

fn chain_lines(dir: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    segments.sort();
    let mut lines = Vec::new();
    for segment in segments {
        let bytes = std::fs::read(&segment)?;
        lines.extend(
            bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec),
        );
    }
    Ok(lines)
}

fn best_of(n: usize, mut f: impl FnMut() -> anyhow::Result<Duration>) -> anyhow::Result<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..n {
        best = best.min(f()?);
    }
    Ok(best)
}

/// Writes a valid scheme-2 chain quickly: one day segment per 10 000 entries, no fsync (only the
/// verifiers are measured on it).
pub(crate) fn write_chain(dir: &Path, key: &AuditKey, entries: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut prev = audit::GENESIS_HMAC.to_owned();
    let mut file: Option<std::io::BufWriter<std::fs::File>> = None;
    let base = 1_780_000_000_000_000_i64;
    for n in 0..entries {
        let day = (n / 10_000) as i64 * 86_400_000_000;
        if n % 10_000 == 0 {
            let stamp = Timestamp::from_unix_micros(base + day).context("timestamp")?;
            let segment = std::fs::File::create(dir.join(stamp.segment_name()))?;
            if let Some(mut old) = file.replace(std::io::BufWriter::new(segment)) {
                old.flush()?;
            }
        }
        let stamp = Timestamp::from_unix_micros(base + day + n as i64).context("timestamp")?;
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
            .with("timestamp", stamp.to_record_string());
        let hmac = expected_hmac(key, Scheme::V2, &prev, &body);
        let line = PyValue::Object(body.with("hmac", hmac.clone())).dumps(Dialect::PY_SPACED);
        let out = file.as_mut().context("no segment open")?;
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        prev = hmac;
    }
    if let Some(mut f) = file {
        f.flush()?;
    }
    Ok(())
}

fn reference_verify(python: &Path, dir: &Path, key_file: &Path) -> anyhow::Result<Duration> {
    let script = r#"
import sys, time
from pathlib import Path
from bernstein.core.security.audit import AuditLog
log = AuditLog(Path(sys.argv[1]), key=Path(sys.argv[2]).read_bytes().strip())
t = time.perf_counter(); ok, errors = log.verify(); dt = time.perf_counter() - t
assert ok, errors[:3]
print(dt)
"#;
    let output = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(dir)
        .arg(key_file)
        .output()
        .context("run the reference's AuditLog.verify")?;
    ensure!(
        output.status.success(),
        "the reference's verify failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seconds: f64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .context("the reference printed no duration")?;
    Ok(Duration::from_secs_f64(seconds))
}

/// The mean cost of one poll's chain-head lookup on a chain of `entries` entries written in
/// `dir`: each poll follows one more anchored call.
pub(crate) fn measure_poll(dir: &Path, key: &AuditKey, entries: u64) -> anyhow::Result<Duration> {
    let chain_dir = dir.join(format!("poll-chain-{entries}"));
    write_chain(&chain_dir, key, entries)?;
    let chain = AuditChain::open(&chain_dir, key.clone());
    let mut index = audit::head_index::RunHeadIndex::new(&chain_dir);
    // `t-5` is the resource of entry 5, whose run is `task-t-5`.
    let head = index.run_head("task-t-5")?;
    ensure!(!head.is_empty(), "the polled run has an entry");
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
        chain.append(&anchor)?;
        let started = Instant::now();
        let polled = index.run_head("task-t-5")?;
        total += started.elapsed();
        ensure!(polled == head, "an anchor moved the polled run's head");
    }
    std::fs::remove_dir_all(&chain_dir)?;
    Ok(total / POLLS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_hmac_limit_covers_every_line_on_any_thread_count() {
        // The split must hand every line to exactly one thread; timing is not asserted.
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"k");
        let lines: Vec<Vec<u8>> = (0..7).map(|n| vec![b'a'; n]).collect();
        for threads in [1, 2, 3, 8, 0] {
            hmac_lines(&key, &lines, threads);
        }
        let chunk = lines.len().div_ceil(3);
        assert_eq!(lines.chunks(chunk).map(<[_]>::len).sum::<usize>(), 7);
    }

    #[test]
    fn the_generated_chain_verifies_and_polls() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"bench".to_vec());
        write_chain(&dir.path().join("c"), &key, 25).unwrap();
        let report = audit::verify(&dir.path().join("c"), &key);
        assert!(report.ok() && report.entries == 25, "{report:?}");
        assert_eq!(chain_lines(&dir.path().join("c")).unwrap().len(), 25);
        let poll = measure_poll(dir.path(), &key, 10).unwrap();
        assert!(poll > Duration::ZERO);
        let durable = measure_fdatasync(dir.path()).unwrap();
        assert_eq!(durable.one.latencies.len(), SYNCS);
        assert_eq!(durable.pair.latencies.len(), SYNCS);
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .filter(|name| name.to_string_lossy().starts_with("fdatasync-"))
            .collect();
        assert!(left.is_empty(), "the probes left {left:?}");
    }
}
