//! The bookkeeping of a pool of KV cells: which position each cell holds and for which sequences.
//!
//! A cell is one token slot. It may belong to several sequences at once (after `seq_cp`, a shared
//! prompt prefix is stored once). A pool with a sliding window (`n_swa`) frees a sequence's cells
//! once their tokens have left its window, so such a pool needs only about `n_swa` cells per
//! sequence plus one batch, whatever the context length.
//!
//! New tokens take the cells after the last one in use; when too few are left, the cells in use
//! are first moved to the front, in order ([`Cells::make_room`]; the cache moves their keys and
//! values). So each sequence's cells are always in the order of its positions: attention adds a
//! query's cells up in cell order, and a reply must not depend on where a reused pool happened
//! to wrap (with cells reused in place, Gemma 3's answers past its 512-token window changed with
//! the batch size).

use crate::{Error, Result};

/// A position in a sequence.
pub type Pos = i32;
/// A sequence id (below the context's `n_seq_max`, at most [`MAX_SEQ`]).
pub type SeqId = u32;
/// The most sequences one context can hold (one bit each in a cell's sequence set).
pub const MAX_SEQ: u32 = 64;

const EMPTY: Pos = -1;

#[derive(Clone, Debug)]
pub struct Cells {
    pos: Vec<Pos>,
    seqs: Vec<u64>,
    /// Sliding window: a query at position `p` sees keys at `p0` only if `p - p0 < n_swa`.
    n_swa: Option<u32>,
    used: usize,
}

impl Cells {
    /// `size` empty cells; `None` when the memory for them cannot be had (the size comes from
    /// a request).
    pub fn new(size: usize, n_swa: Option<u32>) -> Option<Cells> {
        let (mut pos, mut seqs) = (Vec::new(), Vec::new());
        pos.try_reserve_exact(size).ok()?;
        seqs.try_reserve_exact(size).ok()?;
        pos.resize(size, EMPTY);
        seqs.resize(size, 0);
        Some(Cells {
            pos,
            seqs,
            n_swa,
            used: 0,
        })
    }

    pub fn size(&self) -> usize {
        self.pos.len()
    }

    pub fn used(&self) -> usize {
        self.used
    }

    pub fn n_swa(&self) -> Option<u32> {
        self.n_swa
    }

    pub fn pos(&self, cell: usize) -> Option<Pos> {
        (self.seqs[cell] != 0).then_some(self.pos[cell])
    }

    fn has(&self, cell: usize, seq: SeqId) -> bool {
        self.seqs[cell] & (1u64 << seq) != 0
    }

    fn free(&mut self, cell: usize) {
        if self.seqs[cell] != 0 {
            self.used -= 1;
        }
        self.seqs[cell] = 0;
        self.pos[cell] = EMPTY;
    }

    pub fn seq_pos_max(&self, seq: SeqId) -> Option<Pos> {
        (0..self.size())
            .filter(|&c| self.has(c, seq))
            .map(|c| self.pos[c])
            .max()
    }

    pub fn seq_pos_min(&self, seq: SeqId) -> Option<Pos> {
        (0..self.size())
            .filter(|&c| self.has(c, seq))
            .map(|c| self.pos[c])
            .min()
    }

    /// Number of cells holding `seq`.
    pub fn seq_count(&self, seq: SeqId) -> usize {
        (0..self.size()).filter(|&c| self.has(c, seq)).count()
    }

    /// Whether a query at `p1` may not see a key at `p0` because of the sliding window.
    fn out_of_window(&self, p0: Pos, p1: Pos) -> bool {
        self.n_swa
            .is_some_and(|w| i64::from(p1) - i64::from(p0) >= i64::from(w))
    }

    /// One past the last cell in use: new tokens take the cells from here on.
    fn end(&self) -> usize {
        self.seqs.iter().rposition(|&s| s != 0).map_or(0, |c| c + 1)
    }

