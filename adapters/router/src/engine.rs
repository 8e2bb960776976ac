//! The scheduler: continuous batching on a thread of its own.
//!
//! Requests arrive compiled (their grammar was compiled off this thread) and wait in a
//! bounded queue; between steps the loop admits as many as the batch size and the
//! prefill token budget allow, drops the ones whose client went away, and runs one
//! step over every running sequence: prefill rows (a new sequence's prompt) and
//! decode rows (the last token, plus jump-forward tokens) in one forward, masks from
//! [`StructuredBatch`] filled while it runs, then sampling and acceptance. Each
//! request hears about its tokens and its end through its own channel, so a slow or
//! gone client never holds up the loop.

use crate::metrics::Metrics;
use crate::model::{Forward, ForwardRow, Model, StepLogits};
#[cfg(feature = "cuda")]
use crate::sampling::DeviceSampler;
use crate::sampling::{Pick, Sampler, SamplingParams, TreeWalk};
use crate::speculate::{BuiltinDrafter, Draft, DraftContext, Drafter, SpeculationOptions};
use crate::step::{Accepted, BatchOptions, SeqId, StepError, StepMasks, StructuredBatch};
use grammask::matcher::JumpForward;
use grammask::{GrammarMatcher, TokenizerInfo};
use grammask_gpu::LogitsLayout;
use rayon::prelude::*;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Why a generation ended (TGI's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// `max_new_tokens` reached: the output may be cut off.
    Length,
    /// A stop token was generated (for a constrained request: the grammar ended).
    EosToken,
    /// A stop sequence was generated.
    StopSequence,
}

/// One generated token.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TokenEvent {
    /// Token id.
    pub id: u32,
    /// The text it adds (a special token's own text, which the generated text skips).
    pub text: String,
    /// Log-probability it was drawn with (0 for a jump-forward token: forced; `None`
    /// when the request did not ask for them).
    pub logprob: Option<f32>,
    /// A special token (e.g. the end of sequence).
    pub special: bool,
    /// The most likely tokens at this step with their log-probabilities, most likely
    /// first, when the request asked for them (`SamplingParams::top_logprobs`; a forced
    /// token's is itself at 0).
    pub top: Vec<(u32, f32)>,
}

/// The end of a generation.
#[derive(Debug, Clone, PartialEq)]
pub struct EndEvent {
    /// Why it ended.
    pub reason: FinishReason,
    /// Tokens generated (sampled and forced).
    pub generated_tokens: usize,
    /// The generated text (special tokens skipped).
    pub text: String,
    /// The seed the sampler used.
    pub seed: u64,
    /// Prompt tokens.
    pub input_length: usize,
    /// The prompt's tokens with their log-probabilities, when the job asked for them
    /// ([`Job::prompt_logprobs`]); empty otherwise.
    pub prefill: Vec<PromptToken>,
}

/// A prompt token as the model saw it: its log-probability after the tokens before it
/// (the model's own distribution: no mask, no penalty, temperature 1; `None` for the
/// first token) and the most likely tokens there.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptToken {
    /// Token id.
    pub id: u32,
    /// Its log-probability (`None` for the first token, which nothing precedes).
    pub logprob: Option<f32>,
    /// The most likely tokens at its position with their log-probabilities, most likely
    /// first (as many as [`Job::prompt_logprobs`] asks).
    pub top: Vec<(u32, f32)>,
}

/// The log-probabilities of `prompt[1..]` from the logits after each of `prompt[..n−1]`
/// (`rows`: `prompt.len() − 1` rows of `vocab`), and the `top` most likely tokens there.
fn prompt_logprobs(rows: &[f32], vocab: usize, prompt: &[u32], top: usize) -> Vec<PromptToken> {
    let mut out = Vec::with_capacity(prompt.len());
    if let Some(&first) = prompt.first() {
        out.push(PromptToken { id: first, logprob: None, top: Vec::new() });
    }
    for (row, &id) in rows.chunks(vocab.max(1)).zip(prompt.iter().skip(1)) {
        let max = row.iter().copied().filter(|x| x.is_finite()).fold(f32::NEG_INFINITY, f32::max);
        let z: f64 = row.iter().filter(|x| x.is_finite()).map(|&x| f64::from(x - max).exp()).sum();
        let lp = |x: f32| (f64::from(x - max) - z.ln()) as f32;
        let mut best: Vec<(u32, f32)> = Vec::new();
        if top > 0 {
            let mut idx: Vec<u32> = (0..row.len() as u32).filter(|&j| row[j as usize].is_finite()).collect();
            let k = top.min(idx.len());
            let by = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
            if k > 0 && k < idx.len() {
                idx.select_nth_unstable_by(k - 1, by);
            }
            idx.truncate(k);
            idx.sort_by(by);
            best = idx.into_iter().map(|j| (j, lp(row[j as usize]))).collect();
        }
        let logprob = row.get(id as usize).map(|&x| lp(x));
        out.push(PromptToken { id, logprob, top: best });
    }
    out
}

/// What a request hears from the loop, in order: tokens, then one end or one error.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A token, with the text it adds (UTF-8 held back until complete).
    Token(TokenEvent),
    /// The end.
    End(EndEvent),
    /// The generation failed; nothing follows.
    Error(String),
    /// The engine stopped (its loop failed, or the server is shutting down): the request
    /// could not be served; nothing follows (HTTP 503).
    Unavailable(String),
}

/// What to generate: the part of a request that is the same before its grammar is
/// compiled and after.
#[derive(Debug, Clone)]
pub struct Job {
    /// Prompt token ids (not empty).
    pub prompt: Vec<u32>,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Stop sequences: the generation ends where one appears in its text, even inside a
    /// token.
    pub stop: Vec<String>,
    /// Leave the stop sequence out of the text (OpenAI's and vLLM's contract; TGI keeps
    /// it): text that could begin one is held back until it cannot.
    pub strip_stop: bool,
    /// Report the prompt's log-probabilities ([`EndEvent::prefill`]) with this many top
    /// tokens per position (`None`: not asked). Needs host logits: the engine refuses it
    /// on a model whose logits are on a device.
    pub prompt_logprobs: Option<usize>,
}

/// A request ready to run.
#[derive(Debug)]
pub struct Request {
    /// What to generate.
    pub job: Job,
    /// The compiled constraint, at its start; `None`: unconstrained.
    pub constraint: Option<GrammarMatcher>,
    /// Where its events go; a closed channel cancels the request.
    pub events: UnboundedSender<Event>,
}

/// Limits of the loop.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most sequences in a step.
    pub max_batch_size: usize,
    /// Most prompt tokens prefilled in one step (a prompt longer than this still runs,
    /// alone).
    pub max_batch_prefill_tokens: usize,
    /// Most requests waiting; more are refused (HTTP 429).
    pub max_queue: usize,
    /// Mask the constrained rows while the forward runs (`false`: fill after it, to
    /// measure what the overlap buys).
    pub overlap: bool,
    /// Host logits: sample each masked row under its mask
    /// ([`StructuredBatch::finish_masks`](crate::step::StructuredBatch::finish_masks))
    /// instead of writing −∞ over it first (`false`: apply the masks, to measure what
    /// reading them in the sampler buys). Same tokens either way. Device logits are
    /// always masked by grammask-gpu's kernel before the device sampler: reading the
    /// masks inside the sampling kernel instead was measured slower on an H100
    /// (sample +35–60 µs per step at batch 8–128, against a 20 µs apply).
    pub sample_under_masks: bool,
    /// The step engine's settings.
    pub batch: BatchOptions,
    /// Keep a [`StepRecord`] per step (benchmarks: [`EngineHandle::take_step_records`]).
    pub record_steps: bool,
    /// Host logits, masks read by the sampler: the longest the step waits for the masks
    /// past the forward. A row whose mask is not ready by then sits the step out (its
    /// logits kept until its mask is back) instead of stalling every row; `None`: wait
    /// for every mask. With the overlap the wait is also never longer than the forward's
    /// time over the step's rows (but at least 0.1 ms): past that, waiting costs the
    /// batch more than sitting out costs the late row (one forward). Outputs are the same
    /// either way: only when a row gets its token changes.
    pub late_mask_grace: Option<Duration>,
    /// Speculative decoding (`None`: off): decode rows carry a draft tree the forward
    /// verifies (see [`crate::speculate`]). Needs a model that verifies drafts
    /// ([`Model::max_draft_nodes`]) and host logits; a step with drafts waits for every
    /// mask (no row sits out).
    pub speculation: Option<SpeculationOptions>,
    /// Measurement, not serving: each host row drawn under its mask is drawn a second
    /// time without it, from copies of its logits and sampler (the copy's token is
    /// dropped), both draws timed on the same thread's CPU clock (Linux, Android; so that a
    /// preemption in either is not read as its cost), which goes first flipping at each
    /// of the row's paired draws. The metrics `grammask_paired_draw_seconds_total{draw}` and
    /// `grammask_paired_draws_total` then give what reading the mask costs sampling, row
    /// for row on the same logits, which two runs (constrained and not) cannot resolve
    /// to a microsecond: their rows are different rows. Doubles the sampling work of
    /// masked rows, so a throughput figure is never taken with it on.
    pub pair_masked_draws: bool,
}

/// One step's timings.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepRecord {
    /// Rows in the step.
    pub rows: usize,
    /// Rows on their first forward (prefilling their prompt).
    pub prefill: usize,
    /// Constrained rows.
    pub constrained: usize,
    /// Rows masked.
    pub masked: usize,
    /// The forward.
    pub forward: Duration,
    /// The fill on the pool.
    pub fill: Duration,
    /// What the step waited for the fill after the forward (or, without overlap, the
    /// whole fill).
    pub wait: Duration,
    /// Applying the masks.
    pub apply: Duration,
    /// Sampling.
    pub sample: Duration,
    /// Accepting the drawn tokens into their grammars.
    pub accept: Duration,
    /// Jump-forward after them.
    pub jump_forward: Duration,
    /// Rows that sat the step out, their masks not ready.
    pub late: usize,
    /// Draft nodes verified (all rows).
    pub draft_nodes: usize,
    /// Draft tokens accepted (all rows).
    pub draft_accepted: usize,
    /// Tokens generated (drawn and forced, all rows).
    pub tokens: usize,
    /// The whole step.
    pub step: Duration,
    /// When the step began (to place a row's tokens in their steps).
    pub started: Option<Instant>,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            max_batch_size: 32,
            max_batch_prefill_tokens: 4096,
            max_queue: 128,
            overlap: true,
            sample_under_masks: true,
            batch: BatchOptions::default(),
            record_steps: false,
            late_mask_grace: Some(DEFAULT_LATE_MASK_GRACE),
            speculation: None,
            pair_masked_draws: false,
        }
    }
}

