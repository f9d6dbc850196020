//! The content-addressed blob store under `.sdd/evidence/blobs/<hex[:2]>/<hex>` (the
//! reference's `EvidenceStore`).
//!
//! A blob's name is the SHA-256 of its bytes, so a stored file that was edited is detected by
//! rehashing it. Writes go to a temporary file in the destination directory, are fsynced, and
//! are renamed into place (then the directory is fsynced), so a crash never leaves a torn blob
//! under its address. Missing directories are created with their parents fsynced, and a blob
//! found already stored has its directory entries fsynced before the caller acknowledges it
//! (its writer may have died first). Storing the same bytes twice writes once.
//!
//! Unlike the reference, which derives the file name from whatever follows `sha256:` in a
//! journal row, every address is checked to be `sha256:` plus 64 lowercase hex digits before it
//! names a file, and the path goes through the project's containment barrier: a tampered row
//! cannot make a verifier read outside the store.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bernstein_protocol::encoding::is_lower_hex;

use crate::crypto::sha256_hex;
use crate::durable::{create_dir_all_durable, ensure_entry_durable};
use crate::run_journal::contained_path;
use crate::{Error, Result};

/// The prefix of every content address.
pub const CONTENT_HASH_PREFIX: &str = "sha256:";

/// `sha256:<hex>` of `bytes`.
pub fn content_address(bytes: &[u8]) -> String {
    format!("{CONTENT_HASH_PREFIX}{}", sha256_hex(bytes))
}

/// The 64 hex digits of a well-formed content address, or `None`.
pub fn address_hex(content_hash: &str) -> Option<&str> {
    content_hash
        .strip_prefix(CONTENT_HASH_PREFIX)
        .filter(|hex| is_lower_hex(hex, 64))
}

/// `<project_root>/.sdd/evidence/blobs`, unresolved.
pub fn blobs_dir(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join("evidence").join("blobs")
}

/// What a stored blob looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobState {
    /// No file at the address.
    Absent,
    /// The file rehashes to its address.
    Intact(Vec<u8>),
    /// The file's bytes hash to something else (carried as `sha256:<hex>`).
    Corrupt {
        /// The address the bytes actually have.
        actual: String,
        /// The bytes.
        bytes: Vec<u8>,
    },
}

/// What [`BlobStore::put`] stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlob {
    /// `sha256:<hex>` of the bytes.
    pub content_hash: String,
    /// Number of bytes stored.
    pub size: usize,
    /// The file.
    pub path: PathBuf,
    /// Whether this call created the file (false when identical bytes were already stored).
    pub created: bool,
}

/// The blob store of one project.
#[derive(Debug, Clone)]
pub struct BlobStore {
    project_root: PathBuf,
}

impl BlobStore {
    /// The store under `<project_root>/.sdd/evidence/blobs`. Opening does no IO.
    pub fn for_project(project_root: &Path) -> BlobStore {
        BlobStore {
            project_root: project_root.to_path_buf(),
        }
    }

    /// The containment-checked file of `content_hash`.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] when the address is not `sha256:` plus 64 lowercase hex digits;
    /// [`Error::Containment`] when the store resolves outside the project.
    pub fn path_for(&self, content_hash: &str) -> Result<PathBuf> {
        let hex = address_hex(content_hash).ok_or_else(|| Error::Malformed {
            what: "content hash",
            reason: format!("{content_hash:?} is not sha256:<64 lowercase hex digits>"),
        })?;
        contained_path(
            &self.project_root,
            &blobs_dir(&self.project_root),
            &[&hex[..2], hex],
        )
    }

