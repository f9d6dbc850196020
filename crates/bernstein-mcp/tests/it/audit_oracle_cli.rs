//! `bernstein-mcp verify` over each audit vector tree against the reference's own project
//! verifier (`fixtures/vectors/oracle/audit__<case>.json`): the same project verdict and exit
//! code, and the audit section's problems are the oracle's hard errors plus its unacknowledged
//! tears.

use serde_json::Value;

use crate::support::{Scratch, run, vector};

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn project_verify_gives_the_oracle_verdict_on_every_audit_tree() {
    let mut cases: Vec<String> = std::fs::read_dir(vector("oracle"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            Some(
                name.strip_prefix("audit__")?
                    .strip_suffix(".json")?
                    .to_owned(),
            )
        })
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 11, "{cases:?}");
    for case in &cases {
        let oracle: Value = serde_json::from_str(
            &std::fs::read_to_string(vector(&format!("oracle/audit__{case}.json"))).unwrap(),
        )
        .unwrap();
        let key_file = oracle["key"].as_str().unwrap().rsplit('/').next().unwrap();
        let scratch = Scratch::of(&format!("audit/{case}"), key_file);
        let (project, key) = (scratch.project(), scratch.key());
        let out = run(
            &[
                "verify",
                "--json",
                "--workdir",
                project.to_str().unwrap(),
                "--key-file",
                key.to_str().unwrap(),
            ],
            scratch.dir.path(),
        );
        let report: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{case}: not JSON ({e}): {}", out.stdout));
        let ok = oracle["ok"].as_bool().unwrap();
        assert_eq!(report["ok"], ok, "{case}: {}", out.stdout);
        assert_eq!(out.code, if ok { 0 } else { 1 }, "{case}: {}", out.stderr);
        let mut want = strings(&oracle["audit"]["hard_errors"]);
        want.extend(
            strings(&oracle["audit"]["tears"])
                .into_iter()
                .filter(|t| t.ends_with("UNACKNOWLEDGED)")),
        );
        let audit = &report["sections"]["audit"];
        assert_eq!(audit["ok"], oracle["audit"]["ok"], "{case}");
        assert_eq!(strings(&audit["problems"]), want, "{case}");
        assert_eq!(
            strings(&audit["detail"]["tears"]),
            strings(&oracle["audit"]["tears"]),
            "{case}"
        );
    }
}
