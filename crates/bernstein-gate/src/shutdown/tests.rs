//! Containment tests over real directory trees with symlinks, each proving that a refusal
//! leaves the filesystem exactly as it was.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use bernstein_protocol::pyjson::{Dialect, Value};
use proptest::prelude::*;

use super::*;

/// A scratch area: `<tmp>/proj` is a Bernstein project (it has `.sdd`), `<tmp>/outside` is a
/// directory the barrier must never let a write reach.
struct Scratch {
    _dir: tempfile::TempDir,
    /// The resolved scratch root.
    root: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("proj/.sdd")).unwrap();
        fs::create_dir_all(root.join("outside")).unwrap();
        Scratch { _dir: dir, root }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    fn mkdir(&self, relative: &str) {
        fs::create_dir_all(self.path(relative)).unwrap();
    }

    fn link(&self, relative: &str, target: impl AsRef<Path>) {
        symlink(target, self.path(relative)).unwrap();
    }

    /// Every entry under the scratch root, symlinks not followed, with its kind.
    fn tree(&self) -> Vec<(PathBuf, &'static str)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, &'static str)>) {
            for entry in fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let kind = fs::symlink_metadata(&path).unwrap().file_type();
                if kind.is_symlink() {
                    out.push((path, "link"));
                } else if kind.is_dir() {
                    out.push((path.clone(), "dir"));
                    walk(&path, out);
                } else {
                    out.push((path, "file"));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out.sort();
        out
    }

    /// Runs the barrier on `workdir` (relative to the scratch root) and asserts that the
    /// filesystem is unchanged afterwards, whatever the answer.
    fn check(&self, workdir: &str) -> Result<PathBuf, Error> {
        let before = self.tree();
        let answer = shutdown_signal_path_from(Workdir::Text(workdir), &self.root);
        assert_eq!(
            self.tree(),
            before,
            "the barrier changed the filesystem for {workdir:?}"
        );
        answer
    }

    fn signal_in(&self, project: &str) -> PathBuf {
        self.path(project).join(".sdd/runtime/signals/SHUTDOWN")
    }
}

fn payload(error: &Error) -> String {
    Value::Object(error.refusal_payload()).dumps(Dialect::PY_ROW)
}

#[test]
fn a_project_root_gets_its_contained_signal_path() {
    let scratch = Scratch::new();
    let expect = scratch.signal_in("proj");
    assert_eq!(scratch.check("proj"), Ok(expect.clone()));
    let absolute = scratch.path("proj");
    assert_eq!(
        scratch.check(absolute.to_str().unwrap()),
        Ok(expect.clone())
    );
    assert_eq!(scratch.check("./proj/../proj/"), Ok(expect.clone()));
    assert_eq!(scratch.check("outside/../proj"), Ok(expect));
    // Nothing below .sdd is created: the write and its mkdir are the caller's.
    assert!(!scratch.path("proj/.sdd/runtime").exists());
}

#[test]
fn an_empty_workdir_is_the_working_directory() {
    let scratch = Scratch::new();
    let cwd = scratch.path("proj");
    assert_eq!(
        shutdown_signal_path_from(Workdir::Text(""), &cwd),
        Ok(scratch.signal_in("proj"))
    );
}

#[test]
fn another_project_on_the_machine_is_a_legal_target() {
    let scratch = Scratch::new();
    scratch.mkdir("second/.sdd");
    let second = scratch.path("second");
    assert_eq!(
        shutdown_signal_path_from(Workdir::Text(second.to_str().unwrap()), Path::new("/")),
        Ok(scratch.signal_in("second"))
    );
}

#[test]
fn a_workdir_symlink_names_the_project_it_points_to() {
    let scratch = Scratch::new();
    scratch.link("alias", "proj");
    assert_eq!(scratch.check("alias"), Ok(scratch.signal_in("proj")));
}

#[test]
fn symlinks_that_stay_inside_the_root_are_followed() {
    let scratch = Scratch::new();
    scratch.mkdir("proj/state/runtime");
    scratch.link("proj/.sdd/runtime", "../state/runtime");
    scratch.mkdir("proj/state/runtime/signals");
    scratch.link("proj/state/runtime/signals/SHUTDOWN", "../stop-file");
    assert_eq!(
        scratch.check("proj"),
        Ok(scratch.path("proj/state/runtime/stop-file"))
    );
}

