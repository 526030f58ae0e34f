use serde_json::{Map, Value};

use crate::{ParseError, Placeholder, ResolveError, Scope, Template};

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A subtree without placeholders, stored resolved.
    Literal(Value),
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

    /// True when the value holds no placeholder at all.
    pub fn is_literal(&self) -> bool {
        matches!(self.root, Node::Literal(_))
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
}

fn compile_node(value: &Value, pointer: &mut String) -> Result<Node, ParseError> {
    let node = match value {
        Value::String(text) => {
            let template = Template::parse(text).map_err(|mut error| {
                error.pointer.clone_from(pointer);
                error
            })?;
            if template.is_literal() && !text.contains('$') {
                Node::Literal(value.clone())
            } else {
                Node::String(template)
            }
        }
        Value::Array(items) => {
            let mut nodes = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                nodes.push(compile_node(item, pointer)?);
                pointer.truncate(len);
            }
            if nodes.iter().all(|n| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Array(nodes)
            }
        }
        Value::Object(map) => {
            let mut entries = Vec::with_capacity(map.len());
            for (key, item) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                entries.push((key.clone(), compile_node(item, pointer)?));
                pointer.truncate(len);
            }
            if entries.iter().all(|(_, n)| matches!(n, Node::Literal(_))) {
                Node::Literal(value.clone())
            } else {
                Node::Object(entries)
            }
        }
        other => Node::Literal(other.clone()),
    };
    Ok(node)
}

fn collect_at<'a>(node: &'a Node, pointer: &mut String, out: &mut Vec<(String, &'a Placeholder)>) {
    match node {
        Node::Literal(_) => {}
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
                pointer.push('/');
                pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
                collect_at(item, pointer, out);
                pointer.truncate(len);
            }
        }
    }
}

fn collect<'a>(node: &'a Node, out: &mut Vec<&'a Placeholder>) {
    match node {
        Node::Literal(_) => {}
        Node::String(template) => out.extend(template.placeholders()),
        Node::Array(items) => items.iter().for_each(|n| collect(n, out)),
        Node::Object(entries) => entries.iter().for_each(|(_, n)| collect(n, out)),
    }
}

fn resolve_node(node: &Node, scope: &Scope<'_>) -> Result<Value, ResolveError> {
    Ok(match node {
        Node::Literal(value) => value.clone(),
        Node::String(template) => template.resolve(scope)?,
        Node::Array(items) => Value::Array(
            items
                .iter()
                .map(|n| resolve_node(n, scope))
                .collect::<Result<_, _>>()?,
        ),
        Node::Object(entries) => {
            let mut map = Map::new();
            for (key, n) in entries {
                map.insert(key.clone(), resolve_node(n, scope)?);
            }
            Value::Object(map)
        }
    })
}
