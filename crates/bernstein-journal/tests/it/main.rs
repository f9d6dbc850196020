//! The one integration-test binary of `bernstein-journal`: golden vectors from Bernstein 3.23
//! under `fixtures/vectors/`, and cross-process behaviour.

mod artifacts;
mod artifacts_verify;
mod audit;
mod audit_oracle;
mod capsule;
mod claim;
mod dlp;
mod handle_seal;
mod lineage_log;
mod mailbox;
mod races;
mod run_journal;
mod support;
