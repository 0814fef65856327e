use super::*;

fn parse(s: &str) -> Modelfile {
    Modelfile::parse(s).unwrap_or_else(|e| panic!("{e}\n---\n{s}"))
}

fn instructions(s: &str) -> Vec<Instruction> {
    parse(s).commands.into_iter().map(|c| c.instruction).collect()
}

fn error(s: &str) -> ParseError {
    match Modelfile::parse(s) {
        Ok(m) => panic!("parsed: {m:?}"),
        Err(e) => e,
    }
}

fn sys(s: &str) -> Instruction {
    Instruction::System(s.into())
}

#[test]
fn every_instruction() {
    let mf = parse(
        "# a comment\n\
         FROM llama3.2\n\
         parameter temperature 0.7\n\
         PARAMETER stop <|eot_id|>\n\
         PARAMETER stop \"<|end|>\"\n\
         Template \"\"\"{{ .System }}\n{{ .Prompt }}\"\"\"\n\
         SYSTEM You are a pirate.\n\
         ADAPTER ./lora.gguf\n\
         LICENSE MIT\n\
         LICENSE \"\"\"Apache\n2.0\"\"\"\n\
         MESSAGE user Hello there\n\
         MESSAGE assistant \"Ahoy!\"\n\
         REQUIRES v0.14.0\n\
         DRAFT ./small.gguf\n\
         RENDERER qwen3\n\
         PARSER qwen3\n",
    );
    assert!(mf.warnings.is_empty());
    let lines: Vec<usize> = mf.commands.iter().map(|c| c.line).collect();
    assert_eq!(lines, [2, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18]);
    use Instruction::*;
    assert_eq!(
        mf.commands
            .iter()
            .map(|c| c.instruction.clone())
            .collect::<Vec<_>>(),
        vec![
            From("llama3.2".into()),
            Parameter {
                name: "temperature".into(),
                value: "0.7".into()
            },
            Parameter {
                name: "stop".into(),
                value: "<|eot_id|>".into()
            },
            Parameter {
                name: "stop".into(),
                value: "<|end|>".into()
            },
            Template("{{ .System }}\n{{ .Prompt }}".into()),
            sys("You are a pirate."),
            Adapter("./lora.gguf".into()),
            License("MIT".into()),
            License("Apache\n2.0".into()),
            Message {
                role: Role::User,
                content: "Hello there".into()
            },
            Message {
                role: Role::Assistant,
                content: "Ahoy!".into()
            },
            Requires("0.14.0".into()),
            Draft("./small.gguf".into()),
            Renderer("qwen3".into()),
            Parser("qwen3".into()),
        ]
    );
    let p = mf.parameters().unwrap();
    assert_eq!(
        p.get("stop"),
        Some(&ParamValue::List(vec!["<|eot_id|>".into(), "<|end|>".into()]))
    );
    assert_eq!(p.get("temperature"), Some(&ParamValue::Float(0.7)));
}

#[test]
fn values_quotes_whitespace_and_newlines() {
    assert_eq!(
        instructions("FROM x\nSYSTEM   spaced   out  \t\n")[1],
        sys("spaced   out")
    );
    assert_eq!(instructions("FROM x\nSYSTEM \" padded \"")[1], sys(" padded "));
    assert_eq!(instructions("FROM x\nSYSTEM \"\"")[1], sys(""));
    assert_eq!(instructions("FROM x\nSYSTEM \"\"\"\"\"\"")[1], sys(""));
    assert_eq!(
        instructions("FROM x\nSYSTEM \"\"\"say \"hi\"\"\"\"")[1],
        sys("say \"hi\"")
    );
    assert_eq!(instructions("FROM x\nSYSTEM say \"hi\"")[1], sys("say \"hi\""));
    // A "..." value may span lines too.
    assert_eq!(
        instructions("FROM x\nSYSTEM \"one\ntwo\"\nLICENSE y")[1],
        sys("one\ntwo")
    );
    // Comments only where an instruction could start.
    assert_eq!(
        instructions("FROM x # not a comment")[0],
        Instruction::From("x # not a comment".into())
    );
    assert_eq!(instructions("  # indented comment\nFROM x").len(), 1);
    // CRLF, lone CR, BOM, tabs, no trailing newline.
    let mf = parse("\u{feff}FROM x\r\nSYSTEM a\rLICENSE\tb");
    assert_eq!(mf.commands[1].instruction, sys("a"));
    assert_eq!(mf.commands[2].line, 3);
    assert_eq!(mf.commands[2].instruction, Instruction::License("b".into()));
    // Control characters are dropped, other Unicode is kept.
    assert_eq!(
        instructions("FROM x\nSYSTEM a\u{1}b\u{200d}c é")[1],
        sys("ab\u{200d}c é")
    );
    assert_eq!(
        instructions("FROM x\nSYSTEM \"\"\"\nhi\n\"\"\"")[1],
        sys("\nhi\n")
    );
}

