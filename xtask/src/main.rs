//! See <https://github.com/matklad/cargo-xtask/>.

fn main() {}
