//! Ed25519 signing identities, their PEM files, and the two signature encodings Bernstein uses.
//!
//! Bernstein 3.23 keeps one long-lived Ed25519 key pair per purpose under `.sdd/identity/`
//! (`claim_signing`, `mailbox_signing`, ...): `<name>.pem` holds the private key as PKCS#8 PEM and
//! `<name>.pub` the public key as SPKI PEM (`FORMATS.md` §1.2). This module reads and writes those
//! files in the same bytes, and produces and checks both signature encodings:
//!
//! * *raw*: base64url without padding of the 64-byte signature (claim receipts, mailbox rows);
//! * *detached JWS* with `b64=false` (RFC 7515 + RFC 7797): `<protected>..<signature>`, where the
//!   protected header is `{"alg":"EdDSA","b64":false,"crit":["b64"],"kid":<kid>}` in compact sorted
//!   ASCII JSON and the signing input is `ascii(protected) + "." + payload`.
//!
//! Key layout. The reference (Python `cryptography`) writes private keys as PKCS#8 **v1**: 48 DER
//! bytes, the fixed prefix [`PKCS8_V1_PREFIX`] followed by the 32-byte seed, so one base64 line of
//! 64 characters. New keys are written in exactly that layout from a seed drawn from
//! `ring::rand::SystemRandom` (ring's own `generate_pkcs8` would write v2). Both v1 and v2 are
//! accepted on load; a v2 key's embedded public half must match its seed.
//!
//! Verification mirrors the reference's leniency where it decides a verdict: signatures are
//! base64url-decoded the way Python's `base64.urlsafe_b64decode` does it (characters outside the
//! alphabet are skipped, both alphabets are accepted, unused trailing bits are ignored), and a
//! detached JWS header is compared with Python `dict` equality (`false == 0`).
//!
//! Deliberate differences from the reference, all on the safe side:
//! * a private key file with group or world permission bits is refused
//!   ([`Error::SigningKeyPermissions`]); the reference reads it regardless;
//! * a public key file that is not the public half of the private key next to it is refused
//!   ([`Error::SigningKeyMismatch`]); the reference would sign rows nobody can verify;
//! * when `<name>.pem` exists but `<name>.pub` does not, [`SigningIdentity::load_or_create`]
//!   rebuilds the public file from the private key; the reference would silently replace the whole
//!   identity with a fresh one;
//! * creation holds an exclusive lock on the identity directory, so two processes starting at the
//!   same moment cannot interleave their writes into a mismatched pair;
//! * the temporary private file is created with mode 0600 from the start and fsynced before the
//!   rename, instead of being created with the umask default and narrowed afterwards.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use bernstein_protocol::encoding::{base64_std, base64url_nopad, decode_base64_std};
use bernstein_protocol::pyjson::{Dialect, Object, Value};
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{self, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};

use crate::{Error, Result};

/// The 16 DER bytes that precede the 32-byte seed in a PKCS#8 v1 Ed25519 private key.
///
/// `SEQUENCE(46) { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING(32) } }`.
pub const PKCS8_V1_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

/// The 12 DER bytes that precede the 32-byte public key in an Ed25519 SubjectPublicKeyInfo.
///
/// `SEQUENCE(42) { SEQUENCE { OID 1.3.101.112 }, BIT STRING(33, 0 unused bits) }`.
pub const SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// The PEM label of a PKCS#8 private key.
const PRIVATE_LABEL: &str = "PRIVATE KEY";
/// The PEM label of an SPKI public key.
const PUBLIC_LABEL: &str = "PUBLIC KEY";
/// OpenSSL and Python `cryptography` wrap PEM bodies at 64 characters.
const PEM_LINE_WIDTH: usize = 64;

/// An Ed25519 key pair that signs, with the public PEM exactly as it is stored.
///
/// The public PEM is kept verbatim because Bernstein embeds it into signed artefacts
/// (`signer_public_key_pem`, `signerPublicKeyPem`): a file without a trailing newline must
/// round-trip without one.
pub struct SigningIdentity {
    key_pair: Ed25519KeyPair,
    public_key_pem: String,
}

impl std::fmt::Debug for SigningIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private half never appears in logs; the public PEM identifies the key.
        f.debug_struct("SigningIdentity")
            .field("public_key_pem", &self.public_key_pem)
            .finish_non_exhaustive()
    }
}

