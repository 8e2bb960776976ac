//! The matcher: one generation's parse state, answering "which tokens are legal next?".
//!
//! A [`GrammarMatcher`] holds an [`Arc<CompiledGrammar>`] (shared, immutable apart from its
//! lazily filled mask cache) and its own Earley sets. Filling a mask:
//!
//! 1. take the scannable items of the latest Earley set and their states' cached masks;
//! 2. union their accepted sets into the output row (a copy for the first one);
//! 3. check each uncertain token not already allowed by pushing its bytes through this
//!    matcher's real parse state, in byte-sorted order so neighbours share prefixes, and
//!    popping back;
//! 4. allow the stop tokens if the root rule can end here.
//!
//! A fill that needed step 3 is remembered with the latest set's items, their origins
//! named by set uid. Inside a JSON string every token loops the string state back onto
//! itself, so the next latest set has the same items with the same origins: the parse
//! configuration is the same, and so is the mask, which is then copied instead of
//! re-checking the ~100 tokens (`",`, `"}`, …) whose legality depends on the context.

pub(crate) mod earley;

use crate::automata::ByteSet;
use crate::bitmask::set_bit;
use crate::compiler::{Accepted, CompiledGrammar};
use crate::error::{Error, Result};
use earley::Earley;
use std::sync::Arc;

/// Longest jump-forward string [`GrammarMatcher::find_jump_forward_string`] returns.
pub const MAX_JUMP_FORWARD_BYTES: usize = 4096;

/// One accepted step in the history: where it began, and whether it was a stop token.
#[derive(Debug, Clone, Copy)]
struct Step {
    depth: u32,
    stop: bool,
}

/// The last mask that needed run-time checks, and the configuration it belongs to.
#[derive(Debug, Default)]
struct MaskMemo {
    /// `(state, uid of the origin set)` of each item of the latest set, a scannable state
    /// named by the state it behaves like for every token. Set uids are never reused
    /// within one matcher's lineage (rollback and reset included), so equal keys mean
    /// alike items over the same earlier sets: the same future as far as a token reaches.
    key: Vec<(u32, u64)>,
    row: Vec<u32>,
    all: bool,
}

impl Clone for MaskMemo {
    /// Forks start without it: forking stays a copy of a few small vectors.
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// The parse state of one generation. Cheap to [`fork`](Self::fork); unlimited rollback.
#[derive(Debug, Clone)]
pub struct GrammarMatcher {
    compiled: Arc<CompiledGrammar>,
    parser: Earley,
    history: Vec<Step>,
    terminated: bool,
    /// Scratch: states already merged in the current fill.
    scratch_states: Vec<u32>,
    scratch_ranks: Vec<u32>,
    scratch_words: Vec<u32>,
    scratch_key: Vec<(u32, u64)>,
    memo: MaskMemo,
}

impl GrammarMatcher {
    /// A matcher at the start of the grammar.
    pub fn new(compiled: Arc<CompiledGrammar>) -> Self {
        let parser = Earley::new(compiled.automata(), compiled.automata().root_start().0);
        Self {
            compiled,
            parser,
            history: Vec::new(),
            terminated: false,
            scratch_states: Vec::new(),
            scratch_ranks: Vec::new(),
            scratch_words: Vec::new(),
            scratch_key: Vec::new(),
            memo: MaskMemo::default(),
        }
    }

    /// The compiled grammar this matcher runs.
    pub fn compiled(&self) -> &Arc<CompiledGrammar> {
        &self.compiled
    }

    /// Model vocabulary size (bits per mask row).
    pub fn vocab_size(&self) -> usize {
        self.compiled.tokenizer().vocab_size()
    }

    /// True if the output so far is a complete sentence (a stop token would be accepted).
    pub fn can_terminate(&self) -> bool {
        !self.terminated && self.parser.can_end()
    }

    /// True once a stop token was accepted.
    pub fn is_terminated(&self) -> bool {
        self.terminated
    }

    /// Number of accepted steps (tokens and `accept_bytes` calls) that can be rolled back.
    pub fn num_steps(&self) -> usize {
        self.history.len()
    }

