//! JSON schema to GBNF, as llama.cpp's `json_schema_to_grammar` (`common/json-schema-to-grammar.cpp`)
//! does it, which is what Ollama uses for `format: <schema>`.
//!
//! Same rules, names and layout: primitive rules with bounded whitespace (`space`), objects with
//! the required properties first in schema order and then the optional ones in schema order,
//! `additionalProperties` (absent means none), arrays with `items`/`prefixItems` and
//! `minItems`/`maxItems`, `enum`, `const`, `anyOf`/`oneOf`, `allOf` (merged objects and
//! intersected enums), local `$ref` (`#/$defs/...`, `#/definitions/...`), integer `minimum`/
//! `maximum`, number `minimum`/`maximum` that are whole numbers, string `minLength`/`maxLength`,
//! `pattern`, and the formats `date`, `time`,
//! `date-time` and `uuid`.
//!
//! Where llama.cpp silently ignores a keyword it cannot enforce (a fractional `minimum` on a
//! number, `uniqueItems`, `not`, ...), this converter refuses the schema with an error naming the keyword:
//! output generated under a schema must validate against it. Differences that make the output
//! stricter, never looser: `pattern` strings only contain characters JSON needs no escape for
//! (an escaped quote or backslash is generated as such), unanchored patterns match anywhere as
//! JSON Schema says, `\d \w \s` and their negations work in patterns, `date` knows the calendar, `required` names without a
//! schema get a value of any type, and `minItems`/`maxItems` work without `items`. `oneOf` is
//! treated as `anyOf`, as llama.cpp does (its alternatives should not overlap). `format`s other
//! than those above are annotations, as JSON Schema specifies by default.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use super::GrammarError;

/// The grammar of `format: "json"`: a JSON object. Ollama's `grammarJSON` (`llm/server.go`)
/// lets whitespace run on without limit (`ws ::= ([ \t\n] ws)?`), and small models then fill
/// the token budget with blank lines, a long-standing complaint of Ollama users. Whitespace here
/// is bounded as in llama.cpp's `grammars/json.gbnf`: at most one space, or one newline and up
/// to 20 spaces or tabs of indentation, between two tokens of JSON. As in Ollama's grammar, the
/// output ends at the object's closing brace. Two more limits keep every output readable by
/// common JSON parsers (serde_json among them): integers of at most 16 digits and exponents of
/// at most 2 (every number fits an f64), and no `\u` escapes of surrogates.
pub const JSON_OBJECT_GRAMMAR: &str = r#"
root   ::= object
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" escape )* "\""
escape ::= ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} )
number ::= "-"? ( [0-9] | [1-9] [0-9]{0,15} ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]{1,2} )?
ws     ::= | " " | "\n" [ \t]{0,20}
"#;

const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

struct Builtin {
    content: &'static str,
    deps: &'static [&'static str],
}

