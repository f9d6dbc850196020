//! Run ids, task-derived run ids, and the containment barrier for paths built from them.
//!
//! A run id reaches us from an MCP client, so it names a directory only after two checks:
//! the allowlist (`^[A-Za-z0-9_.-]{1,64}$`, not `.` or `..`) and realpath containment. The
//! reference (`core/security/path_containment.contained_path`) resolves the candidate with
//! `os.path.realpath` (following symlinks, tolerating missing components) and requires it to
//! sit strictly below the *resolved* `.sdd/runs`. Because the base is resolved too, a `runs`
//! (or `.sdd`) directory that is itself a symlink out of the project passes the reference; we
//! additionally require the resolved runs directory to stay inside the resolved project root.

use crate::{Error, Result};
use std::path::{Component, Path, PathBuf};

/// File name of a run journal inside `.sdd/runs/<run_id>/`.
pub const JOURNAL_FILENAME: &str = "journal.jsonl";

/// Longest run id the journal barrier accepts, in characters (all ASCII).
pub const MAX_RUN_ID_LEN: usize = 64;

/// Longest composed path the reference accepts (`MAX_PATH_BYTES`, Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// How many symlinks one resolution may follow before it is treated as a loop (Linux `MAXSYMLINKS`).
const MAX_SYMLINK_HOPS: usize = 40;

/// Checks that `run_id` can name a journal directory: `^[A-Za-z0-9_.-]{1,64}$` and not `.` or
/// `..`. Returns the id unchanged.
///
/// # Errors
///
/// [`Error::InvalidRunId`] naming the rule that failed.
pub fn validate_run_id(run_id: &str) -> Result<&str> {
    let refuse = |reason: &'static str| Error::InvalidRunId {
        id: run_id.to_owned(),
        reason,
    };
    if run_id.is_empty() {
        return Err(refuse("must not be empty"));
    }
    if run_id == "." || run_id == ".." {
        return Err(refuse("must not be '.' or '..'"));
    }
    if !run_id.bytes().all(is_run_id_byte) {
        return Err(refuse(
            "only ASCII letters, digits, '_', '.' and '-' are allowed",
        ));
    }
    if run_id.len() > MAX_RUN_ID_LEN {
        return Err(refuse("longer than 64 characters"));
    }
    Ok(run_id)
}

fn is_run_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The journal run id Bernstein derives from a task id (`checkpoint_retry.task_run_id`).
///
/// Every character (Unicode code point, not byte) outside ASCII `[A-Za-z0-9._-]` becomes `-`,
/// then `task-` is prefixed; an empty id becomes `task-unknown`. Nothing caps the length, so
/// the result of a task id longer than 59 characters is not a valid run id.
pub fn task_run_id(task_id: &str) -> String {
    if task_id.is_empty() {
        return "task-unknown".to_owned();
    }
    let mut out = String::with_capacity(task_id.len() + 5);
    out.push_str("task-");
    out.extend(task_id.chars().map(|c| {
        if c.is_ascii() && is_run_id_byte(c as u8) {
            c
        } else {
            '-'
        }
    }));
    out
}

/// The reference's `JournalPathError` text for a run id the journal barrier refused, as
/// `bernstein_run_status` reports it: `unsafe run_id for journal path: '<id>'` for an id
/// outside the allowlist and `run_id escapes the journal runs root: '<id>'` for a containment
/// failure (the id in Python `repr` form). `None` for any other error.
pub fn journal_barrier_message(run_id: &str, error: &Error) -> Option<String> {
    let repr = super::python::python_str_repr(run_id);
    match error {
        Error::InvalidRunId { .. } => Some(format!("unsafe run_id for journal path: {repr}")),
        Error::Containment { .. } => Some(format!("run_id escapes the journal runs root: {repr}")),
        _ => None,
    }
}

/// `<project_root>/.sdd/runs`, unresolved.
pub fn runs_dir(project_root: &Path) -> PathBuf {
    project_root.join(".sdd").join("runs")
}

