//! Whether the dispatcher's backend can serve calls now: the answer a load balancer's readiness
//! probe (`/readyz` on the HTTP transport) needs.
//!
//! The check writes nothing. With the embedded store it asks the kernel whether `.sdd/` (or, on
//! a project that has none yet, the project root that will hold it) is writable for this
//! process (`access(2)` with `W_OK`, which also reports a read-only mount) and reads the store's
//! status summary; with a task server it asks the server for its status document. Either
//! failure is reported with its reason.

use std::path::Path;

use bernstein_tools::BackendKind;

use crate::dispatcher::Dispatcher;

impl Dispatcher {
    /// `Ok(())` when the backend can serve calls now; otherwise why not.
    ///
    /// # Errors
    ///
    /// A sentence naming what is unusable: the evidence directory is not writable, the store
    /// cannot be read, or the task server does not answer.
    pub async fn readiness(&self) -> std::result::Result<(), String> {
        let backend = self.backend();
        if matches!(backend.kind(), BackendKind::Embedded(_)) {
            writable(&self.workdir().join(".sdd"), self.workdir())?;
        }
        match backend.status_document().await {
            Ok(_) => Ok(()),
            Err(err) if backend.is_embedded() => {
                Err(format!("the embedded task store cannot be read: {err}"))
            }
            Err(err) => Err(format!("the task server does not answer: {err}")),
        }
    }
}

/// Whether `sdd` (or `root`, when `sdd` does not exist yet) is writable, without writing.
fn writable(sdd: &Path, root: &Path) -> std::result::Result<(), String> {
    let target = if sdd.exists() { sdd } else { root };
    rustix::fs::access(target, rustix::fs::Access::WRITE_OK).map_err(|err| {
        let name = if target == sdd {
            ".sdd/"
        } else {
            "the project root"
        };
        format!("{name} is not writable: {err}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An existing `.sdd/` is the directory checked; a project without one has its root
    /// checked, and a failure names whichever was checked.
    #[test]
    fn the_checked_directory_is_the_one_a_failure_names() {
        let dir = tempfile::tempdir().unwrap();
        let sdd = dir.path().join(".sdd");
        assert_eq!(writable(&sdd, dir.path()), Ok(()));
        std::fs::create_dir(&sdd).unwrap();
        assert_eq!(writable(&sdd, dir.path()), Ok(()));
        let gone = dir.path().join("gone");
        let reason = writable(&gone.join(".sdd"), &gone).unwrap_err();
        assert!(
            reason.starts_with("the project root is not writable: "),
            "{reason}"
        );
    }
}
