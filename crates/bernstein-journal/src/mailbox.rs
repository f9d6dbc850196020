//! The worker mailbox: an append-only, HMAC-chained, Ed25519-signed JSONL journal of typed
//! messages addressed to tasks (Bernstein 3.23 `core/communication/task_mailbox.py`,
//! `FORMATS.md` §5).
//!
//! One journal per server, `.sdd/runtime/mailbox.jsonl`; its append order is the delivery order.
//! Each row is PY-COMPACT-UTF8 JSON plus `\n`:
//!
//! ```text
//! binding    = {schema_version, seq, task_id, sender, sender_card_fingerprint, kind, body,
//!               body_hash, redaction_count, timestamp, prev_entry_hash}
//! entry_hash = "hmac-sha256:" + hex(HMAC-SHA256(master key bytes, PY-COMPACT-UTF8(binding)))
//! signature  = b64url_nopad(Ed25519(PY-COMPACT-UTF8(binding ∪ {entry_hash})))
//! row        = binding ∪ {entry_hash, signer_public_key_pem, signature}
//! ```
//!
//! The HMAC key is the raw master audit key (the 64 ASCII characters), not an HKDF-derived key.
//! The signing identity is `.sdd/identity/mailbox_signing.{pem,pub}` ([`MAILBOX_IDENTITY_NAME`]).
//!
//! [`Mailbox::post`] is the journal half of `bernstein_post_message`: it validates first (task
//! id, kind allow-list, the 4096-byte cap measured before redaction, the rendezvous protocol
//! rules, the 128-unconsumed-messages cap), redacts ([`crate::dlp`]), then appends under an
//! exclusive `flock` on the journal file and fsyncs before returning. A refused post writes
//! nothing. Mirroring the entry into the audit chain (`task.mailbox_message`) is the caller's
//! next step; [`Mailbox::verify_against_chain`] checks that mirror from plain data.
//!
//! Differences from the reference, each deliberate:
//! * rows are split on `\n` only. The reference reloads with `str.splitlines()`, so a body
//!   holding a raw U+0085, U+2028 or U+2029 (which PY-COMPACT-UTF8 writes unescaped) splits its
//!   row, and after a restart the mailbox no longer loads;
//! * the journal is caught up under the file lock on every post instead of trusting a copy
//!   loaded at start-up, so several processes can share it; the reference has no file lock (its
//!   lock is a thread lock), so there is no lock-file name to match and none is created. The
//!   catch-up reads only the bytes appended since this process last looked, after checking that
//!   the file is the same one (device and inode), is no shorter, and still holds the last line
//!   it read at the same offset; otherwise it reads the whole file again
//!   ([`Mailbox::catch_up_stats`] counts both);
//! * a journal whose last row lacks its `\n` (a torn write) gets one before the next row, so
//!   the torn row stays a separate malformed line instead of swallowing the new row;
//! * rows that are not valid UTF-8 are reported as malformed lines; the reference fails to load
//!   the whole file;
//! * task ids must match `^[A-Za-z0-9_.:-]{1,256}$` (the MCP id pattern) and must not be `.` or
//!   `..`; the reference's journal takes any string;
//! * "unconsumed" is the reference's in-memory notion: messages for the task whose `seq` is
//!   above the consumption cursor recorded with [`Mailbox::record_consumption`] in this process.
//!   The cursor is not persisted (nor is it in the reference), so after a restart every message
//!   counts again;
//! * a `rendezvous_closed` post whose open entry has an unreadable body is refused
//!   ([`Error::MailboxUnauthorized`]); in the reference that `ValueError` escapes as a server
//!   error;
//! * row fields are coerced as the reference's `from_dict` coerces them (`int()`, `str()`,
//!   `float()`), except that integers outside `i64`, numeric strings with `_` separators or
//!   non-ASCII digits, and non-finite values where Python would raise `OverflowError` make the
//!   row malformed.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};

use bernstein_protocol::pyjson::{Dialect, Int, Object, Value};
use regex::Regex;

use crate::audit::AuditChain;
use crate::crypto::{constant_time_eq, hmac_sha256_hex, sha256_hex};
use crate::dlp::RedactionContext;
use crate::durable::{append_durably, create_dir_all_durable, ensure_entry_durable};
use crate::identity::{SigningIdentity, python_value_eq, verify_raw_signature};
use crate::{Error, Result};

/// The journal schema version written into every row.
pub const MAILBOX_SCHEMA_VERSION: i64 = 1;

/// The `prev_entry_hash` of the first entry.
pub const MAILBOX_GENESIS: &str = "genesis";

/// The body cap in UTF-8 bytes, measured on the raw (pre-redaction) body.
pub const MAX_MESSAGE_BODY_BYTES: usize = 4096;

/// The cap on unconsumed messages addressed to one task.
pub const MAX_PENDING_PER_TASK: usize = 128;

/// The name of the mailbox signing identity under `.sdd/identity/`.
pub const MAILBOX_IDENTITY_NAME: &str = "mailbox_signing";

/// The sender fingerprint recorded when the sender has no agent card.
pub const UNREGISTERED_FINGERPRINT: &str = "unregistered";

/// The kind that opens a rendezvous wait.
pub const RENDEZVOUS_OPEN_KIND: &str = "rendezvous_open";

/// The kind that closes a rendezvous wait.
pub const RENDEZVOUS_CLOSED_KIND: &str = "rendezvous_closed";

/// The typed message vocabulary, in the reference's order.
pub const MESSAGE_KINDS: [&str; 10] = [
    "finding",
    "artefact_ref",
    "question",
    RENDEZVOUS_OPEN_KIND,
    RENDEZVOUS_CLOSED_KIND,
    "steer.pause",
    "steer.resume",
    "steer.guidance",
    "steer.redirect",
    "steer.abort",
];

/// Python's `repr(MESSAGE_KINDS)`, as the reference's `UnknownMessageKind` text embeds it.
pub(crate) const MESSAGE_KINDS_REPR: &str = "('finding', 'artefact_ref', 'question', \
    'rendezvous_open', 'rendezvous_closed', 'steer.pause', 'steer.resume', 'steer.guidance', \
    'steer.redirect', 'steer.abort')";

/// The ways a rendezvous wait can end.
const RENDEZVOUS_RESOLUTIONS: [&str; 3] = ["answered", "timeout", "refused"];

/// The journal path under a `.sdd` directory: `.sdd/runtime/mailbox.jsonl`.
pub fn journal_path(sdd_dir: &Path) -> PathBuf {
    sdd_dir.join("runtime").join("mailbox.jsonl")
}

/// One journal entry, with the types the reference's `MailboxMessage` holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Global 0-based append index.
    pub seq: i64,
    /// The recipient task.
    pub task_id: String,
    /// The posting worker's declared identifier.
    pub sender: String,
    /// `sha256:` fingerprint of the sender's agent card, or `"unregistered"`.
    pub sender_card_fingerprint: String,
    /// One of [`MESSAGE_KINDS`].
    pub kind: String,
    /// The stored (redacted) body.
    pub body: String,
    /// `"sha256:" + hex(sha256(body))`.
    pub body_hash: String,
    /// The number of DLP redactions applied on the write path.
    pub redaction_count: i64,
    /// Unix seconds; inside the HMAC and the signature, so its Python `repr` matters.
    pub timestamp: f64,
    /// The previous entry's `entry_hash`, or [`MAILBOX_GENESIS`].
    pub prev_entry_hash: String,
    /// `"hmac-sha256:" + hex(HMAC(master key, PY-COMPACT-UTF8(binding)))`.
    pub entry_hash: String,
    /// The SPKI PEM of the signing key (not signed).
    pub signer_public_key_pem: String,
    /// Base64url Ed25519 signature over the binding plus `entry_hash`.
    pub signature: String,
    /// The journal schema version.
    pub schema_version: i64,
}

