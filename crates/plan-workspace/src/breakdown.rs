//! A task breakdown folder (`docs/tasks/<slug>/`: `manifest.json`, `layer_plan.json` and a
//! task XML file per task, as vinzenz/prd-breakdown-execute's breakdown writes them) turned
//! into a plan of task steps.
//!
//! [`Breakdown::read`] reads and checks the folder; [`Breakdown::plan`] makes the plan. Each
//! task becomes a step: its id, name and layer (`<meta>`), its dependencies (every form the
//! original writes, merged: `dependency_graph`, each layer's `dependencies`, each layer task's
//! `depends_on`; and, by default, the layer before it, as the original runs layers strictly
//! in order), its checks (read from `<verification>` by [`checks_of`]) and its spec text
//! (every element of the task file, with its label and attributes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// Task id → the ids it depends on.
type Dependencies = BTreeMap<String, BTreeSet<String>>;

/// Why a breakdown folder cannot be read: the file (and the line, where it is known), and
/// what is wrong there.
#[derive(Debug, thiserror::Error)]
#[error("{}{}: {message}", .file.display(), .line.map(|line| format!(":{line}")).unwrap_or_default())]
pub struct BreakdownError {
    /// The file (or folder).
    pub file: PathBuf,
    /// The line of the file, 1 for the first, where it is known.
    pub line: Option<u32>,
    /// What is wrong, naming the element or field.
    pub message: String,
}

fn fail(file: &Path, message: impl Into<String>) -> BreakdownError {
    BreakdownError {
        file: file.to_path_buf(),
        line: None,
        message: message.into(),
    }
}

/// [`fail`] at the line of the file where `node` starts.
fn fail_at(
    file: &Path,
    node: roxmltree::Node<'_, '_>,
    message: impl Into<String>,
) -> BreakdownError {
    BreakdownError {
        line: Some(node.document().text_pos_at(node.range().start).row),
        ..fail(file, message)
    }
}

/// How to make the plan.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The implementer's command (`claude -p`, `./agent.sh`), split into words without a
    /// shell; `${task.prompt}` is added as its last argument unless it reads `${task.…}`
    /// itself.
    pub implement: String,
    /// The repository, as the plan will name it.
    pub repo: String,
    /// The breakdown folder, as the plan will name it.
    pub tasks: String,
    /// Whether each layer waits for the whole layer before it (the original's order); else
    /// the dependencies alone decide.
    pub layer_barrier: bool,
    /// Commands checked on the combination of the base and each task before the base moves
    /// (the workspace's `verify_after_merge`), read as a `Run:` step's command is.
    pub verify_after_merge: Vec<String>,
}

/// One task read from its XML file.
#[derive(Debug, Clone)]
struct Task {
    id: String,
    name: String,
    layer: String,
    priority: u32,
    checks: Vec<Value>,
    /// Its checks that run through `sh -c`: the line of their `<step>`, and the command.
    shell_checks: Vec<(u32, String)>,
    /// Its file.
    file: PathBuf,
    spec: String,
}

/// A check of the imported plan that runs through `sh -c` (a shell reads it: operators,
/// expansions, redirections), which whoever runs the plan should see first: a breakdown's
/// verification step, or a `verify_after_merge` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCheck {
    /// The task it checks; `None` for a `verify_after_merge` check (every task's).
    pub task: Option<String>,
    /// The task file it comes from, and the line of its `<verification><step>`.
    pub source: Option<(PathBuf, u32)>,
    /// The command, as `sh -c` gets it.
    pub command: String,
}

/// A breakdown folder, read and checked.
#[derive(Debug, Clone)]
pub struct Breakdown {
    /// The PRD's slug (`prd_slug`, or the manifest's `prd.slug`): the plan's id.
    pub slug: String,
    /// The PRD's name, when the manifest gives one.
    pub name: Option<String>,
    /// The project the tasks are for (the manifest's `prd.project_path` or `project_path`),
    /// as written there.
    pub project_path: Option<String>,
    /// The tasks in layer order, then priority.
    tasks: Vec<Task>,
    /// The layers in order.
    layers: Vec<String>,
    /// Task id → the ids it depends on (every form merged, sorted).
    depends_on: Dependencies,
    /// Where the dependencies come from, for errors.
    layer_plan_path: PathBuf,
}

