//! The two journal hash profiles and the payload / event hash pre-images (FORMATS §3.1).
//!
//! ```text
//! EXCLUDED      = {ts, elapsed_s, index, prev_hash, payload_hash, event_hash}
//! payload_hash  = sha256_hex(canon({row minus EXCLUDED} ∪ {"event": type}))
//! event_hash    = sha256_hex(canon({"event_type","index","payload_hash","prev_hash"}))
//! ```
//!
//! `canon` is PY-COMPACT-ASCII (`json.dumps(sort_keys=True, separators=(",", ":"),
//! default=str)`) for `py-json-v1` and RFC 8785 (`canonicalize_jcs`) for `jcs-v2`.

use crate::crypto::sha256_hex;
use bernstein_protocol::pyjson::{Dialect, JcsError, Object, Value};

/// Row keys that never enter the payload hash: the wall-clock envelope and the chain fields.
pub const EXCLUDED_FIELDS: [&str; 6] = [
    "ts",
    "elapsed_s",
    "index",
    "prev_hash",
    "payload_hash",
    "event_hash",
];

/// The genesis `prev_hash` of every journal.
pub const GENESIS_HASH: &str = "";

/// How a journal canonicalises its hash pre-images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashProfile {
    /// `py-json-v1` (the default): Python `json.dumps`, sorted, compact, ASCII-escaped.
    PyJsonV1,
    /// `jcs-v2`: RFC 8785. Every row carries `"hash_profile": "jcs-v2"`, which is hashed.
    JcsV2,
}

impl HashProfile {
    /// The profile name as stored in rows (`py-json-v1`, `jcs-v2`).
    pub fn as_str(self) -> &'static str {
        match self {
            HashProfile::PyJsonV1 => "py-json-v1",
            HashProfile::JcsV2 => "jcs-v2",
        }
    }

    /// The profile with this name, if it is one of the two the reference knows.
    pub fn from_name(name: &str) -> Option<HashProfile> {
        match name {
            "py-json-v1" => Some(HashProfile::PyJsonV1),
            "jcs-v2" => Some(HashProfile::JcsV2),
            _ => None,
        }
    }

    /// Canonical bytes of `value` under this profile.
    fn canonical(self, value: &Value) -> Result<String, JcsError> {
        match self {
            HashProfile::PyJsonV1 => Ok(value.dumps(Dialect::PY_COMPACT_ASCII)),
            HashProfile::JcsV2 => value.to_jcs(),
        }
    }
}

/// Whether `key` is one of [`EXCLUDED_FIELDS`].
pub fn is_excluded_field(key: &str) -> bool {
    EXCLUDED_FIELDS.contains(&key)
}

/// The payload-hash pre-image of a row: every key that is not excluded, in row order, with
/// `event` set to `event_type` (the reference overwrites it in place; order is irrelevant once
/// sorted).
pub fn payload_preimage_object(event_type: &str, row_or_payload: &Object) -> Object {
    let mut projected: Object = row_or_payload
        .iter()
        .filter(|(key, _)| !is_excluded_field(key))
        .map(|(key, value)| (key.to_owned(), value.clone()))
        .collect();
    projected.insert("event", event_type);
    projected
}

/// `payload_hash` of a row or payload under `profile`.
///
/// # Errors
///
/// Under `jcs-v2`, a payload holding NaN or an infinity has no canonical form.
pub fn payload_hash(
    profile: HashProfile,
    event_type: &str,
    row_or_payload: &Object,
) -> Result<String, JcsError> {
    let preimage = Value::Object(payload_preimage_object(event_type, row_or_payload));
    Ok(sha256_hex(profile.canonical(&preimage)?.as_bytes()))
}

/// `event_hash = H(prev_hash, event_type, payload_hash, index)` under `profile`.
pub fn event_hash(
    profile: HashProfile,
    prev_hash: &str,
    event_type: &str,
    payload_hash: &str,
    index: u64,
) -> String {
    let preimage = Value::Object(
        Object::new()
            .with("prev_hash", prev_hash)
            .with("event_type", event_type)
            .with("payload_hash", payload_hash)
            .with("index", index),
    );
    // The pre-image holds only strings and an integer, which always have a JCS form.
    let canonical = profile
        .canonical(&preimage)
        .unwrap_or_else(|_| preimage.dumps(Dialect::PY_COMPACT_ASCII));
    sha256_hex(canonical.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_hashes_match_the_completed_run_row_zero() {
        // FORMATS vector journal/completed_run, journal_rows_hashing[0].
        let payload = Object::new()
            .with("task_id", "t-42")
            .with("goal", "Add auth")
            .with("role", "backend");
        let p_hash = payload_hash(HashProfile::PyJsonV1, "run_started", &payload).unwrap();
        assert_eq!(
            p_hash,
            "b6d30a619c7a59691a16f9bf8735d5e1a236ad9b61f760428d05735e553ae0b4"
        );
        assert_eq!(
            event_hash(HashProfile::PyJsonV1, "", "run_started", &p_hash, 0),
            "246d6723ab99f41710956378289b0f43cbd56c1205092ce37fde1505eb5dca01"
        );
    }

    #[test]
    fn excluded_fields_do_not_change_the_payload_hash() {
        let base = Object::new().with("k", 1);
        let with_envelope = base
            .clone()
            .with("ts", 1.5)
            .with("index", 7)
            .with("event_hash", "x");
        assert_eq!(
            payload_hash(HashProfile::PyJsonV1, "e", &base).unwrap(),
            payload_hash(HashProfile::PyJsonV1, "e", &with_envelope).unwrap()
        );
    }

    #[test]
    fn jcs_refuses_non_finite_payloads() {
        let payload = Object::new().with("x", f64::NAN);
        assert!(payload_hash(HashProfile::JcsV2, "e", &payload).is_err());
        assert!(payload_hash(HashProfile::PyJsonV1, "e", &payload).is_ok());
    }

    #[test]
    fn profile_names_round_trip() {
        for profile in [HashProfile::PyJsonV1, HashProfile::JcsV2] {
            assert_eq!(HashProfile::from_name(profile.as_str()), Some(profile));
        }
        assert_eq!(HashProfile::from_name("jcs-v3"), None);
    }
}
