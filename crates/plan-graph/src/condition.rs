//! CEL conditions (`when`, block branch conditions): the limits every condition meets before
//! the `cel` crate sees it, and compiling it.
//!
//! cel's parser recurses once per bracket and per operator, with large frames (about 150 KiB a
//! level in a debug build): a `when` of a few thousand `1+1+…` terms overflowed the stack and
//! aborted the process, and a long string literal made its error message panic. So a condition
//! is bounded in size, nesting and operators, and cel always runs on a stack known to hold
//! the largest condition those bounds allow.

/// The longest condition, in bytes.
pub const MAX_CONDITION_BYTES: usize = 4096;
/// The deepest nesting of brackets (`(`, `[`, `{`) in a condition.
pub const MAX_CONDITION_NESTING: usize = 32;
/// The most operators (and separators) in a condition.
pub const MAX_CONDITION_OPERATORS: usize = 256;

/// The stack cel runs on when the thread's own has less left: a condition at the limits needs
/// about 13 MiB in a debug build (measured), under 2 MiB in a release build. It is virtual
/// memory; only what is used is touched.
const CONDITION_STACK: usize = 32 * 1024 * 1024;

/// Why a condition is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// Longer than [`MAX_CONDITION_BYTES`].
    #[error("it is {0} bytes long; a condition may have at most {MAX_CONDITION_BYTES}")]
    TooLong(usize),
    /// Brackets nested deeper than [`MAX_CONDITION_NESTING`].
    #[error("it nests brackets {0} deep; a condition may nest at most {MAX_CONDITION_NESTING}")]
    TooDeep(usize),
    /// More than [`MAX_CONDITION_OPERATORS`] operators.
    #[error("it has {0} operators; a condition may have at most {MAX_CONDITION_OPERATORS}")]
    TooManyOperators(usize),
    /// Not CEL: cel's message.
    #[error("{0}")]
    Invalid(String),
}

/// Checks the limits, then compiles the condition with cel.
pub fn compile_condition(text: &str) -> Result<cel::Program, ConditionError> {
    check_limits(text)?;
    on_condition_stack(|| cel::Program::compile(text)).map_err(|error| {
        let message = error.to_string();
        let first = message.lines().next().unwrap_or("invalid expression");
        ConditionError::Invalid(first.trim_start_matches("ERROR: ").to_owned())
    })
}

/// Runs `f` (compiling or evaluating a condition) on a stack with room for any condition
/// within the limits.
pub fn on_condition_stack<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(CONDITION_STACK, CONDITION_STACK, f)
}

fn check_limits(text: &str) -> Result<(), ConditionError> {
    if text.len() > MAX_CONDITION_BYTES {
        return Err(ConditionError::TooLong(text.len()));
    }
    let (mut depth, mut deepest, mut operators) = (0usize, 0usize, 0usize);
    for (_, c) in plan_vars::outside_strings(text) {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
                operators += 1;
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '<' | '>' | '=' | '!' | '&' | '|' | '?' | ':' | '.'
            | ',' => operators += 1,
            _ => {}
        }
    }
    if deepest > MAX_CONDITION_NESTING {
        return Err(ConditionError::TooDeep(deepest));
    }
    if operators > MAX_CONDITION_OPERATORS {
        return Err(ConditionError::TooManyOperators(operators));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_conditions_compile() {
        assert!(compile_condition("vars.count > 0 && vars.mode == 'full'").is_ok());
        assert!(compile_condition("size(vars.items) >= 2 ? true : false").is_ok());
    }

    #[test]
    fn conditions_past_the_limits_are_refused_before_cel_sees_them() {
        let sum = format!("{}1", "1+".repeat(25_000));
        assert_eq!(
            compile_condition(&sum).err(),
            Some(ConditionError::TooLong(50_001))
        );
        let parens = format!("{}1{}", "(".repeat(33), ")".repeat(33));
        assert_eq!(
            compile_condition(&parens).err(),
            Some(ConditionError::TooDeep(33))
        );
        let chain = format!("{}1", "1+".repeat(300));
        assert_eq!(
            compile_condition(&chain).err(),
            Some(ConditionError::TooManyOperators(300))
        );
    }

    #[test]
    fn brackets_and_operators_inside_strings_do_not_count() {
        let text = format!("vars.a == '{}'", "((+".repeat(200));
        assert!(compile_condition(&text).is_ok());
    }

    #[test]
    fn a_condition_at_the_limits_compiles_on_a_small_thread() {
        // The worst case the limits allow, on a thread with a tokio worker's 2 MiB stack: it
        // would overflow without the grown stack.
        let nested = format!(
            "{}{}1{}",
            "(".repeat(MAX_CONDITION_NESTING),
            "1+".repeat(MAX_CONDITION_OPERATORS - MAX_CONDITION_NESTING),
            ")".repeat(MAX_CONDITION_NESTING)
        );
        let compiled = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || compile_condition(&nested).is_ok())
            .expect("a thread starts")
            .join()
            .expect("no overflow");
        assert!(compiled);
    }

    #[test]
    fn a_bad_escape_in_a_long_string_is_an_error_not_a_panic() {
        let text = format!("'{}\\q' == 'x'", "é".repeat(2000));
        assert!(matches!(
            compile_condition(&text),
            Err(ConditionError::Invalid(_))
        ));
    }
}
