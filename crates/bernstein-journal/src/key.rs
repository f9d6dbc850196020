//! Locating, loading and creating the audit master key, and deriving per-store keys from it.
//!
//! Bernstein 3.23 keeps one master key outside `.sdd/` so that whoever can write the audit log
//! cannot also read or rotate the key that authenticates it (`FORMATS.md` §1.2). The key file
//! holds 64 lowercase hex characters; the HMAC key is the *stripped file bytes themselves*, never
//! their hex decoding. Per-store keys (`"audit"`, `"lineage"`) are HKDF-SHA256 derivations of it.
//!
//! This module reads no environment variable: the binary fills a [`KeyLocator`] from
//! `$BERNSTEIN_AUDIT_KEY_PATH`, `$XDG_STATE_HOME` and `$HOME` and passes it in.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bernstein_protocol::encoding::hex;
use ring::rand::{SecureRandom, SystemRandom};

use crate::crypto::derive_key;
use crate::{Error, Result};

/// File name of the key under its state directory.
pub const KEY_FILE_NAME: &str = "audit.key";

/// Domain of the audit chain's derived key.
pub const DOMAIN_AUDIT: &str = "audit";

/// Domain of the lineage spine's derived key.
pub const DOMAIN_LINEAGE: &str = "lineage";

/// A key file larger than this is refused as malformed: a real key is 64 bytes, and reading an
/// arbitrarily large file into memory because a path was mistyped helps nobody.
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Permission bits a key file must not carry (group and world access).
const FORBIDDEN_MODE_BITS: u32 = 0o077;

/// Where to look for the audit master key.
///
/// The reference resolves exactly one path and uses it: the first *configured* location in the
/// order explicit → `$BERNSTEIN_AUDIT_KEY_PATH` → `$XDG_STATE_HOME/bernstein/audit.key` →
/// `~/.local/state/bernstein/audit.key`. A configured location whose file is missing is not
/// skipped in favour of a later one: it is reported as missing (read-only loads) or created
/// (`load_or_create`). Falling through would silently authenticate the chain with a different
/// key than the one the reference would use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLocator {
    /// A path given explicitly by the caller (a command-line flag, a test). Used verbatim.
    pub explicit: Option<PathBuf>,
    /// The value of `$BERNSTEIN_AUDIT_KEY_PATH`. An empty value counts as unset; a leading `~`
    /// is expanded with [`KeyLocator::home`].
    pub env_key_path: Option<PathBuf>,
    /// The value of `$XDG_STATE_HOME`. An empty value counts as unset.
    pub xdg_state_home: Option<PathBuf>,
    /// The user's home directory (`$HOME`).
    pub home: Option<PathBuf>,
}

impl KeyLocator {
    /// A locator that uses exactly `path`.
    pub fn at(path: impl Into<PathBuf>) -> KeyLocator {
        KeyLocator {
            explicit: Some(path.into()),
            ..KeyLocator::default()
        }
    }

    /// Every configured location, highest precedence first. The first one is the one in use
    /// (see [`KeyLocator::resolve`]); the rest are listed for diagnostics.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Some(path) = non_empty(&self.explicit) {
            out.push(path.to_path_buf());
        }
        if let Some(path) = non_empty(&self.env_key_path) {
            out.push(self.expand_user(path));
        }
        if let Some(path) = non_empty(&self.xdg_state_home) {
            out.push(self.expand_user(path).join("bernstein").join(KEY_FILE_NAME));
        }
        if let Some(home) = non_empty(&self.home) {
            out.push(
                home.join(".local")
                    .join("state")
                    .join("bernstein")
                    .join(KEY_FILE_NAME),
            );
        }
        out
    }

    /// The one path the key is read from (or created at): the first candidate.
    pub fn resolve(&self) -> Option<PathBuf> {
        self.candidates().into_iter().next()
    }

    /// Python's `Path.expanduser()` for the forms that need no password database: `~` and
    /// `~/rest`. `~user` forms are left as they are.
    fn expand_user(&self, path: &Path) -> PathBuf {
        let Some(home) = non_empty(&self.home) else {
            return path.to_path_buf();
        };
        let mut components = path.components();
        match components.next() {
            Some(std::path::Component::Normal(first)) if first == "~" => {
                home.join(components.as_path())
            }
            _ => path.to_path_buf(),
        }
    }

    fn missing(&self, path: Option<&Path>) -> Error {
        let searched = match path {
            Some(path) => path.display().to_string(),
            None => {
                "no location configured (set $BERNSTEIN_AUDIT_KEY_PATH, $XDG_STATE_HOME or $HOME)"
                    .to_owned()
            }
        };
        Error::KeyMissing { searched }
    }
}

