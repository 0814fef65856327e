//! A model's reply, split as it streams: thinking, content and tool calls.
//!
//! The thinking parser runs first (a tool call written while thinking is not a call); the tool
//! parser sees only the reply's content. Build one per request with
//! [`crate::template::ChatFormat::reply_parser`].

use super::thinking::{Phase, ThinkingParser};
use super::tools::ToolCallParser;
use super::ToolCall;

/// What a piece of output turned into.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplyDelta {
    pub thinking: String,
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
}

impl ReplyDelta {
    pub fn is_empty(&self) -> bool {
        self.thinking.is_empty() && self.content.is_empty() && self.tool_calls.is_empty()
    }

    /// Adds a later piece of the same reply.
    pub fn append(&mut self, later: ReplyDelta) {
        self.thinking.push_str(&later.thinking);
        self.content.push_str(&later.content);
        self.tool_calls.extend(later.tool_calls);
    }
}

#[derive(Debug, Clone, Default)]
pub struct ReplyParser {
    thinking: Option<ThinkingParser>,
    /// False when the request turned thinking off but the prompt opened it anyway: the
    /// reasoning is parsed out of the content and dropped.
    emit_thinking: bool,
    tools: Option<ToolCallParser>,
    /// The reply text of the last [`push`](Self::push), before tool calls were parsed out of it.
    last_content: String,
}

impl ReplyParser {
    pub fn new(
        thinking: Option<ThinkingParser>,
        emit_thinking: bool,
        tools: Option<ToolCallParser>,
    ) -> ReplyParser {
        ReplyParser {
            thinking,
            emit_thinking,
            tools,
            last_content: String::new(),
        }
    }

    /// Everything is content.
    pub fn passthrough() -> ReplyParser {
        ReplyParser::default()
    }

    pub fn push(&mut self, text: &str) -> ReplyDelta {
        let (thinking, content) = match &mut self.thinking {
            Some(t) => {
                let s = t.push(text);
                (s.thinking, s.content)
            }
            None => (String::new(), text.to_string()),
        };
        let d = self.content(thinking, &content, false);
        self.last_content = content;
        d
    }

    /// Where the reply is; a reply without a thinking parser is all content.
    pub fn phase(&self) -> Phase {
        self.thinking.as_ref().map_or(Phase::Content, |t| t.phase())
    }

    /// The tag that opens the thinking, if the reply is parsed for it.
    pub fn thinking_open_tag(&self) -> Option<&str> {
        self.thinking
            .as_ref()
            .map(|t| t.open_tag())
            .filter(|t| !t.is_empty())
    }

    /// The reply text (not thinking) the last [`push`](Self::push) passed on, tool calls and
    /// held-back text included.
    pub fn last_content(&self) -> &str {
        &self.last_content
    }

    /// End of output: releases anything held back.
    pub fn finish(&mut self) -> ReplyDelta {
        let (thinking, content) = match &mut self.thinking {
            Some(t) => {
                let s = t.finish();
                (s.thinking, s.content)
            }
            None => (String::new(), String::new()),
        };
        self.content(thinking, &content, true)
    }

    fn content(&mut self, thinking: String, content: &str, eof: bool) -> ReplyDelta {
        let mut d = ReplyDelta {
            thinking: if self.emit_thinking {
                thinking
            } else {
                String::new()
            },
            ..ReplyDelta::default()
        };
        match &mut self.tools {
            Some(p) => {
                let mut r = p.push(content);
                if eof {
                    let f = p.finish();
                    r.content.push_str(&f.content);
                    r.calls.extend(f.calls);
                }
                d.content = r.content;
                d.tool_calls = r.calls;
            }
            None => d.content = content.to_string(),
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolCallFormat;

    /// Random output of thinking tags, call pieces and whitespace, fed whole and in random
    /// chunks (streamed tokens): the same thinking, content and calls either way.
    #[test]
    fn chunking_never_changes_the_reply() {
        const PIECES: [&str; 16] = [
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "{",
            "}",
            "\"name\"",
            "\"arguments\"",
            "\"f\"",
            ": ",
            ", ",
            "\n",
            " ",
            "x",
            "<",
            "\"",
        ];
        let parser = || {
            let tools = ToolCallParser::new(ToolCallFormat::from_tag("<tool_call>"), vec!["f".into()]);
            ReplyParser::new(
                Some(ThinkingParser::new("<think>", "</think>")),
                true,
                Some(tools),
            )
        };
        let collect = |text: &str, cuts: &mut dyn FnMut(usize) -> usize| {
            let mut p = parser();
            let mut all = ReplyDelta::default();
            let mut rest = text;
            while !rest.is_empty() {
                let k = cuts(rest.len());
                all.append(p.push(&rest[..k]));
                rest = &rest[k..];
            }
            all.append(p.finish());
            all
        };
        let mut rng = crate::kernels::tests::Rng::new(9);
        for case in 0..3000 {
            let text = crate::chat::tools::tests::random_text(&mut rng, &PIECES, 20);
            let whole = collect(&text, &mut |len| len);
            for _ in 0..3 {
                let got = collect(&text, &mut |len| (1 + rng.next() as usize % 5).min(len));
                assert_eq!(got, whole, "case {case}: {text:?}");
            }
        }
    }

    #[test]
    fn thinking_then_tool_call() {
        let mut p = ReplyParser::new(
            Some(ThinkingParser::new("<think>", "</think>")),
            true,
            Some(ToolCallParser::new(
                ToolCallFormat::from_tag("<tool_call>"),
                vec!["f".into()],
            )),
        );
        let mut all = ReplyDelta::default();
        for piece in [
            "<think>I could call <tool_call>",
            " f.</think>\n\nOk. <tool_",
            "call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}</tool_call>",
        ] {
            all.append(p.push(piece));
        }
        let d = p.finish();
        assert!(d.is_empty());
        assert_eq!(all.thinking, "I could call <tool_call> f.");
        assert_eq!(all.content, "Ok. ");
        assert_eq!(all.tool_calls.len(), 1);
        assert_eq!(all.tool_calls[0].arguments["x"], 1);
    }

    #[test]
    fn suppressed_thinking_is_dropped() {
        let mut p = ReplyParser::new(
            Some(ThinkingParser::for_prompt("<think>", "</think>", "x<think>\n")),
            false,
            None,
        );
        let mut d = p.push("hidden</think>shown");
        let f = p.finish();
        d.content.push_str(&f.content);
        assert_eq!((d.thinking.as_str(), d.content.as_str()), ("", "shown"));
    }
}
