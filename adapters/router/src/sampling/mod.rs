//! Choosing the next token from a row of (masked) logits: greedy or sampled, with
//! TGI's and OpenAI's parameters.
//!
//! Every choice looks only at finite logits, so a masked token (−∞) is never picked;
//! a row with no finite logit is an error, not a token. The sampler's random stream
//! belongs to its request (seeded), so the same seed gives the same output whatever
//! else runs in the batch.
//!
//! Host logits are sampled by [`Sampler::sample`]; device logits (a model on a GPU)
//! by [`DeviceSampler`] (feature `cuda`), which draws greedy and temperature-only
//! rows on the device and copies to the host only the rows that need top-k, top-p
//! or penalties.

#[cfg(feature = "cuda")]
mod device;

#[cfg(feature = "cuda")]
pub use device::{DeviceSampler, DeviceSamplingError};

use rand::{Rng, SeedableRng};
use std::collections::HashMap;

/// Sampling settings of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Draw from the distribution (`false`: the most likely token).
    pub do_sample: bool,
    /// Divides the logits (sampling only); must be > 0.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the most likely tokens whose probabilities add up to `top_p`.
    pub top_p: Option<f32>,
    /// CTRL's repetition penalty (> 1 discourages tokens already seen: generated, and
    /// the prompt's given to [`Sampler::see_prompt`], as TGI and vLLM count them).
    pub repetition_penalty: Option<f32>,
    /// Locally typical sampling (TGI's `typical_p`): after top-k and top-p, keep the
    /// tokens whose surprise is closest to the distribution's entropy until they hold
    /// this much of its mass.
    pub typical_p: Option<f32>,
    /// OpenAI's frequency penalty: minus `penalty × count` for each generated token.
    pub frequency_penalty: Option<f32>,
    /// OpenAI's presence penalty: minus `penalty` for each token generated at least once.
    pub presence_penalty: Option<f32>,
    /// OpenAI's `logit_bias`: added to these tokens' logits at every step, before the
    /// choice (a grammar's mask still decides which tokens may be chosen at all).
    pub logit_bias: Vec<(u32, f32)>,
    /// Seed of the random stream.
    pub seed: u64,
    /// Report each token's log-probability (a pass over the whole row: skipped
    /// when nobody reads it).
    pub logprobs: bool,
    /// Also report the `n` most likely tokens at each step with theirs
    /// ([`Sampler::take_top`]; OpenAI's `top_logprobs`, TGI's `top_n_tokens`): under the
    /// same distribution as the chosen token's (masked, at the temperature, after top-k
    /// and top-p when sampling), computed after the draw so that asking for them never
    /// changes the tokens drawn.
    pub top_logprobs: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            do_sample: false,
            temperature: 1.0,
            top_k: None,
            top_p: None,
            repetition_penalty: None,
            typical_p: None,
            frequency_penalty: None,
            presence_penalty: None,
            logit_bias: Vec::new(),
            seed: 0,
            logprobs: true,
            top_logprobs: 0,
        }
    }
}

/// A request's sampler: its parameters and its random stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: rand::rngs::StdRng,
    counts: HashMap<u32, u32>,
    /// Scratch: candidate ids and their weights.
    cand: Vec<(u32, f32)>,
    /// The last choice's most likely tokens and their log-probabilities.
    top: Vec<(u32, f32)>,
    /// The prompt's tokens, for the repetition penalty ([`Sampler::see_prompt`]).
    prompt: std::collections::HashSet<u32>,
}

/// The tokens a choice may look at: the whole row, or the ids whose bit is set in a
/// bitmask row.
#[derive(Debug, Clone, Copy)]
enum Allowed<'a> {
    All(usize),
    Mask(&'a [u32], usize),
}

impl<'a> Allowed<'a> {
    /// `logits` (the row) in 32-token blocks, a word of the mask each (all ones without a
    /// mask; bits past a short last block are the mask's, which callers mask off), blocks
    /// with no allowed token skipped: `(block index, its logits, its word)`.
    fn blocks<'l>(self, logits: &'l [f32]) -> impl Iterator<Item = (usize, &'l [f32], u32)> + 'l
    where
        'a: 'l,
    {
        let n = match self {
            Allowed::All(n) | Allowed::Mask(_, n) => n.min(logits.len()),
        };
        logits[..n].chunks(32).enumerate().filter_map(move |(w, xs)| {
            let word = match self {
                Allowed::All(_) => u32::MAX,
                Allowed::Mask(mask, _) => mask.get(w).copied().unwrap_or(0),
            };
            (word != 0).then_some((w, xs, word))
        })
    }

    /// Calls `f` with every allowed id below the row's length, in increasing order.
    ///
    /// A full mask word is walked as a plain range and an empty one skipped, so that a
    /// mask allowing most of the vocabulary (inside a free string) costs about what a
    /// scan of the row does, and a sparse one far less.
    #[inline]
    fn each(self, mut f: impl FnMut(usize)) {
        match self {
            Allowed::All(n) => (0..n).for_each(f),
            Allowed::Mask(mask, n) => {
                for (w, &word) in mask.iter().enumerate().take(n.div_ceil(32)) {
                    let base = w * 32;
                    if word == u32::MAX && base + 32 <= n {
                        (base..base + 32).for_each(&mut f);
                        continue;
                    }
                    let mut bits = word;
                    while bits != 0 {
                        let i = base + bits.trailing_zeros() as usize;
                        if i >= n {
                            break;
                        }
                        f(i);
                        bits &= bits - 1;
                    }
                }
            }
        }
    }
}

/// `e^x` for `x ≤ 0` (below −87: about `e^−87`, not 0), in `f32`, written so that a loop
/// over it vectorizes: `libm`'s `exp` is a call per element, and the log-probability's
/// normaliser takes one per allowed token (a 128k row: ~0.7 ms that way). Cody–Waite
/// reduction to `r` in [−ln 2 / 2, ln 2 / 2] and a degree-6 Taylor polynomial: relative
/// error under 3 · 10⁻⁷.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // Round to nearest without `round` (a call on the baseline target): 1.5 · 2²³.
    const SHIFT: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let k = (x * LOG2E + SHIFT) - SHIFT;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let p = 1.0
        + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // k ∈ [−126, 0]: 2^k is a normal number.
    f32::from_bits(((k as i32 + 127) as u32) << 23) * p
}

/// A mask word's bits as 32 lanes of 1.0 (set) and 0.0 (clear), by bytes from a table:
/// a multiply by a lane vectorizes where a test of the bit per token is a branch, one that
/// a half-full mask mispredicts.
#[inline(always)]
fn lanes(bits: u32) -> [f32; 32] {
    const fn byte_lanes() -> [[f32; 8]; 256] {
        let mut t = [[0.0f32; 8]; 256];
        let mut b = 0;
        while b < 256 {
            let mut j = 0;
            while j < 8 {
                if (b >> j) & 1 == 1 {
                    t[b][j] = 1.0;
                }
                j += 1;
            }
            b += 1;
        }
        t
    }
    static BYTES: [[f32; 8]; 256] = byte_lanes();
    let mut out = [0.0f32; 32];
    for (k, chunk) in out.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&BYTES[((bits >> (8 * k)) & 0xff) as usize]);
    }
    out
}

