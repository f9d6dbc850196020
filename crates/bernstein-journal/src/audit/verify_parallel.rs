//! The parallel chain verifier: the same walk as [`super::verify`]'s sequential one, with the
//! per-line work spread over several threads and the results folded in file order.
//!
//! Three kinds of thread share the work. One reader opens the segments in walk order and cuts
//! them into batches of lines, streaming (a batch is a few hundred lines; the queues between
//! threads hold a few batches, so memory does not grow with the chain). Workers decode,
//! check and MAC each line of a batch ([`analyze_line`]); inside a batch each line's
//! predecessor is the stored `hmac` of the batch's previous record line, which is exactly the
//! head the sequential walk would hold there, because every record line (verifying or not)
//! makes its own stored `hmac` the head and no other line moves it. The calling thread folds
//! the analysed lines into the walk's state in order ([`Walk::apply_line`]); it recomputes
//! the MAC only of a batch's first record line, whose predecessor the worker could not know.
//!
//! Batches go to the workers round robin and their results are taken back round robin, so
//! the fold sees every line exactly once and in file order, and the report is the sequential
//! verifier's, finding for finding.

use std::io;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use super::report::{VerifyProgress, VerifyReport};
use super::segments::{ByteCounter, Line, LineReader, Segment};
use super::verify::{
    ChainMacs, LineAnalysis, LineMeta, ProgressGate, Walk, analyze_line, linked_line, open_segment,
};
use crate::key::AuditKey;

/// Lines per batch: enough that a hand-off between threads costs little per line, few enough
/// that the lines in flight stay within a few MiB even for long lines.
pub(crate) const BATCH_LINES: usize = 256;

/// Batches waiting in each queue between threads.
const QUEUE_DEPTH: usize = 2;

/// What the reader hands to a worker, in walk order.
enum Unit {
    Open(Segment, ByteCounter),
    Lines(Arc<str>, Vec<(u64, Line)>),
    End(u64),
    Unreadable(Segment, io::Error),
}

/// What a worker hands back: the same unit with its lines analysed.
enum Checked {
    Open(Segment, ByteCounter),
    Lines(Vec<(LineMeta, LineAnalysis)>),
    End(u64),
    Unreadable(Segment, io::Error),
}

/// Runs `walk` to its end with `workers` analysing threads, dealing `batch_lines` lines at a
/// time, and returns its report.
pub(crate) fn finish(
    mut walk: Walk<'_>,
    workers: usize,
    batch_lines: usize,
    progress: &mut dyn FnMut(VerifyProgress),
) -> VerifyReport {
    let segments = walk.take_segments();
    let key = walk.key();
    let audit_dir = walk.audit_dir().to_path_buf();
    let mut gate = ProgressGate::new(&walk);
    std::thread::scope(|scope| {
        let mut inputs = Vec::with_capacity(workers);
        let mut outputs = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (unit_tx, unit_rx) = sync_channel(QUEUE_DEPTH);
            let (checked_tx, checked_rx) = sync_channel(QUEUE_DEPTH);
            scope.spawn(move || check_units(key, &unit_rx, &checked_tx));
            inputs.push(unit_tx);
            outputs.push(checked_rx);
        }
        scope.spawn(move || read_segments(&audit_dir, segments, batch_lines.max(1), &inputs));
        fold(&mut walk, &outputs, &mut gate, progress);
    });
    gate.tick(&walk, true, progress);
    walk.report()
}

/// Takes the analysed units back in the order the reader dealt them and applies them.
fn fold(
    walk: &mut Walk<'_>,
    outputs: &[Receiver<Checked>],
    gate: &mut ProgressGate,
    progress: &mut dyn FnMut(VerifyProgress),
) {
    // The reader deals unit n to worker n mod W, and each worker answers in the order it was
    // given, so taking round robin restores walk order. The first closed queue means the
    // reader is done and every unit before it has been taken.
    for n in 0.. {
        let Ok(checked) = outputs[n % outputs.len()].recv() else {
            return;
        };
        match checked {
            Checked::Open(segment, counter) => walk.begin_segment(segment, counter),
            Checked::Lines(lines) => {
                for (meta, analysis) in lines {
                    walk.apply_line(meta, analysis);
                }
            }
            Checked::End(total) => walk.end_segment(total),
            Checked::Unreadable(segment, err) => walk.stop_unreadable(&segment, &err),
        }
        gate.tick(walk, false, progress);
    }
}

