//! `import tasks` on a breakdown folder in the original's exact format
//! (vinzenz/prd-breakdown-execute: `task-format-spec.md`, `file-formats.md` and the
//! `breakdown-plan-layers` skill): every optional element, both dependency forms, every
//! verification step form; imported, then run with real git and a script implementer that
//! gets its first attempt wrong.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly on purpose")]
mod common;

use std::path::{Path, PathBuf};

use common::{Lab, assert_execute_state, git, path_str};
use serde_json::{Value, json};

/// The implementer: `agent.sh ID ATTEMPT`. `L1-001`'s first `add` subtracts (its check
/// prints -1, not 5); the second attempt fixes it and commits the fix itself, saying what it
/// fixed in the commit's body, as the original's implementer does.
const AGENT: &str = r#"#!/bin/sh
set -e
case "$1/$2" in
  L1-001/1) mkdir -p calc; printf 'def add(a, b):\n    return a - b\n' > calc/__init__.py ;;
  L1-001/*) printf 'def add(a, b):\n    return a + b\n' > calc/__init__.py
            git add -A
            git commit -qm "[L1-001] Fix: add subtracted" -m "Fix applied:
- add returns a + b instead of a - b" ;;
  L1-002/*) printf 'import sys\nimport calc\nprint(calc.add(int(sys.argv[1]), int(sys.argv[2])))\n' > cli.py ;;
  L2-001/*) printf 'def mul(a, b):\n    return a * b\n' >> calc/__init__.py ;;
esac
"#;

/// A repository at `<lab>/calc` on branch `trunk`, with the implementer committed.
fn repo(lab: &Lab) -> PathBuf {
    let dir = lab.dir.path().join("calc");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "trunk"]);
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-qm", "start"]);
    dir
}

/// A task file in the original's format, with every element `task-format-spec.md` names.
fn task_xml(id: &str, name: &str, layer: &str, priority: u32, steps: &[&str]) -> String {
    let steps: String = steps
        .iter()
        .map(|s| format!("    <step>{s}</step>\n"))
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<task>
  <meta>
    <id>{id}</id>
    <name>{name}</name>
    <layer>{layer}</layer>
    <priority>{priority}</priority>
    <estimated-files>2</estimated-files>
  </meta>
  <context>
    <prd-excerpt>
      Feature: calculator
      AC1: add(2, 3) is 5
    </prd-excerpt>
    <tech-stack>Python 3.11</tech-stack>
    <template-base>cli/python</template-base>
    <project-structure>
      calc/
        __init__.py
      cli.py
    </project-structure>
  </context>
  <dependencies>
    <interface name="add" type="function">
      def add(a: int, b: int) -> int: ...
    </interface>
  </dependencies>
  <objective>
    {name}.
  </objective>
  <requirements>
    <requirement id="R1">
      The function lives in `calc/__init__.py`
    </requirement>
  </requirements>
  <test-requirements>
    <test id="T1">
      File: tests/test_calc.py
      Test: test_{id}
    </test>
  </test-requirements>
  <files-to-create>
    <file>calc/__init__.py</file>
  </files-to-create>
  <verification>
{steps}  </verification>
  <exports>
    <interface name="{name}" type="function">
      def f() -> None: ...
    </interface>
  </exports>
</task>
"#
    )
}

/// The breakdown at `<repo>/docs/tasks/calc`: a manifest with `prd.slug` and
/// `prd.project_path` (the repository, absolute, as the original's examples write it), a layer plan in file-formats.md's form (layers keyed by id, each with
/// its `dependencies`) plus a top-level `dependency_graph`, and three task files.
fn breakdown(repo: &Path) -> PathBuf {
    let dir = repo.join("docs/tasks/calc");
    for layer in ["1-foundation", "2-backend"] {
        std::fs::create_dir_all(dir.join(layer)).unwrap();
    }
    let manifest = json!({
        "prd": {"slug": "calc", "name": "Calculator", "project_path": repo},
        "generated_at": "2026-01-11T10:00:00Z",
        "total_tasks": 3,
        "layers": {
            "1-foundation": {"status": "complete", "task_count": 2},
            "2-backend": {"status": "complete", "task_count": 1}
        },
        "tasks": [
            {"id": "L1-001", "layer": "1-foundation", "name": "Add", "file": "1-foundation/L1-001-add.xml"},
            {"id": "L1-002", "layer": "1-foundation", "name": "CLI", "file": "1-foundation/L1-002-cli.xml"},
            {"id": "L2-001", "layer": "2-backend", "name": "Mul", "file": "2-backend/L2-001-mul.xml"}
        ]
    });
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let layer_plan = json!({
        "project_type": "greenfield",
        "include_layer_0": false,
        "layers": {
            "1-foundation": {
                "tasks": [{"id": "L1-001", "name": "Add", "files": ["calc/__init__.py"]},
                          {"id": "L1-002", "name": "CLI", "files": ["cli.py"]}],
                "dependencies": {"L1-002": ["L1-001"]}
            },
            "2-backend": {"tasks": [{"id": "L2-001", "name": "Mul", "files": ["calc/__init__.py"]}], "dependencies": {}}
        },
        "dependency_graph": {"L2-001": ["L1-001"]}
    });
    std::fs::write(dir.join("layer_plan.json"), layer_plan.to_string()).unwrap();
    let files = [
        (
            "1-foundation/L1-001-add.xml",
            task_xml(
                "L1-001",
                "Add",
                "1-foundation",
                1,
                &[
                    r#"Run: `python3 -B -c "import calc; print(calc.add(2, 3))"` - prints 5"#,
                    "Verify: `calc/__init__.py` exports add",
                    "Check: add handles negative numbers",
                ],
            ),
        ),
        (
            "1-foundation/L1-002-cli.xml",
            task_xml(
                "L1-002",
                "CLI",
                "1-foundation",
                2,
                &["Run: python3 -B cli.py 2 3 - prints 5"],
            ),
        ),
        (
            "2-backend/L2-001-mul.xml",
            task_xml(
                "L2-001",
                "Mul",
                "2-backend",
                1,
                &[
                    r#"Run: `python3 -B -c "import calc; print(calc.mul(2, 3))"` → `6`"#,
                    "Run: `test -f calc/__init__.py` and `test -f cli.py` - both files are there",
                ],
            ),
        ),
    ];
    for (file, text) in files {
        std::fs::write(dir.join(file), text).unwrap();
    }
    dir
}

fn import(lab: &Lab, dir: &Path, extra: &[&str]) -> std::process::Output {
    lab.cli()
        .args(["import", "tasks", path_str(dir), "--implement"])
        .arg("./agent.sh ${task.id} ${task.attempt}")
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_breakdown_in_the_originals_format_is_imported_whole_and_runs() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let dir = breakdown(&repo);
    let plan_path = lab.dir.path().join("calc.json");
    let output = import(
        &lab,
        &dir,
        &[
            "-o",
            path_str(&plan_path),
            "--verify-after-merge",
            "python3 -B -c 'import calc'",
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    // prd.slug is the plan's id; prd.project_path the repository.
    assert_eq!(plan["id"], "calc");
    assert_eq!(plan["title"], "Calculator");
    assert_eq!(
        Path::new(plan["workspace"]["repo"].as_str().unwrap()),
        std::fs::canonicalize(&repo).unwrap()
    );
    assert_eq!(
        plan["workspace"]["verify_after_merge"],
        json!([{"argv": ["python3", "-B", "-c", "import calc"]}])
    );
    let step = |id: &str| {
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()
            .clone()
    };
    // Both dependency forms, merged; and layer 2 waits for the whole of layer 1.
    assert_eq!(step("L1-002")["depends_on"], json!(["L1-001"]));
    assert_eq!(step("L2-001")["depends_on"], json!(["L1-001", "L1-002"]));
    // Every step form, each a real check.
    assert_eq!(
        step("L1-001")["task"]["verify"],
        json!([
            {"argv": ["python3", "-B", "-c", "import calc; print(calc.add(2, 3))"], "contains": "5"},
            {"argv": ["ls", "-d", "--", "calc/__init__.py"]},
            {"argv": ["cat", "--", "calc/__init__.py"], "contains": "add"}
        ])
    );
    assert_eq!(
        step("L1-002")["task"]["verify"],
        json!([{"argv": ["python3", "-B", "cli.py", "2", "3"], "contains": "5"}])
    );
    assert_eq!(
        step("L2-001")["task"]["verify"],
        json!([
            {"argv": ["python3", "-B", "-c", "import calc; print(calc.mul(2, 3))"], "contains": "6"},
            {"argv": ["test", "-f", "calc/__init__.py"]},
            {"argv": ["test", "-f", "cli.py"]}
        ])
    );
    // The spec keeps every element with its label and attributes.
    let spec = step("L1-001")["task"]["spec"].as_str().unwrap().to_owned();
    for wanted in [
        "Task L1-001: Add",
        "Estimated files: 2",
        "- R1: The function lives in `calc/__init__.py`",
        "- T1: File: tests/test_calc.py",
        "- calc/__init__.py",
        "## Also check (plan-cli cannot run these",
        "- Check: add handles negative numbers",
        "### PRD excerpt\n```\nFeature: calculator\nAC1: add(2, 3) is 5\n```",
        "- Tech stack: Python 3.11",
        "- Template base: cli/python",
        "### Project structure",
        "## Interfaces it may use\n### add (type: function)\n```\ndef add(a: int, b: int) -> int: ...\n```",
        "## Interfaces it must provide\n### Add (type: function)",
    ] {
        assert!(spec.contains(wanted), "{wanted:?} in:\n{spec}");
    }

    let (code, report) = lab.json(&["run", path_str(&plan_path), "--json"]);
    assert_eq!(code, 0, "{report}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("execute-state.json")).unwrap())
            .unwrap();
    assert_execute_state(&state);
    assert_eq!(state["status"], "completed");
    assert_eq!(state["tasks"]["L1-001"]["attempts"], 2, "{state}");
    let error = &state["tasks"]["L1-001"]["errors"][0];
    assert_eq!(error["type"], "verification_failed");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("does not contain `5`"),
        "{error}"
    );
    // The fix commit the implementer made says what it fixed; that is `fixed`.
    let commits = state["tasks"]["L1-001"]["commits"].as_array().unwrap();
    assert_eq!(commits.len(), 2, "{state}");
    assert_eq!(commits[1]["type"], "fix");
    assert_eq!(commits[1]["message"], "[L1-001] Fix: add subtracted");
    assert_eq!(commits[1]["fixed"], "add returns a + b instead of a - b");
    assert!(commits[0].get("fixed").is_none());
    // One timestamp format throughout; the merge queue in the order the tasks merged.
    assert!(
        !state["started_at"].as_str().unwrap().contains('.'),
        "{state}"
    );
    let queue: Vec<&str> = (state["merge_queue"].as_array().unwrap().iter())
        .map(|e| e["task_id"].as_str().unwrap())
        .collect();
    let merged_at = |id: &str| state["tasks"][id]["merged_at"].as_str().unwrap().to_owned();
    assert!(
        merged_at(queue[0]) <= merged_at(queue[1]) && merged_at(queue[1]) <= merged_at(queue[2])
    );
    assert_eq!(queue[2], "L2-001", "the layer barrier: layer 2 merges last");
    assert_eq!(
        std::process::Command::new("python3")
            .args(["-B", "cli.py", "4", "5"])
            .current_dir(&repo)
            .output()
            .unwrap()
            .stdout,
        b"9\n"
    );
}

/// Each way the files can disagree is an error naming the file and the element.
#[test]
fn a_breakdown_whose_files_disagree_is_refused_naming_the_file() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let refused = |change: &dyn Fn(&Path), wanted: &str| {
        let dir = breakdown(&repo);
        change(&dir);
        let output = import(&lab, &dir, &[]);
        assert_eq!(output.status.code(), Some(2), "{wanted}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(wanted), "{wanted:?} in {stderr}");
        std::fs::remove_dir_all(&dir).unwrap();
    };
    let edit_json = |dir: &Path, file: &str, edit: &dyn Fn(&mut Value)| {
        let path = dir.join(file);
        let mut value: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut value);
        std::fs::write(path, value.to_string()).unwrap();
    };
    refused(
        &|dir| {
            edit_json(dir, "manifest.json", &|m| {
                m["tasks"][1]["id"] = json!("L1-009")
            })
        },
        "manifest.json: `tasks[1].id` is `L1-009`, and its file",
    );
    refused(
        &|dir| {
            edit_json(dir, "manifest.json", &|m| {
                m["tasks"][2]["file"] = json!("2-backend/gone.xml")
            })
        },
        "manifest.json: `tasks[2].file` 2-backend/gone.xml does not exist",
    );
    refused(
        &|dir| {
            edit_json(dir, "manifest.json", &|m| {
                m["tasks"].as_array_mut().unwrap().pop();
                m["total_tasks"] = json!(2);
            })
        },
        "L2-001-mul.xml: is a task file the manifest's `tasks` does not list",
    );
    refused(
        &|dir| edit_json(dir, "manifest.json", &|m| m["total_tasks"] = json!(4)),
        "manifest.json: `total_tasks` is 4, and the breakdown holds 3 task files",
    );
    refused(
        &|dir| {
            let text = std::fs::read_to_string(dir.join("2-backend/L2-001-mul.xml")).unwrap();
            std::fs::write(
                dir.join("2-backend/L2-001-mul.xml"),
                text.replace("<id>L2-001</id>", "<id>L1-001</id>"),
            )
            .unwrap();
        },
        "is the id of",
    );
    refused(
        &|dir| {
            edit_json(dir, "manifest.json", &|m| {
                m["tasks"][2]["layer"] = json!("9-extra")
            });
            let file = dir.join("2-backend/L2-001-mul.xml");
            let text = std::fs::read_to_string(&file).unwrap();
            std::fs::write(
                &file,
                text.replace("<layer>2-backend</layer>", "<layer>9-extra</layer>"),
            )
            .unwrap();
        },
        "L2-001-mul.xml: <meta><layer> `9-extra` is not a layer of",
    );
    refused(
        &|dir| {
            edit_json(dir, "layer_plan.json", &|p| {
                p["dependency_graph"]["L2-001"] = json!(["L9-999"])
            })
        },
        "layer_plan.json: `dependency_graph.L2-001` names `L9-999`, which no task file has",
    );
    refused(
        &|dir| {
            edit_json(dir, "layer_plan.json", &|p| {
                p["layers"]["1-foundation"]["dependencies"]["L1-001"] = json!(["L1-002"])
            })
        },
        "layer_plan.json: the dependencies go round in a cycle through L1-001, L1-002",
    );
    refused(
        &|dir| {
            edit_json(dir, "layer_plan.json", &|p| {
                p["dependency_graph"]["L1-002"] = json!(["L2-001"])
            })
        },
        "task `L1-002` depends on `L2-001` of a later layer",
    );
}

/// A task id names a branch and a worktree folder: an id that is a path (or that git refuses
/// in a branch name) is refused at import, naming the id, its file and its line, and no plan
/// is written.
#[test]
fn a_task_id_that_is_a_path_is_refused_at_import() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let plan_path = lab.dir.path().join("out.json");
    for (bad, why) in [
        (
            "/etc/passwd",
            "it contains `/`: a task id is one folder name, never a path",
        ),
        (
            "../../x",
            "it contains `/`: a task id is one folder name, never a path",
        ),
        ("..", "it starts with `.`"),
    ] {
        let dir = breakdown(&repo);
        let file = dir.join("1-foundation/L1-002-cli.xml");
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            text.replace("<id>L1-002</id>", &format!("<id>{bad}</id>")),
        )
        .unwrap();
        let output = import(&lab, &dir, &["-o", path_str(&plan_path)]);
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let wanted = format!(
            "{}:4: <meta><id> `{bad}` cannot be a task id: {why}",
            file.display()
        );
        assert!(stderr.contains(&wanted), "{wanted:?} in {stderr}");
        assert!(!plan_path.exists(), "{bad}: no plan is written");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The checks an import makes into `sh -c` commands are listed on stderr, each with its task,
/// file and line (and the `--verify-after-merge` ones), before anyone runs the plan; control
/// characters are shown escaped. An import with none says nothing of it.
#[test]
fn the_checks_that_run_through_a_shell_are_listed_at_import() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let dir = breakdown(&repo);
    let output = import(&lab, &dir, &[]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("sh -c"), "{stderr}");

    let file = dir.join("1-foundation/L1-002-cli.xml");
    let text = std::fs::read_to_string(&file).unwrap();
    let steps = "<step>Run: python3 -B cli.py 2 3 - prints 5</step>\n    \
                 <step>Run: test -f cli.py &amp;&amp; echo \"OK\"</step>\n    \
                 <step>Run: `echo \"$HOME\" | grep -q /` - finds it</step>\n    \
                 <step>Run: `printf 'x\u{202e}y' > /dev/null; true`</step>";
    std::fs::write(
        &file,
        text.replace("<step>Run: python3 -B cli.py 2 3 - prints 5</step>", steps),
    )
    .unwrap();
    let line_of = |needle: &str| {
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .position(|l| l.contains(needle))
            .unwrap()
            + 1
    };
    let plan_path = lab.dir.path().join("plan.json");
    let output = import(
        &lab,
        &dir,
        &[
            "--verify-after-merge",
            "python3 -m pytest -q | tail -1",
            "-o",
            path_str(&plan_path),
        ],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&plan_path).unwrap()).unwrap();
    assert_eq!(
        plan["steps"][1]["task"]["verify"][1],
        json!({"argv": ["sh", "-c", "test -f cli.py && echo \"OK\""]})
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let at = |needle: &str| format!("  L1-002 ({}:{}): ", file.display(), line_of(needle));
    let wanted = [
        "4 checks run with `sh -c` (a shell reads them: look before you run the plan):".to_owned(),
        format!("{}test -f cli.py && echo \"OK\"", at("test -f cli.py")),
        format!("{}echo \"$HOME\" | grep -q /", at("grep -q")),
        format!("{}printf 'x\\u{{202e}}y' > /dev/null; true", at("printf")),
        "  --verify-after-merge: python3 -m pytest -q | tail -1".to_owned(),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines[..wanted.len()], wanted, "{stderr}");
    assert!(lines[wanted.len()].starts_with("wrote "), "{stderr}");
}

/// The layer plan as `breakdown-plan-layers` writes it (layers as a list, each task with its
/// `depends_on`), and `--no-layer-barrier`: the dependencies alone order the tasks.
#[test]
fn the_plan_layers_form_and_no_layer_barrier() {
    let lab = Lab::new();
    let repo = repo(&lab);
    let dir = breakdown(&repo);
    let layer_plan = json!({
        "project_type": "greenfield",
        "layers": [
            {"id": "1-foundation", "name": "Foundation", "tasks": [
                {"id": "L1-001", "name": "Add", "files": [], "depends_on": []},
                {"id": "L1-002", "name": "CLI", "files": [], "depends_on": ["L1-001"]}
            ]},
            {"id": "2-backend", "name": "Backend", "tasks": [
                {"id": "L2-001", "name": "Mul", "files": [], "depends_on": ["L1-001"]}
            ]}
        ],
        "dependency_graph": {"L1-001": [], "L1-002": ["L1-001"], "L2-001": ["L1-001"]},
        "summary": {"total_tasks": 3}
    });
    std::fs::write(dir.join("layer_plan.json"), layer_plan.to_string()).unwrap();
    for (extra, l2) in [
        (&[][..], json!(["L1-001", "L1-002"])),
        (&["--no-layer-barrier"][..], json!(["L1-001"])),
    ] {
        let output = import(&lab, &dir, extra);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(plan["steps"][1]["depends_on"], json!(["L1-001"]));
        assert_eq!(plan["steps"][2]["id"], "L2-001");
        assert_eq!(plan["steps"][2]["depends_on"], l2, "{extra:?}");
    }
}
