//! The vocabulary: tokens, their kinds and scores, special ids, and tokenizing with them.

use aho_corasick::AhoCorasick;

use super::pre::PreTokenizer;
use super::strtab::StrTable;
use super::{bpe, spm, wpm};
use crate::gguf::Metadata;
use crate::{Error, Result, TokenId};

/// The tokenizer algorithm of a vocabulary (`tokenizer.ggml.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `llama`: SentencePiece BPE by scores, `▁` for spaces, `<0xXX>` byte fallback.
    Spm,
    /// `gpt2`: byte-level BPE with merges and a pre-tokenizer.
    Bpe,
    /// `bert`: WordPiece.
    Wpm,
}

/// A token's kind as stored in GGUF (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

/// Token attributes (llama.cpp's `llama_token_attr` bits): the token type, possibly adjusted at
/// load (end-of-generation tokens found by text become control tokens), plus strip rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TokenAttr(pub u16);

impl TokenAttr {
    pub const UNDEFINED: u16 = 0;
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const NORMALIZED: u16 = 1 << 6;
    /// Whitespace before the token is removed when it is split out of text.
    pub const LSTRIP: u16 = 1 << 7;
    /// Whitespace after the token is removed when it is split out of text.
    pub const RSTRIP: u16 = 1 << 8;
    pub const SINGLE_WORD: u16 = 1 << 9;
    /// Ours, not llama.cpp's: the token marks where an image, audio or video goes in a
    /// multimodal model's input (see [`MEDIA_TEXTS`]). It tokenizes as its type says, but a
    /// generated reply shows it as nothing ([`Vocab::output_piece`]).
    pub const MEDIA: u16 = 1 << 10;

    pub fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }
}

/// Special token ids; `None` where the vocabulary has none.
#[derive(Clone, Copy, Debug, Default)]
struct SpecialIds {
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    eot: Option<TokenId>,
    eom: Option<TokenId>,
    unk: Option<TokenId>,
    sep: Option<TokenId>,
    pad: Option<TokenId>,
    mask: Option<TokenId>,
    fim_pre: Option<TokenId>,
    fim_suf: Option<TokenId>,
    fim_mid: Option<TokenId>,
    fim_pad: Option<TokenId>,
    fim_rep: Option<TokenId>,
    fim_sep: Option<TokenId>,
    nl: Option<TokenId>,
}

/// Texts of tokens that end generation wherever they appear (llama.cpp's list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts of the tokens multimodal models put around or in place of an image, audio clip or video
/// frame. Hugging Face marks them special (`skip_special_tokens` drops them from decoded
/// replies), but GGUF converters often record them as user-defined tokens, which llama.cpp renders
/// as text: a text-only reply never shows them (Gemma 3 sometimes samples `<start_of_image>`).
const MEDIA_TEXTS: &[&str] = &[
    "[multimodal]",
    "<start_of_image>",
    "<end_of_image>",
    "<image_soft_token>",
    "<start_of_audio>",
    "<end_of_audio>",
    "<audio_soft_token>",
    "<|image|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<fake_token_around_image>",
    "<global-img>",
];

/// A tokenizer vocabulary and everything needed to tokenize and detokenize with it.
pub struct Vocab {
    kind: VocabKind,
    /// Token texts by id, found by text.
    texts: StrTable,
    scores: Vec<f32>,
    attrs: Vec<TokenAttr>,
    /// BPE merges as `"left right"`; a merge's index here is its rank (its index in the file).
    merges: StrTable,
    pre: Option<PreTokenizer>,
    ids: SpecialIds,
    /// End-of-generation ids, sorted.
    eog: Vec<TokenId>,
    add_bos: bool,
    add_eos: bool,
    add_sep: bool,
    add_space_prefix: bool,
    remove_extra_whitespaces: bool,
    clean_spaces: bool,
    /// WordPiece normalization.
    lowercase: bool,
    strip_accents: bool,
    max_token_len: usize,
    /// Control, user-defined and unknown tokens, longest text first: the order they are carved
    /// out of text in.
    special_tokens: Vec<TokenId>,
    /// Finds every occurrence of every special token's text (pattern i is `special_tokens[i]`).
    special_matcher: Option<AhoCorasick>,
    /// The bytes each token stands for (its piece with special tokens rendered), concatenated;
    /// token `i` is `pieces[piece_ends[i - 1]..piece_ends[i]]`.
    pieces: Vec<u8>,
    piece_ends: Vec<usize>,
    /// The byte-fallback token for each byte (SPM `<0xXX>`), or the token whose text is the byte.
    byte_tokens: [Option<TokenId>; 256],
    pre_name: String,
    warnings: Vec<String>,
}

