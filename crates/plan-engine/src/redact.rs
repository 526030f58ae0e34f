//! Keeps secret values (the `${env.NAME}` the plan lists) out of every output: records,
//! variables, events and previews. Tools still receive the real values.

use std::sync::Arc;

use serde_json::Value;

use plan_types::{Event, Record};

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

#[derive(Debug, Default, Clone)]
pub(crate) struct Redactor {
    /// Non-empty secret values, longest first so that a secret containing another is
    /// replaced whole.
    secrets: Vec<String>,
}

impl Redactor {
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut secrets: Vec<String> = values
            .into_iter()
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect();
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { secrets }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub(crate) fn string(&self, text: &mut String) {
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), REDACTED);
            }
        }
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
                let needs_new_keys = map
                    .keys()
                    .any(|k| self.secrets.iter().any(|s| k.contains(s.as_str())));
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
            self.string(&mut error.message);
            if let Some(details) = &mut error.details {
                self.value(details);
            }
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
    fn nothing_to_hide_changes_nothing() {
        let mut value = json!({"a": "b"});
        Redactor::new([""]).value(&mut value);
        assert_eq!(value, json!({"a": "b"}));
    }
}
