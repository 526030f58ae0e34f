//! How a run's parts are said in a line of text, for every view that follows a run: the CLI's
//! live lines, a dashboard's feed, the message of an MCP progress notification.

use std::borrow::Cow;

pub use plan_types::one_line;

/// An approval's id as a sentence says it: `the plan` for the plan's own approval
/// (`--mode approval`), `the workspace's context update` for that call's, else the call's id
/// on one line.
pub fn approval(id: &str) -> Cow<'_, str> {
    match id {
        plan_types::PLAN_APPROVAL => Cow::Borrowed("the plan"),
        plan_types::CONTEXT_UPDATE_ID => Cow::Borrowed("the workspace's context update"),
        id => one_line(id),
    }
}

/// The first sentence of a description (MCP servers write paragraphs), for a line per tool.
pub fn first_sentence(text: &str) -> &str {
    match text.find(". ") {
        Some(end) => &text[..=end],
        None => text,
    }
}

/// `1 call`, `2 calls`: a number with the word for it.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `850ms`, `12.34s`, `4m05s`, `2h03m`: a step's time and a run's alike.
pub fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}.{:02}s", ms / 1_000, (ms % 1_000) / 10),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, (ms / 1_000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// What a rejection of `decided` ids does on resume: a call fails, a task whose merge waited
/// (`abandoned`) is abandoned.
pub fn rejection_outcome(decided: usize, abandoned: &[String]) -> String {
    let calls = decided - abandoned.len();
    let mut outcomes = Vec::new();
    match calls {
        0 => {}
        1 => outcomes
            .push("the call fails with E_REJECTED and what depends on it is skipped".to_owned()),
        _ => outcomes
            .push("the calls fail with E_REJECTED and what depends on them is skipped".to_owned()),
    }
    for task in abandoned {
        outcomes.push(format!("task `{task}` is abandoned, its worktree kept"));
    }
    format!(": on resume {}", outcomes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::{approval, count, duration, one_line, rejection_outcome};

    #[test]
    fn approvals_and_counts_read_as_sentences() {
        assert_eq!(approval(plan_types::PLAN_APPROVAL), "the plan");
        assert_eq!(
            approval(plan_types::CONTEXT_UPDATE_ID),
            "the workspace's context update"
        );
        assert_eq!(approval("deploy[a\nb]"), "deploy[a\\nb]");
        assert_eq!(
            (count(1, "step", "steps"), count(0, "step", "steps")),
            ("1 step".into(), "0 steps".into())
        );
    }

    #[test]
    fn an_id_stays_on_its_line() {
        assert_eq!(one_line("deploy[eu]"), "deploy[eu]");
        assert_eq!(one_line("deploy\u{200b}"), "deploy\\u{200b}");
        assert_eq!(one_line("a\n✓ b\t\u{1b}[2J"), "a\\n✓ b\\t\\u{1b}[2J");
    }

    #[test]
    fn durations_read_as_a_person_would_write_them() {
        let cases = [
            (0, "0ms"),
            (999, "999ms"),
            (1_000, "1.00s"),
            (1_234, "1.23s"),
            (59_999, "59.99s"),
            (60_000, "1m00s"),
            (229_510, "3m49s"),
            (3_599_999, "59m59s"),
            (3_600_000, "1h00m"),
            (50_580_000, "14h03m"),
        ];
        for (ms, text) in cases {
            assert_eq!(duration(ms), text, "{ms} ms");
        }
    }

    #[test]
    fn a_rejection_says_what_it_does_to_calls_and_to_waiting_merges() {
        assert_eq!(
            rejection_outcome(1, &[]),
            ": on resume the call fails with E_REJECTED and what depends on it is skipped"
        );
        assert_eq!(
            rejection_outcome(3, &["T1".to_owned()]),
            ": on resume the calls fail with E_REJECTED and what depends on them is skipped; task `T1` is abandoned, its worktree kept"
        );
    }
}