impl Entry {
    /// The `task.mailbox_message` audit event that mirrors this entry onto the chain
    /// (`FORMATS.md` §2.6), as the reference's route writes it after the append.
    pub fn audit_mirror_event(&self) -> crate::audit::AuditEvent {
        let details = Object::new()
            .with("task_id", self.task_id.as_str())
            .with("seq", self.seq)
            .with("kind", self.kind.as_str())
            .with("sender", self.sender.as_str())
            .with(
                "sender_card_fingerprint",
                self.sender_card_fingerprint.as_str(),
            )
            .with("body_hash", self.body_hash.as_str())
            .with("entry_hash", self.entry_hash.as_str())
            .with("redaction_count", self.redaction_count);
        crate::audit::AuditEvent::new(
            MIRROR_EVENT_TYPE,
            "task_mailbox",
            "task_mailbox_message",
            self.task_id.as_str(),
            details,
        )
    }

    /// The fields covered by the HMAC chain tag.
    pub fn binding(&self) -> Object {
        Object::new()
            .with("schema_version", self.schema_version)
            .with("seq", self.seq)
            .with("task_id", self.task_id.as_str())
            .with("sender", self.sender.as_str())
            .with(
                "sender_card_fingerprint",
                self.sender_card_fingerprint.as_str(),
            )
            .with("kind", self.kind.as_str())
            .with("body", self.body.as_str())
            .with("body_hash", self.body_hash.as_str())
            .with("redaction_count", self.redaction_count)
            .with("timestamp", self.timestamp)
            .with("prev_entry_hash", self.prev_entry_hash.as_str())
    }

    /// PY-COMPACT-UTF8 of [`Entry::binding`]: the HMAC pre-image.
    pub fn binding_bytes(&self) -> String {
        Value::Object(self.binding()).dumps(Dialect::PY_COMPACT_UTF8)
    }

    /// PY-COMPACT-UTF8 of the binding plus `entry_hash`: the bytes the signature covers.
    pub fn signed_bytes(&self) -> String {
        let signed = self.binding().with("entry_hash", self.entry_hash.as_str());
        Value::Object(signed).dumps(Dialect::PY_COMPACT_UTF8)
    }

    /// The full journal row as an object (the reference's `to_dict`).
    pub fn to_row_object(&self) -> Object {
        self.binding()
            .with("entry_hash", self.entry_hash.as_str())
            .with("signer_public_key_pem", self.signer_public_key_pem.as_str())
            .with("signature", self.signature.as_str())
    }

    /// The journal line: PY-COMPACT-UTF8 of the row plus `\n`.
    pub fn to_row(&self) -> String {
        let mut line = Value::Object(self.to_row_object()).dumps(Dialect::PY_COMPACT_UTF8);
        line.push('\n');
        line
    }

    /// The HTTP/MCP result: the entry without `schema_version`, keys in the reference's
    /// `TaskMessageResponse` order.
    pub fn to_wire(&self) -> Object {
        // The binding is already in the wire order; the wire drops `schema_version` and adds the
        // chain tag and the signature after it.
        let mut wire = self.binding();
        wire.remove("schema_version");
        wire.with("entry_hash", self.entry_hash.as_str())
            .with("signature", self.signature.as_str())
            .with("signer_public_key_pem", self.signer_public_key_pem.as_str())
    }

    /// Reads one decoded journal row the way the reference's `from_dict` does; `None` where
    /// the reference reports `malformed journal row`.
    pub fn from_row(row: &Value) -> Option<Entry> {
        let row = row.as_object()?;
        let required = |key: &str| row.get(key);
        let text_or =
            |key: &str, default: &str| row.get(key).map_or_else(|| default.to_owned(), python_str);
        Some(Entry {
            seq: python_int(required("seq")?)?,
            task_id: python_str(required("task_id")?),
            sender: python_str(required("sender")?),
            sender_card_fingerprint: text_or("sender_card_fingerprint", UNREGISTERED_FINGERPRINT),
            kind: python_str(required("kind")?),
            body: python_str(required("body")?),
            body_hash: python_str(required("body_hash")?),
            redaction_count: match row.get("redaction_count") {
                Some(value) => python_int(value)?,
                None => 0,
            },
            timestamp: python_float(required("timestamp")?)?,
            prev_entry_hash: python_str(required("prev_entry_hash")?),
            entry_hash: text_or("entry_hash", ""),
            signer_public_key_pem: text_or("signer_public_key_pem", ""),
            signature: text_or("signature", ""),
            schema_version: match row.get("schema_version") {
                Some(value) => python_int(value)?,
                None => MAILBOX_SCHEMA_VERSION,
            },
        })
    }

    /// The `entry_hash` this entry's binding yields under `master_key`.
    pub fn expected_entry_hash(&self, master_key: &[u8]) -> String {
        entry_hash(master_key, &self.binding_bytes())
    }

    /// The `body_hash` this entry's body yields.
    pub fn expected_body_hash(&self) -> String {
        body_hash(&self.body)
    }

    /// Whether `signature` verifies over [`Entry::signed_bytes`] under `signer_public_key_pem`.
    pub fn signature_valid(&self) -> bool {
        verify_raw_signature(
            self.signed_bytes().as_bytes(),
            &self.signature,
            &self.signer_public_key_pem,
        )
    }
}

/// `"hmac-sha256:" + hex(HMAC-SHA256(master_key, binding_bytes))`.
pub fn entry_hash(master_key: &[u8], binding_bytes: &str) -> String {
    format!(
        "hmac-sha256:{}",
        hmac_sha256_hex(master_key, &[binding_bytes.as_bytes()])
    )
}

/// `"sha256:" + hex(sha256(utf8(body)))`.
pub fn body_hash(body: &str) -> String {
    format!("sha256:{}", sha256_hex(body.as_bytes()))
}

/// A journal as loaded: the entries that parsed, in file order, and one problem per row that
/// did not (`line N: malformed journal row`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedJournal {
    /// The entries, in append order.
    pub entries: Vec<Entry>,
    /// `line N: malformed journal row` for every row that failed to load (N is 1-based).
    pub problems: Vec<String>,
}

impl LoadedJournal {
    /// The chain head: the last entry's `entry_hash`, or [`MAILBOX_GENESIS`].
    pub fn head(&self) -> &str {
        self.entries
            .last()
            .map_or(MAILBOX_GENESIS, |e| e.entry_hash.as_str())
    }

    /// The first entry whose `entry_hash` is `hash` (the reference's `message_by_hash`).
    pub fn by_hash(&self, hash: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.entry_hash == hash)
    }
}

/// Parses journal bytes. Rows are split on `\n` only, trimmed of Python whitespace, and blank
/// rows are skipped, as in the reference (apart from its `splitlines()`).
pub fn parse_journal(bytes: &[u8]) -> LoadedJournal {
    parse_lines(bytes, 0)
}

/// [`parse_journal`] of bytes whose first line is line `first_line + 1` of the file.
fn parse_lines(bytes: &[u8], first_line: usize) -> LoadedJournal {
    let mut loaded = LoadedJournal::default();
    if bytes.is_empty() {
        return loaded;
    }
    for (index, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line_number = first_line + index + 1;
        let Ok(text) = std::str::from_utf8(raw) else {
            loaded
                .problems
                .push(format!("line {line_number}: malformed journal row"));
            continue;
        };
        let line = text.trim_matches(is_python_space);
        if line.is_empty() {
            continue;
        }
        match Value::parse(line).ok().as_ref().and_then(Entry::from_row) {
            Some(entry) => loaded.entries.push(entry),
            None => loaded
                .problems
                .push(format!("line {line_number}: malformed journal row")),
        }
    }
    loaded
}

