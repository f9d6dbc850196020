//! DLP redaction for mailbox bodies: Bernstein 3.23's `redact_text`, with Python `re` semantics,
//! and an extended rule set for the secrets users leak most.
//!
//! Two modes ([`DlpMode`]) choose step 1 below:
//!
//! * [`DlpMode::Reference`] runs exactly the reference's eight rules, so a body redacts to the
//!   bytes Bernstein 3.23 writes (the golden vectors and the differential tests against Python
//!   `re` run in this mode);
//! * [`DlpMode::Extended`], the default, runs the same eight rules and then the
//!   [`EXTENDED_RULE_NAMES`] rules (AWS keys, GitHub, GitLab and Slack tokens, private-key
//!   blocks, JWTs, `Authorization` headers, high-entropy secret assignments), read from
//!   gitleaks' rule set and written for the `regex` crate. Running them after the reference's
//!   rules means a body the reference already redacts completely redacts to the same bytes with
//!   the same count; the extended rules only add redactions.
//!
//! Verification never re-runs the DLP (the stored body is what is hashed and signed), so a body
//! redacted in either mode verifies offline the same way.
//!
//! [`redact_text`] runs the reference's three steps (`FORMATS.md` §5):
//!
//! 1. eight rules, in this order, each applied to the output of the previous one; every match
//!    counts once. The five *capture-prefix* rules keep their first group and append
//!    [`REDACTED`]; `ssh_key`, `jwt` and `email` become [`REDACTED`] entirely:
//!    * `ssh_key`: `-----BEGIN [A-Z ]*KEY-----[\s\S]*?-----END [A-Z ]*KEY-----`
//!    * `jwt`: `\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b`
//!    * `bearer` (IGNORECASE): `(Authorization:\s*Bearer\s+)\S+`
//!    * `url_cred`: `(https?://)[^\s:]+:[^\s@]+@`
//!    * `env_export` (IGNORECASE):
//!      `((?:export\s+)?[A-Z_]*(?:SECRET|TOKEN|PASSWORD|KEY|CREDENTIAL)[A-Z_]*\s*=\s*)[^\s]+`
//!    * `api_key_assign` (IGNORECASE): `([A-Z_]*(?:API_KEY|_TOKEN|_SECRET)\s*=\s*)[^\s]+`
//!    * `yaml_sensitive` (IGNORECASE):
//!      `((?:token|key|secret|password|credential|auth)[a-z_]*\s*:\s*)[^\s#].*`
//!    * `email`: `\b[a-zA-Z0-9._%+\-]+@[a-zA-Z0-9.\-]+\.[a-zA-Z]{2,}\b`
//! 2. values registered with the secrets broker become [`BROKER_MASK`], longest first, each
//!    occurrence counted. The reference reads a process-global registry; here the caller passes
//!    the registered values explicitly (empty for a fresh process, as in the reference).
//! 3. `$HOME` (trailing `/` and `\` removed) becomes `~`. This step is not counted, and it is
//!    skipped for a filesystem root (`/`, `C:\`), for `~`, and when no home is given.
//!
//! # Where Rust's `regex` differs from Python's `re`, and what this module does about it
//!
//! The patterns above are Python `str` patterns, so Unicode semantics apply. Every difference
//! that can change a match is handled explicitly; no rule uses `\s`, `\S`, `\w`, `\b` or `(?i)`
//! with the `regex` crate's meaning:
//!
//! * **`\s`** — Python's `\s` is `str.isspace()`, which includes the separators U+001C–U+001F;
//!   the `regex` crate's `\s` (Unicode `White_Space`) does not. Every `\s` is written
//!   `[\s\x1C-\x1F]` and every `\S` / `[^\s…]` as `[^\s\x1C-\x1F…]`. The two sets were compared
//!   over all code points against CPython 3.12: identical.
//! * **IGNORECASE** — Python folds with `str.lower()` plus its own equivalence table: `i`/`I`
//!   also match U+0130 `İ` and U+0131 `ı`, `k`/`K` match U+212A (Kelvin sign), `s`/`S` match
//!   U+017F (long s); `[A-Z_]` and `[a-z_]` match both cases plus those four. The `regex`
//!   crate's `(?i)` (simple case folding) misses `İ` and `ı`, so no rule uses `(?i)`: each
//!   letter is an explicit class (`[kK\x{212A}]`), generated from the sets CPython 3.12 reports
//!   for every ASCII letter.
//! * **`\b` and `\w`** — Python's word characters are `str.isalnum()` plus `_` (general
//!   categories L* and N* of Unicode 15.0, the database of CPython 3.12). The `regex` crate's
//!   `\w` also includes combining marks, connector punctuation and join controls, and follows a
//!   newer Unicode version. The `regex` crate has no look-around, so the two rules that use `\b`
//!   (`jwt`, `email`) are matched by hand: a search that tries start positions left to right and
//!   backtracks exactly as Python's engine does (the segments of both patterns are maximal runs,
//!   so only the last quantifier ever gives characters back). The word test is the class
//!   `[\p{L}\p{N}_&&\p{Age=V15_0}]`, checked equal to Python's `\w` over all code points.
//! * **`[\s\S]*?`** — a lazy "any character"; the `regex` crate's leftmost-first semantics give
//!   the same (shortest) match a backtracking engine gives.
//! * **`.`** — matches everything but `\n` in both engines (so it does match `\r`).
//! * **Tie order of registered secrets** — the reference sorts a `frozenset` by length only, so
//!   equal-length values are applied in hash order; here ties are broken by code-point order so
//!   the result is deterministic.
//! * **Home lookup** — the reference falls back to the password database when `$HOME` is unset
//!   or empty; a library must not read the environment, so the caller passes the home directory
//!   and `None` (or an empty value) skips the step.

use std::sync::LazyLock;

use regex::Regex;

/// What a redacted secret becomes.
pub const REDACTED: &str = "***REDACTED***";

/// What a registered secrets-broker value becomes.
pub const BROKER_MASK: &str = "***";

/// The names of the eight rules, in the order they run.
pub const RULE_NAMES: [&str; 8] = [
    "ssh_key",
    "jwt",
    "bearer",
    "url_cred",
    "env_export",
    "api_key_assign",
    "yaml_sensitive",
    "email",
];