/// Whether `x` is finite, by its exponent bits: a test of integers that vectorizes (and
/// the same one `block_max`'s SSE2 lanes make).
#[inline(always)]
fn finite(x: f32) -> bool {
    (x.to_bits() & 0x7f80_0000) != 0x7f80_0000
}

/// The largest allowed finite logit and its id, ties to the lowest id (what a scan of
/// the row with −∞ written where the mask is clear gives), or `None` if there is none.
///
/// By 32-token blocks, a word of the mask each: a block's largest allowed finite logit
/// in a fixed-length loop that vectorizes (8 lanes of running maxima, a lane's logit kept
/// by a select on the mask's bit and the exponent bits, no branch a half-full word
/// mispredicts; a word with few bits set goes bit by bit), then, only where it beats the
/// best so far, the first token in the block that holds it. Masked and not, the same
/// work a block: a row inside a free JSON string (most words full, some with holes) costs
/// what the unmasked row does, which a visit of each allowed id did not (its holey words
/// went bit by bit).
fn argmax(logits: &[f32], allowed: Allowed<'_>) -> Option<(usize, f32)> {
    let (mut best, mut best_i) = (f32::NEG_INFINITY, usize::MAX);
    for (w, xs, word) in allowed.blocks(logits) {
        let most = |a: f32, b: f32| if b > a { b } else { a };
        let m = match <&[f32; 32]>::try_from(xs) {
            Ok(xs) if word.count_ones() >= 8 => block_max(xs, word),
            // A sparse word (a few set bits: one by one), or the row's short last block.
            _ => {
                let (mut m, mut bits) = (f32::NEG_INFINITY, word & (u32::MAX >> (32 - xs.len())));
                while bits != 0 {
                    let x = xs[bits.trailing_zeros() as usize];
                    if finite(x) {
                        m = most(m, x);
                    }
                    bits &= bits - 1;
                }
                m
            }
        };
        if m > best {
            // `m` is finite: the first allowed token equal to it (−0 = +0, as a scan that
            // keeps the first of equals would).
            let found = (0..xs.len()).find(|&j| (word >> j) & 1 == 1 && xs[j] == m);
            debug_assert!(found.is_some(), "a block's largest allowed logit is one of its tokens");
            let j = found?;
            (best, best_i) = (xs[j], w * 32 + j);
        }
    }
    (best_i != usize::MAX).then_some((best_i, best))
}

/// The largest finite `xs[j]` whose bit `j` of `word` is set (−∞ if none), without a
/// branch per token: on x86-64 with SSE2 (every x86-64), 4 lanes at a time — a lane's
/// logit kept by an and with its bit and its exponent bits, `maxps` over the kept; what
/// the compiler made of the same loop in plain Rust was scalar (a branch per token, or
/// 1.5 ns a token without). Elsewhere, that plain loop.
#[inline]
fn block_max(xs: &[f32; 32], word: u32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; the loads read `xs`' 32 floats, 4 at a time,
        // unaligned.
        unsafe {
            let exponent = _mm_set1_epi32(0x7f80_0000);
            let w = _mm_set1_epi32(word as i32);
            let (mut acc0, mut acc1) = (_mm_set1_ps(f32::NEG_INFINITY), _mm_set1_ps(f32::NEG_INFINITY));
            let mut bit = _mm_set_epi32(8, 4, 2, 1);
            for k in 0..8 {
                let x = _mm_loadu_ps(xs.as_ptr().add(4 * k));
                let allowed = _mm_cmpeq_epi32(_mm_and_si128(w, bit), bit);
                let e = _mm_and_si128(_mm_castps_si128(x), exponent);
                let keep = _mm_castsi128_ps(_mm_andnot_si128(_mm_cmpeq_epi32(e, exponent), allowed));
                // Kept lanes hold the logit, the others −∞ (a kept logit is finite, so
                // `maxps` never sees a NaN).
                let v = _mm_or_ps(_mm_and_ps(keep, x), _mm_andnot_ps(keep, _mm_set1_ps(f32::NEG_INFINITY)));
                if k % 2 == 0 {
                    acc0 = _mm_max_ps(acc0, v);
                } else {
                    acc1 = _mm_max_ps(acc1, v);
                }
                bit = _mm_slli_epi32(bit, 4);
            }
            let mut lanes = [0.0f32; 4];
            _mm_storeu_ps(lanes.as_mut_ptr(), _mm_max_ps(acc0, acc1));
            lanes.into_iter().fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a })
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    block_max_portable(xs, word)
}

/// [`block_max`] in plain Rust, branch-free (a lane's logit or −∞ picked by and/or with an
/// all-ones-or-zero word): what other targets run, and what the SSE2 kernel is tested
/// against.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn block_max_portable(xs: &[f32; 32], word: u32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    for (j, &x) in xs.iter().enumerate() {
        let keep = (u32::from(word & (1u32 << j) != 0) & u32::from(finite(x))).wrapping_neg();
        let v = f32::from_bits((x.to_bits() & keep) | (f32::NEG_INFINITY.to_bits() & !keep));
        acc[j % 8] = if v > acc[j % 8] { v } else { acc[j % 8] };
    }
    acc.into_iter().fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a })
}

/// Σ e^(x/t − max) over the allowed finite logits `x` (`max`: their largest over `t`): the
/// log-probability's normaliser. A 32-token block (a word of the mask) with many tokens
/// that count (allowed and finite) goes through a fixed-length loop that vectorizes,
/// summed in `f32` and added up in `f64`; one with few, token by token. Which tokens count
/// decides both, so the row sampled under its mask and the row with −∞ written where the
/// mask is clear give the same log-probability to the last bit.
fn sum_exp(logits: &[f32], allowed: Allowed<'_>, t: f32, max: f32) -> f64 {
    #[inline(always)]
    fn term(x: f32, inv_t: f32, max: f32) -> f32 {
        let e = exp_nonpositive(x * inv_t - max);
        if x.is_finite() {
            e
        } else {
            0.0
        }
    }
    let inv_t = 1.0 / t;
    let mut z = 0.0f64;
    for (_, xs, word) in allowed.blocks(logits) {
        // The tokens that count: allowed and finite. The way a block is summed depends
        // on them alone, so that the mask and −∞ written where it is clear agree.
        let full = <&[f32; 32]>::try_from(xs);
        let finite = match full {
            // Over a fixed 32 (it vectorizes), by the exponent bits.
            Ok(xs) => (0..32).fold(0u32, |m, j| m | u32::from(finite(xs[j])) << j),
            Err(_) => xs.iter().enumerate().fold(0u32, |m, (j, x)| m | u32::from(x.is_finite()) << j),
        };
        let bits = word & finite;
        match full {
            Ok(xs) if bits.count_ones() >= 12 => {
                let keep = lanes(bits);
                let mut acc = [0.0f32; 32];
                for j in 0..32 {
                    acc[j] = term(xs[j], inv_t, max) * keep[j];
                }
                z += f64::from(acc.iter().sum::<f32>());
            }
            _ => {
                let mut b = bits;
                while b != 0 {
                    z += f64::from(term(xs[b.trailing_zeros() as usize], inv_t, max));
                    b &= b - 1;
                }
            }
        }
    }
    z
}

