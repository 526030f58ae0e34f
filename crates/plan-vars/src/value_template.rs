use std::sync::Arc;

use serde_json::{Map, Value};

use crate::{ParseError, Placeholder, ResolveError, Scope, Template};

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A subtree without placeholders, stored resolved. Boxed: a large plan holds a template
    /// per step, and most share their arguments instead (`Shared`).
    Literal(Box<Value>),
    /// Arguments without placeholders, shared with whoever holds them (the plan).
    Shared(Arc<Map<String, Value>>),
    String(Template),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

/// A JSON value (a step's `args`) with every string parsed once, ready to resolve many times.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueTemplate {
    root: Node,
}

impl ValueTemplate {
    /// Parses every string in `value`. Object keys are taken literally.
    /// A malformed placeholder is reported with the JSON pointer of its string.
    pub fn compile(value: &Value) -> Result<ValueTemplate, ParseError> {
        let mut pointer = String::new();
        Ok(ValueTemplate {
            root: compile_node(value, &mut pointer)?,
        })
    }

    /// [`ValueTemplate::compile`] for an object (a step's `args`). When it holds no placeholder
    /// the template shares it instead of copying it.
    pub fn compile_shared(args: &Arc<Map<String, Value>>) -> Result<ValueTemplate, ParseError> {
        let root = match parse_entries(args, &mut String::new())? {
            Some(node) => node,
            None => Node::Shared(args.clone()),
        };
        Ok(ValueTemplate { root })
    }

    /// True when the value holds no placeholder at all.
    pub fn is_literal(&self) -> bool {
        matches!(self.root, Node::Literal(_) | Node::Shared(_))
    }

    /// Every placeholder, in document order.
    pub fn placeholders(&self) -> Vec<&Placeholder> {
        let mut out = Vec::new();
        collect(&self.root, &mut out);
        out
    }

    /// Every placeholder with the JSON pointer of the string it is in, in document order.
    pub fn placeholders_at(&self) -> Vec<(String, &Placeholder)> {
        let mut out = Vec::new();
        collect_at(&self.root, &mut String::new(), &mut out);
        out
    }

    /// Resolves every placeholder; the first one that does not resolve is the error.
    pub fn resolve(&self, scope: &Scope<'_>) -> Result<Value, ResolveError> {
        resolve_node(&self.root, scope)
    }

    /// The placeholder that is the whole string at JSON pointer `pointer` (and so gives its
    /// value with its own type), if the string there is exactly one.
    pub fn whole_placeholder_at(&self, pointer: &str) -> Option<&Placeholder> {
        let mut node = &self.root;
        for token in pointer_tokens(pointer) {
            node = match node {
                Node::Array(items) => items.get(token.parse::<usize>().ok()?)?,
                Node::Object(entries) => &entries.iter().find(|(key, _)| *key == token)?.1,
                _ => return None,
            };
        }
        match node {
            Node::String(template) => template.as_placeholder(),
            _ => None,
        }
    }
}

fn compile_node(value: &Value, pointer: &mut String) -> Result<Node, ParseError> {
    Ok(match parse_strings(value, pointer)? {
        Some(node) => node,
        None => Node::Literal(Box::new(compact(value))),
    })
}

/// Parses every string under `value`; `None` when none holds a placeholder, so that the
/// outermost literal subtree is copied once (not once per level).
fn parse_strings(value: &Value, pointer: &mut String) -> Result<Option<Node>, ParseError> {
    let node = match value {
        Value::String(text) => {
            let template = Template::parse(text).map_err(|mut error| {
                error.pointer.clone_from(pointer);
                error
            })?;
            if template.is_literal() && !text.contains('$') {
                return Ok(None);
            }
            Node::String(template)
        }
        Value::Array(items) => {
            let mut nodes = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                nodes.push(parse_strings(item, pointer)?);
                pointer.truncate(len);
            }
            if nodes.iter().all(Option::is_none) {
                return Ok(None);
            }
            Node::Array(
                nodes
                    .into_iter()
                    .zip(items)
                    .map(|(node, item)| {
                        node.unwrap_or_else(|| Node::Literal(Box::new(compact(item))))
                    })
                    .collect(),
            )
        }
        Value::Object(map) => return parse_entries(map, pointer),
        _ => return Ok(None),
    };
    Ok(Some(node))
}

