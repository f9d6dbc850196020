//! What `tools/list` advertises per tier, and the schema files behind it.

use std::collections::BTreeSet;

use bernstein_journal::handle::render_indent2;
use bernstein_protocol::pyjson::Value as PyValue;
use bernstein_tools::{Catalogue, Tier, ToolConfig};

use crate::common::{TIERS, config};

fn listing(config: &ToolConfig) -> String {
    let catalogue = Catalogue::new(config).unwrap();
    let entries: Vec<PyValue> = catalogue
        .tools()
        .iter()
        .map(|spec| PyValue::Object(spec.to_list_entry()))
        .collect();
    render_indent2(&PyValue::Array(entries))
}

#[test]
fn tools_list_per_tier() {
    for tier in TIERS {
        let text = listing(&ToolConfig {
            tier,
            ..config(true)
        });
        insta::assert_snapshot!(format!("tools_list_{}", tier.as_str()), text);
    }
}

#[test]
fn tools_list_with_the_meter_off_declares_bare_payloads() {
    let text = listing(&ToolConfig {
        tier: Tier::Core,
        ..config(false)
    });
    insta::assert_snapshot!(text);
}

fn names(config: &ToolConfig) -> Vec<String> {
    Catalogue::new(config)
        .unwrap()
        .tools()
        .iter()
        .map(|t| t.name.clone())
        .collect()
}

#[test]
fn tiers_are_cumulative_and_in_registration_order() {
    let core = names(&ToolConfig {
        tier: Tier::Core,
        ..config(true)
    });
    assert_eq!(
        core,
        ["bernstein_run", "bernstein_status", "bernstein_run_status"]
    );
    let standard = names(&config(true));
    assert_eq!(
        standard,
        [
            "bernstein_run",
            "bernstein_subscribe",
            "bernstein_status",
            "bernstein_claim",
            "bernstein_create_task",
            "bernstein_post_message",
            "bernstein_post_artifact",
            "bernstein_cancel",
            "bernstein_shutdown_orchestrator",
            "bernstein_approve",
            "bernstein_complete",
            "bernstein_run_status",
            "bernstein_task_capsule",
            "load_skill"
        ]
    );
    let all = names(&ToolConfig {
        tier: Tier::All,
        ..config(true)
    });
    assert_eq!(&all[..14], &standard[..]);
    assert_eq!(
        &all[14..],
        ["bernstein_scenario", "bernstein_verify_lineage"]
    );
    let without_lineage = names(&ToolConfig {
        tier: Tier::All,
        lineage_enabled: false,
        ..config(true)
    });
    assert_eq!(
        without_lineage.last().map(String::as_str),
        Some("bernstein_scenario")
    );
}

#[test]
fn aliases_are_callable_never_listed_and_follow_their_replacement() {
    let core = Catalogue::new(&ToolConfig {
        tier: Tier::Core,
        ..config(true)
    })
    .unwrap();
    assert!(core.is_callable("bernstein_health"));
    assert!(core.is_callable("bernstein_task_handle"));
    assert!(!core.is_callable("bernstein_update"));
    assert!(!core.is_callable("bernstein_claim"));
    assert!(core.tools().iter().all(|t| t.name != "bernstein_health"));
    let off = Catalogue::new(&ToolConfig {
        aliases_enabled: false,
        ..config(true)
    })
    .unwrap();
    assert!(!off.is_callable("bernstein_health"));
    assert_eq!(
        off.registered_names().len(),
        off.tools().len(),
        "no alias is registered"
    );
    let all = Catalogue::new(&ToolConfig {
        tier: Tier::All,
        ..config(true)
    })
    .unwrap();
    assert_eq!(all.registered_names().len(), 16 + 11);
}

#[test]
fn every_tool_and_alias_has_a_valid_draft7_schema_file() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(
            jsonschema::draft7::meta::is_valid(&schema),
            "{stem} is not draft-07"
        );
        jsonschema::draft7::new(&schema).unwrap();
        assert_eq!(
            schema["$schema"], "http://json-schema.org/draft-07/schema#",
            "{stem}"
        );
        assert_eq!(schema["title"], stem.as_str(), "{stem}");
        assert_eq!(schema["type"], "object", "{stem}");
        assert_eq!(schema["additionalProperties"], false, "{stem}");
        let description = schema["description"].as_str().unwrap();
        assert!(
            description.contains("Host effects:"),
            "{stem} does not state its effects"
        );
        files.insert(stem);
    }
    let everything = Catalogue::new(&ToolConfig {
        tier: Tier::All,
        ..config(true)
    })
    .unwrap();
    let registered: BTreeSet<String> = everything.registered_names().iter().cloned().collect();
    assert_eq!(files, registered);
}

#[test]
fn descriptions_state_every_effect_they_have() {
    let everything = Catalogue::new(&ToolConfig {
        tier: Tier::All,
        ..config(true)
    })
    .unwrap();
    for spec in everything.tools() {
        let effects = spec
            .description
            .split("Host effects:")
            .nth(1)
            .unwrap_or_default();
        let writes = effects.contains("writes files");
        let network = effects.contains("makes network requests");
        let reads = effects.contains("reads files");
        assert!(writes || network || reads, "{}: {effects}", spec.name);
        // A tool the annotations call read-only must not claim to write.
        if spec.annotations.read_only {
            assert!(!writes, "{} is read-only but writes", spec.name);
        }
    }
}

#[test]
fn structured_tools_declare_their_envelope_and_task_support() {
    let catalogue = Catalogue::new(&config(true)).unwrap();
    for spec in catalogue.tools() {
        let output = spec.output_schema.as_ref().unwrap();
        let structured = [
            "bernstein_run",
            "bernstein_status",
            "bernstein_run_status",
            "bernstein_subscribe",
        ]
        .contains(&spec.name.as_str());
        if structured {
            assert_eq!(
                output["required"],
                serde_json::json!(["result", "_meter"]),
                "{}",
                spec.name
            );
        } else {
            assert_eq!(output["title"], format!("{}Output", spec.name));
        }
    }
    let task_support: Vec<(String, &str)> = catalogue
        .tools()
        .iter()
        .filter_map(|s| s.task_support.map(|t| (s.name.clone(), t.as_str())))
        .collect();
    assert_eq!(
        task_support,
        [
            ("bernstein_run".to_owned(), "optional"),
            ("bernstein_run_status".to_owned(), "forbidden")
        ]
    );
}

#[test]
fn advertised_names_match_the_built_catalogue() {
    for tier in bernstein_tools::Tier::ALL {
        for lineage_enabled in [true, false] {
            let config = bernstein_tools::ToolConfig {
                tier,
                lineage_enabled,
                ..bernstein_tools::ToolConfig::default()
            };
            let built: Vec<String> = bernstein_tools::Catalogue::new(&config)
                .unwrap()
                .tools()
                .iter()
                .map(|t| t.name.clone())
                .collect();
            assert_eq!(
                bernstein_tools::Catalogue::advertised_names(&config),
                built,
                "{tier:?} lineage={lineage_enabled}"
            );
        }
    }
}
