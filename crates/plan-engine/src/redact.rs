//! Keeps secret values (the `${env.NAME}` the plan lists) out of every output: records,
//! variables, events and previews. Tools still receive the real values.

use std::sync::Arc;

use serde_json::Value;

use plan_types::{Event, Record};

/// What replaces a secret.
pub use plan_types::REDACTED;

/// Finds every secret in text, in the forms it takes on the way out of a tool.
///
/// A secret rarely comes back verbatim: a URL lowercases a host and percent-encodes a path, a
/// hostname with non-ASCII letters becomes punycode, a JSON error message escapes quotes, a
/// program or a Basic auth header encodes it in base64. Each secret is searched for in all of
/// those forms, ignoring ASCII case, so that a form not listed here differs from one that is at
/// most by case.
#[derive(Debug, Default, Clone)]
pub struct Redactor {
    /// None when there is nothing to hide.
    matcher: Option<aho_corasick::AhoCorasick>,
    /// The forms no list of literal strings covers: every secret percent-encoded with any
    /// choice of safe characters (each byte as itself or as `%XX`, a space also as `+`: an
    /// encoder's safe set is the caller's to choose, Python's `quote` keeps `/`, `quote_plus`
    /// does not) or JSON-escaped with any choice of characters (`\u0068`), and its base64
    /// forms wrapped across lines (`base64` wraps at 76 columns).
    /// Run only on text that holds a `%`, a backslash or a line break.
    spread: Vec<regex::Regex>,
}

/// A base64 form of a secret with a line break allowed between any two characters: a line
/// break itself, or as a JSON string holds one (`\n`, `\r\n`: a base64 attachment wrapped at
/// 76 columns in a tool's JSON result); a `/` also as JSON may escape it (`\/`).
fn wrapped_pattern(form: &str) -> String {
    let mut pattern = String::new();
    for (k, c) in form.chars().enumerate() {
        if k > 0 {
            pattern.push_str("(?:\\r?\\n|\\\\r\\\\n|\\\\n)?");
        }
        if c == '/' {
            pattern.push_str("(?:/|\\\\/)");
        } else {
            pattern.push_str(&regex::escape(c.encode_utf8(&mut [0_u8; 4])));
        }
    }
    pattern
}

/// Whether a text may hold a form only `Redactor::spread` finds.
fn spreads(text: &str) -> bool {
    text.contains('%') || text.contains('\n') || text.contains('\\')
}

/// A pattern for `secret` with each character as itself, percent-encoded (byte by byte) or
/// JSON-escaped as `\uXXXX` (UTF-16 units, as a JSON writer that escapes every character
/// gives it, `{"k":"\u0068\u0075…"}`; `\/` for a slash).
fn escaped_pattern(secret: &str) -> String {
    let mut pattern = String::new();
    for c in secret.chars() {
        let mut bytes = [0_u8; 4];
        let encoded: String = c
            .encode_utf8(&mut bytes)
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect();
        let escaped: String = c
            .encode_utf16(&mut [0_u16; 2])
            .iter()
            .map(|unit| format!("\\\\u{unit:04x}"))
            .collect();
        let literal = regex::escape(c.encode_utf8(&mut [0_u8; 4]));
        // JSON's short escapes, and `+` for a space in a form's encoding.
        let short = match c {
            ' ' => "|\\+",
            '/' => "|\\\\/",
            '"' => "|\\\\\"",
            '\\' => "|\\\\\\\\",
            '\n' => "|\\\\n",
            '\t' => "|\\\\t",
            '\r' => "|\\\\r",
            _ => "",
        };
        pattern.push_str(&format!("(?:{literal}|{encoded}|{escaped}{short})"));
    }
    pattern
}

/// Bytes a URL may carry unencoded in every part of it.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');
/// What the WHATWG URL standard encodes in a path (and, less `{}`, in a query or fragment).
const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'?')
    .add(b'{')
    .add(b'}');

