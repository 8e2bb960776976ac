//! Batch fill: the mask rows of many constraints in one call, in parallel.
//!
//! A serving engine's decode step has one row per running sequence and only some rows
//! carry a grammar. [`BatchFiller::fill`] writes each constrained row's mask into one
//! [`TokenBitmask`] at the row the engine names (the same `indices` it then hands to the
//! GPU apply) on a rayon pool, and says per row whether the mask allows everything, so
//! the engine can leave such rows out of the apply.
//!
//! Rows are independent, so the output is the same whatever the thread count. The
//! filler keeps its scratch (per-row flags, the row-occupancy check) between calls:
//! in the steady state a call allocates nothing.

use crate::bitmask::{words_per_row, TokenBitmask};
use crate::error::{Error, Result};
use crate::LogitsConstraint;
use rayon::prelude::*;
use std::borrow::BorrowMut;
use std::sync::Arc;

/// Fills many constraints' mask rows in parallel; reuse one per engine.
///
/// ```
/// use std::sync::Arc;
/// use grammask::batch::BatchFiller;
/// use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
/// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
/// let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
/// let mut rows = vec![
///     GrammarMatcher::new(c.compile_ebnf(r#"root ::= "a""#)?),
///     GrammarMatcher::new(c.compile_ebnf(r#"root ::= [ab]*"#)?),
/// ];
/// // A batch of 4 sequences: rows 1 and 3 are constrained.
/// let mut mask = TokenBitmask::new(4, 3);
/// let mut filler = BatchFiller::new();
/// let all = filler.fill::<GrammarMatcher, _>(&mut rows, &mut mask, &[3, 1])?;
/// assert_eq!(all, [false, true]); // row 1's grammar allows every token here
/// assert_eq!(mask.allowed_ids(3), [0]);
/// # Ok::<(), grammask::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct BatchFiller {
    pool: Option<Arc<rayon::ThreadPool>>,
    all: Vec<bool>,
    /// Per mask row, whether this call writes it (distinct indices).
    taken: Vec<bool>,
}

/// A raw base pointer to the mask's words that rayon tasks may share.
#[derive(Clone, Copy)]
struct Rows(*mut u32);
// SAFETY: each task writes only its own row, and `fill` checks that the rows are
// distinct and in range before any task runs.
unsafe impl Send for Rows {}
unsafe impl Sync for Rows {}

impl Rows {
    /// Row `r` of `words` words.
    ///
    /// # Safety
    /// `r` must be a row of the mask, and no other live slice may cover it.
    unsafe fn row<'a>(&self, r: usize, words: usize) -> &'a mut [u32] {
        std::slice::from_raw_parts_mut(self.0.add(r * words), words)
    }
}

impl BatchFiller {
    /// A filler running on the current rayon pool (the caller's `install`, or the
    /// global one).
    pub fn new() -> Self {
        Self::default()
    }

    /// A filler running on `pool` (e.g. one sized for mask work beside the engine's
    /// own threads).
    pub fn with_pool(pool: Arc<rayon::ThreadPool>) -> Self {
        Self { pool: Some(pool), ..Self::default() }
    }