#[test]
fn utf16_and_bad_encodings() {
    let text = "FROM x\nSYSTEM hé";
    let mut le = vec![0xFF, 0xFE];
    le.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
    assert_eq!(
        Modelfile::parse_bytes(&le).unwrap().commands[1].instruction,
        sys("hé")
    );
    let mut be = vec![0xFE, 0xFF];
    be.extend(text.encode_utf16().flat_map(|u| u.to_be_bytes()));
    assert_eq!(Modelfile::parse_bytes(&be).unwrap().commands.len(), 2);
    let e = Modelfile::parse_bytes(b"FROM x\nSYSTEM \xff\n").unwrap_err();
    assert_eq!(e.line, 2);
}

#[test]
fn errors_name_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("FROM x\nFORM y", 2, "unknown instruction \"FORM\""),
        ("FROM x\n\n  BOGUS y", 3, "unknown instruction \"BOGUS\""),
        ("FROM x\n1FROM y", 2, "unknown instruction \"1FROM\""),
        ("FROM x\nFROM-x y", 2, "unknown instruction \"FROM-x\""),
        ("FROM x\nSYSTEM", 2, "SYSTEM needs an argument"),
        ("FROM\n", 1, "FROM needs an argument"),
        ("FROM x\nPARAMETER", 2, "PARAMETER needs a name and a value"),
        (
            "FROM x\nPARAMETER temperature",
            2,
            "PARAMETER temperature needs a value",
        ),
        ("FROM x\nPARAMETER top-k 4", 2, "invalid parameter name \"top-k\""),
        ("FROM x\nPARAMETER topk 4", 2, "unknown parameter 'topk'"),
        (
            "FROM x\nPARAMETER temperature hot",
            2,
            "invalid value \"hot\" for parameter 'temperature': expected a number",
        ),
        ("FROM x\nPARAMETER num_ctx 4k", 2, "expected an integer"),
        ("FROM x\nPARAMETER use_mmap maybe", 2, "expected true or false"),
        ("FROM x\nMESSAGE tool hi", 2, "message role must be one of"),
        ("FROM x\nMESSAGE User hi", 2, "message role must be one of"),
        ("FROM x\nMESSAGE user", 2, "message role must be one of"),
        ("FROM x\nSYSTEM \"\"\"never\nends", 2, "unterminated \"\"\" quote"),
        ("FROM x\nSYSTEM \"never", 2, "unterminated \" quote"),
        ("FROM x\nSYSTEM \"hi\" there", 2, "unterminated \" quote"),
        ("FROM x\nREQUIRES soon", 2, "semver"),
        ("FROM x\nREQUIRES 1.02.3", 2, "semver"),
        ("SYSTEM hi", 0, "no FROM line"),
        ("", 0, "no FROM line"),
        ("# only a comment", 0, "no FROM line"),
    ];
    for (text, line, msg) in cases {
        let e = error(text);
        assert_eq!(e.line, *line, "{text:?}: {e}");
        assert!(e.msg.contains(msg), "{text:?}: {e}");
    }
    assert_eq!(error("FROM x\nFORM y").to_string().get(..9), Some("(line 2):"));
}

#[test]
fn deprecated_parameters_warn() {
    let mf = parse("FROM x\nPARAMETER mirostat 2\nPARAMETER tfs_z 1\nPARAMETER top_k 4");
    assert_eq!(mf.commands.len(), 2);
    assert_eq!(mf.warnings.len(), 2);
    assert_eq!(mf.warnings[0].line, 2);
    assert!(mf.warnings[0].msg.contains("mirostat is deprecated"));
}

#[test]
fn semver_like_go() {
    for ok in [
        "0.14.0",
        "v1",
        "v1.2",
        "1.2.3-rc.1",
        "1.2.3+build.5",
        "1.2.3-rc.1+b",
    ] {
        assert!(is_semver(ok), "{ok}");
    }
    for bad in [
        "", "v", "1.2.3.4", "01.2.3", "1.2-rc1", "1.2.3-", "1.2.3-01", "x1.0.0", "1..2",
    ] {
        assert!(!is_semver(bad), "{bad}");
    }
}

#[test]
fn writes_back_what_it_reads() {
    let values = [
        "plain",
        " leading space",
        "trailing space ",
        "multi\nline",
        "multi\nline with \"quotes\"",
        "\"starts with a quote",
        "ends with a quote\"",
        "\"fully quoted\"",
        "",
        "tab\tinside",
        "{{ if .System }}<|start|>system\n{{ .System }}<|end|>{{ end }}",
        "crlf\r\nline",
    ];
    for v in values {
        let mf = Modelfile {
            commands: vec![
                Command::new(Instruction::From("base".into())),
                Command::new(Instruction::System(v.into())),
                Command::new(Instruction::Template(v.into())),
                Command::new(Instruction::Message {
                    role: Role::User,
                    content: v.into(),
                }),
                Command::new(Instruction::Parameter {
                    name: "stop".into(),
                    value: v.into(),
                }),
            ],
            warnings: vec![],
        };
        let text = mf.to_string();
        let back = Modelfile::parse(&text).unwrap_or_else(|e| panic!("{v:?}: {e}\n{text}"));
        let got: Vec<_> = back.commands.into_iter().map(|c| c.instruction).collect();
        let want: Vec<_> = mf.commands.into_iter().map(|c| c.instruction).collect();
        assert_eq!(got, want, "{v:?}\n{text}");
    }
}