/// The names of the extended rules, in the order they run after the reference's eight.
pub const EXTENDED_RULE_NAMES: [&str; 12] = [
    "private_key_block",
    "private_key_truncated",
    "aws_access_key_id",
    "github_token",
    "gitlab_token",
    "slack_token",
    "jwt_extended",
    "authorization_header",
    "bearer_token",
    "aws_secret_access_key",
    "generic_secret_assignment",
    "url_password",
];

/// Which rule set step 1 runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DlpMode {
    /// The reference's eight rules only: bodies redact to the bytes Bernstein 3.23 writes.
    Reference,
    /// The reference's eight rules, then [`EXTENDED_RULE_NAMES`] (the default).
    #[default]
    Extended,
}

impl DlpMode {
    /// Parses a setting (trimmed, any case): `reference` or `extended`; an empty value is the
    /// default. `None` for anything else, so that a typo is reported rather than guessed.
    pub fn parse(value: &str) -> Option<DlpMode> {
        match value.trim().to_ascii_lowercase().as_str() {
            "reference" => Some(DlpMode::Reference),
            "extended" | "" => Some(DlpMode::Extended),
            _ => None,
        }
    }

    /// The setting's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DlpMode::Reference => "reference",
            DlpMode::Extended => "extended",
        }
    }
}

/// Everything the redaction needs besides the text: the rule set, the home directory and the
/// values registered with the secrets broker.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactionContext<'a> {
    /// The home directory to collapse to `~` (`None` skips the step).
    pub home: Option<&'a str>,
    /// Values registered with the secrets broker (empty in a fresh process).
    pub secrets: &'a [String],
    /// The rule set of step 1.
    pub mode: DlpMode,
}

impl RedactionContext<'_> {
    /// Runs all three steps; returns the redacted text and the number of redactions.
    pub fn redact(&self, text: &str) -> (String, usize) {
        let (cleaned, rule_count) = redact_secrets_in(self.mode, text);
        let (cleaned, broker_count) = scrub_registered_secrets(&cleaned, self.secrets);
        (
            collapse_home(&cleaned, self.home),
            rule_count + broker_count,
        )
    }
}

/// Bernstein's `redact_text` with an empty secrets registry: the eight rules, then the `$HOME`
/// collapse. Returns the redacted text and the number of redactions (the collapse is not
/// counted).
pub fn redact_text(text: &str, home: Option<&str>) -> (String, usize) {
    redact_text_with_secrets(text, home, &[])
}

/// Bernstein's `redact_text` with the given registered secrets.
pub fn redact_text_with_secrets(
    text: &str,
    home: Option<&str>,
    secrets: &[String],
) -> (String, usize) {
    let (cleaned, rule_count) = redact_secrets(text);
    let (cleaned, broker_count) = scrub_registered_secrets(&cleaned, secrets);
    (collapse_home(&cleaned, home), rule_count + broker_count)
}

/// Step 1 alone: the eight rules in order (the reference's `redact_secrets`).
pub fn redact_secrets(text: &str) -> (String, usize) {
    let mut count = 0;
    let mut result = text.to_owned();
    for rule in RULES.iter() {
        let (next, matched) = match rule {
            Rule::Regex { regex, keep_prefix } => substitute_regex(&result, regex, *keep_prefix),
            Rule::Jwt => substitute_manual(&result, find_jwt),
            Rule::Email => substitute_manual(&result, find_email),
        };
        result = next;
        count += matched;
    }
    (result, count)
}

/// Step 1 in `mode`: the reference's eight rules, then in [`DlpMode::Extended`] the extended
/// rules over their output.
pub fn redact_secrets_in(mode: DlpMode, text: &str) -> (String, usize) {
    let (result, count) = redact_secrets(text);
    match mode {
        DlpMode::Reference => (result, count),
        DlpMode::Extended => {
            let (result, extra) = redact_extended(&result);
            (result, count + extra)
        }
    }
}

/// The extended rules alone, in order, each over the output of the previous one; returns the
/// text and the number of redactions.
pub fn redact_extended(text: &str) -> (String, usize) {
    apply_extended(text, |_, _| {})
}

/// What the extended rules alone find in `text`: `(rule name, matched secret)` per redaction,
/// in the order they are made. For measuring false positives over a corpus.
pub fn extended_findings(text: &str) -> Vec<(&'static str, String)> {
    let mut findings = Vec::new();
    apply_extended(text, |rule, secret| {
        findings.push((rule, secret.to_owned()));
    });
    findings
}

/// Step 2 alone: every registered value becomes [`BROKER_MASK`], longest first.
pub fn scrub_registered_secrets(text: &str, secrets: &[String]) -> (String, usize) {
    let mut values: Vec<&str> = secrets
        .iter()
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .collect();
    // Python sorts by `len`, which counts code points; a value registered twice counts once
    // because the registry is a set.
    values.sort_by(|a, b| {
        b.chars()
            .count()
            .cmp(&a.chars().count())
            .then_with(|| a.cmp(b))
    });
    values.dedup();
    let mut out = text.to_owned();
    let mut count = 0;
    for value in values {
        let occurrences = out.matches(value).count();
        if occurrences > 0 {
            count += occurrences;
            out = out.replace(value, BROKER_MASK);
        }
    }
    (out, count)
}

/// Step 3 alone: replaces the home directory with `~` (not a redaction; never counted).
pub fn collapse_home(text: &str, home: Option<&str>) -> String {
    match home_prefix(home) {
        Some(prefix) => text.replace(prefix, "~"),
        None => text.to_owned(),
    }
}

/// The home prefix to collapse, or `None` when the step is skipped.
fn home_prefix(home: Option<&str>) -> Option<&str> {
    let trimmed = home?.trim_end_matches(['/', '\\']);
    if trimmed.is_empty() || trimmed == "~" || is_drive_root(trimmed) {
        return None;
    }
    Some(trimmed)
}

/// Whether a trimmed home value is a bare drive designator such as `C:` (from `C:\`).
fn is_drive_root(trimmed: &str) -> bool {
    let mut chars = trimmed.chars();
    match (chars.next(), chars.next(), chars.next()) {
        // Python tests the letter with `str.isalpha()`.
        (Some(letter), Some(':'), None) => is_python_alpha(letter),
        _ => false,
    }
}

/// Python's `\s` as the body of a character class: `White_Space` plus U+001C–U+001F.
const SPACE: &str = r"\s\x1C-\x1F";

/// `[A-Z_]` or `[a-z_]` under Python's IGNORECASE, without the `_`.
const CI_LETTERS: &str = r"A-Za-z\x{130}\x{131}\x{17F}\x{212A}";

