//! Finding, ordering and reading the files of one audit directory.
//!
//! Layout (`FORMATS.md` §2.1): live daily segments `<dir>/*.jsonl`, archived segments
//! `<dir>/archive/*.jsonl.gz`. Every reader splits on `b"\n"` only (never on `\r`, `\v` or
//! Unicode separators) so that a flipped terminator byte surfaces as damage rather than being
//! healed by the splitter.
//!
//! Readers stream: forward through a `BufReader` (also through gzip), backward in fixed-size
//! blocks. No segment is ever loaded whole. Lines longer than [`MAX_LINE_BYTES`] are never held
//! in memory; they are reported as too long.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use flate2::bufread::GzDecoder;

use super::clock::days_in_month;

/// Name of the archive subdirectory.
pub const ARCHIVE_DIR: &str = "archive";

/// Suffix of live segments.
pub const LIVE_SUFFIX: &str = ".jsonl";

/// Suffix of archived segments.
pub const ARCHIVED_SUFFIX: &str = ".jsonl.gz";

/// Longest line any reader holds in memory. An audit record is a few hundred bytes; a line of
/// this size is damage, and refusing to buffer it keeps a hostile file from exhausting memory.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Block size for backward reads and forward buffering. A forward reader asked for at least
/// this many bytes while its buffer is empty reads straight into the caller's buffer.
pub(crate) const BLOCK_BYTES: usize = 64 * 1024;

/// Size of the first backward read: a few records, enough to find the newest one in the common
/// case without reading a whole block per append.
const FIRST_BACKWARD_BYTES: u64 = 8 * 1024;

/// Whether a segment is live or archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentKind {
    Live,
    Archived,
}

/// One segment file of the chain.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub(crate) kind: SegmentKind,
    /// The file name, which is how the reference names the segment in every message.
    pub(crate) name: String,
    /// The path relative to the audit directory (`archive/<name>` for archived segments).
    pub(crate) relative: String,
    pub(crate) path: PathBuf,
}

/// Live segments sorted by name (Python sorts the paths; within one directory that is the
/// name in code-point order, which equals UTF-8 byte order). Like `Path.glob("*.jsonl")`, hidden
/// names and directories match too.
pub(crate) fn live_segments(audit_dir: &Path) -> io::Result<Vec<Segment>> {
    let mut names = list_names(audit_dir, LIVE_SUFFIX)?;
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| Segment {
            kind: SegmentKind::Live,
            path: audit_dir.join(&name),
            relative: name.clone(),
            name,
        })
        .collect())
}

/// Archived segments in the reference's replay order: names whose first dot-separated token
/// parses as `%Y-%m-%d` first, ordered by that token, then the rest; the full name breaks ties.
pub(crate) fn archived_segments(audit_dir: &Path) -> io::Result<Vec<Segment>> {
    let archive_dir = audit_dir.join(ARCHIVE_DIR);
    if !archive_dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut keyed: Vec<((u8, String, String), String)> = list_names(&archive_dir, ARCHIVED_SUFFIX)?
        .into_iter()
        .map(|name| {
            let token = name.split('.').next().unwrap_or_default().to_owned();
            let key = if parses_as_python_date(&token) {
                (0, token, name.clone())
            } else {
                (1, String::new(), name.clone())
            };
            (key, name)
        })
        .collect();
    keyed.sort();
    Ok(keyed
        .into_iter()
        .map(|(_, name)| Segment {
            kind: SegmentKind::Archived,
            path: archive_dir.join(&name),
            relative: format!("{ARCHIVE_DIR}/{name}"),
            name,
        })
        .collect())
}

/// Archived segments then live segments: the verifier's walk order.
pub(crate) fn walk_order(audit_dir: &Path) -> io::Result<Vec<Segment>> {
    let mut all = archived_segments(audit_dir)?;
    all.extend(live_segments(audit_dir)?);
    Ok(all)
}

/// Entry names in `dir` ending in `suffix`. A missing directory has no entries.
fn list_names(dir: &Path, suffix: &str) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut names = Vec::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(suffix) {
            names.push(name);
        }
    }
    Ok(names)
}