    /// Reads the blob at `content_hash` and classifies it. A directory or other non-file at the
    /// address reads as absent, as `Path.is_file()` does in the reference.
    ///
    /// # Errors
    ///
    /// As [`BlobStore::path_for`], or [`Error::Io`] when an existing file cannot be read.
    pub fn state(&self, content_hash: &str) -> Result<BlobState> {
        let path = self.path_for(content_hash)?;
        if !path.is_file() {
            return Ok(BlobState::Absent);
        }
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(BlobState::Absent),
            Err(err) => return Err(Error::io("read", &path, err)),
        };
        let actual = content_address(&bytes);
        if actual == content_hash {
            Ok(BlobState::Intact(bytes))
        } else {
            Ok(BlobState::Corrupt { actual, bytes })
        }
    }

    /// Stores `bytes` under their address. Idempotent: intact identical bytes are not
    /// rewritten.
    ///
    /// # Errors
    ///
    /// [`Error::EvidenceUnusable`] when a file already at the address does not rehash to it
    /// (overwriting it would erase the evidence of tampering); [`Error::Containment`] or
    /// [`Error::Io`] otherwise.
    pub fn put(&self, bytes: &[u8]) -> Result<StoredBlob> {
        let content_hash = content_address(bytes);
        let path = self.path_for(&content_hash)?;
        match self.state(&content_hash)? {
            BlobState::Intact(_) => {
                // Its writer may have died before fsyncing the directory; the caller is about
                // to acknowledge a post that depends on it.
                ensure_entry_durable(&path).map_err(|err| Error::io("fsync", &path, err))?;
                return Ok(StoredBlob {
                    content_hash,
                    size: bytes.len(),
                    path,
                    created: false,
                });
            }
            BlobState::Corrupt { actual, .. } => {
                return Err(Error::EvidenceUnusable {
                    path,
                    reason: format!(
                        "the stored blob hashes to {actual}, not to its address; refusing to overwrite it"
                    ),
                });
            }
            BlobState::Absent => {}
        }
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| Error::Containment {
                path: path.clone(),
                reason: "the blob path has no parent directory".to_owned(),
            })?;
        create_dir_all_durable(&dir).map_err(|err| Error::io("create", &dir, err))?;
        // Re-check once the directories exist, so a symlink planted meanwhile is refused too.
        let path = self.path_for(&content_hash)?;
        write_atomically(&dir, &path, bytes)?;
        Ok(StoredBlob {
            content_hash,
            size: bytes.len(),
            path,
            created: true,
        })
    }
}

/// A per-process counter that keeps concurrent writers' temporary names apart.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` to a fresh temporary file in `dir`, fsyncs it, renames it to `target` and
/// fsyncs `dir`. The temporary file is removed when any step fails.
pub(crate) fn write_atomically(dir: &Path, target: &Path, bytes: &[u8]) -> Result<()> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|err| Error::io("create", &temp, err))?;
        file.write_all(bytes)
            .map_err(|err| Error::io("write", &temp, err))?;
        file.sync_all()
            .map_err(|err| Error::io("fsync", &temp, err))?;
        fs::rename(&temp, target).map_err(|err| Error::io("rename into", target, err))?;
        File::open(dir)
            .and_then(|handle| handle.sync_all())
            .map_err(|err| Error::io("fsync", dir, err))
    })();
    if result.is_err() {
        // Best effort: the rename may already have consumed the temporary file.
        let _ = fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_is_idempotent_and_addressed() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::for_project(dir.path());
        let first = store.put(b"hello").unwrap();
        assert!(first.created);
        assert_eq!(
            first.content_hash,
            "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert!(first.path.ends_with(
            ".sdd/evidence/blobs/2c/2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        ));
        let second = store.put(b"hello").unwrap();
        assert!(!second.created);
        let leftovers: Vec<_> = fs::read_dir(first.path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_corrupt_blob_is_reported_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::for_project(dir.path());
        let stored = store.put(b"hello").unwrap();
        fs::write(&stored.path, b"hellO").unwrap();
        assert!(matches!(
            store.state(&stored.content_hash).unwrap(),
            BlobState::Corrupt { .. }
        ));
        assert!(matches!(
            store.put(b"hello"),
            Err(Error::EvidenceUnusable { .. })
        ));
        assert_eq!(fs::read(&stored.path).unwrap(), b"hellO");
    }

    #[test]
    fn malformed_addresses_never_name_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = BlobStore::for_project(dir.path());
        for bad in [
            "sha256:../../../etc/passwd",
            "sha256:ABCDEF",
            "md5:00",
            &format!("sha256:{}", "A".repeat(64)),
        ] {
            assert!(
                matches!(store.state(bad), Err(Error::Malformed { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            store.state(&content_address(b"x")).unwrap(),
            BlobState::Absent
        );
    }

    /// A read failure other than "not found" must surface as an error, not pass for an absent
    /// blob (a verifier would otherwise report unreadable evidence as merely missing). Running
    /// as root defeats permission bits, so the failure is provoked by a sparse file whose size
    /// hint is too large to allocate: `fs::read` then fails with `OutOfMemory` without reading a
    /// byte. That needs a filesystem that accepts exabyte-sized sparse files, which tmpfs does.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_blob_that_cannot_be_read_is_an_error_not_absent() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let store = BlobStore::for_project(dir.path());
        let stored = store.put(b"hello").unwrap();
        OpenOptions::new()
            .write(true)
            .open(&stored.path)
            .unwrap()
            .set_len(1 << 62)
            .unwrap();
        let outcome = store.state(&stored.content_hash);
        assert!(
            matches!(&outcome, Err(Error::Io { op: "read", path, .. }) if *path == stored.path),
            "{outcome:?}"
        );
    }
}
