//! Which step of a plan a call belongs to, from its id: the step's own call, a map item's
//! (`STEP-N`, `STEP[KEY]`), or a call inside it (a block node, a task's call). Step ids may
//! hold `/` and `[` themselves, so ids are read knowing the plan's steps. The engine makes ids
//! as [`plan_types::CallPath`] values; this is where their text is read back.

use std::collections::HashMap;

use plan_types::PendingApproval;

/// Which call of a plan an id (a record's, an event's, an approval's) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOf<'a> {
    /// The step's own call: its position.
    Step(usize),
    /// An item of a map step (`STEP-N`, `STEP[KEY]`): the step's position.
    Item(usize),
    /// A call inside a step (a block node's run, a task's call): the step's position, and
    /// the part after `STEP/` (`draft#1`, `inner#1/check#2`, `check-1#2`).
    Inside(usize, &'a str),
}

impl CallOf<'_> {
    /// The position of the step the call belongs to.
    pub fn step(&self) -> usize {
        match *self {
            CallOf::Step(i) | CallOf::Item(i) | CallOf::Inside(i, _) => i,
        }
    }
}

/// A plan's step ids by position.
#[derive(Debug, Clone, Default)]
pub struct StepIndex {
    positions: HashMap<String, usize>,
    /// The lengths step ids have: only a prefix of one of these lengths can name a step, so
    /// reading an id hashes only those (an id of 20,000 dashes is not 20,000 lookups of ever
    /// longer prefixes, which any tool's result could otherwise cause through a map key).
    lengths: std::collections::HashSet<usize>,
}

impl StepIndex {
    /// The index of steps `ids`, in plan order.
    pub fn new<'a>(ids: impl IntoIterator<Item = &'a str>) -> Self {
        let mut positions = HashMap::new();
        let mut lengths = std::collections::HashSet::new();
        for (i, id) in ids.into_iter().enumerate() {
            lengths.insert(id.len());
            positions.entry(id.to_owned()).or_insert(i);
        }
        StepIndex { positions, lengths }
    }

    /// The position of the step whose id is `id` exactly.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    /// The position of the step call `id` belongs to, if it is one of the plan's (a step of an
    /// earlier revision of a re-planned run is none).
    pub fn step_of(&self, id: &str) -> Option<usize> {
        self.call_of(id).map(|call| call.step())
    }

    /// The call `id` names, if it belongs to one of the plan's steps: the one reader of the
    /// ids the ledger, events and approvals carry.
    ///
    /// A step's id may hold `/`, `-` and `[` itself, and one step's id may begin another's
    /// (`build` and `build/each`): the call belongs to the longest step id it begins with, as
    /// a call inside that step (`STEP/…`) or one of its map items (`STEP-N`, `STEP[KEY]`).
    ///
    /// A question a call asked a person (`CALL@input#N`, [`plan_types::question_key`]) is
    /// read as the call that asked it.
    pub fn call_of<'a>(&self, id: &'a str) -> Option<CallOf<'a>> {
        if let Some(&i) = self.positions.get(id) {
            return Some(CallOf::Step(i));
        }
        if let Some((call, _)) = plan_types::question_of(id) {
            return self.call_of(call);
        }
        let mut longest = None;
        for (at, mark) in id.match_indices(['/', '-', '[']) {
            if !self.lengths.contains(&at) {
                continue;
            }
            let step = &id[..at];
            let Some(&i) = self.positions.get(step) else {
                continue;
            };
            if mark == "/" {
                longest = Some(CallOf::Inside(i, &id[at + 1..]));
            } else if crate::is_item_of(id, step) {
                longest = Some(CallOf::Item(i));
            }
        }
        longest
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
    use super::{CallOf, StepIndex};

    #[test]
    fn a_long_id_is_read_as_a_short_one_is() {
        let long = "-".repeat(20_000);
        let index = StepIndex::new(["build", long.as_str()]);
        assert_eq!(index.call_of(&format!("{long}-3")), Some(CallOf::Item(1)));
        let key = format!("build[{}]", "-".repeat(20_000));
        assert_eq!(index.call_of(&key), Some(CallOf::Item(0)));
        assert_eq!(index.call_of(&"-".repeat(30_000)), None);
    }

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

    #[test]
    fn ids_are_read_as_the_calls_they_name() {
        let index = StepIndex::new(["build", "each", "a/b", "review"]);
        assert_eq!(index.call_of("build"), Some(CallOf::Step(0)));
        assert_eq!(index.call_of("each-3"), Some(CallOf::Item(1)));
        assert_eq!(index.call_of("each[x/y]"), Some(CallOf::Item(1)));
        assert_eq!(index.call_of("a/b"), Some(CallOf::Step(2)));
        assert_eq!(
            index.call_of("a/b/check#1"),
            Some(CallOf::Inside(2, "check#1"))
        );
        assert_eq!(
            index.call_of("review/inner#1/draft#2"),
            Some(CallOf::Inside(3, "inner#1/draft#2"))
        );
        assert_eq!(index.call_of("gone"), None);
        // A question is read as the call that asked it.
        assert_eq!(index.call_of("build@input#1"), Some(CallOf::Step(0)));
        assert_eq!(index.call_of("each-3@input#2"), Some(CallOf::Item(1)));
        assert_eq!(index.call_of("each[x@input#1]"), Some(CallOf::Item(1)));
        assert_eq!(
            index.call_of("review/draft#2@input#1"),
            Some(CallOf::Inside(3, "draft#2"))
        );
        assert_eq!(index.call_of("builder-1"), None);
        assert_eq!(index.step_of("each-0"), Some(1));
        // One step's id the start of another's (hostile review): the longer one's calls.
        let index = StepIndex::new(["build", "build/each", "a", "a/p"]);
        assert_eq!(index.call_of("build/each-0"), Some(CallOf::Item(1)));
        assert_eq!(index.call_of("build/each[k/v]"), Some(CallOf::Item(1)));
        assert_eq!(index.call_of("build/x#1"), Some(CallOf::Inside(0, "x#1")));
        assert_eq!(index.call_of("a/p/n1#1"), Some(CallOf::Inside(3, "n1#1")));
        assert_eq!(index.call_of("a/n1#1"), Some(CallOf::Inside(2, "n1#1")));
    }
}
