//! Fuzzes the daemon's request decoding: a body from the network, deserialised into the Ollama
//! or OpenAI request types and converted to engine terms exactly as the handlers do before a
//! model is touched (daemon::api::decode_*, daemon::openai::decode_*,
//! daemon::responses::decode_*, daemon::anthropic::decode_*), then its options resolved
//! (daemon::options::Options), its keep_alive, format and template checked, and a sampler built
//! from the options and run on fixed logits.
//!
//! Layout: byte 0 picks the endpoint, the rest is the body. Every failure must be a client error
//! (400) with a one-line message; nothing may panic, whatever the numbers (NaN, 1e308, -1).
#![no_main]

use daemon::api::{self, ChatCall, GenerateCall};
use daemon::error::ApiResult;
use daemon::options::Options;
use daemon::wire::{parse_body, parse_keep_alive, EmbedRequest, EmbeddingsRequest};
use daemon::{anthropic, openai, responses, structured};
use engine::sample::Sampler;
use engine::template::OllamaTemplate;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let r = match pick % 8 {
        0 => api::decode_chat(body).and_then(chat),
        1 => api::decode_generate(body).and_then(generate),
        2 => openai::decode_chat_completion(body).and_then(chat),
        3 => openai::decode_completion(body).and_then(generate),
        4 => parse_body::<EmbedRequest>(body).and_then(|r| {
            api::input_texts(r.input.as_ref())?;
            common(r.options.as_ref(), r.keep_alive.as_ref(), None)
        }),
        5 => parse_body::<EmbeddingsRequest>(body)
            .and_then(|r| common(r.options.as_ref(), r.keep_alive.as_ref(), None)),
        6 => responses::decode_response_request(body).and_then(chat),
        _ => anthropic::decode_messages(body).and_then(chat),
    };
    if let Err(e) = r {
        assert_eq!(e.status.as_u16(), 400, "{}", e.message);
        assert!(!e.message.contains('\n'), "multi-line error: {:?}", e.message);
    }
});

fn chat(c: ChatCall) -> ApiResult<()> {
    for m in &c.messages {
        assert_eq!(m.role, m.role.to_lowercase());
    }
    let c = &c.common;
    common(c.options.as_ref(), c.keep_alive.as_ref(), c.format.as_ref())
}

fn generate(g: GenerateCall) -> ApiResult<()> {
    if let Some(t) = &g.template {
        // A request's template is parsed the way a Modelfile's is; a bad one is the client's error.
        let _ = OllamaTemplate::parse(t);
    }
    let g = &g.common;
    common(g.options.as_ref(), g.keep_alive.as_ref(), g.format.as_ref())
}

/// What every inference request goes through: keep_alive, format, options, a sampler.
fn common(
    options: Option<&Map<String, Value>>,
    keep_alive: Option<&Value>,
    format: Option<&Value>,
) -> ApiResult<()> {
    parse_keep_alive(keep_alive)?;
    structured::requested(format)?;
    let o = Options::resolve(None, options).map_err(daemon::error::ApiError::bad_request)?;
    // A sampler the options do not allow is refused with an error, never a panic.
    let Ok(mut s) = Sampler::new(&o.sampling, 16, o.num_ctx.unwrap_or(64) as usize) else {
        return Ok(());
    };
    let logits: Vec<f32> = (0..16).map(|i| ((i * 7) % 16) as f32 * 0.5 - 3.0).collect();
    for _ in 0..4 {
        let Ok(t) = s.sample(&logits) else { break };
        assert!(t < 16);
        if s.accept(t).is_err() {
            break;
        }
    }
    Ok(())
}
