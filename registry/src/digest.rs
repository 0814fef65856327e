//! Content digests: the only way a path under `blobs/` is ever built.
//!
//! A [`Digest`] holds the 32 bytes of a SHA-256 hash. It can only be made by hashing bytes or by
//! parsing `sha256:` followed by exactly 64 lowercase hex digits, so a value of this type can never
//! spell `..`, a slash or anything else that would escape the blobs directory (CVE-2024-37032
//! "Probllama" was a digest from a registry manifest used as a path). Manifests deserialize their
//! digests through [`Digest`]'s `Deserialize`, so a hostile manifest fails to parse before any
//! path is built from it.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// A SHA-256 content digest, written `sha256:<64 lowercase hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

const PREFIX: &str = "sha256:";
const FILE_PREFIX: &str = "sha256-";

impl Digest {
    /// Parses the canonical form `sha256:<64 lowercase hex>`. Nothing else is accepted.
    pub fn parse(s: &str) -> Result<Digest> {
        s.strip_prefix(PREFIX)
            .and_then(decode_hex)
            .map(Digest)
            .ok_or_else(|| Error::InvalidDigest(truncate_for_error(s)))
    }

    /// Parses a digest as Ollama's `/api/blobs/:digest` route takes it: `sha256:` or `sha256-`
    /// followed by 64 lowercase hex digits.
    pub fn parse_api(s: &str) -> Result<Digest> {
        match s.strip_prefix(FILE_PREFIX) {
            Some(hex) => decode_hex(hex)
                .map(Digest)
                .ok_or_else(|| Error::InvalidDigest(truncate_for_error(s))),
            None => Digest::parse(s),
        }
    }

    /// The digest a blob file is named for (`sha256-<hex>`), or `None` for any other name
    /// (partial downloads, temporary files, foreign files).
    pub fn from_file_name(name: &str) -> Option<Digest> {
        name.strip_prefix(FILE_PREFIX).and_then(decode_hex).map(Digest)
    }

    /// The SHA-256 of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    /// The SHA-256 of everything `r` yields, and how many bytes that was.
    pub fn of_reader(mut r: impl Read) -> io::Result<(Digest, u64)> {
        let mut h = Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => h.update(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let n = h.len();
        Ok((h.finish(), n))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[(b >> 4) as usize] as char);
            s.push(HEX[(b & 15) as usize] as char);
        }
        s
    }

    /// The first 12 hex digits, as Ollama shows a digest in progress lines (`pulling 6a0746a1ec1a`)
    /// and as a model ID.
    pub fn short(&self) -> String {
        self.hex()[..12].to_string()
    }

    /// The blob's file name under `blobs/`: `sha256-<hex>` (Ollama's layout; `:` is not allowed in
    /// Windows file names).
    pub fn file_name(&self) -> String {
        format!("{FILE_PREFIX}{}", self.hex())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn decode_hex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        out[i] = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

/// Error messages quote the offending text, but never more than a line's worth of it.
fn truncate_for_error(s: &str) -> String {
    const MAX: usize = 100;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Digest> {
        Digest::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Digest, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Incremental SHA-256 that also counts bytes.
#[derive(Clone, Default)]
pub struct Hasher {
    inner: Sha256,
    len: u64,
}

impl Hasher {
    pub fn new() -> Hasher {
        Hasher::default()
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.inner.update(bytes);
        self.len += bytes.len() as u64;
    }

    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(self) -> Digest {
        Digest(self.inner.finalize().into())
    }
}

impl io::Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn hashes_and_round_trips() {
        let d = Digest::of_bytes(b"");
        assert_eq!(d.to_string(), EMPTY);
        assert_eq!(Digest::parse(EMPTY).unwrap(), d);
        assert_eq!(d.short(), "e3b0c44298fc");
        assert_eq!(d.file_name(), format!("sha256-{}", &EMPTY[7..]));
        assert_eq!(Digest::from_file_name(&d.file_name()), Some(d));
        assert_eq!(Digest::parse_api(&d.file_name()).unwrap(), d);
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{EMPTY}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        let (r, n) = Digest::of_reader(&b"abc"[..]).unwrap();
        assert_eq!((r, n), (Digest::of_bytes(b"abc"), 3));
    }

    #[test]
    fn rejects_everything_else() {
        let hex = &EMPTY[7..];
        let bad = [
            String::new(),
            hex.to_string(),
            format!("sha256-{hex}"), // file form is not the canonical form
            format!("sha512:{hex}"),
            format!("SHA256:{hex}"),
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("sha256:{hex}\n"),
            format!("sha256:{hex}\0"),
            format!("sha256:../../../etc/passwd{}", &hex[24..]),
            "sha256:../../../../../../../../../../../../../../../../../../../../../../etc/passwd".into(),
            format!("sha256:{}/{}", &hex[..31], &hex[32..]),
            format!("sha256:{}é", &hex[..62]),
        ];
        for s in &bad {
            assert!(Digest::parse(s).is_err(), "{s:?} parsed");
            assert!(
                serde_json::from_str::<Digest>(&serde_json::to_string(s).unwrap()).is_err(),
                "{s:?} deserialized"
            );
        }
        assert!(Digest::from_file_name(&format!("sha256-{hex}-partial")).is_none());
        assert!(Digest::from_file_name(&format!("sha256:{hex}")).is_none());
        assert!(Digest::parse_api("sha256-../etc").is_err());
    }
}
