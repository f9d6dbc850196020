//! The stdio seam end to end: a whole session over an in-memory duplex, with the real
//! dispatcher, catalogue and embedded backend.

mod cancel;
mod framing;
mod fuzz_twins;
mod hostile;
mod nesting;
mod session;
