//! BPE pre-tokenizers: splitting text into words before merges, chosen by `tokenizer.ggml.pre`.
//!
//! A pre-tokenizer is a list of steps applied in order; each step splits every piece produced by
//! the previous one (text between matches becomes a piece too), as llama.cpp's
//! `unicode_regex_split` does. The two patterns almost every model uses (GPT-2's and Llama 3's,
//! which Qwen2 and Qwen3.5 vary) have hand-written single-pass splitters, as in llama.cpp; the
//! rest run through `fancy-regex`, because they need look-ahead (`\s+(?!\S)`), which the `regex`
//! crate does not have.
//!
//! Character classes follow llama.cpp rather than a regex engine's own Unicode tables: before a
//! pattern with `\p{..}` runs, every non-ASCII code point is replaced by a stand-in for its
//! category (a private-use character) and every `\p{X}` by a class of that stand-in plus the
//! ASCII members llama.cpp gives it, so `\p{L}`, `\p{N}`, `\p{P}`, `\p{M}`, `\p{S}` and `\s` mean
//! exactly what they mean in llama.cpp (Unicode 15.1 categories, and its quirks such as `~` not
//! being in `\p{S}`).

use fancy_regex::Regex;

use super::unicode::{flags, to_lower, CpFlags};
use crate::{Error, Result};

/// How a BPE vocabulary pre-tokenizes, and the options llama.cpp ties to the pre-tokenizer name.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    /// The canonical name of the kind (`llama3`, `qwen2`, `gpt-2`, `default`, ...).
    pub kind: &'static str,
    steps: Vec<Step>,
    /// A word that is itself a token is emitted without merging (llama3, tekken, ...).
    pub ignore_merges: bool,
    /// Detokenization removes spaces before punctuation (HF `clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
    /// llama.cpp adds BOS for this kind regardless of the file (llama3, tekken, chameleon).
    pub force_add_bos: bool,
    /// The kind has no BOS token (chatglm4).
    pub no_bos: bool,
}

#[derive(Debug)]
enum Step {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
    Gpt2,
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// with `max_digits` for `{1,3}` (Qwen2 has 1), and Qwen3.5's variant where letters are
    /// `[\p{L}\p{M}]` (`marks_are_letters`).
    Llama3 {
        max_digits: usize,
        marks_are_letters: bool,
    },
    /// Any other pattern, run by fancy-regex.
    Regex { re: Regex, collapsed: bool },
}

