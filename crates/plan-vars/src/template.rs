use std::fmt;

use serde_json::Value;

use crate::path::{self, Segment, name_len, parse_segments};
use crate::{ParseError, ResolveError, Scope};

/// What a placeholder reads before following its path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Root {
    /// A named variable: `${name}` or `$var.name`.
    Var(String),
    /// The current map item: `$each`.
    Each,
    /// The current map item's position: `$index`.
    Index,
    /// The current map item's key (from `expand_key`): `$key`.
    Key,
    /// An environment value the plan lists under `env:`: `${env.NAME}`.
    Env(String),
    /// A data expression, `${{ EXPR }}`: its text, evaluated by the caller's evaluator
    /// ([`Scope::evaluate`]; plan-cli's is CEL).
    Expr(String),
}

/// One parsed placeholder: a root and a path into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    /// What the placeholder reads.
    pub root: Root,
    /// The path followed from the root.
    pub path: Vec<Segment>,
    text: String,
}

impl Placeholder {
    /// The placeholder as written in the plan, e.g. `${user.name}`.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The variable this placeholder reads, if it reads one.
    pub fn variable(&self) -> Option<&str> {
        match &self.root {
            Root::Var(name) => Some(name),
            _ => None,
        }
    }

    /// Resolves the placeholder to the value it names (a data expression's is computed, so
    /// owned).
    pub fn resolve<'s>(
        &self,
        scope: &'s Scope<'_>,
    ) -> Result<std::borrow::Cow<'s, Value>, ResolveError> {
        let found = match &self.root {
            Root::Expr(expression) => match scope.evaluate {
                Some(evaluate) => evaluate(expression, scope).map(std::borrow::Cow::Owned),
                None => Err("data expressions are not evaluated here".to_owned()),
            },
            _ => self.lookup(scope).map(std::borrow::Cow::Borrowed),
        };
        found.map_err(|reason| ResolveError {
            placeholder: self.text.clone(),
            reason,
        })
    }

    fn lookup<'s>(&self, scope: &'s Scope<'_>) -> Result<&'s Value, String> {
        let (root, label): (&Value, String) = match &self.root {
            Root::Expr(_) => return Err("a data expression names no value".to_owned()),
            Root::Var(name) => match scope.vars.and_then(|vars| vars.get(name)) {
                Some(value) => (value, name.clone()),
                None => return Err(scope.missing_variable(name)),
            },
            Root::Each => (
                scope.item_field(|item| Some(item.value), "$each")?,
                "$each".into(),
            ),
            Root::Index => (
                scope.item_field(|item| Some(item.index), "$index")?,
                "$index".into(),
            ),
            Root::Key => (scope.item_field(|item| item.key, "$key")?, "$key".into()),
            Root::Env(name) => match scope.env.and_then(|env| env.get(name)) {
                Some(value) => (value, format!("env.{name}")),
                None => {
                    return Err(format!(
                        "environment variable `{name}` is not set (and a plan reads only those it lists under `env:`)"
                    ));
                }
            },
        };
        path::walk(root, &label, &self.path)
    }

    /// Parses a placeholder starting at `text[0] == '$'`; returns it and its byte length, or
    /// `None` when the `$` does not start a placeholder (it is then literal text).
    fn parse_at(text: &str, offset: usize) -> Result<Option<(Placeholder, usize)>, ParseError> {
        let after = &text[1..];
        if let Some(inner_and_rest) = after.strip_prefix("{{") {
            // `${{ EXPR }}`: a data expression, up to the first `}}` outside quotes.
            let close = find_expression_end(inner_and_rest).ok_or_else(|| {
                ParseError::new(
                    offset,
                    "unterminated expression: `${{` without a closing `}}`",
                )
            })?;
            let expression = inner_and_rest[..close].trim();
            if expression.is_empty() {
                return Err(ParseError::new(
                    offset,
                    "empty expression: expected CEL inside `${{ }}`",
                ));
            }
            let len = 3 + close + 2;
            let placeholder = Placeholder {
                root: Root::Expr(expression.to_owned()),
                path: Vec::new(),
                text: String::new(),
            };
            return Ok(Some((placeholder.with_text(&text[..len]), len)));
        }
        if let Some(inner_and_rest) = after.strip_prefix('{') {
            let close = find_closing_brace(inner_and_rest).ok_or_else(|| {
                ParseError::new(
                    offset,
                    "unterminated placeholder: `${` without a closing `}`",
                )
            })?;
            let inner = &inner_and_rest[..close];
            let placeholder = parse_braced(inner.trim(), offset + 2)?;
            let len = 2 + close + 1;
            return Ok(Some((placeholder.with_text(&text[..len]), len)));
        }
        // A word that is none of these is text (`$HOME`, `$5`); whether it names a step of the
        // plan (the removed `$step-01.v`) only the plan knows (plan-graph checks it).
        let word_len = name_len(after, false);
        let word = &after[..word_len];
        let (root, path_allowed) = match word {
            "var" => {
                let Some(rest) = after[word_len..].strip_prefix('.') else {
                    return Err(ParseError::new(
                        offset,
                        "`$var` must be followed by `.name`",
                    ));
                };
                let name_len = name_len(rest, false);
                if name_len == 0 {
                    return Err(ParseError::new(
                        offset,
                        "`$var.` must be followed by a name",
                    ));
                }
                let name = &rest[..name_len];
                let consumed = 1 + word_len + 1 + name_len;
                let (path, path_len) = parse_segments(&text[consumed..], false, offset + consumed)?;
                let len = consumed + path_len;
                if text[len..].starts_with("[*]") {
                    let list = List::Var(name);
                    return Err(all_items_removed(
                        offset,
                        &list,
                        &path,
                        &text[len..],
                        Written::Text,
                    ));
                }
                let placeholder = Placeholder {
                    root: Root::Var(name.to_owned()),
                    path,
                    text: String::new(),
                };
                return Ok(Some((placeholder.with_text(&text[..len]), len)));
            }
            "each" => (Root::Each, true),
            "index" => (Root::Index, false),
            "key" => (Root::Key, true),
            _ => return Ok(None),
        };
        let consumed = 1 + word_len;
        let (path, path_len) = if path_allowed {
            parse_segments(&text[consumed..], false, offset + consumed)?
        } else {
            (Vec::new(), 0)
        };
        let len = consumed + path_len;
        if text[len..].starts_with("[*]") {
            let list = List::of(&root);
            return Err(all_items_removed(
                offset,
                &list,
                &path,
                &text[len..],
                Written::Text,
            ));
        }
        let placeholder = Placeholder {
            root,
            path,
            text: String::new(),
        };
        Ok(Some((placeholder.with_text(&text[..len]), len)))
    }

    fn with_text(mut self, text: &str) -> Self {
        text.clone_into(&mut self.text);
        self
    }
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The inside of `${...}`: `root(.name | [N] | ["key"])*`.
fn parse_braced(inner: &str, offset: usize) -> Result<Placeholder, ParseError> {
    let root_len = name_len(inner, true);
    if root_len == 0 {
        return Err(ParseError::new(
            offset,
            "empty placeholder: expected a name inside `${}`",
        ));
    }
    let (mut path, path_len) = parse_segments(&inner[root_len..], true, offset + root_len)?;
    let word = &inner[..root_len];
    let rest = &inner[root_len + path_len..];
    if rest.starts_with("[*]") {
        let list = match word {
            "each" => List::Each,
            "var" => match path.split_first() {
                Some((Segment::Field(name), before)) => {
                    let list = List::Var(name);
                    return Err(all_items_removed(
                        offset,
                        &list,
                        before,
                        rest,
                        Written::Braced,
                    ));
                }
                _ => List::Other,
            },
            "index" | "key" | "env" => List::Other,
            name => List::Var(name),
        };
        return Err(all_items_removed(
            offset,
            &list,
            &path,
            rest,
            Written::Braced,
        ));
    }
    debug_assert!(
        rest.is_empty(),
        "a braced path ends at its brace or at `[*]`"
    );
    let root = match word {
        "each" => Root::Each,
        "index" => Root::Index,
        "key" => Root::Key,
        "var" | "env" => {
            if path.is_empty() {
                return Err(ParseError::new(
                    offset,
                    format!("`${{{word}}}` needs a name: `${{{word}.NAME}}`"),
                ));
            }
            let Segment::Field(name) = path.remove(0) else {
                return Err(ParseError::new(
                    offset,
                    format!("`{word}` must be followed by `.NAME`"),
                ));
            };
            if word == "var" {
                Root::Var(name)
            } else {
                Root::Env(name)
            }
        }
        name => Root::Var(name.to_owned()),
    };
    if matches!(root, Root::Index) && !path.is_empty() {
        return Err(ParseError::new(
            offset,
            "`index` is a number and has no fields",
        ));
    }
    Ok(Placeholder {
        root,
        path,
        text: String::new(),
    })
}