/// Reads and parses the journal file; a missing file is an empty journal.
pub fn read_journal(path: &Path) -> Result<LoadedJournal> {
    match fs::read(path) {
        Ok(bytes) => Ok(parse_journal(&bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(LoadedJournal::default()),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

/// The outcome of verifying a mailbox journal: every problem found, in the reference's order.
#[derive(Debug, Clone, PartialEq)]
pub struct MailboxReport {
    /// The number of entries that loaded.
    pub entries: usize,
    /// The chain head (last `entry_hash`, or `"genesis"`).
    pub head: String,
    /// Every problem, in the reference's wording; empty when the journal verifies.
    pub problems: Vec<String>,
}

impl MailboxReport {
    /// Whether the journal verified with no problem.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The reference's `TaskMailbox.verify()`: load problems first, then for every entry its chain
/// position, chain link, HMAC tag, body hash and signature.
pub fn verify_journal(journal: &LoadedJournal, master_key: &[u8]) -> MailboxReport {
    let mut problems = journal.problems.clone();
    let mut prev = MAILBOX_GENESIS;
    for (index, entry) in journal.entries.iter().enumerate() {
        let label = format!("entry {index}");
        if i64::try_from(index).ok() != Some(entry.seq) {
            problems.push(format!(
                "{label}: seq {} does not match chain position",
                entry.seq
            ));
        }
        if entry.prev_entry_hash != prev {
            problems.push(format!("{label}: broken chain link"));
        }
        let expected = entry.expected_entry_hash(master_key);
        if !constant_time_eq(expected.as_bytes(), entry.entry_hash.as_bytes()) {
            problems.push(format!("{label}: entry hash mismatch"));
        }
        if entry.expected_body_hash() != entry.body_hash {
            problems.push(format!("{label}: body hash mismatch"));
        }
        if !entry.signature_valid() {
            problems.push(format!("{label}: signature invalid"));
        }
        prev = &entry.entry_hash;
    }
    MailboxReport {
        entries: journal.entries.len(),
        head: journal.head().to_owned(),
        problems,
    }
}

/// One live `task.mailbox_message` audit event, as plain data (the audit-chain reader builds
/// these from the event details).
#[derive(Debug, Clone, PartialEq)]
pub struct MirrorEvent {
    /// The mirrored `entry_hash` (`str()` of the details value).
    pub entry_hash: String,
    /// The details' `body_hash`, if present.
    pub body_hash: Option<Value>,
    /// The details' `seq`, if present.
    pub seq: Option<Value>,
    /// The details' `task_id`, if present.
    pub task_id: Option<Value>,
}

impl MirrorEvent {
    /// A mirror with the three compared fields set.
    pub fn new(entry_hash: &str, body_hash: &str, seq: i64, task_id: &str) -> MirrorEvent {
        MirrorEvent {
            entry_hash: entry_hash.to_owned(),
            body_hash: Some(Value::from(body_hash)),
            seq: Some(Value::from(seq)),
            task_id: Some(Value::from(task_id)),
        }
    }

    /// Reads an event's `details` object; `None` when it carries no (truthy) `entry_hash`, which
    /// the reference skips.
    pub fn from_details(details: &Object) -> Option<MirrorEvent> {
        let entry_hash = details.get("entry_hash").map(python_str)?;
        if entry_hash.is_empty() {
            return None;
        }
        Some(MirrorEvent {
            entry_hash,
            body_hash: details.get("body_hash").cloned(),
            seq: details.get("seq").cloned(),
            task_id: details.get("task_id").cloned(),
        })
    }
}

/// The reference's `verify_against_chain`: [`verify_journal`], then the audit chain's own
/// problems (prefixed `audit chain: `), then for every entry a mirror event with the same
/// `entry_hash` whose `body_hash`, `seq` and `task_id` agree (Python `==`).
///
/// `mirrors` are the live `task.mailbox_message` events in chain order; a later event with the
/// same `entry_hash` replaces an earlier one, as the reference's dict does.
pub fn verify_journal_against_chain(
    journal: &LoadedJournal,
    master_key: &[u8],
    mirrors: &[MirrorEvent],
    chain_problems: &[String],
) -> MailboxReport {
    let mut report = verify_journal(journal, master_key);
    report
        .problems
        .extend(chain_problems.iter().map(|p| format!("audit chain: {p}")));
    let mut by_hash: HashMap<&str, &MirrorEvent> = HashMap::new();
    for mirror in mirrors {
        by_hash.insert(mirror.entry_hash.as_str(), mirror);
    }
    for entry in &journal.entries {
        let Some(mirror) = by_hash.get(entry.entry_hash.as_str()) else {
            report.problems.push(format!(
                "seq {}: no audit-chain mirror for entry",
                entry.seq
            ));
            continue;
        };
        let expectations = [
            (
                "body_hash",
                &mirror.body_hash,
                Value::from(entry.body_hash.as_str()),
            ),
            ("seq", &mirror.seq, Value::from(entry.seq)),
            (
                "task_id",
                &mirror.task_id,
                Value::from(entry.task_id.as_str()),
            ),
        ];
        for (key, actual, expected) in expectations {
            if !actual
                .as_ref()
                .is_some_and(|v| python_value_eq(v, &expected))
            {
                report.problems.push(format!(
                    "seq {}: audit-chain mirror disagrees on {key}",
                    entry.seq
                ));
            }
        }
    }
    report
}

/// Who is posting, which decides the cross-task and rendezvous rules (the reference's
/// `acting_task_id` / `authorized_task_ids` arguments).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Authority<'a> {
    /// A trusted internal writer (the reference's `authorized_task_ids=None`): no task-scope
    /// check, but rendezvous bodies and their chain references are still validated.
    #[default]
    TrustedInternal,
    /// An authenticated worker acting for `acting_task_id` (defaults to the recipient) with the
    /// task scope of its identity token (empty = unrestricted).
    Worker {
        /// The task the worker acts for, when it differs from the recipient.
        acting_task_id: Option<&'a str>,
        /// The task ids the worker's token is scoped to.
        authorized_task_ids: &'a [String],
    },
}

/// A message to post.
#[derive(Debug, Clone, Copy)]
pub struct NewMessage<'a> {
    /// The recipient task.
    pub task_id: &'a str,
    /// The posting worker's identifier.
    pub sender: &'a str,
    /// The sender's agent-card fingerprint, or `"unregistered"`.
    pub sender_card_fingerprint: &'a str,
    /// One of [`MESSAGE_KINDS`].
    pub kind: &'a str,
    /// The raw body (redacted before it is stored).
    pub body: &'a str,
    /// Unix seconds of the append (the caller reads the clock).
    pub timestamp: f64,
    /// Who is posting.
    pub authority: Authority<'a>,
}

impl<'a> NewMessage<'a> {
    /// A message from a trusted internal writer with an unregistered sender card.
    pub fn new(
        task_id: &'a str,
        sender: &'a str,
        kind: &'a str,
        body: &'a str,
        timestamp: f64,
    ) -> NewMessage<'a> {
        NewMessage {
            task_id,
            sender,
            sender_card_fingerprint: UNREGISTERED_FINGERPRINT,
            kind,
            body,
            timestamp,
            authority: Authority::TrustedInternal,
        }
    }
}

/// Event type of the audit mirror of a mailbox post.
pub const MIRROR_EVENT_TYPE: &str = "task.mailbox_message";

/// The mailbox of one server: the journal file, its HMAC key and its signing identity.
pub struct Mailbox {
    path: PathBuf,
    master_key: Vec<u8>,
    signer: SigningIdentity,
    consumed: Mutex<HashMap<String, i64>>,
    known: Mutex<Option<KnownJournal>>,
    stats: Mutex<MailboxCatchUpStats>,
}

/// How much reading [`Mailbox::post`]'s catch-ups did since the mailbox was opened (for tests
/// and benchmarks that check a post reads only what other processes appended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MailboxCatchUpStats {
    /// Journal bytes read, whole files and appended bytes alike (the check of the known last
    /// line included).
    pub bytes_read: u64,
    /// Catch-ups that read the whole journal.
    pub full_reads: u64,
    /// Full reads forced because the known prefix was replaced, shrank or rewritten.
    pub prefix_changes: u64,
}

/// The complete lines of the journal as this process last read them.
#[derive(Debug, Clone)]
struct KnownJournal {
    /// `(st_dev, st_ino)` of the file read.
    identity: (u64, u64),
    /// End of the last `\n`-terminated line read.
    read_to: u64,
    /// `\n`-terminated lines read (so line numbers of later problems continue).
    lines: usize,
    /// The last line read (offset and bytes, terminator included), checked before trusting the
    /// rest; `None` when nothing was read.
    last_line: Option<(u64, Vec<u8>)>,
    /// What those lines hold.
    journal: LoadedJournal,
}

impl KnownJournal {
    fn empty(identity: (u64, u64)) -> KnownJournal {
        KnownJournal {
            identity,
            read_to: 0,
            lines: 0,
            last_line: None,
            journal: LoadedJournal::default(),
        }
    }

    /// Takes in `bytes`, read from `read_to` on: its complete lines join what is known, and
    /// what follows the last `\n` (a row still being written, or torn) is returned parsed,
    /// numbered as the line after them, without being remembered.
    fn take_in(&mut self, bytes: &[u8]) -> LoadedJournal {
        let complete = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        if complete > 0 {
            let parsed = parse_lines(&bytes[..complete - 1], self.lines);
            self.lines += bytes[..complete].iter().filter(|&&b| b == b'\n').count();
            self.journal.entries.extend(parsed.entries);
            self.journal.problems.extend(parsed.problems);
            let start = bytes[..complete - 1]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |at| at + 1);
            self.last_line = Some((self.read_to + start as u64, bytes[start..complete].to_vec()));
            self.read_to += complete as u64;
        }
        parse_lines(&bytes[complete..], self.lines)
    }
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("path", &self.path)
            .field("signer", &self.signer)
            .finish_non_exhaustive()
    }
}