    /// Makes room after the last cell in use for `tokens` (the next batch), if there is not
    /// enough: frees, for each sequence, the cells that have left the window of its next
    /// position (and so of every later one), then moves the cells in use to the front, keeping
    /// their order. Returns the moves `(from, to)`, in the order to make them (each `to < from`):
    /// the caller moves the cells' keys and values likewise.
    pub fn make_room(&mut self, tokens: &[(SeqId, Pos)]) -> Vec<(u32, u32)> {
        if self.size() - self.end() >= tokens.len() {
            return Vec::new();
        }
        if let Some(w) = self.n_swa {
            let mut next = [EMPTY; MAX_SEQ as usize];
            for c in 0..self.size() {
                let mut seqs = self.seqs[c];
                while seqs != 0 {
                    let s = seqs.trailing_zeros() as usize;
                    next[s] = next[s].max(self.pos[c].saturating_add(1));
                    seqs &= seqs - 1;
                }
            }
            for (s, &next) in next.iter().enumerate() {
                // Positions up to `next - w` are outside the window of `next` and later ones.
                let cut = i64::from(next) - i64::from(w) + 1;
                if next != EMPTY && cut > 0 {
                    self.seq_rm(Some(s as SeqId), 0, cut as Pos);
                }
            }
        }
        let mut moves = Vec::new();
        let mut to = 0;
        for from in 0..self.size() {
            if self.seqs[from] == 0 {
                continue;
            }
            if from != to {
                self.pos[to] = self.pos[from];
                self.seqs[to] = self.seqs[from];
                self.pos[from] = EMPTY;
                self.seqs[from] = 0;
                moves.push((from as u32, to as u32));
            }
            to += 1;
        }
        moves
    }

    /// Takes one cell for each `(seq, pos)` token, in order, after the last cell in use, and
    /// records them ([`make_room`](Self::make_room) first). Nothing is taken if they do not fit.
    pub fn allocate(&mut self, tokens: &[(SeqId, Pos)]) -> Result<Vec<u32>> {
        let start = self.end();
        if self.size() - start < tokens.len() {
            return Err(Error::KvCacheFull(format!(
                "no room for {} more tokens ({} cells, {} in use)",
                tokens.len(),
                self.size(),
                self.used
            )));
        }
        let mut out = Vec::with_capacity(tokens.len());
        for (c, &(seq, pos)) in (start..).zip(tokens) {
            self.pos[c] = pos;
            self.seqs[c] = 1u64 << seq;
            self.used += 1;
            out.push(c as u32);
        }
        Ok(out)
    }

    /// The cells a query of `seq` at `pos` attends to: its sequence's cells at or before `pos`,
    /// and inside the window if the pool has one.
    pub fn visible(&self, seq: SeqId, pos: Pos, out: &mut Vec<u32>) {
        out.clear();
        for c in 0..self.size() {
            if self.has(c, seq) && self.pos[c] <= pos && !self.out_of_window(self.pos[c], pos) {
                out.push(c as u32);
            }
        }
    }

    /// Removes `seq` (every sequence if `None`) from the cells with positions in `[p0, p1)`.
    pub fn seq_rm(&mut self, seq: Option<SeqId>, p0: Pos, p1: Pos) {
        for c in 0..self.size() {
            if self.seqs[c] == 0 || self.pos[c] < p0 || self.pos[c] >= p1 {
                continue;
            }
            match seq {
                None => self.free(c),
                Some(s) => {
                    if self.has(c, s) {
                        self.seqs[c] &= !(1u64 << s);
                        if self.seqs[c] == 0 {
                            self.used -= 1;
                            self.pos[c] = EMPTY;
                        }
                    }
                }
            }
        }
    }

