//! When a generation ends, and what of its text may be shown before it does.
//!
//! [`StopMatcher`] watches the generated text for stop strings. Text reaches it token by token, a
//! stop string can span several tokens, and a streaming client must never see any part of a stop
//! string: so the matcher holds back the longest tail that could still grow into a stop string
//! (and any unfinished UTF-8 character) until the next token decides it. [`PredictLimit`] is
//! `num_predict`.

use crate::{Error, Result};

/// Why a generation ended, as Ollama reports it in `done_reason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoneReason {
    /// A stop string or an end-of-generation token.
    Stop,
    /// The token limit (`num_predict`) or the context is exhausted.
    Length,
}

impl DoneReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DoneReason::Stop => "stop",
            DoneReason::Length => "length",
        }
    }
}

/// What to do with the text after one more token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopStep {
    /// Show this text (possibly empty) and go on.
    Continue(String),
    /// A stop string was found: show this text (everything before the stop string) and end with
    /// [`DoneReason::Stop`].
    Stop(String),
}

/// Finds stop strings in streamed text. See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<Vec<u8>>,
    /// Text received but not yet released.
    pending: Vec<u8>,
    stopped: bool,
    /// The index in `stops` of the stop string that ended the text.
    matched: Option<usize>,
}

impl StopMatcher {
    /// A matcher for these stop strings; empty strings are ignored.
    pub fn new<S: AsRef<str>>(stops: impl IntoIterator<Item = S>) -> Self {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(|s| s.as_ref().as_bytes().to_vec())
                .filter(|s| !s.is_empty())
                .collect(),
            pending: Vec::new(),
            stopped: false,
            matched: None,
        }
    }

    /// Whether a stop string has been found.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The stop string that was found (the first of the list that starts at the earliest
    /// position), for APIs that report it (Anthropic's `stop_sequence`).
    pub fn matched(&self) -> Option<&str> {
        let s = &self.stops[self.matched?];
        // Stop strings come in as `str`, so this never fails.
        std::str::from_utf8(s).ok()
    }

    /// Takes the bytes of the next token (which may end inside a UTF-8 character) and says what
    /// can be shown now. After a [`StopStep::Stop`], further input is ignored.
    pub fn push(&mut self, bytes: &[u8]) -> StopStep {
        if self.stopped {
            return StopStep::Stop(String::new());
        }
        let scan_from = self
            .pending
            .len()
            .saturating_sub(self.longest_stop().saturating_sub(1));
        self.pending.extend_from_slice(bytes);
        if let Some((at, which)) = self.first_stop(scan_from) {
            self.stopped = true;
            self.matched = Some(which);
            let shown = String::from_utf8_lossy(&self.pending[..at]).into_owned();
            self.pending.clear();
            return StopStep::Stop(shown);
        }
        let hold = self.stop_prefix_len().max(incomplete_utf8_tail(&self.pending));
        let release = self.pending.len() - hold;
        let shown = String::from_utf8_lossy(&self.pending[..release]).into_owned();
        self.pending.drain(..release);
        StopStep::Continue(shown)
    }

    /// The generation ended for another reason: releases whatever was held back.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }

    fn longest_stop(&self) -> usize {
        self.stops.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// The earliest position at or after `from` where a stop string starts, and which one.
    fn first_stop(&self, from: usize) -> Option<(usize, usize)> {
        let hay = &self.pending;
        (from..hay.len()).find_map(|i| {
            let which = self.stops.iter().position(|s| hay[i..].starts_with(s))?;
            Some((i, which))
        })
    }

    /// The length of the longest tail of the pending text that is a proper prefix of a stop
    /// string.
    fn stop_prefix_len(&self) -> usize {
        let hay = &self.pending;
        let mut best = 0;
        for s in &self.stops {
            let max = (s.len() - 1).min(hay.len());
            for len in (best + 1..=max).rev() {
                if hay[hay.len() - len..] == s[..len] {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

/// How many bytes at the end of `b` start a UTF-8 character that is not complete yet.
fn incomplete_utf8_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let byte = b[b.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead byte
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if back < need { back } else { 0 };
    }
    0
}

/// `num_predict`: how many tokens a generation may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictLimit {
    /// -1: no limit of its own (the generation loop may shift the context to go on).
    Unbounded,
    /// -2: until the context is full.
    FillContext,
    /// At most this many tokens.
    Tokens(usize),
}

impl PredictLimit {
    pub fn from_num_predict(n: i64) -> Result<Self> {
        match n {
            -1 => Ok(PredictLimit::Unbounded),
            -2 => Ok(PredictLimit::FillContext),
            n if n >= 0 => Ok(PredictLimit::Tokens(usize::try_from(n).unwrap_or(usize::MAX))),
            _ => Err(Error::InvalidArgument(
                "option \"num_predict\" must be -1 (unbounded), -2 (fill the context) or a token count"
                    .into(),
            )),
        }
    }

    /// Whether the generation must end (with [`DoneReason::Length`]) before producing another
    /// token, having produced `generated` tokens with `context_used` of `num_ctx` positions filled.
    pub fn reached(self, generated: usize, context_used: usize, num_ctx: usize) -> bool {
        match self {
            PredictLimit::Unbounded => false,
            PredictLimit::FillContext => context_used >= num_ctx,
            PredictLimit::Tokens(n) => generated >= n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds tokens one by one; returns what a client would have seen and whether it stopped.
    fn stream(stops: &[&str], tokens: &[&str]) -> (Vec<String>, bool) {
        let mut m = StopMatcher::new(stops);
        let mut shown = vec![];
        for t in tokens {
            match m.push(t.as_bytes()) {
                StopStep::Continue(s) => shown.push(s),
                StopStep::Stop(s) => {
                    shown.push(s);
                    return (shown, true);
                }
            }
        }
        shown.push(m.finish());
        (shown, false)
    }

    #[test]
    fn holds_back_a_possible_prefix_across_tokens() {
        let (shown, stopped) = stream(&["</answer>"], &["The", " end", "</", "ans", "wer", ">", "more"]);
        assert!(stopped);
        assert_eq!(shown, vec!["The", " end", "", "", "", ""]);
    }

    #[test]
    fn releases_a_prefix_that_turns_out_not_to_stop() {
        let (shown, stopped) = stream(&["STOP"], &["a S", "T", "x", "y"]);
        assert!(!stopped);
        assert_eq!(shown, vec!["a ", "", "STx", "y", ""]);
        assert_eq!(shown.concat(), "a STxy");
    }

    #[test]
    fn stop_inside_one_token_cuts_before_it() {
        let (shown, stopped) = stream(&["\n\n"], &["Hello", " world\n\nBye"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "Hello world");
    }

    #[test]
    fn earliest_of_several_stop_strings_wins() {
        let (shown, stopped) = stream(&["beta", "al"], &["x alpha beta"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "x ");
        // A stop string that overlaps a longer, unfinished one.
        let (shown, stopped) = stream(&["abcd", "bc"], &["a", "b", "c"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "a");
    }

    #[test]
    fn reports_which_stop_string_ended_the_text() {
        let mut m = StopMatcher::new(["", "beta", "al"]);
        assert_eq!(m.matched(), None);
        assert_eq!(m.push(b"x alp"), StopStep::Stop("x ".into()));
        assert_eq!(m.matched(), Some("al"));
        // Two stop strings at the same position: the first in the list.
        let mut m = StopMatcher::new(["bc", "b"]);
        assert_eq!(m.push(b"a"), StopStep::Continue("a".into()));
        assert_eq!(m.push(b"bcd"), StopStep::Stop(String::new()));
        assert_eq!(m.matched(), Some("bc"));
        let mut m = StopMatcher::new(["zz"]);
        m.push(b"abc");
        m.finish();
        assert_eq!(m.matched(), None);
    }

    #[test]
    fn never_shows_any_part_of_a_stop_string() {
        // Every split of the text into tokens: what is shown is exactly the text before the first
        // stop string, and each chunk shown is a prefix of that.
        let text = "one <|im_end|> two";
        let stops = ["<|im_end|>", "<|endoftext|>"];
        for a in 1..text.len() {
            for b in a + 1..text.len() {
                let toks = [&text[..a], &text[a..b], &text[b..]];
                let (shown, stopped) = stream(&stops, &toks);
                assert!(stopped);
                assert_eq!(shown.concat(), "one ", "split {a} {b}");
            }
        }
    }

    #[test]
    fn utf8_split_across_tokens_is_held_until_complete() {
        let bytes = "é😀".as_bytes(); // c3 a9 f0 9f 98 80
        let mut m = StopMatcher::new(Vec::<String>::new());
        assert_eq!(m.push(&bytes[..1]), StopStep::Continue(String::new()));
        assert_eq!(m.push(&bytes[1..3]), StopStep::Continue("é".into()));
        assert_eq!(m.push(&bytes[3..5]), StopStep::Continue(String::new()));
        assert_eq!(m.push(&bytes[5..]), StopStep::Continue("😀".into()));
        // A stop string with a multi-byte character, split inside the character.
        let (shown, stopped) = stream(&["«end»"], &["x \u{ab}e", "nd\u{bb}"]);
        assert!(stopped);
        assert_eq!(shown.concat(), "x ");
    }

    #[test]
    fn without_stop_strings_everything_passes_through() {
        let (shown, stopped) = stream(&[], &["a", "b"]);
        assert!(!stopped);
        assert_eq!(shown, vec!["a", "b", ""]);
        let (shown, _) = stream(&[""], &["a"]);
        assert_eq!(shown, vec!["a", ""]);
    }

    #[test]
    fn predict_limits() {
        assert_eq!(
            PredictLimit::from_num_predict(-1).unwrap(),
            PredictLimit::Unbounded
        );
        assert_eq!(
            PredictLimit::from_num_predict(-2).unwrap(),
            PredictLimit::FillContext
        );
        assert!(PredictLimit::from_num_predict(-3).is_err());
        let l = PredictLimit::from_num_predict(3).unwrap();
        assert!(!l.reached(2, 100, 4096));
        assert!(l.reached(3, 100, 4096));
        assert!(PredictLimit::FillContext.reached(10, 4096, 4096));
        assert!(!PredictLimit::FillContext.reached(10, 4095, 4096));
        assert!(!PredictLimit::Unbounded.reached(1 << 20, 4096, 4096));
        assert!(PredictLimit::Tokens(0).reached(0, 0, 10));
        assert_eq!(DoneReason::Length.as_str(), "length");
    }
}
