//! DLP redaction for mailbox bodies: Bernstein 3.23's `redact_text`, with Python `re` semantics.
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

/// Everything step 2 and step 3 need besides the text: the home directory and the values
/// registered with the secrets broker.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedactionContext<'a> {
    /// The home directory to collapse to `~` (`None` skips the step).
    pub home: Option<&'a str>,
    /// Values registered with the secrets broker (empty in a fresh process).
    pub secrets: &'a [String],
}

impl RedactionContext<'_> {
    /// Runs all three steps; returns the redacted text and the number of redactions.
    pub fn redact(&self, text: &str) -> (String, usize) {
        redact_text_with_secrets(text, self.home, self.secrets)
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
