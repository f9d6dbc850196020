//! The runtime capability card (`bernstein://capability`): how this server is actually running.
//!
//! The card is rebuilt from the dispatcher's live configuration on every read: reachable
//! transports, configured auth modes (including the OAuth discovery state under `auth.oauth`),
//! the active tool tier and what each tier serves, the cost-meter state, the spec revision the
//! request is served under, the prompt catalogue, and (beyond the reference) whether `workdir`
//! arguments are confined to the served root and the operator's `--allow-root` roots. Its text is `json.dumps(card,
//! sort_keys=True)` (PY-SPACED), the shape the reference publishes
//! (`transcripts/capability_card_stdio.pretty.json`).

use bernstein_journal::crypto::sha256_hex;
use bernstein_protocol::pyjson::{Dialect, Object, Value as PyValue};

use crate::prompts::PROMPT_NAMES;

/// Who the server says it is (`serverInfo`, card `name`/`version`/`repo_url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    /// `serverInfo.name` and card `name`.
    pub name: String,
    /// `serverInfo.version` and card `version`.
    pub version: String,
    /// Card `repo_url`.
    pub repo_url: String,
}

impl Default for ServerIdentity {
    /// This server's own identity: the name `bernstein`, which hosts key their configuration
    /// and tool-name prefixes on (renaming it would orphan existing host setups), and this
    /// crate's version, not the version of the Python package whose surface it implements.
    fn default() -> ServerIdentity {
        ServerIdentity {
            name: "bernstein".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            repo_url: "https://github.com/sipyourdrink-ltd/bernstein".to_owned(),
        }
    }
}

/// One transport the server can be reached on, as the card lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportInfo {
    /// Newline-delimited JSON-RPC on a process's stdin/stdout.
    Stdio {
        /// The command line that starts it.
        command: String,
        /// Whether it is the default transport.
        default: bool,
    },
    /// The SSE transport.
    Sse {
        /// The command line that starts it.
        command: String,
        /// Whether it is the default transport.
        default: bool,
    },
    /// Stateless streamable HTTP.
    Http {
        /// The endpoint path (`/mcp`).
        path: String,
        /// Whether it is the default transport.
        default: bool,
    },
}

impl TransportInfo {
    fn to_card(&self) -> PyValue {
        let object = match self {
            TransportInfo::Stdio { command, default } => Object::new()
                .with("type", "stdio")
                .with("default", *default)
                .with("streaming", false)
                .with("command", command.as_str()),
            TransportInfo::Sse { command, default } => Object::new()
                .with("type", "sse")
                .with("default", *default)
                .with("streaming", true)
                .with("command", command.as_str()),
            TransportInfo::Http { path, default } => Object::new()
                .with("type", "http")
                .with("default", *default)
                .with("streaming", true)
                .with("path", path.as_str())
                .with("cancellable", true),
        };
        PyValue::Object(object)
    }
}

/// How clients authenticate, as far as the card reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthPosture {
    /// Whether a static bearer token is configured.
    pub bearer_token_configured: bool,
    /// The OAuth issuer the protected-resource document points at, when one is configured.
    pub oauth_issuer: Option<String>,
}

/// The environment variable that configures the OAuth issuer.
pub const OAUTH_ISSUER_ENV: &str = "BERNSTEIN_MCP_OAUTH_ISSUER";
/// The well-known path of the protected-resource metadata document.
pub const PROTECTED_RESOURCE_PATH: &str = "/.well-known/oauth-protected-resource";

/// Everything the card is built from.
#[derive(Debug, Clone)]
pub struct CardInputs<'a> {
    /// The server identity.
    pub identity: &'a ServerIdentity,
    /// The spec revision the request is served under.
    pub spec_revision: &'a str,
    /// Reachable transports.
    pub transports: &'a [TransportInfo],
    /// Auth configuration.
    pub auth: &'a AuthPosture,
    /// The active tier's name.
    pub active_tier: &'a str,
    /// The tool names `tools/list` advertises now.
    pub advertised: Vec<String>,
    /// Every tier's name and tool names, smallest tier first.
    pub tiers: Vec<(String, Vec<String>)>,
    /// Whether results carry the `_meter` envelope.
    pub cost_meter: bool,
    /// Whether `workdir` arguments are confined to the served root and the operator's roots.
    pub workdir_confined: bool,
}

/// The flag that lists a root a confined `workdir` may name besides the served one.
pub const ALLOW_ROOT_FLAG: &str = "--allow-root";
/// The environment variable with the same roots, `:`-separated.
pub const ALLOW_ROOTS_ENV: &str = "BERNSTEIN_MCP_ALLOW_ROOTS";

/// The card's `workdir` section: whether a tool's `workdir` argument may name any directory on
/// the host or only the served root and the operator's roots. The roots themselves are not
/// listed, so the card does not tell a remote client how the host is laid out.
fn workdir_section(confined: bool) -> Object {
    let scope = if confined {
        "served-root-and-allowed-roots"
    } else {
        "any-project-root"
    };
    Object::new()
        .with("confined", confined)
        .with("scope", scope)
        .with("allowRootFlag", ALLOW_ROOT_FLAG)
        .with("envVar", ALLOW_ROOTS_ENV)
        .with("containment", "always")
}