#[test]
fn a_symlink_out_of_the_root_is_refused_at_every_segment() {
    let cases: [(&str, &[&str], &str); 4] = [
        (".sdd", &[], "outside"),
        ("runtime", &[".sdd"], "outside"),
        ("signals", &[".sdd/runtime"], "outside"),
        ("SHUTDOWN", &[".sdd/runtime/signals"], "outside/stop"),
    ];
    for (segment, parents, target) in cases {
        let scratch = Scratch::new();
        if segment == ".sdd" {
            fs::remove_dir(scratch.path("proj/.sdd")).unwrap();
        }
        for parent in parents {
            scratch.mkdir(&format!("proj/{parent}"));
        }
        let at = match parents.first() {
            Some(parent) => format!("proj/{parent}/{segment}"),
            None => format!("proj/{segment}"),
        };
        scratch.link(&at, scratch.path(target));
        assert_eq!(
            scratch.check("proj"),
            Err(Error::Escapes {
                workdir_repr: "'proj'".into()
            }),
            "{segment}"
        );
        assert!(!scratch.path("outside/stop").exists());
    }
}

#[test]
fn a_sibling_sharing_the_root_prefix_is_outside() {
    // `<tmp>/proj-evil` starts with the bytes of `<tmp>/proj`; only the separator tells them
    // apart.
    let scratch = Scratch::new();
    scratch.mkdir("proj-evil/runtime");
    scratch.link("proj/.sdd/runtime", scratch.path("proj-evil/runtime"));
    assert!(matches!(scratch.check("proj"), Err(Error::Escapes { .. })));
}

#[test]
fn a_workdir_without_sdd_is_refused() {
    let scratch = Scratch::new();
    scratch.mkdir("not_a_project");
    fs::write(scratch.path("outside/.sdd"), "a file, not a directory").unwrap();
    for workdir in ["not_a_project", "missing/dir", "outside"] {
        assert_eq!(
            scratch.check(workdir),
            Err(Error::NotAProjectRoot {
                workdir_repr: python_str_repr(workdir)
            })
        );
    }
}

#[test]
fn a_dangling_sdd_symlink_is_not_a_project() {
    let scratch = Scratch::new();
    scratch.mkdir("bare");
    scratch.link("bare/.sdd", scratch.path("outside/nothing-here"));
    assert!(matches!(
        scratch.check("bare"),
        Err(Error::NotAProjectRoot { .. })
    ));
}

#[test]
fn over_long_workdirs_are_refused_by_size() {
    let scratch = Scratch::new();
    let ascii = "a".repeat(MAX_PATH_BYTES + 1);
    assert_eq!(scratch.check(&ascii), Err(Error::TooLong { bytes: 4097 }));
    // 2100 two-byte characters pass a 4096-character schema but not the byte limit.
    let wide = "é".repeat(2100);
    assert_eq!(scratch.check(&wide), Err(Error::TooLong { bytes: 4200 }));
    // Exactly at the limit the shape passes and the filesystem decides.
    let at_limit = "a".repeat(MAX_PATH_BYTES);
    assert!(matches!(
        scratch.check(&at_limit),
        Err(Error::NotAProjectRoot { .. })
    ));
}

/// A project directory under the scratch root whose absolute path has exactly `bytes` bytes,
/// made of nested directories short enough for the filesystem; returns it relative to the
/// scratch root.
fn project_of_length(scratch: &Scratch, bytes: usize) -> String {
    const COMPONENT: usize = 200;
    let mut remaining = bytes - scratch.root.as_os_str().len();
    let mut relative = Vec::new();
    // Each component costs its name and one `/`; the last one takes what is left.
    while remaining > COMPONENT + 1 + 2 {
        relative.push("d".repeat(COMPONENT));
        remaining -= COMPONENT + 1;
    }
    relative.push("p".repeat(remaining - 1));
    let relative = relative.join("/");
    scratch.mkdir(&format!("{relative}/.sdd"));
    assert_eq!(scratch.path(&relative).as_os_str().len(), bytes);
    relative
}

#[test]
fn a_signal_path_at_the_byte_limit_is_contained_and_one_byte_more_escapes() {
    let suffix = "/.sdd/runtime/signals/SHUTDOWN".len();
    let scratch = Scratch::new();
    let at_limit = project_of_length(&scratch, MAX_PATH_BYTES - suffix);
    assert_eq!(
        scratch.check(&at_limit),
        Ok(scratch.signal_in(&at_limit)),
        "a signal path of exactly {MAX_PATH_BYTES} bytes can exist"
    );
    assert_eq!(
        scratch.signal_in(&at_limit).as_os_str().len(),
        MAX_PATH_BYTES
    );
    let scratch = Scratch::new();
    let over = project_of_length(&scratch, MAX_PATH_BYTES - suffix + 1);
    assert!(matches!(scratch.check(&over), Err(Error::Escapes { .. })));
}