fn primitive(name: &str) -> Option<Builtin> {
    let b = |content, deps| Some(Builtin { content, deps });
    match name {
        "boolean" => b(r#"("true" | "false") space"#, &[]),
        "decimal-part" => b("[0-9]{1,16}", &[]),
        "integral-part" => b("[0] | [1-9] [0-9]{0,15}", &[]),
        // At most two digits (llama.cpp allows 16): keeps every number within f64's range, which
        // is what most JSON parsers read numbers into.
        "exponent" => b("[0] | [1-9] [0-9]?", &[]),
        "number" => b(
            r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? exponent)? space"#,
            &["integral-part", "decimal-part", "exponent"],
        ),
        "integer" => b(r#"("-"? integral-part) space"#, &["integral-part"]),
        "value" => b(
            "object | array | string | number | boolean | null",
            &["object", "array", "string", "number", "boolean", "null"],
        ),
        "object" => b(
            r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
            &["string", "value"],
        ),
        "array" => b(r#""[" space ( value ("," space value)* )? "]" space"#, &["value"]),
        "uuid" => b(
            r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space"#,
            &[],
        ),
        // `\u` escapes of lone surrogates (D800-DFFF) are left out: many parsers reject them.
        "char" => b(
            r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))"#,
            &[],
        ),
        "string" => b(r#""\"" char* "\"" space"#, &["char"]),
        "null" => b(r#""null" space"#, &[]),
        _ => None,
    }
}

fn string_format(name: &str) -> Option<Builtin> {
    let b = |content, deps| Some(Builtin { content, deps });
    match name {
        // Calendar-exact, unlike llama.cpp's (which allows 02-31): days per month, and 02-29 in
        // leap years only (divisible by 4, centuries only when divisible by 400).
        "date" => b(
            concat!(
                r#"[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] )"#,
                r#" | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" )"#,
                r#" | "02" "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) )"#,
                r#" | ( [0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) "00" ) "-02-29""#,
            ),
            &[],
        ),
        "time" => b(
            r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
            &[],
        ),
        "date-time" => b(r#"date "T" time"#, &["date", "time"]),
        "date-string" => b(r#""\"" date "\"" space"#, &["date"]),
        "time-string" => b(r#""\"" time "\"" space"#, &["time"]),
        "date-time-string" => b(r#""\"" date-time "\"" space"#, &["date-time"]),
        _ => None,
    }
}

fn is_reserved(name: &str) -> bool {
    name == "root" || primitive(name).is_some() || string_format(name).is_some()
}

/// Keywords that constrain a value (JSON Schema's validation and applicator vocabularies).
const ASSERTIONS: &[&str] = &[
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "dependencies",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "additionalItems",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
];

/// Converts a JSON schema to GBNF text whose `root` rule matches the JSON texts (without
/// leading whitespace) that the schema accepts.
pub fn schema_to_gbnf(schema: &Value) -> Result<String, GrammarError> {
    let mut c = Converter::default();
    c.rules.insert("space".into(), SPACE_RULE.into());
    let mut schema = schema.clone();
    c.resolve_refs(&mut schema)?;
    c.visit(&schema, "")?;
    let mut out = String::new();
    for (name, rule) in &c.rules {
        out.push_str(name);
        out.push_str(" ::= ");
        out.push_str(rule);
        out.push('\n');
    }
    Ok(out)
}

/// Stands for `additionalProperties` among the property names (no JSON key contains a NUL).
const ADDITIONAL: &str = "\u{0}additional";

#[derive(Default)]
struct Converter {
    rules: BTreeMap<String, String>,
    refs: HashMap<String, Value>,
    refs_being_resolved: HashSet<String>,
}

fn err<T>(msg: impl Into<String>) -> Result<T, GrammarError> {
    Err(GrammarError::Schema(msg.into()))
}

/// A GBNF string literal for `s`.
pub(crate) fn format_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `build_repetition`: `item` between `min` and `max` times, with `sep` between items.
fn build_repetition(item: &str, min: u64, max: Option<u64>, sep: &str) -> String {
    if max == Some(0) {
        return String::new();
    }
    if min == 0 && max == Some(1) {
        return format!("{item}?");
    }
    if sep.is_empty() {
        return match (min, max) {
            (1, None) => format!("{item}+"),
            (0, None) => format!("{item}*"),
            (m, None) => format!("{item}{{{m},}}"),
            (m, Some(n)) => format!("{item}{{{m},{n}}}"),
        };
    }
    let rest = build_repetition(
        &format!("({sep} {item})"),
        min.saturating_sub(1),
        max.map(|m| m - 1),
        "",
    );
    let result = format!("{item} {rest}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

fn escape_rule_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_bad = false;
    for ch in name.chars() {
        if ch.is_ascii_alphanumeric() || ch == '-' {
            out.push(ch);
            in_bad = false;
        } else if !in_bad {
            out.push('-');
            in_bad = true;
        }
    }
    out
}

const BOUNDS_AND_TYPE: [&str; 5] = [
    "type",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
];

/// One side of a numeric schema's range, and the keyword that set it.
#[derive(Clone, Copy)]
struct Bound {
    value: f64,
    exclusive: bool,
    keyword: &'static str,
}

/// The tightest lower and upper bounds of a numeric schema (of equal ones, the exclusive).
fn numeric_bounds(s: &Map<String, Value>) -> Result<(Option<Bound>, Option<Bound>), GrammarError> {
    let mut lo: Option<Bound> = None;
    let mut hi: Option<Bound> = None;
    for (keyword, exclusive, lower) in [
        ("minimum", false, true),
        ("exclusiveMinimum", true, true),
        ("maximum", false, false),
        ("exclusiveMaximum", true, false),
    ] {
        let Some(v) = s.get(keyword) else { continue };
        let value = v
            .as_f64()
            .ok_or_else(|| GrammarError::Schema(format!("'{keyword}' must be a number")))?;
        let b = Bound {
            value,
            exclusive,
            keyword,
        };
        let side = if lower { &mut lo } else { &mut hi };
        *side = Some(match *side {
            Some(o) if o.value == value => Bound {
                exclusive: o.exclusive || exclusive,
                ..o
            },
            Some(o) if (o.value < value) == lower => b,
            Some(o) => o,
            None => b,
        });
    }
    Ok((lo, hi))
}

fn check_keywords(schema: &Map<String, Value>, allowed: &[&str], what: &str) -> Result<(), GrammarError> {
    for key in schema.keys() {
        if ASSERTIONS.contains(&key.as_str()) && !allowed.contains(&key.as_str()) {
            // Keywords whose value makes them no-ops are harmless.
            let noop = match (key.as_str(), &schema[key]) {
                ("uniqueItems", Value::Bool(false)) => true,
                ("additionalProperties", Value::Bool(true)) => true,
                ("minItems", v) | ("minLength", v) | ("minProperties", v) => v.as_u64() == Some(0),
                _ => false,
            };
            if !noop {
                return err(format!(
                    "keyword '{key}' is not supported {what} (ollamars cannot enforce it)"
                ));
            }
        }
    }
    Ok(())
}

/// The type a keyword constrains, for keywords that only apply to values of one type.
fn keyword_type(key: &str) -> Option<&'static str> {
    Some(match key {
        "maxLength" | "minLength" | "pattern" | "format" => "string",
        "multipleOf" | "maximum" | "exclusiveMaximum" | "minimum" | "exclusiveMinimum" => "number",
        "items" | "prefixItems" | "additionalItems" | "maxItems" | "minItems" | "uniqueItems"
        | "contains" | "maxContains" | "minContains" | "unevaluatedItems" => "array",
        "properties"
        | "additionalProperties"
        | "patternProperties"
        | "required"
        | "maxProperties"
        | "minProperties"
        | "dependentRequired"
        | "dependentSchemas"
        | "dependencies"
        | "propertyNames"
        | "unevaluatedProperties" => "object",
        _ => return None,
    })
}

fn as_count(v: &Value, key: &str) -> Result<u64, GrammarError> {
    match v.as_u64() {
        Some(n) => Ok(n),
        None => match v.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u32::MAX as f64 => Ok(f as u64),
            _ => err(format!("'{key}' must be a non-negative integer")),
        },
    }
}

impl Converter {
    fn add_rule(&mut self, name: &str, rule: &str) -> String {
        let esc = escape_rule_name(name);
        match self.rules.get(&esc) {
            None => {
                self.rules.insert(esc.clone(), rule.to_string());
                esc
            }
            Some(existing) if existing == rule => esc,
            Some(_) => {
                let mut i = 0;
                loop {
                    let key = format!("{esc}{i}");
                    match self.rules.get(&key) {
                        Some(existing) if existing != rule => i += 1,
                        _ => {
                            self.rules.insert(key.clone(), rule.to_string());
                            return key;
                        }
                    }
                }
            }
        }
    }

    fn add_primitive(&mut self, name: &str, rule: Builtin) -> String {
        let n = self.add_rule(name, rule.content);
        for dep in rule.deps {
            let dep_rule = primitive(dep).or_else(|| string_format(dep));
            if let Some(d) = dep_rule {
                if !self.rules.contains_key(*dep) {
                    self.add_primitive(dep, d);
                }
            }
        }
        n
    }

    /// Records every local `$ref` target; remote references are refused.
    fn resolve_refs(&mut self, schema: &mut Value) -> Result<(), GrammarError> {
        let root = schema.clone();
        let mut todo = vec![schema as &mut Value];
        while let Some(n) = todo.pop() {
            match n {
                Value::Array(a) => todo.extend(a.iter_mut()),
                Value::Object(o) => {
                    if let Some(r) = o.get("$ref") {
                        let Some(r) = r.as_str() else {
                            return err("'$ref' must be a string");
                        };
                        if !r.starts_with("#") {
                            return err(format!(
                                "$ref '{r}': only references inside the schema (#/...) are supported"
                            ));
                        }
                        if !self.refs.contains_key(r) {
                            let target = resolve_pointer(&root, &r[1..]).ok_or_else(|| {
                                GrammarError::Schema(format!("$ref '{r}' points to nothing"))
                            })?;
                            self.refs.insert(r.to_string(), target.clone());
                        }
                    }
                    todo.extend(o.values_mut());
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn resolve_ref(&mut self, r: &str) -> Result<String, GrammarError> {
        let fragment = r.split_once('#').map_or(r, |(_, f)| f);
        let name = format!("ref{}", escape_rule_name(fragment));
        if !self.rules.contains_key(&name) && !self.refs_being_resolved.contains(r) {
            self.refs_being_resolved.insert(r.to_string());
            let target = self
                .refs
                .get(r)
                .cloned()
                .ok_or_else(|| GrammarError::Schema(format!("$ref '{r}' points to nothing")))?;
            let got = self.visit(&target, &name)?;
            self.refs_being_resolved.remove(r);
            return Ok(got);
        }
        Ok(name)
    }

    fn union(&mut self, name: &str, alts: &[Value]) -> Result<String, GrammarError> {
        if alts.is_empty() {
            return err("'anyOf'/'oneOf' needs at least one schema");
        }
        let mut rules = Vec::with_capacity(alts.len());
        for (i, alt) in alts.iter().enumerate() {
            let sub = if name.is_empty() {
                format!("alternative-{i}")
            } else {
                format!("{name}-{i}")
            };
            rules.push(self.visit(alt, &sub)?);
        }
        Ok(rules.join(" | "))
    }

    fn visit(&mut self, schema: &Value, name: &str) -> Result<String, GrammarError> {
        let rule_name = if is_reserved(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let any = Map::new();
        let s = match schema {
            Value::Bool(true) => &any,
            Value::Bool(false) => return err("the schema 'false' allows no value"),
            Value::Object(o) => o,
            other => return err(format!("a schema must be an object or a boolean, not {other}")),
        };
        for key in ["not", "if", "then", "else"] {
            if s.contains_key(key) {
                return err(format!(
                    "keyword '{key}' is not supported (ollamars cannot enforce it)"
                ));
            }
        }
        let ty = s.get("type");
        let ty_str = ty.and_then(Value::as_str);
        let untyped_or = |t: &str| ty.is_none() || ty_str == Some(t);
        let format = s.get("format").and_then(Value::as_str).unwrap_or("");

        if let Some(r) = s.get("$ref") {
            check_keywords(s, &["$ref"], "next to '$ref'")?;
            let r = r.as_str().unwrap_or_default().to_string();
            let target = self.resolve_ref(&r)?;
            return Ok(self.add_rule(&rule_name, &target));
        }
        if s.contains_key("oneOf") || s.contains_key("anyOf") {
            let key = if s.contains_key("oneOf") { "oneOf" } else { "anyOf" };
            check_keywords(s, &[key, "type"], &format!("next to '{key}'"))?;
            let Some(alts) = s[key].as_array() else {
                return err(format!("'{key}' must be an array"));
            };
            let mut alts = alts.clone();
            // A `type` beside the alternatives applies to each of them.
            if let Some(t) = ty {
                for alt in alts.iter_mut() {
                    match alt {
                        Value::Object(o) => match o.get("type") {
                            None => {
                                o.insert("type".into(), t.clone());
                            }
                            Some(own) if own == t => {}
                            Some(_) => {
                                return err(format!(
                                    "a '{key}' alternative whose 'type' differs from the schema's"
                                ));
                            }
                        },
                        Value::Bool(true) => {
                            let mut o = Map::new();
                            o.insert("type".into(), t.clone());
                            *alt = Value::Object(o);
                        }
                        _ => {}
                    }
                }
            }
            let body = self.union(name, &alts)?;
            return Ok(self.add_rule(&rule_name, &body));
        }
        if let Some(Value::Array(types)) = ty {
            if types.is_empty() {
                return err("'type' must not be an empty array");
            }
            // Each alternative keeps the keywords that apply to its type: in JSON Schema a
            // keyword of another type (`maxLength` next to `"null"`) says nothing about it.
            let alts: Vec<Value> = types
                .iter()
                .map(|t| {
                    let mut copy = s.clone();
                    let own = t.as_str().unwrap_or("");
                    copy.retain(|k, _| {
                        keyword_type(k).is_none_or(|kt| kt == own || (kt == "number" && own == "integer"))
                    });
                    copy.insert("type".into(), t.clone());
                    Value::Object(copy)
                })
                .collect();
            let body = self.union(name, &alts)?;
            return Ok(self.add_rule(&rule_name, &body));
        }
        if let Some(c) = s.get("const") {
            check_keywords(s, &["const", "type"], "next to 'const'")?;
            let lit = format!("{} space", format_literal(&c.to_string()));
            return Ok(self.add_rule(&rule_name, &lit));
        }
        if let Some(e) = s.get("enum") {
            check_keywords(s, &["enum", "type"], "next to 'enum'")?;
            let Some(values) = e.as_array() else {
                return err("'enum' must be an array");
            };
            if values.is_empty() {
                return err("'enum' must not be empty");
            }
            let alts: Vec<String> = values.iter().map(|v| format_literal(&v.to_string())).collect();
            return Ok(self.add_rule(&rule_name, &format!("({}) space", alts.join(" | "))));
        }
        let additional = s.get("additionalProperties");
        if untyped_or("object")
            && (s.contains_key("properties")
                || s.contains_key("required")
                || additional.is_some_and(|a| a != &Value::Bool(true)))
        {
            check_keywords(
                s,
                &["type", "properties", "required", "additionalProperties"],
                "in an object schema",
            )?;
            let required = required_names(s)?;
            let mut props: Vec<(String, Value)> = match s.get("properties") {
                None => Vec::new(),
                Some(Value::Object(p)) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                Some(_) => return err("'properties' must be an object"),
            };
            // A required name without a schema: any value (llama.cpp would leave it out).
            for r in &required {
                if !props.iter().any(|(k, _)| k == r) {
                    props.push((r.clone(), Value::Bool(true)));
                }
            }
            let body = self.build_object_rule(&props, &required, name, additional)?;
            return Ok(self.add_rule(&rule_name, &body));
        }
        if (ty.is_none() || matches!(ty_str, Some("object" | "string"))) && s.contains_key("allOf") {
            check_keywords(s, &["type", "allOf"], "next to 'allOf'")?;
            return self.visit_all_of(s, name, &rule_name);
        }
        if untyped_or("array")
            && (s.contains_key("items")
                || s.contains_key("prefixItems")
                || (ty_str == Some("array") && (s.contains_key("minItems") || s.contains_key("maxItems"))))
        {
            return self.visit_array(s, name, &rule_name);
        }
        if untyped_or("string") && s.contains_key("pattern") {
            check_keywords(s, &["type", "pattern"], "next to 'pattern'")?;
            let Some(p) = s["pattern"].as_str() else {
                return err("'pattern' must be a string");
            };
            let body = self.visit_pattern(p, &rule_name)?;
            return Ok(self.add_rule(&rule_name, &body));
        }
        let is_uuid = format == "uuid"
            || (format.len() == 5
                && format.starts_with("uuid")
                && matches!(format.as_bytes()[4], b'1'..=b'5'));
        if untyped_or("string") && is_uuid {
            check_keywords(s, &["type"], "next to a 'uuid' format")?;
            let n = if rule_name == "root" { "root" } else { format };
            return Ok(self.add_primitive(n, primitive("uuid").expect("uuid rule")));
        }
        let format_rule = format!("{format}-string");
        if untyped_or("string") && string_format(&format_rule).is_some() {
            check_keywords(s, &["type"], &format!("next to the '{format}' format"))?;
            let prim = self.add_primitive(&format_rule, string_format(&format_rule).expect("format rule"));
            return Ok(self.add_rule(&rule_name, &prim));
        }
        if ty_str == Some("string") && (s.contains_key("minLength") || s.contains_key("maxLength")) {
            check_keywords(s, &["type", "minLength", "maxLength"], "in a string schema")?;
            let char_rule = self.add_primitive("char", primitive("char").expect("char rule"));
            let min = s
                .get("minLength")
                .map(|v| as_count(v, "minLength"))
                .transpose()?
                .unwrap_or(0);
            let max = s.get("maxLength").map(|v| as_count(v, "maxLength")).transpose()?;
            if max.is_some_and(|m| m < min) {
                return err("'maxLength' is below 'minLength'");
            }
            let body = format!(
                "\"\\\"\" {} \"\\\"\" space",
                build_repetition(&char_rule, min, max, "")
            );
            return Ok(self.add_rule(&rule_name, &body));
        }
        const BOUNDS: [&str; 4] = ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"];
        if ty_str == Some("integer") && BOUNDS.iter().any(|k| s.contains_key(*k)) {
            check_keywords(s, &BOUNDS_AND_TYPE, "in an integer schema")?;
            // The tightest integer bounds, as i64 (llama.cpp reads them as integers): exact for
            // integer literals (an f64 loses integers past 2^53), else rounded inwards.
            let (lo, hi) = numeric_bounds(s)?;
            let whole = |b: Bound, lower: bool| -> i128 {
                let inward = if lower { 1 } else { -1 };
                match s.get(b.keyword).and_then(Value::as_i64) {
                    Some(v) => i128::from(v) + if b.exclusive { inward } else { 0 },
                    None => {
                        let x = match (lower, b.exclusive) {
                            (true, true) => b.value.floor() + 1.0,
                            (true, false) => b.value.ceil(),
                            (false, true) => b.value.ceil() - 1.0,
                            (false, false) => b.value.floor(),
                        };
                        // Far past what the grammar can write either way (below).
                        x.clamp(-1e18, 1e18) as i128
                    }
                }
            };
            // The grammar writes integers of at most 16 digits (llama.cpp's `integral-part`),
            // so a bound past that bounds nothing on its side: zod writes ±(2^53 - 1) for every
            // `z.number().int()`, Go's and others' schemas the limits of int64.
            const MOST: i128 = 9_999_999_999_999_999;
            let min = lo.map(|b| whole(b, true)).filter(|&m| m > -MOST);
            let max = hi.map(|b| whole(b, false)).filter(|&m| m < MOST);
            if min.is_some_and(|m| m > MOST) || max.is_some_and(|m| m < -MOST) {
                return err("no integer of at most 16 digits lies within the schema's bounds");
            }
            // Within ±MOST now, so within i64.
            let (min, max) = (min.map(|m| m as i64), max.map(|m| m as i64));
            if let (Some(a), Some(b)) = (min, max) {
                if a > b {
                    return err("no integer lies between 'minimum' and 'maximum'");
                }
            }
            let mut out = String::from("(");
            build_min_max_int(min, max, &mut out, 16, true);
            out.push_str(") space");
            return Ok(self.add_rule(&rule_name, &out));
        }
        if ty_str == Some("number") && BOUNDS.iter().any(|k| s.contains_key(*k)) {
            return self.number_range(s, &rule_name);
        }
        if s.keys().all(|k| !ASSERTIONS.contains(&k.as_str())) || ty_str == Some("object") {
            // llama.cpp: an empty schema (and a bare object type) is any JSON object.
            check_keywords(s, &["type"], "in an object schema")?;
            let object = self.clone_primitive("object");
            return Ok(self.add_rule(&rule_name, &object));
        }
        let Some(t) = ty_str else {
            return err(format!("unrecognized schema: {}", Value::Object(s.clone())));
        };
        let Some(prim) = primitive(t)
            .filter(|_| matches!(t, "boolean" | "number" | "integer" | "string" | "array" | "null"))
        else {
            return err(format!("unknown type '{t}'"));
        };
        let what = format!("in a '{t}' schema");
        check_keywords(s, &["type"], &what)?;
        let n = if rule_name == "root" { "root" } else { t };
        Ok(self.add_primitive(n, prim))
    }

    /// A `number` with whole-number bounds (pydantic's `Field(ge=0, le=1)`, which llama.cpp
    /// ignores): plain decimals (no exponent) in the range, built from integer ranges of the
    /// integral part. A bound that is not a whole number is refused.
    fn number_range(&mut self, s: &Map<String, Value>, rule_name: &str) -> Result<String, GrammarError> {
        check_keywords(s, &BOUNDS_AND_TYPE, "in a number schema")?;
        let whole = |b: Option<Bound>| -> Result<Option<(i64, bool)>, GrammarError> {
            match b {
                Some(Bound {
                    value,
                    exclusive,
                    keyword,
                }) => {
                    if value.fract() != 0.0 || value.abs() >= 9.0e15 {
                        return err(format!(
                            "keyword '{keyword}' of a number is only supported as a whole number within ±9e15 (ollamars cannot enforce {value})"
                        ));
                    }
                    Ok(Some((value as i64, exclusive)))
                }
                None => Ok(None),
            }
        };
        let (lo, hi) = numeric_bounds(s)?;
        let (lo, hi) = (whole(lo)?, whole(hi)?);
        if let (Some((a, ea)), Some((b, eb))) = (lo, hi) {
            if a > b || (a == b && (ea || eb)) {
                return err("no number lies between the schema's lower and upper bounds");
            }
        }
        let fraction = self.clone_primitive("decimal-part");
        // Decimals m >= 0 with m >= a (m > a if exclusive) and m <= b (m < b), no exponent.
        let magnitude = |(a, ea): (u64, bool), hi: Option<(u64, bool)>| -> Vec<String> {
            let mut alts = Vec::new();
            // Any fraction on integral parts from a (a + 1 if exclusive) to b - 1.
            let free_hi = match hi {
                Some((0, _)) => None,
                Some((b, _)) => Some(Some(b - 1)),
                None => Some(None),
            };
            if let Some(free_hi) = free_hi {
                let free_lo = a + u64::from(ea);
                if free_hi.is_none_or(|h| free_lo <= h) {
                    let mut ints = String::new();
                    build_min_max_int(
                        Some(free_lo as i64),
                        free_hi.map(|h| h as i64),
                        &mut ints,
                        16,
                        true,
                    );
                    alts.push(format!("({ints}) (\".\" {fraction})?"));
                }
            }
            // Above an exclusive a: a with a fraction that is not all zeros.
            if ea && hi.is_none_or(|(b, _)| a < b) {
                alts.push(format!("\"{a}.\" [0-9]{{0,15}} [1-9]"));
            }
            // An inclusive b itself.
            if let Some((b, false)) = hi {
                if b > a || (b == a && !ea) {
                    alts.push(format!("\"{b}\""));
                }
            }
            alts
        };
        let mut alts = Vec::new();
        // Zero and above.
        if hi.is_none_or(|(b, eb)| b > 0 || (b == 0 && !eb)) {
            let from = match lo {
                Some((a, ea)) if a >= 0 => (a as u64, ea),
                _ => (0, false),
            };
            alts.extend(magnitude(from, hi.map(|(b, eb)| (b as u64, eb))));
        }
        // Below zero, by magnitude: above -max (above 0 at least: no "-0"), up to -min.
        if lo.is_none_or(|(a, _)| a < 0) {
            let from = match hi {
                Some((b, eb)) if b < 0 => (b.unsigned_abs(), eb),
                _ => (0, true),
            };
            let m = magnitude(from, lo.map(|(a, ea)| (a.unsigned_abs(), ea)));
            if !m.is_empty() {
                alts.push(format!("\"-\" ({})", m.join(" | ")));
            }
        }
        Ok(self.add_rule(rule_name, &format!("({}) space", alts.join(" | "))))
    }

    fn clone_primitive(&mut self, name: &str) -> String {
        self.add_primitive(name, primitive(name).expect("known primitive"))
    }

    fn visit_array(
        &mut self,
        s: &Map<String, Value>,
        name: &str,
        rule_name: &str,
    ) -> Result<String, GrammarError> {
        check_keywords(
            s,
            &["type", "items", "prefixItems", "minItems", "maxItems"],
            "in an array schema",
        )?;
        if s.contains_key("items") && s.contains_key("prefixItems") {
            return err("'prefixItems' together with 'items' is not supported");
        }
        let min = s
            .get("minItems")
            .map(|v| as_count(v, "minItems"))
            .transpose()?
            .unwrap_or(0);
        let max = s.get("maxItems").map(|v| as_count(v, "maxItems")).transpose()?;
        if max.is_some_and(|m| m < min) {
            return err("'maxItems' is below 'minItems'");
        }
        let items = s
            .get("items")
            .or_else(|| s.get("prefixItems"))
            .cloned()
            .unwrap_or(Value::Bool(true));
        let sub = |suffix: &str| {
            if name.is_empty() {
                suffix.to_string()
            } else {
                format!("{name}-{suffix}")
            }
        };
        if let Value::Array(tuple) = &items {
            let n = tuple.len() as u64;
            if min > n || max.is_some_and(|m| m < n) {
                return err(
                    "'minItems'/'maxItems' that differ from the number of tuple items are not supported",
                );
            }
            let mut rule = String::from("\"[\" space ");
            for (i, item) in tuple.iter().enumerate() {
                if i > 0 {
                    rule.push_str(" \",\" space ");
                }
                let r = self.visit(item, &sub(&format!("tuple-{i}")))?;
                rule.push_str(&r);
            }
            rule.push_str(" \"]\" space");
            return Ok(self.add_rule(rule_name, &rule));
        }
        let item_rule = if items == Value::Bool(true) {
            self.clone_primitive("value")
        } else {
            self.visit(&items, &sub("item"))?
        };
        let body = format!(
            "\"[\" space {} \"]\" space",
            build_repetition(&item_rule, min, max, "\",\" space")
        );
        Ok(self.add_rule(rule_name, &body))
    }

    fn visit_all_of(
        &mut self,
        s: &Map<String, Value>,
        name: &str,
        rule_name: &str,
    ) -> Result<String, GrammarError> {
        let Some(parts) = s["allOf"].as_array() else {
            return err("'allOf' must be an array");
        };
        let mut props: Vec<(String, Value)> = Vec::new();
        let mut required: Vec<String> = Vec::new();
        let mut enum_counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut n_enums = 0;
        for part in parts {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(r) => self
                    .refs
                    .get(r)
                    .cloned()
                    .ok_or_else(|| GrammarError::Schema(format!("$ref '{r}' points to nothing")))?,
                None => part.clone(),
            };
            let Value::Object(p) = &part else {
                return err("'allOf' items must be schemas (objects)");
            };
            if p.contains_key("anyOf") || p.contains_key("oneOf") {
                return err("'anyOf'/'oneOf' inside 'allOf' is not supported");
            }
            if let Some(Value::Object(pp)) = p.get("properties") {
                check_keywords(p, &["type", "properties", "required"], "in an 'allOf' part")?;
                // llama.cpp makes every property of an allOf part required.
                for (k, v) in pp {
                    props.push((k.clone(), v.clone()));
                    required.push(k.clone());
                }
            } else if let Some(Value::Array(values)) = p.get("enum") {
                check_keywords(p, &["type", "enum"], "in an 'allOf' part")?;
                n_enums += 1;
                let mut seen = HashSet::new();
                for v in values {
                    let lit = format_literal(&v.to_string());
                    if seen.insert(lit.clone()) {
                        *enum_counts.entry(lit).or_insert(0) += 1;
                    }
                }
            } else {
                return err(
                    "'allOf' parts other than objects with 'properties' or 'enum's are not supported",
                );
            }
        }
        if n_enums > 0 {
            if !props.is_empty() {
                return err("'allOf' mixing 'enum' and 'properties' parts is not supported");
            }
            let common: Vec<&String> = enum_counts
                .iter()
                .filter(|(_, &c)| c == n_enums)
                .map(|(k, _)| k)
                .collect();
            if common.is_empty() {
                return err("the 'enum's of 'allOf' have no value in common");
            }
            let body = format!(
                "({}) space",
                common.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" | ")
            );
            return Ok(self.add_rule(rule_name, &body));
        }
        let body = self.build_object_rule(&props, &required, name, None)?;
        Ok(self.add_rule(rule_name, &body))
    }

    /// `_build_object_rule`: required properties in schema order, then the optional ones, each
    /// optional one in a chain of "-rest" rules so any subset can appear, in order.
    fn build_object_rule(
        &mut self,
        props: &[(String, Value)],
        required: &[String],
        name: &str,
        additional: Option<&Value>,
    ) -> Result<String, GrammarError> {
        let prefix = if name.is_empty() {
            String::new()
        } else {
            format!("{name}-")
        };
        let mut req: Vec<String> = Vec::new();
        let mut opt: Vec<String> = Vec::new();
        let mut kv_rules: HashMap<String, String> = HashMap::new();
        let mut names: Vec<String> = Vec::new();
        for (prop, schema) in props {
            if kv_rules.contains_key(prop) {
                continue;
            }
            let value_rule = self.visit(schema, &format!("{prefix}{prop}"))?;
            let key_lit = format_literal(&Value::String(prop.clone()).to_string());
            let kv = self.add_rule(
                &format!("{prefix}{prop}-kv"),
                &format!("{key_lit} space \":\" space {value_rule}"),
            );
            kv_rules.insert(prop.clone(), kv);
            if required.contains(prop) {
                req.push(prop.clone());
            } else {
                opt.push(prop.clone());
            }
            names.push(prop.clone());
        }
        match additional {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) | Some(Value::Object(_)) => {
                let sub = format!("{prefix}additional");
                let value_rule = match additional {
                    Some(v @ Value::Object(_)) => self.visit(v, &format!("{sub}-value"))?,
                    _ => self.clone_primitive("value"),
                };
                let key_rule = if names.is_empty() {
                    self.clone_primitive("string")
                } else {
                    let body = self.not_strings(&names);
                    self.add_rule(&format!("{sub}-k"), &body)
                };
                let kv = self.add_rule(
                    &format!("{sub}-kv"),
                    &format!("{key_rule} \":\" space {value_rule}"),
                );
                kv_rules.insert(ADDITIONAL.into(), kv);
                opt.push(ADDITIONAL.into());
            }
            Some(_) => return err("'additionalProperties' must be a boolean or a schema"),
        }

        let mut rule = String::from("\"{\" space ");
        for (i, p) in req.iter().enumerate() {
            if i > 0 {
                rule.push_str(" \",\" space ");
            }
            rule.push_str(&kv_rules[p]);
        }
        if !opt.is_empty() {
            rule.push_str(" (");
            if !req.is_empty() {
                rule.push_str(" \",\" space ( ");
            }
            for i in 0..opt.len() {
                if i > 0 {
                    rule.push_str(" | ");
                }
                let chain = self.recursive_refs(&opt[i..], false, &kv_rules, &prefix);
                rule.push_str(&chain);
            }
            if !req.is_empty() {
                rule.push_str(" )");
            }
            rule.push_str(" )?");
        }
        rule.push_str(" \"}\" space");
        Ok(rule)
    }

    fn recursive_refs(
        &mut self,
        keys: &[String],
        first_is_optional: bool,
        kv_rules: &HashMap<String, String>,
        prefix: &str,
    ) -> String {
        let Some(k) = keys.first() else {
            return String::new();
        };
        let kv = &kv_rules[k];
        let comma_ref = format!("( \",\" space {kv} )");
        let mut res = if first_is_optional {
            format!("{comma_ref}{}", if k == ADDITIONAL { "*" } else { "?" })
        } else if k == ADDITIONAL {
            format!("{kv} {comma_ref}*")
        } else {
            kv.clone()
        };
        if keys.len() > 1 {
            let rest = self.recursive_refs(&keys[1..], true, kv_rules, prefix);
            let k = if k == ADDITIONAL { "*" } else { k.as_str() };
            let r = self.add_rule(&format!("{prefix}{k}-rest"), &rest);
            res.push(' ');
            res.push_str(&r);
        }
        res
    }

    /// `_not_strings`: a JSON string that is none of `strings`.
    fn not_strings(&mut self, strings: &[String]) -> String {
        #[derive(Default)]
        struct Node {
            children: BTreeMap<char, Node>,
            end: bool,
        }
        let mut trie = Node::default();
        for s in strings {
            let mut n = &mut trie;
            for ch in s.chars() {
                n = n.children.entry(ch).or_default();
            }
            n.end = true;
        }
        let char_rule = self.clone_primitive("char");
        fn class_char(c: char) -> String {
            match c {
                '"' => "\\\"".into(),
                '\\' => "\\\\".into(),
                ']' => "\\]".into(),
                '[' => "\\[".into(),
                '-' => "\\x2D".into(),
                '^' => "\\x5E".into(),
                c if (c as u32) < 0x20 || c as u32 == 0x7F => format!("\\x{:02X}", c as u32),
                c => c.to_string(),
            }
        }
        fn visit(n: &Node, out: &mut String, char_rule: &str) {
            let mut rejects = String::new();
            let mut first = true;
            for (&c, child) in &n.children {
                rejects.push_str(&class_char(c));
                if !first {
                    out.push_str(" | ");
                }
                first = false;
                out.push_str(&format!("[{}]", class_char(c)));
                if !child.children.is_empty() {
                    out.push_str(" (");
                    visit(child, out, char_rule);
                    out.push(')');
                } else if child.end {
                    out.push_str(&format!(" {char_rule}+"));
                }
            }
            if !n.children.is_empty() {
                if !first {
                    out.push_str(" | ");
                }
                out.push_str(&format!("[^\"\\\\\\x00-\\x1F\\x7F{rejects}] {char_rule}*"));
            }
        }
        let mut out = String::from("[\"] ( ");
        visit(&trie, &mut out, &char_rule);
        out.push_str(" )");
        if !trie.end {
            out.push('?');
        }
        out.push_str(" [\"] space");
        out
    }

    /// `_visit_pattern`: a string whose value matches a regular expression (a subset of ECMA
    /// syntax). See `regex_to_gbnf`.
    fn visit_pattern(&mut self, pattern: &str, _name: &str) -> Result<String, GrammarError> {
        let body = regex_to_gbnf(pattern)?;
        Ok(format!("\"\\\"\" ({body}) \"\\\"\" space"))
    }
}

fn required_names(s: &Map<String, Value>) -> Result<Vec<String>, GrammarError> {
    match s.get("required") {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| GrammarError::Schema("'required' must list strings".into()))
            })
            .collect(),
        Some(_) => err("'required' must be an array"),
    }
}

/// A JSON pointer (`/a/b/0`, with `~0`/`~1` and percent escapes) into `root`.
fn resolve_pointer<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let mut cur = root;
    for raw in pointer.strip_prefix('/')?.split('/') {
        let tok = percent_decode(raw).replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Object(o) => o.get(&tok)?,
            Value::Array(a) => a.get(tok.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `_build_min_max_int`: GBNF for the decimal integers in `[min, max]` (either side open).
fn build_min_max_int(
    min: Option<i64>,
    max: Option<i64>,
    out: &mut String,
    decimals_left: i32,
    top_level: bool,
) {
    fn digit_range(out: &mut String, from: u8, to: u8) {
        out.push('[');
        out.push(from as char);
        if from != to {
            out.push('-');
            out.push(to as char);
        }
        out.push(']');
    }
    fn more_digits(out: &mut String, min_digits: i32, max_digits: Option<i32>) {
        out.push_str("[0-9]");
        if max_digits == Some(min_digits) && min_digits == 1 {
            return;
        }
        out.push('{');
        out.push_str(&min_digits.to_string());
        if max_digits != Some(min_digits) {
            out.push(',');
            if let Some(m) = max_digits {
                out.push_str(&m.to_string());
            }
        }
        out.push('}');
    }
    fn uniform_range(out: &mut String, from: &[u8], to: &[u8]) {
        let mut i = 0;
        while i < from.len() && i < to.len() && from[i] == to[i] {
            i += 1;
        }
        if i > 0 {
            out.push('"');
            out.push_str(std::str::from_utf8(&from[..i]).unwrap_or(""));
            out.push('"');
        }
        if i < from.len() && i < to.len() {
            if i > 0 {
                out.push(' ');
            }
            let sub_len = from.len() - i - 1;
            if sub_len > 0 {
                let from_sub = &from[i + 1..];
                let to_sub = &to[i + 1..];
                let zeros = vec![b'0'; sub_len];
                let nines = vec![b'9'; sub_len];
                let mut to_reached = false;
                out.push('(');
                if from_sub == zeros.as_slice() {
                    digit_range(out, from[i], to[i] - 1);
                    out.push(' ');
                    more_digits(out, sub_len as i32, Some(sub_len as i32));
                } else {
                    out.push_str(&format!("[{}] (", from[i] as char));
                    uniform_range(out, from_sub, &nines);
                    out.push(')');
                    if from[i] < to[i] - 1 {
                        out.push_str(" | ");
                        if to_sub == nines.as_slice() {
                            digit_range(out, from[i] + 1, to[i]);
                            to_reached = true;
                        } else {
                            digit_range(out, from[i] + 1, to[i] - 1);
                        }
                        out.push(' ');
                        more_digits(out, sub_len as i32, Some(sub_len as i32));
                    }
                }
                if !to_reached {
                    out.push_str(" | ");
                    digit_range(out, to[i], to[i]);
                    out.push(' ');
                    uniform_range(out, &zeros, to_sub);
                }
                out.push(')');
            } else {
                out.push_str(&format!("[{}-{}]", from[i] as char, to[i] as char));
            }
        }
    }

    match (min, max) {
        (Some(mut lo), Some(hi)) => {
            if lo < 0 && hi < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(Some(-hi), Some(-lo), out, decimals_left, true);
                out.push(')');
                return;
            }
            if lo < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(Some(0), Some(-lo), out, decimals_left, true);
                out.push_str(") | ");
                lo = 0;
            }
            let mut min_s = lo.to_string();
            let max_s = hi.to_string();
            for digits in min_s.len()..max_s.len() {
                uniform_range(out, min_s.as_bytes(), "9".repeat(digits).as_bytes());
                min_s = format!("1{}", "0".repeat(digits));
                out.push_str(" | ");
            }
            uniform_range(out, min_s.as_bytes(), max_s.as_bytes());
        }
        (Some(lo), None) => {
            let less_decimals = (decimals_left - 1).max(1);
            if lo < 0 {
                out.push_str("\"-\" (");
                build_min_max_int(None, Some(-lo), out, decimals_left, false);
                out.push_str(") | [0] | [1-9] ");
                more_digits(out, 0, Some(decimals_left - 1));
            } else if lo == 0 {
                if top_level {
                    out.push_str("[0] | [1-9] ");
                    more_digits(out, 0, Some(less_decimals));
                } else {
                    more_digits(out, 1, Some(decimals_left));
                }
            } else if lo <= 9 {
                let c = b'0' + lo as u8;
                let range_start = if top_level { b'1' } else { b'0' };
                if c > range_start {
                    digit_range(out, range_start, c - 1);
                    out.push(' ');
                    more_digits(out, 1, Some(less_decimals));
                    out.push_str(" | ");
                }
                digit_range(out, c, b'9');
                out.push(' ');
                more_digits(out, 0, Some(less_decimals));
            } else {
                let min_s = lo.to_string();
                let len = min_s.len() as i32;
                let c = min_s.as_bytes()[0];
                if c > b'1' {
                    digit_range(out, if top_level { b'1' } else { b'0' }, c - 1);
                    out.push(' ');
                    more_digits(out, len, Some(less_decimals));
                    out.push_str(" | ");
                }
                digit_range(out, c, c);
                out.push_str(" (");
                let rest: i64 = min_s[1..].parse().unwrap_or(0);
                build_min_max_int(Some(rest), None, out, less_decimals, false);
                out.push(')');
                if c < b'9' {
                    out.push_str(" | ");
                    digit_range(out, c + 1, b'9');
                    out.push(' ');
                    more_digits(out, len - 1, Some(less_decimals));
                }
            }
        }
        (None, Some(hi)) => {
            let less_decimals = (decimals_left - 1).max(1);
            if hi >= 0 {
                if top_level {
                    out.push_str("\"-\" [1-9] ");
                    more_digits(out, 0, Some(less_decimals));
                    out.push_str(" | ");
                }
                build_min_max_int(Some(0), Some(hi), out, decimals_left, true);
            } else {
                // llama.cpp passes top_level = false here, which lets "-017" through: the digits
                // after the sign are a whole number and must not start with 0.
                out.push_str("\"-\" (");
                build_min_max_int(Some(-hi), None, out, decimals_left, true);
                out.push(')');
            }
        }
        (None, None) => out.push_str("\"-\"? ([0] | [1-9] [0-9]{0,15})"),
    }
}

// --- patterns --------------------------------------------------------------------------------

/// Translates a JSON Schema `pattern` (ECMA-262 syntax, a practical subset) to a GBNF expression
/// for the raw text between a JSON string's quotes.
///
/// Supported: literals and escapes (`\n \t \r \f \v \xHH \uHHHH`, escaped punctuation), `.`,
/// classes with ranges and negation, `\d \w \s \D \W \S`, groups (`(...)`, `(?:...)`), `|`,
/// `* + ? {m} {m,} {m,n}` (lazy forms too), `^` at the start and `$` at the end. A pattern
/// without them matches anywhere in the string, as JSON Schema says. Characters a JSON string
/// must escape are generated escaped (`\"`, `\\`) or, for control characters, not at all, so the
/// output always parses and its value matches the pattern.
pub(crate) fn regex_to_gbnf(pattern: &str) -> Result<String, GrammarError> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut p = RegexParser {
        chars: &chars,
        pos: 0,
        pattern,
    };
    let anchored_start = p.peek() == Some('^');
    if anchored_start {
        p.pos += 1;
    }
    let body = p.alternation()?;
    let anchored_end = if p.peek() == Some('$') {
        p.pos += 1;
        true
    } else {
        false
    };
    if p.pos != chars.len() {
        return p.fail("unexpected character (unbalanced parenthesis or unsupported syntax)");
    }
    let any = format!("{}*", class_to_gbnf(&(vec![(0, super::MAX_CODE_POINT)], false)));
    let mut out = String::new();
    if !anchored_start {
        out.push_str(&any);
        out.push(' ');
    }
    out.push('(');
    out.push_str(&body);
    out.push(')');
    if !anchored_end {
        out.push(' ');
        out.push_str(&any);
    }
    Ok(out)
}

struct RegexParser<'a> {
    chars: &'a [char],
    pos: usize,
    pattern: &'a str,
}

type Ranges = (Vec<(u32, u32)>, bool);

const DIGIT: &[(u32, u32)] = &[(0x30, 0x39)];
const WORD: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)];
const SPACE: &[(u32, u32)] = &[
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
];