/// `datetime.strptime(token, "%Y-%m-%d")` succeeds: four digits, `-`, a month (`1`..`12`, one
/// or two digits), `-`, a day (one or two digits, or a space and one digit) that exists in that
/// month, and nothing else. Year 0 does not exist.
pub(crate) fn parses_as_python_date(token: &str) -> bool {
    let mut parts = token.splitn(3, '-');
    let (Some(year), Some(month), Some(day)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if year.len() != 4 || !digits(year) {
        return false;
    }
    let month_ok = match month.as_bytes() {
        [d] => (b'1'..=b'9').contains(d),
        [b'0', d] => (b'1'..=b'9').contains(d),
        [b'1', d] => (b'0'..=b'2').contains(d),
        _ => false,
    };
    let day_ok = match day.as_bytes() {
        [d] | [b' ', d] => (b'1'..=b'9').contains(d),
        [b'0', d] => (b'1'..=b'9').contains(d),
        [b'1' | b'2', d] => d.is_ascii_digit(),
        [b'3', d] => (b'0'..=b'1').contains(d),
        _ => false,
    };
    if !month_ok || !day_ok {
        return false;
    }
    let parse = |s: &str| s.trim().parse::<i64>().unwrap_or(0);
    let (year, month, day) = (parse(year), parse(month), parse(day));
    year >= 1 && day <= days_in_month(year, month)
}

/// Opens a segment for forward reading: a live file as is, an archived one through gzip (all
/// members, as Python's `gzip` reads them). The second value counts on-disk bytes consumed, for
/// progress reporting.
pub(crate) fn open_forward(
    segment: &Segment,
) -> io::Result<(Box<dyn BufRead + Send>, ByteCounter)> {
    open_forward_path(&segment.path, segment.kind)
}

pub(crate) fn open_forward_path(
    path: &Path,
    kind: SegmentKind,
) -> io::Result<(Box<dyn BufRead + Send>, ByteCounter)> {
    let file = File::open(path)?;
    let counter = ByteCounter::default();
    let counted = CountingReader {
        inner: file,
        counter: counter.clone(),
    };
    let reader: Box<dyn BufRead + Send> = match kind {
        SegmentKind::Live => Box::new(BufReader::with_capacity(BLOCK_BYTES, counted)),
        SegmentKind::Archived => Box::new(BufReader::with_capacity(
            BLOCK_BYTES,
            PythonGzipReader::new(BufReader::with_capacity(BLOCK_BYTES, counted)),
        )),
    };
    Ok((reader, counter))
}

/// Opens a live segment the way the reference's `_read_live_segment` reads one: when the file
/// vanished (retention archived it between listing and reading), its archived copy is read
/// instead, because retention writes the copy before removing the original.
pub(crate) fn open_live_with_fallback(
    audit_dir: &Path,
    segment: &Segment,
) -> io::Result<(Box<dyn BufRead + Send>, ByteCounter)> {
    match open_forward(segment) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let archived = audit_dir
                .join(ARCHIVE_DIR)
                .join(format!("{}.gz", segment.name));
            open_forward_path(&archived, SegmentKind::Archived)
        }
        other => other,
    }
}

/// Decompresses a gzip file the way Python's `gzip` module reads one: any number of members,
/// zero padding after a member is skipped, an empty file is empty, and anything else after a
/// member (or a truncated member) is an error.
pub(crate) struct PythonGzipReader<R: BufRead> {
    state: GzipState<R>,
}

enum GzipState<R: BufRead> {
    Between(R),
    InMember(Box<GzDecoder<R>>),
    Failed,
}

impl<R: BufRead> PythonGzipReader<R> {
    pub(crate) fn new(inner: R) -> PythonGzipReader<R> {
        PythonGzipReader {
            state: GzipState::Between(inner),
        }
    }
}

impl<R: BufRead> Read for PythonGzipReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match std::mem::replace(&mut self.state, GzipState::Failed) {
                GzipState::Failed => {
                    return Err(io::Error::other("gzip stream already failed"));
                }
                GzipState::InMember(mut decoder) => match decoder.read(buf) {
                    Ok(0) if !buf.is_empty() => {
                        let mut inner = decoder.into_inner();
                        skip_zero_padding(&mut inner)?;
                        self.state = GzipState::Between(inner);
                    }
                    Ok(n) => {
                        self.state = GzipState::InMember(decoder);
                        return Ok(n);
                    }
                    Err(err) => return Err(err),
                },
                GzipState::Between(mut inner) => {
                    if inner.fill_buf()?.is_empty() {
                        self.state = GzipState::Between(inner);
                        return Ok(0);
                    }
                    self.state = GzipState::InMember(Box::new(GzDecoder::new(inner)));
                }
            }
        }
    }
}

fn skip_zero_padding<R: BufRead>(inner: &mut R) -> io::Result<()> {
    loop {
        let buf = inner.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        let zeros = buf.iter().take_while(|&&b| b == 0).count();
        let all = zeros == buf.len();
        inner.consume(zeros);
        if !all {
            return Ok(());
        }
    }
}

