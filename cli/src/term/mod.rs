//! What the CLI prints on a terminal: formats, tables, progress and word-wrapped streams.

pub mod format;
pub mod progress;
pub mod stream;
pub mod wrap;

/// Whether both standard output and standard error are terminals: bars, spinners and colours
/// only then, plain text for pipes and logs.
pub fn is_interactive() -> bool {
    console::Term::stdout().is_term() && console::Term::stderr().is_term()
}

/// The terminal's width in columns (80 when it cannot be told).
pub fn width() -> usize {
    console::Term::stdout()
        .size_checked()
        .map_or(80, |(_, w)| usize::from(w))
}