/// The forms a secret may take in a tool's output or error.
fn forms(secret: &str) -> Vec<String> {
    let mut forms = vec![
        secret.to_owned(),
        secret.to_lowercase(),
        secret.to_uppercase(),
    ];
    for base in forms.clone() {
        let json = serde_json::to_string(&base).unwrap_or_default();
        forms.push(json[1..json.len().saturating_sub(1).max(1)].to_owned());
        for set in [UNRESERVED, PATH, percent_encoding::CONTROLS] {
            let encoded = percent_encoding::utf8_percent_encode(&base, set).to_string();
            forms.push(encoded.replace("%20", "+"));
            forms.push(encoded);
        }
        if let Ok(host) = idna::domain_to_ascii(&base) {
            forms.push(host);
        }
    }
    forms.extend(base64_forms(secret));
    forms.retain(|form| !form.is_empty());
    forms.sort();
    forms.dedup();
    forms
}

/// The secret as it shows inside base64 (`echo "$TOKEN" | base64`, `user:TOKEN` in a Basic
/// auth header a server echoes back), standard and URL-safe: for each of the three places it
/// can start at in base64's groups of 3 bytes, the characters that only its own bytes decide
/// (the ones at its edges mix in what is around it). A short secret has none of 8 characters
/// or more, and gets none: a few base64 characters would match ordinary text.
fn base64_forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut forms = Vec::new();
    for lead in 0..3_usize {
        let mut bytes = vec![0_u8; lead];
        bytes.extend_from_slice(secret.as_bytes());
        // The first character with no bit of the lead, and the last with no bit after it.
        let (start, end) = ((lead * 8).div_ceil(6), bytes.len() * 8 / 6);
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&bytes);
            if let Some(inner) = encoded.get(start..end).filter(|inner| inner.len() >= 8) {
                forms.push(inner.to_owned());
            }
        }
    }
    forms
}

impl Redactor {
    /// A redactor of these secret values (empty ones are ignored).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let values: Vec<&str> = values.into_iter().filter(|v| !v.is_empty()).collect();
        let patterns: Vec<String> = values.iter().copied().flat_map(forms).collect();
        if patterns.is_empty() {
            return Redactor::default();
        }
        // Longest first, so that a secret holding another is replaced whole. One pattern per
        // secret, so that one too large to compile (a secret of many kilobytes) loses only its
        // own wrapped-base64 forms, then only its percent-encoded ones, never another's.
        let mut sorted = values.clone();
        sorted.sort_by_key(|v| std::cmp::Reverse(v.len()));
        let build = |pattern: &str| {
            regex::RegexBuilder::new(pattern)
                .case_insensitive(true)
                .size_limit(64 << 20)
                .build()
                .ok()
        };
        let spread = sorted
            .iter()
            .filter_map(|secret| {
                let percent = escaped_pattern(secret);
                let wrapped: Vec<String> = base64_forms(secret)
                    .iter()
                    .map(|form| wrapped_pattern(form))
                    .collect();
                let whole = std::iter::once(percent.clone())
                    .chain(wrapped)
                    .collect::<Vec<_>>()
                    .join("|");
                build(&whole).or_else(|| build(&percent))
            })
            .collect();
        // Leftmost-longest: a secret containing another is replaced whole.
        let matcher = aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok();
        Redactor { matcher, spread }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Whether the text holds a secret in any of its forms.
    pub(crate) fn finds(&self, text: &str) -> bool {
        self.matcher.as_ref().is_some_and(|m| m.is_match(text))
            || (spreads(text) && self.spread.iter().any(|p| p.is_match(text)))
    }

    pub(crate) fn string(&self, text: &mut String) {
        if let Some(matcher) = &self.matcher
            && matcher.is_match(text.as_str())
        {
            let mut out = String::with_capacity(text.len());
            matcher.replace_all_with(text, &mut out, |_, _, out| {
                out.push_str(REDACTED);
                true
            });
            *text = out;
        }
        if spreads(text) {
            for spread in &self.spread {
                if spread.is_match(text) {
                    *text = spread.replace_all(text, REDACTED).into_owned();
                }
            }
        }
    }

