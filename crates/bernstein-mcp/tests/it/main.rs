//! The one integration-test binary of `bernstein-mcp`: the CLI driven as a user drives it, on
//! copies of the golden vectors, with exit codes and JSON output shapes snapshot-tested.

mod access_log_cli;
mod audit_oracle_cli;
mod completions_cli;
mod dlp_cli;
mod doctor_cli;
mod faults;
mod faults_disk;
mod faults_http;
mod handle_cli;
mod http_cli;
mod logging_cli;
mod memory_cli;
mod metrics_cli;
mod progress_cli;
mod serve_cli;
mod support;
mod verify_cli;
