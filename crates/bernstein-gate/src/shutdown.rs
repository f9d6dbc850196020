//! The containment barrier in front of the `SHUTDOWN` signal (`mcp/signal_paths.py`).
//!
//! `bernstein_shutdown_orchestrator` turns a caller-supplied workdir into a write of
//! `<root>/.sdd/runtime/signals/SHUTDOWN`. Without a barrier that is an arbitrary
//! directory-creation and file-write primitive, so the path is checked in this order, and the
//! caller writes only through the path returned:
//!
//! 1. **Shape, with no filesystem call.** A value that is not text, or longer than
//!    [`MAX_PATH_BYTES`] in UTF-8, cannot address a directory and is refused on its size alone,
//!    so an over-long workdir is never walked component by component. A NUL cannot be stored in
//!    a path either and is refused here too.
//! 2. **Resolve.** The workdir is resolved like Python's `Path.resolve()`: made absolute against
//!    the working directory, `..` applied, and every symlink followed; components that do not
//!    exist are kept as written.
//! 3. **Existing project.** The resolved root must already hold a `.sdd` directory: the tool
//!    stops a project that exists and never creates a project tree.
//! 4. **Containment.** `.sdd/runtime/signals/SHUTDOWN` is joined onto the root and resolved
//!    again; a `.sdd`, `runtime`, `signals` or `SHUTDOWN` symlink that leads outside the
//!    resolved root (the root followed by a separator, so `<root>-evil` does not pass) is
//!    refused, as is a result longer than [`MAX_PATH_BYTES`].
//!
//! Naming a root is allowed: any other Bernstein project on the machine is a legitimate target.
//! The barrier is against a workdir that reaches past the root it names.
//!
//! [`shutdown_signal_path`] reads the filesystem (`lstat`, `stat`, `readlink`, the working
//! directory) and never writes it: a refused call leaves no trace.
//!
//! A check followed by a write through a path is a race: between the two, another process can
//! swap `SHUTDOWN` (or `signals`, or `runtime`) for a symlink to any file or directory, and a
//! write that follows links then lands there. [`send_shutdown_signal_from`] therefore does the
//! write itself, after the barrier, relative to a directory handle opened on the resolved root:
//! each of `.sdd`, `runtime` and `signals` is opened with `O_NOFOLLOW | O_DIRECTORY` (the two
//! lower ones created first with `mkdirat`, which never follows a link), and `SHUTDOWN` is opened
//! with `O_NOFOLLOW | O_NONBLOCK`, checked with `fstat` to be a regular file with one link, then
//! truncated, written and synced. No link below the root is followed at write time, even one
//! that stays inside the root (the barrier's check accepts those, as the reference does; the
//! write refuses them, because following a link is exactly what the race exploits).
//!
//! Two edge cases differ from the reference on purpose, because the reference lets a raw
//! exception escape instead of answering: a symlink loop in the workdir itself is refused as
//! unaddressable, and so is a chain of more than [`MAX_SYMLINK_DEPTH`] nested links. A loop
//! below the root (say `runtime -> runtime`) is not an escape and passes, as in the reference;
//! the caller's write then fails.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use bernstein_protocol::pyjson::{Object, Value};

use crate::error::Error;
use bernstein_protocol::pyrepr::python_str_repr;

/// Longest path, in bytes (`PATH_MAX` on Linux; the reference's `MAX_PATH_BYTES`).
pub const MAX_PATH_BYTES: usize = 4096;

/// The directory that makes a workdir a Bernstein project root.
pub const SDD_DIR_NAME: &str = ".sdd";

/// The fixed segments from the project root down to the signal file.
pub const SHUTDOWN_SEGMENTS: [&str; 4] = [SDD_DIR_NAME, "runtime", "signals", "SHUTDOWN"];

/// The hint of every stdio barrier refusal.
pub const REFUSAL_HINT: &str = "workdir must be an existing Bernstein project root";

/// The hint of a stdio answer when the signal could not be written after the barrier passed.
pub const WRITE_FAILURE_HINT: &str = "Could not write shutdown signal";

/// What the stdio server writes into the signal file.
pub const STDIO_SIGNAL_CONTENT: &str = "mcp-stop\n";

/// What the remote transport writes into the signal file.
pub const REMOTE_SIGNAL_CONTENT: &str = "mcp-remote-stop\n";

/// The `status` of a successful shutdown answer.
pub const SIGNAL_SENT: &str = "shutdown signal sent";

/// Most symlinks resolved inside one another before the workdir is refused as unaddressable.
pub const MAX_SYMLINK_DEPTH: usize = 256;

