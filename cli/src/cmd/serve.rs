//! `ollamars serve`: run the daemon.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args as ClapArgs;

fn settings_help() -> String {
    let mut s = String::from(
        "Settings come from defaults, then the config file (YAML, same keys), then environment variables:\n\n",
    );
    for d in daemon::config::SETTINGS {
        s.push_str(&format!(
            "  {:<28} {} (default {})\n      config key `{}`\n",
            d.env, d.help, d.default, d.key
        ));
    }
    s.push_str(
        "\n  OLLAMARS_LOG                 log filter (error, warn, info, debug, trace), default info\n",
    );
    s
}

#[derive(ClapArgs)]
#[command(after_long_help = settings_help())]
pub struct Args {
    /// Config file (YAML); default: the per-user config dir's ollamars/config.yaml, if it exists
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the effective settings and where each came from, then exit
    #[arg(long)]
    print_config: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let config = daemon::Config::load(args.config.as_deref())?;
    if args.print_config {
        write!(crate::term::stdout(), "{}", config.describe())?;
        return Ok(());
    }
    daemon::init_logging();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("ollamars-http")
        .build()
        .context("starting the async runtime")?;
    rt.block_on(daemon::serve(config)).map_err(anyhow::Error::msg)
}
