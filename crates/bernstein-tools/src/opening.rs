//! The embedded store while it opens: a cold start on a large project replays the whole task
//! log (about a second at 100k tasks), and the protocol's own methods (`initialize`, `ping`,
//! `tools/list`) need none of it. [`OpeningStore::in_background`] runs the synchronous
//! [`EmbeddedStore::open`] on a thread of its own and hands the store (or its refusal, such
//! as a corrupt log) to every call that needs it, which waits for the open to end. The same
//! thread then reads the audit chain's run heads ahead of the first poll.

use std::path::{Path, PathBuf};
use std::sync::PoisonError;

use bernstein_journal::audit::head_index;
use bernstein_journal::key::AuditKey;
use bernstein_tasks::embedded::EmbeddedStore;
use tokio::sync::watch;

use crate::error::Error;

/// What the open produced: nothing yet, then the store or why it could not be opened.
type Opened = Option<Result<EmbeddedStore, bernstein_tasks::Error>>;

/// An embedded store that is open, or being opened on a background thread. Cheap to clone;
/// every clone sees the same open.
#[derive(Debug, Clone)]
pub struct OpeningStore {
    workdir: PathBuf,
    opened: watch::Receiver<Opened>,
}

impl OpeningStore {
    /// A store that is already open.
    pub fn ready(store: EmbeddedStore) -> OpeningStore {
        let workdir = store.workdir().to_path_buf();
        let (_, opened) = watch::channel(Some(Ok(store)));
        OpeningStore { workdir, opened }
    }

    /// Starts opening the store of `workdir` on a thread of its own and returns at once. When
    /// no thread can be started, the store is opened here instead, so the answer is the same.
    pub fn in_background(workdir: PathBuf, audit_key: Option<AuditKey>) -> OpeningStore {
        let (sender, opened) = watch::channel(None);
        let open = {
            let (workdir, audit_key) = (workdir.clone(), audit_key.clone());
            move || {
                // No receiver left means every handle was dropped: nobody needs the store.
                let _ = sender.send(Some(EmbeddedStore::open(workdir.clone(), audit_key)));
                warm_run_heads(&workdir);
            }
        };
        if std::thread::Builder::new()
            .name("bernstein-store-open".to_owned())
            .spawn(open)
            .is_err()
        {
            let (_, opened) = watch::channel(Some(EmbeddedStore::open(workdir.clone(), audit_key)));
            return OpeningStore { workdir, opened };
        }
        OpeningStore { workdir, opened }
    }

    /// The project directory (known before the open ends).
    pub fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// Whether the open has ended (with the store or with its refusal).
    pub fn is_settled(&self) -> bool {
        self.opened.borrow().is_some()
    }

    /// The store, once the open ended; waits for it while it runs.
    ///
    /// # Errors
    ///
    /// The open's refusal (the same error [`EmbeddedStore::open`] returns, e.g. a corrupt task
    /// log), for this call and every later one; or, should the opening thread die before it
    /// answered, an error saying so.
    pub async fn store(&self) -> Result<EmbeddedStore, Error> {
        let mut opened = self.opened.clone();
        let settled = opened.wait_for(Option::is_some).await;
        match settled.as_deref() {
            Ok(Some(Ok(store))) => Ok(store.clone()),
            Ok(Some(Err(refusal))) => Err(Error::Task(refusal.clone())),
            Ok(None) | Err(_) => Err(Error::Unsupported(
                "the embedded task store could not be opened: its opening thread stopped \
                 before it answered"
                    .to_owned(),
            )),
        }
    }
}

/// Reads the project's audit chain into the process-wide run-head index (after the store is
/// handed over, so no call waits for both). The first poll or seal of a project that has lived
/// would otherwise read the whole chain on a client's call: about half a second at 100k
/// entries. A call that needs the index meanwhile waits for this read instead of making its
/// own; a failure is left for that call to meet and report.
fn warm_run_heads(workdir: &Path) {
    let index = head_index::shared(&workdir.join(".sdd").join("audit"));
    let mut index = index.lock().unwrap_or_else(PoisonError::into_inner);
    if let Err(err) = index.refresh() {
        tracing::debug!("the audit chain's run heads were not read ahead: {err}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bernstein_journal::audit::{AuditChain, AuditEvent};
    use bernstein_protocol::pyjson::Object;

    use super::*;

    /// A project that has lived: the background open also reads the chain's run heads, so
    /// the first poll finds them read.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_background_open_reads_the_run_heads_ahead_of_the_first_poll() {
        let dir = tempfile::tempdir().unwrap();
        let key = AuditKey::from_master_bytes(b"0123456789abcdef0123456789abcdef".to_vec());
        let audit = dir.path().join(".sdd").join("audit");
        let chain = AuditChain::open(&audit, key.clone());
        for n in 0..20 {
            let details = Object::new().with("task_id", format!("{n:012x}"));
            chain
                .append(&AuditEvent::new(
                    "task.created",
                    "test",
                    "task",
                    "t",
                    details,
                ))
                .unwrap();
        }
        let store = OpeningStore::in_background(dir.path().to_path_buf(), Some(key));
        store.store().await.unwrap();
        let index = head_index::shared(&audit);
        let deadline = Instant::now() + Duration::from_secs(10);
        let read = loop {
            let read = index.lock().unwrap().bytes_read();
            if read > 0 || Instant::now() > deadline {
                break read;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let chain_bytes: u64 = std::fs::read_dir(&audit)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
            .map(|path| std::fs::metadata(path).unwrap().len())
            .sum();
        assert_eq!(read, chain_bytes, "the run heads were not read ahead");
    }
}
