//! Bounded proptest twins of the cargo-fuzz targets, on stable.
//!
//! The properties are the fuzz crate's own (`fuzz/src/lib.rs`, compiled here as a module), so
//! these tests check exactly what `cargo xtask fuzz` checks. Each twin feeds its property a
//! bounded number of inputs made by mutating the target's committed seeds (byte flips,
//! insertions, cuts, splices); one test replays every seed and every input a fuzzer ever failed
//! on (`fuzz/regressions/<target>/`, each a regression test for the defect it found).

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;

#[allow(
    unreachable_pub,
    reason = "the fuzz crate's properties are public there, private here"
)]
#[path = "../../../../fuzz/src/lib.rs"]
mod props;

/// A fuzz target's property.
type Property = fn(&[u8]);

/// The fuzz targets and their properties.
const TARGETS: [(&str, Property); 9] = [
    ("jsonrpc_dispatch", props::jsonrpc_dispatch),
    ("stdio_framing", props::stdio_framing),
    ("pyjson", props::pyjson),
    ("audit_verify", props::audit_verify),
    ("run_journal", props::run_journal),
    ("dlp", props::dlp),
    ("firewall", props::firewall),
    ("http_request", props::http_request),
    ("task_store", props::task_store),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files directly under `dir`, sorted by name (none when it does not exist).
fn inputs_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    inputs_in(&fuzz_dir().join("corpus").join(target))
        .into_iter()
        .map(|(_, bytes)| bytes)
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Cut(usize, usize),
    Splice(usize, usize),
}

/// A seed of `target` with a few mutations, as a fuzzer's first generations would make.
fn mutated(target: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds(target);
    assert!(!seeds.is_empty(), "{target}: the committed corpus is empty");
    let mutation = prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, bit)| Mutation::Flip(at, bit)),
        (
            any::<usize>(),
            prop_oneof![
                prop::collection::vec(any::<u8>(), 1..8),
                Just(b"\n".to_vec()),
                Just(b"[[[[[[[[".to_vec()),
                Just(b"\"\\ud800\"".to_vec()),
                Just(b"{\"a\":".to_vec()),
            ]
        )
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<usize>(), 0usize..64).prop_map(|(at, len)| Mutation::Cut(at, len)),
        (any::<usize>(), any::<usize>()).prop_map(|(seed, at)| Mutation::Splice(seed, at)),
    ];
    (0..seeds.len(), prop::collection::vec(mutation, 0..4)).prop_map(move |(pick, mutations)| {
        let mut input = seeds[pick].clone();
        for mutation in mutations {
            let at = |n: usize, len: usize| n % (len + 1);
            match mutation {
                Mutation::Flip(n, bit) => {
                    if !input.is_empty() {
                        let i = n % input.len();
                        input[i] ^= bit.max(1);
                    }
                }
                Mutation::Insert(n, bytes) => {
                    let i = at(n, input.len());
                    input.splice(i..i, bytes);
                }
                Mutation::Cut(n, len) => {
                    let i = at(n, input.len());
                    let end = (i + len).min(input.len());
                    input.drain(i..end);
                }
                Mutation::Splice(other, n) => {
                    let other = &seeds[other % seeds.len()];
                    let i = at(n, input.len());
                    let j = at(n, other.len());
                    input.truncate(i);
                    input.extend_from_slice(&other[j..]);
                }
            }
        }
        input
    })
}

#[test]
fn every_seed_and_every_regression_input_holds() {
    for (target, property) in TARGETS {
        let corpus = inputs_in(&fuzz_dir().join("corpus").join(target));
        assert!(!corpus.is_empty(), "{target}: no seeds");
        let regressions = inputs_in(&fuzz_dir().join("regressions").join(target));
        for (path, input) in corpus.iter().chain(&regressions) {
            let held = std::panic::catch_unwind(|| property(input));
            assert!(held.is_ok(), "{target}: {} fails", path.display());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn jsonrpc_dispatch_twin(input in mutated("jsonrpc_dispatch")) {
        props::jsonrpc_dispatch(&input);
    }

    #[test]
    fn stdio_framing_twin(input in mutated("stdio_framing")) {
        props::stdio_framing(&input);
    }

    #[test]
    fn audit_verify_twin(input in mutated("audit_verify")) {
        props::audit_verify(&input);
    }

    #[test]
    fn run_journal_twin(input in mutated("run_journal")) {
        props::run_journal(&input);
    }

    #[test]
    fn http_request_twin(input in mutated("http_request")) {
        props::http_request(&input);
    }

    #[test]
    fn task_store_twin(input in mutated("task_store")) {
        props::task_store(&input);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn pyjson_twin(input in mutated("pyjson")) {
        props::pyjson(&input);
    }

    #[test]
    fn dlp_twin(input in mutated("dlp")) {
        props::dlp(&input);
    }

    #[test]
    fn firewall_twin(input in mutated("firewall")) {
        props::firewall(&input);
    }
}