impl Mailbox {
    /// The mailbox of the project whose `.sdd` directory is `sdd_dir`.
    ///
    /// `master_key` is the raw audit master key (the stripped file bytes, never hex-decoded);
    /// `signer` is normally `SigningIdentity::load_or_create(sdd_dir/identity, "mailbox_signing")`.
    /// Nothing is read or created until the first operation.
    pub fn open(sdd_dir: &Path, master_key: &[u8], signer: SigningIdentity) -> Mailbox {
        Mailbox {
            path: journal_path(sdd_dir),
            master_key: master_key.to_vec(),
            signer,
            consumed: Mutex::new(HashMap::new()),
            known: Mutex::new(None),
            stats: Mutex::new(MailboxCatchUpStats::default()),
        }
    }

    /// How much reading this mailbox's post catch-ups have done.
    pub fn catch_up_stats(&self) -> MailboxCatchUpStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings what this process knows of the journal in step with `file` (held under the
    /// caller's lock): reads only what was appended since the last look when the file is the
    /// same, no shorter, and still holds the last line read at the same offset; the whole file
    /// otherwise. Returns the known lines and the parsed bytes after the last `\n`, if any.
    fn catch_up(&self, file: &File) -> Result<(KnownJournal, LoadedJournal)> {
        let meta = file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?;
        let identity = (meta.dev(), meta.ino());
        let size = meta.len();
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        let cached = self.known.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut known = match cached {
            Some(known) if known.identity == identity && known.read_to <= size => {
                let still_there = match &known.last_line {
                    Some((at, bytes)) => {
                        let mut found = vec![0u8; bytes.len()];
                        stats.bytes_read += bytes.len() as u64;
                        file.read_exact_at(&mut found, *at).is_ok() && found == *bytes
                    }
                    None => known.read_to == 0,
                };
                if still_there {
                    Some(known)
                } else {
                    stats.prefix_changes += 1;
                    None
                }
            }
            Some(_) => {
                stats.prefix_changes += 1;
                None
            }
            None => None,
        }
        .unwrap_or_else(|| {
            stats.full_reads += 1;
            KnownJournal::empty(identity)
        });
        let length = usize::try_from(size - known.read_to).map_err(|_| {
            Error::io(
                "read",
                &self.path,
                std::io::Error::other("the journal does not fit in memory"),
            )
        })?;
        let mut appended = vec![0u8; length];
        file.read_exact_at(&mut appended, known.read_to)
            .map_err(|e| Error::io("read", &self.path, e))?;
        stats.bytes_read += appended.len() as u64;
        let fragment = known.take_in(&appended);
        Ok((known, fragment))
    }

    /// The journal path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The signing identity.
    pub fn signer(&self) -> &SigningIdentity {
        &self.signer
    }

    /// Reads the journal as it is on disk now.
    pub fn load(&self) -> Result<LoadedJournal> {
        read_journal(&self.path)
    }

    /// The chain head: the last `entry_hash`, or `"genesis"`.
    pub fn head(&self) -> Result<String> {
        Ok(self.load()?.head().to_owned())
    }

    /// Messages addressed to `task_id` with `seq > since_seq`, in chain order (`-1` = all).
    pub fn pending(&self, task_id: &str, since_seq: i64) -> Result<Vec<Entry>> {
        Ok(self
            .load()?
            .entries
            .into_iter()
            .filter(|e| e.task_id == task_id && e.seq > since_seq)
            .collect())
    }

    /// Records that `task_id` consumed its messages up to `seq`; they stop counting against
    /// [`MAX_PENDING_PER_TASK`]. The cursor only moves forward and lives in this process.
    pub fn record_consumption(&self, task_id: &str, seq: i64) {
        let mut consumed = self.consumed.lock().unwrap_or_else(|p| p.into_inner());
        let cursor = consumed.entry(task_id.to_owned()).or_insert(-1);
        if seq > *cursor {
            *cursor = seq;
        }
    }

    /// The highest consumed `seq` for `task_id`, or -1.
    pub fn consumed_cursor(&self, task_id: &str) -> i64 {
        let consumed = self.consumed.lock().unwrap_or_else(|p| p.into_inner());
        consumed.get(task_id).copied().unwrap_or(-1)
    }

    /// Verifies the journal on disk ([`verify_journal`]).
    pub fn verify(&self) -> Result<MailboxReport> {
        Ok(verify_journal(&self.load()?, &self.master_key))
    }

    /// Verifies the journal and its audit-chain mirror ([`verify_journal_against_chain`]).
    pub fn verify_against_chain(
        &self,
        mirrors: &[MirrorEvent],
        chain_problems: &[String],
    ) -> Result<MailboxReport> {
        Ok(verify_journal_against_chain(
            &self.load()?,
            &self.master_key,
            mirrors,
            chain_problems,
        ))
    }

    /// Appends one message and returns the signed entry.
    ///
    /// Refusals, in order, all before anything is written: an invalid task id
    /// ([`Error::InvalidTaskId`]), an unknown kind ([`Error::UnknownMessageKind`]), a body over
    /// [`MAX_MESSAGE_BODY_BYTES`] UTF-8 bytes before redaction ([`Error::MessageTooLarge`]), a
    /// protocol step the poster may not take ([`Error::MailboxUnauthorized`]), and a recipient
    /// already holding [`MAX_PENDING_PER_TASK`] unconsumed messages ([`Error::MailboxFull`]).
    /// Then the body is redacted, the entry is chained onto the journal as it is on disk under an
    /// exclusive lock, appended and fsynced.
    pub fn post(
        &self,
        message: &NewMessage<'_>,
        redaction: &RedactionContext<'_>,
    ) -> Result<Entry> {
        self.post_inner(message, redaction, None)
            .map(|(entry, _)| entry)
    }

    /// [`Mailbox::post`], with the entry's `task.mailbox_message` mirror appended to `chain`
    /// while the journal's lock is still held, so mirrors reach the chain in entry order.
    ///
    /// A writer killed between an entry and its mirror left the journal's last entry without
    /// one; since every mirror is written under the lock in entry order, only the last entry
    /// can lack it, and the newest mirror on the chain tells. So before its own entry, the
    /// post appends the missing mirror (derived from the entry, as its writer would have);
    /// a search or append that fails refuses the post before anything is written. The
    /// entry's own mirror stays best effort, as in the reference route: its error is returned
    /// beside the durable entry, and the next post writes the mirror.
    pub fn post_mirrored(
        &self,
        message: &NewMessage<'_>,
        redaction: &RedactionContext<'_>,
        chain: &AuditChain,
    ) -> Result<(Entry, Option<Error>)> {
        self.post_inner(message, redaction, Some(chain))
    }

    /// Appends the mirror of `last` to `chain` unless the chain's newest mirror is its.
    fn settle_mirror(chain: &AuditChain, last: &Entry) -> Result<()> {
        let newest = crate::audit::newest_record_where(chain.dir(), chain.key(), &|record| {
            record.get("event_type").and_then(Value::as_str) == Some(MIRROR_EVENT_TYPE)
        })
        .map_err(|e| Error::io("search the audit chain in", chain.dir(), e))?;
        let mirrored = newest
            .as_ref()
            .and_then(|record| record.get("details"))
            .and_then(Value::as_object)
            .and_then(|details| details.get("entry_hash"))
            .and_then(Value::as_str)
            == Some(last.entry_hash.as_str());
        if !mirrored {
            chain.append(&last.audit_mirror_event())?;
        }
        Ok(())
    }

    fn post_inner(
        &self,
        message: &NewMessage<'_>,
        redaction: &RedactionContext<'_>,
        chain: Option<&AuditChain>,
    ) -> Result<(Entry, Option<Error>)> {
        validate_task_id(message.task_id)?;
        if !MESSAGE_KINDS.contains(&message.kind) {
            return Err(Error::UnknownMessageKind {
                kind: message.kind.to_owned(),
            });
        }
        if message.body.len() > MAX_MESSAGE_BODY_BYTES {
            return Err(Error::MessageTooLarge {
                bytes: message.body.len(),
                limit: MAX_MESSAGE_BODY_BYTES,
            });
        }
        let mut file = match OpenOptions::new().read(true).append(true).open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Check against the empty journal first so that a refusal creates nothing.
                self.check_state(&LoadedJournal::default(), message)?;
                self.create_journal()?
            }
            Err(e) => return Err(Error::io("open", &self.path, e)),
        };
        file.lock().map_err(|e| Error::io("lock", &self.path, e))?;
        let (mut known, fragment) = self.catch_up(&file)?;
        let with_fragment;
        let journal = if fragment.entries.is_empty() && fragment.problems.is_empty() {
            &known.journal
        } else {
            // Rare: a last row without its `\n` (torn, or another process mid-write).
            let mut whole = known.journal.clone();
            whole.entries.extend(fragment.entries.iter().cloned());
            whole.problems.extend(fragment.problems.iter().cloned());
            with_fragment = whole;
            &with_fragment
        };
        let checked = self.check_state(journal, message);
        if let Err(err) = checked {
            *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
            return Err(err);
        }
        // A writer killed between its entry and the entry's audit mirror left the mirror owed;
        // it is written first, still under the mailbox lock.
        if let Some(chain) = chain
            && let Some(last) = journal.entries.last()
            && let Err(err) = Self::settle_mirror(chain, last)
        {
            *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
            return Err(err);
        }

