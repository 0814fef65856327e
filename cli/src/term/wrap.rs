//! Word wrap for text that arrives a few characters at a time.
//!
//! Characters are printed as soon as they arrive. When a line gets within five columns of the
//! terminal's edge, the word being written is taken back (cursor left, clear to the end of the
//! line) and carried to the next line, as Ollama's `displayResponse` does. The wrapper returns
//! the bytes to write, so it is tested without a terminal.

use unicode_width::UnicodeWidthChar;

pub struct Wrapper {
    /// Terminal width; `None` passes text through untouched.
    width: Option<usize>,
    line_len: usize,
    word: String,
}

impl Wrapper {
    /// Wraps at `width` columns; narrow terminals (under 10 columns) and `None` do not wrap.
    pub fn new(width: Option<usize>) -> Wrapper {
        Wrapper {
            width: width.filter(|&w| w >= 10),
            line_len: 0,
            word: String::new(),
        }
    }

    /// The output for the next piece of text.
    pub fn push(&mut self, text: &str) -> String {
        let Some(width) = self.width else {
            return text.to_string();
        };
        let mut out = String::with_capacity(text.len());
        for ch in text.chars() {
            let ch_width = ch.width().unwrap_or(0);
            if self.line_len + 1 > width - 5 {
                match ch {
                    '\n' | '\r' | ' ' | '\t' => {
                        // The line ends here anyway: break instead of printing the blank.
                        out.push('\n');
                        self.line_len = 0;
                        self.word.clear();
                    }
                    _ if word_width(&self.word) > width - 10 => {
                        // A word longer than a line cannot move: break it.
                        out.push('\n');
                        out.push(ch);
                        self.line_len = ch_width;
                        self.word.clear();
                        self.word.push(ch);
                    }
                    _ => {
                        let back = word_width(&self.word);
                        if back > 0 {
                            out.push_str(&format!("\x1b[{back}D"));
                        }
                        out.push_str("\x1b[K\n");
                        out.push_str(&self.word);
                        out.push(ch);
                        self.line_len = back + ch_width;
                        self.word.push(ch);
                    }
                }
                continue;
            }
            out.push(ch);
            self.line_len += ch_width;
            match ch {
                '\n' | '\r' => {
                    self.line_len = 0;
                    self.word.clear();
                }
                ' ' | '\t' => self.word.clear(),
                // Wide characters (CJK) may break anywhere.
                _ if ch_width >= 2 => self.word.clear(),
                _ => self.word.push(ch),
            }
        }
        out
    }
}

fn word_width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a terminal shows for the wrapper's output: applies `ESC[nD` and `ESC[K`.
    fn screen(out: &str) -> Vec<String> {
        let mut lines = vec![Vec::<char>::new()];
        let mut col = 0usize;
        let mut chars = out.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\x1b' => {
                    chars.next(); // '['
                    let mut n = String::new();
                    while let Some(&d) = chars.peek() {
                        if d.is_ascii_digit() {
                            n.push(d);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    let line = lines.last_mut().unwrap();
                    match chars.next() {
                        Some('D') => col -= n.parse::<usize>().unwrap(),
                        Some('K') => line.truncate(col),
                        other => panic!("unexpected escape {other:?}"),
                    }
                }
                '\n' => {
                    lines.push(Vec::new());
                    col = 0;
                }
                c => {
                    let line = lines.last_mut().unwrap();
                    if col < line.len() {
                        line[col] = c;
                    } else {
                        line.push(c);
                    }
                    col += 1;
                }
            }
        }
        lines.into_iter().map(|l| l.into_iter().collect()).collect()
    }

    #[test]
    fn words_move_to_the_next_line_whole() {
        let text = "The quick brown fox jumps over the lazy dog and keeps on running";
        let mut w = Wrapper::new(Some(30));
        // Fed a few characters at a time, as tokens arrive.
        let out: String = text
            .as_bytes()
            .chunks(3)
            .map(|c| w.push(std::str::from_utf8(c).unwrap()))
            .collect();
        let lines = screen(&out);
        for l in &lines {
            assert!(l.chars().count() <= 25, "{l:?} is too long");
        }
        let rejoined: Vec<String> = lines.iter().map(|l| l.trim().to_string()).collect();
        assert_eq!(rejoined.join(" "), text);
        assert_eq!(lines[0], "The quick brown fox jumps");
    }

    #[test]
    fn newlines_reset_the_line() {
        let mut w = Wrapper::new(Some(20));
        let out = w.push("short\nanother short line here");
        // Ollama's rule: a character goes on the line while the line is at most width - 5 long.
        assert_eq!(screen(&out), vec!["short", "another short ", "line here"]);
    }

    #[test]
    fn overlong_words_are_broken() {
        let mut w = Wrapper::new(Some(20));
        let out = w.push(&"x".repeat(40));
        let lines = screen(&out);
        assert!(lines.iter().all(|l| l.len() <= 15));
        assert_eq!(lines.concat(), "x".repeat(40));
    }

    #[test]
    fn no_width_passes_through() {
        let mut w = Wrapper::new(None);
        assert_eq!(w.push("a b\x1b c"), "a b\x1b c");
        let mut w = Wrapper::new(Some(5));
        assert_eq!(w.push(&"y ".repeat(30)), "y ".repeat(30));
    }
}
