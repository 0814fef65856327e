//! Fuzzes the Go text/template renderer behind Modelfile TEMPLATEs
//! (engine::template::OllamaTemplate) with arbitrary template text and messages (layout:
//! `chat_input.rs`).
//!
//! A TEMPLATE comes from a Modelfile or a request's `template` field: parsing, the capability
//! probes and execution must never panic and must stay bounded in time and memory.
#![no_main]

use std::time::{Duration, SystemTime};

use engine::template::{OllamaInputs, OllamaTemplate};
use libfuzzer_sys::fuzz_target;

#[path = "chat_input.rs"]
mod chat_input;

fuzz_target!(|data: &[u8]| {
    let input = chat_input::decode(data);
    let Ok(t) = OllamaTemplate::parse(&input.template) else {
        return;
    };
    let _ = (
        t.vars(),
        t.supports_tools(),
        t.supports_insert(),
        t.supports_thinking(),
    );
    let _ = t.tool_call_tag();
    let last = input.messages.last().map(|m| m.content.as_str()).unwrap_or("");
    for (prompt, suffix) in [("", ""), (last, "}\n")] {
        let _ = t.execute(&OllamaInputs {
            messages: &input.messages,
            tools: &input.tools,
            prompt,
            suffix,
            think: input.think.as_ref(),
            now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_460_800),
        });
    }
});