impl std::fmt::Debug for Vocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vocab")
            .field("kind", &self.kind)
            .field("n_tokens", &self.texts.len())
            .field("pre", &self.pre_name)
            .finish_non_exhaustive()
    }
}

fn bad(key: &str, msg: impl Into<String>) -> Error {
    Error::BadKey {
        key: key.to_string(),
        msg: msg.into(),
    }
}

impl Vocab {
    /// Builds the vocabulary from GGUF metadata (`tokenizer.ggml.*`), as llama.cpp's
    /// `llama_vocab::load` does.
    pub fn from_metadata(md: &Metadata) -> Result<Vocab> {
        const MODEL: &str = "tokenizer.ggml.model";
        let model = md.require(MODEL, md.get_str(MODEL))?;
        let pre_name = md.get_str("tokenizer.ggml.pre")?.unwrap_or("").to_string();
        let mut warnings = Vec::new();

        let (kind, mut ids) = match model {
            "llama" => (
                VocabKind::Spm,
                SpecialIds {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..SpecialIds::default()
                },
            ),
            "gpt2" => (
                VocabKind::Bpe,
                SpecialIds {
                    bos: Some(11),
                    eos: Some(11),
                    ..SpecialIds::default()
                },
            ),
            "bert" => (
                VocabKind::Wpm,
                SpecialIds {
                    bos: Some(101),
                    unk: Some(100),
                    sep: Some(102),
                    pad: Some(0),
                    mask: Some(103),
                    ..SpecialIds::default()
                },
            ),
            "no_vocab" | "none" => {
                return Err(bad(MODEL, "the model has no vocabulary, so it cannot tokenize"))
            }
            other => {
                return Err(bad(
                    MODEL,
                    format!("tokenizer '{other}' is not supported by ollamars"),
                ))
            }
        };

        let (mut add_eos, mut add_sep) = (false, false);
        let mut add_bos;
        let (mut add_space_prefix, mut clean_spaces) = (false, false);
        let mut pre = None;
        match kind {
            VocabKind::Bpe => {
                let p = if pre_name.is_empty() {
                    warnings.push("no pre-tokenizer type in the file, using 'default': tokens may differ from the model's training".into());
                    PreTokenizer::default_kind()?
                } else {
                    match PreTokenizer::from_name(&pre_name)? {
                        Some(p) => p,
                        None => {
                            warnings.push(format!(
                                "unknown pre-tokenizer type '{pre_name}', using 'default': tokens may differ from the model's training"
                            ));
                            PreTokenizer::default_kind()?
                        }
                    }
                };
                clean_spaces = p.clean_spaces;
                add_bos = p.force_add_bos;
                if p.no_bos {
                    ids.bos = None;
                }
                pre = Some(p);
            }
            VocabKind::Spm => {
                add_space_prefix = true;
                add_bos = true;
            }
            VocabKind::Wpm => {
                clean_spaces = true;
                add_bos = true;
                add_sep = true;
            }
        }
        if let Some(v) = md.get_bool("tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = v;
        }
        let remove_extra_whitespaces = md
            .get_bool("tokenizer.ggml.remove_extra_whitespaces")?
            .unwrap_or(false);

        const TOKENS: &str = "tokenizer.ggml.tokens";
        let tokens = md.require(TOKENS, md.get_str_array(TOKENS))?;
        let n = tokens.len();
        if n == 0 || n > TokenId::MAX as usize {
            return Err(bad(TOKENS, format!("has {n} tokens")));
        }
        let scores = match md.get_f32_array("tokenizer.ggml.scores")? {
            Some(s) if s.len() < n => {
                return Err(bad(
                    "tokenizer.ggml.scores",
                    format!("has {} entries for {n} tokens", s.len()),
                ))
            }
            Some(mut s) => {
                s.truncate(n);
                s
            }
            None => vec![0.0; n],
        };
        let types = match md.get_i64_array("tokenizer.ggml.token_type")? {
            Some(t) if t.len() < n => {
                return Err(bad(
                    "tokenizer.ggml.token_type",
                    format!("has {} entries for {n} tokens", t.len()),
                ))
            }
            t => t,
        };

        let mut texts = StrTable::with_capacity(n, tokens.total_len());
        let mut attrs = Vec::with_capacity(n);
        let mut max_token_len = 0;
        for (i, text) in tokens.iter().enumerate() {
            let empty;
            let text = if text.is_empty() {
                warnings.push(format!("empty token at index {i}"));
                empty = format!("[EMPTY_{i}]");
                empty.as_str()
            } else {
                text
            };
            if let Err(prev) = texts.push(text) {
                return Err(bad(
                    TOKENS,
                    format!("duplicate token '{text}' at ids {prev} and {i}"),
                ));
            }
            max_token_len = max_token_len.max(text.len());
            let attr = match types.as_ref().map(|t| t[i]) {
                None | Some(1) => TokenAttr::NORMAL,
                Some(2) => TokenAttr::UNKNOWN,
                Some(3) => TokenAttr::CONTROL,
                Some(4) => TokenAttr::USER_DEFINED,
                Some(5) => TokenAttr::UNUSED,
                Some(6) => TokenAttr::BYTE,
                Some(_) => TokenAttr::UNDEFINED,
            };
            attrs.push(TokenAttr(attr));
        }

        let mut merges = StrTable::default();
        if kind == VocabKind::Bpe {
            const MERGES: &str = "tokenizer.ggml.merges";
            let list = md.require(MERGES, md.get_str_array(MERGES))?;
            merges = StrTable::with_capacity(list.len(), list.total_len());
            for m in list.iter() {
                // llama.cpp splits at the first space after the first byte; a merge without one
                // can never match, and a repeated merge keeps its first rank. The stored text
                // keeps that space, so a lookup builds "left right" from two symbols.
                let usable = m.len() > 1 && m.as_bytes()[1..].contains(&b' ');
                let _ = merges.push(if usable { m } else { "" });
            }
        }

        // Special ids from the file override the defaults; out-of-range ids are ignored.
        let n_tokens = n as u64;
        for id in [
            &mut ids.bos,
            &mut ids.eos,
            &mut ids.unk,
            &mut ids.sep,
            &mut ids.pad,
            &mut ids.mask,
        ] {
            if id.is_some_and(|v| u64::from(v) >= n_tokens) {
                *id = None;
            }
        }
        type Field = fn(&mut SpecialIds) -> &mut Option<TokenId>;
        let keys: [(&str, Field); 17] = [
            ("bos_token_id", |s| &mut s.bos),
            ("eos_token_id", |s| &mut s.eos),
            ("eot_token_id", |s| &mut s.eot),
            ("eom_token_id", |s| &mut s.eom),
            ("unknown_token_id", |s| &mut s.unk),
            ("seperator_token_id", |s| &mut s.sep),
            ("padding_token_id", |s| &mut s.pad),
            ("mask_token_id", |s| &mut s.mask),
            ("fim_pre_token_id", |s| &mut s.fim_pre),
            ("fim_suf_token_id", |s| &mut s.fim_suf),
            ("fim_mid_token_id", |s| &mut s.fim_mid),
            ("fim_pad_token_id", |s| &mut s.fim_pad),
            ("fim_rep_token_id", |s| &mut s.fim_rep),
            ("fim_sep_token_id", |s| &mut s.fim_sep),
            // Older names, read last as llama.cpp does.
            ("prefix_token_id", |s| &mut s.fim_pre),
            ("suffix_token_id", |s| &mut s.fim_suf),
            ("middle_token_id", |s| &mut s.fim_mid),
        ];
        for (name, field) in keys {
            let slot = field(&mut ids);
            let key = format!("tokenizer.ggml.{name}");
            // Some converters write -1 for "none": treat any unusable value as absent.
            let Some(v) = md.get(&key).and_then(|v| v.as_i64()) else {
                continue;
            };
            if v >= 0 && (v as u64) < n_tokens {
                *slot = Some(v as TokenId);
            } else {
                warnings.push(format!("bad special token: '{key}' = {v}, keeping the default"));
            }
        }

        if let Some(v) = md.get_bool("tokenizer.ggml.add_bos_token")? {
            add_bos = v;
        }
        if let Some(v) = md.get_bool("tokenizer.ggml.add_eos_token")? {
            add_eos = v;
        }
        if let Some(v) = md.get_bool("tokenizer.ggml.add_sep_token")? {
            add_sep = v;
        }
        for (add, id, what) in [
            (add_bos, ids.bos, "bos"),
            (add_eos, ids.eos, "eos"),
            (add_sep, ids.sep, "sep"),
        ] {
            if add && id.is_none() {
                return Err(bad(
                    &format!("tokenizer.ggml.add_{what}_token"),
                    format!("is true but the vocabulary has no {what} token"),
                ));
            }
        }
        let lowercase = md
            .get_bool("tokenizer.ggml.normalizer.lowercase")?
            .unwrap_or(true);
        let strip_accents = md
            .get_bool("tokenizer.ggml.normalizer.strip_accents")?
            .unwrap_or(lowercase);

        let mut vocab = Vocab {
            kind,
            texts,
            scores,
            attrs,
            merges,
            pre,
            ids,
            eog: Vec::new(),
            add_bos,
            add_eos,
            add_sep,
            add_space_prefix,
            remove_extra_whitespaces,
            clean_spaces,
            lowercase,
            strip_accents,
            max_token_len,
            special_tokens: Vec::new(),
            special_matcher: None,
            pieces: Vec::new(),
            piece_ends: Vec::new(),
            byte_tokens: [None; 256],
            pre_name,
            warnings,
        };
        vocab.find_special_by_text();
        vocab.build_tables(md)?;
        Ok(vocab)
    }