/// [`EngineOptions::late_mask_grace`]'s default: a fill a little slower than the forward
/// is waited for (sitting out costs its row a whole step); a slow one is not.
pub const DEFAULT_LATE_MASK_GRACE: Duration = Duration::from_millis(1);

/// How long a step of `rows` rows whose forward took `forward` waits for late masks:
/// `max`, or less where waiting would cost the batch more than sitting out costs a late
/// row — every row waits, a late row loses about one forward, and keeping its logits
/// costs a copy of the row ([`MIN_GRACE`]).
fn grace(max: Duration, forward: Duration, rows: usize) -> Duration {
    max.min((forward / u32::try_from(rows).unwrap_or(u32::MAX).max(1)).max(MIN_GRACE))
}

/// The shortest wait [`grace`] gives: about what a late row costs whatever the forward
/// (its logits row kept, a copy of 0.6 MB for a 150k vocabulary, and sampled later).
const MIN_GRACE: Duration = Duration::from_micros(100);

/// How long a loop whose every row sits out waits for a late mask before it looks at
/// its queue again.
const LATE_POLL: Duration = Duration::from_millis(20);

pub(crate) use grammask::batch::panic_message;

/// Why the engine did not take a request.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full (HTTP 429).
    #[error("the queue is full ({0} requests waiting); retry later")]
    QueueFull(usize),
    /// The engine stopped (HTTP 503).
    #[error("the engine is not running: {0}")]
    Down(String),
}

struct Shared {
    queue: Mutex<VecDeque<Request>>,
    records: Mutex<Vec<StepRecord>>,
    wake: Condvar,
    stop: AtomicBool,
    max_queue: usize,
    /// Why the loop stopped, once it has: requests are then refused at once.
    down: Mutex<Option<String>>,
    /// When the loop last went round (milliseconds since `born`): a loop stuck in a step
    /// (a hung forward) stops answering `/health` with 200.
    heartbeat: std::sync::atomic::AtomicU64,
    born: Instant,
}

/// Longest a loop may go without a round before `/health` calls it stuck: a step of the
/// largest batch, prefill included, stays well under it.
const STUCK_AFTER: Duration = Duration::from_secs(30);