/// Byte position of the `}}` that ends a data expression: the first outside CEL's quoted
/// strings and outside the braces the expression opens itself (a map literal `{'a': {'b': 1}}`
/// ends in `}}` too).
fn find_expression_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut pending = None;
    for (i, c) in outside_strings(text) {
        match c {
            '{' => {
                depth += 1;
                pending = None;
            }
            '}' if depth > 0 => {
                depth -= 1;
                pending = None;
            }
            '}' => match pending {
                Some(start) => return Some(start),
                None => pending = Some(i),
            },
            _ => pending = None,
        }
    }
    None
}

/// The characters of a CEL expression outside its string literals, with their byte positions:
/// a literal's quotes are given, what is between them (escapes included) is not. For scanning
/// an expression's brackets, operators and names without parsing it.
pub fn outside_strings(expression: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    expression
        .char_indices()
        .filter(move |&(_, c)| match quote {
            Some(open) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == open {
                    quote = None;
                    return true;
                }
                false
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                true
            }
        })
}

/// The expression of a string that is exactly one data expression (`${{ EXPR }}`, spaces
/// around it allowed), as in a bind.
pub fn whole_expression(text: &str) -> Option<String> {
    let template = Template::parse(text.trim()).ok()?;
    match &template.as_placeholder()?.root {
        Root::Expr(expression) => Some(expression.clone()),
        _ => None,
    }
}

