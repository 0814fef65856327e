//! Splits a reasoning model's output into its thinking and its reply, incrementally.
//!
//! `<think>…</think>` (Qwen3, QwQ, DeepSeek-R1) or whatever tags the template shows around
//! `.Thinking`. As in Ollama: leading whitespace before the opening tag is skipped, whitespace
//! right after either tag is eaten, a possible partial tag is held back until it is decided, and a
//! reply that does not start with the opening tag has no thinking. Templates that open the tag
//! in the prompt (DeepSeek-R1's `<｜Assistant｜><think>\n`) start the parser inside the thinking:
//! see [`ThinkingParser::for_prompt`].

use super::tools::partial_suffix;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    LookingForOpening,
    /// After the opening tag, before any non-whitespace.
    ThinkingStarted,
    Thinking,
    /// After the closing tag, before any non-whitespace.
    ThinkingDone,
    /// Everything else is reply.
    Content,
}

#[derive(Debug, Clone)]
pub struct ThinkingParser {
    open: String,
    close: String,
    state: State,
    acc: String,
}

/// Where a reply is, for what constrains only its content (a grammar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing but whitespace yet: the opening tag may still come.
    BeforeThinking,
    Thinking,
    Content,
}

/// One piece of output, split.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThinkingSplit {
    pub thinking: String,
    pub content: String,
}

impl ThinkingParser {
    pub fn new(open: impl Into<String>, close: impl Into<String>) -> ThinkingParser {
        ThinkingParser {
            open: open.into(),
            close: close.into(),
            state: State::LookingForOpening,
            acc: String::new(),
        }
    }

    /// A parser for a reply to `prompt`: if the prompt already ends with the opening tag (the
    /// template opened the thinking for the model), the reply starts inside it.
    pub fn for_prompt(open: impl Into<String>, close: impl Into<String>, prompt: &str) -> ThinkingParser {
        let mut p = ThinkingParser::new(open, close);
        if !p.open.is_empty() && prompt.trim_end().ends_with(p.open.as_str()) {
            p.state = State::ThinkingStarted;
        }
        p
    }

    /// Whether the parser is (still) inside the thinking.
    pub fn in_thinking(&self) -> bool {
        matches!(self.state, State::ThinkingStarted | State::Thinking)
    }

    /// Where the reply is: before it is known whether it thinks, inside the thinking, or past
    /// it (reply text, whitespace after the closing tag included).
    pub fn phase(&self) -> Phase {
        match self.state {
            State::LookingForOpening => Phase::BeforeThinking,
            State::ThinkingStarted | State::Thinking => Phase::Thinking,
            State::ThinkingDone | State::Content => Phase::Content,
        }
    }

    /// The tag that opens the thinking.
    pub fn open_tag(&self) -> &str {
        &self.open
    }

    pub fn push(&mut self, text: &str) -> ThinkingSplit {
        self.acc.push_str(text);
        let mut out = ThinkingSplit::default();
        while self.step(&mut out) {}
        out
    }

    /// End of output: a held-back partial tag is given to the side it was on.
    pub fn finish(&mut self) -> ThinkingSplit {
        let mut out = ThinkingSplit::default();
        let rest = std::mem::take(&mut self.acc);
        match self.state {
            State::ThinkingStarted | State::Thinking => out.thinking = rest,
            State::LookingForOpening | State::ThinkingDone | State::Content => out.content = rest,
        }
        out
    }

    /// One transition; true when another may follow on the same input.
    fn step(&mut self, out: &mut ThinkingSplit) -> bool {
        match self.state {
            State::LookingForOpening => {
                let trimmed = self.acc.trim_start();
                if let Some(after) = trimmed
                    .strip_prefix(self.open.as_str())
                    .filter(|_| !self.open.is_empty())
                {
                    self.acc = after.to_string();
                    self.state = State::ThinkingStarted;
                    true
                } else if trimmed.is_empty() || self.open.starts_with(trimmed) {
                    false
                } else {
                    // No thinking: the reply keeps its leading whitespace.
                    out.content.push_str(&std::mem::take(&mut self.acc));
                    self.state = State::Content;
                    false
                }
            }
            State::ThinkingStarted => {
                let trimmed = self.acc.trim_start();
                if trimmed.is_empty() {
                    self.acc.clear();
                    false
                } else {
                    self.acc = trimmed.to_string();
                    self.state = State::Thinking;
                    true
                }
            }
            State::Thinking => {
                if let Some(i) = self.acc.find(self.close.as_str()) {
                    out.thinking.push_str(&self.acc[..i]);
                    self.acc = self.acc[i + self.close.len()..].to_string();
                    self.state = State::ThinkingDone;
                    true
                } else {
                    let keep = partial_suffix(&self.acc, &self.close);
                    let emit = self.acc.len() - keep;
                    out.thinking.push_str(&self.acc[..emit]);
                    self.acc.drain(..emit);
                    false
                }
            }
            State::ThinkingDone => {
                let trimmed = self.acc.trim_start();
                if trimmed.is_empty() {
                    self.acc.clear();
                    false
                } else {
                    out.content.push_str(trimmed);
                    self.acc.clear();
                    self.state = State::Content;
                    false
                }
            }
            State::Content => {
                out.content.push_str(&std::mem::take(&mut self.acc));
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &mut ThinkingParser, text: &str, n: usize) -> ThinkingSplit {
        let mut all = ThinkingSplit::default();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(n) {
            let s: String = chunk.iter().collect();
            let r = p.push(&s);
            all.thinking.push_str(&r.thinking);
            all.content.push_str(&r.content);
        }
        let r = p.finish();
        all.thinking.push_str(&r.thinking);
        all.content.push_str(&r.content);
        all
    }

    #[test]
    fn splits_at_any_chunking() {
        for n in [1, 2, 3, 5, 100] {
            let mut p = ThinkingParser::new("<think>", "</think>");
            let r = run(
                &mut p,
                "  <think>\nLet me think.\nOK </think>\n\nThe answer is 4.",
                n,
            );
            assert_eq!(r.thinking, "Let me think.\nOK ", "chunk {n}");
            assert_eq!(r.content, "The answer is 4.", "chunk {n}");
        }
    }

    #[test]
    fn no_thinking_keeps_content_whole() {
        let mut p = ThinkingParser::new("<think>", "</think>");
        let r = run(&mut p, "  Hello <think> is a tag", 2);
        assert_eq!(r.thinking, "");
        assert_eq!(r.content, "  Hello <think> is a tag");
    }

    #[test]
    fn prompt_that_opens_the_tag() {
        let mut p = ThinkingParser::for_prompt("<think>", "</think>", "<｜User｜>hi<｜Assistant｜><think>\n");
        assert!(p.in_thinking());
        let r = run(&mut p, "Reasoning here.</think>Hi!", 4);
        assert_eq!(r.thinking, "Reasoning here.");
        assert_eq!(r.content, "Hi!");
    }

    #[test]
    fn partial_tags_are_held_back_then_released() {
        let mut p = ThinkingParser::new("<think>", "</think>");
        assert_eq!(p.push("<thi"), ThinkingSplit::default());
        let r = p.push("nk>abc</th");
        assert_eq!(r.thinking, "abc");
        let r = p.push("ought");
        assert_eq!(r.thinking, "</thought");
        let r = p.finish();
        assert_eq!(r, ThinkingSplit::default());
        // Output that stops inside the thinking keeps it as thinking.
        let mut p = ThinkingParser::new("<think>", "</think>");
        let r = run(&mut p, "<think>unfinished</thi", 3);
        assert_eq!(r.thinking, "unfinished</thi");
    }
}