impl Shared {
    fn beat(&self) {
        self.heartbeat.store(self.born.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// A handle to the loop: submit requests, read the queue length, shut down.
#[derive(Clone)]
pub struct EngineHandle {
    shared: Arc<Shared>,
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle").field("queued", &self.queued()).finish()
    }
}

impl EngineHandle {
    /// Queues a request, or refuses it when the queue is full or the engine stopped.
    pub fn submit(&self, request: Request) -> Result<(), SubmitError> {
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        // (Read under the queue's lock: the loop drains the queue after setting it, so a
        // request is either refused here or drained there, never left waiting.)
        if let Some(why) = self.down() {
            return Err(SubmitError::Down(why));
        }
        if q.len() >= self.shared.max_queue {
            return Err(SubmitError::QueueFull(q.len()));
        }
        q.push_back(request);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Queues requests together (the choices of one client request), or none of them when
    /// they do not all fit or the engine stopped: the loop admits them in one go.
    pub fn submit_many(&self, requests: Vec<Request>) -> Result<(), SubmitError> {
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(why) = self.down() {
            return Err(SubmitError::Down(why));
        }
        if q.len() + requests.len() > self.shared.max_queue {
            return Err(SubmitError::QueueFull(q.len()));
        }
        q.extend(requests);
        drop(q);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Why the engine stopped, if it has.
    pub fn down(&self) -> Option<String> {
        self.shared.down.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the engine is alive and going round its loop (`/health`): `Err` with why not.
    pub fn health(&self) -> Result<(), String> {
        if let Some(why) = self.down() {
            return Err(why);
        }
        let last = Duration::from_millis(self.shared.heartbeat.load(Ordering::Relaxed));
        let silent = self.shared.born.elapsed().saturating_sub(last);
        if silent > STUCK_AFTER {
            return Err(format!("the engine has not completed a step for {silent:?}"));
        }
        Ok(())
    }

    /// Requests waiting to join the batch.
    pub fn queued(&self) -> usize {
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The step records kept since the last call (with [`EngineOptions::record_steps`]).
    pub fn take_step_records(&self) -> Vec<StepRecord> {
        std::mem::take(&mut *self.shared.records.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Stops the loop after its current step and waits for it; running requests get
    /// an error event.
    pub fn shutdown(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

/// A running sequence.
struct Seq {
    id: SeqId,
    constrained: bool,
    /// Tokens for the next forward (the prompt first).
    pending: Vec<u32>,
    prompt_len: usize,
    generated: usize,
    /// Generated bytes, special tokens skipped, and how many are sent as text.
    bytes: Vec<u8>,
    sent: usize,
    sampler: Sampler,
    max_new_tokens: usize,
    stop: Vec<String>,
    strip_stop: bool,
    events: UnboundedSender<Event>,
    /// The logits row of a step this sequence sat out (its mask was late), kept until
    /// its mask is back; it takes no part in forwards meanwhile.
    held: Option<Vec<f32>>,
    /// Prompt and every token since (speculation's n-gram lookup reads it).
    history: Vec<u32>,
    /// This step's draft, if it drafted.
    draft: Option<Draft>,
    /// Whether drafting pays for it.
    spec: SpecStats,
    /// The fairness ledger ([`SpeculationOptions::max_slowdown`]), in seconds: what the
    /// row may still be slowed by other rows' drafts — its allowance (`max_slowdown / (1 −
    /// max_slowdown)` of each of its decode steps) and the steps its own accepted drafts
    /// saved it, less what other rows' nodes and drafting cost it in the steps it had no
    /// draft of its own; within [`SLACK_CAP_STEPS`] steps' time either way.
    slack: f64,
    /// Top tokens per prompt position when the prompt's log-probabilities were asked for.
    prompt_logprobs: Option<usize>,
    /// The prompt's log-probabilities, once its prefill ran (when asked).
    prefill: Vec<PromptToken>,
    /// Another sequence of the same prompt admitted with it, whose prefill this one shares
    /// (its first forward copies that sequence's context: [`ForwardRow::fork_of`]), and the
    /// prompt, to prefill on its own if that sequence is gone by then.
    fork: Option<(SeqId, Vec<u32>)>,
    /// [`EngineOptions::pair_masked_draws`]: which of its paired draws went first last
    /// time (flipped at each).
    pair_turn: bool,
}

/// A row's record of speculation: how much of its drafts was accepted.
#[derive(Debug, Clone, Copy)]
struct SpecStats {
    /// Accepted draft tokens per draft node, smoothed (before its first verify: the
    /// engine's [`SpecPrior`]).
    rate: f64,
    /// Verifies measured into `rate`.
    verifies: u32,
    /// Steps left before it drafts a probe after backing off.
    pause: u32,
    /// Back-offs since drafting last paid: each doubles the next pause.
    backoffs: u32,
    /// The draft being verified is a probe ([`PROBE_NODES`]).
    probing: bool,
}

impl Default for SpecStats {
    fn default() -> Self {
        Self { rate: 1.0, verifies: 0, pause: 0, backoffs: 0, probing: false }
    }
}

impl SpecStats {
    /// Stops drafting: the next probe in [`SPEC_PROBE_EVERY`] steps, twice as many after
    /// each back-off in a row, at most [`SPEC_PROBE_MAX`].
    fn back_off(&mut self) {
        self.pause = Self::wait(self.backoffs);
        self.backoffs = self.backoffs.saturating_add(1);
    }

    /// A probe that drafted nothing (no guess, the drafting budget spent, its tree refused
    /// by the batch) measured nothing: it is tried again after the same wait, which does
    /// not double.
    fn probe_again(&mut self) {
        self.pause = Self::wait(self.backoffs.saturating_sub(1));
    }

    /// The wait after `backoffs` earlier back-offs in a row.
    fn wait(backoffs: u32) -> u32 {
        SPEC_PROBE_EVERY.saturating_mul(1 << backoffs.min(16)).min(SPEC_PROBE_MAX)
    }

    /// A verify accepted `rate` of its nodes; `pays` says whether the row's smoothed rate
    /// now pays for drafting (which ends the doubling).
    fn verified(&mut self, rate: f64, pays: impl Fn(f64) -> bool) {
        self.rate = 0.7 * self.rate + 0.3 * rate;
        self.verifies = self.verifies.saturating_add(1);
        self.probing = false;
        if pays(self.rate) {
            self.backoffs = 0;
        }
    }
}

/// Steps a row waits, after drafting did not pay, before it drafts a probe to re-measure;
/// doubled at each back-off in a row, up to [`SPEC_PROBE_MAX`].
const SPEC_PROBE_EVERY: u32 = 8;

/// The longest pause between probes.
const SPEC_PROBE_MAX: u32 = 128;

/// Draft nodes of a probe: enough to see whether the drafter guesses this row, few enough
/// that a wrong guess costs little.
const PROBE_NODES: usize = 2;

/// Acceptance over every row's verifies (a moving average, a tenth per verify; probes left
/// out): where a new row starts. Each row that started hopeful paid for its first verifies
/// before its own rate said drafting did not pay (at batch 8 with ~1 token accepted per
/// verify, 57 verify steps of 492, 0.91–0.94× the rate without speculation, measured
/// 2026-11-28); a drafter that does not pay for one row of a workload rarely pays for the
/// next.
#[derive(Debug, Default)]
struct SpecPrior {
    rate: f64,
    verifies: u32,
}

impl SpecPrior {
    /// Verifies seen before the prior is trusted over hope.
    const KNOWN: u32 = 8;

    fn note(&mut self, rate: f64) {
        self.rate = if self.verifies == 0 { rate } else { 0.9 * self.rate + 0.1 * rate };
        self.verifies = self.verifies.saturating_add(1);
    }

    /// A new row's rate: the prior once known, else hopeful.
    fn start(&self) -> f64 {
        if self.verifies >= Self::KNOWN {
            self.rate
        } else {
            1.0
        }
    }
}

/// The most a step spends drafting, as a fraction of the mean decode step time.
const DRAFT_BUDGET: f64 = 0.2;

/// A step's cost per logits row, fitted on recent decode steps (least squares of step time
/// against logits rows: a draft node's forward, mask and draw), to tell whether a row's
/// drafts pay.
#[derive(Debug, Default)]
struct ForwardCosts {
    /// `(logits rows, forward seconds)` of recent steps.
    recent: VecDeque<(f64, f64)>,
    /// Seconds of drafting (on the step thread, before the forward) per draft node,
    /// smoothed: a node costs this on top of its share of the forward.
    draft_per_node: f64,
    /// Seconds per logits row, from the last window of steps whose sizes varied enough to
    /// fit it (a later fit at or below zero does not replace it; a first one may be zero):
    /// kept while the rows stop drafting and the steps' sizes stop varying (a fit that
    /// forgot would turn hopeful and draft again at once).
    per_row: Option<f64>,
}

impl ForwardCosts {
    const KEEP: usize = 64;

    fn note(&mut self, rows: usize, secs: f64) {
        if self.recent.len() == Self::KEEP {
            self.recent.pop_front();
        }
        self.recent.push_back((rows as f64, secs));
        let n = self.recent.len() as f64;
        if n >= 8.0 {
            let (mx, my) = self.means();
            let (sxx, sxy) = self
                .recent
                .iter()
                .fold((0.0, 0.0), |(a, b), &(x, y)| (a + (x - mx) * (x - mx), b + (x - mx) * (y - my)));
            // Refitted only when the window's sizes really vary (a variance of at least a
            // quarter, rows squared: a spread of half a row — not one probe's step among 63
            // of one size, whose timing alone would set the slope), and a fit at or below
            // zero (noise) does not replace one.
            let slope = sxy / sxx.max(f64::MIN_POSITIVE);
            if sxx / n >= 0.25 && (slope > 0.0 || self.per_row.is_none()) {
                self.per_row = Some(slope.max(0.0));
            }
        }
    }

    /// Mean logits rows and mean seconds of the recent steps.
    fn means(&self) -> (f64, f64) {
        let n = self.recent.len().max(1) as f64;
        self.recent.iter().fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n))
    }

    /// Whether enough steps were seen to fit a row's cost.
    fn known(&self) -> bool {
        self.recent.len() >= 8
    }

    /// The mean step time of recent decode steps (`None` before any).
    fn mean_step(&self) -> Option<f64> {
        (!self.recent.is_empty())
            .then(|| self.recent.iter().map(|r| r.1).sum::<f64>() / self.recent.len() as f64)
    }

    fn note_draft(&mut self, secs: f64, nodes: usize) {
        if nodes > 0 {
            let per = secs / nodes as f64;
            self.draft_per_node =
                if self.draft_per_node == 0.0 { per } else { 0.9 * self.draft_per_node + 0.1 * per };
        }
    }

    /// What the fairness ledger ([`SpeculationOptions::max_slowdown`]) prices a step in:
    /// the time of a decode step of `rows` rows without draft nodes (the fitted step:
    /// forward, masks, sampling), and what a node adds to it (a row's fitted cost; the
    /// step's drafting time is charged as measured). `None` before a decode step was seen.
    fn fair_costs(&self, rows: usize) -> Option<(f64, f64)> {
        let (mx, my) = self.means();
        if self.recent.is_empty() || my <= 0.0 {
            return None;
        }
        // Where no fit above zero is known yet, a row's share of the mean step (more than
        // a row adds where a step has fixed costs: the ledger errs on the side of the rows
        // it protects).
        let per_row = self.per_row.filter(|&c| c > 0.0).unwrap_or(my / mx.max(1.0));
        let step = (my + per_row * (rows as f64 - mx)).max(0.0);
        Some((step, per_row))
    }

    /// Whether a draft node accepted with probability `rate` buys more tokens per second
    /// than the batch makes without it: `rate / (cost of a row + drafting a node) ≥ rows /
    /// forward time`. Hopeful until the steps seen vary enough in size to fit the cost of
    /// a row.
    fn pays(&self, rate: f64) -> bool {
        let (Some(per_row), true) = (self.per_row, self.recent.len() >= 8) else { return true };
        let (mx, my) = self.means();
        if my <= 0.0 {
            return true;
        }
        rate * my >= (per_row + self.draft_per_node) * mx
    }
}

/// One step's prices for the fairness ledger ([`SpeculationOptions::max_slowdown`]).
#[derive(Debug, Clone, Copy)]
struct FairPrices {
    /// `max_slowdown`.
    f: f64,
    /// A decode step of the step's rows without draft nodes, seconds.
    step: f64,
    /// What a draft node adds to it, seconds.
    node: f64,
}

/// The most a ledger holds, in steps' time, either way: a row that saved much (its own
/// drafts accepted, long stretches without drafts beside it) carries at most this many
/// steps of other rows' nodes at once, so its rate over a short stretch stays near its
/// share too; a debt (drafting spent before a row turned out to have no draft) is no
/// deeper.
const SLACK_CAP_STEPS: f64 = 8.0;

/// The decode rows of a step the fairness ledger prices, and what drafting spent of the
/// step thread's time before the forward (every row waited for it).
#[derive(Debug)]
struct FairStep {
    prices: FairPrices,
    /// The step's decode rows, sorted.
    rows: Vec<SeqId>,
    drafting: f64,
}

/// Draft nodes a step may verify beside rows that do not draft, whose ledgers hold
/// `slacks` (seconds), once `spent` seconds of drafting were spent on the other rows: what
/// the least slack, with this step's allowance, pays for (a row in debt pays its debt
/// first). No such row: no limit.
fn fair_room(slacks: impl Iterator<Item = f64>, p: FairPrices, spent: f64) -> usize {
    let least = slacks.fold(f64::INFINITY, f64::min);
    if least == f64::INFINITY {
        return usize::MAX;
    }
    let room = (least + p.f / (1.0 - p.f) * p.step - spent) / p.node.max(f64::MIN_POSITIVE);
    room.floor().clamp(0.0, u32::MAX as f64) as usize
}

/// A decode row's ledger after a step in which `took` of its own draft tokens were
/// accepted, other rows verified `others` nodes, and `spent` seconds of drafting went to
/// other rows' drafts: its allowance and the steps it saved (each worth `1 / (1 −
/// max_slowdown)` of a step, what keeps `1 − max_slowdown` of a rate), less the others'
/// nodes and drafting; within [`SLACK_CAP_STEPS`] steps' time either way (a debt that
/// deep stops every draft beside the row until its allowance has paid it down).
fn fair_entry(slack: f64, p: FairPrices, took: usize, others: usize, spent: f64) -> f64 {
    let entry = (p.f * p.step + took as f64 * p.step) / (1.0 - p.f) - others as f64 * p.node - spent;
    (slack + entry).clamp(-SLACK_CAP_STEPS * p.step, SLACK_CAP_STEPS * p.step)
}

/// Starts the loop on its own thread.
pub fn start(
    model: Box<dyn Model>,
    tokenizer: Arc<TokenizerInfo>,
    options: EngineOptions,
    metrics: Arc<Metrics>,
) -> Result<EngineHandle, StepError> {
    let mut options = options;
    // The loop appends forced tokens and never takes a streamed one back.
    options.batch.rollback_ok = false;
    // Masks go where the model leaves its logits.
    if let Some(device) = model.device() {
        options.batch.device = device;
        // The device sampler draws every row of the step in one call: a row whose step
        // gives forced text would be drawn too (its penalties and random stream moved),
        // so on a device jump-forward stays on the step thread.
        options.batch.defer_accepts &= options.batch.encoder.is_none();
    }
    let drafter: Option<Box<dyn Drafter>> = match &options.speculation {
        None => None,
        Some(_) if model.device().is_some() => {
            return Err(StepError::Unsupported(
                "speculative decoding verifies drafts on host logits; this model's are on a device".into(),
            ))
        }
        Some(_) if model.max_draft_nodes() == 0 => {
            return Err(StepError::Unsupported(format!(
                "speculative decoding needs a model that verifies draft trees; {} does not",
                model.name()
            )))
        }
        Some(spec) => {
            // A drafted row accepts its path at once, jump-forward included; the rows
            // between drafts do too, so that a drafter never sees a state whose forced
            // text is still to come (the n-gram drafter would not propose it).
            options.batch.defer_accepts &= options.batch.encoder.is_none();
            let mut spec = spec.clone();
            spec.max_nodes = spec.max_nodes.min(model.max_draft_nodes());
            let kind = spec.drafter;
            options.speculation = Some(spec);
            Some(Box::new(BuiltinDrafter(kind)))
        }
    };
    let batch = StructuredBatch::new(tokenizer.vocab_size(), options.batch.clone())?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        records: Mutex::new(Vec::new()),
        wake: Condvar::new(),
        stop: AtomicBool::new(false),
        max_queue: options.max_queue,
        down: Mutex::new(None),
        heartbeat: std::sync::atomic::AtomicU64::new(0),
        born: Instant::now(),
    });
    let mut lp = Loop {
        model,
        tokenizer,
        batch,
        options,
        metrics,
        shared: shared.clone(),
        running: Vec::new(),
        next_id: 1,
        drafter,
        costs: ForwardCosts::default(),
        spec_prior: SpecPrior::default(),
        draft_turn: 0,
        fair_step: None,
        #[cfg(feature = "cuda")]
        device_sampler: None,
    };
    let thread = std::thread::Builder::new()
        .name("grammask-step".into())
        .spawn(move || lp.run_guarded())
        .map_err(|e| StepError::Pool(e.to_string()))?;
    Ok(EngineHandle { shared, thread: Arc::new(Mutex::new(Some(thread))) })
}

struct Loop {
    model: Box<dyn Model>,
    tokenizer: Arc<TokenizerInfo>,
    batch: StructuredBatch,
    options: EngineOptions,
    metrics: Arc<Metrics>,
    shared: Arc<Shared>,
    running: Vec<Seq>,
    next_id: SeqId,
    /// Proposes draft trees (with [`EngineOptions::speculation`]).
    drafter: Option<Box<dyn Drafter>>,
    costs: ForwardCosts,
    /// Acceptance over every row's verifies (probes left out): a new row's starting rate.
    spec_prior: SpecPrior,
    /// Which row drafts first this step (rows take turns under the drafting budget).
    draft_turn: usize,
    /// This step's prices and rows for the fairness ledger, set by [`Self::draft_rows`]
    /// where the ledger is kept, read by [`Self::settle`], cleared after the step.
    fair_step: Option<FairStep>,
    /// Made on the first step with device logits.
    #[cfg(feature = "cuda")]
    device_sampler: Option<DeviceSampler>,
}

impl Loop {
    /// Runs the loop; when it ends — shut down, or failed (a panic in the model, the
    /// sampler, a fill) — marks the engine down and answers every running and queued
    /// request at once, so none waits for a loop that is gone.
    fn run_guarded(&mut self) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run()));
        let why = match r {
            Ok(()) => "the server is shutting down".to_string(),
            Err(p) => {
                let what = panic_message(p.as_ref());
                tracing::error!(panic = %what, "the engine loop failed");
                format!("the engine failed ({what})")
            }
        };
        let queued: Vec<Request> = {
            let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            *self.shared.down.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
            q.drain(..).collect()
        };
        for r in queued {
            let _ = r.events.send(Event::Unavailable(why.clone()));
        }
        for s in std::mem::take(&mut self.running) {
            let _ = s.events.send(Event::Unavailable(why.clone()));
        }
        self.metrics.running.set(0);
        self.metrics.queue_length.set(0);
    }

    fn run(&mut self) {
        while !self.shared.stop.load(Ordering::SeqCst) {
            self.shared.beat();
            self.admit();
            self.drop_cancelled();
            self.metrics.running.set(self.running.len() as i64);
            if self.running.is_empty() {
                continue;
            }
            self.step();
            // After every step, whatever way it ended (the loop may then sleep in `admit`).
            self.metrics.running.set(self.running.len() as i64);
        }
    }

    /// Moves queued requests into the batch; sleeps while there is nothing to do.
    fn admit(&mut self) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        while self.running.is_empty() && q.is_empty() && !self.shared.stop.load(Ordering::SeqCst) {
            q = self
                .shared
                .wake
                .wait_timeout(q, Duration::from_millis(100))
                .map_or_else(|p| p.into_inner().0, |r| r.0);
            self.shared.beat();
        }
        let mut budget = self.options.max_batch_prefill_tokens;
        let mut admitted_any = false;
        // Prompts admitted in this call: a later request with the same prompt (the `n`
        // choices of one request) shares the first one's prefill when the model can fork.
        let mut fresh: Vec<(SeqId, usize)> = Vec::new();
        let can_fork = self.model.can_fork();
        while self.running.len() < self.options.max_batch_size {
            let Some(front) = q.front() else { break };
            // A prompt over the budget still runs, but alone in its prefill.
            if front.job.prompt.len() > budget && admitted_any {
                break;
            }
            let Some(r) = q.pop_front() else { break };
            let id = self.next_id;
            self.next_id += 1;
            let leader = if can_fork && r.job.prompt_logprobs.is_none() {
                fresh
                    .iter()
                    .find(|&&(_, k)| self.running.get(k).is_some_and(|s| s.pending == r.job.prompt))
                    .map(|p| p.0)
            } else {
                None
            };
            if leader.is_none() {
                budget = budget.saturating_sub(r.job.prompt.len());
            }
            admitted_any = true;
            if r.events.is_closed() {
                continue;
            }
            if r.job.prompt_logprobs.is_some() && self.model.device().is_some() {
                let _ = r.events.send(Event::Error(
                    "the prompt's log-probabilities are computed on host logits only; this model's are on a device"
                        .into(),
                ));
                continue;
            }
            let constrained = r.constraint.is_some();
            if let Some(m) = r.constraint {
                if let Err(e) = self.batch.add(id, m) {
                    let _ = r.events.send(Event::Error(e.to_string()));
                    continue;
                }
            }
            let mut sampler = Sampler::new(r.job.sampling);
            sampler.see_prompt(&r.job.prompt);
            let history = if self.drafter.is_some() { r.job.prompt.clone() } else { Vec::new() };
            let (pending, fork) = match leader {
                Some(l) => {
                    self.metrics.prefill_shared.inc();
                    (Vec::new(), Some((l, r.job.prompt)))
                }
                None => {
                    if can_fork {
                        fresh.push((id, self.running.len()));
                    }
                    (r.job.prompt, None)
                }
            };
            self.running.push(Seq {
                id,
                constrained,
                prompt_len: pending.len().max(fork.as_ref().map_or(0, |f| f.1.len())),
                pending,
                generated: 0,
                bytes: Vec::new(),
                sent: 0,
                sampler,
                max_new_tokens: r.job.max_new_tokens,
                stop: r.job.stop,
                strip_stop: r.job.strip_stop,
                events: r.events,
                held: None,
                history,
                draft: None,
                spec: SpecStats::default(),
                slack: 0.0,
                prompt_logprobs: r.job.prompt_logprobs,
                prefill: Vec::new(),
                fork,
                pair_turn: false,
            });
        }
        self.metrics.queue_length.set(q.len() as i64);
    }

    /// Frees the sequences whose client went away.
    fn drop_cancelled(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].events.is_closed() {
                let s = self.running.swap_remove(i);
                self.release(&s);
                self.metrics.cancelled.inc();
            } else {
                i += 1;
            }
        }
    }

