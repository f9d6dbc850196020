//! The claim receipt (the reference's `ClaimReceipt`): its content-addressed hashes, its
//! Ed25519 signature, and its wire form.

use bernstein_protocol::SPEC_REVISION;
use bernstein_protocol::encoding::base64_std;
use bernstein_protocol::pyjson::{Dialect, Object, Value};

use super::backlog::BacklogEntry;
use crate::audit::python_str;
use crate::crypto::sha256_hex;
use crate::handle::render_indent2;
use crate::identity::SigningIdentity;
use crate::{Error, Result};

/// The `taskId` of a refusal receipt.
pub const REFUSED_TASK_ID: &str = "";

/// The `claimerCardFingerprint` of a claimer that presented no agent card.
pub const UNREGISTERED_FINGERPRINT: &str = "unregistered";

/// The `backlogSource` of a receipt issued from the task store rather than the JSON backlog.
pub const BACKLOG_SOURCE_TASK_STORE: &str = "task_store";

/// The field `backlogHead` strips from every row: a wall-clock stamp, excluded so the head
/// reprojects from the post-claim backlog whenever the claim happened.
pub const WALL_CLOCK_FIELD: &str = "claimed_at";

/// The `chainHead` a refusal is signed over: the chain's state head, the `hmac` of the newest
/// entry that is not an `mcp.stateless_call` anchor ([`crate::audit::head_index`]), or genesis
/// when there is none.
///
/// The reference signs a refusal over its cached chain head. Under call anchoring that is the
/// refused call's own anchor, whose timestamp would put the wall clock into the pre-image: two
/// refusals of one backlog snapshot, claimer and filter would never agree. Anchors record
/// calls, not backlog or project state, so leaving them out makes a refusal replay
/// byte-identically however many calls were anchored in between, and in two identical copies
/// of a project. Nothing checks a refusal's `chainHead` against an entry (the reference's
/// verifier only requires the chain to verify), so offline verification is unchanged.
///
/// A granted receipt keeps the reference's rule (the `prev_chain_digest` of its own
/// `task.claim_receipt` event), because `verify_claim_receipt` looks that event up by it.
pub fn refusal_chain_head(chain: &crate::audit::AuditChain) -> String {
    match crate::audit::head_index::state_head(chain.dir()) {
        Ok(head) if head.is_empty() => crate::audit::GENESIS_HMAC.to_owned(),
        Ok(head) => head,
        // The chain could not be listed or read: fall back to the recovered head, which
        // is what the reference signs, rather than refusing a refusal.
        Err(_) => chain.recovered_head(),
    }
}

/// The PY-COMPACT-ASCII pre-image of `backlogHead` over raw rows: the rows in order, each
/// without `claimed_at`.
///
/// The reference's `backlog_head` takes rows as given; the JSON-backlog route passes
/// `to_dict()` rows (see [`backlog_head`]) and the task-store route its projected snapshot.
pub fn backlog_head_preimage(rows: &[Object]) -> String {
    // The compact array is `[` + the rows joined by `,` + `]`, so each row is written in
    // place; only a row that carries the wall clock is copied, to leave it out.
    let mut out = String::new();
    out.push('[');
    for (n, row) in rows.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        if row.contains_key(WALL_CLOCK_FIELD) {
            let mut row = row.clone();
            row.remove(WALL_CLOCK_FIELD);
            row.dumps_into(&mut out, Dialect::PY_COMPACT_ASCII);
        } else {
            row.dumps_into(&mut out, Dialect::PY_COMPACT_ASCII);
        }
    }
    out.push(']');
    out
}

/// `backlogHead` over raw rows: `"sha256:" + sha256_hex(`[`backlog_head_preimage`]`)`.
pub fn backlog_head_of_rows(rows: &[Object]) -> String {
    format!(
        "sha256:{}",
        sha256_hex(backlog_head_preimage(rows).as_bytes())
    )
}

/// `backlogHead` of a backlog: the head over the normalised rows (`to_dict()`), so the file's
/// formatting, key order and unknown keys do not matter.
pub fn backlog_head(entries: &[BacklogEntry]) -> String {
    backlog_head_of_rows(&normalised_rows(entries))
}

/// The rows `backlogHead` hashes for a backlog: `[e.to_dict() for e in entries]`.
pub fn normalised_rows(entries: &[BacklogEntry]) -> Vec<Object> {
    entries.iter().map(BacklogEntry::to_dict).collect()
}

