//! A call's identity as a value: the step it belongs to, the map item (`deploy-0`,
//! `deploy[prod]`), then the calls it is inside (a block node's run `review/draft#1`, nested
//! `review/inner#1/check#2`, a task's call `T1/check-1#2`). The engine makes these and renders
//! them as text only where an id leaves it (records, events, approval keys, queue job ids);
//! the text is read back in one place, `plan_graph::StepIndex::call_of`, with
//! [`CallPath::segments_of`] for the part inside.

use std::fmt;
use std::sync::Arc;

/// A call inside a step: a block node or a task's call (`implement`, `check-1`, `feedback`),
/// and which run of it (the node's visit, the task's attempt; from 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The node's or the call's name.
    pub name: Arc<str>,
    /// Its run: 1 for the first.
    pub run: u32,
}

/// Which item of a map step: by position (`STEP-N`), or by its `expand_key` (`STEP[KEY]`, the
/// key already redacted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MapItem {
    /// The item at this position.
    Index(usize),
    /// The item with this key.
    Key(String),
}

/// A call's identity: its step, its map item if any, and the calls it is inside, outermost
/// first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallPath {
    step: Arc<str>,
    item: Option<MapItem>,
    inside: Vec<Segment>,
}

impl CallPath {
    /// A step's own call.
    pub fn step(id: impl Into<Arc<str>>) -> CallPath {
        CallPath {
            step: id.into(),
            item: None,
            inside: Vec::new(),
        }
    }

    /// The call of item `item` of map step `id`.
    pub fn item(id: impl Into<Arc<str>>, item: MapItem) -> CallPath {
        CallPath {
            step: id.into(),
            item: Some(item),
            inside: Vec::new(),
        }
    }

    /// Run `run` of the call `name` inside this one (a node of this block, a task's call).
    #[must_use]
    pub fn then(&self, name: &str, run: u32) -> CallPath {
        let mut inside = self.inside.clone();
        inside.push(Segment {
            name: Arc::from(name),
            run,
        });
        CallPath {
            step: self.step.clone(),
            item: self.item.clone(),
            inside,
        }
    }

    /// The step's id.
    pub fn step_id(&self) -> &str {
        &self.step
    }

    /// The calls it is inside, outermost first; empty for a step's own call.
    pub fn inside(&self) -> &[Segment] {
        &self.inside
    }

    /// The key of its approvals: the path without runs (`review/deploy`), so that one
    /// decision covers every run of a node in a loop.
    pub fn key(&self) -> String {
        let mut key = self.step.to_string();
        push_item(&mut key, self.item.as_ref());
        for segment in &self.inside {
            key.push('/');
            key.push_str(&segment.name);
        }
        key
    }

    /// Reads the part of a stored id inside its step (`inner#1/check#2`, `check-1#2`): the
    /// ledger's ids are read back only here and in `plan_graph::StepIndex`. A segment without
    /// a run reads as run 0.
    pub fn segments_of(inside: &str) -> Vec<Segment> {
        inside
            .split('/')
            .map(|segment| {
                let (name, run) = segment
                    .rsplit_once('#')
                    .map_or((segment, 0), |(name, run)| (name, run.parse().unwrap_or(0)));
                Segment {
                    name: Arc::from(name),
                    run,
                }
            })
            .collect()
    }
}

fn push_item(text: &mut String, item: Option<&MapItem>) {
    match item {
        None => {}
        Some(MapItem::Index(n)) => {
            text.push('-');
            text.push_str(&n.to_string());
        }
        Some(MapItem::Key(key)) => {
            text.push('[');
            text.push_str(key);
            text.push(']');
        }
    }
}

/// As records, events and queue jobs name the call: `STEP`, `STEP-N`, `STEP[KEY]`, then
/// `/NAME#RUN` for each call it is inside.
impl fmt::Display for CallPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.step)?;
        match &self.item {
            None => {}
            Some(MapItem::Index(n)) => write!(f, "-{n}")?,
            Some(MapItem::Key(key)) => write!(f, "[{key}]")?,
        }
        for segment in &self.inside {
            write!(f, "/{}#{}", segment.name, segment.run)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::CallPath;

    #[test]
    fn a_path_renders_as_todays_ids_and_reads_back() {
        let block = CallPath::step("review");
        assert_eq!(block.to_string(), "review");
        let node = block.then("inner", 1).then("check", 2);
        assert_eq!(node.to_string(), "review/inner#1/check#2");
        assert_eq!(node.key(), "review/inner/check");
        assert_eq!(
            CallPath::step("T1").then("check-1", 3).to_string(),
            "T1/check-1#3"
        );
        // A step id may hold `/` and `#` of its own: the step is kept whole.
        let odd = CallPath::step("a/b#1").then("n", 1);
        assert_eq!(odd.step_id(), "a/b#1");
        assert_eq!(odd.to_string(), "a/b#1/n#1");
        assert_eq!(CallPath::segments_of("inner#1/check#2"), node.inside());
        assert_eq!(
            CallPath::segments_of("check-1#3")[0].name.as_ref(),
            "check-1"
        );
        assert_eq!(CallPath::segments_of("deploy")[0].run, 0);
        // Map items, by position and by key (a key may hold `/`).
        assert_eq!(
            CallPath::item("m", super::MapItem::Index(3)).to_string(),
            "m-3"
        );
        let keyed = CallPath::item("m", super::MapItem::Key("a/b".to_owned()));
        assert_eq!(keyed.to_string(), "m[a/b]");
        assert_eq!(keyed.key(), "m[a/b]");
        // A task's merge wait is a call inside it too.
        let merge = CallPath::step("L1/a").then(crate::MERGE, 2);
        assert_eq!(merge.to_string(), "L1/a/merge#2");
    }
}