fn non_empty(path: &Option<PathBuf>) -> Option<&Path> {
    path.as_deref().filter(|p| !p.as_os_str().is_empty())
}

/// The audit master key, as the bytes Bernstein feeds to HMAC.
///
/// `Debug` prints the location and length only, never the key.
#[derive(Clone)]
pub struct AuditKey {
    master: Vec<u8>,
    audit_key: [u8; 32],
    path: Option<PathBuf>,
}

impl AuditKey {
    /// Loads the key from the location `locator` resolves to, never creating anything.
    ///
    /// Errors: [`Error::KeyMissing`] when no file exists there, [`Error::KeyPermissions`] when
    /// it grants group or world access, [`Error::KeyMalformed`] when its content cannot be a key.
    pub fn load(locator: &KeyLocator) -> Result<AuditKey> {
        let path = locator.resolve().ok_or_else(|| locator.missing(None))?;
        AuditKey::from_file(&path)
    }

    /// Loads the key from `path`, never creating anything. Same errors as [`AuditKey::load`].
    pub fn from_file(path: &Path) -> Result<AuditKey> {
        let metadata = match fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(Error::KeyMissing {
                    searched: path.display().to_string(),
                });
            }
            Err(err) => return Err(Error::io("stat", path, err)),
        };
        check_permissions(path, &metadata)?;
        let master = read_key_bytes(path)?;
        Ok(AuditKey::with_path(master, Some(path.to_path_buf())))
    }

    /// Loads the key, or creates one if the resolved location holds no file.
    ///
    /// A new key is 64 lowercase hex characters from the system CSPRNG, without newline, mode
    /// 0600. Missing parent directories are created with mode 0700 (existing ones are left as
    /// they are). The file is written to a private temporary name, synced, and then linked into
    /// place, so no reader ever sees a partial key; if another process created the key first,
    /// its key is adopted.
    pub fn load_or_create(locator: &KeyLocator) -> Result<AuditKey> {
        let path = locator.resolve().ok_or_else(|| locator.missing(None))?;
        match fs::metadata(&path) {
            Ok(_) => return AuditKey::from_file(&path),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io("stat", &path, err)),
        }
        create_key_file(&path)?;
        AuditKey::from_file(&path)
    }

    /// A key from bytes already in hand, used exactly as given (no stripping, no checks).
    pub fn from_master_bytes(bytes: impl Into<Vec<u8>>) -> AuditKey {
        AuditKey::with_path(bytes.into(), None)
    }

    fn with_path(master: Vec<u8>, path: Option<PathBuf>) -> AuditKey {
        let audit_key = derive_key(&master, DOMAIN_AUDIT);
        AuditKey {
            master,
            audit_key,
            path,
        }
    }

    /// The master key bytes: the stripped file content, used directly as the scheme-1 HMAC key
    /// and as the HKDF input key material.
    pub fn master(&self) -> &[u8] {
        &self.master
    }

    /// The 32-byte HKDF-SHA256 key for `domain` (no salt, info = `domain`).
    pub fn derived(&self, domain: &str) -> [u8; 32] {
        if domain == DOMAIN_AUDIT {
            self.audit_key
        } else {
            derive_key(&self.master, domain)
        }
    }

    /// The derived `"audit"` key, computed once at load time (the scheme-2 HMAC key).
    pub(crate) fn audit_key(&self) -> &[u8; 32] {
        &self.audit_key
    }

    /// The file the key was read from, when it came from a file.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditKey")
            .field("path", &self.path)
            .field(
                "master",
                &format_args!("<{} bytes redacted>", self.master.len()),
            )
            .finish()
    }
}

impl Drop for AuditKey {
    fn drop(&mut self) {
        // Best effort: overwrite the key material before the allocation is released. Without
        // `unsafe` this cannot be guaranteed against the optimiser, so `black_box` is used to
        // keep the writes observable.
        self.master.iter_mut().for_each(|b| *b = 0);
        self.audit_key.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.master);
        std::hint::black_box(&self.audit_key);
    }
}

