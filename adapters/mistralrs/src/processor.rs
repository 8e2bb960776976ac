//! The logits processor: one compiled grammar, one parse state per sequence.
//!
//! mistral.rs calls a [`CustomLogitsProcessor`] with one sequence's logits and that
//! sequence's tokens (prompt + generated), through `&self`, from several rayon threads at
//! once when a request has `n_choices > 1` (every choice shares the request's processor).
//! Nothing says which sequence is calling, so the processor keeps *slots* — (generated ids,
//! matcher) pairs — and maps each call to a slot by its generated ids:
//!
//! 1. the free slot whose ids are the longest proper prefix of these ids: the sequence's own
//!    slot one step behind — accept the new ids (the common case: one token per call);
//! 2. else, while fewer slots than sequences exist, a new slot forked from the free slot
//!    sharing the longest prefix (or from the start state);
//! 3. else the free slot sharing the longest prefix, rolled back to the shared prefix and
//!    advanced (the context shrank or changed: rollback).
//!
//! A slot is taken out of the table while a thread works on it, so the table's lock is held
//! only to choose and to put back — never while a sequence fills its mask.
//!
//! The mapping relies on mistral.rs's step discipline: every sequence of a request is
//! sampled once per step before any is sampled again (a sequence that starts late, or runs
//! ahead of its siblings, would look like a context taken back).
//!
//! The same context twice in a row is served again from its slot (mistral.rs samples a
//! sequence again at the same context when an earlier sequence of its batch failed), except
//! right after the context was reached by taking tokens back: that is how mistral.rs's
//! speculative pipeline verifies draft tokens — every verified row comes with the *same*
//! context, though row `i` needs the state after `i` draft tokens — and no mask the processor
//! could return would be right, so it is refused ([`ProcessorError::RepeatedContext`]). See
//! `docs/mistralrs.md`.
//!
//! With mistral.rs's prefix cache, a sequence's first call may carry only the uncached tail
//! of its prompt; the processor learns the whole prompt from the next call (see
//! `Table::generated_start`).
//!
//! The logits are masked in place: mistral.rs hands each processor a tensor it built for
//! the call. An engine calling `apply` directly must likewise pass a tensor it does not
//! reuse, or use [`GrammaskProcessor::mask_for`].

use crate::error::ProcessorError;
use grammask::bitmask::{apply_token_bitmask_with, words_per_row, LogitsLayout, MaskLayout, Parallelism};
use grammask::{CompiledGrammar, GrammarMatcher};
use mistralrs::{CustomLogitsProcessor, Tensor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// A grammar constraint for one mistral.rs request (all its `n_choices` sequences).
///
/// Attach it with `RequestBuilder::add_logits_processor`, or let
/// [`Grammask::constrain`](crate::Grammask::constrain) do it. It must be the last processor:
/// a processor after it could raise a logit the mask set to −∞.
///
/// ```
/// use std::sync::Arc;
/// use grammask::{GrammarCompiler, GrammarSpec, TokenizerInfo, TokenizerOptions};
/// use grammask_mistralrs::GrammaskProcessor;
/// use mistralrs::{CustomLogitsProcessor, DType, Device, Tensor};
/// let vocab = ["yes", "no", "y", "<eos>"].iter().map(|s| s.as_bytes().to_vec()).collect();
/// let tok = TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions { stop_tokens: Some(vec![3]), ..Default::default() })?;
/// let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::ebnf(r#"root ::= "yes" | "no""#))?;
/// let p = GrammaskProcessor::new(compiled, 1);
/// let prompt = [9u32, 9]; // whatever the prompt was
/// let logits = p.apply(&Tensor::zeros(4, DType::F32, &Device::Cpu)?, &prompt)?;
/// assert_eq!(logits.to_vec1::<f32>()?, [0.0, 0.0, 0.0, f32::NEG_INFINITY]);
/// let logits = p.apply(&Tensor::zeros(4, DType::F32, &Device::Cpu)?, &[9, 9, 0])?; // after "yes"
/// assert_eq!(logits.to_vec1::<f32>()?, [f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, 0.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct GrammaskProcessor {
    compiled: Arc<CompiledGrammar>,
    sequences: usize,
    /// Request-level stop ids beyond the tokenizer's stop set (mistral.rs `StopTokens::Ids`):
    /// allowed exactly when the grammar can end, forbidden otherwise.
    extra_stops: Vec<u32>,
    table: Mutex<Table>,
    stats: Stats,
}

