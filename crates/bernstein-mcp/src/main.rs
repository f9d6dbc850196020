//! The `bernstein-mcp` binary.

fn main() {}
