//! JSON bytes as Go's `json.Encoder` writes them, for the blobs `create` makes.
//!
//! Layer blobs are content-addressed, so their exact bytes are their identity. Writing the params,
//! messages, config and manifest JSON byte-for-byte as Ollama does (struct field order, sorted map
//! keys, `<`, `>`, `&`, U+2028 and U+2029 escaped as `\u003c`…, a trailing newline) means the same
//! Modelfile gives the same digests in ollamars and in Ollama, and layers dedupe across both.

use std::io;

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, Serializer};

struct GoFormatter(CompactFormatter);

impl Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, w: &mut W, fragment: &str) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let esc = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            w.write_all(&fragment.as_bytes()[start..i])?;
            w.write_all(esc.as_bytes())?;
            start = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[start..])
    }
}

/// `v` encoded as Go's `json.NewEncoder(w).Encode(v)` would: compact, HTML-escaped, newline-ended.
pub fn to_vec<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ser = Serializer::with_formatter(&mut out, GoFormatter(CompactFormatter));
    // Serializing our own types into memory cannot fail (no maps with non-string keys, no I/O).
    v.serialize(&mut ser).expect("serializing to memory cannot fail");
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        let v = serde_json::json!({"a": 1, "stop": ["<|eot_id|>", "a&b", "\u{2028}"], "t": "x\"\n"});
        assert_eq!(
            String::from_utf8(to_vec(&v)).unwrap(),
            "{\"a\":1,\"stop\":[\"\\u003c|eot_id|\\u003e\",\"a\\u0026b\",\"\\u2028\"],\"t\":\"x\\\"\\n\"}\n"
        );
    }
}
