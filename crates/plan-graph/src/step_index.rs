//! Which step of a plan a call belongs to, from its id: the step's own call, a map item's
//! (`STEP-N`, `STEP[KEY]`), or a call inside it (a block node, a task's call). Step ids may
//! hold `/` and `[` themselves, so ids are read knowing the plan's steps
//! ([`plan_types::CallId::within`]).

use std::collections::HashMap;

use plan_types::{CallId, PendingApproval};

/// A plan's step ids by position.
#[derive(Debug, Clone, Default)]
pub struct StepIndex {
    positions: HashMap<String, usize>,
}

impl StepIndex {
    /// The index of steps `ids`, in plan order.
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let mut positions = HashMap::new();
        for (i, id) in ids.into_iter().enumerate() {
            positions.entry(id.to_owned()).or_insert(i);
        }
        StepIndex { positions }
    }

    /// The position of the step whose id is `id` exactly.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    /// The position of the step call `id` belongs to, if it is one of the plan's (a step of an
    /// earlier revision of a re-planned run is none).
    pub fn step_of(&self, id: &str) -> Option<usize> {
        let top = CallId::within(id, |step| self.positions.contains_key(step)).top();
        self.positions.get(top).copied().or_else(|| {
            // A map item: `STEP-N` or `STEP[KEY]`, its step's id a prefix of it.
            top.match_indices(['-', '['])
                .map(|(at, _)| &top[..at])
                .filter(|step| crate::is_item_of(top, step))
                .find_map(|step| self.positions.get(step).copied())
        })
    }

    /// `pending` in plan order (by step, then id), whatever the order they became ready in:
    /// a resumed run, whose restored steps make their dependents ready first, lists them as
    /// an uninterrupted one does.
    pub fn sort_pending(&self, pending: &mut [PendingApproval]) {
        pending.sort_by_cached_key(|p| (self.step_of(&p.step_id), p.step_id.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::StepIndex;

    #[test]
    fn calls_are_found_in_their_steps() {
        let index = StepIndex::new(["build", "a/b", "m", "b[x]"]);
        assert_eq!(index.step_of("build"), Some(0));
        assert_eq!(index.step_of("a/b/check#1"), Some(1));
        assert_eq!(index.step_of("m-3"), Some(2));
        assert_eq!(index.step_of("m[k/v]"), Some(2));
        assert_eq!(index.step_of("b[x]/n#1"), Some(3));
        assert_eq!(index.step_of("gone"), None);
    }
}