/// Byte position of the `}` that closes a placeholder, skipping quoted keys.
fn find_closing_brace(text: &str) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i),
            _ => {}
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Value(Placeholder),
}

/// What `[*]` was written after, for its replacement to name.
pub(crate) enum List<'a> {
    /// A variable: `${items[*].id}`, `$var.items[*].id`.
    Var(&'a str),
    /// The current map item: `$each.tags[*]`.
    Each,
    /// A bind selector's result: `$.items[*].id`.
    Result,
    /// Something without items to map over (`$index`, `${env.X}`).
    Other,
}

impl List<'_> {
    fn of(root: &Root) -> List<'_> {
        match root {
            Root::Var(name) => List::Var(name),
            Root::Each => List::Each,
            _ => List::Other,
        }
    }
}

/// Where `[*]` was written: in running text (`$var.items[*]`), inside `${…}`, or in a bind
/// selector.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Text,
    Braced,
    Bind,
}

/// `[*]` (every item of a list) was removed: the error says what replaced it, with the list
/// and the path written after it (`${items[*].id}`: `expand_on: "${items}"` and `${each.id}`,
/// or `${{ vars.items.map(i, i.id) }}`). `before` is the path to the list, `rest` the text
/// from `[*]` on.
pub(crate) fn all_items_removed(
    offset: usize,
    list: &List<'_>,
    before: &[Segment],
    rest: &str,
    written: Written,
) -> ParseError {
    let after_text = &rest[3..];
    // The path after `[*]`, when it can be said: all of it inside braces (up to another
    // `[*]`, which no replacement names), the part that continues the placeholder in text.
    let after = parse_segments(after_text, written != Written::Text, 0)
        .ok()
        .filter(|(_, len)| {
            written == Written::Text && !after_text[*len..].starts_with("[*]")
                || *len == after_text.len()
        })
        .map(|(segments, _)| segments);
    let path = |segments: &[Segment]| segments.iter().map(ToString::to_string).collect::<String>();
    let message = match (list, after) {
        (List::Var(name), Some(after)) => {
            let placeholder = format!("${{{name}{}}}", path(before));
            let expression = format!("vars{}{}", cel_path(&[Segment::Field((*name).to_owned())]), cel_path(before));
            match (after.is_empty(), written) {
                (true, Written::Bind) => format!("`[*]` was removed: `$var.{name}{}` is the whole list", path(before)),
                (true, _) => format!("`[*]` was removed: `{placeholder}` is the whole list; to run a step once per item, give it `expand_on: \"{placeholder}\"` and read `$each`"),
                (false, Written::Bind) => format!("`[*]` was removed: bind every item's `{}` with `${{{{ {expression}.map(i, i{}) }}}}`", path(&after), cel_path(&after)),
                (false, _) => format!("`[*]` was removed: run a step once per item with `expand_on: \"{placeholder}\"` and read `${{each{}}}`, or take every item's `{}` with `${{{{ {expression}.map(i, i{}) }}}}`", path(&after), path(&after), cel_path(&after)),
            }
        }
        (List::Each, Some(after)) if after.is_empty() => format!("`[*]` was removed: `${{each{}}}` is the whole list", path(before)),
        (List::Each, Some(after)) => format!("`[*]` was removed: take every item's `{}` with `${{{{ each{}.map(i, i{}) }}}}`", path(&after), cel_path(before), cel_path(&after)),
        (List::Result, Some(after)) if after.is_empty() => format!("`[*]` was removed: `${}` is the whole list", path(before)),
        (List::Result, Some(after)) => format!("`[*]` was removed: bind every item's `{}` with `${{{{ result{}.map(i, i{}) }}}}` (a map step's binds collect one value per item)", path(&after), cel_path(before), cel_path(&after)),
        _ => "`[*]` was removed: run a step once per item with `expand_on` and read `$each`, or take a field of every item with a data expression (`${{ vars.items.map(i, i.id) }}`)".to_owned(),
    };
    let message = match (written, list) {
        (Written::Text, List::Var(name)) => {
            format!(
                "{message}; for the text `[*]` after the value, write `${{{name}{}}}[*]`",
                path(before)
            )
        }
        (Written::Text, List::Each) => {
            format!(
                "{message}; for the text `[*]` after the value, write `${{each{}}}[*]`",
                path(before)
            )
        }
        (Written::Text, _) => {
            format!("{message}; for the text `[*]` after a value, write `${{name}}[*]`")
        }
        _ => message,
    };
    ParseError::new(offset, message)
}

