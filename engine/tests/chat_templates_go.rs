//! Ollama Modelfile templates (Go text/template) of real model families, run by our Go template
//! engine with Ollama's rules and compared byte for byte with Go's own `text/template` running
//! Ollama's rules (`tests/data/templates/reference/render_go.go` wrote `go/expected/`; for
//! Ollama's built-in templates those files equal Ollama's own `template/testdata`).

mod support;

use engine::template::{OllamaInputs, OllamaTemplate};
use serde_json::Value;
use support::{check_expected, data_dir, fixed_now, load_case};

#[test]
fn real_templates_match_go() {
    let dir = data_dir().join("go");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, spec) in manifest.as_object().unwrap() {
        let source = std::fs::read_to_string(dir.join(format!("{name}.gotmpl"))).unwrap();
        let template = match OllamaTemplate::parse(&source) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        for case in spec["cases"].as_array().unwrap() {
            let case_name = case.as_str().unwrap();
            let c = load_case(case_name);
            checked += 1;
            let got = template.execute(&OllamaInputs {
                messages: &c.messages,
                tools: &c.tools,
                prompt: &c.prompt,
                suffix: &c.suffix,
                think: c.think.as_ref(),
                now: fixed_now(),
            });
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
    assert!(checked >= 80, "only {checked} renderings checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} renderings differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn capabilities_and_tags_of_library_templates() {
    let load = |name: &str| {
        OllamaTemplate::parse(&std::fs::read_to_string(data_dir().join(format!("go/{name}.gotmpl"))).unwrap())
            .unwrap()
    };
    let qwen3 = load("qwen3");
    assert!(qwen3.supports_tools());
    assert_eq!(qwen3.tool_call_tag(), "<tool_call>");
    assert_eq!(qwen3.thinking_tags(), Some(("<think>".into(), "</think>".into())));
    let r1 = load("deepseek-r1");
    assert_eq!(r1.thinking_tags(), Some(("<think>".into(), "</think>".into())));
    assert!(!r1.supports_tools());
    assert_eq!(load("llama3.1").tool_call_tag(), "{");
    assert_eq!(load("qwen2.5").tool_call_tag(), "<tool_call>");
    assert_eq!(load("mistral").tool_call_tag(), "[TOOL_CALLS] [");
    assert!(load("codellama-fim").supports_insert());
    assert!(!load("gemma3").supports_thinking());
}