#[test]
fn a_nul_byte_is_unaddressable() {
    let scratch = Scratch::new();
    assert_eq!(
        scratch.check("proj\0x"),
        Err(Error::Unaddressable {
            workdir_repr: r"'proj\x00x'".into()
        })
    );
}

#[test]
fn a_symlink_loop_in_the_workdir_is_unaddressable() {
    let scratch = Scratch::new();
    scratch.link("a", "b");
    scratch.link("b", "a");
    assert!(matches!(
        scratch.check("a"),
        Err(Error::Unaddressable { .. })
    ));
    assert!(matches!(
        scratch.check("a/proj"),
        Err(Error::Unaddressable { .. })
    ));
    // A later `..` folds the loop away, and the path that remains is used as it stands.
    assert_eq!(scratch.check("a/../proj"), Ok(scratch.signal_in("proj")));
}

#[test]
fn a_loop_below_the_root_is_not_an_escape() {
    let scratch = Scratch::new();
    scratch.link("proj/.sdd/runtime", "runtime");
    assert_eq!(scratch.check("proj"), Ok(scratch.signal_in("proj")));
}

#[test]
fn a_long_symlink_chain_resolves_and_an_endless_one_is_refused() {
    let scratch = Scratch::new();
    scratch.link("hop0", "proj");
    for n in 1..=40 {
        scratch.link(&format!("hop{n}"), format!("hop{}", n - 1));
    }
    assert_eq!(scratch.check("hop40"), Ok(scratch.signal_in("proj")));
    for n in 41..=MAX_SYMLINK_DEPTH + 1 {
        scratch.link(&format!("hop{n}"), format!("hop{}", n - 1));
    }
    // `hopN` is N + 1 nested links: `MAX_SYMLINK_DEPTH` of them resolve, one more does not.
    assert_eq!(
        scratch.check(&format!("hop{}", MAX_SYMLINK_DEPTH - 1)),
        Ok(scratch.signal_in("proj"))
    );
    assert!(matches!(
        scratch.check(&format!("hop{MAX_SYMLINK_DEPTH}")),
        Err(Error::Unaddressable { .. })
    ));
    let deepest = format!("hop{}", MAX_SYMLINK_DEPTH + 1);
    assert!(matches!(
        scratch.check(&deepest),
        Err(Error::Unaddressable { .. })
    ));
}

#[test]
fn non_text_workdirs_are_refused_by_type() {
    let cases = [
        ("5", "int"),
        ("1.5", "float"),
        ("true", "bool"),
        ("null", "NoneType"),
        ("[\"proj\"]", "list"),
        ("{}", "dict"),
    ];
    for (json, python_type) in cases {
        let value = Value::parse(json).unwrap();
        assert_eq!(
            shutdown_signal_path(Workdir::from_value(&value)),
            Err(Error::NotAPath { python_type })
        );
    }
    assert_eq!(shutdown_signal_path(Workdir::Bytes), Err(Error::Bytes));
    let text = Value::from("x");
    assert_eq!(Workdir::from_value(&text), Workdir::Text("x"));
}

#[test]
fn refusal_payloads() {
    let scratch = Scratch::new();
    scratch.mkdir("not_a_project");
    scratch.link("proj/.sdd/runtime", scratch.path("outside"));
    let refusals = [
        Error::NotAPath { python_type: "int" },
        Error::Bytes,
        scratch.check(&"é".repeat(2100)).unwrap_err(),
        scratch.check("proj\0x").unwrap_err(),
        scratch.check("not_a_project").unwrap_err(),
        scratch.check("proj").unwrap_err(),
    ];
    let rendered: Vec<String> = refusals.iter().map(payload).collect();
    insta::assert_snapshot!(rendered.join("\n"));
}

#[test]
fn signal_sent_payload() {
    let scratch = Scratch::new();
    let path = scratch.check("proj").unwrap();
    let answer = Value::Object(signal_sent(&path)).dumps(Dialect::PY_ROW);
    assert_eq!(
        answer,
        format!(
            "{{\"status\": \"shutdown signal sent\", \"path\": \"{}\"}}",
            path.display()
        )
    );
}

