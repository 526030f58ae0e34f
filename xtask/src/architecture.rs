//! The invariants of docs/ARCHITECTURE.md that a test can check, checked on the workspace as
//! it is: which crate may use which (from `cargo metadata`), and where printing, SQL and
//! environment reads may happen (from the sources).

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    use serde_json::Value;

    fn root() -> PathBuf {
        crate::project_root()
    }

    /// Each workspace crate's normal (not dev, not build) dependencies on workspace crates.
    fn workspace_dependencies() -> BTreeMap<String, BTreeSet<String>> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let output = std::process::Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(root())
            .output()
            .expect("cargo metadata runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
        let packages = metadata["packages"].as_array().expect("packages");
        let names: BTreeSet<String> = packages
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        packages
            .iter()
            .map(|package| {
                let uses = package["dependencies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|d| d["kind"].is_null())
                    .filter_map(|d| d["name"].as_str())
                    .filter(|name| names.contains(*name))
                    .map(str::to_owned)
                    .collect();
                (
                    package["name"].as_str().unwrap_or_default().to_owned(),
                    uses,
                )
            })
            .collect()
    }

    /// Every crate's dependencies on the workspace stay within what ARCHITECTURE.md's code
    /// map allows it (a crate may use fewer).
    #[test]
    fn each_crate_uses_only_the_crates_the_code_map_allows() {
        let allowed: &[(&str, &[&str])] = &[
            ("plan-types", &[]),
            ("plan-vars", &[]),
            ("plan-ports", &["plan-types"]),
            ("plan-store", &["plan-types"]),
            ("plan-llm", &["plan-types"]),
            ("plan-graph", &["plan-types", "plan-vars"]),
            ("plan-tools", &["plan-ports", "plan-types"]),
            ("plan-queue", &["plan-ports", "plan-types"]),
            ("plan-workspace", &["plan-ports", "plan-types"]),
            (
                "plan-engine",
                &["plan-graph", "plan-ports", "plan-types", "plan-vars"],
            ),
            (
                "plan-run",
                &[
                    "plan-engine",
                    "plan-graph",
                    "plan-llm",
                    "plan-ports",
                    "plan-queue",
                    "plan-store",
                    "plan-tools",
                    "plan-types",
                    "plan-vars",
                    "plan-workspace",
                ],
            ),
            // The front-ends reach everything below through plan-run, the one session API.
            ("plan-serve", &["plan-graph", "plan-run", "plan-types"]),
            ("plan-ui", &["plan-graph", "plan-run", "plan-types"]),
            (
                "plan-cli",
                &[
                    "plan-graph",
                    "plan-run",
                    "plan-serve",
                    "plan-types",
                    "plan-ui",
                ],
            ),
            ("plan-fuzz", &["plan-engine", "plan-graph", "plan-tools"]),
            ("xtask", &[]),
        ];
        let actual = workspace_dependencies();
        let allowed: BTreeMap<&str, BTreeSet<&str>> = allowed
            .iter()
            .map(|(name, uses)| (*name, uses.iter().copied().collect()))
            .collect();
        for (name, uses) in &actual {
            let Some(may) = allowed.get(name.as_str()) else {
                panic!("{name} is a workspace crate the code map does not name");
            };
            let extra: Vec<&String> = uses.iter().filter(|u| !may.contains(u.as_str())).collect();
            assert!(
                extra.is_empty(),
                "{name} uses {extra:?}, which the code map does not allow it"
            );
        }
        // Nothing depends on a front-end: plan-cli, plan-serve and plan-ui are leaves but for
        // plan-cli's use of the other two.
        for (name, uses) in &actual {
            assert!(!uses.contains("plan-cli"), "{name} uses plan-cli");
            if name != "plan-cli" {
                assert!(!uses.contains("plan-serve"), "{name} uses plan-serve");
                assert!(!uses.contains("plan-ui"), "{name} uses plan-ui");
            }
        }
    }

    /// The Rust sources of a crate's library and binaries (`src/`).
    fn sources(krate: &str) -> Vec<(PathBuf, String)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    out.push((path, text));
                }
            }
        }
        let mut out = Vec::new();
        walk(&root().join("crates").join(krate).join("src"), &mut out);
        out
    }

    const LIBRARIES: &[&str] = &[
        "plan-types",
        "plan-vars",
        "plan-ports",
        "plan-store",
        "plan-llm",
        "plan-graph",
        "plan-tools",
        "plan-queue",
        "plan-workspace",
        "plan-engine",
        "plan-run",
        "plan-serve",
        "plan-ui",
    ];

    /// Where `needle` occurs in the library crates' sources, as `crate/path:line`, leaving out
    /// comment lines.
    fn occurrences(needles: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for krate in LIBRARIES {
            for (path, text) in sources(krate) {
                for (n, line) in text.lines().enumerate() {
                    let code = line.trim_start();
                    if code.starts_with("//") {
                        continue;
                    }
                    if needles.iter().any(|needle| code.contains(needle)) {
                        let shown = path.strip_prefix(root().join("crates")).unwrap_or(&path);
                        found.push(format!("{}:{}", shown.display(), n + 1));
                    }
                }
            }
        }
        found
    }

    /// Only plan-cli prints: libraries hand back values and events, front-ends show them.
    #[test]
    fn no_library_prints() {
        let found = occurrences(&["println!", "eprintln!", "print!(", "eprint!(", "dbg!("]);
        assert!(found.is_empty(), "libraries print at {found:?}");
    }

    /// SQL is plan-store's: no other crate uses SQLite or writes a statement.
    #[test]
    fn sql_stays_in_plan_store() {
        let found: Vec<String> =
            occurrences(&["rusqlite", "SELECT ", "INSERT INTO", "CREATE TABLE"])
                .into_iter()
                .filter(|at| !at.starts_with("plan-store/"))
                .collect();
        assert!(found.is_empty(), "SQL outside plan-store at {found:?}");
    }

    /// Libraries do not read the environment to decide anything: plan-cli reads it and passes
    /// settings down. The one exception is plan-tools, which passes variables an operator named
    /// to the programs it starts (exec's passthrough, an MCP server's `env`) and finds programs
    /// on PATH as a shell would.
    #[test]
    fn only_the_cli_reads_the_environment() {
        let found: Vec<String> = occurrences(&["env::var(", "env::var_os(", "env::vars("])
            .into_iter()
            .filter(|at| {
                !(at.starts_with("plan-tools/src/exec.rs:")
                    || at.starts_with("plan-tools/src/mcp/client.rs:"))
            })
            // A test that rewrites the committed schema when asked to.
            .filter(|at| !at.starts_with("plan-graph/src/schema.rs:"))
            .collect();
        assert!(found.is_empty(), "environment read at {found:?}");
    }

    /// One call path (docs/ARCHITECTURE.md): a call that asked for input is read in one
    /// place, a call's record is made in one function, arguments are checked against a schema
    /// by one function; every other site goes through them.
    #[test]
    fn one_call_path() {
        let only = |needles: &[&str], allowed: &[&str]| {
            let found: Vec<String> = occurrences(needles)
                .into_iter()
                .filter(|at| !allowed.iter().any(|file| at.starts_with(file)))
                .collect();
            assert!(
                found.is_empty(),
                "{needles:?} outside {allowed:?} at {found:?}"
            );
        };
        // (Other crates' `call_tool` is an MCP client's, not the engine's.)
        let engine = |needle: &str, allowed: &[&str]| {
            let found: Vec<String> = occurrences(&[needle])
                .into_iter()
                .filter(|at| at.starts_with("plan-engine/"))
                .filter(|at| !allowed.iter().any(|file| at.starts_with(file)))
                .collect();
            assert!(
                found.is_empty(),
                "{needle} outside {allowed:?} at {found:?}"
            );
        };
        engine(
            "input_request(",
            &["plan-engine/src/admit.rs:", "plan-engine/src/call.rs:"],
        );
        engine("call_tool(", &["plan-engine/src/call.rs:"]);
        engine("call_admitted(", &["plan-engine/src/call.rs:"]);
        // A call's arguments are checked by `plan_ports::schema::check`; the lists of
        // violations are for answers (checked against the question's schema) and for what
        // the plan's own arguments show before the run (previews, `validate`).
        only(
            &["schema::violations(", "schema::invalid_args("],
            &[
                "plan-ports/src/schema.rs:",
                "plan-run/src/decide.rs:",
                "plan-engine/src/program.rs:",
                "plan-engine/src/schema.rs:",
            ],
        );
        // The scheduler makes a context per call, so it calls the record's function itself.
        only(
            &["executed_record("],
            &["plan-engine/src/call.rs:", "plan-engine/src/run.rs:"],
        );
        only(
            &["Record {"],
            &[
                "plan-types/",
                "plan-store/",
                "plan-engine/src/call.rs:",
                // Records of steps that did not run (skipped, blocked, unreachable).
                "plan-engine/src/run.rs:",
                "plan-run/src/report.rs:",
                // Unit tests' records.
                "plan-engine/src/block.rs:",
                "plan-ui/src/block.rs:",
            ],
        );
        only(
            &["iter_errors("],
            &[
                "plan-ports/src/schema.rs:",
                // Not a call's arguments: what a plan's own arguments already break, as issues
                // at their place before the run; the plan format's own schema, in a test.
                "plan-engine/src/schema.rs:",
                "plan-graph/src/schema.rs:",
            ],
        );
    }

    /// The front-ends read and write runs through plan-run, not through the `Store` it opens
    /// for them: no `Store` method is called on a store (or on what opens one) in their
    /// sources, however the call is laid out over lines.
    #[test]
    fn front_ends_reach_the_ledger_only_through_plan_run() {
        const READS: &[&str] = &[
            // Writes.
            "add_plan",
            "add_plan_apart",
            "approve_with_input",
            "begin_run",
            "decide",
            "decide_all",
            "end_run",
            "forget_records",
            "gc",
            "halt_for_approvals",
            "keep_counts",
            "recover",
            "remove_plan",
            "replan",
            "resume_run",
            "set_model_format",
            "set_option",
            // Reads.
            "approvals",
            "attempts",
            "checkpoints",
            "counts",
            "decisions",
            "earlier_attempts",
            "events_after",
            "expired",
            "find_plan",
            "last_event_at",
            "model_format",
            "plans",
            "records",
            "revisions",
            "run",
            "runs",
            "variables",
        ];
        const STORES: &[&str] = &[
            "store",
            "reader()?",
            "writer()?",
            "open()?",
            "open_reader()?",
            "open_existing()?",
        ];
        let mut found = Vec::new();
        for krate in ["plan-cli", "plan-ui", "plan-serve"] {
            for (path, text) in sources(krate) {
                // Comments out, then every run of whitespace: `store\n    .run(` reads as
                // `store.run(`.
                let code: String = text
                    .lines()
                    .filter(|line| !line.trim_start().starts_with("//"))
                    .flat_map(|line| line.split_whitespace())
                    .collect();
                for store in STORES {
                    for read in READS {
                        let call = format!("{store}.{read}(");
                        // `mystore.run(` is not `store.run(`; `self.store.run(` is.
                        let hit = code.match_indices(&call).any(|(at, _)| {
                            !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
                        });
                        if hit {
                            found.push(format!("{}: {call}", path.display()));
                        }
                    }
                }
            }
        }
        assert!(found.is_empty(), "front-ends read the ledger at {found:?}");
    }

    /// Stored ids (`STEP-N`, `STEP[KEY]`, `STEP/NODE#N/…`) are read back only by
    /// `plan_graph::StepIndex` with `CallPath::segments_of` and `plan_graph::is_item_of`: no
    /// other library splits one at its marks.
    #[test]
    fn ids_are_read_back_in_one_place() {
        let splits = [
            "split('#')",
            "rsplit_once('#')",
            "split_once('#')",
            "strip_prefix('/')",
            "split_once('/')",
            "rsplit_once('/')",
            "['#', '/']",
            "strip_prefix('-')",
            "rsplit_once('-')",
            "split('/')",
        ];
        let found: Vec<String> = occurrences(&splits)
            .into_iter()
            .filter(|at| {
                ![
                    "plan-types/src/call_id.rs:",
                    // `is_item_of`, the reader of map items `StepIndex::call_of` uses.
                    "plan-graph/src/validate.rs:",
                    // Not ids: the removed `$step-01` syntax in a plan's text, a JSON pointer,
                    // a breakdown's file paths.
                    "plan-graph/src/removed.rs:",
                    "plan-vars/src/value_template.rs:",
                    "plan-workspace/src/breakdown.rs:",
                ]
                .iter()
                .any(|file| at.starts_with(file))
            })
            .collect();
        assert!(found.is_empty(), "ids read by hand at {found:?}");
    }
}