    /// llama.cpp's detection of EOT, EOM, FIM and end-of-generation tokens by their text (most
    /// converters do not record them), and of unused control tokens.
    fn find_special_by_text(&mut self) {
        let control = TokenAttr::CONTROL;
        // Where several of the texts are in the vocabulary, the first in the list wins (llama.cpp
        // takes whichever its hash map yields first; the list order gives its usual answer, e.g.
        // `<|im_end|>` over `<|endoftext|>` for Qwen).
        let vocab_texts = &self.texts;
        let detect = |slot: &mut Option<TokenId>, texts: &[&str], attrs: &mut [TokenAttr]| {
            if slot.is_some() {
                return;
            }
            if let Some(id) = texts.iter().find_map(|t| vocab_texts.find(t)) {
                *slot = Some(id);
                attrs[id as usize].0 |= control;
            }
        };
        let ids = &mut self.ids;
        detect(&mut ids.eot, EOT_TEXTS, &mut self.attrs);
        detect(&mut ids.eom, &["<|eom_id|>"], &mut self.attrs);
        detect(&mut ids.fim_pre, FIM_PRE_TEXTS, &mut self.attrs);
        detect(&mut ids.fim_suf, FIM_SUF_TEXTS, &mut self.attrs);
        detect(&mut ids.fim_mid, FIM_MID_TEXTS, &mut self.attrs);
        detect(&mut ids.fim_pad, FIM_PAD_TEXTS, &mut self.attrs);
        detect(&mut ids.fim_rep, FIM_REP_TEXTS, &mut self.attrs);
        detect(&mut ids.fim_sep, FIM_SEP_TEXTS, &mut self.attrs);

        for (i, attr) in self.attrs.iter_mut().enumerate() {
            if attr.has(control) && self.texts.get(i).contains("unused") {
                attr.0 |= TokenAttr::UNUSED;
            }
        }

        let mut eog: Vec<TokenId> = [ids.fim_pad, ids.fim_rep, ids.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for text in EOG_TEXTS {
            if let Some(id) = self.texts.find(text) {
                eog.push(id);
                self.attrs[id as usize].0 |= control;
            }
        }
        // gpt-oss renders these in its output format.
        for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.texts.find(text) {
                self.attrs[id as usize] = TokenAttr(TokenAttr::USER_DEFINED);
            }
        }
        for text in MEDIA_TEXTS {
            if let Some(id) = self.texts.find(text) {
                self.attrs[id as usize].0 |= TokenAttr::MEDIA;
            }
        }
        eog.extend([ids.eos, ids.eot, ids.eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();
        let text_of = |id: &TokenId| self.texts.get(*id as usize);
        // o200k_harmony and solar-open: `<|end|>` ends a message, not the generation.
        let has = |t: &str| eog.iter().any(|id| text_of(id) == t);
        if (has("<|return|>") && has("<|call|>") && has("<|end|>"))
            || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>") && has("<|end|>"))
        {
            if let Some(pos) = eog.iter().position(|id| text_of(id) == "<|end|>") {
                let id = eog.remove(pos);
                self.attrs[id as usize] = TokenAttr(TokenAttr::USER_DEFINED);
            }
        }
        // gemma4 and paddleocr: `</s>` is not an end of generation there.
        let has = |t: &str| eog.iter().any(|id| text_of(id) == t);
        if has("<|tool_response>") && has("</s>") {
            if let Some(pos) = eog.iter().position(|id| text_of(id) == "</s>") {
                let id = eog.remove(pos);
                self.attrs[id as usize] = TokenAttr(TokenAttr::NORMAL);
            }
        }
        self.eog = eog;
    }

    /// The special-token matcher, byte tokens, token pieces and per-model strip rules.
    fn build_tables(&mut self, md: &Metadata) -> Result<()> {
        let special = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
        let mut specials: Vec<TokenId> = (0..self.texts.len() as TokenId)
            .filter(|&id| self.attrs[id as usize].has(special))
            .collect();
        // Longest first; equal lengths by id (llama.cpp's sort leaves their order unspecified,
        // which matters only for two overlapping special texts of the same length).
        specials.sort_by_key(|&id| std::cmp::Reverse(self.texts.get(id as usize).len()));
        if !specials.is_empty() {
            let patterns = specials.iter().map(|&id| self.texts.get(id as usize).as_bytes());
            let matcher = AhoCorasick::new(patterns)
                .map_err(|e| Error::InvalidArgument(format!("special token matcher: {e}")))?;
            self.special_matcher = Some(matcher);
        }
        self.special_tokens = specials;

        for b in 0..=255u8 {
            self.byte_tokens[usize::from(b)] = match self.kind {
                VocabKind::Spm => self
                    .token_id(&format!("<0x{b:02X}>"))
                    .or_else(|| self.single_byte_token(b)),
                VocabKind::Bpe | VocabKind::Wpm => {
                    self.token_id(super::unicode::byte_to_char(b).encode_utf8(&mut [0; 4]))
                }
            };
        }

        let mut pieces = Vec::new();
        let mut ends = Vec::with_capacity(self.texts.len());
        for id in 0..self.texts.len() {
            self.render_piece(id, &mut pieces);
            ends.push(pieces.len());
        }
        self.pieces = pieces;
        self.piece_ends = ends;

        self.ids.nl = match self.kind {
            VocabKind::Spm => self.byte_tokens[usize::from(b'\n')],
            VocabKind::Wpm => self.ids.pad,
            VocabKind::Bpe => {
                let mut out = Vec::new();
                self.tokenize_raw("\n", &mut out);
                out.first().copied().or(self.ids.pad)
            }
        };

        // Strip rules llama.cpp sets by model, since GGUF does not record them.
        let name = md.get_str("general.name")?.unwrap_or("").to_lowercase();
        let arch = md.get_str("general.architecture")?.unwrap_or("");
        let set = |vocab: &mut Vocab, text: &str, bit: u16, on: bool| {
            if let Some(id) = vocab.token_id(text) {
                let attr = &mut vocab.attrs[id as usize].0;
                *attr = if on { *attr | bit } else { *attr & !bit };
            }
        };
        if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
            .iter()
            .any(|p| self.pre_name.contains(p))
            || ["nomic-bert-moe", "jina-bert-v3"]
                .iter()
                .any(|a| arch.contains(a))
        {
            set(self, "<mask>", TokenAttr::LSTRIP, true);
        } else if name.contains("phi-3") || name.contains("phi3") {
            for i in 0..self.special_tokens.len() {
                let id = self.special_tokens[i] as usize;
                self.attrs[id].0 |= TokenAttr::RSTRIP;
            }
            set(self, "</s>", TokenAttr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, TokenAttr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            set(self, "[MASK]", TokenAttr::LSTRIP, true);
        }
        Ok(())
    }

    /// The bytes a token stands for, with special tokens rendered (llama.cpp's piece cache).
    fn render_piece(&self, id: usize, out: &mut Vec<u8>) {
        let attr = self.attrs[id];
        let text = self.texts.get(id);
        if attr.has(TokenAttr::UNKNOWN | TokenAttr::CONTROL | TokenAttr::USER_DEFINED) {
            out.extend_from_slice(text.as_bytes());
        } else if attr.has(TokenAttr::NORMAL) {
            match self.kind {
                VocabKind::Spm | VocabKind::Wpm => {
                    for (i, part) in text.split('▁').enumerate() {
                        if i > 0 {
                            out.push(b' ');
                        }
                        out.extend_from_slice(part.as_bytes());
                    }
                }
                VocabKind::Bpe => {
                    for c in text.chars() {
                        match super::unicode::char_to_byte(c) {
                            Some(b) => out.push(b),
                            None => {
                                // llama.cpp's marker for a character outside GPT-2's byte map.
                                out.extend_from_slice(b"[UNK_BYTE_0x");
                                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                                }
                                out.extend_from_slice(text.as_bytes());
                                out.push(b']');
                            }
                        }
                    }
                }
            }
        } else if attr.has(TokenAttr::BYTE) {
            if let Some(b) = text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
            }
        }
    }

    // ---- lookups ----

    pub fn kind(&self) -> VocabKind {
        self.kind
    }

    /// The number of tokens (the model's vocabulary size).
    pub fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    /// The id of the token with exactly this text.
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.texts.find(text)
    }

