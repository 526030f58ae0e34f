//! A call's identity as records, events, approvals and queue jobs carry it, read in one place:
//! a step (`deploy`), a map item (`deploy-0`, `deploy[prod]`, whose key may hold any
//! character, `/` included), or a call inside a step (a block node's run `review/draft#1`,
//! nested `review/inner#1/check#2`, a task's call `T1/check-1#2`).

/// The parts of a call id, borrowed from its text. Made by [`CallId::parse`]; shown as the
/// text it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallId<'a> {
    text: &'a str,
    /// Where the part inside the step starts (after its `/`), if there is one.
    inside: Option<usize>,
}

impl<'a> CallId<'a> {
    /// Reads `id`. A map item's key is everything between the first `[` and the `]` that ends
    /// the id, so a `/` in it never starts a node's part.
    pub fn parse(id: &'a str) -> CallId<'a> {
        let inside = match id.find(['/', '[']) {
            Some(at) if id.as_bytes()[at] == b'/' => Some(at + 1),
            // `STEP[KEY]`: the key runs to the end; an item has no part inside.
            _ => None,
        };
        CallId { text: id, inside }
    }

    /// Reads `id` knowing the plan's steps: a step's id may hold a `/` or a `[` itself (`a/b`,
    /// `b[x]`), so the call's step is the longest prefix ending before a `/` that `is_step`
    /// accepts (`a/b/check#1` is a node of step `a/b`, even when `a` is a step too; `b[x]/n#1`
    /// of step `b[x]`). Without one the id is a call of its own: a step's, or an item's
    /// (`a/m[x/y]` of map step `a/m`). (Which map step an item belongs to, this does not know:
    /// `plan_graph::StepIndex::call_of` does.)
    pub fn within(id: &'a str, is_step: impl Fn(&str) -> bool) -> CallId<'a> {
        let inside = if is_step(id) {
            None
        } else {
            id.match_indices('/')
                .map(|(at, _)| at)
                .filter(|&at| is_step(&id[..at]))
                .last()
                .map(|at| at + 1)
        };
        CallId { text: id, inside }
    }

    /// The step's own call, or a map item's (`deploy`, `deploy-0`, `deploy[prod]`): the id up
    /// to the part inside it.
    pub fn top(&self) -> &'a str {
        match self.inside {
            Some(at) => &self.text[..at - 1],
            None => self.text,
        }
    }

    /// The part inside the step: a block node's path (`draft#1`, `inner#1/check#2`) or a
    /// task's call (`check-1#2`). `None` for a step's or an item's own call.
    pub fn inside(&self) -> Option<&'a str> {
        self.inside.map(|at| &self.text[at..])
    }

    /// Whether this is a call inside a step (a block node, a task's call).
    pub fn is_inside(&self) -> bool {
        self.inside.is_some()
    }

    /// The id as written.
    pub fn as_str(&self) -> &'a str {
        self.text
    }
}

impl std::fmt::Display for CallId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::CallId;

    #[test]
    fn steps_items_and_nodes_are_told_apart() {
        fn parts(id: &str) -> (&str, Option<&str>) {
            let call = CallId::parse(id);
            (call.top(), call.inside())
        }
        assert_eq!(parts("deploy"), ("deploy", None));
        assert_eq!(parts("deploy-3"), ("deploy-3", None));
        assert_eq!(parts("review/draft#1"), ("review", Some("draft#1")));
        assert_eq!(
            parts("review/inner#1/check#2"),
            ("review", Some("inner#1/check#2"))
        );
        assert_eq!(parts("T1/check-1#2"), ("T1", Some("check-1#2")));
        // A key with a `/` is an item's, never a node's.
        assert_eq!(parts("m[a/b]"), ("m[a/b]", None));
        assert_eq!(parts("m[x]/y]"), ("m[x]/y]", None));
        assert!(!CallId::parse("m[a/b]").is_inside());
        // A step's id may hold a `/`: the plan's steps say where the node's part starts.
        let steps = ["a/b", "c"];
        let within = |id| {
            let call = CallId::within(id, |s| steps.contains(&s));
            (call.top(), call.inside())
        };
        assert_eq!(within("a/b"), ("a/b", None));
        assert_eq!(within("a/b/check#1"), ("a/b", Some("check#1")));
        assert_eq!(within("c/x#1/y#2"), ("c", Some("x#1/y#2")));
        // Ids with `/` and `[` of their own (hostile review): map step `a/m`, block `b[x]`.
        let steps = ["a/m", "b[x]"];
        let within = |id| {
            let call = CallId::within(id, |s| steps.contains(&s));
            (call.top(), call.inside())
        };
        assert_eq!(within("a/m[x]"), ("a/m[x]", None));
        assert_eq!(within("a/m[x/y]"), ("a/m[x/y]", None));
        assert_eq!(within("b[x]/n#1"), ("b[x]", Some("n#1")));
        // One step's id a prefix of another's (hostile review): the longer one's node.
        let steps = ["a", "a/p"];
        let within = |id| {
            let call = CallId::within(id, |s| steps.contains(&s));
            (call.top(), call.inside())
        };
        assert_eq!(within("a/p/n1#1"), ("a/p", Some("n1#1")));
        assert_eq!(within("a/n1#1"), ("a", Some("n1#1")));
    }
}
