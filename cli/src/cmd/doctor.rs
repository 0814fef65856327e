//! `ollamars doctor [--repair] [--quick] [--json]`: check the models directory.
//!
//! Works on the store directly (no daemon; safe while one runs, everything it removes is checked
//! against the store's locks). Every manifest must parse and every blob it names must exist with
//! the right size; every blob must hash to its name. Exits non-zero when the store is not
//! consistent. `--repair` removes corrupt blobs and debris (temporary files and partial
//! downloads nobody is writing, pins of crashed operations, blobs unused for an hour), never a
//! manifest, a download in progress or a resumable one.

use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

use registry::store::{CheckOptions, CheckReport};
use registry::Store;

#[derive(clap::Args)]
pub struct Args {
    /// Remove corrupt blobs and debris.
    #[arg(long)]
    repair: bool,
    /// Check sizes only; do not hash every blob.
    #[arg(long)]
    quick: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// The models directory (default: OLLAMARS_MODELS, else the per-user data directory).
    #[arg(long, value_name = "DIR")]
    models: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = match args.models {
        Some(p) => p,
        None => Store::configured_root()?,
    };
    if !root.is_dir() {
        anyhow::bail!("no models directory at {}", root.display());
    }
    let store = Store::open(&root)?;
    let opts = CheckOptions {
        verify_hashes: !args.quick,
        repair: args.repair,
        ..CheckOptions::default()
    };
    let report = store.check(&opts)?;
    if args.json {
        writeln!(
            crate::term::stdout(),
            "{}",
            serde_json::to_string_pretty(&report)?
        )?;
    } else {
        write!(crate::term::stdout(), "{}", text(&report, &root, args.repair))?;
    }
    if !report.is_consistent() {
        std::process::exit(1);
    }
    Ok(())
}

fn text(r: &CheckReport, root: &std::path::Path, repaired: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} models, {} blobs{}",
        root.display(),
        r.models,
        r.blobs,
        if r.bytes_verified > 0 {
            format!(", {} bytes hashed", r.bytes_verified)
        } else {
            String::new()
        }
    );
    for p in &r.problems {
        let _ = writeln!(out, "problem: {p}");
    }
    let d = &r.debris;
    if !d.is_empty() {
        let _ = writeln!(
            out,
            "debris: {} temporary files, {} dead partial downloads, {} stale pins, {} unused blobs ({} bytes){}",
            d.temp_files,
            d.dead_partials,
            d.stale_pins,
            d.unreferenced_blobs,
            d.bytes,
            if repaired { "" } else { "; `ollamars doctor --repair` removes it" }
        );
    }
    if let Some(c) = &r.repaired {
        let _ = writeln!(
            out,
            "repaired: removed {} blobs, {} temporary files, {} partial downloads ({} bytes freed)",
            c.blobs_removed.len(),
            c.temp_files_removed,
            c.partials_removed,
            c.bytes_freed
        );
    }
    if r.partial_downloads > 0 {
        let _ = writeln!(
            out,
            "{} partial downloads in progress or resumable (kept; pull again to finish)",
            r.partial_downloads
        );
    }
    let _ = writeln!(
        out,
        "{}",
        if r.is_consistent() {
            "the store is consistent"
        } else {
            "the store is NOT consistent"
        }
    );
    out
}