/// One literal character under Python's IGNORECASE, as a `regex` pattern.
fn ci_char(c: char) -> String {
    match c.to_ascii_lowercase() {
        'i' => r"[iI\x{130}\x{131}]".to_owned(),
        'k' => r"[kK\x{212A}]".to_owned(),
        's' => r"[sS\x{17F}]".to_owned(),
        lower if lower.is_ascii_lowercase() => {
            format!("[{lower}{}]", lower.to_ascii_uppercase())
        }
        other => regex::escape(other.encode_utf8(&mut [0u8; 4])),
    }
}

/// A literal word under Python's IGNORECASE, as a `regex` pattern.
fn ci(word: &str) -> String {
    word.chars().map(ci_char).collect()
}

fn ci_alternation(words: &[&str]) -> String {
    words.iter().map(|w| ci(w)).collect::<Vec<_>>().join("|")
}

enum Rule {
    /// A rule the `regex` crate runs, with the Python semantics spelled out explicitly.
    Regex { regex: Regex, keep_prefix: bool },
    /// The `jwt` rule, matched by hand because of `\b`.
    Jwt,
    /// The `email` rule, matched by hand because of `\b`.
    Email,
}

fn compile(pattern: &str) -> Regex {
    // The patterns are fixed strings built above and covered by unit tests; compiling them
    // cannot fail at run time once a test run has compiled them.
    #[allow(clippy::expect_used)]
    Regex::new(pattern).expect("DLP patterns are valid regular expressions")
}

static RULES: LazyLock<[Rule; 8]> = LazyLock::new(|| {
    let sp = format!("[{SPACE}]");
    let non_sp = format!("[^{SPACE}]");
    let env_words = ci_alternation(&["SECRET", "TOKEN", "PASSWORD", "KEY", "CREDENTIAL"]);
    let assign_words = ci_alternation(&["API_KEY", "_TOKEN", "_SECRET"]);
    let yaml_words = ci_alternation(&["token", "key", "secret", "password", "credential", "auth"]);
    [
        Rule::Regex {
            regex: compile(r"-----BEGIN [A-Z ]*KEY-----[\s\S]*?-----END [A-Z ]*KEY-----"),
            keep_prefix: false,
        },
        Rule::Jwt,
        Rule::Regex {
            regex: compile(&format!(
                "({}{sp}*{}{sp}+){non_sp}+",
                ci("Authorization:"),
                ci("Bearer")
            )),
            keep_prefix: true,
        },
        Rule::Regex {
            regex: compile(&format!("(https?://)[^{SPACE}:]+:[^{SPACE}@]+@")),
            keep_prefix: true,
        },
        Rule::Regex {
            regex: compile(&format!(
                "((?:{}{sp}+)?[{CI_LETTERS}_]*(?:{env_words})[{CI_LETTERS}_]*{sp}*={sp}*){non_sp}+",
                ci("export")
            )),
            keep_prefix: true,
        },
        Rule::Regex {
            regex: compile(&format!(
                "([{CI_LETTERS}_]*(?:{assign_words}){sp}*={sp}*){non_sp}+"
            )),
            keep_prefix: true,
        },
        Rule::Regex {
            regex: compile(&format!(
                "((?:{yaml_words})[{CI_LETTERS}_]*{sp}*:{sp}*)[^{SPACE}#].*"
            )),
            keep_prefix: true,
        },
        Rule::Email,
    ]
});

