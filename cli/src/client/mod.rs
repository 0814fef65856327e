//! The HTTP client of the daemon: Ollama's API over TCP or a unix socket, JSON requests,
//! NDJSON streams and blob uploads. Errors say plainly when nothing is listening.

pub mod api;
pub mod host;

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub use host::Host;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing listens at the address.
    #[error("could not connect to ollamars at {0}: is the daemon running? Start it with \"ollamars serve\"")]
    NotRunning(String),
    /// The daemon answered with an error status; `message` is its `{"error": ...}`.
    #[error("{message}")]
    Status { code: u16, message: String },
    /// An `{"error": ...}` line in the middle of a stream.
    #[error("{0}")]
    Stream(String),
    /// Anything else on the way: a dropped connection, a malformed answer.
    #[error("{0}")]
    Transport(String),
}

impl Error {
    /// Whether the daemon said the model (or another named thing) does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Status { code: 404, .. } => true,
            Error::Status { message, .. } | Error::Stream(message) => message.contains("not found"),
            _ => false,
        }
    }
}

/// The longest NDJSON line accepted (a chunk of text or a progress update is far smaller).
const MAX_LINE: usize = 64 << 20;

pub struct Client {
    http: reqwest::Client,
    host: Host,
    /// Said after the address when nothing listens there ([`host::ollama_host_note`]).
    note: String,
}

impl Client {
    /// A client of the daemon at `OLLAMARS_HOST`.
    pub fn from_env() -> anyhow::Result<Client> {
        let host = Host::from_env().map_err(anyhow::Error::msg)?;
        let mut client = Client::new(host)?;
        client.note = host::ollama_host_note(|k| std::env::var(k).ok()).unwrap_or_default();
        Ok(client)
    }

    pub fn new(host: Host) -> Result<Client, Error> {
        let mut builder = reqwest::Client::builder().user_agent(format!(
            "ollamars/{} ({} {})",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::ARCH,
            std::env::consts::OS
        ));
        // A daemon on this machine is never reached through a proxy from the environment
        // (Go's client, which Ollama's CLI uses, skips proxies for loopback too).
        if host.is_local() {
            builder = builder.no_proxy();
        }
        if let Host::Unix(path) = &host {
            builder = builder.unix_socket(path.as_path());
        }
        let http = builder.build().map_err(|e| Error::Transport(e.to_string()))?;
        Ok(Client {
            http,
            host,
            note: String::new(),
        })
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.host.url(path))
    }

    /// Sends a request; an error status becomes [`Error::Status`] with the daemon's message.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, Error> {
        let resp = req.send().await.map_err(|e| self.transport(e))?;
        let status = resp.status();
        if status.is_client_error() || status.is_server_error() {
            let body = resp.bytes().await.unwrap_or_default();
            return Err(status_error(status, &body));
        }
        Ok(resp)
    }

    fn transport(&self, e: reqwest::Error) -> Error {
        if e.is_connect() {
            Error::NotRunning(format!("{}{}", self.host, self.note))
        } else {
            Error::Transport(registry::error::with_causes(&e))
        }
    }

    /// `HEAD /`: whether the daemon answers at all.
    pub async fn heartbeat(&self) -> Result<(), Error> {
        self.send(self.request(reqwest::Method::HEAD, "/"))
            .await
            .map(drop)
    }

    /// A GET whose answer is JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let resp = self.send(self.request(reqwest::Method::GET, path)).await?;
        self.json(resp).await
    }

    /// A POST of JSON whose answer is JSON.
    pub async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T, Error> {
        let resp = self
            .send(self.request(reqwest::Method::POST, path).json(body))
            .await?;
        self.json(resp).await
    }

    /// A request whose answer has no body worth reading (`/api/copy`, `/api/delete`).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<(), Error> {
        self.send(self.request(method, path).json(body)).await.map(drop)
    }

    async fn json<T: DeserializeOwned>(&self, resp: reqwest::Response) -> Result<T, Error> {
        let bytes = resp.bytes().await.map_err(|e| self.transport(e))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Transport(format!("unexpected answer from the daemon: {e}")))
    }

    /// A POST whose answer is an NDJSON stream: `each` gets every line, in order, until the stream
    /// ends. An `{"error": ...}` line ends it with [`Error::Stream`]. Dropping the future closes
    /// the connection, which cancels the daemon's work.
    pub async fn stream<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        mut each: impl FnMut(T) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut resp = self
            .send(
                self.request(reqwest::Method::POST, path)
                    .header(reqwest::header::ACCEPT, "application/x-ndjson")
                    .json(body),
            )
            .await?;
        let mut buf: Vec<u8> = Vec::new();
        loop {
            let chunk = resp.chunk().await.map_err(|e| self.transport(e))?;
            let end = chunk.is_none();
            match chunk {
                Some(c) => buf.extend_from_slice(&c),
                None if buf.is_empty() => return Ok(()),
                None => buf.push(b'\n'),
            }
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let line = line.trim_ascii();
                if !line.is_empty() {
                    each(parse_line(line)?)?;
                }
            }
            if end {
                return Ok(());
            }
            if buf.len() > MAX_LINE {
                return Err(Error::Transport(
                    "the daemon sent a line longer than 64 MiB".into(),
                ));
            }
        }
    }

    /// `HEAD /api/blobs/:digest`: whether the daemon already holds a blob.
    pub async fn has_blob(&self, digest: &str) -> Result<bool, Error> {
        let resp = self
            .request(reqwest::Method::HEAD, &format!("/api/blobs/{digest}"))
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        match resp.status().as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(status_error(resp.status(), b"")),
        }
    }

    /// `POST /api/blobs/:digest` with the file's bytes; `sent` hears the running byte count.
    pub async fn upload_blob(
        &self,
        digest: &str,
        path: &Path,
        sent: impl Fn(u64) + Send + Sync + 'static,
    ) -> Result<(), Error> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| Error::Transport(format!("{}: {e}", path.display())))?;
        let len = file.metadata().await.map(|m| m.len()).ok();
        let body = futures_util::stream::unfold((file, 0u64, sent), |(mut file, total, sent)| async move {
            use tokio::io::AsyncReadExt;
            let mut buf = vec![0u8; 1 << 20];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    let total = total + n as u64;
                    sent(total);
                    Some((Ok::<_, std::io::Error>(buf), (file, total, sent)))
                }
                Err(e) => Some((Err(e), (file, total, sent))),
            }
        });
        let mut req = self
            .request(reqwest::Method::POST, &format!("/api/blobs/{digest}"))
            .body(reqwest::Body::wrap_stream(body));
        if let Some(len) = len {
            req = req.header(reqwest::header::CONTENT_LENGTH, len);
        }
        self.send(req).await.map(drop)
    }
}