fn check_permissions(path: &Path, metadata: &fs::Metadata) -> Result<()> {
    let mode = metadata.mode() & 0o7777;
    if mode & FORBIDDEN_MODE_BITS != 0 {
        return Err(Error::KeyPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Reads the key file and applies Python's `bytes.strip()` (ASCII whitespace), then refuses
/// content that cannot be a key. The reference accepts any bytes; we additionally refuse an
/// empty key, bytes outside printable ASCII (control characters, NUL, non-ASCII, whitespace
/// inside the key) and oversized files, all of which are signs of pointing at the wrong file.
fn read_key_bytes(path: &Path) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|err| Error::io("read", path, err))?;
    let mut raw = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|err| Error::io("read", path, err))?;
    let malformed = |reason: String| Error::KeyMalformed {
        path: path.to_path_buf(),
        reason,
    };
    if raw.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(malformed(format!(
            "the file is larger than {MAX_KEY_FILE_BYTES} bytes"
        )));
    }
    let stripped = python_strip(&raw);
    if stripped.is_empty() {
        return Err(malformed(
            "the file holds no key (empty or whitespace only)".to_owned(),
        ));
    }
    if let Some(pos) = stripped.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(malformed(format!(
            "byte 0x{:02x} at position {pos} is not printable ASCII",
            stripped[pos]
        )));
    }
    Ok(stripped.to_vec())
}

/// Python's `bytes.strip()` with no argument: strips space, `\t`, `\n`, `\r`, `\x0b`, `\x0c`.
fn python_strip(bytes: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let start = bytes.iter().position(|b| !is_ws(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ws(b))
        .map_or(start, |p| p + 1);
    &bytes[start..end]
}

fn create_key_file(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&parent)
        .map_err(|err| Error::io("create directory", &parent, err))?;

    let mut secret = [0u8; 32];
    SystemRandom::new().fill(&mut secret).map_err(|_| {
        Error::io(
            "generate key for",
            path,
            io::Error::other("no system randomness"),
        )
    })?;
    let key_text = hex(&secret);
    secret.iter_mut().for_each(|b| *b = 0);

    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = parent.join(format!(
        ".{KEY_FILE_NAME}.{}.{nanos}.tmp",
        std::process::id()
    ));
    let written = write_private_file(&tmp, key_text.as_bytes());
    let result = written.and_then(|()| match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(()),
        // Another process created the key between our check and the link: its key is as good as
        // ours, and adopting it keeps both processes on one key.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        // Filesystems without hard links: fall back to an exclusive create of the final name,
        // which still never replaces an existing key.
        Err(_) => match write_private_file(path, key_text.as_bytes()) {
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                Ok(())
            }
            other => other,
        },
    });
    let _ = fs::remove_file(&tmp);
    result?;
    sync_dir(&parent);
    Ok(())
}

/// Creates `path` exclusively with mode 0600, writes `content`, re-asserts the mode (umask can
/// only have removed bits) and syncs it.
fn write_private_file(path: &Path, content: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| Error::io("create", path, err))?;
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(|err| Error::io("chmod", path, err))?;
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|err| Error::io("write", path, err))
}

