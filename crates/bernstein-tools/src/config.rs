//! What the binary decides before the catalogue is built: tier, aliases, meter, validation mode
//! and whether the lineage tool is served.
//!
//! This crate reads no environment variable. The binary reads `BERNSTEIN_MCP_TOOL_TIER` (or the
//! `--mcp-tier` flag), `BERNSTEIN_MCP_DEPRECATED_ALIASES`, `BERNSTEIN_MCP_COST_METER`,
//! `BERNSTEIN_MCP_VALIDATION` and `BERNSTEIN_LINEAGE_MCP_ENABLED` and hands the raw values to the
//! parsers here, so every surface interprets them the same way.

use bernstein_protocol::pyrepr::python_str_repr;

use crate::error::Error;

/// The values that switch a toggle off (trimmed, lower-cased), as the reference's toggles read
/// them.
const OFF_VALUES: [&str; 4] = ["0", "false", "no", "off"];

/// A tool tier. Tiers are cumulative: core ⊂ standard ⊂ all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Tier {
    /// `bernstein_run`, `bernstein_status`, `bernstein_run_status`.
    Core,
    /// Core plus the worker loop, the gates, capsules, skills and shutdown (the default).
    #[default]
    Standard,
    /// Standard plus `bernstein_scenario` and `bernstein_verify_lineage`.
    All,
}

impl Tier {
    /// The tier's name as written on the command line and in the capability card.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Core => "core",
            Tier::Standard => "standard",
            Tier::All => "all",
        }
    }

    /// Parses a tier name the way the reference's `normalize_tier` does: trimmed and
    /// lower-cased; a blank value is the default tier.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTier`] for any other value, with the reference's message
    /// (`Unknown MCP tool tier '<value>'. Valid tiers: core, standard, all.`).
    pub fn parse(value: &str) -> Result<Tier, Error> {
        match value.trim().to_lowercase().as_str() {
            "" => Ok(Tier::default()),
            "core" => Ok(Tier::Core),
            "standard" => Ok(Tier::Standard),
            "all" => Ok(Tier::All),
            _ => Err(Error::UnknownTier {
                value_repr: python_str_repr(value),
            }),
        }
    }

    /// Resolves the active tier from the `--mcp-tier` flag and the `BERNSTEIN_MCP_TOOL_TIER`
    /// value: a non-blank flag wins, then the environment value, then the default.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownTier`] when the chosen value is not a tier.
    pub fn resolve(flag: Option<&str>, env: Option<&str>) -> Result<Tier, Error> {
        match (flag, env) {
            (Some(flag), _) if !flag.trim().is_empty() => Tier::parse(flag),
            (_, Some(env)) => Tier::parse(env),
            _ => Ok(Tier::default()),
        }
    }

    /// Every tier, smallest first.
    pub const ALL: [Tier; 3] = [Tier::Core, Tier::Standard, Tier::All];
}

/// What happens when a call fails the input firewall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validation {
    /// The call is refused with the structured validation error (the default).
    #[default]
    Strict,
    /// The failure is logged as a warning and the call goes ahead; the journal and path
    /// barriers of the handlers still apply.
    Permissive,
}

impl Validation {
    /// Reads `BERNSTEIN_MCP_VALIDATION`: `permissive` (trimmed, any case) demotes failures;
    /// anything else, or nothing, is strict.
    pub fn from_setting(value: Option<&str>) -> Validation {
        match value {
            Some(v) if v.trim().eq_ignore_ascii_case("permissive") => Validation::Permissive,
            _ => Validation::Strict,
        }
    }
}

/// Reads an on-by-default toggle (`BERNSTEIN_MCP_COST_METER`,
/// `BERNSTEIN_MCP_DEPRECATED_ALIASES`): unset, empty or anything else is on; `0`, `false`, `no`,
/// `off` (trimmed, any case) is off.
pub fn toggle_enabled(value: Option<&str>) -> bool {
    match value {
        None => true,
        Some(v) => !OFF_VALUES.contains(&v.trim().to_lowercase().as_str()),
    }
}

/// Reads `BERNSTEIN_LINEAGE_MCP_ENABLED`: unset gives `default` (on for stdio, off for the HTTP
/// transports); an empty value or `0`, `false`, `no`, `off` is off; anything else is on.
pub fn lineage_enabled(value: Option<&str>, default: bool) -> bool {
    match value {
        None => default,
        Some(v) => {
            let v = v.trim().to_lowercase();
            !(v.is_empty() || OFF_VALUES.contains(&v.as_str()))
        }
    }
}

/// How the catalogue is built and how every call is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolConfig {
    /// Which tools are advertised and callable.
    pub tier: Tier,
    /// Whether the deprecated aliases are callable (never advertised).
    pub aliases_enabled: bool,
    /// Whether results are wrapped in the `{"result", "_meter"}` envelope.
    pub cost_meter: bool,
    /// What a firewall failure does.
    pub validation: Validation,
    /// Whether `bernstein_verify_lineage` (and its alias `verify_chain`) is registered.
    pub lineage_enabled: bool,
}

impl Default for ToolConfig {
    /// The stdio defaults: standard tier, aliases on, meter on, strict validation, lineage on.
    fn default() -> ToolConfig {
        ToolConfig {
            tier: Tier::Standard,
            aliases_enabled: true,
            cost_meter: true,
            validation: Validation::Strict,
            lineage_enabled: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_like_the_reference() {
        let check = |value: &str, expect: Result<Tier, &str>| {
            let got = Tier::parse(value).map_err(|e| e.to_string());
            assert_eq!(got, expect.map_err(str::to_owned), "{value:?}");
        };
        check("core", Ok(Tier::Core));
        check("  ALL ", Ok(Tier::All));
        check("", Ok(Tier::Standard));
        check("   ", Ok(Tier::Standard));
        check(
            "everything",
            Err("Unknown MCP tool tier 'everything'. Valid tiers: core, standard, all."),
        );
        check(
            " Bad ",
            Err("Unknown MCP tool tier ' Bad '. Valid tiers: core, standard, all."),
        );
    }

    #[test]
    fn flag_wins_over_environment() {
        assert_eq!(
            Tier::resolve(Some("core"), Some("all")).ok(),
            Some(Tier::Core)
        );
        assert_eq!(Tier::resolve(Some("  "), Some("all")).ok(), Some(Tier::All));
        assert_eq!(Tier::resolve(None, None).ok(), Some(Tier::Standard));
        assert!(Tier::resolve(None, Some("x")).is_err());
    }

    #[test]
    fn toggles() {
        for off in ["0", "false", " NO ", "Off"] {
            assert!(!toggle_enabled(Some(off)), "{off}");
        }
        for on in ["", "1", "yes", "anything"] {
            assert!(toggle_enabled(Some(on)), "{on}");
        }
        assert!(toggle_enabled(None));
        assert!(!lineage_enabled(Some(""), true));
        assert!(lineage_enabled(None, true));
        assert!(!lineage_enabled(None, false));
        assert!(lineage_enabled(Some("1"), false));
        assert_eq!(
            Validation::from_setting(Some(" Permissive ")),
            Validation::Permissive
        );
        assert_eq!(Validation::from_setting(Some("strict")), Validation::Strict);
        assert_eq!(Validation::from_setting(None), Validation::Strict);
    }
}
