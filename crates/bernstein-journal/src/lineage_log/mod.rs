//! The ADR-009 lineage log (in progress).
