//! The tolerant journal reader (`journal.load_events`).
//!
//! Physical lines are split the way Python's text mode splits them (universal newlines: `\n`,
//! `\r` and `\r\n` each end a line), then `.strip()`ped with Python's whitespace set. Blank
//! lines are skipped. A line that is not valid UTF-8, not JSON, or not a JSON object is
//! *discarded*: left out of the rows and reported by its 0-based physical line index. Nothing
//! in the input can make the reader panic; lines of any length are read whole.

use super::python::python_strip;
use crate::{Error, Result};
use bernstein_protocol::pyjson::{Object, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Rows a tolerant read accepted and the physical lines it discarded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedJournal {
    /// Parsed rows in file order.
    pub rows: Vec<Object>,
    /// 0-based physical line indices that were non-blank but not a JSON object.
    pub discarded_lines: Vec<usize>,
}

/// A tolerant read plus what the writer needs to know about the file's end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scan {
    pub(crate) loaded: LoadedJournal,
    /// Whether the last byte ends a line (or the file is empty). A file ending mid-row would
    /// glue the next append onto the fragment.
    pub(crate) ends_on_line_boundary: bool,
}

/// Reads the journal at `path` tolerantly. A missing file reads as an empty journal, as in the
/// reference.
///
/// # Errors
///
/// [`Error::Io`] when the file exists but cannot be read (a directory, no permission).
pub fn load_journal(path: &Path) -> Result<LoadedJournal> {
    // A FIFO or device at a journal path is refused without blocking.
    let file = match crate::regular_file::open_regular(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(LoadedJournal::default());
        }
        Err(err) => return Err(Error::io("read", path, err)),
    };
    scan(file)
        .map(|scan| scan.loaded)
        .map_err(|err| Error::io("read", path, err))
}

/// [`load_journal`] for a poll that reads the same journal again and again: the file is read
/// whole and, when its bytes are exactly the bytes this process last parsed at `path`, the rows
/// parsed then are shared instead of parsed again. The bytes are compared in full, so no size,
/// stamp or clock is trusted: a journal rewritten to the same length in the same instant is
/// parsed again. Journals over [`SHARED_JOURNAL_MAX_BYTES`] are parsed every time and not kept.
///
/// # Errors
///
/// As [`load_journal`].
pub fn load_journal_shared(path: &Path) -> Result<Arc<LoadedJournal>> {
    load_shared(path, true).map(Option::unwrap_or_default)
}

/// [`load_journal_shared`] for a caller that must stay brief: `Ok(None)` for a journal over
/// [`SHARED_JOURNAL_MAX_BYTES`], which is read but not parsed.
///
/// # Errors
///
/// As [`load_journal`].
pub fn load_journal_kept(path: &Path) -> Result<Option<Arc<LoadedJournal>>> {
    load_shared(path, false)
}

/// [`load_journal_shared`], parsing a journal over [`SHARED_JOURNAL_MAX_BYTES`] only with
/// `parse_large`; without it such a journal is read only one byte past the bound (so a brief
/// caller's memory and time stay bounded whatever the file's size) and is `None`.
fn load_shared(path: &Path, parse_large: bool) -> Result<Option<Arc<LoadedJournal>>> {
    let (file, size) = match crate::regular_file::open_regular_sized(path) {
        Ok(opened) => opened,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Some(Arc::default()));
        }
        Err(err) => return Err(Error::io("read", path, err)),
    };
    let limit = if parse_large {
        u64::MAX
    } else {
        SHARED_JOURNAL_MAX_BYTES as u64 + 1
    };
    // Room for the whole file and one byte more, so it is read in one `read(2)` and the next
    // one sees its end (a `take` hides the file's size from `read_to_end`).
    let room = size.min(limit).saturating_add(1);
    let mut bytes = Vec::with_capacity(usize::try_from(room).unwrap_or(0));
    file.take(limit)
        .read_to_end(&mut bytes)
        .map_err(|err| Error::io("read", path, err))?;
    if bytes.len() > SHARED_JOURNAL_MAX_BYTES {
        return Ok(parse_large.then(|| Arc::new(parse_journal_bytes(&bytes))));
    }
    let cache = shared_journals();
    if let Some(known) = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(path)
        && *known.bytes == *bytes
    {
        return Ok(Some(Arc::clone(&known.loaded)));
    }
    let loaded = Arc::new(parse_journal_bytes(&bytes));
    let mut journals = cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if journals.len() >= SHARED_JOURNALS_MAX
        || journals
            .values()
            .map(|known| known.bytes.len())
            .sum::<usize>()
            + bytes.len()
            > SHARED_JOURNALS_MAX_TOTAL_BYTES
    {
        journals.clear();
    }
    journals.insert(
        path.to_path_buf(),
        SharedJournal {
            bytes: bytes.into(),
            loaded: Arc::clone(&loaded),
        },
    );
    Ok(Some(loaded))
}

