//! Fuzzes manifest parsing (registry::Manifest::parse), the gate every manifest from a registry
//! goes through before any path is built from it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry::Manifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::parse(data) {
        for l in m.all_blobs() {
            let f = l.digest.file_name();
            assert!(f.starts_with("sha256-") && f.len() == 71 && !f.contains(['/', '\\', '.']));
        }
        let again = Manifest::parse(&m.to_bytes()).expect("written back, it parses");
        assert_eq!(again, m);
    }
});