        let (stored_body, redactions) = redaction.redact(message.body);
        let mut entry = Entry {
            seq: to_i64(journal.entries.len()),
            task_id: message.task_id.to_owned(),
            sender: message.sender.to_owned(),
            sender_card_fingerprint: message.sender_card_fingerprint.to_owned(),
            kind: message.kind.to_owned(),
            body_hash: body_hash(&stored_body),
            body: stored_body,
            redaction_count: to_i64(redactions),
            timestamp: message.timestamp,
            prev_entry_hash: journal.head().to_owned(),
            entry_hash: String::new(),
            signer_public_key_pem: self.signer.public_key_pem().to_owned(),
            signature: String::new(),
            schema_version: MAILBOX_SCHEMA_VERSION,
        };
        entry.entry_hash = entry.expected_entry_hash(&self.master_key);
        entry.signature = self.signer.sign_raw(entry.signed_bytes().as_bytes());

        let size = file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len();
        let mut row = String::new();
        if size > known.read_to {
            row.push('\n');
        }
        row.push_str(&entry.to_row());
        // A failed write or fsync takes the row back (we hold the lock), so a retry cannot
        // duplicate the message. What is known stays as read: it still describes the file.
        let appended = append_durably(&mut file, size, row.as_bytes())
            .map_err(|e| Error::io("append to", &self.path, e));
        if let Err(err) = appended {
            *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
            return Err(err);
        }
        // The row is known now too: the bytes from `read_to` are the fragment, its new `\n`
        // and the row, all complete lines.
        let mut written = vec![0u8; usize::try_from(size - known.read_to).unwrap_or(0)];
        if file.read_exact_at(&mut written, known.read_to).is_ok() {
            written.extend_from_slice(row.as_bytes());
            known.take_in(&written);
            *self.known.lock().unwrap_or_else(|p| p.into_inner()) = Some(known);
        }
        // The journal's creator may have died before fsyncing its directory: every process
        // makes the entry durable before its first acknowledgement.
        ensure_entry_durable(&self.path)
            .map_err(|e| Error::io("fsync the directory of", &self.path, e))?;
        let mirror_error = chain.and_then(|chain| chain.append(&entry.audit_mirror_event()).err());
        // Dropping the file releases the lock.
        Ok((entry, mirror_error))
    }

    fn create_journal(&self) -> Result<File> {
        if let Some(dir) = self.path.parent() {
            create_dir_all_durable(dir).map_err(|e| Error::io("create directory", dir, e))?;
        }
        OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| Error::io("create", &self.path, e))
    }

    /// The checks that depend on the journal's contents: the rendezvous rules and the cap.
    fn check_state(&self, journal: &LoadedJournal, message: &NewMessage<'_>) -> Result<()> {
        authorize(journal, message).map_err(|reason| Error::MailboxUnauthorized { reason })?;
        let cursor = self.consumed_cursor(message.task_id);
        let unconsumed = journal
            .entries
            .iter()
            .filter(|e| e.task_id == message.task_id && e.seq > cursor)
            .count();
        if unconsumed >= MAX_PENDING_PER_TASK {
            return Err(Error::MailboxFull {
                task_id: message.task_id.to_owned(),
                limit: MAX_PENDING_PER_TASK,
            });
        }
        Ok(())
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

static TASK_ID: LazyLock<Regex> = LazyLock::new(|| {
    // A fixed pattern, compiled by every test run.
    #[allow(clippy::expect_used)]
    Regex::new(r"\A[A-Za-z0-9_.:-]{1,256}\z").expect("task id pattern is valid")
});

/// Checks a task id against the MCP id pattern and refuses the traversal components.
pub fn validate_task_id(task_id: &str) -> Result<()> {
    let refuse = |reason| {
        Err(Error::InvalidTaskId {
            id: task_id.to_owned(),
            reason,
        })
    };
    if !TASK_ID.is_match(task_id) {
        return refuse("a task id is 1 to 256 characters from [A-Za-z0-9_.:-]");
    }
    if task_id == "." || task_id == ".." {
        return refuse("a task id must not be a path traversal component");
    }
    Ok(())
}

/// A decoded `rendezvous_open` body.
struct RendezvousOpen {
    question_entry_hash: String,
    waiter_task_id: String,
    awaited_task_id: String,
}

/// A decoded `rendezvous_closed` body.
struct RendezvousClose {
    open_entry_hash: String,
    reply_entry_hash: String,
    resolution: String,
}

fn decode_rendezvous(body: &str) -> std::result::Result<Object, String> {
    match Value::parse(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err("rendezvous body is not a JSON object".to_owned()),
        Err(_) => Err("rendezvous body is not JSON".to_owned()),
    }
}

fn field(payload: &Object, key: &str) -> String {
    payload.get(key).map_or_else(String::new, python_str)
}

fn parse_open(body: &str) -> std::result::Result<RendezvousOpen, String> {
    let payload = decode_rendezvous(body)?;
    let open = RendezvousOpen {
        waiter_task_id: field(&payload, "waiter_task_id"),
        awaited_task_id: field(&payload, "awaited_task_id"),
        question_entry_hash: field(&payload, "question_entry_hash"),
    };
    if open.waiter_task_id.is_empty()
        || open.awaited_task_id.is_empty()
        || open.question_entry_hash.is_empty()
    {
        return Err("rendezvous open body is missing a bound field".to_owned());
    }
    Ok(open)
}

fn parse_close(body: &str) -> std::result::Result<RendezvousClose, String> {
    let payload = decode_rendezvous(body)?;
    let close = RendezvousClose {
        open_entry_hash: field(&payload, "open_entry_hash"),
        reply_entry_hash: field(&payload, "reply_entry_hash"),
        resolution: field(&payload, "resolution"),
    };
    if close.open_entry_hash.is_empty() {
        return Err("rendezvous close body binds no open entry".to_owned());
    }
    if !RENDEZVOUS_RESOLUTIONS.contains(&close.resolution.as_str()) {
        return Err(format!(
            "unknown rendezvous resolution {}",
            python_str_repr(&close.resolution)
        ));
    }
    Ok(close)
}

/// The reference's `_authorize_worker_post`; `Err` carries its refusal text.
fn authorize(journal: &LoadedJournal, message: &NewMessage<'_>) -> std::result::Result<(), String> {
    let task_id = message.task_id;
    let kind = message.kind;
    let (trusted, acting) = match message.authority {
        Authority::TrustedInternal => (true, task_id),
        Authority::Worker {
            acting_task_id,
            authorized_task_ids,
        } => {
            // Python's `acting_task_id or task_id`: an empty id falls back to the recipient.
            let acting = acting_task_id.filter(|a| !a.is_empty()).unwrap_or(task_id);
            if !authorized_task_ids.is_empty() && !authorized_task_ids.iter().any(|t| t == acting) {
                return Err("acting task is not in this agent's task scope".to_owned());
            }
            (false, acting)
        }
    };
    let rendezvous = kind == RENDEZVOUS_OPEN_KIND || kind == RENDEZVOUS_CLOSED_KIND;
    if !trusted && task_id == acting && !rendezvous {
        return Ok(());
    }
    if kind == "question" {
        return Ok(());
    }
    if kind == RENDEZVOUS_OPEN_KIND {
        let opened =
            parse_open(message.body).map_err(|e| format!("invalid rendezvous open: {e}"))?;
        let actor = if trusted {
            opened.waiter_task_id.as_str()
        } else {
            acting
        };
        if opened.waiter_task_id != actor || opened.awaited_task_id != task_id {
            return Err("rendezvous open does not bind the acting and addressed tasks".to_owned());
        }
        let question = journal
            .by_hash(&opened.question_entry_hash)
            .filter(|q| q.kind == "question")
            .ok_or_else(|| "rendezvous open references no question entry".to_owned())?;
        if question.task_id != task_id || question.sender != message.sender {
            return Err("rendezvous open references another sender or destination".to_owned());
        }
        return Ok(());
    }
    if kind == RENDEZVOUS_CLOSED_KIND {
        let closed =
            parse_close(message.body).map_err(|e| format!("invalid rendezvous close: {e}"))?;
        let open_entry = journal
            .by_hash(&closed.open_entry_hash)
            .filter(|m| m.kind == RENDEZVOUS_OPEN_KIND)
            .ok_or_else(|| "rendezvous close references no open entry".to_owned())?;
        // The reference lets this `ValueError` escape as a server error; here it is a refusal.
        let opened = parse_open(&open_entry.body)?;
        if task_id != opened.waiter_task_id {
            return Err("rendezvous close is not addressed to the waiter".to_owned());
        }
        let expected_actor = if closed.resolution == "timeout" {
            opened.waiter_task_id.as_str()
        } else {
            opened.awaited_task_id.as_str()
        };
        let actor = if trusted { expected_actor } else { acting };
        if actor != expected_actor {
            return Err("acting task may not close this rendezvous".to_owned());
        }
        let already_closed = journal
            .entries
            .iter()
            .filter(|m| m.kind == RENDEZVOUS_CLOSED_KIND)
            .filter_map(|m| parse_close(&m.body).ok())
            .any(|prior| prior.open_entry_hash == closed.open_entry_hash);
        if already_closed {
            return Err("rendezvous is already closed".to_owned());
        }
        if closed.resolution == "answered" {
            let reply = journal
                .by_hash(&closed.reply_entry_hash)
                .filter(|r| r.kind == "question")
                .ok_or_else(|| "answered rendezvous references no reply entry".to_owned())?;
            if reply.task_id != opened.waiter_task_id || reply.sender != message.sender {
                return Err("reply entry belongs to another sender or destination".to_owned());
            }
            if reply.seq <= open_entry.seq {
                return Err("reply entry does not follow the rendezvous open".to_owned());
            }
        } else if !closed.reply_entry_hash.is_empty() {
            return Err("non-answered rendezvous must not bind a reply".to_owned());
        }
        return Ok(());
    }
    if trusted {
        return Ok(());
    }
    Err(format!(
        "cross-task message kind {} is not permitted",
        python_str_repr(kind)
    ))
}

/// Python's `str.isspace()` for one character (the set `str.strip()` removes).
fn is_python_space(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | '\u{1c}'..='\u{20}'
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Python's `int(value)` for a decoded JSON value; `None` where Python raises.
fn python_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(i) => i.as_i64(),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Float(x) if x.is_finite() => {
            let truncated = x.trunc();
            // `i64::MAX as f64` rounds up to 2^63, which no longer fits: keep strictly below it.
            let limit = 2f64.powi(63);
            (-limit..limit)
                .contains(&truncated)
                .then_some(truncated as i64)
        }
        Value::Str(s) => {
            let trimmed = s.trim_matches(is_python_space);
            let digits = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let normalised = trimmed.strip_prefix('+').unwrap_or(trimmed);
            Int::parse(normalised).and_then(|i| i.as_i64())
        }
        _ => None,
    }
}