/// The containment-checked journal path of `run_id`: `.sdd/runs/<run_id>/journal.jsonl`
/// resolved through every symlink, proven to sit below the resolved runs directory, which is
/// itself proven to sit inside the resolved project root. Nothing is created or written.
///
/// The returned path is the resolved one; open the file through it, never through a raw join.
///
/// # Errors
///
/// [`Error::InvalidRunId`] for an id outside the allowlist; [`Error::Containment`] when the run
/// directory, the journal file or the runs directory resolves outside its base, or the path is
/// longer than 4096 bytes.
pub fn run_journal_path(project_root: &Path, run_id: &str) -> Result<PathBuf> {
    validate_run_id(run_id)?;
    contained_path(
        project_root,
        &runs_dir(project_root),
        &[run_id, JOURNAL_FILENAME],
    )
}

/// Joins plain `segments` under `base`, resolves symlinks, and proves the result is strictly
/// below the resolved `base`, and that the resolved `base` is inside the resolved
/// `project_root`. The segments must already be validated single path components.
pub(crate) fn contained_path(
    project_root: &Path,
    base: &Path,
    segments: &[&str],
) -> Result<PathBuf> {
    let display: PathBuf = segments.iter().collect();
    let key = (project_root.to_path_buf(), base.to_path_buf(), display);
    if let Some(candidate) = resolved_cache().check(&key) {
        return Ok(candidate);
    }
    let display = key.2.clone();
    let candidate = resolve_contained(project_root, base, &display)?;
    resolved_cache().remember(key, &candidate);
    Ok(candidate)
}

/// Containment checks that passed, per `(project root, base, segments)`, with the path they
/// resolved to. Resolving walks every component of three paths (about fifteen `lstat`s for a
/// run journal); a remembered answer is revalidated with one `openat2(O_PATH,
/// RESOLVE_NO_SYMLINKS)` of the resolved path instead, which succeeds only while every
/// component of it exists and none is a symlink, that is while resolving again would give the
/// same path. Anything else (a component swapped for a symlink, a directory removed, a kernel
/// without `openat2`) forgets the answer and resolves again, so a symlink planted later is still
/// refused.
///
/// A path that does not exist yet (the journal of a run nobody has written to, which a host
/// polls until a worker starts) is remembered with its deepest existing ancestor: it is
/// revalidated by that `openat2` of the ancestor and one `lstat` proving the ancestor's next
/// component is still missing. While both hold, resolving again would keep the missing
/// components as written and give the same path; once the component appears (a directory, or
/// a symlink planted there) the answer is forgotten and the path resolved again.
struct ResolvedCache {
    entries: std::sync::Mutex<std::collections::HashMap<(PathBuf, PathBuf, PathBuf), Resolved>>,
}

/// A remembered containment answer (see [`ResolvedCache`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Resolved {
    /// The path exists, with no symlink in it.
    Exists(PathBuf),
    /// The path does not exist: `ancestor` exists with no symlink in it, and its child
    /// `first_missing` (a prefix of the path) did not exist.
    Missing {
        path: PathBuf,
        ancestor: PathBuf,
        first_missing: PathBuf,
    },
}

impl Resolved {
    /// What `candidate`, just resolved, can be remembered as; `None` when it cannot be
    /// revalidated cheaply (it is not absolute, or something in it is not a plain directory
    /// entry).
    fn of(candidate: &Path) -> Option<Resolved> {
        if resolves_to_itself(candidate) {
            return Some(Resolved::Exists(candidate.to_path_buf()));
        }
        let mut first_missing = candidate;
        for ancestor in candidate.ancestors().skip(1) {
            if resolves_to_itself(ancestor) {
                return is_missing(first_missing).then(|| Resolved::Missing {
                    path: candidate.to_path_buf(),
                    ancestor: ancestor.to_path_buf(),
                    first_missing: first_missing.to_path_buf(),
                });
            }
            first_missing = ancestor;
        }
        None
    }

