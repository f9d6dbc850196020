//! Opening files whose path a caller influences, for reading, without ever blocking on them.
//!
//! `open(2)` of a FIFO for reading waits for a writer, and a read of a FIFO or a character
//! device can wait for ever; a capsule, journal or lineage path that a hostile process replaced
//! with one would freeze the call (and, on an async worker, the runtime). These helpers open
//! with `O_NONBLOCK` (so the open itself returns at once), then `fstat` the open descriptor and
//! refuse anything that is not a regular file before a byte is read. Checking the descriptor,
//! not the path, leaves no window for a swap between the check and the read.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

/// The error text of a refused non-regular file.
pub const NOT_REGULAR: &str = "not a regular file (a FIFO, device or socket is never read)";

/// Opens `path` for reading. A directory is refused with [`io::ErrorKind::IsADirectory`],
/// anything else that is not a regular file with [`io::ErrorKind::InvalidInput`] and
/// [`NOT_REGULAR`]; a missing file is [`io::ErrorKind::NotFound`] as usual.
///
/// # Errors
///
/// As above, or whatever `open(2)` / `fstat(2)` report.
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_regular_sized(path).map(|(file, _)| file)
}

/// [`open_regular`], with the file's size when it was opened (from the same `fstat`), so a
/// caller reading it whole can size its buffer and read it in one `read(2)`.
///
/// # Errors
///
/// As [`open_regular`].
pub fn open_regular_sized(path: &Path) -> io::Result<(File, u64)> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Ok((File::from(fd), u64::try_from(stat.st_size).unwrap_or(0))),
        FileType::Directory => Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        )),
        _ => Err(io::Error::new(io::ErrorKind::InvalidInput, NOT_REGULAR)),
    }
}

/// Reads the whole of `path`, refusing non-regular files as [`open_regular`] does.
///
/// # Errors
///
/// As [`open_regular`], or a failed read.
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let (mut file, size) = open_regular_sized(path)?;
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_directories_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let refused = read_regular(&fifo).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(refused.to_string(), NOT_REGULAR);
        let refused = read_regular(dir.path()).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::IsADirectory);
        let refused = read_regular(Path::new("/dev/null")).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
        let missing = read_regular(&dir.path().join("missing")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        let file = dir.path().join("file");
        std::fs::write(&file, b"bytes").unwrap();
        assert_eq!(read_regular(&file).unwrap(), b"bytes");
    }
}