/// Makes a new directory entry durable. Failure is not fatal: the file itself is synced and the
/// entry becomes durable with the next directory sync anyway.
fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_key(dir: &Path, name: &str, content: &[u8], mode: u32) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, content).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn candidates_follow_the_reference_precedence() {
        let locator = KeyLocator {
            explicit: Some("/explicit.key".into()),
            env_key_path: Some("~/env.key".into()),
            xdg_state_home: Some("/xdg".into()),
            home: Some("/home/u".into()),
        };
        assert_eq!(
            locator.candidates(),
            vec![
                PathBuf::from("/explicit.key"),
                PathBuf::from("/home/u/env.key"),
                PathBuf::from("/xdg/bernstein/audit.key"),
                PathBuf::from("/home/u/.local/state/bernstein/audit.key"),
            ]
        );
        assert_eq!(locator.resolve(), Some(PathBuf::from("/explicit.key")));
    }

    #[test]
    fn empty_settings_count_as_unset() {
        let locator = KeyLocator {
            explicit: None,
            env_key_path: Some("".into()),
            xdg_state_home: Some("".into()),
            home: Some("/h".into()),
        };
        assert_eq!(
            locator.resolve(),
            Some(PathBuf::from("/h/.local/state/bernstein/audit.key"))
        );
        assert_eq!(KeyLocator::default().resolve(), None);
        assert!(matches!(
            AuditKey::load(&KeyLocator::default()),
            Err(Error::KeyMissing { .. })
        ));
    }

    #[test]
    fn a_missing_configured_key_is_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let home_key_dir = dir.path().join(".local/state/bernstein");
        fs::create_dir_all(&home_key_dir).unwrap();
        write_key(&home_key_dir, "audit.key", b"homekey", 0o600);
        let locator = KeyLocator {
            env_key_path: Some(dir.path().join("absent.key")),
            home: Some(dir.path().to_path_buf()),
            ..KeyLocator::default()
        };
        assert!(matches!(
            AuditKey::load(&locator),
            Err(Error::KeyMissing { .. })
        ));
    }

    #[test]
    fn key_is_the_stripped_ascii_never_hex_decoded() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_key(dir.path(), "k", b" \t3f1c\r\n\x0b", 0o600);
        let key = AuditKey::from_file(&path).unwrap();
        assert_eq!(key.master(), b"3f1c");
        assert_eq!(key.path(), Some(path.as_path()));
        assert_eq!(key.derived(DOMAIN_AUDIT), derive_key(b"3f1c", "audit"));
        assert_eq!(key.derived(DOMAIN_LINEAGE), derive_key(b"3f1c", "lineage"));
    }

    #[test]
    fn group_or_world_bits_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o640, 0o604, 0o660, 0o644] {
            let path = write_key(dir.path(), &format!("k{mode:o}"), b"abc", mode);
            match AuditKey::from_file(&path) {
                Err(Error::KeyPermissions { mode: got, .. }) => assert_eq!(got, mode),
                other => panic!("mode {mode:o}: {other:?}"),
            }
        }
        let ok = write_key(dir.path(), "k400", b"abc", 0o400);
        assert!(AuditKey::from_file(&ok).is_ok());
    }

    #[test]
    fn broken_key_files_are_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, &[u8]); 5] = [
            ("empty", b""),
            ("blank", b" \n\t\n"),
            ("nul", b"ab\0cd"),
            ("utf8", "kéy".as_bytes()),
            ("inner_space", b"ab cd"),
        ];
        for (name, content) in cases {
            let path = write_key(dir.path(), name, content, 0o600);
            assert!(
                matches!(AuditKey::from_file(&path), Err(Error::KeyMalformed { .. })),
                "{name}"
            );
        }
        let huge = write_key(dir.path(), "huge", &vec![b'a'; 5000], 0o600);
        assert!(matches!(
            AuditKey::from_file(&huge),
            Err(Error::KeyMalformed { .. })
        ));
    }

    #[test]
    fn a_directory_is_an_io_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("keydir");
        fs::create_dir(&sub).unwrap();
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(AuditKey::from_file(&sub), Err(Error::Io { .. })));
    }

    #[test]
    fn load_or_create_writes_a_private_hex_key_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/bernstein/audit.key");
        let locator = KeyLocator::at(&path);
        assert!(matches!(
            AuditKey::load(&locator),
            Err(Error::KeyMissing { .. })
        ));
        let created = AuditKey::load_or_create(&locator).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 64);
        assert!(bernstein_protocol::encoding::is_lower_hex(
            std::str::from_utf8(&bytes).unwrap(),
            64
        ));
        assert_eq!(created.master(), bytes.as_slice());
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        let again = AuditKey::load_or_create(&locator).unwrap();
        assert_eq!(again.master(), created.master());
        // Only the key itself is left behind: no temporary files.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("audit.key")]);
    }

    #[test]
    fn debug_never_prints_the_key() {
        let key = AuditKey::from_master_bytes(b"supersecretvalue".to_vec());
        let printed = format!("{key:?}");
        assert!(!printed.contains("supersecret"), "{printed}");
        assert!(printed.contains("16 bytes redacted"), "{printed}");
    }
}
