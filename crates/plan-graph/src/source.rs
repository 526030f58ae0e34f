//! Where things are in the plan's text: a path (`steps[2].tool`) and the byte range it names.
//!
//! The map is built from the YAML event stream (YAML 1.2 reads JSON too), only when a
//! diagnostic needs a location, so loading a large valid plan pays nothing for it.

use std::fmt;
use std::ops::Range;

use saphyr_parser::{Event, Parser, Span};

/// One step of a [`PlanPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A key of a mapping.
    Key(String),
    /// An item of a sequence.
    Index(usize),
}

/// A path into the plan document, e.g. `steps[2].depends_on[0]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PlanPath(pub Vec<PathSegment>);

impl PlanPath {
    /// The document itself.
    pub fn root() -> Self {
        PlanPath(Vec::new())
    }

    /// `steps[index]`.
    pub fn step(index: usize) -> Self {
        PlanPath::root().key("steps").index(index)
    }

    /// This path followed by a key.
    #[must_use]
    pub fn key(mut self, key: &str) -> Self {
        self.0.push(PathSegment::Key(key.to_owned()));
        self
    }

    /// This path followed by an index.
    #[must_use]
    pub fn index(mut self, index: usize) -> Self {
        self.0.push(PathSegment::Index(index));
        self
    }

    /// This path followed by a JSON pointer's tokens (`/a/0/b~1c`): a numeric token is taken
    /// as a list index. Where a schema violation or a placeholder inside `args` is placed.
    #[must_use]
    pub fn pointer(mut self, pointer: &str) -> Self {
        for token in plan_vars::pointer_tokens(pointer) {
            self.0.push(match token.parse::<usize>() {
                Ok(index) => PathSegment::Index(index),
                Err(_) => PathSegment::Key(token),
            });
        }
        self
    }
}

impl fmt::Display for PlanPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                PathSegment::Key(key) if i == 0 => write!(f, "{key}")?,
                PathSegment::Key(key) => write!(f, ".{key}")?,
                PathSegment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Keys that name the same field: a path written with one finds the text written with another.
const ALIASES: &[&[&str]] = &[
    &["id", "index", "step_id"],
    &["depends_on", "dependsOn"],
    &["expand_on", "expandOn"],
    &["expand_key", "expandKey"],
    &["result_variable", "resultVariable"],
    &["max_concurrency", "maxConcurrency"],
    &["timeout_ms", "timeoutMs"],
    &["args", "arguments"],
];

#[derive(Debug)]
enum Children {
    Scalar,
    Sequence(Vec<Node>),
    Mapping(Vec<(String, Range<usize>, Node)>),
}

#[derive(Debug)]
struct Node {
    span: Range<usize>,
    children: Children,
}

/// Byte ranges of every value and key of a document.
#[derive(Debug)]
pub struct SourceMap {
    root: Option<Node>,
    keys: Vec<(String, Range<usize>)>,
    text_len: usize,
}

impl SourceMap {
    /// Builds the map; a document the YAML parser rejects gives an empty map.
    pub fn build(text: &str) -> SourceMap {
        let offsets = CharOffsets::new(text);
        let mut builder = Builder {
            parser: Parser::new_from_str(text),
            offsets: &offsets,
            keys: Vec::new(),
        };
        let root = builder.document();
        SourceMap {
            root,
            keys: builder.keys,
            text_len: text.len(),
        }
    }

    /// The range of the value at `path`, or of its deepest ancestor that exists.
    pub fn value(&self, path: &PlanPath) -> Option<Range<usize>> {
        self.walk(path).map(|(node, _)| node.span.clone())
    }

    /// The range of the key that ends `path` (its value's, for an index), or of the deepest
    /// ancestor that exists.
    pub fn key(&self, path: &PlanPath) -> Option<Range<usize>> {
        self.walk(path)
            .map(|(node, key)| key.unwrap_or_else(|| node.span.clone()))
    }

    /// The key named `name` written nearest to `offset`: serde reports an unknown field by
    /// position, and this finds the key it means.
    pub fn key_near(&self, name: &str, offset: usize) -> Option<Range<usize>> {
        self.keys
            .iter()
            .filter(|(key, _)| key == name)
            .min_by_key(|(_, span)| span.start.abs_diff(offset).min(span.end.abs_diff(offset)))
            .map(|(_, span)| span.clone())
    }