impl SigningIdentity {
    /// Builds an identity from a 32-byte Ed25519 seed; the public PEM is the canonical SPKI PEM.
    pub fn from_seed(seed: &[u8; 32]) -> Result<SigningIdentity> {
        let key_pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|rejected| {
            Error::SigningKeyMalformed {
                origin: "seed".to_owned(),
                reason: rejected.to_string(),
            }
        })?;
        let public_key_pem = public_key_pem_from_bytes(&public_key_bytes(&key_pair));
        Ok(SigningIdentity {
            key_pair,
            public_key_pem,
        })
    }

    /// Parses a PKCS#8 PEM private key (v1 or v2); the public PEM is the canonical SPKI PEM.
    pub fn from_private_pem(private_key_pem: &str) -> Result<SigningIdentity> {
        let key_pair = parse_private_pem(private_key_pem, "private key PEM")?;
        let public_key_pem = public_key_pem_from_bytes(&public_key_bytes(&key_pair));
        Ok(SigningIdentity {
            key_pair,
            public_key_pem,
        })
    }

    /// Parses a private PEM and its public PEM; the public PEM is kept verbatim and must be the
    /// public half of the private key.
    pub fn from_pem_pair(private_key_pem: &str, public_key_pem: &str) -> Result<SigningIdentity> {
        let key_pair = parse_private_pem(private_key_pem, "private key PEM")?;
        let public = PublicKey::parse_spki_pem(public_key_pem, "public key PEM")?;
        if public.bytes != public_key_bytes(&key_pair) {
            return Err(Error::SigningKeyMalformed {
                origin: "public key PEM".to_owned(),
                reason: "it is not the public half of the private key".to_owned(),
            });
        }
        Ok(SigningIdentity {
            key_pair,
            public_key_pem: public_key_pem.to_owned(),
        })
    }

    /// Loads an existing pair from its two files, read verbatim.
    ///
    /// The private key file must grant no group or world permission bits.
    pub fn load(private_path: &Path, public_path: &Path) -> Result<SigningIdentity> {
        let private_pem = read_private_key_file(private_path)?;
        let public_pem = read_ascii_file(public_path)?;
        let key_pair = parse_private_pem(&private_pem, &private_path.display().to_string())?;
        let public = PublicKey::parse_spki_pem(&public_pem, &public_path.display().to_string())?;
        if public.bytes != public_key_bytes(&key_pair) {
            return Err(Error::SigningKeyMismatch {
                private: private_path.to_path_buf(),
                public: public_path.to_path_buf(),
            });
        }
        Ok(SigningIdentity {
            key_pair,
            public_key_pem: public_pem,
        })
    }

    /// Loads `<identity_dir>/<name>.pem` and `<name>.pub`, creating them on first use exactly as
    /// Bernstein's `load_or_create_signing_identity` does.
    ///
    /// Creation writes the private PEM (PKCS#8 v1) to `<name>.pem.tmp` with mode 0600, fsyncs it
    /// and renames it into place, then writes the public PEM plainly. `name` must be a plain file
    /// stem such as `claim_signing` or `mailbox_signing`.
    pub fn load_or_create(identity_dir: &Path, name: &str) -> Result<SigningIdentity> {
        check_identity_name(identity_dir, name)?;
        let private_path = identity_dir.join(format!("{name}.pem"));
        let public_path = identity_dir.join(format!("{name}.pub"));
        if private_path.is_file() && public_path.is_file() {
            return SigningIdentity::load(&private_path, &public_path);
        }
        crate::durable::create_dir_all_durable(identity_dir)
            .map_err(|e| Error::io("create directory", identity_dir, e))?;
        // Serialise creators: without the lock two processes could each rename their own private
        // key into place and then write their own public key, leaving a mismatched pair.
        let dir_handle =
            File::open(identity_dir).map_err(|e| Error::io("open", identity_dir, e))?;
        dir_handle
            .lock()
            .map_err(|e| Error::io("lock", identity_dir, e))?;
        let private_exists = private_path.is_file();
        let public_exists = public_path.is_file();
        if private_exists && public_exists {
            return SigningIdentity::load(&private_path, &public_path);
        }
        if private_exists {
            // Keep the existing private key: replacing it would silently change the identity
            // every earlier signature was made with. Only its public half is missing.
            let private_pem = read_private_key_file(&private_path)?;
            let identity =
                SigningIdentity::from_private_pem(&private_pem).map_err(|e| match e {
                    Error::SigningKeyMalformed { reason, .. } => Error::SigningKeyMalformed {
                        origin: private_path.display().to_string(),
                        reason,
                    },
                    other => other,
                })?;
            write_plain(&public_path, identity.public_key_pem.as_bytes())?;
            return Ok(identity);
        }
        let mut seed = [0u8; 32];
        SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| Error::Encode("the system random generator failed".to_owned()))?;
        let identity = SigningIdentity::from_seed(&seed)?;
        let private_pem = private_key_pem_from_seed(&seed);
        seed.fill(0);
        let tmp_path = identity_dir.join(format!("{name}.pem.tmp"));
        write_private_tmp(&tmp_path, private_pem.as_bytes())?;
        fs::rename(&tmp_path, &private_path)
            .map_err(|e| Error::io("rename into place", &private_path, e))?;
        write_plain(&public_path, identity.public_key_pem.as_bytes())?;
        Ok(identity)
    }

    /// The public key PEM as stored (verbatim when loaded from a file).
    pub fn public_key_pem(&self) -> &str {
        &self.public_key_pem
    }

    /// The public half as a verifier.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            bytes: public_key_bytes(&self.key_pair),
        }
    }

    /// The raw 64-byte Ed25519 signature of `payload`.
    pub fn sign_bytes(&self, payload: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.key_pair.sign(payload).as_ref());
        out
    }

    /// The *raw* encoding: base64url without padding of the signature over `payload`.
    pub fn sign_raw(&self, payload: &[u8]) -> String {
        base64url_nopad(&self.sign_bytes(payload))
    }

    /// The detached JWS (`b64=false`) over `payload`: `<protected>..<signature>`.
    pub fn sign_detached_jws(&self, payload: &[u8], kid: &str) -> String {
        let protected = detached_jws_protected_header(kid);
        let signature = self.sign_bytes(&jws_signing_input(&protected, payload));
        format!("{protected}..{}", base64url_nopad(&signature))
    }
}

