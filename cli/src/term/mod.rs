//! What the CLI prints on a terminal: formats, tables, progress and word-wrapped streams.

pub mod format;
pub mod progress;
pub mod stream;
pub mod wrap;

use std::io::{self, Write};

/// Standard output for what a command prints. A reader that goes away (`ollamars show m |
/// head -1`) ends the program quietly with status 0, as ripgrep does, where `println!` would
/// panic and a returned error would print a line nobody asked for.
pub struct Stdout(io::StdoutLock<'static>);

pub fn stdout() -> Stdout {
    Stdout(io::stdout().lock())
}

fn quiet_on_broken_pipe<T>(r: io::Result<T>) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        r => r,
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        quiet_on_broken_pipe(self.0.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        quiet_on_broken_pipe(self.0.flush())
    }
}

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
