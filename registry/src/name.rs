//! Model names: `[scheme://][host/][namespace/]model[:tag]`, as Ollama parses them
//! (`types/model/name.go`).
//!
//! Defaults: scheme `https`, host `registry.ollama.ai`, namespace `library`, tag `latest`. Every
//! part is validated before a [`Name`] exists, with Ollama's rules:
//!
//! | part      | first character          | then                      | length  |
//! |-----------|--------------------------|---------------------------|---------|
//! | host      | letter, digit, `_`       | also `.`, `-`, `:`        | 1..=350 |
//! | namespace | letter, digit, `_`       | also `-`                  | 1..=80  |
//! | model     | letter, digit, `_`       | also `.`, `-`             | 1..=80  |
//! | tag       | letter, digit, `_`       | also `.`, `-`             | 1..=80  |
//!
//! So no part can be empty, `.`, `..`, contain a slash, a backslash or a NUL, and the four parts
//! can be used as directory names under `manifests/` without escaping it. Names compare
//! case-insensitively ([`Name::eq_ignore_case`]); the store resolves a name to the spelling on disk.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

pub const DEFAULT_HOST: &str = "registry.ollama.ai";
pub const DEFAULT_NAMESPACE: &str = "library";
pub const DEFAULT_TAG: &str = "latest";

/// The protocol used to reach a model's registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Scheme {
    #[default]
    Https,
    /// Plain http: only with `insecure` (Ollama's `--insecure`).
    Http,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }
}

/// A fully qualified, validated model name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name {
    scheme: Scheme,
    host: String,
    namespace: String,
    model: String,
    tag: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Host,
    Namespace,
    Model,
    Tag,
}

impl Part {
    fn label(self) -> &'static str {
        match self {
            Part::Host => "host",
            Part::Namespace => "namespace",
            Part::Model => "model",
            Part::Tag => "tag",
        }
    }

    fn max_len(self) -> usize {
        match self {
            Part::Host => 350,
            _ => 80,
        }
    }

    fn rule(self) -> &'static str {
        match self {
            Part::Host => "letters, digits, '_', '.', '-' and ':'",
            Part::Namespace => "letters, digits, '_' and '-'",
            Part::Model | Part::Tag => "letters, digits, '_', '.' and '-'",
        }
    }

    fn allows(self, c: u8) -> bool {
        c.is_ascii_alphanumeric()
            || c == b'_'
            || c == b'-'
            || (c == b'.' && self != Part::Namespace)
            || (c == b':' && self == Part::Host)
    }
}

/// Ollama's `isValidPart`, with a reason when the part is not valid.
fn check_part(part: Part, s: &str) -> std::result::Result<(), String> {
    let what = part.label();
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    if b.len() > part.max_len() {
        return Err(format!("the {what} is longer than {} characters", part.max_len()));
    }
    if !(b[0].is_ascii_alphanumeric() || b[0] == b'_') {
        return Err(format!("the {what} must start with a letter, a digit or '_'"));
    }
    if let Some(&c) = b.iter().find(|&&c| !part.allows(c)) {
        let shown = if c.is_ascii_graphic() {
            format!("'{}'", c as char)
        } else {
            format!("byte 0x{c:02x}")
        };
        return Err(format!(
            "the {what} contains {shown}; it may contain only {}",
            part.rule()
        ));
    }
    Ok(())
}

