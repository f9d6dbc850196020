//! Audit-chain golden vectors and properties.