/// Shared count of bytes read from disk.
#[derive(Debug, Clone, Default)]
pub(crate) struct ByteCounter(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl ByteCounter {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn add(&self, n: u64) {
        self.0.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

struct CountingReader<R> {
    inner: R,
    counter: ByteCounter,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.add(n as u64);
        Ok(n)
    }
}

/// One `\n`-separated piece of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// Byte offset of the first byte of the line inside the (decompressed) segment.
    pub(crate) offset: u64,
    /// Length of the line without its terminator.
    pub(crate) len: u64,
    /// The bytes, or `None` when the line is longer than [`MAX_LINE_BYTES`].
    pub(crate) bytes: Option<Vec<u8>>,
    /// Whether a `\n` follows the line.
    pub(crate) terminated: bool,
}

impl Line {
    /// The line as the analysis reads it.
    pub(crate) fn view(&self) -> LineView<'_> {
        LineView {
            offset: self.offset,
            len: self.len,
            bytes: self.bytes.as_deref(),
            terminated: self.terminated,
        }
    }
}

/// A line's place and bytes, borrowed from wherever its reader keeps them: a [`Line`] of its
/// own, or a span of a batch buffer the parallel verifier's reader filled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LineView<'a> {
    /// Byte offset of the first byte of the line inside the (decompressed) segment.
    pub(crate) offset: u64,
    /// Length of the line without its terminator.
    pub(crate) len: u64,
    /// The bytes, or `None` when the line is longer than [`MAX_LINE_BYTES`].
    pub(crate) bytes: Option<&'a [u8]>,
    /// Whether a `\n` follows the line.
    pub(crate) terminated: bool,
}

/// Forward reader yielding the pieces of `raw.split(b"\n")` without the final empty piece, as
/// the reference's `_split_jsonl_bytes` does.
pub(crate) struct LineReader<R> {
    inner: R,
    offset: u64,
}

impl<R: BufRead> LineReader<R> {
    pub(crate) fn new(inner: R) -> LineReader<R> {
        LineReader { inner, offset: 0 }
    }

    /// Bytes consumed so far: the segment length once `next_line` has returned `None`.
    pub(crate) fn position(&self) -> u64 {
        self.offset
    }

    pub(crate) fn next_line(&mut self) -> io::Result<Option<Line>> {
        let start = self.offset;
        let mut bytes = Some(Vec::new());
        let mut len: u64 = 0;
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if buf.is_empty() {
                self.offset = start + len;
                if len == 0 {
                    return Ok(None);
                }
                return Ok(Some(Line {
                    offset: start,
                    len,
                    bytes,
                    terminated: false,
                }));
            }
            let (chunk, found) = match memchr::memchr(b'\n', buf) {
                Some(pos) => (&buf[..pos], true),
                None => (buf, false),
            };
            len += chunk.len() as u64;
            if let Some(held) = bytes.as_mut() {
                if held.len() + chunk.len() > MAX_LINE_BYTES {
                    bytes = None;
                } else {
                    // Exact, so a line found whole in the buffer costs one allocation, not
                    // the doublings of a growing vector.
                    held.reserve_exact(chunk.len());
                    held.extend_from_slice(chunk);
                }
            }
            let consumed = chunk.len() + usize::from(found);
            self.inner.consume(consumed);
            if found {
                self.offset = start + len + 1;
                return Ok(Some(Line {
                    offset: start,
                    len,
                    bytes,
                    terminated: true,
                }));
            }
        }
    }
}

/// Backward reader over a live file: yields the same pieces as [`LineReader`], last first.
/// Reads in fixed blocks from the end, so finding the newest record costs the size of that
/// record, not of the segment.
pub(crate) struct ReverseLines {
    file: File,
    /// Length of the file when it was opened; nothing after it is read.
    size: u64,
    /// Bytes `[buffer_start, cursor)` have been read but not yet scanned for `\n`.
    buffer: Vec<u8>,
    buffer_start: u64,
    /// Every byte in `[cursor, piece_end)` belongs to the piece being assembled.
    cursor: u64,
    piece_end: u64,
    /// Whether a `\n` follows the piece being assembled.
    piece_terminated: bool,
    /// The assembled bytes of the current piece, newest block first, unless it grew too long.
    held: Vec<Vec<u8>>,
    held_len: usize,
    too_long: bool,
    done: bool,
}

impl ReverseLines {
    /// Opens `path`; the file's length at open time bounds the scan.
    pub(crate) fn open(path: &Path) -> io::Result<ReverseLines> {
        let file = File::open(path)?;
        let size = file.metadata()?.len();
        Ok(ReverseLines {
            file,
            size,
            buffer: Vec::new(),
            buffer_start: size,
            cursor: size,
            piece_end: size,
            piece_terminated: false,
            held: Vec::new(),
            held_len: 0,
            too_long: false,
            done: false,
        })
    }

