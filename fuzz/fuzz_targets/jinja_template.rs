//! Fuzzes the Jinja chat-template renderer (engine::template::JinjaTemplate) with arbitrary
//! template text and messages (layout: `chat_input.rs`).
//!
//! Templates come from downloaded GGUF files, so compiling and rendering must never panic and
//! must stay bounded in time (the renderer's fuel) and memory (its output cap; libFuzzer's
//! -rss_limit_mb and -timeout catch the rest).
#![no_main]

use std::time::{Duration, SystemTime};

use engine::template::{JinjaInputs, JinjaTemplate};
use libfuzzer_sys::fuzz_target;

#[path = "chat_input.rs"]
mod chat_input;

fuzz_target!(|data: &[u8]| {
    let input = chat_input::decode(data);
    let Ok(t) = JinjaTemplate::new(&input.template) else {
        return;
    };
    let _ = t.supports_system_role();
    let _ = t.render(&JinjaInputs {
        messages: &input.messages,
        tools: &input.tools,
        add_generation_prompt: input.add_generation_prompt,
        bos_token: "<s>",
        eos_token: "</s>",
        think: input.think.as_ref(),
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_460_800),
    });
});
