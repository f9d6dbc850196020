//! Progress bars for the long xtask commands (interop, bench, soak, fuzz): indicatif on
//! stderr, drawn only when stderr is a terminal, so CI logs and piped output stay plain.
//!
//! ```ignore
//! let bar = progress::counter("appending", 400);
//! for _ in 0..400 {
//!     bar.inc();
//! }
//! // Dropping the bar clears it.
//! ```

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A counting bar, or nothing when stderr is not a terminal. Cleared when dropped.
pub(crate) struct Counter(Option<ProgressBar>);

/// A bar that counts up to `total` steps of `what`.
pub(crate) fn counter(what: &str, total: u64) -> Counter {
    if !std::io::stderr().is_terminal() {
        return Counter(None);
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({eta} left)") {
        bar.set_style(style.progress_chars("#>-"));
    }
    bar.set_message(what.to_owned());
    Counter(Some(bar))
}

impl Counter {
    /// One more step done.
    pub(crate) fn inc(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
