//! Placeholder resolution, one `check` per concern.

use std::collections::BTreeMap;

use plan_vars::{Item, Scope, Selector, Template, ValueTemplate};
use serde_json::{Value, json};

fn vars() -> BTreeMap<String, Value> {
    let Value::Object(map) = json!({
        "module_path": "src/auth/handler.py",
        "api": {"host": "api.example.com", "version": "v2"},
        "users": [{"id": 1, "name": "ada"}, {"id": 2, "name": "bob"}],
        "user": {"name": "ada", "tags": ["x"]},
        "count": 3,
        "flag": true,
        "nothing": null,
        "odd_keys": {"key with space": "yes", "a.b": "dotted"},
    }) else {
        unreachable!()
    };
    map.into_iter().collect()
}

fn resolve(text: &str) -> Result<Value, String> {
    let vars = vars();
    let template = Template::parse(text).map_err(|e| format!("parse: {e}"))?;
    template
        .resolve(&Scope::with_vars(&vars))
        .map_err(|e| e.to_string())
}

fn check(text: &str, expected: Value) {
    assert_eq!(resolve(text), Ok(expected), "resolving {text:?}");
}

fn check_err(text: &str, expected: &str) {
    assert_eq!(
        resolve(text),
        Err(expected.to_owned()),
        "resolving {text:?}"
    );
}

#[test]
fn exact_placeholder_keeps_the_type() {
    check(
        "${users}",
        json!([{"id": 1, "name": "ada"}, {"id": 2, "name": "bob"}]),
    );
    check("${count}", json!(3));
    check("${flag}", json!(true));
    check("${nothing}", Value::Null);
    check(
        "${api}",
        json!({"host": "api.example.com", "version": "v2"}),
    );
    check("$var.users[1].name", json!("bob"));
    check("${var.count}", json!(3));
}

