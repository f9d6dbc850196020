//! Memory bounds that need the whole process to themselves: the tests of this binary run one at
//! a time ([`alone`]), each resetting the peak first, so the peak resident set it reads from
//! `/proc/self/status` is that test's alone.

use std::io::{BufWriter, Write};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bernstein_journal::run_journal::{
    GENESIS_HASH, HashProfile, JournalWriter, SHARED_JOURNAL_MAX_BYTES, event_hash,
    load_journal_kept, payload_hash,
};
use bernstein_protocol::pyjson::{Dialect, Object, Value};

/// Rows in the journal the writer reads: about 18 MB on disk, several times that as parsed
/// rows held at once.
const ROWS: u64 = 40_000;

/// Held for a whole test: the test harness runs tests on parallel threads, and another test's
/// allocations would count in this one's peak.
fn alone() -> MutexGuard<'static, ()> {
    static ALONE: Mutex<()> = Mutex::new(());
    ALONE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts the peak resident set over from the current one and returns that, in KiB.
fn reset_peak() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    status_kib("VmRSS")
}

/// `VmHWM` or `VmRSS` of this process, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Writes a valid journal of [`ROWS`] rows one row at a time, so that generating it never holds
/// more than one row.
fn write_long_journal(path: &std::path::Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut out = BufWriter::new(std::fs::File::create(path).unwrap());
    let profile = HashProfile::PyJsonV1;
    let mut prev = GENESIS_HASH.to_owned();
    let padding = "p".repeat(300);
    for index in 0..ROWS {
        let event = "mcp.stateless_call";
        let mut row = Object::new();
        row.insert("ts", Value::from(1_796_000_000.0 + index as f64));
        row.insert("index", Value::from(index));
        row.insert("event", Value::from(event));
        row.insert("call_index", Value::from(index));
        row.insert("note", Value::from(padding.as_str()));
        let payload = payload_hash(profile, event, &row).unwrap();
        let hash = event_hash(profile, &prev, event, &payload, index);
        row.insert("prev_hash", Value::from(prev.as_str()));
        row.insert("payload_hash", Value::from(payload.as_str()));
        row.insert("event_hash", Value::from(hash.as_str()));
        writeln!(out, "{}", Value::Object(row).dumps(Dialect::PY_ROW)).unwrap();
        prev = hash;
    }
    out.flush().unwrap();
}

#[test]
fn a_writer_reads_a_long_journal_without_holding_its_rows() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let journal = root.join(".sdd/runs/long/journal.jsonl");
    write_long_journal(&journal);
    let on_disk_kib = std::fs::metadata(&journal).unwrap().len() / 1024;

    // Start the peak over from the current resident set, then make the writer's first
    // (full) read of the journal.
    let before = reset_peak();
    let mut writer = JournalWriter::open(root, "long", HashProfile::PyJsonV1).unwrap();
    let appended = writer.append("after", &Object::new()).unwrap();
    let growth = status_kib("VmHWM").saturating_sub(before);

    assert_eq!(appended.index, ROWS, "the read missed rows");
    assert_eq!(writer.catch_up_stats().full_reads, 1);
    // Holding every row parsed would take several times the file's size; streaming them takes
    // a read buffer and the few newest rows per event.
    assert!(
        growth < on_disk_kib / 4,
        "reading a {on_disk_kib} KiB journal grew the peak by {growth} KiB"
    );
}

/// The brief load a poll makes on an async worker declines a journal past the bound after
/// reading just past it: a sparse gigabyte does not grow the peak by anything like its size.
#[test]
fn a_brief_load_reads_a_huge_journal_only_past_its_bound() {
    let _alone = alone();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let before = reset_peak();
    assert_eq!(load_journal_kept(&path).unwrap(), None);
    let growth = status_kib("VmHWM").saturating_sub(before);
    let bound_kib = (SHARED_JOURNAL_MAX_BYTES / 1024) as u64;
    assert!(
        growth < 8 * bound_kib,
        "declining a 1 GiB journal grew the peak by {growth} KiB"
    );
}
