//! Store benchmark (filled in below).
fn main() {}
