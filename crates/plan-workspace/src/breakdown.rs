//! A task breakdown folder (`docs/tasks/<slug>/`: `manifest.json`, `layer_plan.json` and a
//! task XML file per task, as a PRD-to-tasks breakdown writes them) turned into a plan of task
//! steps.
//!
//! Each task becomes a step: its id, its layer (`<meta><layer>`), its dependencies (the layer
//! plan's `dependency_graph`), its checks (each `<verification><step>` that reads
//! `Run: \`COMMAND\``, or `Verify: \`COMMAND\`` with the text it must show in a second pair of
//! backticks), and its spec text (name, objective, requirements, tests, files, the remaining
//! verification steps, context and interfaces). Steps are ordered by layer, then priority.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// Why a breakdown folder cannot be read: the file, and what is wrong there.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct BreakdownError {
    /// The file (or folder).
    pub file: PathBuf,
    /// What is wrong, naming the element or field.
    pub message: String,
}

fn fail(file: &Path, message: impl Into<String>) -> BreakdownError {
    BreakdownError {
        file: file.to_path_buf(),
        message: message.into(),
    }
}

/// How to make the plan.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The implementer's command (`claude -p`, `./agent.sh`), split into words without a
    /// shell; `${task.prompt}` is added as its last argument unless it reads `${task.…}`
    /// itself.
    pub implement: String,
    /// The repository, as the plan will name it (relative to the plan's folder).
    pub repo: String,
    /// The breakdown folder, as the plan will name it.
    pub tasks: String,
}

/// One task read from its XML file.
#[derive(Debug, Clone)]
struct Task {
    id: String,
    name: String,
    layer: String,
    priority: u32,
    checks: Vec<Value>,
    spec: String,
}

/// Reads the breakdown in `dir` into a plan (JSON, ready to be written as the plan file).
pub fn import(dir: &Path, options: &ImportOptions) -> Result<Value, BreakdownError> {
    if !dir.is_dir() {
        return Err(fail(dir, "is not a folder"));
    }
    let manifest_path = dir.join("manifest.json");
    let manifest = read_json(&manifest_path)?;
    let layer_plan_path = dir.join("layer_plan.json");
    let layer_plan = read_json(&layer_plan_path)?;
    let slug = ["prd_slug", "slug"]
        .iter()
        .find_map(|k| manifest.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| fail(&manifest_path, "has no `prd_slug`"))?;
    let title = ["prd_name", "name", "title"]
        .iter()
        .find_map(|k| manifest.get(*k).and_then(Value::as_str))
        .map(str::to_owned);

    let files = task_files(dir, &manifest, &manifest_path)?;
    if files.is_empty() {
        return Err(fail(dir, "holds no task XML files (`<layer>/<ID>.xml`)"));
    }
    let mut tasks = Vec::with_capacity(files.len());
    let mut seen = BTreeSet::new();
    for file in &files {
        let task = read_task(file)?;
        if !seen.insert(task.id.clone()) {
            return Err(fail(
                file,
                format!("<meta><id> `{}` is used by another task file too", task.id),
            ));
        }
        tasks.push(task);
    }
    let graph = dependency_graph(&layer_plan, &layer_plan_path)?;
    for (id, deps) in &graph {
        for dep in deps {
            if !seen.contains(dep) {
                return Err(fail(
                    &layer_plan_path,
                    format!("`dependency_graph.{id}` names `{dep}`, which no task file has"),
                ));
            }
        }
    }
    let order = layer_order(&layer_plan);
    tasks.sort_by_key(|t| {
        (
            order
                .iter()
                .position(|l| *l == t.layer)
                .unwrap_or(usize::MAX),
            t.layer.clone(),
            t.priority,
            t.id.clone(),
        )
    });
    let mut argv: Vec<Value> = shell_words::split(&options.implement)
        .map_err(|e| {
            fail(
                Path::new("--implement"),
                format!("cannot split into words: {e}"),
            )
        })?
        .into_iter()
        .map(Value::String)
        .collect();
    if argv.is_empty() {
        return Err(fail(Path::new("--implement"), "names no command"));
    }
    if !options.implement.contains("${task.") {
        argv.push(json!("${task.prompt}"));
    }
    let steps: Vec<Value> = tasks
        .into_iter()
        .map(|task| {
            let mut step = Map::new();
            step.insert("id".into(), json!(task.id));
            step.insert("title".into(), json!(task.name));
            step.insert("layer".into(), json!(task.layer));
            if let Some(deps) = graph.get(&task.id).filter(|d| !d.is_empty()) {
                step.insert("depends_on".into(), json!(deps));
            }
            let mut spec = Map::new();
            spec.insert("spec".into(), json!(task.spec));
            spec.insert(
                "implement".into(),
                json!({"tool": "exec", "args": {"argv": argv}}),
            );
            if !task.checks.is_empty() {
                spec.insert("verify".into(), json!(task.checks));
            }
            step.insert("task".into(), Value::Object(spec));
            Value::Object(step)
        })
        .collect();
    let mut plan = Map::new();
    plan.insert("id".into(), json!(slug));
    if let Some(title) = title {
        plan.insert("title".into(), json!(title));
    }
    plan.insert(
        "workspace".into(),
        json!({"repo": options.repo, "tasks": options.tasks}),
    );
    plan.insert("steps".into(), json!(steps));
    Ok(Value::Object(plan))
}