struct Table {
    /// The prompt, learned from the first calls: the context of every later call extends it.
    prompt: Option<Vec<u32>>,
    /// Whether `prompt` may still be only the uncached tail of the prompt (see
    /// [`Table::generated_len`]).
    provisional: bool,
    slots: Vec<Slot>,
    next_slot_id: u64,
}

struct Slot {
    id: u64,
    /// Generated ids this slot's matcher has accepted (or is being advanced to, while out).
    ids: Vec<u32>,
    /// `None` while a thread works on the slot.
    work: Option<Work>,
    /// Whether this slot was last served for a context that shrank (a slot's ids extended
    /// it): the speculative pipeline's first verified row. The same context again right
    /// after is its second row, which no state describes.
    shrunk: bool,
}

/// What a thread takes out of a slot: the matcher and the mask row it fills.
struct Work {
    matcher: GrammarMatcher,
    row: Vec<u32>,
}

/// Per-processor timing counters (nanoseconds, summed over calls).
#[derive(Default)]
struct Stats {
    calls: AtomicU64,
    table_ns: AtomicU64,
    advance_ns: AtomicU64,
    fill_ns: AtomicU64,
    apply_ns: AtomicU64,
}

/// Totals over all calls of one processor, for benchmarks and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessorStats {
    /// Calls to `apply`.
    pub calls: u64,
    /// Time choosing and returning slots (the table's lock), in ns.
    pub table_ns: u64,
    /// Time accepting new tokens (and rolling back), in ns.
    pub advance_ns: u64,
    /// Time filling masks, in ns.
    pub fill_ns: u64,
    /// Time applying masks to the logits in place, in ns.
    pub apply_ns: u64,
}

impl GrammaskProcessor {
    /// A processor for `sequences` concurrent sequences (the request's `n_choices`).
    pub fn new(compiled: Arc<CompiledGrammar>, sequences: usize) -> Self {
        Self::with_stop_ids(compiled, sequences, Vec::new())
    }

    /// As [`new`](Self::new), with request-level stop ids (mistral.rs `StopTokens::Ids`):
    /// the processor allows them exactly when the grammar can end. Ids outside the
    /// vocabulary are dropped (mistral.rs cannot sample them).
    pub fn with_stop_ids(compiled: Arc<CompiledGrammar>, sequences: usize, mut stops: Vec<u32>) -> Self {
        let tok = compiled.tokenizer();
        stops.retain(|&id| (id as usize) < tok.vocab_size() && !tok.stop_tokens().contains(&id));
        stops.sort_unstable();
        stops.dedup();
        Self {
            compiled,
            sequences: sequences.max(1),
            extra_stops: stops,
            table: Mutex::new(Table { prompt: None, provisional: true, slots: Vec::new(), next_slot_id: 0 }),
            stats: Stats::default(),
        }
    }

    /// The compiled grammar.
    pub fn compiled(&self) -> &Arc<CompiledGrammar> {
        &self.compiled
    }

    /// Timing totals so far.
    pub fn stats(&self) -> ProcessorStats {
        let s = &self.stats;
        ProcessorStats {
            calls: s.calls.load(Ordering::Relaxed),
            table_ns: s.table_ns.load(Ordering::Relaxed),
            advance_ns: s.advance_ns.load(Ordering::Relaxed),
            fill_ns: s.fill_ns.load(Ordering::Relaxed),
            apply_ns: s.apply_ns.load(Ordering::Relaxed),
        }
    }

