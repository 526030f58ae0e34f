//! The run's answer, the map-style executor's chat surface: the text the plan's
//! `chat.respond` (or `respond`) calls gave, read from the run's records. The engine reads it
//! at a run's end and `status` from the ledger, through this one reader.

use std::collections::BTreeSet;

use plan_types::{Record, is_answer_tool};

use crate::{CallOf, Plan, StepIndex};

/// Which calls of a plan give its answer.
#[derive(Debug, Clone)]
pub struct Answers {
    index: StepIndex,
    /// For each step: whether its own call answers (a map step's: each of its items'), and
    /// the paths of node names of its block (`[inner, reply]`) whose calls answer.
    steps: Vec<StepAnswers>,
}

#[derive(Debug, Clone)]
struct StepAnswers {
    own: bool,
    mapped: bool,
    nodes: BTreeSet<Vec<String>>,
}

impl Answers {
    /// The calls of `plan` that answer; `None` when it makes none (most plans: nothing is read).
    pub fn of(plan: &Plan) -> Option<Answers> {
        let steps: Vec<StepAnswers> = plan
            .steps
            .iter()
            .map(|step| {
                let mut nodes = BTreeSet::new();
                if let Some(block) = &step.block {
                    answering_nodes(block, &mut Vec::new(), &mut nodes);
                }
                StepAnswers {
                    own: step.block.is_none() && step.task.is_none() && is_answer_tool(&step.tool),
                    mapped: step.expand.is_some(),
                    nodes,
                }
            })
            .collect();
        if steps.iter().all(|step| !step.own && step.nodes.is_empty()) {
            return None;
        }
        let index = StepIndex::new(plan.steps.iter().map(|step| step.id.0.as_str()));
        Some(Answers { index, steps })
    }

    /// The answer in `records`: the `text` of each answering call that succeeded (an empty one
    /// aside), in record order, a blank line between two; `None` when there is none.
    pub fn answer(&self, records: &[Record]) -> Option<String> {
        let texts: Vec<&str> = records
            .iter()
            .filter(|record| record.ok && !record.skipped && self.answers(&record.step_id))
            .filter_map(|record| record.result.as_ref()?.get("text")?.as_str())
            .filter(|text| !text.is_empty())
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n\n"))
    }

    /// Whether call `id` is one that answers. A map step's own record sums up its items, so
    /// only the items count.
    fn answers(&self, id: &str) -> bool {
        match self.index.call_of(id) {
            Some(CallOf::Step(i)) => self.steps[i].own && !self.steps[i].mapped,
            Some(CallOf::Item(i)) => self.steps[i].own,
            Some(CallOf::Inside(i, inside)) => {
                let names: Vec<String> = plan_types::CallPath::segments_of(inside)
                    .into_iter()
                    .map(|segment| segment.name.to_string())
                    .collect();
                self.steps[i].nodes.contains(&names)
            }
            None => false,
        }
    }
}

fn answering_nodes(block: &crate::Block, at: &mut Vec<String>, found: &mut BTreeSet<Vec<String>>) {
    for (name, node) in &block.nodes {
        at.push(name.clone());
        if let Some(inner) = &node.block {
            answering_nodes(inner, at, found);
        } else if node.tool.as_deref().is_some_and(is_answer_tool) {
            found.insert(at.clone());
        }
        at.pop();
    }
}
