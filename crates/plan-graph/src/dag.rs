//! The dependency graph of a plan: edges, cycles, topological levels, ancestry.

use std::collections::{HashMap, HashSet};

use petgraph::algo::kosaraju_scc;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::model::{Plan, StepId};

/// Steps by position, with their dependencies resolved to positions.
#[derive(Debug, Clone)]
pub struct Dependencies {
    /// Known dependencies of each step, in the order written.
    pub deps: Vec<Vec<usize>>,
    /// Dependencies naming no step, in the order written.
    pub unknown: Vec<Vec<StepId>>,
    /// Steps that depend on each step, in plan order.
    pub dependents: Vec<Vec<usize>>,
}

impl Dependencies {
    /// Resolves every `depends_on`. With duplicate ids (an invalid plan) the first one counts.
    pub fn new(plan: &Plan) -> Self {
        let mut position: HashMap<&str, usize> = HashMap::with_capacity(plan.steps.len());
        for (i, step) in plan.steps.iter().enumerate() {
            position.entry(step.id.0.as_str()).or_insert(i);
        }
        let n = plan.steps.len();
        let mut deps = vec![Vec::new(); n];
        let mut unknown = vec![Vec::new(); n];
        let mut dependents = vec![Vec::new(); n];
        // `added[d] == i + 1`: step `i` already depends on `d` (a dependency listed twice
        // counts once), found without a search of the list.
        let mut added = vec![0usize; n];
        for (i, step) in plan.steps.iter().enumerate() {
            for dep in &step.depends_on {
                match position.get(dep.0.as_str()) {
                    Some(&d) if added[d] == i + 1 => {}
                    Some(&d) => {
                        added[d] = i + 1;
                        deps[i].push(d);
                        dependents[d].push(i);
                    }
                    None if unknown[i].contains(dep) => {}
                    None => unknown[i].push(dep.clone()),
                }
            }
        }
        Dependencies {
            deps,
            unknown,
            dependents,
        }
    }

    /// Every dependency cycle, each as the positions along it (`a` depends on `b`, ... which
    /// depends on `a`), starting at its earliest step. Sorted by that step.
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        let mut graph: DiGraph<usize, ()> = DiGraph::with_capacity(self.deps.len(), 0);
        let nodes: Vec<NodeIndex> = (0..self.deps.len()).map(|i| graph.add_node(i)).collect();
        for (i, deps) in self.deps.iter().enumerate() {
            for &d in deps {
                graph.add_edge(nodes[i], nodes[d], ());
            }
        }
        // kosaraju_scc walks without recursion: tarjan_scc recursed once per step and a long cycle
        // overflowed the stack.
        let mut cycles: Vec<Vec<usize>> = kosaraju_scc(&graph)
            .into_iter()
            .filter_map(|component| {
                let members: HashSet<usize> = component.iter().map(|n| n.index()).collect();
                let start = *members.iter().min()?;
                let looped = members.len() > 1 || self.deps[start].contains(&start);
                looped.then(|| self.path_around(start, &members))
            })
            .collect();
        cycles.sort_by_key(|cycle| cycle.first().copied());
        cycles
    }

    /// A path from `start` back to itself through `members` (which are strongly connected).
    fn path_around(&self, start: usize, members: &HashSet<usize>) -> Vec<usize> {
        // Depth-first along dependencies, preferring the first written, until `start` recurs.
        let mut path = vec![start];
        let mut seen = HashSet::from([start]);
        let mut stack = vec![self.deps[start].iter()];
        while let Some(edges) = stack.last_mut() {
            match edges.next() {
                Some(&next) if next == start => return path,
                Some(&next) if members.contains(&next) && seen.insert(next) => {
                    path.push(next);
                    stack.push(self.deps[next].iter());
                }
                Some(_) => {}
                None => {
                    stack.pop();
                    path.pop();
                }
            }
        }
        vec![start]
    }

    /// Topological levels (Kahn): level 0 has no known dependencies, level k depends only on
    /// levels below k. Steps in or after a cycle are left out. Plan order within a level.
    pub fn levels(&self) -> Vec<Vec<usize>> {
        let n = self.deps.len();
        let mut remaining: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut current: Vec<usize> = (0..n).filter(|&i| remaining[i] == 0).collect();
        let mut levels = Vec::new();
        while !current.is_empty() {
            let mut next = Vec::new();
            for &i in &current {
                for &d in &self.dependents[i] {
                    remaining[d] -= 1;
                    if remaining[d] == 0 {
                        next.push(d);
                    }
                }
            }
            next.sort_unstable();
            levels.push(std::mem::replace(&mut current, next));
        }
        levels
    }

    /// Every step that `step` depends on, directly or not.
    pub fn ancestors(&self, step: usize) -> HashSet<usize> {
        let mut seen = HashSet::new();
        let mut stack = self.deps[step].clone();
        while let Some(i) = stack.pop() {
            if seen.insert(i) {
                stack.extend(&self.deps[i]);
            }
        }
        seen
    }
}