    /// A filler with its own pool of `threads` threads.
    pub fn with_threads(threads: usize) -> Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("grammask-fill-{i}"))
            .build()
            .map_err(|e| Error::Shape(format!("cannot start a fill pool: {e}")))?;
        Ok(Self::with_pool(Arc::new(pool)))
    }

    /// Fills `constraints[i]`'s next-token mask into row `indices[i]` of `mask`, in
    /// parallel, and returns per constraint whether its row allows every token.
    /// `C` is the constraint itself or a `&mut` to it (so an engine can pass the
    /// matchers it keeps inside its own sequence records).
    ///
    /// Errors, before anything is written: as many indices as constraints, each in
    /// range and distinct, every constraint's vocabulary the mask's. A constraint whose
    /// own fill fails makes the call return that error (the first in row order); the
    /// other rows are filled all the same. [`Self::fill_each`] reports every failed row
    /// instead.
    pub fn fill<M, C>(
        &mut self,
        constraints: &mut [C],
        mask: &mut TokenBitmask,
        indices: &[usize],
    ) -> Result<&[bool]>
    where
        M: LogitsConstraint + ?Sized,
        C: BorrowMut<M> + Send,
    {
        let filled = self.fill_each::<M, C>(constraints, mask, indices)?;
        if let Some((_, e)) = filled.failed.into_iter().next() {
            return Err(e);
        }
        Ok(&self.all)
    }

    /// [`Self::fill`] for engines that keep going when one row fails: every row is
    /// filled, and the rows whose own fill failed are listed with their errors (a
    /// failed row's mask words are unspecified; the engine finishes that sequence).
    /// The call itself fails only on the shape errors [`Self::fill`] checks first.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::batch::BatchFiller;
    /// use grammask::{GrammarCompiler, GrammarMatcher, TokenBitmask, TokenizerInfo, TokenizerOptions};
    /// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
    /// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
    /// let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
    /// let mut rows = vec![GrammarMatcher::new(c.compile_ebnf(r#"root ::= "a""#)?)];
    /// let mut mask = TokenBitmask::new(2, 3);
    /// let mut filler = BatchFiller::new();
    /// let filled = filler.fill_each::<GrammarMatcher, _>(&mut rows, &mut mask, &[1])?;
    /// assert_eq!((filled.allows_all, filled.failed.len()), (&[false][..], 0));
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn fill_each<M, C>(
        &mut self,
        constraints: &mut [C],
        mask: &mut TokenBitmask,
        indices: &[usize],
    ) -> Result<Filled<'_>>
    where
        M: LogitsConstraint + ?Sized,
        C: BorrowMut<M> + Send,
    {
        if constraints.len() != indices.len() {
            return Err(Error::Shape(format!(
                "{} constraints but {} row indices",
                constraints.len(),
                indices.len()
            )));
        }
        let (rows, vocab) = (mask.rows(), mask.vocab_size());
        self.taken.clear();
        self.taken.resize(rows, false);
        for (c, &r) in constraints.iter_mut().zip(indices) {
            if r >= rows {
                return Err(Error::Shape(format!(
                    "row index {r} is out of range for a bitmask of {rows} rows"
                )));
            }
            if std::mem::replace(&mut self.taken[r], true) {
                return Err(Error::Shape(format!("row index {r} is given twice")));
            }
            let v = c.borrow_mut().vocab_size();
            if v != vocab {
                return Err(Error::Shape(format!(
                    "a constraint's vocabulary has {v} tokens; the bitmask covers {vocab}"
                )));
            }
        }
        self.all.clear();
        self.all.resize(indices.len(), false);
        let words = words_per_row(vocab);
        let base = Rows(mask.as_words_mut().as_mut_ptr());
        let all = &mut self.all;
        let mut run = move || -> Vec<(usize, Error)> {
            let results = constraints.par_iter_mut().zip(indices.par_iter()).zip(all.par_iter_mut());
            // `collect` keeps row order; every row is filled whatever fails elsewhere.
            results
                .enumerate()
                .filter_map(|(i, ((c, &r), all))| {
                    // SAFETY: `r < rows` and the indices are distinct (checked above),
                    // so this task alone touches these `words` words of the mask.
                    let row = unsafe { base.row(r, words) };
                    // A constraint that panics fails its own row (a panic on the pool
                    // would otherwise reach every row's caller, or abort a spawned job).
                    let filled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        c.borrow_mut().fill_next_token_bitmask(row)
                    }));
                    match filled {
                        Ok(Ok(a)) => {
                            *all = a;
                            None
                        }
                        Ok(Err(e)) => Some((i, e)),
                        Err(p) => Some((i, Error::Panicked(panic_message(p.as_ref())))),
                    }
                })
                .collect()
        };
        let failed = match &self.pool {
            Some(pool) => pool.install(&mut run),
            None => run(),
        };
        Ok(Filled { allows_all: &self.all, failed })
    }
}

