//! `ollamars show MODEL`: a model's details in Ollama's sections, or one part of it
//! (`--modelfile`, `--parameters`, `--template`, `--system`, `--license`).

use serde_json::{json, Map, Value};
use std::io::Write;

use super::{block_on, HOST_HELP};
use crate::client::api::ShowResponse;
use crate::client::Client;
use crate::term::format::{human_number, table};

#[derive(clap::Args)]
#[command(after_help = HOST_HELP, group(clap::ArgGroup::new("part").multiple(false)))]
pub struct Args {
    /// The model to show.
    model: String,
    /// Show the license of the model.
    #[arg(long, group = "part")]
    license: bool,
    /// Show the Modelfile of the model (it rebuilds the model with `ollamars create`).
    #[arg(long, group = "part")]
    modelfile: bool,
    /// Show the parameters of the model.
    #[arg(long, group = "part")]
    parameters: bool,
    /// Show the prompt template of the model.
    #[arg(long, group = "part")]
    template: bool,
    /// Show the system message of the model.
    #[arg(long, group = "part")]
    system: bool,
    /// Also show the model's metadata and tensors.
    #[arg(short, long)]
    verbose: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    let body = json!({"model": args.model, "verbose": args.verbose});
    let resp: ShowResponse = block_on(client.post("/api/show", &body))?;
    let mut out = crate::term::stdout();
    if args.license {
        writeln!(out, "{}", resp.license)?;
    } else if args.modelfile {
        writeln!(out, "{}", resp.modelfile)?;
    } else if args.parameters {
        writeln!(out, "{}", resp.parameters)?;
    } else if args.system {
        write!(out, "{}", resp.system)?;
    } else if args.template {
        write!(out, "{}", resp.template)?;
    } else {
        write!(out, "{}", info(&resp, args.verbose))?;
    }
    Ok(())
}

/// The sections of `show`: Model, Capabilities, Projector, Parameters, (with `verbose`) Metadata
/// and Tensors, System and License, each an indented table followed by a blank line.
pub fn info(resp: &ShowResponse, verbose: bool) -> String {
    let mut out = String::new();
    let mut section = |title: &str, rows: Vec<Vec<String>>, width: usize| {
        out.push_str(&format!("  {title}\n"));
        out.push_str(&table(&wrap_cells(rows, width)));
        out.push('\n');
    };
    let row = |cells: &[&str]| -> Vec<String> {
        std::iter::once(String::new())
            .chain(cells.iter().map(|s| s.to_string()))
            .collect()
    };

    let mut model = Vec::new();
    match &resp.model_info {
        Some(mi) => {
            let arch = mi
                .get("general.architecture")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !arch.is_empty() {
                model.push(row(&["architecture", arch]));
            }
            let params = if !resp.details.parameter_size.is_empty() {
                resp.details.parameter_size.clone()
            } else {
                mi.get("general.parameter_count")
                    .and_then(Value::as_f64)
                    .map(|n| human_number(n as u64))
                    .unwrap_or_default()
            };
            if !params.is_empty() {
                model.push(row(&["parameters", &params]));
            }
            for (key, label) in [
                ("context_length", "context length"),
                ("embedding_length", "embedding length"),
            ] {
                if let Some(v) = mi.get(&format!("{arch}.{key}")).and_then(Value::as_f64) {
                    model.push(row(&[label, &v.to_string()]));
                }
            }
        }
        None => {
            model.push(row(&["architecture", &resp.details.family]));
            model.push(row(&["parameters", &resp.details.parameter_size]));
        }
    }
    model.push(row(&["quantization", &resp.details.quantization_level]));
    if !resp.requires.is_empty() {
        model.push(row(&["requires", &resp.requires]));
    }
    section("Model", model, 30);

    if !resp.capabilities.is_empty() {
        section(
            "Capabilities",
            resp.capabilities.iter().map(|c| row(&[c])).collect(),
            30,
        );
    }

    if let Some(pi) = &resp.projector_info {
        let arch = pi
            .get("general.architecture")
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut rows = Vec::new();
        if !arch.is_empty() {
            rows.push(row(&["architecture", arch]));
        }
        if let Some(n) = pi.get("general.parameter_count").and_then(Value::as_f64) {
            rows.push(row(&["parameters", &human_number(n as u64)]));
        }
        let value = |suffix: &str| {
            ["vision", "audio"]
                .iter()
                .find_map(|m| pi.get(&format!("{arch}.{m}.{suffix}")).and_then(Value::as_f64))
        };
        if let Some(v) = value("embedding_length") {
            rows.push(row(&["embedding length", &v.to_string()]));
        }
        if let Some(v) = value("projection_dim") {
            rows.push(row(&["dimensions", &v.to_string()]));
        }
        section("Projector", rows, 30);
    }

    if !resp.parameters.is_empty() {
        let rows = resp
            .parameters
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| row(&l.split_whitespace().collect::<Vec<_>>()))
            .collect();
        section("Parameters", rows, 30);
    }

    if verbose {
        if let Some(mi) = &resp.model_info {
            let mut keys: Vec<&String> = mi.keys().collect();
            keys.sort();
            let rows = keys
                .into_iter()
                .map(|k| row(&[k, &metadata_value(&mi[k])]))
                .collect();
            section("Metadata", rows, 30);
        }
        if !resp.tensors.is_empty() {
            let rows = resp
                .tensors
                .iter()
                .map(|t| {
                    let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
                    row(&[&t.name, &t.kind, &format!("[{}]", shape.join(" "))])
                })
                .collect();
            section("Tensors", rows, 30);
        }
    }

    if !resp.system.is_empty() {
        section(
            "System",
            head(&resp.system, 2).iter().map(|l| row(&[l])).collect(),
            100,
        );
    }
    if !resp.license.is_empty() {
        section(
            "License",
            head(&resp.license, 2).iter().map(|l| row(&[l])).collect(),
            100,
        );
    }
    out
}

