//! The connect-time instructions: the one Bernstein text that stays in a connected model's
//! context, so it carries the control loop (identity, start-then-poll, where to look deeper).
//!
//! Two rules keep it honest (both tested): it stays at or under [`MAX_INSTRUCTIONS_CHARS`]
//! characters, and every tool name it mentions is registered. The `load_skill` pointer is only
//! written when the active tier serves `load_skill`.

/// The length limit on the instructions, in characters.
pub const MAX_INSTRUCTIONS_CHARS: usize = 900;

/// Tool names the instructions may mention, each only when registered.
pub const MENTIONED_TOOLS: [&str; 3] = ["bernstein_run", "bernstein_run_status", "load_skill"];

/// The instructions for a server whose registered tool names satisfy `is_registered`.
pub fn instructions(is_registered: &dyn Fn(&str) -> bool) -> String {
    let mut text = String::from(
        "Bernstein orchestrates multi-agent software work and keeps verifiable evidence of it \
         (run journals and an HMAC audit chain).\n\
         The control loop:\n\
         1. Call bernstein_run once per goal. It queues the run and returns at once; the \
         task_id it returns is the run id. It does not wait for the work.\n\
         2. Poll bernstein_run_status with run_id set to that value. The handle is rebuilt \
         from the run journal on every poll, so any server instance answers the same.\n\
         3. A run takes minutes to hours: wait tens of seconds between polls. A status of \
         working means progress, not a stall; never start the same goal again.\n\
         4. Stop at a terminal status: completed, failed or cancelled. input_required means \
         the run waits on a person.",
    );
    if is_registered("load_skill") {
        text.push_str(
            "\nTo go deeper, call load_skill with a name from its index and load only the pack \
             the task needs.",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_limit_and_naming_only_what_is_asked() {
        let all = instructions(&|_| true);
        assert!(
            all.chars().count() <= MAX_INSTRUCTIONS_CHARS,
            "{}",
            all.len()
        );
        assert!(all.contains("load_skill"));
        let core = instructions(&|name| name != "load_skill");
        assert!(!core.contains("load_skill"));
        for name in ["bernstein_run", "bernstein_run_status"] {
            assert!(core.contains(name));
        }
    }
}
