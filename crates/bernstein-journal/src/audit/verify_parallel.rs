//! The parallel chain verifier: the same walk as [`super::verify`]'s sequential one, with the
//! per-line work spread over several threads and the results folded in file order.
//!
//! Three kinds of thread share the work. One reader opens the segments in walk order and reads
//! them in blocks straight into batch buffers, cutting each batch at a line end, streaming (a
//! batch is at most a few hundred lines and about a MiB besides its last line; the queues
//! between threads hold a few batches, so memory does not grow with the chain). The reader
//! finds the line ends; it neither copies nor allocates per line. Workers decode,
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

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use super::report::{VerifyProgress, VerifyReport};
use super::segments::{ByteCounter, LineView, MAX_LINE_BYTES, Segment};
use super::verify::{
    ChainMacs, LineAnalysis, LineMeta, ProgressGate, Walk, analyze_line, linked_line, open_segment,
};
use crate::key::AuditKey;

/// Lines per batch: enough that a hand-off between threads (a wake-up of the thread on each
/// side) costs little per line, few enough that the lines in flight stay within a few MiB.
pub(crate) const BATCH_LINES: usize = 1024;

/// Batches waiting in each queue between threads.
const QUEUE_DEPTH: usize = 2;

/// A batch is cut at the first line end after this many bytes, so a batch of long lines stays
/// small while one of ordinary lines fills up to [`BATCH_LINES`].
const BATCH_BYTES: usize = 1024 * 1024;

/// Bytes asked of a segment per read: the segment reader's own block, so that it reads
/// straight into the batch buffer rather than into its buffer and then copying. The bytes read
/// past a batch's last line (half a read, on average) are copied to the next batch, a small
/// part of a batch of a thousand ordinary lines.
const READ_BYTES: usize = super::segments::BLOCK_BYTES;

/// Consecutive lines of one segment and the buffer that holds their bytes.
struct Batch {
    /// Each line's bytes sit where its [`BatchLine::start`] says; what lies past the last
    /// line is scratch (bytes of the next line, or of an earlier batch), never read as a line.
    bytes: Vec<u8>,
    lines: Vec<BatchLine>,
}

/// One line of a [`Batch`].
struct BatchLine {
    line_no: u64,
    offset: u64,
    len: u64,
    /// Where the line's bytes start in the batch buffer; `None` for a line longer than
    /// [`MAX_LINE_BYTES`], whose bytes were not kept.
    start: Option<usize>,
    terminated: bool,
}

impl Batch {
    fn view(&self, line: &BatchLine) -> LineView<'_> {
        LineView {
            offset: line.offset,
            len: line.len,
            bytes: line.start.map(|start| {
                let end = start + usize::try_from(line.len).unwrap_or(usize::MAX);
                &self.bytes[start..end]
            }),
            terminated: line.terminated,
        }
    }
}

