//! Durable file primitives: atomic replacement, directory syncs, advisory lock files, the clock.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};
use std::time::{SystemTime, UNIX_EPOCH};

use bernstein_protocol::encoding::hex;
use ring::rand::{SecureRandom, SystemRandom};

use crate::error::Error;

/// Permission bits for every file the store creates: runtime state may carry task text, so it is
/// owner-only, as the reference's `write_atomic_bytes` creates it.
pub(crate) const FILE_MODE: u32 = 0o600;

/// The current wall-clock time in float Unix seconds (Python's `time.time()`).
pub(crate) fn now_unix() -> f64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(elapsed) => elapsed.as_secs_f64(),
        // A clock set before 1970 cannot be represented; 0.0 keeps every time field valid.
        Err(_) => 0.0,
    }
}

/// Creates `dir` and its parents, fsyncing the parent of each directory created, so nothing
/// acknowledged inside it can vanish with its directory in a crash.
pub(crate) fn create_dir_all(dir: &Path) -> Result<(), Error> {
    bernstein_journal::durable::create_dir_all_durable(dir)
        .map_err(|e| Error::storage("create directory", dir, &e))
}

/// Makes the directory entries inside `dir` durable (a new file, a rename).
pub(crate) fn sync_dir(dir: &Path) -> Result<(), Error> {
    let handle = File::open(dir).map_err(|e| Error::storage("open directory", dir, &e))?;
    handle
        .sync_all()
        .map_err(|e| Error::storage("fsync directory", dir, &e))
}

/// Replaces `path` with `bytes` atomically and durably: a uniquely named temporary file beside
/// it is written and fsynced, renamed over `path`, and the directory is fsynced, so a reader or
/// a crash sees either the old file or the new one, never a mix. The temporary file is removed
/// when any step fails.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// [`write_atomic`] with the content streamed by `fill` into a buffered writer, so a large file
/// (a compacted task log) is never held in memory whole. `fill` may fail with its own error,
/// which is returned after the temporary file is removed.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Error> {
    let dir = parent_of(path)?;
    create_dir_all(&dir)?;
    let temp = temp_path_for(path)?;
    let result = write_temp_and_rename(&temp, path, fill);
    if result.is_err() {
        // The temporary name is ours alone, so removing it cannot touch anyone else's file.
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_dir(&dir)
}

fn write_temp_and_rename(
    temp: &Path,
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), Error> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(temp)
        .map_err(|e| Error::storage("create", temp, &e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    fill(&mut out).map_err(|e| Error::storage("write", temp, &e))?;
    let file = out
        .into_inner()
        .map_err(|e| Error::storage("write", temp, e.error()))?;
    file.sync_all()
        .map_err(|e| Error::storage("fsync", temp, &e))?;
    drop(file);
    fs::rename(temp, path).map_err(|e| Error::storage("rename into place", path, &e))
}

/// `<path>.tmp.<pid>.<8 random hex>`, the reference's temporary naming.
fn temp_path_for(path: &Path) -> Result<PathBuf, Error> {
    let mut random = [0u8; 4];
    SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| Error::Randomness)?;
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".tmp.{}.{}", std::process::id(), hex(&random)));
    Ok(PathBuf::from(name))
}

/// The directory holding `path`.
pub(crate) fn parent_of(path: &Path) -> Result<PathBuf, Error> {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::Storage {
            operation: "locate the directory of",
            path: path.to_path_buf(),
            kind: std::io::ErrorKind::InvalidInput,
            message: "the path has no parent directory".to_owned(),
        })
}

/// The sending end of the closer thread's queue; `None` when the thread could not be started.
static CLOSER: OnceLock<Option<Sender<File>>> = OnceLock::new();