/// A worker: analyses the lines of each batch, passing the other units through. A line whose
/// predecessor is known takes the fast path ([`linked_line`]) first; the batch's first record
/// line, and any line the fast path declines, is analysed in full.
fn check_units(key: &AuditKey, units: &Receiver<Unit>, checked: &SyncSender<Checked>) {
    let macs = ChainMacs::new(key);
    let mut assumed = String::new();
    for unit in units {
        let out = match unit {
            Unit::Open(segment, counter) => Checked::Open(segment, counter),
            Unit::Lines(name, lines) => {
                let mut known = false;
                let analysed = lines
                    .into_iter()
                    .map(|(line_no, line)| {
                        let fast = match line.bytes.as_deref() {
                            Some(bytes) if known && !bytes.is_empty() => {
                                linked_line(&macs, bytes, &assumed)
                            }
                            _ => None,
                        };
                        let analysis = match fast {
                            Some(head) => LineAnalysis::Linked { head },
                            None => analyze_line(
                                key,
                                &name,
                                line_no,
                                &line,
                                known.then_some(assumed.as_str()),
                                false,
                            ),
                        };
                        if let Some(head) = analysis.head_after() {
                            assumed.clear();
                            assumed.push_str(head);
                            known = true;
                        }
                        (LineMeta::of(line_no, &line), analysis)
                    })
                    .collect();
                Checked::Lines(analysed)
            }
            Unit::End(total) => Checked::End(total),
            Unit::Unreadable(segment, err) => Checked::Unreadable(segment, err),
        };
        if checked.send(out).is_err() {
            return;
        }
    }
}