impl Breakdown {
    /// Reads the breakdown in `dir`: every task file, checked against the manifest and the
    /// layer plan.
    pub fn read(dir: &Path) -> Result<Breakdown, BreakdownError> {
        if !dir.is_dir() {
            return Err(fail(dir, "is not a folder"));
        }
        let manifest_path = dir.join("manifest.json");
        let manifest = read_json(&manifest_path)?;
        let layer_plan_path = dir.join("layer_plan.json");
        let layer_plan = read_json(&layer_plan_path)?;
        let text_at = |pointers: &[&str]| {
            pointers
                .iter()
                .find_map(|p| manifest.pointer(p).and_then(Value::as_str))
                .map(str::to_owned)
        };
        let slug = text_at(&["/prd_slug", "/prd/slug", "/slug"])
            .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
            .ok_or_else(|| fail(&manifest_path, "has no `prd_slug`"))?;
        let name = text_at(&["/prd_name", "/prd/name", "/name", "/title"]);
        let project_path = text_at(&["/prd/project_path", "/project_path"]);

        let files = task_files(dir, &manifest, &manifest_path)?;
        if files.is_empty() {
            return Err(fail(dir, "holds no task XML files (`<layer>/<ID>.xml`)"));
        }
        let mut tasks = Vec::with_capacity(files.len());
        let mut files_of: BTreeMap<String, PathBuf> = BTreeMap::new();
        let inside = std::fs::canonicalize(dir).map_err(|e| fail(dir, e.to_string()))?;
        for listed in &files {
            // A link may not take the import out of the breakdown folder.
            if !std::fs::canonicalize(&listed.path).is_ok_and(|p| p.starts_with(&inside)) {
                return Err(fail(&listed.path, "is not a file in the breakdown folder"));
            }
            let task = read_task(&listed.path)?;
            if let Some(other) = files_of.get(&task.id) {
                return Err(fail(
                    &listed.path,
                    format!(
                        "<meta><id> `{}` is the id of {} too",
                        task.id,
                        other.display()
                    ),
                ));
            }
            if let Some((k, id)) = &listed.manifest_id
                && *id != task.id
            {
                return Err(fail(
                    &manifest_path,
                    format!(
                        "`tasks[{k}].id` is `{id}`, and its file {} says <meta><id> `{}`",
                        listed.path.display(),
                        task.id
                    ),
                ));
            }
            if let Some((k, layer)) = &listed.manifest_layer
                && *layer != task.layer
            {
                return Err(fail(
                    &manifest_path,
                    format!(
                        "`tasks[{k}].layer` is `{layer}`, and its file {} says <meta><layer> `{}`",
                        listed.path.display(),
                        task.layer
                    ),
                ));
            }
            files_of.insert(task.id.clone(), listed.path.clone());
            tasks.push(task);
        }
        let total = ["/total_tasks", "/summary/total_tasks"]
            .iter()
            .find_map(|p| manifest.pointer(p).and_then(Value::as_u64));
        if let Some(total) = total
            && usize::try_from(total).ok() != Some(tasks.len())
        {
            return Err(fail(
                &manifest_path,
                format!(
                    "`total_tasks` is {total}, and the breakdown holds {} task files",
                    tasks.len()
                ),
            ));
        }

        let (layers, depends_on) = layer_plan_of(&layer_plan, &layer_plan_path, &files_of)?;
        let mut order = layers.clone();
        for task in &tasks {
            if !order.contains(&task.layer) {
                if !layers.is_empty() {
                    // Where would it go? Before, after, between: the layer plan must say.
                    return Err(fail(
                        &files_of[&task.id],
                        format!(
                            "<meta><layer> `{}` is not a layer of {}",
                            task.layer,
                            layer_plan_path.display()
                        ),
                    ));
                }
                order.push(task.layer.clone());
            }
        }
        let position = |layer: &str| order.iter().position(|l| l == layer);
        tasks.sort_by(|a, b| {
            (position(&a.layer), a.priority, &a.id).cmp(&(position(&b.layer), b.priority, &b.id))
        });
        let breakdown = Breakdown {
            slug,
            name,
            project_path,
            tasks,
            layers: order,
            depends_on,
            layer_plan_path,
        };
        breakdown.acyclic()?;
        Ok(breakdown)
    }

