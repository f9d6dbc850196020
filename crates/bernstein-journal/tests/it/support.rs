//! Shared helpers: fixture paths and scratch copies of vector trees.

use std::path::{Path, PathBuf};

/// `fixtures/` at the workspace root.
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// `fixtures/vectors/<rel>`.
pub(crate) fn vector(rel: &str) -> PathBuf {
    fixtures().join("vectors").join(rel)
}
