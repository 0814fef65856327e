//! WordPiece (llama.cpp's `llm_tokenizer_wpm`), for BERT-style embedding models.
//!
//! Text is normalized (lower-cased, accents stripped, as the file says) and split at whitespace
//! and around punctuation and CJK characters; each word, prefixed with `▁`, is covered greedily
//! by the longest tokens from the left. A word that cannot be covered becomes `[UNK]`.

use super::unicode::{flags, nfd_first, to_lower};
use super::Vocab;
use crate::TokenId;

pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
    for word in preprocess(text, vocab.lowercase(), vocab.strip_accents()) {
        let word = format!("▁{word}");
        let bytes = word.as_bytes();
        let n = bytes.len();
        let before = out.len();
        let mut i = 0;
        while i < n {
            let longest = (i + 1..=n.min(i + vocab.max_token_len() + 1))
                .rev()
                .find_map(|j| Some((j, vocab.token_id(std::str::from_utf8(&bytes[i..j]).ok()?)?)));
            match longest {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(before);
                    break;
                }
            }
        }
        if out.len() == before {
            out.extend(vocab.unk());
        }
    }
}

fn preprocess(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let mut cp = u32::from(c);
        if strip_accents {
            cp = nfd_first(cp);
        }
        let f = flags(cp);
        if f.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if cp == 0 || cp == 0xFFFD || f.is_control() || (strip_accents && f.is_mark()) {
            continue;
        }
        let mapped = if lowercase { to_lower(cp) } else { cp };
        let Some(ch) = char::from_u32(mapped) else {
            continue;
        };
        if f.is_punctuation() || (cp < 0x7F && f.is_symbol()) || is_chinese(cp) {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            words.last_mut().expect("never empty").push(ch);
            words.push(String::new());
        } else {
            words.last_mut().expect("never empty").push(ch);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

fn is_chinese(cp: u32) -> bool {
    matches!(cp,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        // 0x2B920, not 0x2B820, as in HF's and llama.cpp's code
        | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}
