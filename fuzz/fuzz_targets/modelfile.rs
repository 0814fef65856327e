//! Fuzzes the Modelfile parser (registry::Modelfile) with arbitrary bytes.
//!
//! Beyond "no panic": errors are one line and name a line inside the input, and a Modelfile that
//! parses is written back and parses to the same instructions (values containing `"""`, which no
//! quoting can always express, excepted).
#![no_main]

use libfuzzer_sys::fuzz_target;
use registry::modelfile::{Instruction, Modelfile};

fuzz_target!(|data: &[u8]| {
    let lines = 1 + data.iter().filter(|&&b| b == b'\n' || b == b'\r').count();
    match Modelfile::parse_bytes(data) {
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n') && !msg.contains('\r'), "multi-line error: {msg:?}");
            assert!(e.line <= lines, "error on line {} of {lines}", e.line);
        }
        Ok(mf) => {
            assert!(mf.from().next().is_some(), "parsed without FROM");
            let text = mf.to_string();
            let again = Modelfile::parse(&text)
                .unwrap_or_else(|e| panic!("written back, it does not parse: {e}\n{text}"));
            let values = |m: &Modelfile| -> Vec<Instruction> { m.commands.iter().map(|c| c.instruction.clone()).collect() };
            let expressible = mf.commands.iter().all(|c| !value(&c.instruction).contains("\"\"\""));
            if expressible {
                assert_eq!(values(&again), values(&mf), "round trip changed it:\n{text}");
            }
            let _ = mf.parameters().expect("parameters were checked while parsing");
        }
    }
});

fn value(i: &Instruction) -> &str {
    match i {
        Instruction::From(v)
        | Instruction::Template(v)
        | Instruction::System(v)
        | Instruction::Adapter(v)
        | Instruction::License(v)
        | Instruction::Requires(v)
        | Instruction::Draft(v)
        | Instruction::Renderer(v)
        | Instruction::Parser(v) => v,
        Instruction::Parameter { value, .. } => value,
        Instruction::Message { content, .. } => content,
    }
}
