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
    /// other rows are filled all the same.
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
        let mut run = move || -> Result<()> {
            let results = constraints.par_iter_mut().zip(indices.par_iter()).zip(all.par_iter_mut());
            // `reduce` keeps row order, so the first error in row order wins, and every
            // row is filled whatever fails elsewhere.
            results
                .map(|((c, &r), all)| {
                    // SAFETY: `r < rows` and the indices are distinct (checked above),
                    // so this task alone touches these `words` words of the mask.
                    let row = unsafe { base.row(r, words) };
                    c.borrow_mut().fill_next_token_bitmask(row).map(|a| *all = a)
                })
                .reduce(|| Ok(()), |a, b| a.and(b))
        };
        match &self.pool {
            Some(pool) => pool.install(&mut run)?,
            None => (run)()?,
        }
        Ok(&self.all)
    }
}
