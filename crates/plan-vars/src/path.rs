use std::fmt;

use serde_json::Value;

/// One step of a path into a JSON value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// `.name` or `["name"]`: a field of an object.
    Field(String),
    /// `[N]`: an item of a list.
    Index(usize),
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Segment::Field(name) if is_plain_name(name) => write!(f, ".{name}"),
            Segment::Field(name) => write!(f, "[{}]", Value::String(name.clone())),
            Segment::Index(i) => write!(f, "[{i}]"),
        }
    }
}

pub(crate) fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(is_name_char)
}

/// Follows `path` into `value`; on failure says which segment failed and why, naming the
/// prefix walked so far as `label` (e.g. `user.tags`).
pub(crate) fn walk<'v>(
    value: &'v Value,
    label: &str,
    path: &[Segment],
) -> Result<&'v Value, String> {
    let mut current = value;
    let mut walked = label.to_owned();
    for segment in path {
        current = match (segment, current) {
            (Segment::Field(name), Value::Object(map)) => match map.get(name) {
                Some(next) => next,
                None => {
                    let mut fields: Vec<String> = map.keys().map(|k| format!("`{k}`")).collect();
                    let listing = if fields.is_empty() {
                        "it has no fields".to_owned()
                    } else {
                        fields.truncate(12);
                        format!("it has {}", fields.join(", "))
                    };
                    return Err(format!("`{walked}` has no field `{name}`; {listing}"));
                }
            },
            (Segment::Index(i), Value::Array(items)) => match items.get(*i) {
                Some(next) => next,
                None => {
                    return Err(format!(
                        "`{walked}` has {} item{}; index {i} is out of range",
                        items.len(),
                        if items.len() == 1 { "" } else { "s" }
                    ));
                }
            },
            (Segment::Field(name), other) => {
                return Err(format!(
                    "`{walked}` is {}, not an object, so it has no field `{name}`",
                    kind(other)
                ));
            }
            (Segment::Index(i), other) => {
                return Err(format!(
                    "`{walked}` is {}, not a list, so it has no item [{i}]",
                    kind(other)
                ));
            }
        };
        walked.push_str(&segment.to_string());
    }
    Ok(current)
}

/// A JSON value's kind in words, for messages: `a string`, `a list`, `null`, ….
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parses the path segments that follow a root: `.name`, `[N]`, `["key"]`.
/// `braced` allows `-` in names and quoted keys; unbraced paths (in running text) stop at the
/// first character that cannot continue them, so `$each.name.` keeps its final period as text.
/// Returns the segments and the byte length consumed; the removed `[*]` ends a path, and the
/// caller refuses it (`all_items_removed`).
pub(crate) fn parse_segments(
    text: &str,
    braced: bool,
    base_offset: usize,
) -> Result<(Vec<Segment>, usize), crate::ParseError> {
    let mut segments = Vec::new();
    let mut pos = 0;
    let bytes = text.as_bytes();
    while pos < bytes.len() {
        match bytes[pos] {
            b'.' => {
                let name_len = name_len(&text[pos + 1..], braced);
                if name_len == 0 {
                    if braced {
                        return Err(crate::ParseError::new(
                            base_offset + pos,
                            "expected a field name after `.`",
                        ));
                    }
                    break;
                }
                segments.push(Segment::Field(text[pos + 1..pos + 1 + name_len].to_owned()));
                pos += 1 + name_len;
            }
            b'[' => {
                let rest = &text[pos + 1..];
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 && rest.as_bytes().get(digits) == Some(&b']') {
                    let index = rest[..digits].parse().map_err(|_| {
                        crate::ParseError::new(base_offset + pos, "list index is too large")
                    })?;
                    segments.push(Segment::Index(index));
                    pos += digits + 2;
                } else if braced && rest.starts_with('"') {
                    let quoted_len = quoted_len(rest).ok_or_else(|| {
                        crate::ParseError::new(base_offset + pos, "unterminated quoted key")
                    })?;
                    let key: String = serde_json::from_str(&rest[..quoted_len]).map_err(|e| {
                        crate::ParseError::new(base_offset + pos, format!("bad quoted key: {e}"))
                    })?;
                    if rest.as_bytes().get(quoted_len) != Some(&b']') {
                        return Err(crate::ParseError::new(
                            base_offset + pos + 1 + quoted_len,
                            "expected `]` after the quoted key",
                        ));
                    }
                    segments.push(Segment::Field(key));
                    pos += quoted_len + 2;
                } else if rest.starts_with("*]") {
                    // The removed `[*]`: the caller says what replaced it, naming the list.
                    break;
                } else if braced {
                    return Err(crate::ParseError::new(
                        base_offset + pos,
                        "expected a list index `[N]` or a quoted key `[\"key\"]`",
                    ));
                } else {
                    break;
                }
            }
            _ => {
                if braced {
                    return Err(crate::ParseError::new(
                        base_offset + pos,
                        format!(
                            "unexpected `{}` in placeholder",
                            text[pos..].chars().next().unwrap_or('?')
                        ),
                    ));
                }
                break;
            }
        }
    }
    Ok((segments, pos))
}

/// Length in bytes of the name at the start of `text`.
pub(crate) fn name_len(text: &str, allow_dash: bool) -> usize {
    text.char_indices()
        .find(|&(_, c)| !(c.is_alphanumeric() || c == '_' || (allow_dash && c == '-')))
        .map_or(text.len(), |(i, _)| i)
}

/// Length in bytes of the JSON string literal at the start of `text` (quotes included).
fn quoted_len(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i + 1),
            _ => {}
        }
    }
    None
}
