//! Progress of `pull`, `push` and `create`, shown as Ollama shows it: a spinner per status
//! message and one bar per layer (size, speed, time left) on a terminal; plain lines otherwise,
//! so logs and pipes get readable text instead of cursor movements.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

use super::format::{go_duration, human_bytes};
use crate::client::api::ProgressResponse;

/// Which operation the progress lines belong to; it names the bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Pull,
    Push,
    Create,
}

pub struct Progress {
    verb: Verb,
    status: String,
    view: View,
}

enum View {
    Bars {
        multi: MultiProgress,
        bars: HashMap<String, ProgressBar>,
        spinner: Option<ProgressBar>,
    },
    Plain {
        out: Box<dyn Write + Send>,
        /// The last tenth of each layer that got a line.
        shown: HashMap<String, i64>,
    },
}

impl Progress {
    /// Bars on standard error when both standard output and standard error are terminals;
    /// plain lines on standard error otherwise.
    pub fn new(verb: Verb) -> Progress {
        if super::is_interactive() {
            Progress::bars(verb, ProgressDrawTarget::stderr())
        } else {
            Progress::plain(verb, Box::new(std::io::stderr()))
        }
    }

    pub fn bars(verb: Verb, target: ProgressDrawTarget) -> Progress {
        Progress {
            verb,
            status: String::new(),
            view: View::Bars {
                multi: MultiProgress::with_draw_target(target),
                bars: HashMap::new(),
                spinner: None,
            },
        }
    }

    pub fn plain(verb: Verb, out: Box<dyn Write + Send>) -> Progress {
        Progress {
            verb,
            status: String::new(),
            view: View::Plain {
                out,
                shown: HashMap::new(),
            },
        }
    }

    /// Shows a progress line from the daemon.
    pub fn update(&mut self, p: &ProgressResponse) {
        if p.digest.is_empty() {
            if p.status != self.status {
                self.set_status(&p.status.clone());
            }
            return;
        }
        // A pull announces each layer with completed 0 before it starts; Ollama skips that so
        // that no 0% bar sits there while another layer downloads.
        if self.verb == Verb::Pull && p.completed == 0 {
            return;
        }
        let label = self.label(p);
        match &mut self.view {
            View::Bars { multi, bars, spinner } => {
                if let Some(s) = spinner.take() {
                    s.finish();
                }
                let bar = bars.entry(p.digest.clone()).or_insert_with(|| {
                    let total = p.total.max(0) as u64;
                    let bar = multi.add(ProgressBar::new(total));
                    bar.set_style(bar_style());
                    bar.set_message(label);
                    bar.set_position(p.completed.max(0) as u64);
                    bar.reset_eta();
                    bar
                });
                if p.total > 0 && bar.length() != Some(p.total as u64) {
                    bar.set_length(p.total as u64);
                }
                bar.set_position(p.completed.clamp(0, p.total.max(0)) as u64);
                if p.total > 0 && p.completed >= p.total && !bar.is_finished() {
                    bar.finish();
                }
            }
            View::Plain { out, shown } => {
                let tenth = if p.total > 0 {
                    (p.completed.clamp(0, p.total) as i128 * 10 / p.total as i128) as i64
                } else {
                    0
                };
                if shown.get(&p.digest).is_some_and(|&t| t >= tenth) {
                    return;
                }
                shown.insert(p.digest.clone(), tenth);
                let line = if p.total > 0 && p.completed >= p.total {
                    format!("{label} 100% ({})", human_bytes(p.total))
                } else {
                    let pct = if p.total > 0 {
                        p.completed * 100 / p.total
                    } else {
                        0
                    };
                    format!(
                        "{label} {pct:3}% ({}/{})",
                        human_bytes(p.completed),
                        human_bytes(p.total)
                    )
                };
                let _ = writeln!(out, "{line}");
            }
        }
    }