/// A row's choice: the token and its log-probability (when asked for), or why none.
pub type Pick = Result<(u32, Option<f32>), NothingAllowed>;

/// How a row is drawn on a device ([`Sampler::device_draw`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceDraw {
    /// 1 / temperature; 0 for greedy.
    pub inv_temperature: f32,
    /// The key of this draw's random numbers (from the request's stream).
    pub key: u64,
}

/// No token can be chosen: every logit of the row is −∞ (or NaN).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no token is allowed in this row")]
pub struct NothingAllowed;

impl Sampler {
    /// A sampler for `params`.
    pub fn new(params: SamplingParams) -> Self {
        let rng = rand::rngs::StdRng::seed_from_u64(params.seed);
        Self {
            params,
            rng,
            counts: HashMap::new(),
            cand: Vec::new(),
            top: Vec::new(),
            prompt: Default::default(),
        }
    }

    /// A copy (same parameters, random stream, counts), its buffers reserved to this
    /// sampler's capacity: a second draw from it, timed beside this one's, does not pay
    /// for growing what this one already grew (the router's paired draws).
    pub fn twin(&self) -> Sampler {
        let mut t = self.clone();
        t.cand.reserve(self.cand.capacity().saturating_sub(t.cand.len()));
        t.top.reserve(self.top.capacity().saturating_sub(t.top.len()));
        t.counts.reserve(self.counts.capacity().saturating_sub(t.counts.len()));
        t
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The prompt's tokens count as seen for the repetition penalty (TGI's and vLLM's
    /// contract: over prompt and output), not for the frequency and presence penalties
    /// (OpenAI's: over the output). Nothing is kept without a repetition penalty.
    ///
    /// ```
    /// use grammask_router::sampling::{Sampler, SamplingParams};
    /// let params = SamplingParams { repetition_penalty: Some(10.0), ..Default::default() };
    /// let mut s = Sampler::new(params);
    /// s.see_prompt(&[1]);
    /// assert_eq!(s.sample(&mut [1.0, 3.0, 2.0])?.0, 2);
    /// # Ok::<(), grammask_router::sampling::NothingAllowed>(())
    /// ```
    pub fn see_prompt(&mut self, ids: &[u32]) {
        if self.params.repetition_penalty.is_some() {
            self.prompt.extend(ids);
        }
    }

    /// The [`SamplingParams::top_logprobs`] most likely tokens of the last choice, most
    /// likely first, with their log-probabilities (empty unless asked for).
    ///
    /// ```
    /// use grammask_router::sampling::{Sampler, SamplingParams};
    /// let mut s = Sampler::new(SamplingParams { top_logprobs: 2, ..Default::default() });
    /// let (t, lp) = s.sample_masked(&mut [1.0, 3.0, 2.0, 9.0], &[0b0111])?;
    /// let top = s.take_top();
    /// assert_eq!((t, top[0].0, top[1].0), (1, 1, 2));
    /// assert_eq!(Some(top[0].1), lp);
    /// # Ok::<(), grammask_router::sampling::NothingAllowed>(())
    /// ```
    pub fn take_top(&mut self) -> Vec<(u32, f32)> {
        std::mem::take(&mut self.top)
    }

    /// Token `id`, drawn from the `allowed` logits divided by `t` (`max`: their largest,
    /// when the draw knew it), noted, with its log-probability and the most likely tokens
    /// as asked — one pass for the normalizer, a candidate list only for the top tokens.
    fn chosen(
        &mut self,
        logits: &[f32],
        allowed: Allowed<'_>,
        id: usize,
        t: f32,
        max: Option<f32>,
    ) -> (u32, Option<f32>) {
        let (want_lp, want_top) = (self.params.logprobs, self.params.top_logprobs > 0);
        if !(want_lp || want_top) {
            return (self.note(id as u32), None);
        }
        let max = max.unwrap_or_else(|| {
            let mut m = f32::NEG_INFINITY;
            allowed.each(|i| {
                if logits[i].is_finite() {
                    m = m.max(logits[i] / t);
                }
            });
            m
        });
        let log_z = sum_exp(logits, allowed, t, max).ln();
        if want_top {
            self.cand.clear();
            let cand = &mut self.cand;
            allowed.each(|i| {
                if logits[i].is_finite() {
                    cand.push((i as u32, logits[i] / t));
                }
            });
            self.keep_top(max, log_z);
        }
        let lp = want_lp.then(|| (f64::from(logits[id] / t - max) - log_z) as f32);
        (self.note(id as u32), lp)
    }

    /// The `n` most likely candidates, log-probabilities against `log_z` (the
    /// candidates' log normalizer, their logits shifted by `max`).
    fn keep_top(&mut self, max: f32, log_z: f64) {
        let n = self.params.top_logprobs.min(self.cand.len());
        self.top.clear();
        if n == 0 {
            return;
        }
        self.select_head(n);
        self.top.extend(self.cand[..n].iter().map(|&(id, x)| (id, (f64::from(x - max) - log_z) as f32)));
    }

    /// Chooses a token from `logits` (modified in place by the penalties) and returns
    /// it with its log-probability under the distribution it was drawn from (`None`
    /// unless [`SamplingParams::logprobs`]).
    ///
    /// ```
    /// use grammask_router::sampling::{Sampler, SamplingParams};
    /// let mut s = Sampler::new(SamplingParams { do_sample: true, seed: 1, top_k: Some(2), ..Default::default() });
    /// let mut logits = [0.0, f32::NEG_INFINITY, 3.0, 2.9];
    /// let (t, _) = s.sample(&mut logits)?;
    /// assert!(t == 2 || t == 3);
    /// # Ok::<(), grammask_router::sampling::NothingAllowed>(())
    /// ```
    pub fn sample(&mut self, logits: &mut [f32]) -> Pick {
        self.penalize(logits);
        let n = logits.len();
        self.choose(logits, Allowed::All(n))
    }

    /// [`sample`](Self::sample) under `mask` (its bitmask row: bit `t` set = token `t`
    /// allowed), whether or not the row was masked first: the same choice, with the
    /// same random draws, as masking the row (−∞ where the bit is clear) and sampling
    /// it, looking only at the allowed tokens. This is how host logits are masked: the
    /// sampler reads every logit anyway, so reading the mask beside it replaces a
    /// memory-bound write of −∞ over the row; and a grammar usually allows few tokens,
    /// so most of the row is not read at all.
    ///
    /// ```
    /// use grammask_router::sampling::{Sampler, SamplingParams};
    /// let raw = [0.5, 9.0, 3.0, 7.0, 1.0];
    /// let mask = [0b10101u32]; // tokens 0, 2 and 4
    /// let mut masked = [0.5, f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, 1.0];
    /// let (mut a, mut b) = (Sampler::new(SamplingParams::default()), Sampler::new(SamplingParams::default()));
    /// assert_eq!(a.sample_masked(&mut raw.clone(), &mask), b.sample(&mut masked));
    /// assert_eq!(a.sample_masked(&mut raw.clone(), &mask)?.0, 2);
    /// # Ok::<(), grammask_router::sampling::NothingAllowed>(())
    /// ```
    pub fn sample_masked(&mut self, logits: &mut [f32], mask: &[u32]) -> Pick {
        self.penalize(logits);
        let n = logits.len();
        self.choose(logits, Allowed::Mask(mask, n))
    }

    /// The choice among the finite logits of the `allowed` tokens, visited in
    /// increasing order (ties go to the lowest id, as a scan of the whole row would).
    fn choose(&mut self, logits: &[f32], allowed: Allowed<'_>) -> Pick {
        let p = &self.params;
        let sampling = p.do_sample && p.temperature > 0.0;
        if !sampling {
            // Greedy: one pass, no candidate list (the common serving case at scale).
            let (id, best) = argmax(logits, allowed).ok_or(NothingAllowed)?;
            return Ok(self.chosen(logits, allowed, id, 1.0, Some(best)));
        }
        if self.gumbel_only() {
            // Temperature alone: the device kernel's draw (`device.cu`), so that the same
            // seed gives the same tokens whether the logits are on the host or a GPU.
            let key = self.rng.gen::<u64>();
            let id = gumbel_max(logits, allowed, 1.0 / p.temperature, key).ok_or(NothingAllowed)?;
            return Ok(self.chosen(logits, allowed, id, p.temperature, None));
        }
        let t = p.temperature;
        self.cand.clear();
        let cand = &mut self.cand;
        allowed.each(|i| {
            if logits[i].is_finite() {
                cand.push((i as u32, logits[i] / t));
            }
        });
        if self.cand.is_empty() {
            return Err(NothingAllowed);
        }
        let max = self.cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
        // The full normalizer: top-p's mass is over the whole distribution.
        let z: f64 = self.cand.iter().map(|c| f64::from(c.1 - max).exp()).sum();
        let k = p.top_k.filter(|&k| k > 0).unwrap_or(usize::MAX).min(self.cand.len());
        let top_p = p.top_p.filter(|&q| q > 0.0 && q < 1.0);
        // Only the kept head is sorted: select it first (linear), so that top-k/top-p
        // over a 150k vocabulary does not sort all of it.
        let keep = match top_p {
            None => k,
            Some(q) => {
                let mut head = k.min(64);
                loop {
                    self.select_head(head);
                    let mut mass = 0.0;
                    let found = self.cand[..head].iter().position(|c| {
                        mass += f64::from(c.1 - max).exp() / z;
                        mass >= f64::from(q)
                    });
                    match found {
                        Some(i) => break i + 1,
                        None if head == k => break k,
                        None => head = (head * 4).min(k),
                    }
                }
            }
        };
        if keep < self.cand.len() {
            self.select_head(keep);
            self.cand.truncate(keep);
        }
        if let Some(mass) = self.params.typical_p.filter(|&q| q > 0.0 && q < 1.0) {
            self.keep_typical(max, f64::from(mass));
        }
        let total: f64 = self.cand.iter().map(|c| f64::from(c.1 - max).exp()).sum();
        let mut draw = self.rng.gen::<f64>() * total;
        let mut chosen = self.cand[self.cand.len() - 1];
        for &c in &self.cand {
            draw -= f64::from(c.1 - max).exp();
            if draw <= 0.0 {
                chosen = c;
                break;
            }
        }
        let lp = self.params.logprobs.then(|| (f64::from(chosen.1 - max) - total.ln()) as f32);
        self.keep_top(max, total.ln());
        Ok((self.note(chosen.0), lp))
    }

    /// How to draw this request's next token on a device: `Some` when the choice
    /// needs nothing but the row (greedy, or temperature alone: drawn by the
    /// Gumbel-max trick with a key taken from the request's random stream, so the
    /// same seed gives the same tokens), `None` when top-k, top-p or penalties need
    /// the whole row on the host ([`Sampler::sample`]).
    pub fn device_draw(&mut self) -> Option<DeviceDraw> {
        let p = &self.params;
        if self.needs_host() {
            return None;
        }
        if p.do_sample && p.temperature > 0.0 {
            let inv_temperature = 1.0 / p.temperature;
            Some(DeviceDraw { inv_temperature, key: self.rng.gen() })
        } else {
            Some(DeviceDraw { inv_temperature: 0.0, key: 0 })
        }
    }

    /// Keeps the candidates whose surprise (−log p) is closest to the entropy of their
    /// distribution, fewest first, until they hold `mass` of it (at least one): the
    /// typical decoding of Meister et al. as Hugging Face's `TypicalLogitsWarper` does it.
    fn keep_typical(&mut self, max: f32, mass: f64) {
        let z: f64 = self.cand.iter().map(|c| f64::from(c.1 - max).exp()).sum();
        let log_z = z.ln();
        let logp = |x: f32| f64::from(x - max) - log_z;
        let entropy: f64 = -self.cand.iter().map(|c| logp(c.1).exp() * logp(c.1)).sum::<f64>();
        self.cand.sort_by(|a, b| {
            let (da, db) = ((-logp(a.1) - entropy).abs(), (-logp(b.1) - entropy).abs());
            da.total_cmp(&db).then(a.0.cmp(&b.0))
        });
        let mut held = 0.0;
        let mut keep = self.cand.len();
        for (i, c) in self.cand.iter().enumerate() {
            held += logp(c.1).exp();
            if held >= mass {
                keep = i + 1;
                break;
            }
        }
        self.cand.truncate(keep.max(1));
    }

    /// Whether a choice goes beyond the temperature: top-k, top-p, typical sampling,
    /// penalties, a logit bias (the host's general draw).
    fn general(&self) -> bool {
        let p = &self.params;
        p.top_k.is_some_and(|k| k > 0)
            || p.top_p.is_some_and(|q| q > 0.0 && q < 1.0)
            || p.repetition_penalty.is_some()
            || p.frequency_penalty.is_some()
            || p.presence_penalty.is_some()
            || !p.logit_bias.is_empty()
            || p.typical_p.is_some()
    }

    /// Whether a choice needs the whole row on the host: the general draw, or the top
    /// tokens listed (computed from the row, the token drawn as the device would).
    fn needs_host(&self) -> bool {
        self.general() || self.params.top_logprobs > 0
    }

    /// Whether this request's draws are the device kernel's ([`gumbel_max`]): sampling at a
    /// temperature, nothing else.
    fn gumbel_only(&self) -> bool {
        self.params.do_sample && self.params.temperature > 0.0 && !self.general()
    }

    /// Moves the `n` largest candidates to the front, sorted descending.
    fn select_head(&mut self, n: usize) {
        let by = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if n < self.cand.len() {
            self.cand.select_nth_unstable_by(n, by);
        }
        self.cand[..n].sort_unstable_by(by);
    }

    fn penalize(&self, logits: &mut [f32]) {
        for &(id, bias) in &self.params.logit_bias {
            if let Some(x) = logits.get_mut(id as usize) {
                *x += bias;
            }
        }
        let p = &self.params;
        let (rep, freq, pres) = (p.repetition_penalty, p.frequency_penalty, p.presence_penalty);
        if !self.counts_tokens() {
            return;
        }
        // Prompt tokens not generated yet: the repetition penalty only.
        if let Some(r) = rep.filter(|&r| r > 0.0) {
            for id in self.prompt.iter().filter(|id| !self.counts.contains_key(id)) {
                if let Some(x) = logits.get_mut(*id as usize) {
                    *x = if *x > 0.0 { *x / r } else { *x * r };
                }
            }
        }
        for (&id, &n) in &self.counts {
            let Some(x) = logits.get_mut(id as usize) else { continue };
            if let Some(r) = rep.filter(|&r| r > 0.0) {
                *x = if *x > 0.0 { *x / r } else { *x * r };
            }
            if let Some(f) = freq {
                *x -= f * n as f32;
            }
            if let Some(q) = pres {
                *x -= q;
            }
        }
    }

    /// Whether a penalty reads the counts of generated tokens.
    fn counts_tokens(&self) -> bool {
        let p = &self.params;
        p.repetition_penalty.is_some() || p.frequency_penalty.is_some() || p.presence_penalty.is_some()
    }

    fn note(&mut self, id: u32) -> u32 {
        // Counts feed the penalties only.
        if self.counts_tokens() {
            *self.counts.entry(id).or_default() += 1;
        }
        id
    }

    /// Records tokens chosen elsewhere (jump-forward) for the penalties.
    pub fn record(&mut self, ids: &[u32]) {
        for &id in ids {
            self.note(id);
        }
    }

    /// Takes back tokens drawn but not kept (a verify step's draws past where the grammar
    /// forced text or the sequence ended): the penalties count them no more.
    pub fn forget(&mut self, ids: &[u32]) {
        if !self.counts_tokens() {
            return;
        }
        for id in ids {
            if let Some(n) = self.counts.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(id);
                }
            }
        }
    }

    /// Verifies a draft tree: draws at the root from its logits row (under its mask), and
    /// while the token drawn is a child's, moves to that child and draws again from its
    /// row — each draw from the model's distribution at that node, penalized on the
    /// node's own context (the tokens drawn before it are noted first) and masked by the
    /// node's mask. A child marked in `forced` (the grammar's jump-forward tokens after
    /// its parent) is taken without a draw, as jump-forward would append it. It stops at a
    /// token no child has (the bonus token), at a stop token, or when nothing is allowed.
    ///
    /// Every token is thus drawn exactly as non-speculative decoding would draw it, given
    /// the same logits: greedy outputs are the same token for token, sampled ones follow
    /// the same distribution (for deterministic drafts this is SpecInfer's multi-candidate
    /// rejection sampling, whose residual after rejecting point-mass candidates is the
    /// target with them removed). `rows` holds the tree's logits rows, node `v`'s at `v`;
    /// `masks(v)` is node `v`'s mask (`None`: every token allowed).
    ///
    /// ```
    /// use grammask::matcher::DraftTree;
    /// use grammask_router::sampling::{Sampler, SamplingParams};
    /// // root → 1:"2" → 2:"0"; greedy takes 2 at the root, then 0 at node 1, then 1 at node 2.
    /// let tree = DraftTree::from_parents(&[-1, 2, 0], &[-1, 0, 1])?;
    /// let mut rows = vec![0.0, 1.0, 5.0, /* node 1 */ 4.0, 1.0, 0.0, /* node 2 */ 0.0, 3.0, 1.0];
    /// let mut s = Sampler::new(SamplingParams::default());
    /// let w = s.verify_tree(&mut rows, 3, &tree, &[false; 3], |_| None, &[]);
    /// assert_eq!(w.tokens.iter().map(|t| t.0).collect::<Vec<_>>(), [2, 0, 1]);
    /// assert_eq!(w.path, [1, 2]);
    /// # Ok::<(), grammask::Error>(())
    /// ```
    pub fn verify_tree<'m>(
        &mut self,
        rows: &mut [f32],
        vocab: usize,
        tree: &grammask::matcher::DraftTree,
        forced: &[bool],
        masks: impl Fn(usize) -> Option<&'m [u32]>,
        stop_tokens: &[u32],
    ) -> TreeWalk {
        let mut walk = TreeWalk::default();
        let mut at = 0;
        let asks_top = self.params.top_logprobs > 0;
        loop {
            // Forced children: taken as jump-forward takes them (log-probability 0).
            while let Some(c) = tree.children(at).find(|&c| forced.get(c).copied().unwrap_or(false)) {
                let Some(t) = tree.token(c) else { break };
                self.record(&[t]);
                let top = if asks_top { vec![(t, 0.0)] } else { Vec::new() };
                walk.tokens.push((t, Some(0.0), top));
                walk.forced.push(true);
                walk.path.push(c);
                at = c;
            }
            let Some(row) = rows.get_mut(at * vocab..(at + 1) * vocab) else { break };
            let pick = match masks(at) {
                Some(m) => self.sample_masked(row, m),
                None => self.sample(row),
            };
            let (t, lp) = match pick {
                Ok(p) => p,
                Err(e) => {
                    walk.error = Some(e);
                    break;
                }
            };
            walk.tokens.push((t, lp, self.take_top()));
            walk.forced.push(false);
            if stop_tokens.contains(&t) {
                break;
            }
            match tree
                .children(at)
                .find(|&c| tree.token(c) == Some(t) && !forced.get(c).copied().unwrap_or(false))
            {
                Some(c) => {
                    walk.path.push(c);
                    at = c;
                }
                None => break,
            }
        }
        walk
    }
}