impl Name {
    /// Parses a name, filling in the defaults for missing parts, and validates every part.
    ///
    /// The tag is split off at the last `:` only if it comes after the last `/` (so
    /// `localhost:5000/ns/m` is a host with a port); then model, namespace and host are split off
    /// at `/` from the right; an optional `http://` or `https://` prefix sets the scheme.
    pub fn parse(s: &str) -> Result<Name> {
        let invalid = |reason: String| Error::InvalidName {
            name: truncate(s),
            reason,
        };
        let mut rest = s;
        let mut tag = DEFAULT_TAG;
        // `/` cannot appear in a tag, so a `:` after the last `/` starts the tag (and a `:` before
        // it is a host's port).
        if let Some(i) = rest.rfind(':').filter(|&i| Some(i) > rest.rfind('/')) {
            tag = &rest[i + 1..];
            rest = &rest[..i];
        }
        // A separator promises a part: `ns/` or `m:` with nothing after it is an error, not a
        // default, because the empty part fails validation below.
        let (mut host, mut namespace, mut model) = (DEFAULT_HOST, DEFAULT_NAMESPACE, rest);
        let mut scheme = Scheme::Https;
        if let Some((before, m)) = rest.rsplit_once('/') {
            model = m;
            namespace = before;
            if let Some((h, ns)) = before.rsplit_once('/') {
                namespace = ns;
                host = h;
                if let Some((sch, h)) = h.split_once("://") {
                    scheme = match sch {
                        "https" => Scheme::Https,
                        "http" => Scheme::Http,
                        other => {
                            return Err(invalid(format!(
                                "unsupported scheme {:?} (use http:// or https://)",
                                truncate(other)
                            )))
                        }
                    };
                    host = h;
                }
            }
        }
        Name::validated(scheme, host, namespace, model, tag).map_err(invalid)
    }

    fn validated(
        scheme: Scheme,
        host: &str,
        namespace: &str,
        model: &str,
        tag: &str,
    ) -> std::result::Result<Name, String> {
        for (part, value) in [
            (Part::Host, host),
            (Part::Namespace, namespace),
            (Part::Model, model),
            (Part::Tag, tag),
        ] {
            check_part(part, value)?;
        }
        Ok(Name {
            scheme,
            host: host.to_string(),
            namespace: namespace.to_string(),
            model: model.to_string(),
            tag: tag.to_string(),
        })
    }

    /// A name from the four directory levels of a manifest path (`host/namespace/model/tag`);
    /// `None` if any part is invalid (such files are not models: temporaries, foreign files).
    pub fn from_parts(host: &str, namespace: &str, model: &str, tag: &str) -> Option<Name> {
        for (part, value) in [
            (Part::Host, host),
            (Part::Namespace, namespace),
            (Part::Model, model),
            (Part::Tag, tag),
        ] {
            check_part(part, value).ok()?;
        }
        Some(Name {
            scheme: Scheme::Https,
            host: host.to_string(),
            namespace: namespace.to_string(),
            model: model.to_string(),
            tag: tag.to_string(),
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The four path components under `manifests/`: host, namespace, model, tag.
    pub fn parts(&self) -> [&str; 4] {
        [&self.host, &self.namespace, &self.model, &self.tag]
    }

    /// The same name with the parts replaced by another spelling (used to adopt the on-disk
    /// spelling); the scheme is kept.
    pub(crate) fn with_parts(&self, parts: [&str; 4]) -> Name {
        Name {
            scheme: self.scheme,
            host: parts[0].to_string(),
            namespace: parts[1].to_string(),
            model: parts[2].to_string(),
            tag: parts[3].to_string(),
        }
    }

    /// The repository path on the registry: `namespace/model`.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.namespace, self.model)
    }

    /// Ollama's `DisplayShortest`: default host and namespace dropped, the tag always shown
    /// (`llama3.2:latest`, `hf.co/bartowski/X-GGUF:Q4_K_M`, `me/mine:v1`).
    pub fn display_shortest(&self) -> String {
        if !self.host.eq_ignore_ascii_case(DEFAULT_HOST) {
            format!("{}/{}/{}:{}", self.host, self.namespace, self.model, self.tag)
        } else if !self.namespace.eq_ignore_ascii_case(DEFAULT_NAMESPACE) {
            format!("{}/{}:{}", self.namespace, self.model, self.tag)
        } else {
            format!("{}:{}", self.model, self.tag)
        }
    }

    /// Names are the same model if host, namespace, model and tag match ignoring ASCII case.
    pub fn eq_ignore_case(&self, other: &Name) -> bool {
        self.parts()
            .iter()
            .zip(other.parts())
            .all(|(a, b)| a.eq_ignore_ascii_case(b))
    }
}

impl fmt::Display for Name {
    /// The fully qualified form `host/namespace/model:tag` (no scheme).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}:{}", self.host, self.namespace, self.model, self.tag)
    }
}

impl FromStr for Name {
    type Err = Error;
    fn from_str(s: &str) -> Result<Name> {
        Name::parse(s)
    }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 200;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(s: &str) -> (Scheme, String, String, String, String) {
        let n = Name::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (
            n.scheme(),
            n.host().into(),
            n.namespace().into(),
            n.model().into(),
            n.tag().into(),
        )
    }