    /// The path of the deepest value (or key) whose range holds `offset`: where a problem
    /// reported by position is, for a reader who sees no text (a model).
    pub fn path_at(&self, offset: usize) -> Option<PlanPath> {
        let mut node = self.root.as_ref()?;
        if !node.span.contains(&offset) {
            return None;
        }
        let mut path = PlanPath::root();
        loop {
            let next = match &node.children {
                Children::Scalar => None,
                Children::Sequence(items) => (items.iter().enumerate())
                    .find(|(_, item)| item.span.contains(&offset))
                    .map(|(i, item)| (PathSegment::Index(i), item)),
                Children::Mapping(entries) => (entries.iter())
                    .find(|(_, key, value)| key.contains(&offset) || value.span.contains(&offset))
                    .map(|(key, _, value)| (PathSegment::Key(key.clone()), value)),
            };
            match next {
                Some((segment, next)) => {
                    path.0.push(segment);
                    node = next;
                }
                None => return Some(path),
            }
        }
    }

    fn walk(&self, path: &PlanPath) -> Option<(&Node, Option<Range<usize>>)> {
        let mut node = self.root.as_ref()?;
        let mut key_span = None;
        for segment in &path.0 {
            let next = match (segment, &node.children) {
                (PathSegment::Index(i), Children::Sequence(items)) => {
                    items.get(*i).map(|n| (n, None))
                }
                (PathSegment::Key(key), Children::Mapping(entries)) => {
                    let names: &[&str] = ALIASES
                        .iter()
                        .find(|group| group.contains(&key.as_str()))
                        .copied()
                        .unwrap_or(&[]);
                    entries
                        .iter()
                        .find(|(k, _, _)| k == key || names.contains(&k.as_str()))
                        .map(|(_, k, n)| (n, Some(k.clone())))
                }
                _ => None,
            };
            match next {
                Some((next, key)) => {
                    node = next;
                    key_span = key;
                }
                None => break,
            }
        }
        debug_assert!(node.span.end <= self.text_len);
        Some((node, key_span))
    }
}

/// Converts the parser's character indexes to byte offsets.
struct CharOffsets {
    /// Byte offset of each char; empty when the text is ASCII (then they are equal).
    bytes: Vec<usize>,
    len: usize,
}

impl CharOffsets {
    fn new(text: &str) -> Self {
        let bytes = if text.is_ascii() {
            Vec::new()
        } else {
            text.char_indices().map(|(i, _)| i).collect()
        };
        CharOffsets {
            bytes,
            len: text.len(),
        }
    }

    fn byte(&self, char_index: usize) -> usize {
        if self.bytes.is_empty() {
            char_index.min(self.len)
        } else {
            self.bytes.get(char_index).copied().unwrap_or(self.len)
        }
    }

    fn range(&self, span: Span) -> Range<usize> {
        self.byte(span.start.index())..self.byte(span.end.index())
    }
}

struct Builder<'t, 'o> {
    parser: Parser<'t, saphyr_parser::StrInput<'t>>,
    offsets: &'o CharOffsets,
    keys: Vec<(String, Range<usize>)>,
}

