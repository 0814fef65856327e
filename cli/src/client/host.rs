//! Where the daemon is: `OLLAMARS_HOST`, read as Ollama's client reads `OLLAMA_HOST`.

use std::path::PathBuf;

/// The default address, as Ollama's.
pub const DEFAULT: &str = "127.0.0.1:11434";

/// What to say after the address when nothing listens there while Ollama's `OLLAMA_HOST` is set
/// and `OLLAMARS_HOST` is not: a script written for Ollama points its clients with the former,
/// and ollamars reads only its own name (so that it can run beside Ollama).
pub fn ollama_host_note(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    if env("OLLAMARS_HOST").is_some() {
        return None;
    }
    let theirs = env("OLLAMA_HOST").filter(|v| !v.trim().is_empty())?;
    Some(format!(
        " (OLLAMA_HOST={theirs:?} is not read: set OLLAMARS_HOST)"
    ))
}

/// The daemon's address as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// `http(s)://host:port[/path]`, the base of every API path.
    Http { base: String },
    /// A unix socket; requests go to `http://localhost/...` over it.
    Unix(PathBuf),
}

impl Host {
    /// The address from `OLLAMARS_HOST`, or the default.
    pub fn from_env() -> Result<Host, String> {
        match std::env::var("OLLAMARS_HOST") {
            Ok(v) => Host::parse(&v).map_err(|e| format!("OLLAMARS_HOST={v:?}: {e}")),
            Err(_) => Host::parse(DEFAULT),
        }
    }

    /// Parses `[http://|https://]host[:port][/path]` or `unix:///path`. Without a scheme the
    /// port defaults to 11434; with `http://` or `https://` to 80 or 443, as in Ollama. A listen
    /// address of all interfaces (`0.0.0.0`, `::`) is reached through loopback.
    pub fn parse(s: &str) -> Result<Host, String> {
        let s = s.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        if let Some(path) = s.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err("a unix socket needs an absolute path: unix:///path/to/socket".into());
            }
            return Ok(Host::Unix(PathBuf::from(path)));
        }
        let (scheme, default_port, rest) = if let Some(r) = s.strip_prefix("http://") {
            ("http", 80, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            ("https", 443, r)
        } else if s.contains("://") {
            return Err("the scheme must be http://, https:// or unix://".into());
        } else {
            ("http", 11434, s)
        };
        let (hostport, path) = match rest.split_once('/') {
            Some((hp, p)) => (hp, p.trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = split_host_port(hostport)?;
        let port = port.unwrap_or(default_port);
        let host = match host.as_str() {
            "" | "0.0.0.0" => "127.0.0.1".to_string(),
            "::" => "::1".to_string(),
            _ => host,
        };
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let mut base = format!("{scheme}://{host}:{port}");
        if !path.is_empty() {
            base.push('/');
            base.push_str(path);
        }
        Ok(Host::Http { base })
    }

    /// The URL of an API path (`/api/tags`).
    pub fn url(&self, path: &str) -> String {
        match self {
            Host::Http { base } => format!("{base}{path}"),
            Host::Unix(_) => format!("http://localhost{path}"),
        }
    }

    /// Whether the daemon is on this machine, so that no proxy from the environment applies.
    pub fn is_local(&self) -> bool {
        match self {
            Host::Unix(_) => true,
            Host::Http { base } => {
                let rest = base.split_once("://").map_or(base.as_str(), |(_, r)| r);
                let hostport = rest.split('/').next().unwrap_or("");
                let host = match split_host_port(hostport) {
                    Ok((h, _)) => h,
                    Err(_) => return false,
                };
                host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
            }
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Http { base } => f.write_str(base.strip_prefix("http://").unwrap_or(base)),
            Host::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`, `:port`, or a bare IPv6 address.
fn split_host_port(hostport: &str) -> Result<(String, Option<u16>), String> {
    let parse_port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| format!("invalid port {p:?}"))
            .map(Some)
    };
    if let Some(r) = hostport.strip_prefix('[') {
        let (h, after) = r.split_once(']').ok_or("unclosed '[' in the address")?;
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(p)?,
            None if after.is_empty() => None,
            None => return Err(format!("unexpected {after:?} after ']'")),
        };
        return Ok((h.to_string(), port));
    }
    if hostport.matches(':').count() > 1 {
        return Ok((hostport.to_string(), None));
    }
    match hostport.split_once(':') {
        Some((h, p)) => Ok((h.to_string(), parse_port(p)?)),
        None => Ok((hostport.to_string(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(s: &str) -> String {
        match Host::parse(s).unwrap() {
            Host::Http { base } => base,
            Host::Unix(p) => format!("unix:{}", p.display()),
        }
    }

    #[test]
    fn ollamas_host_variable_is_named_when_ours_is_missing() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
        };
        assert_eq!(
            ollama_host_note(env(&[("OLLAMA_HOST", "0.0.0.0:9")])).as_deref(),
            Some(" (OLLAMA_HOST=\"0.0.0.0:9\" is not read: set OLLAMARS_HOST)")
        );
        assert_eq!(
            ollama_host_note(env(&[("OLLAMA_HOST", "x"), ("OLLAMARS_HOST", "y")])),
            None
        );
        assert_eq!(ollama_host_note(env(&[("OLLAMA_HOST", " ")])), None);
        assert_eq!(ollama_host_note(env(&[])), None);
    }

    #[test]
    fn addresses_as_ollama_reads_them() {
        assert_eq!(base(""), "http://127.0.0.1:11434");
        assert_eq!(base("  \"127.0.0.1:9999\" "), "http://127.0.0.1:9999");
        assert_eq!(base("example.com"), "http://example.com:11434");
        assert_eq!(base(":8080"), "http://127.0.0.1:8080");
        assert_eq!(base("0.0.0.0"), "http://127.0.0.1:11434");
        assert_eq!(base("0.0.0.0:1234"), "http://127.0.0.1:1234");
        assert_eq!(base("http://example.com"), "http://example.com:80");
        assert_eq!(base("https://example.com"), "https://example.com:443");
        assert_eq!(
            base("https://example.com:8443/ollama/"),
            "https://example.com:8443/ollama"
        );
        assert_eq!(base("[::1]:5000"), "http://[::1]:5000");
        assert_eq!(base("::1"), "http://[::1]:11434");
        assert_eq!(base("[::]"), "http://[::1]:11434");
        assert_eq!(base("unix:///run/ollamars.sock"), "unix:/run/ollamars.sock");
    }

    #[test]
    fn bad_addresses_are_errors() {
        assert!(Host::parse("127.0.0.1:99999").is_err());
        assert!(Host::parse("127.0.0.1:abc").is_err());
        assert!(Host::parse("ftp://x").is_err());
        assert!(Host::parse("unix://relative.sock").is_err());
        assert!(Host::parse("[::1").is_err());
    }

    #[test]
    fn urls_and_locality() {
        let h = Host::parse("127.0.0.1:5000").unwrap();
        assert_eq!(h.url("/api/tags"), "http://127.0.0.1:5000/api/tags");
        assert!(h.is_local());
        assert_eq!(h.to_string(), "127.0.0.1:5000");
        assert!(Host::parse("localhost").unwrap().is_local());
        assert!(Host::parse("[::1]:1").unwrap().is_local());
        assert!(!Host::parse("example.com").unwrap().is_local());
        let u = Host::parse("unix:///tmp/s.sock").unwrap();
        assert_eq!(u.url("/api/ps"), "http://localhost/api/ps");
        assert!(u.is_local());
        assert_eq!(u.to_string(), "unix:///tmp/s.sock");
    }
}