    fn release(&mut self, s: &Seq) {
        self.model.release(s.id);
        if s.constrained {
            // Between steps: the batch is never busy here.
            let _ = self.batch.remove(s.id);
        }
    }

    /// Gives each decode row a draft tree where speculation is on and pays for it (the
    /// back-off), within what the fairness ledger of the rows without a draft allows: the
    /// drafter proposes (a constrained row's through its grammar), the tree goes to the
    /// row (the forward verifies it) and to the batch (the fill masks every node).
    fn draft_rows(&mut self, fwd: &[usize]) -> usize {
        let (Some(drafter), Some(spec)) = (&self.drafter, &self.options.speculation) else { return 0 };
        let stops = self.tokenizer.stop_tokens();
        let mut proposed = 0;
        // Drafting runs on the step thread before the forward: a step spends at most a
        // fraction of a forward on it (a grammar's alternatives in states whose masks were
        // never computed can take milliseconds each). Rows take turns being first.
        let budget = Duration::from_secs_f64(self.costs.mean_step().map_or(0.002, |f| f * DRAFT_BUDGET));
        let started = Instant::now();
        self.draft_turn = self.draft_turn.wrapping_add(1);
        for &i in fwd {
            self.running[i].draft = None;
        }
        // Prefill rows verify nothing: their prompt is the forward's work.
        let decode: Vec<usize> = (0..fwd.len())
            .map(|k| fwd[(k + self.draft_turn) % fwd.len().max(1)])
            .filter(|&i| self.running[i].generated > 0 && !self.running[i].pending.is_empty())
            .collect();
        // Who would draft: rows whose drafts pay, and rows back from a pause with a probe.
        let mut wanting: Vec<(usize, bool)> = Vec::with_capacity(decode.len());
        for &i in &decode {
            let s = &mut self.running[i];
            // A row back from a pause drafts a small probe whatever its rate says, so
            // that a row whose text turns predictable (a value copied from the prompt) is
            // seen; one that never does probes ever more rarely.
            let probe = s.spec.pause > 0;
            if probe {
                s.spec.pause -= 1;
                if s.spec.pause > 0 {
                    continue;
                }
            }
            if s.spec.verifies == 0 {
                s.spec.rate = self.spec_prior.start();
            }
            if spec.backoff && !probe && !self.costs.pays(s.spec.rate) {
                s.spec.back_off();
                self.metrics.draft_backoffs.inc();
                continue;
            }
            wanting.push((i, probe));
        }
        // The rows that do not draft are held to `max_slowdown`: a step that has any
        // verifies only the nodes the least of their ledgers pays for, probes first (two
        // nodes that re-measure a backed-off row), then the best measured acceptance.
        let fair = if spec.backoff { spec.max_slowdown.filter(|&f| f < 1.0) } else { None };
        let prices = fair.and_then(|f| {
            self.costs.fair_costs(decode.len()).map(|(step, node)| FairPrices { f, step, node })
        });
        let room_beside = |running: &[Seq], with_draft: &[bool], spent: f64| -> usize {
            let slacks = decode.iter().filter(|&&i| !with_draft[i]).map(|&i| running[i].slack);
            prices.map_or(0, |p| fair_room(slacks, p, spent))
        };
        let first = |running: &[Seq], a: usize, a_probe: bool, b: usize, b_probe: bool| {
            b_probe.cmp(&a_probe).then(running[b].spec.rate.total_cmp(&running[a].spec.rate))
        };
        // Any decode row may end the step without a draft and then pays for the drafting
        // (as measured): the step drafts no longer than the least ledger allows.
        let ledger_time = prices.map(|p| {
            let least = decode.iter().map(|&i| self.running[i].slack).fold(f64::INFINITY, f64::min);
            least + p.f / (1.0 - p.f) * p.step
        });
        let ledger_cut = ledger_time.is_some_and(|t| t < budget.as_secs_f64());
        let budget = match ledger_time {
            Some(t) if ledger_cut => Duration::from_secs_f64(t.max(0.0)),
            _ => budget,
        };
        let held_now = fair.is_some() && wanting.len() < decode.len();
        let mut with_draft = vec![false; self.running.len()];
        let mut room = if held_now {
            wanting.sort_by(|a, b| first(&self.running, a.0, a.1, b.0, b.1));
            wanting.iter().for_each(|w| with_draft[w.0] = true);
            room_beside(&self.running, &with_draft, 0.0)
        } else {
            usize::MAX
        };
        // Until the cost of a node is known, at most a node per row on average.
        let cap = if self.costs.known() { usize::MAX } else { fwd.len().max(1) };
        // Where the step is known to hold rows that do not draft, each draft is shaped to
        // the room left; where that turns out only as rows draft nothing, the drafts are
        // cut to it below.
        let mut drafts: Vec<(usize, bool, Draft)> = Vec::with_capacity(wanting.len());
        let mut withheld = 0;
        for &(i, probe) in &wanting {
            let s = &mut self.running[i];
            let late = started.elapsed() > budget;
            if late || proposed >= cap || room == 0 {
                withheld += usize::from(room == 0 || (late && ledger_cut));
                // A probe the step had no room (or time) for is drafted at the next step's
                // chance.
                if probe {
                    s.spec.pause = 1;
                }
                continue;
            }
            // A probe is a chain (siblings would cap what it can measure at one of them). A
            // width of 1 also lets the grammar drafter draft only where at most 8 tokens are
            // legal: a probe then drafts nothing more often (and waits as long again).
            let max_nodes = if probe { spec.max_nodes.min(PROBE_NODES) } else { spec.max_nodes }.min(room);
            let shaped;
            let spec = if probe || max_nodes < spec.max_nodes {
                shaped = SpeculationOptions {
                    depth: if probe { spec.depth.min(PROBE_NODES) } else { spec.depth },
                    width: if probe { 1 } else { spec.width },
                    max_nodes,
                    ..spec.clone()
                };
                &shaped
            } else {
                spec
            };
            let ctx =
                DraftContext { history: &s.history, stop_tokens: stops, deadline: Some(started + budget) };
            let t0 = Instant::now();
            let tree = if s.constrained {
                match self.batch.draft_grammar(s.id) {
                    Some(mut g) => drafter.draft(&ctx, Some(&mut g), spec),
                    None => None,
                }
            } else {
                drafter.draft(&ctx, None, spec)
            };
            let drafted = tree.as_ref().map_or(0, |d| d.tree.len() - 1);
            // A row that drafted nothing still spent the time: counted against one node.
            self.costs.note_draft(t0.elapsed().as_secs_f64(), drafted.max(1));
            match tree.filter(|d| d.tree.len() > 1) {
                Some(d) => {
                    proposed += drafted;
                    room = room.saturating_sub(drafted);
                    drafts.push((i, probe, d));
                }
                None if probe => s.spec.probe_again(),
                None => {}
            }
        }
        // Every decode row without a draft gains nothing from the step's nodes, and waited
        // for the drafting: the room is what the least of their ledgers pays for after it.
        // A row whose draft gets no room joins them, which can only shrink the room: cut
        // again until every draft kept has a node.
        let drafting = started.elapsed().as_secs_f64();
        let held = fair.is_some() && drafts.len() < decode.len();
        if held {
            // (Already in this order where the step was held from the start.)
            drafts.sort_by(|a, b| first(&self.running, a.0, a.1, b.0, b.1));
        }
        let mut keep: Vec<usize> = drafts.iter().map(|d| d.2.tree.len() - 1).collect();
        if held {
            with_draft.iter_mut().for_each(|w| *w = false);
            drafts.iter().for_each(|d| with_draft[d.0] = true);
            loop {
                let mut left = room_beside(&self.running, &with_draft, drafting);
                let mut dropped = false;
                for (k, d) in drafts.iter().enumerate() {
                    keep[k] = if with_draft[d.0] { (d.2.tree.len() - 1).min(left) } else { 0 };
                    left -= keep[k];
                    if keep[k] == 0 && with_draft[d.0] {
                        with_draft[d.0] = false;
                        dropped = true;
                    }
                }
                if !dropped {
                    break;
                }
            }
        }
        let mut nodes = 0;
        for ((i, probe, draft), keep) in drafts.into_iter().zip(keep) {
            let Some(draft) = draft.pruned(keep) else {
                withheld += 1;
                if probe {
                    self.running[i].spec.pause = 1;
                }
                continue;
            };
            let s = &mut self.running[i];
            if s.constrained && self.batch.set_draft(s.id, draft.tree.clone()).is_err() {
                if probe {
                    s.spec.probe_again();
                }
                continue;
            }
            let n = draft.tree.len() - 1;
            s.spec.probing = probe;
            nodes += n;
            self.metrics.drafted.with_label_values(&[drafter.name()]).inc_by(n as u64);
            s.draft = Some(draft);
        }
        self.metrics.draft_withheld.inc_by(withheld as u64);
        self.fair_step = prices.map(|prices| {
            let mut rows: Vec<SeqId> = decode.iter().map(|&i| self.running[i].id).collect();
            rows.sort_unstable();
            FairStep { prices, rows, drafting }
        });
        nodes
    }

