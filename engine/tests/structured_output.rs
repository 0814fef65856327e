//! Structured output end to end on the grammar side: JSON schemas compiled to grammars, random
//! walks through the token masks until the grammar ends, and every result checked by an
//! independent JSON-schema validator (the `jsonschema` crate).

use std::sync::Arc;

use engine::grammar::{Grammar, GrammarError, Matcher, TokenKind, TokenMask, TokenVocab};
use engine::TokenId;
use serde_json::{json, Value};

/// Every byte as a token, a few multi-byte tokens like a real vocabulary has (so walks cross
/// token boundaries in the middle of JSON syntax and of UTF-8 characters), and an end token.
fn vocab() -> Arc<TokenVocab> {
    let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
    for t in [
        "{\"",
        "\":",
        "\": ",
        "\", \"",
        "\",",
        ", ",
        "},",
        "}]",
        "[{",
        "true",
        "false",
        "null",
        "  ",
        "\n  ",
        "00",
        "12",
        "-0",
        "é",
        "日本",
        "\u{1F600}",
        "ab",
        "\\\"",
        "\\n",
        "\\u00",
        "2024-",
        "-02-",
        "T1",
        ":3",
        "Z\"",
    ] {
        toks.push((t.as_bytes().to_vec(), TokenKind::Text));
    }
    toks.push((vec![0xE6, 0x97], TokenKind::Text)); // the first two bytes of 日
    toks.push((b"<eos>".to_vec(), TokenKind::EndOfGeneration));
    Arc::new(TokenVocab::new(toks))
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Samples random allowed tokens until the end token is picked. `None` if the text grew past
/// `limit` bytes (an unlucky walk through a recursive schema).
fn random_walk(g: &Grammar, vocab: &Arc<TokenVocab>, rng: &mut Rng, limit: usize) -> Option<String> {
    let mut m = Matcher::new(g, Arc::clone(vocab)).unwrap();
    let mut mask = TokenMask::new(vocab.n_tokens());
    let eos = (vocab.n_tokens() - 1) as TokenId;
    let mut out = Vec::new();
    loop {
        m.fill_mask(&mut mask);
        let allowed: Vec<TokenId> = mask.iter().collect();
        assert!(
            !allowed.is_empty(),
            "dead end after {:?}",
            String::from_utf8_lossy(&out)
        );
        // End as soon as allowed half of the time; otherwise a uniform pick, or, one time in
        // four, a pick among tokens with JSON punctuation (so strings end in reasonable time).
        let others: Vec<TokenId> = allowed.iter().copied().filter(|&t| t != eos).collect();
        let closing: Vec<TokenId> = others
            .iter()
            .copied()
            .filter(|&t| vocab.token_bytes(t).iter().any(|b| b"\"]},".contains(b)))
            .collect();
        let t = if allowed.contains(&eos) && (rng.below(2) == 0 || others.is_empty()) {
            eos
        } else if !closing.is_empty() && rng.below(4) == 0 {
            closing[rng.below(closing.len())]
        } else {
            others[rng.below(others.len())]
        };
        m.accept(t).unwrap();
        if t == eos {
            return Some(String::from_utf8(out).expect("grammar output is valid UTF-8"));
        }
        out.extend_from_slice(vocab.token_bytes(t));
        if out.len() > limit {
            return None;
        }
    }
}

fn check_schema(schema: Value, walks: usize, seed: u64) {
    let g = Grammar::from_json_schema(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|e| panic!("{schema}: the validator rejects the schema: {e}"));
    let vocab = vocab();
    let mut rng = Rng(seed);
    let mut done = 0;
    let mut tries = 0;
    while done < walks {
        tries += 1;
        assert!(tries < walks * 10, "{schema}: walks keep running away");
        let Some(text) = random_walk(&g, &vocab, &mut rng, 6000) else {
            continue;
        };
        let value: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{schema}\noutput {text:?} is not JSON: {e}"));
        if let Err(e) = validator.validate(&value) {
            panic!("{schema}\noutput {text} does not validate: {e}");
        }
        done += 1;
    }
}

#[test]
fn objects_required_optional_nested() {
    check_schema(
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "score": {"type": "number"},
                "ok": {"type": "boolean"},
                "nick": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["zip"]
                }
            },
            "required": ["name", "age", "address"]
        }),
        60,
        1,
    );
}

