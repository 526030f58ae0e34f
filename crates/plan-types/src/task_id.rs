//! What a task step's id may be. A task's id names its branch (`worktree-<ID>`) and its
//! worktree folder (`<worktree_dir>/<ID>`), so it must be a name git takes as a branch suffix
//! (`git check-ref-format`'s rules) and a single folder name: never a path, never `..`, never
//! absolute. A plan from a hostile author (an MCP client, a model) could otherwise make
//! plan-cli clear or remove any folder (`{id: /home/me, task: …}`).

/// The longest task id: a folder name has at most 255 bytes on common file systems, and git
/// adds `worktree-` and, for a lock, `.lock`.
pub const MAX_TASK_ID_BYTES: usize = 200;

/// Why `id` cannot be a task's id, or `None` when it can. The rules are git's for a ref
/// (`git help check-ref-format`), with `/` refused too: the id is one folder name.
pub fn task_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("it is empty".to_owned());
    }
    if id.len() > MAX_TASK_ID_BYTES {
        return Some(format!(
            "it is {} bytes long; a task id has at most {MAX_TASK_ID_BYTES}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| *c == '/' || *c == '\\') {
        return Some(format!(
            "it contains `{c}`: a task id is one folder name, never a path"
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '['))
    {
        let shown = if c.is_ascii_control() {
            format!("the control character U+{:04X}", c as u32)
        } else if c == ' ' {
            "a space".to_owned()
        } else {
            format!("`{c}`")
        };
        return Some(format!(
            "it contains {shown}, which git refuses in a branch name"
        ));
    }
    if id.starts_with('.') {
        return Some("it starts with `.`, which git refuses in a branch name".to_owned());
    }
    if id.contains("..") {
        return Some("it contains `..`, which git refuses in a branch name".to_owned());
    }
    if id.contains("@{") {
        return Some("it contains `@{`, which git refuses in a branch name".to_owned());
    }
    if id.ends_with('.') {
        return Some("it ends with `.`, which git refuses in a branch name".to_owned());
    }
    if id.ends_with(".lock") {
        return Some("it ends with `.lock`, which git refuses in a branch name".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_git_takes_as_one_folder_name_pass() {
        for id in ["L1-001", "calc", "a.b", "x_y-z", "@", "né", "1"] {
            assert_eq!(task_id_problem(id), None, "{id}");
        }
    }

    #[test]
    fn paths_and_names_git_refuses_fail() {
        for id in [
            "",
            "/some/dir",
            "../up",
            "a/b",
            "x/.git",
            "a/.lock/b",
            "..",
            ".",
            ".hidden",
            "a..b",
            "a.lock",
            "a.",
            "a b",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[b",
            "a\\b",
            "a@{b",
            "tab\there",
            "del\u{7f}",
        ] {
            assert!(task_id_problem(id).is_some(), "{id:?} passed");
        }
        assert!(task_id_problem(&"x".repeat(MAX_TASK_ID_BYTES + 1)).is_some());
    }
}
