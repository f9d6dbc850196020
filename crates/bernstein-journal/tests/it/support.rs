//! Shared helpers: fixture paths and scratch copies of vector trees.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `fixtures/` at the workspace root.
pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// `fixtures/vectors/<rel>`.
pub(crate) fn vector(rel: &str) -> PathBuf {
    fixtures().join("vectors").join(rel)
}

/// Writes `bytes` gzipped to `path` (creating its directory), as an archived audit segment is
/// stored.
pub(crate) fn gzip_to(bytes: &[u8], path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut encoder = flate2::write::GzEncoder::new(
        fs::File::create(path).unwrap(),
        flate2::Compression::default(),
    );
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap();
}