/// The largest journal whose parsed rows [`load_journal_shared`] keeps.
pub const SHARED_JOURNAL_MAX_BYTES: usize = 1 << 20;

/// Journals [`load_journal_shared`] keeps at once; past it, or past
/// [`SHARED_JOURNALS_MAX_TOTAL_BYTES`] of them, it starts over (bounded memory).
const SHARED_JOURNALS_MAX: usize = 256;

/// The most journal bytes [`load_journal_shared`] keeps at once.
const SHARED_JOURNALS_MAX_TOTAL_BYTES: usize = 8 << 20;

/// A journal [`load_journal_shared`] parsed, with the bytes it was parsed from.
struct SharedJournal {
    bytes: Arc<[u8]>,
    loaded: Arc<LoadedJournal>,
}

fn shared_journals() -> &'static Mutex<HashMap<PathBuf, SharedJournal>> {
    static JOURNALS: OnceLock<Mutex<HashMap<PathBuf, SharedJournal>>> = OnceLock::new();
    JOURNALS.get_or_init(Mutex::default)
}

/// Parses journal bytes held in memory, with the same rules as [`load_journal`].
pub fn parse_journal_bytes(bytes: &[u8]) -> LoadedJournal {
    // Reading from a byte slice cannot fail.
    scan(bytes).map(|scan| scan.loaded).unwrap_or_default()
}

/// Scans a whole journal stream.
pub(crate) fn scan(source: impl Read) -> std::io::Result<Scan> {
    let mut loaded = LoadedJournal::default();
    let mut last_byte = None;
    for_each_physical_line(
        source,
        |index, line| {
            classify_line(&mut loaded, index, line);
        },
        &mut last_byte,
    )?;
    Ok(Scan {
        loaded,
        ends_on_line_boundary: matches!(last_byte, None | Some(b'\n' | b'\r')),
    })
}

fn classify_line(loaded: &mut LoadedJournal, index: usize, line: &[u8]) {
    match classify(line) {
        Classified::Blank => {}
        Classified::Discarded => loaded.discarded_lines.push(index),
        Classified::Row(row) => loaded.rows.push(row),
    }
}

/// What the tolerant reader makes of one physical line.
pub(crate) enum Classified {
    /// Whitespace only: skipped.
    Blank,
    /// Not UTF-8, not JSON, or not an object: discarded.
    Discarded,
    /// A row.
    Row(Object),
}

/// Classifies one physical line (terminator excluded) by the reader's rules.
pub(crate) fn classify(line: &[u8]) -> Classified {
    let Ok(text) = std::str::from_utf8(line) else {
        // Undecodable bytes survive `.strip()`, so such a line is never blank.
        return Classified::Discarded;
    };
    let text = python_strip(text);
    if text.is_empty() {
        return Classified::Blank;
    }
    match Value::parse(text) {
        Ok(Value::Object(row)) => Classified::Row(row),
        _ => Classified::Discarded,
    }
}

