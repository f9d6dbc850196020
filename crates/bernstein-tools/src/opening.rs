//! The embedded store while it opens: a cold start on a large project replays the whole task
//! log (about a second at 100k tasks), and the protocol's own methods (`initialize`, `ping`,
//! `tools/list`) need none of it. [`OpeningStore::in_background`] runs the synchronous
//! [`EmbeddedStore::open`] on a thread of its own and hands the store (or its refusal, such
//! as a corrupt log) to every call that needs it, which waits for the open to end.

use std::path::{Path, PathBuf};

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
                let _ = sender.send(Some(EmbeddedStore::open(workdir, audit_key)));
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