/// One extended rule: a `regex`-crate pattern (no Python semantics to reproduce here), the
/// capture group that holds the secret (the whole match when the pattern has none), and an
/// optional check the secret must pass.
struct ExtendedRule {
    name: &'static str,
    regex: Regex,
    check: Option<fn(&regex::Captures<'_>) -> bool>,
}

/// The characters a token, key or base64 value is made of (no `*`, so the `***REDACTED***`
/// an earlier rule left behind never matches again).
const TOKEN_CHARS: &str = r"A-Za-z0-9_\-+/=.~";

/// The extended rules, in order. Their patterns are our own, written after reading gitleaks'
/// `config/gitleaks.toml` (rules `private-key`, `aws-access-token`, `github-pat`,
/// `github-oauth`, `github-app-token`, `github-refresh-token`, `github-fine-grained-pat`,
/// `gitlab-pat`, `gitlab-pat-routable`, `slack-*-token`, `jwt`, `curl-auth-header` and
/// `generic-api-key`, whose 3.5 bits-per-character entropy floor [`looks_random`] uses).
///
/// Each pattern runs on the `regex` crate, which never backtracks: one search is linear in the
/// length of the text (`O(m * n)` for a pattern of size `m`), whatever the text holds, so a body
/// built to make a backtracking engine explode costs no more than any other body of its length.
/// A replacement pass repeats searches from the end of each match; no pattern here has an
/// alternation whose failing branch scans far beyond a match the other branch found, which is
/// what would make repeated searches rescan the text.
static EXTENDED_RULES: LazyLock<Vec<ExtendedRule>> = LazyLock::new(|| {
    let rule = |name, pattern: &str, check| ExtendedRule {
        name,
        regex: compile(pattern),
        check,
    };
    // The label of a PEM or PGP private-key armour line, as gitleaks' `private-key` reads it.
    let label = r"-----BEGIN[ A-Za-z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----";
    let end_label = r"-----END[ A-Za-z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----";
    // A line break inside a body, raw or escaped as it appears in JSON and logs.
    let line_break = r"(?:\\[rn]|[ \t\r\n])+";
    // What may sit between a secret's name and its value: a closing quote, an assignment
    // operator, an opening quote or backtick. The reference's `env_export` reads the `>` of
    // `name => 'value'` as the value and leaves `name =***REDACTED*** 'value'`, so that
    // leftover counts as an operator too, and the real value after it is still caught.
    let assign = r#"["']?[ \t]{0,3}(?:=\*\*\*REDACTED\*\*\*|=>|:=|[:=])[ \t]{0,3}["'`]?"#;
    let tok = TOKEN_CHARS;
    vec![
        rule(
            "private_key_block",
            &format!(r"{label}[\s\S]*?{end_label}"),
            None,
        ),
        // A block pasted without its END line: the armour line and every base64 line after it.
        rule(
            "private_key_truncated",
            &format!(r"{label}(?:{line_break}[A-Za-z0-9+/=]{{16,}})*"),
            None,
        ),
        rule(
            "aws_access_key_id",
            r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
            None,
        ),
        rule(
            "github_token",
            r"\b(?:gh[pousr]_[0-9A-Za-z]{36}|github_pat_[0-9A-Za-z_]{82})",
            None,
        ),
        rule(
            "gitlab_token",
            r"\bglpat-[0-9A-Za-z_-]{20,}(?:\.[0-9a-z]{9})?",
            None,
        ),
        rule("slack_token", r"\bxox[abeoprs]-[0-9A-Za-z-]{10,}", None),
        // The reference's `jwt` wants `eyJ` twice, ten characters per segment and a signature;
        // this one also takes other JSON openings (`eyA…` for `{ "`) and unsigned tokens.
        rule(
            "jwt_extended",
            r"\bey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
            None,
        ),
        // `Authorization` as a JSON key, a header with any scheme, or `authorization=`; the
        // reference only takes `Authorization:` directly followed by `Bearer`.
        rule(
            "authorization_header",
            &format!(
                r#"(?i)\b(?:proxy-)?authorization{assign}(?:bearer|token|basic|digest|api-?key)[ \t]+(?P<secret>[{tok}]{{8,}})"#
            ),
            None,
        ),
        rule(
            "bearer_token",
            &format!(r"(?i)\bbearer[ \t]+(?P<secret>[{tok}]{{20,}})"),
            Some(|caps| secret_of(caps).is_some_and(letters_and_digits)),
        ),
        rule(
            "aws_secret_access_key",
            &format!(
                r"(?i)\b(?:aws_?)?secret_?access_?key(?:_?id)?{assign}(?P<secret>[A-Za-z0-9/+]{{40}})(?:[^A-Za-z0-9/+=]|\z)"
            ),
            None,
        ),
        // A value assigned to a name that says it is secret, when the value looks random:
        // gitleaks' entropy floor, and at least one letter and one digit, so that
        // `"token": "missing"` and `password = "changeme"` stay readable. Names of values that
        // are public by design (see [`PUBLIC_NAMES`]) are left alone.
        rule(
            "generic_secret_assignment",
            &format!(
                r"(?i)(?P<name>[A-Za-z0-9_.-]{{0,40}}?(?:api[_.-]?key|apikey|secret|token|passw(?:or)?d|passwd|pwd|credentials?|access[_.-]?key|private[_.-]?key|client[_.-]?secret)[A-Za-z0-9_.-]{{0,20}}){assign}(?P<secret>[{tok}]{{12,}})"
            ),
            Some(|caps| {
                let public = caps
                    .name("name")
                    .is_some_and(|n| is_public_name(n.as_str()));
                !public && secret_of(caps).is_some_and(looks_random)
            }),
        ),
        // Credentials in any scheme's URL (`postgres://u:p@h`); the reference's `url_cred`
        // only knows `http` and `https`.
        rule(
            "url_password",
            r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@]+:(?P<secret>[^\s@/?#*]+)@",
            None,
        ),
    ]
});

/// Runs the extended rules in order, calling `on_hit(rule, secret)` for every redaction.
fn apply_extended(text: &str, mut on_hit: impl FnMut(&'static str, &str)) -> (String, usize) {
    let mut result = text.to_owned();
    let mut count = 0;
    for rule in EXTENDED_RULES.iter() {
        let mut out = String::with_capacity(result.len());
        let mut last = 0;
        let mut matched = 0;
        for caps in rule.regex.captures_iter(&result) {
            let Some(secret) = caps.name("secret").or_else(|| caps.get(0)) else {
                continue;
            };
            if rule.check.is_some_and(|check| !check(&caps)) {
                continue;
            }
            on_hit(rule.name, secret.as_str());
            out.push_str(&result[last..secret.start()]);
            out.push_str(REDACTED);
            last = secret.end();
            matched += 1;
        }
        if matched > 0 {
            out.push_str(&result[last..]);
            result = out;
            count += matched;
        }
    }
    (result, count)
}

/// The `secret` group of a match.
fn secret_of<'t>(caps: &regex::Captures<'t>) -> Option<&'t str> {
    caps.name("secret").map(|m| m.as_str())
}

/// Names whose values are public by design although the name holds a secret word (after
/// lowercasing and dropping `_`, `.` and `-`), in the spirit of gitleaks' generic allowlist:
/// Bernstein's own `pollToken` (base64 of the run id and spec revision), pagination and CSRF
/// tokens, token counts and types, and the names or ids of keys and secrets.
const PUBLIC_NAMES: [&str; 14] = [
    "polltoken",
    "publictoken",
    "csrftoken",
    "pagetoken",
    "nexttoken",
    "continuationtoken",
    "tokencount",
    "tokentype",
    "tokenid",
    "tokenurl",
    "secretname",
    "secretid",
    "keyid",
    "keyname",
];

fn is_public_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| !matches!(c, '_' | '.' | '-'))
        .map(|c| c.to_ascii_lowercase())
        .collect();
    PUBLIC_NAMES.iter().any(|public| folded.contains(public))
}

/// Whether `value` has at least one ASCII letter and one ASCII digit.
fn letters_and_digits(value: &str) -> bool {
    value.chars().any(|c| c.is_ascii_alphabetic()) && value.chars().any(|c| c.is_ascii_digit())
}

/// Shannon entropy of `value`'s characters, in bits per character.
fn entropy(value: &str) -> f64 {
    let mut counts = std::collections::BTreeMap::new();
    let mut total = 0usize;
    for c in value.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        total += 1;
    }
    if total == 0 {
        return 0.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let total = total as f64;
    counts
        .values()
        .map(|&n| {
            #[allow(clippy::cast_precision_loss)]
            let p = n as f64 / total;
            -p * p.log2()
        })
        .sum()
}

/// gitleaks' test for a generic secret: at least 3.5 bits per character, plus a letter and a
/// digit.
fn looks_random(value: &str) -> bool {
    letters_and_digits(value) && entropy(value) >= 3.5
}

/// Python's `\w`: `str.isalnum()` or `_`, over the Unicode 15.0 database of CPython 3.12.
static PY_WORD: LazyLock<Regex> = LazyLock::new(|| compile(r"\A[\p{L}\p{N}_&&\p{Age=V15_0}]\z"));

/// Python's `str.isalpha()` for one character.
static PY_ALPHA: LazyLock<Regex> = LazyLock::new(|| compile(r"\A[\p{L}&&\p{Age=V15_0}]\z"));

