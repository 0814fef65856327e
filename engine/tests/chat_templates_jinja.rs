//! GGUF chat templates (Jinja) of real model families, rendered by our minijinja environment and
//! compared byte for byte with Hugging Face's rendering (jinja2 + transformers), which
//! `tests/data/templates/reference/render_jinja.py` wrote into `jinja/expected/`.

mod support;

use engine::template::{
    render_prompt, ChatFormat, JinjaInputs, JinjaTemplate, ModelTemplates, PromptRequest, TemplateSource,
};
use serde_json::Value;
use support::{check_expected, data_dir, fixed_now, load_case};

#[test]
fn real_templates_match_hugging_face() {
    let dir = data_dir().join("jinja");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, spec) in manifest.as_object().unwrap() {
        let source = std::fs::read_to_string(dir.join(format!("{name}.jinja"))).unwrap();
        let template = match JinjaTemplate::new(&source) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        for case in spec["cases"].as_array().unwrap() {
            let case_name = case.as_str().unwrap();
            let c = load_case(case_name);
            let got = template.render(&JinjaInputs {
                messages: &c.messages,
                tools: &c.tools,
                add_generation_prompt: c.add_generation_prompt,
                bos_token: spec["bos"].as_str().unwrap(),
                eos_token: spec["eos"].as_str().unwrap(),
                think: c.think.as_ref(),
                now: fixed_now(),
            });
            checked += 1;
            match got {
                Ok(got) => {
                    let path = dir.join("expected").join(name).join(format!("{case_name}.txt"));
                    if let Some(diff) = check_expected(&path, &got) {
                        failures.push(diff);
                    }
                }
                Err(e) => failures.push(format!("{name}/{case_name}: {e}")),
            }
        }
    }
    assert!(checked >= 40, "only {checked} renderings checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} renderings differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn template_errors_are_reported_not_panicked() {
    // Gemma 3 insists on alternating roles and says so through raise_exception.
    let source = std::fs::read_to_string(data_dir().join("jinja/gemma3.jinja")).unwrap();
    let t = JinjaTemplate::new(&source).unwrap();
    let msgs = [
        engine::chat::Message::new("user", "a"),
        engine::chat::Message::new("user", "b"),
    ];
    let err = t
        .render(&JinjaInputs {
            messages: &msgs,
            tools: &[],
            add_generation_prompt: true,
            bos_token: "<bos>",
            eos_token: "<eos>",
            think: None,
            now: fixed_now(),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("Conversation roles must alternate"),
        "{err}"
    );
}

/// The chat template inside the real Qwen2.5-Coder 0.5B GGUF renders a conversation (with tools)
/// exactly as Hugging Face renders Qwen 2.5's template.
#[test]
fn qwen25_coder_gguf_template_matches_hugging_face() {
    let gguf = engine::gguf::Gguf::open(support::qwen_model()).unwrap();
    let md = gguf.metadata();
    let source = md
        .get_str("tokenizer.chat_template")
        .unwrap()
        .expect("the GGUF has a chat template");
    let committed = std::fs::read_to_string(data_dir().join("jinja/qwen2.5.jinja")).unwrap();
    assert_eq!(
        source.trim_end(),
        committed.trim_end(),
        "the GGUF carries Qwen 2.5's template"
    );
    let tokens = md.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let token = |key: &str| {
        let id = md.get_u32(key).unwrap().unwrap() as usize;
        tokens.get(id).unwrap().to_string()
    };
    let (bos, eos) = (
        token("tokenizer.ggml.bos_token_id"),
        token("tokenizer.ggml.eos_token_id"),
    );
    assert_eq!((bos.as_str(), eos.as_str()), ("<|endoftext|>", "<|im_end|>"));
    let t = JinjaTemplate::new(source).unwrap();
    for case in ["system-user-assistant-user", "tool-roundtrip"] {
        let c = load_case(case);
        let got = t
            .render(&JinjaInputs {
                messages: &c.messages,
                tools: &c.tools,
                add_generation_prompt: c.add_generation_prompt,
                bos_token: &bos,
                eos_token: &eos,
                think: c.think.as_ref(),
                now: fixed_now(),
            })
            .unwrap();
        let path = data_dir().join(format!("jinja/expected/qwen2.5/{case}.txt"));
        assert_eq!(check_expected(&path, &got), None);
    }

    // The same through the daemon's entry point: template chosen from the GGUF (no Modelfile
    // TEMPLATE, no request template), tokens read from its metadata.
    let model = ModelTemplates::from_gguf(md, None).unwrap();
    assert!(!model.add_bos);
    let format = ChatFormat::select(&model, None).unwrap();
    assert_eq!(format.source(), TemplateSource::Gguf);
    let caps = format.capabilities();
    assert!(caps.tools && !caps.thinking && !caps.insert);
    let c = load_case("tool-roundtrip");
    let req = PromptRequest {
        now: fixed_now(),
        ..PromptRequest::chat(&c.messages, &c.tools, None)
    };
    let got = render_prompt(&model, None, &req).unwrap();
    assert_eq!(
        check_expected(
            &data_dir().join("jinja/expected/qwen2.5/tool-roundtrip.txt"),
            &got
        ),
        None
    );
    // A request template still wins over the GGUF's.
    let got = render_prompt(&model, Some("{{ range .Messages }}{{ .Role }};{{ end }}"), &req).unwrap();
    assert_eq!(got, "user;assistant;tool;");
}