/// An Ed25519 public key that verifies both signature encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey {
    bytes: [u8; 32],
}

impl PublicKey {
    /// Parses an SPKI PEM (`-----BEGIN PUBLIC KEY-----`) holding an Ed25519 key.
    pub fn from_spki_pem(pem: &str) -> Result<PublicKey> {
        PublicKey::parse_spki_pem(pem, "public key PEM")
    }

    /// Wraps 32 raw public key bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> PublicKey {
        PublicKey { bytes }
    }

    /// The 32 raw public key bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// The canonical SPKI PEM, as the reference writes `<name>.pub`.
    pub fn to_spki_pem(&self) -> String {
        public_key_pem_from_bytes(&self.bytes)
    }

    /// Checks a *raw* signature (base64url, padding optional) over `payload`.
    pub fn verify_raw(&self, payload: &[u8], signature: &str) -> bool {
        match python_b64url_decode(signature) {
            Some(sig) => self.verify_bytes(payload, &sig),
            None => false,
        }
    }

    /// Checks a detached JWS (`b64=false`) over `payload` whose header must name `kid`.
    ///
    /// The rules are the reference's `DetachedJwsVerifier.verify`: exactly three dot-separated
    /// segments with an empty middle one, a protected header equal (as a Python `dict`) to the
    /// expected EdDSA/`b64=false`/critical header, and a valid signature over
    /// `ascii(protected) + "." + payload`.
    pub fn verify_detached_jws(&self, payload: &[u8], jws: &str, kid: &str) -> bool {
        let mut parts = jws.splitn(3, '.');
        let (Some(protected), Some(empty), Some(signature)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if !empty.is_empty() || signature.contains('.') || !protected.is_ascii() {
            return false;
        }
        let Some(header_bytes) = python_b64url_decode(protected) else {
            return false;
        };
        let Ok(header_text) = std::str::from_utf8(&header_bytes) else {
            return false;
        };
        let Ok(header) = Value::parse(header_text) else {
            return false;
        };
        if !python_eq(&header, &Value::Object(expected_jws_header(kid))) {
            return false;
        }
        match python_b64url_decode(signature) {
            Some(sig) => self.verify_bytes(&jws_signing_input(protected, payload), &sig),
            None => false,
        }
    }

    fn verify_bytes(&self, message: &[u8], signature_bytes: &[u8]) -> bool {
        UnparsedPublicKey::new(&signature::ED25519, &self.bytes)
            .verify(message, signature_bytes)
            .is_ok()
    }

    fn parse_spki_pem(pem: &str, origin: &str) -> Result<PublicKey> {
        let der = pem_decode(pem, PUBLIC_LABEL).map_err(|reason| Error::SigningKeyMalformed {
            origin: origin.to_owned(),
            reason,
        })?;
        let key = der
            .strip_prefix(&SPKI_PREFIX[..])
            .and_then(|rest| <[u8; 32]>::try_from(rest).ok())
            .ok_or_else(|| Error::SigningKeyMalformed {
                origin: origin.to_owned(),
                reason: "not an Ed25519 SubjectPublicKeyInfo".to_owned(),
            })?;
        Ok(PublicKey { bytes: key })
    }
}

/// Checks a *raw* signature over `payload` against an SPKI PEM; `false` for any malformed input.
pub fn verify_raw_signature(payload: &[u8], signature: &str, public_key_pem: &str) -> bool {
    PublicKey::from_spki_pem(public_key_pem).is_ok_and(|key| key.verify_raw(payload, signature))
}

