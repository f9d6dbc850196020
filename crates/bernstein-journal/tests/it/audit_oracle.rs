//! The reference's own project verifier (`verify_dir.py`) over each audit vector tree,
//! recorded in `fixtures/vectors/oracle/audit__<case>.json`: our audit verifier must give the
//! same verdict, the same messages, the same tears and the same two head readings.

use std::fs;

use bernstein_journal::audit;
use bernstein_journal::key::AuditKey;
use serde_json::Value as Json;

use crate::support::vector;

fn strings(value: &Json) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_audit_vector_gets_the_oracle_verdict() {
    let mut cases: Vec<String> = fs::read_dir(vector("oracle"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let case = name.strip_prefix("audit__")?.strip_suffix(".json")?;
            Some(case.to_owned())
        })
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 11, "{cases:?}");
    let mut verdicts = Vec::new();
    for case in &cases {
        let oracle: Json = serde_json::from_slice(
            &fs::read(vector(&format!("oracle/audit__{case}.json"))).unwrap(),
        )
        .unwrap();
        // The oracle ran with the key its report names (`out/_keys/<file>`).
        let key_file = oracle["key"].as_str().unwrap().rsplit('/').next().unwrap();
        let raw = fs::read_to_string(vector(&format!("_keys/{key_file}"))).unwrap();
        let key = AuditKey::from_master_bytes(raw.trim().as_bytes().to_vec());
        let audit_dir = vector(&format!("audit/{case}/.sdd/audit"));
        let report = audit::verify(&audit_dir, &key);
        let want = &oracle["audit"];

        assert_eq!(want["present"], true, "{case}");
        assert_eq!(Json::Bool(report.ok()), want["ok"], "{case}: ok");
        assert_eq!(
            report.verify_messages(),
            strings(&want["errors"]),
            "{case}: errors"
        );
        let hard: Vec<String> = report.errors.iter().map(|f| f.message.clone()).collect();
        assert_eq!(hard, strings(&want["hard_errors"]), "{case}: hard errors");
        let tears: Vec<String> = report.tears.iter().map(|t| t.describe()).collect();
        assert_eq!(tears, strings(&want["tears"]), "{case}: tears");
        assert_eq!(
            audit::keyless_newest_segment_head(&audit_dir),
            want["chain_head_keyless_newest_segment"].as_str().unwrap(),
            "{case}: keyless head"
        );
        assert_eq!(
            audit::recovered_head(&audit_dir, &key),
            want["chain_head_prev_chain_digest"].as_str().unwrap(),
            "{case}: the head an anchored append would chain to"
        );
        // Nothing else is in these trees: every other section of the oracle's report passes,
        // so the project verdict is the audit verdict.
        for (section, body) in oracle.as_object().unwrap() {
            if let Some(ok) = body.get("ok")
                && section != "audit"
            {
                assert_eq!(ok, &Json::Bool(true), "{case}: {section}");
            }
        }
        assert_eq!(oracle["ok"], want["ok"], "{case}");
        verdicts.push((case.as_str(), report.ok()));
    }
    // Two clean chains, nine broken ones.
    assert_eq!(
        verdicts.iter().filter(|(_, ok)| *ok).collect::<Vec<_>>(),
        vec![&("basic", true), &("v1_then_v2", true)]
    );
}