/// What a caught panic said (its `&str` or `String` payload), for a row's error or a
/// log line.
///
/// ```
/// let caught = std::panic::catch_unwind(|| panic!("row {}", 3)).unwrap_err();
/// assert_eq!(grammask::batch::panic_message(caught.as_ref()), "row 3");
/// ```
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// What [`BatchFiller::fill_each`] did.
#[derive(Debug)]
pub struct Filled<'a> {
    /// Per constraint, whether its row allows every token (`false` for a failed row).
    pub allows_all: &'a [bool],
    /// `(position in the constraints, error)` of each row whose fill failed, in order.
    pub failed: Vec<(usize, Error)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{JumpForward, TextEncoder};
    use crate::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};

    /// A matcher whose fill fails when `fail` is set: the engine's view of a row that
    /// went wrong.
    struct Flaky {
        m: GrammarMatcher,
        fail: bool,
        /// Panics in its fill instead (a bug in a constraint).
        panics: bool,
    }

    impl LogitsConstraint for Flaky {
        fn compile(c: &GrammarCompiler, s: &GrammarSpec) -> Result<Self> {
            Ok(Self { m: GrammarMatcher::compile(c, s)?, fail: false, panics: false })
        }
        fn vocab_size(&self) -> usize {
            self.m.vocab_size()
        }
        fn fill_next_token_bitmask(&mut self, row: &mut [u32]) -> Result<bool> {
            if self.fail {
                return Err(Error::Shape("flaky row".into()));
            }
            if self.panics {
                panic!("a constraint's bug");
            }
            self.m.fill_next_token_bitmask(row)
        }
        fn accept_token(&mut self, t: u32) -> Result<()> {
            self.m.accept_token(t)
        }
        fn accept_bytes(&mut self, b: &[u8]) -> Result<()> {
            self.m.accept_bytes(b)
        }
        fn rollback(&mut self, n: usize) -> Result<()> {
            self.m.rollback(n)
        }
        fn fork(&self) -> Self {
            Self { m: self.m.fork(), fail: self.fail, panics: self.panics }
        }
        fn find_jump_forward_string(&mut self) -> Vec<u8> {
            self.m.find_jump_forward_string()
        }
        fn reset(&mut self) {
            self.m.reset()
        }
        fn can_terminate(&self) -> bool {
            self.m.can_terminate()
        }
        fn is_terminated(&self) -> bool {
            self.m.is_terminated()
        }
        fn token_bytes(&self, t: u32) -> &[u8] {
            self.m.token_bytes(t)
        }
        fn jump_forward_tokens(&mut self, e: &dyn TextEncoder) -> Result<JumpForward> {
            self.m.jump_forward_tokens(e)
        }
    }

    #[test]
    fn fill_each_reports_every_failed_row_and_fills_the_others() {
        let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
        let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap()));
        let spec = GrammarSpec::ebnf(r#"root ::= "a""#);
        let mut rows: Vec<Flaky> = (0..4).map(|_| Flaky::compile(&c, &spec).unwrap()).collect();
        rows[1].fail = true;
        rows[3].fail = true;
        let mut mask = TokenBitmask::new(4, 3);
        let mut filler = BatchFiller::with_threads(2).unwrap();
        let filled = filler.fill_each::<Flaky, _>(&mut rows, &mut mask, &[3, 2, 1, 0]).unwrap();
        assert_eq!(filled.failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(filled.allows_all, [false; 4]);
        assert_eq!((mask.allowed_ids(3), mask.allowed_ids(1)), (vec![0], vec![0]));
        // `fill` gives the first failure in row order.
        let e = filler.fill::<Flaky, _>(&mut rows, &mut mask, &[0, 1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("flaky row"), "{e}");
    }

    #[test]
    fn a_row_whose_fill_panics_fails_alone() {
        let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
        let c = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts).unwrap()));
        let spec = GrammarSpec::ebnf(r#"root ::= "b""#);
        let mut rows: Vec<Flaky> = (0..3).map(|_| Flaky::compile(&c, &spec).unwrap()).collect();
        rows[1].panics = true;
        let mut mask = TokenBitmask::new(3, 3);
        let mut filler = BatchFiller::with_threads(2).unwrap();
        let filled = filler.fill_each::<Flaky, _>(&mut rows, &mut mask, &[0, 1, 2]).unwrap();
        match &filled.failed[..] {
            [(1, Error::Panicked(why))] => assert_eq!(why, "a constraint's bug"),
            other => panic!("{other:?}"),
        }
        assert_eq!((mask.allowed_ids(0), mask.allowed_ids(2)), (vec![1], vec![1]));
    }
}
