//! The step engine: the constrained sequences of a running batch, masked while the
//! model's forward runs.
//!
//! A serving loop's decode step, with [`StructuredBatch`]:
//!
//! ```text
//! rows of the step known ──▶ begin_step(rows)   fills start on the mask pool
//!        model forward runs meanwhile ─────────┐
//! logits ready ────────────▶ apply_masks(logits) waits for the fills, masks the rows
//!                                              that need it (one call, `indices`)
//! sample each row ─────────▶ accept(id, token)  next state, jump-forward, end
//! ```
//!
//! Host logits may skip the apply: [`StructuredBatch::finish_masks`] waits for the
//! fills without writing, and the sampler reads each row's mask
//! ([`StructuredBatch::step_mask`]) where it reads the row — the router's default on
//! the CPU, where the apply is a memory-bound pass over every masked row.
//!
//! Only constrained sequences live here; a batch row whose sequence is not in the
//! batch is left alone, and so is a constrained row whose mask allows every token
//! (both stay out of `indices`). The fill runs on a rayon pool of its own, so it
//! overlaps the forward whatever thread runs the model (the XGrammar paper's §4).

use grammask::batch::BatchFiller;
use grammask::bitmask::words_per_row;
use grammask::matcher::{JumpForward, TextEncoder};
use grammask::{GrammarMatcher, TokenBitmask};
use grammask_gpu::{
    apply_token_bitmask_inplace, Bitmask, Device, Indices, LogitElem, Logits, LogitsLayout, MaskLayout,
};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A sequence's id, unique within a batch.
pub type SeqId = u64;

/// What went wrong with a call on the batch as a whole (a row's own trouble is a
/// [`RowError`], reported per row).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// `add` of an id already in the batch.
    #[error("sequence {0} is already in the batch")]
    Duplicate(SeqId),
    /// A step names an id twice.
    #[error("sequence {0} is named twice in one step")]
    TwiceInStep(SeqId),
    /// The call needs the fill of the current step to be over (`apply_masks` first).
    #[error("a mask fill is in flight: call apply_masks before changing the batch")]
    Busy,
    /// `apply_masks` without `begin_step`.
    #[error("no step was begun")]
    NoStep,
    /// A matcher for another tokenizer.
    #[error("a matcher over {got} tokens cannot join a batch over {batch}")]
    Vocab {
        /// The matcher's vocabulary.
        got: usize,
        /// The batch's.
        batch: usize,
    },
    /// The pool running the fill went away (it panicked).
    #[error("the mask fill worker stopped")]
    WorkerGone,
    /// The mask could not be applied to these logits (shape, device).
    #[error(transparent)]
    Apply(#[from] grammask_gpu::BitmaskError),
    /// The fill pool could not be started.
    #[error("cannot start the mask pool: {0}")]
    Pool(String),
}

/// A row's own failure; the other rows go on.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// `accept` of a sequence that is not in the batch (never added, finished,
    /// removed, or dropped after a failed fill).
    #[error("sequence {0} is not in the batch")]
    Unknown(SeqId),
    /// The grammar failed on this row (fill or accept).
    #[error(transparent)]
    Grammar(#[from] grammask::Error),
}

/// What became of a row after [`StructuredBatch::accept`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Go on; append `forced` first when it is not empty (take back its `rollback`
    /// last tokens, then append its ids: they need no sampling, only a forward).
    Continue {
        /// Tokens the grammar forces next, as the tokenizer would write them.
        forced: JumpForward,
    },
    /// The grammar ended (a stop token was accepted); the row has left the batch.
    Finished,
}

/// Accepts `token`, then (with an encoder) the tokens the grammar forces next.
fn advance(
    m: &mut GrammarMatcher,
    token: u32,
    encoder: Option<&(dyn TextEncoder + Send + Sync)>,
    max_rollback: usize,
) -> Result<Accepted, RowError> {
    m.accept_token(token)?;
    if m.is_terminated() {
        return Ok(Accepted::Finished);
    }
    let mut forced = JumpForward::default();
    if let Some(enc) = encoder {
        let jf = m.jump_forward_tokens_within(enc, max_rollback)?;
        if !jf.ids.is_empty() {
            m.rollback(jf.rollback)?;
            m.accept_tokens(&jf.ids)?;
            forced = jf;
        }
    }
    Ok(Accepted::Continue { forced })
}