    /// What a plan may read of a value a tool gave back (variables, binds, block nodes): the
    /// value with every secret redacted. Data expressions can cut and rearrange what they
    /// read, and the redactor finds only whole secrets, so no expression ever sees one: a
    /// secret reaches a tool only through `${env.NAME}`.
    pub(crate) fn visible(&self, value: &Value) -> Value {
        let mut value = value.clone();
        self.value(&mut value);
        value
    }

    /// A redacted copy of the text.
    pub fn redacted(&self, text: &str) -> String {
        let mut text = text.to_owned();
        self.string(&mut text);
        text
    }

    /// Redacts every string in the value, object keys included.
    pub(crate) fn value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(text) => self.string(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => {
                let needs_new_keys = map.keys().any(|k| self.finds(k));
                if needs_new_keys {
                    let entries = std::mem::take(map);
                    for (mut key, mut item) in entries {
                        self.string(&mut key);
                        self.value(&mut item);
                        map.insert(key, item);
                    }
                } else {
                    map.values_mut().for_each(|item| self.value(item));
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    pub(crate) fn record(&self, record: &mut Record) {
        if let Some(result) = &mut record.result
            && !self.is_empty()
        {
            // A result shared with a variable is copied here: tools go on seeing the value.
            self.value(Arc::make_mut(result));
        }
        if let Some(reason) = &mut record.reason {
            self.string(reason);
        }
        if let Some(error) = &mut record.error {
            self.error(error);
        }
    }

    pub(crate) fn error(&self, error: &mut plan_types::StepError) {
        self.string(&mut error.message);
        if let Some(details) = &mut error.details {
            self.value(details);
        }
    }

    pub(crate) fn event(&self, event: &mut Event) {
        if self.is_empty() {
            return;
        }
        if let Some(error) = &mut event.error {
            self.value(error);
        }
        if let Some(reason) = &mut event.reason {
            self.string(reason);
        }
        if let Some(text) = &mut event.text {
            self.string(text);
        }
        if let Some(message) = event.progress.as_mut().and_then(|p| p.message.as_mut()) {
            self.string(message);
        }
        for pending in event.pending.iter_mut().flatten() {
            if let Some(args) = &mut pending.args {
                self.value(args);
            }
            if let Some(reason) = &mut pending.reason {
                self.string(reason);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn replaces_every_occurrence_in_strings_and_keys() {
        let redactor = Redactor::new(["s3cr3t", "", "s3cr3t-longer"]);
        let mut value = json!({"token": "s3cr3t", "url": "https://x/?k=s3cr3t-longer&j=s3cr3t", "s3cr3t": [1, "a s3cr3t"]});
        redactor.value(&mut value);
        assert_eq!(
            value,
            json!({"token": "[redacted]", "url": "https://x/?k=[redacted]&j=[redacted]", "[redacted]": [1, "a [redacted]"]})
        );
    }

    #[test]
    fn secrets_are_found_in_the_forms_urls_and_json_give_them() {
        let secret = "Hunter2 \"é\"/x";
        let redactor = Redactor::new([secret]);
        for form in [
            "Hunter2 \"é\"/x",
            "hunter2 \"é\"/x",
            "HUNTER2 \"É\"/X",
            "Hunter2 \\\"é\\\"/x",
            "Hunter2%20%22%C3%A9%22%2Fx",
            "hunter2%20%22%c3%a9%22/x",
            "Hunter2+%22%C3%A9%22/x",
        ] {
            let mut text = format!("before {form} after");
            redactor.string(&mut text);
            assert_eq!(text, "before [redacted] after", "{form}");
        }
        // Encoders choose their safe characters: Python's `quote` keeps `/`, `quote_plus`
        // turns spaces into `+`, some encode every byte, letters included.
        for form in [
            "Hunter2%20%22%C3%A9%22/x",
            "Hunter2+%22%C3%A9%22%2Fx",
            "%48%75%6E%74%65%72%32%20%22%C3%A9%22%2F%78",
            "Hunter2 %22é%22/x",
            "hUnTeR2%20\"%c3%A9\"%2fX",
            // A JSON writer may escape any character as `\uXXXX` (UTF-16), a slash as `\/`.
            "\\u0048\\u0075\\u006e\\u0074\\u0065\\u0072\\u0032\\u0020\\u0022\\u00e9\\u0022\\u002f\\u0078",
            "Hunter2 \\\"\\u00E9\\\"\\/x",
        ] {
            let mut text = format!("before {form} after");
            redactor.string(&mut text);
            assert_eq!(text, "before [redacted] after", "{form}");
            assert!(Redactor::new([secret]).finds(form), "{form}");
        }
        // `base64` wraps its output at 76 columns.
        let long = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefGHIJKLmnopQRSTuvwx";
        let encoded = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(long)
        };
        let (a, b) = encoded.split_at(76);
        let mut text = format!("{a}\n{b}\n");
        Redactor::new([long]).string(&mut text);
        assert!(text.contains(REDACTED), "{text}");
        // What stays is the few characters at the edges, which mix in the bytes around.
        assert!(text.replace(REDACTED, "").len() < 12, "{text}");
        // The same inside a JSON string, where the line break is the escape `\n` (or `\r\n`),
        // wrapped at 76 columns or at 20, and a `/` may be escaped too.
        for width in [76, 20] {
            for newline in ["\\n", "\\r\\n"] {
                let lines: Vec<String> = encoded
                    .as_bytes()
                    .chunks(width)
                    .map(|chunk| String::from_utf8_lossy(chunk).replace('/', "\\/"))
                    .collect();
                let mut text = format!("{{\"attachment\": \"{}\"}}", lines.join(newline));
                Redactor::new([long]).string(&mut text);
                assert!(text.contains(REDACTED), "{width} {newline}: {text}");
                assert!(text.replace(REDACTED, "").len() < 40, "{text}");
            }
        }
        let host = Redactor::new(["bücher"]);
        let mut text = "error sending request for url (http://xn--bcher-kva.invalid/)".to_owned();
        host.string(&mut text);
        assert_eq!(
            text,
            "error sending request for url (http://[redacted].invalid/)"
        );
    }

    #[test]
    fn secrets_are_found_inside_base64_wherever_they_start() {
        use base64::Engine as _;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE};
        let secret = "supersecret123?>";
        let redactor = Redactor::new([secret]);
        for around in ["", "\n", "a", "user:", "xy", "Bearer ", "{\"token\":\""] {
            let plain = format!("{around}{secret}{around}");
            for encoded in [STANDARD.encode(&plain), URL_SAFE.encode(&plain)] {
                let mut text = format!("got {encoded} back");
                redactor.string(&mut text);
                assert!(text.contains(REDACTED), "{around:?}: {text}");
                // At most 2 characters at each edge are left, which mix in what is around.
                let left = text.replace(REDACTED, "");
                assert!(
                    left.len() <= "got  back".len() + encoded.len() - 18,
                    "{around:?}: {text}"
                );
            }
        }
        // `echo "$TOKEN" | base64`, as a user found it in a step's output.
        let mut text = "c3VwZXJzZWNyZXQxMjMK".to_owned();
        Redactor::new(["supersecret123"]).string(&mut text);
        assert_eq!(text, "[redacted]MK");
        // A secret too short to tell in base64 from other text is left to its other forms.
        let mut text = "aGk=".to_owned();
        Redactor::new(["hi"]).string(&mut text);
        assert_eq!(text, "aGk=");
    }

    #[test]
    fn nothing_to_hide_changes_nothing() {
        let mut value = json!({"a": "b"});
        Redactor::new([""]).value(&mut value);
        assert_eq!(value, json!({"a": "b"}));
    }
}