    /// Ends the current status line and starts a new one with a spinner.
    pub fn set_status(&mut self, status: &str) {
        self.status = status.to_string();
        match &mut self.view {
            View::Bars { multi, spinner, .. } => {
                if let Some(s) = spinner.take() {
                    s.finish();
                }
                let s = multi.add(ProgressBar::new_spinner());
                s.set_style(spinner_style());
                s.set_message(status.to_string());
                s.enable_steady_tick(Duration::from_millis(100));
                *spinner = Some(s);
            }
            View::Plain { out, .. } => {
                if !status.is_empty() {
                    let _ = writeln!(out, "{status}");
                }
            }
        }
    }

    /// Changes the current status text in place (a spinner's message; in plain mode nothing,
    /// so that per-percent updates do not flood a log).
    pub fn set_message(&mut self, msg: &str) {
        if let View::Bars { spinner: Some(s), .. } = &self.view {
            s.set_message(msg.to_string());
        }
    }

    /// Stops the spinner and leaves every line on screen.
    pub fn finish(&mut self) {
        if let View::Bars { bars, spinner, .. } = &mut self.view {
            if let Some(s) = spinner.take() {
                s.finish();
            }
            for b in bars.values() {
                if !b.is_finished() {
                    b.abandon();
                }
            }
        }
    }

    fn label(&self, p: &ProgressResponse) -> String {
        let short = p.digest.strip_prefix("sha256:").map(|h| &h[..h.len().min(12)]);
        match (self.verb, short) {
            (Verb::Pull, Some(h)) => format!("pulling {h}:"),
            (Verb::Pull, None) => format!("pulling {}:", p.digest.trim()),
            _ if !p.status.is_empty() => p.status.clone(),
            (Verb::Push, _) => format!("pushing {}...", short.unwrap_or(&p.digest)),
            (Verb::Create, _) => format!("copying {}...", short.unwrap_or(&p.digest)),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `pulling 8eeb52dfb3bb:  45% ▕███████        ▏ 114 MB/253 MB   12 MB/s     11s`
fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template("{msg} {percent:>3}% ▕{wide_bar}▏ {sizes}{rate}{eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("█ ")
        .with_key("sizes", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&sizes(s.pos(), s.len().unwrap_or(0)));
        })
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = w.write_str(&rate(s.per_sec(), done(s)));
        })
        .with_key("eta", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let left = if s.per_sec() > 0.0 {
                Some(s.len().unwrap_or(0).saturating_sub(s.pos()) as f64 / s.per_sec())
            } else {
                None
            };
            let _ = w.write_str(&eta(left, done(s)));
        })
}

fn done(s: &ProgressState) -> bool {
    s.len().is_some_and(|l| s.pos() >= l) || s.is_finished()
}

