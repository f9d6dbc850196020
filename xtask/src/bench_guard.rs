//! What keeps a benchmark from leaving anything behind: every server it starts and every
//! scratch directory it makes are registered here, and are killed and removed when their guard
//! is dropped (a measurement that fails half-way), and also when the bench is interrupted
//! (Ctrl-C, `SIGTERM`): [`install_interrupt_handler`] then kills every registered child, removes
//! every registered directory and exits with status 130.
//!
//! The one case it cannot cover is `SIGKILL` of the bench itself: no handler runs then, so the
//! children keep running until their stdin closes (stdio servers exit on EOF, which the kernel
//! delivers when the bench's pipe ends close) and the scratch directories stay in the system
//! temporary directory, named `bernstein-bench-*`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use anyhow::Context;

/// What is alive right now: child process ids and scratch directories, by registration number.
#[derive(Default)]
struct Registry {
    children: BTreeMap<u64, u32>,
    dirs: BTreeMap<u64, PathBuf>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn next_ticket() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A child process that is killed (and reaped) when the guard is dropped or the bench is
/// interrupted.
#[derive(Debug)]
pub(crate) struct ChildGuard {
    child: Child,
    ticket: u64,
}

impl ChildGuard {
    /// Spawns `command` and registers the child.
    pub(crate) fn spawn(command: &mut Command) -> anyhow::Result<ChildGuard> {
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {command:?}"))?;
        Ok(ChildGuard::adopt(child))
    }

    /// Registers a child spawned elsewhere.
    pub(crate) fn adopt(child: Child) -> ChildGuard {
        let ticket = next_ticket();
        registry().children.insert(ticket, child.id());
        ChildGuard { child, ticket }
    }

    /// The child, for its pipes and its exit status.
    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the child is still running.
    pub(crate) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Unregister first: once reaped, the pid may be reused by an unrelated process, which
        // the interrupt handler must then never signal.
        registry().children.remove(&self.ticket);
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A scratch directory under the system temporary directory (or under `base`), removed with
/// everything in it when the guard is dropped or the bench is interrupted.
#[derive(Debug)]
pub(crate) struct Scratch {
    path: PathBuf,
    ticket: u64,
}

impl Scratch {
    /// Makes `<temp>/bernstein-bench-<name>-<pid>-<n>`.
    pub(crate) fn new(name: &str) -> anyhow::Result<Scratch> {
        Scratch::new_in(&std::env::temp_dir(), name)
    }

    /// Makes `<base>/bernstein-bench-<name>-<pid>-<n>`.
    pub(crate) fn new_in(base: &Path, name: &str) -> anyhow::Result<Scratch> {
        let ticket = next_ticket();
        let path = base.join(format!(
            "bernstein-bench-{name}-{}-{ticket}",
            std::process::id()
        ));
        // Register before creating, so an interrupt in between still removes it.
        registry().dirs.insert(ticket, path.clone());
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Scratch { path, ticket })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        registry().dirs.remove(&self.ticket);
    }
}

/// Kills every registered child and removes every registered directory. Called by the
/// interrupt handler; the guards' own drops are then no-ops apart from reaping.
fn clean_up_everything() {
    let registry = registry();
    for pid in registry.children.values() {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    for dir in registry.dirs.values() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Installs a handler for Ctrl-C and `SIGTERM` that cleans up and exits with status 130.
/// Idempotent.
pub(crate) fn install_interrupt_handler() -> anyhow::Result<()> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Register the handlers on this thread, so a signal that arrives right after this function
    // returns is already caught.
    let (mut interrupt, mut terminate) = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        anyhow::Ok((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    })?;
    std::thread::Builder::new()
        .name("bench-interrupt".to_owned())
        .spawn(move || {
            runtime.block_on(async {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            });
            eprintln!("bench: interrupted; stopping the servers and removing the scratch files");
            clean_up_everything();
            std::process::exit(130);
        })?;
    let _ = INSTALLED.set(());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn alive(pid: u32) -> bool {
        // A zombie still has a /proc entry, so read its state too.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| !stat.contains(") Z "))
            .unwrap_or(false)
    }

    #[test]
    fn guards_and_the_interrupt_cleanup_leave_no_child_and_no_file() {
        // One test, because the interrupt cleanup acts on everything registered in the process.
        let scratch = Scratch::new("guard-test").unwrap();
        let dir = scratch.path().to_path_buf();
        std::fs::write(dir.join("file"), "x").unwrap();
        let mut guard =
            ChildGuard::spawn(Command::new("sleep").arg("600").stdin(Stdio::null())).unwrap();
        let pid = guard.id();
        assert!(guard.running());
        assert!(registry().children.values().any(|p| *p == pid));
        drop(guard);
        assert!(!alive(pid), "the child {pid} outlived its guard");
        assert!(!registry().children.values().any(|p| *p == pid));
        drop(scratch);
        assert!(!dir.exists(), "{} outlived its guard", dir.display());

        // A measurement interrupted inside a guard scope: the interrupt path cleans up what the
        // guards still hold, without waiting for them to drop.
        let scratch = Scratch::new("interrupt-test").unwrap();
        let dir = scratch.path().to_path_buf();
        std::fs::create_dir_all(dir.join("project/.sdd")).unwrap();
        let mut guard =
            ChildGuard::spawn(Command::new("sleep").arg("600").stdin(Stdio::null())).unwrap();
        let pid = guard.id();
        clean_up_everything();
        // The kill is asynchronous; reaping shows it landed.
        let status = guard.child().wait().unwrap();
        assert!(!status.success(), "sleep 600 ended by itself: {status:?}");
        assert!(!dir.exists());
        drop(guard);
        drop(scratch);
        assert!(!alive(pid));
    }
}
