//! The run's variables as a block's or a task's calls see them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// The run's variables with a few names of a block's or task's own on top (`input` and
/// `nodes` in a block node, `task` and `failure` in a task's calls), which shadow run
/// variables of those names.
pub(crate) struct Overlay<'a> {
    pub(crate) vars: &'a BTreeMap<String, Arc<Value>>,
    pub(crate) own: [(&'static str, &'a Value); 2],
}

impl plan_vars::Variables for Overlay<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        match self.own.iter().find(|(own, _)| *own == name) {
            Some((_, value)) => Some(value),
            None => self.vars.get(name).map(|v| &**v),
        }
    }

    fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.vars.keys().map(String::as_str).collect();
        names.extend(self.own.iter().map(|(name, _)| *name));
        names
    }
}