    /// The plan (JSON, ready to be written as the plan file).
    pub fn plan(&self, options: &ImportOptions) -> Result<Value, BreakdownError> {
        let mut argv: Vec<Value> = shell_words::split(&options.implement)
            .map_err(|e| {
                fail(
                    Path::new("the implementer"),
                    format!("cannot split into words: {e}"),
                )
            })?
            .into_iter()
            .map(Value::String)
            .collect();
        if argv.is_empty() {
            return Err(fail(Path::new("the implementer"), "names no command"));
        }
        if !options.implement.contains("${task.") {
            argv.push(json!("${task.prompt}"));
        }
        let depends_on = if options.layer_barrier {
            self.with_layer_barrier()?
        } else {
            self.depends_on.clone()
        };
        let steps: Vec<Value> = self
            .tasks
            .iter()
            .map(|task| {
                let mut step = Map::new();
                step.insert("id".into(), json!(task.id));
                step.insert("title".into(), json!(task.name));
                step.insert("layer".into(), json!(task.layer));
                if let Some(deps) = depends_on.get(&task.id).filter(|d| !d.is_empty()) {
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
        plan.insert("id".into(), json!(self.slug));
        if let Some(name) = &self.name {
            plan.insert("title".into(), json!(name));
        }
        let mut workspace = json!({"repo": options.repo, "tasks": options.tasks});
        let after_merge = (options.verify_after_merge.iter())
            .map(|command| {
                command_check(command).ok_or_else(|| {
                    fail(
                        Path::new("verify_after_merge"),
                        format!("`{command}` is not a command plan-cli can run"),
                    )
                })
            })
            .collect::<Result<Vec<Value>, _>>()?;
        if !after_merge.is_empty() {
            workspace["verify_after_merge"] = json!(after_merge);
        }
        plan.insert("workspace".into(), workspace);
        plan.insert("steps".into(), json!(steps));
        Ok(Value::Object(plan))
    }

    /// The checks the plan made with `options` ([`Breakdown::plan`]) runs through `sh -c`, in
    /// the plan's order: each task's, then the `verify_after_merge` commands'.
    pub fn shell_checks(&self, options: &ImportOptions) -> Vec<ShellCheck> {
        let tasks = self.tasks.iter().flat_map(|task| {
            task.shell_checks.iter().map(|(line, command)| ShellCheck {
                task: Some(task.id.clone()),
                source: Some((task.file.clone(), *line)),
                command: command.clone(),
            })
        });
        let after_merge = (options.verify_after_merge.iter())
            .filter_map(|command| shell_command(&command_check(command)?))
            .map(|command| ShellCheck {
                task: None,
                source: None,
                command,
            });
        tasks.chain(after_merge).collect()
    }

    /// The project's folder the manifest names (a relative one is relative to the folder the
    /// import runs in, as the original's executor reads it).
    pub fn project(&self) -> Option<PathBuf> {
        self.project_path.as_ref().map(PathBuf::from)
    }

    /// Where the plan made of it points, each absolute so that the plan works wherever it is
    /// written: the repository (`repo` given, else the manifest's project, relative to the
    /// folder the import runs in, as the original's executor reads it, else that folder) and
    /// the breakdown folder `dir`.
    pub fn places(
        &self,
        dir: &Path,
        repo: Option<&Path>,
    ) -> Result<(String, String), BreakdownError> {
        let absolute = |path: &Path, what: &str| {
            std::fs::canonicalize(path)
                .map(|path| path.display().to_string())
                .map_err(|error| fail(path, format!("cannot be {what}: {error}")))
        };
        let repo = match (repo, self.project()) {
            (Some(repo), _) => absolute(repo, "the repository")?,
            (None, Some(project)) => absolute(&project, "the manifest's `prd.project_path`")?,
            (None, None) => absolute(Path::new("."), "the repository")?,
        };
        Ok((repo, absolute(dir, "the breakdown folder")?))
    }

    /// The dependencies with each layer waiting for the one before it: each task of a layer
    /// depends on the tasks of the layer before that no task of that layer depends on (they
    /// stand for the whole layer). A dependency on a later layer cannot be kept then.
    fn with_layer_barrier(&self) -> Result<Dependencies, BreakdownError> {
        let layer_of: BTreeMap<&str, usize> = self
            .tasks
            .iter()
            .filter_map(|t| {
                Some((
                    t.id.as_str(),
                    self.layers.iter().position(|l| *l == t.layer)?,
                ))
            })
            .collect();
        for (id, deps) in &self.depends_on {
            for dep in deps {
                if layer_of.get(dep.as_str()) > layer_of.get(id.as_str()) {
                    return Err(fail(
                        &self.layer_plan_path,
                        format!(
                            "task `{id}` depends on `{dep}` of a later layer, and layers run in order (without the layer barrier the dependencies alone decide)"
                        ),
                    ));
                }
            }
        }
        let mut depends_on = self.depends_on.clone();
        let mut previous: Vec<&str> = Vec::new();
        for layer in &self.layers {
            let members: Vec<&str> = (self.tasks.iter())
                .filter(|t| t.layer == *layer)
                .map(|t| t.id.as_str())
                .collect();
            if members.is_empty() {
                continue;
            }
            for id in &members {
                let deps = depends_on.entry((*id).to_owned()).or_default();
                deps.extend(previous.iter().map(|p| (*p).to_owned()));
            }
            // The layer's last tasks: those no other task of the layer waits for.
            previous = members
                .iter()
                .copied()
                .filter(|id| {
                    !members.iter().any(|other| {
                        self.depends_on
                            .get(*other)
                            .is_some_and(|deps| deps.contains(*id))
                    })
                })
                .collect();
        }
        Ok(depends_on)
    }

    /// A cycle in the dependencies is an error naming its tasks.
    fn acyclic(&self) -> Result<(), BreakdownError> {
        let depends_on = &self.depends_on;
        let mut waiting: BTreeMap<&str, usize> = (self.tasks.iter())
            .map(|t| {
                (
                    t.id.as_str(),
                    depends_on.get(&t.id).map_or(0, BTreeSet::len),
                )
            })
            .collect();
        let mut ready: Vec<&str> = (waiting.iter())
            .filter(|(_, n)| **n == 0)
            .map(|(id, _)| *id)
            .collect();
        while let Some(done) = ready.pop() {
            waiting.remove(done);
            for (id, deps) in depends_on {
                if deps.contains(done)
                    && let Some(n) = waiting.get_mut(id.as_str())
                {
                    *n -= 1;
                    if *n == 0 {
                        ready.push(id.as_str());
                    }
                }
            }
        }
        if waiting.is_empty() {
            return Ok(());
        }
        let left: Vec<&str> = waiting.keys().copied().collect();
        Err(fail(
            &self.layer_plan_path,
            format!(
                "the dependencies go round in a cycle through {}",
                left.join(", ")
            ),
        ))
    }
}

/// The most a breakdown file may hold.
const MAX_FILE_BYTES: u64 = 16 << 20;

/// A breakdown file's text: a regular file (not a pipe or a device, which could block or
/// never end) of at most [`MAX_FILE_BYTES`].
fn read_text(path: &Path) -> Result<String, BreakdownError> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| fail(path, format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(fail(path, "is not a regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| fail(path, format!("cannot read: {e}")))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(
            path,
            format!("is larger than {} MiB", MAX_FILE_BYTES >> 20),
        ));
    }
    Ok(text)
}

fn read_json(path: &Path) -> Result<Value, BreakdownError> {
    let text = read_text(path)?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| fail(path, format!("is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(fail(path, "is not a JSON object"));
    }
    Ok(value)
}

/// A task file, with what the manifest says of it (`tasks[k].id`, `tasks[k].layer`).
struct Listed {
    path: PathBuf,
    manifest_id: Option<(usize, String)>,
    manifest_layer: Option<(usize, String)>,
}

/// The task files: the manifest's inventory (`tasks: [{id, layer, file}]`) when it has one,
/// and then no task file may be left out of it; else every `*.xml` in the layer folders.
fn task_files(
    dir: &Path,
    manifest: &Value,
    manifest_path: &Path,
) -> Result<Vec<Listed>, BreakdownError> {
    let mut found = Vec::new();
    let mut folders: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| fail(dir, format!("cannot list: {e}")))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let mut xml: Vec<PathBuf> = std::fs::read_dir(&folder)
            .map_err(|e| fail(&folder, format!("cannot list: {e}")))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "xml"))
            .collect();
        xml.sort();
        found.extend(xml);
    }
    let Some(list) = manifest.get("tasks").and_then(Value::as_array) else {
        return Ok(found
            .into_iter()
            .map(|path| Listed {
                path,
                manifest_id: None,
                manifest_layer: None,
            })
            .collect());
    };
    let mut files = Vec::new();
    for (k, entry) in list.iter().enumerate() {
        let file = ["file", "path"]
            .iter()
            .find_map(|key| entry.get(*key).and_then(Value::as_str))
            .ok_or_else(|| fail(manifest_path, format!("`tasks[{k}]` has no `file`")))?;
        let path = dir.join(file);
        if Path::new(file).is_absolute() || file.split(['/', '\\']).any(|part| part == "..") {
            return Err(fail(
                manifest_path,
                format!("`tasks[{k}].file` {file} is not a file in the breakdown folder"),
            ));
        }
        if !path.is_file() {
            return Err(fail(
                manifest_path,
                format!("`tasks[{k}].file` {file} does not exist"),
            ));
        }
        let text = |key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .map(|v| (k, v.to_owned()))
        };
        files.push(Listed {
            manifest_id: text("id"),
            manifest_layer: text("layer"),
            path,
        });
    }
    for path in found {
        let same = |listed: &Listed| {
            std::fs::canonicalize(&listed.path).ok() == std::fs::canonicalize(&path).ok()
        };
        if !files.iter().any(same) {
            return Err(fail(
                &path,
                "is a task file the manifest's `tasks` does not list",
            ));
        }
    }
    Ok(files)
}

