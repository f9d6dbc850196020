//! A dependency-free throughput measurement of the append and verify paths, for a CLI or xtask
//! `bench` command and for spotting regressions by hand. It writes into the directory it is
//! given; point it at a scratch directory.

use std::path::Path;
use std::time::{Duration, Instant};

use bernstein_protocol::pyjson::Object;

use super::{AuditChain, AuditEvent, Timestamp, verify};
use crate::key::AuditKey;
use crate::{Error, Result};

/// What [`measure_throughput`] measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThroughputReport {
    /// Records appended.
    pub appends: u64,
    /// Wall time of all appends (each one locks, re-reads the head, writes and fsyncs).
    pub append_time: Duration,
    /// Wall time of one full verification of the resulting chain.
    pub verify_time: Duration,
    /// Size of the chain on disk.
    pub chain_bytes: u64,
    /// Whether the chain verified (it must).
    pub verify_ok: bool,
}

impl ThroughputReport {
    /// Appends per second.
    pub fn appends_per_second(&self) -> f64 {
        self.appends as f64 / self.append_time.as_secs_f64().max(f64::EPSILON)
    }

    /// Verified bytes per second.
    pub fn verify_bytes_per_second(&self) -> f64 {
        self.chain_bytes as f64 / self.verify_time.as_secs_f64().max(f64::EPSILON)
    }
}

/// Appends `appends` records of a typical size (an `mcp.stateless_call`-shaped event) to the
/// chain in `scratch_dir`, one microsecond apart on one day, then verifies the chain once.
/// `scratch_dir` must not hold a chain already.
pub fn measure_throughput(
    scratch_dir: &Path,
    key: &AuditKey,
    appends: u64,
) -> Result<ThroughputReport> {
    if scratch_dir.join(format!("{}.jsonl", START_DAY)).exists() {
        return Err(Error::Containment {
            path: scratch_dir.to_path_buf(),
            reason: "the benchmark needs an empty scratch directory".to_owned(),
        });
    }
    let chain = AuditChain::open(scratch_dir, key.clone());
    let start = Timestamp::parse(START).ok_or_else(|| Error::Encode(START.to_owned()))?;
    let began = Instant::now();
    for n in 0..appends {
        let details = Object::new()
            .with("run_id", "bench-run")
            .with("method", "tools/call")
            .with("call_index", n)
            .with("trace_id", "0af7651916cd43dd8448eb211c80319c")
            .with("span_id", format!("{n:016x}"))
            .with("journal_head", "12".repeat(32))
            .with("cache_content_hash", "");
        let event = AuditEvent::new(
            "mcp.stateless_call",
            "mcp_stateless_core",
            "mcp_stateless_call",
            format!("{n:016x}"),
            details,
        );
        let micros = i64::try_from(n).unwrap_or(i64::MAX).min(86_399_999_999);
        let at = Timestamp::from_unix_micros(start.unix_micros() + micros)?;
        chain.append_at(&event, at)?;
    }
    let append_time = began.elapsed();
    let chain_bytes = std::fs::metadata(scratch_dir.join(format!("{START_DAY}.jsonl")))
        .map(|m| m.len())
        .unwrap_or(0);
    let began = Instant::now();
    let report = verify(scratch_dir, key);
    Ok(ThroughputReport {
        appends,
        append_time,
        verify_time: began.elapsed(),
        chain_bytes,
        verify_ok: report.ok(),
    })
}

const START: &str = "2026-01-01T00:00:00.000000Z";
const START_DAY: &str = "2026-01-01";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_verifying_chain_and_refuses_a_used_directory() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"bench-key".to_vec());
        let report = measure_throughput(dir.path(), &key, 5).unwrap();
        assert_eq!(report.appends, 5);
        assert!(report.verify_ok);
        assert!(report.chain_bytes > 5 * 300);
        assert!(report.appends_per_second() > 0.0);
        assert!(matches!(
            measure_throughput(dir.path(), &key, 1),
            Err(Error::Containment { .. })
        ));
    }
}