    /// Length of the file when opened.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Whether the file ends in `\n` (false for an empty file).
    pub(crate) fn ends_with_newline(&mut self) -> io::Result<bool> {
        if self.size == 0 {
            return Ok(false);
        }
        let mut last = [0u8; 1];
        self.file.seek(SeekFrom::Start(self.size - 1))?;
        self.file.read_exact(&mut last)?;
        Ok(last[0] == b'\n')
    }

    /// The previous piece, or `None` at the start of the file.
    pub(crate) fn next_back(&mut self) -> io::Result<Option<Line>> {
        while !self.done {
            if self.buffer.is_empty() {
                if self.cursor == 0 {
                    // Start of file: the piece being assembled is the first one.
                    self.done = true;
                    if let Some(line) = self.emit(0) {
                        return Ok(Some(line));
                    }
                    continue;
                }
                let block = if self.cursor == self.size {
                    FIRST_BACKWARD_BYTES
                } else {
                    BLOCK_BYTES as u64
                };
                let start = self.cursor.saturating_sub(block);
                let mut block = vec![0u8; usize::try_from(self.cursor - start).unwrap_or(0)];
                self.file.seek(SeekFrom::Start(start))?;
                self.file.read_exact(&mut block)?;
                self.buffer = block;
                self.buffer_start = start;
            }
            match self.buffer.iter().rposition(|&b| b == b'\n') {
                Some(pos) => {
                    self.hold(self.buffer[pos + 1..].to_vec());
                    self.buffer.truncate(pos);
                    let newline_at = self.buffer_start + pos as u64;
                    self.cursor = newline_at;
                    let line = self.emit(newline_at + 1);
                    self.piece_end = newline_at;
                    self.piece_terminated = true;
                    if let Some(line) = line {
                        return Ok(Some(line));
                    }
                }
                None => {
                    let block = std::mem::take(&mut self.buffer);
                    self.hold(block);
                    self.cursor = self.buffer_start;
                }
            }
        }
        Ok(None)
    }

    fn hold(&mut self, block: Vec<u8>) {
        if self.too_long {
            return;
        }
        self.held_len += block.len();
        if self.held_len > MAX_LINE_BYTES {
            self.too_long = true;
            self.held.clear();
        } else {
            self.held.push(block);
        }
    }

    /// Finishes the piece `[start, piece_end)` and resets the assembly state. The empty piece
    /// after a final `\n` is skipped, as `_split_jsonl_bytes` drops it.
    fn emit(&mut self, start: u64) -> Option<Line> {
        let held = std::mem::take(&mut self.held);
        let too_long = std::mem::replace(&mut self.too_long, false);
        self.held_len = 0;
        let len = self.piece_end - start;
        if len == 0 && !self.piece_terminated {
            return None;
        }
        let bytes = (!too_long).then(|| held.into_iter().rev().collect::<Vec<_>>().concat());
        Some(Line {
            offset: start,
            len,
            bytes,
            terminated: self.piece_terminated,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn forward(bytes: &[u8]) -> Vec<Line> {
        let mut reader = LineReader::new(io::Cursor::new(bytes.to_vec()));
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line);
        }
        assert_eq!(reader.position(), bytes.len() as u64);
        out
    }

    fn backward(bytes: &[u8]) -> Vec<Line> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg.jsonl");
        fs::write(&path, bytes).unwrap();
        let mut reader = ReverseLines::open(&path).unwrap();
        let mut out = Vec::new();
        while let Some(line) = reader.next_back().unwrap() {
            out.push(line);
        }
        out.reverse();
        out
    }

    /// The reference's `_split_jsonl_bytes` with offsets.
    fn reference_split(bytes: &[u8]) -> Vec<(u64, Vec<u8>, bool)> {
        let mut parts: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        if parts.last() == Some(&&b""[..]) {
            parts.pop();
        }
        let mut offset = 0u64;
        let count = parts.len();
        parts
            .into_iter()
            .enumerate()
            .map(|(n, part)| {
                let start = offset;
                offset += part.len() as u64 + 1;
                let terminated = n + 1 < count || bytes.ends_with(b"\n");
                (start, part.to_vec(), terminated)
            })
            .collect()
    }

    fn summary(lines: &[Line]) -> Vec<(u64, Vec<u8>, bool)> {
        lines
            .iter()
            .map(|l| (l.offset, l.bytes.clone().unwrap(), l.terminated))
            .collect()
    }

