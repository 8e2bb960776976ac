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

mod draft;
pub(crate) mod earley;
mod jump;
mod spelling;

pub(crate) use draft::{
    accept_tokens as draft_accept, fill_draft_chain as draft_chain, fill_draft_tree as draft_tree,
    validate_tokens as draft_validate,
};
pub use draft::{ChainFill, DraftTree, TreeFill, MAX_DRAFT_TREE_NODES};
pub use jump::{JumpForward, TextEncoder, MAX_RETOKENIZED};

use crate::bitmask::{set_bit, TokenBitmask};
use crate::budget::BudgetError;
use crate::compiler::{Accepted, CompiledGrammar};
use crate::error::{Error, Result};
use crate::tokenizer::TokenizerInfo;
use earley::Earley;
use std::sync::Arc;

/// Longest jump-forward string [`GrammarMatcher::find_jump_forward_string`] returns.
pub const MAX_JUMP_FORWARD_BYTES: usize = 4096;

/// One accepted step in the history: where it began, the token it was (for
/// [`GrammarMatcher::jump_forward_tokens`]; [`Step::BYTES`] for `accept_bytes`), and
/// whether it was a stop token.
#[derive(Debug, Clone, Copy)]
struct Step {
    depth: u32,
    token: u32,
    stop: bool,
}

impl Step {
    /// `token` of a step that accepted bytes, not a token.
    const BYTES: u32 = u32::MAX;

    /// The text token this step accepted, if it was one.
    fn token(&self) -> Option<u32> {
        (!self.stop && self.token != Self::BYTES).then_some(self.token)
    }
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
    /// On a staged compile's shell ([`CompiledGrammar::is_staged`]): every byte accepted
    /// so far (one per Earley set), replayed on the finished grammar when the matcher
    /// moves to it. `None` once it has, or for a grammar that is not staged.
    shell_bytes: Option<Vec<u8>>,
    /// Work units one fill may spend ([`Self::set_fill_work_limit`]).
    fill_limit: Option<u64>,
    /// Work units the last fill spent ([`Self::last_fill_work`]).
    last_fill_work: u64,
}

/// [`GrammarMatcher::set_fill_work_limit`]'s default (work units: trie nodes a mask walk
/// visits, bytes run through the parse): 72× the costliest fill of the dev MaskBench
/// corpus with every mask left lazy (931,989 units, Llama 3.1; `grammask maskbench`'s
/// `fill_units_max`), so only a fill that would take seconds is refused.
pub const DEFAULT_FILL_WORK_LIMIT: u64 = 1 << 26;

/// Fault injection for callers' isolation tests (feature `fault-injection`, never on by
/// default): a matcher whose grammar forces exactly this text from where it stands
/// panics in [`GrammarMatcher::fill_next_token_bitmask`], as a bug in grammask would.
#[cfg(feature = "fault-injection")]
pub const FILL_PANIC_MARKER: &str = "grammask-fault-injection:panic-in-fill";

impl GrammarMatcher {
    /// A matcher at the start of the grammar.
    pub fn new(compiled: Arc<CompiledGrammar>) -> Self {
        let parser = Earley::new(compiled.automata(), compiled.automata().root_start().0);
        Self {
            parser,
            history: Vec::new(),
            terminated: false,
            scratch_states: Vec::new(),
            scratch_ranks: Vec::new(),
            scratch_words: Vec::new(),
            scratch_key: Vec::new(),
            memo: MaskMemo::default(),
            shell_bytes: compiled.is_staged().then(Vec::new),
            compiled,
            fill_limit: Some(DEFAULT_FILL_WORK_LIMIT),
            last_fill_work: 0,
        }
    }

