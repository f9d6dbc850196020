//! Where requests go: the task server's base URL, percent-encoded path segments and query
//! strings.
//!
//! The base URL is checked once, when the backend is built, so a typo fails at start-up rather
//! than on the first tool call. Only `http://` is accepted: this crate carries no TLS stack, and
//! silently sending a bearer token in clear to a URL that says `https://` would be worse than
//! refusing it.
//!
//! Every caller-supplied value that lands in a URL goes through [`encode_component`], which keeps
//! only RFC 3986 unreserved characters (plus `:` in path segments, which `pchar` allows and which
//! the task-id alphabet contains) and escapes every other byte. Ids are also validated before any
//! request is built (see [`crate::model::TaskId`]), so `..`, `/` and control characters can never
//! reach a path even in escaped form.

use std::fmt::Write as _;

/// Why a base URL was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BaseUrlProblem {
    /// `https://`: there is no TLS stack to speak it with.
    Https,
    /// A scheme other than `http`.
    Scheme,
    /// No `scheme://` prefix at all.
    NoScheme,
    /// The host part is missing or malformed.
    Host,
    /// The port is not a number from 1 to 65535.
    Port,
    /// `user:password@` in the authority: credentials belong in the bearer token.
    UserInfo,
    /// A `?query` or `#fragment` that would be glued onto every route.
    QueryOrFragment,
    /// A path prefix with characters that would need escaping.
    Path,
}

impl BaseUrlProblem {
    /// The refusal, as a sentence fragment that follows the quoted URL.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            BaseUrlProblem::Https => {
                "https is not supported: bernstein-mcp has no TLS stack, so use an http:// URL \
                 (the task server normally listens on loopback) or a local TLS-terminating proxy"
            }
            BaseUrlProblem::Scheme => "only http:// task-server URLs are supported",
            BaseUrlProblem::NoScheme => "expected an absolute URL such as http://127.0.0.1:8052",
            BaseUrlProblem::Host => "the host is missing or malformed",
            BaseUrlProblem::Port => "the port must be a number from 1 to 65535",
            BaseUrlProblem::UserInfo => {
                "credentials in the URL are not supported; pass the bearer token instead"
            }
            BaseUrlProblem::QueryOrFragment => "the URL must not carry a query or a fragment",
            BaseUrlProblem::Path => {
                "the path prefix may only contain letters, digits and - . _ ~ / characters"
            }
        }
    }
}

/// A validated `http://host[:port][/prefix]` task-server address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseUrl {
    /// `host` or `host:port`, as written (IPv6 literals keep their brackets).
    authority: String,
    /// A path prefix without a trailing slash (empty for the server root).
    prefix: String,
}

impl BaseUrl {
    /// Checks `text` and splits it into authority and path prefix.
    pub(crate) fn parse(text: &str) -> Result<BaseUrl, BaseUrlProblem> {
        let text = text.trim();
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(BaseUrlProblem::NoScheme);
        };
        if scheme.eq_ignore_ascii_case("https") {
            return Err(BaseUrlProblem::Https);
        }
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(BaseUrlProblem::Scheme);
        }
        if rest.contains(['?', '#']) {
            return Err(BaseUrlProblem::QueryOrFragment);
        }
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(BaseUrlProblem::UserInfo);
        }
        check_authority(authority)?;
        let prefix = path.trim_end_matches('/');
        if !prefix.bytes().all(|b| is_unreserved(b) || b == b'/') || prefix.contains("//") {
            return Err(BaseUrlProblem::Path);
        }
        if prefix
            .split('/')
            .any(|segment| segment == "." || segment == "..")
        {
            return Err(BaseUrlProblem::Path);
        }
        Ok(BaseUrl {
            authority: authority.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// The absolute URL of `target` (a path starting with `/`, possibly with a query).
    pub(crate) fn join(&self, target: &str) -> String {
        format!("http://{}{}{}", self.authority, self.prefix, target)
    }

    /// The base URL as normalised text (no trailing slash).
    pub(crate) fn as_text(&self) -> String {
        format!("http://{}{}", self.authority, self.prefix)
    }
}

fn check_authority(authority: &str) -> Result<(), BaseUrlProblem> {
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        // An IPv6 literal: `[addr]` or `[addr]:port`.
        let Some((address, after)) = inner.split_once(']') else {
            return Err(BaseUrlProblem::Host);
        };
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(BaseUrlProblem::Host);
        }
        match after {
            "" => (address, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (address, Some(port)),
                None => return Err(BaseUrlProblem::Host),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(BaseUrlProblem::Host);
    }
    if !authority.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(BaseUrlProblem::Host);
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|n| (1..=65_535).contains(&n));
        if !valid {
            return Err(BaseUrlProblem::Port);
        }
    }
    Ok(())
}

/// RFC 3986 `unreserved`: the bytes that never need escaping anywhere in a URL.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// Where an encoded value goes; path segments may keep `:` literally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Component {
    /// One path segment.
    PathSegment,
    /// A query-string name or value.
    Query,
}

/// Percent-encodes `value` for `component`: unreserved bytes (and `:` in a path segment) stay,
/// every other byte becomes `%XX` with upper-case hex.
pub(crate) fn encode_component(value: &str, component: Component) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        let keep = is_unreserved(byte) || (component == Component::PathSegment && byte == b':');
        if keep {
            out.push(char::from(byte));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// A request target: a path built from literal and encoded segments, plus a query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Target {
    path: String,
    query: Vec<(String, String)>,
}