/// Timings and results of one step's masks.
#[derive(Debug, Default)]
pub struct StepMasks {
    /// Constrained rows in the step.
    pub constrained: usize,
    /// Rows masked (constrained rows whose mask allowed less than everything).
    pub masked: usize,
    /// Wall time of the fill on the pool.
    pub fill: Duration,
    /// Time `apply_masks` waited for the fill (zero when the forward took longer).
    pub wait: Duration,
    /// Time applying the masks took.
    pub apply: Duration,
    /// Rows whose fill failed: they left the batch and were not masked; finish their
    /// sequences with the error.
    pub failed: Vec<(SeqId, RowError)>,
}

/// Settings of a [`StructuredBatch`].
#[derive(Clone)]
pub struct BatchOptions {
    /// Threads filling masks (default: half the machine's, at least 1).
    pub fill_threads: usize,
    /// Where the logits live.
    pub device: Device,
    /// Turns forced text into token ids (jump-forward); `None` turns jump-forward off.
    pub encoder: Option<Arc<dyn TextEncoder + Send + Sync>>,
    /// Whether a jump-forward may take back sampled tokens (needs a model that can
    /// truncate a sequence's cache).
    pub rollback_ok: bool,
    /// Without jump-forward, accept a sampled token on the mask pool at the start of
    /// the next step's fill (while the forward runs) instead of on the step thread. A
    /// stop token is still accepted at once (the row ends); a deferred token the
    /// grammar refuses fails its row at the next step. The mask allowed the token, so
    /// that only happens if something else went wrong.
    pub defer_accepts: bool,
}

impl std::fmt::Debug for BatchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchOptions")
            .field("fill_threads", &self.fill_threads)
            .field("device", &self.device)
            .field("jump_forward", &self.encoder.is_some())
            .field("rollback_ok", &self.rollback_ok)
            .field("defer_accepts", &self.defer_accepts)
            .finish()
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            fill_threads: (cores / 2).max(1),
            device: Device::cpu(),
            encoder: None,
            rollback_ok: false,
            defer_accepts: true,
        }
    }
}

/// A constrained sequence.
struct Row {
    id: SeqId,
    matcher: GrammarMatcher,
    /// The step row this sequence has in the step being filled.
    step_row: Option<usize>,
    /// A sampled token whose acceptance was deferred to the next fill.
    pending: Option<u32>,
    /// A deferred acceptance failed: the row fails at its next fill.
    error: Option<grammask::Error>,
}

impl Row {
    /// Accepts the deferred token, if any; a failure is kept for the next fill.
    fn flush(&mut self) {
        if let Some(t) = self.pending.take() {
            if let Err(e) = self.matcher.accept_token(t) {
                self.error = Some(e);
            }
        }
    }
}

/// The device copy of the masks, for logits on a CUDA device: the pool thread that
/// filled the masks copies them on a stream of their own, so the upload overlaps the
/// forward too and the apply reads them on the device.
#[cfg(feature = "cuda")]
struct MaskUpload {
    stream: Arc<grammask_gpu::cudarc::driver::CudaStream>,
    buf: grammask_gpu::cudarc::driver::CudaSlice<u32>,
    error: Option<String>,
}

#[cfg(feature = "cuda")]
impl MaskUpload {
    fn new(device: &Device) -> Result<Option<Self>, StepError> {
        let Device::Cuda(target) = device else { return Ok(None) };
        let err = |e: grammask_gpu::cudarc::driver::DriverError| StepError::Pool(format!("CUDA: {e}"));
        let stream = target.stream.context().new_stream().map_err(err)?;
        let buf = stream.alloc_zeros::<u32>(1).map_err(err)?;
        Ok(Some(Self { stream, buf, error: None }))
    }

    /// Room for `words` words (on the step thread, before the fill).
    fn reserve(&mut self, words: usize) -> Result<(), StepError> {
        if self.buf.len() < words {
            self.buf = self
                .stream
                .alloc_zeros::<u32>(words.next_power_of_two())
                .map_err(|e| StepError::Pool(format!("CUDA: {e}")))?;
        }
        Ok(())
    }

    fn upload(&mut self, words: &[u32]) {
        let r = self.stream.memcpy_htod(words, &mut self.buf.slice_mut(..words.len()));
        self.error = r.err().map(|e| format!("mask upload: {e}"));
    }
}

/// What moves to the pool for a fill and comes back: the rows, the mask, the filler.
struct Work {
    rows: Vec<Row>,
    mask: TokenBitmask,
    filler: BatchFiller,
    /// Positions in `rows` of the step's constrained rows, in row order.
    members: Vec<usize>,
    allows_all: Vec<bool>,
    failed: Vec<(usize, grammask::Error)>,
    fill: Duration,
    /// Rows of the step being filled.
    step_rows: usize,
    #[cfg(feature = "cuda")]
    upload: Option<MaskUpload>,
}