impl RegexParser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn fail<T>(&self, msg: &str) -> Result<T, GrammarError> {
        err(format!(
            "pattern {:?} at character {}: {msg}",
            self.pattern,
            self.pos + 1
        ))
    }

    fn alternation(&mut self) -> Result<String, GrammarError> {
        let mut alts = vec![self.sequence()?];
        while self.peek() == Some('|') {
            self.pos += 1;
            alts.push(self.sequence()?);
        }
        Ok(alts.join(" | "))
    }

    fn sequence(&mut self) -> Result<String, GrammarError> {
        let mut items: Vec<String> = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            if c == '$' && self.pos + 1 == self.chars.len() {
                break;
            }
            let atom = self.atom()?;
            let atom = self.quantified(atom)?;
            items.push(atom);
        }
        if items.is_empty() {
            return Ok("\"\"".into());
        }
        Ok(items.join(" "))
    }

    fn quantified(&mut self, atom: String) -> Result<String, GrammarError> {
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                let start = self.pos;
                let close = self.chars[self.pos..].iter().position(|&c| c == '}');
                let Some(close) = close else {
                    return self.fail("unbalanced '{'");
                };
                let inner: String = self.chars[self.pos + 1..self.pos + close].iter().collect();
                let parse = |s: &str| s.trim().parse::<u64>().ok();
                let (min, max) = match inner.split_once(',') {
                    None => match parse(&inner) {
                        Some(n) => (n, Some(n)),
                        None => return self.fail("bad repetition count"),
                    },
                    Some((a, b)) => {
                        let Some(a) = parse(a) else {
                            return self.fail("bad repetition count");
                        };
                        let b = if b.trim().is_empty() {
                            None
                        } else {
                            match parse(b) {
                                Some(b) if b >= a => Some(b),
                                _ => return self.fail("bad repetition count"),
                            }
                        };
                        (a, b)
                    }
                };
                self.pos = start + close;
                (min, max)
            }
            _ => return Ok(atom),
        };
        self.pos += 1;
        if self.peek() == Some('?') {
            self.pos += 1; // lazy: same language
        }
        if matches!(self.peek(), Some('*' | '+' | '?' | '{')) {
            return self.fail("nested quantifier");
        }
        if min > 2000 || max.is_some_and(|m| m > 2000) {
            return self.fail("more than 2000 repetitions");
        }
        Ok(match (min, max) {
            (0, None) => format!("({atom})*"),
            (1, None) => format!("({atom})+"),
            (0, Some(1)) => format!("({atom})?"),
            (m, None) => format!("({atom}){{{m},}}"),
            (m, Some(n)) if m == n => format!("({atom}){{{m}}}"),
            (m, Some(n)) => format!("({atom}){{{m},{n}}}"),
        })
    }

    fn atom(&mut self) -> Result<String, GrammarError> {
        let Some(c) = self.peek() else {
            return self.fail("unexpected end");
        };
        self.pos += 1;
        match c {
            '.' => Ok(class_to_gbnf(&(
                vec![(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)],
                true,
            ))),
            '(' => {
                if self.peek() == Some('?') {
                    if self.chars.get(self.pos + 1) == Some(&':') {
                        self.pos += 2;
                    } else {
                        return self.fail("lookaround and named groups are not supported");
                    }
                }
                let inner = self.alternation()?;
                if self.peek() != Some(')') {
                    return self.fail("unbalanced '('");
                }
                self.pos += 1;
                Ok(format!("({inner})"))
            }
            '[' => {
                let class = self.class()?;
                Ok(class_to_gbnf(&class))
            }
            '\\' => match self.escape(false)? {
                Escaped::Char(c) => Ok(literal_to_gbnf(c)),
                Escaped::Class(r) => Ok(class_to_gbnf(&r)),
            },
            '^' | '$' => self.fail("anchors are only supported at the start and end of the pattern"),
            '*' | '+' | '?' | '{' => self.fail("quantifier without anything to repeat"),
            ')' => self.fail("unbalanced ')'"),
            c => Ok(literal_to_gbnf(c as u32)),
        }
    }

    fn class(&mut self) -> Result<Ranges, GrammarError> {
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let Some(c) = self.peek() else {
                return self.fail("unbalanced '['");
            };
            if c == ']' && !first {
                self.pos += 1;
                break;
            }
            first = false;
            self.pos += 1;
            let lo = if c == '\\' {
                match self.escape(true)? {
                    Escaped::Char(c) => c,
                    Escaped::Class((r, neg)) => {
                        if neg {
                            ranges.extend(complement(&r));
                        } else {
                            ranges.extend(r);
                        }
                        continue;
                    }
                }
            } else {
                c as u32
            };
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&n| n != ']') {
                self.pos += 1;
                let Some(h) = self.peek() else {
                    return self.fail("unbalanced '['");
                };
                self.pos += 1;
                let hi = if h == '\\' {
                    match self.escape(true)? {
                        Escaped::Char(c) => c,
                        Escaped::Class(_) => return self.fail("a class escape cannot end a range"),
                    }
                } else {
                    h as u32
                };
                if hi < lo {
                    return self.fail("range out of order");
                }
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok((ranges, negated))
    }

    fn escape(&mut self, in_class: bool) -> Result<Escaped, GrammarError> {
        let Some(c) = self.peek() else {
            return self.fail("pattern ends with a backslash");
        };
        self.pos += 1;
        let hex = |p: &mut Self, n: usize| -> Result<u32, GrammarError> {
            let s: String = p
                .chars
                .get(p.pos..p.pos + n)
                .map(|s| s.iter().collect())
                .unwrap_or_default();
            match u32::from_str_radix(&s, 16) {
                Ok(v) if s.len() == n => {
                    p.pos += n;
                    Ok(v)
                }
                _ => p.fail("bad hex escape"),
            }
        };
        Ok(match c {
            'd' => Escaped::Class((DIGIT.to_vec(), false)),
            'D' => Escaped::Class((DIGIT.to_vec(), true)),
            'w' => Escaped::Class((WORD.to_vec(), false)),
            'W' => Escaped::Class((WORD.to_vec(), true)),
            's' => Escaped::Class((SPACE.to_vec(), false)),
            'S' => Escaped::Class((SPACE.to_vec(), true)),
            'n' => Escaped::Char(0x0A),
            't' => Escaped::Char(0x09),
            'r' => Escaped::Char(0x0D),
            'f' => Escaped::Char(0x0C),
            'v' => Escaped::Char(0x0B),
            '0' => Escaped::Char(0),
            'b' if in_class => Escaped::Char(0x08),
            'x' => Escaped::Char(hex(self, 2)?),
            'u' => Escaped::Char(hex(self, 4)?),
            c if c.is_ascii_punctuation() || c == ' ' => Escaped::Char(c as u32),
            _ => return self.fail(&format!("escape \\{c} is not supported")),
        })
    }
}