/// A path as CEL writes it: `.name` for a name CEL has, `["key"]` otherwise, `[N]`.
fn cel_path(segments: &[Segment]) -> String {
    segments
        .iter()
        .map(|segment| match segment {
            Segment::Field(name)
                if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                format!(".{name}")
            }
            Segment::Field(name) => format!("[{}]", Value::String(name.clone())),
            Segment::Index(i) => format!("[{i}]"),
        })
        .collect()
}

/// A parsed string: literal text, exactly one placeholder, or text with placeholders in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses a string. `$` that starts none of the forms is literal text (`$HOME`, `$5`).
    pub fn parse(text: &str) -> Result<Template, ParseError> {
        Template::parse_noting(text, None)
    }

    /// The byte offsets of the `$`s that [`Template::parse`] keeps as text because they start
    /// no placeholder (`$HOME`, `$5`, `$step-01`); an escaped `$$` is none, nor is a `$` inside
    /// a placeholder or a data expression. For telling text from what its writer may have
    /// meant as a reference (a plan's checks for removed forms).
    pub fn literal_dollars(text: &str) -> Result<Vec<usize>, ParseError> {
        let mut found = Vec::new();
        Template::parse_noting(text, Some(&mut found))?;
        Ok(found)
    }

    fn parse_noting(
        text: &str,
        mut literal_dollars: Option<&mut Vec<usize>>,
    ) -> Result<Template, ParseError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut pos = 0;
        while let Some(found) = text[pos..].find('$') {
            let at = pos + found;
            literal.push_str(&text[pos..at]);
            let rest = &text[at..];
            if rest.starts_with("$$") {
                literal.push('$');
                pos = at + 2;
                continue;
            }
            match Placeholder::parse_at(rest, at)? {
                Some((placeholder, len)) => {
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Value(placeholder));
                    pos = at + len;
                }
                None => {
                    if let Some(found) = literal_dollars.as_deref_mut() {
                        found.push(at);
                    }
                    literal.push('$');
                    pos = at + 1;
                }
            }
        }
        literal.push_str(&text[pos..]);
        if !literal.is_empty() || parts.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Template { parts })
    }

    /// The placeholder, when the string is exactly one (and so keeps the value's type).
    pub fn as_placeholder(&self) -> Option<&Placeholder> {
        match self.parts.as_slice() {
            [Part::Value(placeholder)] => Some(placeholder),
            _ => None,
        }
    }

    /// True when the string holds no placeholder (escapes may still have been unescaped).
    pub fn is_literal(&self) -> bool {
        self.placeholders().next().is_none()
    }

    /// The placeholders in order of appearance.
    pub fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.parts.iter().filter_map(|part| match part {
            Part::Value(placeholder) => Some(placeholder),
            Part::Text(_) => None,
        })
    }

    /// Resolves the template. Exactly one placeholder keeps the value's type; otherwise the
    /// result is a string with each value interpolated.
    pub fn resolve(&self, scope: &Scope<'_>) -> Result<Value, ResolveError> {
        if let [Part::Value(placeholder)] = self.parts.as_slice() {
            return match placeholder.resolve(scope) {
                Ok(value) => Ok(value.into_owned()),
                Err(error) => stand_in(scope, placeholder).map(Value::String).ok_or(error),
            };
        }
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Value(placeholder) => match placeholder.resolve(scope) {
                    Ok(value) => match value.as_ref() {
                        Value::String(text) => out.push_str(text),
                        other => out.push_str(&other.to_string()),
                    },
                    Err(error) => out.push_str(&stand_in(scope, placeholder).ok_or(error)?),
                },
            }
        }
        Ok(Value::String(out))
    }
}