    #[test]
    fn defaults_and_forms() {
        let h = Scheme::Https;
        let t = |a: &str, b: &str, c: &str, d: &str| (h, a.into(), b.into(), c.into(), d.into());
        assert_eq!(
            parts("llama3.2"),
            t(DEFAULT_HOST, "library", "llama3.2", "latest")
        );
        assert_eq!(parts("llama3.2:1b"), t(DEFAULT_HOST, "library", "llama3.2", "1b"));
        assert_eq!(parts("me/mine:v1.0"), t(DEFAULT_HOST, "me", "mine", "v1.0"));
        assert_eq!(
            parts("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M"),
            t("hf.co", "bartowski", "Llama-3.2-1B-Instruct-GGUF", "Q4_K_M")
        );
        assert_eq!(
            parts("localhost:5000/ns/m"),
            t("localhost:5000", "ns", "m", "latest")
        );
        assert_eq!(
            parts("localhost:5000/ns/m:tag"),
            t("localhost:5000", "ns", "m", "tag")
        );
        let n = Name::parse("http://127.0.0.1:5000/library/tiny:1").unwrap();
        assert_eq!(n.scheme(), Scheme::Http);
        assert_eq!(n.host(), "127.0.0.1:5000");
        assert_eq!(n.to_string(), "127.0.0.1:5000/library/tiny:1");
        assert_eq!(n.repository(), "library/tiny");
    }

    #[test]
    fn display_shortest() {
        let d = |s: &str| Name::parse(s).unwrap().display_shortest();
        assert_eq!(d("llama3.2"), "llama3.2:latest");
        assert_eq!(d("registry.ollama.ai/library/llama3.2:1b"), "llama3.2:1b");
        assert_eq!(d("me/mine"), "me/mine:latest");
        assert_eq!(d("hf.co/a/b:Q8_0"), "hf.co/a/b:Q8_0");
        assert_eq!(d("Registry.Ollama.AI/Library/X"), "X:latest");
    }

    #[test]
    fn case_insensitive_equality() {
        let a = Name::parse("Llama3.2:Latest").unwrap();
        let b = Name::parse("llama3.2").unwrap();
        assert!(a.eq_ignore_case(&b));
        assert_ne!(a, b);
        assert!(!a.eq_ignore_case(&Name::parse("llama3.2:1b").unwrap()));
    }

    #[test]
    fn rejects_invalid_and_hostile_names() {
        let bad = [
            "",
            ":",
            "model:",
            "/model",
            "ns/",
            "a//b",
            "../../etc/passwd",
            "..",
            ".",
            "./x",
            "x/..",
            "h/../m",
            "h/ns/..",
            "model:..",
            "model:../x",
            "ns.dot/model",
            "a/b/c/d",
            "/etc/passwd",
            "C:\\Windows\\system32",
            "model\\x",
            "mo\0del",
            "model:ta\0g",
            "-model",
            "model:-tag",
            "mödel",
            "model name",
            "model:tag\n",
            "model@sha256:abcd",
            "ftp://host/ns/model",
            "https:///ns/model",
            "http://",
        ];
        for s in bad {
            assert!(Name::parse(s).is_err(), "{s:?} parsed as {:?}", Name::parse(s));
        }
        let long = "a".repeat(81);
        assert!(Name::parse(&long).is_err());
        assert!(Name::parse(&"a".repeat(80)).is_ok());
        assert!(Name::parse(&format!("m:{long}")).is_err());
        assert!(Name::parse(&format!("{}/ns/m", "h".repeat(351))).is_err());
        assert!(Name::parse(&format!("{}/ns/m", "h".repeat(350))).is_ok());
        let e = Name::parse("ns.x/model").unwrap_err().to_string();
        assert!(e.contains("namespace") && e.contains("'.'"), "{e}");
    }

    #[test]
    fn from_parts_validates() {
        assert!(Name::from_parts(DEFAULT_HOST, "library", "m", "latest").is_some());
        assert!(Name::from_parts(DEFAULT_HOST, "library", "m", ".latest.tmp").is_none());
        assert!(Name::from_parts(DEFAULT_HOST, "..", "m", "t").is_none());
    }
}