/// The reader: opens each segment in walk order and deals its lines out in batches. It stops
/// at the first segment it cannot open or read, as the sequential walk does.
fn read_segments(
    audit_dir: &std::path::Path,
    segments: Vec<Segment>,
    batch_lines: usize,
    workers: &[SyncSender<Unit>],
) {
    let mut dealt = 0usize;
    let mut deal = |unit: Unit| {
        let sent = workers[dealt % workers.len()].send(unit).is_ok();
        dealt += 1;
        sent
    };
    for segment in segments {
        let (reader, counter) = match open_segment(audit_dir, &segment) {
            Ok(opened) => opened,
            Err(err) => {
                deal(Unit::Unreadable(segment, err));
                return;
            }
        };
        let name: Arc<str> = Arc::from(segment.name.as_str());
        if !deal(Unit::Open(segment.clone(), counter)) {
            return;
        }
        let mut lines = LineReader::new(reader);
        let mut batch = Vec::with_capacity(batch_lines);
        let mut line_no = 0u64;
        let failed = loop {
            match lines.next_line() {
                Ok(Some(line)) => {
                    line_no += 1;
                    batch.push((line_no, line));
                    if batch.len() == batch_lines {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_lines));
                        if !deal(Unit::Lines(Arc::clone(&name), full)) {
                            return;
                        }
                    }
                }
                Ok(None) => break None,
                Err(err) => break Some(err),
            }
        };
        if !batch.is_empty() && !deal(Unit::Lines(name, batch)) {
            return;
        }
        let last = match failed {
            Some(err) => Unit::Unreadable(segment, err),
            None => Unit::End(lines.position()),
        };
        let stop = matches!(last, Unit::Unreadable(..));
        if !deal(last) || stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::Write;
    use std::path::{Path, PathBuf};

    use bernstein_protocol::pyjson::{Dialect, Object, Value};
    use proptest::prelude::*;

    use super::super::record::{GENESIS_HMAC, Scheme, expected_hmac};
    use super::super::verify::verify_with_workers;
    use super::super::{ARCHIVE_DIR, EVENT_CHAIN_TEAR_ACKNOWLEDGED, EVENT_CHAIN_TORN_RECORD};
    use crate::key::AuditKey;

    /// The thread and batch shapes the parallel verifier is compared under: one-line batches
    /// put every line at a batch start, and three workers take batches out of step with two.
    const SHAPES: [(usize, usize); 5] = [(2, 1), (2, 2), (3, 3), (2, 7), (2, 256)];

    fn assert_parallel_equals_sequential(dir: &Path, key: &AuditKey, what: &str) {
        let sequential = verify_with_workers(dir, key, 1, 1, &mut |_| {});
        for (workers, batch) in SHAPES {
            let parallel = verify_with_workers(dir, key, workers, batch, &mut |_| {});
            assert_eq!(
                parallel, sequential,
                "{what}: {workers} workers, batches of {batch}"
            );
        }
    }

    fn audit_dirs(root: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(root).unwrap() {
            let path = entry.unwrap().path();
            if !path.is_dir() {
                continue;
            }
            if path.ends_with(".sdd/audit") {
                out.push(path.clone());
            }
            audit_dirs(&path, out);
        }
    }

    #[test]
    fn every_vector_chain_gets_the_sequential_report() {
        let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/vectors");
        let mut dirs = Vec::new();
        audit_dirs(&vectors, &mut dirs);
        dirs.sort();
        assert!(dirs.len() >= 20, "{dirs:?}");
        let keys: Vec<AuditKey> = ["audit.key", "wrong.key"]
            .iter()
            .map(|name| {
                let raw = fs::read(vectors.join("_keys").join(name)).unwrap();
                AuditKey::from_master_bytes(raw.trim_ascii().to_vec())
            })
            .collect();
        for dir in &dirs {
            for key in &keys {
                assert_parallel_equals_sequential(dir, key, &dir.display().to_string());
            }
        }
    }

    /// One generated record: its event type and whether it states a wrong predecessor.
    #[derive(Debug, Clone)]
    struct RecordSpec {
        event: u8,
        wrong_stated: bool,
        marker_offset: u16,
        marker_segment: u8,
    }

    /// Damage applied to the generated chain before it is written.
    #[derive(Debug, Clone)]
    enum Damage {
        /// Overwrite one byte of a segment.
        Edit(usize, usize, u8),
        /// Remove a line.
        Delete(usize, usize),
        /// Move a line to another place, possibly in another segment.
        Move(usize, usize, usize, usize),
        /// Cut a segment short (a torn tail).
        Truncate(usize, usize),
        /// Insert bytes (blank lines, garbage, a second newline) into a segment.
        Insert(usize, usize, Vec<u8>),
        /// Cut an archive's compressed bytes short (unreadable half-way).
        CorruptArchive(usize, usize),
    }

    fn record_spec() -> impl Strategy<Value = RecordSpec> {
        (0u8..10, prop::bool::weighted(0.1), 0u16..3000, 0u8..4).prop_map(
            |(event, wrong_stated, marker_offset, marker_segment)| RecordSpec {
                event,
                wrong_stated,
                marker_offset,
                marker_segment,
            },
        )
    }

    fn damage() -> impl Strategy<Value = Damage> {
        let at = 0usize..4000;
        let seg = 0usize..4;
        prop_oneof![
            (seg.clone(), at.clone(), any::<u8>()).prop_map(|(s, a, b)| Damage::Edit(s, a, b)),
            (seg.clone(), 0usize..12).prop_map(|(s, l)| Damage::Delete(s, l)),
            (seg.clone(), 0usize..12, seg.clone(), 0usize..12)
                .prop_map(|(s, l, t, m)| Damage::Move(s, l, t, m)),
            (seg.clone(), at.clone()).prop_map(|(s, a)| Damage::Truncate(s, a)),
            (
                seg.clone(),
                at.clone(),
                prop_oneof![
                    Just(b"\n".to_vec()),
                    Just(b"{\"x\": 1}\n".to_vec()),
                    Just(b"\xff\xfe\n".to_vec()),
                    Just(b"[]".to_vec()),
                ]
            )
                .prop_map(|(s, a, b)| Damage::Insert(s, a, b)),
            (seg, at).prop_map(|(s, a)| Damage::CorruptArchive(s, a)),
        ]
    }

    fn day_name(day: usize) -> String {
        format!("2026-07-{:02}.jsonl", day + 1)
    }

    /// Writes a scheme-2 chain of `segments` (the first `archived` of them gzipped into the
    /// archive), then damages it.
    fn write_chain(
        dir: &Path,
        key: &AuditKey,
        segments: &[Vec<RecordSpec>],
        archived: usize,
        damages: &[Damage],
    ) {
        let names: Vec<String> = (0..segments.len()).map(day_name).collect();
        let mut prev = GENESIS_HMAC.to_owned();
        let mut lines: Vec<Vec<Vec<u8>>> = Vec::new();
        for (index, specs) in segments.iter().enumerate() {
            let mut segment_lines = Vec::new();
            for (n, spec) in specs.iter().enumerate() {
                let event = match spec.event {
                    0 => EVENT_CHAIN_TORN_RECORD,
                    1 => EVENT_CHAIN_TEAR_ACKNOWLEDGED,
                    _ => "task.created",
                };
                let stated = if spec.wrong_stated {
                    "0".repeat(64)
                } else {
                    prev.clone()
                };
                let mut details = Object::new()
                    .with("prev_chain_digest", stated)
                    .with("task_id", format!("t-{index}-{n}"));
                if spec.event < 2 {
                    let named = names[usize::from(spec.marker_segment) % names.len()].clone();
                    details = details
                        .with("segment", named)
                        .with("byte_offset", i64::from(spec.marker_offset))
                        .with("verified_prefix_offset", i64::from(spec.marker_offset / 2))
                        .with("tear_class", "partial_record");
                }
                let body = Object::new()
                    .with("actor", "proptest")
                    .with("details", details)
                    .with("event_type", event)
                    .with("prev_hmac", prev.clone())
                    .with("resource_id", format!("t-{index}-{n}"))
                    .with("resource_type", "task")
                    .with("scheme", 2)
                    .with(
                        "timestamp",
                        format!("2026-07-{:02}T00:00:00+00:00", index + 1),
                    );
                let hmac = expected_hmac(key, Scheme::V2, &prev, &body);
                let line = Value::Object(body.with("hmac", hmac.clone())).dumps(Dialect::PY_SPACED);
                segment_lines.push(line.into_bytes());
                prev = hmac;
            }
            lines.push(segment_lines);
        }
        let count = lines.len();
        for damage in damages {
            match damage {
                Damage::Delete(s, l) => {
                    let segment = &mut lines[s % count];
                    if !segment.is_empty() {
                        let at = l % segment.len();
                        segment.remove(at);
                    }
                }
                Damage::Move(s, l, t, m) => {
                    let from = &mut lines[s % count];
                    if !from.is_empty() {
                        let at = l % from.len();
                        let line = from.remove(at);
                        let to = &mut lines[t % count];
                        let at = m % (to.len() + 1);
                        to.insert(at, line);
                    }
                }
                Damage::Edit(..)
                | Damage::Truncate(..)
                | Damage::Insert(..)
                | Damage::CorruptArchive(..) => {}
            }
        }
        let mut bytes: Vec<Vec<u8>> = lines
            .iter()
            .map(|segment| {
                segment
                    .iter()
                    .flat_map(|line| line.iter().copied().chain([b'\n']))
                    .collect()
            })
            .collect();
        for damage in damages {
            match damage {
                Damage::Edit(s, a, b) => {
                    let segment = &mut bytes[s % count];
                    if !segment.is_empty() {
                        let at = a % segment.len();
                        segment[at] = *b;
                    }
                }
                Damage::Truncate(s, a) => {
                    let segment = &mut bytes[s % count];
                    let keep = a % (segment.len() + 1);
                    segment.truncate(keep);
                }
                Damage::Insert(s, a, extra) => {
                    let segment = &mut bytes[s % count];
                    let at = a % (segment.len() + 1);
                    segment.splice(at..at, extra.iter().copied());
                }
                Damage::Delete(..) | Damage::Move(..) | Damage::CorruptArchive(..) => {}
            }
        }
        let archive = dir.join(ARCHIVE_DIR);
        fs::create_dir_all(&archive).unwrap();
        for (index, content) in bytes.iter().enumerate() {
            if index < archived {
                let mut encoder =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                encoder.write_all(content).unwrap();
                let mut gz = encoder.finish().unwrap();
                for damage in damages {
                    if let Damage::CorruptArchive(s, a) = damage
                        && s % count == index
                    {
                        gz.truncate(a % (gz.len() + 1));
                    }
                }
                fs::write(archive.join(format!("{}.gz", names[index])), gz).unwrap();
            } else {
                fs::write(dir.join(&names[index]), content).unwrap();
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn damaged_chains_get_the_sequential_report(
            segments in prop::collection::vec(prop::collection::vec(record_spec(), 0..10), 1..5),
            archived in 0usize..3,
            damages in prop::collection::vec(damage(), 0..4),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let key = AuditKey::from_master_bytes(b"proptest-key".to_vec());
            write_chain(dir.path(), &key, &segments, archived.min(segments.len()), &damages);
            assert_parallel_equals_sequential(dir.path(), &key, &format!("{damages:?}"));
        }
    }

    #[test]
    fn an_untouched_generated_chain_verifies_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"proptest-key".to_vec());
        let spec = RecordSpec {
            event: 5,
            wrong_stated: false,
            marker_offset: 0,
            marker_segment: 0,
        };
        write_chain(dir.path(), &key, &vec![vec![spec; 40]; 3], 1, &[]);
        let report = verify_with_workers(dir.path(), &key, 2, 3, &mut |_| {});
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.entries, 120);
        assert_eq!(report.verified_entries, 120);
        assert_parallel_equals_sequential(dir.path(), &key, "untouched");
    }
}