enum Escaped {
    Char(u32),
    Class(Ranges),
}

fn complement(r: &[(u32, u32)]) -> Vec<(u32, u32)> {
    super::CharClass::new(r.to_vec(), true).ranges
}

/// JSON-safe code points: what may appear unescaped in a JSON string.
fn json_safe(c: u32) -> bool {
    c >= 0x20 && c != 0x22 && c != 0x5C && c != 0x7F
}

/// One regex character as the JSON text that stands for it (escaped if JSON needs it).
fn literal_to_gbnf(c: u32) -> String {
    match c {
        0x22 => r#""\\\"""#.into(),
        0x5C => r#""\\\\""#.into(),
        c if json_safe(c) => format!("[{}]", gbnf_class_char(c)),
        0x0A => r#""\\n""#.into(),
        0x09 => r#""\\t""#.into(),
        0x0D => r#""\\r""#.into(),
        0x08 => r#""\\b""#.into(),
        0x0C => r#""\\f""#.into(),
        c => format!("\"\\\\u{c:04x}\""),
    }
}

fn gbnf_class_char(c: u32) -> String {
    match char::from_u32(c) {
        Some(ch) if c > 0x20 && c < 0x7F && !matches!(ch, '\\' | ']' | '[' | '-' | '^' | '"') => {
            ch.to_string()
        }
        _ if c <= 0xFF => format!("\\x{c:02X}"),
        _ if c <= 0xFFFF => format!("\\u{c:04X}"),
        _ => format!("\\U{c:08X}"),
    }
}

