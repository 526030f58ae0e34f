use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::path::{self, Segment, name_len, parse_segments};
use crate::template::{List, Written, all_items_removed};
use crate::{ParseError, ResolveError, Variables};

/// A bind selector: which part of a step's result (or of the variables) a bind stores.
///
/// `$` is the whole result, `$.path` a path into it (`$.lines[0]`), `$var.name.path` a
/// variable. `result_variable: x` is the same as `binds: {x: "$"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    from_var: Option<String>,
    path: Vec<Segment>,
    text: String,
}

impl Selector {
    /// The whole result: `$`.
    pub fn whole() -> Self {
        Selector {
            from_var: None,
            path: Vec::new(),
            text: "$".to_owned(),
        }
    }

    /// The selector as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The variable a `$var.` selector reads.
    pub fn variable(&self) -> Option<&str> {
        self.from_var.as_deref()
    }

    /// Selects from a step's `result`, or from `vars` for a `$var.` selector.
    pub fn select(&self, result: &Value, vars: &dyn Variables) -> Result<Value, ResolveError> {
        let (root, label) = match &self.from_var {
            None => (result, "$"),
            Some(name) => match vars.get(name) {
                Some(value) => (value, name.as_str()),
                None => {
                    return Err(ResolveError {
                        placeholder: self.text.clone(),
                        reason: format!("no variable `{name}` is defined"),
                    });
                }
            },
        };
        path::walk(root, label, &self.path)
            .cloned()
            .map_err(|reason| ResolveError {
                placeholder: self.text.clone(),
                reason: if self.from_var.is_none() {
                    format!("the step's result: {reason}")
                } else {
                    reason
                },
            })
    }
}

impl FromStr for Selector {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, ParseError> {
        let trimmed = text.trim();
        let Some(after) = trimmed.strip_prefix('$') else {
            return Err(ParseError::new(
                0,
                format!(
                    "a bind selector starts with `$` (`$`, `$.path` or `$var.name`), not `{trimmed}`"
                ),
            ));
        };
        let (from_var, rest, offset) = if let Some(rest) = after.strip_prefix("var.") {
            let len = name_len(rest, true);
            if len == 0 {
                return Err(ParseError::new(
                    5,
                    "`$var.` must be followed by a variable name",
                ));
            }
            (Some(rest[..len].to_owned()), &rest[len..], 5 + len)
        } else {
            (None, after, 1)
        };
        let (path, consumed) = parse_segments(rest, true, offset)?;
        if rest[consumed..].starts_with("[*]") {
            let list = match &from_var {
                Some(name) => List::Var(name),
                None => List::Result,
            };
            return Err(all_items_removed(
                offset + consumed,
                &list,
                &path,
                &rest[consumed..],
                Written::Bind,
            ));
        }
        if consumed != rest.len() {
            return Err(ParseError::new(
                offset + consumed,
                "unexpected text in bind selector",
            ));
        }
        Ok(Selector {
            from_var,
            path,
            text: trimmed.to_owned(),
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}