/// Checks a detached JWS over `payload` against an SPKI PEM and the expected `kid`; `false` for
/// any malformed input.
pub fn verify_detached_jws(payload: &[u8], jws: &str, kid: &str, public_key_pem: &str) -> bool {
    PublicKey::from_spki_pem(public_key_pem)
        .is_ok_and(|key| key.verify_detached_jws(payload, jws, kid))
}

/// The base64url protected header of a detached JWS signed under `kid`.
///
/// The header JSON is `json.dumps(header, separators=(",", ":"), sort_keys=True)`, whose default
/// `ensure_ascii=True` escapes a non-ASCII `kid`.
pub fn detached_jws_protected_header(kid: &str) -> String {
    let header = Value::Object(expected_jws_header(kid));
    base64url_nopad(header.dumps(Dialect::PY_COMPACT_ASCII).as_bytes())
}

/// The PKCS#8 v1 PEM of a seed, byte-identical to what Python `cryptography` writes.
pub fn private_key_pem_from_seed(seed: &[u8; 32]) -> String {
    let mut der = Vec::with_capacity(48);
    der.extend_from_slice(&PKCS8_V1_PREFIX);
    der.extend_from_slice(seed);
    pem_encode(PRIVATE_LABEL, &der)
}

/// The SPKI PEM of a raw public key, byte-identical to what Python `cryptography` writes.
pub fn public_key_pem_from_bytes(public_key: &[u8; 32]) -> String {
    let mut der = Vec::with_capacity(44);
    der.extend_from_slice(&SPKI_PREFIX);
    der.extend_from_slice(public_key);
    pem_encode(PUBLIC_LABEL, &der)
}

/// Decodes base64url the way Python's `base64.urlsafe_b64decode(s + padding)` does.
///
/// Python's decoder is not strict, and a signature verdict depends on it: characters outside the
/// base64 alphabets are skipped, `-`/`_` and `+`/`/` are both accepted, decoding stops at a
/// padding sequence that completes a quantum, and unused trailing bits are ignored. `None` where
/// Python raises (non-ASCII input, one dangling character, incorrect padding).
pub fn python_b64url_decode(text: &str) -> Option<Vec<u8>> {
    if !text.is_ascii() {
        return None;
    }
    // The reference appends `"=" * (-len(s) % 4)` before decoding.
    let padding = (4 - text.len() % 4) % 4;
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut quad_pos = 0u8;
    let mut pads = 0usize;
    let mut left = 0u8;
    for byte in text.bytes().chain(std::iter::repeat_n(b'=', padding)) {
        if byte == b'=' {
            if quad_pos >= 2 {
                pads += 1;
                if usize::from(quad_pos) + pads >= 4 {
                    return Some(out);
                }
            }
            continue;
        }
        let Some(sextet) = base64_sextet(byte) else {
            continue;
        };
        pads = 0;
        match quad_pos {
            0 => {
                left = sextet;
                quad_pos = 1;
            }
            1 => {
                out.push((left << 2) | (sextet >> 4));
                left = sextet & 0x0f;
                quad_pos = 2;
            }
            2 => {
                out.push((left << 4) | (sextet >> 2));
                left = sextet & 0x03;
                quad_pos = 3;
            }
            _ => {
                out.push((left << 6) | sextet);
                left = 0;
                quad_pos = 0;
            }
        }
    }
    (quad_pos == 0).then_some(out)
}

fn base64_sextet(byte: u8) -> Option<u8> {
    match byte {
        b'A'..=b'Z' => Some(byte - b'A'),
        b'a'..=b'z' => Some(byte - b'a' + 26),
        b'0'..=b'9' => Some(byte - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

fn expected_jws_header(kid: &str) -> Object {
    Object::new()
        .with("alg", "EdDSA")
        .with("b64", false)
        .with("crit", vec!["b64"])
        .with("kid", kid)
}

fn jws_signing_input(protected: &str, payload: &[u8]) -> Vec<u8> {
    let mut input = Vec::with_capacity(protected.len() + 1 + payload.len());
    input.extend_from_slice(protected.as_bytes());
    input.push(b'.');
    input.extend_from_slice(payload);
    input
}

/// Python `==` between two decoded JSON values: `dict` equality ignores key order, and `bool`,
/// `int` and `float` compare by numeric value.
pub(crate) fn python_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| python_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| python_eq(v, w)))
        }
        (x, y) => match (python_number(x), python_number(y)) {
            (Some(p), Some(q)) => p == q,
            _ => false,
        },
    }
}