#[test]
fn enums_consts_and_type_lists() {
    check_schema(
        json!({
            "type": "object",
            "properties": {
                "color": {"enum": ["red", "green", "blue"]},
                "mixed": {"enum": [1, "two", null, true, 2.5, {"k": [1]}]},
                "version": {"const": "v1"},
                "maybe": {"type": ["string", "null"]},
                "level": {"type": "string", "enum": ["low", "high"]},
                // Keywords of one type in a type list bind only that type.
                "short": {"type": ["string", "null"], "maxLength": 3},
                "either": {"type": ["integer", "string", "array"], "minimum": 0, "maximum": 5,
                           "maxLength": 2, "maxItems": 1, "items": {"type": "boolean"}}
            },
            "required": ["color", "mixed", "version", "maybe", "level", "short", "either"]
        }),
        60,
        2,
    );
}

#[test]
fn arrays_with_bounds_and_tuples() {
    check_schema(
        json!({
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
                "points": {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}]}},
                "exact": {"type": "array", "items": {"enum": [0, 1]}, "minItems": 2, "maxItems": 2},
                "any3": {"type": "array", "maxItems": 3},
                "unique_off": {"type": "array", "items": {"type": "null"}, "uniqueItems": false}
            },
            "required": ["tags", "points", "exact", "any3"]
        }),
        60,
        3,
    );
    // Draft 7 tuples: `items` as an array.
    check_schema(
        json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "string"}, {"type": "boolean"}, {"enum": ["x", 3]}]
        }),
        30,
        11,
    );
}

#[test]
fn any_of_one_of_and_refs() {
    check_schema(
        json!({
            "$defs": {
                "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]},
                "label": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer", "minimum": 0}]}
            },
            "definitions": {"flag": {"type": "boolean"}},
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/point"},
                "path": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 4},
                "label": {"$ref": "#/$defs/label"},
                "flag": {"$ref": "#/definitions/flag"},
                "shape": {"oneOf": [
                    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
                    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}}, "required": ["kind", "side"]}
                ]}
            },
            "required": ["at", "label", "shape"]
        }),
        60,
        4,
    );
}

#[test]
fn recursive_refs() {
    check_schema(
        json!({
            "$ref": "#/$defs/node",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "integer", "minimum": -5, "maximum": 5},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
                    },
                    "required": ["value"]
                }
            }
        }),
        40,
        5,
    );
}

#[test]
fn additional_properties() {
    check_schema(
        json!({
            "type": "object",
            "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["id"],
            "additionalProperties": {"type": "number"}
        }),
        50,
        6,
    );
    check_schema(
        json!({"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": true}),
        30,
        7,
    );
    check_schema(json!({"type": "object", "additionalProperties": false}), 5, 8);
    check_schema(
        json!({"type": "object", "additionalProperties": {"type": "array", "items": {"type": "integer"}}}),
        30,
        9,
    );
}

#[test]
fn strings_lengths_patterns_and_formats() {
    check_schema(
        json!({
            "type": "object",
            "properties": {
                "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                "loose": {"type": "string", "pattern": "[0-9]"},
                "quoted": {"type": "string", "pattern": "^\"[^\"]*\"\\\\?$"},
                "alt": {"type": "string", "pattern": "^(?:yes|no|maybe)(\\.[a-z]{1,3})?$"},
                "short": {"type": "string", "minLength": 2, "maxLength": 4},
                "long": {"type": "string", "minLength": 3},
                "day": {"type": "string", "format": "date"},
                "time": {"type": "string", "format": "time"},
                "when": {"type": "string", "format": "date-time"},
                "id": {"type": "string", "format": "uuid"},
                "email": {"type": "string", "format": "email-annotation-only"}
            },
            "required": ["code", "loose", "quoted", "alt", "short", "long", "day", "time", "when", "id"]
        }),
        60,
        10,
    );
}