fn is_python_word(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphanumeric() || c == '_';
    }
    PY_WORD.is_match(c.encode_utf8(&mut [0u8; 4]))
}

fn is_python_alpha(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    PY_ALPHA.is_match(c.encode_utf8(&mut [0u8; 4]))
}

/// `pattern.sub(replacer, text)` for a `regex`-crate rule; returns the new text and the count.
fn substitute_regex(text: &str, regex: &Regex, keep_prefix: bool) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut count = 0;
    for caps in regex.captures_iter(text) {
        let Some(whole) = caps.get(0) else {
            continue;
        };
        out.push_str(&text[last..whole.start()]);
        if keep_prefix && let Some(prefix) = caps.get(1) {
            out.push_str(prefix.as_str());
        }
        out.push_str(REDACTED);
        last = whole.end();
        count += 1;
    }
    out.push_str(&text[last..]);
    (out, count)
}

/// `pattern.sub(REDACTED, text)` for a hand-matched rule. `find(text, from)` returns the leftmost
/// match `(start, end)` in characters with `start >= from`, or `None`.
fn substitute_manual(
    text: &str,
    find: fn(&Scan, usize, &mut Memo) -> Option<(usize, usize)>,
) -> (String, usize) {
    let scan = Scan::new(text);
    let mut memo = Memo::default();
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    let mut count = 0;
    while let Some((start, end)) = find(&scan, pos, &mut memo) {
        out.extend(&scan.chars[pos..start]);
        out.push_str(REDACTED);
        count += 1;
        pos = end;
    }
    out.extend(&scan.chars[pos..]);
    (out, count)
}

/// The text of one pass as characters, with the maximal-run tables both hand matchers use.
struct Scan {
    chars: Vec<char>,
    /// `jwt_run[i]`: the first index `>= i` not in `[A-Za-z0-9_-]`.
    jwt_run: Vec<usize>,
    /// `local_run[i]`: the first index `>= i` not in `[a-zA-Z0-9._%+-]`.
    local_run: Vec<usize>,
    /// `domain_run[i]`: the first index `>= i` not in `[a-zA-Z0-9.-]`.
    domain_run: Vec<usize>,
    /// `alpha_run[i]`: the first index `>= i` not in `[a-zA-Z]`.
    alpha_run: Vec<usize>,
}

fn run_table(chars: &[char], member: fn(char) -> bool) -> Vec<usize> {
    let mut table = vec![chars.len(); chars.len() + 1];
    for i in (0..chars.len()).rev() {
        table[i] = if member(chars[i]) { table[i + 1] } else { i };
    }
    table
}

impl Scan {
    fn new(text: &str) -> Scan {
        let chars: Vec<char> = text.chars().collect();
        Scan {
            jwt_run: run_table(&chars, |c| {
                c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
            }),
            local_run: run_table(&chars, |c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '%' | '+' | '-')
            }),
            domain_run: run_table(&chars, |c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-')
            }),
            alpha_run: run_table(&chars, |c| c.is_ascii_alphabetic()),
            chars,
        }
    }

    fn len(&self) -> usize {
        self.chars.len()
    }

    fn is_word_at(&self, i: usize) -> bool {
        self.chars.get(i).is_some_and(|&c| is_python_word(c))
    }

    /// Python's `\b` between `chars[i - 1]` and `chars[i]`; the text's ends count as non-word.
    fn boundary(&self, i: usize) -> bool {
        let before = i > 0 && self.is_word_at(i - 1);
        before != self.is_word_at(i)
    }

    fn literal_at(&self, i: usize, literal: &[char]) -> bool {
        self.chars.get(i..i + literal.len()) == Some(literal)
    }
}

/// The last tail computation of a hand matcher, reused while consecutive start positions share
/// it (they do whenever they sit in the same maximal run).
#[derive(Default)]
struct Memo {
    key: Option<usize>,
    value: Option<usize>,
}

impl Memo {
    fn get_or(&mut self, key: usize, compute: impl FnOnce() -> Option<usize>) -> Option<usize> {
        if self.key != Some(key) {
            self.value = compute();
            self.key = Some(key);
        }
        self.value
    }
}

/// The literal that opens both JWT segments that carry JSON.
const EYJ: [char; 3] = ['e', 'y', 'J'];

/// `\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b`.
///
/// The first two segments are followed by `.`, which their class excludes, so each must be the
/// whole maximal run; only the third segment backtracks, from its longest length down to 10,
/// until the closing `\b` holds.
fn find_jwt(scan: &Scan, from: usize, memo: &mut Memo) -> Option<(usize, usize)> {
    let len = scan.len();
    for start in from..len {
        // `e` is a word character, so `\b` before it means "no word character before it".
        if !scan.literal_at(start, &EYJ) || (start > 0 && scan.is_word_at(start - 1)) {
            continue;
        }
        let first = start + 3;
        let first_end = scan.jwt_run[first];
        if first_end - first < 10 || scan.chars.get(first_end) != Some(&'.') {
            continue;
        }
        let end = memo.get_or(first_end, || jwt_tail(scan, first_end + 1));
        if let Some(end) = end {
            return Some((start, end));
        }
    }
    None
}

/// Matches `eyJ[…]{10,}\.[…]{10,}\b` at `at`; returns the end of the match.
fn jwt_tail(scan: &Scan, at: usize) -> Option<usize> {
    if !scan.literal_at(at, &EYJ) {
        return None;
    }
    let second = at + 3;
    let second_end = scan.jwt_run[second];
    if second_end - second < 10 || scan.chars.get(second_end) != Some(&'.') {
        return None;
    }
    let third = second_end + 1;
    let third_end = scan.jwt_run[third];
    if third_end - third < 10 {
        return None;
    }
    (third + 10..=third_end)
        .rev()
        .find(|&end| scan.boundary(end))
}

/// `\b[a-zA-Z0-9._%+\-]+@[a-zA-Z0-9.\-]+\.[a-zA-Z]{2,}\b`.
///
/// The local part must run to the `@` (its class excludes `@`). After the `@`, the domain class
/// contains `.` and the letters, so Python backtracks the first `+` from its longest length;
/// for each `.` it then takes the longest letter run, and inside that run `\b` can never hold
/// (letter next to letter), so only the run's end is tried.
fn find_email(scan: &Scan, from: usize, memo: &mut Memo) -> Option<(usize, usize)> {
    let len = scan.len();
    for start in from..len {
        let local_end = scan.local_run[start];
        if local_end == start || !scan.boundary(start) {
            continue;
        }
        if scan.chars.get(local_end) != Some(&'@') {
            continue;
        }
        let end = memo.get_or(local_end, || email_domain(scan, local_end + 1));
        if let Some(end) = end {
            return Some((start, end));
        }
    }
    None
}