/// The workdir argument as it arrived, before any check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workdir<'a> {
    /// Text: the only shape that can name a path.
    Text(&'a str),
    /// Raw bytes (only a Rust host can pass these; JSON has no bytes).
    Bytes,
    /// Any other value, named by the Python type the reference reports.
    Other {
        /// `int`, `float`, `bool`, `NoneType`, `list` or `dict`.
        python_type: &'static str,
    },
}

impl<'a> Workdir<'a> {
    /// The workdir as a JSON argument carries it.
    pub fn from_value(value: &'a Value) -> Workdir<'a> {
        let python_type = match value {
            Value::Str(text) => return Workdir::Text(text),
            Value::Null => "NoneType",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Array(_) => "list",
            Value::Object(_) => "dict",
        };
        Workdir::Other { python_type }
    }
}

impl<'a> From<&'a str> for Workdir<'a> {
    fn from(text: &'a str) -> Workdir<'a> {
        Workdir::Text(text)
    }
}

/// The contained `SHUTDOWN` path for the project root named by `workdir`, resolving a relative
/// workdir against the process's working directory.
pub fn shutdown_signal_path(workdir: Workdir<'_>) -> Result<PathBuf, Error> {
    signal_path(workdir, std::env::current_dir).map(|(_, candidate)| candidate)
}

/// As [`shutdown_signal_path`], resolving a relative workdir against `cwd` instead of the
/// process's working directory. `cwd` must be absolute and free of symlinks, as `getcwd`
/// returns it.
pub fn shutdown_signal_path_from(workdir: Workdir<'_>, cwd: &Path) -> Result<PathBuf, Error> {
    signal_path(workdir, || Ok(cwd.to_path_buf())).map(|(_, candidate)| candidate)
}

/// Runs the barrier on `workdir` (a relative one resolved against `cwd`, which must be absolute
/// and free of symlinks), then writes `content` into the project's `SHUTDOWN` signal without
/// following any link below the resolved root (see the module docs), and returns the path
/// written.
///
/// # Errors
///
/// Every barrier refusal of [`shutdown_signal_path_from`]; [`Error::Symlink`] when an entry on
/// the way is a symlink (or not a directory) at write time; [`Error::NotARegularFile`] when
/// `SHUTDOWN` is a FIFO, device, socket, directory or a file with other hard links;
/// [`Error::NotAProjectRoot`] when `.sdd` vanished after the check; [`Error::Write`] when the
/// filesystem refuses the write itself.
pub fn send_shutdown_signal_from(
    workdir: Workdir<'_>,
    cwd: &Path,
    content: &str,
) -> Result<PathBuf, Error> {
    let (root, _) = signal_path(workdir, || Ok(cwd.to_path_buf()))?;
    let workdir_repr = || match workdir {
        Workdir::Text(raw) => python_str_repr(raw),
        // The barrier refuses every other shape before this point.
        Workdir::Bytes | Workdir::Other { .. } => String::new(),
    };
    write_signal(&root, content, &workdir_repr)?;
    let mut path = root;
    path.extend(SHUTDOWN_SEGMENTS);
    Ok(path)
}

/// The write half of [`send_shutdown_signal_from`]: every step relative to a directory handle,
/// no link followed.
fn write_signal(
    root: &Path,
    content: &str,
    workdir_repr: &dyn Fn() -> String,
) -> Result<(), Error> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let [sdd, runtime, signals, file_name] = SHUTDOWN_SEGMENTS;
    let mut entry = PathBuf::new();
    let not_followed = |entry: &Path| Error::Symlink {
        workdir_repr: workdir_repr(),
        entry: entry.display().to_string(),
    };
    let write_error = |entry: &Path, errno: Errno| Error::Write {
        entry: entry.display().to_string(),
        reason: io::Error::from(errno).to_string(),
    };
    let mut dir: OwnedFd = match rustix::fs::openat(rustix::fs::CWD, root, dir_flags, Mode::empty())
    {
        Ok(fd) => fd,
        Err(Errno::LOOP | Errno::NOTDIR) => return Err(not_followed(Path::new("."))),
        Err(errno) => return Err(write_error(Path::new("."), errno)),
    };
    for name in [sdd, runtime, signals] {
        entry.push(name);
        // `.sdd` is never created: the tool stops a project that exists. `mkdirat` does not
        // follow a link in the last component, so it creates inside `dir` or reports EEXIST.
        if name != sdd {
            match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(write_error(&entry, errno)),
            }
        }
        dir = match rustix::fs::openat(&dir, name, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(not_followed(&entry)),
            Err(Errno::NOENT) if name == sdd => {
                return Err(Error::NotAProjectRoot {
                    workdir_repr: workdir_repr(),
                });
            }
            Err(errno) => return Err(write_error(&entry, errno)),
        };
    }
    entry.push(file_name);
    // O_NONBLOCK: opening a FIFO for writing must not wait for a reader. No O_TRUNC yet: the
    // file is truncated only once it is known to be a regular file of its own.
    let file_flags = OFlags::WRONLY
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::NOCTTY
        | OFlags::CLOEXEC;
    let not_regular = || Error::NotARegularFile {
        workdir_repr: workdir_repr(),
    };
    let fd = match rustix::fs::openat(&dir, file_name, file_flags, Mode::from_raw_mode(0o666)) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(not_followed(&entry)),
        // A FIFO without a reader, or a directory.
        Err(Errno::NXIO | Errno::ISDIR) => return Err(not_regular()),
        Err(errno) => return Err(write_error(&entry, errno)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|errno| write_error(&entry, errno))?;
    // A second hard link would make the file reachable from outside the root, so a write would
    // change a file the caller does not own through this project.
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile || stat.st_nlink != 1 {
        return Err(not_regular());
    }
    rustix::fs::ftruncate(&fd, 0).map_err(|errno| write_error(&entry, errno))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(content.as_bytes())
        .and_then(|()| file.sync_data())
        .map_err(|err| Error::Write {
            entry: entry.display().to_string(),
            reason: err.to_string(),
        })
}