    /// Bounds the work of each later fill ([`Self::fill_next_token_bitmask`]): the masks
    /// it computes lazily (trie nodes walked) and the tokens it runs through the parse
    /// (bytes pushed). A fill past it fails with [`Error::Budget`] (phase
    /// [`Phase::Fill`](crate::budget::Phase::Fill)), storing no partial mask, and the
    /// matcher is unchanged: fill again (with a larger limit), roll back, reset. `None`:
    /// unbounded. Default [`DEFAULT_FILL_WORK_LIMIT`]. A mask computed once is stored in
    /// the grammar, so later fills reaching the same state cost nothing of it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
    /// use grammask::{bitmask::{is_allowed, TokenBitmask}, CompileOptions};
    /// let vocab: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).chain([b"</s>".to_vec()]).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![26]), ..Default::default() };
    /// let tok = Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?);
    /// // Fully lazy: every mask past the start is computed by a fill.
    /// let lazy = CompileOptions { eager_budget: std::time::Duration::ZERO, ..Default::default() };
    /// let compiler = GrammarCompiler::with_options(tok, lazy, 0);
    /// let mut m = GrammarMatcher::new(compiler.compile(&GrammarSpec::ebnf(r#"root ::= "a" [a-z]+"#))?);
    /// m.accept_string("a")?;
    /// let mut mask = TokenBitmask::new(1, 27);
    /// m.set_fill_work_limit(Some(1));
    /// assert!(matches!(m.fill_next_token_bitmask(mask.row_mut(0)), Err(grammask::Error::Budget(_))));
    /// m.set_fill_work_limit(None);
    /// m.fill_next_token_bitmask(mask.row_mut(0))?; // the same matcher, unchanged
    /// assert!(is_allowed(mask.row(0), 1) && !is_allowed(mask.row(0), 26));
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn set_fill_work_limit(&mut self, limit: Option<u64>) {
        self.fill_limit = limit;
    }

    /// The limit [`Self::set_fill_work_limit`] set.
    pub fn fill_work_limit(&self) -> Option<u64> {
        self.fill_limit
    }

    /// On a staged compile's shell, moves to the finished grammar if it is ready, or
    /// (`wait`) once it is: a new parse of the bytes accepted so far, the history kept
    /// (its steps are byte offsets, the same in both grammars).
    fn finish(&mut self, wait: bool) -> Result<()> {
        let Some(f) = self.shell_bytes.as_ref().and(self.compiled.finishing()) else { return Ok(()) };
        let full = match if wait { Some(f.wait()) } else { f.get() } {
            None => return Ok(()),
            Some(full) => full?,
        };
        let a = full.automata();
        let mut parser = Earley::new(a, a.root_start().0);
        let bytes = self.shell_bytes.take().unwrap_or_default();
        for (offset, &b) in bytes.iter().enumerate() {
            // (Cannot fail: the shell parsed these bytes without predicting a stand-in,
            // and the two grammars differ only inside the stand-ins.)
            if !parser.push(a, b) {
                return Err(Error::BytesRejected { offset });
            }
        }
        parser.maybe_freeze();
        self.parser = parser;
        self.compiled = full;
        self.memo = MaskMemo::default();
        Ok(())
    }

    /// Whether this matcher is on a shell whose parse just predicted a stand-in (so must
    /// move to the finished grammar before it can answer).
    fn shell_touched(&mut self) -> bool {
        self.shell_bytes.is_some() && self.parser.take_stand_in()
    }

