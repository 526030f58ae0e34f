//! Placeholders for plan-cli plans: parse once, resolve many times.
//!
//! ```
//! use std::collections::BTreeMap;
//!
//! use plan_vars::{Scope, Template, ValueTemplate};
//! use serde_json::{Value, json};
//!
//! let vars: BTreeMap<String, Value> =
//!     BTreeMap::from([("user".to_owned(), json!({"name": "ada", "id": 7}))]);
//! let scope = Scope::with_vars(&vars);
//! // Inside text, interpolated; alone, the value keeps its type.
//! let greeting = Template::parse("hello ${user.name}").unwrap();
//! assert_eq!(greeting.resolve(&scope).unwrap(), json!("hello ada"));
//! let args = ValueTemplate::compile(&json!({"id": "$var.user.id"})).unwrap();
//! assert_eq!(args.resolve(&scope).unwrap(), json!({"id": 7}));
//! // What does not resolve is an error naming it, never the text passed on.
//! let missing = Template::parse("${nobody}").unwrap();
//! assert!(missing.resolve(&scope).unwrap_err().to_string().contains("nobody"));
//! ```
//!
//! A plan's `args` are JSON values whose strings may hold placeholders:
//!
//! | form | meaning |
//! |---|---|
//! | `${name}`, `${name.a.b}`, `${name.list[0]}`, `${name["key with space"]}` | a variable |
//! | `$var.name.path` (also `${var.name}`) | a variable (the map-style executor's form) |
//! | `$each`, `$each.path`, `$index`, `$key` (also braced) | the current item of a map step |
//! | `${env.NAME}` | an environment value the plan lists under `env:` |
//! | `$$` | a literal `$` (so `$${x}` is the text `${x}`) |
//! | `${{ EXPR }}` | a data expression: parsed here ([`Root::Expr`]), evaluated by the caller's [`Scope::evaluate`] |
//!
//! A string that is exactly one placeholder keeps the value's JSON type; a placeholder inside
//! other text is interpolated (strings raw, everything else as compact JSON). A placeholder that
//! does not resolve is an error naming it: never a silent pass-through of the literal text.
//!
//! [`ValueTemplate`] compiles a whole JSON value; [`Template`] one string; [`Selector`] is the
//! bind selector language (`$`, `$.path`, `$var.path`). Resolution reads a [`Scope`].
//! This crate does no I/O.
#![deny(missing_docs)]

mod error;
mod path;
mod scope;
mod selector;
mod template;
mod value_template;

pub use error::{ParseError, ResolveError};
pub use path::{Segment, kind};
pub use scope::{Evaluate, Item, Scope, StandIn, Variables};
pub use selector::Selector;
pub use template::{Placeholder, Root, Template, outside_strings, whole_expression};
pub use value_template::{ValueTemplate, compact, compact_map, pointer_tokens};