/// The layers in order, and task id → the ids it depends on, from every form the original
/// writes, merged: the top-level `dependency_graph`, each layer's `dependencies` (layers as an
/// object keyed by id) and each layer task's `depends_on` (layers as a list). An id no task
/// file has is an error.
fn layer_plan_of(
    layer_plan: &Value,
    path: &Path,
    files_of: &BTreeMap<String, PathBuf>,
) -> Result<(Vec<String>, Dependencies), BreakdownError> {
    let mut layers = Vec::new();
    let mut graphs: Vec<(String, &Value)> = Vec::new();
    let mut depends_on: Dependencies = BTreeMap::new();
    let mut add = |id: &str, deps: &Value, at: &str| -> Result<(), BreakdownError> {
        let deps = deps
            .as_array()
            .and_then(|list| list.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| fail(path, format!("`{at}` is not a list of task ids")))?;
        for dep in deps {
            for named in [id, dep] {
                if !files_of.contains_key(named) {
                    return Err(fail(
                        path,
                        format!("`{at}` names `{named}`, which no task file has"),
                    ));
                }
            }
            if dep == id {
                return Err(fail(path, format!("`{at}`: task `{id}` depends on itself")));
            }
            depends_on
                .entry(id.to_owned())
                .or_default()
                .insert(dep.to_owned());
        }
        Ok(())
    };
    // Both forms as (where it is, its id, the layer): a list (`layers[K]`, the id in `id`,
    // `name` or `layer`, or the entry itself) or an object keyed by id (`layers.ID`).
    let entries: Vec<(String, String, &Value)> = match layer_plan.get("layers") {
        Some(Value::Array(list)) => (list.iter().enumerate())
            .map(|(k, layer)| {
                let id = layer.as_str().or_else(|| {
                    ["id", "name", "layer"]
                        .iter()
                        .find_map(|key| layer.get(*key).and_then(Value::as_str))
                });
                let id = id.ok_or_else(|| fail(path, format!("`layers[{k}]` has no `id`")))?;
                Ok((format!("layers[{k}]"), id.to_owned(), layer))
            })
            .collect::<Result<_, BreakdownError>>()?,
        Some(Value::Object(map)) => (map.iter())
            .map(|(id, layer)| (format!("layers.{id}"), id.clone(), layer))
            .collect(),
        Some(_) => return Err(fail(path, "`layers` is neither a list nor an object")),
        None => Vec::new(),
    };
    for (at, id, layer) in entries {
        let tasks = layer.get("tasks").and_then(Value::as_array);
        for (t, task) in tasks.into_iter().flatten().enumerate() {
            if let (Some(task_id), Some(deps)) = (
                task.get("id").and_then(Value::as_str),
                task.get("depends_on"),
            ) {
                add(task_id, deps, &format!("{at}.tasks[{t}].depends_on"))?;
            }
        }
        if let Some(graph) = layer.get("dependencies") {
            graphs.push((format!("{at}.dependencies"), graph));
        }
        layers.push(id);
    }
    if let Some(graph) = layer_plan.get("dependency_graph") {
        graphs.push(("dependency_graph".to_owned(), graph));
    }
    for (at, graph) in graphs {
        let graph = graph
            .as_object()
            .ok_or_else(|| fail(path, format!("`{at}` is not an object of task id → [ids]")))?;
        for (id, deps) in graph {
            if !deps
                .as_array()
                .is_some_and(|l| l.iter().all(Value::is_string))
            {
                return Err(fail(path, format!("`{at}.{id}` is not a list of task ids")));
            }
            if !files_of.contains_key(id) {
                return Err(fail(
                    path,
                    format!("`{at}` names `{id}`, which no task file has"),
                ));
            }
            add(id, deps, &format!("{at}.{id}"))?;
        }
    }
    Ok((layers, depends_on))
}

/// The task file's sections the spec shows before its verification steps, with their titles.
const WHAT_TO_DO: [(&str, &str); 4] = [
    ("objective", "Objective"),
    ("requirements", "Requirements"),
    ("test-requirements", "Tests to write first"),
    ("files-to-create", "Files to create"),
];

/// And after them.
const WHAT_IT_WORKS_WITH: [(&str, &str); 3] = [
    ("context", "Context"),
    ("dependencies", "Interfaces it may use"),
    ("exports", "Interfaces it must provide"),
];