#[test]
fn unanchored_patterns_match_anywhere() {
    let g = Grammar::from_json_schema(&json!({"type": "string", "pattern": "ab+c"})).unwrap();
    let vocab = vocab();
    let accepts = |text: &str| {
        let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        m.accept_bytes(text.as_bytes()).is_ok() && m.can_end()
    };
    assert!(accepts(r#""abbc""#));
    assert!(accepts(r#""zz abc \" zz""#));
    assert!(!accepts(r#""ac""#));
    assert!(!accepts(r#""a"c""#));
}

#[test]
fn integer_ranges() {
    for (i, (lo, hi)) in [
        (Some(0), Some(100)),
        (Some(-50), Some(50)),
        (Some(-1000), Some(-7)),
        (Some(10), None),
        (Some(-12), None),
        (None, Some(-5)),
        (None, Some(250)),
        (Some(7), Some(7)),
        (Some(99), Some(1234)),
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = json!({"type": "integer"});
        if let Some(lo) = lo {
            s["minimum"] = json!(lo);
        }
        if let Some(hi) = hi {
            s["maximum"] = json!(hi);
        }
        check_schema(s, 40, 20 + i as u64);
    }
    check_schema(
        json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}),
        40,
        40,
    );
    check_schema(json!({"type": "integer", "minimum": 0.5, "maximum": 3.5}), 20, 41);
    // Wide bounds: zod's `z.number().int()` (±(2^53 - 1), which the grammar's 16 digits can
    // pass), int64's limits (which they cannot), and integer literals an f64 cannot hold.
    for (i, s) in [
        json!({"type": "integer", "minimum": -9007199254740991_i64, "maximum": 9007199254740991_i64}),
        json!({"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}),
        json!({"type": "integer", "minimum": 9007199254740993_i64, "maximum": 9007199254740995_i64}),
        json!({"type": "integer", "exclusiveMinimum": -9999999999999999_i64, "maximum": -9999999999999997_i64}),
        json!({"type": "integer", "minimum": -1e300, "exclusiveMaximum": 1e300}),
    ]
    .into_iter()
    .enumerate()
    {
        check_schema(s, 40, 50 + i as u64);
    }
}

/// Numbers with whole-number bounds (pydantic's `Field(ge=0, le=1)`): every output validates,
/// the bounds themselves are reachable exactly where they are inclusive.
#[test]
fn number_ranges() {
    for (seed, (lo, hi)) in (70..).zip([
        (Some(("minimum", 0)), Some(("maximum", 1))),
        (Some(("minimum", 0)), None),
        (Some(("exclusiveMinimum", 0)), None),
        (None, Some(("exclusiveMaximum", 0))),
        (None, Some(("maximum", -3))),
        (Some(("minimum", -1)), Some(("maximum", 1))),
        (Some(("exclusiveMinimum", -10)), Some(("exclusiveMaximum", -2))),
        (Some(("exclusiveMinimum", 0)), Some(("exclusiveMaximum", 1))),
        (Some(("minimum", 5)), Some(("maximum", 5))),
        (Some(("minimum", 1)), Some(("maximum", 100))),
        (Some(("exclusiveMinimum", -1)), Some(("maximum", 0))),
    ]) {
        let mut schema = json!({"type": "number"});
        for (k, v) in lo.into_iter().chain(hi) {
            schema[k] = json!(v);
        }
        check_schema(schema, 30, seed);
    }
    let vocab = vocab();
    let accepts = |schema: Value, text: &str| {
        let g = Grammar::from_json_schema(&schema).unwrap();
        let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        m.accept_bytes(text.as_bytes()).is_ok() && m.can_end()
    };
    let unit = json!({"type": "number", "minimum": 0, "maximum": 1});
    for (text, ok) in [
        ("0", true),
        ("0.95", true),
        ("1", true),
        ("1.5", false),
        ("-0.5", false),
        ("2", false),
    ] {
        assert_eq!(accepts(unit.clone(), text), ok, "{text}");
    }
    let open = json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1});
    for (text, ok) in [("0", false), ("0.000", false), ("0.001", true), ("1", false)] {
        assert_eq!(accepts(open.clone(), text), ok, "{text}");
    }
    let negative = json!({"type": "number", "minimum": -2, "exclusiveMaximum": 0});
    for (text, ok) in [
        ("-2", true),
        ("-1.5", true),
        ("-2.5", false),
        ("-0", false),
        ("0", false),
    ] {
        assert_eq!(accepts(negative.clone(), text), ok, "{text}");
    }
}

#[test]
fn all_of_and_empty_schemas() {
    check_schema(
        json!({
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}},
                {"$ref": "#/$defs/b"}
            ],
            "$defs": {"b": {"properties": {"b": {"type": "integer"}}, "required": ["b"]}}
        }),
        30,
        50,
    );
    check_schema(
        json!({"allOf": [{"enum": [1, 2, 3]}, {"enum": [2, 3, 4]}]}),
        20,
        51,
    );
    check_schema(json!({}), 30, 52);
    check_schema(json!(true), 10, 53);
    check_schema(
        json!({"type": "object", "properties": {"anything": {}}, "required": ["anything", "also"]}),
        30,
        54,
    );
    for t in ["string", "number", "integer", "boolean", "null", "array"] {
        check_schema(json!({"type": t}), 20, 55);
    }
}

#[test]
fn ollama_json_format_is_any_object() {
    let g = Grammar::json();
    let vocab = vocab();
    let mut rng = Rng(60);
    let mut n = 0;
    while n < 40 {
        if let Some(text) = random_walk(&g, &vocab, &mut rng, 6000) {
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(v.is_object());
            n += 1;
        }
    }
}

#[test]
fn property_order_is_llama_cpp_order() {
    // Required properties first in schema order, then optional ones in schema order.
    let g = Grammar::from_json_schema(&json!({
        "type": "object",
        "properties": {"z": {"const": 1}, "a": {"const": 2}, "m": {"const": 3}},
        "required": ["m", "a"]
    }))
    .unwrap();
    let vocab = vocab();
    let accepts = |text: &str| {
        let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        m.accept_bytes(text.as_bytes()).is_ok() && m.can_end()
    };
    assert!(accepts(r#"{"a": 2, "m": 3, "z": 1}"#));
    assert!(accepts(r#"{"a": 2, "m": 3}"#));
    assert!(!accepts(r#"{"m": 3, "a": 2}"#));
    assert!(!accepts(r#"{"z": 1, "a": 2, "m": 3}"#));
    assert!(!accepts(r#"{"a": 2}"#));
}

#[test]
fn unenforceable_schemas_are_errors() {
    for (schema, what) in [
        (json!({"type": "number", "minimum": 0.5}), "minimum"),
        (
            json!({"type": "number", "minimum": 1, "exclusiveMaximum": 1}),
            "no number",
        ),
        (json!({"type": "number", "multipleOf": 2}), "multipleOf"),
        (json!({"not": {"type": "string"}}), "not"),
        (json!({"if": {}, "then": {}}), "if"),
        (
            json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true}),
            "uniqueItems",
        ),
        (
            json!({"type": "array", "items": {}, "contains": {"const": 1}}),
            "contains",
        ),
        (json!({"type": "object", "minProperties": 1}), "minProperties"),
        (
            json!({"type": "object", "properties": {}, "patternProperties": {"^x": {}}}),
            "patternProperties",
        ),
        (json!({"$ref": "https://example.com/s.json"}), "$ref"),
        (json!({"$ref": "#/$defs/missing"}), "points to nothing"),
        (json!({"type": "string", "pattern": "^(?=a)b$"}), "lookaround"),
        (json!({"type": "string", "pattern": "^\\p{L}$"}), "\\p"),
        (
            json!({"type": "string", "pattern": "^a$", "minLength": 3}),
            "minLength",
        ),
        (
            json!({"type": "string", "format": "date", "maxLength": 3}),
            "maxLength",
        ),
        (
            json!({"type": "integer", "minimum": 5, "maximum": 1}),
            "no integer",
        ),
        (json!({"type": "integer", "minimum": 1e17}), "at most 16 digits"),
        (
            json!({"type": "integer", "exclusiveMaximum": -9999999999999999_i64}),
            "at most 16 digits",
        ),
        (
            json!({"type": "array", "items": [{"type": "string"}], "minItems": 2}),
            "tuple",
        ),
        (json!({"enum": []}), "enum"),
        (json!({"type": "wat"}), "wat"),
        (json!(false), "false"),
        (
            json!({"anyOf": [{"type": "string"}], "minLength": 1}),
            "minLength",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "number", "exclusiveMaximum": 3.5}}}),
            "exclusiveMaximum",
        ),
    ] {
        match Grammar::from_json_schema(&schema) {
            Err(GrammarError::Schema(msg)) => assert!(msg.contains(what), "{schema}: {msg}"),
            Err(other) => panic!("{schema}: unexpected error kind {other}"),
            Ok(_) => panic!("{schema}: should be refused"),
        }
    }
}
