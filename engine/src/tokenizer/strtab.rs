//! Strings stored end to end in one buffer and found by their text through a hash table of
//! indices: a vocabulary's 100k-250k token texts (or merges) in two allocations, built in one
//! pass at load.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

#[derive(Default)]
pub(super) struct StrTable {
    buf: String,
    /// End offset of string `i` in `buf` (its start is the previous end).
    ends: Vec<usize>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl StrTable {
    pub fn with_capacity(n: usize, bytes: usize) -> StrTable {
        StrTable {
            buf: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: DefaultHashBuilder::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }

    pub fn find(&self, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        self.index.find(hash, |&i| self.get(i as usize) == s).copied()
    }

    /// Appends `s` as the next string; if it is already there, returns the earlier index
    /// instead (the new string is still appended, so indices stay positional, but lookups keep
    /// finding the first).
    pub fn push(&mut self, s: &str) -> Result<(), u32> {
        let i = self.ends.len() as u32;
        self.buf.push_str(s);
        self.ends.push(self.buf.len());
        let hash = self.hasher.hash_one(s);
        let (buf, ends) = (&self.buf, &self.ends);
        let get = |i: u32| {
            let i = i as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] };
            &buf[start..ends[i]]
        };
        if let Some(&first) = self.index.find(hash, |&j| get(j) == s) {
            return Err(first);
        }
        let hasher = &self.hasher;
        self.index.insert_unique(hash, i, |&j| hasher.hash_one(get(j)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_strings_and_reports_duplicates() {
        let mut t = StrTable::with_capacity(4, 16);
        assert_eq!(t.push("a"), Ok(()));
        assert_eq!(t.push("bc"), Ok(()));
        assert_eq!(t.push("a"), Err(0));
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(1), "bc");
        assert_eq!(t.find("bc"), Some(1));
        assert_eq!(t.find("a"), Some(0));
        assert_eq!(t.find("b"), None);
    }
}