/// A number as Python compares it; exact for integers that fit `i128` and for booleans.
fn python_number(value: &Value) -> Option<PyNumber> {
    match value {
        Value::Bool(b) => Some(PyNumber::Int(i128::from(*b))),
        Value::Int(i) => i.as_str().parse().ok().map(PyNumber::Int),
        Value::Float(x) => Some(PyNumber::Float(*x)),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
enum PyNumber {
    Int(i128),
    Float(f64),
}

impl PartialEq for PyNumber {
    fn eq(&self, other: &PyNumber) -> bool {
        match (*self, *other) {
            (PyNumber::Int(a), PyNumber::Int(b)) => a == b,
            (PyNumber::Float(a), PyNumber::Float(b)) => a == b,
            // Python compares an int and a float exactly; an integral float below 2^127 converts
            // to i128 without loss, and any other float cannot equal an int.
            (PyNumber::Int(i), PyNumber::Float(x)) | (PyNumber::Float(x), PyNumber::Int(i)) => {
                x.fract() == 0.0 && x.abs() < 1.7e38 && (x as i128) == i
            }
        }
    }
}

pub(crate) fn python_value_eq(a: &Value, b: &Value) -> bool {
    python_eq(a, b)
}

fn public_key_bytes(key_pair: &Ed25519KeyPair) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(key_pair.public_key().as_ref());
    out
}

fn parse_private_pem(pem: &str, origin: &str) -> Result<Ed25519KeyPair> {
    let der = pem_decode(pem, PRIVATE_LABEL).map_err(|reason| Error::SigningKeyMalformed {
        origin: origin.to_owned(),
        reason,
    })?;
    // ring parses both layouts: v1 (the reference's, seed only) and v2 (seed plus public key,
    // checked for consistency).
    Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der).map_err(|rejected| {
        Error::SigningKeyMalformed {
            origin: origin.to_owned(),
            reason: format!("not an Ed25519 PKCS#8 private key ({rejected})"),
        }
    })
}