    /// Adds `dst` to the cells of `src` with positions in `[p0, p1)` (no data is copied).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, p0: Pos, p1: Pos) {
        for c in 0..self.size() {
            if self.has(c, src) && self.pos[c] >= p0 && self.pos[c] < p1 {
                self.seqs[c] |= 1u64 << dst;
            }
        }
    }

    /// Adds `delta` to the positions of `seq`'s cells in `[p0, p1)`; cells pushed below position 0
    /// are freed. Returns the cells whose keys must be rotated by `delta`.
    pub fn seq_add(&mut self, seq: SeqId, p0: Pos, p1: Pos, delta: Pos) -> Vec<u32> {
        let mut moved = Vec::new();
        if delta == 0 {
            return moved;
        }
        for c in 0..self.size() {
            if self.has(c, seq) && self.pos[c] >= p0 && self.pos[c] < p1 {
                let p = self.pos[c].saturating_add(delta);
                if p < 0 {
                    self.free(c);
                } else {
                    self.pos[c] = p;
                    moved.push(c as u32);
                }
            }
        }
        moved
    }

    pub fn clear(&mut self) {
        self.pos.fill(EMPTY);
        self.seqs.fill(0);
        self.used = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(seq: SeqId, range: std::ops::Range<Pos>) -> Vec<(SeqId, Pos)> {
        range.map(|p| (seq, p)).collect()
    }

    #[test]
    fn allocate_remove_copy_shift() {
        let mut c = Cells::new(8, None).unwrap();
        c.allocate(&toks(0, 0..5)).unwrap();
        assert_eq!(
            (c.used(), c.seq_pos_max(0), c.seq_pos_min(0)),
            (5, Some(4), Some(0))
        );
        c.seq_cp(0, 1, 0, 3);
        assert_eq!(c.seq_pos_max(1), Some(2));
        assert_eq!(c.used(), 5, "copied cells are shared");
        c.seq_rm(Some(0), 1, 3);
        assert_eq!(c.used(), 5, "cells 1 and 2 still belong to sequence 1");
        let mut v = Vec::new();
        c.visible(0, 10, &mut v);
        assert_eq!(v, [0, 3, 4]);
        let moved = c.seq_add(0, 3, Pos::MAX, -2);
        assert_eq!(moved, [3, 4]);
        assert_eq!(c.seq_pos_max(0), Some(2));
        c.visible(0, 1, &mut v);
        assert_eq!(v, [0, 3], "causal: positions 0 and 1");
        assert!(c.allocate(&toks(2, 0..4)).is_err(), "only 3 free cells");
        assert_eq!(c.used(), 5, "a failed allocation leaves no trace");
        c.clear();
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn sliding_window_pool_reuses_cells_that_left_the_window() {
        // Window 4, pool of 4 + batch 2 cells.
        let mut c = Cells::new(6, Some(4)).unwrap();
        for chunk in 0..10 {
            let batch = toks(0, chunk * 2..chunk * 2 + 2);
            c.make_room(&batch);
            c.allocate(&batch).unwrap();
            let max = c.seq_pos_max(0).unwrap();
            let mut v = Vec::new();
            c.visible(0, max, &mut v);
            let mut seen: Vec<Pos> = v.iter().map(|&i| c.pos(i as usize).unwrap()).collect();
            seen.sort();
            let want: Vec<Pos> = ((max - 3).max(0)..=max).collect();
            assert_eq!(seen, want, "the last query sees exactly its window");
            let min = c.seq_pos_min(0).unwrap();
            assert_eq!(c.seq_count(0) as Pos, max - min + 1, "positions stay contiguous");
        }
    }

    /// Whatever the batch sizes, a query's cells come in the order of their positions (the
    /// order attention adds them up in), in a windowed pool and in a full one shared by
    /// sequences that are cut back. Cells reused in place broke that when the pool wrapped.
    #[test]
    fn cells_stay_in_position_order() {
        let in_order = |c: &Cells, seq: SeqId| {
            let Some(max) = c.seq_pos_max(seq) else { return };
            let mut v = Vec::new();
            c.visible(seq, max, &mut v);
            let pos: Vec<Pos> = v.iter().map(|&i| c.pos(i as usize).unwrap()).collect();
            assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}");
        };
        for batch in [1, 3, 5, 8] {
            let mut c = Cells::new(8 + batch, Some(8)).unwrap();
            let mut moved = 0;
            for p in (0..100).step_by(batch) {
                let b = toks(0, p..p + batch as Pos);
                moved += c.make_room(&b).len();
                c.allocate(&b).unwrap();
                in_order(&c, 0);
            }
            assert!(moved > 0, "the pool wrapped");
        }
        // Two sequences in a full pool, one cut back now and then.
        let mut c = Cells::new(64, None).unwrap();
        let mut next = [0 as Pos; 2];
        for round in 0..200 {
            let s = (round % 2) as SeqId;
            if round % 7 == 0 && next[0] > 4 {
                next[0] -= 4;
                c.seq_rm(Some(0), next[0], Pos::MAX);
            }
            if next[s as usize] >= 28 {
                next[s as usize] = 0;
                c.seq_rm(Some(s), 0, Pos::MAX);
            }
            let b = toks(s, next[s as usize]..next[s as usize] + 3);
            next[s as usize] += 3;
            c.make_room(&b);
            c.allocate(&b).unwrap();
            in_order(&c, 0);
            in_order(&c, 1);
        }
    }
}
