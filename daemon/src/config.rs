//! The daemon's settings: defaults, a YAML config file, and `OLLAMARS_*` environment variables
//! (which win over the file). Every setting remembers where its value came from, for
//! `ollamars serve --print-config`.
//!
//! The file is the per-user config dir's `ollamars/config.yaml` (from `directories`), or the
//! path given with `--config`. An unknown key or a bad value is an error that names the key and
//! the line.

use std::fmt;
use std::path::{Path, PathBuf};

use engine::KvType;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use crate::keep_alive::KeepAlive;
use crate::security::ApiKey;

/// Where the daemon listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// `host:port` (a name or an IP address).
    Tcp { host: String, port: u16 },
    /// `unix:///path/to/socket`.
    Unix(PathBuf),
}

impl Listen {
    /// Parses `OLLAMARS_HOST`: `[http://|https://]host[:port]` (default port 11434, or 80/443
    /// with an explicit scheme, as Ollama does), `:port`, or `unix:///path`.
    pub fn parse(s: &str) -> Result<Listen, String> {
        let s = s.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        if let Some(path) = s.strip_prefix("unix://") {
            if path.is_empty() || !path.starts_with('/') {
                return Err(format!(
                    "{s:?}: a unix socket needs an absolute path (unix:///path)"
                ));
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        let (default_port, rest) = if let Some(r) = s.strip_prefix("http://") {
            (80, r)
        } else if let Some(r) = s.strip_prefix("https://") {
            (443, r)
        } else if s.contains("://") {
            return Err(format!("{s:?}: the scheme must be http://, https:// or unix://"));
        } else {
            (11434, s)
        };
        let hostport = rest.split('/').next().unwrap_or("");
        if hostport.is_empty() {
            return Ok(Listen::Tcp {
                host: "127.0.0.1".into(),
                port: default_port,
            });
        }
        // [v6]:port, [v6], host:port, host, :port
        let (host, port) = if let Some(r) = hostport.strip_prefix('[') {
            let (h, after) = r.split_once(']').ok_or_else(|| format!("{s:?}: unclosed '['"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("{s:?}: unexpected text after ']'")),
            };
            (h.to_string(), port)
        } else if hostport.matches(':').count() > 1 {
            (hostport.to_string(), None)
        } else if let Some((h, p)) = hostport.split_once(':') {
            (h.to_string(), Some(p))
        } else {
            (hostport.to_string(), None)
        };
        let port = match port {
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| format!("{s:?}: invalid port {p:?}"))?,
            None => default_port,
        };
        let host = if host.is_empty() {
            "127.0.0.1".to_string()
        } else {
            host
        };
        Ok(Listen::Tcp { host, port })
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listen::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Listen::Tcp { host, port } => write!(f, "{host}:{port}"),
            Listen::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// Where a setting's value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    File(PathBuf),
    Env(&'static str),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => write!(f, "default"),
            Source::File(p) => write!(f, "config file {}", p.display()),
            Source::Env(v) => write!(f, "environment {v}"),
        }
    }
}

/// The effective settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub host: Listen,
    pub models: PathBuf,
    pub keep_alive: KeepAlive,
    pub num_parallel: u32,
    pub max_loaded_models: usize,
    pub max_queue: usize,
    pub context_length: u32,
    /// Extra allowed CORS origins (the localhost ones are always allowed).
    pub origins: Vec<String>,
    pub kv_cache_type: KvType,
    /// Bytes the loaded models may take together (weights + KV cache + scratch).
    pub max_memory: u64,
    /// Largest JSON request body; blob uploads are not limited by it.
    pub max_request_bytes: u64,
    /// Engine worker threads per model (0: one per CPU).
    pub num_threads: usize,
    /// Most bytes of prompt text in one request (prompt, system, messages' content, input).
    pub max_prompt_bytes: u64,
    /// Most images in one request.
    pub max_images: usize,
    /// How long a client may take to send a request head or a JSON body, or pause a blob upload.
    pub read_timeout: std::time::Duration,
    /// API keys (inline and from `api_keys_file`); empty: no authentication.
    pub api_keys: Vec<ApiKey>,
    /// The keys file, if one is set.
    pub api_keys_file: Option<PathBuf>,
    /// Listen on a non-loopback address even without API keys.
    pub allow_remote: bool,
    /// Where each setting came from, by key.
    pub sources: Vec<(&'static str, Source)>,
    /// Ollama's names of settings (`OLLAMA_HOST`, …) found in the environment without ours.
    /// ollamars reads only `OLLAMARS_*`, so that it can run beside Ollama; `serve` warns about
    /// these rather than ignore a unit or compose file written for Ollama without a word.
    pub ollama_env: Vec<String>,
}

/// One documented setting: its file key, environment variable, and help.
pub struct SettingDoc {
    pub key: &'static str,
    pub env: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

/// Every setting, in the order `--help`, `--print-config` and the README list them.
pub const SETTINGS: &[SettingDoc] = &[
    SettingDoc {
        key: "host",
        env: "OLLAMARS_HOST",
        default: "127.0.0.1:11434",
        help: "address to listen on: host:port, or unix:///path/to.sock",
    },
    SettingDoc {
        key: "models",
        env: "OLLAMARS_MODELS",
        default: "per-user data dir/ollamars/models",
        help: "models directory",
    },
    SettingDoc {
        key: "keep_alive",
        env: "OLLAMARS_KEEP_ALIVE",
        default: "5m",
        help: "how long an idle model stays loaded: a duration (5m, 1h), seconds, negative = forever, 0 = unload when idle",
    },
    SettingDoc {
        key: "num_parallel",
        env: "OLLAMARS_NUM_PARALLEL",
        default: "1",
        help: "parallel requests per model (slots sharing each forward pass)",
    },
    SettingDoc {
        key: "max_loaded_models",
        env: "OLLAMARS_MAX_LOADED_MODELS",
        default: "3",
        help: "most models loaded at once",
    },
    SettingDoc {
        key: "max_queue",
        env: "OLLAMARS_MAX_QUEUE",
        default: "512",
        help: "most requests waiting for a model or a slot; more get 503",
    },
    SettingDoc {
        key: "context_length",
        env: "OLLAMARS_CONTEXT_LENGTH",
        default: "4096",
        help: "default context length (num_ctx), capped at the model's trained context",
    },
    SettingDoc {
        key: "origins",
        env: "OLLAMARS_ORIGINS",
        default: "(localhost only)",
        help: "extra allowed CORS origins, comma-separated (wildcards: http://*.example.com, chrome-extension://*)",
    },
    SettingDoc {
        key: "kv_cache_type",
        env: "OLLAMARS_KV_CACHE_TYPE",
        default: "f16",
        help: "KV cache element type: f16 or q8_0",
    },
    SettingDoc {
        key: "max_memory",
        env: "OLLAMARS_MAX_MEMORY",
        default: "90% of system memory",
        help: "memory budget for loaded models (bytes, or with KB/MB/GB/KiB/MiB/GiB)",
    },
    SettingDoc {
        key: "max_request_bytes",
        env: "OLLAMARS_MAX_REQUEST_BYTES",
        default: "64MiB",
        help: "largest request body (blob uploads excepted)",
    },
    SettingDoc {
        key: "num_threads",
        env: "OLLAMARS_NUM_THREADS",
        default: "0",
        help: "engine threads per model, 0 = one per CPU (at most 512)",
    },
    SettingDoc {
        key: "max_prompt_bytes",
        env: "OLLAMARS_MAX_PROMPT_BYTES",
        default: "8MiB",
        help: "most prompt text in one request (prompt, system, message contents, embedding input)",
    },
    SettingDoc {
        key: "max_images",
        env: "OLLAMARS_MAX_IMAGES",
        default: "16",
        help: "most images in one request",
    },
    SettingDoc {
        key: "read_timeout",
        env: "OLLAMARS_READ_TIMEOUT",
        default: "60s",
        help: "how long a client may take to send a request's headers or JSON body, or pause a blob upload (seconds, or with s/m)",
    },
    SettingDoc {
        key: "api_keys",
        env: "OLLAMARS_API_KEYS",
        default: "(none: no authentication)",
        help: "API keys, comma-separated: KEY or admin:KEY (every endpoint), read:KEY (inference, list, show, ps, version, metrics); clients send Authorization: Bearer KEY",
    },
    SettingDoc {
        key: "api_keys_file",
        env: "OLLAMARS_API_KEYS_FILE",
        default: "(none)",
        help: "file of API keys, one entry per line as in api_keys, # comments; added to api_keys",
    },
    SettingDoc {
        key: "allow_remote",
        env: "OLLAMARS_ALLOW_REMOTE",
        default: "false",
        help: "listen on a non-loopback address without API keys (prints a warning; model management stays loopback-only)",
    },
];

/// The config file's contents: every key optional, nothing else allowed.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    host: Option<Parsed<Listen>>,
    models: Option<PathBuf>,
    keep_alive: Option<Parsed<KeepAlive>>,
    num_parallel: Option<Parsed<Positive>>,
    max_loaded_models: Option<Parsed<Positive>>,
    max_queue: Option<Parsed<Positive>>,
    context_length: Option<Parsed<Positive>>,
    origins: Option<Origins>,
    kv_cache_type: Option<Parsed<Kv>>,
    max_memory: Option<Parsed<Bytes>>,
    max_request_bytes: Option<Parsed<Bytes>>,
    num_threads: Option<Parsed<Count>>,
    max_prompt_bytes: Option<Parsed<Bytes>>,
    max_images: Option<Parsed<Count>>,
    read_timeout: Option<Parsed<Seconds>>,
    api_keys: Option<Keys>,
    api_keys_file: Option<PathBuf>,
    allow_remote: Option<Parsed<Flag>>,
}

/// A setting parsed from its text form (strings, and numbers or booleans written bare in YAML).
struct Parsed<T>(T);

trait Setting: Sized {
    fn parse(s: &str) -> Result<Self, String>;
}

impl<'de, T: Setting> Deserialize<'de> for Parsed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_yaml::Value::deserialize(d)?;
        let text = match v {
            serde_yaml::Value::String(s) => s,
            serde_yaml::Value::Number(n) => n.to_string(),
            serde_yaml::Value::Bool(b) => b.to_string(),
            other => return Err(D::Error::custom(format!("expected a value, got {other:?}"))),
        };
        T::parse(&text).map(Parsed).map_err(D::Error::custom)
    }
}