/// A regex class as JSON text: its JSON-safe characters as one GBNF class, plus the escaped
/// forms of a quote or backslash in it; control characters are left out.
fn class_to_gbnf(r: &Ranges) -> String {
    let class = super::CharClass::new(r.0.clone(), r.1);
    let safe = super::CharClass::new(vec![(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)], true);
    let mut parts = Vec::new();
    let kept: Vec<(u32, u32)> = class
        .ranges
        .iter()
        .flat_map(|&(a, b)| {
            safe.ranges.iter().filter_map(move |&(c, d)| {
                let (lo, hi) = (a.max(c), b.min(d));
                (lo <= hi).then_some((lo, hi))
            })
        })
        .collect();
    if !kept.is_empty() {
        let mut s = String::from("[");
        for (lo, hi) in kept {
            s.push_str(&gbnf_class_char(lo));
            if hi > lo {
                s.push('-');
                s.push_str(&gbnf_class_char(hi));
            }
        }
        s.push(']');
        parts.push(s);
    }
    if class.contains(0x22) {
        parts.push(literal_to_gbnf(0x22));
    }
    if class.contains(0x5C) {
        parts.push(literal_to_gbnf(0x5C));
    }
    match parts.len() {
        0 => "[^\\x00-\\U0010FFFF]".into(), // matches nothing
        1 => parts.pop().unwrap_or_default(),
        _ => format!("({})", parts.join(" | ")),
    }
}