/// [`parse_strings`] for an object's entries.
fn parse_entries(
    map: &Map<String, Value>,
    pointer: &mut String,
) -> Result<Option<Node>, ParseError> {
    let mut nodes = Vec::with_capacity(map.len());
    for (key, item) in map {
        let len = pointer.len();
        push_key(pointer, key);
        nodes.push(parse_strings(item, pointer)?);
        pointer.truncate(len);
    }
    if nodes.iter().all(Option::is_none) {
        return Ok(None);
    }
    Ok(Some(Node::Object(
        nodes
            .into_iter()
            .zip(map)
            .map(|(node, (key, item))| {
                (
                    key.clone(),
                    node.unwrap_or_else(|| Node::Literal(Box::new(compact(item)))),
                )
            })
            .collect(),
    )))
}

/// A copy of `value` whose objects have room for exactly their entries.
///
/// serde_json's objects (an `IndexMap`) make room for three entries as soon as they hold one,
/// and `clone` keeps that room. Arguments are copied for every call and the copy often lives
/// on in the step's record (`echo` returns it): for 100,000 one-argument steps that room was
/// 20 MB in each copy.
pub fn compact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(compact_map(map)),
        Value::Array(items) => Value::Array(items.iter().map(compact).collect()),
        other => other.clone(),
    }
}

/// [`compact`] for an object.
pub fn compact_map(map: &Map<String, Value>) -> Map<String, Value> {
    let mut copy = Map::with_capacity(map.len());
    for (key, item) in map {
        copy.insert(key.clone(), compact(item));
    }
    copy
}

/// The tokens of a JSON pointer (RFC 6901), unescaped: `/a~1b/0` names `a/b`, then `0`. The
/// pointers a [`ValueTemplate`] gives (its placeholders', its parse errors') read back so.
pub fn pointer_tokens(pointer: &str) -> impl Iterator<Item = String> + '_ {
    pointer
        .split('/')
        .skip(1)
        .map(|token| token.replace("~1", "/").replace("~0", "~"))
}

/// Appends `/KEY` to a JSON pointer, escaped.
fn push_key(pointer: &mut String, key: &str) {
    pointer.push('/');
    pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

fn collect_at<'a>(node: &'a Node, pointer: &mut String, out: &mut Vec<(String, &'a Placeholder)>) {
    match node {
        Node::Literal(_) | Node::Shared(_) => {}
        Node::String(template) => out.extend(template.placeholders().map(|p| (pointer.clone(), p))),
        Node::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                collect_at(item, pointer, out);
                pointer.truncate(len);
            }
        }
        Node::Object(entries) => {
            for (key, item) in entries {
                let len = pointer.len();
                push_key(pointer, key);
                collect_at(item, pointer, out);
                pointer.truncate(len);
            }
        }
    }
}

fn collect<'a>(node: &'a Node, out: &mut Vec<&'a Placeholder>) {
    match node {
        Node::Literal(_) | Node::Shared(_) => {}
        Node::String(template) => out.extend(template.placeholders()),
        Node::Array(items) => items.iter().for_each(|n| collect(n, out)),
        Node::Object(entries) => entries.iter().for_each(|(_, n)| collect(n, out)),
    }
}