/// `pulling manifest ⠋`, and `pulling manifest` once finished.
fn spinner_style() -> ProgressStyle {
    ProgressStyle::with_template("{msg} {spinner}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .tick_strings(&["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", ""])
}

/// A spinner on standard error with no text, shown while a model loads or a prompt is read;
/// hidden when standard error is not a terminal.
pub fn waiting_spinner() -> ProgressBar {
    if !console::Term::stderr().is_term() {
        return ProgressBar::hidden();
    }
    let s = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    s.set_style(
        ProgressStyle::with_template("{spinner}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .tick_strings(&["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", ""]),
    );
    s.enable_steady_tick(Duration::from_millis(100));
    s
}

/// Right-aligns in 6 columns, as Ollama pads each figure.
fn pad6(s: &str) -> String {
    format!("{s:>6}")
}

/// `114 MB/253 MB` while running, `253 MB` and blanks once done (13 columns either way).
fn sizes(pos: u64, len: u64) -> String {
    let total = human_bytes(len as i64);
    if pos >= len {
        format!("{}{}", pad6(&total), " ".repeat(7))
    } else {
        format!("{}/{}", pad6(&human_bytes(pos as i64)), pad6(&total))
    }
}

/// `   12 MB/s` while running (10 columns), blanks once done or before a rate is known.
fn rate(per_sec: f64, done: bool) -> String {
    if done || per_sec <= 0.0 || !per_sec.is_finite() {
        return " ".repeat(10);
    }
    format!("  {}/s", pad6(&human_bytes(per_sec as i64)))
}

/// `     11s` (8 columns): the time left, as Ollama's `formatDuration`.
fn eta(seconds_left: Option<f64>, done: bool) -> String {
    let Some(secs) = seconds_left.filter(|s| !done && s.is_finite() && *s >= 0.0) else {
        return " ".repeat(8);
    };
    let secs = secs as u64;
    let text = if secs >= 100 * 3600 {
        "99h+".to_string()
    } else if secs >= 3600 {
        format!("{}h{}m", secs / 3600, secs / 60 % 60)
    } else {
        go_duration(secs as i64 * 1_000_000_000)
    };
    format!("  {}", pad6(&text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(status: &str, digest: &str, total: i64, completed: i64) -> ProgressResponse {
        ProgressResponse {
            status: status.into(),
            digest: digest.into(),
            total,
            completed,
        }
    }

    #[test]
    fn plain_lines_for_a_pull() {
        let sink = Sink::default();
        let mut p = Progress::plain(Verb::Pull, Box::new(sink.clone()));
        let d = "sha256:8eeb52dfb3bb9aefdf9d1ef24b3bdbcfbe82238798c4b918278320b6fcef18fe";
        p.update(&line("pulling manifest", "", 0, 0));
        p.update(&line("pulling manifest", "", 0, 0));
        p.update(&line("pulling 8eeb52dfb3bb", d, 253_000_000, 0));
        for done in (1..=253).map(|m| m * 1_000_000) {
            p.update(&line("pulling 8eeb52dfb3bb", d, 253_000_000, done));
        }
        p.update(&line("verifying sha256 digest", "", 0, 0));
        p.update(&line("success", "", 0, 0));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "pulling manifest");
        assert_eq!(lines[1], "pulling 8eeb52dfb3bb:   0% (1 MB/253 MB)");
        assert_eq!(lines[2], "pulling 8eeb52dfb3bb:  10% (26 MB/253 MB)");
        assert_eq!(lines[11], "pulling 8eeb52dfb3bb: 100% (253 MB)");
        assert_eq!(&lines[12..], ["verifying sha256 digest", "success"]);
        assert_eq!(lines.len(), 14);
    }

    #[test]
    fn push_and_create_bars_use_the_status() {
        let sink = Sink::default();
        let mut p = Progress::plain(Verb::Push, Box::new(sink.clone()));
        p.update(&line("pushing 8eeb52dfb3bb", "sha256:8eeb52dfb3bb9aef", 100, 0));
        p.update(&line("pushing 8eeb52dfb3bb", "sha256:8eeb52dfb3bb9aef", 100, 100));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "pushing 8eeb52dfb3bb   0% (0 B/100 B)\npushing 8eeb52dfb3bb 100% (100 B)\n"
        );
    }

    #[test]
    fn bar_figures_as_ollama() {
        assert_eq!(sizes(114_000_000, 253_000_000), "114 MB/253 MB");
        assert_eq!(sizes(1_500, 2_019_377_376), "1.5 KB/2.0 GB");
        assert_eq!(sizes(253_000_000, 253_000_000), "253 MB       ");
        assert_eq!(rate(12_345_678.0, false), "   12 MB/s");
        assert_eq!(rate(12_345_678.0, true), " ".repeat(10));
        assert_eq!(rate(0.0, false), " ".repeat(10));
        assert_eq!(eta(Some(11.4), false), "     11s");
        assert_eq!(eta(Some(225.0), false), "   3m45s");
        assert_eq!(eta(Some(3.0 * 3600.0 + 125.0), false), "    3h2m");
        assert_eq!(eta(Some(500.0 * 3600.0), false), "    99h+");
        assert_eq!(eta(None, false), " ".repeat(8));
        assert_eq!(eta(Some(5.0), true), " ".repeat(8));
    }

    #[test]
    fn bars_render_into_a_hidden_target() {
        // The terminal path must not panic on odd input (no total, completed past total).
        let mut p = Progress::bars(Verb::Pull, ProgressDrawTarget::hidden());
        p.update(&line("pulling manifest", "", 0, 0));
        p.update(&line("pulling ab", "sha256:ab", 0, 5));
        p.update(&line("pulling ab", "sha256:ab", 10, 50));
        p.update(&line("success", "", 0, 0));
        p.finish();
    }
}
