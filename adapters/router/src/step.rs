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
//!                                              (deferred by default: see below)
//! ```
//!
//! By default ([`BatchOptions::defer_accepts`]) `accept` only records a drawn token: the
//! next step's fill accepts it on the pool, while the forward runs, and with
//! jump-forward on finds the text the grammar forces after it there too. A row with
//! forced text is not masked in that step: its logits row (the forward of the drawn
//! token) is not sampled, and the forced tokens are its output instead
//! ([`StepMasks::forced`]) — the step thread neither accepts nor re-tokenizes.
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
//!
//! Each row fills on the pool on its own and comes back as soon as its mask is ready,
//! so one slow mask (a state whose mask the grammar had not computed yet) need not
//! hold up the batch: [`StructuredBatch::finish_masks_by`] waits until a deadline, and a
//! row whose mask is not ready by then sits the step out ([`StepMasks::late`]) — the
//! caller keeps its logits row and samples it once the mask is back
//! ([`StepMasks::arrived`]), while the other rows go on.

use grammask::bitmask::words_per_row;
use grammask::matcher::{DraftTree, JumpForward, TextEncoder, TreeFill};
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
    /// A step names a row still filling the mask of a step it sat out.
    #[error("sequence {0} is still filling a late mask: it sits out until the mask is back")]
    Late(SeqId),
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
    /// A setting this model or batch cannot honor.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// A row's own failure; the other rows go on.
#[derive(Debug, thiserror::Error)]
pub enum RowError {
    /// `accept` of a sequence that is not in the batch (never added, finished,
    /// removed, or dropped after a failed fill).
    #[error("sequence {0} is not in the batch")]
    Unknown(SeqId),
    /// The row is still filling the mask of a step it sat out.
    #[error("sequence {0} is still filling a late mask")]
    Late(SeqId),
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
    costs: &mut AcceptCosts,
) -> Result<Accepted, RowError> {
    let t0 = Instant::now();
    m.accept_token(token)?;
    let finished = m.is_terminated();
    let t1 = Instant::now();
    costs.accept += t1 - t0;
    costs.tokens += 1;
    if finished {
        return Ok(Accepted::Finished);
    }
    let mut forced = JumpForward::default();
    if let Some(enc) = encoder {
        let jf = m.apply_jump_forward(enc, max_rollback)?;
        if !jf.ids.is_empty() {
            forced = jf;
        }
        costs.jump_forward += t1.elapsed();
    }
    Ok(Accepted::Continue { forced })
}

/// What accepting tokens cost on the step thread since the last
/// [`StructuredBatch::take_accept_costs`]: the grammar's accept, and jump-forward (finding
/// the forced text, re-tokenizing it, accepting its tokens) apart.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AcceptCosts {
    /// Accepting the drawn tokens (and checking whether the grammar ended).
    pub accept: Duration,
    /// Jump-forward after them.
    pub jump_forward: Duration,
    /// Drawn tokens accepted.
    pub tokens: u64,
}