#[test]
fn paths_walk_fields_indexes_and_quoted_keys() {
    check("${api.host}", json!("api.example.com"));
    check("${users[0].id}", json!(1));
    check("${user.tags[0]}", json!("x"));
    check(r#"${odd_keys["key with space"]}"#, json!("yes"));
    check(r#"${odd_keys["a.b"]}"#, json!("dotted"));
    check("${ api.host }", json!("api.example.com"));
}

#[test]
fn text_interpolates_values() {
    check(
        "https://${api.host}/${api.version}/users",
        json!("https://api.example.com/v2/users"),
    );
    check(
        "n=${count} ok=${flag} none=${nothing}",
        json!("n=3 ok=true none=null"),
    );
    check("tags: ${user.tags}", json!(r#"tags: ["x"]"#));
    check("first $var.user.name.", json!("first ada."));
}

#[test]
fn dollars_that_start_no_placeholder_are_text() {
    check("costs $5 in $HOME", json!("costs $5 in $HOME"));
    check("$$", json!("$"));
    check("$${count}", json!("${count}"));
    check("a $$var.count b", json!("a $var.count b"));
    check("$variable", json!("$variable"));
    check("$", json!("$"));
    check("", json!(""));
}

#[test]
fn unresolved_placeholders_name_what_is_missing() {
    check_err(
        "$var.user.nmae",
        "`$var.user.nmae`: `user` has no field `nmae`; it has `name`, `tags`",
    );
    check_err(
        "${users[5]}",
        "`${users[5]}`: `users` has 2 items; index 5 is out of range",
    );
    check_err(
        "${count.x}",
        "`${count.x}`: `count` is a number, not an object, so it has no field `x`",
    );
    check_err(
        "${modul_path}",
        "`${modul_path}`: no variable `modul_path` is defined; did you mean `module_path`?",
    );
    check_err(
        "x ${zzzzzz} y",
        "`${zzzzzz}`: no variable `zzzzzz` is defined",
    );
    check_err(
        "$each.id",
        "`$each.id`: `$each` is only defined inside a map step (one with `expand_on`)",
    );
    check_err(
        "${env.HOME}",
        "`${env.HOME}`: environment variable `HOME` is not set (and a plan reads only those it lists under `env:`)",
    );
}

#[test]
fn malformed_placeholders_are_parse_errors() {
    for (text, message) in [
        ("${", "unterminated placeholder: `${` without a closing `}`"),
        (
            "a ${count",
            "unterminated placeholder: `${` without a closing `}`",
        ),
        ("${}", "empty placeholder: expected a name inside `${}`"),
        ("${a.}", "expected a field name after `.`"),
        (
            "${a[x]}",
            "expected a list index `[N]` or a quoted key `[\"key\"]`",
        ),
        ("${a b}", "unexpected ` ` in placeholder"),
        ("$var", "`$var` must be followed by `.name`"),
        ("${env}", "`${env}` needs a name: `${env.NAME}`"),
        ("${index.x}", "`index` is a number and has no fields"),
    ] {
        match Template::parse(text) {
            Err(error) => assert_eq!(error.message, message, "parsing {text:?}"),
            Ok(template) => panic!("{text:?} parsed as {template:?}"),
        }
    }
}

#[test]
fn map_items_resolve_each_index_and_key() {
    let item = json!({"id": "a1", "from": {"address": "x@y"}, "subject": "hi"});
    let index = json!(2);
    let key = json!("a1");
    let scope = Scope {
        item: Some(Item {
            value: &item,
            index: &index,
            key: Some(&key),
        }),
        ..Scope::default()
    };
    let resolve = |text: &str| Template::parse(text).unwrap().resolve(&scope).unwrap();
    assert_eq!(resolve("$each.from.address"), json!("x@y"));
    assert_eq!(resolve("Re: $each.subject (#$index)"), json!("Re: hi (#2)"));
    assert_eq!(resolve("$index"), json!(2));
    assert_eq!(resolve("${key}"), json!("a1"));
    assert_eq!(resolve("${each.id}-$key"), json!("a1-a1"));
}

#[test]
fn stand_ins_fill_what_does_not_resolve_yet_for_previews() {
    let vars = vars();
    let later = |p: &plan_vars::Placeholder| {
        (p.variable() == Some("later")).then(|| "<result of step 2>".to_owned())
    };
    let scope = Scope {
        stand_in: Some(&later),
        ..Scope::with_vars(&vars)
    };
    let resolve = |text: &str| Template::parse(text).unwrap().resolve(&scope);
    assert_eq!(
        resolve("${later.field}").unwrap(),
        json!("<result of step 2>")
    );
    assert_eq!(
        resolve("at ${api.host}/${later}").unwrap(),
        json!("at api.example.com/<result of step 2>")
    );
    // A stand-in only covers what it chooses to: the rest still fails.
    assert_eq!(resolve("${nope}").unwrap_err().placeholder, "${nope}");
}

#[test]
fn value_templates_resolve_nested_args_and_report_pointers() {
    let vars = vars();
    let args = json!({
        "path": "${module_path}",
        "literal": {"a": [1, 2, "no placeholders"]},
        "list": ["${count}", "n=${count}"],
    });
    let template = ValueTemplate::compile(&args).unwrap();
    assert!(!template.is_literal());
    let names: Vec<_> = template
        .placeholders()
        .iter()
        .map(|p| p.text().to_owned())
        .collect();
    assert_eq!(names, ["${module_path}", "${count}", "${count}"]);
    assert_eq!(
        template.resolve(&Scope::with_vars(&vars)).unwrap(),
        json!({"path": "src/auth/handler.py", "literal": {"a": [1, 2, "no placeholders"]}, "list": [3, "n=3"]})
    );

    let error = ValueTemplate::compile(&json!({"a": {"b/c": ["ok", "${oops"]}})).unwrap_err();
    assert_eq!(error.pointer, "/a/b~1c/1");
    assert!(
        ValueTemplate::compile(&json!({"x": 1}))
            .unwrap()
            .is_literal()
    );
}

#[test]
fn selectors_pick_from_the_result_or_the_variables() {
    let vars = vars();
    let result = json!({"lines": ["first", "second"], "n": 2});
    let select = |text: &str| text.parse::<Selector>().unwrap().select(&result, &vars);
    assert_eq!(select("$").unwrap(), result);
    assert_eq!(select("$.lines[0]").unwrap(), json!("first"));
    assert_eq!(select("$.n").unwrap(), json!(2));
    assert_eq!(select("$var.api.host").unwrap(), json!("api.example.com"));
    assert_eq!(
        select("$.missing").unwrap_err().to_string(),
        "`$.missing`: the step's result: `$` has no field `missing`; it has `lines`, `n`"
    );
    assert!("lines".parse::<Selector>().is_err());
    assert!("$.a b".parse::<Selector>().is_err());
    assert!("$var.".parse::<Selector>().is_err());
}

#[test]
fn env_placeholders_read_only_the_given_environment() {
    let env: BTreeMap<String, Value> = [("TOKEN".to_owned(), json!("t0k"))].into_iter().collect();
    let scope = Scope {
        env: Some(&env),
        ..Scope::default()
    };
    let resolve = |text: &str| {
        Template::parse(text)
            .unwrap()
            .resolve(&scope)
            .map_err(|e| e.to_string())
    };
    assert_eq!(resolve("Bearer ${env.TOKEN}"), Ok(json!("Bearer t0k")));
    assert_eq!(
        resolve("${env.OTHER}"),
        Err("`${env.OTHER}`: environment variable `OTHER` is not set (and a plan reads only those it lists under `env:`)".to_owned())
    );
}

#[test]
fn data_expressions_are_parsed_whole_and_evaluated_by_the_caller() {
    use plan_vars::Root;
    let template = Template::parse("${{ vars.count + 1 }}").unwrap();
    let placeholder = template.as_placeholder().unwrap();
    assert_eq!(placeholder.root, Root::Expr("vars.count + 1".into()));
    assert_eq!(placeholder.text(), "${{ vars.count + 1 }}");
    // `}}` inside a quoted string does not end it; text around it is interpolated.
    let template = Template::parse("a ${{ 'x}}y' + \"}}\" }} b").unwrap();
    let found: Vec<&Root> = template.placeholders().map(|p| &p.root).collect();
    assert_eq!(found, [&Root::Expr("'x}}y' + \"}}\"".into())]);
    // A map literal's own closing braces do not end it either.
    let template = Template::parse("${{ {'a': {'b': 1}} }}").unwrap();
    assert_eq!(
        template.as_placeholder().unwrap().root,
        Root::Expr("{'a': {'b': 1}}".into())
    );
    // The caller's evaluator gives the value; whole strings keep its type.
    let vars = vars();
    let evaluate =
        |text: &str, _: &Scope<'_>| -> Result<Value, String> { Ok(json!({"text": text})) };
    let scope = Scope {
        evaluate: Some(&evaluate),
        ..Scope::with_vars(&vars)
    };
    assert_eq!(
        Template::parse("${{ 1 }}")
            .unwrap()
            .resolve(&scope)
            .unwrap(),
        json!({"text": "1"})
    );
    assert_eq!(
        Template::parse("n=${{ 2 }}")
            .unwrap()
            .resolve(&scope)
            .unwrap(),
        json!("n={\"text\":\"2\"}")
    );
    // Without an evaluator an expression does not resolve; malformed ones do not parse.
    check_err(
        "${{ 1 }}",
        "`${{ 1 }}`: data expressions are not evaluated here",
    );
    assert!(Template::parse("${{ 1 + 2 }").is_err());
    assert!(Template::parse("${{   }}").is_err());
    // `${` alone is still a placeholder, and `$${{` a literal.
    check("$${{ x }}", json!("${{ x }}"));
}

#[test]
fn expressions_are_scanned_outside_their_strings_and_found_whole() {
    let kept: String = plan_vars::outside_strings(r#"a + 'b\'c' + "d}}" + e"#)
        .map(|(_, c)| c)
        .collect();
    assert_eq!(kept, r#"a + '' + "" + e"#);
    assert_eq!(
        plan_vars::whole_expression("  ${{ lines(result.stdout) }} "),
        Some("lines(result.stdout)".to_owned())
    );
    assert_eq!(plan_vars::whole_expression("$.stdout"), None);
    assert_eq!(plan_vars::whole_expression("x ${{ 1 }}"), None);
}

/// `[*]`, which the source documents removed, is refused with what to write instead, never
/// taken as text. `$step-XX.…`, the other removed form, is text here: whether `step-XX` is a
/// step only the plan knows (plan-graph refuses it there, finding it among the literal
/// dollars). Text that merely looks alike stays text.
#[test]
fn removed_forms_are_refused_with_their_replacement() {
    let refused = |text: &str| Template::parse(text).unwrap_err().message;
    assert!(refused("ids: $var.items[*].id").starts_with("`[*]` was removed"));
    assert!(refused("$each.tags[*]").starts_with("`[*]` was removed"));
    assert!(refused("${items[*].id}").starts_with("`[*]` was removed"));
    assert_eq!(Template::literal_dollars("$step-01.v").unwrap(), [0]);
    for text in [
        "$step-01.v",
        "$step-by-step",
        "$steps",
        "a $step",
        "$var.items[0].id",
        "cp $step-1.tar /backup",
        "price $step-2.50",
        "x$step-1.y",
    ] {
        assert!(Template::parse(text).is_ok(), "{text}");
    }
}
