//! `ollamars pull` and `ollamars push`: move a model between the daemon's store and a registry,
//! with a progress bar per layer.

use serde_json::json;
use std::io::Write;

use super::{block_on, HOST_HELP};
use crate::client::api::ProgressResponse;
use crate::client::{Client, Error};
use crate::term::progress::{Progress, Verb};

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct PullArgs {
    /// The model: `name[:tag]` from registry.ollama.ai, or `host/namespace/name[:tag]` (for
    /// example `hf.co/unsloth/gemma-3-270m-it-GGUF:Q8_0`).
    model: String,
    /// Use plain HTTP and accept the registry's certificate as is.
    #[arg(long)]
    insecure: bool,
}

#[derive(clap::Args)]
#[command(after_help = HOST_HELP)]
pub struct PushArgs {
    /// The model, named for its destination: `host/namespace/name[:tag]`.
    model: String,
    /// Use plain HTTP and accept the registry's certificate as is.
    #[arg(long)]
    insecure: bool,
}

pub fn pull(args: PullArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    block_on(pull_model(&client, &args.model, args.insecure))?;
    Ok(())
}

/// Pulls a model, showing its progress (also used by `run` for a model that is not there yet).
pub async fn pull_model(client: &Client, model: &str, insecure: bool) -> Result<(), Error> {
    let mut progress = Progress::new(Verb::Pull);
    let body = json!({"model": model, "insecure": insecure, "stream": true});
    let result = client
        .stream("/api/pull", &body, |p: ProgressResponse| {
            progress.update(&p);
            Ok(())
        })
        .await;
    progress.finish();
    result
}

pub fn push(args: PushArgs) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    let mut progress = Progress::new(Verb::Push);
    let body = json!({"model": args.model, "insecure": args.insecure, "stream": true});
    let result = block_on(client.stream("/api/push", &body, |p: ProgressResponse| {
        progress.update(&p);
        Ok(())
    }));
    progress.finish();
    drop(progress);
    if let Err(e) = result {
        let lower = e.to_string().to_lowercase();
        if lower.contains("access denied") || lower.contains("unauthorized") {
            anyhow::bail!(
                "you are not authorized to push to this namespace, create the model under a namespace you own ({e})"
            );
        }
        return Err(e.into());
    }
    let destination = registry::Name::parse(&args.model).map_or(args.model.clone(), |n| n.to_string());
    writeln!(
        crate::term::stdout(),
        "\nYou can find your model at:\n\n\t{destination}"
    )?;
    Ok(())
}