/// Timings and results of one step's masks.
#[derive(Debug, Default)]
pub struct StepMasks {
    /// Constrained rows in the step.
    pub constrained: usize,
    /// Rows masked (constrained rows whose mask allowed less than everything).
    pub masked: usize,
    /// Wall time of the fill on the pool (from the first of the step's rows taken up to
    /// the last one filled; the rows that were late not counted).
    pub fill: Duration,
    /// Time the step waited for the fill (zero when the forward took longer).
    pub wait: Duration,
    /// Time applying the masks took.
    pub apply: Duration,
    /// Rows whose fill failed (this step's, or a late row's that came back): they left
    /// the batch and were not masked; finish their sequences with the error.
    pub failed: Vec<(SeqId, RowError)>,
    /// Rows whose deferred token made the grammar force text (jump-forward with
    /// [`BatchOptions::defer_accepts`]): the fill accepted the forced tokens. These rows
    /// were not masked and their logits rows are not to be sampled: append the forced
    /// tokens instead (after taking back `rollback` tokens). A late row of an earlier
    /// step may be here (not in [`arrived`](Self::arrived)): drop the logits kept for it.
    pub forced: Vec<(SeqId, JumpForward)>,
    /// Rows of this step whose mask was not ready by the deadline
    /// ([`StructuredBatch::finish_masks_by`]): they sit the step out. Keep their logits
    /// rows and leave them out of the next steps until they are back in
    /// [`arrived`](Self::arrived) (or [`forced`](Self::forced)).
    pub late: Vec<SeqId>,
    /// Late rows of earlier steps whose mask is now ready: sample the logits kept for
    /// them under [`StructuredBatch::late_mask`], then accept as usual.
    pub arrived: Vec<SeqId>,
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
    /// Accept a sampled token on the mask pool at the start of the next step's fill
    /// (while the forward runs) instead of on the step thread — with jump-forward, find,
    /// re-tokenize and accept the forced text there too, and hand the forced tokens out
    /// as that step's output for the row ([`StepMasks::forced`]). A stop token is still
    /// accepted at once (the row ends); a deferred token the grammar refuses fails its
    /// row at the next step. The mask allowed the token, so that only happens if
    /// something else went wrong.
    ///
    /// The trade, with jump-forward: the step thread does no grammar work, and a row's
    /// forced text costs it one step more (the drawn token's forward, whose logits are
    /// not needed, and then the forced tokens' forward) instead of riding in the drawn
    /// token's forward. A caller with an encoder must read [`StepMasks::forced`] (or
    /// turn this off): a forced row is not masked. Draft trees
    /// ([`StructuredBatch::set_draft`]) accept their paths at once; a drafter that must
    /// see the state after the forced text wants this off when an encoder is set.
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
    /// A sampled token whose acceptance was deferred to the next fill.
    pending: Option<u32>,
    /// A deferred token was accepted and jump-forward (when on) has not looked past it:
    /// the next fill does, unless the row has a draft tree (its masks are those of the
    /// state the drafter saw; the forced text is then left to the tree and the model).
    jump_owed: bool,
    /// A deferred acceptance failed: the row fails at its next fill.
    error: Option<grammask::Error>,
    /// The mask of its last fill. Each row has its own, so that a fill that finishes late
    /// writes where no other step reads.
    mask: Vec<u32>,
    /// The outcome of its last fill: whether the mask allows every token, or why not.
    filled: Option<grammask::Result<bool>>,
    /// The draft tree to mask at the next fill, with its masks once filled.
    draft: Option<RowDraft>,
    /// What the last fill's jump-forward forced after the deferred token (not yet
    /// reported).
    forced: Option<JumpForward>,
}

/// A row's draft tree and the masks of its nodes.
struct RowDraft {
    tree: DraftTree,
    /// Row `v`: the mask after the path to node `v` (row 0: the row's own mask).
    masks: TokenBitmask,
    /// What the fill found (rejected nodes).
    fill: TreeFill,
}

impl Row {
    /// Accepts the deferred token, if any; a failure is kept for the next fill.
    fn flush(&mut self) {
        if let Some(t) = self.pending.take() {
            match self.matcher.accept_token(t) {
                Ok(()) => self.jump_owed = true,
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// Accepts the deferred token (it overlaps the forward too) and, with an encoder,
    /// the text the grammar forces after it — then the row is done for this step (its
    /// logits are not sampled) — or fills the mask. A panicking grammar fails this row
    /// alone (on the pool, a panic would abort the process).
    fn fill(&mut self, encoder: Option<&(dyn TextEncoder + Send + Sync)>, max_rollback: usize) {
        self.flush();
        let owed = std::mem::take(&mut self.jump_owed) && self.draft.is_none();
        let filled = match self.error.take() {
            Some(e) => Err(e),
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if let (true, Some(enc)) = (owed, encoder) {
                    let jf = self.matcher.apply_jump_forward(enc, max_rollback)?;
                    if !jf.ids.is_empty() {
                        self.forced = Some(jf);
                        // Nothing to mask: the row's logits are not sampled this step.
                        return Ok(true);
                    }
                }
                match &mut self.draft {
                    None => self.matcher.fill_next_token_bitmask(&mut self.mask),
                    Some(d) => {
                        // Every node's mask in one walk; row 0 is the row's own.
                        let vocab = self.matcher.vocab_size();
                        if d.masks.rows() < d.tree.len() {
                            d.masks = TokenBitmask::new(d.tree.len().next_power_of_two(), vocab);
                        }
                        d.fill = self.matcher.fill_draft_tree_bitmasks(&d.tree, &mut d.masks, 0)?;
                        self.mask.copy_from_slice(d.masks.row(0));
                        Ok(grammask::bitmask::count_allowed(&self.mask, vocab) == vocab)
                    }
                }
            }))
            .unwrap_or_else(|p| Err(grammask::Error::Panicked(grammask::batch::panic_message(p.as_ref())))),
        };
        self.filled = Some(filled);
    }

    /// The mask to sample under: `None` when it allows everything (or was not filled).
    fn needed_mask(&self) -> Option<&[u32]> {
        matches!(self.filled, Some(Ok(false))).then_some(&self.mask[..])
    }
}