impl Setting for Listen {
    fn parse(s: &str) -> Result<Self, String> {
        Listen::parse(s)
    }
}

impl Setting for KeepAlive {
    fn parse(s: &str) -> Result<Self, String> {
        KeepAlive::parse_setting(s)
    }
}

struct Positive(u64);
impl Setting for Positive {
    fn parse(s: &str) -> Result<Self, String> {
        match s.trim().parse::<u64>() {
            Ok(n) if n > 0 && n <= u32::MAX as u64 => Ok(Positive(n)),
            _ => Err(format!("{s:?} is not a positive integer")),
        }
    }
}

struct Count(u64);
impl Setting for Count {
    fn parse(s: &str) -> Result<Self, String> {
        match s.trim().parse::<u64>() {
            Ok(n) if n <= u32::MAX as u64 => Ok(Count(n)),
            _ => Err(format!("{s:?} is not a non-negative integer")),
        }
    }
}

struct Kv(KvType);
impl Setting for Kv {
    fn parse(s: &str) -> Result<Self, String> {
        KvType::from_name(s.trim())
            .map(Kv)
            .ok_or_else(|| format!("{s:?} is not a KV cache type (f16 or q8_0)"))
    }
}

/// A size limit: zero would refuse every model (`max_memory`) or every request.
struct Bytes(u64);
impl Setting for Bytes {
    fn parse(s: &str) -> Result<Self, String> {
        match parse_bytes(s)? {
            0 => Err(format!("{s:?} is not a positive size")),
            n => Ok(Bytes(n)),
        }
    }
}

