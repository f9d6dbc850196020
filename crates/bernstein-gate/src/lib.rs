//! The gates every transport shares.
//!
//! This crate owns the approval gate (only `pending_approval` may be approved), the completion
//! gate (only `open`, `claimed` and `in_progress` may be completed by a worker), their exact
//! refusal payloads, and the shutdown containment barrier that screens a caller-supplied workdir
//! before any filesystem write.
//!
//! Gates are pure functions over a task status and a path: they do no network IO and hold no
//! state, so the stdio and HTTP transports cannot enforce different rules. The crate must not know
//! about JSON-RPC framing or about which transport asked.
//!
//! The crate is filled by the task-coordinator issue; until then it only states its boundary.
