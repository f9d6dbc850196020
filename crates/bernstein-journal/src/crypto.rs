//! Hashes, HMACs and key derivation, all from `ring`.

use bernstein_protocol::encoding::hex;
use ring::{digest, hkdf, hmac};

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

/// Raw SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

/// HMAC-SHA256 of the concatenation of `parts` under `key`, as lowercase hex.
pub fn hmac_sha256_hex(key: &[u8], parts: &[&[u8]]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    for part in parts {
        ctx.update(part);
    }
    hex(ctx.sign().as_ref())
}

/// Constant-time comparison of two hex digests (or any two byte strings).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// HKDF-SHA256 with no salt (RFC 5869 zeros), `info` = the domain string, 32 output bytes.
///
/// Bernstein derives its per-store keys this way: `derive_key(master, "audit")`,
/// `derive_key(master, "lineage")`.
pub fn derive_key(master: &[u8], domain: &str) -> [u8; 32] {
    struct Len32;
    impl hkdf::KeyType for Len32 {
        fn len(&self) -> usize {
            32
        }
    }
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]);
    let prk = salt.extract(master);
    let info = [domain.as_bytes()];
    let mut out = [0u8; 32];
    // `expand` and `fill` only fail when the requested length exceeds 255 × 32 bytes.
    if let Ok(okm) = prk.expand(&info, Len32) {
        let _ = okm.fill(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn hkdf_matches_rfc5869_shape() {
        // RFC 5869 test case 3: zero-length salt and info, 22 bytes of 0x0b.
        let ikm = [0x0bu8; 22];
        struct L42;
        impl hkdf::KeyType for L42 {
            fn len(&self) -> usize {
                42
            }
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(&ikm);
        let mut out = [0u8; 42];
        prk.expand(&[], L42).unwrap().fill(&mut out).unwrap();
        assert_eq!(
            hex(&out),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"
        );
        assert_eq!(derive_key(&ikm, "").len(), 32);
    }
}
