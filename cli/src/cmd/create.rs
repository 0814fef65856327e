//! `ollamars create MODEL [-f Modelfile] [-q TYPE]`: build a model from a Modelfile.
//!
//! As Ollama's client does it: the Modelfile is parsed here; each local file it names (`FROM`,
//! `ADAPTER`) is hashed and uploaded to the daemon as a blob (`HEAD` then `POST /api/blobs`,
//! so a file the daemon already holds is not sent again); then `/api/create` gets the
//! structured request and streams its progress. The daemon never reads client paths.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use registry::modelfile::Modelfile;
use registry::{CreateRequest, Digest};
use serde_json::{json, Map, Value};

use super::{block_on, HOST_HELP};
use crate::client::api::ProgressResponse;
use crate::client::Client;
use crate::term::progress::{Progress, Verb};

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct Args {
    /// The new model's name, e.g. `gemma3` or `myname/gemma3:small`.
    model: String,
    /// The Modelfile (default: `Modelfile` in the current directory; without one, the GGUF
    /// files of the current directory). Paths in it are relative to its directory.
    #[arg(short, long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Quantize the model to this type on the way (e.g. q4_K_M, q8_0); the source must be F32,
    /// F16 or BF16.
    #[arg(short, long, value_name = "TYPE")]
    quantize: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // The error names the model already ("invalid model name \"..\": why").
    registry::Name::parse(&args.model)?;
    let (modelfile, base_dir, path) = read_modelfile(args.file.as_deref())?;
    let named = path
        .as_ref()
        .map_or("Modelfile".into(), |p| p.display().to_string());
    for w in &modelfile.warnings {
        eprintln!("warning: {named} {w}");
    }
    let client = Client::from_env()?;
    // Fail before hashing gigabytes when the daemon is not there.
    block_on(client.heartbeat())?;

    let mut progress = Progress::new(Verb::Create);
    progress.set_status("gathering model components");
    let mut files: Vec<(PathBuf, Digest)> = Vec::new();
    let req = CreateRequest::from_modelfile(&modelfile, &base_dir, |path| {
        let io = |e| registry::Error::Io {
            what: format!("reading {}", path.display()),
            source: Arc::new(e),
        };
        let f = std::fs::File::open(path).map_err(io)?;
        let (digest, _) = Digest::of_reader(f).map_err(io)?;
        files.push((path.to_path_buf(), digest));
        Ok(digest)
    });
    // Named as the Modelfile's parse errors are: "Modelfile: (line 2): ./x.gguf: ...".
    let mut req = match (req, path) {
        (Err(e), Some(path)) => Err(e).context(path.display().to_string())?,
        (req, _) => req?,
    };
    if let Some(q) = args.quantize {
        req.quantize = Some(q);
    }

    block_on(async {
        for (path, digest) in &files {
            upload(&client, &mut progress, path, digest).await?;
        }
        client
            .stream(
                "/api/create",
                &wire_request(&args.model, &req),
                |p: ProgressResponse| {
                    progress.update(&p);
                    Ok(())
                },
            )
            .await
    })?;
    progress.finish();
    Ok(())
}

/// The Modelfile, the directory its paths are relative to, and its path (none when the current
/// directory's model files stand in for it).
fn read_modelfile(file: Option<&Path>) -> anyhow::Result<(Modelfile, PathBuf, Option<PathBuf>)> {
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let path = match file {
        Some(f) => f.to_path_buf(),
        None if Path::new("Modelfile").is_file() => PathBuf::from("Modelfile"),
        // No Modelfile: the model files of the current directory, as Ollama does.
        None => return Ok((Modelfile::parse("FROM .\n")?, cwd, None)),
    };
    // Bounded: `-f /dev/zero` must not read until memory runs out. The daemon takes no request
    // larger than this by default either.
    const MAX_MODELFILE: u64 = 64 << 20;
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| f.take(MAX_MODELFILE + 1).read_to_end(&mut bytes))
        .with_context(|| format!("reading the Modelfile {}", path.display()))?;
    if bytes.len() as u64 > MAX_MODELFILE {
        anyhow::bail!(
            "the Modelfile {} is larger than {} MiB",
            path.display(),
            MAX_MODELFILE >> 20
        );
    }
    let modelfile = Modelfile::parse_bytes(&bytes).with_context(|| format!("{}", path.display()))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or(cwd.clone(), |p| cwd.join(p));
    Ok((modelfile, dir, Some(path)))
}

