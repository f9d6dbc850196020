//! Running blocking work (file locks, reads, fsync) from async code.
//!
//! On a multi-threaded Tokio runtime the work runs in place on the calling worker
//! (`block_in_place`): the worker hands its other tasks to another thread, and the call continues
//! on the same thread when the work returns, so a durable call does not pay two thread hand-offs
//! (a wake-up of a blocking-pool thread, then a wake-up of a worker for the result) per file
//! operation. Elsewhere (a current-thread runtime, as in tests) it goes to the blocking pool, and
//! without a runtime it runs inline.
//!
//! Work run in place cannot be abandoned by dropping the future that awaits it, so use this only
//! for work that ends on its own in a short, bounded time; long work that a cancel or a timeout
//! must be able to leave behind belongs on the blocking pool.

use std::panic::AssertUnwindSafe;

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `work` as described in the module documentation. A panic in `work` is caught and
/// returned as its message, as the blocking pool's join error would report it.
///
/// # Errors
///
/// The panic message when `work` panicked, or the blocking pool's join error.
pub async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| std::panic::catch_unwind(AssertUnwindSafe(work)))
                .map_err(|panic| panic_message(panic.as_ref()))
        }
        Ok(handle) => handle
            .spawn_blocking(work)
            .await
            .map_err(|join| join.to_string()),
        Err(_) => Ok(work()),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    format!("the blocking work panicked: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_multi_threaded_runtime_runs_the_work_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let ran_on = run_blocking(|| std::thread::current().id()).await.unwrap();
        assert_eq!(ran_on, caller, "the work was handed to another thread");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_current_thread_runtime_uses_the_blocking_pool() {
        let caller = std::thread::current().id();
        let ran_on = run_blocking(|| std::thread::current().id()).await.unwrap();
        assert_ne!(ran_on, caller, "the work blocked the only runtime thread");
    }

    #[test]
    fn without_a_runtime_the_work_runs_inline() {
        let future = run_blocking(|| 7);
        let answer = block_on_without_a_runtime(future);
        assert_eq!(answer, Ok(7));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_in_place_is_an_error_not_an_unwind() {
        let outcome = run_blocking(|| -> u8 { panic!("broken store") }).await;
        assert_eq!(
            outcome,
            Err("the blocking work panicked: broken store".to_owned())
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_on_the_pool_is_an_error_too() {
        let outcome = run_blocking(|| -> u8 { panic!("broken store") }).await;
        assert!(outcome.unwrap_err().contains("panicked"));
    }

    /// Polls a future to completion on this thread, outside any Tokio runtime.
    fn block_on_without_a_runtime<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        loop {
            if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
                return output;
            }
        }
    }
}