/// One NDJSON line: an `{"error": ...}` object or a `T`.
fn parse_line<T: DeserializeOwned>(line: &[u8]) -> Result<T, Error> {
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
        Error::Transport(format!(
            "unexpected line from the daemon ({e}): {}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        ))
    })?;
    if let Some(err) = value.get("error").filter(|v| !v.is_null()) {
        let msg = err.as_str().map_or_else(|| err.to_string(), str::to_string);
        return Err(Error::Stream(msg));
    }
    serde_json::from_value(value)
        .map_err(|e| Error::Transport(format!("unexpected answer from the daemon: {e}")))
}

/// An error status and its body: the `{"error": ...}` message, else the text, else the status.
fn status_error(status: reqwest::StatusCode, body: &[u8]) -> Error {
    let from_json = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            Some(e.as_str().map_or_else(|| e.to_string(), str::to_string))
        });
    let text = String::from_utf8_lossy(body).trim().to_string();
    let message = from_json
        .or_else(|| (!text.is_empty()).then_some(text))
        .unwrap_or_else(|| status.to_string());
    Error::Status {
        code: status.as_u16(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::ProgressResponse;

    #[test]
    fn error_lines_end_a_stream() {
        let e = parse_line::<ProgressResponse>(br#"{"error":"pull model manifest: file does not exist"}"#)
            .unwrap_err();
        assert_eq!(e.to_string(), "pull model manifest: file does not exist");
        let p: ProgressResponse =
            parse_line(br#"{"status":"pulling abc","digest":"sha256:ab","total":10,"completed":5}"#).unwrap();
        assert_eq!((p.total, p.completed), (10, 5));
        assert!(parse_line::<ProgressResponse>(b"not json").is_err());
    }

    #[test]
    fn status_errors_carry_the_daemon_message() {
        let e = status_error(
            reqwest::StatusCode::NOT_FOUND,
            br#"{"error":"model 'x' not found"}"#,
        );
        assert_eq!(e.to_string(), "model 'x' not found");
        assert!(e.is_not_found());
        let e = status_error(reqwest::StatusCode::BAD_GATEWAY, b"");
        assert_eq!(e.to_string(), "502 Bad Gateway");
        let e = status_error(reqwest::StatusCode::BAD_REQUEST, b"plain text");
        assert_eq!(e.to_string(), "plain text");
        assert!(!e.is_not_found());
    }
}