    /// The remembered path, when resolving again would still give it.
    fn revalidate(&self) -> Option<&Path> {
        match self {
            Resolved::Exists(path) => resolves_to_itself(path).then_some(path.as_path()),
            Resolved::Missing {
                path,
                ancestor,
                first_missing,
            } => (resolves_to_itself(ancestor) && is_missing(first_missing))
                .then_some(path.as_path()),
        }
    }
}

/// Whether nothing (not even a dangling symlink) is at `path`.
fn is_missing(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_err_and(|err| err.kind() == std::io::ErrorKind::NotFound)
}

/// More distinct paths than this and the cache starts over (bounded memory).
const MAX_REMEMBERED_PATHS: usize = 4096;

fn resolved_cache() -> &'static ResolvedCache {
    static CACHE: std::sync::OnceLock<ResolvedCache> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| ResolvedCache {
        entries: std::sync::Mutex::new(std::collections::HashMap::new()),
    })
}

impl ResolvedCache {
    fn check(&self, key: &(PathBuf, PathBuf, PathBuf)) -> Option<PathBuf> {
        let remembered = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()?;
        if let Some(path) = remembered.revalidate() {
            return Some(path.to_path_buf());
        }
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        None
    }

    fn remember(&self, key: (PathBuf, PathBuf, PathBuf), candidate: &Path) {
        let Some(resolved) = Resolved::of(candidate) else {
            return;
        };
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= MAX_REMEMBERED_PATHS {
            entries.clear();
        }
        entries.insert(key, resolved);
    }
}

/// Whether `path` (absolute) exists with no symlink anywhere in it, its last component
/// included: one `openat2` with `RESOLVE_NO_SYMLINKS`, the descriptor (`O_PATH`, which opens
/// nothing for reading and never blocks on a FIFO) closed at once. `O_NOFOLLOW` must not be
/// passed: with `O_PATH` it makes `openat2` open a trailing symlink itself instead of refusing
/// it, and a journal swapped for a symlink would then still pass.
pub(crate) fn resolves_to_itself(path: &Path) -> bool {
    opens_without_symlinks(path, rustix::fs::OFlags::empty())
}

/// [`resolves_to_itself`] with `extra` open flags (`O_DIRECTORY` also proves a directory).
fn opens_without_symlinks(path: &Path, extra: rustix::fs::OFlags) -> bool {
    use rustix::fs::{Mode, OFlags, ResolveFlags, openat2};
    path.is_absolute()
        && openat2(
            rustix::fs::CWD,
            path,
            OFlags::PATH | OFlags::CLOEXEC | extra,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .is_ok()
}

/// `std::fs::canonicalize`, answered with one `openat2` when `path` is absolute, has no `..`
/// and no component of it is a symlink (then it is its own canonical form, minus `.` and
/// repeated or trailing slashes); otherwise the full resolution (a `readlink` per component).
///
/// # Errors
///
/// As `std::fs::canonicalize`: the path does not exist, or cannot be resolved.
pub fn canonicalize_cheaply(path: &Path) -> std::io::Result<PathBuf> {
    match own_canonical_form(path, rustix::fs::OFlags::empty()) {
        Some(normal) => Ok(normal),
        None => std::fs::canonicalize(path),
    }
}

/// `path` minus `.` and repeated or trailing slashes, when that is its canonical form: it is
/// absolute, has no `..`, and one `openat2` with `extra` open flags finds no symlink in it.
fn own_canonical_form(path: &Path, extra: rustix::fs::OFlags) -> Option<PathBuf> {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return None;
    }
    let normal: PathBuf = path.components().collect();
    opens_without_symlinks(&normal, extra).then_some(normal)
}

/// [`canonicalize_cheaply`] of a path that must name a directory: one `openat2` with
/// `O_DIRECTORY` answers both (no `stat` after it) when no component is a symlink; otherwise the
/// full resolution and a `stat` of what it resolved to.
///
/// # Errors
///
/// As [`canonicalize_cheaply`], and [`std::io::ErrorKind::NotADirectory`] when the path
/// resolves to something other than a directory.
pub fn canonicalize_directory_cheaply(path: &Path) -> std::io::Result<PathBuf> {
    if let Some(normal) = own_canonical_form(path, rustix::fs::OFlags::DIRECTORY) {
        return Ok(normal);
    }
    let real = std::fs::canonicalize(path)?;
    if real.is_dir() {
        Ok(real)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", real.display()),
        ))
    }
}