/// Calls `visit(index, line)` for every physical line (terminator excluded) of `source`,
/// splitting on `\n`, `\r` and `\r\n`. A final line without a terminator is visited too; an
/// empty stream has no lines. `last_byte` receives the stream's final byte.
pub(crate) fn for_each_physical_line(
    source: impl Read,
    mut visit: impl FnMut(usize, &[u8]),
    last_byte: &mut Option<u8>,
) -> std::io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, source);
    let mut line: Vec<u8> = Vec::new();
    let mut index = 0usize;
    // True right after a `\r`, so that a following `\n` completes `\r\n` instead of ending an
    // empty line.
    let mut after_cr = false;
    let mut pending_line = false;
    loop {
        let chunk = match reader.fill_buf() {
            Ok(chunk) => chunk,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        if chunk.is_empty() {
            break;
        }
        let consumed = chunk.len();
        *last_byte = chunk.last().copied();
        let mut start = 0usize;
        for (at, &byte) in chunk.iter().enumerate() {
            match byte {
                b'\n' if after_cr => {
                    after_cr = false;
                    start = at + 1;
                }
                b'\n' | b'\r' => {
                    line.extend_from_slice(&chunk[start..at]);
                    visit(index, &line);
                    index += 1;
                    line.clear();
                    pending_line = false;
                    after_cr = byte == b'\r';
                    start = at + 1;
                }
                _ => {
                    after_cr = false;
                    pending_line = true;
                }
            }
        }
        line.extend_from_slice(&chunk[start..]);
        reader.consume(consumed);
    }
    if pending_line || !line.is_empty() {
        visit(index, &line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        let mut last = None;
        for_each_physical_line(input, |i, l| out.push((i, l.to_vec())), &mut last).unwrap();
        out
    }

    /// A reader that fails its first read with `first_error`, then reads `bytes`.
    struct FailingOnce {
        first_error: Option<std::io::ErrorKind>,
        bytes: &'static [u8],
    }

    impl Read for FailingOnce {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if let Some(kind) = self.first_error.take() {
                return Err(kind.into());
            }
            self.bytes.read(buf)
        }
    }

    #[test]
    fn an_interrupted_read_is_retried_and_any_other_error_ends_the_walk() {
        let walk = |kind| {
            let mut out = Vec::new();
            let mut last = None;
            let source = FailingOnce {
                first_error: Some(kind),
                bytes: b"a\nb\n",
            };
            for_each_physical_line(source, |_, line| out.push(line.to_vec()), &mut last)
                .map(|()| out)
                .map_err(|e| e.kind())
        };
        assert_eq!(
            walk(std::io::ErrorKind::Interrupted),
            Ok(vec![b"a".to_vec(), b"b".to_vec()])
        );
        assert_eq!(
            walk(std::io::ErrorKind::PermissionDenied),
            Err(std::io::ErrorKind::PermissionDenied)
        );
    }

    #[test]
    fn a_shared_journal_is_parsed_again_whenever_its_bytes_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let first = b"{\"event\": \"task_claimed\", \"n\": 1}\n";
        std::fs::write(&path, first).unwrap();
        let read = load_journal_shared(&path).unwrap();
        assert_eq!(*read, load_journal(&path).unwrap());
        // Unchanged bytes share the rows parsed before.
        let again = load_journal_shared(&path).unwrap();
        assert!(Arc::ptr_eq(&read, &again));
        // The same length, rewritten in place with its modification time put back: parsed
        // again, because the bytes differ.
        let stamp = std::fs::metadata(&path).unwrap().modified().unwrap();
        let rewritten = b"{\"event\": \"task_claimed\", \"n\": 2}\n";
        assert_eq!(first.len(), rewritten.len());
        std::fs::write(&path, rewritten).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        let changed = load_journal_shared(&path).unwrap();
        assert!(!Arc::ptr_eq(&read, &changed));
        assert_eq!(changed.rows[0].get("n"), Some(&Value::Int(2.into())));
        assert_eq!(*changed, load_journal(&path).unwrap());
        // An appended row, a torn line, a missing file and a directory read as `load_journal`
        // reads them.
        std::fs::write(
            &path,
            [&rewritten[..], b"{\"event\": \"x\"}\n{torn"].concat(),
        )
        .unwrap();
        assert_eq!(
            *load_journal_shared(&path).unwrap(),
            load_journal(&path).unwrap()
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            *load_journal_shared(&path).unwrap(),
            LoadedJournal::default()
        );
        std::fs::create_dir(&path).unwrap();
        assert!(load_journal_shared(&path).is_err());
        assert!(load_journal(&path).is_err());
    }

    /// The brief load shares what the shared load keeps and declines, unparsed, a journal
    /// past the bound; the shared load parses that one every time.
    #[test]
    fn a_kept_journal_is_the_shared_one_and_a_large_one_is_declined() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        assert_eq!(load_journal_kept(&path).unwrap(), Some(Arc::default()));
        let row = b"{\"event\": \"task_progress\", \"n\": 1}\n";
        std::fs::write(&path, row).unwrap();
        let kept = load_journal_kept(&path).unwrap().unwrap();
        assert!(Arc::ptr_eq(&kept, &load_journal_shared(&path).unwrap()));
        let rows = SHARED_JOURNAL_MAX_BYTES / row.len() + 1;
        std::fs::write(&path, row.repeat(rows)).unwrap();
        assert_eq!(load_journal_kept(&path).unwrap(), None);
        assert_eq!(load_journal_shared(&path).unwrap().rows.len(), rows);
        std::fs::write(&path, row.repeat(rows - 1)).unwrap();
        assert_eq!(
            load_journal_kept(&path).unwrap().unwrap().rows.len(),
            rows - 1
        );
        // How little of a huge journal it reads is measured alone, in `tests/memory.rs`.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        assert!(load_journal_kept(&path).is_err());
    }

    #[test]
    fn universal_newlines_split_like_python_text_mode() {
        let check = |input: &[u8], expect: &[&[u8]]| {
            let got: Vec<Vec<u8>> = lines(input).into_iter().map(|(_, l)| l).collect();
            let expect: Vec<Vec<u8>> = expect.iter().map(|l| l.to_vec()).collect();
            assert_eq!(got, expect, "{input:?}");
        };
        check(b"", &[]);
        check(b"a", &[b"a"]);
        check(b"a\n", &[b"a"]);
        check(b"a\nb", &[b"a", b"b"]);
        check(b"a\r\nb\rc\n", &[b"a", b"b", b"c"]);
        check(b"\n\n", &[b"", b""]);
        check(b"a\r\r\nb", &[b"a", b"", b"b"]);
        check(b"a\n\rb", &[b"a", b"", b"b"]);
    }

    #[test]
    fn crlf_split_across_buffer_boundary_is_one_terminator() {
        let mut input = vec![b'x'; 64 * 1024 - 1];
        input.extend_from_slice(b"\r\ny");
        let got = lines(&input);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], (1, b"y".to_vec()));
    }

    #[test]
    fn classification_of_lines() {
        let input = b"{\"a\": 1}\n\n   \n[1]\nnot json\n\xff\xfe\n{\"b\": 2}\r\n\x00\n\"s\"\n \x0c{\"c\": 3}\x1c";
        let loaded = parse_journal_bytes(input);
        assert_eq!(loaded.rows.len(), 3);
        assert_eq!(loaded.discarded_lines, vec![3, 4, 5, 7, 8]);
        // CPython 3.12 `load_events` on the same bytes: 3 rows, discarded (3,).
        let loaded = parse_journal_bytes(b"{}\r{}\r\r\n[]\n\r{}");
        assert_eq!(loaded.rows.len(), 3);
        assert_eq!(loaded.discarded_lines, vec![3]);
    }

    #[test]
    fn line_boundary_detection() {
        let check = |input: &[u8], expect: bool| {
            assert_eq!(
                scan(input).unwrap().ends_on_line_boundary,
                expect,
                "{input:?}"
            );
        };
        check(b"", true);
        check(b"{}\n", true);
        check(b"{}\r", true);
        check(b"{}", false);
        check(b"{}\n{\"a\"", false);
    }
}