#[test]
fn encoded_length_counts_undecodable_bytes_as_surrogates() {
    assert_eq!(python_encoded_len(b"abc"), 3);
    assert_eq!(python_encoded_len("é".as_bytes()), 2);
    assert_eq!(python_encoded_len(b"a\xffb"), 5);
    assert_eq!(python_encoded_len(b"\xc3"), 3);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Resolution only reads; that the tool, which writes, writes nothing but the signal of a
    /// real project is proved in `bernstein-tools` (`tests/it/shutdown.rs`).
    #[test]
    fn arbitrary_workdirs_resolve_to_the_project_signal_or_refuse(workdir in "[a-z./\\\\\0é]{0,24}") {
        // Resolve from 12 levels below the scratch root, so no generated `..` chain can leave
        // it, with a project `p` next to the working directory for short inputs to find.
        let scratch = Scratch::new();
        let depth = "d/".repeat(12);
        scratch.mkdir(&format!("{depth}p/.sdd"));
        let cwd = scratch.path(&depth);
        let before = scratch.tree();
        let answer = shutdown_signal_path_from(Workdir::Text(&workdir), &cwd);
        prop_assert_eq!(scratch.tree(), before);
        if let Ok(path) = answer {
            prop_assert_eq!(path, cwd.join("p/.sdd/runtime/signals/SHUTDOWN"));
        }
    }

    #[test]
    fn accepted_paths_always_end_in_the_signal_file(name in "[a-z]{1,8}") {
        let scratch = Scratch::new();
        scratch.mkdir(&format!("{name}/.sdd"));
        let path = scratch.check(&name).unwrap();
        prop_assert!(path.starts_with(scratch.path(&name)));
        prop_assert!(path.ends_with(".sdd/runtime/signals/SHUTDOWN"));
    }
}

/// Runs the whole send (barrier and write) on `project`, relative to the scratch root.
fn send(scratch: &Scratch, project: &str) -> Result<PathBuf, Error> {
    send_shutdown_signal_from(Workdir::Text(project), &scratch.root, STDIO_SIGNAL_CONTENT)
}

#[test]
fn the_send_creates_the_parents_and_writes_the_signal() {
    let scratch = Scratch::new();
    let path = send(&scratch, "proj").unwrap();
    assert_eq!(path, scratch.signal_in("proj"));
    assert_eq!(fs::read_to_string(&path).unwrap(), "mcp-stop\n");
    // A second send truncates and rewrites the same file.
    fs::write(&path, "a much longer earlier content\n").unwrap();
    send(&scratch, "proj").unwrap();
    assert_eq!(fs::read_to_string(&path).unwrap(), "mcp-stop\n");
}

#[test]
fn the_send_follows_no_link_below_the_root() {
    // A link that stays inside the root passes the barrier's check, but the write follows no
    // link at all: it is refused, and nothing is written through it.
    let scratch = Scratch::new();
    scratch.mkdir("proj/elsewhere");
    scratch.link("proj/.sdd/runtime", "../elsewhere");
    let before = scratch.tree();
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(
        matches!(&refusal, Error::Symlink { entry, .. } if entry == ".sdd/runtime"),
        "{refusal:?}"
    );
    assert_eq!(scratch.tree(), before);
    let text = payload(&refusal);
    assert!(text.contains("\"hint\": \"workdir must be an existing Bernstein project root\""));

    // A `SHUTDOWN` link to a file inside the root is refused too, and the file is untouched.
    let scratch = Scratch::new();
    scratch.mkdir("proj/.sdd/runtime/signals");
    fs::write(scratch.path("proj/notes.txt"), "keep\n").unwrap();
    scratch.link("proj/.sdd/runtime/signals/SHUTDOWN", "../../../notes.txt");
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(matches!(refusal, Error::Symlink { .. }), "{refusal:?}");
    assert_eq!(
        fs::read_to_string(scratch.path("proj/notes.txt")).unwrap(),
        "keep\n"
    );
}

