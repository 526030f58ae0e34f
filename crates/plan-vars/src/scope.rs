use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// Named variables a placeholder can read.
pub trait Variables {
    /// The value of `name`, if defined.
    fn get(&self, name: &str) -> Option<&Value>;
    /// Every defined name, for "did you mean" hints.
    fn names(&self) -> Vec<&str>;
}

impl Variables for BTreeMap<String, Value> {
    fn get(&self, name: &str) -> Option<&Value> {
        BTreeMap::get(self, name)
    }
    fn names(&self) -> Vec<&str> {
        self.keys().map(String::as_str).collect()
    }
}

/// Shared values: a run holds its variables this way so that reading a large list (a map
/// step's items) does not copy it.
impl Variables for BTreeMap<String, std::sync::Arc<Value>> {
    fn get(&self, name: &str) -> Option<&Value> {
        BTreeMap::get(self, name).map(|value| &**value)
    }
    fn names(&self) -> Vec<&str> {
        self.keys().map(String::as_str).collect()
    }
}

impl<S: std::hash::BuildHasher> Variables for HashMap<String, Value, S> {
    fn get(&self, name: &str) -> Option<&Value> {
        HashMap::get(self, name)
    }
    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

impl Variables for serde_json::Map<String, Value> {
    fn get(&self, name: &str) -> Option<&Value> {
        serde_json::Map::get(self, name)
    }
    fn names(&self) -> Vec<&str> {
        self.keys().map(String::as_str).collect()
    }
}

/// Evaluates a data expression (`${{ EXPR }}`, its text) over a scope (see [`Scope::evaluate`]).
pub type Evaluate<'a> = dyn Fn(&str, &Scope<'_>) -> Result<Value, String> + 'a;

/// Text to show, in a preview, for a placeholder that does not resolve (see [`Scope::stand_in`]).
pub type StandIn<'a> = dyn Fn(&crate::Placeholder) -> Option<String> + 'a;

/// The current item of a map step.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// `$each`.
    pub value: &'a Value,
    /// `$index`, as a JSON number.
    pub index: &'a Value,
    /// `$key`, when the step has an `expand_key`.
    pub key: Option<&'a Value>,
}

/// Everything a placeholder may read.
#[derive(Clone, Copy, Default)]
pub struct Scope<'a> {
    /// Named variables.
    pub vars: Option<&'a dyn Variables>,
    /// The current map item, inside a map step.
    pub item: Option<Item<'a>>,
    /// The environment values the plan lists under `env:`.
    pub env: Option<&'a BTreeMap<String, Value>>,
    /// For previews: text to show instead of failing, for a placeholder that does not
    /// resolve (e.g. `<result of step 2>` for a variable a step will bind). `None` from the
    /// function, or no function, means the placeholder fails as usual.
    pub stand_in: Option<&'a StandIn<'a>>,
    /// Evaluates data expressions; without it, a `${{ EXPR }}` does not resolve (this crate
    /// knows no expression language).
    pub evaluate: Option<&'a Evaluate<'a>>,
    /// The names a missing variable's message may suggest instead (`did you mean …?`), when
    /// the message must not depend on what happens to be bound at the moment (a run's records
    /// are the same whatever the timing): every name the plan can define. Without it, the
    /// variables there are now.
    pub names: Option<&'a [String]>,
}

impl<'a> Scope<'a> {
    /// A scope with these variables and nothing else.
    pub fn with_vars(vars: &'a dyn Variables) -> Self {
        Scope {
            vars: Some(vars),
            ..Scope::default()
        }
    }

    pub(crate) fn item_field(
        &self,
        field: impl FnOnce(&Item<'a>) -> Option<&'a Value>,
        name: &str,
    ) -> Result<&'a Value, String> {
        match &self.item {
            None => Err(format!(
                "`{name}` is only defined inside a map step (one with `expand_on`)"
            )),
            Some(item) => field(item).ok_or_else(|| {
                format!("`{name}` is only defined in a map step that sets `expand_key`")
            }),
        }
    }

    pub(crate) fn missing_variable(&self, name: &str) -> String {
        let names: Vec<&str> = match self.names {
            Some(names) => names.iter().map(String::as_str).collect(),
            None => self.vars.map(|vars| vars.names()).unwrap_or_default(),
        };
        let mut reason = format!("no variable `{name}` is defined");
        if self.names.is_some() && names.contains(&name) {
            // A name the plan binds: the step that binds it has not (skipped, or failed).
            reason.push_str(": the step that binds it did not bind it (it was skipped or failed)");
            return reason;
        }
        let closest = names
            .iter()
            .map(|candidate| (strsim::levenshtein(name, candidate), *candidate))
            .filter(|(distance, candidate)| *distance <= 2.max(candidate.len() / 3))
            .min();
        if let Some((_, candidate)) = closest {
            reason.push_str(&format!("; did you mean `{candidate}`?"));
        } else if names.is_empty() {
            reason.push_str(" (there are no variables yet)");
        }
        reason
    }
}
