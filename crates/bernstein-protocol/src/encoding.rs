//! Text encodings the evidence formats use: lowercase hex and the two base64 alphabets.

use base64::Engine as _;

/// The two lowercase hex digits of `byte`.
fn hex_pair(byte: u8) -> [u8; 2] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    [
        DIGITS[usize::from(byte >> 4)],
        DIGITS[usize::from(byte & 0xf)],
    ]
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        let [high, low] = hex_pair(b);
        out.push(char::from(high));
        out.push(char::from(low));
    }
    out
}

/// Lowercase hex of a 32-byte digest, on the stack: the same digits as [`hex`] without an
/// allocation, for loops that compare a digest per line.
pub fn hex_32(digest: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(digest) {
        pair.copy_from_slice(&hex_pair(byte));
    }
    out
}

/// Standard base64 with `=` padding (Python `base64.b64encode`), used by poll tokens.
pub fn base64_std(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// URL-safe base64 without padding (RFC 7515 §2), used by signatures.
pub fn base64url_nopad(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes URL-safe base64, with or without padding.
pub fn decode_base64url(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

/// Decodes standard base64 with padding.
pub fn decode_base64_std(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Whether `text` is exactly `len` lowercase hex digits.
pub fn is_lower_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