    /// Fills the mask row for the sequence whose tokens are `context` and hands it to `f`
    /// (`ceil(vocab / 32)` words, bit set = allowed). This is `apply` without the tensor:
    /// an engine that owns its logits can call it directly.
    pub fn mask_for(
        &self,
        context: &[u32],
        f: impl FnOnce(&[u32]) -> Result<(), ProcessorError>,
    ) -> Result<(), ProcessorError> {
        let t0 = Instant::now();
        let (slot_id, work, rollback, keep, ids) = self.checkout(context)?;
        // If the fill or `f` panics, the guard drops the slot (its matcher is gone with the
        // unwinding stack) so that it does not count against the sequences forever.
        let mut guard = Checkout { processor: self, slot_id, work: Some(work), armed: true };
        let t1 = Instant::now();
        let result = match guard.work.as_mut() {
            Some(work) => self.advance_and_fill(work, &ids, rollback, keep, f),
            None => Err(ProcessorError::Internal("a checked-out slot has no matcher")),
        };
        let t2 = Instant::now();
        // A failed call may leave the matcher half-advanced: its slot is dropped.
        let work = guard.work.take().filter(|_| result.is_ok());
        guard.armed = false;
        self.checkin(slot_id, work);
        let s = &self.stats;
        if let Ok((adv, fill, apply)) = result {
            s.advance_ns.fetch_add(adv, Ordering::Relaxed);
            s.fill_ns.fetch_add(fill, Ordering::Relaxed);
            s.apply_ns.fetch_add(apply, Ordering::Relaxed);
        }
        let table = (t1 - t0) + t2.elapsed();
        s.table_ns.fetch_add(table.as_nanos() as u64, Ordering::Relaxed);
        s.calls.fetch_add(1, Ordering::Relaxed);
        result.map(|_| ())
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // Every mutation of the table is a single push, remove or field store, so a panic
        // elsewhere while the lock was held cannot leave it inconsistent.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Chooses the slot for `context` (see the module docs) and takes its work out.
    /// Returns (slot id, work, tokens to roll back, accepted ids to keep, generated ids).
    #[allow(clippy::type_complexity)]
    fn checkout(&self, context: &[u32]) -> Result<(u64, Work, usize, usize, Vec<u32>), ProcessorError> {
        let mut t = self.lock();
        let prompt_len = t.generated_start(context)?;
        let generated = &context[prompt_len..];
        // A context shorter than a slot's history: taken back (rejected draft tokens).
        let shrinks = t.slots.iter().any(|s| s.ids.len() > generated.len() && s.ids.starts_with(generated));

        // The same context again: served from the free slot already there (mistral.rs
        // samples a sequence again at the same context when an earlier sequence of its
        // batch failed), unless that slot was just served by shrinking — the speculative
        // pipeline's next verified row, which needs a state the context does not describe.
        if let Some(s) = t.slots.iter_mut().find(|s| s.work.is_some() && s.ids == generated) {
            if s.shrunk {
                return Err(ProcessorError::RepeatedContext { generated: generated.len() });
            }
            let work = s.work.take().ok_or(ProcessorError::Internal("a free slot has no matcher"))?;
            return Ok((s.id, work, 0, generated.len(), generated.to_vec()));
        }
        if t.slots.iter().any(|s| s.shrunk && s.ids == generated) {
            return Err(ProcessorError::RepeatedContext { generated: generated.len() });
        }
        // The longest free proper prefix: the sequence's own slot, a step behind.
        let prefix = t
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.work.is_some() && s.ids.len() < generated.len() && generated.starts_with(&s.ids)
            })
            .max_by_key(|(_, s)| s.ids.len())
            .map(|(i, _)| i);
        if let Some(i) = prefix {
            let s = &mut t.slots[i];
            let keep = s.ids.len();
            s.ids = generated.to_vec();
            s.shrunk = false;
            let work = s.work.take().ok_or(ProcessorError::Internal("a free slot has no matcher"))?;
            return Ok((s.id, work, 0, keep, generated.to_vec()));
        }
        // The free slot sharing the longest prefix with this context.
        let best = t
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.work.is_some())
            .map(|(i, s)| (i, common_prefix(&s.ids, generated)))
            .max_by_key(|&(_, c)| c);
        if t.slots.len() < self.sequences {
            // A new slot, forked from the best free slot, or from the start.
            let forked = best.filter(|&(_, c)| c > 0).and_then(|(i, c)| {
                let from = &t.slots[i];
                let w = from.work.as_ref()?;
                Some((Work { matcher: w.matcher.fork(), row: w.row.clone() }, from.ids.len() - c, c))
            });
            let (work, rollback, keep) = forked.unwrap_or_else(|| (self.fresh_work(), 0, 0));
            let id = t.next_slot_id;
            t.next_slot_id += 1;
            t.slots.push(Slot { id, ids: generated.to_vec(), work: None, shrunk: shrinks });
            return Ok((id, work, rollback, keep, generated.to_vec()));
        }
        // Reuse the free slot sharing the longest prefix (the context shrank or changed).
        let (i, c) = best.ok_or(ProcessorError::TooManySequences { sequences: self.sequences })?;
        let s = &mut t.slots[i];
        let rollback = s.ids.len() - c;
        s.ids = generated.to_vec();
        s.shrunk = shrinks;
        let work = s.work.take().ok_or(ProcessorError::Internal("a free slot has no matcher"))?;
        Ok((s.id, work, rollback, c, generated.to_vec()))
    }

    fn fresh_work(&self) -> Work {
        Work {
            matcher: GrammarMatcher::new(self.compiled.clone()),
            row: vec![0; words_per_row(self.compiled.tokenizer().vocab_size())],
        }
    }

    fn checkin(&self, slot_id: u64, work: Option<Work>) {
        let mut t = self.lock();
        if let Some(pos) = t.slots.iter().position(|s| s.id == slot_id) {
            match work {
                Some(w) => t.slots[pos].work = Some(w),
                None => {
                    t.slots.swap_remove(pos);
                }
            }
        }
    }

    /// Rolls back, accepts `ids[keep..]`, fills the row and hands it to `f`.
    /// Returns the nanoseconds spent advancing, filling and in `f`.
    fn advance_and_fill(
        &self,
        work: &mut Work,
        ids: &[u32],
        rollback: usize,
        keep: usize,
        f: impl FnOnce(&[u32]) -> Result<(), ProcessorError>,
    ) -> Result<(u64, u64, u64), ProcessorError> {
        let t0 = Instant::now();
        work.matcher.rollback(rollback).map_err(|e| ProcessorError::Grammar(Box::new(e)))?;
        for (i, &id) in ids.iter().enumerate().skip(keep) {
            work.matcher.accept_token(id).map_err(|source| ProcessorError::TokenRejected {
                position: i,
                token: id,
                source: Box::new(source),
            })?;
        }
        let t1 = Instant::now();
        work.matcher
            .fill_next_token_bitmask(&mut work.row)
            .map_err(|e| ProcessorError::Grammar(Box::new(e)))?;
        if !self.extra_stops.is_empty() {
            let can_end = work.matcher.can_terminate();
            for &s in &self.extra_stops {
                let bit = 1u32 << (s % 32);
                let w = &mut work.row[s as usize / 32];
                *w = if can_end { *w | bit } else { *w & !bit };
            }
        }
        // An empty row would make the sampler draw from all −∞ (NaN probabilities).
        if work.row.iter().all(|&w| w == 0) {
            return Err(ProcessorError::NothingAllowed { generated: ids.len() });
        }
        let t2 = Instant::now();
        f(&work.row)?;
        let t3 = Instant::now();
        Ok(((t1 - t0).as_nanos() as u64, (t2 - t1).as_nanos() as u64, (t3 - t2).as_nanos() as u64))
    }
}

