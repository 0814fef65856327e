//! Unicode facts as llama.cpp uses them: code point categories (`\p{L}`, `\p{N}`, ...), `\s`,
//! simple lower-casing, first NFD code point, and GPT-2's byte-to-character mapping.
//!
//! The tables (`unicode_tables.rs`) are generated from Unicode 15.1, the version llama.cpp's
//! `unicode-data.cpp` was made from, so that rare characters fall in the same category there and
//! here and the same text gives the same tokens.

use std::sync::OnceLock;

use super::unicode_tables::{CATEGORY_RANGES, LOWERCASE, NFD_FIRST, WHITE_SPACE};

/// The category and whitespace flags of one code point, with llama.cpp's bit values.
///
/// Every code point has exactly one category bit; a position outside the text being split has no
/// bits at all (`CpFlags::NONE`), which the splitters rely on to stop at the end of a piece.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CpFlags(u16);

impl CpFlags {
    pub const NONE: CpFlags = CpFlags(0);
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    #[cfg(test)]
    pub const SEPARATOR: u16 = 0x0008;
    pub const MARK: u16 = 0x0010;
    pub const PUNCTUATION: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    pub const CONTROL: u16 = 0x0080;
    pub const CATEGORIES: u16 = 0x00FF;
    pub const WHITESPACE: u16 = 0x0100;

    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_mark(self) -> bool {
        self.0 & Self::MARK != 0
    }
    pub fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    pub fn is_symbol(self) -> bool {
        self.0 & Self::SYMBOL != 0
    }
    pub fn is_control(self) -> bool {
        self.0 & Self::CONTROL != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    /// The one category bit (`UNDEFINED`, `NUMBER`, ... `CONTROL`).
    pub fn category(self) -> u16 {
        self.0 & Self::CATEGORIES
    }
}

fn lookup(cp: u32) -> CpFlags {
    if cp >= 0x110000 {
        return CpFlags(CpFlags::UNDEFINED);
    }
    let i = CATEGORY_RANGES.partition_point(|&(start, _)| start <= cp) - 1;
    let mut bits = u16::from(CATEGORY_RANGES[i].1);
    if WHITE_SPACE.binary_search(&cp).is_ok() {
        bits |= CpFlags::WHITESPACE;
    }
    CpFlags(bits)
}

/// The flags of a code point: a table for Latin-1, a binary search of the ranges beyond.
pub(crate) fn flags(cp: u32) -> CpFlags {
    static LATIN1: OnceLock<[CpFlags; 256]> = OnceLock::new();
    if cp < 256 {
        let table = LATIN1.get_or_init(|| std::array::from_fn(|c| lookup(c as u32)));
        table[cp as usize]
    } else {
        lookup(cp)
    }
}

/// Simple (one code point) lower-casing; code points without a mapping are returned unchanged.
pub(crate) fn to_lower(cp: u32) -> u32 {
    match LOWERCASE.binary_search_by_key(&cp, |&(from, _)| from) {
        Ok(i) => LOWERCASE[i].1,
        Err(_) => cp,
    }
}

/// The first code point of the canonical decomposition (NFD) of `cp`: the base letter of an
/// accented one. This is all of NFD that llama.cpp's WordPiece accent stripping uses.
pub(crate) fn nfd_first(cp: u32) -> u32 {
    let i = NFD_FIRST.partition_point(|&(first, _, _)| first <= cp);
    if i > 0 {
        let (first, last, base) = NFD_FIRST[i - 1];
        if (first..=last).contains(&cp) {
            return base;
        }
    }
    cp
}

/// GPT-2's `bytes_to_unicode`: the printable Latin-1 bytes stand for themselves, the other 68
/// bytes are given the code points U+0100.. in byte order, so every byte is a visible character.
pub(crate) fn byte_to_char(b: u8) -> char {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = ['\0'; 256];
        let mut next = 0x100u32;
        for (b, slot) in table.iter_mut().enumerate() {
            *slot = if is_printable_latin1(b as u8) {
                char::from(b as u8)
            } else {
                let c = char::from_u32(next).expect("U+0100..U+0143 are characters");
                next += 1;
                c
            };
        }
        table
    });
    table[usize::from(b)]
}

/// The inverse of [`byte_to_char`]; `None` for characters outside GPT-2's mapping.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<[u8; 0x44]> = OnceLock::new();
    let cp = u32::from(c);
    if cp < 0x100 {
        let b = cp as u8;
        return is_printable_latin1(b).then_some(b);
    }
    let table = TABLE.get_or_init(|| {
        let mut table = [0u8; 0x44];
        let mut n = 0;
        for b in 0..=255u8 {
            if !is_printable_latin1(b) {
                table[n] = b;
                n += 1;
            }
        }
        table
    });
    table.get((cp - 0x100) as usize).copied()
}

fn is_printable_latin1(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_match_llama_cpp() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('7' as u32).is_number());
        assert!(flags(' ' as u32).is_whitespace());
        assert_eq!(flags(' ' as u32).category(), CpFlags::SEPARATOR);
        assert!(flags('\n' as u32).is_whitespace());
        assert!(!flags(0x1C).is_whitespace(), "not White_Space, as in llama.cpp");
        assert!(flags('~' as u32).is_symbol());
        assert!(flags('_' as u32).is_punctuation());
        assert!(flags(0x301).is_mark());
        assert!(flags(0x3000).is_whitespace());
        assert!(flags(0x4E2D).is_letter()); // 中
        assert!(flags(0x2EBF0).is_letter(), "CJK extension I is in Unicode 15.1");
        assert_eq!(
            flags(0x1C89).category(),
            CpFlags::UNDEFINED,
            "added only in Unicode 16"
        );
        assert_eq!(
            flags(0xE000).category(),
            CpFlags::CONTROL,
            "private use counts as a control character"
        );
        assert_eq!(flags(0x10FFFF).category(), CpFlags::UNDEFINED);
    }

    #[test]
    fn lower_and_nfd() {
        assert_eq!(to_lower('A' as u32), 'a' as u32);
        assert_eq!(to_lower(0x130), 'i' as u32);
        assert_eq!(to_lower('a' as u32), 'a' as u32);
        assert_eq!(nfd_first('é' as u32), 'e' as u32);
        assert_eq!(nfd_first('e' as u32), 'e' as u32);
    }

    #[test]
    fn gpt2_byte_map_round_trips() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
        assert_eq!(char_to_byte(' '), None);
    }
}