/// Matches `[a-zA-Z0-9.\-]+\.[a-zA-Z]{2,}\b` at `at`; returns the end of the match.
fn email_domain(scan: &Scan, at: usize) -> Option<usize> {
    if at > scan.len() {
        return None;
    }
    let run_end = scan.domain_run[at];
    (at + 1..run_end).rev().find_map(|dot| {
        if scan.chars[dot] != '.' {
            return None;
        }
        let letters = dot + 1;
        let letters_end = scan.alpha_run[letters];
        (letters_end - letters >= 2 && scan.boundary(letters_end)).then_some(letters_end)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: &str, expect_count: usize) {
        let (out, count) = redact_text(input, Some("/home/vector"));
        assert_eq!(out, expect, "input {input:?}");
        assert_eq!(count, expect_count, "count for {input:?}");
    }

    #[test]
    fn all_rules_compile() {
        assert_eq!(RULES.len(), RULE_NAMES.len());
        assert!(is_python_word('é'));
    }

    #[test]
    fn ignorecase_matches_python_special_folds() {
        // `ı` (dotless i) and `İ` fold to `i` in Python; the Kelvin sign to `k`; `ſ` to `s`.
        check(
            "Authorızation: Bearer x",
            "Authorızation: ***REDACTED***",
            2,
        );
        check(
            "AUTHORİZATİON: BEARER x",
            "AUTHORİZATİON: ***REDACTED***",
            2,
        );
        check("\u{212A}EY=v", "\u{212A}EY=***REDACTED***", 1);
        check("ſecret: v", "ſecret: ***REDACTED***", 1);
        check("MY_\u{17F}ECRET=v", "MY_\u{17F}ECRET=***REDACTED***", 2);
    }

    #[test]
    fn python_whitespace_includes_the_information_separators() {
        // U+001F is whitespace to Python: it ends the `\S+` of the bearer token, and the
        // `[^\s]` of env_export does not extend across it.
        check(
            "Authorization: Bearer abc\u{1f}tail",
            "Authorization: ***REDACTED***",
            2,
        );
        check(
            "export API_KEY=abc\u{1c}rest",
            "export API_KEY=***REDACTED***\u{1c}rest",
            2,
        );
        check("password:\u{1e}value", "password:\u{1e}***REDACTED***", 1);
    }

    #[test]
    fn dot_stops_at_newline_only() {
        check("token: a\rb\nnext", "token: ***REDACTED***\nnext", 1);
    }

    #[test]
    fn jwt_boundaries_follow_python_words() {
        let jwt = "eyJhbGciOiJIUzI1NiIs.eyJzdWIiOiIxMjM0NTY3.SflKxwRJSMeKKF2QT4fw";
        check(&format!("x {jwt} y"), "x ***REDACTED*** y", 1);
        // A preceding word character (here a Python letter outside ASCII) blocks `\b`.
        check(&format!("é{jwt}"), &format!("é{jwt}"), 0);
        // A combining mark is a word character to the `regex` crate but not to Python.
        check(&format!("\u{301}{jwt}"), "\u{301}***REDACTED***", 1);
        // A trailing `-` needs a word character after it, so the match backtracks before it.
        check(
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb.cccccccccccc- z",
            "***REDACTED***- z",
            1,
        );
        // Python letters after the run push the boundary back into the run, after the `-`.
        check(
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb.cccccccccc-ddé",
            "***REDACTED***ddé",
            1,
        );
        // No boundary anywhere in the third segment: no match.
        check(
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb.ccccccccccccé",
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb.ccccccccccccé",
            0,
        );
    }

    #[test]
    fn email_backtracks_like_python() {
        check("a@b.co", "***REDACTED***", 1);
        // The TLD must end at a boundary; `.c1` fails, so the domain backtracks to `.com`.
        check("x a@b.com.c1 y", "x ***REDACTED***.c1 y", 1);
        // A leading `.` has no boundary before it when preceded by a space: the match starts
        // one character later.
        check(" .a@b.co", " .***REDACTED***", 1);
        // But after a word character, the boundary sits before the punctuation.
        check("é.a@b.co", "é***REDACTED***", 1);
        check("mail: a@b", "mail: a@b", 0);
        check("a@b.cé", "a@b.cé", 0);
    }

    #[test]
    fn sequencing_and_capture_prefixes() {
        check(
            "Authorization: Bearer x",
            "Authorization: ***REDACTED***",
            2,
        );
        check(
            "see https://u:p@host/x and more",
            "see https://***REDACTED***host/x and more",
            1,
        );
        check(
            "-----BEGIN RSA PRIVATE KEY-----\nA\n-----END RSA PRIVATE KEY----- and -----BEGIN KEY-----x-----END KEY-----",
            "***REDACTED*** and ***REDACTED***",
            2,
        );
    }

    #[test]
    fn registered_secrets_longest_first() {
        let secrets = vec!["abc".to_owned(), "abcdef".to_owned(), String::new()];
        let (out, count) = redact_text_with_secrets("x abcdef abc abcabc", None, &secrets);
        assert_eq!(out, "x *** *** ******");
        assert_eq!(count, 4);
        let duplicated = vec!["zz".to_owned(), "zz".to_owned()];
        assert_eq!(
            redact_text_with_secrets("zz", None, &duplicated),
            ("***".to_owned(), 1)
        );
    }

    #[test]
    fn home_collapse_rules() {
        fn home(text: &str, home: Option<&str>) -> String {
            redact_text(text, home).0
        }
        assert_eq!(home("/home/u/x", Some("/home/u/")), "~/x");
        assert_eq!(home("C:\\Users\\u\\x", Some("C:\\Users\\u\\")), "~\\x");
        assert_eq!(home("/x", Some("/")), "/x");
        assert_eq!(home("C:\\x", Some("C:\\")), "C:\\x");
        assert_eq!(home("~/x", Some("~")), "~/x");
        assert_eq!(home("/home/u", None), "/home/u");
        assert_eq!(home("/home/u", Some("")), "/home/u");
        assert_eq!(redact_text("/home/u/a", Some("/home/u")).1, 0);
    }

    /// Runs the extended rules alone, without the reference's eight rules in front of them, so
    /// that a reference rule cannot hide what an extended rule does.
    fn check_extended(input: &str, expect: &str, expect_count: usize) {
        let (out, count) = redact_extended(input);
        assert_eq!(out, expect, "input {input:?}");
        assert_eq!(count, expect_count, "count for {input:?}");
    }

    #[test]
    fn modes_parse_from_their_settings_and_spell_them_back() {
        // A setting is trimmed and read in any case, an empty value is the default, and
        // anything else is refused so that a typo is reported rather than guessed.
        let cases = [
            ("reference", Some(DlpMode::Reference)),
            (" REFERENCE\t", Some(DlpMode::Reference)),
            ("extended", Some(DlpMode::Extended)),
            ("Extended", Some(DlpMode::Extended)),
            ("", Some(DlpMode::Extended)),
            ("strict", None),
        ];
        for (setting, expect) in cases {
            assert_eq!(DlpMode::parse(setting), expect, "setting {setting:?}");
        }
        // Each mode is spelled exactly as the word that selects it.
        assert_eq!(DlpMode::Reference.as_str(), "reference");
        assert_eq!(DlpMode::Extended.as_str(), "extended");
    }

    #[test]
    fn context_adds_rule_and_broker_redactions() {
        // The body has one reference redaction (the email), one extended redaction (the AWS key
        // id) and one broker value; the count is their sum, and the home collapse adds nothing.
        let secrets = vec!["hunter2".to_owned()];
        let body = "id AKIAUJZDEGXDNCF32EPF, mail a@b.co, file /home/u/x, pw hunter2";
        let extended = RedactionContext {
            home: Some("/home/u"),
            secrets: &secrets,
            mode: DlpMode::Extended,
        };
        assert_eq!(
            extended.redact(body),
            (
                "id ***REDACTED***, mail ***REDACTED***, file ~/x, pw ***".to_owned(),
                3
            )
        );
        // The reference's rules leave the key id alone: one rule redaction plus one broker value.
        let reference = RedactionContext {
            mode: DlpMode::Reference,
            ..extended
        };
        assert_eq!(
            reference.redact(body),
            (
                "id AKIAUJZDEGXDNCF32EPF, mail ***REDACTED***, file ~/x, pw ***".to_owned(),
                2
            )
        );
    }

    #[test]
    fn findings_name_each_rule_and_its_secret_in_order() {
        // The false-positive measurement relies on every redaction being reported with the
        // rule that made it and the exact text it removed.
        assert_eq!(
            extended_findings("id AKIAUJZDEGXDNCF32EPF then bearer Zq8t4LmN2vXy7Pw3Rk9sT1"),
            vec![
                ("aws_access_key_id", "AKIAUJZDEGXDNCF32EPF".to_owned()),
                ("bearer_token", "Zq8t4LmN2vXy7Pw3Rk9sT1".to_owned()),
            ]
        );
        assert_eq!(extended_findings("nothing secret here"), Vec::new());
    }

    #[test]
    fn ignorecase_helper_matches_other_characters_literally() {
        // Only ASCII letters get a class of their case variants; every other character must
        // match itself and nothing else, including those with a meaning inside a class (`^`,
        // `[`, `]`, `-`, `\`). The rules only pass `:` and `_` through this path today, so this
        // pins the helper's contract before a new word with punctuation relies on it.
        for c in (' '..='~').filter(|c| !c.is_ascii_alphabetic()) {
            let single = compile(&format!(r"\A(?:{})\z", ci_char(c)));
            for other in ' '..='~' {
                let text = other.to_string();
                assert_eq!(
                    single.is_match(&text),
                    other == c,
                    "{c:?} against {other:?}"
                );
            }
        }
    }

    #[test]
    fn only_a_python_letter_before_the_colon_makes_a_drive_root() {
        // Python tests the drive letter with `str.isalpha()`: `1:` and `☕:` are not drive roots,
        // so such a home collapses like any other, while `z:` and `é:` are roots and are kept.
        let cases = [
            ("1:\\x", "1:\\", "~\\x"),
            ("☕:\\x", "☕:\\", "~\\x"),
            ("z:\\x", "z:\\", "z:\\x"),
            ("é:\\x", "é:\\", "é:\\x"),
        ];
        for (text, home, expect) in cases {
            assert_eq!(redact_text(text, Some(home)).0, expect, "home {home:?}");
        }
    }

    #[test]
    fn jwt_needs_ten_characters_in_each_segment_and_dots_between() {
        // Each `eyJ` segment is a whole maximal run that must be at least ten characters long
        // and end at a `.`; one short segment or a missing dot anywhere means no match, even
        // when a valid-looking tail follows.
        let misses = [
            "eyJshort.eyJbbbbbbbbbbbb.cccccccccccc",
            "eyJaaaaaaaaaaaa.eyJshort.cccccccccccc",
            "eyJaaaaaaaaaaaa eyJbbbbbbbbbbbb.cccccccccccc",
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb cccccccccccc",
            "eyJaaaaaaaaaaaa.eyJbbbbbbbbbbbb.ccccccccc",
        ];
        for text in misses {
            check(text, text, 0);
        }
        // Exactly ten characters per segment is enough.
        check(
            "eyJaaaaaaaaaa.eyJbbbbbbbbbb.cccccccccc",
            "***REDACTED***",
            1,
        );
    }

    #[test]
    fn email_domain_needs_a_label_and_a_tld_of_two_letters_at_a_boundary() {
        // The domain needs at least one character before its last dot, and the TLD at least two
        // letters followed by a non-word character (or the end of the text).
        let misses = ["a@.co", "a@b.c", "a@b.c d", "a@b.co1"];
        for text in misses {
            check(text, text, 0);
        }
        check("a@b.co d", "***REDACTED*** d", 1);
    }

    #[test]
    fn bearer_token_needs_letters_and_digits() {
        // A bare `bearer` token is taken only when it mixes letters and digits, so that prose
        // and placeholders made of one kind of character stay readable.
        check_extended("bearer Zq8t4LmN2vXy7Pw3Rk9sT1", "bearer ***REDACTED***", 1);
        for text in [
            "bearer abcdefghijklmnopqrstuvwx",
            "bearer 123456789012345678901234",
        ] {
            check_extended(text, text, 0);
        }
    }

    #[test]
    fn generic_assignment_needs_a_random_value_and_a_private_name() {
        // `Zq8t4LmN2vXy7Pw3` has sixteen distinct characters (4 bits each) with letters and
        // digits, so it looks random; the other values fail one of the two tests, and the
        // public names are left alone whatever their value.
        check_extended(
            "\"api_key\": \"Zq8t4LmN2vXy7Pw3\"",
            "\"api_key\": \"***REDACTED***\"",
            1,
        );
        let misses = [
            // Letters and digits, but only 1 bit per character.
            "\"api_key\": \"aaaa1111aaaa1111\"",
            // 4 bits per character, but no digit.
            "\"api_key\": \"ZqtLmNvXyPwRkTsJ\"",
            // Public names, also once `_`, `.` and `-` are dropped and the case is folded.
            "\"pollToken\": \"Zq8t4LmN2vXy7Pw3\"",
            "\"next_page_token\": \"Zq8t4LmN2vXy7Pw3\"",
            "\"CSRF-Token\": \"Zq8t4LmN2vXy7Pw3\"",
        ];
        for text in misses {
            check_extended(text, text, 0);
        }
    }

    #[test]
    fn entropy_is_shannon_bits_per_character() {
        // The generic rule's 3.5-bit floor is only meaningful if this is Shannon's formula.
        let cases = [
            ("", 0.0),
            ("aaaa", 0.0),
            ("abab", 1.0),
            ("aab", 0.918_295_834_054_489_6),
            ("abcd", 2.0),
            ("Zq8t4LmN2vXy7Pw3", 4.0),
        ];
        for (value, bits) in cases {
            let measured = entropy(value);
            assert!(
                (measured - bits).abs() < 1e-9,
                "entropy of {value:?} is {measured}, expected {bits}"
            );
        }
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// Surrounding text: words, punctuation, non-ASCII letters, separators Python treats
        /// specially. No `-`, `.`, `:`, `=` or `@`, so the filler cannot complete a rule on its own.
        fn filler() -> impl Strategy<Value = String> {
            "[a-zA-Z0-9 ,;()é☕\u{2028}\u{1c}\n]{0,30}"
        }

        /// Embeds `secret` between two fillers with a space on each side.
        fn embed(secret: &str, before: &str, after: &str) -> String {
            format!("{before} {secret} {after}")
        }

        fn assert_gone(text: &str, secret: &str) -> Result<(), TestCaseError> {
            let (out, count) = redact_text(text, Some("/home/vector"));
            prop_assert!(!out.contains(secret), "{secret:?} survived in {out:?}");
            prop_assert!(count >= 1);
            Ok(())
        }

        proptest! {
            #[test]
            fn bearer_tokens_are_removed(
                token in "[A-Za-z0-9._~+/-]{12,40}",
                before in filler(),
                after in filler(),
            ) {
                let text = embed(&format!("Authorization: Bearer {token}"), &before, &after);
                assert_gone(&text, &token)?;
            }

            #[test]
            fn jwts_are_removed(
                header in "[A-Za-z0-9_-]{10,30}",
                claims in "[A-Za-z0-9_-]{10,30}",
                signature in "[A-Za-z0-9_-]{9,30}[A-Za-z0-9]",
                before in filler(),
                after in filler(),
            ) {
                let jwt = format!("eyJ{header}.eyJ{claims}.{signature}");
                assert_gone(&embed(&jwt, &before, &after), &jwt)?;
            }

            #[test]
            fn exported_tokens_are_removed(
                name in "[A-Z]{1,8}",
                value in "[A-Za-z0-9_./+-]{8,30}",
                before in filler(),
                after in filler(),
            ) {
                let text = embed(&format!("export {name}_TOKEN={value}"), &before, &after);
                assert_gone(&text, &value)?;
            }

            #[test]
            fn emails_are_removed(
                local in "[a-z0-9][a-z0-9._%+-]{0,15}",
                domain in "[a-z0-9]{1,10}",
                tld in "[a-z]{2,6}",
                before in filler(),
                after in filler(),
            ) {
                let email = format!("{local}@{domain}.{tld}");
                assert_gone(&embed(&email, &before, &after), &email)?;
            }

            #[test]
            fn pem_blocks_are_removed(
                label in "(RSA |EC |OPENSSH |)PRIVATE ",
                body in "[A-Za-z0-9+/=]{10,64}(\n[A-Za-z0-9+/=]{1,64}){0,4}",
                before in filler(),
                after in filler(),
            ) {
                let block = format!("-----BEGIN {label}KEY-----\n{body}\n-----END {label}KEY-----");
                assert_gone(&embed(&block, &before, &after), &body)?;
            }

            #[test]
            fn extended_mode_removes_cloud_and_forge_tokens(
                aws in "(AKIA|ASIA)[A-Z2-7]{16}",
                github in "gh[pousr]_[0-9A-Za-z]{36}",
                gitlab in "glpat-[0-9A-Za-z_-]{20}",
                slack in "xox[bp]-[0-9]{10}-[0-9A-Za-z]{12,24}",
                before in filler(),
                after in filler(),
            ) {
                for secret in [&aws, &github, &gitlab, &slack] {
                    let text = embed(secret, &before, &after);
                    let (reference, reference_count) = redact_secrets(&text);
                    let (out, count) = redact_secrets_in(DlpMode::Extended, &text);
                    prop_assert!(!out.contains(secret.as_str()), "{secret:?} survived in {out:?}");
                    prop_assert!(count > reference_count);
                    prop_assert_eq!(redact_secrets_in(DlpMode::Reference, &text), (reference, reference_count));
                }
            }

            #[test]
            fn extended_mode_only_adds_redactions(text in any::<String>()) {
                let (reference, reference_count) = redact_secrets(&text);
                let (out, count) = redact_secrets_in(DlpMode::Extended, &text);
                let findings = extended_findings(&reference);
                prop_assert_eq!(count, reference_count + findings.len());
                if findings.is_empty() {
                    prop_assert_eq!(out, reference);
                }
            }

            #[test]
            fn nothing_matched_means_nothing_changed(text in any::<String>()) {
                let (out, count) = redact_text(&text, None);
                if count == 0 {
                    prop_assert_eq!(out, text);
                } else {
                    prop_assert!(out.contains(REDACTED));
                }
            }

            #[test]
            fn any_input_and_home_never_panic_and_are_deterministic(text in any::<String>(), home in any::<String>()) {
                let (out, _) = redact_text(&text, Some(&home));
                let (again, _) = redact_text(&text, Some(&home));
                prop_assert_eq!(out, again);
            }
        }
    }
}
