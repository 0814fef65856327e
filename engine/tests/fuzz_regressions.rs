//! Inputs the fuzz targets (`fuzz/`) found, replayed the way the targets run them, so a fixed
//! crash or hang stays fixed.

use engine::grammar::{Grammar, Matcher, TokenMask};

#[path = "../../fuzz/fuzz_targets/grammar_vocab.rs"]
mod grammar_vocab;

/// The `grammar` target's replay: the grammar text, then (after a NUL) one token pick per byte
/// (bytes below 0xf0 are themselves; the rest pick the multi-byte, end and special tokens); the
/// mask, `allows` and `accept` must agree at every step.
fn replay_grammar(input: &[u8]) {
    let nul = input.iter().position(|&b| b == 0).unwrap();
    let (text, feed) = (std::str::from_utf8(&input[..nul]).unwrap(), &input[nul + 1..]);
    let vocab = grammar_vocab::vocab();
    let g = Grammar::parse(text).unwrap();
    let mut m = Matcher::new(&g, vocab.clone()).unwrap();
    let mut mask = TokenMask::new(vocab.n_tokens());
    for &b in feed {
        let tok = if b < 0xf0 {
            u32::from(b)
        } else {
            256 + u32::from(b - 0xf0) % (grammar_vocab::EOG + 2 - 256)
        };
        m.fill_mask(&mut mask);
        let allowed = mask.contains(tok);
        assert_eq!(allowed, m.allows(tok), "mask and allows disagree on token {tok}");
        assert_eq!(
            allowed,
            m.accept(tok).is_ok(),
            "mask and accept disagree on token {tok}"
        );
        if !allowed {
            break;
        }
    }
}

/// `grammar` ran for minutes on this input (a token element under 125 nested `+`: the parse
/// stacks grew exponentially) until positions were bounded by `grammar::MAX_STACKS`.
#[test]
fn grammar_timeout_nested_token_repetition() {
    let mut input = b"root ::= [^abc\\n]+ \"\". . [a-0]{0,8} !<[257]>".to_vec();
    input.extend(std::iter::repeat_n(b'+', 125));
    input.extend(b"? \"x\"{2,5}\n\0");
    input.extend([
        123, 35, 32, 60, 0, 9, 91, 50, 53, 54, 93, 62, 6, 1, 0, 0, 32, 91, 56, 0, 0, 99, 48, 45, 52, 95, 93,
        63, 32, 120, 123, 54, 125, 32, 121, 123, 49, 40, 51, 125, 32, 122, 123, 50, 44, 125, 10, 120, 32, 58,
        58, 61, 32, 34, 120, 34, 0, 34, 123, 255, 255, 48, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 35,
    ]);
    assert_eq!(input.len(), 262, "the artifact's size");
    replay_grammar(&input);
}

/// Two inputs `grammar` reported as slow after the bound (12 s each under AddressSanitizer on
/// a loaded machine; about 0.6-0.9 s in a release build): `[^\x00]{1,8}` repeated 245 times,
/// where every split of the text into 245 groups is a parse. Each position stays within
/// `grammar::MAX_STACKS`, so the work per token is bounded; these keep it that way.
#[test]
fn grammar_slow_long_bounded_repetitions() {
    let inputs: [&[u8]; 2] = [
        b"root ::= <[256]> [^\\x00]{1,8} {245}\n\x00\xf0\xf1(\t   # \xf5\xf6\xf7\xf8\xf9\xfat ::= <root ::55555555555555555555555555555555555555555555555555555555555555555555555555555555555555555=  ereeting \"  ::= <[2[256]56> Y]^>\\x",
        b"root ::= <[256]> [^gx00]{1,8} {245}\n\x00\xf0\xf1(\t   # \xf5\xf8\xf9\xf6t\xfa\xf7 ::= <root ::=  ereetin[ \" \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00 ::= <\x9d2[256]56> Y]^>\\-",
    ];
    for input in inputs {
        replay_grammar(input);
    }
}
