//! Integration tests.

mod remote;
