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
        .iter()
        .map(|(name, text)| (name.clone(), named_modules(text, name, &modules)))
        .collect()
}

/// The modules of `modules` other than `own` that `text` names after `crate::`, alone
/// (`crate::block::NodeDone`) or in a group (`use crate::{admit::Gate, call};`).
fn named_modules(text: &str, own: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let leading_word = |text: &str| -> String {
        let text = text.trim_start();
        let end = text
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(text.len());
        text[..end].to_owned()
    };
    let mut named = BTreeSet::new();
    for (at, prefix) in text.match_indices("crate::") {
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Each item of the group at its own depth: `a::{b, c}` names `a` only.
            let mut depth = 0;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        named.insert(leading_word(&group[item_start..i]));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.insert(leading_word(&group[item_start..i]));
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            named.insert(leading_word(rest));
        }
    }
    named.retain(|module| module != own && modules.contains(module));
    named
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
    assert!(!graph["retry"].contains("run"));
    // The tool port is plan-ports', not a module of the engine.
    assert!(!graph.contains_key("tool"));
}

#[test]
fn grouped_imports_name_each_module_of_the_group() {
    let modules: BTreeSet<String> = ["admit", "block", "call", "guard", "tool"]
        .map(String::from)
        .into();
    let text = "use crate::{\n    admit::{Admission, Gate},\n    call,\n    tool::Tool,\n};\n\
                fn f() { crate::block::run(); crate::guard::Guard::new(); }";
    let named = named_modules(text, "block", &modules);
    let expected: BTreeSet<String> = ["admit", "call", "guard", "tool"].map(String::from).into();
    assert_eq!(named, expected);
}