/// `1073741824`, `512MiB`, `8GB`, `1.5GiB`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "tb" | "t" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        u => return Err(format!("{s:?}: unknown size unit {u:?}")),
    };
    let v = num * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("{s:?} is not a size"));
    }
    Ok(v as u64)
}

/// A positive duration: `30`, `30s`, `2m`, `0.5s`.
struct Seconds(std::time::Duration);
impl Setting for Seconds {
    fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let (num, mult) = if let Some(n) = t.strip_suffix('m') {
            (n, 60.0)
        } else {
            (t.strip_suffix('s').unwrap_or(t), 1.0)
        };
        match num.trim().parse::<f64>() {
            Ok(n) if n > 0.0 && n * mult <= 86400.0 => {
                Ok(Seconds(std::time::Duration::from_secs_f64(n * mult)))
            }
            _ => Err(format!(
                "{s:?} is not a duration (seconds, or with s/m, up to a day)"
            )),
        }
    }
}

struct Flag(bool);
impl Setting for Flag {
    fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Flag(true)),
            "0" | "false" | "no" | "off" => Ok(Flag(false)),
            _ => Err(format!("{s:?} is not a boolean (true or false)")),
        }
    }
}

/// `api_keys`: a comma-separated string or a list of entries.
struct Keys(Vec<ApiKey>);
impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::String(s) => ApiKey::parse_list(&s).map(Keys).map_err(D::Error::custom),
            serde_yaml::Value::Sequence(items) => items
                .into_iter()
                .map(|v| match v {
                    serde_yaml::Value::String(s) => ApiKey::parse(&s).map_err(D::Error::custom),
                    _ => Err(D::Error::custom("an API key must be a string")),
                })
                .collect::<Result<_, _>>()
                .map(Keys),
            _ => Err(D::Error::custom(
                "expected a list of API keys or a comma-separated string",
            )),
        }
    }
}

