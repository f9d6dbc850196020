//! Agent Cards: the public keys lineage signatures are checked against, keyed by
//! `(agent_id, kid)` (the reference's `core/lineage/gate._load_cards`).
//!
//! On disk a card is `<cards_dir>/<agent-id>/card.json` (one key per agent) or
//! `<cards_dir>/<agent-id>/<kid>/card.json` (several keys after a rotation), holding
//! `{agent_id, kid, public_key_pem[, protocolVersion]}`. The card's own fields name it, not the
//! directories. Two different cards claiming one `(agent_id, kid)` are a conflict: the first is
//! kept and the conflict is reported, never silently resolved by read order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::Value;

use crate::identity::PublicKey;
use crate::run_journal::python_str_repr;
use crate::{Error, Result};

/// The protocol version a card declares when it names none.
pub const DEFAULT_PROTOCOL_VERSION: &str = "a2a/1.0";

/// The slice of an A2A Agent Card lineage verification needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCard {
    /// The agent, e.g. `agent:worker-a`.
    pub agent_id: String,
    /// The key id the agent signs under.
    pub kid: String,
    /// The SPKI PEM of the Ed25519 public key.
    pub public_key_pem: String,
    /// The card's protocol version.
    pub protocol_version: String,
    key: PublicKey,
}

impl AgentCard {
    /// A card for `agent_id` signing under `kid` with the public key `public_key_pem`.
    ///
    /// # Errors
    ///
    /// [`Error::SigningKeyMalformed`] when the PEM is not an Ed25519 SPKI public key.
    pub fn new(agent_id: &str, kid: &str, public_key_pem: &str) -> Result<AgentCard> {
        Ok(AgentCard {
            agent_id: agent_id.to_owned(),
            kid: kid.to_owned(),
            public_key_pem: public_key_pem.to_owned(),
            protocol_version: DEFAULT_PROTOCOL_VERSION.to_owned(),
            key: PublicKey::from_spki_pem(public_key_pem)?,
        })
    }

    /// The parsed public key.
    pub fn public_key(&self) -> &PublicKey {
        &self.key
    }
}

/// A set of Agent Cards with the conflicts found while collecting them.
#[derive(Debug, Clone, Default)]
pub struct AgentCards {
    cards: BTreeMap<(String, String), AgentCard>,
    conflicts: Vec<String>,
}

impl AgentCards {
    /// No card.
    pub fn new() -> AgentCards {
        AgentCards::default()
    }

    /// Adds a card. A second, different card for the same `(agent_id, kid)` is recorded as a
    /// conflict and not added; an identical one is accepted.
    pub fn insert(&mut self, card: AgentCard) {
        let key = (card.agent_id.clone(), card.kid.clone());
        match self.cards.get(&key) {
            Some(existing) if *existing != card => self.conflicts.push(format!(
                "conflicting agent cards for (agent_id={}, kid={}): two on-disk cards map to the same identity with different contents",
                python_str_repr(&card.agent_id),
                python_str_repr(&card.kid)
            )),
            Some(_) => {}
            None => {
                self.cards.insert(key, card);
            }
        }
    }

    /// The card for `(agent_id, kid)`.
    pub fn get(&self, agent_id: &str, kid: &str) -> Option<&AgentCard> {
        self.cards.get(&(agent_id.to_owned(), kid.to_owned()))
    }

    /// Conflicts found while inserting.
    pub fn conflicts(&self) -> &[String] {
        &self.conflicts
    }

    /// Number of distinct cards.
    pub fn len(&self) -> usize {
        self.cards.len()
    }

    /// Whether there is no card.
    pub fn is_empty(&self) -> bool {
        self.cards.is_empty()
    }

    /// Loads every card under `cards_dir` (normally `<project>/.sdd/agents`): first the
    /// `<agent-id>/card.json` layout, then `<agent-id>/<kid>/card.json`, each in name order.
    /// Files that do not parse or lack a string field are skipped, as in the reference; a
    /// missing directory holds no card.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when an existing directory cannot be listed.
    pub fn load_dir(cards_dir: &Path) -> Result<AgentCards> {
        let mut cards = AgentCards::new();
        if !cards_dir.is_dir() {
            return Ok(cards);
        }
        let agents = sorted_subdirs(cards_dir)?;
        let mut files: Vec<PathBuf> = agents.iter().map(|dir| dir.join("card.json")).collect();
        for agent in &agents {
            files.extend(
                sorted_subdirs(agent)?
                    .into_iter()
                    .map(|dir| dir.join("card.json")),
            );
        }
        for file in files {
            if let Some(card) = read_card(&file) {
                cards.insert(card);
            }
        }
        Ok(cards)
    }
}

fn sorted_subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let listing = std::fs::read_dir(dir).map_err(|err| Error::io("list", dir, err))?;
    let mut dirs = Vec::new();
    for entry in listing {
        let path = entry.map_err(|err| Error::io("list", dir, err))?.path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

fn read_card(file: &Path) -> Option<AgentCard> {
    let text = std::fs::read_to_string(file).ok()?;
    let value = Value::parse(&text).ok()?;
    let object = value.as_object()?;
    let field = |name: &str| object.get(name).and_then(Value::as_str);
    let mut card =
        AgentCard::new(field("agent_id")?, field("kid")?, field("public_key_pem")?).ok()?;
    if let Some(version) = object.get("protocolVersion") {
        card.protocol_version = crate::audit::python_str(version);
    }
    Some(card)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::SigningIdentity;

    fn pem(seed: u8) -> String {
        SigningIdentity::from_seed(&[seed; 32])
            .unwrap()
            .public_key_pem()
            .to_owned()
    }

    #[test]
    fn both_layouts_load_and_conflicts_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, agent: &str, kid: &str, key: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let body = bernstein_protocol::pyjson::Object::new()
                .with("agent_id", agent)
                .with("kid", kid)
                .with("public_key_pem", key);
            std::fs::write(
                path,
                Value::Object(body).dumps(bernstein_protocol::pyjson::Dialect::PY_SPACED),
            )
            .unwrap();
        };
        write("a/card.json", "agent:a", "k1", &pem(1));
        write("a/k2/card.json", "agent:a", "k2", &pem(2));
        write("b/card.json", "agent:a", "k1", &pem(3));
        write("c/card.json", "agent:c", "k", "not a pem");
        let cards = AgentCards::load_dir(dir.path()).unwrap();
        assert_eq!(cards.len(), 2);
        assert_eq!(cards.get("agent:a", "k1").unwrap().public_key_pem, pem(1));
        assert!(cards.get("agent:a", "k2").is_some());
        assert_eq!(cards.conflicts().len(), 1);
        assert!(
            AgentCards::load_dir(&dir.path().join("missing"))
                .unwrap()
                .is_empty()
        );
    }
}