impl Work {
    /// Fails every row of the step being filled (the fill itself panicked).
    fn fail_step(&mut self, why: &str) {
        self.members = (0..self.rows.len()).filter(|&p| self.rows[p].step_row.is_some()).collect();
        self.allows_all = vec![false; self.members.len()];
        self.failed =
            (0..self.members.len()).map(|i| (i, grammask::Error::Panicked(why.to_string()))).collect();
    }

    fn fill(&mut self) {
        let _span = tracing::debug_span!("fill", rows = self.step_rows).entered();
        let t0 = Instant::now();
        // Deferred acceptances first: they overlap the forward too.
        for r in &mut self.rows {
            r.flush();
        }
        self.members.clear();
        let mut failed = Vec::new();
        // Positions in `members` of the rows filled (those without a failed acceptance).
        let mut filled_members = Vec::new();
        let (mut matchers, mut targets) = (Vec::new(), Vec::new());
        for (p, r) in self.rows.iter_mut().enumerate() {
            if let Some(t) = r.step_row {
                let i = self.members.len();
                self.members.push(p);
                if let Some(e) = r.error.take() {
                    failed.push((i, e));
                    continue;
                }
                filled_members.push(i);
                matchers.push(&mut r.matcher);
                targets.push(t);
            }
        }
        self.allows_all.clear();
        self.allows_all.resize(self.members.len(), false);
        match self.filler.fill_each::<GrammarMatcher, _>(&mut matchers, &mut self.mask, &targets) {
            Ok(filled) => {
                for (k, &i) in filled_members.iter().enumerate() {
                    self.allows_all[i] = filled.allows_all.get(k).copied().unwrap_or(false);
                }
                failed.extend(filled.failed.into_iter().map(|(k, e)| (filled_members[k], e)));
            }
            // Shape errors cannot happen (the engine sized the mask and checked the
            // rows), but if one did, every row of the step fails rather than the loop.
            Err(e) => {
                failed.extend(filled_members.iter().map(|&i| (i, grammask::Error::Shape(e.to_string()))));
            }
        }
        self.failed = failed;
        #[cfg(feature = "cuda")]
        if let Some(up) = &mut self.upload {
            let n = self.step_rows * words_per_row(self.mask.vocab_size());
            up.upload(&self.mask.as_words()[..n]);
        }
        self.fill = t0.elapsed();
    }
}

/// The constrained sequences of a running batch (see the [module docs](self)).
///
/// ```
/// use std::sync::Arc;
/// use grammask::{GrammarCompiler, GrammarMatcher, TokenizerInfo, TokenizerOptions};
/// use grammask_gpu::LogitsLayout;
/// use grammask_router::step::{Accepted, BatchOptions, StructuredBatch};
///
/// let vocab: Vec<Vec<u8>> = ["a", "b", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let opts = TokenizerOptions { stop_tokens: Some(vec![2]), ..Default::default() };
/// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
/// let mut batch = StructuredBatch::new(3, BatchOptions::default())?;
/// batch.add(7, GrammarMatcher::new(compiler.compile_ebnf(r#"root ::= "b""#)?))?;
///
/// // A step of two rows: sequence 3 (unconstrained) and sequence 7.
/// batch.begin_step(&[3, 7])?;
/// let mut logits = vec![0.0f32; 2 * 3]; // the model's forward would run here
/// let report = batch.apply_masks(logits.as_mut_slice().into(), LogitsLayout::contiguous(2, 3))?;
/// assert_eq!(report.masked, 1);
/// assert_eq!(logits, [0.0, 0.0, 0.0, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]);
/// assert!(matches!(batch.accept(7, 1)?, Accepted::Continue { .. }));
/// assert_eq!(batch.accept(7, 2)?, Accepted::Finished);
/// assert!(batch.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct StructuredBatch {
    vocab: usize,
    pool: Arc<rayon::ThreadPool>,
    options: BatchOptions,
    /// Position in `work.rows` of each sequence.
    index: HashMap<SeqId, usize>,
    /// `None` while a fill holds it.
    work: Option<Box<Work>>,
    pending: Option<mpsc::Receiver<Box<Work>>>,
    /// A step was begun and its masks not applied yet.
    begun: bool,
    indices: Vec<i32>,
    /// Per row of the last applied step: whether its mask was applied.
    masked_rows: Vec<bool>,
}