    /// A token's text as stored in the vocabulary (`▁` for SPM spaces, GPT-2 characters for
    /// BPE bytes); `None` for an id out of range.
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        ((id as usize) < self.texts.len()).then(|| self.texts.get(id as usize))
    }

    pub fn score(&self, id: TokenId) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    pub fn attr(&self, id: TokenId) -> TokenAttr {
        self.attrs.get(id as usize).copied().unwrap_or_default()
    }

    /// The token's kind (from its attributes, so adjusted as llama.cpp adjusts them at load).
    pub fn token_type(&self, id: TokenId) -> TokenType {
        let a = self.attr(id);
        if a.has(TokenAttr::BYTE) {
            TokenType::Byte
        } else if a.has(TokenAttr::CONTROL) {
            TokenType::Control
        } else if a.has(TokenAttr::USER_DEFINED) {
            TokenType::UserDefined
        } else if a.has(TokenAttr::UNKNOWN) {
            TokenType::Unknown
        } else if a.has(TokenAttr::UNUSED) {
            TokenType::Unused
        } else if a.has(TokenAttr::NORMAL) {
            TokenType::Normal
        } else {
            TokenType::Undefined
        }
    }

    pub fn is_control(&self, id: TokenId) -> bool {
        self.attr(id).has(TokenAttr::CONTROL)
    }

    /// Whether generating this token ends generation (eos, eot, eom and the model's other
    /// end-of-turn tokens).
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// All end-of-generation ids, sorted.
    pub fn eog_ids(&self) -> &[TokenId] {
        &self.eog
    }

    pub fn bos(&self) -> Option<TokenId> {
        self.ids.bos
    }
    pub fn eos(&self) -> Option<TokenId> {
        self.ids.eos
    }
    pub fn eot(&self) -> Option<TokenId> {
        self.ids.eot
    }
    pub fn eom(&self) -> Option<TokenId> {
        self.ids.eom
    }
    pub fn unk(&self) -> Option<TokenId> {
        self.ids.unk
    }
    pub fn sep(&self) -> Option<TokenId> {
        self.ids.sep
    }
    pub fn pad(&self) -> Option<TokenId> {
        self.ids.pad
    }
    pub fn mask(&self) -> Option<TokenId> {
        self.ids.mask
    }
    /// The newline token (the first token of `"\n"`).
    pub fn nl(&self) -> Option<TokenId> {
        self.ids.nl
    }
    pub fn fim_pre(&self) -> Option<TokenId> {
        self.ids.fim_pre
    }
    pub fn fim_suf(&self) -> Option<TokenId> {
        self.ids.fim_suf
    }
    pub fn fim_mid(&self) -> Option<TokenId> {
        self.ids.fim_mid
    }
    pub fn fim_pad(&self) -> Option<TokenId> {
        self.ids.fim_pad
    }
    pub fn fim_rep(&self) -> Option<TokenId> {
        self.ids.fim_rep
    }
    pub fn fim_sep(&self) -> Option<TokenId> {
        self.ids.fim_sep
    }

    /// Whether `tokenize(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }
    /// Whether `tokenize(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }
    /// Whether the model wants SEP after a sequence (embedding and reranking models).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }
    /// SPM: a space is put before text at the start and after special tokens.
    pub fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }
    pub fn remove_extra_whitespaces(&self) -> bool {
        self.remove_extra_whitespaces
    }
    /// The pre-tokenizer name from the file (`tokenizer.ggml.pre`), empty if absent.
    pub fn pre_tokenizer(&self) -> &str {
        &self.pre_name
    }
    /// The pre-tokenizer actually used (BPE only): the canonical name of its kind, e.g.
    /// `qwen2` for `deepseek-r1-qwen`, or `default` for a name ollamars does not know.
    pub fn pre_tokenizer_kind(&self) -> Option<&'static str> {
        self.pre.as_ref().map(|p| p.kind)
    }
    /// The longest token text, in bytes.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }
    /// Things about the file worth telling the user (unknown pre-tokenizer, bad special ids).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub(super) fn clean_spaces(&self) -> bool {
        self.clean_spaces
    }
    pub(super) fn lowercase(&self) -> bool {
        self.lowercase
    }
    pub(super) fn strip_accents(&self) -> bool {
        self.strip_accents
    }

    /// The bytes a token stands for, with special tokens rendered as their text: what a token
    /// adds to the output when generated. Empty for an id out of range.
    pub fn token_bytes(&self, id: TokenId) -> &[u8] {
        let i = id as usize;
        if i >= self.piece_ends.len() {
            return &[];
        }
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] };
        &self.pieces[start..self.piece_ends[i]]
    }

    /// A token's piece as llama.cpp's `token_to_piece` gives it: control and unknown tokens are
    /// empty unless `special`.
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> &[u8] {
        if !special && self.attr(id).has(TokenAttr::UNKNOWN | TokenAttr::CONTROL) {
            return &[];
        }
        self.token_bytes(id)
    }

    /// What a token adds to a generated reply: its piece without `special`, and nothing for a
    /// media marker ([`TokenAttr::MEDIA`]) either, as Hugging Face's `skip_special_tokens` and
    /// clients expect. The serving loop streams these; [`Self::token_to_piece`] stays llama.cpp's.
    pub fn output_piece(&self, id: TokenId) -> &[u8] {
        if self.attr(id).has(TokenAttr::MEDIA) {
            return &[];
        }
        self.token_to_piece(id, false)
    }

    /// The merge rank of a pair of BPE symbols; `key` is a scratch buffer.
    pub(super) fn merge_rank(&self, left: &str, right: &str, key: &mut String) -> Option<u32> {
        key.clear();
        key.push_str(left);
        key.push(' ');
        key.push_str(right);
        self.merges.find(key)
    }

    /// The token for one raw byte in SPM byte fallback; the unknown token for a vocabulary
    /// with neither `<0xXX>` nor the byte itself (where llama.cpp would abort).
    pub(super) fn byte_to_token(&self, b: u8) -> Option<TokenId> {
        self.byte_tokens[usize::from(b)].or(self.ids.unk)
    }

    /// The token whose text is this single byte (only ASCII can be: texts are UTF-8).
    pub(super) fn single_byte_token(&self, b: u8) -> Option<TokenId> {
        if b.is_ascii() {
            self.token_id(std::str::from_utf8(&[b]).ok()?)
        } else {
            None
        }
    }

    // ---- tokenizing ----

    /// Tokenizes text as llama.cpp's `llama_tokenize`.
    ///
    /// `add_special` adds BOS/EOS where the model asks for them (`add_bos`, `add_eos`).
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) become those
    /// tokens: right for chat templates, wrong for raw user text. User-defined tokens are always
    /// matched, as in llama.cpp.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        // WordPiece always frames a sequence with CLS (its BOS) ... SEP.
        let wpm = self.kind == VocabKind::Wpm;
        if add_special && (self.add_bos || wpm) {
            out.extend(self.ids.bos);
        }
        let mut prev_special = true;
        for fragment in self.partition(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(raw) => {
                    if self.kind == VocabKind::Spm {
                        // A space before text at the start and after a special token.
                        let mut escaped = String::with_capacity(raw.len() + 4);
                        if self.add_space_prefix && prev_special {
                            escaped.push('▁');
                        }
                        for c in raw.chars() {
                            if c == ' ' {
                                escaped.push('▁');
                            } else {
                                escaped.push(c);
                            }
                        }
                        spm::tokenize(self, &escaped, &mut out);
                    } else {
                        self.tokenize_raw(raw, &mut out);
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && wpm {
            out.extend(self.ids.sep);
        } else if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
        out
    }

    /// Tokenizes text with no special tokens in it (the model's algorithm alone).
    fn tokenize_raw(&self, text: &str, out: &mut Vec<TokenId>) {
        match (self.kind, &self.pre) {
            (VocabKind::Spm, _) => {
                let escaped = text.replace(' ', "▁");
                spm::tokenize(self, &escaped, out)
            }
            (VocabKind::Bpe, Some(pre)) => bpe::tokenize(self, pre, text, out),
            (VocabKind::Bpe, None) => {}
            (VocabKind::Wpm, _) => wpm::tokenize(self, text, out),
        }
    }

    /// Splits special and user-defined tokens out of the text (llama.cpp's
    /// `tokenizer_st_partition`): longest token text first, each one's occurrences left to right
    /// in what is still raw text, with the LSTRIP/RSTRIP attributes eating adjacent whitespace.
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let Some(matcher) = self.special_matcher.as_ref().filter(|_| !text.is_empty()) else {
            return if text.is_empty() {
                Vec::new()
            } else {
                vec![Fragment::Text(text)]
            };
        };
        // Every occurrence of every eligible special token, in the order they are carved out.
        let skip = TokenAttr::CONTROL | TokenAttr::UNKNOWN;
        let mut found: Vec<(usize, usize)> = matcher
            .find_overlapping_iter(text)
            .map(|m| (m.pattern().as_usize(), m.start()))
            .filter(|&(p, _)| parse_special || !self.attr(self.special_tokens[p]).has(skip))
            .collect();
        if found.is_empty() {
            return vec![Fragment::Text(text)];
        }
        found.sort_unstable();

        let bytes = text.as_bytes();
        let mut taken = vec![false; bytes.len()];
        let mut placed: Vec<(usize, usize, TokenId)> = Vec::new();
        for (p, start) in found {
            let id = self.special_tokens[p];
            let end = start + self.texts.get(id as usize).len();
            if taken[start..end].iter().any(|&t| t) {
                continue;
            }
            let attr = self.attr(id);
            if attr.has(TokenAttr::LSTRIP) {
                let mut l = start;
                while l > 0 && !taken[l - 1] && is_c_space(bytes[l - 1]) {
                    l -= 1;
                    taken[l] = true;
                }
            }
            taken[start..end].iter_mut().for_each(|t| *t = true);
            if attr.has(TokenAttr::RSTRIP) {
                let mut r = end;
                while r < bytes.len() && !taken[r] && is_c_space(bytes[r]) {
                    taken[r] = true;
                    r += 1;
                }
            }
            placed.push((start, end, id));
        }
        placed.sort_unstable();

        // Raw text is what no token took; stripped whitespace sits next to its token, so
        // between two tokens there is at most one run of raw text.
        let mut fragments = Vec::with_capacity(placed.len() * 2 + 1);
        let raw_between = |from: usize, to: usize, fragments: &mut Vec<Fragment<'t>>| {
            let s = (from..to).find(|&i| !taken[i]);
            if let Some(s) = s {
                let e = (s..to).find(|&i| taken[i]).unwrap_or(to);
                fragments.push(Fragment::Text(&text[s..e]));
            }
        };
        let mut pos = 0;
        for (start, end, id) in placed {
            raw_between(pos, start, &mut fragments);
            fragments.push(Fragment::Token(id));
            pos = end;
        }
        raw_between(pos, bytes.len(), &mut fragments);
        fragments
    }
}

/// C's `isspace` in the "C" locale, which llama.cpp's strip rules use.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}