fn read_json(path: &Path) -> Result<Value, BreakdownError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| fail(path, format!("cannot read: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| fail(path, format!("is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(fail(path, "is not a JSON object"));
    }
    Ok(value)
}

/// The task files: the manifest's inventory (`tasks: [{file | path}]`) when it has one, else
/// every `*.xml` in the layer folders, sorted.
fn task_files(
    dir: &Path,
    manifest: &Value,
    manifest_path: &Path,
) -> Result<Vec<PathBuf>, BreakdownError> {
    if let Some(list) = manifest.get("tasks").and_then(Value::as_array) {
        let mut files = Vec::new();
        for (k, entry) in list.iter().enumerate() {
            let file = ["file", "path"]
                .iter()
                .find_map(|key| entry.get(*key).and_then(Value::as_str))
                .ok_or_else(|| fail(manifest_path, format!("`tasks[{k}]` has no `file`")))?;
            let path = dir.join(file);
            if !path.is_file() {
                return Err(fail(
                    manifest_path,
                    format!("`tasks[{k}].file` {file} does not exist"),
                ));
            }
            files.push(path);
        }
        return Ok(files);
    }
    let mut files = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| fail(dir, format!("cannot list: {e}")))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map_err(|e| fail(&folder, format!("cannot list: {e}")))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "xml"))
            .collect();
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// `dependency_graph`: task id → the ids it depends on.
fn dependency_graph(
    layer_plan: &Value,
    path: &Path,
) -> Result<BTreeMap<String, Vec<String>>, BreakdownError> {
    let Some(graph) = layer_plan.get("dependency_graph") else {
        return Ok(BTreeMap::new());
    };
    let graph = graph.as_object().ok_or_else(|| {
        fail(
            path,
            "`dependency_graph` is not an object of task id → [ids]",
        )
    })?;
    let mut out = BTreeMap::new();
    for (id, deps) in graph {
        let deps = deps
            .as_array()
            .and_then(|list| {
                list.iter()
                    .map(|d| d.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                fail(
                    path,
                    format!("`dependency_graph.{id}` is not a list of task ids"),
                )
            })?;
        out.insert(id.clone(), deps);
    }
    Ok(out)
}

/// The layers in the order the layer plan lists them (`layers: [{name | id}]` or names).
fn layer_order(layer_plan: &Value) -> Vec<String> {
    layer_plan
        .get("layers")
        .and_then(Value::as_array)
        .map(|layers| {
            layers
                .iter()
                .filter_map(|layer| {
                    layer.as_str().map(str::to_owned).or_else(|| {
                        ["name", "id", "layer"]
                            .iter()
                            .find_map(|k| layer.get(*k).and_then(Value::as_str))
                            .map(str::to_owned)
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One task file.
fn read_task(path: &Path) -> Result<Task, BreakdownError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| fail(path, format!("cannot read: {e}")))?;
    let document = roxmltree::Document::parse(&text)
        .map_err(|e| fail(path, format!("is not well-formed XML: {e}")))?;
    let root = document.root_element();
    if root.tag_name().name() != "task" {
        return Err(fail(
            path,
            format!(
                "the root element is <{}>, not <task>",
                root.tag_name().name()
            ),
        ));
    }
    let meta = child(root, "meta").ok_or_else(|| fail(path, "<task> has no <meta>"))?;
    let field = |name: &str| -> Result<String, BreakdownError> {
        child(meta, name)
            .map(|n| text_of(n))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| fail(path, format!("<meta> has no <{name}>")))
    };
    let id = field("id")?;
    let name = field("name")?;
    let layer = field("layer")?;
    let priority = match child(meta, "priority").map(text_of) {
        None => 99,
        Some(text) => text
            .parse()
            .map_err(|_| fail(path, format!("<meta><priority> `{text}` is not a number")))?,
    };
    let mut checks = Vec::new();
    let mut other_steps = Vec::new();
    if let Some(verification) = child(root, "verification") {
        for step in verification
            .children()
            .filter(|n| n.is_element() && n.tag_name().name() == "step")
        {
            let line = text_of(step);
            match check_of(&line) {
                Some(check) => checks.push(check),
                None => other_steps.push(line),
            }
        }
    }
    let mut spec = format!("Task {id}: {name}\n");
    let section = |title: &str, node: Option<roxmltree::Node<'_, '_>>, spec: &mut String| {
        if let Some(node) = node {
            let items: Vec<String> = node
                .children()
                .filter(|n| n.is_element())
                .map(text_of)
                .filter(|t| !t.is_empty())
                .collect();
            let body = if items.is_empty() {
                text_of(node)
            } else {
                items
                    .iter()
                    .map(|i| format!("- {}", i.replace('\n', "\n  ")))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            if !body.is_empty() {
                spec.push_str(&format!("\n## {title}\n{body}\n"));
            }
        }
    };
    section("Objective", child(root, "objective"), &mut spec);
    section("Requirements", child(root, "requirements"), &mut spec);
    section(
        "Tests to write first",
        child(root, "test-requirements"),
        &mut spec,
    );
    section("Files", child(root, "files-to-create"), &mut spec);
    if !other_steps.is_empty() {
        spec.push_str(&format!(
            "\n## Also check\n{}\n",
            other_steps
                .iter()
                .map(|s| format!("- {s}"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    section("Context", child(root, "context"), &mut spec);
    section(
        "Interfaces it may use",
        child(root, "dependencies"),
        &mut spec,
    );
    section(
        "Interfaces it must provide",
        child(root, "exports"),
        &mut spec,
    );
    Ok(Task {
        id,
        name,
        layer,
        priority,
        checks,
        spec,
    })
}

/// The first child element of `parent` named `name`.
fn child<'a, 'input>(
    parent: roxmltree::Node<'a, 'input>,
    name: &str,
) -> Option<roxmltree::Node<'a, 'input>> {
    parent
        .children()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

/// A node's text, its lines' common indentation removed.
fn text_of(node: roxmltree::Node<'_, '_>) -> String {
    let raw: String = node
        .descendants()
        .filter(|n| n.is_text())
        .filter_map(|n| n.text())
        .collect();
    let lines: Vec<&str> = raw.trim_matches('\n').lines().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| {
            if l.len() >= indent {
                &l[indent..]
            } else {
                l.trim_start()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

/// A verification step that is a command: `Run: \`CMD\` …` must exit 0; `Verify: \`CMD\` …
/// \`TEXT\`` must also print TEXT. The command is the breakdown's own text, run by `sh -c`.
fn check_of(line: &str) -> Option<Value> {
    let (kind, rest) = line.split_once(':')?;
    let kind = kind.trim().to_ascii_lowercase();
    if kind != "run" && kind != "verify" {
        return None;
    }
    let mut spans = rest.split('`').skip(1).step_by(2);
    let command = spans.next()?.trim();
    if command.is_empty() {
        return None;
    }
    let mut check = json!({"argv": ["sh", "-c", command]});
    if kind == "verify"
        && let Some(text) = spans.next().filter(|t| !t.trim().is_empty())
    {
        check["contains"] = json!(text);
    }
    Some(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_and_verify_steps_become_checks() {
        assert_eq!(
            check_of("Run: `pytest tests/x.py -v` - all tests pass"),
            Some(json!({"argv": ["sh", "-c", "pytest tests/x.py -v"]}))
        );
        assert_eq!(
            check_of("Verify: `curl -s localhost/health` returns `ok`"),
            Some(json!({"argv": ["sh", "-c", "curl -s localhost/health"], "contains": "ok"}))
        );
        assert_eq!(check_of("Check: `app/__init__.py` exports Project"), None);
        assert_eq!(check_of("Run the app"), None);
    }
}
