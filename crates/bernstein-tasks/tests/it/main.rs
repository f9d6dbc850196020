//! Integration tests of `bernstein-tasks`: the portable [`TaskBackend`] suite and the embedded
//! store's files, refusals, crash safety and multi-process behaviour.
//!
//! [`TaskBackend`]: bernstein_tasks::TaskBackend

mod bad_input;
mod durability;
mod embedded;
mod processes;
mod remote;
mod scale;
pub mod suite;