fn pem_encode(label: &str, der: &[u8]) -> String {
    let body = base64_std(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    // Base64 output is ASCII, so slicing it at any byte offset is a character boundary.
    let mut rest = body.as_str();
    while !rest.is_empty() {
        let (line, tail) = rest.split_at(rest.len().min(PEM_LINE_WIDTH));
        out.push_str(line);
        out.push('\n');
        rest = tail;
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Extracts the DER inside the first `-----BEGIN <label>-----` block.
///
/// Like OpenSSL's PEM reader, text before the BEGIN line and after the END line is ignored, line
/// lengths are free and a missing final newline is accepted. Encapsulated headers (encrypted
/// keys) and non-ASCII text are refused: Python encodes the PEM to ASCII before parsing it.
fn pem_decode(pem: &str, label: &str) -> std::result::Result<Vec<u8>, String> {
    if !pem.is_ascii() {
        return Err("PEM text is not ASCII".to_owned());
    }
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut lines = pem.split('\n').map(|line| line.trim_end_matches('\r'));
    if !lines.by_ref().any(|line| line.trim_end() == begin) {
        return Err(format!("no {begin} line"));
    }
    let mut body = String::new();
    let mut ended = false;
    for line in lines.by_ref() {
        let line = line.trim();
        if line == end {
            ended = true;
            break;
        }
        if line.contains(':') || line.starts_with("-----") {
            return Err("unexpected header or boundary inside the PEM body".to_owned());
        }
        body.push_str(line);
    }
    if !ended {
        return Err(format!("no {end} line"));
    }
    if body.is_empty() {
        return Err("empty PEM body".to_owned());
    }
    decode_base64_std(&body).ok_or_else(|| "PEM body is not valid base64".to_owned())
}

fn check_identity_name(identity_dir: &Path, name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        Ok(())
    } else {
        Err(Error::Containment {
            path: identity_dir.join(name),
            reason: "an identity name must be a plain file stem ([A-Za-z0-9_.-], no leading dot)"
                .to_owned(),
        })
    }
}

fn read_ascii_file(path: &Path) -> Result<String> {
    let bytes = fs::read(path).map_err(|e| Error::io("read", path, e))?;
    String::from_utf8(bytes)
        .ok()
        .filter(|text| text.is_ascii())
        .ok_or_else(|| Error::SigningKeyMalformed {
            origin: path.display().to_string(),
            reason: "the file is not ASCII text".to_owned(),
        })
}

fn read_private_key_file(path: &Path) -> Result<String> {
    let metadata = fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    let mode = permission_bits(&metadata);
    if mode & 0o077 != 0 {
        return Err(Error::SigningKeyPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    read_ascii_file(path)
}

#[cfg(unix)]
fn permission_bits(metadata: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    metadata.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn permission_bits(_metadata: &fs::Metadata) -> u32 {
    // Without POSIX modes there are no group or world bits to refuse.
    0o600
}

fn write_private_tmp(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    // A stale temporary file keeps its old mode through `truncate`, so narrow it explicitly.
    restrict_to_owner(path)?;
    file.write_all(bytes)
        .map_err(|e| Error::io("write", path, e))?;
    file.sync_all().map_err(|e| Error::io("fsync", path, e))
}

#[cfg(unix)]
fn restrict_to_owner(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io("chmod 600", path, e))
}

#[cfg(not(unix))]
fn restrict_to_owner(_path: &Path) -> Result<()> {
    Ok(())
}

fn write_plain(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).map_err(|e| Error::io("write", path, e))
}

/// The private and public file paths of identity `name` under `identity_dir`.
pub fn identity_paths(identity_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (
        identity_dir.join(format!("{name}.pem")),
        identity_dir.join(format!("{name}.pub")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED_22: [u8; 32] = [0x22; 32];
    const MAILBOX_PUBLIC_PEM: &str = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAoJql9HpnWYAv+VX43C0qFKXJnSO+l/hkEn/5ODRVpPA=\n-----END PUBLIC KEY-----\n";
    const MAILBOX_PRIVATE_PEM: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEICIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIi\n-----END PRIVATE KEY-----\n";

    #[test]
    fn seed_pems_match_the_reference_layout() {
        assert_eq!(private_key_pem_from_seed(&SEED_22), MAILBOX_PRIVATE_PEM);
        let identity = SigningIdentity::from_seed(&SEED_22).unwrap();
        assert_eq!(identity.public_key_pem(), MAILBOX_PUBLIC_PEM);
    }

    #[test]
    fn pkcs8_v2_is_accepted_and_checked() {
        let rng = SystemRandom::new();
        let v2 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pem = pem_encode(PRIVATE_LABEL, v2.as_ref());
        let identity = SigningIdentity::from_private_pem(&pem).unwrap();
        let payload = b"payload";
        assert!(
            identity
                .public_key()
                .verify_raw(payload, &identity.sign_raw(payload))
        );
        // A v2 key whose embedded public half was altered is refused.
        let mut broken = v2.as_ref().to_vec();
        let last = broken.len() - 1;
        broken[last] ^= 1;
        let err = SigningIdentity::from_private_pem(&pem_encode(PRIVATE_LABEL, &broken));
        assert!(matches!(err, Err(Error::SigningKeyMalformed { .. })));
    }

    fn check_pem_refusal(pem: &str, expect_reason: &str) {
        match SigningIdentity::from_private_pem(pem) {
            Err(Error::SigningKeyMalformed { reason, .. }) => {
                assert!(
                    reason.contains(expect_reason),
                    "{reason:?} lacks {expect_reason:?}"
                );
            }
            other => panic!("expected a malformed-key error, got {other:?}"),
        }
    }

    #[test]
    fn malformed_private_pems_are_refused_with_a_reason() {
        check_pem_refusal("", "no -----BEGIN PRIVATE KEY----- line");
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAw\n",
            "no -----END PRIVATE KEY----- line",
        );
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n",
            "not valid base64",
        );
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
            "empty PEM body",
        );
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\nMCowBQYDK2VwAyEAoJql9HpnWYAv+VX43C0qFKXJnSO+l/hkEn/5ODRVpPA=\n-----END PRIVATE KEY-----\n",
            "not an Ed25519 PKCS#8 private key",
        );
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\nMC4C\n-----END PRIVATE KEY-----\n",
            "unexpected header",
        );
        check_pem_refusal(
            "-----BEGIN PRIVATE KEY-----\né\n-----END PRIVATE KEY-----\n",
            "not ASCII",
        );
    }

    #[test]
    fn pem_reader_tolerates_what_openssl_tolerates() {
        let crlf = MAILBOX_PRIVATE_PEM.replace('\n', "\r\n");
        let no_newline = MAILBOX_PRIVATE_PEM.trim_end();
        let with_preamble = format!("comment line\n{MAILBOX_PRIVATE_PEM}trailing text\n");
        for pem in [crlf.as_str(), no_newline, with_preamble.as_str()] {
            let identity = SigningIdentity::from_private_pem(pem).unwrap();
            assert_eq!(identity.public_key_pem(), MAILBOX_PUBLIC_PEM);
        }
    }

    #[test]
    fn pem_pair_must_match() {
        let other = SigningIdentity::from_seed(&[0x11; 32]).unwrap();
        let err = SigningIdentity::from_pem_pair(MAILBOX_PRIVATE_PEM, other.public_key_pem());
        assert!(matches!(err, Err(Error::SigningKeyMalformed { .. })));
        // The verbatim public PEM (here without its final newline) is kept as given.
        let trimmed = MAILBOX_PUBLIC_PEM.trim_end();
        let identity = SigningIdentity::from_pem_pair(MAILBOX_PRIVATE_PEM, trimmed).unwrap();
        assert_eq!(identity.public_key_pem(), trimmed);
    }

    #[test]
    fn raw_signature_round_trip_and_tamper() {
        let identity = SigningIdentity::from_seed(&SEED_22).unwrap();
        let sig = identity.sign_raw(b"hello");
        assert_eq!(sig.len(), 86);
        assert!(verify_raw_signature(b"hello", &sig, MAILBOX_PUBLIC_PEM));
        assert!(!verify_raw_signature(b"hellO", &sig, MAILBOX_PUBLIC_PEM));
        assert!(!verify_raw_signature(b"hello", "", MAILBOX_PUBLIC_PEM));
        assert!(!verify_raw_signature(b"hello", &sig, ""));
        assert!(!verify_raw_signature(
            b"hello",
            &sig,
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
        ));
    }

    #[test]
    fn raw_signature_decoding_is_as_lenient_as_python() {
        let identity = SigningIdentity::from_seed(&SEED_22).unwrap();
        let sig = identity.sign_raw(b"hello");
        let key = identity.public_key();
        // Padding, the standard alphabet, and junk characters are all accepted by Python.
        assert!(key.verify_raw(b"hello", &format!("{sig}==")));
        let standard = sig.replace('-', "+").replace('_', "/");
        assert!(key.verify_raw(b"hello", &standard));
        // Junk is skipped, but the padding Python appends is computed from the length with the
        // junk: three junk characters yield "==" after the 86 data characters (accepted), one
        // yields a lone "=" (Python raises "Incorrect padding").
        let with_junk = format!("{}*!*{}", &sig[..10], &sig[10..]);
        assert!(key.verify_raw(b"hello", &with_junk));
        let one_junk = format!("{}*{}", &sig[..10], &sig[10..]);
        assert!(!key.verify_raw(b"hello", &one_junk));
        // The last character carries 2 data bits (its high bits) and 4 unused bits; Python ignores
        // the unused ones.
        let last = sig.chars().last().unwrap();
        let sextet = base64_sextet(last as u8).unwrap();
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let flipped = alphabet[usize::from(sextet ^ 0b0001)] as char;
        let tweaked = format!("{}{flipped}", &sig[..sig.len() - 1]);
        assert!(key.verify_raw(b"hello", &tweaked));
        // But a changed data bit is a different signature.
        let flipped = alphabet[usize::from(sextet ^ 0b10_0000)] as char;
        let tweaked = format!("{}{flipped}", &sig[..sig.len() - 1]);
        assert!(!key.verify_raw(b"hello", &tweaked));
    }

    #[test]
    fn python_b64url_decode_cases() {
        fn check(input: &str, expect: Option<&[u8]>) {
            assert_eq!(python_b64url_decode(input).as_deref(), expect, "{input:?}");
        }
        check("", Some(b""));
        check("YQ", Some(b"a"));
        check("YQ==", Some(b"a"));
        check("YWI", Some(b"ab"));
        check("YWJj", Some(b"abc"));
        check("Y", None);
        check("YWJjZ", None);
        check("YQ==YWJj", Some(b"a"));
        check("é", None);
    }

    #[test]
    fn detached_jws_round_trip() {
        let identity = SigningIdentity::from_seed(&SEED_22).unwrap();
        let jws = identity.sign_detached_jws(b"{\"a\":1}", "agent-1");
        let (protected, rest) = jws.split_once("..").unwrap();
        assert_eq!(protected, detached_jws_protected_header("agent-1"));
        let header = python_b64url_decode(protected).unwrap();
        assert_eq!(
            std::str::from_utf8(&header).unwrap(),
            r#"{"alg":"EdDSA","b64":false,"crit":["b64"],"kid":"agent-1"}"#
        );
        assert_eq!(rest.len(), 86);
        let key = identity.public_key();
        assert!(key.verify_detached_jws(b"{\"a\":1}", &jws, "agent-1"));
        assert!(verify_detached_jws(
            b"{\"a\":1}",
            &jws,
            "agent-1",
            MAILBOX_PUBLIC_PEM
        ));
        assert!(!key.verify_detached_jws(b"{\"a\":2}", &jws, "agent-1"));
        assert!(!key.verify_detached_jws(b"{\"a\":1}", &jws, "agent-2"));
        assert!(!key.verify_detached_jws(b"{\"a\":1}", &jws.replacen("..", ".x.", 1), "agent-1"));
        assert!(!key.verify_detached_jws(b"{\"a\":1}", &format!("{jws}.x"), "agent-1"));
        assert!(!key.verify_detached_jws(b"{\"a\":1}", "no-dots", "agent-1"));
    }

    #[test]
    fn detached_jws_header_uses_python_equality() {
        // `{"b64": 0}` equals `{"b64": False}` in Python, and key order is irrelevant.
        let identity = SigningIdentity::from_seed(&SEED_22).unwrap();
        let header = r#"{"kid":"k","crit":["b64"],"b64":0,"alg":"EdDSA"}"#;
        let protected = base64url_nopad(header.as_bytes());
        let sig = identity.sign_bytes(&jws_signing_input(&protected, b"p"));
        let jws = format!("{protected}..{}", base64url_nopad(&sig));
        assert!(identity.public_key().verify_detached_jws(b"p", &jws, "k"));
        // An extra header field makes the dicts unequal.
        let header = r#"{"alg":"EdDSA","b64":false,"crit":["b64"],"kid":"k","x":1}"#;
        let protected = base64url_nopad(header.as_bytes());
        let sig = identity.sign_bytes(&jws_signing_input(&protected, b"p"));
        let jws = format!("{protected}..{}", base64url_nopad(&sig));
        assert!(!identity.public_key().verify_detached_jws(b"p", &jws, "k"));
    }

    #[test]
    fn non_ascii_kid_is_escaped_in_the_header() {
        let header = python_b64url_decode(&detached_jws_protected_header("ké")).unwrap();
        assert_eq!(
            std::str::from_utf8(&header).unwrap(),
            r#"{"alg":"EdDSA","b64":false,"crit":["b64"],"kid":"k\u00e9"}"#
        );
    }

    #[cfg(unix)]
    #[test]
    fn load_or_create_writes_the_reference_layout_and_reloads() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let identity_dir = dir.path().join(".sdd/identity");
        let created = SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap();
        let (private_path, public_path) = identity_paths(&identity_dir, "mailbox_signing");
        let private_pem = fs::read_to_string(&private_path).unwrap();
        let public_pem = fs::read_to_string(&public_path).unwrap();
        let mode = fs::metadata(&private_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!identity_dir.join("mailbox_signing.pem.tmp").exists());
        // 48 DER bytes in the v1 layout: one 64-character base64 line.
        let lines: Vec<&str> = private_pem.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], "-----BEGIN PRIVATE KEY-----");
        assert_eq!(lines[1].len(), 64);
        assert!(lines[1].starts_with("MC4CAQAwBQYDK2VwBCIEI"));
        assert_eq!(lines[2], "-----END PRIVATE KEY-----");
        assert!(private_pem.ends_with("-----\n"));
        assert_eq!(public_pem, created.public_key_pem());
        assert_eq!(public_pem.lines().nth(1).unwrap().len(), 60);
        let der = decode_base64_std(lines[1]).unwrap();
        let seed: [u8; 32] = der[16..].try_into().unwrap();
        assert_eq!(private_key_pem_from_seed(&seed), private_pem);
        // A second call loads the same pair.
        let loaded = SigningIdentity::load_or_create(&identity_dir, "mailbox_signing").unwrap();
        assert_eq!(loaded.public_key(), created.public_key());
    }

    #[cfg(unix)]
    #[test]
    fn missing_public_half_is_rebuilt_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let created = SigningIdentity::load_or_create(dir.path(), "claim_signing").unwrap();
        let (private_path, public_path) = identity_paths(dir.path(), "claim_signing");
        let private_before = fs::read(&private_path).unwrap();
        fs::remove_file(&public_path).unwrap();
        let again = SigningIdentity::load_or_create(dir.path(), "claim_signing").unwrap();
        assert_eq!(again.public_key(), created.public_key());
        assert_eq!(fs::read(&private_path).unwrap(), private_before);
        assert_eq!(
            fs::read_to_string(&public_path).unwrap(),
            created.public_key_pem()
        );
    }

    #[cfg(unix)]
    #[test]
    fn group_readable_private_key_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        SigningIdentity::load_or_create(dir.path(), "mailbox_signing").unwrap();
        let (private_path, _) = identity_paths(dir.path(), "mailbox_signing");
        fs::set_permissions(&private_path, fs::Permissions::from_mode(0o644)).unwrap();
        match SigningIdentity::load_or_create(dir.path(), "mailbox_signing") {
            Err(Error::SigningKeyPermissions { path, mode }) => {
                assert_eq!(path, private_path);
                assert_eq!(mode, 0o644);
            }
            other => panic!("expected a permissions error, got {other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn mismatched_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        SigningIdentity::load_or_create(dir.path(), "a").unwrap();
        let other = SigningIdentity::load_or_create(dir.path(), "b").unwrap();
        let (_, public_a) = identity_paths(dir.path(), "a");
        fs::write(&public_a, other.public_key_pem()).unwrap();
        let err = SigningIdentity::load_or_create(dir.path(), "a");
        assert!(matches!(err, Err(Error::SigningKeyMismatch { .. })));
    }

    #[test]
    fn identity_names_must_be_plain_stems() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["", "../evil", "a/b", ".hidden", "a\\b"] {
            let err = SigningIdentity::load_or_create(dir.path(), name);
            assert!(matches!(err, Err(Error::Containment { .. })), "{name:?}");
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
