//! A temporary project with an embedded store, and helpers to call tools in it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bernstein_journal::crypto::sha256_hex;
use bernstein_journal::key::AuditKey;
use bernstein_tasks::embedded::EmbeddedStore;
use bernstein_tools::{
    Backend, Catalogue, ProgressSink, ProgressTick, Tier, ToolConfig, ToolContext, ToolOutcome,
};
use serde_json::Value;
use tempfile::TempDir;

/// The audit key every test project uses.
pub(crate) fn audit_key() -> AuditKey {
    AuditKey::from_master_bytes(
        b"4f1c0e2d9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d".to_vec(),
    )
}

/// The standard configuration with the meter on or off.
pub(crate) fn config(cost_meter: bool) -> ToolConfig {
    ToolConfig {
        cost_meter,
        ..ToolConfig::default()
    }
}

/// A project directory with `.sdd/`, an embedded store and a catalogue.
pub(crate) struct Project {
    pub(crate) dir: TempDir,
    pub(crate) catalogue: Catalogue,
    pub(crate) ctx: ToolContext,
    pub(crate) ticks: Arc<Mutex<Vec<ProgressTick>>>,
}

impl Project {
    pub(crate) fn new(config: ToolConfig) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), Some(audit_key())).unwrap();
        let backend = Backend::embedded(store, audit_key());
        let mut ctx = ToolContext::new(dir.path(), Arc::new(backend));
        ctx.meta.call_id = "0af4fa795b5c839a".to_owned();
        Project {
            dir,
            catalogue: Catalogue::new(&config).unwrap(),
            ctx,
            ticks: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Calls `name`, checking that a structured tool's content matches its declared output
    /// schema and that the structured content is the text parsed.
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> ToolOutcome {
        self.call_with(&self.ctx, name, arguments).await
    }

    pub(crate) async fn call_with(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: Value,
    ) -> ToolOutcome {
        let outcome = self.catalogue.call(ctx, name, arguments).await;
        if let (false, Some(spec), Some(structured)) = (
            outcome.cancelled,
            self.catalogue.spec(name),
            &outcome.structured,
        ) {
            let schema = spec.output_schema.as_ref().unwrap();
            let validator = jsonschema::draft7::new(schema).unwrap();
            let problems: Vec<String> = validator
                .iter_errors(structured)
                .map(|e| e.to_string())
                .collect();
            assert!(
                problems.is_empty(),
                "{name}: {problems:?}\n{}",
                outcome.text
            );
        }
        outcome
    }

    /// A context that records progress ticks and carries `token`.
    pub(crate) fn ctx_with_progress(&self, token: Value) -> ToolContext {
        let mut ctx = self.ctx.clone();
        ctx.meta.progress_token = Some(token);
        let ticks = Arc::clone(&self.ticks);
        let sink: ProgressSink = Arc::new(move |tick| ticks.lock().unwrap().push(tick));
        ctx.progress = Some(sink);
        ctx
    }

    /// Every file under `.sdd/` with the SHA-256 of its bytes.
    pub(crate) fn sdd_files(&self) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        walk(&self.root().join(".sdd"), self.root(), &mut files);
        files
    }
}

fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.insert(
                path.strip_prefix(root).unwrap().display().to_string() + "/",
                String::new(),
            );
            walk(&path, root, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.insert(
                path.strip_prefix(root).unwrap().display().to_string(),
                sha256_hex(&bytes),
            );
        }
    }
}

/// The payload of an outcome: the text parsed, unwrapped from the meter envelope.
pub(crate) fn payload(outcome: &ToolOutcome) -> Value {
    let value: Value = serde_json::from_str(&outcome.text)
        .unwrap_or_else(|_| panic!("not JSON: {}", outcome.text));
    match value.get("_meter") {
        Some(_) => value["result"].clone(),
        None => value,
    }
}

/// All tiers, for listing tests.
pub(crate) const TIERS: [Tier; 3] = [Tier::Core, Tier::Standard, Tier::All];