impl std::fmt::Debug for StructuredBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredBatch")
            .field("vocab", &self.vocab)
            .field("rows", &self.index.len())
            .field("options", &self.options)
            .finish()
    }
}

impl StructuredBatch {
    /// An empty batch for a tokenizer of `vocab` tokens.
    pub fn new(vocab: usize, options: BatchOptions) -> Result<Self, StepError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.fill_threads.max(1))
            .thread_name(|i| format!("grammask-mask-{i}"))
            .build()
            .map_err(|e| StepError::Pool(e.to_string()))?;
        let pool = Arc::new(pool);
        let work = Work {
            rows: Vec::new(),
            mask: TokenBitmask::new(0, vocab),
            filler: BatchFiller::with_pool(pool.clone()),
            members: Vec::new(),
            allows_all: Vec::new(),
            failed: Vec::new(),
            fill: Duration::ZERO,
            step_rows: 0,
            #[cfg(feature = "cuda")]
            upload: MaskUpload::new(&options.device)?,
        };
        Ok(Self {
            vocab,
            pool,
            options,
            index: HashMap::new(),
            work: Some(Box::new(work)),
            pending: None,
            begun: false,
            indices: Vec::new(),
            masked_rows: Vec::new(),
        })
    }

    /// Constrained sequences in the batch.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no sequence is constrained.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// True if `id` is in the batch.
    pub fn contains(&self, id: SeqId) -> bool {
        self.index.contains_key(&id)
    }

    fn work(&mut self) -> Result<&mut Work, StepError> {
        self.work.as_deref_mut().ok_or(StepError::Busy)
    }

    /// Adds a constrained sequence (between steps). Its matcher's vocabulary must be
    /// the batch's.
    pub fn add(&mut self, id: SeqId, matcher: GrammarMatcher) -> Result<(), StepError> {
        if self.index.contains_key(&id) {
            return Err(StepError::Duplicate(id));
        }
        if matcher.vocab_size() != self.vocab {
            return Err(StepError::Vocab { got: matcher.vocab_size(), batch: self.vocab });
        }
        let work = self.work()?;
        work.rows.push(Row { id, matcher, step_row: None, pending: None, error: None });
        let p = work.rows.len() - 1;
        self.index.insert(id, p);
        Ok(())
    }

    /// Takes a sequence out (finished, cancelled); returns its matcher. Between steps.
    pub fn remove(&mut self, id: SeqId) -> Result<Option<GrammarMatcher>, StepError> {
        let Some(&p) = self.index.get(&id) else {
            return Ok(None);
        };
        let work = self.work.as_deref_mut().ok_or(StepError::Busy)?;
        let mut row = work.rows.swap_remove(p);
        row.flush();
        if let Some(moved) = work.rows.get(p) {
            self.index.insert(moved.id, p);
        }
        self.index.remove(&id);
        Ok(Some(row.matcher))
    }

    /// Starts filling the masks of this step's constrained rows on the pool and
    /// returns at once: run the forward now. `rows[r]` is the sequence of logits row
    /// `r`; ids not in the batch are unconstrained rows.
    pub fn begin_step(&mut self, rows: &[SeqId]) -> Result<(), StepError> {
        if self.begun {
            return Err(StepError::Busy);
        }
        self.masked_rows.clear();
        let vocab = self.vocab;
        let index = &self.index;
        let work = self.work.as_deref_mut().ok_or(StepError::Busy)?;
        let mut any = false;
        for (r, id) in rows.iter().enumerate() {
            if let Some(&p) = index.get(id) {
                if work.rows[p].step_row.is_some() {
                    for row in &mut work.rows {
                        row.step_row = None;
                    }
                    return Err(StepError::TwiceInStep(*id));
                }
                work.rows[p].step_row = Some(r);
                any = true;
            }
        }
        if work.mask.rows() < rows.len() {
            // Grown in powers of two so that a batch growing row by row allocates
            // rarely; rows beyond the step are never read.
            work.mask = TokenBitmask::new(rows.len().next_power_of_two(), vocab);
        }
        work.step_rows = rows.len();
        #[cfg(feature = "cuda")]
        if any {
            if let Some(up) = &mut work.upload {
                if let Err(e) = up.reserve(rows.len() * words_per_row(vocab)) {
                    for row in &mut work.rows {
                        row.step_row = None;
                    }
                    return Err(e);
                }
            }
        }
        self.begun = true;
        if !any {
            work.members.clear();
            work.fill = Duration::ZERO;
            return Ok(());
        }
        let Some(mut work) = self.work.take() else {
            return Err(StepError::Busy);
        };
        let (tx, rx) = mpsc::sync_channel(1);
        self.pool.spawn(move || {
            // A panic outside a row's own fill (which fails that row alone) fails the
            // step's rows, not the pool (rayon aborts the process on a panicking job).
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.fill())) {
                work.fail_step(&grammask::batch::panic_message(p.as_ref()));
            }
            // The receiver is gone only if the batch was dropped mid-step.
            let _ = tx.send(work);
        });
        self.pending = Some(rx);
        Ok(())
    }

    /// Waits for this step's fills and masks the logits of the constrained rows that
    /// need it, in one call with an `indices` array. Rows whose fill failed leave the
    /// batch and are reported in [`StepMasks::failed`].
    pub fn apply_masks<T: LogitElem>(
        &mut self,
        logits: Logits<'_, T>,
        layout: LogitsLayout,
    ) -> Result<StepMasks, StepError> {
        let mut report = self.finish_masks()?;
        if self.indices.is_empty() {
            return Ok(report);
        }
        let _span = tracing::debug_span!("apply_masks", rows = self.indices.len()).entered();
        let t1 = Instant::now();
        let words = words_per_row(self.vocab);
        let work = self.work.as_deref().ok_or(StepError::WorkerGone)?;
        #[cfg(feature = "cuda")]
        if let Some(up) = &work.upload {
            if let Some(e) = &up.error {
                return Err(StepError::Pool(e.clone()));
            }
            let n = work.step_rows * words;
            apply_token_bitmask_inplace(
                &self.options.device,
                logits,
                layout,
                Bitmask::Cuda(up.buf.slice(..n)),
                MaskLayout::new(work.step_rows, words),
                Some(Indices::Host(&self.indices)),
            )?;
            report.apply = t1.elapsed();
            return Ok(report);
        }
        apply_token_bitmask_inplace(
            &self.options.device,
            logits,
            layout,
            Bitmask::Host(work.mask.as_words()),
            MaskLayout::new(work.mask.rows(), words),
            Some(Indices::Host(&self.indices)),
        )?;
        report.apply = t1.elapsed();
        Ok(report)
    }

    /// Waits for this step's fills and ends the step without writing to any logits:
    /// for a caller that reads each row's mask where it reads the row
    /// ([`step_mask`](Self::step_mask), `Sampler::sample_masked`), as a host sampler
    /// can at no cost, where writing −∞ over host rows would be a memory-bound pass of
    /// its own. Rows whose fill failed leave the batch, as in
    /// [`apply_masks`](Self::apply_masks).
    pub fn finish_masks(&mut self) -> Result<StepMasks, StepError> {
        if !self.begun {
            return Err(StepError::NoStep);
        }
        let t0 = Instant::now();
        if let Some(rx) = self.pending.take() {
            let _span = tracing::debug_span!("wait_for_masks").entered();
            let work = rx.recv().map_err(|_| StepError::WorkerGone)?;
            self.work = Some(work);
        }
        let wait = t0.elapsed();
        self.begun = false;
        let work = self.work.as_deref_mut().ok_or(StepError::WorkerGone)?;
        let mut report =
            StepMasks { constrained: work.members.len(), fill: work.fill, wait, ..Default::default() };
        let mut failed_rows = std::mem::take(&mut work.failed);
        failed_rows.sort_by_key(|(i, _)| *i);
        let mut failed = failed_rows.into_iter().peekable();
        self.indices.clear();
        let mut drop_ids = Vec::new();
        for (i, &p) in work.members.iter().enumerate() {
            let row = &mut work.rows[p];
            let Some(target) = row.step_row.take() else { continue };
            if failed.peek().is_some_and(|(f, _)| *f == i) {
                if let Some((_, e)) = failed.next() {
                    drop_ids.push((row.id, RowError::Grammar(e)));
                }
                continue;
            }
            if !work.allows_all.get(i).copied().unwrap_or(false) {
                self.indices.push(target as i32);
            }
        }
        report.masked = self.indices.len();
        self.masked_rows.clear();
        self.masked_rows.resize(work.step_rows, false);
        for &r in &self.indices {
            self.masked_rows[r as usize] = true;
        }
        // Failed rows leave before the apply, so that an apply error cannot keep them.
        for (id, e) in drop_ids {
            self.remove(id)?;
            report.failed.push((id, e));
        }
        Ok(report)
    }

    /// Ends a begun step without masking (the forward failed): waits for the fill and
    /// takes the rows back, unchanged.
    pub fn abandon_step(&mut self) -> Result<(), StepError> {
        if !self.begun {
            return Ok(());
        }
        self.begun = false;
        if let Some(rx) = self.pending.take() {
            self.work = Some(rx.recv().map_err(|_| StepError::WorkerGone)?);
        }
        let work = self.work.as_deref_mut().ok_or(StepError::WorkerGone)?;
        work.failed.clear();
        for row in &mut work.rows {
            row.step_row = None;
        }
        Ok(())
    }

    /// Accepts the token sampled for `id`; then, when the grammar forces text next
    /// and jump-forward is on, accepts the forced tokens too and returns them. A
    /// finished row leaves the batch. On a grammar error the row stays unchanged (the
    /// caller decides: finish it with the error, or resample). Without jump-forward and
    /// with [`BatchOptions::defer_accepts`], a token other than a stop token is only
    /// recorded here and accepted by the next fill, on the mask pool.
    pub fn accept(&mut self, id: SeqId, token: u32) -> Result<Accepted, RowError> {
        self.accept_all(&[(id, token)]).pop().unwrap_or(Err(RowError::Unknown(id)))
    }

    /// [`accept`](Self::accept) for every `(id, token)` of a step, in `picks`' order;
    /// an id named twice gets [`RowError::Unknown`] the second time.
    ///
    /// Rows are advanced one after another on the calling thread: spreading them over
    /// other threads was measured slower (H200 host, batch 8–128: step p50 +200–500
    /// µs), as the matchers' state then moves between cores and the next fill, on the
    /// mask pool, finds it cold.
    pub fn accept_all(&mut self, picks: &[(SeqId, u32)]) -> Vec<Result<Accepted, RowError>> {
        let max_rollback = if self.options.rollback_ok { grammask::matcher::MAX_RETOKENIZED } else { 0 };
        let encoder = self.options.encoder.clone();
        let defer = self.options.defer_accepts && encoder.is_none();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(picks.len());
        for &(id, token) in picks {
            let p = match self.index.get(&id) {
                Some(&p) if seen.insert(id) => p,
                _ => {
                    out.push(Err(RowError::Unknown(id)));
                    continue;
                }
            };
            let Some(work) = self.work.as_deref_mut() else {
                out.push(Err(RowError::Unknown(id)));
                continue;
            };
            let row = &mut work.rows[p];
            row.flush();
            if let Some(e) = row.error.take() {
                out.push(Err(e.into()));
                continue;
            }
            let stop = row.matcher.compiled().tokenizer().stop_tokens().contains(&token);
            if defer && !stop && token < row.matcher.vocab_size() as u32 {
                row.pending = Some(token);
                out.push(Ok(Accepted::Continue { forced: JumpForward::default() }));
                continue;
            }
            // A grammar that panics fails this row alone (it leaves the batch).
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                advance(&mut row.matcher, token, encoder.as_deref(), max_rollback)
            }))
            .unwrap_or_else(|p| {
                Err(grammask::Error::Panicked(grammask::batch::panic_message(p.as_ref())).into())
            });
            if matches!(r, Ok(Accepted::Finished) | Err(RowError::Grammar(grammask::Error::Panicked(_)))) {
                // A row that ended cannot fail to leave (between steps: not busy).
                let _ = self.remove(id);
            }
            out.push(r);
        }
        out
    }

    /// The bitmask row of logits row `r` in the step that [`apply_masks`](Self::apply_masks)
    /// or [`finish_masks`](Self::finish_masks) ended (`None` for a row that needs no
    /// mask: unconstrained, allowing everything, or failed): a sampler can look at the
    /// allowed tokens only (`Sampler::sample_masked`). Valid until the next
    /// [`begin_step`](Self::begin_step).
    pub fn step_mask(&self, r: usize) -> Option<&[u32]> {
        if !self.masked_rows.get(r).copied().unwrap_or(false) || self.begun {
            return None;
        }
        self.work.as_deref().map(|w| w.mask.row(r))
    }

    /// The matcher of `id` (to inspect its state between steps), with any deferred
    /// token accepted.
    pub fn matcher(&mut self, id: SeqId) -> Option<&GrammarMatcher> {
        let p = *self.index.get(&id)?;
        let row = &mut self.work.as_deref_mut()?.rows[p];
        row.flush();
        Some(&row.matcher)
    }
}