    /// The compiled grammar this matcher runs: for a staged compile, its shell until the
    /// matcher has moved to the finished grammar ([`CompiledGrammar::is_staged`]).
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
        self.finish(false)?;
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
            self.history.push(Step { depth: self.parser.depth() as u32, token: id, stop: true });
            self.terminated = true;
            return Ok(());
        }
        let bytes = tok.token_bytes(id);
        let producible = !tok.is_special(id) || self.compiled.marker_tokens().binary_search(&id).is_ok();
        if !producible || bytes.is_empty() {
            return Err(Error::TokenRejected { id });
        }
        match self.push_bytes(bytes, id) {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::TokenRejected { id }),
        }
    }

    /// Accepts raw bytes as one step (e.g. a jump-forward string); all or nothing.
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        if self.terminated {
            return Err(Error::Terminated);
        }
        self.finish(false)?;
        self.push_bytes(bytes, Step::BYTES)
    }

    /// Accepts a string as one step; see [`Self::accept_bytes`].
    pub fn accept_string(&mut self, s: &str) -> Result<()> {
        self.accept_bytes(s.as_bytes())
    }

    fn push_bytes(&mut self, bytes: &[u8], token: u32) -> Result<()> {
        let start = self.parser.depth();
        let a = self.compiled.automata();
        let mut rejected = None;
        for (i, &b) in bytes.iter().enumerate() {
            if !self.parser.push(a, b) {
                rejected = Some(i);
                break;
            }
        }
        if self.shell_touched() {
            // The shell's verdict may not be the finished grammar's: ask that one.
            self.parser.truncate(start);
            self.finish(true)?;
            return self.push_bytes(bytes, token);
        }
        if let Some(offset) = rejected {
            self.parser.truncate(start);
            return Err(Error::BytesRejected { offset });
        }
        if let Some(log) = &mut self.shell_bytes {
            log.extend_from_slice(bytes);
        }
        self.history.push(Step { depth: start as u32, token, stop: false });
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
        if let Some(log) = &mut self.shell_bytes {
            log.truncate(step.depth as usize);
        }
        self.history.truncate(keep);
        self.terminated = self.history.last().is_some_and(|s| s.stop);
        Ok(())
    }

    /// Back to the start of the grammar.
    pub fn reset(&mut self) {
        self.parser.truncate(0);
        if let Some(log) = &mut self.shell_bytes {
            log.clear();
        }
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
        #[cfg(feature = "fault-injection")]
        if self.fork().find_jump_forward_string() == FILL_PANIC_MARKER.as_bytes() {
            panic!("fault injection: the fill of {FILL_PANIC_MARKER:?} panicked");
        }
        self.finish(false)?;
        let meter = self.fill_limit.map(crate::budget::Meter::for_fill);
        match meter {
            Some(m) => {
                let r = crate::budget::scope(Some(m.clone()), || self.fill_finishing(row, &tok));
                self.last_fill_work = m.spent();
                r
            }
            None => self.fill_finishing(row, &tok),
        }
    }

    /// Work units the last fill under a limit spent ([`Self::set_fill_work_limit`]), to
    /// size the limit: 0 when it computed no mask and checked no token.
    pub fn last_fill_work(&self) -> u64 {
        self.last_fill_work
    }

    /// The fill on this grammar, or (on a shell that cannot answer alone) on the
    /// finished one.
    fn fill_finishing(&mut self, row: &mut [u32], tok: &TokenizerInfo) -> Result<bool> {
        match self.fill_here(row, tok)? {
            Some(all) => Ok(all),
            None => {
                self.finish(true)?;
                // (On the finished grammar a fill always answers.)
                Ok(self.fill_here(row, tok)?.unwrap_or(false))
            }
        }
    }

    /// [`Self::fill_next_token_bitmask`] on this matcher's grammar; `None` on a shell
    /// whose answer could differ from the finished grammar's (a mask or a check that
    /// predicted a stand-in).
    fn fill_here(
        &mut self,
        row: &mut [u32],
        tok: &TokenizerInfo,
    ) -> std::result::Result<Option<bool>, BudgetError> {
        let compiled = self.compiled.clone();
        let a = compiled.automata();
        // A scannable state is named by the state it behaves like for every token (the
        // positions of a long bounded string share one), so the memo also serves the
        // next position.
        self.scratch_key.clear();
        for it in self.parser.last_set() {
            let state = if a.scans(it.state) { compiled.try_alike(it.state)? } else { it.state };
            self.scratch_key.push((state, self.parser.uid_at(it.origin)));
        }
        if self.memo.key == self.scratch_key && self.memo.row.len() == row.len() {
            row.copy_from_slice(&self.memo.row);
            return Ok(Some(self.memo.all));
        }
        self.scratch_states.clear();
        for it in self.parser.last_set() {
            if a.scans(it.state) && !self.scratch_states.contains(&it.state) {
                self.scratch_states.push(it.state);
            }
        }
        self.scratch_ranks.clear();
        for &s in &self.scratch_states {
            if compiled.try_mask(s)?.stand_in && self.shell_bytes.is_some() {
                return Ok(None);
            }
        }
        for i in 0..self.scratch_states.len() {
            let m = compiled.try_mask(self.scratch_states[i])?;
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
        let checked = !self.scratch_ranks.is_empty() || !compiled.marker_tokens().is_empty();
        self.check_uncertain(row)?;
        self.check_markers(row);
        if self.shell_touched() {
            return Ok(None);
        }
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
        Ok(Some(all))
    }

    /// Runs the grammar's marker tokens (special tokens its markers contain) through the
    /// live parse state.
    fn check_markers(&mut self, row: &mut [u32]) {
        if self.compiled.marker_tokens().is_empty() {
            return;
        }
        let compiled = self.compiled.clone();
        let a = compiled.automata();
        let tok = compiled.tokenizer();
        let base = self.parser.depth();
        for &id in compiled.marker_tokens() {
            if tok.token_bytes(id).iter().all(|&b| self.parser.push(a, b)) {
                set_bit(row, id);
            }
            self.parser.truncate(base);
        }
    }

    /// Runs each uncertain token (not yet allowed) through the live parse state; a fill's
    /// budget is charged a unit per byte pushed.
    fn check_uncertain(&mut self, row: &mut [u32]) -> std::result::Result<(), BudgetError> {
        if self.scratch_ranks.is_empty() {
            return Ok(());
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
        let mut pushes = 0u64;
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
                pushes += 1;
                if pushes % 4096 == 0 {
                    if let Err(e) = crate::budget::charge_walk(4096) {
                        self.parser.truncate(base);
                        return Err(e);
                    }
                }
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
        crate::budget::charge_walk(pushes % 4096)
    }

    /// How many leading ids of `ids` the grammar accepts from here, one after the other
    /// (what a verifier asks of a proposed chain before sampling). The state is
    /// unchanged; an id out of range counts as rejected.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use grammask::{GrammarCompiler, GrammarMatcher, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let mut m = GrammarMatcher::new(c.compile_ebnf(r#"root ::= "ab""#)?);
    /// assert_eq!(m.validate_tokens(&[0, 1, 2]), 3); // "a", "b", stop
    /// assert_eq!(m.validate_tokens(&[0, 0]), 1);
    /// assert_eq!(m.num_steps(), 0); // nothing was committed
    /// assert!(m.accept_tokens(&[0, 0]).is_err()); // all or nothing
    /// m.accept_tokens(&[0, 1])?;
    /// assert!(m.can_terminate());
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn validate_tokens(&mut self, ids: &[u32]) -> usize {
        draft::validate_tokens(self, ids)
    }

    /// Accepts every id of `ids`, or none of them: on a rejection the state is as before
    /// and the error ([`Error::TokensRejected`]) says which one.
    pub fn accept_tokens(&mut self, ids: &[u32]) -> Result<()> {
        draft::accept_tokens(self, ids)
    }

    /// Masks for a draft chain `t1..tk` in one call: row `first + i` of `mask` is the
    /// mask after `t1..ti` (`k + 1` rows). Rows after the first rejected id are all
    /// zero; [`ChainFill::accepted`] says where the chain broke. The state is unchanged.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let mut m = GrammarMatcher::new(c.compile_ebnf(r#"root ::= "a"+ "b""#)?);
    /// let mut mask = TokenBitmask::new(4, 3);
    /// let fill = m.fill_draft_chain_bitmasks(&[0, 1, 1], &mut mask, 0)?;
    /// assert_eq!(fill.accepted, 2); // "a" "b", then a second "b" is rejected
    /// assert_eq!(mask.allowed_ids(0), [0]);
    /// assert_eq!(mask.allowed_ids(1), [0, 1]);
    /// assert_eq!(mask.allowed_ids(2), [2]); // after "ab" only the stop token
    /// assert_eq!(mask.count_allowed(3), 0);
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn fill_draft_chain_bitmasks(
        &mut self,
        chain: &[u32],
        mask: &mut TokenBitmask,
        first: usize,
    ) -> Result<ChainFill> {
        draft::fill_draft_chain(self, chain, mask, first)
    }

    /// Masks for every node of a draft tree in one call: row `first + v` of `mask` is
    /// the mask after the tokens on the path from the root to node `v` (row `first` is
    /// the current mask). The tree is walked depth-first, so a shared prefix is parsed
    /// once. A node whose token is rejected gets an all-zero row, as does its subtree
    /// ([`TreeFill`] lists them). The state is unchanged.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
    /// use grammask::matcher::DraftTree;
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let mut m = GrammarMatcher::new(c.compile_ebnf(r#"root ::= "a"+ "b""#)?);
    /// // root → 1:"a" → 3:"b";  root → 2:"b" (rejected: the grammar starts with "a")
    /// let tree = DraftTree::from_parents(&[-1, 0, 1, 1], &[-1, 0, 0, 1])?;
    /// let mut mask = TokenBitmask::new(4, 3);
    /// let fill = m.fill_draft_tree_bitmasks(&tree, &mut mask, 0)?;
    /// assert_eq!(fill.rejected, [2]);
    /// assert_eq!(mask.allowed_ids(1), [0, 1]);
    /// assert_eq!(mask.count_allowed(2), 0);
    /// assert_eq!(mask.allowed_ids(3), [2]);
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn fill_draft_tree_bitmasks(
        &mut self,
        tree: &DraftTree,
        mask: &mut TokenBitmask,
        first: usize,
    ) -> Result<TreeFill> {
        draft::fill_draft_tree(self, tree, mask, first)
    }

    /// Bytes the grammar forces next (empty if there is a choice, including the choice to
    /// stop). A character whose only alternatives are its own JSON escape spellings
    /// (`n` beside `\u006e` in a key) counts as forced and is written plainly. The state
    /// is unchanged.
    pub fn find_jump_forward_string(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.terminated {
            return out;
        }
        // (A finished grammar that failed to build forces nothing: the next fill or
        // accept reports the error.)
        if self.finish(false).is_err() {
            return out;
        }
        let compiled = self.compiled.clone();
        let a = compiled.automata();
        let base = self.parser.depth();
        while out.len() < MAX_JUMP_FORWARD_BYTES && !self.parser.can_end() {
            let next = spelling::next_bytes(&self.parser, a);
            let mut bytes = (0..=255u8).filter(|&b| next.contains(b));
            let forced = match (next.len(), bytes.next(), bytes.next()) {
                (1, Some(b), _) => vec![b],
                // A character or its escape spellings (JSON strings): the character.
                (2, Some(b'\\'), Some(b)) | (2, Some(b), Some(b'\\')) => {
                    match spelling::forced_char(&mut self.parser, a, b) {
                        Some(c) => c,
                        None => break,
                    }
                }
                _ => break,
            };
            if !forced.iter().all(|&b| self.parser.push(a, b)) {
                break;
            }
            out.extend(forced);
        }
        self.parser.truncate(base);
        if self.shell_touched() {
            if self.finish(true).is_err() {
                return Vec::new();
            }
            return self.find_jump_forward_string();
        }
        out
    }

    /// Heap bytes of this matcher's own state (not the shared compiled grammar).
    pub fn memory_bytes(&self) -> usize {
        self.parser.memory_bytes()
            + self.history.capacity() * 8
            + self.shell_bytes.as_ref().map_or(0, |b| b.capacity())
    }
}