    fn step(&mut self) {
        let _span = tracing::debug_span!("step", rows = self.running.len()).entered();
        let t0 = Instant::now();
        self.order_forks();
        // Rows sitting out (their masks late) keep their logits and wait; the rest forward.
        let fwd: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].held.is_none()).collect();
        if fwd.is_empty() {
            // Every row waits for a late mask: nothing to forward meanwhile.
            let masks = match self.batch.collect_late(LATE_POLL) {
                Ok(m) => m,
                Err(e) => return self.fail_all(&format!("mask fill: {e}")),
            };
            let failed = masks.failed.into_iter().map(|(id, e)| (id, format!("grammar: {e}"))).collect();
            let picks = self.sample_arrived(&masks.arrived);
            return self.settle(picks, masks.forced, &failed, &mut StepRecord::default());
        }
        let ids: Vec<SeqId> = fwd.iter().map(|&i| self.running[i].id).collect();
        self.metrics.batch_size.observe(ids.len() as f64);
        let draft_nodes = self.draft_rows(&fwd);
        if draft_nodes > 0 {
            self.metrics.draft_nodes.observe(draft_nodes as f64);
        }
        if self.options.overlap {
            if let Err(e) = self.batch.begin_step(&ids) {
                return self.fail_all(&format!("mask fill: {e}"));
            }
        }
        let vocab = self.model.vocab_size();
        let rows: Vec<ForwardRow<'_>> = fwd
            .iter()
            .map(|&i| {
                let s = &self.running[i];
                ForwardRow {
                    id: s.id,
                    tokens: &s.pending,
                    draft: s.draft.as_ref().map(|d| &d.tree),
                    all_logits: s.prompt_logprobs.is_some() && s.generated == 0,
                    fork_of: s.fork.as_ref().map(|f| f.0),
                }
            })
            .collect();
        // Each row's logits rows: one, plus one per draft node.
        let sizes: Vec<usize> = rows.iter().map(ForwardRow::logits_rows).collect();
        let logits_rows: usize = sizes.iter().sum();
        let forward_t = Instant::now();
        let forward = {
            let _f = if draft_nodes > 0 {
                tracing::debug_span!("verify", draft_nodes).entered()
            } else {
                tracing::debug_span!("forward").entered()
            };
            self.model.forward(&rows)
        };
        let forward_t = forward_t.elapsed();
        drop(rows);
        // A fork's context is its own from now on (whether or not its row sits this step out).
        for &i in &fwd {
            self.running[i].fork = None;
        }
        let Forward { logits, failed: model_failed } = match forward {
            Ok(f) => f,
            Err(e) => {
                let _ = self.batch.abandon_step();
                return self.fail_all(&e.to_string());
            }
        };
        if !self.options.overlap {
            if let Err(e) = self.batch.begin_step(&ids) {
                return self.fail_all(&format!("mask fill: {e}"));
            }
        }
        let prefill = fwd.iter().filter(|&&i| self.running[i].generated == 0).count();
        let mut record = StepRecord {
            rows: ids.len(),
            prefill,
            forward: forward_t,
            draft_nodes,
            started: Some(t0),
            ..StepRecord::default()
        };
        // Rows the model or the fill failed end with the error, never with what is
        // sampled from their rows.
        let mut failed: HashMap<SeqId, String> =
            model_failed.into_iter().filter_map(|(r, e)| Some((*ids.get(r)?, e.to_string()))).collect();
        let layout = LogitsLayout::contiguous(ids.len(), vocab);
        let sample_t;
        let mut arrived = Vec::new();
        // Rows whose grammar forced text after their deferred token: not sampled.
        let forced;
        let stops = self.tokenizer.stop_tokens();
        let picks: Result<Vec<(usize, TreeWalk)>, String> = match logits {
            StepLogits::Host(logits) => {
                let masks = {
                    let _a = tracing::debug_span!("masks").entered();
                    if draft_nodes > 0 {
                        // A drafted row's walk reads its nodes' masks: every mask is
                        // waited for (drafts and the apply's one-row-per-sequence layout
                        // do not mix).
                        self.batch.finish_masks()
                    } else if self.options.sample_under_masks {
                        // Without the overlap the fills began after the forward: they get
                        // the whole grace.
                        let deadline = self.options.late_mask_grace.map(|g| {
                            Instant::now()
                                + if self.options.overlap { grace(g, forward_t, ids.len()) } else { g }
                        });
                        self.batch.finish_masks_by(deadline)
                    } else {
                        self.batch.apply_masks((&mut *logits).into(), layout)
                    }
                };
                let late: std::collections::HashSet<SeqId> = match masks {
                    Ok(mut m) => {
                        arrived = std::mem::take(&mut m.arrived);
                        forced = std::mem::take(&mut m.forced);
                        let late = m.late.iter().copied().collect();
                        note_masks(&self.metrics, self.options.overlap, &mut record, m, &mut failed);
                        late
                    }
                    Err(e) => return self.fail_all(&format!("mask apply: {e}")),
                };
                // Sampling is per row and independent: in parallel (the mask pool is
                // idle now). A masked row is sampled among its allowed tokens only, its
                // mask read beside its logits (nothing was written to them). A late row
                // keeps its logits row for when its mask is back. A drafted row walks
                // its tree.
                sample_t = Instant::now();
                let _s = tracing::debug_span!("sample").entered();
                // (Prometheus counters are atomic: paired rows record on their threads.)
                let pair = self.options.pair_masked_draws.then_some(&*self.metrics);
                let mut rest: &mut [f32] = logits;
                let mut jobs = Vec::with_capacity(fwd.len());
                let mut next = fwd.iter().copied().zip(sizes.iter().copied()).enumerate().peekable();
                let forced_ids: std::collections::HashSet<SeqId> = forced.iter().map(|f| f.0).collect();
                for (i, s) in self.running.iter_mut().enumerate() {
                    let Some(&(r, (_, size))) = next.peek().filter(|(_, (f, _))| *f == i) else { continue };
                    next.next();
                    if rest.len() < size * vocab {
                        break;
                    }
                    let (row, tail) = std::mem::take(&mut rest).split_at_mut(size * vocab);
                    rest = tail;
                    // A prefill that asked for the prompt's log-probabilities: its rows but
                    // the last are the prompt's; the last is sampled.
                    let (prompt_rows, row) =
                        if s.prompt_logprobs.is_some() && s.generated == 0 && s.draft.is_none() {
                            let (p, last) = row.split_at_mut(size.saturating_sub(1) * vocab);
                            (Some(p), last)
                        } else {
                            (None, row)
                        };
                    if late.contains(&s.id) {
                        s.held = Some(row.to_vec());
                        s.pending.clear();
                    } else if !failed.contains_key(&s.id) && !forced_ids.contains(&s.id) {
                        let tree_masks = self.batch.draft_masks(s.id);
                        if let Some((_, fill)) = tree_masks {
                            self.metrics.draft_rejected.inc_by(fill.rejected.len() as u64);
                        }
                        jobs.push((i, s, row, self.batch.step_mask(r), tree_masks.map(|m| m.0), prompt_rows));
                    }
                }
                Ok(jobs
                    .into_par_iter()
                    .map(|(i, s, row, mask, tree_masks, prompt_rows)| {
                        if let (Some(rows), Some(top)) = (prompt_rows, s.prompt_logprobs) {
                            s.prefill = prompt_logprobs(rows, vocab, &s.pending, top);
                        }
                        let walk = match (&s.draft, tree_masks) {
                            (Some(d), Some(m)) => s.sampler.verify_tree(
                                row,
                                vocab,
                                &d.tree,
                                &d.forced,
                                |v| Some(m.row(v)),
                                stops,
                            ),
                            (Some(d), None) if !s.constrained => {
                                s.sampler.verify_tree(row, vocab, &d.tree, &d.forced, |_| None, stops)
                            }
                            _ => {
                                let pick =
                                    draw(&mut s.sampler, row, mask, pair.map(|m| (&mut s.pair_turn, m)));
                                single(&mut s.sampler, pick)
                            }
                        };
                        (i, walk)
                    })
                    .collect())
            }
            #[cfg(feature = "cuda")]
            StepLogits::Cuda(mut d) => {
                // The device path waits for every mask (no row sits out): the masks are
                // applied on the device in one call. (No drafts here: refused at start.)
                let masks = {
                    let _a = tracing::debug_span!("masks").entered();
                    self.batch.apply_masks(grammask_gpu::Logits::Cuda(d.logits.slice_mut(..)), layout)
                };
                match masks {
                    Ok(mut m) => {
                        forced = std::mem::take(&mut m.forced);
                        note_masks(&self.metrics, self.options.overlap, &mut record, m, &mut failed)
                    }
                    Err(e) => return self.fail_all(&format!("mask apply: {e}")),
                }
                sample_t = Instant::now();
                let _s = tracing::debug_span!("sample").entered();
                if self.device_sampler.is_none() {
                    match DeviceSampler::new(d.stream.clone()) {
                        Ok(s) => self.device_sampler = Some(s),
                        Err(e) => return self.fail_all(&e.to_string()),
                    }
                }
                match self.device_sampler.as_mut() {
                    Some(ds) => {
                        let mut samplers: Vec<&mut Sampler> = self
                            .running
                            .iter_mut()
                            .filter(|s| s.held.is_none())
                            .map(|s| &mut s.sampler)
                            .collect();
                        ds.sample(&d.logits.slice(..), vocab, &mut samplers)
                            .map(|p| {
                                fwd.iter()
                                    .copied()
                                    .zip(p)
                                    .map(|(i, pick)| (i, single(&mut self.running[i].sampler, pick)))
                                    .collect()
                            })
                            .map_err(|e| e.to_string())
                    }
                    None => Err("no device sampler".to_string()),
                }
            }
        };
        let mut picks = match picks {
            Ok(p) => p,
            Err(e) => return self.fail_all(&e),
        };
        picks.extend(self.sample_arrived(&arrived));
        record.sample = sample_t.elapsed();
        record.late = self.running.iter().filter(|s| s.held.is_some()).count();
        self.metrics.sample_seconds.observe(record.sample.as_secs_f64());
        self.settle(picks, forced, &failed, &mut record);
        self.fair_step = None;
        let costs = self.batch.take_accept_costs();
        (record.accept, record.jump_forward) = (costs.accept, costs.jump_forward);
        if record.constrained > 0 {
            self.metrics.accept_seconds.observe(costs.accept.as_secs_f64());
            self.metrics.jump_forward_seconds.observe(costs.jump_forward.as_secs_f64());
        }
        record.step = t0.elapsed();
        // What a logits row costs the whole step (forward, masks of its nodes, sampling):
        // prefill steps say nothing of a decode row's cost.
        if prefill == 0 {
            self.costs.note(logits_rows, record.step.as_secs_f64());
        }
        self.metrics.step_seconds.observe(record.step.as_secs_f64());
        if self.options.record_steps {
            self.shared.records.lock().unwrap_or_else(|p| p.into_inner()).push(record);
        }
    }

    /// Puts every row that shares another's prefill after that row (a fork's source must
    /// come first in the forward), and gives a row whose source is gone or not prefilling in
    /// this step its own prompt back.
    fn order_forks(&mut self) {
        if self.running.iter().all(|s| s.fork.is_none()) {
            return;
        }
        // Stable: rows keep their order otherwise.
        self.running.sort_by_key(|s| s.fork.is_some());
        let ready: std::collections::HashSet<SeqId> = self
            .running
            .iter()
            .filter(|s| s.fork.is_none() && s.generated == 0 && s.held.is_none() && !s.pending.is_empty())
            .map(|s| s.id)
            .collect();
        for s in &mut self.running {
            if let Some((from, prompt)) = &s.fork {
                if !ready.contains(from) {
                    s.pending = prompt.clone();
                    s.fork = None;
                }
            }
        }
    }

    /// Samples the rows whose late masks are back, from the logits kept for them.
    fn sample_arrived(&mut self, arrived: &[SeqId]) -> Vec<(usize, TreeWalk)> {
        let mut picks = Vec::with_capacity(arrived.len());
        for id in arrived {
            let Some(i) = self.running.iter().position(|s| s.id == *id) else { continue };
            let s = &mut self.running[i];
            let Some(mut row) = s.held.take() else { continue };
            let pair = self.options.pair_masked_draws.then_some((&mut s.pair_turn, &*self.metrics));
            let pick = draw(&mut s.sampler, &mut row, self.batch.late_mask(*id), pair);
            picks.push((i, single(&mut s.sampler, pick)));
        }
        picks
    }

    /// Ends the sequences in `failed` with their errors; gives the others the tokens
    /// their walks drew (accepted by their grammars up to where a grammar ends or forces
    /// text, jump-forward appended, the accepted draft path committed to the model), or
    /// the tokens their grammars forced after a deferred token (`forced`: already
    /// accepted, whatever was drawn for them dropped), and ends those that are done.
    fn settle(
        &mut self,
        mut walks: Vec<(usize, TreeWalk)>,
        forced: Vec<(SeqId, JumpForward)>,
        failed: &HashMap<SeqId, String>,
        record: &mut StepRecord,
    ) {
        let mut forced_rows: HashMap<usize, Vec<u32>> = HashMap::new();
        for (id, jf) in forced {
            let Some(i) = self.running.iter().position(|s| s.id == id) else { continue };
            // Jump-forward never takes tokens back here (`rollback_ok` is off in `start`).
            debug_assert_eq!(jf.rollback, 0);
            // A late row's kept logits are not needed any more.
            self.running[i].held = None;
            forced_rows.insert(i, jf.ids);
        }
        if !forced_rows.is_empty() {
            self.metrics.rows_forced.inc_by(forced_rows.len() as u64);
            walks.retain(|(i, _)| !forced_rows.contains_key(i));
            walks.extend(forced_rows.keys().map(|&i| (i, TreeWalk::default())));
        }
        let mut done: Vec<(usize, Result<FinishReason, String>)> = Vec::new();
        for (i, s) in self.running.iter().enumerate() {
            if let Some(msg) = failed.get(&s.id) {
                done.push((i, Err(msg.clone())));
            }
        }
        // The constrained rows' tokens go to their grammars: single tokens all at once,
        // verified paths row by row.
        let mut accepts = Vec::new();
        let mut accept_row = Vec::new();
        let mut accepted: HashMap<usize, Result<(usize, Accepted), crate::step::RowError>> = HashMap::new();
        for (i, walk) in &walks {
            let s = &self.running[*i];
            if !s.constrained || failed.contains_key(&s.id) || walk.error.is_some() || walk.tokens.is_empty()
            {
                continue;
            }
            if s.draft.is_some() {
                let tokens: Vec<u32> = walk.tokens.iter().map(|t| t.0).collect();
                accepted.insert(*i, self.batch.accept_path(s.id, &tokens));
            } else {
                accepts.push((s.id, walk.tokens[0].0));
                accept_row.push(*i);
            }
        }
        for (i, r) in accept_row.into_iter().zip(self.batch.accept_all(&accepts)) {
            accepted.insert(i, r.map(|a| (1, a)));
        }
        let drafter = self.drafter.as_ref().map_or("", |d| d.name());
        for (i, walk) in walks {
            let s = &mut self.running[i];
            if failed.contains_key(&s.id) {
                continue;
            }
            s.pending.clear();
            let draft = s.draft.take();
            if let Some(e) = walk.error {
                done.push((i, Err(format!("sampling: {e}"))));
                continue;
            }
            let stops = self.tokenizer.stop_tokens();
            let (kept, ended, forced) = if let Some(ids) = forced_rows.remove(&i) {
                (0, false, ids)
            } else if s.constrained {
                match accepted.remove(&i) {
                    Some(Ok((n, Accepted::Continue { forced: jf }))) => (n, false, jf.ids),
                    Some(Ok((n, Accepted::Finished))) => (n, true, Vec::new()),
                    Some(Err(e)) => {
                        done.push((i, Err(format!("grammar: {e}"))));
                        continue;
                    }
                    None => {
                        done.push((i, Err("grammar: the row was not accepted".into())));
                        continue;
                    }
                }
            } else {
                match walk.tokens.iter().position(|t| stops.contains(&t.0)) {
                    Some(p) => (p + 1, true, Vec::new()),
                    None => (walk.tokens.len(), false, Vec::new()),
                }
            };
            let drawn: Vec<u32> = walk.tokens.iter().map(|t| t.0).collect();
            // Draws past where the grammar ended or forced text are not kept.
            s.sampler.forget(&drawn[kept.min(drawn.len())..]);
            if let Some(d) = &draft {
                let took = kept.min(walk.path.len());
                self.metrics.accepted_per_verify.observe(took as f64);
                self.metrics.draft_accepted.with_label_values(&[drafter]).inc_by(took as u64);
                record.draft_accepted += took;
                let rate = took as f64 / (d.tree.len() - 1).max(1) as f64;
                // (A probe's two-node chain says little of what a full draft accepts: it
                // moves the row's rate, not the prior new rows start from.)
                if !s.spec.probing {
                    self.spec_prior.note(rate);
                }
                let costs = &self.costs;
                s.spec.verified(rate, |r| costs.pays(r));
            }
            // The fairness ledger of a decode row: its allowance for the step, and the
            // steps its own accepted drafts saved it, less what the other rows' nodes cost.
            if let Some(fs) = self.fair_step.as_ref().filter(|fs| fs.rows.binary_search(&s.id).is_ok()) {
                // A row with a draft of its own took part: what the step's other nodes and
                // drafting cost it is the back-off's business there, not the ledger's.
                let (took, others, spent) = match &draft {
                    Some(_) => (kept.min(walk.path.len()), 0, 0.0),
                    None => (0, record.draft_nodes, fs.drafting),
                };
                s.slack = fair_entry(s.slack, fs.prices, took, others, spent);
            }
            let mut reason = None;
            let mut tokens = walk.tokens.into_iter().take(kept).peekable();
            while let Some((token, logprob, top)) = tokens.next() {
                let last = tokens.peek().is_none();
                record.tokens += 1;
                if self.drafter.is_some() {
                    s.history.push(token);
                }
                if let Some(r) = emit(&self.tokenizer, s, token, logprob, top, ended && last) {
                    reason = Some(r);
                    break;
                }
            }
            if let Some(r) = reason {
                done.push((i, Ok(r)));
                continue;
            }
            // The accepted draft nodes stay in the model's cache; the tokens after them
            // (the one drawn past the path, then any forced) are the next forward's.
            let on_path = kept.min(walk.path.len());
            if draft.is_some() {
                if let Err(e) = self.model.commit(s.id, &walk.path[..on_path]) {
                    done.push((i, Err(e.to_string())));
                    continue;
                }
            }
            s.pending.extend_from_slice(&drawn[on_path..kept]);
            s.sampler.record(&forced);
            let asks_top = s.sampler.params().top_logprobs > 0;
            for &f in &forced {
                s.pending.push(f);
                record.tokens += 1;
                if self.drafter.is_some() {
                    s.history.push(f);
                }
                let top = if asks_top { vec![(f, 0.0)] } else { Vec::new() };
                if let Some(r) = emit(&self.tokenizer, s, f, Some(0.0), top, false) {
                    reason = Some(r);
                    break;
                }
            }
            if let Some(r) = reason {
                done.push((i, Ok(r)));
            } else if s.pending.is_empty() {
                done.push((i, Err("nothing to forward after a verify step".into())));
            }
        }
        // Highest index first, so swap_remove does not move a row still to finish.
        done.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, result) in done {
            let s = self.running.swap_remove(i);
            self.release(&s);
            match result {
                Ok(reason) => {
                    let text = String::from_utf8_lossy(&s.bytes).into_owned();
                    let _ = s.events.send(Event::End(EndEvent {
                        reason,
                        generated_tokens: s.generated,
                        text,
                        seed: s.sampler.params().seed,
                        input_length: s.prompt_len,
                        prefill: s.prefill,
                    }));
                    self.metrics.finished.with_label_values(&[reason_label(reason)]).inc();
                }
                Err(msg) => {
                    let _ = s.events.send(Event::Error(msg.clone()));
                    self.metrics.errors.with_label_values(&["generation"]).inc();
                }
            }
        }
    }

    fn fail_all(&mut self, msg: &str) {
        tracing::error!(error = msg, "step failed");
        for s in std::mem::take(&mut self.running) {
            self.release(&s);
            let _ = s.events.send(Event::Error(msg.to_string()));
            self.metrics.errors.with_label_values(&["model"]).inc();
        }
    }
}

