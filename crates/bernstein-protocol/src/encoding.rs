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
/// allocation, for loops that compare a digest per line (eight bytes at a time, [`hex_8`]).
pub fn hex_32(digest: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (digits, bytes) in out.chunks_exact_mut(16).zip(digest.chunks_exact(8)) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(bytes);
        digits.copy_from_slice(&hex_8(eight));
    }
    out
}

/// Lowercase hex of eight bytes in one 128-bit word: each nibble is spread to a byte lane of
/// its own (the high nibble of byte `i` to lane `2i`, the low one to lane `2i + 1`), then every
/// lane becomes its digit at once, `'0'` plus the nibble plus 39 more for `a` to `f`. No lane
/// ever exceeds 102, so nothing carries from one lane into the next.
fn hex_8(bytes: [u8; 8]) -> [u8; 16] {
    const LOW_NIBBLES: u64 = 0x0f0f_0f0f_0f0f_0f0f;
    const LANES: u128 = 0x0101_0101_0101_0101_0101_0101_0101_0101;
    // Byte `i` of `word` moves to byte `2i`.
    let spread = |word: u64| {
        let v = u128::from(word);
        let v = (v | (v << 32)) & 0x0000_0000_ffff_ffff_0000_0000_ffff_ffff;
        let v = (v | (v << 16)) & 0x0000_ffff_0000_ffff_0000_ffff_0000_ffff;
        (v | (v << 8)) & 0x00ff_00ff_00ff_00ff_00ff_00ff_00ff_00ff
    };
    let word = u64::from_le_bytes(bytes);
    let nibbles = spread((word >> 4) & LOW_NIBBLES) | (spread(word & LOW_NIBBLES) << 8);
    // 1 in each lane whose nibble is 10 or more: adding 6 reaches 16 exactly then.
    let letters = ((nibbles + LANES * 6) >> 4) & LANES;
    (nibbles + LANES * u128::from(b'0') + letters * 39).to_le_bytes()
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_digest_is_written_as_lowercase_hex() {
        let check = |digest: [u8; 32], expect: &str| {
            assert_eq!(std::str::from_utf8(&hex_32(&digest)).unwrap(), expect);
            assert_eq!(hex(&digest), expect);
        };
        check([0; 32], &"0".repeat(64));
        check([0xff; 32], &"f".repeat(64));
        let mut counting = [0u8; 32];
        for (at, byte) in counting.iter_mut().enumerate() {
            *byte = (at as u8).wrapping_mul(9);
        }
        check(
            counting,
            "0009121b242d363f48515a636c757e879099a2abb4bdc6cfd8e1eaf3fc050e17",
        );
        let mut edges = [0u8; 32];
        edges[..8].copy_from_slice(&[0x09, 0x0a, 0x90, 0xa0, 0x9a, 0xa9, 0x0f, 0xf0]);
        assert!(
            std::str::from_utf8(&hex_32(&edges))
                .unwrap()
                .starts_with("090a90a09aa90ff0")
        );
    }

    proptest! {
        /// The word-at-a-time digits are the byte-by-byte ones.
        #[test]
        fn hex_32_agrees_with_hex(digest in any::<[u8; 32]>()) {
            prop_assert_eq!(hex_32(&digest).to_vec(), hex(&digest).into_bytes());
        }
    }
}
