//! The map-style executor's chat stream: a call's input laid out as a table for its
//! `assistant.delta` event.

use serde_json::Value;

/// Characters of one value a table shows; the rest is cut, with `…`.
const MOST: usize = 200;

/// `args` as a Markdown table, one row per argument (`| argument | value |`): strings as they
/// are, other values as compact JSON; `|` and line breaks escaped so a row stays one row.
/// `redact` takes the run's secrets out of each name and value before it is cut and escaped
/// (an escaped `|` would hide a secret from it).
pub(crate) fn input_table(args: &Value, redact: &dyn Fn(&mut String)) -> String {
    let cell = |value: &Value| cell(value, redact);
    let Value::Object(fields) = args else {
        return format!("input: {}", cell(args));
    };
    if fields.is_empty() {
        return "(no arguments)".to_owned();
    }
    let mut table = String::from("| argument | value |\n|---|---|");
    for (name, value) in fields {
        table.push_str("\n| ");
        table.push_str(&cell(&Value::String(name.clone())));
        table.push_str(" | ");
        table.push_str(&cell(value));
        table.push_str(" |");
    }
    table
}

fn cell(value: &Value, redact: &dyn Fn(&mut String)) -> String {
    let mut text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    redact(&mut text);
    let cut = match text.char_indices().nth(MOST) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    };
    escape(&cut)
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace('\n', "<br>")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_input_is_one_row_per_argument_whatever_its_characters() {
        let none = |_: &mut String| {};
        assert_eq!(
            input_table(
                &json!({"to": "prod", "n": 2, "note": "a|b\nc", "list": [1, "x"]}),
                &none
            ),
            "| argument | value |\n|---|---|\n| to | prod |\n| n | 2 |\n| note | a\\|b<br>c |\n| list | [1,\"x\"] |"
        );
        assert_eq!(input_table(&json!({}), &none), "(no arguments)");
        let long = "é".repeat(300);
        let table = input_table(&json!({ "long": long }), &none);
        assert!(table.ends_with("… |"), "{table}");
        assert_eq!(table.matches('é').count(), MOST);
    }

    #[test]
    fn secrets_are_taken_out_before_a_value_is_cut_or_escaped() {
        let redact = |text: &mut String| *text = text.replace("s|cret", "[redacted]");
        let table = input_table(&json!({"s|cret": {"token": "s|cret"}}), &redact);
        assert!(!table.contains("cret"), "{table}");
        assert!(table.contains("[redacted]"), "{table}");
    }
}