/// A row's draw: under `mask` where it has one. With `pair` (the row's own turn flag and
/// the metrics: [`EngineOptions::pair_masked_draws`]) a masked row is also drawn without
/// its mask, with a copy of its sampler (that token dropped), and both draws' times are
/// recorded. Each draw reads a copy of the row written into one buffer just before it, so
/// both find the logits equally fresh in the cache (a draw of the row itself, read once to
/// make the other draw's copy, would find it colder than that copy: a row of 151,669
/// logits is 0.6 MB, and the row and its copy together pass a core's L2); the buffer has the
/// row's length and the twin's buffers the sampler's capacity, so neither draw grows one the
/// other reuses; and which draw goes first flips at each of the row's paired draws (not with
/// the step: a row drawn every other step, forced text between, would keep one order). The
/// masked draw, with the row's own sampler, gives the pick: the same as from the row.
fn draw(
    sampler: &mut Sampler,
    row: &mut [f32],
    mask: Option<&[u32]>,
    pair: Option<(&mut bool, &Metrics)>,
) -> Pick {
    let Some(m) = mask else { return sampler.sample(row) };
    let Some((turn, metrics)) = pair else { return sampler.sample_masked(row, m) };
    *turn = !*turn;
    let masked_first = *turn;
    let (mut twin, mut copy) = (sampler.twin(), row.to_vec());
    let mut unmasked = |copy: &mut Vec<f32>| {
        copy.copy_from_slice(row);
        let t = thread_cpu();
        let _ = std::hint::black_box(twin.sample(copy));
        thread_cpu().saturating_sub(t)
    };
    let mut masked = |copy: &mut Vec<f32>| {
        copy.copy_from_slice(row);
        let t = thread_cpu();
        let pick = sampler.sample_masked(copy, m);
        (pick, thread_cpu().saturating_sub(t))
    };
    let (pick, m_t, u_t) = if masked_first {
        let (pick, m_t) = masked(&mut copy);
        (pick, m_t, unmasked(&mut copy))
    } else {
        let u_t = unmasked(&mut copy);
        let (pick, m_t) = masked(&mut copy);
        (pick, m_t, u_t)
    };
    metrics.record_paired_draw([m_t, u_t]);
    pick
}