/// A row's grammar as a drafter sees it ([`StructuredBatch::draft_grammar`]): which
/// continuations are legal, without changing the row's state.
pub struct DraftGrammar<'a> {
    matcher: &'a mut GrammarMatcher,
    scratch: Vec<u32>,
    encoder: Option<Arc<dyn TextEncoder + Send + Sync>>,
}

impl std::fmt::Debug for DraftGrammar<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftGrammar").finish_non_exhaustive()
    }
}

impl DraftGrammar<'_> {
    /// How many leading tokens of `chain` the grammar accepts from here.
    pub fn validate(&mut self, chain: &[u32]) -> usize {
        self.matcher.validate_tokens(chain)
    }

    /// The tokens jump-forward appends after `prefix` (empty: jump-forward is off, nothing
    /// is forced there, or `prefix` is rejected) — what accepting `prefix` would give.
    pub fn forced_after(&mut self, prefix: &[u32]) -> Vec<u32> {
        let Some(enc) = self.encoder.clone() else { return Vec::new() };
        if self.matcher.is_terminated() || self.matcher.accept_tokens(prefix).is_err() {
            return Vec::new();
        }
        let ids = if self.matcher.is_terminated() {
            Vec::new()
        } else {
            self.matcher.jump_forward_tokens_within(enc.as_ref(), 0).map(|jf| jf.ids).unwrap_or_default()
        };
        let _ = self.matcher.rollback(prefix.len());
        ids
    }

    /// The likeliest-looking of few legal continuations after `prefix`: when at most
    /// `8 × width` tokens are allowed there (an enum value, a key, a literal, a tag — not a
    /// free string), the `width` longest of them (a model writes a word as one long token
    /// more often than as pieces), longest first; `None` when more are allowed, `prefix`
    /// is rejected or the grammar ended.
    pub fn alternatives(&mut self, prefix: &[u32], width: usize) -> Option<Vec<u32>> {
        if width == 0 || self.matcher.is_terminated() || self.matcher.accept_tokens(prefix).is_err() {
            return None;
        }
        let vocab = self.matcher.vocab_size();
        let filled = self.matcher.fill_next_token_bitmask(&mut self.scratch);
        // (Undone whatever the fill did: the prefix was accepted whole.)
        let _ = self.matcher.rollback(prefix.len());
        let legal = width.saturating_mul(8).min(256);
        match filled {
            Ok(false) if grammask::bitmask::count_allowed(&self.scratch, vocab) <= legal => {
                let mut out = Vec::new();
                for (w, &word) in self.scratch.iter().enumerate() {
                    let mut bits = word;
                    while bits != 0 {
                        let id = w * 32 + bits.trailing_zeros() as usize;
                        if id < vocab {
                            out.push(id as u32);
                        }
                        bits &= bits - 1;
                    }
                }
                let tok = self.matcher.compiled().tokenizer().clone();
                out.sort_by_key(|&t| (std::cmp::Reverse(tok.token_bytes(t).len()), t));
                out.truncate(width);
                (!out.is_empty()).then_some(out)
            }
            _ => None,
        }
    }
}

/// Where a constrained sequence is.
enum Place {
    /// In the batch, between fills.
    Home(Box<Row>),
    /// On the mask pool, filling its mask for step `step`; `removed` once the caller took
    /// it out meanwhile (it is dropped when it comes back).
    Away { step: u64, removed: bool },
}

/// A row back from the pool.
struct Landed {
    step: u64,
    row: Box<Row>,
    /// When its fill began and ended.
    began: Instant,
    done: Instant,
}

/// The device copy of the masks, for logits on a CUDA device: each row's fill copies its
/// mask on a stream of its own, so the upload overlaps the forward too and the apply
/// reads the masks on the device.
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
        self.error = None;
        Ok(())
    }

    /// Copies one row's mask to row `r` of the device buffer.
    fn upload(&mut self, r: usize, mask: &[u32]) {
        let n = mask.len();
        let r = self.stream.memcpy_htod(mask, &mut self.buf.slice_mut(r * n..(r + 1) * n));
        if let Err(e) = r {
            self.error.get_or_insert(format!("mask upload: {e}"));
        }
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
    rows: HashMap<SeqId, Place>,
    /// Rows come back from the pool here, each as soon as its own fill ends.
    tx: mpsc::Sender<Landed>,
    rx: mpsc::Receiver<Landed>,
    /// The number of the step begun last.
    step: u64,
    /// A step was begun and its masks not applied yet.
    begun: bool,
    /// The constrained rows of the step begun: `(sequence, logits row)`.
    current: Vec<(SeqId, usize)>,
    step_rows: usize,
    /// Late rows back since the last report: ready, or failed.
    arrived: Vec<SeqId>,
    arrived_failed: Vec<(SeqId, RowError)>,
    arrived_forced: Vec<(SeqId, JumpForward)>,
    indices: Vec<i32>,
    /// Per row of the last finished step: the sequence whose mask applies to it.
    masked_rows: Vec<Option<SeqId>>,
    /// The step's masks side by side, for an apply on host logits.
    host: TokenBitmask,
    /// Accepting tokens since the last report.
    costs: AcceptCosts,
    #[cfg(feature = "cuda")]
    upload: Option<Arc<std::sync::Mutex<MaskUpload>>>,
}