impl<'t> Builder<'t, '_> {
    fn next(&mut self) -> Option<(Event<'t>, Span)> {
        self.parser.next_event()?.ok()
    }

    fn document(&mut self) -> Option<Node> {
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => continue,
                Event::StreamEnd | Event::DocumentEnd => return None,
                other => {
                    let other = owned(other);
                    return self.node(other, span);
                }
            }
        }
    }

    /// Builds the node that `event` starts.
    fn node(&mut self, event: OwnedEvent, span: Span) -> Option<Node> {
        let start = self.offsets.range(span);
        match event {
            OwnedEvent::Scalar(_) | OwnedEvent::Other => Some(Node {
                span: start,
                children: Children::Scalar,
            }),
            OwnedEvent::SequenceStart => {
                let mut items = Vec::new();
                loop {
                    let (event, span) = self.next()?;
                    let event = owned(event);
                    if let OwnedEvent::SequenceEnd = event {
                        let end = self.offsets.range(span).end.max(start.start);
                        return Some(Node {
                            span: start.start..end,
                            children: Children::Sequence(items),
                        });
                    }
                    items.push(self.node(event, span)?);
                }
            }
            OwnedEvent::MappingStart => {
                let mut entries = Vec::new();
                loop {
                    let (event, key_span) = self.next()?;
                    let event = owned(event);
                    let key = match event {
                        OwnedEvent::MappingEnd => {
                            let end = self.offsets.range(key_span).end.max(start.start);
                            return Some(Node {
                                span: start.start..end,
                                children: Children::Mapping(entries),
                            });
                        }
                        OwnedEvent::Scalar(text) => text,
                        other => {
                            // A complex key: keep its structure out of the map.
                            self.node(other, key_span)?;
                            String::new()
                        }
                    };
                    let key_range = self.offsets.range(key_span);
                    let (event, value_span) = self.next()?;
                    let event = owned(event);
                    let value = self.node(event, value_span)?;
                    self.keys.push((key.clone(), key_range.clone()));
                    entries.push((key, key_range, value));
                }
            }
            OwnedEvent::SequenceEnd | OwnedEvent::MappingEnd => None,
        }
    }
}

enum OwnedEvent {
    Scalar(String),
    SequenceStart,
    SequenceEnd,
    MappingStart,
    MappingEnd,
    Other,
}

fn owned(event: Event<'_>) -> OwnedEvent {
    match event {
        Event::Scalar(text, ..) => OwnedEvent::Scalar(text.into_owned()),
        Event::SequenceStart(..) => OwnedEvent::SequenceStart,
        Event::SequenceEnd => OwnedEvent::SequenceEnd,
        Event::MappingStart(..) => OwnedEvent::MappingStart,
        Event::MappingEnd => OwnedEvent::MappingEnd,
        _ => OwnedEvent::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_pointer_extends_a_path_token_by_token() {
        let args = PlanPath::step(2).key("args");
        assert_eq!(args.clone().pointer("").to_string(), "steps[2].args");
        assert_eq!(
            args.pointer("/argv/1/a~1b~0c").to_string(),
            "steps[2].args.argv[1].a/b~c"
        );
    }

    fn text_at(text: &str, range: Option<Range<usize>>) -> &str {
        &text[range.expect("a range")]
    }

    #[test]
    fn finds_values_and_keys_in_yaml() {
        let text = "id: p\nsteps:\n  - id: a\n    tool: echo\n  - index: b\n    tool: sleep\n    depends_on: [a]\n";
        let map = SourceMap::build(text);
        assert_eq!(
            text_at(text, map.value(&PlanPath::step(1).key("tool"))),
            "sleep"
        );
        assert_eq!(
            text_at(text, map.key(&PlanPath::step(1).key("id"))),
            "index"
        );
        assert_eq!(
            text_at(
                text,
                map.value(&PlanPath::step(1).key("depends_on").index(0))
            ),
            "a"
        );
        // A missing leaf falls back to its deepest existing ancestor.
        assert!(text_at(text, map.value(&PlanPath::step(0).key("nope"))).starts_with("id: a"));
    }

    #[test]
    fn finds_values_in_json_with_tabs_and_unicode() {
        let text = "{\n\t\"title\": \"héllo wörld\",\n\t\"steps\": [{\"id\": \"é\", \"tool\": \"echo\"}]\n}";
        let map = SourceMap::build(text);
        assert_eq!(
            text_at(text, map.value(&PlanPath::step(0).key("tool"))),
            "\"echo\""
        );
        assert_eq!(
            text_at(text, map.value(&PlanPath::step(0).key("id"))),
            "\"é\""
        );
        assert_eq!(text_at(text, map.key_near("tool", 40)), "\"tool\"");
    }

    #[test]
    fn broken_documents_give_no_locations() {
        let map = SourceMap::build("steps: [ {id: a");
        assert_eq!(map.value(&PlanPath::step(0)), None);
    }

    #[test]
    fn paths_display_like_accessors() {
        assert_eq!(
            PlanPath::step(2).key("depends_on").index(0).to_string(),
            "steps[2].depends_on[0]"
        );
    }
}