/// The stdio success answer: `{"status": "shutdown signal sent", "path": <signal path>}`.
/// A path that is not valid UTF-8 is shown with replacement characters.
pub fn signal_sent(path: &Path) -> Object {
    Object::new()
        .with("status", SIGNAL_SENT)
        .with("path", path.to_string_lossy().into_owned())
}

/// The barrier: the resolved root and the resolved, contained signal path under it.
fn signal_path(
    workdir: Workdir<'_>,
    cwd: impl FnOnce() -> io::Result<PathBuf>,
) -> Result<(PathBuf, PathBuf), Error> {
    let raw = screen(workdir)?;
    let unaddressable = || Error::Unaddressable {
        workdir_repr: python_str_repr(raw),
    };
    // A NUL cannot be part of any path the kernel accepts; Python's resolve fails on it with
    // ValueError, and the barrier turns that into this refusal.
    if raw.contains('\0') {
        return Err(unaddressable());
    }
    let workdir_path = Path::new(raw);
    let start = if workdir_path.has_root() {
        PathBuf::new()
    } else {
        cwd().map_err(|_| unaddressable())?
    };
    let mut resolver = Resolver::default();
    let (root, complete) = resolver
        .join_real(start, workdir_path, 0)
        .map_err(|_| unaddressable())?;
    // An unfinished resolution means a symlink loop. Python's resolve then stats the path and
    // raises on the loop; where the loop was folded away by a later `..` the stat succeeds and
    // the path is used as it stands.
    if !complete && std::fs::metadata(&root).is_err() {
        return Err(unaddressable());
    }
    let is_project = std::fs::metadata(root.join(SDD_DIR_NAME)).is_ok_and(|m| m.is_dir());
    if !is_project {
        return Err(Error::NotAProjectRoot {
            workdir_repr: python_str_repr(raw),
        });
    }
    let candidate = contained_signal_path(&root).map_err(|failure| match failure {
        Containment::Unresolvable => unaddressable(),
        Containment::Escapes => Error::Escapes {
            workdir_repr: python_str_repr(raw),
        },
    })?;
    Ok((root, candidate))
}

/// Step 1: the shape screen. No filesystem call happens before this passes.
fn screen(workdir: Workdir<'_>) -> Result<&str, Error> {
    match workdir {
        Workdir::Other { python_type } => Err(Error::NotAPath { python_type }),
        Workdir::Bytes => Err(Error::Bytes),
        Workdir::Text(raw) if raw.len() > MAX_PATH_BYTES => {
            Err(Error::TooLong { bytes: raw.len() })
        }
        Workdir::Text(raw) => Ok(raw),
    }
}

enum Containment {
    /// A symlink on the way could not be read.
    Unresolvable,
    /// The signal path leaves the root, or is too long to exist.
    Escapes,
}

