//! How a streamed answer is printed: thinking in grey between `Thinking...` and
//! `...done thinking.`, then the content, word-wrapped; tool calls the model makes are shown as
//! calls to functions that do not exist (the CLI registers none), as Ollama does.

use super::wrap::Wrapper;
use crate::client::api::ToolCall;

const GREY: &str = "\x1b[38;5;245m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

pub struct Answer {
    wrap_width: Option<usize>,
    wrapper: Wrapper,
    /// No colours (output is not a terminal).
    plain: bool,
    hide_thinking: bool,
    thinking_open: bool,
    thinking_ends_with_newline: bool,
    /// The answer's content and thinking so far, for the conversation history.
    pub content: String,
    pub thinking: String,
}

impl Answer {
    pub fn new(wrap_width: Option<usize>, plain: bool, hide_thinking: bool) -> Answer {
        Answer {
            wrap_width,
            wrapper: Wrapper::new(wrap_width),
            plain,
            hide_thinking,
            thinking_open: false,
            thinking_ends_with_newline: false,
            content: String::new(),
            thinking: String::new(),
        }
    }

    /// The text to print for one chunk of the stream.
    pub fn chunk(&mut self, thinking: &str, content: &str, tool_calls: &[ToolCall]) -> String {
        let mut out = String::new();
        if !thinking.is_empty() {
            self.thinking.push_str(thinking);
            if !self.hide_thinking {
                if !self.thinking_open {
                    out.push_str(&self.styled("Thinking...\n"));
                    if !self.plain {
                        out.push_str(GREY);
                    }
                    self.thinking_open = true;
                }
                out.push_str(&self.wrapper.push(thinking));
                self.thinking_ends_with_newline = thinking.ends_with('\n');
            }
        }
        if self.thinking_open && (!content.is_empty() || !tool_calls.is_empty()) {
            if !self.thinking_ends_with_newline {
                out.push('\n');
            }
            out.push_str(&self.styled("...done thinking.\n\n"));
            self.thinking_open = false;
            self.wrapper = Wrapper::new(self.wrap_width);
        }
        self.content.push_str(content);
        out.push_str(&self.wrapper.push(content));
        for (i, call) in tool_calls.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let args = serde_json::to_string(&call.function.arguments).unwrap_or_default();
            if self.plain {
                out.push_str(&format!(
                    "  Model called a non-existent function '{}()' with arguments: {args}",
                    call.function.name
                ));
            } else {
                out.push_str(&format!(
                    "{GREY}{BOLD}  Model called a non-existent function '{RESET}{}{GREY}{BOLD}()' with arguments: {RESET}{args}{GREY}{BOLD}{RESET}",
                    call.function.name
                ));
            }
        }
        out
    }

    /// What to print when the stream ends while thinking is still open.
    pub fn finish(&mut self) -> String {
        if self.thinking_open && !self.plain {
            self.thinking_open = false;
            return RESET.to_string();
        }
        String::new()
    }

    fn styled(&self, text: &str) -> String {
        if self.plain {
            text.to_string()
        } else {
            format!("{GREY}{BOLD}{text}{RESET}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_then_content_in_plain_text() {
        let mut a = Answer::new(None, true, false);
        let mut out = String::new();
        out += &a.chunk("Let me", "", &[]);
        out += &a.chunk(" think.", "", &[]);
        out += &a.chunk("", "Hello", &[]);
        out += &a.chunk("", " there", &[]);
        out += &a.finish();
        assert_eq!(
            out,
            "Thinking...\nLet me think.\n...done thinking.\n\nHello there"
        );
        assert_eq!(a.content, "Hello there");
        assert_eq!(a.thinking, "Let me think.");
    }

    #[test]
    fn hidden_thinking_is_kept_but_not_shown() {
        let mut a = Answer::new(None, true, true);
        let out = a.chunk("secret", "", &[]) + &a.chunk("", "Hi", &[]);
        assert_eq!(out, "Hi");
        assert_eq!(a.thinking, "secret");
    }

    #[test]
    fn colours_on_a_terminal() {
        let mut a = Answer::new(None, false, false);
        let out = a.chunk("x\n", "", &[]) + &a.chunk("", "y", &[]);
        assert_eq!(
            out,
            format!("{GREY}{BOLD}Thinking...\n{RESET}{GREY}x\n{GREY}{BOLD}...done thinking.\n\n{RESET}y")
        );
    }

    #[test]
    fn tool_calls_are_reported() {
        let mut a = Answer::new(None, true, false);
        let call: ToolCall =
            serde_json::from_str(r#"{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}"#)
                .unwrap();
        assert_eq!(
            a.chunk("", "", &[call]),
            "  Model called a non-existent function 'get_weather()' with arguments: {\"city\":\"Paris\"}"
        );
    }
}
