//! `ollamars list` and `ollamars ps`: the models in the store and the models in memory, in
//! Ollama's tables.

use std::io::Write;
use time::OffsetDateTime;

use super::{block_on, HOST_HELP};
use crate::client::api::{ListResponse, PsResponse};
use crate::client::Client;
use crate::term::format::{human_bytes, human_time, parse_time, table};

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct ListArgs {
    /// Only models whose name starts with this (case-insensitive).
    prefix: Option<String>,
}

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct PsArgs {
    /// Only models whose name starts with this.
    prefix: Option<String>,
}

pub fn list(args: ListArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    let resp: ListResponse = block_on(client.get("/api/tags"))?;
    let table = list_table(&resp, args.prefix.as_deref(), OffsetDateTime::now_utc());
    crate::term::stdout().write_all(table.as_bytes())?;
    Ok(())
}

pub fn ps(args: PsArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    let resp: PsResponse = block_on(client.get("/api/ps"))?;
    let table = ps_table(&resp, args.prefix.as_deref(), OffsetDateTime::now_utc());
    crate::term::stdout().write_all(table.as_bytes())?;
    Ok(())
}

/// `NAME  ID  SIZE  MODIFIED`, one row per model.
pub fn list_table(resp: &ListResponse, prefix: Option<&str>, now: OffsetDateTime) -> String {
    let mut rows = vec![header(&["NAME", "ID", "SIZE", "MODIFIED"])];
    for m in &resp.models {
        if let Some(p) = prefix {
            if !m.name.to_lowercase().starts_with(&p.to_lowercase()) {
                continue;
            }
        }
        let size = if m.remote_model.is_empty() {
            human_bytes(m.size)
        } else {
            "-".into()
        };
        rows.push(vec![
            m.name.clone(),
            short_id(&m.digest),
            size,
            human_time(parse_time(&m.modified_at), now, "Never"),
        ]);
    }
    table(&rows)
}

/// `NAME  ID  SIZE  PROCESSOR  CONTEXT  UNTIL`, one row per loaded model.
pub fn ps_table(resp: &PsResponse, prefix: Option<&str>, now: OffsetDateTime) -> String {
    let mut rows = vec![header(&["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"])];
    for m in &resp.models {
        if prefix.is_some_and(|p| !m.name.starts_with(p)) {
            continue;
        }
        let processor = if m.size_vram == 0 {
            "100% CPU".to_string()
        } else if m.size_vram == m.size {
            "100% GPU".to_string()
        } else if m.size_vram > m.size || m.size <= 0 {
            "Unknown".to_string()
        } else {
            let cpu = ((m.size - m.size_vram) as f64 / m.size as f64 * 100.0).round() as i64;
            format!("{cpu}%/{}% CPU/GPU", 100 - cpu)
        };
        let until = match parse_time(&m.expires_at) {
            Some(t) if t < now => "Stopping...".to_string(),
            t => human_time(t, now, "Never"),
        };
        rows.push(vec![
            m.name.clone(),
            short_id(&m.digest),
            human_bytes(m.size),
            processor,
            m.context_length.to_string(),
            until,
        ]);
    }
    table(&rows)
}

fn header(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

/// The first 12 hex digits of a digest, as the ID column shows it.
fn short_id(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn list_as_ollama() {
        let resp: ListResponse = serde_json::from_str(
            r#"{"models":[
                {"name":"gemma3:latest","model":"gemma3:latest","modified_at":"2025-06-01T11:58:00Z",
                 "size":253000000,"digest":"a2af6cc3eb7fa8be8504abaf9b04e88f17a119ec3f04a3addf55f92841195f5a"},
                {"name":"hf.co/u/Big-GGUF:Q4_K_M","model":"hf.co/u/Big-GGUF:Q4_K_M",
                 "modified_at":"2025-05-11T12:00:00.5+00:00","size":42000000000,"digest":"0123456789abcdef"}]}"#,
        )
        .unwrap();
        let now = datetime!(2025-06-01 12:00:00 UTC);
        assert_eq!(
            list_table(&resp, None, now),
            "NAME                       ID              SIZE      MODIFIED\n\
             gemma3:latest              a2af6cc3eb7f    253 MB    2 minutes ago\n\
             hf.co/u/Big-GGUF:Q4_K_M    0123456789ab    42 GB     3 weeks ago\n"
        );
        assert_eq!(
            list_table(&resp, Some("GEM"), now),
            "NAME             ID              SIZE      MODIFIED\n\
             gemma3:latest    a2af6cc3eb7f    253 MB    2 minutes ago\n"
        );
        assert_eq!(
            list_table(&ListResponse::default(), None, now),
            "NAME    ID    SIZE    MODIFIED\n"
        );
    }

    #[test]
    fn ps_as_ollama() {
        let resp: PsResponse = serde_json::from_str(
            r#"{"models":[
                {"name":"gemma3:latest","digest":"a2af6cc3eb7fa8be","size":600000000,"size_vram":0,
                 "expires_at":"2025-06-01T12:04:30Z","context_length":4096},
                {"name":"big:latest","digest":"c6eb396dbd59aa","size":9600000000,"size_vram":9600000000,
                 "expires_at":"2318-01-01T00:00:00Z","context_length":131072},
                {"name":"split:latest","digest":"00ff00ff00ff00","size":1000,"size_vram":520,
                 "expires_at":"2025-06-01T11:59:00Z","context_length":2048}]}"#,
        )
        .unwrap();
        let now = datetime!(2025-06-01 12:00:00 UTC);
        assert_eq!(
            ps_table(&resp, None, now),
            "NAME             ID              SIZE      PROCESSOR          CONTEXT    UNTIL\n\
             gemma3:latest    a2af6cc3eb7f    600 MB    100% CPU           4096       4 minutes from now\n\
             big:latest       c6eb396dbd59    9.6 GB    100% GPU           131072     Forever\n\
             split:latest     00ff00ff00ff    1 KB      48%/52% CPU/GPU    2048       Stopping...\n"
        );
    }
}