/// The calling thread's CPU time, for paired draws: what a draw costs, not the time the
/// thread was preempted in it (on 2 vCPUs one preemption of a few milliseconds reads as
/// microseconds a row over a whole run). Elsewhere than Linux and Android: wall time.
fn thread_cpu() -> Duration {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }
}

/// A draw without a tree as a walk of one token.
fn single(sampler: &mut Sampler, pick: Pick) -> TreeWalk {
    match pick {
        Ok((t, lp)) => TreeWalk { tokens: vec![(t, lp, sampler.take_top())], ..TreeWalk::default() },
        Err(e) => TreeWalk { error: Some(e), ..TreeWalk::default() },
    }
}

/// Records a step's mask report: timings, metrics, and the rows whose fill failed.
fn note_masks(
    metrics: &Metrics,
    overlap: bool,
    record: &mut StepRecord,
    masks: StepMasks,
    failed: &mut HashMap<SeqId, String>,
) {
    metrics.record_masks(&masks);
    record.constrained = masks.constrained;
    record.masked = masks.masked;
    record.fill = masks.fill;
    // Without the overlap the fill ran after the forward: all of it is waited.
    record.wait = if overlap { masks.wait } else { masks.wait.max(masks.fill) };
    record.apply = masks.apply;
    metrics.rows_late.inc_by(masks.late.len() as u64);
    failed.extend(masks.failed.into_iter().map(|(id, e)| (id, format!("grammar: {e}"))));
}

fn reason_label(r: FinishReason) -> &'static str {
    match r {
        FinishReason::Length => "length",
        FinishReason::EosToken => "eos_token",
        FinishReason::StopSequence => "stop_sequence",
    }
}

/// Sends a token's event and says whether the sequence ends here.
fn emit(
    tok: &TokenizerInfo,
    s: &mut Seq,
    token: u32,
    logprob: Option<f32>,
    top: Vec<(u32, f32)>,
    ended: bool,
) -> Option<FinishReason> {
    s.generated += 1;
    let special = tok.is_special(token);
    let before = s.bytes.len();
    if !special {
        s.bytes.extend_from_slice(tok.token_bytes(token));
    }
    let hit = stop_hit(&s.stop, &s.bytes, before);
    let reason = if ended {
        Some(FinishReason::EosToken)
    } else if hit.is_some() {
        Some(FinishReason::StopSequence)
    } else {
        (s.generated >= s.max_new_tokens).then_some(FinishReason::Length)
    };
    // Where the text may go out to: everything at the end (the stop left out when
    // stripped); before it, not what could still begin a stop sequence when stripping.
    let end = match (hit, s.strip_stop) {
        (Some(p), true) => p.max(s.sent),
        _ if reason.is_some() || !s.strip_stop => s.bytes.len(),
        _ => s.bytes.len() - held_for_stop(&s.stop, &s.bytes[s.sent..]),
    };
    // Text goes out at character boundaries: a token may end inside a character (at the
    // end, whatever is left goes out, replaced if it must be).
    let ready = match std::str::from_utf8(&s.bytes[s.sent..end]) {
        Ok(t) => t.len(),
        Err(_) if reason.is_some() => end - s.sent,
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Bytes that can never be UTF-8 go out replaced rather than holding text back.
        Err(_) => end - s.sent,
    };
    let mut text = String::from_utf8_lossy(&s.bytes[s.sent..s.sent + ready]).into_owned();
    s.sent += ready;
    if special {
        // The token's own text, as TGI shows it (the generated text skips it).
        text.push_str(&String::from_utf8_lossy(tok.token_bytes(token)));
    }
    if let (Some(p), true) = (hit, s.strip_stop) {
        s.bytes.truncate(p);
    }
    let _ = s.events.send(Event::Token(TokenEvent { id: token, text, logprob, special, top }));
    reason
}