/// Step 4: `<root>/.sdd/runtime/signals/SHUTDOWN`, resolved and proven to stay under `root`.
fn contained_signal_path(root: &Path) -> Result<PathBuf, Containment> {
    let mut resolver = Resolver::default();
    // The root was resolved by the caller in this same call; resolving it again measures the
    // candidate against exactly the directory the caller named, even on a case-insensitive
    // filesystem where two spellings reach one directory.
    let (base, _) = resolver
        .join_real(PathBuf::new(), root, 0)
        .map_err(|_| Containment::Unresolvable)?;
    let mut joined = base.clone();
    joined.extend(SHUTDOWN_SEGMENTS);
    // A loop below the root leaves the candidate partly unresolved, which is not an escape:
    // the reference accepts it and the write then fails.
    let (candidate, _) = Resolver::default()
        .join_real(PathBuf::new(), &joined, 0)
        .map_err(|_| Containment::Unresolvable)?;
    let mut prefix = base.as_os_str().as_encoded_bytes().to_vec();
    if prefix.last() != Some(&b'/') {
        prefix.push(b'/');
    }
    let candidate_bytes = candidate.as_os_str().as_encoded_bytes();
    if !candidate_bytes.starts_with(&prefix) {
        return Err(Containment::Escapes);
    }
    if python_encoded_len(candidate_bytes) > MAX_PATH_BYTES {
        return Err(Containment::Escapes);
    }
    Ok(candidate)
}

/// The length Python measures for a path it decoded with `surrogateescape` and re-encodes with
/// `surrogatepass`: every byte that is not valid UTF-8 becomes a lone surrogate of 3 bytes.
fn python_encoded_len(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|chunk| chunk.valid().len() + 3 * chunk.invalid().len())
        .sum()
}

/// Non-strict symlink resolution with the semantics of CPython 3.12's `os.path.realpath`.
///
/// Each named component is `lstat`ed; a symlink is replaced by its target, resolved relative to
/// the directory holding it; a component that cannot be `lstat`ed (missing, unreadable) is kept
/// as written. Resolved links are remembered, so a link seen again mid-resolution is a loop:
/// resolution stops there and the rest of the path is appended unresolved.
#[derive(Default)]
struct Resolver {
    /// `None` while a link is being resolved, its target once resolved.
    seen: HashMap<PathBuf, Option<PathBuf>>,
}

impl Resolver {
    /// Resolves `rest` onto the already-resolved absolute `path` (empty for "start at the root
    /// `rest` names"). Returns the path and whether it resolved completely (no loop).
    fn join_real(
        &mut self,
        mut path: PathBuf,
        rest: &Path,
        depth: usize,
    ) -> io::Result<(PathBuf, bool)> {
        if depth > MAX_SYMLINK_DEPTH {
            return Err(io::Error::other("too many nested symlinks"));
        }
        let components: Vec<Component<'_>> = rest.components().collect();
        for (index, component) in components.iter().enumerate() {
            match component {
                Component::Prefix(prefix) => path = PathBuf::from(prefix.as_os_str()),
                Component::RootDir => path.push(Component::RootDir.as_os_str()),
                Component::CurDir => {}
                // The path so far has no symlinks left, so its lexical parent is its real one;
                // the root is its own parent.
                Component::ParentDir => {
                    path.pop();
                }
                Component::Normal(name) => {
                    let remaining = &components[index + 1..];
                    let next = path.join(name);
                    let is_link = std::fs::symlink_metadata(&next)
                        .is_ok_and(|meta| meta.file_type().is_symlink());
                    if !is_link {
                        path = next;
                        continue;
                    }
                    match self.seen.get(&next) {
                        Some(Some(resolved)) => {
                            path = resolved.clone();
                            continue;
                        }
                        Some(None) => return Ok((lexical_join(next, remaining), false)),
                        None => {}
                    }
                    self.seen.insert(next.clone(), None);
                    let target = std::fs::read_link(&next)?;
                    let (resolved, complete) = self.join_real(path, &target, depth + 1)?;
                    if !complete {
                        return Ok((lexical_join(resolved, remaining), false));
                    }
                    self.seen.insert(next, Some(resolved.clone()));
                    path = resolved;
                }
            }
        }
        Ok((path, true))
    }
}

/// Appends components without touching the filesystem, folding `.` and `..` as `normpath`
/// does.
fn lexical_join(mut path: PathBuf, components: &[Component<'_>]) -> PathBuf {
    for component in components {
        match component {
            Component::ParentDir => {
                path.pop();
            }
            Component::CurDir => {}
            other => path.push(AsRef::<OsStr>::as_ref(other)),
        }
    }
    path
}

// The tests build trees with Unix symlinks.
#[cfg(all(test, unix))]
mod tests;
