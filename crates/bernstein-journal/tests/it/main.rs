//! The one integration-test binary of `bernstein-journal`: golden vectors from Bernstein 3.23
//! under `fixtures/vectors/`, and cross-process behaviour.

mod audit;
mod mailbox;
mod run_journal;
mod support;