impl Target {
    /// The target `/<literal>` (the literal is a route name such as `tasks`, never caller data).
    pub(crate) fn route(literal: &'static str) -> Target {
        Target {
            path: format!("/{literal}"),
            query: Vec::new(),
        }
    }

    /// Appends a literal route segment.
    pub(crate) fn then(mut self, literal: &'static str) -> Target {
        self.path.push('/');
        self.path.push_str(literal);
        self
    }

    /// Appends a caller-supplied segment, percent-encoded.
    pub(crate) fn segment(mut self, value: &str) -> Target {
        self.path.push('/');
        self.path
            .push_str(&encode_component(value, Component::PathSegment));
        self
    }

    /// Appends `name=value` to the query string.
    pub(crate) fn query(mut self, name: &'static str, value: impl Into<String>) -> Target {
        self.query.push((name.to_owned(), value.into()));
        self
    }

    /// Appends `name=value` when `value` is present.
    pub(crate) fn query_opt(self, name: &'static str, value: Option<impl Into<String>>) -> Target {
        match value {
            Some(value) => self.query(name, value),
            None => self,
        }
    }

    /// The path and query as they go on the request line.
    pub(crate) fn render(&self) -> String {
        let mut out = self.path.clone();
        for (index, (name, value)) in self.query.iter().enumerate() {
            out.push(if index == 0 { '?' } else { '&' });
            out.push_str(&encode_component(name, Component::Query));
            out.push('=');
            out.push_str(&encode_component(value, Component::Query));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check_base(text: &str, expect: Result<&str, BaseUrlProblem>) {
        let got = BaseUrl::parse(text).map(|base| base.as_text());
        assert_eq!(got.as_deref().map_err(Clone::clone), expect, "{text:?}");
    }

    #[test]
    fn base_urls() {
        check_base("http://127.0.0.1:8052", Ok("http://127.0.0.1:8052"));
        check_base("http://127.0.0.1:8052/", Ok("http://127.0.0.1:8052"));
        check_base("HTTP://localhost", Ok("http://localhost"));
        check_base("http://[::1]:8052", Ok("http://[::1]:8052"));
        check_base("http://[::1]", Ok("http://[::1]"));
        check_base(
            "http://tasks.internal/api/v1/",
            Ok("http://tasks.internal/api/v1"),
        );
        check_base("  http://h:1  ", Ok("http://h:1"));
        check_base("https://127.0.0.1:8052", Err(BaseUrlProblem::Https));
        check_base("ftp://h", Err(BaseUrlProblem::Scheme));
        check_base("127.0.0.1:8052", Err(BaseUrlProblem::NoScheme));
        check_base("http://", Err(BaseUrlProblem::Host));
        check_base("http://:8052", Err(BaseUrlProblem::Host));
        check_base("http://h o", Err(BaseUrlProblem::Host));
        check_base("http://[::1", Err(BaseUrlProblem::Host));
        check_base("http://[zz]:1", Err(BaseUrlProblem::Host));
        check_base("http://[::1]x", Err(BaseUrlProblem::Host));
        check_base("http://h:0", Err(BaseUrlProblem::Port));
        check_base("http://h:65536", Err(BaseUrlProblem::Port));
        check_base("http://h:", Err(BaseUrlProblem::Port));
        check_base("http://h:8a", Err(BaseUrlProblem::Port));
        check_base("http://u:p@h", Err(BaseUrlProblem::UserInfo));
        check_base("http://h/?x=1", Err(BaseUrlProblem::QueryOrFragment));
        check_base("http://h#f", Err(BaseUrlProblem::QueryOrFragment));
        check_base("http://h/a b", Err(BaseUrlProblem::Path));
        check_base("http://h/a//b", Err(BaseUrlProblem::Path));
        check_base("http://h/a/../b", Err(BaseUrlProblem::Path));
    }

    #[test]
    fn targets_render_with_escaping() {
        let target = Target::route("tasks")
            .segment("55ad7026909d")
            .then("claim")
            .query_opt("expected_version", Some("2"))
            .query_opt("claimed_by_session", None::<String>)
            .query("x", "a b&c=d/é");
        assert_eq!(
            target.render(),
            "/tasks/55ad7026909d/claim?expected_version=2&x=a%20b%26c%3Dd%2F%C3%A9"
        );
        assert_eq!(
            Target::route("tasks")
                .segment("orch:1")
                .segment("a/..")
                .render(),
            "/tasks/orch:1/a%2F.."
        );
    }

    #[test]
    fn join_keeps_the_prefix() {
        let base = BaseUrl::parse("http://h:1/api/").unwrap();
        assert_eq!(
            base.join("/tasks?status=open"),
            "http://h:1/api/tasks?status=open"
        );
    }

    proptest! {
        #[test]
        fn encoded_components_never_carry_separators(value in any::<String>()) {
            for component in [Component::PathSegment, Component::Query] {
                let encoded = encode_component(&value, component);
                prop_assert!(encoded.bytes().all(|b| b.is_ascii_graphic()));
                prop_assert!(!encoded.contains(['/', '?', '#', '&', '=', ' ']));
            }
        }

        #[test]
        fn encoding_round_trips(value in any::<String>()) {
            let encoded = encode_component(&value, Component::Query);
            let mut bytes = Vec::new();
            let raw = encoded.as_bytes();
            let mut index = 0;
            while index < raw.len() {
                if raw[index] == b'%' {
                    let hex = std::str::from_utf8(&raw[index + 1..index + 3]).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    index += 3;
                } else {
                    bytes.push(raw[index]);
                    index += 1;
                }
            }
            prop_assert_eq!(String::from_utf8(bytes).unwrap(), value);
        }
    }
}