/// What the reader hands to a worker, in walk order.
enum Unit {
    Open(Segment, ByteCounter),
    Lines(Arc<str>, Batch),
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
        // Workers give each batch's buffer back for the reader to fill again; only buffers
        // already dealt come back, so there are never more than the queues hold plus one.
        let (spare_tx, spare_rx) = channel();
        for _ in 0..workers {
            let (unit_tx, unit_rx) = sync_channel(QUEUE_DEPTH);
            let (checked_tx, checked_rx) = sync_channel(QUEUE_DEPTH);
            let spare_tx = spare_tx.clone();
            scope.spawn(move || check_units(key, &unit_rx, &checked_tx, &spare_tx));
            inputs.push(unit_tx);
            outputs.push(checked_rx);
        }
        drop(spare_tx);
        scope.spawn(move || {
            read_segments(&audit_dir, segments, batch_lines.max(1), &inputs, &spare_rx);
        });
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
fn check_units(
    key: &AuditKey,
    units: &Receiver<Unit>,
    checked: &SyncSender<Checked>,
    spares: &Sender<Vec<u8>>,
) {
    let macs = ChainMacs::new(key);
    let mut assumed = String::new();
    for unit in units {
        let out = match unit {
            Unit::Open(segment, counter) => Checked::Open(segment, counter),
            Unit::Lines(name, batch) => {
                let mut known = false;
                let analysed = batch
                    .lines
                    .iter()
                    .map(|line| {
                        let view = batch.view(line);
                        let fast = match view.bytes {
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
                                line.line_no,
                                view,
                                known.then_some(assumed.as_str()),
                                false,
                            ),
                        };
                        if let Some(head) = analysis.head_after() {
                            assumed.clear();
                            assumed.push_str(head);
                            known = true;
                        }
                        (LineMeta::of(line.line_no, view), analysis)
                    })
                    .collect();
                // The reader may have finished and gone; the buffer is then simply freed.
                let _ = spares.send(batch.bytes);
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
    spares: &Receiver<Vec<u8>>,
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
        let mut cutter = BatchCutter::new(reader, batch_lines);
        let last = loop {
            match cutter.next_batch(spares.try_recv().unwrap_or_default()) {
                Ok(Some(batch)) => {
                    if !deal(Unit::Lines(Arc::clone(&name), batch)) {
                        return;
                    }
                }
                Ok(None) => break Unit::End(cutter.position),
                Err((batch, err)) => {
                    if !batch.lines.is_empty() && !deal(Unit::Lines(name, batch)) {
                        return;
                    }
                    break Unit::Unreadable(segment, err);
                }
            }
        };
        let stop = matches!(last, Unit::Unreadable(..));
        if !deal(last) || stop {
            return;
        }
    }
}

/// Cuts a segment into [`Batch`]es: the pieces of `raw.split(b"\n")` without the final empty
/// piece, exactly as [`super::segments::LineReader`] yields them, read in blocks straight into
/// the batch buffer.
struct BatchCutter<R> {
    inner: R,
    batch_lines: usize,
    /// Bytes read past the last complete line: the start of the next batch's buffer.
    carry: Vec<u8>,
    /// The segment offset of the first byte of the line being read.
    line_offset: u64,
    /// The length so far of the line being read, when it outgrew [`MAX_LINE_BYTES`] and its
    /// bytes are being skipped.
    skipping: Option<u64>,
    line_no: u64,
    /// Segment bytes consumed by complete lines (and at the end, by the last piece).
    position: u64,
    done: bool,
}

impl<R: Read> BatchCutter<R> {
    fn new(inner: R, batch_lines: usize) -> BatchCutter<R> {
        BatchCutter {
            inner,
            batch_lines: batch_lines.max(1),
            carry: Vec::new(),
            line_offset: 0,
            skipping: None,
            line_no: 0,
            position: 0,
            done: false,
        }
    }

    /// The next batch, `None` once the segment is read to its end. A read error returns the
    /// lines completed before it with the error.
    ///
    /// The batch's bytes are read into `spare`, a buffer an earlier batch gave back (or a new
    /// one): its length is taken as bytes already initialized, so reading into it zeroes only
    /// what it must grow by, where a fresh buffer would be zeroed block by block before every
    /// read and, being large, mapped anew and faulted in page by page.
    fn next_batch(&mut self, spare: Vec<u8>) -> Result<Option<Batch>, (Batch, io::Error)> {
        let mut batch = Batch {
            bytes: spare,
            lines: Vec::with_capacity(self.batch_lines),
        };
        if self.done {
            return Ok(None);
        }
        // The bytes read past the previous batch's last line start this one.
        let carried = self.carry.len();
        if batch.bytes.len() < carried {
            batch.bytes.resize(carried, 0);
        }
        batch.bytes[..carried].copy_from_slice(&self.carry);
        self.carry.clear();
        // `filled` is how many bytes of the buffer hold segment bytes (the rest is scratch),
        // `line_start` where the line being read starts, `scanned` how far the buffer has
        // been searched for its end.
        let mut filled = carried;
        let mut line_start = 0usize;
        let mut scanned = 0usize;
        loop {
            while let Some(found) = memchr::memchr(b'\n', &batch.bytes[scanned..filled]) {
                let end = scanned + found;
                self.finish_line(&mut batch, line_start, end, true);
                line_start = end + 1;
                scanned = line_start;
                if batch.lines.len() >= self.batch_lines || line_start >= BATCH_BYTES {
                    self.carry
                        .extend_from_slice(&batch.bytes[line_start..filled]);
                    // The buffer keeps its length, so the one it comes back as is
                    // initialized that far and is not zeroed again.
                    return Ok(Some(batch));
                }
            }
            scanned = filled;
            if scanned - line_start > MAX_LINE_BYTES {
                // Too long to hold: keep counting it, drop its bytes.
                let held = (scanned - line_start) as u64;
                self.skipping = Some(self.skipping.unwrap_or(0) + held);
                filled = line_start;
                scanned = line_start;
            }
            if batch.bytes.len() < filled + READ_BYTES {
                batch.bytes.resize(filled + READ_BYTES, 0);
            }
            let read = loop {
                match self
                    .inner
                    .read(&mut batch.bytes[filled..filled + READ_BYTES])
                {
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            match read {
                Ok(0) => {
                    batch.bytes.truncate(filled);
                    self.done = true;
                    if filled > line_start || self.skipping.is_some() {
                        self.finish_line(&mut batch, line_start, filled, false);
                    }
                    return Ok((!batch.lines.is_empty()).then_some(batch));
                }
                Ok(read) => filled += read,
                Err(err) => {
                    batch.bytes.truncate(line_start);
                    self.done = true;
                    return Err((batch, err));
                }
            }
        }
    }

    /// Records the line `bytes[start..end]` (plus whatever of it was skipped) as complete.
    fn finish_line(&mut self, batch: &mut Batch, start: usize, end: usize, terminated: bool) {
        let kept = (end - start) as u64;
        let (len, start) = match self.skipping.take() {
            Some(skipped) => (skipped + kept, None),
            None if end - start > MAX_LINE_BYTES => (kept, None),
            None => (kept, Some(start)),
        };
        self.line_no += 1;
        batch.lines.push(BatchLine {
            line_no: self.line_no,
            offset: self.line_offset,
            len,
            start,
            terminated,
        });
        self.line_offset += len + u64::from(terminated);
        self.position = self.line_offset;
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
    use super::super::segments::{LineReader, MAX_LINE_BYTES};
    use super::super::verify::{thread_fold_mac_count, verify_with_workers};
    use super::super::{ARCHIVE_DIR, EVENT_CHAIN_TEAR_ACKNOWLEDGED, EVENT_CHAIN_TORN_RECORD};
    use super::{BATCH_BYTES, Batch, BatchCutter, READ_BYTES};
    use crate::key::AuditKey;

    /// The thread and batch shapes the parallel verifier is compared under: one-line batches
    /// put every line at a batch start, and three workers take batches out of step with two.
    const SHAPES: [(usize, usize); 5] = [(2, 1), (2, 2), (3, 3), (2, 7), (2, 256)];

    /// A reader handing out at most `chunk` bytes per read, failing once `fail_at` bytes have
    /// been read when it is set.
    struct Trickle<'a> {
        bytes: &'a [u8],
        at: usize,
        chunk: usize,
        fail_at: Option<usize>,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.fail_at.is_some_and(|fail_at| self.at >= fail_at) {
                return Err(std::io::Error::other("the disk went away"));
            }
            let limit = self
                .fail_at
                .unwrap_or(self.bytes.len())
                .min(self.bytes.len());
            let n = buf.len().min(self.chunk).min(limit - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// `(line_no, offset, len, bytes, terminated)` of each line, and where reading stopped.
    type Cut = (
        Vec<(u64, u64, u64, Option<Vec<u8>>, bool)>,
        Result<u64, String>,
    );

    fn cut_in_batches(
        bytes: &[u8],
        batch_lines: usize,
        chunk: usize,
        fail_at: Option<usize>,
    ) -> Cut {
        let reader = Trickle {
            bytes,
            at: 0,
            chunk,
            fail_at,
        };
        let mut cutter = BatchCutter::new(reader, batch_lines);
        let mut lines = Vec::new();
        let mut take = |batch: &Batch| {
            assert!(batch.lines.len() <= batch_lines.max(1));
            for line in &batch.lines {
                let view = batch.view(line);
                let bytes = view.bytes.map(<[u8]>::to_vec);
                lines.push((line.line_no, view.offset, view.len, bytes, view.terminated));
            }
        };
        // Each batch is read into the one before it, given back full of line ends as a
        // worker would give it back full of old lines: none of them may show.
        let mut spare = Vec::new();
        loop {
            match cutter.next_batch(std::mem::take(&mut spare)) {
                Ok(Some(batch)) => {
                    take(&batch);
                    spare = batch.bytes;
                    spare.resize(spare.len() + 37, b'\n');
                    spare.fill(b'\n');
                }
                Ok(None) => return (lines, Ok(cutter.position)),
                Err((batch, err)) => {
                    take(&batch);
                    return (lines, Err(err.to_string()));
                }
            }
        }
    }

    /// What the sequential walk's reader makes of the same bytes.
    fn cut_by_line_reader(bytes: &[u8], chunk: usize, fail_at: Option<usize>) -> Cut {
        let reader = Trickle {
            bytes,
            at: 0,
            chunk,
            fail_at,
        };
        let mut lines_in = LineReader::new(std::io::BufReader::new(reader));
        let mut lines = Vec::new();
        for line_no in 1.. {
            match lines_in.next_line() {
                Ok(Some(line)) => {
                    lines.push((line_no, line.offset, line.len, line.bytes, line.terminated))
                }
                Ok(None) => return (lines, Ok(lines_in.position())),
                Err(err) => return (lines, Err(err.to_string())),
            }
        }
        unreachable!()
    }

    fn check_cut(bytes: &[u8], batch_lines: usize, chunk: usize) {
        assert_eq!(
            cut_in_batches(bytes, batch_lines, chunk, None),
            cut_by_line_reader(bytes, chunk, None),
            "{batch_lines} lines a batch, {chunk} bytes a read"
        );
    }

    #[test]
    fn batches_hold_the_lines_the_line_reader_reads() {
        for (batch_lines, chunk) in [(1, 1), (2, 3), (256, 7), (3, 16 * 1024)] {
            check_cut(b"", batch_lines, chunk);
            check_cut(b"\n", batch_lines, chunk);
            check_cut(b"a\n\nbc\nlast", batch_lines, chunk);
            check_cut(b"a\r\n\n\n", batch_lines, chunk);
        }
        // A line beyond the limit keeps its place and length but not its bytes, whether it
        // ends the segment or not, and the lines around it are whole.
        let mut long = b"first\n".to_vec();
        long.resize(long.len() + MAX_LINE_BYTES + 5, b'x');
        long.extend_from_slice(b"\nafter\n");
        long.resize(long.len() + MAX_LINE_BYTES + 1, b'y');
        check_cut(&long, 2, 64 * 1024);
        let (lines, end) = cut_in_batches(&long, 2, 64 * 1024, None);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1].2, MAX_LINE_BYTES as u64 + 5);
        assert!(lines[1].3.is_none() && lines[3].3.is_none());
        assert_eq!(lines[2].3.as_deref(), Some(&b"after"[..]));
        assert_eq!(end, Ok(long.len() as u64));
        // A line of exactly the limit is kept.
        let mut exact = vec![b'z'; MAX_LINE_BYTES];
        exact.push(b'\n');
        let (lines, _) = cut_in_batches(&exact, 1, 16 * 1024, None);
        assert_eq!(lines[0].3.as_ref().map(Vec::len), Some(MAX_LINE_BYTES));
    }

    #[test]
    fn a_batch_of_long_lines_is_cut_by_its_bytes() {
        // 256 lines of 100 KiB would be a 25 MiB batch; the reader cuts after about 1 MiB.
        let line = [vec![b'x'; 100 * 1024], b"\n".to_vec()].concat();
        let segment = line.repeat(300);
        let mut cutter = BatchCutter::new(&segment[..], 256);
        let mut lines = 0;
        while let Ok(Some(batch)) = cutter.next_batch(Vec::new()) {
            assert!(
                batch.bytes.len() <= BATCH_BYTES + line.len() + 2 * READ_BYTES,
                "a batch of {} lines holds {} bytes",
                batch.lines.len(),
                batch.bytes.len()
            );
            let last = batch.lines.last().unwrap();
            let held = last.start.unwrap() + usize::try_from(last.len).unwrap();
            assert!(held <= BATCH_BYTES + line.len(), "lines end at byte {held}");
            lines += batch.lines.len();
        }
        assert_eq!(lines, 300);
    }

    #[test]
    fn a_read_error_hands_over_the_lines_completed_before_it() {
        let bytes = b"one\ntwo\nthree\nfour\n";
        let (lines, end) = cut_in_batches(bytes, 256, 3, Some(10));
        let taken: Vec<_> = lines.iter().map(|line| line.3.clone().unwrap()).collect();
        assert_eq!(taken, [b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(end, Err("the disk went away".to_owned()));
    }

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

    /// One generated record: its event type (0 a torn-record marker, 1 a tear acknowledgement,
    /// 2 a task event the canonical scanner declines, any other a plain task event) and whether
    /// it states a wrong predecessor.
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
                if spec.event == 2 {
                    // A key with an escape, which the canonical scanner leaves to the full path.
                    details = details.with("caf\u{e9}", "full path");
                }
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
        /// Any bytes, any batch size and read size: the batches hold the line reader's lines.
        #[test]
        fn batches_cut_any_bytes_as_the_line_reader_does(
            pieces in prop::collection::vec(prop::sample::select(vec![&b"\n"[..], b"ab", b"{\"x\": 1}", b"", b"\r"]), 0..40),
            batch_lines in 1usize..5,
            chunk in 1usize..12,
        ) {
            let bytes = pieces.concat();
            prop_assert_eq!(
                cut_in_batches(&bytes, batch_lines, chunk, None),
                cut_by_line_reader(&bytes, chunk, None)
            );
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
        write_chain(dir.path(), &key, &vec![vec![spec.clone(); 40]; 3], 1, &[]);
        let macs_before = thread_fold_mac_count();
        let report = verify_with_workers(dir.path(), &key, 2, 3, &mut |_| {});
        assert!(report.ok(), "{report:?}");
        assert_eq!(report.entries, 120);
        assert_eq!(report.verified_entries, 120);
        // The workers MACed every line but each batch's first against the head before it,
        // so the fold computed one MAC per batch of three: 14 batches per 40-line segment.
        // So also when every line takes the full path (event 2), whose analysis carries the
        // MAC it expects under the head it assumed.
        assert_eq!(thread_fold_mac_count() - macs_before, 3 * 14);
        let full = tempfile::tempdir().unwrap();
        let spec = RecordSpec { event: 2, ..spec };
        write_chain(full.path(), &key, &vec![vec![spec; 40]; 3], 1, &[]);
        let macs_before = thread_fold_mac_count();
        let report = verify_with_workers(full.path(), &key, 2, 3, &mut |_| {});
        assert!(report.ok() && report.verified_entries == 120, "{report:?}");
        assert_eq!(thread_fold_mac_count() - macs_before, 3 * 14);
        assert_parallel_equals_sequential(dir.path(), &key, "untouched");
    }
}
