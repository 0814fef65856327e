//! Fuzzes model name and digest parsing (registry::Name, registry::Digest) with arbitrary text.
//!
//! A name that parses has four parts that are safe as directory names (checked here against the
//! rules independently of the parser) and reads back from its displayed forms; a digest that
//! parses is exactly `sha256:` + 64 lowercase hex and names a plain file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry::{Digest, Name};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(n) = Name::parse(s) {
        for (i, part) in n.parts().iter().enumerate() {
            let b = part.as_bytes();
            let max = if i == 0 { 350 } else { 80 };
            assert!(!b.is_empty() && b.len() <= max, "part {i} {part:?}");
            assert!(b[0].is_ascii_alphanumeric() || b[0] == b'_', "part {i} {part:?}");
            for &c in b {
                let ok = c.is_ascii_alphanumeric()
                    || c == b'_'
                    || c == b'-'
                    || (c == b'.' && i != 1)
                    || (c == b':' && i == 0);
                assert!(ok, "part {i} {part:?}");
            }
            assert!(*part != "." && *part != "..");
        }
        let full = Name::parse(&n.to_string()).expect("the full form parses");
        assert_eq!(full.parts(), n.parts());
        let short = Name::parse(&n.display_shortest()).expect("the short form parses");
        assert!(short.eq_ignore_case(&n), "{} vs {n}", n.display_shortest());
    }
    for parse in [Digest::parse, Digest::parse_api] {
        if let Ok(d) = parse(s) {
            let text = d.to_string();
            assert_eq!(text.len(), 71);
            assert!(text[7..].bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            assert_eq!(Digest::parse(&text).unwrap(), d);
            assert!(!d.file_name().contains(['/', '\\', '\0']) && !d.file_name().contains(".."));
        }
    }
    if let Some(d) = Digest::from_file_name(s) {
        assert_eq!(d.file_name(), s);
    }
});