/// A claim receipt: the signed, content-addressed projection of one claim decision.
///
/// `receiptHash`, `pollToken` and `granted` are derived and never stored: they are recomputed
/// from the canonical fields, so a presented receipt cannot smuggle in a mismatched hash.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimReceipt {
    /// The claimed task, or [`REFUSED_TASK_ID`] for a refusal.
    pub task_id: String,
    /// `sha256:` fingerprint of the claimer's agent card, or [`UNREGISTERED_FINGERPRINT`].
    pub claimer_card_fingerprint: String,
    /// Digest of the post-claim backlog snapshot.
    pub backlog_head: String,
    /// Digest of the claim filter.
    pub filter_digest: String,
    /// For a grant, the `prev_chain_digest` of the `task.claim_receipt` event; for a refusal,
    /// the chain head when the refusal was issued.
    pub chain_head: String,
    /// The pinned spec revision.
    pub spec_revision: String,
    /// Raw Ed25519 signature (base64url, no padding) over [`ClaimReceipt::signed_bytes`];
    /// empty when unsigned.
    pub signature: String,
    /// SPKI PEM of the signer, embedded verbatim; not part of any hash.
    pub signer_public_key_pem: String,
    /// For a task-store receipt (`backlogSource: "task_store"`), the rows `backlogHead` was
    /// computed over, as embedded in the wire (`backlogSnapshot`). `None` for a JSON-backlog
    /// receipt.
    pub backlog_snapshot: Option<Vec<Object>>,
}

impl ClaimReceipt {
    /// An unsigned receipt over the given canonical fields, at [`SPEC_REVISION`].
    pub fn new(
        task_id: impl Into<String>,
        claimer_card_fingerprint: impl Into<String>,
        backlog_head: impl Into<String>,
        filter_digest: impl Into<String>,
        chain_head: impl Into<String>,
    ) -> ClaimReceipt {
        ClaimReceipt {
            task_id: task_id.into(),
            claimer_card_fingerprint: claimer_card_fingerprint.into(),
            backlog_head: backlog_head.into(),
            filter_digest: filter_digest.into(),
            chain_head: chain_head.into(),
            spec_revision: SPEC_REVISION.to_owned(),
            signature: String::new(),
            signer_public_key_pem: String::new(),
            backlog_snapshot: None,
        }
    }

    /// Whether the claim was granted: a non-empty task id.
    pub fn granted(&self) -> bool {
        self.task_id != REFUSED_TASK_ID
    }

    /// The PY-COMPACT-ASCII pre-image of the receipt hash: `{backlog_head, chain_head,
    /// claimer_card_fingerprint, filter_digest, spec_revision, task_id}`.
    pub fn receipt_hash_preimage(&self) -> String {
        Value::Object(
            Object::new()
                .with("task_id", self.task_id.as_str())
                .with(
                    "claimer_card_fingerprint",
                    self.claimer_card_fingerprint.as_str(),
                )
                .with("backlog_head", self.backlog_head.as_str())
                .with("filter_digest", self.filter_digest.as_str())
                .with("chain_head", self.chain_head.as_str())
                .with("spec_revision", self.spec_revision.as_str()),
        )
        .dumps(Dialect::PY_COMPACT_ASCII)
    }

    /// `receiptHash`: `sha256_hex` of the pre-image (no prefix). Wall clock is not an input, so
    /// the same snapshot, claimer and filter always hash the same.
    pub fn receipt_hash(&self) -> String {
        sha256_hex(self.receipt_hash_preimage().as_bytes())
    }

    /// The bytes the signature covers: PY-COMPACT-ASCII `{"receipt_hash": …}`.
    pub fn signed_bytes(&self) -> String {
        Value::Object(Object::new().with("receipt_hash", self.receipt_hash()))
            .dumps(Dialect::PY_COMPACT_ASCII)
    }

    /// `pollToken`: standard base64 (padded) of PY-COMPACT-ASCII `{backlog_head, chain_head,
    /// filter_digest, spec_revision, task_id}`.
    pub fn poll_token(&self) -> String {
        let state = Value::Object(
            Object::new()
                .with("task_id", self.task_id.as_str())
                .with("backlog_head", self.backlog_head.as_str())
                .with("filter_digest", self.filter_digest.as_str())
                .with("chain_head", self.chain_head.as_str())
                .with("spec_revision", self.spec_revision.as_str()),
        );
        base64_std(state.dumps(Dialect::PY_COMPACT_ASCII).as_bytes())
    }