// The patterns, as in the models' tokenizer.json (with `(?i:..)` spelled out as llama.cpp does).
#[cfg(test)]
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
// DeepSeek LLM's cased-letter class, with code points escaped: some (U+1F7D, U+1FBE, U+2126,
// U+212A, ...) are compatibility characters that any Unicode normalization of a copy would
// silently replace.
const DEEPSEEK_LLM_LETTERS: &str = concat!(
    r"\s?[",
    r"A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}",
    r"\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}",
    r"\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}",
    r"\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}",
    r"\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}",
    r"\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}",
    r"\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}",
    r"\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}",
    r"\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}",
    r"\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}",
    r"\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}",
    r"\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}",
    r"\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}",
    r"\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}",
    r"\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}",
    r"\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}",
    r"\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}",
    r"\u{1E900}-\u{1E943}",
    "]+"
);
const DEEPSEEK_LLM_PUNCT: &str = r"\s?[!-/:-~！-／：-～‘-‟　-。]+";
const CJK_HANGUL: &str = r"[一-龥ࠀ-一가-퟿]+";
const DEEPSEEK3_MAIN: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const UFAKZEKA: &str = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const EXAONE_MOE: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+";
const MINICPM5: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LAGUNA_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Pre-tokenizer names llama.cpp knows but ollamars does not implement (they need custom code
/// llama.cpp has for them alone, or are not byte-level BPE). Loading one is an error rather than
/// a silent fallback that would give wrong tokens.
const UNSUPPORTED: &[&str] = &[
    "kimi-k2",
    "afmoe",
    "superbpe",
    "tiny_aya",
    "cohere2moe",
    "gemma4",
    "granite-embed-multi-311m",
    "sarvam-moe",
    "whitespace",
    "youtu",
    "spark2_5",
    "jais-2",
    "granite-embed-multi-97m",
    "chameleon",
];

struct Options {
    ignore_merges: bool,
    clean_spaces: bool,
    force_add_bos: bool,
}

const fn opts(ignore_merges: bool, clean_spaces: bool, force_add_bos: bool) -> Options {
    Options {
        ignore_merges,
        clean_spaces,
        force_add_bos,
    }
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value. `Ok(None)` for a name llama.cpp does
    /// not know either: the caller falls back to `default` (as Ollama does) and says so.
    pub fn from_name(name: &str) -> Result<Option<PreTokenizer>> {
        use Step::Llama3;
        let llama3 = || {
            vec![Llama3 {
                max_digits: 3,
                marks_are_letters: false,
            }]
        };
        let qwen2 = || {
            vec![Llama3 {
                max_digits: 1,
                marks_are_letters: false,
            }]
        };
        let (kind, steps, o): (&'static str, Vec<Step>, Options) = match name {
            "default" => ("default", Self::default_steps()?, opts(false, true, false)),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
            | "lfm2" | "jina-v5-nano" => ("llama3", llama3(), opts(true, true, true)),
            "dbrx" | "smaug-bpe" => ("llama3", llama3(), opts(false, true, false)),
            "glm4" | "chatglm-bpe" => {
                let mut pre = PreTokenizer::new("chatglm4", llama3(), opts(false, true, false));
                pre.no_bos = true;
                return Ok(Some(pre));
            }
            "deepseek-llm" => (
                "deepseek-llm",
                regexes(&[
                    r"[\r\n]",
                    DEEPSEEK_LLM_LETTERS,
                    DEEPSEEK_LLM_PUNCT,
                    r"\s+$",
                    CJK_HANGUL,
                    r"\p{N}+",
                ])?,
                opts(false, false, false),
            ),
            "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => (
                "deepseek-v3",
                regexes(&[r"\p{N}{1,3}", "[一-龥\u{3040}-ゟ゠-ヿ]+", DEEPSEEK3_MAIN])?,
                opts(false, false, false),
            ),
            "deepseek-coder" => (
                "deepseek-coder",
                regexes(&[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK_HANGUL, r"\p{N}"])?,
                opts(false, false, false),
            ),
            "falcon" => {
                let mut steps = regexes(&[r"[\p{P}\$\+<=>\^~\|`]+"])?;
                steps.push(Step::Gpt2);
                steps.extend(regexes(&["[0-9][0-9][0-9]"])?);
                ("falcon", steps, opts(false, true, false))
            }
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
                ("starcoder", digits_then_gpt2()?, opts(false, true, false))
            }
            "smollm" | "command-r" => ("starcoder", digits_then_gpt2()?, opts(false, false, false)),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
            | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "exaone4" | "jina-v1-en"
            | "jina-v2-code" | "roberta-bpe" => ("gpt-2", vec![Step::Gpt2], opts(false, true, false)),
            "trillion" | "granite-docling" => ("gpt-2", vec![Step::Gpt2], opts(false, false, false)),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => {
                ("qwen2", qwen2(), opts(false, false, false))
            }
            "stablelm2" | "megrez" => ("qwen2", qwen2(), opts(false, true, false)),
            "qwen35" => (
                "qwen35",
                vec![Llama3 {
                    max_digits: 1,
                    marks_are_letters: true,
                }],
                opts(false, false, false),
            ),
            "poro-chat" => ("bloom", regexes(&[BLOOM])?, opts(false, false, false)),
            "bloom" | "gpt3-finnish" => ("bloom", regexes(&[BLOOM])?, opts(false, true, false)),
            "viking" => ("viking", regexes(&[BLOOM, r"\p{N}"])?, opts(false, false, false)),
            "tekken" => ("tekken", regexes(&[TEKKEN])?, opts(true, false, true)),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
                ("gpt-4o", regexes(&[GPT4O])?, opts(false, false, false))
            }
            "bailingmoe" | "bailingmoe2" | "llada-moe" => {
                ("bailingmoe", regexes(&[BAILINGMOE])?, opts(false, false, false))
            }
            "seed-coder" => ("seed-coder", regexes(&[SEED_CODER])?, opts(false, false, false)),
            "grok-2" => ("qwen2", qwen2(), opts(false, false, false)),
            "ufakzeka" => ("ufakzeka", regexes(&[UFAKZEKA])?, opts(false, false, false)),
            "laguna" => (
                "laguna",
                regexes(&[r"[^\n]+|[\n]+", LAGUNA_QWEN2])?,
                opts(false, false, false),
            ),
            "exaone-moe" => ("exaone-moe", regexes(&[EXAONE_MOE])?, opts(false, true, false)),
            "minicpm5" => (
                "minicpm5",
                regexes(&[r"\p{N}{1,3}", MINICPM5])?,
                opts(true, true, false),
            ),
            _ if UNSUPPORTED.contains(&name) => {
                return Err(Error::BadKey {
                    key: "tokenizer.ggml.pre".into(),
                    msg: format!("pre-tokenizer '{name}' is not supported by ollamars"),
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(PreTokenizer::new(kind, steps, o)))
    }

    /// llama.cpp's `default` pre-tokenizer (also used when the name is missing or unknown).
    pub fn default_kind() -> Result<PreTokenizer> {
        Ok(PreTokenizer::new(
            "default",
            Self::default_steps()?,
            opts(false, true, false),
        ))
    }

    fn default_steps() -> Result<Vec<Step>> {
        let mut steps = regexes(&[r"[\p{P}\$\+<=>\^~\|]+"])?;
        steps.push(Step::Gpt2);
        steps.extend(regexes(&[r"\p{N}+", "[0-9][0-9][0-9]"])?);
        Ok(steps)
    }

    fn new(kind: &'static str, steps: Vec<Step>, o: Options) -> PreTokenizer {
        PreTokenizer {
            kind,
            steps,
            ignore_merges: o.ignore_merges,
            clean_spaces: o.clean_spaces,
            force_add_bos: o.force_add_bos,
            no_bos: false,
        }
    }

    /// Splits `text` into words, each handed to `word` as a string slice of `text`.
    pub fn split<'t>(&self, text: &'t str, mut word: impl FnMut(&'t str)) {
        if text.is_empty() {
            return;
        }
        let cpts: Vec<u32> = text.chars().map(u32::from).collect();
        let mut pieces = vec![(0, cpts.len())];
        let mut views = Views::default();
        for step in &self.steps {
            let mut out = Vec::with_capacity(pieces.len() * 2);
            for &(start, end) in &pieces {
                match step {
                    Step::Gpt2 => split_gpt2(&cpts, start, end, &mut out),
                    Step::Llama3 {
                        max_digits,
                        marks_are_letters,
                    } => split_llama3(&cpts, start, end, *max_digits, *marks_are_letters, &mut out),
                    Step::Regex { re, collapsed } => {
                        let view = views.get(&cpts, *collapsed);
                        split_regex(re, view, start, end, &mut out)
                    }
                }
            }
            pieces = out;
        }
        // Map code point ranges back to byte ranges of `text`.
        let mut byte_at = Vec::with_capacity(cpts.len() + 1);
        byte_at.extend(text.char_indices().map(|(i, _)| i));
        byte_at.push(text.len());
        for (start, end) in pieces {
            if start < end {
                word(&text[byte_at[start]..byte_at[end]]);
            }
        }
    }
}

fn regexes(patterns: &[&str]) -> Result<Vec<Step>> {
    patterns.iter().map(|p| compile(p)).collect()
}

fn digits_then_gpt2() -> Result<Vec<Step>> {
    let mut steps = regexes(&[r"\p{N}"])?;
    steps.push(Step::Gpt2);
    Ok(steps)
}

/// Stand-ins for non-ASCII code points in the collapsed text, one per category (llama.cpp uses
/// the bytes 0xD0..0xD5; private-use characters keep the text valid UTF-8).
const STAND_IN_OTHER: char = '\u{E0D0}';
const STAND_IN_NUMBER: char = '\u{E0D1}';
const STAND_IN_LETTER: char = '\u{E0D2}';
const STAND_IN_PUNCTUATION: char = '\u{E0D3}';
const STAND_IN_MARK: char = '\u{E0D4}';
const STAND_IN_SYMBOL: char = '\u{E0D5}';

/// `\p{X}` names and what they become: the stand-in plus the ASCII members llama.cpp lists.
fn category_class(name: &str) -> Option<(char, &'static str)> {
    Some(match name {
        "N" => (STAND_IN_NUMBER, "0-9"),
        "L" | "Lu" | "Ll" | "Lt" | "Lm" | "Lo" => (STAND_IN_LETTER, "A-Za-z"),
        "P" => (STAND_IN_PUNCTUATION, r"!-#%-*,-/:-;?-@\[-\]_\{\}"),
        "M" => (STAND_IN_MARK, ""),
        "S" => (STAND_IN_SYMBOL, r"\$\+<->\^`\|"),
        _ => return None,
    })
}

/// Compiles a pattern; one with `\p{..}` classes is rewritten to run on the collapsed text.
fn compile(pattern: &str) -> Result<Step> {
    let collapsed = pattern.contains(r"\p{");
    let source = if collapsed {
        collapse_pattern(pattern)
    } else {
        pattern.to_string()
    };
    let re = Regex::new(&source)
        .map_err(|e| Error::InvalidArgument(format!("pre-tokenizer regex {pattern:?}: {e}")))?;
    Ok(Step::Regex { re, collapsed })
}

fn collapse_pattern(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    let mut inside = false;
    let mut prev = '\0';
    let mut rest = pattern;
    while let Some(c) = rest.chars().next() {
        if c == '[' && prev != '\\' {
            inside = true;
        } else if c == ']' && inside && prev != '\\' {
            inside = false;
        } else if let Some(after) = rest.strip_prefix(r"\p{") {
            if let Some(close) = after.find('}') {
                if let Some((stand_in, ascii)) = category_class(&after[..close]) {
                    if !inside {
                        out.push('[');
                    }
                    out.push(stand_in);
                    out.push_str(ascii);
                    if !inside {
                        out.push(']');
                    }
                    rest = &after[close + 1..];
                    prev = '}';
                    continue;
                }
            }
        }
        out.push(c);
        // An escaped backslash does not escape what follows it.
        prev = if c == '\\' && prev == '\\' { '\0' } else { c };
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The text as the regex steps see it, with the byte offset of every code point.
#[derive(Default)]
struct Views {
    collapsed: Option<View>,
    plain: Option<View>,
}

struct View {
    text: String,
    /// Byte offset of each code point, plus the end.
    offsets: Vec<usize>,
}

impl Views {
    fn get(&mut self, cpts: &[u32], collapsed: bool) -> &View {
        let slot = if collapsed {
            &mut self.collapsed
        } else {
            &mut self.plain
        };
        slot.get_or_insert_with(|| View::new(cpts, collapsed))
    }
}

impl View {
    fn new(cpts: &[u32], collapsed: bool) -> View {
        let mut text = String::with_capacity(cpts.len() * 2);
        let mut offsets = Vec::with_capacity(cpts.len() + 1);
        for &cp in cpts {
            offsets.push(text.len());
            let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
            if cp < 0x80 {
                text.push(c);
                continue;
            }
            let f = flags(cp);
            // Non-ASCII whitespace becomes a vertical tab, which every `\s` matches.
            if f.is_whitespace() {
                text.push('\u{0B}');
            } else if !collapsed {
                text.push(c);
            } else {
                text.push(match f.category() {
                    CpFlags::NUMBER => STAND_IN_NUMBER,
                    CpFlags::LETTER => STAND_IN_LETTER,
                    CpFlags::PUNCTUATION => STAND_IN_PUNCTUATION,
                    CpFlags::MARK => STAND_IN_MARK,
                    CpFlags::SYMBOL => STAND_IN_SYMBOL,
                    _ => STAND_IN_OTHER,
                });
            }
        }
        offsets.push(text.len());
        View { text, offsets }
    }
}

/// One regex step over the piece `start..end` (code points): matches and the gaps between them
/// become pieces.
fn split_regex(re: &Regex, view: &View, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let base = view.offsets[start];
    let hay = &view.text[base..view.offsets[end]];
    let to_cpt = |byte: usize| start + view.offsets[start..=end].partition_point(|&o| o < base + byte);
    let mut last = start;
    for m in re.find_iter(hay) {
        // A pattern that exceeds fancy-regex's backtracking limit leaves the rest as one piece.
        let Ok(m) = m else { break };
        if m.start() == m.end() {
            continue;
        }
        let (s, e) = (to_cpt(m.start()), to_cpt(m.end()));
        if s > last {
            out.push((last, s));
        }
        out.push((s, e));
        last = e;
    }
    if last < end {
        out.push((last, end));
    }
}

/// Pieces built by the hand-written splitters: `add(end)` closes the piece that started where the
/// previous one ended.
struct Pieces<'a> {
    out: &'a mut Vec<(usize, usize)>,
    prev_end: usize,
}

impl Pieces<'_> {
    fn add(&mut self, end: usize) -> usize {
        let len = end - self.prev_end;
        if len > 0 {
            self.out.push((self.prev_end, end));
        }
        self.prev_end = end;
        len
    }
}

const OUT_OF_RANGE: u32 = u32::MAX;

/// GPT-2's pattern in one pass (llama.cpp's `unicode_regex_split_custom_gpt2`).
fn split_gpt2(cpts: &[u32], start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let cpt = |p: usize| {
        if (start..end).contains(&p) {
            cpts[p]
        } else {
            OUT_OF_RANGE
        }
    };
    let fl = |p: usize| {
        if (start..end).contains(&p) {
            flags(cpts[p])
        } else {
            CpFlags::NONE
        }
    };
    let other = |f: CpFlags| !(f.is_whitespace() || f.is_letter() || f.is_number() || f.is_none());
    let mut pieces = Pieces { out, prev_end: start };
    let mut pos = start;
    while pos < end {
        let c = cpt(pos);
        let f = fl(pos);
        // 's|'t|'re|'ve|'m|'ll|'d
        if c == u32::from('\'') && pos + 1 < end {
            let next = cpt(pos + 1);
            if [b's', b't', b'm', b'd'].iter().any(|&x| next == u32::from(x)) {
                pos += pieces.add(pos + 2);
                continue;
            }
            if pos + 2 < end {
                let pair = (next, cpt(pos + 2));
                let is = |a: u8, b: u8| pair == (u32::from(a), u32::from(b));
                if is(b'r', b'e') || is(b'v', b'e') || is(b'l', b'l') {
                    pos += pieces.add(pos + 3);
                    continue;
                }
            }
        }
        let space = c == u32::from(' ');
        let mut f2 = if space { fl(pos + 1) } else { f };
        // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
        let class: Option<fn(CpFlags) -> bool> = if f2.is_letter() {
            Some(CpFlags::is_letter)
        } else if f2.is_number() {
            Some(CpFlags::is_number)
        } else if other(f2) {
            Some(|f| !(f.is_whitespace() || f.is_letter() || f.is_number() || f.is_none()))
        } else {
            None
        };
        if let Some(class) = class {
            pos += usize::from(space);
            while class(f2) {
                pos += 1;
                f2 = fl(pos);
            }
            pieces.add(pos);
            continue;
        }
        let mut n_ws = 0;
        while fl(pos + n_ws).is_whitespace() {
            n_ws += 1;
        }
        // \s+(?!\S): a whitespace run followed by more text leaves its last character
        if n_ws > 1 && cpt(pos + n_ws) != OUT_OF_RANGE {
            pos += n_ws - 1;
            pieces.add(pos);
            continue;
        }
        if n_ws > 0 {
            pos += n_ws;
            pieces.add(pos);
            continue;
        }
        pos += 1;
        pieces.add(pos);
    }
}

/// Llama 3's pattern in one pass (llama.cpp's `unicode_regex_split_custom_llama3`), with the
/// digit-group length and letter class as parameters so that Qwen2 and Qwen3.5 use it too.
fn split_llama3(
    cpts: &[u32],
    start: usize,
    end: usize,
    max_digits: usize,
    marks_are_letters: bool,
    out: &mut Vec<(usize, usize)>,
) {
    let cpt = |p: usize| {
        if (start..end).contains(&p) {
            cpts[p]
        } else {
            OUT_OF_RANGE
        }
    };
    let fl = |p: usize| {
        if (start..end).contains(&p) {
            flags(cpts[p])
        } else {
            CpFlags::NONE
        }
    };
    let letter = |f: CpFlags| f.is_letter() || (marks_are_letters && f.is_mark());
    let is_crlf = |c: u32| c == u32::from('\r') || c == u32::from('\n');
    let mut pieces = Pieces { out, prev_end: start };
    let mut pos = start;
    while pos < end {
        let c = cpt(pos);
        let f = fl(pos);
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if c == u32::from('\'') && pos + 1 < end {
            let next = to_lower(cpt(pos + 1));
            if [b's', b't', b'm', b'd'].iter().any(|&x| next == u32::from(x)) {
                pos += pieces.add(pos + 2);
                continue;
            }
            if pos + 2 < end {
                let pair = (next, to_lower(cpt(pos + 2)));
                let is = |a: u8, b: u8| pair == (u32::from(a), u32::from(b));
                if is(b'r', b'e') || is(b'v', b'e') || is(b'l', b'l') {
                    pos += pieces.add(pos + 3);
                    continue;
                }
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(is_crlf(c) || f.is_number()) && (letter(f) || letter(fl(pos + 1))) {
            pos += 1;
            while letter(fl(pos)) {
                pos += 1;
            }
            pieces.add(pos);
            continue;
        }
        // \p{N}{1,max_digits}
        if f.is_number() {
            let mut ini = pos;
            while fl(pos).is_number() {
                pos += 1;
                if pos - ini >= max_digits {
                    pieces.add(pos);
                    ini = pos;
                }
            }
            pieces.add(pos);
            continue;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        let other = |f: CpFlags| !(f.is_whitespace() || letter(f) || f.is_number() || f.is_none());
        let mut f2 = if c == u32::from(' ') { fl(pos + 1) } else { f };
        if other(f2) {
            pos += usize::from(c == u32::from(' '));
            while other(f2) {
                pos += 1;
                f2 = fl(pos);
            }
            while is_crlf(cpt(pos)) {
                pos += 1;
            }
            pieces.add(pos);
            continue;
        }
        let mut n_ws = 0;
        let mut last_crlf_end = 0;
        while fl(pos + n_ws).is_whitespace() {
            if is_crlf(cpt(pos + n_ws)) {
                last_crlf_end = pos + n_ws + 1;
            }
            n_ws += 1;
        }
        // \s*[\r\n]+
        if last_crlf_end > 0 {
            pos = last_crlf_end;
            pieces.add(pos);
            continue;
        }
        // \s+(?!\S)
        if n_ws > 1 && cpt(pos + n_ws) != OUT_OF_RANGE {
            pos += n_ws - 1;
            pieces.add(pos);
            continue;
        }
        // \s+
        if n_ws > 0 {
            pos += n_ws;
            pieces.add(pos);
            continue;
        }
        pos += 1;
        pieces.add(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &PreTokenizer, text: &str) -> Vec<String> {
        let mut v = Vec::new();
        pre.split(text, |w| v.push(w.to_string()));
        v
    }

    fn pre_of(pattern: &str) -> PreTokenizer {
        PreTokenizer::new("test", regexes(&[pattern]).unwrap(), opts(false, true, false))
    }

    fn by_step(step: Step, text: &str) -> Vec<String> {
        words(
            &PreTokenizer::new("test", vec![step], opts(false, true, false)),
            text,
        )
    }

    #[test]
    fn every_known_pre_tokenizer_compiles() {
        for name in [
            "default",
            "llama3",
            "dbrx",
            "glm4",
            "deepseek-llm",
            "deepseek-v3",
            "deepseek-coder",
            "falcon",
            "starcoder",
            "smollm",
            "gpt-2",
            "trillion",
            "qwen2",
            "stablelm2",
            "qwen35",
            "poro-chat",
            "bloom",
            "viking",
            "tekken",
            "gpt-4o",
            "bailingmoe",
            "seed-coder",
            "grok-2",
            "ufakzeka",
            "laguna",
            "exaone-moe",
            "minicpm5",
        ] {
            let pre = PreTokenizer::from_name(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(pre.is_some(), "{name}");
        }
        assert!(PreTokenizer::from_name("no-such-thing").unwrap().is_none());
        assert!(PreTokenizer::from_name("kimi-k2").is_err());
    }

    #[test]
    fn gpt2_words() {
        let w = by_step(Step::Gpt2, "Hello world's  3 apples!!   ok\n");
        assert_eq!(
            w,
            ["Hello", " world", "'s", " ", " 3", " apples", "!!", "  ", " ok", "\n"]
        );
    }

    #[test]
    fn collapsed_pattern_rewrites_categories() {
        assert_eq!(collapse_pattern(r"\p{N}+"), "[\u{E0D1}0-9]+");
        assert_eq!(collapse_pattern(r"[^\s\p{L}]"), "[^\\s\u{E0D2}A-Za-z]");
    }

    /// Deterministic pseudo-random strings over a mix of character kinds that stress the
    /// splitters: letters, marks, digits, punctuation, apostrophes, all kinds of whitespace.
    fn random_texts() -> Vec<String> {
        let alphabet: Vec<char> =
            "aZé中\u{301}\u{0663}7'sStTlLrReEvVmMdD.,!?-_$~+ \u{A0}\u{3000}\t\n\r\u{1C}😀"
                .chars()
                .collect();
        let mut seed = 0x2545F4914F6CDD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        (0..3000)
            .map(|_| {
                let len = (next() % 24) as usize;
                (0..len)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect()
            })
            .collect()
    }

    #[test]
    fn hand_written_splitters_equal_their_regexes() {
        let llama3 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let qwen35 = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
        let (gpt2_re, llama3_re) = (pre_of(GPT2), pre_of(llama3));
        let (qwen2_re, qwen35_re) = (pre_of(LAGUNA_QWEN2), pre_of(qwen35));
        for text in random_texts() {
            assert_eq!(
                by_step(Step::Gpt2, &text),
                words(&gpt2_re, &text),
                "gpt2 {text:?}"
            );
            let step = Step::Llama3 {
                max_digits: 3,
                marks_are_letters: false,
            };
            assert_eq!(by_step(step, &text), words(&llama3_re, &text), "llama3 {text:?}");
            let step = Step::Llama3 {
                max_digits: 1,
                marks_are_letters: false,
            };
            assert_eq!(by_step(step, &text), words(&qwen2_re, &text), "qwen2 {text:?}");
            let step = Step::Llama3 {
                max_digits: 1,
                marks_are_letters: true,
            };
            assert_eq!(by_step(step, &text), words(&qwen35_re, &text), "qwen35 {text:?}");
        }
    }
}