fn stand_in(scope: &Scope<'_>, placeholder: &Placeholder) -> Option<String> {
    scope.stand_in.and_then(|make| make(placeholder))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::Selector;

    fn refused(text: &str) -> String {
        Template::parse(text).unwrap_err().message
    }

    /// `[*]` is refused in every form it can be written in, each time naming what replaced
    /// it for the very list and path written, not with the generic message about list indexes.
    #[test]
    fn all_items_is_refused_with_its_replacement_for_the_list_written() {
        assert_eq!(
            refused("${items[*].id}"),
            "`[*]` was removed: run a step once per item with `expand_on: \"${items}\"` and read `${each.id}`, or take every item's `.id` with `${{ vars.items.map(i, i.id) }}`"
        );
        assert_eq!(
            refused("ids: ${var.items[*].id}"),
            refused("ids: ${items[*].id}")
        );
        assert_eq!(
            refused("${items[*]}"),
            "`[*]` was removed: `${items}` is the whole list; to run a step once per item, give it `expand_on: \"${items}\"` and read `$each`"
        );
        assert_eq!(
            refused("${r.list[*].user[\"first name\"]}"),
            "`[*]` was removed: run a step once per item with `expand_on: \"${r.list}\"` and read `${each.user[\"first name\"]}`, or take every item's `.user[\"first name\"]` with `${{ vars.r.list.map(i, i.user[\"first name\"]) }}`"
        );
        // A name CEL cannot write after a `.` is written as a key.
        assert!(
            refused("${my-list[*].first-name}")
                .ends_with("`${{ vars[\"my-list\"].map(i, i[\"first-name\"]) }}`"),
            "{}",
            refused("${my-list[*].first-name}")
        );
        assert_eq!(
            refused("${each.tags[*].name}"),
            "`[*]` was removed: take every item's `.name` with `${{ each.tags.map(i, i.name) }}`"
        );
        // In running text the path after `[*]` is what continues the placeholder, and the
        // text `[*]` after a value has its own way to be written.
        assert_eq!(
            refused("ids: $var.items[*].id, done."),
            "`[*]` was removed: run a step once per item with `expand_on: \"${items}\"` and read `${each.id}`, or take every item's `.id` with `${{ vars.items.map(i, i.id) }}`; for the text `[*]` after the value, write `${items}[*]`"
        );
        assert!(refused("$each.tags[*]").starts_with("`[*]` was removed: `${each.tags}` is the whole list; for the text `[*]` after the value, write `${each.tags}[*]`"));
        // What no replacement names gets the general one.
        for text in ["${a[*].b[*].c}", "${env.X[*]}", "$index[*]", "${key[*]}"] {
            assert!(
                refused(text).starts_with(
                    "`[*]` was removed: run a step once per item with `expand_on` and read `$each`"
                ),
                "{text}: {}",
                refused(text)
            );
        }
        // Never the list-index message.
        assert!(!refused("${items[*].id}").contains("list index"));
        // Text that merely holds `[*]`.
        for text in [
            "${items}[*]",
            "${items[\"[*]\"]}",
            "$$var.items[*]",
            "a [*] b",
            "${items[0].id}",
        ] {
            assert!(Template::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn a_bind_selector_with_all_items_names_the_expression_that_replaced_it() {
        let refused = |text: &str| text.parse::<Selector>().unwrap_err().message;
        assert_eq!(
            refused("$.items[*].id"),
            "`[*]` was removed: bind every item's `.id` with `${{ result.items.map(i, i.id) }}` (a map step's binds collect one value per item)"
        );
        assert_eq!(
            refused("$var.items[*].id"),
            "`[*]` was removed: bind every item's `.id` with `${{ vars.items.map(i, i.id) }}`"
        );
        assert_eq!(refused("$[*]"), "`[*]` was removed: `$` is the whole list");
    }

    /// The `$step-01` forms are text to the parser (only the plan knows its steps), and are
    /// found among the literal dollars, as `$HOME` and `$5` are; `$$`, placeholders and
    /// expressions hold none.
    #[test]
    fn literal_dollars_are_those_that_start_no_placeholder() {
        let text = "$step-01.v $HOME $$x ${a} $var.b $each $5 ${{ '$c' }} see $step-01[0] $";
        let found: Vec<&str> = Template::literal_dollars(text)
            .unwrap()
            .into_iter()
            .map(|at| &text[at..])
            .map(|rest| rest.split(' ').next().unwrap())
            .collect();
        assert_eq!(found, ["$step-01.v", "$HOME", "$5", "$step-01[0]", "$"]);
        for text in ["$step-01.v", "$step-01", "see $step-01 now", "$step-01[0]"] {
            assert!(Template::parse(text).unwrap().is_literal(), "{text}");
        }
        assert!(Template::literal_dollars("${").is_err());
    }

    proptest! {
        /// A literal dollar is text: doubling it (the escape) changes no placeholder, and
        /// `literal_dollars` agrees with `parse` on what is malformed.
        #[test]
        fn literal_dollars_are_text(text in "[$${}\\[\\].*a-z0-9\\-\" ]{0,40}") {
            let parsed = Template::parse(&text);
            let dollars = Template::literal_dollars(&text);
            prop_assert_eq!(parsed.is_ok(), dollars.is_ok());
            let (Ok(parsed), Ok(dollars)) = (parsed, dollars) else { return Ok(()) };
            let placeholders: Vec<String> = parsed.placeholders().map(|p| p.text().to_owned()).collect();
            for at in dollars {
                prop_assert_eq!(&text[at..=at], "$");
                let escaped = format!("{}${}", &text[..at], &text[at..]);
                let again = Template::parse(&escaped).unwrap();
                let again: Vec<String> = again.placeholders().map(|p| p.text().to_owned()).collect();
                prop_assert_eq!(&again, &placeholders);
            }
        }

        /// `[*]` after any variable's path is refused, never taken as text nor as a bad index.
        #[test]
        fn all_items_after_any_path_is_refused(
            name in "[a-z_][a-z0-9_]{0,8}",
            path in "(\\.[a-z]{1,4}|\\[[0-9]\\]){0,3}",
            after in "(\\.[a-z]{1,4}|\\[[0-9]\\]){0,3}",
        ) {
            prop_assume!(!["each", "index", "key", "var", "env"].contains(&name.as_str()));
            for text in [format!("${{{name}{path}[*]{after}}}"), format!("$var.{name}{path}[*]{after}")] {
                let message = refused(&text);
                prop_assert!(message.starts_with("`[*]` was removed: "), "{}: {}", text, message);
                let expression = format!("vars.{name}{path}.map(i, i{after})");
                prop_assert!(after.is_empty() || message.contains(&expression), "{}: {}", text, message);
            }
        }
    }
}