    /// A copy signed by `identity`: its public PEM is embedded and the raw signature covers
    /// [`ClaimReceipt::signed_bytes`], which binds every canonical field.
    pub fn signed(mut self, identity: &SigningIdentity) -> ClaimReceipt {
        identity
            .public_key_pem()
            .clone_into(&mut self.signer_public_key_pem);
        self.signature = identity.sign_raw(self.signed_bytes().as_bytes());
        self
    }

    /// The wire object, keys in the reference's order: `taskId, granted,
    /// claimerCardFingerprint, backlogHead, filterDigest, chainHead, specRevision, receiptHash,
    /// signature, signerPublicKeyPem, pollToken`, then `backlogSource, backlogSnapshot` for a
    /// task-store receipt.
    pub fn to_wire(&self) -> Object {
        self.clone().into_wire()
    }

    /// [`ClaimReceipt::to_wire`], moving the snapshot's rows into the wire object instead of
    /// copying them (a task-store receipt carries every open row of the backlog).
    pub fn into_wire(self) -> Object {
        let mut wire = Object::new()
            .with("taskId", self.task_id.as_str())
            .with("granted", self.granted())
            .with(
                "claimerCardFingerprint",
                self.claimer_card_fingerprint.as_str(),
            )
            .with("backlogHead", self.backlog_head.as_str())
            .with("filterDigest", self.filter_digest.as_str())
            .with("chainHead", self.chain_head.as_str())
            .with("specRevision", self.spec_revision.as_str())
            .with("receiptHash", self.receipt_hash())
            .with("signature", self.signature.as_str())
            .with("signerPublicKeyPem", self.signer_public_key_pem.as_str())
            .with("pollToken", self.poll_token());
        if let Some(snapshot) = self.backlog_snapshot {
            wire.insert("backlogSource", BACKLOG_SOURCE_TASK_STORE);
            wire.insert(
                "backlogSnapshot",
                Value::Array(snapshot.into_iter().map(Value::Object).collect()),
            );
        }
        wire
    }

    /// `json.dumps(wire, indent=2)`: the body the reference's claim tool returns.
    pub fn to_wire_text(&self) -> String {
        render_indent2(&Value::Object(self.to_wire()))
    }

    /// Rebuilds a receipt from its wire object (the reference's `ClaimReceipt.from_wire`).
    ///
    /// `taskId`, `claimerCardFingerprint`, `backlogHead`, `filterDigest` and `chainHead` are
    /// required and `str()`-ed; `specRevision` defaults to the pinned revision, `signature` and
    /// `signerPublicKeyPem` to `""`. The derived fields are ignored (see
    /// [`ClaimReceipt::derived_field_mismatches`]). When `backlogSource` is `"task_store"`,
    /// `backlogSnapshot` (default `[]`) must be an array of objects.
    ///
    /// # Errors
    ///
    /// [`Error::Malformed`] for a missing required field or a malformed snapshot.
    pub fn from_wire(wire: &Object) -> Result<ClaimReceipt> {
        let required = |key: &str| {
            wire.get(key)
                .map(python_str)
                .ok_or_else(|| Error::Malformed {
                    what: "claim receipt",
                    reason: format!("missing required field {key:?}"),
                })
        };
        let optional =
            |key: &str, default: &str| wire.get(key).map_or_else(|| default.to_owned(), python_str);
        let backlog_snapshot = if wire.get("backlogSource").and_then(Value::as_str)
            == Some(BACKLOG_SOURCE_TASK_STORE)
        {
            Some(snapshot_rows(wire.get("backlogSnapshot"))?)
        } else {
            None
        };
        Ok(ClaimReceipt {
            task_id: required("taskId")?,
            claimer_card_fingerprint: required("claimerCardFingerprint")?,
            backlog_head: required("backlogHead")?,
            filter_digest: required("filterDigest")?,
            chain_head: required("chainHead")?,
            spec_revision: optional("specRevision", SPEC_REVISION),
            signature: optional("signature", ""),
            signer_public_key_pem: optional("signerPublicKeyPem", ""),
            backlog_snapshot,
        })
    }

    /// The derived fields a presented wire object states differently from what this receipt
    /// recomputes (`receiptHash`, `pollToken`, `granted`), one message each. The reference
    /// ignores these fields when verifying; a mismatch means the wire was edited by hand.
    pub fn derived_field_mismatches(&self, wire: &Object) -> Vec<String> {
        let mut out = Vec::new();
        let mut compare = |key: &str, recomputed: Value| {
            if let Some(stated) = wire.get(key)
                && *stated != recomputed
            {
                out.push(format!(
                    "stated {key} {} differs from the recomputed {}",
                    stated.dumps(Dialect::PY_COMPACT_ASCII),
                    recomputed.dumps(Dialect::PY_COMPACT_ASCII)
                ));
            }
        };
        compare("receiptHash", Value::Str(self.receipt_hash()));
        compare("pollToken", Value::Str(self.poll_token()));
        compare("granted", Value::Bool(self.granted()));
        out
    }
}