    #[test]
    fn split_matches_the_reference_on_edge_shapes() {
        for input in [
            &b""[..],
            b"\n",
            b"\n\n",
            b"a",
            b"a\n",
            b"a\nb",
            b"a\n\nb\n",
            b"\na\x0bb\r\n",
        ] {
            assert_eq!(
                summary(&forward(input)),
                reference_split(input),
                "{input:?}"
            );
            assert_eq!(
                summary(&backward(input)),
                reference_split(input),
                "{input:?}"
            );
        }
    }

    #[test]
    fn overlong_lines_are_measured_but_not_held() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\nshort\n");
        for lines in [forward(&input), backward(&input)] {
            assert_eq!(lines.len(), 2);
            assert_eq!(lines[0].bytes, None);
            assert_eq!(lines[0].len, MAX_LINE_BYTES as u64 + 10);
            assert_eq!(lines[0].offset, 0);
            assert_eq!(lines[1].bytes.as_deref(), Some(&b"short"[..]));
            assert_eq!(lines[1].offset, MAX_LINE_BYTES as u64 + 11);
        }
    }

    fn gunzip(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        PythonGzipReader::new(io::Cursor::new(bytes.to_vec())).read_to_end(&mut out)?;
        Ok(out)
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut encoder, bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn gzip_reading_follows_python() {
        let one = gzip(b"a\n");
        let two = gzip(b"b\n");
        assert_eq!(gunzip(b"").unwrap(), b"");
        assert_eq!(gunzip(&one).unwrap(), b"a\n");
        assert_eq!(
            gunzip(&[one.clone(), two.clone()].concat()).unwrap(),
            b"a\nb\n"
        );
        assert_eq!(
            gunzip(&[one.clone(), vec![0; 5], two].concat()).unwrap(),
            b"a\nb\n"
        );
        assert_eq!(gunzip(&[one.clone(), vec![0; 3]].concat()).unwrap(), b"a\n");
        assert!(gunzip(&[one.clone(), b"garbage".to_vec()].concat()).is_err());
        assert!(gunzip(&one[..one.len() - 3]).is_err());
        assert!(gunzip(b"not gzip").is_err());
    }

    #[test]
    fn archive_order_puts_dated_names_first() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join(ARCHIVE_DIR);
        fs::create_dir(&archive).unwrap();
        for name in [
            "zzz.jsonl.gz",
            "2026-07-02.jsonl.gz",
            "2026-7-1.jsonl.gz",
            "2026-02-30.jsonl.gz",
            "2026-07-01.jsonl.gz",
            "ignored.jsonl",
        ] {
            fs::write(archive.join(name), b"").unwrap();
        }
        let names: Vec<_> = archived_segments(dir.path())
            .unwrap()
            .into_iter()
            .map(|s| s.relative)
            .collect();
        assert_eq!(
            names,
            [
                "archive/2026-07-01.jsonl.gz",
                "archive/2026-07-02.jsonl.gz",
                "archive/2026-7-1.jsonl.gz",
                "archive/2026-02-30.jsonl.gz",
                "archive/zzz.jsonl.gz",
            ]
        );
    }

    #[test]
    fn python_date_tokens() {
        for ok in [
            "2026-07-01",
            "2026-7-1",
            "2026-12-31",
            "2024-02-29",
            "2026-01- 5",
            "0001-01-01",
        ] {
            assert!(parses_as_python_date(ok), "{ok}");
        }
        for bad in [
            "2026-02-29",
            "0000-01-01",
            "26-07-01",
            "2026-13-01",
            "2026-00-01",
            "2026-07-32",
            "2026-07-1x",
            "2026-07",
            "2026-07-01-",
            "20260701",
            "2026-07-00",
            "2026- 7-01",
        ] {
            assert!(!parses_as_python_date(bad), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn forward_and_backward_agree_with_the_reference(
            input in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'a'), any::<u8>()], 0..400)
        ) {
            prop_assert_eq!(summary(&forward(&input)), reference_split(&input));
            prop_assert_eq!(summary(&backward(&input)), reference_split(&input));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn long_lines_across_block_boundaries_split_alike(
            lines in proptest::collection::vec(
                proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..9000),
                0..24,
            ),
            trailing_newline in any::<bool>(),
        ) {
            let mut input = lines.join(&b'\n');
            if trailing_newline {
                input.push(b'\n');
            }
            prop_assert_eq!(summary(&forward(&input)), reference_split(&input));
            prop_assert_eq!(summary(&backward(&input)), reference_split(&input));
        }
    }
}
