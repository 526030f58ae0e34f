//! Property tests: the parser never panics, and escaping round-trips any text.

use std::collections::BTreeMap;

use plan_vars::{Scope, Template};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Escapes text so that it resolves to itself.
fn escape(text: &str) -> String {
    text.replace('$', "$$")
}

proptest! {
    #[test]
    fn parsing_never_panics(text in "\\PC*") {
        let _ = Template::parse(&text);
    }

    #[test]
    fn parsing_dollar_heavy_text_never_panics(text in "[$${}\\[\\].a-z0-9\" ]{0,40}") {
        let _ = Template::parse(&text);
    }

    #[test]
    fn escaped_text_resolves_to_itself(text in "\\PC*") {
        let template = Template::parse(&escape(&text)).unwrap();
        prop_assert!(template.is_literal());
        let vars: BTreeMap<String, Value> = BTreeMap::new();
        prop_assert_eq!(template.resolve(&Scope::with_vars(&vars)).unwrap(), Value::String(text));
    }

    #[test]
    fn exact_placeholders_preserve_any_value(name in "[a-z_][a-z0-9_]{0,10}", n in any::<i64>(), s in "\\PC*") {
        prop_assume!(!["each", "index", "key", "var", "env"].contains(&name.as_str()));
        let value = json!({"n": n, "s": s, "list": [n, s]});
        let vars: BTreeMap<String, Value> = [(name.clone(), value.clone())].into_iter().collect();
        let scope = Scope::with_vars(&vars);
        let resolve = |text: String| Template::parse(&text).unwrap().resolve(&scope).unwrap();
        prop_assert_eq!(resolve(format!("${{{name}}}")), value.clone());
        prop_assert_eq!(resolve(format!("$var.{name}.list[0]")), json!(n));
        prop_assert_eq!(resolve(format!("<${{{name}.s}}>")), Value::String(format!("<{s}>")));
    }
}
