//! Integration tests of the tool catalogue against a real embedded store in a temporary
//! project: the advertised lists, the input firewall, every error payload, the worker loop and
//! run-handle polling.

mod common;
mod confinement;
mod errors;
mod firewall;
mod forwarding;
mod hostile_fs;
mod listing;
mod reference_replay;
mod remote;
mod remote_lifecycle;
mod run_status;
mod settling;
mod shutdown;
mod status_pages;
mod worker_loop;