/// The uncached containment check behind [`contained_path`].
fn resolve_contained(project_root: &Path, base: &Path, display: &Path) -> Result<PathBuf> {
    let root_real = realpath(project_root);
    let base_real = realpath(base);
    if !base_real.starts_with(&root_real) {
        return Err(Error::Containment {
            path: base.join(display),
            reason: format!(
                "{} resolves outside the project root",
                base.strip_prefix(project_root).unwrap_or(base).display()
            ),
        });
    }
    let candidate = realpath(&base_real.join(display));
    if candidate == base_real || !candidate.starts_with(&base_real) {
        return Err(Error::Containment {
            path: base.join(display),
            reason: format!("{} resolves outside its base directory", display.display()),
        });
    }
    if candidate.as_os_str().len() > MAX_PATH_BYTES {
        return Err(Error::Containment {
            path: base.join(display),
            reason: format!("the resolved path is longer than {MAX_PATH_BYTES} bytes"),
        });
    }
    Ok(candidate)
}

/// Python's `os.path.realpath(path)` (non-strict): an absolute path with every existing symlink
/// followed and `.`/`..` folded, where components that do not exist are kept as written.
///
/// A symlink loop (more than 40 hops) stops resolution and keeps the rest of the path as
/// written, as Python does.
pub(crate) fn realpath(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // Components still to walk, in reverse order so `pop` yields the next one.
    let mut pending: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut pending, &absolute);
    let mut resolved = PathBuf::from("/");
    let mut hops = 0usize;
    while let Some(name) = pending.pop() {
        if name == ".." {
            resolved.pop();
            continue;
        }
        if name == "." || name.is_empty() {
            continue;
        }
        let next = resolved.join(&name);
        let is_link = std::fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            resolved = next;
            continue;
        }
        hops += 1;
        let target = match std::fs::read_link(&next) {
            Ok(target) if hops <= MAX_SYMLINK_HOPS => target,
            _ => {
                // A loop or an unreadable link: keep the remainder literally, like Python.
                resolved = next;
                while let Some(rest) = pending.pop() {
                    resolved.push(rest);
                }
                return resolved;
            }
        };
        if target.is_absolute() {
            resolved = PathBuf::from("/");
        }
        push_components(&mut pending, &target);
    }
    resolved
}

