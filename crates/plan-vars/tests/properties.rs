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

/// Any JSON value: nulls, booleans, integers, finite floats, strings, and nested lists and
/// objects.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "\\PC*".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The same value with every `$` in its strings removed (keys included).
fn without_dollars(value: &Value) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace('$', "")),
        Value::Array(items) => Value::Array(items.iter().map(without_dollars).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.replace('$', ""), without_dollars(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #[test]
    fn a_bound_value_reads_back_identical(value in json_value()) {
        // Bind the whole result with `$`, then read it back through `${x}` and `$var.x`.
        let empty: BTreeMap<String, Value> = BTreeMap::new();
        let bound = "$".parse::<plan_vars::Selector>().unwrap().select(&value, &empty).unwrap();
        let vars: BTreeMap<String, Value> = [("x".to_owned(), bound)].into_iter().collect();
        let scope = Scope::with_vars(&vars);
        let args = plan_vars::ValueTemplate::compile(&json!({"a": "${x}", "b": ["$var.x"]})).unwrap();
        let resolved = args.resolve(&scope).unwrap();
        prop_assert_eq!(&resolved["a"], &value);
        prop_assert_eq!(&resolved["b"][0], &value);
    }

    #[test]
    fn values_without_dollars_are_unchanged(value in json_value()) {
        let value = without_dollars(&value);
        let template = plan_vars::ValueTemplate::compile(&value).unwrap();
        prop_assert!(template.is_literal());
        let empty: BTreeMap<String, Value> = BTreeMap::new();
        prop_assert_eq!(template.resolve(&Scope::with_vars(&empty)).unwrap(), value);
    }

    #[test]
    fn selectors_into_a_value_read_what_is_there(value in json_value(), key in "[a-z]{1,6}") {
        let wrapped = json!({ key.clone(): value.clone() });
        let empty: BTreeMap<String, Value> = BTreeMap::new();
        let selector: plan_vars::Selector = format!("$.{key}").parse().unwrap();
        prop_assert_eq!(selector.select(&wrapped, &empty).unwrap(), value);
    }
}