/// `(st_dev, st_ino)` of each file the closer thread has closed, for tests to find theirs
/// among the files other tests hand over at the same time.
#[cfg(test)]
static CLOSED_BY_CLOSER: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// Closes `file` on the store's closer thread (`bernstein-closer`, started on first use) rather
/// than on the caller's.
///
/// Closing the last descriptor of a file that was replaced or removed frees its blocks, and on
/// a large file that is work the caller should not wait for: a 30 MB backlog replaced by
/// another process took 6 ms to free, inside the store lock, when the tracker let go of it.
/// Nothing waits on the close, so deferring it changes no result. When the thread cannot be
/// started, the file is closed here.
pub(crate) fn close_off_the_call_path(file: File) {
    let sender = CLOSER.get_or_init(|| {
        let (sender, receiver) = mpsc::channel::<File>();
        std::thread::Builder::new()
            .name("bernstein-closer".to_owned())
            .spawn(move || {
                for file in receiver {
                    #[cfg(test)]
                    let identity = file.metadata().map(|m| {
                        use std::os::unix::fs::MetadataExt;
                        (m.dev(), m.ino())
                    });
                    drop(file);
                    #[cfg(test)]
                    if let Ok(identity) = identity {
                        CLOSED_BY_CLOSER
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(identity);
                    }
                }
            })
            .map_err(|e| {
                tracing::debug!(
                    target: "bernstein_tasks::embedded",
                    "the closer thread did not start (replaced files close on the caller): {e}"
                );
            })
            .ok()
            .map(|_| sender)
    });
    if let Some(sender) = sender
        && let Err(mpsc::SendError(file)) = sender.send(file)
    {
        drop(file);
    }
}

/// `(st_dev, st_ino)` of each file the closer thread has closed so far, in order. An inode
/// number may come back once its file is closed, so a test looks only past the length it saw
/// while it still held its file.
#[cfg(test)]
pub(crate) fn closed_by_closer() -> Vec<(u64, u64)> {
    CLOSED_BY_CLOSER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// An advisory `flock` lock file. The lock is taken per operation and released when the guard
/// drops, so a crashed holder releases it with its descriptor.
#[derive(Debug)]
pub(crate) struct LockFile {
    path: PathBuf,
    file: File,
}

impl LockFile {
    /// Opens (creating, owner-only) the lock file at `path`. Never truncates it: the reference
    /// opens its lock files with `a+b` and so do we.
    /// On a read-only file system an existing lock file is opened for reading: `flock` works
    /// on any descriptor, so readers still exclude writers of other mounts, and the store can
    /// answer reads while every write is refused with the file system's error.
    pub(crate) fn open(path: &Path) -> Result<LockFile, Error> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(path)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::ReadOnlyFilesystem => OpenOptions::new().read(true).open(path),
                _ => Err(e),
            })
            .map_err(|e| Error::storage("open lock file", path, &e))?;
        Ok(LockFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Blocks until this process holds the lock exclusively.
    pub(crate) fn exclusive(&self) -> Result<LockGuard<'_>, Error> {
        self.file
            .lock()
            .map_err(|e| Error::storage("lock", &self.path, &e))?;
        Ok(LockGuard { lock: self })
    }

    /// Blocks until this process holds the lock shared (other readers may hold it too).
    pub(crate) fn shared(&self) -> Result<LockGuard<'_>, Error> {
        self.file
            .lock_shared()
            .map_err(|e| Error::storage("lock", &self.path, &e))?;
        Ok(LockGuard { lock: self })
    }

    /// Takes the lock shared if no other process holds it exclusively right now; `None` when
    /// taking it would wait.
    pub(crate) fn try_shared(&self) -> Result<Option<LockGuard<'_>>, Error> {
        match self.file.try_lock_shared() {
            Ok(()) => Ok(Some(LockGuard { lock: self })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::storage("lock", &self.path, &e)),
        }
    }
}

/// Holds a [`LockFile`] lock until dropped.
#[derive(Debug)]
pub(crate) struct LockGuard<'a> {
    lock: &'a LockFile,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        // Unlocking a descriptor we hold cannot meaningfully fail; if it did, closing the
        // descriptor (when the store drops) still releases the lock.
        let _ = self.lock.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_is_the_wall_clock_in_unix_seconds() {
        let before = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let now = now_unix();
        assert!((now - before).abs() < 60.0, "{now} against {before}");
    }

    #[test]
    fn a_directory_that_cannot_be_opened_cannot_be_synced() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = sync_dir(&missing).unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
        sync_dir(dir.path()).unwrap();
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("file.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["file.json"]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            FILE_MODE
        );
    }

    #[test]
    fn atomic_write_into_a_missing_parent_that_cannot_be_created_fails_cleanly() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        fs::write(&blocker, b"x").unwrap();
        let err = write_atomic(&blocker.join("child.json"), b"y").unwrap_err();
        assert_eq!(err.code(), "storage");
        assert_eq!(fs::read(&blocker).unwrap(), b"x");
    }
}
