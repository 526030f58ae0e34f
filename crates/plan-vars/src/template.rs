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
        let word_len = name_len(after, false);
        let word = &after[..word_len];
        if word == "step" && is_removed_step_reference(&after[word_len..]) {
            return Err(ParseError::new(
                offset,
                "`$step-XX.…` was removed: give the step `binds: {NAME: $.field}` (or `result_variable: NAME`) and read `$var.NAME` (write `$$step` for the text)",
            ));
        }
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
                refuse_all_items(&text[len..], offset)?;
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
        refuse_all_items(&text[len..], offset)?;
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
    debug_assert_eq!(root_len + path_len, inner.len());
    let word = &inner[..root_len];
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

/// Whether what follows `$step` is the removed `$step-XX.field` form (`$step-01.v`: two
/// digits or more, then a field's name), not text that merely starts so (`$step-by-step`,
/// `cp $step-1.tar`, `$step-2.50`).
fn is_removed_step_reference(rest: &str) -> bool {
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    digits >= 2
        && rest[digits..]
            .strip_prefix('.')
            .and_then(|field| field.chars().next())
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// `[*]` right after a placeholder (`$var.items[*].id`) is the removed form for every item.
fn refuse_all_items(rest: &str, offset: usize) -> Result<(), ParseError> {
    if rest.starts_with("[*]") {
        return Err(ParseError::new(
            offset,
            "`[*]` was removed: run a step once per item with `expand_on` and read `$each`, or take a field of every item with a data expression (`${{ vars.items.map(i, i.id) }}`); for the text after a value, write `${name}[*]`",
        ));
    }
    Ok(())
}

/// A parsed string: literal text, exactly one placeholder, or text with placeholders in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses a string. `$` that starts none of the forms is literal text (`$HOME`, `$5`).
    pub fn parse(text: &str) -> Result<Template, ParseError> {
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