/// The first `n` non-blank lines, trimmed, and `...` if there were more.
fn head(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let mut out: Vec<String> = lines.iter().take(n).map(|s| s.to_string()).collect();
    if lines.len() > n {
        out.push("...".into());
    }
    out
}

/// A metadata value as Ollama prints it: numbers as Go's `%g`, arrays as Go's `%v`, cut to about
/// ten columns with a count of the rest.
fn metadata_value(v: &Value) -> String {
    match v {
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Array(items) => {
            const TARGET: usize = 10;
            let mut width = 1;
            let mut shown = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let s = go_value(item);
                let w = s.chars().count() + if i > 0 { 2 } else { 0 };
                if width + w > TARGET && i > 0 {
                    break;
                }
                width += w;
                shown.push(s);
            }
            if shown.len() < items.len() {
                format!("[{} ...+{} more]", shown.join(" "), items.len() - shown.len())
            } else {
                format!("[{}]", shown.join(" "))
            }
        }
        Value::Null => "<nil>".into(),
        Value::Object(_) => "map[string]interface {}".into(),
    }
}

/// A JSON value as Go's `%v` prints the decoded value.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Array(items) => format!("[{}]", items.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => go_map(m),
        other => other.to_string(),
    }
}

fn go_map(m: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let items: Vec<String> = keys.iter().map(|k| format!("{k}:{}", go_value(&m[*k]))).collect();
    format!("map[{}]", items.join(" "))
}

/// A float as Go's `%g` (and `%v`) prints it: the shortest digits, in exponent form when the
/// exponent is below -4 or 6 and up (`32768`, `0.0001`, `1e+06`, `1e-05`).
pub fn go_float(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    let sci = format!("{v:e}"); // the shortest digits, e.g. "3.2768e4"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{v}")
    }
}

/// Wraps cells wider than `limit` at spaces onto continuation rows, as tablewriter does.
fn wrap_cells(rows: Vec<Vec<String>>, limit: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for row in rows {
        let wrapped: Vec<Vec<String>> = row.iter().map(|c| wrap_words(c, limit)).collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..height {
            out.push(
                wrapped
                    .iter()
                    .map(|lines| lines.get(i).cloned().unwrap_or_default())
                    .collect(),
            );
        }
    }
    out
}

fn wrap_words(cell: &str, limit: usize) -> Vec<String> {
    if cell.chars().count() <= limit {
        return vec![cell.to_string()];
    }
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in cell.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > limit {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma() -> ShowResponse {
        serde_json::from_str(
            r#"{
              "license": "Gemma Terms of Use\n\nLast modified: February 21, 2024\n\nBy using...",
              "system": "You are a helpful assistant.",
              "parameters": "stop                           \"<end_of_turn>\"\ntemperature                    1\ntop_k                          64",
              "details": {"family": "gemma3", "parameter_size": "268.10M", "quantization_level": "Q8_0"},
              "model_info": {"general.architecture": "gemma3", "general.parameter_count": 268098176,
                             "gemma3.context_length": 32768, "gemma3.embedding_length": 640,
                             "gemma3.rope.freq_base": 1000000, "tokenizer.ggml.scores": [0, 0.5, -1000, 3, 4, 5],
                             "tokenizer.ggml.pre": "default", "gemma3.attention.layer_norm_rms_epsilon": 0.000001},
              "tensors": [{"name": "token_embd.weight", "type": "Q8_0", "shape": [640, 262144]}],
              "capabilities": ["completion"]
            }"#,
        )
        .unwrap()
    }

    #[test]
    fn sections_as_ollama() {
        assert_eq!(
            info(&gemma(), false),
            "  Model\n\
             \x20   architecture        gemma3\n\
             \x20   parameters          268.10M\n\
             \x20   context length      32768\n\
             \x20   embedding length    640\n\
             \x20   quantization        Q8_0\n\
             \n\
             \x20 Capabilities\n\
             \x20   completion\n\
             \n\
             \x20 Parameters\n\
             \x20   stop           \"<end_of_turn>\"\n\
             \x20   temperature    1\n\
             \x20   top_k          64\n\
             \n\
             \x20 System\n\
             \x20   You are a helpful assistant.\n\
             \n\
             \x20 License\n\
             \x20   Gemma Terms of Use\n\
             \x20   Last modified: February 21, 2024\n\
             \x20   ...\n\
             \n"
        );
    }

    #[test]
    fn verbose_adds_metadata_and_tensors() {
        let text = info(&gemma(), true);
        assert!(text.contains("  Metadata\n"), "{text}");
        assert!(
            text.contains("    gemma3.rope.freq_base                      1e+06\n"),
            "{text}"
        );
        assert!(
            text.contains("    gemma3.attention.layer_norm_rms_epsilon    1e-06\n"),
            "{text}"
        );
        assert!(
            text.contains("    tokenizer.ggml.scores                      [0 0.5 ...+4 more]\n"),
            "{text}"
        );
        assert!(
            text.contains("  Tensors\n    token_embd.weight    Q8_0    [640 262144]\n"),
            "{text}"
        );
    }

    #[test]
    fn go_floats() {
        assert_eq!(go_float(32768.0), "32768");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(999999.0), "999999");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(1e-6), "1e-06");
        assert_eq!(go_float(-2.5e10), "-2.5e+10");
        assert_eq!(go_float(0.0), "0");
    }

    #[test]
    fn long_license_lines_wrap_at_100_columns() {
        let long = "word ".repeat(40);
        let rows = wrap_cells(vec![vec![String::new(), long.trim().to_string()]], 100);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r[1].len() <= 100));
    }
}