fn snapshot_rows(value: Option<&Value>) -> Result<Vec<Object>> {
    let malformed = |reason: String| Error::Malformed {
        what: "claim receipt",
        reason,
    };
    match value {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(at, item)| match item {
                Value::Object(row) => Ok(row.clone()),
                _ => Err(malformed(format!(
                    "backlogSnapshot row {at} is not an object"
                ))),
            })
            .collect(),
        Some(_) => Err(malformed("backlogSnapshot is not an array".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The granted receipt of `fixtures/vectors/claim/receipt_granted.json`, unsigned.
    fn vector_granted() -> ClaimReceipt {
        ClaimReceipt::new(
            "t-42",
            "sha256:e7665f61e62c5146b1d855b99b1ba9cc2c74d10b7e8a128145539b62a9a3423a",
            "sha256:3e8f9e79236ea07463faf2ca4b50e36da5b6e23e7f09004283075e4448e9bdda",
            "sha256:f07424092b48f6b015982de1b221f5177750a6aeb12d14bdc73f2806d77671e8",
            "88cb1ec173f1306dd60eca726bda7d798777c6d0f8488914dc899443ef4cb6c7",
        )
    }

    #[test]
    fn derived_fields_match_the_vector() {
        let receipt = vector_granted();
        assert_eq!(
            receipt.receipt_hash_preimage(),
            r#"{"backlog_head":"sha256:3e8f9e79236ea07463faf2ca4b50e36da5b6e23e7f09004283075e4448e9bdda","chain_head":"88cb1ec173f1306dd60eca726bda7d798777c6d0f8488914dc899443ef4cb6c7","claimer_card_fingerprint":"sha256:e7665f61e62c5146b1d855b99b1ba9cc2c74d10b7e8a128145539b62a9a3423a","filter_digest":"sha256:f07424092b48f6b015982de1b221f5177750a6aeb12d14bdc73f2806d77671e8","spec_revision":"2026-07-28","task_id":"t-42"}"#
        );
        assert_eq!(
            receipt.receipt_hash(),
            "3b785ff1efd1fe07e1199bac1517b69b03f7128c7a2916c8274e0686e36e4a3c"
        );
        assert_eq!(
            receipt.signed_bytes(),
            r#"{"receipt_hash":"3b785ff1efd1fe07e1199bac1517b69b03f7128c7a2916c8274e0686e36e4a3c"}"#
        );
        assert_eq!(
            receipt.poll_token(),
            "eyJiYWNrbG9nX2hlYWQiOiJzaGEyNTY6M2U4ZjllNzkyMzZlYTA3NDYzZmFmMmNhNGI1MGUzNmRhNWI2ZTIzZTdmMDkwMDQyODMwNzVlNDQ0OGU5YmRkYSIsImNoYWluX2hlYWQiOiI4OGNiMWVjMTczZjEzMDZkZDYwZWNhNzI2YmRhN2Q3OTg3NzdjNmQwZjg0ODg5MTRkYzg5OTQ0M2VmNGNiNmM3IiwiZmlsdGVyX2RpZ2VzdCI6InNoYTI1NjpmMDc0MjQwOTJiNDhmNmIwMTU5ODJkZTFiMjIxZjUxNzc3NTBhNmFlYjEyZDE0YmRjNzNmMjgwNmQ3NzY3MWU4Iiwic3BlY19yZXZpc2lvbiI6IjIwMjYtMDctMjgiLCJ0YXNrX2lkIjoidC00MiJ9"
        );
        assert!(receipt.granted());
        assert!(!ClaimReceipt::new("", "f", "b", "d", "c").granted());
    }

    #[test]
    fn signing_reproduces_the_vector_signature() {
        let identity = SigningIdentity::from_seed(&[0x11; 32]).unwrap();
        let signed = vector_granted().signed(&identity);
        assert_eq!(
            signed.signature,
            "09nALO2rH8KczsuG6LTL1WUuWcQiZvGZaEMFBYc7CZUeXiqZo1r0fpCRfpCdu7WeFaM4QQllPYExXkyfbL17CQ"
        );
        assert_eq!(
            signed.signer_public_key_pem,
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA0EqyMnQrtKs6E2i9RhXk5tAiSrcaAWuvhSCjMsl3hzc=\n-----END PUBLIC KEY-----\n"
        );
    }

    #[test]
    fn wire_round_trips_in_key_order() {
        let mut receipt = vector_granted();
        receipt.backlog_snapshot = Some(vec![Object::new().with("id", "a")]);
        let wire = receipt.to_wire();
        let keys: Vec<&str> = wire.keys().collect();
        assert_eq!(
            keys,
            [
                "taskId",
                "granted",
                "claimerCardFingerprint",
                "backlogHead",
                "filterDigest",
                "chainHead",
                "specRevision",
                "receiptHash",
                "signature",
                "signerPublicKeyPem",
                "pollToken",
                "backlogSource",
                "backlogSnapshot"
            ]
        );
        assert_eq!(ClaimReceipt::from_wire(&wire).unwrap(), receipt);
        assert!(receipt.derived_field_mismatches(&wire).is_empty());
        let mut edited = wire.clone();
        edited.insert("receiptHash", "0");
        edited.insert("granted", false);
        assert_eq!(receipt.derived_field_mismatches(&edited).len(), 2);
    }

    /// The claim tool's body is `json.dumps(wire, indent=2)`: the wire's keys in wire order,
    /// two spaces of indent, `","` at line ends, no trailing newline.
    #[test]
    fn wire_text_is_the_wire_written_with_an_indent_of_two() {
        let receipt = vector_granted();
        let text = receipt.to_wire_text();
        assert!(
            text.starts_with("{\n  \"taskId\": \"t-42\",\n  \"granted\": true,\n  \"claimerCardFingerprint\": \"sha256:e766"),
            "{text}"
        );
        assert!(text.ends_with("\"\n}"), "{text}");
        let parsed = Value::parse(&text).unwrap();
        assert_eq!(parsed, Value::Object(receipt.to_wire()));
    }

    /// A refusal on a project whose chain holds no entry is signed over the genesis head, as
    /// the reference's cached head reads before any append, never over an empty string.
    #[test]
    fn a_refusal_before_any_entry_names_the_genesis_head() {
        let dir = tempfile::tempdir().unwrap();
        let chain = crate::audit::AuditChain::open(
            dir.path().join(".sdd/audit"),
            crate::key::AuditKey::from_master_bytes(vec![7; 32]),
        );
        assert_eq!(refusal_chain_head(&chain), crate::audit::GENESIS_HMAC);
    }

    #[test]
    fn from_wire_coerces_and_refuses() {
        let wire = Object::new()
            .with("taskId", 42)
            .with("claimerCardFingerprint", "f")
            .with("backlogHead", "b")
            .with("filterDigest", "d")
            .with("chainHead", Value::Null)
            .with("signature", Value::Null);
        let receipt = ClaimReceipt::from_wire(&wire).unwrap();
        assert_eq!(receipt.task_id, "42");
        assert_eq!(receipt.chain_head, "None");
        assert_eq!(receipt.signature, "None");
        assert_eq!(receipt.spec_revision, SPEC_REVISION);
        assert_eq!(receipt.signer_public_key_pem, "");

        let mut missing = wire.clone();
        missing.remove("backlogHead");
        assert_eq!(
            ClaimReceipt::from_wire(&missing).unwrap_err().to_string(),
            "malformed claim receipt: missing required field \"backlogHead\""
        );
        let mut bad_snapshot = wire.clone();
        bad_snapshot.insert("backlogSource", BACKLOG_SOURCE_TASK_STORE);
        assert_eq!(
            ClaimReceipt::from_wire(&bad_snapshot)
                .unwrap()
                .backlog_snapshot,
            Some(Vec::new())
        );
        bad_snapshot.insert("backlogSnapshot", Value::Array(vec![Value::from(1)]));
        assert!(ClaimReceipt::from_wire(&bad_snapshot).is_err());
        bad_snapshot.insert("backlogSnapshot", "rows");
        assert!(ClaimReceipt::from_wire(&bad_snapshot).is_err());
    }

    #[test]
    fn backlog_head_strips_only_the_wall_clock() {
        let a = Object::new().with("id", "a").with("claimed_at", 1.5);
        let b = Object::new().with("id", "a").with("claimed_at", 2.5);
        assert_eq!(
            backlog_head_of_rows(std::slice::from_ref(&a)),
            backlog_head_of_rows(&[b])
        );
        assert_eq!(backlog_head_preimage(&[a]), r#"[{"id":"a"}]"#);
        assert_eq!(
            backlog_head_of_rows(&[]),
            format!("sha256:{}", sha256_hex(b"[]"))
        );
    }
}
