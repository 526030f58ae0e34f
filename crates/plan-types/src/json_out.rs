//! JSON as plan-cli prints it (the CLI's `--json`, `mcp serve`'s answers): pretty at the top (the report's fields, its records and
//! variables, one per line), compact below. Fully pretty JSON indents each level of a value
//! on every line, so a value nested n deep costs O(n²) bytes and a chain of such values
//! O(n³): a 1,000-step chain whose steps echo their dependency printed 1.35 GB.

use std::io::{self, Write};

use serde_json::ser::Formatter;

/// Containers up to this depth are laid out one member per line; deeper ones are compact.
const PRETTY_DEPTH: usize = 3;

/// serde_json's `PrettyFormatter`, compact below [`PRETTY_DEPTH`].
#[derive(Default)]
struct Shallow {
    depth: usize,
    has_value: bool,
}

impl Shallow {
    fn pretty(&self) -> bool {
        self.depth <= PRETTY_DEPTH
    }

    fn member<W: ?Sized + Write>(&mut self, writer: &mut W, first: bool) -> io::Result<()> {
        if self.pretty() {
            writer.write_all(if first { b"\n" } else { b",\n" })?;
            indent(writer, self.depth)
        } else if first {
            Ok(())
        } else {
            writer.write_all(b",")
        }
    }

    fn close<W: ?Sized + Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        let pretty = self.pretty();
        self.depth -= 1;
        if pretty && self.has_value {
            writer.write_all(b"\n")?;
            indent(writer, self.depth)?;
        }
        writer.write_all(bracket)
    }
}

fn indent<W: ?Sized + Write>(writer: &mut W, depth: usize) -> io::Result<()> {
    for _ in 0..depth {
        writer.write_all(b"  ")?;
    }
    Ok(())
}

impl Formatter for Shallow {
    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.member(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.member(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(if self.pretty() { b": " } else { b":" })
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Writes `value` to `writer` in plan-cli's layout.
pub fn write(writer: &mut impl Write, value: &impl serde::Serialize) -> serde_json::Result<()> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, Shallow::default());
    value.serialize(&mut serializer)
}

/// `value` in plan-cli's layout.
pub fn to_string(value: &impl serde::Serialize) -> serde_json::Result<String> {
    let mut bytes = Vec::new();
    write(&mut bytes, value)?;
    // The formatter writes only what serde_json gives it, which is UTF-8.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_top_is_pretty_and_deep_values_are_compact() {
        let value =
            json!({"records": [{"step_id": "a", "result": {"x": [1, {"y": 2}]}}], "empty": {}});
        assert_eq!(
            super::to_string(&value).ok().as_deref(),
            Some(
                "{\n  \"records\": [\n    {\n      \"step_id\": \"a\",\n      \"result\": {\"x\":[1,{\"y\":2}]}\n    }\n  ],\n  \"empty\": {}\n}"
            )
        );
    }

    #[test]
    fn output_grows_with_the_value_not_with_its_depth_squared() {
        let mut deep = json!(1);
        for _ in 0..1000 {
            deep = json!({"prev": deep});
        }
        let text = super::to_string(&deep).unwrap_or_default();
        assert!(text.len() < 12_000, "{} bytes", text.len());
        // And it is the same JSON (read back below serde_json's recursion limit).
        let mut shallow = json!(1);
        for _ in 0..100 {
            shallow = json!({"prev": shallow, "n": [1, 2]});
        }
        let text = super::to_string(&shallow).unwrap_or_default();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).ok(),
            Some(shallow)
        );
    }
}
