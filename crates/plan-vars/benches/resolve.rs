//! Resolution cost: a 1 KiB args object with 10 placeholders, compiled once and resolved many
//! times (what the engine does for each call). Prints one JSON line; `cargo xtask bench resolve`.
//! Under `cargo test` (no `--bench`), a short run checks that it works.

use std::collections::BTreeMap;
use std::time::Instant;

use plan_vars::{Scope, ValueTemplate};
use serde_json::{Value, json};

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let vars: BTreeMap<String, Value> = [
        ("user", json!({"name": "Ada Lovelace", "email": "ada@example.com", "tags": ["admin", "ops"], "id": 1815})),
        ("api", json!({"host": "api.example.com", "version": "v2", "token_header": "X-Token"})),
        ("items", json!([{"id": "a1", "qty": 3}, {"id": "b2", "qty": 1}])),
        ("limit", json!(50)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let filler = "lorem ipsum dolor sit amet ".repeat(25);
    let args = json!({
        "url": "https://${api.host}/${api.version}/users/${user.id}",
        "headers": {"Accept": "application/json", "User-Agent": "plan-cli/0.1", "X-Request": "${user.email}"},
        "body": {
            "name": "${user.name}",
            "tags": "${user.tags}",
            "first_item": "${items[0].id}",
            "limit": 50,
            "note": filler,
            "summary": "user ${user.name} wants ${items[0].qty} of $var.items[1].id",
        },
        "timeout_ms": 5000,
    });
    let size = args.to_string().len();
    let template = ValueTemplate::compile(&args).expect("valid placeholders");
    let placeholders = template.placeholders().len();
    assert_eq!(placeholders, 10);
    assert!(size >= 1024, "args are {size} bytes");
    let scope = Scope::with_vars(&vars);
    let per_batch = if full { 100_000 } else { 100 };
    let batches = if full { 9 } else { 1 };
    let mut per_call_ns: Vec<f64> = (0..batches)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..per_batch {
                let resolved = template.resolve(&scope).expect("resolves");
                std::hint::black_box(resolved);
            }
            started.elapsed().as_secs_f64() * 1e9 / per_batch as f64
        })
        .collect();
    per_call_ns.sort_by(f64::total_cmp);
    let median = per_call_ns[per_call_ns.len() / 2];
    println!(
        "{}",
        json!({"workload": "resolve", "args_bytes": size, "placeholders": placeholders, "runs": batches, "calls_per_run": per_batch, "ns_per_resolve": median, "us_per_step": median / 1e3})
    );
}