/// One task file.
fn read_task(path: &Path) -> Result<Task, BreakdownError> {
    let text = read_text(path)?;
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
    // The id names the task's branch and its worktree's folder: never a path.
    if let Some(problem) = plan_types::task_id_problem(&id)
        && let Some(node) = child(meta, "id")
    {
        return Err(fail_at(
            path,
            node,
            format!("<meta><id> `{id}` cannot be a task id: {problem}"),
        ));
    }
    let name = field("name")?;
    let layer = field("layer")?;
    let priority = match child(meta, "priority").map(text_of) {
        None => 99,
        Some(text) => text
            .parse()
            .map_err(|_| fail(path, format!("<meta><priority> `{text}` is not a number")))?,
    };
    let mut checks = Vec::new();
    let mut shell_checks = Vec::new();
    let mut run = Vec::new();
    let mut by_hand = Vec::new();
    for step in child(root, "verification")
        .into_iter()
        .flat_map(|v| v.children())
        .filter(|n| n.is_element() && n.tag_name().name() == "step")
    {
        let line = text_of(step);
        let read = checks_of(&line);
        if read.checks.is_empty() {
            by_hand.push(line);
        } else {
            let at = document.text_pos_at(step.range().start).row;
            shell_checks.extend(
                (read.checks.iter())
                    .filter_map(shell_command)
                    .map(|command| (at, command)),
            );
            checks.extend(read.checks);
            run.push(line.clone());
            if let Some(rest) = read.by_hand {
                by_hand.push(rest);
            }
        }
    }

    let mut spec = format!("Task {id}: {name}\n");
    let mut facts = vec![format!("Layer: {layer}")];
    if let Some(priority) = child(meta, "priority").map(text_of) {
        facts.push(format!("Priority: {priority}"));
    }
    if let Some(files) = child(meta, "estimated-files").map(text_of) {
        facts.push(format!("Estimated files: {files}"));
    }
    spec.push_str(&format!("{}\n", facts.join(" · ")));
    let list = |items: &[String]| {
        items
            .iter()
            .map(|i| format!("- {}", i.replace('\n', "\n  ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (tag, title) in WHAT_TO_DO {
        if let Some(node) = child(root, tag) {
            section(&mut spec, title, node);
        }
    }
    if !run.is_empty() {
        spec.push_str(&format!(
            "\n## Verification (plan-cli runs these after each attempt)\n{}\n",
            list(&run)
        ));
    }
    if !by_hand.is_empty() {
        spec.push_str(&format!(
            "\n## Also check (plan-cli cannot run these: make sure of them yourself)\n{}\n",
            list(&by_hand)
        ));
    }
    for (tag, title) in WHAT_IT_WORKS_WITH {
        if let Some(node) = child(root, tag) {
            section(&mut spec, title, node);
        }
    }
    // Any other element the file has, under its own name.
    for node in root.children().filter(|n| n.is_element()) {
        let tag = node.tag_name().name();
        let shown = (WHAT_TO_DO.iter().chain(&WHAT_IT_WORKS_WITH)).any(|(known, _)| *known == tag);
        if !shown && tag != "meta" && tag != "verification" {
            section(&mut spec, &label_of(tag), node);
        }
    }
    Ok(Task {
        id,
        name,
        layer,
        priority,
        checks,
        shell_checks,
        file: path.to_path_buf(),
        spec,
    })
}

/// `prd-excerpt` → `PRD excerpt`; `tech-stack` → `Tech stack`.
fn label_of(tag: &str) -> String {
    let words: Vec<String> = tag
        .split(['-', '_'])
        .enumerate()
        .map(|(i, word)| match word {
            "prd" | "api" | "ui" | "id" | "url" => word.to_ascii_uppercase(),
            _ if i == 0 => {
                let mut chars = word.chars();
                chars.next().map_or_else(String::new, |c| {
                    c.to_uppercase().collect::<String>() + chars.as_str()
                })
            }
            _ => word.to_owned(),
        })
        .collect();
    words.join(" ")
}

/// An element's attributes as the spec shows them: `name="Base" type="…"` → `Base (…)`, and
/// the others as `key: value`.
fn attributes_of(node: roxmltree::Node<'_, '_>) -> String {
    let mut head = Vec::new();
    let mut rest = Vec::new();
    for attribute in node.attributes() {
        match attribute.name() {
            "id" | "name" => head.push(attribute.value().to_owned()),
            key => rest.push(format!("{key}: {}", attribute.value())),
        }
    }
    match (head.is_empty(), rest.is_empty()) {
        (true, true) => String::new(),
        (false, true) => head.join(" "),
        (true, false) => format!("({})", rest.join(", ")),
        (false, false) => format!("{} ({})", head.join(" "), rest.join(", ")),
    }
}

/// A section of the spec: `## TITLE`, then the element's text, or each child element with
/// its label and attributes (a child with several lines of text, or an interface, as a
/// block).
fn section(spec: &mut String, title: &str, node: roxmltree::Node<'_, '_>) {
    let children: Vec<_> = node.children().filter(|n| n.is_element()).collect();
    let mut body = String::new();
    if children.is_empty() {
        body = text_of(node);
    }
    for item in children {
        let text = text_of(item);
        let tag = item.tag_name().name();
        let attributes = attributes_of(item);
        let kind = match tag {
            "requirement" | "test" | "file" | "criterion" | "interface" => String::new(),
            _ => label_of(tag),
        };
        let label = match (kind.is_empty(), attributes.is_empty()) {
            (true, true) => String::new(),
            (true, false) => attributes,
            (false, true) => kind,
            (false, false) => format!("{kind} {attributes}"),
        };
        if tag == "interface"
            || (text.contains('\n') && !label.is_empty() && tag != "requirement" && tag != "test")
        {
            body.push_str(&format!("\n### {label}\n```\n{text}\n```\n"));
        } else if label.is_empty() {
            body.push_str(&format!("- {}\n", text.replace('\n', "\n  ")));
        } else {
            body.push_str(&format!("- {label}: {}\n", text.replace('\n', "\n  ")));
        }
    }
    let body = body.trim();
    if !body.is_empty() {
        spec.push_str(&format!("\n## {title}\n{body}\n"));
    }
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
    // The common indentation, in spaces and tabs only (a no-break space is text).
    let margin = |l: &str| l.len() - l.trim_start_matches([' ', '\t']).len();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| margin(l))
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| {
            l.get(indent..)
                .unwrap_or_else(|| l.trim_start_matches([' ', '\t']))
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_owned()
}

/// What a `<verification><step>` says: the checks plan-cli runs, and what is left for the
/// implementer to make sure of.
#[derive(Debug, Default, PartialEq)]
struct Read {
    /// Checks in the form of a task's `verify`.
    checks: Vec<Value>,
    /// What of the step no check covers (a described outcome), for the spec.
    by_hand: Option<String>,
}

/// Reads one verification step in the forms the original writes:
/// - ``Run: `CMD` - OUTCOME`` and `Run: CMD - OUTCOME` (without backticks): the command runs
///   and must exit 0; each backticked command before the outcome is a check of its own;
/// - an OUTCOME that names the output (`prints X`, `outputs X`, `returns X`, `shows X`,
///   `→ X`, `-> X`, with X backticked, quoted or one word) also checks the output holds X;
///   another outcome ("all tests pass") is for the implementer to make sure of;
/// - ``Verify: `PATH` exports A and B``, ``Check: `PATH` contains TEXT``, ``Verify: `PATH`
///   exists``: a file check: the file exists (`ls -d`), and holds each name or the text
///   (`cat`, then the output check), as the original's verifier greps it;
/// - ``Verify: `CMD` returns `X` ``: a command, as for `Run:`;
/// - anything else (`Check: router.routes contains 5 routes`, `Verify: All tests pass`) is
///   not a check.
///
/// A command runs without a shell (split into words as a shell would) unless it needs one
/// (`|`, `&&`, `;`, `>`, `$`, globs, …): then `sh -c`. A command with a breakdown template's
/// placeholder (`{TARGET_DIR}`) or run `(in background)` is not a check.
fn checks_of(line: &str) -> Read {
    let mut read = Read::default();
    let Some((kind, rest)) = line.split_once(':') else {
        return read;
    };
    let kind = kind.trim().to_ascii_lowercase();
    if !["run", "verify", "check"].contains(&kind.as_str()) {
        return read;
    }
    let (subject, outcome) = split_outcome(rest.trim());
    let spans = backticked(subject);
    let expected = outcome.and_then(expected_output);
    // What follows the first backticked span.
    let wording_after = subject.splitn(3, '`').nth(2).unwrap_or("");
    if spans.is_empty() {
        if kind != "run" {
            return read;
        }
        let command = subject.trim();
        if let Some(check) = command_check(command) {
            read.checks.push(check);
        }
    } else if kind != "run" && {
        // A file: a path-like span alone, or any span the wording says is a file's.
        let after = wording_after.trim_start().to_ascii_lowercase();
        let file_wording = ["contains ", "exports ", "exists", "is present"]
            .iter()
            .any(|w| after.starts_with(w))
            && !spans[0].contains(char::is_whitespace);
        file_wording
            || (spans.len() == 1 && after.is_empty() && is_path(&spans[0]))
            || (spans.len() == 1 && is_path(&spans[0]) && outcome.is_none())
    } {
        let path = spans[0].as_str();
        if Path::new(path).is_absolute() || path.split('/').any(|part| part == "..") {
            // A file check looks in the worktree only.
            read.by_hand = Some(line.to_owned());
            return read;
        }
        let wording = wording_after.trim();
        let wording = if wording.is_empty() {
            outcome.unwrap_or("")
        } else {
            wording
        };
        read.checks.push(json!({"argv": ["ls", "-d", "--", path]}));
        let lower = wording.to_ascii_lowercase();
        if let Some(names) = lower.strip_prefix("exports ").map(|_| &wording[8..]) {
            for name in exported_names(names) {
                read.checks
                    .push(json!({"argv": ["cat", "--", path], "contains": name}));
            }
        } else if let Some(text) = lower.strip_prefix("contains ").map(|_| &wording[9..]) {
            let text = literal(text).unwrap_or_else(|| text.trim().to_owned());
            read.checks
                .push(json!({"argv": ["cat", "--", path], "contains": text}));
        } else if !wording.is_empty() && !["exists", "is present"].contains(&lower.as_str()) {
            read.by_hand = Some(line.to_owned());
        }
        return read;
    } else {
        // Several commands are joined by `and`, `then`, `,` or `;`; a span after other words
        // (``Run: `pytest` from `backend/` ``) is not a command, and the step is left to the
        // implementer as well.
        let parts: Vec<&str> = subject.split('`').collect();
        for (k, command) in parts.iter().skip(1).step_by(2).enumerate() {
            let between = parts[2 * k].trim().trim_matches(|c| c == ',' || c == ';');
            if k > 0 && !["", "and", "then", "and then", "&&"].contains(&between.trim()) {
                read.by_hand = Some(line.to_owned());
                break;
            }
            if let Some(check) = command_check(command) {
                read.checks.push(check);
            }
        }
    }
    if read.checks.is_empty() {
        return read;
    }
    match (expected, outcome) {
        (Some(text), _) => {
            if let Some(last) = read.checks.last_mut() {
                last["contains"] = json!(text);
            }
        }
        (None, Some(outcome)) if !outcome.trim().is_empty() => {
            read.by_hand = Some(line.to_owned());
        }
        _ => {}
    }
    read
}

/// The step's subject and its outcome: what follows ` - `, ` — `, `→`, `->` outside
/// backticks, or an outcome verb after the last backticked span (``Verify: `cat f` shows
/// `w` ``).
fn split_outcome(text: &str) -> (&str, Option<&str>) {
    // Inside backticks, or quotes outside them (`python3 -c "print('a - b')"`), a separator
    // is the command's.
    let mut inside: Option<char> = None;
    for (at, c) in text.char_indices() {
        match inside {
            Some(open) if c == open => {
                inside = None;
                continue;
            }
            Some(_) => continue,
            None if c == '`' || c == '"' || c == '\'' => {
                inside = Some(c);
                continue;
            }
            None => {}
        }
        for separator in [" - ", " — ", " – "] {
            if text[at..].starts_with(separator) {
                return (&text[..at], Some(text[at + separator.len()..].trim()));
            }
        }
        for arrow in ["→", "->"] {
            if text[at..].starts_with(arrow) {
                return (&text[..at], Some(text[at..].trim()));
            }
        }
    }
    // ``Verify: `CMD` returns `X` ``: the outcome follows the first span.
    if text.starts_with('`')
        && let Some(end) = text[1..].find('`')
    {
        let after = text[end + 2..].trim();
        let first = after.split_whitespace().next().unwrap_or("");
        if OUTCOME_VERBS.contains(&first) {
            return (&text[..end + 2], Some(after));
        }
    }
    (text, None)
}

/// The words that name a command's output in an outcome.
const OUTCOME_VERBS: [&str; 7] = ["prints", "outputs", "returns", "shows", "→", "->", "echoes"];

/// The output an outcome names: `prints 5`, ``returns `ok` ``, `→ "x y"`.
fn expected_output(outcome: &str) -> Option<String> {
    let outcome = outcome.trim();
    let first = outcome.split_whitespace().next()?;
    if !OUTCOME_VERBS.contains(&first) {
        return None;
    }
    literal(outcome[first.len()..].trim())
}

/// A literal in an outcome: backticked, double-quoted, or one word (`5`, `OK`).
fn literal(text: &str) -> Option<String> {
    let text = text.trim().trim_end_matches('.');
    for quote in ['`', '"'] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|t| t.strip_suffix(quote))
            && !inner.is_empty()
            && !inner.contains(quote)
        {
            return Some(inner.to_owned());
        }
    }
    (!text.is_empty() && !text.contains(char::is_whitespace)).then(|| text.to_owned())
}

/// The backticked spans of `text`, in order.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Whether a backticked span names a file (`app/models/__init__.py`, `calc.py`), not a
/// command: one word with a `/` or an extension, and no shell characters.
fn is_path(span: &str) -> bool {
    !span.contains(char::is_whitespace)
        && !span.contains(['|', '&', ';', '<', '>', '$', '(', ')', '=', '*'])
        && (span.contains('/')
            || span.rsplit_once('.').is_some_and(|(stem, ext)| {
                !stem.is_empty()
                    && ext.chars().all(|c| c.is_ascii_alphanumeric())
                    && !ext.is_empty()
            }))
}

/// `Project and ProjectStatus`, `A, B`, `Project class`: the names.
fn exported_names(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .map(|w| w.trim_matches(|c: char| "`.\"()".contains(c)))
        .filter(|w| {
            !w.is_empty()
                && ![
                    "and",
                    "the",
                    "class",
                    "classes",
                    "function",
                    "functions",
                    "enum",
                    "enums",
                    "both",
                    "type",
                    "types",
                    "constant",
                    "constants",
                ]
                .contains(w)
                && w.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
        .map(str::to_owned)
        .collect()
}

/// A command as a check: its words when it needs no shell, else `sh -c` with its text; none
/// for a command a breakdown template left a placeholder in, or run in the background.
fn command_check(command: &str) -> Option<Value> {
    let command = command.trim();
    if command.is_empty()
        || command.contains("(in background)")
        || has_template_placeholder(command)
    {
        return None;
    }
    let needs_shell = needs_shell(command)
        || command
            .split_whitespace()
            .next()
            .is_some_and(|first| first.contains('=') || SHELL_BUILTINS.contains(&first));
    // A `$` is the program's, never a plan placeholder: written `$$` in the plan.
    let escaped = |word: &str| word.replace('$', "$$");
    if !needs_shell
        && let Ok(words) = shell_words::split(command)
        && !words.is_empty()
    {
        let words: Vec<String> = words.iter().map(|w| escaped(w)).collect();
        return Some(json!({"argv": words}));
    }
    Some(json!({"argv": ["sh", "-c", escaped(command)]}))
}

/// The command a check gives `sh -c` ([`command_check`]'s), as the shell gets it (its `$$`
/// are the plan's escapes of `$`); `None` for a check that runs without a shell.
fn shell_command(check: &Value) -> Option<String> {
    match check["argv"].as_array()?.as_slice() {
        [sh, c, command] if sh == "sh" && c == "-c" => Some(command.as_str()?.replace("$$", "$")),
        _ => None,
    }
}

/// Commands that are a shell's, not programs: a check that starts with one runs in `sh -c`.
const SHELL_BUILTINS: [&str; 16] = [
    "cd", "command", "source", ".", "export", "type", "exec", "set", "unset", "ulimit", "umask",
    "alias", "eval", "hash", "pushd", "popd",
];

/// Whether a shell would read more into `command` than its words: an operator, a
/// redirection, an expansion or a glob outside quotes (`$` and `` ` `` inside double quotes
/// too), or a backslash.
fn needs_shell(command: &str) -> bool {
    let mut quote = None;
    for c in command.chars() {
        match (quote, c) {
            (None, '\\' | '\n') => return true,
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (Some('"'), '$' | '`' | '\\') => return true,
            (None, '|' | '&' | ';' | '<' | '>' | '$' | '`' | '*' | '?' | '[' | ']' | '{' | '}')
            | (None, '~' | '(' | ')' | '#' | '!') => return true,
            _ => {}
        }
    }
    false
}

/// `{TARGET_DIR}`, `{BACKEND_PORT}`: a breakdown template's placeholder, left unfilled.
fn has_template_placeholder(command: &str) -> bool {
    // (`${HOME}` is the shell's.)
    let parts: Vec<&str> = command.split('{').collect();
    parts.iter().skip(1).zip(&parts).any(|(after, before)| {
        !before.ends_with('$')
            && after.split_once('}').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks(line: &str) -> Vec<Value> {
        checks_of(line).checks
    }

    #[test]
    fn run_steps_with_and_without_backticks_run_their_commands_without_a_shell() {
        assert_eq!(
            checks("Run: `pytest tests/x.py -v` - all tests pass"),
            vec![json!({"argv": ["pytest", "tests/x.py", "-v"]})]
        );
        assert_eq!(
            checks("Run: pytest tests/api/test_tasks.py -v"),
            vec![json!({"argv": ["pytest", "tests/api/test_tasks.py", "-v"]})]
        );
        assert_eq!(
            checks(r#"Run: python -c "from src.api.tasks import router""#),
            vec![json!({"argv": ["python", "-c", "from src.api.tasks import router"]})]
        );
        assert_eq!(
            checks(r#"Run: test -f Makefile && echo "OK""#),
            vec![json!({"argv": ["sh", "-c", "test -f Makefile && echo \"OK\""]})]
        );
        assert_eq!(
            checks(r#"Run: python3 -c 'print(1); print("$x")' | grep 1"#),
            vec![json!({"argv": ["sh", "-c", r#"python3 -c 'print(1); print("$$x")' | grep 1"#]})]
        );
        assert_eq!(
            checks(r#"Run: python3 -c 'import a; print("$x")'"#),
            vec![json!({"argv": ["python3", "-c", r#"import a; print("$$x")"#]})]
        );
        assert_eq!(
            checks(r#"Run: echo "$HOME""#),
            vec![json!({"argv": ["sh", "-c", r#"echo "$$HOME""#]})]
        );
        // The shell's `${HOME}` is neither a plan placeholder nor a template's.
        assert_eq!(
            checks("Run: echo ${HOME}"),
            vec![json!({"argv": ["sh", "-c", "echo $${HOME}"]})]
        );
        // Quotes keep a separator inside the command.
        assert_eq!(
            checks(r#"Run: python3 -c "print('a - b')" - prints ok"#),
            vec![json!({"argv": ["python3", "-c", "print('a - b')"], "contains": "ok"})]
        );
        // A span after other words is not a command.
        let read = checks_of("Run: `pytest tests/` from `backend/`");
        assert_eq!(read.checks, vec![json!({"argv": ["pytest", "tests/"]})]);
        assert!(read.by_hand.is_some());
        assert_eq!(
            checks("Run: `ruff check a.py` and `mypy a.py` - no errors"),
            vec![
                json!({"argv": ["ruff", "check", "a.py"]}),
                json!({"argv": ["mypy", "a.py"]})
            ]
        );
    }

    #[test]
    fn an_outcome_that_names_the_output_is_checked() {
        assert_eq!(
            checks("Run: `python3 cli.py 2 3` - prints 5"),
            vec![json!({"argv": ["python3", "cli.py", "2", "3"], "contains": "5"})]
        );
        assert_eq!(
            checks("Run: curl -s localhost/health - returns OK"),
            vec![json!({"argv": ["curl", "-s", "localhost/health"], "contains": "OK"})]
        );
        assert_eq!(
            checks("Run: `python3 cli.py 2 3` → `5`"),
            vec![json!({"argv": ["python3", "cli.py", "2", "3"], "contains": "5"})]
        );
        assert_eq!(
            checks("Verify: `curl -s localhost/health` returns `ok`"),
            vec![json!({"argv": ["curl", "-s", "localhost/health"], "contains": "ok"})]
        );
        assert_eq!(
            checks(r#"Run: `./greet` - outputs "hello world""#),
            vec![json!({"argv": ["./greet"], "contains": "hello world"})]
        );
        // A described outcome: the exit status is checked, the rest is the implementer's.
        let read = checks_of("Run: curl http://localhost:3000 - returns HTML page");
        assert_eq!(
            read.checks,
            vec![json!({"argv": ["curl", "http://localhost:3000"]})]
        );
        assert!(read.by_hand.is_some());
    }

    #[test]
    fn a_backticked_path_is_a_file_check() {
        assert_eq!(
            checks("Verify: `calc/__init__.py` exports add"),
            vec![
                json!({"argv": ["ls", "-d", "--", "calc/__init__.py"]}),
                json!({"argv": ["cat", "--", "calc/__init__.py"], "contains": "add"})
            ]
        );
        assert_eq!(
            checks("Check: `app/models/__init__.py` exports Project and ProjectStatus"),
            vec![
                json!({"argv": ["ls", "-d", "--", "app/models/__init__.py"]}),
                json!({"argv": ["cat", "--", "app/models/__init__.py"], "contains": "Project"}),
                json!({"argv": ["cat", "--", "app/models/__init__.py"], "contains": "ProjectStatus"})
            ]
        );
        assert_eq!(
            checks("Check: `app/models/__init__.py` exports Project class"),
            vec![
                json!({"argv": ["ls", "-d", "--", "app/models/__init__.py"]}),
                json!({"argv": ["cat", "--", "app/models/__init__.py"], "contains": "Project"})
            ]
        );
        assert_eq!(
            checks("Verify: `README.md` contains `plan-cli run`"),
            vec![
                json!({"argv": ["ls", "-d", "--", "README.md"]}),
                json!({"argv": ["cat", "--", "README.md"], "contains": "plan-cli run"})
            ]
        );
        assert_eq!(
            checks("Verify: `calc.py` exports `add()`"),
            vec![
                json!({"argv": ["ls", "-d", "--", "calc.py"]}),
                json!({"argv": ["cat", "--", "calc.py"], "contains": "add"})
            ]
        );
        assert_eq!(
            checks("Verify: `Makefile` Exists"),
            vec![json!({"argv": ["ls", "-d", "--", "Makefile"]})]
        );
        assert_eq!(
            checks("Verify: `Makefile` exists"),
            vec![json!({"argv": ["ls", "-d", "--", "Makefile"]})]
        );
    }

    #[test]
    fn prose_and_unfilled_templates_are_not_checks() {
        for line in [
            "Check: router.routes contains 5 routes",
            "Verify: All tests pass",
            "Check: Some condition",
            "Run migration command - completes without error",
            "Run: make dev (in background)",
            "Run: ls -la {TARGET_DIR} - shows template files",
            "Review tech stack decision with team",
        ] {
            assert_eq!(checks(line), Vec::<Value>::new(), "{line}");
        }
    }

    #[test]
    fn shell_builtins_and_paths_outside_are_not_taken_for_what_they_are_not() {
        assert_eq!(
            checks("Run: command -v python3"),
            vec![json!({"argv": ["sh", "-c", "command -v python3"]})]
        );
        assert_eq!(
            checks("Check: `make test` contains ok"),
            vec![json!({"argv": ["make", "test"]})],
            "a command with words is not a file"
        );
        for line in [
            "Verify: `/etc/passwd` contains root",
            "Verify: `../x.py` exists",
        ] {
            let read = checks_of(line);
            assert!(read.checks.is_empty() && read.by_hand.is_some(), "{line}");
        }
    }

    #[test]
    fn the_shell_command_of_a_check_is_what_sh_gets() {
        let shelled = checks(r#"Run: echo "$HOME" | grep x"#);
        assert_eq!(
            shell_command(&shelled[0]).as_deref(),
            Some(r#"echo "$HOME" | grep x"#)
        );
        assert_eq!(shell_command(&checks("Run: pytest -q")[0]), None);
    }

    #[test]
    fn text_keeps_characters_whole_whatever_the_indentation() {
        let xml = "<a>\n  x\n\u{a0}y\n\u{3000}z\n</a>";
        let document = roxmltree::Document::parse(xml).unwrap();
        // (No common margin of spaces: nothing is cut, and no character is cut in two.)
        assert_eq!(text_of(document.root_element()), "x\n\u{a0}y\n\u{3000}z");
        let document = roxmltree::Document::parse("<a>\n    a\n  b\n</a>").unwrap();
        assert_eq!(text_of(document.root_element()), "a\nb");
    }

    #[test]
    fn labels_read_as_words() {
        assert_eq!(label_of("prd-excerpt"), "PRD excerpt");
        assert_eq!(label_of("template-base"), "Template base");
        assert_eq!(label_of("interface"), "Interface");
    }
}
