//! The engine's modules form no cycle of imports (docs/ARCHITECTURE.md says which uses which):
//! a module that another one builds on never reaches back into it, so each can be read, and
//! changed, from the bottom up.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module of `src/` and the other modules it names as `crate::MODULE`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut texts = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("src/ reads") {
        let path = entry.expect("an entry of src/").path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path
                .file_stem()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            texts.insert(
                name,
                std::fs::read_to_string(&path).expect("a module reads"),
            );
        }
    }
    assert!(
        texts.len() > 10,
        "the modules were found in {}",
        src.display()
    );
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    texts
        .into_iter()
        .map(|(name, text)| {
            let named = text
                .match_indices("crate::")
                .filter_map(|(at, prefix)| {
                    let rest = &text[at + prefix.len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let module = &rest[..end];
                    (module != name && modules.contains(module)).then(|| module.to_owned())
                })
                .collect();
            (name, named)
        })
        .collect()
}

/// A cycle through `from`, as the modules along it, if there is one.
fn cycle_from(
    from: &str,
    graph: &BTreeMap<String, BTreeSet<String>>,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|module| module == from) {
        let mut cycle = path[start..].to_vec();
        cycle.push(from.to_owned());
        return Some(cycle);
    }
    if done.contains(from) {
        return None;
    }
    path.push(from.to_owned());
    for next in &graph[from] {
        if let Some(cycle) = cycle_from(next, graph, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(from.to_owned());
    None
}

#[test]
fn no_module_of_the_engine_imports_one_that_imports_it_back() {
    let graph = imports();
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(module, &graph, &mut Vec::new(), &mut done) {
            panic!(
                "the modules import each other in a cycle: {}",
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn the_scan_sees_imports_in_use_lines_and_in_paths() {
    let graph = imports();
    // `use crate::block::…` at the top of run.rs, and `crate::task::ContextUpdate` in a field
    // of program.rs: both count.
    assert!(graph["run"].contains("block"));
    assert!(graph["program"].contains("task"));
    assert!(!graph["tool"].contains("run"));
}