struct Origins(Vec<String>);
impl<'de> Deserialize<'de> for Origins {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::String(s) => Ok(Origins(split_list(&s))),
            serde_yaml::Value::Sequence(items) => items
                .into_iter()
                .map(|v| match v {
                    serde_yaml::Value::String(s) => Ok(s),
                    other => Err(D::Error::custom(format!(
                        "an origin must be a string, got {other:?}"
                    ))),
                })
                .collect::<Result<_, _>>()
                .map(Origins),
            other => Err(D::Error::custom(format!(
                "expected a list of origins or a comma-separated string, got {other:?}"
            ))),
        }
    }
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A configuration problem, naming the setting and where it was set.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The default config file: `<config dir>/ollamars/config.yaml`.
pub fn default_config_path() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "ollamars").map(|d| d.config_dir().join("config.yaml"))
}

fn total_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(16 << 30)
}

impl Config {
    /// Loads the settings: defaults, then the config file (`path`, or the default one if it
    /// exists), then the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with(path, |k| std::env::var(k).ok())
    }

    /// [`Config::load`] with the environment given as a function (for tests).
    pub fn load_with(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let (file, file_path) = match path {
            Some(p) => (read_file(p)?, Some(p.to_path_buf())),
            None => match default_config_path() {
                Some(p) if p.exists() => (read_file(&p)?, Some(p)),
                _ => (FileConfig::default(), None),
            },
        };
        let mut cfg = Config {
            host: Listen::Tcp {
                host: "127.0.0.1".into(),
                port: 11434,
            },
            models: registry::Store::default_root().map_err(|e| ConfigError(e.to_string()))?,
            keep_alive: KeepAlive::DEFAULT,
            num_parallel: 1,
            max_loaded_models: 3,
            max_queue: 512,
            context_length: 4096,
            origins: Vec::new(),
            kv_cache_type: KvType::F16,
            max_memory: total_memory() / 10 * 9,
            max_request_bytes: 64 << 20,
            num_threads: 0,
            max_prompt_bytes: 8 << 20,
            max_images: 16,
            read_timeout: std::time::Duration::from_secs(60),
            api_keys: Vec::new(),
            api_keys_file: None,
            allow_remote: false,
            sources: SETTINGS.iter().map(|s| (s.key, Source::Default)).collect(),
            ollama_env: Vec::new(),
        };
        let from_file = Source::File(file_path.clone().unwrap_or_default());
        macro_rules! file {
            ($key:literal, $val:expr, $apply:expr) => {
                if let Some(v) = $val {
                    #[allow(clippy::redundant_closure_call)]
                    ($apply)(&mut cfg, v);
                    cfg.set_source($key, from_file.clone());
                }
            };
        }
        file!("host", file.host, |c: &mut Config, v: Parsed<Listen>| c.host =
            v.0);
        file!("models", file.models, |c: &mut Config, v: PathBuf| c.models = v);
        file!(
            "keep_alive",
            file.keep_alive,
            |c: &mut Config, v: Parsed<KeepAlive>| c.keep_alive = v.0
        );
        file!(
            "num_parallel",
            file.num_parallel,
            |c: &mut Config, v: Parsed<Positive>| c.num_parallel = v.0 .0 as u32
        );
        file!("max_loaded_models", file.max_loaded_models, |c: &mut Config,
                                                            v: Parsed<
            Positive,
        >| c
            .max_loaded_models =
            v.0 .0 as usize);
        file!(
            "max_queue",
            file.max_queue,
            |c: &mut Config, v: Parsed<Positive>| { c.max_queue = v.0 .0 as usize }
        );
        file!(
            "context_length",
            file.context_length,
            |c: &mut Config, v: Parsed<Positive>| c.context_length = v.0 .0 as u32
        );
        file!("origins", file.origins, |c: &mut Config, v: Origins| c.origins =
            v.0);
        file!(
            "kv_cache_type",
            file.kv_cache_type,
            |c: &mut Config, v: Parsed<Kv>| c.kv_cache_type = v.0 .0
        );
        file!(
            "max_memory",
            file.max_memory,
            |c: &mut Config, v: Parsed<Bytes>| c.max_memory = v.0 .0
        );
        file!(
            "max_request_bytes",
            file.max_request_bytes,
            |c: &mut Config, v: Parsed<Bytes>| c.max_request_bytes = v.0 .0
        );
        file!(
            "num_threads",
            file.num_threads,
            |c: &mut Config, v: Parsed<Count>| c.num_threads = v.0 .0 as usize
        );
        file!(
            "max_prompt_bytes",
            file.max_prompt_bytes,
            |c: &mut Config, v: Parsed<Bytes>| c.max_prompt_bytes = v.0 .0
        );
        file!(
            "max_images",
            file.max_images,
            |c: &mut Config, v: Parsed<Count>| c.max_images = v.0 .0 as usize
        );
        file!(
            "read_timeout",
            file.read_timeout,
            |c: &mut Config, v: Parsed<Seconds>| c.read_timeout = v.0 .0
        );
        file!("api_keys", file.api_keys, |c: &mut Config, v: Keys| c.api_keys =
            v.0);
        file!(
            "api_keys_file",
            file.api_keys_file,
            |c: &mut Config, v: PathBuf| c.api_keys_file = Some(v)
        );
        file!(
            "allow_remote",
            file.allow_remote,
            |c: &mut Config, v: Parsed<Flag>| c.allow_remote = v.0 .0
        );

        for doc in SETTINGS {
            let Some(raw) = env(doc.env) else { continue };
            let raw = raw
                .trim()
                .trim_matches(|c| c == '"' || c == '\'')
                .trim()
                .to_string();
            if raw.is_empty() {
                continue;
            }
            let bad = |msg: String| ConfigError(format!("{}: {msg}", doc.env));
            match doc.key {
                "host" => cfg.host = Listen::parse(&raw).map_err(bad)?,
                "models" => cfg.models = PathBuf::from(&raw),
                "keep_alive" => cfg.keep_alive = KeepAlive::parse_setting(&raw).map_err(bad)?,
                "num_parallel" => cfg.num_parallel = Positive::parse(&raw).map_err(bad)?.0 as u32,
                "max_loaded_models" => cfg.max_loaded_models = Positive::parse(&raw).map_err(bad)?.0 as usize,
                "max_queue" => cfg.max_queue = Positive::parse(&raw).map_err(bad)?.0 as usize,
                "context_length" => cfg.context_length = Positive::parse(&raw).map_err(bad)?.0 as u32,
                "origins" => cfg.origins = split_list(&raw),
                "kv_cache_type" => cfg.kv_cache_type = Kv::parse(&raw).map_err(bad)?.0,
                "max_memory" => cfg.max_memory = Bytes::parse(&raw).map_err(bad)?.0,
                "max_request_bytes" => cfg.max_request_bytes = Bytes::parse(&raw).map_err(bad)?.0,
                "num_threads" => cfg.num_threads = Count::parse(&raw).map_err(bad)?.0 as usize,
                "max_prompt_bytes" => cfg.max_prompt_bytes = Bytes::parse(&raw).map_err(bad)?.0,
                "max_images" => cfg.max_images = Count::parse(&raw).map_err(bad)?.0 as usize,
                "read_timeout" => cfg.read_timeout = Seconds::parse(&raw).map_err(bad)?.0,
                "api_keys" => cfg.api_keys = ApiKey::parse_list(&raw).map_err(bad)?,
                "api_keys_file" => cfg.api_keys_file = Some(PathBuf::from(&raw)),
                "allow_remote" => cfg.allow_remote = Flag::parse(&raw).map_err(bad)?.0,
                _ => unreachable!("every documented setting is handled"),
            }
            cfg.set_source(doc.key, Source::Env(doc.env));
        }
        cfg.ollama_env = SETTINGS
            .iter()
            .filter(|doc| env(doc.env).is_none())
            .filter_map(|doc| {
                let theirs = format!("OLLAMA_{}", doc.env.strip_prefix("OLLAMARS_")?);
                env(&theirs).is_some().then_some(theirs)
            })
            .collect();
        if let Some(path) = &cfg.api_keys_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("api_keys_file {}: {e}", path.display())))?;
            let keys = ApiKey::parse_file(&text)
                .map_err(|e| ConfigError(format!("api_keys_file {}: {e}", path.display())))?;
            cfg.api_keys.extend(keys);
        }
        if cfg.num_threads > engine::threads::MAX_THREADS {
            return Err(ConfigError(format!(
                "num_threads: at most {} threads per model",
                engine::threads::MAX_THREADS
            )));
        }
        if cfg.num_parallel > engine::kv::MAX_SEQ {
            return Err(ConfigError(format!(
                "num_parallel: at most {} slots per model",
                engine::kv::MAX_SEQ
            )));
        }
        Ok(cfg)
    }

    fn set_source(&mut self, key: &'static str, source: Source) {
        if let Some(s) = self.sources.iter_mut().find(|s| s.0 == key) {
            s.1 = source;
        }
    }

    pub fn source(&self, key: &str) -> Source {
        self.sources
            .iter()
            .find(|s| s.0 == key)
            .map_or(Source::Default, |s| s.1.clone())
    }

    /// A setting's effective value as text.
    pub fn value(&self, key: &str) -> String {
        match key {
            "host" => self.host.to_string(),
            "models" => self.models.display().to_string(),
            "keep_alive" => self.keep_alive.display(),
            "num_parallel" => self.num_parallel.to_string(),
            "max_loaded_models" => self.max_loaded_models.to_string(),
            "max_queue" => self.max_queue.to_string(),
            "context_length" => self.context_length.to_string(),
            "origins" => self.origins.join(","),
            "kv_cache_type" => match self.kv_cache_type {
                KvType::F16 => "f16".into(),
                KvType::Q8_0 => "q8_0".into(),
            },
            "max_memory" => self.max_memory.to_string(),
            "max_request_bytes" => self.max_request_bytes.to_string(),
            "num_threads" => self.num_threads.to_string(),
            "max_prompt_bytes" => self.max_prompt_bytes.to_string(),
            "max_images" => self.max_images.to_string(),
            "read_timeout" => format!("{}s", self.read_timeout.as_secs_f64()),
            // Never the secrets themselves.
            "api_keys" if self.api_keys.is_empty() => String::new(),
            "api_keys" => {
                let admin = self
                    .api_keys
                    .iter()
                    .filter(|k| k.scope == crate::security::Scope::Admin)
                    .count();
                format!(
                    "<{} keys: {admin} admin, {} read-only>",
                    self.api_keys.len(),
                    self.api_keys.len() - admin
                )
            }
            "api_keys_file" => self
                .api_keys_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            "allow_remote" => self.allow_remote.to_string(),
            _ => String::new(),
        }
    }

    /// The effective settings, one per line: `key = value  (source)`, as YAML comments allow it
    /// to be pasted into a config file.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for doc in SETTINGS {
            let v = self.value(doc.key);
            let shown = if v.is_empty() {
                "\"\"".to_string()
            } else {
                format!("{v:?}")
            };
            out.push_str(&format!(
                "{}: {}  # from {}\n",
                doc.key,
                shown,
                self.source(doc.key)
            ));
        }
        out
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("config file {}: {e}", path.display())))?;
    if text.trim().is_empty() {
        return Ok(FileConfig::default());
    }
    serde_yaml::from_str::<Option<FileConfig>>(&text)
        .map(Option::unwrap_or_default)
        .map_err(|e| {
            // Name the key of the offending line when the parser's message does not.
            let key = e
                .location()
                .and_then(|l| text.lines().nth(l.line().saturating_sub(1)))
                .and_then(|line| line.split_once(':'))
                .map(|(k, _)| k.trim().trim_start_matches("- ").to_string())
                .filter(|k| !k.is_empty() && !e.to_string().contains(k.as_str()));
            let mut msg = e.to_string();
            if let Some(l) = e.location().filter(|_| !msg.contains(" line ")) {
                msg.push_str(&format!(" at line {} column {}", l.line(), l.column()));
            }
            match key {
                Some(k) => ConfigError(format!("config file {}: key `{k}`: {msg}", path.display())),
                None => ConfigError(format!("config file {}: {msg}", path.display())),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn load(file: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        if let Some(f) = file {
            std::fs::write(&path, f).unwrap();
        } else {
            std::fs::write(&path, "").unwrap();
        }
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load_with(Some(&path), |k| env.get(k).cloned())
    }

    #[test]
    fn listen_addresses() {
        let tcp = |h: &str, p| Listen::Tcp {
            host: h.into(),
            port: p,
        };
        assert_eq!(Listen::parse("127.0.0.1:11434"), Ok(tcp("127.0.0.1", 11434)));
        assert_eq!(Listen::parse("0.0.0.0"), Ok(tcp("0.0.0.0", 11434)));
        assert_eq!(Listen::parse(":8080"), Ok(tcp("127.0.0.1", 8080)));
        assert_eq!(Listen::parse("http://example"), Ok(tcp("example", 80)));
        assert_eq!(Listen::parse("[::1]:9000"), Ok(tcp("::1", 9000)));
        assert_eq!(Listen::parse("\"localhost:1\""), Ok(tcp("localhost", 1)));
        assert_eq!(
            Listen::parse("unix:///run/ollamars.sock"),
            Ok(Listen::Unix("/run/ollamars.sock".into()))
        );
        assert!(Listen::parse("unix://relative").is_err());
        assert!(Listen::parse("host:99999").is_err());
        assert!(Listen::parse("ftp://x").is_err());
        assert_eq!(tcp("::1", 1).to_string(), "[::1]:1");
    }

    #[test]
    fn ollamas_names_are_noticed_not_read() {
        let c = load(
            None,
            &[
                ("OLLAMA_HOST", "0.0.0.0:9999"),
                ("OLLAMA_KEEP_ALIVE", "1h"),
                ("OLLAMARS_KEEP_ALIVE", "10m"),
                ("OLLAMA_DEBUG", "1"),
            ],
        )
        .unwrap();
        assert_eq!(c.value("host"), "127.0.0.1:11434");
        assert_eq!(c.value("keep_alive"), "10m0s");
        // OLLAMA_KEEP_ALIVE is shadowed by ours, OLLAMA_DEBUG is no setting of ours.
        assert_eq!(c.ollama_env, ["OLLAMA_HOST"]);
        assert!(load(None, &[]).unwrap().ollama_env.is_empty());
    }

    #[test]
    fn file_then_environment() {
        let c = load(
            Some("num_parallel: 4\nkeep_alive: 10m\norigins:\n  - http://a.example\nmax_memory: 2GiB\n"),
            &[("OLLAMARS_NUM_PARALLEL", "2")],
        )
        .unwrap();
        assert_eq!(c.num_parallel, 2);
        assert_eq!(c.source("num_parallel"), Source::Env("OLLAMARS_NUM_PARALLEL"));
        assert_eq!(c.keep_alive, KeepAlive::For(Duration::from_secs(600)));
        assert!(matches!(c.source("keep_alive"), Source::File(_)));
        assert_eq!(c.origins, vec!["http://a.example"]);
        assert_eq!(c.max_memory, 2 << 30);
        assert_eq!(c.source("max_queue"), Source::Default);
        let d = c.describe();
        assert!(
            d.contains("num_parallel: \"2\"  # from environment OLLAMARS_NUM_PARALLEL"),
            "{d}"
        );
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let e = load(Some("num_parallel: 2\nbogus: 1\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus") && e.contains("line 2"), "{e}");
        let e = load(Some("# settings\nkeep_alive: soon\n"), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("keep_alive") && e.contains("line 2"), "{e}");
        let e = load(Some("num_parallel: 0\n"), &[]).unwrap_err().to_string();
        assert!(e.contains("num_parallel") && e.contains("line 1"), "{e}");
        let e = load(None, &[("OLLAMARS_KV_CACHE_TYPE", "q4_9")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("OLLAMARS_KV_CACHE_TYPE"), "{e}");
        let e = load(None, &[("OLLAMARS_HOST", "x:y")]).unwrap_err().to_string();
        assert!(e.contains("OLLAMARS_HOST"), "{e}");
        // Past the engine's limit, threads are refused at start-up, not when a model loads.
        let e = load(Some("num_threads: 100000\n"), &[]).unwrap_err().to_string();
        assert!(e.contains("num_threads") && e.contains("512"), "{e}");
        assert_eq!(load(Some("num_threads: 512\n"), &[]).unwrap().num_threads, 512);
        // Zero queue or zero sizes would refuse every request or every model.
        for (key, env) in [
            ("max_queue", "OLLAMARS_MAX_QUEUE"),
            ("max_memory", "OLLAMARS_MAX_MEMORY"),
            ("max_request_bytes", "OLLAMARS_MAX_REQUEST_BYTES"),
            ("max_prompt_bytes", "OLLAMARS_MAX_PROMPT_BYTES"),
        ] {
            let e = load(Some(&format!("{key}: 0\n")), &[]).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("positive"), "{e}");
            let e = load(None, &[(env, "0")]).unwrap_err().to_string();
            assert!(e.contains(env) && e.contains("positive"), "{e}");
        }
    }

    #[test]
    fn api_keys_from_env_file_and_keys_file() {
        use crate::security::{key_scope, Scope};
        let dir = tempfile::tempdir().unwrap();
        let kf = dir.path().join("keys");
        std::fs::write(&kf, "# ops\nread:file-read-key-0123456789\n").unwrap();
        let file = format!(
            "api_keys:\n  - file-admin-key-0123456789\napi_keys_file: {}\nallow_remote: true\n",
            kf.display()
        );
        let c = load(Some(&file), &[]).unwrap();
        assert_eq!(c.api_keys.len(), 2);
        assert!(c.allow_remote);
        assert_eq!(
            key_scope(&c.api_keys, "file-admin-key-0123456789"),
            Some(Scope::Admin)
        );
        assert_eq!(
            key_scope(&c.api_keys, "file-read-key-0123456789"),
            Some(Scope::ReadOnly)
        );
        let d = c.describe();
        assert!(d.contains("<2 keys: 1 admin, 1 read-only>"), "{d}");
        assert!(!d.contains("key-0123456789\""), "secrets printed: {d}");
        // The environment replaces the file's inline keys; the keys file still adds its own.
        let c = load(
            Some(&file),
            &[("OLLAMARS_API_KEYS", "read:env-read-key-0123456789")],
        )
        .unwrap();
        assert_eq!(key_scope(&c.api_keys, "file-admin-key-0123456789"), None);
        assert_eq!(
            key_scope(&c.api_keys, "env-read-key-0123456789"),
            Some(Scope::ReadOnly)
        );
        assert_eq!(
            key_scope(&c.api_keys, "file-read-key-0123456789"),
            Some(Scope::ReadOnly)
        );
        assert_eq!(c.source("api_keys"), Source::Env("OLLAMARS_API_KEYS"));
        let e = load(None, &[("OLLAMARS_API_KEYS", "short")])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OLLAMARS_API_KEYS") && e.contains("at least 16"),
            "{e}"
        );
        let e = load(None, &[("OLLAMARS_API_KEYS_FILE", "/nonexistent/keys")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("api_keys_file"), "{e}");
        let e = load(None, &[("OLLAMARS_ALLOW_REMOTE", "maybe")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("OLLAMARS_ALLOW_REMOTE"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("8GB"), Ok(8_000_000_000));
        assert!(parse_bytes("lots").is_err());
    }
}