/// Python's `float(value)` for a decoded JSON value; `None` where Python raises.
fn python_float(value: &Value) -> Option<f64> {
    match value {
        Value::Float(x) => Some(*x),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        // `float(int)` rounds correctly and raises `OverflowError` beyond the float range.
        Value::Int(i) => i.as_str().parse::<f64>().ok().filter(|x| x.is_finite()),
        Value::Str(s) => {
            let trimmed = s.trim_matches(is_python_space);
            let lower = trimmed.to_ascii_lowercase();
            let unsigned = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
            let special = matches!(unsigned, "nan" | "inf" | "infinity");
            let numeric = !unsigned.is_empty()
                && unsigned
                    .bytes()
                    .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
            if special || numeric {
                trimmed.parse::<f64>().ok()
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Python's `str(value)` for a decoded JSON value.
fn python_str(value: &Value) -> String {
    match value {
        Value::Str(s) => s.clone(),
        other => python_repr(other),
    }
}

use bernstein_protocol::pyrepr::{python_repr, python_str_repr};

#[cfg(test)]
mod tests {
    use super::*;

    /// A mailbox of the project at `sdd` under master key `[3; 32]`, signing with the identity
    /// of `seed`.
    fn mailbox_in(sdd: &Path, seed: u8) -> Mailbox {
        Mailbox::open(
            sdd,
            &[3; 32],
            SigningIdentity::from_seed(&[seed; 32]).unwrap(),
        )
    }

    fn sample_entry() -> Entry {
        Entry {
            seq: 0,
            task_id: "t-42".to_owned(),
            sender: "worker-a".to_owned(),
            sender_card_fingerprint: UNREGISTERED_FINGERPRINT.to_owned(),
            kind: "finding".to_owned(),
            body: "hi".to_owned(),
            body_hash: body_hash("hi"),
            redaction_count: 0,
            timestamp: 1_780_000_601.0,
            prev_entry_hash: MAILBOX_GENESIS.to_owned(),
            entry_hash: "hmac-sha256:00".to_owned(),
            signer_public_key_pem: "pem".to_owned(),
            signature: "sig".to_owned(),
            schema_version: 1,
        }
    }

    #[test]
    fn a_failed_fsync_takes_the_message_back_so_a_retry_does_not_duplicate_it() {
        let dir = tempfile::tempdir().unwrap();
        let sdd = dir.path().join(".sdd");
        let signer = SigningIdentity::from_seed(&[7; 32]).unwrap();
        let mailbox = Mailbox::open(&sdd, &[3; 32], signer);
        let post = |body: &str| {
            mailbox.post(
                &NewMessage::new("t-1", "w", "finding", body, 1_780_000_000.0),
                &RedactionContext::default(),
            )
        };
        post("one").unwrap();
        crate::durable::seams::fail_next_fsyncs(1);
        let err = post("two").unwrap_err();
        assert!(err.to_string().contains("injected fsync failure"), "{err}");
        post("two").unwrap();
        let journal = mailbox.load().unwrap();
        let bodies: Vec<&str> = journal.entries.iter().map(|e| e.body.as_str()).collect();
        assert_eq!(bodies, vec!["one", "two"]);
        assert!(mailbox.verify().unwrap().ok());
    }

    /// A post catches up on another process's posts by reading only their rows (and the
    /// check of its own last row); a journal truncated or rewritten behind its back is read
    /// again in full, and a torn row stays a malformed line numbered where it is.
    #[test]
    fn a_post_reads_only_what_other_processes_appended() {
        let dir = tempfile::tempdir().unwrap();
        let sdd = dir.path().join(".sdd");
        let ours = mailbox_in(&sdd, 7);
        let theirs = mailbox_in(&sdd, 8);
        let post = |mailbox: &Mailbox, task: &str, body: &str| {
            mailbox
                .post(
                    &NewMessage::new(task, "w", "finding", body, 1_780_000_000.0),
                    &RedactionContext::default(),
                )
                .unwrap()
        };
        for n in 0..100 {
            post(&ours, &format!("t-{n}"), "x");
        }
        let own_last = post(&ours, "t-last", "x").to_row().len() as u64;
        let other = post(&theirs, "t-other", "y");
        let before = ours.catch_up_stats();
        let next = post(&ours, "t-next", "z");
        assert_eq!(
            (next.seq, next.prev_entry_hash.as_str()),
            (102, other.entry_hash.as_str())
        );
        let after = ours.catch_up_stats();
        assert_eq!(after.full_reads, before.full_reads);
        assert_eq!(
            after.bytes_read - before.bytes_read,
            own_last + other.to_row().len() as u64,
            "{after:?}"
        );

        // Truncated to two rows behind our back, then regrown by another process.
        let path = ours.path().to_path_buf();
        let text = std::fs::read_to_string(&path).unwrap();
        let two: usize = text.match_indices('\n').nth(1).unwrap().0 + 1;
        std::fs::write(&path, &text[..two]).unwrap();
        let fresh = mailbox_in(&sdd, 8);
        for n in 0..5 {
            post(&fresh, "t-again", &"long ".repeat(20 + n));
        }
        let resumed = post(&ours, "t-resumed", "w");
        assert_eq!(resumed.seq, 7);
        assert_eq!(ours.catch_up_stats().prefix_changes, 1);
        assert!(ours.verify().unwrap().ok());

        // A torn row: the next post starts a fresh line, and the torn row is line 9.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"seq\": 8, \"task");
        std::fs::write(&path, &bytes).unwrap();
        let after_tear = post(&ours, "t-after", "v");
        assert_eq!(after_tear.seq, 8);
        let report = ours.verify().unwrap();
        assert_eq!(
            report.problems,
            vec!["line 9: malformed journal row".to_owned()]
        );
        let again = post(&ours, "t-again", "u");
        assert_eq!(again.prev_entry_hash, after_tear.entry_hash);
    }

    /// What a post trusts of its last look: a last line rewritten in place, or a file replaced
    /// by another with the same bytes, is read again in full; the head is the last entry's.
    #[test]
    fn a_rewritten_last_line_or_a_replaced_file_is_read_again_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let sdd = dir.path().join(".sdd");
        let mailbox = mailbox_in(&sdd, 7);
        assert_eq!(mailbox.head().unwrap(), "genesis");
        let post = |task: &str| {
            mailbox
                .post(
                    &NewMessage::new(task, "w", "finding", "body", 1_780_000_000.0),
                    &RedactionContext::default(),
                )
                .unwrap()
        };
        post("t-1");
        let second = post("t-2");
        assert_eq!(mailbox.head().unwrap(), second.entry_hash);
        let first_look = mailbox.catch_up_stats();
        post("t-3");
        let incremental = mailbox.catch_up_stats();
        assert_eq!(incremental.full_reads, first_look.full_reads);
        assert_eq!(incremental.prefix_changes, 0);

        // The last line rewritten in place, its length kept: the same file, a changed line.
        let path = mailbox.path().to_path_buf();
        let text = std::fs::read_to_string(&path).unwrap();
        let rewritten = text.replacen("\"task_id\":\"t-3\"", "\"task_id\":\"t-9\"", 1);
        assert_ne!(rewritten, text);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .write_all_at(rewritten.as_bytes(), 0)
            .unwrap();
        let fourth = post("t-4");
        let after_rewrite = mailbox.catch_up_stats();
        assert_eq!(after_rewrite.prefix_changes, 1, "{after_rewrite:?}");
        assert_eq!(after_rewrite.full_reads, incremental.full_reads + 1);
        assert_eq!(fourth.seq, 3);

        // The same bytes under a new inode.
        let copy = path.with_extension("copy");
        std::fs::copy(&path, &copy).unwrap();
        std::fs::rename(&copy, &path).unwrap();
        post("t-5");
        let after_replace = mailbox.catch_up_stats();
        assert_eq!(after_replace.prefix_changes, 2, "{after_replace:?}");
        assert_eq!(after_replace.full_reads, after_rewrite.full_reads + 1);

        // Two rows from another process, taken in by a post that is then refused: what was
        // read is kept, last line and all, and the next post trusts it.
        let theirs = mailbox_in(&sdd, 8);
        for task in ["t-6", "t-7"] {
            theirs
                .post(
                    &NewMessage::new(task, "w", "finding", "theirs", 1_780_000_000.0),
                    &RedactionContext::default(),
                )
                .unwrap();
        }
        let scope = vec!["t-a".to_owned()];
        let mut refused = NewMessage::new("t-b", "w", "finding", "x", 1_780_000_000.0);
        refused.authority = Authority::Worker {
            acting_task_id: Some("t-a"),
            authorized_task_ids: &scope,
        };
        assert!(matches!(
            mailbox.post(&refused, &RedactionContext::default()),
            Err(Error::MailboxUnauthorized { .. })
        ));
        let next = post("t-8");
        assert_eq!(next.seq, 7);
        let after_refusal = mailbox.catch_up_stats();
        assert_eq!(
            (after_refusal.prefix_changes, after_refusal.full_reads),
            (after_replace.prefix_changes, after_replace.full_reads),
            "{after_refusal:?}"
        );

        // A whole row still without its `\n` (another process mid-write) is the head too.
        let unterminated = theirs
            .post(
                &NewMessage::new("t-9", "w", "finding", "theirs", 1_780_000_000.0),
                &RedactionContext::default(),
            )
            .unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 1)
            .unwrap();
        let after_it = post("t-10");
        assert_eq!(
            (after_it.seq, after_it.prev_entry_hash.as_str()),
            (unterminated.seq + 1, unterminated.entry_hash.as_str())
        );
    }

    /// An empty journal read once is trusted as empty by the next post, not read as changed.
    #[test]
    fn an_empty_journal_read_once_is_not_a_changed_one() {
        let dir = tempfile::tempdir().unwrap();
        let mailbox = mailbox_in(&dir.path().join(".sdd"), 7);
        std::fs::create_dir_all(mailbox.path().parent().unwrap()).unwrap();
        std::fs::write(mailbox.path(), b"").unwrap();
        let scope = vec!["t-a".to_owned()];
        let mut refused = NewMessage::new("t-b", "w", "finding", "x", 1_780_000_000.0);
        refused.authority = Authority::Worker {
            acting_task_id: Some("t-a"),
            authorized_task_ids: &scope,
        };
        let dlp = RedactionContext::default();
        assert!(mailbox.post(&refused, &dlp).is_err());
        let first = mailbox
            .post(
                &NewMessage::new("t-a", "w", "finding", "x", 1_780_000_000.0),
                &dlp,
            )
            .unwrap();
        assert_eq!(first.seq, 0);
        let stats = mailbox.catch_up_stats();
        assert_eq!(
            (stats.full_reads, stats.prefix_changes),
            (1, 0),
            "{stats:?}"
        );
    }

    /// A missing journal is an empty one; any other failure to read or open it is an error,
    /// never an empty journal that a post would start again from genesis.
    #[test]
    fn only_a_missing_journal_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_journal(&dir.path().join("none.jsonl")).unwrap();
        assert!(missing.entries.is_empty() && missing.problems.is_empty());
        assert!(matches!(
            read_journal(dir.path()),
            Err(Error::Io { op: "read", .. })
        ));
        let sdd = dir.path().join(".sdd");
        let mailbox = mailbox_in(&sdd, 7);
        std::fs::create_dir_all(mailbox.path()).unwrap();
        let refused = mailbox.post(
            &NewMessage::new("t-1", "w", "finding", "x", 1_780_000_000.0),
            &RedactionContext::default(),
        );
        assert!(
            matches!(refused, Err(Error::Io { op: "open", .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn binding_bytes_are_sorted_compact_utf8() {
        let mut entry = sample_entry();
        entry.body = "naïve \u{2028}".to_owned();
        entry.body_hash = "sha256:x".to_owned();
        assert_eq!(
            entry.binding_bytes(),
            "{\"body\":\"naïve \u{2028}\",\"body_hash\":\"sha256:x\",\"kind\":\"finding\",\"prev_entry_hash\":\"genesis\",\"redaction_count\":0,\"schema_version\":1,\"sender\":\"worker-a\",\"sender_card_fingerprint\":\"unregistered\",\"seq\":0,\"task_id\":\"t-42\",\"timestamp\":1780000601.0}"
        );
    }

    #[test]
    fn wire_shape_drops_schema_version_in_reference_order() {
        let wire = Value::Object(sample_entry().to_wire()).dumps(Dialect::PY_ROW);
        insta::assert_snapshot!(wire);
    }

    fn check_row(row: &str, expect: Option<(i64, &str, f64, i64)>) {
        let parsed = Value::parse(row).ok().as_ref().and_then(Entry::from_row);
        let got = parsed
            .as_ref()
            .map(|e| (e.seq, e.task_id.as_str(), e.timestamp, e.redaction_count));
        assert_eq!(got, expect, "{row}");
    }

    #[test]
    fn from_row_coerces_like_python() {
        let base = r#""task_id":"t","sender":"s","kind":"finding","body":"b","body_hash":"h","prev_entry_hash":"genesis""#;
        check_row(
            &format!(r#"{{"seq":0,"timestamp":1.5,{base}}}"#),
            Some((0, "t", 1.5, 0)),
        );
        check_row(
            &format!(r#"{{"seq":"7","timestamp":"2","redaction_count":true,{base}}}"#),
            Some((7, "t", 2.0, 1)),
        );
        check_row(
            &format!(r#"{{"seq":2.9,"timestamp":3,{base}}}"#),
            Some((2, "t", 3.0, 0)),
        );
        check_row(
            &format!(r#"{{"seq":" -1 ","timestamp":" inf ",{base}}}"#),
            Some((-1, "t", f64::INFINITY, 0)),
        );
        check_row(&format!(r#"{{"seq":null,"timestamp":1,{base}}}"#), None);
        check_row(&format!(r#"{{"seq":NaN,"timestamp":1,{base}}}"#), None);
        check_row(&format!(r#"{{"seq":"x","timestamp":1,{base}}}"#), None);
        check_row(&format!(r#"{{"timestamp":1,{base}}}"#), None);
        check_row(&format!(r#"{{"seq":0,"timestamp":"soon",{base}}}"#), None);
        check_row("[1,2]", None);
        // `str()` of non-strings: Python's `repr` forms.
        let row = r#"{"seq":0,"timestamp":1,"task_id":5,"sender":null,"kind":["a",{"b":false}],"body":1e-07,"body_hash":"h","prev_entry_hash":"genesis"}"#;
        let entry = Entry::from_row(&Value::parse(row).unwrap()).unwrap();
        assert_eq!(entry.task_id, "5");
        assert_eq!(entry.sender, "None");
        assert_eq!(entry.kind, "['a', {'b': False}]");
        assert_eq!(entry.body, "1e-07");
    }

    #[test]
    fn python_str_repr_cases() {
        fn check(input: &str, expect: &str) {
            assert_eq!(python_str_repr(input), expect, "{input:?}");
        }
        check("plain", "'plain'");
        check("it's", "\"it's\"");
        check("a'\"b", "'a\\'\"b'");
        check(
            "\u{7f}\u{85}\u{2028}\u{e0001} é\t\\",
            "'\\x7f\\x85\\u2028\\U000e0001 é\\t\\\\'",
        );
    }

    #[test]
    fn task_id_rules() {
        for ok in ["t-42", "a.b:c_d", &"x".repeat(256)] {
            assert!(validate_task_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "a\\b",
            "t\n",
            "é",
            &"x".repeat(257),
        ] {
            assert!(
                matches!(validate_task_id(bad), Err(Error::InvalidTaskId { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn parse_journal_splits_on_newline_only() {
        let mut entry = sample_entry();
        entry.body = "a\u{2028}b\u{2029}c\u{85}d\u{b}e\u{1c}f".to_owned();
        let text = format!("{}\n  \n{{broken\n{}", entry.to_row(), entry.to_row());
        let loaded = parse_journal(text.as_bytes());
        assert_eq!(loaded.entries.len(), 2);
        assert_eq!(loaded.entries[0].body, entry.body);
        assert_eq!(
            loaded.problems,
            vec!["line 4: malformed journal row".to_owned()]
        );
        let invalid = b"\xff\xfe\n";
        assert_eq!(
            parse_journal(invalid).problems,
            vec!["line 1: malformed journal row".to_owned()]
        );
    }
}