/// Sends one file to the daemon's blob store unless it is already there.
async fn upload(
    client: &Client,
    progress: &mut Progress,
    path: &Path,
    digest: &Digest,
) -> Result<(), crate::client::Error> {
    let digest = digest.to_string();
    if client.has_blob(&digest).await? {
        return Ok(());
    }
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0).max(1);
    progress.set_status(&format!("copying file {digest} 0%"));
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    let upload = client.upload_blob(&digest, path, move |n| counter.store(n, Ordering::Relaxed));
    tokio::pin!(upload);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    loop {
        tokio::select! {
            r = &mut upload => {
                r?;
                break;
            }
            _ = tick.tick() => {
                let pct = sent.load(Ordering::Relaxed).saturating_mul(100) / size;
                progress.set_message(&format!("copying file {digest} {pct}%"));
            }
        }
    }
    progress.set_message(&format!("copying file {digest} 100%"));
    Ok(())
}

/// The `/api/create` body for a request built from a Modelfile.
fn wire_request(model: &str, req: &CreateRequest) -> Value {
    let digests = |m: &BTreeMap<String, Digest>| -> Map<String, Value> {
        m.iter()
            .map(|(k, d)| (k.clone(), Value::String(d.to_string())))
            .collect()
    };
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    let mut put = |k: &str, v: Value| {
        body.insert(k.into(), v);
    };
    if let Some(from) = &req.from {
        put("from", json!(from));
    }
    if !req.files.is_empty() {
        put("files", Value::Object(digests(&req.files)));
    }
    if !req.adapters.is_empty() {
        put("adapters", Value::Object(digests(&req.adapters)));
    }
    for (key, value) in [
        ("template", &req.template),
        ("system", &req.system),
        ("quantize", &req.quantize),
        ("renderer", &req.renderer),
        ("parser", &req.parser),
        ("requires", &req.requires),
    ] {
        if let Some(v) = value {
            put(key, json!(v));
        }
    }
    if !req.license.is_empty() {
        put("license", json!(req.license));
    }
    if !req.parameters.is_empty() {
        put("parameters", req.parameters.to_json());
    }
    if !req.messages.is_empty() {
        put("messages", json!(req.messages));
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modelfile_becomes_a_create_request() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.gguf"), b"GGUF not really").unwrap();
        let mf = Modelfile::parse(
            "FROM ./m.gguf\nPARAMETER temperature 0.5\nPARAMETER stop <a>\nPARAMETER stop <b>\n\
             SYSTEM \"\"\"Be brief.\"\"\"\nLICENSE MIT\nMESSAGE user hi\nMESSAGE assistant hello\n",
        )
        .unwrap();
        let mut seen = Vec::new();
        let req = CreateRequest::from_modelfile(&mf, dir.path(), |p| {
            seen.push(p.to_path_buf());
            Ok(Digest::of_bytes(b"x"))
        })
        .unwrap();
        assert_eq!(seen, [dir.path().join("./m.gguf")]);
        let body = wire_request("tiny", &req);
        assert_eq!(
            body,
            json!({
                "model": "tiny", "stream": true,
                "files": {"m.gguf": Digest::of_bytes(b"x").to_string()},
                "system": "Be brief.", "license": ["MIT"],
                "parameters": {"temperature": 0.5, "stop": ["<a>", "<b>"]},
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
            })
        );
    }

    #[test]
    fn from_a_model_name() {
        let mf = Modelfile::parse("FROM gemma3:latest\nTEMPLATE {{ .Prompt }}\n").unwrap();
        let req = CreateRequest::from_modelfile(&mf, Path::new("/nonexistent"), |_| unreachable!()).unwrap();
        let body = wire_request("g2", &req);
        assert_eq!(
            body,
            json!({"model": "g2", "stream": true, "from": "gemma3:latest", "template": "{{ .Prompt }}"})
        );
    }
}