impl Table {
    /// Where the generated ids start in `context`.
    ///
    /// The first call teaches the prompt. With mistral.rs's prefix cache (on by default), a
    /// request whose prompt shares a prefix with an earlier sequence is prefilled from the
    /// cache and its first call's context is only the *uncached tail* of the prompt; the next
    /// call has the whole prompt and one generated token. So until a call has shown where
    /// generation starts, the learned prompt is provisional: a context of exactly one token
    /// more than it that extends it confirms it; a longer context whose all-but-last tokens
    /// end with it replaces it with those tokens (the whole prompt); and a context the whole
    /// prompt ends with is another sequence's first call, at the start.
    fn generated_start(&mut self, context: &[u32]) -> Result<usize, ProcessorError> {
        let Some(p) = &self.prompt else {
            self.prompt = Some(context.to_vec());
            return Ok(context.len());
        };
        let fresh = self.slots.iter().all(|s| s.ids.is_empty());
        if self.provisional && fresh && context.len() > p.len() {
            let head = &context[..context.len() - 1];
            if context.len() == p.len() + 1 && context.starts_with(p) {
                self.provisional = false;
                return Ok(p.len());
            }
            if head.ends_with(p) {
                self.prompt = Some(head.to_vec());
                self.provisional = false;
                return Ok(head.len());
            }
        }
        if context.starts_with(p) {
            if context.len() > p.len() {
                self.provisional = false;
            }
            return Ok(p.len());
        }
        if fresh && p.ends_with(context) {
            return Ok(context.len());
        }
        Err(ProcessorError::PromptMismatch { at: common_prefix(p, context), prompt_len: p.len() })
    }
}