/// Pushes the named components of `path` onto `pending` so that they pop in path order.
fn push_components(pending: &mut Vec<std::ffi::OsString>, path: &Path) {
    let names: Vec<std::ffi::OsString> = path
        .components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(names.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_id_allowlist() {
        let check = |id: &str, ok: bool| assert_eq!(validate_run_id(id).is_ok(), ok, "{id:?}");
        check("task-t-42", true);
        check("a.b_c-D9", true);
        check(&"x".repeat(64), true);
        check(&"x".repeat(65), false);
        check("", false);
        check(".", false);
        check("..", false);
        check("...", true);
        check("a/b", false);
        check("a\\b", false);
        check("a\0b", false);
        check("a b", false);
        check("caf\u{e9}", false);
        check("x\n", false);
    }

    #[test]
    fn barrier_messages_match_the_reference() {
        let invalid = validate_run_id("a/b").unwrap_err();
        assert_eq!(
            journal_barrier_message("a/b", &invalid).as_deref(),
            Some("unsafe run_id for journal path: 'a/b'")
        );
        let escape = Error::Containment {
            path: PathBuf::from("x"),
            reason: String::new(),
        };
        assert_eq!(
            journal_barrier_message("evil", &escape).as_deref(),
            Some("run_id escapes the journal runs root: 'evil'")
        );
        assert_eq!(
            journal_barrier_message("x", &Error::Encode(String::new())),
            None
        );
    }

    #[test]
    fn task_run_id_replaces_each_code_point() {
        let check = |task: &str, expect: &str| assert_eq!(task_run_id(task), expect, "{task:?}");
        check("t-42", "task-t-42");
        check("a/b c", "task-a-b-c");
        check("caf\u{e9}", "task-caf-");
        check("\u{65e5}\u{672c}", "task---");
        check("\u{1f600}", "task--");
        check("", "task-unknown");
        check("task-abc", "task-task-abc");
    }

    #[test]
    fn realpath_folds_dots_and_keeps_missing_components() {
        let dir = tempfile::tempdir().unwrap();
        let base = realpath(dir.path());
        assert_eq!(realpath(&base.join("a/./b/../c")), base.join("a/c"));
        std::os::unix::fs::symlink(base.join("target"), base.join("link")).unwrap();
        assert_eq!(realpath(&base.join("link/x")), base.join("target/x"));
        std::os::unix::fs::symlink("loop", base.join("loop")).unwrap();
        assert_eq!(realpath(&base.join("loop/x")), base.join("loop/x"));
    }

    #[test]
    fn a_missing_journal_is_remembered_with_its_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let root = realpath(dir.path());
        std::fs::create_dir_all(root.join(".sdd/runs")).unwrap();
        let path = run_journal_path(&root, "never-written").unwrap();
        assert_eq!(
            Resolved::of(&path),
            Some(Resolved::Missing {
                path: path.clone(),
                ancestor: root.join(".sdd/runs"),
                first_missing: root.join(".sdd/runs/never-written"),
            })
        );
        let key = (
            root.clone(),
            runs_dir(&root),
            PathBuf::from("never-written/journal.jsonl"),
        );
        assert_eq!(resolved_cache().check(&key), Some(path.clone()));
        // Once the run directory exists the missing answer is stale and is resolved again.
        std::fs::create_dir(root.join(".sdd/runs/never-written")).unwrap();
        assert_eq!(resolved_cache().check(&key), None);
        assert_eq!(run_journal_path(&root, "never-written").unwrap(), path);
    }

    #[test]
    fn a_symlink_planted_where_a_missing_journal_was_remembered_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = realpath(&dir.path().join("project"));
        let outside = realpath(dir.path()).join("outside");
        std::fs::create_dir_all(root.join(".sdd/runs")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // Polled twice while the run has no journal: the second answer comes from the cache.
        let missing = run_journal_path(&root, "victim").unwrap();
        assert_eq!(run_journal_path(&root, "victim").unwrap(), missing);
        std::os::unix::fs::symlink(&outside, root.join(".sdd/runs/victim")).unwrap();
        let refused = run_journal_path(&root, "victim").unwrap_err();
        assert!(
            matches!(refused, Error::Containment { .. }),
            "a planted symlink was accepted: {refused:?}"
        );
    }

    #[test]
    fn a_journal_swapped_for_a_symlink_after_it_was_remembered_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = realpath(&dir.path().join("project"));
        let secret = realpath(dir.path()).join("secret.jsonl");
        std::fs::write(&secret, "{}\n").unwrap();
        std::fs::create_dir_all(root.join(".sdd/runs/r1")).unwrap();
        std::fs::write(root.join(".sdd/runs/r1/journal.jsonl"), "").unwrap();
        let journal = run_journal_path(&root, "r1").unwrap();
        assert_eq!(run_journal_path(&root, "r1").unwrap(), journal);
        std::fs::remove_file(&journal).unwrap();
        std::os::unix::fs::symlink(&secret, &journal).unwrap();
        let refused = run_journal_path(&root, "r1").unwrap_err();
        assert!(
            matches!(refused, Error::Containment { .. }),
            "a journal symlinked out of the project was accepted: {refused:?}"
        );
    }

    #[test]
    fn a_resolved_path_of_exactly_the_limit_is_accepted_and_one_byte_more_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = realpath(dir.path());
        // Missing components are kept as written, so the candidate is `root/<name>` itself.
        let room = MAX_PATH_BYTES - root.as_os_str().len() - 1;
        // `len` bytes of 100-byte components, never ending in a separator.
        let name = |len: usize| -> String {
            let mut name: String = (0..len)
                .map(|at| if at % 101 == 100 { '/' } else { 'a' })
                .collect();
            if name.ends_with('/') {
                name.pop();
                name.push('a');
            }
            name
        };
        let fits = name(room);
        assert_eq!(root.join(&fits).as_os_str().len(), MAX_PATH_BYTES);
        assert_eq!(
            resolve_contained(&root, &root, Path::new(&fits)).unwrap(),
            root.join(&fits)
        );
        let over = name(room + 1);
        assert_eq!(root.join(&over).as_os_str().len(), MAX_PATH_BYTES + 1);
        assert!(matches!(
            resolve_contained(&root, &root, Path::new(&over)),
            Err(Error::Containment { reason, .. })
                if reason.contains(&format!("longer than {MAX_PATH_BYTES} bytes"))
        ));
    }

    #[test]
    fn canonicalize_cheaply_answers_as_canonicalize() {
        let dir = tempfile::tempdir().unwrap();
        let base = realpath(dir.path());
        std::fs::create_dir_all(base.join("project/a")).unwrap();
        std::os::unix::fs::symlink(base.join("project"), base.join("link")).unwrap();
        let check = |input: &str, expect: &str| {
            assert_eq!(
                canonicalize_cheaply(&base.join(input)).unwrap(),
                base.join(expect),
                "{input}"
            );
        };
        // A workdir named by a symlink is its target.
        check("link", "project");
        check("link/a", "project/a");
        // `..`, `.` and repeated or trailing slashes fold away.
        check("project/a/../a/./", "project/a");
        check("project//a", "project/a");
        check("project/a/..", "project");
    }

    /// A directory, named plainly or through a symlink, canonicalizes as `canonicalize` does;
    /// a regular file (named either way, or with a trailing slash) and a missing path do not.
    #[test]
    fn canonicalize_directory_cheaply_accepts_only_directories() {
        let dir = tempfile::tempdir().unwrap();
        let base = realpath(dir.path());
        std::fs::create_dir_all(base.join("project/a")).unwrap();
        std::fs::write(base.join("project/file"), b"x").unwrap();
        std::os::unix::fs::symlink(base.join("project"), base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("project/file"), base.join("file-link")).unwrap();
        let check = |input: &str, expect: Option<&str>| {
            let answer = canonicalize_directory_cheaply(&base.join(input));
            match expect {
                Some(expect) => assert_eq!(answer.unwrap(), base.join(expect), "{input}"),
                None => assert!(answer.is_err(), "{input}: {answer:?}"),
            }
        };
        check("project", Some("project"));
        check("project/a/../a/./", Some("project/a"));
        check("link/a", Some("project/a"));
        check("project/file", None);
        check("project/file/", None);
        check("file-link", None);
        check("project/missing", None);
    }

    #[test]
    fn resolves_to_itself_never_opens_a_fifo_for_reading() {
        use rustix::fs::{FileType, Mode, mknodat};
        let dir = tempfile::tempdir().unwrap();
        let fifo = realpath(dir.path()).join("fifo");
        mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        // Opening a FIFO for reading blocks until a writer comes; an `O_PATH` descriptor does
        // not. The check runs on its own thread so that a regression fails instead of hanging.
        let (answer, answered) = std::sync::mpsc::channel();
        let probe = fifo.clone();
        std::thread::spawn(move || {
            let _ = answer.send(resolves_to_itself(&probe));
        });
        assert_eq!(
            answered.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(true),
            "{} was not checked without being opened",
            fifo.display()
        );
    }

    #[test]
    fn a_dangling_symlink_is_not_a_missing_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = realpath(dir.path());
        std::os::unix::fs::symlink(base.join("nowhere"), base.join("dangling")).unwrap();
        assert!(!is_missing(&base.join("dangling")));
        assert!(is_missing(&base.join("absent")));
        assert_eq!(Resolved::of(&base.join("dangling/journal.jsonl")), None);
    }
}