/// A token a walk took: its id, its log-probability (when asked for; 0 for a forced
/// token) and the most likely tokens where it was drawn.
pub type Drawn = (u32, Option<f32>, Vec<(u32, f32)>);

/// What [`Sampler::verify_tree`] drew.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TreeWalk {
    /// The tokens drawn, in order, with their log-probabilities and top tokens: the draft
    /// path's tokens, then the one drawn after it.
    pub tokens: Vec<Drawn>,
    /// Per token, whether it was forced (taken without a draw).
    pub forced: Vec<bool>,
    /// The draft nodes accepted, in order (`tokens[i]` is node `path[i]`'s token).
    pub path: Vec<usize>,
    /// Nothing was allowed at the last node reached.
    pub error: Option<NothingAllowed>,
}

/// `device.cu`'s mix of a key and a column (SplitMix64's finalizer).
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The draw of `device.cu`'s `grammask_sample_rows` for one row, on the host, step for
/// step in `f32`: the argmax over the allowed finite logits of `x · inv_t` plus Gumbel
/// noise keyed by `key` and the column (ties to the lowest column). The host sampler
/// draws temperature-only rows with it, so the same seed gives the same tokens on both.
fn gumbel_max(logits: &[f32], allowed: Allowed<'_>, inv_t: f32, key: u64) -> Option<usize> {
    // The noise is below 17.4 (u ≤ 1 − 2⁻²⁵): a logit that far under the best key so far
    // cannot win, and its noise is not computed — the same argmax, far fewer logarithms.
    const NOISE_MAX: f32 = 18.0;
    let (mut best, mut best_i) = (f32::NEG_INFINITY, usize::MAX);
    allowed.each(|j| {
        let x = logits[j];
        if !x.is_finite() {
            return;
        }
        let mut s = x * inv_t;
        if !s.is_finite() {
            s = 3.0e38f32.copysign(s);
        }
        if s + NOISE_MAX < best {
            return;
        }
        let h = mix64(key ^ (j as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let u = ((h >> 40) as f32 + 0.5) * (1.0 / 16_777_216.0);
        let k = s - (-u.ln()).ln();
        if k > best || (k == best && j < best_i) {
            (best, best_i) = (k, j);
        }
    });
    (best_i != usize::MAX).then_some(best_i)
}

/// What [`DeviceSampler`] would draw for `sampler`'s next row, emulated on the host:
/// its [`Sampler::device_draw`] (`None`: a row the device path samples on the host) and
/// then the kernel's draw (greedy for `inv_temperature == 0`). For tests of host/device
/// agreement on machines without a GPU.
pub fn emulate_device_draw(sampler: &mut Sampler, logits: &[f32]) -> Option<Option<u32>> {
    let d = sampler.device_draw()?;
    let all = Allowed::All(logits.len());
    if d.inv_temperature > 0.0 {
        return Some(gumbel_max(logits, all, d.inv_temperature, d.key).map(|i| i as u32));
    }
    let (mut best, mut best_i) = (f32::NEG_INFINITY, usize::MAX);
    all.each(|j| {
        if logits[j].is_finite() && (logits[j] > best || best_i == usize::MAX) {
            (best, best_i) = (logits[j], j);
        }
    });
    Some((best_i != usize::MAX).then_some(best_i as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_normaliser_is_the_f64_sum() {
        // Against `f64::exp` token by token: rows flat and spread, −∞ and NaN among them,
        // masks full, dense, sparse and ragged (a row not a multiple of 32 long).
        let mut state = 11u64;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        };
        for (n, spread) in [(1000usize, 10.0f32), (128_256, 10.0), (517, 200.0), (31, 1.0)] {
            let mut row: Vec<f32> =
                (0..n).map(|_| (next() % 100_000) as f32 / 100_000.0 * spread - spread / 2.0).collect();
            row[3 % n] = f32::NEG_INFINITY;
            row[7 % n] = f32::NAN;
            for density in [1.0, 0.97, 0.5, 0.01] {
                let mask: Vec<u32> = (0..n.div_ceil(32))
                    .map(|_| {
                        (0..32).fold(0u32, |m, b| {
                            if (next() % 1000) as f64 / 1000.0 < density {
                                m | 1 << b
                            } else {
                                m
                            }
                        })
                    })
                    .collect();
                for t in [1.0f32, 0.7] {
                    for allowed in [Allowed::All(n), Allowed::Mask(&mask, n)] {
                        let mut max = f32::NEG_INFINITY;
                        allowed.each(|i| {
                            if row[i].is_finite() {
                                max = max.max(row[i] / t)
                            }
                        });
                        let mut want = 0.0f64;
                        allowed.each(|i| {
                            if row[i].is_finite() {
                                want += f64::from(row[i] / t - max).exp()
                            }
                        });
                        let got = sum_exp(&row, allowed, t, max);
                        let rel = if want == 0.0 { got } else { (got - want).abs() / want };
                        assert!(rel < 1e-6, "n {n} spread {spread} density {density} t {t}: {got} vs {want}");
                    }
                }
            }
        }
        // The polynomial itself, over its whole range.
        for k in 0..=100_000 {
            let x = -87.0 * k as f32 / 100_000.0;
            let (got, want) = (f64::from(exp_nonpositive(x)), f64::from(x).exp());
            assert!((got - want).abs() / want < 3e-7, "e^{x}: {got} vs {want}");
        }
    }

    /// A row of `n` logits, some masked (−∞), some tied, from `seed`.
    fn row(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let h = mix64(seed ^ i as u64);
                match h % 10 {
                    0..=2 => f32::NEG_INFINITY,
                    3 => 1.5,
                    _ => (h >> 40) as f32 / 16_777_216.0 * 8.0 - 4.0,
                }
            })
            .collect()
    }

    #[test]
    fn host_draws_are_the_device_kernels_for_the_same_seed() {
        // Sampling at a temperature (and greedy): the host sampler and the device path,
        // emulated step for step (`emulate_device_draw`: the key from the request's
        // stream, the kernel's Gumbel-max), draw the same tokens, masked rows included.
        for seed in 0..40u64 {
            for (temperature, do_sample) in [(0.7f32, true), (1.0, true), (1.6, true), (1.0, false)] {
                let params = SamplingParams { do_sample, temperature, seed, ..SamplingParams::default() };
                let (mut host, mut device) = (Sampler::new(params.clone()), Sampler::new(params));
                for step in 0..20 {
                    let logits = row(3000, seed * 100 + step);
                    let want = emulate_device_draw(&mut device, &logits).unwrap();
                    let got = host.sample(&mut logits.clone()).ok().map(|p| p.0);
                    assert_eq!(got, want, "seed {seed}, T {temperature}, step {step}");
                }
            }
        }
        // Under a mask read beside the row (the host's way) as under −∞ written over it
        // (the device's way).
        let mask: Vec<u32> = (0..3000usize.div_ceil(32)).map(|w| mix64(w as u64) as u32).collect();
        let params =
            SamplingParams { do_sample: true, temperature: 0.8, seed: 9, ..SamplingParams::default() };
        let (mut host, mut device) = (Sampler::new(params.clone()), Sampler::new(params));
        for step in 0..50 {
            let logits = row(3000, step);
            let masked: Vec<f32> = (0..3000)
                .map(|i| if mask[i / 32] >> (i % 32) & 1 == 1 { logits[i] } else { f32::NEG_INFINITY })
                .collect();
            let want = emulate_device_draw(&mut device, &masked).unwrap();
            assert_eq!(host.sample_masked(&mut logits.clone(), &mask).ok().map(|p| p.0), want, "step {step}");
        }
        // Top-k is drawn on the host by both (the device path copies the row).
        let mut s =
            Sampler::new(SamplingParams { do_sample: true, top_k: Some(5), ..SamplingParams::default() });
        assert_eq!(emulate_device_draw(&mut s, &row(100, 1)), None);
    }

    #[test]
    fn skipping_hopeless_logits_draws_what_the_kernel_draws() {
        // The kernel computes every column's noise; the host skips logits more than the
        // largest noise below the best key. Same argmax on wide rows, ties and all.
        let kernel = |logits: &[f32], inv_t: f32, key: u64| {
            let (mut best, mut best_i) = (f32::NEG_INFINITY, usize::MAX);
            for (j, &x) in logits.iter().enumerate() {
                if !x.is_finite() {
                    continue;
                }
                let h = mix64(key ^ (j as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
                let u = ((h >> 40) as f32 + 0.5) * (1.0 / 16_777_216.0);
                let k = x * inv_t - (-u.ln()).ln();
                if k > best || (k == best && j < best_i) {
                    (best, best_i) = (k, j);
                }
            }
            (best_i != usize::MAX).then_some(best_i)
        };
        for seed in 0..300u64 {
            let spread = [1.0f32, 10.0, 40.0][seed as usize % 3];
            let logits: Vec<f32> = row(2000, seed).iter().map(|x| x * spread).collect();
            for inv_t in [0.5f32, 1.0, 3.0] {
                let key = mix64(seed ^ 77);
                assert_eq!(gumbel_max(&logits, Allowed::All(2000), inv_t, key), kernel(&logits, inv_t, key));
            }
        }
    }

    #[test]
    fn gumbel_draws_follow_the_softmax_at_the_temperature() {
        let mut logits = [0.0f32, 1.0, 2.0, f32::NEG_INFINITY];
        let mut counts = [0usize; 4];
        let mut s =
            Sampler::new(SamplingParams { do_sample: true, temperature: 0.5, seed: 3, ..Default::default() });
        for _ in 0..20_000 {
            counts[s.sample(&mut logits).unwrap().0 as usize] += 1;
        }
        let z: f64 = [0.0f64, 2.0, 4.0].iter().map(|x| x.exp()).sum();
        for (t, &n) in counts[..3].iter().enumerate() {
            let want = (2.0 * t as f64).exp() / z;
            let got = n as f64 / 20_000.0;
            assert!((got - want).abs() < 0.015, "token {t}: {got} vs {want}");
        }
        assert_eq!(counts[3], 0);
    }

    #[test]
    fn typical_sampling_keeps_the_tokens_nearest_the_entropy() {
        // p = 0.4, 0.3, 0.3: entropy 1.089 nats; surprises 0.916, 1.204, 1.204 — the two
        // 0.3 tokens are the more typical and hold 0.6 ≥ 0.5 of the mass: the most likely
        // token is never drawn.
        let logits = [0.4f32.ln(), 0.3f32.ln(), 0.3f32.ln()];
        let mut seen = [0usize; 3];
        for seed in 0..200 {
            let params = SamplingParams { do_sample: true, typical_p: Some(0.5), seed, ..Default::default() };
            let (t, _) = Sampler::new(params).sample(&mut logits.clone()).unwrap();
            seen[t as usize] += 1;
        }
        assert_eq!(seen[0], 0, "{seen:?}");
        assert!(seen[1] > 0 && seen[2] > 0, "{seen:?}");
        // With all the mass asked for, every token stays.
        let mut all = [0usize; 3];
        for seed in 0..200 {
            let params =
                SamplingParams { do_sample: true, typical_p: Some(0.99), seed, ..Default::default() };
            all[Sampler::new(params).sample(&mut logits.clone()).unwrap().0 as usize] += 1;
        }
        assert!(all.iter().all(|&n| n > 0), "{all:?}");
    }

    #[test]
    fn the_prompt_counts_for_the_repetition_penalty_only() {
        // Token 1 is in the prompt: the repetition penalty moves the choice off it; the
        // frequency and presence penalties (OpenAI's, over the output) do not see it.
        let logits = [1.0f32, 3.0, 2.0];
        let greedy = |params: SamplingParams| {
            let mut s = Sampler::new(params);
            s.see_prompt(&[1]);
            s.sample(&mut logits.clone()).unwrap().0
        };
        assert_eq!(greedy(SamplingParams { repetition_penalty: Some(2.0), ..Default::default() }), 2);
        assert_eq!(greedy(SamplingParams { presence_penalty: Some(2.0), ..Default::default() }), 1);
        assert_eq!(greedy(SamplingParams { frequency_penalty: Some(2.0), ..Default::default() }), 1);
        assert_eq!(greedy(SamplingParams::default()), 1);
    }

    #[test]
    fn asking_for_the_top_tokens_changes_no_draw() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        for seed in 0..50 {
            // Both draws: the general one (top-p) and the device's (temperature alone).
            let base = SamplingParams {
                do_sample: true,
                temperature: 0.9,
                top_p: if seed % 2 == 0 { Some(0.8) } else { None },
                seed,
                ..Default::default()
            };
            let mut plain = Sampler::new(base.clone());
            let mut asking = Sampler::new(SamplingParams { top_logprobs: 5, ..base });
            for _ in 0..5 {
                let a = plain.sample(&mut logits.clone()).unwrap();
                let b = asking.sample(&mut logits.clone()).unwrap();
                assert_eq!(a, b, "seed {seed}");
                let top = asking.take_top();
                assert!(!top.is_empty() && top.len() <= 5);
                assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
                // The chosen token is listed when it is likelier than the last listed.
                if b.1.unwrap() > top[top.len() - 1].1 {
                    assert!(top.iter().any(|&(id, lp)| id == b.0 && lp == b.1.unwrap()), "{top:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn logit_bias_moves_the_choice_but_never_past_the_mask_and_presence_penalizes_once() {
        let raw = [2.0, 1.0, 0.0, 0.5];
        let params = SamplingParams { logit_bias: vec![(2, 5.0), (3, 100.0)], ..Default::default() };
        // Token 3 is biased most but masked out: token 2, biased, wins among 0–2.
        let mask = [0b0111u32];
        let mut s = Sampler::new(params.clone());
        assert_eq!(s.sample_masked(&mut raw.clone(), &mask).unwrap().0, 2);
        assert_eq!(Sampler::new(params).sample(&mut raw.clone()).unwrap().0, 3);
        // A presence penalty of 1.5 on token 0 once it was generated, however often.
        let params = SamplingParams { presence_penalty: Some(1.5), ..Default::default() };
        let mut s = Sampler::new(params);
        s.record(&[0, 0, 0]);
        let mut l = raw;
        assert_eq!(s.sample(&mut l).unwrap().0, 1);
        assert_eq!(l[0], 0.5);
    }

    #[test]
    fn greedy_takes_the_largest_finite_logit() {
        let mut s = Sampler::new(SamplingParams::default());
        let mut l = [1.0, f32::NEG_INFINITY, 0.5, f32::NAN];
        let (t, lp) = s.sample(&mut l).unwrap();
        assert_eq!(t, 0);
        let want = -(1.0f64 + (-0.5f64).exp()).ln();
        assert!((f64::from(lp.unwrap()) - want).abs() < 1e-6);
        let mut none = [f32::NEG_INFINITY; 3];
        assert_eq!(s.sample(&mut none), Err(NothingAllowed));
    }

    /// The block argmax is the scan that keeps the first of the largest allowed finite
    /// logits: rows of every length around a block, ties everywhere (few distinct
    /// values), ±∞, NaN, −0 beside +0, masks from empty to full and holey.
    #[test]
    fn the_block_argmax_is_the_first_largest_allowed_finite_logit() {
        let mut state = 3u64;
        let mut next = move || {
            state = mix64(state);
            state
        };
        for case in 0..4000 {
            let n = 1 + (next() % 200) as usize;
            let distinct = 1 + next() % 6;
            let row: Vec<f32> = (0..n)
                .map(|_| match next() % 40 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    3 => -0.0,
                    4 => 0.0,
                    _ => (next() % distinct) as f32 - 2.0,
                })
                .collect();
            let density = next() % 5;
            let mask: Vec<u32> = (0..n.div_ceil(32))
                .map(|_| match density {
                    0 => 0,
                    1 => u32::MAX,
                    2 => next() as u32 | next() as u32,
                    3 => !(1u32 << (next() % 32)),
                    _ => next() as u32 & next() as u32 & next() as u32,
                })
                .collect();
            for (block, &word) in row.chunks_exact(32).zip(&mask) {
                let block: &[f32; 32] = block.try_into().unwrap();
                // Equal values (of −0 and +0, either may come back: `maxps` keeps its second
                // operand on a tie).
                assert_eq!(block_max(block, word), block_max_portable(block, word), "case {case}");
            }
            for allowed in [Allowed::All(n), Allowed::Mask(&mask, n)] {
                let (mut want, mut best) = (None, f32::NEG_INFINITY);
                allowed.each(|i| {
                    if row[i] > best && row[i].is_finite() {
                        (want, best) = (Some(i), row[i]);
                    }
                });
                let got = argmax(&row, allowed);
                assert_eq!(got.map(|g| g.0), want, "case {case}: {row:?} under {allowed:?}");
                if let Some((i, v)) = got {
                    assert_eq!(v.to_bits(), row[i].to_bits(), "case {case}");
                }
            }
        }
    }

    #[test]
    fn sampling_never_picks_a_masked_token_and_respects_top_k_and_top_p() {
        let mut logits: Vec<f32> = (0..5000).map(|i| (i % 97) as f32 / 10.0).collect();
        for i in (0..5000).step_by(3) {
            logits[i] = f32::NEG_INFINITY;
        }
        let params = SamplingParams { do_sample: true, temperature: 0.7, seed: 3, ..Default::default() };
        let mut s = Sampler::new(params.clone());
        for _ in 0..200 {
            let (t, lp) = s.sample(&mut logits.clone()).unwrap();
            assert!(logits[t as usize].is_finite() && lp.unwrap() <= 0.0);
        }
        let mut s = Sampler::new(SamplingParams { top_k: Some(3), ..params.clone() });
        let mut best: Vec<u32> = (0..5000u32).filter(|&i| logits[i as usize].is_finite()).collect();
        best.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
        for _ in 0..100 {
            assert!(best[..3].contains(&s.sample(&mut logits.clone()).unwrap().0));
        }
        // A tiny top_p keeps only the single most likely token.
        let mut s = Sampler::new(SamplingParams { top_p: Some(1e-6), ..params.clone() });
        assert_eq!(s.sample(&mut logits.clone()).unwrap().0, best[0]);
        // Same seed, same draws.
        let (mut a, mut b) = (Sampler::new(params.clone()), Sampler::new(params));
        for _ in 0..20 {
            assert_eq!(a.sample(&mut logits.clone()), b.sample(&mut logits.clone()));
        }
    }

    #[test]
    fn sampling_a_masked_row_among_its_allowed_ids_is_sampling_the_row() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let settings = [
            SamplingParams::default(),
            SamplingParams { do_sample: true, temperature: 0.8, ..Default::default() },
            SamplingParams { do_sample: true, top_k: Some(3), ..Default::default() },
            SamplingParams { do_sample: true, top_p: Some(0.5), ..Default::default() },
            SamplingParams { do_sample: true, repetition_penalty: Some(1.3), ..Default::default() },
            SamplingParams { frequency_penalty: Some(0.5), ..Default::default() },
        ];
        for case in 0..60 {
            // A row of 1,000 to 1,100 logits (a partial last word), a sparse or dense
            // mask, applied as the router applies it (−∞ where the bit is clear).
            let n = 1000 + case;
            let density = [0.001, 0.01, 0.5, 1.0][case % 4];
            let mut mask = vec![0u32; n.div_ceil(32)];
            for t in 0..n {
                if rng.gen::<f64>() < density {
                    mask[t / 32] |= 1 << (t % 32);
                }
            }
            // The raw row has its own values (some NaN) where the bit is clear: the
            // router samples host rows under their mask without writing −∞ first.
            let raw: Vec<f32> = (0..n)
                .map(|t| if t % 97 == 5 { f32::NAN } else { (rng.gen_range(0..40) as f32) / 8.0 }) // ties happen
                .collect();
            let logits: Vec<f32> = (0..n)
                .map(|t| if mask[t / 32] >> (t % 32) & 1 == 1 { raw[t] } else { f32::NEG_INFINITY })
                .collect();
            for params in &settings {
                let params = SamplingParams { seed: case as u64, ..params.clone() };
                let (mut a, mut b, mut c) =
                    (Sampler::new(params.clone()), Sampler::new(params.clone()), Sampler::new(params));
                for _ in 0..5 {
                    let whole = a.sample(&mut logits.clone());
                    let masked = b.sample_masked(&mut logits.clone(), &mask);
                    let fused = c.sample_masked(&mut raw.clone(), &mask);
                    assert_eq!(whole, masked, "case {case}, {:?}", a.params());
                    assert_eq!(whole, fused, "case {case} unmasked row, {:?}", a.params());
                    if let Ok((t, _)) = whole {
                        a.record(&[t]);
                        b.record(&[t]);
                        c.record(&[t]);
                    }
                }
            }
        }
    }

    #[test]
    fn penalties_push_repeated_tokens_down() {
        let mut s = Sampler::new(SamplingParams { repetition_penalty: Some(2.0), ..Default::default() });
        let mut l = [2.0, 1.5];
        assert_eq!(s.sample(&mut l).unwrap().0, 0);
        let mut l = [2.0, 1.5];
        assert_eq!(s.sample(&mut l).unwrap().0, 1); // 2.0 / 2 < 1.5
    }
}