/// A checked-out slot: dropped without being checked in (a panic), it removes the slot.
struct Checkout<'a> {
    processor: &'a GrammaskProcessor,
    slot_id: u64,
    work: Option<Work>,
    /// False once the slot was checked in normally.
    armed: bool,
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.processor.checkin(self.slot_id, None);
        }
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Masks a contiguous f32 CPU tensor in place (candle's in-place custom op).
struct MaskOp<'a> {
    row: &'a [u32],
    vocab: usize,
}

impl candle_core::InplaceOp1 for MaskOp<'_> {
    fn name(&self) -> &'static str {
        "grammask-mask"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::wrap(ProcessorError::Logits("the logits are not contiguous".into()))
        })?;
        let candle_core::CpuStorage::F32(data) = storage else {
            return Err(candle_core::Error::wrap(ProcessorError::Logits(format!(
                "logits of dtype {:?}, expected f32",
                candle_core::backend::BackendStorage::dtype(&*storage)
            ))));
        };
        let logits = &mut data[start..end];
        if logits.len() < self.vocab {
            return Err(candle_core::Error::wrap(ProcessorError::Logits(format!(
                "{} logits for a vocabulary of {} tokens",
                logits.len(),
                self.vocab
            ))));
        }
        // Logits past the mask's bits (an lm_head padded past the tokenizer) become −∞.
        let n = logits.len();
        apply_token_bitmask_with(
            Parallelism::Sequential,
            logits,
            LogitsLayout::contiguous(1, n),
            self.row,
            MaskLayout::new(1, self.row.len()),
            None,
        )
        .map_err(|e| candle_core::Error::wrap(ProcessorError::Logits(e.to_string())))
    }
}

impl CustomLogitsProcessor for GrammaskProcessor {
    fn apply(&self, logits: &Tensor, context: &[u32]) -> candle_core::Result<Tensor> {
        if !logits.device().is_cpu() {
            return Err(candle_core::Error::wrap(ProcessorError::Logits(
                "the logits are not on the CPU (mistral.rs hands processors CPU logits)".into(),
            )));
        }
        // One sequence's row: `[vocab]`, or `[1, vocab]`; anything else is not what
        // mistral.rs hands a processor, and masking only part of it would be wrong.
        let logits = match logits.dims() {
            [_] => logits.clone(),
            [1, _] => logits.flatten_all()?,
            dims => {
                return Err(candle_core::Error::wrap(ProcessorError::Logits(format!(
                    "logits of shape {dims:?}, expected one row"
                ))))
            }
        };
        let vocab = self.compiled.tokenizer().vocab_size();
        let mut op_result = Ok(());
        self.mask_for(context, |row| {
            op_result = logits.inplace_op1(&MaskOp { row, vocab });
            Ok(())
        })
        .map_err(candle_core::Error::wrap)?;
        op_result?;
        Ok(logits)
    }
}