    /// Accepts one token. A rejected token returns an error and leaves the state unchanged.
    pub fn accept_token(&mut self, id: u32) -> Result<()> {
        let tok = self.compiled.tokenizer().clone();
        if id as usize >= tok.vocab_size() {
            return Err(Error::InvalidTokenId { id, vocab_size: tok.vocab_size() });
        }
        if self.terminated {
            return Err(Error::Terminated);
        }
        if tok.stop_tokens().contains(&id) {
            if !self.parser.can_end() {
                return Err(Error::TokenRejected { id });
            }
            self.history.push(Step { depth: self.parser.depth() as u32, stop: true });
            self.terminated = true;
            return Ok(());
        }
        let bytes = tok.token_bytes(id);
        if tok.is_special(id) || bytes.is_empty() {
            return Err(Error::TokenRejected { id });
        }
        match self.push_bytes(bytes) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::TokenRejected { id }),
        }
    }

    /// Accepts raw bytes as one step (e.g. a jump-forward string); all or nothing.
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        if self.terminated {
            return Err(Error::Terminated);
        }
        self.push_bytes(bytes)
    }

    /// Accepts a string as one step; see [`Self::accept_bytes`].
    pub fn accept_string(&mut self, s: &str) -> Result<()> {
        self.accept_bytes(s.as_bytes())
    }

    fn push_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let start = self.parser.depth();
        let a = self.compiled.automata();
        for (i, &b) in bytes.iter().enumerate() {
            if !self.parser.push(a, b) {
                self.parser.truncate(start);
                return Err(Error::BytesRejected { offset: i });
            }
        }
        self.history.push(Step { depth: start as u32, stop: false });
        self.parser.maybe_freeze();
        Ok(())
    }

    /// Undoes the last `n` steps.
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.history.len() {
            return Err(Error::Rollback { requested: n, available: self.history.len() });
        }
        if n == 0 {
            return Ok(());
        }
        let keep = self.history.len() - n;
        let step = self.history[keep];
        self.parser.truncate(step.depth as usize);
        self.history.truncate(keep);
        self.terminated = self.history.last().is_some_and(|s| s.stop);
        Ok(())
    }

    /// Back to the start of the grammar.
    pub fn reset(&mut self) {
        self.parser.truncate(0);
        self.history.clear();
        self.terminated = false;
    }

    /// An independent copy sharing the compiled grammar (and its mask cache) and the
    /// older parse history: the cost is bounded by a few hundred Earley sets, not by the
    /// length of the output.
    pub fn fork(&self) -> Self {
        self.clone()
    }

    /// Writes the allowed-token mask into `row` (`ceil(vocab_size / 32)` words, bit set =
    /// allowed). Returns `true` if the row is all ones (callers may skip applying it).
    pub fn fill_next_token_bitmask(&mut self, row: &mut [u32]) -> Result<bool> {
        let tok = self.compiled.tokenizer().clone();
        let words = tok.vocab_size().div_ceil(32);
        if row.len() != words {
            return Err(Error::Shape(format!(
                "bitmask row has {} words; vocabulary size {} needs {words}",
                row.len(),
                tok.vocab_size()
            )));
        }
        if self.terminated {
            row.fill(0);
            return Ok(false);
        }
        let compiled = self.compiled.clone();
        let a = compiled.automata();
        // A scannable state is named by the state it behaves like for every token (the
        // positions of a long bounded string share one), so the memo also serves the
        // next position.
        self.scratch_key.clear();
        for it in self.parser.last_set() {
            let state = if a.scans(it.state) { compiled.alike(it.state) } else { it.state };
            self.scratch_key.push((state, self.parser.uid_at(it.origin)));
        }
        if self.memo.key == self.scratch_key && self.memo.row.len() == row.len() {
            row.copy_from_slice(&self.memo.row);
            return Ok(self.memo.all);
        }
        self.scratch_states.clear();
        for it in self.parser.last_set() {
            if a.scans(it.state) && !self.scratch_states.contains(&it.state) {
                self.scratch_states.push(it.state);
            }
        }
        self.scratch_ranks.clear();
        for i in 0..self.scratch_states.len() {
            let m = compiled.mask(self.scratch_states[i]);
            // The first state's mask overwrites the row; later ones are OR-ed in.
            let first = i == 0;
            match &m.accepted {
                Accepted::List(ids) => {
                    if first {
                        row.fill(0);
                    }
                    ids.iter().for_each(|&id| set_bit(row, id));
                }
                Accepted::Bitset(w) if first => row.copy_from_slice(w),
                Accepted::Bitset(w) => row.iter_mut().zip(w.iter()).for_each(|(r, w)| *r |= w),
                Accepted::AllExcept(ex) if first => {
                    row.copy_from_slice(tok.normal_words());
                    ex.iter().for_each(|&id| row[id as usize / 32] &= !(1 << (id % 32)));
                }
                Accepted::Delta { base, flips } if first => {
                    row.copy_from_slice(base);
                    flips.iter().for_each(|&id| row[id as usize / 32] ^= 1 << (id % 32));
                }
                Accepted::Delta { base, flips } => {
                    self.scratch_words.clear();
                    self.scratch_words.extend_from_slice(base);
                    let w = &mut self.scratch_words;
                    flips.iter().for_each(|&id| w[id as usize / 32] ^= 1 << (id % 32));
                    row.iter_mut().zip(w.iter()).for_each(|(r, w)| *r |= w);
                }
                Accepted::AllExcept(ex) => {
                    self.scratch_words.clear();
                    self.scratch_words.extend_from_slice(tok.normal_words());
                    let w = &mut self.scratch_words;
                    ex.iter().for_each(|&id| w[id as usize / 32] &= !(1 << (id % 32)));
                    row.iter_mut().zip(w.iter()).for_each(|(r, w)| *r |= w);
                }
            }
            self.scratch_ranks.extend_from_slice(&m.uncertain);
        }
        if self.scratch_states.is_empty() {
            row.fill(0);
        }
        if self.scratch_states.len() > 1 {
            // Concatenated sorted runs: the stable sort merges runs in O(n log k).
            self.scratch_ranks.sort();
            self.scratch_ranks.dedup();
        }
        let checked = !self.scratch_ranks.is_empty();
        self.check_uncertain(row);
        if self.parser.can_end() {
            for &s in tok.stop_tokens() {
                set_bit(row, s);
            }
        }
        let full_words = tok.vocab_size() / 32;
        let rem = tok.vocab_size() % 32;
        let all = row[..full_words].iter().all(|&w| w == u32::MAX)
            && (rem == 0 || row[full_words] == (1u32 << rem) - 1);
        // Remembering costs a row copy: worth it only when the fill ran tokens through
        // the parser.
        if checked {
            std::mem::swap(&mut self.memo.key, &mut self.scratch_key);
            self.memo.row.clear();
            self.memo.row.extend_from_slice(row);
            self.memo.all = all;
        }
        Ok(all)
    }

    /// Runs each uncertain token (not yet allowed) through the live parse state.
    fn check_uncertain(&mut self, row: &mut [u32]) {
        if self.scratch_ranks.is_empty() {
            return;
        }
        let compiled = self.compiled.clone();
        let tok = compiled.tokenizer();
        let a = compiled.automata();
        let trie = tok.trie();
        let base = self.parser.depth();
        let mut prev: &[u8] = &[];
        // Bytes of `prev` that are currently pushed.
        let mut pushed = 0usize;
        // `prev[..dead]` cannot be parsed (0: no such prefix): a token starting with it
        // fails without a push (sorted order puts the tokens sharing it next).
        let mut dead = 0usize;
        for &rank in &self.scratch_ranks {
            let id = trie.token_ids[rank as usize];
            if row[id as usize / 32] >> (id % 32) & 1 == 1 {
                continue;
            }
            let bytes = trie.bytes_of(rank);
            let lcp = bytes.iter().zip(prev).take_while(|(x, y)| x == y).count();
            if dead > 0 && lcp >= dead {
                continue;
            }
            let keep = lcp.min(pushed);
            self.parser.truncate(base + keep);
            pushed = keep;
            dead = 0;
            let mut ok = true;
            for &b in &bytes[keep..] {
                if !self.parser.push(a, b) {
                    ok = false;
                    dead = pushed + 1;
                    break;
                }
                pushed += 1;
            }
            if ok {
                set_bit(row, id);
            }
            prev = bytes;
        }
        self.parser.truncate(base);
    }

    /// Bytes the grammar forces next (empty if there is a choice, including the choice to
    /// stop). The state is unchanged.
    pub fn find_jump_forward_string(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.terminated {
            return out;
        }
        let compiled = self.compiled.clone();
        let a = compiled.automata();
        let base = self.parser.depth();
        while out.len() < MAX_JUMP_FORWARD_BYTES && !self.parser.can_end() {
            let mut next = ByteSet::default();
            for it in self.parser.last_set() {
                if a.scans(it.state) {
                    next.union(&a.out_bytes(it.state));
                }
            }
            if next.len() != 1 {
                break;
            }
            let Some(b) = (0..=255u8).find(|&b| next.contains(b)) else { break };
            if !self.parser.push(a, b) {
                break;
            }
            out.push(b);
        }
        self.parser.truncate(base);
        out
    }

    /// Heap bytes of this matcher's own state (not the shared compiled grammar).
    pub fn memory_bytes(&self) -> usize {
        self.parser.memory_bytes() + self.history.capacity() * 8
    }
}
