//! Progress bars on stderr (indicatif), drawn only when stderr is a terminal: a pipe, a file or
//! a CI log gets nothing, and stdout (the report, the JSON) is never touched.

use std::io::IsTerminal;

use bernstein_journal::audit::VerifyProgress;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar, or nothing when progress is not wanted or stderr is not a terminal.
pub(crate) struct Progress(Option<ProgressBar>);

impl Progress {
    /// A bar over the bytes of an audit chain.
    pub(crate) fn bytes(wanted: bool, message: &'static str) -> Progress {
        Progress::with_style(
            wanted,
            message,
            0,
            "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta} left)",
        )
    }

    /// A bar over `steps` named steps.
    pub(crate) fn steps(wanted: bool, steps: u64) -> Progress {
        Progress::with_style(
            wanted,
            "verifying",
            steps,
            "{msg:24} [{bar:30}] {pos}/{len}",
        )
    }

    fn with_style(wanted: bool, message: &'static str, length: u64, template: &str) -> Progress {
        if !wanted || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
        // The templates are literals tested by every terminal run; a bad one keeps the default.
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("#>-"));
        }
        bar.set_message(message);
        Progress(Some(bar))
    }

    /// Moves a byte bar to where the verifier is.
    pub(crate) fn bytes_done(&self, progress: VerifyProgress) {
        if let Some(bar) = &self.0 {
            bar.set_length(progress.bytes_total);
            bar.set_position(progress.bytes_done.min(progress.bytes_total));
        }
    }

    /// Starts the next step of a step bar, named `name`.
    pub(crate) fn step(&self, name: &'static str) {
        if let Some(bar) = &self.0 {
            bar.set_message(format!("verifying {name}"));
            bar.inc(1);
        }
    }
}

impl Drop for Progress {
    /// The bar is cleared, so the report that follows starts on a clean line.
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