impl std::fmt::Debug for StructuredBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StructuredBatch")
            .field("vocab", &self.vocab)
            .field("rows", &self.len())
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
        let (tx, rx) = mpsc::channel();
        Ok(Self {
            vocab,
            pool: Arc::new(pool),
            #[cfg(feature = "cuda")]
            upload: MaskUpload::new(&options.device)?.map(|u| Arc::new(std::sync::Mutex::new(u))),
            options,
            rows: HashMap::new(),
            tx,
            rx,
            step: 0,
            begun: false,
            current: Vec::new(),
            step_rows: 0,
            arrived: Vec::new(),
            arrived_failed: Vec::new(),
            arrived_forced: Vec::new(),
            indices: Vec::new(),
            masked_rows: Vec::new(),
            host: TokenBitmask::new(0, vocab),
            costs: AcceptCosts::default(),
        })
    }

    /// Constrained sequences in the batch (late ones included).
    pub fn len(&self) -> usize {
        self.rows.values().filter(|p| !matches!(p, Place::Away { removed: true, .. })).count()
    }

    /// True when no sequence is constrained.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if `id` is in the batch.
    pub fn contains(&self, id: SeqId) -> bool {
        matches!(self.rows.get(&id), Some(Place::Home(_) | Place::Away { removed: false, .. }))
    }

    /// Adds a constrained sequence (between steps). Its matcher's vocabulary must be
    /// the batch's.
    pub fn add(&mut self, id: SeqId, matcher: GrammarMatcher) -> Result<(), StepError> {
        if self.begun {
            return Err(StepError::Busy);
        }
        if self.contains(id) {
            return Err(StepError::Duplicate(id));
        }
        if matcher.vocab_size() != self.vocab {
            return Err(StepError::Vocab { got: matcher.vocab_size(), batch: self.vocab });
        }
        let mask = vec![0; words_per_row(self.vocab)];
        let row = Row {
            id,
            matcher,
            pending: None,
            jump_owed: false,
            error: None,
            mask,
            filled: None,
            draft: None,
            forced: None,
        };
        self.rows.insert(id, Place::Home(Box::new(row)));
        Ok(())
    }

    /// Takes a sequence out (finished, cancelled) between steps; returns its matcher, or
    /// `None` when it is not in the batch or is still filling a late mask (it is then
    /// dropped when its fill ends).
    pub fn remove(&mut self, id: SeqId) -> Result<Option<GrammarMatcher>, StepError> {
        if self.begun {
            return Err(StepError::Busy);
        }
        match self.rows.remove(&id) {
            Some(Place::Home(mut row)) => {
                row.flush();
                Ok(Some(row.matcher))
            }
            Some(Place::Away { step, .. }) => {
                self.rows.insert(id, Place::Away { step, removed: true });
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Starts filling the masks of this step's constrained rows on the pool and
    /// returns at once: run the forward now. `rows[r]` is the sequence of logits row
    /// `r`; ids not in the batch are unconstrained rows. A late row still filling its
    /// mask cannot be in a step ([`StepError::Late`]).
    pub fn begin_step(&mut self, rows: &[SeqId]) -> Result<(), StepError> {
        if self.begun {
            return Err(StepError::Busy);
        }
        let mut seen = std::collections::HashSet::new();
        for id in rows {
            match self.rows.get(id) {
                Some(Place::Home(_)) if !seen.insert(*id) => return Err(StepError::TwiceInStep(*id)),
                Some(Place::Away { removed: false, .. }) => return Err(StepError::Late(*id)),
                _ => {}
            }
        }
        #[cfg(feature = "cuda")]
        if let Some(up) = &self.upload {
            up.lock().unwrap_or_else(|p| p.into_inner()).reserve(rows.len() * words_per_row(self.vocab))?;
        }
        self.step += 1;
        self.current.clear();
        self.masked_rows.clear();
        self.step_rows = rows.len();
        let mut queue = std::collections::VecDeque::new();
        for (r, &id) in rows.iter().enumerate() {
            let Some(place) = self.rows.get_mut(&id) else { continue };
            let Place::Home(_) = place else { continue };
            let Place::Home(row) = std::mem::replace(place, Place::Away { step: self.step, removed: false })
            else {
                continue;
            };
            self.current.push((id, r));
            queue.push_back((r, row));
        }
        // One job per fill thread, each taking rows from the queue and sending each back
        // as soon as it is filled (a job per row was measured slower: each paid the
        // pool's wake-up).
        let jobs = self.options.fill_threads.max(1).min(queue.len());
        let queue = Arc::new(std::sync::Mutex::new(queue));
        let max_rollback = self.max_rollback();
        for _ in 0..jobs {
            let (tx, step, queue) = (self.tx.clone(), self.step, queue.clone());
            let encoder = self.options.encoder.clone();
            #[cfg(feature = "cuda")]
            let upload = self.upload.clone();
            self.pool.spawn(move || loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                let Some((r, mut row)) = next else { break };
                let _span = tracing::debug_span!("fill", row = r).entered();
                let began = Instant::now();
                row.fill(encoder.as_deref(), max_rollback);
                #[cfg(feature = "cuda")]
                if let (Some(up), Some(mask)) = (&upload, row.needed_mask()) {
                    up.lock().unwrap_or_else(|p| p.into_inner()).upload(r, mask);
                }
                // The receiver lives as long as the batch.
                let _ = tx.send(Landed { step, row, began, done: Instant::now() });
            });
        }
        self.begun = true;
        Ok(())
    }

    /// Puts a row back from the pool; true when it belongs to the step begun.
    fn land(&mut self, landed: Landed) -> bool {
        let id = landed.row.id;
        match self.rows.get(&id) {
            Some(Place::Away { step, removed: false }) if *step == landed.step => {}
            Some(Place::Away { removed: true, .. }) => {
                self.rows.remove(&id);
                return false;
            }
            _ => return false,
        }
        let current = self.begun && landed.step == self.step;
        let failed = matches!(landed.row.filled, Some(Err(_)) | None);
        let mut row = landed.row;
        // A late row whose grammar forced text: its tokens, not its kept logits.
        let forced = if current { None } else { row.forced.take() };
        self.rows.insert(id, Place::Home(row));
        if let Some(jf) = forced {
            self.arrived_forced.push((id, jf));
            return false;
        }
        if current {
            return true;
        }
        // A late row: ready for the logits kept for it, or failed.
        if failed {
            if let Some(Place::Home(row)) = self.rows.remove(&id) {
                let e = match row.filled {
                    Some(Err(e)) => e,
                    _ => grammask::Error::Panicked("the fill did not run".into()),
                };
                self.arrived_failed.push((id, RowError::Grammar(e)));
            }
        } else {
            self.arrived.push(id);
        }
        false
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
        #[cfg(feature = "cuda")]
        if let Some(up) = &self.upload {
            let up = up.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = &up.error {
                return Err(StepError::Pool(e.clone()));
            }
            let n = self.step_rows * words;
            apply_token_bitmask_inplace(
                &self.options.device,
                logits,
                layout,
                Bitmask::Cuda(up.buf.slice(..n)),
                MaskLayout::new(self.step_rows, words),
                Some(Indices::Host(&self.indices)),
            )?;
            report.apply = t1.elapsed();
            return Ok(report);
        }
        if self.host.rows() < self.step_rows {
            // Grown in powers of two so that a batch growing row by row allocates
            // rarely; rows beyond the step are never read.
            self.host = TokenBitmask::new(self.step_rows.next_power_of_two(), self.vocab);
        }
        for &r in &self.indices {
            let r = r as usize;
            if let Some(Some(Place::Home(row))) = self.masked_rows[r].map(|id| self.rows.get(&id)) {
                self.host.row_mut(r).copy_from_slice(&row.mask);
            }
        }
        apply_token_bitmask_inplace(
            &self.options.device,
            logits,
            layout,
            Bitmask::Host(self.host.as_words()),
            MaskLayout::new(self.host.rows(), words),
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
        self.finish_masks_by(None)
    }

    /// [`finish_masks`](Self::finish_masks), waiting for the fills no later than
    /// `deadline`: a row whose mask is not ready by then sits the step out
    /// ([`StepMasks::late`]) instead of stalling the batch. Its fill goes on; once it
    /// ends, a later report lists the row in [`StepMasks::arrived`] and its mask is
    /// [`late_mask`](Self::late_mask) — or, where its grammar forced text after a
    /// deferred token, in [`StepMasks::forced`].
    pub fn finish_masks_by(&mut self, deadline: Option<Instant>) -> Result<StepMasks, StepError> {
        if !self.begun {
            return Err(StepError::NoStep);
        }
        let t0 = Instant::now();
        let mut waiting =
            self.current.iter().filter(|(id, _)| !matches!(self.rows.get(id), Some(Place::Home(_)))).count();
        // When the step's first row was taken up and its last one filled.
        let mut fill: Option<(Instant, Instant)> = None;
        let mut widen = |began: Instant, done: Instant| {
            fill = Some(fill.map_or((began, done), |(b, d)| (b.min(began), d.max(done))));
        };
        {
            let _span = tracing::debug_span!("wait_for_masks").entered();
            while waiting > 0 {
                let landed = match deadline {
                    None => self.rx.recv().map_err(|_| StepError::WorkerGone)?,
                    Some(d) => match self.rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                        Ok(l) => l,
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return Err(StepError::WorkerGone),
                    },
                };
                let (began, done) = (landed.began, landed.done);
                if self.land(landed) {
                    waiting -= 1;
                    widen(began, done);
                }
            }
        }
        // Late rows of earlier steps that are back by now.
        while let Ok(landed) = self.rx.try_recv() {
            let (began, done) = (landed.began, landed.done);
            if self.land(landed) {
                widen(began, done);
            }
        }
        let wait = t0.elapsed();
        self.begun = false;
        let mut report = StepMasks {
            constrained: self.current.len(),
            fill: fill.map_or(Duration::ZERO, |(b, d)| d.saturating_duration_since(b)),
            wait,
            ..Default::default()
        };
        self.indices.clear();
        self.masked_rows.clear();
        self.masked_rows.resize(self.step_rows, None);
        for &(id, r) in &self.current {
            match self.rows.get_mut(&id) {
                Some(Place::Home(row)) => match row.filled.take() {
                    Some(Ok(_)) if row.forced.is_some() => {
                        row.filled = Some(Ok(true));
                        report.forced.extend(row.forced.take().map(|jf| (id, jf)));
                    }
                    Some(Ok(all)) => {
                        row.filled = Some(Ok(all));
                        if !all {
                            self.indices.push(r as i32);
                            self.masked_rows[r] = Some(id);
                        }
                    }
                    Some(Err(e)) => report.failed.push((id, RowError::Grammar(e))),
                    None => report.failed.push((
                        id,
                        RowError::Grammar(grammask::Error::Panicked("the fill did not run".into())),
                    )),
                },
                Some(Place::Away { .. }) => report.late.push(id),
                None => {}
            }
        }
        report.masked = self.indices.len();
        // Failed rows leave before the apply, so that an apply error cannot keep them.
        for (id, _) in &report.failed {
            self.rows.remove(id);
        }
        report.arrived = std::mem::take(&mut self.arrived);
        report.failed.append(&mut self.arrived_failed);
        report.forced.append(&mut self.arrived_forced);
        Ok(report)
    }

    /// Between steps: waits up to `timeout` for a late row to come back, and reports
    /// those back ([`StepMasks::arrived`], [`StepMasks::forced`], [`StepMasks::failed`];
    /// nothing else is set) — for a caller whose rows are all sitting out, with nothing
    /// to forward meanwhile.
    pub fn collect_late(&mut self, timeout: Duration) -> Result<StepMasks, StepError> {
        if self.begun {
            return Err(StepError::Busy);
        }
        if self.arrived.is_empty() && self.arrived_failed.is_empty() && self.arrived_forced.is_empty() {
            match self.rx.recv_timeout(timeout) {
                Ok(landed) => {
                    self.land(landed);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(StepError::WorkerGone),
            }
        }
        while let Ok(landed) = self.rx.try_recv() {
            self.land(landed);
        }
        let mut report = StepMasks { arrived: std::mem::take(&mut self.arrived), ..Default::default() };
        report.failed.append(&mut self.arrived_failed);
        report.forced.append(&mut self.arrived_forced);
        Ok(report)
    }

    /// Ends a begun step without masking (the forward failed): waits for its fills and
    /// takes the rows back, their masks unused. The report is
    /// [`finish_masks`](Self::finish_masks)'s: rows whose fill failed have left, late
    /// rows of earlier steps may be back, and rows in [`StepMasks::forced`] have
    /// accepted their forced tokens (a caller that goes on with them must append them).
    pub fn abandon_step(&mut self) -> Result<StepMasks, StepError> {
        if !self.begun {
            return Ok(StepMasks::default());
        }
        let report = self.finish_masks_by(None)?;
        for (id, _) in std::mem::take(&mut self.current) {
            if let Some(Place::Home(row)) = self.rows.get_mut(&id) {
                row.filled = None;
            }
        }
        self.indices.clear();
        self.masked_rows.clear();
        Ok(report)
    }

    /// Accepts the token sampled for `id`; then, when the grammar forces text next
    /// and jump-forward is on, accepts the forced tokens too and returns them. A
    /// finished row leaves the batch. On a grammar error the row stays unchanged (the
    /// caller decides: finish it with the error, or resample). With
    /// [`BatchOptions::defer_accepts`], a token other than a stop token is only recorded
    /// here and accepted by the next fill, on the mask pool (which also finds any forced
    /// text: [`StepMasks::forced`]).
    pub fn accept(&mut self, id: SeqId, token: u32) -> Result<Accepted, RowError> {
        self.accept_all(&[(id, token)]).pop().unwrap_or(Err(RowError::Unknown(id)))
    }

    /// How many tokens a jump-forward may take back.
    fn max_rollback(&self) -> usize {
        if self.options.rollback_ok {
            grammask::matcher::MAX_RETOKENIZED
        } else {
            0
        }
    }

    /// What accepting tokens cost since the last call ([`AcceptCosts`]).
    pub fn take_accept_costs(&mut self) -> AcceptCosts {
        std::mem::take(&mut self.costs)
    }

    /// [`accept`](Self::accept) for every `(id, token)` of a step, in `picks`' order;
    /// an id named twice gets [`RowError::Unknown`] the second time.
    ///
    /// Rows are advanced one after another on the calling thread: spreading them over
    /// other threads was measured slower (H200 host, batch 8–128: step p50 +200–500
    /// µs), as the matchers' state then moves between cores and the next fill, on the
    /// mask pool, finds it cold.
    pub fn accept_all(&mut self, picks: &[(SeqId, u32)]) -> Vec<Result<Accepted, RowError>> {
        let max_rollback = self.max_rollback();
        let encoder = self.options.encoder.clone();
        let defer = self.options.defer_accepts;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(picks.len());
        for &(id, token) in picks {
            let row = match self.rows.get_mut(&id) {
                Some(Place::Home(row)) if seen.insert(id) => row,
                Some(Place::Away { removed: false, .. }) => {
                    out.push(Err(RowError::Late(id)));
                    continue;
                }
                _ => {
                    out.push(Err(RowError::Unknown(id)));
                    continue;
                }
            };
            row.flush();
            // A token drawn after it: jump-forward is not owed past the earlier one.
            row.jump_owed = false;
            row.draft = None;
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
                advance(&mut row.matcher, token, encoder.as_deref(), max_rollback, &mut self.costs)
            }))
            .unwrap_or_else(|p| {
                Err(grammask::Error::Panicked(grammask::batch::panic_message(p.as_ref())).into())
            });
            if matches!(r, Ok(Accepted::Finished) | Err(RowError::Grammar(grammask::Error::Panicked(_)))) {
                // A row that ended leaves (between steps: not busy).
                self.rows.remove(&id);
            }
            out.push(r);
        }
        out
    }

    /// Gives `id` a draft tree to verify in the next step (speculative decoding): the
    /// step's fill masks every node ([`draft_masks`](Self::draft_masks)), row 0 being the
    /// row's own mask as ever. Between steps; the tree holds until the row's next accept.
    pub fn set_draft(&mut self, id: SeqId, tree: DraftTree) -> Result<(), RowError> {
        match self.rows.get_mut(&id) {
            Some(Place::Home(row)) => {
                let masks = match row.draft.take() {
                    Some(d) => d.masks,
                    None => TokenBitmask::new(0, self.vocab),
                };
                row.draft = Some(RowDraft { tree, masks, fill: TreeFill::default() });
                Ok(())
            }
            Some(Place::Away { removed: false, .. }) => Err(RowError::Late(id)),
            _ => Err(RowError::Unknown(id)),
        }
    }

    /// The masks of `id`'s draft tree after the step's fill: row `v` is the mask after the
    /// path to node `v` (all zero for a node the grammar rejects, one under it, or one
    /// after the grammar ended), and what the fill found. `None` when the row had no draft
    /// or its fill failed.
    pub fn draft_masks(&self, id: SeqId) -> Option<(&TokenBitmask, &TreeFill)> {
        match self.rows.get(&id)? {
            Place::Home(row) if matches!(row.filled, Some(Ok(_))) => {
                row.draft.as_ref().map(|d| (&d.masks, &d.fill))
            }
            _ => None,
        }
    }

    /// A view of `id`'s grammar for a drafter, between steps (`None`: not in the batch, or
    /// away filling a late mask). Whatever the drafter does, the state is as before after.
    pub fn draft_grammar(&mut self, id: SeqId) -> Option<DraftGrammar<'_>> {
        match self.rows.get_mut(&id)? {
            Place::Home(row) => {
                row.flush();
                let words = words_per_row(self.vocab);
                let encoder = self.options.encoder.clone();
                Some(DraftGrammar { matcher: &mut row.matcher, scratch: vec![0; words], encoder })
            }
            Place::Away { .. } => None,
        }
    }

    /// Accepts the tokens a verify step took for `id` (an accepted draft path, then the
    /// token drawn after it), one by one as [`accept`](Self::accept) would. Where the
    /// grammar forces text after a token (jump-forward, when on) and `tokens` goes on with
    /// exactly the forced tokens, they are taken as part of the path; otherwise, and where
    /// the grammar ends, it stops there. Returns how many of `tokens` were taken and what
    /// became of the row (the forced tokens still to append); the caller drops the rest.
    pub fn accept_path(&mut self, id: SeqId, tokens: &[u32]) -> Result<(usize, Accepted), RowError> {
        let max_rollback = self.max_rollback();
        let encoder = self.options.encoder.clone();
        let row = match self.rows.get_mut(&id) {
            Some(Place::Home(row)) => row,
            Some(Place::Away { removed: false, .. }) => return Err(RowError::Late(id)),
            _ => return Err(RowError::Unknown(id)),
        };
        row.flush();
        row.jump_owed = false;
        row.draft = None;
        if let Some(e) = row.error.take() {
            return Err(e.into());
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut i = 0;
            while i < tokens.len() {
                let a =
                    advance(&mut row.matcher, tokens[i], encoder.as_deref(), max_rollback, &mut self.costs)?;
                i += 1;
                match a {
                    Accepted::Finished => return Ok((i, Accepted::Finished)),
                    Accepted::Continue { forced } if !forced.ids.is_empty() => {
                        // Forced text was accepted with the token: where the path goes on
                        // with exactly those tokens (a draft's forced nodes), go on past them.
                        let n = forced.ids.len();
                        if forced.rollback == 0 && tokens.get(i..i + n) == Some(&forced.ids[..]) {
                            i += n;
                            continue;
                        }
                        return Ok((i, Accepted::Continue { forced }));
                    }
                    Accepted::Continue { .. } => {}
                }
            }
            Ok((i, Accepted::Continue { forced: JumpForward::default() }))
        }))
        .unwrap_or_else(|p| {
            Err(grammask::Error::Panicked(grammask::batch::panic_message(p.as_ref())).into())
        });
        if matches!(r, Ok((_, Accepted::Finished)) | Err(RowError::Grammar(grammask::Error::Panicked(_)))) {
            self.rows.remove(&id);
        }
        r
    }

    /// The bitmask row of logits row `r` in the step that [`apply_masks`](Self::apply_masks)
    /// or [`finish_masks`](Self::finish_masks) ended (`None` for a row that needs no
    /// mask: unconstrained, allowing everything, failed or late): a sampler can look at
    /// the allowed tokens only (`Sampler::sample_masked`). Valid until the next
    /// [`begin_step`](Self::begin_step).
    pub fn step_mask(&self, r: usize) -> Option<&[u32]> {
        if self.begun {
            return None;
        }
        let id = (*self.masked_rows.get(r)?)?;
        match self.rows.get(&id)? {
            Place::Home(row) => row.needed_mask(),
            Place::Away { .. } => None,
        }
    }

    /// The mask of a late row that [`StepMasks::arrived`] reported, for the logits kept
    /// from the step it sat out (`None`: it allows every token, or `id` is not back).
    pub fn late_mask(&self, id: SeqId) -> Option<&[u32]> {
        match self.rows.get(&id)? {
            Place::Home(row) => row.needed_mask(),
            Place::Away { .. } => None,
        }
    }

    /// The matcher of `id` (to inspect its state between steps), with any deferred
    /// token accepted.
    pub fn matcher(&mut self, id: SeqId) -> Option<&GrammarMatcher> {
        match self.rows.get_mut(&id)? {
            Place::Home(row) => {
                row.flush();
                Some(&row.matcher)
            }
            Place::Away { .. } => None,
        }
    }
}