fn resolve_node(node: &Node, scope: &Scope<'_>) -> Result<Value, ResolveError> {
    Ok(match node {
        Node::Literal(value) => compact(value),
        Node::Shared(args) => Value::Object(compact_map(args)),
        Node::String(template) => template.resolve(scope)?,
        Node::Array(items) => Value::Array(
            items
                .iter()
                .map(|n| resolve_node(n, scope))
                .collect::<Result<_, _>>()?,
        ),
        Node::Object(entries) => {
            let mut map = Map::with_capacity(entries.len());
            for (key, n) in entries {
                map.insert(key.clone(), resolve_node(n, scope)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_compact_copy_is_equal_and_keeps_key_order() {
        let value = json!({"z": [1, {"b": null, "a": "x"}], "a": {"": {}}, "m": 1.5});
        let copy = compact(&value);
        assert_eq!(copy, value);
        assert_eq!(
            serde_json::to_string(&copy).ok(),
            serde_json::to_string(&value).ok()
        );
    }

    #[test]
    fn the_whole_placeholder_at_a_pointer_is_found_and_nothing_else() {
        let value = json!({
            "argv": ["echo", "${each}", "n=${each}"],
            "a/b": {"c~d": "${x.y}"},
            "plain": "text",
        });
        let template = ValueTemplate::compile(&value).expect("compiles");
        let at = |pointer: &str| {
            template
                .whole_placeholder_at(pointer)
                .map(|p| p.text().to_owned())
        };
        assert_eq!(at("/argv/1").as_deref(), Some("${each}"));
        assert_eq!(at("/a~1b/c~0d").as_deref(), Some("${x.y}"));
        // Text around a placeholder, literal text, containers, and paths that lead nowhere.
        for pointer in [
            "/argv/2", "/argv/0", "/plain", "/argv", "", "/argv/9", "/nope", "argv",
        ] {
            assert_eq!(at(pointer), None, "{pointer}");
        }
        let whole = ValueTemplate::compile(&json!("${v}")).expect("compiles");
        assert_eq!(
            whole.whole_placeholder_at("").map(Placeholder::text),
            Some("${v}")
        );
    }

    #[test]
    fn literal_parts_resolve_to_themselves_beside_placeholders() {
        let value = json!({"keep": {"deep": [1, "two", {"three": 3}]}, "name": "${who}"});
        let template = ValueTemplate::compile(&value).expect("compiles");
        assert!(!template.is_literal());
        assert_eq!(template.placeholders().len(), 1);
        let vars = json!({"who": "ada"});
        let vars = vars.as_object().expect("an object");
        assert_eq!(
            template.resolve(&Scope::with_vars(vars)).ok(),
            Some(json!({"keep": {"deep": [1, "two", {"three": 3}]}, "name": "ada"}))
        );
        let literal = ValueTemplate::compile(&json!({"a": [1, {"b": "c"}]})).expect("compiles");
        assert!(literal.is_literal());
        assert_eq!(
            literal.resolve(&Scope::default()).ok(),
            Some(json!({"a": [1, {"b": "c"}]}))
        );
    }

    #[test]
    fn shared_arguments_resolve_to_themselves_and_placeholders_still_compile() {
        let args = Arc::new(
            json!({"n": 1, "list": [true, null]})
                .as_object()
                .cloned()
                .expect("an object"),
        );
        let shared = ValueTemplate::compile_shared(&args).expect("compiles");
        assert!(shared.is_literal());
        assert_eq!(
            shared.resolve(&Scope::default()).ok(),
            Some(Value::Object((*args).clone()))
        );
        let with_placeholder = Arc::new(
            json!({"n": "${n}", "keep": "plain"})
                .as_object()
                .cloned()
                .expect("an object"),
        );
        let template = ValueTemplate::compile_shared(&with_placeholder).expect("compiles");
        assert!(!template.is_literal());
        let vars = json!({"n": 7});
        let vars = vars.as_object().expect("an object");
        assert_eq!(
            template.resolve(&Scope::with_vars(vars)).ok(),
            Some(json!({"n": 7, "keep": "plain"}))
        );
        // A malformed placeholder is reported with where it is, as `compile` does.
        let broken = Arc::new(
            json!({"a": {"b": "${"}})
                .as_object()
                .cloned()
                .expect("an object"),
        );
        let error = ValueTemplate::compile_shared(&broken).expect_err("an error");
        assert_eq!(error.pointer, "/a/b");
    }
}
