//! Token ids back to text: whole sequences (llama.cpp's `llama_detokenize`) and streams.

use super::vocab::Vocab;
use crate::TokenId;

impl Vocab {
    /// The bytes of a token sequence, as llama.cpp's `llama_detokenize`.
    ///
    /// `remove_special` drops a leading BOS and a trailing EOS where the model adds them;
    /// `unparse_special` renders control tokens as their text. With `add_space_prefix` (SPM) the
    /// space the tokenizer put before the first word is removed again, unless the sequence
    /// started with a BOS that was dropped. BPE vocabularies that ask for it get
    /// `clean_up_tokenization_spaces` (" ." -> ".", " 's" -> "'s", ...).
    pub fn detokenize_bytes(
        &self,
        tokens: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> Vec<u8> {
        let mut tokens = tokens;
        let mut remove_space = self.add_space_prefix();
        if remove_special && self.add_bos() && tokens.first().is_some_and(|&t| Some(t) == self.bos()) {
            remove_space = false;
            tokens = &tokens[1..];
        }
        if remove_special && self.add_eos() && tokens.last().is_some_and(|&t| Some(t) == self.eos()) {
            tokens = &tokens[..tokens.len() - 1];
        }
        let mut text = Vec::with_capacity(tokens.len() * 4);
        for &t in tokens {
            let mut piece = self.token_to_piece(t, unparse_special);
            if remove_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
                remove_space = false;
            }
            text.extend_from_slice(piece);
        }
        if self.clean_spaces() {
            clean_up_spaces(&mut text);
        }
        text
    }

    /// [`Vocab::detokenize_bytes`] as a string; bytes that are not valid UTF-8 (a character cut
    /// short) become U+FFFD.
    pub fn detokenize(&self, tokens: &[TokenId], remove_special: bool, unparse_special: bool) -> String {
        String::from_utf8_lossy(&self.detokenize_bytes(tokens, remove_special, unparse_special)).into_owned()
    }
}

/// llama.cpp's three passes of Hugging Face's `clean_up_tokenization_spaces`.
fn clean_up_spaces(text: &mut Vec<u8>) {
    // " ?", " !", " .", " ,": drop the space.
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // " ' ": drop both spaces.
    let src = std::mem::take(&mut out);
    let mut i = 0;
    while i < src.len() {
        let x = src[i];
        if i > 0 && x == b'\'' && i + 1 < src.len() && src[i - 1] == b' ' && src[i + 1] == b' ' {
            out.pop();
            out.push(x);
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    // " 's", " 'm", " 're", " 've": join the contraction.
    let src = std::mem::take(&mut out);
    for (i, &x) in src.iter().enumerate() {
        if i > 0 && src[i - 1] == b' ' && x == b'\'' && i + 1 < src.len() {
            let x1 = src[i + 1];
            let x2 = src.get(i + 2).copied();
            if matches!(x1, b's' | b'm') || (matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')))) {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}

/// Turns generated tokens into text as they arrive, emitting only whole UTF-8 characters: a
/// character whose bytes come in several byte tokens is held back until it is complete. Bytes
/// that can never become valid UTF-8 are emitted as U+FFFD, and so is an incomplete character
/// left at [`Detokenizer::finish`].
///
/// Like llama.cpp's server, a stream does not apply `clean_up_tokenization_spaces`, which needs
/// to see ahead.
#[derive(Debug)]
pub struct Detokenizer<'v> {
    vocab: &'v Vocab,
    special: bool,
    strip_space: bool,
    pending: Vec<u8>,
}

impl<'v> Detokenizer<'v> {
    /// A stream of generated tokens (following a prompt): every piece is kept as it is.
    /// `special` renders control tokens as their text.
    pub fn new(vocab: &'v Vocab, special: bool) -> Self {
        Detokenizer {
            vocab,
            special,
            strip_space: false,
            pending: Vec::new(),
        }
    }

    /// A stream of a whole sequence from its start: as [`Vocab::detokenize`] (without
    /// `remove_special`), the space an SPM tokenizer adds before the text is removed from the
    /// first token's piece.
    pub fn for_sequence(vocab: &'v Vocab, special: bool) -> Self {
        Detokenizer {
            strip_space: vocab.add_space_prefix(),
            ..Self::new(vocab, special)
        }
    }

    /// Adds a token; returns the text that is now complete (often empty mid-character).
    pub fn push(&mut self, token: TokenId) -> String {
        let mut piece = self.vocab.token_to_piece(token, self.special);
        if self.strip_space {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
            self.strip_space = false;
        }
        self.pending.extend_from_slice(piece);
        self.take_complete()
    }

    /// Ends the stream: whatever is held back, with an incomplete character as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }

    /// Whether bytes of an incomplete character are being held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                    match e.error_len() {
                        // Invalid whatever follows: replace and go on.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &after[n..];
                        }
                        // The start of a character whose other bytes have not come yet.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }
}