/// The card as a Python-JSON object.
pub fn capability_card(inputs: &CardInputs<'_>) -> PyValue {
    let sorted = |names: &[String]| {
        let mut names = names.to_vec();
        names.sort();
        names
    };
    let issuer = inputs.auth.oauth_issuer.clone().unwrap_or_default();
    let oauth_enabled = !issuer.is_empty();
    let (supported, planned): (Vec<&str>, Vec<&str>) = if oauth_enabled {
        (vec!["anonymous", "bearer", "oauth2_pkce"], vec!["oidc"])
    } else {
        (vec!["anonymous", "bearer"], vec!["oauth2_pkce", "oidc"])
    };
    let auth = Object::new()
        .with("supported", supported)
        .with("planned", planned)
        .with(
            "bearer_token_configured",
            inputs.auth.bearer_token_configured,
        )
        .with("anonymous_scope", "loopback-only")
        .with(
            "oauth",
            Object::new()
                .with("enabled", oauth_enabled)
                .with("issuer", issuer)
                .with("protectedResourceMetadata", PROTECTED_RESOURCE_PATH)
                .with("envVar", OAUTH_ISSUER_ENV),
        );
    let mut tiers = Object::new();
    for (name, tools) in &inputs.tiers {
        tiers.insert(name.clone(), sorted(tools));
    }
    let tools = Object::new()
        .with("activeTier", inputs.active_tier)
        .with("tierEnvVar", "BERNSTEIN_MCP_TOOL_TIER")
        .with("advertised", sorted(&inputs.advertised))
        .with("tiers", tiers);
    let card = Object::new()
        .with("name", inputs.identity.name.as_str())
        .with("version", inputs.identity.version.as_str())
        .with("repo_url", inputs.identity.repo_url.as_str())
        .with("specRevision", inputs.spec_revision)
        .with(
            "transports",
            PyValue::Array(
                inputs
                    .transports
                    .iter()
                    .map(TransportInfo::to_card)
                    .collect(),
            ),
        )
        .with("auth", auth)
        .with("tools", tools)
        .with(
            "prompts",
            Object::new()
                .with("supported", true)
                .with("catalogue", PROMPT_NAMES.to_vec()),
        )
        .with(
            "costMeter",
            Object::new()
                .with("enabled", inputs.cost_meter)
                .with("envVar", "BERNSTEIN_MCP_COST_METER")
                .with("envelopeKeys", vec!["result", "_meter"]),
        )
        .with(
            "observability",
            Object::new().with("perCallMeter", inputs.cost_meter).with(
                "fields",
                vec!["latency_ms", "cost_usd", "call_id", "ok", "ts"],
            ),
        )
        .with(
            "toolSurface",
            tool_surface_receipt(inputs.auth.bearer_token_configured),
        )
        .with("workdir", workdir_section(inputs.workdir_confined));
    PyValue::Object(card)
}

/// The card's resource text: `json.dumps(card, sort_keys=True)`.
pub fn capability_card_text(inputs: &CardInputs<'_>) -> String {
    capability_card(inputs).dumps(Dialect::PY_SPACED)
}

/// The tool-surface risk receipt: the server exposes no risky capability triple and forces no
/// approval; its class depends only on whether a bearer token guards it. `receipt_hash` is the
/// SHA-256 of the sorted compact JSON of every other field.
pub fn tool_surface_receipt(bearer_token_configured: bool) -> Object {
    let (risk_class, auth_posture) = if bearer_token_configured {
        ("MINIMAL", "bearer")
    } else {
        ("LOW", "anonymous")
    };
    let body = Object::new()
        .with("server_id", "bernstein")
        .with("risk_class", risk_class)
        .with("has_risky_triple", false)
        .with("forced_approval", false)
        .with(
            "risk_factors",
            Object::new()
                .with("egress_channel", false)
                .with("sensitive_reach", false)
                .with("untrusted_input", false)
                .with("wildcard_permissions", false),
        )
        .with("auth_posture", auth_posture);
    let hash = sha256_hex(
        PyValue::Object(body.clone())
            .dumps(Dialect::PY_COMPACT_ASCII)
            .as_bytes(),
    );
    body.with("receipt_hash", hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_hashes_match_the_reference_vectors() {
        let hash = |bearer| {
            tool_surface_receipt(bearer)
                .get("receipt_hash")
                .and_then(PyValue::as_str)
                .unwrap()
                .to_owned()
        };
        assert_eq!(
            hash(false),
            "7d53f6d2a87e3646b0e9a995cfdc4805d8a9d39ccbf76e31e1327c66090fcf4a"
        );
        assert_eq!(
            hash(true),
            "446cd9e5a131f04209dc0c5fd4ce179eec2d1fa8f2f56652e7e58a35704dec78"
        );
    }

    #[test]
    fn oauth_issuer_moves_pkce_from_planned_to_supported() {
        let identity = ServerIdentity::default();
        let auth = AuthPosture {
            bearer_token_configured: true,
            oauth_issuer: Some("https://idp.example.com".to_owned()),
        };
        let inputs = CardInputs {
            identity: &identity,
            spec_revision: "2026-07-28",
            transports: &[],
            auth: &auth,
            active_tier: "core",
            advertised: vec![],
            tiers: vec![],
            cost_meter: false,
            workdir_confined: false,
        };
        let card = capability_card(&inputs);
        let auth = card
            .as_object()
            .unwrap()
            .get("auth")
            .unwrap()
            .dumps(Dialect::PY_COMPACT_ASCII);
        assert!(
            auth.contains("\"supported\":[\"anonymous\",\"bearer\",\"oauth2_pkce\"]"),
            "{auth}"
        );
        assert!(
            auth.contains("\"issuer\":\"https://idp.example.com\""),
            "{auth}"
        );
        assert!(auth.contains("\"enabled\":true"), "{auth}");
    }
}
