//! Run-journal and run-handle golden vectors.
