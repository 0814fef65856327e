//! `ollamars cp`, `rm` and `stop`: copy, delete and unload models.

use serde_json::json;
use std::io::Write;

use super::{block_on, HOST_HELP};
use crate::client::api::{Common, GenerateRequest, GenerateResponse};
use crate::client::{Client, Error};

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct CopyArgs {
    /// The model to copy.
    source: String,
    /// The new name.
    destination: String,
}

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct RemoveArgs {
    /// The models to remove (each is unloaded first if it is running).
    #[arg(required = true)]
    models: Vec<String>,
}

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct StopArgs {
    /// The model to unload.
    model: String,
}

pub fn copy(args: CopyArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    let body = json!({"source": args.source, "destination": args.destination});
    block_on(client.call(reqwest::Method::POST, "/api/copy", &body))?;
    writeln!(
        crate::term::stdout(),
        "copied '{}' to '{}'",
        args.source,
        args.destination
    )?;
    Ok(())
}

pub fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    for model in &args.models {
        // Unload first so that its memory is released and no request holds the files.
        if let Err(e) = block_on(unload(&client, model)) {
            if let Error::NotRunning(_) = e {
                return Err(e.into());
            }
            if !e.is_not_found() {
                eprintln!("Warning: unable to stop model '{model}'");
            }
        }
        block_on(client.call(reqwest::Method::DELETE, "/api/delete", &json!({ "model": model })))?;
        writeln!(crate::term::stdout(), "deleted '{model}'")?;
    }
    Ok(())
}

pub fn stop(args: StopArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    match block_on(unload(&client, &args.model)) {
        Err(e) if e.is_not_found() => anyhow::bail!("couldn't find model \"{}\" to stop", args.model),
        r => Ok(r?),
    }
}

/// Asks the daemon to unload a model: an empty generate request with `keep_alive: 0`.
pub async fn unload(client: &Client, model: &str) -> Result<(), Error> {
    let req = GenerateRequest {
        model: model.to_string(),
        common: Common {
            keep_alive: Some(json!(0)),
            ..Common::default()
        },
        ..GenerateRequest::default()
    };
    client
        .stream("/api/generate", &req, |_: GenerateResponse| Ok(()))
        .await
}
