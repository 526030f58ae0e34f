//! Reading back JSON that plan-cli wrote, at any depth.
//!
//! serde_json refuses documents nested deeper than 128 levels by default, but a run can make
//! deeper values (a chain of steps each echoing its dependency's result nests once a step), and
//! what was written must always be readable. These readers lift the limit and grow the stack
//! as the nesting needs, so depth costs memory, never a crash.

use serde::de::DeserializeOwned;

/// The stack a thread that handles a run's values is given. Cloning, serializing and dropping
/// a value recurses once per level of nesting, and a run can nest values as deep as it has
/// steps; a debug build overflowed a tokio worker's default 2 MiB on a 1,000-step chain. It
/// is virtual memory: only what is used is touched.
pub const VALUE_THREAD_STACK: usize = 64 * 1024 * 1024;

/// Parses JSON text of any nesting depth.
pub fn from_str<T: DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut deserializer))?;
    deserializer.end()?;
    Ok(value)
}

/// Parses JSON bytes of any nesting depth.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> serde_json::Result<T> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    deserializer.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut deserializer))?;
    deserializer.end()?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn values_deeper_than_serde_jsons_limit_read_back() {
        let text = nested(1_500);
        assert!(serde_json::from_str::<Value>(&text).is_err());
        let value: Value = super::from_str(&text).expect("reads");
        assert_eq!(serde_json::to_string(&value).expect("writes"), text);
        let value: Value = super::from_slice(text.as_bytes()).expect("reads");
        // Dropping a deep value recurses too; it must not overflow the test's thread.
        drop(value);
    }

    #[test]
    fn trailing_text_is_still_an_error() {
        assert!(super::from_str::<Value>("[1] x").is_err());
    }
}