#[test]
fn a_signal_that_is_not_a_regular_file_of_its_own_is_refused() {
    let scratch = Scratch::new();
    scratch.mkdir("proj/.sdd/runtime/signals");
    let signal = scratch.signal_in("proj");
    // A FIFO with no reader: opening it must neither block nor write.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &signal,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(
        matches!(refusal, Error::NotARegularFile { .. }),
        "{refusal:?}"
    );
    fs::remove_file(&signal).unwrap();

    // A hard link to a file outside the project: a write would change that file.
    fs::write(scratch.path("outside/victim"), "precious\n").unwrap();
    fs::hard_link(scratch.path("outside/victim"), &signal).unwrap();
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(
        matches!(refusal, Error::NotARegularFile { .. }),
        "{refusal:?}"
    );
    assert_eq!(
        fs::read_to_string(scratch.path("outside/victim")).unwrap(),
        "precious\n"
    );
    fs::remove_file(&signal).unwrap();

    // A directory at the signal path.
    fs::create_dir(&signal).unwrap();
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(
        matches!(refusal, Error::NotARegularFile { .. }),
        "{refusal:?}"
    );
}

#[test]
fn a_file_where_a_signal_directory_belongs_is_refused_and_left_alone() {
    // The barrier passes it (the entry is inside the root); the write opens each directory
    // with `O_DIRECTORY`, so it stops at the file instead of failing further down as a write.
    let scratch = Scratch::new();
    fs::write(scratch.path("proj/.sdd/runtime"), "not a directory\n").unwrap();
    let before = scratch.tree();
    let refusal = send(&scratch, "proj").unwrap_err();
    assert!(
        matches!(&refusal, Error::Symlink { entry, .. } if entry == ".sdd/runtime"),
        "{refusal:?}"
    );
    assert_eq!(scratch.tree(), before);
    assert_eq!(
        fs::read_to_string(scratch.path("proj/.sdd/runtime")).unwrap(),
        "not a directory\n"
    );
}

#[test]
fn a_project_whose_sdd_went_away_before_the_write_is_not_a_project() {
    // The barrier saw `.sdd`; the write, which never creates it, finds it gone.
    let scratch = Scratch::new();
    scratch.mkdir("gone");
    let refusal =
        write_signal(&scratch.path("gone"), "mcp-stop\n", &|| "'gone'".to_owned()).unwrap_err();
    assert_eq!(
        refusal,
        Error::NotAProjectRoot {
            workdir_repr: "'gone'".to_owned()
        }
    );
    assert!(!scratch.path("gone/.sdd").exists());
}

#[test]
fn a_failed_write_carries_the_write_hint() {
    let refusal = Error::Write {
        entry: ".sdd/runtime/signals/SHUTDOWN".to_owned(),
        reason: "No space left on device (os error 28)".to_owned(),
    };
    assert_eq!(
        refusal.refusal_payload().get("hint"),
        Some(&Value::from(WRITE_FAILURE_HINT))
    );
    assert_eq!(
        Error::Bytes.refusal_payload().get("hint"),
        Some(&Value::from(REFUSAL_HINT))
    );
}

/// The other tests compare `tree()` before and after to prove that nothing was written, so
/// the helper must see every entry: a listing that missed some would make them pass vacuously.
#[test]
fn the_scratch_tree_lists_every_entry_with_its_kind() {
    let scratch = Scratch::new();
    fs::write(scratch.path("proj/notes.txt"), "x").unwrap();
    scratch.link("proj/to-outside", scratch.path("outside"));
    let listed: Vec<(String, &str)> = scratch
        .tree()
        .into_iter()
        .map(|(path, kind)| {
            let relative = path.strip_prefix(&scratch.root).unwrap();
            (relative.display().to_string(), kind)
        })
        .collect();
    let expect = [
        ("outside", "dir"),
        ("proj", "dir"),
        ("proj/.sdd", "dir"),
        ("proj/notes.txt", "file"),
        ("proj/to-outside", "link"),
    ];
    let expect: Vec<(String, &str)> = expect
        .iter()
        .map(|(path, kind)| ((*path).to_owned(), *kind))
        .collect();
    assert_eq!(listed, expect);
}

#[test]
fn a_barrier_refusal_of_the_send_writes_nothing() {
    let scratch = Scratch::new();
    scratch.mkdir("bare");
    scratch.link("proj/.sdd/runtime", scratch.path("outside"));
    for project in ["bare", "proj", "missing", "proj/\0"] {
        let before = scratch.tree();
        let refusal = send(&scratch, project).unwrap_err();
        assert_eq!(scratch.tree(), before, "{project:?}");
        assert!(payload(&refusal).contains("\"hint\": "), "{project:?}");
    }
}