/// Where the earliest stop sequence that ends in `bytes[new..]` (the last token's bytes)
/// begins: a stop may end inside a token, or straddle tokens.
fn stop_hit(stops: &[String], bytes: &[u8], new: usize) -> Option<usize> {
    stops
        .iter()
        .map(String::as_bytes)
        .filter(|st| !st.is_empty())
        .filter_map(|st| {
            let from = new.saturating_sub(st.len() - 1);
            let at = bytes[from..].windows(st.len()).position(|w| w == st)?;
            Some(from + at)
        })
        .min()
}

/// How many bytes at the end of `tail` could begin a stop sequence (held back until the
/// next token tells).
fn held_for_stop(stops: &[String], tail: &[u8]) -> usize {
    stops
        .iter()
        .map(String::as_bytes)
        .filter_map(|st| (1..st.len()).rev().find(|&k| tail.ends_with(&st[..k])))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_the_forward_shared_by_the_rows_between_its_floor_and_its_cap() {
        let ms = Duration::from_millis;
        let max = DEFAULT_LATE_MASK_GRACE;
        // Batch 1 and 4 behind a 5 ms forward: the cap (waiting costs less than a step).
        assert_eq!(grace(max, ms(5), 1), max);
        assert_eq!(grace(max, ms(5), 4), max);
        // Batch 32: 5 ms / 32 rows.
        assert_eq!(grace(max, ms(5), 32), Duration::from_nanos(156_250));
        // A fast forward, many rows: the floor (a late row's copy costs that much).
        assert_eq!(grace(max, Duration::from_micros(50), 64), MIN_GRACE);
        // No rows (cannot happen in a step) divides by one; a cap below the floor wins.
        assert_eq!(grace(max, ms(5), 0), max);
        assert_eq!(grace(Duration::ZERO, ms(5), 32), Duration::ZERO);
    }

    #[test]
    fn the_cost_of_a_row_is_kept_once_the_steps_stop_varying() {
        let mut c = ForwardCosts::default();
        // Hopeful before any fit.
        assert!(c.pays(0.01));
        // Steps of 1 and 5 rows: 10 ms + 2 ms per extra row.
        for k in 0..8 {
            let rows = if k % 2 == 0 { 1 } else { 5 };
            c.note(rows, 0.010 + 0.002 * (rows - 1) as f64);
        }
        let per_row = c.per_row.expect("a fit");
        assert!((per_row - 0.002).abs() < 1e-9, "{per_row}");
        // A row accepting 1 token in 100 nodes does not pay (a node costs a fifth of a
        // 1-row step); one accepting most of its nodes does.
        assert!(!c.pays(0.01));
        // Drafting stops: every step is one row, and the window no longer varies. The fit
        // stays, and so does the verdict (a forgotten fit turned hopeful, and every
        // backed-off row drafted again at once).
        for _ in 0..ForwardCosts::KEEP {
            c.note(1, 0.010);
        }
        let kept = c.per_row.expect("the fit is kept");
        assert!((kept - per_row).abs() < 1e-9, "{kept} {per_row}");
        assert!(!c.pays(0.01));
        assert!(c.pays(0.9));
    }

    #[test]
    fn new_rows_start_from_what_the_other_rows_measured() {
        let mut p = SpecPrior::default();
        // Hopeful until enough verifies were seen.
        for _ in 0..SpecPrior::KNOWN - 1 {
            p.note(0.05);
        }
        assert_eq!(p.start(), 1.0);
        p.note(0.05);
        assert!((p.start() - 0.05).abs() < 1e-9);
        // Smoothed: one verify taking every node moves it a tenth of the way.
        p.note(1.0);
        assert!((p.start() - 0.145).abs() < 1e-9);
    }

    #[test]
    fn backed_off_rows_probe_ever_more_rarely_until_a_verify_pays() {
        let mut s = SpecStats::default();
        let mut pauses = Vec::new();
        for _ in 0..7 {
            s.back_off();
            pauses.push(s.pause);
        }
        assert_eq!(pauses, [8, 16, 32, 64, 128, 128, 128]);
        // A probe that drafted nothing waits as long again, without doubling.
        s.probe_again();
        assert_eq!(s.pause, 128);
        // A verify whose smoothed rate does not pay keeps the doubling; one that pays ends it.
        s.probing = true;
        s.verified(0.0, |_| false);
        assert!(!s.probing && s.backoffs == 7 && s.verifies == 1);
        s.verified(1.0, |r| r > 0.2);
        assert_eq!(s.backoffs, 0);
        s.back_off();
        assert_eq!(s.pause, 8);
    }

    #[test]
    fn the_fairness_ledger_prices_a_step_and_a_node_from_the_fit() {
        let mut c = ForwardCosts::default();
        assert_eq!(c.fair_costs(8), None);
        // Steps of 8 to 11 rows: 8 ms and 0.5 ms per row beyond.
        for k in 0..16 {
            let rows = 8 + k % 4;
            c.note(rows, 0.008 + 0.0005 * (rows - 8) as f64);
        }
        let (step, node) = c.fair_costs(8).expect("known");
        assert!((step - 0.008).abs() < 1e-9 && (node - 0.0005).abs() < 1e-9, "{step} {node}");
        // A step of other rows is priced from the same fit.
        let (step, _) = c.fair_costs(10).expect("known");
        assert!((step - 0.009).abs() < 1e-9, "{step}");
        // Before a fit above zero, a row's share of the mean step.
        let mut c = ForwardCosts::default();
        c.note(8, 0.008);
        let (step, node) = c.fair_costs(8).expect("a step seen");
        assert!((step - 0.008).abs() < 1e-9 && (node - 0.001).abs() < 1e-9, "{step} {node}");
    }

    const PRICES: FairPrices = FairPrices { f: 0.02, step: 0.008, node: 0.0005 };

    #[test]
    fn the_room_beside_rows_that_do_not_draft_is_their_least_slack() {
        // 2 % of an 8 ms step is 0.16 ms: not one 0.5 ms node on the allowance alone.
        assert_eq!(fair_room([0.0].into_iter(), PRICES, 0.0), 0);
        // Slack saved over earlier steps (or earned by a row's own accepted drafts) pays
        // for nodes; the row with the least decides; a row in debt pays it first.
        assert_eq!(fair_room([0.001, 0.004].into_iter(), PRICES, 0.0), 2);
        assert_eq!(fair_room([-0.003, 0.004].into_iter(), PRICES, 0.0), 0);
        // The step's drafting, already spent, comes first.
        assert_eq!(fair_room([0.001].into_iter(), PRICES, 0.0005), 1);
        // No row to hold to it: no limit.
        assert_eq!(fair_room(std::iter::empty(), PRICES, 0.0), usize::MAX);
    }

    #[test]
    fn a_row_the_ledger_holds_keeps_its_share_of_its_rate() {
        // One row that never drafts beside rows that would draft every node they may (and
        // spend 0.1 ms drafting whenever there is room): over any number of steps its rate
        // stays at 1 − f of the rate without their nodes.
        for f in [0.0, 0.02, 0.1] {
            let p = FairPrices { f, ..PRICES };
            let (mut slack, mut time, mut nodes) = (0.0, 0.0, 0);
            for steps in 1..=2_000 {
                let spent = if fair_room([slack].into_iter(), p, 0.0) > 0 { 0.0001 } else { 0.0 };
                let room = fair_room([slack].into_iter(), p, spent).min(12);
                nodes += room;
                time += p.step + room as f64 * p.node + spent;
                slack = fair_entry(slack, p, 0, room, spent);
                let rate = steps as f64 * p.step / time;
                assert!(rate >= 1.0 - f - 1e-9, "f {f}: {rate} after {steps} steps");
            }
            // The others did draft (all they were let: the bound is met, not avoided).
            let rate = 2_000.0 * p.step / time;
            assert!(f == 0.0 && nodes == 0 || rate < 1.0 - f + 0.01, "f {f}: {nodes} nodes, {rate}");
        }
        // A row whose own drafts saved it steps carries others' nodes beyond its allowance,
        // up to what SLACK_CAP_STEPS steps of time hold.
        let slack = fair_entry(0.0, PRICES, 3, 0, 0.0);
        assert!(fair_room([slack].into_iter(), PRICES, 0.0) >= 48);
        assert_eq!(fair_entry(0.0, PRICES, 100, 0, 0.0), SLACK_CAP_STEPS * PRICES.step);
        // Debt stays until the allowance has paid it, and is no deeper than the cap.
        let slack = fair_entry(0.0, PRICES, 0, 10, 0.0);
        assert!(slack < 0.0 && fair_room([slack].into_iter(), PRICES, 0.0) == 0);
        assert_eq!(fair_entry(0.0, PRICES, 0, 1_000, 0.0), -SLACK_CAP_STEPS * PRICES.step);
    }

    #[test]
    fn one_probe_step_among_steps_of_one_size_does_not_refit_the_cost() {
        let mut c = ForwardCosts::default();
        for k in 0..8 {
            let rows = if k % 2 == 0 { 1 } else { 5 };
            c.note(rows, 0.010 + 0.002 * (rows - 1) as f64);
        }
        for _ in 0..ForwardCosts::KEEP {
            c.note(1, 0.010);
        }
        let before = c.per_row.expect("a fit");
        // A probe's step of 3 rows, slow by timing noise: refitted on it alone, a row would
        // cost 10 ms; the window's spread (a variance of 0.06) is too small to refit on.
        c.note(3, 0.030);
        assert!((c.per_row.expect("kept") - before).abs() < 1e-9);
        assert!(!c.pays(0.01));
    }
}
