//! Registry authentication: `WWW-Authenticate` challenges and bearer tokens (the Docker token
//! protocol that OCI registries, Ollama's and Hugging Face's use).

use std::collections::HashMap;

/// A parsed `WWW-Authenticate` challenge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `Bearer` or `Basic` (lowercased).
    pub scheme: String,
    pub params: HashMap<String, String>,
}

impl Challenge {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }
}

/// Parses `Bearer realm="https://auth.example/token",service="registry",scope="repository:a/b:pull"`
/// (RFC 7235 auth-params: token or quoted-string values, backslash escapes in quoted strings).
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&header[..i], header[i..].trim_start()),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = HashMap::new();
    let mut s = rest;
    loop {
        s = s.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
        if s.is_empty() {
            break;
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_ascii_lowercase();
        s = s[eq + 1..].trim_start();
        let value;
        if let Some(q) = s.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = q.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => out.push(c),
                }
            }
            s = &q[end?..];
            value = out;
        } else {
            let end = s.find(',').unwrap_or(s.len());
            value = s[..end].trim().to_string();
            s = &s[end..];
        }
        params.insert(key, value);
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The token endpoint's answer (`token` per the Docker spec, `access_token` per OAuth2).
#[derive(serde::Deserialize)]
pub struct TokenResponse {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub access_token: String,
}

impl TokenResponse {
    pub fn into_token(self) -> Option<String> {
        [self.token, self.access_token]
            .into_iter()
            .find(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_challenges() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.docker.io/token"));
        assert_eq!(c.param("service"), Some("registry.docker.io"));
        assert_eq!(c.param("scope"), Some("repository:samalba/my-app:pull,push"));
        let c = parse_challenge(r#"Basic realm="a \"quoted\" realm", charset=UTF-8"#).unwrap();
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.param("realm"), Some("a \"quoted\" realm"));
        assert_eq!(c.param("charset"), Some("UTF-8"));
        assert!(parse_challenge(r#"Bearer realm="unterminated"#).is_none());
        assert!(parse_challenge("").is_none());
    }
}
